//! The OpenAPI 3.1 document of the REST API, generated from the handlers'
//! `#[utoipa::path]` annotations and the request and response types, served at
//! `GET /v1/openapi.json`; [`super::docs`] renders the same document as HTML at
//! `GET /v1/docs`.
//!
//! The domain's IDs and closed value sets get their schemas here, from the types
//! themselves (prefix, `ALL`), so the document cannot drift from what the API parses.
//! The document must stay true: schemathesis checks every answer against it
//! (`scripts/schemathesis.sh`, `server/tests/it/openapi.rs`).

use std::borrow::Cow;
use std::sync::OnceLock;

use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use serde_json::json;
use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::response::{Response, ResponseBuilder};
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ContentBuilder, Ref, RefOr};
use utoipa::{Modify, OpenApi, PartialSchema, ToResponse, ToSchema};

use super::{api_keys, bot, bots, channels, deliveries, destinations, event_types, events};
use super::{audit, incoming_webhooks, notifications, projects};
use crate::domain::*;
use crate::http::error::ErrorBody;
use crate::http::hooks;
use crate::http::AppState;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/openapi.json", get(openapi_json))
        .route("/docs", get(super::docs::page))
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "PartyFlow Hooks API",
        license(name = "Apache-2.0", identifier = "Apache-2.0"),
        description = "The REST API for integrations: outgoing webhooks (destinations, events, \
            deliveries, resend and cancel), channels and their messages, incoming webhooks, bots, \
            API keys and notifications.\n\n\
            Every call under `/v1/projects/{project}` needs `Authorization: Bearer <API key>`; a key \
            belongs to one project (space), and any other project, or any ID that is not of this \
            project (malformed ones included), answers 404. Bodies and answers are JSON with \
            camelCase fields and RFC 3339 times. Listings are keyset-paginated, newest first: pass \
            the answer's `nextCursor` as `cursor` for the next page; it is `null` on the last page. \
            A cursor belongs to one listing of one project; any other answers 422 `invalid_cursor`. \
            Every error answers `{\"code\", \"message\"}` with its HTTP status; a failure of the \
            server's own (500 `internal`) adds `requestId`. Every answer carries an `x-request-id` \
            header with the ID the server gave the request (one sent by the client is not used).",
    ),
    paths(
        destinations::create,
        destinations::list,
        destinations::read,
        destinations::update,
        destinations::remove,
        destinations::enable,
        destinations::disable,
        destinations::rotate_secret,
        events::publish,
        events::list,
        events::read,
        event_types::create,
        event_types::list,
        event_types::read,
        event_types::update,
        deliveries::list,
        deliveries::read,
        deliveries::attempts,
        deliveries::resend_one,
        deliveries::cancel_one,
        deliveries::resend_many,
        deliveries::cancel_many,
        deliveries::resend_failed,
        deliveries::preview_resend_failed,
        channels::create,
        channels::list,
        channels::read,
        channels::rename,
        channels::remove,
        channels::messages,
        channels::post_with_api_key,
        incoming_webhooks::create,
        incoming_webhooks::list,
        incoming_webhooks::read,
        incoming_webhooks::remove,
        incoming_webhooks::enable,
        incoming_webhooks::disable,
        bots::create,
        bots::list,
        bots::read,
        bots::revoke,
        api_keys::create,
        api_keys::list,
        api_keys::revoke,
        notifications::list,
        notifications::mark_read,
        bot::post_as_bot,
        hooks::receive,
        openapi_json,
        super::docs::page,
        projects::read,
        projects::update,
        audit::list,
    ),
    components(
        schemas(ErrorBody),
        responses(
            BadRequest,
            Unauthorized,
            NotFound,
            PayloadTooLarge,
            UnsupportedMediaType,
            Unprocessable,
            InternalError
        )
    ),
    modifiers(&SecuritySchemes, &NamedPageItems, &UnavailableAnswers),
    security(("ApiKeyAuth" = [])),
    tags(
        (name = "Destinations", description = "Where events are sent: URL, subscribed event types, \
            rate limit, retry policy, transformation, payload filter, signing secret."),
        (name = "Events", description = "Publishing an event writes one delivery per active \
            destination subscribed to its type whose filter lets it through, in the same transaction."),
        (name = "Event types", description = "The project's catalog of event types: a description, \
            an optional JSON Schema (draft 2020-12) that published payloads must match, an example, \
            and whether the type is deprecated."),
        (name = "Deliveries", description = "One event on its way to one destination, with its \
            attempts; resend and cancel."),
        (name = "Channels", description = "Channels and their messages; every new message emits a \
            `message.created` event."),
        (name = "Incoming webhooks", description = "URLs that senders post messages to."),
        (name = "Bots", description = "Bots and their tokens."),
        (name = "API keys", description = "More API keys for the project; a key is shown once."),
        (name = "Notifications", description = "What admins were told about this project."),
        (name = "Bot API", description = "Called by bots, with `Authorization: Bot <token>`."),
        (name = "Incoming webhook senders", description = "Called by senders, with the webhook's \
            URL (its token is in the path)."),
        (name = "Reference", description = "This document, as JSON and as a page."),
        (name = "Projects", description = "The project itself: its plan and how long its \
            finished deliveries, their attempts and events are kept (its retention)."),
        (name = "Audit log", description = "Who changed what in the project, and when: every \
            change made through the REST API or the console."),
    )
)]
struct ApiDoc;

