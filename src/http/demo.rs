//! Demo-only controls (`leasehold demo`): add a member, stop one gracefully, crash one, so a
//! visitor sees failover, rebalance and removal. The HTTP side only sends a [`DemoAction`] to
//! the demo's own task and waits for its [`Answer`]; nothing outside the demo creates
//! [`DemoControls`], and the routes ([`router`]) are only mounted when the state has them, so
//! `leasehold serve` has neither. They are not part of `/api/v1` nor of the OpenAPI document.
//! CSRF for the dashboard's form posts is checked by middleware, not here.
//!
//! The cluster page's demo section (`templates/_demo.html`) offers each member only what
//! applies to it, from what the demo task publishes of its members ([`MemberState`]) and the
//! member's pod and heartbeat; and after a form post it says what was done. The 303 carries
//! that as a known [`Outcome`] key and a member name (`?demo=added&member=c-3`), checked when
//! the page is rendered, never as text. The cluster page's handler gets its [`DemoPanel`] from
//! [`panel`].

use std::collections::BTreeMap;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use tokio::sync::{mpsc, oneshot, watch};

use super::api::audit;
use super::auth::Action;
use super::caller::Caller;
use super::error::ApiError;
use super::state::AppState;
use crate::k8s::model::{Instance, Liveness};

/// What a visitor may do to the demo's simulated cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DemoAction {
    /// Start one more member pod with its agent.
    AddMember {
        /// Cluster.
        cluster: String,
    },
    /// Stop a member's agent gracefully (it releases its targets), then delete its pod.
    StopMember {
        /// Cluster.
        cluster: String,
        /// Member (pod name).
        instance: String,
    },
    /// Kill a member's agent without releasing anything; its pod turns unready (a crash).
    CrashMember {
        /// Cluster.
        cluster: String,
        /// Member (pod name).
        instance: String,
    },
}

impl DemoAction {
    /// The cluster it concerns.
    pub fn cluster(&self) -> &str {
        match self {
            DemoAction::AddMember { cluster }
            | DemoAction::StopMember { cluster, .. }
            | DemoAction::CrashMember { cluster, .. } => cluster,
        }
    }

    /// What it is, for the audit entry.
    pub fn describe(&self) -> String {
        match self {
            DemoAction::AddMember { .. } => "demo: add a member".into(),
            DemoAction::StopMember { instance, .. } => format!("demo: stop member {instance}"),
            DemoAction::CrashMember { instance, .. } => format!("demo: crash member {instance}"),
        }
    }
}

/// What a demo control did, or why it did nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A member was added (its pod and agent started).
    Added,
    /// No member was added: creating its pod failed.
    AddFailed,
    /// A member stopped gracefully (it handed its targets over, then exited); its pod is deleted.
    Stopped,
    /// A member did not finish handing its targets over in time and was killed; its pod is
    /// deleted.
    Killed,
    /// A crashed member's failed pod was deleted.
    PodDeleted,
    /// Nothing stopped: the member is not running.
    StopRefused,
    /// A member's agent stopped, but deleting its pod failed.
    StopFailed,
    /// A member crashed: its agent died holding its targets, its pod failed.
    Crashed,
    /// Nothing crashed: the member is not running.
    CrashRefused,
    /// Nothing crashed: the member has crashed already.
    AlreadyCrashed,
    /// A member's agent was killed, but marking its pod failed did not work.
    CrashFailed,
    /// Nothing: the demo has no such cluster.
    NoCluster,
}

/// Each [`Outcome`] and its key in the 303's query.
const OUTCOME_KEYS: [(Outcome, &str); 12] = [
    (Outcome::Added, "added"),
    (Outcome::AddFailed, "add-failed"),
    (Outcome::Stopped, "stopped"),
    (Outcome::Killed, "killed"),
    (Outcome::PodDeleted, "pod-deleted"),
    (Outcome::StopRefused, "stop-refused"),
    (Outcome::StopFailed, "stop-failed"),
    (Outcome::Crashed, "crashed"),
    (Outcome::CrashRefused, "crash-refused"),
    (Outcome::AlreadyCrashed, "already-crashed"),
    (Outcome::CrashFailed, "crash-failed"),
    (Outcome::NoCluster, "no-cluster"),
];

