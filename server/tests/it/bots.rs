//! Bots and channels end to end (docs §4, §5): managing bots, the Bot REST API with
//! its per-channel rate shared by all bots, channels and their messages.

use serde_json::{json, Value};
use server::domain::Plan;

use crate::incoming::{hook, measure_burst, Answer, Project, WINDOW};
use crate::on_both_backends;
use server::testkit::{spawn_app, Receiver};

/// Creates a bot and returns its JSON (with the token).
async fn bot(p: &Project, name: &str) -> Value {
    let (status, json) = p.post("/bots", json!({"name": name})).await;
    assert_eq!(status, 201, "{json}");
    json
}

/// `POST /v1/bot/channels/{channel}/messages` with `Authorization: <authorization>`, not yet sent.
fn bot_request(
    client: &reqwest::Client,
    p: &Project,
    channel: &str,
    authorization: &str,
    body: &str,
) -> reqwest::RequestBuilder {
    client
        .post(p.url(&format!("/v1/bot/channels/{channel}/messages")))
        .header("authorization", authorization)
        .header("content-type", "application/json")
        .body(body.to_owned())
}

async fn bot_post(p: &Project, channel: &str, token: &str, body: Value) -> Answer {
    let req = bot_request(
        &reqwest::Client::new(),
        p,
        channel,
        &format!("Bot {token}"),
        &body.to_string(),
    );
    Answer::of(req.send().await.unwrap()).await
}

on_both_backends! {
    async fn bots_share_one_channels_rate_and_another_channel_has_its_own(db) {
        // The real default: 10 messages per second per channel, all bots together.
        let app = spawn_app(&db).await;
        let p = Project::create(&app, Plan::Free).await;
        let bots = [bot(&p, "deploy").await, bot(&p, "alerts").await];
        let tokens: Vec<String> = bots.iter().map(|b| b["token"].as_str().unwrap().to_owned()).collect();
        let client = reqwest::Client::new();
        let limit = 10;
        let mut n = 0;
        let (channels, accepted) = measure_burst(&client, &app.url("/healthz"), limit, || {
            n += 1;
            let (p, client, tokens) = (&p, &client, &tokens);
            async move {
                // Fresh channels per try: a limiter that has not been used yet.
                let a = p.channel(&format!("a{n}")).await;
                let b = p.channel(&format!("b{n}")).await;
                // Into each channel 3× the limit, half from each bot, all at once.
                let group = |channel: &str| -> Vec<reqwest::RequestBuilder> {
                    (0..3 * limit)
                        .map(|i| {
                            let token = &tokens[i % 2];
                            bot_request(client, p, channel, &format!("Bot {token}"), &json!({"text": format!("m{i}")}).to_string())
                        })
                        .collect()
                };
                let groups = vec![group(&a), group(&b)];
                ((a, b), groups)
            }
        })
        .await;
        let (a, b) = channels;
        for (channel, accepted) in [&a, &b].into_iter().zip(accepted) {
            let stored = p.messages(channel).await;
            assert_eq!(stored.len(), accepted, "only accepted messages are stored");
            let by: std::collections::HashSet<&str> = stored.iter().map(|m| m["sourceId"].as_str().unwrap()).collect();
            assert!(by.iter().all(|id| id.starts_with("bot_")));
        }
        // After the Retry-After (1 s), accepted again.
        tokio::time::sleep(WINDOW).await;
        let again = bot_post(&p, &a, &tokens[0], json!({"text": "again"})).await;
        assert_eq!(again.status, 201, "{again:?}");
        app.stop().await;
    }
}

