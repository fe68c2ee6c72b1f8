//! Unit and property tests of the planner.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::RangeInclusive;

use proptest::prelude::*;

use super::*;

fn member(id: &str, capacity: u32, state: MemberState) -> Member {
    Member {
        id: id.to_owned(),
        capacity,
        state,
    }
}

fn active(id: &str) -> Member {
    member(id, 1, MemberState::Active)
}

fn target(key: &str, weight: u32, owner: Option<&str>, pin: Option<&str>) -> Target {
    Target {
        key: key.to_owned(),
        weight,
        owner: owner.map(str::to_owned),
        pin: pin.map(str::to_owned),
    }
}

fn counts(loads: &[MemberLoad]) -> BTreeMap<&str, usize> {
    loads
        .iter()
        .map(|l| (l.member.as_str(), l.targets))
        .collect()
}

/// Each target's owner after applying `plan.moves` to the input.
fn final_owners(targets: &[Target], plan: &Plan) -> HashMap<String, Option<String>> {
    let mut owner: HashMap<String, Option<String>> = targets
        .iter()
        .map(|t| (t.key.clone(), t.owner.clone()))
        .collect();
    for m in &plan.moves {
        owner.insert(m.target.clone(), Some(m.to.clone()));
    }
    owner
}

/// The states the planner saw: the input's, with `drained` draining.
fn states(members: &[Member], drained: Option<&str>) -> HashMap<String, MemberState> {
    members
        .iter()
        .map(|m| {
            let state = if drained == Some(m.id.as_str()) {
                MemberState::Draining
            } else {
                m.state
            };
            (m.id.clone(), state)
        })
        .collect()
}

/// The pin a target must reach, when that is possible.
fn valid_pin<'t>(t: &'t Target, states: &HashMap<String, MemberState>) -> Option<&'t str> {
    t.pin
        .as_deref()
        .filter(|p| states.get(*p).is_some_and(|s| *s != MemberState::Draining))
}

/// Checks property 6 (and the plan's bookkeeping) for any plan; `complete` when no budget cut
/// it, so every target must end owned or blocked.
fn check_consistent(
    members: &[Member],
    targets: &[Target],
    plan: &Plan,
    drained: Option<&str>,
    complete: bool,
) {
    let states = states(members, drained);
    let by_key: HashMap<&str, &Target> = targets.iter().map(|t| (t.key.as_str(), t)).collect();
    let mut seen = HashSet::new();
    for m in &plan.moves {
        assert!(seen.insert(m.target.as_str()), "{} moves twice", m.target);
        let t = by_key[m.target.as_str()];
        assert_eq!(m.from, t.owner);
        let ok = match valid_pin(t, &states) {
            Some(pin) => m.to == pin,
            None => t.pin.is_none() && states.get(&m.to) == Some(&MemberState::Active),
        };
        assert!(ok, "bad destination in {m:?} for {t:?}");
        // Every move says why, and the reason is the rule that applies to the target.
        let owner_state = t.owner.as_deref().and_then(|o| states.get(o));
        let reason = if t.pin.is_some() {
            MoveReason::Pinned
        } else {
            match owner_state {
                None => MoveReason::Unowned,
                Some(MemberState::Draining) => MoveReason::Draining,
                Some(_) => MoveReason::Balance,
            }
        };
        assert_eq!(m.reason, reason, "{m:?} for {t:?}");
    }
    assert!(plan.moves.windows(2).all(|w| w[0].target < w[1].target));
    // Warned exactly when the result is unbalanced, or pinned targets cannot move.
    assert_eq!(
        plan.warnings
            .iter()
            .any(|w| w.message.starts_with("The cluster is not balanced")),
        !balanced(&plan.after),
        "{:?}",
        plan.warnings
    );
    let stuck_pins = plan.blocked.iter().any(|b| b.reason.starts_with("pinned"));
    assert_eq!(
        plan.warnings.iter().any(|w| w.kind == WarningKind::Pinned),
        stuck_pins
    );

    let loads = |owners: &HashMap<String, Option<String>>| {
        let mut load: BTreeMap<String, (usize, u64)> = BTreeMap::new();
        for t in targets {
            if let Some(Some(o)) = owners.get(&t.key)
                && states.contains_key(o)
            {
                let entry = load.entry(o.clone()).or_default();
                entry.0 += 1;
                entry.1 += u64::from(t.weight);
            }
        }
        load
    };
    let initial: HashMap<String, Option<String>> = targets
        .iter()
        .map(|t| (t.key.clone(), t.owner.clone()))
        .collect();
    let finals = final_owners(targets, plan);
    // Before: every member as given (a drained one too); after: as the plan saw them.
    let given = self::states(members, None);
    for (side, owners, states) in [
        (&plan.before, &initial, &given),
        (&plan.after, &finals, &states),
    ] {
        let expected = loads(owners);
        assert_eq!(side.len(), states.len());
        for l in side {
            let (count, weight) = expected.get(&l.member).copied().unwrap_or_default();
            assert_eq!((l.targets, l.weight), (count, weight), "{}", l.member);
            assert_eq!(l.state, states[&l.member]);
        }
    }
    // Imbalance is the one measure, of the loads the plan reports.
    assert_eq!(plan.imbalance_before, imbalance(&plan.before));
    assert_eq!(plan.imbalance_after, imbalance(&plan.after));

    let blocked: HashSet<&str> = plan.blocked.iter().map(|b| b.target.as_str()).collect();
    for t in targets {
        if blocked.contains(t.key.as_str()) {
            assert!(!seen.contains(t.key.as_str()), "blocked {} moved", t.key);
        } else if complete {
            let owner = finals[&t.key].as_deref();
            assert!(
                owner.is_some_and(|o| states.contains_key(o)),
                "{} lost",
                t.key
            );
        }
    }
}

