//! Authentication and authorisation of HTTP callers. It owns who a bearer token or session
//! belongs to ([`Principal`]) and whether that principal may do an [`Action`]; it knows
//! nothing of axum, and the router's middleware and extractors call it. It never logs or
//! formats a token, session id or CSRF token.
//!
//! Three modes (`http.auth.mode`):
//!
//! - `kubernetes` (default): a bearer token is checked with a `TokenReview`
//!   (`authentication.k8s.io/v1`) and every action with a `SubjectAccessReview`
//!   (`authorization.k8s.io/v1`) for the virtual resource `clusters` in API group
//!   `leasehold.io`, cluster-scoped (no namespace), named after the managed cluster when the
//!   action concerns one. Grant access with a ClusterRole and ClusterRoleBinding:
//!
//!   | Action            | verb     | resource                 | name                 |
//!   |-------------------|----------|--------------------------|----------------------|
//!   | `Read`            | `get`    | `clusters`               | cluster, or none     |
//!   | `Rebalance`       | `create` | `clusters/rebalance`     | cluster, or none     |
//!   | `RemoveInstance`  | `create` | `clusters/instances`     | cluster              |
//!   | `Uncordon`        | `update` | `clusters/instances`     | cluster              |
//!   | `CancelOperation` | `create` | `clusters/operations`    | cluster, or none     |
//!
//!   Approving a proposed operation is `Rebalance` on the operation's cluster. A request with
//!   no cluster (the operation list, history, cancelling or approving an unknown id) has
//!   no name, so it needs a rule without `resourceNames`. Leasehold's service account needs
//!   `create` on `tokenreviews` and `subjectaccessreviews` (the `system:auth-delegator`
//!   ClusterRole). Answers are cached for `cache_ttl` (10 s by default). User `extra` fields
//!   from the TokenReview are not passed on to the SubjectAccessReview.
//! - `token`: a static token file in kube-apiserver's `--token-auth-file` format
//!   (`token_file.rs`), and roles by group ([`RoleGroups`], `roles.rs`): viewer may `Read`,
//!   operator and admin may do everything. A user with no role is authenticated (not 401) but
//!   may do nothing (403).
//! - `none`: no authentication, everyone is [`Auth::anonymous`] and may do everything.
//!   Refused unless the server listens on a loopback address.
//!
//! Browser logins are [`Sessions`] (`session.rs`) with a CSRF token checked by [`Session::csrf_matches`].

mod cache;
mod kubernetes;
mod roles;
mod secret;
mod session;
#[cfg(test)]
mod tests;
mod token_file;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

pub use self::kubernetes::{API_GROUP, RESOURCE, REVIEW_TIMEOUT, verb_and_subresource};
pub use self::roles::{Action, Role};
pub use self::session::{MAX_SESSIONS, Session, SessionId, Sessions};
use crate::config::http::{AuthSettings, Mode, RoleGroups};

use self::kubernetes::KubeAuth;
use self::token_file::TokenTable;

/// The user name of everyone in mode `none`.
pub const ANONYMOUS_USER: &str = "anonymous-loopback";

/// An authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Principal {
    /// User name (Kubernetes `username`, or the token file's user column).
    pub user: String,
    /// User id; may be empty.
    pub uid: String,
    /// Groups, including `system:authenticated`.
    pub groups: Vec<String>,
}

/// Why authentication cannot be set up or a check could not be made.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// The settings do not fit together.
    #[error("http.auth.{field}: {why}")]
    Settings {
        /// The setting at fault.
        field: &'static str,
        /// Why.
        why: String,
    },
    /// Mode `none` with a listen address others can reach.
    #[error(
        "http.auth.mode: none lets anyone who can connect do everything without logging in, so it is only allowed on a loopback address (127.0.0.0/8 or ::1); the server listens on {listen}. Use mode kubernetes or token, or listen on 127.0.0.1"
    )]
    NoneModeNotLoopback {
        /// The listen address.
        listen: SocketAddr,
    },
    /// The token file could not be read.
    #[error("{file}: {source}")]
    TokenFileRead {
        /// The file.
        file: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A line of the token file is invalid. Never quotes the line (it holds a token).
    #[error("{file}:{line}: {why}")]
    TokenFile {
        /// The file.
        file: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        why: String,
    },
    /// The token file names no user: nobody could log in.
    #[error(
        "{file}: names no user, so nobody could log in (add a line token,user,uid[,\"groups\"])"
    )]
    TokenFileEmpty {
        /// The file.
        file: PathBuf,
    },
    /// A TokenReview or SubjectAccessReview call failed (the caller answers 503).
    #[error("{review} failed: {message}")]
    Review {
        /// `TokenReview` or `SubjectAccessReview`.
        review: &'static str,
        /// The API status or transport error (never the token).
        message: String,
    },
    /// The system's random number generator failed.
    #[error("the system random number generator failed")]
    Random,
}

/// Authentication and authorisation for the HTTP server. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Auth {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    backend: Backend,
    sessions: Sessions,
}

#[derive(Debug)]
enum Backend {
    Kubernetes(KubeAuth),
    Token {
        table: TokenTable,
        roles: RoleGroups,
    },
    None,
}

