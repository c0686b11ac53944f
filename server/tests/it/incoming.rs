//! Incoming webhooks end to end (docs §3): senders post to `/hooks/{id}/{token}` of
//! the real server; rate limits per webhook by plan, signatures, the failure streak
//! and auto-disable, and a sender that follows the seed's retry advice.
//!
//! Rate limits are judged by counts: a burst is fired all at once at a fresh limiter,
//! and when all its answers came within one window exactly the limit must have been
//! accepted (see [`judge`]).

use std::future::Future;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use server::dispatch::signing;
use server::domain::Plan;

use crate::on_both_backends;
use server::testkit::{spawn_app, spawn_app_with_config, test_config, Receiver, Reply, TestApp};

/// The window of every rate limit in docs §3 and §4.
pub const WINDOW: Duration = Duration::from_secs(1);

/// A space of one plan with its own API key, called over HTTP as an integration would.
pub struct Project {
    pub id: String,
    pub key: String,
    base: String,
    client: reqwest::Client,
}

impl Project {
    pub async fn create(app: &TestApp, plan: Plan) -> Project {
        let created = server::ops::tenants::create_space(
            app.storage.as_ref(),
            &format!("{plan} space"),
            plan,
        )
        .await
        .unwrap();
        Project {
            id: created.space.id.to_string(),
            key: created.api_key,
            base: app.url(""),
            client: reqwest::Client::new(),
        }
    }

    /// The space of [`TestApp::with_space`] (enterprise).
    pub fn of(app: &TestApp) -> Project {
        Project {
            id: app.space.clone().unwrap(),
            key: app.api_key.clone().unwrap(),
            base: app.url(""),
            client: reqwest::Client::new(),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// `/v1/projects/{this space}` + `path`.
    pub fn api(&self, path: &str) -> String {
        self.url(&format!("/v1/projects/{}{}", self.id, path))
    }

    /// Calls `url` (a whole URL) with this space's API key.
    pub async fn call(
        &self,
        method: reqwest::Method,
        url: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut req = self.client.request(method, url).bearer_auth(&self.key);
        if let Some(body) = body {
            req = req.json(&body);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.call(reqwest::Method::POST, &self.api(path), Some(body))
            .await
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        self.call(reqwest::Method::GET, &self.api(path), None).await
    }

    pub async fn delete(&self, path: &str) -> (u16, Value) {
        self.call(reqwest::Method::DELETE, &self.api(path), None)
            .await
    }

    /// Creates a channel and returns its ID.
    pub async fn channel(&self, name: &str) -> String {
        let (status, json) = self.post("/channels", json!({"name": name})).await;
        assert_eq!(status, 201, "{json}");
        json["id"].as_str().unwrap().to_owned()
    }

    /// Creates an incoming webhook into `channel` (`extra` adds fields) and returns its JSON.
    pub async fn webhook(&self, channel: &str, extra: Value) -> Value {
        let mut body = json!({"channelId": channel, "name": "ci"});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().cloned().unwrap_or_default());
        let (status, json) = self.post("/incoming-webhooks", body).await;
        assert_eq!(status, 201, "{json}");
        json
    }

    /// The webhook as the API shows it now.
    pub async fn webhook_now(&self, id: &str) -> Value {
        let (status, json) = self.get(&format!("/incoming-webhooks/{id}")).await;
        assert_eq!(status, 200, "{json}");
        json
    }

    /// Every message of `channel`, newest first, following `nextCursor` to the end.
    pub async fn messages(&self, channel: &str) -> Vec<Value> {
        let mut all = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let query = cursor.map(|c| format!("&cursor={c}")).unwrap_or_default();
            let (status, page) = self
                .get(&format!("/channels/{channel}/messages?limit=100{query}"))
                .await;
            assert_eq!(status, 200, "{page}");
            all.extend(page["data"].as_array().unwrap().iter().cloned());
            match page["nextCursor"].as_str() {
                Some(next) => cursor = Some(next.to_owned()),
                None => return all,
            }
        }
    }
}

/// One answer of the server, with what the tests look at.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub retry_after: Option<String>,
    pub json: Value,
    /// When the answer's head arrived.
    pub at: Instant,
}

impl Answer {
    pub async fn of(resp: reqwest::Response) -> Answer {
        let at = Instant::now();
        let status = resp.status().as_u16();
        let retry_after = resp
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap().to_owned());
        let json = resp.json().await.unwrap_or(Value::Null);
        Answer {
            status,
            retry_after,
            json,
            at,
        }
    }

    pub fn code(&self) -> &str {
        self.json["code"].as_str().unwrap_or_default()
    }
}

/// A JSON POST of `body` to `url` with extra `headers`, not yet sent.
pub fn request(
    client: &reqwest::Client,
    url: &str,
    body: &str,
    headers: &[(&str, String)],
) -> reqwest::RequestBuilder {
    let mut req = client
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_owned());
    for (name, value) in headers {
        req = req.header(*name, value);
    }
    req
}

/// POSTs `body` to an incoming webhook's `url`.
pub async fn hook(url: &str, body: &str, headers: &[(&str, String)]) -> Answer {
    let resp = request(&reqwest::Client::new(), url, body, headers)
        .send()
        .await
        .unwrap();
    Answer::of(resp).await
}

