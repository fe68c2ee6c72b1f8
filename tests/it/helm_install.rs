//! The Helm chart (deploy/helm/leasehold) installed for real on the real cluster tier
//! (`scripts/envtest.sh` with `LEASEHOLD_ENVTEST_CLUSTER=1`: kube-apiserver, etcd, the
//! controllers, the scheduler and kwok's fake nodes; `scripts/test-real.sh helm_install` runs
//! it). Elsewhere it says it skipped.
//!
//! What a user runs, by docs/getting-started.md ("Install with Helm"), with the Helm of
//! `scripts/helm.sh`: the namespace labelled restricted, the worker-pool example, `helm install`
//! (a server-side dry run first), the Deployment rolled out (kwok runs no containers: its pods
//! are accepted by Pod Security, scheduled with their claim bound, and Running and Ready as kwok
//! reports them), `helm test` (its Pod admitted and scheduled; kwok completes only Jobs' pods,
//! so the test plays the kubelet and reports curl's exit 0), `helm upgrade` with changed values
//! (a configuration change rolls the pods; then the HA values), and `helm uninstall`, after
//! which nothing of the release is left, in any namespace or cluster-wide.

use crate::common;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Output;
use std::time::Duration;

use common::eventually;
use serde_json::Value;

/// Set by `scripts/envtest.sh run` when the controllers and kwok run.
const CLUSTER_VAR: &str = "LEASEHOLD_TEST_CLUSTER";
const CHART: &str = "deploy/helm/leasehold";
const NS: &str = "leasehold";
const RELEASE: &str = "leasehold";

