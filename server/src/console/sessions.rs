//! Console sessions in the same database as everything else, so a restart keeps
//! people signed in and several instances share them.

use async_trait::async_trait;
use tower_sessions::session::{Id, Record};
use tower_sessions::session_store::{self, SessionStore};
use tower_sessions_sqlx_store::{PostgresStore, SqliteStore};

use crate::storage::{postgres::PostgresStorage, sqlite::SqliteStorage, Storage};

/// The tower-sessions store for whichever backend is in use.
#[derive(Debug, Clone)]
pub enum AnyStore {
    Sqlite(SqliteStore),
    Postgres(PostgresStore),
}

impl AnyStore {
    /// Opens a session store on the pool of the storage and creates its table.
    pub async fn for_storage(storage: &dyn Storage) -> anyhow::Result<Self> {
        let any = storage.as_any();
        let store = if let Some(s) = any.downcast_ref::<SqliteStorage>() {
            AnyStore::Sqlite(SqliteStore::new(s.pool().clone()))
        } else if let Some(s) = any.downcast_ref::<PostgresStorage>() {
            AnyStore::Postgres(PostgresStore::new(s.pool().clone()))
        } else {
            anyhow::bail!("no session store for the {:?} backend", storage.backend());
        };
        match &store {
            AnyStore::Sqlite(s) => s.migrate().await?,
            AnyStore::Postgres(s) => s.migrate().await?,
        }
        Ok(store)
    }

    /// Deletes expired sessions every `period`, until the task is dropped.
    pub async fn delete_expired_every(self, period: std::time::Duration) {
        use tower_sessions::ExpiredDeletion as _;
        let _ = match self {
            AnyStore::Sqlite(s) => s.continuously_delete_expired(period).await,
            AnyStore::Postgres(s) => s.continuously_delete_expired(period).await,
        };
    }
}

#[async_trait]
impl SessionStore for AnyStore {
    async fn create(&self, record: &mut Record) -> session_store::Result<()> {
        match self {
            AnyStore::Sqlite(s) => s.create(record).await,
            AnyStore::Postgres(s) => s.create(record).await,
        }
    }

    async fn save(&self, record: &Record) -> session_store::Result<()> {
        match self {
            AnyStore::Sqlite(s) => s.save(record).await,
            AnyStore::Postgres(s) => s.save(record).await,
        }
    }

    async fn load(&self, id: &Id) -> session_store::Result<Option<Record>> {
        match self {
            AnyStore::Sqlite(s) => s.load(id).await,
            AnyStore::Postgres(s) => s.load(id).await,
        }
    }

    async fn delete(&self, id: &Id) -> session_store::Result<()> {
        match self {
            AnyStore::Sqlite(s) => s.delete(id).await,
            AnyStore::Postgres(s) => s.delete(id).await,
        }
    }
}
