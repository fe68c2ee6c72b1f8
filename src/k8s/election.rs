//! Leader election on one `coordination.k8s.io/v1` Lease, client-go's algorithm: GET the
//! Lease (create it, held, if missing), take it only when it is free, already ours, or expired by
//! *our own* observation ([`Observation`]: the holder record unchanged for a full duration on our
//! monotonic clock), and write it only with a PUT carrying the `resourceVersion` we read — a
//! compare-and-swap; a 409 means re-read and re-decide. A leader that cannot renew for
//! `renew_deadline` stops leading before the Lease could expire for anyone else. On shutdown it
//! releases the Lease (`protocol::released`) and then says it no longer leads.
//!
//! It owns nothing else: it never reads desired owners or target Leases (that is `agent`).
//!
//! Two departures from client-go:
//! - A candidate that is not leading backs off while its attempts fail or time out
//!   ([`pause_after`]) — a sick API server gets fewer of its requests (a thousand members
//!   polling every 2 s are 500 requests a second), while a leader keeps retrying every retry
//!   period within its renew deadline.
//! - A candidate that is not leading reads the Lease from the API server's watch cache
//!   (`resourceVersion=0`), not from etcd: those 500 reads a second cost etcd nothing. The copy
//!   may be behind, which is safe: a behind copy shows a change late, so it can only delay an
//!   expiry by our observation, and a write based on it fails its compare-and-swap (409), after
//!   which the candidate reads the latest copy and decides again. A leader reads the latest.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, GetParams, PostParams};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::protocol::{self, Holding, Observation};

/// client-go's default lease duration.
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(15);
/// client-go's default retry period: how often a candidate retries and a leader renews.
pub const DEFAULT_RETRY_PERIOD: Duration = Duration::from_secs(2);

/// What a candidate does with a Lease it has observed. Pure decision, shared with the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Held by us: renew it.
    Renew,
    /// Free, or expired by our observation: take it.
    Acquire,
    /// Held by someone else who may still be alive: look again at `until_ms` (our clock) at
    /// the latest, when it would expire if nothing changes.
    Wait {
        /// When the current record would count as expired.
        until_ms: i64,
    },
}

/// Decides what `me` may do with a Lease whose holder record was observed as `observed`,
/// at `now_ms` on the same monotonic clock the observation uses.
pub fn decide(observed: &Observation, me: &str, now_ms: i64) -> Action {
    match observed.holding().holder.as_deref() {
        Some(h) if h == me => Action::Renew,
        None => Action::Acquire,
        Some(_) if observed.is_expired(now_ms) => Action::Acquire,
        Some(_) => Action::Wait {
            until_ms: observed.since_ms() + i64::from(observed.holding().duration_s.max(0)) * 1000,
        },
    }
}

/// How long to wait before the next attempt, after `failures` attempts in a row that failed or
/// timed out: the retry period while leading (a leader must renew within its deadline) or
/// after a success; otherwise doubling from it per failure, at most the lease duration, taken
/// in `[½, 1]` of that by `unit` (jitter, in `[0, 1]`) so candidates do not retry in step.
/// A candidate backing off notices a leader's death later — at most a lease duration — only
/// while the server is failing its requests.
pub fn pause_after(cfg: &ElectionConfig, failures: u32, leading: bool, unit: f64) -> Duration {
    if leading || failures == 0 {
        return cfg.retry_period;
    }
    let doubled = cfg
        .retry_period
        .saturating_mul(1 << failures.min(8))
        .min(cfg.lease_duration.max(cfg.retry_period));
    doubled.mul_f64(0.5 + 0.5 * unit.clamp(0.0, 1.0))
}

