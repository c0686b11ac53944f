//! The storage queries added for the console (issue 7): counts, the histogram, the
//! backlog, failing destinations and rate windows, on both backends.

use std::sync::Arc;

use crate::on_both_backends;
use server::domain::*;
use server::storage::{DeliveryFilter, NewEvent, Slot, TestStorage};

async fn exercise(s: Arc<dyn TestStorage>) {
    let now = server::clock::now_ms();
    let space = server::ops::tenants::create_space(s.as_ref(), "Stats", Plan::Free)
        .await
        .unwrap()
        .space;
    let d = Destination {
        id: DestinationId::new(),
        space_id: space.id,
        url: "https://example.com/hook".into(),
        description: String::new(),
        event_types: None,
        secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into(),
        previous_secret: None,
        previous_secret_expires_at: None,
        rate_limit: None,
        max_attempts: 8,
        timeout_seconds: 30,
        retry_policy: serde_json::json!({"preset": "partyflow"}),
        transformation: None,
        status: DestinationStatus::Active,
        consecutive_dead_letters: 0,
        skipped_events: 0,
        disabled_reason: None,
        created_at: now,
        updated_at: now,
        filter: None,
        filtered_events: 0,
        ordering: DeliveryOrdering::Unordered,
        headers: CustomHeaders::default(),
        name: None,
    };
    s.create_destination(&d, None).await.unwrap();
    for i in 0..3 {
        let event = Event {
            id: EventId::new(),
            space_id: space.id,
            event_type: "ping".into(),
            payload: serde_json::json!({ "i": i }),
            created_at: now,
            deliver_at: None,
        };
        s.publish_event(
            &NewEvent {
                event,
                idempotency_key: None,
                request_hash: String::new(),
                filters: Default::default(),
                claim: None,
                subscribers: None,
            },
            now,
        )
        .await
        .unwrap();
    }

    let all = DeliveryFilter {
        space_id: Some(space.id),
        ..Default::default()
    };
    assert_eq!(s.count_deliveries(&all, None, 100).await.unwrap(), 3);
    assert_eq!(
        s.count_deliveries(&all, None, 2).await.unwrap(),
        2,
        "the count stops at the cap"
    );
    let failed = DeliveryFilter {
        status: Some(DeliveryStatus::Failed),
        ..all.clone()
    };
    assert_eq!(s.count_deliveries(&failed, None, 100).await.unwrap(), 0);
    let before = DeliveryId::lower_bound_at(now - 1);
    assert_eq!(
        s.count_deliveries(&all, Some(before), 100).await.unwrap(),
        0
    );

    let hist = s
        .delivery_histogram(None, now - 60_000, 60_000)
        .await
        .unwrap();
    let total: i64 = hist.iter().map(|r| r.4).sum();
    assert_eq!(total, 3);
    assert!(hist
        .iter()
        .all(|r| r.0 == space.id && r.2 == DeliveryStatus::Pending && r.1 % 60_000 == 0));
    assert!(s
        .delivery_histogram(Some(SpaceId::new()), now - 60_000, 60_000)
        .await
        .unwrap()
        .is_empty());

    let backlog = s.delivery_backlog().await.unwrap();
    assert_eq!(backlog, vec![(space.id, 3, 0, 0)]);
    s.set_destination_status(
        space.id,
        d.id,
        DestinationStatus::Inactive,
        Some("test"),
        now,
        None,
    )
    .await
    .unwrap();
    assert_eq!(
        s.delivery_backlog().await.unwrap(),
        vec![(space.id, 3, 3, 0)]
    );
    let failing = s.failing_destinations(10).await.unwrap();
    assert_eq!(failing.len(), 1);
    assert_eq!(s.get_destination_by_id(d.id).await.unwrap().url, d.url);
    assert!(s.get_destination_by_id(DestinationId::new()).await.is_err());
    assert_eq!(s.count_failed_unresent(d.id).await.unwrap(), 0);

    assert_eq!(
        s.count_rate_events("login:x", 60_000, now).await.unwrap(),
        0
    );
    assert_eq!(
        s.take_rate_slot("login:x", 2, 60_000, now).await.unwrap(),
        Slot::Granted
    );
    assert_eq!(
        s.count_rate_events("login:x", 60_000, now + 1)
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        s.count_rate_events("login:x", 60_000, now + 120_000)
            .await
            .unwrap(),
        0
    );
}

on_both_backends! {
    async fn console_queries_work(db) {
        exercise(db.storage.clone()).await;
    }
}
