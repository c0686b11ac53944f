//! Support staff at work in a real browser: find failed deliveries by their error
//! class, send several again and watch them succeed, cancel a retrying delivery and
//! every delivery matching a filter; attacker-controlled payloads stay text.

mod common;

use std::time::Duration;

use common::*;
use fantoccini::Locator;
use serde_json::json;
use server::domain::*;

const NASTY: &str = "<script>window.__xss = 1</script><img src=x onerror=\"window.__xss = 2\">";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn support_staff_find_failures_send_them_again_and_cancel() {
    let started = std::time::Instant::now();
    let receiver = Receiver::start().await;
    // Keep destinations active however much fails here (auto-disable has its own test).
    let server = start_server_with(|c| c.dispatch.auto_disable_after = 100).await;
    receiver.answer("flaky", 500);
    receiver.answer("down", 503);
    let flaky = server
        .destination(
            &receiver.url("flaky"),
            "order.created",
            1,
            json!({"preset": "partyflow"}),
        )
        .await;
    let down = server
        .destination(
            &receiver.url("down"),
            "order.paid",
            5,
            json!({"preset": "standard", "initialMs": 600000}),
        )
        .await;
    for i in 0..3 {
        server
            .publish("order.created", json!({"order": i, "note": NASTY}))
            .await;
    }
    for i in 0..4 {
        server.publish("order.paid", json!({"order": i})).await;
    }
    eventually(
        "three deliveries to the flaky receiver failed",
        30,
        || async {
            server
                .deliveries_of(flaky)
                .await
                .iter()
                .filter(|d| d.status == DeliveryStatus::Failed)
                .count()
                == 3
        },
    )
    .await;
    eventually(
        "four deliveries to the down receiver are retrying",
        30,
        || async {
            server
                .deliveries_of(down)
                .await
                .iter()
                .filter(|d| d.status == DeliveryStatus::Retrying)
                .count()
                == 4
        },
    )
    .await;

    let driver = Driver::start();
    let profile = tempfile::tempdir().unwrap();
    let c = browser(&driver, profile.path()).await;
    sign_in(&c, &server, SUPPORT).await;

    // A failed delivery shows its error class as a labelled badge, its meaning on hover.
    open(&c, &server, "/deliveries").await;
    let badge = find(&c, "tr[data-status=failed] [data-error-class=http]").await;
    assert_eq!(badge.text().await.unwrap(), "HTTP error 500");
    let title = badge.attr("title").await.unwrap().unwrap();
    assert!(
        title.contains("non-2xx"),
        "the badge explains itself: {title}"
    );
    screenshot(&c, "deliveries").await;

    // Filter by error class (and status) with the GET form.
    c.find(Locator::Css("select[name=error_class]"))
        .await
        .unwrap()
        .select_by_value("http")
        .await
        .unwrap();
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
    eventually(
        "the filter is in the URL and the table shows three rows",
        15,
        || async {
            let url = c.current_url().await.unwrap();
            let rows = c.find_all(Locator::Css("tr[data-delivery]")).await.unwrap();
            url.query().unwrap_or_default().contains("error_class=http") && rows.len() == 3
        },
    )
    .await;
    for row in c.find_all(Locator::Css("tr[data-delivery]")).await.unwrap() {
        assert_eq!(
            row.attr("data-status").await.unwrap().as_deref(),
            Some("failed")
        );
        row.find(Locator::Css("[data-error-class=http]"))
            .await
            .expect("every row has the http badge");
    }
    screenshot(&c, "deliveries-filtered").await;
    open(&c, &server, "/deliveries?error_class=timeout").await;
    wait_text(&c, ".empty", "No deliveries match").await;

    // Choose two and send them again; the receiver is fixed now.
    receiver.answer("flaky", 200);
    open(&c, &server, "/deliveries?status=failed&error_class=http").await;
    let boxes = c
        .find_all(Locator::Css("tr[data-delivery] input[name=id]"))
        .await
        .unwrap();
    boxes[0].click().await.unwrap();
    boxes[1].click().await.unwrap();
    wait_text(&c, ".toolbar", "2 selected").await;
    c.find(Locator::Css("[data-testid=bulk-resend]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_text(
        &c,
        "[data-testid=confirm-question]",
        "Send again 2 selected deliveries?",
    )
    .await;
    screenshot(&c, "bulk-confirm").await;
    c.find(Locator::Css("[data-testid=confirm]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let result = wait_text(&c, "[data-testid=bulk-result]", "Done.").await;
    assert!(result.contains("Sent again 2."), "{result}");
    screenshot(&c, "bulk-result").await;
    eventually("the two new deliveries succeeded", 30, || async {
        server
            .deliveries_of(flaky)
            .await
            .iter()
            .filter(|d| d.resent_from.is_some() && d.status == DeliveryStatus::Succeeded)
            .count()
            == 2
    })
    .await;
    open(
        &c,
        &server,
        &format!("/deliveries?status=succeeded&destination={flaky}"),
    )
    .await;
    eventually("the table shows the two successes", 10, || async {
        c.find_all(Locator::Css("tr[data-delivery][data-status=succeeded]"))
            .await
            .unwrap()
            .len()
            == 2
    })
    .await;

    // The delivery page: payload and bodies are text, never markup.
    let original = server
        .deliveries_of(flaky)
        .await
        .into_iter()
        .find(|d| d.resent_as.is_some())
        .expect("an original that was sent again");
    open(&c, &server, &format!("/deliveries/{}", original.id)).await;
    let payload = find(&c, "[data-testid=payload]")
        .await
        .text()
        .await
        .unwrap();
    assert!(
        payload.contains("<script>window.__xss = 1</script>"),
        "shown as text: {payload}"
    );
    assert!(c
        .find(Locator::Css(
            "[data-testid=payload] script, [data-testid=payload] img"
        ))
        .await
        .is_err());
    let attempts = c
        .find_all(Locator::Css("[data-testid=attempt]"))
        .await
        .unwrap();
    assert_eq!(attempts.len(), 1);
    assert!(attempts[0].text().await.unwrap().contains("HTTP 500"));
    c.find(Locator::Css("[data-testid=resent-as]"))
        .await
        .expect("links to its resend");
    screenshot(&c, "delivery").await;
    c.execute(
        "document.querySelectorAll('[data-testid=attempt] details').forEach(d => d.open = true);\
         document.querySelector('[data-testid=attempts]').scrollIntoView(); return null;",
        vec![],
    )
    .await
    .unwrap();
    screenshot(&c, "delivery-attempts").await;
    let xss = c
        .execute("return window.__xss === undefined;", vec![])
        .await
        .unwrap();
    assert_eq!(xss, json!(true), "no script from a payload ran");

    // Cancel one retrying delivery from its page.
    let waiting = server.deliveries_of(down).await;
    let one = &waiting[0];
    open(&c, &server, &format!("/deliveries/{}", one.id)).await;
    find(&c, "[data-testid=next-attempt]").await;
    screenshot(&c, "delivery-retrying").await;
    c.find(Locator::Css("[data-testid=cancel-one]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_text(&c, "[data-testid=notice]", "Cancelled").await;
    wait_text(&c, ".head-badges", "cancelled").await;
    assert_eq!(
        server
            .storage
            .get_delivery_by_id(one.id)
            .await
            .unwrap()
            .status,
        DeliveryStatus::Cancelled
    );

    // Cancel every delivery matching a filter, with a confirmation that says how many.
    open(
        &c,
        &server,
        &format!("/deliveries?status=retrying&destination={down}"),
    )
    .await;
    eventually("three retrying rows", 10, || async {
        c.find_all(Locator::Css("tr[data-delivery]"))
            .await
            .unwrap()
            .len()
            == 3
    })
    .await;
    c.find(Locator::Css("[data-testid=select-all-matching]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    c.find(Locator::Css("[data-testid=bulk-cancel]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let question = wait_text(
        &c,
        "[data-testid=confirm-question]",
        "Cancel all 3 deliveries matching",
    )
    .await;
    assert!(question.contains("status retrying"), "{question}");
    c.find(Locator::Css("[data-testid=confirm]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let result = wait_text(&c, "[data-testid=bulk-result]", "Done.").await;
    assert!(result.contains("Cancelled 3."), "{result}");
    let all = server.deliveries_of(down).await;
    assert!(
        all.iter().all(|d| d.status == DeliveryStatus::Cancelled),
        "{all:?}"
    );

    // The overview counts it all.
    open(&c, &server, "/").await;
    find(&c, "svg.chart").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    screenshot(&c, "overview-deliveries").await;

    c.close().await.unwrap();
    server.stop().await;
    eprintln!(
        "support_staff_find_failures_send_them_again_and_cancel took {:?}",
        started.elapsed()
    );
}
