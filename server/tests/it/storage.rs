//! The storage suite, run against both backends.

use serde_json::json;
use server::domain::*;
use server::storage::{DeliveryFilter, NewEvent, Page, Published, Storage, StorageError};

use crate::on_both_backends;

const NOW: i64 = 1_780_000_000_000;

async fn space(store: &dyn Storage, plan: Plan) -> Space {
    let space = Space {
        id: SpaceId::new(),
        name: "Acme".into(),
        plan,
        created_at: NOW,
        retention: None,
    };
    store.create_space(&space, None).await.unwrap();
    space
}

fn destination(space: SpaceId, types: Option<&[&str]>, status: DestinationStatus) -> Destination {
    Destination {
        id: DestinationId::new(),
        space_id: space,
        url: "https://example.com/hook".into(),
        description: String::new(),
        event_types: types.map(|t| t.iter().map(|s| s.to_string()).collect()),
        secret: "whsec_dGVzdHNlY3JldHRlc3RzZWNyZXQ=".into(),
        previous_secret: None,
        previous_secret_expires_at: None,
        rate_limit: Some(RateLimit {
            count: 50,
            period: RatePeriod::Minute,
        }),
        max_attempts: 8,
        timeout_seconds: 30,
        retry_policy: json!({"preset": "partyflow"}),
        transformation: None,
        status,
        consecutive_dead_letters: 0,
        skipped_events: 0,
        disabled_reason: None,
        created_at: NOW,
        updated_at: NOW,
        filter: None,
        filtered_events: 0,
        ordering: DeliveryOrdering::Unordered,
        headers: CustomHeaders::default(),
        name: None,
    }
}

/// A live API key of `space`, never used.
fn api_key(space: SpaceId) -> ApiKey {
    ApiKey {
        id: ApiKeyId::new(),
        space_id: space,
        name: "ci".into(),
        prefix: "pfk_abcdefgh".into(),
        created_at: NOW,
        last_used_at: None,
        revoked_at: None,
    }
}

/// A space with an API key (hashed `hash-1`) and two active destinations: `a` for
/// `order.*`, `b` for every type (the publish-as-read tests).
async fn with_order_subscribers(store: &dyn Storage) -> (Space, Destination, Destination) {
    let s = space(store, Plan::Free).await;
    store
        .create_api_key(&api_key(s.id), "hash-1", None)
        .await
        .unwrap();
    let a = destination(s.id, Some(&["order.*"]), DestinationStatus::Active);
    let b = destination(s.id, None, DestinationStatus::Active);
    for d in [&a, &b] {
        store.create_destination(d, None).await.unwrap();
    }
    (s, a, b)
}

fn event(space: SpaceId, event_type: &str) -> NewEvent {
    NewEvent {
        event: Event {
            id: EventId::new(),
            space_id: space,
            event_type: event_type.into(),
            payload: json!({"text": "hello", "n": 1}),
            created_at: NOW,
            deliver_at: None,
        },
        idempotency_key: None,
        request_hash: "h".into(),
        filters: Default::default(),
        claim: None,
        subscribers: None,
    }
}

on_both_backends! {
    async fn a_space_and_its_api_key_are_stored_and_the_key_can_be_revoked(db) {
        let store = db.storage.as_ref();
        let s = space(store, Plan::Pro).await;
        assert_eq!(store.get_space(s.id).await.unwrap(), s);
        assert_eq!(store.list_all_spaces().await.unwrap(), vec![s.clone()]);

        let key = api_key(s.id);
        store.create_api_key(&key, "hash-1", None).await.unwrap();
        assert_eq!(store.find_api_key_by_hash("hash-1").await.unwrap(), key);
        assert!(matches!(store.find_api_key_by_hash("hash-2").await, Err(StorageError::NotFound)));
        store.revoke_api_key(s.id, key.id, NOW + 1, None).await.unwrap();
        assert!(matches!(store.find_api_key_by_hash("hash-1").await, Err(StorageError::NotFound)));
        assert_eq!(store.list_all_api_keys(s.id).await.unwrap()[0].revoked_at, Some(NOW + 1));
        // Revoking twice, or from another space, finds nothing.
        assert!(matches!(store.revoke_api_key(s.id, key.id, NOW, None).await, Err(StorageError::NotFound)));
        assert!(matches!(store.get_space(SpaceId::new()).await, Err(StorageError::NotFound)));
    }
}

on_both_backends! {
    async fn channel_names_are_unique_within_a_space_only(db) {
        let store = db.storage.as_ref();
        let a = space(store, Plan::Free).await;
        let b = space(store, Plan::Free).await;
        let general = |space_id| Channel { id: ChannelId::new(), space_id, name: "general".into(), created_at: NOW };
        let first = general(a.id);
        store.create_channel(&first, None).await.unwrap();
        assert!(matches!(store.create_channel(&general(a.id), None).await, Err(StorageError::Conflict(_))));
        store.create_channel(&general(b.id), None).await.unwrap();
        assert_eq!(store.get_channel(a.id, first.id).await.unwrap(), first);
        // A channel is not visible through another space.
        assert!(matches!(store.get_channel(b.id, first.id).await, Err(StorageError::NotFound)));
        assert_eq!(store.list_all_channels(a.id).await.unwrap().len(), 1);
    }
}

on_both_backends! {
    async fn publishing_fans_out_to_active_subscribed_destinations_in_one_go(db) {
        let store = db.storage.as_ref();
        let s = space(store, Plan::Free).await;
        let all = destination(s.id, None, DestinationStatus::Active);
        let matching = destination(s.id, Some(&["message.created"]), DestinationStatus::Active);
        let other_type = destination(s.id, Some(&["user.joined"]), DestinationStatus::Active);
        let inactive = destination(s.id, Some(&["message.created"]), DestinationStatus::Inactive);
        for d in [&all, &matching, &other_type, &inactive] {
            store.create_destination(d, None).await.unwrap();
        }
        let e = event(s.id, "message.created");
        let published = store.publish_event(&e, NOW).await.unwrap();
        let Published::Created { event_id, deliveries, skipped, mut destinations, claimed } = published else {
            panic!("expected a new event, got {published:?}");
        };
        assert_eq!(claimed, None, "no claim asked for, none made");
        destinations.sort();
        let mut expected = vec![all.id, matching.id];
        expected.sort();
        assert_eq!((event_id, deliveries, skipped, destinations), (e.event.id, 2, 1, expected));

        assert_eq!(store.get_event(s.id, e.event.id).await.unwrap(), e.event);
        let deliveries = store
            .list_deliveries(&DeliveryFilter { space_id: Some(s.id), ..Default::default() }, Page::first(10))
            .await
            .unwrap();
        let mut targets: Vec<_> = deliveries.iter().map(|d| d.destination_id).collect();
        targets.sort();
        let mut expected = vec![all.id, matching.id];
        expected.sort();
        assert_eq!(targets, expected);
        for d in &deliveries {
            assert_eq!(d.status, DeliveryStatus::Pending);
            assert_eq!(d.attempts, 0);
            assert_eq!(d.next_attempt_at, Some(NOW));
            assert_eq!(d.webhook_id(), e.event.id.to_string());
        }
        // D5: the inactive destination counts what it skipped; nothing is stored for it.
        assert_eq!(store.get_destination(s.id, inactive.id).await.unwrap().skipped_events, 1);
        assert_eq!(store.get_destination(s.id, all.id).await.unwrap().skipped_events, 0);
    }
}

on_both_backends! {
    async fn publish_checks_read_the_schemas_version_and_the_active_filtering_destinations(db) {
        let store = db.storage.as_ref();
        let s = space(store, Plan::Free).await;
        // Nothing catalogued, nothing filtering: one read, and nothing in it.
        let none = store.publish_checks(s.id, "order.paid").await.unwrap();
        assert_eq!((none.schema_version, none.filtering.len()), (None, 0));

        let typed = |name: &str, schema: Option<serde_json::Value>, at: i64| EventType {
            id: EventTypeId::new(),
            space_id: s.id,
            name: name.into(),
            description: String::new(),
            schema,
            example: None,
            deprecated: false,
            created_at: at,
            updated_at: at,
        };
        store.create_event_type(&typed("order.paid", Some(json!({"type": "object"})), NOW + 7), None).await.unwrap();
        store.create_event_type(&typed("order.sent", None, NOW), None).await.unwrap();
        let mut filtering = destination(s.id, Some(&["order.paid"]), DestinationStatus::Active);
        filtering.filter = Some(".n > 1".into());
        let mut inactive = destination(s.id, None, DestinationStatus::Inactive);
        inactive.filter = Some(".n > 1".into());
        let plain = destination(s.id, None, DestinationStatus::Active);
        for d in [&filtering, &inactive, &plain] {
            store.create_destination(d, None).await.unwrap();
        }
        // Another space's filtering destination is not this one's.
        let other = space(store, Plan::Free).await;
        let mut elsewhere = destination(other.id, None, DestinationStatus::Active);
        elsewhere.filter = Some(".n > 1".into());
        store.create_destination(&elsewhere, None).await.unwrap();

        let paid = store.publish_checks(s.id, "order.paid").await.unwrap();
        assert_eq!(paid.schema_version, Some(NOW + 7));
        assert_eq!(paid.filtering.iter().map(|d| d.id).collect::<Vec<_>>(), vec![filtering.id]);
        assert_eq!(paid.filtering[0], store.get_destination(s.id, filtering.id).await.unwrap());
        // A type without a schema has no version; the filtering destinations are the
        // space's whatever their types (publishing keeps the subscribed ones).
        let sent = store.publish_checks(s.id, "order.sent").await.unwrap();
        assert_eq!(sent.schema_version, None);
        assert_eq!(sent.filtering.iter().map(|d| d.id).collect::<Vec<_>>(), vec![filtering.id]);

        // With the API key, in the same read: the key and the same checks; the key may be
        // another space's (the caller compares); a revoked or unknown key finds nothing.
        let key = ApiKey { last_used_at: Some(NOW + 3), ..api_key(other.id) };
        store.create_api_key(&key, "hash-1", None).await.unwrap();
        store.touch_api_key(key.id, NOW + 3, 0).await.unwrap();
        let (found, checks) = store.publish_checks_with_key("hash-1", s.id, "order.paid").await.unwrap();
        assert_eq!(found, key);
        assert_eq!(checks.schema_version, Some(NOW + 7));
        assert_eq!(checks.filtering, paid.filtering);
        let (_, nothing) = store.publish_checks_with_key("hash-1", other.id, "order.sent").await.unwrap();
        assert_eq!((nothing.schema_version, nothing.filtering.len()), (None, 1));
        let (_, plain) = store.publish_checks_with_key("hash-1", SpaceId::new(), "order.paid").await.unwrap();
        assert_eq!((plain.schema_version, plain.filtering.len()), (None, 0));
        assert!(matches!(store.publish_checks_with_key("hash-2", s.id, "order.paid").await, Err(StorageError::NotFound)));
        store.revoke_api_key(other.id, key.id, NOW + 4, None).await.unwrap();
        assert!(matches!(store.publish_checks_with_key("hash-1", s.id, "order.paid").await, Err(StorageError::NotFound)));
    }
}

