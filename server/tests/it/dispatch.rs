//! The dispatch engine end to end: the real server publishes to real receivers.

use std::time::Duration;

use serde_json::json;
use server::dispatch::signing;

use crate::on_both_backends;
use server::testkit::{
    eventually, spawn_app, spawn_app_with_config, test_config, Receiver, Reply, UNRESOLVABLE_HOST,
};

/// A policy that retries in milliseconds, so tests need no long sleeps.
fn fast(preset: &str) -> serde_json::Value {
    json!({"preset": preset, "initialMs": 10, "maxMs": 40})
}

on_both_backends! {
    async fn a_published_event_reaches_the_receiver_signed_and_the_delivery_succeeds(db) {
        let app = spawn_app(&db).await.with_space().await;
        let rx = Receiver::start().await;
        let dst = app.destination(json!({"url": rx.url("/hook"), "eventTypes": ["order.paid"]})).await;
        assert_eq!(dst["status"], "active");
        let secret = dst["secret"].as_str().unwrap();
        assert!(secret.starts_with("whsec_"));

        let event_id = app.publish("order.paid", json!({"orderId": 42, "total": "9.99"})).await;
        let got = rx.wait_for(1).await;
        let req = &got[0];
        assert_eq!(req.path, "/hook");
        assert_eq!(serde_json::from_str::<serde_json::Value>(&req.body).unwrap(), json!({"orderId": 42, "total": "9.99"}));
        assert_eq!(req.header("content-type"), "application/json");
        assert_eq!(req.header("webhook-id"), event_id);
        let now = server::clock::now_ms() / 1000;
        signing::verify(secret, &req.header("webhook-id"), &req.header("webhook-timestamp"), req.body.as_bytes(), &req.header("webhook-signature"), now, 300)
            .expect("the signature verifies with the destination's secret");

        let delivery = app.wait_for_delivery(&event_id, "succeeded").await;
        assert_eq!(delivery["attemptCount"], 1);
        assert_eq!(delivery["webhookId"], event_id);
        assert!(delivery["lastErrorClass"].is_null());
        let attempt = &delivery["attempts"][0];
        assert_eq!(attempt["response"]["status"], 200);
        assert_eq!(attempt["response"]["body"], "ok");
        assert_eq!(attempt["request"]["headers"]["webhook-id"], event_id);

        // An event of another type goes nowhere.
        let other = app.publish("user.joined", json!({})).await;
        assert!(app.deliveries_of(&other).await.is_empty());
        app.stop().await;
    }
}

on_both_backends! {
    async fn a_5xx_is_retried_with_the_same_webhook_id_until_a_2xx(db) {
        let app = spawn_app(&db).await.with_space().await;
        let rx = Receiver::start().await;
        rx.script([Reply::status(500).body("boom"), Reply::status(503)]);
        app.destination(json!({"url": rx.url("/"), "retryPolicy": fast("partyflow")})).await;
        let event_id = app.publish("order.paid", json!({"n": 1})).await;
        let delivery = app.wait_for_delivery(&event_id, "succeeded").await;
        assert_eq!(delivery["attemptCount"], 3);
        let got = rx.received();
        assert_eq!(got.len(), 3);
        assert!(got.iter().all(|r| r.header("webhook-id") == event_id), "webhook-id is stable across retries");
        let attempts = delivery["attempts"].as_array().unwrap();
        assert_eq!(attempts[0]["errorClass"], "http");
        assert_eq!(attempts[0]["response"]["status"], 500);
        assert_eq!(attempts[0]["response"]["body"], "boom");
        assert_eq!(attempts[1]["response"]["status"], 503);
        assert!(attempts[2]["errorClass"].is_null());
        app.stop().await;
    }
}

on_both_backends! {
    async fn a_404_dead_letters_at_once_under_partyflow_but_is_retried_under_standard(db) {
        let app = spawn_app(&db).await.with_space().await;
        let rx = Receiver::start().await;
        rx.set_default(Reply::status(404));
        app.destination(json!({"url": rx.url("/pf"), "eventTypes": ["a"], "retryPolicy": fast("partyflow")})).await;
        app.destination(json!({"url": rx.url("/std"), "eventTypes": ["b"], "maxAttempts": 3, "retryPolicy": fast("standard")})).await;
        let a = app.publish("a", json!({})).await;
        let b = app.publish("b", json!({})).await;
        let pf = app.wait_for_delivery(&a, "failed").await;
        assert_eq!(pf["attemptCount"], 1);
        assert_eq!(pf["lastErrorClass"], "http");
        assert_eq!(pf["lastStatusCode"], 404);
        let std = app.wait_for_delivery(&b, "failed").await;
        assert_eq!(std["attemptCount"], 3);
        assert!(std["nextAttemptAt"].is_null());
        app.stop().await;
    }
}

