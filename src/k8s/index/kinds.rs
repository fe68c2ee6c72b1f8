//! How each kind of object updates a cluster's index state: reading the few fields the model
//! needs out of the Kubernetes object and reporting lifecycle, ownership and target list
//! changes (EndpointSlices feed both the members' readiness in the headless Service and the
//! targets of `endpoints` entries).

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Resource;

use super::entry::{MemberEntry, Observed, PreviousHold};
use super::{ClusterState, Emit, Kind, LeaseEntry, PodInfo};
use crate::config::parse_target_list;
use crate::k8s::model::ServiceInfo;
use crate::model::{Cause, InstanceEventKind};
use crate::protocol::{self, LeaseRole, LeaseView};
use crate::targets::endpoints;

/// A kind of object the index understands.
pub trait Indexed: Resource + Clone + std::fmt::Debug + Send + Sync + 'static {
    /// Which kind.
    const KIND: Kind;
    #[doc(hidden)]
    fn apply(state: &mut ClusterState, obj: &Self, emit: &mut Emit<'_>);
    #[doc(hidden)]
    fn delete(state: &mut ClusterState, name: &str, emit: &mut Emit<'_>);
    #[doc(hidden)]
    fn names(state: &ClusterState) -> Vec<String>;
}

fn matches(selector: &BTreeMap<String, String>, labels: Option<&BTreeMap<String, String>>) -> bool {
    let Some(labels) = labels else {
        return selector.is_empty();
    };
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

fn pod_info(state: &ClusterState, pod: &Pod) -> PodInfo {
    let meta = &pod.metadata;
    let labels = meta.labels.as_ref();
    let status = pod.status.as_ref();
    let spec = pod.spec.as_ref();
    let ready_condition = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True");
    let phase = status.and_then(|s| s.phase.clone());
    let terminating = meta.deletion_timestamp.is_some();
    let ordinal = labels
        .and_then(|l| l.get("apps.kubernetes.io/pod-index"))
        .and_then(|v| v.parse().ok())
        .or_else(|| {
            let owner = meta
                .owner_references
                .as_ref()?
                .iter()
                .find(|o| o.kind == "StatefulSet")?;
            meta.name
                .as_deref()?
                .strip_prefix(&owner.name)?
                .strip_prefix('-')?
                .parse()
                .ok()
        });
    PodInfo {
        role: state
            .spec
            .roles
            .iter()
            .find(|r| matches(&r.selector, labels))
            .map(|r| r.name.clone()),
        ready: ready_condition && phase.as_deref() == Some("Running") && !terminating,
        phase,
        terminating,
        ip: status.and_then(|s| s.pod_ip.clone()),
        node: spec.and_then(|s| s.node_name.clone()),
        ordinal,
        host: spec.and_then(|s| Some((s.hostname.clone()?, s.subdomain.clone()?))),
        restarts: status
            .and_then(|s| s.container_statuses.as_ref())
            .map(|cs| cs.iter().map(|c| c.restart_count).sum())
            .unwrap_or(0),
        created: meta.creation_timestamp.as_ref().map(|t| t.0),
        capacity: meta
            .annotations
            .as_ref()
            .and_then(|a| a.get(protocol::POD_CAPACITY))
            .and_then(|v| v.parse().ok())
            .filter(|c| *c > 0)
            .unwrap_or(1),
    }
}

impl Indexed for Pod {
    const KIND: Kind = Kind::Pod;

    fn apply(state: &mut ClusterState, pod: &Pod, emit: &mut Emit<'_>) {
        let Some(name) = pod.metadata.name.clone() else {
            return;
        };
        if !matches(&state.spec.selector, pod.metadata.labels.as_ref()) {
            // Relabelled out of the cluster: it left.
            Self::delete(state, &name, emit);
            return;
        }
        let info = pod_info(state, pod);
        match state.pods.get(&name) {
            None => {
                emit.instance(&name, InstanceEventKind::Joined);
                if info.ready {
                    emit.instance(&name, InstanceEventKind::Ready);
                }
                state.departed.remove(&name);
            }
            Some(old) if old.ready != info.ready => emit.instance(
                &name,
                if info.ready {
                    InstanceEventKind::Ready
                } else {
                    InstanceEventKind::NotReady
                },
            ),
            Some(_) => {}
        }
        state.pods.insert(name, info);
    }

    fn delete(state: &mut ClusterState, name: &str, emit: &mut Emit<'_>) {
        if let Some(info) = state.pods.remove(name) {
            emit.instance(name, InstanceEventKind::Left);
            state.remember_departed(name.to_owned(), info, emit.now_ms);
        }
    }

    fn names(state: &ClusterState) -> Vec<String> {
        state.pods.keys().cloned().collect()
    }
}

impl Indexed for Service {
    const KIND: Kind = Kind::Service;

    fn apply(state: &mut ClusterState, svc: &Service, _: &mut Emit<'_>) {
        let Some(name) = svc.metadata.name.clone() else {
            return;
        };
        let wanted = [
            &state.spec.headless_service,
            &state.spec.load_balancer_service,
        ];
        if !wanted.iter().any(|w| w.as_deref() == Some(name.as_str())) {
            return;
        }
        let spec = svc.spec.as_ref();
        let cluster_ip = spec.and_then(|s| s.cluster_ip.clone());
        let info = ServiceInfo {
            name: name.clone(),
            type_: spec
                .and_then(|s| s.type_.clone())
                .unwrap_or_else(|| "ClusterIP".into()),
            headless: cluster_ip.as_deref() == Some("None"),
            cluster_ip: cluster_ip.filter(|ip| ip != "None"),
            ingress: svc
                .status
                .as_ref()
                .and_then(|s| s.load_balancer.as_ref())
                .and_then(|lb| lb.ingress.as_ref())
                .map(|is| {
                    is.iter()
                        .filter_map(|i| i.ip.clone().or_else(|| i.hostname.clone()))
                        .collect()
                })
                .unwrap_or_default(),
            ports: spec
                .and_then(|s| s.ports.as_ref())
                .map(|ps| {
                    ps.iter()
                        .map(|p| {
                            format!(
                                "{}/{}/{}",
                                p.name.as_deref().unwrap_or(""),
                                p.port,
                                p.protocol.as_deref().unwrap_or("TCP")
                            )
                        })
                        .collect()
                })
                .unwrap_or_default(),
        };
        state.services.insert(name, info);
    }

    fn delete(state: &mut ClusterState, name: &str, _: &mut Emit<'_>) {
        state.services.remove(name);
    }

    fn names(state: &ClusterState) -> Vec<String> {
        state.services.keys().cloned().collect()
    }
}

impl Indexed for EndpointSlice {
    const KIND: Kind = Kind::EndpointSlice;

    fn apply(state: &mut ClusterState, slice: &EndpointSlice, emit: &mut Emit<'_>) {
        let Some(name) = slice.metadata.name.clone() else {
            return;
        };
        let service = slice
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(SERVICE_NAME_LABEL));
        if service.is_some() && service == state.spec.headless_service.as_ref() {
            let endpoints = slice
                .endpoints
                .iter()
                .filter_map(|e| {
                    let pod = e.target_ref.as_ref()?.name.clone()?;
                    let ready = e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true);
                    Some((pod, ready))
                })
                .collect();
            state.slices.insert(name.clone(), endpoints);
        } else {
            state.slices.remove(&name);
        }
        if !state.wants_endpoints() {
            return;
        }
        let Some(new) = endpoint_slice(slice) else {
            forget_endpoint_slice(state, &name, emit);
            return;
        };
        let feeds = state.endpoint_services.contains(&new.service);
        let old = state.endpoint_slices.insert(name, new.clone());
        let fed = old
            .as_ref()
            .is_some_and(|o| state.endpoint_services.contains(&o.service));
        if (feeds || fed) && old.as_ref() != Some(&new) {
            targets_changed(state, emit);
        }
    }

    fn delete(state: &mut ClusterState, name: &str, emit: &mut Emit<'_>) {
        state.slices.remove(name);
        forget_endpoint_slice(state, name, emit);
    }

    fn names(state: &ClusterState) -> Vec<String> {
        let names: std::collections::BTreeSet<&String> = state
            .slices
            .keys()
            .chain(state.endpoint_slices.keys())
            .collect();
        names.into_iter().cloned().collect()
    }
}

