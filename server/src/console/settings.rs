//! The console's destination form, for a new destination and for changes to one,
//! read into the settings of [`crate::ops::destinations`], whose rules (the REST API's)
//! decide; and test events sent to one destination.
//!
//! Reading a form only turns text into values (numbers, lists, the retry policy's
//! JSON); a value out of range is refused by the shared rules, and the refusal names
//! the setting.

use app::error::ConsoleError;
use app::port::SettingsPort;
use app::types::*;
use serde_json::{json, Map, Value};

use super::manage::invalid;
use super::{internal, parse_id, require_role, storage_error, Backend};
use crate::clock::now_ms;
use crate::dispatch::retry::RetryPolicy;
use crate::domain::Role;
use crate::domain::*;
use crate::ops::destinations::{self, Changes, NewSettings, SettingsError};
use crate::ops::filters;
use crate::ops::headers::HeaderChanges;
use crate::storage::StorageError;

/// The event type of a test event (docs §6).
pub const TEST_EVENT_TYPE: &str = "partyflow.test";

/// A refused setting, in words: "Transformation: the jq program does not compile: …".
fn refused(e: SettingsError) -> ConsoleError {
    invalid(format!("{}: {}.", e.setting, e.message))
}

/// The form's fields as values, before the rules.
#[derive(Debug)]
struct Read {
    url: String,
    description: String,
    event_types: Option<Vec<String>>,
    rate_limit: Option<RateLimit>,
    max_attempts: Option<i64>,
    timeout_seconds: Option<i64>,
    retry_policy: Value,
    transformation: Option<String>,
    filter: Option<String>,
    ordering: DeliveryOrdering,
    headers: HeaderChanges,
    name: Option<String>,
}

fn whole(v: &str, what: &str) -> Result<Option<i64>, ConsoleError> {
    match v.trim() {
        "" => Ok(None),
        v => v
            .parse()
            .map(Some)
            .map_err(|_| invalid(format!("{what} must be a whole number, not {v:?}."))),
    }
}

fn decimal(v: &str, what: &str) -> Result<Option<f64>, ConsoleError> {
    match v.trim() {
        "" => Ok(None),
        v => match v.replace(',', ".").parse::<f64>() {
            Ok(n) if n.is_finite() => Ok(Some(n)),
            _ => Err(invalid(format!("{what} must be a number, not {v:?}."))),
        },
    }
}

/// JSON for a number: whole numbers as integers (the policy wants whole milliseconds).
fn number(n: f64) -> Value {
    if n.fract() == 0.0 && n.abs() < 9e15 {
        json!(n as i64)
    } else {
        json!(n)
    }
}

/// The header lines of the form, `Name: value` each (blank lines skipped), as the
/// whole list of headers: a masked value keeps the current one (`ops::headers`).
fn header_lines(text: &str) -> Result<HeaderChanges, ConsoleError> {
    let mut headers = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let Some((name, value)) = line.split_once(':') else {
            return Err(invalid(format!(
                "Headers: line {} needs the form Name: value.",
                n + 1
            )));
        };
        headers.push((name.trim().to_owned(), value.trim().to_owned()));
    }
    Ok(HeaderChanges::Replace(headers))
}

