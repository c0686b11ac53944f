//! The audit log (docs D14): every change made through the REST API or the console
//! leaves exactly one entry naming its author (the key's ID, the user's email), with the
//! count and the filter for bulk actions; a refused change leaves none; support staff
//! read only their own entries; the REST listing pages and stays in its project.
//! And `api_keys.last_used_at`: written after a request, not again within the minute.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::on_both_backends;
use server::domain::{AuditAction, Notification, NotificationId, Role};
use server::storage::{AuditFilter, Page};
use server::testkit::{browser_like_client, eventually, spawn_app, TestApp};

const PASSWORD: &str = "correct horse battery";

/// A `deliverAt` a day ahead: its deliveries wait (and can be cancelled).
fn tomorrow() -> String {
    server::clock::rfc3339(server::clock::now_ms() + 86_400_000)
}

/// The whole audit log of the app's space, oldest first, through the REST API.
async fn entries(app: &TestApp) -> Vec<Value> {
    let (status, page) = app.get("/audit-log?limit=250").await;
    assert_eq!(status, 200, "{page}");
    let mut rows = page["data"].as_array().unwrap().clone();
    rows.reverse();
    rows
}

/// How many entries of each action.
fn tally(rows: &[Value]) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for r in rows {
        *out.entry(r["action"].as_str().unwrap().to_owned())
            .or_default() += 1;
    }
    out
}

async fn key_id(app: &TestApp) -> String {
    let (_, keys) = app.get("/api-keys").await;
    keys["data"][0]["id"].as_str().unwrap().to_owned()
}

