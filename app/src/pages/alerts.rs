//! Alerts (admins only, docs D16): every admin notification — a destination disabled or
//! failing, an incoming webhook disabled, a delivery lost — also goes out, to alert
//! webhooks (destinations subscribed to `partyflow.alert`, delivered by the engine) of
//! its space and of the install's alert space, and by e-mail. Here admins choose the
//! alert space, add alert webhooks and addresses, and send a test alert.

use leptos::prelude::*;
use leptos_meta::Title;

use crate::api::{
    get_alerts, list_spaces, AddAlertEmail, AddAlertWebhook, RemoveAlertEmail, SendTestAlert,
    SetAlertSpace,
};
use crate::components::{
    console, fmt_time, load_error, refusal, reset_on_success, select_options, use_mutation,
    use_typed, Confirm, FieldError, Typed,
};
use crate::types::{AlertSettings, SpaceView};

#[component]
pub fn AlertsPage() -> impl IntoView {
    let ctx = console();
    let data = Resource::new(
        move || ctx.refresh.get(),
        |_| async {
            Ok::<_, crate::error::ConsoleError>((get_alerts().await?, list_spaces().await?))
        },
    );
    // A refused form (without JavaScript) comes back with what was typed.
    let typed = (
        use_typed::<SetAlertSpace>(),
        use_typed::<AddAlertWebhook>(),
        use_typed::<AddAlertEmail>(),
        use_typed::<SendTestAlert>(),
    );
    view! {
        <Title text="Alerts · PartyFlow Hooks"/>
        <div class="page-head">
            <h1>"Alerts"</h1>
            <p class="muted">
                "Every admin notification (a destination disabled or failing, an incoming webhook \
                 disabled, a delivery lost) also goes out: to the alert webhooks of its space and of \
                 the install's alert space, and by e-mail. Alerts link to this console."
            </p>
        </div>
        <Transition fallback=|| view! { <p class="muted">"Loading…"</p> }>
            {move || Suspend::new(async move {
                let (alert_space, webhook, email, test) =
                    (typed.0.await, typed.1.await, typed.2.await, typed.3.await);
                match data.await {
                    Ok((settings, spaces)) => view! {
                        <AlertSpace settings=settings.clone() spaces=spaces.clone() typed=alert_space/>
                        <Webhooks settings=settings.clone() spaces=spaces.clone() typed=webhook/>
                        <Emails settings=settings.clone() spaces=spaces.clone() typed=email/>
                        <TestAlert spaces=spaces typed=test/>
                    }.into_any(),
                    Err(e) => load_error(e),
                }
            })}
        </Transition>
    }
}

fn space_options(spaces: &[SpaceView], none: &str) -> Vec<(String, String)> {
    std::iter::once((String::new(), none.to_owned()))
        .chain(spaces.iter().map(|s| (s.id.clone(), s.name.clone())))
        .collect()
}

#[component]
fn AlertSpace(
    settings: AlertSettings,
    spaces: Vec<SpaceView>,
    typed: Option<Typed>,
) -> impl IntoView {
    let save = use_mutation::<SetAlertSpace>();
    let error = refusal(save);
    let current = Typed::or(&typed, "space", settings.alert_space.clone());
    view! {
        <section class="card">
            <h2>"The install's alert space"</h2>
            <p class="muted">"Its alert webhooks get the alerts of every space, besides each space's own."</p>
            <ActionForm action=save>
                <div class="form-grid">
                    <label>"Alert space"
                        <select name="space" data-testid="alert-space">
                            {select_options(space_options(&spaces, "none"), &current)}
                        </select>
                    </label>
                    <FieldError error label="Alert space"/>
                </div>
                <button type="submit" disabled=move || save.pending().get()>"Save"</button>
            </ActionForm>
        </section>
    }
}

#[component]
fn Webhooks(
    settings: AlertSettings,
    spaces: Vec<SpaceView>,
    typed: Option<Typed>,
) -> impl IntoView {
    let add = use_mutation::<AddAlertWebhook>();
    let error = refusal(add);
    let form = NodeRef::new();
    reset_on_success(add, form);
    // The alert space by default: install-wide webhooks are the common case.
    let first_space = if settings.alert_space.is_empty() {
        spaces.first().map(|s| s.id.clone()).unwrap_or_default()
    } else {
        settings.alert_space.clone()
    };
    let first_space = Typed::or(&typed, "space", first_space);
    let url = Typed::or(&typed, "url", String::new());
    let format = Typed::or(&typed, "format", "slack".into());
    view! {
        <section class="card">
            <h2>"Alert webhooks"</h2>
            <p class="muted">
                "Destinations subscribed to " <code>"partyflow.alert"</code> ": sent by the engine like \
                 any delivery, signed, with retries. Their deliveries are in the space's deliveries."
            </p>
            {if settings.webhooks.is_empty() {
                view! { <p class="empty">"No alert webhooks yet."</p> }.into_any()
            } else {
                view! {
                    <div class="table-wrap"><table class="grid" data-testid="alert-webhooks">
                        <thead><tr>
                            <th scope="col">"Space"</th><th scope="col">"URL"</th>
                            <th scope="col">"Format"</th><th scope="col">"Status"</th>
                        </tr></thead>
                        <tbody>
                            {settings.webhooks.into_iter().map(|w| view! {
                                <tr>
                                    <td>{w.space_name}</td>
                                    <td class="mono small"><a href=format!("/destinations/{}", w.id)>{w.url}</a></td>
                                    <td>{if w.slack { "Slack ({\"text\"})" } else { "JSON (the whole alert)" }}</td>
                                    <td><span class=format!("badge status-{}", w.status)>{w.status.clone()}</span></td>
                                </tr>
                            }).collect_view()}
                        </tbody>
                    </table></div>
                }.into_any()
            }}
            <ActionForm action=add node_ref=form>
                <div class="form-grid">
                    <label>"Space"
                        <select name="space">{select_options(space_options(&spaces, "choose a space"), &first_space)}</select>
                    </label>
                    <label class="wide">"URL" <input type="url" name="url" value=url required placeholder="https://hooks.slack.com/services/…"/></label>
                    <FieldError error label="URL"/>
                    <label>"Format"
                        <select name="format">{select_options(vec![
                            ("slack".to_owned(), "Slack-compatible {\"text\"}".to_owned()),
                            ("json".to_owned(), "JSON (the whole alert)".to_owned()),
                        ], &format)}</select>
                    </label>
                </div>
                <button type="submit" disabled=move || add.pending().get()>"Add alert webhook"</button>
            </ActionForm>
        </section>
    }
}

