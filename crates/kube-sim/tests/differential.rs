//! Differential tests: the same request scripts sent to the simulator and to a real
//! kube-apiserver (`LEASEHOLD_TEST_KUBECONFIG`, from `scripts/envtest.sh run`), answers
//! normalised and compared step by step (`common/diff.rs`). Status codes, reasons, messages,
//! `details`, object shapes, watch event sequences and kubectl output must match; values that
//! are each backend's own (resourceVersions, uids, times, the namespace name, allocated IPs)
//! are compared as placeholders numbered by first appearance.
//!
//! Without a real apiserver these tests say so and pass without comparing anything: the
//! simulator tier has its own fidelity tests; this file only means something on the real tier.
//! What they found and what was fixed is in docs/fidelity.md.

use kube_sim::testkit as common;
#[path = "common/diff.rs"]
mod diff;

use diff::{Step, compare, delete, get, kubectl, kubectl_stdin, patch, post, put, send_as, watch};
use kube_sim::SimOptions;
use kube_sim::auth::{AuthTable, User};
use serde_json::{Value, json};

const L: &str = "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases";
const PODS: &str = "/api/v1/namespaces/{ns}/pods";
const CMS: &str = "/api/v1/namespaces/{ns}/configmaps";
const SVCS: &str = "/api/v1/namespaces/{ns}/services";
const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json";

/// The simulator, set up like `scripts/envtest.sh`'s apiserver: the same tokens, users and
/// groups.
fn mirror_options() -> SimOptions {
    let user = |token: &str, name: &str, uid: &str, groups: &[&str]| User {
        token: token.into(),
        name: name.into(),
        uid: uid.into(),
        groups: groups.iter().map(|g| g.to_string()).collect(),
    };
    SimOptions {
        admin_token: "leasehold-admin-token".into(),
        auth: AuthTable {
            users: vec![
                user(
                    "leasehold-admin-token",
                    "admin",
                    "admin-uid",
                    &["system:masters"],
                ),
                user(
                    "viewer-token",
                    "viewer",
                    "viewer-uid",
                    &["leasehold:viewers"],
                ),
                user("nobody-token", "nobody", "nobody-uid", &[]),
            ],
            rules: vec![],
        },
        ..SimOptions::default()
    }
}

/// Both backends, each in a fresh namespace; None (with a note) without a real apiserver.
async fn pair_with(opts: SimOptions) -> Option<(common::TestSim, common::TestSim)> {
    let Some(real) = common::start_real().await else {
        eprintln!(
            "SKIPPED: differential tests compare with a real kube-apiserver; \
             run them with scripts/envtest.sh run -- cargo test --test differential"
        );
        return None;
    };
    let mut sim = common::start_with(opts).await;
    sim.use_fresh_namespace().await;
    Some((sim, real))
}

async fn pair() -> Option<(common::TestSim, common::TestSim)> {
    pair_with(mirror_options()).await
}

async fn check(script: &[Step]) {
    if let Some((sim, real)) = pair().await {
        compare((&sim, &sim.ns), (&real, &real.ns), script).await;
    }
}

fn lease(name: &str, holder: &str) -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": { "name": name },
        "spec": { "holderIdentity": holder, "leaseDurationSeconds": 10 }
    })
}

fn labelled(name: &str, labels: Value) -> Value {
    let mut l = lease(name, "h");
    l["metadata"]["labels"] = labels;
    l
}

fn with_rv(mut v: Value, rv: &str) -> Value {
    v["metadata"]["resourceVersion"] = Value::String(rv.into());
    v
}

/// Where a pod's answer differs by design (docs/fidelity.md): the default admission plugins the
/// simulator does not run add tolerations (DefaultTolerationSeconds) and priority
/// (Priority), and its managedFields for pods record defaulted and status fields the
/// apiserver's reset-fields strategy leaves out.
fn pod_step(step: Step) -> Step {
    step.ignore(
        "/spec/tolerations",
        "DefaultTolerationSeconds admission is not simulated",
    )
}

/// Services: as [`pod_step`], the allocated IP fields and `status` are not separated from what
/// the client wrote in managedFields.
fn service_step(step: Step) -> Step {
    step
}

