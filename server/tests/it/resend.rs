//! Resend and cancel (docs §2.7, §2.8), API keys and notifications, over the real API.

use serde_json::{json, Value};

use crate::on_both_backends;
use server::testkit::{eventually, spawn_app, Receiver, Reply};

on_both_backends! {
    async fn resending_a_failed_delivery_makes_a_linked_copy_with_the_same_webhook_id(db) {
        let app = spawn_app(&db).await.with_space().await;
        let rx = Receiver::start().await;
        rx.script([Reply::status(400)]);
        app.destination(json!({"url": rx.url("/")})).await;
        let e = app.publish("x", json!({"n": 1})).await;
        let failed = app.wait_for_delivery(&e, "failed").await;
        let id = failed["id"].as_str().unwrap();

        let (status, copy) = app.post(&format!("/deliveries/{id}/resend"), json!({})).await;
        assert_eq!(status, 202, "{copy}");
        assert_eq!(copy["resentFrom"], id);
        assert_eq!(copy["webhookId"], failed["webhookId"]);
        assert_eq!(copy["attemptCount"], 0);
        let copy_id = copy["id"].as_str().unwrap().to_owned();
        let done = eventually(30, || async {
            let (_, d) = app.get(&format!("/deliveries/{copy_id}")).await;
            (d["status"] == "succeeded").then_some(d)
        }).await;
        assert_eq!(done["attemptCount"], 1);
        let (_, original) = app.get(&format!("/deliveries/{id}")).await;
        assert_eq!(original["resentAs"], copy_id.as_str());
        let got = rx.received();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].header("webhook-id"), got[1].header("webhook-id"));

        // A waiting delivery cannot be sent again; a missing one is a 404.
        assert_eq!(app.post("/deliveries/dlv_01jzzzzzzzzzzzzzzzzzzzzzzz/resend", json!({})).await.0, 404);
        app.stop().await;
    }
}

on_both_backends! {
    async fn bulk_resend_reports_every_id_and_refuses_more_than_a_hundred(db) {
        let app = spawn_app(&db).await.with_space().await;
        let rx = Receiver::start().await;
        rx.script([Reply::status(400), Reply::status(400)]);
        let dst = app.destination(json!({"url": rx.url("/")})).await;
        let a = app.publish("x", json!({})).await;
        let b = app.publish("x", json!({})).await;
        let da = app.wait_for_delivery(&a, "failed").await["id"].as_str().unwrap().to_owned();
        let db_ = app.wait_for_delivery(&b, "failed").await["id"].as_str().unwrap().to_owned();

        let too_many: Vec<String> = (0..101).map(|_| da.clone()).collect();
        let (status, err) = app.post("/deliveries/resend", json!({"deliveryIds": too_many})).await;
        assert_eq!(status, 422);
        assert_eq!(err["code"], "too_many_deliveries");

        let (status, answer) = app.post("/deliveries/resend", json!({"deliveryIds": [da, "dlv_01jzzzzzzzzzzzzzzzzzzzzzzz", "junk"]})).await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["resent"], 1);
        let results = answer["results"].as_array().unwrap();
        assert_eq!(results.len(), 3, "unknown IDs are reported, not dropped: {answer}");
        let by_id = |id: &str| results.iter().find(|r| r["id"] == id).unwrap()["result"].clone();
        assert_eq!(by_id(&da), "resent");
        assert_eq!(by_id("junk"), "not_found");
        assert_eq!(by_id("dlv_01jzzzzzzzzzzzzzzzzzzzzzzz"), "not_found");

        // An inactive destination's delivery is refused with a clear reason.
        let dst_id = dst["id"].as_str().unwrap();
        app.post(&format!("/destinations/{dst_id}/disable"), json!({})).await;
        let (status, err) = app.post(&format!("/deliveries/{db_}/resend"), json!({})).await;
        assert_eq!(status, 409);
        assert_eq!(err["code"], "destination_inactive");
        app.stop().await;
    }
}

