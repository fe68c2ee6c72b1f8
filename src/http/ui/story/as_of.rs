//! `/clusters/{cluster}/as-of?t=…`: a cluster as its history recorded it at one moment — each
//! target's holder then (its last ownership change at or before it), each instance's last
//! event, cordon and leadership then, the operations under way — with how many targets each
//! member held, and plainly what it cannot know: it is reconstructed from history, which does
//! not record liveness, and knows nothing of a target that had not moved since history began
//! or whose changes retention pruned. Linked from the history page (each line's time, and a
//! range's end). The API's `GET /api/v1/clusters/{cluster}/as-of` answers the same.
//!
//! It must not: show a live state (`owned`, `expired`…) for the past: only what history
//! recorded (held, released, not recorded).

use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;

use super::super::page::{Base, Millis, UiError, Viewer, render};
use super::page::moment;
use crate::http::api::clusters::snapshot;
use crate::http::auth::Action;
use crate::http::state::AppState;
use crate::model::{Cause, InstanceEventKind};
use crate::store::now_ms;

/// Targets listed on the page at most (the API lists them all).
const TARGETS_SHOWN: usize = 1000;

/// The moment as the form sends it.
#[derive(Debug, Default, Deserialize)]
pub struct AsOfForm {
    #[serde(default)]
    t: String,
}

/// One target then.
pub struct TargetRow {
    pub target: String,
    pub holder: Option<String>,
    /// `held`, `released` or `not recorded`.
    pub state: &'static str,
    pub since_ms: Option<i64>,
    pub cause: Option<Cause>,
    pub operation: Option<String>,
}

/// One instance then.
pub struct InstanceRow {
    pub instance: String,
    pub presence: Option<(InstanceEventKind, i64)>,
    pub cordoned: bool,
    pub leader: bool,
    /// Targets it held then.
    pub holds: usize,
}

/// An operation under way then.
pub struct OperationRow {
    pub id: String,
    /// Its last step then, in words.
    pub step: String,
    pub since_ms: i64,
}

#[derive(Template)]
#[template(path = "as_of.html")]
struct AsOfPage {
    base: Base,
    cluster: String,
    /// The form's value (UTC, `datetime-local`), or what was given when unread.
    t_value: String,
    problem: Option<String>,
    /// The moment, once read.
    at_ms: i64,
    /// When the oldest history the cluster still has was seen.
    kept_from_ms: Option<i64>,
    /// Held targets per holder, most first.
    holders: Vec<(String, usize)>,
    released: usize,
    not_recorded: usize,
    total: usize,
    instances: Vec<InstanceRow>,
    operations: Vec<OperationRow>,
    /// The first [`TARGETS_SHOWN`] targets, by key.
    targets: Vec<TargetRow>,
}

impl AsOfPage {
    fn history_href(&self) -> String {
        let t = jiff::Timestamp::from_millisecond(self.at_ms + 1)
            .map(|t| t.to_string())
            .unwrap_or_default();
        let mut q = form_urlencoded::Serializer::new(String::new());
        q.append_pair("cluster", &self.cluster);
        q.append_pair("to", &t);
        format!("/history?{}", q.finish())
    }

    fn api_href(&self) -> String {
        let t = jiff::Timestamp::from_millisecond(self.at_ms)
            .map(|t| t.to_string())
            .unwrap_or_default();
        format!(
            "/api/v1/clusters/{}/as-of?at={}",
            super::super::segment(&self.cluster),
            form_urlencoded::byte_serialize(t.as_bytes()).collect::<String>()
        )
    }

    /// The page at `at_ms`.
    fn at(&self, at_ms: impl Millis) -> String {
        super::as_of_href(&self.cluster, at_ms.ms()).unwrap_or_default()
    }

    fn before_history(&self) -> bool {
        self.kept_from_ms.is_none_or(|k| self.at_ms < k)
    }
}

/// `/clusters/{cluster}/as-of`.
pub async fn as_of(
    State(state): State<AppState>,
    viewer: Viewer,
    Path(cluster): Path<String>,
    Query(form): Query<AsOfForm>,
) -> Result<Response, UiError> {
    viewer
        .caller
        .require(&state, Action::Read, Some(&cluster))
        .await?;
    let snap = snapshot(&state, &cluster).await?;
    let base = Base::new(&state, &viewer, format!("{cluster} as it was"))
        .await
        .for_cluster(&cluster);
    let mut page = AsOfPage {
        base,
        cluster: cluster.clone(),
        t_value: form.t.clone(),
        problem: None,
        at_ms: 0,
        kept_from_ms: None,
        holders: Vec::new(),
        released: 0,
        not_recorded: 0,
        total: 0,
        instances: Vec::new(),
        operations: Vec::new(),
        targets: Vec::new(),
    };
    let at_ms = match moment(&form.t) {
        Ok(t) => t.unwrap_or_else(now_ms),
        Err(e) => {
            page.problem = Some(format!("Time: {e}"));
            let mut res = render(&page)?;
            *res.status_mut() = StatusCode::BAD_REQUEST;
            return Ok(res);
        }
    };
    page.at_ms = at_ms;
    page.t_value = jiff::Timestamp::from_millisecond(at_ms)
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%S").to_string())
        .unwrap_or_default();
    let past = state.engine.store().as_of(&cluster, at_ms).await?;
    page.kept_from_ms = past.kept_from_ms;
    let targets = past.targets_with(snap.model.targets.iter().map(|t| &*t.key));
    page.total = targets.len();
    let mut holders: std::collections::BTreeMap<&str, usize> = Default::default();
    for t in &targets {
        match t.holder() {
            Some(h) => *holders.entry(h).or_default() += 1,
            None if t.last.is_some() => page.released += 1,
            None => page.not_recorded += 1,
        }
    }
    page.holders = holders.iter().map(|(h, n)| ((*h).to_owned(), *n)).collect();
    page.holders
        .sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    page.instances = past
        .instances()
        .into_iter()
        .map(|i| InstanceRow {
            holds: holders.get(i.instance.as_str()).copied().unwrap_or(0),
            instance: i.instance,
            presence: i.presence,
            cordoned: i.cordoned,
            leader: i.leader,
        })
        .collect();
    page.operations = past
        .operations
        .iter()
        .filter(|e| {
            e.event
                .as_deref()
                .and_then(|s| s.parse::<crate::model::OperationState>().ok())
                .is_none_or(|s| !s.is_final())
        })
        .filter_map(|e| {
            Some(OperationRow {
                id: e.operation.clone()?,
                step: e.step(),
                since_ms: e.at_ms,
            })
        })
        .collect();
    page.targets = targets
        .iter()
        .take(TARGETS_SHOWN)
        .map(|t| {
            let last = t.last.as_ref();
            TargetRow {
                target: t.target.clone(),
                holder: t.holder().map(str::to_owned),
                state: match t.state() {
                    "held" => "held",
                    "released" => "released",
                    _ => "not recorded",
                },
                since_ms: last.map(|e| e.at_ms),
                cause: last.and_then(|e| e.cause),
                operation: last.and_then(|e| e.operation.clone()),
            }
        })
        .collect();
    render(&page)
}
