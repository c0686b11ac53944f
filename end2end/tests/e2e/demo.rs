//! The demo space (issue 16 item 1, docs D17) in a real browser: within 60 s of the
//! server's first start (the demo's timings shrunk by `[demo]`), the overview shows
//! successes, retries and at least three error classes, and the failing destinations
//! go by their names.

use std::time::{Duration, Instant};

use end2end::*;
use fantoccini::Locator;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_spaces_overview_shows_successes_retries_and_three_error_classes_within_a_minute()
{
    let started = Instant::now();
    let server = start_server_with(|config| {
        config.demo.traffic_ms = 300;
        config.demo.slow_ms = 50;
        // Nothing of loopback opened: the demo receiver's own URLs are allowed anyway.
        config.allow_networks = String::new();
    })
    .await;
    let base = server::demo::receiver_base(server.addr);
    server::ops::demo::create(
        server.storage.as_ref(),
        &base,
        server::clock::now_ms(),
        60_000,
    )
    .await
    .unwrap();

    let driver = Driver::start();
    let profile = tempfile::tempdir().unwrap();
    let c = browser(&driver, profile.path()).await;
    sign_in(&c, &server, ADMIN).await;

    let (mut retrying, mut classes) = (0, Vec::new());
    let succeeded = loop {
        open(&c, &server, "/").await;
        find(&c, "svg.chart").await;
        let succeeded = stat(&c, "Succeeded").await;
        retrying = retrying.max(chart_retrying(&c).await);
        let listed = c.find_all(Locator::Css("ul.classes li")).await.unwrap();
        let mut now = Vec::new();
        for li in listed {
            now.push(li.text().await.unwrap());
        }
        if now.len() > classes.len() {
            classes = now;
        }
        if succeeded > 0 && retrying > 0 && classes.len() >= 3 {
            break succeeded;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "after 60 s: {succeeded} succeeded, {retrying} retrying, classes {classes:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    screenshot(&c, "demo-overview").await;
    eprintln!(
        "demo: {succeeded} succeeded, {retrying} retrying, classes {classes:?} after {:?}",
        started.elapsed()
    );

    // The destinations go by their names, with their URLs under them.
    open(&c, &server, "/destinations").await;
    let row = wait_text(&c, "table", "Missing endpoint").await;
    assert!(row.contains(&format!("{base}/missing")), "{row}");
    assert!(row.contains("Slow warehouse"), "{row}");
    screenshot(&c, "demo-destinations").await;

    c.close().await.unwrap();
    server.stop().await;
}

/// The number on the overview's stat labelled `label`.
async fn stat(c: &fantoccini::Client, label: &str) -> i64 {
    for s in c.find_all(Locator::Css(".stats .stat")).await.unwrap() {
        let text = s.text().await.unwrap();
        if text.contains(label) {
            let value = s
                .find(Locator::Css(".stat-value"))
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            return value.trim().replace(',', "").parse().unwrap_or(0);
        }
    }
    0
}

/// The most deliveries retrying in one bar of the overview's chart (its tooltips say
/// "…: 3 succeeded, 0 failed, 2 retrying, …").
async fn chart_retrying(c: &fantoccini::Client) -> i64 {
    let tips: String = c
        .execute(
            "return Array.from(document.querySelectorAll('svg.chart title')).map(t => t.textContent).join('\\n')",
            vec![],
        )
        .await
        .unwrap()
        .as_str()
        .unwrap_or_default()
        .to_owned();
    tips.lines()
        .filter_map(|tip| {
            let before = tip.split(" retrying").next()?;
            before.rsplit(' ').next()?.parse::<i64>().ok()
        })
        .max()
        .unwrap_or(0)
}