/// Settings of one elector.
#[derive(Debug, Clone)]
pub struct ElectionConfig {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease.
    pub lease_name: String,
    /// Our holder identity (the pod name).
    pub identity: String,
    /// How long a holder promises to renew within (`leaseDurationSeconds`, whole seconds).
    pub lease_duration: Duration,
    /// How long a leader keeps trying to renew before it stops leading. Must be shorter than
    /// `lease_duration` so that we stop before anyone else may take the Lease.
    pub renew_deadline: Duration,
    /// Time between attempts, for candidates and leaders alike.
    pub retry_period: Duration,
    /// Labels put on the Lease when we create it (an existing Lease's labels are left alone).
    pub labels: BTreeMap<String, String>,
}

impl ElectionConfig {
    /// client-go's defaults: 15 s duration, renew deadline 2/3 of it, 2 s retry period.
    pub fn new(namespace: &str, lease_name: &str, identity: &str) -> Self {
        Self {
            namespace: namespace.to_owned(),
            lease_name: lease_name.to_owned(),
            identity: identity.to_owned(),
            lease_duration: DEFAULT_LEASE_DURATION,
            renew_deadline: DEFAULT_LEASE_DURATION * 2 / 3,
            retry_period: DEFAULT_RETRY_PERIOD,
            labels: BTreeMap::new(),
        }
    }

    /// Sets the duration and the derived renew deadline (2/3 of it).
    pub fn with_duration(mut self, lease_duration: Duration) -> Self {
        self.lease_duration = lease_duration;
        self.renew_deadline = lease_duration * 2 / 3;
        self
    }
}

/// A leader elector on one Lease. See the module header.
#[derive(Debug, Clone)]
pub struct LeaderElector {
    cfg: ElectionConfig,
}

/// What one attempt found.
enum Attempt {
    /// We hold the Lease now (acquired or renewed); `sent` is when the winning write was sent.
    Holding { sent: Instant },
    /// Someone else holds it, or our write lost a race.
    NotHolding,
}

impl LeaderElector {
    /// An elector with these settings.
    pub fn new(cfg: ElectionConfig) -> Self {
        Self { cfg }
    }

    /// Takes part in the election until `shutdown` completes; `leading` says whether we lead.
    /// On shutdown, a leader releases the Lease first and then sends `false`. API errors are
    /// retried every retry period, never returned.
    pub async fn run(
        self,
        client: kube::Client,
        leading: watch::Sender<bool>,
        shutdown: impl Future<Output = ()>,
    ) {
        let cfg = &self.cfg;
        let api: Api<Lease> = Api::namespaced(client, &cfg.namespace);
        let clock = Instant::now();
        let mut observed: Option<Observation> = None;
        // Send time of the last successful acquire/renew while leading.
        let mut renewed: Option<Instant> = None;
        let mut next = Instant::now();
        // Attempts in a row that failed or timed out ([`pause_after`]).
        let mut failures = 0u32;
        tokio::pin!(shutdown);
        loop {
            // A leader's renew deadline runs during sleeps and during attempts alike.
            let deadline = renewed.map(|r| r + cfg.renew_deadline);
            let lost = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            let attempt = async {
                tokio::time::sleep_until(next).await;
                tokio::time::timeout(
                    cfg.retry_period.max(Duration::from_millis(500)),
                    self.attempt(&api, clock, &mut observed, renewed.is_some()),
                )
                .await
            };
            tokio::select! {
                () = &mut shutdown => break,
                () = lost => {
                    tracing::warn!(lease = %cfg.lease_name, "renew deadline passed; no longer leading");
                    renewed = None;
                    leading.send_replace(false);
                    next = Instant::now() + cfg.retry_period;
                }
                res = attempt => {
                    failures = if matches!(res, Ok(Ok(_))) { 0 } else { failures.saturating_add(1) };
                    let pause = pause_after(cfg, failures, renewed.is_some(), rand::random());
                    next = Instant::now() + pause;
                    match res {
                        Ok(Ok(Attempt::Holding { sent })) => {
                            if renewed.is_none() {
                                tracing::info!(lease = %cfg.lease_name, identity = %cfg.identity, "became leader");
                            }
                            renewed = Some(sent);
                            leading.send_replace(true);
                        }
                        Ok(Ok(Attempt::NotHolding)) => {
                            if renewed.take().is_some() {
                                tracing::warn!(lease = %cfg.lease_name, "lost the lease to another holder");
                                leading.send_replace(false);
                            }
                        }
                        Ok(Err(error)) => {
                            tracing::warn!(lease = %cfg.lease_name, %error, "leader election attempt failed");
                        }
                        Err(_) => {
                            tracing::warn!(lease = %cfg.lease_name, "leader election attempt timed out");
                        }
                    }
                }
            }
        }
        if renewed.is_some() {
            match tokio::time::timeout(cfg.renew_deadline, self.release(&api)).await {
                Ok(Ok(())) => tracing::info!(lease = %cfg.lease_name, "released leadership"),
                Ok(Err(error)) => {
                    tracing::warn!(lease = %cfg.lease_name, %error, "could not release leadership")
                }
                Err(_) => tracing::warn!(lease = %cfg.lease_name, "releasing leadership timed out"),
            }
        }
        leading.send_replace(false);
    }

