//! What only the server's integration tests need on top of the shared test kit
//! (`server::testkit`: fresh databases, `spawn_app`, the receiver): one test per
//! backend from one body, and making the real database refuse writes.

/// Declares one test per backend from one async body taking a [`TestDb`].
///
/// [`TestDb`]: server::testkit::TestDb
#[macro_export]
macro_rules! on_both_backends {
    ($(#[$meta:meta])* async fn $name:ident($db:ident) $body:block) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            async fn body($db: server::testkit::TestDb) $body

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                body(server::testkit::fresh_db(server::testkit::Db::Sqlite).await.unwrap()).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                if let Some(db) = server::testkit::fresh_db(server::testkit::Db::Postgres).await {
                    body(db).await
                }
            }
        }
    };
}
/// Makes the real database refuse every `INSERT` into `table` with a constraint error
/// naming `constraint`, until [`allow_inserts`]: a failure of ours, for tests of what
/// the server answers and keeps when its own write fails. (SQLite: a trigger that
/// raises; PostgreSQL: a trigger that raises `check_violation`.)
pub async fn refuse_inserts(db_url: &str, table: &str, constraint: &str) {
    let trigger = format!("pf_test_refuse_{table}");
    if db_url.starts_with("sqlite") {
        run_sql(
            db_url,
            &[format!(
                "CREATE TRIGGER {trigger} BEFORE INSERT ON {table} \
             BEGIN SELECT RAISE(ABORT, 'CHECK constraint failed: {constraint}'); END"
            )],
        )
        .await;
    } else {
        run_sql(db_url, &[
            format!(
                "CREATE FUNCTION {trigger}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
                 RAISE EXCEPTION USING ERRCODE = 'check_violation', CONSTRAINT = '{constraint}', \
                 MESSAGE = 'new row for relation \"{table}\" violates check constraint \"{constraint}\"'; \
                 END $$"
            ),
            format!(
                "CREATE TRIGGER {trigger} BEFORE INSERT ON {table} FOR EACH ROW EXECUTE FUNCTION {trigger}()"
            ),
        ])
        .await;
    }
}

/// Undoes [`refuse_inserts`].
pub async fn allow_inserts(db_url: &str, table: &str) {
    let trigger = format!("pf_test_refuse_{table}");
    if db_url.starts_with("sqlite") {
        run_sql(db_url, &[format!("DROP TRIGGER {trigger}")]).await;
    } else {
        run_sql(
            db_url,
            &[
                format!("DROP TRIGGER {trigger} ON {table}"),
                format!("DROP FUNCTION {trigger}()"),
            ],
        )
        .await;
    }
}

/// Runs `statements` on the database at `db_url`, on a connection of its own.
async fn run_sql(db_url: &str, statements: &[String]) {
    if db_url.starts_with("sqlite") {
        let pool = sqlx::SqlitePool::connect(db_url).await.unwrap();
        for sql in statements {
            sqlx::query(sql).execute(&pool).await.unwrap();
        }
        pool.close().await;
    } else {
        let pool = sqlx::PgPool::connect(db_url).await.unwrap();
        for sql in statements {
            sqlx::query(sql).execute(&pool).await.unwrap();
        }
        pool.close().await;
    }
}

/// The record of an attempt at each of `deliveries` (claimed already), as a worker makes
/// it: answered `status` (a 2xx has no error class, anything else is `http`), then `next`.
pub fn answered(
    deliveries: &[server::domain::Delivery],
    status: i64,
    next: server::storage::NextStep,
) -> Vec<server::storage::FinishedAttempt> {
    use server::domain::*;
    let now = server::clock::now_ms();
    deliveries
        .iter()
        .map(|d| server::storage::FinishedAttempt {
            attempt: Attempt {
                id: AttemptId::new(),
                delivery_id: d.id,
                space_id: d.space_id,
                attempt_number: 1,
                started_at: now,
                duration_ms: 1,
                request_url: "https://example.com/hook".into(),
                request_headers: serde_json::json!({}),
                request_body: "{}".into(),
                response_status: Some(status),
                response_headers: Some(serde_json::json!({})),
                response_body: Some(String::new()),
                error_class: (!(200..300).contains(&status)).then_some(ErrorClass::Http),
                error_message: None,
            },
            destination_id: d.destination_id,
            next,
            only_if_lease_expired_before: None,
        })
        .collect()
}
