//! A destination's settings (admins only): URL, description, event types, rate
//! limit, timeout, retry policy (a preset and its overrides), transformation and
//! headers of its own (shown masked).
//! The server checks them by the REST API's rules and says what is wrong; a plain
//! form post works without JavaScript. [`SettingsFields`] is shared with the form
//! for a new destination.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_params_map;

use crate::api::{get_destination_edit, UpdateDestination};
use crate::components::{console, load_error, select_options, use_mutation, StatusBadge};
use crate::types::{DestinationEdit, DestinationForm};

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

    view! {
        <Title text="Destination settings · PartyFlow Hooks"/>
        <p class="crumbs"><a href=move || format!("/destinations/{}", id.get())>"← The destination"</a></p>
        <Transition fallback=|| view! { <p class="muted">"Loading…"</p> }>
            {move || Suspend::new(async move {
                match data.await {
                    Ok(e) => edit_view(e, save).into_any(),
                    Err(e) => load_error(e),
                }
            })}
        </Transition>
    }
}

fn edit_view(e: DestinationEdit, save: ServerAction<UpdateDestination>) -> impl IntoView {
    let pending = save.pending();
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
                <SettingsFields f=e.form/>
                <div class="actions">
                    <button type="submit" data-testid="save-settings" disabled=move || pending.get()>
                        {move || if pending.get() { "Saving…" } else { "Save settings" }}
                    </button>
                    <a class="button secondary" href=back>"Back without saving"</a>
                    // Next to the button as well as at the top: the page may be scrolled down here.
                    {move || save.value().get().map(|r| match r {
                        Ok(_) => view! { <p class="inline-result ok-text" role="status">"Saved."</p> }.into_any(),
                        Err(e) => view! {
                            <p class="inline-result error-text" role="alert" data-testid="inline-error">{format!("Not saved. {e}")}</p>
                        }.into_any(),
                    })}
                </div>
            </ActionForm>
        </section>
    }
}

/// The settings inputs of a destination form, filled from `f` (empty for defaults).
/// Field names are [`DestinationForm`]'s.
#[component]
pub fn SettingsFields(f: DestinationForm) -> impl IntoView {
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
    let preset = if f.preset.is_empty() {
        "partyflow".to_owned()
    } else {
        f.preset.clone()
    };
    let period = if f.rate_period.is_empty() {
        "second".to_owned()
    } else {
        f.rate_period.clone()
    };
    view! {
        <fieldset>
            <legend>"Endpoint"</legend>
            <div class="form-grid">
                <label class="wide">"URL (http or https)"
                    <input type="url" name="url" required maxlength="2048" value=f.url placeholder="https://example.com/webhooks"/>
                </label>
                <label class="wide">"Description"
                    <input type="text" name="description" maxlength="1000" value=f.description/>
                </label>
                <label class="wide">"Event types (comma-separated; * or empty for every type)"
                    <input type="text" name="event_types" value=f.event_types placeholder="message.created, channel.created"/>
                </label>
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
                <textarea name="transformation" rows="4" spellcheck="false" class="mono" placeholder="e.g. {id: .id, text: .text}">{f.transformation}</textarea>
            </label>
        </fieldset>
        <fieldset>
            <legend>"Headers"</legend>
            <label>"Headers of its own, sent on every attempt: one Name: value a line (empty for none)"
                <textarea name="headers" rows="3" spellcheck="false" autocomplete="off" class="mono" data-testid="headers-field"
                    placeholder="Authorization: Basic dXNlcjpwYXNz\nX-Team: ops">{f.headers.0}</textarea>
            </label>
            <p class="small muted">
                "Values are secrets: once saved they are shown masked (••••…1234). Leave a masked line as it is to keep "
                "its value, type a new value to replace it, delete the line to remove the header. At most 20 headers, "
                "4096 bytes in all; webhook-*, content-type, content-length, host, connection, transfer-encoding and "
                "user-agent are set by PartyFlow Hooks."
            </p>
        </fieldset>
    }
}