/// Final number of targets on each active member.
fn active_counts(plan: &Plan) -> Vec<usize> {
    plan.after
        .iter()
        .filter(|l| l.state == MemberState::Active)
        .map(|l| l.targets)
        .collect()
}

fn spread(counts: &[usize]) -> usize {
    match (counts.iter().max(), counts.iter().min()) {
        (Some(max), Some(min)) => max - min,
        _ => 0,
    }
}

// ---------------------------------------------------------------------------------------------
// Examples

#[test]
fn place_puts_heaviest_first_on_lowest_relative_load() {
    let members = [
        member("a", 1, MemberState::Active),
        member("b", 2, MemberState::Active),
    ];
    let targets = [
        target("t1", 1, None, None),
        target("t2", 4, None, None),
        target("t3", 2, Some("gone"), None),
        target("t4", 3, Some("a"), None),
    ];
    let plan = place(&members, &targets);
    // t2 (4): a (3+4)/1 vs b (0+4)/2 → b. t3 (2): a 5/1 vs b 6/2 → b. t1 (1): a 4 vs b 7/2 → b.
    let to: Vec<(&str, &str)> = plan
        .moves
        .iter()
        .map(|m| (m.target.as_str(), m.to.as_str()))
        .collect();
    assert_eq!(to, [("t1", "b"), ("t2", "b"), ("t3", "b")]);
    assert_eq!(plan.moves[2].from.as_deref(), Some("gone"));
    assert!(!plan.truncated);
    assert!(plan.blocked.is_empty());
    check_consistent(&members, &targets, &plan, None, true);
}

