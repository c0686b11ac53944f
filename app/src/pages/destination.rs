//! One destination: its settings and state, the signing secret (admins), Re-enable,
//! Disable, rotate the secret, Send again all failed, a test event, and links to its
//! deliveries and (admins) to its settings.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_params_map;

use crate::api::{get_destination, RotateSecret, SendTestEvent, SetDestinationStatus};
use crate::components::{console, fmt_time, is_admin, load_error, use_mutation, StatusBadge};
use crate::types::DestinationDetail;

#[component]
pub fn DestinationPage() -> impl IntoView {
    let ctx = console();
    let params = use_params_map();
    let id = Memo::new(move |_| params.read().get("id").unwrap_or_default());
    let data = Resource::new(
        move || (id.get(), ctx.refresh.get()),
        |(id, _)| get_destination(id),
    );
    let set_status = use_mutation::<SetDestinationStatus>();
    let rotate = use_mutation::<RotateSecret>();
    let test = use_mutation::<SendTestEvent>();

    view! {
        <Title text="Destination · PartyFlow Hooks"/>
        <p class="crumbs"><a href="/destinations">"← Destinations"</a></p>
        <Transition fallback=|| view! { <p class="muted">"Loading…"</p> }>
            {move || Suspend::new(async move {
                let admin = is_admin(&Some(ctx.me.await));
                match data.await {
                    Ok(d) => detail_view(d, admin, Actions { set_status, rotate, test }).into_any(),
                    Err(e) => load_error(e),
                }
            })}
        </Transition>
    }
}

#[derive(Clone, Copy)]
struct Actions {
    set_status: ServerAction<SetDestinationStatus>,
    rotate: ServerAction<RotateSecret>,
    test: ServerAction<SendTestEvent>,
}

