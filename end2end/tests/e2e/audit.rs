//! The audit log page: an admin sees everyone's changes (console users and API keys)
//! and filters them by person; support staff see only their own, even when the URL
//! asks for someone else's.

use end2end::*;
use fantoccini::Locator;
use serde_json::json;

/// Posts a server function as the browser's JavaScript would.
async fn call(client: &reqwest::Client, server: &Server, endpoint: &str, form: &[(&str, &str)]) {
    let resp = client
        .post(server.url(&format!("/api/{endpoint}")))
        .form(form)
        .send()
        .await
        .unwrap();
    let status = resp.status();
    assert!(
        status.is_success(),
        "{endpoint}: {status} {}",
        resp.text().await.unwrap()
    );
}

/// The actors of the rows on the page, read in one script: a list re-rendered between
/// finding its rows and reading them (a filter just applied) would leave stale elements.
async fn actors(c: &fantoccini::Client) -> Vec<String> {
    let found = c
        .execute(
            "return Array.from(document.querySelectorAll('tr[data-actor]'), r => r.dataset.actor);",
            vec![],
        )
        .await
        .unwrap();
    serde_json::from_value(found).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admins_read_and_filter_everyones_changes_and_support_staff_only_their_own() {
    let server = start_server().await;
    let space = server.space.to_string();
    // Changes by the API key, the admin and support staff.
    server
        .api("/channels", json!({"name": "from-the-api"}))
        .await;
    let admin = http_session(&server, ADMIN).await;
    call(
        &admin,
        &server,
        "create_channel",
        &[("space", &space), ("name", "ops")],
    )
    .await;
    call(
        &admin,
        &server,
        "create_bot",
        &[("space", &space), ("name", "deploy")],
    )
    .await;
    server
        .api("/destinations", json!({"url": "https://example.com/hook"}))
        .await;
    let event = server
        .api(
            "/events",
            json!({"type": "t", "payload": {}, "deliverAt": server::clock::rfc3339(server::clock::now_ms() + 86_400_000)}),
        )
        .await;
    let event: server::domain::EventId = event["id"].as_str().unwrap().parse().unwrap();
    let waiting = server
        .storage
        .list_deliveries(
            &server::storage::DeliveryFilter::default(),
            server::storage::Page::first(10),
        )
        .await
        .unwrap()
        .into_iter()
        .find(|d| d.event_id == event)
        .unwrap();
    let support = http_session(&server, SUPPORT).await;
    call(
        &support,
        &server,
        "cancel_delivery",
        &[("id", &waiting.id.to_string())],
    )
    .await;
    let support_id = server
        .storage
        .find_user_by_email(SUPPORT)
        .await
        .unwrap()
        .id
        .to_string();
    let admin_id = server
        .storage
        .find_user_by_email(ADMIN)
        .await
        .unwrap()
        .id
        .to_string();

    let driver = Driver::start();
    let profile = tempfile::tempdir().unwrap();
    let c = browser(&driver, profile.path()).await;
    sign_in(&c, &server, ADMIN).await;
    c.find(Locator::Css("nav a[href='/audit-log']"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_text(&c, "[data-testid=audit-log]", "support@example.com").await;
    let all = actors(&c).await;
    assert_eq!(all.len(), 5, "{all:?}");
    assert!(
        all.iter().any(|a| a.starts_with("key_")),
        "the API key's changes: {all:?}"
    );
    assert_eq!(all.iter().filter(|a| *a == ADMIN).count(), 2, "{all:?}");
    screenshot(&c, "audit-log-admin").await;

    // Filter by person with the GET form.
    c.find(Locator::Css("select[name=actor]"))
        .await
        .unwrap()
        .select_by_value(&support_id)
        .await
        .unwrap();
    c.find(Locator::Css("[data-testid=apply-filters]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_until("only support's change is listed", 15, || async {
        let url = c.current_url().await.unwrap();
        url.query().unwrap_or_default().contains("actor=") && actors(&c).await == [SUPPORT]
    })
    .await;
    wait_text(&c, "[data-testid=audit-log]", "deliveries.cancel").await;
    screenshot(&c, "audit-log-admin-by-person").await;

    // Support staff: their own entries, whatever the URL asks.
    let profile = tempfile::tempdir().unwrap();
    let s = browser(&driver, profile.path()).await;
    sign_in(&s, &server, SUPPORT).await;
    find(&s, "nav a[href='/audit-log']").await;
    open(&s, &server, &format!("/audit-log?actor={admin_id}")).await;
    find(&s, "[data-testid=own-only]").await;
    wait_text(&s, "[data-testid=audit-log]", "deliveries.cancel").await;
    assert_eq!(actors(&s).await, [SUPPORT]);
    assert!(
        s.find(Locator::Css("select[name=actor]")).await.is_err(),
        "no person filter"
    );
    screenshot(&s, "audit-log-support").await;
    server.stop().await;
}
