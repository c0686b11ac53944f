//! Prometheus metrics (docs §8 "Metrics"): events published through the real server to
//! a real receiver (a 2xx, a 503 and a 404), the metrics listener scraped over HTTP and
//! read with a real Prometheus text parser (`prometheus-parse`); the public listener
//! has no `/metrics`; no label carries an ID or a URL; the Grafana dashboard and the
//! alert rules use only names the scrape has; and, with `PARTYFLOW_TEST_PROMTOOL=1`
//! (set by `./dev test`), `promtool` checks a scrape and the rules.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use prometheus_parse::{Sample, Scrape, Value};
use serde_json::json;

use crate::on_both_backends;
use server::testkit::*;

/// A test server whose metrics listener is on a free loopback port.
async fn app_with_metrics(db: &TestDb) -> TestApp {
    let mut config = test_config(&db.url);
    config.metrics_listen = "127.0.0.1:0".into();
    spawn_app_with_config(db, config).await.with_space().await
}

async fn scrape_text(app: &TestApp) -> String {
    let addr = app.metrics_addr.expect("the metrics listener is on");
    let resp = reqwest::get(format!("http://{addr}/metrics"))
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let kind = resp.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(kind.starts_with("text/plain"), "{kind}");
    resp.text().await.unwrap()
}

/// Parses a scrape. `prometheus-parse` reads a sample's labels up to the first `}`, so the
/// braces inside quoted label values (route templates: `/v1/projects/{project}/events`)
/// are swapped for `⟨` `⟩` first ([`braces`]); the text itself is left to promtool.
fn parse(text: &str) -> Scrape {
    let mut quoted = false;
    let safe: String = text
        .chars()
        .map(|c| match c {
            '"' => {
                quoted = !quoted;
                c
            }
            '{' if quoted => '⟨',
            '}' if quoted => '⟩',
            _ => c,
        })
        .collect();
    Scrape::parse(safe.lines().map(|l| Ok(l.to_owned()))).expect("a valid Prometheus text scrape")
}

/// A label value as [`parse`] keeps it.
fn braces(value: &str) -> String {
    value.replace('{', "⟨").replace('}', "⟩")
}

/// The samples of `name` whose labels include every pair of `labels`.
fn matching<'a>(s: &'a Scrape, name: &str, labels: &[(&str, &str)]) -> Vec<&'a Sample> {
    s.samples
        .iter()
        .filter(|x| x.metric == name)
        .filter(|x| {
            labels
                .iter()
                .all(|(k, v)| x.labels.get(k) == Some(braces(v).as_str()))
        })
        .collect()
}

/// The one value of a counter or gauge (the sum over the matching series).
fn value(s: &Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    let found = matching(s, name, labels);
    let there: Vec<String> = matching(s, name, &[])
        .iter()
        .map(|x| x.labels.to_string())
        .collect();
    assert!(
        !found.is_empty(),
        "no {name}{labels:?} in the scrape; it has {there:?}"
    );
    found
        .iter()
        .map(|x| match &x.value {
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => *v,
            other => panic!("{name} is not a counter or gauge: {other:?}"),
        })
        .sum()
}

/// How many observations a histogram has (the `+Inf` bucket), over the matching series.
fn observations(s: &Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    let found = matching(s, name, labels);
    assert!(
        !found.is_empty(),
        "no histogram {name}{labels:?} in the scrape"
    );
    found
        .iter()
        .map(|x| match &x.value {
            Value::Histogram(buckets) => buckets
                .iter()
                .find(|b| b.less_than.is_infinite())
                .map_or(0.0, |b| b.count),
            other => panic!("{name} is not a histogram: {other:?}"),
        })
        .sum()
}

/// Every metric name in a scrape's text (`_bucket`, `_sum`, `_count` folded into their histogram).
fn names_in(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l.split(['{', ' ']).next().unwrap())
        .map(base_name)
        .collect()
}

fn base_name(name: &str) -> String {
    ["_bucket", "_sum", "_count"]
        .iter()
        .find_map(|s| name.strip_suffix(s))
        .unwrap_or(name)
        .to_owned()
}

