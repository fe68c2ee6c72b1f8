//! Builds a cluster's model from the index state at a given moment: target states, per-
//! instance load, ghosts, DNS names, counts. O(pods + targets); called on demand, not per event.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use super::{ClusterState, Kind, LeaseEntry, PodInfo};
use crate::config::TargetSpec;
use crate::k8s::model::{
    ClusterModel, Instance, Liveness, MemberLease, Target, TargetCounts, TargetState,
};
use crate::protocol::Protocol;

/// The cluster DNS domain stable names are built in (Kubernetes' default).
pub const CLUSTER_DOMAIN: &str = "cluster.local";

#[derive(Default)]
struct Load {
    owned: usize,
    weight: u64,
    freshest_ms: Option<i64>,
}

impl ClusterState {
    /// The model at `now_ms`; when (ms) the next unexpired hold expires by the clock, or the
    /// model turns stale for want of proof — until then, and while the index revision stays
    /// the same, the model is exact but for its ages; and whether a hold is expired by the
    /// clock but not yet proven so (a watch probe is wanted).
    pub(super) fn model<'s>(&'s self, now_ms: i64) -> (ClusterModel, Option<i64>, bool) {
        let spec = &self.spec;
        // gnmic clusters without a configured list: every target seen on a Lease counts.
        let all_configured = self.configured.is_empty() && spec.protocol == Protocol::Gnmic;
        let mut loads: HashMap<&'s str, Load> = HashMap::new();
        let mut targets = Vec::with_capacity(self.configured.len().max(self.targets.len()));
        let mut counts = TargetCounts::default();
        let mut next_expiry: Option<i64> = None;
        // Expiry is judged only up to the latest proof that the watch feeding it is current.
        let leases_judged = self.judged_at(Kind::Lease, now_ms);
        let members_judged = self.members_judged_at(now_ms);
        let mut awaiting_proof = false;
        let mut expiring = |at: Option<i64>, judged_ms: i64| match at {
            Some(at) if at > now_ms => {
                next_expiry = Some(next_expiry.map_or(at, |n| n.min(at)));
            }
            Some(at) if at > judged_ms => awaiting_proof = true,
            _ => {}
        };
        let unproven_from = self.unproven_from();
        expiring(unproven_from, now_ms);

        // Holders are looked up per target: in a hash set of the pod names, not the sorted map.
        let pods: HashSet<&str> = self.pods.keys().map(String::as_str).collect();
        // Native clusters: a hold is live while its holder's member Lease is (target Leases are
        // never renewed). Each member's state is worked out once. gnmic's holders renew every
        // Lease: a hold is live while its own record changes.
        let native = self.native();
        let mut heartbeats: HashMap<&'s str, bool> = HashMap::new();
        if native {
            for (id, m) in &self.members {
                expiring(m.changes_at_ms(), members_judged);
                let live = matches!(
                    m.state(id, now_ms, members_judged).liveness,
                    Liveness::Live | Liveness::Leaving
                );
                heartbeats.insert(&**id, live);
            }
        }
        // Members whose pod has failed or ended: their containers are gone, whatever their
        // member Lease still says.
        let dead: HashSet<&str> = self
            .pods
            .iter()
            .filter(|(_, p)| matches!(p.phase.as_deref(), Some("Failed" | "Succeeded")))
            .map(|(n, _)| n.as_str())
            .collect();
        // Managed apps' own accounts of their work, per member.
        let app_work: HashMap<&str, &crate::protocol::AppWork> = self
            .members
            .iter()
            .filter_map(|(id, m)| Some((&**id, m.app_work.as_ref()?)))
            .collect();
        let mut add = |key: &Arc<str>, conf: Option<&TargetSpec>, entry: Option<&'s LeaseEntry>| {
            let configured = all_configured || conf.is_some();
            let holder = entry.and_then(|e| e.holder.as_ref());
            let expired = if native {
                holder.is_some_and(|h| !heartbeats.get(&**h).copied().unwrap_or(false))
            } else {
                expiring(entry.and_then(LeaseEntry::expires_at_ms), leases_judged);
                entry.is_some_and(|e| e.is_expired(leases_judged))
            };
            let desired = entry.and_then(|e| e.desired.clone());
            let work = holder.and_then(|h| app_work.get(&**h));
            let app_working = work.and_then(|w| w.works_on(key));
            let state = match holder {
                None if configured => TargetState::Unassigned,
                None => TargetState::Orphaned,
                Some(_) if !configured => TargetState::Orphaned,
                Some(_) if expired => TargetState::Expired,
                Some(h) if !pods.contains(&**h) => TargetState::Orphaned,
                Some(h) if dead.contains(&**h) || app_working == Some(false) => {
                    TargetState::Unworked
                }
                Some(h) if desired.as_ref().is_some_and(|d| d != h) => TargetState::Moving,
                Some(_) => TargetState::Owned,
            };
            let weight = conf.map_or(1, |c| c.weight);
            if let (Some(h), Some(e)) = (holder, entry)
                && !expired
            {
                let l = loads.entry(&**h).or_default();
                l.owned += 1;
                l.weight += u64::from(weight);
                l.freshest_ms = Some(l.freshest_ms.map_or(e.since_ms, |f| f.max(e.since_ms)));
            }
            counts.total += 1;
            match state {
                TargetState::Owned => counts.owned += 1,
                TargetState::Unassigned => counts.unassigned += 1,
                TargetState::Moving => counts.moving += 1,
                TargetState::Expired => counts.expired += 1,
                TargetState::Unworked => counts.unworked += 1,
                TargetState::Orphaned => counts.orphaned += 1,
            }
            targets.push(Target {
                key: key.clone(),
                lease: entry.map(|e| e.name.clone()),
                owner: holder.cloned(),
                desired,
                state,
                weight,
                pin: conf.and_then(|c| c.pin.clone()),
                configured,
                operation: entry.and_then(|e| e.operation.clone()),
                unchanged_ms: entry.map(|e| now_ms - e.since_ms),
                desired_unchanged_ms: entry.map(|e| now_ms - e.desired_since_ms),
                app_working,
                app_problem: work.and_then(|w| w.not_working.get(&**key)).cloned(),
            });
        };
        // The configured list (sorted), then the Leases of keys not in it: none when every
        // Lease was met on the way, which saves a sorted-map lookup per Lease (these are few,
        // except for a gnmic cluster without a list); if there are any, the rows are re-sorted.
        let mut found = 0;
        for (key, conf) in &self.configured {
            let entry = self.targets.get(&**key);
            found += usize::from(entry.is_some());
            add(key, Some(conf), entry);
        }
        if found < self.targets.len() {
            for (key, entry) in &self.targets {
                if !self.configured.contains_key(&**key) {
                    add(key, None, Some(entry));
                }
            }
            targets.sort_unstable_by(|a, b| a.key.cmp(&b.key));
        }

        expiring(
            self.leader.as_ref().and_then(LeaseEntry::expires_at_ms),
            leases_judged,
        );
        let leader = self
            .leader
            .as_ref()
            .filter(|l| !l.is_expired(leases_judged))
            .and_then(|l| l.holder.as_deref().map(str::to_owned));
        let endpoints: BTreeMap<&str, bool> = self
            .slices
            .values()
            .flatten()
            .map(|(pod, ready)| (pod.as_str(), *ready))
            .collect();
        let headless = spec
            .headless_service
            .as_deref()
            .filter(|h| self.services.get(*h).is_none_or(|s| s.headless));

        let mut instances: Vec<Instance> = self
            .pods
            .iter()
            .map(|(name, p)| {
                let load = loads.get(name.as_str());
                self.instance(
                    name,
                    Some(p),
                    load,
                    now_ms,
                    leader.as_deref(),
                    headless,
                    &endpoints,
                )
            })
            .collect();
        // Ghosts: identities holding Leases without a pod; cordoned instances without a pod.
        let podless_holders: BTreeSet<&str> = targets
            .iter()
            .filter_map(|t| t.owner.as_deref())
            .filter(|o| !self.pods.contains_key(*o))
            .collect();
        let mut ghosts: BTreeSet<&str> = loads
            .keys()
            .copied()
            .filter(|h| !self.pods.contains_key(*h))
            .collect();
        ghosts.extend(&podless_holders);
        ghosts.extend(
            self.cordoned
                .iter()
                .map(String::as_str)
                .filter(|c| !self.pods.contains_key(*c)),
        );
        for g in ghosts {
            let departed = self.departed.get(g).map(|(_, p)| p);
            let mut i = self.instance(
                g,
                departed,
                loads.get(g),
                now_ms,
                leader.as_deref(),
                None,
                &endpoints,
            );
            i.ghost = true;
            i.ready = false;
            i.phase = None;
            instances.push(i);
        }
        instances.sort_by(|a, b| a.name.cmp(&b.name));
        // A departed member has no pod: whether it holds anything is `podless_holders`.
        let departed_member_leases = if native {
            let mut gone: Vec<String> = self
                .members
                .keys()
                .filter(|id| !podless_holders.contains(&***id) && self.departed_member(id, now_ms))
                .map(|id| id.to_string())
                .collect();
            gone.sort_unstable();
            gone
        } else {
            Vec::new()
        };

        let model = ClusterModel {
            name: spec.name.clone(),
            namespace: spec.namespace.clone(),
            protocol: spec.protocol,
            synced: self.all_synced(),
            stale: self.is_stale(now_ms),
            leader,
            instances,
            targets,
            services: self.services.values().cloned().collect(),
            counts,
            targets_error: self.targets_error(),
            departed_member_leases,
            plans: self
                .plans
                .values()
                .map(|p| (p.member.clone(), p.clone()))
                .collect(),
        };
        (model, next_expiry, awaiting_proof)
    }

    #[allow(clippy::too_many_arguments)]
    fn instance(
        &self,
        name: &str,
        pod: Option<&PodInfo>,
        load: Option<&Load>,
        now_ms: i64,
        leader: Option<&str>,
        headless: Option<&str>,
        endpoints: &BTreeMap<&str, bool>,
    ) -> Instance {
        let ns = &self.spec.namespace;
        let member_lease = self.native().then(|| {
            self.members.get(name).map_or(
                MemberLease {
                    liveness: Liveness::Absent,
                    unchanged_ms: None,
                    duration_ms: None,
                    revocable: false,
                    term: None,
                    app_work: None,
                },
                |m| m.state(name, now_ms, self.members_judged_at(now_ms)),
            )
        });
        let dns = pod.and_then(|p| {
            let svc = headless?;
            match &p.host {
                Some((host, sub)) if sub == svc => {
                    Some(format!("{host}.{svc}.{ns}.svc.{CLUSTER_DOMAIN}"))
                }
                Some(_) => None,
                None => p
                    .ordinal
                    .map(|_| format!("{name}.{svc}.{ns}.svc.{CLUSTER_DOMAIN}")),
            }
        });
        Instance {
            name: name.to_owned(),
            role: pod.and_then(|p| p.role.clone()),
            phase: pod.and_then(|p| p.phase.clone()),
            ready: pod.is_some_and(|p| p.ready),
            terminating: pod.is_some_and(|p| p.terminating),
            ip: pod.and_then(|p| p.ip.clone()),
            node: pod.and_then(|p| p.node.clone()),
            ordinal: pod.and_then(|p| p.ordinal),
            dns,
            endpoint_ready: endpoints.get(name).copied(),
            restarts: pod.map_or(0, |p| p.restarts),
            created: pod.and_then(|p| p.created).map(|t| t.to_string()),
            lease_renew_age_ms: match &member_lease {
                Some(m) if matches!(m.liveness, Liveness::Live | Liveness::Leaving) => {
                    m.unchanged_ms
                }
                Some(_) => None,
                None => load.and_then(|l| l.freshest_ms).map(|s| now_ms - s),
            },
            capacity: pod.map_or(1, |p| p.capacity),
            owned: load.map_or(0, |l| l.owned),
            owned_weight: load.map_or(0, |l| l.weight),
            cordoned: self.cordoned.contains(name),
            ghost: false,
            leader: leader == Some(name),
            member_lease,
        }
    }

    /// Whether `member`'s member Lease is garbage but for the targets it may hold:
    /// its pod is gone and the Lease says the member stopped (released) or was fenced. Only
    /// then may it be deleted — a member that comes back registers anew.
    pub(super) fn departed_member(&self, member: &str, now_ms: i64) -> bool {
        !self.pods.contains_key(member)
            && self.members.get(member).is_some_and(|m| {
                matches!(
                    m.state(member, now_ms, self.members_judged_at(now_ms))
                        .liveness,
                    Liveness::Released | Liveness::Fenced
                )
            })
    }

    /// Whether the cluster speaks Leasehold's protocol (member Leases, target Leases never
    /// renewed), not gnmic's (observed: every Lease renewed by its holder).
    pub(super) fn native(&self) -> bool {
        self.spec.protocol == Protocol::Native
    }
}
