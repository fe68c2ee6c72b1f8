//! The REST API as `leasehold ctl` calls it: JSON in and out under `/api/v1`, the bearer token
//! on every request (never printed, never in an error), every call bounded.

use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, header};
use http_body_util::Full;
use serde_json::Value;

use super::{CtlError, Exit};
use crate::net::HttpClient;

/// One call's bound.
const TIMEOUT: Duration = Duration::from_secs(30);
/// The largest answer taken (a page of 1,000 targets is well under it).
const MAX_BODY: usize = 32 << 20;

/// An answer: its status and its JSON (`null` when it had none).
pub(super) struct Answer {
    pub status: u16,
    pub json: Value,
}

/// A client of one server.
pub(super) struct Client {
    base: String,
    token: Option<String>,
    http: HttpClient,
}

/// The token in `path`: its first line, or that line's first field (a `--token-auth-file`
/// line is `token,user,uid,"groups"`).
pub(super) fn token_from_file(path: &Path) -> Result<String, CtlError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| CtlError::new(Exit::Usage, format!("--token-file {}: {e}", path.display())))?;
    text.lines()
        .next()
        .and_then(|l| l.split(',').next())
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
        .ok_or_else(|| {
            CtlError::new(
                Exit::Usage,
                format!(
                    "--token-file {}: no token on its first line",
                    path.display()
                ),
            )
        })
}

impl Client {
    /// A client of the server at `server` (`http://` or `https://`, trusting the system's root
    /// certificates).
    pub(super) fn new(server: &str, token: Option<String>) -> Result<Client, CtlError> {
        let server = server.trim_end_matches('/');
        if !(server.starts_with("http://") || server.starts_with("https://"))
            || server.parse::<http::Uri>().is_err()
        {
            return Err(CtlError::new(
                Exit::Usage,
                format!("--server {server:?}: not an http:// or https:// URL"),
            ));
        }
        let http = HttpClient::new().map_err(|e| CtlError::new(Exit::Failed, e.to_string()))?;
        Ok(Client {
            base: format!("{server}/api/v1"),
            token,
            http,
        })
    }

    /// `GET path`.
    pub(super) async fn get(&self, path: &str) -> Result<Answer, CtlError> {
        self.call(Method::GET, path, None).await
    }

    /// `POST path` with `body` as JSON.
    pub(super) async fn post(&self, path: &str, body: &Value) -> Result<Answer, CtlError> {
        self.call(Method::POST, path, Some(body)).await
    }

    /// The listing at `path` with `params`: its first page, or every page (`all`) with their
    /// items in one `items` list.
    pub(super) async fn pages(
        &self,
        path: &str,
        params: &[(&str, String)],
        all: bool,
    ) -> Result<Value, CtlError> {
        let mut cursor: Option<String> = None;
        let mut merged: Option<Value> = None;
        loop {
            let mut query = form_urlencoded::Serializer::new(String::new());
            for (k, v) in params {
                query.append_pair(k, v);
            }
            if let Some(c) = &cursor {
                query.append_pair("cursor", c);
            }
            let query = query.finish();
            let page = self
                .get(&format!(
                    "{path}{}{query}",
                    if query.is_empty() { "" } else { "?" }
                ))
                .await?
                .ok()?;
            cursor = page["next_cursor"].as_str().map(str::to_owned);
            merged = Some(match merged {
                None => page,
                Some(mut m) => {
                    if let (Some(items), Some(more)) =
                        (m["items"].as_array_mut(), page["items"].as_array())
                    {
                        items.extend(more.iter().cloned());
                    }
                    m["next_cursor"] = page["next_cursor"].clone();
                    m
                }
            });
            if !all || cursor.is_none() {
                return Ok(merged.unwrap_or(Value::Null));
            }
        }
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Answer, CtlError> {
        let url = format!("{}{path}", self.base);
        let mut req = Request::builder()
            .method(method)
            .uri(&url)
            .header(header::ACCEPT, "application/json");
        if let Some(t) = &self.token {
            req = req.header(header::AUTHORIZATION, format!("Bearer {t}"));
        }
        let bytes = match body {
            Some(b) => {
                req = req.header(header::CONTENT_TYPE, "application/json");
                Bytes::from(b.to_string())
            }
            None => Bytes::new(),
        };
        let req = req
            .body(Full::new(bytes))
            .map_err(|e| CtlError::new(Exit::Usage, format!("{url}: {e}")))?;
        let (status, _, body) = self
            .http
            .fetch(req, MAX_BODY, TIMEOUT)
            .await
            .map_err(|e| CtlError::new(Exit::Failed, format!("{url}: {e}")))?;
        let json = if body.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&body).map_err(|e| {
                CtlError::new(
                    Exit::Failed,
                    format!("{url} answered {status} with something that is not JSON: {e}"),
                )
            })?
        };
        Ok(Answer {
            status: status.as_u16(),
            json,
        })
    }
}
