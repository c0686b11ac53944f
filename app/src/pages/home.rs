//! The signed-in home page (the overview grows here).

use leptos::prelude::*;

use crate::auth::{current_user, Logout};

#[component]
pub fn HomePage() -> impl IntoView {
    let user = Resource::new(|| (), |_| current_user());
    let logout = ServerAction::<Logout>::new();

    view! {
        <header class="topbar">
            <span class="brand">"PartyFlow Hooks"</span>
            <Suspense fallback=|| ()>
                {move || {
                    user.get()
                        .and_then(|u| u.ok())
                        .map(|u| {
                            view! {
                                <span class="who" data-testid="signed-in-as">
                                    {u.email.clone()}
                                    " · "
                                    {u.role.clone()}
                                </span>
                            }
                        })
                }}
            </Suspense>
            <ActionForm action=logout>
                <button type="submit" class="link">"Sign out"</button>
            </ActionForm>
        </header>
        <main class="page">
            <h1>"Overview"</h1>
            <p class="muted">"Nothing here yet: deliveries, destinations and notifications will appear on this page."</p>
        </main>
    }
}
