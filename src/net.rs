//! Outgoing HTTP for hooks, webhooks and `leasehold ctl`: one small client (hyper over rustls with the system's
//! roots), every call bounded by a timeout. Headers may carry credentials, so nothing here logs
//! a request's headers or URL query.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::{BodyExt as _, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// Response bodies are cut to this many bytes (they are only shown in messages).
const MAX_BODY: usize = 4096;

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    /// The URL or a header is malformed.
    #[error("bad request: {0}")]
    Bad(String),
    /// No answer in time.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// Connection or protocol failure.
    #[error("{0}")]
    Transport(String),
}

/// A reusable client.
#[derive(Clone)]
pub struct HttpClient {
    inner: Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>,
}

impl HttpClient {
    /// A client trusting the system's root certificates.
    pub fn new() -> Result<HttpClient, NetError> {
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_native_roots()
            .map_err(|e| NetError::Transport(format!("loading root certificates: {e}")))?
            .https_or_http()
            .enable_http1()
            .build();
        Ok(HttpClient {
            inner: Client::builder(TokioExecutor::new()).build(https),
        })
    }

    /// Sends one request; returns the status, the headers and the whole body (at most
    /// `max_body` bytes: more is an error).
    pub async fn fetch(
        &self,
        req: Request<Full<Bytes>>,
        max_body: usize,
        timeout: Duration,
    ) -> Result<(StatusCode, HeaderMap, Bytes), NetError> {
        let call = async {
            let resp = self
                .inner
                .request(req)
                .await
                .map_err(|e| NetError::Transport(chain(&e)))?;
            let (parts, body) = resp.into_parts();
            let body = http_body_util::Limited::new(body, max_body)
                .collect()
                .await
                .map_err(|e| NetError::Transport(e.to_string()))?
                .to_bytes();
            Ok((parts.status, parts.headers, body))
        };
        tokio::time::timeout(timeout, call)
            .await
            .map_err(|_| NetError::Timeout(timeout))?
    }

    /// Sends one request; returns the status and (the start of) the body.
    pub async fn call(
        &self,
        method: Method,
        url: &str,
        headers: HeaderMap,
        body: Bytes,
        timeout: Duration,
    ) -> Result<(StatusCode, String), NetError> {
        let mut req = Request::builder()
            .method(method)
            .uri(url)
            .body(Full::new(body))
            .map_err(|e| NetError::Bad(e.to_string()))?;
        req.headers_mut().extend(headers);
        let call = async {
            let resp = self
                .inner
                .request(req)
                .await
                .map_err(|e| NetError::Transport(e.to_string()))?;
            let status = resp.status();
            let body = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| NetError::Transport(e.to_string()))?
                .to_bytes();
            let text = String::from_utf8_lossy(&body[..body.len().min(MAX_BODY)]).into_owned();
            Ok((status, text))
        };
        tokio::time::timeout(timeout, call)
            .await
            .map_err(|_| NetError::Timeout(timeout))?
    }
}

/// An error with its causes (`client error (Connect): tcp connect error: Connection refused`).
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(c) = source {
        s.push_str(": ");
        s.push_str(&c.to_string());
        source = c.source();
    }
    s
}
