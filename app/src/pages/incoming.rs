//! Incoming webhooks across spaces: status, failures in a row, the plan's rate
//! limit; Re-enable a disabled one, disable, and create one (its URL and token are
//! shown once). Changes are for admins.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

use crate::api::{list_incoming_page, list_spaces, CreateIncomingWebhook, SetIncomingStatus};
use crate::components::{
    console, fmt_time, is_admin, load_error, refusal, reset_on_success, select_options,
    use_mutation, use_typed, FieldError, StatusBadge, Typed,
};
use crate::types::{Choice, IncomingWebhookView};

#[component]
pub fn IncomingPage() -> impl IntoView {
    let ctx = console();
    let query = use_query_map();
    // A page at a time, with a search by name (issue 16 item 6).
    let list = Memo::new(move |_| super::search::list_query(&query.read()));
    let data = Resource::new(
        move || (list.get(), ctx.refresh.get()),
        |(q, _)| list_incoming_page(q),
    );
    let spaces = Resource::new(|| (), |_| list_spaces());
    let set_status = use_mutation::<SetIncomingStatus>();
    let create = use_mutation::<CreateIncomingWebhook>();
    let typed = use_typed::<CreateIncomingWebhook>();

    view! {
        <Title text="Incoming webhooks · PartyFlow Hooks"/>
        <div class="page-head"><h1>"Incoming webhooks"</h1></div>
        <Transition fallback=|| view! { <p class="muted">"Loading…"</p> }>
            {move || Suspend::new(async move {
                let admin = is_admin(&Some(ctx.me.await));
                let spaces = spaces.await.unwrap_or_default();
                let typed = typed.await;
                match data.await {
                    Ok(page) => view! {
                        <super::search::ListSearch action="/incoming-webhooks" spaces=spaces query=list.get_untracked()
                            placeholder="Part of a name"/>
                        {page.hooks.filter_error.map(|e| view! { <p class="notice error" role="alert">{e}</p> })}
                        <HookTable hooks=page.hooks.rows admin=admin set_status=set_status/>
                        <super::search::Pager action="/incoming-webhooks" query=list.get_untracked() next_cursor=page.hooks.next_cursor/>
                        {admin.then(|| view! { <CreateForm channels=page.channels create=create typed=typed/> })}
                    }.into_any(),
                    Err(e) => load_error(e),
                }
            })}
        </Transition>
    }
}

#[component]
fn HookTable(
    hooks: Vec<IncomingWebhookView>,
    admin: bool,
    set_status: ServerAction<SetIncomingStatus>,
) -> impl IntoView {
    if hooks.is_empty() {
        return view! { <p class="empty">"No incoming webhooks yet."</p> }.into_any();
    }
    let pending = set_status.pending();
    view! {
        <div class="table-wrap">
            <table class="grid" data-testid="incoming">
                <thead>
                    <tr>
                        <th scope="col">"Name"</th>
                        <th scope="col">"Space"</th>
                        <th scope="col">"Channel"</th>
                        <th scope="col">"Status"</th>
                        <th scope="col" class="num" title="Failed requests in a row">"Failures in a row"</th>
                        <th scope="col">"Rate limit (plan)"</th>
                        <th scope="col">"Signed"</th>
                        <th scope="col">"Created (UTC)"</th>
                        <th scope="col">"Actions"</th>
                    </tr>
                </thead>
                <tbody>
                    {hooks.into_iter().map(|h| {
                        let disabled = h.status == "disabled";
                        let hook_id = h.id.clone();
                        view! {
                            <tr id=h.id.clone() data-hook=h.id.clone() data-status=h.status.clone()>
                                <td>{h.name.clone()} <div class="small muted mono">{h.id.clone()}</div></td>
                                <td>{h.space_name.clone()}</td>
                                <td>"#" {h.channel_name.clone()}</td>
                                <td>
                                    <StatusBadge status=h.status.clone()/>
                                    {h.disabled_at.map(|t| view! { <div class="small muted">"since " {fmt_time(t)}</div> })}
                                </td>
                                <td class="num">{h.consecutive_failures}</td>
                                <td>{h.rate_per_second} " messages/s"</td>
                                <td>{if h.signed { "yes" } else { "no" }}</td>
                                <td class="nowrap">{fmt_time(h.created_at)}</td>
                                <td class="row-actions">
                                    {admin.then(move || view! {
                                        <ActionForm action=set_status>
                                            <input type="hidden" name="id" value=hook_id/>
                                            <input type="hidden" name="status" value=if disabled { "active" } else { "disabled" }/>
                                            {if disabled {
                                                view! { <button type="submit" data-testid="reenable-hook" disabled=move || pending.get()>"Re-enable"</button> }.into_any()
                                            } else {
                                                view! { <button type="submit" class="link danger-text" disabled=move || pending.get()>"Disable"</button> }.into_any()
                                            }}
                                        </ActionForm>
                                    })}
                                </td>
                            </tr>
                        }
                    }).collect_view()}
                </tbody>
            </table>
        </div>
    }
    .into_any()
}

#[component]
fn CreateForm(
    channels: Vec<Choice>,
    create: ServerAction<CreateIncomingWebhook>,
    /// What was typed when the form was refused without JavaScript.
    typed: Option<Typed>,
) -> impl IntoView {
    let pending = create.pending();
    let error = refusal(create);
    let form = NodeRef::new();
    reset_on_success(create, form);
    if channels.is_empty() {
        return view! { <p class="muted">"Create a channel in a space first (Spaces & keys) to add an incoming webhook."</p> }.into_any();
    }
    let options: Vec<(String, String)> = channels.into_iter().map(|c| (c.value, c.label)).collect();
    let open = typed.is_some();
    let channel = Typed::or(&typed, "channel", String::new());
    let name = Typed::or(&typed, "name", String::new());
    view! {
        <details class="card create" open=open>
            <summary>"New incoming webhook"</summary>
            <ActionForm action=create node_ref=form>
                <div class="form-grid">
                    <label>"Channel" <select name="channel" required>{select_options(options, &channel)}</select></label>
                    <label class="wide">"Name" <input type="text" name="name" value=name required maxlength="100"/></label>
                    <FieldError error label="Name"/>
                </div>
                <button type="submit" disabled=move || pending.get()>
                    {move || if pending.get() { "Creating…" } else { "Create incoming webhook" }}
                </button>
            </ActionForm>
        </details>
    }
    .into_any()
}