fn read_form(f: &DestinationForm) -> Result<Read, ConsoleError> {
    let event_types: Vec<String> = f
        .event_types
        .split([',', ' ', '\n', '\r', '\t'])
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
        .collect();
    let rate_limit =
        match f.rate_count.trim() {
            "" => None,
            count => Some(RateLimit {
                count: count.parse().map_err(|_| {
                    invalid(format!(
                        "The rate limit must be a whole number, not {count:?}."
                    ))
                })?,
                period: f.rate_period.trim().parse().map_err(|_| {
                    invalid("The rate limit's period must be second, minute or hour.")
                })?,
            }),
        };
    let mut policy = Map::new();
    let preset = match f.preset.trim() {
        "" => "partyflow",
        p => p,
    };
    policy.insert("preset".into(), json!(preset));
    if let Some(s) = decimal(&f.initial_seconds, "The first retry delay")? {
        policy.insert("initialMs".into(), number((s * 1000.0).round()));
    }
    if let Some(s) = decimal(&f.max_seconds, "The longest retry delay")? {
        policy.insert("maxMs".into(), number((s * 1000.0).round()));
    }
    if let Some(p) = decimal(&f.jitter_percent, "The jitter")? {
        policy.insert("jitter".into(), json!(p / 100.0));
    }
    if !f.retry_after.trim().is_empty() {
        policy.insert("retryAfter".into(), json!(f.retry_after.trim()));
    }
    let transformation = f.transformation.trim();
    let filter = f.filter.trim();
    let ordering = match f.ordering.trim() {
        "" => DeliveryOrdering::Unordered,
        o => o
            .parse()
            .map_err(|_| invalid(format!("Ordering must be none or fifo, not {o:?}.")))?,
    };
    Ok(Read {
        url: f.url.trim().to_owned(),
        description: f.description.trim().to_owned(),
        event_types: (!event_types.is_empty()).then_some(event_types),
        rate_limit,
        max_attempts: whole(&f.max_attempts, "Max attempts")?,
        timeout_seconds: whole(&f.timeout_seconds, "The timeout")?,
        retry_policy: Value::Object(policy),
        // Kept as typed (line breaks and all), unless it is blank.
        transformation: (!transformation.is_empty()).then(|| f.transformation.clone()),
        filter: (!filter.is_empty()).then(|| f.filter.clone()),
        ordering,
        headers: header_lines(&f.headers.0)?,
        // Blank: it goes by its URL's host; otherwise the names rule sees it as typed.
        name: (!f.name.trim().is_empty()).then(|| f.name.clone()),
    })
}

/// A new destination from the form; empty fields take the defaults.
pub fn new_settings(f: &DestinationForm) -> Result<NewSettings, ConsoleError> {
    let r = read_form(f)?;
    Ok(NewSettings {
        url: r.url,
        description: Some(r.description),
        event_types: r.event_types,
        rate_limit: r.rate_limit,
        max_attempts: r.max_attempts,
        timeout_seconds: r.timeout_seconds,
        retry_policy: Some(r.retry_policy),
        transformation: r.transformation,
        filter: r.filter,
        ordering: Some(r.ordering),
        headers: Some(r.headers),
        name: r.name,
    })
}

/// Changes from the edit form, which posts every setting: an empty field means none
/// (event types: every type), the default (timeout), or the preset's (retry fields).
pub fn changes(f: &DestinationForm) -> Result<Changes, ConsoleError> {
    let r = read_form(f)?;
    Ok(Changes {
        url: Some(r.url),
        description: Some(r.description),
        event_types: Some(r.event_types),
        rate_limit: Some(r.rate_limit),
        max_attempts: Some(r.max_attempts),
        timeout_seconds: Some(r.timeout_seconds.unwrap_or(30)),
        retry_policy: Some(r.retry_policy),
        transformation: Some(r.transformation),
        filter: Some(r.filter),
        ordering: Some(r.ordering),
        headers: Some(r.headers),
        name: Some(r.name),
    })
}

/// `5`, `2.5`: seconds from milliseconds, without trailing zeros.
fn seconds(ms: u64) -> String {
    if ms.is_multiple_of(1000) {
        (ms / 1000).to_string()
    } else {
        (ms as f64 / 1000.0).to_string()
    }
}

/// The form's values for a destination. The retry fields are filled only where the
/// destination differs from its preset, so choosing another preset takes its values.
pub fn form_of(d: &Destination) -> DestinationForm {
    let mut f = DestinationForm {
        space: d.space_id.to_string(),
        id: d.id.to_string(),
        url: d.url.clone(),
        description: d.description.clone(),
        event_types: d.event_types.clone().unwrap_or_default().join(", "),
        timeout_seconds: d.timeout_seconds.to_string(),
        preset: "partyflow".into(),
        rate_count: d
            .rate_limit
            .map(|r| r.count.to_string())
            .unwrap_or_default(),
        rate_period: d
            .rate_limit
            .map_or("second", |r| r.period.as_str())
            .to_owned(),
        transformation: d.transformation.clone().unwrap_or_default(),
        filter: d.filter.clone().unwrap_or_default(),
        ordering: d.ordering.as_str().to_owned(),
        headers: SecretText(
            crate::ops::headers::masked(&d.headers)
                .iter()
                .map(|(n, v)| format!("{n}: {v}\n"))
                .collect(),
        ),
        name: d.name.clone().unwrap_or_default(),
        ..Default::default()
    };
    if let Ok(p) = RetryPolicy::parse(Some(&d.retry_policy), Some(d.max_attempts)) {
        let preset = RetryPolicy::preset(p.preset);
        f.preset = p.preset.as_str().to_owned();
        if p.max_attempts != preset.max_attempts {
            f.max_attempts = p.max_attempts.to_string();
        }
        if p.initial_ms != preset.initial_ms {
            f.initial_seconds = seconds(p.initial_ms);
        }
        if p.max_ms != preset.max_ms {
            f.max_seconds = seconds(p.max_ms);
        }
        if p.jitter != preset.jitter {
            f.jitter_percent = ((p.jitter * 100_000.0).round() / 1000.0).to_string();
        }
        if p.retry_after != preset.retry_after {
            f.retry_after = p.retry_after.as_str().to_owned();
        }
    }
    f
}

