//! PostgreSQL, for scale-out: several server instances share one database. No write
//! gate (row locks, many writers); claims take turns through an advisory lock.

use sqlx::postgres::{PgPool, PgPoolOptions};

use super::queue::{
    claim_for_tail, claim_sql, claimed_from, fifo_head, ClaimedOne, ClaimedRow, NO_BITMAP_SCANS,
};
use super::reads::{Reads, PING_AFTER_IDLE};
use super::store::{Dialect, Store};
use super::write::{WriteTx, Writer, Writes};
use super::{Backend, ClaimLimits, ClaimNext, Claimed, RawPool, Result, StorageError};
use crate::domain::*;

/// When a connection plans its claims afresh ([`Postgres::begin_claim`]): a second after
/// it opened, then twice as long after each time, up to once a minute.
const REPLAN_FIRST: std::time::Duration = std::time::Duration::from_secs(1);
const REPLAN_MOST: std::time::Duration = std::time::Duration::from_secs(60);

/// The advisory lock that serializes claims across instances.
const CLAIM_LOCK: i64 = 0x5046_4c4f_5700_0001;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/postgres");

/// PostgreSQL's dialect.
#[derive(Debug, Clone, Copy)]
pub struct Postgres;

impl Store<Postgres> {
    /// Connects to the database at `url`: one set of kept connections for everything
    /// (PostgreSQL commits are durable either way), reads and writes alike
    /// ([`super::reads`]: no ping per use, one after half a second idle).
    pub async fn connect(url: &str) -> anyhow::Result<Self> {
        let pool = PgPoolOptions::new()
            .max_connections(16)
            .acquire_timeout(super::ACQUIRE_TIMEOUT)
            .connect(url)
            .await?;
        let reads = Reads::new(pool.clone(), Some(PING_AFTER_IDLE));
        let writes = Writes::new(pool.clone(), pool, false, None).lending(reads.kept());
        Ok(Store::new(reads.clone(), reads, writes))
    }
}

impl Dialect for Postgres {
    type DB = sqlx::Postgres;

    const BACKEND: Backend = Backend::Postgres;

    /// PostgreSQL's planner has statistics: no index named.
    const DUE_INDEX: &'static str = "";

    async fn migrate(pool: &PgPool) -> Result<()> {
        MIGRATOR
            .run(pool)
            .await
            .map_err(|e| StorageError::Other(e.into()))
    }

    /// Serializes changes to `users` that depend on the other users (the first admin,
    /// the last admin): under READ COMMITTED two of them could each see the other's
    /// row as it was and both pass. Reads and sign-ins are not blocked.
    async fn lock_users(tx: &mut WriteTx<'_, sqlx::Postgres>) -> Result<()> {
        sqlx::query("LOCK TABLE users IN SHARE ROW EXCLUSIVE MODE")
            .execute(&mut **tx)
            .await?;
        Ok(())
    }

    /// Claims from every instance take turns ([`Postgres::begin_claim`]), so the
    /// per-destination in-flight count they read is exact; a claim takes milliseconds.
    async fn claim(
        mut writer: Writer<'_, sqlx::Postgres>,
        now: UnixMs,
        limit: i64,
        lease_margin_ms: i64,
        limits: &ClaimLimits,
        claimer: &str,
    ) -> Result<Claimed> {
        let mut tx = Self::begin_claim(&mut writer).await?;
        let batch =
            Self::claim_all_in(&mut tx, now, limit, lease_margin_ms, limits, claimer).await?;
        let claimed = Self::end_claim(tx, batch, limits, now).await?;
        Ok(Self::with_destinations_after(writer, claimed).await)
    }

    async fn claim_for(
        mut writer: Writer<'_, sqlx::Postgres>,
        next: &ClaimNext,
        now: UnixMs,
        claimer: &str,
    ) -> Result<Claimed> {
        let mut tx = Self::begin_claim(&mut writer).await?;
        let mut batch = Self::claim_named_in(&mut tx, next, now, claimer).await?;
        batch.sort_by_key(|c| (c.delivery.next_attempt_at, c.delivery.id));
        let claimed = Self::end_claim(tx, batch, &next.limits, now).await?;
        Ok(Self::with_destinations_after(writer, claimed).await)
    }

    const AHEAD: super::Ahead = super::POSTGRES_AHEAD;

