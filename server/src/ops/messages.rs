//! Posting a message, whoever posts it (docs §1, §3, §4): the REST API with an API key,
//! an incoming webhook, a bot. The text rule, the message's published shape and its
//! `message.created` event live here once.
//!
//! [`post`] stores the message and its `message.created` event with the event's fan-out
//! in one transaction, so a message answered 201 is on its way to every subscribed
//! destination, and tells the engine which destinations have work ([`EngineHandle`]).
//! [`post_once`] also remembers a signed incoming request's `webhook-id` in that
//! transaction (the replay memory, docs §3).

use serde::Serialize;
use serde_json::Value;

use super::event_types::{check_payload_at, SchemaCache};
use super::filters::{self, ProgramRun};
use super::OpsError;
use crate::clock::rfc3339;
use crate::dispatch::engine::EngineHandle;
use crate::domain::*;
use crate::storage::{IncomingReplay, NewEvent, PublishChecks, Published, Storage};

/// The type of the event every new message emits (docs §1).
pub const MESSAGE_CREATED: &str = "message.created";

/// A message as every answer and the `message.created` payload show it.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = Message)]
pub struct MessageView {
    pub id: MessageId,
    pub channel_id: ChannelId,
    pub text: String,
    /// Always an array; empty when the message has none.
    #[schema(value_type = Vec<Value>)]
    pub attachments: Value,
    /// `incoming_webhook`, `bot` or `api`.
    pub source_kind: MessageSourceKind,
    /// The webhook, bot or API key that posted it.
    #[schema(required = true)]
    pub source_id: Option<String>,
    #[schema(format = DateTime)]
    pub created_at: String,
}

impl From<&Message> for MessageView {
    fn from(m: &Message) -> Self {
        Self {
            id: m.id,
            channel_id: m.channel_id,
            text: m.text.clone(),
            attachments: m
                .attachments
                .clone()
                .unwrap_or_else(|| Value::Array(Vec::new())),
            source_kind: m.source_kind,
            source_id: m.source_id.clone(),
            created_at: rfc3339(m.created_at),
        }
    }
}

/// A message's text and attachments, once they meet the rules.
#[derive(Debug)]
pub struct NewMessage {
    pub text: String,
    pub attachments: Option<Value>,
}

impl NewMessage {
    /// The text must have 1 to `max_chars` characters (not bytes), not be only white
    /// space and have no NUL characters; the refusal's code says which rule.
    pub fn new(
        text: String,
        attachments: Option<Vec<Value>>,
        max_chars: usize,
    ) -> Result<Self, OpsError> {
        if text.trim().is_empty() {
            return Err(OpsError::invalid("empty_text", "text must not be empty"));
        }
        if text.contains('\0') {
            return Err(OpsError::invalid(
                "invalid_text",
                "text must not contain NUL characters",
            ));
        }
        let chars = text.chars().count();
        if chars > max_chars {
            return Err(OpsError::invalid(
                "text_too_long",
                format!("text may have at most {max_chars} characters, not {chars}"),
            ));
        }
        Ok(NewMessage {
            text,
            attachments: attachments.map(Value::Array),
        })
    }
}

/// Who posts a message.
#[derive(Debug, Clone, Copy)]
pub enum Source {
    Api(ApiKeyId),
    Bot(BotId),
    IncomingWebhook(IncomingWebhookId),
}

impl Source {
    /// The `source` label of `partyflow_events_published_total`.
    fn metrics_source(self) -> crate::metrics::EventSource {
        match self {
            Source::Api(_) => crate::metrics::EventSource::Api,
            Source::Bot(_) => crate::metrics::EventSource::Bot,
            Source::IncomingWebhook(_) => crate::metrics::EventSource::Incoming,
        }
    }

    fn kind_and_id(self) -> (MessageSourceKind, String) {
        match self {
            Source::Api(id) => (MessageSourceKind::Api, id.to_string()),
            Source::Bot(id) => (MessageSourceKind::Bot, id.to_string()),
            Source::IncomingWebhook(id) => (MessageSourceKind::IncomingWebhook, id.to_string()),
        }
    }
}

/// The message record for `new` in `channel`, posted by `source` at `now`.
fn message(channel: &Channel, new: NewMessage, source: Source, now: UnixMs) -> Message {
    let (source_kind, source_id) = source.kind_and_id();
    Message {
        id: MessageId::new(),
        space_id: channel.space_id,
        channel_id: channel.id,
        text: new.text,
        attachments: new.attachments,
        source_kind,
        source_id: Some(source_id),
        created_at: now,
    }
}

/// The `message.created` payload: the message as answers show it, plus `spaceId`.
pub fn payload(message: &Message) -> Result<Value, OpsError> {
    let mut payload = serde_json::to_value(MessageView::from(message))
        .map_err(|e| OpsError::Internal(anyhow::Error::new(e).context("serialising a message")))?;
    if let Value::Object(fields) = &mut payload {
        fields.insert(
            "spaceId".into(),
            Value::String(message.space_id.to_string()),
        );
    }
    Ok(payload)
}

