//! Retention (docs D10): the purge task of a real server, with retentions of seconds
//! and a one-second interval. Finished deliveries, their attempts and their events go;
//! waiting deliveries (a retry due in ten minutes, a `deliverAt` tomorrow) and their
//! events stay; a space's own retention (set in the REST API or the console) wins over
//! its plan's; idempotency keys, idle rate-limit rows, expired sessions and old read
//! notifications go too. On SQLite a new file is `auto_vacuum = INCREMENTAL` and
//! `partyflow vacuum` converts an old one.

use serde_json::{json, Value};
use server::config::{Config, RetentionConfig};
use server::domain::{Plan, Retention};
use server::storage::RawPool;
use server::testkit::{
    spawn_app_with_config, test_config, wait_until, Receiver, Reply, TestApp, TestDb,
};

use crate::console::{call, session, user};
use crate::on_both_backends;

/// Every plan keeps `plans`; the purge runs every second.
fn config(db: &TestDb, plans: &str) -> Config {
    let plans: Retention = plans.parse().unwrap();
    Config {
        retention: RetentionConfig {
            free: plans,
            pro: plans,
            enterprise: plans,
            interval: "1s".parse().unwrap(),
            ..RetentionConfig::default()
        },
        ..test_config(&db.url)
    }
}

/// The first column of every row `sql` reads, as text.
async fn texts(db: &TestDb, sql: &str) -> Vec<String> {
    match db.storage.raw_pool() {
        RawPool::Sqlite(pool) => sqlx::query_scalar(sql).fetch_all(&pool).await.unwrap(),
        RawPool::Postgres(pool) => sqlx::query_scalar(sql).fetch_all(&pool).await.unwrap(),
    }
}

async fn count(db: &TestDb, sql: &str) -> i64 {
    match db.storage.raw_pool() {
        RawPool::Sqlite(pool) => sqlx::query_scalar(sql).fetch_one(&pool).await.unwrap(),
        RawPool::Postgres(pool) => sqlx::query_scalar(sql).fetch_one(&pool).await.unwrap(),
    }
}

async fn exec(db: &TestDb, sql: &str) {
    match db.storage.raw_pool() {
        RawPool::Sqlite(pool) => {
            sqlx::query(sql).execute(&pool).await.unwrap();
        }
        RawPool::Postgres(pool) => {
            sqlx::query(sql).execute(&pool).await.unwrap();
        }
    }
}

/// Publishes an event and returns its ID.
async fn publish(app: &TestApp, body: Value) -> String {
    let (status, answer) = app.post("/events", body).await;
    assert_eq!(status, 202, "{answer}");
    answer["id"].as_str().unwrap().to_owned()
}

/// The statuses of the event's deliveries.
async fn statuses(db: &TestDb, event: &str) -> Vec<String> {
    texts(
        db,
        &format!("SELECT status FROM deliveries WHERE event_id = '{event}'"),
    )
    .await
}

async fn event_exists(db: &TestDb, event: &str) -> bool {
    count(
        db,
        &format!("SELECT COUNT(*) FROM events WHERE id = '{event}'"),
    )
    .await
        == 1
}

on_both_backends! {
    async fn finished_deliveries_attempts_and_events_go_and_waiting_ones_stay(db) {
        let app = spawn_app_with_config(&db, config(&db, "2s")).await.with_space().await;
        let rx = Receiver::start().await;
        rx.reply_at("/busy", Reply::status(503));
        app.destination(json!({"url": rx.url("/ok"), "eventTypes": ["done"]})).await;
        app.destination(json!({
            "url": rx.url("/busy"), "eventTypes": ["slow"],
            "retryPolicy": {"preset": "partyflow", "initialMs": 600000, "maxMs": 600000},
        }))
        .await;

        // Waiting ones first, so they are the oldest.
        let retrying = publish(&app, json!({"type": "slow", "payload": {}})).await;
        let tomorrow = server::clock::rfc3339(server::clock::now_ms() + 86_400_000);
        let scheduled =
            publish(&app, json!({"type": "done", "payload": {}, "deliverAt": tomorrow})).await;
        wait_until("the 503 makes it retry", 30, || async {
            statuses(&db, &retrying).await == ["retrying"]
        })
        .await;
        let done = publish(&app, json!({"type": "done", "payload": {"n": 1}})).await;
        let delivery = texts(&db, &format!("SELECT id FROM deliveries WHERE event_id = '{done}'"))
            .await
            .remove(0);
        wait_until("it is delivered", 30, || async {
            statuses(&db, &done).await == ["succeeded"]
        })
        .await;
        assert_eq!(
            count(&db, &format!("SELECT COUNT(*) FROM attempts WHERE delivery_id = '{delivery}'")).await,
            1
        );

        wait_until("the finished delivery, its attempt and its event are purged", 30, || async {
            !event_exists(&db, &done).await
        })
        .await;
        assert_eq!(statuses(&db, &done).await, Vec::<String>::new());
        assert_eq!(
            count(&db, &format!("SELECT COUNT(*) FROM attempts WHERE delivery_id = '{delivery}'")).await,
            0
        );
        let (status, _) = app.get(&format!("/deliveries/{delivery}")).await;
        assert_eq!(status, 404);
        let (status, _) = app.get(&format!("/events/{done}")).await;
        assert_eq!(status, 404);

        // Older than the retention, and still there two purges later.
        tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
        assert_eq!(statuses(&db, &retrying).await, ["retrying"]);
        assert_eq!(statuses(&db, &scheduled).await, ["pending"]);
        assert!(event_exists(&db, &retrying).await);
        assert!(event_exists(&db, &scheduled).await);
        let (status, _) = app.get(&format!("/events/{retrying}")).await;
        assert_eq!(status, 200);
        app.stop().await;
    }
}

