//! `leasehold ctl`'s tables: the API's JSON documents as aligned columns for people. Pure: JSON
//! in, text out. A field the server does not send shows as `-`.

use serde_json::Value;

/// Aligned columns: a header row, then `rows`.
fn table(header: &[&str], rows: Vec<Vec<String>>) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in &rows {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<String>| -> String {
        let mut s = String::new();
        for (i, (c, w)) in cells.iter().zip(&widths).enumerate() {
            if i + 1 == cells.len() {
                s.push_str(c);
            } else {
                s.push_str(&format!("{c:<w$}  "));
            }
        }
        s.trim_end().to_owned() + "\n"
    };
    let mut out = line(header.iter().map(|h| (*h).to_owned()).collect());
    for r in rows {
        out.push_str(&line(r));
    }
    out
}

/// A field as text: strings as they are, numbers and booleans printed, `null` or absent `-`.
fn text(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn items(v: &Value) -> &[Value] {
    v.as_array()
        .or_else(|| v["items"].as_array())
        .map_or(&[], Vec::as_slice)
}

fn percent(v: &Value) -> String {
    v.as_f64()
        .map_or("-".into(), |x| format!("{:.0} %", x * 100.0))
}

/// `GET /clusters`.
pub fn clusters(v: &Value) -> String {
    let rows = items(v)
        .iter()
        .map(|c| {
            let t = &c["targets"];
            let unworked = t["expired"].as_u64().unwrap_or(0) + t["unworked"].as_u64().unwrap_or(0);
            let health = if c["stale"].as_bool() == Some(true) {
                "stale"
            } else if !c["degraded"].is_null() {
                "degraded"
            } else if unworked > 0 {
                "unworked"
            } else if t["unassigned"].as_u64().unwrap_or(0) + t["orphaned"].as_u64().unwrap_or(0)
                > 0
            {
                "attention"
            } else {
                "healthy"
            };
            vec![
                text(&c["name"]),
                text(&c["namespace"]),
                text(&c["protocol"]),
                health.into(),
                format!(
                    "{}/{}",
                    text(&c["members_ready"]),
                    text(&c["members_total"])
                ),
                format!("{}/{}", text(&t["owned"]), text(&t["total"])),
                unworked.to_string(),
                text(&t["moving"]),
                percent(&c["imbalance"]),
                text(&c["leader"]),
            ]
        })
        .collect();
    table(
        &[
            "NAME",
            "NAMESPACE",
            "PROTOCOL",
            "HEALTH",
            "READY",
            "OWNED",
            "UNWORKED",
            "MOVING",
            "IMBALANCE",
            "LEADER",
        ],
        rows,
    )
}

/// `GET /clusters/{cluster}/instances`.
pub fn instances(v: &Value) -> String {
    let rows = items(v)
        .iter()
        .map(|i| {
            let mut flags = Vec::new();
            for f in ["cordoned", "ghost", "leader", "terminating"] {
                if i[f].as_bool() == Some(true) {
                    flags.push(f);
                }
            }
            vec![
                text(&i["name"]),
                text(&i["role"]),
                text(&i["phase"]),
                text(&i["ready"]),
                text(&i["member_lease"]["liveness"]),
                text(&i["owned"]),
                text(&i["node"]),
                if flags.is_empty() {
                    "-".into()
                } else {
                    flags.join(",")
                },
            ]
        })
        .collect();
    table(
        &[
            "NAME", "ROLE", "PHASE", "READY", "LEASE", "TARGETS", "NODE", "FLAGS",
        ],
        rows,
    )
}

/// `GET /clusters/{cluster}/targets`.
pub fn targets(v: &Value) -> String {
    let rows = items(v)
        .iter()
        .map(|t| {
            vec![
                text(&t["key"]),
                text(&t["state"]),
                text(&t["owner"]),
                text(&t["desired"]),
                text(&t["weight"]),
                match (&t["app_working"], &t["app_problem"]) {
                    (Value::Bool(true), _) => "working".into(),
                    (Value::Bool(false), Value::String(p)) => format!("not working: {p}"),
                    (Value::Bool(false), _) => "not working".into(),
                    _ => "-".into(),
                },
            ]
        })
        .collect();
    let mut out = table(&["KEY", "STATE", "OWNER", "DESIRED", "WEIGHT", "APP"], rows);
    if let Some(total) = v["total"].as_u64() {
        let shown = items(v).len();
        if (shown as u64) < total {
            out.push_str(&format!("({shown} of {total}; --all for every one)\n"));
        }
    }
    out
}

fn time(ms: &Value) -> String {
    ms.as_i64()
        .and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok())
        .map_or("-".into(), |t| t.strftime("%Y-%m-%d %H:%M:%S").to_string())
}

