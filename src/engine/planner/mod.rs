//! The planner: decides which member instance each target should live on.
//!
//! Owns: the placement model ([`Member`], [`Target`]), the plan it produces ([`Plan`], [`Move`],
//! [`MemberLoad`], [`Blocked`], and its id, [`plan_id`]), the four planning functions [`place`], [`drain`],
//! [`rebalance`] and [`lower_bound`], and the one measure of how even a placement is,
//! [`imbalance`] (with [`balanced`]).
//!
//! Must not: do I/O, read a clock, spawn tasks, use randomness or depend on any other module of
//! the crate. Every function here is pure, synchronous and deterministic: the same members and
//! targets, in any order, give the same plan. Applying a plan (writing Leases) is someone else's
//! job.
//!
//! Rules every plan follows:
//! - A pinned target must end on its pin. If it is there it never moves; if the pin is a member
//!   that is not draining it moves there (even to a cordoned pin); if the pin is missing or
//!   draining it does not move and is reported in [`Plan::blocked`].
//! - An unpinned target "needs a home" when its owner is unset, names no member, or names a
//!   draining member. Homes are only ever on active members; with no active member the target is
//!   blocked.
//! - Unpinned targets on cordoned members stay there; nothing moves onto a cordoned or draining
//!   member except to an explicit pin.
//! - Load is a target's weight; a member's fair share is proportional to its capacity among the
//!   active members. See [`imbalance`] for the exact measure: a plan's imbalance before is that
//!   of the members as given (a drained member counted in its own state), so every plan of one
//!   cluster state, and the overview, state the same value.
//!
//! Member ids and target keys are expected to be unique. Duplicate member ids are collapsed to
//! one member (the first by id, then state, then capacity); duplicate target keys are kept as
//! separate targets, so their moves then share a key.

use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeSet, HashMap};

use serde::{Deserialize, Serialize};

mod imbalance;

pub use imbalance::{balanced, imbalance};

/// What a member may do with targets.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum MemberState {
    /// Keeps its targets and receives new ones.
    Active,
    /// Keeps its targets, receives none (except targets explicitly pinned to it).
    Cordoned,
    /// Receives none; every unpinned target it has must leave.
    Draining,
}

/// A member instance (for example a pod) that can own targets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub struct Member {
    /// Unique member id.
    pub id: String,
    /// Relative weight of how much load the member should carry; 0 is read as 1.
    pub capacity: u32,
    /// Whether the member keeps and receives targets.
    pub state: MemberState,
}

/// A unit of work (for example a network device) that one member owns at a time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub struct Target {
    /// Unique target key.
    pub key: String,
    /// How much load the target puts on its owner; 0 is read as 1.
    pub weight: u32,
    /// Current (or desired) owner member id; may name a member that is gone.
    pub owner: Option<String>,
    /// Member id the target must live on.
    pub pin: Option<String>,
}

/// One target changing owner.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub struct Move {
    /// Key of the target that moves.
    pub target: String,
    /// The target's owner before the plan, exactly as given (it may name a gone member).
    pub from: Option<String>,
    /// The member it moves to.
    pub to: String,
    /// Why the plan moves it.
    pub reason: MoveReason,
}

/// Why a plan moves a target: the rule of the planner that made the move.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum MoveReason {
    /// It is pinned to the member it moves to.
    Pinned,
    /// Nobody holds it, or its holder is not a member (gone, or never was).
    Unowned,
    /// Its owner is draining (being removed): every unpinned target must leave it.
    Draining,
    /// Its owner carries more than its fair share; the receiver less.
    Balance,
}

impl MoveReason {
    /// The reason in words, for a move `from` → `to`.
    pub fn describe(self, from: Option<&str>, to: &str) -> String {
        match (self, from) {
            (MoveReason::Pinned, _) => format!("pinned to {to}"),
            (MoveReason::Unowned, Some(f)) => format!("its holder {f} is not a member"),
            (MoveReason::Unowned, None) => "nobody holds it".to_owned(),
            (MoveReason::Draining, Some(f)) => format!("{f} is being drained"),
            (MoveReason::Draining, None) => "its owner is being drained".to_owned(),
            (MoveReason::Balance, Some(f)) => {
                format!("{f} carries more than its share, {to} less")
            }
            (MoveReason::Balance, None) => format!("{to} carries less than its share"),
        }
    }
}

impl WarningKind {
    /// The kind as the API spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            WarningKind::OnlyInstanceOfRole => "only_instance_of_role",
            WarningKind::ElectedLeader => "elected_leader",
            WarningKind::LastReadyMember => "last_ready_member",
            WarningKind::Pinned => "pinned",
            WarningKind::NoActiveMember => "no_active_member",
            WarningKind::Unbalanced => "unbalanced",
            WarningKind::FrequentMoves => "frequent_moves",
        }
    }
}

/// Something the person who starts a plan should know first. The planner adds the ones it can
/// see in its input ([`WarningKind::Pinned`], [`WarningKind::Unbalanced`]); the engine adds
/// those that need the cluster's state or history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub struct Warning {
    /// Which warning, for scripts.
    pub kind: WarningKind,
    /// The warning in words, naming what it is about.
    pub message: String,
}

