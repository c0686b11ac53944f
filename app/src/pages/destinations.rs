//! Outgoing destinations across spaces: status, dead-letter streak, skipped events,
//! limits and policy; Re-enable (saying how many paused deliveries resume), Send again
//! all failed, Disable, and a form for a new one. Changes are for admins; support
//! staff may send failed deliveries again.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

use super::destination_edit::SettingsFields;
use crate::api::{list_destination_page, list_spaces, CreateDestination, SetDestinationStatus};
use crate::components::{
    console, is_admin, load_error, refusal, reset_on_success, select_options, use_mutation,
    use_typed, StatusBadge, Typed,
};
use crate::types::{DestinationForm, DestinationView, SpaceView};

#[component]
pub fn DestinationsPage() -> impl IntoView {
    let ctx = console();
    let query = use_query_map();
    // A page at a time, with a search (issue 16 item 6): thousands of destinations
    // are pages of 50, not one table.
    let list = Memo::new(move |_| super::search::list_query(&query.read()));
    let space = Memo::new(move |_| list.read().space.clone());
    let data = Resource::new(
        move || (list.get(), ctx.refresh.get()),
        |(q, _)| list_destination_page(q),
    );
    let spaces = Resource::new(move || ctx.refresh.get(), |_| list_spaces());
    let set_status = use_mutation::<SetDestinationStatus>();
    let create = use_mutation::<CreateDestination>();
    let typed = use_typed::<CreateDestination>();

    view! {
        <Title text="Destinations · PartyFlow Hooks"/>
        <div class="page-head"><h1>"Destinations"</h1></div>
        <Transition fallback=|| view! { <p class="muted">"Loading…"</p> }>
            {move || Suspend::new(async move {
                let me = ctx.me.await;
                let admin = is_admin(&Some(me));
                let spaces = spaces.await.unwrap_or_default();
                let typed = typed.await;
                match data.await {
                    Ok(page) => view! {
                        <super::search::ListSearch action="/destinations" spaces=spaces.clone() query=list.get_untracked()
                            placeholder="Part of a name, URL or description"/>
                        {page.filter_error.map(|e| view! { <p class="notice error" role="alert">{e}</p> })}
                        <DestinationTable list=page.rows admin=admin set_status=set_status/>
                        <super::search::Pager action="/destinations" query=list.get_untracked() next_cursor=page.next_cursor/>
                        {admin.then(|| view! { <CreateForm spaces=spaces current=space.get_untracked() create=create typed=typed/> })}
                    }.into_any(),
                    Err(e) => load_error(e),
                }
            })}
        </Transition>
    }
}

#[component]
pub fn DestinationTable(
    list: Vec<DestinationView>,
    admin: bool,
    set_status: ServerAction<SetDestinationStatus>,
) -> impl IntoView {
    if list.is_empty() {
        return view! { <p class="empty">"No destinations yet."</p> }.into_any();
    }
    view! {
        <div class="table-wrap">
            <table class="grid" data-testid="destinations">
                <thead>
                    <tr>
                        <th scope="col">"Destination"</th>
                        <th scope="col">"Space"</th>
                        <th scope="col">"Status"</th>
                        <th scope="col" class="num" title="Dead-lettered deliveries in a row">"Dead-letters"</th>
                        <th scope="col" class="num" title="Events not delivered while inactive">"Skipped"</th>
                        <th scope="col" class="num" title="Waiting deliveries held while inactive">"Paused"</th>
                        <th scope="col">"Rate limit"</th>
                        <th scope="col">"Policy"</th>
                        <th scope="col">"Actions"</th>
                    </tr>
                </thead>
                <tbody>
                    {list.into_iter().map(|d| view! { <DestinationRow d=d admin=admin set_status=set_status/> }).collect_view()}
                </tbody>
            </table>
        </div>
    }
    .into_any()
}

