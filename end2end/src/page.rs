//! Driving the console's pages: open one and wait until it is live, find elements
//! and text with a deadline, sign in through the form.

use std::time::Duration;

use fantoccini::elements::Element;
use fantoccini::{Client, Locator};

use crate::fixture::{Server, PASSWORD};

pub async fn wait_for_hydration(c: &Client) {
    c.wait()
        .at_most(Duration::from_secs(30))
        .for_element(Locator::Css("body[data-hydrated='true']"))
        .await
        .expect("the page hydrates (the wasm loaded and ran)");
}

pub async fn find(c: &Client, css: &str) -> Element {
    c.wait()
        .at_most(Duration::from_secs(15))
        .for_element(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("no element {css}: {e}"))
}

/// Waits until the element `css` has text containing `text`; returns the text.
pub async fn wait_text(c: &Client, css: &str, text: &str) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        if let Ok(e) = c.find(Locator::Css(css)).await {
            if let Ok(t) = e.text().await {
                if t.contains(text) {
                    return t;
                }
            }
        }
        if std::time::Instant::now() > deadline {
            let body = c.source().await.unwrap_or_default();
            panic!(
                "no {css} with text {text:?}; page: {}",
                &body[..body.len().min(4000)]
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until the browser is at a URL containing `part` (a form's navigation has
/// landed): an element found before that may be the previous page's, gone a moment later.
pub async fn wait_url(c: &Client, part: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        if let Ok(url) = c.current_url().await {
            if url.as_str().contains(part) {
                return;
            }
        }
        if std::time::Instant::now() > deadline {
            panic!("the browser never reached a URL with {part:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Opens a console page and waits until it is live.
pub async fn open(c: &Client, server: &Server, path: &str) {
    c.goto(&server.url(path)).await.unwrap();
    wait_for_hydration(c).await;
}

pub async fn sign_in(c: &Client, server: &Server, email: &str) {
    open(c, server, "/login").await;
    c.find(Locator::Css("input[name=email]"))
        .await
        .unwrap()
        .send_keys(email)
        .await
        .unwrap();
    c.find(Locator::Css("input[name=password]"))
        .await
        .unwrap()
        .send_keys(PASSWORD)
        .await
        .unwrap();
    c.find(Locator::Css("button[type=submit]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    find(c, "[data-testid=signed-in-as]").await;
}
