//! The OpenAPI document (`/v1/openapi.json`) and the reference page (`/v1/docs`):
//! every route is documented and every documented route exists; and, with
//! `PARTYFLOW_TEST_SCHEMATHESIS=1`, schemathesis checks the real server against the
//! document (`scripts/schemathesis.sh`).

use std::collections::BTreeSet;

use serde_json::{json, Value};

use crate::on_both_backends;
use server::testkit::*;

/// Every route of the router, as the document names it. docs §5's calls are all here.
const ROUTES: &[(&str, &str)] = &[
    ("post", "/v1/projects/{project}/destinations"),
    ("get", "/v1/projects/{project}/destinations"),
    ("get", "/v1/projects/{project}/destinations/{id}"),
    ("patch", "/v1/projects/{project}/destinations/{id}"),
    ("delete", "/v1/projects/{project}/destinations/{id}"),
    ("post", "/v1/projects/{project}/destinations/{id}/enable"),
    ("post", "/v1/projects/{project}/destinations/{id}/disable"),
    (
        "post",
        "/v1/projects/{project}/destinations/{id}/rotate-secret",
    ),
    ("post", "/v1/projects/{project}/events"),
    ("get", "/v1/projects/{project}/events"),
    ("get", "/v1/projects/{project}/events/{id}"),
    ("get", "/v1/projects/{project}/deliveries"),
    ("get", "/v1/projects/{project}/deliveries/{id}"),
    ("get", "/v1/projects/{project}/deliveries/{id}/attempts"),
    ("post", "/v1/projects/{project}/deliveries/{id}/resend"),
    ("post", "/v1/projects/{project}/deliveries/{id}/cancel"),
    ("post", "/v1/projects/{project}/deliveries/resend"),
    ("post", "/v1/projects/{project}/deliveries/cancel"),
    ("post", "/v1/projects/{project}/deliveries/resend-failed"),
    (
        "post",
        "/v1/projects/{project}/deliveries/resend-failed/preview",
    ),
    ("post", "/v1/projects/{project}/event-types"),
    ("get", "/v1/projects/{project}/event-types"),
    ("get", "/v1/projects/{project}/event-types/{name}"),
    ("patch", "/v1/projects/{project}/event-types/{name}"),
    ("post", "/v1/projects/{project}/channels"),
    ("get", "/v1/projects/{project}/channels"),
    ("get", "/v1/projects/{project}/channels/{id}"),
    ("patch", "/v1/projects/{project}/channels/{id}"),
    ("delete", "/v1/projects/{project}/channels/{id}"),
    ("get", "/v1/projects/{project}/channels/{id}/messages"),
    ("post", "/v1/projects/{project}/channels/{id}/messages"),
    ("post", "/v1/projects/{project}/incoming-webhooks"),
    ("get", "/v1/projects/{project}/incoming-webhooks"),
    ("get", "/v1/projects/{project}/incoming-webhooks/{id}"),
    ("delete", "/v1/projects/{project}/incoming-webhooks/{id}"),
    (
        "post",
        "/v1/projects/{project}/incoming-webhooks/{id}/enable",
    ),
    (
        "post",
        "/v1/projects/{project}/incoming-webhooks/{id}/disable",
    ),
    ("post", "/v1/projects/{project}/bots"),
    ("get", "/v1/projects/{project}/bots"),
    ("get", "/v1/projects/{project}/bots/{id}"),
    ("post", "/v1/projects/{project}/bots/{id}/revoke"),
    ("post", "/v1/projects/{project}/api-keys"),
    ("get", "/v1/projects/{project}/api-keys"),
    ("post", "/v1/projects/{project}/api-keys/{id}/revoke"),
    ("get", "/v1/projects/{project}/notifications"),
    ("post", "/v1/projects/{project}/notifications/{id}/read"),
    ("get", "/v1/projects/{project}/audit-log"),
    ("post", "/v1/bot/channels/{channel_id}/messages"),
    ("post", "/hooks/{webhook_id}/{token}"),
    ("get", "/v1/openapi.json"),
    ("get", "/v1/docs"),
    ("get", "/v1/projects/{project}"),
    ("patch", "/v1/projects/{project}"),
];