/// The label naming an EndpointSlice's Service.
const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// What expansion needs of a Service's EndpointSlice ([`endpoints::Slice`]); `None` for a slice
/// of no Service. Only TCP ports: scrapers speak HTTP.
fn endpoint_slice(slice: &EndpointSlice) -> Option<endpoints::Slice> {
    let service = slice
        .metadata
        .labels
        .as_ref()?
        .get(SERVICE_NAME_LABEL)?
        .clone();
    let ports = slice
        .ports
        .iter()
        .flatten()
        .filter(|p| p.protocol.as_deref().is_none_or(|p| p == "TCP"))
        .map(|p| (p.name.clone(), p.port.and_then(|n| u16::try_from(n).ok())))
        .collect();
    let endpoints = slice
        .endpoints
        .iter()
        .filter_map(|e| {
            Some(endpoints::Endpoint {
                address: e.addresses.first()?.clone(),
                ready: e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true),
                pod: e
                    .target_ref
                    .as_ref()
                    .filter(|r| r.kind.as_deref().is_none_or(|k| k == "Pod"))
                    .and_then(|r| r.name.clone()),
            })
        })
        .collect();
    Some(endpoints::Slice {
        service,
        ports,
        endpoints,
    })
}

/// Forgets the EndpointSlice `name` as a source of targets.
fn forget_endpoint_slice(state: &mut ClusterState, name: &str, emit: &mut Emit<'_>) {
    if let Some(old) = state.endpoint_slices.remove(name)
        && state.endpoint_services.contains(&old.service)
    {
        targets_changed(state, emit);
    }
}

