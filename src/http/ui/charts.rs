//! The dashboard's pictures, drawn server-side as SVG sized by attributes (the strict CSP
//! allows no inline style, and nothing is loaded from anywhere else), each with its numbers
//! also in a table or a list for those who cannot see it:
//!
//! - [`LoadChart`]: targets per instance before and after (a plan, an operation);
//! - [`GapHistogram`]: how long targets had nobody working on them, per move of an operation;
//! - [`Timeline`]: who held one target when, and each gap between two holders;
//! - [`LoadOverTime`]: targets per instance over the last minutes of a cluster.
//!
//! Pure: from rows of history and counts to coordinates; the templates only place them.

use crate::store::{HistoryEntry, HistoryKind};

/// Width of a chart's drawing area, in SVG units (charts scale to their box).
const WIDTH: u32 = 720;

/// Width of the load chart's bar area.
const BAR_AREA: u32 = 480;
/// Room after the longest bar for its numbers.
const NUMBERS: u32 = 90;
/// Height of one instance's pair of bars.
const ROW: u32 = 26;
/// Where the bars start (the name column's width).
const LABEL: u32 = 150;

/// Series and holders get one of this many colours (CSS classes `c0`…`c7`).
const COLOURS: usize = 8;

/// One instance's load, with its bars.
#[derive(Debug, Clone, PartialEq)]
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

/// Targets per instance before and after, as pairs of bars.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadChart {
    /// One pair of bars per instance.
    pub rows: Vec<LoadRow>,
    /// The chart's height.
    pub height: u32,
    /// Where bars start.
    pub label_w: u32,
    /// The chart's width.
    pub width: u32,
}

impl LoadChart {
    /// From (instance, before, after), in the order given; bars scale to the busiest.
    pub fn new(loads: impl IntoIterator<Item = (String, usize, usize)>) -> Self {
        let mut rows: Vec<LoadRow> = loads
            .into_iter()
            .map(|(member, before, after)| LoadRow {
                member,
                before,
                after,
                before_w: 0,
                after_w: 0,
                y: 0,
                text_x: 0,
            })
            .collect();
        let max = rows
            .iter()
            .map(|r| r.before.max(r.after))
            .max()
            .unwrap_or(0)
            .max(1) as u64;
        for (i, r) in rows.iter_mut().enumerate() {
            r.before_w = (r.before as u64 * u64::from(BAR_AREA) / max) as u32;
            r.after_w = (r.after as u64 * u64::from(BAR_AREA) / max) as u32;
            r.y = i as u32 * ROW;
            r.text_x = LABEL + r.before_w.max(r.after_w) + 6;
        }
        LoadChart {
            height: rows.len() as u32 * ROW + 4,
            rows,
            label_w: LABEL,
            width: LABEL + BAR_AREA + NUMBERS,
        }
    }
}

/// Upper bounds (ms, exclusive) of the gap histogram's bins; the last bin is open.
const GAP_BINS: [(i64, &str); 10] = [
    (10, "< 10 ms"),
    (25, "10–25 ms"),
    (50, "25–50 ms"),
    (100, "50–100 ms"),
    (250, "0.1–0.25 s"),
    (500, "0.25–0.5 s"),
    (1_000, "0.5–1 s"),
    (2_500, "1–2.5 s"),
    (10_000, "2.5–10 s"),
    (i64::MAX, "≥ 10 s"),
];
/// Height of the histogram's bar area.
const BARS_H: u32 = 120;

/// One bin of the gap histogram.
#[derive(Debug, Clone, PartialEq)]
pub struct Bin {
    /// Its range, for people.
    pub label: &'static str,
    /// Moves whose gap fell in it.
    pub count: usize,
    /// The bar.
    pub x: u32,
    /// The bar's top.
    pub y: u32,
    /// The bar's width.
    pub w: u32,
    /// The bar's height.
    pub h: u32,
    /// Where the bin's count is written (above the bar).
    pub count_y: u32,
    /// The middle of the bar, for its labels.
    pub mid_x: u32,
}