impl Outcome {
    /// Its key in the query of the page a form post lands on.
    pub fn key(self) -> &'static str {
        OUTCOME_KEYS
            .iter()
            .find(|(o, _)| *o == self)
            .map_or("", |(_, k)| k)
    }

    /// The outcome with this key.
    pub fn from_key(key: &str) -> Option<Outcome> {
        OUTCOME_KEYS
            .iter()
            .find(|(_, k)| *k == key)
            .map(|(o, _)| *o)
    }

    /// Whether the control did what it was asked (the others are refusals or failures,
    /// answered as a 400 problem to the API).
    pub fn done(self) -> bool {
        matches!(
            self,
            Outcome::Added
                | Outcome::Stopped
                | Outcome::Killed
                | Outcome::PodDeleted
                | Outcome::Crashed
        )
    }

    /// What the page says, about `member` (which every outcome but the add's failure and
    /// the unknown cluster needs).
    fn words(self, member: Option<&str>) -> Option<String> {
        Some(match (self, member) {
            (Outcome::AddFailed, _) => {
                "Could not add a member: creating its pod failed.".to_owned()
            }
            (Outcome::NoCluster, _) => "Did nothing: the demo has no such cluster.".to_owned(),
            (_, None) => return None,
            (Outcome::Added, Some(m)) => format!(
                "Added member {m}: its pod and agent started; once membership settles, a \
                 rebalance giving it a share of the targets is proposed (the demo's \
                 on_join: propose): review and approve it from this page."
            ),
            (Outcome::Stopped, Some(m)) => format!(
                "Stopped {m} gracefully (as SIGTERM would): it handed its targets over to the \
                 other members, then exited, and its pod is deleted."
            ),
            (Outcome::Killed, Some(m)) => format!(
                "Stopped {m}, but it did not finish handing its targets over in time, so it was \
                 killed (as SIGKILL would) and its pod deleted; what it still held fails over \
                 once its member Lease expires."
            ),
            (Outcome::PodDeleted, Some(m)) => {
                format!("Deleted the failed pod of {m}, which had crashed.")
            }
            (Outcome::StopRefused, Some(m)) => {
                format!("Did not stop {m}: it is not a running member of this cluster.")
            }
            (Outcome::StopFailed, Some(m)) => {
                format!("Stopped {m}'s agent, but deleting its pod failed.")
            }
            (Outcome::Crashed, Some(m)) => format!(
                "Crashed {m} (as SIGKILL would): its agent died holding its targets and its pod \
                 failed; they fail over to the other members once its member Lease expires, \
                 about one lease duration from now."
            ),
            (Outcome::CrashRefused, Some(m)) => {
                format!("Did not crash {m}: it is not a running member of this cluster.")
            }
            (Outcome::AlreadyCrashed, Some(m)) => {
                format!("Did not crash {m}: it has crashed already.")
            }
            (Outcome::CrashFailed, Some(m)) => {
                format!("Killed {m}'s agent, but marking its pod failed did not work.")
            }
        })
    }
}

/// The demo task's answer to a [`DemoRequest`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// What it did, or why not.
    pub outcome: Outcome,
    /// The member it concerns (for an add, the new one), when there is one.
    pub member: Option<String>,
    /// The same for people: the JSON answer's `message`, or the refusal's problem detail.
    pub message: String,
}

impl Answer {
    /// An answer about `member`.
    pub fn about(outcome: Outcome, member: &str, message: impl Into<String>) -> Answer {
        Answer {
            outcome,
            member: Some(member.to_owned()),
            message: message.into(),
        }
    }
}

/// One request to the demo task, with where to send its answer.
#[derive(Debug)]
pub struct DemoRequest {
    /// What to do.
    pub action: DemoAction,
    /// The outcome: what was done, or why not.
    pub reply: oneshot::Sender<Answer>,
}

