//! `/clusters…`: clusters, instances and targets as the latest model shows them (see
//! `state::Models`), and the cluster-changing requests: rebalance, remove an instance,
//! uncordon. A rebalance or removal is a dry run unless the body says `"dry_run": false`.

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use std::sync::Arc;

use crate::engine::View;
use crate::engine::planner::Plan;
use crate::engine::uncordon::UncordonPreview;
use crate::k8s::model::{ClusterModel, Instance, ServiceInfo, Target, TargetCounts, TargetState};
use crate::protocol::Protocol;
use crate::store::{HistoryEntry, HistoryQuery, Operation, OperationQuery, OperationSummary};

use super::super::actions::{self, Run};
use super::super::auth::Action;
use super::super::caller::Caller;
use super::super::error::{ApiError, Problem};
use super::super::state::AppState;
use super::{ApiPath, ApiQuery, IdempotencyKey, NoParameters, OptionalJson, accepted};
use crate::store::{decode_cursor, encode_cursor};

pub(super) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_clusters))
        .routes(routes!(get_cluster))
        .routes(routes!(list_instances))
        .routes(routes!(get_instance))
        .routes(routes!(remove_instance))
        .routes(routes!(preview_uncordon, uncordon_instance))
        .routes(routes!(list_targets))
        .routes(routes!(get_target))
        .routes(routes!(rebalance))
        .routes(routes!(get_automation, set_automation))
}

/// One cluster at a glance.
#[derive(Debug, Serialize, ToSchema)]
pub struct ClusterSummary {
    /// Its name.
    pub name: String,
    /// Its namespace.
    pub namespace: String,
    /// Its Lease layout.
    pub protocol: Protocol,
    /// Every watch has synced once.
    pub synced: bool,
    /// A watch is down: this is the last known state.
    pub stale: bool,
    /// The member holding the cluster's leader Lease.
    pub leader: Option<String>,
    /// Members whose pod is ready.
    pub members_ready: usize,
    /// Members (pods matching the selector) and ghosts.
    pub members_total: usize,
    /// Targets by state.
    pub targets: TargetCounts,
    /// Largest load over fair share, minus 1, over the members that take targets.
    pub imbalance: f64,
    /// The most recent operation.
    pub last_operation: Option<OperationSummary>,
    /// Why the target list could not be read, if it could not.
    pub targets_error: Option<String>,
    /// Why failovers are held back, if they are — many members' liveness lapsed
    /// together (`policy.mass_lapse_share`), more likely a slow API server than dead members;
    /// at most one lapsed member is failed over per lease duration meanwhile.
    pub degraded: Option<String>,
}

/// A cluster in detail: its summary, instances and Services.
#[derive(Debug, Serialize, ToSchema)]
pub struct ClusterDetail {
    /// At a glance.
    #[serde(flatten)]
    pub summary: ClusterSummary,
    /// Members and ghosts.
    pub instances: Vec<Instance>,
    /// The configured Services.
    pub services: Vec<ServiceInfo>,
}

/// An instance with the targets it holds.
#[derive(Debug, Serialize, ToSchema)]
pub struct InstanceDetail {
    /// The instance.
    #[serde(flatten)]
    pub instance: Instance,
    /// Keys of the targets it holds (sorted).
    pub targets: Vec<String>,
}

/// A page of targets.
#[derive(Debug, Serialize, ToSchema)]
pub struct TargetPage {
    /// The targets, sorted by key.
    pub items: Vec<Target>,
    /// Pass as `cursor` for the next page; absent on the last.
    pub next_cursor: Option<String>,
    /// Pass as `cursor` for the previous page; absent when the previous page is the first (no
    /// cursor) or there is none (`offset` is 0).
    pub previous_cursor: Option<String>,
    /// How many matching targets come before this page (so it shows `offset + 1` to
    /// `offset + items.len()` of `total`).
    pub offset: usize,
    /// How many targets match the filters in all.
    pub total: usize,
}

/// A target with its ownership history, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct TargetDetail {
    /// The target.
    #[serde(flatten)]
    pub target: Target,
    /// Its most recent history entries (ownership changes), newest first.
    pub history: Vec<HistoryEntry>,
}