/// How long targets had nobody working on them, per move, in bins.
#[derive(Debug, Clone, PartialEq)]
pub struct GapHistogram {
    /// The bins, shortest first.
    pub bins: Vec<Bin>,
    /// Moves with a known gap.
    pub count: usize,
    /// The median gap (ms).
    pub median_ms: i64,
    /// The longest gap (ms).
    pub longest_ms: i64,
    /// The chart's width.
    pub width: u32,
    /// The chart's height.
    pub height: u32,
    /// Where the bin labels go.
    pub label_y: u32,
}

impl GapHistogram {
    /// From the gaps (ms) of an operation's moves; `None` when none is known.
    pub fn new(gaps: &[i64]) -> Option<Self> {
        if gaps.is_empty() {
            return None;
        }
        let mut sorted = gaps.to_vec();
        sorted.sort_unstable();
        let mut counts = [0usize; GAP_BINS.len()];
        for g in &sorted {
            let i = GAP_BINS
                .iter()
                .position(|(upper, _)| g < upper)
                .unwrap_or(0);
            counts[i] += 1;
        }
        let max = counts.iter().copied().max().unwrap_or(1).max(1);
        let slot = WIDTH / GAP_BINS.len() as u32;
        let top = 16;
        let bins = GAP_BINS
            .iter()
            .zip(counts)
            .enumerate()
            .map(|(i, ((_, label), count))| {
                let h = (count as u64 * u64::from(BARS_H) / max as u64) as u32;
                let x = i as u32 * slot + 4;
                Bin {
                    label,
                    count,
                    x,
                    y: top + BARS_H - h,
                    w: slot - 8,
                    h,
                    count_y: top + BARS_H - h - 4,
                    mid_x: x + (slot - 8) / 2,
                }
            })
            .collect();
        Some(GapHistogram {
            bins,
            count: sorted.len(),
            median_ms: sorted[sorted.len() / 2],
            longest_ms: sorted[sorted.len() - 1],
            width: WIDTH,
            height: top + BARS_H + 22,
            label_y: top + BARS_H + 16,
        })
    }
}

/// One holder's stretch on a target's timeline.
#[derive(Debug, Clone, PartialEq)]
pub struct Segment {
    /// Who held it.
    pub holder: String,
    /// From (ms).
    pub from_ms: i64,
    /// Until (ms); `None`: still holds it.
    pub until_ms: Option<i64>,
    /// The bar.
    pub x: u32,
    /// The bar's width (at least 1).
    pub w: u32,
    /// Its colour (CSS class).
    pub class: &'static str,
    /// Whether its name fits on the bar.
    pub named: bool,
}

/// A stretch with nobody working on a target, between two holders.
#[derive(Debug, Clone, PartialEq)]
pub struct GapMark {
    /// Where the gap starts.
    pub x: u32,
    /// Its drawn width (at least 2, so that a 40 ms gap in an hour is still seen).
    pub w: u32,
    /// How long it was (ms).
    pub ms: i64,
    /// The holder it ended.
    pub to: String,
}

/// Who held one target when, and the gaps between holders, over the span of its history shown.
#[derive(Debug, Clone, PartialEq)]
pub struct Timeline {
    /// The holders' stretches, oldest first.
    pub segments: Vec<Segment>,
    /// The gaps, oldest first.
    pub gaps: Vec<GapMark>,
    /// The span drawn: from (ms).
    pub start_ms: i64,
    /// The span drawn: until (ms).
    pub end_ms: i64,
    /// The chart's width.
    pub width: u32,
}

/// Colour classes.
const CLASSES: [&str; COLOURS] = ["c0", "c1", "c2", "c3", "c4", "c5", "c6", "c7"];

/// The colour of the `i`-th name.
fn colour(names: &mut Vec<String>, name: &str) -> &'static str {
    let i = match names.iter().position(|n| n == name) {
        Some(i) => i,
        None => {
            names.push(name.to_owned());
            names.len() - 1
        }
    };
    CLASSES[i % COLOURS]
}

