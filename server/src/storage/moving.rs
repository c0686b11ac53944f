//! Taking a database elsewhere: `partyflow backup` (a consistent copy of a SQLite
//! database while the server runs) and `partyflow copy` (every row of a SQLite
//! database into an empty PostgreSQL one, the way up when SQLite is outgrown).
//!
//! The copy knows no table by name: it reads the tables, their columns and their
//! foreign keys from the two migrated schemas, so a table or column added by a later
//! migration is copied without a change here. Each column's PostgreSQL type says how
//! to read SQLite's value ([`ColumnKind`]); parents are copied before the tables that
//! refer to them ([`parents_first`]). Everything is written in one PostgreSQL
//! transaction and the row counts are compared before it commits, so a copy that fails
//! leaves the target as empty as it was.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use anyhow::{bail, Context as _};
use futures_util::TryStreamExt as _;
use sqlx::{PgPool, Row as _, SqlitePool};

use super::RawPool;

/// The migrations' own bookkeeping: each side has its own, written by its migrator.
const MIGRATIONS_TABLE: &str = "_sqlx_migrations";

/// Console sessions stay behind: the session store keeps its records in a table of its
/// own whose shape differs between the backends (`tower_sessions`), and our index of
/// them (`console_sessions`) means nothing without them. People sign in again.
const NOT_COPIED: [&str; 2] = ["tower_sessions", "console_sessions"];

/// Most values in one INSERT (PostgreSQL allows 65,535 parameters).
const MAX_VALUES_PER_INSERT: usize = 30_000;

/// Writes a consistent copy of the SQLite database at `url` to a new file `to`
/// (`VACUUM INTO`: one read transaction, so the copy holds exactly what was committed
/// when it began; the server keeps writing meanwhile). Returns the copy's size in bytes.
pub async fn backup(pool: &RawPool, to: &Path) -> anyhow::Result<u64> {
    let RawPool::Sqlite(pool) = pool else {
        bail!("backup copies a SQLite database; for PostgreSQL use pg_dump (or pg_basebackup)");
    };
    if to.exists() {
        bail!(
            "{} already exists: a backup is written to a new file",
            to.display()
        );
    }
    if let Some(dir) = to.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let target = to
        .to_str()
        .with_context(|| format!("{} is not valid UTF-8", to.display()))?;
    sqlx::query("VACUUM INTO $1")
        .bind(target)
        .execute(pool)
        .await
        .with_context(|| format!("writing the backup to {}", to.display()))?;
    Ok(std::fs::metadata(to)?.len())
}

/// How a column's value is read from SQLite and bound for PostgreSQL, from the
/// column's PostgreSQL type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ColumnKind {
    Integer,
    /// SQLite keeps booleans as 0 and 1.
    Boolean,
    Text,
    Real,
    Bytes,
}

impl ColumnKind {
    /// The kind of a column of PostgreSQL type `data_type` (as in `information_schema`).
    fn of(data_type: &str) -> Option<Self> {
        Some(match data_type {
            "bigint" | "integer" | "smallint" => Self::Integer,
            "boolean" => Self::Boolean,
            "text" | "character varying" | "character" => Self::Text,
            "double precision" | "real" => Self::Real,
            "bytea" => Self::Bytes,
            _ => return None,
        })
    }
}

/// A table of the target: its columns in order, with their kinds.
#[derive(Debug, Clone)]
struct Table {
    name: String,
    columns: Vec<(String, ColumnKind)>,
}

/// The tables in an order where each comes after every table it refers to.
/// `refers` maps a table to the tables its foreign keys point at (itself allowed).
fn parents_first(
    tables: &BTreeSet<String>,
    refers: &BTreeMap<String, BTreeSet<String>>,
) -> anyhow::Result<Vec<String>> {
    let mut order = Vec::with_capacity(tables.len());
    let mut placed = BTreeSet::new();
    while placed.len() < tables.len() {
        let ready: Vec<&String> = tables
            .iter()
            .filter(|t| !placed.contains(*t))
            .filter(|t| {
                refers.get(*t).is_none_or(|parents| {
                    parents
                        .iter()
                        .all(|p| p == *t || placed.contains(p) || !tables.contains(p))
                })
            })
            .collect();
        if ready.is_empty() {
            let left: Vec<&String> = tables.iter().filter(|t| !placed.contains(*t)).collect();
            bail!("the foreign keys between {left:?} form a cycle; copy cannot order them");
        }
        for t in ready {
            placed.insert(t.clone());
            order.push(t.clone());
        }
    }
    Ok(order)
}