/// `GET /history`.
pub fn history(v: &Value) -> String {
    let rows = items(v)
        .iter()
        .map(|e| {
            let what = match e["kind"].as_str() {
                Some("ownership") => format!(
                    "{} {} → {}{}",
                    text(&e["target"]),
                    text(&e["from"]),
                    text(&e["to"]),
                    e["gap_ms"]
                        .as_i64()
                        .map(|g| format!(" (gap {g} ms)"))
                        .unwrap_or_default()
                ),
                _ => [&e["instance"], &e["event"], &e["detail"]]
                    .into_iter()
                    .filter(|x| !x.is_null())
                    .map(text)
                    .collect::<Vec<_>>()
                    .join(" "),
            };
            vec![
                time(&e["at_ms"]),
                text(&e["cluster"]),
                text(&e["kind"]),
                text(&e["cause"]),
                what,
            ]
        })
        .collect();
    table(&["AT", "CLUSTER", "KIND", "CAUSE", "WHAT"], rows)
}

/// `GET /operations`.
pub fn operations(v: &Value) -> String {
    let rows = items(v)
        .iter()
        .map(|o| {
            vec![
                text(&o["id"]),
                text(&o["cluster"]),
                text(&o["kind"]),
                text(&o["state"]),
                time(&o["created_at_ms"]),
                text(&o["requested_by"]),
                text(&o["reason"]),
            ]
        })
        .collect();
    table(
        &["ID", "CLUSTER", "KIND", "STATE", "CREATED", "BY", "REASON"],
        rows,
    )
}

/// `GET /operations/{id}`.
pub fn operation(v: &Value) -> String {
    let mut out = format!(
        "Operation {} ({} of {}): {}\n",
        text(&v["id"]),
        text(&v["kind"]),
        text(&v["cluster"]),
        progress(v)
    );
    if let Some(e) = v["error"].as_str() {
        out.push_str(&format!("Error: {e}\n"));
    }
    let rows = v["moves"]
        .as_array()
        .map_or(&[][..], Vec::as_slice)
        .iter()
        .map(|m| {
            vec![
                text(&m["target"]),
                text(&m["from"]),
                text(&m["to"]),
                text(&m["state"]),
                text(&m["attempts"]),
                text(&m["error"]),
            ]
        })
        .collect();
    out.push_str(&table(
        &["TARGET", "FROM", "TO", "STATE", "ATTEMPTS", "ERROR"],
        rows,
    ));
    out
}

/// One line of an operation's progress: `[#####-----] 5/10 done, 1 failed (running)`.
pub fn progress(v: &Value) -> String {
    let moves = v["moves"].as_array().map_or(&[][..], Vec::as_slice);
    let count = |s: &str| moves.iter().filter(|m| m["state"] == s).count();
    let (done, failed, total) = (count("done"), count("failed"), moves.len());
    const WIDTH: usize = 20;
    let filled = (done + failed) * WIDTH / total.max(1);
    format!(
        "[{}{}] {done}/{total} done{} ({})",
        "#".repeat(filled),
        "-".repeat(WIDTH - filled),
        if failed > 0 {
            format!(", {failed} failed")
        } else {
            String::new()
        },
        text(&v["state"])
    )
}

