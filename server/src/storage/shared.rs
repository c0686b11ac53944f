//! The SQL both backends share, written once.
//!
//! [`impl_storage!`] expands to a whole `impl Storage for …` for a backend struct
//! with a `pool` field; the backend passes in the few methods whose SQL differs.
//! Each query is type-checked once per backend, so a query that one dialect
//! rejects fails to build there, not at run time.

pub(super) const SPACE: &str = "id, name, plan, created_at";
pub(super) const API_KEY: &str = "id, space_id, name, prefix, created_at, last_used_at, revoked_at";
pub(super) const CHANNEL: &str = "id, space_id, name, created_at";
pub(super) const MESSAGE: &str =
    "id, space_id, channel_id, text, attachments, source_kind, source_id, created_at";
pub(super) const EVENT: &str = "id, space_id, event_type, payload, created_at";
pub(super) const DESTINATION: &str = "id, space_id, url, description, event_types, secret, \
    previous_secret, previous_secret_expires_at, rate_limit_count, rate_limit_period, max_attempts, \
    timeout_seconds, retry_policy, transformation, status, consecutive_dead_letters, skipped_events, \
    disabled_reason, created_at, updated_at";
pub(super) const DELIVERY: &str =
    "id, space_id, event_id, destination_id, event_type, status, paused, \
    attempts, next_attempt_at, lease_expires_at, last_error_class, last_status_code, resent_from, \
    resent_as, created_at, updated_at, finished_at";
pub(super) const ATTEMPT: &str =
    "id, delivery_id, space_id, attempt_number, started_at, duration_ms, \
    request_url, request_headers, request_body, response_status, response_headers, response_body, \
    error_class, error_message";
pub(super) const INCOMING_WEBHOOK: &str =
    "id, space_id, channel_id, name, token_hash, signing_secret, \
    status, consecutive_failures, created_at, updated_at, disabled_at";
pub(super) const BOT: &str = "id, space_id, name, token_hash, created_at, revoked_at";
pub(super) const USER: &str = "id, email, password_hash, role, created_at, disabled_at";
pub(super) const NOTIFICATION: &str =
    "id, space_id, kind, subject_kind, subject_id, message, created_at, read_at";

/// A condition on the user `$1`: it is not an admin, or another admin is still active.
pub(super) const NOT_LAST_ADMIN: &str = "(role <> 'admin' OR EXISTS (SELECT 1 FROM users o \
    WHERE o.role = 'admin' AND o.disabled_at IS NULL AND o.id <> $1))";

/// How many of the earliest due deliveries a claim looks at to find ones it may take.
pub(super) const CLAIM_SCAN: i64 = 5000;

/// The claim, shared by both backends: the earliest due deliveries, at most
/// `$4` in flight per destination (counting what is already `sending`, on every
/// instance), at most `$5` of them retries, moved to `sending` under a lease.
/// `$1` now, `$2` limit, `$3` lease margin. Destinations already at their cap are
/// left out while scanning, so their backlog never hides other destinations' work;
/// `due_index` names the index to scan where the planner needs telling (SQLite).
pub(super) fn claim_sql(due_index: &str) -> String {
    format!(
        "WITH busy AS ( \
           SELECT destination_id, COUNT(*) AS n FROM deliveries WHERE status = 'sending' GROUP BY destination_id \
         ), due AS ( \
           SELECT id, destination_id, status, next_attempt_at FROM deliveries {due_index} \
           WHERE status IN ('pending', 'retrying') AND paused = FALSE AND next_attempt_at <= $1 \
             AND destination_id NOT IN (SELECT destination_id FROM busy WHERE n >= $4) \
           ORDER BY next_attempt_at, id LIMIT {CLAIM_SCAN} \
         ), ranked AS ( \
           SELECT due.id, due.status, due.next_attempt_at, \
             ROW_NUMBER() OVER (PARTITION BY due.destination_id ORDER BY due.next_attempt_at, due.id) \
               + COALESCE(busy.n, 0) AS slot, \
             ROW_NUMBER() OVER (PARTITION BY due.status ORDER BY due.next_attempt_at, due.id) AS nth \
           FROM due LEFT JOIN busy ON busy.destination_id = due.destination_id \
         ), chosen AS ( \
           SELECT id FROM ranked WHERE slot <= $4 AND (status = 'pending' OR nth <= $5) \
           ORDER BY next_attempt_at, id LIMIT $2 \
         ) \
         UPDATE deliveries SET status = 'sending', updated_at = $1, \
           lease_expires_at = $1 + $3 + 1000 * (SELECT timeout_seconds FROM destinations t \
                                                WHERE t.id = deliveries.destination_id) \
         WHERE id IN (SELECT id FROM chosen) \
         RETURNING {}",
        DELIVERY
    )
}

/// Rows per multi-row INSERT when fanning an event out (below both backends' bind limits).
pub(super) const FAN_OUT_CHUNK: usize = 500;

