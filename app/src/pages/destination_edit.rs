//! A destination's settings (admins only): URL, description, event types, rate
//! limit, timeout, retry policy (a preset and its overrides), transformation and
//! filter, with a "Try it" box that runs the filter and the transformation as typed
//! on a sample payload, in the server's sandbox, before anything is saved.
//! headers of its own (shown masked).
//! The server checks them by the REST API's rules and says what is wrong; a plain
//! form post works without JavaScript. [`SettingsFields`] is shared with the form
//! for a new destination.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_params_map;

use super::event_types::{CatalogDatalist, CATALOG_DATALIST};
use crate::api::{get_destination_edit, TryDestination, UpdateDestination};
use crate::components::{
    console, load_error, refusal, select_options, use_mutation, use_typed, FieldError, StatusBadge,
};
use crate::error::ConsoleError;
use crate::types::{DestinationEdit, DestinationForm, FilterVerdict, TryOutcome};

#[component]
pub fn DestinationEditPage() -> impl IntoView {
    let ctx = console();
    let params = use_params_map();
    let id = Memo::new(move |_| params.read().get("id").unwrap_or_default());
    let data = Resource::new(
        move || (id.get(), ctx.refresh.get()),
        |(id, _)| get_destination_edit(id),
    );
    let save = use_mutation::<UpdateDestination>();
    // A refused save comes back with what was typed, never the saved values.
    let typed = use_typed::<UpdateDestination>();

    view! {
        <Title text="Destination settings · PartyFlow Hooks"/>
        <p class="crumbs"><a href=move || format!("/destinations/{}", id.get())>"← The destination"</a></p>
        <Transition fallback=|| view! { <p class="muted">"Loading…"</p> }>
            {move || Suspend::new(async move {
                let typed = typed.await;
                match data.await {
                    Ok(mut e) => {
                        if let Some(f) = typed.and_then(|t| t.fill::<DestinationForm>()) {
                            e.form = DestinationForm { id: e.form.id, space: e.form.space, ..f };
                        }
                        edit_view(e, save).into_any()
                    }
                    Err(e) => load_error(e),
                }
            })}
        </Transition>
    }
}

fn edit_view(e: DestinationEdit, save: ServerAction<UpdateDestination>) -> impl IntoView {
    let pending = save.pending();
    let error = refusal(save);
    let id = e.form.id.clone();
    let back = format!("/destinations/{id}");
    view! {
        <div class="page-head">
            <h1>"Settings"</h1>
            <p class="muted">
                <span class="mono">{id.clone()}</span> " · " {e.space_name.clone()} " · "
                <StatusBadge status=e.status.clone()/>
            </p>
        </div>
        <section class="card">
            <ActionForm action=save>
                <input type="hidden" name="id" value=id/>
                <SettingsFields f=e.form error/>
                <div class="actions">
                    <button type="submit" data-testid="save-settings" disabled=move || pending.get()>
                        {move || if pending.get() { "Saving…" } else { "Save settings" }}
                    </button>
                    <a class="button secondary" href=back>"Back without saving"</a>
                    // Next to the button as well as at the top: the page may be scrolled down here.
                    {move || match save.value().get() {
                        Some(Ok(_)) => Some(view! { <p class="inline-result ok-text" role="status">"Saved."</p> }.into_any()),
                        _ => error.get().map(|e| view! {
                            <p class="inline-result error-text" role="alert" data-testid="inline-error">{format!("Not saved. {e}")}</p>
                        }.into_any()),
                    }}
                </div>
            </ActionForm>
        </section>
    }
}