/// The warnings a plan can carry (docs/concepts.md, "Plan warnings").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum WarningKind {
    /// Removing the only ready instance with a role (e.g. the controlling instance).
    OnlyInstanceOfRole,
    /// Removing the members' elected leader.
    ElectedLeader,
    /// Removing the last ready member.
    LastReadyMember,
    /// Targets pinned to a member that is draining or missing cannot move.
    Pinned,
    /// Targets that need a home find no active member to take them.
    NoActiveMember,
    /// The cluster is not balanced ([`balanced`]) after the plan.
    Unbalanced,
    /// Targets in the plan moved more than the limit in the recent window.
    FrequentMoves,
}

/// How much one member carries, before or after a plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub struct MemberLoad {
    /// Member id.
    pub member: String,
    /// The member's capacity (0 reported as 1).
    pub capacity: u32,
    /// The member's state as the plan saw it ([`drain`] reports the drained member as draining).
    pub state: MemberState,
    /// Number of targets on the member.
    pub targets: usize,
    /// Total weight of the targets on the member.
    pub weight: u64,
}

/// A target the plan could not put where it must be; it stays where it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub struct Blocked {
    /// Key of the blocked target.
    pub target: String,
    /// Why it cannot be placed, for people.
    pub reason: String,
}

/// The outcome of planning: the moves and what they do to each member's load.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub struct Plan {
    /// Identifies the moves ([`plan_id`]): a start request that names the id of the plan it
    /// previewed runs exactly those moves or is refused.
    pub id: String,
    /// The moves, sorted by target key; each target appears at most once.
    pub moves: Vec<Move>,
    /// Every member's load before the plan, sorted by member id.
    pub before: Vec<MemberLoad>,
    /// Every member's load after applying all of [`Plan::moves`], sorted by member id.
    pub after: Vec<MemberLoad>,
    /// Imbalance before the plan: over the active members, the largest `weight_i / share_i`,
    /// minus 1, where `share_i = W * capacity_i / Σ capacity` and `W` is the total weight on
    /// active members in that state. 0.0 with no active member or `W == 0`. Targets that need a
    /// home count for nobody; a blocked target counts where it stays.
    pub imbalance_before: f64,
    /// Imbalance after the plan, measured as for [`Plan::imbalance_before`].
    pub imbalance_after: f64,
    /// Targets that cannot be placed, sorted by target key.
    pub blocked: Vec<Blocked>,
    /// The move budget cut the plan short: more moves were needed.
    pub truncated: bool,
    /// What to know before starting it, most serious first.
    pub warnings: Vec<Warning>,
}

impl Plan {
    /// Each member's targets before and after the plan, `(member, before, after)`: the members
    /// of [`Plan::before`] in its order, then those only in [`Plan::after`].
    pub fn loads(&self) -> Vec<(String, usize, usize)> {
        let after = |m: &str| {
            self.after
                .iter()
                .find(|a| a.member == m)
                .map_or(0, |a| a.targets)
        };
        let mut out: Vec<(String, usize, usize)> = self
            .before
            .iter()
            .map(|b| (b.member.clone(), b.targets, after(&b.member)))
            .collect();
        for a in &self.after {
            if !out.iter().any(|(m, ..)| *m == a.member) {
                out.push((a.member.clone(), 0, a.targets));
            }
        }
        out
    }
}

/// The id of a plan of these `moves` (in their order): `p-` and the first 16 hex digits of the
/// SHA-256 of every move's target, old owner and new owner. Two plans have the same id exactly
/// when they make the same moves (to 2^-64).
pub fn plan_id(moves: &[Move]) -> String {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    for m in moves {
        // Lengths first, so that no two different moves write the same bytes.
        for part in [m.target.as_str(), m.from.as_deref().unwrap_or(""), &m.to] {
            ctx.update(&(part.len() as u64).to_le_bytes());
            ctx.update(part.as_bytes());
        }
        ctx.update(&[u8::from(m.from.is_some())]);
    }
    let hex: String = ctx.finish().as_ref()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("p-{hex}")
}

/// Gives homes to the targets that need one, and nothing else.
///
/// Pinned targets that are not on their (valid) pin move there first. Then each target that
/// needs a home goes, heaviest first (ties: lowest key), to the active member with the lowest
/// `(weight + w) / capacity` (ties: lowest member id). Nothing else moves. Used for initial
/// placement and failover.
pub fn place(members: &[Member], targets: &[Target]) -> Plan {
    let model = Model::new(members, targets, None);
    let mut layout = Layout::current(&model);
    layout.settle_pins(&model);
    layout.place_homeless(&model);
    model.plan(&layout.owner, false)
}

/// [`place`] with member `instance` treated as draining: its unpinned targets spread over the
/// active members (lowest relative load first) and nothing else moves, except other targets that
/// need a home and pinned targets moving to their pin.
///
/// If `instance` is not in `members`, every target whose owner is `instance` needs a home anyway.
/// Targets pinned to `instance` are blocked (their pin is draining) and stay. With a `budget`,
/// pin moves come first (by key), then homes in placement order (heaviest first); the rest wait.
pub fn drain(
    members: &[Member],
    targets: &[Target],
    instance: &str,
    budget: Option<usize>,
) -> Plan {
    let model = Model::new(members, targets, Some(instance));
    let mut layout = Layout::current(&model);
    layout.settle_pins(&model);
    layout.place_homeless(&model);
    model.finish(&layout.owner, budget)
}

