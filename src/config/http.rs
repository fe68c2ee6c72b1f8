//! The `http` section of the configuration file: the listen address, HTTPS (`http.tls`) and
//! who may call (`http.auth`: which authenticator, the token file, role groups and lifetimes).
//! Parsing only: `http::Auth::new` checks that the settings fit together and with the listen
//! address, `http::tls` loads the certificate. The HTTP layer reads these types; this module
//! never imports it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

/// The `http` section of the configuration.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpSettings {
    /// Address to listen on (default `127.0.0.1:8080`; `0.0.0.0:8080` behind a Service).
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// Who may call, and how they prove it.
    #[serde(default)]
    pub auth: AuthSettings,
    /// Serve HTTPS with this certificate and key (default: plain HTTP).
    #[serde(default)]
    pub tls: Option<TlsSettings>,
    /// The host names and addresses requests may name in `Host` (no port; `*` for any).
    /// Empty: on a loopback listen address `localhost` and the loopback addresses, on a
    /// specific address that address and `localhost`, on `0.0.0.0`/`::` any.
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
}

impl Default for HttpSettings {
    fn default() -> Self {
        Self {
            listen: default_listen(),
            auth: AuthSettings::default(),
            tls: None,
            allowed_hosts: Vec::new(),
        }
    }
}

fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 8080))
}

/// The `http.tls` section: serve HTTPS with this certificate and key.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsSettings {
    /// PEM: the server certificate first, then any intermediates.
    pub cert_file: PathBuf,
    /// PEM: the private key (PKCS#8, PKCS#1 or SEC1).
    pub key_file: PathBuf,
}

/// How callers prove who they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Bearer tokens checked by the cluster (TokenReview), actions by RBAC
    /// (SubjectAccessReview).
    #[default]
    Kubernetes,
    /// Bearer tokens from a static token file; actions by [`RoleGroups`].
    Token,
    /// No authentication: everyone may do everything. Only on a loopback address.
    None,
}

/// Which groups hold which role in token mode (`http.auth.roles`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub struct RoleGroups {
    /// Groups that may read.
    #[serde(default = "default_viewer")]
    pub viewer: Vec<String>,
    /// Groups that may read and run operations.
    #[serde(default = "default_operator")]
    pub operator: Vec<String>,
    /// Groups that may do everything.
    #[serde(default = "default_admin")]
    pub admin: Vec<String>,
}

impl Default for RoleGroups {
    fn default() -> Self {
        Self {
            viewer: default_viewer(),
            operator: default_operator(),
            admin: default_admin(),
        }
    }
}

fn default_viewer() -> Vec<String> {
    vec!["leasehold:viewers".into()]
}

fn default_operator() -> Vec<String> {
    vec!["leasehold:operators".into()]
}

/// `system:masters` is an admin here as it is in Kubernetes, so a token file copied from an
/// apiserver keeps its administrators.
fn default_admin() -> Vec<String> {
    vec!["leasehold:admins".into(), "system:masters".into()]
}

/// How long a browser login lasts: a working day.
pub const DEFAULT_SESSION_TTL: Duration = Duration::from_secs(8 * 3600);

/// How long a TokenReview or SubjectAccessReview answer is reused. Short, like
/// kube-apiserver's webhook authenticator cache: a revoked token or RoleBinding takes effect
/// within this time, while a page load's burst of requests costs one review.
pub const DEFAULT_CACHE_TTL: Duration = Duration::from_secs(10);

/// `http.auth`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub struct AuthSettings {
    /// `kubernetes` (default), `token` or `none`.
    #[serde(default)]
    pub mode: Mode,
    /// The token file (kube-apiserver `--token-auth-file` format); required for, and only
    /// allowed with, mode `token`.
    #[serde(default)]
    pub token_file: Option<PathBuf>,
    /// Which groups hold which role in mode `token`.
    #[serde(default)]
    pub roles: RoleGroups,
    /// How long a browser session lasts from login (absolute, not sliding). Seconds, or a
    /// duration like `8h`.
    #[serde(default = "default_session_ttl", with = "seconds")]
    pub session_ttl: Duration,
    /// How long review answers are cached in mode `kubernetes`; `0` turns the cache off.
    /// Seconds, or a duration like `10s`.
    #[serde(default = "default_cache_ttl", with = "seconds")]
    pub cache_ttl: Duration,
}

