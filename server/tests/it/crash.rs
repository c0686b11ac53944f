//! docs §7, "nothing accepted is ever lost": the real `partyflow serve` process
//! is killed with SIGKILL five times in the middle of 10,000 deliveries (1,000
//! events fanned out to 10 destinations), a new process starting on the same
//! database each time, and every delivery still reaches the receiver, with few
//! duplicates (only the attempts that were in flight at each kill).

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use serde_json::json;
use server::domain::{DeliveryStatus, ErrorClass, Plan};
use server::storage::{DeliveryFilter, Page};

use crate::on_both_backends;
use server::testkit::{eventually, Receiver, Reply};

const EVENTS: usize = 1_000;
/// Each event goes to every destination: EVENTS × DESTINATIONS deliveries.
const DESTINATIONS: usize = 10;
const DELIVERIES: usize = EVENTS * DESTINATIONS;
/// Times the server is killed with SIGKILL during the run.
const KILLS: usize = 5;
/// Publishers at once.
const PUBLISHERS: usize = 8;
/// The engine's default concurrency: the most attempts in flight at the kill.
const ENGINE_CONCURRENCY: usize = 64;

/// A `partyflow serve` child process; killed (SIGKILL) when dropped, so a failing
/// test leaves nothing behind. Its log goes to a file, shown when the test fails.
pub(crate) struct Server {
    child: Child,
    pub(crate) addr: SocketAddr,
    log: PathBuf,
}

impl Server {
    pub(crate) async fn start(db_url: &str, log_dir: &Path, name: &str) -> Server {
        let (mut cmd, addr, log) = Self::command(db_url, log_dir, name);
        let mut server = Server {
            child: cmd.spawn().expect("starting partyflow serve"),
            addr,
            log,
        };
        server.wait_until_healthy().await;
        server
    }

    /// The command that starts a `partyflow serve` on `db_url`, on a free port, its log in
    /// `log_dir`.
    fn command(db_url: &str, log_dir: &Path, name: &str) -> (Command, SocketAddr, PathBuf) {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let log = log_dir.join(format!("{name}.log"));
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_partyflow"));
        cmd.arg("serve");
        // Only the settings below: nothing from the test's own environment.
        for (key, _) in std::env::vars() {
            if key.starts_with("PARTYFLOW_") {
                cmd.env_remove(key);
            }
        }
        cmd.env("PARTYFLOW_DATABASE_URL", db_url)
            .env("PARTYFLOW_LISTEN", addr.to_string())
            .env("PARTYFLOW_ALLOW_NETWORKS", "127.0.0.0/8")
            .env("PARTYFLOW_CONFIG", "/nonexistent/partyflow.toml")
            // Several of these servers run at once: no fixed metrics port.
            .env("PARTYFLOW_METRICS_LISTEN", "")
            .env("PARTYFLOW_DISPATCH__LEASE_MARGIN_SECONDS", "1")
            .env("PARTYFLOW_DISPATCH__IDLE_POLL_MS", "100")
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        (cmd, addr, log)
    }

    async fn wait_until_healthy(&mut self) {
        let client = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(exit) = self.child.try_wait().unwrap() {
                panic!(
                    "partyflow serve exited early ({exit}):\n{}",
                    self.log_tail()
                );
            }
            let healthz = client
                .get(format!("http://{}/healthz", self.addr))
                .send()
                .await;
            if healthz.is_ok_and(|r| r.status().is_success()) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "partyflow serve not healthy within 60 s:\n{}",
                self.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// SIGKILL: no shutdown, no chance to release claims or finish attempts.
    pub(crate) fn kill_9(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!(
                "--- log of partyflow serve at {} ---\n{}",
                self.addr,
                self.log_tail()
            );
        }
    }
}

