//! The dispatch queue (docs §2): claims, deferrals, finished attempts, expired claims
//! and the rate-limit windows shared by every instance. The claim statements differ by
//! backend and live in the dialects ([`super::sqlite`], [`super::postgres`]).

use async_trait::async_trait;
use sqlx::{ColumnIndex, Executor, IntoArguments};

use std::collections::HashMap;
use std::sync::Arc;

use super::deliveries::{DeliveryRow, DELIVERY};
use super::store::{
    convert_all, Args, Conn, DbRow, Dialect, RowsAffected as _, Sql, SqlArg, SqlValue, Store,
};
use super::write::{Durability, WriteTx};
use super::*;

/// Rate slots written by one INSERT (two values each, far below either backend's limit).
const RATE_ROWS_PER_INSERT: i64 = 500;

/// How many of the earliest due deliveries a claim looks at to find ones it may take.
pub(super) const CLAIM_SCAN: i64 = 5000;

/// The ordering rule of a FIFO destination (docs D12): the one delivery of `destination`
/// that may go next, its **head** — the waiting one (pending or retrying, due or not,
/// paused or not) of the earliest event. Event IDs sort in publish order and a resend's
/// copy keeps its event's place. Read from the `deliveries_waiting_in_order` index: one
/// lookup per FIFO destination, whatever its backlog.
pub(super) fn fifo_head(destination: &str) -> String {
    format!(
        "SELECT e.id FROM deliveries e WHERE e.destination_id = {destination} \
         AND e.status IN ('pending', 'retrying') ORDER BY e.event_id, e.id LIMIT 1"
    )
}

/// PostgreSQL's whole claim: the earliest due deliveries, at most
/// `$4` in flight per destination (counting what is already `sending`, on every
/// instance), at most `$5` of them retries, moved to `sending` under a lease.
/// `$1` now, `$2` limit, `$3` lease margin. Destinations already at their cap are
/// left out while scanning, so their backlog never hides other destinations' work;
/// `due_index` names the index to scan where the planner needs telling (SQLite);
/// `by`, the parameter naming the claiming instance ([`claim_update`]). (SQLite builds
/// its own from [`claim_choice`].)
/// FIFO destinations (docs D12) are stepped over by the scan like those at their cap
/// (one more look-up in the small `fifo` set per row): each one that has nothing in
/// flight adds its [`fifo_head`], if that is due.
pub(super) fn claim_sql(due_index: &str, by: &str) -> String {
    format!(
        "{} {}",
        claim_choice(due_index),
        claim_update("$1", "$3", CHOSEN, Some(by))
    )
}

/// [`claim_sql`]'s choice: the CTEs up to `chosen`, the IDs of the deliveries to claim.
pub(super) fn claim_choice(due_index: &str) -> String {
    format!(
        "WITH busy AS ( \
           SELECT destination_id, COUNT(*) AS n FROM deliveries WHERE status = 'sending' GROUP BY destination_id \
         ), fifo AS ( \
           SELECT id FROM destinations WHERE ordering = 'fifo' \
         ), due AS ( \
           SELECT id, destination_id, status, next_attempt_at FROM deliveries {due_index} \
           WHERE status IN ('pending', 'retrying') AND paused = FALSE AND next_attempt_at <= $1 \
             AND destination_id NOT IN (SELECT destination_id FROM busy WHERE n >= $4) \
             AND destination_id NOT IN (SELECT id FROM fifo) \
           ORDER BY next_attempt_at, id LIMIT {CLAIM_SCAN} \
         ), heads AS ( \
           SELECT h.id, h.destination_id, h.status, h.next_attempt_at FROM fifo \
           JOIN deliveries h ON h.id = ({head}) \
           WHERE fifo.id NOT IN (SELECT destination_id FROM busy) \
             AND h.paused = FALSE AND h.next_attempt_at <= $1 \
         ), ranked AS ( \
           SELECT cand.id, cand.status, cand.next_attempt_at, \
             ROW_NUMBER() OVER (PARTITION BY cand.destination_id ORDER BY cand.next_attempt_at, cand.id) \
               + COALESCE(busy.n, 0) AS slot, \
             ROW_NUMBER() OVER (PARTITION BY cand.status ORDER BY cand.next_attempt_at, cand.id) AS nth \
           FROM (SELECT * FROM due UNION ALL SELECT * FROM heads) AS cand \
           LEFT JOIN busy ON busy.destination_id = cand.destination_id \
         ), chosen AS ( \
           SELECT id FROM ranked WHERE slot <= $4 AND (status = 'pending' OR nth <= $5) \
           ORDER BY next_attempt_at, id LIMIT $2 \
         )",
        head = fifo_head("fifo.id"),
    )
}

/// Moves the deliveries `which` selects (a condition on `deliveries`) to `sending` at `now`
/// under a lease of their destination's timeout and `margin` (parameters), returning them
/// as claims do; `by`, where several instances claim (PostgreSQL), the parameter naming
/// the claiming one (`claimed_by`: an instance claims ahead only where every delivery in
/// flight is its own).
pub(super) fn claim_update(now: &str, margin: &str, which: &str, by: Option<&str>) -> String {
    let by = by.map_or(String::new(), |by| format!(", claimed_by = {by}"));
    format!(
        "UPDATE deliveries SET status = 'sending', updated_at = {now}{by}, \
           lease_expires_at = {now} + {margin} + 1000 * (SELECT timeout_seconds FROM destinations t \
                                                WHERE t.id = deliveries.destination_id) \
         WHERE {which} \
         RETURNING {DELIVERY}{CLAIMED_WITH}"
    )
}

/// PostgreSQL's claims update the deliveries `chosen` holds, by their IDs in an array:
/// each is then a look-up in the primary key whatever the planner believes of the table.
/// (`id IN (SELECT id FROM chosen)` let it join the other way round: with statistics taken
/// while `deliveries` was empty, it scanned the whole table for every claim, ~40 ms each
/// with 5,000 rows, until autovacuum analyzed the table again.)
const CHOSEN: &str = "id = ANY (ARRAY(SELECT id FROM chosen))";

/// The end of PostgreSQL's `claim_for` statement, after its `due` candidates (each
/// destination's, cut to its free slots; `from` names that set): at most `$5` of them
/// retries, the hinted destinations' order first (`ord`), at most `$6`, moved to
/// `sending` under a lease of the destination's timeout and `$7` from `$2`, now, by the
/// instance `by` names ([`claim_update`]).
pub(super) fn claim_for_tail(from: &str, by: &str) -> String {
    format!(
        "{} {}",
        claim_for_choice(from),
        claim_update("$2", "$7", CHOSEN, Some(by))
    )
}

/// [`claim_for_tail`]'s choice: the CTEs `ranked` and `chosen` (the IDs to claim).
pub(super) fn claim_for_choice(from: &str) -> String {
    format!(
        ", ranked AS ( \
           SELECT id, status, next_attempt_at, ord, \
             ROW_NUMBER() OVER (PARTITION BY status ORDER BY next_attempt_at, id) AS nth FROM {from} \
         ), chosen AS ( \
           SELECT id FROM ranked WHERE status = 'pending' OR nth <= $5 \
           ORDER BY ord, next_attempt_at, id LIMIT $6 \
         )"
    )
}

/// What a claim returns of each delivery besides its own columns: its space's plan, for
/// the plan limit applied in the claim's transaction, and its event, for the attempt.
/// Primary-key look-ups inside the claim statement, in place of a statement for each
/// space and one read for each delivery, every one of them a round trip.
const CLAIMED_WITH: &str =
    ", (SELECT plan FROM spaces s WHERE s.id = deliveries.space_id) AS plan, \
     (SELECT payload FROM events ev WHERE ev.id = deliveries.event_id) AS event_payload, \
     (SELECT created_at FROM events ev WHERE ev.id = deliveries.event_id) AS event_created_at, \
     (SELECT deliver_at FROM events ev WHERE ev.id = deliveries.event_id) AS event_deliver_at";

/// A row of a claim statement ([`CLAIMED_WITH`]).
#[derive(sqlx::FromRow)]
pub(super) struct ClaimedRow {
    #[sqlx(flatten)]
    delivery: DeliveryRow,
    plan: Option<String>,
    event_payload: Option<String>,
    event_created_at: Option<i64>,
    event_deliver_at: Option<i64>,
}

/// A claimed delivery with its space's plan and its event (`None`: deleted meanwhile).
pub struct ClaimedOne {
    pub(super) delivery: Delivery,
    plan: Option<Plan>,
    event: Option<Arc<Event>>,
}

