//! The database going away (issue 11, item 5), with a publisher at ~200 events/s
//! throughout: PostgreSQL stopped (`pg_ctl -m immediate stop`: a crash) and started
//! again, and SQLite on a small tmpfs filled to the last byte and then freed. While
//! the database is gone, writes answer 503 `unavailable` with `Retry-After`, quickly,
//! and `/readyz` answers 503 within its bound; afterwards everything resumes without a
//! restart, and every event answered 202 reaches the receiver.
//!
//! Both need things a laptop may not have: PostgreSQL's binaries (a throwaway cluster of
//! its own, so the shared one other tests use is never stopped) and the right to mount a
//! tmpfs (root). Without them the test says so and passes without running.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use server::testkit::{eventually, spawn_app_with_config, test_config, Receiver, TestApp, TestDb};

/// One publish and how it was answered.
#[derive(Debug, Clone)]
struct Answer {
    /// When it was sent, from the start of the run.
    sent: Duration,
    took: Duration,
    /// `None`: no answer at all (transport error or the client's 15 s timeout).
    status: Option<u16>,
    code: Option<String>,
    retry_after: Option<String>,
    event_id: Option<String>,
}

/// Publishes one event every 5 ms (~200/s), each in its own task, until `stop`.
fn start_publisher(
    app: &TestApp,
    stop: Arc<AtomicBool>,
    t0: Instant,
) -> tokio::task::JoinHandle<Vec<Answer>> {
    let url = app.api("/events");
    let key = app.api_key.clone().unwrap();
    tokio::spawn(async move {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(15))
            .build()
            .unwrap();
        let mut tick = tokio::time::interval(Duration::from_millis(5));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut requests = Vec::new();
        let mut i = 0_u64;
        while !stop.load(Ordering::SeqCst) {
            tick.tick().await;
            i += 1;
            let (client, url, key) = (client.clone(), url.clone(), key.clone());
            requests.push(tokio::spawn(async move {
                let sent = t0.elapsed();
                let started = Instant::now();
                let body =
                    json!({"type": "outage.test", "payload": {"i": i, "pad": "p".repeat(512)}});
                let resp = client.post(url).bearer_auth(key).json(&body).send().await;
                let mut answer = Answer {
                    sent,
                    took: Duration::ZERO,
                    status: None,
                    code: None,
                    retry_after: None,
                    event_id: None,
                };
                if let Ok(resp) = resp {
                    answer.status = Some(resp.status().as_u16());
                    answer.retry_after = resp
                        .headers()
                        .get("retry-after")
                        .map(|v| v.to_str().unwrap_or("").to_owned());
                    let json: serde_json::Value = resp.json().await.unwrap_or_default();
                    answer.code = json["code"].as_str().map(str::to_owned);
                    answer.event_id = json["id"].as_str().map(str::to_owned);
                }
                answer.took = started.elapsed();
                answer
            }));
        }
        let mut answers = Vec::with_capacity(requests.len());
        for r in requests {
            answers.push(r.await.unwrap());
        }
        answers
    })
}

/// `/readyz`: its status and how long it took (`None`: no answer within 5 s).
async fn readyz(app: &TestApp) -> (Option<u16>, Duration) {
    let started = Instant::now();
    let resp = reqwest::Client::new()
        .get(app.url("/readyz"))
        .timeout(Duration::from_secs(5))
        .send()
        .await;
    (resp.ok().map(|r| r.status().as_u16()), started.elapsed())
}

