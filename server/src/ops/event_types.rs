//! The event-type catalog and its rules (docs §1, "Event types"), once for the REST API
//! (`http::v1::event_types`) and the console: a type's name, description, JSON Schema
//! (draft 2020-12, compiled with the `jsonschema` crate when saved, so a schema that is
//! not one is refused), example (which must match the schema) and `deprecated`.
//!
//! Publishing checks a payload against its type's schema through [`check_payload`]:
//! every violation, each with the JSON Pointer of the value it is about. Compiled
//! schemas are kept in a [`SchemaCache`] keyed by (space, type, `updated_at`), so a
//! publish compiles nothing and a change is seen by every instance at once; a type
//! without a schema, or not in the catalog, is one indexed look-up and nothing more.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde::Serialize;
use serde_json::Value;

use super::destinations::check_event_type;
use super::OpsError;
use crate::domain::*;
use crate::storage::{Storage, StorageError};

/// The most a schema or an example may weigh, as compact JSON.
pub const MAX_DOCUMENT_BYTES: usize = 64 * 1024;
/// The most characters of a description.
pub const MAX_DESCRIPTION_CHARS: usize = 1000;
/// The most violations one answer lists (the message says how many there were).
pub const MAX_VIOLATIONS: usize = 1000;
/// Compiled schemas kept at most; past it the cache starts afresh.
const CACHE_ENTRIES: usize = 10_000;

/// One way a payload breaks its type's schema.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Violation {
    /// The JSON Pointer (RFC 6901) of the value in the payload; `""` is the payload itself.
    #[schema(examples("/total"))]
    pub pointer: String,
    /// What is wrong with it.
    #[schema(examples("\"12\" is not of type \"number\""))]
    pub message: String,
}

/// A new catalogued type; what is left out takes its default.
#[derive(Debug, Clone, Default)]
pub struct NewEventType {
    pub name: String,
    pub description: Option<String>,
    pub schema: Option<Value>,
    pub example: Option<Value>,
    pub deprecated: Option<bool>,
}

/// Changes to a catalogued type: `None` leaves a field as it is; `Some(None)` clears
/// the schema or the example.
#[derive(Debug, Clone, Default)]
pub struct Changes {
    pub description: Option<String>,
    pub schema: Option<Option<Value>>,
    pub example: Option<Option<Value>>,
    pub deprecated: Option<bool>,
}

/// Checks every field and makes the type.
pub fn create(space_id: SpaceId, new: NewEventType, now: UnixMs) -> Result<EventType, OpsError> {
    check_event_type(&new.name).map_err(|e| OpsError::invalid("invalid_event_type", e.message))?;
    let t = EventType {
        id: EventTypeId::new(),
        space_id,
        name: new.name,
        description: check_description(new.description.unwrap_or_default())?,
        schema: new.schema,
        example: new.example,
        deprecated: new.deprecated.unwrap_or(false),
        created_at: now,
        updated_at: now,
    };
    check_documents(&t)?;
    Ok(t)
}

/// Checks the changes and applies them to `t`; on a refusal `t` is left as it was.
/// `updated_at` always moves forward, so a changed schema is never mistaken for the
/// cached one.
pub fn apply(t: &mut EventType, c: Changes, now: UnixMs) -> Result<(), OpsError> {
    let mut next = t.clone();
    if let Some(d) = c.description {
        next.description = check_description(d)?;
    }
    if let Some(schema) = c.schema {
        next.schema = schema;
    }
    if let Some(example) = c.example {
        next.example = example;
    }
    if let Some(deprecated) = c.deprecated {
        next.deprecated = deprecated;
    }
    check_documents(&next)?;
    next.updated_at = now.max(t.updated_at + 1);
    *t = next;
    Ok(())
}

fn check_description(d: String) -> Result<String, OpsError> {
    if d.chars().count() > MAX_DESCRIPTION_CHARS || d.contains('\0') {
        return Err(OpsError::invalid(
            "invalid_description",
            format!("description may have at most {MAX_DESCRIPTION_CHARS} characters and no NUL"),
        ));
    }
    Ok(d)
}

