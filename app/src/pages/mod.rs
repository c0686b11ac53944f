//! The console's pages, one module each.

use leptos::prelude::*;

pub mod home;
pub mod login;

#[component]
pub fn NotFound() -> impl IntoView {
    #[cfg(feature = "ssr")]
    {
        if let Some(resp) = use_context::<leptos_axum::ResponseOptions>() {
            resp.set_status(axum::http::StatusCode::NOT_FOUND);
        }
    }
    view! {
        <main class="centered">
            <h1>"Page not found"</h1>
            <p><a href="/">"Back to the overview"</a></p>
        </main>
    }
}
