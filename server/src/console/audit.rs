//! [`app::port::AuditPort`]: the audit log page (docs D14). Admins read every entry,
//! with filters by person, action, space and time; support staff read only their own
//! entries, whatever the query asks: the rule is [`scope`], here on the server.

use app::error::ConsoleError;
use app::port::AuditPort;
use app::types::*;

use super::{internal, parse_id, require_role, Backend};
use crate::domain::{AuditAction, AuditEntry, AuditId, Role, UnixMs};
use crate::storage::{AuditFilter, Page};

/// Entries per page.
const PAGE: i64 = 50;

/// What `actor` may read of the log with the page's filters: admins what they ask for;
/// support staff the same, but only their own entries. `true` when limited to their own.
pub fn scope(actor: &SessionUser, q: &AuditQuery) -> Result<(AuditFilter, bool), String> {
    fn time(v: &str) -> Result<Option<UnixMs>, String> {
        let v = v.trim();
        if v.is_empty() {
            return Ok(None);
        }
        app::components::parse_utc(v)
            .map(Some)
            .ok_or_else(|| format!("{v:?} is not a date and time."))
    }
    let action = match q.action.trim() {
        "" => None,
        a => Some(
            a.parse::<AuditAction>()
                .map_err(|_| format!("{a:?} is not an action."))?,
        ),
    };
    let space = match q.space.trim() {
        "" => None,
        s => Some(s.parse().map_err(|_| format!("{s:?} is not a space."))?),
    };
    if q.actor.contains('\0') {
        return Err("That is not a person.".into());
    }
    let own_only = !actor.is_admin();
    let actor_id = if own_only {
        Some(actor.id.clone())
    } else {
        Some(q.actor.trim().to_owned()).filter(|a| !a.is_empty())
    };
    let filter = AuditFilter {
        space_id: space,
        actor_id,
        action,
        since: time(&q.since)?,
        until: time(&q.until)?,
    };
    Ok((filter, own_only))
}

/// An entry as the page shows it.
fn row(e: &AuditEntry, space_name: Option<String>) -> AuditRow {
    AuditRow {
        id: e.id.to_string(),
        created_at: e.created_at,
        actor_kind: e.actor.kind.as_str().to_owned(),
        actor_id: e.actor.id.clone(),
        actor_label: e.actor.label.clone(),
        role: e.actor.role.map(|r| r.as_str().to_owned()),
        action: e.action.as_str().to_owned(),
        space_id: e.space_id.map(|s| s.to_string()),
        space_name,
        target_kind: e.target_kind.clone(),
        target_id: e.target_id.clone(),
        detail: match &e.detail {
            serde_json::Value::Null => String::new(),
            serde_json::Value::Object(o) if o.is_empty() => String::new(),
            other => other.to_string(),
        },
        source: e.source.clone(),
    }
}

#[async_trait::async_trait]
impl AuditPort for Backend {
    async fn audit_log(
        &self,
        actor: &SessionUser,
        q: &AuditQuery,
    ) -> Result<AuditPage, ConsoleError> {
        require_role(actor, Role::Support)?;
        let spaces = self.storage.list_all_spaces().await.map_err(internal)?;
        let people = if actor.is_admin() {
            self.storage
                .list_all_users()
                .await
                .map_err(internal)?
                .into_iter()
                .map(|u| Choice {
                    value: u.id.to_string(),
                    label: u.email,
                })
                .collect()
        } else {
            Vec::new()
        };
        let mut page = AuditPage {
            rows: Vec::new(),
            next_cursor: None,
            people,
            spaces: spaces
                .iter()
                .map(|s| Choice {
                    value: s.id.to_string(),
                    label: s.name.clone(),
                })
                .collect(),
            actions: AuditAction::ALL
                .iter()
                .map(|a| a.as_str().to_owned())
                .collect(),
            own_only: !actor.is_admin(),
            filter_error: None,
        };
        let (filter, _) = match scope(actor, q) {
            Ok(scoped) => scoped,
            Err(e) => {
                page.filter_error = Some(e);
                return Ok(page);
            }
        };
        let before = match q.before.trim() {
            "" => None,
            b => Some(parse_id::<AuditId>(b, "cursor")?),
        };
        let mut rows = self
            .storage
            .list_audit(
                &filter,
                Page {
                    before,
                    limit: PAGE + 1,
                },
            )
            .await
            .map_err(internal)?;
        if rows.len() as i64 > PAGE {
            rows.truncate(PAGE as usize);
            page.next_cursor = rows.last().map(|e| e.id.to_string());
        }
        let name_of = |id: Option<crate::domain::SpaceId>| {
            id.and_then(|id| spaces.iter().find(|s| s.id == id).map(|s| s.name.clone()))
        };
        page.rows = rows.iter().map(|e| row(e, name_of(e.space_id))).collect();
        Ok(page)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(role: Role) -> SessionUser {
        SessionUser {
            id: "usr_me".into(),
            email: "me@example.com".into(),
            role: role.into(),
            source: None,
        }
    }

    #[test]
    fn support_staff_read_only_their_own_entries_whatever_they_ask() {
        let q = AuditQuery {
            actor: "usr_someone_else".into(),
            action: "destination.update".into(),
            ..AuditQuery::default()
        };
        let (f, own) = scope(&user(Role::Support), &q).unwrap();
        assert!(own);
        assert_eq!(f.actor_id.as_deref(), Some("usr_me"));
        assert_eq!(f.action, Some(AuditAction::DestinationUpdate));

        let (f, own) = scope(&user(Role::Support), &AuditQuery::default()).unwrap();
        assert!(own);
        assert_eq!(f.actor_id.as_deref(), Some("usr_me"));
    }

    #[test]
    fn admins_read_everyone_or_whom_they_choose() {
        let (f, own) = scope(&user(Role::Admin), &AuditQuery::default()).unwrap();
        assert!(!own);
        assert_eq!(f, AuditFilter::default());
        let q = AuditQuery {
            actor: "usr_other".into(),
            since: "2026-01-02T03:04".into(),
            ..AuditQuery::default()
        };
        let (f, _) = scope(&user(Role::Admin), &q).unwrap();
        assert_eq!(f.actor_id.as_deref(), Some("usr_other"));
        assert!(f.since.is_some());
    }

    #[test]
    fn a_bad_filter_is_said_in_words() {
        let q = AuditQuery {
            action: "everything".into(),
            ..AuditQuery::default()
        };
        assert!(scope(&user(Role::Admin), &q)
            .unwrap_err()
            .contains("not an action"));
    }
}
