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
use crate::k8s::pacing::Sample;
use crate::protocol::{self, Holding, Overrun};

/// Bound on a release write (acquisitions and renewals are bounded by a third of the duration),
/// and on publishing an Event.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(5);
/// Tries of a release that keeps meeting 409s (each after a fresh GET).
const RELEASE_TRIES: usize = 3;
/// Shortest bound on one write, whatever the duration.
const MIN_WRITE_TIMEOUT: Duration = Duration::from_millis(200);
/// The first pause before retrying a failed write ([`retry_delay`]).
const BACKOFF_BASE: Duration = Duration::from_millis(250);

/// Why a write did not go through.
pub(super) enum WriteError {
    /// 409; carries a fresh copy read after it, if the read worked.
    Conflict(Option<Box<Lease>>),
    /// The Lease is gone.
    NotFound,
    /// Refused for load (429, 5xx) or not answered in time: back off, at least `retry_after`
    /// when the server said (a 429's `retryAfterSeconds`, as API Priority and Fairness sends).
    Busy {
        error: String,
        retry_after: Option<Duration>,
    },
    /// Anything else (connection errors, other statuses).
    Other(String),
}

impl WriteError {
    /// How a write went, for the [write limit](crate::k8s::pacing), answered `took` after it
    /// was sent.
    pub(super) fn sample<T>(result: &Result<T, WriteError>, took: Duration) -> Sample {
        match result {
            Err(WriteError::Busy { .. } | WriteError::Other(_)) => Sample::Overloaded,
            Ok(_) | Err(WriteError::Conflict(_) | WriteError::NotFound) => Sample::Answered(took),
        }
    }
}

/// The pause before retrying a write that failed (not a 409: that is re-decided at once on the
/// fresh copy) for the `failures`-th time in a row: 250 ms doubling up to `cap`, drawn at random
/// from its upper half so that members that failed together do not retry together — and never
/// shorter than the server's `retry_after` (itself at most `cap`). `unit` is a random draw in
/// `[0, 1)`.
pub(super) fn retry_delay(
    failures: u32,
    retry_after: Option<Duration>,
    cap: Duration,
    unit: f64,
) -> Duration {
    let base = BACKOFF_BASE
        .saturating_mul(1 << failures.saturating_sub(1).min(8))
        .min(cap);
    let jittered = base.mul_f64(0.5 + 0.5 * unit.clamp(0.0, 1.0));
    jittered.max(retry_after.unwrap_or_default().min(cap))
}

/// Acquire: `protocol::acquired` (always a new hold, the generation moves; a target Lease is
/// never renewed), bounded by two thirds of `D`, the member Lease's renew deadline: the hold
/// lasts as long as the member's authority, so a slow answer is still one
/// (`protocol::member::after_acquire` decides what it is worth), and a write given up while
/// the server works on it would only be sent again, into a 409 and a re-read.
pub(super) async fn acquire(
    api: &Api<Lease>,
    name: &str,
    lease: &Lease,
    me: &str,
    duration: Duration,
) -> Result<Lease, WriteError> {
    let secs = i32::try_from(duration.as_secs()).unwrap_or(i32::MAX);
    let next = protocol::acquired(lease, me, jiff::Timestamp::now(), secs);
    put(api, name, &next, duration * 2 / 3).await
}

/// The next owner's word in an overlap hand-off, `protocol::ready`: its app works on the
/// target under member term `term` (since `at_ms`, Unix ms). Bounded by a third of `D`.
pub(super) async fn ready(
    api: &Api<Lease>,
    name: &str,
    lease: &Lease,
    (term, at_ms): (&str, i64),
    duration: Duration,
) -> Result<Lease, WriteError> {
    let next = protocol::ready(lease, term, at_ms);
    put(api, name, &next, (duration / 3).max(MIN_WRITE_TIMEOUT)).await
}

/// A member Lease write of `me`, built by `protocol::member::member_lease_write`
/// (register — create —, take again in a new term, or renew) — `next`, and whether it is a
/// create — carrying the member's last overrun, if any, and its app's account of its work, if
/// it gives one, waiting `timeout` for the answer (`protocol::member::Authority::write_timeout`). A
/// create that finds the Lease already there answers like a 409, with the copy read after it.
pub(super) async fn heartbeat(
    api: &Api<Lease>,
    (mut next, create): (Lease, bool),
    (prefix, cluster, me): (&str, &str, &str),
    (overrun, app): (Option<&Overrun>, Option<&protocol::AppWork>),
    timeout: Duration,
) -> Result<Lease, WriteError> {
    let timeout = timeout.max(MIN_WRITE_TIMEOUT);
    if let Some(o) = overrun {
        protocol::report_overrun(&mut next, o);
    }
    if let Some(w) = app {
        protocol::report_app_work(&mut next, w);
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
        Ok(Err(e)) => Err(classify(e)),
        Err(_) => Err(busy_timeout(timeout)),
    }
}