on_both_backends! {
    async fn an_idempotency_key_returns_the_first_answer_and_creates_nothing(db) {
        let store = db.storage.as_ref();
        let s = space(store, Plan::Free).await;
        store.create_destination(&destination(s.id, None, DestinationStatus::Active), None).await.unwrap();
        let mut first = event(s.id, "order.paid");
        first.idempotency_key = Some("order-42".into());
        first.request_hash = "body-a".into();
        let Published::Created { event_id, deliveries, .. } = store.publish_event(&first, NOW).await.unwrap() else {
            panic!("first publish must create");
        };
        let mut again = event(s.id, "order.paid");
        again.idempotency_key = Some("order-42".into());
        again.request_hash = "body-a".into();
        let replay = store.publish_event(&again, NOW).await.unwrap();
        assert_eq!(replay, Published::Replayed { event_id, deliveries, request_hash: "body-a".into() });
        assert_eq!(store.list_events(s.id, Page::first(10)).await.unwrap().len(), 1);
        assert!(matches!(store.get_event(s.id, again.event.id).await, Err(StorageError::NotFound)));
        let all = DeliveryFilter { space_id: Some(s.id), ..Default::default() };
        assert_eq!(store.list_deliveries(&all, Page::first(10)).await.unwrap().len(), 1);

        // The same key in another space is another key.
        let other = space(store, Plan::Free).await;
        let mut elsewhere = event(other.id, "order.paid");
        elsewhere.idempotency_key = Some("order-42".into());
        assert!(matches!(store.publish_event(&elsewhere, NOW).await.unwrap(), Published::Created { .. }));
    }
}

on_both_backends! {
    async fn concurrent_publishes_with_one_key_create_one_event(db) {
        let store = db.storage.clone();
        let s = space(store.as_ref(), Plan::Free).await;
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                let mut e = event(s.id, "order.paid");
                e.idempotency_key = Some("same".into());
                store.publish_event(&e, NOW).await.unwrap()
            }));
        }
        let mut created = 0;
        let mut ids = std::collections::HashSet::new();
        for t in tasks {
            match t.await.unwrap() {
                Published::Created { event_id, .. } => { created += 1; ids.insert(event_id); }
                Published::Replayed { event_id, .. } => { ids.insert(event_id); }
            }
        }
        assert_eq!(created, 1);
        assert_eq!(ids.len(), 1, "every caller sees the same event");
        assert_eq!(store.list_events(s.id, Page::first(10)).await.unwrap().len(), 1);
    }
}