/// Every `partyflow_…` name in a PromQL expression.
fn names_in_expr(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("partyflow_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_lowercase() || c == '_'))
            .unwrap_or(tail.len());
        names.push(base_name(&tail[..end]));
        rest = &tail[end..];
    }
    names
}

fn repo_file(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

/// The PromQL expressions of the Grafana dashboard (every `expr` of every panel target).
fn dashboard_exprs() -> Vec<String> {
    fn walk(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(map) => {
                for (k, v) in map {
                    match (k.as_str(), v) {
                        ("expr", serde_json::Value::String(e)) => out.push(e.clone()),
                        _ => walk(v, out),
                    }
                }
            }
            serde_json::Value::Array(items) => items.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    let text = std::fs::read_to_string(repo_file("ops/grafana/partyflow.json")).unwrap();
    let dashboard: serde_json::Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    assert!(dashboard["panels"]
        .as_array()
        .is_some_and(|p| !p.is_empty()));
    let mut exprs = Vec::new();
    walk(&dashboard, &mut exprs);
    exprs
}

/// The expressions of the alert rules (`expr:` keys; each rule's expression on one line).
fn rule_exprs() -> Vec<String> {
    let text = std::fs::read_to_string(repo_file("ops/prometheus/alerts.yml")).unwrap();
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("expr:"))
        .map(|e| e.trim().to_owned())
        .collect()
}

/// Publishes one event to three destinations — one answers 200, one 503 (one attempt
/// allowed), one 404 — and waits for the three deliveries to finish; then one request
/// each to an unknown incoming webhook and the bot API with a wrong token (both 401).
async fn traffic(app: &TestApp, rx: &Receiver) -> String {
    rx.reply_at("/busy", Reply::status(503));
    rx.reply_at("/gone", Reply::status(404));
    for path in ["/ok", "/busy", "/gone"] {
        app.destination(json!({"url": rx.url(path), "maxAttempts": 1}))
            .await;
    }
    let event = app.publish("order.created", json!({"n": 1})).await;
    eventually(30, || async {
        let ds = app.deliveries_of(&event).await;
        (ds.len() == 3
            && ds
                .iter()
                .all(|d| d["status"] == "succeeded" || d["status"] == "failed"))
        .then_some(())
    })
    .await;
    // An incoming webhook and a bot that do not exist: their requests are counted too.
    let client = reqwest::Client::new();
    let hook = client
        .post(app.url("/hooks/iwh_01jd0000000000000000000000/pfh_nope"))
        .json(&json!({"text": "hi"}))
        .send()
        .await
        .unwrap();
    assert_eq!(hook.status(), 401);
    let bot = client
        .post(app.url("/v1/bot/channels/chn_01jd0000000000000000000000/messages"))
        .header("authorization", "Bot pfb_nope")
        .json(&json!({"text": "hi"}))
        .send()
        .await
        .unwrap();
    assert_eq!(bot.status(), 401);
    event
}

on_both_backends! {
    async fn the_metrics_listener_counts_deliveries_attempts_and_requests_without_tenant_labels(db) {
        let app = app_with_metrics(&db).await;
        // Before any traffic the engine's series are there already (at 0 in a process of its own).
        let before = parse(&scrape_text(&app).await);
        value(&before, "partyflow_deliveries_finished_total", &[("outcome", "succeeded")]);
        let rx = Receiver::start().await;
        traffic(&app, &rx).await;
        let client = reqwest::Client::new();
        // The public listener never serves the metrics.
        let public = client.get(app.url("/metrics")).send().await.unwrap();
        assert_eq!(public.status(), 404);
        let unknown = client.get(app.url("/v1/nope-42")).send().await.unwrap();
        assert_eq!(unknown.status(), 404);

        let text = scrape_text(&app).await;
        let s = parse(&text);
        let at_least = |name: &str, labels: &[(&str, &str)], n: f64| {
            let got = value(&s, name, labels);
            assert!(got >= n, "{name}{labels:?} is {got}, expected at least {n}");
        };
        at_least("partyflow_events_published_total", &[("source", "api")], 1.0);
        at_least("partyflow_deliveries_finished_total", &[("outcome", "succeeded")], 1.0);
        at_least("partyflow_deliveries_finished_total", &[("outcome", "failed")], 2.0);
        at_least("partyflow_attempts_total", &[("error_class", "none")], 1.0);
        at_least("partyflow_attempts_total", &[("error_class", "http")], 2.0);
        assert!(observations(&s, "partyflow_attempt_duration_seconds", &[]) >= 3.0);
        assert!(observations(&s, "partyflow_first_attempt_lag_seconds", &[]) >= 3.0);
        for scope in ["destination", "plan"] {
            at_least("partyflow_deliveries_held_back_total", &[("scope", scope)], 0.0);
        }
        // Nothing waits any more; the gauges are there, one series per state.
        for status in ["pending", "retrying", "sending", "paused"] {
            assert_eq!(value(&s, "partyflow_queue_deliveries", &[("status", status)]), 0.0, "{status}");
        }
        assert_eq!(value(&s, "partyflow_queue_oldest_due_age_seconds", &[]), 0.0);
        at_least("partyflow_attempts_in_flight", &[], 0.0);
        at_least("partyflow_auto_disables_total", &[("kind", "destination")], 0.0);
        at_least("partyflow_incoming_webhook_requests_total", &[("status", "401")], 1.0);
        at_least("partyflow_bot_requests_total", &[("status", "401")], 1.0);
        let publish_route = [
            ("method", "POST"),
            ("route", "/v1/projects/{project}/events"),
            ("status", "202"),
        ];
        at_least("partyflow_http_requests_total", &publish_route, 1.0);
        assert!(observations(
            &s,
            "partyflow_http_request_duration_seconds",
            &[("method", "POST"), ("route", "/v1/projects/{project}/events")]
        ) >= 1.0);
        // The public /metrics and an unknown path: counted, never under the raw path.
        at_least("partyflow_http_requests_total", &[("status", "404")], 2.0);
        assert!(
            matching(&s, "partyflow_http_requests_total", &[])
                .iter()
                .all(|x| !x.labels.get("route").unwrap_or("").contains("nope")),
            "a raw path became a route label"
        );
        at_least("partyflow_db_pool_connections", &[("pool", "main"), ("state", "idle")], 0.0);
        at_least("partyflow_db_pool_max_connections", &[("pool", "main")], 1.0);
        // Every write transaction's wait for its connection (SQLite: the write gate) and its
        // hold on it: the destinations made (full), the publish (deferred), the engine's.
        for durability in ["full", "deferred", "engine"] {
            for name in ["partyflow_db_write_wait_seconds", "partyflow_db_write_held_seconds"] {
                let n = observations(&s, name, &[("durability", durability)]);
                assert!(n >= 1.0, "{name}{{durability={durability}}}: {n}");
            }
        }
        assert_eq!(value(&s, "partyflow_ready", &[]), 1.0);
        assert_eq!(value(&s, "partyflow_build_info", &[]), 1.0);

        // No label value is an ID, a URL or an address: the series do not grow with tenants.
        let space = app.space.clone().unwrap();
        for sample in &s.samples {
            for (k, v) in sample.labels.iter() {
                let tenant = ["spc_", "dst_", "evt_", "dlv_", "iwh_", "chn_", "bot_", "key_", "http://", "https://", "127.0.0.1"]
                    .iter()
                    .any(|p| v.contains(p))
                    || v.contains(&space)
                    || v.contains(&rx.url(""));
                assert!(!tenant, "{}{{{k}={v:?}}} carries a tenant's ID or URL", sample.metric);
            }
        }
        app.stop().await;
    }
}

on_both_backends! {
    async fn the_queue_gauges_count_waiting_deliveries_and_the_oldest_due_age(db) {
        let mut config = test_config(&db.url);
        config.metrics_listen = "127.0.0.1:0".into();
        // No engine: what is published stays waiting.
        config.dispatch.enabled = false;
        let app = spawn_app_with_config(&db, config).await.with_space().await;
        app.destination(json!({"url": "http://127.0.0.1:9/never"})).await;
        for n in 0..3 {
            app.publish("order.created", json!({ "n": n })).await;
        }
        tokio::time::sleep(std::time::Duration::from_millis(1_200)).await;
        let s = parse(&scrape_text(&app).await);
        assert_eq!(value(&s, "partyflow_queue_deliveries", &[("status", "pending")]), 3.0);
        assert_eq!(value(&s, "partyflow_queue_deliveries", &[("status", "retrying")]), 0.0);
        assert_eq!(value(&s, "partyflow_queue_deliveries", &[("status", "sending")]), 0.0);
        let age = value(&s, "partyflow_queue_oldest_due_age_seconds", &[]);
        assert!((1.0..60.0).contains(&age), "oldest due age {age}");
        app.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_and_the_alert_rules_use_only_names_the_server_exposes() {
    let db = fresh_db(Db::Sqlite).await.unwrap();
    let app = app_with_metrics(&db).await;
    let rx = Receiver::start().await;
    traffic(&app, &rx).await;
    let scraped = names_in(&scrape_text(&app).await);
    app.stop().await;
    // Described by us, recorded by the retention task only once it has purged something.
    let recorded_later = [server::metrics::RETENTION_PURGED_ROWS.to_owned()];
    let known: BTreeSet<String> = server::metrics::ALL.iter().map(|n| n.to_string()).collect();
    for name in &scraped {
        assert!(
            known.contains(name),
            "{name} is exposed but not in metrics::ALL"
        );
    }
    let dashboard = dashboard_exprs();
    let rules = rule_exprs();
    assert!(dashboard.len() >= 12, "{dashboard:?}");
    assert!(rules.len() >= 4, "{rules:?}");
    let mut used = BTreeSet::new();
    for expr in dashboard.iter().chain(&rules) {
        let names = names_in_expr(expr);
        // Only "down" may rest on Prometheus's own `up` alone.
        assert!(
            !names.is_empty() || expr.starts_with("up{"),
            "{expr:?} uses no partyflow_ metric"
        );
        for name in names {
            assert!(
                scraped.contains(&name) || recorded_later.contains(&name),
                "{expr:?} uses {name}, which the server does not expose"
            );
            used.insert(name);
        }
    }
    // The dashboard shows every metric there is.
    for name in &known {
        assert!(
            used.contains(name),
            "{name} is on no dashboard panel nor in any rule"
        );
    }
    // And docs §8 documents each.
    let docs = std::fs::read_to_string(repo_file("docs/8-operations.md")).unwrap();
    for name in &known {
        assert!(
            docs.contains(&format!("`{name}`")),
            "docs/8-operations.md does not document {name}"
        );
    }
}

/// `promtool` (Debian's `prometheus` package; `./dev test` installs it and sets
/// `PARTYFLOW_TEST_PROMTOOL=1`) on a real scrape, on the rules and on their unit tests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promtool_finds_nothing_wrong_with_a_scrape_or_the_alert_rules() {
    if std::env::var("PARTYFLOW_TEST_PROMTOOL").as_deref() != Ok("1") {
        eprintln!("PARTYFLOW_TEST_PROMTOOL is not 1: the promtool checks are SKIPPED");
        return;
    }
    let db = fresh_db(Db::Sqlite).await.unwrap();
    let app = app_with_metrics(&db).await;
    let rx = Receiver::start().await;
    traffic(&app, &rx).await;
    let text = scrape_text(&app).await;
    app.stop().await;

    let promtool = |args: &[&str], stdin: Option<&str>| {
        use std::io::Write as _;
        let mut child = std::process::Command::new("promtool")
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("promtool runs (Debian's prometheus package)");
        let mut input = child.stdin.take().unwrap();
        input.write_all(stdin.unwrap_or("").as_bytes()).unwrap();
        drop(input);
        let out = child.wait_with_output().unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), said)
    };
    // `check metrics` prints every lint problem and fails on any.
    let (ok, said) = promtool(&["check", "metrics"], Some(&text));
    assert!(
        ok && said.trim().is_empty(),
        "promtool check metrics:\n{said}\n--- scrape:\n{text}"
    );
    let rules = repo_file("ops/prometheus/alerts.yml");
    let (ok, said) = promtool(&["check", "rules", rules.to_str().unwrap()], None);
    assert!(
        ok && !said.contains("WARNING"),
        "promtool check rules:\n{said}"
    );
    let tests = repo_file("ops/prometheus/alerts_test.yml");
    let (ok, said) = promtool(&["test", "rules", tests.to_str().unwrap()], None);
    assert!(ok, "promtool test rules:\n{said}");
}