#[test]
fn pins_block_with_clear_reasons() {
    let members = [
        active("m-1"),
        member("m-3", 1, MemberState::Draining),
        member("m-4", 1, MemberState::Cordoned),
    ];
    let targets = [
        target("a", 1, Some("m-1"), Some("m-3")),
        target("b", 1, None, Some("m-9")),
        target("c", 1, Some("m-1"), Some("m-4")),
        target("d", 1, Some("m-4"), Some("m-4")),
    ];
    let plan = rebalance(&members, &targets, None);
    let reasons: Vec<(&str, &str)> = plan
        .blocked
        .iter()
        .map(|b| (b.target.as_str(), b.reason.as_str()))
        .collect();
    assert_eq!(
        reasons,
        [
            ("a", r#"pinned to "m-3", which is draining"#),
            ("b", r#"pinned to "m-9", which is not a member"#),
        ]
    );
    // The explicit pin takes `c` onto the cordoned member; `d` is already home.
    assert_eq!(
        plan.moves,
        [Move {
            target: "c".into(),
            from: Some("m-1".into()),
            to: "m-4".into(),
            reason: MoveReason::Pinned,
        }]
    );
    // The blocked target `a` stays on m-1 and counts there.
    assert_eq!(counts(&plan.after)["m-1"], 1);
    check_consistent(&members, &targets, &plan, None, true);
}

#[test]
fn no_active_member_blocks_homeless_targets() {
    let members = [
        member("c", 1, MemberState::Cordoned),
        member("d", 1, MemberState::Draining),
    ];
    let targets = [
        target("t1", 1, Some("d"), None),
        target("t2", 1, Some("c"), None),
    ];
    let plan = rebalance(&members, &targets, None);
    assert!(plan.moves.is_empty());
    assert_eq!(plan.blocked.len(), 1);
    assert_eq!(plan.blocked[0].target, "t1");
    assert_eq!(plan.blocked[0].reason, "no active member can take it");
    assert_eq!(plan.imbalance_before, 0.0);
    assert_eq!(plan.imbalance_after, 0.0);
    assert_eq!(lower_bound(&members, &targets), 0);
}

#[test]
fn cordoned_members_keep_targets_and_receive_none() {
    let members = [
        active("a"),
        active("b"),
        member("c", 1, MemberState::Cordoned),
    ];
    let targets: Vec<Target> = (0..6)
        .map(|i| {
            target(
                &format!("t{i}"),
                1,
                Some(if i < 4 { "c" } else { "a" }),
                None,
            )
        })
        .chain([target("h", 1, None, None)])
        .collect();
    let plan = rebalance(&members, &targets, None);
    let after = counts(&plan.after);
    assert_eq!(after["c"], 4);
    assert_eq!(after["a"] + after["b"], 3);
    assert!(spread(&[after["a"], after["b"]]) <= 1);
    assert!(plan.moves.iter().all(|m| m.to != "c"));
    assert_eq!(plan.moves.len(), lower_bound(&members, &targets));
}

#[test]
fn drain_spreads_the_instance_evenly() {
    let members = [active("a"), active("b"), active("c"), active("d")];
    let targets: Vec<Target> = (0..9)
        .map(|i| {
            target(
                &format!("t{i}"),
                1,
                Some(if i < 6 { "a" } else { "b" }),
                None,
            )
        })
        .collect();
    let plan = drain(&members, &targets, "a", None);
    let after = counts(&plan.after);
    assert_eq!(after["a"], 0);
    assert_eq!((after["b"], after["c"], after["d"]), (3, 3, 3));
    assert!(plan.moves.iter().all(|m| m.from.as_deref() == Some("a")));
    // Before is the cluster as it is (a active, as given), after it drained.
    assert_eq!(plan.before[0].state, MemberState::Active);
    assert_eq!(plan.after[0].state, MemberState::Draining);
    check_consistent(&members, &targets, &plan, Some("a"), true);
}

#[test]
fn drain_of_unknown_instance_rehomes_its_targets() {
    let members = [active("a"), active("b")];
    let targets = [
        target("t1", 1, Some("ghost"), None),
        target("t2", 1, Some("ghost"), None),
        target("t3", 1, Some("a"), None),
    ];
    let plan = drain(&members, &targets, "ghost", None);
    assert_eq!(plan.moves.len(), 2);
    // t1 goes to the empty b, then t2 ties (2 and 2) and goes to the lower id.
    let after = counts(&plan.after);
    assert_eq!((after["a"], after["b"]), (2, 1));
    check_consistent(&members, &targets, &plan, Some("ghost"), true);
}

#[test]
fn rebalance_fills_new_members_with_lower_bound_moves() {
    let members = [active("a"), active("b"), active("c")];
    let targets: Vec<Target> = (0..10)
        .map(|i| target(&format!("t{i:02}"), 1, Some("a"), None))
        .collect();
    let plan = rebalance(&members, &targets, None);
    let after = counts(&plan.after);
    assert_eq!((after["a"], after["b"], after["c"]), (4, 3, 3));
    assert_eq!(plan.moves.len(), 6);
    assert_eq!(lower_bound(&members, &targets), 6);
    // The highest keys leave.
    assert!(plan.moves.iter().all(|m| m.target.as_str() >= "t04"));
    assert!(plan.imbalance_after < plan.imbalance_before);
    assert!((plan.imbalance_before - 2.0).abs() < 1e-12);
    assert!((plan.imbalance_after - 0.2).abs() < 1e-12);
}

#[test]
fn unequal_capacities_get_floor_or_ceil_and_keep_the_extra_unit() {
    let members = [
        member("a", 3, MemberState::Active),
        member("b", 1, MemberState::Active),
    ];
    // Shares 1.5 and 0.5: b already holds one more than its floor, so it keeps it.
    let targets = [
        target("t1", 1, Some("b"), None),
        target("t2", 1, Some("a"), None),
    ];
    let plan = rebalance(&members, &targets, None);
    assert!(plan.moves.is_empty());
    assert_eq!(lower_bound(&members, &targets), 0);
}

#[test]
fn lower_bound_saturates_members_overloaded_by_pins() {
    let members = [active("a"), active("b"), active("c")];
    // Six targets pinned to a; three free targets on b: a cannot shed, so b and c split 3.
    let targets: Vec<Target> = (0..6)
        .map(|i| target(&format!("p{i}"), 1, Some("a"), Some("a")))
        .chain((0..3).map(|i| target(&format!("f{i}"), 1, Some("b"), None)))
        .collect();
    assert_eq!(lower_bound(&members, &targets), 1);
    let plan = rebalance(&members, &targets, None);
    assert_eq!(plan.moves.len(), 1);
    let after = counts(&plan.after);
    assert_eq!((after["a"], after["b"], after["c"]), (6, 2, 1));
}

#[test]
fn budget_keeps_pins_then_homes_then_biggest_relief() {
    let members = [active("a"), active("b"), active("c")];
    let mut targets: Vec<Target> = (0..8)
        .map(|i| target(&format!("t{i}"), 1, Some("a"), None))
        .collect();
    targets.push(target("h", 1, None, None));
    targets.push(target("p", 1, Some("a"), Some("c")));
    let full = rebalance(&members, &targets, None);
    // 10 targets for 3 members: a keeps 4 (the extra unit), p goes to c, h and 4 of a's to b/c.
    assert_eq!(full.moves.len(), 6);
    let cut = rebalance(&members, &targets, Some(3));
    assert!(cut.truncated);
    assert_eq!(cut.moves.len(), 3);
    let keys: Vec<&str> = cut.moves.iter().map(|m| m.target.as_str()).collect();
    assert!(keys.contains(&"p") && keys.contains(&"h"));
    assert!(cut.moves.iter().all(|m| full.moves.contains(m)));
    assert_eq!(rebalance(&members, &targets, Some(6)), full);
}

#[test]
fn weighted_rebalance_moves_a_heavy_target_off_the_overloaded_member() {
    let members = [active("a"), active("b")];
    let targets = [
        target("t1", 5, Some("a"), None),
        target("t2", 4, Some("a"), None),
        target("t3", 1, Some("a"), None),
        target("t4", 2, Some("b"), None),
    ];
    let plan = rebalance(&members, &targets, None);
    let after: BTreeMap<&str, u64> = plan
        .after
        .iter()
        .map(|l| (l.member.as_str(), l.weight))
        .collect();
    assert_eq!((after["a"], after["b"]), (6, 6));
    assert_eq!(plan.moves.len(), 1);
    assert_eq!(plan.imbalance_after, 0.0);
}

#[test]
fn plan_serialises_in_snake_case() {
    let members = [member("a", 1, MemberState::Cordoned), active("b")];
    let targets = [target("t", 1, None, None)];
    let plan = place(&members, &targets);
    let json = serde_json::to_value(&plan).unwrap();
    assert_eq!(json["before"][0]["state"], "cordoned");
    assert_eq!(json["after"][1]["state"], "active");
    assert_eq!(json["moves"][0]["to"], "b");
    assert_eq!(json["truncated"], false);
    let back: Plan = serde_json::from_value(json).unwrap();
    assert_eq!(back, plan);
    let state: MemberState = serde_json::from_str("\"draining\"").unwrap();
    assert_eq!(state, MemberState::Draining);
}

#[test]
fn zero_capacity_and_weight_count_as_one() {
    let members = [
        member("a", 0, MemberState::Active),
        member("b", 1, MemberState::Active),
    ];
    let targets = [target("t1", 0, None, None), target("t2", 0, None, None)];
    let plan = place(&members, &targets);
    assert_eq!(active_counts(&plan), [1, 1]);
    assert_eq!(plan.after[0].capacity, 1);
}

// ---------------------------------------------------------------------------------------------
// Properties

/// A generated cluster.
#[derive(Debug, Clone)]
struct Case {
    members: Vec<Member>,
    targets: Vec<Target>,
}

/// How to generate a [`Case`].
#[derive(Clone)]
struct Shape {
    caps: RangeInclusive<u32>,
    /// Every member gets the same capacity (drawn from `caps`).
    equal_caps: bool,
    weights: RangeInclusive<u32>,
    /// Every target gets the same weight (drawn from `weights`).
    equal_weights: bool,
    /// Percentage of targets that are pinned.
    pinned: u32,
    /// Whether members may be cordoned or draining.
    states: bool,
}

impl Shape {
    fn new() -> Self {
        Shape {
            caps: 1..=1,
            equal_caps: true,
            weights: 1..=1,
            equal_weights: true,
            pinned: 0,
            states: true,
        }
    }
}

fn state_strategy(states: bool) -> BoxedStrategy<MemberState> {
    if states {
        prop_oneof![
            6 => Just(MemberState::Active),
            2 => Just(MemberState::Cordoned),
            2 => Just(MemberState::Draining),
        ]
        .boxed()
    } else {
        Just(MemberState::Active).boxed()
    }
}

fn case(shape: Shape) -> impl Strategy<Value = Case> {
    let members = prop::collection::vec((shape.caps.clone(), state_strategy(shape.states)), 1..30);
    let targets = prop::collection::vec(
        (shape.weights.clone(), any::<u32>(), 0..100u32, any::<u32>()),
        0..500,
    );
    (members, targets, shape.caps.clone(), shape.weights.clone()).prop_map(
        move |(ms, ts, cap, weight)| {
            let n = ms.len() as u32;
            let id = |i: u32| {
                if i < n {
                    format!("m-{i:02}")
                } else {
                    format!("gone-{i}")
                }
            };
            let members = ms
                .into_iter()
                .enumerate()
                .map(|(i, (c, state))| Member {
                    id: id(i as u32),
                    capacity: if shape.equal_caps { cap } else { c },
                    state,
                })
                .collect();
            let targets = ts
                .into_iter()
                .enumerate()
                .map(|(i, (w, owner, pin_roll, pin))| {
                    let owner = owner % (n + 3);
                    Target {
                        key: format!("t-{i:03}"),
                        weight: if shape.equal_weights { weight } else { w },
                        // n + 2 of n + 3 choices name somebody: a member or a gone one.
                        owner: (owner != n).then(|| id(owner)),
                        pin: (pin_roll < shape.pinned).then(|| id(pin % (n + 1))),
                    }
                })
                .collect();
            Case { members, targets }
        },
    )
}

/// A deterministic shuffle (xorshift), so a test can reorder its input.
fn shuffled<T: Clone>(items: &[T], seed: u64) -> Vec<T> {
    let mut out = items.to_vec();
    let mut x = seed | 1;
    for i in (1..out.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.swap(i, (x % (i as u64 + 1)) as usize);
    }
    out
}

/// 96 cases per property unless `PROPTEST_CASES` asks for another number.
fn config() -> ProptestConfig {
    match std::env::var("PROPTEST_CASES") {
        Ok(_) => ProptestConfig::default(),
        Err(_) => ProptestConfig::with_cases(96),
    }
}

proptest! {
    #![proptest_config(config())]

    /// Property 1: unit weights, equal capacity, no pins: active counts end within 1 of each
    /// other, the plan makes exactly `lower_bound()` moves, and it ends no more imbalanced than
    /// place().
    #[test]
    fn prop_equal_capacity_unit_weights_balance_within_one(
        c in case(Shape { caps: 1..=4, ..Shape::new() })
    ) {
        let plan = rebalance(&c.members, &c.targets, None);
        prop_assert!(spread(&active_counts(&plan)) <= 1);
        prop_assert_eq!(plan.moves.len(), lower_bound(&c.members, &c.targets));
        // The peak ceil(N / n) is the lowest any plan reaches, so never above place()'s.
        let placed = place(&c.members, &c.targets);
        prop_assert!(plan.imbalance_after <= placed.imbalance_after + 1e-9);
        // What a rebalance reaches here counts as balanced.
        prop_assert!(balanced(&plan.after), "{:?}", plan.after);
        check_consistent(&c.members, &c.targets, &plan, None, true);
    }

    /// Property 2: equal weights (any value), unequal capacities, no pins: every active member
    /// ends on the floor or the ceiling of its exact share `N * cap / Σcap`, with exactly
    /// `lower_bound()` moves. (Not checked: being no more imbalanced than place(); the extra
    /// units go where they save moves, which can leave a small-capacity member on its ceiling.)
    #[test]
    fn prop_unequal_capacity_equal_weights_floor_or_ceil(
        c in case(Shape { caps: 1..=5, equal_caps: false, weights: 1..=4, ..Shape::new() })
    ) {
        let plan = rebalance(&c.members, &c.targets, None);
        let actives: Vec<&MemberLoad> =
            plan.after.iter().filter(|l| l.state == MemberState::Active).collect();
        let n: u64 = actives.iter().map(|l| l.targets as u64).sum();
        let caps: u64 = actives.iter().map(|l| u64::from(l.capacity)).sum();
        for l in &actives {
            let exact = n * u64::from(l.capacity);
            let (floor, ceil) = (exact / caps, exact.div_ceil(caps));
            let got = l.targets as u64;
            prop_assert!(floor <= got && got <= ceil, "{} has {got}, share {exact}/{caps}", l.member);
        }
        prop_assert_eq!(plan.moves.len(), lower_bound(&c.members, &c.targets));
        prop_assert!(balanced(&plan.after), "{:?}", plan.after);
        check_consistent(&c.members, &c.targets, &plan, None, true);
    }

    /// Property 9: one cluster state has one imbalance: every plan of it — place, rebalance
    /// with or without a budget, and the drain of any member — states the same imbalance
    /// before, the one the overview shows (`Engine::imbalance` is place()'s).
    #[test]
    fn prop_every_plan_states_the_same_imbalance_before(
        c in case(Shape {
            caps: 1..=5, equal_caps: false, weights: 1..=10, equal_weights: false, pinned: 10,
            ..Shape::new()
        }),
        drained in 0..32usize,
        budget in 0..20usize,
    ) {
        let now = place(&c.members, &c.targets).imbalance_before;
        let instance = format!("m-{drained:02}");
        for plan in [
            rebalance(&c.members, &c.targets, None),
            rebalance(&c.members, &c.targets, Some(budget)),
            drain(&c.members, &c.targets, &instance, None),
            drain(&c.members, &c.targets, &instance, Some(budget)),
        ] {
            prop_assert_eq!(plan.imbalance_before, now);
        }
    }

    /// Property 3: pinned targets on their pin never move; every pinned target with a valid pin
    /// ends on it; every other pinned target is blocked and stays — in all three planners.
    #[test]
    fn prop_pins_are_respected(
        c in case(Shape {
            caps: 1..=5, equal_caps: false, weights: 1..=10, equal_weights: false, pinned: 30,
            ..Shape::new()
        }),
        drained in 0..32usize,
    ) {
        let instance = format!("m-{drained:02}");
        let plans = [
            (rebalance(&c.members, &c.targets, None), None),
            (place(&c.members, &c.targets), None),
            (drain(&c.members, &c.targets, &instance, None), Some(instance.as_str())),
        ];
        for (plan, drained) in &plans {
            let states = states(&c.members, *drained);
            let owners = final_owners(&c.targets, plan);
            let moved: HashSet<&str> = plan.moves.iter().map(|m| m.target.as_str()).collect();
            let blocked: HashSet<&str> = plan.blocked.iter().map(|b| b.target.as_str()).collect();
            for t in c.targets.iter().filter(|t| t.pin.is_some()) {
                if t.pin == t.owner && valid_pin(t, &states).is_some() {
                    prop_assert!(!moved.contains(t.key.as_str()));
                }
                match valid_pin(t, &states) {
                    Some(pin) => prop_assert_eq!(owners[&t.key].as_deref(), Some(pin)),
                    None => {
                        prop_assert!(blocked.contains(t.key.as_str()));
                        prop_assert!(!moved.contains(t.key.as_str()));
                    }
                }
            }
            check_consistent(&c.members, &c.targets, plan, *drained, true);
        }
    }

    /// Property 4: unit weights, equal capacity, no pins: drain() empties the instance, moves
    /// only targets that needed a home (the instance's included), and the spread (max − min)
    /// of the active members' counts ends at most max(spread before, 1).
    #[test]
    fn prop_drain_spreads_only_homeless_targets(
        c in case(Shape { caps: 1..=3, ..Shape::new() }),
        drained in 0..32usize,
    ) {
        let instance = format!("m-{drained:02}");
        let plan = drain(&c.members, &c.targets, &instance, None);
        let states = states(&c.members, Some(&instance));
        let any_active = states.values().any(|s| *s == MemberState::Active);
        if any_active
            && let Some(l) = plan.after.iter().find(|l| l.member == instance)
        {
            prop_assert_eq!(l.targets, 0);
        }
        let by_key: HashMap<&str, &Target> =
            c.targets.iter().map(|t| (t.key.as_str(), t)).collect();
        for m in &plan.moves {
            let owner = by_key[m.target.as_str()].owner.as_deref();
            let homeless = owner.is_none_or(|o| {
                states.get(o).is_none_or(|s| *s == MemberState::Draining)
            });
            prop_assert!(homeless, "{} was not homeless", m.target);
        }
        let before: Vec<usize> = plan
            .before
            .iter()
            .filter(|l| l.state == MemberState::Active && l.member != instance)
            .map(|l| l.targets)
            .collect();
        prop_assert!(spread(&active_counts(&plan)) <= spread(&before).max(1));
        check_consistent(&c.members, &c.targets, &plan, Some(&instance), true);
    }

    /// Property 5: the same input in any order gives the same plan.
    #[test]
    fn prop_deterministic_under_shuffle(
        c in case(Shape {
            caps: 1..=5, equal_caps: false, weights: 1..=10, equal_weights: false, pinned: 10,
            ..Shape::new()
        }),
        seed in any::<u64>(),
        budget in prop::option::of(0..40usize),
        unit in any::<bool>(),
    ) {
        let mut c = c;
        if unit {
            c.targets.iter_mut().for_each(|t| t.weight = 1);
        }
        let members = shuffled(&c.members, seed);
        let targets = shuffled(&c.targets, seed.rotate_left(17));
        prop_assert_eq!(
            rebalance(&c.members, &c.targets, budget),
            rebalance(&members, &targets, budget)
        );
        prop_assert_eq!(place(&c.members, &c.targets), place(&members, &targets));
        prop_assert_eq!(
            drain(&c.members, &c.targets, "m-00", budget),
            drain(&members, &targets, "m-00", budget)
        );
        prop_assert_eq!(lower_bound(&c.members, &c.targets), lower_bound(&members, &targets));
    }

    /// Property 6: moves go to active members or valid pins, no target moves twice, `after`
    /// is `before` with the moves applied, and every target ends owned or blocked; with unit
    /// weights (pins included) rebalance() makes exactly `lower_bound()` moves.
    #[test]
    fn prop_plans_are_consistent(
        c in case(Shape {
            caps: 1..=5, equal_caps: false, weights: 1..=10, equal_weights: false, pinned: 10,
            ..Shape::new()
        }),
        unit in any::<bool>(),
    ) {
        let mut c = c;
        if unit {
            c.targets.iter_mut().for_each(|t| t.weight = 1);
        }
        let plan = rebalance(&c.members, &c.targets, None);
        if unit {
            // Pins included: the exact path reaches the quotas in exactly lower_bound() moves.
            prop_assert_eq!(plan.moves.len(), lower_bound(&c.members, &c.targets));
        }
        check_consistent(&c.members, &c.targets, &plan, None, true);
        check_consistent(&c.members, &c.targets, &place(&c.members, &c.targets), None, true);
        let plan = drain(&c.members, &c.targets, "m-01", None);
        check_consistent(&c.members, &c.targets, &plan, Some("m-01"), true);
    }

    /// Property 7: a budget caps the moves, `truncated` says whether the full plan was longer,
    /// a truncated plan's moves are a subset of the full plan's, pin moves and homes come
    /// before balancing moves, and a budget that fits changes nothing.
    #[test]
    fn prop_budget_caps_moves(
        c in case(Shape {
            caps: 1..=3, equal_caps: false, weights: 1..=5, equal_weights: false, pinned: 10,
            ..Shape::new()
        }),
        budget in 0..80usize,
        unit in any::<bool>(),
    ) {
        let mut c = c;
        if unit {
            c.targets.iter_mut().for_each(|t| t.weight = 1);
        }
        let runs = [
            (rebalance(&c.members, &c.targets, None), rebalance(&c.members, &c.targets, Some(budget)), None),
            (
                drain(&c.members, &c.targets, "m-00", None),
                drain(&c.members, &c.targets, "m-00", Some(budget)),
                Some("m-00"),
            ),
        ];
        for (full, cut, drained) in &runs {
            prop_assert!(cut.moves.len() <= budget);
            prop_assert_eq!(cut.truncated, full.moves.len() > budget);
            if cut.truncated {
                prop_assert_eq!(cut.moves.len(), budget);
                prop_assert!(cut.moves.iter().all(|m| full.moves.contains(m)));
                let states = states(&c.members, *drained);
                let forced = |m: &Move| {
                    let t = c.targets.iter().find(|t| t.key == m.target);
                    t.is_some_and(|t| t.pin.is_some() || m.from.as_ref().is_none_or(|o| {
                        states.get(o).is_none_or(|s| *s == MemberState::Draining)
                    }))
                };
                let all_forced = full.moves.iter().filter(|m| forced(m)).count();
                let kept_forced = cut.moves.iter().filter(|m| forced(m)).count();
                prop_assert_eq!(kept_forced, all_forced.min(budget));
            } else {
                prop_assert_eq!(cut, full);
            }
            check_consistent(&c.members, &c.targets, cut, *drained, !cut.truncated);
        }
    }

    /// Property 8: with random weights, rebalance() ends no more imbalanced than place() (so,
    /// when nothing needs a home or a pin, never more than before), and — when the weights on
    /// active members differ, so the weighted path runs — it is locally optimal: if one active
    /// member is strictly the most loaded relative to capacity, no single move of one of its
    /// unpinned targets to a least loaded active member lowers that peak.
    #[test]
    fn prop_weighted_rebalance_is_never_worse_and_locally_optimal(
        c in case(Shape {
            caps: 1..=5, equal_caps: false, weights: 1..=10, equal_weights: false, pinned: 5,
            ..Shape::new()
        }),
    ) {
        let plan = rebalance(&c.members, &c.targets, None);
        let placed = place(&c.members, &c.targets);
        prop_assert!(plan.imbalance_after <= placed.imbalance_after + 1e-9,
            "{} > {}", plan.imbalance_after, placed.imbalance_after);
        if placed.moves.is_empty() {
            prop_assert!(plan.imbalance_after <= plan.imbalance_before + 1e-9);
        }

        let owners = final_owners(&c.targets, &plan);
        let actives: HashMap<&str, &MemberLoad> = plan
            .after
            .iter()
            .filter(|l| l.state == MemberState::Active)
            .map(|l| (l.member.as_str(), l))
            .collect();
        let on_active: Vec<&Target> = c
            .targets
            .iter()
            .filter(|t| owners[&t.key].as_deref().is_some_and(|o| actives.contains_key(o)))
            .collect();
        let uniform = on_active.windows(2).all(|w| w[0].weight == w[1].weight);
        let ratio = |l: &MemberLoad| l.weight as f64 / f64::from(l.capacity);
        let peak = actives.values().map(|l| ratio(l)).fold(f64::MIN, f64::max);
        let low = actives.values().map(|l| ratio(l)).fold(f64::MAX, f64::min);
        let top: Vec<&&MemberLoad> = actives.values().filter(|l| ratio(l) == peak).collect();
        if uniform || top.len() != 1 {
            return Ok(());
        }
        let a = top[0];
        for b in actives.values().filter(|l| ratio(l) == low && l.member != a.member) {
            for t in on_active.iter().filter(|t| t.pin.is_none()) {
                if owners[&t.key].as_deref() != Some(a.member.as_str()) {
                    continue;
                }
                let w = u64::from(t.weight);
                // Lowers the peak iff the receiver ends strictly below it.
                let lowers = (b.weight + w) * u64::from(a.capacity)
                    < a.weight * u64::from(b.capacity);
                prop_assert!(!lowers, "moving {} from {} to {} lowers the peak", t.key, a.member, b.member);
            }
        }
    }
}

#[test]
fn a_plans_id_names_its_moves() {
    let mv = |t: &str, from: Option<&str>, to: &str| Move {
        target: t.into(),
        from: from.map(Into::into),
        to: to.into(),
        reason: MoveReason::Balance,
    };
    let a = [mv("t-1", Some("m-0"), "m-1"), mv("t-2", None, "m-2")];
    assert_eq!(plan_id(&a), plan_id(&a.clone()));
    assert!(plan_id(&a).starts_with("p-") && plan_id(&a).len() == 18);
    for other in [
        vec![mv("t-1", Some("m-0"), "m-1")],
        vec![mv("t-1", Some("m-0"), "m-2"), mv("t-2", None, "m-2")],
        vec![mv("t-1", None, "m-1"), mv("t-2", None, "m-2")],
        // The same bytes split differently are not the same moves.
        vec![mv("t-1", Some("m-0"), "m-1"), mv("t-2", Some(""), "m-2")],
        vec![mv("t-1m-0", None, "m-1"), mv("t-2", None, "m-2")],
    ] {
        assert_ne!(plan_id(&a), plan_id(&other), "{other:?}");
    }
    assert_ne!(plan_id(&[]), plan_id(&a));
}

#[test]
fn each_move_says_why_and_a_drain_warns_of_pins_it_cannot_move() {
    let members = [
        member("m-0", 1, MemberState::Active),
        member("m-1", 1, MemberState::Active),
        member("m-2", 1, MemberState::Active),
    ];
    let mut targets = vec![
        target("a", 1, Some("m-1"), None),
        target("b", 1, Some("m-1"), Some("m-1")),
        target("c", 1, None, None),
        target("d", 1, Some("gone"), None),
        target("e", 1, Some("m-0"), Some("m-2")),
    ];
    let plan = drain(&members, &targets, "m-1", None);
    let why: BTreeMap<&str, MoveReason> = plan
        .moves
        .iter()
        .map(|m| (m.target.as_str(), m.reason))
        .collect();
    assert_eq!(
        why,
        BTreeMap::from([
            ("a", MoveReason::Draining),
            ("c", MoveReason::Unowned),
            ("d", MoveReason::Unowned),
            ("e", MoveReason::Pinned),
        ])
    );
    let pinned: Vec<&Warning> = plan
        .warnings
        .iter()
        .filter(|w| w.kind == WarningKind::Pinned)
        .collect();
    assert_eq!(pinned.len(), 1, "{:?}", plan.warnings);
    assert!(pinned[0].message.contains("m-1") && pinned[0].message.contains('b'));
    // The word scripts see is the one the page carries.
    assert_eq!(
        serde_json::to_value(WarningKind::Pinned).unwrap(),
        WarningKind::Pinned.as_str()
    );
    check_consistent(&members, &targets, &plan, Some("m-1"), true);

    // A rebalance's moves off an overloaded member say so.
    targets = (0..6)
        .map(|i| target(&format!("t-{i}"), 1, Some("m-0"), None))
        .collect();
    let plan = rebalance(&members, &targets, None);
    assert_eq!(plan.moves.len(), 4);
    assert!(plan.moves.iter().all(|m| m.reason == MoveReason::Balance));
    assert_eq!(
        plan.moves[0]
            .reason
            .describe(plan.moves[0].from.as_deref(), &plan.moves[0].to),
        format!("m-0 carries more than its share, {} less", plan.moves[0].to)
    );
    assert!(plan.warnings.is_empty(), "{:?}", plan.warnings);
    // Cut short by a budget: unbalanced after, and said why.
    let plan = rebalance(&members, &targets, Some(1));
    assert_eq!(plan.warnings.len(), 1);
    assert_eq!(plan.warnings[0].kind, WarningKind::Unbalanced);
    assert!(
        plan.warnings[0].message.contains("budget"),
        "{:?}",
        plan.warnings
    );
}