/// The document, built once.
pub fn document() -> &'static utoipa::openapi::OpenApi {
    static DOC: OnceLock<utoipa::openapi::OpenApi> = OnceLock::new();
    DOC.get_or_init(ApiDoc::openapi)
}

/// The document as JSON text, built once.
pub fn document_json() -> &'static str {
    static JSON: OnceLock<String> = OnceLock::new();
    JSON.get_or_init(|| serde_json::to_string(document()).expect("the OpenAPI document serialises"))
}

/// The OpenAPI 3.1 document of this API.
#[utoipa::path(
    get,
    path = "/v1/openapi.json",
    operation_id = "openapiDocument",
    tag = "Reference",
    security(()),
    responses(
        (status = 200, description = "The OpenAPI 3.1 document", content_type = "application/json",
            body = Object),
    )
)]
async fn openapi_json() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "application/json")],
        document_json(),
    )
}

struct SecuritySchemes;

impl Modify for SecuritySchemes {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "ApiKeyAuth",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "`Authorization: Bearer <API key>`. A key belongs to one project; it is \
                         shown once, when it is made (`pfk_…`).",
                    ))
                    .build(),
            ),
        );
        components.add_security_scheme(
            "BotTokenAuth",
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::with_description(
                "Authorization",
                "`Authorization: Bot <token>`, with the token answered when the bot was made (`pfb_…`).",
            ))),
        );
    }
}

/// Every operation that can fail inside (500) can also find its database out of reach
/// or full: 503 `unavailable` with `Retry-After`, added here once for all of them.
struct UnavailableAnswers;

impl Modify for UnavailableAnswers {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::header::HeaderBuilder;
        let mut response = error_response(
            "The database cannot be reached or is full (`unavailable`): nothing was changed; \
             try again after `Retry-After` seconds.",
        );
        response.headers.insert(
            "Retry-After".into(),
            HeaderBuilder::new()
                .schema(ObjectBuilder::new().schema_type(Type::Integer))
                .description(Some("Seconds to wait before trying again."))
                .build(),
        );
        openapi
            .components
            .get_or_insert_with(Default::default)
            .responses
            .insert("Unavailable".into(), response.into());
        for item in openapi.paths.paths.values_mut() {
            let operations = [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
                &mut item.patch,
            ];
            for operation in operations.into_iter().flatten() {
                let responses = &mut operation.responses.responses;
                if responses.contains_key("500") {
                    responses.insert("503".into(), Ref::from_response_name("Unavailable").into());
                }
            }
        }
    }
}

