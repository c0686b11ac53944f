//! The deliveries table: newest first, keyset-paginated, with filters kept in the
//! URL (a GET form, so links and the back button work, with or without JavaScript).
//! Rows can be chosen, or everything matching the filter, for Send again or Cancel:
//! the choice goes to the confirmation page ([`super::bulk`]).

use std::collections::HashSet;

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::components::Form;
use leptos_router::hooks::use_query_map;
use leptos_router::params::ParamsMap;

use crate::api::{destination_choices, list_deliveries};
use crate::components::{
    console, error_class_info, fmt_time, load_error, select_options, ErrorClassBadge, StatusBadge,
    DELIVERY_STATUSES, ERROR_CLASSES,
};
use crate::types::{DeliveryPage, DeliveryQuery};

/// The filter in the URL.
pub fn query_from_map(m: &ParamsMap) -> DeliveryQuery {
    let get = |k: &str| m.get(k).unwrap_or_default().trim().to_owned();
    DeliveryQuery {
        space: get("space"),
        destination: get("destination"),
        status: get("status"),
        error_class: get("error_class"),
        event_type: get("event_type"),
        last: get("last"),
        since: get("since"),
        until: get("until"),
        before: get("before"),
    }
}

#[component]
pub fn DeliveriesPage() -> impl IntoView {
    let ctx = console();
    let query = use_query_map();
    let q = Memo::new(move |_| query_from_map(&query.read()));
    let data = Resource::new(
        move || (q.get(), ctx.refresh.get()),
        |(q, _)| list_deliveries(q),
    );
    // Live (issue 16 item 5): the rows are read again every few seconds and swapped in
    // when they changed; the filters (as being edited) and the checked rows stay, as
    // they live outside the rows.
    let live = super::live::latest(move || list_deliveries(q.get_untracked()));
    let selected = RwSignal::new(HashSet::<String>::new());
    let all_matching = RwSignal::new(false);
    Effect::watch(
        move || (q.get(), ctx.refresh.get()),
        move |_, _, _| {
            live.set(None);
            selected.set(HashSet::new());
            all_matching.set(false);
        },
        false,
    );

    view! {
        <Title text="Deliveries · PartyFlow Hooks"/>
        <div class="page-head">
            <h1>"Deliveries"</h1>
            <p class="muted">"Newest first. Times are UTC."</p>
        </div>
        <Transition fallback=|| view! { <p class="muted">"Loading…"</p> }>
            {move || Suspend::new(async move {
                let result = data.await;
                let q = q.get_untracked();
                match result {
                    Ok(page) => view! {
                        <Filters q=q.clone() page=page.clone()/>
                        {move || {
                            let shown = live.get().unwrap_or_else(|| page.clone());
                            view! { <Table q=q.clone() page=shown selected=selected all_matching=all_matching/> }
                        }}
                    }.into_any(),
                    Err(e) => load_error(e),
                }
            })}
        </Transition>
    }
}

#[component]
fn Filters(q: DeliveryQuery, page: DeliveryPage) -> impl IntoView {
    let mut spaces = vec![(String::new(), "All spaces".to_owned())];
    spaces.extend(page.spaces.into_iter().map(|c| (c.value, c.label)));
    let suggested = page.destinations;
    let mut statuses = vec![(String::new(), "Any status".to_owned())];
    statuses.extend(
        DELIVERY_STATUSES
            .iter()
            .map(|s| (s.to_string(), s.to_string())),
    );
    let mut classes = vec![(String::new(), "Any error class".to_owned())];
    classes.extend(
        ERROR_CLASSES
            .iter()
            .map(|c| (c.to_string(), format!("{c} — {}", error_class_info(c).0))),
    );
    let ranges = vec![
        (String::new(), "Any time".to_owned()),
        ("15m".to_owned(), "Last 15 minutes".to_owned()),
        ("1h".to_owned(), "Last hour".to_owned()),
        ("24h".to_owned(), "Last 24 hours".to_owned()),
        ("7d".to_owned(), "Last 7 days".to_owned()),
    ];
    view! {
        <Form action="/deliveries">
            <fieldset class="filters">
                <legend class="sr-only">"Filters"</legend>
                <label>"Space" <select name="space">{select_options(spaces, &q.space)}</select></label>
                <DestinationField space=q.space.clone() current=q.destination.clone() choices=suggested/>
                <label>"Status" <select name="status" data-testid="filter-status">{select_options(statuses, &q.status)}</select></label>
                <label>"Error class" <select name="error_class" data-testid="filter-error-class">{select_options(classes, &q.error_class)}</select></label>
                <label>"Event type" <input type="text" name="event_type" value=q.event_type.clone() placeholder="e.g. message.created"/></label>
                <label>"Created" <select name="last">{select_options(ranges, &q.last)}</select></label>
                <label>"From (UTC)" <input type="datetime-local" name="since" value=q.since.clone()/></label>
                <label>"To (UTC)" <input type="datetime-local" name="until" value=q.until.clone()/></label>
                <div class="filter-actions">
                    <button type="submit" data-testid="apply-filters">"Apply"</button>
                    <a href="/deliveries">"Clear"</a>
                </div>
            </fieldset>
        </Form>
        {page.filter_error.map(|e| view! { <p class="notice error" role="alert">{e}</p> })}
    }
}

