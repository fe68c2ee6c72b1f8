//! Rebalance (preview, then start), the operation list, one operation with its moves and live
//! progress (approve a proposed one, cancel), and the history.

use std::str::FromStr;

use askama::Template;
use axum::Form;
use axum::extract::{Path, Query, State};
use axum::response::Response;
use serde::Deserialize;

use super::charts::{GapHistogram, LoadChart};
use super::page::{Base, Choice, UiError, Viewer, choices, render, see_other};
use super::plan::PlanView;
use crate::http::actions;
use crate::http::auth::Action;
use crate::http::error::ApiError;
use crate::http::state::AppState;
use crate::model::{OperationKind, OperationState};
use crate::store::{HistoryKind, HistoryQuery, Operation, OperationQuery, OperationSummary, Page};

/// Rows per page of the operation list and the history.
const PAGE: u32 = 50;

/// The rebalance form (preview and start).
#[derive(Debug, Default, Deserialize)]
pub struct RebalanceForm {
    #[serde(default)]
    max_moves: String,
    #[serde(default)]
    reason: String,
    /// Starting: the id of the plan shown.
    #[serde(default)]
    plan_id: String,
}

impl RebalanceForm {
    fn budget(&self) -> Result<Option<usize>, ApiError> {
        match self.max_moves.trim() {
            "" => Ok(None),
            n => n
                .parse::<usize>()
                .ok()
                .filter(|n| *n > 0)
                .map(Some)
                .ok_or_else(|| {
                    ApiError::BadRequest(format!("max moves must be a positive number, not {n:?}"))
                }),
        }
    }
}

#[derive(Template)]
#[template(path = "rebalance.html")]
struct RebalancePage {
    base: Base,
    cluster: String,
    max_moves: String,
    plan: PlanView,
    /// Why the plan shown is not the one the user tried to start.
    changed: Option<String>,
}

/// `/clusters/{cluster}/rebalance`: the plan, with the form that starts it (for a viewer who
/// may not start it, read-only, saying what it would need).
pub async fn rebalance_preview(
    State(state): State<AppState>,
    viewer: Viewer,
    Path(cluster): Path<String>,
    Query(f): Query<RebalanceForm>,
) -> Result<Response, UiError> {
    let plan =
        super::plan::rebalance_preview(&state, &viewer.caller, &cluster, f.budget()?).await?;
    let base = Base::new(&state, &viewer, format!("Rebalance {cluster}"))
        .await
        .for_cluster(&cluster);
    render(&RebalancePage {
        base,
        cluster,
        max_moves: f.max_moves.trim().to_owned(),
        plan,
        changed: None,
    })
}

/// Starts the rebalance and shows its operation.
pub async fn rebalance(
    State(state): State<AppState>,
    viewer: Viewer,
    Path(cluster): Path<String>,
    Form(f): Form<RebalanceForm>,
) -> Result<Response, UiError> {
    let reason = match f.reason.trim() {
        "" => "requested in the dashboard",
        r => r,
    };
    let plan_id = Some(f.plan_id.trim()).filter(|p| !p.is_empty());
    let started = actions::run_rebalance(
        &state,
        &viewer.caller,
        &cluster,
        f.budget()?,
        plan_id,
        reason,
    )
    .await;
    match started {
        Ok(actions::Run::Started(op)) => Ok(see_other(&super::operation_href(&op.id))),
        // Nothing to move: no operation is recorded; the page says so.
        Ok(actions::Run::NothingToMove(plan)) => {
            let base = Base::new(&state, &viewer, format!("Rebalance {cluster}"))
                .await
                .for_cluster(&cluster);
            render(&RebalancePage {
                base,
                cluster,
                max_moves: f.max_moves.trim().to_owned(),
                plan: plan.into(),
                changed: Some(
                    "Nothing to move: the plan has no move, so nothing was started and no \
                     operation recorded."
                        .into(),
                ),
            })
        }
        // Not what was shown: show the fresh plan instead, to review and start.
        Err(ApiError::PlanChanged { detail, fresh }) => {
            let base = Base::new(&state, &viewer, format!("Rebalance {cluster}"))
                .await
                .for_cluster(&cluster);
            let page = RebalancePage {
                base,
                cluster,
                max_moves: f.max_moves.trim().to_owned(),
                plan: (*fresh).into(),
                changed: Some(detail),
            };
            Ok(conflict(render(&page)?))
        }
        Err(e) => Err(e.into()),
    }
}

