//! One delivery: its event, its attempts as a timeline (time, duration, status code,
//! error class, request and response headers and bodies, next attempt) and the
//! Send again / Cancel buttons. Payloads and bodies are attacker-controlled: they are
//! only ever shown as text.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_params_map;

use crate::api::{get_delivery, CancelDelivery, ResendDelivery};
use crate::components::{
    console, fmt_duration, fmt_time, load_error, use_mutation, ErrorClassBadge, StatusBadge,
};
use crate::types::{AttemptView, DeliveryDetail};

#[component]
pub fn DeliveryPage() -> impl IntoView {
    let ctx = console();
    let params = use_params_map();
    let id = Memo::new(move |_| params.read().get("id").unwrap_or_default());
    let data = Resource::new(
        move || (id.get(), ctx.refresh.get()),
        |(id, _)| get_delivery(id),
    );
    // Live (issue 16 item 5): a new attempt shows when it happens.
    let live = super::live::latest(move || get_delivery(id.get_untracked()));
    Effect::watch(
        move || (id.get(), ctx.refresh.get()),
        move |_, _, _| live.set(None),
        false,
    );
    let resend = use_mutation::<ResendDelivery>();
    let cancel = use_mutation::<CancelDelivery>();

    view! {
        <Title text="Delivery · PartyFlow Hooks"/>
        <p class="crumbs"><a href="/deliveries">"← Deliveries"</a></p>
        <Transition fallback=|| view! { <p class="muted">"Loading…"</p> }>
            {move || Suspend::new(async move {
                match data.await {
                    Ok(d) => (move || {
                        let shown = live.get().filter(|l| l.row.id == d.row.id).unwrap_or_else(|| d.clone());
                        detail_view(shown, resend, cancel)
                    }).into_any(),
                    Err(e) => load_error(e),
                }
            })}
        </Transition>
    }
}

