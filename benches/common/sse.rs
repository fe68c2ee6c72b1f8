//! A client of the event feed (`GET /api/v1/events`) that logs when each `ownership` event
//! arrives: api_load's SSE fan-out runs a hundred, pages_live one beside the browser (what the
//! server delivers with no browser in the way).

use std::sync::{Arc, Mutex};
use std::time::Instant;

use http_body_util::{BodyExt as _, Empty};
use serde_json::Value;
use tokio::sync::watch;

use super::procs::Http;

/// Ownership events as they arrive at the clients: `(client, target, new holder, arrival)`.
pub(crate) type Arrivals = Arc<Mutex<Vec<(usize, String, String, Instant)>>>;

/// Reads the event stream until `stop`, logging ownership events into `log` and returning the
/// number of `resync` events; `connected` is sent once the response arrived (the server
/// subscribes before it answers, so every later event reaches this client).
pub(crate) async fn sse_client(
    id: usize,
    client: Http,
    uri: String,
    log: Arrivals,
    connected: tokio::sync::mpsc::Sender<()>,
    mut stop: watch::Receiver<bool>,
) -> anyhow::Result<usize> {
    let req = http::Request::get(uri)
        .header("accept", "text/event-stream")
        .body(Empty::new())?;
    let resp = client.request(req).await?;
    anyhow::ensure!(
        resp.status() == 200,
        "GET /api/v1/events: {}",
        resp.status()
    );
    connected.send(()).await?;
    let mut body = resp.into_body();
    let mut resyncs = 0;
    let mut buf: Vec<u8> = Vec::new();
    loop {
        let frame = tokio::select! {
            f = body.frame() => f,
            _ = stop.wait_for(|s| *s) => return Ok(resyncs),
        };
        let at = Instant::now();
        let Some(frame) = frame else {
            anyhow::bail!("the event stream ended");
        };
        let Ok(data) = frame?.into_data() else {
            continue;
        };
        buf.extend_from_slice(&data);
        while let Some(end) = buf.windows(2).position(|w| w == b"\n\n") {
            let block: Vec<u8> = buf.drain(..end + 2).collect();
            let block = String::from_utf8_lossy(&block);
            let (mut event, mut payload) = ("", "");
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("event:") {
                    event = v.trim();
                } else if let Some(v) = line.strip_prefix("data:") {
                    payload = v.trim();
                }
            }
            match event {
                "resync" => resyncs += 1,
                "ownership" => {
                    let v: Value = serde_json::from_str(payload)?;
                    if let (Some(t), Some(to)) = (v["target"].as_str(), v["to"].as_str()) {
                        log.lock().unwrap_or_else(|e| e.into_inner()).push((
                            id,
                            t.to_owned(),
                            to.to_owned(),
                            at,
                        ));
                    }
                }
                _ => {}
            }
        }
    }
}