/// `page` with the status 409: what the user asked for was refused, and the page says why.
pub(super) fn conflict(mut page: Response) -> Response {
    *page.status_mut() = axum::http::StatusCode::CONFLICT;
    page
}

/// The operation list's filters as a form sends them.
#[derive(Debug, Default, Deserialize)]
pub struct OperationsQuery {
    #[serde(default)]
    cluster: String,
    #[serde(default)]
    state: String,
    #[serde(default)]
    kind: String,
    cursor: Option<String>,
}

#[derive(Template)]
#[template(path = "operations.html")]
struct OperationsPage {
    base: Base,
    cluster: String,
    state: String,
    kind: String,
    clusters: Vec<Choice>,
    states: Vec<Choice>,
    kinds: Vec<Choice>,
    page: Page<OperationSummary>,
}

impl OperationsPage {
    fn next(&self, cursor: &str) -> String {
        let mut q = form_urlencoded::Serializer::new(String::new());
        for (k, v) in [
            ("cluster", &self.cluster),
            ("state", &self.state),
            ("kind", &self.kind),
        ] {
            if !v.is_empty() {
                q.append_pair(k, v);
            }
        }
        q.append_pair("cursor", cursor);
        format!("/operations?{}", q.finish())
    }
}

fn word<T: FromStr<Err = crate::model::UnknownWord>>(s: &str) -> Result<Option<T>, ApiError> {
    match s {
        "" => Ok(None),
        s => s
            .parse()
            .map(Some)
            .map_err(|e: crate::model::UnknownWord| ApiError::BadRequest(e.to_string())),
    }
}

/// `/operations`.
pub async fn list(
    State(state): State<AppState>,
    viewer: Viewer,
    Query(q): Query<OperationsQuery>,
) -> Result<Response, UiError> {
    viewer.caller.require(&state, Action::Read, None).await?;
    let page = state
        .engine
        .store()
        .operations(&OperationQuery {
            cluster: Some(q.cluster.clone()).filter(|c| !c.is_empty()),
            state: word(&q.state)?,
            kind: word(&q.kind)?,
            cursor: q.cursor.filter(|c| !c.is_empty()),
            limit: PAGE,
        })
        .await?;
    let mut base = Base::new(&state, &viewer, "Operations").await;
    let base_clusters = base.clusters.clone();
    base.nav = "operations";
    base.cluster = q.cluster.clone();
    render(&OperationsPage {
        base,
        clusters: choices(&base_clusters, &q.cluster),
        states: choices(OperationState::ALL.iter().map(|s| s.as_str()), &q.state),
        kinds: choices(OperationKind::ALL.iter().map(|k| k.as_str()), &q.kind),
        cluster: q.cluster,
        state: q.state,
        kind: q.kind,
        page,
    })
}

#[derive(Template)]
#[template(path = "operation.html")]
struct OperationPage {
    base: Base,
    op: Operation,
    done: usize,
    failed: usize,
    total: usize,
    cancellable: bool,
    approvable: bool,
    /// What cancelling and approving need when the viewer may not (shown instead of buttons).
    cancel_needs: Option<String>,
    approve_needs: Option<String>,
    /// Targets per instance before and after, as planned.
    chart: Option<LoadChart>,
    /// The handoff gaps of the moves it made, from history.
    gaps: Option<GapHistogram>,
}

/// The most moves of an operation whose gaps its page counts.
const OPERATION_GAPS: u32 = 1_000;