on_both_backends! {
    async fn a_missing_wrong_or_revoked_bot_token_gets_401(db) {
        let app = spawn_app(&db).await;
        let p = Project::create(&app, Plan::Free).await;
        let channel = p.channel("c").await;
        let b = bot(&p, "deploy").await;
        let token = b["token"].as_str().unwrap();
        let body = json!({"text": "hi"}).to_string();
        let client = reqwest::Client::new();
        let refused = [
            format!("Bearer {token}"),
            format!("Bot pfb_{}", "x".repeat(40)),
            "Bot ".to_owned(),
            token.to_owned(),
            format!("Bearer {}", p.key),
        ];
        for authorization in &refused {
            let a = Answer::of(bot_request(&client, &p, &channel, authorization, &body).send().await.unwrap()).await;
            assert_eq!((a.status, a.code()), (401, "invalid_bot_token"), "{authorization:?}: {a:?}");
        }
        let none = Answer::of(
            client.post(p.url(&format!("/v1/bot/channels/{channel}/messages"))).json(&json!({"text": "hi"})).send().await.unwrap(),
        )
        .await;
        assert_eq!((none.status, none.code()), (401, "invalid_bot_token"));
        // The token is looked up with the channel and what the message reads, in one
        // read; a body refused before it still answers the token's 401 first, and a good
        // token's broken body is refused before an unknown channel.
        let broken = Answer::of(bot_request(&client, &p, &channel, &format!("Bot pfb_{}", "x".repeat(40)), "{").send().await.unwrap()).await;
        assert_eq!((broken.status, broken.code()), (401, "invalid_bot_token"), "{broken:?}");
        let nowhere = Answer::of(bot_request(&client, &p, "nope", &format!("Bot {token}"), "{}").send().await.unwrap()).await;
        assert_eq!((nowhere.status, nowhere.code()), (422, "invalid_body"), "{nowhere:?}");

        assert_eq!(bot_post(&p, &channel, token, json!({"text": "hi"})).await.status, 201);
        let (status, revoked) = p.post(&format!("/bots/{}/revoke", b["id"].as_str().unwrap()), json!({})).await;
        assert_eq!(status, 200, "{revoked}");
        assert!(revoked["revokedAt"].is_string());
        let a = bot_post(&p, &channel, token, json!({"text": "hi"})).await;
        assert_eq!((a.status, a.code()), (401, "invalid_bot_token"), "a revoked token: {a:?}");
        app.stop().await;
    }
}

on_both_backends! {
    async fn a_bot_posts_only_into_channels_of_its_own_space_and_bad_messages_get_422(db) {
        let app = spawn_app(&db).await;
        let p = Project::create(&app, Plan::Free).await;
        let other = Project::create(&app, Plan::Free).await;
        let ours = p.channel("ours").await;
        let theirs = other.channel("theirs").await;
        let token = bot(&p, "deploy").await["token"].as_str().unwrap().to_owned();
        for channel in [theirs.as_str(), "chn_01jzzzzzzzzzzzzzzzzzzzzzzz", "nope"] {
            let a = bot_post(&p, channel, &token, json!({"text": "hi"})).await;
            assert_eq!((a.status, a.code()), (404, "not_found"), "{channel}: {a:?}");
        }
        assert!(other.messages(&theirs).await.is_empty());
        for (body, code) in [
            (json!({"text": ""}), "empty_text"),
            (json!({"text": "x".repeat(40_001)}), "text_too_long"),
            (json!({"text": "x", "username": "me"}), "invalid_body"),
            (json!({}), "invalid_body"),
        ] {
            let a = bot_post(&p, &ours, &token, body).await;
            assert_eq!((a.status, a.code()), (422, code), "{a:?}");
        }
        let a = bot_post(&p, &ours, &token, json!({"text": "x".repeat(40_000)})).await;
        assert_eq!(a.status, 201, "exactly the longest text (limits.message_max_chars)");
        app.stop().await;
    }
}

on_both_backends! {
    async fn a_bot_message_reaches_a_subscribed_destination_as_message_created(db) {
        let app = spawn_app(&db).await.with_space().await;
        let rx = Receiver::start().await;
        app.destination(json!({"url": rx.url("/"), "eventTypes": ["message.created"]})).await;
        let p = Project::of(&app);
        let channel = p.channel("general").await;
        let b = bot(&p, "deploy").await;
        let posted = bot_post(&p, &channel, b["token"].as_str().unwrap(), json!({"text": "v1.2 is out"})).await;
        assert_eq!(posted.status, 201, "{posted:?}");
        assert_eq!(posted.json["sourceKind"], "bot");
        assert_eq!(posted.json["attachments"], json!([]));
        let got = rx.wait_for(1).await;
        let payload: Value = serde_json::from_str(&got[0].body).unwrap();
        assert_eq!(payload["id"], posted.json["id"]);
        assert_eq!(payload["text"], "v1.2 is out");
        assert_eq!(payload["channelId"], channel.as_str());
        assert_eq!(payload["spaceId"], p.id.as_str());
        assert_eq!(payload["sourceKind"], "bot");
        assert_eq!(payload["sourceId"], b["id"]);
        app.stop().await;
    }
}