on_both_backends! {
    async fn deliveries_page_newest_first_and_filter_by_each_field(db) {
        let store = db.storage.as_ref();
        let s = space(store, Plan::Free).await;
        let d1 = destination(s.id, None, DestinationStatus::Active);
        let d2 = destination(s.id, Some(&["b"]), DestinationStatus::Active);
        store.create_destination(&d1, None).await.unwrap();
        store.create_destination(&d2, None).await.unwrap();
        for t in ["a", "b", "a", "b", "a"] {
            store.publish_event(&event(s.id, t), NOW).await.unwrap();
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
        let all = DeliveryFilter { space_id: Some(s.id), ..Default::default() };
        let everything = store.list_deliveries(&all, Page::first(100)).await.unwrap();
        assert_eq!(everything.len(), 7);
        assert!(everything.windows(2).all(|w| w[0].id > w[1].id), "newest first");

        // Keyset pages cover everything once.
        let mut seen = Vec::new();
        let mut page = Page::first(3);
        loop {
            let rows = store.list_deliveries(&all, page).await.unwrap();
            if rows.is_empty() { break; }
            page.before = Some(rows.last().unwrap().id);
            seen.extend(rows.into_iter().map(|d| d.id));
        }
        assert_eq!(seen, everything.iter().map(|d| d.id).collect::<Vec<_>>());

        let by_dest = DeliveryFilter { destination_id: Some(d2.id), ..all.clone() };
        assert_eq!(store.list_deliveries(&by_dest, Page::first(100)).await.unwrap().len(), 2);
        let by_type = DeliveryFilter { event_type: Some("a".into()), ..all.clone() };
        assert_eq!(store.list_deliveries(&by_type, Page::first(100)).await.unwrap().len(), 3);
        let by_status = DeliveryFilter { status: Some(DeliveryStatus::Failed), ..all.clone() };
        assert!(store.list_deliveries(&by_status, Page::first(100)).await.unwrap().is_empty());
        let by_class = DeliveryFilter { error_class: Some(ErrorClass::Timeout), ..all.clone() };
        assert!(store.list_deliveries(&by_class, Page::first(100)).await.unwrap().is_empty());
        let now = server::clock::now_ms();
        let future = DeliveryFilter { since: Some(now + 60_000), ..all.clone() };
        assert!(store.list_deliveries(&future, Page::first(100)).await.unwrap().is_empty());
        let past = DeliveryFilter { until: Some(now + 60_000), since: Some(now - 60_000), ..all.clone() };
        assert_eq!(store.list_deliveries(&past, Page::first(100)).await.unwrap().len(), 7);
        // Another space sees none of them.
        let other = space(store, Plan::Free).await;
        let theirs = DeliveryFilter { space_id: Some(other.id), ..Default::default() };
        assert!(store.list_deliveries(&theirs, Page::first(100)).await.unwrap().is_empty());
        assert!(store.list_all_attempts(everything[0].id).await.unwrap().is_empty());
        assert_eq!(store.get_delivery_by_id(everything[0].id).await.unwrap(), everything[0]);
    }
}

on_both_backends! {
    async fn users_are_found_by_email_and_emails_are_unique(db) {
        let store = db.storage.as_ref();
        assert_eq!(store.count_users().await.unwrap(), 0);
        let user = User {
            id: UserId::new(),
            email: "ops@example.com".into(),
            password_hash: "$argon2id$fake".into(),
            role: Role::Support,
            created_at: NOW,
            disabled_at: None,
        };
        store.create_user(&user, None).await.unwrap();
        assert_eq!(store.find_user_by_email("ops@example.com").await.unwrap(), user);
        assert_eq!(store.get_user(user.id).await.unwrap(), user);
        let twin = User { id: UserId::new(), ..user.clone() };
        assert!(matches!(store.create_user(&twin, None).await, Err(StorageError::Conflict(_))));
        assert_eq!(store.count_users().await.unwrap(), 1);
        assert_eq!(store.list_all_users().await.unwrap(), vec![user]);
    }
}

on_both_backends! {
    async fn notifications_are_listed_unread_first_and_marked_read(db) {
        let store = db.storage.as_ref();
        let s = space(store, Plan::Free).await;
        let mut made = Vec::new();
        for i in 0..3 {
            let n = Notification {
                id: NotificationId::new(),
                space_id: Some(s.id),
                kind: "destination.disabled".into(),
                subject_kind: Some("destination".into()),
                subject_id: Some(format!("dst_{i}")),
                message: format!("Destination {i} was disabled after 100 failed deliveries in a row"),
                created_at: NOW + i,
                read_at: None,
            };
            store.create_notification(&n).await.unwrap();
            made.push(n);
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
        assert_eq!(store.count_unread_notifications().await.unwrap(), 3);
        store.mark_notification_read(made[1].id, NOW + 10, None).await.unwrap();
        assert_eq!(store.count_unread_notifications().await.unwrap(), 2);
        let unread = store.list_notifications(true, Page::first(10)).await.unwrap();
        assert_eq!(unread.iter().map(|n| n.id).collect::<Vec<_>>(), vec![made[2].id, made[0].id]);
        let all = store.list_notifications(false, Page::first(10)).await.unwrap();
        assert_eq!(all.len(), 3);
        assert_eq!(all[1].read_at, Some(NOW + 10));
        assert!(matches!(store.mark_notification_read(NotificationId::new(), NOW, None).await, Err(StorageError::NotFound)));
    }
}

on_both_backends! {
    async fn incoming_webhooks_and_bots_are_stored_with_token_hashes(db) {
        let store = db.storage.as_ref();
        let s = space(store, Plan::Enterprise).await;
        let channel = Channel { id: ChannelId::new(), space_id: s.id, name: "alerts".into(), created_at: NOW };
        store.create_channel(&channel, None).await.unwrap();
        let hook = IncomingWebhook {
            id: IncomingWebhookId::new(),
            space_id: s.id,
            channel_id: channel.id,
            name: "Grafana".into(),
            token_hash: "th".into(),
            signing_secret: Some("whsec_abc".into()),
            status: IncomingWebhookStatus::Active,
            consecutive_failures: 0,
            created_at: NOW,
            updated_at: NOW,
            disabled_at: None,
        };
        store.create_incoming_webhook(&hook, None).await.unwrap();
        assert_eq!(store.get_incoming_webhook_by_id(hook.id).await.unwrap(), hook);
        assert_eq!(store.list_all_incoming_webhooks(s.id).await.unwrap(), vec![hook]);

        let bot = Bot { id: BotId::new(), space_id: s.id, name: "deploy-bot".into(), token_hash: "bh".into(), created_at: NOW, revoked_at: None };
        store.create_bot(&bot, None).await.unwrap();
        // The bot, its space's channel and the publish checks, in one read.
        let (found, of_bot, checks) = store.find_bot_to_post("bh", Some(channel.id), "message.created").await.unwrap();
        assert_eq!((found, of_bot), (bot.clone(), Some(channel.clone())));
        assert_eq!((checks.schema_version, checks.filtering.len()), (None, 0));
        let (_, unknown, _) = store.find_bot_to_post("bh", Some(ChannelId::new()), "message.created").await.unwrap();
        assert_eq!(unknown, None);
        let (_, none, _) = store.find_bot_to_post("bh", None, "message.created").await.unwrap();
        assert_eq!(none, None);
        assert!(matches!(store.find_bot_to_post("nope", Some(channel.id), "message.created").await, Err(StorageError::NotFound)));
        // Another space's channel is not the bot's; its space's filtering destination is
        // in the checks, another space's is not.
        let other = space(store, Plan::Free).await;
        let elsewhere = Channel { id: ChannelId::new(), space_id: other.id, name: "alerts".into(), created_at: NOW };
        store.create_channel(&elsewhere, None).await.unwrap();
        let mut filtering = destination(s.id, None, DestinationStatus::Active);
        filtering.filter = Some(".n > 1".into());
        let mut theirs = destination(other.id, None, DestinationStatus::Active);
        theirs.filter = Some(".n > 1".into());
        for d in [&filtering, &theirs] {
            store.create_destination(d, None).await.unwrap();
        }
        let (_, foreign, checks) = store.find_bot_to_post("bh", Some(elsewhere.id), "message.created").await.unwrap();
        assert_eq!(foreign, None);
        assert_eq!(checks.filtering.iter().map(|d| d.id).collect::<Vec<_>>(), vec![filtering.id]);
        assert_eq!(store.list_all_bots(s.id).await.unwrap().len(), 1);
        assert!(store.list_messages(channel.id, Page::first(10)).await.unwrap().is_empty());
        // A revoked bot finds nothing.
        store.revoke_bot(s.id, bot.id, NOW + 1, None).await.unwrap();
        assert!(matches!(store.find_bot_to_post("bh", Some(channel.id), "message.created").await, Err(StorageError::NotFound)));
    }
}

on_both_backends! {
    async fn migrations_can_run_again_on_a_migrated_database(db) {
        db.storage.migrate().await.unwrap();
        db.storage.ping().await.unwrap();
    }
}

on_both_backends! {
    async fn a_group_of_publishes_commits_together_and_one_failure_spares_the_rest(db) {
        let store = db.storage.as_ref();
        let s = space(store, Plan::Free).await;
        store.create_destination(&destination(s.id, None, DestinationStatus::Active), None).await.unwrap();
        let first = {
            let mut e = event(s.id, "order.paid");
            e.idempotency_key = Some("k-1".into());
            e.request_hash = "h".into();
            e
        };
        // The same key again in the same group: the second is a replay of the first.
        let duplicate = {
            let mut e = event(s.id, "order.paid");
            e.idempotency_key = Some("k-1".into());
            e.request_hash = "h".into();
            e
        };
        // An event of a space that does not exist breaks a reference: only it fails.
        let broken = event(SpaceId::new(), "order.paid");
        let last = event(s.id, "order.shipped");
        let answers = store
            .publish_events(&[first.clone(), duplicate, broken.clone(), last.clone()], NOW)
            .await
            .unwrap();
        assert_eq!(answers.len(), 4);
        let Ok(Published::Created { event_id, deliveries: 1, .. }) = &answers[0] else {
            panic!("the first must be created: {:?}", answers[0]);
        };
        assert_eq!(*event_id, first.event.id);
        assert!(
            matches!(&answers[1], Ok(Published::Replayed { event_id, deliveries: 1, .. }) if *event_id == first.event.id),
            "{:?}",
            answers[1]
        );
        assert!(answers[2].is_err(), "{:?}", answers[2]);
        assert!(matches!(&answers[3], Ok(Published::Created { deliveries: 1, .. })), "{:?}", answers[3]);

        let events = store.list_events(s.id, Page::first(10)).await.unwrap();
        let mut ids: Vec<_> = events.iter().map(|e| e.id).collect();
        ids.sort();
        let mut expected = vec![first.event.id, last.event.id];
        expected.sort();
        assert_eq!(ids, expected);
        let all = DeliveryFilter { space_id: Some(s.id), ..Default::default() };
        assert_eq!(store.list_deliveries(&all, Page::first(10)).await.unwrap().len(), 2);
    }
}

on_both_backends! {
    async fn changing_a_destinations_event_types_changes_what_it_receives(db) {
        let store = db.storage.as_ref();
        let s = space(store, Plan::Free).await;
        let mut d = destination(s.id, Some(&["order.paid", "order.paid"]), DestinationStatus::Active);
        store.create_destination(&d, None).await.unwrap();
        let fan_out = |published: Published| match published {
            Published::Created { destinations, .. } => destinations,
            other => panic!("expected a new event, got {other:?}"),
        };
        assert_eq!(fan_out(store.publish_event(&event(s.id, "order.paid"), NOW).await.unwrap()), vec![d.id]);
        assert!(fan_out(store.publish_event(&event(s.id, "order.shipped"), NOW).await.unwrap()).is_empty());

        d.event_types = Some(vec!["order.shipped".into()]);
        store.update_destination(&d, None).await.unwrap();
        assert!(fan_out(store.publish_event(&event(s.id, "order.paid"), NOW).await.unwrap()).is_empty());
        assert_eq!(fan_out(store.publish_event(&event(s.id, "order.shipped"), NOW).await.unwrap()), vec![d.id]);

        // `*` and no filter both take every type; in bulk too.
        d.event_types = Some(vec!["order.shipped".into(), "*".into()]);
        store.update_destination(&d, None).await.unwrap();
        let every = destination(s.id, None, DestinationStatus::Active);
        store.create_destination(&every, None).await.unwrap();
        let answers = store
            .publish_events(&[event(s.id, "anything"), event(s.id, "order.shipped")], NOW)
            .await
            .unwrap();
        for answer in answers {
            let mut got = fan_out(answer.unwrap());
            got.sort();
            let mut want = vec![d.id, every.id];
            want.sort();
            assert_eq!(got, want);
        }

        // A deleted destination receives nothing.
        store.delete_destination(s.id, every.id, None).await.unwrap();
        assert_eq!(fan_out(store.publish_event(&event(s.id, "anything"), NOW).await.unwrap()), vec![d.id]);
    }
}

/// PostgreSQL connections are kept between uses without sqlx's pings (`storage::reads`):
/// when the server drops them (a restart, a failover, an administrator), a connection
/// that sat idle past the bypass window is pinged before it is lent again and replaced,
/// so neither reads nor writes see the dead ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_connections_the_server_dropped_are_replaced_before_they_are_used() {
    let Some(db) = server::testkit::fresh_db(server::testkit::Db::Postgres).await else {
        return;
    };
    let store = db.storage.as_ref();
    // Several connections kept: reads and writes at once.
    let s = space(store, Plan::Free).await;
    let reads = (0..4).map(|_| store.get_space(s.id));
    for read in futures_util::future::join_all(reads).await {
        assert_eq!(read.unwrap().id, s.id);
    }
    let killer = sqlx::PgPool::connect(&db.url).await.unwrap();
    let killed: Vec<bool> = sqlx::query_scalar(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE datname = current_database() AND pid <> pg_backend_pid()",
    )
    .fetch_all(&killer)
    .await
    .unwrap();
    assert!(!killed.is_empty() && killed.iter().all(|k| *k));
    tokio::time::sleep(
        server::storage::reads::PING_AFTER_IDLE + std::time::Duration::from_millis(100),
    )
    .await;
    // Every kept connection is dead and idle past the window: each is pinged, fails,
    // and a fresh one takes its place. Not one use fails.
    let reads = (0..4).map(|_| store.get_space(s.id));
    for read in futures_util::future::join_all(reads).await {
        assert_eq!(read.unwrap().id, s.id);
    }
    let other = space(store, Plan::Free).await;
    assert_eq!(store.get_space(other.id).await.unwrap().id, other.id);
}

/// PostgreSQL: deleting a destination cascades over its deliveries, locking them in the
/// order it scans them, while the engine's record of a group of attempts locks them in
/// the group's order; when the two cross, the database aborts one (`deadlock_detected`).
/// The delete is tried again and goes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_destination_that_meets_a_deadlock_is_tried_again() {
    let Some(db) = server::testkit::fresh_db(server::testkit::Db::Postgres).await else {
        return;
    };
    let store = db.storage.clone();
    let s = space(store.as_ref(), Plan::Free).await;
    let raw = sqlx::PgPool::connect(&db.url).await.unwrap();
    // PostgreSQL checks a lock wait for a deadlock once, a second after it began. The
    // delete waits first, so its check normally runs first and picks it; on a loaded
    // machine the other's second wait may begin only after that check found no cycle yet,
    // and then the other is picked: the delete met no deadlock, and the case is set up
    // again with a new destination.
    for _ in 0..3 {
        let d = destination(s.id, None, DestinationStatus::Active);
        store.create_destination(&d, None).await.unwrap();
        for _ in 0..2 {
            store
                .publish_event(&event(s.id, "message.created"), NOW)
                .await
                .unwrap();
        }
        let ids: Vec<String> =
            sqlx::query_scalar("SELECT id FROM deliveries WHERE destination_id = $1 ORDER BY ctid")
                .bind(d.id.to_string())
                .fetch_all(&raw)
                .await
                .unwrap();
        let (first, last) = (&ids[0], &ids[1]);
        // Another transaction holds the delivery the cascade reaches last…
        let mut other = raw.begin().await.unwrap();
        sqlx::query("UPDATE deliveries SET updated_at = updated_at + 1 WHERE id = $1")
            .bind(last)
            .execute(&mut *other)
            .await
            .unwrap();
        let deleting = tokio::spawn({
            let store = store.clone();
            async move { store.delete_destination(s.id, d.id, None).await }
        });
        // The cascade waits for it (seen in `pg_stat_activity`, not guessed from a sleep:
        // on a busy machine the delete may start late), a little before the other waits
        // in turn, so that its deadlock check runs first.
        let waiting = "SELECT COUNT(*) FROM pg_stat_activity \
                       WHERE datname = current_database() AND wait_event_type = 'Lock'";
        let started = std::time::Instant::now();
        while sqlx::query_scalar::<_, i64>(waiting)
            .fetch_one(&raw)
            .await
            .unwrap()
            == 0
        {
            assert!(
                started.elapsed() < std::time::Duration::from_secs(10),
                "the delete never waited"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        // …then waits for the one the cascade took first: each waits on the other.
        let crossed =
            sqlx::query("UPDATE deliveries SET updated_at = updated_at + 1 WHERE id = $1")
                .bind(first)
                .execute(&mut *other)
                .await;
        let picked_the_other = matches!(
            &crossed,
            Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("40P01")
        );
        if picked_the_other {
            other.rollback().await.unwrap();
        } else {
            crossed.unwrap();
            other.commit().await.unwrap();
        }
        deleting.await.unwrap().unwrap();
        assert!(matches!(
            store.get_destination(s.id, d.id).await,
            Err(StorageError::NotFound)
        ));
        let (left,): (i64,) =
            sqlx::query_as("SELECT COUNT(*) FROM deliveries WHERE destination_id = $1")
                .bind(d.id.to_string())
                .fetch_one(&raw)
                .await
                .unwrap();
        assert_eq!(left, 0);
        if !picked_the_other {
            // The other's second UPDATE went through only because the delete, which held
            // that delivery, was aborted: the delete met the deadlock and was tried again.
            return;
        }
    }
    panic!("three times the database picked the other transaction, never the delete");
}

/// The key's row of `rate_keys`, and its `taken` against the rows of `rate_events`.
async fn taken_and_counted(db: &server::testkit::TestDb, key: &str) -> (Option<i64>, i64) {
    use server::storage::RawPool;
    let sql = "SELECT (SELECT taken FROM rate_keys WHERE key = $1), \
               (SELECT COUNT(*) FROM rate_events WHERE key = $1)";
    match db.storage.raw_pool() {
        RawPool::Sqlite(p) => sqlx::query_as(sql).bind(key).fetch_one(&p).await.unwrap(),
        RawPool::Postgres(p) => sqlx::query_as(sql).bind(key).fetch_one(&p).await.unwrap(),
    }
}

on_both_backends! {
    /// A rate key's `taken`, which slots are counted by, stays the number of its slots
    /// through everything that writes them: slots taken (one statement, or chunked past
    /// 500), the window's old ones dropped, the retention task's clean-up.
    async fn a_rate_keys_taken_count_is_always_its_slots(db) {
        let store = db.storage.as_ref();
        let key = "dst:counted";
        // Ahead of the clock: a slot is dated no earlier than when its lock is granted.
        let at = server::clock::now_ms() + 3_600_000;
        assert_eq!(store.take_rate_slots(key, 3, 5, 1_000, at).await.unwrap(), (3, 0));
        assert_eq!(taken_and_counted(&db, key).await, (Some(3), 3));
        // Two of the four fit; the oldest frees 1,000 ms after it was taken.
        let (granted, wait) = store.take_rate_slots(key, 4, 5, 1_000, at + 10).await.unwrap();
        assert_eq!(granted, 2);
        assert!(wait > 0 && wait <= 1_000, "{wait}");
        assert_eq!(taken_and_counted(&db, key).await, (Some(5), 5));
        // The window has moved on: the five old slots go, 600 new ones come (in chunks).
        let later = at + 5_000;
        assert_eq!(store.take_rate_slots(key, 600, 1_000, 1_000, later).await.unwrap(), (600, 0));
        assert_eq!(taken_and_counted(&db, key).await, (Some(600), 600));
        assert_eq!(store.take_rate_slots(key, 500, 1_000, 1_000, later + 1).await.unwrap().0, 400);
        assert_eq!(taken_and_counted(&db, key).await, (Some(1_000), 1_000));
        // Idle long enough: the retention task deletes the key and its slots together.
        store.purge_rate_rows(later + 60_000, None, 100).await.unwrap();
        assert_eq!(taken_and_counted(&db, key).await, (None, 0));
        assert_eq!(store.take_rate_slot(key, 1, 1_000, later + 60_000).await.unwrap(), server::storage::Slot::Granted);
        assert_eq!(taken_and_counted(&db, key).await, (Some(1), 1));
    }
}

on_both_backends! {
    /// A claim takes its space's plan slots (docs D4) with the same count: as many as the
    /// plan leaves in the window, the rest held back; the window's old slots go at the
    /// next claim after it; the key's `taken` is its slots all along (on PostgreSQL the
    /// slots are one statement whose parts see the table as it began).
    async fn a_claim_takes_its_plan_slots_and_the_keys_count_stays_its_slots(db) {
        use server::domain::PerPlan;
        use server::storage::{ClaimLimits, PlanLimits};
        let store = db.storage.as_ref();
        let s = space(store, Plan::Free).await;
        let key = format!("plan:{}", s.id);
        let d = destination(s.id, None, DestinationStatus::Active);
        store.create_destination(&d, None).await.unwrap();
        for _ in 0..6 {
            store.publish_event(&event(s.id, "message.created"), NOW).await.unwrap();
        }
        let per_second = PerPlan { free: 4, pro: 100, enterprise: 1_000 };
        let limits = ClaimLimits {
            per_destination: 100,
            retries: i64::MAX,
            plans: Some(PlanLimits { per_second, window_ms: 1_000 }),
        };
        let now = server::clock::now_ms();
        let first = store.claim(now, 3, 60_000, &limits).await.unwrap();
        assert_eq!((first.deliveries.len(), first.held_by_plan), (3, 0));
        assert_eq!(taken_and_counted(&db, &key).await, (Some(3), 3));
        // One slot left of four: one claimed, the two others held back.
        let second = store.claim_for(&named(&[d.id], 100, limits), now + 1).await.unwrap();
        assert_eq!((second.deliveries.len(), second.held_by_plan), (1, 2));
        assert_eq!(taken_and_counted(&db, &key).await, (Some(4), 4));
        // A window later the four old slots go and the two held back take theirs.
        let later = server::clock::now_ms().max(now) + 2_000;
        let third = store.claim(later, 100, 60_000, &limits).await.unwrap();
        assert_eq!((third.deliveries.len(), third.held_by_plan), (2, 0), "{third:?}");
        assert_eq!(taken_and_counted(&db, &key).await, (Some(2), 2));
    }
}

on_both_backends! {
    /// A claim for a destination with nothing due (an attempt's record at low load) claims
    /// nothing and reads no destination; once its delivery is due, the same claim takes it
    /// with its destination.
    async fn a_claim_for_a_destination_with_nothing_due_takes_nothing_and_reads_nothing(db) {
        let store = db.storage.as_ref();
        let s = space(store, Plan::Enterprise).await;
        let d = destination(s.id, None, DestinationStatus::Active);
        store.create_destination(&d, None).await.unwrap();
        // Due an hour from now (a claim is dated no earlier than the clock).
        let later = server::clock::now_ms() + 3_600_000;
        store.publish_event(&event(s.id, "message.created"), later).await.unwrap();
        let limits = server::storage::ClaimLimits { per_destination: 5, retries: i64::MAX, plans: None };
        let early = store.claim_for(&named(&[d.id], 5, limits), server::clock::now_ms()).await.unwrap();
        assert!(early.deliveries.is_empty() && early.destinations.is_empty(), "{early:?}");
        let due = store.claim_for(&named(&[d.id], 5, limits), later + 1).await.unwrap();
        assert_eq!(due.deliveries.len(), 1);
        assert_eq!(due.destinations.keys().copied().collect::<Vec<_>>(), vec![d.id]);
        let after = store.claim_for(&named(&[d.id], 5, limits), later + 2).await.unwrap();
        assert!(after.deliveries.is_empty() && after.destinations.is_empty(), "{after:?}");
    }
}

/// One case of [`a_claim_for_one_destination_takes_what_a_claim_for_several_takes`].
#[derive(Debug, Clone, Copy)]
struct OneCase {
    fifo: bool,
    /// Whether one of the destination's deliveries is left in flight.
    in_flight: bool,
    per_destination: i64,
    retries: i64,
    limit: i64,
    ahead: bool,
    /// The free plan's sends per second, if limited.
    plan: Option<i64>,
}

/// A space on the free plan with a destination `d` (FIFO if `case.fifo`) and one subscribed
/// to nothing: twelve events to `d`, published 100 ms apart; of their deliveries, the first
/// four claimed, then the first and the third due again as retries (at +650 and +250 ms),
/// the second succeeded and the fourth left in flight if `case.in_flight` (else succeeded).
/// A FIFO `d`'s head alone is claimed, then left in flight or due again as a retry. Every
/// delivery has its own due time, which names it from one database to the other.
async fn one_case(case: OneCase) -> (server::testkit::TestDb, DestinationId, DestinationId) {
    use server::storage::{ClaimLimits, NextStep};
    let db = server::testkit::fresh_db(server::testkit::Db::Sqlite)
        .await
        .unwrap();
    let store = db.storage.as_ref();
    let s = space(store, Plan::Free).await;
    let mut d = destination(s.id, Some(&["message.*"]), DestinationStatus::Active);
    if case.fifo {
        d.ordering = DeliveryOrdering::Fifo;
    }
    let idle = destination(s.id, Some(&["never.*"]), DestinationStatus::Active);
    for x in [&d, &idle] {
        store.create_destination(x, None).await.unwrap();
    }
    for k in 0..12 {
        store
            .publish_event(&event(s.id, "message.created"), NOW + 100 * k)
            .await
            .unwrap();
    }
    let limits = ClaimLimits {
        per_destination: 100,
        retries: i64::MAX,
        plans: None,
    };
    let mut first = store
        .claim_for(&named(&[d.id, idle.id], 4, limits), NOW)
        .await
        .unwrap()
        .deliveries;
    first.sort_by_key(|x| x.next_attempt_at);
    let retry = |at| NextStep::Retry { at };
    let rule = AutoDisable {
        after: i64::MAX,
        warn_at: Vec::new(),
    };
    if case.fifo {
        // Its head alone, in flight or due again as a retry.
        assert_eq!(first.len(), 1, "{case:?}");
        if !case.in_flight {
            let again = crate::helpers::answered(&first, 500, retry(NOW + 650));
            store.finish_attempts(&again, &rule, NOW).await.unwrap();
        }
        return (db, d.id, idle.id);
    }
    assert_eq!(first.len(), 4, "{case:?}");
    let mut ends = vec![
        crate::helpers::answered(&first[0..1], 500, retry(NOW + 650)),
        crate::helpers::answered(&first[1..2], 200, NextStep::Succeeded),
        crate::helpers::answered(&first[2..3], 500, retry(NOW + 250)),
    ];
    if !case.in_flight {
        ends.push(succeeded(&first[3..4]));
    }
    store
        .finish_attempts(&ends.concat(), &rule, NOW)
        .await
        .unwrap();
    (db, d.id, idle.id)
}

/// SQLite claims for one destination with a statement of its own (no window functions):
/// whatever the destination's state, it takes the deliveries, in the order, that the claim
/// for several destinations takes for it: its free slots (its cap, or its caps claimed
/// ahead, less what is in flight), at most so many retries, at most the claim's limit, a
/// FIFO destination's head only when nothing is in flight, the plan's slots in that order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_for_one_destination_takes_what_a_claim_for_several_takes() {
    use server::domain::PerPlan;
    use server::storage::{ClaimLimits, ClaimNext, PlanLimits};
    let base = OneCase {
        fifo: false,
        in_flight: true,
        per_destination: 4,
        retries: i64::MAX,
        limit: 100,
        ahead: false,
        plan: None,
    };
    let cases = [
        base,
        OneCase {
            per_destination: 6,
            retries: 1,
            ..base
        },
        OneCase {
            per_destination: 6,
            retries: 0,
            ..base
        },
        OneCase {
            per_destination: 8,
            retries: 1,
            limit: 2,
            ..base
        },
        OneCase {
            per_destination: 2,
            ahead: true,
            ..base
        },
        OneCase {
            per_destination: 2,
            ..base
        },
        OneCase {
            per_destination: 6,
            plan: Some(2),
            ..base
        },
        OneCase { fifo: true, ..base },
        OneCase {
            fifo: true,
            in_flight: false,
            ..base
        },
        OneCase {
            fifo: true,
            in_flight: false,
            retries: 0,
            ..base
        },
    ];
    let mut claimed_somewhere = 0;
    for case in cases {
        let mut taken = Vec::new();
        for several in [false, true] {
            let (db, d, idle) = one_case(case).await;
            let per_second = PerPlan {
                free: case.plan.unwrap_or(1_000),
                pro: 1_000,
                enterprise: 1_000,
            };
            let limits = ClaimLimits {
                per_destination: case.per_destination,
                retries: case.retries,
                plans: case.plan.map(|_| PlanLimits {
                    per_second,
                    window_ms: 1_000,
                }),
            };
            let destinations = if several { vec![d, idle] } else { vec![d] };
            let next = ClaimNext {
                ahead: if case.ahead { vec![d] } else { Vec::new() },
                ..named(&destinations, case.limit, limits)
            };
            let claimed = db.storage.claim_for(&next, NOW).await.unwrap();
            let mut due: Vec<i64> = claimed
                .deliveries
                .iter()
                .map(|x| x.next_attempt_at.unwrap())
                .collect();
            due.sort();
            assert_eq!(
                claimed.destinations.contains_key(&d),
                !due.is_empty(),
                "{case:?}"
            );
            taken.push((due, claimed.held_by_plan));
        }
        assert_eq!(
            taken[0], taken[1],
            "{case:?}: one destination, then several"
        );
        claimed_somewhere += usize::from(!taken[0].0.is_empty());
    }
    // All but the FIFO destination with its head in flight, and the one whose head is a
    // retry when no retry may be claimed.
    assert_eq!(claimed_somewhere, cases.len() - 2);
}

on_both_backends! {
    /// A group of REST publishes (events without keys, their subscribers read with their
    /// checks) is written as read when no subscriber changed since (SQLite: one round
    /// trip); when one changed, the group writes the fan-out of the moment of its write,
    /// every event once.
    async fn a_group_of_publishes_writes_the_fan_out_of_the_moment_of_its_write(db) {
        let store = db.storage.as_ref();
        let (s, a, b) = with_order_subscribers(store).await;
        let read = |event_type: &'static str| async move {
            store.publish_checks_with_key("hash-1", s.id, event_type).await.unwrap().1.subscribers
        };
        let published = |answers: Vec<server::storage::Result<Published>>| {
            answers
                .into_iter()
                .map(|p| match p.unwrap() {
                    Published::Created { deliveries, skipped, mut destinations, .. } => {
                        destinations.sort();
                        (deliveries, skipped, destinations)
                    }
                    other => panic!("expected a new event, got {other:?}"),
                })
                .collect::<Vec<_>>()
        };
        let mut both = vec![a.id, b.id];
        both.sort();

        // As read: each event to `a` and `b`.
        let (paid, sent) = (read("order.paid").await, read("order.sent").await);
        assert!(paid.is_some() && sent.is_some(), "read with the checks");
        let group: Vec<NewEvent> = [("order.paid", &paid), ("order.paid", &paid), ("order.sent", &sent)]
            .into_iter()
            .map(|(t, read)| NewEvent { subscribers: read.clone(), ..event(s.id, t) })
            .collect();
        let answers = published(store.publish_events(&group, NOW).await.unwrap());
        assert_eq!(answers, vec![(2, 0, both.clone()); 3]);

        // Read, then `b` disabled and `c` created for `order.paid`: the group writes what
        // the subscribers are at its write.
        let (paid, sent) = (read("order.paid").await, read("order.sent").await);
        store.set_destination_status(s.id, b.id, DestinationStatus::Inactive, None, NOW, None).await.unwrap();
        let c = destination(s.id, Some(&["order.paid"]), DestinationStatus::Active);
        store.create_destination(&c, None).await.unwrap();
        let group: Vec<NewEvent> = [("order.paid", &paid), ("order.sent", &sent)]
            .into_iter()
            .map(|(t, read)| NewEvent { subscribers: read.clone(), ..event(s.id, t) })
            .collect();
        let answers = published(store.publish_events(&group, NOW).await.unwrap());
        let mut a_and_c = vec![a.id, c.id];
        a_and_c.sort();
        assert_eq!(answers, vec![(2, 1, a_and_c), (1, 1, vec![a.id])]);
        assert_eq!(store.get_destination(s.id, b.id).await.unwrap().skipped_events, 2);
        // Every event of both groups once, with its deliveries: five to `a`, one to `c`
        // (and the first group's three to `b`, which is inactive now).
        for e in &group {
            assert!(store.get_event(s.id, e.event.id).await.is_ok());
        }
        let limits = server::storage::ClaimLimits { per_destination: 100, retries: i64::MAX, plans: None };
        let due = store.claim_for(&named(&[a.id, c.id], 100, limits), NOW + 1).await.unwrap();
        let to = |d: DestinationId| due.deliveries.iter().filter(|x| x.destination_id == d).count();
        assert_eq!((to(a.id), to(c.id)), (5, 1));
    }
}

