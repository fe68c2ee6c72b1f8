//! How many Lease writes may be in flight at once — the control plane's (`engine::control`)
//! and each member's target Lease writes (`agent::member`): a limit that adapts to the API
//! server's observed latency (additive increase, multiplicative decrease, as TCP and Netflix's
//! concurrency-limits do), instead of a fixed number. A first placement or a rebalance of
//! thousands of targets then goes as fast as the server answers promptly, and backs off as
//! soon as its answers slow down or it refuses (429, 5xx, a timeout) — the members' renewals
//! share that server (a member's own renewal never waits for this limit). Pure: the caller
//! measures, this decides.

use std::time::{Duration, Instant};

/// Fewest writes in flight, however slow the server.
pub const MIN_LIMIT: usize = 2;
/// Most writes in flight, however fast the server.
pub const MAX_LIMIT: usize = 64;
/// Where a new limiter starts.
pub const INITIAL_LIMIT: usize = 8;
/// A write is late when it took more than this many times the baseline latency…
const TOLERANCE: f64 = 4.0;
/// …and more than this (below it, a few ms of jitter on a fast server is not congestion).
const LATE_FLOOR: Duration = Duration::from_millis(50);
/// What a decrease keeps of the limit.
const BACKOFF: f64 = 0.7;
/// How fast the baseline forgets an old minimum (per sample, as a share of the difference).
const BASELINE_DRIFT: f64 = 0.01;

/// How one write went, as the limiter sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sample {
    /// Answered (done, or refused on its merits: 404, 409, 422) after this long.
    Answered(Duration),
    /// Refused for load (429, 5xx) or not answered in time.
    Overloaded,
}

/// The adaptive limit of writes in flight.
#[derive(Debug, Clone)]
pub struct Limiter {
    limit: f64,
    /// The lowest recent latency, drifting up slowly so that a server that became slower for
    /// good is not compared with its past for ever.
    baseline: Option<Duration>,
    /// No second decrease for writes that started before the last one (they saw the old load).
    decreased_at: Option<Instant>,
    /// [`Limiter::prompt_within`]'s budget: lateness is then the running average of the answers
    /// (`average`) more than this above the baseline, not one answer against it.
    budget: Option<Duration>,
    /// The running average of the answers (as TCP's smoothed round-trip time, gain 1/8), kept
    /// with a budget.
    average: Option<Duration>,
}

impl Default for Limiter {
    fn default() -> Self {
        Limiter {
            limit: INITIAL_LIMIT as f64,
            baseline: None,
            decreased_at: None,
            budget: None,
            average: None,
        }
    }
}

impl Limiter {
    /// A limiter starting at `limit` (within the bounds) instead of [`INITIAL_LIMIT`].
    pub fn starting_at(limit: usize) -> Self {
        Limiter {
            limit: limit.clamp(MIN_LIMIT, MAX_LIMIT) as f64,
            ..Limiter::default()
        }
    }

    /// Late means the running average of the answers (gain 1/8, as TCP's smoothed round-trip
    /// time, RFC 6298) more than `budget` above the baseline, instead of one answer more than
    /// [`TOLERANCE`] times it: for writes whose latency is a cost someone waits for — a
    /// hand-over's is the gap of its target — the limit grows until the answers wait about
    /// that long in the server's queue. On a busy machine one answer in a round is always
    /// late; judged one by one, the limit then never grows past a few.
    pub fn prompt_within(mut self, budget: Duration) -> Self {
        self.budget = Some(budget);
        self
    }

    /// Keeps the limit at most `ceiling` (a configured bound below [`MAX_LIMIT`]), so that it
    /// does not grow where it cannot be used and then take rounds to come down.
    pub fn cap(&mut self, ceiling: usize) {
        self.limit = self.limit.min(ceiling.max(MIN_LIMIT) as f64);
    }

    /// Writes that may be in flight now.
    pub fn limit(&self) -> usize {
        (self.limit as usize).clamp(MIN_LIMIT, MAX_LIMIT)
    }

    /// The latency writes are compared with (none before the first answer).
    pub fn baseline(&self) -> Option<Duration> {
        self.baseline
    }

