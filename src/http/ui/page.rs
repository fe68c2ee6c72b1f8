//! What every dashboard page shares: the [`Viewer`] extractor (who is looking; a browser with
//! no credentials is sent to the login page), the [`Base`] the layout renders (navigation,
//! the user, the CSRF token for forms, health banners, what the page's live updates follow),
//! time formatting, and [`UiError`], which renders errors as pages rather than problem+json.

use askama::Template;
use axum::extract::{FromRequestParts, OriginalUri};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};

use super::super::caller::{Caller, session};
use super::super::error::ApiError;
use super::super::state::AppState;
use crate::config::http::Mode;
use crate::k8s::model::{Instance, Liveness};
use crate::store::now_ms;

/// Who is looking at a page, and the CSRF token their forms carry.
pub struct Viewer {
    /// The authenticated caller.
    pub caller: Caller,
    /// The session's CSRF token (empty without a session: bearer or mode `none`).
    pub csrf: String,
    /// Logged in with a session (so there is a logout).
    pub logged_in: bool,
    /// The live feed's last event id when the request came in, before the handler read any
    /// state, lowered by [`Viewer::shows`] for a model built before: every later change is
    /// either in the page or comes after this id.
    pub event_id: u64,
}

impl Viewer {
    /// Counts in a view the page shows. A reader may be given a model built up to a second
    /// before the request (see `engine::views`), so the page resumes the feed after the last
    /// event published before that model was built, not after the newest: nothing it lacks is
    /// skipped (a later event it already has costs it one more look).
    pub fn shows(&mut self, state: &AppState, view: &crate::engine::View) {
        self.event_id = self.event_id.min(state.events.last_id_before(view.built()));
    }
}

impl FromRequestParts<AppState> for Viewer {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Response> {
        let event_id = state.events.last_id();
        let session = session(&parts.headers, state);
        match Caller::from_request_parts(parts, state).await {
            Ok(caller) => Ok(Viewer {
                event_id,
                caller,
                logged_in: session.is_some() && state.auth.mode() != Mode::None,
                csrf: session.map(|s| s.csrf).unwrap_or_default(),
            }),
            Err(ApiError::Unauthenticated) => {
                let here = parts
                    .extensions
                    .get::<OriginalUri>()
                    .map_or_else(|| parts.uri.clone(), |u| u.0.clone());
                let next = here.path_and_query().map_or("/", |p| p.as_str());
                let to = format!(
                    "/login?next={}",
                    percent_encoding::utf8_percent_encode(next, percent_encoding::NON_ALPHANUMERIC)
                );
                Err(Redirect::to(&to).into_response())
            }
            Err(e) => Err(UiError(e).into_response()),
        }
    }
}

/// The layout's data.
pub struct Base {
    /// The page title.
    pub title: String,
    /// Which navigation entry is current (`overview`, `cluster`, `operations`, `history`).
    pub nav: &'static str,
    /// Every managed cluster, for the navigation.
    pub clusters: Vec<String>,
    /// The cluster the page shows (its events refresh the page), or empty.
    pub cluster: String,
    /// The operation the page shows, or empty.
    pub operation: String,
    /// The user's name.
    pub user: String,
    /// Whether to offer a logout.
    pub logged_in: bool,
    /// The CSRF token for forms.
    pub csrf: String,
    /// Warnings for every page: stale or unsynced models, failovers held back (a mass lapse).
    pub banners: Vec<String>,
    /// Now (unix ms), for relative times.
    pub now_ms: i64,
    /// The page resumes the live feed after this event id ([`Viewer::event_id`]).
    pub event_id: u64,
}