fn pod(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": name, "labels": { "app": "web" } },
        "spec": { "containers": [
            { "name": "app", "image": "example/app:1", "env": [{ "name": "A", "value": "1" }],
              "ports": [{ "containerPort": 8080, "name": "http" }] },
            { "name": "side", "image": "example/side:1" }
        ] }
    })
}

// ---------------------------------------------------------------------------------------------
// Writes, errors and concurrency (fidelity 5, 10, 12, 13, 18–20, 28)

#[tokio::test]
async fn d_create_get_update_conflict_delete() {
    check(&[
        post("create", L, lease("a", "x")).save("rv1", "/metadata/resourceVersion"),
        post("create again: 409 AlreadyExists", L, lease("a", "x")),
        get("get", &format!("{L}/a")),
        put(
            "update",
            &format!("{L}/a"),
            with_rv(lease("a", "y"), "{rv1}"),
        ),
        put(
            "update with the stale resourceVersion: 409 Conflict",
            &format!("{L}/a"),
            with_rv(lease("a", "z"), "{rv1}"),
        ),
        put(
            "update without resourceVersion: 422",
            &format!("{L}/a"),
            lease("a", "z"),
        ),
        put(
            "PUT to a missing lease creates it",
            &format!("{L}/b"),
            lease("b", "x"),
        ),
        put(
            "PUT to a missing pod: 404",
            &format!("{PODS}/nope"),
            pod("nope"),
        ),
        get("missing: 404", &format!("{L}/nope")),
        get(
            "missing namespace: 404",
            "/apis/coordination.k8s.io/v1/namespaces/no-such-ns/leases/a",
        ),
        post(
            "create into a missing namespace: 404",
            "/apis/coordination.k8s.io/v1/namespaces/no-such-ns/leases",
            lease("a", "x"),
        ),
        delete("delete a lease: Status", &format!("{L}/a")),
        delete("delete again: 404", &format!("{L}/a")),
        get("list", L),
    ])
    .await;
}

#[tokio::test]
async fn d_validation_errors() {
    let mut zero = lease("zero", "x");
    zero["spec"]["leaseDurationSeconds"] = json!(0);
    zero["spec"]["leaseTransitions"] = json!(-1);
    let mut whole = lease("whole", "x");
    whole["spec"]["renewTime"] = json!("2026-01-01T00:00:00Z");
    let mut wrong_kind = lease("wk", "x");
    wrong_kind["kind"] = json!("ConfigMap");
    wrong_kind["apiVersion"] = json!("v1");
    let mut unknown = lease("unk", "x");
    unknown["spec"]["bogus"] = json!(1);
    check(&[
        post("invalid name: 422", L, lease("Bad_Name", "x")),
        post(
            "leaseDurationSeconds 0 and leaseTransitions -1: 422",
            L,
            zero,
        ),
        post("renewTime without microseconds: 400", L, whole),
        post("a ConfigMap body to leases: 400", L, wrong_kind),
        post(
            "unknown field, strict: 400",
            &format!("{L}?fieldValidation=Strict"),
            unknown.clone(),
        ),
        post(
            "unknown field, default (warn): created without it",
            L,
            unknown,
        ),
        send_as(
            "malformed JSON: 400",
            "POST",
            L,
            "application/json",
            "{\"apiVersion\":".into(),
        )
        .ignore("/message", "embeds Go's encoding/json error text"),
        post(
            "invalid namespace name: 422",
            "/api/v1/namespaces",
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "Bad.Name"}}),
        ),
        post(
            "service name that is no DNS-1035 label: 422",
            SVCS,
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "9svc"},
                   "spec": {"ports": [{"port": 80}]}}),
        ),
    ])
    .await;
}

#[tokio::test]
async fn d_dry_run_and_generate_name() {
    check(&[
        post(
            "dry-run create",
            &format!("{L}?dryRun=All"),
            lease("dry", "x"),
        ),
        get("nothing stored", &format!("{L}/dry")),
        post(
            "generateName",
            L,
            json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                   "metadata": {"generateName": "gen-"}, "spec": {}}),
        )
        .ignore(
            "/metadata/name",
            "random suffix (alphabet checked in fidelity_api)",
        ),
    ])
    .await;
}

// ---------------------------------------------------------------------------------------------
// Lists (fidelity 33, 34, 41)

