//! Roles and request forgery: support staff see no Re-enable, destination settings,
//! test events or user management, and the server refuses those calls even when made
//! directly over HTTP; a change posted with another site's Origin is refused for everyone.

use end2end::*;
use fantoccini::Locator;
use serde_json::json;
use server::domain::*;

/// Posts a server function as the browser's JavaScript would (no `text/html`).
async fn call(
    client: &reqwest::Client,
    server: &Server,
    endpoint: &str,
    form: &[(&str, &str)],
    origin: Option<&str>,
) -> (u16, String) {
    let mut req = client
        .post(server.url(&format!("/api/{endpoint}")))
        .form(form);
    if let Some(origin) = origin {
        req = req.header("origin", origin);
    }
    let resp = req.send().await.unwrap();
    (resp.status().as_u16(), resp.text().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn support_staff_cannot_re_enable_or_manage_users_and_the_server_refuses_it_too() {
    let started = std::time::Instant::now();
    let receiver = Receiver::start().await;
    let server = start_server().await;
    let dst = server
        .destination(
            &receiver.url("/hooks/off"),
            "ping",
            1,
            json!({"preset": "partyflow"}),
        )
        .await;
    let now = server::clock::now_ms();
    server
        .storage
        .set_destination_status(
            server.space,
            dst,
            DestinationStatus::Inactive,
            Some("switched off for the test"),
            now,
            None,
        )
        .await
        .unwrap();
    let hook = incoming_webhook(&server, "intake").await;
    server
        .storage
        .set_incoming_webhook_status(
            server.space,
            hook,
            IncomingWebhookStatus::Disabled,
            now,
            None,
        )
        .await
        .unwrap();

    // In the browser: the buttons and links are not there.
    let driver = Driver::start();
    let profile = tempfile::tempdir().unwrap();
    let c = browser(&driver, profile.path()).await;
    sign_in(&c, &server, SUPPORT).await;
    wait_text(&c, "[data-testid=signed-in-as]", "support").await;
    assert!(
        c.find(Locator::Css("nav a[href='/users']")).await.is_err(),
        "no Users link for support"
    );
    open(&c, &server, "/destinations").await;
    find(
        &c,
        &format!("tr[data-destination='{dst}'][data-status=inactive]"),
    )
    .await;
    assert!(
        c.find(Locator::Css("[data-testid=reenable]"))
            .await
            .is_err(),
        "no Re-enable for support"
    );
    assert!(
        c.find(Locator::Css("details.create")).await.is_err(),
        "no create form for support"
    );
    screenshot(&c, "support-destinations").await;
    open(&c, &server, &format!("/destinations/{dst}")).await;
    find(&c, "dl.facts").await;
    for admin_only in ["edit-settings", "send-test"] {
        assert!(
            c.find(Locator::Css(&format!("[data-testid={admin_only}]")))
                .await
                .is_err(),
            "no {admin_only} for support"
        );
    }
    open(&c, &server, &format!("/destinations/{dst}/edit")).await;
    wait_text(&c, "[data-testid=error]", "Your role does not allow this.").await;
    assert!(c.find(Locator::Css("input[name=url]")).await.is_err());
    open(&c, &server, "/incoming-webhooks").await;
    find(&c, &format!("tr[data-hook='{hook}'][data-status=disabled]")).await;
    assert!(c
        .find(Locator::Css("[data-testid=reenable-hook]"))
        .await
        .is_err());
    open(&c, &server, "/users").await;
    wait_text(&c, "[data-testid=error]", "Your role does not allow this.").await;
    assert!(
        c.find(Locator::Css("section.create")).await.is_err(),
        "no user form for support"
    );
    screenshot(&c, "support-users").await;
    open(&c, &server, "/spaces").await;
    wait_text(&c, "[data-testid=spaces]", "Acme").await;
    assert!(
        c.find(Locator::Css("section.create")).await.is_err(),
        "no space form for support"
    );
    c.close().await.unwrap();

    // Over HTTP with the support user's session: refused.
    let support = http_session(&server, SUPPORT).await;
    let (status, body) = call(
        &support,
        &server,
        "set_destination_status",
        &[("id", &dst.to_string()), ("status", "active")],
        None,
    )
    .await;
    assert!(
        status >= 400 && body.contains("Forbidden"),
        "{status} {body}"
    );
    let (status, body) = call(
        &support,
        &server,
        "create_user",
        &[
            ("email", "mallory@example.com"),
            ("password", "a long password"),
            ("role", "admin"),
        ],
        None,
    )
    .await;
    assert!(
        status >= 400 && body.contains("Forbidden"),
        "{status} {body}"
    );
    let (_, body) = call(
        &support,
        &server,
        "set_incoming_status",
        &[("id", &hook.to_string()), ("status", "active")],
        None,
    )
    .await;
    assert!(body.contains("Forbidden"), "{body}");
    let (_, body) = call(&support, &server, "users", &[], None).await;
    assert!(body.contains("Forbidden"), "{body}");
    assert_eq!(
        server
            .storage
            .get_destination(server.space, dst)
            .await
            .unwrap()
            .status,
        DestinationStatus::Inactive
    );
    assert_eq!(
        server
            .storage
            .get_incoming_webhook_by_id(hook)
            .await
            .unwrap()
            .status,
        IncomingWebhookStatus::Disabled
    );
    assert!(server
        .storage
        .find_user_by_email("mallory@example.com")
        .await
        .is_err());

    // Without a session: signed out.
    let stranger = reqwest::Client::new();
    let (_, body) = call(
        &stranger,
        &server,
        "set_destination_status",
        &[("id", &dst.to_string()), ("status", "active")],
        None,
    )
    .await;
    assert!(body.contains("SignedOut"), "{body}");

    // An admin's session, but the request comes from another site: refused.
    let admin = http_session(&server, ADMIN).await;
    let form = [("id", dst.to_string()), ("status", "active".to_owned())];
    let form: Vec<(&str, &str)> = form.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let (_, body) = call(
        &admin,
        &server,
        "set_destination_status",
        &form,
        Some("http://evil.example"),
    )
    .await;
    assert!(body.contains("CrossSite"), "{body}");
    assert_eq!(
        server
            .storage
            .get_destination(server.space, dst)
            .await
            .unwrap()
            .status,
        DestinationStatus::Inactive
    );
    // From the console's own origin it works.
    let own = server.base.clone();
    let (status, body) = call(&admin, &server, "set_destination_status", &form, Some(&own)).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("Re-enabled"), "{body}");
    assert_eq!(
        server
            .storage
            .get_destination(server.space, dst)
            .await
            .unwrap()
            .status,
        DestinationStatus::Active
    );

    server.stop().await;
    eprintln!("roles test took {:?}", started.elapsed());
}