on_both_backends! {
    async fn a_redirect_is_never_followed_and_counts_as_class_redirect(db) {
        let app = spawn_app(&db).await.with_space().await;
        let rx = Receiver::start().await;
        rx.set_default(Reply::status(302).header("location", &rx.url("/elsewhere")));
        app.destination(json!({"url": rx.url("/start")})).await;
        let e = app.publish("x", json!({})).await;
        let d = app.wait_for_delivery(&e, "failed").await;
        assert_eq!(d["lastErrorClass"], "redirect");
        assert_eq!(d["lastStatusCode"], 302);
        assert!(rx.received().iter().all(|r| r.path == "/start"), "the Location was not followed");
        app.stop().await;
    }
}

on_both_backends! {
    async fn retry_after_on_429_replaces_the_backoff(db) {
        let app = spawn_app(&db).await.with_space().await;
        let rx = Receiver::start().await;
        rx.script([Reply::status(429).header("retry-after", "1")]);
        app.destination(json!({"url": rx.url("/"), "retryPolicy": fast("partyflow")})).await;
        let e = app.publish("x", json!({})).await;
        let got = rx.wait_for(2).await;
        let gap = got[1].at - got[0].at;
        assert!(gap >= Duration::from_millis(950), "waited {gap:?}, not the 1 s the receiver asked for");
        assert!(gap < Duration::from_secs(3), "waited {gap:?}");
        app.wait_for_delivery(&e, "succeeded").await;
        app.stop().await;
    }
}

on_both_backends! {
    async fn transport_failures_get_their_real_error_classes(db) {
        let app = spawn_app(&db).await.with_space().await;
        // A port nobody listens on: bind one, then close it.
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let slow = Receiver::start().await;
        slow.set_default(Reply::status(200).after(Duration::from_secs(3)));
        let plain = Receiver::start().await;
        let cases = [
            ("connect", json!({"url": format!("http://{closed}/"), "eventTypes": ["connect"], "maxAttempts": 1})),
            ("dns", json!({"url": format!("http://{UNRESOLVABLE_HOST}/hook"), "eventTypes": ["dns"], "maxAttempts": 1})),
            ("timeout", json!({"url": slow.url("/"), "eventTypes": ["timeout"], "maxAttempts": 1, "timeoutSeconds": 1})),
            ("tls", json!({"url": format!("https://{}/", plain.addr), "eventTypes": ["tls"], "maxAttempts": 1})),
        ];
        for (class, body) in cases {
            app.destination(body).await;
            let e = app.publish(class, json!({})).await;
            let d = app.wait_for_delivery(&e, "failed").await;
            assert_eq!(d["lastErrorClass"], class, "{d}");
            assert!(d["attempts"][0]["errorMessage"].as_str().unwrap().len() > 3, "the log says why: {d}");
        }
        app.stop().await;
    }
}

on_both_backends! {
    async fn a_private_address_is_blocked_and_never_called(db) {
        let mut config = test_config(&db.url);
        config.allow_networks = String::new();
        let app = spawn_app_with_config(&db, config).await.with_space().await;
        let rx = Receiver::start().await;
        app.destination(json!({"url": rx.url("/"), "eventTypes": ["literal"]})).await;
        app.destination(json!({"url": format!("http://localhost:{}/", rx.addr.port()), "eventTypes": ["name"]})).await;
        for t in ["literal", "name"] {
            let e = app.publish(t, json!({})).await;
            let d = app.wait_for_delivery(&e, "failed").await;
            assert_eq!(d["lastErrorClass"], "blocked", "{d}");
            assert_eq!(d["attemptCount"], 1, "blocked dead-letters at once (D2)");
        }
        assert!(rx.received().is_empty(), "the receiver was never called");
        app.stop().await;
    }
}

