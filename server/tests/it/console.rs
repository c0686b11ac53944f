//! The console over HTTP: the sign-in guard, sign-in, sessions that survive a restart;
//! the admins' changes refused to support staff however they are called; destination
//! settings, test events (judged by the destination's filter), the "Try it" box, disabling and
//! deleting users; an atomic first-run setup.

use serde_json::json;

use crate::on_both_backends;
use server::domain::Role;
use server::storage::UserChange;
use server::testkit::{browser_like_client, spawn_app};

pub(crate) const PASSWORD: &str = "correct horse battery";

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
        let bundle = server::assets::bundle_name(&server::testkit::site_root());
        assert!(html.contains(&format!("/pkg/{bundle}.js")), "the page loads the hydration script");
        app.stop().await;
    }
}

on_both_backends! {
    async fn a_user_signs_in_sees_the_home_page_and_signs_out(db) {
        server::ops::tenants::create_user(db.storage.as_ref(), "Ops@Example.com", PASSWORD, Role::Admin).await.unwrap();
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
        server::ops::tenants::create_user(db.storage.as_ref(), "ops@example.com", PASSWORD, Role::Support).await.unwrap();
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
            server::testkit::test_config(&db.url),
            db.storage.clone().into(),
            listener,
            shutdown.clone(),
        ));
        server::testkit::wait_until_serving(addr).await;
        let home = match client.get(format!("http://{addr}/")).send().await {
            Ok(r) => r,
            Err(e) => panic!("{e}: server said {:?}", task.await),
        };
        assert_eq!(home.status(), 200);
        shutdown.cancel();
        task.await.unwrap().unwrap();
    }
}

/// Calls a console server function as the browser's JavaScript would (the answer is
/// data, not a redirect): `(status, body)`.
pub(crate) async fn call(
    client: &reqwest::Client,
    base: &str,
    endpoint: &str,
    form: &[(&str, &str)],
) -> (u16, String) {
    let resp = client
        .post(format!("{base}/api/{endpoint}"))
        .form(form)
        .send()
        .await
        .unwrap();
    (resp.status().as_u16(), resp.text().await.unwrap())
}

/// Deletes every user, behind the storage's back (to set up a first run again).
async fn wipe_users(url: &str) {
    if url.starts_with("sqlite") {
        let pool = sqlx::SqlitePool::connect(url).await.unwrap();
        sqlx::query("DELETE FROM users")
            .execute(&pool)
            .await
            .unwrap();
        pool.close().await;
    } else {
        let pool = sqlx::PgPool::connect(url).await.unwrap();
        sqlx::query("DELETE FROM users")
            .execute(&pool)
            .await
            .unwrap();
        pool.close().await;
    }
}

fn pairs<'a>(form: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    form.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

/// A client signed in as `email`.
pub(crate) async fn session(base: &str, email: &str) -> reqwest::Client {
    let client = browser_like_client();
    let ok = sign_in(&client, base, email, PASSWORD).await;
    assert_eq!(ok.headers()["location"], "/", "{email} signs in");
    client
}

pub(crate) async fn user(
    db: &server::testkit::TestDb,
    email: &str,
    role: Role,
) -> server::domain::User {
    server::ops::tenants::create_user(db.storage.as_ref(), email, PASSWORD, role)
        .await
        .unwrap()
}