on_both_backends! {
    async fn bots_are_created_listed_read_and_revoked_with_the_token_shown_once_and_other_spaces_get_404(db) {
        let app = spawn_app(&db).await;
        let p = Project::create(&app, Plan::Pro).await;
        let other = Project::create(&app, Plan::Pro).await;
        let first = bot(&p, "deploy").await;
        let id = first["id"].as_str().unwrap();
        assert!(id.starts_with("bot_"));
        assert!(first["token"].as_str().unwrap().starts_with("pfb_"));
        assert_eq!(first["name"], "deploy");
        assert!(first["revokedAt"].is_null());
        let second = bot(&p, "alerts").await;

        let (status, read) = p.get(&format!("/bots/{id}")).await;
        assert_eq!(status, 200);
        assert!(read.get("token").is_none(), "the token is shown once: {read}");
        let (_, page) = p.get("/bots?limit=1").await;
        assert_eq!(page["data"][0]["id"], second["id"], "newest first");
        assert!(page["data"][0].get("token").is_none());
        let (_, page2) = p.get(&format!("/bots?limit=1&cursor={}", page["nextCursor"].as_str().unwrap())).await;
        assert_eq!(page2["data"][0]["id"], id);

        let (status, json) = p.post("/bots", json!({"name": " "})).await;
        assert_eq!((status, json["code"].as_str()), (422, Some("invalid_name")));

        assert_eq!(other.get(&format!("/bots/{id}")).await.0, 404);
        assert_eq!(other.post(&format!("/bots/{id}/revoke"), json!({})).await.0, 404);
        assert_eq!(other.call(reqwest::Method::GET, &p.api("/bots"), None).await.0, 404);
        let (_, theirs) = other.get("/bots").await;
        assert!(theirs["data"].as_array().unwrap().is_empty());

        let (status, revoked) = p.post(&format!("/bots/{id}/revoke"), json!({})).await;
        assert_eq!(status, 200);
        let at = revoked["revokedAt"].clone();
        assert!(at.is_string());
        let (status, again) = p.post(&format!("/bots/{id}/revoke"), json!({})).await;
        assert_eq!((status, &again["revokedAt"]), (200, &at), "revoking twice answers the same");
        let (_, listed) = p.get("/bots").await;
        assert_eq!(listed["data"].as_array().unwrap().len(), 2, "a revoked bot stays listed");
        app.stop().await;
    }
}

on_both_backends! {
    async fn channels_are_created_listed_and_read_and_their_messages_page_newest_first(db) {
        let app = spawn_app(&db).await;
        let p = Project::create(&app, Plan::Free).await;
        let other = Project::create(&app, Plan::Free).await;
        let (status, c) = p.post("/channels", json!({"name": " general "})).await;
        assert_eq!(status, 201, "{c}");
        assert_eq!(c["name"], "general");
        let id = c["id"].as_str().unwrap().to_owned();
        assert!(id.starts_with("chn_"));
        let (status, dup) = p.post("/channels", json!({"name": "general"})).await;
        assert_eq!((status, dup["code"].as_str()), (409, Some("channel_name_taken")));
        let (status, bad) = p.post("/channels", json!({"name": ""})).await;
        assert_eq!((status, bad["code"].as_str()), (422, Some("invalid_name")));
        other.channel("general").await;

        let (status, read) = p.get(&format!("/channels/{id}")).await;
        assert_eq!((status, &read["name"]), (200, &json!("general")));
        let (_, list) = p.get("/channels").await;
        assert_eq!(list["data"].as_array().unwrap().len(), 1);
        assert_eq!(other.get(&format!("/channels/{id}")).await.0, 404);
        assert_eq!(other.get(&format!("/channels/{id}/messages")).await.0, 404);
        assert_eq!(other.post(&format!("/channels/{id}/messages"), json!({"text": "x"})).await.0, 404);

        // Posted with the API key: source `api`, the key's ID.
        for i in 0..5 {
            let (status, m) = p.post(&format!("/channels/{id}/messages"), json!({"text": format!("m{i}")})).await;
            assert_eq!(status, 201, "{m}");
            assert_eq!(m["sourceKind"], "api");
            assert!(m["sourceId"].as_str().unwrap().starts_with("key_"));
        }
        let (status, page) = p.get(&format!("/channels/{id}/messages?limit=2")).await;
        assert_eq!(status, 200);
        assert_eq!(page["data"].as_array().unwrap().len(), 2);
        let all = p.messages(&id).await;
        assert_eq!(all.len(), 5);
        let ids: Vec<&str> = all.iter().map(|m| m["id"].as_str().unwrap()).collect();
        let mut sorted = ids.clone();
        sorted.sort_by(|a, b| b.cmp(a));
        assert_eq!(ids, sorted, "newest first, no message twice across pages");
        assert_eq!(page["data"][0]["id"], all[0]["id"]);
        let (status, bad) = p.get(&format!("/channels/{id}/messages?cursor=nope")).await;
        assert_eq!((status, bad["code"].as_str()), (422, Some("invalid_cursor")));
        let (status, bad) = p.get(&format!("/channels/{id}/messages?limit=abc")).await;
        assert_eq!((status, bad["code"].as_str()), (422, Some("invalid_query")));

        // An incoming webhook message lands in the same channel.
        let (_, w) = p.post("/incoming-webhooks", json!({"channelId": id, "name": "w"})).await;
        assert_eq!(hook(w["url"].as_str().unwrap(), &json!({"text": "from a hook"}).to_string(), &[]).await.status, 201);
        assert_eq!(p.messages(&id).await[0]["text"], "from a hook");
        app.stop().await;
    }
}

