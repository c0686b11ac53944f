//! Shared by the console's browser tests: the real server in-process on a fresh
//! SQLite file, a real receiver (a tiny axum app whose answers the test steers),
//! chromedriver with Debian's headless Chromium, and small helpers.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fantoccini::elements::Element;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};
use server::config::{Config, DispatchConfig, LimitsConfig};
use server::domain::*;
use server::storage::TestStorage;
use tokio_util::sync::CancellationToken;

pub const PASSWORD: &str = "correct horse battery";
pub const ADMIN: &str = "admin@example.com";
pub const SUPPORT: &str = "support@example.com";

pub fn site_root() -> PathBuf {
    std::env::var("PARTYFLOW_TEST_SITE_ROOT")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../site")))
}

pub fn artifacts() -> PathBuf {
    let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/artifacts"));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// chromedriver on a free loopback port; killed on drop.
pub struct Driver {
    child: Child,
    pub port: u16,
}

impl Driver {
    pub fn start() -> Driver {
        let port = free_port();
        let child = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect(
                "chromedriver (Debian's chromium-driver) must be installed: ./dev test installs it",
            );
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "chromedriver did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Driver { child, port }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Headless Chromium at a laptop's 1280×800.
pub async fn browser(driver: &Driver, profile: &std::path::Path) -> Client {
    let caps = json!({
        "goog:chromeOptions": {
            "binary": "/usr/bin/chromium",
            "args": [
                "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-quic", "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--window-size=1280,800",
                format!("--user-data-dir={}", profile.display()),
            ]
        }
    });
    let Value::Object(caps) = caps else {
        unreachable!()
    };
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{}", driver.port))
        .await
        .expect("starting headless Chromium")
}

/// The receiver: a tiny HTTP/1.1 server (tokio only) that records every request;
/// `POST /hooks/{name}` answers the status set for `name` (200 by default).
#[derive(Clone, Default)]
pub struct Receiver {
    pub addr: Option<SocketAddr>,
    pub got: Arc<Mutex<Vec<(String, String)>>>,
    statuses: Arc<Mutex<std::collections::HashMap<String, Arc<AtomicU16>>>>,
    delays: Arc<Mutex<std::collections::HashMap<String, u64>>>,
}

impl Receiver {
    pub async fn start() -> Receiver {
        let mut r = Receiver::default();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        r.addr = Some(listener.local_addr().unwrap());
        let me = r.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let me = me.clone();
                tokio::spawn(async move {
                    let _ = me.serve(stream).await;
                });
            }
        });
        r
    }

    async fn serve(&self, mut stream: tokio::net::TcpStream) -> std::io::Result<()> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut buf = Vec::new();
        let mut chunk = [0_u8; 8192];
        loop {
            // One request per connection at a time; keep-alive is honoured.
            let head_end = loop {
                if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    break i + 4;
                }
                let n = stream.read(&mut chunk).await?;
                if n == 0 {
                    return Ok(());
                }
                buf.extend_from_slice(&chunk[..n]);
            };
            let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
            let length: usize = head
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.trim()
                        .eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse().ok())?
                })
                .unwrap_or(0);
            while buf.len() < head_end + length {
                let n = stream.read(&mut chunk).await?;
                if n == 0 {
                    return Ok(());
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            let body = String::from_utf8_lossy(&buf[head_end..head_end + length]).to_string();
            buf.drain(..head_end + length);
            let path = head.split_whitespace().nth(1).unwrap_or("/").to_owned();
            let name = path.strip_prefix("/hooks/").unwrap_or(&path).to_owned();
            self.got.lock().unwrap().push((name.clone(), body));
            let status = self.status_of(&name).load(Ordering::SeqCst);
            let delay = self.delays.lock().unwrap().get(&name).copied().unwrap_or(0);
            if delay > 0 {
                tokio::time::sleep(Duration::from_millis(delay)).await;
            }
            let answer = format!(
                "HTTP/1.1 {status} X\r\ncontent-length: 2\r\ncontent-type: text/plain\r\n\r\nok"
            );
            stream.write_all(answer.as_bytes()).await?;
        }
    }

    fn status_of(&self, name: &str) -> Arc<AtomicU16> {
        self.statuses
            .lock()
            .unwrap()
            .entry(name.to_owned())
            .or_insert_with(|| Arc::new(AtomicU16::new(200)))
            .clone()
    }

    /// From now on, `/hooks/{name}` answers `status`.
    pub fn answer(&self, name: &str, status: u16) {
        self.status_of(name).store(status, Ordering::SeqCst);
    }

    /// From now on, `/hooks/{name}` answers only after `ms` milliseconds.
    pub fn delay(&self, name: &str, ms: u64) {
        self.delays.lock().unwrap().insert(name.to_owned(), ms);
    }

    pub fn url(&self, name: &str) -> String {
        format!("http://{}/hooks/{name}", self.addr.unwrap())
    }

    pub fn received(&self, name: &str) -> usize {
        self.got
            .lock()
            .unwrap()
            .iter()
            .filter(|(n, _)| n == name)
            .count()
    }
}

pub struct Server {
    pub addr: SocketAddr,
    pub base: String,
    pub storage: Arc<dyn TestStorage>,
    pub space: SpaceId,
    pub api_key: String,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
    _dir: tempfile::TempDir,
}

