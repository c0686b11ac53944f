//! PostgreSQL, for scale-out: several server instances share one database.

use std::time::Duration;

use sqlx::postgres::{PgPool, PgPoolOptions};

use super::{rows, shared, Backend, DeliveryFilter, NewEvent, Page, Published, Result, StorageError};
use crate::domain::*;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/postgres");

#[derive(Debug, Clone)]
pub struct PostgresStorage {
    pub(crate) pool: PgPool,
}

impl PostgresStorage {
    pub async fn connect(url: &str) -> anyhow::Result<Self> {
        let pool = PgPoolOptions::new()
            .max_connections(16)
            .acquire_timeout(Duration::from_secs(10))
            .connect(url)
            .await?;
        Ok(Self { pool })
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}

impl_storage!(PostgresStorage, sqlx::Postgres, {
    fn backend(&self) -> Backend {
        Backend::Postgres
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    async fn migrate(&self) -> Result<()> {
        MIGRATOR
            .run(&self.pool)
            .await
            .map_err(|e| StorageError::Other(e.into()))
    }
});
