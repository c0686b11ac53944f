//! Every listing of the REST API pages the same way (docs §5): keyset pagination in
//! storage, newest first, `limit` and `cursor` in, `nextCursor` out; cursors that are
//! not this listing's are refused. And the delivery listing's filters.

use std::collections::HashSet;

use serde_json::{json, Value};
use server::domain::*;

use crate::incoming::Project;
use crate::on_both_backends;
use server::testkit::{spawn_app_with_config, test_config, TestApp, TestDb};

/// A server whose engine does not run: deliveries stay `pending` where the test put them.
async fn quiet_app(db: &TestDb) -> TestApp {
    let mut config = test_config(&db.url);
    config.dispatch.enabled = false;
    spawn_app_with_config(db, config).await
}

async fn created(p: &Project, path: &str, body: Value) -> String {
    let (status, json) = p.post(path, body).await;
    assert!(status == 201 || status == 202, "{path}: {status} {json}");
    json["id"].as_str().unwrap().to_owned()
}

async fn notify(app: &TestApp, space: &str, n: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..n {
        let note = Notification {
            id: NotificationId::new(),
            space_id: Some(space.parse().unwrap()),
            kind: "destination.failing".into(),
            subject_kind: Some("destination".into()),
            subject_id: None,
            message: format!("note {i}"),
            created_at: server::clock::now_ms(),
            read_at: None,
        };
        app.storage.create_notification(&note).await.unwrap();
        ids.push(note.id.to_string());
    }
    ids
}

/// Follows `nextCursor` from the first page to the last with `limit`; checks that each
/// page is full but the last, and returns every item's ID in the order answered.
async fn walk(p: &Project, path: &str, limit: usize) -> Vec<String> {
    let sep = if path.contains('?') { '&' } else { '?' };
    let mut ids = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let query = match &cursor {
            Some(c) => format!("{path}{sep}limit={limit}&cursor={c}"),
            None => format!("{path}{sep}limit={limit}"),
        };
        let (status, page) = p.get(&query).await;
        assert_eq!(status, 200, "{query}: {page}");
        let data = page["data"].as_array().unwrap();
        ids.extend(
            data.iter()
                .map(|item| item["id"].as_str().unwrap().to_owned()),
        );
        match page["nextCursor"].as_str() {
            Some(next) => {
                assert_eq!(
                    data.len(),
                    limit,
                    "{query}: only the last page may be short"
                );
                cursor = Some(next.to_owned());
            }
            None => {
                assert!(
                    !data.is_empty() || ids.is_empty(),
                    "{query}: an empty page after a cursor"
                );
                return ids;
            }
        }
    }
}

on_both_backends! {
    async fn every_listing_pages_through_more_rows_than_a_page_newest_first_without_duplicates_or_gaps(db) {
        let app = quiet_app(&db).await.with_space().await;
        let p = Project::of(&app);
        const N: usize = 7;
        let general = p.channel("general").await;
        for n in 0..N {
            created(&p, "/destinations", json!({"url": format!("https://d{n}.example/hook"), "eventTypes": ["listed"]})).await;
            p.channel(&format!("c{n}")).await;
            created(&p, "/incoming-webhooks", json!({"channelId": general, "name": format!("w{n}")})).await;
            created(&p, "/bots", json!({"name": format!("b{n}")})).await;
            created(&p, &format!("/channels/{general}/messages"), json!({"text": format!("m{n}")})).await;
            if n > 0 {
                created(&p, "/api-keys", json!({"name": format!("k{n}")})).await;
            }
        }
        // Each event goes to all N destinations.
        for n in 0..N {
            created(&p, "/events", json!({"type": "listed", "payload": {"n": n}})).await;
        }
        notify(&app, &p.id, N).await;
        // Another project's rows never show up in this one's listings.
        let other = Project::create(&app, Plan::Free).await;
        created(&other, "/destinations", json!({"url": "https://other.example/hook"})).await;
        notify(&app, &other.id, 2).await;

        let listings = [
            ("/destinations", N),
            ("/channels", N + 1),
            (&*format!("/channels/{general}/messages"), N),
            ("/incoming-webhooks", N),
            ("/bots", N),
            ("/api-keys", N),
            // Every message emits `message.created` too.
            ("/events", 2 * N),
            ("/deliveries", N * N),
            ("/notifications", N),
        ];
        for (path, expected) in listings {
            let paged = walk(&p, path, 3).await;
            assert_eq!(paged.len(), expected, "{path}: {paged:?}");
            assert_eq!(paged.iter().collect::<HashSet<_>>().len(), expected, "{path}: duplicates");
            let mut newest_first = paged.clone();
            newest_first.sort_by(|a, b| b.cmp(a));
            assert_eq!(paged, newest_first, "{path}: newest (highest ID) first");
            assert_eq!(walk(&p, path, 250).await, paged, "{path}: one page holds the same");
            // A page exactly as long as what is left ends the listing: no cursor to an empty page.
            let (_, exact) = p.get(&format!("{path}?limit={expected}")).await;
            assert!(exact["nextCursor"].is_null(), "{path}: {exact}");
        }
        app.stop().await;
    }
}

