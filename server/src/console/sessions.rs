//! Console sessions in the same database as everything else, so a restart keeps
//! people signed in and several instances share them.
//!
//! Beside tower-sessions' own table, the store keeps an index of which session is
//! signed in as which user (`console_sessions`), written whenever a signed-in session
//! is created (sign-in renews the session ID, so every sign-in creates one) or saved
//! (with its new expiry), and removed when it is deleted. [`AnyStore::end_sessions_of`] uses it to end a user's
//! sessions when the user is disabled or deleted.

use std::sync::Arc;

use async_trait::async_trait;
use tower_sessions::session::{Id, Record};
use tower_sessions::session_store::{self, SessionStore};
use tower_sessions_sqlx_store::{PostgresStore, SqliteStore};

use crate::clock::now_ms;
use crate::domain::UserId;
use crate::storage::{RawPool, UserStore};

/// The tower-sessions store for whichever backend is in use.
#[derive(Debug, Clone)]
enum Inner {
    Sqlite(SqliteStore),
    Postgres(PostgresStore),
}

/// The console's session store: tower-sessions' sqlx store of the backend in use,
/// plus the index of sessions per user.
#[derive(Debug, Clone)]
pub struct AnyStore {
    inner: Inner,
    storage: Arc<dyn UserStore>,
}

fn store_error(e: impl std::fmt::Display) -> session_store::Error {
    session_store::Error::Backend(e.to_string())
}

impl AnyStore {
    /// Opens a session store on `pool` (the storage's own, from [`crate::storage::connect`])
    /// and creates its table; `storage` keeps the index of sessions per user.
    pub async fn new(pool: RawPool, storage: Arc<dyn UserStore>) -> anyhow::Result<Self> {
        let inner = match pool {
            RawPool::Sqlite(pool) => Inner::Sqlite(SqliteStore::new(pool)),
            RawPool::Postgres(pool) => Inner::Postgres(PostgresStore::new(pool)),
        };
        match &inner {
            Inner::Sqlite(s) => s.migrate().await?,
            Inner::Postgres(s) => s.migrate().await?,
        }
        Ok(AnyStore { inner, storage })
    }

    /// Deletes expired sessions every `period`, until the task is dropped.
    pub async fn delete_expired_every(self, period: std::time::Duration) {
        use tower_sessions::ExpiredDeletion as _;
        let _ = match self.inner {
            Inner::Sqlite(s) => s.continuously_delete_expired(period).await,
            Inner::Postgres(s) => s.continuously_delete_expired(period).await,
        };
    }

    /// Deletes the expired sessions of tower-sessions' table now (the retention task).
    pub async fn delete_expired_now(&self) -> session_store::Result<()> {
        use tower_sessions::ExpiredDeletion as _;
        match &self.inner {
            Inner::Sqlite(s) => s.delete_expired().await,
            Inner::Postgres(s) => s.delete_expired().await,
        }
    }

    /// Ends every session signed in as `user`; returns how many there were.
    pub async fn end_sessions_of(&self, user: UserId) -> session_store::Result<usize> {
        let ids = self
            .storage
            .user_sessions(user)
            .await
            .map_err(store_error)?;
        self.end_sessions(&ids).await?;
        Ok(ids.len())
    }

    /// Ends the sessions with these IDs (from [`UserStore::user_sessions`]).
    pub async fn end_sessions(&self, ids: &[String]) -> session_store::Result<()> {
        for id in ids {
            // A malformed ID cannot name a session; forget the index row alone.
            match id.parse::<Id>() {
                Ok(id) => self.delete(&id).await?,
                Err(_) => self.storage.forget_session(id).await.map_err(store_error)?,
            }
        }
        Ok(())
    }

    /// Indexes a session that is signed in (it holds the user's ID).
    async fn index(&self, record: &Record) -> session_store::Result<()> {
        let user = record
            .data
            .get(app::port::SESSION_USER_KEY)
            .and_then(|v| v.as_str())
            .and_then(|s| s.parse::<UserId>().ok());
        let Some(user) = user else { return Ok(()) };
        let expires_at = (record.expiry_date.unix_timestamp_nanos() / 1_000_000) as i64;
        self.storage
            .remember_session(&record.id.to_string(), user, expires_at, now_ms())
            .await
            .map_err(store_error)
    }
}

#[async_trait]
impl SessionStore for AnyStore {
    async fn create(&self, record: &mut Record) -> session_store::Result<()> {
        match &self.inner {
            Inner::Sqlite(s) => s.create(record).await?,
            Inner::Postgres(s) => s.create(record).await?,
        }
        self.index(record).await
    }

    async fn save(&self, record: &Record) -> session_store::Result<()> {
        match &self.inner {
            Inner::Sqlite(s) => s.save(record).await?,
            Inner::Postgres(s) => s.save(record).await?,
        }
        // A save may move the expiry on; the index must not forget the session earlier.
        self.index(record).await
    }

    async fn load(&self, id: &Id) -> session_store::Result<Option<Record>> {
        match &self.inner {
            Inner::Sqlite(s) => s.load(id).await,
            Inner::Postgres(s) => s.load(id).await,
        }
    }

    async fn delete(&self, id: &Id) -> session_store::Result<()> {
        match &self.inner {
            Inner::Sqlite(s) => s.delete(id).await?,
            Inner::Postgres(s) => s.delete(id).await?,
        }
        self.storage
            .forget_session(&id.to_string())
            .await
            .map_err(store_error)
    }
}
