//! "Send again all failed" of one destination: choose a window (when the deliveries
//! were created, their event type, their error class), see how many failed deliveries
//! it holds, then confirm. The window is a GET form, so the count is a page of its own
//! without JavaScript; the confirmation posts the same window.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::components::Form;
use leptos_router::hooks::{use_params_map, use_query_map};

use crate::api::{preview_resend_failed, ResendFailed};
use crate::components::{
    console, error_class_info, load_error, select_options, use_mutation, ERROR_CLASSES,
};
use crate::types::{DeliveryQuery, ResendFailedPreview};

#[component]
pub fn ResendFailedPage() -> impl IntoView {
    let ctx = console();
    let params = use_params_map();
    let query = use_query_map();
    let id = Memo::new(move |_| params.read().get("id").unwrap_or_default());
    let window = Memo::new(move |_| {
        let m = query.read();
        let get = |k: &str| m.get(k).unwrap_or_default().trim().to_owned();
        DeliveryQuery {
            error_class: get("error_class"),
            event_type: get("event_type"),
            last: get("last"),
            since: get("since"),
            until: get("until"),
            ..DeliveryQuery::default()
        }
    });
    let preview = Resource::new(
        move || (id.get(), window.get(), ctx.refresh.get()),
        |(id, w, _)| preview_resend_failed(id, w),
    );
    let action = use_mutation::<ResendFailed>();

    view! {
        <Title text="Send again failed deliveries · PartyFlow Hooks"/>
        <p class="crumbs"><a href=move || format!("/destinations/{}", id.get())>"← Destination"</a></p>
        <div class="page-head"><h1>"Send again failed deliveries"</h1></div>
        <Transition fallback=|| view! { <p class="muted">"Counting…"</p> }>
            {move || Suspend::new(async move {
                let w = window.get_untracked();
                match preview.await {
                    Ok(p) => view! {
                        <WindowForm id=id.get_untracked() w=w.clone()/>
                        <Confirm p=p w=w action=action/>
                    }.into_any(),
                    Err(e) => view! {
                        <WindowForm id=id.get_untracked() w=w/>
                        {load_error(e)}
                    }.into_any(),
                }
            })}
        </Transition>
    }
}

/// The window, as a GET form back to this page: submitting it counts again.
#[component]
fn WindowForm(id: String, w: DeliveryQuery) -> impl IntoView {
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
    let here = format!("/destinations/{id}/resend-failed");
    view! {
        <Form action=here.clone()>
            <fieldset class="filters" data-testid="replay-window">
                <legend class="sr-only">"Which failed deliveries"</legend>
                <label>"Created" <select name="last">{select_options(ranges, &w.last)}</select></label>
                <label>"From (UTC)" <input type="datetime-local" name="since" value=w.since.clone() data-testid="replay-since"/></label>
                <label>"To (UTC)" <input type="datetime-local" name="until" value=w.until.clone() data-testid="replay-until"/></label>
                <label>"Event type" <input type="text" name="event_type" value=w.event_type.clone() placeholder="e.g. order.paid" data-testid="replay-event-type"/></label>
                <label>"Error class" <select name="error_class" data-testid="replay-error-class">{select_options(classes, &w.error_class)}</select></label>
                <div class="filter-actions">
                    <button type="submit" class="secondary" data-testid="replay-count">"Count"</button>
                    <a href=here>"Clear"</a>
                </div>
            </fieldset>
        </Form>
    }
}

/// The count, and the button that sends them (the same window, posted).
#[component]
fn Confirm(
    p: ResendFailedPreview,
    w: DeliveryQuery,
    action: ServerAction<ResendFailed>,
) -> impl IntoView {
    let n = p.count;
    let what = if n == 1 { "delivery" } else { "deliveries" };
    let within = if p.described.is_empty() {
        String::new()
    } else {
        format!(" matching {}", p.described)
    };
    let question = format!(
        "Send again {n} failed {what} of \u{201c}{}\u{201d} ({}){within}?",
        p.destination_name, p.destination_url
    );
    let pending = action.pending();
    let back = format!("/destinations/{}", p.destination_id);
    view! {
        <section class="card confirm" data-testid="replay-confirm-card">
            <p class="question" data-testid="replay-question" data-count=n.to_string()>{question}</p>
            <p class="muted">
                "Each one becomes a new delivery of the same event, sent straight away with a full set of attempts \
                 and the same webhook-id. Deliveries sent again before are not counted twice."
            </p>
            <div class="actions">
                <ActionForm action=action>
                    <input type="hidden" name="destination" value=p.destination_id.clone()/>
                    <input type="hidden" name="since" value=w.since/>
                    <input type="hidden" name="until" value=w.until/>
                    <input type="hidden" name="last" value=w.last/>
                    <input type="hidden" name="event_type" value=w.event_type/>
                    <input type="hidden" name="error_class" value=w.error_class/>
                    <button type="submit" data-testid="replay-confirm" disabled=move || pending.get() || n == 0>
                        {format!("Send again {n} {what}")}
                    </button>
                </ActionForm>
                <a href=back class="button secondary">"Back"</a>
            </div>
        </section>
    }
}