on_both_backends! {
    async fn a_spaces_own_retention_wins_over_its_plans_in_the_api_and_the_console(db) {
        user(&db, "admin@example.com", server::domain::Role::Admin).await;
        let app = spawn_app_with_config(&db, config(&db, "1d")).await.with_space().await;
        let rx = Receiver::start().await;
        app.destination(json!({"url": rx.url("/")})).await;
        let client = reqwest::Client::new();
        let key = app.api_key.clone().unwrap();
        let project = app.api("");

        let (status, body) = app.get("").await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["retention"], Value::Null);
        assert_eq!(body["effectiveRetention"], "1day");
        assert_eq!(body["plan"], "enterprise");

        // A bad duration is refused by name; nothing changes.
        for bad in [json!("forever"), json!(""), json!("0s"), json!(30)] {
            let resp = client.patch(&project).bearer_auth(&key).json(&json!({"retention": bad}))
                .send().await.unwrap();
            assert_eq!(resp.status(), 422, "{bad}");
            let body: Value = resp.json().await.unwrap();
            assert!(["invalid_retention", "invalid_body"].contains(&body["code"].as_str().unwrap()), "{body}");
        }
        let resp = client.patch(&project).bearer_auth(&key).json(&json!({"retention": "forever"}))
            .send().await.unwrap();
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["code"], "invalid_retention");
        assert!(body["message"].as_str().unwrap().contains("forever"), "{body}");

        // A second space keeps its plan's day; this one is set to two seconds.
        let other = server::ops::tenants::create_space(db.storage.as_ref(), "Other", Plan::Pro)
            .await
            .unwrap();
        let other_id = other.space.id.to_string();
        let resp = client.post(app.url(&format!("/v1/projects/{other_id}/destinations")))
            .bearer_auth(&other.api_key).json(&json!({"url": rx.url("/other")})).send().await.unwrap();
        assert_eq!(resp.status(), 201);
        let resp = client.patch(&project).bearer_auth(&key).json(&json!({"retention": "2s"}))
            .send().await.unwrap();
        assert_eq!(resp.status(), 200);
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["retention"], "2s");
        assert_eq!(body["effectiveRetention"], "2s");

        let mine = publish(&app, json!({"type": "a", "payload": {}})).await;
        let resp = client.post(app.url(&format!("/v1/projects/{other_id}/events")))
            .bearer_auth(&other.api_key).json(&json!({"type": "a", "payload": {}})).send().await.unwrap();
        assert_eq!(resp.status(), 202);
        let theirs = resp.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned();
        wait_until("both are delivered", 30, || async {
            statuses(&db, &theirs).await == ["succeeded"] && !statuses(&db, &mine).await.contains(&"pending".to_owned())
        })
        .await;
        wait_until("this space's event is purged after its own two seconds", 30, || async {
            !event_exists(&db, &mine).await
        })
        .await;
        assert_eq!(statuses(&db, &theirs).await, ["succeeded"], "the other space keeps its plan's day");

        // The console sets the other space's own retention; an admin's change.
        let base = app.url("");
        let admin = session(&base, "admin@example.com").await;
        let (status, body) = call(&admin, &base, "set_space_retention", &[("space", &other_id), ("retention", "soon")]).await;
        assert!(status >= 400 && body.contains("Retention: \\\"soon\\\" is not a duration"), "{status} {body}");
        let (status, body) = call(&admin, &base, "set_space_retention", &[("space", &other_id), ("retention", "1s")]).await;
        assert_eq!(status, 200, "{body}");
        wait_until("the other space's event is purged after its own second", 30, || async {
            !event_exists(&db, &theirs).await
        })
        .await;
        let space = db.storage.get_space(other.space.id).await.unwrap();
        assert_eq!(space.retention, Some("1s".parse().unwrap()));

        // `null` (API) goes back to the plan's.
        let resp = client.patch(&project).bearer_auth(&key).json(&json!({"retention": null}))
            .send().await.unwrap();
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["retention"], Value::Null, "{body}");
        assert_eq!(body["effectiveRetention"], "1day");
        app.stop().await;
    }
}

