//! Retry-After end to end (docs §2.3, §2.4): each format a receiver may use, the
//! values out of range, and how each preset combines them with its backoff.
//!
//! Nothing here waits for a retry: after the first attempt the delivery is
//! `retrying`, and its `nextAttemptAt` says which delay the engine chose. The
//! policies make the two candidates far apart: a 600 s backoff under `partyflow`
//! (so "Retry-After used" and "backoff used" cannot be confused) and a 20 s one
//! under `standard` (so a longer Retry-After wins and a shorter one loses).

use std::time::{Duration, SystemTime};

use serde_json::{json, Value};

use crate::on_both_backends;
use server::testkit::{spawn_app, Receiver, Reply, TestApp};

/// Partyflow rules (Retry-After replaces the backoff when in [1 s, 1 h]) with a
/// 600 s backoff and no jitter.
fn partyflow_600s() -> Value {
    json!({"preset": "partyflow", "initialMs": 600_000, "maxMs": 600_000, "jitter": 0})
}

/// Standard rules (Retry-After is used when longer, capped at 1 h) with a 20 s
/// backoff and no jitter.
fn standard_20s() -> Value {
    json!({"preset": "standard", "initialMs": 20_000, "maxMs": 20_000, "jitter": 0})
}

/// Unix milliseconds of an RFC 3339 time from the API.
pub(crate) fn unix_ms(v: &Value) -> i64 {
    let s = v
        .as_str()
        .unwrap_or_else(|| panic!("expected an RFC 3339 time, got {v}"));
    let t = time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|e| panic!("{s:?} is not RFC 3339: {e}"));
    (t.unix_timestamp_nanos() / 1_000_000) as i64
}

/// When the last attempt of `delivery` ended, in Unix milliseconds: the engine
/// schedules the next one from that moment.
pub(crate) fn last_attempt_ended_ms(delivery: &Value) -> i64 {
    let attempts = delivery["attempts"]
        .as_array()
        .expect("the delivery carries its attempts");
    let last = attempts.last().expect("at least one attempt");
    unix_ms(&last["startedAt"]) + last["durationMs"].as_i64().unwrap()
}

/// How much later than the ideal a scheduled time may be: the time between the
/// end of the attempt and its recording, on a loaded machine.
pub(crate) const LATE_MS: i64 = 3_000;
/// How much earlier: only clock rounding.
pub(crate) const EARLY_MS: i64 = 250;

/// What the engine should do after the first attempt.
enum Expect {
    /// Retry this long after the attempt ended.
    After(Duration),
    /// Retry at this moment (an HTTP-date Retry-After).
    At(SystemTime),
    /// Dead-letter at once.
    DeadLetter,
}

struct Case {
    what: &'static str,
    policy: Value,
    reply: Reply,
    expect: Expect,
}

fn case(what: &'static str, policy: Value, reply: Reply, expect: Expect) -> Case {
    Case {
        what,
        policy,
        reply,
        expect,
    }
}

fn secs(s: u64) -> Expect {
    Expect::After(Duration::from_secs(s))
}

/// 429 with a `Retry-After` header.
fn too_many(retry_after: &str) -> Reply {
    Reply::status(429).header("retry-after", retry_after)
}

/// An HTTP-date `secs` seconds from now (negative: in the past), and the moment it
/// names (whole seconds: the format has no fractions).
fn http_date_in(secs: i64) -> (String, SystemTime) {
    let at = if secs >= 0 {
        SystemTime::now() + Duration::from_secs(secs as u64)
    } else {
        SystemTime::now() - Duration::from_secs(secs.unsigned_abs())
    };
    let date = httpdate::fmt_http_date(at);
    let named = httpdate::parse_http_date(&date).unwrap();
    (date, named)
}

/// Runs every case on its own destination and receiver (which always answers
/// with the case's reply), then checks what the engine decided after the first attempt.
async fn check(app: &TestApp, cases: Vec<Case>) {
    let mut running = Vec::new();
    for (i, c) in cases.into_iter().enumerate() {
        let rx = Receiver::start().await;
        rx.set_default(c.reply.clone());
        let event_type = format!("case.{i}");
        app.destination(
            json!({"url": rx.url("/"), "eventTypes": [event_type], "retryPolicy": c.policy}),
        )
        .await;
        let event = app.publish(&event_type, json!({"case": c.what})).await;
        running.push((c, rx, event));
    }
    for (c, rx, event) in running {
        let what = c.what;
        let status = if matches!(c.expect, Expect::DeadLetter) {
            "failed"
        } else {
            "retrying"
        };
        let d = app.wait_for_delivery(&event, status).await;
        assert_eq!(d["attemptCount"], 1, "{what}: {d}");
        assert_eq!(d["lastStatusCode"], c.reply.status, "{what}: {d}");
        assert_eq!(d["lastErrorClass"], "http", "{what}: {d}");
        assert_eq!(rx.received().len(), 1, "{what}: one request so far");
        let ended = last_attempt_ended_ms(&d);
        let (wanted, next) = match c.expect {
            Expect::DeadLetter => {
                assert!(
                    d["nextAttemptAt"].is_null(),
                    "{what}: dead-lettered, nothing next: {d}"
                );
                continue;
            }
            Expect::After(delay) => (
                ended + delay.as_millis() as i64,
                unix_ms(&d["nextAttemptAt"]),
            ),
            Expect::At(at) => {
                let at = at
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .unwrap()
                    .as_millis() as i64;
                (at, unix_ms(&d["nextAttemptAt"]))
            }
        };
        assert!(
            (wanted - EARLY_MS..=wanted + LATE_MS).contains(&next),
            "{what}: the next attempt is {:.1} s after the first ended; expected {:.1} s",
            (next - ended) as f64 / 1000.0,
            (wanted - ended) as f64 / 1000.0,
        );
    }
}