fn detail_view(d: DestinationDetail, admin: bool, a: Actions) -> impl IntoView {
    let Actions {
        set_status,
        rotate,
        test,
    } = a;
    let v = d.view.clone();
    let inactive = v.status == "inactive";
    let busy = move || set_status.pending().get() || rotate.pending().get() || test.pending().get();
    let deliveries = format!("/deliveries?space={}&destination={}", v.space_id, v.id);
    let (id1, id2, id3, id4) = (v.id.clone(), v.id.clone(), v.id.clone(), v.id.clone());
    let (id5, edit) = (v.id.clone(), format!("/destinations/{}/edit", v.id));
    let failed = format!("{deliveries}&status=failed");
    view! {
        <Title text=format!("{} · Destination · PartyFlow Hooks", v.name)/>
        <div class="page-head">
            <div>
                <h1 class="url-title" data-testid="destination-name">{v.name.clone()}</h1>
                <p class="small muted mono url-under-title">{v.url.clone()}</p>
            </div>
            <div class="head-badges"><StatusBadge status=v.status.clone()/></div>
        </div>
        {v.disabled_reason.clone().map(|r| view! {
            <p class="notice warn">
                "Inactive: " {r} ". New events are not delivered (" {v.skipped_events} " skipped so far); "
                {v.paused} " waiting deliveries are paused and resume on re-enable."
            </p>
        })}
        <div class="actions">
            {(admin && inactive).then(move || view! {
                <ActionForm action=set_status>
                    <input type="hidden" name="id" value=id1/>
                    <input type="hidden" name="status" value="active"/>
                    <button type="submit" data-testid="reenable" disabled=busy>
                        {format!("Re-enable ({} paused deliveries resume)", v.paused)}
                    </button>
                </ActionForm>
            })}
            {(v.failed_unresent > 0 && !inactive).then(move || view! {
                <a class="button secondary" href=format!("/destinations/{id2}/resend-failed") data-testid="resend-failed">
                    {format!("Send again all failed ({})…", v.failed_unresent)}
                </a>
            })}
            {admin.then(move || view! {
                <a class="button" href=edit data-testid="edit-settings">"Edit settings"</a>
            })}
            {(admin && !inactive).then(move || view! {
                <ActionForm action=test>
                    <input type="hidden" name="id" value=id5/>
                    <button type="submit" class="secondary" data-testid="send-test" disabled=busy
                        title="Publishes a partyflow.test event delivered to this destination only">
                        "Send test event"
                    </button>
                </ActionForm>
            })}
            {admin.then(move || view! {
                <ActionForm action=rotate>
                    <input type="hidden" name="id" value=id3/>
                    <button type="submit" class="secondary" disabled=busy>"Rotate secret"</button>
                </ActionForm>
            })}
            {(admin && !inactive).then(move || view! {
                <ActionForm action=set_status>
                    <input type="hidden" name="id" value=id4/>
                    <input type="hidden" name="status" value="inactive"/>
                    <button type="submit" class="danger" disabled=busy>"Disable"</button>
                </ActionForm>
            })}
            <a class="button secondary" href=deliveries.clone()>"Deliveries"</a>
            <a class="button secondary" href=failed>"Failed deliveries"</a>
        </div>
        <section class="card">
            <dl class="facts">
                <dt>"ID"</dt><dd class="mono">{v.id.clone()}</dd>
                <dt>"Space"</dt><dd>{v.space_name.clone()}</dd>
                <dt>"Description"</dt><dd>{if v.description.is_empty() { "—".to_owned() } else { v.description.clone() }}</dd>
                <dt>"Event types"</dt>
                <dd>{v.event_types.clone().map(|t| t.join(", ")).unwrap_or_else(|| "every type".into())}</dd>
                <dt>"Dead-letters in a row"</dt><dd>{v.consecutive_dead_letters}</dd>
                <dt>"Skipped events"</dt><dd>{v.skipped_events}</dd>
                <dt>"Paused deliveries"</dt><dd>{v.paused}</dd>
                <dt>"Failed, not sent again"</dt><dd>{v.failed_unresent}</dd>
                <dt>"Rate limit"</dt><dd>{v.rate_limit.clone().unwrap_or_else(|| "none (only the plan's shared limit)".into())}</dd>
                <dt>"Retry policy"</dt><dd>{v.policy.clone()}</dd>
                <dt>"Attempts"</dt><dd>{v.max_attempts}</dd>
                <dt>"Timeout"</dt><dd>{v.timeout_seconds} " s"</dd>
                <dt>"Transformation"</dt><dd>{if v.has_transformation { "yes (jq)" } else { "none" }}</dd>
                <dt>"Order"</dt><dd data-testid="ordering">{if v.ordering == "fifo" { "in order (FIFO): one at a time" } else { "none: side by side" }}</dd>
                <dt>"Headers"</dt>
                <dd data-testid="custom-headers">
                    {if v.headers.is_empty() {
                        view! { "none of its own" }.into_any()
                    } else {
                        view! {
                            <ul class="header-list mono">
                                {v.headers.clone().into_iter().map(|(name, value)| view! {
                                    <li>{name} ": " {value}</li>
                                }).collect_view()}
                            </ul>
                        }.into_any()
                    }}
                </dd>
                <dt>"Created"</dt><dd>{fmt_time(v.created_at)} " UTC"</dd>
                <dt>"Filter"</dt>
                <dd class="mono" data-testid="filter">{v.filter.clone().unwrap_or_else(|| "none".into())}</dd>
                <dt>"Filtered events"</dt><dd data-testid="filtered-events">{v.filtered_events}</dd>
            </dl>
        </section>
        {d.secret.clone().map(|secret| view! {
            <section class="card">
                <h2>"Signing secret"</h2>
                <details>
                    <summary>"Show the secret"</summary>
                    <code class="secret">{secret}</code>
                </details>
                {d.previous_secret_expires_at.map(|t| view! {
                    <p class="small muted">"The previous secret also signs until " {fmt_time(t)} " UTC."</p>
                })}
            </section>
        })}
    }
}
