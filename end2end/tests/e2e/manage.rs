//! An admin manages things in a real browser: edits a destination's URL and rate
//! limit (the next deliveries go to the new URL, held to the new limit; a jq program
//! that does not compile is refused in words), sends a test event and follows it to
//! its delivery, disables a user (signed out at once, and refused at sign-in like a
//! wrong password), and revokes API keys through a confirmation, with JavaScript
//! and without.

use std::time::Duration;

use end2end::*;
use fantoccini::Locator;
use serde_json::{json, Value};
use server::domain::*;

async fn set_field(c: &fantoccini::Client, css: &str, value: &str) {
    let input = find(c, css).await;
    input.clear().await.unwrap();
    if !value.is_empty() {
        input.send_keys(value).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_edits_a_destination_and_its_next_deliveries_follow_the_new_settings() {
    let receiver = Receiver::start().await;
    let server = start_server().await;
    let dst = server
        .destination(
            &receiver.url("/hooks/old"),
            "ping",
            3,
            json!({"preset": "partyflow"}),
        )
        .await;
    let driver = Driver::start();
    let profile = tempfile::tempdir().unwrap();
    let c = browser(&driver, profile.path()).await;
    sign_in(&c, &server, ADMIN).await;

    open(&c, &server, &format!("/destinations/{dst}")).await;
    find(&c, "[data-testid=edit-settings]")
        .await
        .click()
        .await
        .unwrap();
    find(&c, "[data-testid=save-settings]").await;
    assert_eq!(
        c.current_url().await.unwrap().path(),
        format!("/destinations/{dst}/edit")
    );
    let shown_url = find(&c, "input[name=url]")
        .await
        .prop("value")
        .await
        .unwrap();
    assert_eq!(
        shown_url.as_deref(),
        Some(receiver.url("/hooks/old").as_str())
    );
    let shown_attempts = find(&c, "input[name=max_attempts]")
        .await
        .prop("value")
        .await
        .unwrap();
    assert_eq!(
        shown_attempts.as_deref(),
        Some("3"),
        "differs from the preset"
    );

    // A program that does not compile is refused, saying why; nothing changes.
    set_field(&c, "textarea[name=transformation]", "{id: .id").await;
    find(&c, "[data-testid=save-settings]")
        .await
        .click()
        .await
        .unwrap();
    let error = wait_text(
        &c,
        "[data-testid=error]",
        "Transformation: the jq program does not compile",
    )
    .await;
    assert!(error.contains("line 1"), "says where: {error}");
    wait_text(
        &c,
        "[data-testid=inline-error]",
        "Not saved. Transformation:",
    )
    .await;
    screenshot(&c, "destination-edit-refused").await;
    assert!(server
        .storage
        .get_destination(server.space, dst)
        .await
        .unwrap()
        .transformation
        .is_none());

    // The new URL, a limit of one request a minute, and a working program.
    set_field(&c, "input[name=url]", &receiver.url("/hooks/new")).await;
    set_field(&c, "input[name=rate_count]", "1").await;
    c.find(Locator::Css("select[name=rate_period]"))
        .await
        .unwrap()
        .select_by_value("minute")
        .await
        .unwrap();
    set_field(
        &c,
        "textarea[name=transformation]",
        "{n: .n, via: \"console\"}",
    )
    .await;
    find(&c, "[data-testid=save-settings]")
        .await
        .click()
        .await
        .unwrap();
    wait_text(&c, "[data-testid=notice]", "Saved the settings").await;
    c.execute("window.scrollTo(0, 0)", vec![]).await.unwrap();
    screenshot(&c, "destination-edit-saved").await;
    let saved = server
        .storage
        .get_destination(server.space, dst)
        .await
        .unwrap();
    assert_eq!(saved.url, receiver.url("/hooks/new"));
    assert_eq!(
        saved.rate_limit,
        Some(RateLimit {
            count: 1,
            period: RatePeriod::Minute
        })
    );
    assert_eq!(saved.max_attempts, 3, "untouched settings stay");

    // The destination's page says so; then two events: the first reaches the new URL
    // (transformed), the second waits for the limit.
    c.find(Locator::Css("[data-testid=notice] a"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_text(&c, "dl.facts", "1 per minute").await;
    wait_text(&c, "dl.facts", "yes (jq)").await;
    server.publish("ping", json!({"n": 1, "secret": "x"})).await;
    server.publish("ping", json!({"n": 2})).await;
    wait_until("the first event reached the new URL", 30, || async {
        receiver.received_at("/hooks/new").len() == 1
    })
    .await;
    wait_until("the second one waits for the rate limit", 30, || async {
        server.deliveries_of(dst).await.iter().any(|d| {
            d.status == DeliveryStatus::Pending
                && d.last_error_class == Some(ErrorClass::RateLimited)
        })
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        receiver.received_at("/hooks/new").len(),
        1,
        "held by 1 per minute"
    );
    assert_eq!(receiver.received_at("/hooks/old").len(), 0);
    let body: Value = serde_json::from_str(&receiver.received()[0].body).unwrap();
    assert_eq!(body, json!({"n": 1, "via": "console"}));

    c.close().await.unwrap();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_sends_a_test_event_and_follows_it_to_its_delivery() {
    let receiver = Receiver::start().await;
    let server = start_server().await;
    let dst = server
        .destination(
            &receiver.url("/hooks/test"),
            "order.paid",
            3,
            json!({"preset": "partyflow"}),
        )
        .await;
    let driver = Driver::start();
    let profile = tempfile::tempdir().unwrap();
    let c = browser(&driver, profile.path()).await;
    sign_in(&c, &server, ADMIN).await;
    open(&c, &server, &format!("/destinations/{dst}")).await;
    find(&c, "[data-testid=send-test]")
        .await
        .click()
        .await
        .unwrap();
    wait_text(
        &c,
        "[data-testid=notice]",
        "Sent a test event (partyflow.test)",
    )
    .await;
    screenshot(&c, "test-event-sent").await;
    wait_until("the receiver got the test event", 30, || async {
        receiver.received_at("/hooks/test").len() == 1
    })
    .await;
    let body: Value = serde_json::from_str(&receiver.received()[0].body).unwrap();
    assert_eq!(body["type"], "partyflow.test");

    // The notice links to the delivery, which shows the successful attempt.
    c.find(Locator::Css("[data-testid=notice] a"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let deliveries = server.deliveries_of(dst).await;
    assert_eq!(deliveries.len(), 1);
    assert_eq!(
        c.current_url().await.unwrap().path(),
        format!("/deliveries/{}", deliveries[0].id)
    );
    wait_until("the delivery page shows success", 30, || async {
        c.refresh().await.unwrap();
        wait_for_hydration(&c).await;
        c.find(Locator::Css("[data-status=succeeded]"))
            .await
            .is_ok()
    })
    .await;
    wait_text(&c, "main", "partyflow.test").await;
    screenshot(&c, "test-event-delivery").await;

    c.close().await.unwrap();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disabled_user_is_signed_out_and_cannot_sign_in_again() {
    let server = start_server().await;
    let driver = Driver::start();
    let (p1, p2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let admin = browser(&driver, p1.path()).await;
    let support = browser(&driver, p2.path()).await;
    sign_in(&support, &server, SUPPORT).await;
    sign_in(&admin, &server, ADMIN).await;
    let support_user = server.storage.find_user_by_email(SUPPORT).await.unwrap();
    let admin_user = server.storage.find_user_by_email(ADMIN).await.unwrap();

    open(&admin, &server, "/users").await;
    let own = format!("tr[data-user='{}']", admin_user.id);
    wait_text(&admin, &own, "you").await;
    assert!(
        admin
            .find(Locator::Css(&format!("{own} [data-testid=toggle-user]")))
            .await
            .is_err(),
        "no Disable for oneself"
    );
    let row = format!("tr[data-user='{}']", support_user.id);
    find(&admin, &format!("{row} [data-testid=toggle-user]"))
        .await
        .click()
        .await
        .unwrap();
    wait_text(
        &admin,
        "[data-testid=notice]",
        "Disabled support@example.com",
    )
    .await;
    find(&admin, &format!("{row}[data-state=disabled]")).await;
    screenshot(&admin, "users-disabled").await;
    assert!(server
        .storage
        .get_user(support_user.id)
        .await
        .unwrap()
        .disabled_at
        .is_some());

    // The support user's open console is signed out; signing in again is refused
    // with the same words as a wrong password.
    support.goto(&server.url("/deliveries")).await.unwrap();
    find(&support, "input[name=password]").await;
    assert_eq!(support.current_url().await.unwrap().path(), "/login");
    set_field(&support, "input[name=email]", SUPPORT).await;
    set_field(&support, "input[name=password]", PASSWORD).await;
    find(&support, "button[type=submit]")
        .await
        .click()
        .await
        .unwrap();
    wait_text(&support, "[role=alert]", "Wrong email or password.").await;
    screenshot(&support, "disabled-user-sign-in").await;

    // Deleted after a confirmation: the row goes.
    find(&admin, &format!("{row} [data-testid=delete-user] summary"))
        .await
        .click()
        .await
        .unwrap();
    wait_text(
        &admin,
        &format!("{row} .confirm-box"),
        "Delete support@example.com?",
    )
    .await;
    screenshot(&admin, "users-delete-confirm").await;
    find(&admin, &format!("{row} [data-testid=confirm-delete-user]"))
        .await
        .click()
        .await
        .unwrap();
    wait_text(
        &admin,
        "[data-testid=notice]",
        "Deleted support@example.com",
    )
    .await;
    wait_until("the row is gone", 15, || async {
        admin.find(Locator::Css(&row)).await.is_err()
    })
    .await;
    assert!(server.storage.find_user_by_email(SUPPORT).await.is_err());

    admin.close().await.unwrap();
    support.close().await.unwrap();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_keys_are_revoked_only_after_a_confirmation_with_and_without_javascript() {
    let server = start_server().await;
    let api = |key: String| {
        let url = server.url(&format!("/v1/projects/{}/destinations", server.space));
        async move {
            reqwest::Client::new()
                .get(url)
                .bearer_auth(key)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    assert_eq!(api(server.api_key.clone()).await, 200);
    let keys = server
        .storage
        .list_all_api_keys(server.space)
        .await
        .unwrap();
    let first = keys[0].id;

    let driver = Driver::start();
    let profile = tempfile::tempdir().unwrap();
    let c = browser(&driver, profile.path()).await;
    sign_in(&c, &server, ADMIN).await;
    open(&c, &server, &format!("/spaces/{}", server.space)).await;
    let item = format!("li[data-key='{first}']");
    let confirm = format!("{item} [data-testid=confirm-revoke-key]");
    assert!(
        !find(&c, &confirm).await.is_displayed().await.unwrap(),
        "the real button is hidden until asked for"
    );
    find(&c, &format!("{item} summary"))
        .await
        .click()
        .await
        .unwrap();
    wait_text(
        &c,
        &format!("{item} .confirm-box"),
        "Revoke the API key default",
    )
    .await;
    assert_eq!(
        c.active_element()
            .await
            .unwrap()
            .attr("data-testid")
            .await
            .unwrap()
            .as_deref(),
        Some("confirm-revoke-key"),
        "the confirm button has the focus"
    );
    screenshot(&c, "api-key-revoke-confirm").await;
    assert_eq!(
        api(server.api_key.clone()).await,
        200,
        "opening the question revokes nothing"
    );
    find(&c, &confirm).await.click().await.unwrap();
    wait_text(&c, "[data-testid=notice]", "Revoked the API key").await;
    wait_text(&c, &item, "revoked").await;
    screenshot(&c, "api-key-revoked").await;
    assert_eq!(api(server.api_key.clone()).await, 401);
    c.close().await.unwrap();

    // Without JavaScript: the same two steps, through plain HTML.
    let (record, minted) =
        server::ops::credentials::new_api_key(server.space, "ci", server::clock::now_ms()).unwrap();
    server
        .storage
        .create_api_key(&record, &minted.hash, None)
        .await
        .unwrap();
    let key = minted.secret;
    assert_eq!(api(key.clone()).await, 200);
    let profile = tempfile::tempdir().unwrap();
    let plain = browser_without_javascript(&driver, profile.path()).await;
    plain
        .goto(&server.url(&format!("/spaces/{}", server.space)))
        .await
        .unwrap();
    set_field(&plain, "input[name=email]", ADMIN).await;
    set_field(&plain, "input[name=password]", PASSWORD).await;
    find(&plain, "button[type=submit]")
        .await
        .click()
        .await
        .unwrap();
    let item = format!("li[data-key='{}']", record.id);
    find(&plain, &format!("{item} summary"))
        .await
        .click()
        .await
        .unwrap();
    find(&plain, &format!("{item} [data-testid=confirm-revoke-key]"))
        .await
        .click()
        .await
        .unwrap();
    wait_text(&plain, "[data-testid=notice]", "Revoked the API key").await;
    wait_text(&plain, &item, "revoked").await;
    assert!(plain
        .find(Locator::Css("body[data-hydrated]"))
        .await
        .is_err());
    screenshot(&plain, "nojs-api-key-revoked").await;
    assert_eq!(api(key).await, 401);
    plain.close().await.unwrap();
    server.stop().await;
}