impl Base {
    /// The layout data for a page titled `title`.
    pub async fn new(state: &AppState, viewer: &Viewer, title: impl Into<String>) -> Base {
        let clusters: Vec<String> = state
            .engine
            .config()
            .clusters
            .iter()
            .map(|c| c.name.clone())
            .collect();
        let mut banners = Vec::new();
        for c in &clusters {
            match state.engine.view(c).await {
                Ok(v) if v.model.stale => banners.push(format!(
                    "Cluster {c}: a Kubernetes watch is down or not proven current — showing \
                     the last known state; nothing is changed until it is back."
                )),
                Ok(v) if !v.model.synced => banners.push(format!(
                    "Cluster {c}: still reading the cluster (first sync)."
                )),
                Ok(v) => {
                    if let Some(lapse) = state.engine.mass_lapse(&v) {
                        banners.push(format!("Cluster {c} degraded: {}.", lapse.reason()));
                    }
                }
                Err(e) => banners.push(format!("Cluster {c}: {e}")),
            }
        }
        Base {
            title: title.into(),
            nav: "",
            clusters,
            cluster: String::new(),
            operation: String::new(),
            user: viewer.caller.name().to_owned(),
            logged_in: viewer.logged_in,
            csrf: viewer.csrf.clone(),
            banners,
            now_ms: now_ms(),
            event_id: viewer.event_id,
        }
    }

    /// Marks the page as showing `cluster` (navigation and live updates).
    pub fn for_cluster(mut self, cluster: &str) -> Base {
        self.cluster = cluster.to_owned();
        self.nav = "cluster";
        self
    }

    /// How long before now `at_ms` was, for people ("12 s ago").
    pub fn ago(&self, at_ms: impl Millis) -> String {
        let at_ms = at_ms.ms();
        format!("{} ago", span((self.now_ms - at_ms).max(0)))
    }

    /// A time as UTC, to the second.
    pub fn time(&self, at_ms: impl Millis) -> String {
        let at_ms = at_ms.ms();
        jiff::Timestamp::from_millisecond(at_ms)
            .map(|t| t.strftime("%Y-%m-%d %H:%M:%S UTC").to_string())
            .unwrap_or_else(|_| at_ms.to_string())
    }

    /// An imbalance (0.25) as people read it ("25 %").
    pub fn percent(&self, x: &f64) -> String {
        super::plan::percent(*x)
    }

    /// A duration in milliseconds, for people, to a tenth of a second under 10 s.
    pub fn span(&self, ms: impl Millis) -> String {
        duration(ms.ms())
    }

    /// What an instance's member Lease says when the member is not simply alive
    /// and working — a tag for the instances tables, so a member whose pod still reads
    /// "ready" but who stopped renewing (crashed, hung, partitioned) does not look healthy.
    pub fn heartbeat(&self, i: &Instance) -> Option<Tag> {
        heartbeat(i)
    }

    /// A word of the model (`not_ready`, `remove_instance`, `leader_gained`…) as people read
    /// it (see [`label`]).
    pub fn label(&self, word: impl std::fmt::Display) -> String {
        label(&word.to_string())
    }

    /// The machine-readable form of a time (for `<time datetime>`).
    pub fn iso(&self, at_ms: impl Millis) -> String {
        let at_ms = at_ms.ms();
        jiff::Timestamp::from_millisecond(at_ms)
            .map(|t| t.to_string())
            .unwrap_or_default()
    }
}

/// A word of the model as people read it: `leader_gained` is "became leader", `leader_lost`
/// "lost leadership", other words with their underscores as spaces (`not ready`,
/// `remove instance`, `leases cleaned`). The API keeps the words themselves.
pub fn label(word: &str) -> String {
    match word {
        "leader_gained" => "became leader".to_owned(),
        "leader_lost" => "lost leadership".to_owned(),
        other => other.replace('_', " "),
    }
}

/// A small labelled badge: its CSS class (`ok`, `warn`, `bad`, `info`), word and tooltip.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tag {
    pub class: &'static str,
    pub word: String,
    pub title: String,
}

