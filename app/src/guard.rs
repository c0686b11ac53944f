//! (server only) What every console server function does before and after its work:
//! who is asking ([`signed_in`]); for changes, that the request came from the
//! console's own pages ([`for_change`], a CSRF check on top of the `SameSite=Strict`
//! session cookie); and, for plain HTML form posts (no JavaScript), keeping the
//! result in the session and going back to the page ([`answer`]); for a plain form post
//! that is refused, keeping what was typed so the page can show it again ([`keep_typed`]).

use axum::http::{header, HeaderMap};
use serde::{Deserialize, Serialize};
use tower_sessions::Session;

use crate::error::ConsoleError;
use crate::port::{backend, SESSION_USER_KEY};
use crate::types::{Notice, SessionUser};

/// The session key of the last result of a plain form post.
const FLASH_KEY: &str = "flash";
/// How long a kept result may still be shown.
const FLASH_TTL_MS: i64 = 10 * 60 * 1000;

async fn session() -> Result<Session, ConsoleError> {
    leptos_axum::extract::<Session>()
        .await
        .map_err(|_| ConsoleError::Internal)
}

async fn headers() -> Result<HeaderMap, ConsoleError> {
    leptos_axum::extract::<HeaderMap>()
        .await
        .map_err(|_| ConsoleError::Internal)
}

/// The signed-in user, fresh from the database (a disabled user is signed out).
pub async fn signed_in() -> Result<SessionUser, ConsoleError> {
    let id: Option<String> = session()
        .await?
        .get(SESSION_USER_KEY)
        .await
        .map_err(|_| ConsoleError::Internal)?;
    let Some(id) = id else {
        return Err(ConsoleError::SignedOut);
    };
    backend()?.user(&id).await?.ok_or(ConsoleError::SignedOut)
}

/// The signed-in user, for a request that changes something: refused when the
/// browser says it comes from another site.
pub async fn for_change() -> Result<SessionUser, ConsoleError> {
    check_same_origin(&headers().await?)?;
    let mut user = signed_in().await?;
    // The TCP peer (the server serves with connect info), never a forwarded header:
    // what the audit log records as the change's source.
    user.source = leptos_axum::extract::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .await
        .ok()
        .map(|axum::extract::ConnectInfo(peer)| peer.ip());
    Ok(user)
}

/// Refuses a request whose `Origin` (or, without one, `Referer`) names a host other
/// than the one it was sent to. Requests with neither (non-browser clients) pass:
/// the session cookie is `SameSite=Strict`, so a browser on another site sends no
/// session with them anyway.
pub fn check_same_origin(headers: &HeaderMap) -> Result<(), ConsoleError> {
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or_default();
    let claimed = headers
        .get(header::ORIGIN)
        .or_else(|| headers.get(header::REFERER))
        .map(|v| v.to_str().unwrap_or("invalid"));
    match claimed {
        None => Ok(()),
        Some(url) if !host.is_empty() && authority(url) == Some(host) => Ok(()),
        Some(url) => {
            tracing::warn!(origin = %url, host = %host, "refused a cross-site console request");
            Err(ConsoleError::CrossSite)
        }
    }
}

/// `host:port` of an absolute http(s) URL.
fn authority(url: &str) -> Option<&str> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))?;
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..end];
    (!authority.is_empty() && !authority.contains('@')).then_some(authority)
}

#[derive(Serialize, Deserialize)]
struct Flash {
    id: String,
    at: i64,
    notice: Notice,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}

/// Whether the request is a plain HTML form post (the browser runs no JavaScript):
/// then the answer is a redirect back, not data.
async fn is_plain_form_post() -> bool {
    headers().await.ok().is_some_and(|h| {
        h.get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.contains("text/html"))
    })
}

