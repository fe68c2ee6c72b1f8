//! History entries in the words people read on the dashboard: an operation's steps ("started",
//! "pod deleted") and the action an audited request asked for ("Remove instance c-2", "Pause
//! automatic rebalancing (maintenance)"), never the stored words (`leases_cleaned`,
//! `webhook_called`). Every word shown is defined in docs/concepts.md ("History"); the API
//! keeps the stored words.
//!
//! It must not: change what is stored, or drop what an entry says (a word it does not know
//! is shown with its underscores as spaces, and an action it does not know as recorded).

use crate::model::{OperationKind, OperationState};
use crate::store::{HistoryEntry, HistoryKind};

use super::Lifecycle;

/// A step of an operation's lifecycle (`event`, and `detail` for a phase) as people read it.
pub fn step(event: &str, detail: Option<&str>) -> String {
    match (event, detail) {
        ("created", _) => "created".into(),
        ("phase", Some(phase)) => match phase {
            "cordoned" => "instance cordoned".into(),
            "webhook_called" => "removal webhook called".into(),
            "pod_deleted" => "pod deleted".into(),
            "leases_cleaned" => "leftover Leases cleaned up".into(),
            other => other.replace('_', " "),
        },
        ("phase", None) => "next phase".into(),
        (state, _) => match state.parse::<OperationState>() {
            Ok(OperationState::Proposed) => "proposed".into(),
            Ok(OperationState::Pending) => "accepted".into(),
            Ok(OperationState::Running) => "started".into(),
            Ok(OperationState::Succeeded) => "succeeded".into(),
            Ok(OperationState::Failed) => "failed".into(),
            Ok(OperationState::Cancelled) => "cancelled".into(),
            Err(_) => state.replace('_', " "),
        },
    }
}

/// What an operation of `kind` is called, about `instance` for a removal.
fn title(kind: Option<OperationKind>, instance: Option<&str>) -> String {
    match (kind, instance) {
        (Some(OperationKind::Rebalance), _) => "Rebalance".into(),
        (Some(OperationKind::RemoveInstance), Some(i)) => format!("Remove instance {i}"),
        (Some(OperationKind::RemoveInstance), None) => "Remove instance".into(),
        (None, Some(i)) => format!("Operation on {i}"),
        (None, None) => "Operation".into(),
    }
}

impl Lifecycle {
    /// What the operation is called ("Rebalance", "Remove instance c-2").
    pub fn title(&self) -> String {
        title(self.kind, self.instance.as_deref())
    }

    /// Where it stands, in words ("started", "succeeded").
    pub fn standing(&self) -> String {
        step(self.state(), None)
    }

    /// The badge class of where it stands.
    pub fn standing_class(&self) -> &'static str {
        match self.state().parse::<OperationState>() {
            Ok(OperationState::Succeeded) => "ok",
            Ok(OperationState::Failed) => "bad",
            Ok(OperationState::Cancelled | OperationState::Proposed) => "warn",
            _ => "info",
        }
    }
}

/// The words of the audited actions, as `http::actions` and the demo controls record them:
/// the stored prefix, and what people read.
const ACTIONS: [(&str, &str); 8] = [
    ("rebalance: nothing to move", "Rebalance (nothing to move)"),
    ("rebalance", "Rebalance"),
    ("remove instance ", "Remove instance "),
    ("uncordon ", "Uncordon "),
    (
        "pause automatic rebalancing: ",
        "Pause automatic rebalancing: ",
    ),
    (
        "resume automatic rebalancing: ",
        "Resume automatic rebalancing: ",
    ),
    ("cancel operation ", "Cancel operation "),
    ("approve operation ", "Approve proposed operation "),
];

impl HistoryEntry {
    /// An operation entry's step in words ("started", "pod deleted"); other entries' event
    /// with its underscores as spaces.
    pub fn step(&self) -> String {
        let event = self.event.as_deref().unwrap_or_default();
        match self.kind {
            HistoryKind::Operation => step(event, self.detail.as_deref()),
            _ => event.replace('_', " "),
        }
    }

    /// What an operation entry adds to its step: the reason it was created with, or why it
    /// failed (a phase's detail is its step).
    pub fn step_detail(&self) -> Option<&str> {
        match self.event.as_deref() {
            Some("phase") => None,
            _ => self.detail.as_deref().filter(|d| !d.is_empty()),
        }
    }

    /// An audited request: the action asked for, in words ("Remove instance c-2", "Pause
    /// automatic rebalancing: maintenance", "Refused request POST /api/v1/…").
    pub fn action(&self) -> String {
        let what = self.event.as_deref().unwrap_or_default();
        if let Some((stored, read)) = ACTIONS.iter().find(|(s, _)| what.starts_with(s)) {
            return format!("{read}{}", &what[stored.len()..]);
        }
        if what.starts_with("POST ") || what.starts_with("PUT ") || what.starts_with("DELETE ") {
            return format!("Refused request {what}");
        }
        if what == "refused requests" {
            return "Refused requests not audited one by one".into();
        }
        let mut c = what.chars();
        match c.next() {
            Some(first) => first.to_uppercase().chain(c).collect(),
            None => "Request".into(),
        }
    }