/// The settings inputs of a destination form, filled from `f` (empty for defaults).
/// Field names are [`DestinationForm`]'s.
/// `error` is the form's refusal, shown beside the field it names.
#[component]
pub fn SettingsFields(
    f: DestinationForm,
    #[prop(optional)] error: Option<Signal<Option<String>>>,
) -> impl IntoView {
    let error = error.unwrap_or_else(|| Signal::derive(|| None));
    let periods = vec![
        ("second".to_owned(), "per second".to_owned()),
        ("minute".to_owned(), "per minute".to_owned()),
        ("hour".to_owned(), "per hour".to_owned()),
    ];
    let presets = vec![
        (
            "partyflow".to_owned(),
            "PartyFlow: 5 s → 1 h, ±20 % jitter, 8 attempts".to_owned(),
        ),
        (
            "standard".to_owned(),
            "Standard: 30 s → 1 h, no jitter, 6 attempts".to_owned(),
        ),
    ];
    let retry_after = vec![
        (String::new(), "The preset's".to_owned()),
        (
            "replace".to_owned(),
            "Replaces the backoff (1 s–1 h)".to_owned(),
        ),
        (
            "extend".to_owned(),
            "Used when longer than the backoff".to_owned(),
        ),
    ];
    let orderings = vec![
        (
            "none".to_owned(),
            "None: side by side, as they come due".to_owned(),
        ),
        (
            "fifo".to_owned(),
            "In order (FIFO): one at a time".to_owned(),
        ),
    ];
    let preset = if f.preset.is_empty() {
        "partyflow".to_owned()
    } else {
        f.preset.clone()
    };
    let filter = NodeRef::<leptos::html::Textarea>::new();
    let transformation = NodeRef::<leptos::html::Textarea>::new();
    let period = if f.rate_period.is_empty() {
        "second".to_owned()
    } else {
        f.rate_period.clone()
    };
    view! {
        <fieldset>
            <legend>"Endpoint"</legend>
            <div class="form-grid">
                <label class="wide">"Name (empty: the URL's host)"
                    <input type="text" name="name" maxlength="100" value=f.name.clone() placeholder="Orders"/>
                </label>
                <label class="wide">"URL (http or https)"
                    <input type="url" name="url" required maxlength="2048" value=f.url placeholder="https://example.com/webhooks"/>
                </label>
                <FieldError error label="URL"/>
                <label class="wide">"Description"
                    <input type="text" name="description" maxlength="1000" value=f.description/>
                </label>
                <FieldError error label="Description"/>
                <label class="wide">"Event types (comma-separated; order.* for every type under order., * or empty for every type)"
                    <input type="text" name="event_types" value=f.event_types placeholder="message.created, order.*" list=CATALOG_DATALIST/>
                    <CatalogDatalist space=f.space.clone()/>
                </label>
                <FieldError error label="Event types"/>
                <FieldError error label="Event type"/>
            </div>
        </fieldset>
        <fieldset>
            <legend>"Limits"</legend>
            <div class="form-grid">
                <label>"Rate limit (empty for none)"
                    <input type="number" name="rate_count" min="1" max="1000000" value=f.rate_count/>
                </label>
                <label>"Per" <select name="rate_period">{select_options(periods, &period)}</select></label>
                <label>"Timeout, seconds (1–60)"
                    <input type="number" name="timeout_seconds" min="1" max="60" value=f.timeout_seconds placeholder="30"/>
                </label>
                <FieldError error label="Rate limit"/>
                <FieldError error label="Timeout"/>
            </div>
        </fieldset>
        <fieldset>
            <legend>"Retries"</legend>
            <div class="form-grid">
                <label class="wide">"Retry policy" <select name="preset">{select_options(presets, &preset)}</select></label>
                <label>"Max attempts (1–20)"
                    <input type="number" name="max_attempts" min="1" max="20" value=f.max_attempts placeholder="the preset's"/>
                </label>
                <label>"First retry after, seconds"
                    <input type="text" inputmode="decimal" name="initial_seconds" value=f.initial_seconds placeholder="the preset's"/>
                </label>
                <label>"Longest wait, seconds"
                    <input type="text" inputmode="decimal" name="max_seconds" value=f.max_seconds placeholder="the preset's"/>
                </label>
                <label>"Jitter, % (0–100)"
                    <input type="text" inputmode="decimal" name="jitter_percent" value=f.jitter_percent placeholder="the preset's"/>
                </label>
                <label>"Retry-After (on 429 and 503)"
                    <select name="retry_after">{select_options(retry_after, &f.retry_after)}</select>
                </label>
                <FieldError error label="Retry policy"/>
            </div>
            <p class="small muted">
                "Empty fields take the preset's value. PartyFlow: first retry after 5 s, doubling up to 1 h, ±20 % jitter, "
                "Retry-After replaces the backoff, 8 attempts; only 408, 429, 5xx and network errors are retried. "
                "Standard: 30 s doubling up to 1 h, no jitter, Retry-After used when longer, 6 attempts; every failure is retried."
            </p>
        </fieldset>
        <fieldset>
            <legend>"Transformation"</legend>
            <label>"A jq program applied to each payload before it is sent (empty for none)"
                <textarea name="transformation" node_ref=transformation rows="4" spellcheck="false" class="mono" data-testid="transformation" placeholder="e.g. {id: .id, text: .text}">{f.transformation}</textarea>
            </label>
            <FieldError error label="Transformation"/>
        </fieldset>
        <fieldset>
            <legend>"Filter"</legend>
            <label>"A jq expression on each payload: only true delivers the event; false or null keeps it out (empty for none)"
                <textarea name="filter" node_ref=filter rows="2" spellcheck="false" class="mono" data-testid="filter" placeholder=r#"e.g. .total > 100 and .currency == "EUR""#>{f.filter}</textarea>
            </label>
            <FieldError error label="Filter"/>
            <p class="small muted">
                "Any other value, an error or a program stopped by the sandbox's limits fails that event's delivery (error class transformation)."
            </p>
        </fieldset>
        <TryIt filter transformation/>
        <fieldset>
            <legend>"Ordering"</legend>
            <label>"Delivery order"
                <select name="ordering" data-testid="ordering">{select_options(orderings, &f.ordering)}</select>
            </label>
            <p class="small muted">
                "In order (FIFO): one attempt at a time, in the order the events were published; a delivery waits while "
                "an earlier one to this destination is pending or retrying (a failed or cancelled one does not hold it up)."
            </p>
        </fieldset>
        <fieldset>
            <legend>"Headers"</legend>
            <label>"Headers of its own, sent on every attempt: one Name: value a line (empty for none)"
                <textarea name="headers" rows="3" spellcheck="false" autocomplete="off" class="mono" data-testid="headers-field"
                    placeholder="Authorization: Basic dXNlcjpwYXNz\nX-Team: ops">{f.headers.0}</textarea>
            </label>
            <FieldError error label="Headers"/>
            <p class="small muted">
                "Values are secrets: once saved they are shown masked (••••…1234). Leave a masked line as it is to keep "
                "its value, type a new value to replace it, delete the line to remove the header. At most 20 headers, "
                "4096 bytes in all; webhook-*, content-type, content-length, host, connection, transfer-encoding and "
                "user-agent are set by PartyFlow Hooks."
            </p>
        </fieldset>
    }
}

