//! `/v1/projects/{project}/events`: publish (ingest atomic with fan-out), list, read.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::destinations::check_event_type;
use super::extract::{ApiJson, Bearer, Caller};
use super::openapi::{
    BadRequest, EventPath, InternalError, NotFound, PayloadTooLarge, ProjectPath, Unauthorized,
    Unprocessable, UnsupportedMediaType,
};
use super::page::{self, Keyset, ListQuery};
use super::views::{EventView, PageOf};
use crate::clock::now_ms;
use crate::domain::*;
use crate::http::error::{ApiError, ErrorBody};
use crate::http::AppState;
use crate::ops::event_types;
use crate::ops::filters;
use crate::ops::schedule;
use crate::storage::{NewEvent, Published, StorageError};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/projects/{project}/events", post(publish).get(list))
        .route("/projects/{project}/events/{id}", get(read))
}

/// An event to publish.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schema(as = PublishEvent)]
struct PublishBody {
    /// 1-100 of `A-Z a-z 0-9 . _ : -`.
    #[serde(rename = "type")]
    #[schema(pattern = "^[A-Za-z0-9._:-]{1,100}$", examples("order.created"))]
    event_type: String,
    /// Any JSON value.
    #[schema(value_type = Value, required = true)]
    payload: Value,
    /// 1 to 255 characters, no NUL. Publishing again with the same key answers the first
    /// event (the same `type` and `payload`) or 409 (different ones).
    #[serde(default)]
    #[schema(min_length = 1, max_length = 255, pattern = r"^[^\x00]*$")]
    idempotency_key: Option<String>,
    /// When to deliver it: an RFC 3339 time at most 30 days ahead. Its deliveries wait
    /// as `pending` with `nextAttemptAt` at that time (and can be cancelled until then);
    /// a time already past, or none, delivers at once.
    #[serde(default)]
    #[schema(format = DateTime, examples("2026-12-24T18:00:00Z"))]
    deliver_at: Option<String>,
}

/// The event, written with its deliveries.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = PublishedEvent)]
struct Published202 {
    id: EventId,
    /// How many deliveries it got: one per active destination subscribed to its type
    /// whose filter (if any) did not keep it out.
    deliveries: i64,
}

