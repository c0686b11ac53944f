//! Notifications for admins (a destination or incoming webhook was disabled, a
//! destination is failing): newest first, each linking to what it is about, with
//! Mark read and Mark all read.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

use crate::api::{list_notifications, MarkRead};
use crate::components::{console, fmt_time, load_error, use_mutation};
use crate::types::NotificationPage;

#[component]
pub fn NotificationsPage() -> impl IntoView {
    let ctx = console();
    let query = use_query_map();
    let unread_only = Memo::new(move |_| query.read().get("show").as_deref() == Some("unread"));
    let before = Memo::new(move |_| query.read().get("before").unwrap_or_default());
    let data = Resource::new(
        move || (unread_only.get(), before.get(), ctx.refresh.get()),
        |(u, b, _)| list_notifications(u, b),
    );
    let mark = use_mutation::<MarkRead>();
    let tab = move |unread: bool, label: &'static str| {
        let href = if unread {
            "/notifications?show=unread"
        } else {
            "/notifications"
        };
        view! { <a href=href aria-current=move || (unread_only.get() == unread).then_some("page")>{label}</a> }
    };

    view! {
        <Title text="Notifications · PartyFlow Hooks"/>
        <div class="page-head">
            <h1>"Notifications"</h1>
            <nav class="tabs" aria-label="Which notifications">{tab(false, "All")}{tab(true, "Unread")}</nav>
        </div>
        <Transition fallback=|| view! { <p class="muted">"Loading…"</p> }>
            {move || Suspend::new(async move {
                match data.await {
                    Ok(page) => list_view(page, unread_only.get_untracked(), mark).into_any(),
                    Err(e) => load_error(e),
                }
            })}
        </Transition>
    }
}

fn list_view(
    page: NotificationPage,
    unread_only: bool,
    mark: ServerAction<MarkRead>,
) -> impl IntoView {
    let pending = mark.pending();
    let older = page.next_cursor.map(|c| {
        format!(
            "/notifications?{}before={c}",
            if unread_only { "show=unread&" } else { "" }
        )
    });
    view! {
        <div class="toolbar">
            <span>{page.unread} " unread"</span>
            {(page.unread > 0).then(|| view! {
                <ActionForm action=mark>
                    <input type="hidden" name="id" value=""/>
                    <button type="submit" class="secondary" disabled=move || pending.get()>"Mark all read"</button>
                </ActionForm>
            })}
        </div>
        {if page.rows.is_empty() {
            view! { <p class="empty">"No notifications."</p> }.into_any()
        } else {
            view! {
                <ul class="notifications" data-testid="notifications">
                    {page.rows.into_iter().map(|n| view! {
                        <li class=if n.read { "read" } else { "unread" } data-kind=n.kind.clone()>
                            <div class="n-head">
                                <span class="small muted">{fmt_time(n.created_at)} " UTC"</span>
                                {n.space_name.clone().map(|s| view! { <span class="tag">{s}</span> })}
                                {(!n.read).then(|| view! { <span class="tag unread-tag">"unread"</span> })}
                            </div>
                            <p>{n.message.clone()}</p>
                            <div class="n-actions">
                                {n.link.clone().map(|href| view! { <a href=href>"Open"</a> })}
                                {(!n.read).then(|| view! {
                                    <ActionForm action=mark>
                                        <input type="hidden" name="id" value=n.id.clone()/>
                                        <button type="submit" class="link" disabled=move || pending.get()>"Mark read"</button>
                                    </ActionForm>
                                })}
                            </div>
                        </li>
                    }).collect_view()}
                </ul>
            }.into_any()
        }}
        <nav class="pager">{older.map(|href| view! { <a href=href>"Older →"</a> })}</nav>
    }
}