#[component]
fn DestinationRow(
    d: DestinationView,
    admin: bool,
    set_status: ServerAction<SetDestinationStatus>,
) -> impl IntoView {
    let inactive = d.status == "inactive";
    let pending_status = set_status.pending();
    let (id1, id2, id3) = (d.id.clone(), d.id.clone(), d.id.clone());
    let paused = d.paused;
    let failed_unresent = d.failed_unresent;
    view! {
        <tr id=d.id.clone() data-destination=d.id.clone() data-status=d.status.clone()>
            <td class="url" title=d.url.clone()>
                <a href=format!("/destinations/{}", d.id) class="dest-name">{d.name.clone()}</a>
                <div class="small muted mono">{d.url.clone()}</div>
                {(!d.description.is_empty()).then(|| view! { <div class="small muted">{d.description.clone()}</div> })}
            </td>
            <td>{d.space_name.clone()}</td>
            <td>
                <StatusBadge status=d.status.clone()/>
                {d.disabled_reason.clone().map(|r| view! { <div class="small muted">{r}</div> })}
            </td>
            <td class="num">{d.consecutive_dead_letters}</td>
            <td class="num">{d.skipped_events}</td>
            <td class="num" data-testid="paused">{d.paused}</td>
            <td>{d.rate_limit.clone().unwrap_or_else(|| "plan only".into())}</td>
            <td class="small">{d.policy.clone()} <br/> {format!("{} attempt{}, {} s timeout", d.max_attempts, if d.max_attempts == 1 { "" } else { "s" }, d.timeout_seconds)}</td>
            <td class="row-actions">
                {(admin && inactive).then(move || view! {
                    <ActionForm action=set_status>
                        <input type="hidden" name="id" value=id1/>
                        <input type="hidden" name="status" value="active"/>
                        <button type="submit" data-testid="reenable" disabled=move || pending_status.get()>
                            {format!("Re-enable ({paused} paused resume)")}
                        </button>
                    </ActionForm>
                })}
                {(failed_unresent > 0 && !inactive).then(move || view! {
                    <a class="button secondary" href=format!("/destinations/{id2}/resend-failed") data-testid="resend-failed">
                        {format!("Send again all failed ({failed_unresent})…")}
                    </a>
                })}
                {(admin && !inactive).then(move || view! {
                    <ActionForm action=set_status>
                        <input type="hidden" name="id" value=id3/>
                        <input type="hidden" name="status" value="inactive"/>
                        <button type="submit" class="link danger-text" disabled=move || pending_status.get()>"Disable"</button>
                    </ActionForm>
                })}
            </td>
        </tr>
    }
}

#[component]
fn CreateForm(
    spaces: Vec<SpaceView>,
    current: String,
    create: ServerAction<CreateDestination>,
    /// What was typed when the form was refused without JavaScript.
    typed: Option<Typed>,
) -> impl IntoView {
    let pending = create.pending();
    let error = refusal(create);
    let form = NodeRef::new();
    reset_on_success(create, form);
    let options: Vec<(String, String)> = spaces.into_iter().map(|s| (s.id, s.name)).collect();
    // A refused form opens again with what was typed.
    let open = typed.is_some();
    let current = Typed::or(&typed, "space", current);
    let defaults = typed
        .and_then(|t| t.fill::<DestinationForm>())
        .unwrap_or_else(|| DestinationForm {
            timeout_seconds: "30".into(),
            ..Default::default()
        });
    view! {
        <details class="card create" open=open>
            <summary>"New destination"</summary>
            <ActionForm action=create node_ref=form>
                <div class="form-grid">
                    <label>"Space" <select name="space" required>{select_options(options, &current)}</select></label>
                </div>
                <SettingsFields f=defaults error/>
                <button type="submit" disabled=move || pending.get()>
                    {move || if pending.get() { "Creating…" } else { "Create destination" }}
                </button>
            </ActionForm>
        </details>
    }
}