/// A claim for the named destinations, none claimed ahead.
fn named(
    destinations: &[DestinationId],
    limit: i64,
    limits: server::storage::ClaimLimits,
) -> server::storage::ClaimNext {
    server::storage::ClaimNext {
        destinations: destinations.to_vec(),
        ahead: Vec::new(),
        limit,
        lease_margin_ms: 60_000,
        limits,
    }
}

on_both_backends! {
    /// A claim for a destination named ahead (`ClaimNext::ahead`) takes up to its backend's
    /// `Ahead::caps` times its cap in `sending`. On PostgreSQL, only while every delivery in
    /// flight to it is the claiming instance's own: another instance then claims nothing
    /// for it, and once both hold some, neither claims past the cap.
    async fn a_claim_ahead_takes_its_caps_only_while_all_in_flight_is_its_own(db) {
        use server::storage::{ClaimLimits, ClaimNext};
        let store = db.storage.as_ref();
        let s = space(store, Plan::Free).await;
        let d = destination(s.id, None, DestinationStatus::Active);
        store.create_destination(&d, None).await.unwrap();
        let most = store.claims_ahead().caps as usize * 4;
        for _ in 0..most * 2 {
            store.publish_event(&event(s.id, "message.created"), NOW).await.unwrap();
        }
        let limits = ClaimLimits { per_destination: 4, retries: i64::MAX, plans: None };
        let ahead = ClaimNext { ahead: vec![d.id], ..named(&[d.id], 100, limits) };
        let now = server::clock::now_ms();
        let mine = store.claim_for(&ahead, now).await.unwrap().deliveries;
        assert_eq!(mine.len(), most, "its caps of four");
        assert!(store.claim_for(&ahead, now).await.unwrap().deliveries.is_empty(), "at its caps");
        if db.url.starts_with("sqlite") {
            return;
        }
        let other = server::storage::testing::connect(&db.url).await.unwrap();
        assert!(other.claim_for(&ahead, now).await.unwrap().deliveries.is_empty(), "more than the cap in flight: nothing for another instance");
        // All but two recorded: two of this instance's in flight.
        let rule = AutoDisable { after: i64::MAX, warn_at: Vec::new() };
        store.finish_attempts(&succeeded(&mine[..most - 2]), &rule, now).await.unwrap();
        let theirs = other.claim_for(&ahead, now).await.unwrap().deliveries;
        assert_eq!(theirs.len(), 2, "another's in flight: the cap, not more");
        assert!(store.claim_for(&ahead, now).await.unwrap().deliveries.is_empty(), "four in flight, two another's");
        // The other instance's recorded: this one's own again, its caps.
        other.finish_attempts(&succeeded(&theirs), &rule, now).await.unwrap();
        assert_eq!(store.claim_for(&ahead, now).await.unwrap().deliveries.len(), most - 2);
    }
}