/// A claim's answer: `batch`, every one of them granted (in order), the `destinations` it
/// read, and how many the plan limit held back.
pub(super) fn claimed_all(
    batch: Vec<ClaimedOne>,
    destinations: Vec<Destination>,
    held_by_plan: u64,
) -> Claimed {
    let mut claimed = Claimed {
        held_by_plan,
        destinations: destinations
            .into_iter()
            .map(|d| (d.id, Arc::new(d)))
            .collect(),
        ..Default::default()
    };
    for c in batch {
        if let Some(event) = c.event {
            claimed.events.insert(c.delivery.id, event);
        }
        claimed.deliveries.push(c.delivery);
    }
    claimed
}

/// The claim statement's rows, each event parsed once however many deliveries carry it.
pub(super) fn claimed_from(rows: Vec<ClaimedRow>) -> Result<Vec<ClaimedOne>> {
    let mut events: HashMap<EventId, Arc<Event>> = HashMap::new();
    rows.into_iter()
        .map(|row| {
            let delivery = Delivery::try_from(row.delivery)?;
            let plan = row
                .plan
                .map(|p| super::store::parse::<Plan>("spaces.plan", &p))
                .transpose()?;
            let event = match (row.event_payload, row.event_created_at) {
                (Some(payload), Some(created_at)) => Some(match events.get(&delivery.event_id) {
                    Some(event) => event.clone(),
                    None => {
                        let event = Arc::new(Event {
                            id: delivery.event_id,
                            space_id: delivery.space_id,
                            event_type: delivery.event_type.clone(),
                            payload: super::store::json("events.payload", &payload)?,
                            created_at,
                            deliver_at: row.event_deliver_at,
                        });
                        events.insert(delivery.event_id, event.clone());
                        event
                    }
                }),
                _ => None,
            };
            Ok(ClaimedOne {
                delivery,
                plan,
                event,
            })
        })
        .collect()
}

/// What the dispatch engine uses, and nothing else: the due queue, the records of
/// attempts, the rate windows, and the reads of a delivery's destination, event and plan.
#[async_trait]
pub trait DispatchQueue: Send + Sync + std::fmt::Debug {
    /// Atomically moves up to `limit` due deliveries to `sending` under a lease of the
    /// destination's timeout plus `lease_margin_ms`, and returns them, oldest due first,
    /// never more than `limits.per_destination` in flight to one destination (counting
    /// every instance's claims) and at most `limits.retries` deliveries that are retries.
    async fn claim(
        &self,
        now: UnixMs,
        limit: i64,
        lease_margin_ms: i64,
        limits: &ClaimLimits,
    ) -> Result<Claimed>;
    /// [`DispatchQueue::claim`] for the named destinations only: each one's earliest due
    /// deliveries, up to its free in-flight slots, without looking at the rest of the
    /// queue. The engine calls it for destinations it knows have work (a publish just
    /// fanned out to them, an attempt to them just ended); its cost does not grow with
    /// the backlog of other destinations. `next` names them, the most to take, the lease's
    /// margin and the limits, and those of them to claim ahead for ([`ClaimNext::ahead`],
    /// as far as [`DispatchQueue::claims_ahead`]).
    async fn claim_for(&self, next: &ClaimNext, now: UnixMs) -> Result<Claimed>;
    /// A rate limit said "not now" to a claimed delivery: give it back without using an
    /// attempt, due at `until`, marked `rate_limited`, with every other due delivery of
    /// the same scope (so they are not claimed only to be refused again).
    async fn defer_rate_limited(
        &self,
        id: DeliveryId,
        scope: RateScope,
        until: UnixMs,
        now: UnixMs,
    ) -> Result<()>;
    /// Which of `destinations` have a delivery due by `now`: a read, so the engine asks
    /// for a claim (a write transaction) only where there is something to claim. An
    /// attempt that ends names its destination in case more waits behind it, and at low
    /// load nothing does.
    async fn due_destinations(
        &self,
        destinations: &[DestinationId],
        now: UnixMs,
    ) -> Result<Vec<DestinationId>>;
    /// When the earliest waiting, unpaused delivery is due.
    async fn next_due_at(&self) -> Result<Option<UnixMs>>;
    /// Claims whose lease ran out (their worker crashed or was killed).
    async fn expired_claims(&self, now: UnixMs, limit: i64) -> Result<Vec<Delivery>>;
    /// Records an attempt and its consequences: the delivery's new state, the
    /// destination's dead-letter streak, auto-disable and admin notifications.
    async fn finish_attempt(
        &self,
        finished: &FinishedAttempt,
        rule: &AutoDisable,
        now: UnixMs,
    ) -> Result<FinishEffects>;
    /// Several finished attempts in one transaction (one commit for many attempts).
    async fn finish_attempts(
        &self,
        batch: &[FinishedAttempt],
        rule: &AutoDisable,
        now: UnixMs,
    ) -> Result<Vec<FinishEffects>>;
    /// [`DispatchQueue::finish_attempts`] and, in the same transaction, a claim for `next`
    /// (the slots the attempts freed, filled at once by the workers that ended them) where
    /// that costs no more round trips: on SQLite, for a group that
    /// [finishes at once](Store::finishes_at_once), the claim travels with the group's last
    /// attempts (up to eight attempts, the whole of it is one round trip).
    /// Elsewhere it only records, and claims nothing: a claim of its own after the record
    /// would hold up the next group's record behind it, where the engine's loop claims
    /// meanwhile (measured on PostgreSQL: a third fewer deliveries per second).
    async fn finish_and_claim(
        &self,
        batch: &[FinishedAttempt],
        rule: &AutoDisable,
        now: UnixMs,
        next: &ClaimNext,
    ) -> Result<(Vec<FinishEffects>, Claimed)>;
    /// How far this process claims ahead ([`ClaimNext::ahead`]): safe where no other can
    /// claim for a destination while deliveries claimed here wait in memory for a slot
    /// (SQLite: one process runs the database), or where a claim ahead takes more than
    /// the cap only while every delivery in flight to the destination is this instance's
    /// own (PostgreSQL: `claimed_by`), so the cap holds across instances (docs §2.5).
    fn claims_ahead(&self) -> Ahead;
    /// Gives a claim back without an attempt (e.g. its destination was disabled meanwhile).
    async fn release_claim(&self, id: DeliveryId, pause: bool, now: UnixMs) -> Result<()>;
    /// The destination a claimed delivery goes to.
    async fn destination_of(&self, delivery: &Delivery) -> Result<Destination>;
    /// The event a claimed delivery carries.
    async fn event_of(&self, delivery: &Delivery) -> Result<Event>;
    /// Takes a slot of at most `limit` per `window_ms` for `key`, or says when one frees.
    async fn take_rate_slot(
        &self,
        key: &str,
        limit: i64,
        window_ms: i64,
        now: UnixMs,
    ) -> Result<Slot>;
    /// Takes up to `wanted` slots at once; returns how many were granted and, when fewer,
    /// the milliseconds until the next one frees.
    async fn take_rate_slots(
        &self,
        key: &str,
        wanted: i64,
        limit: i64,
        window_ms: i64,
        now: UnixMs,
    ) -> Result<(i64, i64)>;
}

