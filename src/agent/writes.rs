//! The agent's Lease writes: each one a PUT of a `protocol` change with the `resourceVersion`
//! of the copy it was made from (a compare-and-swap), bounded in time. A 409 never retries
//! blindly: it reads a fresh copy and hands it back for the caller to re-decide on; only a
//! release re-tries by itself, and only while the fresh copy still names us. Also the one other
//! write a member makes: an overrun report as a Kubernetes Event.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Api, PostParams};
use kube::runtime::events::{Event, EventType, Recorder};

use crate::k8s::election::is_conflict;
use crate::protocol::{self, Holding, Overrun, member};

/// Bound on a release write (acquisitions and renewals are bounded by a third of the duration),
/// and on publishing an Event.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(5);
/// Tries of a release that keeps meeting 409s (each after a fresh GET).
const RELEASE_TRIES: usize = 3;
/// Shortest bound on one write, whatever the duration.
const MIN_WRITE_TIMEOUT: Duration = Duration::from_millis(200);

/// Why a write did not go through.
pub(super) enum WriteError {
    /// 409; carries a fresh copy read after it, if the read worked.
    Conflict(Option<Box<Lease>>),
    /// The Lease is gone.
    NotFound,
    /// Anything else (timeouts, connection errors, other statuses).
    Other(String),
}

/// Acquire or renew, bounded by a third of the duration (a later answer could not keep the
/// Lease anyway): v1 `protocol::held_by`; v2 `protocol::acquired_v2` (always a new hold, the
/// generation moves; v2 never renews a target Lease).
pub(super) async fn hold(
    api: &Api<Lease>,
    name: &str,
    lease: &Lease,
    me: &str,
    duration: Duration,
    v2: bool,
) -> Result<Lease, WriteError> {
    let secs = i32::try_from(duration.as_secs()).unwrap_or(i32::MAX);
    let write = if v2 {
        protocol::acquired_v2
    } else {
        protocol::held_by
    };
    let next = write(lease, me, jiff::Timestamp::now(), secs);
    put(api, name, &next, duration / 3).await
}

/// Protocol v2: the member Lease write `write` of `me` (`protocol::member::member_lease_write`:
/// register — create —, take again in a new term, or renew), carrying `leaving` and the
/// member's last overrun, if any, waiting `timeout` for the answer
/// (`protocol::member::Authority::write_timeout`). `current` is the freshest copy known (`None`: create it). A
/// create that finds the Lease already there answers like a 409, with the copy read after it.
pub(super) async fn heartbeat(
    api: &Api<Lease>,
    current: Option<&Lease>,
    (prefix, cluster, me): (&str, &str, &str),
    duration: Duration,
    (leaving, overrun): (bool, Option<&Overrun>),
    (write, timeout): (member::Write, Duration),
) -> Result<Lease, WriteError> {
    let secs = i32::try_from(duration.as_secs()).unwrap_or(i32::MAX);
    let timeout = timeout.max(MIN_WRITE_TIMEOUT);
    let (mut next, create) = member::member_lease_write(
        current,
        write,
        (prefix, cluster, me),
        jiff::Timestamp::now(),
        secs,
        leaving,
    );
    if let Some(o) = overrun {
        protocol::report_overrun(&mut next, o);
    }
    let name = protocol::names::member_lease(prefix, cluster, me);
    if !create {
        return put(api, &name, &next, timeout).await;
    }
    match tokio::time::timeout(timeout, api.create(&PostParams::default(), &next)).await {
        Ok(Ok(l)) => Ok(l),
        Ok(Err(e)) if is_conflict(&e) => {
            match tokio::time::timeout(timeout, api.get_opt(&name)).await {
                Ok(Ok(Some(l))) => Err(WriteError::Conflict(Some(Box::new(l)))),
                _ => Err(WriteError::Conflict(None)),
            }
        }
        Ok(Err(e)) => Err(WriteError::Other(e.to_string())),
        Err(_) => Err(WriteError::Other(format!("no answer within {timeout:?}"))),
    }
}

/// Publishes an overrun report as a Warning Event (`PausedPastHold`) about the member's pod,
/// with its member Lease as the related object in protocol v2; bounded in time.
pub(super) async fn publish_overrun(
    recorder: &Recorder,
    pod: &ObjectReference,
    member_lease: Option<ObjectReference>,
    o: &Overrun,
) -> Result<(), String> {
    let event = Event {
        type_: EventType::Warning,
        reason: "PausedPastHold".into(),
        note: Some(o.describe()),
        action: "StopWork".into(),
        secondary: member_lease,
    };
    match tokio::time::timeout(RELEASE_TIMEOUT, recorder.publish(&event, pod)).await {
        Ok(r) => r.map_err(|e| e.to_string()),
        Err(_) => Err(format!("no answer within {RELEASE_TIMEOUT:?}")),
    }
}

/// Release: `protocol::released` — with `hand_over` (v2 target Leases) `protocol::given_up`, which hands the Lease straight
/// to its desired owner when the control plane wrote down that owner's term; on a 409, release
/// (or hand over) the fresh copy again only if it still names us. Returns the Lease as last
/// written or read (None when it is gone).
pub(super) async fn release(
    api: &Api<Lease>,
    name: &str,
    mut lease: Lease,
    me: &str,
    hand_over: bool,
) -> Result<Option<Lease>, String> {
    for _ in 0..RELEASE_TRIES {
        let now = jiff::Timestamp::now();
        let next = if hand_over {
            protocol::given_up(&lease, me, now)
        } else {
            protocol::released(&lease, now)
        };
        match put(api, name, &next, RELEASE_TIMEOUT).await {
            Ok(written) => return Ok(Some(written)),
            Err(WriteError::NotFound) => return Ok(None),
            Err(WriteError::Conflict(Some(fresh))) => {
                if Holding::of(fresh.spec.as_ref()).holder.as_deref() != Some(me) {
                    return Ok(Some(*fresh));
                }
                lease = *fresh;
            }
            Err(WriteError::Conflict(None)) => {
                return Err("conflict, and the re-read failed".to_owned());
            }
            Err(WriteError::Other(e)) => return Err(e),
        }
    }
    Err("the lease kept changing".to_owned())
}

/// PUT with the copy's resourceVersion, bounded by `timeout`; a 409 reads a fresh copy.
async fn put(
    api: &Api<Lease>,
    name: &str,
    lease: &Lease,
    timeout: Duration,
) -> Result<Lease, WriteError> {
    let timeout = timeout.max(MIN_WRITE_TIMEOUT);
    let res = tokio::time::timeout(timeout, api.replace(name, &PostParams::default(), lease)).await;
    match res {
        Ok(Ok(l)) => Ok(l),
        Ok(Err(kube::Error::Api(s))) if s.code == 404 => Err(WriteError::NotFound),
        Ok(Err(e)) if is_conflict(&e) => {
            let fresh = tokio::time::timeout(timeout, api.get_opt(name)).await;
            match fresh {
                Ok(Ok(Some(l))) => Err(WriteError::Conflict(Some(Box::new(l)))),
                Ok(Ok(None)) => Err(WriteError::NotFound),
                _ => Err(WriteError::Conflict(None)),
            }
        }
        Ok(Err(e)) => Err(WriteError::Other(e.to_string())),
        Err(_) => Err(WriteError::Other(format!("no answer within {timeout:?}"))),
    }
}
