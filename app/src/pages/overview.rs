//! The overview: deliveries per minute (last hour) or per hour (last day) by what
//! became of them, failures by error class, the backlog, failing destinations and
//! unread notifications; overall and per space. Charts are server-rendered SVG.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

use crate::api::get_overview;
use crate::components::{console, fmt_clock, load_error, ErrorClassBadge, StatusBadge};
use crate::types::{Bucket, Overview, SpaceStats};

#[component]
pub fn OverviewPage() -> impl IntoView {
    let ctx = console();
    let query = use_query_map();
    let window = Memo::new(move |_| {
        query
            .read()
            .get("window")
            .filter(|w| w == "day")
            .unwrap_or_else(|| "hour".to_owned())
    });
    // Live (issue 16 item 5): read again every few seconds in the browser.
    let tick = super::live::ticks();
    let data = Resource::new(
        move || (window.get(), ctx.refresh.get(), tick.get()),
        |(w, _, _)| get_overview(w),
    );
    let tab = move |w: &'static str, label: &'static str| {
        view! {
            <a href=format!("/?window={w}") aria-current=move || (window.get() == w).then_some("page")>{label}</a>
        }
    };

    view! {
        <Title text="Overview · PartyFlow Hooks"/>
        <div class="page-head">
            <h1>"Overview"</h1>
            <nav class="tabs" aria-label="Time window">
                {tab("hour", "Last hour")}
                {tab("day", "Last day")}
            </nav>
        </div>
        <Transition fallback=|| view! { <p class="muted">"Loading…"</p> }>
            {move || Suspend::new(async move {
                match data.await {
                    Ok(o) => overview_view(o).into_any(),
                    Err(e) => load_error(e),
                }
            })}
        </Transition>
    }
}

fn overview_view(o: Overview) -> impl IntoView {
    let total = o.overall.total();
    let per = if o.window == "day" { "hour" } else { "minute" };
    let window_words = if o.window == "day" {
        "last 24 hours"
    } else {
        "last hour"
    };
    let failing = o.failing.clone();
    let bucket_ms = o.bucket_ms;
    view! {
        <section class="stats" aria-label="Totals">
            <Stat label="Deliveries" value=total.total() hint=format!("created in the {window_words}")/>
            <Stat label="Succeeded" value=total.succeeded hint="2xx answer".to_owned() tone="ok"/>
            <Stat label="Failed" value=total.failed hint="dead-lettered".to_owned() tone="bad" href="/deliveries?status=failed&last=24h"/>
            <Stat label="Waiting now" value=o.overall.waiting hint=format!("{} paused, {} sending", o.overall.paused, o.overall.sending) href="/deliveries?status=retrying"/>
            <Stat label="Failing destinations" value=o.overall.failing_destinations hint="inactive or dead-lettering".to_owned() tone={if o.overall.failing_destinations > 0 { "bad" } else { "" }} href="/destinations"/>
            <Stat label="Unread notifications" value=o.unread hint="for admins".to_owned() tone={if o.unread > 0 { "warn" } else { "" }} href="/notifications"/>
        </section>

        <section class="card">
            <h2>{format!("All spaces: deliveries per {per}, {window_words}")}</h2>
            <Chart buckets=o.overall.buckets.clone() bucket_ms=bucket_ms width=1100 height=180/>
            <Legend/>
            <ErrorClasses stats=o.overall.clone()/>
        </section>

        <section class="card">
            <h2>"Failing destinations"</h2>
            {if failing.is_empty() {
                view! { <p class="muted">"None: every destination is active and delivering."</p> }.into_any()
            } else {
                view! {
                    <table class="grid">
                        <thead><tr>
                            <th scope="col">"Destination"</th><th scope="col">"Space"</th><th scope="col">"Status"</th>
                            <th scope="col">"Dead-letters in a row"</th><th scope="col">"Paused"</th><th scope="col">"Skipped events"</th>
                        </tr></thead>
                        <tbody>
                            {failing.into_iter().map(|d| view! {
                                <tr>
                                    <td class="url" title=d.url.clone()>
                                        <a href=format!("/destinations/{}", d.id) class="dest-name">{d.name.clone()}</a>
                                        <div class="small muted mono">{d.url.clone()}</div>
                                    </td>
                                    <td>{d.space_name}</td>
                                    <td><StatusBadge status=d.status/></td>
                                    <td class="num">{d.consecutive_dead_letters}</td>
                                    <td class="num">{d.paused}</td>
                                    <td class="num">{d.skipped_events}</td>
                                </tr>
                            }).collect_view()}
                        </tbody>
                    </table>
                }.into_any()
            }}
        </section>

        <h2>"Per space"</h2>
        {if o.spaces.is_empty() {
            view! { <p class="muted">"No spaces yet."</p> }.into_any()
        } else {
            view! {
                <div class="space-grid">
                    {o.spaces.into_iter().map(|s| space_card(s, bucket_ms)).collect_view()}
                </div>
            }.into_any()
        }}
    }
}

fn space_card(s: SpaceStats, bucket_ms: i64) -> impl IntoView {
    let t = s.total();
    let id = s.space_id.clone().unwrap_or_default();
    let name = s.name.clone();
    let label = s.name.clone();
    view! {
        <section class="card space-card" aria-label=label>
            <h3><a href=format!("/deliveries?space={id}")>{name}</a></h3>
            <Chart buckets=s.buckets.clone() bucket_ms=bucket_ms width=520 height=90/>
            <p class="small">
                {t.total()} " deliveries · " <span class="ok-text">{t.succeeded} " succeeded"</span> " · "
                <span class="bad-text">{t.failed} " failed"</span> " · " {s.waiting} " waiting"
                {(s.paused > 0).then(|| format!(" ({} paused)", s.paused))}
                " · " <a href=format!("/destinations?space={id}")>{s.failing_destinations} " failing destinations"</a>
            </p>
            <ErrorClasses stats=s/>
        </section>
    }
}

