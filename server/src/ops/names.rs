//! Names and their limits: one maximum per kind of thing, and one rule for all of them.
//!
//! A name is trimmed, then counted in characters (not bytes): it needs 1 to the kind's
//! maximum, and no control characters anywhere in the value as sent (trimming does not
//! excuse a trailing newline, as the API documents' `pattern` says). The REST API
//! (`http::v1::extract::check_name`), the console and the CLI all call [`parse`].
//!
//! A destination's name is optional: without one it goes by its URL's host
//! (`domain::default_name`, in the domain because storage writes the notifications that
//! name a destination, and storage does not depend on this layer).

use super::OpsError;

/// What a name names; each kind has its own maximum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameKind {
    Space,
    Channel,
    Bot,
    IncomingWebhook,
    ApiKey,
    Destination,
}

impl NameKind {
    /// The longest name of this kind, in characters after trimming.
    pub const fn max_chars(self) -> usize {
        match self {
            NameKind::Space => 200,
            NameKind::Channel
            | NameKind::Bot
            | NameKind::IncomingWebhook
            | NameKind::ApiKey
            | NameKind::Destination => 100,
        }
    }

    /// The name in words, with its article: "a channel name".
    pub const fn label(self) -> &'static str {
        match self {
            NameKind::Space => "a space name",
            NameKind::Channel => "a channel name",
            NameKind::Bot => "a bot name",
            NameKind::IncomingWebhook => "a webhook name",
            NameKind::ApiKey => "an API key name",
            NameKind::Destination => "a destination name",
        }
    }
}

/// The name `raw` as it is kept (trimmed), or 422 `invalid_name` saying the rule.
pub fn parse(kind: NameKind, raw: &str) -> Result<String, OpsError> {
    let name = raw.trim();
    let max = kind.max_chars();
    if name.is_empty() || name.chars().count() > max || raw.chars().any(char::is_control) {
        return Err(OpsError::invalid(
            "invalid_name",
            format!(
                "{} needs 1 to {max} characters, not only white space, and no control characters",
                kind.label()
            ),
        ));
    }
    Ok(name.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(kind: NameKind, raw: &str) -> bool {
        matches!(
            parse(kind, raw),
            Err(OpsError::Invalid {
                code: "invalid_name",
                ..
            })
        )
    }

    #[test]
    fn a_name_is_kept_trimmed() {
        assert_eq!(parse(NameKind::Channel, "  deploys  ").unwrap(), "deploys");
    }

    #[test]
    fn the_limit_counts_characters_after_trimming() {
        let hundred = "ё".repeat(100);
        assert_eq!(parse(NameKind::Channel, &hundred).unwrap(), hundred);
        assert!(parse(NameKind::Channel, &format!("  {hundred}  ")).is_ok());
        assert!(refused(NameKind::Channel, &"x".repeat(101)));
    }

    #[test]
    fn each_kind_has_its_own_maximum() {
        assert_eq!(NameKind::Channel.max_chars(), 100);
        assert_eq!(NameKind::Bot.max_chars(), 100);
        assert_eq!(NameKind::IncomingWebhook.max_chars(), 100);
        assert_eq!(NameKind::ApiKey.max_chars(), 100);
        assert_eq!(NameKind::Destination.max_chars(), 100);
        assert_eq!(NameKind::Space.max_chars(), 200);
        assert!(parse(NameKind::Space, &"x".repeat(200)).is_ok());
        assert!(refused(NameKind::Space, &"x".repeat(201)));
    }

    #[test]
    fn empty_blank_and_control_characters_are_refused() {
        for raw in ["", "   ", "a\u{7}b", "general\n", "\u{85}x"] {
            assert!(refused(NameKind::Channel, raw), "{raw:?}");
        }
    }

    #[test]
    fn the_refusal_names_the_kind_and_its_limit() {
        let err = parse(NameKind::ApiKey, "").unwrap_err();
        assert_eq!(
            err.to_string(),
            "an API key name needs 1 to 100 characters, not only white space, and no control characters"
        );
    }
}