/// Gives homes to the targets that need one, then balances load across the active members with
/// few moves, within at most `budget` moves.
///
/// Respects pins, never moves anything onto a cordoned or draining member except to an explicit
/// pin, and never moves an unpinned target off a cordoned member.
///
/// When every target that ends on an active member has the same weight, the plan is exact: each
/// active member ends on its quota (see [`lower_bound`]) and the plan makes exactly
/// `lower_bound()` moves. Without pins the quota is the floor or the ceiling of the member's exact
/// share `N * capacity / Σ capacity`.
///
/// With mixed weights: overloaded members shed, one at a time, the target whose weight best fits
/// their excess over their share while that brings them closer to it; the shed and the homeless
/// targets go heaviest first to the relatively least loaded member; then a bounded improvement
/// pass moves single targets off the relatively most loaded member while the receiver stays
/// strictly below that member's old relative load. If that result peaks higher (relative to
/// capacity) than simply homing the homeless targets as [`place`] does, the plan is [`place`]
/// followed by the improvement pass instead, so `imbalance_after` is never above [`place`]'s.
/// When the pass ends within its step bound and one active member is strictly the most loaded,
/// no single move of one of its free targets to a least loaded active member lowers that peak.
///
/// When the plan needs more than `budget` moves, it keeps (and sets [`Plan::truncated`]):
/// pin moves (by key), then homes (heaviest first), then the balancing moves of the full plan,
/// each time from the active member that is relatively most loaded at that point. The moves of a
/// truncated plan are always a subset of the moves of the plan without budget.
pub fn rebalance(members: &[Member], targets: &[Target], budget: Option<usize>) -> Plan {
    let model = Model::new(members, targets, None);
    let mut layout = Layout::current(&model);
    layout.settle_pins(&model);
    if model.uniform_weight(&layout) {
        layout.balance_exact(&model);
    } else {
        layout.balance_weighted(&model);
    }
    model.finish(&layout.owner, budget)
}

/// The fewest moves a [`rebalance`] can make when weights are ignored (all read as 1).
///
/// That is the number of targets that need a home and can get one, plus the pinned targets not
/// on their valid pin, plus the sum over active members of `max(0, kept_i − quota_i)`, where
/// `kept_i` is the number of targets on member `i` once pins are settled and `quota_i` its
/// integer load in a balanced result:
/// - `N` = number of targets that will live on active members.
/// - A member whose immovable targets (pinned to it, or blocked on it) exceed its exact share gets
///   exactly those as quota and leaves the rest to the others; this repeats until no such member
///   is left.
/// - Every other member gets the floor of its exact share of what is left; the remaining units go
///   one each to members whose share is not whole, first to those that hold more than the floor
///   (that saves a move), then by largest fractional part, then most held, then lowest id.
///
/// It is the minimum over all plans whose final counts are these quotas.
pub fn lower_bound(members: &[Member], targets: &[Target]) -> usize {
    let model = Model::new(members, targets, None);
    let mut layout = Layout::current(&model);
    layout.settle_pins(&model);
    let quota = layout.quotas(&model);
    let forced = model
        .targets
        .iter()
        .filter(|t| matches!(t.kind, Kind::Homeless | Kind::ToPin(_)))
        .count();
    let excess: usize = model
        .active()
        .map(|m| layout.count[m].saturating_sub(quota[m]))
        .sum();
    forced + excess
}

/// The improvement pass may take at most this many steps per target and member. Each step
/// strictly lowers the sorted vector of relative loads, so the pass always ends; this bound only
/// keeps the worst case linear. A pass cut by it may miss local optimality.
const IMPROVE_STEPS_PER_ITEM: usize = 2;

/// Why a target is blocked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Block {
    PinUnknown,
    PinDraining,
    NoActiveMember,
}

/// What the planner may do with a target, decided once from the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Unpinned on an active member: balancing may move it.
    Free,
    /// Stays where it is: on its pin, or unpinned on a cordoned member.
    Fixed,
    /// Unpinned and needs a home on an active member.
    Homeless,
    /// Must move to its pin, this member.
    ToPin(usize),
    /// Cannot be placed; stays where it is.
    Blocked(Block),
}

/// A member as the planner sees it (capacity at least 1, `drain`'s instance draining).
struct MemberView<'a> {
    id: &'a str,
    cap: u64,
    state: MemberState,
    /// Its state as given (`drain`'s instance too): what [`Plan::before`] reports.
    given: MemberState,
}

/// A target as the planner sees it (weight at least 1).
struct TargetView<'a> {
    key: &'a str,
    weight: u64,
    /// The owner as given.
    owner: Option<&'a str>,
    /// The owner's member index, when the owner is a member.
    from: Option<usize>,
    pin: Option<&'a str>,
    kind: Kind,
}

/// The input, interned: members sorted by id, targets sorted by key, indices everywhere else.
struct Model<'a> {
    members: Vec<MemberView<'a>>,
    targets: Vec<TargetView<'a>>,
}