/// What the demo task is doing with one of its members.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberState {
    /// Its agent runs.
    Running,
    /// Asked to stop: its agent is handing its targets over before it exits.
    Stopping,
    /// Its agent was killed holding its targets and its pod failed (the pod stays until the
    /// member is stopped).
    Crashed,
    /// Its agent has ended and its pod is deleted (or being deleted).
    Stopped,
}

/// The demo's members as its task last published them: cluster → member → state.
pub type MemberStates = BTreeMap<String, BTreeMap<String, MemberState>>;

/// The HTTP side's handle on the demo task.
#[derive(Debug, Clone)]
pub struct DemoControls {
    tx: mpsc::Sender<DemoRequest>,
    members: watch::Receiver<MemberStates>,
}

/// The demo task's side of [`DemoControls`]: the requests to serve, and where to publish its
/// members' states.
#[derive(Debug)]
pub struct DemoInbox {
    /// The requests, in order.
    pub requests: mpsc::Receiver<DemoRequest>,
    /// Its members' states, for the dashboard.
    pub members: watch::Sender<MemberStates>,
}

impl DemoControls {
    /// A handle and the inbox the demo task serves.
    pub fn channel() -> (DemoControls, DemoInbox) {
        let (tx, requests) = mpsc::channel(16);
        let (members_tx, members) = watch::channel(MemberStates::new());
        let inbox = DemoInbox {
            requests,
            members: members_tx,
        };
        (DemoControls { tx, members }, inbox)
    }

    /// Asks the demo task to do `action` and waits for its answer.
    pub async fn send(&self, action: DemoAction) -> Result<Answer, ApiError> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .send(DemoRequest { action, reply })
            .await
            .map_err(|_| ApiError::Unavailable("the demo has stopped".into()))?;
        answer
            .await
            .map_err(|_| ApiError::Unavailable("the demo has stopped".into()))
    }

    /// `cluster`'s members as the demo task last published them.
    pub fn members(&self, cluster: &str) -> BTreeMap<String, MemberState> {
        self.members
            .borrow()
            .get(cluster)
            .cloned()
            .unwrap_or_default()
    }
}

/// The demo-only routes (mounted by `http::router` only when the state has [`DemoControls`]).
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/demo/clusters/{cluster}/members", post(add_member))
        .route(
            "/demo/clusters/{cluster}/members/{instance}/stop",
            post(stop_member),
        )
        .route(
            "/demo/clusters/{cluster}/members/{instance}/crash",
            post(crash_member),
        )
}

/// Starts one more member (the next ordinal's pod and its agent).
async fn add_member(
    State(state): State<AppState>,
    caller: Caller,
    Path(cluster): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    control(&state, &caller, &headers, DemoAction::AddMember { cluster }).await
}

