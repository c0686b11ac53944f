//! The Alerts page: an admin adds a Slack-shaped alert webhook and an address, makes the
//! space the install's alert space, sends a test alert and sees it arrive at the
//! webhook; support staff have no Alerts page and the server refuses their calls.

use end2end::*;
use fantoccini::Locator;

async fn submit(c: &fantoccini::Client, form_button: &str) {
    find(c, form_button).await.click().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_sets_up_alerts_and_a_test_alert_reaches_the_slack_webhook() {
    let receiver = Receiver::start().await;
    let server = start_server().await;
    let driver = Driver::start();
    let profile = tempfile::tempdir().unwrap();
    let c = browser(&driver, profile.path()).await;
    sign_in(&c, &server, ADMIN).await;

    c.find(Locator::Css("nav a[href='/alerts']"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_text(&c, "h1", "Alerts").await;
    wait_text(&c, "[data-testid=no-smtp]", "No SMTP server is configured").await;

    // A Slack-shaped alert webhook in the test space (the form's defaults).
    find(&c, "input[name=url]")
        .await
        .send_keys(&receiver.url("/slack"))
        .await
        .unwrap();
    submit(&c, "form:has(input[name=url]) button[type=submit]").await;
    wait_text(&c, "[data-testid=notice]", "Added the alert webhook").await;
    wait_text(&c, "[data-testid=alert-webhooks]", "Slack").await;

    // The space becomes the install's alert space.
    find(&c, "[data-testid=alert-space] option:nth-child(2)")
        .await
        .click()
        .await
        .unwrap();
    submit(
        &c,
        "form:has([data-testid=alert-space]) button[type=submit]",
    )
    .await;
    wait_text(
        &c,
        "[data-testid=notice]",
        "now get the alerts of every space",
    )
    .await;

    // An address for every space's alerts.
    find(&c, "input[name=address]")
        .await
        .send_keys("oncall@example.com")
        .await
        .unwrap();
    submit(&c, "form:has(input[name=address]) button[type=submit]").await;
    wait_text(&c, "[data-testid=alert-emails]", "oncall@example.com").await;
    wait_text(&c, "[data-testid=alert-emails]", "every space").await;

    // A test alert of the install goes to the alert space's webhook, in Slack's shape.
    submit(&c, "[data-testid=send-test-alert]").await;
    wait_text(&c, "[data-testid=notice]", "Sent a test alert").await;
    let got = receiver.wait_for(1).await;
    let body: serde_json::Value = serde_json::from_str(&got[0].body).unwrap();
    let text = body["text"].as_str().unwrap();
    assert!(
        text.contains("A test alert sent by admin@example.com"),
        "{text}"
    );
    assert!(text.ends_with("/notifications"), "{text}");
    screenshot(&c, "alerts").await;

    // Support staff: no link, and the server refuses the calls.
    let support = http_session(&server, SUPPORT).await;
    for (endpoint, form) in [
        ("send_test_alert", vec![("space", "")]),
        (
            "add_alert_email",
            vec![("space", ""), ("address", "x@example.com")],
        ),
        ("alerts", vec![]),
    ] {
        let resp = support
            .post(server.url(&format!("/api/{endpoint}")))
            .form(&form)
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        let body = resp.text().await.unwrap();
        assert!(
            status >= 400 && body.contains("Forbidden"),
            "{endpoint}: {status} {body}"
        );
    }
    c.close().await.unwrap();
    server.stop().await;
}
