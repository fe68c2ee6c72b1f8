//! `/history`: the whole history, newest first, filtered by cluster, kind, target, instance
//! and a time range (from, inclusive, to, exclusive; UTC), told as a story a page of rows at a
//! time ([`super::tell`]: every count is the whole event's), with paging links that keep the
//! filters, and from each line's time a link to its cluster as it was then (`as_of`). A value
//! the page cannot use (a time it cannot read, a range that ends before it starts, a kind or a
//! cluster that does not exist) is shown in an error box above the form, with status 400 or
//! 404 — never a 500, never silently ignored.
//!
//! It must not: count anything itself (the story does, over the whole history), or take a
//! time in any zone but UTC unless the value names its offset.

use askama::Template;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;

use super::super::page::{Base, Choice, UiError, Viewer, choices, render};
use super::{Line, What, as_of_href, tell};
use crate::http::auth::Action;
use crate::http::state::AppState;
use crate::store::{HistoryKind, HistoryQuery, now_ms};

/// Rows per page of the history.
const PAGE: u32 = 50;

/// The kinds of history entry, for the filter.
const KINDS: [HistoryKind; 4] = [
    HistoryKind::Ownership,
    HistoryKind::Instance,
    HistoryKind::Operation,
    HistoryKind::Audit,
];

/// The history's filters as the form sends them, and what the page made of them.
#[derive(Debug, Default, Deserialize)]
pub struct Filter {
    #[serde(default)]
    cluster: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    target: String,
    #[serde(default)]
    instance: String,
    /// From this time on (inclusive).
    #[serde(default)]
    from: String,
    /// Before this time (exclusive).
    #[serde(default)]
    to: String,
    cursor: Option<String>,
    /// `from` read (unix ms).
    #[serde(skip)]
    from_ms: Option<i64>,
    /// `to` read (unix ms).
    #[serde(skip)]
    to_ms: Option<i64>,
    /// What is wrong with the filters, and the status it is answered with.
    #[serde(skip)]
    problem: Option<(StatusCode, String)>,
}

impl Filter {
    /// `from` as the form's `datetime-local` field shows it (UTC), or as given when unread.
    pub fn start_value(&self) -> String {
        self.from_ms.map_or_else(|| self.from.clone(), field)
    }

    /// `to` as the form's field shows it.
    pub fn end_value(&self) -> String {
        self.to_ms.map_or_else(|| self.to.clone(), field)
    }

    /// What is wrong with the filters, in words.
    pub fn problem(&self) -> Option<&str> {
        self.problem.as_ref().map(|(_, p)| p.as_str())
    }

    /// The chosen cluster as it was at the end of the range (or now): its link and words.
    pub fn as_of(&self) -> Option<(String, String)> {
        if self.cluster.is_empty() || self.problem.is_some() {
            return None;
        }
        let at = self.to_ms.unwrap_or_else(now_ms);
        let words = match self.to_ms {
            Some(t) => format!(
                "Cluster {} as it was at {} (the end of this range)",
                self.cluster,
                utc(t)
            ),
            None => format!("Cluster {} as history has it now", self.cluster),
        };
        Some((as_of_href(&self.cluster, at)?, words))
    }

    /// Reads the times and checks the words; the first problem is kept.
    fn check(&mut self, clusters: &[String]) {
        let mut problems = Vec::new();
        match moment(&self.from) {
            Ok(t) => self.from_ms = t,
            Err(e) => problems.push((StatusCode::BAD_REQUEST, format!("From: {e}"))),
        }
        match moment(&self.to) {
            Ok(t) => self.to_ms = t,
            Err(e) => problems.push((StatusCode::BAD_REQUEST, format!("To: {e}"))),
        }
        if let (Some(f), Some(t)) = (self.from_ms, self.to_ms)
            && f >= t
        {
            problems.push((
                StatusCode::BAD_REQUEST,
                format!(
                    "The range ends ({}) before it starts ({}): To must be later than From.",
                    utc(t),
                    utc(f)
                ),
            ));
        }
        if !self.kind.is_empty() && self.kind.parse::<HistoryKind>().is_err() {
            let kinds: Vec<&str> = KINDS.iter().map(|k| k.as_str()).collect();
            problems.push((
                StatusCode::BAD_REQUEST,
                format!(
                    "Kind: {:?} is not a kind of entry; the kinds are {}.",
                    self.kind,
                    kinds.join(", ")
                ),
            ));
        }
        if !self.cluster.is_empty() && !clusters.contains(&self.cluster) {
            problems.push((
                StatusCode::NOT_FOUND,
                format!(
                    "Cluster: there is no cluster named {:?}; the clusters are {}.",
                    self.cluster,
                    clusters.join(", ")
                ),
            ));
        }
        self.problem = problems.into_iter().next();
    }

