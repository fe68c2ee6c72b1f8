//! The acting replica's control loop: on every index change (at most every
//! [`MIN_INTERVAL`]) and at least every [`MAX_INTERVAL`], each synced, fresh native cluster
//! gets its placement actions carried out (compare-and-swap writes, re-decided on conflict),
//! and its join policy applied: when new members have joined and membership has been still for
//! `join_settle`, a rebalance is proposed (superseding the cluster's older proposals) or
//! started. Each pass's duration and every Lease write's outcome go to the engine's metrics.
//! A mass lapse ([`placement::MassLapse`]) is lived through here: at most one lapsed member
//! failed over per lease duration (the first a lease duration after it began; none once a pass
//! showed the server slow, [`placement::Decision::server_slow`]), its start and
//! end logged and published as Kubernetes Events about the control-plane Lease (`MassLapse`,
//! `MassLapseOver`), and the members it still held back when it ended given a lease duration's
//! grace. A model that turns stale holds every decision; that too is logged and published
//! (`WatchStale`, with the mass lapse the model shows if any, and `WatchCurrent` when it is
//! proven current again).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::runtime::events::{Event, EventType};
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::placement::{self, Action};
use super::{Engine, EngineError, Inner, PlanRequest, View, views};
use crate::config::{Cluster, OnJoin};
use crate::k8s::leases;
use crate::k8s::model::ClusterModel;
use crate::k8s::pacing::Sample;
use crate::model::OperationState;
use crate::protocol::{self, Protocol};
use crate::store::now_ms;

/// Reconciles are at least this far apart, so a burst of watch events costs one pass.
const MIN_INTERVAL: Duration = Duration::from_millis(100);
/// A pass is followed by at least this many times the time it spent building models and
/// deciding on them (so that takes ≤ 20% of a core).
const BUSY_FACTOR: u32 = 4;
/// Reconciles happen at least this often, so expiries (which no event announces) are seen.
const MAX_INTERVAL: Duration = Duration::from_millis(500);
/// How often the acting replica re-reads cordons from the store.
const CORDON_RELOAD: Duration = Duration::from_secs(1);

/// A full pass over each cluster happens at least this often, even when nothing can have
/// changed its outcome (see [`Settled`]).
const FULL_PASS_EVERY: Duration = Duration::from_secs(10);

/// A cluster whose last pass decided nothing, and until when deciding again would decide
/// nothing too, unless the index changes or operations start or end: no hold it shows as live
/// expires and no free target becomes neglected ([`placement::quiet_for`]) before then. Its
/// model is not rebuilt meanwhile (at 50,000 targets a build is ~30 ms of CPU, and members
/// renew all the time without changing it).
struct Settled {
    /// Of the model it decided on (not the model itself: holding it would keep a second
    /// 50,000-row model alive once readers rebuild theirs).
    exactness: views::Exactness,
    busy: HashSet<String>,
    until: std::time::Instant,
    since: Instant,
}

impl Settled {
    fn holds(&self, inner: &Inner, busy: &HashSet<String>) -> bool {
        *busy == self.busy
            && self.exactness.holds(inner.shared.version())
            && std::time::Instant::now() < self.until
            && self.since.elapsed() < FULL_PASS_EVERY
    }
}

/// How long an Event may take to publish (it happens when the API server may be slow).
const EVENT_TIMEOUT: Duration = Duration::from_secs(2);

/// Membership as last acted on, and a join waiting for membership to settle.
#[derive(Default)]
struct JoinWatch {
    known: Option<BTreeSet<String>>,
    pending: Option<(Instant, BTreeSet<String>)>,
}