on_both_backends! {
    async fn resend_failed_skips_those_already_resent_and_says_what_remains(db) {
        let app = spawn_app(&db).await.with_space().await;
        let rx = Receiver::start().await;
        rx.set_default(Reply::status(400));
        let one = app.destination(json!({"url": rx.url("/one"), "eventTypes": ["one"]})).await;
        app.destination(json!({"url": rx.url("/two"), "eventTypes": ["two"]})).await;
        let mut events = Vec::new();
        for t in ["one", "one", "two"] {
            events.push(app.publish(t, json!({})).await);
        }
        for e in &events {
            app.wait_for_delivery(e, "failed").await;
        }
        let (status, answer) = app.post("/deliveries/resend-failed", json!({"destinationId": one["id"]})).await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer, json!({"resent": 2, "remaining": 0}));
        // The copies fail again, but the originals are already resent: only new failures count.
        eventually(30, || async {
            let (_, list) = app.get("/deliveries?status=failed").await;
            (list["data"].as_array().unwrap().len() == 5).then_some(())
        }).await;
        let (_, answer) = app.post("/deliveries/resend-failed", json!({})).await;
        assert_eq!(answer["resent"], 3, "two copies of `one` and the `two` original: {answer}");
        let (status, _) = app.post("/deliveries/resend-failed", json!({"destinationId": "dst_nope"})).await;
        assert_eq!(status, 404);
        app.stop().await;
    }
}

on_both_backends! {
    async fn a_waiting_delivery_can_be_cancelled_and_is_never_sent_but_a_finished_one_cannot(db) {
        let app = spawn_app(&db).await.with_space().await;
        let rx = Receiver::start().await;
        rx.script([Reply::status(500)]);
        app.destination(json!({"url": rx.url("/"), "retryPolicy": {"preset": "partyflow", "initialMs": 1500, "maxMs": 1500, "jitter": 0}})).await;
        let e = app.publish("x", json!({})).await;
        let waiting = app.wait_for_delivery(&e, "retrying").await;
        let id = waiting["id"].as_str().unwrap();
        let (status, cancelled) = app.post(&format!("/deliveries/{id}/cancel"), json!({})).await;
        assert_eq!(status, 200, "{cancelled}");
        assert_eq!(cancelled["status"], "cancelled");
        assert_eq!(cancelled["lastErrorClass"], "cancelled");
        tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
        assert_eq!(rx.received().len(), 1, "never sent after the cancel");

        let (status, err) = app.post(&format!("/deliveries/{id}/cancel"), json!({})).await;
        assert_eq!(status, 409);
        assert_eq!(err["code"], "delivery_not_waiting");

        let (status, bulk) = app.post("/deliveries/cancel", json!({"deliveryIds": [id, "nope"]})).await;
        assert_eq!(status, 200);
        assert_eq!(bulk["cancelled"], 0);
        assert_eq!(bulk["results"].as_array().unwrap().len(), 2);
        app.stop().await;
    }
}

on_both_backends! {
    async fn api_keys_are_shown_once_listed_without_secret_and_revocable(db) {
        let app = spawn_app(&db).await.with_space().await;
        let (status, made) = app.post("/api-keys", json!({"name": "ci"})).await;
        assert_eq!(status, 201, "{made}");
        let key = made["key"].as_str().unwrap().to_owned();
        let (_, list) = app.get("/api-keys").await;
        assert_eq!(list["data"].as_array().unwrap().len(), 2);
        assert!(list["data"].as_array().unwrap().iter().all(|k| k.get("key").is_none()));
        let client = reqwest::Client::new();
        assert_eq!(client.get(app.api("/deliveries")).bearer_auth(&key).send().await.unwrap().status(), 200);
        let revoke = client.post(app.api(&format!("/api-keys/{}/revoke", made["id"].as_str().unwrap())))
            .bearer_auth(app.api_key.as_ref().unwrap()).send().await.unwrap();
        assert_eq!(revoke.status(), 204);
        assert_eq!(client.get(app.api("/deliveries")).bearer_auth(&key).send().await.unwrap().status(), 401);
        let (status, again) = app.post(&format!("/api-keys/{}/revoke", made["id"].as_str().unwrap()), json!({})).await;
        assert_eq!(status, 204, "revoking twice answers the same: {again}");
        let (_, list) = app.get("/api-keys").await;
        assert!(list["data"].as_array().unwrap().iter().any(|k| k["id"] == made["id"] && k["revokedAt"].is_string()));
        let (status, unknown) = app.post("/api-keys/key_01jdqz8x9k5v3w2r1t0m4n6p8q/revoke", json!({})).await;
        assert_eq!((status, unknown["code"].as_str()), (404, Some("not_found")));
        app.stop().await;
    }
}

