//! The console's event-type catalog ([`CatalogPort`]): support staff read it, admins
//! add and change types through the same rules as the REST API (`ops::event_types`).

use app::error::ConsoleError;
use app::port::CatalogPort;
use app::types::*;
use serde_json::Value;

use super::manage::invalid;
use super::{internal, parse_id, refused, require_role, storage_error, Backend};
use crate::clock::now_ms;
use crate::domain::Role;
use crate::domain::*;
use crate::ops::event_types::{self, Changes, NewEventType};
use crate::storage::StorageError;

/// A JSON field of the form: empty is none; anything else must be JSON.
fn json_field(what: &str, text: &str) -> Result<Option<Value>, ConsoleError> {
    if text.trim().is_empty() {
        return Ok(None);
    }
    serde_json::from_str(text)
        .map(Some)
        .map_err(|e| invalid(format!("{what}: this is not JSON ({e}).")))
}

fn pretty(v: &Option<Value>) -> String {
    v.as_ref()
        .and_then(|v| serde_json::to_string_pretty(v).ok())
        .unwrap_or_default()
}

pub(super) fn entry(t: &EventType, space_name: &str) -> CatalogEntry {
    CatalogEntry {
        space_id: t.space_id.to_string(),
        space_name: space_name.to_owned(),
        name: t.name.clone(),
        description: t.description.clone(),
        deprecated: t.deprecated,
        schema: pretty(&t.schema),
        example: pretty(&t.example),
        updated_at: t.updated_at,
    }
}

#[async_trait::async_trait]
impl CatalogPort for Backend {
    async fn event_types(
        &self,
        actor: &SessionUser,
        space: &str,
    ) -> Result<Vec<CatalogEntry>, ConsoleError> {
        require_role(actor, Role::Support)?;
        let spaces = self.space_names().await?;
        let wanted: Vec<SpaceId> = match space.trim() {
            "" => spaces.keys().copied().collect(),
            s => vec![parse_id::<SpaceId>(s, "space")?],
        };
        let mut out = Vec::new();
        for s in wanted {
            let name = spaces.get(&s).map(|s| s.name.as_str()).unwrap_or_default();
            for t in self
                .storage
                .list_all_event_types(s)
                .await
                .map_err(internal)?
            {
                out.push(entry(&t, name));
            }
        }
        out.sort_by(|a, b| (&a.name, &a.space_name).cmp(&(&b.name, &b.space_name)));
        Ok(out)
    }

    async fn save_event_type(
        &self,
        actor: &SessionUser,
        f: &CatalogForm,
    ) -> Result<Notice, ConsoleError> {
        require_role(actor, Role::Admin)?;
        let space: SpaceId = parse_id(&f.space, "space")?;
        let schema = json_field("Schema", &f.schema)?;
        let example = json_field("Example", &f.example)?;
        let name = f.name.trim();
        if f.existing {
            let mut t = self
                .storage
                .find_event_type_by_name(space, name)
                .await
                .map_err(|e| storage_error(e, "event type"))?;
            let changes = Changes {
                description: Some(f.description.trim().to_owned()),
                schema: Some(schema),
                example: Some(example),
                deprecated: Some(f.deprecated),
            };
            event_types::apply(&mut t, changes, now_ms()).map_err(refused)?;
            let detail = serde_json::json!({ "name": t.name });
            let entry = super::audit_entry(
                actor,
                AuditAction::EventTypeUpdate,
                Some(space),
                t.id,
                detail,
            );
            self.storage
                .update_event_type(&t, Some(&entry))
                .await
                .map_err(|e| storage_error(e, "event type"))?;
            return Ok(Notice::new(format!("Saved event type {}.", t.name)));
        }
        let new = NewEventType {
            name: name.to_owned(),
            description: Some(f.description.trim().to_owned()),
            schema,
            example,
            deprecated: Some(f.deprecated),
        };
        let t = event_types::create(space, new, now_ms()).map_err(refused)?;
        let detail = serde_json::json!({ "name": t.name });
        let entry = super::audit_entry(
            actor,
            AuditAction::EventTypeCreate,
            Some(space),
            t.id,
            detail,
        );
        match self.storage.create_event_type(&t, Some(&entry)).await {
            Ok(()) => Ok(Notice::new(format!(
                "Added event type {} to the catalog.",
                t.name
            ))),
            Err(StorageError::Conflict(_)) => Err(invalid(format!(
                "The space has an event type {} already; change it in its row.",
                t.name
            ))),
            Err(e) => Err(storage_error(e, "event type")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_json_field_is_none_when_blank_and_refused_when_not_json() {
        assert_eq!(json_field("Schema", "  ").unwrap(), None);
        assert_eq!(
            json_field("Schema", r#"{"type": "object"}"#).unwrap(),
            Some(serde_json::json!({"type": "object"}))
        );
        let ConsoleError::Invalid(m) = json_field("Example", "{nope").unwrap_err() else {
            panic!("not refused as invalid");
        };
        assert!(m.starts_with("Example: this is not JSON"), "{m}");
    }
}