/// `deliveries` as their workers record them: answered 200.
fn succeeded(deliveries: &[Delivery]) -> Vec<server::storage::FinishedAttempt> {
    crate::helpers::answered(deliveries, 200, server::storage::NextStep::Succeeded)
}

on_both_backends! {
    /// Both claims (by name and the full one) hand back each claimed delivery's
    /// destination with its settings as they are now, so no attempt reads its own; on
    /// PostgreSQL they are read after the claim's commit.
    async fn a_claim_hands_back_the_destinations_of_its_deliveries(db) {
        use server::storage::ClaimLimits;
        let store = db.storage.as_ref();
        let s = space(store, Plan::Free).await;
        let mut a = destination(s.id, None, DestinationStatus::Active);
        a.url = "https://a.example.com/hook".into();
        let mut b = destination(s.id, None, DestinationStatus::Active);
        b.url = "https://b.example.com/hook".into();
        for d in [&a, &b] {
            store.create_destination(d, None).await.unwrap();
        }
        for _ in 0..3 {
            store.publish_event(&event(s.id, "message.created"), NOW).await.unwrap();
        }
        let limits = ClaimLimits { per_destination: 2, retries: i64::MAX, plans: None };
        let now = server::clock::now_ms();
        let by_name = store.claim_for(&named(&[a.id], 100, limits), now).await.unwrap();
        assert_eq!(by_name.deliveries.len(), 2, "a's cap of two");
        assert_eq!(by_name.destinations.len(), 1);
        assert_eq!(by_name.destinations[&a.id].url, a.url);
        // Changed after the first claim: the next one reads it as it is now.
        b.url = "https://b2.example.com/hook".into();
        store.update_destination(&b, None).await.unwrap();
        let full = store.claim(now, 100, 60_000, &limits).await.unwrap();
        assert_eq!(full.deliveries.len(), 2, "b's cap of two; a is at its cap");
        assert!(full.deliveries.iter().all(|d| d.destination_id == b.id));
        assert_eq!(full.destinations.len(), 1);
        assert_eq!(full.destinations[&b.id].url, "https://b2.example.com/hook");
        assert!(full.deliveries.iter().all(|d| full.events.contains_key(&d.id)));
    }
}

