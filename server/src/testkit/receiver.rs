//! A real HTTP receiver on loopback for deliveries: it records every request and
//! answers as the test steers it — the next answers in order ([`Receiver::script`]),
//! a standing answer per path ([`Receiver::reply_at`]), or the default.

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::IntoResponse as _;

use super::wait::eventually;

/// What a [`Receiver`] answers to one request.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
    pub delay: Duration,
}

impl Reply {
    pub fn status(status: u16) -> Self {
        Reply {
            status,
            headers: Vec::new(),
            body: String::new(),
            delay: Duration::ZERO,
        }
    }
    pub fn header(mut self, k: &str, v: &str) -> Self {
        self.headers.push((k.into(), v.into()));
        self
    }
    pub fn body(mut self, b: &str) -> Self {
        self.body = b.into();
        self
    }
    pub fn after(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }
}

/// One request a [`Receiver`] got.
#[derive(Debug, Clone)]
pub struct Received {
    pub path: String,
    pub headers: HeaderMap,
    pub body: String,
    pub at: Instant,
}

impl Received {
    pub fn header(&self, name: &str) -> String {
        self.headers
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default()
    }
}

/// How the receiver answers: the script first (any path), then the path's standing
/// reply, then the default.
#[derive(Default)]
struct Answers {
    script: VecDeque<Reply>,
    by_path: HashMap<String, Reply>,
    default: Option<Reply>,
}

impl Answers {
    fn next_for(&mut self, path: &str) -> Reply {
        self.script
            .pop_front()
            .or_else(|| self.by_path.get(path).cloned())
            .or_else(|| self.default.clone())
            .unwrap_or_else(|| Reply::status(200).body("ok"))
    }
}

/// A real HTTP receiver on loopback: records every request and answers as steered.
#[derive(Clone)]
pub struct Receiver {
    pub addr: SocketAddr,
    /// Requests being answered right now, and the most there ever were at once.
    in_flight: Arc<AtomicUsize>,
    max_in_flight: Arc<AtomicUsize>,
    /// `webhook-id`s being answered right now, to catch a delivery in flight twice.
    open_ids: Arc<Mutex<HashSet<String>>>,
    overlaps: Arc<AtomicUsize>,
    got: Arc<Mutex<Vec<Received>>>,
    answers: Arc<Mutex<Answers>>,
}

/// A request being answered: out of flight (its `webhook-id` no longer open) when dropped.
struct Answering<'r> {
    receiver: &'r Receiver,
    webhook_id: Option<String>,
}

impl Drop for Answering<'_> {
    fn drop(&mut self) {
        if let Some(id) = &self.webhook_id {
            self.receiver.open_ids.lock().unwrap().remove(id);
        }
        self.receiver.in_flight.fetch_sub(1, SeqCst);
    }
}

impl Receiver {
    pub async fn start() -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let r = Receiver {
            addr: listener.local_addr().unwrap(),
            in_flight: Default::default(),
            max_in_flight: Default::default(),
            open_ids: Default::default(),
            overlaps: Default::default(),
            got: Default::default(),
            answers: Default::default(),
        };
        let me = r.clone();
        let app = axum::Router::new().fallback(move |req: axum::extract::Request| {
            let me = me.clone();
            async move { me.answer(req).await }
        });
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        r
    }

    async fn answer(&self, req: axum::extract::Request) -> axum::response::Response {
        let now_in = self.in_flight.fetch_add(1, SeqCst) + 1;
        self.max_in_flight.fetch_max(now_in, SeqCst);
        let (parts, body) = req.into_parts();
        let webhook_id = parts
            .headers
            .get("webhook-id")
            .map(|v| v.to_str().unwrap_or("").to_owned());
        if let Some(id) = &webhook_id {
            if !self.open_ids.lock().unwrap().insert(id.clone()) {
                self.overlaps.fetch_add(1, SeqCst);
            }
        }
        // Out of flight however the answer ends, also when the sender's connection dies
        // midway (a server killed with -9): hyper then drops this future, and a request
        // that can no longer be answered is in flight no more.
        let answering = Answering {
            receiver: self,
            webhook_id: webhook_id.clone(),
        };
        let Ok(body) = axum::body::to_bytes(body, usize::MAX).await else {
            return StatusCode::BAD_REQUEST.into_response();
        };
        let path = parts.uri.path().to_owned();
        self.got.lock().unwrap().push(Received {
            path: path.clone(),
            headers: parts.headers,
            body: String::from_utf8_lossy(&body).into_owned(),
            at: Instant::now(),
        });
        let reply = self.answers.lock().unwrap().next_for(&path);
        tokio::time::sleep(reply.delay).await;
        drop(answering);
        let mut resp = axum::response::Response::new(axum::body::Body::from(reply.body));
        *resp.status_mut() = StatusCode::from_u16(reply.status).unwrap();
        for (k, v) in reply.headers {
            resp.headers_mut().insert(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(&v).unwrap(),
            );
        }
        resp
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// Answers the next requests with these replies, in order.
    pub fn script(&self, replies: impl IntoIterator<Item = Reply>) {
        self.answers.lock().unwrap().script.extend(replies);
    }

    /// From now on, requests to `path` get `reply` (once the script is used up).
    pub fn reply_at(&self, path: &str, reply: Reply) {
        self.answers
            .lock()
            .unwrap()
            .by_path
            .insert(path.to_owned(), reply);
    }

    /// From now on, every other request gets `reply` (200 `ok` until then).
    pub fn set_default(&self, reply: Reply) {
        self.answers.lock().unwrap().default = Some(reply);
    }

    /// The most requests this receiver was answering at once.
    pub fn max_in_flight(&self) -> usize {
        self.max_in_flight.load(SeqCst)
    }

    /// How often a `webhook-id` arrived while the same one was still being answered.
    pub fn overlaps(&self) -> usize {
        self.overlaps.load(SeqCst)
    }

    /// Every request so far, in arrival order.
    pub fn received(&self) -> Vec<Received> {
        self.got.lock().unwrap().clone()
    }

    /// The requests so far to `path`, in arrival order.
    pub fn received_at(&self, path: &str) -> Vec<Received> {
        self.received()
            .into_iter()
            .filter(|r| r.path == path)
            .collect()
    }

    /// Waits until at least `n` requests arrived.
    pub async fn wait_for(&self, n: usize) -> Vec<Received> {
        eventually(30, || async {
            let got = self.received();
            (got.len() >= n).then_some(got)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_script_comes_first_then_the_path_then_the_default() {
        let mut answers = Answers::default();
        assert_eq!(answers.next_for("/a").status, 200);
        answers.default = Some(Reply::status(204));
        answers.by_path.insert("/a".into(), Reply::status(500));
        answers.script.push_back(Reply::status(429));
        assert_eq!(answers.next_for("/b").status, 429);
        assert_eq!(answers.next_for("/a").status, 500);
        assert_eq!(answers.next_for("/b").status, 204);
    }
}
