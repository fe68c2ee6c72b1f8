//! The overview, a cluster's page, its replication instances, and the instance actions
//! (remove with its drain-plan preview, uncordon).

use askama::Template;
use axum::Form;
use axum::extract::{Path, RawQuery, State};
use axum::response::Response;

use super::charts::{LoadOverTime, Window};
use super::page::{Base, UiError, Viewer, render, see_other};
use super::plan::PlanView;
use super::recent::{self, Recent};
use super::story::{self, Line, What};
use crate::engine::RemovalEffects;
use crate::http::actions;
use crate::http::api::clusters::{ClusterDetail, ClusterSummary, snapshot, summary};
use crate::http::auth::Action;
use crate::http::demo::{self, DemoPanel};
use crate::http::error::ApiError;
use crate::http::state::AppState;
use crate::k8s::model::{Instance, Target};
use crate::store::{HistoryKind, HistoryQuery};

#[derive(Template)]
#[template(path = "overview.html")]
struct Overview {
    base: Base,
    clusters: Vec<ClusterSummary>,
}

/// `/`: every cluster's health.
pub async fn overview(
    State(state): State<AppState>,
    mut viewer: Viewer,
) -> Result<Response, UiError> {
    viewer.caller.require(&state, Action::Read, None).await?;
    let mut clusters = Vec::new();
    for c in &state.engine.config().clusters {
        let view = snapshot(&state, &c.name).await?;
        viewer.shows(&state, &view);
        clusters.push(summary(&state, &view).await?);
    }
    let mut base = Base::new(&state, &viewer, "Overview").await;
    base.nav = "overview";
    render(&Overview { base, clusters })
}

#[derive(Template)]
#[template(path = "cluster.html")]
struct ClusterPage<'a> {
    base: Base,
    c: ClusterDetail,
    max_load: usize,
    events: &'a [Line],
    /// Targets per instance over the window asked for (`?window=`).
    load: Option<LoadOverTime>,
    /// Under `leasehold demo`: its controls for this cluster.
    demo: Option<DemoPanel>,
    /// The cluster's `on_join` policy, and a person's pause of it.
    on_join: String,
    paused: Option<crate::store::Pause>,
    /// What pausing or resuming needs when the viewer may not (shown instead of the button).
    automation_needs: Option<String>,
}

