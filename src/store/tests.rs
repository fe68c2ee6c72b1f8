//! Tests of the store, written once and run against a fresh migrated SQLite file and, when
//! `LEASEHOLD_TEST_POSTGRES_URL` is set (`scripts/postgres.sh run -- cargo test`), against a
//! fresh PostgreSQL database per test. Must not share state between tests.

use super::*;
use crate::model::{Cause, InstanceEventKind, MoveState, OperationKind, OperationState};
use sqlx::Executor as _;

/// A fresh database for one test.
struct TestDb {
    url: String,
    backend: Backend,
    /// Keeps the SQLite file's directory alive.
    _dir: Option<tempfile::TempDir>,
    /// PostgreSQL: the server URL and the database made for this test (dropped in `cleanup`).
    pg: Option<(String, String)>,
}

impl TestDb {
    fn sqlite() -> TestDb {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("history.db");
        TestDb {
            url: format!("sqlite:{}", path.display()),
            backend: Backend::Sqlite,
            _dir: Some(dir),
            pg: None,
        }
    }

    async fn postgres(server: &str) -> TestDb {
        sqlx::any::install_default_drivers();
        let name = format!("leasehold_test_{}", uuid::Uuid::new_v4().simple());
        let mut admin = <sqlx::AnyConnection as sqlx::Connection>::connect(server)
            .await
            .expect("connect to LEASEHOLD_TEST_POSTGRES_URL");
        admin
            .execute(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .await
            .expect("create test database");
        TestDb {
            url: with_database(server, &name),
            backend: Backend::Postgres,
            _dir: None,
            pg: Some((server.to_owned(), name)),
        }
    }

    async fn connect(&self) -> Store {
        let store = Store::connect(&self.url).await.expect("connect");
        assert_eq!(store.backend(), self.backend);
        store
    }

    async fn cleanup(self) {
        if let Some((server, name)) = &self.pg {
            let mut admin = <sqlx::AnyConnection as sqlx::Connection>::connect(server)
                .await
                .expect("connect to LEASEHOLD_TEST_POSTGRES_URL");
            admin
                .execute(sqlx::AssertSqlSafe(format!(
                    "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                )))
                .await
                .expect("drop test database");
        }
    }
}

/// Runs `test` against SQLite, then PostgreSQL when `LEASEHOLD_TEST_POSTGRES_URL` is set.
async fn each_backend(test: impl AsyncFn(&TestDb)) {
    let sqlite = TestDb::sqlite();
    test(&sqlite).await;
    sqlite.cleanup().await;
    if let Some(server) = std::env::var("LEASEHOLD_TEST_POSTGRES_URL")
        .ok()
        .filter(|s| !s.is_empty())
    {
        let pg = TestDb::postgres(&server).await;
        test(&pg).await;
        pg.cleanup().await;
    }
}

/// With `LEASEHOLD_TEST_POSTGRES_CA` set (`scripts/postgres.sh` with openssl), the store reaches
/// PostgreSQL over TLS with the server's certificate checked (`sslmode=verify-full`), and refuses
/// a server whose certificate another CA signed.
#[tokio::test]
async fn postgres_over_verified_tls() {
    let env = |k| std::env::var(k).ok().filter(|s: &String| !s.is_empty());
    let Some(server) = env("LEASEHOLD_TEST_POSTGRES_URL") else {
        return;
    };
    let Some(ca) = env("LEASEHOLD_TEST_POSTGRES_CA") else {
        eprintln!("LEASEHOLD_TEST_POSTGRES_CA unset (no openssl?): TLS not tested");
        return;
    };
    let db = TestDb::postgres(&server).await;
    let with = |root: &str| {
        let sep = if db.url.contains('?') { '&' } else { '?' };
        format!("{}{sep}sslmode=verify-full&sslrootcert={root}", db.url)
    };
    let store = Store::connect(&with(&ca)).await.expect("connect over TLS");
    let encrypted: bool =
        sqlx::query_scalar("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
            .fetch_one(store.pool())
            .await
            .expect("pg_stat_ssl");
    assert!(encrypted, "the connection is not encrypted");
    store.pool().close().await;

    let dir = tempfile::tempdir().expect("tempdir");
    let other = dir.path().join("other-ca.crt");
    let stranger =
        rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).expect("a CA of another");
    std::fs::write(&other, stranger.cert.pem()).expect("write CA");
    let refused = Store::connect(&with(&other.display().to_string())).await;
    assert!(
        refused.is_err(),
        "a server certificate from an unknown CA was accepted"
    );
    db.cleanup().await;
}

fn change(target: &str, from: Option<&str>, to: Option<&str>, at_ms: i64) -> OwnershipChange {
    OwnershipChange {
        overlap: None,
        cluster: "c1".into(),
        target: target.into(),
        from: from.map(Into::into),
        to: to.map(Into::into),
        cause: Cause::Rebalance,
        operation: None,
        at_ms,
        acquired_at_ms: Some(at_ms),
        gap_ms: from.map(|_| 40),
    }
}

fn new_op(
    cluster: &str,
    kind: OperationKind,
    moves: &[(&str, &str, &str)],
    now_ms: i64,
) -> NewOperation {
    NewOperation {
        cluster: cluster.into(),
        kind,
        state: OperationState::Pending,
        requested_by: "alice".into(),
        reason: "test".into(),
        instance: (kind == OperationKind::RemoveInstance).then(|| "pod-0".to_owned()),
        params: serde_json::json!({"max_moves": 3}),
        moves: moves
            .iter()
            .map(|(t, f, to)| NewMove {
                target: (*t).into(),
                from: Some((*f).into()),
                to: (*to).into(),
            })
            .collect(),
        now_ms,
    }
}

fn query(limit: u32) -> HistoryQuery {
    HistoryQuery {
        limit,
        ..HistoryQuery::default()
    }
}

#[tokio::test]
async fn migrations_create_a_new_sqlite_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sub-dir-free.db");
    assert!(!path.exists());
    for url in [
        format!("sqlite:{}", path.display()),
        format!("sqlite://{}", path.display()),
    ] {
        let store = Store::connect(&url).await.unwrap();
        assert!(path.exists(), "{url} did not create the file");
        assert_eq!(store.backend(), Backend::Sqlite);
        let page = store.history(&query(10)).await.unwrap();
        assert!(page.items.is_empty());
        let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
            .fetch_one(store.pool())
            .await
            .unwrap();
        assert_eq!(mode, "wal");
        let fk: i64 = sqlx::query_scalar("PRAGMA foreign_keys")
            .fetch_one(store.pool())
            .await
            .unwrap();
        assert_eq!(fk, 1);
        store.close().await;
    }

    // In memory: works, and is one database across calls.
    let mem = Store::connect("sqlite::memory:").await.unwrap();
    mem.set_cordon("c", "i", true, "me", 1).await.unwrap();
    assert_eq!(mem.cordons("c").await.unwrap(), vec!["i".to_owned()]);
}

/// Two replicas started together on one fresh SQLite file (the single overlay's Deployment
/// during a rollout, or two `serve`s by hand) both migrate it: neither may fail, and the
/// migrations run once. Each round starts both on a new file at the same moment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_stores_opening_one_fresh_sqlite_file_together_both_migrate_it() {
    let dir = tempfile::tempdir().unwrap();
    for round in 0..20 {
        let url = format!(
            "sqlite://{}",
            dir.path().join(format!("r{round}.db")).display()
        );
        let (a, b) = tokio::join!(
            tokio::spawn({
                let url = url.clone();
                async move { Store::connect(&url).await }
            }),
            tokio::spawn({
                let url = url.clone();
                async move { Store::connect(&url).await }
            }),
        );
        let (a, b) = (a.unwrap(), b.unwrap());
        let (a, b) = match (a, b) {
            (Ok(a), Ok(b)) => (a, b),
            (a, b) => panic!("round {round}: {:?} / {:?}", a.err(), b.err()),
        };
        let applied: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM _sqlx_migrations")
            .fetch_one(a.pool())
            .await
            .unwrap();
        assert_eq!(
            applied,
            SQLITE_MIGRATIONS.iter().count() as i64,
            "round {round}"
        );
        a.close().await;
        b.close().await;
    }
}

#[tokio::test]
async fn urls_never_show_a_password() {
    assert_eq!(
        redact_url("postgres://lh:s3cr3t@db:5432/leasehold?sslmode=disable"),
        "postgres://lh:***@db:5432/leasehold?sslmode=disable"
    );
    assert_eq!(
        redact_url("postgres://lh:pa/ss@word@db/x"),
        "postgres://lh:***@db/x"
    );
    assert_eq!(
        redact_url("postgres://db/x?user=lh&password=s3cr3t"),
        "postgres://db/x?user=lh&password=***"
    );
    assert_eq!(redact_url("postgres://lh@db/x"), "postgres://lh@db/x");
    assert_eq!(redact_url("sqlite:/var/lib/x.db"), "sqlite:/var/lib/x.db");

    let err = Store::connect("mysql://root:s3cr3t@db/x")
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::UnsupportedUrl(_)));
    assert!(!err.to_string().contains("s3cr3t"), "{err}");

