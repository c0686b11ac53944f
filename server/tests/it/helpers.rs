//! `spawn_app()` and friends: a fresh database per test, the real router on port 0.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use server::config::Config;
use server::storage::{self, Storage};
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
    pub storage: Arc<dyn Storage>,
    _dir: Option<tempfile::TempDir>,
}

/// A fresh database of the given kind, or `None` when PostgreSQL is not available
/// (the test command always provides one; running `cargo test` alone may not).
pub async fn fresh_db(db: Db) -> Option<TestDb> {
    let (url, dir) = match db {
        Db::Sqlite => {
            let dir = tempfile::tempdir().unwrap();
            (format!("sqlite://{}/test.db", dir.path().display()), Some(dir))
        }
        Db::Postgres => {
            let Ok(admin_url) = std::env::var("PARTYFLOW_TEST_POSTGRES_URL") else {
                eprintln!("PARTYFLOW_TEST_POSTGRES_URL is not set: PostgreSQL half SKIPPED (./dev test sets it)");
                return None;
            };
            let name = format!("t_{}", ulid::Ulid::new().to_string().to_lowercase());
            let admin = sqlx::PgPool::connect(&admin_url).await.expect("connecting to the test PostgreSQL");
            sqlx::query(&format!("CREATE DATABASE {name}")).execute(&admin).await.unwrap();
            admin.close().await;
            let base = admin_url.rsplit_once('/').unwrap().0;
            (format!("{base}/{name}"), None)
        }
    };
    let storage = storage::connect(&url).await.unwrap();
    storage.migrate().await.unwrap();
    Some(TestDb { url, storage, _dir: dir })
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
    pub storage: Arc<dyn Storage>,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl TestApp {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// Stops the server and waits for it to finish.
    pub async fn stop(self) {
        self.shutdown.cancel();
        self.task.await.unwrap().unwrap();
    }
}

pub fn test_config(db_url: &str) -> Config {
    Config {
        database_url: db_url.to_owned(),
        listen: "127.0.0.1:0".parse().unwrap(),
        site_root: std::env::var("PARTYFLOW_TEST_SITE_ROOT")
            .map(Into::into)
            .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../site").into()),
        ..Config::default()
    }
}

/// Starts the real server on `db`.
pub async fn spawn_app(db: &TestDb) -> TestApp {
    spawn_app_with(db.url.clone(), db.storage.clone()).await
}

pub async fn spawn_app_with(db_url: String, storage: Arc<dyn Storage>) -> TestApp {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(server::startup::run(
        test_config(&db_url),
        storage.clone(),
        listener,
        shutdown.clone(),
    ));
    wait_until_serving(addr).await;
    TestApp { addr, db_url, storage, shutdown, task }
}

/// Waits until the server at `addr` answers `/healthz`, so a test never races its start-up.
pub async fn wait_until_serving(addr: SocketAddr) {
    let client = reqwest::Client::new();
    eventually(30, || {
        let client = client.clone();
        async move {
            let resp = client.get(format!("http://{addr}/healthz")).send().await.ok()?;
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
        assert!(tokio::time::Instant::now() < deadline, "condition not met within {secs}s");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
