//! Alerts (docs D16): every admin notification also reaches people outside the console.
//!
//! The relay ([`relay`]) takes each new notification once and
//! - publishes a `partyflow.alert` event in the notification's space and in the install's
//!   alert space: the engine delivers it, with retries and signatures, to their
//!   destinations subscribed to `partyflow.alert` (plain JSON, or Slack's `{"text"}`
//!   through the transformation [`SLACK_TRANSFORMATION`]);
//! - queues one e-mail per address of the space and of the install, which the mailer
//!   ([`mail`]) sends through SMTP.
//!
//! Both links in an alert are made from `PARTYFLOW_PUBLIC_URL`. This file holds the
//! rules (what an alert says, where it links, how e-mails are retried); the two tasks are
//! thin I/O around them.

pub mod mail;
pub mod relay;

use serde_json::{json, Value};

use crate::config::PublicUrl;
use crate::domain::{AlertMail, AlertMailId, Notification, Space, UnixMs};

/// The jq program that turns an alert into a Slack (or Mattermost, Rocket.Chat…)
/// incoming-webhook message.
pub const SLACK_TRANSFORMATION: &str = "{text: .text}";

/// How many times an alert e-mail is tried before it is given up on.
pub const MAIL_ATTEMPTS: i64 = 8;

/// The notification kind of the console's test alert.
pub const TEST_KIND: &str = "alert.test";

/// The console page an alert links to: its subject's page, or the notifications.
pub fn console_link(base: &PublicUrl, n: &Notification) -> String {
    base.join(&n.console_path().unwrap_or_else(|| "/notifications".into()))
}

/// One line for people: the space, the message and the link.
pub fn text(n: &Notification, space: Option<&Space>, link: &str) -> String {
    match space {
        Some(space) => format!("[PartyFlow · {}] {} {link}", space.name, n.message),
        None => format!("[PartyFlow] {} {link}", n.message),
    }
}

/// The payload of the `partyflow.alert` event: what happened, where, and the link.
pub fn payload(n: &Notification, space: Option<&Space>, link: &str) -> Value {
    json!({
        "type": crate::domain::ALERT_EVENT_TYPE,
        "notificationId": n.id.to_string(),
        "kind": n.kind,
        "message": n.message,
        "text": text(n, space, link),
        "link": link,
        "space": space.map(|s| json!({"id": s.id.to_string(), "name": s.name})),
        "subject": n.subject_kind.as_ref().map(|kind| json!({"kind": kind, "id": n.subject_id})),
        "createdAt": crate::clock::rfc3339(n.created_at),
    })
}

/// The e-mail to `address` about `n`, due at once.
pub fn mail(
    n: &Notification,
    space: Option<&Space>,
    link: &str,
    address: &str,
    now: UnixMs,
) -> AlertMail {
    let place = space.map_or_else(String::new, |s| format!(" · {}", s.name));
    let subject = format!("[PartyFlow{place}] {}", headline(&n.kind));
    let body = format!(
        "{}\n\nOpen it in the console: {link}\n\n— PartyFlow Hooks ({})\n",
        n.message,
        crate::clock::rfc3339(n.created_at)
    );
    AlertMail {
        id: AlertMailId::new(),
        notification_id: n.id,
        space_id: n.space_id,
        address: address.to_owned(),
        subject,
        body,
        attempts: 0,
        next_attempt_at: Some(now),
        last_error: None,
        created_at: now,
    }
}

/// A short subject line for a notification kind.
fn headline(kind: &str) -> String {
    match kind {
        "destination.disabled" => "A destination was disabled".into(),
        "destination.failing" => "A destination keeps failing".into(),
        "incoming_webhook.disabled" => "An incoming webhook was disabled".into(),
        "delivery.lost" => "A delivery was lost".into(),
        TEST_KIND => "Test alert".into(),
        other => other.replace(['.', '_'], " "),
    }
}