#[tokio::test]
async fn d_list_selectors_and_pagination() {
    let mut s = vec![];
    for (name, labels) in [
        ("a", json!({"app": "x", "tier": "1"})),
        ("b", json!({"app": "y"})),
        ("c", json!({"app": "x"})),
        ("d", json!({"other": "z"})),
        ("e", json!({"app": "w", "tier": "2"})),
    ] {
        s.push(post(&format!("create {name}"), L, labelled(name, labels)));
    }
    for (label, q) in [
        ("app=x", "labelSelector=app%3Dx"),
        ("app==x", "labelSelector=app%3D%3Dx"),
        ("app!=x", "labelSelector=app!%3Dx"),
        ("app in (x,y)", "labelSelector=app%20in%20(x,y)"),
        ("app notin (x)", "labelSelector=app%20notin%20(x)"),
        ("tier", "labelSelector=tier"),
        ("!tier", "labelSelector=!tier"),
        ("app=x,tier", "labelSelector=app%3Dx,tier"),
        ("bad selector", "labelSelector=app%3D%3D%3Dx"),
        ("metadata.name=b", "fieldSelector=metadata.name%3Db"),
        ("metadata.name!=b", "fieldSelector=metadata.name!%3Db"),
        (
            "metadata.namespace",
            "fieldSelector=metadata.namespace%3D{ns}",
        ),
        (
            "unknown field selector",
            "fieldSelector=spec.holderIdentity%3Dh",
        ),
    ] {
        s.push(get(&format!("list {label}"), &format!("{L}?{q}")));
    }
    s.push(get("limit=2", &format!("{L}?limit=2")).save("c1", "/metadata/continue"));
    s.push(
        get("second page", &format!("{L}?limit=2&continue={{c1}}"))
            .save("c2", "/metadata/continue"),
    );
    s.push(get("last page", &format!("{L}?limit=2&continue={{c2}}")));
    s.push(
        get(
            "malformed continue token: 400",
            &format!("{L}?limit=2&continue=garbage"),
        )
        .ignore(
            "/message",
            "names the decoding error differently (docs/fidelity.md)",
        ),
    );
    s.push(get(
        "limit with selector",
        &format!("{L}?limit=1&labelSelector=app%3Dx"),
    ));
    check(&s).await;
}

// ---------------------------------------------------------------------------------------------
// Watch (fidelity 35–41)

#[tokio::test]
async fn d_watch_from_a_resource_version() {
    let w = format!("{L}?watch=true&resourceVersion={{rv0}}");
    check(&[
        post("create a", L, labelled("a", json!({"app": "x"})))
            .save("rv0", "/metadata/resourceVersion"),
        patch(
            "holder of a",
            &format!("{L}/a"),
            "merge",
            json!({"spec": {"holderIdentity": "b"}}),
        ),
        post("create b", L, labelled("b", json!({"app": "y"}))),
        patch(
            "a leaves app=x",
            &format!("{L}/a"),
            "merge",
            json!({"metadata": {"labels": {"app": "z"}}}),
        ),
        patch(
            "a no-op patch: no event",
            &format!("{L}/a"),
            "merge",
            json!({"metadata": {"labels": {"app": "z"}}}),
        ),
        delete("delete b", &format!("{L}/b")),
        watch("every change after rv0, in order", &w, 4, 2500),
        watch(
            "the same with app=x: leaving the selector is DELETED",
            &format!("{w}&labelSelector=app%3Dx"),
            4,
            2500,
        ),
        watch(
            "resourceVersion=0: the current state as ADDED",
            &format!("{L}?watch=true&resourceVersion=0"),
            4,
            2000,
        ),
        get(
            "sendInitialEvents: 422 while the WatchList gate is off (the 1.33 default)",
            &format!(
                "{L}?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"
            ),
        ),
        get(
            "sendInitialEvents without NotOlderThan: 422",
            &format!("{L}?watch=true&sendInitialEvents=true"),
        ),
    ])
    .await;
}

#[tokio::test]
async fn d_watch_bookmarks_and_timeout() {
    check(&[
        post("create", L, lease("a", "x")).save("rv0", "/metadata/resourceVersion"),
        post("another", L, lease("b", "x")),
        // Whether the cacher's bookmark shortly before the timeout arrives depends on its
        // one-second timer (seen both ways on a real apiserver): bookmarks are left out here;
        // the stream must carry the change and then end.
        watch(
            "allowWatchBookmarks with timeoutSeconds=4: events until the stream ends",
            &format!(
                "{L}?watch=true&resourceVersion={{rv0}}&allowWatchBookmarks=true&timeoutSeconds=4"
            ),
            10,
            7000,
        )
        .keep_events(|e| e["type"] != "BOOKMARK"),
        watch(
            "no bookmarks without the flag",
            &format!("{L}?watch=true&resourceVersion={{rv0}}&timeoutSeconds=3"),
            10,
            6000,
        ),
    ])
    .await;
}

