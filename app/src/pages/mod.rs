//! The console's pages, one module each.

use leptos::prelude::*;

pub mod alerts;
pub mod audit;
pub mod bulk;
pub mod deliveries;
pub mod delivery;
pub mod destination;
pub mod destination_edit;
pub mod destinations;
pub mod event_types;
pub mod incoming;
pub mod live;
pub mod login;
pub mod notifications;
pub mod overview;
pub mod resend_failed;
pub mod search;
pub mod setup;
pub mod spaces;
pub mod users;

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

/// The space filter at the top of the destinations and incoming webhooks pages: a
/// plain GET form, so it works without JavaScript.
#[component]
pub fn SpaceFilter(
    action: &'static str,
    spaces: Vec<crate::types::SpaceView>,
    current: String,
) -> impl IntoView {
    let mut options = vec![(String::new(), "All spaces".to_owned())];
    options.extend(spaces.into_iter().map(|s| (s.id, s.name)));
    view! {
        <leptos_router::components::Form action=action>
            <div class="filters inline">
                <label>
                    "Space"
                    <select name="space">{crate::components::select_options(options, &current)}</select>
                </label>
                <button type="submit" class="secondary">"Show"</button>
            </div>
        </leptos_router::components::Form>
    }
}