    let store = Store::connect("sqlite::memory:").await.unwrap();
    assert!(format!("{store:?}").contains("sqlite::memory:"));
}

#[tokio::test]
async fn ownership_recording_is_idempotent() {
    each_backend(async |db| {
        let store = db.connect().await;
        let c = change("t1", None, Some("pod-a"), 1_000);
        assert!(store.record_ownership(&c).await.unwrap());
        // A second replica sees the same acquisition a little later.
        let again = OwnershipChange {
            at_ms: 1_250,
            cause: Cause::External,
            ..c.clone()
        };
        assert!(!store.record_ownership(&again).await.unwrap());
        // A new acquisition by the same holder is a new change.
        let later = change("t1", Some("pod-a"), Some("pod-a"), 2_000);
        assert!(store.record_ownership(&later).await.unwrap());
        // Releases (no holder) dedupe on the acquire time too.
        let release = OwnershipChange {
            to: None,
            ..change("t1", Some("pod-a"), None, 3_000)
        };
        assert!(store.record_ownership(&release).await.unwrap());
        assert!(!store.record_ownership(&release).await.unwrap());
        // Without an acquire time there is nothing to dedupe on: both are kept.
        let bare = OwnershipChange {
            acquired_at_ms: None,
            ..change("t2", None, Some("pod-b"), 4_000)
        };
        assert!(store.record_ownership(&bare).await.unwrap());
        assert!(store.record_ownership(&bare).await.unwrap());

        let page = store.history(&query(100)).await.unwrap();
        assert_eq!(page.items.len(), 5);
        let first = page.items.last().unwrap();
        assert_eq!(first.kind, HistoryKind::Ownership);
        assert_eq!(first.to.as_deref(), Some("pod-a"));
        assert_eq!(first.from, None);
        assert_eq!(first.cause, Some(Cause::Rebalance));
        assert_eq!(first.at_ms, 1_000);
        assert_eq!(first.acquired_at_ms, Some(1_000));
        assert_eq!(first.gap_ms, None, "a first owner is no handoff");
        // The move from pod-a (to pod-a again at 2,000) keeps its gap.
        let moved = page.items.iter().find(|e| e.at_ms == 2_000).unwrap();
        assert_eq!(moved.gap_ms, Some(40));
    })
    .await;
}

/// A hand-over's work gap lands on the target's newest ownership row, once, and only if that
/// row gave the target to the member that reported it.
#[tokio::test]
async fn a_work_gap_fills_in_the_newest_move_to_its_reporter_once() {
    each_backend(async |db| {
        let store = db.connect().await;
        for c in [
            change("t1", None, Some("pod-a"), 1_000),
            change("t1", Some("pod-a"), Some("pod-b"), 2_000),
            change("t2", None, Some("pod-b"), 2_500),
        ] {
            assert!(store.record_ownership(&c).await.unwrap());
        }
        // Not the member the newest row gave t1 to.
        assert!(
            !store
                .record_work_gap("c1", "t1", "pod-a", 900)
                .await
                .unwrap()
        );
        assert!(
            store
                .record_work_gap("c1", "t1", "pod-b", 14_100)
                .await
                .unwrap()
        );
        // Told again (another replica): the row keeps the first.
        assert!(!store.record_work_gap("c1", "t1", "pod-b", 1).await.unwrap());
        let page = store.history(&query(100)).await.unwrap();
        let gap_at = |at: i64| {
            page.items
                .iter()
                .find(|e| e.at_ms == at)
                .unwrap()
                .work_gap_ms
        };
        assert_eq!(
            (gap_at(1_000), gap_at(2_000), gap_at(2_500)),
            (None, Some(14_100), None)
        );
    })
    .await;
}

/// Of all the sizes a burst's statements can have, only two are kept prepared on a connection
/// (each size is its own statement text; keeping every one filled the statement cache with
/// programs of thousands of parameters: 26 MB on SQLite at 50,000 targets).
#[test]
fn only_two_sizes_of_ownership_inserts_are_kept_prepared() {
    let kept: Vec<usize> = (1..=history::OWNERSHIP_ROWS_PER_STATEMENT)
        .filter(|&n| history::keep_prepared(n))
        .collect();
    assert_eq!(kept, [1, history::OWNERSHIP_ROWS_PER_STATEMENT]);
}

/// A batch spanning several statements is stored in its order (the newest row is the last
/// change), each acquisition once: repeats within the batch and rows already stored are
/// skipped, and only the new ones are counted.
#[tokio::test]
async fn frequent_movers_counts_moves_between_members_in_the_window() {
    each_backend(async |db| {
        let store = db.connect().await;
        let mut rows = vec![
            // Before the window: not counted.
            change("hot", Some("a"), Some("b"), 500),
            // First owner, release and a re-acquire by the same holder: not moves.
            change("hot", None, Some("a"), 1_000),
            change("hot", Some("a"), Some("a"), 1_100),
            OwnershipChange {
                to: None,
                ..change("hot", Some("a"), None, 1_200)
            },
        ];
        for (i, (from, to)) in [("a", "b"), ("b", "c"), ("c", "a"), ("a", "b")]
            .iter()
            .enumerate()
        {
            rows.push(change("hot", Some(from), Some(to), 2_000 + i as i64));
        }
        for (i, (from, to)) in [("a", "b"), ("b", "a"), ("a", "b"), ("b", "a")]
            .iter()
            .enumerate()
        {
            rows.push(change("warm", Some(from), Some(to), 3_000 + i as i64));
        }
        rows.push(change("cold", Some("a"), Some("b"), 4_000));
        rows.push(OwnershipChange {
            cluster: "other".into(),
            ..change("hot", Some("a"), Some("b"), 4_500)
        });
        store.record_ownerships(&rows).await.unwrap();
        let movers = store.frequent_movers("c1", 1_000, 3, 10).await.unwrap();
        let got: Vec<(&str, i64)> = movers
            .iter()
            .map(|m| (m.target.as_str(), m.moves))
            .collect();
        assert_eq!(got, [("hot", 4), ("warm", 4)]);
        assert_eq!(
            store
                .frequent_movers("c1", 1_000, 3, 1)
                .await
                .unwrap()
                .len(),
            1
        );
        assert!(
            store
                .frequent_movers("c1", 3_002, 3, 10)
                .await
                .unwrap()
                .is_empty()
        );
    })
    .await;
}

#[tokio::test]
async fn ownership_batches_keep_their_order_and_skip_what_is_stored() {
    each_backend(async |db| {
        let store = db.connect().await;
        let stored = change("t-0", None, Some("m-0"), 1);
        assert!(store.record_ownership(&stored).await.unwrap());
        let n = history::OWNERSHIP_ROWS_PER_STATEMENT * 2 + 7;
        let mut batch: Vec<OwnershipChange> = (0..n as i64)
            .map(|i| {
                change(
                    &format!("t-{}", i % 3),
                    None,
                    Some(&format!("m-{i}")),
                    10 + i,
                )
            })
            .collect();
        batch.insert(3, stored.clone());
        batch.push(batch[5].clone());
        assert_eq!(store.record_ownerships(&batch).await.unwrap(), n as u64);
        assert_eq!(store.record_ownerships(&batch).await.unwrap(), 0);
        let mut q = query(1000);
        q.target = Some("t-0".into());
        let newest = &store.history(&q).await.unwrap().items[0];
        let last_of_t0 = (0..n as i64).rev().find(|i| i % 3 == 0).unwrap();
        assert_eq!(newest.to, Some(format!("m-{last_of_t0}")));
        let mut all = Vec::new();
        let mut q = query(1000);
        loop {
            let page = store.history(&q).await.unwrap();
            all.extend(page.items);
            match page.next_cursor {
                Some(c) => q.cursor = Some(c),
                None => break,
            }
        }
        let acquired: Vec<i64> = all
            .iter()
            .rev()
            .map(|e| e.acquired_at_ms.unwrap())
            .collect();
        let expected: Vec<i64> = std::iter::once(1)
            .chain((0..n as i64).map(|i| 10 + i))
            .collect();
        assert_eq!(acquired, expected, "stored in the batch's order");
    })
    .await;
}

