//! Taking the database elsewhere, as an operator does it with the real binary:
//! `partyflow backup` while a publisher runs, and `partyflow copy` from SQLite to an
//! empty PostgreSQL, after which `serve` on PostgreSQL carries on.

use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use server::testkit::{
    eventually, fresh_db, partyflow_binary, spawn_app, spawn_app_with_config, test_config, Db,
    Receiver,
};
use sqlx::Row as _;

/// Runs the real `partyflow` binary on `db_url`.
fn partyflow(db_url: &str, args: &[&str]) -> std::process::Output {
    Command::new(partyflow_binary())
        .args(args)
        .env("PARTYFLOW_DATABASE_URL", db_url)
        .env("PARTYFLOW_CONFIG", "/nonexistent/partyflow.toml")
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_taken_while_publishing_holds_every_event_answered_before_it_began() {
    let db = fresh_db(Db::Sqlite).await.unwrap();
    let app = spawn_app(&db).await.with_space().await;
    let answered: Arc<Mutex<Vec<String>>> = Arc::default();
    let stop = tokio_util::sync::CancellationToken::new();
    let publisher = {
        let (url, key) = (app.api("/events"), app.api_key.clone().unwrap());
        let (answered, stop) = (answered.clone(), stop.clone());
        tokio::spawn(async move {
            let client = reqwest::Client::new();
            let mut i = 0;
            while !stop.is_cancelled() {
                let resp = client
                    .post(&url)
                    .bearer_auth(&key)
                    .json(&json!({"type": "tick", "payload": {"i": i}}))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(resp.status(), 202);
                let body: Value = resp.json().await.unwrap();
                answered
                    .lock()
                    .unwrap()
                    .push(body["id"].as_str().unwrap().to_owned());
                i += 1;
            }
        })
    };
    eventually(10, || async {
        (answered.lock().unwrap().len() >= 50).then_some(())
    })
    .await;

    let before: Vec<String> = answered.lock().unwrap().clone();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("copies/backup.db");
    let out = tokio::task::spawn_blocking({
        let (url, path) = (db.url.clone(), path.clone());
        move || partyflow(&url, &["backup", path.to_str().unwrap()])
    })
    .await
    .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(printed["bytes"].as_u64().unwrap() > 0, "{printed}");
    // The publisher went on during the backup.
    let during = answered.lock().unwrap().len();
    tokio::time::sleep(Duration::from_millis(200)).await;
    stop.cancel();
    publisher.await.unwrap();
    assert!(
        answered.lock().unwrap().len() > during,
        "publishing went on"
    );

    let copy = sqlx::SqlitePool::connect(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    let check: String = sqlx::query_scalar("PRAGMA integrity_check")
        .fetch_one(&copy)
        .await
        .unwrap();
    assert_eq!(check, "ok");
    let ids: std::collections::HashSet<String> = sqlx::query("SELECT id FROM events")
        .fetch_all(&copy)
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let missing: Vec<_> = before.iter().filter(|id| !ids.contains(*id)).collect();
    assert!(
        missing.is_empty(),
        "{} answered events missing: {missing:?}",
        missing.len()
    );

    // A second backup to the same file is refused rather than overwriting it.
    let again = partyflow(&db.url, &["backup", path.to_str().unwrap()]);
    assert!(!again.status.success());
    assert!(
        text(&again.stderr).contains("already exists"),
        "{}",
        text(&again.stderr)
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_to_postgres_then_serve_there_sends_the_waiting_deliveries_with_their_webhook_ids() {
    let Some(pg) = fresh_db(Db::Postgres).await else {
        return;
    };
    let sqlite = fresh_db(Db::Sqlite).await.unwrap();
    let rx = Receiver::start().await;

    // On SQLite: three events delivered (attempts exist), then four waiting, with the
    // engine off, as when the server stops with work in its queue.
    let app = spawn_app(&sqlite).await.with_space().await;
    let (key, space) = (app.api_key.clone().unwrap(), app.space.clone().unwrap());
    app.destination(json!({"url": rx.url("/hook"), "description": "moved"}))
        .await;
    for i in 0..3 {
        let event = app.publish("order.paid", json!({"i": i})).await;
        app.wait_for_delivery(&event, "succeeded").await;
    }
    app.stop().await;
    let mut config = test_config(&sqlite.url);
    config.dispatch.enabled = false;
    let mut app = spawn_app_with_config(&sqlite, config).await;
    app.api_key = Some(key.clone());
    app.space = Some(space.clone());
    let mut waiting = Vec::new();
    for i in 3..7 {
        waiting.push(app.publish("order.paid", json!({"i": i})).await);
    }
    let (_, list) = app.get("/deliveries?status=pending").await;
    assert_eq!(list["data"].as_array().unwrap().len(), 4, "{list}");
    let webhook_ids: std::collections::BTreeSet<String> = list["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["webhookId"].as_str().unwrap().to_owned())
        .collect();
    app.stop().await;
    assert_eq!(rx.received().len(), 3);

    let out = partyflow(&sqlite.url, &["copy", "--to", &pg.url]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let copied: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(copied["tables"]["events"], 7, "{copied}");
    assert_eq!(copied["tables"]["deliveries"], 7, "{copied}");
    assert_eq!(copied["tables"]["attempts"], 3, "{copied}");
    assert_eq!(copied["tables"]["spaces"], 1, "{copied}");
    assert_eq!(copied["tables"]["destinations"], 1, "{copied}");
    assert!(
        copied["tables"]["api_keys"].as_i64().unwrap() >= 1,
        "{copied}"
    );

    // A second copy into the now full database is refused, and changes nothing.
    let again = partyflow(&sqlite.url, &["copy", "--to", &pg.url]);
    assert!(!again.status.success());
    assert!(
        text(&again.stderr).contains("not empty"),
        "{}",
        text(&again.stderr)
    );

    // On PostgreSQL, with the same API key: the four waiting deliveries go out, with
    // the webhook-ids they had on SQLite.
    let mut app = spawn_app(&pg).await;
    app.api_key = Some(key);
    app.space = Some(space);
    let arrived = rx.wait_for(7).await;
    let sent: std::collections::BTreeSet<String> = arrived[3..]
        .iter()
        .map(|r| r.header("webhook-id"))
        .collect();
    assert_eq!(sent, webhook_ids);
    for event in &waiting {
        let d = app.wait_for_delivery(event, "succeeded").await;
        assert_eq!(d["webhookId"], event.as_str(), "{d}");
    }
    let (status, dst) = app.get("/destinations").await;
    assert_eq!(status, 200);
    assert_eq!(dst["data"][0]["description"], "moved", "{dst}");
    app.stop().await;
}
