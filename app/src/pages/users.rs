//! Console users and their roles (admins only): `admin` may do everything,
//! `support` may read, send again and cancel.

use leptos::prelude::*;
use leptos_meta::Title;

use crate::api::{list_users, CreateUser};
use crate::components::{
    console, fmt_time, load_error, reset_on_success, select_options, use_mutation,
};

#[component]
pub fn UsersPage() -> impl IntoView {
    let ctx = console();
    let data = Resource::new(move || ctx.refresh.get(), |_| list_users());
    let create = use_mutation::<CreateUser>();
    let pending = create.pending();
    let form = NodeRef::new();
    reset_on_success(create, form);

    view! {
        <Title text="Users · PartyFlow Hooks"/>
        <div class="page-head"><h1>"Users"</h1></div>
        <Transition fallback=|| view! { <p class="muted">"Loading…"</p> }>
            {move || Suspend::new(async move {
                match data.await {
                    Ok(users) => view! {
                        <div class="table-wrap"><table class="grid" data-testid="users">
                            <thead><tr><th scope="col">"Email"</th><th scope="col">"Role"</th><th scope="col">"Created (UTC)"</th><th scope="col">"State"</th></tr></thead>
                            <tbody>
                                {users.into_iter().map(|u| view! {
                                    <tr>
                                        <td>{u.email}</td>
                                        <td>{u.role}</td>
                                        <td>{fmt_time(u.created_at)}</td>
                                        <td>{if u.disabled { "disabled" } else { "active" }}</td>
                                    </tr>
                                }).collect_view()}
                            </tbody>
                        </table></div>
                        <section class="card create">
                            <h2>"New user"</h2>
                            <ActionForm action=create node_ref=form>
                                <div class="form-grid">
                                    <label>"Email" <input type="email" name="email" required autocomplete="off"/></label>
                                    <label>"Password (at least 10 characters)" <input type="password" name="password" required minlength="10" autocomplete="new-password"/></label>
                                    <label>"Role (support: read, send again, cancel; admin: everything)" <select name="role">{select_options(roles(), "support")}</select></label>
                                </div>
                                <button type="submit" disabled=move || pending.get()>"Create user"</button>
                            </ActionForm>
                        </section>
                    }.into_any(),
                    Err(e) => load_error(e),
                }
            })}
        </Transition>
    }
}

fn roles() -> Vec<(String, String)> {
    vec![
        ("support".to_owned(), "support".to_owned()),
        ("admin".to_owned(), "admin".to_owned()),
    ]
}
