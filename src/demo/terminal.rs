//! What `leasehold demo` tells the person at its terminal, on stdout (its logs go to stderr): a
//! line as it starts; the banner — where everything is and how to use it — once the demo has
//! settled ([`settle`]), so that it is the last thing on the screen, and again whenever asked;
//! and one closing line ([`Stopped`]) when it stops. It only reads the control plane's model; it
//! changes nothing.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use tokio::time::Instant;

use super::layout::{self, CLUSTERS, COLLECTOR, DATABASES, NAMESPACE, REPLICAS};
use super::{Demo, StateDir};
use crate::engine::{Engine, PlanRequest};

/// Longest wait for the demo to settle before the banner is printed anyway, under a line saying
/// what has not settled (a cluster started with no members never places its targets). Well
/// within the 30 s the scripts that run the demo wait for its address (`scripts/demo-lib.sh`).
pub const SETTLE_WAIT: Duration = Duration::from_secs(20);
/// Once every target is owned but a rebalance would still move some, how long past the join
/// policy's settling time the join policy is given to start it (its control loop's next turn);
/// after that nothing will move unless someone asks (the policy proposed it, or is paused).
const JOIN_MARGIN: Duration = Duration::from_secs(2);
/// How often the model is read while waiting for it to settle or to show the last releases.
const POLL: Duration = Duration::from_millis(100);
/// Once the members' agents have stopped, how long the model may take to show their last
/// releases (the control plane's watch sees them within milliseconds).
const RELEASES_SEEN: Duration = Duration::from_secs(1);

/// The banner: where everything is, and how to use and stop the demo. `pid` is this process (a
/// `kill -USR1 <pid>` prints the banner again).
pub(super) fn banner(
    demo: &Demo,
    members: u32,
    targets: usize,
    kubeconfig: &Path,
    state: &StateDir,
    pid: u32,
) -> String {
    let url = url_of(demo.api_addr());
    let kubeconfig = kubeconfig.display();
    let mut lines = vec![
        "Leasehold demo".to_owned(),
        format!("  dashboard:  {url}/"),
        format!("  API docs:   {url}/docs (REST API under {url}/api/v1)"),
    ];
    match demo.token_file() {
        None => lines.push("  no login needed (listening on loopback)".to_owned()),
        Some(file) => {
            let file = file.display();
            lines.push(format!(
                "  log in with the admin token in {file} (its first field), regenerated at every start:"
            ));
            lines.push(format!(
                "    curl -H \"Authorization: Bearer $(cut -d, -f1 {file})\" {url}/api/v1/clusters"
            ));
        }
    }
    lines.push(format!(
        "  clusters:   {COLLECTOR} ({members} members, {targets} targets), {REPLICAS} (1 controlling + {} copies, {} databases) in namespace {NAMESPACE}",
        layout::REPLICA_MEMBERS - 1,
        DATABASES.len()
    ));
    lines.push(format!(
        "  Kubernetes API (simulated): {}; kubeconfig: {kubeconfig}",
        url_of(demo.kube_addr()),
    ));
    lines.push(format!(
        "  watch the Leases: KUBECONFIG={kubeconfig} kubectl -n {NAMESPACE} get leases -w"
    ));
    lines.push(format!(
        "  demo controls: add a member, stop or crash one from the dashboard, or POST {url}/demo/clusters/{COLLECTOR}/members"
    ));
    lines.push(match state {
        StateDir::Kept(dir) => format!("  state (history, kubeconfig): {}", dir.display()),
        StateDir::Temporary(dir) => format!(
            "  state (history, kubeconfig): {}, removed at exit (--state-dir DIR keeps it)",
            dir.path().display()
        ),
    });
    lines.push(format!(
        "  kill -USR1 {pid} prints this again; Ctrl-C (or SIGTERM) stops the demo."
    ));
    lines.join("\n")
}

