//! The event-type catalog across spaces: each type's name, description, whether it has
//! a JSON Schema that payloads must match, and a deprecated badge. Admins add types
//! and change them (description, schema, example, deprecated) in a form per row;
//! support staff read. [`CatalogDatalist`] offers the catalog's names to the
//! destination forms.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

use crate::api::{list_event_type_page, list_event_types, list_spaces, SaveEventType};
use crate::components::{
    console, fmt_time, is_admin, load_error, reset_on_success, select_options, use_mutation,
};
use crate::types::{CatalogEntry, SpaceView};

/// The `id` of the `<datalist>` of catalog names that the event-types input refers to.
pub const CATALOG_DATALIST: &str = "catalog-event-types";

#[component]
pub fn EventTypesPage() -> impl IntoView {
    let ctx = console();
    let query = use_query_map();
    // A page at a time, newest first, with a search by name or description (issue 16 item 6).
    let list = Memo::new(move |_| super::search::list_query(&query.read()));
    let space = Memo::new(move |_| list.read().space.clone());
    let data = Resource::new(
        move || (list.get(), ctx.refresh.get()),
        |(q, _)| list_event_type_page(q),
    );
    let spaces = Resource::new(|| (), |_| list_spaces());
    let save = use_mutation::<SaveEventType>();

    view! {
        <Title text="Event types · PartyFlow Hooks"/>
        <div class="page-head">
            <h1>"Event types"</h1>
            <p class="muted">"The catalog of each space: what a type means and the JSON Schema its payloads must match when published."</p>
        </div>
        <Transition fallback=|| view! { <p class="muted">"Loading…"</p> }>
            {move || Suspend::new(async move {
                let admin = is_admin(&Some(ctx.me.await));
                let spaces = spaces.await.unwrap_or_default();
                match data.await {
                    Ok(page) => view! {
                        <super::search::ListSearch action="/event-types" spaces=spaces.clone() query=list.get_untracked()
                            placeholder="Part of a name or description"/>
                        {page.filter_error.map(|e| view! { <p class="notice error" role="alert">{e}</p> })}
                        <CatalogTable list=page.rows admin=admin save=save/>
                        <super::search::Pager action="/event-types" query=list.get_untracked() next_cursor=page.next_cursor/>
                        {admin.then(|| view! { <CreateForm spaces=spaces current=space.get_untracked() save=save/> })}
                    }.into_any(),
                    Err(e) => load_error(e),
                }
            })}
        </Transition>
    }
}

#[component]
fn CatalogTable(
    list: Vec<CatalogEntry>,
    admin: bool,
    save: ServerAction<SaveEventType>,
) -> impl IntoView {
    if list.is_empty() {
        return view! { <p class="empty">"No event types in the catalog yet."</p> }.into_any();
    }
    view! {
        <div class="table-wrap">
            <table class="grid" data-testid="event-types">
                <thead>
                    <tr>
                        <th scope="col">"Name"</th>
                        <th scope="col">"Space"</th>
                        <th scope="col">"Description"</th>
                        <th scope="col">"Schema"</th>
                        <th scope="col">"Changed (UTC)"</th>
                        {admin.then(|| view! { <th scope="col">"Actions"</th> })}
                    </tr>
                </thead>
                <tbody>
                    {list.into_iter().map(|t| view! { <CatalogRow t=t admin=admin save=save/> }).collect_view()}
                </tbody>
            </table>
        </div>
    }
    .into_any()
}

#[component]
fn CatalogRow(t: CatalogEntry, admin: bool, save: ServerAction<SaveEventType>) -> impl IntoView {
    let has_schema = !t.schema.is_empty();
    let schema_cell = if has_schema {
        let schema = t.schema.clone();
        view! {
            <details class="small">
                <summary data-testid="schema-present">"yes"</summary>
                <pre class="mono">{schema}</pre>
            </details>
        }
        .into_any()
    } else {
        view! { <span class="muted" data-testid="schema-absent">"none"</span> }.into_any()
    };
    let edit = admin.then(|| {
        let t = t.clone();
        view! { <td class="row-actions"><EditForm t=t save=save/></td> }
    });
    view! {
        <tr data-event-type=t.name.clone() data-space=t.space_id.clone() data-deprecated=t.deprecated.to_string()>
            <td>
                <span class="mono">{t.name.clone()}</span>
                {t.deprecated.then(|| view! {
                    <span class="badge status-cancelled" data-testid="deprecated" title="Still publishable; new subscribers should not rely on it.">"deprecated"</span>
                })}
            </td>
            <td>{t.space_name.clone()}</td>
            <td>{t.description.clone()}</td>
            <td>{schema_cell}</td>
            <td class="nowrap">{fmt_time(t.updated_at)}</td>
            {edit}
        </tr>
    }
}