fn detail_view(
    d: DeliveryDetail,
    resend: ServerAction<ResendDelivery>,
    cancel: ServerAction<CancelDelivery>,
) -> impl IntoView {
    let r = d.row.clone();
    let waiting = matches!(r.status.as_str(), "pending" | "retrying");
    let finished = matches!(r.status.as_str(), "succeeded" | "failed" | "cancelled");
    let resend_pending = resend.pending();
    let cancel_pending = cancel.pending();
    let id = r.id.clone();
    let next = r.next_attempt_at.filter(|_| waiting);
    view! {
        <div class="page-head">
            <h1>"Delivery " <span class="mono">{r.id.clone()}</span></h1>
            <div class="head-badges">
                <StatusBadge status=r.status.clone() paused=r.paused/>
                {r.last_error_class.clone().map(|c| view! { <ErrorClassBadge class=c code=r.last_status_code/> })}
            </div>
        </div>
        <div class="actions">
            {finished.then(|| {
                let id = id.clone();
                view! {
                    <ActionForm action=resend>
                        <input type="hidden" name="id" value=id/>
                        <button type="submit" data-testid="resend-one" disabled=move || resend_pending.get()>
                            {move || if resend_pending.get() { "Sending again…" } else { "Send again" }}
                        </button>
                    </ActionForm>
                }
            })}
            {waiting.then(|| {
                let id = id.clone();
                view! {
                    <ActionForm action=cancel>
                        <input type="hidden" name="id" value=id/>
                        <button type="submit" class="danger" data-testid="cancel-one" disabled=move || cancel_pending.get()>
                            {move || if cancel_pending.get() { "Cancelling…" } else { "Cancel delivery" }}
                        </button>
                    </ActionForm>
                }
            })}
        </div>
        <section class="card">
            <dl class="facts">
                <dt>"Space"</dt><dd>{r.space_name.clone()}</dd>
                <dt>"Destination"</dt>
                <dd>
                    <a href=format!("/destinations/{}", r.destination_id)>{r.destination_name.clone()}</a>
                    " " <span class="small muted mono">{r.destination_url.clone()}</span>
                    " " <StatusBadge status=d.destination_status.clone()/>
                </dd>
                <dt>"Event type"</dt><dd>{r.event_type.clone()}</dd>
                <dt>"webhook-id"</dt><dd class="mono">{d.webhook_id.clone()}</dd>
                <dt>"Attempts"</dt><dd>{r.attempts}</dd>
                <dt>"Created"</dt><dd>{fmt_time(r.created_at)} " UTC"</dd>
                <dt>"Next attempt"</dt>
                <dd data-testid="next-attempt">
                    {match next {
                        Some(t) if r.paused => format!("paused (was due {} UTC); resumes when the destination is re-enabled", fmt_time(t)),
                        Some(t) => format!("{} UTC", fmt_time(t)),
                        None => "—".to_owned(),
                    }}
                </dd>
                <dt>"Finished"</dt><dd>{d.finished_at.map(|t| format!("{} UTC", fmt_time(t))).unwrap_or_else(|| "—".into())}</dd>
                {d.deliver_at.map(|t| view! {
                    <dt>"Scheduled for"</dt>
                    <dd data-testid="scheduled-for">
                        {format!("{} UTC", fmt_time(t))}
                        {(r.status == "pending").then_some(" (not sent before; it can be cancelled until then)")}
                    </dd>
                })}
                {r.resent_from.clone().map(|f| view! {
                    <dt>"Resend of"</dt><dd><a class="mono" href=format!("/deliveries/{f}")>{f.clone()}</a></dd>
                })}
                {r.resent_as.clone().map(|a| view! {
                    <dt>"Sent again as"</dt><dd><a class="mono" href=format!("/deliveries/{a}") data-testid="resent-as">{a.clone()}</a></dd>
                })}
            </dl>
        </section>
        <section class="card">
            <h2>"Attempts"</h2>
            {if d.attempts.is_empty() {
                view! { <p class="muted">"No attempt yet."</p> }.into_any()
            } else {
                view! {
                    <ol class="timeline" data-testid="attempts">
                        {d.attempts.into_iter().map(attempt_view).collect_view()}
                    </ol>
                }.into_any()
            }}
            {next.map(|t| view! {
                <p class="next">
                    {if r.paused { "Paused: the destination is inactive. Was due at " } else { "Next attempt at " }}
                    {fmt_time(t)} " UTC"
                </p>
            })}
        </section>
        <section class="card">
            <h2>"Payload"</h2>
            <pre class="code" data-testid="payload">{d.payload.clone()}</pre>
        </section>
    }
}

fn attempt_view(a: AttemptView) -> impl IntoView {
    let ok = a.response_status.is_some_and(|s| (200..300).contains(&s)) && a.error_class.is_none();
    view! {
        <li class=if ok { "attempt ok" } else { "attempt failed" } data-testid="attempt">
            <div class="attempt-head">
                <strong>"#" {a.number}</strong>
                <span>{fmt_time(a.started_at)} " UTC"</span>
                <span class="muted">{fmt_duration(a.duration_ms)}</span>
                <span>{a.response_status.map(|s| format!("HTTP {s}")).unwrap_or_else(|| "no answer".into())}</span>
                {a.error_class.clone().map(|c| view! { <ErrorClassBadge class=c code=a.response_status/> })}
            </div>
            {a.error_message.clone().map(|m| view! { <p class="small error-text">{m}</p> })}
            <details>
                <summary>"Request"</summary>
                <p class="small mono">"POST " {a.request_url.clone()}</p>
                <Headers headers=a.request_headers.clone()/>
                <pre class="code">{a.request_body.clone()}</pre>
            </details>
            <details>
                <summary>"Response"</summary>
                {if a.response_status.is_none() {
                    view! { <p class="muted small">"No response."</p> }.into_any()
                } else {
                    view! {
                        <Headers headers=a.response_headers.clone()/>
                        <pre class="code">{a.response_body.clone().unwrap_or_default()}</pre>
                    }.into_any()
                }}
            </details>
        </li>
    }
}

#[component]
fn Headers(headers: Vec<(String, String)>) -> impl IntoView {
    view! {
        <table class="headers">
            <tbody>
                {headers.into_iter().map(|(k, v)| view! { <tr><th scope="row">{k}</th><td>{v}</td></tr> }).collect_view()}
            </tbody>
        </table>
    }
}
