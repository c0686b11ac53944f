//! Who made a change, and the audit entry that records it (docs D14), built here once
//! for both adapters: the REST API makes its [`Author`] from the request's API key, the
//! console from the signed-in user, both with the request's TCP peer address (never a
//! header the client sent). Storage writes the entry in the change's own transaction.
//! `api_keys.last_used_at`'s rule (at most one write a minute per key) is here too
//! ([`KeyUse`]).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

use crate::clock::rfc3339;
use crate::domain::{
    Actor, ActorKind, ApiKeyId, AuditAction, AuditEntry, AuditId, Role, SpaceId, UnixMs,
};
use crate::storage::DeliveryFilter;

/// Who is making a change, and from where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Author {
    pub actor: Actor,
    pub source: Option<IpAddr>,
}

impl Author {
    /// A request of the REST API authenticated by this key: the key's ID names it.
    pub fn api_key(id: ApiKeyId, source: Option<IpAddr>) -> Self {
        Self {
            actor: Actor {
                kind: ActorKind::ApiKey,
                id: id.to_string(),
                label: id.to_string(),
                role: None,
            },
            source,
        }
    }

    /// A console user: the email names them.
    pub fn user(id: &str, email: &str, role: Role, source: Option<IpAddr>) -> Self {
        Self {
            actor: Actor {
                kind: ActorKind::User,
                id: id.to_owned(),
                label: email.to_owned(),
                role: Some(role),
            },
            source,
        }
    }

    /// The entry recording that this author did `action` to `target_id` (in `space`, or
    /// install-wide), at `now`.
    pub fn entry(
        &self,
        action: AuditAction,
        space: Option<SpaceId>,
        target_id: impl ToString,
        detail: Value,
        now: UnixMs,
    ) -> AuditEntry {
        AuditEntry {
            id: AuditId::new(),
            space_id: space,
            actor: self.actor.clone(),
            action,
            target_kind: action.target_kind().to_owned(),
            target_id: target_id.to_string(),
            detail,
            source: self.source.map(source_text),
            created_at: now,
        }
    }
}

/// An address as the log shows it: an IPv4 address that reached an IPv6 socket
/// (`::ffff:10.0.0.1`) is written as IPv4.
pub fn source_text(ip: IpAddr) -> String {
    ip.to_canonical().to_string()
}

/// The detail of a bulk action: how many it changed and the filter that chose them.
pub fn bulk_detail(count: i64, filter: Value) -> Value {
    json!({ "count": count, "filter": filter })
}

/// The detail of an action on a list of deliveries: how many of the IDs it changed,
/// out of how many asked for.
pub fn ids_detail(changed: i64, ids: &[String]) -> Value {
    bulk_detail(changed, json!({ "ids": ids }))
}

/// A deliveries filter as an audit entry shows it (the window in RFC 3339).
pub fn delivery_filter_detail(f: &DeliveryFilter) -> Value {
    let mut out = serde_json::Map::new();
    if let Some(s) = f.status {
        out.insert("status".into(), s.as_str().into());
    }
    if let Some(d) = f.destination_id {
        out.insert("destinationId".into(), d.to_string().into());
    }
    if let Some(t) = &f.event_type {
        out.insert("eventType".into(), t.clone().into());
    }
    if let Some(c) = f.error_class {
        out.insert("errorClass".into(), c.as_str().into());
    }
    if let Some(t) = f.since {
        out.insert("since".into(), rfc3339(t).into());
    }
    if let Some(t) = f.until {
        out.insert("until".into(), rfc3339(t).into());
    }
    Value::Object(out)
}

/// How often `api_keys.last_used_at` is written at most, per key (item: "at most once
/// a minute", never a write per request).
pub const KEY_USE_INTERVAL_MS: i64 = 60_000;

/// Whether a key last written at `last` should be written again at `now`.
pub fn key_use_due(last: Option<UnixMs>, now: UnixMs, interval_ms: i64) -> bool {
    last.is_none_or(|last| now - last >= interval_ms || now < last)
}

