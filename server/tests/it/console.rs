//! The console shell over HTTP: the sign-in guard, sign-in, sessions that survive a restart.

use crate::helpers::{browser_like_client, spawn_app};
use crate::on_both_backends;
use server::domain::Role;

const PASSWORD: &str = "correct horse battery";

async fn sign_in(
    client: &reqwest::Client,
    base: &str,
    email: &str,
    password: &str,
) -> reqwest::Response {
    client
        .post(format!("{base}/api/login"))
        .header("accept", "text/html")
        .form(&[("email", email), ("password", password), ("next", "/")])
        .send()
        .await
        .unwrap()
}

on_both_backends! {
    async fn console_pages_send_strangers_to_the_sign_in_page(db) {
        let app = spawn_app(&db).await;
        let client = browser_like_client();
        let resp = client.get(app.url("/?tab=x")).send().await.unwrap();
        assert!(resp.status().is_redirection(), "{}", resp.status());
        assert_eq!(resp.headers()["location"], "/login?next=%2F%3Ftab%3Dx");
        let login = client.get(app.url("/login")).send().await.unwrap();
        assert_eq!(login.status(), 200);
        let html = login.text().await.unwrap();
        assert!(html.contains("Sign in"), "{html}");
        assert!(html.contains("/pkg/partyflow.js"), "the page loads the hydration script");
        app.stop().await;
    }
}

on_both_backends! {
    async fn a_user_signs_in_sees_the_home_page_and_signs_out(db) {
        server::admin::create_user(db.storage.as_ref(), "Ops@Example.com", PASSWORD, Role::Admin).await.unwrap();
        let app = spawn_app(&db).await;
        let base = app.url("");
        let client = browser_like_client();

        let wrong = sign_in(&client, &base, "ops@example.com", "wrong password!").await;
        assert_eq!(wrong.status(), 302);
        assert!(wrong.headers()["location"].to_str().unwrap().starts_with("/login?error=credentials"));
        assert!(client.get(app.url("/")).send().await.unwrap().status().is_redirection());

        let unknown = sign_in(&client, &base, "nobody@example.com", PASSWORD).await;
        assert!(unknown.headers()["location"].to_str().unwrap().starts_with("/login?error=credentials"));

        let ok = sign_in(&client, &base, "ops@example.com", PASSWORD).await;
        assert_eq!(ok.status(), 302);
        assert_eq!(ok.headers()["location"], "/");
        let cookie = ok.headers()["set-cookie"].to_str().unwrap().to_owned();
        assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"), "{cookie}");

        let home = client.get(app.url("/")).send().await.unwrap();
        assert_eq!(home.status(), 200);
        let html = home.text().await.unwrap();
        assert!(html.contains("ops@example.com"), "the home page names the user: {html}");

        let out = client
            .post(app.url("/api/logout"))
            .header("accept", "text/html")
            .send()
            .await
            .unwrap();
        assert_eq!(out.headers()["location"], "/login");
        assert!(client.get(app.url("/")).send().await.unwrap().status().is_redirection());
        app.stop().await;
    }
}

on_both_backends! {
    async fn a_session_survives_a_server_restart(db) {
        server::admin::create_user(db.storage.as_ref(), "ops@example.com", PASSWORD, Role::Support).await.unwrap();
        let client = browser_like_client();
        let first = spawn_app(&db).await;
        let ok = sign_in(&client, &first.url(""), "ops@example.com", PASSWORD).await;
        assert_eq!(ok.headers()["location"], "/");
        let addr = first.addr;
        first.stop().await;

        // A new server process on the same database, at the same address so the cookie applies.
        let listener = loop {
            match tokio::net::TcpListener::bind(addr).await {
                Ok(l) => break l,
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
            }
        };
        let shutdown = tokio_util::sync::CancellationToken::new();
        let task = tokio::spawn(server::startup::run(
            crate::helpers::test_config(&db.url),
            db.storage.clone(),
            listener,
            shutdown.clone(),
        ));
        crate::helpers::wait_until_serving(addr).await;
        let home = match client.get(format!("http://{addr}/")).send().await {
            Ok(r) => r,
            Err(e) => panic!("{e}: server said {:?}", task.await),
        };
        assert_eq!(home.status(), 200);
        shutdown.cancel();
        task.await.unwrap().unwrap();
    }
}