/// The destination filter: a text field that takes a destination's ID or a part of its
/// name, URL or description, with a list of suggestions under it (a `<datalist>`: the newest
/// destinations, or those the server found for what was typed). Without JavaScript the
/// server resolves what was typed when the form is applied; with it, the suggestions
/// follow the typing through a server function.
#[component]
fn DestinationField(
    space: String,
    current: String,
    choices: Vec<crate::types::Choice>,
) -> impl IntoView {
    let suggestions = RwSignal::new(choices);
    let lookup = Action::new(move |(space, typed): &(String, String)| {
        let (space, typed) = (space.clone(), typed.clone());
        async move {
            if let Ok(found) = destination_choices(space, typed).await {
                suggestions.set(found);
            }
        }
    });
    let on_input = move |ev: leptos::ev::Event| {
        let typed = event_target_value(&ev);
        // A chosen suggestion is an ID: nothing more to look up.
        if !typed.starts_with("dst_") {
            lookup.dispatch((space.clone(), typed));
        }
    };
    view! {
        <label>
            "Destination"
            <input type="text" name="destination" value=current list="destination-choices"
                autocomplete="off" placeholder="ID or part of its URL" data-testid="filter-destination"
                on:input=on_input/>
        </label>
        <datalist id="destination-choices">
            {move || suggestions.get().into_iter().map(|c| view! { <option value=c.value>{c.label}</option> }).collect_view()}
        </datalist>
    }
}