macro_rules! impl_storage {
    ($backend:ty, $db:ty, { $($specific:tt)* }) => {
        impl $backend {
            /// The event, its idempotency key and its fan-out, inside `tx`. `None` when the
            /// idempotency key was taken: the caller rolls back and reads the first answer.
            async fn publish_in(
                tx: &mut $crate::storage::write::WriteTx<'_, $db>,
                new: &NewEvent,
                now: UnixMs,
            ) -> Result<Option<Published>> {
                let e = &new.event;
                let space = e.space_id.to_string();
                sqlx::query(
                    "INSERT INTO events (id, space_id, event_type, payload, created_at) VALUES ($1, $2, $3, $4, $5)",
                )
                .bind(e.id.to_string())
                .bind(&space)
                .bind(&e.event_type)
                .bind(e.payload.to_string())
                .bind(e.created_at)
                .execute(&mut **tx)
                .await?;

                if let Some(key) = &new.idempotency_key {
                    let claimed = sqlx::query(
                        "INSERT INTO idempotency_keys (space_id, key, request_hash, event_id, deliveries, created_at) \
                         VALUES ($1, $2, $3, $4, 0, $5) ON CONFLICT (space_id, key) DO NOTHING",
                    )
                    .bind(&space)
                    .bind(key)
                    .bind(&new.request_hash)
                    .bind(e.id.to_string())
                    .bind(now)
                    .execute(&mut **tx)
                    .await?;
                    if claimed.rows_affected() == 0 {
                        return Ok(None);
                    }
                }

                let (active, inactive) = Self::subscribers(tx, &space, &e.event_type).await?;
                let targets: Vec<(&Event, DestinationId)> = active.iter().map(|d| (e, *d)).collect();
                Self::insert_deliveries(tx, &targets, now).await?;
                Self::count_skipped(tx, inactive.iter().map(|d| (*d, 1))).await?;
                let deliveries = active.len() as i64;
                if let Some(key) = &new.idempotency_key {
                    sqlx::query("UPDATE idempotency_keys SET deliveries = $1 WHERE space_id = $2 AND key = $3")
                        .bind(deliveries)
                        .bind(&space)
                        .bind(key)
                        .execute(&mut **tx)
                        .await?;
                }
                Ok(Some(Published::Created {
                    event_id: e.id,
                    deliveries,
                    skipped: inactive.len() as i64,
                    destinations: active,
                }))
            }

            /// The active and the inactive destinations of `space` subscribed to `event_type`.
            async fn subscribers(
                tx: &mut $crate::storage::write::WriteTx<'_, $db>,
                space: &str,
                event_type: &str,
            ) -> Result<(Vec<DestinationId>, Vec<DestinationId>)> {
                let sql = format!(
                    "SELECT {} FROM destinations WHERE id IN ( \
                       SELECT destination_id FROM subscriptions \
                       WHERE space_id = $1 AND event_type IN ($2, '*'))",
                    shared::DESTINATION
                );
                let destinations: Vec<Destination> = rows::convert_all(
                    sqlx::query_as::<_, rows::DestinationRow>(&sql)
                        .bind(space)
                        .bind(event_type)
                        .fetch_all(&mut **tx)
                        .await?,
                )?;
                let (active, inactive): (Vec<_>, Vec<_>) = destinations
                    .iter()
                    .filter(|d| d.subscribes_to(event_type))
                    .partition(|d| d.status == DestinationStatus::Active);
                Ok((active.iter().map(|d| d.id).collect(), inactive.iter().map(|d| d.id).collect()))
            }

            /// The destination's rows in `subscriptions`, rewritten from its `event_types`.
            async fn write_subscriptions(tx: &mut $crate::storage::write::WriteTx<'_, $db>, d: &Destination) -> Result<()> {
                sqlx::query("DELETE FROM subscriptions WHERE destination_id = $1")
                    .bind(d.id.to_string())
                    .execute(&mut **tx)
                    .await?;
                let mut types: Vec<&str> = match &d.event_types {
                    Some(types) if !types.iter().any(|t| t == "*") => types.iter().map(String::as_str).collect(),
                    _ => vec!["*"],
                };
                types.sort_unstable();
                types.dedup();
                for chunk in types.chunks(shared::FAN_OUT_CHUNK) {
                    let mut insert =
                        sqlx::QueryBuilder::<$db>::new("INSERT INTO subscriptions (space_id, event_type, destination_id) ");
                    insert.push_values(chunk, |mut row, t| {
                        row.push_bind(d.space_id.to_string()).push_bind(*t).push_bind(d.id.to_string());
                    });
                    insert.build().execute(&mut **tx).await?;
                }
                Ok(())
            }

            /// One pending delivery per (event, destination), due now, in multi-row INSERTs.
            async fn insert_deliveries(
                tx: &mut $crate::storage::write::WriteTx<'_, $db>,
                targets: &[(&Event, DestinationId)],
                now: UnixMs,
            ) -> Result<()> {
                for chunk in targets.chunks(shared::FAN_OUT_CHUNK) {
                    let mut insert = sqlx::QueryBuilder::<$db>::new(
                        "INSERT INTO deliveries (id, space_id, event_id, destination_id, event_type, status, \
                         attempts, next_attempt_at, created_at, updated_at) ",
                    );
                    insert.push_values(chunk, |mut row, (e, d)| {
                        row.push_bind(DeliveryId::new().to_string())
                            .push_bind(e.space_id.to_string())
                            .push_bind(e.id.to_string())
                            .push_bind(d.to_string())
                            .push_bind(&e.event_type)
                            .push_bind(DeliveryStatus::Pending.as_str())
                            .push_bind(0_i64)
                            .push_bind(now)
                            .push_bind(now)
                            .push_bind(now);
                    });
                    insert.build().execute(&mut **tx).await?;
                }
                Ok(())
            }

            /// D5: an inactive destination is not caught up later; it only counts what it missed.
            async fn count_skipped(
                tx: &mut $crate::storage::write::WriteTx<'_, $db>,
                skipped: impl Iterator<Item = (DestinationId, i64)>,
            ) -> Result<()> {
                for (d, n) in skipped {
                    sqlx::query("UPDATE destinations SET skipped_events = skipped_events + $1 WHERE id = $2")
                        .bind(n)
                        .bind(d.to_string())
                        .execute(&mut **tx)
                        .await?;
                }
                Ok(())
            }

            /// Events without an idempotency key, all at once: one INSERT for the events, one
            /// look-up per (space, type), one INSERT for all their deliveries.
            async fn publish_plain_in(
                tx: &mut $crate::storage::write::WriteTx<'_, $db>,
                events: &[&NewEvent],
                now: UnixMs,
            ) -> Result<Vec<Published>> {
                for chunk in events.chunks(shared::FAN_OUT_CHUNK) {
                    let mut insert = sqlx::QueryBuilder::<$db>::new(
                        "INSERT INTO events (id, space_id, event_type, payload, created_at) ",
                    );
                    insert.push_values(chunk, |mut row, new| {
                        let e = &new.event;
                        row.push_bind(e.id.to_string())
                            .push_bind(e.space_id.to_string())
                            .push_bind(&e.event_type)
                            .push_bind(e.payload.to_string())
                            .push_bind(e.created_at);
                    });
                    insert.build().execute(&mut **tx).await?;
                }
                let mut subscribed: std::collections::HashMap<(SpaceId, &str), (Vec<DestinationId>, Vec<DestinationId>)> =
                    std::collections::HashMap::new();
                for new in events {
                    let e = &new.event;
                    if !subscribed.contains_key(&(e.space_id, e.event_type.as_str())) {
                        let found = Self::subscribers(tx, &e.space_id.to_string(), &e.event_type).await?;
                        subscribed.insert((e.space_id, e.event_type.as_str()), found);
                    }
                }
                let mut targets = Vec::new();
                let mut skipped: std::collections::HashMap<DestinationId, i64> = std::collections::HashMap::new();
                let mut answers = Vec::with_capacity(events.len());
                for new in events {
                    let e = &new.event;
                    let (active, inactive) = &subscribed[&(e.space_id, e.event_type.as_str())];
                    targets.extend(active.iter().map(|d| (e, *d)));
                    for d in inactive {
                        *skipped.entry(*d).or_default() += 1;
                    }
                    answers.push(Published::Created {
                        event_id: e.id,
                        deliveries: active.len() as i64,
                        skipped: inactive.len() as i64,
                        destinations: active.clone(),
                    });
                }
                Self::insert_deliveries(tx, &targets, now).await?;
                Self::count_skipped(tx, skipped.into_iter()).await?;
                Ok(answers)
            }

            /// One finished attempt and its consequences, inside `tx`.
            async fn finish_in(
                tx: &mut $crate::storage::write::WriteTx<'_, $db>,
                f: &FinishedAttempt,
                rule: &AutoDisable,
                now: UnixMs,
            ) -> Result<FinishEffects> {
                let a = &f.attempt;
                // The delivery first: it is the guard (still ours?) and, on SQLite, takes the write lock.
                let (status, used, next_at, finished_at) = match f.next {
                    NextStep::Succeeded => (DeliveryStatus::Succeeded, 1_i64, None, Some(now)),
                    NextStep::Retry { at } => (DeliveryStatus::Retrying, 1, Some(at), None),
                    NextStep::DeadLetter => (DeliveryStatus::Failed, 1, None, Some(now)),
                    NextStep::Lost { retry_at, .. } => (DeliveryStatus::Retrying, 0, Some(retry_at), None),
                };
                let crashed = matches!(f.next, NextStep::Lost { crashed: true, .. });
                // A crash-lost attempt adds to the delivery's lost streak (anything else ends
                // it); the one that reaches the limit fails the delivery instead.
                let given_up = "$10 AND lost_streak + 1 >= $11";
                let sql = format!(
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
                );
                let done: Option<(String, String)> = sqlx::query_as(&sql)
                    .bind(status.as_str())
                    .bind(used)
                    .bind(next_at)
                    .bind(a.error_class.map(|c| c.as_str()))
                    .bind(a.response_status)
                    .bind(now)
                    .bind(finished_at)
                    .bind(a.delivery_id.to_string())
                    .bind(f.only_if_lease_expired_before)
                    .bind(crashed)
                    .bind(crate::storage::LOST_IN_A_ROW_FAILS)
                    .fetch_optional(&mut **tx)
                    .await?;
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
                sqlx::query(
                    "INSERT INTO attempts (id, delivery_id, space_id, attempt_number, started_at, duration_ms, \
                     request_url, request_headers, request_body, response_status, response_headers, response_body, \
                     error_class, error_message) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)",
                )
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
                .bind(&message)
                .execute(&mut **tx)
                .await?;

                let mut effects = FinishEffects { applied: true, lost_for_good, ..Default::default() };
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
                        let (streak, url, status): (i64, String, String) = sqlx::query_as(
                            "UPDATE destinations SET consecutive_dead_letters = consecutive_dead_letters + 1 \
                             WHERE id = $1 RETURNING consecutive_dead_letters, url, status",
                        )
                        .bind(&dst)
                        .fetch_one(&mut **tx)
                        .await?;
                        effects.dead_letter_streak = Some(streak);
                        let active = status == DestinationStatus::Active.as_str();
                        let step = if active { rule.step(streak) } else { StreakStep::Nothing };
                        let message = match step {
                            StreakStep::Nothing => None,
                            StreakStep::Warn => {
                                effects.warned = true;
                                Some(("destination.failing", format!(
                                    "Destination {url} has dead-lettered {streak} deliveries in a row; \
                                     it will be disabled at {}.", rule.after
                                )))
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
                                Some(("destination.disabled", format!(
                                    "Destination {url} was disabled after {reason}. New events are not \
                                     delivered to it; waiting deliveries are paused until an admin re-enables it."
                                )))
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

            /// A new delivery of the same event to the same destination, due now with a full set
            /// of attempts, linked both ways to the original `id` (docs §2.7).
            async fn resend_in(tx: &mut $crate::storage::write::WriteTx<'_, $db>, id: &str, now: UnixMs) -> Result<DeliveryId> {
                let copy = DeliveryId::new();
                sqlx::query(
                    "INSERT INTO deliveries (id, space_id, event_id, destination_id, event_type, status, attempts, \
                     next_attempt_at, resent_from, created_at, updated_at) \
                     SELECT $1, space_id, event_id, destination_id, event_type, 'pending', 0, $2, id, $2, $2 \
                     FROM deliveries WHERE id = $3",
                )
                .bind(copy.to_string())
                .bind(now)
                .bind(id)
                .execute(&mut **tx)
                .await?;
                sqlx::query("UPDATE deliveries SET resent_as = $1, updated_at = $2 WHERE id = $3")
                    .bind(copy.to_string())
                    .bind(now)
                    .bind(id)
                    .execute(&mut **tx)
                    .await?;
                Ok(copy)
            }

            /// One statement that must change a row (else `NotFound`), as a writer: every
            /// single-statement write goes through here, so none bypasses the write gate.
            async fn write_one<'q>(
                &self,
                q: sqlx::query::Query<'q, $db, <$db as sqlx::Database>::Arguments<'q>>,
            ) -> Result<()> {
                let _gate = self.gate().await;
                if q.execute(&self.pool).await?.rows_affected() == 0 {
                    return Err(StorageError::NotFound);
                }
                Ok(())
            }

            async fn first_answer(&self, space_id: SpaceId, key: &str) -> Result<Published> {
                let first = sqlx::query_as::<_, rows::IdempotencyRow>(
                    "SELECT request_hash, event_id, deliveries FROM idempotency_keys WHERE space_id = $1 AND key = $2",
                )
                .bind(space_id.to_string())
                .bind(key)
                .fetch_one(&self.pool)
                .await?;
                Ok(Published::Replayed {
                    event_id: first
                        .event_id
                        .parse()
                        .map_err(|e| StorageError::Corrupt(format!("idempotency_keys.event_id: {e}")))?,
                    deliveries: first.deliveries,
                    request_hash: first.request_hash,
                })
            }

            /// A keyset page, newest first: the rows of `table` whose `owner` column holds the
            /// given key, that also meet `only` (SQL text, no binds), with an ID below `before`.
            /// The cursor is pushed only when there is one, so both planners read it as a range
            /// of the `(owner, id)` index; `($n IS NULL OR id < $n)` would make SQLite walk every
            /// newer row of the owner on each page.
            async fn keyset_page<R, I: ToString>(
                &self,
                (columns, table): (&'static str, &'static str),
                (owner, key): (&'static str, String),
                only: &'static str,
                page: Page<I>,
            ) -> Result<Vec<R>>
            where
                R: for<'r> sqlx::FromRow<'r, <$db as sqlx::Database>::Row> + Send + Unpin,
            {
                let mut q = sqlx::QueryBuilder::<$db>::new(format!("SELECT {columns} FROM {table} WHERE {owner} = "));
                q.push_bind(key).push(only);
                if let Some(before) = page.before {
                    q.push(" AND id < ").push_bind(before.to_string());
                }
                q.push(" ORDER BY id DESC LIMIT ").push_bind(page.limit);
                Ok(q.build_query_as::<R>().fetch_all(&self.pool).await?)
            }
        }

        #[async_trait::async_trait]
        impl $crate::storage::Storage for $backend {
            $($specific)*

            async fn ping(&self) -> Result<()> {
                sqlx::query("SELECT 1").execute(&self.pool).await?;
                Ok(())
            }

            async fn create_space(&self, s: &Space) -> Result<()> {
                let _gate = self.gate().await;
                sqlx::query("INSERT INTO spaces (id, name, plan, created_at) VALUES ($1, $2, $3, $4)")
                    .bind(s.id.to_string())
                    .bind(&s.name)
                    .bind(s.plan.as_str())
                    .bind(s.created_at)
                    .execute(&self.pool)
                    .await?;
                Ok(())
            }

            async fn get_space(&self, id: SpaceId) -> Result<Space> {
                let sql = format!("SELECT {} FROM spaces WHERE id = $1", shared::SPACE);
                sqlx::query_as::<_, rows::SpaceRow>(&sql)
                    .bind(id.to_string())
                    .fetch_one(&self.pool)
                    .await?
                    .try_into()
            }

            async fn list_all_spaces(&self) -> Result<Vec<Space>> {
                let sql = format!("SELECT {} FROM spaces ORDER BY name, id", shared::SPACE);
                let rows = sqlx::query_as::<_, rows::SpaceRow>(&sql).fetch_all(&self.pool).await?;
                rows::convert_all(rows)
            }

            async fn create_api_key(&self, k: &ApiKey, key_hash: &str) -> Result<()> {
                let _gate = self.gate().await;
                sqlx::query(
                    "INSERT INTO api_keys (id, space_id, name, prefix, key_hash, created_at) \
                     VALUES ($1, $2, $3, $4, $5, $6)",
                )
                .bind(k.id.to_string())
                .bind(k.space_id.to_string())
                .bind(&k.name)
                .bind(&k.prefix)
                .bind(key_hash)
                .bind(k.created_at)
                .execute(&self.pool)
                .await?;
                Ok(())
            }

            async fn find_api_key_by_hash(&self, key_hash: &str) -> Result<ApiKey> {
                let sql = format!(
                    "SELECT {} FROM api_keys WHERE key_hash = $1 AND revoked_at IS NULL",
                    shared::API_KEY
                );
                sqlx::query_as::<_, rows::ApiKeyRow>(&sql)
                    .bind(key_hash)
                    .fetch_one(&self.pool)
                    .await?
                    .try_into()
            }

            async fn list_all_api_keys(&self, space_id: SpaceId) -> Result<Vec<ApiKey>> {
                let sql = format!("SELECT {} FROM api_keys WHERE space_id = $1 ORDER BY id", shared::API_KEY);
                let rows = sqlx::query_as::<_, rows::ApiKeyRow>(&sql)
                    .bind(space_id.to_string())
                    .fetch_all(&self.pool)
                    .await?;
                rows::convert_all(rows)
            }

            async fn list_api_keys(&self, space_id: SpaceId, page: Page<ApiKeyId>) -> Result<Vec<ApiKey>> {
                let rows: Vec<rows::ApiKeyRow> =
                    self.keyset_page((shared::API_KEY, "api_keys"), ("space_id", space_id.to_string()), "", page).await?;
                rows::convert_all(rows)
            }

            async fn revoke_api_key(&self, space_id: SpaceId, id: ApiKeyId, now: UnixMs) -> Result<()> {
                self.write_one(
                    sqlx::query(
                    "UPDATE api_keys SET revoked_at = $1 WHERE id = $2 AND space_id = $3 AND revoked_at IS NULL",
                )
                .bind(now)
                .bind(id.to_string())
                .bind(space_id.to_string()),
                )
                .await
            }

            async fn create_channel(&self, c: &Channel) -> Result<()> {
                let _gate = self.gate().await;
                sqlx::query("INSERT INTO channels (id, space_id, name, created_at) VALUES ($1, $2, $3, $4)")
                    .bind(c.id.to_string())
                    .bind(c.space_id.to_string())
                    .bind(&c.name)
                    .bind(c.created_at)
                    .execute(&self.pool)
                    .await?;
                Ok(())
            }

            async fn get_channel(&self, space_id: SpaceId, id: ChannelId) -> Result<Channel> {
                let sql = format!("SELECT {} FROM channels WHERE id = $1 AND space_id = $2", shared::CHANNEL);
                sqlx::query_as::<_, rows::ChannelRow>(&sql)
                    .bind(id.to_string())
                    .bind(space_id.to_string())
                    .fetch_one(&self.pool)
                    .await?
                    .try_into()
            }

            async fn rename_channel(&self, space_id: SpaceId, id: ChannelId, name: &str) -> Result<()> {
                self.write_one(
                    sqlx::query("UPDATE channels SET name = $1 WHERE id = $2 AND space_id = $3")
                    .bind(name)
                    .bind(id.to_string())
                    .bind(space_id.to_string()),
                )
                .await
            }

            async fn delete_channel(&self, space_id: SpaceId, id: ChannelId) -> Result<()> {
                // Its messages and incoming webhooks go with it (ON DELETE CASCADE).
                self.write_one(
                    sqlx::query("DELETE FROM channels WHERE id = $1 AND space_id = $2")
                    .bind(id.to_string())
                    .bind(space_id.to_string()),
                )
                .await
            }

            async fn list_all_channels(&self, space_id: SpaceId) -> Result<Vec<Channel>> {
                let sql = format!("SELECT {} FROM channels WHERE space_id = $1 ORDER BY name", shared::CHANNEL);
                let rows = sqlx::query_as::<_, rows::ChannelRow>(&sql)
                    .bind(space_id.to_string())
                    .fetch_all(&self.pool)
                    .await?;
                rows::convert_all(rows)
            }

            async fn list_channels(&self, space_id: SpaceId, page: Page<ChannelId>) -> Result<Vec<Channel>> {
                let rows: Vec<rows::ChannelRow> =
                    self.keyset_page((shared::CHANNEL, "channels"), ("space_id", space_id.to_string()), "", page).await?;
                rows::convert_all(rows)
            }

            async fn list_messages(&self, channel_id: ChannelId, page: Page<MessageId>) -> Result<Vec<Message>> {
                let rows: Vec<rows::MessageRow> =
                    self.keyset_page((shared::MESSAGE, "messages"), ("channel_id", channel_id.to_string()), "", page).await?;
                rows::convert_all(rows)
            }

            async fn publish_event(&self, new: &NewEvent, now: UnixMs) -> Result<Published> {
                let mut writer = self.writer(&self.pool).await?;
                let mut tx = writer.begin().await?;
                match Self::publish_in(&mut tx, new, now).await? {
                    Some(published) => {
                        tx.commit().await?;
                        Ok(published)
                    }
                    None => {
                        tx.rollback().await?;
                        drop(writer);
                        let key = new.idempotency_key.as_deref().unwrap_or_default();
                        self.first_answer(new.event.space_id, key).await
                    }
                }
            }

            async fn publish_events(&self, batch: &[NewEvent], now: UnixMs) -> Result<Vec<Result<Published>>> {
                let mut writer = self.writer(&self.pool).await?;
                let mut tx = writer.begin().await?;
                // `None`: the idempotency key was taken (read the first answer after the commit).
                let mut outcomes: Vec<Option<Result<Option<Published>>>> = (0..batch.len()).map(|_| None).collect();
                // Events without a key all together; if that fails, one by one below, so only
                // the event at fault fails.
                let plain: Vec<usize> = (0..batch.len()).filter(|&i| batch[i].idempotency_key.is_none()).collect();
                if plain.len() > 1 {
                    sqlx::query("SAVEPOINT publish_all").execute(&mut *tx).await?;
                    let events: Vec<&NewEvent> = plain.iter().map(|&i| &batch[i]).collect();
                    match Self::publish_plain_in(&mut tx, &events, now).await {
                        Ok(answers) => {
                            sqlx::query("RELEASE SAVEPOINT publish_all").execute(&mut *tx).await?;
                            for (&i, answer) in plain.iter().zip(answers) {
                                outcomes[i] = Some(Ok(Some(answer)));
                            }
                        }
                        Err(_) => {
                            sqlx::query("ROLLBACK TO SAVEPOINT publish_all").execute(&mut *tx).await?;
                            sqlx::query("RELEASE SAVEPOINT publish_all").execute(&mut *tx).await?;
                        }
                    }
                }
                for (new, outcome) in batch.iter().zip(outcomes.iter_mut()) {
                    if outcome.is_some() {
                        continue;
                    }
                    sqlx::query("SAVEPOINT publish").execute(&mut *tx).await?;
                    let result = Self::publish_in(&mut tx, new, now).await;
                    if matches!(result, Ok(Some(_))) {
                        sqlx::query("RELEASE SAVEPOINT publish").execute(&mut *tx).await?;
                    } else {
                        sqlx::query("ROLLBACK TO SAVEPOINT publish").execute(&mut *tx).await?;
                        sqlx::query("RELEASE SAVEPOINT publish").execute(&mut *tx).await?;
                    }
                    *outcome = Some(result);
                }
                tx.commit().await?;
                drop(writer);
                let mut answers = Vec::with_capacity(batch.len());
                for (new, outcome) in batch.iter().zip(outcomes) {
                    answers.push(match outcome.expect("every event was written or refused") {
                        Ok(Some(published)) => Ok(published),
                        Ok(None) => {
                            let key = new.idempotency_key.as_deref().unwrap_or_default();
                            self.first_answer(new.event.space_id, key).await
                        }
                        Err(e) => Err(e),
                    });
                }
                Ok(answers)
            }

            async fn post_message(
                &self,
                m: &Message,
                event: &NewEvent,
                replay: Option<crate::storage::IncomingReplay<'_>>,
                now: UnixMs,
            ) -> Result<Option<Published>> {
                let mut writer = self.writer(&self.pool).await?;
                let mut tx = writer.begin().await?;
                if let Some(r) = replay {
                    // Remembered only if this transaction commits: a failure below forgets it.
                    // On PostgreSQL a concurrent request with the same ID waits here for
                    // this one's outcome.
                    let fresh = sqlx::query(
                        "INSERT INTO incoming_replays (webhook_id, message_id, seen_at) VALUES ($1, $2, $3) \
                         ON CONFLICT (webhook_id, message_id) DO NOTHING",
                    )
                    .bind(r.webhook_id.to_string())
                    .bind(r.message_id)
                    .bind(now)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected()
                        == 1;
                    if !fresh {
                        tx.rollback().await?;
                        return Ok(None);
                    }
                    sqlx::query("DELETE FROM incoming_replays WHERE webhook_id = $1 AND seen_at < $2")
                        .bind(r.webhook_id.to_string())
                        .bind(now - crate::storage::REPLAY_MEMORY_MS)
                        .execute(&mut *tx)
                        .await?;
                }
                sqlx::query(
                    "INSERT INTO messages (id, space_id, channel_id, text, attachments, source_kind, source_id, created_at) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                )
                .bind(m.id.to_string())
                .bind(m.space_id.to_string())
                .bind(m.channel_id.to_string())
                .bind(&m.text)
                .bind(m.attachments.as_ref().map(|a| a.to_string()))
                .bind(m.source_kind.as_str())
                .bind(&m.source_id)
                .bind(m.created_at)
                .execute(&mut *tx)
                .await?;
                let published = Self::publish_in(&mut tx, event, now)
                    .await?
                    .ok_or_else(|| StorageError::Conflict("message events carry no idempotency key".into()))?;
                tx.commit().await?;
                Ok(Some(published))
            }

            async fn get_event(&self, space_id: SpaceId, id: EventId) -> Result<Event> {
                let sql = format!("SELECT {} FROM events WHERE id = $1 AND space_id = $2", shared::EVENT);
                sqlx::query_as::<_, rows::EventRow>(&sql)
                    .bind(id.to_string())
                    .bind(space_id.to_string())
                    .fetch_one(&self.pool)
                    .await?
                    .try_into()
            }

            async fn list_events(&self, space_id: SpaceId, page: Page<EventId>) -> Result<Vec<Event>> {
                let rows: Vec<rows::EventRow> =
                    self.keyset_page((shared::EVENT, "events"), ("space_id", space_id.to_string()), "", page).await?;
                rows::convert_all(rows)
            }

            async fn create_destination(&self, d: &Destination) -> Result<()> {
                let mut writer = self.writer(&self.pool).await?;
                let mut tx = writer.begin().await?;
                let event_types = d
                    .event_types
                    .as_ref()
                    .map(|t| serde_json::Value::from(t.clone()).to_string());
                sqlx::query(
                    "INSERT INTO destinations (id, space_id, url, description, event_types, secret, previous_secret, \
                     previous_secret_expires_at, rate_limit_count, rate_limit_period, max_attempts, timeout_seconds, \
                     retry_policy, transformation, status, consecutive_dead_letters, skipped_events, disabled_reason, \
                     created_at, updated_at) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20)",
                )
                .bind(d.id.to_string())
                .bind(d.space_id.to_string())
                .bind(&d.url)
                .bind(&d.description)
                .bind(event_types)
                .bind(&d.secret)
                .bind(&d.previous_secret)
                .bind(d.previous_secret_expires_at)
                .bind(d.rate_limit.map(|r| i64::from(r.count)))
                .bind(d.rate_limit.map(|r| r.period.as_str()))
                .bind(d.max_attempts)
                .bind(d.timeout_seconds)
                .bind(d.retry_policy.to_string())
                .bind(&d.transformation)
                .bind(d.status.as_str())
                .bind(d.consecutive_dead_letters)
                .bind(d.skipped_events)
                .bind(&d.disabled_reason)
                .bind(d.created_at)
                .bind(d.updated_at)
                .execute(&mut *tx)
                .await?;
                Self::write_subscriptions(&mut tx, d).await?;
                tx.commit().await?;
                Ok(())
            }

            async fn get_destination(&self, space_id: SpaceId, id: DestinationId) -> Result<Destination> {
                let sql = format!("SELECT {} FROM destinations WHERE id = $1 AND space_id = $2", shared::DESTINATION);
                sqlx::query_as::<_, rows::DestinationRow>(&sql)
                    .bind(id.to_string())
                    .bind(space_id.to_string())
                    .fetch_one(&self.pool)
                    .await?
                    .try_into()
            }

            async fn list_all_destinations(&self, space_id: SpaceId) -> Result<Vec<Destination>> {
                let sql = format!("SELECT {} FROM destinations WHERE space_id = $1 ORDER BY id", shared::DESTINATION);
                let rows = sqlx::query_as::<_, rows::DestinationRow>(&sql)
                    .bind(space_id.to_string())
                    .fetch_all(&self.pool)
                    .await?;
                rows::convert_all(rows)
            }

            async fn list_destinations(&self, space_id: SpaceId, page: Page<DestinationId>) -> Result<Vec<Destination>> {
                let rows: Vec<rows::DestinationRow> =
                    self.keyset_page((shared::DESTINATION, "destinations"), ("space_id", space_id.to_string()), "", page).await?;
                rows::convert_all(rows)
            }

            async fn update_destination(&self, d: &Destination) -> Result<()> {
                let mut writer = self.writer(&self.pool).await?;
                let mut tx = writer.begin().await?;
                let event_types = d
                    .event_types
                    .as_ref()
                    .map(|t| serde_json::Value::from(t.clone()).to_string());
                let done = sqlx::query(
                    "UPDATE destinations SET url = $1, description = $2, event_types = $3, secret = $4, \
                     previous_secret = $5, previous_secret_expires_at = $6, rate_limit_count = $7, \
                     rate_limit_period = $8, max_attempts = $9, timeout_seconds = $10, retry_policy = $11, \
                     transformation = $12, updated_at = $13 WHERE id = $14 AND space_id = $15",
                )
                .bind(&d.url)
                .bind(&d.description)
                .bind(event_types)
                .bind(&d.secret)
                .bind(&d.previous_secret)
                .bind(d.previous_secret_expires_at)
                .bind(d.rate_limit.map(|r| i64::from(r.count)))
                .bind(d.rate_limit.map(|r| r.period.as_str()))
                .bind(d.max_attempts)
                .bind(d.timeout_seconds)
                .bind(d.retry_policy.to_string())
                .bind(&d.transformation)
                .bind(d.updated_at)
                .bind(d.id.to_string())
                .bind(d.space_id.to_string())
                .execute(&mut *tx)
                .await?;
                if done.rows_affected() == 0 {
                    return Err(StorageError::NotFound);
                }
                Self::write_subscriptions(&mut tx, d).await?;
                tx.commit().await?;
                Ok(())
            }

            async fn delete_destination(&self, space_id: SpaceId, id: DestinationId) -> Result<()> {
                self.write_one(
                    sqlx::query("DELETE FROM destinations WHERE id = $1 AND space_id = $2")
                    .bind(id.to_string())
                    .bind(space_id.to_string()),
                )
                .await
            }

            async fn set_destination_status(
                &self,
                space_id: SpaceId,
                id: DestinationId,
                status: DestinationStatus,
                reason: Option<&str>,
                now: UnixMs,
            ) -> Result<Destination> {
                let mut writer = self.writer(&self.pool).await?;
                let mut tx = writer.begin().await?;
                let done = sqlx::query(
                    "UPDATE destinations SET status = $1, disabled_reason = $2, updated_at = $3, \
                     consecutive_dead_letters = CASE WHEN $1 = 'active' THEN 0 ELSE consecutive_dead_letters END \
                     WHERE id = $4 AND space_id = $5",
                )
                .bind(status.as_str())
                .bind(if status == DestinationStatus::Active { None } else { reason })
                .bind(now)
                .bind(id.to_string())
                .bind(space_id.to_string())
                .execute(&mut *tx)
                .await?;
                if done.rows_affected() == 0 {
                    return Err(StorageError::NotFound);
                }
                // Disabling pauses what waits; enabling resumes it at once (the receiver is
                // presumably fixed), without losing anything (docs D6).
                sqlx::query(
                    "UPDATE deliveries SET paused = $1, updated_at = $2, \
                       next_attempt_at = CASE WHEN $1 THEN next_attempt_at ELSE $2 END \
                     WHERE destination_id = $3 AND status IN ('pending', 'retrying') AND paused <> $1",
                )
                .bind(status == DestinationStatus::Inactive)
                .bind(now)
                .bind(id.to_string())
                .execute(&mut *tx)
                .await?;
                let sql = format!("SELECT {} FROM destinations WHERE id = $1", shared::DESTINATION);
                let row = sqlx::query_as::<_, rows::DestinationRow>(&sql)
                    .bind(id.to_string())
                    .fetch_one(&mut *tx)
                    .await?;
                tx.commit().await?;
                row.try_into()
            }

            async fn count_paused(&self, destination_id: DestinationId) -> Result<i64> {
                let (n,): (i64,) = sqlx::query_as(
                    "SELECT COUNT(*) FROM deliveries WHERE destination_id = $1 \
                     AND status IN ('pending', 'retrying') AND paused = TRUE",
                )
                .bind(destination_id.to_string())
                .fetch_one(&self.pool)
                .await?;
                Ok(n)
            }

            async fn next_due_at(&self) -> Result<Option<UnixMs>> {
                // The first entry of the due index (SQLite, without statistics, would otherwise
                // walk every waiting delivery through the status index).
                let sql = format!(
                    "SELECT next_attempt_at FROM deliveries {} \
                     WHERE status IN ('pending', 'retrying') AND paused = FALSE \
                     ORDER BY next_attempt_at LIMIT 1",
                    Self::DUE_INDEX
                );
                let at: Option<Option<i64>> = sqlx::query_scalar(&sql).fetch_optional(&self.engine_pool).await?;
                Ok(at.flatten())
            }

            async fn expired_claims(&self, now: UnixMs, limit: i64) -> Result<Vec<Delivery>> {
                let sql = format!(
                    "SELECT {} FROM deliveries WHERE status = 'sending' AND lease_expires_at < $1 \
                     ORDER BY lease_expires_at LIMIT $2",
                    shared::DELIVERY
                );
                let rows = sqlx::query_as::<_, rows::DeliveryRow>(&sql)
                    .bind(now)
                    .bind(limit)
                    .fetch_all(&self.engine_pool)
                    .await?;
                rows::convert_all(rows)
            }

            async fn finish_attempt(&self, f: &FinishedAttempt, rule: &AutoDisable, now: UnixMs) -> Result<FinishEffects> {
                let mut writer = self.writer(&self.engine_pool).await?;
                let mut tx = writer.begin().await?;
                let effects = Self::finish_in(&mut tx, f, rule, now).await?;
                tx.commit().await?;
                Ok(effects)
            }

            async fn finish_attempts(&self, batch: &[FinishedAttempt], rule: &AutoDisable, now: UnixMs) -> Result<Vec<FinishEffects>> {
                let mut writer = self.writer(&self.engine_pool).await?;
                let mut tx = writer.begin().await?;
                let mut effects = Vec::with_capacity(batch.len());
                for f in batch {
                    effects.push(Self::finish_in(&mut tx, f, rule, now).await?);
                }
                tx.commit().await?;
                Ok(effects)
            }

            async fn release_claim(&self, id: DeliveryId, pause: bool, now: UnixMs) -> Result<()> {
                let _gate = self.gate().await;
                sqlx::query(
                    "UPDATE deliveries SET status = CASE WHEN attempts = 0 THEN 'pending' ELSE 'retrying' END, \
                     lease_expires_at = NULL, paused = $1, next_attempt_at = $2, updated_at = $2 \
                     WHERE id = $3 AND status = 'sending'",
                )
                .bind(pause)
                .bind(now)
                .bind(id.to_string())
                .execute(&self.engine_pool)
                .await?;
                Ok(())
            }

            async fn cancel_deliveries(&self, space_id: SpaceId, ids: &[DeliveryId], now: UnixMs) -> Result<Vec<(DeliveryId, BulkOutcome)>> {
                let mut writer = self.writer(&self.pool).await?;
                let mut tx = writer.begin().await?;
                let mut out = Vec::with_capacity(ids.len());
                for id in ids {
                    // Only a waiting delivery can be cancelled; a worker's claim moved it to
                    // `sending` atomically, so a cancel never races an attempt.
                    let done = sqlx::query(
                        "UPDATE deliveries SET status = 'cancelled', last_error_class = 'cancelled', \
                         next_attempt_at = NULL, finished_at = $1, updated_at = $1 \
                         WHERE id = $2 AND space_id = $3 AND status IN ('pending', 'retrying')",
                    )
                    .bind(now)
                    .bind(id.to_string())
                    .bind(space_id.to_string())
                    .execute(&mut *tx)
                    .await?;
                    if done.rows_affected() == 1 {
                        out.push((*id, BulkOutcome::Cancelled));
                        continue;
                    }
                    let status: Option<(String,)> =
                        sqlx::query_as("SELECT status FROM deliveries WHERE id = $1 AND space_id = $2")
                            .bind(id.to_string())
                            .bind(space_id.to_string())
                            .fetch_optional(&mut *tx)
                            .await?;
                    out.push((*id, match status {
                        None => BulkOutcome::NotFound,
                        Some((s,)) => BulkOutcome::WrongStatus(
                            s.parse().map_err(|e| StorageError::Corrupt(format!("deliveries.status: {e}")))?,
                        ),
                    }));
                }
                tx.commit().await?;
                Ok(out)
            }

            async fn resend_deliveries(&self, space_id: SpaceId, ids: &[DeliveryId], now: UnixMs) -> Result<Vec<(DeliveryId, BulkOutcome)>> {
                let mut writer = self.writer(&self.pool).await?;
                let mut tx = writer.begin().await?;
                // Write first, so SQLite takes its write lock before the reads below (a read-then-write
                // transaction fails at once with "database is locked" if another writer came in between).
                sqlx::query("UPDATE spaces SET name = name WHERE id = $1")
                    .bind(space_id.to_string())
                    .execute(&mut *tx)
                    .await?;
                let mut out = Vec::with_capacity(ids.len());
                for id in ids {
                    let row: Option<(String, String)> = sqlx::query_as(
                        "SELECT d.status, t.status FROM deliveries d \
                         JOIN destinations t ON t.id = d.destination_id WHERE d.id = $1 AND d.space_id = $2",
                    )
                    .bind(id.to_string())
                    .bind(space_id.to_string())
                    .fetch_optional(&mut *tx)
                    .await?;
                    let Some((status, destination_status)) = row else {
                        out.push((*id, BulkOutcome::NotFound));
                        continue;
                    };
                    let status: DeliveryStatus =
                        status.parse().map_err(|e| StorageError::Corrupt(format!("deliveries.status: {e}")))?;
                    if !status.is_final() {
                        out.push((*id, BulkOutcome::WrongStatus(status)));
                        continue;
                    }
                    if destination_status != DestinationStatus::Active.as_str() {
                        out.push((*id, BulkOutcome::DestinationInactive));
                        continue;
                    }
                    let copy = Self::resend_in(&mut tx, &id.to_string(), now).await?;
                    out.push((*id, BulkOutcome::Resent(copy)));
                }
                tx.commit().await?;
                Ok(out)
            }

            async fn resend_failed(
                &self,
                space_id: SpaceId,
                destination_id: Option<DestinationId>,
                limit: i64,
                now: UnixMs,
            ) -> Result<ResendFailed> {
                let mut writer = self.writer(&self.pool).await?;
                let mut tx = writer.begin().await?;
                // Take the write lock first (SQLite), then pick the batch.
                sqlx::query("UPDATE spaces SET name = name WHERE id = $1")
                    .bind(space_id.to_string())
                    .execute(&mut *tx)
                    .await?;
                let pick = "FROM deliveries d JOIN destinations t ON t.id = d.destination_id \
                            WHERE d.space_id = $1 AND d.status = 'failed' AND d.resent_as IS NULL \
                            AND t.status = 'active' AND ($2 IS NULL OR d.destination_id = $2)";
                let ids: Vec<(String,)> = sqlx::query_as(&format!("SELECT d.id {pick} ORDER BY d.id LIMIT $3"))
                    .bind(space_id.to_string())
                    .bind(destination_id.map(|d| d.to_string()))
                    .bind(limit)
                    .fetch_all(&mut *tx)
                    .await?;
                for (id,) in &ids {
                    Self::resend_in(&mut tx, id, now).await?;
                }
                let (remaining,): (i64,) = sqlx::query_as(&format!("SELECT COUNT(*) {pick}"))
                    .bind(space_id.to_string())
                    .bind(destination_id.map(|d| d.to_string()))
                    .fetch_one(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(ResendFailed { resent: ids.len() as i64, remaining })
            }

            async fn take_rate_slot(&self, key: &str, limit: i64, window_ms: i64, now: UnixMs) -> Result<Slot> {
                match self.take_rate_slots(key, 1, limit, window_ms, now).await? {
                    (1, _) => Ok(Slot::Granted),
                    (_, wait) => Ok(Slot::Wait(wait)),
                }
            }

            async fn take_rate_slots(&self, key: &str, wanted: i64, limit: i64, window_ms: i64, now: UnixMs) -> Result<(i64, i64)> {
                let mut writer = self.writer(&self.engine_pool).await?;
                let mut tx = writer.begin().await?;
                // Locks this key's row (PostgreSQL) or the database (SQLite) until commit, so
                // concurrent callers on every instance count one after another.
                sqlx::query(
                    "INSERT INTO rate_keys (key, touched_at) VALUES ($1, $2) \
                     ON CONFLICT (key) DO UPDATE SET touched_at = excluded.touched_at",
                )
                .bind(key)
                .bind(now)
                .execute(&mut *tx)
                .await?;
                // The slot is dated when the lock is granted, not when it was asked for: waiting
                // for the lock must not make a window look older than it is.
                let now = now.max(crate::clock::now_ms());
                sqlx::query("DELETE FROM rate_events WHERE key = $1 AND at <= $2")
                    .bind(key)
                    .bind(now - window_ms)
                    .execute(&mut *tx)
                    .await?;
                let (count, oldest): (i64, Option<i64>) =
                    sqlx::query_as("SELECT COUNT(*), MIN(at) FROM rate_events WHERE key = $1")
                        .bind(key)
                        .fetch_one(&mut *tx)
                        .await?;
                let granted = wanted.min(limit - count).max(0);
                for _ in 0..granted {
                    sqlx::query("INSERT INTO rate_events (key, at) VALUES ($1, $2)")
                        .bind(key)
                        .bind(now)
                        .execute(&mut *tx)
                        .await?;
                }
                tx.commit().await?;
                let wait = if granted < wanted {
                    (oldest.unwrap_or(now) + window_ms - now).clamp(1, window_ms)
                } else {
                    0
                };
                Ok((granted, wait))
            }

            async fn record_incoming_result(&self, id: IncomingWebhookId, success: bool, disable_after: i64, now: UnixMs) -> Result<IncomingEffects> {
                let mut writer = self.writer(&self.pool).await?;
                let mut tx = writer.begin().await?;
                if success {
                    sqlx::query(
                        "UPDATE incoming_webhooks SET consecutive_failures = 0 WHERE id = $1 AND consecutive_failures <> 0",
                    )
                    .bind(id.to_string())
                    .execute(&mut *tx)
                    .await?;
                    tx.commit().await?;
                    return Ok(IncomingEffects::default());
                }
                let (failures, status, name, space_id): (i64, String, String, String) = sqlx::query_as(
                    "UPDATE incoming_webhooks SET consecutive_failures = consecutive_failures + 1, updated_at = $1 \
                     WHERE id = $2 RETURNING consecutive_failures, status, name, space_id",
                )
                .bind(now)
                .bind(id.to_string())
                .fetch_one(&mut *tx)
                .await?;
                let mut effects = IncomingEffects { consecutive_failures: failures, disabled: false };
                if failures >= disable_after && status == IncomingWebhookStatus::Active.as_str() {
                    effects.disabled = true;
                    sqlx::query("UPDATE incoming_webhooks SET status = 'disabled', disabled_at = $1 WHERE id = $2")
                        .bind(now)
                        .bind(id.to_string())
                        .execute(&mut *tx)
                        .await?;
                    sqlx::query(
                        "INSERT INTO notifications (id, space_id, kind, subject_kind, subject_id, message, created_at) \
                         VALUES ($1, $2, 'incoming_webhook.disabled', 'incoming_webhook', $3, $4, $5)",
                    )
                    .bind(NotificationId::new().to_string())
                    .bind(&space_id)
                    .bind(id.to_string())
                    .bind(format!(
                        "Incoming webhook \"{name}\" was disabled after {failures} failed requests in a row; \
                         senders get 410 Gone until an admin re-enables it."
                    ))
                    .bind(now)
                    .execute(&mut *tx)
                    .await?;
                }
                tx.commit().await?;
                Ok(effects)
            }

            async fn set_incoming_webhook_status(
                &self,
                space_id: SpaceId,
                id: IncomingWebhookId,
                status: IncomingWebhookStatus,
                now: UnixMs,
            ) -> Result<IncomingWebhook> {
                let _gate = self.gate().await;
                let done = sqlx::query(
                    "UPDATE incoming_webhooks SET status = $1, updated_at = $2, \
                       consecutive_failures = CASE WHEN $1 = 'active' THEN 0 ELSE consecutive_failures END, \
                       disabled_at = CASE WHEN $1 = 'active' THEN NULL ELSE $2 END \
                     WHERE id = $3 AND space_id = $4",
                )
                .bind(status.as_str())
                .bind(now)
                .bind(id.to_string())
                .bind(space_id.to_string())
                .execute(&self.pool)
                .await?;
                if done.rows_affected() == 0 {
                    return Err(StorageError::NotFound);
                }
                self.get_incoming_webhook_by_id(id).await
            }

            async fn delete_incoming_webhook(&self, space_id: SpaceId, id: IncomingWebhookId) -> Result<()> {
                self.write_one(
                    sqlx::query("DELETE FROM incoming_webhooks WHERE id = $1 AND space_id = $2")
                    .bind(id.to_string())
                    .bind(space_id.to_string()),
                )
                .await
            }

            async fn revoke_bot(&self, space_id: SpaceId, id: BotId, now: UnixMs) -> Result<()> {
                self.write_one(
                    sqlx::query("UPDATE bots SET revoked_at = $1 WHERE id = $2 AND space_id = $3 AND revoked_at IS NULL")
                    .bind(now)
                    .bind(id.to_string())
                    .bind(space_id.to_string()),
                )
                .await
            }

            async fn get_channel_by_id(&self, id: ChannelId) -> Result<Channel> {
                let sql = format!("SELECT {} FROM channels WHERE id = $1", shared::CHANNEL);
                sqlx::query_as::<_, rows::ChannelRow>(&sql)
                    .bind(id.to_string())
                    .fetch_one(&self.pool)
                    .await?
                    .try_into()
            }

            async fn defer_rate_limited(&self, id: DeliveryId, scope: RateScope, until: UnixMs, now: UnixMs) -> Result<()> {
                let mut writer = self.writer(&self.engine_pool).await?;
                let mut tx = writer.begin().await?;
                sqlx::query(
                    "UPDATE deliveries SET status = CASE WHEN attempts = 0 THEN 'pending' ELSE 'retrying' END, \
                     lease_expires_at = NULL, next_attempt_at = $1, last_error_class = 'rate_limited', updated_at = $2 \
                     WHERE id = $3 AND status = 'sending'",
                )
                .bind(until)
                .bind(now)
                .bind(id.to_string())
                .execute(&mut *tx)
                .await?;
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
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok(())
            }

            async fn get_delivery_by_id(&self, id: DeliveryId) -> Result<Delivery> {
                let sql = format!("SELECT {} FROM deliveries WHERE id = $1", shared::DELIVERY);
                sqlx::query_as::<_, rows::DeliveryRow>(&sql)
                    .bind(id.to_string())
                    .fetch_one(&self.pool)
                    .await?
                    .try_into()
            }

            async fn list_deliveries(&self, f: &DeliveryFilter, page: Page<DeliveryId>) -> Result<Vec<Delivery>> {
                let mut q = sqlx::QueryBuilder::<$db>::new(format!("SELECT {} FROM deliveries WHERE 1 = 1", shared::DELIVERY));
                if let Some(space) = f.space_id {
                    q.push(" AND space_id = ").push_bind(space.to_string());
                }
                if let Some(status) = f.status {
                    q.push(" AND status = ").push_bind(status.as_str());
                }
                if let Some(dst) = f.destination_id {
                    q.push(" AND destination_id = ").push_bind(dst.to_string());
                }
                if let Some(t) = &f.event_type {
                    q.push(" AND event_type = ").push_bind(t.clone());
                }
                if let Some(class) = f.error_class {
                    q.push(" AND last_error_class = ").push_bind(class.as_str());
                }
                // Time bounds become ID bounds: IDs sort by creation time, and the indexes end in `id`.
                if let Some(since) = f.since {
                    q.push(" AND id >= ").push_bind(DeliveryId::lower_bound_at(since).to_string());
                }
                if let Some(until) = f.until {
                    q.push(" AND id < ").push_bind(DeliveryId::lower_bound_at(until).to_string());
                }
                if let Some(before) = page.before {
                    q.push(" AND id < ").push_bind(before.to_string());
                }
                q.push(" ORDER BY id DESC LIMIT ").push_bind(page.limit);
                let rows = q.build_query_as::<rows::DeliveryRow>().fetch_all(&self.pool).await?;
                rows::convert_all(rows)
            }

            async fn list_all_attempts(&self, delivery_id: DeliveryId) -> Result<Vec<Attempt>> {
                let sql = format!(
                    "SELECT {} FROM attempts WHERE delivery_id = $1 ORDER BY started_at, attempt_number",
                    shared::ATTEMPT
                );
                let rows = sqlx::query_as::<_, rows::AttemptRow>(&sql)
                    .bind(delivery_id.to_string())
                    .fetch_all(&self.pool)
                    .await?;
                rows::convert_all(rows)
            }

            async fn create_incoming_webhook(&self, w: &IncomingWebhook) -> Result<()> {
                let _gate = self.gate().await;
                sqlx::query(
                    "INSERT INTO incoming_webhooks (id, space_id, channel_id, name, token_hash, signing_secret, status, \
                     consecutive_failures, created_at, updated_at, disabled_at) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
                )
                .bind(w.id.to_string())
                .bind(w.space_id.to_string())
                .bind(w.channel_id.to_string())
                .bind(&w.name)
                .bind(&w.token_hash)
                .bind(&w.signing_secret)
                .bind(w.status.as_str())
                .bind(w.consecutive_failures)
                .bind(w.created_at)
                .bind(w.updated_at)
                .bind(w.disabled_at)
                .execute(&self.pool)
                .await?;
                Ok(())
            }

            async fn get_incoming_webhook_by_id(&self, id: IncomingWebhookId) -> Result<IncomingWebhook> {
                let sql = format!("SELECT {} FROM incoming_webhooks WHERE id = $1", shared::INCOMING_WEBHOOK);
                sqlx::query_as::<_, rows::IncomingWebhookRow>(&sql)
                    .bind(id.to_string())
                    .fetch_one(&self.pool)
                    .await?
                    .try_into()
            }

            async fn list_all_incoming_webhooks(&self, space_id: SpaceId) -> Result<Vec<IncomingWebhook>> {
                let sql = format!(
                    "SELECT {} FROM incoming_webhooks WHERE space_id = $1 ORDER BY id",
                    shared::INCOMING_WEBHOOK
                );
                let rows = sqlx::query_as::<_, rows::IncomingWebhookRow>(&sql)
                    .bind(space_id.to_string())
                    .fetch_all(&self.pool)
                    .await?;
                rows::convert_all(rows)
            }

            async fn list_incoming_webhooks(
                &self,
                space_id: SpaceId,
                page: Page<IncomingWebhookId>,
            ) -> Result<Vec<IncomingWebhook>> {
                let rows: Vec<rows::IncomingWebhookRow> = self
                    .keyset_page((shared::INCOMING_WEBHOOK, "incoming_webhooks"), ("space_id", space_id.to_string()), "", page)
                    .await?;
                rows::convert_all(rows)
            }

            async fn create_bot(&self, b: &Bot) -> Result<()> {
                let _gate = self.gate().await;
                sqlx::query(
                    "INSERT INTO bots (id, space_id, name, token_hash, created_at, revoked_at) VALUES ($1, $2, $3, $4, $5, $6)",
                )
                .bind(b.id.to_string())
                .bind(b.space_id.to_string())
                .bind(&b.name)
                .bind(&b.token_hash)
                .bind(b.created_at)
                .bind(b.revoked_at)
                .execute(&self.pool)
                .await?;
                Ok(())
            }

            async fn find_bot_by_token_hash(&self, token_hash: &str) -> Result<Bot> {
                let sql = format!("SELECT {} FROM bots WHERE token_hash = $1 AND revoked_at IS NULL", shared::BOT);
                sqlx::query_as::<_, rows::BotRow>(&sql)
                    .bind(token_hash)
                    .fetch_one(&self.pool)
                    .await?
                    .try_into()
            }

            async fn list_all_bots(&self, space_id: SpaceId) -> Result<Vec<Bot>> {
                let sql = format!("SELECT {} FROM bots WHERE space_id = $1 ORDER BY id", shared::BOT);
                let rows = sqlx::query_as::<_, rows::BotRow>(&sql)
                    .bind(space_id.to_string())
                    .fetch_all(&self.pool)
                    .await?;
                rows::convert_all(rows)
            }

            async fn list_bots(&self, space_id: SpaceId, page: Page<BotId>) -> Result<Vec<Bot>> {
                let rows: Vec<rows::BotRow> =
                    self.keyset_page((shared::BOT, "bots"), ("space_id", space_id.to_string()), "", page).await?;
                rows::convert_all(rows)
            }

            async fn create_user(&self, u: &User) -> Result<()> {
                let _gate = self.gate().await;
                sqlx::query(
                    "INSERT INTO users (id, email, password_hash, role, created_at, disabled_at) VALUES ($1, $2, $3, $4, $5, $6)",
                )
                .bind(u.id.to_string())
                .bind(&u.email)
                .bind(&u.password_hash)
                .bind(u.role.as_str())
                .bind(u.created_at)
                .bind(u.disabled_at)
                .execute(&self.pool)
                .await?;
                Ok(())
            }

            async fn get_user(&self, id: UserId) -> Result<User> {
                let sql = format!("SELECT {} FROM users WHERE id = $1", shared::USER);
                sqlx::query_as::<_, rows::UserRow>(&sql)
                    .bind(id.to_string())
                    .fetch_one(&self.pool)
                    .await?
                    .try_into()
            }

            async fn find_user_by_email(&self, email: &str) -> Result<User> {
                let sql = format!("SELECT {} FROM users WHERE email = $1", shared::USER);
                sqlx::query_as::<_, rows::UserRow>(&sql)
                    .bind(email)
                    .fetch_one(&self.pool)
                    .await?
                    .try_into()
            }

            async fn count_users(&self) -> Result<i64> {
                let (n,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM users").fetch_one(&self.pool).await?;
                Ok(n)
            }

            async fn list_all_users(&self) -> Result<Vec<User>> {
                let sql = format!("SELECT {} FROM users ORDER BY email", shared::USER);
                let rows = sqlx::query_as::<_, rows::UserRow>(&sql).fetch_all(&self.pool).await?;
                rows::convert_all(rows)
            }

            async fn create_notification(&self, n: &Notification) -> Result<()> {
                let _gate = self.gate().await;
                sqlx::query(
                    "INSERT INTO notifications (id, space_id, kind, subject_kind, subject_id, message, created_at, read_at) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                )
                .bind(n.id.to_string())
                .bind(n.space_id.map(|s| s.to_string()))
                .bind(&n.kind)
                .bind(&n.subject_kind)
                .bind(&n.subject_id)
                .bind(&n.message)
                .bind(n.created_at)
                .bind(n.read_at)
                .execute(&self.pool)
                .await?;
                Ok(())
            }

            async fn list_notifications(&self, unread_only: bool, page: Page<NotificationId>) -> Result<Vec<Notification>> {
                // Conditions added only when they apply, so each reads as an index range
                // (`notifications_unread`, or the primary key).
                let mut q = sqlx::QueryBuilder::<$db>::new(format!(
                    "SELECT {} FROM notifications WHERE TRUE",
                    shared::NOTIFICATION
                ));
                if unread_only {
                    q.push(" AND read_at IS NULL");
                }
                if let Some(before) = page.before {
                    q.push(" AND id < ").push_bind(before.to_string());
                }
                q.push(" ORDER BY id DESC LIMIT ").push_bind(page.limit);
                let rows = q.build_query_as::<rows::NotificationRow>().fetch_all(&self.pool).await?;
                rows::convert_all(rows)
            }

            async fn list_space_notifications(
                &self,
                space_id: SpaceId,
                unread: Option<bool>,
                page: Page<NotificationId>,
            ) -> Result<Vec<Notification>> {
                // Unread ones through the partial index `notifications_unread_by_space`.
                let only = match unread {
                    None => "",
                    Some(true) => " AND read_at IS NULL",
                    Some(false) => " AND read_at IS NOT NULL",
                };
                let rows: Vec<rows::NotificationRow> = self
                    .keyset_page((shared::NOTIFICATION, "notifications"), ("space_id", space_id.to_string()), only, page)
                    .await?;
                rows::convert_all(rows)
            }

            async fn mark_space_notification_read(&self, space_id: SpaceId, id: NotificationId, now: UnixMs) -> Result<()> {
                self.write_one(
                    sqlx::query(
                    "UPDATE notifications SET read_at = COALESCE(read_at, $1) WHERE id = $2 AND space_id = $3",
                )
                .bind(now)
                .bind(id.to_string())
                .bind(space_id.to_string()),
                )
                .await
            }

            async fn count_unread_notifications(&self) -> Result<i64> {
                let (n,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM notifications WHERE read_at IS NULL")
                    .fetch_one(&self.pool)
                    .await?;
                Ok(n)
            }

            async fn mark_notification_read(&self, id: NotificationId, now: UnixMs) -> Result<()> {
                self.write_one(
                    sqlx::query("UPDATE notifications SET read_at = COALESCE(read_at, $1) WHERE id = $2")
                    .bind(now)
                    .bind(id.to_string()),
                )
                .await
            }

            // Console (issue 7).

            async fn count_deliveries(&self, f: &DeliveryFilter, before: Option<DeliveryId>, cap: i64) -> Result<i64> {
                let mut q = sqlx::QueryBuilder::<$db>::new("SELECT COUNT(*) FROM (SELECT 1 FROM deliveries WHERE 1 = 1");
                if let Some(space) = f.space_id {
                    q.push(" AND space_id = ").push_bind(space.to_string());
                }
                if let Some(status) = f.status {
                    q.push(" AND status = ").push_bind(status.as_str());
                }
                if let Some(dst) = f.destination_id {
                    q.push(" AND destination_id = ").push_bind(dst.to_string());
                }
                if let Some(t) = &f.event_type {
                    q.push(" AND event_type = ").push_bind(t.clone());
                }
                if let Some(class) = f.error_class {
                    q.push(" AND last_error_class = ").push_bind(class.as_str());
                }
                if let Some(since) = f.since {
                    q.push(" AND id >= ").push_bind(DeliveryId::lower_bound_at(since).to_string());
                }
                if let Some(until) = f.until {
                    q.push(" AND id < ").push_bind(DeliveryId::lower_bound_at(until).to_string());
                }
                if let Some(before) = before {
                    q.push(" AND id < ").push_bind(before.to_string());
                }
                q.push(" LIMIT ").push_bind(cap).push(") AS matching");
                let (n,): (i64,) = q.build_query_as().fetch_one(&self.pool).await?;
                Ok(n)
            }

            async fn delivery_histogram(
                &self,
                space_id: Option<SpaceId>,
                since: UnixMs,
                bucket_ms: i64,
            ) -> Result<Vec<(SpaceId, UnixMs, DeliveryStatus, Option<ErrorClass>, i64)>> {
                let rows: Vec<(String, i64, String, Option<String>, i64)> = sqlx::query_as(
                    "SELECT space_id, (created_at / $1) * $1, status, last_error_class, COUNT(*) FROM deliveries \
                     WHERE id >= $2 AND ($3 IS NULL OR space_id = $3) GROUP BY 1, 2, 3, 4",
                )
                .bind(bucket_ms.max(1))
                .bind(DeliveryId::lower_bound_at(since).to_string())
                .bind(space_id.map(|s| s.to_string()))
                .fetch_all(&self.pool)
                .await?;
                let corrupt = |what: &str, e: &dyn std::fmt::Display| StorageError::Corrupt(format!("deliveries.{what}: {e}"));
                rows.into_iter()
                    .map(|(space, bucket, status, class, n)| {
                        Ok((
                            space.parse().map_err(|e| corrupt("space_id", &e))?,
                            bucket,
                            status.parse().map_err(|e| corrupt("status", &e))?,
                            class.map(|c| c.parse()).transpose().map_err(|e| corrupt("last_error_class", &e))?,
                            n,
                        ))
                    })
                    .collect()
            }

            async fn delivery_backlog(&self) -> Result<Vec<(SpaceId, i64, i64, i64)>> {
                let rows: Vec<(String, String, bool, i64)> = sqlx::query_as(
                    "SELECT space_id, status, paused, COUNT(*) FROM deliveries \
                     WHERE status IN ('pending', 'retrying', 'sending') GROUP BY space_id, status, paused",
                )
                .fetch_all(&self.pool)
                .await?;
                let mut out: Vec<(SpaceId, i64, i64, i64)> = Vec::new();
                for (space, status, paused, n) in rows {
                    let space: SpaceId =
                        space.parse().map_err(|e| StorageError::Corrupt(format!("deliveries.space_id: {e}")))?;
                    let i = match out.iter().position(|(s, ..)| *s == space) {
                        Some(i) => i,
                        None => {
                            out.push((space, 0, 0, 0));
                            out.len() - 1
                        }
                    };
                    if status == "sending" {
                        out[i].3 += n;
                    } else {
                        out[i].1 += n;
                        if paused {
                            out[i].2 += n;
                        }
                    }
                }
                Ok(out)
            }

            async fn failing_destinations(&self, limit: i64) -> Result<Vec<Destination>> {
                let sql = format!(
                    "SELECT {} FROM destinations WHERE status = 'inactive' OR consecutive_dead_letters > 0 \
                     ORDER BY CASE WHEN status = 'inactive' THEN 0 ELSE 1 END, consecutive_dead_letters DESC, id \
                     LIMIT $1",
                    shared::DESTINATION
                );
                let rows = sqlx::query_as::<_, rows::DestinationRow>(&sql)
                    .bind(limit)
                    .fetch_all(&self.pool)
                    .await?;
                rows::convert_all(rows)
            }

            async fn get_destination_by_id(&self, id: DestinationId) -> Result<Destination> {
                let sql = format!("SELECT {} FROM destinations WHERE id = $1", shared::DESTINATION);
                sqlx::query_as::<_, rows::DestinationRow>(&sql)
                    .bind(id.to_string())
                    .fetch_one(&self.pool)
                    .await?
                    .try_into()
            }

            async fn count_failed_unresent(&self, destination_id: DestinationId) -> Result<i64> {
                let (n,): (i64,) = sqlx::query_as(
                    "SELECT COUNT(*) FROM deliveries WHERE destination_id = $1 AND status = 'failed' AND resent_as IS NULL",
                )
                .bind(destination_id.to_string())
                .fetch_one(&self.pool)
                .await?;
                Ok(n)
            }

            async fn count_rate_events(&self, key: &str, window_ms: i64, now: UnixMs) -> Result<i64> {
                let (n,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM rate_events WHERE key = $1 AND at > $2")
                    .bind(key)
                    .bind(now - window_ms)
                    .fetch_one(&self.pool)
                    .await?;
                Ok(n)
            }

            async fn create_first_user(&self, u: &User) -> Result<bool> {
                let mut writer = self.writer(&self.pool).await?;
                let mut tx = writer.begin().await?;
                <$backend>::lock_users(&mut tx).await?;
                let done = sqlx::query(
                    "INSERT INTO users (id, email, password_hash, role, created_at, disabled_at) \
                     SELECT $1, $2, $3, $4, $5, $6 WHERE NOT EXISTS (SELECT 1 FROM users)",
                )
                .bind(u.id.to_string())
                .bind(&u.email)
                .bind(&u.password_hash)
                .bind(u.role.as_str())
                .bind(u.created_at)
                .bind(u.disabled_at)
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok(done.rows_affected() == 1)
            }

            async fn set_user_disabled(&self, id: UserId, disabled_at: Option<UnixMs>) -> Result<UserChange> {
                let mut writer = self.writer(&self.pool).await?;
                let mut tx = writer.begin().await?;
                <$backend>::lock_users(&mut tx).await?;
                let done = match disabled_at {
                    None => sqlx::query("UPDATE users SET disabled_at = NULL WHERE id = $1")
                        .bind(id.to_string())
                        .execute(&mut *tx)
                        .await?,
                    Some(at) => sqlx::query(&format!(
                        "UPDATE users SET disabled_at = $2 WHERE id = $1 AND disabled_at IS NULL AND {}",
                        shared::NOT_LAST_ADMIN
                    ))
                    .bind(id.to_string())
                    .bind(at)
                    .execute(&mut *tx)
                    .await?,
                };
                let change = if done.rows_affected() == 1 {
                    UserChange::Done
                } else {
                    Self::why_unchanged(&mut tx, id).await?
                };
                tx.commit().await?;
                Ok(change)
            }

            async fn delete_user(&self, id: UserId) -> Result<UserChange> {
                let mut writer = self.writer(&self.pool).await?;
                let mut tx = writer.begin().await?;
                <$backend>::lock_users(&mut tx).await?;
                let done = sqlx::query(&format!(
                    "DELETE FROM users WHERE id = $1 AND (disabled_at IS NOT NULL OR {})",
                    shared::NOT_LAST_ADMIN
                ))
                .bind(id.to_string())
                .execute(&mut *tx)
                .await?;
                let change = if done.rows_affected() == 1 {
                    UserChange::Done
                } else {
                    match Self::why_unchanged(&mut tx, id).await? {
                        UserChange::Done => UserChange::LastAdmin,
                        other => other,
                    }
                };
                tx.commit().await?;
                Ok(change)
            }

            async fn remember_session(&self, session_id: &str, user_id: UserId, expires_at: UnixMs, now: UnixMs) -> Result<()> {
                let mut writer = self.writer(&self.pool).await?;
                let mut tx = writer.begin().await?;
                sqlx::query("DELETE FROM console_sessions WHERE expires_at < $1")
                    .bind(now)
                    .execute(&mut *tx)
                    .await?;
                sqlx::query(
                    "INSERT INTO console_sessions (session_id, user_id, expires_at) VALUES ($1, $2, $3) \
                     ON CONFLICT (session_id) DO UPDATE SET user_id = excluded.user_id, expires_at = excluded.expires_at",
                )
                .bind(session_id)
                .bind(user_id.to_string())
                .bind(expires_at)
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok(())
            }

            async fn forget_session(&self, session_id: &str) -> Result<()> {
                let _gate = self.gate().await;
                sqlx::query("DELETE FROM console_sessions WHERE session_id = $1")
                    .bind(session_id)
                    .execute(&self.pool)
                    .await?;
                Ok(())
            }

            async fn user_sessions(&self, user_id: UserId) -> Result<Vec<String>> {
                let rows: Vec<(String,)> =
                    sqlx::query_as("SELECT session_id FROM console_sessions WHERE user_id = $1")
                        .bind(user_id.to_string())
                        .fetch_all(&self.pool)
                        .await?;
                Ok(rows.into_iter().map(|(id,)| id).collect())
            }

            async fn publish_test_event(&self, event: &Event, destination_id: DestinationId, now: UnixMs) -> Result<DeliveryId> {
                let mut writer = self.writer(&self.pool).await?;
                let mut tx = writer.begin().await?;
                sqlx::query(
                    "INSERT INTO events (id, space_id, event_type, payload, created_at) VALUES ($1, $2, $3, $4, $5)",
                )
                .bind(event.id.to_string())
                .bind(event.space_id.to_string())
                .bind(&event.event_type)
                .bind(event.payload.to_string())
                .bind(event.created_at)
                .execute(&mut *tx)
                .await?;
                let delivery = DeliveryId::new();
                let done = sqlx::query(
                    "INSERT INTO deliveries (id, space_id, event_id, destination_id, event_type, status, \
                     attempts, next_attempt_at, created_at, updated_at) \
                     SELECT $1, space_id, $2, id, $3, 'pending', 0, $4, $4, $4 FROM destinations \
                     WHERE id = $5 AND space_id = $6 AND status = 'active'",
                )
                .bind(delivery.to_string())
                .bind(event.id.to_string())
                .bind(&event.event_type)
                .bind(now)
                .bind(destination_id.to_string())
                .bind(event.space_id.to_string())
                .execute(&mut *tx)
                .await?;
                if done.rows_affected() != 1 {
                    // Rolled back on drop: no event without its delivery.
                    return Err(StorageError::Conflict("the destination is not active".into()));
                }
                tx.commit().await?;
                Ok(delivery)
            }
        }

        impl $backend {
            /// Why a change to a user touched no row: it does not exist, it was already
            /// as asked (`Done`), or it is the last active admin.
            async fn why_unchanged(tx: &mut $crate::storage::write::WriteTx<'_, $db>, id: UserId) -> Result<UserChange> {
                let row: Option<(Option<i64>,)> = sqlx::query_as("SELECT disabled_at FROM users WHERE id = $1")
                    .bind(id.to_string())
                    .fetch_optional(&mut **tx)
                    .await?;
                Ok(match row {
                    None => UserChange::NotFound,
                    Some((Some(_),)) => UserChange::Done,
                    Some((None,)) => UserChange::LastAdmin,
                })
            }
        }
    };
}