on_both_backends! {
    async fn support_staff_cannot_set_a_spaces_retention(db) {
        user(&db, "support@example.com", server::domain::Role::Support).await;
        let app = spawn_app_with_config(&db, config(&db, "1d")).await.with_space().await;
        let base = app.url("");
        let support = session(&base, "support@example.com").await;
        let space = app.space.clone().unwrap();
        let (status, body) = call(&support, &base, "set_space_retention", &[("space", &space), ("retention", "1s")]).await;
        assert!(status >= 400 && body.contains("Forbidden"), "{status} {body}");
        let (_, body) = app.get("").await;
        assert_eq!(body["retention"], Value::Null);
        app.stop().await;
    }
}

on_both_backends! {
    async fn idempotency_keys_idle_rate_rows_expired_sessions_and_old_read_notifications_go(db) {
        let admin = user(&db, "admin@example.com", server::domain::Role::Admin).await;
        let app = spawn_app_with_config(&db, config(&db, "2s")).await.with_space().await;
        let space = app.space.clone().unwrap();
        let now = server::clock::now_ms();
        let hour = 3_600_000;
        exec(&db, &format!(
            "INSERT INTO idempotency_keys (space_id, key, request_hash, event_id, deliveries, created_at) \
             VALUES ('{space}', 'old', 'h', 'evt_x', 0, {}), ('{space}', 'new', 'h', 'evt_y', 0, {now})",
            now - 25 * hour
        )).await;
        exec(&db, &format!(
            "INSERT INTO rate_keys (key, touched_at) VALUES ('dst:gone', {}), ('dst:live', {now})",
            now - 3 * hour
        )).await;
        exec(&db, &format!(
            "INSERT INTO rate_events (key, at) VALUES ('dst:gone', {0}), ('dst:gone', {0}), ('dst:live', {now})",
            now - 3 * hour
        )).await;
        exec(&db, &format!(
            "INSERT INTO console_sessions (session_id, user_id, expires_at) \
             VALUES ('expired', '{0}', {1}), ('live', '{0}', {2})",
            admin.id, now - 1000, now + hour
        )).await;
        let expired_session = if db.url.starts_with("sqlite") {
            // tower-sessions writes its expiry as a date-time text.
            "INSERT INTO tower_sessions (id, data, expiry_date) VALUES ('expired', x'00', '2000-01-01 00:00:00')".to_owned()
        } else {
            "INSERT INTO tower_sessions.session (id, data, expiry_date) \
             VALUES ('expired', '\\x00', now() - interval '1 minute')".to_owned()
        };
        exec(&db, &expired_session).await;
        let tower_sessions = if db.url.starts_with("sqlite") {
            "SELECT COUNT(*) FROM tower_sessions WHERE id = 'expired'"
        } else {
            "SELECT COUNT(*) FROM tower_sessions.session WHERE id = 'expired'"
        };
        // Notifications: read and old (goes), unread and old, read and new (stay).
        let old = now - 60_000;
        let ntf = |at: i64| format!("ntf_{}", ulid::Ulid::from_parts(at as u64, rand_bits()).to_string().to_lowercase());
        let (read_old, unread_old, read_new) = (ntf(old), ntf(old), ntf(now + hour));
        exec(&db, &format!(
            "INSERT INTO notifications (id, space_id, kind, message, created_at, read_at) VALUES \
             ('{read_old}', '{space}', 'test', 'm', {old}, {now}), \
             ('{unread_old}', '{space}', 'test', 'm', {old}, NULL), \
             ('{read_new}', '{space}', 'test', 'm', {now}, {now})"
        )).await;

        // Alert e-mails: given up and old (goes), still waiting, given up and new (stay).
        exec(&db, &format!(
            "INSERT INTO alert_outbox (id, notification_id, space_id, address, subject, body, \
               attempts, next_attempt_at, last_error, created_at) VALUES \
             ('alo_gone', '{read_old}', '{space}', 'a@example.com', 's', 'b', 8, NULL, 'refused', {old}), \
             ('alo_waiting', '{read_old}', '{space}', 'b@example.com', 's', 'b', 1, {now}, 'busy', {old}), \
             ('alo_new', '{read_new}', '{space}', 'a@example.com', 's', 'b', 8, NULL, 'refused', {})",
            now + hour
        )).await;

        wait_until("the old rows are purged", 30, || async {
            count(&db, "SELECT COUNT(*) FROM idempotency_keys").await == 1
                && count(&db, "SELECT COUNT(*) FROM rate_keys WHERE key = 'dst:gone'").await == 0
                && count(&db, "SELECT COUNT(*) FROM console_sessions WHERE session_id = 'expired'").await == 0
                && count(&db, tower_sessions).await == 0
                && count(&db, &format!("SELECT COUNT(*) FROM notifications WHERE id = '{read_old}'")).await == 0
                && count(&db, "SELECT COUNT(*) FROM alert_outbox WHERE id = 'alo_gone'").await == 0
        })
        .await;
        assert_eq!(texts(&db, "SELECT key FROM idempotency_keys").await, ["new"]);
        assert_eq!(count(&db, "SELECT COUNT(*) FROM rate_events WHERE key = 'dst:gone'").await, 0);
        assert_eq!(count(&db, "SELECT COUNT(*) FROM rate_events WHERE key = 'dst:live'").await, 1);
        assert_eq!(count(&db, "SELECT COUNT(*) FROM rate_keys WHERE key = 'dst:live'").await, 1);
        assert_eq!(texts(&db, "SELECT session_id FROM console_sessions").await, ["live"]);
        let mut kept = texts(&db, "SELECT id FROM notifications").await;
        kept.sort();
        let mut expected = vec![unread_old, read_new];
        expected.sort();
        assert_eq!(kept, expected);
        let mut emails = texts(&db, "SELECT id FROM alert_outbox").await;
        emails.sort();
        assert_eq!(emails, ["alo_new", "alo_waiting"]);
        app.stop().await;
    }
}