    fn raw_pool(pool: &PgPool) -> RawPool {
        RawPool::Postgres(pool.clone())
    }
}

impl Postgres {
    /// Opens a claim's transaction on `writer`, in one round trip: claims take turns across
    /// instances (an advisory lock held to the commit), so the in-flight counts they read
    /// are exact; and the transaction's statements use generic plans. A claim's statement
    /// is planned in ~0.6 ms and run in ~0.1 ms, and PostgreSQL would plan it afresh on
    /// every run (its custom plans look cheaper to it than the generic one), which made
    /// planning most of the claim's time.
    ///
    /// A generic plan is made once per connection, for the table as it was then, and kept
    /// until the table's statistics change. Made while `deliveries` was nearly empty (a new
    /// database, before autovacuum's first `ANALYZE`), the choice of each destination's
    /// earliest deliveries could read its whole backlog and sort it (measured: 40 % of a
    /// benchmark's claims, ~0.9 ms each, growing with the backlog). So a connection drops
    /// its plans now and then ([`REPLAN_FIRST`], doubling up to [`REPLAN_MOST`]: a new
    /// table grows fastest) and plans against the table as it is now, in the same round
    /// trip. Not once a second for good: `DISCARD PLANS` has every statement of the
    /// connection planned again, not only the claim's.
    ///
    /// And no bitmap scans in a claim's transaction ([`NO_BITMAP_SCANS`]): the rows it
    /// looks up by index die by the thousand a second (the plan's rate slots in
    /// `rate_events`, the deliveries in flight in `deliveries_leased`).
    async fn begin_claim<'w>(
        writer: &'w mut Writer<'_, sqlx::Postgres>,
    ) -> Result<WriteTx<'w, sqlx::Postgres>> {
        let replan = if writer.replan_due(REPLAN_FIRST, REPLAN_MOST) {
            "DISCARD PLANS; "
        } else {
            ""
        };
        Ok(writer
            .begin_then(&format!(
                "{replan}SET LOCAL plan_cache_mode = force_generic_plan; \
                 {NO_BITMAP_SCANS}; SELECT pg_advisory_xact_lock({CLAIM_LOCK})"
            ))
            .await?)
    }

    /// The rest of a claim's transaction after its statement: the plan limit applied to
    /// `batch`, the commit.
    async fn end_claim(
        mut tx: WriteTx<'_, sqlx::Postgres>,
        batch: Vec<ClaimedOne>,
        limits: &ClaimLimits,
        now: UnixMs,
    ) -> Result<Claimed> {
        let claimed = Store::<Self>::within_plans_in(&mut tx, batch, limits.plans, now).await?;
        tx.commit().await?;
        Ok(claimed)
    }

    /// Adds the destinations of a committed claim's deliveries, read in one statement after
    /// the commit, not before it: claims from every instance take turns under the advisory
    /// lock, which the commit releases, and this read was one of the five round trips made
    /// under it (in a flood, ~2.3 deliveries a claim held the lock ~2.9 ms; ~2.4 without). A
    /// destination changed or deleted meanwhile is read as it is now, or not found, as an
    /// attempt reading its own would. If the read fails, the claim stands and each attempt
    /// reads its destination itself.
    async fn with_destinations_after(
        writer: Writer<'_, sqlx::Postgres>,
        mut claimed: Claimed,
    ) -> Claimed {
        let mut seen = std::collections::HashSet::new();
        let ids: Vec<DestinationId> = claimed
            .deliveries
            .iter()
            .map(|d| d.destination_id)
            .filter(|id| seen.insert(*id))
            .collect();
        if ids.is_empty() {
            return claimed;
        }
        match Store::<Self>::destinations_by(writer, &ids).await {
            Ok(found) => {
                claimed.destinations = found
                    .into_iter()
                    .map(|d| (d.id, std::sync::Arc::new(d)))
                    .collect();
            }
            Err(e) => {
                tracing::warn!(error = %e, "reading a claim's destinations failed; each attempt reads its own");
            }
        }
        claimed
    }

    /// [`Dialect::claim`]'s statement.
    async fn claim_all_in(
        tx: &mut WriteTx<'_, sqlx::Postgres>,
        now: UnixMs,
        limit: i64,
        lease_margin_ms: i64,
        limits: &ClaimLimits,
        claimer: &str,
    ) -> Result<Vec<ClaimedOne>> {
        let rows = sqlx::query_as::<_, ClaimedRow>(&claim_sql(Self::DUE_INDEX, "$6"))
            .bind(now)
            .bind(limit)
            .bind(lease_margin_ms)
            .bind(limits.per_destination)
            .bind(limits.retries)
            .bind(claimer)
            .fetch_all(&mut **tx)
            .await?;
        claimed_from(rows)
    }

    /// One statement for all the destinations (each one's earliest due deliveries through
    /// `LATERAL … LIMIT` its free slots; a FIFO one's head, when it has nothing in flight):
    /// a round trip to the server per destination would cost more than the claim itself.
    /// A destination of `next.ahead` has [`Ahead::caps`](super::Ahead::caps) times the cap
    /// (`POSTGRES_AHEAD`) while every delivery
    /// in flight to it is `claimer`'s (`claimed_by`), else the cap: this instance's
    /// deliveries beyond the cap wait in its memory and another instance claims nothing
    /// for the destination meanwhile (it counts them in flight), so at most the cap are
    /// sent at once across instances (docs §2.5).
    async fn claim_named_in(
        tx: &mut WriteTx<'_, sqlx::Postgres>,
        next: &ClaimNext,
        now: UnixMs,
        claimer: &str,
    ) -> Result<Vec<ClaimedOne>> {
        let sql = format!(
            "WITH targets AS ( \
               SELECT t.destination_id, t.ord, t.ahead, \
                 COALESCE(dst.ordering = 'fifo', FALSE) AS fifo \
               FROM unnest($1::text[], $8::bool[]) WITH ORDINALITY AS t(destination_id, ahead, ord) \
               LEFT JOIN destinations dst ON dst.id = t.destination_id \
             ), busy AS ( \
               SELECT destination_id, COUNT(*) AS n, \
                 COUNT(*) FILTER (WHERE claimed_by IS DISTINCT FROM $9) AS others \
               FROM deliveries \
               WHERE status = 'sending' AND destination_id = ANY($1::text[]) GROUP BY destination_id \
             ), due AS ( \
               SELECT x.id, x.status, x.next_attempt_at, targets.ord FROM targets \
               LEFT JOIN busy ON busy.destination_id = targets.destination_id \
               CROSS JOIN LATERAL ( \
                 SELECT id, status, next_attempt_at FROM deliveries \
                 WHERE NOT targets.fifo AND destination_id = targets.destination_id \
                   AND status IN ('pending', 'retrying') \
                   AND paused = FALSE AND next_attempt_at <= $2 AND ($3 OR status = 'pending') \
                 ORDER BY next_attempt_at, id \
                 LIMIT GREATEST( \
                   CASE WHEN targets.ahead AND COALESCE(busy.others, 0) = 0 THEN $10 ELSE $4 END \
                   - COALESCE(busy.n, 0), 0) \
               ) x \
               UNION ALL \
               SELECT h.id, h.status, h.next_attempt_at, targets.ord FROM targets \
               JOIN deliveries h ON h.id = ({head}) \
               WHERE targets.fifo AND $4 >= 1 \
                 AND NOT EXISTS (SELECT 1 FROM busy WHERE busy.destination_id = targets.destination_id) \
                 AND h.paused = FALSE AND h.next_attempt_at <= $2 AND ($3 OR h.status = 'pending') \
             ){tail}",
            head = fifo_head("targets.destination_id"),
            tail = claim_for_tail("due", "$9"),
        );
        let ids: Vec<String> = next.destinations.iter().map(|d| d.to_string()).collect();
        let ahead: Vec<bool> = next
            .destinations
            .iter()
            .map(|d| next.ahead.contains(d))
            .collect();
        let limits = &next.limits;
        let rows = sqlx::query_as::<_, ClaimedRow>(&sql)
            .bind(&ids)
            .bind(now)
            .bind(limits.retries > 0)
            .bind(limits.per_destination)
            .bind(limits.retries)
            .bind(next.limit)
            .bind(next.lease_margin_ms)
            .bind(&ahead)
            .bind(claimer)
            .bind(limits.per_destination * Self::AHEAD.caps)
            .fetch_all(&mut **tx)
            .await?;
        claimed_from(rows)
    }
}
