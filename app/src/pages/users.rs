//! Console users and their roles (admins only): `admin` may do everything,
//! `support` may read, send again and cancel. Admins add users, disable and
//! re-enable them (disabling ends their sessions) and delete them (after a
//! confirmation); never themselves, and never the last active admin.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

use crate::api::{list_user_page, CreateUser, DeleteUser, SetUserStatus};
use crate::components::{
    console, fmt_time, load_error, refusal, reset_on_success, select_options, use_mutation,
    use_typed, Confirm, FieldError, Typed,
};
use crate::types::UserView;

#[component]
pub fn UsersPage() -> impl IntoView {
    let ctx = console();
    // A page at a time, with a search by email (issue 16 item 6).
    let query = use_query_map();
    let list = Memo::new(move |_| super::search::list_query(&query.read()));
    let data = Resource::new(
        move || (list.get(), ctx.refresh.get()),
        |(q, _)| list_user_page(q),
    );
    let create = use_mutation::<CreateUser>();
    let set_status = use_mutation::<SetUserStatus>();
    let delete = use_mutation::<DeleteUser>();
    let pending = create.pending();
    let error = refusal(create);
    let form = NodeRef::new();
    reset_on_success(create, form);
    // A refused new user comes back with the email and role typed (never the password:
    // `guard::keep_typed` drops it).
    let typed = use_typed::<CreateUser>();

    view! {
        <Title text="Users · PartyFlow Hooks"/>
        <div class="page-head"><h1>"Users"</h1></div>
        <Transition fallback=|| view! { <p class="muted">"Loading…"</p> }>
            {move || Suspend::new(async move {
                let me = ctx.me.await.map(|u| u.id).unwrap_or_default();
                let typed = typed.await;
                let email = Typed::or(&typed, "email", String::new());
                let role = Typed::or(&typed, "role", "support".into());
                match data.await {
                    Ok(page) => view! {
                        <super::search::ListSearch action="/users" query=list.get_untracked()
                            placeholder="Part of an email"/>
                        {page.filter_error.map(|e| view! { <p class="notice error" role="alert">{e}</p> })}
                        <div class="table-wrap"><table class="grid" data-testid="users">
                            <thead><tr>
                                <th scope="col">"Email"</th><th scope="col">"Role"</th><th scope="col">"Created (UTC)"</th>
                                <th scope="col">"State"</th><th scope="col">"Actions"</th>
                            </tr></thead>
                            <tbody>
                                {page.rows.into_iter().map(|u| {
                                    let mine = u.id == me;
                                    user_row(u, mine, set_status, delete)
                                }).collect_view()}
                            </tbody>
                        </table></div>
                        <super::search::Pager action="/users" query=list.get_untracked() next_cursor=page.next_cursor/>
                        <section class="card create">
                            <h2>"New user"</h2>
                            <ActionForm action=create node_ref=form>
                                <div class="form-grid">
                                    <label>"Email" <input type="email" name="email" value=email required autocomplete="off"/></label>
                                    <FieldError error label="Email"/>
                                    <label>"Password (at least 10 characters)" <input type="password" name="password" required minlength="10" autocomplete="new-password"/></label>
                                    <FieldError error label="Password"/>
                                    <label>"Role (support: read, send again, cancel; admin: everything)" <select name="role">{select_options(roles(), &role)}</select></label>
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

fn user_row(
    u: UserView,
    mine: bool,
    set_status: ServerAction<SetUserStatus>,
    delete: ServerAction<DeleteUser>,
) -> impl IntoView {
    let state = if u.disabled { "disabled" } else { "active" };
    let busy = move || set_status.pending().get() || delete.pending().get();
    let actions = if mine {
        view! { <span class="tag">"you"</span> }.into_any()
    } else {
        let (toggle_to, toggle_label, toggle_class) = if u.disabled {
            ("active", "Enable", "secondary")
        } else {
            ("disabled", "Disable", "secondary danger-text")
        };
        let question = format!(
            "Delete {}? They can no longer sign in and their sessions end at once. This cannot be undone.",
            u.email
        );
        let (id1, id2) = (u.id.clone(), u.id.clone());
        view! {
            <ActionForm action=set_status>
                <input type="hidden" name="id" value=id1/>
                <input type="hidden" name="status" value=toggle_to/>
                <button type="submit" class=toggle_class data-testid="toggle-user" disabled=busy
                    title=if u.disabled { "They can sign in again" } else { "They can no longer sign in; their sessions end at once" }>
                    {toggle_label}
                </button>
            </ActionForm>
            <Confirm label="Delete".to_owned() question=question testid="delete-user">
                <ActionForm action=delete>
                    <input type="hidden" name="id" value=id2/>
                    <button type="submit" class="danger" data-testid="confirm-delete-user" disabled=busy>"Yes, delete"</button>
                </ActionForm>
            </Confirm>
        }
        .into_any()
    };
    view! {
        <tr data-user=u.id.clone() data-state=state>
            <td>{u.email}</td>
            <td>{u.role.as_str()}</td>
            <td>{fmt_time(u.created_at)}</td>
            <td><span class=format!("badge status-{state}")>{state}</span></td>
            <td class="row-actions">{actions}</td>
        </tr>
    }
}

fn roles() -> Vec<(String, String)> {
    vec![
        ("support".to_owned(), "support".to_owned()),
        ("admin".to_owned(), "admin".to_owned()),
    ]
}
