//! An admin in a real browser: a destination auto-disabled after dead-letters in a
//! row raises a notification, the badge in the navigation shows it, Re-enable says
//! how many paused deliveries resume and they do; a disabled incoming webhook is
//! re-enabled.

use std::time::Duration;

use end2end::*;
use fantoccini::Locator;
use serde_json::json;
use server::domain::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_auto_disabled_destination_is_announced_and_re_enabled_and_its_paused_deliveries_resume()
{
    let started = std::time::Instant::now();
    let receiver = Receiver::start().await;
    let server = start_server().await; // three dead-letters in a row disable a destination
                                       // Slow failures: all five events are in before the third dead-letter disables it.
    receiver.reply_at(
        "/hooks/shaky",
        Reply::status(500).after(Duration::from_millis(400)),
    );
    let shaky = server
        .destination(
            &receiver.url("/hooks/shaky"),
            "ping",
            1,
            json!({"preset": "partyflow"}),
        )
        .await;
    for i in 0..5 {
        server.publish("ping", json!({"n": i})).await;
    }
    wait_until(
        "the destination is disabled after three dead-letters",
        30,
        || async {
            server
                .storage
                .get_destination(server.space, shaky)
                .await
                .unwrap()
                .status
                == DestinationStatus::Inactive
        },
    )
    .await;
    wait_until(
        "the two deliveries still waiting are paused",
        10,
        || async { server.storage.count_paused(shaky).await.unwrap() == 2 },
    )
    .await;
    receiver.reply_at("/hooks/shaky", Reply::status(500));

    // A disabled incoming webhook (it failed once with a threshold of one).
    let hook = incoming_webhook(&server, "alerts").await;
    let effects = server
        .storage
        .record_incoming_result(hook, false, 1, server::clock::now_ms())
        .await
        .unwrap();
    assert!(effects.disabled);

    let driver = Driver::start();
    let profile = tempfile::tempdir().unwrap();
    let c = browser(&driver, profile.path()).await;
    sign_in(&c, &server, ADMIN).await;

    // The badge shows the two notifications on every page.
    wait_text(&c, "[data-testid=unread-badge]", "2").await;
    find(&c, "svg.chart").await;
    screenshot(&c, "overview").await;
    open(&c, &server, "/deliveries").await;
    wait_text(&c, "[data-testid=unread-badge]", "2").await;

    // The notification links to the destination.
    c.find(Locator::Css("nav a[href='/notifications']"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let item = wait_text(&c, "li[data-kind='destination.disabled']", "was disabled").await;
    assert!(item.contains(&receiver.url("/hooks/shaky")), "{item}");
    // It names the destination (no name of its own: its URL's host), the URL beside it.
    let host = server::domain::default_name(&receiver.url("/hooks/shaky"));
    assert!(
        item.contains(&format!(
            "Destination \u{201c}{host}\u{201d} ({})",
            receiver.url("/hooks/shaky")
        )),
        "{item}"
    );
    screenshot(&c, "notifications").await;
    c.find(Locator::Css("li[data-kind='destination.disabled'] a"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let button = wait_text(&c, "[data-testid=reenable]", "Re-enable").await;
    wait_text(&c, "[data-testid=destination-name]", &host).await;
    assert!(button.contains("2 paused deliveries resume"), "{button}");
    screenshot(&c, "destination-inactive").await;

    // Fixed receiver; Re-enable; the paused deliveries go out and succeed.
    receiver.reply_at("/hooks/shaky", Reply::status(200));
    c.find(Locator::Css("[data-testid=reenable]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_text(&c, "[data-testid=notice]", "2 paused deliveries resume").await;
    wait_until(
        "the paused deliveries were sent and succeeded",
        30,
        || async {
            server
                .deliveries_of(shaky)
                .await
                .iter()
                .filter(|d| d.status == DeliveryStatus::Succeeded)
                .count()
                == 2
        },
    )
    .await;
    assert_eq!(
        server
            .storage
            .get_destination(server.space, shaky)
            .await
            .unwrap()
            .status,
        DestinationStatus::Active
    );
    wait_text(&c, ".head-badges", "active").await;
    screenshot(&c, "destination").await;
    open(&c, &server, "/destinations").await;
    find(
        &c,
        &format!("tr[data-destination='{shaky}'][data-status=active]"),
    )
    .await;
    screenshot(&c, "destinations").await;

    // Re-enable the incoming webhook.
    open(&c, &server, "/incoming-webhooks").await;
    find(&c, &format!("tr[data-hook='{hook}'][data-status=disabled]")).await;
    screenshot(&c, "incoming-disabled").await;
    c.find(Locator::Css(&format!(
        "tr[data-hook='{hook}'] [data-testid=reenable-hook]"
    )))
    .await
    .unwrap()
    .click()
    .await
    .unwrap();
    find(&c, &format!("tr[data-hook='{hook}'][data-status=active]")).await;
    wait_text(&c, "[data-testid=notice]", "Re-enabled").await;
    assert_eq!(
        server
            .storage
            .get_incoming_webhook_by_id(hook)
            .await
            .unwrap()
            .status,
        IncomingWebhookStatus::Active
    );
    screenshot(&c, "incoming").await;

    // Mark everything read: the badge goes.
    open(&c, &server, "/notifications").await;
    c.find(Locator::Css(".toolbar button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_text(&c, "[data-testid=notice]", "Marked 2 notifications read").await;
    wait_until("the badge disappears", 10, || async {
        c.find(Locator::Css("[data-testid=unread-badge]"))
            .await
            .is_err()
    })
    .await;
    assert_eq!(
        server.storage.count_unread_notifications().await.unwrap(),
        0
    );

    c.close().await.unwrap();
    server.stop().await;
    eprintln!("auto-disable test took {:?}", started.elapsed());
}