on_both_backends! {
    /// A publish due now claims its own destinations' earliest due deliveries in its
    /// transaction on SQLite, as the engine's claim would (caps, limit); PostgreSQL
    /// claims nothing there.
    async fn a_publish_claims_its_own_deliveries_in_its_transaction(db) {
        use server::storage::{ClaimLimits, ClaimNext};
        let store = db.storage.as_ref();
        let s = space(store, Plan::Free).await;
        let busy = destination(s.id, None, DestinationStatus::Active);
        let free = destination(s.id, None, DestinationStatus::Active);
        for d in [&busy, &free] {
            store.create_destination(d, None).await.unwrap();
        }
        // Two in flight to `busy`, whose cap here is two; two waiting for `free`.
        for _ in 0..2 {
            store.publish_event(&event(s.id, "message.created"), NOW).await.unwrap();
        }
        let limits = ClaimLimits { per_destination: 2, retries: i64::MAX, plans: None };
        let now = server::clock::now_ms();
        let first = store.claim_for(&named(&[busy.id], 100, limits), now).await.unwrap().deliveries;
        assert_eq!(first.len(), 2);
        let claim = |limit: i64, per_destination: i64| Some(ClaimNext {
            destinations: Vec::new(),
            ahead: Vec::new(),
            limit,
            lease_margin_ms: 60_000,
            limits: ClaimLimits { per_destination, ..limits },
        });
        let mut e = event(s.id, "message.created");
        e.claim = claim(16, 2);
        let published = store.publish_events(std::slice::from_ref(&e), now).await.unwrap().pop().unwrap().unwrap();
        let Published::Created { destinations, claimed, .. } = published else {
            panic!("expected a new event, got {published:?}");
        };
        assert_eq!(destinations.len(), 2);
        if !db.url.starts_with("sqlite") {
            assert_eq!(claimed, None, "PostgreSQL claims in a transaction of its own");
            return;
        }
        // `free`'s two earliest (under its cap of two), nothing of `busy` (at its cap).
        let claimed = claimed.expect("SQLite claims in the publish's transaction");
        assert_eq!(claimed.deliveries.len(), 2);
        assert!(claimed.deliveries.iter().all(|d| d.destination_id == free.id && d.status == DeliveryStatus::Sending));
        assert!(claimed.deliveries.iter().all(|d| d.event_id != e.event.id), "the earliest due go first");
        assert!(claimed.destinations.contains_key(&free.id));
        assert!(claimed.deliveries.iter().all(|d| claimed.events.contains_key(&d.id)));
        // The claim is on disk: both destinations are at their cap.
        let again = store.claim_for(&named(&[busy.id, free.id], 100, limits), now).await.unwrap().deliveries;
        assert!(again.is_empty(), "both destinations are at their cap: {again:?}");
        // The claim's limit holds: a limit of one claims one, of the four now waiting.
        let mut one = event(s.id, "message.created");
        one.claim = claim(1, 5);
        let published = store.publish_events(std::slice::from_ref(&one), now).await.unwrap().pop().unwrap().unwrap();
        let Published::Created { claimed: Some(claimed), .. } = published else {
            panic!("expected a claim, got {published:?}");
        };
        assert_eq!(claimed.deliveries.len(), 1);
        // A scheduled event claims nothing: none of its deliveries is due.
        let mut later = event(s.id, "message.created");
        later.event.deliver_at = Some(now + 60_000);
        later.claim = claim(16, 5);
        let published = store.publish_events(std::slice::from_ref(&later), now).await.unwrap().pop().unwrap().unwrap();
        assert!(matches!(published, Published::Created { claimed: None, .. }), "{published:?}");
    }
}

