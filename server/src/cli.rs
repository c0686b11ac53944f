//! The `partyflow` command line: `serve`, `migrate`, `space create`, `user create`,
//! `backup`, `copy`, `vacuum`, `demo`.

use std::io::Read as _;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Parser, Subcommand};

use crate::config::Config;
use crate::domain::{Plan, Role};
use crate::ops::tenants;
use crate::{startup, storage, telemetry};

#[derive(Parser)]
#[command(
    name = "partyflow",
    version,
    about = "PartyFlow Hooks: the webhook platform of PartyFlow"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the console, the REST API and incoming hooks; run the dispatch engine.
    Serve,
    /// Apply database migrations and exit.
    Migrate,
    /// Manage spaces (tenants).
    Space {
        #[command(subcommand)]
        command: SpaceCommand,
    },
    /// Manage console users.
    User {
        #[command(subcommand)]
        command: UserCommand,
    },
    /// Write a consistent copy of the SQLite database to a new file, while the server
    /// runs; prints JSON `{"path", "bytes"}`.
    Backup { path: std::path::PathBuf },
    /// Copy every row of the configured SQLite database into an empty PostgreSQL one
    /// (stop the server first); prints JSON `{"tables": {table: rows}, "rows"}`.
    Copy {
        /// The target, `postgres://…`; migrated here, and refused unless empty.
        #[arg(long)]
        to: String,
    },
    /// Convert the configured SQLite database to `auto_vacuum = INCREMENTAL` and compact it
    /// (stop the server first), so retention's purges give disk space back; prints JSON
    /// `{"autoVacuumBefore", "autoVacuum", "bytesBefore", "bytes"}`.
    Vacuum,
    /// Create the "Demo" space: destinations at the sample receiver built into the
    /// server (on `listen`), and sample traffic for ten minutes while the server runs;
    /// prints JSON `{"id", "created", "apiKey"?}`. Once: a second run says it exists.
    Demo {
        /// Delete the demo space and everything in it instead.
        #[arg(long)]
        remove: bool,
    },
}

#[derive(Subcommand)]
enum SpaceCommand {
    /// Create a space and its first API key; prints JSON `{"id", "apiKey"}`.
    Create {
        name: String,
        #[arg(long, default_value = "free")]
        plan: Plan,
    },
}

#[derive(Subcommand)]
enum UserCommand {
    /// Create a console user; the password is read from standard input.
    Create {
        email: String,
        #[arg(long)]
        role: Role,
    },
    /// On a database with no user yet, create an admin with a random password and print
    /// JSON `{"email", "password"}`; print nothing when users exist.
    Bootstrap {
        #[arg(long, default_value = "admin@partyflow.local")]
        email: String,
    },
}

impl clap::ValueEnum for Plan {
    fn value_variants<'a>() -> &'a [Self] {
        Plan::ALL
    }
    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(self.as_str()))
    }
}

impl clap::ValueEnum for Role {
    fn value_variants<'a>() -> &'a [Self] {
        Role::ALL
    }
    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(self.as_str()))
    }
}