/// utoipa inlines the item schema of a generic `PageOf<T>`; this names it instead
/// (`PageOf_DeliveryView.data` → array of `DeliveryView`), so the items are one
/// schema, linked from the reference page.
struct NamedPageItems;

impl Modify for NamedPageItems {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::schema::ArrayItems;
        let Some(components) = openapi.components.as_mut() else {
            return;
        };
        let pages: Vec<String> = components
            .schemas
            .keys()
            .filter(|k| k.starts_with("PageOf_"))
            .cloned()
            .collect();
        for page in pages {
            let item_name = page["PageOf_".len()..].to_owned();
            let Some(RefOr::T(Schema::Object(object))) = components.schemas.get_mut(&page) else {
                continue;
            };
            let Some(RefOr::T(Schema::Array(data))) = object.properties.get_mut("data") else {
                continue;
            };
            let ArrayItems::RefOrSchema(items) = &mut data.items else {
                continue;
            };
            if matches!(**items, RefOr::Ref(_)) {
                continue;
            }
            let inline = std::mem::replace(
                &mut **items,
                Ref::from_schema_name(item_name.clone()).into(),
            );
            components.schemas.entry(item_name).or_insert(inline);
        }
    }
}

/// Error answers shared by many operations; each is `{"code","message"}`.
macro_rules! error_responses {
    ($($name:ident => $description:literal;)*) => {$(
        pub struct $name;

        impl<'r> ToResponse<'r> for $name {
            fn response() -> (&'r str, RefOr<Response>) {
                (stringify!($name), error_response($description).into())
            }
        }
    )*};
}

error_responses! {
    BadRequest => "The body is not valid JSON (`malformed_json`) or could not be read (`bad_request`).";
    Unauthorized => "Missing, invalid or revoked API key (`unauthorized`).";
    NotFound => "No such project for this API key, or no such resource in it (`not_found`). \
        A malformed ID is not found either.";
    PayloadTooLarge => "The body is larger than the server accepts (`body_too_large`; 1 MiB unless configured).";
    UnsupportedMediaType => "The body is not sent as `Content-Type: application/json` (`unsupported_media_type`).";
    Unprocessable => "Valid JSON of the wrong shape, with an unknown field, or a value out of range \
        (`invalid_body`, `invalid_query`, `invalid_limit`, `invalid_cursor`, `invalid_filter`, or a \
        code naming the rule, such as `invalid_url`).";
}

/// `500 internal`: the body's `requestId` and the `x-request-id` header name the log line
/// that holds the cause.
pub struct InternalError;

impl<'r> ToResponse<'r> for InternalError {
    fn response() -> (&'r str, RefOr<Response>) {
        let mut response = error_response(
            "The server failed (`internal`). The cause is logged, never shown; the body's \
             `requestId` (the same as the `x-request-id` header) names the log line.",
        );
        response.headers.insert(
            "x-request-id".into(),
            HeaderBuilder::new()
                .schema(
                    ObjectBuilder::new()
                        .schema_type(Type::String)
                        .pattern(Some("^req_[0-7][0-9a-hjkmnp-tv-z]{25}$")),
                )
                .description(Some(
                    "The ID the server gave this request (on every answer).",
                ))
                .build(),
        );
        ("InternalError", response.into())
    }
}

/// A JSON error answer with this description.
fn error_response(description: &str) -> Response {
    ResponseBuilder::new()
        .description(description)
        .content(
            "application/json",
            ContentBuilder::new()
                .schema(Some(Ref::from_schema_name("ErrorBody")))
                .build(),
        )
        .build()
}

/// The example ULID in every ID's schema.
const EXAMPLE_ULID: &str = "01jdqz8x9k5v3w2r1t0m4n6p8q";