/// Publishes event `i` with the idempotency key `crash-{i}`, retrying through
/// connection failures (the server may be killed mid-request) against whichever
/// server `base` names; the key makes a retry return the first answer if the
/// first request did commit; it fans out to `fan_out` destinations. Returns the event ID.
async fn publish(
    client: &reqwest::Client,
    base: &RwLock<String>,
    space: &str,
    key: &str,
    i: usize,
    fan_out: usize,
) -> String {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let url = format!("{}/v1/projects/{space}/events", base.read().unwrap());
        let body = json!({"type": "crash.test", "payload": {"i": i}, "idempotencyKey": format!("crash-{i}")});
        match client
            .post(url)
            .bearer_auth(key)
            .json(&body)
            .timeout(Duration::from_secs(10))
            .send()
            .await
        {
            Ok(resp) if resp.status().as_u16() == 202 => {
                let answer: serde_json::Value = resp.json().await.unwrap();
                assert_eq!(answer["deliveries"], fan_out, "{answer}");
                return answer["id"].as_str().unwrap().to_owned();
            }
            Ok(resp) if resp.status().is_server_error() => {}
            Ok(resp) => panic!(
                "publishing event {i}: {} {}",
                resp.status(),
                resp.text().await.unwrap_or_default()
            ),
            Err(_) => {} // the server is gone: wait for the next one
        }
        assert!(
            Instant::now() < deadline,
            "event {i} could not be published within 120 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// [`PUBLISHERS`] tasks publishing events `0..events` between them ([`publish`]), each
/// answering the IDs of what it published.
fn publishers(
    client: &reqwest::Client,
    base: &Arc<RwLock<String>>,
    space: &str,
    key: &str,
    events: usize,
    fan_out: usize,
) -> tokio::task::JoinSet<Vec<String>> {
    let mut publishers = tokio::task::JoinSet::new();
    for p in 0..PUBLISHERS {
        let (client, base, space, key) = (
            client.clone(),
            base.clone(),
            space.to_owned(),
            key.to_owned(),
        );
        publishers.spawn(async move {
            let mut ids = Vec::new();
            for i in (p..events).step_by(PUBLISHERS) {
                ids.push(publish(&client, &base, &space, &key, i, fan_out).await);
            }
            ids
        });
    }
    publishers
}

/// Every event ID the [`publishers`] published, once they are done.
async fn published(mut publishers: tokio::task::JoinSet<Vec<String>>) -> HashSet<String> {
    let mut published = HashSet::new();
    while let Some(ids) = publishers.join_next().await {
        published.extend(ids.unwrap());
    }
    published
}

on_both_backends! {
    async fn a_server_killed_with_sigkill_five_times_during_10000_deliveries_loses_none_and_repeats_only_what_was_in_flight(db) {
        let started = Instant::now();
        let logs = tempfile::tempdir().unwrap();
        let created = server::ops::tenants::create_space(db.storage.as_ref(), "Crash", Plan::Enterprise).await.unwrap();
        let (space, key) = (created.space.id.to_string(), created.api_key.clone());
        let rx = Receiver::start().await;
        rx.set_default(Reply::status(200).body("ok").after(Duration::from_millis(5)));

        let mut server = Server::start(&db.url, logs.path(), "run-0").await;
        let base = Arc::new(RwLock::new(format!("http://{}", server.addr)));
        let client = reqwest::Client::new();
        for d in 0..DESTINATIONS {
            let resp = client
                .post(format!("http://{}/v1/projects/{space}/destinations", server.addr))
                .bearer_auth(&key)
                .json(&json!({"url": rx.url(&format!("/crash/{d}")), "timeoutSeconds": 2}))
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status().as_u16(), 201);
        }

        let publishers = publishers(&client, &base, &space, &key, EVENTS, DESTINATIONS);

        // Kill while deliveries flow, at evenly spaced points of the run: the receiver
        // has seen some, not all; then start the next process on the same database.
        let mut kills = Vec::new();
        for k in 1..=KILLS {
            let at = k * DELIVERIES / (KILLS + 1);
            eventually(180, || async { Some(rx.received().len()).filter(|n| *n >= at) }).await;
            server.kill_9();
            let seen_at_kill = rx.received().len();
            assert!(seen_at_kill < DELIVERIES, "kill {k} came too late: all {DELIVERIES} deliveries had arrived");
            kills.push((started.elapsed(), seen_at_kill));
            server = Server::start(&db.url, logs.path(), &format!("run-{k}")).await;
            *base.write().unwrap() = format!("http://{}", server.addr);
        }

        let published = published(publishers).await;
        assert_eq!(published.len(), EVENTS, "one event per idempotency key");

        // Every delivery ends succeeded (bounded wait).
        let filter = DeliveryFilter { space_id: Some(created.space.id), ..Default::default() };
        let deadline = Instant::now() + Duration::from_secs(180);
        let deliveries = loop {
            let all = db.storage.list_deliveries(&filter, Page::first(2 * DELIVERIES as i64)).await.unwrap();
            if all.len() == DELIVERIES && all.iter().all(|d| d.status == DeliveryStatus::Succeeded) {
                break all;
            }
            let mut by_status = HashMap::new();
            for d in &all {
                *by_status.entry(d.status.as_str()).or_insert(0) += 1;
            }
            assert!(Instant::now() < deadline, "not all {DELIVERIES} deliveries succeeded within 180 s after the last restart: {by_status:?}");
            tokio::time::sleep(Duration::from_millis(250)).await;
        };
        let mut per_event: HashMap<String, HashSet<String>> = HashMap::new();
        for d in &deliveries {
            per_event.entry(d.event_id.to_string()).or_default().insert(d.destination_id.to_string());
        }
        assert_eq!(per_event.keys().cloned().collect::<HashSet<_>>(), published, "deliveries for the published events, and no other");
        assert!(per_event.values().all(|d| d.len() == DESTINATIONS), "one delivery per event and destination");

        // None missing at the receiver, no strangers, few duplicates. A delivery is
        // known at the receiver by its `webhook-id` (the event) and its path (the destination).
        let got = rx.received();
        let mut times_seen: HashMap<(String, String), usize> = HashMap::new();
        for r in &got {
            assert!(r.path.starts_with("/crash/"), "{}", r.path);
            *times_seen.entry((r.header("webhook-id"), r.path.clone())).or_default() += 1;
        }
        let urls: HashMap<String, String> = db
            .storage
            .list_all_destinations(created.space.id)
            .await
            .unwrap()
            .into_iter()
            .map(|d| (d.id.to_string(), url_path(&d.url)))
            .collect();
        let expected: HashSet<(String, String)> = deliveries
            .iter()
            .map(|d| (d.event_id.to_string(), urls[&d.destination_id.to_string()].clone()))
            .collect();
        let missing: Vec<_> = expected.iter().filter(|k| !times_seen.contains_key(*k)).collect();
        assert!(missing.is_empty(), "{} deliveries never reached the receiver, e.g. {:?}", missing.len(), &missing[..missing.len().min(5)]);
        let strangers: Vec<_> = times_seen.keys().filter(|k| !expected.contains(*k)).collect();
        assert!(strangers.is_empty(), "requests for unknown deliveries: {strangers:?}");
        let duplicates = got.len() - times_seen.len();
        assert!(
            duplicates <= KILLS * ENGINE_CONCURRENCY,
            "{duplicates} duplicates: more than the {ENGINE_CONCURRENCY} attempts that can be in flight at each of {KILLS} kills"
        );

        // Every request the receiver got is in the attempt log: a repeat is explained
        // by a `lost` attempt (the claim that died with the process), which does not
        // use up an attempt (D3).
        let mut lost = 0;
        for d in &deliveries {
            let attempts = db.storage.list_all_attempts(d.id).await.unwrap();
            let lost_here = attempts.iter().filter(|a| a.error_class == Some(ErrorClass::Lost)).count();
            lost += lost_here;
            let seen = times_seen[&(d.event_id.to_string(), urls[&d.destination_id.to_string()].clone())];
            assert!(seen <= attempts.len(), "{}: reached the receiver {seen} times, logged {attempts:?}", d.id);
            assert_eq!(d.attempts as usize, attempts.len() - lost_here, "{}: lost attempts are not counted: {attempts:?}", d.id);
        }
        eprintln!(
            "crash test: {KILLS} kills at (time, requests received) {kills:?}; {lost} lost attempts recovered; \
             {duplicates} duplicates; all {DELIVERIES} deliveries succeeded after {:?}",
            started.elapsed()
        );
        drop(server);
    }
}

/// The path of a destination URL (`http://127.0.0.1:port/crash/3` → `/crash/3`).
fn url_path(url: &str) -> String {
    let after_scheme = url.split_once("://").map_or(url, |(_, rest)| rest);
    after_scheme
        .find('/')
        .map_or("/".into(), |i| after_scheme[i..].to_owned())
}

on_both_backends! {
    async fn a_delivery_lost_to_three_crashes_in_a_row_fails_as_lost_and_admins_are_told(db) {
        let logs = tempfile::tempdir().unwrap();
        let created = server::ops::tenants::create_space(db.storage.as_ref(), "Crash loop", Plan::Enterprise).await.unwrap();
        let (space, key) = (created.space.id.to_string(), created.api_key.clone());
        // The receiver never answers in time: every attempt is in flight when the server dies.
        let rx = Receiver::start().await;
        rx.set_default(Reply::status(200).after(Duration::from_secs(60)));
        let client = reqwest::Client::new();
        let api = |server: &Server, path: &str| format!("http://{}/v1/projects/{space}{path}", server.addr);

        let mut server = Server::start(&db.url, logs.path(), "loop-0").await;
        let resp = client.post(api(&server, "/destinations")).bearer_auth(&key)
            .json(&json!({"url": rx.url("/hang"), "timeoutSeconds": 2})).send().await.unwrap();
        assert_eq!(resp.status().as_u16(), 201);
        let resp = client.post(api(&server, "/events")).bearer_auth(&key)
            .json(&json!({"type": "loop.test", "payload": {}})).send().await.unwrap();
        assert_eq!(resp.status().as_u16(), 202);

        // Three times: the attempt reaches the receiver, then the process dies (kill -9).
        for k in 1..=3 {
            rx.wait_for(k).await;
            server.kill_9();
            server = Server::start(&db.url, logs.path(), &format!("loop-{k}")).await;
        }

        // The third lost attempt, recovered when its lease runs out, fails the delivery.
        let delivery = eventually(30, || async {
            let list: serde_json::Value = client.get(api(&server, "/deliveries?status=failed")).bearer_auth(&key)
                .send().await.unwrap().json().await.unwrap();
            list["data"].as_array().unwrap().first().cloned()
        }).await;
        assert_eq!(delivery["lastErrorClass"], "lost", "{delivery}");
        assert_eq!(rx.received().len(), 3, "not tried a fourth time");
        let id = delivery["id"].as_str().unwrap();
        let full: serde_json::Value = client.get(api(&server, &format!("/deliveries/{id}"))).bearer_auth(&key)
            .send().await.unwrap().json().await.unwrap();
        let attempts = full["attempts"].as_array().unwrap();
        assert_eq!(attempts.len(), 3, "{full}");
        assert!(attempts.iter().all(|a| a["errorClass"] == "lost"), "{full}");
        let messages: Vec<&str> = attempts.iter().map(|a| a["errorMessage"].as_str().unwrap()).collect();
        assert!(messages.iter().any(|m| m.contains("3 times in a row")), "{messages:?}");

        let notes: serde_json::Value = client.get(api(&server, "/notifications")).bearer_auth(&key)
            .send().await.unwrap().json().await.unwrap();
        let lost: Vec<_> = notes["data"].as_array().unwrap().iter().filter(|n| n["kind"] == "delivery.lost").collect();
        assert_eq!(lost.len(), 1, "{notes}");
        assert!(lost[0]["message"].as_str().unwrap().contains(id), "{notes}");

        // Staying down: later restarts leave it failed.
        server.kill_9();
        let server = Server::start(&db.url, logs.path(), "loop-after").await;
        tokio::time::sleep(Duration::from_millis(3500)).await;
        assert_eq!(rx.received().len(), 3);
        drop(server);
    }
}

/// docs §2.5: on SQLite the engine claims ahead for a destination that answers fast (up to
/// `SQLITE_AHEAD.caps` times its five slots, the rest waiting in memory). Killed with
/// SIGKILL while deliveries are claimed ahead (more than five found `sending` after the
/// kill), the next process gets every delivery out: each claim the dead process held comes
/// back as a `lost` attempt when its lease expires. Only those can repeat at the receiver:
/// those sent and not yet recorded (an attempt's record is written while its worker sends
/// the next one claimed ahead); a claim ahead that still waited was never sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_claimed_ahead_come_back_after_a_kill_9_and_none_is_lost_or_sent_twice_at_once()
{
    const EVENTS: usize = 3_000;
    const KILLS: usize = 3;
    let Some(db) = server::testkit::fresh_db(server::testkit::Db::Sqlite).await else {
        return;
    };
    let logs = tempfile::tempdir().unwrap();
    let created =
        server::ops::tenants::create_space(db.storage.as_ref(), "Ahead", Plan::Enterprise)
            .await
            .unwrap();
    let (space, key) = (created.space.id.to_string(), created.api_key.clone());
    let rx = Receiver::start().await;
    let mut server = Server::start(&db.url, logs.path(), "run-0").await;
    let base = Arc::new(RwLock::new(format!("http://{}", server.addr)));
    let client = reqwest::Client::new();
    let resp = client
        .post(format!(
            "http://{}/v1/projects/{space}/destinations",
            server.addr
        ))
        .bearer_auth(&key)
        .json(&json!({"url": rx.url("/ahead"), "timeoutSeconds": 2}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 201);
    let destination: serde_json::Value = resp.json().await.unwrap();
    let destination = destination["id"].as_str().unwrap().parse().unwrap();

    let publishers = publishers(&client, &base, &space, &key, EVENTS, 1);
    let sending = DeliveryFilter {
        space_id: Some(created.space.id),
        destination_id: Some(destination),
        status: Some(DeliveryStatus::Sending),
        ..Default::default()
    };
    let mut claimed_at_kills = Vec::new();
    for k in 1..=KILLS {
        let at = k * EVENTS / (KILLS + 1);
        eventually(180, || async {
            Some(rx.received().len()).filter(|n| *n >= at)
        })
        .await;
        // Killed while more than five are claimed if that comes within a few seconds:
        // claims ahead come and go, and a loaded machine may give them few moments.
        let ahead_by = tokio::time::Instant::now() + Duration::from_secs(5);
        while tokio::time::Instant::now() < ahead_by
            && db
                .storage
                .list_deliveries(&sending, Page::first(100))
                .await
                .unwrap()
                .len()
                <= 5
        {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        server.kill_9();
        // What the dead process held: its five slots and the claims ahead.
        let claimed = db
            .storage
            .list_deliveries(&sending, Page::first(100))
            .await
            .unwrap()
            .len();
        let caps = server::storage::SQLITE_AHEAD.caps as usize;
        assert!(
            claimed <= caps * 5,
            "more than {caps} times the in-flight cap claimed: {claimed}"
        );
        claimed_at_kills.push(claimed);
        server = Server::start(&db.url, logs.path(), &format!("run-{k}")).await;
        *base.write().unwrap() = format!("http://{}", server.addr);
    }
    assert_eq!(published(publishers).await.len(), EVENTS);
    assert!(
        claimed_at_kills.iter().any(|n| *n > 5),
        "no kill found deliveries claimed ahead: {claimed_at_kills:?}"
    );

    let all = DeliveryFilter {
        space_id: Some(created.space.id),
        ..Default::default()
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    let deliveries = loop {
        let list = db
            .storage
            .list_deliveries(&all, Page::first(2 * EVENTS as i64))
            .await
            .unwrap();
        if list.len() == EVENTS && list.iter().all(|d| d.status == DeliveryStatus::Succeeded) {
            break list;
        }
        assert!(
            Instant::now() < deadline,
            "not every delivery succeeded within 120 s"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let got = rx.received();
    let seen: HashSet<String> = got.iter().map(|r| r.header("webhook-id")).collect();
    let expected: HashSet<String> = deliveries.iter().map(|d| d.event_id.to_string()).collect();
    assert_eq!(
        seen, expected,
        "every delivery reached the receiver, and no other"
    );
    assert_eq!(rx.overlaps(), 0, "no delivery in flight twice at once");
    assert!(
        rx.max_in_flight() <= 5,
        "a sixth request in flight: {}",
        rx.max_in_flight()
    );
    let duplicates = got.len() - seen.len();
    let held: usize = claimed_at_kills.iter().sum();
    assert!(
        duplicates <= held,
        "{duplicates} repeats: more than the {held} claims the killed processes held"
    );
    let mut lost = 0;
    for d in &deliveries {
        let attempts = db.storage.list_all_attempts(d.id).await.unwrap();
        let lost_here = attempts
            .iter()
            .filter(|a| a.error_class == Some(ErrorClass::Lost))
            .count();
        lost += lost_here;
        assert_eq!(
            d.attempts as usize,
            attempts.len() - lost_here,
            "{}: lost attempts are not counted",
            d.id
        );
    }
    eprintln!("claimed ahead: {KILLS} kills found {claimed_at_kills:?} claimed; {lost} lost attempts; {duplicates} repeats");
    drop(server);
}

/// docs §7: a SQLite database is served by one process. A second `partyflow serve` on the
/// same file stops at start with a message that says why; once the first is killed, the
/// next starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_server_on_one_sqlite_database_refuses_to_start() {
    let Some(db) = server::testkit::fresh_db(server::testkit::Db::Sqlite).await else {
        return;
    };
    let logs = tempfile::tempdir().unwrap();
    let first = Server::start(&db.url, logs.path(), "first").await;
    let (mut cmd, _, log) = Server::command(&db.url, logs.path(), "second");
    let status = cmd.status().expect("running a second partyflow serve");
    assert!(
        !status.success(),
        "a second server started on the same SQLite database"
    );
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(
        said.contains("another `partyflow serve` runs on this SQLite database"),
        "{said}"
    );
    first.kill_9();
    let again = Server::start(&db.url, logs.path(), "again").await;
    drop(again);
}