impl Default for AuthSettings {
    fn default() -> Self {
        Self {
            mode: Mode::default(),
            token_file: None,
            roles: RoleGroups::default(),
            session_ttl: DEFAULT_SESSION_TTL,
            cache_ttl: DEFAULT_CACHE_TTL,
        }
    }
}

fn default_session_ttl() -> Duration {
    DEFAULT_SESSION_TTL
}

fn default_cache_ttl() -> Duration {
    DEFAULT_CACHE_TTL
}

/// A duration written as whole seconds (`28800`) or as a duration string (`8h`, `10s`,
/// `1h30m`), the form the rest of the configuration uses.
mod seconds {
    use std::time::Duration;

    use super::Deserializer;

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        d.deserialize_any(Visitor)
    }

    struct Visitor;

    impl serde::de::Visitor<'_> for Visitor {
        type Value = Duration;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a number of seconds or a duration like 8h, 10s, 1h30m")
        }

        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Duration, E> {
            Ok(Duration::from_secs(v))
        }

        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Duration, E> {
            u64::try_from(v)
                .map(Duration::from_secs)
                .map_err(|_| E::custom(format!("{v} is negative")))
        }

        fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Duration, E> {
            let d: jiff::SignedDuration = s.parse().map_err(|_| {
                E::custom(format!(
                    "{s:?} is not a duration (like 8h, 10s, 1h30m, or a number of seconds)"
                ))
            })?;
            Duration::try_from(d).map_err(|_| E::custom(format!("{s:?} is negative")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Result<AuthSettings, String> {
        serde_saphyr::from_str(yaml).map_err(|e| e.to_string())
    }

    #[test]
    fn defaults() {
        let s = parse("{}").unwrap();
        assert_eq!(s, AuthSettings::default());
        assert_eq!(s.mode, Mode::Kubernetes);
        assert_eq!(s.session_ttl, Duration::from_secs(8 * 3600));
        assert_eq!(s.cache_ttl, Duration::from_secs(10));
        assert_eq!(s.roles.viewer, ["leasehold:viewers"]);
        assert_eq!(s.roles.operator, ["leasehold:operators"]);
        assert_eq!(s.roles.admin, ["leasehold:admins", "system:masters"]);
    }

    #[test]
    fn full_section() {
        let s = parse(
            "mode: token\n\
             token_file: /etc/leasehold/tokens.csv\n\
             roles:\n  viewer: [everyone]\n  admin: [root]\n\
             session_ttl: 3600\n\
             cache_ttl: 1m30s\n",
        )
        .unwrap();
        assert_eq!(s.mode, Mode::Token);
        assert_eq!(
            s.token_file.as_deref(),
            Some(std::path::Path::new("/etc/leasehold/tokens.csv"))
        );
        assert_eq!(s.roles.viewer, ["everyone"]);
        assert_eq!(s.roles.operator, ["leasehold:operators"]);
        assert_eq!(s.roles.admin, ["root"]);
        assert_eq!(s.session_ttl, Duration::from_secs(3600));
        assert_eq!(s.cache_ttl, Duration::from_secs(90));
        assert_eq!(parse("mode: none").unwrap().mode, Mode::None);
    }

    #[test]
    fn rejects_unknown_fields_and_bad_values() {
        assert!(parse("mode: basic").is_err());
        assert!(parse("token: x").is_err());
        assert!(parse("roles: {viewers: [x]}").is_err());
        assert!(parse("session_ttl: -5").is_err());
        assert!(parse("cache_ttl: soon").is_err());
    }
}