impl Timeline {
    /// From a target's history (newest first, as the store lists it) up to `now_ms`; `None`
    /// when it has no ownership change.
    pub fn new(history: &[HistoryEntry], now_ms: i64) -> Option<Self> {
        let changes: Vec<&HistoryEntry> = history
            .iter()
            .rev()
            .filter(|e| e.kind == HistoryKind::Ownership)
            .collect();
        let start_ms = changes.first()?.at_ms;
        let end_ms = now_ms.max(changes.last()?.at_ms + 1);
        let scale = |t: i64| -> u32 {
            ((t - start_ms).max(0) as f64 * f64::from(WIDTH) / (end_ms - start_ms) as f64).round()
                as u32
        };
        let mut names = Vec::new();
        let mut segments: Vec<Segment> = Vec::new();
        let mut gaps = Vec::new();
        for (i, e) in changes.iter().enumerate() {
            let next = changes.get(i + 1);
            let Some(holder) = e.to.as_deref() else {
                continue;
            };
            // The next holder's gap, if it took over from this one, ends this holder's work.
            let until_ms = next.map(|n| {
                let gap = if n.from.as_deref() == Some(holder) {
                    n.gap_ms.unwrap_or(0)
                } else {
                    0
                };
                (n.at_ms - gap).max(e.at_ms)
            });
            let x = scale(e.at_ms);
            let w = scale(until_ms.unwrap_or(end_ms)).saturating_sub(x).max(1);
            segments.push(Segment {
                holder: holder.to_owned(),
                from_ms: e.at_ms,
                until_ms,
                x,
                w,
                class: colour(&mut names, holder),
                named: w >= 8 * holder.chars().count() as u32,
            });
            if let (Some(n), Some(until)) = (next, until_ms)
                && let Some(ms) = n.gap_ms.filter(|g| *g > 0)
            {
                gaps.push(GapMark {
                    x: scale(until),
                    w: (scale(n.at_ms).saturating_sub(scale(until))).max(2),
                    ms,
                    to: n.to.clone().unwrap_or_default(),
                });
            }
        }
        Some(Timeline {
            segments,
            gaps,
            start_ms,
            end_ms,
            width: WIDTH,
        })
    }
}

/// One instance's line on [`LoadOverTime`].
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Instance.
    pub member: String,
    /// The SVG polyline's points, a step at each change.
    pub points: String,
    /// Its colour (CSS class).
    pub class: &'static str,
    /// Targets now.
    pub now: usize,
    /// The most it held in the span.
    pub most: usize,
    /// The fewest it held in the span.
    pub fewest: usize,
}

/// Targets per instance over a span of time that ends now, rebuilt from the counts now and
/// the ownership changes in between, walked back in time.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadOverTime {
    /// The lines, busiest now first; at most [`COLOURS`].
    pub series: Vec<Series>,
    /// Instances left out (there are only so many colours).
    pub left_out: usize,
    /// The span: from (ms).
    pub start_ms: i64,
    /// The most targets any instance held in it (the top of the y axis).
    pub max: usize,
    /// The chart's width.
    pub width: u32,
    /// The chart's height.
    pub height: u32,
    /// The plot's top and bottom.
    pub top: u32,
    /// See `top`.
    pub bottom: u32,
}

/// The plot's height in [`LoadOverTime`].
const PLOT_H: u32 = 140;

