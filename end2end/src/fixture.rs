//! The server under test: the real server in-process (the shared test kit's
//! `spawn_app`) on a fresh SQLite file, with an admin, a support user and one space,
//! and the calls the tests make to it without a browser.

use std::net::SocketAddr;
use std::sync::Arc;

use serde_json::{json, Value};
use server::config::{Config, DispatchConfig, LimitsConfig};
use server::domain::*;
use server::storage::Storage;
use server::testkit::{browser_like_client, fresh_db, site_root, Db, TestApp, TestDb};

pub const PASSWORD: &str = "correct horse battery";
pub const ADMIN: &str = "admin@example.com";
pub const SUPPORT: &str = "support@example.com";

pub struct Server {
    pub addr: SocketAddr,
    pub base: String,
    pub storage: Arc<dyn Storage>,
    pub space: SpaceId,
    pub api_key: String,
    app: TestApp,
    _db: TestDb,
}

/// The real server on a fresh SQLite file, with an admin, a support user and one
/// space; destinations may reach loopback receivers, and three dead-letters in a
/// row disable a destination.
pub async fn start_server() -> Server {
    start_server_with(|_| {}).await
}

pub async fn start_server_with(tweak: impl FnOnce(&mut Config)) -> Server {
    start(true, tweak).await
}

/// A server on a fresh database with no console user (first run).
pub async fn start_bare_server() -> Server {
    start(false, |_| {}).await
}

/// The browser suite's settings on top of the test kit's: three dead-letters in a
/// row disable a destination (no warnings before), one delivery in flight per
/// destination.
fn e2e_config(db_url: &str) -> Config {
    let base = server::testkit::test_config(db_url);
    Config {
        dispatch: DispatchConfig {
            auto_disable_after: 3,
            auto_disable_warn_at: vec![],
            ..base.dispatch.clone()
        },
        limits: LimitsConfig {
            destination_in_flight: 1,
            ..Default::default()
        },
        ..base
    }
}

async fn start(with_users: bool, tweak: impl FnOnce(&mut Config)) -> Server {
    let bundle = server::assets::bundle_name(&site_root());
    assert!(
        site_root().join(format!("pkg/{bundle}_bg.wasm")).exists(),
        "the console is not built into {}: run ./dev test",
        site_root().display()
    );
    let db = fresh_db(Db::Sqlite).await.unwrap();
    let storage = db.storage.clone();
    if with_users {
        server::ops::tenants::create_user(storage.as_ref(), ADMIN, PASSWORD, Role::Admin)
            .await
            .unwrap();
        server::ops::tenants::create_user(storage.as_ref(), SUPPORT, PASSWORD, Role::Support)
            .await
            .unwrap();
    }
    let created = server::ops::tenants::create_space(storage.as_ref(), "Acme", Plan::Pro)
        .await
        .unwrap();
    let mut config = e2e_config(&db.url);
    tweak(&mut config);
    let app = server::testkit::spawn_app_with_config(&db, config).await;
    Server {
        addr: app.addr,
        base: format!("http://{}", app.addr),
        storage,
        space: created.space.id,
        api_key: created.api_key,
        app,
        _db: db,
    }
}

impl Server {
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// A call to the REST API of the test space.
    pub async fn api(&self, path: &str, body: Value) -> Value {
        let resp = reqwest::Client::new()
            .post(self.url(&format!("/v1/projects/{}{path}", self.space)))
            .bearer_auth(&self.api_key)
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = resp.status();
        let body: Value = resp.json().await.unwrap_or(Value::Null);
        assert!(status.is_success(), "POST {path}: {status} {body}");
        body
    }

    /// A destination through the REST API; its ID.
    pub async fn destination(
        &self,
        url: &str,
        event_type: &str,
        max_attempts: i64,
        retry_policy: Value,
    ) -> DestinationId {
        let d = self
            .api(
                "/destinations",
                json!({"url": url, "eventTypes": [event_type], "maxAttempts": max_attempts, "retryPolicy": retry_policy}),
            )
            .await;
        d["id"].as_str().unwrap().parse().unwrap()
    }

    pub async fn publish(&self, event_type: &str, payload: Value) {
        self.api("/events", json!({"type": event_type, "payload": payload}))
            .await;
    }

    pub async fn deliveries_of(&self, destination: DestinationId) -> Vec<Delivery> {
        let filter = server::storage::DeliveryFilter {
            destination_id: Some(destination),
            ..Default::default()
        };
        self.storage
            .list_deliveries(&filter, server::storage::Page::first(500))
            .await
            .unwrap()
    }

    pub async fn stop(self) {
        self.app.stop().await;
    }
}

/// A reqwest client signed in to the console like a browser without JavaScript.
pub async fn http_session(server: &Server, email: &str) -> reqwest::Client {
    let client = browser_like_client();
    let resp = client
        .post(server.url("/api/login"))
        .header("accept", "text/html")
        .form(&[("email", email), ("password", PASSWORD), ("next", "/")])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.headers()["location"], "/", "signed in as {email}");
    client
}

/// A channel and an incoming webhook in the test space, written directly to storage.
pub async fn incoming_webhook(server: &Server, name: &str) -> IncomingWebhookId {
    let now = server::clock::now_ms();
    let channel = Channel {
        id: ChannelId::new(),
        space_id: server.space,
        name: format!("ch-{name}"),
        created_at: now,
    };
    server.storage.create_channel(&channel, None).await.unwrap();
    let hook = IncomingWebhook {
        id: IncomingWebhookId::new(),
        space_id: server.space,
        channel_id: channel.id,
        name: name.into(),
        token_hash: server::ops::credentials::Credential::IncomingWebhookToken
            .mint()
            .hash,
        signing_secret: None,
        status: IncomingWebhookStatus::Active,
        consecutive_failures: 0,
        created_at: now,
        updated_at: now,
        disabled_at: None,
    };
    server
        .storage
        .create_incoming_webhook(&hook, None)
        .await
        .unwrap();
    hook.id
}
