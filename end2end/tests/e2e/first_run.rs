//! First run (the one-time setup page), sign-in throttling, and the core actions
//! with JavaScript switched off: plain forms post to server functions and come back
//! to the page with the result.

use end2end::*;
use fantoccini::Locator;
use serde_json::json;
use server::domain::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_admin_is_created_once_and_sign_ins_are_throttled() {
    let server = start_bare_server().await;
    let client = browser_like_client();

    let login = client
        .get(server.url("/login"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        login.contains("Create the first admin"),
        "the sign-in page points to setup"
    );
    let setup = client.get(server.url("/setup")).send().await.unwrap();
    assert_eq!(setup.status(), 200, "the setup page needs no session");
    assert!(setup
        .text()
        .await
        .unwrap()
        .contains("Create admin and sign in"));

    let created = client
        .post(server.url("/api/setup"))
        .header("accept", "text/html")
        .form(&[("email", "First@Example.com"), ("password", PASSWORD)])
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 302);
    assert_eq!(created.headers()["location"], "/");
    let home = client.get(server.url("/")).send().await.unwrap();
    assert_eq!(home.status(), 200, "signed in right away");
    assert!(home.text().await.unwrap().contains("first@example.com"));

    // Once a user exists, the server refuses setup, whatever the page shows.
    let again = browser_like_client()
        .post(server.url("/api/setup"))
        .form(&[("email", "second@example.com"), ("password", PASSWORD)])
        .send()
        .await
        .unwrap();
    assert!(
        again.status().is_server_error() || again.status().is_client_error(),
        "{}",
        again.status()
    );
    assert!(again.text().await.unwrap().contains("set up already"));
    assert_eq!(server.storage.count_users().await.unwrap(), 1);
    let login = browser_like_client()
        .get(server.url("/login"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(!login.contains("Create the first admin"));

    // Ten wrong passwords, then even the right one waits.
    let attacker = browser_like_client();
    for _ in 0..10 {
        let r = attacker
            .post(server.url("/api/login"))
            .header("accept", "text/html")
            .form(&[
                ("email", "first@example.com"),
                ("password", "guess guess guess"),
                ("next", "/"),
            ])
            .send()
            .await
            .unwrap();
        assert!(r.headers()["location"]
            .to_str()
            .unwrap()
            .starts_with("/login?error=credentials"));
    }
    let r = browser_like_client()
        .post(server.url("/api/login"))
        .header("accept", "text/html")
        .form(&[
            ("email", "first@example.com"),
            ("password", PASSWORD),
            ("next", "/"),
        ])
        .send()
        .await
        .unwrap();
    assert!(
        r.headers()["location"]
            .to_str()
            .unwrap()
            .starts_with("/login?error=throttled"),
        "{:?}",
        r.headers()
    );
    // Another email is not affected.
    server::ops::tenants::create_user(
        server.storage.as_ref(),
        "other@example.com",
        PASSWORD,
        Role::Support,
    )
    .await
    .unwrap();
    let r = browser_like_client()
        .post(server.url("/api/login"))
        .header("accept", "text/html")
        .form(&[
            ("email", "other@example.com"),
            ("password", PASSWORD),
            ("next", "/"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["location"], "/");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_core_actions_work_with_javascript_switched_off() {
    let receiver = Receiver::start().await;
    let server = start_server().await;
    receiver.reply_at("/hooks/nojs", Reply::status(500));
    let dst = server
        .destination(
            &receiver.url("/hooks/nojs"),
            "ping",
            1,
            json!({"preset": "partyflow"}),
        )
        .await;
    server.publish("ping", json!({"n": 1})).await;
    wait_until("the delivery failed", 30, || async {
        server
            .deliveries_of(dst)
            .await
            .iter()
            .any(|d| d.status == DeliveryStatus::Failed)
    })
    .await;
    let failed = server.deliveries_of(dst).await[0].clone();
    receiver.reply_at("/hooks/nojs", Reply::status(200));

    let driver = Driver::start();
    let profile = tempfile::tempdir().unwrap();
    let c = browser_without_javascript(&driver, profile.path()).await;

    // Sign in with a plain form post.
    c.goto(&server.url("/deliveries")).await.unwrap();
    c.find(Locator::Css("input[name=email]"))
        .await
        .unwrap()
        .send_keys(ADMIN)
        .await
        .unwrap();
    c.find(Locator::Css("input[name=password]"))
        .await
        .unwrap()
        .send_keys(PASSWORD)
        .await
        .unwrap();
    c.find(Locator::Css("button[type=submit]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    find(&c, "[data-testid=signed-in-as]").await;
    assert_eq!(c.current_url().await.unwrap().path(), "/deliveries");
    let hydrated = c.find(Locator::Css("body[data-hydrated]")).await;
    assert!(hydrated.is_err(), "no JavaScript ran");

    // Filter (GET form), choose the failed delivery, confirm, send it again.
    c.find(Locator::Css("select[name=status]"))
        .await
        .unwrap()
        .select_by_value("failed")
        .await
        .unwrap();
    c.find(Locator::Css("[data-testid=apply-filters]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    // The unfiltered page lists the same row: look for it once the filtered one is there.
    wait_url(&c, "status=failed").await;
    find(
        &c,
        &format!("tr[data-delivery='{}'] input[name=id]", failed.id),
    )
    .await
    .click()
    .await
    .unwrap();
    c.find(Locator::Css("[data-testid=bulk-resend]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_text(
        &c,
        "[data-testid=confirm-question]",
        "Send again 1 selected delivery?",
    )
    .await;
    c.find(Locator::Css("[data-testid=confirm]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let result = wait_text(&c, "[data-testid=bulk-result]", "Done.").await;
    assert!(result.contains("Sent again 1."), "{result}");
    assert!(c
        .current_url()
        .await
        .unwrap()
        .query()
        .unwrap_or_default()
        .contains("flash="));
    screenshot(&c, "nojs-bulk-result").await;
    wait_until("the new delivery succeeded", 30, || async {
        server
            .deliveries_of(dst)
            .await
            .iter()
            .any(|d| d.resent_from == Some(failed.id) && d.status == DeliveryStatus::Succeeded)
    })
    .await;

    // Disable and re-enable the destination from its page.
    c.goto(&server.url(&format!("/destinations/{dst}")))
        .await
        .unwrap();
    c.find(Locator::Css("form button.danger"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_text(&c, "[data-testid=notice]", "Disabled").await;
    assert_eq!(
        server
            .storage
            .get_destination(server.space, dst)
            .await
            .unwrap()
            .status,
        DestinationStatus::Inactive
    );
    c.find(Locator::Css("[data-testid=reenable]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_text(&c, "[data-testid=notice]", "Re-enabled").await;
    assert_eq!(
        server
            .storage
            .get_destination(server.space, dst)
            .await
            .unwrap()
            .status,
        DestinationStatus::Active
    );

    // A refusal comes back to the page too (an email that is taken), then a success.
    c.goto(&server.url("/users")).await.unwrap();
    c.find(Locator::Css("input[name=email]"))
        .await
        .unwrap()
        .send_keys(SUPPORT)
        .await
        .unwrap();
    c.find(Locator::Css("input[name=password]"))
        .await
        .unwrap()
        .send_keys("1234567890")
        .await
        .unwrap();
    c.find(Locator::Css("section.create button[type=submit]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_text(&c, "[data-testid=error]", "already exists").await;
    // The refused form comes back with the email typed (issue 16 item 7): replace it.
    let email = c.find(Locator::Css("input[name=email]")).await.unwrap();
    assert_eq!(email.prop("value").await.unwrap().as_deref(), Some(SUPPORT));
    email.clear().await.unwrap();
    email.send_keys("new@example.com").await.unwrap();
    c.find(Locator::Css("input[name=password]"))
        .await
        .unwrap()
        .send_keys("1234567890")
        .await
        .unwrap();
    c.find(Locator::Css("section.create button[type=submit]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_text(&c, "[data-testid=notice]", "Created new@example.com").await;
    wait_text(&c, "[data-testid=users]", "new@example.com").await;
    screenshot(&c, "nojs-users").await;

    c.close().await.unwrap();
    server.stop().await;
}