/// Writes the event and its deliveries in one transaction, then answers 202: an
/// event answered 2xx is on disk with every delivery it will ever get.
#[utoipa::path(
    post,
    path = "/v1/projects/{project}/events",
    operation_id = "publishEvent",
    tag = "Events",
    summary = "Publish an event",
    description = "Writes the event and one delivery per active destination subscribed to its type, in one \
        transaction, then answers 202. A destination's `filter` is run on the payload first: `false` or \
        `null` gives it no delivery, a failing filter a delivery that has already failed (class \
        `transformation`). The same `idempotencyKey` again answers the first event. When the \
        type is in the project's catalog with a JSON Schema, the payload must match it: otherwise 422 \
        `schema_violation` with every violation in `violations` (`pointer`, `message`). A type that is not \
        catalogued, or has no schema, is published as it is.",
    params(ProjectPath),
    request_body = PublishBody,
    responses(
        (status = 202, description = "Accepted: the event and its deliveries are stored", body = Published202),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthorized),
        (status = 404, response = NotFound),
        (status = 409, description = "The `idempotencyKey` was used for a different event (`idempotency_key_reused`)",
            body = ErrorBody),
        (status = 413, response = PayloadTooLarge),
        (status = 415, response = UnsupportedMediaType),
        (status = 422, description = "A value out of range (`invalid_event_type`, `invalid_idempotency_key`, \
            `invalid_body`), an event type of PartyFlow's own (`partyflow.…`: `reserved_event_type`), or a payload that breaks its event type's schema (`schema_violation`, with \
            `violations`)", body = ErrorBody),
        (status = 500, response = InternalError),
    )
)]
async fn publish(
    State(state): State<AppState>,
    bearer: Bearer,
    Path(project): Path<String>,
    body: Result<ApiJson<PublishBody>, ApiError>,
) -> Result<(StatusCode, Json<Published202>), ApiError> {
    // The key is looked up with the publish's checks, in one read; a publish refused
    // before that read looks its key up alone.
    let (mut body, space_id) = match (body, project.parse::<SpaceId>()) {
        (Ok(ApiJson(body)), Ok(space_id)) if refusal(&body).is_ok() => (body, space_id),
        (body, _) => return Err(refused_alone(&state, bearer, &project, body).await),
    };
    let payload_text = body.payload.to_string();
    let request_hash = {
        let mut h = Sha256::new();
        h.update(body.event_type.as_bytes());
        h.update([0]);
        h.update(payload_text.as_bytes());
        hex::encode(h.finalize())
    };
    // The checks as read a moment ago, kept in memory, where the write checks them again
    // (no idempotency key); if it finds them out of date, nothing was written and they
    // are read afresh, once (docs §7 "The publish's checks in memory").
    let mut may_remember = body.idempotency_key.is_none();
    let (published, deliver_at, reserved) = loop {
        let found = if may_remember {
            state
                .storage
                .publish_checks_cached(&bearer.key_hash, space_id, &body.event_type)
                .await
        } else {
            state
                .storage
                .publish_checks_with_key(&bearer.key_hash, space_id, &body.event_type)
                .await
        };
        let (key, checks) = match found {
            Ok(found) => found,
            Err(StorageError::NotFound) => return Err(ApiError::Unauthorized),
            Err(e) => return Err(e.into()),
        };
        let from_memory = checks.subscribers.as_ref().is_some_and(|s| s.cached());
        may_remember = false;
        let caller = bearer.caller_of(&state, key);
        caller.space(&project)?;
        let checked = event_types::check_payload_at(
            state.storage.as_ref(),
            &state.schemas,
            space_id,
            &body.event_type,
            &body.payload,
            checks.schema_version,
        )
        .await;
        match checked {
            // A schema from memory may be one changed since: refused only by the one now.
            Err(_) if from_memory => continue,
            checked => checked?,
        }
        let now = now_ms();
        let deliver_at = schedule::deliver_at(body.deliver_at.as_deref(), now)?;
        let event = Event {
            id: EventId::new_in_order(),
            space_id,
            event_type: body.event_type.clone(),
            // Kept for a second try when the checks came from memory.
            payload: match from_memory {
                true => body.payload.clone(),
                false => std::mem::take(&mut body.payload),
            },
            created_at: now,
            deliver_at,
        };
        let filters = filters::verdicts_among(checks.filtering, &state.sandbox, &event).await?;
        // Due now: the publish may claim its deliveries itself, with the engine's permits
        // (published alone), and they go out without a claim of the engine's. In a flood
        // the publishes go in groups, which claim nothing: their permits would only keep
        // the engine's records from claiming ahead.
        let reserved = (deliver_at.is_none() && state.publisher.idle())
            .then(|| state.engine.reserve())
            .flatten();
        let new = NewEvent {
            event,
            idempotency_key: body.idempotency_key.clone(),
            request_hash: request_hash.clone(),
            filters,
            claim: reserved.as_ref().map(|r| r.claim.clone()),
            subscribers: checks.subscribers,
        };
        match state.publisher.publish(new).await {
            Err(StorageError::Stale) if from_memory => {}
            published => break (published?, deliver_at, reserved),
        }
    };
    match published {
        Published::Created {
            event_id,
            deliveries,
            destinations,
            claimed,
            ..
        } => {
            crate::metrics::event_published(crate::metrics::EventSource::Api);
            if deliver_at.is_some() {
                // Not due yet: the engine only looks again at when the next one is.
                state.engine.scheduled();
            } else {
                state.engine.published(reserved, destinations, claimed);
            }
            Ok((
                StatusCode::ACCEPTED,
                Json(Published202 {
                    id: event_id,
                    deliveries,
                }),
            ))
        }
        Published::Replayed {
            request_hash: first,
            ..
        } if first != request_hash => Err(ApiError::Conflict {
            code: "idempotency_key_reused",
            message: "this idempotencyKey was already used for a different event".into(),
        }),
        Published::Replayed {
            event_id,
            deliveries,
            ..
        } => Ok((
            StatusCode::ACCEPTED,
            Json(Published202 {
                id: event_id,
                deliveries,
            }),
        )),
    }
}

