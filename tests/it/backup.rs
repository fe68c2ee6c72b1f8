//! Backups of the history database, taken as docs/runbook.md ("Back up the history database")
//! takes them, of a live store: a writer keeps recording ownership changes while the backup
//! runs. Each backup is restored into a fresh store, which must read back
//! (through `Store::history`, as the API does) exactly the source's history up to the last entry
//! the backup holds — every entry recorded before the backup started among them — and accept
//! new entries after it. SQLite: `sqlite3 DB ".backup FILE"` and `sqlite3 DB "VACUUM INTO
//! 'FILE'"`, restored by putting the file in place of the database. PostgreSQL (when
//! `LEASEHOLD_TEST_POSTGRES_URL` is set, as `scripts/test.sh` does when PostgreSQL is installed):
//! `pg_dump --format=custom`, restored with `pg_restore` into a fresh database.
//! Without sqlite3 (or pg_dump) the test says it skipped, and fails under CI.
//! And the runbook's upgrade: a rebalance running when the control plane is stopped for an
//! upgrade is finished by the new one on the same history, each move made and recorded once.

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::eventually;
use leasehold::model::Cause;
use leasehold::store::{HistoryEntry, HistoryQuery, OwnershipChange, Store};

/// Entries recorded before the backup starts.
const SEEDED: usize = 300;

fn change(i: usize, at_ms: i64) -> OwnershipChange {
    OwnershipChange {
        overlap: None,
        cluster: "c".into(),
        target: format!("t-{:03}", i % 97),
        from: (!i.is_multiple_of(3)).then(|| format!("m-{}", i % 5)),
        to: Some(format!("m-{}", (i + 1) % 5)),
        cause: if i.is_multiple_of(2) {
            Cause::Rebalance
        } else {
            Cause::Failover
        },
        operation: None,
        at_ms,
        acquired_at_ms: Some(at_ms + i as i64),
        gap_ms: Some(i as i64 % 50),
    }
}

async fn record(store: &Store, i: usize) {
    let at = leasehold::store::now_ms();
    store
        .record_ownership(&change(i, at))
        .await
        .expect("record an ownership change");
}

/// Every history entry, oldest first.
async fn all_history(store: &Store) -> Vec<HistoryEntry> {
    let mut out = Vec::new();
    let mut cursor = None;
    loop {
        let page = store
            .history(&HistoryQuery {
                limit: 1000,
                cursor,
                ..Default::default()
            })
            .await
            .expect("history");
        out.extend(page.items);
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    out.reverse();
    out
}

/// A writer recording entries until stopped; returns how many it recorded.
struct Writer {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<usize>,
}

impl Writer {
    fn start(store: Store, from: usize) -> Writer {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let task = tokio::spawn(async move {
            let mut i = from;
            while !flag.load(Ordering::Relaxed) {
                record(&store, i).await;
                i += 1;
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            i - from
        });
        Writer { stop, task }
    }

    async fn stop(self) -> usize {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.expect("the writer")
    }
}

/// A tool on PATH (or in PostgreSQL's versioned directories), or `None` after saying the test
/// skipped — a failure under CI.
fn tool(name: &str) -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    let mut pg: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.path().join("bin"))
                .collect()
        })
        .unwrap_or_default();
    pg.sort();
    pg.reverse();
    dirs.extend(pg);
    if let Some(found) = dirs.into_iter().map(|d| d.join(name)).find(|p| p.is_file()) {
        return Some(found);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{name} is needed for the backup test (Debian: apt-get install sqlite3 postgresql-client)"
    );
    eprintln!("SKIPPED: {name} not found (Debian: apt-get install sqlite3 postgresql-client)");
    None
}