#[tokio::test]
async fn overrun_recording_is_idempotent_and_other_instance_events_are_not_touched() {
    each_backend(async |db| {
        let store = db.connect().await;
        let event = |instance: &str, kind: InstanceEventKind, at_ms: i64| InstanceEvent {
            cluster: "c".into(),
            instance: instance.into(),
            kind,
            at_ms,
            detail: Some("paused 1.5 s past the end of its hold".into()),
        };
        let o = event("m-0", InstanceEventKind::Overrun, 5_000);
        assert!(store.record_overrun(&o).await.unwrap());
        // Another replica, or a restart reading the member Lease again.
        assert!(!store.record_overrun(&o).await.unwrap());
        // Another member, or a later report, is another row.
        assert!(
            store
                .record_overrun(&event("m-1", InstanceEventKind::Overrun, 5_000))
                .await
                .unwrap()
        );
        assert!(
            store
                .record_overrun(&event("m-0", InstanceEventKind::Overrun, 6_000))
                .await
                .unwrap()
        );
        // The unique index is for overruns only: two other events of one member at one
        // millisecond are both kept.
        for _ in 0..2 {
            store
                .record_instance_event(&event("m-0", InstanceEventKind::Ready, 5_000))
                .await
                .unwrap();
        }
        let page = store.history(&query(100)).await.unwrap();
        let events: Vec<_> = page
            .items
            .iter()
            .map(|e| {
                (
                    e.instance.as_deref().unwrap(),
                    e.event.as_deref().unwrap(),
                    e.at_ms,
                )
            })
            .collect();
        assert_eq!(
            events,
            [
                ("m-0", "ready", 5_000),
                ("m-0", "ready", 5_000),
                ("m-0", "overrun", 6_000),
                ("m-1", "overrun", 5_000),
                ("m-0", "overrun", 5_000),
            ]
        );
        assert_eq!(page.items[4].detail, o.detail);
    })
    .await;
}

#[tokio::test]
async fn history_filters() {
    each_backend(async |db| {
        let store = db.connect().await;
        store
            .record_ownership(&change("t1", None, Some("a"), 100))
            .await
            .unwrap();
        store
            .record_ownership(&change("t1", Some("a"), Some("b"), 200))
            .await
            .unwrap();
        store
            .record_ownership(&change("t2", Some("b"), Some("c"), 300))
            .await
            .unwrap();
        let other = OwnershipChange {
            cluster: "c2".into(),
            ..change("t1", None, Some("a"), 150)
        };
        store.record_ownership(&other).await.unwrap();
        store
            .record_instance_event(&InstanceEvent {
                cluster: "c1".into(),
                instance: "b".into(),
                kind: InstanceEventKind::NotReady,
                at_ms: 400,
                detail: Some("probe failed".into()),
            })
            .await
            .unwrap();
        let op = store
            .create_operation(&new_op("c1", OperationKind::RemoveInstance, &[], 500))
            .await
            .unwrap();

        let ids = |q: HistoryQuery| {
            let store = store.clone();
            async move {
                let page = store.history(&q).await.unwrap();
                page.items.iter().map(|e| e.at_ms).collect::<Vec<_>>()
            }
        };
        let c1 = HistoryQuery {
            cluster: Some("c1".into()),
            limit: 100,
            ..HistoryQuery::default()
        };
        assert_eq!(ids(c1.clone()).await, vec![500, 400, 300, 200, 100]);
        assert_eq!(ids(query(100)).await, vec![500, 400, 150, 300, 200, 100]);
        assert_eq!(
            ids(HistoryQuery {
                target: Some("t1".into()),
                ..c1.clone()
            })
            .await,
            vec![200, 100]
        );
        // "b": the move to b, the move from b, and b's own event.
        assert_eq!(
            ids(HistoryQuery {
                instance: Some("b".into()),
                ..c1.clone()
            })
            .await,
            vec![400, 300, 200]
        );
        // The remove-instance operation's entries carry its instance.
        assert_eq!(
            ids(HistoryQuery {
                instance: Some("pod-0".into()),
                ..c1.clone()
            })
            .await,
            vec![500]
        );
        assert_eq!(
            ids(HistoryQuery {
                kind: Some(HistoryKind::Instance),
                ..c1.clone()
            })
            .await,
            vec![400]
        );
        // An operation's entries: its lifecycle here (moves carry it too).
        assert_eq!(
            ids(HistoryQuery {
                operation: Some(op.id.clone()),
                ..c1.clone()
            })
            .await,
            vec![500]
        );
        assert_eq!(
            ids(HistoryQuery {
                operation: Some("no-such-operation".into()),
                ..c1.clone()
            })
            .await,
            Vec::<i64>::new()
        );
        assert_eq!(
            ids(HistoryQuery {
                since_ms: Some(200),
                until_ms: Some(400),
                ..c1.clone()
            })
            .await,
            vec![300, 200]
        );

        let page = store
            .history(&HistoryQuery {
                kind: Some(HistoryKind::Operation),
                ..c1.clone()
            })
            .await
            .unwrap();
        let e = &page.items[0];
        assert_eq!(e.event.as_deref(), Some("created"));
        assert_eq!(e.operation.as_deref(), Some(op.id.as_str()));
        assert_eq!(e.actor.as_deref(), Some("alice"));
        assert_eq!(e.detail.as_deref(), Some("test"));
        let page = store
            .history(&HistoryQuery {
                kind: Some(HistoryKind::Instance),
                ..c1
            })
            .await
            .unwrap();
        assert_eq!(page.items[0].event.as_deref(), Some("not_ready"));
        assert_eq!(page.items[0].detail.as_deref(), Some("probe failed"));
    })
    .await;
}

#[tokio::test]
async fn history_pagination_visits_every_row_once() {
    each_backend(async |db| {
        let store = db.connect().await;
        for i in 0..23 {
            let c = change(&format!("t{}", i % 4), None, Some("a"), 1_000 + i);
            assert!(store.record_ownership(&c).await.unwrap());
        }
        for limit in [1, 5, 23, 100] {
            let mut seen = Vec::new();
            let mut cursor = None;
            let mut pages = 0;
            loop {
                let page = store
                    .history(&HistoryQuery {
                        cursor: cursor.clone(),
                        ..query(limit)
                    })
                    .await
                    .unwrap();
                pages += 1;
                assert!(page.items.len() <= limit as usize);
                seen.extend(page.items.iter().map(|e| e.id));
                match page.next_cursor {
                    Some(c) => cursor = Some(c),
                    None => break,
                }
            }
            assert_eq!(seen.len(), 23, "limit {limit}");
            assert!(
                seen.windows(2).all(|w| w[0] > w[1]),
                "newest first, no repeats"
            );
            assert_eq!(
                pages,
                23_usize.div_ceil(limit as usize).max(1),
                "limit {limit}"
            );
        }
        // Filters and cursors combine.
        let mut seen = 0;
        let mut cursor = None;
        loop {
            let page = store
                .history(&HistoryQuery {
                    target: Some("t1".into()),
                    cursor,
                    ..query(2)
                })
                .await
                .unwrap();
            seen += page.items.len();
            assert!(page.items.iter().all(|e| e.target.as_deref() == Some("t1")));
            cursor = page.next_cursor;
            if cursor.is_none() {
                break;
            }
        }
        assert_eq!(seen, 6);
        // A limit of 0 (the Default) means DEFAULT_PAGE; above the maximum means the maximum.
        assert_eq!(store.history(&query(0)).await.unwrap().items.len(), 23);
        assert_eq!(
            store
                .operations(&OperationQuery::default())
                .await
                .unwrap()
                .next_cursor,
            None
        );
        assert_eq!(store.history(&query(5_000)).await.unwrap().items.len(), 23);
    })
    .await;
}

