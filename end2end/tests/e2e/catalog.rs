//! The event-type catalog page: an admin adds a type with a schema and an example and
//! sees it listed; marks it deprecated; support staff read the catalog without the
//! forms; the destination form suggests the catalog's names.

use end2end::*;
use fantoccini::{Client, Locator};

/// Opens the "New event type" form unless it is open already.
async fn open_create_form(c: &Client) {
    let details = find(c, "details.create").await;
    if details.attr("open").await.unwrap().is_none() {
        find(c, "details.create summary")
            .await
            .click()
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_adds_an_event_type_in_the_catalog_and_sees_it_listed() {
    let server = start_server().await;
    let driver = Driver::start();
    let profile = tempfile::tempdir().unwrap();
    let c = browser(&driver, profile.path()).await;
    sign_in(&c, &server, ADMIN).await;

    c.find(Locator::Css("nav a[href='/event-types']"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_text(&c, "h1", "Event types").await;
    open_create_form(&c).await;
    find(&c, "details.create input[name=name]")
        .await
        .send_keys("order.created")
        .await
        .unwrap();
    find(&c, "details.create input[name=description]")
        .await
        .send_keys("An order was placed.")
        .await
        .unwrap();
    find(&c, "details.create textarea[name=schema]")
        .await
        .send_keys(r#"{"type": "object", "required": ["orderId"], "properties": {"orderId": {"type": "integer"}}}"#)
        .await
        .unwrap();
    find(&c, "details.create textarea[name=example]")
        .await
        .send_keys(r#"{"orderId": 42}"#)
        .await
        .unwrap();
    screenshot(&c, "catalog-create").await;
    find(&c, "[data-testid=create-event-type]")
        .await
        .click()
        .await
        .unwrap();
    wait_text(&c, "[data-testid=notice]", "Added event type order.created").await;
    let row = "tr[data-event-type='order.created']";
    wait_text(&c, row, "An order was placed.").await;
    find(&c, &format!("{row} [data-testid=schema-present]")).await;
    let stored = server
        .storage
        .find_event_type_by_name(server.space, "order.created")
        .await
        .unwrap();
    assert_eq!(stored.example, Some(serde_json::json!({"orderId": 42})));
    assert!(!stored.deprecated);

    // An example that breaks the schema is refused, saying where.
    open_create_form(&c).await;
    find(&c, "details.create input[name=name]")
        .await
        .send_keys("order.paid")
        .await
        .unwrap();
    find(&c, "details.create textarea[name=schema]")
        .await
        .send_keys(r#"{"required": ["total"]}"#)
        .await
        .unwrap();
    find(&c, "details.create textarea[name=example]")
        .await
        .send_keys("{}")
        .await
        .unwrap();
    find(&c, "[data-testid=create-event-type]")
        .await
        .click()
        .await
        .unwrap();
    wait_text(
        &c,
        "[data-testid=error]",
        "The example does not match the schema",
    )
    .await;

    // Deprecating it marks the row.
    find(&c, &format!("{row} details.edit summary"))
        .await
        .click()
        .await
        .unwrap();
    find(&c, &format!("{row} input[name=deprecated]"))
        .await
        .click()
        .await
        .unwrap();
    find(&c, &format!("{row} button[type=submit]"))
        .await
        .click()
        .await
        .unwrap();
    wait_text(&c, "[data-testid=notice]", "Saved event type order.created").await;
    wait_text(&c, &format!("{row} [data-testid=deprecated]"), "deprecated").await;
    screenshot(&c, "catalog-listed").await;

    // The destination form suggests the catalog's names, deprecated ones marked.
    open(&c, &server, "/destinations").await;
    find(&c, "details.create summary")
        .await
        .click()
        .await
        .unwrap();
    wait_text(
        &c,
        "details.create [data-testid=catalog-hint]",
        "order.created",
    )
    .await;
    wait_text(
        &c,
        "details.create [data-testid=catalog-hint]",
        "deprecated",
    )
    .await;
    let list = find(&c, "details.create input[name=event_types]")
        .await
        .attr("list")
        .await
        .unwrap();
    assert_eq!(list.as_deref(), Some("catalog-event-types"));
    find(
        &c,
        "datalist#catalog-event-types option[value='order.created']",
    )
    .await;
    screenshot(&c, "catalog-destination-form").await;

    // Support staff read the catalog, without the forms.
    let profile = tempfile::tempdir().unwrap();
    let s = browser(&driver, profile.path()).await;
    sign_in(&s, &server, SUPPORT).await;
    open(&s, &server, "/event-types").await;
    wait_text(&s, row, "An order was placed.").await;
    assert!(
        s.find(Locator::Css("details.create")).await.is_err(),
        "no create form for support"
    );
    assert!(
        s.find(Locator::Css("details.edit")).await.is_err(),
        "no edit form for support"
    );
    s.close().await.unwrap();
    c.close().await.unwrap();
    server.stop().await;
}
