//! The console's bundle (docs D-"The console's bundle"): what Chromium downloads on a
//! first visit (its own resource timings: ≤ 600 KB of wasm, JavaScript and CSS over
//! the wire) and on a second one (nothing: every file from its cache), the time until
//! the page is hydrated, and the headers that make it so (brotli or gzip by
//! `Accept-Encoding`, a year and `immutable` for hashed names, `no-cache` for HTML).

use end2end::*;
use serde_json::Value;

/// The issue's target for the first load's wasm + JavaScript + CSS over the wire.
const FIRST_LOAD_BUDGET: u64 = 600 * 1000;

/// The bundle's files the page loaded: `[path, transferSize, encodedBodySize,
/// decodedBodySize]` from `performance.getEntriesByType('resource')`.
async fn bundle_entries(c: &fantoccini::Client) -> Vec<(String, u64, u64, u64)> {
    let entries = c
        .execute(
            r#"return performance.getEntriesByType('resource')
                .map(e => [new URL(e.name).pathname, e.transferSize, e.encodedBodySize, e.decodedBodySize])
                .filter(([path]) => /^\/pkg\/partyflow-[0-9a-f]{16}(_bg\.wasm|\.js|\.css)$/.test(path));"#,
            vec![],
        )
        .await
        .unwrap();
    entries
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let n = |i: usize| e[i].as_f64().unwrap_or_default() as u64;
            (e[0].as_str().unwrap().to_owned(), n(1), n(2), n(3))
        })
        .collect()
}

/// Milliseconds from the start of the navigation to the page's hydration
/// (`body[data-hydrated-at]`, set by the app when it is live).
async fn time_to_hydrated(c: &fantoccini::Client) -> f64 {
    let ms: Value = c
        .execute(
            "return Number(document.body.dataset.hydratedAt) - performance.timeOrigin;",
            vec![],
        )
        .await
        .unwrap();
    ms.as_f64().unwrap()
}

