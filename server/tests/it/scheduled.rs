//! Scheduled delivery (docs §2.1) through the real API to a real receiver: an event
//! published with `deliverAt` waits as `pending` until then, arrives within a second
//! after it and never before; one cancelled before its time never arrives; a time
//! more than 30 days ahead, or not a time, is refused.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::on_both_backends;
use server::clock::{now_ms, rfc3339};
use server::testkit::{eventually, spawn_app, Receiver, TestApp};

/// Publishes an event of `kind` to go out `delay_ms` from now; returns its ID, the
/// `deliverAt` sent and the instant it stands for on this process's monotonic clock.
async fn publish_at(app: &TestApp, kind: &str, delay_ms: i64) -> (String, String, Instant) {
    let (clock, wall) = (Instant::now(), now_ms());
    let at = rfc3339(wall + delay_ms);
    let (status, answer) = app
        .post(
            "/events",
            json!({"type": kind, "payload": {"kind": kind}, "deliverAt": at}),
        )
        .await;
    assert_eq!(status, 202, "{answer}");
    let due = clock + Duration::from_millis(delay_ms as u64);
    (answer["id"].as_str().unwrap().to_owned(), at, due)
}

async fn only_delivery(app: &TestApp, event_id: &str) -> Value {
    let ds = app.deliveries_of(event_id).await;
    assert_eq!(ds.len(), 1, "{ds:?}");
    ds[0].clone()
}

on_both_backends! {
    async fn a_scheduled_event_arrives_within_a_second_after_its_time_and_a_cancelled_one_never(db) {
        let app = spawn_app(&db).await.with_space().await;
        let rx = Receiver::start().await;
        app.destination(json!({"url": rx.url("/hook")})).await;

        let (kept, at, due) = publish_at(&app, "order.kept", 1_500).await;
        let (dropped, _, _) = publish_at(&app, "order.dropped", 1_500).await;

        // Waiting, due at the time asked, shown on the delivery and the event.
        let d = only_delivery(&app, &kept).await;
        assert_eq!(d["status"], "pending", "{d}");
        assert_eq!(d["nextAttemptAt"], json!(at));
        assert_eq!(d["deliverAt"], json!(at));
        let (_, event) = app.get(&format!("/events/{kept}")).await;
        assert_eq!(event["deliverAt"], json!(at), "{event}");

        // Cancelled before its time: never sent.
        let cancel = only_delivery(&app, &dropped).await;
        let (status, cancelled) = app
            .post(&format!("/deliveries/{}/cancel", cancel["id"].as_str().unwrap()), json!({}))
            .await;
        assert_eq!((status, cancelled["status"].clone()), (200, json!("cancelled")), "{cancelled}");

        tokio::time::sleep(Duration::from_millis(1_000)).await;
        assert!(rx.received().is_empty(), "nothing goes out before its time");

        let arrived = rx.wait_for(1).await;
        let at_receiver = arrived[0].at;
        assert!(
            at_receiver + Duration::from_millis(2) >= due,
            "arrived {:?} before deliverAt",
            due - at_receiver
        );
        assert!(
            at_receiver <= due + Duration::from_secs(1),
            "arrived {:?} after deliverAt",
            at_receiver - due
        );
        assert!(arrived[0].body.contains("order.kept"), "{}", arrived[0].body);
        app.wait_for_delivery(&kept, "succeeded").await;

        tokio::time::sleep(Duration::from_millis(700)).await;
        assert_eq!(rx.received().len(), 1, "the cancelled one never arrives");
        assert_eq!(only_delivery(&app, &dropped).await["status"], "cancelled");
        app.stop().await;
    }
}

on_both_backends! {
    async fn a_time_past_goes_at_once_and_one_too_far_or_not_a_time_is_refused(db) {
        let app = spawn_app(&db).await.with_space().await;
        let rx = Receiver::start().await;
        app.destination(json!({"url": rx.url("/hook")})).await;

        let (status, answer) = app
            .post(
                "/events",
                json!({"type": "order.late", "payload": {}, "deliverAt": "2020-01-01T00:00:00Z"}),
            )
            .await;
        assert_eq!(status, 202, "{answer}");
        let event = answer["id"].as_str().unwrap().to_owned();
        rx.wait_for(1).await;
        let d = eventually(10, || async {
            let d = only_delivery(&app, &event).await;
            (d["status"] == "succeeded").then_some(d)
        })
        .await;
        assert!(d["deliverAt"].is_null(), "{d}");

        let too_far = rfc3339(now_ms() + 30 * 24 * 3600 * 1000 + 60_000);
        for bad in [json!(too_far), json!("tomorrow"), json!("2026-12-01 15:30:00")] {
            let (status, err) = app
                .post("/events", json!({"type": "order.x", "payload": {}, "deliverAt": bad}))
                .await;
            assert_eq!(status, 422, "{bad}: {err}");
            assert_eq!(err["code"], "invalid_deliver_at", "{err}");
        }
        let (_, events) = app.get("/events").await;
        assert_eq!(events["data"].as_array().unwrap().len(), 1, "nothing refused was stored");
        app.stop().await;
    }
}
