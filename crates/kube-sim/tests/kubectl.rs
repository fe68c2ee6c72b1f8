//! Acceptance tests: unchanged kubectl (`/usr/bin/kubectl`, or `$KUBECTL`) against the
//! simulator, asserting what kubectl prints against a real kube-apiserver.
use kube_sim::testkit as common;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// What a kubectl run printed, for assertions.
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl From<Output> for Run {
    fn from(o: Output) -> Self {
        Self {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
}

impl Run {
    /// Panics with both streams unless kubectl exited 0.
    fn ok(self) -> Self {
        assert_eq!(
            self.code, 0,
            "kubectl failed\nstdout:\n{}\nstderr:\n{}",
            self.stdout, self.stderr
        );
        self
    }

    /// Panics unless kubectl exited 1 (its exit code for errors).
    fn failed(self) -> Self {
        assert_eq!(
            self.code, 1,
            "kubectl did not fail as expected\nstdout:\n{}\nstderr:\n{}",
            self.stdout, self.stderr
        );
        self
    }
}

async fn kubectl(t: &common::TestSim, args: &[&str]) -> Run {
    t.kubectl(args).await.into()
}

/// Writes `text` to `dir/name` and returns the path as a string for kubectl's `-f`.
fn write(dir: &Path, name: &str, text: &str) -> String {
    let path: PathBuf = dir.join(name);
    std::fs::write(&path, text).expect("write manifest");
    path.to_str().expect("utf-8 path").to_owned()
}

/// The whitespace-separated cells of each non-empty line.
fn rows(s: &str) -> Vec<Vec<&str>> {
    s.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.split_whitespace().collect())
        .collect()
}

/// An AGE cell of a just-created object (`0s`..`59s`).
fn is_fresh_age(s: &str) -> bool {
    s.strip_suffix('s')
        .and_then(|n| n.parse::<u32>().ok())
        .is_some_and(|n| n < 60)
}

async fn create_lease(t: &common::TestSim, ns: &str, name: &str, holder: &str) -> Lease {
    let api: Api<Lease> = Api::namespaced(t.client.clone(), ns);
    let lease: Lease = serde_json::from_value(common::mk_lease(name, holder)).unwrap();
    api.create(&PostParams::default(), &lease)
        .await
        .expect("create lease")
}

async fn lease_json(t: &common::TestSim, name: &str) -> Value {
    let api: Api<Lease> = Api::namespaced(t.client.clone(), &t.ns);
    serde_json::to_value(api.get(name).await.expect("get lease")).unwrap()
}

const LEASE_V1: &str = "\
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata:
  name: app-leader
  labels:
    app: demo
    tier: control
spec:
  holderIdentity: pod-a
  leaseDurationSeconds: 15
";

/// The same lease edited: holder changed, label `app` and `leaseDurationSeconds` dropped.
const LEASE_V2: &str = "\
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata:
  name: app-leader
  labels:
    tier: control
spec:
  holderIdentity: pod-b
";

#[tokio::test]
async fn apply_creates_then_configures_with_a_three_way_merge() {
    let t = common::start().await;
    let dir = tempfile::tempdir().unwrap();
    let v1 = write(dir.path(), "v1.yaml", LEASE_V1);
    let v2 = write(dir.path(), "v2.yaml", LEASE_V2);

    let r = kubectl(&t, &["apply", "-f", &v1]).await.ok();
    assert_eq!(r.stdout, "lease.coordination.k8s.io/app-leader created\n");
    let r = kubectl(&t, &["apply", "-f", &v1]).await.ok();
    assert_eq!(r.stdout, "lease.coordination.k8s.io/app-leader unchanged\n");

    // Someone else adds a label and an annotation: not in last-applied, so apply keeps them.
    kubectl(&t, &["label", "lease", "app-leader", "owner=ops"])
        .await
        .ok();
    kubectl(&t, &["annotate", "lease", "app-leader", "note=hands-off"])
        .await
        .ok();

    let r = kubectl(&t, &["apply", "-f", &v2]).await.ok();
    assert_eq!(
        r.stdout,
        "lease.coordination.k8s.io/app-leader configured\n"
    );
    let v = lease_json(&t, "app-leader").await;
    assert_eq!(
        v["metadata"]["labels"],
        json!({ "owner": "ops", "tier": "control" })
    );
    assert_eq!(v["metadata"]["annotations"]["note"], "hands-off");
    assert_eq!(v["spec"], json!({ "holderIdentity": "pod-b" }));
    let last: Value = serde_json::from_str(
        v["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        last,
        json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": { "annotations": {}, "labels": { "tier": "control" }, "name": "app-leader", "namespace": t.ns },
            "spec": { "holderIdentity": "pod-b" }
        })
    );
    let r = kubectl(&t, &["apply", "-f", &v2]).await.ok();
    assert_eq!(r.stdout, "lease.coordination.k8s.io/app-leader unchanged\n");

    // Each kubectl verb is recorded as an Update by its own field manager.
    let r = kubectl(
        &t,
        &[
            "get",
            "lease",
            "app-leader",
            "-o",
            "json",
            "--show-managed-fields",
        ],
    )
    .await
    .ok();
    let v: Value = serde_json::from_str(&r.stdout).unwrap();
    let mut managers: Vec<(String, String)> = v["metadata"]["managedFields"]
        .as_array()
        .expect("managedFields shown")
        .iter()
        .map(|m| {
            (
                m["manager"].as_str().unwrap().to_owned(),
                m["operation"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    managers.sort();
    let update = |m: &str| (m.to_owned(), "Update".to_owned());
    assert_eq!(
        managers,
        [
            update("kubectl-annotate"),
            update("kubectl-client-side-apply"),
            update("kubectl-label")
        ]
    );
    let csa = v["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["manager"] == "kubectl-client-side-apply")
        .unwrap();
    assert_eq!(
        csa["fieldsV1"]["f:metadata"]["f:labels"],
        json!({ ".": {}, "f:tier": {} }),
        "{csa}"
    );
    assert!(
        csa["fieldsV1"]["f:spec"].get("f:holderIdentity").is_some(),
        "{csa}"
    );
    assert!(
        csa["fieldsV1"]["f:spec"]
            .get("f:leaseDurationSeconds")
            .is_none(),
        "dropped from the file: {csa}"
    );
}

#[tokio::test]
async fn apply_server_side_conflicts_unless_forced() {
    let t = common::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mine = write(dir.path(), "mine.yaml", LEASE_V1);
    let theirs = write(
        dir.path(),
        "theirs.yaml",
        &LEASE_V1.replace("pod-a", "pod-z"),
    );

    let r = kubectl(&t, &["apply", "--server-side", "-f", &mine])
        .await
        .ok();
    assert_eq!(
        r.stdout,
        "lease.coordination.k8s.io/app-leader serverside-applied\n"
    );

    let r = kubectl(
        &t,
        &[
            "apply",
            "--server-side",
            "--field-manager=rival",
            "-f",
            &theirs,
        ],
    )
    .await
    .failed();
    assert!(
        r.stderr.starts_with(
            "error: Apply failed with 1 conflict: conflict with \"kubectl\": .spec.holderIdentity\n\
             Please review the fields above--they currently have other managers. Here\n\
             are the ways you can resolve this warning:\n"
        ),
        "{}",
        r.stderr
    );
    assert_eq!(
        lease_json(&t, "app-leader").await["spec"]["holderIdentity"],
        "pod-a"
    );

    let r = kubectl(
        &t,
        &[
            "apply",
            "--server-side",
            "--field-manager=rival",
            "--force-conflicts",
            "-f",
            &theirs,
        ],
    )
    .await
    .ok();
    assert_eq!(
        r.stdout,
        "lease.coordination.k8s.io/app-leader serverside-applied\n"
    );
    let v = lease_json(&t, "app-leader").await;
    assert_eq!(v["spec"]["holderIdentity"], "pod-z");
    let managers: Vec<(&str, &str)> = v["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["manager"].as_str().unwrap(),
                m["operation"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(managers, [("kubectl", "Apply"), ("rival", "Apply")]);
    // The forced field moved to the rival.
    assert!(
        v["metadata"]["managedFields"][0]["fieldsV1"]["f:spec"]
            .get("f:holderIdentity")
            .is_none(),
        "{v}"
    );
    assert!(
        v["metadata"]["managedFields"][1]["fieldsV1"]["f:spec"]
            .get("f:holderIdentity")
            .is_some(),
        "{v}"
    );
}

#[tokio::test]
async fn apply_with_an_unknown_field_fails_strict_validation() {
    let t = common::start().await;
    let dir = tempfile::tempdir().unwrap();
    let bad = write(dir.path(), "bad.yaml", &format!("{LEASE_V1}  bogus: 1\n"));

    let r = kubectl(&t, &["apply", "-f", &bad]).await.failed();
    assert_eq!(r.stdout, "");
    assert_eq!(
        r.stderr,
        format!(
            "Error from server (BadRequest): error when creating \"{bad}\": Lease in version \"v1\" cannot be handled as a Lease: strict decoding error: unknown field \"spec.bogus\"\n"
        )
    );
    let api: Api<Lease> = Api::namespaced(t.client.clone(), &t.ns);
    assert!(api.get_opt("app-leader").await.unwrap().is_none());

    // `--validate=warn` stores the object without the field and prints the warning.
    let r = kubectl(&t, &["apply", "--validate=warn", "-f", &bad])
        .await
        .ok();
    assert_eq!(r.stdout, "lease.coordination.k8s.io/app-leader created\n");
    assert_eq!(r.stderr, "Warning: unknown field \"spec.bogus\"\n");
    assert_eq!(
        lease_json(&t, "app-leader").await["spec"],
        json!({ "holderIdentity": "pod-a", "leaseDurationSeconds": 15 })
    );
}

#[tokio::test]
async fn get_prints_table_yaml_and_json() {
    let t = common::start().await;
    let lease = create_lease(&t, &t.ns, "alpha", "pod-0").await;
    let meta = &lease.metadata;
    let (uid, rv) = (
        meta.uid.clone().unwrap(),
        meta.resource_version.clone().unwrap(),
    );
    let created = meta
        .creation_timestamp
        .as_ref()
        .unwrap()
        .0
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();

    let r = kubectl(&t, &["get", "leases"]).await.ok();
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(lines[0], "NAME    HOLDER   AGE");
    assert!(lines[1].starts_with("alpha   pod-0    "), "{}", r.stdout);
    assert_eq!(rows(&r.stdout).len(), 2);
    assert!(is_fresh_age(rows(&r.stdout)[1][2]), "{}", r.stdout);

    let r = kubectl(&t, &["get", "lease", "alpha", "-o", "yaml"])
        .await
        .ok();
    let ns = &t.ns;
    let expected = format!(
        "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  creationTimestamp: \"{created}\"\n  name: alpha\n  namespace: {ns}\n  \
         resourceVersion: \"{rv}\"\n  uid: {uid}\nspec:\n  holderIdentity: pod-0\n  leaseDurationSeconds: 10\n"
    );
    assert_eq!(r.stdout, expected);

    let r = kubectl(&t, &["get", "lease", "alpha", "-o", "json"])
        .await
        .ok();
    let v: Value = serde_json::from_str(&r.stdout).expect("kubectl -o json prints JSON");
    assert_eq!(
        v,
        json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": { "creationTimestamp": created, "name": "alpha", "namespace": t.ns, "resourceVersion": rv, "uid": uid },
            "spec": { "holderIdentity": "pod-0", "leaseDurationSeconds": 10 }
        })
    );
    assert!(
        r.stdout
            .starts_with("{\n    \"apiVersion\": \"coordination.k8s.io/v1\",\n"),
        "{}",
        r.stdout
    );

    let r = kubectl(&t, &["get", "lease", "missing"]).await.failed();
    assert_eq!(
        r.stderr,
        "Error from server (NotFound): leases.coordination.k8s.io \"missing\" not found\n"
    );
    let r = kubectl(&t, &["get", "leases", "-n", "kube-public"])
        .await
        .ok();
    assert_eq!(
        (r.stdout.as_str(), r.stderr.as_str()),
        ("", "No resources found in kube-public namespace.\n")
    );
}

/// `kubectl get -w` as a child process whose stdout lines arrive on a channel (the crate's
/// tokio has no `io-util`, so a thread reads the pipe). The child dies with this value.
struct Watch {
    child: tokio::process::Child,
    lines: mpsc::UnboundedReceiver<String>,
}

impl Watch {
    fn spawn(t: &common::TestSim, args: &[&str]) -> Self {
        let mut child = tokio::process::Command::new(common::kubectl_path())
            .args(args)
            .env("KUBECONFIG", &t.kubeconfig)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn kubectl");
        let fd = child
            .stdout
            .take()
            .unwrap()
            .into_owned_fd()
            .expect("stdout pipe");
        let (tx, lines) = mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for line in std::io::BufRead::lines(std::io::BufReader::new(std::fs::File::from(fd))) {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self { child, lines }
    }

    /// The next line printed, failing after 10 s.
    async fn next_line(&mut self) -> String {
        tokio::time::timeout(Duration::from_secs(10), self.lines.recv())
            .await
            .expect("kubectl printed a line within 10 s")
            .expect("kubectl still running")
    }
}

#[tokio::test]
async fn get_watch_shows_new_holder_and_release() {
    let t = common::start().await;
    create_lease(&t, &t.ns, "leader", "pod-0").await;
    let mut w = Watch::spawn(&t, &["get", "leases", "-w"]);
    assert_eq!(w.next_line().await, "NAME     HOLDER   AGE");
    let first = w.next_line().await;
    assert_eq!(rows(&first)[0][..2], ["leader", "pod-0"], "{first}");

    let api: Api<Lease> = Api::namespaced(t.client.clone(), &t.ns);
    api.patch(
        "leader",
        &PatchParams::default(),
        &Patch::Merge(json!({ "spec": { "holderIdentity": "pod-1" } })),
    )
    .await
    .unwrap();
    let line = w.next_line().await;
    let cells = &rows(&line)[0];
    assert_eq!(cells[..2], ["leader", "pod-1"], "{line}");
    assert!(is_fresh_age(cells[2]), "{line}");

    // client-go's LeaderElector.release(): an Update with an empty holder and a 1 s duration.
    let mut lease = api.get("leader").await.unwrap();
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(jiff::Timestamp::now());
    let spec = lease.spec.as_mut().unwrap();
    spec.holder_identity = Some(String::new());
    spec.lease_duration_seconds = Some(1);
    spec.acquire_time = Some(now.clone());
    spec.renew_time = Some(now);
    api.replace("leader", &PostParams::default(), &lease)
        .await
        .expect("release accepted");
    let line = w.next_line().await;
    let cells = &rows(&line)[0];
    assert_eq!(cells.len(), 2, "the HOLDER cell is empty: {line:?}");
    assert_eq!(cells[0], "leader");
    assert!(is_fresh_age(cells[1]), "{line}");
    assert_eq!(
        api.get("leader")
            .await
            .unwrap()
            .spec
            .unwrap()
            .holder_identity
            .as_deref(),
        Some("")
    );

    w.child.kill().await.unwrap();
}

#[tokio::test]
async fn describe_lease_and_pod() {
    let mut t = common::start().await;
    // On a real apiserver, over this test's namespace only: the other tests' pods are theirs.
    t.spawn_kubelet();
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "lease.yaml", LEASE_V1);
    kubectl(&t, &["create", "-f", &f]).await.ok();
    let v = lease_json(&t, "app-leader").await;

    let r = kubectl(&t, &["describe", "lease", "app-leader"]).await.ok();
    let expected = format!(
        "Name:         app-leader\n\
         Namespace:    {}\n\
         Labels:       app=demo\n              tier=control\n\
         Annotations:  <none>\n\
         API Version:  coordination.k8s.io/v1\n\
         Kind:         Lease\n\
         Metadata:\n  \
           Creation Timestamp:  {}\n  \
           Resource Version:    {}\n  \
           UID:                 {}\n\
         Spec:\n  \
           Holder Identity:         pod-a\n  \
           Lease Duration Seconds:  15\n\
         Events:                    <none>\n",
        t.ns,
        v["metadata"]["creationTimestamp"].as_str().unwrap(),
        v["metadata"]["resourceVersion"].as_str().unwrap(),
        v["metadata"]["uid"].as_str().unwrap(),
    );
    assert_eq!(r.stdout, expected);

    let pods: Api<Pod> = Api::namespaced(t.client.clone(), &t.ns);
    let mut pod = common::mk_pod("web", json!({ "app": "web" }));
    pod["spec"]["nodeName"] = json!("sim-node-1");
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(pod).unwrap(),
    )
    .await
    .unwrap();
    kubectl(
        &t,
        &["wait", "--for=condition=Ready", "pod/web", "--timeout=10s"],
    )
    .await
    .ok();
    let ip = pods
        .get("web")
        .await
        .unwrap()
        .status
        .unwrap()
        .pod_ip
        .unwrap();

    // Column widths follow the longest label (real pods also show `Service Account:`), so
    // compare lines with runs of inner whitespace collapsed, keeping the indentation.
    let r = kubectl(&t, &["describe", "pod", "web"]).await.ok();
    let lines: Vec<String> = r.stdout.lines().map(squeeze).collect();
    for want in [
        "Name: web".to_owned(),
        format!("Namespace: {}", t.ns),
        "Node: sim-node-1/172.18.0.2".into(),
        "Labels: app=web".into(),
        "Annotations: <none>".into(),
        "Status: Running".into(),
        format!("IP: {ip}"),
        "Containers:".into(),
        "  app:".into(),
        "    Image: example/app:1".into(),
        "    State: Running".into(),
        "    Ready: True".into(),
        "    Restart Count: 0".into(),
        "  Ready True".into(),
        "  ContainersReady True".into(),
        "  PodScheduled True".into(),
        "QoS Class: BestEffort".into(),
        "Events: <none>".into(),
    ] {
        assert!(lines.contains(&want), "missing {want:?} in\n{}", r.stdout);
    }
}

/// A line with its indentation kept and every inner run of whitespace made one space.
fn squeeze(line: &str) -> String {
    let body = line.trim_start();
    let indent = &line[..line.len() - body.len()];
    format!(
        "{indent}{}",
        body.split_whitespace().collect::<Vec<_>>().join(" ")
    )
}

#[tokio::test]
async fn label_and_annotate_add_refuse_overwrite_and_remove() {
    let t = common::start().await;
    create_lease(&t, &t.ns, "l", "pod-0").await;
    let labels = |v: Value| v["metadata"]["labels"].clone();

    let r = kubectl(&t, &["label", "lease", "l", "team=a"]).await.ok();
    assert_eq!(r.stdout, "lease.coordination.k8s.io/l labeled\n");
    let r = kubectl(&t, &["label", "lease", "l", "team=b"])
        .await
        .failed();
    assert_eq!(
        r.stderr,
        "error: 'team' already has a value (a), and --overwrite is false\n"
    );
    kubectl(&t, &["label", "lease", "l", "team=b", "--overwrite"])
        .await
        .ok();
    assert_eq!(labels(lease_json(&t, "l").await), json!({ "team": "b" }));
    let r = kubectl(&t, &["get", "lease", "l", "--show-labels"])
        .await
        .ok();
    assert_eq!(
        r.stdout.lines().next(),
        Some("NAME   HOLDER   AGE   LABELS")
    );
    assert_eq!(
        rows(&r.stdout)[1],
        ["l", "pod-0", rows(&r.stdout)[1][2], "team=b"]
    );
    let r = kubectl(&t, &["label", "lease", "l", "team-"]).await.ok();
    assert_eq!(r.stdout, "lease.coordination.k8s.io/l unlabeled\n");
    let r = kubectl(&t, &["get", "lease", "l", "--show-labels"])
        .await
        .ok();
    assert_eq!(rows(&r.stdout)[1][3], "<none>");

    let r = kubectl(&t, &["annotate", "lease", "l", "note=one"])
        .await
        .ok();
    assert_eq!(r.stdout, "lease.coordination.k8s.io/l annotated\n");
    let r = kubectl(&t, &["annotate", "lease", "l", "note=two"])
        .await
        .failed();
    assert_eq!(
        r.stderr,
        "error: --overwrite is false but found the following declared annotation(s): 'note' already has a value (one)\n"
    );
    kubectl(&t, &["annotate", "lease", "l", "note=two", "--overwrite"])
        .await
        .ok();
    assert_eq!(
        lease_json(&t, "l").await["metadata"]["annotations"],
        json!({ "note": "two" })
    );
    let r = kubectl(&t, &["annotate", "lease", "l", "note-"]).await.ok();
    assert_eq!(r.stdout, "lease.coordination.k8s.io/l annotated\n");
    let r = kubectl(&t, &["describe", "lease", "l"]).await.ok();
    assert!(
        r.stdout
            .contains("\nLabels:       <none>\nAnnotations:  <none>\n"),
        "{}",
        r.stdout
    );

    let r = kubectl(&t, &["label", "lease", "nope", "a=b"])
        .await
        .failed();
    assert_eq!(
        r.stderr,
        "Error from server (NotFound): leases.coordination.k8s.io \"nope\" not found\n"
    );
}

#[tokio::test]
async fn delete_by_name_selector_and_all() {
    let t = common::start().await;
    for (name, tier) in [("a", "web"), ("b", "web"), ("c", "db"), ("d", "db")] {
        let api: Api<Lease> = Api::namespaced(t.client.clone(), &t.ns);
        let mut l = common::mk_lease(name, "x");
        l["metadata"]["labels"] = json!({ "tier": tier });
        api.create(&PostParams::default(), &serde_json::from_value(l).unwrap())
            .await
            .unwrap();
    }
    create_lease(&t, "kube-node-lease", "keep", "node").await;
    let pods: Api<Pod> = Api::namespaced(t.client.clone(), &t.ns);
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(common::mk_pod("p", json!({}))).unwrap(),
    )
    .await
    .unwrap();
    let names = |r: &Run| {
        rows(&r.stdout)
            .iter()
            .skip(1)
            .map(|c| c[0].to_owned())
            .collect::<Vec<_>>()
    };

    let r = kubectl(&t, &["delete", "lease", "a"]).await.ok();
    assert_eq!(r.stdout, "lease.coordination.k8s.io \"a\" deleted\n");
    let r = kubectl(&t, &["delete", "pod", "p"]).await.ok();
    assert_eq!(r.stdout, "pod \"p\" deleted\n");
    assert!(pods.get_opt("p").await.unwrap().is_none());
    let r = kubectl(&t, &["delete", "leases", "-l", "tier=web"])
        .await
        .ok();
    assert_eq!(r.stdout, "lease.coordination.k8s.io \"b\" deleted\n");
    assert_eq!(
        names(&kubectl(&t, &["get", "leases"]).await.ok()),
        ["c", "d"]
    );
    let r = kubectl(&t, &["delete", "leases", "-l", "tier=nothing"])
        .await
        .ok();
    assert_eq!(
        (r.stdout.as_str(), r.stderr.as_str()),
        ("No resources found\n", "")
    );
    let r = kubectl(&t, &["delete", "leases", "--all"]).await.ok();
    assert_eq!(
        r.stdout,
        "lease.coordination.k8s.io \"c\" deleted\nlease.coordination.k8s.io \"d\" deleted\n"
    );
    let r = kubectl(&t, &["get", "leases"]).await.ok();
    assert_eq!(
        r.stderr,
        format!("No resources found in {} namespace.\n", t.ns)
    );
    // Another namespace's Lease is kept (on a real apiserver other tests also write there).
    let others = names(
        &kubectl(&t, &["get", "leases", "-n", "kube-node-lease"])
            .await
            .ok(),
    );
    assert!(others.iter().any(|n| n == "keep"), "{others:?}");
    let r = kubectl(&t, &["delete", "lease", "a"]).await.failed();
    assert_eq!(
        r.stderr,
        "Error from server (NotFound): leases.coordination.k8s.io \"a\" not found\n"
    );
}

#[tokio::test]
async fn edit_through_kube_editor() {
    let t = common::start().await;
    create_lease(&t, &t.ns, "l", "pod-0").await;
    let dir = tempfile::tempdir().unwrap();
    let editor = write(
        dir.path(),
        "editor.sh",
        "#!/bin/sh\nsed -i 's/holderIdentity: pod-0/holderIdentity: edited/' \"$1\"\n",
    );
    std::fs::set_permissions(&editor, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();

    let r: Run = t
        .kubectl_with_env(&["edit", "lease", "l"], &[("KUBE_EDITOR", &editor)])
        .await
        .into();
    let r = r.ok();
    assert_eq!(r.stdout, "lease.coordination.k8s.io/l edited\n");
    assert_eq!(
        lease_json(&t, "l").await["spec"]["holderIdentity"],
        "edited"
    );

    // The same edit again changes nothing.
    let r: Run = t
        .kubectl_with_env(&["edit", "lease", "l"], &[("KUBE_EDITOR", &editor)])
        .await
        .into();
    let r = r.ok();
    assert_eq!(r.stderr, "Edit cancelled, no changes made.\n");
}

#[tokio::test]
async fn create_from_file_then_already_exists() {
    let t = common::start().await;
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "lease.yaml", LEASE_V1);
    let r = kubectl(&t, &["create", "-f", &f]).await.ok();
    assert_eq!(r.stdout, "lease.coordination.k8s.io/app-leader created\n");
    let v = lease_json(&t, "app-leader").await;
    assert_eq!(
        v["spec"],
        json!({ "holderIdentity": "pod-a", "leaseDurationSeconds": 15 })
    );
    assert!(
        v["metadata"]["annotations"].is_null(),
        "create records no last-applied: {v}"
    );
    let r = kubectl(&t, &["create", "-f", &f]).await.failed();
    assert_eq!(
        r.stderr,
        format!(
            "Error from server (AlreadyExists): error when creating \"{f}\": leases.coordination.k8s.io \"app-leader\" already exists\n"
        )
    );
}

#[tokio::test]
async fn get_across_all_namespaces() {
    let t = common::start().await;
    let nss: Api<Namespace> = Api::all(t.client.clone());
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({ "metadata": { "name": "apps" } })).unwrap(),
    )
    .await
    .unwrap();
    // Labelled with this test's namespace: a real cluster is shared with other tests and holds
    // the apiserver's own Lease.
    for (ns, name, holder) in [
        (t.ns.as_str(), "one", "pod-1"),
        ("apps", "two", "pod-2"),
        ("kube-node-lease", "sim-node-1", "sim-node-1"),
    ] {
        let mut l = common::mk_lease(name, holder);
        l["metadata"]["labels"] = json!({ "suite": t.ns });
        Api::<Lease>::namespaced(t.client.clone(), ns)
            .create(&PostParams::default(), &serde_json::from_value(l).unwrap())
            .await
            .unwrap();
    }

    let sel = format!("suite={}", t.ns);
    let r = kubectl(&t, &["get", "leases", "-A", "-l", &sel]).await.ok();
    assert_eq!(
        r.stdout.lines().next(),
        Some("NAMESPACE         NAME         HOLDER       AGE")
    );
    let got: Vec<Vec<&str>> = rows(&r.stdout)
        .into_iter()
        .skip(1)
        .map(|c| c[..3].to_vec())
        .collect();
    let mut want = vec![
        vec!["apps", "two", "pod-2"],
        vec![t.ns.as_str(), "one", "pod-1"],
        vec!["kube-node-lease", "sim-node-1", "sim-node-1"],
    ];
    want.sort();
    assert_eq!(got, want);

    let r = kubectl(&t, &["get", "namespaces"]).await.ok();
    let mut expected = vec![
        "apps",
        "default",
        "kube-node-lease",
        "kube-public",
        "kube-system",
        t.ns.as_str(),
    ];
    expected.sort();
    expected.dedup();
    let got: Vec<[&str; 2]> = rows(&r.stdout)
        .into_iter()
        .skip(1)
        .map(|c| [c[0], c[1]])
        .filter(|[n, _]| expected.contains(n))
        .collect();
    let want: Vec<[&str; 2]> = expected.iter().map(|n| [*n, "Active"]).collect();
    assert_eq!(got, want);
}

#[tokio::test]
async fn get_pods_wide_and_wait_for_ready_with_the_fake_kubelet() {
    let mut t = common::start().await;
    let pods: Api<Pod> = Api::namespaced(t.client.clone(), &t.ns);
    let mut pod = common::mk_pod("x", json!({ "app": "x", "tier": "web" }));
    pod["spec"]["nodeName"] = json!("sim-node-1");
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(pod).unwrap(),
    )
    .await
    .unwrap();

    // No kubelet yet: the pod stays Pending and wait times out.
    let r = kubectl(&t, &["get", "pods"]).await.ok();
    assert_eq!(rows(&r.stdout)[1][..4], ["x", "0/1", "Pending", "0"]);
    let r = kubectl(
        &t,
        &["wait", "--for=condition=Ready", "pod/x", "--timeout=1s"],
    )
    .await
    .failed();
    assert_eq!(
        r.stderr,
        "error: timed out waiting for the condition on pods/x\n"
    );

    t.spawn_kubelet();
    let r = kubectl(
        &t,
        &["wait", "--for=condition=Ready", "pod/x", "--timeout=10s"],
    )
    .await
    .ok();
    assert_eq!(r.stdout, "pod/x condition met\n");
    let ip = pods.get("x").await.unwrap().status.unwrap().pod_ip.unwrap();
    assert!(ip.starts_with("10.244."), "{ip}");

    let r = kubectl(&t, &["get", "pods", "-o", "wide"]).await.ok();
    let header = r.stdout.lines().next().unwrap();
    assert_eq!(
        rows(header)[0],
        [
            "NAME",
            "READY",
            "STATUS",
            "RESTARTS",
            "AGE",
            "IP",
            "NODE",
            "NOMINATED",
            "NODE",
            "READINESS",
            "GATES"
        ]
    );
    let row = &rows(&r.stdout)[1];
    assert_eq!(row[..4], ["x", "1/1", "Running", "0"]);
    assert!(is_fresh_age(row[4]), "{}", r.stdout);
    assert_eq!(row[5..], [ip.as_str(), "sim-node-1", "<none>", "<none>"]);

    let r = kubectl(&t, &["get", "pods", "--show-labels"]).await.ok();
    assert_eq!(
        rows(&r.stdout)[0],
        ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "LABELS"]
    );
    assert_eq!(rows(&r.stdout)[1][5], "app=x,tier=web");
}