/// Publishes an overrun report as a Warning Event (`PausedPastHold`) about the member's pod,
/// with its member Lease as the related object; bounded in time.
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

/// How a held Lease is let go ([`release`]).
#[derive(Debug, Clone, Copy)]
pub(super) enum LetGo {
    /// `protocol::released` (the member Lease).
    Release,
    /// `protocol::given_up` (target Leases): handed straight to the desired owner when the
    /// control plane wrote down that owner's term, with when the app last worked on it if known
    /// (`protocol::with_stopped_at`); else released.
    GiveUp { stopped_at_ms: Option<i64> },
}

/// Lets go of `lease` as `how` says; on a 409, release
/// (or hand over) the fresh copy again only if it still names us. Returns the Lease as last
/// written or read (None when it is gone).
pub(super) async fn release(
    api: &Api<Lease>,
    name: &str,
    mut lease: Lease,
    me: &str,
    how: LetGo,
) -> Result<Option<Lease>, String> {
    for _ in 0..RELEASE_TRIES {
        let now = jiff::Timestamp::now();
        let next = match how {
            LetGo::GiveUp { stopped_at_ms } => {
                protocol::with_stopped_at(protocol::given_up(&lease, me, now), me, stopped_at_ms)
            }
            LetGo::Release => protocol::released(&lease, now),
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
            Err(WriteError::Busy { error: e, .. } | WriteError::Other(e)) => return Err(e),
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
        Ok(Err(e)) => Err(classify(e)),
        Err(_) => Err(busy_timeout(timeout)),
    }
}

/// A failed request that is not a 409 or a 404: busy (429, 5xx) or other.
fn classify(e: kube::Error) -> WriteError {
    match e {
        kube::Error::Api(s) if s.code == 429 || s.code >= 500 => WriteError::Busy {
            retry_after: s
                .details
                .as_ref()
                .map(|d| d.retry_after_seconds)
                .filter(|secs| *secs > 0)
                .map(|secs| Duration::from_secs(secs.into())),
            error: format!("{} ({})", s.message, s.code),
        },
        e => WriteError::Other(e.to_string()),
    }
}

/// No answer within `timeout`: the server is slow (or the connection is gone).
fn busy_timeout(timeout: Duration) -> WriteError {
    WriteError::Busy {
        error: format!("no answer within {timeout:?}"),
        retry_after: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_back_off_with_jitter_and_honour_retry_after() {
        let cap = Duration::from_secs(3);
        let ms = Duration::from_millis;
        assert_eq!(retry_delay(1, None, cap, 0.0), ms(125));
        assert_eq!(retry_delay(1, None, cap, 1.0), ms(250));
        assert_eq!(retry_delay(3, None, cap, 1.0), ms(1_000));
        assert_eq!(
            retry_delay(30, None, cap, 1.0),
            cap,
            "doubling stops at the cap"
        );
        assert_eq!(retry_delay(30, None, cap, 0.0), cap / 2);
        assert_eq!(
            retry_delay(1, Some(Duration::from_secs(1)), cap, 0.0),
            Duration::from_secs(1),
            "never sooner than the server asked"
        );
        assert_eq!(
            retry_delay(1, Some(Duration::from_secs(60)), cap, 0.0),
            cap,
            "but not past the cap"
        );
    }

    #[test]
    fn refusals_for_load_are_busy_and_carry_retry_after() {
        let status = |code: u16, retry: u32| {
            let s: kube::core::Status = serde_json::from_value(serde_json::json!({
                "code": code,
                "message": "too many requests",
                "details": { "retryAfterSeconds": retry },
            }))
            .unwrap();
            kube::Error::Api(s.boxed())
        };
        match classify(status(429, 2)) {
            WriteError::Busy { retry_after, .. } => {
                assert_eq!(retry_after, Some(Duration::from_secs(2)))
            }
            _ => panic!("a 429 is busy"),
        }
        assert!(matches!(
            classify(status(503, 0)),
            WriteError::Busy {
                retry_after: None,
                ..
            }
        ));
        assert!(matches!(classify(status(422, 0)), WriteError::Other(_)));
        let took = Duration::from_millis(7);
        assert_eq!(
            WriteError::sample::<()>(&Err(classify(status(429, 1))), took),
            Sample::Overloaded
        );
        assert_eq!(
            WriteError::sample::<()>(&Err(WriteError::Conflict(None)), took),
            Sample::Answered(took)
        );
    }
}
