//! Rate limits and concurrency (docs §2.5), measured by the receivers themselves.

use std::time::Duration;

use serde_json::json;

use crate::on_both_backends;
use server::testkit::{eventually, spawn_app, spawn_app_with_config, test_config, Receiver, Reply};

/// The most requests within any `window` in these arrival times.
fn max_in_any_window(times: &[std::time::Instant], window: Duration) -> usize {
    let mut sorted = times.to_vec();
    sorted.sort();
    let mut best = 0;
    let mut start = 0;
    for end in 0..sorted.len() {
        while sorted[end] - sorted[start] >= window {
            start += 1;
        }
        best = best.max(end - start + 1);
    }
    best
}

async fn all_succeeded(app: &server::testkit::TestApp, n: usize) -> Vec<serde_json::Value> {
    eventually(60, || async {
        let (_, list) = app.get("/deliveries?limit=250&status=succeeded").await;
        let data = list["data"].as_array().unwrap().clone();
        (data.len() >= n).then_some(data)
    })
    .await
}

on_both_backends! {
    async fn never_more_than_five_requests_in_flight_to_one_destination(db) {
        let app = spawn_app(&db).await.with_space().await;
        let rx = Receiver::start().await;
        rx.set_default(Reply::status(200).after(Duration::from_millis(150)));
        app.destination(json!({"url": rx.url("/")})).await;
        for i in 0..30 {
            app.publish("x", json!({"i": i})).await;
        }
        all_succeeded(&app, 30).await;
        assert_eq!(rx.max_in_flight(), 5, "the engine may use all five slots but never a sixth");
        app.stop().await;
    }
}

on_both_backends! {
    async fn a_destination_rate_limit_holds_in_every_window_without_using_attempts(db) {
        let app = spawn_app(&db).await.with_space().await;
        let rx = Receiver::start().await;
        app.destination(json!({"url": rx.url("/"), "rateLimit": {"count": 4, "period": "second"}})).await;
        for i in 0..12 {
            app.publish("x", json!({"i": i})).await;
        }
        // While held back, deliveries say why.
        eventually(10, || async {
            let (_, list) = app.get("/deliveries?errorClass=rate_limited").await;
            (!list["data"].as_array().unwrap().is_empty()).then_some(())
        })
        .await;
        let done = all_succeeded(&app, 12).await;
        assert!(done.iter().all(|d| d["attemptCount"] == 1), "rate limiting used no attempts");
        let times: Vec<_> = rx.received().iter().map(|r| r.at).collect();
        assert_eq!(times.len(), 12);
        // A little tolerance for the edge of a window (clock granularity).
        let worst = max_in_any_window(&times, Duration::from_millis(950));
        assert!(worst <= 4, "{worst} requests within one second");
        app.stop().await;
    }
}

on_both_backends! {
    async fn the_plan_limit_is_shared_by_all_destinations_of_a_space(db) {
        let mut config = test_config(&db.url);
        config.limits.outgoing_per_second.enterprise = 5;
        let app = spawn_app_with_config(&db, config).await.with_space().await;
        let rx = Receiver::start().await;
        app.destination(json!({"url": rx.url("/a")})).await;
        app.destination(json!({"url": rx.url("/b")})).await;
        for i in 0..8 {
            app.publish("x", json!({"i": i})).await;
        }
        all_succeeded(&app, 16).await;
        let times: Vec<_> = rx.received().iter().map(|r| r.at).collect();
        let worst = max_in_any_window(&times, Duration::from_millis(950));
        assert!(worst <= 5, "{worst} requests within one second across the space's destinations");
        app.stop().await;
    }
}

on_both_backends! {
    async fn a_limited_destination_does_not_slow_an_unlimited_one(db) {
        let app = spawn_app(&db).await.with_space().await;
        let slow = Receiver::start().await;
        slow.set_default(Reply::status(200).after(Duration::from_secs(2)));
        let limited = Receiver::start().await;
        let free = Receiver::start().await;
        app.destination(json!({"url": slow.url("/"), "eventTypes": ["slow"]})).await;
        app.destination(json!({"url": limited.url("/"), "eventTypes": ["limited"], "rateLimit": {"count": 1, "period": "minute"}})).await;
        app.destination(json!({"url": free.url("/"), "eventTypes": ["free"]})).await;
        for i in 0..20 {
            app.publish("slow", json!({"i": i})).await;
            app.publish("limited", json!({"i": i})).await;
        }
        let started = std::time::Instant::now();
        for i in 0..20 {
            app.publish("free", json!({"i": i})).await;
        }
        free.wait_for(20).await;
        assert!(started.elapsed() < Duration::from_secs(5), "the free destination waited {:?}", started.elapsed());
        assert_eq!(limited.received().len(), 1);
        assert!(slow.max_in_flight() <= 5);
        app.stop().await;
    }
}

