//! The search box in the top bar (issue 16 item 3), in a real browser: support staff
//! find a delivery by each kind of key — its ID, its event's ID, the `webhook-id` the
//! receiver saw, the idempotency key — and a destination by its ID and by part of its
//! URL or description; several matches are listed; without JavaScript the same box works.

use end2end::*;
use fantoccini::{Client, Locator};
use serde_json::json;

/// Types `q` into the top bar's box and submits it.
async fn search(c: &Client, q: &str) {
    let input = find(c, "header [data-testid=search]").await;
    input.clear().await.unwrap();
    input.send_keys(q).await.unwrap();
    c.find(Locator::Css("header form.search button[type=submit]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
}

/// Waits until the browser is on `path`.
async fn lands_on(c: &Client, path: &str, why: &str) {
    wait_until(why, 15, || async {
        c.current_url().await.unwrap().path() == path
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_search_box_finds_a_delivery_by_each_kind_of_key() {
    let receiver = Receiver::start().await;
    let server = start_server().await;
    let orders = server
        .api(
            "/destinations",
            json!({"url": receiver.url("/orders-erp"), "description": "Billing ERP", "eventTypes": ["order.paid"]}),
        )
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let shipping = server
        .api(
            "/destinations",
            json!({"url": receiver.url("/shipping"), "description": "Warehouse", "eventTypes": ["order.shipped"]}),
        )
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let event = server
        .api(
            "/events",
            json!({"type": "order.paid", "payload": {"order": 42}, "idempotencyKey": "order-42"}),
        )
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    server
        .api(
            "/events",
            json!({"type": "order.shipped", "payload": {"order": 42}}),
        )
        .await;
    let got = receiver.wait_for(2).await;
    let webhook_id = got
        .iter()
        .find(|r| r.path == "/orders-erp")
        .unwrap()
        .header("webhook-id");
    let delivery = server.deliveries_of(orders.parse().unwrap()).await[0]
        .id
        .to_string();
    let to_delivery = format!("/deliveries/{delivery}");

    let driver = Driver::start();
    let profile = tempfile::tempdir().unwrap();
    let c = browser(&driver, profile.path()).await;
    sign_in(&c, &server, SUPPORT).await;
    screenshot(&c, "search-box").await;

    for (what, q) in [
        ("delivery ID", delivery.as_str()),
        ("event ID", event.as_str()),
        ("webhook-id", webhook_id.as_str()),
        ("idempotency key", "order-42"),
    ] {
        open(&c, &server, "/").await;
        search(&c, q).await;
        lands_on(
            &c,
            &to_delivery,
            &format!("the {what} goes to the delivery"),
        )
        .await;
        wait_text(&c, "main", &delivery).await;
    }
    for (what, q) in [
        ("destination ID", shipping.as_str()),
        ("part of its URL", "SHIPPING"),
        ("part of its description", "warehouse"),
    ] {
        search(&c, q).await;
        lands_on(
            &c,
            &format!("/destinations/{shipping}"),
            &format!("the {what} goes to the destination"),
        )
        .await;
    }
    // Several matches: a short list.
    search(&c, "127.0.0.1").await;
    lands_on(&c, "/search", "several matches stay on the results").await;
    wait_until("both destinations are listed", 15, || async {
        c.find_all(Locator::Css("[data-testid=search-results] tr[data-hit]"))
            .await
            .unwrap()
            .len()
            == 2
    })
    .await;
    screenshot(&c, "search-results").await;
    search(&c, "nothing-like-this").await;
    wait_text(&c, "[data-testid=search-empty]", "Nothing matches").await;

    // Without JavaScript: a plain GET form, the server redirects.
    let plain_profile = tempfile::tempdir().unwrap();
    let plain = browser_without_javascript(&driver, plain_profile.path()).await;
    plain.goto(&server.url("/login")).await.unwrap();
    plain
        .find(Locator::Css("input[name=email]"))
        .await
        .unwrap()
        .send_keys(SUPPORT)
        .await
        .unwrap();
    plain
        .find(Locator::Css("input[name=password]"))
        .await
        .unwrap()
        .send_keys(PASSWORD)
        .await
        .unwrap();
    find(&plain, "button[type=submit]")
        .await
        .click()
        .await
        .unwrap();
    find(&plain, "[data-testid=signed-in-as]").await;
    search(&plain, "order-42").await;
    lands_on(&plain, &to_delivery, "without JavaScript too").await;
    plain.close().await.unwrap();
    c.close().await.unwrap();
    server.stop().await;
}
