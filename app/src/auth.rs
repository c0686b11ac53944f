//! Signing in and out. Sessions live in the database (tower-sessions), so a
//! restart keeps people signed in; the session ID is renewed at sign-in.

use leptos::prelude::*;

use crate::error::ConsoleError;
use crate::types::SessionUser;

/// Signs in and sends the browser to `next` (a local path) or the home page.
#[server(endpoint = "login")]
pub async fn login(
    email: String,
    password: String,
    next: Option<String>,
) -> Result<(), ConsoleError> {
    use crate::port::{backend, SESSION_USER_KEY};

    let headers = leptos_axum::extract::<axum::http::HeaderMap>()
        .await
        .map_err(|_| ConsoleError::Internal)?;
    // No signing in to someone else's account from another site (login CSRF).
    crate::guard::check_same_origin(&headers)?;
    let session = leptos_axum::extract::<tower_sessions::Session>()
        .await
        .map_err(|_| ConsoleError::Internal)?;
    // The TCP peer (the server serves with connect info), never X-Forwarded-For: the
    // throttle counts failures per source, and a header is whatever the client writes.
    let axum::extract::ConnectInfo(peer) =
        leptos_axum::extract::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
            .await
            .map_err(|_| ConsoleError::Internal)?;
    let next = safe_next(next.as_deref());
    let user = match backend()?
        .authenticate(email.trim(), &password, peer.ip())
        .await
    {
        Ok(user) => user,
        // Back to the form with the reason in the URL: the same path with and without JavaScript.
        Err(e @ (ConsoleError::BadCredentials | ConsoleError::Throttled)) => {
            let code = if e == ConsoleError::Throttled {
                "throttled"
            } else {
                "credentials"
            };
            let next: String = form_urlencoded::byte_serialize(next.as_bytes()).collect();
            leptos_axum::redirect(&format!("/login?error={code}&next={next}"));
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    session
        .cycle_id()
        .await
        .map_err(|_| ConsoleError::Internal)?;
    session
        .insert(SESSION_USER_KEY, &user.id)
        .await
        .map_err(|_| ConsoleError::Internal)?;
    tracing::info!(user.id = %user.id, "console sign-in");
    leptos_axum::redirect(&next);
    Ok(())
}

/// Ends the session and goes to the sign-in page.
#[server(endpoint = "logout")]
pub async fn logout() -> Result<(), ConsoleError> {
    let session = leptos_axum::extract::<tower_sessions::Session>()
        .await
        .map_err(|_| ConsoleError::Internal)?;
    session.flush().await.map_err(|_| ConsoleError::Internal)?;
    leptos_axum::redirect("/login");
    Ok(())
}

/// The signed-in user, or `SignedOut`.
#[server(endpoint = "me")]
pub async fn current_user() -> Result<SessionUser, ConsoleError> {
    use crate::port::{backend, SESSION_USER_KEY};

    let session = leptos_axum::extract::<tower_sessions::Session>()
        .await
        .map_err(|_| ConsoleError::Internal)?;
    let id: Option<String> = session
        .get(SESSION_USER_KEY)
        .await
        .map_err(|_| ConsoleError::Internal)?;
    let Some(id) = id else {
        return Err(ConsoleError::SignedOut);
    };
    backend()?.user(&id).await?.ok_or(ConsoleError::SignedOut)
}

/// True while no console user exists: the sign-in page then links to `/setup`.
#[server(endpoint = "needs_setup")]
pub async fn needs_setup() -> Result<bool, ConsoleError> {
    crate::port::backend()?.needs_setup().await
}

/// First run: creates the first admin and signs them in. Refused (on the server)
/// once any user exists.
#[server(endpoint = "setup")]
pub async fn setup(email: String, password: String) -> Result<(), ConsoleError> {
    use crate::port::{backend, SESSION_USER_KEY};

    let headers = leptos_axum::extract::<axum::http::HeaderMap>()
        .await
        .map_err(|_| ConsoleError::Internal)?;
    crate::guard::check_same_origin(&headers)?;
    let session = leptos_axum::extract::<tower_sessions::Session>()
        .await
        .map_err(|_| ConsoleError::Internal)?;
    let user = backend()?
        .create_first_admin(email.trim(), &password)
        .await?;
    session
        .cycle_id()
        .await
        .map_err(|_| ConsoleError::Internal)?;
    session
        .insert(SESSION_USER_KEY, &user.id)
        .await
        .map_err(|_| ConsoleError::Internal)?;
    tracing::info!(user.id = %user.id, "first admin created in the console");
    leptos_axum::redirect("/");
    Ok(())
}

/// Only local paths are followed after sign-in, never another site.
pub fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(p) if p.starts_with('/') && !p.starts_with("//") && !p.contains('\\') => p.to_owned(),
        _ => "/".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::safe_next;

    #[test]
    fn sign_in_only_redirects_to_local_paths() {
        assert_eq!(
            safe_next(Some("/deliveries?status=failed")),
            "/deliveries?status=failed"
        );
        assert_eq!(safe_next(Some("//evil.example")), "/");
        assert_eq!(safe_next(Some("https://evil.example")), "/");
        assert_eq!(safe_next(Some("/\\evil.example")), "/");
        assert_eq!(safe_next(None), "/");
    }
}
