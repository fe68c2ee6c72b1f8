//! Kubeconfigs for ServiceAccounts, with tokens from the TokenRequest API, so a process under
//! test is authorised (and classified by API Priority and Fairness) as the account the
//! manifests give it, not as the admin, whom priority and fairness exempt.
//!
//! [`Accounts::for_test`] gives a test's members and control plane the accounts `deploy/`
//! makes for them — on the real tier: the control plane as `leasehold/leasehold` with
//! `deploy/base`'s RBAC and the `deploy/managed-namespace` Role in the test's namespaces, the
//! members as the `worker-pool` example's `worker` account — so the engine, agent and fault
//! tests exercise the shipped permissions, and API Priority and Fairness applies to them. On
//! the simulator (no RBAC) both are the admin.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::Api;
use serde_json::{Value, json};

use super::eventually;

/// The repository's root (for `deploy/`).
fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `kubectl apply` of `yaml`, retried: tests side by side apply the same cluster-wide objects
/// (`deploy/base`'s namespace, ServiceAccount and ClusterRoles), and one may meet the other's
/// write (a 409).
async fn apply(t: &super::TestSim, yaml: &str) {
    let mut last = String::new();
    for _ in 0..10 {
        let out = t.kubectl_stdin(&["apply", "-f", "-"], yaml).await;
        if out.status.success() {
            return;
        }
        last = String::from_utf8_lossy(&out.stderr).into_owned();
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("kubectl apply: {last}\n{yaml}");
}

/// The documents of a manifest file of `deploy/`.
fn manifests(path: &str) -> Vec<String> {
    let text = std::fs::read_to_string(repo().join(path))
        .unwrap_or_else(|e| panic!("reading {path}: {e}"));
    text.split("\n---\n").map(str::to_owned).collect()
}

/// The API clients (and kubeconfigs, for processes) a test's members and control plane use.
pub struct Accounts {
    pub member: kube::Client,
    pub member_kubeconfig: PathBuf,
    pub control_plane: kube::Client,
    pub control_plane_kubeconfig: PathBuf,
    /// Holds the kubeconfigs (real tier).
    _dir: Option<tempfile::TempDir>,
}

impl Accounts {
    /// The accounts for a test whose cluster lives in `ns` (target Leases, pods, the control
    /// plane's own Lease — the tests keep it there) and its member Leases in `member_ns`.
    /// `secrets`: Secrets of `ns` the control plane may read (a removal webhook's credentials,
    /// as `deploy/examples/mmr` grants its own).
    pub async fn for_test(t: &super::TestSim, ns: &str, member_ns: &str, secrets: &[&str]) -> Self {
        if !t.is_real() {
            return Accounts {
                member: t.client.clone(),
                member_kubeconfig: t.kubeconfig.clone(),
                control_plane: t.client.clone(),
                control_plane_kubeconfig: t.kubeconfig.clone(),
                _dir: None,
            };
        }
        // The control plane's namespace, ServiceAccount, cluster-wide RBAC and API Priority and
        // Fairness objects, as deploy/base.
        for f in ["namespace.yaml", "serviceaccount.yaml", "flowcontrol.yaml"] {
            apply(
                t,
                &std::fs::read_to_string(repo().join("deploy/base").join(f)).unwrap(),
            )
            .await;
        }
        let base = manifests("deploy/base/rbac.yaml");
        apply(t, &base.join("\n---\n")).await;
        // The managed-namespace Role in each namespace of the cluster; the election Role (the
        // control plane's own Lease and its Events) where the tests keep that Lease.
        let mut namespaced = Vec::new();
        let namespaces: Vec<&str> = if member_ns == ns {
            vec![ns]
        } else {
            vec![ns, member_ns]
        };
        for &n in &namespaces {
            for doc in manifests("deploy/managed-namespace/role.yaml") {
                let doc = doc.replace(
                    "metadata:\n  name: leasehold-managed\n",
                    &format!("metadata:\n  name: leasehold-managed\n  namespace: {n}\n"),
                );
                namespaced.push(doc);
            }
        }
        for doc in base
            .iter()
            .filter(|d| d.contains("name: leasehold-election"))
        {
            let doc = doc.replace(
                "  name: leasehold-election\n  namespace: leasehold\n",
                &format!("  name: leasehold-election\n  namespace: {ns}\n"),
            );
            namespaced.push(doc);
        }
        if !secrets.is_empty() {
            namespaced.push(format!(
                "apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: leasehold-secrets, namespace: {ns}}}
rules:
- {{apiGroups: [''], resources: [secrets], resourceNames: {secrets:?}, verbs: [get]}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: leasehold-secrets, namespace: {ns}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: leasehold-secrets}}
subjects: [{{kind: ServiceAccount, name: leasehold, namespace: leasehold}}]"
            ));
        }
        // The members' account: the worker-pool example's, in the cluster's namespace (and the
        // member Leases').
        for &n in &namespaces {
            let rbac =
                std::fs::read_to_string(repo().join("deploy/examples/worker-pool/rbac.yaml"))
                    .unwrap()
                    .replace("namespace: workers", &format!("namespace: {n}"));
            if n != ns {
                // One ServiceAccount, in the cluster's namespace, bound in both.
                let rbac = rbac
                    .split("\n---\n")
                    .filter(|d| !d.contains("kind: ServiceAccount\nmetadata"))
                    .collect::<Vec<_>>()
                    .join("\n---\n")
                    .replace(
                        &format!("name: worker\n    namespace: {n}"),
                        &format!("name: worker\n    namespace: {ns}"),
                    );
                namespaced.push(rbac);
            } else {
                namespaced.push(rbac);
            }
        }
        // The members' FlowSchema (one per member ServiceAccount), as the example's.
        let flow =
            std::fs::read_to_string(repo().join("deploy/examples/worker-pool/flowschema.yaml"))
                .unwrap()
                .replace(
                    "namespaces: [\"workers\"]",
                    &format!("namespaces: {namespaces:?}"),
                )
                .replace("workers", ns);
        namespaced.push(flow);
        apply(t, &namespaced.join("\n---\n")).await;
        let dir = tempfile::tempdir().unwrap();
        let member_kubeconfig = service_account_kubeconfig(t, ns, "worker", dir.path()).await;
        let control_plane_kubeconfig =
            service_account_kubeconfig(t, "leasehold", "leasehold", dir.path()).await;
        Accounts {
            member: client_of(&member_kubeconfig, ns).await,
            member_kubeconfig,
            control_plane: client_of(&control_plane_kubeconfig, ns).await,
            control_plane_kubeconfig,
            _dir: Some(dir),
        }
    }
}