/// `"a", "b"`: column names quoted for SQL.
fn column_list(table: &Table) -> String {
    table
        .columns
        .iter()
        .map(|(c, _)| format!("\"{c}\""))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Rows per INSERT for a table this wide.
fn rows_per_insert(columns: usize) -> usize {
    (MAX_VALUES_PER_INSERT / columns.max(1)).clamp(1, 1_000)
}

/// One value read from SQLite, ready to bind.
#[derive(Debug, Clone, PartialEq)]
enum Value {
    Integer(Option<i64>),
    Boolean(Option<bool>),
    Text(Option<String>),
    Real(Option<f64>),
    Bytes(Option<Vec<u8>>),
}

fn read_value(
    row: &sqlx::sqlite::SqliteRow,
    i: usize,
    kind: ColumnKind,
) -> Result<Value, sqlx::Error> {
    Ok(match kind {
        ColumnKind::Integer => Value::Integer(row.try_get(i)?),
        ColumnKind::Boolean => Value::Boolean(row.try_get::<Option<i64>, _>(i)?.map(|v| v != 0)),
        ColumnKind::Text => Value::Text(row.try_get(i)?),
        ColumnKind::Real => Value::Real(row.try_get(i)?),
        ColumnKind::Bytes => Value::Bytes(row.try_get(i)?),
    })
}

/// What was copied: rows per table.
pub type Copied = BTreeMap<String, i64>;

/// Copies every row of the SQLite database behind `from` into the PostgreSQL database
/// behind `to`. Both must be migrated to the same version (the caller migrates both);
/// `to` must hold no row. The server must be stopped: what it wrote after the copy's
/// read transaction began would not be copied.
pub async fn copy(from: &RawPool, to: &RawPool) -> anyhow::Result<Copied> {
    let (RawPool::Sqlite(from), RawPool::Postgres(to)) = (from, to) else {
        bail!(
            "copy goes from the configured SQLite database to a PostgreSQL one (--to postgres://…)"
        );
    };
    same_migrations(from, to).await?;
    let tables = target_tables(to).await?;
    let names: BTreeSet<String> = tables.keys().cloned().collect();
    check_source_columns(from, &tables).await?;
    check_empty(to, &names).await?;
    let order = parents_first(&names, &source_foreign_keys(from).await?)?;

    // One read transaction on SQLite: every table as of the same moment.
    let mut source = from.begin().await?;
    let mut target = to.begin().await?;
    let mut copied = Copied::new();
    for name in &order {
        let table = &tables[name];
        let expected: i64 = sqlx::query_scalar(&format!("SELECT COUNT(*) FROM \"{name}\""))
            .fetch_one(&mut *source)
            .await?;
        let select = format!("SELECT {} FROM \"{name}\"", column_list(table));
        let batch = rows_per_insert(table.columns.len());
        let mut rows = sqlx::query(&select).fetch(&mut *source);
        let mut pending: Vec<Vec<Value>> = Vec::with_capacity(batch);
        while let Some(row) = rows.try_next().await? {
            let values = table
                .columns
                .iter()
                .enumerate()
                .map(|(i, (_, kind))| read_value(&row, i, *kind))
                .collect::<Result<Vec<_>, _>>()
                .with_context(|| format!("reading a row of {name}"))?;
            pending.push(values);
            if pending.len() == batch {
                insert(&mut target, table, &pending).await?;
                pending.clear();
            }
        }
        drop(rows);
        if !pending.is_empty() {
            insert(&mut target, table, &pending).await?;
        }
        let written: i64 = sqlx::query_scalar(&format!("SELECT COUNT(*) FROM \"{name}\""))
            .fetch_one(&mut *target)
            .await?;
        if written != expected {
            bail!("{name}: {expected} rows in SQLite but {written} written; nothing was committed");
        }
        copied.insert(name.clone(), written);
    }
    target.commit().await.context("committing the copy")?;
    source.rollback().await?;
    Ok(copied)
}

async fn insert(
    tx: &mut sqlx::PgConnection,
    table: &Table,
    rows: &[Vec<Value>],
) -> anyhow::Result<()> {
    let mut q = sqlx::QueryBuilder::<sqlx::Postgres>::new(format!(
        "INSERT INTO \"{}\" ({}) ",
        table.name,
        column_list(table)
    ));
    q.push_values(rows, |mut b, row| {
        for value in row {
            match value {
                Value::Integer(v) => b.push_bind(*v),
                Value::Boolean(v) => b.push_bind(*v),
                Value::Text(v) => b.push_bind(v.clone()),
                Value::Real(v) => b.push_bind(*v),
                Value::Bytes(v) => b.push_bind(v.clone()),
            };
        }
    });
    q.build()
        .execute(tx)
        .await
        .with_context(|| format!("writing rows of {}", table.name))?;
    Ok(())
}

/// Both databases at the same migration: the same schema, so every column has a place.
async fn same_migrations(from: &SqlitePool, to: &PgPool) -> anyhow::Result<()> {
    let q = format!("SELECT version FROM {MIGRATIONS_TABLE} WHERE success ORDER BY version");
    let a: Vec<i64> = sqlx::query_scalar(&q).fetch_all(from).await?;
    let b: Vec<i64> = sqlx::query_scalar(&q).fetch_all(to).await?;
    if a != b {
        bail!("the databases are at different migrations (SQLite {a:?}, PostgreSQL {b:?})");
    }
    Ok(())
}

/// The target's tables and their columns, in column order.
async fn target_tables(to: &PgPool) -> anyhow::Result<BTreeMap<String, Table>> {
    let rows: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT table_name::text, column_name::text, data_type::text FROM information_schema.columns \
         WHERE table_schema = current_schema() AND table_name <> $1 \
         ORDER BY table_name, ordinal_position",
    )
    .bind(MIGRATIONS_TABLE)
    .fetch_all(to)
    .await?;
    let mut tables: BTreeMap<String, Table> = BTreeMap::new();
    for (table, column, data_type) in rows {
        if NOT_COPIED.contains(&table.as_str()) {
            continue;
        }
        let kind = ColumnKind::of(&data_type).with_context(|| {
            format!("{table}.{column} is of type {data_type}, which copy does not know")
        })?;
        tables
            .entry(table.clone())
            .or_insert_with(|| Table {
                name: table,
                columns: Vec::new(),
            })
            .columns
            .push((column, kind));
    }
    Ok(tables)
}