on_both_backends! {
    async fn cursors_of_another_project_or_listing_garbage_cursors_and_bad_limits_get_a_422_json_error(db) {
        let app = quiet_app(&db).await.with_space().await;
        let p = Project::of(&app);
        let other = Project::create(&app, Plan::Free).await;
        for project in [&p, &other] {
            let channel = project.channel("general").await;
            for n in 0..2 {
                created(project, "/destinations", json!({"url": format!("https://d{n}.example/hook")})).await;
                project.channel(&format!("c{n}")).await;
                created(project, "/incoming-webhooks", json!({"channelId": channel, "name": format!("w{n}")})).await;
                created(project, "/bots", json!({"name": format!("b{n}")})).await;
                created(project, &format!("/channels/{channel}/messages"), json!({"text": "hi"})).await;
                created(project, "/events", json!({"type": "x", "payload": {}})).await;
            }
            created(project, "/api-keys", json!({"name": "second"})).await;
            notify(&app, &project.id, 2).await;
        }
        let (_, mine) = p.get("/channels?limit=250").await;
        let my_general = mine["data"].as_array().unwrap().iter().find(|c| c["name"] == "general").unwrap()["id"].clone();
        let (_, theirs) = other.get("/channels?limit=250").await;
        let their_general = theirs["data"].as_array().unwrap().iter().find(|c| c["name"] == "general").unwrap()["id"].clone();

        let listings = ["/destinations", "/channels", "/messages", "/incoming-webhooks", "/bots", "/api-keys", "/events", "/deliveries", "/notifications"];
        let path = |project: &Project, listing: &str| match listing {
            "/messages" if project.id == p.id => format!("/channels/{}/messages", my_general.as_str().unwrap()),
            "/messages" => format!("/channels/{}/messages", their_general.as_str().unwrap()),
            other => other.to_owned(),
        };
        let refused = |status: u16, body: &Value, code: &str, what: &str| {
            assert_eq!(status, 422, "{what}: {body}");
            assert_eq!(body["code"], code, "{what}: {body}");
            assert!(!body["message"].as_str().unwrap().is_empty(), "{what}: {body}");
        };
        let mut cursors = Vec::new();
        for listing in listings {
            let (status, page) = p.get(&format!("{}?limit=1", path(&p, listing))).await;
            assert_eq!(status, 200, "{listing}: {page}");
            cursors.push(page["nextCursor"].as_str().unwrap_or_else(|| panic!("{listing}: {page}")).to_owned());
        }
        for (i, listing) in listings.iter().enumerate() {
            // The same listing of another project.
            let (status, body) = other.get(&format!("{}?cursor={}", path(&other, listing), cursors[i])).await;
            refused(status, &body, "invalid_cursor", &format!("{listing}, another project's cursor"));
            assert!(body["message"].as_str().unwrap().contains("another project"), "{body}");
            // Another listing of this project.
            let elsewhere = &cursors[(i + 1) % cursors.len()];
            let (status, body) = p.get(&format!("{}?cursor={elsewhere}", path(&p, listing))).await;
            refused(status, &body, "invalid_cursor", &format!("{listing}, another listing's cursor"));
            for garbage in ["nope", "", "ZGxzXzAxag", "%F0%9F%92%A5", "dlv_01jzzzzzzzzzzzzzzzzzzzzzzz"] {
                let (status, body) = p.get(&format!("{}?cursor={garbage}", path(&p, listing))).await;
                refused(status, &body, "invalid_cursor", &format!("{listing}, cursor {garbage:?}"));
            }
            for limit in ["0", "-1", "251", "9223372036854775807"] {
                let (status, body) = p.get(&format!("{}?limit={limit}", path(&p, listing))).await;
                refused(status, &body, "invalid_limit", &format!("{listing}, limit {limit}"));
            }
            for query in ["limit=ten", "limit=1.5", "bogus=1", "limit=99999999999999999999"] {
                let (status, body) = p.get(&format!("{}?{query}", path(&p, listing))).await;
                refused(status, &body, "invalid_query", &format!("{listing}, {query}"));
            }
            for limit in [1, 250] {
                let (status, body) = p.get(&format!("{}?limit={limit}", path(&p, listing))).await;
                assert_eq!(status, 200, "{listing}, limit {limit}: {body}");
            }
        }
        app.stop().await;
    }
}

