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

// Every other form that can be refused keeps what was typed the same way (issue 16
// item 7): without JavaScript, a refused post comes back with the user's values
// (`guard::keep_typed`, `Typed::or`) and the message beside the field it names.

/// A browser without JavaScript, signed in through the plain login form, at `path`
/// (its page's heading `heading`).
async fn plain_browser_at(
    driver: &Driver,
    profile: &std::path::Path,
    server: &Server,
    path: &str,
    heading: &str,
) -> Client {
    let c = browser_without_javascript(driver, profile).await;
    c.goto(&server.url(path)).await.unwrap();
    set_field(&c, "input[name=email]", ADMIN).await;
    set_field(&c, "input[name=password]", PASSWORD).await;
    find(&c, "button[type=submit]").await.click().await.unwrap();
    wait_text(&c, "h1", heading).await;
    c
}

/// The refusal beside a field says `text`; returns the name of the field in the label
/// right before it.
async fn refused_beside(c: &Client, text: &str) -> String {
    wait_text(c, "[data-testid=field-error]", text).await;
    let field: serde_json::Value = c
        .execute(
            "return document.querySelector('[data-testid=field-error]').previousElementSibling\
             .querySelector('input, textarea, select')?.name ?? null;",
            vec![],
        )
        .await
        .unwrap();
    field.as_str().unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_event_type_keeps_what_was_typed_without_javascript() {
    let server = start_server().await;
    let driver = Driver::start();
    let profile = tempfile::tempdir().unwrap();
    let c = plain_browser_at(
        &driver,
        profile.path(),
        &server,
        "/event-types",
        "Event types",
    )
    .await;
    let bad_schema = r#"{"type": "money"}"#;
    find(&c, "details.create summary")
        .await
        .click()
        .await
        .unwrap();
    set_field(&c, "details.create input[name=name]", "order.created").await;
    set_field(
        &c,
        "details.create input[name=description]",
        "typed, not saved",
    )
    .await;
    set_field(&c, "details.create textarea[name=schema]", bad_schema).await;
    find(&c, "input[name=deprecated]")
        .await
        .click()
        .await
        .unwrap();
    find(&c, "[data-testid=create-event-type]")
        .await
        .click()
        .await
        .unwrap();

    let beside = refused_beside(&c, "Schema: the schema is not a valid JSON Schema").await;
    assert_eq!(beside, "schema", "the message is beside the schema");
    assert_eq!(
        value_of(&c, "details.create input[name=name]").await,
        "order.created"
    );
    assert_eq!(
        value_of(&c, "details.create input[name=description]").await,
        "typed, not saved"
    );
    assert_eq!(
        value_of(&c, "details.create textarea[name=schema]").await,
        bad_schema
    );
    let ticked: serde_json::Value = c
        .execute(
            "return document.querySelector('details.create input[name=deprecated]').checked;",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(ticked, json!(true), "the box stays ticked");
    assert!(
        server
            .storage
            .list_all_event_types(server.space)
            .await
            .unwrap()
            .is_empty(),
        "nothing was saved"
    );
    assert!(
        c.find(Locator::Css("body[data-hydrated]")).await.is_err(),
        "no JavaScript ran"
    );
    c.close().await.unwrap();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_incoming_webhook_keeps_what_was_typed_without_javascript() {
    let server = start_server().await;
    incoming_webhook(&server, "first").await;
    let driver = Driver::start();
    let profile = tempfile::tempdir().unwrap();
    let c = plain_browser_at(
        &driver,
        profile.path(),
        &server,
        "/incoming-webhooks",
        "Incoming webhooks",
    )
    .await;
    find(&c, "details.create summary")
        .await
        .click()
        .await
        .unwrap();
    // Only white space: the browser lets it through (`required`), the server refuses it.
    set_field(&c, "details.create input[name=name]", "   ").await;
    find(&c, "details.create button[type=submit]")
        .await
        .click()
        .await
        .unwrap();

    let beside = refused_beside(&c, "Name: a webhook name needs 1 to 100 characters").await;
    assert_eq!(beside, "name");
    assert_eq!(value_of(&c, "details.create input[name=name]").await, "   ");
    let open: serde_json::Value = c
        .execute(
            "return document.querySelector('details.create').open;",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(open, json!(true), "the refused form is open again");
    c.close().await.unwrap();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_space_user_and_retention_forms_keep_what_was_typed_without_javascript() {
    let server = start_server().await;
    let driver = Driver::start();
    let profile = tempfile::tempdir().unwrap();
    let c = plain_browser_at(&driver, profile.path(), &server, "/spaces", "Spaces").await;

    // A new space whose name is only white space, on the Pro plan.
    set_field(&c, "section.create input[name=name]", "   ").await;
    find(&c, "section.create select[name=plan]")
        .await
        .select_by_value("pro")
        .await
        .unwrap();
    find(&c, "section.create button[type=submit]")
        .await
        .click()
        .await
        .unwrap();
    assert_eq!(refused_beside(&c, "Name: a space name needs").await, "name");
    assert_eq!(value_of(&c, "section.create input[name=name]").await, "   ");
    assert_eq!(
        value_of(&c, "section.create select[name=plan]").await,
        "pro"
    );

    // A user whose email is taken: the email and role come back, never the password.
    c.goto(&server.url("/users")).await.unwrap();
    set_field(&c, "section.create input[name=email]", SUPPORT).await;
    set_field(
        &c,
        "section.create input[name=password]",
        "a long enough password",
    )
    .await;
    find(&c, "section.create select[name=role]")
        .await
        .select_by_value("admin")
        .await
        .unwrap();
    find(&c, "section.create button[type=submit]")
        .await
        .click()
        .await
        .unwrap();
    assert_eq!(
        refused_beside(&c, "Email: a user with the email").await,
        "email"
    );
    assert_eq!(
        value_of(&c, "section.create input[name=email]").await,
        SUPPORT
    );
    assert_eq!(
        value_of(&c, "section.create select[name=role]").await,
        "admin"
    );
    assert_eq!(
        value_of(&c, "section.create input[name=password]").await,
        "",
        "never a password"
    );

    // A retention that is not a duration.
    c.goto(&server.url(&format!("/spaces/{}", server.space)))
        .await
        .unwrap();
    set_field(&c, "input[name=retention]", "forever").await;
    find(&c, "[data-testid=retention] button[type=submit]")
        .await
        .click()
        .await
        .unwrap();
    assert_eq!(
        refused_beside(&c, "Retention: \"forever\" is not a duration").await,
        "retention"
    );
    assert_eq!(value_of(&c, "input[name=retention]").await, "forever");
    assert!(
        server
            .storage
            .get_space(server.space)
            .await
            .unwrap()
            .retention
            .is_none(),
        "nothing was saved"
    );
    screenshot(&c, "forms-kept-without-javascript").await;
    c.close().await.unwrap();
    server.stop().await;
}
