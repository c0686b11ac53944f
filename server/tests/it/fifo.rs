//! Ordered (FIFO) delivery (docs D12), over the real API to a real receiver: one
//! attempt at a time, in publish order, through retries, dead letters, cancels and a
//! kill -9 of the server.

use std::time::Duration;

use serde_json::{json, Value};

use crate::crash::Server;
use crate::on_both_backends;
use server::domain::Plan;
use server::testkit::{spawn_app, Receiver, Reply};

/// The `n` of each request's payload, in the order the receiver got them.
fn order(rx: &Receiver) -> Vec<i64> {
    rx.received()
        .iter()
        .map(|r| {
            serde_json::from_str::<Value>(&r.body).unwrap()["n"]
                .as_i64()
                .unwrap()
        })
        .collect()
}

/// Retries after 150 ms, without jitter.
fn quick_retries() -> Value {
    json!({"preset": "partyflow", "initialMs": 150, "maxMs": 150, "jitter": 0})
}

on_both_backends! {
    async fn a_fifo_destination_gets_its_events_in_publish_order_one_at_a_time_while_the_first_is_retried(db) {
        let app = spawn_app(&db).await.with_space().await;
        let rx = Receiver::start().await;
        // The first event's first two attempts get a 503; everything else succeeds, slowly
        // enough that parallel attempts would overlap.
        rx.script([Reply::status(503), Reply::status(503)]);
        rx.set_default(Reply::status(200).after(Duration::from_millis(20)));
        let dst = app.destination(json!({"url": rx.url("/fifo"), "eventTypes": ["fifo.test"], "ordering": "fifo", "retryPolicy": quick_retries()})).await;
        assert_eq!(dst["ordering"], "fifo", "{dst}");
        let mut events = Vec::new();
        for n in 0..6 {
            events.push(app.publish("fifo.test", json!({"n": n})).await);
        }
        for e in &events {
            app.wait_for_delivery(e, "succeeded").await;
        }
        assert_eq!(order(&rx), vec![0, 0, 0, 1, 2, 3, 4, 5], "retries of the first come before the rest");
        assert_eq!(rx.max_in_flight(), 1, "one attempt at a time");
        let first = app.wait_for_delivery(&events[0], "succeeded").await;
        assert_eq!(first["attemptCount"], 3, "{first}");

        // The same traffic to a destination without ordering goes side by side (its
        // receiver answers slowly, so the attempts overlap however loaded the machine is).
        rx.reply_at("/plain", Reply::status(200).after(Duration::from_millis(1500)));
        let plain = app.destination(json!({"url": rx.url("/plain"), "eventTypes": ["plain.test"]})).await;
        assert_eq!(plain["ordering"], "none", "{plain}");
        let mut plain_events = Vec::new();
        for n in 0..4 {
            plain_events.push(app.publish("plain.test", json!({"n": n})).await);
        }
        for e in &plain_events {
            app.wait_for_delivery(e, "succeeded").await;
        }
        assert!(rx.max_in_flight() > 1, "a destination without ordering gets parallel attempts");
        app.stop().await;
    }
}