#[component]
fn Stat(
    label: &'static str,
    value: i64,
    hint: String,
    #[prop(optional)] tone: &'static str,
    #[prop(optional)] href: Option<&'static str>,
) -> impl IntoView {
    let body = view! {
        <span class="stat-value">{value}</span>
        <span class="stat-label">{label}</span>
        <span class="stat-hint">{hint}</span>
    };
    match href {
        Some(href) => view! { <a class=format!("stat {tone}") href=href>{body}</a> }.into_any(),
        None => view! { <div class=format!("stat {tone}")>{body}</div> }.into_any(),
    }
}

/// The outcomes, bottom to top, with their colours (also in the CSS legend).
const SERIES: [(&str, &str); 5] = [
    ("succeeded", "#2e8b57"),
    ("cancelled", "#9aa3b2"),
    ("waiting", "#5b8def"),
    ("retrying", "#e0a100"),
    ("failed", "#c8372d"),
];

fn series_value(b: &Bucket, name: &str) -> i64 {
    match name {
        "succeeded" => b.succeeded,
        "cancelled" => b.cancelled,
        "waiting" => b.waiting,
        "retrying" => b.retrying,
        _ => b.failed,
    }
}

/// Stacked bars, one per bucket; hovering a bar tells its numbers.
#[component]
fn Chart(buckets: Vec<Bucket>, bucket_ms: i64, width: i64, height: i64) -> impl IntoView {
    let left = 34;
    let bottom = 18;
    let plot_w = (width - left - 4).max(10);
    let plot_h = (height - bottom - 6).max(10);
    let n = buckets.len().max(1) as i64;
    let max = buckets.iter().map(Bucket::total).max().unwrap_or(0).max(1);
    let slot = plot_w as f64 / n as f64;
    let bar_w = (slot - 1.0).max(1.0);
    let y = move |v: i64| plot_h as f64 * v as f64 / max as f64;
    let total: i64 = buckets.iter().map(Bucket::total).sum();
    let label = format!(
        "{total} deliveries in {} buckets; at most {max} in one",
        buckets.len()
    );
    let every = (n / 6).max(1) as usize;
    let ticks: Vec<_> = buckets
        .iter()
        .enumerate()
        .filter(|(i, _)| {
            i % every == 0 || (*i as i64 == n - 1 && (n - 1) as usize % every > every / 2)
        })
        .map(|(i, b)| {
            // The last label ends at the right edge instead of running off it.
            if i as i64 == n - 1 {
                (left as f64 + slot * n as f64, fmt_clock(b.start), "end")
            } else {
                (left as f64 + slot * i as f64, fmt_clock(b.start), "start")
            }
        })
        .collect();
    let bars = buckets
        .into_iter()
        .enumerate()
        .map(|(i, b)| {
            let x = left as f64 + slot * i as f64;
            let mut base = (height - bottom) as f64;
            let rects = SERIES
                .iter()
                .filter_map(|(name, colour)| {
                    let v = series_value(&b, name);
                    (v > 0).then(|| {
                        let h = y(v).max(1.0);
                        base -= h;
                        view! { <rect x=format!("{x:.1}") y=format!("{base:.1}") width=format!("{bar_w:.1}") height=format!("{h:.1}") fill=*colour/> }
                    })
                })
                .collect_view();
            let tip = format!(
                "{}–{}: {} succeeded, {} failed, {} retrying, {} waiting, {} cancelled",
                fmt_clock(b.start),
                fmt_clock(b.start + bucket_ms),
                b.succeeded,
                b.failed,
                b.retrying,
                b.waiting,
                b.cancelled
            );
            view! { <g><title>{tip}</title>{rects}</g> }
        })
        .collect_view();
    view! {
        <svg class="chart" viewBox=format!("0 0 {width} {height}") width="100%" role="img" aria-label=label preserveAspectRatio="none">
            <line x1=left y1=height - bottom x2=width y2=height - bottom stroke="#c5cad3"/>
            <text x=left - 4 y=12 text-anchor="end" class="axis">{max}</text>
            <text x=left - 4 y=height - bottom text-anchor="end" class="axis">"0"</text>
            {ticks.into_iter().map(|(x, t, anchor)| view! {
                <text x=format!("{x:.1}") y=height - 4 class="axis" text-anchor=anchor>{t}</text>
            }).collect_view()}
            {bars}
        </svg>
    }
}

#[component]
fn Legend() -> impl IntoView {
    view! {
        <ul class="legend" aria-label="Legend">
            {SERIES.iter().rev().map(|(name, colour)| view! {
                <li><span class="swatch" style=format!("background:{colour}")></span>{*name}</li>
            }).collect_view()}
        </ul>
    }
}

#[component]
fn ErrorClasses(stats: SpaceStats) -> impl IntoView {
    if stats.error_classes.is_empty() {
        return view! { <p class="muted small">"No failures in this window."</p> }.into_any();
    }
    let space = stats.space_id.clone().unwrap_or_default();
    view! {
        <ul class="classes" aria-label="Failures by error class">
            {stats.error_classes.into_iter().map(|(class, n)| {
                let mut href = format!("/deliveries?error_class={class}");
                if !space.is_empty() {
                    href.push_str(&format!("&space={space}"));
                }
                view! {
                    <li><a href=href><ErrorClassBadge class=class/> " " {n}</a></li>
                }
            }).collect_view()}
        </ul>
    }
    .into_any()
}