async fn patch(app: &TestApp, path: &str, body: Value) -> (u16, Value) {
    let resp = reqwest::Client::new()
        .patch(app.api(path))
        .bearer_auth(app.api_key.as_ref().unwrap())
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

async fn delete(app: &TestApp, path: &str) -> u16 {
    reqwest::Client::new()
        .delete(app.api(path))
        .bearer_auth(app.api_key.as_ref().unwrap())
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

on_both_backends! {
    async fn every_api_change_leaves_one_entry_naming_its_key(db) {
        let app = spawn_app(&db).await.with_space().await;
        let key = key_id(&app).await;
        assert!(entries(&app).await.is_empty(), "creating the space by the CLI is no one's");

        let dst = app.destination(json!({"url": "https://example.com/hook"})).await;
        let dst = dst["id"].as_str().unwrap().to_owned();
        assert_eq!(patch(&app, &format!("/destinations/{dst}"), json!({"description": "orders"})).await.0, 200);
        // A refused change leaves nothing.
        assert_eq!(patch(&app, &format!("/destinations/{dst}"), json!({"url": "not a url"})).await.0, 422);
        assert_eq!(app.post("/channels", json!({"name": ""})).await.0, 422);
        assert_eq!(app.post(&format!("/destinations/{dst}/disable"), json!({})).await.0, 200);
        assert_eq!(app.post(&format!("/destinations/{dst}/enable"), json!({})).await.0, 200);
        assert_eq!(app.post(&format!("/destinations/{dst}/rotate-secret"), json!({})).await.0, 200);

        let (_, channel) = app.post("/channels", json!({"name": "ops"})).await;
        let channel = channel["id"].as_str().unwrap().to_owned();
        assert_eq!(patch(&app, &format!("/channels/{channel}"), json!({"name": "ops-2"})).await.0, 200);
        let (status, hook) = app.post("/incoming-webhooks", json!({"channelId": channel, "name": "ci"})).await;
        assert_eq!(status, 201, "{hook}");
        let hook = hook["id"].as_str().unwrap().to_owned();
        assert_eq!(app.post(&format!("/incoming-webhooks/{hook}/disable"), json!({})).await.0, 200);
        assert_eq!(app.post(&format!("/incoming-webhooks/{hook}/enable"), json!({})).await.0, 200);
        assert_eq!(delete(&app, &format!("/incoming-webhooks/{hook}")).await, 204);
        // Posting a message is the product's data, not a change (docs D15).
        assert_eq!(app.post(&format!("/channels/{channel}/messages"), json!({"text": "hi"})).await.0, 201);
        assert_eq!(delete(&app, &format!("/channels/{channel}")).await, 204);

        let (status, t) = app.post("/event-types", json!({"name": "order.paid"})).await;
        assert_eq!(status, 201, "{t}");
        assert_eq!(patch(&app, "/event-types/order.paid", json!({"description": "paid"})).await.0, 200);
        let (_, bot) = app.post("/bots", json!({"name": "deploy"})).await;
        let bot = bot["id"].as_str().unwrap().to_owned();
        assert_eq!(app.post(&format!("/bots/{bot}/revoke"), json!({})).await.0, 200);
        assert_eq!(app.post(&format!("/bots/{bot}/revoke"), json!({})).await.0, 200, "twice: no second change");
        let (_, other) = app.post("/api-keys", json!({"name": "ci"})).await;
        let other = other["id"].as_str().unwrap().to_owned();
        assert_eq!(app.post(&format!("/api-keys/{other}/revoke"), json!({})).await.0, 204);

        // Deliveries: scheduled ones wait, so they can be cancelled, then sent again.
        // Publishing is the product's data, not a change (docs D15).
        let later = tomorrow();
        let mut waiting = Vec::new();
        for _ in 0..3 {
            let (status, e) = app.post("/events", json!({"type": "order.paid", "payload": {}, "deliverAt": later})).await;
            assert_eq!(status, 202, "{e}");
            let id = e["id"].as_str().unwrap().to_owned();
            waiting.push(app.deliveries_of(&id).await[0]["id"].as_str().unwrap().to_owned());
        }
        assert_eq!(app.post(&format!("/deliveries/{}/cancel", waiting[0]), json!({})).await.0, 200);
        let (status, bulk) = app.post("/deliveries/cancel", json!({"deliveryIds": [waiting[1], waiting[2], waiting[0]]})).await;
        assert_eq!(status, 200, "{bulk}");
        let (status, bulk) = app.post("/deliveries/resend", json!({"deliveryIds": [waiting[1], waiting[2]]})).await;
        assert_eq!(status, 200, "{bulk}");
        // Nothing failed: a resend of the failed changes nothing and records nothing.
        let (status, none) = app.post("/deliveries/resend-failed", json!({})).await;
        assert_eq!((status, none["resent"].as_i64()), (200, Some(0)), "{none}");

        let rows = entries(&app).await;
        let expected: BTreeMap<String, usize> = [
            ("destination.create", 1), ("destination.update", 1), ("destination.disable", 1),
            ("destination.enable", 1), ("destination.rotate_secret", 1),
            ("channel.create", 1), ("channel.rename", 1), ("channel.delete", 1),
            ("incoming_webhook.create", 1), ("incoming_webhook.disable", 1),
            ("incoming_webhook.enable", 1), ("incoming_webhook.delete", 1),
            ("event_type.create", 1), ("event_type.update", 1),
            ("bot.create", 1), ("bot.revoke", 1), ("api_key.create", 1), ("api_key.revoke", 1),
            ("deliveries.cancel", 2), ("deliveries.resend", 1),
        ].into_iter().map(|(a, n)| (a.to_owned(), n)).collect();
        assert_eq!(tally(&rows), expected, "{rows:#?}");
        for r in &rows {
            assert_eq!(r["actor"]["kind"], "api_key", "{r}");
            assert_eq!(r["actor"]["id"], key.as_str(), "{r}");
            assert_eq!(r["actor"]["label"], key.as_str(), "{r}");
            assert_eq!(r["actor"]["role"], Value::Null, "{r}");
            assert_eq!(r["source"], "127.0.0.1", "the TCP peer: {r}");
        }
        let find = |action: &str| rows.iter().filter(|r| r["action"] == action).cloned().collect::<Vec<_>>();
        assert_eq!(find("destination.create")[0]["targetId"], dst.as_str());
        assert_eq!(find("destination.create")[0]["targetKind"], "destination");
        // Bulk: how many it changed, and what chose them.
        let cancels = find("deliveries.cancel");
        assert_eq!(cancels[0]["detail"]["count"], 1);
        assert_eq!(cancels[1]["detail"]["count"], 2, "the third was cancelled already: {}", cancels[1]);
        assert_eq!(cancels[1]["detail"]["filter"]["ids"].as_array().unwrap().len(), 3);
        let resend = &find("deliveries.resend")[0];
        assert_eq!(resend["detail"]["count"], 2);
        assert_eq!(resend["detail"]["filter"]["ids"], json!([waiting[1], waiting[2]]));
        app.stop().await;
    }
}

on_both_backends! {
    async fn a_resend_of_failed_deliveries_records_its_count_and_window(db) {
        let app = spawn_app(&db).await.with_space().await;
        // A receiver that refuses: the one attempt fails the delivery at once.
        let dst = app.destination(json!({"url": "http://127.0.0.1:9/never", "maxAttempts": 1})).await;
        let dst = dst["id"].as_str().unwrap().to_owned();
        let event = app.publish("order.paid", json!({})).await;
        app.wait_for_delivery(&event, "failed").await;
        let body = json!({"destinationId": dst, "since": "2000-01-01T00:00:00Z"});
        let (status, done) = app.post("/deliveries/resend-failed", body).await;
        assert_eq!((status, done["resent"].as_i64()), (200, Some(1)), "{done}");
        let rows = entries(&app).await;
        let resends: Vec<&Value> = rows.iter().filter(|r| r["action"] == "deliveries.resend_failed").collect();
        assert_eq!(resends.len(), 1, "{rows:#?}");
        assert_eq!(resends[0]["detail"]["count"], 1);
        assert_eq!(resends[0]["detail"]["filter"]["destinationId"], dst.as_str());
        assert_eq!(resends[0]["detail"]["filter"]["since"], "2000-01-01T00:00:00Z");
        app.stop().await;
    }
}

on_both_backends! {
    async fn the_rest_listing_pages_and_keeps_to_its_project(db) {
        let app = spawn_app(&db).await.with_space().await;
        for i in 0..5 {
            assert_eq!(app.post("/channels", json!({"name": format!("c{i}")})).await.0, 201);
        }
        assert_eq!(app.post("/bots", json!({"name": "b"})).await.0, 201);
        let b = spawn_app(&db).await.with_space().await;
        assert_eq!(b.post("/channels", json!({"name": "theirs"})).await.0, 201);

        let mut seen = Vec::new();
        let mut path = "/audit-log?limit=2&action=channel.create".to_owned();
        let mut cursor = String::new();
        for page in 0.. {
            let (status, body) = app.get(&path).await;
            assert_eq!(status, 200, "{body}");
            let data = body["data"].as_array().unwrap();
            assert!(data.len() <= 2);
            seen.extend(data.iter().map(|r| r["id"].as_str().unwrap().to_owned()));
            match body["nextCursor"].as_str() {
                Some(c) => {
                    cursor = c.to_owned();
                    path = format!("/audit-log?limit=2&action=channel.create&cursor={c}");
                }
                None => break,
            }
            assert!(page < 5, "the pages end");
        }
        assert_eq!(seen.len(), 5, "{seen:?}");
        let mut sorted = seen.clone();
        sorted.sort();
        sorted.reverse();
        sorted.dedup();
        assert_eq!(sorted, seen, "newest first, each once");
        assert_eq!(entries(&app).await.len(), 6, "5 channels and a bot");
        let theirs = entries(&b).await;
        assert_eq!(tally(&theirs), BTreeMap::from([("channel.create".to_owned(), 1)]), "{theirs:#?}");

        // Another project's cursor is refused; so is an unknown action.
        let (status, body) = b.get(&format!("/audit-log?cursor={cursor}")).await;
        assert_eq!((status, body["code"].as_str()), (422, Some("invalid_cursor")), "{body}");
        let (status, body) = app.get("/audit-log?action=everything").await;
        assert_eq!((status, body["code"].as_str()), (422, Some("invalid_filter")), "{body}");
        // By actor and time.
        let key = key_id(&app).await;
        assert_eq!(app.get(&format!("/audit-log?actor={key}")).await.1["data"].as_array().unwrap().len(), 6);
        assert_eq!(app.get("/audit-log?actor=key_nobody").await.1["data"].as_array().unwrap().len(), 0);
        assert_eq!(app.get("/audit-log?until=2000-01-01T00:00:00Z").await.1["data"].as_array().unwrap().len(), 0);
        assert_eq!(app.get("/audit-log?since=2000-01-01T00:00:00Z").await.1["data"].as_array().unwrap().len(), 6);
        b.stop().await;
        app.stop().await;
    }
}

async fn sign_in(base: &str, email: &str) -> reqwest::Client {
    let client = browser_like_client();
    let ok = client
        .post(format!("{base}/api/login"))
        .header("accept", "text/html")
        .form(&[("email", email), ("password", PASSWORD), ("next", "/")])
        .send()
        .await
        .unwrap();
    assert_eq!(ok.headers()["location"], "/", "{email} signs in");
    client
}

/// Calls a console server function as the browser's JavaScript would: `(status, body)`.
async fn call(
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

fn ok(answer: (u16, String), what: &str) {
    assert_eq!(answer.0, 200, "{what}: {}", answer.1);
}

/// The entries of one actor, oldest first, straight from storage.
async fn entries_of(db: &server::testkit::TestDb, actor: &str) -> Vec<server::domain::AuditEntry> {
    let filter = AuditFilter {
        actor_id: Some(actor.to_owned()),
        ..AuditFilter::default()
    };
    let mut rows = db
        .storage
        .list_audit(&filter, Page::first(500))
        .await
        .unwrap();
    rows.reverse();
    rows
}

on_both_backends! {
    async fn every_console_change_leaves_one_entry_naming_its_user(db) {
        let admin = server::ops::tenants::create_user(db.storage.as_ref(), "admin@example.com", PASSWORD, Role::Admin).await.unwrap();
        let support = server::ops::tenants::create_user(db.storage.as_ref(), "support@example.com", PASSWORD, Role::Support).await.unwrap();
        let app = spawn_app(&db).await.with_space().await;
        let space = app.space.clone().unwrap();
        let base = app.url("");
        let a = sign_in(&base, "admin@example.com").await;

        let dst = app.destination(json!({"url": "https://example.com/hook"})).await;
        let dst = dst["id"].as_str().unwrap().to_owned();
        ok(call(&a, &base, "create_space", &[("name", "Second"), ("plan", "pro")]).await, "create_space");
        ok(call(&a, &base, "create_channel", &[("space", &space), ("name", "ops")]).await, "create_channel");
        // Refused: leaves nothing.
        let (status, _) = call(&a, &base, "create_channel", &[("space", &space), ("name", &"c".repeat(101))]).await;
        assert!(status >= 400);
        ok(call(&a, &base, "create_bot", &[("space", &space), ("name", "deploy")]).await, "create_bot");
        ok(call(&a, &base, "create_api_key", &[("space", &space), ("name", "ci")]).await, "create_api_key");
        ok(call(&a, &base, "set_destination_status", &[("id", &dst), ("status", "inactive")]).await, "disable");
        ok(call(&a, &base, "set_destination_status", &[("id", &dst), ("status", "active")]).await, "enable");
        ok(call(&a, &base, "rotate_secret", &[("id", &dst)]).await, "rotate_secret");
        ok(call(&a, &base, "create_user", &[("email", "new@example.com"), ("password", PASSWORD), ("role", "support")]).await, "create_user");
        let support_id = support.id.to_string();
        ok(call(&a, &base, "set_user_status", &[("id", &support_id), ("status", "disabled")]).await, "disable user");
        ok(call(&a, &base, "set_user_status", &[("id", &support_id), ("status", "active")]).await, "enable user");

        let rows = entries_of(&db, &admin.id.to_string()).await;
        let actions: Vec<&str> = rows.iter().map(|e| e.action.as_str()).collect();
        assert_eq!(actions, [
            "space.create", "channel.create", "bot.create", "api_key.create",
            "destination.disable", "destination.enable", "destination.rotate_secret",
            "user.create", "user.disable", "user.enable",
        ], "{rows:#?}");
        for e in &rows {
            assert_eq!(e.actor.label, "admin@example.com");
            assert_eq!(e.actor.role, Some(Role::Admin));
            assert_eq!(e.source.as_deref(), Some("127.0.0.1"), "{e:?}");
        }
        assert_eq!(rows[0].action, AuditAction::SpaceCreate);
        assert_eq!(rows[0].space_id.map(|s| s.to_string()), Some(rows[0].target_id.clone()));
        assert_eq!(rows[7].space_id, None, "users are install-wide");
        assert_eq!(rows[4].target_id, dst);

        // Support staff: their own changes, under their own name.
        let s = sign_in(&base, "support@example.com").await;
        let n = Notification {
            id: NotificationId::new(),
            space_id: None,
            kind: "destination.disabled".into(),
            subject_kind: None,
            subject_id: None,
            message: "x".into(),
            created_at: 1,
            read_at: None,
        };
        db.storage.create_notification(&n).await.unwrap();
        let nid = n.id.to_string();
        ok(call(&s, &base, "mark_read", &[("id", &nid)]).await, "mark_read");
        let own = entries_of(&db, &support_id).await;
        assert_eq!(own.len(), 1, "{own:#?}");
        assert_eq!((own[0].action, own[0].actor.label.as_str()), (AuditAction::NotificationRead, "support@example.com"));
        assert_eq!(own[0].actor.role, Some(Role::Support));

        // Reading: support sees only their own entries, whatever they ask for.
        let admin_id = admin.id.to_string();
        for form in [vec![("query[actor]", "")], vec![("query[actor]", admin_id.as_str())]] {
            let (status, body) = call(&s, &base, "audit_log", &form).await;
            assert_eq!(status, 200, "{body}");
            let page: Value = serde_json::from_str(&body).unwrap();
            let seen: Vec<&str> = page["rows"].as_array().unwrap().iter().map(|r| r["actor_label"].as_str().unwrap()).collect();
            assert_eq!(seen, ["support@example.com"], "{body}");
            assert_eq!(page["own_only"], true);
            assert!(page["people"].as_array().unwrap().is_empty(), "no one else's name: {body}");
        }
        let (status, body) = call(&a, &base, "audit_log", &[("query[actor]", admin_id.as_str())]).await;
        assert_eq!(status, 200, "{body}");
        let page: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(page["rows"].as_array().unwrap().len(), 10, "{body}");
        let (_, body) = call(&a, &base, "audit_log", &[("query[actor]", "")]).await;
        let page: Value = serde_json::from_str(&body).unwrap();
        // Everyone's: the admin's ten, support's one, and the API key's destination.
        assert_eq!(page["rows"].as_array().unwrap().len(), 12, "everyone's: {body}");
        app.stop().await;
    }
}

on_both_backends! {
    async fn bulk_console_actions_record_their_count_and_filter(db) {
        let support = server::ops::tenants::create_user(db.storage.as_ref(), "support@example.com", PASSWORD, Role::Support).await.unwrap();
        let app = spawn_app(&db).await.with_space().await;
        let base = app.url("");
        app.destination(json!({"url": "https://example.com/hook"})).await;
        let mut ids = Vec::new();
        for _ in 0..3 {
            let (_, e) = app.post("/events", json!({"type": "t", "payload": {}, "deliverAt": tomorrow()})).await;
            ids.push(app.deliveries_of(e["id"].as_str().unwrap()).await[0]["id"].as_str().unwrap().to_owned());
        }
        let s = sign_in(&base, "support@example.com").await;
        ok(call(&s, &base, "cancel_delivery", &[("id", &ids[0])]).await, "cancel one");
        let selection = json!({"op": "cancel", "ids": [], "all": true, "filter": {"status": "pending"}}).to_string();
        let (status, body) = call(&s, &base, "bulk", &[("selection", &selection), ("state", "")]).await;
        assert_eq!(status, 200, "{body}");
        let rows = entries_of(&db, &support.id.to_string()).await;
        assert_eq!(rows.len(), 2, "{rows:#?}");
        assert_eq!(rows[0].detail["count"], 1);
        assert_eq!(rows[0].detail["filter"]["ids"], json!([ids[0]]));
        assert_eq!(rows[1].action, AuditAction::DeliveriesCancel);
        assert_eq!(rows[1].detail["count"], 2);
        assert_eq!(rows[1].detail["filter"], json!({"status": "pending"}));
        app.stop().await;
    }
}

on_both_backends! {
    async fn a_keys_use_is_written_after_a_request_and_not_again_within_the_minute(db) {
        let app = spawn_app(&db).await.with_space().await;
        let (_, keys) = app.get("/api-keys").await;
        let id = keys["data"][0]["id"].as_str().unwrap().to_owned();
        let used = eventually(10, || async {
            let (_, keys) = app.get("/api-keys").await;
            keys["data"][0]["lastUsedAt"].as_str().map(str::to_owned)
        })
        .await;
        for _ in 0..5 {
            assert_eq!(app.get("/channels").await.0, 200);
        }
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let (_, keys) = app.get("/api-keys").await;
        assert_eq!(keys["data"][0]["lastUsedAt"].as_str(), Some(used.as_str()), "not rewritten within the minute");

        // The conditional write itself, on a clock of the test's own: several instances
        // together write about once a minute.
        let key: server::domain::ApiKeyId = id.parse().unwrap();
        let now = 4_000_000_000_000;
        assert!(db.storage.touch_api_key(key, now, 60_000).await.unwrap());
        assert!(!db.storage.touch_api_key(key, now + 59_999, 60_000).await.unwrap());
        assert!(db.storage.touch_api_key(key, now + 60_001, 60_000).await.unwrap());
        app.stop().await;
    }
}
