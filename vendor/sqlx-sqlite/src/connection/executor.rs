use crate::{
    Sqlite, SqliteConnection, SqliteQueryResult, SqliteRow, SqliteStatement, SqliteTypeInfo,
};
use futures_core::future::BoxFuture;
use futures_core::stream::BoxStream;
use futures_util::{stream, FutureExt, StreamExt, TryFutureExt, TryStreamExt};
use sqlx_core::describe::Describe;
use sqlx_core::error::Error;
use sqlx_core::executor::{Execute, Executor};
use sqlx_core::Either;
use std::{future, pin::pin};

impl<'c> Executor<'c> for &'c mut SqliteConnection {
    type Database = Sqlite;

    fn fetch_many<'e, 'q, E>(
        self,
        mut query: E,
    ) -> BoxStream<'e, Result<Either<SqliteQueryResult, SqliteRow>, Error>>
    where
        'c: 'e,
        E: Execute<'q, Self::Database>,
        'q: 'e,
        E: 'q,
    {
        let sql = query.sql();
        let arguments = match query.take_arguments().map_err(Error::Encode) {
            Ok(arguments) => arguments,
            Err(error) => return stream::once(future::ready(Err(error))).boxed(),
        };
        let persistent = query.persistent() && arguments.is_some();

        Box::pin(
            self.worker
                .execute(sql, arguments, self.row_channel_size, persistent, None)
                .map_ok(flume::Receiver::into_stream)
                .try_flatten_stream(),
        )
    }

    fn fetch_optional<'e, 'q, E>(
        self,
        mut query: E,
    ) -> BoxFuture<'e, Result<Option<SqliteRow>, Error>>
    where
        'c: 'e,
        E: Execute<'q, Self::Database>,
        'q: 'e,
        E: 'q,
    {
        let sql = query.sql();
        let arguments = match query.take_arguments().map_err(Error::Encode) {
            Ok(arguments) => arguments,
            Err(error) => return future::ready(Err(error)).boxed(),
        };
        let persistent = query.persistent() && arguments.is_some();

        Box::pin(async move {
            let mut stream = pin!(self
                .worker
                .execute(sql, arguments, self.row_channel_size, persistent, Some(1))
                .map_ok(flume::Receiver::into_stream)
                .try_flatten_stream());

            while let Some(res) = stream.try_next().await? {
                if let Either::Right(row) = res {
                    return Ok(Some(row));
                }
            }

            Ok(None)
        })
    }

    fn prepare_with<'e, 'q: 'e>(
        self,
        sql: &'q str,
        _parameters: &[SqliteTypeInfo],
    ) -> BoxFuture<'e, Result<SqliteStatement<'q>, Error>>
    where
        'c: 'e,
    {
        Box::pin(async move {
            let statement = self.worker.prepare(sql).await?;

            Ok(SqliteStatement {
                sql: sql.into(),
                ..statement
            })
        })
    }

    #[doc(hidden)]
    fn describe<'e, 'q: 'e>(self, sql: &'q str) -> BoxFuture<'e, Result<Describe<Sqlite>, Error>>
    where
        'c: 'e,
    {
        Box::pin(self.worker.describe(sql))
    }
}

/// PartyFlow's patch: a whole transaction sent to the connection's thread, its results to
/// come ([`SqliteConnection::send_whole`]).
#[must_use = "its results say whether it committed"]
pub struct SentWhole {
    rx: flume::Receiver<Result<Either<SqliteQueryResult, SqliteRow>, Error>>,
}

impl SentWhole {
    /// Every statement's result, in order, or the first error.
    pub async fn results(self) -> Result<Vec<Either<SqliteQueryResult, SqliteRow>>, Error> {
        self.rx.into_stream().try_collect().await
    }
}

impl SqliteConnection {
    /// PartyFlow's patch: sends `query`, a string of statements that opens and ends its own
    /// transaction (`BEGIN IMMEDIATE; …; COMMIT`), to the connection's thread and answers
    /// once it is queued there, before it runs: the connection may take its next command
    /// at once, which runs after this one. If the transaction is still open when its
    /// statements stop (one failed, or the [`SentWhole`] was dropped), the connection's
    /// thread rolls it back before the next command.
    pub async fn send_whole<'q, E>(&mut self, mut query: E) -> Result<SentWhole, Error>
    where
        E: Execute<'q, Sqlite>,
    {
        let sql = query.sql();
        let arguments = query.take_arguments().map_err(Error::Encode)?;
        let persistent = query.persistent() && arguments.is_some();
        let rx = self
            .worker
            .execute_whole(sql, arguments, self.row_channel_size, persistent, None, true)
            .await?;
        Ok(SentWhole { rx })
    }
}