/// The real server on a fresh SQLite file, with an admin, a support user and one
/// space; destinations may reach loopback receivers, and three dead-letters in a
/// row disable a destination.
pub async fn start_server() -> Server {
    start_server_with(|_| {}).await
}

/// The `partyflow` binary cargo built beside this test (in `target/<profile>/`):
/// the server's sandbox workers are started from it.
fn partyflow_binary() -> std::path::PathBuf {
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

pub async fn start_server_with(tweak: impl FnOnce(&mut Config)) -> Server {
    start(true, tweak).await
}

/// A server on a fresh database with no console user (first run).
pub async fn start_bare_server() -> Server {
    start(false, |_| {}).await
}

async fn start(with_users: bool, tweak: impl FnOnce(&mut Config)) -> Server {
    assert!(
        site_root().join("pkg/partyflow_bg.wasm").exists(),
        "the console is not built into {}: run ./dev test",
        site_root().display()
    );
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/e2e.db", dir.path().display());
    let storage = server::storage::testing::connect(&url).await.unwrap();
    storage.migrate().await.unwrap();
    if with_users {
        server::admin::create_user(storage.as_ref(), ADMIN, PASSWORD, Role::Admin)
            .await
            .unwrap();
        server::admin::create_user(storage.as_ref(), SUPPORT, PASSWORD, Role::Support)
            .await
            .unwrap();
    }
    let created = server::admin::create_space(storage.as_ref(), "Acme", Plan::Pro)
        .await
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let mut config = Config {
        database_url: url,
        listen: addr,
        site_root: site_root(),
        allow_networks: "127.0.0.0/8,::1/128".into(),
        dispatch: DispatchConfig {
            auto_disable_after: 3,
            auto_disable_warn_at: vec![],
            idle_poll_ms: 200,
            ..Default::default()
        },
        limits: LimitsConfig {
            destination_in_flight: 1,
            ..Default::default()
        },
        sandbox: server::sandbox::Settings {
            worker_program: Some(partyflow_binary()),
            ..Default::default()
        },
        ..Default::default()
    };
    tweak(&mut config);
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(server::startup::run(
        config,
        storage.clone().into(),
        listener,
        shutdown.clone(),
    ));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while tokio::net::TcpStream::connect(addr).await.is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "the server did not start"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Server {
        addr,
        base: format!("http://{addr}"),
        storage,
        space: created.space.id,
        api_key: created.api_key,
        shutdown,
        task,
        _dir: dir,
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
        self.shutdown.cancel();
        self.task.await.unwrap().unwrap();
    }
}

/// Waits (up to `secs`) until `check` says yes; panics naming `what` otherwise.
pub async fn eventually<F, Fut>(what: &str, secs: u64, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    loop {
        if check().await {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub async fn wait_for_hydration(c: &Client) {
    c.wait()
        .at_most(Duration::from_secs(30))
        .for_element(Locator::Css("body[data-hydrated='true']"))
        .await
        .expect("the page hydrates (the wasm loaded and ran)");
}

pub async fn find(c: &Client, css: &str) -> Element {
    c.wait()
        .at_most(Duration::from_secs(15))
        .for_element(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("no element {css}: {e}"))
}

/// Waits until the element `css` has text containing `text`; returns the text.
pub async fn wait_text(c: &Client, css: &str, text: &str) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        if let Ok(e) = c.find(Locator::Css(css)).await {
            if let Ok(t) = e.text().await {
                if t.contains(text) {
                    return t;
                }
            }
        }
        if std::time::Instant::now() > deadline {
            let body = c.source().await.unwrap_or_default();
            panic!(
                "no {css} with text {text:?}; page: {}",
                &body[..body.len().min(4000)]
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub async fn screenshot(c: &Client, name: &str) {
    let png = c.screenshot().await.unwrap();
    std::fs::write(artifacts().join(format!("{name}.png")), png).unwrap();
}

/// Opens a console page and waits until it is live.
pub async fn open(c: &Client, server: &Server, path: &str) {
    c.goto(&server.url(path)).await.unwrap();
    wait_for_hydration(c).await;
}

pub async fn sign_in(c: &Client, server: &Server, email: &str) {
    open(c, server, "/login").await;
    c.find(Locator::Css("input[name=email]"))
        .await
        .unwrap()
        .send_keys(email)
        .await
        .unwrap();
    c.find(Locator::Css("input[name=password]"))
        .await
        .unwrap()
        .send_keys(PASSWORD)
        .await
        .unwrap();
    c.find(Locator::Css("button[type=submit]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    find(c, "[data-testid=signed-in-as]").await;
}

/// A reqwest client signed in to the console like a browser without JavaScript.
pub async fn http_session(server: &Server, email: &str) -> reqwest::Client {
    let client = reqwest::Client::builder()
        .cookie_store(true)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
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
    server.storage.create_channel(&channel).await.unwrap();
    let hook = IncomingWebhook {
        id: IncomingWebhookId::new(),
        space_id: server.space,
        channel_id: channel.id,
        name: name.into(),
        token_hash: server::auth::hash_token(&server::auth::new_token("pfh")),
        signing_secret: None,
        status: IncomingWebhookStatus::Active,
        consecutive_failures: 0,
        created_at: now,
        updated_at: now,
        disabled_at: None,
    };
    server.storage.create_incoming_webhook(&hook).await.unwrap();
    hook.id
}
