//! The console's long lists a page at a time (issue 16 item 6), in a real browser: an
//! admin pages through the users (50 a page, "Older →" and "← Newest") and searches them
//! by part of an email; without JavaScript the same links and the same GET form work.

use end2end::*;
use fantoccini::{Client, Locator};

/// The number of user rows shown.
async fn rows(c: &Client) -> usize {
    c.find_all(Locator::Css("[data-testid=users] tbody tr"))
        .await
        .unwrap()
        .len()
}

/// Waits until the users table shows `n` rows.
async fn shows(c: &Client, n: usize, why: &str) {
    wait_until(why, 15, || async { rows(c).await == n }).await;
}

/// Pages the users list and searches it, in `c`.
async fn page_and_search(c: &Client, server: &Server, javascript: bool) {
    if javascript {
        open(c, server, "/users").await;
    } else {
        c.goto(&server.url("/users")).await.unwrap();
    }
    shows(c, 50, "a first page of 50").await;
    find(c, "[data-testid=older]").await.click().await.unwrap();
    // 55 staff, the admin and the support user: 7 on the second page.
    shows(c, 7, "the older users on the second page").await;
    assert!(c
        .current_url()
        .await
        .unwrap()
        .query()
        .unwrap()
        .contains("before="));
    find(c, ".pager a[href='/users']")
        .await
        .click()
        .await
        .unwrap();
    shows(c, 50, "back to the newest").await;

    let search = find(c, "[data-testid=list-search]").await;
    search.send_keys("STAFF3").await.unwrap();
    c.find(Locator::Css(".filters button[type=submit]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    shows(c, 10, "staff30 … staff39").await;
    let url = c.current_url().await.unwrap();
    assert!(url.query().unwrap().contains("q=STAFF3"), "{url}");
    assert!(
        c.find(Locator::Css("[data-testid=older]")).await.is_err(),
        "one page"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_pages_through_the_users_and_searches_them() {
    let server = start_server().await;
    for i in 0..55 {
        server::ops::tenants::create_user(
            server.storage.as_ref(),
            &format!("staff{i:02}@example.com"),
            PASSWORD,
            server::domain::Role::Support,
        )
        .await
        .unwrap();
    }
    let driver = Driver::start();
    let profile = tempfile::tempdir().unwrap();
    let c = browser(&driver, profile.path()).await;
    sign_in(&c, &server, ADMIN).await;
    page_and_search(&c, &server, true).await;
    screenshot(&c, "users-search").await;
    c.close().await.unwrap();

    let profile = tempfile::tempdir().unwrap();
    let c = browser_without_javascript(&driver, profile.path()).await;
    // Signed in by the login page's plain form.
    c.goto(&server.url("/login")).await.unwrap();
    find(&c, "input[name=email]")
        .await
        .send_keys(ADMIN)
        .await
        .unwrap();
    find(&c, "input[name=password]")
        .await
        .send_keys(PASSWORD)
        .await
        .unwrap();
    find(&c, "button[type=submit]").await.click().await.unwrap();
    find(&c, "nav a[href='/users']").await;
    page_and_search(&c, &server, false).await;
    assert!(
        c.find(Locator::Css("body[data-hydrated]")).await.is_err(),
        "no JavaScript ran"
    );
    c.close().await.unwrap();
    server.stop().await;
}
