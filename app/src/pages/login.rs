//! The sign-in page. A plain form posting to the `login` server function, so it
//! works without JavaScript; once hydrated it signs in without a full reload.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

use crate::auth::{needs_setup, Login};
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
        from_url.or_else(|| {
            login
                .value()
                .get()
                .and_then(|r| r.err())
                .map(|e| e.to_string())
        })
    };
    let pending = login.pending();
    let setup = Resource::new(|| (), |_| needs_setup());

    view! {
        <Title text="Sign in · PartyFlow Hooks"/>
        <main class="centered">
            <section class="card login">
                <h1>"PartyFlow Hooks"</h1>
                <p class="muted">"Sign in to the console"</p>
                <ActionForm action=login>
                    <input type="hidden" name="next" value=next/>
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
                <Suspense fallback=|| ()>
                    {move || Suspend::new(async move {
                        matches!(setup.await, Ok(true)).then(|| view! {
                            <p class="notice ok" data-testid="setup-link">
                                "No one can sign in yet. "
                                <a href="/setup">"Create the first admin"</a>
                            </p>
                        })
                    })}
                </Suspense>
            </section>
        </main>
    }
}