/// See [`Base::heartbeat`]; `None` for a live member renewing on time, and in gnmic clusters.
pub fn heartbeat(i: &Instance) -> Option<Tag> {
    let tag = |class, word: &str, title: &str| {
        Some(Tag {
            class,
            word: word.to_owned(),
            title: title.to_owned(),
        })
    };
    let m = i.member_lease.as_ref()?;
    match m.liveness {
        // A member renews every third of its duration; unchanged past two thirds, it has missed
        // renewals and passed its own renew deadline: suspect, before anything expires.
        Liveness::Live => match (m.unchanged_ms, m.duration_ms) {
            (Some(u), Some(d)) if d > 0 && u * 3 > d * 2 => Some(Tag {
                class: "warn",
                word: format!("heartbeat late ({})", span(u)),
                title: format!(
                    "its member Lease was last renewed {} ago (it renews every {}): unless it \
                     renews, it is fenced and its targets fail over in about {}",
                    span(u),
                    span(d / 3),
                    span((d - u).max(0)),
                ),
            }),
            _ => None,
        },
        Liveness::Leaving => tag(
            "warn",
            "leaving",
            "stopping: its targets are being moved away before it exits",
        ),
        Liveness::Expired => tag(
            "bad",
            "heartbeat lost",
            "its member Lease was not renewed for a full lease duration: it is about to be \
             fenced and its targets failed over",
        ),
        Liveness::Fenced => tag(
            "bad",
            "fenced",
            "the control plane fenced its member Lease: it may do no work until it registers again",
        ),
        Liveness::Released => tag(
            "info",
            "signed off",
            "it stopped all its work and released its member Lease",
        ),
        Liveness::Absent => tag(
            "warn",
            "no heartbeat",
            "it has no member Lease: its agent is not running (or not yet)",
        ),
    }
}

/// A duration in milliseconds, for people: `850 ms`, `12 s`, `4 min`, `3 h`, `2 d`.
pub fn span(ms: i64) -> String {
    match ms {
        ..=999 => format!("{ms} ms"),
        1_000..=59_999 => format!("{} s", ms / 1_000),
        60_000..=3_599_999 => format!("{} min", ms / 60_000),
        3_600_000..=86_399_999 => format!("{} h", ms / 3_600_000),
        _ => format!("{} d", ms / 86_400_000),
    }
}

/// A duration as [`span`] tells it, but to a tenth of a second from 1 to 10 s (`9.3 s`): how
/// long a failover or a handoff took, where whole seconds hide what matters.
pub fn duration(ms: i64) -> String {
    match ms {
        1_000..=9_999 => format!("{}.{} s", ms / 1_000, ms % 1_000 / 100),
        _ => span(ms),
    }
}

/// A millisecond count however many references deep a template hands it over.
pub trait Millis {
    /// The count.
    fn ms(&self) -> i64;
}

impl Millis for i64 {
    fn ms(&self) -> i64 {
        *self
    }
}

impl<T: Millis + ?Sized> Millis for &T {
    fn ms(&self) -> i64 {
        (**self).ms()
    }
}

/// One option of a `<select>`.
pub struct Choice {
    /// Its value (and label).
    pub value: String,
    /// Whether it is the current one.
    pub selected: bool,
}

/// The options `values`, with `current` selected.
pub fn choices<S: AsRef<str>>(values: impl IntoIterator<Item = S>, current: &str) -> Vec<Choice> {
    values
        .into_iter()
        .map(|v| Choice {
            selected: v.as_ref() == current,
            value: v.as_ref().to_owned(),
        })
        .collect()
}

/// Renders a template as a page.
pub fn render<T: Template>(t: &T) -> Result<Response, UiError> {
    let html = t
        .render()
        .map_err(|e| UiError(ApiError::Internal(format!("rendering a page: {e}"))))?;
    Ok(Html(html).into_response())
}

/// A 303 to `to` (after a form post).
pub fn see_other(to: &str) -> Response {
    Redirect::to(to).into_response()
}