/// What every run checks about the answers: 202 or 503 `unavailable` (with
/// `Retry-After`) and nothing else, none slow; some of each; returns the accepted IDs.
fn check_answers(answers: &[Answer], what: &str) -> Vec<String> {
    let slowest = answers.iter().map(|a| a.took).max().unwrap_or_default();
    let count = |s: u16| answers.iter().filter(|a| a.status == Some(s)).count();
    eprintln!(
        "{what}: {} publishes, {} answered 202, {} answered 503; slowest answer {slowest:?}",
        answers.len(),
        count(202),
        count(503)
    );
    for a in answers {
        match a.status {
            Some(202) => assert!(a.event_id.is_some(), "{a:?}"),
            Some(503) => {
                assert_eq!(a.code.as_deref(), Some("unavailable"), "{a:?}");
                assert!(
                    a.retry_after
                        .as_deref()
                        .is_some_and(|v| v.parse::<u64>().is_ok()),
                    "{a:?}"
                );
            }
            _ => panic!("{what}: a publish answered {a:?}; only 202 or 503 may be"),
        }
        assert!(
            a.took < Duration::from_secs(8),
            "{what}: a publish hung for {:?}: {a:?}",
            a.took
        );
    }
    assert!(count(503) > 0, "{what}: no publish answered 503");
    answers.iter().filter_map(|a| a.event_id.clone()).collect()
}

/// Waits until the receiver got every one of `ids` (as `webhook-id`).
async fn wait_until_all_delivered(rx: &Receiver, ids: &[String], what: &str) {
    let wanted: std::collections::HashSet<&str> = ids.iter().map(String::as_str).collect();
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let got: std::collections::HashSet<String> = rx
            .received()
            .iter()
            .map(|r| r.header("webhook-id"))
            .collect();
        let missing = wanted.iter().filter(|id| !got.contains(**id)).count();
        if missing == 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: {missing} of {} events answered 202 never reached the receiver",
            wanted.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A short lease margin: attempts cut off by the outage come back quickly.
fn outage_config(db_url: &str) -> server::config::Config {
    let mut config = test_config(db_url);
    config.dispatch.lease_margin_seconds = 1;
    config
}

// ---------------------------------------------------------------- PostgreSQL

/// A PostgreSQL cluster of this test's own, on a free port, in a temporary folder;
/// stopped and removed when dropped.
/// A server on a fresh database at `url` with one destination and the publisher
/// running (for a second already).
struct Load {
    app: TestApp,
    rx: Receiver,
    /// When the publisher started; answers are timed from here.
    t0: Instant,
    stop: Arc<AtomicBool>,
    publisher: tokio::task::JoinHandle<Vec<Answer>>,
}

async fn under_load(url: &str) -> Load {
    let storage = server::storage::testing::connect(url).await.unwrap();
    storage.migrate().await.unwrap();
    let db = TestDb {
        url: url.to_owned(),
        storage,
        _dir: None,
    };
    let app = spawn_app_with_config(&db, outage_config(&db.url))
        .await
        .with_space()
        .await;
    let rx = Receiver::start().await;
    app.destination(json!({"url": rx.url("/outage"), "timeoutSeconds": 2}))
        .await;
    let t0 = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let publisher = start_publisher(&app, stop.clone(), t0);
    tokio::time::sleep(Duration::from_secs(1)).await;
    Load {
        app,
        rx,
        t0,
        stop,
        publisher,
    }
}

/// CPU seconds this process (server, publisher and receiver) has used so far.
fn process_cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    // utime and stime: fields 14 and 15 of stat, 11 and 12 after the command name.
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    ticks / 100.0
}

struct PgCluster {
    bin: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
    /// Run the binaries as `postgres` (PostgreSQL refuses to run as root).
    as_postgres: bool,
}

impl PgCluster {
    /// The newest installed PostgreSQL's `bin/` (as /work/pgdev.sh and ./dev find it).
    fn binaries() -> Option<PathBuf> {
        let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
            .ok()?
            .filter_map(|e| {
                let e = e.ok()?;
                let version = e.file_name().to_str()?.parse::<u32>().ok()?;
                let bin = e.path().join("bin");
                bin.join("initdb").exists().then_some((version, bin))
            })
            .collect();
        found.sort();
        found.pop().map(|(_, bin)| bin)
    }