/// The planned load per instance an operation keeps in its parameters (`load`), if any.
fn planned_load(op: &Operation) -> Option<LoadChart> {
    let rows = op.params.get("load")?.as_array()?;
    let loads: Vec<(String, usize, usize)> = rows
        .iter()
        .filter_map(|r| {
            let n = |k: &str| r.get(k)?.as_u64().map(|n| n as usize);
            Some((
                r.get("member")?.as_str()?.to_owned(),
                n("before")?,
                n("after")?,
            ))
        })
        .collect();
    (!loads.is_empty()).then(|| LoadChart::new(loads))
}

/// `/operations/{id}`: one operation, its moves, live.
pub async fn one(
    State(state): State<AppState>,
    viewer: Viewer,
    Path(id): Path<String>,
) -> Result<Response, UiError> {
    viewer.caller.require(&state, Action::Read, None).await?;
    let op = state.engine.operation(&id).await.map_err(ApiError::from)?;
    let count = |s: &str| op.moves.iter().filter(|m| m.state.as_str() == s).count();
    let (done, failed) = (count("done"), count("failed"));
    let moves = state
        .engine
        .store()
        .history(&HistoryQuery {
            cluster: Some(op.cluster.clone()),
            operation: Some(op.id.clone()),
            kind: Some(HistoryKind::Ownership),
            limit: OPERATION_GAPS,
            ..Default::default()
        })
        .await?
        .items;
    let gaps: Vec<i64> = moves.iter().filter_map(|e| e.gap_ms).collect();
    let needs = |action| super::plan::needs(&state, &viewer.caller, action, &op.cluster);
    let cancel_needs = needs(Action::CancelOperation).await?;
    // Approving runs a proposed rebalance: the right to rebalance (as `actions::approve`).
    let approve_needs = needs(Action::Rebalance).await?;
    let mut base = Base::new(&state, &viewer, format!("Operation {}", op.kind)).await;
    base.nav = "operations";
    base.operation = op.id.clone();
    render(&OperationPage {
        base,
        done,
        failed,
        total: op.moves.len(),
        cancellable: !op.state.is_final(),
        approvable: op.state == OperationState::Proposed,
        cancel_needs,
        approve_needs,
        chart: planned_load(&op),
        gaps: GapHistogram::new(&gaps),
        op,
    })
}

/// Approves a proposed operation and shows it again (a proposal that no longer fits is an
/// error page saying why).
pub async fn approve(
    State(state): State<AppState>,
    viewer: Viewer,
    Path(id): Path<String>,
) -> Result<Response, UiError> {
    let op = actions::approve(&state, &viewer.caller, &id).await?;
    Ok(see_other(&super::operation_href(&op.id)))
}

/// The pause/resume form of the cluster page.
#[derive(Debug, Deserialize)]
pub struct AutomationForm {
    /// `true` pauses, `false` resumes.
    paused: bool,
    #[serde(default)]
    reason: String,
}

/// Pauses or resumes a cluster's automatic rebalancing and shows the cluster again.
pub async fn automation(
    State(state): State<AppState>,
    viewer: Viewer,
    Path(cluster): Path<String>,
    Form(f): Form<AutomationForm>,
) -> Result<Response, UiError> {
    let reason = match f.reason.trim() {
        "" if f.paused => "paused in the dashboard",
        "" => "resumed in the dashboard",
        r => r,
    };
    actions::set_automation(&state, &viewer.caller, &cluster, f.paused, reason).await?;
    Ok(see_other(&format!(
        "/clusters/{}",
        form_urlencoded::byte_serialize(cluster.as_bytes()).collect::<String>()
    )))
}

/// Cancels an operation and shows it again.
pub async fn cancel(
    State(state): State<AppState>,
    viewer: Viewer,
    Path(id): Path<String>,
) -> Result<Response, UiError> {
    let op = actions::cancel(&state, &viewer.caller, &id).await?;
    Ok(see_other(&super::operation_href(&op.id)))
}