/// 410 for a resourceVersion older than the kept history: the simulator keeps only 20 changes
/// here; a fresh kube-apiserver's watch cache starts at its own start-up, so resourceVersion 1
/// is older on both.
#[tokio::test]
async fn d_watch_from_a_compacted_resource_version() {
    let Some((sim, real)) = pair_with(SimOptions {
        history: 20,
        ..mirror_options()
    })
    .await
    else {
        return;
    };
    let mut s = vec![];
    for i in 0..25 {
        s.push(post(
            &format!("create {i}"),
            CMS,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("c{i}")}}),
        ));
    }
    s.push(watch(
        "watch from resourceVersion 1: one ERROR event with 410 Expired, then the end",
        &format!("{CMS}?watch=true&resourceVersion=1"),
        5,
        3000,
    ));
    diff::compare((&sim, &sim.ns), (&real, &real.ns), &s).await;
}

// ---------------------------------------------------------------------------------------------
// Patches and server-side apply (fidelity 21–25)

#[tokio::test]
async fn d_patches() {
    let p = format!("{PODS}/p");
    check(&[
        pod_step(post("create pod", PODS, pod("p"))),
        pod_step(patch(
            "strategic: containers merge by name (only images may change)",
            &p,
            "strategic",
            json!({"spec": {"containers": [{"name": "side", "image": "example/side:2"}]}}),
        )),
        patch(
            "strategic: a changed port name is a forbidden pod update",
            &p,
            "strategic",
            json!({"spec": {"containers": [{"name": "app", "ports": [{"containerPort": 8080, "name": "web"}]}]}}),
        )
        .ignore("/message", "the apiserver appends Go's diff of the two PodSpecs")
        .ignore("/details/causes/0/message", "the same diff"),
        patch(
            "strategic: $patch delete of a container is a forbidden pod update",
            &p,
            "strategic",
            json!({"metadata": {"labels": {"x": "1"}}, "spec": {"containers": [{"name": "side", "$patch": "delete"}]}}),
        ),
        pod_step(patch(
            "strategic: finalizers are a set",
            &p,
            "strategic",
            json!({"metadata": {"finalizers": ["a.example/x", "a.example/y"]}}),
        )),
        pod_step(patch(
            "strategic: $deleteFromPrimitiveList",
            &p,
            "strategic",
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a.example/x"]}}),
        )),
        pod_step(patch(
            "JSON merge: null deletes, lists replaced",
            &p,
            "merge",
            json!({"metadata": {"labels": {"x": null}, "finalizers": null}}),
        )),
        service_step(post(
            "service",
            SVCS,
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
                   "spec": {"ports": [{"name": "a", "port": 80}, {"name": "b", "port": 81}]}}),
        )),
        service_step(patch(
            "strategic: service ports merge by port",
            &format!("{SVCS}/s"),
            "strategic",
            json!({"spec": {"ports": [{"port": 81, "targetPort": 9090}, {"name": "c", "port": 82}]}}),
        )),
        post("create lease", L, labelled("l", json!({"a": "1"}))),
        patch(
            "JSON patch: test, copy, move, add, remove",
            &format!("{L}/l"),
            "json",
            json!([
                {"op": "test", "path": "/metadata/labels/a", "value": "1"},
                {"op": "copy", "from": "/metadata/labels/a", "path": "/metadata/labels/b"},
                {"op": "move", "from": "/metadata/labels/a", "path": "/metadata/labels/c"},
                {"op": "add", "path": "/spec/holderIdentity", "value": "j"},
                {"op": "remove", "path": "/spec/leaseDurationSeconds"}
            ]),
        ),
        patch(
            "JSON patch: failing test",
            &format!("{L}/l"),
            "json",
            json!([{"op": "test", "path": "/metadata/labels/b", "value": "nope"}]),
        ),
        patch(
            "JSON patch: path that does not exist",
            &format!("{L}/l"),
            "json",
            json!([{"op": "replace", "path": "/spec/nothing/here", "value": 1}]),
        ),
        patch(
            "merge patch with a stale resourceVersion: 409",
            &format!("{L}/l"),
            "merge",
            json!({"metadata": {"resourceVersion": "1"}, "spec": {"holderIdentity": "k"}}),
        ),
        patch(
            "patch of a missing object: 404",
            &format!("{L}/missing"),
            "merge",
            json!({"spec": {"holderIdentity": "k"}}),
        ),
    ])
    .await;
}

