//! The error class of an attempt (docs §2.2): from the receiver's status, or from
//! the reqwest error when no answer came (timeout, dns, tls, connect, blocked, request).
//!
//! reqwest exposes a few kinds (`is_timeout`, `is_connect`, ...) but not DNS or TLS
//! failures; those are told apart by the `io::Error` kinds and messages in the
//! `source()` chain, in one small matcher ([`message_class`]).

use std::error::Error as StdError;
use std::io;

use crate::domain::ErrorClass;

use super::ssrf;

/// The class of an answer: `None` for 2xx (success), `Redirect` for 3xx (never
/// followed), `Http` for everything else, including 1xx and nonsense codes.
pub fn classify_status(status: u16) -> Option<ErrorClass> {
    match status {
        200..=299 => None,
        300..=399 => Some(ErrorClass::Redirect),
        _ => Some(ErrorClass::Http),
    }
}

/// The class of an attempt that got no answer, judged by the whole `source()` chain.
///
/// In order: an address refused by [`ssrf::GuardedResolver`] is `Blocked`; a timeout is
/// `Timeout`; a request reqwest could not build is `Request`; then TLS, DNS and
/// connection failures by their io kinds and messages; a redirect error is `Redirect`;
/// what remains is `Request` if reqwest calls it a request error, else `Connect`.
pub fn classify_error(err: &reqwest::Error) -> ErrorClass {
    if ssrf::find_blocked(err).is_some() {
        return ErrorClass::Blocked;
    }
    // The top error's own text holds the URL, which could say anything: only its sources count.
    let sources: Vec<&(dyn StdError + 'static)> =
        std::iter::successors(err.source(), |e| (*e).source()).collect();
    let io_kinds: Vec<io::ErrorKind> = sources
        .iter()
        .filter_map(|e| e.downcast_ref::<io::Error>())
        .map(io::Error::kind)
        .collect();

    if err.is_timeout() || io_kinds.contains(&io::ErrorKind::TimedOut) {
        return ErrorClass::Timeout;
    }
    if err.is_builder() {
        return ErrorClass::Request;
    }
    let said: Vec<ErrorClass> = sources
        .iter()
        .filter_map(|e| message_class(&e.to_string()))
        .collect();
    if said.contains(&ErrorClass::Tls) {
        return ErrorClass::Tls;
    }
    if said.contains(&ErrorClass::Dns) {
        return ErrorClass::Dns;
    }
    let dropped = io_kinds.iter().any(|kind| {
        matches!(
            kind,
            io::ErrorKind::ConnectionRefused
                | io::ErrorKind::ConnectionReset
                | io::ErrorKind::ConnectionAborted
                | io::ErrorKind::BrokenPipe
                | io::ErrorKind::UnexpectedEof
                | io::ErrorKind::NotConnected
        )
    });
    if dropped || err.is_connect() || said.contains(&ErrorClass::Connect) {
        return ErrorClass::Connect;
    }
    if err.is_redirect() {
        return ErrorClass::Redirect;
    }
    if err.is_request() || err.is_builder() {
        ErrorClass::Request
    } else {
        ErrorClass::Connect
    }
}

/// What one error message in a reqwest/hyper/rustls/resolver chain says went wrong:
/// `Tls`, `Dns` or `Connect` (in that order when several fit), or `None`.
///
/// The texts come from rustls (through tokio-rustls and hyper-rustls), the system
/// resolver (`getaddrinfo` via `lookup_host`, on Linux, macOS and Windows), hyper-util
/// (`"dns error"` wraps every resolver failure) and hyper. A new dependency version that
/// rewords them degrades a class to `Connect` or `Request`; the tests in this module and
/// the integration tests against real failures catch that.
fn message_class(message: &str) -> Option<ErrorClass> {
    const TLS: &[&str] = &[
        "tls",
        "ssl",
        "certificate",
        "handshake",
        "invalidcertificate",
        "unknownissuer",
        "peer is incompatible",
        "peer misbehaved",
        "corrupt message",
        "fatal alert",
    ];
    const DNS: &[&str] = &[
        "dns error",
        "failed to lookup address",
        "name or service not known",
        "nodename nor servname",
        "no address associated",
        "temporary failure in name resolution",
        "no such host is known",
        "resolved to no addresses",
    ];
    const CONNECT: &[&str] = &[
        "connection closed before message completed",
        "connection refused",
        "connection reset",
        "connection aborted",
        "broken pipe",
        // The receiver answered something that is not HTTP, or a head hyper will not take
        // (over ~400 KiB or 100 headers, a broken Content-Length): its fault, like a
        // dropped connection, and retried like one.
        "invalid http",
        "received unexpected message from connection",
        "message head is too large",
        "invalid content-length parsed",
        "unexpected transfer-encoding parsed",
    ];
    let message = message.to_ascii_lowercase();
    let says = |needles: &[&str]| needles.iter().any(|n| message.contains(n));
    if says(TLS) {
        Some(ErrorClass::Tls)
    } else if says(DNS) {
        Some(ErrorClass::Dns)
    } else if says(CONNECT) {
        Some(ErrorClass::Connect)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use crate::dispatch::ssrf::{GuardedResolver, NetworkPolicy};

    fn client(timeout: Duration) -> reqwest::Client {
        reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(timeout)
            .build()
            .unwrap()
    }

    async fn send_error(client: &reqwest::Client, url: &str) -> reqwest::Error {
        match client.post(url).body("{}").send().await {
            Ok(resp) => panic!("{url} answered {}", resp.status()),
            Err(e) => e,
        }
    }

    #[test]
    fn a_2xx_status_is_a_success() {
        for status in [200, 201, 202, 204, 299] {
            assert_eq!(classify_status(status), None);
        }
    }

    #[test]
    fn a_3xx_status_is_a_redirect() {
        for status in [300, 301, 302, 303, 304, 307, 308, 399] {
            assert_eq!(classify_status(status), Some(ErrorClass::Redirect));
        }
    }

    #[test]
    fn every_other_status_is_an_http_failure() {
        for status in [0, 100, 199, 400, 404, 408, 429, 500, 503, 599, 999] {
            assert_eq!(classify_status(status), Some(ErrorClass::Http));
        }
    }

    #[test]
    fn rustls_messages_say_tls() {
        for message in [
            "invalid peer certificate: UnknownIssuer",
            "invalid peer certificate: Expired",
            "invalid peer certificate: NotValidForName",
            "received corrupt message of type InvalidContentType",
            "received fatal alert: HandshakeFailure",
            "peer is incompatible: Tls12NotOffered",
            "peer misbehaved: IncorrectBinderValue",
            "tls handshake eof",
            "InvalidCertificate(UnknownIssuer)",
        ] {
            assert_eq!(message_class(message), Some(ErrorClass::Tls), "{message}");
        }
    }

    #[test]
    fn resolver_messages_say_dns() {
        for message in [
            "dns error",
            "failed to lookup address information: Name or service not known",
            "failed to lookup address information: nodename nor servname provided, or not known",
            "failed to lookup address information: No address associated with hostname",
            "failed to lookup address information: Temporary failure in name resolution",
            "No such host is known. (os error 11001)",
            "the name resolved to no addresses",
        ] {
            assert_eq!(message_class(message), Some(ErrorClass::Dns), "{message}");
        }
    }

    #[test]
    fn dropped_connection_messages_say_connect() {
        for message in [
            "connection closed before message completed",
            "Connection refused (os error 111)",
            "Connection reset by peer (os error 104)",
            "Broken pipe (os error 32)",
            "invalid HTTP version parsed",
            "message head is too large",
            "invalid content-length parsed",
        ] {
            assert_eq!(
                message_class(message),
                Some(ErrorClass::Connect),
                "{message}"
            );
        }
    }

    #[test]
    fn other_messages_say_nothing() {
        for message in [
            "client error (Connect)",
            "tcp connect error",
            "builder error",
            "",
        ] {
            assert_eq!(message_class(message), None, "{message}");
        }
    }

    #[test]
    fn tls_wins_over_dns_and_dns_over_connect_in_one_message() {
        assert_eq!(
            message_class("dns error after tls handshake"),
            Some(ErrorClass::Tls)
        );
        assert_eq!(
            message_class("dns error: connection refused"),
            Some(ErrorClass::Dns)
        );
    }

    #[tokio::test]
    async fn a_closed_loopback_port_is_a_connect_failure() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let err = send_error(
            &client(Duration::from_secs(10)),
            &format!("http://127.0.0.1:{port}/"),
        )
        .await;
        assert_eq!(classify_error(&err), ErrorClass::Connect, "{err:?}");
    }

    #[tokio::test]
    async fn a_name_that_does_not_resolve_is_a_dns_failure() {
        let err = send_error(
            &client(Duration::from_secs(30)),
            &format!("http://{}/", crate::testkit::UNRESOLVABLE_HOST),
        )
        .await;
        assert_eq!(classify_error(&err), ErrorClass::Dns, "{err:?}");
    }

    #[tokio::test]
    async fn a_name_that_does_not_resolve_through_the_guarded_resolver_is_a_dns_failure() {
        let client = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(30))
            .dns_resolver(Arc::new(GuardedResolver::new(Arc::new(
                NetworkPolicy::default(),
            ))))
            .build()
            .unwrap();
        let err = send_error(
            &client,
            &format!("http://{}/", crate::testkit::UNRESOLVABLE_HOST),
        )
        .await;
        assert_eq!(classify_error(&err), ErrorClass::Dns, "{err:?}");
    }

    #[tokio::test]
    async fn a_receiver_that_never_answers_is_a_timeout() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let holder = tokio::spawn(async move {
            let (socket, _) = listener.accept().await.unwrap();
            tokio::time::sleep(Duration::from_secs(5)).await;
            drop(socket);
        });
        let err = send_error(
            &client(Duration::from_millis(200)),
            &format!("http://127.0.0.1:{port}/"),
        )
        .await;
        holder.abort();
        assert_eq!(classify_error(&err), ErrorClass::Timeout, "{err:?}");
    }

    #[tokio::test]
    async fn plain_http_answering_an_https_request_is_a_tls_failure() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 1024];
            let _ = socket.read(&mut buf).await;
            let _ = socket
                .write_all(
                    b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                )
                .await;
            let _ = socket.shutdown().await;
        });
        let err = send_error(
            &client(Duration::from_secs(10)),
            &format!("https://127.0.0.1:{port}/"),
        )
        .await;
        server.abort();
        assert_eq!(classify_error(&err), ErrorClass::Tls, "{err:?}");
    }

    #[tokio::test]
    async fn a_name_resolving_to_loopback_is_blocked_by_the_guarded_resolver() {
        let client = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(10))
            .dns_resolver(Arc::new(GuardedResolver::new(Arc::new(
                NetworkPolicy::default(),
            ))))
            .build()
            .unwrap();
        let err = send_error(&client, "http://localhost:1/").await;
        assert_eq!(classify_error(&err), ErrorClass::Blocked, "{err:?}");
        let blocked = ssrf::find_blocked(&err).unwrap();
        assert!(blocked.ip.is_loopback());
    }

    #[tokio::test]
    async fn a_url_reqwest_cannot_use_is_a_request_failure() {
        let err = send_error(&client(Duration::from_secs(1)), "not a url").await;
        assert_eq!(classify_error(&err), ErrorClass::Request, "{err:?}");
    }
}
