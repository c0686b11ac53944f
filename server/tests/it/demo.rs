//! The demo space (issue 16 item 1, docs D17) on a real server: its destinations point
//! at the sample receiver on the server's own listener, its sample traffic shows
//! successes, retries, `rate_limited` and several error classes within seconds (timings
//! shrunk by `[demo]`), a second creation says it exists, removing it leaves no trace,
//! and a tenant still cannot point a destination at any other address of the server's
//! loopback, nor at another path of the receiver.

use std::collections::BTreeSet;

use serde_json::{json, Value};

use crate::on_both_backends;
use server::ops::demo::{self, Created};
use server::testkit::{eventually, spawn_app_with_config, test_config, Receiver};

/// Rows of `table` that belong to `space` (straight from the database).
async fn rows_of_space(db_url: &str, table: &str, space: &str) -> i64 {
    let sql = format!("SELECT COUNT(*) FROM {table} WHERE space_id = $1");
    if db_url.starts_with("sqlite") {
        let pool = sqlx::SqlitePool::connect(db_url).await.unwrap();
        sqlx::query_scalar(&sql)
            .bind(space)
            .fetch_one(&pool)
            .await
            .unwrap()
    } else {
        let pool = sqlx::PgPool::connect(db_url).await.unwrap();
        sqlx::query_scalar(&sql)
            .bind(space)
            .fetch_one(&pool)
            .await
            .unwrap()
    }
}

