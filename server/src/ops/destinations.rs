//! A destination's settings and the rules they follow (docs §1, §2.3, §2.5, §2.9,
//! §2.10), in one place for every way of making or changing one: the REST API
//! (`http::v1::destinations`) and the console (`console::settings`). Its request
//! headers have their own module, [`super::headers`].
//!
//! Callers turn their input (JSON, a form) into [`NewSettings`] or [`Changes`];
//! [`create`] and [`apply`] check every value and build or change the
//! [`Destination`]. A refusal is a [`SettingsError`] that names the setting and
//! says what is wrong. Where a destination may send (SSRF, §2.11) is checked when
//! it sends, against the network policy of the moment.

use serde_json::Value;

use crate::dispatch::transform::TransformError;
use crate::dispatch::{retry::RetryPolicy, signing};
use crate::domain::*;
use crate::sandbox::Sandbox;

use super::headers::{self, HeaderChanges};

/// What checks that a transformation compiles: in the server, the sandbox (a
/// program that crashes the compiler ends a worker, not the server).
pub trait ProgramCheck: Sync {
    fn check(
        &self,
        program: &str,
    ) -> impl std::future::Future<Output = Result<(), TransformError>> + Send;
}

impl ProgramCheck for Sandbox {
    async fn check(&self, program: &str) -> Result<(), TransformError> {
        Sandbox::check(self, program).await
    }
}

/// How long the old secret keeps signing after a rotation.
pub const ROTATION_OVERLAP_MS: i64 = 24 * 3600 * 1000;

/// A refused setting.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct SettingsError {
    /// The API's error code, e.g. `invalid_url`.
    pub code: &'static str,
    /// The setting in words, for people: "URL", "Rate limit", …
    pub setting: &'static str,
    /// What is wrong, in the API's words (field names as in the JSON).
    pub message: String,
}

fn refuse(code: &'static str, setting: &'static str, message: impl Into<String>) -> SettingsError {
    SettingsError {
        code,
        setting,
        message: message.into(),
    }
}

/// The settings of a new destination; what is left out takes its default.
#[derive(Debug, Clone, Default)]
pub struct NewSettings {
    pub url: String,
    pub description: Option<String>,
    /// `None` subscribes to every event type.
    pub event_types: Option<Vec<String>>,
    pub rate_limit: Option<RateLimit>,
    /// The preset's when `None`.
    pub max_attempts: Option<i64>,
    /// 30 when `None`.
    pub timeout_seconds: Option<i64>,
    /// `{"preset": …, overrides}`; the `partyflow` preset when `None`.
    pub retry_policy: Option<Value>,
    /// A jq program; blank means none.
    pub transformation: Option<String>,
    /// A jq expression on the payload (`ops::filters`); blank means none.
    pub filter: Option<String>,
    /// `none` when `None`.
    pub ordering: Option<DeliveryOrdering>,
    /// Its own request headers; none when `None`.
    pub headers: Option<HeaderChanges>,
    /// Its name (`ops::names`, trimmed); `None`: it goes by its URL's host.
    pub name: Option<String>,
}

/// Changes to a destination: `None` leaves a setting as it is; for the settings
/// that can be cleared, `Some(None)` clears it.
#[derive(Debug, Clone, Default)]
pub struct Changes {
    pub url: Option<String>,
    pub description: Option<String>,
    /// `Some(None)`: every event type.
    pub event_types: Option<Option<Vec<String>>>,
    /// `Some(None)`: no limit of its own.
    pub rate_limit: Option<Option<RateLimit>>,
    /// `Some(None)`: the (new) preset's number of attempts.
    pub max_attempts: Option<Option<i64>>,
    pub timeout_seconds: Option<i64>,
    /// A new policy; without one, a new `max_attempts` applies to the current policy.
    pub retry_policy: Option<Value>,
    /// `Some(None)` (or a blank program): no transformation.
    pub transformation: Option<Option<String>>,
    /// `Some(None)` (or a blank expression): no filter.
    pub filter: Option<Option<String>>,
    pub ordering: Option<DeliveryOrdering>,
    /// Changes to its request headers (merged or replaced: [`HeaderChanges`]).
    pub headers: Option<HeaderChanges>,
    /// `Some(None)`: no name of its own any more; its URL's host is shown.
    pub name: Option<Option<String>>,
}