/// A client from the kubeconfig at `path`, defaulting to namespace `ns`: the product's own
/// (`leasehold::k8s::client`, HTTP/2 where the server offers it), as the processes use.
async fn client_of(path: &Path, ns: &str) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(path).expect("kubeconfig");
    let mut cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("config from the kubeconfig");
    cfg.default_namespace = ns.to_owned();
    leasehold::k8s::client::from_config(cfg).expect("client")
}

/// A kubeconfig for ServiceAccount `sa` of `ns` (a token valid for an hour), written in `dir`.
pub async fn service_account_kubeconfig(
    t: &super::TestSim,
    ns: &str,
    sa: &str,
    dir: &Path,
) -> PathBuf {
    let sas: Api<ServiceAccount> = Api::namespaced(t.client.clone(), ns);
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: vec![],
            expiration_seconds: Some(3600),
            ..Default::default()
        },
        ..Default::default()
    };
    let token = eventually(Duration::from_secs(20), || async {
        let answer = sas
            .create_token_request(sa, &Default::default(), &request)
            .await
            .ok()?;
        Some(answer.status?.token)
    })
    .await
    .unwrap_or_else(|| panic!("no token for serviceaccount {ns}/{sa}"));
    let admin: Value = serde_json::from_str(&t.kubeconfig_text()).unwrap();
    let cluster = &admin["clusters"][0]["cluster"];
    let kc = json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "envtest", "cluster": cluster}],
        "users": [{"name": sa, "user": {"token": token}}],
        "contexts": [{"name": sa, "context": {"cluster": "envtest", "user": sa, "namespace": ns}}],
        "current-context": sa,
    });
    let path = dir.join(format!("kubeconfig-{ns}-{sa}"));
    std::fs::write(&path, serde_json::to_vec_pretty(&kc).unwrap()).unwrap();
    path
}