/// The source has the same tables with the same columns as the target.
async fn check_source_columns(
    from: &SqlitePool,
    tables: &BTreeMap<String, Table>,
) -> anyhow::Result<()> {
    let rows: Vec<(String, String)> = sqlx::query_as(
        "SELECT m.name, p.name FROM sqlite_master m JOIN pragma_table_info(m.name) p \
         WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite_%' AND m.name <> $1",
    )
    .bind(MIGRATIONS_TABLE)
    .fetch_all(from)
    .await?;
    let mut source: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (table, column) in rows {
        if NOT_COPIED.contains(&table.as_str()) {
            continue;
        }
        source.entry(table).or_default().insert(column);
    }
    let target: BTreeMap<String, BTreeSet<String>> = tables
        .iter()
        .map(|(t, table)| {
            let columns = table.columns.iter().map(|(c, _)| c.clone()).collect();
            (t.clone(), columns)
        })
        .collect();
    if source != target {
        let only_source: Vec<_> = source.keys().filter(|t| !target.contains_key(*t)).collect();
        let only_target: Vec<_> = target.keys().filter(|t| !source.contains_key(*t)).collect();
        bail!(
            "the two schemas differ (tables only in SQLite: {only_source:?}, only in PostgreSQL: \
             {only_target:?}, or their columns differ)"
        );
    }
    Ok(())
}

