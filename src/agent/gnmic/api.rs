//! gnmic's collector REST API (`gnmic collect`, v0.47), the calls managed mode makes: list the
//! targets with their state, add or replace one, delete one, and disable then enable one (the
//! only way to restart a target whose first start failed). Facts of the API as probed are in
//! docs/gnmic.md. Plain HTTP to a sidecar on loopback; every call is bounded by [`CALL_TIMEOUT`].

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use serde::Deserialize;

/// One call's bound. gnmic answers its API at once even when it is slow to apply a change
/// (changes are applied one at a time, after the answer).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(2);

/// What a path segment may hold unescaped (RFC 3986 unreserved).
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// A call that failed.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// No answer (refused, reset, or not within [`CALL_TIMEOUT`]).
    #[error("gnmic's API at {url} did not answer: {why}")]
    Unreachable { url: String, why: String },
    /// An answer that is not the expected one.
    #[error("gnmic answered {method} {url} with {status}: {body}")]
    Refused {
        method: &'static str,
        url: String,
        status: http::StatusCode,
        body: String,
    },
}

/// A target as gnmic reports it (`GET /api/v1/targets`; its configuration is left out).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Reported {
    /// The target's name: its key.
    pub name: String,
    #[serde(default)]
    pub state: ReportedState,
}

/// A target's state in gnmic.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct ReportedState {
    /// `running`, `starting`, `stopped`, `stopping`, `paused` or `failed`.
    #[serde(default)]
    pub state: String,
    /// gRPC's connectivity: `READY`, `CONNECTING`, `TRANSIENT_FAILURE`, …
    #[serde(default)]
    pub connection_state: String,
    /// Why it failed, when it did.
    #[serde(default)]
    pub failed_reason: String,
}

impl ReportedState {
    /// Collecting: gnmic runs the target and its gRPC connection is up.
    pub fn collecting(&self) -> bool {
        self.state == "running" && self.connection_state == "READY"
    }
}

/// A client of one gnmic's API.
#[derive(Clone)]
pub struct GnmicApi {
    base: String,
    client: Client<HttpConnector, Full<Bytes>>,
}

impl std::fmt::Debug for GnmicApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GnmicApi")
            .field("base", &self.base)
            .finish()
    }
}

impl GnmicApi {
    /// The API at `base` (`http://127.0.0.1:7890`).
    pub fn new(base: &str) -> GnmicApi {
        GnmicApi {
            base: base.trim_end_matches('/').to_owned(),
            client: Client::builder(TokioExecutor::new()).build_http(),
        }
    }

    /// Every target gnmic has, with its state.
    pub async fn list(&self) -> Result<Vec<Reported>, ApiError> {
        let url = format!("{}/api/v1/targets", self.base);
        let body = self.call("GET", &url, None, &[200]).await?;
        serde_json::from_slice(&body).map_err(|e| ApiError::Refused {
            method: "GET",
            url,
            status: http::StatusCode::OK,
            body: format!("not a list of targets: {e}"),
        })
    }

    /// Adds the target `body` defines, or replaces it (gnmic restarts it when a connection
    /// field changed). The body holds credentials: it is never logged, and neither is gnmic's
    /// answer to it.
    pub async fn upsert(&self, body: &serde_json::Value) -> Result<(), ApiError> {
        let url = format!("{}/api/v1/config/targets", self.base);
        self.call("POST", &url, Some(body.to_string().into()), &[200])
            .await
            .map(drop)
            .map_err(|e| match e {
                // gnmic echoes what it could not take; say only the status.
                ApiError::Refused {
                    method,
                    url,
                    status,
                    body,
                } => ApiError::Refused {
                    method,
                    url,
                    status,
                    body: first_error(&body),
                },
                other => other,
            })
    }

    /// Stops and removes target `name` (200 also when gnmic does not have it).
    pub async fn delete(&self, name: &str) -> Result<(), ApiError> {
        let url = format!("{}/api/v1/config/targets/{}", self.base, segment(name));
        self.call("DELETE", &url, None, &[200, 404]).await.map(drop)
    }

    /// Sets target `name`'s intended state (`disabled` or `enabled`). gnmic answers 400 when it
    /// is already so, which counts as done.
    pub async fn set_state(&self, name: &str, state: &str) -> Result<(), ApiError> {
        let url = format!(
            "{}/api/v1/targets/{}/state/{state}",
            self.base,
            segment(name)
        );
        self.call("POST", &url, None, &[200, 400]).await.map(drop)
    }

    async fn call(
        &self,
        method: &'static str,
        url: &str,
        body: Option<Bytes>,
        ok: &[u16],
    ) -> Result<Bytes, ApiError> {
        let unreachable = |why: String| ApiError::Unreachable {
            url: url.to_owned(),
            why,
        };
        let mut req = http::Request::builder().method(method).uri(url);
        if body.is_some() {
            req = req.header(http::header::CONTENT_TYPE, "application/json");
        }
        let req = req
            .body(Full::new(body.unwrap_or_default()))
            .map_err(|e| unreachable(e.to_string()))?;
        let answer = async {
            let resp = self.client.request(req).await.map_err(|e| e.to_string())?;
            let status = resp.status();
            let body = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| e.to_string())?
                .to_bytes();
            Ok::<_, String>((status, body))
        };
        let (status, body) = tokio::time::timeout(CALL_TIMEOUT, answer)
            .await
            .map_err(|_| unreachable(format!("no answer within {CALL_TIMEOUT:?}")))?
            .map_err(unreachable)?;
        if ok.contains(&status.as_u16()) {
            Ok(body)
        } else {
            Err(ApiError::Refused {
                method,
                url: url.to_owned(),
                status,
                body: String::from_utf8_lossy(&body).chars().take(300).collect(),
            })
        }
    }
}

/// `name` as one URL path segment.
fn segment(name: &str) -> String {
    utf8_percent_encode(name, SEGMENT).to_string()
}

/// The first of gnmic's `{"errors": [...]}`, or a note that there was none.
fn first_error(body: &str) -> String {
    #[derive(Deserialize)]
    struct Errors {
        errors: Vec<String>,
    }
    serde_json::from_str::<Errors>(body)
        .ok()
        .and_then(|e| e.errors.into_iter().next())
        .unwrap_or_else(|| "(no error message)".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_one_path_segment() {
        assert_eq!(segment("spine-1.dc_2~x"), "spine-1.dc_2~x");
        assert_eq!(segment("a b?c#d%"), "a%20b%3Fc%23d%25");
    }

    #[test]
    fn collecting_needs_running_and_a_ready_connection() {
        let s = |state: &str, conn: &str| ReportedState {
            state: state.into(),
            connection_state: conn.into(),
            failed_reason: String::new(),
        };
        assert!(s("running", "READY").collecting());
        assert!(!s("running", "CONNECTING").collecting());
        assert!(!s("failed", "READY").collecting());
    }

    #[test]
    fn the_list_reads_as_gnmic_writes_it() {
        let body = r#"[{"name":"spine-1","config":{"name":"spine-1","address":"10.0.0.1:57400","password":"****"},
            "state":{"intended-state":"enabled","state":"running","connection-state":"READY",
            "last-updated":"2026-12-06T00:00:00Z","subscriptions":{"if":"running"}}},
            {"name":"leaf-2","state":{"state":"failed","failed-reason":"context deadline exceeded"}}]"#;
        let list: Vec<Reported> = serde_json::from_str(body).unwrap();
        assert_eq!(list[0].name, "spine-1");
        assert!(list[0].state.collecting());
        assert_eq!(list[1].state.failed_reason, "context deadline exceeded");
    }
}