/// What judges a message's event before anything is written: the catalog's schemas
/// (a payload that breaks one is refused) and the destinations' filters, run by
/// `programs` (the sandbox).
pub struct Judges<'a, P> {
    pub schemas: &'a SchemaCache,
    pub programs: &'a P,
}

/// The channel a message goes into, with its space's publish checks for
/// `message.created` when the caller read them with its own look-up (a bot reads its
/// token, the channel and the checks in one read); `None` reads them here.
pub struct Target<'a> {
    pub channel: &'a Channel,
    pub checks: Option<PublishChecks>,
}

impl<'a> From<&'a Channel> for Target<'a> {
    fn from(channel: &'a Channel) -> Self {
        Self {
            channel,
            checks: None,
        }
    }
}

/// Stores a message in `to`'s channel and its `message.created` event fanned out to the
/// subscribed destinations (after the [`Judges`]), in one transaction; hints the engine
/// about the destinations that have something to send.
pub async fn post(
    store: &dyn Storage,
    engine: &EngineHandle,
    judges: Judges<'_, impl ProgramRun>,
    to: Target<'_>,
    new: NewMessage,
    source: Source,
) -> Result<Message, OpsError> {
    post_once(store, engine, judges, to, new, source, None)
        .await?
        .ok_or_else(|| {
            OpsError::Internal(anyhow::anyhow!("a message without a webhook-id replayed"))
        })
}

/// [`post`] that also remembers a signed incoming request's `webhook-id` in the same
/// transaction; `None` when that ID was remembered before (a replay: nothing written).
/// A `message.created` type catalogued with a schema checks the payload first.
pub async fn post_once(
    store: &dyn Storage,
    engine: &EngineHandle,
    judges: Judges<'_, impl ProgramRun>,
    to: Target<'_>,
    new: NewMessage,
    source: Source,
    replay: Option<IncomingReplay<'_>>,
) -> Result<Option<Message>, OpsError> {
    let now = crate::clock::now_ms();
    let message = message(to.channel, new, source, now);
    let event = Event {
        id: EventId::new_in_order(),
        space_id: to.channel.space_id,
        event_type: MESSAGE_CREATED.into(),
        payload: payload(&message)?,
        created_at: now,
        deliver_at: None,
    };
    // The schema's version and the filtering destinations, in one read (unless read).
    let checks = match to.checks {
        Some(checks) => checks,
        None => {
            store
                .publish_checks(event.space_id, &event.event_type)
                .await?
        }
    };
    check_payload_at(
        store,
        judges.schemas,
        event.space_id,
        &event.event_type,
        &event.payload,
        checks.schema_version,
    )
    .await?;
    // Before the transaction: a replayed request runs the filters for nothing, but
    // the write never waits on a program.
    let filters = filters::verdicts_among(checks.filtering, judges.programs, &event).await?;
    // The message's transaction may claim its deliveries itself, as a REST publish does.
    let reserved = engine.reserve();
    let event = NewEvent {
        event,
        idempotency_key: None,
        request_hash: String::new(),
        filters,
        claim: reserved.as_ref().map(|r| r.claim.clone()),
        subscribers: None,
    };
    match store.post_message(&message, &event, replay, now).await? {
        None => return Ok(None),
        Some(Published::Created {
            destinations,
            claimed,
            ..
        }) => {
            crate::metrics::event_published(source.metrics_source());
            engine.published(reserved, destinations, claimed)
        }
        Some(_) => {}
    }
    Ok(Some(message))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(t: &str, max: usize) -> Result<NewMessage, OpsError> {
        NewMessage::new(t.into(), None, max)
    }

    fn code(r: Result<NewMessage, OpsError>) -> &'static str {
        match r {
            Err(OpsError::Invalid { code, .. }) => code,
            other => panic!("not refused: {other:?}"),
        }
    }

    #[test]
    fn a_message_text_must_have_one_to_max_characters_not_bytes() {
        assert!(text("hi", 2).is_ok());
        assert!(text("ёж", 2).is_ok(), "two characters, four bytes");
        assert_eq!(code(text("abc", 2)), "text_too_long");
        for blank in ["", "  \n\t"] {
            assert_eq!(code(text(blank, 10)), "empty_text");
        }
        assert_eq!(code(text("a\0b", 10)), "invalid_text");
    }

    #[test]
    fn the_payload_is_the_message_as_answered_plus_its_space() {
        let channel = Channel {
            id: ChannelId::new(),
            space_id: SpaceId::new(),
            name: "deploys".into(),
            created_at: 0,
        };
        let new = NewMessage::new("hi".into(), Some(vec![Value::from(1)]), 10).unwrap();
        let bot = BotId::new();
        let m = message(&channel, new, Source::Bot(bot), 1_000);
        let p = payload(&m).unwrap();
        assert_eq!(p["spaceId"], channel.space_id.to_string());
        assert_eq!(p["channelId"], channel.id.to_string());
        assert_eq!(p["sourceKind"], "bot");
        assert_eq!(p["sourceId"], bot.to_string());
        assert_eq!(p["attachments"], serde_json::json!([1]));
        assert_eq!(p["createdAt"], "1970-01-01T00:00:01Z");
    }
}
