//! The console's search box (issue 16 item 3) over HTTP: each kind of key finds its
//! delivery or destination through the `search` server function, one match answers
//! with the page to go to, several with a list; without JavaScript `/search?q=` is a
//! redirect for one match and a results page for several. Support staff search too.

use serde_json::{json, Value};

use super::console::{call, session, user};
use crate::on_both_backends;
use server::domain::Role;
use server::testkit::{spawn_app, Receiver};

async fn search(client: &reqwest::Client, base: &str, q: &str) -> Value {
    let (status, body) = call(client, base, "search", &[("q", q)]).await;
    assert_eq!(status, 200, "{q}: {body}");
    serde_json::from_str(&body).unwrap()
}

fn hit_ids(r: &Value) -> Vec<String> {
    r["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["id"].as_str().unwrap().to_owned())
        .collect()
}

on_both_backends! {
    async fn the_search_box_finds_a_delivery_by_each_kind_of_key(db) {
        user(&db, "admin@example.com", Role::Admin).await;
        user(&db, "support@example.com", Role::Support).await;
        let receiver = Receiver::start().await;
        let app = spawn_app(&db).await.with_space().await;
        let alpha = app
            .destination(json!({"url": receiver.url("/alpha-orders"), "description": "Billing ERP", "eventTypes": ["order.paid"]}))
            .await["id"].as_str().unwrap().to_owned();
        let beta = app
            .destination(json!({"url": receiver.url("/beta-everything"), "description": "Warehouse"}))
            .await["id"].as_str().unwrap().to_owned();
        // order.paid goes to both; order.shipped to beta only.
        let (status, paid) = app
            .post("/events", json!({"type": "order.paid", "payload": {"n": 42}, "idempotencyKey": "order-42"}))
            .await;
        assert_eq!(status, 202, "{paid}");
        let paid = paid["id"].as_str().unwrap().to_owned();
        let (status, shipped) = app
            .post("/events", json!({"type": "order.shipped", "payload": {"n": 42}, "idempotencyKey": "Ship-7"}))
            .await;
        assert_eq!(status, 202, "{shipped}");
        let shipped = shipped["id"].as_str().unwrap().to_owned();
        let paid_deliveries = app.deliveries_of(&paid).await;
        assert_eq!(paid_deliveries.len(), 2);
        let shipped_delivery = app.deliveries_of(&shipped).await[0]["id"].as_str().unwrap().to_owned();
        let to_alpha = paid_deliveries
            .iter()
            .find(|d| d["destinationId"] == alpha.as_str())
            .unwrap()["id"].as_str().unwrap().to_owned();

        let base = app.url("");
        for who in ["admin@example.com", "support@example.com"] {
            let c = session(&base, who).await;
            // A delivery ID goes to the delivery.
            let r = search(&c, &base, &to_alpha).await;
            assert_eq!(r["go"], format!("/deliveries/{to_alpha}"), "{r}");
            assert_eq!(r["looked_up_as"], "a delivery ID");
            // An event ID (the webhook-id the receiver saw) with one delivery goes to it ...
            let r = search(&c, &base, &shipped).await;
            assert_eq!(r["go"], format!("/deliveries/{shipped_delivery}"), "{r}");
            // ... with two, lists both.
            let r = search(&c, &base, &paid).await;
            assert_eq!(r["go"], Value::Null, "{r}");
            let mut ids = hit_ids(&r);
            ids.sort();
            let mut want: Vec<String> = paid_deliveries.iter().map(|d| d["id"].as_str().unwrap().to_owned()).collect();
            want.sort();
            assert_eq!(ids, want);
            // An idempotency key: exactly as sent.
            let r = search(&c, &base, "Ship-7").await;
            assert_eq!(r["go"], format!("/deliveries/{shipped_delivery}"), "{r}");
            let r = search(&c, &base, "order-42").await;
            assert_eq!(hit_ids(&r).len(), 2, "{r}");
            // A destination ID, a part of a URL or a description (any case).
            let r = search(&c, &base, &beta).await;
            assert_eq!(r["go"], format!("/destinations/{beta}"), "{r}");
            let r = search(&c, &base, "ALPHA-ord").await;
            assert_eq!(r["go"], format!("/destinations/{alpha}"), "{r}");
            let r = search(&c, &base, "warehouse").await;
            assert_eq!(r["go"], format!("/destinations/{beta}"), "{r}");
            let r = search(&c, &base, "127.0.0.1").await;
            assert_eq!(hit_ids(&r).len(), 2, "{r}");
            assert_eq!(r["go"], Value::Null);
            // Nothing, and a `%` that is a character, not a wildcard.
            assert!(hit_ids(&search(&c, &base, "no-such-thing").await).is_empty());
            assert!(hit_ids(&search(&c, &base, "%%").await).is_empty());
        }
        // The webhook-id the receiver got is the event's ID, and finds its deliveries.
        let got = receiver.wait_for(3).await;
        let c = session(&base, "support@example.com").await;
        let mut webhook_ids: Vec<String> = got.iter().map(|r| r.header("webhook-id")).collect();
        webhook_ids.sort();
        webhook_ids.dedup();
        let mut events = vec![paid.clone(), shipped.clone()];
        events.sort();
        assert_eq!(webhook_ids, events);
        for w in &webhook_ids {
            let r = search(&c, &base, w).await;
            assert!(!hit_ids(&r).is_empty(), "{w}: {r}");
        }

        // Without JavaScript: one match is a redirect, several a page listing them.
        let resp = c
            .get(format!("{base}/search?q={to_alpha}"))
            .header("accept", "text/html")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 302);
        assert_eq!(resp.headers()["location"], format!("/deliveries/{to_alpha}"));
        let resp = c
            .get(format!("{base}/search?q=order-42"))
            .header("accept", "text/html")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let html = resp.text().await.unwrap();
        for d in &paid_deliveries {
            assert!(html.contains(d["id"].as_str().unwrap()), "the page lists {}", d["id"]);
        }
        assert!(html.contains("an idempotency key"), "{html}");
        // Every page has the box.
        let html = c.get(format!("{base}/deliveries")).send().await.unwrap().text().await.unwrap();
        assert!(html.contains(r#"action="/search""#) && html.contains(r#"name="q""#));

        // Signed out: refused.
        let stranger = server::testkit::browser_like_client();
        let (status, _) = call(&stranger, &base, "search", &[("q", "order-42")]).await;
        assert!(status >= 400);
        app.stop().await;
    }
}
