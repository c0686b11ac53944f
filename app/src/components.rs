//! Pieces every page uses: the layout with its navigation and notices, badges for
//! statuses and error classes, time formatting, and [`use_mutation`], which makes a
//! server action whose result is announced and which refreshes the page's data.

use leptos::prelude::*;
use leptos::server_fn::error::ServerFnUrlError;
use leptos::server_fn::ServerFn;
use leptos_router::components::{Outlet, A};
use leptos_router::hooks::{use_location, use_query_map};

use crate::api::{flash_notice, unread_count};
use crate::auth::{current_user, Logout};
use crate::error::ConsoleError;
use crate::types::{Notice, SessionUser};

/// What the layout shares with its pages.
#[derive(Clone, Copy)]
pub struct Console {
    /// Bumped after every change, so every resource keyed on it reloads.
    pub refresh: RwSignal<u64>,
    /// The last action's result (with JavaScript; without, the URL carries it).
    pub notice: RwSignal<Option<Result<Notice, ConsoleError>>>,
    pub me: Resource<Result<SessionUser, ConsoleError>>,
}

pub fn console() -> Console {
    expect_context::<Console>()
}

/// A server action for a change: when it finishes, its result is shown at the top of
/// the page and, when it changed something, every resource keyed on
/// [`Console::refresh`] reloads.
pub fn use_mutation<S>() -> ServerAction<S>
where
    S: ServerFn<Output = Notice, Error = ConsoleError> + Clone + Send + Sync + 'static,
{
    let action = ServerAction::<S>::new();
    let ctx = use_context::<Console>();
    Effect::watch(
        move || action.version().get(),
        move |_, _, _| {
            if let Some(ctx) = ctx {
                let result = action.value().get_untracked();
                // Only a change reloads the page's data: a refused form keeps what was
                // typed (reloading would render it again from the saved values).
                let changed = matches!(result, Some(Ok(_)));
                ctx.notice.set(result);
                if changed {
                    ctx.refresh.update(|n| *n += 1);
                }
            }
        },
        false,
    );
    action
}

/// Empties a create form after its action succeeded (a failure keeps what was typed).
pub fn reset_on_success<S>(action: ServerAction<S>, form: NodeRef<leptos::html::Form>)
where
    S: ServerFn<Output = Notice, Error = ConsoleError> + Clone + Send + Sync + 'static,
{
    Effect::watch(
        move || action.version().get(),
        move |_, _, _| {
            if matches!(action.value().get_untracked(), Some(Ok(_))) {
                if let Some(form) = form.get_untracked() {
                    form.reset();
                }
            }
        },
        false,
    );
}

/// Whether the signed-in user is an admin (false while unknown).
pub fn is_admin(me: &Option<Result<SessionUser, ConsoleError>>) -> bool {
    matches!(me, Some(Ok(u)) if u.is_admin())
}

/// The frame of every signed-in page: navigation, who is signed in, notices, the page.
#[component]
pub fn Layout() -> impl IntoView {
    let refresh = RwSignal::new(0_u64);
    let notice = RwSignal::new(None);
    let me = Resource::new(|| (), |_| current_user());
    provide_context(Console {
        refresh,
        notice,
        me,
    });

    let location = use_location();
    // A notice belongs to the page it was given on.
    Effect::watch(
        move || location.pathname.get(),
        move |_, _, _| notice.set(None),
        false,
    );
    let unread = Resource::new(
        move || (refresh.get(), location.pathname.get()),
        |_| unread_count(),
    );
    view! {
        <a class="skip" href="#main">"Skip to content"</a>
        <TopBar unread=unread/>
        <Notices/>
        <main id="main" class="page">
            <Outlet/>
        </main>
    }
    .into_any()
}

#[component]
fn TopBar(unread: Resource<Result<i64, ConsoleError>>) -> impl IntoView {
    let me = console().me;
    let logout = ServerAction::<Logout>::new();
    view! {
        <header class="topbar">
            <a class="brand" href="/">"PartyFlow Hooks"</a>
            <MainNav unread=unread/>
            <crate::pages::search::SearchBox/>
            <Transition fallback=|| ()>
                {move || Suspend::new(async move {
                    me.await.ok().map(|u| view! {
                        <span class="who" data-testid="signed-in-as">{u.email.clone()} " · " {u.role.as_str()}</span>
                    })
                })}
            </Transition>
            <ActionForm action=logout>
                <button type="submit" class="link">"Sign out"</button>
            </ActionForm>
        </header>
    }
    .into_any()
}

