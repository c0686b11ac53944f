//! docs §2.9: "a receiver using any Standard Webhooks library must verify it".
//! Real deliveries are checked by an independent implementation, the
//! `standardwebhooks` package from PyPI, through
//! `server/tests/support/verify_standard_webhooks.py`.

use serde_json::{json, Value};

use crate::on_both_backends;
use server::testkit::{spawn_app, Received, Receiver, Reply};

const SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/support/verify_standard_webhooks.py"
);

/// What the Python library said about one request.
#[derive(Debug, PartialEq)]
enum Verdict {
    /// Verified; the payload as the library parsed it.
    Verified(Value),
    Refused(String),
}

/// Asks the `standardwebhooks` package whether `secret` verifies this body under
/// these headers. Panics when Python or the package is missing, or the script breaks.
async fn python_verifies(secret: &str, headers: &Value, body: &str) -> Verdict {
    use tokio::io::AsyncWriteExt as _;

    let input = json!({"secret": secret, "headers": headers, "body": body});
    let mut child = tokio::process::Command::new("python3")
        .arg(SCRIPT)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("python3 runs (the Standard Webhooks check needs CPython 3 with `pip install standardwebhooks`)");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input.to_string().as_bytes()).await.unwrap();
    drop(stdin);
    let out = tokio::time::timeout(std::time::Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("the Python verifier finished within 60 s")
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    match out.status.code() {
        Some(0) => Verdict::Verified(
            serde_json::from_slice(&out.stdout).expect("the verifier prints the payload"),
        ),
        Some(1) => Verdict::Refused(stderr),
        Some(3) => panic!(
            "the Python package `standardwebhooks` is missing: run `pip install standardwebhooks` \
             (the test command installs it). {stderr}"
        ),
        other => panic!("the Python verifier broke (exit {other:?}): {stderr}"),
    }
}

/// The three Standard Webhooks headers of a request we sent.
fn signed_headers(req: &Received) -> Value {
    json!({
        "webhook-id": req.header("webhook-id"),
        "webhook-timestamp": req.header("webhook-timestamp"),
        "webhook-signature": req.header("webhook-signature"),
    })
}

fn assert_refused(verdict: Verdict, what: &str) {
    assert!(
        matches!(verdict, Verdict::Refused(_)),
        "{what} must not verify, got {verdict:?}"
    );
}

on_both_backends! {
    async fn every_attempt_verifies_with_the_standardwebhooks_python_library_and_a_tampered_one_does_not(db) {
        let app = spawn_app(&db).await.with_space().await;
        let rx = Receiver::start().await;
        rx.script([Reply::status(500)]);
        let dst = app.destination(json!({
            "url": rx.url("/hook"),
            "retryPolicy": {"preset": "partyflow", "initialMs": 1000, "maxMs": 1000, "jitter": 0},
        })).await;
        let secret = dst["secret"].as_str().unwrap().to_owned();
        let payload = json!({"orderId": 42, "total": "9.99", "note": "café ✓ \"quoted\" \\ slash", "items": [1, 2.5, null]});
        let event = app.publish("order.paid", payload.clone()).await;
        app.wait_for_delivery(&event, "succeeded").await;

        // The first try and the retry (a second later, so its own timestamp) both verify.
        let got = rx.received();
        assert_eq!(got.len(), 2);
        assert_ne!(got[0].header("webhook-timestamp"), got[1].header("webhook-timestamp"));
        for req in &got {
            let verdict = python_verifies(&secret, &signed_headers(req), &req.body).await;
            assert_eq!(verdict, Verdict::Verified(payload.clone()), "{req:?}");
        }

        let req = &got[1];
        let headers = signed_headers(req);
        let tampered_body = req.body.replace("9.99", "0.01");
        assert_ne!(tampered_body, req.body);
        assert_refused(python_verifies(&secret, &headers, &tampered_body).await, "a tampered body");
        let mut other_id = headers.clone();
        other_id["webhook-id"] = json!("evt_someone_else");
        assert_refused(python_verifies(&secret, &other_id, &req.body).await, "another webhook-id");
        let mut other_time = headers.clone();
        let ts: i64 = req.header("webhook-timestamp").parse().unwrap();
        other_time["webhook-timestamp"] = json!((ts - 1).to_string());
        assert_refused(python_verifies(&secret, &other_time, &req.body).await, "another timestamp");
        let stranger = server::dispatch::signing::new_secret();
        assert_refused(python_verifies(&stranger, &headers, &req.body).await, "another destination's secret");
        app.stop().await;
    }
}

on_both_backends! {
    async fn during_a_secret_rotation_the_old_and_the_new_secret_each_verify_the_same_request_with_the_python_library(db) {
        let app = spawn_app(&db).await.with_space().await;
        let rx = Receiver::start().await;
        let dst = app.destination(json!({"url": rx.url("/")})).await;
        let old = dst["secret"].as_str().unwrap().to_owned();
        let (status, rotated) = app.post(&format!("/destinations/{}/rotate-secret", dst["id"].as_str().unwrap()), json!({})).await;
        assert_eq!(status, 200, "{rotated}");
        let new = rotated["secret"].as_str().unwrap().to_owned();
        assert_ne!(old, new);

        let payload = json!({"rotation": true});
        let event = app.publish("x", payload.clone()).await;
        app.wait_for_delivery(&event, "succeeded").await;
        let req = &rx.received()[0];
        let headers = signed_headers(req);
        assert_eq!(req.header("webhook-signature").split(' ').count(), 2, "{headers}");
        for (which, secret) in [("old", &old), ("new", &new)] {
            let verdict = python_verifies(secret, &headers, &req.body).await;
            assert_eq!(verdict, Verdict::Verified(payload.clone()), "the {which} secret");
        }
        let stranger = server::dispatch::signing::new_secret();
        assert_refused(python_verifies(&stranger, &headers, &req.body).await, "a third secret");
        assert_refused(python_verifies(&new, &headers, r#"{"rotation":false}"#).await, "a tampered body");
        app.stop().await;
    }
}