/// Stops a member gracefully (it releases its targets), then deletes its pod.
async fn stop_member(
    State(state): State<AppState>,
    caller: Caller,
    Path((cluster, instance)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let action = DemoAction::StopMember { cluster, instance };
    control(&state, &caller, &headers, action).await
}

/// Crashes a member: its agent dies holding its targets, its pod fails.
async fn crash_member(
    State(state): State<AppState>,
    caller: Caller,
    Path((cluster, instance)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let action = DemoAction::CrashMember { cluster, instance };
    control(&state, &caller, &headers, action).await
}

/// Checks the caller may change the cluster's members (the operator permission of removing an
/// instance), has the demo task do `action`, audits it, and answers `{"message": …}` (a
/// refusal: a 400 problem), or for a dashboard form post (whose `csrf` field is the
/// middleware's business) `303 See Other` to the cluster's page, whose query says what came
/// of it (see [`Notice`]).
async fn control(
    state: &AppState,
    caller: &Caller,
    headers: &HeaderMap,
    action: DemoAction,
) -> Result<Response, ApiError> {
    let cluster = action.cluster().to_owned();
    caller
        .require(state, Action::RemoveInstance, Some(&cluster))
        .await?;
    let demo = state
        .demo
        .as_ref()
        .ok_or_else(|| ApiError::NotFound("no such path".into()))?;
    let what = action.describe();
    let answer = demo.send(action).await;
    let refusal = match &answer {
        Ok(a) if a.outcome.done() => None,
        Ok(a) => Some(a.message.clone()),
        Err(e) => Some(e.to_string()),
    };
    audit(
        state,
        &cluster,
        caller,
        &what,
        refusal.as_ref().map_or(Ok(None), Err),
    )
    .await;
    let answer = answer?;
    let form = is_form(headers);
    if !answer.outcome.done() && (!form || answer.outcome == Outcome::NoCluster) {
        return Err(ApiError::BadRequest(answer.message));
    }
    if !form {
        return Ok(Json(serde_json::json!({ "message": answer.message })).into_response());
    }
    let mut query = form_urlencoded::Serializer::new(String::new());
    query.append_pair("demo", answer.outcome.key());
    if let Some(m) = &answer.member {
        query.append_pair("member", m);
    }
    let to = format!(
        "/clusters/{}?{}#demo-h",
        utf8_percent_encode(&cluster, NON_ALPHANUMERIC),
        query.finish()
    );
    let location = HeaderValue::try_from(to)
        .map_err(|_| ApiError::Internal("a demo redirect is not a header value".into()))?;
    Ok((StatusCode::SEE_OTHER, [(header::LOCATION, location)]).into_response())
}

/// Whether the request is an HTML form post.
fn is_form(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| {
            v.trim()
                .eq_ignore_ascii_case("application/x-www-form-urlencoded")
        })
}

/// What the cluster page's demo section says a control did (or why it did nothing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    /// It did nothing, or failed part way: shown as an error.
    pub refused: bool,
    /// In words.
    pub text: String,
}

impl Notice {
    /// The notice a page's query (`demo=<key>&member=<name>`) asks for, if it is one the demo
    /// could have given: a known key; for a control that was done, one of the cluster's
    /// `members` the demo knows; for a refusal, at least a name a pod could have. Anything
    /// else shows nothing.
    pub fn from_query(query: &str, members: &BTreeMap<String, MemberState>) -> Option<Notice> {
        let (mut outcome, mut member) = (None, None);
        for (k, v) in form_urlencoded::parse(query.as_bytes()) {
            match &*k {
                "demo" => outcome = Some(Outcome::from_key(&v)?),
                "member" => member = Some(v.into_owned()),
                _ => {}
            }
        }
        let outcome = outcome?;
        let member = member.filter(|m| {
            if outcome.done() {
                members.contains_key(m)
            } else {
                is_pod_name(m)
            }
        });
        Some(Notice {
            refused: !outcome.done(),
            text: outcome.words(member.as_deref())?,
        })
    }
}

