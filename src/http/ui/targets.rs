//! The target list (search by key, filter by owner and state, cursor pages that start with a
//! binary search, so page 500 of 50,000 targets costs what page 1 does) and one target with its
//! ownership timeline.

use askama::Template;
use axum::extract::{Path, Query, State};
use axum::response::Response;
use serde::Deserialize;

use super::charts::Timeline;
use super::page::{Base, Choice, UiError, Viewer, choices, render};
use crate::http::api::clusters::{TargetDetail, TargetFilter, TargetPage, page, snapshot};
use crate::http::auth::Action;
use crate::http::error::ApiError;
use crate::http::state::AppState;
use crate::k8s::model::TargetState;
use crate::store::{HistoryKind, HistoryQuery};

/// Targets per page.
const PAGE: u32 = 50;

/// The list's query as a form sends it (empty fields mean "any").
#[derive(Debug, Default, Deserialize)]
pub struct ListQuery {
    #[serde(default)]
    q: String,
    #[serde(default)]
    owner: String,
    #[serde(default)]
    state: String,
    cursor: Option<String>,
}

#[derive(Template)]
#[template(path = "targets.html")]
struct TargetsPage {
    base: Base,
    cluster: String,
    q: String,
    owner: String,
    state: String,
    owners: Vec<Choice>,
    states: Vec<Choice>,
    filtered: bool,
    page: TargetPage,
}

impl TargetsPage {
    fn state_word(&self, s: &TargetState) -> &'static str {
        s.as_str()
    }

    fn state_class(&self, s: &TargetState) -> &'static str {
        match s {
            TargetState::Owned => "ok",
            TargetState::Moving => "info",
            TargetState::Unassigned | TargetState::Expired => "warn",
            TargetState::Unworked | TargetState::Orphaned => "bad",
        }
    }

    /// This list's URL with the same filters, at `cursor`.
    fn href(&self, cursor: Option<&String>) -> String {
        let mut q = form_urlencoded::Serializer::new(String::new());
        for (k, v) in [
            ("q", &self.q),
            ("owner", &self.owner),
            ("state", &self.state),
        ] {
            if !v.is_empty() {
                q.append_pair(k, v);
            }
        }
        if let Some(c) = cursor {
            q.append_pair("cursor", c);
        }
        format!(
            "/clusters/{}/targets?{}",
            super::segment(&self.cluster),
            q.finish()
        )
    }
}

/// `/clusters/{cluster}/targets`.
pub async fn list(
    State(state): State<AppState>,
    mut viewer: Viewer,
    Path(cluster): Path<String>,
    Query(lq): Query<ListQuery>,
) -> Result<Response, UiError> {
    viewer
        .caller
        .require(&state, Action::Read, Some(&cluster))
        .await?;
    let view = snapshot(&state, &cluster).await?;
    viewer.shows(&state, &view);
    let target_state = match lq.state.as_str() {
        "" => None,
        s => Some(
            TargetState::ALL
                .into_iter()
                .find(|t| t.as_str() == s)
                .ok_or_else(|| ApiError::BadRequest(format!("no target state {s:?}")))?,
        ),
    };
    let filter = TargetFilter {
        owner: Some(lq.owner.clone()).filter(|o| !o.is_empty()),
        state: target_state,
        q: Some(lq.q.clone()).filter(|q| !q.is_empty()),
        cursor: lq.cursor.clone().filter(|c| !c.is_empty()),
        limit: Some(PAGE),
    };
    let result = page(&view.model, &filter)?;
    let owners = choices(view.model.instances.iter().map(|i| &i.name), &lq.owner);
    let states = choices(TargetState::ALL.iter().map(|s| s.as_str()), &lq.state);
    let base = Base::new(&state, &viewer, format!("Targets of {cluster}"))
        .await
        .for_cluster(&cluster);
    render(&TargetsPage {
        base,
        filtered: filter.owner.is_some() || filter.state.is_some() || filter.q.is_some(),
        cluster,
        q: lq.q,
        owner: lq.owner,
        state: lq.state,
        owners,
        states,
        page: result,
    })
}

#[derive(Template)]
#[template(path = "target.html")]
struct TargetView {
    base: Base,
    cluster: String,
    state: &'static str,
    t: TargetDetail,
    /// Its history as a picture.
    timeline: Option<Timeline>,
}

/// Entries on a target's timeline.
const TIMELINE: u32 = 50;

/// `/clusters/{cluster}/targets/{target}`: one target and its ownership timeline.
pub async fn one(
    State(state): State<AppState>,
    mut viewer: Viewer,
    Path((cluster, target)): Path<(String, String)>,
) -> Result<Response, UiError> {
    viewer
        .caller
        .require(&state, Action::Read, Some(&cluster))
        .await?;
    let view = snapshot(&state, &cluster).await?;
    viewer.shows(&state, &view);
    let t = view.model.target(&target).cloned().ok_or_else(|| {
        ApiError::NotFound(format!("cluster {cluster:?} has no target {target:?}"))
    })?;
    let history = state
        .engine
        .store()
        .history(&HistoryQuery {
            cluster: Some(cluster.clone()),
            target: Some(target.clone()),
            limit: TIMELINE,
            ..Default::default()
        })
        .await?
        .items;
    let base = Base::new(&state, &viewer, format!("Target {target}"))
        .await
        .for_cluster(&cluster);
    let timeline = Timeline::new(&history, base.now_ms);
    render(&TargetView {
        base,
        timeline,
        state: t.state.as_str(),
        cluster,
        t: TargetDetail { target: t, history },
    })
}
