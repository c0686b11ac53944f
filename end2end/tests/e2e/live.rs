//! Live pages (issue 16 item 5), in a real browser: the deliveries table shows a new
//! delivery published through the API while the page is open, without a reload; the
//! row checked before stays checked, and a filter being typed keeps what was typed.

use end2end::*;
use fantoccini::Locator;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deliveries_table_shows_a_new_delivery_without_a_reload() {
    let receiver = Receiver::start().await;
    let server = start_server().await;
    let dst = server
        .destination(
            &receiver.url("/live"),
            "order.paid",
            3,
            json!({"preset": "partyflow"}),
        )
        .await;
    server.publish("order.paid", json!({"order": 1})).await;
    server.publish("order.paid", json!({"order": 2})).await;
    receiver.wait_for(2).await;

    let driver = Driver::start();
    let profile = tempfile::tempdir().unwrap();
    let c = browser(&driver, profile.path()).await;
    sign_in(&c, &server, SUPPORT).await;
    open(&c, &server, &format!("/deliveries?destination={dst}")).await;
    let rows = c.find_all(Locator::Css("tr[data-delivery]")).await.unwrap();
    assert_eq!(rows.len(), 2);
    let checked = rows[1].attr("data-delivery").await.unwrap().unwrap();
    rows[1]
        .find(Locator::Css("input[name=id]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_text(&c, ".toolbar", "1 selected").await;
    // Typed, not applied.
    find(&c, "input[name=event_type]")
        .await
        .send_keys("order.")
        .await
        .unwrap();
    // A mark that a reload would wipe.
    c.execute("window.__same_page = 42; return null;", vec![])
        .await
        .unwrap();

    server.publish("order.paid", json!({"order": 3})).await;
    wait_until("the new delivery shows without a reload", 20, || async {
        c.find_all(Locator::Css("tr[data-delivery]"))
            .await
            .unwrap()
            .len()
            == 3
    })
    .await;
    let same = c
        .execute("return window.__same_page || null;", vec![])
        .await
        .unwrap();
    assert_eq!(same, json!(42), "the page was not reloaded");
    let still = find(&c, &format!("tr[data-delivery='{checked}'] input[name=id]")).await;
    assert!(
        still.is_selected().await.unwrap(),
        "the checked row stays checked"
    );
    wait_text(&c, ".toolbar", "1 selected").await;
    let typed = find(&c, "input[name=event_type]")
        .await
        .prop("value")
        .await
        .unwrap();
    assert_eq!(
        typed.as_deref(),
        Some("order."),
        "the filter being typed stays"
    );
    screenshot(&c, "deliveries-live").await;
    c.close().await.unwrap();
    server.stop().await;
}