#[component]
fn MainNav(unread: Resource<Result<i64, ConsoleError>>) -> impl IntoView {
    let me = console().me;
    let badge = move || {
        Suspend::new(async move {
            let n = unread.await.unwrap_or(0);
            (n > 0).then(|| view! {
                <span class="count" data-testid="unread-badge" title="Unread notifications">{n}</span>
            })
        })
    };
    let admin_links = move || {
        Suspend::new(async move {
            let me = me.await;
            is_admin(&Some(me)).then(|| {
                view! {
                    <A href="/spaces">"Spaces & keys"</A>
                    <A href="/users">"Users"</A>
                    <A href="/alerts">"Alerts"</A>
                }
            })
        })
    };
    view! {
        <nav aria-label="Main">
            <A href="/" exact=true>"Overview"</A>
            <A href="/deliveries">"Deliveries"</A>
            <A href="/destinations">"Destinations"</A>
            <A href="/event-types">"Event types"</A>
            <A href="/incoming-webhooks">"Incoming webhooks"</A>
            <A href="/notifications">
                "Notifications"
                <Transition fallback=|| ()>{badge}</Transition>
            </A>
            <A href="/audit-log">"Audit log"</A>
            <Transition fallback=|| ()>{admin_links}</Transition>
        </nav>
    }
    .into_any()
}

/// The result of the last change: from the action (JavaScript), from the URL
/// (`__err` after a plain form post failed), or kept in the session (`flash`).
#[component]
fn Notices() -> impl IntoView {
    let ctx = console();
    let query = use_query_map();
    let url_error = move || {
        query
            .read()
            .get("__err")
            .map(|e| ServerFnUrlError::<ConsoleError>::decode_err(&e))
    };
    let flash = Resource::new(
        move || query.read().get("flash"),
        |id| async move {
            match id {
                Some(id) => flash_notice(id).await.ok().flatten(),
                None => None,
            }
        },
    );
    view! {
        <div class="notices" aria-live="polite">
            {move || ctx.notice.get().map(result_view)}
            <Show when=move || ctx.notice.with(Option::is_none)>
                {move || url_error().map(error_box)}
                <Suspense fallback=|| ()>
                    {move || Suspend::new(async move { flash.await.map(notice_box) })}
                </Suspense>
            </Show>
        </div>
    }
}

pub fn result_view(r: Result<Notice, ConsoleError>) -> AnyView {
    match r {
        Ok(n) => notice_box(n).into_any(),
        Err(e) => error_box(e).into_any(),
    }
}

pub fn notice_box(n: Notice) -> impl IntoView {
    let secrets = (!n.secrets.is_empty()).then(|| {
        view! {
            <dl class="secrets">
                {n.secrets.into_iter().map(|(label, value)| view! {
                    <dt>{label}</dt>
                    <dd><code class="secret" data-testid="secret">{value}</code></dd>
                }).collect_view()}
            </dl>
            <p class="muted">"Shown once: copy it now. Only a hash is kept."</p>
        }
    });
    let link = n
        .link
        .map(|(label, href)| view! { <a href=href>{label}</a> });
    view! {
        <div class="notice ok" role="status" data-testid="notice">
            <p>{n.message}" "{link}</p>
            {secrets}
        </div>
    }
}

pub fn error_box(e: ConsoleError) -> impl IntoView {
    let signed_out = e == ConsoleError::SignedOut;
    view! {
        <div class="notice error" role="alert" data-testid="error">
            <p>
                {e.to_string()}
                {signed_out.then(|| view! { " " <a href="/login">"Sign in"</a> })}
            </p>
        </div>
    }
}

/// A page-level failure to load (the page's data could not be read).
pub fn load_error(e: ConsoleError) -> AnyView {
    error_box(e).into_any()
}