/// Refuses a target that holds any row.
async fn check_empty(to: &PgPool, tables: &BTreeSet<String>) -> anyhow::Result<()> {
    let mut full = Vec::new();
    for t in tables {
        let any: bool = sqlx::query_scalar(&format!("SELECT EXISTS (SELECT 1 FROM \"{t}\")"))
            .fetch_one(to)
            .await?;
        if any {
            full.push(t.as_str());
        }
    }
    if !full.is_empty() {
        bail!(
            "the PostgreSQL database is not empty ({} hold rows); copy writes only into an empty one",
            full.join(", ")
        );
    }
    Ok(())
}

/// Each table and the tables its foreign keys point at, from SQLite's schema.
async fn source_foreign_keys(
    from: &SqlitePool,
) -> anyhow::Result<BTreeMap<String, BTreeSet<String>>> {
    let rows: Vec<(String, String)> = sqlx::query_as(
        "SELECT m.name, f.\"table\" FROM sqlite_master m JOIN pragma_foreign_key_list(m.name) f \
         WHERE m.type = 'table'",
    )
    .fetch_all(from)
    .await?;
    let mut refers: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (table, parent) in rows {
        refers.entry(table).or_default().insert(parent);
    }
    Ok(refers)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn parents_come_before_the_tables_that_refer_to_them() {
        let tables = set(&["attempts", "deliveries", "destinations", "events", "spaces"]);
        let refers = BTreeMap::from([
            ("attempts".to_string(), set(&["deliveries"])),
            (
                "deliveries".to_string(),
                set(&["events", "destinations", "spaces"]),
            ),
            ("destinations".to_string(), set(&["spaces"])),
            ("events".to_string(), set(&["spaces"])),
        ]);
        let order = parents_first(&tables, &refers).unwrap();
        let at = |t: &str| order.iter().position(|x| x == t).unwrap();
        assert_eq!(order.len(), 5);
        assert!(at("spaces") < at("events") && at("spaces") < at("destinations"));
        assert!(at("events") < at("deliveries") && at("destinations") < at("deliveries"));
        assert!(at("deliveries") < at("attempts"));
    }

    #[test]
    fn a_table_referring_to_itself_or_to_an_unknown_table_is_still_ordered() {
        let tables = set(&["a", "b"]);
        let refers = BTreeMap::from([
            ("a".to_string(), set(&["a", "elsewhere"])),
            ("b".to_string(), set(&["a"])),
        ]);
        assert_eq!(parents_first(&tables, &refers).unwrap(), vec!["a", "b"]);
    }

    #[test]
    fn a_cycle_is_refused_with_its_tables() {
        let tables = set(&["a", "b"]);
        let refers = BTreeMap::from([
            ("a".to_string(), set(&["b"])),
            ("b".to_string(), set(&["a"])),
        ]);
        let e = parents_first(&tables, &refers).unwrap_err().to_string();
        assert!(e.contains("cycle") && e.contains("\"a\""), "{e}");
    }

    #[test]
    fn postgres_types_map_to_how_sqlite_values_are_read() {
        assert_eq!(ColumnKind::of("bigint"), Some(ColumnKind::Integer));
        assert_eq!(ColumnKind::of("boolean"), Some(ColumnKind::Boolean));
        assert_eq!(ColumnKind::of("text"), Some(ColumnKind::Text));
        assert_eq!(ColumnKind::of("bytea"), Some(ColumnKind::Bytes));
        assert_eq!(ColumnKind::of("tsvector"), None);
    }

    #[test]
    fn inserts_stay_under_the_parameter_limit_and_take_at_least_one_row() {
        assert_eq!(rows_per_insert(10), 1_000);
        assert_eq!(rows_per_insert(40), 750);
        assert!(rows_per_insert(40) * 40 <= 65_535);
        assert_eq!(rows_per_insert(100_000), 1);
    }
}