/// A burst is counted whole, whatever page of it is given: 3,000 placements (more than a scan
/// first reaches), a 75-target failover cut into by other rows, an operation's 60 moves over
/// two minutes; apart by cluster, by cause and source, and by a pause over the gap; filtered
/// as the listing is (an instance's changes only), never by its cursor.
#[tokio::test]
async fn bursts_are_counted_over_the_whole_history() {
    each_backend(async |db| {
        let store = db.connect().await;
        let gap = 60_000;
        let at = |cluster: &str, target: String, from: Option<&str>, to: &str, cause, at_ms| {
            OwnershipChange {
                cluster: cluster.into(),
                cause,
                ..change(&target, from, Some(to), at_ms)
            }
        };
        let members = ["m-0", "m-1", "m-2"];
        // 3,000 first placements in c1, 1 ms apart, with 10 in c2 among the last of them.
        let mut rows: Vec<OwnershipChange> = (0..3000)
            .map(|i| {
                at(
                    "c1",
                    format!("p{i}"),
                    None,
                    members[i % 3],
                    Cause::Initial,
                    1_000_000 + i as i64,
                )
            })
            .collect();
        rows.extend((0..10).map(|i| {
            at(
                "c2",
                format!("p{i}"),
                None,
                "m-0",
                Cause::Initial,
                1_003_000 + i,
            )
        }));
        store.record_ownerships(&rows).await.unwrap();
        // m-0 crashes: 75 fail over, cut into by instance events; a minute and more later 3
        // more leave m-0 for another cause, and then 2 fail over again.
        for i in 0..75 {
            let to = if i % 5 == 0 { "m-2" } else { "m-1" };
            let c = OwnershipChange {
                gap_ms: Some(100 + i),
                ..at(
                    "c1",
                    format!("p{}", 3 * i),
                    Some("m-0"),
                    to,
                    Cause::Failover,
                    2_000_000 + i * 10,
                )
            };
            store.record_ownership(&c).await.unwrap();
            if i % 20 == 0 {
                store
                    .record_instance_event(&InstanceEvent {
                        cluster: "c1".into(),
                        instance: "m-0".into(),
                        kind: InstanceEventKind::NotReady,
                        at_ms: 2_000_000 + i * 10,
                        detail: None,
                    })
                    .await
                    .unwrap();
            }
        }
        for i in 0..3 {
            let c = at(
                "c1",
                format!("h{i}"),
                Some("m-0"),
                "m-1",
                Cause::Handoff,
                2_001_000 + i,
            );
            store.record_ownership(&c).await.unwrap();
        }
        for i in 0..2 {
            let c = at(
                "c1",
                format!("f{i}"),
                Some("m-0"),
                "m-1",
                Cause::Failover,
                2_070_000 + i,
            );
            store.record_ownership(&c).await.unwrap();
        }
        // A rebalance of 60 moves from m-1 and m-2 to m-0, two seconds apart.
        let op = store
            .create_operation(&new_op("c1", OperationKind::Rebalance, &[], 3_000_000))
            .await
            .unwrap();
        for i in 0..60 {
            let c = OwnershipChange {
                operation: Some(op.id.clone()),
                ..at(
                    "c1",
                    format!("r{i}"),
                    Some(if i < 45 { "m-1" } else { "m-2" }),
                    "m-0",
                    Cause::Rebalance,
                    3_000_000 + i * 2_000,
                )
            };
            store.record_ownership(&c).await.unwrap();
        }

        // Each burst as (cause, operation?, from, count, to) for the rows of one page.
        type Told = (Cause, bool, Option<String>, u64, Vec<(Option<String>, u64)>);
        let tell = async |q: &HistoryQuery| -> Vec<Told> {
            let page = store.history(q).await.unwrap();
            let bursts = store.bursts(q, &page.items, gap).await.unwrap();
            let moves = page
                .items
                .iter()
                .filter(|e| e.kind == HistoryKind::Ownership);
            let held: usize = bursts.iter().map(|b| b.rows.len()).sum();
            assert_eq!(held, moves.count(), "every change given is in one burst");
            for b in &bursts {
                assert!(b.count() >= b.rows.len() as u64);
                assert!(b.first_ms <= b.last_ms);
            }
            bursts
                .into_iter()
                .map(|b| {
                    (
                        b.cause,
                        b.operation.is_some(),
                        b.from.clone(),
                        b.count(),
                        b.to,
                    )
                })
                .collect()
        };
        let to = |pairs: &[(&str, u64)]| -> Vec<(Option<String>, u64)> {
            pairs
                .iter()
                .map(|(m, n)| (Some((*m).to_owned()), *n))
                .collect()
        };
        let c1 = HistoryQuery {
            cluster: Some("c1".into()),
            ..query(50)
        };
        // The newest page: 50 of the rebalance's 60 moves.
        let first = tell(&c1).await;
        assert_eq!(
            first,
            [(Cause::Rebalance, true, None, 60, to(&[("m-0", 60)]))]
        );
        // Further back: the rest of it, the two late failovers, the handoffs apart, and the
        // crash's 75 (its rows over two pages), then the placements, 3,000 whatever the page.
        let mut cursor = store.history(&c1).await.unwrap().next_cursor;
        let mut seen = Vec::new();
        while let Some(c) = cursor {
            let q = HistoryQuery {
                cursor: Some(c),
                ..c1.clone()
            };
            for t in tell(&q).await {
                if !seen.contains(&t) {
                    seen.push(t);
                }
            }
            cursor = store.history(&q).await.unwrap().next_cursor;
        }
        let m0 = Some("m-0".to_owned());
        assert_eq!(
            seen,
            [
                (Cause::Rebalance, true, None, 60, to(&[("m-0", 60)])),
                (Cause::Failover, false, m0.clone(), 2, to(&[("m-1", 2)])),
                (Cause::Handoff, false, m0.clone(), 3, to(&[("m-1", 3)])),
                (
                    Cause::Failover,
                    false,
                    m0.clone(),
                    75,
                    to(&[("m-1", 60), ("m-2", 15)])
                ),
                (
                    Cause::Initial,
                    false,
                    None,
                    3000,
                    to(&[("m-0", 1000), ("m-1", 1000), ("m-2", 1000)])
                ),
            ]
        );
        // Without a cluster: c2's placements are a burst of their own.
        let all = tell(&HistoryQuery {
            kind: Some(HistoryKind::Ownership),
            ..query(1000)
        })
        .await;
        assert!(
            all.contains(&(Cause::Initial, false, None, 10, to(&[("m-0", 10)]))),
            "{all:?}"
        );
        // An instance's listing counts its own changes: m-2's placements and what left for it.
        let m2 = HistoryQuery {
            cluster: Some("c1".into()),
            instance: Some("m-2".into()),
            ..query(1000)
        };
        let mine = tell(&m2).await;
        assert!(mine.contains(&(Cause::Initial, false, None, 1000, to(&[("m-2", 1000)]))));
        assert!(mine.contains(&(Cause::Failover, false, m0.clone(), 15, to(&[("m-2", 15)]))));
        let from_m2 = Some("m-2".to_owned());
        assert!(mine.contains(&(Cause::Rebalance, true, from_m2, 15, to(&[("m-0", 15)]))));
        // Who asked, and the span and longest gap of the crash.
        let page = store.history(&m2).await.unwrap().items;
        let bursts = store.bursts(&m2, &page, gap).await.unwrap();
        let rebalance = bursts.iter().find(|b| b.operation.is_some()).unwrap();
        assert_eq!(rebalance.by.as_deref(), Some("alice"));
        assert_eq!(rebalance.last_ms - rebalance.first_ms, 14 * 2_000);
        let crash = bursts.iter().find(|b| b.cause == Cause::Failover).unwrap();
        assert_eq!((crash.first_ms, crash.last_ms), (2_000_000, 2_000_700));
        assert_eq!(crash.longest_gap_ms, Some(170));
    })
    .await;
}

