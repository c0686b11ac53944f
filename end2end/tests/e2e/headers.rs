//! An admin gives a destination headers of its own in the settings form: the
//! destination's page shows them masked, never in clear, the form shows them masked
//! too (a masked line kept keeps its value), and the receiver gets them.

use end2end::*;
use serde_json::json;

async fn set_field(c: &fantoccini::Client, css: &str, value: &str) {
    let input = find(c, css).await;
    input.clear().await.unwrap();
    if !value.is_empty() {
        input.send_keys(value).await.unwrap();
    }
}

async fn save(c: &fantoccini::Client) {
    find(c, "[data-testid=save-settings]")
        .await
        .click()
        .await
        .unwrap();
    wait_text(c, "[data-testid=notice]", "Saved the settings").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_sets_a_header_in_the_form_and_sees_it_masked_on_the_destination_page() {
    let receiver = Receiver::start().await;
    let server = start_server().await;
    let dst = server
        .destination(
            &receiver.url("/hooks/a"),
            "ping",
            3,
            json!({"preset": "partyflow"}),
        )
        .await;
    let driver = Driver::start();
    let profile = tempfile::tempdir().unwrap();
    let c = browser(&driver, profile.path()).await;
    sign_in(&c, &server, ADMIN).await;

    // A reserved name is refused, naming it.
    open(&c, &server, &format!("/destinations/{dst}/edit")).await;
    set_field(&c, "textarea[name=headers]", "Host: evil.example").await;
    find(&c, "[data-testid=save-settings]")
        .await
        .click()
        .await
        .unwrap();
    wait_text(&c, "[data-testid=error]", "Headers: Host is set by").await;

    set_field(
        &c,
        "textarea[name=headers]",
        "Authorization: Bearer console-secret-7788\nX-Team: ops",
    )
    .await;
    save(&c).await;

    open(&c, &server, &format!("/destinations/{dst}")).await;
    let shown = wait_text(
        &c,
        "[data-testid=custom-headers]",
        "Authorization: ••••…7788",
    )
    .await;
    assert!(shown.contains("X-Team: ••••"), "{shown}");
    let page = find(&c, "main").await.text().await.unwrap();
    assert!(!page.contains("console-secret"), "never in clear: {page}");
    screenshot(&c, "destination-headers-masked").await;

    // The form shows them masked as well; keeping a masked line keeps its value.
    open(&c, &server, &format!("/destinations/{dst}/edit")).await;
    let field = find(&c, "textarea[name=headers]").await;
    let text = field.prop("value").await.unwrap().unwrap_or_default();
    assert!(text.contains("Authorization: ••••…7788"), "{text}");
    assert!(!text.contains("console-secret"), "{text}");
    set_field(
        &c,
        "textarea[name=headers]",
        "Authorization: ••••…7788\nX-Team: dev",
    )
    .await;
    save(&c).await;
    let saved = server
        .storage
        .get_destination(server.space, dst)
        .await
        .unwrap()
        .headers;
    assert_eq!(
        saved.get("authorization"),
        Some("Bearer console-secret-7788")
    );
    assert_eq!(saved.get("x-team"), Some("dev"));

    server.publish("ping", json!({"n": 1})).await;
    let got = receiver.wait_for(1).await;
    assert_eq!(got[0].header("authorization"), "Bearer console-secret-7788");
    assert_eq!(got[0].header("x-team"), "dev");

    c.close().await.unwrap();
    server.stop().await;
}