/// Finishes a change. With JavaScript the notice is the answer. A plain form post
/// instead goes back to the page it came from (or `back`), with the notice kept in
/// the session and named in the URL (`?flash=…`), so the page can show it.
/// Errors are left to the server function: they come back in the URL (`__err`).
pub async fn answer(notice: Notice, back: Option<&str>) -> Result<Notice, ConsoleError> {
    if !is_plain_form_post().await {
        return Ok(notice);
    }
    let at = now_ms();
    let id = format!("{at:x}");
    session()
        .await?
        .insert(
            FLASH_KEY,
            Flash {
                id: id.clone(),
                at,
                notice: notice.clone(),
            },
        )
        .await
        .map_err(|_| ConsoleError::Internal)?;
    let referer = headers()
        .await?
        .get(header::REFERER)
        .and_then(|v| v.to_str().ok())
        .map(local_part)
        .unwrap_or_else(|| "/".to_owned());
    let target = back.map(str::to_owned).unwrap_or(referer);
    leptos_axum::redirect(&with_flash(&target, &id));
    Ok(notice)
}

/// The path and query of a URL (the part after the authority), or `/`.
fn local_part(url: &str) -> String {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .unwrap_or(url);
    match rest.find('/') {
        Some(i) if url != rest => rest[i..].to_owned(),
        _ if rest.starts_with('/') => rest.to_owned(),
        _ => "/".to_owned(),
    }
}

/// `target` with `flash=id`, dropping an older flash and any error from a previous post.
fn with_flash(target: &str, id: &str) -> String {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let path = path.split('#').next().unwrap_or("/");
    let mut out = form_urlencoded::Serializer::new(String::new());
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        if !matches!(k.as_ref(), "flash" | "__err" | "__path") {
            out.append_pair(&k, &v);
        }
    }
    out.append_pair("flash", id);
    format!("{path}?{}", out.finish())
}

/// The kept result named `id`, if it is this session's latest and recent.
pub async fn flash(id: &str) -> Result<Option<Notice>, ConsoleError> {
    let kept: Option<Flash> = session()
        .await?
        .get(FLASH_KEY)
        .await
        .map_err(|_| ConsoleError::Internal)?;
    Ok(kept
        .filter(|f| f.id == id && now_ms() - f.at < FLASH_TTL_MS)
        .map(|f| f.notice))
}

/// The session key of what was typed into the last refused plain form post.
const TYPED_KEY: &str = "typed";
/// The most a form body may be to be kept (a destination's settings are a few KiB).
const TYPED_MAX_BYTES: usize = 1024 * 1024;

/// What was typed into a form whose plain post (no JavaScript) a server function refused:
/// the function's path and the fields as posted.
#[derive(Serialize, Deserialize)]
struct Typed {
    path: String,
    at: i64,
    fields: Vec<(String, String)>,
}

/// Whether a field of a refused form is kept to be shown again: everything but
/// passwords, which stay only in the request that carried them.
pub fn keeps_field(name: &str) -> bool {
    !name.to_ascii_lowercase().contains("password")
}

/// Whether the `Location` of an answer to a plain form post is a server function's
/// refusal: back to the page with the error in the URL (`__err`).
pub fn is_refusal(location: &str) -> bool {
    let query = location.split_once('?').map(|(_, q)| q).unwrap_or_default();
    form_urlencoded::parse(query.as_bytes()).any(|(k, _)| k == "__err")
}

