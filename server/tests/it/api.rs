//! REST API errors and isolation: every failure is JSON `{"code","message"}` with the right status.

use serde_json::json;

use crate::on_both_backends;
use server::testkit::spawn_app;

on_both_backends! {
    async fn bad_requests_get_clear_json_errors(db) {
        let app = spawn_app(&db).await.with_space().await;
        let key = app.api_key.clone().unwrap();
        let client = reqwest::Client::new();
        let send = |path: &str, ct: &str, body: Vec<u8>| {
            client.post(app.api(path)).bearer_auth(&key).header("content-type", ct.to_owned()).body(body).send()
        };
        let cases: Vec<(reqwest::Response, u16, &str)> = vec![
            (send("/events", "application/json", b"{not json".to_vec()).await.unwrap(), 400, "malformed_json"),
            (send("/events", "text/plain", b"{}".to_vec()).await.unwrap(), 415, "unsupported_media_type"),
            (send("/events", "application/json", br#"{"type":"a","payload":{},"extra":1}"#.to_vec()).await.unwrap(), 422, "invalid_body"),
            (send("/events", "application/json", br#"{"type":"bad type!","payload":{}}"#.to_vec()).await.unwrap(), 422, "invalid_event_type"),
            (send("/events", "application/json", vec![b' '; 1024 * 1024 + 4096]).await.unwrap(), 413, "body_too_large"),
            (send("/destinations", "application/json", br#"{"url":"ftp://x"}"#.to_vec()).await.unwrap(), 422, "invalid_url"),
            (send("/destinations", "application/json", br#"{"url":"https://x.example","maxAttempts":21}"#.to_vec()).await.unwrap(), 422, "invalid_retry_policy"),
            (send("/destinations", "application/json", br#"{"url":"https://x.example","timeoutSeconds":0}"#.to_vec()).await.unwrap(), 422, "invalid_timeout"),
        ];
        for (resp, status, code) in cases {
            assert_eq!(resp.status().as_u16(), status, "{code}");
            let body: serde_json::Value = resp.json().await.unwrap();
            assert_eq!(body["code"], code, "{body}");
            assert!(!body["message"].as_str().unwrap().is_empty());
        }
        for path in ["/deliveries/dlv_nope", "/deliveries/not-an-id", "/events/evt_01jzzzzzzzzzzzzzzzzzzzzzzz", "/destinations/dst_x"] {
            let (status, body) = app.get(path).await;
            assert_eq!(status, 404, "{path}");
            assert_eq!(body["code"], "not_found");
        }
        // serde would read a struct from an array; the API takes objects only.
        let (status, body) = app.post("/channels", json!(["general"])).await;
        assert_eq!((status, body["code"].as_str()), (422, Some("invalid_body")), "{body}");
        let (status, body) = app.post("/deliveries/resend-failed", json!([null])).await;
        assert_eq!((status, body["code"].as_str()), (422, Some("invalid_body")), "{body}");
        let (status, body) = app.post("/deliveries/resend-failed", json!(null)).await;
        assert_eq!((status, body), (200, json!({"resent": 0, "remaining": 0})), "no body, null or {{}}: the whole project");
        // A method a path does not take: 405 with `Allow`, in JSON like every error.
        let resp = client.put(app.api("/destinations")).bearer_auth(&key).send().await.unwrap();
        assert_eq!(resp.status(), 405);
        let allow = resp.headers()["allow"].to_str().unwrap().to_owned();
        assert!(allow.contains("GET") && allow.contains("POST"), "{allow}");
        let body: serde_json::Value = resp.json().await.unwrap();
        assert_eq!(body["code"], "method_not_allowed", "{body}");
        let resp = client.get(app.url("/hooks/iwh_x/token")).send().await.unwrap();
        assert_eq!(resp.status(), 405);
        assert_eq!(resp.json::<serde_json::Value>().await.unwrap()["code"], "method_not_allowed");

        let anon = client.get(app.api("/deliveries")).send().await.unwrap();
        assert_eq!(anon.status(), 401);
        assert_eq!(anon.json::<serde_json::Value>().await.unwrap()["code"], "unauthorized");
        let wrong = client.get(app.api("/deliveries")).bearer_auth("pfk_wrong").send().await.unwrap();
        assert_eq!(wrong.status(), 401);
        app.stop().await;
    }
}

on_both_backends! {
    async fn a_key_of_one_space_sees_and_touches_nothing_of_another(db) {
        let a = spawn_app(&db).await.with_space().await;
        let dst = a.destination(json!({"url": "https://a.example/hook"})).await;
        let event = a.publish("x", json!({})).await;
        let b = server::ops::tenants::create_space(db.storage.as_ref(), "B", server::domain::Plan::Free).await.unwrap();
        let client = reqwest::Client::new();
        let dst_id = dst["id"].as_str().unwrap();
        let paths = [
            format!("/v1/projects/{}/destinations/{dst_id}", a.space.as_ref().unwrap()),
            format!("/v1/projects/{}/destinations/{dst_id}", b.space.id),
            format!("/v1/projects/{}/events/{event}", a.space.as_ref().unwrap()),
            format!("/v1/projects/{}/events/{event}", b.space.id),
            format!("/v1/projects/{}/deliveries", a.space.as_ref().unwrap()),
        ];
        for p in &paths {
            let resp = client.get(a.url(p)).bearer_auth(&b.api_key).send().await.unwrap();
            assert_eq!(resp.status(), 404, "{p}");
        }
        let resp = client.post(a.url(&format!("/v1/projects/{}/destinations/{dst_id}/disable", b.space.id))).bearer_auth(&b.api_key).send().await.unwrap();
        assert_eq!(resp.status(), 404);
        let (_, still) = a.get(&format!("/destinations/{dst_id}")).await;
        assert_eq!(still["status"], "active");
        a.stop().await;
    }
}

on_both_backends! {
    async fn a_publish_is_refused_in_the_order_of_every_route_and_a_revoked_key_at_once(db) {
        // A publish looks its key up with what it reads anyway; the answers stay those of
        // every other route: 401, then the body's 400/415/422, then 404, then the type's 422.
        let a = spawn_app(&db).await.with_space().await;
        let key = a.api_key.clone().unwrap();
        let project = a.space.clone().unwrap();
        let b = server::ops::tenants::create_space(db.storage.as_ref(), "B", server::domain::Plan::Free).await.unwrap();
        let client = reqwest::Client::new();
        let publish = |project: String, key: Option<String>, body: &'static [u8]| {
            let mut request = client
                .post(a.url(&format!("/v1/projects/{project}/events")))
                .header("content-type", "application/json")
                .body(body);
            if let Some(key) = key {
                request = request.bearer_auth(key);
            }
            async move {
                let resp = request.send().await.unwrap();
                let status = resp.status().as_u16();
                let body: serde_json::Value = resp.json().await.unwrap();
                (status, body["code"].as_str().unwrap_or_default().to_owned())
            }
        };
        let good: &[u8] = br#"{"type":"order.paid","payload":{}}"#;
        let cases = [
            (publish(project.clone(), None, b"{not json").await, (401, "unauthorized")),
            (publish(project.clone(), Some("pfk_wrong".into()), good).await, (401, "unauthorized")),
            (publish(project.clone(), Some("pfk_wrong".into()), br#"{"type":"bad type!","payload":{}}"#).await, (401, "unauthorized")),
            (publish(project.clone(), Some(b.api_key.clone()), b"{not json").await, (400, "malformed_json")),
            (publish(project.clone(), Some(b.api_key.clone()), good).await, (404, "not_found")),
            (publish(project.clone(), Some(b.api_key.clone()), br#"{"type":"bad type!","payload":{}}"#).await, (404, "not_found")),
            (publish("not-a-project".into(), Some(key.clone()), good).await, (404, "not_found")),
            (publish(project.clone(), Some(key.clone()), br#"{"type":"partyflow.test","payload":{}}"#).await, (422, "reserved_event_type")),
            (publish(project.clone(), Some(key.clone()), br#"{"type":"a","payload":{},"idempotencyKey":""}"#).await, (422, "invalid_idempotency_key")),
            (publish(project.clone(), Some(key.clone()), good).await, (202, "")),
            (publish(b.space.id.to_string(), Some(b.api_key.clone()), good).await, (202, "")),
        ];
        for (i, ((status, code), (want_status, want_code))) in cases.into_iter().enumerate() {
            assert_eq!((status, code.as_str()), (want_status, want_code), "case {i}");
        }
        // A revoked key publishes nothing from the next request on.
        let (_, second) = a.post("/api-keys", json!({"name": "second"})).await;
        let second_key = second["key"].as_str().unwrap().to_owned();
        assert_eq!(publish(project.clone(), Some(second_key.clone()), good).await.0, 202);
        let (status, _) = a.post(&format!("/api-keys/{}/revoke", second["id"].as_str().unwrap()), json!(null)).await;
        assert_eq!(status, 204);
        assert_eq!(publish(project.clone(), Some(second_key), good).await, (401, "unauthorized".to_owned()));
        assert_eq!(a.get("/events").await.1["data"].as_array().unwrap().len(), 2);
        a.stop().await;
    }
}

on_both_backends! {
    /// A REST publish's checks are kept in memory (docs §7 "The publish's checks in
    /// memory"), and every change they depend on reaches the next publish all the same: a
    /// filter added, a destination disabled, a schema added or removed, the key revoked.
    async fn a_publishs_checks_kept_in_memory_never_outlive_a_change(db) {
        let app = spawn_app(&db).await.with_space().await;
        let rx = server::testkit::Receiver::start().await;
        let d = app.destination(json!({"url": rx.url("/hook"), "eventTypes": ["order.paid"]})).await;
        let id = d["id"].as_str().unwrap().to_owned();
        let publish = |payload: serde_json::Value| app.post("/events", json!({"type": "order.paid", "payload": payload}));
        for _ in 0..2 {
            let (status, first) = publish(json!({"total": 5})).await;
            assert_eq!((status, first["deliveries"].as_i64()), (202, Some(1)), "{first}");
        }
        // The second read came from memory.
        let key = server::auth::hash_token(app.api_key.as_ref().unwrap());
        let space: server::domain::SpaceId = app.space.as_ref().unwrap().parse().unwrap();
        let (_, kept) = app.storage.publish_checks_cached(&key, space, "order.paid").await.unwrap();
        assert!(kept.subscribers.as_ref().is_some_and(|s| s.cached()), "from memory");

        // A filter added: the next publish is filtered.
        let p = crate::incoming::Project::of(&app);
        let (status, _) = p.call(reqwest::Method::PATCH, &p.api(&format!("/destinations/{id}")), Some(json!({"filter": ".total > 100"}))).await;
        assert_eq!(status, 200);
        let (_, small) = publish(json!({"total": 5})).await;
        assert_eq!(small["deliveries"], 0, "{small}");
        let (status, _) = p.call(reqwest::Method::PATCH, &p.api(&format!("/destinations/{id}")), Some(json!({"filter": null}))).await;
        assert_eq!(status, 200);
        assert_eq!(publish(json!({"total": 5})).await.1["deliveries"], 1);

        // Disabled: skipped; enabled again: delivered.
        assert_eq!(app.post(&format!("/destinations/{id}/disable"), json!(null)).await.0, 200);
        assert_eq!(publish(json!({"total": 5})).await.1["deliveries"], 0);
        assert_eq!(app.post(&format!("/destinations/{id}/enable"), json!(null)).await.0, 200);
        assert_eq!(publish(json!({"total": 5})).await.1["deliveries"], 1);

        // A schema added: refused; removed: accepted again.
        let schema = json!({"type": "object", "required": ["total"], "properties": {"total": {"type": "number"}}});
        assert_eq!(app.post("/event-types", json!({"name": "order.paid", "schema": schema})).await.0, 201);
        let (status, refused) = publish(json!({"total": "five"})).await;
        assert_eq!((status, refused["code"].as_str()), (422, Some("schema_violation")), "{refused}");
        assert_eq!(publish(json!({"total": 5})).await.0, 202);
        let (status, _) = p.call(reqwest::Method::PATCH, &p.api("/event-types/order.paid"), Some(json!({"schema": null}))).await;
        assert_eq!(status, 200);
        assert_eq!(publish(json!({"total": "five"})).await.0, 202, "no schema any more");

        // The key revoked (by another key): the next publish is refused.
        let (_, other) = app.post("/api-keys", json!({"name": "other"})).await;
        let me = app.get("/api-keys").await.1["data"].as_array().unwrap().iter()
            .find(|k| k["name"] != "other").unwrap()["id"].as_str().unwrap().to_owned();
        let client = reqwest::Client::new();
        let revoked = client.post(app.url(&format!("/v1/projects/{}/api-keys/{me}/revoke", app.space.as_ref().unwrap())))
            .bearer_auth(other["key"].as_str().unwrap()).send().await.unwrap();
        assert_eq!(revoked.status().as_u16(), 204);
        let (status, refused) = publish(json!({"total": 5})).await;
        assert_eq!((status, refused["code"].as_str()), (401, Some("unauthorized")), "{refused}");
        app.stop().await;
    }
}

on_both_backends! {
    async fn destinations_can_be_read_changed_listed_and_deleted(db) {
        let app = spawn_app(&db).await.with_space().await;
        let dst = app.destination(json!({
            "url": "https://a.example/hook",
            "eventTypes": ["order.paid"],
            "rateLimit": {"count": 50, "period": "minute"},
            "retryPolicy": {"preset": "standard"},
        })).await;
        let id = dst["id"].as_str().unwrap();
        assert_eq!(dst["maxAttempts"], 6);
        assert_eq!(dst["timeoutSeconds"], 30);
        assert_eq!(dst["retryPolicy"]["preset"], "standard");
        assert_eq!(dst["retryPolicy"]["initialMs"], 30000);
        assert_eq!(dst["rateLimit"], json!({"count": 50, "period": "minute"}));
        let (_, read) = app.get(&format!("/destinations/{id}")).await;
        assert!(read.get("secret").is_none(), "the secret is shown only on create and rotate");

        let resp = reqwest::Client::new()
            .patch(app.api(&format!("/destinations/{id}")))
            .bearer_auth(app.api_key.as_ref().unwrap())
            .json(&json!({"rateLimit": null, "maxAttempts": 12, "description": "billing"}))
            .send().await.unwrap();
        assert_eq!(resp.status(), 200);
        let changed: serde_json::Value = resp.json().await.unwrap();
        assert!(changed["rateLimit"].is_null());
        assert_eq!(changed["maxAttempts"], 12);
        assert_eq!(changed["description"], "billing");
        assert_eq!(changed["eventTypes"], json!(["order.paid"]), "absent fields stay");

        let (_, list) = app.get("/destinations").await;
        assert_eq!(list["data"].as_array().unwrap().len(), 1);
        let del = reqwest::Client::new()
            .delete(app.api(&format!("/destinations/{id}")))
            .bearer_auth(app.api_key.as_ref().unwrap())
            .send().await.unwrap();
        assert_eq!(del.status(), 204);
        assert_eq!(app.get(&format!("/destinations/{id}")).await.0, 404);
        app.stop().await;
    }
}

on_both_backends! {
    async fn every_resource_of_one_project_is_not_found_with_another_projects_key(db) {
        let app = spawn_app(&db).await.with_space().await;
        let a = crate::incoming::Project::of(&app);
        let b = crate::incoming::Project::create(&app, server::domain::Plan::Free).await;
        let rx = server::testkit::Receiver::start().await;
        rx.set_default(server::testkit::Reply::status(400));
        let id = |v: &serde_json::Value| v["id"].as_str().unwrap().to_owned();

        let dst = id(&app.destination(json!({"url": rx.url("/a")})).await);
        let event = app.publish("x", json!({})).await;
        let delivery = id(&app.wait_for_delivery(&event, "failed").await);
        let channel = a.channel("general").await;
        let (_, message) = a.post(&format!("/channels/{channel}/messages"), json!({"text": "hi"})).await;
        let hook = id(&a.webhook(&channel, json!({})).await);
        let (_, bot) = a.post("/bots", json!({"name": "deploy"})).await;
        let bot = id(&bot);
        let (_, key) = a.post("/api-keys", json!({"name": "ci"})).await;
        let key = id(&key);
        let note = server::domain::Notification {
            id: server::domain::NotificationId::new(),
            space_id: Some(a.id.parse().unwrap()),
            kind: "destination.failing".into(),
            subject_kind: None,
            subject_id: None,
            message: "about a".into(),
            created_at: server::clock::now_ms(),
            read_at: None,
        };
        app.storage.create_notification(&note).await.unwrap();
        let note = note.id.to_string();

        use reqwest::Method as M;
        let calls: Vec<(M, String, Option<serde_json::Value>)> = vec![
            (M::GET, format!("/destinations/{dst}"), None),
            (M::PATCH, format!("/destinations/{dst}"), Some(json!({"description": "mine now"}))),
            (M::DELETE, format!("/destinations/{dst}"), None),
            (M::POST, format!("/destinations/{dst}/disable"), None),
            (M::POST, format!("/destinations/{dst}/enable"), None),
            (M::POST, format!("/destinations/{dst}/rotate-secret"), None),
            (M::GET, format!("/events/{event}"), None),
            (M::GET, format!("/deliveries/{delivery}"), None),
            (M::GET, format!("/deliveries/{delivery}/attempts"), None),
            (M::POST, format!("/deliveries/{delivery}/resend"), None),
            (M::POST, format!("/deliveries/{delivery}/cancel"), None),
            (M::POST, "/deliveries/resend-failed".into(), Some(json!({"destinationId": dst}))),
            (M::GET, format!("/channels/{channel}"), None),
            (M::PATCH, format!("/channels/{channel}"), Some(json!({"name": "taken over"}))),
            (M::DELETE, format!("/channels/{channel}"), None),
            (M::GET, format!("/channels/{channel}/messages"), None),
            (M::POST, format!("/channels/{channel}/messages"), Some(json!({"text": "hijack"}))),
            (M::GET, format!("/incoming-webhooks/{hook}"), None),
            (M::DELETE, format!("/incoming-webhooks/{hook}"), None),
            (M::POST, format!("/incoming-webhooks/{hook}/disable"), None),
            (M::POST, format!("/incoming-webhooks/{hook}/enable"), None),
            (M::GET, format!("/bots/{bot}"), None),
            (M::POST, format!("/bots/{bot}/revoke"), None),
            (M::POST, format!("/api-keys/{key}/revoke"), None),
            (M::POST, format!("/notifications/{note}/read"), None),
        ];
        for (method, path, body) in &calls {
            // B's key on B's project path with A's IDs, and on A's project path.
            for url in [b.api(path), a.api(path)] {
                let (status, json) = b.call(method.clone(), &url, body.clone()).await;
                assert_eq!(status, 404, "{method} {url}: {json}");
                assert_eq!(json["code"], "not_found", "{method} {url}: {json}");
            }
        }
        // A's listings with B's key, and B's own listings, show none of A's rows.
        for listing in ["/destinations", "/events", "/deliveries", "/channels", "/incoming-webhooks", "/bots", "/api-keys", "/notifications"] {
            assert_eq!(b.call(M::GET, &a.api(listing), None).await.0, 404, "{listing}");
            let (status, page) = b.get(listing).await;
            assert_eq!(status, 200, "{listing}: {page}");
            let expected = if listing == "/api-keys" { 1 } else { 0 };
            assert_eq!(page["data"].as_array().unwrap().len(), expected, "{listing}: {page}");
        }
        // Bulk calls report A's deliveries as not found; an incoming webhook cannot use A's channel.
        for action in ["resend", "cancel"] {
            let (status, answer) = b.post(&format!("/deliveries/{action}"), json!({"deliveryIds": [delivery]})).await;
            assert_eq!(status, 200, "{answer}");
            assert_eq!(answer["results"][0]["result"], "not_found", "{answer}");
        }
        let (status, answer) = b.post("/deliveries/resend-failed", json!({})).await;
        assert_eq!((status, answer), (200, json!({"resent": 0, "remaining": 0})));
        let (status, json) = b.post("/incoming-webhooks", json!({"channelId": channel, "name": "x"})).await;
        assert_eq!((status, json["code"].as_str()), (422, Some("unknown_channel")), "{json}");

        // Nothing of A's changed.
        let (_, d) = a.get(&format!("/destinations/{dst}")).await;
        assert_eq!((d["status"].as_str(), d["description"].as_str()), (Some("active"), Some("")), "{d}");
        let (_, d) = a.get(&format!("/deliveries/{delivery}")).await;
        assert!(d["resentAs"].is_null(), "{d}");
        assert_eq!(a.get(&format!("/channels/{channel}/messages")).await.1["data"].as_array().unwrap().len(), 1, "{message}");
        assert_eq!(a.get(&format!("/incoming-webhooks/{hook}")).await.1["status"], "active");
        assert!(a.get(&format!("/bots/{bot}")).await.1["revokedAt"].is_null());
        assert_eq!(a.get("/api-keys").await.1["data"].as_array().unwrap().len(), 2);
        assert!(a.get("/notifications").await.1["data"][0]["readAt"].is_null());
        app.stop().await;
    }
}

on_both_backends! {
    async fn a_storage_failure_answers_500_with_a_request_id_and_no_database_text(db) {
        let app = spawn_app(&db).await.with_space().await;
        crate::helpers::refuse_inserts(&db.url, "channels", "channels_name_secret_check").await;
        let resp = reqwest::Client::new()
            .post(app.api("/channels"))
            .bearer_auth(app.api_key.as_ref().unwrap())
            .json(&json!({"name": "general"}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 500);
        let header = resp.headers()["x-request-id"].to_str().unwrap().to_owned();
        let text = resp.text().await.unwrap();
        let body: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(body["code"], "internal", "{body}");
        assert_eq!(body["requestId"], header.as_str(), "{body}");
        assert!(header.starts_with("req_"), "{header}");
        assert!(!body["message"].as_str().unwrap().is_empty());
        for leak in ["channels", "constraint", "CHECK", "secret_check", "relation", "INSERT", "database"] {
            assert!(!text.contains(leak), "{leak:?} leaked: {text}");
        }
        assert_eq!(body.as_object().unwrap().len(), 3, "code, message, requestId: {body}");

        // The database works again: so does the API.
        crate::helpers::allow_inserts(&db.url, "channels").await;
        let (status, _) = app.post("/channels", json!({"name": "general"})).await;
        assert_eq!(status, 201);
        app.stop().await;
    }
}

on_both_backends! {
    async fn every_answer_carries_a_request_id_of_the_servers_own_never_the_clients(db) {
        let app = spawn_app(&db).await.with_space().await;
        let client = reqwest::Client::new();
        let mut seen = std::collections::HashSet::new();
        let answers = [
            client.get(app.url("/healthz")).header("x-request-id", "forged-id").send().await.unwrap(),
            client.get(app.api("/events")).bearer_auth(app.api_key.as_ref().unwrap())
                .header("x-request-id", "forged-id").send().await.unwrap(),
            client.get(app.api("/events/evt_nope")).header("x-request-id", "forged-id").send().await.unwrap(),
            client.post(app.url("/hooks/iwh_nope/pfh_nope")).header("x-request-id", "forged-id").send().await.unwrap(),
            client.get(app.url("/login")).header("x-request-id", "forged-id").send().await.unwrap(),
        ];
        for resp in answers {
            let ids: Vec<_> = resp.headers().get_all("x-request-id").iter().collect();
            assert_eq!(ids.len(), 1, "{:?}", resp.headers());
            let id = ids[0].to_str().unwrap().to_owned();
            assert!(id.starts_with("req_") && id != "forged-id", "{id}");
            assert!(seen.insert(id), "a new ID per request");
            let body = resp.text().await.unwrap();
            assert!(!body.contains("forged-id"), "{body}");
        }
        app.stop().await;
    }
}