pub(super) async fn run(inner: Arc<Inner>) -> anyhow::Result<()> {
    let mut versions = inner.shared.versions();
    let mut joins: HashMap<String, JoinWatch> = HashMap::new();
    let mut settled: HashMap<String, Settled> = HashMap::new();
    let mut lapses: HashMap<String, placement::LapseWatch> = HashMap::new();
    // The lapse watches' monotonic clock.
    let epoch = Instant::now();
    let mut cordons_read = Instant::now();
    loop {
        let started = Instant::now();
        // Cordons set through another replica (a removal, an uncordon) live in the store.
        if cordons_read.elapsed() >= CORDON_RELOAD {
            cordons_read = started;
            if let Err(e) = inner.load_cordons().await {
                warn!(error = %e, "could not reload cordons from the store");
            }
        }
        let mut thinking = Duration::ZERO;
        for spec in inner
            .config
            .clusters
            .iter()
            .filter(|c| c.protocol == Protocol::Native)
        {
            let busy = inner.busy(&spec.name);
            if let Some(s) = settled.get(&spec.name)
                && s.holds(&inner, &busy)
            {
                // Membership is as the settled model (or any later one) shows it.
                if let Some(latest) = inner.views.latest(&spec.name) {
                    let joins = joins.entry(spec.name.clone()).or_default();
                    join_policy(&inner, spec, &latest.model, joins).await;
                }
                continue;
            }
            let built = Instant::now();
            // On the model thread (~30 ms of CPU at 50,000 targets), so the async workers keep
            // answering HTTP requests meanwhile.
            let Some(view) = inner.build_view(&spec.name, false).await else {
                continue;
            };
            thinking += built.elapsed();
            let model = &view.model;
            if view.awaiting_proof {
                // A hold looks expired by the clock; only a probe can show it really is (its
                // return changes the index, which wakes this loop).
                inner.probes.hurry();
            }
            let lapse = lapses.entry(spec.name.clone()).or_default();
            let now_ms = i64::try_from(epoch.elapsed().as_millis()).unwrap_or(i64::MAX);
            if reconcile(
                &inner,
                spec,
                &view,
                busy.clone(),
                lapse,
                now_ms,
                &mut thinking,
            )
            .await
                || view.awaiting_proof
            {
                settled.remove(&spec.name);
            } else {
                let duration_ms = inner.duration_ms(&spec.name).unwrap_or(i64::MAX);
                let quiet = placement::quiet_for(model, duration_ms).unwrap_or(FULL_PASS_EVERY);
                settled.insert(
                    spec.name.clone(),
                    Settled {
                        exactness: view.exactness(),
                        busy,
                        until: view.built() + quiet,
                        since: built,
                    },
                );
            }
            join_policy(
                &inner,
                spec,
                model,
                joins.entry(spec.name.clone()).or_default(),
            )
            .await;
            inner.metrics.reconciled(&spec.name, built.elapsed());
        }
        // Models replaced while readers held them: freed where they were built.
        let unheld = inner.views.take_unheld();
        if !unheld.is_empty() {
            inner.models.free(unheld);
        }
        // Large clusters make a pass expensive (the model of 50,000 targets takes ~30 ms to
        // build): keep the loop's share of a core bounded. Only building and deciding count,
        // not the Lease writes (waiting on the API server), so a big placement is not followed
        // by a long pause.
        let pause = MIN_INTERVAL.max(thinking * BUSY_FACTOR);
        tokio::time::sleep_until(started + pause).await;
        let _ = tokio::time::timeout(MAX_INTERVAL, versions.changed()).await;
    }
}