#[tokio::test]
async fn bad_cursor_is_an_error() {
    each_backend(async |db| {
        let store = db.connect().await;
        store
            .record_ownership(&change("t", None, Some("a"), 1))
            .await
            .unwrap();
        store
            .record_ownership(&change("t", Some("a"), Some("b"), 2))
            .await
            .unwrap();
        let ops_cursor = encode_cursor("o", "1/x");
        for bad in ["!!!", "", "bm90IGEgY3Vyc29y", ops_cursor.as_str()] {
            let err = store
                .history(&HistoryQuery {
                    cursor: Some(bad.into()),
                    ..query(10)
                })
                .await
                .unwrap_err();
            assert!(matches!(err, StoreError::BadCursor), "{bad}: {err}");
        }
        let history_cursor = store.history(&query(1)).await.unwrap().next_cursor.unwrap();
        let err = store
            .operations(&OperationQuery {
                cursor: Some(history_cursor),
                limit: 10,
                ..OperationQuery::default()
            })
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::BadCursor));
    })
    .await;
}

#[tokio::test]
async fn operation_create_and_get() {
    each_backend(async |db| {
        let store = db.connect().await;
        let moves = [("t1", "a", "b"), ("t2", "a", "c"), ("t3", "b", "c")];
        let created = store
            .create_operation(&new_op("c1", OperationKind::Rebalance, &moves, 10))
            .await
            .unwrap();
        assert_eq!(
            uuid::Uuid::parse_str(&created.id)
                .unwrap()
                .get_version_num(),
            7
        );
        let got = store.operation(&created.id).await.unwrap().unwrap();
        assert_eq!(got, created);
        assert_eq!(got.state, OperationState::Pending);
        assert_eq!(got.params, serde_json::json!({"max_moves": 3}));
        assert_eq!(
            got.moves
                .iter()
                .map(|m| (m.seq, m.target.as_str()))
                .collect::<Vec<_>>(),
            vec![(1, "t1"), (2, "t2"), (3, "t3")]
        );
        assert!(
            got.moves
                .iter()
                .all(|m| m.state == MoveState::Pending && m.attempts == 0)
        );
        assert_eq!(store.operation("no-such-id").await.unwrap(), None);

        // Big plans go in several statements; a move may have no previous owner.
        let mut big = new_op("c1", OperationKind::Rebalance, &[], 11);
        big.moves = (0..450)
            .map(|i| NewMove {
                target: format!("t{i}"),
                from: (i % 2 == 0).then(|| "a".to_owned()),
                to: "b".into(),
            })
            .collect();
        let big = store.create_operation(&big).await.unwrap();
        let got = store.operation(&big.id).await.unwrap().unwrap();
        assert_eq!(got.moves.len(), 450);
        assert_eq!(got, big);

        // Refused: created running; remove-instance without an instance.
        let mut running = new_op("c1", OperationKind::Rebalance, &[], 12);
        running.state = OperationState::Running;
        assert!(matches!(
            store.create_operation(&running).await,
            Err(StoreError::Invalid(_))
        ));
        let mut nameless = new_op("c1", OperationKind::RemoveInstance, &[], 12);
        nameless.instance = None;
        assert!(matches!(
            store.create_operation(&nameless).await,
            Err(StoreError::Invalid(_))
        ));

        // Listing: newest first, filters, counts, cursor.
        let mut other = new_op("c2", OperationKind::RemoveInstance, &moves, 20);
        other.state = OperationState::Proposed;
        let other = store.create_operation(&other).await.unwrap();
        store
            .update_move(&created.id, 1, MoveState::Done, 1, None, 30)
            .await
            .unwrap();
        store
            .update_move(&created.id, 2, MoveState::InProgress, 1, None, 30)
            .await
            .unwrap();
        let all = store
            .operations(&OperationQuery {
                limit: 10,
                ..OperationQuery::default()
            })
            .await
            .unwrap();
        let ids: Vec<&str> = all.items.iter().map(|o| o.id.as_str()).collect();
        assert_eq!(
            ids,
            vec![other.id.as_str(), big.id.as_str(), created.id.as_str()]
        );
        assert_eq!(all.next_cursor, None);
        let counts = all.items[2].moves;
        assert_eq!(
            counts,
            MoveCounts {
                total: 3,
                pending: 1,
                in_progress: 1,
                done: 1,
                failed: 0,
                cancelled: 0
            }
        );
        assert_eq!(all.items[1].moves.total, 450);
        let first = store
            .operations(&OperationQuery {
                limit: 2,
                ..OperationQuery::default()
            })
            .await
            .unwrap();
        assert_eq!(first.items.len(), 2);
        let rest = store
            .operations(&OperationQuery {
                limit: 2,
                cursor: first.next_cursor,
                ..OperationQuery::default()
            })
            .await
            .unwrap();
        assert_eq!(rest.items.len(), 1);
        assert_eq!(rest.items[0].id, created.id);
        assert_eq!(rest.next_cursor, None);
        for (q, want) in [
            (
                OperationQuery {
                    cluster: Some("c2".into()),
                    ..OperationQuery::default()
                },
                vec![other.id.clone()],
            ),
            (
                OperationQuery {
                    state: Some(OperationState::Pending),
                    ..OperationQuery::default()
                },
                vec![big.id.clone(), created.id.clone()],
            ),
            (
                OperationQuery {
                    kind: Some(OperationKind::RemoveInstance),
                    cluster: Some("c1".into()),
                    ..OperationQuery::default()
                },
                vec![],
            ),
        ] {
            let got = store
                .operations(&OperationQuery { limit: 10, ..q })
                .await
                .unwrap();
            assert_eq!(
                got.items.into_iter().map(|o| o.id).collect::<Vec<_>>(),
                want
            );
        }
    })
    .await;
}

#[tokio::test]
async fn state_change_is_compare_and_set() {
    each_backend(async |db| {
        let store = db.connect().await;
        let op = store
            .create_operation(&new_op(
                "c1",
                OperationKind::Rebalance,
                &[("t", "a", "b")],
                10,
            ))
            .await
            .unwrap();
        use OperationState::*;
        // Wrong `from`: refused, nothing changes, nothing recorded.
        assert!(
            !store
                .set_operation_state(&op.id, &[Running], Succeeded, None, 20)
                .await
                .unwrap()
        );
        assert!(
            !store
                .set_operation_state(&op.id, &[], Running, None, 20)
                .await
                .unwrap()
        );
        assert!(
            !store
                .set_operation_state("missing", &[Pending], Running, None, 20)
                .await
                .unwrap()
        );
        let got = store.operation(&op.id).await.unwrap().unwrap();
        assert_eq!(
            (got.state, got.started_at_ms, got.updated_at_ms),
            (Pending, None, 10)
        );

        assert!(
            store
                .set_operation_state(&op.id, &[Proposed, Pending], Running, None, 30)
                .await
                .unwrap()
        );
        // A second replica racing for the same transition loses.
        assert!(
            !store
                .set_operation_state(&op.id, &[Proposed, Pending], Running, None, 31)
                .await
                .unwrap()
        );
        let got = store.operation(&op.id).await.unwrap().unwrap();
        assert_eq!(
            (got.state, got.started_at_ms, got.finished_at_ms),
            (Running, Some(30), None)
        );

        assert!(
            store
                .set_operation_state(&op.id, &[Running], Failed, Some("boom"), 40)
                .await
                .unwrap()
        );
        let got = store.operation(&op.id).await.unwrap().unwrap();
        assert_eq!(got.state, Failed);
        assert_eq!(got.started_at_ms, Some(30));
        assert_eq!(got.finished_at_ms, Some(40));
        assert_eq!(got.error.as_deref(), Some("boom"));

        // A retry: back to running keeps the first start and clears the end and the error.
        assert!(
            store
                .set_operation_state(&op.id, &[Failed], Running, None, 50)
                .await
                .unwrap()
        );
        let got = store.operation(&op.id).await.unwrap().unwrap();
        assert_eq!(
            (got.started_at_ms, got.finished_at_ms, got.error),
            (Some(30), None, None)
        );

        let page = store
            .history(&HistoryQuery {
                kind: Some(HistoryKind::Operation),
                ..query(10)
            })
            .await
            .unwrap();
        let events: Vec<_> = page
            .items
            .iter()
            .map(|e| e.event.clone().unwrap())
            .collect();
        assert_eq!(events, vec!["running", "failed", "running", "created"]);
        assert_eq!(page.items[1].detail.as_deref(), Some("boom"));
    })
    .await;
}