on_both_backends! {
    /// A channel message, its event and deliveries in one transaction, with the replay
    /// guard of its request and the claim of its deliveries (SQLite: in the same two
    /// round trips as a publish alone); a replay writes nothing.
    async fn a_message_is_written_once_per_webhook_id_and_claims_its_deliveries(db) {
        use server::storage::{ClaimLimits, ClaimNext, IncomingReplay};
        let store = db.storage.as_ref();
        let s = space(store, Plan::Free).await;
        let dst = destination(s.id, None, DestinationStatus::Active);
        store.create_destination(&dst, None).await.unwrap();
        let channel = Channel { id: ChannelId::new(), space_id: s.id, name: "general".into(), created_at: NOW };
        store.create_channel(&channel, None).await.unwrap();
        let hook = IncomingWebhook {
            id: IncomingWebhookId::new(),
            space_id: s.id,
            channel_id: channel.id,
            name: "ci".into(),
            token_hash: "token-hash".into(),
            signing_secret: None,
            status: IncomingWebhookStatus::Active,
            consecutive_failures: 0,
            created_at: NOW,
            updated_at: NOW,
            disabled_at: None,
        };
        store.create_incoming_webhook(&hook, None).await.unwrap();
        // What posting through it reads, in one read: with the publish checks of its space.
        let schema = EventType {
            id: EventTypeId::new(),
            space_id: s.id,
            name: "message.created".into(),
            description: String::new(),
            schema: Some(json!({"type": "object"})),
            example: None,
            deprecated: false,
            created_at: NOW + 9,
            updated_at: NOW + 9,
        };
        store.create_event_type(&schema, None).await.unwrap();
        let to_post = store.get_incoming_webhook_to_post(hook.id, "message.created").await.unwrap();
        assert_eq!((&to_post.webhook, to_post.plan, &to_post.channel), (&hook, Plan::Free, &channel));
        assert_eq!((to_post.checks.schema_version, to_post.checks.filtering.len()), (Some(NOW + 9), 0));
        let other = store.get_incoming_webhook_to_post(hook.id, "order.paid").await.unwrap();
        assert_eq!(other.checks.schema_version, None);
        assert!(matches!(store.get_incoming_webhook_to_post(IncomingWebhookId::new(), "message.created").await, Err(StorageError::NotFound)));
        let message = |text: &str| Message {
            id: MessageId::new(),
            space_id: s.id,
            channel_id: channel.id,
            text: text.into(),
            attachments: Some(json!([{"title": "a"}])),
            source_kind: MessageSourceKind::IncomingWebhook,
            source_id: Some(hook.id.to_string()),
            created_at: NOW,
        };
        let limits = ClaimLimits { per_destination: 5, retries: i64::MAX, plans: None };
        let mut e = event(s.id, "message.created");
        e.claim = Some(ClaimNext { destinations: Vec::new(), ahead: Vec::new(), limit: 16, lease_margin_ms: 60_000, limits });
        let now = server::clock::now_ms();
        let replay = || Some(IncomingReplay { webhook_id: hook.id, message_id: "msg-1" });
        let first = message("hello");
        let published = store.post_message(&first, &e, replay(), now).await.unwrap();
        let Some(Published::Created { deliveries, destinations, claimed, .. }) = published else {
            panic!("expected a new message, got {published:?}");
        };
        assert_eq!((deliveries, destinations), (1, vec![dst.id]));
        if db.url.starts_with("sqlite") {
            let claimed = claimed.expect("SQLite claims in the message's transaction");
            assert_eq!(claimed.deliveries.len(), 1);
            assert_eq!(claimed.deliveries[0].event_id, e.event.id);
            assert_eq!(claimed.deliveries[0].status, DeliveryStatus::Sending);
        } else {
            assert_eq!(claimed, None);
        }
        // The same request again writes nothing; another ID of the same webhook does.
        let again = store.post_message(&message("hello"), &event(s.id, "message.created"), replay(), now).await.unwrap();
        assert_eq!(again, None);
        let other = IncomingReplay { webhook_id: hook.id, message_id: "msg-2" };
        let second = message("again");
        assert!(store.post_message(&second, &event(s.id, "message.created"), Some(other), now).await.unwrap().is_some());
        let listed = store.list_messages(channel.id, Page::first(10)).await.unwrap();
        assert_eq!(listed, vec![second, first]);
    }
}

on_both_backends! {
    /// A group of finished attempts and the claim of the slots they free, in one
    /// transaction on SQLite (eight attempts a string, the claim with the last ones): every
    /// attempt is recorded, and each destination's freed slots are filled from its own
    /// waiting deliveries, never past its cap. PostgreSQL records and claims nothing.
    async fn finished_attempts_claim_the_slots_they_free(db) {
        use server::storage::{ClaimLimits, ClaimNext};
        let store = db.storage.as_ref();
        let s = space(store, Plan::Free).await;
        let dsts: Vec<Destination> = (0..3).map(|_| destination(s.id, None, DestinationStatus::Active)).collect();
        for d in &dsts {
            store.create_destination(d, None).await.unwrap();
        }
        for _ in 0..20 {
            store.publish_event(&event(s.id, "message.created"), NOW).await.unwrap();
        }
        let limits = ClaimLimits { per_destination: 4, retries: i64::MAX, plans: None };
        let now = server::clock::now_ms();
        let first = store.claim(now, 100, 60_000, &limits).await.unwrap().deliveries;
        assert_eq!(first.len(), 12, "four to each of three destinations");
        let rule = AutoDisable { after: i64::MAX, warn_at: Vec::new() };
        let next = |limit: i64| ClaimNext {
            destinations: dsts.iter().map(|d| d.id).collect(),
            ahead: Vec::new(),
            limit,
            lease_margin_ms: 60_000,
            limits,
        };
        let sqlite = db.url.starts_with("sqlite");
        // Twelve attempts: a string of four, then eight with the claim.
        let (effects, claimed) = store.finish_and_claim(&succeeded(&first), &rule, now, &next(12)).await.unwrap();
        assert_eq!(effects.len(), 12);
        assert!(effects.iter().all(|e| e.applied));
        let second = claimed.deliveries;
        if !sqlite {
            assert!(second.is_empty());
            return;
        }
        assert_eq!(second.len(), 12);
        for d in &dsts {
            assert_eq!(second.iter().filter(|x| x.destination_id == d.id).count(), 4);
            assert!(claimed.destinations.contains_key(&d.id));
        }
        assert!(second.iter().all(|x| x.status == DeliveryStatus::Sending && !first.iter().any(|f| f.id == x.id)));
        assert!(second.iter().all(|x| claimed.events.contains_key(&x.id)));
        // Three attempts (one string): each destination has twelve left, one slot freed.
        let three: Vec<Delivery> = dsts.iter().map(|d| second.iter().find(|x| x.destination_id == d.id).unwrap().clone()).collect();
        let (effects, claimed) = store.finish_and_claim(&succeeded(&three), &rule, now, &next(3)).await.unwrap();
        assert_eq!(effects.len(), 3);
        assert!(effects.iter().all(|e| e.applied && e.more_due == Some(true)));
        assert_eq!(claimed.deliveries.len(), 3);
        for d in &dsts {
            assert_eq!(claimed.deliveries.iter().filter(|x| x.destination_id == d.id).count(), 1);
        }
        // At the cap already: a group's claim takes nothing more than the slots freed.
        let (_, none) = store.finish_and_claim(&[], &rule, now, &next(3)).await.unwrap();
        assert!(none.deliveries.is_empty());
        // Claimed ahead for the first destination: up to `Ahead::caps` times its cap of four in
        // `sending` (four are), of the eleven it has left; the others stay at their cap.
        let room = (server::storage::SQLITE_AHEAD.caps as usize * 4 - 4).min(11);
        assert!(room > 4);
        let ahead = ClaimNext { ahead: vec![dsts[0].id], ..next(100) };
        let (_, more) = store.finish_and_claim(&[], &rule, now, &ahead).await.unwrap();
        assert_eq!(more.deliveries.len(), room);
        assert!(more.deliveries.iter().all(|x| x.destination_id == dsts[0].id));
        let (_, none) = store.finish_and_claim(&[], &rule, now, &ahead).await.unwrap();
        assert!(none.deliveries.is_empty(), "at its caps claimed ahead, or none left");
    }
}

on_both_backends! {
    /// A group of records larger than a string's eight (SQLite: the first eight with the
    /// `BEGIN`, then eight a round trip, the last with the `COMMIT`) is written whole and
    /// once: every attempt applied, every delivery finished, and recording them again
    /// applies none.
    async fn a_group_of_records_larger_than_a_string_is_written_whole_and_once(db) {
        use server::storage::ClaimLimits;
        let store = db.storage.as_ref();
        let s = space(store, Plan::Free).await;
        let d = destination(s.id, None, DestinationStatus::Active);
        store.create_destination(&d, None).await.unwrap();
        for _ in 0..20 {
            store.publish_event(&event(s.id, "message.created"), NOW).await.unwrap();
        }
        let limits = ClaimLimits { per_destination: 20, retries: i64::MAX, plans: None };
        let now = server::clock::now_ms();
        let claimed = store.claim(now, 100, 60_000, &limits).await.unwrap().deliveries;
        assert_eq!(claimed.len(), 20);
        let rule = AutoDisable { after: i64::MAX, warn_at: Vec::new() };
        let effects = store.finish_attempts(&succeeded(&claimed), &rule, now).await.unwrap();
        assert_eq!(effects.len(), 20);
        assert!(effects.iter().all(|e| e.applied));
        for c in &claimed {
            let stored = store.get_delivery_by_id(c.id).await.unwrap();
            assert_eq!(stored.status, DeliveryStatus::Succeeded);
            assert_eq!(stored.attempts, 1);
        }
        let again = store.finish_attempts(&succeeded(&claimed), &rule, now).await.unwrap();
        assert!(again.iter().all(|e| !e.applied), "recorded once");
    }
}