/// This process's memory of when it last wrote each key's `last_used_at`, so a busy key
/// costs one write a minute, not one per request; the UPDATE itself is conditional too,
/// so several instances together write about once a minute.
#[derive(Debug, Clone)]
pub struct KeyUse {
    last: Arc<Mutex<HashMap<ApiKeyId, UnixMs>>>,
    pub interval_ms: i64,
}

impl Default for KeyUse {
    fn default() -> Self {
        Self {
            last: Arc::default(),
            interval_ms: KEY_USE_INTERVAL_MS,
        }
    }
}

impl KeyUse {
    /// Whether this request should write the key's use; if so it is remembered as
    /// written at `now` (before the write: a failed write waits for the next interval).
    pub fn take(&self, key: ApiKeyId, now: UnixMs) -> bool {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        if !key_use_due(last.get(&key).copied(), now, self.interval_ms) {
            return false;
        }
        // Forget keys not used for an hour, so the map stays as small as the keys in use.
        if last.len() > 10_000 {
            last.retain(|_, at| now - *at < 3_600_000);
        }
        last.insert(key, now);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_names_its_author_target_and_source() {
        let key = ApiKeyId::new();
        let space = SpaceId::new();
        let author = Author::api_key(key, Some("::ffff:10.1.2.3".parse().unwrap()));
        let e = author.entry(
            AuditAction::ChannelCreate,
            Some(space),
            "chn_x",
            json!({}),
            7,
        );
        assert_eq!(e.actor.label, key.to_string());
        assert_eq!(e.actor.kind, ActorKind::ApiKey);
        assert_eq!(e.actor.role, None);
        assert_eq!(e.target_kind, "channel");
        assert_eq!(e.source.as_deref(), Some("10.1.2.3"));
        assert_eq!(e.space_id, Some(space));
        assert_eq!(e.created_at, 7);

        let user = Author::user("usr_1", "ops@example.com", Role::Support, None);
        let e = user.entry(AuditAction::UserDisable, None, "usr_2", json!({}), 7);
        assert_eq!(e.actor.label, "ops@example.com");
        assert_eq!(e.actor.role, Some(Role::Support));
        assert_eq!(e.source, None);
    }

    #[test]
    fn a_bulk_detail_has_the_count_and_the_filter() {
        let d = bulk_detail(3, json!({"errorClass": "timeout"}));
        assert_eq!(d, json!({"count": 3, "filter": {"errorClass": "timeout"}}));
        let d = ids_detail(1, &["dlv_a".into(), "dlv_b".into()]);
        assert_eq!(
            d,
            json!({"count": 1, "filter": {"ids": ["dlv_a", "dlv_b"]}})
        );
    }

    #[test]
    fn a_filter_shows_only_what_it_sets() {
        let f = DeliveryFilter {
            error_class: Some(crate::domain::ErrorClass::Timeout),
            since: Some(0),
            ..DeliveryFilter::default()
        };
        assert_eq!(
            delivery_filter_detail(&f),
            json!({"errorClass": "timeout", "since": "1970-01-01T00:00:00Z"})
        );
    }

    #[test]
    fn a_key_is_written_at_most_once_an_interval() {
        assert!(key_use_due(None, 1_000, 60_000));
        assert!(!key_use_due(Some(1_000), 60_999, 60_000));
        assert!(key_use_due(Some(1_000), 61_000, 60_000));
        // A clock that stepped back does not stop the writes for good.
        assert!(key_use_due(Some(100_000), 1_000, 60_000));

        let memo = KeyUse::default();
        let key = ApiKeyId::new();
        assert!(memo.take(key, 1_000));
        assert!(!memo.take(key, 2_000));
        assert!(
            memo.take(ApiKeyId::new(), 2_000),
            "another key has its own minute"
        );
        assert!(memo.take(key, 61_000));
    }
}
