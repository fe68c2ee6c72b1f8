//! `leasehold ctl` against a running demo (in-process, beyond loopback so its API wants the
//! generated admin token), run as the built binary the way a person or a script runs it: its
//! tables, `-o json`, the plan shown before anything runs, `--yes --watch` following the
//! operation to its end, and the exit codes a script branches on.

use crate::common;

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use leasehold::demo;
use serde_json::Value;

use common::invariant::InvariantChecker;

/// Runs `leasehold ctl ARGS` against `server` with the token in `token_file` (if any).
async fn ctl(server: &str, token_file: Option<&Path>, args: &[&str]) -> Output {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_leasehold"));
    cmd.arg("ctl").args(args).env("LEASEHOLD_SERVER", server);
    cmd.env_remove("LEASEHOLD_TOKEN");
    if let Some(f) = token_file {
        cmd.arg("--token-file").arg(f);
    }
    tokio::time::timeout(Duration::from_secs(60), cmd.output())
        .await
        .expect("ctl answers within a minute")
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctl_lists_plans_runs_and_says_why_in_its_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let checker = InvariantChecker::new();
    let demo = demo::start(crate::demo::options(dir.path(), "0.0.0.0:0", &checker))
        .await
        .unwrap();
    let server = format!("http://127.0.0.1:{}", demo.api_addr().port());
    let token_path = demo.token_file().expect("a token").to_owned();
    let token = Some(token_path.as_path());
    // Settled: every collector target owned.
    common::eventually(Duration::from_secs(30), || async {
        let o = ctl(&server, token, &["clusters", "-o", "json"]).await;
        let v: Value = serde_json::from_slice(&o.stdout).ok()?;
        let c = v.as_array()?.iter().find(|c| c["name"] == "collector")?;
        (c["targets"]["owned"] == c["targets"]["total"] && c["targets"]["total"] != 0).then_some(())
    })
    .await
    .expect("the demo settles");

    // A table for people; the token never shows.
    let o = ctl(&server, token, &["clusters"]).await;
    assert_eq!(code(&o), 0, "{o:?}");
    let table = stdout(&o);
    assert!(table.starts_with("NAME "), "{table}");
    assert!(
        table.contains("collector") && table.contains("healthy"),
        "{table}"
    );
    let secret = std::fs::read_to_string(&token_path).unwrap();
    let secret = secret.split(',').next().unwrap();
    assert!(!table.contains(secret) && !String::from_utf8_lossy(&o.stderr).contains(secret));

    // Filters and pages, as JSON.
    let o = ctl(
        &server,
        token,
        &[
            "targets",
            "collector",
            "--state",
            "owned",
            "--limit",
            "7",
            "-o",
            "json",
        ],
    )
    .await;
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["items"].as_array().unwrap().len(), 7, "{v}");
    let o = ctl(
        &server,
        token,
        &[
            "targets",
            "collector",
            "--limit",
            "7",
            "--all",
            "-o",
            "json",
        ],
    )
    .await;
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["items"].as_array().unwrap().len(), 30, "every page");

    // A plan is only shown: nothing starts without --yes.
    let o = ctl(&server, token, &["remove", "collector", "collector-2"]).await;
    assert_eq!(code(&o), 0, "{o:?}");
    assert!(
        stdout(&o).contains("Dry run: nothing was started"),
        "{}",
        stdout(&o)
    );
    let o = ctl(&server, token, &["operations", "-o", "json"]).await;
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["items"], Value::Array(vec![]), "nothing started: {v}");
    // With --yes it runs exactly that plan, followed to its end.
    let o = ctl(
        &server,
        token,
        &["remove", "collector", "collector-2", "--yes", "--watch"],
    )
    .await;
    assert_eq!(code(&o), 0, "{o:?}");
    let out = stdout(&o);
    assert!(
        out.contains("Started operation") && out.contains("(succeeded)"),
        "{out}"
    );
    let o = ctl(&server, token, &["instances", "collector", "-o", "json"]).await;
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let c2 = v
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == "collector-2");
    assert!(c2.is_none_or(|i| i["owned"] == 0), "{v}");

    // Exit codes: not found 4, denied 5 (no token), unreachable 1, usage 2.
    assert_eq!(code(&ctl(&server, token, &["targets", "nope"]).await), 4);
    assert_eq!(code(&ctl(&server, None, &["clusters"]).await), 5);
    assert_eq!(
        code(&ctl("http://127.0.0.1:1", token, &["clusters"]).await),
        1
    );
    assert_eq!(
        code(
            &ctl(
                &server,
                token,
                &["targets", "collector", "--state", "bogus"]
            )
            .await
        ),
        2
    );
    assert_eq!(
        code(&ctl(&server, token, &["operations", "--watch"]).await),
        2,
        "clap: --watch needs an id"
    );
    // As the kubectl plugin: the binary named kubectl-leasehold is `leasehold ctl`.
    let plugin = dir.path().join("kubectl-leasehold");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_leasehold"), &plugin).unwrap();
    let o = tokio::process::Command::new(&plugin)
        .args(["clusters", "-o", "json", "--token-file"])
        .arg(&token_path)
        .env("LEASEHOLD_SERVER", &server)
        .output()
        .await
        .unwrap();
    assert_eq!(code(&o), 0, "{o:?}");
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 2, "{v}");
    demo.stop().await.unwrap();
}
