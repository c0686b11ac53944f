//! Alerts (docs D16): admin notifications reach an operator webhook (Slack's shape,
//! through the engine, signed) and a real SMTP server (Python's `aiosmtpd`, started here),
//! once each, with a link to the console on `PARTYFLOW_PUBLIC_URL`.

use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

use crate::on_both_backends;
use server::domain::{AlertEmail, AlertEmailId, Plan, ALERT_EVENT_TYPE};
use server::testkit::{eventually, spawn_app_with_config, test_config, Receiver, Reply};

/// A real SMTP server on loopback: every message it takes arrives on `messages` as
/// `{"from", "to", "subject", "body"}`, read by Python's e-mail parser.
struct SmtpReceiver {
    port: u16,
    messages: mpsc::UnboundedReceiver<Value>,
    _child: Child,
}

const SMTP_SERVER: &str = r#"
import email, email.policy, errno, json, socket, sys
from aiosmtpd.controller import Controller

class Handler:
    async def handle_DATA(self, server, session, envelope):
        message = email.message_from_bytes(envelope.content, policy=email.policy.default)
        print(json.dumps({"from": envelope.mail_from, "to": envelope.rcpt_tos,
                          "subject": str(message["subject"]),
                          "body": message.get_content()}), flush=True)
        return "250 OK"

# A free port, asked of the kernel, then served; another process may take it in between
# (a CI run once lost that race: EADDRINUSE), so another port is tried then.
for tries in range(20):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    controller = Controller(Handler(), hostname="127.0.0.1", port=port)
    try:
        controller.start()
        break
    except OSError as e:
        if e.errno != errno.EADDRINUSE or tries == 19:
            raise
print(json.dumps({"port": controller.port}), flush=True)
sys.stdin.read()
controller.stop()
"#;

impl SmtpReceiver {
    async fn start() -> Self {
        // aiosmtpd picks its port (a fixed one: its start-up connects to the port it serves)
        // and prints it.
        let mut child = Command::new("python3")
            .args(["-c", SMTP_SERVER])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("python3 runs (the alert e-mail tests need `pip install aiosmtpd`)");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
            .await
            .expect("aiosmtpd starts")
            .unwrap()
            .expect("aiosmtpd prints its port (is the aiosmtpd package installed?)");
        let port = serde_json::from_str::<Value>(&first).unwrap()["port"]
            .as_u64()
            .and_then(|p| u16::try_from(p).ok())
            .expect("aiosmtpd prints the port it serves");
        let (tx, messages) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                let _ = tx.send(serde_json::from_str(&line).unwrap());
            }
        });
        SmtpReceiver {
            port,
            messages,
            _child: child,
        }
    }

    async fn next(&mut self) -> Value {
        tokio::time::timeout(Duration::from_secs(30), self.messages.recv())
            .await
            .expect("an alert e-mail arrives")
            .unwrap()
    }
}

on_both_backends! {
    async fn an_auto_disable_reaches_the_operator_webhook_and_the_mailbox_once_with_the_console_link(db) {
        let mut smtp = SmtpReceiver::start().await;
        let mut config = test_config(&db.url);
        config.public_url = "https://hooks.example.com".into();
        config.dispatch.auto_disable_after = 2;
        config.dispatch.auto_disable_warn_at = vec![];
        config.alerts.smtp_url = format!("smtp://127.0.0.1:{}", smtp.port);
        config.alerts.smtp_from = "PartyFlow <alerts@example.com>".into();
        config.alerts.poll_ms = 50;
        let app = spawn_app_with_config(&db, config).await.with_space().await;

        // The install's alert space, with a Slack-shaped alert webhook; an address for
        // every space's alerts and one for the tenant's own.
        let ops = server::ops::tenants::create_space(db.storage.as_ref(), "Operations", Plan::Enterprise)
            .await
            .unwrap();
        db.storage.set_alert_space(Some(ops.space.id), None).await.unwrap();
        let slack = Receiver::start().await;
        let client = reqwest::Client::new();
        let hook: Value = client
            .post(app.url(&format!("/v1/projects/{}/destinations", ops.space.id)))
            .bearer_auth(&ops.api_key)
            .json(&json!({
                "url": slack.url("/slack"),
                "eventTypes": [ALERT_EVENT_TYPE],
                "transformation": server::alerts::SLACK_TRANSFORMATION,
            }))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let hook_secret = hook["secret"].as_str().expect("the alert webhook is created").to_owned();
        let tenant = app.space.as_deref().unwrap().parse().unwrap();
        for (space_id, address) in [(None, "oncall@example.com"), (Some(tenant), "owner@example.com")] {
            db.storage
                .add_alert_email(&AlertEmail {
                    id: AlertEmailId::new(),
                    space_id,
                    address: address.into(),
                    created_at: 0,
                }, None)
                .await
                .unwrap();
        }
        // A destination of the tenant that takes every type does not get the alerts.
        let everything = Receiver::start().await;
        app.destination(json!({"url": everything.url("/all")})).await;

        // Two dead letters in a row disable the destination (a 400 is not retried).
        let failing = Receiver::start().await;
        failing.set_default(Reply::status(400));
        let dst = app.destination(json!({"url": failing.url("/hook"), "eventTypes": ["order.paid"]})).await;
        let dst_id = dst["id"].as_str().unwrap().to_owned();
        for i in 0..2 {
            app.publish("order.paid", json!({"i": i})).await;
        }
        eventually(30, || async {
            let (_, d) = app.get(&format!("/destinations/{dst_id}")).await;
            (d["status"] == "inactive").then_some(())
        })
        .await;
        let link = format!("https://hooks.example.com/destinations/{dst_id}");

        // The operator webhook: Slack's shape, signed with the alert webhook's secret.
        let got = slack.wait_for(1).await;
        let body: Value = serde_json::from_str(&got[0].body).unwrap();
        let text = body["text"].as_str().unwrap();
        assert_eq!(body.as_object().unwrap().len(), 1, "only `text`: {body}");
        assert!(text.starts_with("[PartyFlow · Test space] Destination "), "{text}");
        assert!(text.contains("was disabled after 2 dead-lettered deliveries in a row"), "{text}");
        assert!(text.ends_with(&link), "{text}");
        let now = server::clock::now_ms() / 1000;
        server::dispatch::signing::verify(
            &hook_secret,
            &got[0].header("webhook-id"),
            &got[0].header("webhook-timestamp"),
            got[0].body.as_bytes(),
            &got[0].header("webhook-signature"),
            now,
            300,
        )
        .expect("the alert is signed like any delivery");

        // Both addresses, each once, with the link.
        let mut to = Vec::new();
        for _ in 0..2 {
            let mail = smtp.next().await;
            assert_eq!(mail["from"], "alerts@example.com");
            assert_eq!(mail["subject"], "[PartyFlow · Test space] A destination was disabled");
            let body = mail["body"].as_str().unwrap();
            assert!(body.contains("was disabled after 2 dead-lettered deliveries in a row"), "{body}");
            assert!(body.contains(&format!("Open it in the console: {link}")), "{body}");
            to.push(mail["to"][0].as_str().unwrap().to_owned());
        }
        to.sort();
        assert_eq!(to, ["oncall@example.com", "owner@example.com"]);

        // Nothing twice, and nothing to the tenant's catch-all destination.
        tokio::time::sleep(Duration::from_millis(800)).await;
        assert_eq!(slack.received().len(), 1);
        assert!(smtp.messages.try_recv().is_err(), "one e-mail per address");
        assert!(
            everything.received().iter().all(|r| !r.body.contains(ALERT_EVENT_TYPE)),
            "a destination of every type gets no alerts"
        );
        assert!(db.storage.notifications_to_alert(10).await.unwrap().is_empty());
        app.stop().await;
    }
}