on_both_backends! {
    async fn support_staff_are_refused_the_admins_changes_even_when_calling_the_server_directly(db) {
        let admin = user(&db, "admin@example.com", Role::Admin).await;
        user(&db, "support@example.com", Role::Support).await;
        let app = spawn_app(&db).await.with_space().await;
        let dst = app.destination(json!({"url": "https://example.com/hook"})).await;
        let dst = dst["id"].as_str().unwrap().to_owned();
        let base = app.url("");
        let support = session(&base, "support@example.com").await;
        let admin_id = admin.id.to_string();

        let calls: Vec<(&str, Vec<(&str, &str)>)> = vec![
            ("destination_edit", vec![("id", &dst)]),
            ("update_destination", vec![("id", &dst), ("url", "https://evil.example/x"), ("rate_count", "1"), ("rate_period", "hour")]),
            ("send_test_event", vec![("id", &dst)]),
            ("set_user_status", vec![("id", &admin_id), ("status", "disabled")]),
            ("delete_user", vec![("id", &admin_id)]),
        ];
        for (endpoint, form) in &calls {
            let (status, body) = call(&support, &base, endpoint, form).await;
            assert!(status >= 400 && body.contains("Forbidden"), "{endpoint}: {status} {body}");
        }
        // Nothing changed.
        let (_, d) = app.get(&format!("/destinations/{dst}")).await;
        assert_eq!(d["url"], "https://example.com/hook");
        assert_eq!(d["rateLimit"], serde_json::Value::Null);
        let (_, events) = app.get("/events").await;
        assert_eq!(events["data"].as_array().unwrap().len(), 0, "no test event: {events}");
        let admin = db.storage.get_user(admin.id).await.unwrap();
        assert!(admin.disabled_at.is_none());

        // Signed out: refused too.
        let (_, body) = call(&reqwest::Client::new(), &base, "send_test_event", &[("id", &dst)]).await;
        assert!(body.contains("SignedOut"), "{body}");
        app.stop().await;
    }
}

on_both_backends! {
    async fn the_console_takes_the_rest_apis_name_limits_and_revoking_twice_answers_the_same(db) {
        user(&db, "admin@example.com", Role::Admin).await;
        let app = spawn_app(&db).await.with_space().await;
        let space = app.space.clone().unwrap();
        let base = app.url("");
        let admin = session(&base, "admin@example.com").await;

        // A channel name: 1 to 100 characters after trimming, as in the REST API.
        let hundred = "c".repeat(100);
        let padded = format!("  {hundred}  ");
        let (status, body) = call(&admin, &base, "create_channel", &[("space", &space), ("name", &padded)]).await;
        assert_eq!(status, 200, "{body}");
        let (_, channels) = app.get("/channels").await;
        assert_eq!(channels["data"][0]["name"], hundred.as_str());
        let too_long = "c".repeat(101);
        let (status, body) = call(&admin, &base, "create_channel", &[("space", &space), ("name", &too_long)]).await;
        assert!(status >= 400 && body.contains("1 to 100 characters"), "{status} {body}");

        // Revoking twice answers the same, for API keys and bots, in the console and the API.
        let (_, key) = app.post("/api-keys", json!({"name": "ci"})).await;
        let (_, bot) = app.post("/bots", json!({"name": "deploy"})).await;
        for (endpoint, id) in [("revoke_api_key", &key["id"]), ("revoke_bot", &bot["id"])] {
            let form = [("space", space.as_str()), ("id", id.as_str().unwrap())];
            let first = call(&admin, &base, endpoint, &form).await;
            assert_eq!(first.0, 200, "{endpoint}: {first:?}");
            assert_eq!(call(&admin, &base, endpoint, &form).await, first, "{endpoint} again");
        }
        let key_id = key["id"].as_str().unwrap();
        assert_eq!(app.post(&format!("/api-keys/{key_id}/revoke"), json!({})).await.0, 204);
        let bot_id = bot["id"].as_str().unwrap();
        assert_eq!(app.post(&format!("/bots/{bot_id}/revoke"), json!({})).await.0, 200);
        app.stop().await;
    }
}