/// Whether `s` could name a pod (a DNS-1123 subdomain, at most 253 characters).
fn is_pod_name(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// What the demo section offers for one member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offer {
    /// Stop gracefully, or crash: its agent runs and is not on its way out.
    StopOrCrash,
    /// Delete its failed pod: it has crashed.
    DeletePod,
    /// Nothing, and why (a word or two).
    Nothing(&'static str),
}

/// The cluster page's demo section: what the demo does with the cluster's members, and what
/// the last control did.
#[derive(Debug, Clone, Default)]
pub struct DemoPanel {
    /// The cluster's members the demo runs or ran, by pod name.
    members: BTreeMap<String, MemberState>,
    /// What the control the page follows did.
    pub notice: Option<Notice>,
}

impl DemoPanel {
    /// What applies to member `i`: Stop and Crash only while its agent runs, its pod is not
    /// being deleted and its member Lease does not say it is leaving; a crashed member's pod
    /// may be deleted.
    pub fn offer(&self, i: &Instance) -> Offer {
        let liveness = i.member_lease.as_ref().map(|m| m.liveness);
        match self.members.get(&i.name) {
            None => Offer::Nothing("not run by the demo"),
            Some(MemberState::Stopping) => Offer::Nothing("stopping"),
            Some(MemberState::Stopped) => Offer::Nothing("stopped"),
            Some(_) if i.terminating => Offer::Nothing("terminating"),
            Some(MemberState::Crashed) => Offer::DeletePod,
            Some(MemberState::Running) => match liveness {
                Some(Liveness::Leaving) => Offer::Nothing("leaving"),
                Some(Liveness::Released) => Offer::Nothing("signed off"),
                _ => Offer::StopOrCrash,
            },
        }
    }
}

/// The demo section of cluster `cluster`'s page under `leasehold demo` (`None` otherwise): the
/// cluster's members as the demo task last published them, and the notice the page's query
/// (`demo=…&member=…`, set by a control's redirect) asks for.
pub fn panel(state: &AppState, cluster: &str, query: Option<&str>) -> Option<DemoPanel> {
    let members = state.demo.as_ref()?.members(cluster);
    let notice = query.and_then(|q| Notice::from_query(q, &members));
    Some(DemoPanel { members, notice })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members() -> BTreeMap<String, MemberState> {
        [
            ("c-0".to_owned(), MemberState::Running),
            ("c-1".to_owned(), MemberState::Crashed),
        ]
        .into()
    }

    #[test]
    fn every_outcome_has_a_key_and_words() {
        for (o, k) in OUTCOME_KEYS {
            assert_eq!(o.key(), k);
            assert_eq!(Outcome::from_key(k), Some(o));
            assert!(o.words(Some("c-0")).is_some(), "{o:?}");
        }
    }

    #[test]
    fn a_notice_is_only_what_the_demo_could_have_said() {
        let m = members();
        let n = Notice::from_query("demo=crashed&member=c-1", &m).unwrap();
        assert!(!n.refused);
        assert!(n.text.starts_with("Crashed c-1 "), "{}", n.text);
        let n = Notice::from_query("demo=crash-refused&member=c-9", &m).unwrap();
        assert!(n.refused);
        assert!(n.text.starts_with("Did not crash c-9:"), "{}", n.text);
        // A done control names a member the demo knows; a refusal at least a pod's name.
        assert_eq!(Notice::from_query("demo=added&member=c-9", &m), None);
        assert_eq!(
            Notice::from_query("demo=stop-refused&member=%3Cb%3Ehi", &m),
            None
        );
        assert_eq!(Notice::from_query("demo=added", &m), None);
        assert_eq!(Notice::from_query("demo=hello&member=c-0", &m), None);
        assert_eq!(Notice::from_query("member=c-0", &m), None);
        assert!(Notice::from_query("demo=add-failed", &m).is_some());
    }

    #[test]
    fn only_what_applies_is_offered() {
        let panel = DemoPanel {
            members: [
                ("c-0".to_owned(), MemberState::Running),
                ("c-1".to_owned(), MemberState::Stopping),
                ("c-2".to_owned(), MemberState::Crashed),
                ("c-3".to_owned(), MemberState::Stopped),
            ]
            .into(),
            notice: None,
        };
        let offer = |name: &str, terminating: bool| {
            let mut i = Instance::for_tests(name, true, false, false);
            i.terminating = terminating;
            panel.offer(&i)
        };
        assert_eq!(offer("c-0", false), Offer::StopOrCrash);
        assert_eq!(offer("c-0", true), Offer::Nothing("terminating"));
        assert_eq!(offer("c-1", false), Offer::Nothing("stopping"));
        assert_eq!(offer("c-2", false), Offer::DeletePod);
        assert_eq!(offer("c-3", false), Offer::Nothing("stopped"));
        assert_eq!(offer("x-0", false), Offer::Nothing("not run by the demo"));
        let mut leaving = Instance::for_tests("c-0", true, false, false);
        leaving.member_lease = Some(crate::k8s::model::MemberLease {
            liveness: Liveness::Leaving,
            unchanged_ms: Some(0),
            duration_ms: Some(9_000),
            revocable: false,
            term: None,
            app_work: None,
        });
        assert_eq!(panel.offer(&leaving), Offer::Nothing("leaving"));
    }
}