    fn now_ms(clock: Instant) -> i64 {
        i64::try_from(clock.elapsed().as_millis()).unwrap_or(i64::MAX)
    }

    fn duration_s(&self) -> i32 {
        i32::try_from(self.cfg.lease_duration.as_secs().max(1)).unwrap_or(i32::MAX)
    }

    /// One GET-decide-PUT round; a 409 on create or replace re-reads (the latest copy) once and
    /// re-decides. A candidate that is not `leading` reads its first copy from the API server's
    /// cache.
    async fn attempt(
        &self,
        api: &Api<Lease>,
        clock: Instant,
        observed: &mut Option<Observation>,
        leading: bool,
    ) -> Result<Attempt, kube::Error> {
        let me = self.cfg.identity.as_str();
        for look in 0..2 {
            let got = if look == 0 && !leading {
                match api.get_with(&self.cfg.lease_name, &GetParams::any()).await {
                    Ok(lease) => Some(lease),
                    Err(kube::Error::Api(e)) if e.code == 404 => None,
                    Err(e) => return Err(e),
                }
            } else {
                api.get_opt(&self.cfg.lease_name).await?
            };
            let Some(lease) = got else {
                let sent = Instant::now();
                let fresh = protocol::held_by(
                    &self.new_lease(),
                    me,
                    jiff::Timestamp::now(),
                    self.duration_s(),
                );
                match api.create(&PostParams::default(), &fresh).await {
                    Ok(_) => return Ok(Attempt::Holding { sent }),
                    Err(e) if is_conflict(&e) => continue,
                    Err(e) => return Err(e),
                }
            };
            let now_ms = Self::now_ms(clock);
            let holding = Holding::of(lease.spec.as_ref());
            match observed {
                Some(o) => {
                    o.observe(&holding, now_ms);
                }
                None => *observed = Some(Observation::new(holding, now_ms)),
            }
            let Some(o) = observed.as_ref() else {
                continue;
            };
            match decide(o, me, now_ms) {
                Action::Wait { .. } => return Ok(Attempt::NotHolding),
                Action::Renew | Action::Acquire => {
                    let sent = Instant::now();
                    let next =
                        protocol::held_by(&lease, me, jiff::Timestamp::now(), self.duration_s());
                    match api
                        .replace(&self.cfg.lease_name, &PostParams::default(), &next)
                        .await
                    {
                        Ok(_) => return Ok(Attempt::Holding { sent }),
                        Err(e) if is_conflict(&e) => continue,
                        Err(e) => return Err(e),
                    }
                }
            }
        }
        Ok(Attempt::NotHolding)
    }