on_both_backends! {
    async fn an_admin_edits_a_destination_with_the_rest_apis_rules(db) {
        user(&db, "admin@example.com", Role::Admin).await;
        let app = spawn_app(&db).await.with_space().await;
        let dst = app.destination(json!({"url": "https://example.com/a", "maxAttempts": 3})).await;
        let dst = dst["id"].as_str().unwrap().to_owned();
        let base = app.url("");
        let admin = session(&base, "admin@example.com").await;

        let (status, body) = call(&admin, &base, "destination_edit", &[("id", &dst)]).await;
        assert_eq!(status, 200, "{body}");
        let shown: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(shown["form"]["max_attempts"], "3", "{shown}");

        let form = |url: &str, program: &str| -> Vec<(&'static str, String)> {
            [
                ("id", dst.as_str()), ("url", url), ("description", "orders"),
                ("event_types", "order.paid, order.refunded"), ("max_attempts", ""),
                ("timeout_seconds", "10"), ("preset", "standard"), ("initial_seconds", "2"),
                ("max_seconds", ""), ("jitter_percent", ""), ("retry_after", ""),
                ("rate_count", "20"), ("rate_period", "minute"), ("transformation", program),
            ]
            .into_iter()
            .map(|(k, v)| (k, v.to_owned()))
            .collect()
        };

        // The REST API's rules, in words: a jq program that does not compile, a bad URL.
        let (status, body) = call(&admin, &base, "update_destination", &pairs(&form("https://example.com/b", "{id: .id"))).await;
        assert!(status >= 400, "{status} {body}");
        assert!(body.contains("Transformation: the jq program does not compile"), "{body}");
        let (_, body) = call(&admin, &base, "update_destination", &pairs(&form("ftp://example.com/b", ""))).await;
        assert!(body.contains("URL: the URL must use http or https"), "{body}");
        let (_, d) = app.get(&format!("/destinations/{dst}")).await;
        assert_eq!(d["url"], "https://example.com/a", "nothing changed");

        // A good form, posted without JavaScript: back to the page with the result.
        let good = form("https://example.com/b", "{id: .orderId}");
        let resp = admin
            .post(format!("{base}/api/update_destination"))
            .header("accept", "text/html")
            .header("referer", format!("{base}/destinations/{dst}/edit"))
            .form(&pairs(&good))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 302);
        let location = resp.headers()["location"].to_str().unwrap().to_owned();
        assert!(location.starts_with(&format!("/destinations/{dst}/edit?flash=")), "{location}");

        let (_, d) = app.get(&format!("/destinations/{dst}")).await;
        assert_eq!(d["url"], "https://example.com/b");
        assert_eq!(d["description"], "orders");
        assert_eq!(d["eventTypes"], json!(["order.paid", "order.refunded"]));
        assert_eq!(d["rateLimit"], json!({"count": 20, "period": "minute"}));
        assert_eq!(d["timeoutSeconds"], 10);
        assert_eq!(d["maxAttempts"], 6, "empty: the standard preset's");
        assert_eq!(d["retryPolicy"]["preset"], "standard");
        assert_eq!(d["retryPolicy"]["initialMs"], 2000);
        assert_eq!(d["transformation"], "{id: .orderId}");
        app.stop().await;
    }
}

on_both_backends! {
    async fn a_test_event_goes_to_one_destination_only_through_the_engine(db) {
        user(&db, "admin@example.com", Role::Admin).await;
        let receiver = server::testkit::Receiver::start().await;
        let app = spawn_app(&db).await.with_space().await;
        let chosen = app.destination(json!({"url": receiver.url("/chosen"), "eventTypes": ["order.paid"]})).await;
        app.destination(json!({"url": receiver.url("/other")})).await;
        let chosen = chosen["id"].as_str().unwrap().to_owned();
        let base = app.url("");
        let admin = session(&base, "admin@example.com").await;

        let (status, body) = call(&admin, &base, "send_test_event", &[("id", &chosen)]).await;
        assert_eq!(status, 200, "{body}");
        let notice: serde_json::Value = serde_json::from_str(&body).unwrap();
        let link = notice["link"][1].as_str().unwrap().to_owned();
        let delivery = link.strip_prefix("/deliveries/").unwrap().to_owned();
        let got = receiver.wait_for(1).await;
        assert_eq!(got[0].path, "/chosen");
        let payload: serde_json::Value = serde_json::from_str(&got[0].body).unwrap();
        assert_eq!(payload["type"], "partyflow.test");
        assert!(!got[0].header("webhook-signature").is_empty(), "signed like any delivery");
        server::testkit::eventually(30, || async {
            let (_, d) = app.get(&format!("/deliveries/{delivery}")).await;
            (d["status"] == "succeeded").then_some(())
        })
        .await;
        let (_, d) = app.get(&format!("/deliveries/{delivery}")).await;
        assert_eq!(d["destinationId"], chosen.as_str());
        assert_eq!(d["eventType"], "partyflow.test");
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        assert_eq!(receiver.received().len(), 1, "the other destination (every type) got nothing");

        // An inactive destination gets none.
        app.post(&format!("/destinations/{chosen}/disable"), json!({})).await;
        let (status, body) = call(&admin, &base, "send_test_event", &[("id", &chosen)]).await;
        assert!(status >= 400 && body.contains("re-enable it"), "{status} {body}");
        app.stop().await;
    }
}

