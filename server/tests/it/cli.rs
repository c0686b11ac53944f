//! The `partyflow` binary itself, as an operator runs it.

use std::io::Write as _;
use std::process::{Command, Stdio};

fn partyflow(db_url: &str, args: &[&str], stdin: Option<&str>) -> std::process::Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_partyflow"))
        .args(args)
        .env("PARTYFLOW_DATABASE_URL", db_url)
        .env("PARTYFLOW_CONFIG", "/nonexistent/partyflow.toml")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
    }
    drop(child.stdin.take());
    child.wait_with_output().unwrap()
}

fn sqlite_url() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/nested/pf.db", dir.path().display());
    (dir, url)
}

#[test]
fn migrate_then_space_create_prints_an_id_and_a_working_api_key() {
    let (_dir, url) = sqlite_url();
    let out = partyflow(&url, &["migrate"], None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let out = partyflow(&url, &["space", "create", "Acme", "--plan", "pro"], None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = json["id"].as_str().unwrap();
    let key = json["apiKey"].as_str().unwrap();
    assert!(id.starts_with("spc_"), "{id}");
    assert!(key.starts_with("pfk_") && key.len() > 40, "{key}");

    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let store = server::storage::testing::connect(&url).await.unwrap();
        let found = store
            .find_api_key_by_hash(&server::auth::hash_token(key))
            .await
            .unwrap();
        assert_eq!(found.space_id.to_string(), id);
        assert_eq!(
            store.get_space(found.space_id).await.unwrap().plan,
            server::domain::Plan::Pro
        );
    });
}

#[test]
fn an_unknown_plan_is_refused_with_the_valid_ones_named() {
    let (_dir, url) = sqlite_url();
    let out = partyflow(&url, &["space", "create", "Acme", "--plan", "gold"], None);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("free") && err.contains("enterprise"), "{err}");
}

#[test]
fn user_create_reads_the_password_from_stdin_and_refuses_duplicates_and_weak_passwords() {
    let (_dir, url) = sqlite_url();
    let out = partyflow(
        &url,
        &["user", "create", "admin@example.com", "--role", "admin"],
        Some("a long passphrase\n"),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["role"], "admin");
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("passphrase"),
        "the password is never printed"
    );

    let again = partyflow(
        &url,
        &["user", "create", "admin@example.com", "--role", "support"],
        Some("another long one\n"),
    );
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("already exists"));

    let weak = partyflow(
        &url,
        &["user", "create", "s@example.com", "--role", "support"],
        Some("short\n"),
    );
    assert!(!weak.status.success());
    assert!(String::from_utf8_lossy(&weak.stderr).contains("at least 10"));
}

#[test]
fn bootstrap_creates_the_first_admin_once() {
    let (_dir, url) = sqlite_url();
    let first = partyflow(&url, &["user", "bootstrap"], None);
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&first.stdout).unwrap();
    assert_eq!(json["email"], "admin@partyflow.local");
    let password = json["password"].as_str().unwrap();
    assert!(password.len() >= 20);
    let second = partyflow(&url, &["user", "bootstrap"], None);
    assert!(second.status.success());
    assert!(
        second.stdout.is_empty(),
        "a database with users gets no second admin"
    );
}

#[test]
fn serve_stops_cleanly_on_sigterm() {
    let (_dir, url) = sqlite_url();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_partyflow"))
        .arg("serve")
        .env("PARTYFLOW_DATABASE_URL", &url)
        .env("PARTYFLOW_LISTEN", format!("127.0.0.1:{port}"))
        // A free port, not the default 9464 other test processes may hold.
        .env("PARTYFLOW_METRICS_LISTEN", "127.0.0.1:0")
        .env("PARTYFLOW_CONFIG", "/nonexistent/partyflow.toml")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "server did not start");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let exit = child.wait().unwrap();
    assert!(exit.success(), "exit after SIGTERM: {exit:?}");
}
