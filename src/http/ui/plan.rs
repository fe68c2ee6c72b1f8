//! A plan as the dashboard shows it (the rebalance and removal previews): the moves, and the
//! load per instance before and after as a bar chart (inline SVG sized by attributes, so the
//! strict CSP needs no inline style) with the same numbers in a table.

#[cfg(test)]
use crate::engine::planner::plan_id;
use crate::engine::planner::{Blocked, Move, Plan};

/// Width of the chart's bar area, in SVG units.
const BAR_AREA: u32 = 480;
/// Room after the longest bar for its numbers.
const NUMBERS: u32 = 90;
/// Height of one instance's pair of bars.
const ROW: u32 = 26;
/// Where the bars start (the name column's width).
const LABEL: u32 = 150;

/// One instance's load, with its bars.
pub struct LoadRow {
    /// Instance.
    pub member: String,
    /// Targets before.
    pub before: usize,
    /// Targets after.
    pub after: usize,
    /// Bar widths (SVG units).
    pub before_w: u32,
    /// Bar widths (SVG units).
    pub after_w: u32,
    /// Vertical position of the pair.
    pub y: u32,
    /// Where the numbers go (after the longer bar).
    pub text_x: u32,
}

/// A plan, ready for the template.
pub struct PlanView {
    /// The plan's id: starting it runs exactly these moves, or is refused.
    pub id: String,
    /// The moves.
    pub moves: Vec<Move>,
    /// Load per instance.
    pub rows: Vec<LoadRow>,
    /// Imbalance before and after, as percentages over fair share.
    pub imbalance_before: String,
    /// See `imbalance_before`.
    pub imbalance_after: String,
    /// Targets that cannot be placed.
    pub blocked: Vec<Blocked>,
    /// The move budget cut the plan short.
    pub truncated: bool,
    /// The chart's height.
    pub height: u32,
    /// Where bars start.
    pub label_w: u32,
    /// The chart's width.
    pub width: u32,
}

impl From<Plan> for PlanView {
    fn from(p: Plan) -> Self {
        let mut rows: Vec<LoadRow> = p
            .before
            .iter()
            .map(|b| LoadRow {
                member: b.member.clone(),
                before: b.targets,
                after: p
                    .after
                    .iter()
                    .find(|a| a.member == b.member)
                    .map_or(0, |a| a.targets),
                before_w: 0,
                after_w: 0,
                y: 0,
                text_x: 0,
            })
            .collect();
        for a in &p.after {
            if !rows.iter().any(|r| r.member == a.member) {
                rows.push(LoadRow {
                    member: a.member.clone(),
                    before: 0,
                    after: a.targets,
                    before_w: 0,
                    after_w: 0,
                    y: 0,
                    text_x: 0,
                });
            }
        }
        let max = rows
            .iter()
            .map(|r| r.before.max(r.after))
            .max()
            .unwrap_or(0)
            .max(1);
        for (i, r) in rows.iter_mut().enumerate() {
            r.before_w = (r.before as u64 * u64::from(BAR_AREA) / max as u64) as u32;
            r.after_w = (r.after as u64 * u64::from(BAR_AREA) / max as u64) as u32;
            r.y = i as u32 * ROW;
            r.text_x = LABEL + r.before_w.max(r.after_w) + 6;
        }
        PlanView {
            height: rows.len() as u32 * ROW + 4,
            rows,
            id: p.id,
            moves: p.moves,
            imbalance_before: percent(p.imbalance_before),
            imbalance_after: percent(p.imbalance_after),
            blocked: p.blocked,
            truncated: p.truncated,
            label_w: LABEL,
            width: LABEL + BAR_AREA + NUMBERS,
        }
    }
}

/// An imbalance (0.25) as people read it ("25 %").
pub fn percent(x: f64) -> String {
    format!("{:.0} %", x * 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::planner::{MemberLoad, MemberState};

    fn load(member: &str, targets: usize) -> MemberLoad {
        MemberLoad {
            member: member.into(),
            capacity: 1,
            state: MemberState::Active,
            targets,
            weight: targets as u64,
        }
    }

    #[test]
    fn bars_scale_to_the_busiest_instance_and_keep_new_members() {
        let v = PlanView::from(Plan {
            id: plan_id(&[]),
            moves: vec![],
            before: vec![load("a", 10), load("b", 5)],
            after: vec![load("a", 5), load("b", 5), load("c", 5)],
            imbalance_before: 0.333,
            imbalance_after: 0.0,
            blocked: vec![],
            truncated: false,
        });
        let w: Vec<_> = v
            .rows
            .iter()
            .map(|r| (r.member.as_str(), r.before_w, r.after_w))
            .collect();
        assert_eq!(w, [("a", 480, 240), ("b", 240, 240), ("c", 0, 240)]);
        assert_eq!(v.imbalance_before, "33 %");
        assert_eq!(v.rows[2].y, 2 * ROW);
    }
}
