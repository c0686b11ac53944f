//! Destination names (issue 16 item 4): optional, defaulting to the URL's host (with a
//! port that is not the default), changed and dropped through the API, refused when
//! they break the names rule, and used in the notifications that mention a destination.

use serde_json::json;

use crate::on_both_backends;
use server::testkit::{eventually, spawn_app_with_config, test_config, Receiver, Reply};

on_both_backends! {
    async fn a_destination_goes_by_its_own_name_or_else_its_urls_host(db) {
        let app = server::testkit::spawn_app(&db).await.with_space().await;

        let by_host = app.destination(json!({"url": "https://shop.example/hooks"})).await;
        assert_eq!(by_host["name"], "shop.example", "{by_host}");
        let with_port = app.destination(json!({"url": "http://hooks.example:8080/in"})).await;
        assert_eq!(with_port["name"], "hooks.example:8080", "{with_port}");
        let named = app.destination(json!({"url": "https://shop.example/orders", "name": "  Orders  "})).await;
        assert_eq!(named["name"], "Orders", "kept trimmed: {named}");

        let id = named["id"].as_str().unwrap();
        let (status, read) = app.get(&format!("/destinations/{id}")).await;
        assert_eq!((status, read["name"].as_str()), (200, Some("Orders")));
        let (_, listed) = app.get("/destinations").await;
        let names: Vec<&str> = listed["data"].as_array().unwrap().iter().map(|d| d["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["Orders", "hooks.example:8080", "shop.example"], "newest first");

        let client = reqwest::Client::new();
        let patch = |id: String, body: serde_json::Value| {
            let req = client
                .patch(app.api(&format!("/destinations/{id}")))
                .bearer_auth(app.api_key.as_deref().unwrap())
                .json(&body);
            async move {
                let resp = req.send().await.unwrap();
                (resp.status().as_u16(), resp.json::<serde_json::Value>().await.unwrap())
            }
        };
        let (status, renamed) = patch(id.to_owned(), json!({"name": "Shop orders"})).await;
        assert_eq!((status, renamed["name"].as_str()), (200, Some("Shop orders")), "{renamed}");
        // Another change leaves the name alone; a new URL does not rename a named one.
        let (_, moved) = patch(id.to_owned(), json!({"url": "https://new.example/orders"})).await;
        assert_eq!(moved["name"], "Shop orders", "{moved}");
        // `null` drops its own name: it goes by its (new) URL's host again.
        let (status, dropped) = patch(id.to_owned(), json!({"name": null})).await;
        assert_eq!((status, dropped["name"].as_str()), (200, Some("new.example")), "{dropped}");
        let unnamed = by_host["id"].as_str().unwrap().to_owned();
        let (_, followed) = patch(unnamed, json!({"url": "https://elsewhere.example/h"})).await;
        assert_eq!(followed["name"], "elsewhere.example", "an unnamed one follows its URL: {followed}");

        let long = "x".repeat(101);
        for bad in ["", "   ", "Orders\n", "a\u{7}b", long.as_str()] {
            let (status, body) = app.post("/destinations", json!({"url": "https://shop.example/x", "name": bad})).await;
            assert_eq!((status, body["code"].as_str()), (422, Some("invalid_name")), "{bad:?}: {body}");
            assert!(body["message"].as_str().unwrap().contains("a destination name needs 1 to 100 characters"), "{body}");
            let (status, body) = patch(id.to_owned(), json!({"name": bad})).await;
            assert_eq!((status, body["code"].as_str()), (422, Some("invalid_name")), "{bad:?}: {body}");
        }
        let (_, unchanged) = app.get(&format!("/destinations/{id}")).await;
        assert_eq!(unchanged["name"], "new.example", "a refused name changes nothing");
        app.stop().await;
    }
}

on_both_backends! {
    async fn the_notifications_of_a_failing_destination_name_it_with_its_url_beside(db) {
        let mut config = test_config(&db.url);
        config.dispatch.auto_disable_after = 3;
        config.dispatch.auto_disable_warn_at = vec![2];
        let app = spawn_app_with_config(&db, config).await.with_space().await;
        let failing = Receiver::start().await;
        failing.set_default(Reply::status(400)); // a 400 is not retried: a dead letter each
        let url = failing.url("/hook");
        let dst = app
            .destination(json!({"url": url, "name": "Orders", "eventTypes": ["order.paid"]}))
            .await;
        let dst_id = dst["id"].as_str().unwrap().to_owned();
        for i in 0..3 {
            app.publish("order.paid", json!({"i": i})).await;
        }
        let notes = eventually(30, || async {
            let (_, notes) = app.get("/notifications").await;
            let list = notes["data"].as_array().cloned().unwrap_or_default();
            (list.len() == 2).then_some(list)
        })
        .await;
        let message = |kind: &str| {
            notes
                .iter()
                .find(|n| n["kind"] == kind)
                .unwrap_or_else(|| panic!("a {kind} notification: {notes:?}"))["message"]
                .as_str()
                .unwrap()
                .to_owned()
        };
        assert_eq!(
            message("destination.failing"),
            format!("Destination \u{201c}Orders\u{201d} ({url}) has dead-lettered 2 deliveries in a row; it will be disabled at 3.")
        );
        let disabled = message("destination.disabled");
        assert!(
            disabled.starts_with(&format!("Destination \u{201c}Orders\u{201d} ({url}) was disabled after 3 dead-lettered deliveries in a row.")),
            "{disabled}"
        );
        assert!(notes.iter().all(|n| n["subjectId"] == dst_id.as_str()), "{notes:?}");
        app.stop().await;
    }
}
