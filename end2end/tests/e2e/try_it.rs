//! The destination form's "Try it" box: an admin types a filter and a transformation,
//! pastes a sample payload and presses the button; the server's sandbox says whether
//! the filter passes it, keeps it out or fails, and shows what the transformation
//! makes of it, before anything is saved.

use end2end::*;
use serde_json::json;

async fn set_field(c: &fantoccini::Client, css: &str, value: &str) {
    let input = find(c, css).await;
    input.clear().await.unwrap();
    if !value.is_empty() {
        input.send_keys(value).await.unwrap();
    }
}

async fn press_try(c: &fantoccini::Client) {
    find(c, "[data-testid=try-button]")
        .await
        .click()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_try_it_box_shows_the_filters_verdict_and_the_transformed_payload_before_saving() {
    let receiver = Receiver::start().await;
    let server = start_server().await;
    let dst = server
        .destination(
            &receiver.url("/orders"),
            "order.paid",
            3,
            json!({"preset": "partyflow"}),
        )
        .await;
    let driver = Driver::start();
    let profile = tempfile::tempdir().unwrap();
    let c = browser(&driver, profile.path()).await;
    sign_in(&c, &server, ADMIN).await;
    open(&c, &server, &format!("/destinations/{dst}/edit")).await;

    set_field(
        &c,
        "textarea[name=filter]",
        r#".total > 100 and .currency == "EUR""#,
    )
    .await;
    set_field(
        &c,
        "textarea[name=transformation]",
        "{order: .id, amount: \"\\(.total) \\(.currency)\"}",
    )
    .await;
    set_field(
        &c,
        "[data-testid=try-sample]",
        r#"{"id": 42, "total": 150, "currency": "EUR"}"#,
    )
    .await;
    press_try(&c).await;
    wait_text(&c, "[data-testid=try-verdict]", "Filter: passes").await;
    let output = wait_text(&c, "[data-testid=try-output]", "\"order\": 42").await;
    assert!(output.contains("\"amount\": \"150 EUR\""), "{output}");
    c.execute(
        "document.querySelector('[data-testid=try-it]').scrollIntoView()",
        vec![],
    )
    .await
    .unwrap();
    screenshot(&c, "destination-try-it-passes").await;

    // Another sample: kept out.
    set_field(
        &c,
        "[data-testid=try-sample]",
        r#"{"id": 43, "total": 5, "currency": "EUR"}"#,
    )
    .await;
    press_try(&c).await;
    wait_text(&c, "[data-testid=try-verdict]", "Filter: filtered out").await;

    // A sample the filter cannot read: the error the delivery would fail with.
    set_field(&c, "[data-testid=try-sample]", r#"["not", "an", "object"]"#).await;
    press_try(&c).await;
    let error = wait_text(&c, "[data-testid=try-verdict]", "Filter: error").await;
    assert!(error.contains("the filter failed"), "{error}");
    wait_text(&c, "[data-testid=try-output]", "Transformation: error").await;
    c.execute(
        "document.querySelector('[data-testid=try-it]').scrollIntoView()",
        vec![],
    )
    .await
    .unwrap();
    screenshot(&c, "destination-try-it-error").await;

    // Trying saved nothing.
    let d = server
        .storage
        .get_destination(server.space, dst)
        .await
        .unwrap();
    assert_eq!((d.filter, d.transformation), (None, None));
    c.close().await.unwrap();
    server.stop().await;
}