    fn query(&self) -> HistoryQuery {
        let given = |s: &str| Some(s.to_owned()).filter(|s| !s.is_empty());
        HistoryQuery {
            cluster: given(&self.cluster),
            target: given(&self.target),
            instance: given(&self.instance),
            kind: self.kind.parse().ok(),
            since_ms: self.from_ms,
            until_ms: self.to_ms,
            cursor: self.cursor.clone().filter(|c| !c.is_empty()),
            limit: PAGE,
            ..Default::default()
        }
    }
}

/// A time as the page writes it: `2026-12-07 02:43:00 UTC`.
fn utc(at_ms: i64) -> String {
    jiff::Timestamp::from_millisecond(at_ms)
        .map(|t| t.strftime("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_default()
}

/// A time as a `datetime-local` field takes it (UTC, to the second).
fn field(at_ms: i64) -> String {
    jiff::Timestamp::from_millisecond(at_ms)
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%S").to_string())
        .unwrap_or_default()
}

/// A time as a form gives it: empty (`None`), an RFC 3339 time with its offset, or a date
/// and time without one, read as UTC (`2026-12-07T02:43`, seconds optional, `T` or a space),
/// or a date (its midnight, UTC). Otherwise, what it takes.
pub(super) fn moment(s: &str) -> Result<Option<i64>, String> {
    let s = s.trim();
    if s.is_empty() {
        return Ok(None);
    }
    if let Ok(t) = s.parse::<jiff::Timestamp>() {
        return Ok(Some(t.as_millisecond()));
    }
    let civil = s.parse::<jiff::civil::DateTime>().or_else(|_| {
        s.parse::<jiff::civil::Date>()
            .map(|d| d.to_datetime(jiff::civil::Time::midnight()))
    });
    civil
        .ok()
        .and_then(|dt| dt.to_zoned(jiff::tz::TimeZone::UTC).ok())
        .map(|z| Some(z.timestamp().as_millisecond()))
        .ok_or_else(|| {
            format!(
                "{:?} is not a time; give a UTC date and time such as 2026-12-07T02:43:00 \
                 (seconds optional), or one with its offset such as 2026-12-07T02:43:00+01:00.",
                s.chars().take(64).collect::<String>()
            )
        })
}

#[derive(Template)]
#[template(path = "history.html")]
struct HistoryPage {
    base: Base,
    f: Filter,
    clusters: Vec<Choice>,
    kinds: Vec<Choice>,
    /// The page's entries told as a story (moves that belong together, and each operation,
    /// are one line).
    lines: Vec<Line>,
    next_cursor: Option<String>,
}

impl HistoryPage {
    /// The next page, with the same filters.
    fn next(&self, cursor: &str) -> String {
        let mut q = form_urlencoded::Serializer::new(String::new());
        let from = self.f.from_ms.map(field).unwrap_or_default();
        let to = self.f.to_ms.map(field).unwrap_or_default();
        for (k, v) in [
            ("cluster", &self.f.cluster),
            ("kind", &self.f.kind),
            ("target", &self.f.target),
            ("instance", &self.f.instance),
            ("from", &from),
            ("to", &to),
        ] {
            if !v.is_empty() {
                q.append_pair(k, v);
            }
        }
        q.append_pair("cursor", cursor);
        format!("/history?{}", q.finish())
    }
}

/// `/history`.
pub async fn history(
    State(state): State<AppState>,
    viewer: Viewer,
    Query(mut f): Query<Filter>,
) -> Result<Response, UiError> {
    let cluster = Some(f.cluster.clone()).filter(|c| !c.is_empty());
    viewer
        .caller
        .require(&state, Action::Read, cluster.as_deref())
        .await?;
    let mut base = Base::new(&state, &viewer, "History").await;
    base.nav = "history";
    f.check(&base.clusters);
    let (lines, next_cursor) = match f.problem {
        Some(_) => (Vec::new(), None),
        None => {
            base.cluster = f.cluster.clone();
            let query = f.query();
            let store = state.engine.store();
            let page = store.history(&query).await?;
            // Each event counted whole, not over this page's rows.
            let lines = tell(store, &query, page.items, usize::MAX).await?;
            (lines, page.next_cursor)
        }
    };
    let status = f.problem.as_ref().map_or(StatusCode::OK, |(s, _)| *s);
    let mut res = render(&HistoryPage {
        clusters: choices(&base.clusters, &f.cluster),
        kinds: choices(KINDS.iter().map(|k| k.as_str()), &f.kind),
        base,
        f,
        lines,
        next_cursor,
    })?;
    *res.status_mut() = status;
    Ok(res)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_read_as_utc_unless_they_say_otherwise() {
        let t = |s: &str| moment(s).unwrap().unwrap();
        let at = 1_796_611_380_000; // 2026-12-07T02:43:00Z
        assert_eq!(t("2026-12-07T02:43:00Z"), at);
        assert_eq!(t("2026-12-07T02:43"), at);
        assert_eq!(t("2026-12-07 02:43:00"), at);
        assert_eq!(t(" 2026-12-07T03:43:00+01:00 "), at);
        assert_eq!(t("2026-12-07"), at - (2 * 60 + 43) * 60_000);
        assert_eq!(moment("").unwrap(), None);
        for bad in ["yesterday", "2026-13-01T00:00", "-5", "2026-12-07T25:00"] {
            let e = moment(bad).unwrap_err();
            assert!(
                e.contains("is not a time") && e.contains("2026-12-07T02:43:00"),
                "{e}"
            );
        }
        assert_eq!(field(at), "2026-12-07T02:43:00");
    }

    #[test]
    fn bad_filters_are_problems_not_failures() {
        let clusters = vec!["c".to_owned()];
        let mut f = Filter {
            from: "2026-12-07T03:00".into(),
            to: "2026-12-07T02:00".into(),
            ..Default::default()
        };
        f.check(&clusters);
        assert!(f.problem().unwrap().contains("before it starts"), "{f:?}");
        let mut f = Filter {
            from: "soon".into(),
            ..Default::default()
        };
        f.check(&clusters);
        assert!(f.problem().unwrap().starts_with("From: \"soon\""), "{f:?}");
        assert_eq!(f.start_value(), "soon");
        let mut f = Filter {
            cluster: "nope".into(),
            ..Default::default()
        };
        f.check(&clusters);
        assert_eq!(f.problem.as_ref().unwrap().0, StatusCode::NOT_FOUND);
        let mut f = Filter {
            kind: "moves".into(),
            ..Default::default()
        };
        f.check(&clusters);
        assert!(
            f.problem().unwrap().contains("ownership, instance"),
            "{f:?}"
        );
        let mut f = Filter {
            cluster: "c".into(),
            from: "2026-12-07T02:00:00Z".into(),
            to: "2026-12-07 03:00".into(),
            ..Default::default()
        };
        f.check(&clusters);
        assert_eq!(f.problem(), None);
        assert_eq!(f.end_value(), "2026-12-07T03:00:00");
        let (href, words) = f.as_of().unwrap();
        assert_eq!(href, "/clusters/c/as-of?t=2026-12-07T03%3A00%3A00Z");
        assert!(words.contains("2026-12-07 03:00:00 UTC"), "{words}");
    }
}