    fn create() -> Option<PgCluster> {
        let bin = Self::binaries()?;
        let as_postgres = Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
        if as_postgres
            && !Command::new("id")
                .arg("postgres")
                .output()
                .is_ok_and(|o| o.status.success())
        {
            let made = Command::new("useradd")
                .args(["--system", "--no-create-home", "postgres"])
                .status();
            assert!(
                made.is_ok_and(|s| s.success()),
                "creating the postgres user"
            );
        }
        let dir = tempfile::Builder::new()
            .prefix("pg-outage-")
            .tempdir()
            .unwrap();
        if as_postgres {
            assert!(Command::new("chown")
                .arg("postgres")
                .arg(dir.path())
                .status()
                .unwrap()
                .success());
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let cluster = PgCluster {
            bin,
            dir,
            port,
            as_postgres,
        };
        let data = cluster.data();
        let ok = cluster.run(
            "initdb",
            &[
                "-D",
                data.to_str().unwrap(),
                "-U",
                "partyflow",
                "--auth=trust",
                "-E",
                "UTF8",
            ],
        );
        assert!(ok, "initdb failed");
        cluster.start();
        Some(cluster)
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn run(&self, tool: &str, args: &[&str]) -> bool {
        let program = self.bin.join(tool);
        let mut cmd = if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(program);
            c
        } else {
            Command::new(program)
        };
        cmd.args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    fn start(&self) {
        let options = format!(
            "-c listen_addresses=127.0.0.1 -p {} -k {} -c fsync=off",
            self.port,
            self.dir.path().display()
        );
        let log = self.dir.path().join("log");
        let ok = self.run(
            "pg_ctl",
            &[
                "-D",
                self.data().to_str().unwrap(),
                "-l",
                log.to_str().unwrap(),
                "-w",
                "-t",
                "60",
                "-o",
                &options,
                "start",
            ],
        );
        assert!(
            ok,
            "pg_ctl start failed: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    }

    /// A crash: every backend killed, no checkpoint.
    fn stop_immediately(&self) {
        let ok = self.run(
            "pg_ctl",
            &[
                "-D",
                self.data().to_str().unwrap(),
                "-m",
                "immediate",
                "-w",
                "stop",
            ],
        );
        assert!(ok, "pg_ctl stop failed");
    }

    fn url(&self) -> String {
        format!("postgres://partyflow@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        let _ = self.run(
            "pg_ctl",
            &[
                "-D",
                self.data().to_str().unwrap(),
                "-m",
                "immediate",
                "-w",
                "stop",
            ],
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_stopped_under_a_publisher_answers_503_quickly_and_loses_no_accepted_event_once_it_is_back(
) {
    let Some(pg) = PgCluster::create() else {
        eprintln!(
            "no PostgreSQL binaries under /usr/lib/postgresql: PostgreSQL outage test SKIPPED"
        );
        return;
    };
    let Load {
        app,
        rx,
        t0,
        stop,
        publisher,
    } = under_load(&pg.url()).await;

    pg.stop_immediately();
    let down_at = t0.elapsed();
    let cpu_before = process_cpu_seconds();
    let mut probes = Vec::new();
    while t0.elapsed() < down_at + Duration::from_secs(5) {
        probes.push(readyz(&app).await);
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // The engine backs off instead of spinning: the whole process (with the publisher's
    // 200 requests/s, in a debug build: about half a core) stays below one core, which a
    // busy retry loop alone would take.
    let cpu_share = (process_cpu_seconds() - cpu_before) / (t0.elapsed() - down_at).as_secs_f64();
    pg.start();
    let up_at = t0.elapsed();
    // Back by itself: ready again, and publishes accepted again.
    eventually(20, || async {
        (readyz(&app).await.0 == Some(200)).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::SeqCst);
    let answers = publisher.await.unwrap();

    eprintln!("readyz while PostgreSQL was down: {probes:?}; CPU used: {cpu_share:.2} of a core");
    assert!(
        cpu_share < 0.9,
        "{cpu_share:.2} of a core while the database was down"
    );
    for (status, took) in &probes {
        assert_eq!(
            *status,
            Some(503),
            "readyz while the database is down: {probes:?}"
        );
        assert!(*took < Duration::from_millis(1500), "readyz took {took:?}");
    }
    let accepted = check_answers(&answers, "PostgreSQL outage");
    assert!(
        answers
            .iter()
            .any(|a| a.status == Some(202) && a.sent > up_at),
        "no publish was accepted after PostgreSQL came back"
    );
    assert!(
        answers
            .iter()
            .any(|a| a.status == Some(202) && a.sent < down_at),
        "no publish was accepted before the outage"
    );
    wait_until_all_delivered(&rx, &accepted, "PostgreSQL outage").await;
    app.stop().await;
}

// ---------------------------------------------------------------- SQLite, full disk

/// A tmpfs of `size` mounted on a temporary folder; unmounted when dropped.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Option<Tmpfs> {
        let dir = tempfile::Builder::new()
            .prefix("full-disk-")
            .tempdir()
            .unwrap();
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        mounted.then_some(Tmpfs { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// Writes zeros to `path` until the filesystem refuses: the disk is full.
fn fill(path: &Path) -> u64 {
    use std::io::Write as _;
    let mut file = std::fs::File::create(path).unwrap();
    let mut written = 0;
    for chunk in [1 << 20, 4096, 512] {
        let zeros = vec![0u8; chunk];
        while file.write_all(&zeros).is_ok() {
            written += chunk as u64;
        }
    }
    let _ = file.sync_all();
    written
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_on_a_full_disk_answers_503_and_resumes_by_itself_once_space_is_freed() {
    // Larger than the WAL under steady writes (up to 40 MiB, `storage::checkpoint`) and the
    // database: on a smaller disk the WAL alone fills it, and freeing the filler below
    // frees nothing (seen with 24 MiB).
    let Some(disk) = Tmpfs::mount("96m") else {
        eprintln!("cannot mount a tmpfs here (not root?): SQLite full-disk test SKIPPED");
        return;
    };
    let url = format!("sqlite://{}/partyflow.db", disk.path().display());
    let Load {
        app,
        rx,
        t0,
        stop,
        publisher,
    } = under_load(&url).await;

    let filler = disk.path().join("filler");
    let filled = fill(&filler);
    let full_at = t0.elapsed();
    // Publishes keep coming; once SQLite needs a page it has not got, they answer 503.
    eventually(15, || async {
        let (status, json) = app
            .post("/events", json!({"type": "probe", "payload": {}}))
            .await;
        assert!(status == 202 || status == 503, "{status} {json}");
        (status == 503).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    std::fs::remove_file(&filler).unwrap();
    let freed_at = t0.elapsed();
    // No restart: publishes are accepted again by themselves.
    eventually(15, || async {
        let (status, json) = app
            .post("/events", json!({"type": "probe", "payload": {}}))
            .await;
        assert!(status == 202 || status == 503, "{status} {json}");
        (status == 202).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::SeqCst);
    let answers = publisher.await.unwrap();

    eprintln!(
        "filled the disk with {} MiB at {full_at:?}, freed it at {freed_at:?}",
        filled >> 20
    );
    let accepted = check_answers(&answers, "SQLite full disk");
    assert!(
        answers
            .iter()
            .any(|a| a.status == Some(202) && a.sent > freed_at),
        "no publish was accepted after the space was freed"
    );
    wait_until_all_delivered(&rx, &accepted, "SQLite full disk").await;
    app.stop().await;

    // No corruption.
    let check: String = sqlx::query_scalar("PRAGMA integrity_check")
        .fetch_one(&sqlx::SqlitePool::connect(&url).await.unwrap())
        .await
        .unwrap();
    assert_eq!(check, "ok");
}