impl<'a> Model<'a> {
    fn new(members: &'a [Member], targets: &'a [Target], draining: Option<&str>) -> Self {
        let mut sorted: Vec<&Member> = members.iter().collect();
        sorted.sort_unstable_by(|a, b| {
            (&a.id, a.state, a.capacity).cmp(&(&b.id, b.state, b.capacity))
        });
        sorted.dedup_by(|later, first| later.id == first.id);
        let members: Vec<MemberView> = sorted
            .iter()
            .map(|m| MemberView {
                id: &m.id,
                cap: u64::from(m.capacity.max(1)),
                state: if draining == Some(m.id.as_str()) {
                    MemberState::Draining
                } else {
                    m.state
                },
                given: m.state,
            })
            .collect();
        let index: HashMap<&str, usize> =
            members.iter().enumerate().map(|(i, m)| (m.id, i)).collect();
        let any_active = members.iter().any(|m| m.state == MemberState::Active);

        let mut sorted: Vec<&Target> = targets.iter().collect();
        sorted.sort_unstable_by(|a, b| {
            (&a.key, a.weight, &a.owner, &a.pin).cmp(&(&b.key, b.weight, &b.owner, &b.pin))
        });
        let targets = sorted
            .iter()
            .map(|t| {
                let from = t.owner.as_deref().and_then(|o| index.get(o).copied());
                let from_state = from.map(|m| members[m].state);
                let kind = match t.pin.as_deref() {
                    Some(pin) => match index.get(pin).copied() {
                        None => Kind::Blocked(Block::PinUnknown),
                        Some(p) if members[p].state == MemberState::Draining => {
                            Kind::Blocked(Block::PinDraining)
                        }
                        Some(p) if from == Some(p) => Kind::Fixed,
                        Some(p) => Kind::ToPin(p),
                    },
                    None => match from_state {
                        Some(MemberState::Active) => Kind::Free,
                        Some(MemberState::Cordoned) => Kind::Fixed,
                        Some(MemberState::Draining) | None if any_active => Kind::Homeless,
                        Some(MemberState::Draining) | None => Kind::Blocked(Block::NoActiveMember),
                    },
                };
                TargetView {
                    key: &t.key,
                    weight: u64::from(t.weight.max(1)),
                    owner: t.owner.as_deref(),
                    from,
                    pin: t.pin.as_deref(),
                    kind,
                }
            })
            .collect();
        Model { members, targets }
    }

    fn is_active(&self, m: usize) -> bool {
        self.members[m].state == MemberState::Active
    }

