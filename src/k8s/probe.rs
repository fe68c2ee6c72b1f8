//! Watch probes: how a control-plane replica proves that its Lease watches are current. A watch
//! that hangs — the connection open, nothing passing — looks exactly like a quiet cluster, and
//! a quiet member Lease looks like a dead member. So each replica keeps one Lease of its own in
//! every namespace whose Leases it watches (`<control-plane lease>-probe-<identity>`, role
//! label `watch-probe`, read by no cluster) and rewrites it every third of the shortest lease
//! duration of the clusters there, and at once when asked ([`Probes::hurry`]: a hold has
//! expired by the clock and waits for proof). Each write carries `<boot>/<sequence>` in an
//! annotation and its send time is remembered *before* it is sent; when the watchers see the
//! write come back ([`Probes::returned`]) they give that send time to the index
//! ([`Index::prove`](super::index::Index::prove)). A watch delivers events in
//! `resourceVersion` order, so by then every Lease change committed before the probe has been
//! applied: a hold unchanged up to a probe sent a full duration after it was last seen to
//! change really was not renewed in that time.
//!
//! Writes are compare-and-swap on the `resourceVersion` of the last write (a 409 or 404
//! re-reads), each bounded in time, so a hung API server leaves the proofs ageing — and the
//! model stale — instead of a probe loop stuck. Probe Leases of replicas gone for
//! [`ABANDONED_AFTER`] are deleted (with a `resourceVersion` precondition) by any replica; a
//! replica deletes its own when it stops ([`Probes::remove`]).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{DeleteParams, ListParams, PostParams, Preconditions};
use kube::{Api, Client};
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::{Instrument as _, debug, info, info_span, warn};

use crate::protocol::{self, ANN_IDENTITY, ANN_PROBE, LABEL_ROLE, ROLE_WATCH_PROBE};

/// Probes sent at most this often in one namespace, however hurried.
const MIN_GAP: Duration = Duration::from_millis(100);
/// Sent probes remembered per namespace (the watches see them back within a few at most).
const REMEMBERED: usize = 64;
/// A probe Lease not rewritten for this long belongs to a replica that is gone.
pub const ABANDONED_AFTER: Duration = Duration::from_secs(600);
/// How often each replica looks for abandoned probe Leases.
const SWEEP_EVERY: Duration = Duration::from_secs(300);

/// One namespace to probe, and how often.
#[derive(Debug, Clone)]
pub struct Probed {
    /// The namespace.
    pub namespace: String,
    /// Time between probes when nothing hurries them.
    pub every: Duration,
    /// How long a write may take before the next attempt.
    pub write_timeout: Duration,
}

/// One replica's watch probes.
#[derive(Debug)]
pub struct Probes {
    name: String,
    identity: String,
    /// Tells this process's probes from an earlier one's with the same identity.
    boot: String,
    /// Per namespace: the probes sent, as (sequence, send time in ms).
    sent: Mutex<HashMap<String, VecDeque<(u64, i64)>>>,
    hurry: Notify,
}

impl Probes {
    /// The probes of the replica `identity`, named after the control-plane Lease `stem`.
    pub fn new(stem: &str, identity: &str) -> Arc<Probes> {
        Arc::new(Probes {
            name: protocol::names::probe_lease(stem, identity),
            identity: identity.to_owned(),
            boot: Timestamp::now().as_nanosecond().to_string(),
            sent: Mutex::new(HashMap::new()),
            hurry: Notify::new(),
        })
    }

    /// The name of this replica's probe Lease (the same in every namespace).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Asks for a probe in every namespace now (rate-limited to one per [`MIN_GAP`]).
    pub fn hurry(&self) {
        self.hurry.notify_waiters();
    }

    /// If `meta` is one of this process's probes in `namespace`, coming back on a watch:
    /// when (ms) it was sent.
    pub fn returned(&self, namespace: &str, meta: &ObjectMeta) -> Option<i64> {
        if meta.name.as_deref() != Some(self.name.as_str()) {
            return None;
        }
        let value = meta.annotations.as_ref()?.get(ANN_PROBE)?;
        let (boot, seq) = value.split_once('/')?;
        if boot != self.boot {
            return None;
        }
        let seq: u64 = seq.parse().ok()?;
        let sent = self.sent.lock().unwrap_or_else(|e| e.into_inner());
        sent.get(namespace)?
            .iter()
            .find(|(s, _)| *s == seq)
            .map(|(_, at)| *at)
    }