#[tokio::test]
async fn d_server_side_apply() {
    let s = format!("{L}/s");
    let alice = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "s", "labels": {"owner": "alice"}},
        "spec": {"holderIdentity": "alice", "leaseDurationSeconds": 10}});
    let bob = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "s"}, "spec": {"holderIdentity": "bob"}});
    let mut with_mf = alice.clone();
    with_mf["metadata"]["managedFields"] = json!([{"manager": "x", "operation": "Apply"}]);
    check(&[
        patch(
            "apply without fieldManager: 422",
            &s,
            "apply",
            alice.clone(),
        ),
        patch(
            "apply creates (201) with managedFields",
            &format!("{s}?fieldManager=alice"),
            "apply",
            alice.clone(),
        ),
        patch(
            "bob changes alice's field: 409 with conflict causes",
            &format!("{s}?fieldManager=bob"),
            "apply",
            bob.clone(),
        ),
        patch(
            "bob forces it",
            &format!("{s}?fieldManager=bob&force=true"),
            "apply",
            bob,
        ),
        patch(
            "alice re-applies without holderIdentity: she gives it up, bob keeps it",
            &format!("{s}?fieldManager=alice"),
            "apply",
            json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": "s", "labels": {"owner": "alice"}},
                "spec": {"leaseDurationSeconds": 10}}),
        ),
        patch(
            "alice drops her label: removed",
            &format!("{s}?fieldManager=alice"),
            "apply",
            json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": "s"}, "spec": {"leaseDurationSeconds": 10}}),
        )
        .save("rv", "/metadata/resourceVersion"),
        patch(
            "managedFields in the body: 400",
            &format!("{s}?fieldManager=alice"),
            "apply",
            with_mf,
        ),
        patch(
            "force on a merge patch: 422",
            &format!("{s}?fieldManager=x&force=true"),
            "merge",
            json!({"spec": {"holderIdentity": "c"}}),
        ),
        put(
            "an update is recorded as operation Update",
            &s,
            json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": "s", "resourceVersion": "{rv}"},
                "spec": {"holderIdentity": "carol", "leaseDurationSeconds": 10}}),
        ),
    ])
    .await;
}

// ---------------------------------------------------------------------------------------------
// Status, delete, finalizers (fidelity 27–30)

#[tokio::test]
async fn d_status_subresource_and_deletes() {
    let p = format!("{PODS}/p");
    let mut running = pod("p");
    running["status"] = json!({"phase": "Running", "podIP": "10.244.0.9"});
    check(&[
        pod_step(post("create pod: status dropped, Pending", PODS, running.clone())),
        pod_step(patch(
            "status patch",
            &format!("{p}/status"),
            "merge",
            json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}),
        )),
        pod_step(patch(
            "main resource patch ignores status",
            &p,
            "merge",
            json!({"metadata": {"labels": {"y": "1"}}, "status": {"phase": "Failed"}}),
        )),
        pod_step(patch(
            "status write ignores metadata labels and spec",
            &format!("{p}/status"),
            "merge",
            json!({"metadata": {"labels": {"z": "1"}}, "spec": {"activeDeadlineSeconds": 5}}),
        )),
        get("lease has no status subresource: 404", &format!("{L}/x/status")),
        post(
            "configmap with a finalizer",
            CMS,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "f", "finalizers": ["example.com/hold"]}}),
        )
        .save("uid", "/metadata/uid"),
        send_as(
            "delete with a wrong uid precondition: 409",
            "DELETE",
            &format!("{CMS}/f"),
            "application/json",
            json!({"kind": "DeleteOptions", "apiVersion": "v1",
                   "preconditions": {"uid": "00000000-0000-0000-0000-000000000000"}})
            .to_string(),
        ),
        send_as(
            "delete with a stale resourceVersion precondition: 409",
            "DELETE",
            &format!("{CMS}/f"),
            "application/json",
            json!({"kind": "DeleteOptions", "apiVersion": "v1",
                   "preconditions": {"resourceVersion": "1"}})
            .to_string(),
        ),
        delete("delete with a finalizer: deletionTimestamp set", &format!("{CMS}/f")),
        patch(
            "adding a finalizer while deleting: 422",
            &format!("{CMS}/f"),
            "merge",
            json!({"metadata": {"finalizers": ["example.com/hold", "example.com/more"]}}),
        )
        .ignore("/details/causes/1", "the apiserver repeats the cause (validated twice)"),
        patch(
            "finalizers emptied: gone",
            &format!("{CMS}/f"),
            "merge",
            json!({"metadata": {"finalizers": null}}),
        )
        .ignore(
            "/metadata/resourceVersion",
            "the apiserver answers with the last stored version, the simulator with the deletion's (docs/fidelity.md)",
        ),
        get("gone", &format!("{CMS}/f")),
        pod_step(delete(
            "delete an unscheduled pod: the object, removed at once",
            &p,
        )),
        get("pod gone", &p),
    ])
    .await;
}