    /// Indices of the active members, in id order.
    fn active(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.members.len()).filter(|&m| self.is_active(m))
    }

    /// Whether every target that will live on an active member has the same weight, so that
    /// balancing by count is balancing by weight.
    fn uniform_weight(&self, layout: &Layout) -> bool {
        let mut weights = self.targets.iter().enumerate().filter_map(|(t, view)| {
            let on_active = layout.owner[t].is_some_and(|m| self.is_active(m));
            (on_active || view.kind == Kind::Homeless).then_some(view.weight)
        });
        match weights.next() {
            Some(first) => weights.all(|w| w == first),
            None => true,
        }
    }

    /// Applies `budget` to the final owners `full`, then builds the plan.
    fn finish(&self, full: &[Option<usize>], budget: Option<usize>) -> Plan {
        let needed = self.moved(full).count();
        match budget {
            Some(budget) if needed > budget => self.plan(&self.truncate(full, budget), true),
            _ => self.plan(full, false),
        }
    }

    /// Indices of the targets whose owner in `owner` differs from their owner before.
    fn moved<'s>(&'s self, owner: &'s [Option<usize>]) -> impl Iterator<Item = usize> + 's {
        (0..self.targets.len()).filter(move |&t| owner[t] != self.targets[t].from)
    }

    /// Keeps `budget` of the moves in `full`: pin moves, then homes, then balancing moves taken
    /// from the relatively most loaded source member first.
    fn truncate(&self, full: &[Option<usize>], budget: usize) -> Vec<Option<usize>> {
        let mut owner: Vec<Option<usize>> = self.targets.iter().map(|t| t.from).collect();
        let mut pins = Vec::new();
        let mut homes = Vec::new();
        let mut balancing = Vec::new();
        for t in self.moved(full) {
            match self.targets[t].kind {
                Kind::ToPin(_) => pins.push(t),
                Kind::Homeless => homes.push(t),
                _ => balancing.push(t),
            }
        }
        homes.sort_by_key(|&t| (Reverse(self.targets[t].weight), t));
        let mut left = budget;
        for t in pins.into_iter().chain(homes) {
            if left == 0 {
                return owner;
            }
            owner[t] = full[t];
            left -= 1;
        }

        let mut load = vec![0u64; self.members.len()];
        for (t, m) in owner.iter().enumerate() {
            if let Some(m) = *m {
                load[m] += self.targets[t].weight;
            }
        }
        // Each source's outgoing moves as (weight, target, to), sorted so that popping from the
        // back yields the heaviest first (ties: the lowest key).
        let mut outgoing: Vec<Vec<(u64, Reverse<usize>, usize)>> =
            vec![Vec::new(); self.members.len()];
        for &t in &balancing {
            if let (Some(from), Some(to)) = (self.targets[t].from, full[t]) {
                outgoing[from].push((self.targets[t].weight, Reverse(t), to));
            }
        }
        let mut sources = BTreeSet::new();
        for (m, list) in outgoing.iter_mut().enumerate() {
            list.sort_unstable();
            if !list.is_empty() {
                sources.insert(self.rank(m, load[m]));
            }
        }
        while left > 0 {
            let Some(Rank { member: source, .. }) = sources.pop_last() else {
                break;
            };
            let Some((weight, Reverse(t), to)) = outgoing[source].pop() else {
                continue;
            };
            owner[t] = Some(to);
            left -= 1;
            load[source] -= weight;
            if sources.remove(&self.rank(to, load[to])) {
                sources.insert(self.rank(to, load[to] + weight));
            }
            load[to] += weight;
            if !outgoing[source].is_empty() {
                sources.insert(self.rank(source, load[source]));
            }
        }
        owner
    }

    fn rank(&self, member: usize, load: u64) -> Rank {
        Rank {
            load,
            cap: self.members[member].cap,
            member,
        }
    }

    /// Builds the output for the final owners `owner`.
    fn plan(&self, owner: &[Option<usize>], truncated: bool) -> Plan {
        let before: Vec<Option<usize>> = self.targets.iter().map(|t| t.from).collect();
        let before = self.loads(&before, |m| m.given);
        let after = self.loads(owner, |m| m.state);
        let moves: Vec<Move> = self
            .moved(owner)
            .filter_map(|t| {
                let view = &self.targets[t];
                owner[t].map(|to| Move {
                    target: view.key.to_owned(),
                    from: view.owner.map(str::to_owned),
                    to: self.members[to].id.to_owned(),
                    reason: self.reason(view),
                })
            })
            .collect();
        let blocked: Vec<Blocked> = self
            .targets
            .iter()
            .filter_map(|t| match t.kind {
                Kind::Blocked(why) => Some(Blocked {
                    target: t.key.to_owned(),
                    reason: block_reason(why, t.pin),
                }),
                _ => None,
            })
            .collect();
        let warnings = self.warnings(&blocked, &after, truncated);
        Plan {
            id: plan_id(&moves),
            moves,
            imbalance_before: imbalance(&before),
            imbalance_after: imbalance(&after),
            before,
            after,
            blocked,
            truncated,
            warnings,
        }
    }

    /// Why `view` moves, read off its kind (only targets of these kinds ever move).
    fn reason(&self, view: &TargetView) -> MoveReason {
        match view.kind {
            Kind::ToPin(_) => MoveReason::Pinned,
            Kind::Homeless => match view.from {
                Some(_) => MoveReason::Draining,
                None => MoveReason::Unowned,
            },
            Kind::Free | Kind::Fixed | Kind::Blocked(_) => MoveReason::Balance,
        }
    }

    /// The warnings the input alone shows: pinned targets that cannot move, and a cluster
    /// left unbalanced (a budget that cut the plan short says why).
    fn warnings(&self, blocked: &[Blocked], after: &[MemberLoad], truncated: bool) -> Vec<Warning> {
        let mut out = Vec::new();
        let pinned: Vec<&TargetView> = self
            .targets
            .iter()
            .filter(|t| {
                matches!(
                    t.kind,
                    Kind::Blocked(Block::PinUnknown | Block::PinDraining)
                )
            })
            .collect();
        if let Some(first) = pinned.first() {
            let pins: BTreeSet<&str> = pinned.iter().filter_map(|t| t.pin).collect();
            out.push(Warning {
                kind: WarningKind::Pinned,
                message: format!(
                    "{} target{} pinned to {} (draining or not a member) cannot move: {}{}; change their pins first.",
                    pinned.len(),
                    if pinned.len() == 1 { " is" } else { "s are" },
                    pins.into_iter().collect::<Vec<_>>().join(", "),
                    first.key,
                    if pinned.len() > 1 { ", …" } else { "" },
                ),
            });
        }
        let others = blocked.len() - pinned.len();
        if others > 0 {
            out.push(Warning {
                kind: WarningKind::NoActiveMember,
                message: format!(
                    "{others} target{} no active member to go to and stay{} unworked by this plan.",
                    if others == 1 { " has" } else { "s have" },
                    if others == 1 { "s" } else { "" },
                ),
            });
        }
        if !balanced(after) {
            out.push(Warning {
                kind: WarningKind::Unbalanced,
                message: format!(
                    "The cluster is not balanced after this plan (imbalance {:.0} %){}.",
                    imbalance(after) * 100.0,
                    if truncated {
                        ": the move budget cut it short"
                    } else {
                        ": pins and cordons leave no better placement"
                    },
                ),
            });
        }
        out
    }

    /// Every member's load under `owner`, each in the state `state` reads off its view.
    fn loads(
        &self,
        owner: &[Option<usize>],
        state: impl Fn(&MemberView) -> MemberState,
    ) -> Vec<MemberLoad> {
        let mut count = vec![0usize; self.members.len()];
        let mut weight = vec![0u64; self.members.len()];
        for (t, m) in owner.iter().enumerate() {
            if let Some(m) = *m {
                count[m] += 1;
                weight[m] += self.targets[t].weight;
            }
        }
        self.members
            .iter()
            .enumerate()
            .map(|(m, view)| MemberLoad {
                member: view.id.to_owned(),
                capacity: u32::try_from(view.cap).unwrap_or(u32::MAX),
                state: state(view),
                targets: count[m],
                weight: weight[m],
            })
            .collect()
    }
}

/// The reason reported in [`Blocked::reason`].
fn block_reason(why: Block, pin: Option<&str>) -> String {
    let pin = pin.unwrap_or_default();
    match why {
        Block::PinUnknown => format!("pinned to {pin:?}, which is not a member"),
        Block::PinDraining => format!("pinned to {pin:?}, which is draining"),
        Block::NoActiveMember => "no active member can take it".to_owned(),
    }
}