#[async_trait]
impl<D: Dialect> DispatchQueue for Store<D>
where
    for<'c> &'c mut Conn<D>: Executor<'c, Database = D::DB>,
    for<'q> Args<'q, D>: IntoArguments<'q, D::DB>,
    for<'q> &'q str: SqlArg<'q, D::DB> + ColumnIndex<DbRow<D>>,
    for<'q> Option<&'q str>: SqlArg<'q, D::DB>,
    usize: ColumnIndex<DbRow<D>>,
    i64: SqlValue<D::DB>,
    Option<i64>: SqlValue<D::DB>,
    bool: SqlValue<D::DB>,
    String: SqlValue<D::DB>,
    Option<String>: SqlValue<D::DB>,
{
    async fn claim(
        &self,
        now: UnixMs,
        limit: i64,
        lease_margin_ms: i64,
        limits: &ClaimLimits,
    ) -> Result<Claimed> {
        let writer = self.writes.writer(Durability::Engine).await?;
        D::claim(writer, now, limit, lease_margin_ms, limits, &self.claimer).await
    }

    async fn claim_for(&self, next: &ClaimNext, now: UnixMs) -> Result<Claimed> {
        let writer = self.writes.writer(Durability::Engine).await?;
        D::claim_for(writer, next, now, &self.claimer).await
    }

    async fn defer_rate_limited(
        &self,
        id: DeliveryId,
        scope: RateScope,
        until: UnixMs,
        now: UnixMs,
    ) -> Result<()> {
        let mut writer = self.writes.writer(Durability::Engine).await?;
        let mut tx = writer.begin().await?;
        Self::defer_in(&mut tx, &[id], scope, until, now).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn due_destinations(
        &self,
        destinations: &[DestinationId],
        now: UnixMs,
    ) -> Result<Vec<DestinationId>> {
        if destinations.is_empty() {
            return Ok(Vec::new());
        }
        // One look-up per destination in `deliveries_due_by_destination`, whatever its backlog.
        let mut q = Sql::<D>::new("SELECT id FROM destinations WHERE id IN (");
        q.push_list(destinations.iter().map(|d| d.to_string()));
        q.push(
            ") AND EXISTS (SELECT 1 FROM deliveries d WHERE d.destination_id = destinations.id \
             AND d.status IN ('pending', 'retrying') AND d.paused = FALSE AND d.next_attempt_at <= ",
        )
        .push_bind(now)
        .push(")");
        let (sql, args) = q.into_parts()?;
        let ids: Vec<String> = sqlx::query_scalar_with(&sql, args)
            .fetch_all(&self.engine_read)
            .await?;
        ids.iter()
            .map(|id| super::store::parse("destinations.id", id))
            .collect()
    }

    async fn next_due_at(&self) -> Result<Option<UnixMs>> {
        // The first entry of the due index (SQLite, without statistics, would otherwise
        // walk every waiting delivery through the status index).
        let sql = format!(
            "SELECT next_attempt_at FROM deliveries {} \
             WHERE status IN ('pending', 'retrying') AND paused = FALSE \
             ORDER BY next_attempt_at LIMIT 1",
            D::DUE_INDEX
        );
        let at: Option<Option<i64>> = sqlx::query_scalar(&sql)
            .fetch_optional(&self.engine_read)
            .await?;
        Ok(at.flatten())
    }

    async fn expired_claims(&self, now: UnixMs, limit: i64) -> Result<Vec<Delivery>> {
        let sql = format!(
            "SELECT {} FROM deliveries WHERE status = 'sending' AND lease_expires_at < $1 \
             ORDER BY lease_expires_at LIMIT $2",
            DELIVERY
        );
        let rows = sqlx::query_as::<_, DeliveryRow>(&sql)
            .bind(now)
            .bind(limit)
            .fetch_all(&self.engine_read)
            .await?;
        convert_all(rows)
    }

    async fn finish_attempt(
        &self,
        f: &FinishedAttempt,
        rule: &AutoDisable,
        now: UnixMs,
    ) -> Result<FinishEffects> {
        let mut writer = self.writes.writer(Durability::Engine).await?;
        if D::BACKEND == Backend::Postgres && Self::finishes_at_once(f) {
            return the_one(Self::finish_statements(writer, std::slice::from_ref(f), now).await?);
        }
        let mut tx = writer.begin().await?;
        let effects = Self::finish_in(&mut tx, f, rule, now).await?;
        tx.commit().await?;
        Ok(effects)
    }

    async fn finish_attempts(
        &self,
        batch: &[FinishedAttempt],
        rule: &AutoDisable,
        now: UnixMs,
    ) -> Result<Vec<FinishEffects>> {
        let writer = self.writes.writer(Durability::Engine).await?;
        // Every attempt of the group finishing at once (the common case): on SQLite the
        // whole transaction is one round trip.
        if D::BACKEND == Backend::Sqlite && batch.iter().all(Self::finishes_at_once) {
            return Self::finish_all_at_once(writer, batch, now).await;
        }
        if D::BACKEND == Backend::Postgres && batch.iter().all(Self::finishes_at_once) {
            return Self::finish_statements(writer, batch, now).await;
        }
        let mut writer = writer;
        let mut tx = writer.begin().await?;
        let mut effects = Vec::with_capacity(batch.len());
        for f in batch {
            effects.push(Self::finish_in(&mut tx, f, rule, now).await?);
        }
        tx.commit().await?;
        Ok(effects)
    }

    async fn finish_and_claim(
        &self,
        batch: &[FinishedAttempt],
        rule: &AutoDisable,
        now: UnixMs,
        next: &ClaimNext,
    ) -> Result<(Vec<FinishEffects>, Claimed)> {
        let at_once = batch.iter().all(Self::finishes_at_once);
        if D::FINISHES_AND_CLAIMS_AT_ONCE && at_once && !next.destinations.is_empty() {
            let writer = self.writes.writer(Durability::Engine).await?;
            return D::finish_and_claim(writer, batch, now, next).await;
        }
        let effects = self.finish_attempts(batch, rule, now).await?;
        Ok((effects, Claimed::default()))
    }

    fn claims_ahead(&self) -> Ahead {
        D::AHEAD
    }

    async fn release_claim(&self, id: DeliveryId, pause: bool, now: UnixMs) -> Result<()> {
        let query = sqlx::query(
            "UPDATE deliveries SET status = CASE WHEN attempts = 0 THEN 'pending' ELSE 'retrying' END, \
             lease_expires_at = NULL, paused = $1, next_attempt_at = $2, updated_at = $2 \
             WHERE id = $3 AND status = 'sending'",
        )
        .bind(pause)
        .bind(now)
        .bind(id.to_string());
        self.execute(Durability::Engine, query).await?;
        Ok(())
    }

    async fn take_rate_slot(
        &self,
        key: &str,
        limit: i64,
        window_ms: i64,
        now: UnixMs,
    ) -> Result<Slot> {
        match self.take_rate_slots(key, 1, limit, window_ms, now).await? {
            (1, _) => Ok(Slot::Granted),
            (_, wait) => Ok(Slot::Wait(wait)),
        }
    }

    async fn take_rate_slots(
        &self,
        key: &str,
        wanted: i64,
        limit: i64,
        window_ms: i64,
        now: UnixMs,
    ) -> Result<(i64, i64)> {
        let mut writer = self.writes.writer(Durability::Engine).await?;
        if D::BACKEND == Backend::Sqlite && wanted <= RATE_ROWS_PER_INSERT {
            // The whole transaction in one string, one round trip: `BEGIN`, the slots, when
            // the oldest frees, `COMMIT`.
            let now = now.max(crate::clock::now_ms());
            let sql = format!(
                "{}{}; SELECT MIN(at) FROM rate_events WHERE key = $1; COMMIT",
                writer.opening(),
                slots_batch(wanted)
            );
            let query = sqlx::query(&sql)
                .bind(key)
                .bind(now)
                .bind(now - window_ms)
                .bind(limit);
            let results = writer.run_transaction_batch(query).await?;
            // `BEGIN`, the key's row, the window's end, the slots: the fourth statement.
            let granted = results
                .iter()
                .filter_map(|step| step.as_ref().left())
                .nth(3)
                .map_or(0, |done| done.rows_affected() as i64);
            let oldest = match results.iter().find_map(|step| step.as_ref().right()) {
                Some(row) => sqlx::Row::try_get::<Option<i64>, _>(row, 0usize)?,
                None => None,
            };
            return Ok((
                granted,
                slot_frees_in(oldest, window_ms, now, granted < wanted),
            ));
        }
        // PostgreSQL: the window's slots die by the hundred ([`NO_BITMAP_SCANS`]).
        let mut tx = match D::BACKEND {
            Backend::Postgres => writer.begin_then(NO_BITMAP_SCANS).await?,
            Backend::Sqlite => writer.begin().await?,
        };
        let taken = Self::take_slots_in(&mut tx, key, wanted, limit, window_ms, now, false).await?;
        tx.commit().await?;
        Ok(taken)
    }

    async fn destination_of(&self, delivery: &Delivery) -> Result<Destination> {
        self.get_destination(delivery.space_id, delivery.destination_id)
            .await
    }

    async fn event_of(&self, delivery: &Delivery) -> Result<Event> {
        self.get_event(delivery.space_id, delivery.event_id).await
    }
}

impl<D: Dialect> Store<D>
where
    for<'c> &'c mut Conn<D>: Executor<'c, Database = D::DB>,
    for<'q> Args<'q, D>: IntoArguments<'q, D::DB>,
    for<'q> &'q str: SqlArg<'q, D::DB> + ColumnIndex<DbRow<D>>,
    for<'q> Option<&'q str>: SqlArg<'q, D::DB>,
    usize: ColumnIndex<DbRow<D>>,
    i64: SqlValue<D::DB>,
    Option<i64>: SqlValue<D::DB>,
    bool: SqlValue<D::DB>,
    String: SqlValue<D::DB>,
    Option<String>: SqlValue<D::DB>,
{
    /// Up to `wanted` slots of the rate window `key` (at most `limit` per `window_ms`),
    /// inside `tx`: how many were granted, and when one frees if not all were.
    /// `in_claim`: `tx` is a claim's, which holds the claims' turn (PostgreSQL's advisory
    /// lock), and the key a plan's, which only claims take: on PostgreSQL the slots are
    /// then one statement ([`PLAN_SLOTS`]), three otherwise, since nothing can wait
    /// between the slots' date and their INSERT.
    async fn take_slots_in(
        tx: &mut WriteTx<'_, D::DB>,
        key: &str,
        wanted: i64,
        limit: i64,
        window_ms: i64,
        now: UnixMs,
        in_claim: bool,
    ) -> Result<(i64, i64)> {
        if D::BACKEND == Backend::Sqlite && wanted <= RATE_ROWS_PER_INSERT {
            return Self::take_slots_at_once_in(tx, key, wanted, limit, window_ms, now).await;
        }
        if D::BACKEND == Backend::Postgres && in_claim {
            let now = now.max(crate::clock::now_ms());
            let done = sqlx::query(PLAN_SLOTS)
                .bind(key)
                .bind(now)
                .bind(now - window_ms)
                .bind(limit)
                .bind(wanted)
                .execute(&mut **tx)
                .await?;
            let granted = done.rows_affected() as i64;
            return Self::granted_in(tx, key, (granted, wanted), window_ms, now).await;
        }
        // Locks this key's row (PostgreSQL) or the database (SQLite) until commit, so
        // concurrent callers on every instance count one after another.
        sqlx::query(
            "INSERT INTO rate_keys (key, touched_at) VALUES ($1, $2) \
             ON CONFLICT (key) DO UPDATE SET touched_at = excluded.touched_at",
        )
        .bind(key)
        .bind(now)
        .execute(&mut **tx)
        .await?;
        // The slot is dated when the lock is granted, not when it was asked for: waiting
        // for the lock must not make a window look older than it is.
        let now = now.max(crate::clock::now_ms());
        sqlx::query("DELETE FROM rate_events WHERE key = $1 AND at <= $2")
            .bind(key)
            .bind(now - window_ms)
            .execute(&mut **tx)
            .await?;
        // What is left of the window is taken by the INSERT itself: each numbered row goes
        // in while the key's count leaves room for it (`rate_keys.taken`, kept by the
        // database's triggers: it counts the rows of the chunks before), so the common
        // case is one statement, not a count and an insert.
        let mut granted = 0;
        for chunk in 0..(wanted + RATE_ROWS_PER_INSERT - 1) / RATE_ROWS_PER_INSERT {
            let rows = (wanted - chunk * RATE_ROWS_PER_INSERT).min(RATE_ROWS_PER_INSERT);
            let mut insert = Sql::<D>::new("INSERT INTO rate_events (key, at) SELECT ");
            insert
                .push_bind(key)
                .push(", ")
                .push_bind(now)
                .push(" FROM (VALUES ");
            let numbers: Vec<String> = (1..=rows).map(|n| format!("({n})")).collect();
            insert
                .push(numbers.join(", "))
                .push(") AS v WHERE v.column1 <= ")
                .push_bind(limit)
                .push(" - (SELECT taken FROM rate_keys WHERE key = ")
                .push_bind(key)
                .push(")");
            let (sql, args) = insert.into_parts()?;
            let done = sqlx::query_with(&sql, args).execute(&mut **tx).await?;
            granted += done.rows_affected() as i64;
            if (done.rows_affected() as i64) < rows {
                break;
            }
        }
        Self::granted_in(tx, key, (granted, wanted), window_ms, now).await
    }

    /// `granted` of `wanted` slots of `key`, and when one frees if not all were (0 if all were).
    async fn granted_in(
        tx: &mut WriteTx<'_, D::DB>,
        key: &str,
        (granted, wanted): (i64, i64),
        window_ms: i64,
        now: UnixMs,
    ) -> Result<(i64, i64)> {
        let wait = if granted < wanted {
            Self::until_a_slot_frees_in(tx, key, window_ms, now).await?
        } else {
            0
        };
        Ok((granted, wait))
    }

    /// Milliseconds until the oldest slot of `key`'s window ends (at least 1).
    async fn until_a_slot_frees_in(
        tx: &mut WriteTx<'_, D::DB>,
        key: &str,
        window_ms: i64,
        now: UnixMs,
    ) -> Result<i64> {
        let oldest: Option<i64> =
            sqlx::query_scalar("SELECT MIN(at) FROM rate_events WHERE key = $1")
                .bind(key)
                .fetch_one(&mut **tx)
                .await?;
        Ok(slot_frees_in(oldest, window_ms, now, true))
    }

    /// [`Self::take_slots_in`] on SQLite, where the transaction already holds the one write
    /// lock: the key's row, the window's end and the slots taken as one batch of
    /// statements, one round trip to the connection's thread instead of three.
    async fn take_slots_at_once_in(
        tx: &mut WriteTx<'_, D::DB>,
        key: &str,
        wanted: i64,
        limit: i64,
        window_ms: i64,
        now: UnixMs,
    ) -> Result<(i64, i64)> {
        use futures_util::TryStreamExt as _;
        let now = now.max(crate::clock::now_ms());
        let batch = slots_batch(wanted);
        let query = sqlx::query(&batch)
            .bind(key)
            .bind(now)
            .bind(now - window_ms)
            .bind(limit);
        let done: Vec<u64> = Executor::fetch_many(&mut **tx, query)
            .try_filter_map(|step| async move {
                Ok(match step {
                    sqlx::Either::Left(done) => Some(done.rows_affected()),
                    sqlx::Either::Right(_) => None,
                })
            })
            .try_collect()
            .await?;
        let granted = done.last().copied().unwrap_or(0) as i64;
        Self::granted_in(tx, key, (granted, wanted), window_ms, now).await
    }

    /// Gives claimed deliveries back without an attempt (a rate limit said "not now"),
    /// due at `until` and marked `rate_limited`, with every other due delivery of the
    /// same scope, inside `tx`.
    async fn defer_in(
        tx: &mut WriteTx<'_, D::DB>,
        ids: &[DeliveryId],
        scope: RateScope,
        until: UnixMs,
        now: UnixMs,
    ) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        let mut back = Sql::<D>::new(
            "UPDATE deliveries SET status = CASE WHEN attempts = 0 THEN 'pending' ELSE 'retrying' END, \
             lease_expires_at = NULL, last_error_class = 'rate_limited', next_attempt_at = ",
        );
        back.push_bind(until)
            .push(", updated_at = ")
            .push_bind(now)
            .push(" WHERE status = 'sending' AND id IN (")
            .push_list(ids.iter().map(|id| id.to_string()))
            .push(")");
        let (sql, args) = back.into_parts()?;
        sqlx::query_with(&sql, args).execute(&mut **tx).await?;
        let (column, key) = match scope {
            RateScope::Destination(d) => ("destination_id", d.to_string()),
            RateScope::Space(s) => ("space_id", s.to_string()),
        };
        sqlx::query(&format!(
            "UPDATE deliveries SET next_attempt_at = $1, last_error_class = 'rate_limited', updated_at = $2 \
             WHERE {column} = $3 AND status IN ('pending', 'retrying') AND paused = FALSE AND next_attempt_at < $1"
        ))
        .bind(until)
        .bind(now)
        .bind(key)
        .execute(&mut **tx)
        .await?;
        Ok(())
    }

    /// The plan limit (docs D4) for a claimed batch, inside the claim's transaction: per
    /// space, the slots its plan has left this second; what fits goes on, in the batch's
    /// order, the rest is given back at once as `rate_limited`.
    pub(super) async fn within_plans_in(
        tx: &mut WriteTx<'_, D::DB>,
        batch: Vec<ClaimedOne>,
        plans: Option<PlanLimits>,
        now: UnixMs,
    ) -> Result<Claimed> {
        let mut held: std::collections::HashSet<DeliveryId> = Default::default();
        if let Some(plans) = plans {
            let mut spaces: Vec<(SpaceId, Plan)> = Vec::new();
            for c in &batch {
                // A space deleted meanwhile took its deliveries with it: nothing to hold.
                if let Some(plan) = c.plan {
                    if !spaces.iter().any(|(s, _)| *s == c.delivery.space_id) {
                        spaces.push((c.delivery.space_id, plan));
                    }
                }
            }
            for (space, plan) in spaces {
                let in_space: Vec<DeliveryId> = batch
                    .iter()
                    .filter(|c| c.delivery.space_id == space)
                    .map(|c| c.delivery.id)
                    .collect();
                let wanted = in_space.len() as i64;
                let (granted, wait) = Self::take_slots_in(
                    tx,
                    &format!("plan:{space}"),
                    wanted,
                    plans.per_second.for_plan(plan),
                    plans.window_ms,
                    now,
                    true,
                )
                .await?;
                let refused = &in_space[granted as usize..];
                if !refused.is_empty() {
                    let now = now.max(crate::clock::now_ms());
                    Self::defer_in(tx, refused, RateScope::Space(space), now + wait, now).await?;
                    held.extend(refused.iter().copied());
                }
            }
        }
        let mut claimed = Claimed {
            held_by_plan: held.len() as u64,
            ..Default::default()
        };
        for c in batch {
            if held.contains(&c.delivery.id) {
                continue;
            }
            if let Some(event) = c.event {
                claimed.events.insert(c.delivery.id, event);
            }
            claimed.deliveries.push(c.delivery);
        }
        Ok(claimed)
    }

    /// Whether [`Self::finish_in`] records `f` in one round trip (a batch of statements on
    /// SQLite, one statement on PostgreSQL): an attempt that neither dead-letters nor was
    /// lost in a crash (so nothing but the delivery's own update decides what follows).
    pub(super) fn finishes_at_once(f: &FinishedAttempt) -> bool {
        !matches!(
            f.next,
            NextStep::DeadLetter | NextStep::Lost { crashed: true, .. }
        )
    }

    /// The statements of an attempt that [finishes at once](Self::finishes_at_once): the
    /// delivery's update, the attempt, the end of the destination's dead-letter streak and
    /// whether it has more due, one round trip to the connection's thread instead of four.
    /// Each statement after the first goes on only if the one before changed a row
    /// (`changes()`), as the statements one by one do in Rust.
    ///
    /// Several statements in one string with bind parameters is what sqlx's SQLite driver
    /// does (it prepares the string statement after statement, every `$N` naming the same
    /// argument in each); sqlx calls that behaviour deprecated (launchbadge/sqlx#3108), so
    /// an upgrade of sqlx must keep the finish and rate-limit tests on SQLite green.
    pub(super) fn finish_batch() -> String {
        let mut batch = format!(
            "{}; INSERT INTO attempts ({ATTEMPT_COLUMNS}) \
             SELECT $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24, $25 \
             WHERE changes() = 1",
            finish_update_sql()
        );
        // Always there, done only on a success ($27), so the string does not depend on
        // the outcome: a group's batch is then one of few strings, each prepared once.
        batch.push_str(
            "; UPDATE destinations SET consecutive_dead_letters = 0 \
             WHERE $27 AND id = $26 AND consecutive_dead_letters <> 0 AND changes() = 1",
        );
        // Last, what `due_destinations` would answer for this destination: the engine then
        // needs no read of its own to know whether to claim again for it.
        batch.push_str(
            "; SELECT EXISTS (SELECT 1 FROM deliveries WHERE destination_id = $26 \
               AND status IN ('pending', 'retrying') AND paused = FALSE AND next_attempt_at <= $6)",
        );
        batch
    }

    /// Binds the [`FINISH_PARAMETERS`] of [`Self::finish_batch`] for `f` after `query`'s.
    fn bind_finish_batch<'q>(
        query: sqlx::query::Query<'q, D::DB, Args<'q, D>>,
        f: &'q FinishedAttempt,
        now: UnixMs,
    ) -> sqlx::query::Query<'q, D::DB, Args<'q, D>> {
        let query = Self::bind_finish_update(query, f, now);
        Self::bind_attempt(query, &f.attempt, &f.attempt.error_message)
            .bind(f.destination_id.to_string())
            .bind(matches!(f.next, NextStep::Succeeded))
    }

    /// Binds [`finish_update_sql`]'s `$1`…`$11` for `f`.
    fn bind_finish_update<'q>(
        query: sqlx::query::Query<'q, D::DB, Args<'q, D>>,
        f: &'q FinishedAttempt,
        now: UnixMs,
    ) -> sqlx::query::Query<'q, D::DB, Args<'q, D>> {
        let a = &f.attempt;
        let (status, used, next_at, finished_at) = finish_columns(f.next, now);
        query
            .bind(status.as_str())
            .bind(used)
            .bind(next_at)
            .bind(a.error_class.map(|c| c.as_str()))
            .bind(a.response_status)
            .bind(now)
            .bind(finished_at)
            .bind(a.delivery_id.to_string())
            .bind(f.only_if_lease_expired_before)
            .bind(matches!(f.next, NextStep::Lost { crashed: true, .. }))
            .bind(crate::storage::LOST_IN_A_ROW_FAILS)
    }

    /// Binds the next 14 parameters to the values of [`ATTEMPT_COLUMNS`] for `a`, its
    /// error message being `message`.
    fn bind_attempt<'q>(
        query: sqlx::query::Query<'q, D::DB, Args<'q, D>>,
        a: &'q Attempt,
        message: &'q Option<String>,
    ) -> sqlx::query::Query<'q, D::DB, Args<'q, D>> {
        query
            .bind(a.id.to_string())
            .bind(a.delivery_id.to_string())
            .bind(a.space_id.to_string())
            .bind(a.attempt_number)
            .bind(a.started_at)
            .bind(a.duration_ms)
            .bind(&a.request_url)
            .bind(a.request_headers.to_string())
            .bind(&a.request_body)
            .bind(a.response_status)
            .bind(a.response_headers.as_ref().map(|h| h.to_string()))
            .bind(&a.response_body)
            .bind(a.error_class.map(|c| c.as_str()))
            .bind(message)
    }

    /// What a [`Self::finish_batch`] answered: its first statement's RETURNING row says the
    /// delivery was still ours; the one row after it, whether more is due.
    fn finish_batch_effects(
        results: Vec<sqlx::Either<<D::DB as sqlx::Database>::QueryResult, DbRow<D>>>,
    ) -> Result<FinishEffects> {
        let (mut statement, mut applied, mut more_due) = (0, false, None);
        for step in results {
            match step {
                sqlx::Either::Left(_) => statement += 1,
                sqlx::Either::Right(_) if statement == 0 => applied = true,
                sqlx::Either::Right(row) => {
                    more_due = Some(sqlx::Row::try_get::<bool, _>(&row, 0)?)
                }
            }
        }
        Ok(FinishEffects {
            applied,
            more_due,
            ..Default::default()
        })
    }

    /// Attempts that all [finish at once](Self::finishes_at_once), recorded on PostgreSQL
    /// [`FINISH_CHUNK`] to a statement ([`finish_statement`]): up to that many, the one
    /// statement is its own transaction, one round trip instead of one statement each
    /// between `BEGIN` and `COMMIT` (every record at low load is one; in a flood, a group
    /// of five was seven round trips); more, their statements between `BEGIN` and `COMMIT`.
    async fn finish_statements(
        mut writer: super::write::Writer<'_, D::DB>,
        batch: &[FinishedAttempt],
        now: UnixMs,
    ) -> Result<Vec<FinishEffects>> {
        if batch.len() <= FINISH_CHUNK {
            let sql = finish_statement(batch.len());
            let results = writer
                .run_transaction_batch(Self::finish_batches_query(&sql, batch, now))
                .await?;
            let row = results
                .iter()
                .find_map(|step| step.as_ref().right())
                .ok_or_else(|| {
                    StorageError::Internal("a group of records answered no row".into())
                })?;
            return finish_statement_effects(row, batch.len());
        }
        let mut tx = writer.begin().await?;
        let mut effects = Vec::with_capacity(batch.len());
        for chunk in batch.chunks(FINISH_CHUNK) {
            effects.extend(Self::finish_statement_in(&mut tx, chunk, now).await?);
        }
        tx.commit().await?;
        Ok(effects)
    }

    /// [`finish_statement`] for `batch` inside `tx` (PostgreSQL).
    async fn finish_statement_in(
        tx: &mut WriteTx<'_, D::DB>,
        batch: &[FinishedAttempt],
        now: UnixMs,
    ) -> Result<Vec<FinishEffects>> {
        let sql = finish_statement(batch.len());
        let row = Self::finish_batches_query(&sql, batch, now)
            .fetch_one(&mut **tx)
            .await?;
        finish_statement_effects(&row, batch.len())
    }

    /// [`Self::finish_in`] of an attempt that finishes at once, inside `tx`.
    async fn finish_at_once_in(
        tx: &mut WriteTx<'_, D::DB>,
        f: &FinishedAttempt,
        now: UnixMs,
    ) -> Result<FinishEffects> {
        use futures_util::TryStreamExt as _;
        let one = std::slice::from_ref(f);
        if D::BACKEND == Backend::Postgres {
            return the_one(Self::finish_statement_in(tx, one, now).await?);
        }
        let batch = Self::finish_batch();
        let query = Self::finish_batches_query(&batch, one, now);
        let results = Executor::fetch_many(&mut **tx, query).try_collect().await?;
        Self::finish_batch_effects(results)
    }

    /// Attempts that all finish at once, recorded together: their batches one after the
    /// other, each numbering its parameters after the ones before ([`renumbered`]). A group
    /// of up to [`FINISH_CHUNK`] goes inside `BEGIN IMMEDIATE … COMMIT` in one string, so
    /// its whole transaction is one round trip; a larger one is written
    /// [`FINISH_CHUNK`] attempts a round trip, the first with the `BEGIN`
    /// ([`Self::begin_finishing`]), the last with the `COMMIT`. Every string is
    /// one of a few (SQLite prepares a string of `4 × n` statements once, then keeps it):
    /// one string per group size would prepare hundreds of statements at a time.
    async fn finish_all_at_once(
        mut writer: super::write::Writer<'_, D::DB>,
        batch: &[FinishedAttempt],
        now: UnixMs,
    ) -> Result<Vec<FinishEffects>> {
        if batch.len() <= FINISH_CHUNK {
            let sql = format!(
                "BEGIN IMMEDIATE; {}; COMMIT",
                Self::finish_batches(batch.len())
            );
            let results = writer
                .run_transaction_batch(Self::finish_batches_query(&sql, batch, now))
                .await?;
            // BEGIN's end, then the attempts' statements.
            return Self::finish_batches_effects(results.into_iter().skip(1), batch.len());
        }
        let (before, last) = batch.split_at((batch.len() - 1) / FINISH_CHUNK * FINISH_CHUNK);
        let (tx, mut effects) = Self::begin_finishing(&mut writer, before, now).await?;
        let sql = format!("{}{}", Self::finish_batches(last.len()), tx.closing());
        let results = tx
            .commit_with(Self::finish_batches_query(&sql, last, now))
            .await?;
        effects.extend(Self::finish_batches_effects(results, last.len())?);
        Ok(effects)
    }

    /// Opens `writer`'s transaction with the first [`FINISH_CHUNK`] attempts of `batch`
    /// (attempts that all [finish at once](Self::finishes_at_once)) in the same string
    /// (SQLite: `BEGIN IMMEDIATE; …`, one round trip for both; in a flood a third of the
    /// groups of records are larger than a chunk, and each spent a round trip on its
    /// `BEGIN` alone), then records the rest [`FINISH_CHUNK`] a round trip
    /// ([`Self::finish_chunks_in`]). The transaction stays open; the effects of each
    /// attempt, in order.
    pub(super) async fn begin_finishing<'w>(
        writer: &'w mut super::write::Writer<'_, D::DB>,
        batch: &[FinishedAttempt],
        now: UnixMs,
    ) -> Result<(WriteTx<'w, D::DB>, Vec<FinishEffects>)> {
        let (first, rest) = batch.split_at(batch.len().min(FINISH_CHUNK));
        let opening = writer.opening();
        // The `BEGIN`'s end comes first where it travels with them.
        let skip = usize::from(!opening.is_empty());
        let sql = format!("{opening}{}", Self::finish_batches(first.len()));
        let (mut tx, results) = writer
            .begin_with(Self::finish_batches_query(&sql, first, now))
            .await?;
        let mut effects =
            Self::finish_batches_effects(results.into_iter().skip(skip), first.len())?;
        effects.extend(Self::finish_chunks_in(&mut tx, rest, now).await?);
        Ok((tx, effects))
    }

    /// Records `batch` (attempts that all [finish at once](Self::finishes_at_once)) inside
    /// `tx`, [`FINISH_CHUNK`] attempts a round trip; the effects of each, in order.
    pub(super) async fn finish_chunks_in(
        tx: &mut WriteTx<'_, D::DB>,
        batch: &[FinishedAttempt],
        now: UnixMs,
    ) -> Result<Vec<FinishEffects>> {
        use futures_util::TryStreamExt as _;
        let mut effects = Vec::with_capacity(batch.len());
        for chunk in batch.chunks(FINISH_CHUNK) {
            let sql = Self::finish_batches(chunk.len());
            let results: Vec<_> =
                Executor::fetch_many(&mut **tx, Self::finish_batches_query(&sql, chunk, now))
                    .try_collect()
                    .await?;
            effects.extend(Self::finish_batches_effects(results, chunk.len())?);
        }
        Ok(effects)
    }

    /// `sql`, holding [`Self::finish_batches`] for `attempts`, with their arguments bound.
    pub(super) fn finish_batches_query<'q>(
        sql: &'q str,
        attempts: &'q [FinishedAttempt],
        now: UnixMs,
    ) -> sqlx::query::Query<'q, D::DB, Args<'q, D>> {
        let mut query = sqlx::query(sql);
        for f in attempts {
            query = Self::bind_finish_batch(query, f, now);
        }
        query
    }

    /// `n` [finish batches](Self::finish_batch) in one string, numbered one after another.
    pub(super) fn finish_batches(n: usize) -> Arc<str> {
        static BATCHES: Memo<(Backend, usize), Arc<str>> = Memo::new(Default::default);
        memoized(&BATCHES, (D::BACKEND, n), || {
            let one = Self::finish_batch();
            (0..n)
                .map(|k| renumbered(&one, k * FINISH_PARAMETERS))
                .collect::<Vec<_>>()
                .join("; ")
                .into()
        })
    }

    /// How many statements a [finish batch](Self::finish_batch) has.
    pub(super) fn finish_batch_statements() -> usize {
        static STATEMENTS: Memo<Backend, usize> = Memo::new(Default::default);
        memoized(&STATEMENTS, D::BACKEND, || {
            Self::finish_batch().matches(';').count() + 1
        })
    }

    /// The effects of `n` [finish batches](Self::finish_batch) from their results (each
    /// statement's rows, then its end), in order; what follows them is ignored.
    pub(super) fn finish_batches_effects(
        results: impl IntoIterator<
            Item = sqlx::Either<<D::DB as sqlx::Database>::QueryResult, DbRow<D>>,
        >,
        n: usize,
    ) -> Result<Vec<FinishEffects>> {
        let statements = Self::finish_batch_statements();
        let mut steps = results.into_iter();
        let mut effects = Vec::with_capacity(n);
        for _ in 0..n {
            let mut own = Vec::new();
            let mut ended = 0;
            while ended < statements {
                let Some(step) = steps.next() else { break };
                ended += usize::from(matches!(step, sqlx::Either::Left(_)));
                own.push(step);
            }
            effects.push(Self::finish_batch_effects(own)?);
        }
        Ok(effects)
    }

    /// One finished attempt and its consequences, inside `tx`.
    async fn finish_in(
        tx: &mut WriteTx<'_, D::DB>,
        f: &FinishedAttempt,
        rule: &AutoDisable,
        now: UnixMs,
    ) -> Result<FinishEffects> {
        if Self::finishes_at_once(f) {
            return Self::finish_at_once_in(tx, f, now).await;
        }
        let a = &f.attempt;
        // The delivery first: it is the guard (still ours?) and, on SQLite, takes the write lock.
        let crashed = matches!(f.next, NextStep::Lost { crashed: true, .. });
        let sql = finish_update_sql();
        let done = Self::bind_finish_update(sqlx::query(&sql), f, now)
            .fetch_optional(&mut **tx)
            .await?
            .map(
                |row| -> std::result::Result<(String, String), sqlx::Error> {
                    Ok((sqlx::Row::try_get(&row, 0)?, sqlx::Row::try_get(&row, 1)?))
                },
            )
            .transpose()?;
        let Some((new_status, event_id)) = done else {
            // No longer ours (recovered by another worker): nothing was changed.
            return Ok(FinishEffects::default());
        };
        let lost_for_good = crashed && new_status == DeliveryStatus::Failed.as_str();
        let message = if lost_for_good {
            Some(format!(
                "{}; that is {} times in a row, so the delivery failed and is not tried again",
                a.error_message.as_deref().unwrap_or("the attempt was lost"),
                crate::storage::LOST_IN_A_ROW_FAILS
            ))
        } else {
            a.error_message.clone()
        };
        let insert = format!(
            "INSERT INTO attempts ({ATTEMPT_COLUMNS}) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)"
        );
        Self::bind_attempt(sqlx::query(&insert), a, &message)
            .execute(&mut **tx)
            .await?;

        let mut effects = FinishEffects {
            applied: true,
            lost_for_good,
            ..Default::default()
        };
        let dst = f.destination_id.to_string();
        if lost_for_good {
            sqlx::query(
                "INSERT INTO notifications (id, space_id, kind, subject_kind, subject_id, message, created_at) \
                 VALUES ($1, $2, 'delivery.lost', 'delivery', $3, $4, $5)",
            )
            .bind(NotificationId::new().to_string())
            .bind(a.space_id.to_string())
            .bind(a.delivery_id.to_string())
            .bind(format!(
                "Delivery {} (event {event_id}) was lost {} times in a row: the server stopped \
                 while sending it each time. It was marked failed and is not tried again; \
                 send it again once the cause is found.",
                a.delivery_id,
                crate::storage::LOST_IN_A_ROW_FAILS
            ))
            .bind(now)
            .execute(&mut **tx)
            .await?;
        }
        match f.next {
            NextStep::Succeeded => {
                sqlx::query(
                    "UPDATE destinations SET consecutive_dead_letters = 0 \
                     WHERE id = $1 AND consecutive_dead_letters <> 0",
                )
                .bind(&dst)
                .execute(&mut **tx)
                .await?;
            }
            NextStep::DeadLetter => {
                let (streak, url, status, own_name): (i64, String, String, Option<String>) = sqlx::query_as(
                    "UPDATE destinations SET consecutive_dead_letters = consecutive_dead_letters + 1 \
                     WHERE id = $1 RETURNING consecutive_dead_letters, url, status, name",
                )
                .bind(&dst)
                .fetch_one(&mut **tx)
                .await?;
                effects.dead_letter_streak = Some(streak);
                let name = shown_name(own_name.as_deref(), &url);
                let active = status == DestinationStatus::Active.as_str();
                let step = if active {
                    rule.step(streak)
                } else {
                    StreakStep::Nothing
                };
                let message = match step {
                    StreakStep::Nothing => None,
                    StreakStep::Warn => {
                        effects.warned = true;
                        Some((
                            "destination.failing",
                            failing_destination_text(&name, &url, streak, rule.after),
                        ))
                    }
                    StreakStep::Disable => {
                        effects.destination_disabled = true;
                        let reason = format!("{streak} dead-lettered deliveries in a row");
                        sqlx::query(
                            "UPDATE destinations SET status = 'inactive', disabled_reason = $1, updated_at = $2 \
                             WHERE id = $3",
                        )
                        .bind(&reason)
                        .bind(now)
                        .bind(&dst)
                        .execute(&mut **tx)
                        .await?;
                        sqlx::query(
                            "UPDATE deliveries SET paused = TRUE, updated_at = $1 \
                             WHERE destination_id = $2 AND status IN ('pending', 'retrying')",
                        )
                        .bind(now)
                        .bind(&dst)
                        .execute(&mut **tx)
                        .await?;
                        Some((
                            "destination.disabled",
                            disabled_destination_text(&name, &url, &reason),
                        ))
                    }
                };
                if let Some((kind, message)) = message {
                    sqlx::query(
                        "INSERT INTO notifications (id, space_id, kind, subject_kind, subject_id, message, created_at) \
                         VALUES ($1, $2, $3, 'destination', $4, $5, $6)",
                    )
                    .bind(NotificationId::new().to_string())
                    .bind(a.space_id.to_string())
                    .bind(kind)
                    .bind(&dst)
                    .bind(message)
                    .bind(now)
                    .execute(&mut **tx)
                    .await?;
                }
            }
            NextStep::Retry { .. } | NextStep::Lost { .. } => {}
        }
        Ok(effects)
    }
}