/// Decides and makes the cluster's Lease writes; whether there were any to make (or a mass
/// lapse holds some back: the next pass may fail one more over).
async fn reconcile(
    inner: &Inner,
    spec: &Cluster,
    view: &Arc<View>,
    busy: HashSet<String>,
    lapse: &mut placement::LapseWatch,
    now_ms: i64,
    thinking: &mut Duration,
) -> bool {
    let duration_s = i32::try_from(spec.policy.lease_duration.as_secs()).unwrap_or(i32::MAX);
    let duration_ms = i64::try_from(spec.policy.lease_duration.as_millis()).unwrap_or(i64::MAX);
    let guard = lapse.guard(spec.policy.mass_lapse_share, now_ms, duration_ms);
    let v = view.clone();
    // Deciding walks every target: off the async workers, where the model was built.
    let deciding = Instant::now();
    // A panic in deciding costs this pass, not the loop (the next pass decides again).
    let decided = inner
        .models
        .run(move || {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                placement::decide_guarded(&v.model, duration_s, &busy, &guard)
            }))
        })
        .await;
    *thinking += deciding.elapsed();
    let Ok(decision) = decided else {
        warn!(cluster = %spec.name, "placement decision failed (a panic): deciding again next pass");
        return true;
    };
    if decision.decided {
        if let Some(lasted_ms) = lapse.stale_spell_ending(now_ms) {
            let lasted = Duration::from_millis(u64::try_from(lasted_ms).unwrap_or(0));
            info!(cluster = %spec.name, ?lasted, "the model is current again: deciding again");
            publish(inner, spec, Event {
                type_: EventType::Normal,
                reason: "WatchCurrent".into(),
                note: Some(format!(
                    "cluster {}: the control plane's watch is proven current again after {:.1} s; \
                     failovers, placement and plans resume",
                    spec.name,
                    lasted.as_secs_f64()
                )),
                action: "ResumeDecisions".into(),
                secondary: None,
            })
            .await;
        }
        live_through(inner, spec, lapse, &decision, (now_ms, duration_ms)).await;
    } else if lapse.stale(now_ms) {
        // Decisions are held while the model is stale; say so, and what it shows meanwhile —
        // a slow API server holds back the watch probes' writes as it holds back the members'
        // renewals, so the model may turn stale before a mass lapse was ever decided on.
        let lapse_now = placement::mass_lapse(
            &view.model,
            spec.policy.mass_lapse_share,
            &Default::default(),
        );
        let shown = lapse_now
            .map(|m| format!(" It shows: {}.", m.reason()))
            .unwrap_or_default();
        warn!(cluster = %spec.name, %shown, "the model is stale: holding every decision until the watch is proven current");
        publish(
            inner,
            spec,
            Event {
                type_: EventType::Warning,
                reason: "WatchStale".into(),
                note: Some(format!(
                    "cluster {}: the control plane's watch is not proven current (its probes are \
                 late): no failover, placement or plan until it is.{shown}",
                    spec.name
                )),
                action: "HoldDecisions".into(),
                secondary: None,
            },
        )
        .await;
    }
    // Held back now, or in their grace: the next pass may fail one over.
    let held_back = decision.mass_lapse.is_some() || !decision.recovering.is_empty();
    let actions = decision.actions;
    if actions.is_empty() {
        return held_back;
    }
    debug!(cluster = %spec.name, actions = actions.len(), "reconciling");
    let apis = LeaseApis {
        targets: Api::namespaced(inner.client.clone(), &spec.namespace),
        members: Api::namespaced(inner.client.clone(), spec.member_namespace()),
    };
    // Fences first: a revoke in the second batch re-reads the member Lease and goes ahead only
    // if it is fenced (or released) by then.
    let (fences, rest): (Vec<Action>, Vec<Action>) = actions
        .into_iter()
        .partition(|a| matches!(a, Action::Fence { .. }));
    for batch in [fences, rest] {
        write_batch(inner, spec, &apis, duration_s, batch).await;
    }
    true
}

/// Follows a mass lapse ([`placement::LapseWatch`]): its start and end are logged and
/// published as Events.
async fn live_through(
    inner: &Inner,
    spec: &Cluster,
    lapse: &mut placement::LapseWatch,
    decision: &placement::Decision,
    (now_ms, duration_ms): (i64, i64),
) {
    let turn = lapse.lived(decision, now_ms, duration_ms);
    inner.set_mass_lapse(&spec.name, decision.mass_lapse.clone());
    if let Some(member) = &decision.failed_over_in_lapse {
        warn!(cluster = %spec.name, %member, "mass lapse: failing over one lapsed member (at most one per lease duration)");
    }
    let event = match turn {
        Some(placement::LapseTurn::Began(m)) => {
            let reason = m.reason();
            warn!(cluster = %spec.name, lapsed = ?m.lapsed, %reason, "mass lapse: holding failovers back");
            Some(Event {
                type_: EventType::Warning,
                reason: "MassLapse".into(),
                note: Some(format!("cluster {}: {reason}", spec.name)),
                action: "HoldFailovers".into(),
                secondary: None,
            })
        }
        Some(placement::LapseTurn::Ended {
            lasted_ms,
            failed_over,
        }) => {
            let lasted = Duration::from_millis(u64::try_from(lasted_ms).unwrap_or(0));
            info!(cluster = %spec.name, ?lasted, ?failed_over, in_grace = ?decision.recovering, "mass lapse over: members it held back get a lease duration to renew, then fail over as usual");
            Some(Event {
                type_: EventType::Normal,
                reason: "MassLapseOver".into(),
                note: Some(format!(
                    "cluster {}: no lapsed member held back any more after {:.1} s \
                     ({} failed over during it)",
                    spec.name,
                    lasted.as_secs_f64(),
                    failed_over.len()
                )),
                action: "ResumeFailovers".into(),
                secondary: None,
            })
        }
        None => None,
    };
    if let Some(event) = event {
        publish(inner, spec, event).await;
    }
}