    /// A write sent at `sent` went as `sample`, and `now` is when that was seen.
    pub fn observe(&mut self, sent: Instant, sample: Sample, now: Instant) {
        let congested = match sample {
            Sample::Overloaded => true,
            Sample::Answered(latency) => {
                let baseline = match self.baseline {
                    Some(b) if latency < b => latency,
                    Some(b) => b + (latency - b).mul_f64(BASELINE_DRIFT),
                    None => latency,
                };
                self.baseline = Some(baseline);
                match self.budget {
                    None => {
                        latency > LATE_FLOOR
                            && latency.as_secs_f64() > TOLERANCE * baseline.as_secs_f64()
                    }
                    Some(budget) => {
                        let average = match self.average {
                            Some(a) if latency >= a => a + (latency - a) / 8,
                            Some(a) => a - (a - latency) / 8,
                            None => latency,
                        };
                        self.average = Some(average);
                        average > baseline + budget
                    }
                }
            }
        };
        if congested {
            // Once per round: writes in flight when the limit went down saw the old load.
            if self.decreased_at.is_none_or(|t| sent >= t) {
                self.limit = (self.limit * BACKOFF).max(MIN_LIMIT as f64);
                self.decreased_at = Some(now);
            }
        } else {
            // About one more per round of `limit` writes answered promptly.
            self.limit = (self.limit + 1.0 / self.limit).min(MAX_LIMIT as f64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const FAST: Duration = Duration::from_millis(5);

    #[test]
    fn a_prompt_server_earns_the_most_and_a_refusing_one_the_fewest() {
        let mut l = Limiter::default();
        let t0 = Instant::now();
        assert_eq!(l.limit(), INITIAL_LIMIT);
        for i in 0..10_000u64 {
            let at = t0 + Duration::from_millis(i);
            l.observe(at, Sample::Answered(FAST), at + FAST);
        }
        assert_eq!(l.limit(), MAX_LIMIT);
        assert_eq!(l.baseline(), Some(FAST));
        for i in 0..100u64 {
            let at = t0 + Duration::from_secs(20 + i);
            l.observe(at, Sample::Overloaded, at + FAST);
        }
        assert_eq!(l.limit(), MIN_LIMIT);
    }

    #[test]
    fn slow_answers_are_congestion_once_per_round_and_a_fast_server_jitter_is_not() {
        let mut l = Limiter::default();
        let t0 = Instant::now();
        for i in 0..100u64 {
            let at = t0 + Duration::from_millis(i);
            l.observe(at, Sample::Answered(FAST), at + FAST);
        }
        let before = l.limit;
        // 40 ms is 8× the baseline but under the floor: not late.
        let at = t0 + Duration::from_secs(1);
        l.observe(at, Sample::Answered(Duration::from_millis(40)), at);
        assert!(l.limit > before);
        // A whole round of late answers, all sent before the first was seen: one decrease.
        let before = l.limit;
        let seen = t0 + Duration::from_secs(3);
        for i in 0..20u64 {
            let sent = t0 + Duration::from_secs(2) + Duration::from_millis(i);
            l.observe(sent, Sample::Answered(Duration::from_millis(500)), seen);
        }
        assert!(
            (l.limit - before * BACKOFF).abs() < 1e-9,
            "{} vs {before}",
            l.limit
        );
        // Sent after that decrease and late too: the next.
        let sent = seen + Duration::from_millis(1);
        l.observe(sent, Sample::Overloaded, sent + FAST);
        assert!((l.limit - before * BACKOFF * BACKOFF).abs() < 1e-9);
    }

    /// A budgeted limiter (`prompt_within`) grows while its answers average within the budget
    /// above the fastest, however many single answers are late, and comes down once the
    /// average is over it.
    #[test]
    fn a_budget_is_judged_on_the_average_answer() {
        let budget = Duration::from_millis(60);
        let mut l = Limiter::starting_at(4).prompt_within(budget);
        let mut plain = Limiter::starting_at(4);
        let t0 = Instant::now();
        // A busy server: 50 ms answers, one in ten at 250 ms (70 ms on average: 20 above).
        for i in 0..2_000u64 {
            let at = t0 + Duration::from_millis(i);
            let took = Duration::from_millis(if i % 10 == 0 { 250 } else { 50 });
            l.observe(at, Sample::Answered(took), at + took);
            plain.observe(at, Sample::Answered(took), at + took);
        }
        assert!(l.limit() >= 32, "{} ({:?})", l.limit(), l.average);
        assert!(
            plain.limit() < l.limit(),
            "judged one by one: {} vs {}",
            plain.limit(),
            l.limit()
        );
        // Then every answer at 150 ms: the average goes 100 ms over the fastest, the limit down.
        let top = l.limit;
        for i in 0..200u64 {
            let at = t0 + Duration::from_secs(10) + Duration::from_millis(i * 200);
            let took = Duration::from_millis(150);
            l.observe(at, Sample::Answered(took), at + took);
        }
        assert!(l.limit() < top as usize / 2, "{}", l.limit());
    }

    #[test]
    fn the_baseline_follows_a_server_that_became_slower_for_good() {
        let mut l = Limiter::default();
        let t0 = Instant::now();
        l.observe(t0, Sample::Answered(FAST), t0);
        let slow = Duration::from_millis(100);
        for i in 0..2_000u64 {
            let at = t0 + Duration::from_millis(i);
            l.observe(at, Sample::Answered(slow), at + slow);
        }
        let b = l.baseline().unwrap();
        assert!(b > Duration::from_millis(90) && b <= slow, "{b:?}");
        // 100 ms is the new normal: the limit grows again.
        assert!(l.limit() > INITIAL_LIMIT);
    }

    proptest! {
        /// Whatever the server does, the limit stays within its bounds and the baseline is
        /// never above the largest latency seen.
        #[test]
        fn the_limit_stays_within_bounds(samples in proptest::collection::vec(
            (0u64..2_000, proptest::option::of(0u64..5_000)), 1..500)
        ) {
            let mut l = Limiter::default();
            let t0 = Instant::now();
            let mut most = Duration::ZERO;
            for (i, (gap, ms)) in samples.into_iter().enumerate() {
                let sent = t0 + Duration::from_millis(i as u64 * 10);
                let sample = match ms {
                    Some(ms) => {
                        let d = Duration::from_millis(ms);
                        most = most.max(d);
                        Sample::Answered(d)
                    }
                    None => Sample::Overloaded,
                };
                l.observe(sent, sample, sent + Duration::from_millis(gap));
                prop_assert!((MIN_LIMIT..=MAX_LIMIT).contains(&l.limit()));
                prop_assert!(l.baseline().is_none_or(|b| b <= most));
            }
        }
    }
}
