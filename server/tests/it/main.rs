//! Integration tests: one binary, real server over real HTTP, real databases.
//! Every storage and HTTP test runs against SQLite and, when the test command
//! started one (`PARTYFLOW_TEST_POSTGRES_URL`), PostgreSQL.

mod alerts;
mod api;
mod audit;
mod bots;
mod cli;
mod console;
mod console_lists;
mod console_search;
mod console_storage;
mod crash;
mod demo;
mod dispatch;
mod event_types;
mod fifo;
mod filters;
mod headers;
mod health;
mod helpers;
mod hostile;
mod incoming;
mod limits;
mod listing;
mod metrics;
mod moving;
mod names;
mod openapi;
mod outage;
mod replay;
mod resend;
mod retention;
mod retry_after;
mod sandbox;
mod schedule;
mod scheduled;
mod standard_webhooks;
mod storage;