/// Publishes `event` about the control-plane Lease (bounded in time; a failure is logged).
async fn publish(inner: &Inner, spec: &Cluster, event: Event) {
    let cp = &inner.config.control_plane;
    let regarding = k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some("coordination.k8s.io/v1".into()),
        kind: Some("Lease".into()),
        name: Some(cp.lease_name.clone()),
        namespace: Some(cp.namespace.clone()),
        ..Default::default()
    };
    let reason = event.reason.clone();
    match tokio::time::timeout(EVENT_TIMEOUT, inner.events.publish(&event, &regarding)).await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => {
            warn!(cluster = %spec.name, %reason, %error, "could not publish an Event")
        }
        Err(_) => warn!(cluster = %spec.name, %reason, "publishing an Event took too long"),
    }
}

/// `desire`, unless the Lease's desired owner is no longer `expect`: someone (an operation,
/// another replica) decided first, and it is left as it is. The hand-off mode comes from the
/// cluster's policy ([`crate::config::Policy::overlap_ms`]).
fn unless_decided(
    inner: &Inner,
    spec: &Cluster,
    current: Option<&protocol::LeaseView>,
    expect: &Option<String>,
    desire: &protocol::Desire,
) -> Option<protocol::Desire> {
    let now = current.and_then(|v| v.desired.clone());
    (now == *expect).then(|| protocol::Desire {
        overlap_ms: spec.policy.overlap_ms(
            inner
                .shared
                .read(|ix| ix.prepares(&spec.name, &desire.owner)),
        ),
        ..desire.clone()
    })
}

/// One write to target `key` that clears `holder`'s hold if its member Lease is
/// still fenced or released on a fresh read, and sets `desire` (`(expect, desire)`, as
/// [`unless_decided`]) if given.
async fn revoke(
    inner: &Inner,
    apis: &LeaseApis,
    spec: &Cluster,
    key: &str,
    holder: &str,
    desire: Option<(&Option<String>, &protocol::Desire)>,
) -> kube::Result<leases::Outcome> {
    let (prefix, cluster) = (spec.prefix(), spec.name.as_str());
    let seen = || {
        inner
            .shared
            .read(|ix| ix.member_record(cluster, holder, jiff::Timestamp::now()))
    };
    leases::desire_or_revoke(
        &apis.targets,
        prefix,
        cluster,
        key,
        holder,
        |current| desire.and_then(|(expect, d)| unless_decided(inner, spec, current, expect, d)),
        |hold_s| leases::may_revoke(&apis.members, prefix, cluster, holder, hold_s, seen),
    )
    .await
}

/// Where a cluster's Leases are written: target Leases in its namespace, member Leases in
/// [`Cluster::member_namespace`].
struct LeaseApis {
    targets: Api<Lease>,
    members: Api<Lease>,
}

