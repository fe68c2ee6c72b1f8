//! The `Host` check, before anything else runs: a request must name this server — one of
//! `http.allowed_hosts`, or by default, on a loopback listen address, `localhost` and the
//! loopback addresses (a port-forward or a local browser). Otherwise a page from another site
//! whose name resolves to 127.0.0.1 (DNS rebinding) could drive a loopback Leasehold, where
//! auth mode `none` is allowed, with the browser sending the attacker's name as `Host`.
//!
//! Refused with 400 `urn:leasehold:problem:host`. Not checked: the health and metrics
//! endpoints (probes and scrapers address the pod by IP and see nothing worth taking), and a
//! request without any `Host` (browsers always send one; HTTP/1.1 clients too).

use std::net::{IpAddr, SocketAddr};

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use super::state::AppState;

/// Paths answered whatever the `Host`.
const UNCHECKED: [&str; 3] = ["/healthz", "/readyz", "/metrics"];

/// The host names (or addresses) requests may name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedHosts {
    /// `*`: any.
    any: bool,
    /// Lowercase names and addresses (IPv6 without brackets), no ports.
    names: Vec<String>,
}

/// Why an `http.allowed_hosts` entry cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("http.allowed_hosts[{index}]: {value:?} {why}")]
pub struct HostsError {
    index: usize,
    value: String,
    why: &'static str,
}

impl AllowedHosts {
    /// Any `Host` (for router tests that build requests by hand).
    pub fn any() -> AllowedHosts {
        AllowedHosts {
            any: true,
            names: Vec::new(),
        }
    }

    /// The configured list, or when it is empty the default for `listen`: on a loopback
    /// address `localhost`, `127.0.0.1`, `::1` and the address itself; on a specific address
    /// that address and `localhost`; on an unspecified one (`0.0.0.0`, behind a Service,
    /// where only the operator knows the names users type) any.
    pub fn new(configured: &[String], listen: SocketAddr) -> Result<AllowedHosts, HostsError> {
        if configured.is_empty() {
            let ip = listen.ip();
            if ip.is_unspecified() {
                return Ok(AllowedHosts::any());
            }
            let mut names = vec!["localhost".to_owned(), ip.to_string()];
            if ip.is_loopback() {
                names.extend(["127.0.0.1".to_owned(), "::1".to_owned()]);
            }
            names.sort();
            names.dedup();
            return Ok(AllowedHosts { any: false, names });
        }
        let mut out = AllowedHosts {
            any: false,
            names: Vec::new(),
        };
        for (index, value) in configured.iter().enumerate() {
            let bad = |why| HostsError {
                index,
                value: value.clone(),
                why,
            };
            if value == "*" {
                out.any = true;
                continue;
            }
            let name = value.trim_start_matches('[').trim_end_matches(']');
            let is_ip = name.parse::<IpAddr>().is_ok();
            let is_name = !name.is_empty()
                && name.len() <= 253
                && name.split('.').all(|l| {
                    !l.is_empty()
                        && l.len() <= 63
                        && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                });
            if !(is_ip || is_name) {
                return Err(bad(
                    "is not a host name or address (no scheme, port or path; `*` for any)",
                ));
            }
            out.names.push(name.to_ascii_lowercase());
        }
        Ok(out)
    }

    /// Whether a `Host` header value (`name`, `name:port`, `[v6]:port`) names this server.
    pub fn allows(&self, host: &str) -> bool {
        if self.any {
            return true;
        }
        let name = match host.strip_prefix('[') {
            Some(v6) => v6.split(']').next().unwrap_or(""),
            None => match host.rsplit_once(':') {
                Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
                _ => host,
            },
        };
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        self.names.contains(&name)
    }
}

/// Refuses a request whose `Host` does not name this server.
pub async fn check(State(state): State<AppState>, req: Request, next: Next) -> Response {
    if UNCHECKED.contains(&req.uri().path()) {
        return next.run(req).await;
    }
    let host = req
        .headers()
        .get(header::HOST)
        .map(|h| h.to_str().unwrap_or("\u{fffd}"));
    match host {
        Some(host) if !state.hosts.allows(host) => ApiError::Host(format!(
            "this server does not answer to the host {host:?}; add it to http.allowed_hosts if it \
             is one of this server's names"
        ))
        .into_response(),
        _ => next.run(req).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn loopback_defaults_allow_local_names_only() {
        let h = AllowedHosts::new(&[], addr("127.0.0.1:8080")).unwrap();
        for ok in [
            "localhost:8080",
            "127.0.0.1:8080",
            "[::1]:8080",
            "LOCALHOST",
            "localhost.",
        ] {
            assert!(h.allows(ok), "{ok}");
        }
        for no in [
            "attacker.example:8080",
            "127.0.0.1.nip.io:8080",
            "localhost.evil",
            "",
            "[::2]",
        ] {
            assert!(!h.allows(no), "{no}");
        }
        let h = AllowedHosts::new(&[], addr("10.1.2.3:8080")).unwrap();
        assert!(h.allows("10.1.2.3:8080") && h.allows("localhost:8080"));
        assert!(!h.allows("127.0.0.1:8080"));
        assert_eq!(
            AllowedHosts::new(&[], addr("0.0.0.0:8080")).unwrap(),
            AllowedHosts::any()
        );
    }

    #[test]
    fn configured_names_replace_the_defaults() {
        let list = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let h = AllowedHosts::new(
            &list(&["Leasehold.Example.com", "[fd00::1]", "192.0.2.7"]),
            addr("127.0.0.1:8080"),
        )
        .unwrap();
        assert!(h.allows("leasehold.example.com:443"));
        assert!(h.allows("[fd00::1]:8080") && h.allows("192.0.2.7"));
        assert!(!h.allows("localhost:8080"));
        assert!(
            AllowedHosts::new(&list(&["*"]), addr("127.0.0.1:1"))
                .unwrap()
                .allows("x")
        );
        for bad in ["http://x", "x:80", "a/b", "", "a..b"] {
            let e = AllowedHosts::new(&list(&["ok", bad]), addr("127.0.0.1:1")).unwrap_err();
            assert!(e.to_string().starts_with("http.allowed_hosts[1]: "), "{e}");
        }
    }
}