// ---------------------------------------------------------------------------------------------
// Resource shapes (fidelity 6, 43–48)

#[tokio::test]
async fn d_lease_shape() {
    let mut full = lease("full", "pod-0");
    full["spec"]["acquireTime"] = json!("2026-01-01T00:00:00.000000Z");
    full["spec"]["renewTime"] = json!("2026-01-01T00:00:01.123456Z");
    full["spec"]["leaseTransitions"] = json!(3);
    full["spec"]["strategy"] = json!("OldestEmulationVersion");
    full["spec"]["preferredHolder"] = json!("pod-1");
    let mut nanos = lease("nanos", "x");
    nanos["spec"]["renewTime"] = json!("2026-01-01T00:00:01.123456789Z");
    let mut release = lease("rel", "");
    release["spec"]["leaseDurationSeconds"] = json!(1);
    check(&[
        post("MicroTimes; strategy and preferredHolder dropped", L, full),
        get("read back", &format!("{L}/full")),
        post("more than six fractional digits", L, nanos),
        post("a client-go release (empty holder)", L, release),
        get("as a Table", L).header("accept", TABLE),
    ])
    .await;
}

#[tokio::test]
async fn d_pods_services_and_tables() {
    check(&[
        pod_step(post("pod", PODS, pod("p"))),
        get("pods as a Table", PODS)
            .header("accept", TABLE)
            .ignore("/rows/0/object/metadata/managedFields", "as pod_step"),
        pod_step(get(
            "pod as PartialObjectMetadata",
            &format!("{PODS}/p"),
        ))
        .header(
            "accept",
            "application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io",
        ),
        service_step(post(
            "ClusterIP service",
            SVCS,
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
                   "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]}}),
        )),
        service_step(post(
            "headless service",
            SVCS,
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "hl"},
                   "spec": {"clusterIP": "None", "selector": {"app": "web"}, "ports": [{"port": 80}]}}),
        )),
        service_step(post(
            "LoadBalancer service",
            SVCS,
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "lb"},
                   "spec": {"type": "LoadBalancer", "selector": {"app": "web"}, "ports": [{"port": 80}]}}),
        ))
        .ignore("/spec/ports/0/nodePort", "allocated at random"),
        post(
            "events.k8s.io Event",
            "/apis/events.k8s.io/v1/namespaces/{ns}/events",
            json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
                   "metadata": {"name": "e1"}, "eventTime": "2026-01-01T00:00:00.000000Z",
                   "reportingController": "leasehold", "reportingInstance": "leasehold-1",
                   "action": "Moved", "reason": "Moved", "type": "Normal", "note": "moved",
                   "regarding": {"kind": "Pod", "namespace": "{ns}", "name": "p", "apiVersion": "v1"}}),
        )
        .ignore("/metadata/managedFields", "recorded in the core/v1 form by the simulator")
        .ignore("/deprecatedFirstTimestamp", "Go zero values of the other version's fields")
        .ignore("/deprecatedLastTimestamp", "Go zero values")
        .ignore("/deprecatedSource", "Go zero values"),
        get(
            "the same Event as core/v1",
            "/api/v1/namespaces/{ns}/events/e1",
        )
        .ignore("/metadata/managedFields", "kept in the events.k8s.io form by the apiserver")
        .ignore("/firstTimestamp", "Go zero values of the other version's fields")
        .ignore("/lastTimestamp", "Go zero values")
        .ignore("/source", "Go zero values"),
    ])
    .await;
}

