//! The audit log: who changed what, newest first. Admins see every entry and filter by
//! person, action, space and time; support staff see their own entries only (the server
//! decides, not this page). Filters are kept in the URL (a GET form).

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::components::Form;
use leptos_router::hooks::use_query_map;
use leptos_router::params::ParamsMap;

use crate::api::list_audit_log;
use crate::components::{console, fmt_time, load_error, query_string, select_options};
use crate::types::{AuditPage, AuditQuery};

/// The filter in the URL.
pub fn query_from_map(m: &ParamsMap) -> AuditQuery {
    let get = |k: &str| m.get(k).unwrap_or_default().trim().to_owned();
    AuditQuery {
        actor: get("actor"),
        action: get("action"),
        space: get("space"),
        since: get("since"),
        until: get("until"),
        before: get("before"),
    }
}

#[component]
pub fn AuditPage() -> impl IntoView {
    let ctx = console();
    let query = use_query_map();
    let q = Memo::new(move |_| query_from_map(&query.read()));
    let data = Resource::new(
        move || (q.get(), ctx.refresh.get()),
        |(q, _)| list_audit_log(q),
    );
    view! {
        <Title text="Audit log · PartyFlow Hooks"/>
        <div class="page-head">
            <h1>"Audit log"</h1>
            <p class="muted">"Every change made in the console or through the API, newest first. Times are UTC."</p>
        </div>
        <Transition fallback=|| view! { <p class="muted">"Loading…"</p> }>
            {move || Suspend::new(async move {
                let result = data.await;
                let q = q.get_untracked();
                match result {
                    Ok(page) => view! {
                        <Filters q=q.clone() page=page.clone()/>
                        <Entries q=q page=page/>
                    }.into_any(),
                    Err(e) => load_error(e),
                }
            })}
        </Transition>
    }
}

#[component]
fn Filters(q: AuditQuery, page: AuditPage) -> impl IntoView {
    let mut people = vec![(String::new(), "Everyone".to_owned())];
    people.extend(page.people.into_iter().map(|c| (c.value, c.label)));
    let mut spaces = vec![(String::new(), "All spaces".to_owned())];
    spaces.extend(page.spaces.into_iter().map(|c| (c.value, c.label)));
    let mut actions = vec![(String::new(), "Any action".to_owned())];
    actions.extend(page.actions.into_iter().map(|a| (a.clone(), a)));
    let own_only = page.own_only;
    view! {
        <Form action="/audit-log">
            <fieldset class="filters">
                <legend class="sr-only">"Filters"</legend>
                {(!own_only).then(|| view! {
                    <label>"Person" <select name="actor" data-testid="filter-actor">{select_options(people, &q.actor)}</select></label>
                })}
                <label>"Action" <select name="action" data-testid="filter-action">{select_options(actions, &q.action)}</select></label>
                <label>"Space" <select name="space">{select_options(spaces, &q.space)}</select></label>
                <label>"From (UTC)" <input type="datetime-local" name="since" value=q.since.clone()/></label>
                <label>"To (UTC)" <input type="datetime-local" name="until" value=q.until.clone()/></label>
                <div class="filter-actions">
                    <button type="submit" data-testid="apply-filters">"Apply"</button>
                    <a href="/audit-log">"Clear"</a>
                </div>
            </fieldset>
        </Form>
        {own_only.then(|| view! { <p class="muted" data-testid="own-only">"You see the changes you made yourself."</p> })}
        {page.filter_error.map(|e| view! { <p class="notice error" role="alert">{e}</p> })}
    }
}

#[component]
fn Entries(q: AuditQuery, page: AuditPage) -> impl IntoView {
    let older = page.next_cursor.clone().map(|c| {
        let mut pairs = q.pairs();
        pairs.push(("before", c));
        format!("/audit-log{}", query_string(&pairs))
    });
    let newest = (!q.before.is_empty()).then(|| format!("/audit-log{}", query_string(&q.pairs())));
    view! {
        {if page.rows.is_empty() {
            view! { <p class="empty">"No changes recorded."</p> }.into_any()
        } else {
            view! {
                <div class="table-wrap">
                    <table class="grid audit" data-testid="audit-log">
                        <thead>
                            <tr>
                                <th scope="col">"When (UTC)"</th>
                                <th scope="col">"Who"</th>
                                <th scope="col">"Action"</th>
                                <th scope="col">"Space"</th>
                                <th scope="col">"Target"</th>
                                <th scope="col">"Detail"</th>
                                <th scope="col">"From"</th>
                            </tr>
                        </thead>
                        <tbody>
                            {page.rows.into_iter().map(|r| view! {
                                <tr data-action=r.action.clone() data-actor=r.actor_label.clone()>
                                    <td class="nowrap">{fmt_time(r.created_at)}</td>
                                    <td>
                                        {r.actor_label.clone()}
                                        {r.role.clone().map(|role| view! { <span class="tag">{role}</span> })}
                                        {(r.actor_kind == "api_key").then(|| view! { <span class="tag">"API key"</span> })}
                                    </td>
                                    <td class="mono">{r.action.clone()}</td>
                                    <td>{r.space_name.clone().or(r.space_id.clone()).unwrap_or_else(|| "—".into())}</td>
                                    <td class="mono small">{if r.target_id.is_empty() { r.target_kind.clone() } else { r.target_id.clone() }}</td>
                                    <td class="mono small detail">{r.detail.clone()}</td>
                                    <td class="mono small">{r.source.clone().unwrap_or_else(|| "—".into())}</td>
                                </tr>
                            }).collect_view()}
                        </tbody>
                    </table>
                </div>
            }.into_any()
        }}
        <nav class="pager" aria-label="Pages">
            {newest.map(|href| view! { <a href=href>"← Newest"</a> })}
            {older.map(|href| view! { <a href=href data-testid="older">"Older →"</a> })}
        </nav>
    }
}