/// The columns of an attempt row, in the order [`Store::bind_attempt`] binds them.
const ATTEMPT_COLUMNS: &str =
    "id, delivery_id, space_id, attempt_number, started_at, duration_ms, \
    request_url, request_headers, request_body, response_status, response_headers, response_body, \
    error_class, error_message";

/// [`Store::finish_batch`] as one statement for `n` attempts, for PostgreSQL (which runs
/// one statement with parameters at a time): each attempt's steps are data-modifying
/// CTEs (`done0`, `attempt0`, `streak0`, then `done1`…, its parameters numbered after
/// the attempts' before it, [`renumbered`]), each going on only if its delivery's update
/// returned its row. Its one row answers two columns an attempt: whether it was applied,
/// whether its destination has more due. The CTEs all see the database as the statement
/// found it, so whether more is due counts the others waiting and this one if it is due
/// again already (`$3`, its next attempt, by `$6`, now). Two attempts to one destination
/// that both end its dead-letter streak update its row once (the other finds it done).
fn finish_statement(n: usize) -> String {
    let one_ctes = format!(
        "done AS ({update}), \
         attempt AS ( \
           INSERT INTO attempts ({ATTEMPT_COLUMNS}) \
           SELECT $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24, $25 \
           WHERE EXISTS (SELECT 1 FROM done) \
         ), streak AS ( \
           UPDATE destinations SET consecutive_dead_letters = 0 \
           WHERE $27 AND id = $26 AND consecutive_dead_letters <> 0 AND EXISTS (SELECT 1 FROM done) \
         )",
        update = finish_update_sql()
    );
    let one_answer = "EXISTS (SELECT 1 FROM done), \
           EXISTS (SELECT 1 FROM deliveries WHERE destination_id = $26 AND id <> $8 \
                   AND status IN ('pending', 'retrying') AND paused = FALSE AND next_attempt_at <= $6) \
           OR COALESCE($3 <= $6 AND EXISTS (SELECT 1 FROM done), FALSE)";
    let nth = |text: &str, k: usize| {
        let named = ["done", "attempt", "streak"]
            .iter()
            .fold(text.to_string(), |t, name| {
                t.replace(&format!("{name} AS"), &format!("{name}{k} AS"))
                    .replace(&format!("FROM {name})"), &format!("FROM {name}{k})"))
            });
        renumbered(&named, k * FINISH_PARAMETERS)
    };
    let ctes: Vec<String> = (0..n).map(|k| nth(&one_ctes, k)).collect();
    let answers: Vec<String> = (0..n).map(|k| nth(one_answer, k)).collect();
    format!("WITH {} SELECT {}", ctes.join(", "), answers.join(", "))
}