/// The form's fields that [`keeps_field`], in their order.
fn kept_fields(body: &[u8]) -> Vec<(String, String)> {
    form_urlencoded::parse(body)
        .filter(|(k, _)| keeps_field(k))
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

/// Middleware around the server functions: when a plain HTML form post (no JavaScript)
/// is refused — the function answers with a redirect back to the page carrying `__err`
/// — what was typed is kept in the session, so the page renders the form with the
/// user's values instead of the saved ones ([`typed`], read by the page through
/// `components::use_typed`). Every form of the console gets this from here, once.
pub async fn keep_typed(
    session: Session,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let form_post = req.method() == axum::http::Method::POST
        && req.uri().path().starts_with("/api/")
        && req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"))
        && req
            .headers()
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.contains("text/html"));
    if !form_post {
        return next.run(req).await;
    }
    let (parts, body) = req.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, TYPED_MAX_BYTES).await else {
        return axum::http::StatusCode::PAYLOAD_TOO_LARGE.into_response();
    };
    let path = parts.uri.path().to_owned();
    let req = axum::extract::Request::from_parts(parts, axum::body::Body::from(bytes.clone()));
    let resp = next.run(req).await;
    let refused = resp
        .headers()
        .get(header::LOCATION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(is_refusal);
    if refused {
        let typed = Typed {
            path,
            at: now_ms(),
            fields: kept_fields(&bytes),
        };
        if let Err(e) = session.insert(TYPED_KEY, typed).await {
            tracing::warn!(error = %e, "could not keep a refused form's fields");
        }
    }
    resp
}

/// The fields typed into the last refused plain post to the server function at `path`,
/// if recent (they are shown once the page is back, with the refusal in its URL).
pub async fn typed(path: &str) -> Result<Option<Vec<(String, String)>>, ConsoleError> {
    let kept: Option<Typed> = session()
        .await?
        .get(TYPED_KEY)
        .await
        .map_err(|_| ConsoleError::Internal)?;
    Ok(kept
        .filter(|t| t.path == path && now_ms() - t.at < FLASH_TTL_MS)
        .map(|t| t.fields))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn with(host: &str, name: header::HeaderName, value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_str(host).unwrap());
        h.insert(name, HeaderValue::from_str(value).unwrap());
        h
    }

    #[test]
    fn a_change_from_another_site_is_refused() {
        let ok = with("127.0.0.1:3000", header::ORIGIN, "http://127.0.0.1:3000");
        assert!(check_same_origin(&ok).is_ok());
        let evil = with("127.0.0.1:3000", header::ORIGIN, "http://evil.example");
        assert_eq!(check_same_origin(&evil), Err(ConsoleError::CrossSite));
        let null = with("127.0.0.1:3000", header::ORIGIN, "null");
        assert_eq!(check_same_origin(&null), Err(ConsoleError::CrossSite));
        let referer = with(
            "127.0.0.1:3000",
            header::REFERER,
            "http://127.0.0.1:3000/deliveries?x=1",
        );
        assert!(check_same_origin(&referer).is_ok());
        let evil_referer = with(
            "127.0.0.1:3000",
            header::REFERER,
            "http://127.0.0.1:3000.evil.example/",
        );
        assert!(check_same_origin(&evil_referer).is_err());
        let mut none = HeaderMap::new();
        none.insert(header::HOST, HeaderValue::from_static("127.0.0.1:3000"));
        assert!(check_same_origin(&none).is_ok());
    }

    #[test]
    fn a_plain_form_post_goes_back_with_its_flash_and_without_old_errors() {
        assert_eq!(local_part("http://h:1/deliveries?a=1"), "/deliveries?a=1");
        assert_eq!(local_part("http://h:1"), "/");
        assert_eq!(
            with_flash("/x?a=1&flash=old&__err=e&__path=p", "n"),
            "/x?a=1&flash=n"
        );
        assert_eq!(with_flash("/x#frag", "n"), "/x?flash=n");
    }

    #[test]
    fn a_refused_form_keeps_its_fields_but_never_a_password() {
        assert!(is_refusal(
            "/destinations/d1/edit?__path=%2Fapi%2Fx&__err=eyJ9"
        ));
        assert!(!is_refusal("/destinations/d1/edit?flash=18f"));
        assert!(!is_refusal("/x?a=__err"));
        assert_eq!(
            kept_fields(b"id=d1&transformation=%7Bnope&password=hunter2&new_password=x"),
            vec![
                ("id".to_owned(), "d1".to_owned()),
                ("transformation".to_owned(), "{nope".to_owned())
            ]
        );
    }
}