#[async_trait::async_trait]
impl SettingsPort for Backend {
    async fn create_destination(
        &self,
        actor: &SessionUser,
        f: &DestinationForm,
    ) -> Result<Notice, ConsoleError> {
        require_role(actor, Role::Admin)?;
        let space_id: SpaceId = parse_id(&f.space, "space")?;
        let d = destinations::create(space_id, new_settings(f)?, now_ms(), &self.sandbox)
            .await
            .map_err(refused)?;
        self.storage
            .get_space(d.space_id)
            .await
            .map_err(|e| storage_error(e, "space"))?;
        let entry = super::audit_entry(
            actor,
            AuditAction::DestinationCreate,
            Some(d.space_id),
            d.id,
            serde_json::Value::Null,
        );
        self.storage
            .create_destination(&d, Some(&entry))
            .await
            .map_err(|e| storage_error(e, "destination"))?;
        Ok(Notice::new(format!("Created the destination {}.", d.url))
            .with_secret("Signing secret", d.secret.clone())
            .with_link("Open it", format!("/destinations/{}", d.id)))
    }

    async fn destination_edit(
        &self,
        actor: &SessionUser,
        id: &str,
    ) -> Result<DestinationEdit, ConsoleError> {
        require_role(actor, Role::Admin)?;
        let id: DestinationId = parse_id(id, "destination")?;
        let d = self
            .storage
            .get_destination_by_id(id)
            .await
            .map_err(|e| storage_error(e, "destination"))?;
        let space = self.storage.get_space(d.space_id).await.map_err(internal)?;
        Ok(DestinationEdit {
            form: form_of(&d),
            space_name: space.name,
            status: d.status.as_str().to_owned(),
        })
    }

    async fn update_destination(
        &self,
        actor: &SessionUser,
        f: &DestinationForm,
    ) -> Result<Notice, ConsoleError> {
        require_role(actor, Role::Admin)?;
        let id: DestinationId = parse_id(&f.id, "destination")?;
        let mut d = self
            .storage
            .get_destination_by_id(id)
            .await
            .map_err(|e| storage_error(e, "destination"))?;
        destinations::apply(&mut d, changes(f)?, now_ms(), &self.sandbox)
            .await
            .map_err(refused)?;
        let entry = super::audit_entry(
            actor,
            AuditAction::DestinationUpdate,
            Some(d.space_id),
            d.id,
            serde_json::Value::Null,
        );
        self.storage
            .update_destination(&d, Some(&entry))
            .await
            .map_err(|e| storage_error(e, "destination"))?;
        tracing::info!(destination.id = %d.id, user.id = %actor.id, "console: destination settings changed");
        Ok(Notice::new(format!("Saved the settings of {}.", d.url))
            .with_link("Open the destination", format!("/destinations/{}", d.id)))
    }