#[test]
fn names_are_read_from_expressions_without_their_histogram_suffixes() {
    assert_eq!(
        names_in_expr("histogram_quantile(0.99, sum by (le) (rate(partyflow_attempt_duration_seconds_bucket[5m])))"),
        ["partyflow_attempt_duration_seconds"]
    );
    assert_eq!(
        names_in_expr("sum(rate(partyflow_a_total[5m])) / sum(rate(partyflow_b_count[5m]))"),
        ["partyflow_a_total", "partyflow_b"]
    );
}

on_both_backends! {
    /// A flood to one destination that answers at once (docs §2.5). On SQLite the records
    /// claim ahead for it: what they claim waits in memory for one of the five slots and
    /// goes out as each attempt ends (counted as `sent`). On both backends the receiver
    /// never sees a sixth request at once, nor a delivery twice, and every one succeeds.
    async fn a_flood_to_a_fast_destination_is_claimed_ahead_and_never_has_a_sixth_in_flight(db) {
        const EVENTS: usize = 600;
        const PUBLISHERS: usize = 6;
        let app = app_with_metrics(&db).await;
        let rx = Receiver::start().await;
        app.destination(json!({"url": rx.url("/fast")})).await;
        let before = parse(&scrape_text(&app).await);
        let succeeded_before =
            value(&before, "partyflow_deliveries_finished_total", &[("outcome", "succeeded")]);
        let sent_before =
            value(&before, "partyflow_deliveries_claimed_ahead_total", &[("outcome", "sent")]);
        let mut publishers = Vec::new();
        for p in 0..PUBLISHERS {
            let (url, key) = (app.api("/events"), app.api_key.clone().unwrap());
            publishers.push(tokio::spawn(async move {
                let client = reqwest::Client::new();
                for i in 0..EVENTS / PUBLISHERS {
                    let resp = client
                        .post(&url)
                        .bearer_auth(&key)
                        .json(&json!({"type": "x", "payload": {"p": p, "i": i}}))
                        .send()
                        .await
                        .unwrap();
                    assert_eq!(resp.status(), 202);
                }
            }));
        }
        for p in publishers {
            p.await.unwrap();
        }
        // Every delivery recorded as succeeded.
        let scrape = eventually(120, || async {
            let s = parse(&scrape_text(&app).await);
            let succeeded =
                value(&s, "partyflow_deliveries_finished_total", &[("outcome", "succeeded")]);
            (succeeded - succeeded_before >= EVENTS as f64).then_some(s)
        })
        .await;
        let got = rx.received();
        let ids: BTreeSet<String> = got.iter().map(|r| r.header("webhook-id")).collect();
        assert_eq!(ids.len(), EVENTS, "every event delivered");
        assert_eq!(got.len(), EVENTS, "none delivered twice");
        assert_eq!(rx.overlaps(), 0, "no delivery in flight twice");
        assert!(rx.max_in_flight() <= 5, "a sixth request in flight: {}", rx.max_in_flight());
        let (status, sending) = app.get("/deliveries?status=sending").await;
        assert_eq!(status, 200);
        assert!(sending["data"].as_array().unwrap().is_empty(), "none left claimed: {sending}");
        let sent = value(&scrape, "partyflow_deliveries_claimed_ahead_total", &[("outcome", "sent")]);
        assert!(sent > sent_before, "nothing was claimed ahead");
        app.stop().await;
    }
}