/// Extra request headers: name and value.
pub type Headers = Vec<(&'static str, String)>;

/// Standard Webhooks headers for `body`, signed with `secret` at `timestamp`.
pub fn signed_at(secret: &str, msg_id: &str, timestamp: i64, body: &str) -> Headers {
    vec![
        ("webhook-id", msg_id.to_owned()),
        ("webhook-timestamp", timestamp.to_string()),
        (
            "webhook-signature",
            signing::sign(secret, msg_id, timestamp, body.as_bytes()).unwrap(),
        ),
    ]
}

/// Signed now, with a fresh `webhook-id`.
pub fn signed(secret: &str, body: &str) -> Headers {
    let msg_id = format!("msg_{}", ulid::Ulid::new());
    signed_at(secret, &msg_id, server::clock::now_ms() / 1000, body)
}

fn text(t: &str) -> String {
    json!({ "text": t }).to_string()
}

/// Sends all `requests` at once; returns their answers (in order) and the moment
/// just before the first was sent.
pub async fn burst(requests: Vec<reqwest::RequestBuilder>) -> (Vec<Answer>, Instant) {
    let start = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for (i, req) in requests.into_iter().enumerate() {
        set.spawn(async move { (i, Answer::of(req.send().await.unwrap()).await) });
    }
    let mut answers = Vec::new();
    while let Some(done) = set.join_next().await {
        answers.push(done.unwrap());
    }
    answers.sort_by_key(|(i, _)| *i);
    (answers.into_iter().map(|(_, a)| a).collect(), start)
}

/// Judges by counts a burst sent at `start` to one fresh limiter of `limit` per second.
///
/// What holds however the machine schedules it: every answer is a 201 or a 429 with
/// `Retry-After: 1` (the wait, in whole seconds, is never more than the one-second
/// window); the first `limit` are accepted; and of the requests answered within one
/// window of `start` (so counted within it), at most `limit` were accepted. When the
/// whole burst was answered within that window, this means exactly `limit`: that is
/// asserted and `true` returned. A burst the machine spread over more than a window
/// is bounded (at most `limit` per window it spanned) and `false` returned.
pub fn judge(answers: &[Answer], start: Instant, limit: usize) -> bool {
    let accepted = answers.iter().filter(|a| a.status == 201).count();
    for a in answers.iter().filter(|a| a.status != 201) {
        assert_eq!(a.status, 429, "only 201 or 429 in a burst: {a:?}");
        assert_eq!(a.code(), "rate_limited", "{a:?}");
        assert_eq!(
            a.retry_after.as_deref(),
            Some("1"),
            "whole seconds, at least 1: {a:?}"
        );
    }
    assert!(
        accepted >= limit,
        "the first {limit} are accepted; got {accepted}"
    );
    let in_first_window = answers
        .iter()
        .filter(|a| a.status == 201 && a.at - start < WINDOW)
        .count();
    assert!(
        in_first_window <= limit,
        "{in_first_window} accepted within one window of the burst's start"
    );
    let elapsed = answers
        .iter()
        .map(|a| a.at - start)
        .max()
        .unwrap_or_default();
    if elapsed < WINDOW {
        assert_eq!(
            accepted, limit,
            "a burst answered within one window ({elapsed:?}) gets exactly the limit"
        );
        true
    } else {
        let windows = elapsed.as_millis() as usize / 1000 + 1;
        assert!(
            accepted <= limit * windows,
            "{accepted} accepted over {elapsed:?}"
        );
        false
    }
}

/// How many bursts [`measure_burst`] fires while looking for one answered within a window.
const BURST_TRIES: usize = 4;

/// Fires, all at once, 3× `limit` requests at each of the limiters that `fresh` sets
/// up (it makes new ones on every call and returns them with their requests, all
/// made with `client`), and [`judge`]s each.
///
/// The client first opens as many connections to `healthz` as the burst needs, so
/// the burst itself is only requests. While the machine (e.g. the whole suite in
/// parallel on two cores) spreads a burst over more than one window, it tries again
/// with new limiters; after [`BURST_TRIES`] such bursts it settles for the bounds
/// every one of them met. Returns the limiters of the last burst (their slots are
/// just used up) and how many requests each accepted.
pub async fn measure_burst<T, F, Fut>(
    client: &reqwest::Client,
    healthz: &str,
    limit: usize,
    mut fresh: F,
) -> (T, Vec<usize>)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = (T, Vec<Vec<reqwest::RequestBuilder>>)>,
{
    let mut attempt = 1;
    loop {
        let (target, groups) = fresh().await;
        let sizes: Vec<usize> = groups.iter().map(Vec::len).collect();
        assert!(sizes.iter().all(|&n| n == 3 * limit));
        let warm_up = (0..sizes.iter().sum::<usize>())
            .map(|_| client.get(healthz))
            .collect();
        burst(warm_up).await;
        let (answers, start) = burst(groups.into_iter().flatten().collect()).await;
        let mut exact = true;
        let mut from = 0;
        let mut accepted = Vec::new();
        for n in sizes {
            let group = &answers[from..from + n];
            exact &= judge(group, start, limit);
            accepted.push(group.iter().filter(|a| a.status == 201).count());
            from += n;
        }
        if exact {
            return (target, accepted);
        }
        let took = answers
            .iter()
            .map(|a| a.at - start)
            .max()
            .unwrap_or_default();
        if attempt == BURST_TRIES {
            eprintln!("no burst was answered within one window in {BURST_TRIES} tries (the last took {took:?}); \
                       each met the bounds of a spread burst");
            return (target, accepted);
        }
        eprintln!(
            "burst {attempt} took {took:?}, more than one window; trying again with fresh limiters"
        );
        attempt += 1;
    }
}

on_both_backends! {
    async fn each_plan_accepts_exactly_its_rate_per_webhook_in_a_burst_and_429s_the_rest_with_retry_after(db) {
        // The real default numbers: free 5, pro 10, enterprise 30 per second (docs §3).
        let app = spawn_app(&db).await;
        let client = reqwest::Client::new();
        for (plan, limit) in [(Plan::Free, 5), (Plan::Pro, 10), (Plan::Enterprise, 30)] {
            let p = Project::create(&app, plan).await;
            let channel = p.channel("alerts").await;
            let (hook_url, _) = measure_burst(&client, &app.url("/healthz"), limit, || async {
                let w = p.webhook(&channel, json!({})).await;
                assert_eq!(w["ratePerSecond"], limit as i64, "{plan}");
                let url = w["url"].as_str().unwrap().to_owned();
                let reqs = (0..3 * limit).map(|i| request(&client, &url, &text(&format!("m{i}")), &[])).collect();
                ((url, w["id"].as_str().unwrap().to_owned()), vec![reqs])
            })
            .await;
            let (url, id) = hook_url;
            // 429s are not failures (D7).
            let w = p.webhook_now(&id).await;
            assert_eq!(w["consecutiveFailures"], 0, "{w}");
            assert_eq!(w["status"], "active");
            // After the Retry-After (1 s), accepted again.
            tokio::time::sleep(WINDOW).await;
            let again = hook(&url, &text("after the wait"), &[]).await;
            assert_eq!(again.status, 201, "{plan}: {again:?}");
        }
        app.stop().await;
    }
}

on_both_backends! {
    async fn two_webhooks_of_one_space_each_get_the_full_rate(db) {
        let app = spawn_app(&db).await;
        let p = Project::create(&app, Plan::Free).await;
        let channel = p.channel("alerts").await;
        let client = reqwest::Client::new();
        let limit = 5;
        measure_burst(&client, &app.url("/healthz"), limit, || async {
            let mut groups = Vec::new();
            for _ in 0..2 {
                let url = p.webhook(&channel, json!({}))
                    .await["url"].as_str().unwrap().to_owned();
                groups.push((0..3 * limit).map(|i| request(&client, &url, &text(&format!("m{i}")), &[])).collect());
            }
            ((), groups)
        })
        .await;
        app.stop().await;
    }
}

on_both_backends! {
    async fn the_rate_comes_from_the_limits_setting(db) {
        let mut config = test_config(&db.url);
        config.limits.incoming_per_second.pro = 3;
        let app = spawn_app_with_config(&db, config).await;
        let p = Project::create(&app, Plan::Pro).await;
        let channel = p.channel("alerts").await;
        let client = reqwest::Client::new();
        measure_burst(&client, &app.url("/healthz"), 3, || async {
            let w = p.webhook(&channel, json!({})).await;
            assert_eq!(w["ratePerSecond"], 3);
            let url = w["url"].as_str().unwrap().to_owned();
            ((), vec![(0..9).map(|i| request(&client, &url, &text(&format!("m{i}")), &[])).collect()])
        })
        .await;
        app.stop().await;
    }
}

on_both_backends! {
    async fn a_signed_webhook_accepts_a_valid_signature_and_refuses_bad_old_future_and_replayed_ones(db) {
        let app = spawn_app(&db).await.with_space().await;
        let p = Project::of(&app);
        let channel = p.channel("deploys").await;
        let w = p.webhook(&channel, json!({"signingSecret": true})).await;
        let (url, id) = (w["url"].as_str().unwrap(), w["id"].as_str().unwrap());
        assert_eq!(w["signed"], true);
        let secret = w["signingSecret"].as_str().unwrap();
        assert!(secret.starts_with("whsec_"));
        assert!(p.webhook_now(id).await.get("signingSecret").is_none(), "the secret is shown once");

        let body = text("deployed");
        let good = signed(secret, &body);
        let ok = hook(url, &body, &good).await;
        assert_eq!(ok.status, 201, "{ok:?}");
        assert_eq!(ok.json["text"], "deployed");

        let now = server::clock::now_ms() / 1000;
        let fresh_id = || format!("msg_{}", ulid::Ulid::new());
        let other_secret = signing::new_secret();
        let cases: Vec<(&str, String, Headers, &str)> = vec![
            ("another secret", body.clone(), signed(&other_secret, &body), "no signature"),
            ("a tampered body", text("deployed!"), signed(secret, &body), "no signature"),
            ("a timestamp 10 minutes old", body.clone(), signed_at(secret, &fresh_id(), now - 600, &body), "too old"),
            ("a timestamp 10 minutes ahead", body.clone(), signed_at(secret, &fresh_id(), now + 600, &body), "too new"),
            ("a replayed webhook-id", body.clone(), good.clone(), "received before"),
            ("no signature headers", body.clone(), vec![], "webhook-id"),
            ("no webhook-signature", body.clone(), signed(secret, &body)[..2].to_vec(), "webhook-signature"),
        ];
        let refused = cases.len();
        for (what, body, headers, why) in cases {
            let a = hook(url, &body, &headers).await;
            assert_eq!(a.status, 401, "{what}: {a:?}");
            assert_eq!(a.code(), "invalid_signature", "{what}: {a:?}");
            assert!(a.json["message"].as_str().unwrap().contains(why), "{what}: {a:?}");
        }
        // The right token with a bad signature counts (D8); nothing was stored.
        assert_eq!(p.webhook_now(id).await["consecutiveFailures"], refused as i64);
        assert_eq!(p.messages(&channel).await.len(), 1);
        // A valid one resets the streak.
        let body = text("deployed again");
        assert_eq!(hook(url, &body, &signed(secret, &body)).await.status, 201);
        assert_eq!(p.webhook_now(id).await["consecutiveFailures"], 0);

        // A secret of the sender's own choosing works the same; an unsigned webhook ignores the headers.
        let own = signing::new_secret();
        let w2 = p.webhook(&channel, json!({"signingSecret": own})).await;
        assert_eq!(w2["signed"], true);
        assert!(w2.get("signingSecret").is_none(), "a given secret is not echoed");
        let url2 = w2["url"].as_str().unwrap();
        assert_eq!(hook(url2, &body, &signed(&own, &body)).await.status, 201);
        assert_eq!(hook(url2, &body, &signed(secret, &body)).await.status, 401);
        let plain = p.webhook(&channel, json!({})).await;
        assert_eq!(plain["signed"], false);
        assert_eq!(hook(plain["url"].as_str().unwrap(), &body, &signed(&other_secret, &body)).await.status, 201);
        app.stop().await;
    }
}

on_both_backends! {
    async fn a_signed_request_refused_with_429_can_be_sent_again_with_the_same_webhook_id(db) {
        let mut config = test_config(&db.url);
        config.limits.incoming_per_second.free = 1;
        let app = spawn_app_with_config(&db, config).await;
        let p = Project::create(&app, Plan::Free).await;
        let channel = p.channel("c").await;
        let w = p.webhook(&channel, json!({"signingSecret": true})).await;
        let (url, secret) = (w["url"].as_str().unwrap(), w["signingSecret"].as_str().unwrap());
        // Sent back to back, each one takes the only slot, so the next is refused with 429.
        let mut refused = None;
        for i in 0..10 {
            let body = text(&format!("message {i}"));
            let headers = signed(secret, &body);
            let a = hook(url, &body, &headers).await;
            if a.status == 429 {
                refused = Some((body, headers));
                break;
            }
            assert_eq!(a.status, 201, "{a:?}");
        }
        let (body, headers) = refused.expect("back-to-back requests over a limit of 1 per second get a 429");
        tokio::time::sleep(WINDOW).await;
        let retried = hook(url, &body, &headers).await;
        assert_eq!(retried.status, 201, "the same webhook-id after Retry-After: {retried:?}");
        // Once accepted, the same request again is a replay.
        tokio::time::sleep(WINDOW).await;
        let replayed = hook(url, &body, &headers).await;
        assert_eq!((replayed.status, replayed.code()), (401, "invalid_signature"));
        app.stop().await;
    }
}

on_both_backends! {
    async fn a_senders_retry_after_our_own_failure_is_accepted_once_and_a_true_replay_is_refused(db) {
        let app = spawn_app(&db).await.with_space().await;
        let p = Project::of(&app);
        let channel = p.channel("deploys").await;
        let w = p.webhook(&channel, json!({"signingSecret": true})).await;
        let (url, id) = (w["url"].as_str().unwrap(), w["id"].as_str().unwrap());
        let secret = w["signingSecret"].as_str().unwrap();
        let body = text("deployed");
        let headers = signed(secret, &body);

        // Our database refuses the message: 500, and the webhook-id is not remembered.
        crate::helpers::refuse_inserts(&db.url, "messages", "messages_text_check").await;
        let failed = hook(url, &body, &headers).await;
        assert_eq!((failed.status, failed.code()), (500, "internal"), "{failed:?}");
        assert!(failed.json["requestId"].as_str().unwrap().starts_with("req_"));
        assert_eq!(p.webhook_now(id).await["consecutiveFailures"], 1, "our 5xx counts");
        crate::helpers::allow_inserts(&db.url, "messages").await;

        // The sender's retry, the same request with the same webhook-id: accepted.
        let retried = hook(url, &body, &headers).await;
        assert_eq!(retried.status, 201, "{retried:?}");
        assert_eq!(p.webhook_now(id).await["consecutiveFailures"], 0);
        // And again: now it is a replay.
        let replayed = hook(url, &body, &headers).await;
        assert_eq!((replayed.status, replayed.code()), (401, "invalid_signature"), "{replayed:?}");
        assert!(replayed.json["message"].as_str().unwrap().contains("received before"));

        // Exactly one message, with one message.created event.
        let messages = p.messages(&channel).await;
        assert_eq!(messages.len(), 1, "{messages:?}");
        assert_eq!(messages[0]["text"], "deployed");
        let (_, events) = p.get("/events").await;
        let created: Vec<_> = events["data"].as_array().unwrap().iter().filter(|e| e["type"] == "message.created").collect();
        assert_eq!(created.len(), 1, "{events}");
        app.stop().await;
    }
}

on_both_backends! {
    async fn the_same_signed_request_sent_many_times_at_once_becomes_one_message(db) {
        let app = spawn_app(&db).await.with_space().await;
        let p = Project::of(&app);
        let channel = p.channel("deploys").await;
        let w = p.webhook(&channel, json!({"signingSecret": true})).await;
        let (url, secret) = (w["url"].as_str().unwrap(), w["signingSecret"].as_str().unwrap());
        let body = text("once");
        let headers = signed(secret, &body);
        let client = reqwest::Client::new();
        let (answers, _) = burst((0..8).map(|_| request(&client, url, &body, &headers)).collect()).await;
        let mut statuses: Vec<u16> = answers.iter().map(|a| a.status).collect();
        statuses.sort();
        assert_eq!(statuses, [201, 401, 401, 401, 401, 401, 401, 401], "{answers:?}");
        assert_eq!(p.messages(&channel).await.len(), 1);
        app.stop().await;
    }
}

on_both_backends! {
    async fn ninety_nine_failures_then_a_success_reset_the_streak(db) {
        let app = spawn_app(&db).await;
        let p = Project::create(&app, Plan::Free).await;
        let channel = p.channel("c").await;
        let w = p.webhook(&channel, json!({})).await;
        let (url, id) = (w["url"].as_str().unwrap(), w["id"].as_str().unwrap());
        for round in 0..2 {
            for i in 0..99 {
                let a = hook(url, "{not json", &[]).await;
                assert_eq!(a.status, 400, "round {round}, failure {i}: {a:?}");
            }
            let w = p.webhook_now(id).await;
            assert_eq!(w["consecutiveFailures"], 99, "{w}");
            assert_eq!(w["status"], "active");
            let ok = hook(url, &text("fine"), &[]).await;
            assert_eq!(ok.status, 201, "{ok:?}");
            assert_eq!(p.webhook_now(id).await["consecutiveFailures"], 0, "round {round}");
        }
        // 198 failures in all, never 100 in a row: still active.
        assert_eq!(p.webhook_now(id).await["status"], "active");
        app.stop().await;
    }
}

on_both_backends! {
    async fn two_hundred_requests_with_a_wrong_token_never_disable_the_webhook(db) {
        let app = spawn_app(&db).await;
        let p = Project::create(&app, Plan::Free).await;
        let channel = p.channel("c").await;
        let w = p.webhook(&channel, json!({})).await;
        let (url, id) = (w["url"].as_str().unwrap(), w["id"].as_str().unwrap());
        let wrong = format!("{}/pfh_{}", url.rsplit_once('/').unwrap().0, "x".repeat(40));
        let client = reqwest::Client::new();
        for chunk in 0..10 {
            let reqs = (0..20).map(|i| request(&client, &wrong, &text(&format!("{chunk}-{i}")), &[])).collect();
            let (answers, _) = burst(reqs).await;
            for a in answers {
                assert_eq!(a.status, 401, "{a:?}");
                assert_eq!(a.code(), "invalid_token");
            }
        }
        // Unknown and malformed webhook IDs answer the same, so they reveal nothing.
        let unknown = url.replace(id, &format!("iwh_{}", ulid::Ulid::new().to_string().to_lowercase()));
        assert_eq!(hook(&unknown, &text("x"), &[]).await.code(), "invalid_token");
        assert_eq!(hook(&p.url("/hooks/nope/nope"), &text("x"), &[]).await.code(), "invalid_token");

        let w = p.webhook_now(id).await;
        assert_eq!(w["consecutiveFailures"], 0, "a wrong token is not counted (D8): {w}");
        assert_eq!(w["status"], "active");
        assert_eq!(hook(url, &text("still here"), &[]).await.status, 201);
        app.stop().await;
    }
}

on_both_backends! {
    async fn the_hundredth_failure_in_a_row_disables_the_webhook_and_every_later_request_gets_410_until_re_enabled(db) {
        let mut config = test_config(&db.url);
        config.max_body_bytes = 4096;
        config.limits.message_max_chars = 100;
        let app = spawn_app_with_config(&db, config).await;
        let p = Project::create(&app, Plan::Free).await;
        let channel = p.channel("c").await;
        let w = p.webhook(&channel, json!({"signingSecret": true})).await;
        let (url, id) = (w["url"].as_str().unwrap(), w["id"].as_str().unwrap());
        let secret = w["signingSecret"].as_str().unwrap();
        let good = text("hello");

        // Every kind of counted failure, in turn: each answers its own JSON error.
        let failures: Vec<(String, bool, u16, &str)> = vec![
            ("{not json".into(), true, 400, "malformed_json"),
            (json!({"text": "x", "colour": "red"}).to_string(), true, 422, "invalid_body"),
            (json!({"text": 7}).to_string(), true, 422, "invalid_body"),
            (text("   "), true, 422, "empty_text"),
            (text(&"y".repeat(101)), true, 422, "text_too_long"),
            (text(&"z".repeat(5000)), true, 413, "body_too_large"),
            (good.clone(), false, 401, "invalid_signature"),
        ];
        for i in 0..100 {
            let (body, sign, status, code) = &failures[i % failures.len()];
            let headers = if *sign { signed(secret, body) } else { signed(&signing::new_secret(), body) };
            let a = hook(url, body, &headers).await;
            assert_eq!((a.status, a.code()), (*status, *code), "failure {}: {a:?}", i + 1);
            if i == 98 {
                let w = p.webhook_now(id).await;
                assert_eq!((w["status"].as_str(), w["consecutiveFailures"].as_i64()), (Some("active"), Some(99)));
            }
        }
        let w = p.webhook_now(id).await;
        assert_eq!(w["status"], "disabled", "{w}");
        assert_eq!(w["consecutiveFailures"], 100);
        assert!(w["disabledAt"].is_string());

        // From now on 410 whatever is sent: a good signed message, unsigned, bad payload, too large.
        for (what, body, headers) in [
            ("good and signed", good.clone(), signed(secret, &good)),
            ("unsigned", good.clone(), vec![]),
            ("bad payload", "{oops".to_owned(), signed(secret, "{oops")),
            ("too large", text(&"z".repeat(5000)), vec![]),
        ] {
            let a = hook(url, &body, &headers).await;
            assert_eq!(a.status, 410, "{what}: {a:?}");
            assert_eq!(a.code(), "webhook_disabled");
            assert!(a.json["message"].as_str().unwrap().contains("re-enable"), "{a:?}");
        }
        // A wrong token still learns nothing about the webhook.
        let wrong = format!("{}/pfh_{}", url.rsplit_once('/').unwrap().0, "x".repeat(40));
        assert_eq!(hook(&wrong, &good, &[]).await.status, 401);
        assert!(p.messages(&channel).await.is_empty(), "nothing was stored");

        let notes = app.storage.list_notifications(false, server::storage::Page::first(10)).await.unwrap();
        let note = notes.iter().find(|n| n.kind == "incoming_webhook.disabled").expect("admins are notified");
        assert_eq!(note.subject_id.as_deref(), Some(id));
        assert_eq!(note.space_id.map(|s| s.to_string()), Some(p.id.clone()));

        // Re-enabled by an admin, it accepts again with a fresh streak.
        let (status, w) = p.post(&format!("/incoming-webhooks/{id}/enable"), json!({})).await;
        assert_eq!(status, 200, "{w}");
        assert_eq!(w["status"], "active");
        assert_eq!(w["consecutiveFailures"], 0);
        assert!(w["disabledAt"].is_null());
        let a = hook(url, &good, &signed(secret, &good)).await;
        assert_eq!(a.status, 201, "{a:?}");
        assert_eq!(p.messages(&channel).await.len(), 1);
        app.stop().await;
    }
}

on_both_backends! {
    async fn a_message_from_an_incoming_webhook_reaches_a_subscribed_destination_as_message_created(db) {
        let app = spawn_app(&db).await.with_space().await;
        let rx = Receiver::start().await;
        app.destination(json!({"url": rx.url("/messages"), "eventTypes": ["message.created"]})).await;
        let p = Project::of(&app);
        let channel = p.channel("general").await;
        let w = p.webhook(&channel, json!({})).await;
        let body = json!({"text": "build 42 is green", "attachments": [{"title": "CI", "ok": true}]}).to_string();
        let posted = hook(w["url"].as_str().unwrap(), &body, &[]).await;
        assert_eq!(posted.status, 201, "{posted:?}");
        let m = &posted.json;
        assert!(m["id"].as_str().unwrap().starts_with("msg_"));
        assert_eq!(m["channelId"], channel.as_str());
        assert_eq!(m["attachments"], json!([{"title": "CI", "ok": true}]));
        assert!(m["createdAt"].is_string());

        let got = rx.wait_for(1).await;
        let payload: Value = serde_json::from_str(&got[0].body).unwrap();
        assert_eq!(payload["id"], m["id"]);
        assert_eq!(payload["text"], "build 42 is green");
        assert_eq!(payload["channelId"], channel.as_str());
        assert_eq!(payload["spaceId"], p.id.as_str());
        assert_eq!(payload["sourceKind"], "incoming_webhook");
        assert_eq!(payload["sourceId"], w["id"]);
        let (_, events) = p.get("/events").await;
        assert_eq!(events["data"][0]["type"], "message.created");
        assert_eq!(p.messages(&channel).await[0]["id"], m["id"]);
        app.stop().await;
    }
}

/// A sender that follows the seed's advice (docs §3): a 429 is retried after its
/// `Retry-After`; a 5xx (or a lost connection) is retried after 1, 2, 4, 8 s times
/// `scale`, at most 5 tries in all; any other 4xx is never retried (fix the request).
/// 429 waits do not use up tries (they say nothing about the request), but are capped.
pub struct AdvisedSender {
    client: reqwest::Client,
    url: String,
    scale: f64,
}

/// How one message went.
#[derive(Debug, Default, Clone)]
pub struct Sent {
    /// The last answer's status (0: no answer at all).
    pub status: u16,
    pub tries: u32,
    pub rate_limited: u32,
    /// The first try's status and when it was answered.
    pub first: Option<(u16, Instant)>,
}

impl AdvisedSender {
    pub const BACKOFF_SECS: [f64; 4] = [1.0, 2.0, 4.0, 8.0];
    pub const MAX_TRIES: u32 = 5;
    const MAX_RATE_LIMITED: u32 = 60;

    pub fn new(url: &str, scale: f64) -> Self {
        AdvisedSender {
            client: reqwest::Client::new(),
            url: url.to_owned(),
            scale,
        }
    }

    pub async fn send(&self, body: &str) -> Sent {
        let mut sent = Sent::default();
        let mut failed_tries = 0u32;
        loop {
            sent.tries += 1;
            let answer = request(&self.client, &self.url, body, &[]).send().await;
            let status = answer.as_ref().map_or(0, |r| r.status().as_u16());
            sent.status = status;
            sent.first.get_or_insert((status, Instant::now()));
            if status == 429 && sent.rate_limited < Self::MAX_RATE_LIMITED {
                sent.rate_limited += 1;
                let wait = answer
                    .ok()
                    .and_then(|r| {
                        r.headers()
                            .get("retry-after")?
                            .to_str()
                            .ok()?
                            .parse::<u64>()
                            .ok()
                    })
                    .unwrap_or(1);
                tokio::time::sleep(Duration::from_secs(wait)).await;
                continue;
            }
            if status == 0 || status >= 500 {
                failed_tries += 1;
                if failed_tries < Self::MAX_TRIES {
                    let backoff = Self::BACKOFF_SECS[(failed_tries - 1) as usize] * self.scale;
                    tokio::time::sleep(Duration::from_secs_f64(backoff)).await;
                    continue;
                }
            }
            return sent;
        }
    }
}

on_both_backends! {
    async fn a_sender_following_the_advice_never_gets_its_webhook_disabled_and_every_message_is_stored_once(db) {
        let app = spawn_app(&db).await;
        let p = Project::create(&app, Plan::Free).await;
        let channel = p.channel("c").await;
        let w = p.webhook(&channel, json!({})).await;
        let id = w["id"].as_str().unwrap().to_owned();
        let sender = std::sync::Arc::new(AdvisedSender::new(w["url"].as_str().unwrap(), 0.01));
        // Three times the free limit, as fast as it can: all at once.
        let (limit, n) = (5, 15);
        let start = Instant::now();
        let mut set = tokio::task::JoinSet::new();
        for i in 0..n {
            let sender = sender.clone();
            set.spawn(async move { sender.send(&text(&format!("message {i}"))).await });
        }
        let (mut first_in_window, mut first_refused) = (0usize, 0usize);
        while let Some(done) = set.join_next().await {
            let sent = done.unwrap();
            assert_eq!(sent.status, 201, "every message gets through in the end: {sent:?}");
            let (first_status, first_at) = sent.first.unwrap();
            if first_at - start < WINDOW {
                first_in_window += 1;
                first_refused += usize::from(first_status == 429);
            }
        }
        // First tries answered within one window were counted within it: all but the
        // limit of them were refused, and their senders waited and tried again.
        assert!(
            first_refused >= first_in_window.saturating_sub(limit),
            "{first_refused} of {first_in_window} first tries in the first window refused"
        );
        eprintln!("{first_refused} of {first_in_window} first tries in the first window were refused with 429");

        let w = p.webhook_now(&id).await;
        assert_eq!(w["status"], "active");
        assert_eq!(w["consecutiveFailures"], 0);
        let mut texts: Vec<String> = p.messages(&channel).await.iter().map(|m| m["text"].as_str().unwrap().to_owned()).collect();
        texts.sort();
        let mut expected: Vec<String> = (0..n).map(|i| format!("message {i}")).collect();
        expected.sort();
        assert_eq!(texts, expected, "every message stored exactly once");
        app.stop().await;
    }
}

#[tokio::test]
async fn the_advised_sender_retries_5xx_with_growing_backoff_five_times_at_most_and_never_retries_other_4xx(
) {
    let scale = 0.01;
    let rx = Receiver::start().await;
    rx.set_default(Reply::status(503));
    let sent = AdvisedSender::new(&rx.url("/down"), scale)
        .send(&text("x"))
        .await;
    assert_eq!((sent.status, sent.tries), (503, AdvisedSender::MAX_TRIES));
    let got = rx.received();
    assert_eq!(got.len(), 5);
    for (i, pair) in got.windows(2).enumerate() {
        let gap = pair[1].at - pair[0].at;
        let backoff = Duration::from_secs_f64(AdvisedSender::BACKOFF_SECS[i] * scale);
        assert!(
            gap >= backoff,
            "try {} came after {gap:?}, before its {backoff:?} backoff",
            i + 2
        );
    }

    let rx = Receiver::start().await;
    rx.script([Reply::status(500), Reply::status(502), Reply::status(201)]);
    let sent = AdvisedSender::new(&rx.url("/flaky"), scale)
        .send(&text("x"))
        .await;
    assert_eq!((sent.status, sent.tries), (201, 3));

    for status in [400, 401, 404, 410, 413, 422] {
        let rx = Receiver::start().await;
        rx.set_default(Reply::status(status));
        let sent = AdvisedSender::new(&rx.url("/"), scale)
            .send(&text("x"))
            .await;
        assert_eq!(
            (sent.status, sent.tries),
            (status, 1),
            "{status} is not retried"
        );
        assert_eq!(rx.received().len(), 1);
    }
}

on_both_backends! {
    async fn incoming_webhooks_are_created_listed_read_disabled_enabled_and_deleted_and_other_spaces_get_404(db) {
        let app = spawn_app(&db).await;
        let p = Project::create(&app, Plan::Pro).await;
        let other = Project::create(&app, Plan::Pro).await;
        let channel = p.channel("c").await;

        let w = p.webhook(&channel, json!({"name": "Grafana"})).await;
        let id = w["id"].as_str().unwrap();
        assert!(id.starts_with("iwh_"));
        let token = w["token"].as_str().unwrap();
        assert!(token.starts_with("pfh_"));
        assert_eq!(w["url"], format!("http://{}/hooks/{id}/{token}", app.addr));
        assert_eq!(w["name"], "Grafana");
        assert_eq!(w["channelId"], channel.as_str());
        assert_eq!(w["status"], "active");
        assert_eq!(w["consecutiveFailures"], 0);
        assert_eq!(w["ratePerSecond"], 10);
        assert_eq!(w["signed"], false);
        assert!(w["createdAt"].is_string() && w["disabledAt"].is_null());

        // The token (and so the URL) is shown once.
        let read = p.webhook_now(id).await;
        assert!(read.get("token").is_none() && read.get("url").is_none(), "{read}");
        assert_eq!(read["name"], "Grafana");
        let w2 = p.webhook(&channel, json!({"name": "Sentry"})).await;
        let (status, page) = p.get("/incoming-webhooks?limit=1").await;
        assert_eq!(status, 200);
        assert_eq!(page["data"][0]["id"], w2["id"], "newest first");
        assert!(page["data"][0].get("token").is_none());
        let cursor = page["nextCursor"].as_str().unwrap();
        let (_, page2) = p.get(&format!("/incoming-webhooks?limit=1&cursor={cursor}")).await;
        assert_eq!(page2["data"][0]["id"], id);
        assert!(page2["nextCursor"].is_null(), "the last page says so: {page2}");

        // Bad requests.
        for (body, code) in [
            (json!({"channelId": channel, "name": ""}), "invalid_name"),
            (json!({"channelId": "chn_nope", "name": "x"}), "unknown_channel"),
            (json!({"channelId": channel, "name": "x", "signingSecret": "secret"}), "invalid_signing_secret"),
            (json!({"channelId": channel, "name": "x", "extra": 1}), "invalid_body"),
        ] {
            let (status, json) = p.post("/incoming-webhooks", body).await;
            assert_eq!((status, json["code"].as_str()), (422, Some(code)), "{json}");
        }
        let their_channel = other.channel("theirs").await;
        let (status, json) = p.post("/incoming-webhooks", json!({"channelId": their_channel, "name": "x"})).await;
        assert_eq!((status, json["code"].as_str()), (422, Some("unknown_channel")));

        // Another space sees none of it, through its own project or ours.
        let paths = [format!("/incoming-webhooks/{id}"), format!("/incoming-webhooks/{id}/enable"), format!("/incoming-webhooks/{id}/disable")];
        assert_eq!(other.get(&paths[0]).await.0, 404);
        assert_eq!(other.post(&paths[1], json!({})).await.0, 404);
        assert_eq!(other.post(&paths[2], json!({})).await.0, 404);
        assert_eq!(other.delete(&paths[0]).await.0, 404);
        let ours_with_their_key = other.call(reqwest::Method::GET, &p.api(&paths[0]), None).await;
        assert_eq!(ours_with_their_key.0, 404, "{}", ours_with_their_key.1);
        let (_, their_list) = other.get("/incoming-webhooks").await;
        assert!(their_list["data"].as_array().unwrap().is_empty());

        // Disabled by hand: 410; enabled: 201.
        let url = w["url"].as_str().unwrap();
        let get = Answer::of(reqwest::get(url).await.unwrap()).await;
        assert_eq!((get.status, get.code()), (405, "method_not_allowed"), "JSON like every error");
        let (status, d) = p.post(&paths[2], json!({})).await;
        assert_eq!((status, d["status"].as_str()), (200, Some("disabled")));
        assert_eq!(hook(url, &text("x"), &[]).await.status, 410);
        let (_, e) = p.post(&paths[1], json!({})).await;
        assert_eq!(e["status"], "active");
        assert_eq!(hook(url, &text("x"), &[]).await.status, 201);

        // Deleted: gone from the API, and its URL no longer works.
        let (status, _) = p.delete(&paths[0]).await;
        assert_eq!(status, 204);
        assert_eq!(p.get(&paths[0]).await.0, 404);
        assert_eq!(hook(url, &text("x"), &[]).await.code(), "invalid_token");
        app.stop().await;
    }
}
