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