/// `/clusters/{cluster}`: leader, instances with their load (over the last `?window=`: 5m,
/// 15m, 30m or 2h), Services, recent events. `recent` keeps each cluster's newest history rows
/// between renders (the dashboard's router owns it).
pub async fn cluster(
    State(state): State<AppState>,
    recent: Recent,
    mut viewer: Viewer,
    Path(cluster): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Response, UiError> {
    viewer
        .caller
        .require(&state, Action::Read, Some(&cluster))
        .await?;
    let view = snapshot(&state, &cluster).await?;
    viewer.shows(&state, &view);
    let c = ClusterDetail {
        summary: summary(&state, &view).await?,
        instances: view.model.instances.clone(),
        services: view.model.services.clone(),
    };
    let kept = recent.get(state.engine.store(), &cluster).await?;
    let rows = &kept.rows;
    let now_ms = crate::store::now_ms();
    let window = Window::from_query(query.as_deref()).map_err(ApiError::BadRequest)?;
    let since_ms = now_ms - window.ms();
    // The rows reach back over the whole span unless the page of them was full first.
    let complete =
        (rows.len() as u32) < recent::ROWS || rows.last().is_some_and(|e| e.at_ms <= since_ms);
    let now_counts: Vec<(String, usize)> = c
        .instances
        .iter()
        .filter(|i| !i.ghost)
        .map(|i| (i.name.clone(), i.owned))
        .collect();
    let load = LoadOverTime::new(&now_counts, rows, window, now_ms, complete);
    let max_load = c
        .instances
        .iter()
        .map(|i| i.owned)
        .max()
        .unwrap_or(0)
        .max(1);
    let paused = state.engine.automation(&cluster).await?;
    let automation_needs =
        super::plan::needs(&state, &viewer.caller, Action::Rebalance, &cluster).await?;
    let on_join = serde_json::to_value(state.engine.cluster(&cluster)?.policy.on_join)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    let base = Base::new(&state, &viewer, format!("Cluster {cluster}"))
        .await
        .for_cluster(&cluster);
    render(&ClusterPage {
        base,
        c,
        max_load,
        events: &kept.lines,
        load,
        demo: demo::panel(&state, &cluster, query.as_deref()),
        on_join,
        paused,
        automation_needs,
    })
}

#[derive(Template)]
#[template(path = "instances.html")]
struct InstancesPage {
    base: Base,
    cluster: String,
    instances: Vec<Instance>,
    /// A gnmic cluster whose `headless_service` is the one gnmic reads its members from
    /// (`{cluster}-gnmic-api`): the endpoint column says whether gnmic counts one.
    gnmic: bool,
}

impl InstancesPage {
    fn age(&self, created: &str) -> String {
        age(self.base.now_ms, created)
    }
}

/// How old a pod created at `created` (RFC 3339) is at `now_ms`.
fn age(now_ms: i64, created: &str) -> String {
    created
        .parse::<jiff::Timestamp>()
        .map(|t| super::page::span(now_ms - t.as_millisecond()))
        .unwrap_or_else(|_| created.to_owned())
}

/// `/clusters/{cluster}/instances`: the replication instances in detail.
pub async fn instances(
    State(state): State<AppState>,
    mut viewer: Viewer,
    Path(cluster): Path<String>,
) -> Result<Response, UiError> {
    viewer
        .caller
        .require(&state, Action::Read, Some(&cluster))
        .await?;
    let view = snapshot(&state, &cluster).await?;
    viewer.shows(&state, &view);
    let base = Base::new(&state, &viewer, format!("Instances of {cluster}"))
        .await
        .for_cluster(&cluster);
    // Only when the Service is the one gnmic reads (`{cluster}-gnmic-api`) does its readiness
    // say whom gnmic counts.
    let spec = state.engine.cluster(&cluster)?;
    let gnmic = spec.protocol == crate::protocol::Protocol::Gnmic
        && spec.headless_service.as_deref() == Some(format!("{cluster}-gnmic-api").as_str());
    render(&InstancesPage {
        base,
        instances: view.model.instances.clone(),
        cluster,
        gnmic,
    })
}

#[derive(Template)]
#[template(path = "instance.html")]
struct InstancePage {
    base: Base,
    cluster: String,
    i: Instance,
    /// The first targets it holds (see `held_total`).
    held: Vec<Target>,
    held_total: usize,
    /// What removing it would do besides draining it.
    removal: RemovalEffects,
    /// Why removing it deserves a second thought.
    warnings: Vec<String>,
    /// Its history told as a story (its newest rows; each event counted whole).
    history: Vec<Line>,
}

impl InstancePage {
    fn age(&self, created: &str) -> String {
        age(self.base.now_ms, created)
    }
}

/// Targets listed on an instance's page (the rest are a link away).
const INSTANCE_TARGETS: usize = 50;
/// History entries on an instance's page.
const INSTANCE_HISTORY: u32 = 50;

/// `/clusters/{cluster}/instances/{instance}`: one member — its pod, heartbeat, targets and
/// history, and what Remove and Uncordon would do here.
pub async fn instance(
    State(state): State<AppState>,
    mut viewer: Viewer,
    Path((cluster, instance)): Path<(String, String)>,
) -> Result<Response, UiError> {
    viewer
        .caller
        .require(&state, Action::Read, Some(&cluster))
        .await?;
    let view = snapshot(&state, &cluster).await?;
    viewer.shows(&state, &view);
    let model = &view.model;
    let Some(i) = model.instance(&instance).cloned() else {
        return Err(ApiError::NotFound(format!(
            "cluster {cluster:?} has no instance {instance:?}"
        ))
        .into());
    };
    let mine = model
        .targets
        .iter()
        .filter(|t| t.owner.as_deref() == Some(instance.as_str()));
    let held_total = mine.clone().count();
    let held: Vec<Target> = mine.take(INSTANCE_TARGETS).cloned().collect();
    let removal = state.engine.removal_effects(&cluster, model, &instance)?;
    // The same warnings as the removal's plan (the engine's one list).
    let warnings: Vec<String> = crate::engine::warnings::removal(model, &instance)
        .into_iter()
        .map(|w| w.message)
        .collect();
    let store = state.engine.store();
    let query = HistoryQuery {
        cluster: Some(cluster.clone()),
        instance: Some(instance.clone()),
        limit: INSTANCE_HISTORY,
        ..Default::default()
    };
    let rows = store.history(&query).await?.items;
    // Each event counted whole (as this instance has it), not just its rows on this page.
    let history = story::tell(store, &query, rows, usize::MAX).await?;
    let base = Base::new(&state, &viewer, format!("{instance} in {cluster}"))
        .await
        .for_cluster(&cluster);
    render(&InstancePage {
        base,
        cluster,
        i,
        held,
        held_total,
        removal,
        warnings,
        history,
    })
}

#[derive(Template)]
#[template(path = "remove.html")]
struct RemovePage {
    base: Base,
    cluster: String,
    instance: String,
    plan: PlanView,
    /// Why the plan shown is not the one the user tried to start.
    changed: Option<String>,
}

/// The removal form: the id of the drain plan shown.
#[derive(Debug, Default, serde::Deserialize)]
pub struct RemoveForm {
    #[serde(default)]
    plan_id: String,
}

/// The drain plan of removing an instance, with the button that starts it (for a viewer who
/// may not start it, read-only, saying what it would need).
pub async fn remove_preview(
    State(state): State<AppState>,
    viewer: Viewer,
    Path((cluster, instance)): Path<(String, String)>,
) -> Result<Response, UiError> {
    let plan = super::plan::remove_preview(&state, &viewer.caller, &cluster, &instance).await?;
    let base = Base::new(&state, &viewer, format!("Remove {instance}"))
        .await
        .for_cluster(&cluster);
    render(&RemovePage {
        base,
        cluster,
        instance,
        plan,
        changed: None,
    })
}

/// Starts the removal and shows its operation.
pub async fn remove(
    State(state): State<AppState>,
    viewer: Viewer,
    Path((cluster, instance)): Path<(String, String)>,
    Form(f): Form<RemoveForm>,
) -> Result<Response, UiError> {
    let plan_id = Some(f.plan_id.trim()).filter(|p| !p.is_empty());
    match actions::remove(&state, &viewer.caller, &cluster, &instance, plan_id).await {
        Ok(op) => Ok(see_other(&super::operation_href(&op.id))),
        // Not what was shown: show the fresh drain plan instead, to review and start.
        Err(ApiError::PlanChanged { detail, fresh }) => {
            let base = Base::new(&state, &viewer, format!("Remove {instance}"))
                .await
                .for_cluster(&cluster);
            let page = RemovePage {
                base,
                cluster,
                instance,
                plan: (*fresh).into(),
                changed: Some(detail),
            };
            Ok(super::operations::conflict(render(&page)?))
        }
        Err(e) => Err(e.into()),
    }
}

/// The uncordon confirmation page: what uncordoning `instance` would set off.
#[derive(Template)]
#[template(path = "uncordon.html")]
struct UncordonPage {
    base: Base,
    cluster: String,
    instance: String,
    cordoned: bool,
    then: String,
    plan: PlanView,
}

/// What uncordoning an instance would do (the join policy's rebalance, proposed or started, or
/// nothing), with the button that does it (for a viewer who may not, read-only).
pub async fn uncordon_preview(
    State(state): State<AppState>,
    viewer: Viewer,
    Path((cluster, instance)): Path<(String, String)>,
) -> Result<Response, UiError> {
    let v = super::plan::uncordon_preview(&state, &viewer.caller, &cluster, &instance).await?;
    let base = Base::new(&state, &viewer, format!("Uncordon {instance}"))
        .await
        .for_cluster(&cluster);
    render(&UncordonPage {
        base,
        cluster,
        instance,
        cordoned: v.cordoned,
        then: v.then,
        plan: v.plan,
    })
}

/// Uncordons an instance and goes back to the instance list.
pub async fn uncordon(
    State(state): State<AppState>,
    viewer: Viewer,
    Path((cluster, instance)): Path<(String, String)>,
) -> Result<Response, UiError> {
    actions::uncordon(&state, &viewer.caller, &cluster, &instance).await?;
    Ok(see_other(&format!(
        "/clusters/{}/instances",
        super::segment(&cluster)
    )))
}
