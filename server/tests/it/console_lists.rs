//! The console's long lists at small scale (issue 16 item 6; the bench's `console`
//! scenario times them at 10,000 destinations and millions of deliveries): the
//! destinations list a page of 50 at a time with a search, and the deliveries page's
//! destination field, which suggests a bounded list and takes an ID or part of a URL.

use serde_json::{json, Value};

use super::console::{call, session, user};
use crate::on_both_backends;
use server::domain::Role;
use server::testkit::spawn_app;

async fn json_call(
    c: &reqwest::Client,
    base: &str,
    endpoint: &str,
    form: &[(&str, &str)],
) -> Value {
    let (status, body) = call(c, base, endpoint, form).await;
    assert_eq!(status, 200, "{endpoint}: {body}");
    serde_json::from_str(&body).unwrap()
}

fn ids(rows: &Value) -> Vec<String> {
    rows.as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().or(r["value"].as_str()).unwrap().to_owned())
        .collect()
}

on_both_backends! {
    async fn long_lists_come_a_page_at_a_time_with_a_search(db) {
        user(&db, "support@example.com", Role::Support).await;
        let app = spawn_app(&db).await.with_space().await;
        let mut made = Vec::new();
        for i in 0..60 {
            let d = app
                .destination(json!({"url": format!("http://127.0.0.1:9/hook-{i:02}"), "description": format!("Customer {i:02}")}))
                .await;
            made.push(d["id"].as_str().unwrap().to_owned());
        }
        let base = app.url("");
        let c = session(&base, "support@example.com").await;
        let space = app.space.clone().unwrap();

        // Newest first, 50 a page, then the rest.
        let first = json_call(&c, &base, "destination_list", &[("query[space]", &space)]).await;
        let page1 = ids(&first["rows"]);
        assert_eq!(page1.len(), 50);
        assert_eq!(page1[0], made[59]);
        let cursor = first["next_cursor"].as_str().unwrap().to_owned();
        let second = json_call(&c, &base, "destination_list", &[("query[space]", &space), ("query[before]", &cursor)]).await;
        let page2 = ids(&second["rows"]);
        assert_eq!(page2.len(), 10);
        assert_eq!(page2[9], made[0]);
        assert!(second["next_cursor"].is_null());
        // A search: part of the URL or the description, any case; an ID.
        let found = json_call(&c, &base, "destination_list", &[("query[q]", "HOOK-4")]).await;
        assert_eq!(ids(&found["rows"]).len(), 10, "hook-40 … hook-49");
        let found = json_call(&c, &base, "destination_list", &[("query[q]", "customer 07")]).await;
        assert_eq!(ids(&found["rows"]), vec![made[7].clone()]);
        let found = json_call(&c, &base, "destination_list", &[("query[q]", &made[3])]).await;
        assert_eq!(ids(&found["rows"]), vec![made[3].clone()]);
        let short = json_call(&c, &base, "destination_list", &[("query[q]", "x")]).await;
        assert!(short["filter_error"].as_str().unwrap().contains("at least 2"));
        // The page, without JavaScript: 50 rows and a link to the older ones.
        let html = c.get(format!("{base}/destinations?space={space}")).send().await.unwrap().text().await.unwrap();
        assert_eq!(html.matches("data-destination=").count(), 50);
        assert!(html.contains(&format!("before={cursor}")), "an Older link");

        // The deliveries page's destination field: at most 50 suggestions, never all.
        let suggested = json_call(&c, &base, "destination_choices", &[("space", ""), ("typed", "")]).await;
        assert_eq!(ids(&suggested).len(), 50);
        let suggested = json_call(&c, &base, "destination_choices", &[("space", &space), ("typed", "hook-5")]).await;
        assert_eq!(ids(&suggested).len(), 10);
        let page = json_call(&c, &base, "deliveries", &[("query[destination]", "")]).await;
        assert_eq!(ids(&page["destinations"]).len(), 50);
        // One match filters by it; several say so.
        let page = json_call(&c, &base, "deliveries", &[("query[destination]", "hook-42")]).await;
        assert!(page["filter_error"].is_null(), "{page}");
        let page = json_call(&c, &base, "deliveries", &[("query[destination]", "hook-4")]).await;
        assert!(page["filter_error"].as_str().unwrap().contains("Several destinations match"), "{page}");
        assert_eq!(ids(&page["destinations"]).len(), 10);
        let page = json_call(&c, &base, "deliveries", &[("query[destination]", "no-such")]).await;
        assert!(page["filter_error"].as_str().unwrap().contains("No destination"), "{page}");
        let html = c.get(format!("{base}/deliveries")).send().await.unwrap().text().await.unwrap();
        assert!(html.contains(r#"list="destination-choices""#) && !html.contains(r#"<select name="destination""#));
        app.stop().await;
    }
}

fn first<I>(n: i64) -> server::storage::Page<I> {
    server::storage::Page::first(n)
}

fn after<I>(id: I) -> server::storage::Page<I> {
    server::storage::Page {
        before: Some(id),
        limit: 50,
    }
}

/// Two pages of a list: newest first, disjoint, and together every row.
fn two_pages<I: Ord + Clone + std::fmt::Debug>(p1: &[I], p2: &[I], total: usize) {
    assert_eq!(p1.len(), 50, "a full first page");
    assert_eq!(p1.len() + p2.len(), total, "the second page holds the rest");
    let all: Vec<I> = p1.iter().chain(p2).cloned().collect();
    let mut sorted = all.clone();
    sorted.sort_by(|a, b| b.cmp(a));
    sorted.dedup();
    assert_eq!(all, sorted, "newest first, no row twice");
}

on_both_backends! {
    async fn every_list_is_read_a_page_at_a_time_with_a_search(db) {
        use server::domain::*;
        let s = db.storage.as_ref();
        let now = server::clock::now_ms();
        let space = server::ops::tenants::create_space(s, "Lists", Plan::Free).await.unwrap().space;
        let other = server::ops::tenants::create_space(s, "Other", Plan::Free).await.unwrap().space;
        let mut channel = None;
        for i in 0..55 {
            let c = Channel { id: ChannelId::new(), space_id: space.id, name: format!("chan-{i:02}"), created_at: now };
            s.create_channel(&c, None).await.unwrap();
            channel = Some(c.id);
            let b = Bot { id: BotId::new(), space_id: space.id, name: format!("Bot {i:02}"), token_hash: format!("bot-hash-{i}"), created_at: now, revoked_at: None };
            s.create_bot(&b, None).await.unwrap();
            // The space's first key and 54 more.
            if i > 0 {
                server::ops::credentials::create_api_key(s, space.id, &format!("Key {i:02}"), now, None).await.unwrap();
            }
            let t = EventType { id: EventTypeId::new(), space_id: space.id, name: format!("order.step{i:02}"), description: format!("Step {i:02} of an order"), schema: None, example: None, deprecated: false, created_at: now, updated_at: now };
            s.create_event_type(&t, None).await.unwrap();
            let w = IncomingWebhook { id: IncomingWebhookId::new(), space_id: space.id, channel_id: c.id, name: format!("Hook {i:02}"), token_hash: format!("hook-hash-{i}"), signing_secret: None, status: IncomingWebhookStatus::Active, consecutive_failures: 0, created_at: now, updated_at: now, disabled_at: None };
            s.create_incoming_webhook(&w, None).await.unwrap();
            server::ops::tenants::create_user(s, &format!("user{i:02}@example.com"), "a long password 1", Role::Support).await.unwrap();
            if i >= 2 {
                server::ops::tenants::create_space(s, &format!("Space {i:02}"), Plan::Pro).await.unwrap();
            }
        }

        let p1: Vec<_> = s.search_channels(space.id, None, first(50)).await.unwrap().iter().map(|c| c.id).collect();
        let p2: Vec<_> = s.search_channels(space.id, None, after(p1[49])).await.unwrap().iter().map(|c| c.id).collect();
        two_pages(&p1, &p2, 55);
        assert_eq!(s.search_channels(space.id, Some("%chan-4%"), first(50)).await.unwrap().len(), 10);
        assert!(s.search_channels(other.id, None, first(50)).await.unwrap().is_empty(), "one space's only");

        let p1: Vec<_> = s.search_bots(space.id, None, first(50)).await.unwrap().iter().map(|b| b.id).collect();
        let p2: Vec<_> = s.search_bots(space.id, None, after(p1[49])).await.unwrap().iter().map(|b| b.id).collect();
        two_pages(&p1, &p2, 55);
        let found = s.search_bots(space.id, Some("%bot 07%"), first(50)).await.unwrap();
        assert_eq!(found.iter().map(|b| b.name.as_str()).collect::<Vec<_>>(), ["Bot 07"], "any case");
        assert!(s.search_bots(other.id, None, first(50)).await.unwrap().is_empty());

        let p1: Vec<_> = s.search_api_keys(space.id, None, first(50)).await.unwrap().iter().map(|k| k.id).collect();
        let p2: Vec<_> = s.search_api_keys(space.id, None, after(p1[49])).await.unwrap().iter().map(|k| k.id).collect();
        two_pages(&p1, &p2, 55);
        assert_eq!(s.search_api_keys(space.id, Some("%key 1%"), first(50)).await.unwrap().len(), 10);
        assert_eq!(s.search_api_keys(other.id, None, first(50)).await.unwrap().len(), 1, "its first key");

        let p1: Vec<_> = s.search_event_types(Some(space.id), None, first(50)).await.unwrap().iter().map(|t| t.id).collect();
        let p2: Vec<_> = s.search_event_types(Some(space.id), None, after(p1[49])).await.unwrap().iter().map(|t| t.id).collect();
        two_pages(&p1, &p2, 55);
        assert_eq!(s.search_event_types(None, Some("%step 3%"), first(50)).await.unwrap().len(), 10, "by description");
        assert_eq!(s.search_event_types(None, Some("%.step3%"), first(50)).await.unwrap().len(), 10, "by name");
        assert!(s.search_event_types(Some(other.id), None, first(50)).await.unwrap().is_empty());

        let p1: Vec<_> = s.search_incoming_webhooks(None, None, first(50)).await.unwrap().iter().map(|w| w.id).collect();
        let p2: Vec<_> = s.search_incoming_webhooks(None, None, after(p1[49])).await.unwrap().iter().map(|w| w.id).collect();
        two_pages(&p1, &p2, 55);
        assert_eq!(s.search_incoming_webhooks(Some(space.id), Some("%hook 5%"), first(50)).await.unwrap().len(), 5);
        assert!(s.search_incoming_webhooks(Some(other.id), None, first(50)).await.unwrap().is_empty());
        assert!(channel.is_some());

        let p1: Vec<_> = s.search_users(None, first(50)).await.unwrap().iter().map(|u| u.id).collect();
        let p2: Vec<_> = s.search_users(None, after(p1[49])).await.unwrap().iter().map(|u| u.id).collect();
        two_pages(&p1, &p2, 55);
        assert_eq!(s.search_users(Some("%user2%"), first(50)).await.unwrap().len(), 10);
        // `_` and `%` are letters in a search, not wildcards.
        assert!(s.search_users(Some("%user\\_%"), first(50)).await.unwrap().is_empty());

        let p1: Vec<_> = s.search_spaces(None, first(50)).await.unwrap().iter().map(|s| s.id).collect();
        let p2: Vec<_> = s.search_spaces(None, after(p1[49])).await.unwrap().iter().map(|s| s.id).collect();
        two_pages(&p1, &p2, 55);
        assert_eq!(s.search_spaces(Some("%space 1%"), first(50)).await.unwrap().len(), 10);
    }
}

on_both_backends! {
    async fn the_console_lists_are_paged_searched_and_kept_to_their_roles(db) {
        user(&db, "admin@example.com", Role::Admin).await;
        user(&db, "support@example.com", Role::Support).await;
        let app = spawn_app(&db).await.with_space().await;
        for i in 0..52 {
            server::ops::tenants::create_user(app.storage.as_ref(), &format!("staff{i:02}@example.com"), "a long password 1", Role::Support).await.unwrap();
        }
        let base = app.url("");
        let admin = session(&base, "admin@example.com").await;
        let support = session(&base, "support@example.com").await;
        let space = app.space.clone().unwrap();

        // Users: admins only; 54 of them, 50 a page; a search by email.
        let (status, body) = call(&support, &base, "user_page", &[("query[q]", "")]).await;
        assert!(status >= 400 && body.contains("Forbidden"), "support staff may not list users: {status} {body}");
        let first = json_call(&admin, &base, "user_page", &[("query[q]", "")]).await;
        assert_eq!(ids(&first["rows"]).len(), 50);
        let cursor = first["next_cursor"].as_str().unwrap().to_owned();
        let second = json_call(&admin, &base, "user_page", &[("query[before]", &cursor)]).await;
        assert_eq!(ids(&second["rows"]).len(), 4);
        let found = json_call(&admin, &base, "user_page", &[("query[q]", "STAFF0")]).await;
        assert_eq!(ids(&found["rows"]).len(), 10);
        let short = json_call(&admin, &base, "user_page", &[("query[q]", "s")]).await;
        assert!(short["filter_error"].as_str().unwrap().contains("at least 2"));
        // Without JavaScript: the search is a GET form, the next page a link.
        let html = admin.get(format!("{base}/users?q=staff")).send().await.unwrap().text().await.unwrap();
        assert_eq!(html.matches("data-user=").count(), 50);
        assert!(html.contains("before="), "an Older link");

        // Spaces, incoming webhooks and event types: every role reads them.
        let spaces = json_call(&support, &base, "space_page_list", &[("query[q]", "")]).await;
        assert_eq!(ids(&spaces["rows"]), vec![space.clone()]);
        let spaces = json_call(&support, &base, "space_page_list", &[("query[q]", "no such")]).await;
        assert!(ids(&spaces["rows"]).is_empty());
        let hooks = json_call(&support, &base, "incoming_page", &[("query[space]", &space)]).await;
        assert!(hooks["hooks"]["rows"].as_array().unwrap().is_empty());
        let types = json_call(&support, &base, "event_type_page", &[("query[q]", "order")]).await;
        assert!(types["rows"].as_array().is_some());

        // A space's channels, bots and keys: admins only, one search for the three.
        let (status, body) = call(&support, &base, "space_lists", &[("id", &space), ("query[q]", "")]).await;
        assert!(status >= 400 && body.contains("Forbidden"), "{status} {body}");
        let page = json_call(&admin, &base, "space_lists", &[("id", &space), ("query[q]", "")]).await;
        assert_eq!(ids(&page["api_keys"]["rows"]).len(), 1, "the space's first key");
        let page = json_call(&admin, &base, "space_lists", &[("id", &space), ("query[q]", "nothing like it")]).await;
        assert!(ids(&page["api_keys"]["rows"]).is_empty());
        app.stop().await;
    }
}
