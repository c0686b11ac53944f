//! Payload filters end to end (docs §2.12): a destination's jq expression decides at
//! publish, in the sandbox, whether an event gets a delivery; through the REST API and
//! through a message posted by an incoming webhook, to real receivers.

use std::time::Duration;

use serde_json::{json, Value};

use crate::incoming::{hook, Project};
use crate::on_both_backends;
use server::testkit::{spawn_app, Receiver, TestApp};

const EUR_OVER_100: &str = r#".total > 100 and .currency == "EUR""#;

/// `PATCH` on the space's API: `path` under `/v1/projects/{space}`.
async fn patch(app: &TestApp, path: &str, body: Value) -> (u16, Value) {
    let p = Project::of(app);
    p.call(reqwest::Method::PATCH, &p.api(path), Some(body))
        .await
}

on_both_backends! {
    async fn a_filter_passes_rejects_or_fails_each_event_and_the_destination_counts_the_rejected(db) {
        let app = spawn_app(&db).await.with_space().await;
        let rx = Receiver::start().await;
        let d = app.destination(json!({"url": rx.url("/big"), "eventTypes": ["order.paid"], "filter": EUR_OVER_100})).await;
        assert_eq!(d["filter"], EUR_OVER_100);
        assert_eq!(d["filteredEvents"], 0);
        let id = d["id"].as_str().unwrap().to_owned();

        // Passes: delivered as usual.
        let passing = app.publish("order.paid", json!({"total": 150, "currency": "EUR"})).await;
        let got = rx.wait_for(1).await;
        assert_eq!(serde_json::from_str::<Value>(&got[0].body).unwrap()["total"], 150);
        app.wait_for_delivery(&passing, "succeeded").await;

        // Rejected (false, and null from a missing field): no delivery, counted.
        let (status, small) = app.post("/events", json!({"type": "order.paid", "payload": {"total": 5, "currency": "EUR"}})).await;
        assert_eq!(status, 202, "{small}");
        assert_eq!(small["deliveries"], 0, "{small}");
        let (_, usd) = app.post("/events", json!({"type": "order.paid", "payload": {"total": 500, "currency": "USD"}})).await;
        assert_eq!(usd["deliveries"], 0, "{usd}");
        assert!(app.deliveries_of(small["id"].as_str().unwrap()).await.is_empty());
        let (_, now) = app.get(&format!("/destinations/{id}")).await;
        assert_eq!(now["filteredEvents"], 2, "{now}");
        assert_eq!(now["skippedEvents"], 0);

        // Fails: a delivery that has already failed, with the filter's error, never sent.
        let failing = app.publish("order.paid", json!(["not", "an", "object"])).await;
        let f = app.wait_for_delivery(&failing, "failed").await;
        assert_eq!(f["lastErrorClass"], "transformation", "{f}");
        assert_eq!(f["attemptCount"], 1, "{f}");
        let message = f["attempts"][0]["errorMessage"].as_str().unwrap();
        assert!(message.starts_with("the filter failed: "), "{message}");
        assert_eq!(f["attempts"][0]["errorClass"], "transformation");

        // A filter that yields something other than a boolean or null fails as well.
        let (status, _) = patch(&app, &format!("/destinations/{id}"), json!({"filter": ".total"}))
            .await;
        assert_eq!(status, 200);
        let odd = app.publish("order.paid", json!({"total": 7})).await;
        let o = app.wait_for_delivery(&odd, "failed").await;
        let message = o["attempts"][0]["errorMessage"].as_str().unwrap();
        assert_eq!(message, "the filter failed: it produced 7, not true, false or null");

        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(rx.received().len(), 1, "only the passing event was sent");
        app.stop().await;
    }
}

on_both_backends! {
    async fn a_filter_that_does_not_compile_is_refused_on_create_and_update_and_can_be_removed(db) {
        let app = spawn_app(&db).await.with_space().await;
        let rx = Receiver::start().await;
        let (status, refused) = app.post("/destinations", json!({"url": rx.url("/x"), "filter": ".total >"})).await;
        assert_eq!(status, 422, "{refused}");
        assert_eq!(refused["code"], "invalid_filter");
        assert!(refused["message"].as_str().unwrap().contains("does not compile"), "{refused}");

        let d = app.destination(json!({"url": rx.url("/x"), "filter": ".ok"})).await;
        let id = d["id"].as_str().unwrap();
        let (status, refused) = patch(&app, &format!("/destinations/{id}"), json!({"filter": "{{{"})).await;
        assert_eq!(status, 422, "{refused}");
        assert_eq!(refused["code"], "invalid_filter");
        let (_, kept) = app.get(&format!("/destinations/{id}")).await;
        assert_eq!(kept["filter"], ".ok", "a refused change changes nothing");

        let (status, cleared) = patch(&app, &format!("/destinations/{id}"), json!({"filter": null})).await;
        assert_eq!(status, 200);
        assert_eq!(cleared["filter"], Value::Null);
        let e = app.publish("anything", json!({"ok": false})).await;
        app.wait_for_delivery(&e, "succeeded").await;
        app.stop().await;
    }
}

on_both_backends! {
    async fn a_message_from_an_incoming_webhook_is_filtered_too(db) {
        let app = spawn_app(&db).await.with_space().await;
        let rx = Receiver::start().await;
        let p = Project::of(&app);
        let channel = p.channel("deploys").await;
        let w = p.webhook(&channel, json!({})).await;
        let url = w["url"].as_str().unwrap().to_owned();
        let d = app.destination(json!({
            "url": rx.url("/deploys"),
            "eventTypes": ["message.created"],
            "filter": r#".text | startswith("deploy")"#,
        })).await;
        let id = d["id"].as_str().unwrap();

        let kept_out = hook(&url, &json!({"text": "lunch?"}).to_string(), &[]).await;
        assert_eq!(kept_out.status, 201, "{}", kept_out.json);
        let sent = hook(&url, &json!({"text": "deploy 42 done"}).to_string(), &[]).await;
        assert_eq!(sent.status, 201, "{}", sent.json);

        let got = rx.wait_for(1).await;
        assert_eq!(serde_json::from_str::<Value>(&got[0].body).unwrap()["text"], "deploy 42 done");
        let (_, now) = app.get(&format!("/destinations/{id}")).await;
        assert_eq!(now["filteredEvents"], 1, "{now}");
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(rx.received().len(), 1, "the other message was kept out");
        app.stop().await;
    }
}