on_both_backends! {
    async fn a_rotated_secret_keeps_signing_beside_the_new_one(db) {
        let app = spawn_app(&db).await.with_space().await;
        let rx = Receiver::start().await;
        let dst = app.destination(json!({"url": rx.url("/")})).await;
        let old = dst["secret"].as_str().unwrap().to_owned();
        let (status, rotated) = app.post(&format!("/destinations/{}/rotate-secret", dst["id"].as_str().unwrap()), json!({})).await;
        assert_eq!(status, 200, "{rotated}");
        let new = rotated["secret"].as_str().unwrap().to_owned();
        assert_ne!(new, old);
        assert!(rotated["previousSecretExpiresAt"].is_string());
        app.publish("x", json!({"a": 1})).await;
        let req = &rx.wait_for(1).await[0];
        let sigs = req.header("webhook-signature");
        assert_eq!(sigs.split(' ').count(), 2, "{sigs}");
        let now = server::clock::now_ms() / 1000;
        for secret in [&old, &new] {
            signing::verify(secret, &req.header("webhook-id"), &req.header("webhook-timestamp"), req.body.as_bytes(), &sigs, now, 300)
                .expect("each secret verifies");
        }
        app.stop().await;
    }
}

on_both_backends! {
    async fn a_hundred_dead_letters_in_a_row_disable_the_destination_and_tell_admins(db) {
        let app = spawn_app(&db).await.with_space().await;
        let rx = Receiver::start().await;
        rx.set_default(Reply::status(400));
        let dst = app.destination(json!({"url": rx.url("/")})).await;
        let id = dst["id"].as_str().unwrap().to_owned();
        for i in 0..100 {
            app.publish("x", json!({"i": i})).await;
        }
        eventually(60, || async {
            let (_, d) = app.get(&format!("/destinations/{id}")).await;
            (d["status"] == "inactive").then_some(())
        })
        .await;
        let (_, d) = app.get(&format!("/destinations/{id}")).await;
        assert_eq!(d["consecutiveDeadLetters"], 100);
        let notes = db.storage.list_notifications(false, server::storage::Page::first(10)).await.unwrap();
        let kinds: Vec<_> = notes.iter().map(|n| n.kind.as_str()).collect();
        assert_eq!(kinds, ["destination.disabled", "destination.failing", "destination.failing"]);
        assert_eq!(notes[0].subject_id.as_deref(), Some(id.as_str()));

        // New events are not stored for it, only counted (D5).
        let skipped = app.publish("x", json!({})).await;
        assert!(app.deliveries_of(&skipped).await.is_empty());
        let (_, d) = app.get(&format!("/destinations/{id}")).await;
        assert_eq!(d["skippedEvents"], 1);

        // Re-enabled, it delivers again and the streak starts over.
        rx.set_default(Reply::status(200));
        let (status, d) = app.post(&format!("/destinations/{id}/enable"), json!({})).await;
        assert_eq!(status, 200);
        assert_eq!(d["status"], "active");
        assert_eq!(d["consecutiveDeadLetters"], 0);
        let e = app.publish("x", json!({})).await;
        app.wait_for_delivery(&e, "succeeded").await;
        app.stop().await;
    }
}

on_both_backends! {
    async fn waiting_deliveries_pause_while_disabled_and_resume_on_enable(db) {
        let app = spawn_app(&db).await.with_space().await;
        let rx = Receiver::start().await;
        rx.script([Reply::status(500)]);
        let dst = app.destination(json!({"url": rx.url("/"), "retryPolicy": {"preset": "partyflow", "initialMs": 600000, "maxMs": 600000}})).await;
        let id = dst["id"].as_str().unwrap().to_owned();
        let e = app.publish("x", json!({})).await;
        let waiting = app.wait_for_delivery(&e, "retrying").await;
        assert_eq!(waiting["attemptCount"], 1);
        let (_, d) = app.post(&format!("/destinations/{id}/disable"), json!({})).await;
        assert_eq!(d["status"], "inactive");
        let paused = app.deliveries_of(&e).await;
        assert_eq!(paused[0]["paused"], true);
        app.post(&format!("/destinations/{id}/enable"), json!({})).await;
        // Resumed at once, not ten minutes later.
        app.wait_for_delivery(&e, "succeeded").await;
        assert_eq!(rx.received().len(), 2);
        app.stop().await;
    }
}

