//! The PartyFlow Hooks console: Leptos components, the server functions they call,
//! and the types shared by the browser and the server.
//!
//! - [`types`]: what crosses the wire between console and server.
//! - [`auth`]: signing in and out, and who is signed in.
//! - [`port`] (server only): what the console needs from the server, as a trait
//!   the server implements; server functions reach it through Leptos context.
//! - [`pages`]: one module per page.

use leptos::prelude::*;
use leptos_meta::{provide_meta_context, MetaTags, Stylesheet, Title};
use leptos_router::{
    components::{Route, Router, Routes},
    path,
};

pub mod auth;
pub mod error;
pub mod pages;
#[cfg(feature = "ssr")]
pub mod port;
pub mod types;

/// The HTML document around the app; rendered on the server only.
pub fn shell(options: LeptosOptions) -> impl IntoView {
    view! {
        <!DOCTYPE html>
        <html lang="en">
            <head>
                <meta charset="utf-8"/>
                <meta name="viewport" content="width=device-width, initial-scale=1"/>
                <HydrationScripts options/>
                <MetaTags/>
            </head>
            <body>
                <App/>
            </body>
        </html>
    }
}

#[component]
pub fn App() -> impl IntoView {
    provide_meta_context();
    // Effects run only in the browser, once hydrated: mark the page so tests (and
    // styles) can tell a live page from server-rendered HTML.
    Effect::new(|_| {
        if let Some(body) = document().body() {
            let _ = body.set_attribute("data-hydrated", "true");
        }
    });
    view! {
        <Stylesheet id="partyflow" href="/pkg/partyflow.css"/>
        <Title text="PartyFlow Hooks"/>
        <Router>
            <Routes fallback=pages::NotFound>
                <Route path=path!("/login") view=pages::login::LoginPage/>
                <Route path=path!("/") view=pages::home::HomePage/>
            </Routes>
        </Router>
    }
}