/// The schema compiles and the example matches it.
fn check_documents(t: &EventType) -> Result<(), OpsError> {
    for (what, code, doc) in [
        ("schema", "invalid_schema", &t.schema),
        ("example", "invalid_example", &t.example),
    ] {
        if doc
            .as_ref()
            .is_some_and(|d| d.to_string().len() > MAX_DOCUMENT_BYTES)
        {
            return Err(OpsError::invalid(
                code,
                format!("the {what} may have at most {MAX_DOCUMENT_BYTES} bytes of JSON"),
            ));
        }
    }
    let Some(schema) = &t.schema else {
        return Ok(());
    };
    let validator = compile(schema)?;
    if let Some(example) = &t.example {
        let found = violations(&validator, example);
        if !found.is_empty() {
            return Err(OpsError::Violations {
                code: "invalid_example",
                message: format!("the example does not match the schema: {}", summary(&found)),
                violations: found,
            });
        }
    }
    Ok(())
}

/// The schema compiled as JSON Schema draft 2020-12 (the draft its `$schema` names, if
/// another), checked against its meta-schema; or 422 `invalid_schema` saying why. A
/// `$ref` may only point inside the schema: nothing is fetched from the network or disk.
pub fn compile(schema: &Value) -> Result<jsonschema::Validator, OpsError> {
    jsonschema::draft202012::new(schema).map_err(|e| {
        let at = e.instance_path().as_str();
        let at = if at.is_empty() {
            String::new()
        } else {
            format!(" (at {at})")
        };
        OpsError::invalid(
            "invalid_schema",
            format!("the schema is not a valid JSON Schema (draft 2020-12): {e}{at}"),
        )
    })
}

/// Every way `payload` breaks the schema (at most [`MAX_VIOLATIONS`]), in the order the
/// validator found them.
pub fn violations(validator: &jsonschema::Validator, payload: &Value) -> Vec<Violation> {
    validator
        .iter_errors(payload)
        .take(MAX_VIOLATIONS)
        .map(|e| Violation {
            pointer: e.instance_path().as_str().to_owned(),
            message: e.to_string(),
        })
        .collect()
}

/// "2 violations: /total: …; /currency: …" (the first three).
fn summary(found: &[Violation]) -> String {
    let shown: Vec<String> = found
        .iter()
        .take(3)
        .map(|v| {
            let at = if v.pointer.is_empty() {
                "(payload)"
            } else {
                &v.pointer
            };
            format!("{at}: {}", v.message)
        })
        .collect();
    let more = if found.len() > 3 { "; …" } else { "" };
    let n = found.len();
    let noun = if n == 1 { "violation" } else { "violations" };
    let at_least = if n >= MAX_VIOLATIONS { "at least " } else { "" };
    format!("{at_least}{n} {noun}: {}{more}", shown.join("; "))
}

/// Compiled schemas by (space, type), each with the `updated_at` it was compiled at.
#[derive(Debug, Clone, Default)]
pub struct SchemaCache {
    compiled: Arc<Mutex<HashMap<(SpaceId, String), Compiled>>>,
}

#[derive(Debug, Clone)]
struct Compiled {
    updated_at: UnixMs,
    validator: Arc<jsonschema::Validator>,
}

impl SchemaCache {
    /// The validator compiled for this version of the type, if it is kept.
    fn get(
        &self,
        space_id: SpaceId,
        name: &str,
        updated_at: UnixMs,
    ) -> Option<Arc<jsonschema::Validator>> {
        let compiled = self.compiled.lock().unwrap_or_else(|e| e.into_inner());
        compiled
            .get(&(space_id, name.to_owned()))
            .filter(|c| c.updated_at == updated_at)
            .map(|c| c.validator.clone())
    }

    /// Keeps `validator` as this version of the type, in place of any older one.
    fn put(
        &self,
        space_id: SpaceId,
        name: &str,
        updated_at: UnixMs,
        validator: Arc<jsonschema::Validator>,
    ) {
        let mut compiled = self.compiled.lock().unwrap_or_else(|e| e.into_inner());
        if compiled.len() >= CACHE_ENTRIES {
            compiled.clear();
        }
        compiled.insert(
            (space_id, name.to_owned()),
            Compiled {
                updated_at,
                validator,
            },
        );
    }
}