on_both_backends! {
    async fn the_demo_space_shows_life_within_seconds_and_goes_without_a_trace(db) {
        let mut config = test_config(&db.url);
        config.demo.traffic_ms = 150;
        config.demo.slow_ms = 50;
        // No loopback opened: only the demo receiver's exact URLs may be called there.
        config.allow_networks = String::new();
        let app = spawn_app_with_config(&db, config).await.with_space().await;
        let base = server::demo::receiver_base(app.addr);
        let now = server::clock::now_ms();

        let Created::New { space_id, api_key, .. } = demo::create(db.storage.as_ref(), &base, now, 60_000).await.unwrap() else {
            panic!("a new demo space");
        };
        let again = demo::create(db.storage.as_ref(), &base, now, 60_000).await.unwrap();
        assert!(matches!(again, Created::Exists { space_id: s } if s == space_id), "{again:?}");
        let space = db.storage.get_space(space_id).await.unwrap();
        assert_eq!(space.name, "Demo");

        let client = reqwest::Client::new();
        let get = |path: String| {
            let req = client.get(app.url(&format!("/v1/projects/{space_id}{path}"))).bearer_auth(&api_key);
            async move {
                let resp = req.send().await.unwrap();
                (resp.status().as_u16(), resp.json::<Value>().await.unwrap_or(Value::Null))
            }
        };
        let (_, destinations) = get("/destinations".into()).await;
        let mut names: Vec<&str> = destinations["data"].as_array().unwrap().iter().map(|d| d["name"].as_str().unwrap()).collect();
        names.sort_unstable();
        assert_eq!(names, ["Flaky CRM", "Healthy shop", "Missing endpoint", "Reshaped orders", "Slow warehouse"]);

        // Within seconds: successes, retries, `rate_limited`, and three error classes.
        let mut classes = BTreeSet::new();
        let (mut succeeded, mut retried) = (false, false);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(45);
        loop {
            // The newest hundred, and the newest of each error class wanted: a slow
            // receiver's timeout lands on a delivery from its backlog, which the newest
            // page soon leaves behind.
            let mut seen = Vec::new();
            for path in ["/deliveries?limit=100".to_owned()].into_iter().chain(
                ["http", "timeout", "transformation", "rate_limited"]
                    .map(|c| format!("/deliveries?errorClass={c}&limit=1")),
            ) {
                let (_, page) = get(path).await;
                seen.extend(page["data"].as_array().cloned().unwrap_or_default());
            }
            for d in seen {
                if let Some(class) = d["lastErrorClass"].as_str() {
                    classes.insert(class.to_owned());
                }
                succeeded |= d["status"] == "succeeded";
                retried |= d["status"] == "retrying" || d["attemptCount"].as_i64().unwrap_or(0) > 1;
            }
            let errors = ["http", "timeout", "transformation"].iter().all(|c| classes.contains(*c));
            if succeeded && retried && errors && classes.contains("rate_limited") {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "succeeded {succeeded}, retried {retried}, classes {classes:?}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
        assert!(!classes.contains("blocked"), "the SSRF guard lets the demo receiver be called: {classes:?}");
        let (_, missing) = get("/destinations".into()).await;
        let streak = missing["data"].as_array().unwrap().iter().find(|d| d["name"] == "Missing endpoint").unwrap()["consecutiveDeadLetters"].as_i64().unwrap();
        assert!(streak > 0, "a dead-letter streak");

        // A tenant's destination at another path of the receiver, another route of the
        // server, or any other loopback address is refused as before.
        let port = app.addr.port();
        let elsewhere = Receiver::start().await;
        for url in [
            format!("http://127.0.0.1:{port}/_demo/receiver/other"),
            format!("http://127.0.0.1:{port}/_demo/receiver/healthy?x=1"),
            format!("http://127.0.0.1:{port}/healthz"),
            elsewhere.url("/hook"),
        ] {
            let d = app.destination(json!({"url": url, "eventTypes": ["probe"], "maxAttempts": 1})).await;
            assert!(d["id"].is_string(), "{d}");
        }
        let event = app.publish("probe", json!({})).await;
        let blocked = eventually(20, || async {
            let all = app.deliveries_of(&event).await;
            (all.len() == 4 && all.iter().all(|d| d["status"] == "failed")).then_some(all)
        })
        .await;
        assert!(blocked.iter().all(|d| d["lastErrorClass"] == "blocked"), "{blocked:?}");
        assert!(elsewhere.received().is_empty());

        // Removing it leaves nothing of it.
        assert_eq!(demo::remove(db.storage.as_ref()).await.unwrap(), Some(space_id));
        assert!(db.storage.get_space(space_id).await.is_err());
        for table in ["destinations", "events", "deliveries", "attempts", "api_keys", "notifications", "audit_log"] {
            assert_eq!(rows_of_space(&db.url, table, &space_id.to_string()).await, 0, "{table}");
        }
        let (status, _) = get("/destinations".into()).await;
        assert_eq!(status, 401, "its API key went with it");
        assert_eq!(demo::remove(db.storage.as_ref()).await.unwrap(), None);
        // The tenant's space is untouched.
        let (status, _) = app.get("/destinations").await;
        assert_eq!(status, 200);
        app.stop().await;
    }
}

/// The sample events' times in `space` with how many events have each (a round's four
/// events share one time), oldest first.
async fn round_times(db_url: &str, space: &str) -> Vec<(i64, i64)> {
    let sql = "SELECT created_at, COUNT(*) FROM events WHERE space_id = $1 \
               GROUP BY created_at ORDER BY created_at";
    if db_url.starts_with("sqlite") {
        let pool = sqlx::SqlitePool::connect(db_url).await.unwrap();
        sqlx::query_as(sql)
            .bind(space)
            .fetch_all(&pool)
            .await
            .unwrap()
    } else {
        let pool = sqlx::PgPool::connect(db_url).await.unwrap();
        sqlx::query_as(sql)
            .bind(space)
            .fetch_all(&pool)
            .await
            .unwrap()
    }
}

on_both_backends! {
    async fn two_instances_on_one_database_send_one_round_per_interval_not_two(db) {
        // Two servers on one database, each with its own pool, engine and traffic task.
        let traffic_ms: u64 = 300;
        let mut config = test_config(&db.url);
        config.demo.traffic_ms = traffic_ms;
        config.demo.slow_ms = 20;
        let second = server::testkit::TestDb {
            url: db.url.clone(),
            storage: server::storage::testing::connect(&db.url).await.unwrap(),
            _dir: None,
        };
        let one = spawn_app_with_config(&db, config.clone()).await;
        let two = spawn_app_with_config(&second, config).await;
        let base = server::demo::receiver_base(one.addr);
        let Created::New { space_id, .. } = demo::create(db.storage.as_ref(), &base, server::clock::now_ms(), 60_000).await.unwrap() else {
            panic!("a new demo space");
        };
        let space = space_id.to_string();
        let rounds = eventually(60, || async {
            let rounds = round_times(&db.url, &space).await;
            (rounds.len() >= 8).then_some(rounds)
        })
        .await;
        // Each round is four events; rounds at least an interval apart (less the
        // twentieth of `next_round_at`): never one from each instance at once.
        let min_gap = server::ops::demo::next_round_at(0, traffic_ms);
        for pair in rounds.windows(2) {
            let gap = pair[1].0 - pair[0].0;
            assert!(gap >= min_gap, "rounds {gap} ms apart: {rounds:?}");
        }
        assert!(rounds.iter().all(|&(_, events)| events == 4), "one round at a time: {rounds:?}");
        one.stop().await;
        two.stop().await;
    }
}
