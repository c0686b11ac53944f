//! Forms keep what was typed (issue 16, item 7): a destination's settings saved with a
//! jq program that does not compile come back with every value as typed — never the
//! saved ones — and the message beside the transformation, with JavaScript off (a plain
//! form post) and on.

use end2end::*;
use fantoccini::{Client, Locator};
use serde_json::json;

const BAD_JQ: &str = "{id: .id";
const TYPED_URL: &str = "https://typed.example/hooks";
const TYPED_DESCRIPTION: &str = "typed, not saved";

async fn set_field(c: &Client, css: &str, value: &str) {
    let e = find(c, css).await;
    e.clear().await.unwrap();
    e.send_keys(value).await.unwrap();
}

async fn value_of(c: &Client, css: &str) -> String {
    find(c, css)
        .await
        .prop("value")
        .await
        .unwrap()
        .unwrap_or_default()
}

/// Types a new URL, description and a bad jq program into the settings and saves.
async fn save_a_bad_program(c: &Client) {
    set_field(c, "input[name=url]", TYPED_URL).await;
    set_field(c, "input[name=description]", TYPED_DESCRIPTION).await;
    set_field(c, "textarea[name=transformation]", BAD_JQ).await;
    find(c, "[data-testid=save-settings]")
        .await
        .click()
        .await
        .unwrap();
}

/// The form shows what was typed and the refusal beside the transformation; the
/// destination kept its saved settings.
async fn the_form_kept_what_was_typed(
    c: &Client,
    server: &Server,
    id: server::domain::DestinationId,
    saved_url: &str,
) {
    let beside = wait_text(
        c,
        "[data-testid=field-error]",
        "Transformation: the jq program does not compile",
    )
    .await;
    assert!(!beside.is_empty());
    // Beside the transformation: the element right after its label.
    let next_to: serde_json::Value = c
        .execute(
            "return document.querySelector('[data-testid=field-error]').previousElementSibling.querySelector('textarea')?.name ?? null;",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(
        next_to,
        json!("transformation"),
        "the message is beside the field it names"
    );
    assert_eq!(value_of(c, "input[name=url]").await, TYPED_URL);
    assert_eq!(
        value_of(c, "input[name=description]").await,
        TYPED_DESCRIPTION
    );
    assert_eq!(value_of(c, "textarea[name=transformation]").await, BAD_JQ);
    let d = server.storage.get_destination_by_id(id).await.unwrap();
    assert_eq!(d.url, saved_url, "nothing was saved");
}

async fn a_destination(server: &Server) -> (server::domain::DestinationId, String) {
    let url = "https://saved.example/hooks".to_owned();
    let id = server
        .destination(&url, "order.created", 3, json!({"preset": "partyflow"}))
        .await;
    (id, url)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_settings_form_keeps_what_was_typed_without_javascript() {
    let server = start_server().await;
    let (id, saved_url) = a_destination(&server).await;
    let driver = Driver::start();
    let profile = tempfile::tempdir().unwrap();
    let c = browser_without_javascript(&driver, profile.path()).await;
    c.goto(&server.url(&format!("/destinations/{id}/edit")))
        .await
        .unwrap();
    set_field(&c, "input[name=email]", ADMIN).await;
    set_field(&c, "input[name=password]", PASSWORD).await;
    find(&c, "button[type=submit]").await.click().await.unwrap();
    find(&c, "[data-testid=save-settings]").await;

    save_a_bad_program(&c).await;
    the_form_kept_what_was_typed(&c, &server, id, &saved_url).await;
    assert!(
        c.find(Locator::Css("body[data-hydrated]")).await.is_err(),
        "no JavaScript ran"
    );
    screenshot(&c, "form-kept-without-javascript").await;
    c.close().await.unwrap();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_settings_form_keeps_what_was_typed_with_javascript() {
    let server = start_server().await;
    let (id, saved_url) = a_destination(&server).await;
    let driver = Driver::start();
    let profile = tempfile::tempdir().unwrap();
    let c = browser(&driver, profile.path()).await;
    sign_in(&c, &server, ADMIN).await;
    open(&c, &server, &format!("/destinations/{id}/edit")).await;

    save_a_bad_program(&c).await;
    the_form_kept_what_was_typed(&c, &server, id, &saved_url).await;
    wait_text(
        &c,
        "[data-testid=inline-error]",
        "Not saved. Transformation:",
    )
    .await;
    screenshot(&c, "form-kept-with-javascript").await;
    c.close().await.unwrap();
    server.stop().await;
}