    async fn send_test_event(&self, actor: &SessionUser, id: &str) -> Result<Notice, ConsoleError> {
        require_role(actor, Role::Admin)?;
        let id: DestinationId = parse_id(id, "destination")?;
        let d = self
            .storage
            .get_destination_by_id(id)
            .await
            .map_err(|e| storage_error(e, "destination"))?;
        let inactive = || {
            invalid(format!(
                "{} is inactive; re-enable it before sending a test event.",
                d.url
            ))
        };
        if d.status != DestinationStatus::Active {
            return Err(inactive());
        }
        let now = now_ms();
        let event = Event {
            id: EventId::new_in_order(),
            space_id: d.space_id,
            event_type: TEST_EVENT_TYPE.into(),
            payload: json!({
                "type": TEST_EVENT_TYPE,
                "test": true,
                "destinationId": d.id.to_string(),
                "message": "A test event sent from the PartyFlow Hooks console.",
            }),
            created_at: now,
            deliver_at: None,
        };
        crate::ops::event_types::check_payload(
            self.storage.as_ref(),
            &self.schemas,
            event.space_id,
            &event.event_type,
            &event.payload,
        )
        .await
        .map_err(super::refused)?;
        // The destination's filter judges a test event as any other (docs §2.12).
        let filters = filters::verdicts_of(std::slice::from_ref(&d), &self.sandbox, &event)
            .await
            .map_err(super::refused)?;
        let delivery = match self
            .storage
            .publish_test_event(&event, d.id, &filters, now)
            .await
            .inspect(|_| crate::metrics::event_published(crate::metrics::EventSource::Test))
        {
            Ok(Some(delivery)) => delivery,
            Ok(None) => {
                return Ok(Notice::new(format!(
                    "The filter of {} kept the test event out: it was not delivered (it counts as a filtered event).",
                    d.url
                )))
            }
            Err(StorageError::Conflict(_)) => return Err(inactive()),
            Err(e) => return Err(storage_error(e, "destination")),
        };
        if !filters.failed.is_empty() {
            return Ok(Notice::new(format!(
                "The filter of {} failed on the test event, so its delivery failed.",
                d.url
            ))
            .with_link("Open its delivery", format!("/deliveries/{delivery}")));
        }
        self.engine.wake();
        tracing::info!(destination.id = %d.id, delivery.id = %delivery, user.id = %actor.id, "console: test event sent");
        Ok(Notice::new(format!(
            "Sent a test event ({TEST_EVENT_TYPE}) to {}.",
            d.url
        ))
        .with_link("Open its delivery", format!("/deliveries/{delivery}")))
    }

    async fn try_destination(
        &self,
        actor: &SessionUser,
        filter: &str,
        transformation: &str,
        sample: &str,
    ) -> Result<TryOutcome, ConsoleError> {
        require_role(actor, Role::Admin)?;
        let tried = filters::try_it(&self.sandbox, filter, transformation, sample)
            .await
            .map_err(super::refused)?;
        Ok(try_outcome(tried))
    }
}

