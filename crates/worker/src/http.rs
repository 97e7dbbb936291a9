//! The one way this project's jobs POST to the service: the worker's sink (ingest) and the
//! evaluation reporter (`spade eval --report`) classify answers alike (and so does the vLLM
//! client of [`crate::vllm`]). A network error, a 5xx,
//! 408 and 429 are worth another try (the service is restarting, overloaded or slow); any other
//! non-success status is final, because the service said why and the same body cannot change
//! its mind.

use serde::Serialize;
use std::time::Duration;

/// What one POST came to.
#[derive(Debug)]
pub enum Posted {
    Done(reqwest::blocking::Response),
    /// Worth retrying; the reason, for logs.
    Retry(String),
    /// Final; a message naming the URL, the status and the start of the body.
    Refused(String),
}

/// One POST of `body` as JSON with the bearer `token` (none when it is empty: the vLLM
/// servers of [`crate::vllm`] take no token).
pub fn post_json<T: Serialize + ?Sized>(
    client: &reqwest::blocking::Client,
    url: &str,
    token: &str,
    body: &T,
) -> Posted {
    let mut req = client.post(url).json(body);
    if !token.is_empty() {
        req = req.bearer_auth(token);
    }
    let resp = match req.send() {
        Ok(r) => r,
        Err(e) => return Posted::Retry(e.to_string()),
    };
    let status = resp.status();
    if status.is_success() {
        return Posted::Done(resp);
    }
    if status.is_server_error() || matches!(status.as_u16(), 408 | 429) {
        return Posted::Retry(status.to_string());
    }
    let text = resp.text().unwrap_or_default();
    Posted::Refused(format!(
        "POST {url} answered {status}: {}",
        text.chars().take(300).collect::<String>()
    ))
}

/// Tries and the pause between them (doubling, capped).
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    pub tries: u32,
    pub first: Duration,
    pub max: Duration,
}

/// [`post_json`] until it is done or refused, or `b.tries` attempts failed; `on_retry(reason,
/// pause)` is told of each retry. Err: the refusal, or the last failure's reason.
pub fn post_json_retrying<T: Serialize + ?Sized>(
    client: &reqwest::blocking::Client,
    url: &str,
    token: &str,
    body: &T,
    b: Backoff,
    mut on_retry: impl FnMut(&str, Duration),
) -> Result<reqwest::blocking::Response, String> {
    let mut pause = b.first;
    let mut last = String::new();
    for attempt in 1..=b.tries.max(1) {
        match post_json(client, url, token, body) {
            Posted::Done(r) => return Ok(r),
            Posted::Refused(m) => return Err(m),
            Posted::Retry(why) => last = why,
        }
        if attempt < b.tries {
            on_retry(&last, pause);
            std::thread::sleep(pause);
            pause = (pause * 2).min(b.max);
        }
    }
    Err(format!(
        "POST {url} failed {} times; last: {last}",
        b.tries.max(1)
    ))
}
