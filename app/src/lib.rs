//! The PartyFlow Hooks console: Leptos components, the server functions they call,
//! and the types shared by the browser and the server.
//!
//! - [`types`]: what crosses the wire between console and server.
//! - [`auth`]: signing in and out, who is signed in, first-run setup.
//! - [`api`]: the other server functions, one per thing the console reads or does.
//! - [`port`] (server only): what the console needs from the server, as a trait
//!   the server implements; server functions reach it through Leptos context.
//! - [`guard`] (server only): sessions, the CSRF check, answers to plain form posts.
//! - [`components`]: the layout and the pieces pages share.
//! - [`pages`]: one module per page.

#![recursion_limit = "512"]

use leptos::prelude::*;
use leptos_meta::{provide_meta_context, MetaTags, Title};
use leptos_router::{
    components::{ParentRoute, Route, Router, Routes},
    path, SsrMode,
};

pub mod api;
pub mod auth;
pub mod components;
pub mod error;
#[cfg(feature = "ssr")]
pub mod guard;
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
                // The bundle's CSS under the same hashed name as its wasm and JavaScript.
                <link rel="stylesheet" href=format!("/{}/{}.css", options.site_pkg_dir, options.output_name)/>
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
    // `data-hydrated-at` is when (Unix ms), for the bundle test's time until hydrated.
    Effect::new(|_| {
        if let Some(body) = document().body() {
            let _ = body.set_attribute("data-hydrated", "true");
            let at = leptos::web_sys::js_sys::Date::now();
            let _ = body.set_attribute("data-hydrated-at", &format!("{at:.0}"));
        }
    });
    view! {
        <Title text="PartyFlow Hooks"/>
        <Router>
            <Routes fallback=pages::NotFound>
                // Async: pages are rendered whole on the server, data included, so they
                // read and work without JavaScript (out-of-order streaming needs it).
                <Route path=path!("/login") view=pages::login::LoginPage ssr=SsrMode::Async/>
                <Route path=path!("/setup") view=pages::setup::SetupPage ssr=SsrMode::Async/>
                <ParentRoute path=path!("") view=components::Layout ssr=SsrMode::Async>
                    <Route path=path!("") view=pages::overview::OverviewPage/>
                    <Route path=path!("deliveries") view=pages::deliveries::DeliveriesPage/>
                    <Route path=path!("deliveries/bulk") view=pages::bulk::BulkPage/>
                    <Route path=path!("deliveries/:id") view=pages::delivery::DeliveryPage/>
                    <Route path=path!("destinations") view=pages::destinations::DestinationsPage/>
                    <Route path=path!("destinations/:id") view=pages::destination::DestinationPage/>
                    <Route path=path!("destinations/:id/edit") view=pages::destination_edit::DestinationEditPage/>
                    <Route path=path!("destinations/:id/resend-failed") view=pages::resend_failed::ResendFailedPage/>
                    <Route path=path!("incoming-webhooks") view=pages::incoming::IncomingPage/>
                    <Route path=path!("event-types") view=pages::event_types::EventTypesPage/>
                    <Route path=path!("notifications") view=pages::notifications::NotificationsPage/>
                    <Route path=path!("spaces") view=pages::spaces::SpacesPage/>
                    <Route path=path!("spaces/:id") view=pages::spaces::SpacePage/>
                    <Route path=path!("users") view=pages::users::UsersPage/>
                    <Route path=path!("alerts") view=pages::alerts::AlertsPage/>
                    <Route path=path!("audit-log") view=pages::audit::AuditPage/>
                    <Route path=path!("search") view=pages::search::SearchPage/>
                </ParentRoute>
            </Routes>
        </Router>
    }
}
