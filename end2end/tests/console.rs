//! The console in a real headless Chromium (Debian's, driven by chromedriver;
//! no browser is downloaded), against the real server on a real database.
//! `./dev test` builds the console's wasm into `site/pkg` first.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::json;
use server::domain::Role;
use tokio_util::sync::CancellationToken;

const PASSWORD: &str = "correct horse battery";

fn site_root() -> PathBuf {
    std::env::var("PARTYFLOW_TEST_SITE_ROOT")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../site")))
}

fn artifacts() -> PathBuf {
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
struct Driver {
    child: Child,
    port: u16,
}

impl Driver {
    fn start() -> Driver {
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

async fn browser(driver: &Driver, profile: &std::path::Path) -> Client {
    let caps = json!({
        "goog:chromeOptions": {
            "binary": "/usr/bin/chromium",
            "args": [
                "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-quic", "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--window-size=1280,900",
                format!("--user-data-dir={}", profile.display()),
            ]
        }
    });
    let serde_json::Value::Object(caps) = caps else {
        unreachable!()
    };
    // chromedriver speaks plain HTTP on loopback: no TLS stack needed.
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{}", driver.port))
        .await
        .expect("starting headless Chromium")
}

struct Server {
    addr: SocketAddr,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
    _dir: tempfile::TempDir,
}

async fn start_server() -> Server {
    assert!(
        site_root().join("pkg/partyflow_bg.wasm").exists(),
        "the console is not built into {}: run ./dev test",
        site_root().display()
    );
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/e2e.db", dir.path().display());
    let storage = server::storage::testing::connect(&url).await.unwrap();
    storage.migrate().await.unwrap();
    server::admin::create_user(storage.as_ref(), "admin@example.com", PASSWORD, Role::Admin)
        .await
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let config = server::config::Config {
        database_url: url,
        listen: addr,
        site_root: site_root(),
        ..Default::default()
    };
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(server::startup::run(
        config,
        storage.into(),
        listener,
        shutdown.clone(),
    ));
    Server {
        addr,
        shutdown,
        task,
        _dir: dir,
    }
}

async fn wait_for_hydration(c: &Client) {
    c.wait()
        .at_most(Duration::from_secs(20))
        .for_element(Locator::Css("body[data-hydrated='true']"))
        .await
        .expect("the page hydrates (the wasm loaded and ran)");
}

async fn screenshot(c: &Client, name: &str) {
    let png = c.screenshot().await.unwrap();
    std::fs::write(artifacts().join(format!("{name}.png")), png).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_signs_in_through_the_hydrated_login_page() {
    let server = start_server().await;
    let driver = Driver::start();
    let profile = tempfile::tempdir().unwrap();
    let c = browser(&driver, profile.path()).await;
    let base = format!("http://{}", server.addr);

    // A console page sends a stranger to the sign-in page.
    c.goto(&format!("{base}/")).await.unwrap();
    let url = c.current_url().await.unwrap();
    assert_eq!(url.path(), "/login");
    wait_for_hydration(&c).await;
    screenshot(&c, "login").await;

    // A wrong password is refused with a readable message.
    c.find(Locator::Css("input[name=email]"))
        .await
        .unwrap()
        .send_keys("admin@example.com")
        .await
        .unwrap();
    c.find(Locator::Css("input[name=password]"))
        .await
        .unwrap()
        .send_keys("not the password")
        .await
        .unwrap();
    c.find(Locator::Css("button[type=submit]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let alert = c
        .wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Css("[role=alert]"))
        .await
        .unwrap();
    assert_eq!(alert.text().await.unwrap(), "Wrong email or password.");
    screenshot(&c, "login-refused").await;

    // Mark this page: a full reload would lose the mark, client-side navigation keeps it.
    c.execute("window.__noReload = true; return null;", vec![])
        .await
        .unwrap();
    let email = c.find(Locator::Css("input[name=email]")).await.unwrap();
    email.clear().await.unwrap();
    email.send_keys("admin@example.com").await.unwrap();
    let password = c.find(Locator::Css("input[name=password]")).await.unwrap();
    password.clear().await.unwrap();
    password.send_keys(PASSWORD).await.unwrap();
    c.find(Locator::Css("button[type=submit]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();

    let who = c
        .wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Css("[data-testid=signed-in-as]"))
        .await
        .expect("the signed-in home page shows who is signed in");
    assert_eq!(who.text().await.unwrap(), "admin@example.com · admin");
    assert_eq!(c.current_url().await.unwrap().path(), "/");
    let kept = c
        .execute("return window.__noReload === true;", vec![])
        .await
        .unwrap();
    assert_eq!(
        kept,
        json!(true),
        "signing in did not reload the page: the hydrated app handled it"
    );
    screenshot(&c, "home").await;

    // The session is real: a fresh load of a console page stays signed in.
    c.goto(&format!("{base}/")).await.unwrap();
    assert_eq!(c.current_url().await.unwrap().path(), "/");

    c.close().await.unwrap();
    server.shutdown.cancel();
    server.task.await.unwrap().unwrap();
}