/// Returns from the calling test unless the real cluster tier runs.
macro_rules! cluster_tier_only {
    () => {
        if std::env::var(CLUSTER_VAR).as_deref() != Ok("1") {
            eprintln!(
                "SKIPPED: needs the real cluster tier (LEASEHOLD_ENVTEST_CLUSTER=1 scripts/envtest.sh run, \
                 or scripts/test-real.sh helm_install)"
            );
            return;
        }
    };
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Helm, as `scripts/helm.sh` built it; on the cluster tier it must be there.
fn helm_binary() -> PathBuf {
    let out = std::process::Command::new(repo().join("scripts/helm.sh"))
        .arg("path")
        .output()
        .expect("scripts/helm.sh runs");
    assert!(
        out.status.success(),
        "helm is not built ({}): run `scripts/helm.sh build` first",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

struct Helm {
    bin: PathBuf,
    kubeconfig: PathBuf,
    home: tempfile::TempDir,
}

impl Helm {
    fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(&self.bin);
        cmd.args(args)
            .current_dir(repo())
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HELM_CACHE_HOME", self.home.path().join("cache"))
            .env("HELM_CONFIG_HOME", self.home.path().join("config"))
            .env("HELM_DATA_HOME", self.home.path().join("data"))
            .env_remove("KUBERNETES_SERVICE_HOST")
            .kill_on_drop(true);
        cmd
    }

    /// `helm ARGS`, which must succeed within 120 s; its stdout.
    async fn ok(&self, args: &[&str]) -> String {
        let out = tokio::time::timeout(Duration::from_secs(120), self.command(args).output())
            .await
            .unwrap_or_else(|_| panic!("helm {args:?} finishes within 120 s"))
            .expect("helm runs");
        assert!(
            out.status.success(),
            "helm {args:?}:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

async fn kubectl_ok(t: &common::TestSim, args: &[&str]) -> String {
    let out = t.kubectl(args).await;
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout(&out)
}

/// The objects of a release revision's manifest (`helm get manifest`), as (kind, namespace,
/// name).
async fn manifest_objects(helm: &Helm, args: &[&str]) -> BTreeSet<(String, String, String)> {
    let mut all = vec!["get", "manifest", RELEASE, "-n", NS];
    all.extend_from_slice(args);
    let yaml = helm.ok(&all).await;
    serde_saphyr::from_multiple::<Value>(&yaml)
        .expect("the manifest is YAML")
        .into_iter()
        .filter(|o| !o.is_null())
        .map(|o| {
            (
                o["kind"].as_str().unwrap().to_owned(),
                o["metadata"]["namespace"].as_str().unwrap_or("").to_owned(),
                o["metadata"]["name"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// Whether (kind, namespace, name) exists ("" namespace: cluster-scoped).
async fn exists(t: &common::TestSim, (kind, ns, name): &(String, String, String)) -> bool {
    let what = format!("{kind}/{name}");
    let out = if ns.is_empty() {
        t.kubectl(&["get", &what, "-o", "name"]).await
    } else {
        t.kubectl(&["-n", ns, "get", &what, "-o", "name"]).await
    };
    if out.status.success() {
        return true;
    }
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("NotFound") || err.contains("not found"),
        "kubectl get {what}: {err}"
    );
    false
}

/// The Deployment's "available updated replicas", once it has rolled out `replicas` pods of
/// its latest template (as `kubectl rollout status` decides), or a panic with its description.
async fn rolled_out(t: &common::TestSim, replicas: u32) {
    let want = format!("{replicas} {replicas} {replicas} true");
    let done = eventually(Duration::from_secs(180), || async {
        let s = stdout(
            &t.kubectl(&[
                "-n",
                NS,
                "get",
                "deployment",
                RELEASE,
                "-o",
                "jsonpath={.status.updatedReplicas} {.status.availableReplicas} {.status.replicas} \
                 {.status.observedGeneration}={.metadata.generation}",
            ])
            .await,
        );
        // observedGeneration = generation: the controller has seen the latest template.
        let (counts, generations) = s.rsplit_once(' ')?;
        let (observed, generation) = generations.split_once('=')?;
        let current = observed == generation;
        (format!("{counts} {current}") == want).then_some(())
    })
    .await;
    if done.is_none() {
        let describe = t
            .kubectl(&["-n", NS, "describe", "deployment", RELEASE])
            .await;
        let pods = t
            .kubectl(&["-n", NS, "get", "pods,pvc", "-o", "wide"])
            .await;
        panic!(
            "the Deployment did not roll out {replicas} replica(s):\n{}\n{}",
            stdout(&describe),
            stdout(&pods)
        );
    }
}

/// The config hash of the pod template and the names of the Running control-plane pods.
async fn template_and_pods(t: &common::TestSim) -> (String, BTreeSet<String>) {
    let deployment: Value = serde_json::from_str(
        &kubectl_ok(t, &["-n", NS, "get", "deployment", RELEASE, "-o", "json"]).await,
    )
    .expect("the Deployment as JSON");
    let checksum = deployment["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
        .as_str()
        .expect("the pod template's checksum/config")
        .to_owned();
    let pods = kubectl_ok(
        t,
        &[
            "-n",
            NS,
            "get",
            "pods",
            "-l",
            "app.kubernetes.io/component=control-plane",
            "--field-selector=status.phase=Running",
            "-o",
            "jsonpath={range .items[*]}{.metadata.name} {.metadata.deletionTimestamp}{\"\\n\"}{end}",
        ],
    )
    .await
    .lines()
    .filter_map(|l| match l.split_whitespace().collect::<Vec<_>>()[..] {
        [p] => Some(p.to_owned()),
        _ => None,
    })
    .collect();
    (checksum, pods)
}

#[tokio::test]
async fn the_chart_installs_tests_upgrades_and_uninstalls_for_real() {
    cluster_tier_only!();
    let t = common::start().await;
    let helm = Helm {
        bin: helm_binary(),
        kubeconfig: t.kubeconfig.clone(),
        home: tempfile::tempdir().unwrap(),
    };
    // As docs/getting-started.md: the release namespace, labelled restricted (every pod of the
    // chart, the test's too, must pass that profile), and the worker-pool example, whose
    // namespace the default values manage.
    let ns_yaml = kubectl_ok(
        &t,
        &["create", "namespace", NS, "--dry-run=client", "-o", "yaml"],
    )
    .await;
    let out = t.kubectl_stdin(&["apply", "-f", "-"], &ns_yaml).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    kubectl_ok(
        &t,
        &[
            "label",
            "namespace",
            NS,
            "pod-security.kubernetes.io/enforce=restricted",
            "--overwrite",
        ],
    )
    .await;
    let example = repo().join("deploy/examples/worker-pool");
    kubectl_ok(&t, &["apply", "-k", example.to_str().unwrap()]).await;

    helm.ok(&[
        "install",
        RELEASE,
        CHART,
        "--namespace",
        NS,
        "--dry-run=server",
    ])
    .await;
    helm.ok(&["install", RELEASE, CHART, "--namespace", NS])
        .await;
    rolled_out(&t, 1).await;
    let installed = manifest_objects(&helm, &[]).await;
    let kinds: BTreeSet<&str> = installed.iter().map(|(k, _, _)| k.as_str()).collect();
    for kind in [
        "ServiceAccount",
        "ConfigMap",
        "PersistentVolumeClaim",
        "Deployment",
        "Service",
        "PodDisruptionBudget",
        "NetworkPolicy",
        "Role",
        "RoleBinding",
        "ClusterRole",
        "ClusterRoleBinding",
        "PriorityLevelConfiguration",
        "FlowSchema",
    ] {
        assert!(
            kinds.contains(kind),
            "the release has a {kind}: {installed:?}"
        );
    }
    for o in &installed {
        assert!(exists(&t, o).await, "{o:?} of the release exists");
    }
    let bound = kubectl_ok(
        &t,
        &[
            "-n",
            NS,
            "get",
            "pvc",
            "leasehold-data",
            "-o",
            "jsonpath={.status.phase}",
        ],
    )
    .await;
    assert_eq!(bound, "Bound", "the SQLite claim is bound");
    let status: Value =
        serde_json::from_str(&helm.ok(&["status", RELEASE, "-n", NS, "-o", "json"]).await).unwrap();
    assert_eq!(status["info"]["status"], "deployed", "{status}");

    // helm test: its Pod is created, admitted under the restricted profile and scheduled;
    // kwok leaves it Running (it completes Jobs' pods only), so the test reports what the
    // kubelet would once curl exited 0, and helm reads it.
    let test = helm
        .command(&["test", RELEASE, "-n", NS, "--timeout", "120s"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("helm test runs");
    let pod = "leasehold-test-readyz";
    let node = eventually(Duration::from_secs(90), || async {
        let s = stdout(
            &t.kubectl(&[
                "-n",
                NS,
                "get",
                "pod",
                pod,
                "-o",
                "jsonpath={.status.phase} {.spec.nodeName}",
            ])
            .await,
        );
        match s.split_whitespace().collect::<Vec<_>>()[..] {
            ["Running", node] => Some(node.to_owned()),
            _ => None,
        }
    })
    .await;
    let Some(node) = node else {
        let describe = t.kubectl(&["-n", NS, "describe", "pod", pod]).await;
        panic!("the helm test Pod never ran: {}", stdout(&describe));
    };
    let now = jiff::Timestamp::now()
        .round(jiff::Unit::Second)
        .unwrap()
        .to_string();
    let patch = serde_json::json!({"status": {
        "phase": "Succeeded",
        "containerStatuses": [{
            "name": "readyz", "image": "curlimages/curl:8.11.1", "imageID": "", "ready": false,
            "restartCount": 0, "started": false,
            "state": {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": now, "finishedAt": now}}
        }]
    }});
    kubectl_ok(
        &t,
        &[
            "-n",
            NS,
            "patch",
            "pod",
            pod,
            "--subresource=status",
            "--type=merge",
            "-p",
            &patch.to_string(),
        ],
    )
    .await;
    let out = tokio::time::timeout(Duration::from_secs(120), test.wait_with_output())
        .await
        .expect("helm test finishes")
        .expect("helm test runs");
    let said = format!("{}{}", stdout(&out), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "helm test: {said}");
    assert!(
        said.contains(pod) && said.contains("Succeeded"),
        "helm test: {said}"
    );
    eprintln!("helm test: its Pod ran on {node} and succeeded");

    // helm upgrade with a changed configuration: the ConfigMap changes, its checksum rolls the
    // pods (Recreate: the SQLite claim is read-write-once), revision 2.
    let (checksum, pods) = template_and_pods(&t).await;
    assert_eq!(pods.len(), 1, "{pods:?}");
    helm.ok(&[
        "upgrade",
        RELEASE,
        CHART,
        "--namespace",
        NS,
        "--set",
        "config.history_retention=48h",
        "--set",
        "log.level=debug",
    ])
    .await;
    rolled_out(&t, 1).await;
    let config = kubectl_ok(
        &t,
        &[
            "-n",
            NS,
            "get",
            "configmap",
            "leasehold-config",
            "-o",
            "jsonpath={.data.leasehold\\.yaml}",
        ],
    )
    .await;
    assert!(config.contains("history_retention: 48h"), "{config}");
    let rolled = eventually(Duration::from_secs(120), || async {
        let (new_checksum, new_pods) = template_and_pods(&t).await;
        (new_checksum != checksum && new_pods.len() == 1 && new_pods.is_disjoint(&pods))
            .then_some(())
    })
    .await;
    assert!(
        rolled.is_some(),
        "the configuration change rolled the pod ({pods:?} still there?)"
    );
    let rust_log = kubectl_ok(
        &t,
        &[
            "-n",
            NS,
            "get",
            "deployment",
            RELEASE,
            "-o",
            "jsonpath={.spec.template.spec.containers[0].env[?(@.name==\"RUST_LOG\")].value}",
        ],
    )
    .await;
    assert_eq!(rust_log, "debug");

    // Then to the HA values (the database Secret first, as the docs say): two replicas on
    // rolling updates, the SQLite claim no longer part of the release.
    kubectl_ok(
        &t,
        &[
            "-n",
            NS,
            "create",
            "secret",
            "generic",
            "leasehold-database",
            "--from-literal=url=postgres://leasehold:PASSWORD@postgres.db.svc:5432/leasehold",
        ],
    )
    .await;
    let ha = format!("{CHART}/ci/ha-values.yaml");
    helm.ok(&["upgrade", RELEASE, CHART, "--namespace", NS, "-f", &ha])
        .await;
    rolled_out(&t, 2).await;
    let history: Value =
        serde_json::from_str(&helm.ok(&["history", RELEASE, "-n", NS, "-o", "json"]).await)
            .unwrap();
    let revisions: Vec<(i64, &str)> = history
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["revision"].as_i64().unwrap(),
                r["status"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        revisions,
        [(1, "superseded"), (2, "superseded"), (3, "deployed")]
    );
    let strategy = kubectl_ok(
        &t,
        &[
            "-n",
            NS,
            "get",
            "deployment",
            RELEASE,
            "-o",
            "jsonpath={.spec.strategy.type}",
        ],
    )
    .await;
    assert_eq!(strategy, "RollingUpdate");
    let pvc = (
        "PersistentVolumeClaim".to_owned(),
        NS.to_owned(),
        "leasehold-data".to_owned(),
    );
    let gone = eventually(Duration::from_secs(60), || async {
        (!exists(&t, &pvc).await).then_some(())
    })
    .await;
    assert!(
        gone.is_some(),
        "the SQLite claim left with the values that made it"
    );

    // helm uninstall: nothing of any revision is left, nor the release's records; only what
    // the user made (the namespace, the database Secret, the example) stays.
    let mut every: BTreeSet<(String, String, String)> = BTreeSet::new();
    for revision in ["1", "2", "3"] {
        every.extend(manifest_objects(&helm, &["--revision", revision]).await);
    }
    helm.ok(&[
        "uninstall",
        RELEASE,
        "--namespace",
        NS,
        "--wait",
        "--timeout",
        "120s",
    ])
    .await;
    // What is left: objects of any revision, and pods (the control plane's, the test's).
    let leftovers = || async {
        let mut left = Vec::new();
        for o in &every {
            if exists(&t, o).await {
                left.push(format!("{o:?}"));
            }
        }
        let pods = stdout(&t.kubectl(&["-n", NS, "get", "pods", "-o", "name"]).await);
        left.extend(pods.lines().map(str::to_owned));
        left
    };
    let gone = eventually(Duration::from_secs(120), || async {
        leftovers().await.is_empty().then_some(())
    })
    .await;
    assert!(
        gone.is_some(),
        "left after helm uninstall: {:?}",
        leftovers().await
    );
    let labelled = kubectl_ok(
        &t,
        &[
            "get",
            "all,configmaps,secrets,serviceaccounts,roles,rolebindings,pvc,pdb,networkpolicies",
            "-A",
            "-l",
            "app.kubernetes.io/instance=leasehold",
            "-o",
            "name",
        ],
    )
    .await;
    assert_eq!(
        labelled.trim(),
        "",
        "namespaced objects labelled with the release"
    );
    let cluster_wide = kubectl_ok(
        &t,
        &[
            "get",
            "clusterroles,clusterrolebindings,prioritylevelconfigurations,flowschemas",
            "-l",
            "app.kubernetes.io/instance=leasehold",
            "-o",
            "name",
        ],
    )
    .await;
    assert_eq!(
        cluster_wide.trim(),
        "",
        "cluster-wide objects labelled with the release"
    );
    let records = kubectl_ok(
        &t,
        &["-n", NS, "get", "secrets", "-l", "owner=helm", "-o", "name"],
    )
    .await;
    assert_eq!(records.trim(), "", "Helm's release records");
    let status = helm
        .command(&["status", RELEASE, "-n", NS])
        .output()
        .await
        .unwrap();
    assert!(
        !status.status.success(),
        "helm status after uninstall: {}",
        stdout(&status)
    );
}
