//! `spawn_app()` and friends: a fresh database per test, the real router on port 0.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use server::config::Config;
use server::storage::{self, TestStorage};
use tokio_util::sync::CancellationToken;

/// Which database a test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Db {
    Sqlite,
    Postgres,
}

/// A fresh, migrated database; the guard keeps its files alive.
pub struct TestDb {
    pub url: String,
    pub storage: Arc<dyn TestStorage>,
    pub _dir: Option<tempfile::TempDir>,
}

/// A fresh database of the given kind, or `None` when PostgreSQL is not available
/// (the test command always provides one; running `cargo test` alone may not).
pub async fn fresh_db(db: Db) -> Option<TestDb> {
    let (url, dir) = match db {
        Db::Sqlite => {
            let dir = tempfile::tempdir().unwrap();
            (
                format!("sqlite://{}/test.db", dir.path().display()),
                Some(dir),
            )
        }
        Db::Postgres => {
            let Ok(admin_url) = std::env::var("PARTYFLOW_TEST_POSTGRES_URL") else {
                eprintln!("PARTYFLOW_TEST_POSTGRES_URL is not set: PostgreSQL half SKIPPED (./dev test sets it)");
                return None;
            };
            let name = format!("t_{}", ulid::Ulid::new().to_string().to_lowercase());
            let admin = sqlx::PgPool::connect(&admin_url)
                .await
                .expect("connecting to the test PostgreSQL");
            sqlx::query(&format!("CREATE DATABASE {name}"))
                .execute(&admin)
                .await
                .unwrap();
            admin.close().await;
            let base = admin_url.rsplit_once('/').unwrap().0;
            (format!("{base}/{name}"), None)
        }
    };
    let storage = storage::testing::connect(&url).await.unwrap();
    storage.migrate().await.unwrap();
    Some(TestDb {
        url,
        storage,
        _dir: dir,
    })
}

/// Declares one test per backend from one async body taking a [`TestDb`].
#[macro_export]
macro_rules! on_both_backends {
    ($(#[$meta:meta])* async fn $name:ident($db:ident) $body:block) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            async fn body($db: $crate::helpers::TestDb) $body

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                body($crate::helpers::fresh_db($crate::helpers::Db::Sqlite).await.unwrap()).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                if let Some(db) = $crate::helpers::fresh_db($crate::helpers::Db::Postgres).await {
                    body(db).await
                }
            }
        }
    };
}