    /// Remembers probe `seq` as sent now (before it is), returning the annotation value.
    fn sending(&self, namespace: &str, seq: u64) -> String {
        let mut sent = self.sent.lock().unwrap_or_else(|e| e.into_inner());
        let q = sent.entry(namespace.to_owned()).or_default();
        q.push_back((seq, Timestamp::now().as_millisecond()));
        if q.len() > REMEMBERED {
            q.pop_front();
        }
        format!("{}/{seq}", self.boot)
    }

    /// Probes every namespace until dropped (aborted); with none to probe, just waits.
    pub async fn run(self: Arc<Self>, client: Client, namespaces: Vec<Probed>) {
        let mut tasks = JoinSet::new();
        for p in namespaces {
            let span = info_span!("watch_probe", namespace = %p.namespace);
            let api: Api<Lease> = Api::namespaced(client.clone(), &p.namespace);
            tasks.spawn(self.clone().probe(api, p).instrument(span));
        }
        while tasks.join_next().await.is_some() {}
        std::future::pending().await
    }

    async fn probe(self: Arc<Self>, api: Api<Lease>, p: Probed) {
        let mut last: Option<Lease> = None;
        let mut seq = 0u64;
        let mut failing = false;
        let long_ago = |d: Duration| Instant::now().checked_sub(d).unwrap_or_else(Instant::now);
        let mut sent_at = long_ago(p.every);
        let mut swept_at = long_ago(SWEEP_EVERY);
        loop {
            // Register for a hurry before checking the time, so none is missed in between.
            let hurried = self.hurry.notified();
            let due = sent_at + p.every;
            if Instant::now() < due {
                tokio::select! {
                    () = tokio::time::sleep_until(due) => {}
                    () = hurried => {}
                }
            }
            tokio::time::sleep_until(sent_at + MIN_GAP).await;
            sent_at = Instant::now();
            seq += 1;
            let mark = self.sending(&p.namespace, seq);
            let failure =
                match tokio::time::timeout(p.write_timeout, self.write(&api, last.take(), &mark))
                    .await
                {
                    Ok(Ok(lease)) => {
                        last = Some(lease);
                        None
                    }
                    Ok(Err(e)) => Some(e.to_string()),
                    Err(_) => Some(format!("no answer within {:?}", p.write_timeout)),
                };
            // Said once per spell of failures, not every probe.
            match (failure, failing) {
                (Some(error), false) => {
                    warn!(%error, "watch probe not written; the model turns stale without one");
                    failing = true;
                }
                (None, true) => {
                    info!("watch probe written again");
                    failing = false;
                }
                _ => {}
            }
            if swept_at.elapsed() >= SWEEP_EVERY {
                swept_at = Instant::now();
                if let Err(e) = self.sweep(&api).await {
                    debug!(error = %e, "could not look for abandoned watch probes");
                }
            }
        }
    }

    /// Writes the probe: a compare-and-swap on the last written copy, else a read (and a
    /// create when there is none).
    async fn write(
        &self,
        api: &Api<Lease>,
        last: Option<Lease>,
        mark: &str,
    ) -> Result<Lease, kube::Error> {
        let pp = PostParams::default();
        let base = match last {
            Some(l) => l,
            None => match api.get_opt(&self.name).await? {
                Some(l) => l,
                None => return api.create(&pp, &self.lease(None, mark)).await,
            },
        };
        api.replace(&self.name, &pp, &self.lease(Some(base), mark))
            .await
    }

