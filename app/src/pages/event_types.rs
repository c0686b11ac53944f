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
    console, fmt_time, is_admin, load_error, refusal, reset_on_success, select_options,
    use_mutation, use_typed, FieldError, Typed,
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
    // A refused form (without JavaScript) comes back with what was typed: a row's edit
    // (posted with `existing`) or the new type's.
    let typed = use_typed::<SaveEventType>();

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
                let typed = typed.await;
                let typed_new = typed.clone().filter(|t| t.get("existing").is_none());
                match data.await {
                    Ok(page) => view! {
                        <super::search::ListSearch action="/event-types" spaces=spaces.clone() query=list.get_untracked()
                            placeholder="Part of a name or description"/>
                        {page.filter_error.map(|e| view! { <p class="notice error" role="alert">{e}</p> })}
                        <CatalogTable list=page.rows admin=admin save=save typed=typed/>
                        <super::search::Pager action="/event-types" query=list.get_untracked() next_cursor=page.next_cursor/>
                        {admin.then(|| view! { <CreateForm spaces=spaces current=space.get_untracked() save=save typed=typed_new/> })}
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
    /// What was typed into a refused form of the page.
    typed: Option<Typed>,
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
                    {list.into_iter().map(|t| {
                        // The row's own edit, if it was the one refused.
                        let typed = Typed::of_form(&typed, "name", &t.name)
                            .filter(|f| f.get("existing").is_some() && f.get("space") == Some(t.space_id.as_str()));
                        view! { <CatalogRow t=t admin=admin save=save typed=typed/> }
                    }).collect_view()}
                </tbody>
            </table>
        </div>
    }
    .into_any()
}

#[component]
fn CatalogRow(
    t: CatalogEntry,
    admin: bool,
    save: ServerAction<SaveEventType>,
    typed: Option<Typed>,
) -> impl IntoView {
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
        view! { <td class="row-actions"><EditForm t=t save=save typed=typed/></td> }
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

/// The fields every catalog form has, filled from what was typed into the refused
/// form, else from `t`; `error` (the refusal) beside the field it names.
#[component]
fn CatalogFields(
    t: CatalogEntry,
    typed: Option<Typed>,
    error: Signal<Option<String>>,
) -> impl IntoView {
    let description = Typed::or(&typed, "description", t.description);
    let schema = Typed::or(&typed, "schema", t.schema);
    let example = Typed::or(&typed, "example", t.example);
    let deprecated = Typed::checked(&typed, "deprecated", t.deprecated);
    view! {
        <label class="wide">"Description" <input type="text" name="description" maxlength="1000" value=description/></label>
        <FieldError error label="Description"/>
        <label class="wide">"JSON Schema (draft 2020-12; empty for none)"
            <textarea name="schema" rows="6" spellcheck="false" class="mono" placeholder=r#"{"type": "object", "required": ["id"]}"#>{schema}</textarea>
        </label>
        <FieldError error label="Schema"/>
        <label class="wide">"Example payload (must match the schema; empty for none)"
            <textarea name="example" rows="4" spellcheck="false" class="mono" placeholder=r#"{"id": 42}"#>{example}</textarea>
        </label>
        <FieldError error label="Example"/>
        <label class="check"><input type="checkbox" name="deprecated" value="on" checked=deprecated/> " Deprecated"</label>
    }
}

#[component]
fn EditForm(
    t: CatalogEntry,
    save: ServerAction<SaveEventType>,
    typed: Option<Typed>,
) -> impl IntoView {
    let pending = save.pending();
    let (space, name) = (t.space_id.clone(), t.name.clone());
    // The refusal beside the field only in the row that was refused (without JavaScript;
    // with it, the message is at the top and the form keeps what was typed).
    let open = typed.is_some();
    let refused = refusal(save);
    let error = Signal::derive(move || refused.get().filter(|_| open));
    view! {
        <details class="edit" open=open>
            <summary>"Edit"</summary>
            <ActionForm action=save>
                <input type="hidden" name="space" value=space/>
                <input type="hidden" name="name" value=name/>
                <input type="hidden" name="existing" value="on"/>
                <div class="form-grid"><CatalogFields t=t typed=typed error/></div>
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
    /// What was typed when the new type was refused without JavaScript.
    typed: Option<Typed>,
) -> impl IntoView {
    let pending = save.pending();
    let error = refusal(save);
    let form = NodeRef::new();
    reset_on_success(save, form);
    let options: Vec<(String, String)> = spaces.into_iter().map(|s| (s.id, s.name)).collect();
    let open = typed.is_some();
    let current = Typed::or(&typed, "space", current);
    let name = Typed::or(&typed, "name", String::new());
    view! {
        <details class="card create" open=open>
            <summary>"New event type"</summary>
            <ActionForm action=save node_ref=form>
                <div class="form-grid">
                    <label>"Space" <select name="space" required>{select_options(options, &current)}</select></label>
                    <label>"Name" <input type="text" name="name" value=name required maxlength="100" pattern="[A-Za-z0-9._:\\-]{1,100}" placeholder="order.created"/></label>
                    <FieldError error label="Event type"/>
                    <CatalogFields t=CatalogEntry::default() typed=typed error/>
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