on_both_backends! {
    async fn nobody_publishes_the_products_own_event_types_through_the_api(db) {
        let app = server::testkit::spawn_app(&db).await.with_space().await;
        for event_type in [ALERT_EVENT_TYPE, "partyflow.test", "partyflow.anything"] {
            let (status, body) = app
                .post("/events", json!({"type": event_type, "payload": {"text": "forged"}}))
                .await;
            assert_eq!(status, 422, "{body}");
            assert_eq!(body["code"], "reserved_event_type", "{body}");
        }
        // Subscribing to alerts is allowed: that is what an alert webhook is.
        let (status, body) = app
            .post("/destinations", json!({"url": "http://127.0.0.1:9/alerts", "eventTypes": [ALERT_EVENT_TYPE]}))
            .await;
        assert_eq!(status, 201, "{body}");
        app.stop().await;
    }
}

on_both_backends! {
    async fn a_test_alert_of_a_space_goes_to_its_own_webhook_and_addresses_only(db) {
        let mut smtp = SmtpReceiver::start().await;
        let mut config = test_config(&db.url);
        config.alerts.smtp_url = format!("smtp://127.0.0.1:{}", smtp.port);
        config.alerts.poll_ms = 50;
        let app = spawn_app_with_config(&db, config).await.with_space().await;
        let space = app.space.as_deref().unwrap().parse().unwrap();
        let own = Receiver::start().await;
        app.destination(json!({"url": own.url("/alerts"), "eventTypes": [ALERT_EVENT_TYPE]})).await;
        // Another space's address does not get this space's alerts.
        let other = server::ops::tenants::create_space(db.storage.as_ref(), "Other", Plan::Free)
            .await
            .unwrap();
        for (space_id, address) in [(Some(space), "owner@example.com"), (Some(other.space.id), "other@example.com")] {
            db.storage
                .add_alert_email(&AlertEmail { id: AlertEmailId::new(), space_id, address: address.into(), created_at: 0 }, None)
                .await
                .unwrap();
        }
        let n = server::domain::Notification {
            id: server::domain::NotificationId::new(),
            space_id: Some(space),
            kind: server::alerts::TEST_KIND.into(),
            subject_kind: None,
            subject_id: None,
            message: "A test alert.".into(),
            created_at: server::clock::now_ms(),
            read_at: None,
        };
        db.storage.create_alert_test(&n, None).await.unwrap();

        let got = own.wait_for(1).await;
        let alert: Value = serde_json::from_str(&got[0].body).unwrap();
        assert_eq!(alert["type"], ALERT_EVENT_TYPE);
        assert_eq!(alert["kind"], "alert.test");
        assert_eq!(alert["notificationId"], n.id.to_string());
        assert_eq!(alert["space"]["id"], space.to_string());
        assert!(alert["link"].as_str().unwrap().ends_with("/notifications"), "{alert}");
        let mail = smtp.next().await;
        assert_eq!(mail["to"], json!(["owner@example.com"]));
        assert_eq!(mail["subject"], "[PartyFlow · Test space] Test alert");
        assert!(mail["body"].as_str().unwrap().contains("A test alert."), "{mail}");
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(smtp.messages.try_recv().is_err(), "the other space's address gets nothing");
        assert_eq!(own.received().len(), 1);
        app.stop().await;
    }
}