/// A URL for people: an unspecified listen address is reached through loopback.
fn url_of(addr: SocketAddr) -> String {
    let mut shown = addr;
    if addr.ip().is_unspecified() {
        shown.set_ip(match addr {
            SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    format!("http://{shown}")
}

/// How far the demo is from settled.
enum Settling {
    /// Every target of every cluster is owned, and a rebalance would move none.
    Settled,
    /// Not every target is owned yet (or a model has not synced): what is missing.
    Placing(String),
    /// Every target is owned, but a rebalance would move some: how many.
    Unbalanced(String),
}

/// Where the demo stands now, as the control plane's model shows it.
async fn look(engine: &Engine) -> Settling {
    for cluster in CLUSTERS {
        let model = match engine.model(cluster) {
            Ok(model) => model,
            Err(e) => return Settling::Placing(format!("{cluster}: {e}")),
        };
        if !model.synced || model.stale {
            return Settling::Placing(format!("{cluster}: its model has not synced"));
        }
        let counts = &model.counts;
        if counts.owned < counts.total {
            return Settling::Placing(format!(
                "{cluster}: {} of {} targets owned",
                counts.owned, counts.total
            ));
        }
    }
    for cluster in CLUSTERS {
        match engine
            .plan_rebalance(cluster, &PlanRequest::default())
            .await
        {
            Ok(plan) if plan.moves.is_empty() => {}
            Ok(plan) => {
                return Settling::Unbalanced(format!(
                    "{cluster}: a rebalance would move {} targets",
                    plan.moves.len()
                ));
            }
            Err(e) => return Settling::Placing(format!("{cluster}: {e}")),
        }
    }
    Settling::Settled
}

/// Waits until the demo has settled: every target of every cluster owned and nothing for a
/// rebalance to move. When every target is owned but unbalanced (the first placement happened
/// before every member had joined), the join policy gets `join_settle` plus [`JOIN_MARGIN`] to
/// start its rebalance, and its end is waited for. `None` once settled; what has not settled
/// when it gave up ([`SETTLE_WAIT`], or the join policy started nothing).
pub(super) async fn settle(engine: &Engine, join_settle: Duration) -> Option<String> {
    let began = Instant::now();
    let mut owned_since = None;
    loop {
        let why = match look(engine).await {
            Settling::Settled => return None,
            Settling::Placing(why) => {
                owned_since = None;
                why
            }
            Settling::Unbalanced(why) => {
                let since = *owned_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= join_settle + JOIN_MARGIN {
                    return Some(why);
                }
                why
            }
        };
        if began.elapsed() >= SETTLE_WAIT {
            return Some(why);
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The demo's running members (a live member Lease), by cluster and name, with the targets each
/// holds, as the control plane's model shows them.
pub(super) struct Running(BTreeMap<(String, String), usize>);

impl Running {
    /// The running members now.
    pub(super) fn now(engine: &Engine) -> Running {
        let mut held = BTreeMap::new();
        for cluster in CLUSTERS {
            let Ok(model) = engine.model(cluster) else {
                continue;
            };
            for i in &model.instances {
                if i.member_lease.is_some() && i.heartbeat_ok() {
                    held.insert((cluster.to_owned(), i.name.clone()), 0);
                }
            }
            for t in &model.targets {
                if let Some(owner) = &t.owner
                    && let Some(n) = held.get_mut(&(cluster.to_owned(), owner.to_string()))
                {
                    *n += 1;
                }
            }
        }
        Running(held)
    }

    /// How many targets these members still hold, once their agents have stopped: 0 as soon
    /// as the model shows every release, else what it shows after [`RELEASES_SEEN`].
    pub(super) async fn still_held(&self, engine: &Engine) -> usize {
        let deadline = Instant::now() + RELEASES_SEEN;
        loop {
            let mut held = 0;
            for cluster in CLUSTERS {
                let Ok(model) = engine.model(cluster) else {
                    continue;
                };
                held += model
                    .targets
                    .iter()
                    .filter_map(|t| t.owner.as_ref())
                    .filter(|owner| {
                        self.0
                            .contains_key(&(cluster.to_owned(), owner.to_string()))
                    })
                    .count();
            }
            if held == 0 || Instant::now() >= deadline {
                return held;
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// The members.
    pub(super) fn members(&self) -> usize {
        self.0.len()
    }

    /// The targets they hold.
    pub(super) fn targets(&self) -> usize {
        self.0.values().sum()
    }
}

/// How the demo stopped, for its closing line (`Display`: "3 members released 300 targets in
/// 2.4 s").
#[derive(Debug, Clone, PartialEq)]
pub struct Stopped {
    /// Members running when the demo was asked to stop.
    pub members: usize,
    /// Targets they held then.
    pub held: usize,
    /// Of those, the targets they still held once their agents had stopped (an agent killed
    /// past its grace, or a release that failed; each is logged).
    pub still_held: usize,
    /// From the request to stop until everything had stopped.
    pub took: Duration,
}

impl fmt::Display for Stopped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let members = count(self.members, "member", "members");
        let secs = self.took.as_secs_f64();
        if self.still_held == 0 {
            let targets = count(self.held, "target", "targets");
            write!(f, "{members} released {targets} in {secs:.1} s")
        } else {
            write!(
                f,
                "{members} released {} of {} targets in {secs:.1} s; {} still held (see the log)",
                self.held - self.still_held,
                self.held,
                self.still_held
            )
        }
    }
}

/// `n` and the noun for it.
fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_closing_line_says_what_was_released_and_what_was_not() {
        let stopped = |members, held, still_held, ms| Stopped {
            members,
            held,
            still_held,
            took: Duration::from_millis(ms),
        };
        assert_eq!(
            stopped(6, 308, 0, 2_449).to_string(),
            "6 members released 308 targets in 2.4 s"
        );
        assert_eq!(
            stopped(1, 1, 0, 40).to_string(),
            "1 member released 1 target in 0.0 s"
        );
        assert_eq!(
            stopped(3, 300, 100, 5_000).to_string(),
            "3 members released 200 of 300 targets in 5.0 s; 100 still held (see the log)"
        );
    }

    #[test]
    fn an_unspecified_address_is_shown_as_loopback() {
        assert_eq!(
            url_of("0.0.0.0:8080".parse().unwrap()),
            "http://127.0.0.1:8080"
        );
        assert_eq!(url_of("[::]:80".parse().unwrap()), "http://[::1]:80");
        assert_eq!(
            url_of("10.0.0.1:8080".parse().unwrap()),
            "http://10.0.0.1:8080"
        );
    }
}