/// A publish refused before its read, in the order of every other route: the key (401),
/// the body (400, 413, 415, 422 `invalid_body`), the project (404), then the event type or
/// the idempotency key (422).
async fn refused_alone(
    state: &AppState,
    bearer: Bearer,
    project: &str,
    body: Result<ApiJson<PublishBody>, ApiError>,
) -> ApiError {
    let refused = async {
        let caller = bearer.caller(state).await?;
        let ApiJson(body) = body?;
        caller.space(project)?;
        refusal(&body)
    };
    match refused.await {
        Err(e) => e,
        // Not reached: the project and the body were fine.
        Ok(()) => ApiError::NotFound(format!("no project {project:?}")),
    }
}

/// What a publish's body is refused for before anything is read: its event type
/// (`invalid_event_type`, `reserved_event_type`) or its idempotency key.
fn refusal(body: &PublishBody) -> Result<(), ApiError> {
    check_event_type(&body.event_type)?;
    if crate::domain::is_product_event_type(&body.event_type) {
        return Err(ApiError::invalid(
            "reserved_event_type",
            format!(
                "event types beginning with {:?} are PartyFlow's own (test events, alerts)",
                crate::domain::PRODUCT_EVENT_PREFIX
            ),
        ));
    }
    if let Some(key) = &body.idempotency_key {
        if key.is_empty() || key.chars().count() > 255 || key.contains('\0') {
            return Err(ApiError::invalid(
                "invalid_idempotency_key",
                "idempotencyKey needs 1 to 255 characters and no NUL",
            ));
        }
    }
    Ok(())
}

#[utoipa::path(
    get,
    path = "/v1/projects/{project}/events",
    operation_id = "listEvents",
    tag = "Events",
    summary = "List events",
    params(ProjectPath, ListQuery),
    responses(
        (status = 200, description = "A page of events, newest first", body = PageOf<EventView>),
        (status = 401, response = Unauthorized),
        (status = 404, response = NotFound),
        (status = 422, response = Unprocessable),
        (status = 500, response = InternalError),
    )
)]
async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Path(project): Path<String>,
    q: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<PageOf<EventView>>, ApiError> {
    let space_id = caller.space(&project)?;
    let q = page::query(q)?;
    let keyset = Keyset::<EventId>::new(space_id, q.limit, q.cursor.as_deref())?;
    let events = state.storage.list_events(space_id, keyset.page()).await?;
    Ok(Json(keyset.answer(
        events,
        |e| e.id,
        |e| EventView::from(e),
    )))
}

#[utoipa::path(
    get,
    path = "/v1/projects/{project}/events/{id}",
    operation_id = "getEvent",
    tag = "Events",
    summary = "Read an event",
    params(EventPath),
    responses(
        (status = 200, description = "The event", body = EventView),
        (status = 401, response = Unauthorized),
        (status = 404, response = NotFound),
        (status = 500, response = InternalError),
    )
)]
async fn read(
    State(state): State<AppState>,
    caller: Caller,
    Path((project, id)): Path<(String, String)>,
) -> Result<Json<EventView>, ApiError> {
    let space_id = caller.space(&project)?;
    let not_found = || ApiError::NotFound(format!("no event {id:?}"));
    let event_id: EventId = id.parse().map_err(|_| not_found())?;
    match state.storage.get_event(space_id, event_id).await {
        Ok(e) => Ok(Json(EventView::from(&e))),
        Err(StorageError::NotFound) => Err(not_found()),
        Err(e) => Err(e.into()),
    }
}
