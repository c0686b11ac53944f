//! The console in a real headless Chromium (Debian's, driven by chromedriver; no
//! browser is downloaded), against the real server on a real database: one test
//! binary, one module per area. The support code is the crate's library
//! (`end2end/src/`); `./dev test` builds the console's wasm into `site/pkg` first.

mod accessibility;
mod admin;
mod alerts;
mod audit;
mod bundle;
mod catalog;
mod deliveries;
mod demo;
mod first_run;
mod forms;
mod headers;
mod lists;
mod live;
mod login;
mod manage;
mod notifications;
mod roles;
mod search;
mod try_it;
