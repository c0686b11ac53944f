//! Domain records as the console shows them (the wire types of `app::types`).

use app::types::*;
use serde_json::Value;

use crate::dispatch::retry::RetryPolicy;
use crate::domain::*;

/// The role as the console's wire type; the one place the two meet (with its inverse).
impl From<crate::domain::Role> for app::types::Role {
    fn from(role: crate::domain::Role) -> Self {
        match role {
            crate::domain::Role::Admin => app::types::Role::Admin,
            crate::domain::Role::Support => app::types::Role::Support,
        }
    }
}

impl From<app::types::Role> for crate::domain::Role {
    fn from(role: app::types::Role) -> Self {
        match role {
            app::types::Role::Admin => crate::domain::Role::Admin,
            app::types::Role::Support => crate::domain::Role::Support,
        }
    }
}

pub fn space(s: &Space) -> SpaceView {
    SpaceView {
        id: s.id.to_string(),
        name: s.name.clone(),
        plan: s.plan.as_str().to_owned(),
        created_at: s.created_at,
    }
}

pub fn user(u: &User) -> UserView {
    UserView {
        id: u.id.to_string(),
        email: u.email.clone(),
        role: u.role.into(),
        created_at: u.created_at,
        disabled: u.disabled_at.is_some(),
    }
}

/// A delivery's row; `destination` is its destination's (URL, name as shown).
pub fn delivery_row(d: &Delivery, space_name: &str, destination: (&str, &str)) -> DeliveryRow {
    let (destination_url, destination_name) = destination;
    DeliveryRow {
        id: d.id.to_string(),
        space_id: d.space_id.to_string(),
        space_name: space_name.to_owned(),
        destination_id: d.destination_id.to_string(),
        destination_url: destination_url.to_owned(),
        event_type: d.event_type.clone(),
        status: d.status.as_str().to_owned(),
        paused: d.paused,
        attempts: d.attempts,
        last_error_class: d.last_error_class.map(|c| c.as_str().to_owned()),
        last_status_code: d.last_status_code,
        next_attempt_at: d.next_attempt_at,
        created_at: d.created_at,
        resent_from: d.resent_from.map(|i| i.to_string()),
        resent_as: d.resent_as.map(|i| i.to_string()),
        destination_name: destination_name.to_owned(),
    }
}

/// Header pairs from the stored JSON object (`{"name": "value" | ["v1", "v2"]}`).
pub fn headers(v: Option<&Value>) -> Vec<(String, String)> {
    let Some(Value::Object(map)) = v else {
        return Vec::new();
    };
    map.iter()
        .map(|(k, v)| {
            let value = match v {
                Value::String(s) => s.clone(),
                Value::Array(items) => items
                    .iter()
                    .map(|i| {
                        i.as_str()
                            .map(str::to_owned)
                            .unwrap_or_else(|| i.to_string())
                    })
                    .collect::<Vec<_>>()
                    .join(", "),
                other => other.to_string(),
            };
            (k.clone(), value)
        })
        .collect()
}

pub fn attempt(a: &Attempt) -> AttemptView {
    AttemptView {
        number: a.attempt_number,
        started_at: a.started_at,
        duration_ms: a.duration_ms,
        request_url: a.request_url.clone(),
        request_headers: headers(Some(&a.request_headers)),
        request_body: a.request_body.clone(),
        response_status: a.response_status,
        response_headers: headers(a.response_headers.as_ref()),
        response_body: a.response_body.clone(),
        error_class: a.error_class.map(|c| c.as_str().to_owned()),
        error_message: a.error_message.clone(),
    }
}

/// `5 s`, `10 min`, `1 h`, `1.5 s`.
pub fn span(ms: u64) -> String {
    match ms {
        ms if ms >= 3_600_000 && ms % 3_600_000 == 0 => format!("{} h", ms / 3_600_000),
        ms if ms >= 60_000 && ms % 60_000 == 0 => format!("{} min", ms / 60_000),
        ms if ms % 1000 == 0 => format!("{} s", ms / 1000),
        ms => format!("{:.1} s", ms as f64 / 1000.0),
    }
}

/// E.g. `partyflow: 5 s → 1 h, ±20 % jitter, Retry-After replaces`.
pub fn policy(d: &Destination) -> String {
    match RetryPolicy::parse(Some(&d.retry_policy), Some(d.max_attempts)) {
        Ok(p) => {
            let jitter = if p.jitter > 0.0 {
                format!("±{:.0} % jitter", p.jitter * 100.0)
            } else {
                "no jitter".into()
            };
            let retry_after = match p.retry_after.as_str() {
                "replace" => "Retry-After replaces the backoff",
                _ => "Retry-After extends the backoff",
            };
            format!(
                "{}: {} → {}, {jitter}, {retry_after}",
                p.preset.as_str(),
                span(p.initial_ms),
                span(p.max_ms)
            )
        }
        Err(_) => d.retry_policy.to_string(),
    }
}

pub fn rate_limit(r: Option<RateLimit>) -> Option<String> {
    r.map(|r| format!("{} per {}", r.count, r.period.as_str()))
}

pub fn destination(
    d: &Destination,
    space_name: &str,
    paused: i64,
    failed_unresent: i64,
) -> DestinationView {
    DestinationView {
        id: d.id.to_string(),
        space_id: d.space_id.to_string(),
        space_name: space_name.to_owned(),
        url: d.url.clone(),
        description: d.description.clone(),
        event_types: d.event_types.clone(),
        status: d.status.as_str().to_owned(),
        disabled_reason: d.disabled_reason.clone(),
        consecutive_dead_letters: d.consecutive_dead_letters,
        skipped_events: d.skipped_events,
        rate_limit: rate_limit(d.rate_limit),
        max_attempts: d.max_attempts,
        timeout_seconds: d.timeout_seconds,
        policy: policy(d),
        paused,
        failed_unresent,
        has_transformation: d.transformation.is_some(),
        created_at: d.created_at,
        filter: d.filter.clone(),
        filtered_events: d.filtered_events,
        ordering: d.ordering.as_str().to_owned(),
        headers: crate::ops::headers::masked(&d.headers),
        name: d.name(),
    }
}

pub fn incoming(
    w: &IncomingWebhook,
    space_name: &str,
    channel_name: &str,
    rate: i64,
) -> IncomingWebhookView {
    IncomingWebhookView {
        id: w.id.to_string(),
        space_id: w.space_id.to_string(),
        space_name: space_name.to_owned(),
        channel_id: w.channel_id.to_string(),
        channel_name: channel_name.to_owned(),
        name: w.name.clone(),
        status: w.status.as_str().to_owned(),
        consecutive_failures: w.consecutive_failures,
        rate_per_second: rate,
        signed: w.signing_secret.is_some(),
        created_at: w.created_at,
        disabled_at: w.disabled_at,
    }
}

/// Where a notification's subject lives in the console.
pub fn notification_link(n: &Notification) -> Option<String> {
    n.console_path()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_read_naturally() {
        assert_eq!(span(5_000), "5 s");
        assert_eq!(span(30_000), "30 s");
        assert_eq!(span(600_000), "10 min");
        assert_eq!(span(3_600_000), "1 h");
        assert_eq!(span(1_500), "1.5 s");
    }

    #[test]
    fn headers_come_out_as_pairs() {
        let v = serde_json::json!({"content-type": "application/json", "x-many": ["a", "b"]});
        let h = headers(Some(&v));
        assert!(h.contains(&("content-type".into(), "application/json".into())));
        assert!(h.contains(&("x-many".into(), "a, b".into())));
        assert!(headers(None).is_empty());
    }
}