/// `2026-04-18 14:35:02` (UTC) from Unix milliseconds. Pure, so server and browser agree.
pub fn fmt_time(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// `14:35` (UTC).
pub fn fmt_clock(ms: i64) -> String {
    let rem = ms.div_euclid(1000).rem_euclid(86_400);
    format!("{:02}:{:02}", rem / 3600, rem % 3600 / 60)
}

/// `1.2 s`, `340 ms`.
pub fn fmt_duration(ms: i64) -> String {
    if ms >= 1000 {
        format!("{:.1} s", ms as f64 / 1000.0)
    } else {
        format!("{ms} ms")
    }
}

/// Days since 1970-01-01 → (year, month, day), proleptic Gregorian (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Reads `YYYY-MM-DDTHH:MM[:SS]` (or with a space) as UTC → Unix milliseconds.
pub fn parse_utc(s: &str) -> Option<i64> {
    let s = s.trim();
    let (date, time) = s.split_once(['T', ' ']).unwrap_or((s, "00:00"));
    let mut dp = date.split('-').map(|p| p.parse::<i64>().ok());
    let (y, m, d) = (dp.next()??, dp.next()??, dp.next()??);
    let mut tp = time.split(':').map(|p| p.parse::<i64>().ok());
    let (h, mi) = (tp.next()??, tp.next()??);
    let sec = tp.next().flatten().unwrap_or(0);
    if !(1..=12).contains(&m)
        || !(1..=31).contains(&d)
        || h > 23
        || mi > 59
        || sec > 59
        || h < 0
        || mi < 0
    {
        return None;
    }
    Some(((days_from_civil(y, m, d) * 86_400) + h * 3600 + mi * 60 + sec) * 1000)
}

/// What an error class means (docs §2.2): label, meaning, whether it is retried.
pub fn error_class_info(class: &str) -> (&'static str, &'static str, &'static str) {
    match class {
        "http" => ("HTTP error", "The receiver answered with a non-2xx status (shown next to it).", "Retried per the destination's policy (408, 429 and 5xx under the PartyFlow policy)."),
        "redirect" => ("Redirect", "The receiver answered 3xx; redirects are never followed.", "Not retried under the PartyFlow policy; retried under the standard policy."),
        "timeout" => ("Timeout", "No answer within the destination's timeout.", "Retried."),
        "dns" => ("DNS", "The host name could not be resolved.", "Retried."),
        "tls" => ("TLS", "The TLS connection could not be made (e.g. an expired certificate).", "Retried."),
        "connect" => ("Connection", "The connection was refused or dropped.", "Retried."),
        "blocked" => ("Blocked", "The address is on a private, loopback, link-local or reserved network; it is never called.", "Not retried: dead-letters at once."),
        "request" => ("Bad request", "The request could not be built or sent (e.g. an invalid URL).", "Not retried."),
        "lost" => ("Lost", "The attempt was cut short on our side (crash, shutdown).", "Retried straight away, without using up an attempt."),
        "transformation" => ("Transformation", "The destination's transformation failed.", "Not retried."),
        "cancelled" => ("Cancelled", "The delivery was cancelled before it was sent.", "Never sent."),
        "rate_limited" => ("Rate limited", "Waiting for a rate-limit slot; not a failure.", "Sent when a slot frees; does not use up an attempt."),
        _ => ("Unknown", "An error class this console does not know.", ""),
    }
}

/// Every error class a filter may choose, in the order of docs §2.2.
pub const ERROR_CLASSES: &[&str] = &[
    "http",
    "redirect",
    "timeout",
    "dns",
    "tls",
    "connect",
    "blocked",
    "request",
    "lost",
    "transformation",
    "cancelled",
    "rate_limited",
];

pub const DELIVERY_STATUSES: &[&str] = &[
    "pending",
    "sending",
    "retrying",
    "succeeded",
    "failed",
    "cancelled",
];

/// An error class as a labelled badge; its meaning shows on hover (and to screen readers).
#[component]
pub fn ErrorClassBadge(class: String, #[prop(default = None)] code: Option<i64>) -> impl IntoView {
    let (label, meaning, retried) = error_class_info(&class);
    let title = format!("{class}: {meaning} {retried}");
    let text = match code {
        Some(code) if class == "http" || class == "redirect" => format!("{label} {code}"),
        _ => label.to_owned(),
    };
    view! {
        <span class=format!("badge class-{class}") title=title data-error-class=class.clone()>{text}</span>
    }
}

#[component]
pub fn StatusBadge(status: String, #[prop(optional)] paused: bool) -> impl IntoView {
    let title = match status.as_str() {
        "pending" => "Waiting for its first attempt.",
        "sending" => "An attempt is in flight.",
        "retrying" => "Failed at least once; waiting for the next attempt.",
        "succeeded" => "The receiver answered 2xx.",
        "failed" => "Dead-lettered: attempts exhausted or a failure that is not retried.",
        "cancelled" => "Cancelled; never sent again.",
        "active" => "Receiving.",
        "inactive" => "Switched off: new events are skipped, waiting deliveries are paused.",
        "disabled" => "Switched off: senders get 410 Gone.",
        _ => "",
    };
    let text = if paused {
        format!("{status} · paused")
    } else {
        status.clone()
    };
    view! { <span class=format!("badge status-{status}") title=title data-status=status.clone()>{text}</span> }
}

/// A destructive action behind a second, deliberate click: a `<details>` whose
/// summary names the action and opens onto the question and the real submit button
/// (the children: a form). Works without JavaScript; with it, opening it moves the
/// focus to the confirm button and Escape closes it again.
#[component]
pub fn Confirm(
    /// What the summary says, e.g. "Revoke".
    label: String,
    /// The question, naming what will happen, e.g. "Revoke the API key ci? …".
    question: String,
    #[prop(optional, into)] testid: String,
    children: Children,
) -> impl IntoView {
    use leptos::wasm_bindgen::JsCast;
    let details = NodeRef::<leptos::html::Details>::new();
    let focus = |d: &leptos::web_sys::HtmlDetailsElement, css: &str| {
        if let Ok(Some(el)) = d.query_selector(css) {
            if let Ok(el) = el.dyn_into::<leptos::web_sys::HtmlElement>() {
                let _ = el.focus();
            }
        }
    };
    let on_toggle = move |_| {
        if let Some(d) = details.get_untracked() {
            if d.open() {
                focus(&d, ".confirm-box button[type=submit]");
            }
        }
    };
    let on_keydown = move |ev: leptos::ev::KeyboardEvent| {
        if ev.key() == "Escape" {
            if let Some(d) = details.get_untracked() {
                d.set_open(false);
                focus(&d, "summary");
            }
        }
    };
    view! {
        <details class="confirm-inline" node_ref=details data-testid=testid on:toggle=on_toggle on:keydown=on_keydown>
            <summary class="danger-text">{label}</summary>
            <div class="confirm-box" role="group">
                <p>{question}</p>
                {children()}
            </div>
        </details>
    }
}

/// A `<select>` whose options are `(value, label)`, with `current` chosen.
pub fn select_options(options: Vec<(String, String)>, current: &str) -> impl IntoView {
    options
        .into_iter()
        .map(|(value, label)| {
            let selected = value == current;
            view! { <option value=value selected=selected>{label}</option> }
        })
        .collect_view()
}

/// `?a=1&b=2` from pairs (empty string when there are none).
pub fn query_string(pairs: &[(&str, String)]) -> String {
    let mut s = form_urlencoded::Serializer::new(String::new());
    for (k, v) in pairs {
        s.append_pair(k, v);
    }
    let q = s.finish();
    if q.is_empty() {
        q
    } else {
        format!("?{q}")
    }
}

/// What was typed into a refused form, by field name: with JavaScript the form simply
/// stays as it is; without, a refused plain post comes back to the page with the
/// refusal in its URL (`__path`, `__err`) and the fields kept in the session
/// (`guard::keep_typed`), read here so the page renders the user's values.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Typed(pub Vec<(String, String)>);

impl Typed {
    /// The value typed into field `name`, if it was posted.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The typed value of `name`, or `saved` when the field was not posted.
    pub fn or(typed: &Option<Typed>, name: &str, saved: String) -> String {
        typed
            .as_ref()
            .and_then(|t| t.get(name))
            .map(str::to_owned)
            .unwrap_or(saved)
    }

    /// Whether the checkbox `name` is to be shown ticked: as posted when the form was
    /// refused (an unticked box is not posted), else as `saved`.
    pub fn checked(typed: &Option<Typed>, name: &str, saved: bool) -> bool {
        match typed {
            Some(t) => t.get(name).is_some(),
            None => saved,
        }
    }

    /// What was typed, when the refused form is the one that posted `name` as `value`:
    /// one of several forms of the same server function on a page (a row's, a space's).
    pub fn of_form(typed: &Option<Typed>, name: &str, value: &str) -> Option<Typed> {
        typed.clone().filter(|t| t.get(name) == Some(value))
    }

    /// The fields as a form struct whose fields are all text (missing ones default).
    pub fn fill<T: serde::de::DeserializeOwned>(&self) -> Option<T> {
        let map: serde_json::Map<String, serde_json::Value> = self
            .0
            .iter()
            .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
            .collect();
        serde_json::from_value(serde_json::Value::Object(map)).ok()
    }
}

/// The server function a page's URL names as having refused a plain form post (`__path`).
fn refused_path() -> Memo<Option<String>> {
    let query = use_query_map();
    Memo::new(move |_| {
        let q = query.read();
        q.get("__err").and(q.get("__path"))
    })
}

/// What was typed into the form of server function `S` when it was refused without
/// JavaScript (`None` otherwise): pages fill their forms from it instead of the saved
/// values.
pub fn use_typed<S: ServerFn>() -> Resource<Option<Typed>> {
    let path = refused_path();
    Resource::new(
        move || path.get().filter(|p| p == S::PATH),
        |path| async move {
            match path {
                Some(path) => crate::api::typed_form(path).await.ok().flatten().map(Typed),
                None => None,
            }
        },
    )
}

/// The message with which `S` refused the form, from the action (JavaScript) or from
/// the URL (a plain form post): shown beside the field it names ([`FieldError`]) or
/// the form's button.
pub fn refusal<S>(action: ServerAction<S>) -> Signal<Option<String>>
where
    S: ServerFn<Output = Notice, Error = ConsoleError> + Clone + Send + Sync + 'static,
{
    let query = use_query_map();
    Signal::derive(move || {
        if let Some(result) = action.value().get() {
            return result.err().map(|e| e.to_string());
        }
        let q = query.read();
        (q.get("__path").as_deref() == Some(S::PATH))
            .then(|| q.get("__err"))
            .flatten()
            .map(|e| ServerFnUrlError::<ConsoleError>::decode_err(&e).to_string())
    })
}

/// Whether a refusal is about the field labelled `label`: the console words a refused
/// setting "Label: what is wrong." (e.g. "Transformation: the jq program does not
/// compile: …"), or names it as the sentence's subject ("The example does not match
/// the schema: …").
pub fn names_field(message: &str, label: &str) -> bool {
    let labelled = message
        .strip_prefix(label)
        .is_some_and(|rest| rest.starts_with(':'));
    let subject = message.strip_prefix("The ").is_some_and(|rest| {
        rest.get(..label.len())
            .is_some_and(|word| word.eq_ignore_ascii_case(label))
            && rest[label.len()..].starts_with(' ')
    });
    labelled || subject
}

/// The refusal beside the field labelled `label`, when it is about that field.
#[component]
pub fn FieldError(
    error: Signal<Option<String>>,
    label: &'static str,
    #[prop(optional)] id: &'static str,
) -> impl IntoView {
    move || {
        error
            .get()
            .filter(|m| names_field(m, label))
            .map(|m| view! { <p class="field-error error-text" role="alert" id=id data-testid="field-error">{m}</p> })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_format_and_parse_as_utc() {
        assert_eq!(fmt_time(0), "1970-01-01 00:00:00");
        assert_eq!(fmt_time(1_776_522_900_000), "2026-04-18 14:35:00");
        assert_eq!(parse_utc("2026-04-18T14:35"), Some(1_776_522_900_000));
        assert_eq!(parse_utc("2026-04-18 14:35:00"), Some(1_776_522_900_000));
        assert_eq!(parse_utc("1970-01-01"), Some(0));
        assert_eq!(parse_utc("2026-13-01T00:00"), None);
        assert_eq!(parse_utc("yesterday"), None);
    }

    #[test]
    fn every_error_class_has_a_meaning() {
        for c in ERROR_CLASSES {
            assert_ne!(error_class_info(c).0, "Unknown", "{c}");
        }
    }

    #[test]
    fn a_refusal_names_its_field_by_label() {
        let m = "Transformation: the jq program does not compile: unexpected end.";
        assert!(names_field(m, "Transformation"));
        assert!(!names_field(m, "Filter"));
        assert!(!names_field("Transformations are off.", "Transformation"));
        let m = "The example does not match the schema: /total is required.";
        assert!(names_field(m, "Example"));
        assert!(!names_field(m, "Schema"));
        assert!(!names_field("The examples are old.", "Example"));
    }

    #[test]
    fn typed_values_win_over_saved_ones() {
        let typed = Some(Typed(vec![
            ("url".into(), "https://typed.example".into()),
            ("transformation".into(), "{nope".into()),
        ]));
        assert_eq!(
            Typed::or(&typed, "url", "https://saved.example".into()),
            "https://typed.example"
        );
        assert_eq!(Typed::or(&typed, "filter", ".ok".into()), ".ok");
        assert!(
            !Typed::checked(&typed, "deprecated", true),
            "an unticked box is not posted"
        );
        assert!(Typed::checked(&None, "deprecated", true));
        assert!(Typed::of_form(&typed, "url", "https://typed.example").is_some());
        assert!(Typed::of_form(&typed, "url", "https://other.example").is_none());
        assert_eq!(
            Typed::or(&None, "url", "https://saved.example".into()),
            "https://saved.example"
        );
        let form: crate::types::DestinationForm = typed.unwrap().fill().unwrap();
        assert_eq!(form.url, "https://typed.example");
        assert_eq!(form.transformation, "{nope");
        assert_eq!(form.filter, "");
    }
}