on_both_backends! {
    async fn retries_never_take_the_capacity_kept_for_first_attempts(db) {
        let mut config = test_config(&db.url);
        config.dispatch.concurrency = 10;
        config.dispatch.retry_share = 0.5;
        let app = spawn_app_with_config(&db, config).await.with_space().await;
        // Ten failing destinations keep retrying with slow answers...
        let failing = Receiver::start().await;
        failing.set_default(Reply::status(500).after(Duration::from_millis(500)));
        for i in 0..10 {
            app.destination(json!({"url": failing.url(&format!("/{i}")), "eventTypes": ["storm"], "retryPolicy": {"preset": "standard", "initialMs": 1, "maxMs": 1}, "maxAttempts": 20})).await;
        }
        app.publish("storm", json!({})).await;
        failing.wait_for(30).await;
        // ...and a fresh event still goes out at once.
        let fresh = Receiver::start().await;
        app.destination(json!({"url": fresh.url("/"), "eventTypes": ["fresh"]})).await;
        let started = std::time::Instant::now();
        app.publish("fresh", json!({})).await;
        fresh.wait_for(1).await;
        assert!(started.elapsed() < Duration::from_millis(1500), "first attempt waited {:?}", started.elapsed());
        app.stop().await;
    }
}

/// Two instances (each with its own engine and connection pool) on one PostgreSQL database.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_instances_share_the_work_without_sending_anything_twice_at_once() {
    two_instances_share_the_work(Duration::from_millis(5)).await;
}

/// The same with a receiver that answers at once: both instances claim ahead (more than
/// the cap, waiting in memory), each only while every delivery in flight is its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_instances_claiming_ahead_for_a_fast_destination_hold_its_cap_together() {
    two_instances_share_the_work(Duration::ZERO).await;
}

/// 2,000 events published through two instances to one destination whose receiver
/// answers after `reply_after`: every one delivered, none in flight twice, at most five
/// in flight at once across both.
async fn two_instances_share_the_work(reply_after: Duration) {
    let Some(db) = server::testkit::fresh_db(server::testkit::Db::Postgres).await else {
        return;
    };
    let second_storage = server::storage::testing::connect(&db.url).await.unwrap();
    let db2 = server::testkit::TestDb {
        url: db.url.clone(),
        storage: second_storage,
        _dir: None,
    };
    let one = spawn_app(&db).await.with_space().await;
    let mut two = spawn_app(&db2).await;
    two.api_key = one.api_key.clone();
    two.space = one.space.clone();
    let rx = Receiver::start().await;
    rx.set_default(Reply::status(200).after(reply_after));
    let dst = one.destination(json!({"url": rx.url("/")})).await;
    let _ = dst;
    let mut tasks = Vec::new();
    for chunk in 0..8 {
        // Half through each instance: each one's engine is told of work and claims.
        let through = if chunk % 2 == 0 { &one } else { &two };
        let (url, key) = (through.api("/events"), one.api_key.clone().unwrap());
        tasks.push(tokio::spawn(async move {
            let client = reqwest::Client::new();
            for i in 0..250 {
                let resp = client
                    .post(&url)
                    .bearer_auth(&key)
                    .json(&json!({"type": "x", "payload": {"c": chunk, "i": i}}))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(resp.status(), 202);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let got = eventually(120, || async {
        let got = rx.received();
        (got.len() >= 2000).then_some(got)
    })
    .await;
    let ids: std::collections::HashSet<_> = got.iter().map(|r| r.header("webhook-id")).collect();
    assert_eq!(ids.len(), 2000, "every event delivered");
    assert_eq!(rx.overlaps(), 0, "no delivery in flight twice");
    assert!(
        rx.max_in_flight() <= 5,
        "the destination limit held across both instances: {}",
        rx.max_in_flight()
    );
    let (status, failed) = one.get("/deliveries?status=failed").await;
    assert_eq!(status, 200);
    assert!(failed["data"].as_array().unwrap().is_empty());
    one.stop().await;
    two.stop().await;
}