on_both_backends! {
    async fn a_claim_left_by_a_dead_worker_is_recorded_lost_and_retried_without_using_an_attempt(db) {
        // Claim the delivery directly, as a worker that then dies would.
        let app = spawn_app(&db).await.with_space().await;
        let rx = Receiver::start().await;
        app.stop().await;
        let db2 = server::testkit::TestDb { url: db.url.clone(), storage: db.storage.clone(), _dir: None };
        let app = spawn_app_with_config(&db2, {
            let mut c = test_config(&db.url);
            c.dispatch.enabled = false;
            c
        }).await.with_space().await;
        app.destination(json!({"url": rx.url("/"), "timeoutSeconds": 1})).await;
        let e = app.publish("x", json!({})).await;
        let now = server::clock::now_ms();
        let claimed = db.storage.claim_due(now, 10, 0).await.unwrap();
        assert_eq!(claimed.len(), 1);
        let (key, space) = (app.api_key.clone(), app.space.clone());
        app.stop().await;

        // A healthy instance starts after the lease (1 s timeout + 0 margin) ran out.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let mut app2 = spawn_app(&db2).await;
        app2.api_key = key;
        app2.space = space;
        let d = app2.wait_for_delivery(&e, "succeeded").await;
        assert_eq!(d["attemptCount"], 1, "the lost attempt did not use one up");
        let attempts = d["attempts"].as_array().unwrap();
        assert_eq!(attempts[0]["errorClass"], "lost");
        assert!(attempts[1]["errorClass"].is_null());
        assert_eq!(rx.received().len(), 1);
        app2.stop().await;
    }
}

on_both_backends! {
    async fn shutdown_cuts_a_slow_attempt_short_and_it_goes_out_again_after_restart(db) {
        let rx = Receiver::start().await;
        rx.script([Reply::status(200).after(Duration::from_secs(10))]);
        let mut config = test_config(&db.url);
        config.dispatch.shutdown_grace_seconds = 0;
        let app = spawn_app_with_config(&db, config).await.with_space().await;
        app.destination(json!({"url": rx.url("/")})).await;
        let e = app.publish("x", json!({})).await;
        rx.wait_for(1).await;
        let (key, space) = (app.api_key.clone(), app.space.clone());
        app.stop().await;
        let mut app2 = spawn_app(&db).await;
        app2.api_key = key;
        app2.space = space;
        let d = app2.wait_for_delivery(&e, "succeeded").await;
        assert_eq!(d["attemptCount"], 1);
        assert_eq!(d["attempts"][0]["errorClass"], "lost");
        app2.stop().await;
    }
}

on_both_backends! {
    async fn an_idempotency_key_returns_the_first_answer(db) {
        let app = spawn_app(&db).await.with_space().await;
        let rx = Receiver::start().await;
        app.destination(json!({"url": rx.url("/")})).await;
        let body = json!({"type": "order.paid", "payload": {"n": 1}, "idempotencyKey": "k-1"});
        let (s1, first) = app.post("/events", body.clone()).await;
        let (s2, second) = app.post("/events", body).await;
        assert_eq!((s1, s2), (202, 202));
        assert_eq!(first, second);
        assert_eq!(first["deliveries"], 1);
        let (s3, clash) = app.post("/events", json!({"type": "order.paid", "payload": {"n": 2}, "idempotencyKey": "k-1"})).await;
        assert_eq!(s3, 409);
        assert_eq!(clash["code"], "idempotency_key_reused");
        rx.wait_for(1).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(rx.received().len(), 1, "one event, one delivery");
        app.stop().await;
    }
}

on_both_backends! {
    async fn a_transformation_reshapes_the_body_and_a_failing_one_dead_letters_as_transformation(db) {
        let app = spawn_app(&db).await.with_space().await;
        let rx = Receiver::start().await;
        app.destination(json!({"url": rx.url("/ok"), "eventTypes": ["ok"], "transformation": "{text: .message.text, n: (.items | length)}"})).await;
        app.destination(json!({"url": rx.url("/bad"), "eventTypes": ["bad"], "transformation": "error(\"no thanks\")"})).await;
        let (status, refused) = app.post("/destinations", json!({"url": rx.url("/x"), "transformation": "{{{"})).await;
        assert_eq!(status, 422);
        assert_eq!(refused["code"], "invalid_transformation");

        let ok = app.publish("ok", json!({"message": {"text": "hi"}, "items": [1, 2, 3]})).await;
        let got = rx.wait_for(1).await;
        assert_eq!(serde_json::from_str::<serde_json::Value>(&got[0].body).unwrap(), json!({"text": "hi", "n": 3}));
        app.wait_for_delivery(&ok, "succeeded").await;

        let bad = app.publish("bad", json!({})).await;
        let d = app.wait_for_delivery(&bad, "failed").await;
        assert_eq!(d["lastErrorClass"], "transformation");
        assert_eq!(d["attemptCount"], 1, "not retried");
        assert!(d["attempts"][0]["errorMessage"].as_str().unwrap().contains("no thanks"), "{d}");
        assert_eq!(rx.received().len(), 1, "the failing one was never sent");
        app.stop().await;
    }
}