on_both_backends! {
    async fn deliveries_are_filtered_by_status_destination_event_type_error_class_and_time(db) {
        let app = quiet_app(&db).await.with_space().await;
        let p = Project::of(&app);
        let a = created(&p, "/destinations", json!({"url": "https://a.example/hook"})).await;
        let b = created(&p, "/destinations", json!({"url": "https://b.example/hook", "eventTypes": ["order.paid"]})).await;
        created(&p, "/events", json!({"type": "order.created", "payload": {}})).await;
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        let before_paid = server::clock::now_ms();
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        created(&p, "/events", json!({"type": "order.paid", "payload": {}})).await;
        // a: created + paid; b: paid. One of a's is cancelled.
        let (_, all) = p.get("/deliveries").await;
        assert_eq!(all["data"].as_array().unwrap().len(), 3, "{all}");
        let a_paid = all["data"].as_array().unwrap().iter()
            .find(|d| d["destinationId"] == a.as_str() && d["eventType"] == "order.paid").unwrap()["id"].clone();
        let (status, _) = p.post(&format!("/deliveries/{}/cancel", a_paid.as_str().unwrap()), json!({})).await;
        assert_eq!(status, 200);

        let count = |query: String| {
            let p = &p;
            async move {
                let (status, page) = p.get(&format!("/deliveries?{query}")).await;
                assert_eq!(status, 200, "{query}: {page}");
                page["data"].as_array().unwrap().len()
            }
        };
        assert_eq!(count(format!("destinationId={a}")).await, 2);
        assert_eq!(count(format!("destinationId={b}")).await, 1);
        assert_eq!(count("eventType=order.paid".into()).await, 2);
        assert_eq!(count("status=pending".into()).await, 2);
        assert_eq!(count("status=cancelled".into()).await, 1);
        assert_eq!(count("errorClass=cancelled".into()).await, 1);
        assert_eq!(count("errorClass=connect".into()).await, 0);
        assert_eq!(count(format!("status=pending&destinationId={a}")).await, 1);
        assert_eq!(count(format!("since={before_paid}")).await, 2);
        assert_eq!(count(format!("until={before_paid}")).await, 1);
        let iso = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(before_paid) * 1_000_000).unwrap()
            .format(&time::format_description::well_known::Rfc3339).unwrap();
        assert_eq!(count(format!("since={}", iso.replace('+', "%2B"))).await, 2);
        assert_eq!(count("destinationId=dst_01jzzzzzzzzzzzzzzzzzzzzzzz".into()).await, 0);

        for bad in ["status=lost", "errorClass=nope", "destinationId=nope", "since=yesterday", "until=1e3", "eventType=%00"] {
            let (status, body) = p.get(&format!("/deliveries?{bad}")).await;
            assert_eq!((status, body["code"].as_str()), (422, Some("invalid_filter")), "{bad}: {body}");
        }
        app.stop().await;
    }
}