    /// Clears the holder if it is still us (compare-and-swap; a 409 re-reads once).
    async fn release(&self, api: &Api<Lease>) -> Result<(), kube::Error> {
        for _ in 0..2 {
            let Some(lease) = api.get_opt(&self.cfg.lease_name).await? else {
                return Ok(());
            };
            if Holding::of(lease.spec.as_ref()).holder.as_deref() != Some(&self.cfg.identity) {
                return Ok(());
            }
            let next = protocol::released(&lease, jiff::Timestamp::now());
            match api
                .replace(&self.cfg.lease_name, &PostParams::default(), &next)
                .await
            {
                Ok(_) => return Ok(()),
                Err(e) if is_conflict(&e) => continue,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn new_lease(&self) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some(self.cfg.lease_name.clone()),
                namespace: Some(self.cfg.namespace.clone()),
                labels: (!self.cfg.labels.is_empty()).then(|| self.cfg.labels.clone()),
                ..Default::default()
            },
            spec: Some(LeaseSpec::default()),
        }
    }
}

/// A 409: the resourceVersion we wrote against is stale, or the object already exists.
pub fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_candidate_backs_off_while_its_attempts_fail_and_a_leader_never_does() {
        let cfg = ElectionConfig::new("ns", "l", "me").with_duration(Duration::from_secs(10));
        let two = Duration::from_secs(2);
        assert_eq!(pause_after(&cfg, 0, false, 0.3), two, "after a success");
        assert_eq!(
            pause_after(&cfg, 5, true, 0.3),
            two,
            "leading: within the renew deadline"
        );
        assert_eq!(pause_after(&cfg, 1, false, 1.0), Duration::from_secs(4));
        assert_eq!(
            pause_after(&cfg, 1, false, 0.0),
            two,
            "jitter: half at the least"
        );
        assert_eq!(pause_after(&cfg, 2, false, 1.0), Duration::from_secs(8));
        assert_eq!(
            pause_after(&cfg, 30, false, 1.0),
            Duration::from_secs(10),
            "at most the lease duration"
        );
    }

    use super::*;

    fn held(by: &str, duration_s: i32) -> Holding {
        Holding {
            holder: Some(by.into()),
            duration_s,
            renew: Some(jiff::Timestamp::from_second(1).unwrap()),
            ..Default::default()
        }
    }

    #[test]
    fn free_and_own_leases_are_taken_at_once() {
        let free = Observation::new(Holding::default(), 100);
        assert_eq!(decide(&free, "a", 100), Action::Acquire);
        let mine = Observation::new(held("a", 10), 100);
        assert_eq!(decide(&mine, "a", 100), Action::Renew);
    }

    #[test]
    fn another_holder_is_waited_out_for_a_full_duration_of_our_clock() {
        let mut o = Observation::new(held("b", 10), 5_000);
        assert_eq!(decide(&o, "a", 5_000), Action::Wait { until_ms: 15_000 });
        assert_eq!(decide(&o, "a", 14_999), Action::Wait { until_ms: 15_000 });
        assert_eq!(decide(&o, "a", 15_000), Action::Acquire);
        // A renewal seen at 14 s restarts the wait.
        let renewed = Holding {
            renew: Some(jiff::Timestamp::from_second(2).unwrap()),
            ..held("b", 10)
        };
        o.observe(&renewed, 14_000);
        assert_eq!(decide(&o, "a", 15_000), Action::Wait { until_ms: 24_000 });
    }

    #[test]
    fn a_release_frees_the_lease_at_once() {
        let mut o = Observation::new(held("b", 10), 0);
        let released = Holding {
            holder: None,
            duration_s: protocol::RELEASED_DURATION_SECONDS,
            ..held("b", 10)
        };
        o.observe(&released, 1);
        assert_eq!(decide(&o, "a", 1), Action::Acquire);
    }

    #[test]
    fn defaults_follow_client_go() {
        let c = ElectionConfig::new("ns", "l", "me");
        assert_eq!(c.lease_duration, Duration::from_secs(15));
        assert_eq!(c.renew_deadline, Duration::from_secs(10));
        assert_eq!(c.retry_period, Duration::from_secs(2));
        let short = c.with_duration(Duration::from_secs(3));
        assert_eq!(short.renew_deadline, Duration::from_secs(2));
    }
}