/// Checks every setting and makes the destination, with a new signing secret.
pub async fn create(
    space_id: SpaceId,
    s: NewSettings,
    now: UnixMs,
    programs: &impl ProgramCheck,
) -> Result<Destination, SettingsError> {
    let policy = check_policy(s.retry_policy.as_ref(), s.max_attempts)?;
    Ok(Destination {
        id: DestinationId::new(),
        space_id,
        url: check_url(&s.url)?,
        description: check_description(s.description)?,
        event_types: check_event_types(s.event_types)?,
        secret: signing::new_secret(),
        previous_secret: None,
        previous_secret_expires_at: None,
        rate_limit: check_rate_limit(s.rate_limit)?,
        max_attempts: i64::from(policy.max_attempts),
        timeout_seconds: check_timeout(s.timeout_seconds)?,
        retry_policy: policy.to_json(),
        transformation: check_transformation(s.transformation, programs).await?,
        status: DestinationStatus::Active,
        consecutive_dead_letters: 0,
        skipped_events: 0,
        disabled_reason: None,
        created_at: now,
        updated_at: now,
        filter: check_filter(s.filter, programs).await?,
        filtered_events: 0,
        ordering: s.ordering.unwrap_or(DeliveryOrdering::Unordered),
        headers: match s.headers {
            Some(h) => headers::apply(&CustomHeaders::default(), h)?,
            None => CustomHeaders::default(),
        },
        name: check_name(s.name)?,
    })
}

/// Checks the changes and applies them to `d`; on a refusal `d` is left as it was.
pub async fn apply(
    d: &mut Destination,
    c: Changes,
    now: UnixMs,
    programs: &impl ProgramCheck,
) -> Result<(), SettingsError> {
    let mut next = d.clone();
    if let Some(url) = c.url {
        next.url = check_url(&url)?;
    }
    if let Some(description) = c.description {
        next.description = check_description(Some(description))?;
    }
    if let Some(types) = c.event_types {
        next.event_types = check_event_types(types)?;
    }
    if let Some(limit) = c.rate_limit {
        next.rate_limit = check_rate_limit(limit)?;
    }
    if let Some(t) = c.timeout_seconds {
        next.timeout_seconds = check_timeout(Some(t))?;
    }
    if c.retry_policy.is_some() || c.max_attempts.is_some() {
        let policy_json = match c.retry_policy {
            Some(p) => Some(p),
            None => RetryPolicy::parse(Some(&d.retry_policy), Some(d.max_attempts))
                .ok()
                .map(|p| p.to_json()),
        };
        let max_attempts = c.max_attempts.unwrap_or(Some(d.max_attempts));
        let policy = check_policy(policy_json.as_ref(), max_attempts)?;
        next.max_attempts = i64::from(policy.max_attempts);
        next.retry_policy = policy.to_json();
    }
    if let Some(program) = c.transformation {
        next.transformation = check_transformation(program, programs).await?;
    }
    if let Some(filter) = c.filter {
        next.filter = check_filter(filter, programs).await?;
    }
    if let Some(ordering) = c.ordering {
        next.ordering = ordering;
    }
    if let Some(h) = c.headers {
        next.headers = headers::apply(&d.headers, h)?;
    }
    if let Some(name) = c.name {
        next.name = check_name(name)?;
    }
    next.updated_at = now;
    *d = next;
    Ok(())
}

/// A new signing secret; the old one keeps signing for [`ROTATION_OVERLAP_MS`] so
/// receivers can switch over.
pub fn rotate_secret(d: &mut Destination, now: UnixMs) {
    d.previous_secret = Some(std::mem::replace(&mut d.secret, signing::new_secret()));
    d.previous_secret_expires_at = Some(now + ROTATION_OVERLAP_MS);
    d.updated_at = now;
}

/// An event type: 1–100 of `A–Z a–z 0–9 . _ : -`.
pub fn check_event_type(t: &str) -> Result<(), SettingsError> {
    let ok = !t.is_empty()
        && t.len() <= 100
        && t.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-'));
    if ok {
        Ok(())
    } else {
        Err(refuse(
            "invalid_event_type",
            "Event type",
            format!("{t:?} is not an event type: use 1-100 of A-Z a-z 0-9 . _ : -"),
        ))
    }
}