#[component]
fn Table(
    q: DeliveryQuery,
    page: DeliveryPage,
    /// The checked rows: kept by the page, so they stay checked when the rows are read again.
    selected: RwSignal<HashSet<String>>,
    all_matching: RwSignal<bool>,
) -> impl IntoView {
    let all_ids: Vec<String> = page.rows.iter().map(|r| r.id.clone()).collect();
    let count = all_ids.len();
    let filter_pairs = q.pairs();
    let filtered = q.is_filtered();
    let older = page.next_cursor.clone().map(|c| {
        let mut pairs = q.pairs();
        pairs.push(("before", c));
        format!("/deliveries{}", crate::components::query_string(&pairs))
    });
    let newest = (!q.before.is_empty())
        .then(|| format!("/deliveries{}", crate::components::query_string(&q.pairs())));
    // Checked rows on this page (a row that moved to an older page is no longer counted).
    let on_page = {
        let all_ids = all_ids.clone();
        move || selected.with(|s| all_ids.iter().filter(|id| s.contains(*id)).count())
    };
    let on_page_too = on_page.clone();
    let toggle_page = {
        let all_ids = all_ids.clone();
        move |ev: leptos::ev::Event| {
            if event_target_checked(&ev) {
                selected.set(all_ids.iter().cloned().collect());
            } else {
                selected.set(HashSet::new());
            }
        }
    };

    view! {
        <Form action="/deliveries/bulk">
            {filter_pairs.into_iter().map(|(k, v)| view! { <input type="hidden" name=k value=v/> }).collect_view()}
            <div class="toolbar" role="group" aria-label="Bulk actions">
                <button type="submit" name="op" value="resend" data-testid="bulk-resend">"Send again…"</button>
                <button type="submit" name="op" value="cancel" class="secondary" data-testid="bulk-cancel">"Cancel…"</button>
                <label class="check">
                    <input type="checkbox" name="all" value="true" data-testid="select-all-matching"
                        prop:checked=move || all_matching.get()
                        on:change=move |ev| all_matching.set(event_target_checked(&ev))/>
                    {if filtered { "All deliveries matching the filter" } else { "All deliveries (no filter set)" }}
                </label>
                <span class="muted" aria-live="polite">
                    {move || {
                        let n = on_page();
                        (n > 0).then(|| format!("{n} selected on this page"))
                    }}
                </span>
            </div>
            {if count == 0 {
                view! { <p class="empty">"No deliveries match."</p> }.into_any()
            } else {
                view! {
                    <div class="table-wrap">
                        <table class="grid deliveries" data-testid="deliveries">
                            <thead>
                                <tr>
                                    <th scope="col" class="pick">
                                        <input type="checkbox" aria-label="Select every delivery on this page" on:change=toggle_page
                                            prop:checked=move || on_page_too() == count/>
                                    </th>
                                    <th scope="col">"Delivery"</th>
                                    <th scope="col">"Created (UTC)"</th>
                                    <th scope="col">"Space"</th>
                                    <th scope="col">"Destination"</th>
                                    <th scope="col">"Event type"</th>
                                    <th scope="col">"Status"</th>
                                    <th scope="col" class="num">"Attempts"</th>
                                    <th scope="col">"Last error"</th>
                                    <th scope="col">"Next attempt"</th>
                                </tr>
                            </thead>
                            <tbody>
                                {page.rows.into_iter().map(|r| {
                                    let id = r.id.clone();
                                    let id_for_check = id.clone();
                                    let id_for_toggle = id.clone();
                                    view! {
                                        <tr data-delivery=id.clone() data-status=r.status.clone()>
                                            <td class="pick">
                                                <input type="checkbox" name="id" value=id.clone() aria-label=format!("Select {id}")
                                                    prop:checked=move || selected.with(|s| s.contains(&id_for_check))
                                                    on:change=move |ev| {
                                                        let on = event_target_checked(&ev);
                                                        selected.update(|s| {
                                                            if on { s.insert(id_for_toggle.clone()); } else { s.remove(&id_for_toggle); }
                                                        });
                                                    }/>
                                            </td>
                                            <td class="mono">
                                                <a href=format!("/deliveries/{id}")>{short_id(&id)}</a>
                                                {r.resent_from.as_ref().map(|_| view! { <span class="tag" title="A resend of an earlier delivery">"resend"</span> })}
                                                {r.resent_as.as_ref().map(|_| view! { <span class="tag" title="Sent again as a newer delivery">"sent again"</span> })}
                                            </td>
                                            <td class="nowrap">{fmt_time(r.created_at)}</td>
                                            <td>{r.space_name.clone()}</td>
                                            <td class="url" title=r.destination_url.clone()>
                                                <a href=format!("/destinations/{}", r.destination_id)>{r.destination_name.clone()}</a>
                                            </td>
                                            <td>{r.event_type.clone()}</td>
                                            <td><StatusBadge status=r.status.clone() paused=r.paused/></td>
                                            <td class="num">{r.attempts}</td>
                                            <td>{r.last_error_class.clone().map(|c| view! { <ErrorClassBadge class=c code=r.last_status_code/> })}</td>
                                            <td class="nowrap">{r.next_attempt_at.map(fmt_time)}</td>
                                        </tr>
                                    }
                                }).collect_view()}
                            </tbody>
                        </table>
                    </div>
                }.into_any()
            }}
        </Form>
        <nav class="pager" aria-label="Pages">
            {newest.map(|href| view! { <a href=href>"← Newest"</a> })}
            {older.map(|href| view! { <a href=href data-testid="older">"Older →"</a> })}
        </nav>
    }
}

/// `dlv_01j…` shortened for the table; the full ID is in the link and on the delivery page.
pub fn short_id(id: &str) -> String {
    match id.split_once('_') {
        Some((prefix, body)) if body.len() > 10 => format!("{prefix}_…{}", &body[body.len() - 8..]),
        _ => id.to_owned(),
    }
}
