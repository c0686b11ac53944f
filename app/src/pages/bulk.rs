//! Confirming and running a bulk Send again or Cancel. The deliveries table sends
//! its choice here (a GET form); this page says how many deliveries it will touch
//! and, once confirmed, works through them in chunks, showing progress. With
//! JavaScript it goes on by itself; without, each round trip offers "Continue".

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

use super::deliveries::query_from_map;
use crate::api::{flash_notice, preview_bulk, Bulk};
use crate::components::{load_error, use_mutation};
use crate::types::{BulkPreview, BulkProgress, BulkSelection, Notice};

fn json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

#[component]
pub fn BulkPage() -> impl IntoView {
    let query = use_query_map();
    let selection = Memo::new(move |_| {
        let m = query.read();
        BulkSelection {
            op: if m.get("op").as_deref() == Some("cancel") {
                "cancel".into()
            } else {
                "resend".into()
            },
            ids: m.get_all("id").unwrap_or_default(),
            all: m.get("all").as_deref() == Some("true"),
            filter: query_from_map(&m),
        }
    });
    let preview = Resource::new(move || selection.get(), |s| preview_bulk(json(&s)));
    let flash = Resource::new(
        move || query.read().get("flash"),
        |id| async move {
            match id {
                Some(id) => flash_notice(id).await.ok().flatten(),
                None => None,
            }
        },
    );
    let action = use_mutation::<Bulk>();
    // With JavaScript: go on with the next round as soon as one ends.
    Effect::watch(
        move || action.version().get(),
        move |_, _, _| {
            if let Some(Ok(Notice { bulk: Some(p), .. })) = action.value().get_untracked() {
                if p.cursor.is_some() {
                    action.dispatch(Bulk {
                        selection: json(&p.selection),
                        state: json(&p),
                    });
                }
            }
        },
        false,
    );

    let title = move || {
        if selection.with(|s| s.op == "cancel") {
            "Cancel deliveries"
        } else {
            "Send deliveries again"
        }
    };
    view! {
        <Title text="Confirm · PartyFlow Hooks"/>
        <div class="page-head"><h1>{title}</h1></div>
        <Suspense fallback=|| view! { <p class="muted">"Counting…"</p> }>
            {move || Suspend::new(async move {
                let p = preview.await;
                let kept = flash.await.and_then(|n| n.bulk);
                let s = selection.get_untracked();
                match p {
                    Ok(p) => confirm_view(s, p, kept, action).into_any(),
                    Err(e) => load_error(e),
                }
            })}
        </Suspense>
    }
}

fn confirm_view(
    s: BulkSelection,
    p: BulkPreview,
    kept: Option<BulkProgress>,
    action: ServerAction<Bulk>,
) -> impl IntoView {
    let back = format!(
        "/deliveries{}",
        crate::components::query_string(&s.filter.pairs())
    );
    let resend = s.op != "cancel";
    if !s.all && s.ids.is_empty() {
        return view! {
            <section class="card">
                <p>"Nothing is selected. Tick some deliveries, or “All deliveries matching the filter”."</p>
                <p><a href=back>"Back to the deliveries"</a></p>
            </section>
        }
        .into_any();
    }
    let n = p.count;
    let what = if s.all {
        let more = if p.capped { "at least " } else { "" };
        if p.described.is_empty() {
            format!("all {more}{n} deliveries")
        } else {
            format!("all {more}{n} deliveries matching {}", p.described)
        }
    } else {
        format!(
            "{n} selected {}",
            if n == 1 { "delivery" } else { "deliveries" }
        )
    };
    let question = if resend {
        format!("Send again {what}?")
    } else {
        format!("Cancel {what}?")
    };
    let explain = if resend {
        "Each finished delivery becomes a new delivery of the same event to the same destination, sent straight away \
         with a full set of attempts and the same webhook-id. Deliveries still waiting or sending, and those of \
         inactive destinations, are skipped."
    } else {
        "Waiting deliveries (pending or retrying) become cancelled and are never sent. Deliveries already sending \
         or finished are skipped."
    };
    let start = BulkProgress {
        selection: s.clone(),
        totals: Default::default(),
        cursor: s.all.then(|| p.start.clone()),
        expected: n,
    };
    let verb = if resend { "Send again" } else { "Cancel" };
    let button = format!(
        "{verb} {n} {}",
        if n == 1 { "delivery" } else { "deliveries" }
    );
    let selection_json = json(&s);
    let pending = action.pending();
    // The latest progress: this page's action (JavaScript) or the kept result (plain form post).
    let kept = StoredValue::new(kept);
    let progress = move || match action.value().get() {
        Some(Ok(Notice { bulk: Some(p), .. })) => Some(p),
        _ => kept.get_value(),
    };
    let started = move || progress().is_some() || pending.get();
    let back_for_done = back.clone();

    view! {
        <section class="card confirm" data-testid="confirm-card">
            <p class="question" data-testid="confirm-question">{question}</p>
            <p class="muted">{explain}</p>
            <Show when=move || !started()>
                {
                    let (sel, state, button, back) = (selection_json.clone(), json(&start), button.clone(), back.clone());
                    view! {
                        <div class="actions">
                            <ActionForm action=action>
                                <input type="hidden" name="selection" value=sel/>
                                <input type="hidden" name="state" value=state/>
                                <button type="submit" data-testid="confirm" disabled=move || pending.get() || n == 0
                                    class=if resend { "" } else { "danger" }>{button}</button>
                            </ActionForm>
                            <a href=back class="button secondary">"Back"</a>
                        </div>
                    }
                }
            </Show>
            {move || {
                let p = progress();
                let working = pending.get();
                (p.is_some() || working).then(|| {
                    let p = p.unwrap_or_default();
                    let done = p.totals.done();
                    let expected = p.expected.max(done).max(1);
                    let finished = p.cursor.is_none() && !working && done > 0;
                    let op = p.selection.op.clone();
                    view! {
                        <div class="progress-block" data-testid="bulk-progress">
                            <progress max=expected value=done aria-label="Progress">{done}" of "{expected}</progress>
                            <p data-testid="bulk-result" data-finished=finished.to_string()>
                                {if finished { "Done. ".to_owned() } else { format!("Working… {done} of about {expected}. ") }}
                                {p.totals.summary(&op)}
                            </p>
                            {(p.cursor.is_some() && !working).then(|| {
                                let (sel, state) = (json(&p.selection), json(&p));
                                view! {
                                <ActionForm action=action>
                                    <input type="hidden" name="selection" value=sel/>
                                    <input type="hidden" name="state" value=state/>
                                    <button type="submit">"Continue"</button>
                                </ActionForm>
                                }
                            })}
                            {finished.then(|| view! { <p><a href=back_for_done.clone()>"Back to the deliveries"</a></p> })}
                        </div>
                    }
                })
            }}
        </section>
    }
    .into_any()
}