fn check_url(url: &str) -> Result<String, SettingsError> {
    let bad = |message: String| refuse("invalid_url", "URL", message);
    let parsed = url::Url::parse(url).map_err(|e| bad(format!("{url:?} is not a URL: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(bad("the URL must use http or https".into()));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(bad("the URL needs a host".into()));
    }
    if url.chars().count() > 2048 {
        return Err(bad("the URL may have at most 2048 characters".into()));
    }
    Ok(parsed.to_string())
}

fn check_event_types(types: Option<Vec<String>>) -> Result<Option<Vec<String>>, SettingsError> {
    let Some(types) = types else { return Ok(None) };
    if types.is_empty() || types.len() > 100 {
        return Err(refuse(
            "invalid_event_types",
            "Event types",
            "eventTypes needs 1 to 100 entries, or null for every type",
        ));
    }
    for t in &types {
        check_event_type_pattern(t)?;
    }
    Ok(Some(types))
}

/// An entry of `eventTypes`: an event type, `*` (every type), or an event type followed
/// by a trailing `.*` (`order.*`: every type that starts with `order.`, at any depth).
/// Matching is `domain::subscription_keys`.
pub fn check_event_type_pattern(p: &str) -> Result<(), SettingsError> {
    if p == EVERY_TYPE {
        return Ok(());
    }
    let checked = match p.strip_suffix(".*") {
        Some(prefix) if p.len() <= 100 => check_event_type(prefix),
        _ => check_event_type(p),
    };
    checked.map_err(|_| {
        refuse(
            "invalid_event_type",
            "Event types",
            format!(
                "{p:?} is not an event type or pattern: use 1-100 of A-Z a-z 0-9 . _ : -, \
                 optionally ending in .* (order.*), or * alone for every type"
            ),
        )
    })
}

fn check_rate_limit(r: Option<RateLimit>) -> Result<Option<RateLimit>, SettingsError> {
    match r {
        Some(r) if r.count == 0 || r.count > 1_000_000 => Err(refuse(
            "invalid_rate_limit",
            "Rate limit",
            "rateLimit.count must be between 1 and 1000000",
        )),
        other => Ok(other),
    }
}

fn check_timeout(t: Option<i64>) -> Result<i64, SettingsError> {
    match t {
        None => Ok(30),
        Some(t @ 1..=60) => Ok(t),
        Some(t) => Err(refuse(
            "invalid_timeout",
            "Timeout",
            format!("timeoutSeconds must be between 1 and 60, not {t}"),
        )),
    }
}

fn check_policy(
    policy: Option<&Value>,
    max_attempts: Option<i64>,
) -> Result<RetryPolicy, SettingsError> {
    RetryPolicy::parse(policy, max_attempts)
        .map_err(|e| refuse("invalid_retry_policy", "Retry policy", e.to_string()))
}

async fn check_transformation(
    program: Option<String>,
    programs: &impl ProgramCheck,
) -> Result<Option<String>, SettingsError> {
    let bad = |message: String| refuse("invalid_transformation", "Transformation", message);
    match program {
        None => Ok(None),
        Some(p) if p.trim().is_empty() => Ok(None),
        Some(p) if p.contains('\0') => Err(bad("the program must not contain NUL".into())),
        Some(p) => {
            programs.check(&p).await.map_err(|e| bad(e.to_string()))?;
            Ok(Some(p))
        }
    }
}

/// A filter is a jq program like a transformation, checked the same way on save.
async fn check_filter(
    filter: Option<String>,
    programs: &impl ProgramCheck,
) -> Result<Option<String>, SettingsError> {
    check_transformation(filter, programs)
        .await
        .map_err(|e| SettingsError {
            code: "invalid_filter",
            setting: "Filter",
            ..e
        })
}

/// A destination's own name: the names rule (`ops::names`: a blank one is refused);
/// `None` leaves it going by its URL's host.
fn check_name(name: Option<String>) -> Result<Option<String>, SettingsError> {
    name.map(|n| {
        super::names::parse(super::names::NameKind::Destination, &n)
            .map_err(|e| refuse("invalid_name", "Name", e.to_string()))
    })
    .transpose()
}

fn check_description(d: Option<String>) -> Result<String, SettingsError> {
    let d = d.unwrap_or_default();
    if d.chars().count() > 1000 {
        return Err(refuse(
            "invalid_description",
            "Description",
            "description may have at most 1000 characters",
        ));
    }
    if d.contains('\0') {
        return Err(refuse(
            "invalid_description",
            "Description",
            "description must not contain NUL",
        ));
    }
    Ok(d)
}

/// The real compiler, in-process: for unit tests, which cannot start sandbox
/// workers (the integration tests and the server always use the sandbox).
#[cfg(test)]
pub(crate) struct InProcess;

#[cfg(test)]
impl ProgramCheck for InProcess {
    async fn check(&self, program: &str) -> Result<(), TransformError> {
        crate::dispatch::transform::compile(program).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new(url: &str) -> NewSettings {
        NewSettings {
            url: url.into(),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn a_new_destination_takes_the_defaults_and_refuses_bad_settings() {
        let d = create(
            SpaceId::new(),
            new("https://example.com/hook"),
            1,
            &InProcess,
        )
        .await
        .unwrap();
        assert_eq!((d.max_attempts, d.timeout_seconds), (8, 30));
        assert!(d.secret.starts_with("whsec_"));
        assert_eq!(d.retry_policy["preset"], "partyflow");

        let code = |s: NewSettings| async {
            create(SpaceId::new(), s, 1, &InProcess)
                .await
                .unwrap_err()
                .code
        };
        assert_eq!(code(new("ftp://example.com")).await, "invalid_url");
        assert_eq!(
            code(NewSettings {
                event_types: Some(vec!["bad type!".into()]),
                ..new("https://example.com")
            })
            .await,
            "invalid_event_type"
        );
        assert_eq!(
            code(NewSettings {
                max_attempts: Some(21),
                ..new("https://example.com")
            })
            .await,
            "invalid_retry_policy"
        );
        let e = create(
            SpaceId::new(),
            NewSettings {
                transformation: Some("{a: .x".into()),
                ..new("https://example.com")
            },
            1,
            &InProcess,
        )
        .await
        .unwrap_err();
        assert_eq!(
            (e.code, e.setting),
            ("invalid_transformation", "Transformation")
        );
        assert!(e.message.contains("does not compile"), "{}", e.message);
    }

    #[tokio::test]
    async fn a_name_is_optional_trimmed_checked_and_can_be_dropped_for_the_host() {
        let mut d = create(SpaceId::new(), new("https://shop.example/h"), 1, &InProcess)
            .await
            .unwrap();
        assert_eq!(
            (d.name.as_deref(), d.name().as_str()),
            (None, "shop.example")
        );
        let named = |name: &str| Changes {
            name: Some(Some(name.into())),
            ..Default::default()
        };
        apply(&mut d, named("  Orders  "), 2, &InProcess)
            .await
            .unwrap();
        assert_eq!(d.name(), "Orders");
        for bad in ["", "   ", "a\nb", &"x".repeat(101)] {
            let e = apply(&mut d, named(bad), 3, &InProcess).await.unwrap_err();
            assert_eq!((e.code, e.setting), ("invalid_name", "Name"), "{bad:?}");
        }
        assert_eq!(d.name(), "Orders");
        let dropped = Changes {
            name: Some(None),
            ..Default::default()
        };
        apply(&mut d, dropped, 4, &InProcess).await.unwrap();
        assert_eq!(d.name(), "shop.example");
    }

    #[tokio::test]
    async fn a_filter_is_checked_like_a_transformation_and_can_be_cleared() {
        let with = |filter: &str| NewSettings {
            filter: Some(filter.into()),
            ..new("https://example.com")
        };
        let e = create(SpaceId::new(), with(".total >"), 1, &InProcess)
            .await
            .unwrap_err();
        assert_eq!((e.code, e.setting), ("invalid_filter", "Filter"));
        assert!(e.message.contains("does not compile"), "{}", e.message);

        let mut d = create(SpaceId::new(), with(".total > 100"), 1, &InProcess)
            .await
            .unwrap();
        assert_eq!(d.filter.as_deref(), Some(".total > 100"));
        let refused = Changes {
            filter: Some(Some("(".into())),
            ..Default::default()
        };
        assert!(apply(&mut d, refused, 2, &InProcess).await.is_err());
        assert_eq!(d.filter.as_deref(), Some(".total > 100"));
        for cleared in [None, Some("  ".to_owned())] {
            let mut d = d.clone();
            let c = Changes {
                filter: Some(cleared),
                ..Default::default()
            };
            apply(&mut d, c, 3, &InProcess).await.unwrap();
            assert_eq!(d.filter, None);
        }
    }

    #[tokio::test]
    async fn changes_apply_all_or_nothing_and_can_clear_settings() {
        let mut d = create(
            SpaceId::new(),
            NewSettings {
                rate_limit: Some(RateLimit {
                    count: 5,
                    period: RatePeriod::Second,
                }),
                max_attempts: Some(3),
                transformation: Some("{id: .id}".into()),
                ..new("https://example.com/a")
            },
            1,
            &InProcess,
        )
        .await
        .unwrap();
        let before = d.clone();
        let refused = apply(
            &mut d,
            Changes {
                url: Some("https://example.com/b".into()),
                timeout_seconds: Some(61),
                ..Default::default()
            },
            2,
            &InProcess,
        )
        .await;
        assert_eq!(refused.unwrap_err().code, "invalid_timeout");
        assert_eq!(d, before, "nothing changed");

        // A new policy keeps the attempts; `Some(None)` takes the new preset's.
        apply(
            &mut d,
            Changes {
                retry_policy: Some(serde_json::json!({"preset": "standard"})),
                ..Default::default()
            },
            2,
            &InProcess,
        )
        .await
        .unwrap();
        assert_eq!(d.max_attempts, 3);
        apply(
            &mut d,
            Changes {
                url: Some("https://example.com/b".into()),
                rate_limit: Some(None),
                max_attempts: Some(None),
                retry_policy: Some(serde_json::json!({"preset": "standard"})),
                transformation: Some(Some("  ".into())),
                ..Default::default()
            },
            3,
            &InProcess,
        )
        .await
        .unwrap();
        assert_eq!(d.url, "https://example.com/b");
        assert_eq!(d.rate_limit, None);
        assert_eq!(d.max_attempts, 6);
        assert_eq!(d.transformation, None);
        assert_eq!(d.updated_at, 3);
    }

    #[test]
    fn event_type_entries_are_types_every_type_or_a_trailing_wildcard() {
        for ok in [
            "order.created",
            "*",
            "order.*",
            "order.refund.*",
            "a:b-c_d.*",
        ] {
            assert_eq!(check_event_type_pattern(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            ".*",
            "order*",
            "order.*.done",
            "*.created",
            "order.**",
            "or der.*",
            "**",
        ] {
            assert_eq!(
                check_event_type_pattern(bad).unwrap_err().code,
                "invalid_event_type",
                "{bad:?}"
            );
        }
        let long = format!("{}.*", "a".repeat(99));
        assert_eq!(
            check_event_type_pattern(&long).unwrap_err().code,
            "invalid_event_type"
        );
        let longest = format!("{}.*", "a".repeat(98));
        assert_eq!(check_event_type_pattern(&longest), Ok(()));
    }

    #[tokio::test]
    async fn ordering_is_none_unless_asked_for_and_can_be_changed() {
        let mut d = create(
            SpaceId::new(),
            new("https://example.com/hook"),
            1,
            &InProcess,
        )
        .await
        .unwrap();
        assert_eq!(d.ordering, DeliveryOrdering::Unordered);
        let changes = Changes {
            ordering: Some(DeliveryOrdering::Fifo),
            ..Default::default()
        };
        apply(&mut d, changes, 2, &InProcess).await.unwrap();
        assert_eq!(d.ordering, DeliveryOrdering::Fifo);
        apply(&mut d, Changes::default(), 3, &InProcess)
            .await
            .unwrap();
        assert_eq!(
            d.ordering,
            DeliveryOrdering::Fifo,
            "absent leaves it as it is"
        );
    }
}