impl LoadOverTime {
    /// `now`: each instance and its targets at `now_ms`; `history`: the cluster's history,
    /// newest first (only its ownership changes count). `complete`: whether `history` holds
    /// every change since `since_ms`; if not, the span starts at its oldest entry instead.
    /// `None` when there is nothing to draw.
    pub fn new(
        now: &[(String, usize)],
        history: &[HistoryEntry],
        since_ms: i64,
        now_ms: i64,
        complete: bool,
    ) -> Option<Self> {
        if now.is_empty() {
            return None;
        }
        let start_ms = match history.last() {
            Some(oldest) if !complete => oldest.at_ms.max(since_ms),
            _ => since_ms,
        };
        if start_ms >= now_ms {
            return None;
        }
        // Walk back from now: just before a change, its new holder had one target fewer and
        // its old holder one more. `back`: (when, the count in force from then on), newest
        // first, starting with the count now.
        let mut lines: Vec<(String, Vec<(i64, i64)>)> = now
            .iter()
            .map(|(m, n)| (m.clone(), vec![(now_ms, *n as i64)]))
            .collect();
        for e in history
            .iter()
            .filter(|e| e.kind == HistoryKind::Ownership && e.at_ms >= start_ms)
        {
            for (who, delta) in [(&e.to, -1), (&e.from, 1)] {
                let Some((_, back)) = who
                    .as_deref()
                    .and_then(|w| lines.iter_mut().find(|(m, _)| m == w))
                else {
                    continue;
                };
                let before = (back[back.len() - 1].1 + delta).max(0);
                // The count after this change is the one the newer entry holds; this entry
                // now says what held before it, until the next older change.
                back.push((e.at_ms, before));
            }
        }
        lines.sort_by(|a, b| b.1[0].1.cmp(&a.1[0].1).then_with(|| a.0.cmp(&b.0)));
        let left_out = lines.len().saturating_sub(COLOURS);
        lines.truncate(COLOURS);
        let max = lines
            .iter()
            .flat_map(|(_, back)| back.iter().map(|(_, n)| *n))
            .max()
            .unwrap_or(0)
            .max(1);
        let (top, bottom) = (8, 8 + PLOT_H);
        let x = |t: i64| (t - start_ms) as f64 * f64::from(WIDTH) / (now_ms - start_ms) as f64;
        let y = |n: i64| f64::from(bottom) - n as f64 * f64::from(PLOT_H) / max as f64;
        let series = lines
            .into_iter()
            .enumerate()
            .map(|(i, (member, back))| {
                // back = [(now, n_now), (t1, before t1), (t2, before t2), …], t1 > t2 > …:
                // the count from the start to the oldest change is the last entry's; at each
                // change the count becomes the one of the entry before it in `back`.
                let mut level = back[back.len() - 1].1;
                let (mut most, mut fewest) = (level, level);
                let mut points = format!("0,{:.1}", y(level));
                for k in (1..back.len()).rev() {
                    let at = back[k].0;
                    points.push_str(&format!(" {:.1},{:.1}", x(at), y(level)));
                    level = back[k - 1].1;
                    points.push_str(&format!(" {:.1},{:.1}", x(at), y(level)));
                    most = most.max(level);
                    fewest = fewest.min(level);
                }
                points.push_str(&format!(" {WIDTH},{:.1}", y(level)));
                Series {
                    now: level as usize,
                    most: most as usize,
                    fewest: fewest as usize,
                    member,
                    points,
                    class: CLASSES[i % COLOURS],
                }
            })
            .collect();
        Some(LoadOverTime {
            series,
            left_out,
            start_ms,
            max: max as usize,
            width: WIDTH,
            height: bottom + 8,
            top,
            bottom,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::ui::story::move_entry;
    use crate::model::Cause;

    fn moved(
        target: &str,
        from: Option<&str>,
        to: &str,
        at_ms: i64,
        gap: Option<i64>,
    ) -> HistoryEntry {
        move_entry(target, (from, to), Cause::Handoff, None, at_ms, gap)
    }

    #[test]
    fn load_bars_scale_to_the_busiest_instance() {
        let c = LoadChart::new([("a".into(), 10, 5), ("b".into(), 5, 5), ("c".into(), 0, 5)]);
        let w: Vec<_> = c
            .rows
            .iter()
            .map(|r| (r.member.as_str(), r.before_w, r.after_w))
            .collect();
        assert_eq!(w, [("a", 480, 240), ("b", 240, 240), ("c", 0, 240)]);
        assert_eq!(c.rows[2].y, 2 * ROW);
        assert_eq!(c.height, 3 * ROW + 4);
    }

    #[test]
    fn gaps_fall_in_their_bins_and_the_tallest_bar_is_full_height() {
        assert_eq!(GapHistogram::new(&[]), None);
        let h = GapHistogram::new(&[3, 9, 10, 41, 41, 41, 260, 9_300, 12_000]).unwrap();
        let counts: Vec<_> = h.bins.iter().map(|b| (b.label, b.count)).collect();
        assert_eq!(
            counts,
            [
                ("< 10 ms", 2),
                ("10–25 ms", 1),
                ("25–50 ms", 3),
                ("50–100 ms", 0),
                ("0.1–0.25 s", 0),
                ("0.25–0.5 s", 1),
                ("0.5–1 s", 0),
                ("1–2.5 s", 0),
                ("2.5–10 s", 1),
                ("≥ 10 s", 1),
            ]
        );
        assert_eq!((h.count, h.median_ms, h.longest_ms), (9, 41, 12_000));
        assert_eq!(h.bins[2].h, BARS_H);
        assert_eq!(h.bins[3].h, 0);
        assert_eq!(h.bins[0].h, BARS_H * 2 / 3);
    }

    /// a from 0, a → b at 10 s (gap 1 s), b → a at 20 s (no gap), now 40 s: three stretches
    /// over the 40 s drawn, the gap between a and b where it was.
    #[test]
    fn a_timeline_shows_each_holder_and_each_gap_where_they_were() {
        let newest_first = vec![
            moved("t", Some("b"), "a", 20_000, Some(0)),
            moved("t", Some("a"), "b", 10_000, Some(1_000)),
            moved("t", None, "a", 0, None),
        ];
        let t = Timeline::new(&newest_first, 40_000).unwrap();
        let stretches: Vec<_> = t
            .segments
            .iter()
            .map(|s| (s.holder.as_str(), s.from_ms, s.until_ms, s.x, s.w, s.class))
            .collect();
        assert_eq!(
            stretches,
            [
                ("a", 0, Some(9_000), 0, 162, "c0"),
                ("b", 10_000, Some(20_000), 180, 180, "c1"),
                ("a", 20_000, None, 360, 360, "c0"),
            ]
        );
        assert_eq!(
            t.gaps,
            [GapMark {
                x: 162,
                w: 18,
                ms: 1_000,
                to: "b".into()
            }]
        );
        assert_eq!((t.start_ms, t.end_ms), (0, 40_000));
        assert_eq!(Timeline::new(&[], 1), None);
    }

    /// Now a holds 3 and b 1; 30 s ago b took one from a, 20 s ago a got a new one: the lines
    /// walk back to a 3 → 2 → 3 and b 0 → 1, and the tallest count tops the plot.
    #[test]
    fn load_over_time_is_rebuilt_from_the_counts_now_and_the_changes_back() {
        let now = [("a".to_owned(), 3), ("b".to_owned(), 1)];
        let newest_first = vec![
            moved("t2", None, "a", 40_000, None),
            moved("t1", Some("a"), "b", 30_000, Some(50)),
        ];
        let l = LoadOverTime::new(&now, &newest_first, 0, 60_000, true).unwrap();
        assert_eq!(l.max, 3);
        let a = &l.series[0];
        assert_eq!((a.member.as_str(), a.now, a.most, a.fewest), ("a", 3, 3, 2));
        // 0 s: 3; 30 s: 2; 40 s: 3 (x: 720 per 60 s, y: bottom 148 minus 140 / 3 per target).
        assert_eq!(
            a.points,
            "0,8.0 360.0,8.0 360.0,54.7 480.0,54.7 480.0,8.0 720,8.0"
        );
        let b = &l.series[1];
        assert_eq!((b.member.as_str(), b.now, b.most, b.fewest), ("b", 1, 1, 0));
        assert_eq!(b.points, "0,148.0 360.0,148.0 360.0,101.3 720,101.3");
        // History that stops short of the span asked for starts the span at its oldest entry.
        let short = LoadOverTime::new(&now, &newest_first, 0, 60_000, false).unwrap();
        assert_eq!(short.start_ms, 30_000);
        assert_eq!(LoadOverTime::new(&[], &newest_first, 0, 60_000, true), None);
    }
}
