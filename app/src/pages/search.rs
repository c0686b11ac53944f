//! The search box of the top bar and its results page (`/search?q=`): a delivery, event
//! or destination ID, a `webhook-id`, an idempotency key, or a part of a destination's
//! name, URL or description. One match goes straight to its page (a redirect on the server,
//! a navigation in the browser); several are listed. A plain GET form, so it works
//! without JavaScript.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::components::{Form, Redirect};
use leptos_router::hooks::use_query_map;

use crate::api::search;
use crate::components::{fmt_time, load_error};
use crate::types::SearchResults;

/// The box in the top bar.
#[component]
pub fn SearchBox() -> impl IntoView {
    let query = use_query_map();
    let current = move || query.read().get("q").unwrap_or_default();
    view! {
        <Form action="/search" attr:class="search" attr:role="search">
            <label for="search-q" class="sr-only">"Search"</label>
            <input id="search-q" type="search" name="q" data-testid="search"
                placeholder="Delivery, event, key, destination…"
                title="A delivery, event or destination ID, a webhook-id, an idempotency key, or part of a destination's name, URL or description"
                prop:value=current/>
            <button type="submit" class="secondary">"Search"</button>
        </Form>
    }
}

#[component]
pub fn SearchPage() -> impl IntoView {
    let query = use_query_map();
    let q = Memo::new(move |_| query.read().get("q").unwrap_or_default());
    let data = Resource::new(move || q.get(), search);
    view! {
        <Title text="Search · PartyFlow Hooks"/>
        <div class="page-head">
            <h1>"Search"</h1>
        </div>
        <Transition fallback=|| view! { <p class="muted">"Searching…"</p> }>
            {move || Suspend::new(async move {
                match data.await {
                    Ok(r) => results_view(r),
                    Err(e) => load_error(e),
                }
            })}
        </Transition>
    }
}

fn results_view(r: SearchResults) -> AnyView {
    if let Some(go) = r.go {
        return view! {
            <Redirect path=go.clone()/>
            <p>"Found: " <a href=go.clone()>{go.clone()}</a></p>
        }
        .into_any();
    }
    if r.query.is_empty() {
        return view! {
            <p class="muted">
                "Type a delivery, event or destination ID, a webhook-id, an idempotency key, or part of a destination's name, URL or description."
            </p>
        }
        .into_any();
    }
    let summary = format!("“{}”, looked up as {}.", r.query, r.looked_up_as);
    if r.hits.is_empty() {
        return view! {
            <p data-testid="search-summary">{summary}</p>
            <p class="empty" data-testid="search-empty">"Nothing matches, in the spaces you may see."</p>
        }
        .into_any();
    }
    view! {
        <p data-testid="search-summary">{summary}</p>
        <div class="table-wrap">
            <table class="grid" data-testid="search-results">
                <thead>
                    <tr>
                        <th scope="col">"Found"</th>
                        <th scope="col">"Space"</th>
                        <th scope="col">"What"</th>
                        <th scope="col">"Created (UTC)"</th>
                    </tr>
                </thead>
                <tbody>
                    {r.hits.into_iter().map(|h| view! {
                        <tr data-hit=h.id.clone() data-kind=h.kind.clone()>
                            <td class="mono"><a href=h.href.clone()>{h.id.clone()}</a> <span class="tag">{h.kind.clone()}</span></td>
                            <td>{h.space_name.clone()}</td>
                            <td class="url" title=h.title.clone()>{h.title.clone()}<br/><span class="muted">{h.detail.clone()}</span></td>
                            <td class="nowrap">{fmt_time(h.created_at)}</td>
                        </tr>
                    }).collect_view()}
                </tbody>
            </table>
        </div>
        {r.more.then(|| view! { <p class="muted">"More match than are shown: make the query more precise."</p> })}
    }
    .into_any()
}

/// The filter above a long list: its space (when the list has `spaces`) and a search
/// field (a plain GET form, so it works without JavaScript; the page reads both from its
/// URL).
#[component]
pub fn ListSearch(
    action: &'static str,
    /// The spaces to choose from; none for a list that is not of a space (spaces, users).
    #[prop(optional)]
    spaces: Option<Vec<crate::types::SpaceView>>,
    query: crate::types::ListQuery,
    /// What the search field searches, for its label's hint.
    placeholder: &'static str,
) -> impl IntoView {
    let select = spaces.map(|spaces| {
        let mut options = vec![(String::new(), "All spaces".to_owned())];
        options.extend(spaces.into_iter().map(|s| (s.id, s.name)));
        view! {
            <label>
                "Space"
                <select name="space">{crate::components::select_options(options, &query.space)}</select>
            </label>
        }
    });
    view! {
        <Form action=action>
            <div class="filters inline">
                {select}
                <label>
                    "Search"
                    <input type="search" name="q" value=query.q.clone() placeholder=placeholder data-testid="list-search"/>
                </label>
                <button type="submit" class="secondary">"Show"</button>
            </div>
        </Form>
    }
}

/// "← Newest" and "Older →" under a keyset-paged list.
#[component]
pub fn Pager(
    action: &'static str,
    query: crate::types::ListQuery,
    next_cursor: Option<String>,
) -> impl IntoView {
    let older = next_cursor.map(|c| {
        let mut pairs = query.pairs();
        pairs.push(("before", c));
        format!("{action}{}", crate::components::query_string(&pairs))
    });
    let newest = (!query.before.is_empty()).then(|| {
        format!(
            "{action}{}",
            crate::components::query_string(&query.pairs())
        )
    });
    view! {
        <nav class="pager" aria-label="Pages">
            {newest.map(|href| view! { <a href=href>"← Newest"</a> })}
            {older.map(|href| view! { <a href=href data-testid="older">"Older →"</a> })}
        </nav>
    }
}

/// A long list's page from its URL (`space`, `q`, `before`).
pub fn list_query(m: &leptos_router::params::ParamsMap) -> crate::types::ListQuery {
    let get = |k: &str| m.get(k).unwrap_or_default().trim().to_owned();
    crate::types::ListQuery {
        space: get("space"),
        q: get("q"),
        before: get("before"),
    }
}