/// An ID is its prefix, `_`, and a lowercase ULID (Crockford base32: no i, l, o, u;
/// the first character is at most 7).
macro_rules! id_schemas {
    ($($ty:ident => $what:literal,)*) => {$(
        impl PartialSchema for $ty {
            fn schema() -> RefOr<Schema> {
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .description(Some(concat!("The ID of ", $what, ": its prefix, `_`, and a lowercase ULID.")))
                    .pattern(Some(format!("^{}_[0-7][0-9a-hjkmnp-tv-z]{{25}}$", $ty::PREFIX)))
                    .examples([json!(format!("{}_{EXAMPLE_ULID}", $ty::PREFIX))])
                    .into()
            }
        }

        impl ToSchema for $ty {
            fn name() -> Cow<'static, str> {
                Cow::Borrowed(stringify!($ty))
            }
        }
    )*};
}

id_schemas! {
    SpaceId => "a project (space)",
    ChannelId => "a channel",
    MessageId => "a message",
    EventId => "an event",
    DestinationId => "a destination",
    DeliveryId => "a delivery",
    AttemptId => "an attempt",
    IncomingWebhookId => "an incoming webhook",
    BotId => "a bot",
    ApiKeyId => "an API key",
    NotificationId => "a notification",
    EventTypeId => "a catalogued event type",
    AuditId => "an audit entry",
}

/// A closed set of strings, listed from the type's own `ALL`.
macro_rules! enum_schemas {
    ($($ty:ident => $description:literal,)*) => {$(
        impl PartialSchema for $ty {
            fn schema() -> RefOr<Schema> {
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .description(Some($description))
                    .enum_values(Some($ty::ALL.iter().map(|v| v.as_str())))
                    .into()
            }
        }

        impl ToSchema for $ty {
            fn name() -> Cow<'static, str> {
                Cow::Borrowed(stringify!($ty))
            }
        }
    )*};
}

enum_schemas! {
    DeliveryStatus => "Where a delivery is in its life.",
    ErrorClass => "Why the last attempt did not succeed; `rate_limited` marks a \
        delivery held back by a rate limit, not a failure.",
    DestinationStatus => "`inactive` after auto-disable or by hand; inactive destinations get no \
        new deliveries.",
    IncomingWebhookStatus => "`disabled` after 100 failed requests in a row, or by hand.",
    MessageSourceKind => "Who posted a message.",
    RatePeriod => "The window of a rate limit.",
    DeliveryOrdering => "`fifo`: one attempt at a time, in the events' publish order; a \
        delivery waits while an earlier event's delivery to the destination is pending or \
        retrying (a failed or cancelled one does not hold it up). `none`: side by side.",
    AuditAction => "What a change did: the kind of thing changed, a dot, and what was done to it.",
    ActorKind => "Who made a change: a console `user` or an `api_key`.",
}

impl PartialSchema for RateLimit {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::Object)
            .description(Some(
                "At most `count` requests per `period` to this destination.",
            ))
            .property(
                "count",
                ObjectBuilder::new()
                    .schema_type(Type::Integer)
                    .format(Some(utoipa::openapi::SchemaFormat::KnownFormat(
                        utoipa::openapi::KnownFormat::Int32,
                    )))
                    .minimum(Some(1))
                    .maximum(Some(1_000_000)),
            )
            .required("count")
            .property("period", Ref::from_schema_name("RatePeriod"))
            .required("period")
            .examples([json!({"count": 10, "period": "second"})])
            .into()
    }
}

impl ToSchema for RateLimit {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("RateLimit")
    }

    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.push((RatePeriod::name().into(), RatePeriod::schema()));
    }
}

/// A destination's own request headers as given on create (docs §2.9): header name to
/// value, at most 20, names and values adding up to at most 4096 bytes. Names are HTTP
/// tokens, case-insensitive; the reserved ones (`webhook-id`, `webhook-timestamp`,
/// `webhook-signature`, `content-type`, `content-length`, `host`, `connection`,
/// `transfer-encoding`, `user-agent`) are refused (422 `reserved_header`).
pub struct HeadersInput;

/// Changes to a destination's headers: a name with a value sets it, a name with `null`
/// removes it, the headers not named stay as they are.
pub struct HeadersPatch;