/// Expands the target list again; a [`Change::Targets`](super::Change::Targets) if it changed.
fn targets_changed(state: &mut ClusterState, emit: &mut Emit<'_>) {
    if state.rebuild_configured() {
        emit.push(super::Change::Targets {
            cluster: emit.cluster.to_owned(),
        });
    }
}

impl Indexed for ConfigMap {
    const KIND: Kind = Kind::ConfigMap;

    fn apply(state: &mut ClusterState, cm: &ConfigMap, emit: &mut Emit<'_>) {
        let Some(r) = state.spec.targets.config_map.clone() else {
            return;
        };
        if cm.metadata.name.as_deref() != Some(r.name.as_str()) {
            return;
        }
        let parsed = match cm.data.as_ref().and_then(|d| d.get(&r.key)) {
            None => Err(format!("ConfigMap {} has no key {:?}", r.name, r.key)),
            Some(text) => parse_target_list(text)
                .map_err(|e| format!("ConfigMap {} key {:?}: {e}", r.name, r.key)),
        };
        match parsed {
            Ok(list) => {
                state.targets_error = None;
                if list != state.config_map_targets {
                    state.config_map_targets = list;
                    state.rebuild_configured();
                    emit.push(super::Change::Targets {
                        cluster: emit.cluster.to_owned(),
                    });
                }
            }
            // Keep the last good list: a typo in the ConfigMap must not unassign everything.
            Err(e) => state.targets_error = Some(e),
        }
    }

    fn delete(state: &mut ClusterState, name: &str, _: &mut Emit<'_>) {
        if state
            .spec
            .targets
            .config_map
            .as_ref()
            .map(|r| r.name.as_str())
            == Some(name)
        {
            state.targets_error = Some(format!(
                "ConfigMap {name} was deleted; keeping the last known target list"
            ));
        }
    }

    fn names(state: &ClusterState) -> Vec<String> {
        state
            .spec
            .targets
            .config_map
            .iter()
            .map(|r| r.name.clone())
            .collect()
    }
}

/// How long a target Lease gnmic deleted waits for its next holder's Lease before the release
/// is recorded on its own ([`ClusterState::gnmic_released`]).
pub(super) const GNMIC_MOVE_WINDOW_MS: i64 = 60_000;

/// A target Lease gnmic deleted: who held it, and how its hold ended.
#[derive(Debug, Clone)]
pub(super) struct Released {
    holder: String,
    /// When the deletion was seen.
    at_ms: i64,
    /// The hold had expired by our clock before (its holder went silent: a failover).
    expired: bool,
    /// When its holder last renewed it, as seen.
    renewed_ms: i64,
}

