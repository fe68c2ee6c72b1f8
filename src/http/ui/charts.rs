//! The dashboard's pictures, drawn server-side as SVG sized by attributes (the strict CSP
//! allows no inline style, and nothing is loaded from anywhere else), each with its numbers
//! also in a table or a list for those who cannot see it:
//!
//! - [`LoadChart`]: targets per instance before and after (a plan, an operation);
//! - [`GapHistogram`]: how long targets had nobody working on them, per move of an operation;
//! - [`Timeline`]: who held one target when, and each gap between two holders;
//! - [`LoadOverTime`]: targets per instance over the last minutes of a cluster ([`Window`]),
//!   on a count axis and a time axis.
//!
//! A member is drawn in the same colour (and, for lines, dash pattern) wherever it appears,
//! fixed by its name, not by its place in a list ([`styles`]).
//!
//! Pure: from rows of history and counts to coordinates; the templates only place them.

use std::collections::{BTreeSet, HashMap};

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

/// Series and holders get one of this many colours (CSS classes `c0`…`c7`), each member its
/// own by its name ([`styles`]).
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
/// A line's dash pattern, besides its colour (CSS classes `d0`…`d3`; `d0` is solid), so that
/// lines stay apart for people who tell few colours apart, and where two share a colour.
const DASHES: usize = 4;
/// Dash classes.
const DASH_CLASSES: [&str; DASHES] = ["d0", "d1", "d2", "d3"];

/// FNV-1a (64 bits) of a name: the same on every run, build and platform (std's hasher
/// promises none of that), so that a member's colour is its own for good.
fn name_hash(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The style (one of `count`) each of `names` is drawn in: the one its name hashes to, so that
/// it changes neither with the order of a list nor with who else is drawn — unless a name
/// before it in name order already took that style in this picture; then the next free one,
/// so that no two members of one picture look alike while there are styles to go round.
fn styles<'a>(names: impl IntoIterator<Item = &'a str>, count: usize) -> HashMap<&'a str, usize> {
    let names: BTreeSet<&str> = names.into_iter().collect();
    let mut taken = vec![false; count];
    let mut out = HashMap::new();
    for name in names {
        let own = (name_hash(name) % count as u64) as usize;
        let style = (0..count)
            .map(|k| (own + k) % count)
            .find(|s| !taken[*s])
            .unwrap_or(own);
        taken[style] = true;
        out.insert(name, style);
    }
    out
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
        let colour = styles(changes.iter().filter_map(|e| e.to.as_deref()), COLOURS);
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
                class: CLASSES[colour.get(holder).copied().unwrap_or(0)],
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

/// A span of time the cluster page's load chart can show, chosen with `?window=` on the page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Window {
    /// The last 5 minutes.
    FiveMinutes,
    /// The last 15 minutes (the default).
    FifteenMinutes,
    /// The last 30 minutes.
    ThirtyMinutes,
    /// The last 2 hours (as far as the page's kept history reaches: see [`LoadOverTime::new`]).
    TwoHours,
}

impl Window {
    /// Every window offered, shortest first.
    pub const ALL: [Window; 4] = [
        Window::FiveMinutes,
        Window::FifteenMinutes,
        Window::ThirtyMinutes,
        Window::TwoHours,
    ];
    /// Without `?window=`: long enough for a failover and its rebalance, short enough that a
    /// move is more than a pixel wide.
    pub const DEFAULT: Window = Window::FifteenMinutes;