/// When an e-mail that failed `attempts` times (counting this one) is tried again:
/// 30 s, 1, 2, 4 … minutes, at most an hour apart; `None` once it has been tried
/// [`MAIL_ATTEMPTS`] times.
pub fn mail_retry_at(attempts: i64, now: UnixMs) -> Option<UnixMs> {
    if attempts >= MAIL_ATTEMPTS {
        return None;
    }
    let delay_ms = 30_000i64
        .saturating_mul(1 << (attempts - 1).clamp(0, 20))
        .min(3_600_000);
    Some(now + delay_ms)
}

/// An e-mail address as an admin types it: trimmed, and one lettre can send to.
pub fn check_address(raw: &str) -> Result<String, String> {
    let address = raw.trim();
    address
        .parse::<lettre::Address>()
        .map(|_| address.to_owned())
        .map_err(|_| format!("{address:?} is not an e-mail address"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{NotificationId, Plan, SpaceId};

    fn notification(subject: Option<(&str, &str)>) -> Notification {
        Notification {
            id: NotificationId::new(),
            space_id: Some(SpaceId::new()),
            kind: "destination.disabled".into(),
            subject_kind: subject.map(|(k, _)| k.to_owned()),
            subject_id: subject.map(|(_, id)| id.to_owned()),
            message: "Destination https://example.com/hook was disabled.".into(),
            created_at: 1_700_000_000_000,
            read_at: None,
        }
    }

    fn space(n: &Notification) -> Space {
        Space {
            id: n.space_id.unwrap(),
            name: "Acme".into(),
            plan: Plan::Pro,
            created_at: 0,
            retention: None,
        }
    }

    #[test]
    fn an_alert_links_to_its_subject_on_the_public_url_or_to_the_notifications() {
        let base = PublicUrl::parse("https://hooks.example.com/pf").unwrap();
        let n = notification(Some(("destination", "dst_1")));
        assert_eq!(
            console_link(&base, &n),
            "https://hooks.example.com/pf/destinations/dst_1"
        );
        assert_eq!(
            console_link(&base, &notification(None)),
            "https://hooks.example.com/pf/notifications"
        );
    }

    #[test]
    fn the_payload_carries_the_text_for_slack_and_the_facts_for_programs() {
        let n = notification(Some(("destination", "dst_1")));
        let s = space(&n);
        let p = payload(&n, Some(&s), "https://h/destinations/dst_1");
        assert_eq!(p["type"], "partyflow.alert");
        assert_eq!(p["kind"], "destination.disabled");
        assert_eq!(p["subject"]["id"], "dst_1");
        assert_eq!(p["space"]["name"], "Acme");
        assert_eq!(
            p["text"],
            "[PartyFlow · Acme] Destination https://example.com/hook was disabled. \
             https://h/destinations/dst_1"
        );
        assert_eq!(p["createdAt"], "2023-11-14T22:13:20Z");
    }

    #[test]
    fn an_email_names_the_space_and_what_happened_and_carries_the_link() {
        let n = notification(Some(("destination", "dst_1")));
        let s = space(&n);
        let m = mail(&n, Some(&s), "https://h/x", "ops@example.com", 5);
        assert_eq!(m.subject, "[PartyFlow · Acme] A destination was disabled");
        assert!(
            m.body.contains("Open it in the console: https://h/x"),
            "{}",
            m.body
        );
        assert_eq!(m.next_attempt_at, Some(5));
        assert_eq!(m.notification_id, n.id);
    }

    #[test]
    fn a_failed_email_is_tried_again_later_each_time_then_given_up() {
        assert_eq!(mail_retry_at(1, 0), Some(30_000));
        assert_eq!(mail_retry_at(2, 0), Some(60_000));
        assert_eq!(mail_retry_at(3, 0), Some(120_000));
        assert_eq!(mail_retry_at(7, 0), Some(1_920_000));
        assert_eq!(mail_retry_at(MAIL_ATTEMPTS, 0), None);
    }

    #[test]
    fn addresses_are_trimmed_and_checked() {
        assert_eq!(
            check_address(" ops@example.com ").unwrap(),
            "ops@example.com"
        );
        assert!(check_address("ops").is_err());
        assert!(check_address("ops@").is_err());
        assert!(check_address("").is_err());
    }
}
