//! Spaces (tenants) and what lives in one: channels, bots and API keys. Admins only;
//! new tokens and keys are shown once.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::{use_params_map, use_query_map};

use crate::api::{
    get_space_page, list_space_page, CreateApiKey, CreateBot, CreateChannel, CreateSpace,
    RevokeApiKey, RevokeBot, SetSpaceRetention,
};
use crate::components::{
    console, fmt_time, is_admin, load_error, refusal, reset_on_success, select_options,
    use_mutation, use_typed, Confirm, FieldError, Typed,
};
use crate::types::{ListPage, SpacePage};

#[component]
pub fn SpacesPage() -> impl IntoView {
    let ctx = console();
    // A page at a time, with a search by name (issue 16 item 6).
    let query = use_query_map();
    let list = Memo::new(move |_| super::search::list_query(&query.read()));
    let data = Resource::new(
        move || (list.get(), ctx.refresh.get()),
        |(q, _)| list_space_page(q),
    );
    let create = use_mutation::<CreateSpace>();
    let pending = create.pending();
    let error = refusal(create);
    let form = NodeRef::new();
    reset_on_success(create, form);
    let typed = use_typed::<CreateSpace>();

    view! {
        <Title text="Spaces · PartyFlow Hooks"/>
        <div class="page-head">
            <h1>"Spaces"</h1>
            <p class="muted">"Each space (a project in the API) has its channels, bots, API keys and destinations."</p>
        </div>
        <Transition fallback=|| view! { <p class="muted">"Loading…"</p> }>
            {move || Suspend::new(async move {
                let admin = is_admin(&Some(ctx.me.await));
                let typed = typed.await;
                let name = Typed::or(&typed, "name", String::new());
                let plan = Typed::or(&typed, "plan", "free".into());
                match data.await {
                    Ok(page) => view! {
                        <super::search::ListSearch action="/spaces" query=list.get_untracked()
                            placeholder="Part of a name"/>
                        {page.filter_error.clone().map(|e| view! { <p class="notice error" role="alert">{e}</p> })}
                        {if page.rows.is_empty() {
                            view! { <p class="empty">"No spaces yet."</p> }.into_any()
                        } else {
                            view! {
                                <div class="table-wrap"><table class="grid" data-testid="spaces">
                                    <thead><tr><th scope="col">"Name"</th><th scope="col">"Plan"</th><th scope="col">"ID"</th><th scope="col">"Created (UTC)"</th></tr></thead>
                                    <tbody>
                                        {page.rows.into_iter().map(|s| view! {
                                            <tr>
                                                <td><a href=format!("/spaces/{}", s.id)>{s.name}</a></td>
                                                <td>{s.plan}</td>
                                                <td class="mono small">{s.id.clone()}</td>
                                                <td>{fmt_time(s.created_at)}</td>
                                            </tr>
                                        }).collect_view()}
                                    </tbody>
                                </table></div>
                            }.into_any()
                        }}
                        <super::search::Pager action="/spaces" query=list.get_untracked() next_cursor=page.next_cursor/>
                        {admin.then(|| view! {
                        <section class="card create">
                            <h2>"New space"</h2>
                            <ActionForm action=create node_ref=form>
                                <div class="form-grid">
                                    <label class="wide">"Name" <input type="text" name="name" value=name required maxlength="200"/></label>
                                    <FieldError error label="Name"/>
                                    <label>"Plan" <select name="plan">{select_options(plans(), &plan)}</select></label>
                                </div>
                                <button type="submit" disabled=move || pending.get()>"Create space"</button>
                            </ActionForm>
                        </section>
                        })}
                    }.into_any(),
                    Err(e) => load_error(e),
                }
            })}
        </Transition>
    }
}

#[component]
pub fn SpacePage() -> impl IntoView {
    let ctx = console();
    let params = use_params_map();
    let id = Memo::new(move |_| params.read().get("id").unwrap_or_default());
    // Its channels, bots and API keys a page each, with one search (issue 16 item 6).
    let query = use_query_map();
    let lists = Memo::new(move |_| space_list_query(&query.read()));
    let data = Resource::new(
        move || (id.get(), lists.get(), ctx.refresh.get()),
        |(id, q, _)| get_space_page(id, q),
    );
    let actions = Actions {
        channel: use_mutation::<CreateChannel>(),
        bot: use_mutation::<CreateBot>(),
        revoke_bot: use_mutation::<RevokeBot>(),
        key: use_mutation::<CreateApiKey>(),
        revoke_key: use_mutation::<RevokeApiKey>(),
        forms: [NodeRef::new(), NodeRef::new(), NodeRef::new()],
        retention: use_mutation::<SetSpaceRetention>(),
    };
    reset_on_success(actions.channel, actions.forms[0]);
    reset_on_success(actions.bot, actions.forms[1]);
    reset_on_success(actions.key, actions.forms[2]);
    let typed = (
        use_typed::<CreateChannel>(),
        use_typed::<CreateBot>(),
        use_typed::<CreateApiKey>(),
        use_typed::<SetSpaceRetention>(),
    );

    view! {
        <Title text="Space · PartyFlow Hooks"/>
        <p class="crumbs"><a href="/spaces">"← Spaces"</a></p>
        <Transition fallback=|| view! { <p class="muted">"Loading…"</p> }>
            {move || Suspend::new(async move {
                let typed = TypedForms {
                    channel: typed.0.await,
                    bot: typed.1.await,
                    key: typed.2.await,
                    retention: typed.3.await,
                };
                match data.await {
                    Ok(d) => space_view(d, lists.get_untracked(), actions, typed).into_any(),
                    Err(e) => load_error(e),
                }
            })}
        </Transition>
    }
}