impl Released {
    /// The cause and gap of the next holder's taking it at `now_ms`: a failover counts from the
    /// silent holder's last renewal, gnmic's own move from the release.
    fn taken(&self, now_ms: i64) -> (Cause, i64) {
        if self.expired {
            (Cause::Failover, now_ms - self.renewed_ms)
        } else {
            (Cause::External, now_ms - self.at_ms)
        }
    }
}

/// Records, as releases alone, the deletions of gnmic's target Leases that no other holder
/// followed within [`GNMIC_MOVE_WINDOW_MS`].
fn flush_gnmic_releases(state: &mut ClusterState, emit: &mut Emit<'_>) {
    let now = emit.now_ms;
    let stale: Vec<Arc<str>> = state
        .gnmic_released
        .iter()
        .filter(|(_, r)| now - r.at_ms > GNMIC_MOVE_WINDOW_MS)
        .map(|(k, _)| k.clone())
        .collect();
    for key in stale {
        let Some(r) = state.gnmic_released.remove(&key) else {
            continue;
        };
        emit.push(super::Change::Ownership {
            cluster: emit.cluster.to_owned(),
            target: key.to_string(),
            from: Some(r.holder.clone()),
            to: None,
            cause: if r.expired {
                Cause::Failover
            } else {
                Cause::External
            },
            operation: None,
            at_ms: r.at_ms,
            acquired_at_ms: None,
            gap_ms: None,
            overlap: None,
            replayed: false,
        });
    }
}

/// Whether gnmic gave its target Lease to another holder because the old hold had expired by
/// gnmic's own rule, read from the Lease itself: gnmic's locker (v0.47.0, `Lock`) updates a
/// Lease held by another only once `renewTime + leaseDurationSeconds` has passed by the
/// taker's clock, and writes that clock's time as `acquireTime`. Our clock alone may not say
/// so: it saw the last renewal a watch delivery late, so a take-over made moments after the
/// expiry can be seen before the expiry by our clock.
fn gnmic_taken_after_expiry(old: &LeaseEntry, view: &LeaseView) -> bool {
    let held = old.record();
    let new = &view.holding;
    match (held.holder.as_deref(), held.renew, new.acquire) {
        (Some(from), Some(renew), Some(acquire)) if new.holder.as_deref() != Some(from) => {
            acquire.as_millisecond()
                > renew.as_millisecond() + i64::from(held.duration_s.max(0)) * 1000
        }
        _ => false,
    }
}

/// Why the holder of a target changed, from the Lease's annotations.
fn cause_of(view: &LeaseView, from: Option<&str>) -> Cause {
    let to = view.holding.holder.as_deref();
    match (&view.desired, from) {
        (Some(d), _) if Some(d.as_str()) == to => view.cause.unwrap_or(if from.is_none() {
            Cause::Initial
        } else {
            Cause::External
        }),
        (_, None) => Cause::Initial,
        _ => Cause::External,
    }
}

impl Indexed for Lease {
    const KIND: Kind = Kind::Lease;

