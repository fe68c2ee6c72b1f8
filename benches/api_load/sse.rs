//! (s) SSE fan-out: clients on `/api/v1/events`, Lease writes to the simulator, and the delay
//! from each write to its `ownership` event at each client.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::common::sse::{Arrivals, sse_client};
use super::procs::{Serve, Sim, http_client, member, open_loop_moves, target};
use super::{Args, Report, SSE_P99, percentile, spread};

/// How long after the last write every client must have every event.
const SSE_GRACE: Duration = Duration::from_secs(10);

/// For each client and each sent change, the delay to its first matching arrival.
fn deliveries(
    log: &Arrivals,
    sent: &BTreeMap<(String, String), Instant>,
) -> BTreeMap<(usize, String, String), Duration> {
    let log = log.lock().unwrap_or_else(|e| e.into_inner());
    let mut out = BTreeMap::new();
    for (id, t, to, at) in log.iter() {
        let key = (t.clone(), to.clone());
        if let Some(sent_at) = sent.get(&key) {
            out.entry((*id, key.0, key.1))
                .or_insert_with(|| at.saturating_duration_since(*sent_at));
        }
    }
    out
}

pub(crate) async fn sse_part(
    a: &Args,
    sim: &Sim,
    serve: &Serve,
    r: &mut Report,
) -> anyhow::Result<()> {
    let client = http_client();
    let log: Arrivals = Arc::default();
    let (stop_tx, stop_rx) = watch::channel(false);
    let (conn_tx, mut conn_rx) = tokio::sync::mpsc::channel(a.clients);
    let mut clients = tokio::task::JoinSet::new();
    for id in 0..a.clients {
        clients.spawn(sse_client(
            id,
            client.clone(),
            format!("{}/api/v1/events", serve.base),
            log.clone(),
            conn_tx.clone(),
            stop_rx.clone(),
        ));
    }
    for _ in 0..a.clients {
        tokio::select! {
            c = conn_rx.recv() => c.ok_or_else(|| anyhow::anyhow!("SSE clients gone"))?,
            Some(r) = clients.join_next() => anyhow::bail!("an SSE client ended: {:?}", r?.err()),
        }
    }

    // Writes: target `idx` moves from pod idx % pods to the next pod, one write each.
    let stride = a.targets / a.changes.max(1);
    let moves = (0..a.changes)
        .map(|i| (target(i * stride), member((i * stride + 1) % a.pods)))
        .collect();
    let start = tokio::time::Instant::now() + Duration::from_millis(100);
    let (writes, mut write_rtt) =
        open_loop_moves(&sim.client, moves, a.change_rate as f64, start).await?;
    let sent: BTreeMap<(String, String), Instant> =
        writes.into_iter().map(|w| ((w.key, w.to), w.at)).collect();

    // Until every client has every change, or the grace time is over.
    let expected = a.clients * sent.len();
    let deadline = Instant::now() + SSE_GRACE;
    while deliveries(&log, &sent).len() < expected && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = stop_tx.send(true);
    let mut resyncs = 0;
    while let Some(c) = clients.join_next().await {
        resyncs += c??;
    }
    let mut delays: Vec<Duration> = deliveries(&log, &sent).into_values().collect();
    r.row(
        format!(
            "SSE: write sent to event arriving, p50 / p90 / p99 / max: {} clients × {} Lease changes at {}/s",
            a.clients, a.changes, a.change_rate
        ),
        spread(&mut delays),
    );
    r.check("SSE fan-out", percentile(&delays, 99.0), SSE_P99);
    r.row(
        "… deliveries received / expected; resync events",
        format!("{} / {expected}; {resyncs}", delays.len()),
    );
    r.row(
        "… for context: the Lease write's own round trip to the simulator, p50 / p90 / p99 / max",
        spread(&mut write_rtt),
    );
    anyhow::ensure!(
        delays.len() == expected && resyncs == 0,
        "{} of {expected} deliveries, {resyncs} resyncs",
        delays.len()
    );
    Ok(())
}
