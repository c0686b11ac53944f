//! Tenants' programs cannot take the server down (issue 11): each program bomb
//! ends its own delivery with class `transformation` and the limit it hit, while
//! the server stays up, a healthy destination of another space keeps delivering
//! on time, and a restart on the same database does not crash.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::on_both_backends;
use server::testkit::{spawn_app, Receiver};

/// Program bombs and the words their failure must contain.
const BOMBS: [(&str, &str, &[&str]); 5] = [
    (
        "huge allocation",
        r#""x" * 100000000000"#,
        &["used more than 256 MiB of memory"],
    ),
    (
        "deep nesting, printed",
        "reduce range(200000) as $i (0; [.]) | tojson",
        // Building it takes long in a debug build on a busy machine; either limit is named.
        &[
            "crashed its sandbox (stack overflow)",
            "256 MiB of memory",
            "recursion too deep",
            "ran longer than 1 s",
        ],
    ),
    (
        "infinite recursion",
        "def f: 1 + f; f",
        // The depth limit, or on a machine loaded past its cores the time limit first.
        &["recursion too deep", "ran longer than 1 s"],
    ),
    ("infinite loop", "until(false; .)", &["ran longer than 1 s"]),
    (
        "huge output",
        r#""x" * 5000000"#,
        &["output is larger than 1024 KiB"],
    ),
];

on_both_backends! {
    async fn program_bombs_fail_only_their_own_delivery_and_name_the_limit(db) {
        let app = spawn_app(&db).await.with_space().await;
        let rx = Receiver::start().await;
        // The healthy destination lives in another space.
        let other = spawn_other_space(&app).await;
        let healthy_rx = Receiver::start().await;
        other.destination(json!({"url": healthy_rx.url("/healthy")})).await;

        let mut bombs = Vec::new();
        for (i, (name, program, _)) in BOMBS.iter().enumerate() {
            let t = format!("bomb.{i}");
            app.destination(json!({"url": rx.url("/bomb"), "eventTypes": [t], "transformation": program}))
                .await;
            bombs.push((name, app.publish(&t, json!({"n": i})).await));
        }

        // While the bombs go off, the healthy destination delivers each event promptly.
        let mut slowest = Duration::ZERO;
        for n in 0..10 {
            let sent = Instant::now();
            other.publish("tick", json!({"n": n})).await;
            healthy_rx.wait_for(n + 1).await;
            slowest = slowest.max(sent.elapsed());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(slowest < Duration::from_secs(1), "healthy deliveries took up to {slowest:?}");

        for ((name, event), (_, _, words)) in bombs.iter().zip(BOMBS.iter()) {
            let d = app.wait_for_delivery(event, "failed").await;
            assert_eq!(d["lastErrorClass"], "transformation", "{name}: {d}");
            let message = d["attempts"][0]["errorMessage"].as_str().unwrap_or_default();
            assert!(words.iter().any(|w| message.contains(w)), "{name}: {message}");
        }
        assert!(rx.received().is_empty(), "no bomb's output was sent");

        // The sandbox recovered: a sane transformation still works.
        app.destination(json!({"url": rx.url("/sane"), "eventTypes": ["sane"], "transformation": "{n: .n}"}))
            .await;
        let sane = app.publish("sane", json!({"n": 7, "x": 1})).await;
        app.wait_for_delivery(&sane, "succeeded").await;
        assert_eq!(rx.received()[0].body, r#"{"n":7}"#);

        // A restart on the same database starts and serves.
        let storage = app.storage.clone();
        app.stop().await;
        let again = server::testkit::spawn_app(&db).await;
        let health = reqwest::get(again.url("/healthz")).await.unwrap();
        assert_eq!(health.status(), 200);
        drop(storage);
        again.stop().await;
        drop(other);
    }
}

on_both_backends! {
    async fn a_program_that_crashes_the_compiler_or_fails_to_compile_is_refused_with_422(db) {
        let app = spawn_app(&db).await.with_space().await;
        let (status, refused) = app
            .post("/destinations", json!({"url": "https://example.com/x", "transformation": "{a: .x"}))
            .await;
        assert_eq!(status, 422, "{refused}");
        assert_eq!(refused["code"], "invalid_transformation");
        assert!(refused["message"].as_str().unwrap().contains("does not compile"), "{refused}");
        // The server is fine and the next check works.
        let (status, made) = app
            .post("/destinations", json!({"url": "https://example.com/x", "transformation": ".a"}))
            .await;
        assert_eq!(status, 201, "{made}");
        app.stop().await;
    }
}

/// A second space of the same server, with its own API key.
async fn spawn_other_space(app: &server::testkit::TestApp) -> OtherSpace {
    let created = server::ops::tenants::create_space(
        app.storage.as_ref(),
        "Other space",
        server::domain::Plan::Enterprise,
    )
    .await
    .unwrap();
    OtherSpace {
        base: app.url(&format!("/v1/projects/{}", created.space.id)),
        key: created.api_key,
    }
}

struct OtherSpace {
    base: String,
    key: String,
}

impl OtherSpace {
    async fn destination(&self, body: serde_json::Value) {
        let resp = reqwest::Client::new()
            .post(format!("{}/destinations", self.base))
            .bearer_auth(&self.key)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 201);
    }

    async fn publish(&self, event_type: &str, payload: serde_json::Value) {
        let resp = reqwest::Client::new()
            .post(format!("{}/events", self.base))
            .bearer_auth(&self.key)
            .json(&json!({"type": event_type, "payload": payload}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 202);
    }
}