    fn apply(state: &mut ClusterState, lease: &Lease, emit: &mut Emit<'_>) {
        if !state.gnmic_released.is_empty() {
            flush_gnmic_releases(state, emit);
        }
        let apart = state.spec.separate_member_namespace();
        let view = protocol::parse(state.spec.protocol, lease, &state.spec.name)
            // Member Leases kept apart count only from their own namespace.
            .filter(|v| !(apart && matches!(v.role, LeaseRole::Member(_))));
        let Some(view) = view else {
            // Not (or no longer) one of ours: a change only if it was.
            let name = lease.metadata.name.as_deref().unwrap_or_default();
            emit.changed = state.leader.as_ref().is_some_and(|l| *l.name == *name)
                || state.lease_keys.contains_key(name)
                || state.plans.contains_key(name)
                || (!apart && state.member_leases.contains_key(name));
            Self::delete(state, name, emit);
            return;
        };
        let now = emit.now_ms;
        let native = state.native();
        let ix = &mut state.interner;
        let key = match &view.role {
            LeaseRole::Leader => {
                let old_holder = state.leader.as_ref().and_then(|e| e.holder.clone());
                match &mut state.leader {
                    Some(e) => {
                        let renamed = *e.name != *view.name;
                        if renamed {
                            e.name = view.name.as_str().into();
                        }
                        emit.changed = renamed || e.observe(&view, now, ix) == Observed::Changed;
                    }
                    leader => {
                        *leader = Some(LeaseEntry::new(view.name.as_str().into(), &view, now, ix))
                    }
                }
                let new_holder = state.leader.as_ref().and_then(|e| e.holder.clone());
                if old_holder != new_holder {
                    if let Some(o) = &old_holder {
                        emit.instance(o, InstanceEventKind::LeaderLost);
                    }
                    if let Some(n) = &new_holder {
                        emit.instance(n, InstanceEventKind::LeaderGained);
                    }
                }
                return;
            }
            LeaseRole::Target(key) => key.as_str(),
            LeaseRole::Member(identity) => {
                apply_member(state, identity, &view, emit);
                return;
            }
            LeaseRole::Plan(member) => {
                let seen = crate::k8s::model::PlanSeen {
                    member: member.clone(),
                    name: view.name.clone(),
                    resource_version: view.resource_version.clone(),
                    plan: view.plan.clone(),
                };
                let name: Arc<str> = view.name.as_str().into();
                emit.changed = state.plans.insert(name, seen.clone()).as_ref() != Some(&seen);
                return;
            }
        };
        // Whether the Lease now maps to another key or the key to another Lease.
        let mut remapped = false;
        if let Some(old_key) = state.lease_keys.get(view.name.as_str())
            && **old_key != *key
        {
            remapped = true;
            let old_key = old_key.clone();
            state.targets.remove(&old_key);
            state.lease_keys.remove(view.name.as_str());
        }
        // Another Lease now carries a known key: follow it (its name maps to the key too).
        if let Some((k, e)) = state.targets.get_key_value(key)
            && *e.name != *view.name
        {
            remapped = true;
            let k = k.clone();
            let name: Arc<str> = view.name.as_str().into();
            state.lease_keys.insert(name.clone(), k.clone());
            if let Some(e) = state.targets.get_mut(&k) {
                e.name = name;
            }
        }
        let new_holder = view.holding.holder.as_deref();
        let ownership =
            |from: Option<&str>, gap_ms: Option<i64>, cause: Cause| super::Change::Ownership {
                cluster: emit.cluster.to_owned(),
                target: key.to_owned(),
                cause,
                from: from.map(str::to_owned),
                to: new_holder.map(str::to_owned),
                operation: view.operation.clone(),
                at_ms: now,
                acquired_at_ms: view.holding.acquire.map(|t| t.as_millisecond()),
                gap_ms,
                overlap: if native {
                    crate::protocol::overlap_of(&view)
                } else {
                    None
                },
                replayed: false,
            };
        let previous = if native {
            // A failover's gap counts from the old holder's last renewal of its member Lease
            // (also when the control plane granted the target to the next owner in the revoke).
            let last_alive_ms = state
                .targets
                .get(key)
                .and_then(|e| e.last_holder.as_deref())
                .filter(|from| cause_of(&view, Some(from)) == Cause::Failover)
                .and_then(|from| state.members.get(from))
                .map(|m| m.alive_ms);
            match (last_alive_ms, view.handed_term.is_some()) {
                // Handed straight over by its holder: from that write (the holder's clock;
                // its work had stopped) to our seeing it, about when the new holder did.
                (None, true) => PreviousHold::Handed {
                    at_ms: view.holding.acquire.map(|t| t.as_millisecond()),
                },
                (last_alive_ms, _) => PreviousHold::Member { last_alive_ms },
            }
        } else {
            PreviousHold::Renewed
        };
        match state.targets.get_mut(key) {
            Some(entry) => {
                let before = entry.holder.clone();
                let from = entry.last_holder.clone();
                let mut gap_ms = entry.handoff_gap_ms(new_holder, now, previous);
                // gnmic's layout says nothing of why: a hold taken over after it expired (by
                // our clock, or by gnmic's own as the Lease tells it) is a failover, its gap
                // from the last renewal seen; any other change gnmic's own.
                let cause = match from.as_deref() {
                    _ if native => cause_of(&view, from.as_deref()),
                    None => Cause::Initial,
                    Some(_) if entry.is_expired(now) => Cause::Failover,
                    Some(_) if gnmic_taken_after_expiry(entry, &view) => {
                        gap_ms = Some((now - entry.since_ms).max(0));
                        Cause::Failover
                    }
                    Some(_) => Cause::External,
                };
                emit.changed = remapped || entry.observe(&view, now, ix) == Observed::Changed;
                if new_holder != before.as_deref() {
                    // A hand-over that says when the old holder's app last worked on it: kept
                    // until the new holder says when its app began (`apply_member`).
                    match (new_holder, view.stopped_at_ms) {
                        (Some(to), Some(at)) if native => {
                            let to = state.interner.get(to);
                            state.handed_work.insert(key.into(), (to, at));
                        }
                        _ => {
                            state.handed_work.remove(key);
                        }
                    }
                }
                if new_holder.is_some() && new_holder != before.as_deref() {
                    let change = ownership(from.as_deref(), gap_ms, cause);
                    emit.ownership(change);
                }
            }
            None => {
                // gnmic deleted the Lease (its release) and one holder's Lease follows: one move.
                let released = (!native)
                    .then(|| state.gnmic_released.remove(key))
                    .flatten()
                    .filter(|r| Some(r.holder.as_str()) != new_holder);
                if new_holder.is_some() {
                    let change = match &released {
                        Some(r) => {
                            let (cause, gap) = r.taken(now);
                            ownership(Some(&r.holder), Some(gap.max(0)), cause)
                        }
                        None => ownership(None, None, cause_of(&view, None)),
                    };
                    emit.ownership(change);
                }
                let name: Arc<str> = view.name.as_str().into();
                let key: Arc<str> = key.into();
                state.lease_keys.insert(name.clone(), key.clone());
                state
                    .targets
                    .insert(key, LeaseEntry::new(name, &view, now, ix));
            }
        }
    }