/// v1 Endpoints as gnmic's Kubernetes locker and kubectl use them (issue 33): create with the
/// port protocol defaulted, validation (loopback and link-local IPs, ports, empty subsets),
/// create-on-update, the printers' column, a watch of one Endpoints by name with a timeout, and
/// kubectl's deprecation warning.
#[tokio::test]
async fn d_endpoints() {
    const EPS: &str = "/api/v1/namespaces/{ns}/endpoints";
    let ep = |name: &str, ip: &str| {
        json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": name},
               "subsets": [{"addresses": [{"ip": ip}], "ports": [{"name": "api", "port": 7890}]}]})
    };
    check(&[
        post("endpoints", EPS, ep("web", "10.1.2.3")).save("rv0", "/metadata/resourceVersion"),
        post("a loopback address: 422", EPS, ep("lo", "127.0.0.1")),
        post(
            "no addresses, a link-local address, bad ports: 422",
            EPS,
            json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "bad"},
                   "subsets": [{"ports": [{"port": 80}]},
                               {"addresses": [{"ip": "169.254.1.1"}],
                                "ports": [{"name": "a", "port": 0}, {"port": 81, "protocol": "HTTP"}]}]}),
        ),
        put("PUT of a missing one creates it", &format!("{EPS}/by-put"), ep("by-put", "10.1.2.4")),
        post(
            "addresses out of order, two subsets with the same ports: stored as written or repacked",
            EPS,
            json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "order"},
                   "subsets": [{"addresses": [{"ip": "10.1.2.9"}, {"ip": "10.1.2.1"}], "ports": [{"port": 80}]},
                               {"addresses": [{"ip": "10.1.2.5"}], "ports": [{"port": 80}]}]}),
        ),
        put(
            "an update adding an address",
            &format!("{EPS}/web"),
            json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "web"},
                   "subsets": [{"addresses": [{"ip": "10.1.2.3"}, {"ip": "10.1.2.5"}],
                                "ports": [{"name": "api", "port": 7890, "protocol": "TCP"}]}]}),
        ),
        get("as a Table", EPS).header("accept", TABLE),
        watch(
            "one Endpoints by name from rv0, with a timeout (gnmic's watch)",
            &format!("{EPS}?watch=true&fieldSelector=metadata.name%3Dweb&resourceVersion={{rv0}}&timeoutSeconds=2"),
            2,
            2500,
        ),
        kubectl("kubectl get endpoints", &["get", "endpoints", "web", "-o", "name"]),
    ])
    .await;
}

#[tokio::test]
async fn d_token_and_access_reviews() {
    let sar = |user: &str, groups: Value, verb: &str| {
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
               "spec": {"user": user, "groups": groups,
                        "resourceAttributes": {"verb": verb, "group": "coordination.k8s.io",
                                               "resource": "leases", "namespace": "{ns}"}}})
    };
    check(&[
        post(
            "TokenReview of a known token",
            "/apis/authentication.k8s.io/v1/tokenreviews",
            json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                   "spec": {"token": "viewer-token"}}),
        ),
        post(
            "TokenReview of an unknown token",
            "/apis/authentication.k8s.io/v1/tokenreviews",
            json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                   "spec": {"token": "not-a-token"}}),
        ),
        post(
            "SubjectAccessReview: a user without grants",
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            sar("nobody", json!(["system:authenticated"]), "list"),
        ),
        post(
            "SubjectAccessReview: system:masters",
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            sar("admin", json!(["system:masters", "system:authenticated"]), "delete"),
        ),
        post(
            "SelfSubjectAccessReview",
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
            json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                   "spec": {"resourceAttributes": {"verb": "get", "resource": "pods", "namespace": "{ns}"}}}),
        ),
        get(
            "reviews are create-only: GET is 405",
            "/apis/authentication.k8s.io/v1/tokenreviews",
        ),
    ])
    .await;
}

// ---------------------------------------------------------------------------------------------
// Discovery (fidelity 1–3)