    /// The operation an audited request created, approved or cancelled.
    pub fn about_operation(&self) -> Option<&str> {
        self.operation.as_deref().or_else(|| {
            let what = self.event.as_deref()?;
            ["cancel operation ", "approve operation "]
                .iter()
                .find_map(|p| what.strip_prefix(p))
        })
    }

    /// An overlap hand-off in words: "overlap 3.2 s" (both apps worked on the target that
    /// long, the next owner's proven first), or that the next owner's app was not proven in
    /// time and the old one stopped first.
    pub fn overlap_words(&self) -> Option<String> {
        Some(match self.overlap? {
            crate::model::Overlap::Proven => match self.overlap_ms {
                Some(ms) => format!("overlap {}", crate::http::ui::page::duration(ms)),
                None => "overlap".to_owned(),
            },
            crate::model::Overlap::Unproven => {
                "overlap not proven in time: the old owner stopped first".to_owned()
            }
        })
    }

    /// A hand-over's work-level gap in words: "work stopped 14 s" (from the old holder's app's
    /// last work to the new one's first), or "worked twice 0.4 s" when the new one began first
    /// (two pods' clocks).
    pub fn work_gap_words(&self) -> Option<String> {
        let ms = self.work_gap_ms?;
        Some(if ms >= 0 {
            format!("work stopped {}", crate::http::ui::page::duration(ms))
        } else {
            format!("worked twice {}", crate::http::ui::page::duration(-ms))
        })
    }

    /// Why an audited request was refused (`None`: it was done).
    pub fn refused(&self) -> Option<&str> {
        let d = self.detail.as_deref()?;
        (d != "ok").then(|| d.strip_prefix("refused: ").unwrap_or(d))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::ui::story::move_entry;
    use crate::model::Cause;

    fn audit(what: &str, detail: &str, op: Option<&str>) -> HistoryEntry {
        HistoryEntry {
            kind: HistoryKind::Audit,
            event: Some(what.into()),
            detail: Some(detail.into()),
            operation: op.map(Into::into),
            actor: Some("alice".into()),
            ..move_entry("", (None, ""), Cause::Manual, None, 1, None)
        }
    }

    #[test]
    fn an_overlap_hand_off_is_told_with_its_length_or_as_not_proven() {
        use crate::model::Overlap;
        let mut e = move_entry("t", (Some("a"), "b"), Cause::Rebalance, None, 1, None);
        assert_eq!(e.overlap_words(), None);
        e.overlap = Some(Overlap::Proven);
        e.overlap_ms = Some(3_200);
        assert_eq!(e.overlap_words().as_deref(), Some("overlap 3.2 s"));
        e.overlap = Some(Overlap::Unproven);
        e.overlap_ms = None;
        assert_eq!(
            e.overlap_words().as_deref(),
            Some("overlap not proven in time: the old owner stopped first")
        );
    }

    #[test]
    fn a_work_gap_is_told_as_work_stopped_or_worked_twice() {
        let mut e = move_entry("t", (Some("a"), "b"), Cause::Rebalance, None, 1, None);
        assert_eq!(e.work_gap_words(), None);
        e.work_gap_ms = Some(14_000);
        assert_eq!(e.work_gap_words().as_deref(), Some("work stopped 14 s"));
        e.work_gap_ms = Some(-400);
        assert_eq!(e.work_gap_words().as_deref(), Some("worked twice 400 ms"));
    }

    /// No stored word reaches the page: phases, states and actions are put in words, and the
    /// operation an action is about is found.
    #[test]
    fn entries_are_told_in_words() {
        assert_eq!(
            step("phase", Some("leases_cleaned")),
            "leftover Leases cleaned up"
        );
        assert_eq!(
            step("phase", Some("webhook_called")),
            "removal webhook called"
        );
        assert_eq!(step("running", None), "started");
        assert_eq!(step("pending", None), "accepted");
        let remove = audit("remove instance c-2", "ok", Some("op-1"));
        assert_eq!(remove.action(), "Remove instance c-2");
        assert_eq!(remove.about_operation(), Some("op-1"));
        assert_eq!(remove.refused(), None);
        let pause = audit("pause automatic rebalancing: upgrade", "ok", None);
        assert_eq!(pause.action(), "Pause automatic rebalancing: upgrade");
        let cancel = audit("cancel operation op-7", "refused: it has ended", None);
        assert_eq!(cancel.action(), "Cancel operation op-7");
        assert_eq!(cancel.about_operation(), Some("op-7"));
        assert_eq!(cancel.refused(), Some("it has ended"));
        assert_eq!(audit("rebalance", "ok", Some("o")).action(), "Rebalance");
        assert_eq!(
            audit("rebalance: nothing to move", "ok", None).action(),
            "Rebalance (nothing to move)"
        );
        assert_eq!(
            audit(
                "POST /api/v1/clusters/c/rebalance",
                "refused (403): no",
                None
            )
            .action(),
            "Refused request POST /api/v1/clusters/c/rebalance"
        );
        assert_eq!(audit("stop c-1", "ok", None).action(), "Stop c-1");
        for phase in [
            "cordoned",
            "webhook_called",
            "pod_deleted",
            "leases_cleaned",
        ] {
            assert!(!step("phase", Some(phase)).contains('_'));
        }
        for s in OperationState::ALL {
            assert!(!step(s.as_str(), None).contains('_'));
        }
    }
}