#[derive(Clone, Copy)]
struct Actions {
    channel: ServerAction<CreateChannel>,
    bot: ServerAction<CreateBot>,
    revoke_bot: ServerAction<RevokeBot>,
    key: ServerAction<CreateApiKey>,
    revoke_key: ServerAction<RevokeApiKey>,
    forms: [NodeRef<leptos::html::Form>; 3],
    retention: ServerAction<SetSpaceRetention>,
}

/// What was typed into the space page's forms when one was refused without JavaScript.
struct TypedForms {
    channel: Option<Typed>,
    bot: Option<Typed>,
    key: Option<Typed>,
    retention: Option<Typed>,
}

/// The space page's lists from its URL (`q`, `channels_before`, `bots_before`, `keys_before`).
fn space_list_query(m: &leptos_router::params::ParamsMap) -> crate::types::SpaceListQuery {
    let get = |k: &str| m.get(k).unwrap_or_default().trim().to_owned();
    crate::types::SpaceListQuery {
        q: get("q"),
        channels_before: get("channels_before"),
        bots_before: get("bots_before"),
        keys_before: get("keys_before"),
    }
}

/// "Older →" under one of the space page's lists (and "← Newest" once paged), keeping
/// the search; `cursor` is that list's parameter.
fn older_link<T>(
    space: &str,
    q: &crate::types::SpaceListQuery,
    cursor: &'static str,
    current: &str,
    page: &ListPage<T>,
) -> impl IntoView {
    let search: Vec<(&'static str, String)> = (!q.q.is_empty())
        .then(|| ("q", q.q.clone()))
        .into_iter()
        .collect();
    let base = format!("/spaces/{space}");
    let older = page.next_cursor.clone().map(|c| {
        let mut pairs = search.clone();
        pairs.push((cursor, c));
        format!("{base}{}", crate::components::query_string(&pairs))
    });
    let newest = (!current.is_empty())
        .then(|| format!("{base}{}", crate::components::query_string(&search)));
    view! {
        {page.filter_error.clone().map(|e| view! { <p class="notice error" role="alert">{e}</p> })}
        <nav class="pager" aria-label="Pages">
            {newest.map(|href| view! { <a href=href>"← Newest"</a> })}
            {older.map(|href| view! { <a href=href data-testid=format!("older-{cursor}")>"Older →"</a> })}
        </nav>
    }
}

fn space_view(
    p: SpacePage,
    q: crate::types::SpaceListQuery,
    a: Actions,
    typed: TypedForms,
) -> impl IntoView {
    let d = p.detail;
    let space = d.space.id.clone();
    let channel = Typed::or(&typed.channel, "name", String::new());
    let bot = Typed::or(&typed.bot, "name", String::new());
    let key = Typed::or(&typed.key, "name", String::new());
    let retention = Typed::or(&typed.retention, "retention", d.retention.clone());
    let errors = (
        refusal(a.channel),
        refusal(a.bot),
        refusal(a.key),
        refusal(a.retention),
    );
    let channels_pager = older_link(
        &space,
        &q,
        "channels_before",
        &q.channels_before,
        &p.channels,
    );
    let bots_pager = older_link(&space, &q, "bots_before", &q.bots_before, &p.bots);
    let keys_pager = older_link(&space, &q, "keys_before", &q.keys_before, &p.api_keys);
    let search_action = format!("/spaces/{space}");
    let s1 = space.clone();
    let s2 = space.clone();
    let s3 = space.clone();
    let s4 = space.clone();
    let s5 = space.clone();
    let s6 = space.clone();
    view! {
        <div class="page-head">
            <h1>{d.space.name.clone()}</h1>
            <p class="muted">"Plan " {d.space.plan.clone()} " · " <span class="mono">{space.clone()}</span> " · "
                <a href=format!("/destinations?space={space}")>"Destinations"</a> " · "
                <a href=format!("/incoming-webhooks?space={space}")>"Incoming webhooks"</a> " · "
                <a href=format!("/deliveries?space={space}")>"Deliveries"</a>
            </p>
        </div>
        <form method="get" action=search_action class="filters inline">
            <label>
                "Search channels, bots and API keys"
                <input type="search" name="q" value=q.q.clone() placeholder="Part of a name or key prefix" data-testid="list-search"/>
            </label>
            <button type="submit" class="secondary">"Show"</button>
        </form>
        <div class="columns">
            <section class="card">
                <h2>"Channels"</h2>
                <ul class="plain">
                    {p.channels.rows.into_iter().map(|c| view! { <li>"#" {c.name} " " <span class="small muted mono">{c.id}</span></li> }).collect_view()}
                </ul>
                {channels_pager}
                <ActionForm action=a.channel node_ref=a.forms[0]>
                    <input type="hidden" name="space" value=s1/>
                    <label>"New channel" <input type="text" name="name" value=channel required maxlength="80"/></label>
                    <FieldError error=errors.0 label="Name"/>
                    <button type="submit" class="secondary">"Add channel"</button>
                </ActionForm>
            </section>
            <section class="card">
                <h2>"Bots"</h2>
                <ul class="plain">
                    {p.bots.rows.into_iter().map(|b| {
                        let revoked = b.revoked_at.is_some();
                        let s = s2.clone();
                        view! {
                            <li>
                                {b.name.clone()} " " <span class="small muted">{fmt_time(b.created_at)}</span>
                                {if revoked {
                                    view! { " " <span class="tag">"revoked"</span> }.into_any()
                                } else {
                                    let question = format!("Revoke the token of the bot {}? Its messages are refused from now on; this cannot be undone.", b.name);
                                    view! {
                                        <Confirm label="Revoke".to_owned() question=question testid="revoke-bot">
                                            <ActionForm action=a.revoke_bot>
                                                <input type="hidden" name="space" value=s/>
                                                <input type="hidden" name="id" value=b.id/>
                                                <button type="submit" class="danger">"Yes, revoke"</button>
                                            </ActionForm>
                                        </Confirm>
                                    }.into_any()
                                }}
                            </li>
                        }
                    }).collect_view()}
                </ul>
                {bots_pager}
                <ActionForm action=a.bot node_ref=a.forms[1]>
                    <input type="hidden" name="space" value=s3/>
                    <label>"New bot" <input type="text" name="name" value=bot required maxlength="100"/></label>
                    <FieldError error=errors.1 label="Name"/>
                    <button type="submit" class="secondary">"Create bot"</button>
                </ActionForm>
            </section>
            <section class="card">
                <h2>"API keys"</h2>
                <ul class="plain">
                    {p.api_keys.rows.into_iter().map(|k| {
                        let revoked = k.revoked_at.is_some();
                        let s = s4.clone();
                        view! {
                            <li data-key=k.id.clone()>
                                {k.name.clone()} " " <code>{k.prefix.clone()} "…"</code> " "
                                <span class="small muted">
                                    {k.last_used_at.map(|t| format!("used {}", fmt_time(t))).unwrap_or_else(|| "never used".into())}
                                </span>
                                {if revoked {
                                    view! { " " <span class="tag">"revoked"</span> }.into_any()
                                } else {
                                    let question = format!("Revoke the API key {} ({}…)? Calls with it are refused from now on; this cannot be undone.", k.name, k.prefix);
                                    let key_id = k.id.clone();
                                    view! {
                                        <Confirm label="Revoke".to_owned() question=question testid="revoke-key">
                                            <ActionForm action=a.revoke_key>
                                                <input type="hidden" name="space" value=s/>
                                                <input type="hidden" name="id" value=key_id/>
                                                <button type="submit" class="danger" data-testid="confirm-revoke-key">"Yes, revoke"</button>
                                            </ActionForm>
                                        </Confirm>
                                    }.into_any()
                                }}
                            </li>
                        }
                    }).collect_view()}
                </ul>
                {keys_pager}
                <ActionForm action=a.key node_ref=a.forms[2]>
                    <input type="hidden" name="space" value=s5/>
                    <label>"New API key name" <input type="text" name="name" value=key required maxlength="100"/></label>
                    <FieldError error=errors.2 label="Name"/>
                    <button type="submit" class="secondary">"Create API key"</button>
                </ActionForm>
            </section>
            <section class="card" data-testid="retention">
                <h2>"Retention"</h2>
                <p class="muted">"Finished deliveries, their attempts and events, and read notifications are deleted after "
                    <strong data-testid="effective-retention">{d.effective_retention.clone()}</strong>
                    {if d.retention.is_empty() { " (the plan's)." } else { " (this space's own)." }}
                </p>
                <ActionForm action=a.retention>
                    <input type="hidden" name="space" value=s6/>
                    <label>"Keep for" <input type="text" name="retention" value=retention
                        placeholder="the plan's, e.g. 30d, 12h" maxlength="40"/></label>
                    <FieldError error=errors.3 label="Retention"/>
                    <button type="submit" class="secondary">"Save retention"</button>
                </ActionForm>
            </section>
        </div>
    }
}

fn plans() -> Vec<(String, String)> {
    vec![
        ("free".to_owned(), "Free".to_owned()),
        ("pro".to_owned(), "Pro".to_owned()),
        ("enterprise".to_owned(), "Enterprise".to_owned()),
    ]
}
