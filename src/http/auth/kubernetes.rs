//! Kubernetes mode: bearer tokens are checked with a TokenReview and actions with a
//! SubjectAccessReview against the cluster Leasehold runs in, so access is granted with
//! ordinary RBAC (the mapping of actions to verbs is in the `http::auth` header). Answers are
//! cached briefly ([`crate::config::http::AuthSettings::cache_ttl`]), keyed by the token's SHA-256 and by
//! (user, uid, groups, action, cluster); failures are not cached. It never logs a token, and
//! review errors carry the API's status, not the request.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};

use super::cache::{MAX_ENTRIES, TtlCache};
use super::secret::{Digest, sha256};
use super::{Action, AuthError, Principal};

/// The API group of Leasehold's virtual resources in SubjectAccessReviews.
pub const API_GROUP: &str = "leasehold.io";
/// The virtual resource every action is checked against.
pub const RESOURCE: &str = "clusters";

/// How long one review call may take. A request waits on it, so it is short; an apiserver that
/// does not answer in time gives a 503 rather than a hung request.
pub const REVIEW_TIMEOUT: Duration = Duration::from_secs(5);

/// The SubjectAccessReview `(verb, subresource)` for an action.
pub fn verb_and_subresource(action: Action) -> (&'static str, Option<&'static str>) {
    match action {
        Action::Read => ("get", None),
        Action::Rebalance => ("create", Some("rebalance")),
        Action::RemoveInstance => ("create", Some("instances")),
        Action::Uncordon => ("update", Some("instances")),
        Action::CancelOperation => ("create", Some("operations")),
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct DecisionKey {
    user: String,
    uid: String,
    groups: Vec<String>,
    action: Action,
    cluster: Option<String>,
}

/// The Kubernetes authenticator and authoriser.
pub struct KubeAuth {
    client: kube::Client,
    tokens: Mutex<TtlCache<Digest, Option<Principal>>>,
    decisions: Mutex<TtlCache<DecisionKey, bool>>,
}

impl std::fmt::Debug for KubeAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeAuth").finish_non_exhaustive()
    }
}

impl KubeAuth {
    /// Reviews through `client` (which needs `create` on `tokenreviews.authentication.k8s.io`
    /// and `subjectaccessreviews.authorization.k8s.io`), caching answers for `cache_ttl`.
    pub fn new(client: kube::Client, cache_ttl: Duration) -> Self {
        Self {
            client,
            tokens: Mutex::new(TtlCache::new(cache_ttl, MAX_ENTRIES)),
            decisions: Mutex::new(TtlCache::new(cache_ttl, MAX_ENTRIES)),
        }
    }

    /// The user behind `token`, `None` if the cluster does not accept it.
    pub async fn authenticate(&self, token: &str) -> Result<Option<Principal>, AuthError> {
        let key = sha256(token);
        if let Some(hit) = lock(&self.tokens).get(&key, Instant::now()) {
            return Ok(hit);
        }
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_owned()),
                ..Default::default()
            },
            ..Default::default()
        };
        let api = Api::<TokenReview>::all(self.client.clone());
        let answer = call("TokenReview", api.create(&PostParams::default(), &review)).await?;
        let principal = answer.status.and_then(|status| {
            if status.authenticated != Some(true) {
                return None;
            }
            let user = status.user?;
            let name = user.username.filter(|n| !n.is_empty())?;
            Some(Principal {
                user: name,
                uid: user.uid.unwrap_or_default(),
                groups: user.groups.unwrap_or_default(),
            })
        });
        lock(&self.tokens).insert(key, principal.clone(), Instant::now());
        Ok(principal)
    }

    /// Whether the cluster's authorisers let `who` do `action` on `cluster`.
    pub async fn authorize(
        &self,
        who: &Principal,
        action: Action,
        cluster: Option<&str>,
    ) -> Result<bool, AuthError> {
        let key = DecisionKey {
            user: who.user.clone(),
            uid: who.uid.clone(),
            groups: who.groups.clone(),
            action,
            cluster: cluster.map(str::to_owned),
        };
        if let Some(hit) = lock(&self.decisions).get(&key, Instant::now()) {
            return Ok(hit);
        }
        let (verb, subresource) = verb_and_subresource(action);
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(who.user.clone()),
                uid: (!who.uid.is_empty()).then(|| who.uid.clone()),
                groups: Some(who.groups.clone()),
                resource_attributes: Some(ResourceAttributes {
                    group: Some(API_GROUP.into()),
                    resource: Some(RESOURCE.into()),
                    verb: Some(verb.into()),
                    subresource: subresource.map(str::to_owned),
                    name: cluster.map(str::to_owned),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let api = Api::<SubjectAccessReview>::all(self.client.clone());
        let answer = call(
            "SubjectAccessReview",
            api.create(&PostParams::default(), &review),
        )
        .await?;
        let allowed = answer
            .status
            .is_some_and(|s| s.allowed && !s.denied.unwrap_or(false));
        lock(&self.decisions).insert(key, allowed, Instant::now());
        Ok(allowed)
    }
}

/// Runs one review call with [`REVIEW_TIMEOUT`], turning failures into [`AuthError::Review`].
async fn call<T>(
    review: &'static str,
    fut: impl Future<Output = Result<T, kube::Error>>,
) -> Result<T, AuthError> {
    match tokio::time::timeout(REVIEW_TIMEOUT, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(kube::Error::Api(status))) => Err(AuthError::Review {
            review,
            message: format!("{} {}: {}", status.code, status.reason, status.message),
        }),
        Ok(Err(e)) => Err(AuthError::Review {
            review,
            message: e.to_string(),
        }),
        Err(_) => Err(AuthError::Review {
            review,
            message: format!("no answer within {REVIEW_TIMEOUT:?}"),
        }),
    }
}

/// A cache. Every change is one insert or removal, so a poisoned lock is used as is.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