impl Auth {
    /// Sets up authentication from `settings` for a server listening on `listen`. Mode `none`
    /// is refused unless `listen` is a loopback address; mode `token` reads the token file;
    /// mode `kubernetes` needs `client`.
    pub async fn new(
        settings: &AuthSettings,
        listen: SocketAddr,
        client: Option<kube::Client>,
    ) -> Result<Auth, AuthError> {
        if settings.session_ttl.is_zero() {
            return Err(AuthError::Settings {
                field: "session_ttl",
                why: "must be more than zero".into(),
            });
        }
        if settings.mode != Mode::Token && settings.token_file.is_some() {
            return Err(AuthError::Settings {
                field: "token_file",
                why: "only used with mode token".into(),
            });
        }
        let backend = match settings.mode {
            Mode::None => {
                if !is_loopback(listen) {
                    return Err(AuthError::NoneModeNotLoopback { listen });
                }
                Backend::None
            }
            Mode::Token => {
                let Some(file) = &settings.token_file else {
                    return Err(AuthError::Settings {
                        field: "token_file",
                        why: "required with mode token".into(),
                    });
                };
                let table = TokenTable::load(file).await?;
                if table.len() == 0 {
                    return Err(AuthError::TokenFileEmpty { file: file.clone() });
                }
                tracing::info!(file = %file.display(), users = table.len(), "token file loaded");
                Backend::Token {
                    table,
                    roles: settings.roles.clone(),
                }
            }
            Mode::Kubernetes => {
                let Some(client) = client else {
                    return Err(AuthError::Settings {
                        field: "mode",
                        why: "kubernetes needs a Kubernetes client (in-cluster or kubeconfig credentials)".into(),
                    });
                };
                Backend::Kubernetes(KubeAuth::new(client, settings.cache_ttl))
            }
        };
        Ok(Auth {
            inner: Arc::new(Inner {
                backend,
                sessions: Sessions::new(settings.session_ttl),
            }),
        })
    }

    /// The mode in use.
    pub fn mode(&self) -> Mode {
        match self.inner.backend {
            Backend::Kubernetes(_) => Mode::Kubernetes,
            Backend::Token { .. } => Mode::Token,
            Backend::None => Mode::None,
        }
    }

    /// The browser sessions (their TTL is `http.auth.session_ttl`).
    pub fn sessions(&self) -> &Sessions {
        &self.inner.sessions
    }

    /// Who holds bearer `token`: `Ok(None)` for an unknown or invalid token (401), `Err` only
    /// when the check could not be made (TokenReview failed: 503). In mode `none` everyone is
    /// [`Auth::anonymous`].
    pub async fn authenticate(&self, token: &str) -> Result<Option<Principal>, AuthError> {
        match &self.inner.backend {
            Backend::None => Ok(self.anonymous()),
            _ if token.is_empty() => Ok(None),
            Backend::Token { table, .. } => Ok(table.authenticate(token)),
            Backend::Kubernetes(k) => k.authenticate(token).await,
        }
    }

    /// In mode `none`, the principal every request acts as (user [`ANONYMOUS_USER`], allowed
    /// everything); `None` in the other modes.
    pub fn anonymous(&self) -> Option<Principal> {
        matches!(self.inner.backend, Backend::None).then(|| Principal {
            user: ANONYMOUS_USER.into(),
            uid: String::new(),
            groups: Vec::new(),
        })
    }

    /// In mode `token`, the role `who` holds (`None`: none, or another mode). For display;
    /// decisions go through [`Auth::authorize`].
    pub fn role(&self, who: &Principal) -> Option<Role> {
        match &self.inner.backend {
            Backend::Token { roles, .. } => roles.role_of(&who.groups),
            _ => None,
        }
    }

    /// What a caller needs to be allowed `action` on `cluster`, in words for a page that shows
    /// what it cannot offer this caller: in mode `token` the lowest role that has it and the
    /// groups that give it or a higher one, in mode `kubernetes` the RBAC rule.
    pub fn requirement(&self, action: Action, cluster: Option<&str>) -> String {
        match &self.inner.backend {
            Backend::Token { roles, .. } => {
                let role = Role::lowest_for(action);
                let higher: Vec<Role> = Role::ALL.into_iter().filter(|r| *r >= role).collect();
                let groups: Vec<&str> = higher
                    .iter()
                    .flat_map(|r| roles.groups(*r))
                    .map(String::as_str)
                    .collect();
                let names: Vec<&str> = higher.iter().map(|r| r.name()).collect();
                let names = match names.split_last() {
                    Some((last, [])) => (*last).to_owned(),
                    Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
                    None => String::new(),
                };
                format!(
                    "the {} role or higher (a group of http.auth.roles.{names}: {})",
                    role.name(),
                    groups.join(", ")
                )
            }
            Backend::Kubernetes(_) => {
                let (verb, sub) = verb_and_subresource(action);
                let resource =
                    sub.map_or_else(|| RESOURCE.to_owned(), |s| format!("{RESOURCE}/{s}"));
                let name = cluster.map(|c| format!(" (name {c})")).unwrap_or_default();
                format!("RBAC permission to {verb} {resource}{name} in API group {API_GROUP}")
            }
            Backend::None => "nothing: in mode none everyone may".into(),
        }
    }

    /// Whether `who` may do `action` on `cluster` (`None` when the request concerns no single
    /// cluster: listing operations or history, cancelling an operation by id). `Err` only
    /// when the check could not be made (SubjectAccessReview failed: 503).
    pub async fn authorize(
        &self,
        who: &Principal,
        action: Action,
        cluster: Option<&str>,
    ) -> Result<bool, AuthError> {
        match &self.inner.backend {
            Backend::None => Ok(true),
            Backend::Token { roles, .. } => {
                Ok(roles.role_of(&who.groups).is_some_and(|r| r.allows(action)))
            }
            Backend::Kubernetes(k) => k.authorize(who, action, cluster).await,
        }
    }
}

/// Whether only this machine can reach `listen`: 127.0.0.0/8, `::1`, or `::ffff:127.x.y.z`.
fn is_loopback(listen: SocketAddr) -> bool {
    listen.ip().to_canonical().is_loopback()
}
