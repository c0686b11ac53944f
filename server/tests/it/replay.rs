//! Replaying a window of failed deliveries and its preview (docs §2.7), over the real
//! API to a real receiver.

use std::time::Duration;

use serde_json::{json, Value};

use crate::on_both_backends;
use server::testkit::{eventually, spawn_app, Receiver, Reply};

fn now_ms() -> i64 {
    server::clock::now_ms()
}

/// A pause so that deliveries created on either side of a time fall clearly inside or
/// outside a window.
async fn tick() {
    tokio::time::sleep(Duration::from_millis(30)).await;
}

on_both_backends! {
    async fn a_replay_window_sends_exactly_the_failed_deliveries_inside_it_and_its_preview_counts_them(db) {
        let app = spawn_app(&db).await.with_space().await;
        let rx = Receiver::start().await;
        rx.set_default(Reply::status(400));
        app.destination(json!({"url": rx.url("/http"), "eventTypes": ["order.paid", "order.shipped"]})).await;
        // Nothing listens on port 9 of 127.0.0.1: its deliveries fail with class `connect`.
        app.destination(json!({"url": "http://127.0.0.1:9/connect", "eventTypes": ["order.paid"], "maxAttempts": 1})).await;

        let before = app.publish("order.paid", json!({"n": "before"})).await;
        tick().await;
        let since = now_ms();
        tick().await;
        let inside_paid = app.publish("order.paid", json!({"n": "inside"})).await;
        let inside_shipped = app.publish("order.shipped", json!({"n": "inside-shipped"})).await;
        tick().await;
        let until = now_ms();
        tick().await;
        let after = app.publish("order.paid", json!({"n": "after"})).await;
        for e in [&before, &inside_paid, &after] {
            eventually(30, || async {
                let ds = app.deliveries_of(e).await;
                (ds.len() == 2 && ds.iter().all(|d| d["status"] == "failed")).then_some(())
            }).await;
        }
        app.wait_for_delivery(&inside_shipped, "failed").await;
        let received_before = rx.received().len();
        assert_eq!(received_before, 4, "four deliveries to the receiver, each failed with 400");

        // The window, one event type and one error class: exactly one delivery.
        let body = json!({
            "since": since.to_string(),
            "until": until.to_string(),
            "eventType": "order.paid",
            "errorClass": "http",
        });
        let (status, preview) = app.post("/deliveries/resend-failed/preview", body.clone()).await;
        assert_eq!(status, 200, "{preview}");
        assert_eq!(preview, json!({"count": 1}));
        // The preview sends nothing and changes nothing.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(rx.received().len(), received_before, "the preview sent nothing");
        let (_, again) = app.post("/deliveries/resend-failed/preview", body.clone()).await;
        assert_eq!(again, json!({"count": 1}));

        // Wider choices count more: the window alone (three failed inside: paid to both
        // destinations and shipped), the window and the class `connect`, the whole space.
        let window = json!({"since": since.to_string(), "until": until.to_string()});
        assert_eq!(app.post("/deliveries/resend-failed/preview", window).await.1, json!({"count": 3}));
        let connect = json!({"since": since.to_string(), "until": until.to_string(), "errorClass": "connect"});
        assert_eq!(app.post("/deliveries/resend-failed/preview", connect).await.1, json!({"count": 1}));
        assert_eq!(app.post("/deliveries/resend-failed/preview", json!({})).await.1, json!({"count": 7}));

        let (status, answer) = app.post("/deliveries/resend-failed", body.clone()).await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer, json!({"resent": 1, "remaining": 0}));
        let got = rx.wait_for(received_before + 1).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(rx.received().len(), received_before + 1, "only the one inside the window was sent");
        let resent: Value = serde_json::from_str(&got[received_before].body).unwrap();
        assert_eq!(resent["n"], "inside", "{resent}");

        // The one resent is linked to its copy; every other delivery is as it was.
        let resent = |ds: Vec<Value>| ds.iter().filter(|d| !d["resentAs"].is_null()).count();
        assert_eq!(resent(app.deliveries_of(&inside_paid).await), 1);
        for e in [&before, &inside_shipped, &after] {
            assert_eq!(resent(app.deliveries_of(e).await), 0, "{e} was not resent");
        }
        // Sent again, it no longer counts.
        assert_eq!(app.post("/deliveries/resend-failed/preview", body).await.1, json!({"count": 0}));

        // RFC 3339 works too; a window that ends before it starts and a bad class are refused.
        let (status, _) = app.post("/deliveries/resend-failed/preview", json!({"since": "2020-01-01T00:00:00Z"})).await;
        assert_eq!(status, 200);
        let (status, err) = app.post("/deliveries/resend-failed/preview", json!({"since": until.to_string(), "until": since.to_string()})).await;
        assert_eq!((status, err["code"].as_str()), (422, Some("invalid_window")), "{err}");
        let (status, err) = app.post("/deliveries/resend-failed", json!({"errorClass": "bogus"})).await;
        assert_eq!((status, err["code"].as_str()), (422, Some("invalid_filter")), "{err}");
        let (status, err) = app.post("/deliveries/resend-failed", json!({"since": "yesterday"})).await;
        assert_eq!((status, err["code"].as_str()), (422, Some("invalid_filter")), "{err}");
        let (status, _) = app.post("/deliveries/resend-failed/preview", json!({"destinationId": "dst_nope"})).await;
        assert_eq!(status, 404);
        app.stop().await;
    }
}