    /// Its word in a query string.
    pub fn word(self) -> &'static str {
        match self {
            Window::FiveMinutes => "5m",
            Window::FifteenMinutes => "15m",
            Window::ThirtyMinutes => "30m",
            Window::TwoHours => "2h",
        }
    }

    /// How long it is (ms).
    pub fn ms(self) -> i64 {
        let minutes = match self {
            Window::FiveMinutes => 5,
            Window::FifteenMinutes => 15,
            Window::ThirtyMinutes => 30,
            Window::TwoHours => 120,
        };
        minutes * 60_000
    }

    /// The window a page's query string asks for (`window=`), [`Window::DEFAULT`] when it asks
    /// for none; a word it does not know is refused, naming the ones it does.
    pub fn from_query(query: Option<&str>) -> Result<Window, String> {
        let asked = form_urlencoded::parse(query.unwrap_or_default().as_bytes())
            .find(|(k, _)| k == "window")
            .map(|(_, v)| v.into_owned());
        let Some(asked) = asked else {
            return Ok(Window::DEFAULT);
        };
        Window::ALL
            .into_iter()
            .find(|w| w.word() == asked)
            .ok_or_else(|| {
                let words: Vec<&str> = Window::ALL.iter().map(|w| w.word()).collect();
                format!("window must be one of {}, not {asked:?}", words.join(", "))
            })
    }
}

/// One of the windows as the page offers it.
#[derive(Debug, Clone, PartialEq)]
pub struct WindowChoice {
    /// Its word in the query string.
    pub word: &'static str,
    /// For people ("30 min").
    pub label: String,
    /// Whether the chart shows it.
    pub current: bool,
}

/// A mark on an axis and its label.
#[derive(Debug, Clone, PartialEq)]
pub struct Tick {
    /// Where on the axis (SVG units, to a tenth).
    pub at: f64,
    /// Where its label's baseline or anchor goes.
    pub label_at: f64,
    /// What it says: a count, or a time of day (UTC).
    pub label: String,
}

/// One instance's line on [`LoadOverTime`].
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Instance.
    pub member: String,
    /// The SVG polyline's points, a step at each change (in its lane: see [`LANE`]).
    pub points: String,
    /// Its colour and dash pattern (CSS classes `cN dN`), fixed by its name ([`styles`]).
    pub class: String,
    /// Targets now.
    pub now: usize,
    /// The most it held in the span.
    pub most: usize,
    /// The fewest it held in the span.
    pub fewest: usize,
}

/// Targets per instance over a span of time that ends now, rebuilt from the counts now and
/// the ownership changes in between, walked back in time; with a count axis, a time axis
/// (UTC) and the windows it can show.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadOverTime {
    /// The lines, busiest now first; at most [`COLOURS`].
    pub series: Vec<Series>,
    /// Instances left out (more lines than this could not be told apart).
    pub left_out: usize,
    /// The span: from (ms).
    pub start_ms: i64,
    /// The span for people ("15 min"): the window, or less when the kept history is shorter.
    pub span: String,
    /// The window asked for.
    pub window: Window,
    /// Every window, for the page's choice.
    pub windows: Vec<WindowChoice>,
    /// The top of the count axis: the most any instance held in the span, rounded up to a
    /// whole step of the axis.
    pub max: usize,
    /// The count axis's marks, 0 first.
    pub y_ticks: Vec<Tick>,
    /// The time axis's marks, at round times (UTC), oldest first.
    pub x_ticks: Vec<Tick>,
    /// The chart's width.
    pub width: u32,
    /// The chart's height.
    pub height: u32,
    /// The plot's top and bottom.
    pub top: u32,
    /// See `top`.
    pub bottom: u32,
    /// The plot's left and right edges (the count labels are left of it).
    pub left: u32,
    /// See `left`.
    pub right: u32,
}

/// The plot's height in [`LoadOverTime`].
const PLOT_H: u32 = 140;
/// Room left of the plot for the count labels.
const PLOT_LEFT: u32 = 44;
/// Room right of the plot, for half of the last time label.
const PLOT_RIGHT_MARGIN: u32 = 18;
/// Room above the plot, for the count axis's title.
const PLOT_TOP: u32 = 26;
/// Lines are drawn this far apart (SVG units), each in its lane, so that equal counts show
/// as lines side by side rather than one hiding the others; the lanes together span at most
/// [`LANES_MAX`].
const LANE: f64 = 2.5;
/// See [`LANE`].
const LANES_MAX: f64 = 12.0;
/// Steps of the time axis (ms): the first that gives at most [`TIME_MARKS`] marks is used.
const TIME_STEPS: [i64; 12] = [
    10_000, 15_000, 30_000, 60_000, 120_000, 300_000, 600_000, 900_000, 1_800_000, 3_600_000,
    7_200_000, 21_600_000,
];
/// At most this many marks on the time axis (each label is about 30 units wide).
const TIME_MARKS: i64 = 6;