/// The effects of the one attempt a record was for.
fn the_one(mut effects: Vec<FinishEffects>) -> Result<FinishEffects> {
    effects
        .pop()
        .ok_or_else(|| StorageError::Internal("an attempt's record answered nothing".into()))
}

/// What a [`finish_statement`] for `n` attempts answered in its row: each one's effects.
fn finish_statement_effects<R: sqlx::Row>(row: &R, n: usize) -> Result<Vec<FinishEffects>>
where
    usize: ColumnIndex<R>,
    for<'r> bool: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    (0..n)
        .map(|k| {
            Ok(FinishEffects {
                applied: row.try_get::<bool, _>(2 * k)?,
                more_due: Some(row.try_get::<bool, _>(2 * k + 1)?),
                ..Default::default()
            })
        })
        .collect()
}

/// PostgreSQL: the transaction's statements scan no index by bitmap. Queue-like tables
/// (rate slots, deliveries in flight) leave dead index entries by the thousand between
/// vacuums; a bitmap scan reads every one each time, a plain index scan marks those it
/// meets as dead and the next scans step over them. Measured in a claim at 1,000 events
/// a second: the plan slots' DELETE read 5,300 dead entries to delete none, 0.26 ms of
/// the statement's 0.45; with index scans, 0.02 ms (`Postgres::begin_claim`).
pub(super) const NO_BITMAP_SCANS: &str = "SET LOCAL enable_bitmapscan = off";