fn print_entries(visit: &str, entries: &[(String, u64, u64, u64)]) {
    for (path, transfer, encoded, decoded) in entries {
        println!(
            "{visit}: {path}: {transfer} bytes over the wire, {encoded} encoded, {decoded} decoded"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bundle_is_small_on_the_first_visit_and_cached_on_the_second() {
    let server = start_server().await;
    let driver = Driver::start();
    let profile = tempfile::tempdir().unwrap();

    // First visit, with an empty cache.
    let c = browser(&driver, profile.path()).await;
    open(&c, &server, "/login").await;
    let first = bundle_entries(&c).await;
    print_entries("first visit", &first);
    for kind in ["_bg.wasm", ".js", ".css"] {
        assert!(
            first.iter().any(|(path, ..)| path.ends_with(kind)),
            "the page loads the bundle's {kind}: {first:?}"
        );
    }
    let over_the_wire: u64 = first.iter().map(|e| e.1).sum();
    assert!(
        first.iter().all(|e| e.1 > 0),
        "a first visit downloads the bundle: {first:?}"
    );
    assert!(
        first
            .iter()
            .all(|(_, _, encoded, decoded)| encoded < decoded),
        "every file of the bundle comes compressed: {first:?}"
    );
    // Bytes, not time: the same on a loaded machine, so the issue's target is asserted
    // (docs D18: every build with `--cfg erase_components`).
    println!(
        "first load: {over_the_wire} bytes of wasm + JS + CSS over the wire, {:.2}× the target of {FIRST_LOAD_BUDGET} ({})",
        over_the_wire as f64 / FIRST_LOAD_BUDGET as f64,
        if over_the_wire <= FIRST_LOAD_BUDGET { "met" } else { "missed" }
    );
    assert!(
        over_the_wire <= FIRST_LOAD_BUDGET,
        "the first load's wasm + JS + CSS: {over_the_wire} bytes over the wire, above {FIRST_LOAD_BUDGET}: {first:?}"
    );
    let hydrated = time_to_hydrated(&c).await;
    println!("first visit: {over_the_wire} bytes of wasm + JS + CSS over the wire; hydrated after {hydrated:.0} ms");
    c.close().await.unwrap();

    // Second visit: a new browser on the same profile, a new page load.
    let c = browser(&driver, profile.path()).await;
    open(&c, &server, "/login").await;
    let second = bundle_entries(&c).await;
    print_entries("second visit", &second);
    assert!(!second.is_empty(), "the second visit loads the bundle too");
    assert!(
        second.iter().all(|e| e.1 == 0),
        "a second visit takes every file of the bundle from the cache (transferSize 0): {second:?}"
    );
    let hydrated = time_to_hydrated(&c).await;
    println!("second visit: 0 bytes over the wire; hydrated after {hydrated:.0} ms");
    c.close().await.unwrap();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn assets_come_precompressed_and_hashed_names_are_immutable() {
    let server = start_server().await;
    let bundle = server::assets::bundle_name(&server::testkit::site_root());
    assert_ne!(
        bundle,
        server::assets::UNHASHED,
        "the site is built with hashed names"
    );
    let client = reqwest::Client::new();
    let get = |path: String, accept: &'static str| {
        let req = client.get(server.url(&path));
        let req = if accept.is_empty() {
            req
        } else {
            req.header("accept-encoding", accept)
        };
        async move { req.send().await.unwrap() }
    };
    for file in [
        format!("{bundle}_bg.wasm"),
        format!("{bundle}.js"),
        format!("{bundle}.css"),
    ] {
        let path = format!("/pkg/{file}");
        let plain = std::fs::read(server::testkit::site_root().join("pkg").join(&file)).unwrap();
        for (accept, encoding, suffix) in [
            ("br, gzip, deflate", Some("br"), ".br"),
            ("gzip, deflate", Some("gzip"), ".gz"),
            ("", None, ""),
        ] {
            let resp = get(path.clone(), accept).await;
            assert_eq!(resp.status(), 200, "{path} ({accept})");
            let headers = resp.headers().clone();
            assert_eq!(
                headers.get("content-encoding").map(|v| v.to_str().unwrap()),
                encoding,
                "{path} with Accept-Encoding {accept:?}"
            );
            assert_eq!(
                headers["cache-control"], "public, max-age=31536000, immutable",
                "{path}"
            );
            assert_eq!(headers["vary"], "accept-encoding", "{path}");
            let body = resp.bytes().await.unwrap();
            let expected = std::fs::read(
                server::testkit::site_root()
                    .join("pkg")
                    .join(format!("{file}{suffix}")),
            )
            .unwrap();
            assert_eq!(body.as_ref(), expected.as_slice(), "{path} ({accept})");
            if encoding.is_some() {
                assert!(body.len() < plain.len() / 2, "{path} compresses ({accept})");
            }
        }
        let wasm_type = get(path.clone(), "").await.headers()["content-type"].clone();
        if file.ends_with(".wasm") {
            assert_eq!(wasm_type, "application/wasm");
        }
    }

    // The bundle's name file is served for what it is, revalidated on every use.
    let name = get("/pkg/bundle.txt".into(), "").await;
    assert_eq!(name.headers()["cache-control"], "no-cache");

    // HTML pages are never kept without asking: they name the current bundle.
    let login = get("/login".into(), "br, gzip").await;
    assert_eq!(login.status(), 200);
    assert!(login.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
    assert_eq!(login.headers()["cache-control"], "no-cache");
    let html = login.text().await.unwrap();
    assert!(html.contains(&format!("/pkg/{bundle}.js")), "{html}");
    assert!(html.contains(&format!("/pkg/{bundle}_bg.wasm")), "{html}");
    assert!(html.contains(&format!("/pkg/{bundle}.css")), "{html}");
    let session = http_session(&server, ADMIN).await;
    let overview = session.get(server.url("/")).send().await.unwrap();
    assert_eq!(overview.status(), 200);
    assert_eq!(overview.headers()["cache-control"], "no-cache");
    server.stop().await;
}