const HEADER_NAME_PATTERN: &str = r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$";
const HEADER_VALUE_PATTERN: &str = r"^[\x21-\x7E]([\t\x20-\x7E]*[\x21-\x7E])?$";

/// An object of header name to `value` (a header value's schema).
fn headers_schema(description: &str, value: Schema) -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(Type::Object)
        .description(Some(description))
        .property_names(Some(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .pattern(Some(HEADER_NAME_PATTERN)),
        ))
        .additional_properties(Some(value))
        .max_properties(Some(crate::ops::headers::MAX_HEADERS))
        .examples([json!({"Authorization": "Basic dXNlcjpwYXNz", "X-Team": "ops"})])
        .into()
}

fn header_value_schema(nullable: bool) -> Schema {
    let types = if nullable {
        utoipa::openapi::schema::SchemaType::from_iter([Type::String, Type::Null])
    } else {
        Type::String.into()
    };
    ObjectBuilder::new()
        .schema_type(types)
        .min_length(Some(1))
        .max_length(Some(crate::ops::headers::MAX_HEADER_BYTES))
        .pattern(Some(HEADER_VALUE_PATTERN))
        .into()
}

impl PartialSchema for HeadersInput {
    fn schema() -> RefOr<Schema> {
        headers_schema(
            "Header name to value: visible ASCII, spaces only inside. At most 20 headers, \
             4096 bytes of names and values; reserved names are refused.",
            header_value_schema(false),
        )
    }
}

impl ToSchema for HeadersInput {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("HeadersInput")
    }
}

impl PartialSchema for HeadersPatch {
    fn schema() -> RefOr<Schema> {
        headers_schema(
            "Header name to a new value, or to `null` to remove it; headers not named stay \
             as they are. The result must keep to the limits of `HeadersInput`.",
            header_value_schema(true),
        )
    }
}

impl ToSchema for HeadersPatch {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("HeadersPatch")
    }
}

/// An event type a destination subscribes to: 1-100 of `A-Z a-z 0-9 . _ : -`; such a
/// type followed by `.*` for every type under it (`order.*` takes `order.created` and
/// `order.refund.done`); or `*` for every type.
#[derive(ToSchema)]
#[schema(
    pattern = r"^(\*|[A-Za-z0-9._:-]{1,100}|[A-Za-z0-9._:-]{1,98}\.\*)$",
    examples("order.created", "order.*")
)]
#[allow(dead_code)]
pub struct EventTypePattern(String);

/// The retry policy as answered: every field filled in (docs §2.3).
#[derive(ToSchema)]
#[schema(rename_all = "camelCase")]
#[allow(dead_code)]
pub struct RetryPolicy {
    preset: RetryPreset,
    /// The delay after the first failure, in milliseconds.
    initial_ms: u64,
    /// The longest backoff delay, in milliseconds (at most 86400000).
    max_ms: u64,
    /// The fraction (0 to 1) by which a delay may randomly shrink or grow.
    jitter: f64,
    retry_after: RetryAfterMode,
}

/// A retry policy as given: `preset` and any of its settings to override.
#[derive(ToSchema)]
#[schema(rename_all = "camelCase")]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct RetryPolicyInput {
    preset: RetryPreset,
    /// The delay after the first failure, in milliseconds (at least 1, at most `maxMs`).
    #[schema(minimum = 1)]
    initial_ms: Option<u64>,
    /// The longest backoff delay, in milliseconds.
    #[schema(maximum = 86_400_000)]
    max_ms: Option<u64>,
    #[schema(minimum = 0.0, maximum = 1.0)]
    jitter: Option<f64>,
    retry_after: Option<RetryAfterMode>,
}

/// `partyflow`: fast retries with jitter, 4xx other than 408/429 fail at once;
/// `standard`: slower, no jitter, retries every failure it can.
#[derive(ToSchema)]
#[schema(rename_all = "lowercase")]
#[allow(dead_code)]
pub enum RetryPreset {
    Partyflow,
    Standard,
}