async fn document(app: &TestApp) -> Value {
    let resp = reqwest::get(app.url("/v1/openapi.json")).await.unwrap();
    assert_eq!(resp.status(), 200, "served without an API key");
    let content_type = resp.headers()[reqwest::header::CONTENT_TYPE]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        content_type.starts_with("application/json"),
        "{content_type}"
    );
    resp.json().await.expect("the document is JSON")
}

fn operations(doc: &Value) -> BTreeSet<(String, String)> {
    let mut found = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for method in item
            .as_object()
            .unwrap()
            .keys()
            .filter(|k| *k != "parameters")
        {
            found.insert((method.clone(), path.clone()));
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openapi_document_describes_every_route_and_no_route_that_does_not_exist() {
    let db = fresh_db(Db::Sqlite).await.unwrap();
    let app = spawn_app(&db).await.with_space().await;
    let doc = document(&app).await;
    assert!(
        doc["openapi"].as_str().unwrap().starts_with("3.1"),
        "{}",
        doc["openapi"]
    );

    let expected: BTreeSet<(String, String)> = ROUTES
        .iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    let documented = operations(&doc);
    let missing: Vec<_> = expected.difference(&documented).collect();
    let extra: Vec<_> = documented.difference(&expected).collect();
    assert!(
        missing.is_empty(),
        "routes without documentation: {missing:?}"
    );
    assert!(
        extra.is_empty(),
        "documented but not in this test's list of routes: {extra:?}"
    );

    // Each route exists, and what it answers to a harmless request is documented.
    let client = reqwest::Client::new();
    for (method, path) in ROUTES {
        let url = path
            .replace("{project}", app.space.as_ref().unwrap())
            .replace("{id}", "nope")
            .replace("{channel_id}", "nope")
            .replace("{webhook_id}", "nope")
            .replace("{token}", "nope");
        let mut request = client
            .request(method.to_uppercase().parse().unwrap(), app.url(&url))
            .bearer_auth(app.api_key.as_ref().unwrap());
        if matches!(*method, "post" | "patch") {
            request = request.json(&json!({}));
        }
        let resp = request.send().await.unwrap();
        let status = resp.status().as_u16();
        let body: Value = resp.json().await.unwrap_or(Value::Null);
        assert_ne!(status, 405, "{method} {path}: no such method on this route");
        assert_ne!(
            body["message"], "no such endpoint",
            "{method} {path}: no such route"
        );
        let responses = &doc["paths"][*path][*method]["responses"];
        assert!(
            responses.get(status.to_string()).is_some(),
            "{method} {path} answered {status} ({body}), which its operation does not document"
        );
        if status >= 400 {
            assert!(
                body["code"].is_string() && body["message"].is_string(),
                "{method} {path}: {body}"
            );
        }
    }
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_page_shows_every_operation_without_scripts_or_outside_assets() {
    let db = fresh_db(Db::Sqlite).await.unwrap();
    let app = spawn_app(&db).await;
    let doc = document(&app).await;
    let resp = reqwest::get(app.url("/v1/docs")).await.unwrap();
    assert_eq!(resp.status(), 200);
    let headers = resp.headers().clone();
    assert!(headers[reqwest::header::CONTENT_TYPE]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
    assert!(headers.contains_key(reqwest::header::CONTENT_SECURITY_POLICY));
    let html = resp.text().await.unwrap();

    for (method, path) in ROUTES {
        let heading = format!(
            ">{}</span> <code>{}</code></h3>",
            method.to_uppercase(),
            path
        );
        assert!(html.contains(&heading), "no heading for {method} {path}");
        let summary = doc["paths"][*path][*method]["summary"].as_str().unwrap();
        assert!(
            html.contains(&summary.replace('\'', "&#39;")),
            "no summary {summary:?}"
        );
    }
    for schema in doc["components"]["schemas"].as_object().unwrap().keys() {
        assert!(
            html.contains(&format!("id=\"schema-{schema}\"")),
            "no schema {schema}"
        );
    }
    for outside in ["<script", "<link", "src=", "@import", "url("] {
        assert!(
            !html.contains(outside),
            "the page must be self-contained, found {outside:?}"
        );
    }
    app.stop().await;
}

/// A loopback URL where nothing listens: deliveries to it fail with `connect`.
async fn closed_port_url() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{addr}/gone")
}

on_both_backends! {
    async fn schemathesis_finds_no_server_error_and_no_answer_that_contradicts_the_document(db) {
        if std::env::var("PARTYFLOW_TEST_SCHEMATHESIS").as_deref() != Ok("1") {
            eprintln!("PARTYFLOW_TEST_SCHEMATHESIS is not 1: the schemathesis run is SKIPPED");
            return;
        }
        // A 5xx's cause is logged at ERROR: show it next to schemathesis's report.
        let _ = tracing_subscriber::fmt().with_env_filter("error").with_test_writer().try_init();
        let app = spawn_app(&db).await.with_space().await;

        // Data of every kind, so pinned IDs answer 200 and lists are not empty.
        let receiver = Receiver::start().await;
        app.destination(json!({"url": receiver.url("/ok"), "description": "answers 200"})).await;
        // Nothing listens there: one attempt fails for good, eight keep a delivery retrying.
        let closed =
            json!({"url": closed_port_url().await, "maxAttempts": 1, "eventTypes": ["order.created"]});
        app.destination(closed).await;
        let retrying = json!({"url": closed_port_url().await, "eventTypes": ["order.created"]});
        app.destination(retrying).await;
        let (status, channel) = app.post("/channels", json!({"name": "general"})).await;
        assert_eq!(status, 201, "{channel}");
        let channel_id = channel["id"].as_str().unwrap();
        let messages = format!("/channels/{channel_id}/messages");
        let (status, message) = app.post(&messages, json!({"text": "hello"})).await;
        assert_eq!(status, 201, "{message}");
        let (status, bot) = app.post("/bots", json!({"name": "builder"})).await;
        assert_eq!(status, 201, "{bot}");
        let hook = json!({"channelId": channel_id, "name": "ci", "signingSecret": true});
        let (status, hook) = app.post("/incoming-webhooks", hook).await;
        assert_eq!(status, 201, "{hook}");
        for n in 0..3 {
            app.publish("order.created", json!({"n": n})).await;
        }
        let note = server::domain::Notification {
            id: server::domain::NotificationId::new(),
            space_id: Some(app.space.as_ref().unwrap().parse().unwrap()),
            kind: "destination.failing".into(),
            subject_kind: Some("destination".into()),
            subject_id: None,
            message: "a destination keeps failing".into(),
            created_at: server::clock::now_ms(),
            read_at: None,
        };
        app.storage.create_notification(&note).await.unwrap();
        eventually(30, || async {
            let (_, failed) = app.get("/deliveries?status=failed").await;
            (!failed["data"].as_array()?.is_empty()).then_some(())
        })
        .await;

        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/schemathesis.sh");
        let status = tokio::process::Command::new(script)
            .env("PARTYFLOW_BASE_URL", app.url(""))
            .env("PARTYFLOW_API_KEY", app.api_key.as_ref().unwrap())
            .env("PARTYFLOW_PROJECT", app.space.as_ref().unwrap())
            .env("PARTYFLOW_BOT_TOKEN", bot["token"].as_str().unwrap())
            .kill_on_drop(true)
            .status()
            .await
            .expect("running scripts/schemathesis.sh");
        app.stop().await;
        assert!(status.success(), "schemathesis found problems (its report is above): {status}");
    }
}
