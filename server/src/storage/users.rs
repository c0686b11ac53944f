//! Console users and the index of their console sessions.

use async_trait::async_trait;
use sqlx::{ColumnIndex, Executor, IntoArguments};

use super::store::{
    convert_all, parse, Args, Conn, DbRow, Dialect, RowsAffected, SqlArg, SqlValue, Store,
};
use super::write::{Durability, WriteTx};
use super::*;

pub(super) const USER: &str = "id, email, password_hash, role, created_at, disabled_at";

/// A condition on the user `$1`: it is not an admin, or another admin is still active.
pub(super) const NOT_LAST_ADMIN: &str = "(role <> 'admin' OR EXISTS (SELECT 1 FROM users o \
    WHERE o.role = 'admin' AND o.disabled_at IS NULL AND o.id <> $1))";

/// Console users (sign-in, first run, user management) and which session is signed in
/// as whom.
#[async_trait]
pub trait UserStore: Send + Sync + std::fmt::Debug {
    async fn create_user(&self, user: &User, audit: Option<&AuditEntry>) -> Result<()>;
    async fn get_user(&self, id: UserId) -> Result<User>;
    async fn find_user_by_email(&self, email: &str) -> Result<User>;
    async fn count_users(&self) -> Result<i64>;
    async fn list_all_users(&self) -> Result<Vec<User>>;
    /// Creates `user` only if no user exists, in one transaction that two concurrent
    /// first-run setups cannot both pass; false when a user exists already.
    async fn create_first_user(&self, user: &User, audit: Option<&AuditEntry>) -> Result<bool>;
    /// Disables a user (`Some(now)`) or enables one (`None`). Never disables the last
    /// active admin; disabling a disabled user changes nothing and is `Done`.
    async fn set_user_disabled(
        &self,
        id: UserId,
        disabled_at: Option<UnixMs>,
        audit: Option<&AuditEntry>,
    ) -> Result<UserChange>;
    /// Deletes a user (and its session index), never the last active admin.
    async fn delete_user(&self, id: UserId, audit: Option<&AuditEntry>) -> Result<UserChange>;
    /// Records that the console session `session_id` is signed in as `user_id` (until
    /// `expires_at`), so the user's sessions can be ended; forgets expired records.
    async fn remember_session(
        &self,
        session_id: &str,
        user_id: UserId,
        expires_at: UnixMs,
        now: UnixMs,
    ) -> Result<()>;
    async fn forget_session(&self, session_id: &str) -> Result<()>;
    /// The IDs of the console sessions signed in as `user_id`.
    async fn user_sessions(&self, user_id: UserId) -> Result<Vec<String>>;
    /// A page of every console user, newest first, for the console's list: with `pattern` only
    /// those whose lower-cased email is `LIKE` it (`Store::search_page`).
    async fn search_users(&self, pattern: Option<&str>, page: Page<UserId>) -> Result<Vec<User>>;
}