/// The most finished attempts written by one string of statements ([`Store::finish_all_at_once`]).
pub(super) const FINISH_CHUNK: usize = 8;

/// How many parameters [`Store::finish_batch`] takes (`$1` … `$27`).
pub(super) const FINISH_PARAMETERS: usize = 27;

/// PostgreSQL's one statement that takes up to `$5` slots of the rate window `$1` at once
/// ([`Store::take_slots_in`] in a claim): the key's row, touched at `$2` and locked, answers how
/// many slots it holds (`taken`, as the triggers keep it); the window's slots at or before
/// `$3` go; as many slots as the limit `$4` leaves go in, dated `$2`. Its parts see the
/// table as the statement began, so the slots left are counted from the key's row less the
/// slots this statement deleted, not read back. The triggers then bring `taken` up to date
/// for both changes, at the statement's end. Its changed rows are the slots granted.
const PLAN_SLOTS: &str = "WITH k AS ( \
       INSERT INTO rate_keys (key, touched_at) VALUES ($1, $2) \
       ON CONFLICT (key) DO UPDATE SET touched_at = excluded.touched_at RETURNING taken \
     ), gone AS (DELETE FROM rate_events WHERE key = $1 AND at <= $3 RETURNING 1) \
     INSERT INTO rate_events (key, at) SELECT $1, $2 FROM generate_series(1, $5::bigint) AS v(n) \
     WHERE v.n <= $4 - ((SELECT taken FROM k) - (SELECT COUNT(*) FROM gone))";

