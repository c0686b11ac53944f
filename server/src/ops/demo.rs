//! The demo space (issue 16, docs D17): `partyflow demo` makes a space called "Demo"
//! whose destinations point at the sample receiver built into the server
//! (`crate::demo`), one per way a receiver behaves, and marks it so the server sends it
//! sample traffic for a while; `partyflow demo --remove` deletes it with everything in
//! it. Once: a second `partyflow demo` says the space exists.

use serde_json::json;

use super::destinations::{self, NewSettings, ProgramCheck};
use super::tenants;
use super::OpsError;
use crate::demo;
use crate::dispatch::transform::TransformError;
use crate::domain::*;
use crate::storage::{Storage, StorageError};

/// The demo space's name.
pub const SPACE_NAME: &str = "Demo";

/// The reshaping destination's program: it fails on an order without a total.
pub const RESHAPE: &str = r#"{order: .order, total: (.total | if . == null then error("the order has no total") else . end)}"#;

/// What `partyflow demo` did.
#[derive(Debug)]
pub enum Created {
    /// A new demo space; its traffic runs until `until`.
    New {
        space_id: SpaceId,
        api_key: String,
        until: UnixMs,
    },
    /// There already is one; nothing changed.
    Exists { space_id: SpaceId },
}

/// The demo destinations for the receiver at `base` (`crate::demo::receiver_base`):
/// healthy; flaky (503 with `Retry-After`, retried); missing (404: a dead-letter streak);
/// slow and rate-limited (a timeout now and then, `rate_limited` when events come in
/// twos); and one that reshapes orders with a program that fails on some (class
/// `transformation`).
pub fn destinations(base: &str) -> Vec<NewSettings> {
    let at = |kind: &str| demo::receiver_url(base, kind);
    let quick_retries = json!({"preset": "partyflow", "initialMs": 1000, "maxMs": 5000});
    vec![
        NewSettings {
            name: Some("Healthy shop".into()),
            description: Some("The demo receiver: always 200.".into()),
            url: at("healthy"),
            ..Default::default()
        },
        NewSettings {
            name: Some("Flaky CRM".into()),
            description: Some("Answers 503 with Retry-After every other time: retried.".into()),
            url: at("flaky"),
            max_attempts: Some(4),
            retry_policy: Some(quick_retries.clone()),
            ..Default::default()
        },
        NewSettings {
            name: Some("Missing endpoint".into()),
            description: Some("Answers 404: every delivery is dead-lettered.".into()),
            url: at("missing"),
            ..Default::default()
        },
        NewSettings {
            name: Some("Slow warehouse".into()),
            description: Some(
                "Takes its time (too long every fourth time) and takes one order a second.".into(),
            ),
            url: at("slow"),
            event_types: Some(vec!["order.*".into()]),
            rate_limit: Some(RateLimit {
                count: 1,
                period: RatePeriod::Second,
            }),
            timeout_seconds: Some(1),
            max_attempts: Some(2),
            retry_policy: Some(quick_retries),
            ..Default::default()
        },
        NewSettings {
            name: Some("Reshaped orders".into()),
            description: Some("Paid orders, reshaped by a jq program that needs a total.".into()),
            url: at("healthy"),
            event_types: Some(vec!["order.paid".into()]),
            transformation: Some(RESHAPE.into()),
            ..Default::default()
        },
    ]
}

/// The demo's own program is known; it is compiled by the unit test below, not here
/// (the CLI has no sandbox).
struct OwnPrograms;

impl ProgramCheck for OwnPrograms {
    async fn check(&self, _program: &str) -> Result<(), TransformError> {
        Ok(())
    }
}

/// Creates the demo space with its destinations (receiver at `base`), its traffic
/// running from `now` for `duration_ms`; or says it exists.
pub async fn create(
    store: &dyn Storage,
    base: &str,
    now: UnixMs,
    duration_ms: i64,
) -> Result<Created, OpsError> {
    if let Some(space_id) = store.demo_space().await? {
        return Ok(Created::Exists { space_id });
    }
    let created = tenants::create_space(store, SPACE_NAME, Plan::Pro).await?;
    let space_id = created.space.id;
    for settings in destinations(base) {
        let d = destinations::create(space_id, settings, now, &OwnPrograms)
            .await
            .map_err(|e| OpsError::invalid(e.code, e.message))?;
        store.create_destination(&d, None).await?;
    }
    let until = now + duration_ms;
    store.set_demo_until(space_id, until).await?;
    Ok(Created::New {
        space_id,
        api_key: created.api_key,
        until,
    })
}

/// Deletes the demo space and everything in it; `None` when there is none.
pub async fn remove(store: &dyn Storage) -> Result<Option<SpaceId>, OpsError> {
    let Some(space_id) = store.demo_space().await? else {
        return Ok(None);
    };
    // The delete cascades through rows the engine may be writing at that moment (the
    // demo's traffic still flows): on PostgreSQL the two can deadlock, and the database
    // aborts one of them; the delete is tried again, a few times.
    let mut tries = 0;
    loop {
        tries += 1;
        match store.delete_space(space_id).await {
            Ok(()) | Err(StorageError::NotFound) => return Ok(Some(space_id)),
            Err(e) if is_deadlock(&e) && tries < 5 => {
                tracing::info!("demo: removing the demo space met a deadlock; trying again");
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Whether the database aborted the statement to break a deadlock (PostgreSQL's
/// SQLSTATE 40P01).
fn is_deadlock(e: &StorageError) -> bool {
    matches!(e, StorageError::Other(sqlx::Error::Database(db)) if db.code().as_deref() == Some("40P01"))
}

/// When the round after one sent at `now` is due, rounds `traffic_ms` apart: a
/// twentieth early, so the sending instance's own next tick (a timer on the monotonic
/// clock, read against the wall clock in whole milliseconds) is never refused by a
/// millisecond and the round skipped. Every instance ticks; the one whose
/// `claim_demo_round` moves the space to this time sends the round (docs D17).
pub fn next_round_at(now: UnixMs, traffic_ms: u64) -> UnixMs {
    let traffic = i64::try_from(traffic_ms).unwrap_or(i64::MAX);
    now.saturating_add(traffic - traffic / 20)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_demo_destination_passes_the_rules_a_tenants_would() {
        let base = demo::receiver_base("127.0.0.1:3000".parse().unwrap());
        let all = destinations(&base);
        assert_eq!(all.len(), 5);
        for s in all {
            let d = destinations::create(SpaceId::new(), s, 1, &destinations::InProcess)
                .await
                .unwrap();
            assert!(
                d.url.starts_with("http://127.0.0.1:3000/_demo/receiver/"),
                "{}",
                d.url
            );
            assert!(d.name.is_some());
        }
    }

    #[test]
    fn the_next_round_is_one_interval_later_a_twentieth_early() {
        assert_eq!(next_round_at(10_000, 2_000), 11_900);
        assert_eq!(next_round_at(10_000, 150), 10_143);
        // An instance ticking on time gets the next round; one ticking within the same
        // interval, earlier than that, does not.
        let next = next_round_at(0, 2_000);
        assert!(next <= 2_000 && next > 1_000);
        assert_eq!(next_round_at(i64::MAX - 1, 2_000), i64::MAX);
    }
}