on_both_backends! {
    async fn a_disabled_user_is_signed_out_everywhere_and_cannot_sign_in(db) {
        user(&db, "admin@example.com", Role::Admin).await;
        let ops = user(&db, "ops@example.com", Role::Support).await;
        let app = spawn_app(&db).await;
        let base = app.url("");
        let admin = session(&base, "admin@example.com").await;
        let laptop = session(&base, "ops@example.com").await;
        let phone = session(&base, "ops@example.com").await;
        assert_eq!(db.storage.user_sessions(ops.id).await.unwrap().len(), 2);
        assert_eq!(laptop.get(app.url("/")).send().await.unwrap().status(), 200);

        let id = ops.id.to_string();
        let (status, body) = call(&admin, &base, "set_user_status", &[("id", &id), ("status", "disabled")]).await;
        assert_eq!(status, 200, "{body}");
        assert!(body.contains("their 2 sessions were ended"), "{body}");
        for c in [&laptop, &phone] {
            assert!(c.get(app.url("/")).send().await.unwrap().status().is_redirection(), "signed out");
        }
        assert!(db.storage.user_sessions(ops.id).await.unwrap().is_empty());

        // The right password gets the same answer as a wrong one.
        let right = sign_in(&browser_like_client(), &base, "ops@example.com", PASSWORD).await;
        let wrong = sign_in(&browser_like_client(), &base, "ops@example.com", "not the password").await;
        let (right, wrong) = (right.headers()["location"].clone(), wrong.headers()["location"].clone());
        assert!(right.to_str().unwrap().starts_with("/login?error=credentials"), "{right:?}");
        assert_eq!(right, wrong);

        // Enabled again: a new sign-in works; the ended sessions stay ended.
        let (status, body) = call(&admin, &base, "set_user_status", &[("id", &id), ("status", "active")]).await;
        assert_eq!(status, 200, "{body}");
        assert!(laptop.get(app.url("/")).send().await.unwrap().status().is_redirection());
        let again = session(&base, "ops@example.com").await;
        assert_eq!(again.get(app.url("/")).send().await.unwrap().status(), 200);

        // Deleted: signed out, gone.
        let (status, body) = call(&admin, &base, "delete_user", &[("id", &id)]).await;
        assert_eq!(status, 200, "{body}");
        assert!(again.get(app.url("/")).send().await.unwrap().status().is_redirection());
        assert!(db.storage.find_user_by_email("ops@example.com").await.is_err());
        app.stop().await;
    }
}

