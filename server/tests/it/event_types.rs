//! The event-type catalog (docs §1, §5): its REST endpoints and keyset paging, schemas
//! checked on save, payloads checked on publish with every violation and its pointer,
//! and wildcard subscriptions (`order.*`), through the real server to a real receiver.

use serde_json::{json, Value};

use crate::on_both_backends;
use server::testkit::{spawn_app, Receiver, TestApp};

fn order_schema() -> Value {
    json!({
        "type": "object",
        "required": ["orderId", "total", "currency"],
        "properties": {
            "orderId": {"type": "integer"},
            "total": {"type": "number", "minimum": 0},
            "currency": {"enum": ["EUR", "USD"]},
            "lines": {"type": "array", "items": {"type": "string"}}
        }
    })
}

async fn patch(app: &TestApp, path: &str, body: Value) -> (u16, Value) {
    let resp = reqwest::Client::new()
        .patch(app.api(path))
        .bearer_auth(app.api_key.as_ref().unwrap())
        .json(&body)
        .send()
        .await
        .unwrap();
    (resp.status().as_u16(), resp.json().await.unwrap())
}

on_both_backends! {
    async fn event_types_are_created_read_changed_and_listed_in_keyset_pages(db) {
        let app = spawn_app(&db).await.with_space().await;
        let (status, created) = app.post("/event-types", json!({
            "name": "order.created",
            "description": "An order was placed.",
            "schema": order_schema(),
            "example": {"orderId": 1, "total": 9.5, "currency": "EUR"},
        })).await;
        assert_eq!(status, 201, "{created}");
        assert!(created["id"].as_str().unwrap().starts_with("ety_"));
        assert_eq!(created["deprecated"], false);
        assert_eq!(created["schema"], order_schema());

        let (status, again) = app.post("/event-types", json!({"name": "order.created"})).await;
        assert_eq!((status, again["code"].as_str()), (409, Some("event_type_exists")), "{again}");
        for (body, code) in [
            (json!({"name": "order.*"}), "invalid_event_type"),
            (json!({"name": "bad type!"}), "invalid_event_type"),
            (json!({"name": "a", "description": "x".repeat(1001)}), "invalid_description"),
        ] {
            let (status, refused) = app.post("/event-types", body).await;
            assert_eq!((status, refused["code"].as_str()), (422, Some(code)), "{refused}");
        }

        let (status, read) = app.get("/event-types/order.created").await;
        assert_eq!((status, &read), (200, &created));
        assert_eq!(app.get("/event-types/order.nope").await.0, 404);

        let (status, changed) = patch(&app, "/event-types/order.created",
            json!({"deprecated": true, "example": null, "description": "Use order.placed."})).await;
        assert_eq!(status, 200, "{changed}");
        assert_eq!(changed["deprecated"], true);
        assert!(changed["example"].is_null());
        assert_eq!(changed["schema"], order_schema(), "absent fields stay");
        assert_eq!(changed["description"], "Use order.placed.");
        assert_eq!(patch(&app, "/event-types/order.nope", json!({})).await.0, 404);

        for i in 0..4 {
            assert_eq!(app.post("/event-types", json!({"name": format!("t.{i}")})).await.0, 201);
        }
        let mut names = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let path = match &cursor {
                Some(c) => format!("/event-types?limit=2&cursor={c}"),
                None => "/event-types?limit=2".into(),
            };
            let (status, page) = app.get(&path).await;
            assert_eq!(status, 200, "{page}");
            let data = page["data"].as_array().unwrap();
            assert!(data.len() <= 2);
            names.extend(data.iter().map(|t| t["name"].as_str().unwrap().to_owned()));
            match page["nextCursor"].as_str() {
                Some(c) => cursor = Some(c.to_owned()),
                None => break,
            }
        }
        assert_eq!(names, ["t.3", "t.2", "t.1", "t.0", "order.created"], "newest first, each once");
        let (status, wrong) = app.get("/event-types?cursor=bm9wZQ").await;
        assert_eq!((status, wrong["code"].as_str()), (422, Some("invalid_cursor")));
        app.stop().await;
    }
}

on_both_backends! {
    async fn a_schema_that_is_not_one_or_an_example_that_breaks_it_is_refused(db) {
        let app = spawn_app(&db).await.with_space().await;
        let (status, refused) = app.post("/event-types", json!({
            "name": "order.created",
            "schema": {"type": "object", "properties": {"total": {"type": "money"}}},
        })).await;
        assert_eq!((status, refused["code"].as_str()), (422, Some("invalid_schema")), "{refused}");
        assert!(refused["message"].as_str().unwrap().contains("not a valid JSON Schema"), "{refused}");

        let (status, refused) = app.post("/event-types", json!({
            "name": "order.created",
            "schema": {"$ref": "https://example.com/order.json"},
        })).await;
        assert_eq!((status, refused["code"].as_str()), (422, Some("invalid_schema")), "nothing is fetched: {refused}");

        let (status, refused) = app.post("/event-types", json!({
            "name": "order.created",
            "schema": order_schema(),
            "example": {"orderId": "one", "total": -1, "currency": "EUR"},
        })).await;
        assert_eq!((status, refused["code"].as_str()), (422, Some("invalid_example")), "{refused}");
        assert_eq!(refused["violations"].as_array().unwrap().len(), 2, "{refused}");

        assert_eq!(app.post("/event-types", json!({"name": "order.created"})).await.0, 201);
        let (status, refused) = patch(&app, "/event-types/order.created", json!({"schema": {"required": 3}})).await;
        assert_eq!((status, refused["code"].as_str()), (422, Some("invalid_schema")), "{refused}");
        let (_, unchanged) = app.get("/event-types/order.created").await;
        assert!(unchanged["schema"].is_null());
        app.stop().await;
    }
}