#[tokio::test]
async fn get_raw_version_and_apis() {
    let t = common::start().await;
    let r = kubectl(&t, &["get", "--raw", "/version"]).await.ok();
    let v: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(
        (v["major"].as_str(), v["minor"].as_str()),
        (Some("1"), Some("33"))
    );
    assert!(
        v["gitVersion"].as_str().unwrap().starts_with("v1.33."),
        "{v}"
    );

    let r = kubectl(&t, &["get", "--raw", "/apis"]).await.ok();
    let v: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(
        (v["kind"].as_str(), v["apiVersion"].as_str()),
        (Some("APIGroupList"), Some("v1"))
    );
    let coordination = v["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == "coordination.k8s.io")
        .expect("coordination.k8s.io listed");
    assert_eq!(
        *coordination,
        json!({
            "name": "coordination.k8s.io",
            "versions": [{ "groupVersion": "coordination.k8s.io/v1", "version": "v1" }],
            "preferredVersion": { "groupVersion": "coordination.k8s.io/v1", "version": "v1" }
        })
    );

    let r = kubectl(
        &t,
        &[
            "get",
            "--raw",
            &t.p("/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/none"),
        ],
    )
    .await
    .failed();
    assert_eq!(
        r.stderr,
        "Error from server (NotFound): leases.coordination.k8s.io \"none\" not found\n"
    );
}

#[tokio::test]
async fn api_resources_lists_leases_and_pods() {
    let t = common::start().await;
    let r = kubectl(&t, &["api-resources"]).await.ok();
    let all = rows(&r.stdout);
    assert_eq!(
        all[0],
        ["NAME", "SHORTNAMES", "APIVERSION", "NAMESPACED", "KIND"]
    );
    assert!(
        all.contains(&vec!["leases", "coordination.k8s.io/v1", "true", "Lease"]),
        "{}",
        r.stdout
    );
    assert!(
        all.contains(&vec!["pods", "po", "v1", "true", "Pod"]),
        "{}",
        r.stdout
    );
    assert!(
        all.contains(&vec!["namespaces", "ns", "v1", "false", "Namespace"]),
        "{}",
        r.stdout
    );

    let r = kubectl(
        &t,
        &[
            "api-resources",
            "--api-group=coordination.k8s.io",
            "-o",
            "wide",
        ],
    )
    .await
    .ok();
    assert_eq!(
        r.stdout,
        "NAME     SHORTNAMES   APIVERSION               NAMESPACED   KIND    VERBS                                                        CATEGORIES\n\
         leases                coordination.k8s.io/v1   true         Lease   create,delete,deletecollection,get,list,patch,update,watch   \n"
    );
}

#[tokio::test]
async fn explain_lease_spec_reads_openapi_v3() {
    let t = common::start().await;
    let r = kubectl(&t, &["explain", "lease.spec"]).await.ok();
    assert!(r.stdout.starts_with("GROUP:      coordination.k8s.io\nKIND:       Lease\nVERSION:    v1\n\nFIELD: spec <LeaseSpec>\n"), "{}", r.stdout);
    let fields: Vec<&str> = r
        .stdout
        .lines()
        .filter(|l| l.starts_with("  ") && !l.starts_with("    "))
        .collect();
    assert_eq!(
        fields,
        [
            "  acquireTime\t<string>",
            "  holderIdentity\t<string>",
            "  leaseDurationSeconds\t<integer>",
            "  leaseTransitions\t<integer>",
            "  preferredHolder\t<string>",
            "  renewTime\t<string>",
            "  strategy\t<string>",
        ]
    );
    let r = kubectl(&t, &["explain", "lease.spec.bogus"]).await.failed();
    assert_eq!(r.stderr, "error: field \"bogus\" does not exist\n");
}

#[tokio::test]
async fn create_configmap_from_literals() {
    let t = common::start().await;
    let r = kubectl(
        &t,
        &[
            "create",
            "configmap",
            "cfg",
            "--from-literal=a=1",
            "--from-literal=b=two",
        ],
    )
    .await
    .ok();
    assert_eq!(r.stdout, "configmap/cfg created\n");
    let r = kubectl(&t, &["get", "configmap", "cfg", "-o", "jsonpath={.data}"])
        .await
        .ok();
    assert_eq!(
        serde_json::from_str::<Value>(&r.stdout).unwrap(),
        json!({ "a": "1", "b": "two" })
    );
}

#[tokio::test]
async fn create_namespace() {
    let t = common::start().await;
    let r = kubectl(&t, &["create", "namespace", "team-a"]).await.ok();
    assert_eq!(r.stdout, "namespace/team-a created\n");
    let r = kubectl(&t, &["get", "namespace", "team-a"]).await.ok();
    assert_eq!(rows(&r.stdout)[1][..2], ["team-a", "Active"]);
    let r = kubectl(&t, &["create", "namespace", "team-a"])
        .await
        .failed();
    assert_eq!(
        r.stderr,
        "Error from server (AlreadyExists): namespaces \"team-a\" already exists\n"
    );
}

#[tokio::test]
async fn explain_shows_field_descriptions() {
    let t = common::start().await;
    let r = kubectl(&t, &["explain", "lease.spec"]).await.ok();
    assert!(
        r.stdout
            .contains("    LeaseSpec is a specification of a Lease.\n"),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("  holderIdentity\t<string>\n    holderIdentity contains the identity of the holder of a current lease."), "{}", r.stdout);
}

#[tokio::test]
async fn auth_can_i_uses_self_subject_access_review() {
    let t = common::start().await;
    let r = kubectl(&t, &["auth", "can-i", "create", "leases"])
        .await
        .ok();
    assert_eq!(r.stdout, "yes\n");
    let r = kubectl(
        &t,
        &["auth", "can-i", "delete", "pods", "-n", "kube-system"],
    )
    .await
    .ok();
    assert_eq!(r.stdout, "yes\n");
}

#[tokio::test]
async fn create_records_no_dot_for_the_spec_struct() {
    let t = common::start().await;
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "lease.yaml", LEASE_V1);
    kubectl(&t, &["create", "-f", &f]).await.ok();
    let r = kubectl(
        &t,
        &[
            "get",
            "lease",
            "app-leader",
            "-o",
            "json",
            "--show-managed-fields",
        ],
    )
    .await
    .ok();
    let v: Value = serde_json::from_str(&r.stdout).unwrap();
    let entry = &v["metadata"]["managedFields"][0];
    assert_eq!(
        (entry["manager"].as_str(), entry["operation"].as_str()),
        (Some("kubectl-create"), Some("Update"))
    );
    assert_eq!(
        entry["fieldsV1"],
        json!({
            "f:metadata": { "f:labels": { ".": {}, "f:app": {}, "f:tier": {} } },
            "f:spec": { "f:holderIdentity": {}, "f:leaseDurationSeconds": {} }
        })
    );
}
