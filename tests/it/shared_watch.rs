//! Members of one process sharing one watch of the target Leases
//! (`agent::SharedLeases`, how the 1,000-member benchmark runs): placement, a rebalance when a
//! member joins, and a planned stop whose targets are all handed over before the member exits,
//! with the hook-level checker (no two members ever work on one target) over all of it.

use crate::common;

use std::time::{Duration, Instant};

use leasehold::agent::{DEFAULT_DRAIN_TIMEOUT, SharedLeases};

use common::cluster::*;
use common::eventually;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn members_sharing_one_lease_watch_place_rebalance_and_hand_over() {
    let mut h = Harness::new(&config_yaml(60, "on_join: auto")).await;
    // The planned stop below drains as an agent does by default.
    h.drain_timeout = DEFAULT_DRAIN_TIMEOUT;
    let feed = SharedLeases::new(h.accounts.member.clone(), &h.ns, CLUSTER);
    let f = feed.clone();
    let feed_task = tokio::spawn(async move { f.run(std::future::pending()).await });
    for m in ["c-0", "c-1", "c-2"] {
        h.add_pod(m).await;
        h.start_agent_sharing(m, &feed);
    }
    h.wait_pods_ready(3).await;
    h.start_engine("cp-a").await;
    h.wait_balanced(
        &[("c-0", 20), ("c-1", 20), ("c-2", 20)],
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(feed.members(), 3, "every member reads the shared watch");
    eventually(Duration::from_secs(5), || async {
        (h.checker.working_on("c-0").len() == 20).then_some(())
    })
    .await
    .unwrap_or_else(|| panic!("c-0 works on {:?}", h.checker.working_on("c-0")));

    // A fourth member joins: a rebalance moves a quarter over, each move a handoff.
    h.add_pod("c-3").await;
    h.start_agent_sharing("c-3", &feed);
    h.wait_balanced(
        &[("c-0", 15), ("c-1", 15), ("c-2", 15), ("c-3", 15)],
        Duration::from_secs(60),
    )
    .await;
    eventually(Duration::from_secs(5), || async {
        (h.checker.working_on("c-3").len() == 15).then_some(())
    })
    .await
    .unwrap_or_else(|| panic!("c-3 works on {:?}", h.checker.working_on("c-3")));

    // A planned stop (the agent's shutdown signal, its pod kept Ready): every target is handed
    // over before the agent returns, though the watch it reads goes on without it.
    let mut m = h.members.remove("c-0").unwrap();
    let asked = Instant::now();
    m.stop.take().unwrap().send(()).unwrap();
    m.task.await.unwrap().unwrap();
    eprintln!(
        "c-0 handed its targets over and exited after {:?}",
        asked.elapsed()
    );
    assert!(h.checker.working_on("c-0").is_empty());
    h.wait_balanced(
        &[("c-1", 20), ("c-2", 20), ("c-3", 20)],
        Duration::from_secs(2),
    )
    .await;
    let left = eventually(Duration::from_secs(2), || async {
        (feed.members() == 3).then_some(())
    })
    .await;
    assert!(left.is_some(), "the stopped member left the shared watch");
    h.finish().await;
    feed_task.abort();
}