#[tokio::test]
async fn cancel_keeps_done_moves_and_cancels_pending() {
    each_backend(async |db| {
        let store = db.connect().await;
        let moves = [
            ("t1", "a", "b"),
            ("t2", "a", "b"),
            ("t3", "a", "b"),
            ("t4", "a", "b"),
        ];
        let op = store
            .create_operation(&new_op("c1", OperationKind::Rebalance, &moves, 10))
            .await
            .unwrap();
        use OperationState::*;
        assert!(
            store
                .set_operation_state(&op.id, &[Pending], Running, None, 20)
                .await
                .unwrap()
        );
        store
            .update_move(&op.id, 1, MoveState::Done, 1, None, 21)
            .await
            .unwrap();
        store
            .update_move(&op.id, 2, MoveState::Failed, 3, Some("timeout"), 22)
            .await
            .unwrap();
        store
            .update_move(&op.id, 3, MoveState::InProgress, 1, None, 23)
            .await
            .unwrap();

        assert!(store.cancel_operation(&op.id, "bob", 30).await.unwrap());
        assert!(
            !store.cancel_operation(&op.id, "bob", 31).await.unwrap(),
            "already final"
        );
        assert!(!store.cancel_operation("missing", "bob", 31).await.unwrap());

        let got = store.operation(&op.id).await.unwrap().unwrap();
        assert_eq!(got.state, Cancelled);
        assert_eq!(got.finished_at_ms, Some(30));
        let states: Vec<_> = got.moves.iter().map(|m| m.state).collect();
        assert_eq!(
            states,
            vec![
                MoveState::Done,
                MoveState::Failed,
                MoveState::InProgress,
                MoveState::Cancelled
            ]
        );
        assert_eq!(got.moves[0].finished_at_ms, Some(21));
        assert_eq!(got.moves[1].error.as_deref(), Some("timeout"));
        assert_eq!(got.moves[1].attempts, 3);
        assert_eq!(got.moves[2].started_at_ms, Some(23));
        assert_eq!(got.moves[3].finished_at_ms, Some(30));

        let page = store
            .history(&HistoryQuery {
                kind: Some(HistoryKind::Operation),
                ..query(1)
            })
            .await
            .unwrap();
        assert_eq!(page.items[0].event.as_deref(), Some("cancelled"));
        assert_eq!(page.items[0].actor.as_deref(), Some("bob"));

        // Cancelling from a final state is refused.
        let done = store
            .create_operation(&new_op("c1", OperationKind::Rebalance, &[], 40))
            .await
            .unwrap();
        assert!(
            store
                .set_operation_state(&done.id, &[Pending], Succeeded, None, 41)
                .await
                .unwrap()
        );
        assert!(!store.cancel_operation(&done.id, "bob", 42).await.unwrap());
        assert_eq!(
            store.operation(&done.id).await.unwrap().unwrap().state,
            Succeeded
        );

        assert!(matches!(
            store
                .update_move(&op.id, 99, MoveState::Done, 1, None, 50)
                .await,
            Err(StoreError::NotFound(_))
        ));
    })
    .await;
}

#[tokio::test]
async fn unfinished_operations_survive_restart() {
    each_backend(async |db| {
        let store = db.connect().await;
        use OperationState::*;
        let finished = store
            .create_operation(&new_op(
                "c1",
                OperationKind::Rebalance,
                &[("t0", "a", "b")],
                5,
            ))
            .await
            .unwrap();
        assert!(
            store
                .set_operation_state(&finished.id, &[Pending], Succeeded, None, 6)
                .await
                .unwrap()
        );
        let running = store
            .create_operation(&new_op(
                "c1",
                OperationKind::Rebalance,
                &[("t1", "a", "b"), ("t2", "a", "c")],
                10,
            ))
            .await
            .unwrap();
        assert!(
            store
                .set_operation_state(&running.id, &[Pending], Running, None, 11)
                .await
                .unwrap()
        );
        store
            .update_move(&running.id, 1, MoveState::Done, 1, None, 12)
            .await
            .unwrap();
        store
            .update_move(
                &running.id,
                2,
                MoveState::InProgress,
                2,
                Some("retrying"),
                13,
            )
            .await
            .unwrap();
        let mut proposed = new_op("c2", OperationKind::RemoveInstance, &[], 20);
        proposed.state = Proposed;
        let proposed = store.create_operation(&proposed).await.unwrap();
        store.close().await;
        drop(store);

        // "Restart": a new process opens the same database.
        let store = db.connect().await;
        let open = store.unfinished_operations().await.unwrap();
        assert_eq!(
            open.iter()
                .map(|o| (o.id.as_str(), o.state))
                .collect::<Vec<_>>(),
            vec![
                (running.id.as_str(), Running),
                (proposed.id.as_str(), Proposed)
            ]
        );
        let moves: Vec<_> = open[0]
            .moves
            .iter()
            .map(|m| (m.seq, m.state, m.attempts))
            .collect();
        assert_eq!(
            moves,
            vec![(1, MoveState::Done, 1), (2, MoveState::InProgress, 2)]
        );
        assert_eq!(open[0].moves[1].error.as_deref(), Some("retrying"));
        assert!(open[1].moves.is_empty());
    })
    .await;
}

#[tokio::test]
async fn phase_marker_persists() {
    each_backend(async |db| {
        let store = db.connect().await;
        let op = store
            .create_operation(&new_op("c1", OperationKind::RemoveInstance, &[], 10))
            .await
            .unwrap();
        assert_eq!(op.phase, None);
        for (i, phase) in ["cordoned", "drained", "webhook_called"].iter().enumerate() {
            store
                .set_operation_phase(&op.id, phase, 20 + i as i64)
                .await
                .unwrap();
        }
        assert!(matches!(
            store.set_operation_phase("missing", "drained", 30).await,
            Err(StoreError::NotFound(_))
        ));
        drop(store);
        let store = db.connect().await;
        let got = store.operation(&op.id).await.unwrap().unwrap();
        assert_eq!(got.phase.as_deref(), Some("webhook_called"));
        assert_eq!(got.updated_at_ms, 22);
        assert_eq!(
            store.unfinished_operations().await.unwrap()[0]
                .phase
                .as_deref(),
            Some("webhook_called")
        );
        let page = store
            .history(&HistoryQuery {
                instance: Some("pod-0".into()),
                ..query(10)
            })
            .await
            .unwrap();
        let details: Vec<_> = page
            .items
            .iter()
            .filter(|e| e.event.as_deref() == Some("phase"))
            .map(|e| e.detail.clone().unwrap())
            .collect();
        assert_eq!(details, vec!["webhook_called", "drained", "cordoned"]);
    })
    .await;
}

#[tokio::test]
async fn cordons_set_unset_list_and_record_events() {
    each_backend(async |db| {
        let store = db.connect().await;
        assert!(
            store
                .set_cordon("c1", "pod-b", true, "alice", 10)
                .await
                .unwrap()
        );
        assert!(
            store
                .set_cordon("c1", "pod-a", true, "alice", 11)
                .await
                .unwrap()
        );
        assert!(
            !store
                .set_cordon("c1", "pod-a", true, "bob", 12)
                .await
                .unwrap(),
            "already"
        );
        assert!(
            store
                .set_cordon("c2", "pod-a", true, "alice", 13)
                .await
                .unwrap()
        );
        assert_eq!(store.cordons("c1").await.unwrap(), vec!["pod-a", "pod-b"]);
        assert!(
            store
                .set_cordon("c1", "pod-b", false, "bob", 14)
                .await
                .unwrap()
        );
        assert!(
            !store
                .set_cordon("c1", "pod-b", false, "bob", 15)
                .await
                .unwrap(),
            "already"
        );
        assert_eq!(store.cordons("c1").await.unwrap(), vec!["pod-a"]);
        assert_eq!(store.cordons("c2").await.unwrap(), vec!["pod-a"]);
        assert!(store.cordons("c3").await.unwrap().is_empty());
        drop(store);

        let store = db.connect().await;
        assert_eq!(store.cordons("c1").await.unwrap(), vec!["pod-a"]);
        let page = store
            .history(&HistoryQuery {
                cluster: Some("c1".into()),
                kind: Some(HistoryKind::Instance),
                ..query(10)
            })
            .await
            .unwrap();
        let got: Vec<_> = page
            .items
            .iter()
            .map(|e| {
                (
                    e.instance.clone().unwrap(),
                    e.event.clone().unwrap(),
                    e.actor.clone().unwrap(),
                    e.at_ms,
                )
            })
            .collect();
        let want = [
            ("pod-b", InstanceEventKind::Uncordoned, "bob", 14),
            ("pod-a", InstanceEventKind::Cordoned, "alice", 11),
            ("pod-b", InstanceEventKind::Cordoned, "alice", 10),
        ]
        .map(|(i, k, a, t)| (i.to_owned(), k.as_str().to_owned(), a.to_owned(), t));
        assert_eq!(got, want.to_vec());
    })
    .await;
}