on_both_backends! {
    async fn notifications_are_listed_all_unread_or_read_and_marked_read_once(db) {
        let app = spawn_app(&db).await.with_space().await;
        let space: server::domain::SpaceId = app.space.as_ref().unwrap().parse().unwrap();
        let mut ids = Vec::new();
        for n in 0..3 {
            let note = server::domain::Notification {
                id: server::domain::NotificationId::new(),
                space_id: Some(space),
                kind: "destination.disabled".into(),
                subject_kind: Some("destination".into()),
                subject_id: Some("dst_01jzzzzzzzzzzzzzzzzzzzzzzz".into()),
                message: format!("note {n}"),
                created_at: server::clock::now_ms(),
                read_at: None,
            };
            app.storage.create_notification(&note).await.unwrap();
            ids.push(note.id.to_string());
        }
        let listed = |query: &'static str| {
            let app = &app;
            async move {
                let (status, page) = app.get(&format!("/notifications{query}")).await;
                assert_eq!(status, 200, "{page}");
                page["data"].as_array().unwrap().iter().map(|n| n["id"].as_str().unwrap().to_owned()).collect::<Vec<_>>()
            }
        };
        assert_eq!(listed("?unread=true").await.len(), 3);
        assert!(listed("?unread=false").await.is_empty());

        let resp = reqwest::Client::new().post(app.api(&format!("/notifications/{}/read", ids[1])))
            .bearer_auth(app.api_key.as_ref().unwrap()).send().await.unwrap();
        assert_eq!(resp.status(), 204);
        let (_, page) = app.get("/notifications").await;
        let read = page["data"].as_array().unwrap().iter().find(|n| n["id"] == ids[1].as_str()).unwrap().clone();
        let read_at = read["readAt"].as_str().unwrap().to_owned();
        assert_eq!(read["kind"], "destination.disabled");
        assert_eq!(listed("").await.len(), 3);
        assert_eq!(listed("?unread=false").await, vec![ids[1].clone()]);
        // Sorted on both sides: IDs made within one millisecond need not sort in the
        // order they were made.
        let mut unread = listed("?unread=true").await;
        unread.sort();
        let mut expected = vec![ids[0].clone(), ids[2].clone()];
        expected.sort();
        assert_eq!(unread, expected);

        // Marking again keeps the first time; unknown or malformed IDs are 404.
        let (status, _) = app.post(&format!("/notifications/{}/read", ids[1]), json!({})).await;
        assert_eq!(status, 204);
        let (_, page) = app.get("/notifications?unread=false").await;
        assert_eq!(page["data"][0]["readAt"], read_at.as_str());
        for bad in ["ntf_01jzzzzzzzzzzzzzzzzzzzzzzz", "nope"] {
            let (status, err) = app.post(&format!("/notifications/{bad}/read"), json!({})).await;
            assert_eq!((status, err["code"].as_str()), (404, Some("not_found")));
        }
        let (status, err) = app.get("/notifications?unread=maybe").await;
        assert_eq!((status, err["code"].as_str()), (422, Some("invalid_query")));
        app.stop().await;
    }
}

/// A server whose engine does not run: deliveries stay where the test puts them.
async fn quiet_app(db: &server::testkit::TestDb) -> server::testkit::TestApp {
    let mut config = server::testkit::test_config(&db.url);
    config.dispatch.enabled = false;
    server::testkit::spawn_app_with_config(db, config).await
}

/// Dead-letters `deliveries` (claimed already) as a worker would, without auto-disable.
async fn dead_letter(app: &server::testkit::TestApp, deliveries: &[server::domain::Delivery]) {
    use server::domain::*;
    let now = server::clock::now_ms();
    let batch = crate::helpers::answered(deliveries, 400, server::storage::NextStep::DeadLetter);
    let rule = AutoDisable {
        after: i64::MAX,
        warn_at: Vec::new(),
    };
    let effects = app
        .storage
        .finish_attempts(&batch, &rule, now)
        .await
        .unwrap();
    assert!(effects.iter().all(|e| e.applied));
}

on_both_backends! {
    async fn resend_failed_takes_at_most_a_thousand_per_call_and_says_how_many_remain(db) {
        use server::storage::{ClaimLimits, NewEvent};
        let app = quiet_app(&db).await.with_space().await;
        let dst = app.destination(json!({"url": "https://example.com/hook"})).await;
        let space: server::domain::SpaceId = app.space.as_ref().unwrap().parse().unwrap();
        for n in 0..1001 {
            let event = NewEvent {
                event: server::domain::Event {
                    id: server::domain::EventId::new(),
                    space_id: space,
                    event_type: "bulk".into(),
                    payload: json!({"n": n}),
                    created_at: server::clock::now_ms(),
                    deliver_at: None,
                },
                idempotency_key: None,
                request_hash: String::new(),
                filters: Default::default(),
                claim: None,
                subscribers: None,
            };
            app.storage.publish_event(&event, server::clock::now_ms()).await.unwrap();
        }
        let limits = ClaimLimits { per_destination: 2000, retries: i64::MAX, plans: None };
        let claimed = app.storage.claim(server::clock::now_ms(), 2000, 60_000, &limits).await.unwrap().deliveries;
        assert_eq!(claimed.len(), 1001);
        dead_letter(&app, &claimed).await;

        let (status, first) = app.post("/deliveries/resend-failed", json!({"destinationId": dst["id"]})).await;
        assert_eq!((status, first), (200, json!({"resent": 1000, "remaining": 1})));
        let (status, second) = app.post("/deliveries/resend-failed", json!({})).await;
        assert_eq!((status, second), (200, json!({"resent": 1, "remaining": 0})));
        let (_, third) = app.post("/deliveries/resend-failed", json!({})).await;
        assert_eq!(third, json!({"resent": 0, "remaining": 0}), "already resent ones are skipped");
        let (_, copies) = app.get("/deliveries?status=pending&limit=250").await;
        assert!(copies["data"].as_array().unwrap().iter().all(|d| d["resentFrom"].is_string() && d["attemptCount"] == 0));
        app.stop().await;
    }
}