/// Makes one batch of writes, as many at once as the [pacing](crate::k8s::pacing) limit allows
/// (read again after each write, so that it follows the API server's latency within a batch).
async fn write_batch(
    inner: &Inner,
    spec: &Cluster,
    apis: &LeaseApis,
    duration_s: i32,
    actions: Vec<Action>,
) {
    let limit = || {
        inner
            .pacing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .limit()
    };
    let mut waiting = actions.into_iter();
    let mut running = futures::stream::FuturesUnordered::new();
    loop {
        while running.len() < limit() {
            let Some(action) = waiting.next() else { break };
            running.push(async move {
                let sent = std::time::Instant::now();
                let result = write_one(inner, spec, apis, duration_s, &action).await;
                (action, sent, result)
            });
        }
        let Some((action, sent, result)) = running.next().await else {
            break;
        };
        let now = std::time::Instant::now();
        let sample = match &result {
            Err(kube::Error::Api(s)) if s.code == 429 || s.code >= 500 => Sample::Overloaded,
            Ok(_) | Err(kube::Error::Api(_)) => Sample::Answered(now - sent),
            Err(_) => Sample::Overloaded,
        };
        let allowed = {
            let mut pacing = inner
                .pacing
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            pacing.observe(sent, sample, now);
            pacing.limit()
        };
        inner.metrics.set_write_concurrency(allowed);
        let word = match &result {
            Ok(leases::Outcome::Created) => "created",
            Ok(leases::Outcome::Updated) => "updated",
            Ok(leases::Outcome::Deleted) => "deleted",
            Ok(leases::Outcome::Unchanged) => "unchanged",
            Err(_) => "error",
        };
        inner.metrics.lease_write(&spec.name, word);
        match result {
            Ok(outcome) => debug!(cluster = %spec.name, ?action, ?outcome, "lease write"),
            Err(error) => {
                warn!(cluster = %spec.name, ?action, %error, "lease write failed")
            }
        }
    }
}

/// One control-loop Lease write (a compare-and-swap, re-read after conflicts).
async fn write_one(
    inner: &Inner,
    spec: &Cluster,
    apis: &LeaseApis,
    duration_s: i32,
    action: &Action,
) -> kube::Result<leases::Outcome> {
    let prefix = spec.prefix();
    let cluster = spec.name.as_str();
    match &action {
        Action::Desire {
            key,
            desire,
            expect,
            revoke: None,
            absent,
        } => {
            leases::set_desire(&apis.targets, prefix, cluster, key, *absent, |current| {
                unless_decided(inner, spec, current, expect, desire)
            })
            .await
        }
        Action::Desire {
            key,
            desire,
            expect,
            revoke: Some(holder),
            ..
        } => revoke(inner, apis, spec, key, holder, Some((expect, desire))).await,
        Action::Revoke { key, holder } => revoke(inner, apis, spec, key, holder, None).await,
        Action::Fence { member } => {
            let member = member.as_str();
            leases::fence(&apis.members, prefix, cluster, member, duration_s, || {
                inner
                    .shared
                    .read(|ix| ix.expired_member_record(cluster, member, jiff::Timestamp::now()))
            })
            .await
        }
        Action::DeleteMember { member } => {
            let name = protocol::names::member_lease(prefix, cluster, member);
            leases::delete_if(&apis.members, &name, |l| {
                // Still this member's, still not held, and still garbage.
                protocol::parse_native(l, cluster).is_some_and(|v| {
                    matches!(v.role, protocol::LeaseRole::Member(ref m) if m == member)
                        && v.holding.holder.is_none()
                }) && inner
                    .shared
                    .read(|ix| ix.member_lease_is_garbage(cluster, member, jiff::Timestamp::now()))
            })
            .await
        }
        Action::Plan { plan, expect } => {
            let lease = protocol::plan::lease(prefix, cluster, plan);
            leases::put_at(&apis.targets, lease, expect.as_deref()).await
        }
        Action::DeletePlan {
            lease,
            resource_version,
            ..
        } => leases::delete_at(&apis.targets, lease, resource_version).await,
        Action::Delete { lease, .. } => {
            leases::delete_if(&apis.targets, lease, |l| {
                // Still not one of the configured targets.
                protocol::parse_native(l, cluster).is_some_and(|v| {
                    matches!(v.role, protocol::LeaseRole::Target(ref k) if inner
                        .model_has_unconfigured(cluster, k))
                })
            })
            .await
        }
    }
}

impl Inner {
    /// Whether target `key` is not in the configured list (as the index knows it now).
    fn model_has_unconfigured(&self, cluster: &str, key: &str) -> bool {
        !self.shared.read(|ix| ix.configured(cluster, key))
    }
}

