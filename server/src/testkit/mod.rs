//! The test kit both test suites share (`server/tests/it` and `end2end`), behind the
//! `testkit` feature so it never ships: a fresh database per test on either backend
//! ([`fresh_db`]), the real server in this process on a free port ([`spawn_app`]),
//! a real HTTP receiver whose answers the test steers ([`Receiver`]), and the waiting
//! helpers ([`eventually`], [`wait_until`]).
//!
//! Test code: it panics on anything unexpected, so a failing set-up fails the test.

mod app;
mod db;
mod receiver;
mod wait;

pub use app::{
    browser_like_client, partyflow_binary, sandbox_settings, site_root, spawn_app,
    spawn_app_with_config, test_config, wait_until_serving, TestApp,
};
pub use db::{fresh_db, Db, TestDb};
pub use receiver::{Received, Receiver, Reply};
pub use wait::{eventually, wait_until};

/// A host name that fails to resolve on this machine without asking a name server: a
/// label may not begin with a hyphen, so the C library refuses it before it sends a
/// query. A test of the `dns` error class stays quick and the same when the machine's
/// resolver is slow or cut off (`no-such-host.invalid` waited on the name server, and in
/// one CI run the attempt outlived the test's 30 seconds). Plain `http` only: a TLS
/// client refuses the name itself, before resolving it.
pub const UNRESOLVABLE_HOST: &str = "-no-such-host.invalid";