/// Filters of the target list.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct TargetFilter {
    /// Only targets held by this instance.
    pub owner: Option<String>,
    /// Only targets in this state.
    pub state: Option<TargetState>,
    /// Only targets whose key contains this text (case-insensitive).
    pub q: Option<String>,
    /// `next_cursor` (or `previous_cursor`) of the page before.
    pub cursor: Option<String>,
    /// Page size, 1 to 1000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<u32>,
}

/// A rebalance request.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RebalanceRequest {
    /// Only return the plan (the default). `false` starts the operation.
    #[serde(default = "yes")]
    pub dry_run: bool,
    /// At most this many moves (1 or more).
    #[schema(minimum = 1, maximum = 18446744073709551615_u64)]
    pub max_moves: Option<usize>,
    /// Starting: the `id` of the plan you previewed. Exactly its moves run, or the request is
    /// refused (409 `plan-changed`, with the fresh plan in `plan`) because the cluster changed
    /// since. Without it the plan is made afresh and run as it is.
    pub plan_id: Option<String>,
    /// Why (recorded with the operation).
    pub reason: Option<String>,
}

/// A request to pause or resume a cluster's automatic rebalancing.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AutomationRequest {
    /// `true` pauses: a member joining no longer starts (or proposes) a rebalance until it is
    /// resumed (`false`); failovers and the placement of new targets go on.
    pub paused: bool,
    /// Why (recorded with the pause, and in the audit).
    pub reason: Option<String>,
}

/// A cluster's automatic rebalancing: its `on_join` policy, and whether a person paused it.
#[derive(Debug, Serialize, ToSchema)]
pub struct Automation {
    /// The cluster's `policy.on_join` (`auto`, `propose` or `off`).
    pub on_join: String,
    /// Paused, by whom, when and why; `null` when not paused.
    pub paused: Option<crate::store::Pause>,
    /// Whether the last request changed anything (`false` when it already was so; always
    /// `false` on GET).
    pub changed: bool,
}

/// A request to remove an instance.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RemoveRequest {
    /// Only return the drain plan (the default). `false` starts the removal.
    #[serde(default = "yes")]
    pub dry_run: bool,
    /// Starting: the `id` of the drain plan you previewed; refused (409 `plan-changed`, with
    /// the fresh plan) if it is no longer the drain plan. Without it the removal runs whatever
    /// the drain plan is then.
    pub plan_id: Option<String>,
}

fn yes() -> bool {
    true
}

/// The answer to an uncordon.
#[derive(Debug, Serialize, ToSchema)]
pub struct Uncordoned {
    /// Whether it was cordoned before.
    pub changed: bool,
}

/// Default and largest page sizes of the target list (the document's range of `limit`, which
/// the API holds requests to; the dashboard asks for its own size).
const DEFAULT_LIMIT: usize = 100;
const MAX_LIMIT: usize = 1000;

pub(crate) async fn snapshot(state: &AppState, cluster: &str) -> Result<Arc<View>, ApiError> {
    Ok(state.engine.view(cluster).await?)
}

pub(crate) async fn summary(state: &AppState, snap: &View) -> Result<ClusterSummary, ApiError> {
    let m: &ClusterModel = &snap.model;
    let last = state
        .engine
        .store()
        .operations(&OperationQuery {
            cluster: Some(m.name.clone()),
            limit: 1,
            ..Default::default()
        })
        .await?
        .items
        .into_iter()
        .next();
    Ok(ClusterSummary {
        name: m.name.clone(),
        namespace: m.namespace.clone(),
        protocol: m.protocol,
        synced: m.synced,
        stale: m.stale,
        leader: m.leader.clone(),
        members_ready: m.instances.iter().filter(|i| i.ready && !i.ghost).count(),
        members_total: m.instances.len(),
        targets: m.counts.clone(),
        imbalance: state.engine.imbalance(snap),
        last_operation: last,
        targets_error: m.targets_error.clone(),
        degraded: state.engine.mass_lapse(snap).map(|l| l.reason()),
    })
}