    fn delete(state: &mut ClusterState, name: &str, emit: &mut Emit<'_>) {
        if state.plans.remove(name).is_some() {
            emit.changed = true;
            return;
        }
        if !state.spec.separate_member_namespace() && delete_member(state, name) {
            emit.changed = true;
            emit.members();
            return;
        }
        if state.leader.as_ref().is_some_and(|l| *l.name == *name) {
            if let Some(h) = state.leader.take().and_then(|l| l.holder) {
                emit.instance(&h, InstanceEventKind::LeaderLost);
            }
            return;
        }
        let Some(key) = state.lease_keys.remove(name) else {
            return;
        };
        if !state.native() {
            flush_gnmic_releases(state, emit);
            if let Some(entry) = state.targets.remove(&key)
                && let Some(holder) = entry.holder.as_deref().or(entry.last_holder.as_deref())
            {
                let released = Released {
                    holder: holder.to_owned(),
                    at_ms: emit.now_ms,
                    expired: entry.is_expired(emit.now_ms),
                    renewed_ms: entry.since_ms,
                };
                state.gnmic_released.insert(key, released);
                emit.changed = true;
            }
            return;
        }
        if let Some(entry) = state.targets.remove(&key)
            && let Some(holder) = &entry.holder
            && !entry.is_expired(emit.now_ms)
        {
            emit.push(super::Change::Ownership {
                cluster: emit.cluster.to_owned(),
                target: key.to_string(),
                from: Some(holder.to_string()),
                to: None,
                cause: Cause::External,
                operation: None,
                at_ms: emit.now_ms,
                acquired_at_ms: None,
                gap_ms: None,
                overlap: None,
                replayed: false,
            });
        }
    }

    fn names(state: &ClusterState) -> Vec<String> {
        let names = state
            .lease_keys
            .keys()
            .map(|n| n.to_string())
            .chain(state.plans.keys().map(|n| n.to_string()))
            .chain(state.leader.iter().map(|l| l.name.to_string()));
        if state.spec.separate_member_namespace() {
            names.collect()
        } else {
            names.chain(member_names(state)).collect()
        }
    }
}