#[async_trait]
impl<D: Dialect> UserStore for Store<D>
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
    async fn create_user(&self, u: &User, audit: Option<&AuditEntry>) -> Result<()> {
        let query = sqlx::query(
            "INSERT INTO users (id, email, password_hash, role, created_at, disabled_at) VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(u.id.to_string())
        .bind(&u.email)
        .bind(&u.password_hash)
        .bind(u.role.as_str())
        .bind(u.created_at)
        .bind(u.disabled_at);
        self.execute_audited(query, audit).await?;
        Ok(())
    }

    async fn get_user(&self, id: UserId) -> Result<User> {
        let sql = format!("SELECT {} FROM users WHERE id = $1", USER);
        sqlx::query_as::<_, UserRow>(&sql)
            .bind(id.to_string())
            .fetch_one(&self.read)
            .await?
            .try_into()
    }

    async fn find_user_by_email(&self, email: &str) -> Result<User> {
        let sql = format!("SELECT {} FROM users WHERE email = $1", USER);
        sqlx::query_as::<_, UserRow>(&sql)
            .bind(email)
            .fetch_one(&self.read)
            .await?
            .try_into()
    }

    async fn count_users(&self) -> Result<i64> {
        let (n,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM users")
            .fetch_one(&self.read)
            .await?;
        Ok(n)
    }

    async fn list_all_users(&self) -> Result<Vec<User>> {
        let sql = format!("SELECT {} FROM users ORDER BY email", USER);
        let rows = sqlx::query_as::<_, UserRow>(&sql)
            .fetch_all(&self.read)
            .await?;
        convert_all(rows)
    }

    async fn create_first_user(&self, u: &User, audit: Option<&AuditEntry>) -> Result<bool> {
        let mut writer = self.writes.writer(Durability::Full).await?;
        let mut tx = writer.begin().await?;
        D::lock_users(&mut tx).await?;
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
        if done.rows_affected() == 1 {
            Self::audit_in(&mut tx, audit).await?;
        }
        tx.commit().await?;
        Ok(done.rows_affected() == 1)
    }

    async fn set_user_disabled(
        &self,
        id: UserId,
        disabled_at: Option<UnixMs>,
        audit: Option<&AuditEntry>,
    ) -> Result<UserChange> {
        let mut writer = self.writes.writer(Durability::Full).await?;
        let mut tx = writer.begin().await?;
        D::lock_users(&mut tx).await?;
        let done = match disabled_at {
            None => {
                sqlx::query("UPDATE users SET disabled_at = NULL WHERE id = $1")
                    .bind(id.to_string())
                    .execute(&mut *tx)
                    .await?
            }
            Some(at) => {
                sqlx::query(&format!(
                "UPDATE users SET disabled_at = $2 WHERE id = $1 AND disabled_at IS NULL AND {}",
                NOT_LAST_ADMIN
            ))
                .bind(id.to_string())
                .bind(at)
                .execute(&mut *tx)
                .await?
            }
        };
        let change = if done.rows_affected() == 1 {
            Self::audit_in(&mut tx, audit).await?;
            UserChange::Done
        } else {
            Self::why_unchanged(&mut tx, id).await?
        };
        tx.commit().await?;
        Ok(change)
    }

    async fn delete_user(&self, id: UserId, audit: Option<&AuditEntry>) -> Result<UserChange> {
        let mut writer = self.writes.writer(Durability::Full).await?;
        let mut tx = writer.begin().await?;
        D::lock_users(&mut tx).await?;
        let done = sqlx::query(&format!(
            "DELETE FROM users WHERE id = $1 AND (disabled_at IS NOT NULL OR {})",
            NOT_LAST_ADMIN
        ))
        .bind(id.to_string())
        .execute(&mut *tx)
        .await?;
        let change = if done.rows_affected() == 1 {
            Self::audit_in(&mut tx, audit).await?;
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

    async fn remember_session(
        &self,
        session_id: &str,
        user_id: UserId,
        expires_at: UnixMs,
        now: UnixMs,
    ) -> Result<()> {
        let mut writer = self.writes.writer(Durability::Full).await?;
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
        let query =
            sqlx::query("DELETE FROM console_sessions WHERE session_id = $1").bind(session_id);
        self.execute(Durability::Full, query).await?;
        Ok(())
    }

    async fn user_sessions(&self, user_id: UserId) -> Result<Vec<String>> {
        let rows: Vec<(String,)> =
            sqlx::query_as("SELECT session_id FROM console_sessions WHERE user_id = $1")
                .bind(user_id.to_string())
                .fetch_all(&self.read)
                .await?;
        Ok(rows.into_iter().map(|(id,)| id).collect())
    }

    async fn search_users(&self, pattern: Option<&str>, page: Page<UserId>) -> Result<Vec<User>> {
        let rows: Vec<UserRow> = self
            .search_page((USER, "users"), None, (&["email"], pattern), page)
            .await?;
        convert_all(rows)
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
    /// Why a change to a user touched no row: it does not exist, it was already
    /// as asked (`Done`), or it is the last active admin.
    async fn why_unchanged(tx: &mut WriteTx<'_, D::DB>, id: UserId) -> Result<UserChange> {
        let row: Option<(Option<i64>,)> =
            sqlx::query_as("SELECT disabled_at FROM users WHERE id = $1")
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

#[derive(sqlx::FromRow)]
pub(super) struct UserRow {
    id: String,
    email: String,
    password_hash: String,
    role: String,
    created_at: i64,
    disabled_at: Option<i64>,
}

impl TryFrom<UserRow> for User {
    type Error = StorageError;
    fn try_from(r: UserRow) -> Result<Self, StorageError> {
        Ok(User {
            id: parse("users.id", &r.id)?,
            email: r.email,
            password_hash: r.password_hash,
            role: parse("users.role", &r.role)?,
            created_at: r.created_at,
            disabled_at: r.disabled_at,
        })
    }
}