/// A new proposal replaces the cluster's older ones: each was planned for a membership that
/// has changed since, so it is cancelled (by `policy`) rather than left to be approved.
async fn supersede(inner: &Inner, cluster: &str, newest: &str) {
    let older = match inner.store.unfinished_operations().await {
        Ok(ops) => ops
            .into_iter()
            .filter(|o| o.cluster == cluster && o.state == OperationState::Proposed)
            .filter(|o| o.id != newest),
        Err(error) => {
            warn!(cluster, %error, "could not look for older proposals");
            return;
        }
    };
    for op in older {
        match inner
            .store
            .cancel_operation(&op.id, "policy", now_ms())
            .await
        {
            Ok(_) => info!(cluster, operation = %op.id, by = newest, "proposal superseded"),
            Err(error) => {
                warn!(cluster, operation = %op.id, %error, "could not cancel an older proposal")
            }
        }
    }
}

/// Whether member `name` stays known to the join policy while it is not eligible: one whose
/// member Lease merely expired (neither fenced nor released) and whose pod is
/// still there. A mass lapse makes every member look so; when its renewals come back nothing of
/// it has moved, so it has not joined, and a rebalance then would move its targets (those of a
/// member still in its grace among them) for nothing. Fenced, released or gone, it is
/// forgotten, and joins when it comes back.
fn merely_lapsed(model: &ClusterModel, name: &str) -> bool {
    model.instance(name).is_some_and(|i| {
        !i.ghost
            && !i.terminating
            && i.member_lease
                .as_ref()
                .is_some_and(|m| m.liveness == crate::k8s::model::Liveness::Expired)
    })
}

async fn join_policy(
    inner: &Arc<Inner>,
    spec: &Cluster,
    model: &ClusterModel,
    watch: &mut JoinWatch,
) {
    if spec.policy.on_join == OnJoin::Off {
        return;
    }
    if !model.synced || model.stale {
        return;
    }
    let eligible: BTreeSet<String> = model
        .instances
        .iter()
        .filter(|i| i.eligible())
        .map(|i| i.name.clone())
        .collect();
    let Some(known) = &mut watch.known else {
        // Membership at start-up is the baseline, not a join.
        watch.known = Some(eligible);
        return;
    };
    known.retain(|m| eligible.contains(m) || merely_lapsed(model, m));
    if eligible.is_subset(known) {
        watch.pending = None;
        return;
    }
    match &watch.pending {
        Some((_, seen)) if *seen == eligible => {}
        _ => {
            watch.pending = Some((Instant::now(), eligible.clone()));
            return;
        }
    }
    let Some((since, _)) = &watch.pending else {
        return;
    };
    if since.elapsed() < spec.policy.join_settle {
        return;
    }
    let joined: Vec<&String> = eligible.difference(known).collect();
    let reason = format!(
        "member{} joined: {}",
        if joined.len() == 1 { "" } else { "s" },
        joined
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let engine = Engine {
        inner: inner.clone(),
    };
    if engine
        .plan_rebalance(&spec.name, &PlanRequest::default())
        .await
        .is_ok_and(|p| p.moves.is_empty())
    {
        // Already balanced (e.g. the newcomers got unplaced targets): nothing to propose.
        watch.known = Some(eligible);
        watch.pending = None;
        return;
    }
    // Paused by a person (the store is the truth, shared by every replica): the join waits,
    // and is acted on once automation is resumed.
    match inner.store.automation_pause(&spec.name).await {
        Ok(None) => {}
        Ok(Some(p)) => {
            debug!(cluster = %spec.name, paused_by = %p.paused_by, %reason, "join policy paused");
            return;
        }
        Err(error) => {
            warn!(cluster = %spec.name, %error, "join policy: could not read whether it is paused");
            return;
        }
    }
    let proposed = spec.policy.on_join == OnJoin::Propose;
    match engine
        .start_rebalance(
            &spec.name,
            &PlanRequest::default(),
            "policy",
            &reason,
            proposed,
        )
        .await
    {
        Ok(op) => {
            info!(cluster = %spec.name, operation = %op.id, moves = op.moves.len(), proposed, %reason, "join policy");
            watch.known = Some(eligible);
            watch.pending = None;
            if proposed {
                supersede(inner, &spec.name, &op.id).await;
            }
        }
        // Wait for the running operation, or for the watches to be fresh again, then look again.
        Err(EngineError::Busy(_) | EngineError::Stale(_)) => {}
        Err(error) => {
            warn!(cluster = %spec.name, %error, "join policy could not plan");
            watch.known = Some(eligible);
            watch.pending = None;
        }
    }
}