/// Lists the managed clusters.
#[utoipa::path(get, path = "/clusters", tag = "clusters",
    responses((status = 200, body = Vec<ClusterSummary>),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json")))]
async fn list_clusters(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<Vec<ClusterSummary>>, ApiError> {
    caller.require(&state, Action::Read, None).await?;
    let mut out = Vec::new();
    for c in &state.engine.config().clusters {
        let snap = snapshot(&state, &c.name).await?;
        out.push(summary(&state, &snap).await?);
    }
    Ok(Json(out))
}

/// One cluster: summary, instances, Services.
#[utoipa::path(get, path = "/clusters/{cluster}", tag = "clusters",
    params(("cluster" = String, Path, description = "Cluster name")),
    responses((status = 200, body = ClusterDetail),
        (status = 404, body = Problem, content_type = "application/problem+json")))]
async fn get_cluster(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(cluster): ApiPath<String>,
) -> Result<Json<ClusterDetail>, ApiError> {
    caller.require(&state, Action::Read, Some(&cluster)).await?;
    let snap = snapshot(&state, &cluster).await?;
    Ok(Json(ClusterDetail {
        summary: summary(&state, &snap).await?,
        instances: snap.model.instances.clone(),
        services: snap.model.services.clone(),
    }))
}

/// The cluster's instances (members and ghosts).
#[utoipa::path(get, path = "/clusters/{cluster}/instances", tag = "instances",
    params(("cluster" = String, Path, description = "Cluster name")),
    responses((status = 200, body = Vec<Instance>),
        (status = 404, body = Problem, content_type = "application/problem+json")))]
async fn list_instances(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(cluster): ApiPath<String>,
) -> Result<Json<Vec<Instance>>, ApiError> {
    caller.require(&state, Action::Read, Some(&cluster)).await?;
    Ok(Json(
        snapshot(&state, &cluster).await?.model.instances.clone(),
    ))
}

fn find_instance(snap: &View, cluster: &str, name: &str) -> Result<Instance, ApiError> {
    snap.model
        .instance(name)
        .cloned()
        .ok_or_else(|| ApiError::NotFound(format!("cluster {cluster:?} has no instance {name:?}")))
}

/// One instance and the targets it holds.
#[utoipa::path(get, path = "/clusters/{cluster}/instances/{instance}", tag = "instances",
    params(("cluster" = String, Path, description = "Cluster name"),
        ("instance" = String, Path, description = "Instance (pod) name")),
    responses((status = 200, body = InstanceDetail),
        (status = 404, body = Problem, content_type = "application/problem+json")))]
async fn get_instance(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((cluster, instance)): ApiPath<(String, String)>,
) -> Result<Json<InstanceDetail>, ApiError> {
    caller.require(&state, Action::Read, Some(&cluster)).await?;
    let snap = snapshot(&state, &cluster).await?;
    let i = find_instance(&snap, &cluster, &instance)?;
    let targets = snap
        .model
        .targets
        .iter()
        .filter(|t| t.owner.as_deref() == Some(instance.as_str()))
        .map(|t| t.key.to_string())
        .collect();
    Ok(Json(InstanceDetail {
        instance: i,
        targets,
    }))
}

/// Plans (dry run, the default) or starts the removal of an instance: cordon, drain, the
/// removal webhook, optionally deleting the pod.
#[utoipa::path(post, path = "/clusters/{cluster}/instances/{instance}/remove", tag = "instances",
    params(("cluster" = String, Path, description = "Cluster name"),
        ("instance" = String, Path, description = "Instance (pod) name"),
        IdempotencyKey),
    request_body(content = Option<RemoveRequest>, description = "None (or `null`) is a dry run"),
    responses((status = 200, description = "The drain plan (dry run)", body = Plan),
        (status = 202, description = "Started (even with nothing to move: the removal itself is the work — cordon, webhook, pod deletion); Location names the operation", body = Operation),
        (status = 400, description = "The body is not JSON, names a field the schema does not list, or a value outside its type", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such cluster or instance", body = Problem, content_type = "application/problem+json"),
        (status = 409, body = Problem, content_type = "application/problem+json"),
        (status = 422, body = Problem, content_type = "application/problem+json"),
        (status = 503, body = Problem, content_type = "application/problem+json")))]