/// How a receiver's `Retry-After` combines with the backoff: `replace` uses it when it is
/// within [1 s, 1 h]; `extend` uses it when it is longer, capped at 1 h.
#[derive(ToSchema)]
#[schema(rename_all = "lowercase")]
#[allow(dead_code)]
pub enum RetryAfterMode {
    Replace,
    Extend,
}

/// Path parameters: the project, and the ID of one resource in it.
macro_rules! path_params {
    ($($name:ident { $($(#[doc = $doc:literal])* $field:ident: $ty:ty),* })*) => {$(
        #[derive(utoipa::IntoParams)]
        #[into_params(parameter_in = Path)]
        #[allow(dead_code)]
        pub struct $name {
            /// The project (space) of the API key; any other answers 404.
            #[param(inline)]
            project: SpaceId,
            $($(#[doc = $doc])* #[param(inline)] $field: $ty,)*
        }
    )*};
}

path_params! {
    ProjectPath {}
    DestinationPath { /// The destination.
        id: DestinationId }
    EventPath { /// The event.
        id: EventId }
    DeliveryPath { /// The delivery.
        id: DeliveryId }
    ChannelPath { /// The channel.
        id: ChannelId }
    IncomingWebhookPath { /// The incoming webhook.
        id: IncomingWebhookId }
    BotPath { /// The bot.
        id: BotId }
    ApiKeyPath { /// The API key.
        id: ApiKeyId }
    NotificationPath { /// The notification.
        id: NotificationId }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    fn doc() -> Value {
        serde_json::from_str(document_json()).unwrap()
    }

    fn refs<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
        match v {
            Value::Object(map) => {
                if let Some(Value::String(r)) = map.get("$ref") {
                    out.push(r);
                }
                map.values().for_each(|v| refs(v, out));
            }
            Value::Array(items) => items.iter().for_each(|v| refs(v, out)),
            _ => {}
        }
    }

    #[test]
    fn every_reference_points_to_a_component() {
        let doc = doc();
        let mut found = Vec::new();
        refs(&doc, &mut found);
        assert!(!found.is_empty());
        for r in found {
            let path = r
                .strip_prefix("#/")
                .unwrap_or_else(|| panic!("{r} is not local"));
            let target = path.split('/').fold(&doc, |v, part| &v[part]);
            assert!(!target.is_null(), "{r} points nowhere");
        }
    }

    #[test]
    fn operation_ids_are_unique_and_every_api_call_documents_its_auth_errors() {
        let doc = doc();
        assert_eq!(doc["openapi"], "3.1.0");
        let mut ids = std::collections::HashSet::new();
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                let id = op["operationId"].as_str().unwrap();
                assert!(ids.insert(id.to_owned()), "{id} twice");
                let responses = op["responses"].as_object().unwrap();
                if path.starts_with("/v1/projects/") {
                    assert!(
                        op.get("security").is_none(),
                        "{method} {path} uses the API key"
                    );
                    for status in ["401", "404", "500"] {
                        assert!(
                            responses.contains_key(status),
                            "{method} {path} lacks {status}"
                        );
                    }
                    let params = op["parameters"].as_array().unwrap();
                    assert_eq!(params[0]["name"], "project", "{method} {path}");
                }
                if op.get("requestBody").is_some() && path != "/hooks/{webhook_id}/{token}" {
                    for status in ["400", "413", "422"] {
                        assert!(
                            responses.contains_key(status),
                            "{method} {path} lacks {status}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn ids_are_documented_with_their_prefix_pattern() {
        let doc = doc();
        let pattern = doc["components"]["schemas"]["DeliveryId"]["pattern"]
            .as_str()
            .unwrap();
        assert_eq!(pattern, "^dlv_[0-7][0-9a-hjkmnp-tv-z]{25}$");
        let id = DeliveryId::new().to_string();
        let body = id.strip_prefix("dlv_").unwrap();
        assert!(body.starts_with(|c: char| ('0'..='7').contains(&c)));
        assert!(body
            .chars()
            .all(|c| c.is_ascii_digit() || (c.is_ascii_lowercase() && !"ilou".contains(c))));
    }
}