/// The fields every catalog form has, filled from `t`.
#[component]
fn CatalogFields(t: CatalogEntry) -> impl IntoView {
    view! {
        <label class="wide">"Description" <input type="text" name="description" maxlength="1000" value=t.description/></label>
        <label class="wide">"JSON Schema (draft 2020-12; empty for none)"
            <textarea name="schema" rows="6" spellcheck="false" class="mono" placeholder=r#"{"type": "object", "required": ["id"]}"#>{t.schema}</textarea>
        </label>
        <label class="wide">"Example payload (must match the schema; empty for none)"
            <textarea name="example" rows="4" spellcheck="false" class="mono" placeholder=r#"{"id": 42}"#>{t.example}</textarea>
        </label>
        <label class="check"><input type="checkbox" name="deprecated" value="on" checked=t.deprecated/> " Deprecated"</label>
    }
}

#[component]
fn EditForm(t: CatalogEntry, save: ServerAction<SaveEventType>) -> impl IntoView {
    let pending = save.pending();
    let (space, name) = (t.space_id.clone(), t.name.clone());
    view! {
        <details class="edit">
            <summary>"Edit"</summary>
            <ActionForm action=save>
                <input type="hidden" name="space" value=space/>
                <input type="hidden" name="name" value=name/>
                <input type="hidden" name="existing" value="on"/>
                <div class="form-grid"><CatalogFields t=t/></div>
                <button type="submit" disabled=move || pending.get()>"Save event type"</button>
            </ActionForm>
        </details>
    }
}

#[component]
fn CreateForm(
    spaces: Vec<SpaceView>,
    current: String,
    save: ServerAction<SaveEventType>,
) -> impl IntoView {
    let pending = save.pending();
    let form = NodeRef::new();
    reset_on_success(save, form);
    let options: Vec<(String, String)> = spaces.into_iter().map(|s| (s.id, s.name)).collect();
    view! {
        <details class="card create">
            <summary>"New event type"</summary>
            <ActionForm action=save node_ref=form>
                <div class="form-grid">
                    <label>"Space" <select name="space" required>{select_options(options, &current)}</select></label>
                    <label>"Name" <input type="text" name="name" required maxlength="100" pattern="[A-Za-z0-9._:\\-]{1,100}" placeholder="order.created"/></label>
                    <CatalogFields t=CatalogEntry::default()/>
                </div>
                <button type="submit" data-testid="create-event-type" disabled=move || pending.get()>
                    {move || if pending.get() { "Adding…" } else { "Add event type" }}
                </button>
            </ActionForm>
        </details>
    }
}

/// The catalog's names as suggestions for the event-types input of a destination form
/// (`list=CATALOG_DATALIST`), and shown beneath it with deprecated types marked. Free
/// names and wildcards (`order.*`) stay allowed.
#[component]
pub fn CatalogDatalist(
    /// The space whose catalog to offer; empty for every space's.
    space: String,
) -> impl IntoView {
    let catalog = Resource::new(move || space.clone(), list_event_types);
    view! {
        <Transition fallback=|| ()>
            {move || Suspend::new(async move {
                let mut list = catalog.await.unwrap_or_default();
                list.dedup_by(|a, b| a.name == b.name);
                let options = list.iter().map(|t| {
                    let label = if t.deprecated { format!("{} (deprecated)", t.description) } else { t.description.clone() };
                    view! { <option value=t.name.clone() label=label/> }
                }).collect_view();
                let shown = (!list.is_empty()).then(|| view! {
                    <p class="small muted" data-testid="catalog-hint">
                        "From the catalog: "
                        {list.iter().enumerate().map(|(i, t)| view! {
                            {(i > 0).then_some(", ")}
                            <code>{t.name.clone()}</code>
                            {t.deprecated.then(|| view! { <span class="tag">"deprecated"</span> })}
                        }).collect_view()}
                        " — or a wildcard such as " <code>"order.*"</code> "."
                    </p>
                });
                view! { <datalist id=CATALOG_DATALIST>{options}</datalist> {shown} }
            })}
        </Transition>
    }
}