/// The "Try it" box's answer, for the wire; the transformation's output pretty-printed.
fn try_outcome(t: filters::Tried) -> TryOutcome {
    TryOutcome {
        filter: t.filter.map(|v| match v {
            filters::Verdict::Passes => FilterVerdict::Passes,
            filters::Verdict::FilteredOut => FilterVerdict::FilteredOut,
            filters::Verdict::Failed(why) => FilterVerdict::Failed(why),
        }),
        transformed: t.transformed.map(|r| {
            r.map(|json| {
                serde_json::from_str::<Value>(&json)
                    .and_then(|v| serde_json::to_string_pretty(&v))
                    .unwrap_or(json)
            })
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form(url: &str) -> DestinationForm {
        DestinationForm {
            space: SpaceId::new().to_string(),
            url: url.into(),
            ..Default::default()
        }
    }

    async fn create(f: &DestinationForm) -> Result<Destination, ConsoleError> {
        destinations::create(
            SpaceId::new(),
            new_settings(f)?,
            1,
            &destinations::InProcess,
        )
        .await
        .map_err(refused)
    }

    #[tokio::test]
    async fn the_form_is_read_and_checked_by_the_shared_rules() {
        let d = create(&form("https://example.com/hook")).await.unwrap();
        assert_eq!((d.max_attempts, d.timeout_seconds), (8, 30));
        assert!(d.event_types.is_none() && d.rate_limit.is_none());

        let f = DestinationForm {
            preset: "standard".into(),
            event_types: "message.created, channel.created".into(),
            rate_count: "50".into(),
            rate_period: "minute".into(),
            initial_seconds: "2.5".into(),
            jitter_percent: "10".into(),
            transformation: "{id: .id}".into(),
            ..form("https://example.com/hook")
        };
        let d = create(&f).await.unwrap();
        assert_eq!(d.max_attempts, 6);
        assert_eq!(d.event_types.as_ref().unwrap().len(), 2);
        assert_eq!(d.rate_limit.unwrap().period, RatePeriod::Minute);
        assert_eq!(d.retry_policy["initialMs"], 2500);
        assert_eq!(d.retry_policy["jitter"], 0.1);
        assert_eq!(d.transformation.as_deref(), Some("{id: .id}"));

        let refusal = |f: DestinationForm| async move {
            match create(&f).await {
                Err(ConsoleError::Invalid(m)) => m,
                other => panic!("{other:?}"),
            }
        };
        assert!(refusal(form("ftp://example.com"))
            .await
            .starts_with("URL: "));
        let m = refusal(DestinationForm {
            max_attempts: "21".into(),
            ..form("https://example.com")
        })
        .await;
        assert!(m.starts_with("Retry policy: "), "{m}");
        let m = refusal(DestinationForm {
            event_types: "bad type!".into(),
            ..form("https://example.com")
        })
        .await;
        assert!(m.starts_with("Event types: "), "{m}");
        let m = refusal(DestinationForm {
            transformation: "{a: .x".into(),
            ..form("https://example.com")
        })
        .await;
        assert!(
            m.starts_with("Transformation: the jq program does not compile"),
            "{m}"
        );
        let m = refusal(DestinationForm {
            rate_count: "lots".into(),
            ..form("https://example.com")
        })
        .await;
        assert!(m.contains("whole number"), "{m}");
    }

    #[tokio::test]
    async fn header_lines_are_read_and_a_masked_line_keeps_its_value() {
        let d = create(&DestinationForm {
            headers: SecretText("Authorization: Bearer abcd-1234\r\n\n  X-Team:ops \n".into()),
            ..form("https://example.com/hook")
        })
        .await
        .unwrap();
        assert_eq!(d.headers.get("authorization"), Some("Bearer abcd-1234"));
        assert_eq!(d.headers.get("x-team"), Some("ops"));

        let shown = form_of(&d);
        assert_eq!(shown.headers.0, "Authorization: ••••…1234\nX-Team: ••••\n");
        assert!(!format!("{shown:?}").contains("abcd-1234"));
        let mut again = d.clone();
        let edited = DestinationForm {
            headers: SecretText("Authorization: ••••…1234\nX-New: 1".into()),
            ..shown
        };
        destinations::apply(
            &mut again,
            changes(&edited).unwrap(),
            2,
            &destinations::InProcess,
        )
        .await
        .unwrap();
        assert_eq!(again.headers.get("authorization"), Some("Bearer abcd-1234"));
        assert_eq!(again.headers.get("x-team"), None, "a line removed");
        assert_eq!(again.headers.get("x-new"), Some("1"));

        let refusal = |text: &str| {
            let f = DestinationForm {
                headers: SecretText(text.into()),
                ..form("https://example.com")
            };
            async move {
                match create(&f).await {
                    Err(ConsoleError::Invalid(m)) => m,
                    other => panic!("{other:?}"),
                }
            }
        };
        let m = refusal("X-Team ops").await;
        assert!(m.contains("line 1"), "{m}");
        let m = refusal("X-Ok: 1\nUser-Agent: me").await;
        assert!(m.starts_with("Headers: User-Agent is set by"), "{m}");
    }

    #[tokio::test]
    async fn the_edit_form_shows_only_what_differs_from_the_preset_and_round_trips() {
        let f = DestinationForm {
            max_attempts: "3".into(),
            max_seconds: "600".into(),
            rate_count: "7".into(),
            rate_period: "hour".into(),
            ..form("https://example.com/hook")
        };
        let d = create(&f).await.unwrap();
        let shown = form_of(&d);
        assert_eq!(shown.preset, "partyflow");
        assert_eq!(shown.max_attempts, "3");
        assert_eq!(shown.max_seconds, "600");
        assert_eq!(shown.initial_seconds, "", "the preset's");
        assert_eq!(shown.jitter_percent, "");
        assert_eq!(
            (shown.rate_count.as_str(), shown.rate_period.as_str()),
            ("7", "hour")
        );

        // Saving the form unchanged changes nothing.
        let mut again = d.clone();
        destinations::apply(
            &mut again,
            changes(&shown).unwrap(),
            1,
            &destinations::InProcess,
        )
        .await
        .unwrap();
        assert_eq!(again, d);

        // Another preset with the fields emptied takes that preset's values.
        let switched = DestinationForm {
            preset: "standard".into(),
            max_attempts: String::new(),
            max_seconds: String::new(),
            rate_count: String::new(),
            ..shown
        };
        destinations::apply(
            &mut again,
            changes(&switched).unwrap(),
            2,
            &destinations::InProcess,
        )
        .await
        .unwrap();
        assert_eq!(again.max_attempts, 6);
        assert_eq!(again.retry_policy["initialMs"], 30_000);
        assert_eq!(again.rate_limit, None);
    }
}