on_both_backends! {
    async fn an_admin_cannot_disable_or_delete_themselves_or_the_last_admin(db) {
        let first = user(&db, "first@example.com", Role::Admin).await;
        let second = user(&db, "second@example.com", Role::Admin).await;
        let app = spawn_app(&db).await;
        let base = app.url("");
        let a = session(&base, "first@example.com").await;
        let b = session(&base, "second@example.com").await;
        let (first_id, second_id) = (first.id.to_string(), second.id.to_string());

        for (endpoint, form) in [
            ("set_user_status", vec![("id", first_id.as_str()), ("status", "disabled")]),
            ("delete_user", vec![("id", first_id.as_str())]),
        ] {
            let (status, body) = call(&a, &base, endpoint, &form).await;
            assert!(status >= 400 && body.contains("your own account"), "{endpoint}: {status} {body}");
        }

        // Two admins disabling each other at the same moment: one of them stays.
        let (off_second, off_first) = (
            [("id", second_id.as_str()), ("status", "disabled")],
            [("id", first_id.as_str()), ("status", "disabled")],
        );
        let (x, y) = tokio::join!(
            call(&a, &base, "set_user_status", &off_second),
            call(&b, &base, "set_user_status", &off_first),
        );
        let active = db
            .storage
            .list_all_users()
            .await
            .unwrap()
            .into_iter()
            .filter(|u| u.disabled_at.is_none())
            .count();
        assert_eq!(active, 1, "{x:?} {y:?}");
        assert_eq!([x.0, y.0].iter().filter(|s| **s == 200).count(), 1, "{x:?} {y:?}");

        // The storage rule itself: the last active admin is neither disabled nor deleted.
        let last = db.storage.list_all_users().await.unwrap().into_iter().find(|u| u.disabled_at.is_none()).unwrap();
        let now = server::clock::now_ms();
        assert_eq!(db.storage.set_user_disabled(last.id, Some(now), None).await.unwrap(), UserChange::LastAdmin);
        assert_eq!(db.storage.delete_user(last.id, None).await.unwrap(), UserChange::LastAdmin);
        let other = if last.id == first.id { second.id } else { first.id };
        assert_eq!(db.storage.delete_user(other, None).await.unwrap(), UserChange::Done, "a disabled admin may go");
        app.stop().await;
    }
}

on_both_backends! {
    async fn two_first_run_setups_at_once_make_one_admin(db) {
        let app = spawn_app(&db).await;
        let base = app.url("");
        let setup = |email: &'static str| {
            let base = base.clone();
            async move {
                let resp = browser_like_client()
                    .post(format!("{base}/api/setup"))
                    .form(&[("email", email), ("password", PASSWORD)])
                    .send()
                    .await
                    .unwrap();
                (resp.status().as_u16(), resp.text().await.unwrap())
            }
        };
        let (a, b) = tokio::join!(setup("a@example.com"), setup("b@example.com"));
        assert_eq!(db.storage.count_users().await.unwrap(), 1, "{a:?} {b:?}");
        let refused = [&a, &b].into_iter().filter(|r| r.1.contains("set up already")).count();
        assert_eq!(refused, 1, "{a:?} {b:?}");

        // Straight at storage, eight at once with nothing between them, twenty times: one wins.
        let users: Vec<_> = (0..8)
            .map(|i| server::ops::tenants::new_user(&format!("admin{i}@example.com"), PASSWORD, Role::Admin).unwrap())
            .collect();
        for round in 0..20 {
            wipe_users(&db.url).await;
            let start = std::sync::Arc::new(tokio::sync::Barrier::new(users.len()));
            let tries: Vec<_> = users
                .iter()
                .cloned()
                .map(|u| {
                    let (storage, start) = (db.storage.clone(), start.clone());
                    tokio::spawn(async move {
                        start.wait().await;
                        storage.create_first_user(&u, None).await.unwrap()
                    })
                })
                .collect();
            let mut won = 0;
            for t in tries {
                won += usize::from(t.await.unwrap());
            }
            assert_eq!(won, 1, "round {round}");
            assert_eq!(db.storage.count_users().await.unwrap(), 1, "round {round}");
        }
        app.stop().await;
    }
}

