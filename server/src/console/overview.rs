//! The overview's numbers: deliveries created per minute (last hour) or per hour
//! (last day), by their current status and last error class, per space and overall;
//! the backlog; failing destinations. One bounded range scan over the time-sorted
//! delivery IDs, one grouped count of unfinished deliveries.

use std::collections::HashMap;

use app::error::ConsoleError;
use app::port::OverviewPort;
use app::types::*;

use super::{internal, require_role, Backend};
use crate::clock::now_ms;
use crate::domain::Role;
use crate::domain::*;

/// Failing destinations listed on the overview (the count covers up to [`FAILING_COUNTED`]).
const FAILING_SHOWN: usize = 10;
const FAILING_COUNTED: i64 = 500;
/// Spaces with a card of their own, the busiest first.
const SPACES_SHOWN: usize = 24;

/// Bucket size and count for a window name.
pub fn window(name: &str) -> (&'static str, i64, i64) {
    match name {
        "day" => ("day", 3_600_000, 24),
        _ => ("hour", 60_000, 60),
    }
}

fn add(b: &mut Bucket, status: DeliveryStatus, n: i64) {
    match status {
        DeliveryStatus::Succeeded => b.succeeded += n,
        DeliveryStatus::Failed => b.failed += n,
        DeliveryStatus::Retrying => b.retrying += n,
        DeliveryStatus::Pending | DeliveryStatus::Sending => b.waiting += n,
        DeliveryStatus::Cancelled => b.cancelled += n,
    }
}

/// Dense buckets from `since`, and error classes by count, from sparse histogram rows.
fn stats(
    rows: &[(SpaceId, UnixMs, DeliveryStatus, Option<ErrorClass>, i64)],
    since: UnixMs,
    bucket_ms: i64,
    count: i64,
) -> (Vec<Bucket>, Vec<(String, i64)>) {
    let mut buckets: Vec<Bucket> = (0..count)
        .map(|i| Bucket {
            start: since + i * bucket_ms,
            ..Default::default()
        })
        .collect();
    let mut classes: HashMap<ErrorClass, i64> = HashMap::new();
    for (_, start, status, class, n) in rows {
        let i = (start - since).div_euclid(bucket_ms);
        if let Some(b) = usize::try_from(i).ok().and_then(|i| buckets.get_mut(i)) {
            add(b, *status, *n);
        }
        if let (Some(class), false) = (class, *status == DeliveryStatus::Succeeded) {
            *classes.entry(*class).or_default() += n;
        }
    }
    let mut classes: Vec<(String, i64)> = classes
        .into_iter()
        .map(|(c, n)| (c.as_str().to_owned(), n))
        .collect();
    classes.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    (buckets, classes)
}

#[async_trait::async_trait]
impl OverviewPort for Backend {
    async fn overview(
        &self,
        actor: &SessionUser,
        window_name: &str,
    ) -> Result<Overview, ConsoleError> {
        require_role(actor, Role::Support)?;
        let (name, bucket_ms, count) = window(window_name);
        let now = now_ms();
        let since = (now.div_euclid(bucket_ms) - (count - 1)) * bucket_ms;
        let rows = self
            .storage
            .delivery_histogram(None, since, bucket_ms)
            .await
            .map_err(internal)?;
        let backlog = self.storage.delivery_backlog().await.map_err(internal)?;
        let failing = self
            .storage
            .failing_destinations(FAILING_COUNTED)
            .await
            .map_err(internal)?;
        let spaces = self.space_names().await?;

        let (buckets, classes) = stats(&rows, since, bucket_ms, count);
        let mut overall = SpaceStats {
            space_id: None,
            name: "All spaces".into(),
            buckets,
            error_classes: classes,
            failing_destinations: failing.len() as i64,
            ..Default::default()
        };
        for (_, waiting, paused, sending) in &backlog {
            overall.waiting += waiting;
            overall.paused += paused;
            overall.sending += sending;
        }

        let mut per_space = Vec::new();
        for space in spaces.values() {
            let mine: Vec<_> = rows.iter().filter(|r| r.0 == space.id).cloned().collect();
            let (buckets, classes) = stats(&mine, since, bucket_ms, count);
            let mut s = SpaceStats {
                space_id: Some(space.id.to_string()),
                name: space.name.clone(),
                buckets,
                error_classes: classes,
                failing_destinations: failing.iter().filter(|d| d.space_id == space.id).count()
                    as i64,
                ..Default::default()
            };
            if let Some((_, waiting, paused, sending)) = backlog.iter().find(|b| b.0 == space.id) {
                (s.waiting, s.paused, s.sending) = (*waiting, *paused, *sending);
            }
            per_space.push(s);
        }
        per_space.sort_by(|a, b| {
            (b.total().total() + b.waiting)
                .cmp(&(a.total().total() + a.waiting))
                .then(a.name.cmp(&b.name))
        });
        per_space.truncate(SPACES_SHOWN);

        let mut failing_views = Vec::new();
        for d in failing.iter().take(FAILING_SHOWN) {
            let name = spaces
                .get(&d.space_id)
                .map(|s| s.name.as_str())
                .unwrap_or("");
            failing_views.push(self.destination_view(d, name).await?);
        }
        Ok(Overview {
            window: name.to_owned(),
            bucket_ms,
            since,
            overall,
            spaces: per_space,
            failing: failing_views,
            unread: self
                .storage
                .count_unread_notifications()
                .await
                .map_err(internal)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparse_counts_fill_dense_buckets_and_failures_rank_by_class() {
        let s = SpaceId::new();
        let rows = vec![
            (s, 60_000, DeliveryStatus::Succeeded, None, 5),
            (s, 60_000, DeliveryStatus::Failed, Some(ErrorClass::Http), 2),
            (
                s,
                180_000,
                DeliveryStatus::Retrying,
                Some(ErrorClass::Timeout),
                3,
            ),
            (s, 180_000, DeliveryStatus::Pending, None, 1),
            // Outside the window: ignored.
            (s, 900_000, DeliveryStatus::Failed, Some(ErrorClass::Dns), 9),
        ];
        let (buckets, classes) = stats(&rows[..4], 0, 60_000, 4);
        assert_eq!(buckets.len(), 4);
        assert_eq!(buckets[1].succeeded, 5);
        assert_eq!(buckets[1].failed, 2);
        assert_eq!(buckets[3].retrying, 3);
        assert_eq!(buckets[3].waiting, 1);
        assert_eq!(buckets[0].total(), 0);
        assert_eq!(
            classes,
            vec![("timeout".to_owned(), 3), ("http".to_owned(), 2)]
        );
        let (buckets, _) = stats(&rows, 0, 60_000, 4);
        assert_eq!(buckets.iter().map(Bucket::total).sum::<i64>(), 11);
    }
}