/// A rebalance or drain plan.
pub fn plan(v: &Value) -> String {
    let moves = v["moves"].as_array().map_or(&[][..], Vec::as_slice);
    let mut out = format!(
        "Plan {}: {} move{}, imbalance {} → {}\n",
        text(&v["id"]),
        moves.len(),
        if moves.len() == 1 { "" } else { "s" },
        percent(&v["imbalance_before"]),
        percent(&v["imbalance_after"])
    );
    for w in v["warnings"].as_array().map_or(&[][..], Vec::as_slice) {
        out.push_str(&format!("WARNING: {}\n", text(&w["message"])));
    }
    let rows = moves
        .iter()
        .map(|m| {
            vec![
                text(&m["target"]),
                text(&m["from"]),
                text(&m["to"]),
                text(&m["reason"]),
            ]
        })
        .collect();
    if !moves.is_empty() {
        out.push_str(&table(&["TARGET", "FROM", "TO", "WHY"], rows));
    }
    if let Some(blocked) = v["blocked"].as_array().filter(|b| !b.is_empty()) {
        out.push_str(&format!("Blocked: {}\n", blocked.len()));
    }
    out
}

/// `POST /clusters/{cluster}/automation`.
pub fn automation(cluster: &str, v: &Value) -> String {
    match &v["paused"] {
        Value::Null => format!(
            "Automatic rebalancing of {cluster}: on (on_join: {})\n",
            text(&v["on_join"])
        ),
        p => format!(
            "Automatic rebalancing of {cluster}: paused by {} at {} ({})\n",
            text(&p["paused_by"]),
            time(&p["paused_at_ms"]),
            text(&p["reason"])
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tables_align_and_say_dash_for_what_is_missing() {
        let t = table(
            &["A", "LONGER"],
            vec![
                vec!["x".into(), "1".into()],
                vec!["yyyy".into(), "-".into()],
            ],
        );
        assert_eq!(t, "A     LONGER\nx     1\nyyyy  -\n");
        assert_eq!(text(&Value::Null), "-");
    }

    #[test]
    fn a_cluster_with_targets_nobody_works_on_is_never_healthy() {
        let c = |expired: u64, unworked: u64, unassigned: u64| {
            json!([{"name": "c", "namespace": "ns", "protocol": "native", "stale": false,
                "degraded": null, "members_ready": 3, "members_total": 3, "imbalance": 0.1,
                "leader": null, "targets": {"total": 10, "owned": 10 - expired - unworked - unassigned,
                "moving": 0, "expired": expired, "unworked": unworked, "unassigned": unassigned,
                "orphaned": 0}}])
        };
        assert!(clusters(&c(0, 0, 0)).contains(" healthy "));
        assert!(clusters(&c(1, 0, 0)).contains(" unworked "));
        assert!(clusters(&c(0, 2, 0)).contains(" unworked "));
        assert!(clusters(&c(0, 0, 1)).contains(" attention "));
    }

    #[test]
    fn a_plan_shows_its_warnings_first_and_each_moves_reason() {
        let p = json!({"id": "p-1", "imbalance_before": 0.5, "imbalance_after": 0.0,
            "moves": [{"target": "t-1", "from": "a", "to": "b", "reason": "balance"}],
            "warnings": [{"kind": "elected_leader", "message": "a is the cluster's elected leader"}],
            "blocked": []});
        let out = plan(&p);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(
            lines[1], "WARNING: a is the cluster's elected leader",
            "{out}"
        );
        assert!(
            lines[2].contains("WHY") && lines[3].ends_with("balance"),
            "{out}"
        );
    }

    #[test]
    fn progress_counts_done_and_failed_moves() {
        let op = json!({"state": "running", "moves": [
            {"state": "done"}, {"state": "failed"}, {"state": "pending"}, {"state": "done"}]});
        assert_eq!(
            progress(&op),
            "[###############-----] 2/4 done, 1 failed (running)"
        );
    }
}
