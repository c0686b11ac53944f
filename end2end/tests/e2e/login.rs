//! Signing in through the hydrated login page: a wrong password is refused, the
//! right one signs in without a reload, and the session survives a fresh load.

use std::time::Duration;

use end2end::*;
use fantoccini::Locator;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_signs_in_through_the_hydrated_login_page() {
    let server = start_server().await;
    let driver = Driver::start();
    let profile = tempfile::tempdir().unwrap();
    let c = browser(&driver, profile.path()).await;

    // A console page sends a stranger to the sign-in page.
    c.goto(&server.url("/")).await.unwrap();
    let url = c.current_url().await.unwrap();
    assert_eq!(url.path(), "/login");
    wait_for_hydration(&c).await;
    screenshot(&c, "login").await;

    // A wrong password is refused with a readable message.
    c.find(Locator::Css("input[name=email]"))
        .await
        .unwrap()
        .send_keys("admin@example.com")
        .await
        .unwrap();
    c.find(Locator::Css("input[name=password]"))
        .await
        .unwrap()
        .send_keys("not the password")
        .await
        .unwrap();
    c.find(Locator::Css("button[type=submit]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let alert = c
        .wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Css("[role=alert]"))
        .await
        .unwrap();
    assert_eq!(alert.text().await.unwrap(), "Wrong email or password.");
    screenshot(&c, "login-refused").await;

    // Mark this page: a full reload would lose the mark, client-side navigation keeps it.
    c.execute("window.__noReload = true; return null;", vec![])
        .await
        .unwrap();
    let email = c.find(Locator::Css("input[name=email]")).await.unwrap();
    email.clear().await.unwrap();
    email.send_keys("admin@example.com").await.unwrap();
    let password = c.find(Locator::Css("input[name=password]")).await.unwrap();
    password.clear().await.unwrap();
    password.send_keys(PASSWORD).await.unwrap();
    c.find(Locator::Css("button[type=submit]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();

    let who = c
        .wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Css("[data-testid=signed-in-as]"))
        .await
        .expect("the signed-in home page shows who is signed in");
    assert_eq!(who.text().await.unwrap(), "admin@example.com · admin");
    assert_eq!(c.current_url().await.unwrap().path(), "/");
    let kept = c
        .execute("return window.__noReload === true;", vec![])
        .await
        .unwrap();
    assert_eq!(
        kept,
        json!(true),
        "signing in did not reload the page: the hydrated app handled it"
    );
    screenshot(&c, "home").await;

    // The session is real: a fresh load of a console page stays signed in.
    c.goto(&server.url("/")).await.unwrap();
    assert_eq!(c.current_url().await.unwrap().path(), "/");

    c.close().await.unwrap();
    server.stop().await;
}