/// SQLite's statements that take up to `wanted` slots of a rate window at once: the key's
/// row (`$1`, touched at `$2`), the window's end (slots at or before `$3` go), then as many
/// slots as the running count leaves under the limit (`$4`); the last statement's changed
/// rows are the slots granted.
fn slots_batch(wanted: i64) -> String {
    let numbers: Vec<String> = (1..=wanted).map(|n| format!("({n})")).collect();
    format!(
        "INSERT INTO rate_keys (key, touched_at) VALUES ($1, $2) \
         ON CONFLICT (key) DO UPDATE SET touched_at = excluded.touched_at; \
         DELETE FROM rate_events WHERE key = $1 AND at <= $3; \
         INSERT INTO rate_events (key, at) SELECT $1, {} FROM (VALUES {}) AS v \
         WHERE v.column1 <= $4 - (SELECT taken FROM rate_keys WHERE key = $1)",
        slot_date("$2"),
        numbers.join(", ")
    )
}

/// What a rate slot is dated with on SQLite: `now` (the time its writer began with), or,
/// if later, SQLite's clock as the statement runs (the same wall clock, `unixepoch`).
/// A string may wait on the connection's thread behind the strings sent before it
/// ([`super::write::Writer::run_transaction_batch`]); a slot dated before it ran would be
/// dated earlier than its request by that wait, and the windows' 25 ms margin covers only
/// the time from a slot's date to its request (docs §2.5). The window's old slots are
/// still dropped by `now`, which only keeps more of them.
pub(super) fn slot_date(now: &str) -> String {
    format!("MAX({now}, CAST(unixepoch('subsec') * 1000 AS INTEGER))")
}

