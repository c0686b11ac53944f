//! The real retry schedules of docs §2.3, checked attempt by attempt without
//! waiting for them: after each failure the test reads the delay the engine chose
//! (`nextAttemptAt`), then makes the delivery due at once in the database and
//! waits for the next attempt, until the last one dead-letters.

use serde_json::{json, Value};
use server::storage::RawPool;

use crate::on_both_backends;
use crate::retry_after::{last_attempt_ended_ms, unix_ms, EARLY_MS, LATE_MS};
use server::testkit::{eventually, spawn_app, Receiver, Reply, TestApp, TestDb};

/// Moves a waiting delivery's next attempt to now, as if its delay had passed.
async fn make_due(db: &TestDb, delivery_id: &str) {
    const SQL: &str =
        "UPDATE deliveries SET next_attempt_at = $1 WHERE id = $2 AND status = 'retrying'";
    let now = server::clock::now_ms();
    let updated = match db.storage.raw_pool() {
        RawPool::Sqlite(pool) => sqlx::query(SQL)
            .bind(now)
            .bind(delivery_id)
            .execute(&pool)
            .await
            .unwrap()
            .rows_affected(),
        RawPool::Postgres(pool) => sqlx::query(SQL)
            .bind(now)
            .bind(delivery_id)
            .execute(&pool)
            .await
            .unwrap()
            .rows_affected(),
    };
    assert_eq!(updated, 1, "{delivery_id} was waiting");
}

/// Waits until attempt number `n` of the delivery is recorded, and returns the
/// delivery with its attempts.
async fn after_attempt(app: &TestApp, delivery_id: &str, n: i64) -> Value {
    eventually(60, || async {
        let (status, d) = app.get(&format!("/deliveries/{delivery_id}")).await;
        assert_eq!(status, 200, "{d}");
        let settled = d["status"] == "retrying" || d["status"] == "failed";
        (d["attemptCount"] == n && settled).then_some(d)
    })
    .await
}

/// Publishes one event to a receiver that always answers 500, and walks the
/// delivery through its attempts. Returns the delay (ms) and its base (ms) after
/// each failed attempt but the last; checks each delay is within `jitter` of its base.
async fn walk_schedule(
    db: &TestDb,
    destination: Value,
    base_secs: &[u64],
    jitter: f64,
) -> Vec<(i64, i64)> {
    let app = spawn_app(db).await.with_space().await;
    let rx = Receiver::start().await;
    rx.set_default(Reply::status(500));
    let mut destination = destination;
    destination["url"] = json!(rx.url("/"));
    app.destination(destination).await;
    let event = app.publish("order.paid", json!({"n": 1})).await;
    let first = app.wait_for_delivery(&event, "retrying").await;
    let id = first["id"].as_str().unwrap().to_owned();

    let mut delays = Vec::new();
    for (i, base) in base_secs.iter().enumerate() {
        let n = i as i64 + 1;
        let d = after_attempt(&app, &id, n).await;
        assert_eq!(d["status"], "retrying", "after attempt {n}: {d}");
        let delay = unix_ms(&d["nextAttemptAt"]) - last_attempt_ended_ms(&d);
        let base = (*base * 1000) as i64;
        let (lo, hi) = (
            (base as f64 * (1.0 - jitter)) as i64,
            (base as f64 * (1.0 + jitter)) as i64,
        );
        assert!(
            (lo - EARLY_MS..=hi + LATE_MS).contains(&delay),
            "after attempt {n}: waits {:.2} s, expected {:.0} s ± {:.0} %",
            delay as f64 / 1000.0,
            base as f64 / 1000.0,
            jitter * 100.0,
        );
        delays.push((delay, base));
        make_due(db, &id).await;
    }

    let last = base_secs.len() as i64 + 1;
    let d = after_attempt(&app, &id, last).await;
    assert_eq!(d["status"], "failed", "the last attempt dead-letters: {d}");
    assert_eq!(d["attemptCount"], last);
    assert!(d["nextAttemptAt"].is_null(), "{d}");
    assert_eq!(d["lastErrorClass"], "http");
    assert_eq!(d["lastStatusCode"], 500);
    assert_eq!(d["attempts"].as_array().unwrap().len() as i64, last);
    assert_eq!(
        rx.received().len() as i64,
        last,
        "one request per attempt, none after the dead letter"
    );
    assert!(rx
        .received()
        .iter()
        .all(|r| r.header("webhook-id") == event));
    app.stop().await;
    delays
}

on_both_backends! {
    async fn the_default_schedule_waits_5_10_20_40_80_160_320_seconds_with_20_percent_jitter_and_dead_letters_at_the_8th_attempt(db) {
        let delays = walk_schedule(&db, json!({}), &[5, 10, 20, 40, 80, 160, 320], 0.2).await;
        // The jitter is really there: the delays of 20 s and more (where timing
        // noise is far below 2 %) are not all on their base. Each is off by more
        // than 2 % with probability 0.9.
        let off: Vec<f64> = delays.iter().filter(|(_, base)| *base >= 20_000).map(|(d, b)| *d as f64 / *b as f64 - 1.0).collect();
        assert!(off.iter().any(|o| o.abs() > 0.02), "no jitter in {off:?}");
    }
}

on_both_backends! {
    async fn the_standard_schedule_waits_30_60_120_seconds_without_jitter_until_max_attempts(db) {
        walk_schedule(&db, json!({"retryPolicy": {"preset": "standard"}, "maxAttempts": 4}), &[30, 60, 120], 0.0).await;
    }
}