on_both_backends! {
    /// A REST publish reads its type's subscribers with its checks and, published alone,
    /// writes in one round trip if they have not changed since (SQLite: a string of
    /// statements; PostgreSQL: one statement). If they have (one disabled, one created),
    /// that round trip writes and claims nothing, and the publish writes the fan-out of the
    /// moment of its write, as when they are read in the write's transaction.
    async fn a_publish_writes_the_fan_out_of_the_moment_of_its_write_whatever_it_read_before(db) {
        use server::storage::{ClaimLimits, ClaimNext};
        let store = db.storage.as_ref();
        let (s, a, b) = with_order_subscribers(store).await;
        let elsewhere = destination(s.id, Some(&["invoice.paid"]), DestinationStatus::Active);
        store.create_destination(&elsewhere, None).await.unwrap();
        let read = || async {
            store.publish_checks_with_key("hash-1", s.id, "order.paid").await.unwrap().1.subscribers
        };
        let limits = ClaimLimits { per_destination: 5, retries: i64::MAX, plans: None };
        let publish = |subscribers| {
            let mut new = event(s.id, "order.paid");
            new.subscribers = subscribers;
            new.claim = Some(ClaimNext { destinations: Vec::new(), ahead: Vec::new(), limit: 16, lease_margin_ms: 60_000, limits });
            new
        };
        let sorted = |mut ids: Vec<DestinationId>| {
            ids.sort();
            ids
        };
        let now = server::clock::now_ms();

        // As read: written and claimed as read.
        let subscribers = read().await;
        assert!(subscribers.is_some(), "read with the checks");
        let first = publish(subscribers);
        let published = store.publish_events(std::slice::from_ref(&first), now).await.unwrap().pop().unwrap().unwrap();
        let Published::Created { deliveries, skipped, destinations, claimed, .. } = published else {
            panic!("expected a new event, got {published:?}");
        };
        assert_eq!((deliveries, skipped), (2, 0));
        assert_eq!(sorted(destinations), sorted(vec![a.id, b.id]));
        if let Some(claimed) = claimed {
            assert_eq!(claimed.deliveries.len(), 2);
            assert!(claimed.deliveries.iter().all(|d| d.event_id == first.event.id));
        }

        // One waiting for `a` already; then the subscribers change between the read and
        // the write: `b` disabled, `c` created.
        let waiting = event(s.id, "order.sent");
        store.publish_event(&waiting, now).await.unwrap();
        let stale = read().await;
        store.set_destination_status(s.id, b.id, DestinationStatus::Inactive, None, NOW, None).await.unwrap();
        let c = destination(s.id, Some(&["order.paid"]), DestinationStatus::Active);
        store.create_destination(&c, None).await.unwrap();
        let second = publish(stale);
        let published = store.publish_events(std::slice::from_ref(&second), now).await.unwrap().pop().unwrap().unwrap();
        let Published::Created { deliveries, skipped, destinations, claimed, .. } = published else {
            panic!("expected a new event, got {published:?}");
        };
        assert_eq!((deliveries, skipped), (2, 1), "to `a` and `c`; `b` skips it");
        assert_eq!(sorted(destinations), sorted(vec![a.id, c.id]));
        assert_eq!(store.get_destination(s.id, b.id).await.unwrap().skipped_events, 1);
        if let Some(claimed) = claimed {
            // The string that wrote nothing claimed nothing: the one that wrote claimed
            // the waiting delivery and the new two.
            let mut events: Vec<EventId> = claimed.deliveries.iter().map(|d| d.event_id).collect();
            events.sort();
            let mut expected = vec![waiting.event.id, second.event.id, second.event.id];
            expected.sort();
            assert_eq!(events, expected);
        }
        // Nothing was left half-written: one event each, and nothing else is due.
        let nothing = store.claim_for(&named(&[a.id, b.id, c.id, elsewhere.id], 100, limits), now).await.unwrap();
        if db.url.starts_with("sqlite") {
            assert!(nothing.deliveries.is_empty(), "{nothing:?}");
        }
    }
}

on_both_backends! {
    /// Checks kept in memory are checked again by the write: unchanged, the publish is
    /// written (alone and in a group); once the key is revoked, it is refused as stale and
    /// nothing of it is written, while a publish of the same group that read its checks
    /// goes the usual way.
    async fn a_publish_whose_checks_from_memory_are_out_of_date_is_refused_as_stale(db) {
        let store = db.storage.as_ref();
        let (s, a, b) = with_order_subscribers(store).await;
        let now = server::clock::now_ms();
        let read = store.publish_checks_with_key("hash-1", s.id, "order.paid").await.unwrap();
        assert!(!read.1.subscribers.as_ref().unwrap().cached(), "read");
        let (key, kept) = store.publish_checks_cached("hash-1", s.id, "order.paid").await.unwrap();
        assert_eq!(key.id, read.0.id);
        assert!(kept.subscribers.as_ref().unwrap().cached(), "from memory");
        let publish = |subscribers: Option<server::storage::ReadSubscribers>| {
            let mut new = event(s.id, "order.paid");
            new.subscribers = subscribers;
            new
        };
        let one = publish(kept.subscribers.clone());
        let answers = store.publish_events(std::slice::from_ref(&one), now).await.unwrap();
        assert!(matches!(answers[0], Ok(Published::Created { deliveries: 2, .. })), "{answers:?}");
        let two = [publish(kept.subscribers.clone()), publish(kept.subscribers.clone())];
        let answers = store.publish_events(&two, now).await.unwrap();
        assert!(answers.iter().all(|a| matches!(a, Ok(Published::Created { deliveries: 2, .. }))), "{answers:?}");

        store.revoke_api_key(s.id, key.id, now, None).await.unwrap();
        let stale = publish(kept.subscribers.clone());
        let answers = store.publish_events(std::slice::from_ref(&stale), now).await.unwrap();
        assert!(matches!(answers[0], Err(StorageError::Stale)), "{answers:?}");
        let fresh = publish(read.1.subscribers.clone());
        let group = [publish(kept.subscribers.clone()), fresh.clone()];
        let answers = store.publish_events(&group, now).await.unwrap();
        assert!(matches!(answers[0], Err(StorageError::Stale)), "{answers:?}");
        assert!(matches!(answers[1], Ok(Published::Created { deliveries: 2, .. })), "{answers:?}");
        for refused in [&stale.event, &group[0].event] {
            assert!(matches!(store.get_event(s.id, refused.id).await, Err(StorageError::NotFound)));
        }
        assert!(store.get_event(s.id, fresh.event.id).await.is_ok());
        for d in [a.id, b.id] {
            let to = DeliveryFilter { space_id: Some(s.id), destination_id: Some(d), ..Default::default() };
            assert_eq!(store.list_deliveries(&to, Page::first(100)).await.unwrap().len(), 4);
        }
        // Read afresh now: no key, and nothing kept for it.
        assert!(matches!(store.publish_checks_with_key("hash-1", s.id, "order.paid").await, Err(StorageError::NotFound)));
        assert!(matches!(store.publish_checks_cached("hash-1", s.id, "order.paid").await, Err(StorageError::NotFound)));
    }
}

on_both_backends! {
    /// A publish is on disk before it is answered. On SQLite its commit does not sync the
    /// WAL while the write gate is held; the publish syncs it after, before it answers:
    /// alone, in a group, and a replay of its idempotency key alike.
    async fn a_publish_is_synced_to_disk_before_it_is_answered(db) {
        let store = db.storage.as_ref();
        let s = space(store, Plan::Pro).await;
        let d = destination(s.id, None, DestinationStatus::Active);
        store.create_destination(&d, None).await.unwrap();
        let sqlite = db.url.starts_with("sqlite");
        let (all, before) = db.storage.synced().await;
        assert!(all);

        let alone = store.publish_events(&[event(s.id, "order.paid")], NOW).await.unwrap();
        assert!(matches!(alone[0], Ok(Published::Created { deliveries: 1, .. })));
        let (all, after_alone) = db.storage.synced().await;
        assert!(all, "the publish's commit is synced");
        assert_eq!(after_alone > before, sqlite, "SQLite syncs after the commit");

        let group: Vec<NewEvent> = (0..3).map(|_| event(s.id, "order.paid")).collect();
        let answers = store.publish_events(&group, NOW).await.unwrap();
        assert!(answers.iter().all(|a| matches!(a, Ok(Published::Created { .. }))));
        let (all, after_group) = db.storage.synced().await;
        assert!(all);
        assert_eq!(after_group > after_alone, sqlite);

        let keyed = NewEvent { idempotency_key: Some("k-1".into()), ..event(s.id, "order.paid") };
        store.publish_events(std::slice::from_ref(&keyed), NOW).await.unwrap();
        let again = NewEvent { event: Event { id: EventId::new(), ..keyed.event.clone() }, ..keyed };
        let replayed = store.publish_events(&[again], NOW).await.unwrap();
        assert!(matches!(replayed[0], Ok(Published::Replayed { .. })), "{replayed:?}");
        assert!(db.storage.synced().await.0);
    }
}
