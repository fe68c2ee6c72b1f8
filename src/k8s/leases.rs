//! The control plane's Lease writes. Each is a compare-and-swap on `resourceVersion`: read the
//! Lease fresh from the API server, let the caller decide on what is really there, write with
//! the version read. A 409 means someone else wrote in between: read again and decide again,
//! never retry blindly. Members' writes (holder) live in `agent`; this module never touches
//! `spec`.

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::api::{DeleteParams, PostParams, Preconditions};

use crate::protocol::{self, Desire, LeaseView, Protocol};

/// How often one write re-reads after conflicts before giving up for this round (the next
/// reconcile tries again with fresh data).
const MAX_CONFLICTS: usize = 8;

/// What a write did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The Lease was created.
    Created,
    /// The desired owner was written.
    Updated,
    /// The Lease was deleted.
    Deleted,
    /// On fresh data, the decision was to do nothing.
    Unchanged,
}

/// Sets the desired owner of target `key` of `cluster`: creates its Lease if missing, else
/// updates the annotations. `decide` sees the current Lease (or `None`) and returns the desire
/// to write, or `None` to leave it; it is asked again after every conflict.
pub async fn set_desire(
    api: &Api<Lease>,
    prefix: &str,
    cluster: &str,
    key: &str,
    mut decide: impl FnMut(Option<&LeaseView>) -> Option<Desire>,
) -> kube::Result<Outcome> {
    let name = protocol::names::target_lease(prefix, cluster, key);
    for _ in 0..MAX_CONFLICTS {
        let current = api.get_opt(&name).await?;
        let view = current
            .as_ref()
            .and_then(|l| protocol::parse(Protocol::Native, l, cluster));
        let Some(desire) = decide(view.as_ref()) else {
            return Ok(Outcome::Unchanged);
        };
        if view.as_ref().is_some_and(|v| {
            v.desired.as_deref() == Some(desire.owner.as_str())
                && v.operation == desire.operation
                && v.desired_duration_s == Some(desire.duration_s)
        }) {
            return Ok(Outcome::Unchanged);
        }
        let result = match &current {
            None => {
                let mut lease = protocol::new_target_lease(prefix, cluster, key, &desire);
                lease.metadata.namespace = None;
                api.create(&PostParams::default(), &lease)
                    .await
                    .map(|_| Outcome::Created)
            }
            // `replace` sends the resourceVersion we read: a compare-and-swap.
            Some(lease) => api
                .replace(
                    &name,
                    &PostParams::default(),
                    &protocol::with_desire(lease, &desire),
                )
                .await
                .map(|_| Outcome::Updated),
        };
        match result {
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            other => return other,
        }
    }
    Ok(Outcome::Unchanged)
}

/// Deletes Lease `name` if `decide` still wants it gone on fresh data; the delete carries the
/// version read as a precondition.
pub async fn delete_if(
    api: &Api<Lease>,
    name: &str,
    mut decide: impl FnMut(&Lease) -> bool,
) -> kube::Result<Outcome> {
    for _ in 0..MAX_CONFLICTS {
        let Some(lease) = api.get_opt(name).await? else {
            return Ok(Outcome::Unchanged);
        };
        if !decide(&lease) {
            return Ok(Outcome::Unchanged);
        }
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                resource_version: lease.metadata.resource_version.clone(),
                uid: lease.metadata.uid.clone(),
            }),
            ..Default::default()
        };
        match api.delete(name, &params).await {
            Ok(_) => return Ok(Outcome::Deleted),
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(Outcome::Unchanged),
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(Outcome::Unchanged)
}
