//! The one definition of imbalance: how unevenly a cluster's load is spread, and when it counts
//! as balanced (docs/concepts.md, "Imbalance"). Every plan's imbalance before and after, the
//! overview, the cluster page and the API's `imbalance` come from [`imbalance`]; the plan pages
//! say "balanced" by [`balanced`].
//!
//! Both look only at the members that take new targets (active ones): cordoned and draining
//! members, and targets nobody holds, count for nobody. Pure: they read the loads they are
//! given and nothing else.

use super::{MemberLoad, MemberState, cmp_frac};

/// The active members of `loads` as (weight, capacity, targets), capacity at least 1.
fn active(loads: &[MemberLoad]) -> impl Iterator<Item = (u64, u64, u64)> + '_ {
    loads
        .iter()
        .filter(|l| l.state == MemberState::Active)
        .map(|l| (l.weight, u64::from(l.capacity.max(1)), l.targets as u64))
}

/// How far the most loaded active member is above its fair share, as a fraction of that share:
/// `max(weight_i / share_i) − 1` over the active members, where `share_i = W × capacity_i / C`,
/// `W` is the weight the active members carry together and `C` the sum of their capacities.
///
/// 0.0 is perfectly even (also with no active member, or nothing on them); 0.25 means the most
/// loaded member carries a quarter more than its share; 2.0, three times its share. Whole
/// targets seldom divide evenly, so 0.0 is often out of reach: see [`balanced`].
pub fn imbalance(loads: &[MemberLoad]) -> f64 {
    let total: u64 = active(loads).map(|(w, ..)| w).sum();
    let caps: u64 = active(loads).map(|(_, c, _)| c).sum();
    let peak = active(loads).max_by(|a, b| cmp_frac(a.0, a.1, b.0, b.1));
    match peak {
        Some((weight, cap, _)) if total > 0 => {
            (weight as f64 * caps as f64) / (total as f64 * cap as f64) - 1.0
        }
        _ => 0.0,
    }
}

/// Whether `loads` count as balanced: every active member carries less than its fair share
/// (as in [`imbalance`]) plus one target of average weight, `weight_i < share_i + W / N` with
/// `N` the number of targets on active members — as even as whole targets allow, give or take
/// one. Eight equal targets on three equal members as 3, 3, 2 are balanced (imbalance 12.5 %);
/// nine as 4, 3, 2 are not (33 %: 3, 3, 3 is possible). Nothing on active members is balanced.
pub fn balanced(loads: &[MemberLoad]) -> bool {
    let total = u128::from(active(loads).map(|(w, ..)| w).sum::<u64>());
    let caps = u128::from(active(loads).map(|(_, c, _)| c).sum::<u64>());
    let count = u128::from(active(loads).map(|(.., n)| n).sum::<u64>());
    if total == 0 || count == 0 {
        return true;
    }
    // weight_i < W × cap_i / C + W / N, times C × N (exact).
    active(loads).all(|(weight, cap, _)| {
        u128::from(weight) * caps * count < total * u128::from(cap) * count + total * caps
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Members `m-0`, `m-1`, … with these (targets, weight, capacity, state).
    fn loads(members: &[(usize, u64, u32, MemberState)]) -> Vec<MemberLoad> {
        members
            .iter()
            .enumerate()
            .map(|(i, &(targets, weight, capacity, state))| MemberLoad {
                member: format!("m-{i}"),
                capacity,
                state,
                targets,
                weight,
            })
            .collect()
    }

    /// Active members of capacity 1 holding these many targets of weight 1.
    fn even(counts: &[usize]) -> Vec<MemberLoad> {
        let members: Vec<_> = counts
            .iter()
            .map(|&n| (n, n as u64, 1, MemberState::Active))
            .collect();
        loads(&members)
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    /// The definition on small examples: the value, and whether it counts as balanced.
    #[test]
    fn imbalance_is_the_peak_over_fair_share_and_balanced_is_within_one_target() {
        use MemberState::{Active, Cordoned, Draining};
        let cases: [(&str, Vec<MemberLoad>, f64, bool); 12] = [
            ("exactly even", even(&[3, 3, 3]), 0.0, true),
            ("8 over 3 as well as it goes", even(&[3, 3, 2]), 0.125, true),
            ("8 over 3 with one short", even(&[4, 2, 2]), 0.5, false),
            ("9 over 3 one off", even(&[4, 3, 2]), 1.0 / 3.0, false),
            ("10 over 3 at best", even(&[4, 3, 3]), 0.2, true),
            ("all on one", even(&[10, 0, 0]), 2.0, false),
            ("nothing anywhere", even(&[0, 0]), 0.0, true),
            (
                // Shares 6 and 3 by capacity 2 : 1.
                "capacities met",
                loads(&[(6, 6, 2, Active), (3, 3, 1, Active)]),
                0.0,
                true,
            ),
            (
                // m-1 carries 4 against a share of 3: a whole target too many.
                "capacities missed",
                loads(&[(5, 5, 2, Active), (4, 4, 1, Active)]),
                1.0 / 3.0,
                false,
            ),
            (
                // Weights 10 and 1 cannot split better: shares 5.5, within one average
                // target (5.5).
                "one heavy target",
                loads(&[(1, 10, 1, Active), (1, 1, 1, Active)]),
                10.0 / 5.5 - 1.0,
                true,
            ),
            (
                // Only active members count: the cordoned one's 10 and the draining one's
                // 7 count for nobody.
                "cordoned and draining ignored",
                loads(&[
                    (2, 2, 1, Active),
                    (2, 2, 1, Active),
                    (10, 10, 1, Cordoned),
                    (7, 7, 1, Draining),
                ]),
                0.0,
                true,
            ),
            (
                "no active member",
                loads(&[(5, 5, 1, Cordoned), (0, 0, 1, Draining)]),
                0.0,
                true,
            ),
        ];
        for (name, l, value, is_balanced) in cases {
            assert!(close(imbalance(&l), value), "{name}: {}", imbalance(&l));
            assert_eq!(balanced(&l), is_balanced, "{name}");
        }
    }

    /// Capacity 0 is read as 1, as everywhere in the planner.
    #[test]
    fn zero_capacity_counts_as_one() {
        let zero = loads(&[
            (3, 3, 0, MemberState::Active),
            (1, 1, 1, MemberState::Active),
        ]);
        assert!(close(imbalance(&zero), 0.5));
        assert!(!balanced(&zero));
    }
}