on_both_backends! {
    async fn under_partyflow_every_retry_after_format_replaces_the_backoff(db) {
        let app = spawn_app(&db).await.with_space().await;
        let (date, at) = http_date_in(30);
        let p = partyflow_600s;
        check(&app, vec![
            case("header delta-seconds", p(), too_many("30"), secs(30)),
            case("header HTTP-date", p(), too_many(&date), Expect::At(at)),
            case("JSON body", p(), Reply::status(429).body(r#"{"retry_after": 45}"#), secs(45)),
            case("bare number body", p(), Reply::status(429).body("50"), secs(50)),
            case("header wins over body", p(), too_many("35").body(r#"{"retry_after": 45}"#), secs(35)),
            case("exactly one hour", p(), too_many("3600"), secs(3600)),
        ])
        .await;
        app.stop().await;
    }
}

on_both_backends! {
    async fn under_partyflow_a_retry_after_outside_one_second_to_one_hour_or_unreadable_is_ignored(db) {
        let app = spawn_app(&db).await.with_space().await;
        let (past, _) = http_date_in(-30);
        let p = partyflow_600s;
        check(&app, vec![
            case("0 s", p(), too_many("0"), secs(600)),
            case("3601 s", p(), too_many("3601"), secs(600)),
            case("7200 s", p(), too_many("7200"), secs(600)),
            case("7200 s in a JSON body", p(), Reply::status(429).body(r#"{"retry_after": 7200}"#), secs(600)),
            case("0 s as a bare body", p(), Reply::status(503).body("0"), secs(600)),
            case("an HTTP-date in the past", p(), too_many(&past), secs(600)),
            case("garbage header and body", p(), too_many("soon").body("in a while"), secs(600)),
            case("a string in the JSON body", p(), Reply::status(429).body(r#"{"retry_after": "30"}"#), secs(600)),
            case("negative", p(), too_many("-30"), secs(600)),
            case("none at all", p(), Reply::status(429), secs(600)),
        ])
        .await;
        app.stop().await;
    }
}

on_both_backends! {
    async fn under_standard_every_retry_after_format_is_used_when_longer_than_the_backoff_and_capped_at_an_hour(db) {
        let app = spawn_app(&db).await.with_space().await;
        let (date, at) = http_date_in(30);
        let s = standard_20s;
        check(&app, vec![
            case("header delta-seconds", s(), too_many("30"), secs(30)),
            case("header HTTP-date", s(), too_many(&date), Expect::At(at)),
            case("JSON body", s(), Reply::status(429).body(r#"{"retry_after": 45}"#), secs(45)),
            case("bare number body", s(), Reply::status(429).body("50"), secs(50)),
            case("7200 s header", s(), too_many("7200"), secs(3600)),
            case("7200 s JSON body", s(), Reply::status(429).body(r#"{"retry_after": 7200}"#), secs(3600)),
            case("exactly one hour", s(), too_many("3600"), secs(3600)),
        ])
        .await;
        app.stop().await;
    }
}

on_both_backends! {
    async fn under_standard_a_retry_after_shorter_than_the_backoff_or_unreadable_leaves_the_backoff(db) {
        let app = spawn_app(&db).await.with_space().await;
        let (past, _) = http_date_in(-30);
        let s = standard_20s;
        check(&app, vec![
            case("10 s", s(), too_many("10"), secs(20)),
            case("0 s", s(), too_many("0"), secs(20)),
            case("an HTTP-date in the past", s(), too_many(&past), secs(20)),
            case("garbage header and body", s(), too_many("soon").body("in a while"), secs(20)),
            case("none at all", s(), Reply::status(429), secs(20)),
            case("30 s against a 600 s backoff",
                json!({"preset": "standard", "initialMs": 600_000, "maxMs": 600_000}),
                too_many("30"), secs(600)),
        ])
        .await;
        app.stop().await;
    }
}

on_both_backends! {
    async fn retry_after_is_honoured_on_503_and_ignored_on_500_under_both_presets(db) {
        let app = spawn_app(&db).await.with_space().await;
        let at_30 = |status| Reply::status(status).header("retry-after", "30");
        check(&app, vec![
            case("partyflow 503", partyflow_600s(), at_30(503), secs(30)),
            case("partyflow 500", partyflow_600s(), at_30(500), secs(600)),
            case("partyflow 502", partyflow_600s(), at_30(502), secs(600)),
            case("partyflow 500 with a JSON body", partyflow_600s(),
                Reply::status(500).body(r#"{"retry_after": 30}"#), secs(600)),
            case("standard 503", standard_20s(), at_30(503), secs(30)),
            case("standard 500", standard_20s(), at_30(500), secs(20)),
            case("standard 500 with a bare body", standard_20s(), Reply::status(500).body("30"), secs(20)),
        ])
        .await;
        app.stop().await;
    }
}

on_both_backends! {
    async fn a_5xx_is_retried_under_both_presets_and_a_4xx_other_than_408_and_429_only_under_standard(db) {
        let app = spawn_app(&db).await.with_space().await;
        check(&app, vec![
            case("partyflow 500", partyflow_600s(), Reply::status(500), secs(600)),
            case("partyflow 408", partyflow_600s(), Reply::status(408), secs(600)),
            case("partyflow 400", partyflow_600s(), Reply::status(400), Expect::DeadLetter),
            case("partyflow 410", partyflow_600s(), Reply::status(410), Expect::DeadLetter),
            case("standard 500", standard_20s(), Reply::status(500), secs(20)),
            case("standard 400", standard_20s(), Reply::status(400), secs(20)),
            case("standard 410", standard_20s(), Reply::status(410), secs(20)),
        ])
        .await;
        app.stop().await;
    }
}