pub fn main() -> ExitCode {
    // A sandbox worker (started by the server itself, never by people) needs
    // nothing of the rest: no configuration, no runtime, no environment.
    if let Some(code) = crate::sandbox::worker::run_if_asked() {
        return code;
    }
    let cli = Cli::parse();
    let config = match Config::load() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e:#}");
            return ExitCode::from(2);
        }
    };
    telemetry::init(config.log_format);
    let runtime = match config.runtime() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: starting the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli.command, config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(command: Command, config: Config) -> anyhow::Result<()> {
    match command {
        Command::Serve => startup::serve(config).await,
        Command::Migrate => {
            let db = storage::connect(&config.database_url).await?;
            db.storage.migrate().await.context("applying migrations")?;
            eprintln!("migrations applied");
            Ok(())
        }
        Command::Space {
            command: SpaceCommand::Create { name, plan },
        } => {
            let store = open(&config).await?;
            let created = tenants::create_space(store.as_ref(), &name, plan).await?;
            println!(
                "{}",
                serde_json::json!({ "id": created.space.id, "apiKey": created.api_key })
            );
            Ok(())
        }
        Command::User {
            command: UserCommand::Create { email, role },
        } => {
            let mut password = String::new();
            std::io::stdin()
                .read_to_string(&mut password)
                .context("reading the password from standard input")?;
            let password = password.trim_end_matches(['\r', '\n']);
            let store = open(&config).await?;
            let user = tenants::create_user(store.as_ref(), &email, password, role).await?;
            println!(
                "{}",
                serde_json::json!({ "id": user.id, "email": user.email, "role": user.role })
            );
            Ok(())
        }
        Command::Backup { path } => {
            let db = storage::connect(&config.database_url).await?;
            let bytes = storage::moving::backup(&db.sessions, &path).await?;
            println!(
                "{}",
                serde_json::json!({ "path": path.display().to_string(), "bytes": bytes })
            );
            Ok(())
        }
        Command::Copy { to } => {
            if !to.starts_with("postgres:") && !to.starts_with("postgresql:") {
                anyhow::bail!("--to takes a PostgreSQL URL (postgres://…)");
            }
            let from = storage::connect(&config.database_url).await?;
            from.storage
                .migrate()
                .await
                .context("migrating the SQLite database")?;
            let target = storage::connect(&to).await?;
            target
                .storage
                .migrate()
                .await
                .context("migrating the PostgreSQL database")?;
            let tables = storage::moving::copy(&from.sessions, &target.sessions).await?;
            let rows: i64 = tables.values().sum();
            println!("{}", serde_json::json!({ "tables": tables, "rows": rows }));
            Ok(())
        }
        Command::Vacuum => {
            let db = storage::connect(&config.database_url).await?;
            db.storage.migrate().await.context("applying migrations")?;
            let done = storage::sqlite::vacuum(&db.sessions).await?;
            println!("{}", serde_json::to_string(&done)?);
            Ok(())
        }
        Command::Demo { remove } => demo(&config, remove).await,
        Command::User {
            command: UserCommand::Bootstrap { email },
        } => {
            let store = open(&config).await?;
            bootstrap(store.as_ref(), &email).await
        }
    }
}

async fn bootstrap(store: &dyn storage::Storage, email: &str) -> anyhow::Result<()> {
    if store.count_users().await? > 0 {
        return Ok(());
    }
    let password = crate::auth::new_token("pf")[3..23].to_owned();
    let user = tenants::create_user(store, email, &password, Role::Admin).await?;
    println!(
        "{}",
        serde_json::json!({ "email": user.email, "password": password })
    );
    Ok(())
}

/// `partyflow demo [--remove]` (docs D17).
async fn demo(config: &Config, remove: bool) -> anyhow::Result<()> {
    let store = open(config).await?;
    if remove {
        match crate::ops::demo::remove(store.as_ref()).await? {
            Some(id) => {
                eprintln!("the demo space and everything in it were deleted");
                println!("{}", serde_json::json!({ "id": id, "removed": true }));
            }
            None => {
                eprintln!("there is no demo space");
                println!("{}", serde_json::json!({ "removed": false }));
            }
        }
        return Ok(());
    }
    let base = crate::demo::receiver_base(config.listen);
    let duration = config.demo.settings().duration_ms;
    match crate::ops::demo::create(store.as_ref(), &base, crate::clock::now_ms(), duration).await? {
        crate::ops::demo::Created::New {
            space_id, api_key, ..
        } => {
            eprintln!(
                "the demo space was created; its sample traffic flows while the server runs                  (remove it with `partyflow demo --remove`)"
            );
            println!(
                "{}",
                serde_json::json!({ "id": space_id, "created": true, "apiKey": api_key })
            );
        }
        crate::ops::demo::Created::Exists { space_id } => {
            eprintln!("the demo space exists already (remove it with `partyflow demo --remove`)");
            println!(
                "{}",
                serde_json::json!({ "id": space_id, "created": false })
            );
        }
    }
    Ok(())
}

async fn open(config: &Config) -> anyhow::Result<std::sync::Arc<dyn storage::Storage>> {
    let store = storage::connect(&config.database_url).await?.storage;
    store.migrate().await.context("applying migrations")?;
    Ok(store)
}