on_both_backends! {
    async fn webhook_urls_are_on_the_public_url_whatever_host_the_request_names(db) {
        user(&db, "admin@example.com", Role::Admin).await;
        let config = server::config::Config {
            public_url: "https://hooks.example.com/".into(),
            ..server::testkit::test_config(&db.url)
        };
        let app = server::testkit::spawn_app_with_config(&db, config).await.with_space().await;
        let (_, channel) = app.post("/channels", json!({"name": "alerts"})).await;
        let channel = channel["id"].as_str().unwrap().to_owned();

        // The REST API, with a forged Host header.
        let resp = reqwest::Client::new()
            .post(app.api("/incoming-webhooks"))
            .bearer_auth(app.api_key.as_ref().unwrap())
            .header("host", "evil.example.com")
            .json(&json!({"channelId": channel, "name": "Grafana"}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 201);
        let w: serde_json::Value = resp.json().await.unwrap();
        let (id, token) = (w["id"].as_str().unwrap(), w["token"].as_str().unwrap());
        let url = w["url"].as_str().unwrap();
        assert_eq!(url, format!("https://hooks.example.com/hooks/{id}/{token}"));
        // Its path is where senders post on this server.
        let path = url.strip_prefix("https://hooks.example.com").unwrap();
        let posted = reqwest::Client::new()
            .post(app.url(path))
            .json(&json!({"text": "hello"}))
            .send()
            .await
            .unwrap();
        assert_eq!(posted.status(), 201);

        // The console, with a forged Host header too.
        let base = app.url("");
        let admin = session(&base, "admin@example.com").await;
        let resp = admin
            .post(format!("{base}/api/create_incoming_webhook"))
            .header("host", "evil.example.com")
            .form(&[("channel", channel.as_str()), ("name", "Sentry")])
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let notice: serde_json::Value = resp.json().await.unwrap();
        let secrets = notice["secrets"].as_array().unwrap();
        let shown = secrets.iter().find(|s| s[0] == "URL").unwrap()[1].as_str().unwrap();
        assert!(shown.starts_with("https://hooks.example.com/hooks/iwh_"), "{notice}");
        assert!(!notice.to_string().contains("evil"), "{notice}");
        app.stop().await;
    }
}

/// A browser-like client whose connections come from `ip` (a loopback address), so the
/// server sees another peer.
fn client_from(ip: [u8; 4]) -> reqwest::Client {
    reqwest::Client::builder()
        .cookie_store(true)
        .redirect(reqwest::redirect::Policy::none())
        .local_address(std::net::IpAddr::from(ip))
        .build()
        .unwrap()
}

fn location(resp: &reqwest::Response) -> String {
    resp.headers()["location"].to_str().unwrap().to_owned()
}

on_both_backends! {
    async fn wrong_passwords_from_other_addresses_never_lock_the_admin_out_of_their_own(db) {
        user(&db, "admin@example.com", Role::Admin).await;
        let app = spawn_app(&db).await;
        let base = app.url("");

        // Ten wrong passwords from one address: that address is refused, even with the
        // right password, and a forged X-Forwarded-For changes nothing.
        let attacker = client_from([127, 0, 0, 2]);
        for i in 0..10 {
            let r = sign_in(&attacker, &base, "admin@example.com", &format!("guess {i}")).await;
            assert!(location(&r).starts_with("/login?error=credentials"), "{i}: {}", location(&r));
        }
        let r = sign_in(&attacker, &base, "admin@example.com", PASSWORD).await;
        assert!(location(&r).starts_with("/login?error=throttled"), "{}", location(&r));
        let forged = attacker
            .post(format!("{base}/api/login"))
            .header("accept", "text/html")
            .header("x-forwarded-for", "127.0.0.1")
            .form(&[("email", "admin@example.com"), ("password", PASSWORD), ("next", "/")])
            .send()
            .await
            .unwrap();
        assert!(location(&forged).starts_with("/login?error=throttled"), "{}", location(&forged));

        // Ten more from a second address: 20 failures for this email in all.
        let second = client_from([127, 0, 0, 3]);
        for i in 0..10 {
            let r = sign_in(&second, &base, "admin@example.com", &format!("guess {i}")).await;
            assert!(location(&r).starts_with("/login?error=credentials"), "{i}: {}", location(&r));
        }

        // The admin at their own address signs in, slowed (200 ms after 20 failures), not stopped.
        let admin = client_from([127, 0, 0, 1]);
        let started = std::time::Instant::now();
        let ok = sign_in(&admin, &base, "admin@example.com", PASSWORD).await;
        assert_eq!(location(&ok), "/");
        assert!(started.elapsed() >= std::time::Duration::from_millis(200), "{:?}", started.elapsed());
        assert_eq!(admin.get(app.url("/")).send().await.unwrap().status(), 200);
        app.stop().await;
    }
}

on_both_backends! {
    async fn the_try_it_box_runs_the_typed_filter_and_transformation_for_admins_only(db) {
        user(&db, "admin@example.com", Role::Admin).await;
        user(&db, "support@example.com", Role::Support).await;
        let app = spawn_app(&db).await.with_space().await;
        let base = app.url("");
        let admin = session(&base, "admin@example.com").await;
        let form = |filter: &'static str, sample: &'static str| {
            vec![("filter", filter), ("transformation", "{total, n: 1}"), ("sample", sample)]
        };

        let (status, body) = call(&admin, &base, "try_destination", &form(".total > 100", r#"{"total": 150}"#)).await;
        assert_eq!(status, 200, "{body}");
        let tried: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(tried["filter"], "Passes", "{tried}");
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(tried["transformed"]["Ok"].as_str().unwrap()).unwrap(),
            json!({"total": 150, "n": 1})
        );
        let (_, body) = call(&admin, &base, "try_destination", &form(".total > 100", r#"{"total": 5}"#)).await;
        assert!(body.contains("FilteredOut"), "{body}");
        let (_, body) = call(&admin, &base, "try_destination", &form(r#"error("nope")"#, "{}")).await;
        assert!(body.contains("the filter failed: the jq program failed: nope"), "{body}");
        let big = format!("\"{}\"", "x".repeat(server::ops::filters::MAX_SAMPLE_BYTES));
        let (status, body) = call(&admin, &base, "try_destination", &[("filter", "."), ("sample", &big)]).await;
        assert!(status >= 400 && body.contains("64 KiB"), "{status} {body}");

        // Support staff, other sites and strangers are refused; nothing is run for them.
        let support = session(&base, "support@example.com").await;
        let (status, body) = call(&support, &base, "try_destination", &form(".", "{}")).await;
        assert!(status >= 400 && body.contains("Forbidden"), "{status} {body}");
        let cross = admin
            .post(format!("{base}/api/try_destination"))
            .header("origin", "https://evil.example")
            .form(&form(".", "{}"))
            .send()
            .await
            .unwrap();
        let (status, body) = (cross.status().as_u16(), cross.text().await.unwrap());
        assert!(status >= 400 && !body.contains("Passes"), "{status} {body}");
        let (_, body) = call(&reqwest::Client::new(), &base, "try_destination", &form(".", "{}")).await;
        assert!(body.contains("SignedOut"), "{body}");
        app.stop().await;
    }
}

on_both_backends! {
    async fn a_test_event_is_judged_by_the_destinations_filter(db) {
        user(&db, "admin@example.com", Role::Admin).await;
        let receiver = server::testkit::Receiver::start().await;
        let app = spawn_app(&db).await.with_space().await;
        let d = app.destination(json!({"url": receiver.url("/t"), "filter": ".test == false"})).await;
        let id = d["id"].as_str().unwrap().to_owned();
        let base = app.url("");
        let admin = session(&base, "admin@example.com").await;

        let (status, body) = call(&admin, &base, "send_test_event", &[("id", &id)]).await;
        assert_eq!(status, 200, "{body}");
        assert!(body.contains("kept the test event out"), "{body}");
        let (_, now) = app.get(&format!("/destinations/{id}")).await;
        assert_eq!(now["filteredEvents"], 1, "{now}");

        let change = json!({"filter": "error(\"not today\")"});
        let p = crate::incoming::Project::of(&app);
        let (status, _) = p.call(reqwest::Method::PATCH, &p.api(&format!("/destinations/{id}")), Some(change)).await;
        assert_eq!(status, 200);
        let (status, body) = call(&admin, &base, "send_test_event", &[("id", &id)]).await;
        assert_eq!(status, 200, "{body}");
        assert!(body.contains("failed on the test event"), "{body}");
        let notice: serde_json::Value = serde_json::from_str(&body).unwrap();
        let delivery = notice["link"][1].as_str().unwrap().strip_prefix("/deliveries/").unwrap().to_owned();
        let (_, f) = app.get(&format!("/deliveries/{delivery}")).await;
        assert_eq!(f["status"], "failed", "{f}");
        assert_eq!(f["lastErrorClass"], "transformation");
        assert!(f["attempts"][0]["errorMessage"].as_str().unwrap().starts_with("the filter failed"), "{f}");
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        assert!(receiver.received().is_empty(), "nothing was sent");
        app.stop().await;
    }
}

on_both_backends! {
    async fn send_again_all_failed_shows_the_windows_count_before_it_sends_and_the_form_sets_fifo(db) {
        user(&db, "admin@example.com", Role::Admin).await;
        let rx = server::testkit::Receiver::start().await;
        rx.set_default(server::testkit::Reply::status(400));
        let app = spawn_app(&db).await.with_space().await;
        let dst = app.destination(json!({"url": rx.url("/hook")})).await;
        let dst = dst["id"].as_str().unwrap().to_owned();
        let a1 = app.publish("order.paid", json!({"n": 1})).await;
        let a2 = app.publish("order.paid", json!({"n": 2})).await;
        let b = app.publish("order.shipped", json!({"n": 3})).await;
        for e in [&a1, &a2, &b] {
            app.wait_for_delivery(e, "failed").await;
        }
        let base = app.url("");
        let admin = session(&base, "admin@example.com").await;

        // The page (no JavaScript needed) counts the window's failed deliveries first.
        let page = format!("{base}/destinations/{dst}/resend-failed?event_type=order.paid&last=1h");
        let html = admin.get(&page).send().await.unwrap().text().await.unwrap();
        assert!(html.contains("Send again 2 failed deliveries of"), "{html}");
        assert!(html.contains("event type order.paid"), "{html}");
        let all = admin.get(format!("{base}/destinations/{dst}/resend-failed")).send().await.unwrap().text().await.unwrap();
        assert!(all.contains("Send again 3 failed deliveries of"), "{all}");
        assert_eq!(rx.received().len(), 3, "counting sent nothing");

        // Confirmed (a plain form post): the two of the window go, the other stays.
        let resp = admin
            .post(format!("{base}/api/resend_failed"))
            .header("accept", "text/html")
            .header("referer", &page)
            .form(&[("destination", dst.as_str()), ("event_type", "order.paid"), ("last", "1h"),
                    ("since", ""), ("until", ""), ("error_class", "")])
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 302);
        rx.wait_for(5).await;
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        assert_eq!(rx.received().len(), 5);
        for (e, resent) in [(&a1, true), (&a2, true), (&b, false)] {
            let ds = app.deliveries_of(e).await;
            assert_eq!(ds.iter().any(|d| !d["resentAs"].is_null()), resent, "{e}: {ds:?}");
        }

        // The settings form sets the order.
        let (status, body) = call(&admin, &base, "destination_edit", &[("id", &dst)]).await;
        assert_eq!(status, 200, "{body}");
        let shown: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(shown["form"]["ordering"], "none", "{shown}");
        let form = [("id", dst.as_str()), ("url", "https://example.com/a"), ("ordering", "fifo")];
        let (status, body) = call(&admin, &base, "update_destination", &form).await;
        assert_eq!(status, 200, "{body}");
        let (_, d) = app.get(&format!("/destinations/{dst}")).await;
        assert_eq!(d["ordering"], "fifo", "{d}");
        let html = admin.get(format!("{base}/destinations/{dst}")).send().await.unwrap().text().await.unwrap();
        assert!(html.contains("in order (FIFO)"), "the destination page shows it");
        let (_, body) = call(&admin, &base, "update_destination", &[("id", dst.as_str()), ("url", "https://example.com/a"), ("ordering", "lifo")]).await;
        assert!(body.contains("Ordering must be none or fifo"), "{body}");
        app.stop().await;
    }
}
