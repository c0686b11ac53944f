//! An admin sets things up in a real browser: a space (its first API key shown
//! once), a channel, a bot, an API key, an incoming webhook (URL and token shown
//! once, and the URL works), a destination (its secret shown), a secret rotation and
//! a support user.

use end2end::*;
use fantoccini::Locator;
use server::domain::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_creates_spaces_keys_hooks_destinations_and_users() {
    let started = std::time::Instant::now();
    let server = start_server().await;
    let driver = Driver::start();
    let profile = tempfile::tempdir().unwrap();
    let c = browser(&driver, profile.path()).await;
    sign_in(&c, &server, ADMIN).await;

    // A space; its first API key is shown once and works.
    c.find(Locator::Css("nav a[href='/spaces']"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    find(&c, "input[name=name]")
        .await
        .send_keys("Globex")
        .await
        .unwrap();
    c.find(Locator::Css("select[name=plan]"))
        .await
        .unwrap()
        .select_by_value("enterprise")
        .await
        .unwrap();
    c.find(Locator::Css("section.create button[type=submit]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_text(&c, "[data-testid=notice]", "Created the space Globex").await;
    let key = find(&c, "[data-testid=secret]").await.text().await.unwrap();
    assert!(key.starts_with("pfk_"), "{key}");
    wait_text(&c, "[data-testid=spaces]", "Globex").await;
    screenshot(&c, "spaces").await;
    let space = server
        .storage
        .list_all_spaces()
        .await
        .unwrap()
        .into_iter()
        .find(|s| s.name == "Globex")
        .unwrap();
    let listed = reqwest::Client::new()
        .get(server.url(&format!("/v1/projects/{}/destinations", space.id)))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(
        listed.status(),
        200,
        "the key shown works with the REST API"
    );

    // In the space: a channel, a bot (token once), an API key (once).
    c.find(Locator::Css(&format!("a[href='/spaces/{}']", space.id)))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let channel_form = find(&c, "form input[name=name]").await;
    channel_form.send_keys("alerts").await.unwrap();
    c.find(Locator::XPath("//button[normalize-space()='Add channel']"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_text(&c, "[data-testid=notice]", "Created the channel #alerts").await;
    wait_text(&c, "section.card", "#alerts").await;
    let inputs = c
        .find_all(Locator::Css("form input[name=name]"))
        .await
        .unwrap();
    inputs[1].send_keys("deploy-bot").await.unwrap();
    c.find(Locator::XPath("//button[normalize-space()='Create bot']"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_text(&c, "[data-testid=notice]", "Created the bot deploy-bot").await;
    assert!(find(&c, "[data-testid=secret]")
        .await
        .text()
        .await
        .unwrap()
        .starts_with("pfb_"));
    let inputs = c
        .find_all(Locator::Css("form input[name=name]"))
        .await
        .unwrap();
    inputs[2].send_keys("ci").await.unwrap();
    c.find(Locator::XPath(
        "//button[normalize-space()='Create API key']",
    ))
    .await
    .unwrap()
    .click()
    .await
    .unwrap();
    wait_text(&c, "[data-testid=notice]", "Created the API key ci").await;
    screenshot(&c, "space").await;
    assert_eq!(
        server
            .storage
            .list_all_api_keys(space.id)
            .await
            .unwrap()
            .len(),
        2
    );

    // An incoming webhook for #alerts: URL and token shown once; the URL accepts a message.
    open(&c, &server, "/incoming-webhooks").await;
    c.find(Locator::Css("details.create summary"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    find(&c, "details.create select[name=channel]").await;
    c.find(Locator::Css("details.create input[name=name]"))
        .await
        .unwrap()
        .send_keys("Grafana")
        .await
        .unwrap();
    c.find(Locator::Css("details.create button[type=submit]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_text(&c, "[data-testid=notice]", "Created the incoming webhook").await;
    let secrets = c
        .find_all(Locator::Css("[data-testid=secret]"))
        .await
        .unwrap();
    let hook_url = secrets[0].text().await.unwrap();
    let token = secrets[1].text().await.unwrap();
    assert!(
        token.starts_with("pfh_") && hook_url.ends_with(&token),
        "{hook_url} {token}"
    );
    screenshot(&c, "incoming-created").await;
    let posted = reqwest::Client::new()
        .post(&hook_url)
        .json(&serde_json::json!({"text": "disk almost full"}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        posted.status(),
        201,
        "the URL shown works: {}",
        posted.text().await.unwrap_or_default()
    );

    // A destination from the form; its secret is shown; then a rotation.
    open(&c, &server, &format!("/destinations?space={}", space.id)).await;
    c.find(Locator::Css("details.create summary"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    find(&c, "details.create input[name=url]")
        .await
        .send_keys("https://example.com/hooks/globex")
        .await
        .unwrap();
    c.find(Locator::Css("details.create input[name=event_types]"))
        .await
        .unwrap()
        .send_keys("message.created")
        .await
        .unwrap();
    c.find(Locator::Css("details.create input[name=rate_count]"))
        .await
        .unwrap()
        .send_keys("50")
        .await
        .unwrap();
    c.find(Locator::Css("details.create select[name=preset]"))
        .await
        .unwrap()
        .select_by_value("standard")
        .await
        .unwrap();
    screenshot(&c, "destination-create").await;
    c.find(Locator::Css("details.create button[type=submit]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_text(&c, "[data-testid=notice]", "Created the destination").await;
    let secret = find(&c, "[data-testid=secret]").await.text().await.unwrap();
    assert!(secret.starts_with("whsec_"), "{secret}");
    let created = server
        .storage
        .list_all_destinations(space.id)
        .await
        .unwrap();
    assert_eq!(created.len(), 1);
    assert_eq!(created[0].max_attempts, 6, "the standard preset");
    assert_eq!(created[0].rate_limit.map(|r| r.count), Some(50));
    wait_text(&c, "[data-testid=destinations]", "50 per second").await;
    c.find(Locator::Css("[data-testid=notice] a"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    // The link navigates inside the app (hydrated): wait for the destination's page.
    c.wait()
        .for_element(Locator::XPath(
            "//button[normalize-space()='Rotate secret']",
        ))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_text(&c, "[data-testid=notice]", "Rotated the signing secret").await;
    let rotated = find(&c, "[data-testid=secret]").await.text().await.unwrap();
    assert_ne!(rotated, secret);
    assert_eq!(
        server
            .storage
            .get_destination_by_id(created[0].id)
            .await
            .unwrap()
            .previous_secret,
        Some(secret)
    );

    // A support user.
    c.find(Locator::Css("nav a[href='/users']"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    find(&c, "section.create input[name=email]")
        .await
        .send_keys("helper@example.com")
        .await
        .unwrap();
    c.find(Locator::Css("section.create input[name=password]"))
        .await
        .unwrap()
        .send_keys("a long passphrase")
        .await
        .unwrap();
    c.find(Locator::Css("section.create button[type=submit]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_text(
        &c,
        "[data-testid=notice]",
        "Created helper@example.com (support)",
    )
    .await;
    wait_text(&c, "[data-testid=users]", "helper@example.com").await;
    let email = c
        .find(Locator::Css("section.create input[name=email]"))
        .await
        .unwrap();
    assert_eq!(
        email.prop("value").await.unwrap().as_deref(),
        Some(""),
        "the form is emptied after success"
    );
    screenshot(&c, "users").await;
    assert_eq!(
        server
            .storage
            .find_user_by_email("helper@example.com")
            .await
            .unwrap()
            .role,
        Role::Support
    );

    c.close().await.unwrap();
    server.stop().await;
    eprintln!("admin test took {:?}", started.elapsed());
}
