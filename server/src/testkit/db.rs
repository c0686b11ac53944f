//! A fresh, migrated database per test: a SQLite file in a temporary folder, or a
//! new database on the PostgreSQL at `PARTYFLOW_TEST_POSTGRES_URL`.

use std::sync::Arc;

use crate::storage::{self, TestStorage};

/// Which database a test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Db {
    Sqlite,
    Postgres,
}

/// A fresh, migrated database; the guard keeps its files alive.
pub struct TestDb {
    pub url: String,
    pub storage: Arc<dyn TestStorage>,
    pub _dir: Option<tempfile::TempDir>,
}

/// A fresh database of the given kind, or `None` when PostgreSQL is not available
/// (the test command always provides one; running `cargo test` alone may not).
pub async fn fresh_db(db: Db) -> Option<TestDb> {
    let (url, dir) = match db {
        Db::Sqlite => {
            let dir = tempfile::tempdir().unwrap();
            (
                format!("sqlite://{}/test.db", dir.path().display()),
                Some(dir),
            )
        }
        Db::Postgres => {
            let Ok(admin_url) = std::env::var("PARTYFLOW_TEST_POSTGRES_URL") else {
                eprintln!("PARTYFLOW_TEST_POSTGRES_URL is not set: PostgreSQL half SKIPPED (./dev test sets it)");
                return None;
            };
            let name = format!("t_{}", ulid::Ulid::new().to_string().to_lowercase());
            let admin = sqlx::PgPool::connect(&admin_url)
                .await
                .expect("connecting to the test PostgreSQL");
            sqlx::query(&format!("CREATE DATABASE {name}"))
                .execute(&admin)
                .await
                .unwrap();
            admin.close().await;
            (database_url_beside(&admin_url, &name), None)
        }
    };
    let storage = storage::testing::connect(&url).await.unwrap();
    storage.migrate().await.unwrap();
    Some(TestDb {
        url,
        storage,
        _dir: dir,
    })
}

/// The URL of database `name` on the same server as `admin_url`.
fn database_url_beside(admin_url: &str, name: &str) -> String {
    let base = admin_url.rsplit_once('/').unwrap().0;
    format!("{base}/{name}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_database_replaces_the_admin_urls_database() {
        assert_eq!(
            database_url_beside("postgres://pf@127.0.0.1:5432/postgres", "t_1"),
            "postgres://pf@127.0.0.1:5432/t_1"
        );
    }
}
