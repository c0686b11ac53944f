//! First run: while no user exists, this page creates the first admin. The server
//! refuses it once any user exists, whatever the page shows.

use leptos::prelude::*;
use leptos_meta::Title;

use crate::auth::{needs_setup, Setup};

#[component]
pub fn SetupPage() -> impl IntoView {
    let setup = ServerAction::<Setup>::new();
    let needed = Resource::new(|| (), |_| needs_setup());
    let pending = setup.pending();
    let error = move || {
        setup
            .value()
            .get()
            .and_then(|r| r.err())
            .map(|e| e.to_string())
    };

    view! {
        <Title text="First run · PartyFlow Hooks"/>
        <main class="centered">
            <section class="card login">
                <h1>"Welcome to PartyFlow Hooks"</h1>
                <Suspense fallback=|| view! { <p class="muted">"Checking…"</p> }>
                    {move || Suspend::new(async move {
                        match needed.await {
                            Ok(true) => view! {
                                <p class="muted">"Create the first admin. This page works only once, while no user exists."</p>
                                <ActionForm action=setup>
                                    <label>
                                        "Email"
                                        <input type="email" name="email" autocomplete="username" required autofocus/>
                                    </label>
                                    <label>
                                        "Password (at least 10 characters)"
                                        <input type="password" name="password" autocomplete="new-password" minlength="10" required/>
                                    </label>
                                    <button type="submit" disabled=move || pending.get()>
                                        {move || if pending.get() { "Creating…" } else { "Create admin and sign in" }}
                                    </button>
                                </ActionForm>
                            }.into_any(),
                            Ok(false) => view! {
                                <p>"The console is set up already."</p>
                                <p><a href="/login">"Sign in"</a></p>
                            }.into_any(),
                            Err(e) => view! { <p class="error" role="alert">{e.to_string()}</p> }.into_any(),
                        }
                    })}
                </Suspense>
                <Show when=move || error().is_some()>
                    <p class="error" role="alert">{error}</p>
                </Show>
            </section>
        </main>
    }
}
