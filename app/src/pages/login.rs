//! The sign-in page. A plain form posting to the `login` server function, so it
//! works without JavaScript; once hydrated it signs in without a full reload.

use leptos::prelude::*;
use leptos_router::hooks::use_query_map;

use crate::auth::Login;
use crate::error::ConsoleError;

#[component]
pub fn LoginPage() -> impl IntoView {
    let login = ServerAction::<Login>::new();
    let query = use_query_map();
    let next = move || query.read().get("next").unwrap_or_default();
    let error = move || {
        let from_url = query.read().get("error").map(|code| match code.as_str() {
            "throttled" => ConsoleError::Throttled.to_string(),
            _ => ConsoleError::BadCredentials.to_string(),
        });
        from_url.or_else(|| login.value().get().and_then(|r| r.err()).map(|e| e.to_string()))
    };
    let pending = login.pending();

    view! {
        <main class="centered">
            <section class="card login">
                <h1>"PartyFlow Hooks"</h1>
                <p class="muted">"Sign in to the console"</p>
                <ActionForm action=login>
                    <input type="hidden" name="next" prop:value=next/>
                    <label>
                        "Email"
                        <input type="email" name="email" autocomplete="username" required autofocus/>
                    </label>
                    <label>
                        "Password"
                        <input type="password" name="password" autocomplete="current-password" required/>
                    </label>
                    <button type="submit" disabled=move || pending.get()>
                        {move || if pending.get() { "Signing in…" } else { "Sign in" }}
                    </button>
                </ActionForm>
                <Show when=move || error().is_some()>
                    <p class="error" role="alert">{error}</p>
                </Show>
            </section>
        </main>
    }
}
