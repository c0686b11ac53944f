//! A destination's own request headers (docs §2.9): which names and values are
//! allowed and how many, how a change merges into the headers a destination has, and
//! how a value is shown once it is stored (masked: values are secrets). The REST API
//! and the console both go through [`apply`] and [`mask`]; the engine sends what is
//! stored.

use crate::domain::{CustomHeaders, RESERVED_HEADERS};

use super::destinations::SettingsError;

/// The most headers a destination may have.
pub const MAX_HEADERS: usize = 20;
/// The most bytes its headers' names and values may add up to.
pub const MAX_HEADER_BYTES: usize = 4096;

/// What to do to a destination's headers. `Debug` shows the names only.
#[derive(Clone, PartialEq, Eq)]
pub enum HeaderChanges {
    /// The REST API's merge: each name given is set (`Some`) or removed (`None`); the
    /// headers not named stay as they are.
    Merge(Vec<(String, Option<String>)>),
    /// The console's form: the whole list. A value shown masked (as [`mask`] shows
    /// the current one) keeps the current value; a header left out is removed.
    Replace(Vec<(String, String)>),
}

impl std::fmt::Debug for HeaderChanges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = match self {
            HeaderChanges::Merge(m) => m.iter().map(|(n, _)| n.as_str()).collect(),
            HeaderChanges::Replace(r) => r.iter().map(|(n, _)| n.as_str()).collect(),
        };
        f.debug_tuple("HeaderChanges").field(&names).finish()
    }
}

fn refuse(code: &'static str, message: impl Into<String>) -> SettingsError {
    SettingsError {
        code,
        setting: "Headers",
        message: message.into(),
    }
}

/// How a stored value is shown (in `domain`, because the engine's attempt log shows
/// the values sent the same way).
pub use crate::domain::mask_header_value as mask;

/// The headers as shown after creation: every value masked.
pub fn masked(headers: &CustomHeaders) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|(n, v)| (n.to_owned(), mask(v)))
        .collect()
}

/// One header: a valid HTTP name (a token) that is not reserved, and a valid value
/// (visible ASCII and inner spaces or tabs, not empty).
fn check_header(name: &str, value: &str) -> Result<(), SettingsError> {
    if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
        return Err(refuse(
            "invalid_header",
            format!("{name:?} is not a valid HTTP header name"),
        ));
    }
    if RESERVED_HEADERS
        .iter()
        .any(|r| r.eq_ignore_ascii_case(name))
    {
        return Err(refuse(
            "reserved_header",
            format!(
                "{name} is set by PartyFlow Hooks or by HTTP itself and cannot be a custom header"
            ),
        ));
    }
    if value.is_empty() {
        return Err(refuse(
            "invalid_header",
            format!("the value of {name} is empty"),
        ));
    }
    let edge_space = value.starts_with([' ', '\t']) || value.ends_with([' ', '\t']);
    // `HeaderValue` also takes obs-text (bytes over 127); we take visible ASCII only, so
    // a masked value (`••••…`) can never be a value of its own.
    let ascii = value
        .bytes()
        .all(|b| b == b'\t' || (0x20..0x7f).contains(&b));
    if http::HeaderValue::from_str(value).is_err() || !ascii || edge_space {
        return Err(refuse(
            "invalid_header",
            format!(
                "the value of {name} is not a valid HTTP header value: use visible ASCII, \
                 with spaces only inside"
            ),
        ));
    }
    Ok(())
}

/// The limits of a whole set: [`MAX_HEADERS`] headers, [`MAX_HEADER_BYTES`] bytes.
fn check_limits(headers: &CustomHeaders) -> Result<(), SettingsError> {
    if headers.len() > MAX_HEADERS {
        return Err(refuse(
            "invalid_headers",
            format!(
                "a destination may have at most {MAX_HEADERS} headers, not {}",
                headers.len()
            ),
        ));
    }
    let bytes: usize = headers.iter().map(|(n, v)| n.len() + v.len()).sum();
    if bytes > MAX_HEADER_BYTES {
        return Err(refuse(
            "invalid_headers",
            format!(
                "the headers' names and values may add up to at most {MAX_HEADER_BYTES} bytes, not {bytes}"
            ),
        ));
    }
    Ok(())
}