/// The "Try it" box: the filter and transformation as typed in the form, run on a
/// sample payload by the server's sandbox; nothing is saved or sent. The sample has no
/// `name`, so saving the form does not post it. Needs JavaScript.
#[component]
fn TryIt(
    filter: NodeRef<leptos::html::Textarea>,
    transformation: NodeRef<leptos::html::Textarea>,
) -> impl IntoView {
    let sample = NodeRef::<leptos::html::Textarea>::new();
    let run = ServerAction::<TryDestination>::new();
    let pending = run.pending();
    let typed = |r: NodeRef<leptos::html::Textarea>| r.get().map(|t| t.value()).unwrap_or_default();
    let on_try = move |_| {
        run.dispatch(TryDestination {
            filter: typed(filter),
            transformation: typed(transformation),
            sample: typed(sample),
        });
    };
    view! {
        <fieldset class="try-it" data-testid="try-it">
            <legend>"Try it"</legend>
            <label>"A sample payload (JSON, at most 64 KiB)"
                <textarea node_ref=sample rows="5" spellcheck="false" class="mono" data-testid="try-sample" placeholder=r#"{"total": 150, "currency": "EUR"}"#></textarea>
            </label>
            <div class="actions">
                <button type="button" class="secondary" data-testid="try-button" on:click=on_try disabled=move || pending.get()>
                    {move || if pending.get() { "Trying…" } else { "Try the filter and transformation" }}
                </button>
                <span class="small muted">"Uses what is typed above, unsaved; runs in the server's sandbox and sends nothing."</span>
            </div>
            <div data-testid="try-result" role="status">
                {move || run.value().get().map(tried_view)}
            </div>
        </fieldset>
    }
}

fn tried_view(r: Result<TryOutcome, ConsoleError>) -> AnyView {
    let t = match r {
        Ok(t) => t,
        Err(e) => {
            return view! { <p class="error-text" role="alert">{e.to_string()}</p> }.into_any()
        }
    };
    let filter = match t.filter {
        None => view! { <p data-testid="try-verdict">"No filter: every event is delivered."</p> }.into_any(),
        Some(FilterVerdict::Passes) => view! {
            <p class="ok-text" data-testid="try-verdict">"Filter: passes. The event would be delivered."</p>
        }.into_any(),
        Some(FilterVerdict::FilteredOut) => view! {
            <p class="muted" data-testid="try-verdict"><strong>"Filter: filtered out."</strong> " No delivery; it would count as a filtered event."</p>
        }.into_any(),
        Some(FilterVerdict::Failed(why)) => view! {
            <p class="error-text" data-testid="try-verdict">"Filter: error. The delivery would fail: " {why}</p>
        }.into_any(),
    };
    let transformed = match t.transformed {
        None => view! { <p class="muted" data-testid="try-output">"No transformation: the payload is sent as it is."</p> }.into_any(),
        Some(Ok(json)) => view! {
            <p>"The transformation makes:"</p>
            <pre class="code" data-testid="try-output">{json}</pre>
        }.into_any(),
        Some(Err(why)) => view! {
            <p class="error-text" data-testid="try-output">"Transformation: error. " {why}</p>
        }.into_any(),
    };
    view! { {filter} {transformed} }.into_any()
}