/// A member Lease's record (from either kind of watch).
fn apply_member(state: &mut ClusterState, identity: &str, view: &LeaseView, emit: &mut Emit<'_>) {
    let now = emit.now_ms;
    let ix = &mut state.interner;
    let id: Arc<str> = ix.get(identity);
    let name: Arc<str> = view.name.as_str().into();
    if let Some(old) = state.member_leases.insert(name.clone(), id.clone())
        && old != id
    {
        state.members.remove(&old);
    }
    match state.members.get_mut(&id) {
        Some(m) => {
            m.entry.name = name;
            emit.changed = m.observe(view, now, ix);
        }
        None => {
            state
                .members
                .insert(id, MemberEntry::new(name, view, now, ix));
            emit.changed = true;
        }
    }
    if emit.changed {
        emit.members();
    }
    // Targets handed to it whose first work its app now reports: the hand-offs' work gaps.
    if let Some(work) = &view.app_work {
        for (target, began) in &work.started {
            if let Some((to, stopped)) = state.handed_work.get(target.as_str())
                && **to == *identity
            {
                let gap_ms = began - stopped;
                state.handed_work.remove(target.as_str());
                emit.work_gap(target, identity, gap_ms);
            }
        }
    }
    if let Some(o) = view.overrun
        && state.overruns.get(identity) != Some(&o.at_ms)
    {
        state.overruns.insert(ix.get(identity), o.at_ms);
        emit.overrun(identity, o);
    }
}

/// Forgets the member Lease `name`; whether it was one.
fn delete_member(state: &mut ClusterState, name: &str) -> bool {
    let Some(id) = state.member_leases.remove(name) else {
        return false;
    };
    state.members.remove(&id);
    true
}

fn member_names(state: &ClusterState) -> Vec<String> {
    state.member_leases.keys().map(|n| n.to_string()).collect()
}

/// A Lease from the namespace a cluster keeps its member Leases in, apart from its own
/// ([`Kind::MemberLease`]): only member Leases of the cluster are taken from it. The same
/// object as [`Lease`] on the wire; a type of its own so that its watch is a kind of its own.
#[derive(Clone, Debug, serde::Deserialize)]
#[serde(transparent)]
pub struct MemberNamespaceLease(pub Lease);

impl k8s_openapi::Resource for MemberNamespaceLease {
    const API_VERSION: &'static str = <Lease as k8s_openapi::Resource>::API_VERSION;
    const GROUP: &'static str = <Lease as k8s_openapi::Resource>::GROUP;
    const KIND: &'static str = <Lease as k8s_openapi::Resource>::KIND;
    const VERSION: &'static str = <Lease as k8s_openapi::Resource>::VERSION;
    const URL_PATH_SEGMENT: &'static str = <Lease as k8s_openapi::Resource>::URL_PATH_SEGMENT;
    type Scope = k8s_openapi::NamespaceResourceScope;
}

impl k8s_openapi::Metadata for MemberNamespaceLease {
    type Ty = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn metadata(&self) -> &Self::Ty {
        &self.0.metadata
    }

    fn metadata_mut(&mut self) -> &mut Self::Ty {
        &mut self.0.metadata
    }
}

impl Indexed for MemberNamespaceLease {
    const KIND: Kind = Kind::MemberLease;

    fn apply(state: &mut ClusterState, lease: &Self, emit: &mut Emit<'_>) {
        let name = lease.0.metadata.name.as_deref().unwrap_or_default();
        match protocol::parse(state.spec.protocol, &lease.0, &state.spec.name) {
            Some(view) => match &view.role {
                LeaseRole::Member(identity) => apply_member(state, identity, &view, emit),
                _ => emit.changed = false,
            },
            None => {
                emit.changed = delete_member(state, name);
                if emit.changed {
                    emit.members();
                }
            }
        }
    }

    fn delete(state: &mut ClusterState, name: &str, emit: &mut Emit<'_>) {
        emit.changed = delete_member(state, name);
        if emit.changed {
            emit.members();
        }
    }

    fn names(state: &ClusterState) -> Vec<String> {
        member_names(state)
    }
}