/// The same name twice in one change (names are case-insensitive).
fn check_unique<'a>(names: impl Iterator<Item = &'a str>) -> Result<(), SettingsError> {
    let mut seen = std::collections::HashSet::new();
    for name in names {
        if !seen.insert(name.to_ascii_lowercase()) {
            return Err(refuse(
                "invalid_header",
                format!("{name} is given twice (header names are case-insensitive)"),
            ));
        }
    }
    Ok(())
}

/// The headers after `changes`, every header and the limits checked; `current` is
/// what the destination has (none for a new one).
pub fn apply(
    current: &CustomHeaders,
    changes: HeaderChanges,
) -> Result<CustomHeaders, SettingsError> {
    let next: Vec<(String, String)> = match changes {
        HeaderChanges::Merge(changes) => {
            check_unique(changes.iter().map(|(n, _)| n.as_str()))?;
            let mut next: Vec<(String, String)> = current
                .iter()
                .filter(|(n, _)| !changes.iter().any(|(c, _)| c.eq_ignore_ascii_case(n)))
                .map(|(n, v)| (n.to_owned(), v.to_owned()))
                .collect();
            for (name, value) in changes {
                if let Some(value) = value {
                    check_header(&name, &value)?;
                    next.push((name, value));
                }
            }
            next
        }
        HeaderChanges::Replace(given) => {
            check_unique(given.iter().map(|(n, _)| n.as_str()))?;
            let mut next = Vec::with_capacity(given.len());
            for (name, value) in given {
                let kept = current
                    .get(&name)
                    .filter(|v| mask(v) == value)
                    .map(str::to_owned);
                let value = kept.unwrap_or(value);
                check_header(&name, &value)?;
                next.push((name, value));
            }
            next
        }
    };
    let next = CustomHeaders::new(next);
    check_limits(&next)?;
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> CustomHeaders {
        CustomHeaders::new(
            pairs
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
        )
    }

    fn merge(pairs: &[(&str, Option<&str>)]) -> HeaderChanges {
        HeaderChanges::Merge(
            pairs
                .iter()
                .map(|(n, v)| (n.to_string(), v.map(str::to_owned)))
                .collect(),
        )
    }

    #[test]
    fn reserved_names_are_refused_in_any_case_naming_the_header() {
        for name in RESERVED_HEADERS
            .iter()
            .map(|n| n.to_string())
            .chain(["Webhook-Signature".into(), "USER-AGENT".into()])
        {
            let e = apply(&CustomHeaders::default(), merge(&[(&name, Some("x"))])).unwrap_err();
            assert_eq!(e.code, "reserved_header", "{name}");
            assert!(e.message.starts_with(&name), "{}", e.message);
            assert_eq!(e.setting, "Headers");
        }
    }

    #[test]
    fn names_and_values_must_be_valid_http() {
        let code = |n: &str, v: &str| {
            apply(&CustomHeaders::default(), merge(&[(n, Some(v))]))
                .map(|_| ())
                .map_err(|e| e.code)
        };
        assert_eq!(code("X-Team", "ops"), Ok(()));
        assert_eq!(code("Authorization", "Basic dXNlcjpw YXNz"), Ok(()));
        for bad_name in ["", "X Team", "X-Team:", "Tëam", "X\nY", ":authority"] {
            assert_eq!(code(bad_name, "v"), Err("invalid_header"), "{bad_name:?}");
        }
        for bad_value in [
            "",
            "a\r\nX-Evil: 1",
            "caf\u{e9}",
            "a\0b",
            " lead",
            "trail\t",
        ] {
            assert_eq!(
                code("X-A", bad_value),
                Err("invalid_header"),
                "{bad_value:?}"
            );
        }
    }

    #[test]
    fn count_and_size_are_limited() {
        let many: Vec<(String, Option<String>)> = (0..=MAX_HEADERS)
            .map(|i| (format!("X-H{i}"), Some("v".into())))
            .collect();
        let e = apply(
            &CustomHeaders::default(),
            HeaderChanges::Merge(many.clone()),
        )
        .unwrap_err();
        assert_eq!(e.code, "invalid_headers");
        assert!(apply(
            &CustomHeaders::default(),
            HeaderChanges::Merge(many[..MAX_HEADERS].to_vec())
        )
        .is_ok());

        let big = "v".repeat(MAX_HEADER_BYTES - 5);
        assert!(apply(&CustomHeaders::default(), merge(&[("X-Big", Some(&big))])).is_ok());
        let e = apply(
            &CustomHeaders::default(),
            merge(&[("X-Big", Some(&big)), ("X-1", Some("v"))]),
        )
        .unwrap_err();
        assert_eq!(e.code, "invalid_headers");
        assert!(e.message.contains("4096"), "{}", e.message);
    }

    #[test]
    fn a_merge_changes_only_the_headers_it_names() {
        let current = headers(&[("X-Team", "ops"), ("Authorization", "Bearer abc")]);
        let next = apply(&current, merge(&[("x-team", Some("dev"))])).unwrap();
        assert_eq!(next.get("X-Team"), Some("dev"));
        assert_eq!(next.get("authorization"), Some("Bearer abc"));
        assert_eq!(next.len(), 2);

        let next = apply(&next, merge(&[("X-TEAM", None), ("X-New", Some("1"))])).unwrap();
        assert_eq!(next.get("X-Team"), None);
        assert_eq!(
            next,
            headers(&[("Authorization", "Bearer abc"), ("X-New", "1")])
        );

        // Removing what is not there is no error; a name twice is.
        assert_eq!(apply(&next, merge(&[("X-Gone", None)])).unwrap(), next);
        let e = apply(&next, merge(&[("X-A", Some("1")), ("x-a", None)])).unwrap_err();
        assert_eq!(e.code, "invalid_header");
    }

    #[test]
    fn the_forms_list_keeps_masked_values_replaces_new_ones_and_drops_the_rest() {
        let current = headers(&[
            ("Authorization", "Bearer secret-1234"),
            ("X-Team", "ops-team"),
            ("X-Old", "gone soon"),
        ]);
        let shown = masked(&current);
        assert_eq!(shown[0], ("Authorization".into(), "••••…1234".into()));
        let form = vec![
            shown[0].clone(),
            ("X-Team".to_owned(), "dev-team".to_owned()),
            ("X-Added".to_owned(), "yes".to_owned()),
        ];
        let next = apply(&current, HeaderChanges::Replace(form)).unwrap();
        assert_eq!(
            next,
            headers(&[
                ("Authorization", "Bearer secret-1234"),
                ("X-Added", "yes"),
                ("X-Team", "dev-team"),
            ])
        );
        // Saved as shown, nothing changes.
        assert_eq!(
            apply(&next, HeaderChanges::Replace(masked(&next))).unwrap(),
            next
        );
        // A masked value with nothing behind it is not a value.
        let e = apply(
            &CustomHeaders::default(),
            HeaderChanges::Replace(vec![("X-A".into(), "••••…1234".into())]),
        )
        .unwrap_err();
        assert_eq!(e.code, "invalid_header");
    }

    #[test]
    fn debug_shows_names_never_values() {
        let h = headers(&[("Authorization", "Bearer topsecret")]);
        let changes = merge(&[("Authorization", Some("Bearer topsecret"))]);
        for text in [format!("{h:?}"), format!("{changes:?}")] {
            assert!(text.contains("Authorization"), "{text}");
            assert!(!text.contains("topsecret"), "{text}");
        }
    }
}