#[tokio::test]
async fn prune_removes_old_history_and_finished_operations() {
    each_backend(async |db| {
        let store = db.connect().await;
        use OperationState::*;
        for at in [100, 200, 300] {
            store
                .record_ownership(&change("t", None, Some("a"), at))
                .await
                .unwrap();
        }
        let old_done = store
            .create_operation(&new_op(
                "c1",
                OperationKind::Rebalance,
                &[("t", "a", "b")],
                50,
            ))
            .await
            .unwrap();
        assert!(
            store
                .set_operation_state(&old_done.id, &[Pending], Succeeded, None, 150)
                .await
                .unwrap()
        );
        let old_running = store
            .create_operation(&new_op(
                "c1",
                OperationKind::Rebalance,
                &[("t", "a", "b")],
                60,
            ))
            .await
            .unwrap();
        assert!(
            store
                .set_operation_state(&old_running.id, &[Pending], Running, None, 160)
                .await
                .unwrap()
        );
        let new_done = store
            .create_operation(&new_op("c1", OperationKind::Rebalance, &[], 260))
            .await
            .unwrap();
        assert!(
            store
                .set_operation_state(&new_done.id, &[Pending], Succeeded, None, 270)
                .await
                .unwrap()
        );

        // History before 250: ownership at 100 and 200; op entries at 50, 60, 150, 160.
        // Operations: old_done (finished at 150).
        assert_eq!(store.prune(250).await.unwrap(), 4 + 2 + 1);
        assert_eq!(store.operation(&old_done.id).await.unwrap(), None);
        let left = store.operation(&old_running.id).await.unwrap().unwrap();
        assert_eq!(
            left.moves.len(),
            1,
            "unfinished operations are kept whatever their age"
        );
        assert!(store.operation(&new_done.id).await.unwrap().is_some());
        let remaining: Vec<i64> = store
            .history(&query(100))
            .await
            .unwrap()
            .items
            .iter()
            .map(|e| e.at_ms)
            .collect();
        assert_eq!(remaining, vec![270, 260, 300]);
        let orphans: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM moves WHERE operation_id = $1")
            .bind(old_done.id.as_str())
            .fetch_one(store.pool())
            .await
            .unwrap();
        assert_eq!(orphans, 0);
        assert_eq!(store.prune(250).await.unwrap(), 0);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_replicas_agree() {
    each_backend(async |db| {
        // Two "replicas": two pools on the same database.
        let a = db.connect().await;
        let b = db.connect().await;
        let op = a
            .create_operation(&new_op(
                "c1",
                OperationKind::Rebalance,
                &[("t", "x", "y")],
                1,
            ))
            .await
            .unwrap();
        let c = change("t", Some("x"), Some("y"), 5);
        let mut tasks = Vec::new();
        for i in 0..16 {
            let store = if i % 2 == 0 { a.clone() } else { b.clone() };
            let (id, c) = (op.id.clone(), c.clone());
            tasks.push(tokio::spawn(async move {
                let ran = store
                    .set_operation_state(
                        &id,
                        &[OperationState::Pending],
                        OperationState::Running,
                        None,
                        10 + i,
                    )
                    .await
                    .unwrap();
                let recorded = store.record_ownership(&c).await.unwrap();
                let cordoned = store
                    .set_cordon("c1", "x", true, "r", 10 + i)
                    .await
                    .unwrap();
                (ran, recorded, cordoned)
            }));
        }
        let mut wins = (0, 0, 0);
        for t in tasks {
            let (ran, recorded, cordoned) = t.await.unwrap();
            wins.0 += usize::from(ran);
            wins.1 += usize::from(recorded);
            wins.2 += usize::from(cordoned);
        }
        assert_eq!(wins, (1, 1, 1));
        let page = b.history(&query(100)).await.unwrap();
        // created + running + one ownership change + one cordon event.
        assert_eq!(page.items.len(), 4);
    })
    .await;
}

fn scope<'a>(principal: &'a str, path: &'a str, key: &'a str) -> KeyScope<'a> {
    KeyScope {
        principal,
        method: "POST",
        path,
        key,
    }
}

fn stored(status: u16) -> StoredResponse {
    StoredResponse {
        status,
        headers: vec![
            ("content-type".into(), "application/json".into()),
            ("location".into(), "/api/v1/operations/x".into()),
        ],
        // Not UTF-8: the body is stored as bytes.
        body: vec![b'{', 0xff, 0x00, b'}'],
    }
}

#[tokio::test]
async fn idempotency_keys_claim_complete_replay_and_refuse_another_body() {
    each_backend(async |db| {
        let store = db.connect().await;
        let k = scope("otto", "/api/v1/clusters/c/rebalance", "k1");
        let Claim::Claimed(id) = store
            .claim_idempotency_key(&k, "fp1", 1_000, 9_000, 0)
            .await
            .unwrap()
        else {
            panic!("a new key is claimed");
        };
        // While it runs: the same body waits, another body is refused.
        let again = store.claim_idempotency_key(&k, "fp1", 1_001, 9_001, 0);
        assert_eq!(again.await.unwrap(), Claim::InFlight);
        let other = store.claim_idempotency_key(&k, "fp2", 1_002, 9_002, 0);
        assert_eq!(other.await.unwrap(), Claim::Mismatch);
        let rec = store.idempotency_key(&k, 1_003).await.unwrap().unwrap();
        assert_eq!(
            (
                rec.fingerprint.as_str(),
                rec.claimed_at_ms,
                rec.expires_at_ms
            ),
            ("fp1", 1_000, 9_000)
        );
        assert_eq!(rec.response, None);

        assert!(
            store
                .complete_idempotency_key(&k, &id, &stored(202), 1_100)
                .await
                .unwrap()
        );
        // Completing twice does nothing.
        assert!(
            !store
                .complete_idempotency_key(&k, &id, &stored(200), 1_101)
                .await
                .unwrap()
        );
        let replay = store.claim_idempotency_key(&k, "fp1", 2_000, 10_000, 0);
        assert_eq!(replay.await.unwrap(), Claim::Replay(stored(202)));
        let other = store.claim_idempotency_key(&k, "fp2", 2_001, 10_001, 0);
        assert_eq!(other.await.unwrap(), Claim::Mismatch);
        let rec = store.idempotency_key(&k, 2_002).await.unwrap().unwrap();
        assert_eq!(rec.response, Some(stored(202)));

        // The same key from another caller, or for another path, is another key.
        for k2 in [
            scope("ada", "/api/v1/clusters/c/rebalance", "k1"),
            scope("otto", "/api/v1/clusters/d/rebalance", "k1"),
        ] {
            let c = store.claim_idempotency_key(&k2, "fp2", 2_003, 10_003, 0);
            assert!(matches!(c.await.unwrap(), Claim::Claimed(_)), "{k2:?}");
        }
        db_rows(&store, 3).await;
    })
    .await;
}

#[tokio::test]
async fn idempotency_keys_release_stale_takeover_and_expiry() {
    each_backend(async |db| {
        let store = db.connect().await;
        let k = scope("otto", "/p", "k");
        // Released: the next request runs.
        let Claim::Claimed(id) = store
            .claim_idempotency_key(&k, "fp", 1_000, 5_000, 0)
            .await
            .unwrap()
        else {
            panic!("claimed");
        };
        assert!(store.release_idempotency_key(&k, &id).await.unwrap());
        assert!(!store.release_idempotency_key(&k, &id).await.unwrap());
        assert_eq!(store.idempotency_key(&k, 1_001).await.unwrap(), None);
        let Claim::Claimed(first) = store
            .claim_idempotency_key(&k, "fp", 1_000, 5_000, 0)
            .await
            .unwrap()
        else {
            panic!("claimed again");
        };
        // A claim made before the stale cut-off is taken over; the old holder can no longer
        // complete or release it.
        let fresh = store.claim_idempotency_key(&k, "fp", 1_400, 5_400, 1_000);
        assert_eq!(fresh.await.unwrap(), Claim::InFlight);
        let Claim::Claimed(second) = store
            .claim_idempotency_key(&k, "fp", 1_500, 5_500, 1_001)
            .await
            .unwrap()
        else {
            panic!("taken over");
        };
        assert_ne!(first, second);
        assert!(
            !store
                .complete_idempotency_key(&k, &first, &stored(202), 1_600)
                .await
                .unwrap()
        );
        assert!(!store.release_idempotency_key(&k, &first).await.unwrap());
        assert!(
            store
                .complete_idempotency_key(&k, &second, &stored(202), 1_600)
                .await
                .unwrap()
        );
        // A completed key is never stale.
        let replay = store.claim_idempotency_key(&k, "fp", 1_700, 5_700, 1_700);
        assert_eq!(replay.await.unwrap(), Claim::Replay(stored(202)));

        // Expiry: invisible at its time, purged (every expired key) by the next claim.
        let other = scope("otto", "/p", "other");
        let c = store.claim_idempotency_key(&other, "fp", 1_800, 5_000, 0);
        assert!(matches!(c.await.unwrap(), Claim::Claimed(_)));
        db_rows(&store, 2).await;
        assert_eq!(store.idempotency_key(&k, 5_500).await.unwrap(), None);
        let c = store.claim_idempotency_key(&k, "fp2", 5_500, 9_000, 0);
        assert!(matches!(c.await.unwrap(), Claim::Claimed(_)), "a new key");
        db_rows(&store, 1).await;
    })
    .await;
}

#[tokio::test]
async fn idempotency_key_claims_race_between_replicas() {
    each_backend(async |db| {
        let (a, b) = (db.connect().await, db.connect().await);
        let mut tasks = Vec::new();
        for i in 0..16 {
            let store = if i % 2 == 0 { a.clone() } else { b.clone() };
            tasks.push(tokio::spawn(async move {
                let k = scope("otto", "/p", "raced");
                store
                    .claim_idempotency_key(&k, "fp", 100 + i, 10_000, 0)
                    .await
                    .unwrap()
            }));
        }
        let mut claimed = 0;
        for t in tasks {
            match t.await.unwrap() {
                Claim::Claimed(_) => claimed += 1,
                other => assert_eq!(other, Claim::InFlight),
            }
        }
        assert_eq!(claimed, 1);
    })
    .await;
}

/// Asserts how many idempotency rows the database holds (expired ones included).
async fn db_rows(store: &Store, want: i64) {
    let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM idempotency_keys")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(n, want);
}

/// The cluster at a moment: per target its last change at or before it (the moment itself
/// included), per instance its presence, cordon and leadership then, per operation its last
/// step; other clusters and later rows are not seen, and how far back history reaches is told.
#[tokio::test]
async fn as_of_is_the_last_recorded_change_at_or_before_the_moment() {
    each_backend(async |db| {
        let store = db.connect().await;
        let moved = |target: &str, from: Option<&str>, to: Option<&str>, at_ms| OwnershipChange {
            cause: Cause::Initial,
            ..change(target, from, to, at_ms)
        };
        store
            .record_ownerships(&[
                moved("a", None, Some("m-0"), 1_000),
                moved("b", None, Some("m-0"), 1_000),
                moved("a", Some("m-0"), Some("m-1"), 2_000),
                moved("b", Some("m-0"), None, 3_000),
                moved("c", None, Some("m-1"), 4_000),
                OwnershipChange {
                    cluster: "other".into(),
                    ..moved("a", None, Some("x-0"), 1_500)
                },
            ])
            .await
            .unwrap();
        let event = |instance: &str, kind, at_ms| InstanceEvent {
            cluster: "c1".into(),
            instance: instance.into(),
            kind,
            at_ms,
            detail: None,
        };
        for e in [
            event("m-0", InstanceEventKind::Joined, 500),
            event("m-0", InstanceEventKind::Ready, 600),
            event("m-0", InstanceEventKind::LeaderGained, 700),
            event("m-1", InstanceEventKind::Joined, 1_500),
            event("m-0", InstanceEventKind::Left, 2_500),
            event("m-1", InstanceEventKind::LeaderGained, 2_600),
        ] {
            store.record_instance_event(&e).await.unwrap();
        }
        store
            .set_cordon("c1", "m-1", true, "alice", 1_800)
            .await
            .unwrap();
        store
            .set_cordon("c1", "m-1", false, "alice", 3_500)
            .await
            .unwrap();
        let op = store
            .create_operation(&new_op("c1", OperationKind::Rebalance, &[], 1_900))
            .await
            .unwrap();
        store
            .set_operation_state(
                &op.id,
                &[OperationState::Pending],
                OperationState::Running,
                None,
                1_950,
            )
            .await
            .unwrap();
        store
            .set_operation_state(
                &op.id,
                &[OperationState::Running],
                OperationState::Succeeded,
                None,
                2_100,
            )
            .await
            .unwrap();

        let holders = |targets: &[HistoryEntry]| -> Vec<(String, Option<String>, i64)> {
            targets
                .iter()
                .map(|e| (e.target.clone().unwrap(), e.to.clone(), e.at_ms))
                .collect()
        };
        let own = |t: &str, to: Option<&str>, at: i64| (t.to_owned(), to.map(Into::into), at);

        // Before anything: nothing, but how far history reaches.
        let before = store.as_of("c1", 100).await.unwrap();
        assert!(before.targets.is_empty() && before.instances().is_empty());
        assert_eq!(before.kept_from_ms, Some(500));
        // At the first placement itself (inclusive), and another cluster's a not seen.
        let first = store.as_of("c1", 1_000).await.unwrap();
        assert_eq!(
            holders(&first.targets),
            [own("a", Some("m-0"), 1_000), own("b", Some("m-0"), 1_000)]
        );
        let m0 = &first.instances()[0];
        assert_eq!(m0.instance, "m-0");
        assert_eq!(m0.presence, Some((InstanceEventKind::Ready, 600)));
        assert!(m0.leader && !m0.cordoned);
        // Mid-way: a moved, m-0 gone, m-1 cordoned and leader, the operation under way.
        let mid = store.as_of("c1", 2_700).await.unwrap();
        assert_eq!(
            holders(&mid.targets),
            [own("a", Some("m-1"), 2_000), own("b", Some("m-0"), 1_000)]
        );
        let inst = mid.instances();
        assert_eq!(inst.len(), 2);
        assert_eq!(inst[0].presence, Some((InstanceEventKind::Left, 2_500)));
        assert!(!inst[0].leader);
        assert!(inst[1].cordoned && inst[1].leader);
        assert_eq!(mid.operations.len(), 1);
        assert_eq!(mid.operations[0].event.as_deref(), Some("succeeded"));
        let early = store.as_of("c1", 1_960).await.unwrap();
        assert_eq!(early.operations[0].event.as_deref(), Some("running"));
        // Later: b released, c placed, m-1 uncordoned.
        let late = store.as_of("c1", 10_000).await.unwrap();
        assert_eq!(
            holders(&late.targets),
            [
                own("a", Some("m-1"), 2_000),
                own("b", None, 3_000),
                own("c", Some("m-1"), 4_000)
            ]
        );
        assert!(!late.instances()[1].cordoned);
        // Another cluster, and one with no history at all.
        let other = store.as_of("other", 10_000).await.unwrap();
        assert_eq!(holders(&other.targets), [own("a", Some("x-0"), 1_500)]);
        let none = store.as_of("nope", 10_000).await.unwrap();
        assert!(none.targets.is_empty() && none.kept_from_ms.is_none());

        // The operation's whole lifecycle, with its kind; an unknown one is absent.
        let life = store.lifecycles(&[&op.id, "nope"]).await.unwrap();
        assert_eq!(life.len(), 1);
        let (kind, steps, moved) = &life[&op.id];
        assert_eq!(*kind, Some(OperationKind::Rebalance));
        assert_eq!(*moved, 0, "it moved nothing");
        let words: Vec<_> = steps.iter().map(|e| e.event.clone().unwrap()).collect();
        assert_eq!(words, ["created", "running", "succeeded"]);
    })
    .await;
}
