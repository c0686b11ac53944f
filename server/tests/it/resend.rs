//! Resend and cancel (SPEC §2.7, §2.8), API keys and notifications, over the real API.

use serde_json::json;

use crate::helpers::{eventually, spawn_app, Receiver, Reply};
use crate::on_both_backends;

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
        let mut unread = listed("?unread=true").await;
        unread.sort();
        assert_eq!(unread, vec![ids[0].clone(), ids[2].clone()]);

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