#[component]
fn Emails(settings: AlertSettings, spaces: Vec<SpaceView>, typed: Option<Typed>) -> impl IntoView {
    let add = use_mutation::<AddAlertEmail>();
    let error = refusal(add);
    let address = Typed::or(&typed, "address", String::new());
    let space = Typed::or(&typed, "space", String::new());
    let remove = use_mutation::<RemoveAlertEmail>();
    let form = NodeRef::new();
    reset_on_success(add, form);
    view! {
        <section class="card">
            <h2>"E-mail"</h2>
            {if settings.smtp {
                view! { <p class="muted">"Sent through the SMTP server of the configuration."</p> }.into_any()
            } else {
                view! {
                    <p class="warning" data-testid="no-smtp">
                        "No SMTP server is configured (" <code>"PARTYFLOW_ALERTS__SMTP_URL"</code>
                        "): these addresses are kept, but nothing is e-mailed."
                    </p>
                }.into_any()
            }}
            {if settings.emails.is_empty() {
                view! { <p class="empty">"No addresses yet."</p> }.into_any()
            } else {
                view! {
                    <div class="table-wrap"><table class="grid" data-testid="alert-emails">
                        <thead><tr><th scope="col">"Address"</th><th scope="col">"Alerts of"</th><th scope="col">"Actions"</th></tr></thead>
                        <tbody>
                            {settings.emails.into_iter().map(|e| {
                                let question = format!("Stop e-mailing alerts to {}?", e.address);
                                view! {
                                    <tr>
                                        <td>{e.address.clone()}</td>
                                        <td>{if e.space_id.is_empty() { "every space".to_owned() } else { e.space_name.clone() }}</td>
                                        <td class="row-actions">
                                            <Confirm label="Remove".to_owned() question=question testid="remove-alert-email">
                                                <ActionForm action=remove>
                                                    <input type="hidden" name="id" value=e.id.clone()/>
                                                    <button type="submit" class="danger" disabled=move || remove.pending().get()>"Yes, remove"</button>
                                                </ActionForm>
                                            </Confirm>
                                        </td>
                                    </tr>
                                }
                            }).collect_view()}
                        </tbody>
                    </table></div>
                }.into_any()
            }}
            <ActionForm action=add node_ref=form>
                <div class="form-grid">
                    <label class="wide">"Address" <input type="email" name="address" value=address required autocomplete="off"/></label>
                    <FieldError error label="Address"/>
                    <label>"Alerts of"
                        <select name="space">{select_options(space_options(&spaces, "every space"), &space)}</select>
                    </label>
                </div>
                <button type="submit" disabled=move || add.pending().get()>"Add address"</button>
            </ActionForm>
            {(!settings.failed_mails.is_empty()).then(|| view! {
                <h3>"Not sent"</h3>
                <div class="table-wrap"><table class="grid" data-testid="failed-mails">
                    <thead><tr><th scope="col">"Address"</th><th scope="col">"Subject"</th><th scope="col">"Last error"</th><th scope="col">"Queued (UTC)"</th></tr></thead>
                    <tbody>
                        {settings.failed_mails.into_iter().map(|m| view! {
                            <tr>
                                <td>{m.address}</td>
                                <td>{m.subject}</td>
                                <td class="small">{format!("{} (after {} attempts)", m.error, m.attempts)}</td>
                                <td>{fmt_time(m.created_at)}</td>
                            </tr>
                        }).collect_view()}
                    </tbody>
                </table></div>
            })}
        </section>
    }
}

#[component]
fn TestAlert(spaces: Vec<SpaceView>, typed: Option<Typed>) -> impl IntoView {
    let send = use_mutation::<SendTestAlert>();
    let space = Typed::or(&typed, "space", String::new());
    view! {
        <section class="card">
            <h2>"Send a test alert"</h2>
            <p class="muted">"A notification made on purpose; it goes out as every alert does."</p>
            <ActionForm action=send>
                <div class="form-grid">
                    <label>"As an alert of"
                        <select name="space">{select_options(space_options(&spaces, "the install"), &space)}</select>
                    </label>
                </div>
                <button type="submit" data-testid="send-test-alert" disabled=move || send.pending().get()>"Send test alert"</button>
            </ActionForm>
        </section>
    }
}
