//! The console for everyone (issue 16, item 8): axe-core (npm, pinned in `./dev`'s
//! set-up; its `axe.min.js` injected here, nothing downloaded) finds no serious or
//! critical violation on any page, signed in as an admin and on the sign-in page; at a
//! phone's 390 px no page is wider than the screen (screenshots of the overview and the
//! deliveries table); and the deliveries table's row selection and bulk action work
//! from the keyboard alone, with the focus visible.

use end2end::*;
use fantoccini::key::Key;
use fantoccini::Locator;
use serde_json::{json, Value};
use server::domain::*;

/// axe-core's `axe.min.js`: `PARTYFLOW_TEST_AXE` (set by `./dev test`), or where
/// `./dev`'s set-up installs it.
fn axe_source() -> String {
    let path = std::env::var("PARTYFLOW_TEST_AXE").unwrap_or_else(|_| {
        let home = std::env::var("HOME").unwrap_or_default();
        format!("{home}/.cache/partyflow/npm/node_modules/axe-core/axe.min.js")
    });
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("axe-core at {path} ({e}): run ./dev test, which installs it"))
}

/// The serious and critical violations axe-core finds on the open page, as
/// `rule: help — element: why` lines.
async fn serious_violations(c: &fantoccini::Client, axe: &str) -> Vec<String> {
    c.execute(&format!("{axe}\n;return true;"), vec![])
        .await
        .unwrap();
    let found = c
        .execute_async(
            r#"const done = arguments[arguments.length - 1];
            axe.run(document, { resultTypes: ['violations'] }).then(r => done(
                r.violations
                    .filter(v => v.impact === 'serious' || v.impact === 'critical')
                    .flatMap(v => v.nodes.slice(0, 5).map(n =>
                        `${v.id} (${v.impact}): ${v.help} — ${n.target.join(' ')}: ${n.failureSummary}`))
            )).catch(e => done(['axe failed: ' + e]));"#,
            vec![],
        )
        .await
        .unwrap();
    found
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect()
}

/// How much wider than the window the page is, in CSS pixels (0: it fits).
async fn overflow(c: &fantoccini::Client) -> f64 {
    let v: Value = c
        .execute(
            "return document.documentElement.scrollWidth - window.innerWidth;",
            vec![],
        )
        .await
        .unwrap();
    v.as_f64().unwrap()
}