/// Checks a payload about to be published as `event_type` in `space_id` against the
/// type's schema: 422 `schema_violation` listing every violation, or `Ok` when it
/// matches, the type has no schema or is not catalogued (publishing it stays allowed).
pub async fn check_payload(
    store: &dyn Storage,
    schemas: &SchemaCache,
    space_id: SpaceId,
    event_type: &str,
    payload: &Value,
) -> Result<(), OpsError> {
    let version = store
        .find_event_type_schema_version(space_id, event_type)
        .await?;
    check_payload_at(store, schemas, space_id, event_type, payload, version).await
}

/// [`check_payload`] with the version of the type's schema already read (`None`: the type
/// has no schema, or is not in the catalog), as [`crate::storage::EventStore::publish_checks`]
/// reads it with the destinations' filters.
pub async fn check_payload_at(
    store: &dyn Storage,
    schemas: &SchemaCache,
    space_id: SpaceId,
    event_type: &str,
    payload: &Value,
    version: Option<UnixMs>,
) -> Result<(), OpsError> {
    let Some(version) = version else {
        return Ok(());
    };
    let validator = match schemas.get(space_id, event_type, version) {
        Some(v) => v,
        None => {
            let t = match store.find_event_type_by_name(space_id, event_type).await {
                Ok(t) => t,
                Err(StorageError::NotFound) => return Ok(()),
                Err(e) => return Err(e.into()),
            };
            let Some(schema) = &t.schema else {
                return Ok(());
            };
            let v = Arc::new(compile(schema).map_err(|e| {
                OpsError::Internal(anyhow::anyhow!(
                    "the stored schema of event type {event_type:?} does not compile: {e}"
                ))
            })?);
            schemas.put(space_id, event_type, t.updated_at, v.clone());
            v
        }
    };
    let found = violations(&validator, payload);
    if found.is_empty() {
        return Ok(());
    }
    Err(OpsError::Violations {
        code: "schema_violation",
        message: format!(
            "the payload does not match the schema of event type {event_type:?}: {}",
            summary(&found)
        ),
        violations: found,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn order_schema() -> Value {
        json!({
            "type": "object",
            "required": ["total", "currency"],
            "properties": {
                "total": {"type": "number", "minimum": 0},
                "currency": {"enum": ["EUR", "USD"]},
                "lines": {"type": "array", "items": {"type": "string"}}
            }
        })
    }

    fn new(name: &str, schema: Option<Value>, example: Option<Value>) -> NewEventType {
        NewEventType {
            name: name.into(),
            schema,
            example,
            ..Default::default()
        }
    }

    fn code(r: Result<EventType, OpsError>) -> &'static str {
        match r {
            Err(OpsError::Invalid { code, .. } | OpsError::Violations { code, .. }) => code,
            other => panic!("not refused: {other:?}"),
        }
    }

    #[test]
    fn every_violation_is_listed_with_the_pointer_of_its_value() {
        let v = compile(&order_schema()).unwrap();
        let found = violations(
            &v,
            &json!({"total": "12", "currency": "GBP", "lines": ["a", 2]}),
        );
        let pointers: Vec<&str> = found.iter().map(|v| v.pointer.as_str()).collect();
        assert_eq!(found.len(), 3, "{found:?}");
        for p in ["/total", "/currency", "/lines/1"] {
            assert!(pointers.contains(&p), "{p} in {pointers:?}");
        }
        let missing = violations(&v, &json!({}));
        assert_eq!(missing.len(), 2, "{missing:?}");
        assert!(missing.iter().all(|v| v.pointer.is_empty()));
        assert!(violations(&v, &json!({"total": 1, "currency": "EUR"})).is_empty());
    }

    #[test]
    fn a_schema_that_is_not_one_is_refused_with_the_reason() {
        for bad in [
            json!({"type": "nope"}),
            json!({"minimum": "ten"}),
            json!(42),
            json!({"$ref": "https://example.com/schema.json"}),
        ] {
            match compile(&bad) {
                Err(OpsError::Invalid { code, message }) => {
                    assert_eq!(code, "invalid_schema");
                    assert!(message.contains("not a valid JSON Schema"), "{message}");
                }
                other => panic!("{bad} compiled: {:?}", other.map(|_| ())),
            }
        }
        assert!(compile(&json!(true)).is_ok());
        assert!(compile(&json!({"$defs": {"a": {"type": "string"}}, "$ref": "#/$defs/a"})).is_ok());
    }

    #[test]
    fn a_new_type_checks_its_name_description_schema_and_example() {
        let t = create(SpaceId::new(), new("order.created", None, None), 5).unwrap();
        assert_eq!(
            (t.description.as_str(), t.deprecated, t.updated_at),
            ("", false, 5)
        );
        assert_eq!(
            code(create(SpaceId::new(), new("order.*", None, None), 1)),
            "invalid_event_type"
        );
        assert_eq!(
            code(create(SpaceId::new(), new("", None, None), 1)),
            "invalid_event_type"
        );
        let long = NewEventType {
            description: Some("x".repeat(1001)),
            ..new("a", None, None)
        };
        assert_eq!(code(create(SpaceId::new(), long, 1)), "invalid_description");
        assert_eq!(
            code(create(
                SpaceId::new(),
                new("a", Some(json!({"type": 1})), None),
                1
            )),
            "invalid_schema"
        );
        let bad_example = new("a", Some(order_schema()), Some(json!({"total": -1})));
        assert_eq!(
            code(create(SpaceId::new(), bad_example, 1)),
            "invalid_example"
        );
        let good = new(
            "a",
            Some(order_schema()),
            Some(json!({"total": 1, "currency": "USD"})),
        );
        assert!(create(SpaceId::new(), good, 1).is_ok());
        // An example alone is only kept.
        assert!(create(SpaceId::new(), new("a", None, Some(json!([1]))), 1).is_ok());
    }

    #[test]
    fn a_change_is_checked_whole_and_always_moves_updated_at_forward() {
        let mut t = create(
            SpaceId::new(),
            new("a", None, Some(json!({"total": "x"}))),
            10,
        )
        .unwrap();
        let before = t.clone();
        let refused = apply(
            &mut t,
            Changes {
                schema: Some(Some(order_schema())),
                ..Default::default()
            },
            11,
        );
        assert!(matches!(
            refused,
            Err(OpsError::Violations {
                code: "invalid_example",
                ..
            })
        ));
        assert_eq!(t, before, "a refused change leaves the type as it was");

        apply(
            &mut t,
            Changes {
                schema: Some(Some(order_schema())),
                example: Some(None),
                deprecated: Some(true),
                ..Default::default()
            },
            10,
        )
        .unwrap();
        assert!(t.deprecated && t.example.is_none() && t.schema.is_some());
        assert_eq!(t.updated_at, 11, "moved forward although the clock did not");
    }

    #[test]
    fn the_cache_answers_only_for_the_version_it_compiled() {
        let cache = SchemaCache::default();
        let space = SpaceId::new();
        let v = Arc::new(compile(&order_schema()).unwrap());
        assert!(cache.get(space, "a", 1).is_none());
        cache.put(space, "a", 1, v);
        assert!(cache.get(space, "a", 1).is_some());
        assert!(
            cache.get(space, "a", 2).is_none(),
            "a newer version compiles again"
        );
        assert!(cache.get(SpaceId::new(), "a", 1).is_none());
    }

    #[test]
    fn the_summary_counts_and_shows_the_first_violations() {
        let v = |p: &str| Violation {
            pointer: p.into(),
            message: "bad".into(),
        };
        assert_eq!(summary(&[v("")]), "1 violation: (payload): bad");
        assert_eq!(
            summary(&[v("/a"), v("/b"), v("/c"), v("/d")]),
            "4 violations: /a: bad; /b: bad; /c: bad; …"
        );
    }
}