on_both_backends! {
    async fn a_channel_can_be_renamed_and_deleted_with_its_messages_and_incoming_webhooks(db) {
        let app = spawn_app(&db).await;
        let p = Project::create(&app, Plan::Free).await;
        let id = p.channel("general").await;
        p.channel("random").await;
        let url = p.api(&format!("/channels/{id}"));
        let patch = |body: Value| p.call(reqwest::Method::PATCH, &url, Some(body));

        let (status, renamed) = patch(json!({"name": " releases "})).await;
        assert_eq!((status, renamed["name"].as_str()), (200, Some("releases")), "{renamed}");
        assert_eq!(p.get(&format!("/channels/{id}")).await.1["name"], "releases");
        let (status, taken) = patch(json!({"name": "random"})).await;
        assert_eq!((status, taken["code"].as_str()), (409, Some("channel_name_taken")));
        for bad in [json!({"name": "  "}), json!({"name": "a\u{7}b"}), json!({"name": "x".repeat(101)})] {
            let (status, err) = patch(bad.clone()).await;
            assert_eq!((status, err["code"].as_str()), (422, Some("invalid_name")), "{bad}");
        }
        let hundred = "r".repeat(100);
        let (status, long) = patch(json!({"name": format!("  {hundred}  ")})).await;
        assert_eq!((status, long["name"].as_str()), (200, Some(hundred.as_str())), "100 characters after trimming");
        let (status, err) = patch(json!({"name": "x", "topic": "y"})).await;
        assert_eq!((status, err["code"].as_str()), (422, Some("invalid_body")));

        let (_, w) = p.post("/incoming-webhooks", json!({"channelId": id, "name": "ci"})).await;
        let hook_url = w["url"].as_str().unwrap().to_owned();
        assert_eq!(hook(&hook_url, &json!({"text": "before"}).to_string(), &[]).await.status, 201);
        let (status, _) = p.delete(&format!("/channels/{id}")).await;
        assert_eq!(status, 204);
        assert_eq!(p.get(&format!("/channels/{id}")).await.0, 404);
        assert_eq!(p.get(&format!("/channels/{id}/messages")).await.0, 404);
        assert_eq!(p.get(&format!("/incoming-webhooks/{}", w["id"].as_str().unwrap())).await.0, 404);
        assert_eq!(hook(&hook_url, &json!({"text": "after"}).to_string(), &[]).await.status, 401, "the webhook is gone");
        let (_, list) = p.get("/channels").await;
        assert_eq!(list["data"].as_array().unwrap().len(), 1);
        assert_eq!(p.delete(&format!("/channels/{id}")).await.0, 404, "gone");
        app.stop().await;
    }
}
