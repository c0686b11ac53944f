//! chromedriver on a free loopback port driving Debian's headless Chromium (no
//! browser is downloaded), and the screenshots the tests leave in `artifacts/`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder};
use serde_json::{json, Value};

/// Where the screenshots go: `end2end/artifacts/`.
pub fn artifacts() -> PathBuf {
    let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/artifacts"));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Saves a screenshot of the page as `artifacts/{name}.png`.
pub async fn screenshot(c: &Client, name: &str) {
    let png = c.screenshot().await.unwrap();
    std::fs::write(artifacts().join(format!("{name}.png")), png).unwrap();
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
pub async fn browser(driver: &Driver, profile: &Path) -> Client {
    session(driver, chromium_args(profile, true)).await
}

/// Headless Chromium with JavaScript switched off: the console as plain HTML forms.
pub async fn browser_without_javascript(driver: &Driver, profile: &Path) -> Client {
    session(driver, chromium_args(profile, false)).await
}

/// Chromium's command line: headless, quiet, 1280×800, its profile in `profile`.
fn chromium_args(profile: &Path, javascript: bool) -> Vec<String> {
    let mut args: Vec<String> = [
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1280,800",
    ]
    .map(String::from)
    .into();
    if !javascript {
        args.push("--blink-settings=scriptEnabled=false".into());
    }
    args.push(format!("--user-data-dir={}", profile.display()));
    args
}

async fn session(driver: &Driver, args: Vec<String>) -> Client {
    let caps = json!({
        "goog:chromeOptions": { "binary": "/usr/bin/chromium", "args": args }
    });
    let Value::Object(caps) = caps else {
        unreachable!()
    };
    // chromedriver speaks plain HTTP on loopback: no TLS stack needed.
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{}", driver.port))
        .await
        .expect("starting headless Chromium")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn javascript_is_switched_off_only_when_asked() {
        let profile = Path::new("/tmp/p");
        let on = chromium_args(profile, true);
        let off = chromium_args(profile, false);
        assert!(!on.iter().any(|a| a.contains("scriptEnabled")));
        assert!(off.contains(&"--blink-settings=scriptEnabled=false".to_owned()));
        assert_eq!(on.last().unwrap(), "--user-data-dir=/tmp/p");
        assert_eq!(off.last().unwrap(), "--user-data-dir=/tmp/p");
    }
}
