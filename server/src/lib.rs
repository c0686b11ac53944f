//! PartyFlow Hooks server: ingest, the dispatch engine, the REST API and the console.
//!
//! # Layout
//! - [`domain`]: IDs, records and the closed sets of values (statuses, error classes, plans).
//! - [`storage`]: the [`storage::Storage`] trait and its SQLite and PostgreSQL implementations.
//! - [`ops`]: the rules more than one adapter uses, once: posting messages, credentials,
//!   names, spaces and users, rate windows, destinations' settings.
//! - [`auth`]: password hashing and the secrets we hand out (API keys, tokens).
//! - [`config`]: settings from the defaults, a TOML file and `PARTYFLOW_*` variables.
//! - [`http`]: the axum routers: health, the REST API (`http::v1`), and the JSON error type.
//! - [`console`]: what the Leptos console needs from the server (sessions, the console port).
//! - [`sandbox`]: the worker processes that run tenants' jq programs under memory and CPU limits.
//! - [`retention`]: the background purge of what is no longer kept (docs D10).
//! - [`metrics`]: every Prometheus metric's name, description and labels, and the
//!   functions that record them (served by `http::metrics` on its own listener).
//! - [`assets`]: the console's built files: the bundle's hashed name, precompressed
//!   serving, their `Cache-Control`.
//! - [`startup`]: wires it all together and serves until a shutdown signal.
//! - [`cli`]: the `partyflow` command line.
//! - `testkit` (feature `testkit`): what the test suites share (fresh databases, the
//!   server in-process, a test receiver).

pub mod alerts;
pub mod assets;
pub mod auth;
pub mod cli;
pub mod clock;
pub mod config;
pub mod console;
pub mod demo;
pub mod dispatch;
pub mod domain;
pub mod http;
pub mod metrics;
pub mod ops;
pub mod retention;
pub mod sandbox;
pub mod startup;
pub mod storage;
pub mod telemetry;
#[cfg(feature = "testkit")]
pub mod testkit;