on_both_backends! {
    async fn a_payload_that_breaks_its_types_schema_is_refused_with_every_violation(db) {
        let app = spawn_app(&db).await.with_space().await;
        let rx = Receiver::start().await;
        app.destination(json!({"url": rx.url("/hook"), "eventTypes": ["order.created"]})).await;
        assert_eq!(app.post("/event-types", json!({"name": "order.created", "schema": order_schema()})).await.0, 201);

        let (status, refused) = app.post("/events", json!({
            "type": "order.created",
            "payload": {"orderId": "42", "total": -3, "currency": "GBP", "lines": ["a", 7]},
        })).await;
        assert_eq!(status, 422, "{refused}");
        assert_eq!(refused["code"], "schema_violation");
        assert!(refused["message"].as_str().unwrap().contains("order.created"), "{refused}");
        let violations = refused["violations"].as_array().unwrap();
        let mut pointers: Vec<&str> = violations.iter().map(|v| v["pointer"].as_str().unwrap()).collect();
        pointers.sort_unstable();
        assert_eq!(pointers, ["/currency", "/lines/1", "/orderId", "/total"], "{refused}");
        assert!(violations.iter().all(|v| !v["message"].as_str().unwrap().is_empty()));

        let (status, missing) = app.post("/events", json!({"type": "order.created", "payload": {}})).await;
        assert_eq!((status, missing["violations"].as_array().unwrap().len()), (422, 3), "{missing}");
        assert_eq!(app.get("/events").await.1["data"].as_array().unwrap().len(), 0, "nothing was written");

        let event = app.publish("order.created", json!({"orderId": 42, "total": 9.5, "currency": "EUR"})).await;
        let got = rx.wait_for(1).await;
        let body: Value = serde_json::from_str(&got[0].body).unwrap();
        assert_eq!(body["orderId"], 42);
        app.wait_for_delivery(&event, "succeeded").await;

        // A type not in the catalog, or without a schema, is published as it is.
        app.publish("invoice.paid", json!("anything")).await;
        app.post("/event-types", json!({"name": "invoice.sent"})).await;
        app.publish("invoice.sent", json!([1, 2])).await;

        // A new schema applies to the next publish (the cached one is not used again).
        let (status, _) = patch(&app, "/event-types/order.created", json!({"schema": {"type": "string"}})).await;
        assert_eq!(status, 200);
        let (status, refused) = app.post("/events", json!({
            "type": "order.created", "payload": {"orderId": 1, "total": 1, "currency": "EUR"},
        })).await;
        assert_eq!((status, refused["violations"][0]["pointer"].as_str()), (422, Some("")), "{refused}");
        let (status, _) = patch(&app, "/event-types/order.created", json!({"schema": null})).await;
        assert_eq!(status, 200);
        app.publish("order.created", json!(1)).await;
        app.stop().await;
    }
}

on_both_backends! {
    async fn a_catalogued_message_created_schema_checks_channel_messages(db) {
        let app = spawn_app(&db).await.with_space().await;
        let (_, channel) = app.post("/channels", json!({"name": "general"})).await;
        let messages = format!("/channels/{}/messages", channel["id"].as_str().unwrap());
        assert_eq!(app.post(&messages, json!({"text": "hi"})).await.0, 201);
        app.post("/event-types", json!({
            "name": "message.created",
            "schema": {"properties": {"text": {"maxLength": 5}}},
        })).await;
        assert_eq!(app.post(&messages, json!({"text": "short"})).await.0, 201);
        let (status, refused) = app.post(&messages, json!({"text": "far too long"})).await;
        assert_eq!((status, refused["code"].as_str()), (422, Some("schema_violation")), "{refused}");
        assert_eq!(refused["violations"][0]["pointer"], "/text");
        app.stop().await;
    }
}

on_both_backends! {
    async fn a_trailing_wildcard_subscribes_to_every_type_under_it(db) {
        let app = spawn_app(&db).await.with_space().await;
        let rx = Receiver::start().await;
        let orders = app.destination(json!({"url": rx.url("/orders"), "eventTypes": ["order.*"]})).await;
        assert_eq!(orders["eventTypes"], json!(["order.*"]));
        app.destination(json!({"url": rx.url("/refunds"), "eventTypes": ["order.refund.*", "invoice.paid"]})).await;
        for bad in ["order*", "*.created", "order.*.done", ".*"] {
            let (status, refused) = app.post("/destinations", json!({"url": rx.url("/x"), "eventTypes": [bad]})).await;
            assert_eq!((status, refused["code"].as_str()), (422, Some("invalid_event_type")), "{bad}: {refused}");
        }

        let created = app.publish("order.created", json!({"n": 1})).await;
        let done = app.publish("order.refund.done", json!({"n": 2})).await;
        let paid = app.publish("invoice.paid", json!({"n": 3})).await;
        let other = app.publish("orders.created", json!({"n": 4})).await;
        rx.wait_for(4).await;
        app.wait_for_delivery(&created, "succeeded").await;
        assert_eq!(app.deliveries_of(&done).await.len(), 2);
        app.wait_for_delivery(&paid, "succeeded").await;
        assert!(app.deliveries_of(&other).await.is_empty());

        let bodies = |path: &str| -> Vec<i64> {
            let mut n: Vec<i64> = rx.received_at(path).iter()
                .map(|r| serde_json::from_str::<Value>(&r.body).unwrap()["n"].as_i64().unwrap())
                .collect();
            n.sort_unstable();
            n
        };
        assert_eq!(bodies("/orders"), [1, 2], "order.* takes order.created and order.refund.done, not invoice.paid");
        assert_eq!(bodies("/refunds"), [2, 3]);
        app.stop().await;
    }
}