/// The milliseconds until a slot of a window frees, from its oldest slot (`None`: none
/// left, a whole window), at least 1; 0 when none is awaited (`short`: fewer slots
/// granted than wanted).
fn slot_frees_in(oldest: Option<UnixMs>, window_ms: i64, now: UnixMs, short: bool) -> i64 {
    if !short {
        return 0;
    }
    (oldest.unwrap_or(now) + window_ms - now).clamp(1, window_ms)
}

/// SQL strings built once for each of their shapes ([`memoized`]): an engine's claim and
/// its records' batches are the same few strings over and over, each some kilobytes of
/// `format!` and [`renumbered`] (at low load ~5 % of an event's instructions).
pub(super) type Memo<K, V> = std::sync::LazyLock<std::sync::Mutex<HashMap<K, V>>>;

/// The most shapes a [`Memo`] keeps; past it, the others are built each time.
const MEMO_AT_MOST: usize = 256;

/// `build()`'s value for `key`, built once and then taken from `memo`.
pub(super) fn memoized<K, V>(memo: &Memo<K, V>, key: K, build: impl FnOnce() -> V) -> V
where
    K: std::hash::Hash + Eq,
    V: Clone,
{
    if let Some(v) = memo.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return v.clone();
    }
    let v = build();
    let mut memo = memo.lock().unwrap_or_else(|p| p.into_inner());
    if memo.len() < MEMO_AT_MOST {
        memo.insert(key, v.clone());
    }
    v
}

/// `sql` with every parameter `$n` renamed `$(n + by)`, so several statements that each
/// number theirs from `$1` can share one string and one argument list.
pub(super) fn renumbered(sql: &str, by: usize) -> String {
    let mut out = String::with_capacity(sql.len() + sql.len() / 8);
    let mut rest = sql;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..=at]);
        rest = &rest[at + 1..];
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if let Ok(n) = rest[..digits].parse::<usize>() {
            out.push_str(&(n + by).to_string());
        }
        rest = &rest[digits..];
    }
    out.push_str(rest);
    out
}

/// The delivery's columns after an attempt that ends with `next`: its status, the attempts
/// it used, when it is due again and when it finished.
fn finish_columns(
    next: NextStep,
    now: UnixMs,
) -> (DeliveryStatus, i64, Option<UnixMs>, Option<UnixMs>) {
    match next {
        NextStep::Succeeded => (DeliveryStatus::Succeeded, 1, None, Some(now)),
        NextStep::Retry { at } => (DeliveryStatus::Retrying, 1, Some(at), None),
        NextStep::DeadLetter => (DeliveryStatus::Failed, 1, None, Some(now)),
        NextStep::Lost { retry_at, .. } => (DeliveryStatus::Retrying, 0, Some(retry_at), None),
    }
}

/// The update of a delivery whose attempt ended, the guard of everything else recorded
/// (`RETURNING` a row only while the claim is still this worker's). A crash-lost attempt
/// ($10) adds to the delivery's lost streak (anything else ends it); the one that reaches
/// the limit ($11) fails the delivery instead.
fn finish_update_sql() -> String {
    let given_up = "$10 AND lost_streak + 1 >= $11";
    format!(
        "UPDATE deliveries SET \
           status = CASE WHEN {given_up} THEN 'failed' \
                         WHEN $1 = 'retrying' AND attempts + $2 = 0 THEN 'pending' ELSE $1 END, \
           attempts = attempts + $2, lease_expires_at = NULL, \
           next_attempt_at = CASE WHEN {given_up} THEN NULL ELSE $3 END, \
           finished_at = CASE WHEN {given_up} THEN $6 ELSE $7 END, \
           lost_streak = CASE WHEN $10 THEN lost_streak + 1 ELSE 0 END, \
           last_error_class = $4, last_status_code = $5, updated_at = $6 \
         WHERE id = $8 AND status = 'sending' AND ($9 IS NULL OR lease_expires_at < $9) \
         RETURNING status, event_id"
    )
}

#[cfg(test)]
mod tests {
    use super::{
        finish_statement, memoized, renumbered, slot_frees_in, Memo, FINISH_PARAMETERS,
        MEMO_AT_MOST,
    };

    #[test]
    fn a_memo_builds_each_shape_once_and_keeps_at_most_its_bound() {
        static MEMO: Memo<usize, String> = Memo::new(Default::default);
        let mut built = 0;
        for _ in 0..3 {
            let seven = memoized(&MEMO, 7, || {
                built += 1;
                "seven".to_owned()
            });
            assert_eq!(seven, "seven");
        }
        assert_eq!(built, 1, "built once, then kept");
        for k in 0..MEMO_AT_MOST * 2 {
            assert_eq!(memoized(&MEMO, 100 + k, || k.to_string()), k.to_string());
        }
        assert_eq!(MEMO.lock().unwrap().len(), MEMO_AT_MOST, "bounded");
    }

    #[test]
    fn a_slot_frees_when_the_oldest_leaves_the_window_and_none_is_awaited_when_all_were_granted() {
        assert_eq!(slot_frees_in(Some(1_000), 1_025, 1_500, true), 525);
        assert_eq!(slot_frees_in(Some(1_000), 1_025, 1_500, false), 0);
        // None left: a whole window; never 0 or less when one is awaited.
        assert_eq!(slot_frees_in(None, 1_025, 1_500, true), 1_025);
        assert_eq!(slot_frees_in(Some(100), 1_025, 5_000, true), 1);
    }

    #[test]
    fn renumbering_moves_every_parameter_and_nothing_else() {
        assert_eq!(
            renumbered("UPDATE t SET a = $1, b = $12 WHERE c = $2 AND d = '$'", 27),
            "UPDATE t SET a = $28, b = $39 WHERE c = $29 AND d = '$'"
        );
        assert_eq!(renumbered("SELECT $1", 0), "SELECT $1");
        assert_eq!(renumbered("no parameters", 5), "no parameters");
    }

    #[test]
    fn a_finish_statement_for_several_attempts_gives_each_its_own_steps_and_parameters() {
        let params = |sql: &str| -> std::collections::BTreeSet<usize> {
            sql.split('$')
                .skip(1)
                .filter_map(|p| p.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok())
                .collect()
        };
        let one = finish_statement(1);
        assert_eq!(params(&one), (1..=FINISH_PARAMETERS).collect());
        let three = finish_statement(3);
        assert_eq!(params(&three), (1..=3 * FINISH_PARAMETERS).collect());
        for k in 0..3 {
            for step in ["done", "attempt", "streak"] {
                assert_eq!(
                    three.matches(&format!("{step}{k} AS (")).count(),
                    1,
                    "{step}{k}"
                );
            }
            // The attempt and the streak, and the answer, go on from its own update.
            assert_eq!(
                three.matches(&format!("FROM done{k})")).count(),
                4,
                "done{k}"
            );
        }
        for unnamed in ["done AS", "FROM done)", "attempt AS", "streak AS"] {
            assert!(!three.contains(unnamed), "{unnamed}");
        }
        assert!(three.starts_with("WITH done0 AS (UPDATE deliveries"));
    }
}
