//! The real server in this process, on a free loopback port, with its own shutdown
//! switch: [`spawn_app`] on a [`TestDb`], and the helpers to call it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::db::TestDb;
use super::wait::eventually;
use crate::config::Config;
use crate::storage::TestStorage;

/// A server running in this process on a free port, with its own shutdown switch.
pub struct TestApp {
    pub addr: SocketAddr,
    pub db_url: String,
    pub storage: Arc<dyn TestStorage>,
    /// Set by [`TestApp::with_space`].
    pub api_key: Option<String>,
    pub space: Option<String>,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
    /// The metrics listener's address, when the test asked for one (`metrics_listen`,
    /// e.g. `127.0.0.1:0`; the test kit's default is off).
    pub metrics_addr: Option<SocketAddr>,
}

impl TestApp {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// Creates a space with an API key for the API helpers below.
    pub async fn with_space(mut self) -> Self {
        let created = crate::ops::tenants::create_space(
            self.storage.as_ref(),
            "Test space",
            crate::domain::Plan::Enterprise,
        )
        .await
        .unwrap();
        self.api_key = Some(created.api_key);
        self.space = Some(created.space.id.to_string());
        self
    }

    /// `/v1/projects/{space}` + `path`.
    pub fn api(&self, path: &str) -> String {
        self.url(&format!(
            "/v1/projects/{}{}",
            self.space.as_ref().unwrap(),
            path
        ))
    }

    pub async fn post(&self, path: &str, body: serde_json::Value) -> (u16, serde_json::Value) {
        let resp = reqwest::Client::new()
            .post(self.api(path))
            .bearer_auth(self.api_key.as_ref().unwrap())
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(serde_json::Value::Null))
    }

    pub async fn get(&self, path: &str) -> (u16, serde_json::Value) {
        let resp = reqwest::Client::new()
            .get(self.api(path))
            .bearer_auth(self.api_key.as_ref().unwrap())
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(serde_json::Value::Null))
    }

    /// Creates a destination and returns its JSON (with `secret`).
    pub async fn destination(&self, body: serde_json::Value) -> serde_json::Value {
        let (status, json) = self.post("/destinations", body).await;
        assert_eq!(status, 201, "{json}");
        json
    }

    /// Publishes an event and returns its ID.
    pub async fn publish(&self, event_type: &str, payload: serde_json::Value) -> String {
        let (status, json) = self
            .post(
                "/events",
                serde_json::json!({"type": event_type, "payload": payload}),
            )
            .await;
        assert_eq!(status, 202, "{json}");
        json["id"].as_str().unwrap().to_owned()
    }

    /// The deliveries of an event, newest first.
    pub async fn deliveries_of(&self, event_id: &str) -> Vec<serde_json::Value> {
        let (status, json) = self.get("/deliveries?limit=250").await;
        assert_eq!(status, 200, "{json}");
        json["data"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["eventId"] == event_id)
            .cloned()
            .collect()
    }

    /// Waits until the one delivery of `event_id` reaches `status`, and returns it with its attempts.
    pub async fn wait_for_delivery(&self, event_id: &str, status: &str) -> serde_json::Value {
        let id = eventually(30, || async {
            let ds = self.deliveries_of(event_id).await;
            (ds.len() == 1 && ds[0]["status"] == status)
                .then(|| ds[0]["id"].as_str().unwrap().to_owned())
        })
        .await;
        self.get(&format!("/deliveries/{id}")).await.1
    }

    /// Stops the server and waits for it to finish.
    pub async fn stop(self) {
        self.shutdown.cancel();
        self.task.await.unwrap().unwrap();
    }
}

/// The console's built files: `PARTYFLOW_TEST_SITE_ROOT` (set by `./dev test`), or
/// `site/` at the top of the checkout.
pub fn site_root() -> PathBuf {
    std::env::var("PARTYFLOW_TEST_SITE_ROOT")
        .map(Into::into)
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../site").into())
}

/// The configuration of a test server on `db_url`.
pub fn test_config(db_url: &str) -> Config {
    let dispatch = crate::config::DispatchConfig {
        idle_poll_ms: 200,
        shutdown_grace_seconds: 2,
        ..Default::default()
    };
    Config {
        database_url: db_url.to_owned(),
        listen: "127.0.0.1:0".parse().unwrap(),
        // Test receivers live on loopback.
        allow_networks: "127.0.0.0/8,::1/128".into(),
        dispatch,
        site_root: site_root(),
        sandbox: sandbox_settings(),
        alerts: crate::config::AlertsConfig {
            poll_ms: 100,
            ..Default::default()
        },
        // Off: parallel test processes must not fight over 9464; a test that scrapes
        // asks for `127.0.0.1:0` and reads `TestApp::metrics_addr`.
        metrics_listen: String::new(),
        ..Config::default()
    }
}

/// The sandbox of a test server: workers are the real `partyflow` binary (the
/// test binary itself cannot be started as one).
pub fn sandbox_settings() -> crate::sandbox::Settings {
    crate::sandbox::Settings {
        worker_program: Some(partyflow_binary()),
        ..Default::default()
    }
}

/// The `partyflow` binary cargo built beside the running test (in
/// `target/<profile>/`; the test binaries are in `target/<profile>/deps/`).
pub fn partyflow_binary() -> PathBuf {
    let test = std::env::current_exe().expect("the test binary's path");
    let profile_dir = test
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps/<test>");
    let binary = profile_dir.join("partyflow");
    assert!(
        binary.exists(),
        "{} is missing: build the server first (cargo build -p server)",
        binary.display()
    );
    binary
}

/// Starts the real server on `db`.
pub async fn spawn_app(db: &TestDb) -> TestApp {
    spawn_app_with_config(db, test_config(&db.url)).await
}

/// Starts the real server on `db` with a changed configuration, on a free loopback
/// port (the server serves on the listener it is handed; `config.listen` is unused).
pub async fn spawn_app_with_config(db: &TestDb, config: Config) -> TestApp {
    let (db_url, storage) = (db.url.clone(), db.storage.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let metrics = crate::startup::bind_metrics(&config).await.unwrap();
    let metrics_addr = metrics.as_ref().map(|l| l.local_addr().unwrap());
    let task = tokio::spawn(crate::startup::run_with_metrics(
        config,
        storage.clone().into(),
        listener,
        metrics,
        shutdown.clone(),
    ));
    wait_until_serving(addr).await;
    TestApp {
        addr,
        db_url,
        storage,
        shutdown,
        task,
        api_key: None,
        space: None,
        metrics_addr,
    }
}

/// Waits until the server at `addr` answers `/healthz`, so a test never races its start-up.
pub async fn wait_until_serving(addr: SocketAddr) {
    let client = reqwest::Client::new();
    eventually(30, || {
        let client = client.clone();
        async move {
            let resp = client
                .get(format!("http://{addr}/healthz"))
                .send()
                .await
                .ok()?;
            resp.status().is_success().then_some(())
        }
    })
    .await
}

/// A client that keeps cookies and does not follow redirects, so tests see them.
pub fn browser_like_client() -> reqwest::Client {
    reqwest::Client::builder()
        .cookie_store(true)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}