/// A member ordered by relative load `load / cap`; among equal ratios the lowest member index is
/// the greatest, so `last()` of a set is the most loaded member with the lowest id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Rank {
    load: u64,
    cap: u64,
    member: usize,
}

impl Rank {
    fn ratio_cmp(&self, other: &Self) -> Ordering {
        cmp_frac(self.load, self.cap, other.load, other.cap)
    }
}

impl Ord for Rank {
    fn cmp(&self, other: &Self) -> Ordering {
        self.ratio_cmp(other)
            .then_with(|| other.member.cmp(&self.member))
    }
}

impl PartialOrd for Rank {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Compares `a / b` with `c / d` exactly (`b`, `d` > 0).
fn cmp_frac(a: u64, b: u64, c: u64, d: u64) -> Ordering {
    (u128::from(a) * u128::from(d)).cmp(&(u128::from(c) * u128::from(b)))
}

/// The active members grouped by capacity, each group ordered by (load, member), so the member
/// with the lowest `(load + w) / cap` is found among the group heads for any `w`.
struct Receivers {
    /// (capacity, members of that capacity as (load, member)), by capacity.
    groups: Vec<(u64, BTreeSet<(u64, usize)>)>,
    /// Index into `groups` per member; only read for active members.
    group_of: Vec<usize>,
}

impl Receivers {
    fn new(model: &Model, layout: &Layout) -> Self {
        let mut caps: Vec<u64> = model.active().map(|m| model.members[m].cap).collect();
        caps.sort_unstable();
        caps.dedup();
        let mut groups: Vec<(u64, BTreeSet<(u64, usize)>)> =
            caps.iter().map(|&c| (c, BTreeSet::new())).collect();
        let mut group_of = vec![0; model.members.len()];
        for m in model.active() {
            let g = caps.partition_point(|&c| c < model.members[m].cap);
            group_of[m] = g;
            groups[g].1.insert((layout.load[m], m));
        }
        Receivers { groups, group_of }
    }

    /// The member with the lowest `(load + w) / cap`, ties to the lowest id.
    fn best(&self, w: u64) -> Option<usize> {
        let mut best: Option<(u64, u64, usize)> = None;
        for (cap, set) in &self.groups {
            if let Some(&(load, m)) = set.first() {
                let better = match best {
                    None => true,
                    Some((bl, bc, bm)) => {
                        cmp_frac(load + w, *cap, bl + w, bc).then(m.cmp(&bm)) == Ordering::Less
                    }
                };
                if better {
                    best = Some((load, *cap, m));
                }
            }
        }
        best.map(|(_, _, m)| m)
    }

    /// The least loaded member of each capacity group other than `except`, as (member, load).
    fn heads(&self, except: usize) -> impl Iterator<Item = (usize, u64)> + '_ {
        self.groups.iter().filter_map(move |(_, set)| {
            set.iter()
                .find(|&&(_, m)| m != except)
                .map(|&(load, m)| (m, load))
        })
    }

    fn update(&mut self, m: usize, old: u64, new: u64) {
        let set = &mut self.groups[self.group_of[m]].1;
        set.remove(&(old, m));
        set.insert((new, m));
    }
}

/// Who owns what, and the resulting loads, while a plan is being built.
#[derive(Clone)]
struct Layout {
    owner: Vec<Option<usize>>,
    load: Vec<u64>,
    count: Vec<usize>,
}

impl Layout {
    fn current(model: &Model) -> Self {
        let mut layout = Layout {
            owner: vec![None; model.targets.len()],
            load: vec![0; model.members.len()],
            count: vec![0; model.members.len()],
        };
        for (t, view) in model.targets.iter().enumerate() {
            layout.relocate(model, t, view.from);
        }
        layout
    }

    fn relocate(&mut self, model: &Model, t: usize, to: Option<usize>) {
        let weight = model.targets[t].weight;
        if let Some(m) = self.owner[t] {
            self.load[m] -= weight;
            self.count[m] -= 1;
        }
        if let Some(m) = to {
            self.load[m] += weight;
            self.count[m] += 1;
        }
        self.owner[t] = to;
    }

    /// Moves every pinned target that can reach its pin onto it.
    fn settle_pins(&mut self, model: &Model) {
        for (t, view) in model.targets.iter().enumerate() {
            if let Kind::ToPin(pin) = view.kind {
                self.relocate(model, t, Some(pin));
            }
        }
    }

    /// The greedy placement of [`place`] for every homeless target.
    fn place_homeless(&mut self, model: &Model) {
        let mut homeless: Vec<usize> = (0..model.targets.len())
            .filter(|&t| model.targets[t].kind == Kind::Homeless)
            .collect();
        homeless.sort_by_key(|&t| (Reverse(model.targets[t].weight), t));
        self.fill(model, homeless);
    }

    /// Places `pool` in order, each on the member with the lowest `(load + w) / cap`.
    fn fill(&mut self, model: &Model, pool: Vec<usize>) {
        let mut receivers = Receivers::new(model, self);
        for t in pool {
            let Some(m) = receivers.best(model.targets[t].weight) else {
                return;
            };
            let old = self.load[m];
            self.relocate(model, t, Some(m));
            receivers.update(m, old, self.load[m]);
        }
    }