fn rand_bits() -> u128 {
    use std::time::{SystemTime, UNIX_EPOCH};
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    (nanos ^ 0x5a5a_5a5a_5a5a) & ((1u128 << 80) - 1)
}

#[tokio::test]
async fn a_new_sqlite_file_is_incremental_and_partyflow_vacuum_converts_an_old_one() {
    let db = server::testkit::fresh_db(server::testkit::Db::Sqlite)
        .await
        .unwrap();
    assert_eq!(count(&db, "PRAGMA auto_vacuum").await, 2, "INCREMENTAL");

    // A file made before: a table first, so SQLite keeps auto_vacuum = NONE.
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/old.db", dir.path().display());
    {
        let options: sqlx::sqlite::SqliteConnectOptions = url.parse().unwrap();
        let pool = sqlx::SqlitePool::connect_with(options.create_if_missing(true))
            .await
            .unwrap();
        sqlx::query("CREATE TABLE legacy (x TEXT)")
            .execute(&pool)
            .await
            .unwrap();
        sqlx::query("INSERT INTO legacy SELECT hex(randomblob(1000)) FROM (WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 500) SELECT i FROM n)")
            .execute(&pool).await.unwrap();
        sqlx::query("DELETE FROM legacy")
            .execute(&pool)
            .await
            .unwrap();
        pool.close().await;
    }
    let out = std::process::Command::new(server::testkit::partyflow_binary())
        .arg("vacuum")
        .env("PARTYFLOW_DATABASE_URL", &url)
        .env("PARTYFLOW_CONFIG", "/nonexistent/partyflow.toml")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let done: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(done["autoVacuumBefore"], 0, "{done}");
    assert_eq!(done["autoVacuum"], 2, "{done}");
    assert!(
        done["bytes"].as_i64().unwrap() < done["bytesBefore"].as_i64().unwrap(),
        "{done}"
    );

    let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
    let mode: i64 = sqlx::query_scalar("PRAGMA auto_vacuum")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(mode, 2);
    let spaces: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM spaces")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(spaces, 0, "migrated and still a PartyFlow database");
}
