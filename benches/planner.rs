//! Benchmarks of the planner (`leasehold::engine::planner`) at cluster scale: 50,000 targets over
//! 1,000 members. Inputs come from a seeded xorshift, so every run plans the same cluster.
//!
//! Run: `cargo bench --bench planner -- --warm-up-time 1 --measurement-time 3`.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use leasehold::engine::planner::{
    Member, MemberState, Target, drain, lower_bound, place, rebalance,
};

const MEMBERS: usize = 1_000;
/// Members that own every target at the start of the rebalance cases; the rest are new.
const OWNING: u64 = 800;
const TARGETS: usize = 50_000;
const UNASSIGNED: usize = 5_000;

/// A seeded xorshift64 generator: no `rand` needed, same numbers on every run.
struct XorShift(u64);

impl XorShift {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

fn member_id(i: u64) -> String {
    format!("member-{i:04}")
}

fn members(rng: &mut XorShift, capacities: bool) -> Vec<Member> {
    (0..MEMBERS as u64)
        .map(|i| Member {
            id: member_id(i),
            capacity: if capacities {
                1 + rng.below(4) as u32
            } else {
                1
            },
            state: MemberState::Active,
        })
        .collect()
}

/// `count` targets; `owner` picks each one's owner, `weights` up to 10 when set.
fn targets(
    rng: &mut XorShift,
    count: usize,
    weights: bool,
    mut owner: impl FnMut(&mut XorShift) -> Option<String>,
) -> Vec<Target> {
    (0..count)
        .map(|i| Target {
            key: format!("device-{i:06}"),
            weight: if weights { 1 + rng.below(10) as u32 } else { 1 },
            owner: owner(rng),
            pin: None,
        })
        .collect()
}

/// Owners skewed towards the low ids among the first `OWNING` members.
fn skewed(rng: &mut XorShift) -> Option<String> {
    let (a, b) = (rng.below(OWNING), rng.below(OWNING));
    Some(member_id(
        a * b / OWNING + rng.below(OWNING - a * b / OWNING),
    ))
}

fn benches(c: &mut Criterion) {
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);

    let equal = members(&mut rng, false);
    let unit = targets(&mut rng, TARGETS, false, skewed);
    let plan = rebalance(&equal, &unit, None);
    assert_eq!(plan.moves.len(), lower_bound(&equal, &unit));
    println!(
        "rebalance unit: {} moves, imbalance {:.3} -> {:.3}",
        plan.moves.len(),
        plan.imbalance_before,
        plan.imbalance_after
    );
    c.bench_function("rebalance_unit_50k_targets_1k_members", |b| {
        b.iter(|| rebalance(black_box(&equal), black_box(&unit), None))
    });

    let weighted = targets(&mut rng, TARGETS, true, skewed);
    let plan = rebalance(&equal, &weighted, None);
    println!(
        "rebalance weighted: {} moves, imbalance {:.3} -> {:.3}",
        plan.moves.len(),
        plan.imbalance_before,
        plan.imbalance_after
    );
    c.bench_function("rebalance_weighted_50k_targets_1k_members", |b| {
        b.iter(|| rebalance(black_box(&equal), black_box(&weighted), None))
    });

    let spread = targets(&mut rng, TARGETS, false, |rng| {
        Some(member_id(rng.below(MEMBERS as u64)))
    });
    let drained = member_id(500);
    let plan = drain(&equal, &spread, &drained, None);
    println!("drain: {} moves", plan.moves.len());
    c.bench_function("drain_1_of_1k_members_50k_targets", |b| {
        b.iter(|| {
            drain(
                black_box(&equal),
                black_box(&spread),
                black_box(&drained),
                None,
            )
        })
    });

    let sized = members(&mut rng, true);
    let unassigned = targets(&mut rng, UNASSIGNED, true, |_| None);
    c.bench_function("place_5k_unassigned_weighted_1k_members", |b| {
        b.iter(|| place(black_box(&sized), black_box(&unassigned)))
    });
}

criterion_group!(planner, benches);
criterion_main!(planner);