on_both_backends! {
    async fn a_resend_gets_a_full_set_of_attempts_and_bulk_resend_refuses_unfinished_and_inactive_ones_per_id(db) {
        let app = spawn_app(&db).await.with_space().await;
        let rx = Receiver::start().await;
        rx.set_default(Reply::status(500));
        let fast = json!({"preset": "partyflow", "initialMs": 50, "maxMs": 50, "jitter": 0});
        let a = app.destination(json!({"url": rx.url("/a"), "eventTypes": ["a"], "maxAttempts": 2, "retryPolicy": fast})).await;
        let slow = json!({"preset": "partyflow", "initialMs": 3_600_000, "maxMs": 3_600_000, "jitter": 0});
        app.destination(json!({"url": rx.url("/b"), "eventTypes": ["b"], "retryPolicy": slow})).await;
        let e = app.publish("a", json!({"n": 1})).await;
        let failed = app.wait_for_delivery(&e, "failed").await;
        assert_eq!(failed["attemptCount"], 2);
        let id = failed["id"].as_str().unwrap().to_owned();

        // The copy is sent straight away and gets its own two attempts.
        let (status, copy) = app.post(&format!("/deliveries/{id}/resend"), json!({})).await;
        assert_eq!(status, 202, "{copy}");
        let copy_id = copy["id"].as_str().unwrap().to_owned();
        let copy = eventually(30, || async {
            let (_, d) = app.get(&format!("/deliveries/{copy_id}")).await;
            (d["status"] == "failed").then_some(d)
        }).await;
        assert_eq!(copy["attemptCount"], 2, "a full set of attempts: {copy}");
        assert_eq!((copy["eventId"].as_str(), copy["destinationId"].as_str()), (Some(e.as_str()), a["id"].as_str()));
        assert_eq!(copy["resentFrom"], id.as_str());
        let got = rx.wait_for(4).await;
        assert!(got.iter().all(|r| r.header("webhook-id") == e), "one webhook-id for the event");

        // One still waiting for a retry, one whose destination is off.
        let waiting_event = app.publish("b", json!({})).await;
        let waiting = app.wait_for_delivery(&waiting_event, "retrying").await;
        let waiting_id = waiting["id"].as_str().unwrap();
        let (status, _) = app.post(&format!("/destinations/{}/disable", a["id"].as_str().unwrap()), json!({})).await;
        assert_eq!(status, 200);
        let (status, answer) = app.post("/deliveries/resend", json!({"deliveryIds": [copy_id, waiting_id, id]})).await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["resent"], 0);
        let result = |i: usize| (answer["results"][i]["result"].as_str().unwrap(), answer["results"][i].get("status").cloned());
        assert_eq!(result(0), ("destination_inactive", None));
        assert_eq!(result(1), ("not_finished", Some(json!("retrying"))));
        assert_eq!(result(2), ("destination_inactive", None), "already resent, and inactive: {answer}");
        let (status, err) = app.post(&format!("/deliveries/{copy_id}/resend"), json!({})).await;
        assert_eq!((status, err["code"].as_str()), (409, Some("destination_inactive")));
        let (status, err) = app.post(&format!("/deliveries/{waiting_id}/resend"), json!({})).await;
        assert_eq!((status, err["code"].as_str()), (409, Some("delivery_not_finished")));
        let (_, none) = app.post("/deliveries/resend-failed", json!({})).await;
        assert_eq!(none, json!({"resent": 0, "remaining": 0}), "an inactive destination's failures are not resent");
        app.stop().await;
    }
}

