//! The app under test for router tests (`api.rs`, `ui.rs`, `idempotency.rs`, `metrics.rs`): a real engine
//! watching the simulator (so the model is real; on the real tier as the control plane's
//! ServiceAccount, `accounts`) over namespace [`NS`] with cluster `c` and
//! targets `t-0`…`t-4`, a fresh SQLite history, token-file authentication with viewer /
//! operator / admin users ([`TOKENS`]), and the whole router to call with `oneshot`.

use std::path::Path;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use http_body_util::BodyExt as _;
use leasehold::config::Config;
use leasehold::config::http::AuthSettings;
use leasehold::engine::Engine;
use leasehold::http::auth::Auth;
use leasehold::http::demo::DemoControls;
use leasehold::http::host::AllowedHosts;
use leasehold::http::state::AppState;
use leasehold::http::{self, events::Hub};
use leasehold::model::{OperationKind, OperationState};
use leasehold::store::{NewMove, NewOperation, Store, now_ms};
use serde_json::{Value, json};
use tower::ServiceExt as _;

pub const NS: &str = "apps";

pub const TOKENS: &str = "\
viewer-token,vera,u1,\"leasehold:viewers\"
operator-token,otto,u2,\"leasehold:operators\"
admin-token,ada,u3,\"leasehold:admins\"
nobody-token,nina,u4,\"other\"
";

/// The router with what it needs kept alive.
pub struct App {
    pub router: axum::Router,
    pub engine: Engine,
    /// The namespace of cluster `c`: [`NS`] on the simulator, the test's own on a real apiserver.
    pub ns: String,
    pub t: super::TestSim,
    _dir: tempfile::TempDir,
}

/// Starts the app (token-file auth).
pub async fn app() -> App {
    app_with_tls(false).await
}

/// As [`app`], with the state saying whether it is served over TLS (cookies get `Secure`).
pub async fn app_with_tls(tls: bool) -> App {
    app_configured(tls, false, None).await
}

/// As [`app`], with a control-plane election Lease in [`NS`], so the engine acts (runs its
/// control passes and operations); [`app`]'s engine only observes.
pub async fn app_acting() -> App {
    app_configured(false, true, None).await
}

/// As [`app`], with demo controls (as under `leasehold demo`) whose requests the test serves.
pub async fn app_with_demo(demo: DemoControls) -> App {
    app_configured(false, false, Some(demo)).await
}

async fn app_configured(tls: bool, acting: bool, demo: Option<DemoControls>) -> App {
    let t = super::start().await;
    // The simulator's cluster lives in NS; a real apiserver gives the test a namespace of its
    // own (parallel tests share the apiserver).
    let ns = t.namespace_or(NS).await;
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, TOKENS).unwrap();
    // Not acting: the election Lease in a namespace that does not exist, so this engine never
    // takes it — it only observes (other tests' engines on a shared apiserver are not its
    // rivals either, as they would be for the default Lease in `leasehold`).
    let cp = if acting {
        format!("control_plane: {{namespace: {ns}, lease_duration: 2s}}\n")
    } else {
        format!("control_plane: {{namespace: {ns}-no-control-plane}}\n")
    };
    let yaml = format!(
        "{cp}clusters:
- name: c
  namespace: {ns}
  selector: {{app: c}}
  targets: {{inline: [t-0, t-1, t-2, t-3, t-4]}}
"
    );
    let config = Config::parse(&yaml, Path::new("test.yaml")).unwrap();
    let db = format!("sqlite:{}", dir.path().join("h.db").display());
    let store = Store::connect(&db).await.unwrap();
    // As the control plane's ServiceAccount of `deploy/` on the real tier (the admin on the
    // simulator).
    let accounts = super::accounts::Accounts::for_test(&t, &ns, &ns, &[]).await;
    let engine = Engine::new(config, accounts.control_plane.clone(), store, "cp".into());
    let e = engine.clone();
    tokio::spawn(async move { e.run(std::future::pending()).await });
    let settings: AuthSettings =
        serde_saphyr::from_str(&format!("mode: token\ntoken_file: {}\n", tokens.display()))
            .unwrap();
    let auth = Auth::new(&settings, "127.0.0.1:0".parse().unwrap(), None)
        .await
        .unwrap();
    // Wait for the first synced model whose watches a probe has proven current (until then
    // every decision, plans included, is refused as stale).
    let synced = super::eventually(Duration::from_secs(20), || {
        let engine = engine.clone();
        async move {
            engine
                .view("c")
                .await
                .ok()
                .filter(|v| v.model.synced && !v.model.stale)
                .map(|_| ())
        }
    })
    .await;
    assert!(synced.is_some(), "the model never synced");
    let engine_handle = engine.clone();
    let state = AppState {
        engine,
        auth,
        events: Hub::default(),
        tls,
        demo,
        // As `leasehold serve` listening on 127.0.0.1 with no `http.allowed_hosts`.
        hosts: AllowedHosts::new(&[], "127.0.0.1:8080".parse().unwrap()).unwrap(),
        refusals: Default::default(),
    };
    App {
        router: http::router(state),
        engine: engine_handle,
        ns,
        t,
        _dir: dir,
    }
}