    /// The quotas of [`lower_bound`], per member (0 for members that are not active).
    fn quotas(&self, model: &Model) -> Vec<usize> {
        let mut quota = vec![0usize; model.members.len()];
        let mut immovable = vec![0usize; model.members.len()];
        let mut homeless = 0;
        for (t, view) in model.targets.iter().enumerate() {
            match (view.kind, self.owner[t]) {
                (Kind::Homeless, _) => homeless += 1,
                (Kind::Free, _) | (_, None) => {}
                (_, Some(m)) => immovable[m] += 1,
            }
        }
        let mut open: Vec<usize> = model.active().collect();
        let mut spread: usize = homeless + open.iter().map(|&m| self.count[m]).sum::<usize>();
        let cap = |m: usize| u128::from(model.members[m].cap);
        let over_share = |m: usize, spread: usize, caps: u128| {
            immovable[m] as u128 * caps > spread as u128 * cap(m)
        };
        loop {
            let caps: u128 = open.iter().map(|&m| cap(m)).sum();
            let (full, rest): (Vec<usize>, Vec<usize>) =
                open.iter().partition(|&&m| over_share(m, spread, caps));
            if full.is_empty() {
                break;
            }
            for m in full {
                quota[m] = immovable[m];
                spread -= immovable[m];
            }
            open = rest;
        }
        let caps: u128 = open.iter().map(|&m| cap(m)).sum();
        if caps == 0 {
            return quota;
        }
        let mut assigned = 0;
        let mut partial = Vec::new();
        for &m in &open {
            let exact = spread as u128 * cap(m);
            // Below `spread` because `cap(m) <= caps`, so the conversion cannot fail.
            quota[m] = usize::try_from(exact / caps).unwrap_or(spread);
            assigned += quota[m];
            let fraction = exact % caps;
            if fraction > 0 {
                partial.push((self.count[m] > quota[m], fraction, self.count[m], m));
            }
        }
        partial.sort_unstable_by(|a, b| (b.0, b.1, b.2, a.3).cmp(&(a.0, a.1, a.2, b.3)));
        for &(_, _, _, m) in partial.iter().take(spread - assigned) {
            quota[m] += 1;
        }
        quota
    }

    /// Exact balancing by count: every active member ends on its quota with the fewest moves.
    /// Members above quota shed their highest-key free targets; the shed and the homeless
    /// targets (by key) fill the members below quota in id order.
    fn balance_exact(&mut self, model: &Model) {
        let quota = self.quotas(model);
        let mut free_on: Vec<Vec<usize>> = vec![Vec::new(); model.members.len()];
        let mut pool = Vec::new();
        for (t, view) in model.targets.iter().enumerate() {
            match (view.kind, self.owner[t]) {
                (Kind::Free, Some(m)) => free_on[m].push(t),
                (Kind::Homeless, _) => pool.push(t),
                _ => {}
            }
        }
        for m in model.active() {
            let excess = self.count[m].saturating_sub(quota[m]);
            let list = &free_on[m];
            pool.extend(list[list.len().saturating_sub(excess)..].iter().rev());
        }
        let mut pool = pool.into_iter();
        for m in model.active() {
            while self.count[m] < quota[m] {
                let Some(t) = pool.next() else { return };
                self.relocate(model, t, Some(m));
            }
        }
    }

    /// Balancing by weight; see [`rebalance`].
    fn balance_weighted(&mut self, model: &Model) {
        let mut homed = self.clone();
        homed.place_homeless(model);

        self.shed_and_fill(model);
        self.improve(model);

        let peak = |layout: &Layout| model.active().map(|m| model.rank(m, layout.load[m])).max();
        let worse = match (peak(self), peak(&homed)) {
            (Some(ours), Some(theirs)) => ours.ratio_cmp(&theirs) == Ordering::Greater,
            _ => false,
        };
        if worse {
            homed.improve(model);
            *self = homed;
        }
    }

    /// Overloaded members shed, one at a time, the free target whose weight is closest to their
    /// excess over their share (ties: the lighter, then the higher key), while removing it
    /// strictly brings them closer to the share; the shed and homeless targets are then placed
    /// heaviest first on the member with the lowest `(load + w) / cap`.
    fn shed_and_fill(&mut self, model: &Model) {
        let mut free_on: Vec<BTreeSet<(u64, usize)>> = vec![BTreeSet::new(); model.members.len()];
        let mut pool = Vec::new();
        let mut total = 0u64;
        for (t, view) in model.targets.iter().enumerate() {
            match (view.kind, self.owner[t]) {
                (Kind::Homeless, _) => {
                    pool.push(t);
                    total += view.weight;
                }
                (kind, Some(m)) if model.is_active(m) => {
                    total += view.weight;
                    if kind == Kind::Free {
                        free_on[m].insert((view.weight, t));
                    }
                }
                _ => {}
            }
        }
        let caps: u64 = model.active().map(|m| model.members[m].cap).sum();
        let (total, caps) = (i128::from(total), i128::from(caps));
        for m in model.active() {
            let free = &mut free_on[m];
            let cap = i128::from(model.members[m].cap);
            // The member's excess over its share, scaled by `caps`.
            let mut excess = i128::from(self.load[m]) * caps - total * cap;
            while excess > 0 {
                // Weights at most the excess, then above it: the closest of each side.
                let fit = u64::try_from(excess / caps).unwrap_or(u64::MAX);
                let below = free.range(..=(fit, usize::MAX)).next_back().copied();
                let above = free
                    .range((fit.saturating_add(1), 0)..)
                    .next()
                    .and_then(|&(w, _)| free.range(..=(w, usize::MAX)).next_back().copied());
                let distance = |w: u64| (i128::from(w) * caps - excess).abs();
                // |excess − w| < |excess|  ⇔  0 < w < 2 · excess.
                let shed = match (below, above) {
                    (Some(b), Some(a)) if distance(a.0) < distance(b.0) => Some(a),
                    (Some(b), _) => Some(b),
                    (None, Some(a)) if i128::from(a.0) * caps < 2 * excess => Some(a),
                    (None, _) => None,
                };
                let Some(shed) = shed else { break };
                free.remove(&shed);
                pool.push(shed.1);
                excess -= i128::from(shed.0) * caps;
            }
        }
        for &t in &pool {
            self.relocate(model, t, None);
        }
        pool.sort_by_key(|&t| (Reverse(model.targets[t].weight), t));
        self.fill(model, pool);
    }

