//! The support code of the browser tests (`tests/e2e/`): chromedriver with Debian's
//! headless Chromium and screenshots ([`browser`]), the real server on a fresh SQLite
//! file with its users and space ([`fixture`]), and the page helpers the tests drive
//! the console with ([`page`]). Databases, the server start and the receiver come
//! from the server's shared test kit (`server::testkit`), re-exported here.

pub mod browser;
pub mod fixture;
pub mod page;

pub use browser::{artifacts, browser, browser_without_javascript, screenshot, Driver};
pub use fixture::{
    http_session, incoming_webhook, start_bare_server, start_server, start_server_with, Server,
    ADMIN, PASSWORD, SUPPORT,
};
pub use page::{find, open, sign_in, wait_for_hydration, wait_text, wait_url};
pub use server::testkit::{browser_like_client, wait_until, Received, Receiver, Reply};