    fn lease(&self, base: Option<Lease>, mark: &str) -> Lease {
        let mut l = base.unwrap_or_else(|| Lease {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                ..Default::default()
            },
            spec: None,
        });
        l.metadata.managed_fields = None;
        l.metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(LABEL_ROLE.to_owned(), ROLE_WATCH_PROBE.to_owned());
        let ann = l.metadata.annotations.get_or_insert_with(BTreeMap::new);
        ann.insert(ANN_IDENTITY.to_owned(), self.identity.clone());
        ann.insert(ANN_PROBE.to_owned(), mark.to_owned());
        l.spec = Some(LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            renew_time: Some(MicroTime(Timestamp::now())),
            lease_duration_seconds: i32::try_from(ABANDONED_AFTER.as_secs()).ok(),
            ..Default::default()
        });
        l
    }

    /// Deletes other replicas' probe Leases not rewritten for [`ABANDONED_AFTER`].
    async fn sweep(&self, api: &Api<Lease>) -> Result<(), kube::Error> {
        let probes = api
            .list(&ListParams::default().labels(&format!("{LABEL_ROLE}={ROLE_WATCH_PROBE}")))
            .await?;
        let now = Timestamp::now();
        for l in probes {
            let renewed = l.spec.as_ref().and_then(|s| s.renew_time.as_ref());
            let abandoned = renewed.is_none_or(|t| {
                now.duration_since(t.0).unsigned_abs() > ABANDONED_AFTER && t.0 < now
            });
            let Some(name) = l.metadata.name.as_deref() else {
                continue;
            };
            if name == self.name || !abandoned {
                continue;
            }
            let dp = DeleteParams {
                preconditions: Some(Preconditions {
                    resource_version: l.metadata.resource_version.clone(),
                    uid: None,
                }),
                ..Default::default()
            };
            match api.delete(name, &dp).await {
                Ok(_) => debug!(name, "deleted an abandoned watch probe"),
                Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Deletes this replica's probe Leases (when it stops), each within `timeout`.
    pub async fn remove(&self, client: &Client, namespaces: &[Probed], timeout: Duration) {
        let mut tasks = JoinSet::new();
        for p in namespaces {
            let api: Api<Lease> = Api::namespaced(client.clone(), &p.namespace);
            let name = self.name.clone();
            tasks.spawn(async move {
                match tokio::time::timeout(timeout, api.delete(&name, &DeleteParams::default()))
                    .await
                {
                    Ok(Ok(_) | Err(kube::Error::Api(_))) => {}
                    Ok(Err(e)) => warn!(error = %e, "could not delete the watch probe"),
                    Err(_) => warn!("deleting the watch probe timed out"),
                }
            });
        }
        while tasks.join_next().await.is_some() {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(name: &str, mark: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.to_owned()),
            annotations: Some(BTreeMap::from([(ANN_PROBE.to_owned(), mark.to_owned())])),
            ..Default::default()
        }
    }

    #[test]
    fn only_this_processes_own_probes_prove_anything() {
        let p = Probes::new("leasehold", "cp-a");
        let before = Timestamp::now().as_millisecond();
        let mark = p.sending("ns", 7);
        let name = p.name().to_owned();
        let at = p.returned("ns", &meta(&name, &mark)).expect("our probe");
        assert!(at >= before);
        // In another namespace, from an earlier process, another replica's, or not sent.
        assert_eq!(p.returned("other", &meta(&name, &mark)), None);
        assert_eq!(p.returned("ns", &meta(&name, "1/7")), None);
        assert_eq!(p.returned("ns", &meta("leasehold-probe-cp-b", &mark)), None);
        let unsent = format!("{}/8", p.boot);
        assert_eq!(p.returned("ns", &meta(&name, &unsent)), None);
        assert_eq!(p.returned("ns", &meta(&name, "garbage")), None);
    }

    #[test]
    fn old_probes_are_forgotten() {
        let p = Probes::new("leasehold", "cp-a");
        let first = p.sending("ns", 1);
        for seq in 2..=(REMEMBERED as u64 + 1) {
            p.sending("ns", seq);
        }
        assert_eq!(p.returned("ns", &meta(p.name(), &first)), None);
        let last = format!("{}/{}", p.boot, REMEMBERED + 1);
        assert!(p.returned("ns", &meta(p.name(), &last)).is_some());
    }
}