impl App {
    /// Members `c-0` and `c-1` (ready pods, each with a live member Lease an hour long: no agent
    /// renews it here), and `c-0` holding `t-0`…`t-3`: a rebalance has moves to make. Returns once
    /// the plan sees all of it.
    pub async fn imbalance(&self) {
        use k8s_openapi::api::coordination::v1::Lease;
        use k8s_openapi::api::core::v1::Pod;
        use kube::api::{Api, Patch, PatchParams, PostParams};
        use leasehold::model::Cause;
        use leasehold::protocol::{self, Desire};

        let pods: Api<Pod> = Api::namespaced(self.t.client.clone(), &self.ns);
        let leases: Api<Lease> = Api::namespaced(self.t.client.clone(), &self.ns);
        let now = jiff::Timestamp::now();
        for (name, ip) in [("c-0", "10.0.0.10"), ("c-1", "10.0.0.11")] {
            let member = protocol::new_member_lease("leasehold", "c", name, now, 3600, false);
            leases
                .create(&PostParams::default(), &member)
                .await
                .unwrap();
            let pod = serde_json::from_value(super::mk_pod(name, json!({"app": "c"}))).unwrap();
            pods.create(&PostParams::default(), &pod).await.unwrap();
            let status = json!({"status": {"phase": "Running", "podIP": ip,
                "conditions": [{"type": "Ready", "status": "True"}]}});
            pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
                .await
                .unwrap();
        }
        for target in ["t-0", "t-1", "t-2", "t-3"] {
            let desire = Desire {
                overlap_ms: None,
                term: None,
                owner: "c-0".into(),
                cause: Cause::Initial,
                operation: None,
                duration_s: 3600,
            };
            let lease = protocol::new_target_lease("leasehold", "c", target, &desire);
            let lease = protocol::acquired(&lease, "c-0", now, 3600);
            leases.create(&PostParams::default(), &lease).await.unwrap();
        }
        // Settled once the plan sees all four held by c-0 and c-1 able to take targets.
        let settled = super::eventually(Duration::from_secs(10), || async {
            let (s, _, plan) = call(
                self,
                "POST",
                "/api/v1/clusters/c/rebalance",
                Some("operator-token"),
                None,
            )
            .await;
            let load = |m: &str| {
                plan["before"]
                    .as_array()?
                    .iter()
                    .find(|l| l["member"] == m)
                    .map(|l| l["targets"].clone())
            };
            (s == StatusCode::OK && load("c-0")? == 4 && load("c-1")? == 0).then_some(())
        })
        .await;
        assert!(
            settled.is_some(),
            "the plan never saw c-0 holding four targets"
        );
    }

    /// Stores a proposed rebalance of cluster `c` (as the join policy would) with these moves
    /// (target, from, to); its id.
    pub async fn propose(&self, moves: &[(&str, Option<&str>, &str)]) -> String {
        let op = self
            .engine
            .store()
            .create_operation(&NewOperation {
                cluster: "c".into(),
                kind: OperationKind::Rebalance,
                state: OperationState::Proposed,
                requested_by: "policy".into(),
                reason: "member joined: x".into(),
                instance: None,
                params: json!({}),
                moves: moves
                    .iter()
                    .map(|(target, from, to)| NewMove {
                        target: (*target).into(),
                        from: from.map(Into::into),
                        to: (*to).into(),
                    })
                    .collect(),
                now_ms: now_ms(),
            })
            .await
            .unwrap();
        op.id
    }
}

/// One JSON request with an optional bearer token: status, headers, body (JSON, else a string).
pub async fn call(
    app: &App,
    method: &str,
    uri: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> (StatusCode, axum::http::HeaderMap, Value) {
    let mut req = Request::builder().method(method).uri(uri);
    if let Some(t) = token {
        req = req.header(header::AUTHORIZATION, format!("Bearer {t}"));
    }
    let req = match body {
        Some(b) => req
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(b.to_string())),
        None => req.body(Body::empty()),
    }
    .unwrap();
    let res = app.router.clone().oneshot(req).await.unwrap();
    let status = res.status();
    let headers = res.headers().clone();
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    let v = serde_json::from_slice(&bytes)
        .unwrap_or(Value::String(String::from_utf8_lossy(&bytes).into()));
    (status, headers, v)
}