async fn remove_instance(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((cluster, instance)): ApiPath<(String, String)>,
    OptionalJson(body): OptionalJson<RemoveRequest>,
) -> Result<Response, ApiError> {
    let req = body.unwrap_or(RemoveRequest {
        dry_run: true,
        plan_id: None,
    });
    if req.dry_run {
        let plan = actions::plan_remove(&state, &caller, &cluster, &instance).await?;
        return Ok(Json(plan).into_response());
    }
    let op = actions::remove(&state, &caller, &cluster, &instance, req.plan_id.as_deref()).await?;
    Ok(accepted(op))
}

/// What uncordoning an instance would set off, before it is done: the rebalance the cluster
/// would get with it uncordoned, and whether the join policy would propose it, start it, or
/// leave it to a person (`on_join: off`, or automation paused). Changes nothing.
#[utoipa::path(get, path = "/clusters/{cluster}/instances/{instance}/uncordon", tag = "instances",
    params(("cluster" = String, Path, description = "Cluster name"),
        ("instance" = String, Path, description = "Instance (pod) name")),
    responses((status = 200, body = UncordonPreview),
        (status = 404, description = "No such cluster or instance", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "A gnmic cluster: observed only", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The cluster's watches are not current", body = Problem, content_type = "application/problem+json")))]
async fn preview_uncordon(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((cluster, instance)): ApiPath<(String, String)>,
) -> Result<Json<UncordonPreview>, ApiError> {
    caller.require(&state, Action::Read, Some(&cluster)).await?;
    Ok(Json(state.engine.plan_uncordon(&cluster, &instance).await?))
}

/// Lets a cordoned instance receive targets again.
#[utoipa::path(post, path = "/clusters/{cluster}/instances/{instance}/uncordon", tag = "instances",
    params(("cluster" = String, Path, description = "Cluster name"),
        ("instance" = String, Path, description = "Instance (pod) name"),
        IdempotencyKey),
    request_body(content = Option<NoParameters>, description = "None, `null` or `{}`: it takes no parameters"),
    responses((status = 200, body = Uncordoned),
        (status = 404, description = "No such cluster or instance", body = Problem, content_type = "application/problem+json")))]
async fn uncordon_instance(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((cluster, instance)): ApiPath<(String, String)>,
    _body: OptionalJson<NoParameters>,
) -> Result<Json<Uncordoned>, ApiError> {
    let changed = actions::uncordon(&state, &caller, &cluster, &instance).await?;
    Ok(Json(Uncordoned { changed }))
}

/// Whether a member joining starts (or proposes) a rebalance now: the cluster's `on_join`
/// policy, and a pause a person set.
#[utoipa::path(get, path = "/clusters/{cluster}/automation", tag = "clusters",
    params(("cluster" = String, Path, description = "Cluster name")),
    responses((status = 200, body = Automation),
        (status = 404, description = "No such cluster", body = Problem, content_type = "application/problem+json")))]
async fn get_automation(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(cluster): ApiPath<String>,
) -> Result<Json<Automation>, ApiError> {
    caller.require(&state, Action::Read, Some(&cluster)).await?;
    let paused = state.engine.automation(&cluster).await?;
    Ok(Json(automation(&state, &cluster, paused, false)?))
}

