//! A destination's own request headers (docs §2.9) through the real API to a real
//! receiver: sent on every attempt, never in place of one of ours; reserved, invalid
//! and too many refused with 422 naming the header; values masked in every answer
//! and in the attempt log; an update that names one header keeps the others.

use serde_json::{json, Value};

use crate::on_both_backends;
use server::testkit::{spawn_app, Receiver, Reply, TestApp};

async fn patch(app: &TestApp, path: &str, body: Value) -> (u16, Value) {
    let resp = reqwest::Client::new()
        .patch(app.api(path))
        .bearer_auth(app.api_key.as_ref().unwrap())
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

on_both_backends! {
    async fn the_receiver_gets_the_destinations_headers_on_every_attempt_and_ours_unchanged(db) {
        let app = spawn_app(&db).await.with_space().await;
        let rx = Receiver::start().await;
        rx.script([Reply::status(503)]);
        let dst = app
            .destination(json!({
                "url": rx.url("/hook"),
                "retryPolicy": {"preset": "partyflow", "initialMs": 100, "jitter": 0},
                "headers": {"Authorization": "Basic dXNlcjpzZWNyZXQxMjM0", "X-Team": "ops"},
            }))
            .await;
        // Masked from the first answer on: the creator knows what was sent.
        assert_eq!(
            dst["headers"],
            json!({"Authorization": "••••…MjM0", "X-Team": "••••"})
        );

        let event = app.publish("order.paid", json!({"n": 1})).await;
        let seen = rx.wait_for(2).await;
        for (n, req) in seen.iter().enumerate() {
            assert_eq!(req.header("authorization"), "Basic dXNlcjpzZWNyZXQxMjM0", "attempt {n}");
            assert_eq!(req.header("x-team"), "ops", "attempt {n}");
            assert_eq!(req.header("content-type"), "application/json");
            assert!(req.header("user-agent").starts_with("PartyFlow-Hooks/"));
            assert!(req.header("webhook-signature").starts_with("v1,"));
            assert_eq!(req.headers.get_all("authorization").iter().count(), 1);
        }

        // The attempt log shows what was sent, the secret masked.
        let delivery = app.wait_for_delivery(&event, "succeeded").await;
        let logged = &delivery["attempts"][0]["request"]["headers"];
        assert_eq!(logged["Authorization"], "••••…MjM0", "{logged}");
        assert!(!delivery.to_string().contains("dXNlcjpzZWNy"), "{delivery}");
        app.stop().await;
    }
}

on_both_backends! {
    async fn reserved_invalid_and_too_many_headers_are_refused_naming_the_header(db) {
        let app = spawn_app(&db).await.with_space().await;
        let refused = |headers: Value| {
            let app = &app;
            async move {
                let (status, err) = app
                    .post("/destinations", json!({"url": "https://a.example/hook", "headers": headers}))
                    .await;
                assert_eq!(status, 422, "{err}");
                (err["code"].as_str().unwrap().to_owned(), err["message"].as_str().unwrap().to_owned())
            }
        };
        for name in [
            "webhook-id", "Webhook-Timestamp", "WEBHOOK-SIGNATURE", "Content-Type", "content-length",
            "Host", "connection", "Transfer-Encoding", "User-Agent",
        ] {
            let (code, message) = refused(json!({"X-Fine": "1", name: "x"})).await;
            assert_eq!(code, "reserved_header", "{name}");
            assert!(message.contains(name), "{name}: {message}");
        }
        for bad in [json!({"X Team": "ops"}), json!({"X-Team:": "ops"}), json!({"": "ops"})] {
            assert_eq!(refused(bad.clone()).await.0, "invalid_header", "{bad}");
        }
        for bad in ["a\r\nX-Evil: 1", "caf\u{e9}", "", " padded "] {
            let (code, message) = refused(json!({"X-Team": bad})).await;
            assert_eq!(code, "invalid_header", "{bad:?}");
            assert!(message.contains("X-Team"), "{message}");
        }
        let many: serde_json::Map<String, Value> =
            (0..21).map(|i| (format!("X-H{i}"), json!("v"))).collect();
        assert_eq!(refused(Value::Object(many)).await.0, "invalid_headers");
        assert_eq!(refused(json!({"X-Big": "v".repeat(4092)})).await.0, "invalid_headers");

        // An update is checked the same way and changes nothing when refused.
        let dst = app.destination(json!({"url": "https://a.example/hook", "headers": {"X-A": "1"}})).await;
        let path = format!("/destinations/{}", dst["id"].as_str().unwrap());
        let (status, err) = patch(&app, &path, json!({"headers": {"Host": "evil.example"}})).await;
        assert_eq!((status, err["code"].clone()), (422, json!("reserved_header")), "{err}");
        assert_eq!(app.get(&path).await.1["headers"], json!({"X-A": "••••"}));
        app.stop().await;
    }
}

on_both_backends! {
    async fn updating_one_header_keeps_the_others_and_null_removes_one(db) {
        let app = spawn_app(&db).await.with_space().await;
        let rx = Receiver::start().await;
        let dst = app
            .destination(json!({
                "url": rx.url("/hook"),
                "headers": {"Authorization": "Bearer token-abcd-9876", "X-Team": "ops-team"},
            }))
            .await;
        let path = format!("/destinations/{}", dst["id"].as_str().unwrap());

        let (status, changed) = patch(&app, &path, json!({"headers": {"X-Team": "dev-team"}})).await;
        assert_eq!(status, 200, "{changed}");
        assert_eq!(
            changed["headers"],
            json!({"Authorization": "••••…9876", "X-Team": "••••…am"})
        );
        // Other changes leave the headers alone; clear text never comes back.
        let (status, changed) = patch(&app, &path, json!({"description": "billing"})).await;
        assert_eq!(status, 200, "{changed}");
        let (_, read) = app.get(&path).await;
        assert_eq!(read["headers"], changed["headers"]);
        let (_, list) = app.get("/destinations").await;
        let text = format!("{read}{list}");
        assert!(!text.contains("token-abcd") && !text.contains("dev-team"), "{text}");

        app.publish("order.paid", json!({})).await;
        let first = rx.wait_for(1).await;
        assert_eq!(first[0].header("authorization"), "Bearer token-abcd-9876");
        assert_eq!(first[0].header("x-team"), "dev-team");

        let (status, changed) = patch(&app, &path, json!({"headers": {"x-team": null, "X-New": "1"}})).await;
        assert_eq!(status, 200, "{changed}");
        assert_eq!(changed["headers"], json!({"Authorization": "••••…9876", "X-New": "••••"}));
        app.publish("order.paid", json!({})).await;
        let second = rx.wait_for(2).await;
        assert_eq!(second[1].header("x-team"), "", "removed");
        assert_eq!(second[1].header("x-new"), "1");
        assert_eq!(second[1].header("authorization"), "Bearer token-abcd-9876");
        app.stop().await;
    }
}