/// Keeps only the entries (resources or groups) the simulator serves, so the real apiserver's
/// many other kinds do not count.
fn keep_served(v: &mut Value) {
    const SERVED: &[&str] = &[
        "namespaces",
        "namespaces/status",
        "namespaces/finalize",
        "pods",
        "pods/status",
        "services",
        "services/status",
        "endpoints",
        "configmaps",
        "secrets",
        "events",
        "leases",
        "endpointslices",
        "tokenreviews",
        "subjectaccessreviews",
        "selfsubjectaccessreviews",
        "localsubjectaccessreviews",
    ];
    const GROUPS: &[&str] = &[
        "coordination.k8s.io",
        "discovery.k8s.io",
        "events.k8s.io",
        "authentication.k8s.io",
        "authorization.k8s.io",
    ];
    if let Some(rs) = v.get_mut("resources").and_then(Value::as_array_mut) {
        rs.retain(|r| SERVED.contains(&r["name"].as_str().unwrap_or_default()));
    }
    if let Some(gs) = v.get_mut("groups").and_then(Value::as_array_mut) {
        gs.retain(|g| GROUPS.contains(&g["name"].as_str().unwrap_or_default()));
        // A group's other versions (betas) are beyond the simulator.
        for g in gs {
            if let Some(vs) = g.get_mut("versions").and_then(Value::as_array_mut) {
                vs.retain(|x| x["version"] == "v1");
            }
        }
    }
}

#[tokio::test]
async fn d_discovery() {
    let mut steps = vec![
        get("/api", "/api"),
        get("/api/v1 (served kinds)", "/api/v1").keep(keep_served),
        get("/apis (served groups)", "/apis").keep(keep_served),
    ];
    for g in [
        "coordination.k8s.io",
        "discovery.k8s.io",
        "events.k8s.io",
        "authentication.k8s.io",
        "authorization.k8s.io",
    ] {
        steps.push(get(g, &format!("/apis/{g}/v1")).keep(keep_served));
    }
    steps.push(get("/version", "/version"));
    check(&steps).await;
}

// ---------------------------------------------------------------------------------------------
// kubectl (fidelity 4, 6, 45)

#[tokio::test]
async fn d_kubectl_get_apply_patch_delete() {
    let yaml = "apiVersion: coordination.k8s.io/v1
kind: Lease
metadata:
  name: app-leader
  labels: {tier: control}
spec:
  holderIdentity: pod-0
  leaseDurationSeconds: 15
";
    check(&[
        kubectl_stdin("apply (create)", &["apply", "-f", "-"], yaml),
        kubectl_stdin("apply again (unchanged)", &["apply", "-f", "-"], yaml),
        kubectl_stdin(
            "apply a change",
            &["apply", "-f", "-"],
            &yaml.replace("pod-0", "pod-1"),
        ),
        kubectl("get leases", &["get", "leases"]),
        kubectl(
            "get leases -o wide",
            &["get", "leases", "-o", "wide", "--show-labels"],
        ),
        kubectl(
            "get lease -o json",
            &["get", "lease", "app-leader", "-o", "json"],
        ),
        kubectl(
            "patch --type merge",
            &[
                "patch",
                "lease",
                "app-leader",
                "--type",
                "merge",
                "-p",
                r#"{"spec":{"holderIdentity":""}}"#,
            ],
        ),
        kubectl(
            "patch (strategic) a lease",
            &[
                "patch",
                "lease",
                "app-leader",
                "-p",
                r#"{"metadata":{"labels":{"x":"y"}}}"#,
            ],
        ),
        kubectl(
            "label",
            &["label", "lease", "app-leader", "tier-", "team=a"],
        ),
        kubectl(
            "annotate",
            &["annotate", "lease", "app-leader", "note=hello"],
        ),
        kubectl(
            "get after the changes",
            &["get", "lease", "app-leader", "-o", "json"],
        ),
        kubectl("get a missing lease", &["get", "lease", "nope"]),
        kubectl(
            "create configmap",
            &["create", "configmap", "cm", "--from-literal=k=v"],
        ),
        kubectl("get configmaps", &["get", "configmaps"]),
        kubectl("delete lease", &["delete", "lease", "app-leader"]),
        kubectl("delete it again", &["delete", "lease", "app-leader"]),
        kubectl("get leases when there are none", &["get", "leases"]),
        kubectl("auth can-i", &["auth", "can-i", "create", "leases"]),
    ])
    .await;
}