    /// Moves single free targets off the relatively most loaded active members while a move
    /// lowers that member's relative load and leaves the receiver below its old relative load.
    /// Stops when no such move exists for any member tied at the top, or after the step bound.
    fn improve(&mut self, model: &Model) {
        let mut movable: Vec<BTreeSet<(u64, usize)>> = vec![BTreeSet::new(); model.members.len()];
        for (t, view) in model.targets.iter().enumerate() {
            if let (Kind::Free | Kind::Homeless, Some(m)) = (view.kind, self.owner[t])
                && model.is_active(m)
            {
                movable[m].insert((view.weight, t));
            }
        }
        let mut receivers = Receivers::new(model, self);
        let mut ranking: BTreeSet<Rank> = model
            .active()
            .map(|m| model.rank(m, self.load[m]))
            .collect();
        let steps = IMPROVE_STEPS_PER_ITEM * (model.targets.len() + model.members.len());
        for _ in 0..steps {
            let Some(&top) = ranking.last() else { return };
            let step = ranking
                .iter()
                .rev()
                .take_while(|r| r.ratio_cmp(&top) == Ordering::Equal)
                .find_map(|r| self.best_step(model, r, &movable[r.member], &receivers));
            let Some(Step {
                target, from, to, ..
            }) = step
            else {
                return;
            };
            let weight = model.targets[target].weight;
            for m in [from, to] {
                ranking.remove(&model.rank(m, self.load[m]));
            }
            let (old_from, old_to) = (self.load[from], self.load[to]);
            self.relocate(model, target, Some(to));
            movable[from].remove(&(weight, target));
            movable[to].insert((weight, target));
            receivers.update(from, old_from, self.load[from]);
            receivers.update(to, old_to, self.load[to]);
            for m in [from, to] {
                ranking.insert(model.rank(m, self.load[m]));
            }
        }
    }

    /// The best single move off member `a`: the target and receiver that minimise the larger of
    /// the two new relative loads, among moves that leave the receiver below `a`'s current one.
    fn best_step(
        &self,
        model: &Model,
        a: &Rank,
        movable: &BTreeSet<(u64, usize)>,
        receivers: &Receivers,
    ) -> Option<Step> {
        let mut best: Option<Step> = None;
        for (b, lb) in receivers.heads(a.member) {
            let cb = model.members[b].cap;
            let (la, ca) = (u128::from(a.load), u128::from(a.cap));
            let gap = la * u128::from(cb);
            let Some(gap) = gap.checked_sub(u128::from(lb) * ca) else {
                continue;
            };
            // The weight that would equalise the two members, rounded down.
            let ideal = u64::try_from(gap / (ca + u128::from(cb))).unwrap_or(u64::MAX);
            let below = movable.range(..=(ideal, usize::MAX)).next_back();
            let above = movable
                .range((ideal.saturating_add(1), 0)..)
                .next()
                .and_then(|&(w, _)| movable.range(..=(w, usize::MAX)).next_back());
            for &(w, t) in below.into_iter().chain(above) {
                // The receiver must end strictly below `a`'s current relative load.
                if cmp_frac(lb + w, cb, a.load, a.cap) != Ordering::Less {
                    continue;
                }
                let left = (a.load - w, a.cap);
                let right = (lb + w, cb);
                let peak = if cmp_frac(left.0, left.1, right.0, right.1) == Ordering::Less {
                    right
                } else {
                    left
                };
                let step = Step {
                    peak,
                    target: t,
                    from: a.member,
                    to: b,
                };
                if best.as_ref().is_none_or(|s| step.better_than(s)) {
                    best = Some(step);
                }
            }
        }
        best
    }
}

/// A candidate move of the improvement pass.
struct Step {
    /// The larger of the two new relative loads, as (load, cap).
    peak: (u64, u64),
    target: usize,
    from: usize,
    to: usize,
}

impl Step {
    /// Lower peak wins; then the lower receiver id; then the higher target key.
    fn better_than(&self, other: &Step) -> bool {
        cmp_frac(self.peak.0, self.peak.1, other.peak.0, other.peak.1)
            .then(self.to.cmp(&other.to))
            .then(other.target.cmp(&self.target))
            == Ordering::Less
    }
}

#[cfg(test)]
mod tests;
