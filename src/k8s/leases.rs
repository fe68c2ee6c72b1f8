//! The control plane's Lease writes. Each is a compare-and-swap on `resourceVersion`: read the
//! Lease fresh from the API server, let the caller decide on what is really there, write with
//! the version read. A 409 means someone else wrote in between: read again (after a short
//! jittered pause) and decide again, never retry blindly. Members' writes (holder) live in
//! `agent`; this module touches `spec` only to fence a dead member's member
//! Lease, to revoke its holds, and to grant a target that has no holder to its desired owner
//! under the owner's term (`protocol::granted`).

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::api::{DeleteParams, PostParams, Preconditions};

use std::future::Future;

use crate::protocol::{self, Desire, Fence, Holding, LeaseView, Protocol};

/// How often one write re-reads after conflicts before giving up for this round (the next
/// reconcile tries again with fresh data).
const MAX_CONFLICTS: usize = 8;

/// Before reading again after a conflict: a random pause of up to 5 ms, doubling with each
/// conflict of the same write (at most 160 ms), so that writers that collided do not read and
/// collide again at once — no re-read storm on a busy server.
async fn after_conflict(attempt: usize) {
    if attempt + 1 >= MAX_CONFLICTS {
        return; // the caller gives up now
    }
    let most = (5u64 << attempt.min(5)).min(160);
    let pause = rand::random_range(0..=most);
    tokio::time::sleep(std::time::Duration::from_millis(pause)).await;
}

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
///
/// `absent`: the caller's current model has no Lease for `key`. The first attempt then creates
/// it without reading first — a create is its own compare-and-swap (refused with 409 when the
/// Lease exists), after which the Lease is read as usual. A first placement is then one
/// request per target, not a read and a create.
pub async fn set_desire(
    api: &Api<Lease>,
    prefix: &str,
    cluster: &str,
    key: &str,
    absent: bool,
    mut decide: impl FnMut(Option<&LeaseView>) -> Option<Desire>,
) -> kube::Result<Outcome> {
    let name = protocol::names::target_lease(prefix, cluster, key);
    for attempt in 0..MAX_CONFLICTS {
        let current = if attempt == 0 && absent {
            None
        } else {
            api.get_opt(&name).await?
        };
        let view = current
            .as_ref()
            .and_then(|l| protocol::parse(Protocol::Native, l, cluster));
        let Some(desire) = decide(view.as_ref()) else {
            return Ok(Outcome::Unchanged);
        };
        if view.as_ref().is_some_and(|v| already(v, &desire)) {
            return Ok(Outcome::Unchanged);
        }
        let now = jiff::Timestamp::now();
        let result = match &current {
            None => {
                let mut lease = protocol::granted(
                    &protocol::new_target_lease(prefix, cluster, key, &desire),
                    &desire,
                    now,
                );
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
                    &protocol::granted(&protocol::with_desire(lease, &desire), &desire, now),
                )
                .await
                .map(|_| Outcome::Updated),
        };
        match result {
            Err(kube::Error::Api(s)) if s.code == 409 => after_conflict(attempt).await,
            other => return other,
        }
    }
    Ok(Outcome::Unchanged)
}

/// Writes `lease` as a compare-and-swap on what was seen: creates it when `expect` is `None`,
/// else replaces the copy at `expect`. A conflict (it exists, or changed since) is
/// [`Outcome::Unchanged`]: someone decided on a newer copy, and the next decision sees it. No
/// read first: the caller decided on a copy it knows.
pub async fn put_at(api: &Api<Lease>, lease: Lease, expect: Option<&str>) -> kube::Result<Outcome> {
    let mut lease = lease;
    lease.metadata.namespace = None;
    let result = match expect {
        None => api
            .create(&PostParams::default(), &lease)
            .await
            .map(|_| Outcome::Created),
        Some(rv) => {
            lease.metadata.resource_version = Some(rv.to_owned());
            let name = lease.metadata.name.clone().unwrap_or_default();
            api.replace(&name, &PostParams::default(), &lease)
                .await
                .map(|_| Outcome::Updated)
        }
    };
    match result {
        Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => Ok(Outcome::Unchanged),
        other => other,
    }
}

/// Deletes Lease `name` if it is still at `resource_version` (a precondition: a
/// compare-and-swap). Gone or changed since: [`Outcome::Unchanged`].
pub async fn delete_at(
    api: &Api<Lease>,
    name: &str,
    resource_version: &str,
) -> kube::Result<Outcome> {
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            resource_version: Some(resource_version.to_owned()),
            uid: None,
        }),
        ..Default::default()
    };
    match api.delete(name, &params).await {
        Ok(_) => Ok(Outcome::Deleted),
        Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => Ok(Outcome::Unchanged),
        Err(e) => Err(e),
    }
}