/// To a tenth of an SVG unit.
fn tenth(v: f64) -> f64 {
    (v * 10.0).round() / 10.0
}

/// The count axis's step: the first of 1, 2, 5, 10, 20, 50, … that reaches `max` in at most
/// four steps.
fn count_step(max: i64) -> i64 {
    let mut scale = 1;
    loop {
        for m in [1, 2, 5] {
            if max <= 4 * m * scale {
                return m * scale;
            }
        }
        scale *= 10;
    }
}

/// Marks at round times (UTC) from `start_ms` to `end_ms`, placed by `x`.
fn time_ticks(start_ms: i64, end_ms: i64, label_y: f64, x: impl Fn(i64) -> f64) -> Vec<Tick> {
    let span = end_ms - start_ms;
    let step = TIME_STEPS
        .into_iter()
        .find(|s| span / s <= TIME_MARKS)
        .unwrap_or(TIME_STEPS[TIME_STEPS.len() - 1]);
    let format = if step < 60_000 { "%H:%M:%S" } else { "%H:%M" };
    let first = start_ms.div_euclid(step) * step;
    let first = if first < start_ms {
        first + step
    } else {
        first
    };
    std::iter::successors(Some(first), |t| Some(t + step))
        .take_while(|t| *t <= end_ms)
        .map(|t| Tick {
            at: tenth(x(t)),
            label_at: label_y,
            label: jiff::Timestamp::from_millisecond(t)
                .map(|ts| ts.strftime(format).to_string())
                .unwrap_or_default(),
        })
        .collect()
}