async fn run(cmd: &Path, args: &[&str]) {
    let out = tokio::time::timeout(
        Duration::from_secs(120),
        tokio::process::Command::new(cmd)
            .args(args)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("finishes within 120 s")
    .expect("runs");
    assert!(
        out.status.success(),
        "{} {args:?}: {}",
        cmd.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The source's history up to the restored one's last entry is the restored history; the
/// backup holds at least what was there before it started; the restored store takes new
/// entries after the old ones.
async fn assert_restored(what: &str, source: &Store, restored: &Store, before_backup: usize) {
    let source_history = all_history(source).await;
    let restored_history = all_history(restored).await;
    assert!(
        restored_history.len() >= before_backup,
        "{what}: the backup holds {} entries, fewer than the {before_backup} recorded before it started",
        restored_history.len()
    );
    let last = restored_history.last().expect("entries").id;
    let prefix: Vec<&HistoryEntry> = source_history.iter().filter(|e| e.id <= last).collect();
    assert_eq!(
        prefix.len(),
        restored_history.len(),
        "{what}: the restored history is the source's up to entry {last}"
    );
    for (a, b) in prefix.iter().zip(&restored_history) {
        assert_eq!(*a, b, "{what}: entry {} differs after the restore", a.id);
    }
    record(restored, 999_999).await;
    let after = all_history(restored).await;
    assert!(
        after.last().unwrap().id > last,
        "{what}: a new entry after the restored ones"
    );
    eprintln!(
        "{what}: {} entries restored identical ({} recorded before the backup, {} in the source at the end)",
        restored_history.len(),
        before_backup,
        source_history.len()
    );
}

#[tokio::test]
async fn a_live_sqlite_history_backed_up_and_restored_is_identical() {
    let Some(sqlite3) = tool("sqlite3") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("leasehold.db");
    let source = Store::connect(&format!("sqlite:{}", db.display()))
        .await
        .expect("source");
    for i in 0..SEEDED {
        record(&source, i).await;
    }
    let before = all_history(&source).await.len();
    let db = db.to_str().unwrap();
    for (what, file, command) in [
        (
            "sqlite3 .backup",
            "backup.db",
            format!(".backup '{}'", dir.path().join("backup.db").display()),
        ),
        (
            "sqlite3 VACUUM INTO",
            "vacuum.db",
            format!("VACUUM INTO '{}'", dir.path().join("vacuum.db").display()),
        ),
    ] {
        let writer = Writer::start(source.clone(), SEEDED + 10_000);
        tokio::time::sleep(Duration::from_millis(200)).await;
        run(&sqlite3, &[db, &command]).await;
        let written = writer.stop().await;
        assert!(
            written > 0,
            "{what}: the writer recorded while the backup ran"
        );
        run(
            &sqlite3,
            &[
                dir.path().join(file).to_str().unwrap(),
                "PRAGMA integrity_check",
            ],
        )
        .await;
        // Restore: the backup file in place of a fresh store's database (no -wal or -shm).
        let fresh = tempfile::tempdir().unwrap();
        let restored_db = fresh.path().join("leasehold.db");
        std::fs::copy(dir.path().join(file), &restored_db).unwrap();
        let restored = Store::connect(&format!("sqlite:{}", restored_db.display()))
            .await
            .expect("the restored store opens (its migrations already applied)");
        assert_restored(what, &source, &restored, before).await;
        restored.close().await;
    }
    source.close().await;
}

#[tokio::test]
async fn a_live_postgresql_history_dumped_and_restored_is_identical() {
    let Some(server) = std::env::var("LEASEHOLD_TEST_POSTGRES_URL")
        .ok()
        .filter(|s| !s.is_empty())
    else {
        eprintln!("SKIPPED: LEASEHOLD_TEST_POSTGRES_URL is not set (scripts/postgres.sh run -- …)");
        return;
    };
    let (Some(pg_dump), Some(pg_restore)) = (tool("pg_dump"), tool("pg_restore")) else {
        return;
    };
    sqlx::any::install_default_drivers();
    let id = uuid::Uuid::new_v4().simple().to_string();
    let (src_name, dst_name) = (
        format!("leasehold_bk_src_{id}"),
        format!("leasehold_bk_dst_{id}"),
    );
    let mut admin = <sqlx::AnyConnection as sqlx::Connection>::connect(&server)
        .await
        .expect("connect to LEASEHOLD_TEST_POSTGRES_URL");
    for name in [&src_name, &dst_name] {
        sqlx::Executor::execute(
            &mut admin,
            sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")),
        )
        .await
        .expect("create a database");
    }
    let src_url = leasehold::store::with_database(&server, &src_name);
    let dst_url = leasehold::store::with_database(&server, &dst_name);
    let source = Store::connect(&src_url).await.expect("source");
    for i in 0..SEEDED {
        record(&source, i).await;
    }
    let before = all_history(&source).await.len();
    let dir = tempfile::tempdir().unwrap();
    let dump = dir.path().join("leasehold.dump");
    let writer = Writer::start(source.clone(), SEEDED + 10_000);
    tokio::time::sleep(Duration::from_millis(200)).await;
    run(
        &pg_dump,
        &[
            "--format=custom",
            "--file",
            dump.to_str().unwrap(),
            &src_url,
        ],
    )
    .await;
    let written = writer.stop().await;
    assert!(written > 0, "the writer recorded while pg_dump ran");
    run(
        &pg_restore,
        &[
            "--no-owner",
            "--exit-on-error",
            "--dbname",
            &dst_url,
            dump.to_str().unwrap(),
        ],
    )
    .await;
    let restored = Store::connect(&dst_url)
        .await
        .expect("the restored store opens (its migrations already applied)");
    assert_restored("pg_dump / pg_restore", &source, &restored, before).await;
    restored.close().await;
    source.close().await;
    for name in [&src_name, &dst_name] {
        sqlx::Executor::execute(
            &mut admin,
            sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")),
        )
        .await
        .expect("drop a database");
    }
}

/// docs/runbook.md, "Upgrade": an operation running while the control plane is upgraded. The
/// `single` way (`Recreate`, as the chart's defaults): the old control plane is stopped as
/// Kubernetes stops it — its shutdown, which releases the election Lease — in the middle of a
/// rebalance, and only then does the new one start, on the same history. The new one finishes
/// the operation; every planned move is made once and recorded in history once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_operation_running_during_an_upgrade_is_finished_by_the_new_control_plane() {
    use common::cluster::{CLUSTER, Harness, config_yaml};
    use leasehold::engine::{Engine, PlanRequest};
    use leasehold::k8s::model::Liveness;
    use leasehold::model::{MoveState, OperationState};
    use leasehold::store::HistoryKind;

    let mut h = Harness::new(&config_yaml(60, "on_join: off, max_concurrent_moves: 2")).await;
    for m in ["c-0", "c-1", "c-2"] {
        h.add_process_member(m).await;
    }
    h.wait_pods_ready(3).await;
    h.wait_registered(&["c-0", "c-1", "c-2"]).await;
    // The old version, with a shutdown of its own.
    let old = Engine::new(
        h.config.clone(),
        h.accounts.control_plane.clone(),
        h.store().await,
        "cp-old".into(),
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let runner = old.clone();
    let task = tokio::spawn(async move {
        runner
            .run(async {
                let _ = stopped.await;
            })
            .await
    });
    h.engines.insert("cp-old".into(), (old.clone(), task));
    h.wait_balanced(
        &[("c-0", 20), ("c-1", 20), ("c-2", 20)],
        Duration::from_secs(30),
    )
    .await;
    h.add_process_member("c-3").await;
    eventually(Duration::from_secs(15), || async {
        let m = old.model(CLUSTER).ok()?;
        let i = m.instance("c-3")?;
        (i.ready && i.member_lease.as_ref()?.liveness == Liveness::Live).then_some(())
    })
    .await
    .expect("c-3 live");
    let op = old
        .start_rebalance(
            CLUSTER,
            &PlanRequest::default(),
            "upgrade-test",
            "before the upgrade",
            false,
        )
        .await
        .expect("a rebalance");
    assert_eq!(op.moves.len(), 15);
    eventually(Duration::from_secs(30), || async {
        let op = old.operation(&op.id).await.ok()?;
        let done = op
            .moves
            .iter()
            .filter(|m| m.state == MoveState::Done)
            .count();
        (done >= 3).then_some(())
    })
    .await
    .expect("three moves done before the upgrade");

    // The upgrade: the old one stopped (the Lease released), then the new one started.
    let (_, task) = h.engines.remove("cp-old").unwrap();
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .expect("the old control plane stops within 30 s")
        .expect("its task")
        .expect("it stops cleanly");
    let at_stop = h
        .store()
        .await
        .operation(&op.id)
        .await
        .expect("the store answers")
        .expect("the operation, stored");
    let done_at_stop = at_stop
        .moves
        .iter()
        .filter(|m| m.state == MoveState::Done)
        .count();
    let new = h.start_engine("cp-new").await;
    let done = eventually(Duration::from_secs(60), || async {
        let op = new.operation(&op.id).await.ok()?;
        op.state.is_final().then_some(op)
    })
    .await
    .expect("the new control plane finishes the operation");
    assert_eq!(done.state, OperationState::Succeeded, "{done:?}");
    assert!(done.moves.iter().all(|m| m.state == MoveState::Done));
    h.wait_balanced(
        &[("c-0", 15), ("c-1", 15), ("c-2", 15), ("c-3", 15)],
        Duration::from_secs(30),
    )
    .await;
    let mut moved: Vec<String> = h
        .history(HistoryKind::Ownership)
        .await
        .into_iter()
        .filter(|r| r.operation.as_deref() == Some(op.id.as_str()))
        .map(|r| r.target.unwrap())
        .collect();
    moved.sort();
    let mut planned: Vec<String> = done.moves.iter().map(|m| m.target.clone()).collect();
    planned.sort();
    assert_eq!(moved, planned, "each planned move recorded once");
    eprintln!(
        "upgrade: {done_at_stop} of 15 moves done when the old control plane stopped; the new one finished the rest"
    );
    h.finish().await;
}