/// Fences `member`'s member Lease. If it is missing, creates it fenced
/// ([`Fence::Absent`]; a create is a compare-and-swap on absence). If it exists, fences it
/// ([`Fence::Expired`]) only when `expired()` — the record the index saw unchanged for a full
/// duration — is exactly the record read now: then the member's renew deadline has passed,
/// and no renewal it sent can succeed after this write (they carry the older version).
pub async fn fence(
    api: &Api<Lease>,
    prefix: &str,
    cluster: &str,
    member: &str,
    duration_s: i32,
    expired: impl Fn() -> Option<Holding>,
) -> kube::Result<Outcome> {
    let name = protocol::names::member_lease(prefix, cluster, member);
    let now = jiff::Timestamp::now();
    match api.get_opt(&name).await? {
        None => {
            let lease = protocol::new_fenced_member_lease(prefix, cluster, member, now, duration_s);
            match api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(Outcome::Created),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(Outcome::Unchanged),
                Err(e) => Err(e),
            }
        }
        Some(lease) => {
            let fresh = Holding::of(lease.spec.as_ref());
            if fresh.holder.as_deref() != Some(member) || expired().as_ref() != Some(&fresh) {
                return Ok(Outcome::Unchanged);
            }
            let fenced = protocol::fenced(&lease, Fence::Expired, now);
            match api.replace(&name, &PostParams::default(), &fenced).await {
                Ok(_) => Ok(Outcome::Updated),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(Outcome::Unchanged),
                Err(e) => Err(e),
            }
        }
    }
}

/// Whether the holds of `member` may be revoked, on a fresh read of its member
/// Lease: released by the member, or fenced after its renew deadline had passed — or, when the
/// control plane created it fenced for want of one ([`Fence::Absent`]), only once the index
/// has seen exactly the record read now unchanged for the longer of its duration and the
/// hold's (`hold_s`): a member whose Lease was deleted may still have been within its renew
/// deadline when the fenced one was created.
pub async fn may_revoke(
    api: &Api<Lease>,
    prefix: &str,
    cluster: &str,
    member: &str,
    hold_s: i32,
    observed: impl Fn() -> Option<(Holding, i64)>,
) -> kube::Result<bool> {
    let name = protocol::names::member_lease(prefix, cluster, member);
    let Some(lease) = api.get_opt(&name).await? else {
        return Ok(false);
    };
    let Some(view) = protocol::parse_native(&lease, cluster) else {
        return Ok(false);
    };
    if view.holding.holder.is_some() {
        return Ok(false);
    }
    Ok(match view.fence {
        Some(Fence::Absent) => observed().is_some_and(|(record, unchanged_ms)| {
            let wait_s = view.holding.duration_s.max(hold_s).max(1);
            record == view.holding && unchanged_ms >= i64::from(wait_s) * 1000
        }),
        _ => true,
    })
}

/// Sets the desired owner of target `key` (as [`set_desire`]; `desire` `None`
/// keeps the annotations) and clears its holder in the same write if the holder is still
/// `holder` and `revocable(hold duration)` says so — asked *after* the target was read, so that a member
/// that registers again and re-takes the target in between makes this write fail with 409
/// (and be decided again) instead of undoing its hold.
pub async fn desire_or_revoke<F, Fut>(
    api: &Api<Lease>,
    prefix: &str,
    cluster: &str,
    key: &str,
    holder: &str,
    mut decide: impl FnMut(Option<&LeaseView>) -> Option<Desire>,
    revocable: F,
) -> kube::Result<Outcome>
where
    F: Fn(i32) -> Fut,
    Fut: Future<Output = kube::Result<bool>>,
{
    let name = protocol::names::target_lease(prefix, cluster, key);
    for attempt in 0..MAX_CONFLICTS {
        let Some(current) = api.get_opt(&name).await? else {
            return Ok(Outcome::Unchanged);
        };
        let Some(view) = protocol::parse_native(&current, cluster) else {
            return Ok(Outcome::Unchanged);
        };
        let desire = decide(Some(&view));
        let held = view.holding.holder.as_deref() == Some(holder)
            && desire.as_ref().is_none_or(|d| d.owner != holder);
        let unchanged = desire.as_ref().is_none_or(|d| already(&view, d));
        let next = if held && revocable(view.holding.duration_s).await? {
            let now = jiff::Timestamp::now();
            match &desire {
                Some(d) => protocol::granted(&protocol::revoked(&current, d, now), d, now),
                None => protocol::released(&current, now),
            }
        } else {
            match &desire {
                Some(d) if !unchanged => {
                    let now = jiff::Timestamp::now();
                    protocol::granted(&protocol::with_desire(&current, d), d, now)
                }
                _ => return Ok(Outcome::Unchanged),
            }
        };
        match api.replace(&name, &PostParams::default(), &next).await {
            Ok(_) => return Ok(Outcome::Updated),
            Err(kube::Error::Api(s)) if s.code == 409 => after_conflict(attempt).await,
            Err(e) => return Err(e),
        }
    }
    Ok(Outcome::Unchanged)
}