on_both_backends! {
    async fn a_dead_lettered_or_cancelled_delivery_does_not_hold_up_the_next_and_a_resend_keeps_its_place(db) {
        let app = spawn_app(&db).await.with_space().await;
        let rx = Receiver::start().await;
        // The first event fails both its attempts (503), then is dead-lettered.
        rx.script([Reply::status(503), Reply::status(503)]);
        rx.set_default(Reply::status(200));
        let dst = app.destination(json!({"url": rx.url("/"), "ordering": "fifo", "maxAttempts": 2, "retryPolicy": quick_retries()})).await;
        assert_eq!(dst["ordering"], "fifo");
        let e0 = app.publish("fifo.test", json!({"n": 0})).await;
        let e1 = app.publish("fifo.test", json!({"n": 1})).await;
        let e2 = app.publish("fifo.test", json!({"n": 2})).await;
        // The second waits behind the first (retrying): cancel it there.
        let d1 = app.deliveries_of(&e1).await[0]["id"].as_str().unwrap().to_owned();
        let (status, cancelled) = app.post(&format!("/deliveries/{d1}/cancel"), json!({})).await;
        assert_eq!(status, 200, "{cancelled}");
        let failed = app.wait_for_delivery(&e0, "failed").await;
        assert_eq!(failed["attemptCount"], 2, "{failed}");
        app.wait_for_delivery(&e2, "succeeded").await;
        assert_eq!(order(&rx), vec![0, 0, 2], "the dead letter and the cancelled one hold nothing up");

        // A resend keeps its event's place: with a later event (3) waiting for its retry
        // and another (4) behind it, a copy of event 2 goes out before both.
        let patch = json!({"retryPolicy": {"preset": "partyflow", "initialMs": 2000, "maxMs": 2000, "jitter": 0}});
        let resp = reqwest::Client::new()
            .patch(app.api(&format!("/destinations/{}", dst["id"].as_str().unwrap())))
            .bearer_auth(app.api_key.as_ref().unwrap())
            .json(&patch)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 200);
        rx.script([Reply::status(503)]);
        let e3 = app.publish("fifo.test", json!({"n": 3})).await;
        let e4 = app.publish("fifo.test", json!({"n": 4})).await;
        rx.wait_for(4).await;
        app.wait_for_delivery(&e3, "retrying").await;
        let d2 = app.wait_for_delivery(&e2, "succeeded").await;
        let (status, copy) = app.post(&format!("/deliveries/{}/resend", d2["id"].as_str().unwrap()), json!({})).await;
        assert_eq!(status, 202, "{copy}");
        app.wait_for_delivery(&e4, "succeeded").await;
        assert_eq!(order(&rx), vec![0, 0, 2, 3, 2, 3, 4], "the copy of event 2 went before event 3's retry and event 4");
        assert_eq!(rx.max_in_flight(), 1);
        app.stop().await;
    }
}

on_both_backends! {
    async fn fifo_order_holds_across_a_kill_9_of_the_server(db) {
        let logs = tempfile::tempdir().unwrap();
        let created = server::ops::tenants::create_space(db.storage.as_ref(), "FIFO crash", Plan::Enterprise).await.unwrap();
        let (space, key) = (created.space.id.to_string(), created.api_key.clone());
        let rx = Receiver::start().await;
        // The first attempt hangs: the server is killed while it is in flight.
        rx.script([Reply::status(200).after(Duration::from_secs(60))]);
        rx.set_default(Reply::status(200));
        let client = reqwest::Client::new();
        let api = |server: &Server, path: &str| format!("http://{}/v1/projects/{space}{path}", server.addr);

        let server = Server::start(&db.url, logs.path(), "fifo-0").await;
        let resp = client.post(api(&server, "/destinations")).bearer_auth(&key)
            .json(&json!({"url": rx.url("/fifo"), "ordering": "fifo", "timeoutSeconds": 2, "retryPolicy": quick_retries()}))
            .send().await.unwrap();
        assert_eq!(resp.status().as_u16(), 201);
        for n in 0..5 {
            let resp = client.post(api(&server, "/events")).bearer_auth(&key)
                .json(&json!({"type": "fifo.test", "payload": {"n": n}})).send().await.unwrap();
            assert_eq!(resp.status().as_u16(), 202);
        }
        rx.wait_for(1).await;
        server.kill_9();
        // Nothing else goes out while the dead process's claim is still leased.
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(rx.received().len(), 1);

        let server = Server::start(&db.url, logs.path(), "fifo-1").await;
        rx.wait_for(6).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(order(&rx), vec![0, 0, 1, 2, 3, 4], "the lost attempt is retried first, then the rest in order");
        let list: Value = client.get(api(&server, "/deliveries?status=succeeded")).bearer_auth(&key)
            .send().await.unwrap().json().await.unwrap();
        assert_eq!(list["data"].as_array().unwrap().len(), 5, "{list}");
        drop(server);
    }
}