impl LoadOverTime {
    /// `now`: each instance and its targets at `now_ms`; `history`: the cluster's history,
    /// newest first (only its ownership changes count); `window`: how far back to draw.
    /// `complete`: whether `history` holds every change since the window's start; if not, the
    /// span starts at its oldest entry instead. `None` when there is nothing to draw.
    pub fn new(
        now: &[(String, usize)],
        history: &[HistoryEntry],
        window: Window,
        now_ms: i64,
        complete: bool,
    ) -> Option<Self> {
        if now.is_empty() {
            return None;
        }
        let since_ms = now_ms - window.ms();
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
        let most = lines
            .iter()
            .flat_map(|(_, back)| back.iter().map(|(_, n)| *n))
            .max()
            .unwrap_or(0)
            .max(1);
        let step = count_step(most);
        let max = (most + step - 1) / step * step;
        let (top, bottom) = (PLOT_TOP, PLOT_TOP + PLOT_H);
        let (left, right) = (PLOT_LEFT, WIDTH - PLOT_RIGHT_MARGIN);
        let x = |t: i64| {
            f64::from(left)
                + (t - start_ms) as f64 * f64::from(right - left) / (now_ms - start_ms) as f64
        };
        let y = |n: i64| f64::from(bottom) - n as f64 * f64::from(PLOT_H) / max as f64;
        let style = styles(lines.iter().map(|(m, _)| m.as_str()), COLOURS * DASHES);
        // Lanes in name order, so that a member keeps its lane whatever the counts do.
        let mut by_name: Vec<&str> = lines.iter().map(|(m, _)| m.as_str()).collect();
        by_name.sort_unstable();
        let lane = if by_name.len() > 1 {
            LANE.min(LANES_MAX / (by_name.len() - 1) as f64)
        } else {
            0.0
        };
        let middle = (by_name.len() as f64 - 1.0) / 2.0;
        let series = lines
            .iter()
            .map(|(member, back)| {
                let rank = by_name.iter().position(|m| m == member).unwrap_or(0);
                let offset = (rank as f64 - middle) * lane;
                let y = |n: i64| y(n) + offset;
                // back = [(now, n_now), (t1, before t1), (t2, before t2), …], t1 > t2 > …:
                // the count from the start to the oldest change is the last entry's; at each
                // change the count becomes the one of the entry before it in `back`.
                let mut level = back[back.len() - 1].1;
                let (mut most, mut fewest) = (level, level);
                let y = |n: i64| tenth(y(n));
                let mut points = format!("{left},{}", y(level));
                for k in (1..back.len()).rev() {
                    let at = tenth(x(back[k].0));
                    points.push_str(&format!(" {at},{}", y(level)));
                    level = back[k - 1].1;
                    points.push_str(&format!(" {at},{}", y(level)));
                    most = most.max(level);
                    fewest = fewest.min(level);
                }
                points.push_str(&format!(" {right},{}", y(level)));
                let s = style.get(member.as_str()).copied().unwrap_or(0);
                Series {
                    now: level as usize,
                    most: most as usize,
                    fewest: fewest as usize,
                    member: member.clone(),
                    points,
                    class: format!("{} {}", CLASSES[s % COLOURS], DASH_CLASSES[s / COLOURS]),
                }
            })
            .collect();
        let y_ticks = (0..=max / step)
            .map(|k| {
                let at = tenth(y(k * step));
                Tick {
                    at,
                    label_at: at + 4.0,
                    label: (k * step).to_string(),
                }
            })
            .collect();
        let x_ticks = time_ticks(start_ms, now_ms, f64::from(bottom + 22), x);
        Some(LoadOverTime {
            series,
            left_out,
            start_ms,
            span: super::page::span(now_ms - start_ms),
            window,
            windows: Window::ALL
                .into_iter()
                .map(|w| WindowChoice {
                    word: w.word(),
                    label: super::page::span(w.ms()),
                    current: w == window,
                })
                .collect(),
            max: max as usize,
            y_ticks,
            x_ticks,
            width: WIDTH,
            height: bottom + 46,
            top,
            bottom,
            left,
            right,
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
    /// over the 40 s drawn, the gap between a and b where it was, each holder in its colour.
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
            .map(|s| (s.holder.as_str(), s.from_ms, s.until_ms, s.x, s.w))
            .collect();
        assert_eq!(
            stretches,
            [
                ("a", 0, Some(9_000), 0, 162),
                ("b", 10_000, Some(20_000), 180, 180),
                ("a", 20_000, None, 360, 360),
            ]
        );
        let colours: Vec<_> = t.segments.iter().map(|s| s.class).collect();
        let own = |name: &str| CLASSES[(name_hash(name) % COLOURS as u64) as usize];
        assert_eq!(colours, [own("a"), own("b"), own("a")]);
        assert_ne!(own("a"), own("b"));
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

    /// A member's style is its name's, whatever the order names come in and whoever else is
    /// drawn; only a name that would look like one before it (in name order) moves on to the
    /// next free style.
    #[test]
    fn each_member_keeps_the_style_of_its_name() {
        let count = COLOURS * DASHES;
        let own = |name: &str| (name_hash(name) % count as u64) as usize;
        let three = styles(["c-2", "c-0", "c-1"], count);
        let reversed = styles(["c-1", "c-0", "c-2"], count);
        assert_eq!(three, reversed);
        for n in ["c-0", "c-1", "c-2"] {
            assert_eq!(three[n], own(n), "{n}");
        }
        // A newcomer changes nobody's style; neither does one leaving.
        let four = styles(["c-0", "c-1", "c-2", "c-3"], count);
        assert!(["c-0", "c-1", "c-2"].iter().all(|n| four[n] == three[n]));
        assert_eq!(styles(["c-2"], count)["c-2"], three["c-2"]);
        // Names that differ only in their last character get different colours.
        let colours: BTreeSet<usize> = (0..8)
            .map(|i| own(&format!("collector-{i}")) % COLOURS)
            .collect();
        assert_eq!(colours.len(), 8);
        // Two names with one style: the later in name order takes the next free one.
        let a = "m-0";
        let b = (1..10_000)
            .map(|i| format!("m-{i}"))
            .find(|b| own(b) == own(a))
            .unwrap();
        let both = styles([b.as_str(), a], count);
        assert_eq!(both[a], own(a));
        assert_eq!(both[b.as_str()], (own(a) + 1) % count);
        // More names than styles: the rest keep their own.
        let many: Vec<String> = (0..40).map(|i| format!("n-{i}")).collect();
        let s = styles(many.iter().map(String::as_str), count);
        assert_eq!(s.values().collect::<BTreeSet<_>>().len(), count);
    }

    /// Now a holds 3 and b 1; 30 s ago b took one from a, 20 s ago a got a new one: the lines
    /// walk back to a 3 → 2 → 3 and b 0 → 1, each in its lane, and the tallest count tops the
    /// plot.
    #[test]
    fn load_over_time_is_rebuilt_from_the_counts_now_and_the_changes_back() {
        let now = [("a".to_owned(), 3), ("b".to_owned(), 1)];
        let newest_first = [
            moved("t2", None, "a", 40_000, None),
            moved("t1", Some("a"), "b", 30_000, Some(50)),
        ];
        let window = Window::FiveMinutes;
        let now_ms = window.ms() + 60_000;
        let since = now_ms - window.ms();
        // History from `since` on, shifted so that the changes are 30 and 40 s into the minute
        // before now (the window starts 4 minutes before that).
        let shifted: Vec<HistoryEntry> = newest_first
            .iter()
            .map(|e| HistoryEntry {
                at_ms: e.at_ms + since + 4 * 60_000,
                ..e.clone()
            })
            .collect();
        let l = LoadOverTime::new(&now, &shifted, window, now_ms, true).unwrap();
        assert_eq!((l.max, l.start_ms, l.span.as_str()), (3, since, "5 min"));
        let a = &l.series[0];
        assert_eq!((a.member.as_str(), a.now, a.most, a.fewest), ("a", 3, 3, 2));
        // x: 44 + 658 per 5 min (the change at 4.5 min: 636.2, at 4 min 40 s: 658.1);
        // y: bottom 166 minus 140 / 3 per target, a's lane 1.25 above, b's 1.25 below.
        assert_eq!(
            a.points,
            "44,24.8 636.2,24.8 636.2,71.4 658.1,71.4 658.1,24.8 702,24.8"
        );
        let b = &l.series[1];
        assert_eq!((b.member.as_str(), b.now, b.most, b.fewest), ("b", 1, 1, 0));
        assert_eq!(b.points, "44,167.3 636.2,167.3 636.2,120.6 702,120.6");
        assert_ne!(a.class, b.class);
        // History that stops short of the span asked for starts the span at its oldest entry.
        let short = LoadOverTime::new(&now, &shifted, window, now_ms, false).unwrap();
        assert_eq!(short.start_ms, shifted[1].at_ms);
        assert_eq!(short.span, "30 s");
        assert_eq!(LoadOverTime::new(&[], &shifted, window, now_ms, true), None);
    }

    fn y_of_first(s: &Series) -> f64 {
        s.points.split([' ', ',']).nth(1).unwrap().parse().unwrap()
    }

    /// The count axis steps 1, 2, 5, 10… up to the first step at or above the busiest; the time
    /// axis marks round times in UTC, at most six of them.
    #[test]
    fn the_axes_are_marked_in_round_counts_and_round_times() {
        assert_eq!(
            [1, 3, 4, 5, 7, 9, 20, 21, 40, 41, 300].map(count_step),
            [1, 1, 1, 2, 2, 5, 5, 10, 10, 20, 100]
        );
        let now = [("a".to_owned(), 7), ("b".to_owned(), 7)];
        // 2026-01-01 12:07:30 UTC, 15 minutes back: marks every 5 minutes from 11:55.
        let now_ms = 1_767_269_250_000;
        let l = LoadOverTime::new(&now, &[], Window::FifteenMinutes, now_ms, true).unwrap();
        assert_eq!(l.max, 8);
        let y: Vec<_> = l.y_ticks.iter().map(|t| (t.label.as_str(), t.at)).collect();
        assert_eq!(
            y,
            [
                ("0", 166.0),
                ("2", 131.0),
                ("4", 96.0),
                ("6", 61.0),
                ("8", 26.0)
            ]
        );
        let x: Vec<_> = l.x_ticks.iter().map(|t| t.label.as_str()).collect();
        assert_eq!(x, ["11:55", "12:00", "12:05"]);
        assert!(l.x_ticks.iter().all(|t| (44.0..=702.0).contains(&t.at)));
        // Equal counts do not hide each other: their lines are a lane apart.
        assert_eq!(y_of_first(&l.series[1]) - y_of_first(&l.series[0]), LANE);
        let two_hours = LoadOverTime::new(&now, &[], Window::TwoHours, now_ms, true).unwrap();
        let x: Vec<_> = two_hours.x_ticks.iter().map(|t| t.label.as_str()).collect();
        assert_eq!(x, ["10:30", "11:00", "11:30", "12:00"]);
        let windows: Vec<_> = l
            .windows
            .iter()
            .map(|w| (w.word, w.label.as_str(), w.current))
            .collect();
        assert_eq!(
            windows,
            [
                ("5m", "5 min", false),
                ("15m", "15 min", true),
                ("30m", "30 min", false),
                ("2h", "2 h", false)
            ]
        );
    }

    #[test]
    fn the_window_is_read_from_the_query() {
        assert_eq!(Window::from_query(None), Ok(Window::DEFAULT));
        assert_eq!(Window::from_query(Some("demo=added")), Ok(Window::DEFAULT));
        assert_eq!(
            Window::from_query(Some("demo=added&window=2h")),
            Ok(Window::TwoHours)
        );
        assert_eq!(
            Window::from_query(Some("window=1d")),
            Err("window must be one of 5m, 15m, 30m, 2h, not \"1d\"".to_owned())
        );
    }

    /// The cluster page's chart as `_load_over_time.html` draws it.
    #[derive(askama::Template)]
    #[template(path = "_load_over_time.html")]
    struct Drawn {
        load: Option<LoadOverTime>,
    }

    /// The chart has its axes labelled, a legend line per member in its own colour and dash, a
    /// link per window (the one shown marked), and its numbers in a table.
    #[test]
    fn the_chart_draws_axes_a_legend_and_the_windows() {
        use askama::Template as _;
        let now = [("c-0".to_owned(), 20), ("c-1".to_owned(), 20)];
        let now_ms = 1_767_269_250_000;
        let load = LoadOverTime::new(&now, &[], Window::ThirtyMinutes, now_ms, true);
        let html = Drawn { load: load.clone() }.render().unwrap();
        let l = load.unwrap();
        for s in &l.series {
            assert_eq!(html.matches(&format!("class=\"{}\"", s.class)).count(), 2);
        }
        for t in l.x_ticks.iter().chain(&l.y_ticks) {
            assert!(
                html.contains(&format!(">{}</text>", t.label)),
                "{}",
                t.label
            );
        }
        assert!(html.contains(">time (UTC)</text>") && html.contains(">targets</text>"));
        assert!(html.contains(r#"href="?window=30m#load-h" aria-current="true""#));
        for w in ["5m", "15m", "2h"] {
            assert!(
                html.contains(&format!(r#"href="?window={w}#load-h">"#)),
                "{w}"
            );
        }
        assert!(html.contains("<td>c-1</td><td class=\"num\">20</td>"));
        assert_eq!(Drawn { load: None }.render().unwrap().trim(), "");
    }
}