/// A server running in this process on a free port, with its own shutdown switch.
#[allow(dead_code)]
pub struct TestApp {
    pub addr: SocketAddr,
    pub db_url: String,
    pub storage: Arc<dyn TestStorage>,
    /// Set by [`TestApp::with_space`].
    pub api_key: Option<String>,
    pub space: Option<String>,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl TestApp {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// Creates a space with an API key for the API helpers below.
    pub async fn with_space(mut self) -> Self {
        let created = server::admin::create_space(
            self.storage.as_ref(),
            "Test space",
            server::domain::Plan::Enterprise,
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

pub fn test_config(db_url: &str) -> Config {
    let dispatch = server::config::DispatchConfig {
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
        site_root: std::env::var("PARTYFLOW_TEST_SITE_ROOT")
            .map(Into::into)
            .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../site").into()),
        sandbox: sandbox_settings(),
        ..Config::default()
    }
}

/// The sandbox of a test server: workers are the real `partyflow` binary (the
/// test binary itself cannot be started as one).
pub fn sandbox_settings() -> server::sandbox::Settings {
    server::sandbox::Settings {
        worker_program: Some(env!("CARGO_BIN_EXE_partyflow").into()),
        ..Default::default()
    }
}

/// Starts the real server on `db`.
pub async fn spawn_app(db: &TestDb) -> TestApp {
    spawn_app_with_config(db, test_config(&db.url)).await
}

/// Starts the real server on `db` with a changed configuration.
pub async fn spawn_app_with_config(db: &TestDb, config: Config) -> TestApp {
    let (db_url, storage) = (db.url.clone(), db.storage.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(server::startup::run(
        config,
        storage.clone().into(),
        listener,
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

/// Runs `f` until it returns `Some`, for up to `secs` seconds.
pub async fn eventually<T, F, Fut>(secs: u64, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "condition not met within {secs}s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// What a [`Receiver`] answers to one request.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
    pub delay: std::time::Duration,
}

impl Reply {
    pub fn status(status: u16) -> Self {
        Reply {
            status,
            headers: Vec::new(),
            body: String::new(),
            delay: std::time::Duration::ZERO,
        }
    }
    pub fn header(mut self, k: &str, v: &str) -> Self {
        self.headers.push((k.into(), v.into()));
        self
    }
    pub fn body(mut self, b: &str) -> Self {
        self.body = b.into();
        self
    }
    pub fn after(mut self, delay: std::time::Duration) -> Self {
        self.delay = delay;
        self
    }
}

/// One request a [`Receiver`] got.
#[derive(Debug, Clone)]
pub struct Received {
    pub path: String,
    pub headers: axum::http::HeaderMap,
    pub body: String,
    pub at: std::time::Instant,
}

impl Received {
    pub fn header(&self, name: &str) -> String {
        self.headers
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default()
    }
}

/// A real HTTP receiver on loopback: records every request and answers from a
/// script (then with the default reply).
#[derive(Clone)]
pub struct Receiver {
    pub addr: SocketAddr,
    /// Requests being answered right now, and the most there ever were at once.
    in_flight: Arc<std::sync::atomic::AtomicUsize>,
    max_in_flight: Arc<std::sync::atomic::AtomicUsize>,
    /// `webhook-id`s being answered right now, to catch a delivery in flight twice.
    open_ids: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
    overlaps: Arc<std::sync::atomic::AtomicUsize>,
    got: Arc<std::sync::Mutex<Vec<Received>>>,
    script: Arc<std::sync::Mutex<std::collections::VecDeque<Reply>>>,
    default: Arc<std::sync::Mutex<Reply>>,
}

impl Receiver {
    pub async fn start() -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let r = Receiver {
            addr: listener.local_addr().unwrap(),
            in_flight: Default::default(),
            max_in_flight: Default::default(),
            open_ids: Default::default(),
            overlaps: Default::default(),
            got: Default::default(),
            script: Default::default(),
            default: Arc::new(std::sync::Mutex::new(Reply::status(200).body("ok"))),
        };
        let me = r.clone();
        let app = axum::Router::new().fallback(move |req: axum::extract::Request| {
            let me = me.clone();
            async move {
                use std::sync::atomic::Ordering::SeqCst;
                let now_in = me.in_flight.fetch_add(1, SeqCst) + 1;
                me.max_in_flight.fetch_max(now_in, SeqCst);
                let (parts, body) = req.into_parts();
                let webhook_id = parts
                    .headers
                    .get("webhook-id")
                    .map(|v| v.to_str().unwrap_or("").to_owned());
                if let Some(id) = &webhook_id {
                    if !me.open_ids.lock().unwrap().insert(id.clone()) {
                        me.overlaps.fetch_add(1, SeqCst);
                    }
                }
                let body = axum::body::to_bytes(body, usize::MAX).await.unwrap();
                me.got.lock().unwrap().push(Received {
                    path: parts.uri.path().to_owned(),
                    headers: parts.headers,
                    body: String::from_utf8_lossy(&body).into_owned(),
                    at: std::time::Instant::now(),
                });
                let reply = me
                    .script
                    .lock()
                    .unwrap()
                    .pop_front()
                    .unwrap_or_else(|| me.default.lock().unwrap().clone());
                tokio::time::sleep(reply.delay).await;
                if let Some(id) = &webhook_id {
                    me.open_ids.lock().unwrap().remove(id);
                }
                me.in_flight.fetch_sub(1, SeqCst);
                let mut resp = axum::response::Response::new(axum::body::Body::from(reply.body));
                *resp.status_mut() = axum::http::StatusCode::from_u16(reply.status).unwrap();
                for (k, v) in reply.headers {
                    resp.headers_mut().insert(
                        axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                        axum::http::HeaderValue::from_str(&v).unwrap(),
                    );
                }
                resp
            }
        });
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        r
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// Answers the next requests with these replies, in order.
    pub fn script(&self, replies: impl IntoIterator<Item = Reply>) {
        self.script.lock().unwrap().extend(replies);
    }

    pub fn set_default(&self, reply: Reply) {
        *self.default.lock().unwrap() = reply;
    }

    /// The most requests this receiver was answering at once.
    pub fn max_in_flight(&self) -> usize {
        self.max_in_flight.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// How often a `webhook-id` arrived while the same one was still being answered.
    pub fn overlaps(&self) -> usize {
        self.overlaps.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub fn received(&self) -> Vec<Received> {
        self.got.lock().unwrap().clone()
    }

    /// Waits until at least `n` requests arrived.
    pub async fn wait_for(&self, n: usize) -> Vec<Received> {
        eventually(30, || async {
            let got = self.received();
            (got.len() >= n).then_some(got)
        })
        .await
    }
}

/// Makes the real database refuse every `INSERT` into `table` with a constraint error
/// naming `constraint`, until [`allow_inserts`]: a failure of ours, for tests of what
/// the server answers and keeps when its own write fails. (SQLite: a trigger that
/// raises; PostgreSQL: a trigger that raises `check_violation`.)
pub async fn refuse_inserts(db_url: &str, table: &str, constraint: &str) {
    let trigger = format!("pf_test_refuse_{table}");
    if db_url.starts_with("sqlite") {
        run_sql(
            db_url,
            &[format!(
                "CREATE TRIGGER {trigger} BEFORE INSERT ON {table} \
             BEGIN SELECT RAISE(ABORT, 'CHECK constraint failed: {constraint}'); END"
            )],
        )
        .await;
    } else {
        run_sql(db_url, &[
            format!(
                "CREATE FUNCTION {trigger}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
                 RAISE EXCEPTION USING ERRCODE = 'check_violation', CONSTRAINT = '{constraint}', \
                 MESSAGE = 'new row for relation \"{table}\" violates check constraint \"{constraint}\"'; \
                 END $$"
            ),
            format!(
                "CREATE TRIGGER {trigger} BEFORE INSERT ON {table} FOR EACH ROW EXECUTE FUNCTION {trigger}()"
            ),
        ])
        .await;
    }
}

/// Undoes [`refuse_inserts`].
pub async fn allow_inserts(db_url: &str, table: &str) {
    let trigger = format!("pf_test_refuse_{table}");
    if db_url.starts_with("sqlite") {
        run_sql(db_url, &[format!("DROP TRIGGER {trigger}")]).await;
    } else {
        run_sql(
            db_url,
            &[
                format!("DROP TRIGGER {trigger} ON {table}"),
                format!("DROP FUNCTION {trigger}()"),
            ],
        )
        .await;
    }
}

/// Runs `statements` on the database at `db_url`, on a connection of its own.
async fn run_sql(db_url: &str, statements: &[String]) {
    if db_url.starts_with("sqlite") {
        let pool = sqlx::SqlitePool::connect(db_url).await.unwrap();
        for sql in statements {
            sqlx::query(sql).execute(&pool).await.unwrap();
        }
        pool.close().await;
    } else {
        let pool = sqlx::PgPool::connect(db_url).await.unwrap();
        for sql in statements {
            sqlx::query(sql).execute(&pool).await.unwrap();
        }
        pool.close().await;
    }
}