/// Whether the Lease already asks for exactly `desire`.
fn already(view: &LeaseView, desire: &Desire) -> bool {
    view.desired.as_deref() == Some(desire.owner.as_str())
        && view.operation == desire.operation
        && view.desired_term == desire.term
        && view.desired_duration_s == Some(desire.duration_s)
        && view.overlap_ms == desire.overlap_ms
}

/// Deletes Lease `name` if `decide` still wants it gone on fresh data; the delete carries the
/// version read as a precondition.
pub async fn delete_if(
    api: &Api<Lease>,
    name: &str,
    mut decide: impl FnMut(&Lease) -> bool,
) -> kube::Result<Outcome> {
    for attempt in 0..MAX_CONFLICTS {
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
            Err(kube::Error::Api(s)) if s.code == 409 => after_conflict(attempt).await,
            Err(e) => return Err(e),
        }
    }
    Ok(Outcome::Unchanged)
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::model::Cause;

    /// Target Leases in the simulator's default namespace, through a client that notes the
    /// method of every request it sends.
    async fn noting(sim: &kube_sim::testkit::TestSim) -> (Api<Lease>, Arc<Mutex<Vec<String>>>) {
        let kc = kube::config::Kubeconfig::from_yaml(&sim.kubeconfig_text()).expect("kubeconfig");
        let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
            .await
            .expect("config");
        let sent = Arc::new(Mutex::new(Vec::new()));
        let log = sent.clone();
        let note =
            tower::util::MapRequestLayer::new(move |r: http::Request<kube::client::Body>| {
                log.lock().unwrap().push(r.method().to_string());
                r
            });
        let client = kube::client::ClientBuilder::try_from(config)
            .expect("client")
            .with_layer(&note)
            .build();
        (Api::default_namespaced(client), sent)
    }

    fn to(owner: &str) -> Desire {
        Desire {
            owner: owner.into(),
            cause: Cause::Initial,
            operation: None,
            duration_s: 10,
            term: None,
            overlap_ms: None,
        }
    }

    /// The desired owner target `t1`'s Lease names now.
    async fn desired_now(api: &Api<Lease>) -> Option<String> {
        let lease = api
            .get(&protocol::names::target_lease("lh", "c", "t1"))
            .await
            .expect("the Lease");
        protocol::parse(Protocol::Native, &lease, "c").and_then(|v| v.desired)
    }

    #[tokio::test]
    async fn a_lease_the_model_has_not_seen_is_created_in_one_request() {
        let sim = kube_sim::testkit::start_sim().await;
        let (api, sent) = noting(&sim).await;
        let outcome = set_desire(&api, "lh", "c", "t1", true, |_| Some(to("m-0")))
            .await
            .expect("write");
        assert_eq!(outcome, Outcome::Created);
        assert_eq!(
            *sent.lock().unwrap(),
            ["POST"],
            "a create, no read before it"
        );
        assert_eq!(desired_now(&api).await.as_deref(), Some("m-0"));
    }

    #[tokio::test]
    async fn a_lease_created_meanwhile_is_read_and_decided_on_not_overwritten() {
        let sim = kube_sim::testkit::start_sim().await;
        let (api, sent) = noting(&sim).await;
        // Someone else created it after the caller's model was built.
        set_desire(&api, "lh", "c", "t1", true, |_| Some(to("m-1")))
            .await
            .expect("first write");
        sent.lock().unwrap().clear();
        let mut seen = Vec::new();
        let outcome = set_desire(&api, "lh", "c", "t1", true, |current| {
            seen.push(current.and_then(|v| v.desired.clone()));
            // As the control loop decides: only if nobody decided since (it saw no owner).
            current.is_none().then(|| to("m-0"))
        })
        .await
        .expect("second write");
        assert_eq!(outcome, Outcome::Unchanged);
        assert_eq!(
            seen,
            [None, Some("m-1".to_owned())],
            "asked again on what is there"
        );
        assert_eq!(
            *sent.lock().unwrap(),
            ["POST", "GET"],
            "the create refused, then a read"
        );
        assert_eq!(desired_now(&api).await.as_deref(), Some("m-1"));
    }

    #[tokio::test]
    async fn a_lease_the_model_has_seen_is_read_before_it_is_written() {
        let sim = kube_sim::testkit::start_sim().await;
        let (api, sent) = noting(&sim).await;
        set_desire(&api, "lh", "c", "t1", false, |_| Some(to("m-1")))
            .await
            .expect("create");
        assert_eq!(*sent.lock().unwrap(), ["GET", "POST"]);
        sent.lock().unwrap().clear();
        let outcome = set_desire(&api, "lh", "c", "t1", false, |_| Some(to("m-0")))
            .await
            .expect("update");
        assert_eq!(outcome, Outcome::Updated);
        assert_eq!(*sent.lock().unwrap(), ["GET", "PUT"]);
    }
}
