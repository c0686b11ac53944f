//! The console's built assets (`site/pkg`, written by `./dev`'s `build_site`): the
//! bundle's name, their serving and their caching (docs D-"The console's bundle").
//!
//! The build names the wasm, its JavaScript and the CSS after one content hash
//! (`partyflow-<hash>.js`, `partyflow-<hash>_bg.wasm`, `partyflow-<hash>.css`), puts
//! brotli and gzip copies next to each (`.br`, `.gz`) and writes the name to
//! `pkg/bundle.txt`. The server reads that name once at start ([`bundle_name`]) and
//! renders the pages' links with it; `/pkg/…` is served with the precompressed copy
//! the browser's `Accept-Encoding` allows, hashed names as cached for a year and
//! never revalidated ([`cache_policy`]), and every HTML page as `no-cache`
//! ([`html_no_cache`]), so a new release is picked up on the next page load.

use std::path::Path;

use axum::extract::Request;
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use axum::Router;
use tower_http::services::ServeDir;

/// The bundle's name when no `bundle.txt` is there (a site built by hand, or an old
/// build): the unhashed names wasm-bindgen writes.
pub const UNHASHED: &str = "partyflow";

/// The file, under the site's `pkg/`, that names the current bundle.
pub const BUNDLE_FILE: &str = "bundle.txt";

/// `Cache-Control` of a file whose name carries its content hash: its content never
/// changes, so the browser keeps it a year without asking again.
pub const IMMUTABLE: &str = "public, max-age=31536000, immutable";

/// `Cache-Control` of everything else: kept, but checked with the server before use.
pub const NO_CACHE: &str = "no-cache";

/// The bundle's name in the contents of `bundle.txt`: `partyflow-` and 16 lowercase hex
/// digits (one line). Anything else is not a name the build writes.
pub fn parse_bundle_name(contents: &str) -> Option<&str> {
    let name = contents.trim();
    is_hashed_stem(name).then_some(name)
}

/// `partyflow-<16 lowercase hex digits>`.
fn is_hashed_stem(s: &str) -> bool {
    s.strip_prefix("partyflow-").is_some_and(|hash| {
        hash.len() == 16
            && hash
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// The bundle's name from `site_root/pkg/bundle.txt`, or [`UNHASHED`] (with a warning)
/// when it is missing or not one the build writes.
pub fn bundle_name(site_root: &Path) -> String {
    let path = site_root.join("pkg").join(BUNDLE_FILE);
    match std::fs::read_to_string(&path) {
        Ok(contents) => match parse_bundle_name(&contents) {
            Some(name) => name.to_owned(),
            None => {
                tracing::warn!(path = %path.display(), "not a bundle name; serving the unhashed console files");
                UNHASHED.to_owned()
            }
        },
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "no bundle name; serving the unhashed console files");
            UNHASHED.to_owned()
        }
    }
}

/// The `Cache-Control` of a file under `/pkg/` by its path there: [`IMMUTABLE`] for a
/// hashed name (`partyflow-<hash>.js`, `…_bg.wasm`, `….css`, with or without
/// `.br`/`.gz`), [`NO_CACHE`] for anything else (`bundle.txt`, unhashed names).
pub fn cache_policy(path: &str) -> &'static str {
    let file = path.rsplit('/').next().unwrap_or_default();
    let stem = file.split(['.', '_']).next().unwrap_or_default();
    if is_hashed_stem(stem) {
        IMMUTABLE
    } else {
        NO_CACHE
    }
}

/// `/pkg/…`: the files of `site_root/pkg`, the precompressed copy chosen by the
/// request's `Accept-Encoding` (brotli first, then gzip, else the file itself), with
/// their [`cache_policy`] and `Vary: Accept-Encoding`.
pub fn router<S: Clone + Send + Sync + 'static>(site_root: &Path) -> Router<S> {
    let files = ServeDir::new(site_root.join("pkg"))
        .precompressed_br()
        .precompressed_gzip();
    Router::new()
        .nest_service("/pkg", files)
        .layer(axum::middleware::from_fn(with_cache_policy))
}

async fn with_cache_policy(req: Request, next: Next) -> Response {
    let policy = cache_policy(req.uri().path());
    let mut resp = next.run(req).await;
    if resp.status().is_success() || resp.status() == StatusCode::NOT_MODIFIED {
        let headers = resp.headers_mut();
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static(policy));
        // The answer depends on Accept-Encoding (a .br, a .gz or the file): caches in
        // between must keep them apart.
        headers.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
    }
    resp
}

/// Marks every HTML answer `no-cache` (unless it says otherwise): a page names the
/// bundle of the release that rendered it, so it must not outlive the release.
pub async fn html_no_cache(req: Request, next: Next) -> Response {
    let mut resp = next.run(req).await;
    let is_html = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/html"));
    if is_html && !resp.headers().contains_key(header::CACHE_CONTROL) {
        resp.headers_mut()
            .insert(header::CACHE_CONTROL, HeaderValue::from_static(NO_CACHE));
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bundle_name_is_the_one_the_build_writes() {
        assert_eq!(
            parse_bundle_name("partyflow-0123456789abcdef\n"),
            Some("partyflow-0123456789abcdef")
        );
        assert_eq!(parse_bundle_name("partyflow-0123456789ABCDEF"), None);
        assert_eq!(parse_bundle_name("partyflow-0123"), None);
        assert_eq!(parse_bundle_name("../../etc/passwd"), None);
        assert_eq!(parse_bundle_name(""), None);
    }

    #[test]
    fn only_hashed_names_are_immutable() {
        for hashed in [
            "/partyflow-0123456789abcdef.js",
            "/partyflow-0123456789abcdef_bg.wasm",
            "/partyflow-0123456789abcdef_bg.wasm.br",
            "/partyflow-0123456789abcdef.css.gz",
            "/pkg/partyflow-0123456789abcdef.css",
        ] {
            assert_eq!(cache_policy(hashed), IMMUTABLE, "{hashed}");
        }
        for other in [
            "/bundle.txt",
            "/partyflow.js",
            "/partyflow_bg.wasm",
            "/partyflow-0123.css",
            "/",
        ] {
            assert_eq!(cache_policy(other), NO_CACHE, "{other}");
        }
    }

    #[test]
    fn a_missing_bundle_file_means_the_unhashed_names() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(bundle_name(dir.path()), UNHASHED);
        std::fs::create_dir_all(dir.path().join("pkg")).unwrap();
        std::fs::write(
            dir.path().join("pkg").join(BUNDLE_FILE),
            "partyflow-00000000000000ff\n",
        )
        .unwrap();
        assert_eq!(bundle_name(dir.path()), "partyflow-00000000000000ff");
    }
}