/// Pauses or resumes the cluster's automatic rebalancing (audited; kept across restarts and
/// shared by every replica). While paused, a join waits: resuming acts on it.
#[utoipa::path(post, path = "/clusters/{cluster}/automation", tag = "clusters",
    params(("cluster" = String, Path, description = "Cluster name"), IdempotencyKey),
    request_body(content = AutomationRequest),
    responses((status = 200, body = Automation),
        (status = 400, description = "The body is not JSON, names a field the schema does not list, or a value outside its type", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such cluster", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "A body not sent as JSON (Content-Type: application/json)", body = Problem, content_type = "application/problem+json")))]
async fn set_automation(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(cluster): ApiPath<String>,
    OptionalJson(body): OptionalJson<AutomationRequest>,
) -> Result<Json<Automation>, ApiError> {
    let Some(req) = body else {
        return Err(ApiError::BadRequest(
            "the body is required: {\"paused\": true|false, \"reason\": \"…\"}".into(),
        ));
    };
    let reason = req.reason.as_deref().unwrap_or("requested over the API");
    let (changed, paused) =
        actions::set_automation(&state, &caller, &cluster, req.paused, reason).await?;
    Ok(Json(automation(&state, &cluster, paused, changed)?))
}

fn automation(
    state: &AppState,
    cluster: &str,
    paused: Option<crate::store::Pause>,
    changed: bool,
) -> Result<Automation, ApiError> {
    let on_join = state.engine.cluster(cluster)?.policy.on_join;
    Ok(Automation {
        on_join: serde_json::to_value(on_join)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default(),
        paused,
        changed,
    })
}

/// Targets, filtered, a page at a time (sorted by key).
#[utoipa::path(get, path = "/clusters/{cluster}/targets", tag = "targets",
    params(("cluster" = String, Path, description = "Cluster name"), TargetFilter),
    responses((status = 200, body = TargetPage),
        (status = 400, description = "A query parameter this list does not take, a value outside its range or words, or a cursor it did not hand out", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such cluster", body = Problem, content_type = "application/problem+json")))]
async fn list_targets(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(cluster): ApiPath<String>,
    ApiQuery(f): ApiQuery<TargetFilter>,
) -> Result<Json<TargetPage>, ApiError> {
    caller.require(&state, Action::Read, Some(&cluster)).await?;
    let snap = snapshot(&state, &cluster).await?;
    Ok(Json(page(&snap.model, &f)?))
}

/// One page of the filtered targets. The cursor is the last key of the previous page, so a
/// page starts with a binary search and stays cheap however deep it is.
pub(crate) fn page(m: &ClusterModel, f: &TargetFilter) -> Result<TargetPage, ApiError> {
    let limit = f
        .limit
        .map_or(DEFAULT_LIMIT, |l| (l as usize).clamp(1, MAX_LIMIT));
    let q = f.q.as_deref().map(str::to_lowercase);
    let matches = |t: &Target| {
        f.owner
            .as_deref()
            .is_none_or(|o| t.owner.as_deref() == Some(o))
            && f.state.is_none_or(|s| t.state == s)
            && q.as_deref().is_none_or(|q| contains_folded(&t.key, q))
    };
    let start = match &f.cursor {
        Some(c) => {
            let after = decode_cursor("t", c)?;
            m.targets.partition_point(|t| *t.key <= *after)
        }
        None => 0,
    };
    let filtered = f.owner.is_some() || f.state.is_some() || q.is_some();
    let mut items: Vec<Target> = Vec::with_capacity(limit + 1);
    // The last `limit + 1` matches before the page: the previous page's cursor is the first.
    let mut before: std::collections::VecDeque<&Target> = std::collections::VecDeque::new();
    let mut offset = 0;
    let total = if filtered {
        // One pass over every target: count the matches, keep the page's.
        let mut total = 0;
        for (i, t) in m.targets.iter().enumerate() {
            if matches(t) {
                total += 1;
                if i < start {
                    offset += 1;
                    if before.len() == limit + 1 {
                        before.pop_front();
                    }
                    before.push_back(t);
                } else if items.len() <= limit {
                    items.push(t.clone());
                }
            }
        }
        total
    } else {
        offset = start;
        before.extend(m.targets[start.saturating_sub(limit + 1)..start].iter());
        items.extend(m.targets[start..].iter().take(limit + 1).cloned());
        m.targets.len()
    };
    let previous_cursor = (offset > limit)
        .then(|| before.front().map(|t| encode_cursor("t", &t.key)))
        .flatten();
    let next_cursor = if items.len() > limit {
        items.truncate(limit);
        items.last().map(|t| encode_cursor("t", &t.key))
    } else {
        None
    };
    Ok(TargetPage {
        items,
        next_cursor,
        previous_cursor,
        offset,
        total,
    })
}

/// Whether `key` contains `q` (lower-case), ignoring case; without allocating for an ASCII key
/// (a `q=` filter visits every target of the cluster).
fn contains_folded(key: &str, q: &str) -> bool {
    if !key.is_ascii() {
        return key.to_lowercase().contains(q);
    }
    let q = q.as_bytes();
    q.is_empty()
        || key
            .as_bytes()
            .windows(q.len())
            .any(|w| w.iter().zip(q).all(|(a, b)| a.to_ascii_lowercase() == *b))
}

/// One target and its recent ownership history.
#[utoipa::path(get, path = "/clusters/{cluster}/targets/{target}", tag = "targets",
    params(("cluster" = String, Path, description = "Cluster name"),
        ("target" = String, Path, description = "Target key (percent-encoded)")),
    responses((status = 200, body = TargetDetail),
        (status = 404, body = Problem, content_type = "application/problem+json")))]
async fn get_target(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((cluster, target)): ApiPath<(String, String)>,
) -> Result<Json<TargetDetail>, ApiError> {
    caller.require(&state, Action::Read, Some(&cluster)).await?;
    let snap = snapshot(&state, &cluster).await?;
    let t = snap.model.target(&target).cloned().ok_or_else(|| {
        ApiError::NotFound(format!("cluster {cluster:?} has no target {target:?}"))
    })?;
    let history = state
        .engine
        .store()
        .history(&HistoryQuery {
            cluster: Some(cluster.clone()),
            target: Some(target.clone()),
            limit: 50,
            ..Default::default()
        })
        .await?
        .items;
    Ok(Json(TargetDetail { target: t, history }))
}

/// Plans (dry run, the default) or starts a rebalance with the fewest moves. A run whose plan
/// has no move starts nothing and records no operation: the answer is that plan (200).
#[utoipa::path(post, path = "/clusters/{cluster}/rebalance", tag = "clusters",
    params(("cluster" = String, Path, description = "Cluster name"),
        IdempotencyKey),
    request_body(content = Option<RebalanceRequest>, description = "None (or `null`) is a dry run with no move limit"),
    responses((status = 200, description = "The plan: a dry run, or a run with nothing to move (no operation started or recorded)", body = Plan),
        (status = 202, description = "Started; Location names the operation", body = Operation),
        (status = 400, description = "The body is not JSON, names a field the schema does not list, or a value outside its type or range", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such cluster", body = Problem, content_type = "application/problem+json"),
        (status = 409, body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "A body not sent as JSON (Content-Type: application/json)", body = Problem, content_type = "application/problem+json"),
        (status = 422, body = Problem, content_type = "application/problem+json"),
        (status = 503, body = Problem, content_type = "application/problem+json")))]
async fn rebalance(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(cluster): ApiPath<String>,
    OptionalJson(body): OptionalJson<RebalanceRequest>,
) -> Result<Response, ApiError> {
    let req = body.unwrap_or(RebalanceRequest {
        dry_run: true,
        ..Default::default()
    });
    if req.dry_run {
        let plan = actions::plan_rebalance(&state, &caller, &cluster, req.max_moves).await?;
        return Ok(Json(plan).into_response());
    }
    let reason = req.reason.as_deref().unwrap_or("requested over the API");
    let run = actions::run_rebalance(
        &state,
        &caller,
        &cluster,
        req.max_moves,
        req.plan_id.as_deref(),
        reason,
    )
    .await?;
    Ok(match run {
        Run::Started(op) => accepted(op),
        Run::NothingToMove(plan) => Json(plan).into_response(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mk_target(key: &str, owner: &str) -> Target {
        Target {
            key: key.into(),
            lease: None,
            owner: Some(owner.into()),
            desired: Some(owner.into()),
            state: TargetState::Owned,
            weight: 1,
            pin: None,
            configured: true,
            operation: None,
            unchanged_ms: None,
            desired_unchanged_ms: None,
            app_working: None,
            app_problem: None,
        }
    }

    fn keys(p: &TargetPage) -> Vec<&str> {
        p.items.iter().map(|t| &*t.key).collect()
    }

    #[test]
    fn the_documented_page_sizes_are_the_lists() {
        let params = TargetFilter::into_params(|| None);
        let limit = params.iter().find(|p| p.name == "limit").unwrap();
        let schema = serde_json::to_value(&limit.schema).unwrap();
        assert_eq!(schema["minimum"], 1, "{schema}");
        assert_eq!(schema["maximum"], MAX_LIMIT, "{schema}");
        assert_eq!(
            crate::store::MAX_PAGE as usize,
            MAX_LIMIT,
            "the stored lists' largest page"
        );
    }

    #[test]
    fn filtered_pages_count_every_match_and_continue_after_the_cursor() {
        let mut targets: Vec<Target> = (0..10)
            .map(|i| mk_target(&format!("T-{i}"), if i % 2 == 0 { "a" } else { "b" }))
            .collect();
        targets.push(mk_target("ünï-1", "a"));
        let m = ClusterModel::for_tests(Vec::new(), targets);
        let filter = |owner: Option<&str>, q: Option<&str>, cursor: Option<String>| TargetFilter {
            owner: owner.map(str::to_owned),
            state: None,
            q: q.map(str::to_owned),
            cursor,
            limit: Some(2),
        };
        let p = page(&m, &filter(Some("a"), None, None)).unwrap();
        assert_eq!((keys(&p), p.total), (vec!["T-0", "T-2"], 6));
        let p = page(&m, &filter(Some("a"), None, p.next_cursor)).unwrap();
        assert_eq!((keys(&p), p.total), (vec!["T-4", "T-6"], 6));
        let p = page(&m, &filter(Some("a"), None, p.next_cursor)).unwrap();
        assert_eq!((keys(&p), p.total), (vec!["T-8", "ünï-1"], 6));
        assert!(p.next_cursor.is_none());
        // Case-insensitive, ASCII keys or not.
        let p = page(&m, &filter(None, Some("t-1"), None)).unwrap();
        assert_eq!((keys(&p), p.total), (vec!["T-1"], 1));
        let p = page(&m, &filter(None, Some("ÜNÏ"), None)).unwrap();
        assert_eq!((keys(&p), p.total), (vec!["ünï-1"], 1));
        let p = page(&m, &filter(Some("b"), Some("x"), None)).unwrap();
        assert_eq!((keys(&p), p.total), (Vec::<&str>::new(), 0));
        assert!(contains_folded("ABC", "") && !contains_folded("ab", "abc"));
    }

    #[test]
    fn pages_know_their_offset_and_walk_back_to_the_first() {
        let targets: Vec<Target> = (0..11)
            .map(|i| mk_target(&format!("T-{i:02}"), if i % 2 == 0 { "a" } else { "b" }))
            .collect();
        let m = ClusterModel::for_tests(Vec::new(), targets);
        for owner in [None, Some("a")] {
            let filter = |cursor: Option<String>| TargetFilter {
                owner: owner.map(str::to_owned),
                state: None,
                q: None,
                cursor,
                limit: Some(2),
            };
            // Forward to the last page, noting each page's keys and offset.
            let mut pages = vec![page(&m, &filter(None)).unwrap()];
            while let Some(next) = pages.last().unwrap().next_cursor.clone() {
                pages.push(page(&m, &filter(Some(next))).unwrap());
            }
            let mut shown = 0;
            for p in &pages {
                assert_eq!(p.offset, shown, "{owner:?}");
                shown += p.items.len();
            }
            assert_eq!(shown, pages[0].total, "{owner:?}");
            // Back again, page by page: each previous cursor gives the page before.
            for i in (1..pages.len()).rev() {
                let back = match &pages[i].previous_cursor {
                    Some(c) => page(&m, &filter(Some(c.clone()))).unwrap(),
                    None => {
                        assert_eq!(
                            i, 1,
                            "{owner:?}: only the second page goes back to no cursor"
                        );
                        page(&m, &filter(None)).unwrap()
                    }
                };
                assert_eq!(keys(&back), keys(&pages[i - 1]), "{owner:?} page {i}");
                assert_eq!(back.offset, pages[i - 1].offset);
            }
            assert!(pages[0].previous_cursor.is_none() && pages[0].offset == 0);
        }
    }
}