/// A space with something on every page: a destination that fails (so deliveries,
/// error classes and notifications exist) and one that succeeds, an incoming webhook.
async fn a_busy_space(server: &Server, receiver: &Receiver) -> (DestinationId, String) {
    receiver.reply_at("/hooks/down", Reply::status(503));
    let ok = server
        .destination(
            &receiver.url("/hooks/ok"),
            "order.created",
            3,
            json!({"preset": "partyflow"}),
        )
        .await;
    let down = server
        .destination(
            &receiver.url("/hooks/down"),
            "order.created",
            1,
            json!({"preset": "partyflow"}),
        )
        .await;
    for i in 0..3 {
        server.publish("order.created", json!({"order": i})).await;
    }
    wait_until(
        "the deliveries to the failing receiver failed",
        30,
        || async {
            server
                .deliveries_of(down)
                .await
                .iter()
                .filter(|d| d.status == DeliveryStatus::Failed)
                .count()
                == 3
        },
    )
    .await;
    incoming_webhook(server, "orders").await;
    let delivery = server.deliveries_of(ok).await[0].id.to_string();
    (down, delivery)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_page_passes_axe_and_fits_a_phone() {
    let axe = axe_source();
    let receiver = Receiver::start().await;
    let server = start_server_with(|c| c.dispatch.auto_disable_after = 100).await;
    let (destination, delivery) = a_busy_space(&server, &receiver).await;
    let driver = Driver::start();
    let profile = tempfile::tempdir().unwrap();
    let c = browser(&driver, profile.path()).await;

    let mut found = Vec::new();
    open(&c, &server, "/login").await;
    found.extend(
        serious_violations(&c, &axe)
            .await
            .into_iter()
            .map(|v| format!("/login: {v}")),
    );
    sign_in(&c, &server, ADMIN).await;

    let pages = [
        "/".to_owned(),
        "/deliveries".to_owned(),
        format!("/deliveries?destination={destination}&status=failed"),
        format!("/deliveries/{delivery}"),
        format!("/deliveries/bulk?op=resend&destination={destination}&all=true"),
        "/destinations".to_owned(),
        format!("/destinations/{destination}"),
        format!("/destinations/{destination}/edit"),
        format!("/destinations/{destination}/resend-failed"),
        "/incoming-webhooks".to_owned(),
        "/event-types".to_owned(),
        "/notifications".to_owned(),
        "/spaces".to_owned(),
        format!("/spaces/{}", server.space),
        "/users".to_owned(),
        "/alerts".to_owned(),
        "/audit-log".to_owned(),
        "/no-such-page".to_owned(),
    ];
    for path in &pages {
        open(&c, &server, path).await;
        found.extend(
            serious_violations(&c, &axe)
                .await
                .into_iter()
                .map(|v| format!("{path}: {v}")),
        );
    }

    // A phone: 390 CSS pixels wide. No page is wider than the screen (tables scroll
    // inside their frame), and axe still finds nothing.
    c.set_window_size(390, 844).await.unwrap();
    let mut too_wide = Vec::new();
    for path in &pages {
        open(&c, &server, path).await;
        let extra = overflow(&c).await;
        if extra > 0.5 {
            too_wide.push(format!("{path}: {extra} px too wide"));
        }
        if path == "/" || path == "/deliveries" {
            found.extend(
                serious_violations(&c, &axe)
                    .await
                    .into_iter()
                    .map(|v| format!("{path} at 390 px: {v}")),
            );
        }
    }
    open(&c, &server, "/").await;
    screenshot(&c, "phone-overview").await;
    open(&c, &server, "/deliveries").await;
    screenshot(&c, "phone-deliveries").await;

    // The top bar at a laptop's width: one row of tools, the navigation below it, and
    // "Sign out" on the first row (it used to wrap on its own).
    c.set_window_size(1280, 800).await.unwrap();
    open(&c, &server, "/").await;
    let rows: Value = c
        .execute(
            r#"const top = el => el.getBoundingClientRect().top;
            const bar = document.querySelector('.topbar');
            return [top(bar.querySelector('.brand')), top(bar.querySelector('form button')),
                    bar.querySelector('nav').getBoundingClientRect().height];"#,
            vec![],
        )
        .await
        .unwrap();
    screenshot(&c, "topbar-1280").await;

    assert!(
        found.is_empty(),
        "axe-core found serious or critical violations:\n{}",
        found.join("\n")
    );
    assert!(too_wide.is_empty(), "at 390 px: {too_wide:?}");
    let (brand, sign_out, nav) = (
        rows[0].as_f64().unwrap(),
        rows[1].as_f64().unwrap(),
        rows[2].as_f64().unwrap(),
    );
    assert!(
        (brand - sign_out).abs() < 12.0,
        "Sign out is on the brand's row at 1280 px: {rows}"
    );
    assert!(nav < 45.0, "the navigation is one row at 1280 px: {rows}");
    c.close().await.unwrap();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_are_selected_and_sent_again_with_the_keyboard_alone() {
    let receiver = Receiver::start().await;
    let server = start_server_with(|c| c.dispatch.auto_disable_after = 100).await;
    let (destination, _) = a_busy_space(&server, &receiver).await;
    let failed = server
        .deliveries_of(destination)
        .await
        .into_iter()
        .find(|d| d.status == DeliveryStatus::Failed)
        .unwrap()
        .id
        .to_string();
    let driver = Driver::start();
    let profile = tempfile::tempdir().unwrap();
    let c = browser(&driver, profile.path()).await;
    sign_in(&c, &server, ADMIN).await;
    open(
        &c,
        &server,
        &format!("/deliveries?destination={destination}&status=failed"),
    )
    .await;

    // Tab from the top of the page to the row's checkbox: it is reachable.
    let target = format!("input[name=id][value='{failed}']");
    let mut reached = false;
    for _ in 0..80 {
        c.active_element()
            .await
            .unwrap()
            .send_keys(&Key::Tab.to_string())
            .await
            .unwrap();
        let here: Value = c
            .execute(
                &format!("return document.activeElement.matches(\"{target}\");"),
                vec![],
            )
            .await
            .unwrap();
        if here == Value::Bool(true) {
            reached = true;
            break;
        }
    }
    assert!(reached, "Tab reaches the row's checkbox");
    // The focus is visible on it.
    let outline: Value = c
        .execute(
            "const s = getComputedStyle(document.activeElement); return [s.outlineStyle, s.outlineWidth];",
            vec![],
        )
        .await
        .unwrap();
    assert_ne!(
        outline[0], "none",
        "the focused checkbox shows its focus: {outline}"
    );
    // Space selects the row.
    c.active_element()
        .await
        .unwrap()
        .send_keys(" ")
        .await
        .unwrap();
    let checked = c
        .find(Locator::Css(&target))
        .await
        .unwrap()
        .prop("checked")
        .await
        .unwrap();
    assert_eq!(checked.as_deref(), Some("true"), "Space selects the row");
    wait_text(&c, ".toolbar", "1 selected on this page").await;

    // Back with Shift+Tab to "Send again…", and Enter.
    let mut on_button = false;
    for _ in 0..40 {
        c.active_element()
            .await
            .unwrap()
            .send_keys(&format!("{}{}", Key::Shift, Key::Tab))
            .await
            .unwrap();
        let here: Value = c
            .execute(
                "return document.activeElement.matches('[data-testid=bulk-resend]');",
                vec![],
            )
            .await
            .unwrap();
        if here == Value::Bool(true) {
            on_button = true;
            break;
        }
    }
    assert!(on_button, "Shift+Tab reaches the bulk action");
    c.active_element()
        .await
        .unwrap()
        .send_keys(&Key::Enter.to_string())
        .await
        .unwrap();
    wait_until("the bulk page opens", 15, || async {
        c.current_url().await.unwrap().path() == "/deliveries/bulk"
    })
    .await;
    let url = c.current_url().await.unwrap();
    assert!(
        url.query().unwrap_or_default().contains(&failed),
        "the bulk page is for the selected row: {url}"
    );
    wait_for_hydration(&c).await;
    c.close().await.unwrap();
    server.stop().await;
}