on_both_backends! {
    async fn cancel_turns_pending_and_retrying_deliveries_cancelled_for_good_and_refuses_one_a_worker_holds(db) {
        let app = quiet_app(&db).await.with_space().await;
        app.destination(json!({"url": "https://example.com/hook"})).await;
        for n in 0..3 {
            app.publish("x", json!({"n": n})).await;
        }
        // A worker picks one up (claims it: `sending`).
        let now = server::clock::now_ms();
        let held = app.storage.claim_due(now, 1, 60_000).await.unwrap().remove(0);
        let (_, page) = app.get("/deliveries?status=pending").await;
        let pending: Vec<String> = page["data"].as_array().unwrap().iter().map(|d| d["id"].as_str().unwrap().to_owned()).collect();
        assert_eq!(pending.len(), 2);

        let (status, err) = app.post(&format!("/deliveries/{}/cancel", held.id), json!({})).await;
        assert_eq!((status, err["code"].as_str()), (409, Some("delivery_not_waiting")), "{err}");
        assert!(err["message"].as_str().unwrap().contains("sending"), "{err}");

        let (status, one) = app.post(&format!("/deliveries/{}/cancel", pending[0]), json!({})).await;
        assert_eq!(status, 200, "{one}");
        assert_eq!((one["status"].as_str(), one["lastErrorClass"].as_str()), (Some("cancelled"), Some("cancelled")));
        assert!(one["nextAttemptAt"].is_null() && one["finishedAt"].is_string(), "{one}");

        let ids = json!([pending[1], held.id.to_string(), pending[0], "dlv_01jzzzzzzzzzzzzzzzzzzzzzzz"]);
        let (status, bulk) = app.post("/deliveries/cancel", json!({"deliveryIds": ids})).await;
        assert_eq!(status, 200, "{bulk}");
        assert_eq!(bulk["cancelled"], 1);
        let results: Vec<(String, Value)> = bulk["results"].as_array().unwrap().iter()
            .map(|r| (r["result"].as_str().unwrap().to_owned(), r["status"].clone())).collect();
        assert_eq!(results, vec![
            ("cancelled".to_owned(), Value::Null),
            ("not_waiting".to_owned(), json!("sending")),
            ("not_waiting".to_owned(), json!("cancelled")),
            ("not_found".to_owned(), Value::Null),
        ]);

        // Never claimed again, whenever a worker looks; a late worker's record changes nothing.
        let later = now + 30 * 24 * 3600 * 1000;
        assert!(app.storage.claim_due(later, 10, 60_000).await.unwrap().is_empty());
        let cancelled = app.storage.get_delivery_by_id(pending[0].parse().unwrap()).await.unwrap();
        let attempt = server::domain::Attempt {
            id: server::domain::AttemptId::new(),
            delivery_id: cancelled.id,
            space_id: cancelled.space_id,
            attempt_number: 1,
            started_at: now,
            duration_ms: 1,
            request_url: "https://example.com/hook".into(),
            request_headers: json!({}),
            request_body: "{}".into(),
            response_status: Some(200),
            response_headers: None,
            response_body: None,
            error_class: None,
            error_message: None,
        };
        let stale = server::storage::FinishedAttempt {
            attempt,
            destination_id: cancelled.destination_id,
            next: server::storage::NextStep::Succeeded,
            only_if_lease_expired_before: None,
        };
        let effects = app.storage.finish_attempt(&stale, &Default::default(), now).await.unwrap();
        assert!(!effects.applied);
        let (_, still) = app.get(&format!("/deliveries/{}", pending[0])).await;
        assert_eq!(still["status"], "cancelled");
        assert!(still["attempts"].as_array().unwrap().is_empty(), "{still}");
        app.stop().await;
    }
}

on_both_backends! {
    async fn the_largest_body_is_a_setting_and_larger_ones_get_413_json(db) {
        let mut config = server::testkit::test_config(&db.url);
        config.max_body_bytes = 2048;
        let app = server::testkit::spawn_app_with_config(&db, config).await.with_space().await;
        let small = json!({"type": "x", "payload": {"pad": "a".repeat(1500)}});
        assert_eq!(app.post("/events", small).await.0, 202);
        let (status, err) = app.post("/events", json!({"type": "x", "payload": {"pad": "a".repeat(3000)}})).await;
        assert_eq!((status, err["code"].as_str()), (413, Some("body_too_large")), "{err}");
        let (status, err) = app.post("/deliveries/resend-failed", json!({"pad": "a".repeat(3000)})).await;
        assert_eq!((status, err["code"].as_str()), (413, Some("body_too_large")), "{err}");
        app.stop().await;
    }
}