/// A page-level failure: the [`ApiError`] shown as a page with its status.
#[derive(Debug)]
pub struct UiError(pub ApiError);

impl<E: Into<ApiError>> From<E> for UiError {
    fn from(e: E) -> Self {
        UiError(e.into())
    }
}

#[derive(Template)]
#[template(path = "error.html")]
struct ErrorPage {
    status: u16,
    title: String,
    detail: String,
}

impl IntoResponse for UiError {
    fn into_response(self) -> Response {
        let (status, problem) = self.0.problem();
        let page = ErrorPage {
            status: status.as_u16(),
            title: problem.title,
            detail: problem.detail,
        };
        let html = page
            .render()
            .unwrap_or_else(|_| "<!doctype html><title>Error</title>".into());
        let mut res = (status, Html(html)).into_response();
        // The 500's hidden cause still reaches the logging middleware.
        if let ApiError::Internal(_) = &self.0 {
            let api = self.0.into_response();
            res.extensions_mut().extend(api.extensions().clone());
        }
        if status == StatusCode::UNAUTHORIZED {
            res.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"leasehold\""),
            );
        }
        res
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::k8s::model::MemberLease;

    fn instance(liveness: Option<Liveness>) -> Instance {
        late(liveness, None)
    }

    #[test]
    fn durations_keep_a_tenth_of_a_second_where_it_matters() {
        let got: Vec<String> = [41, 999, 1_000, 9_349, 9_999, 10_000, 61_000]
            .into_iter()
            .map(duration)
            .collect();
        assert_eq!(
            got,
            [
                "41 ms", "999 ms", "1.0 s", "9.3 s", "9.9 s", "10 s", "1 min"
            ]
        );
        // Ages stay whole, as app.js ticks them.
        assert_eq!(span(9_349), "9 s");
    }

    /// An instance whose member Lease (9 s) was unchanged for `unchanged_ms`.
    fn late(liveness: Option<Liveness>, unchanged_ms: Option<i64>) -> Instance {
        let mut i = Instance::for_tests("c-0", true, false, false);
        i.member_lease = liveness.map(|liveness| MemberLease {
            liveness,
            unchanged_ms,
            duration_ms: Some(9_000),
            revocable: false,
            term: None,
            app_work: None,
        });
        i
    }

    #[test]
    fn model_words_read_as_words() {
        assert_eq!(label("not_ready"), "not ready");
        assert_eq!(label("remove_instance"), "remove instance");
        assert_eq!(label("leader_gained"), "became leader");
        assert_eq!(label("handoff"), "handoff");
    }

    #[test]
    fn a_ready_pod_whose_member_stopped_renewing_is_tagged_so() {
        // No member Lease (gnmic), and a live member: nothing beyond the pod's own state.
        assert_eq!(heartbeat(&instance(None)), None);
        assert_eq!(heartbeat(&instance(Some(Liveness::Live))), None);
        let word = |i: Instance| heartbeat(&i).map(|t| (t.class, t.word));
        let at = |l| word(instance(Some(l)));
        assert_eq!(
            at(Liveness::Expired),
            Some(("bad", "heartbeat lost".into()))
        );
        assert_eq!(at(Liveness::Fenced), Some(("bad", "fenced".into())));
        assert_eq!(at(Liveness::Absent), Some(("warn", "no heartbeat".into())));
        assert_eq!(at(Liveness::Leaving), Some(("warn", "leaving".into())));
        assert_eq!(at(Liveness::Released), Some(("info", "signed off".into())));
        // Live, renewing every 3 s: fine up to 6 s unchanged, suspect after.
        assert_eq!(word(late(Some(Liveness::Live), Some(6_000))), None);
        let t = heartbeat(&late(Some(Liveness::Live), Some(7_500))).unwrap();
        assert_eq!((t.class, t.word.as_str()), ("warn", "heartbeat late (7 s)"));
        assert!(t.title.ends_with("fail over in about 1 s"), "{}", t.title);
    }
}
