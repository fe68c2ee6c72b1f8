//! Fidelity tests for sections D–G of `kubernetes-fidelity.md` (behaviours 27–50): status and
//! delete semantics, list and watch, resource-specific rules and the fake kubelet — through raw
//! HTTP, kube-rs (`Api`, `watcher`, `reflector`, `metadata_watcher`, `Recorder`) and kubectl.
//! Each test is named after the behaviour it checks.
use kube_sim::sim_only;
use kube_sim::testkit as common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::{TestSim, eventually, mk_lease, mk_pod};
use futures::{StreamExt, TryStreamExt};
use http_body_util::BodyExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{
    DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions, WatchEvent,
    WatchParams,
};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube_sim::SimOptions;
use serde_json::{Value, json};

const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases";
const ALL_LEASES: &str = "/apis/coordination.k8s.io/v1/leases";
const PODS: &str = "/api/v1/namespaces/{ns}/pods";
const CONFIGMAPS: &str = "/api/v1/namespaces/{ns}/configmaps";
const JSON: Option<&str> = Some("application/json");
const MERGE: Option<&str> = Some("application/merge-patch+json");
const TABLE_ACCEPT: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
/// Upper bound for anything that should happen "at once".
const SOON: Duration = Duration::from_secs(3);

// ---------------------------------------------------------------------------------------------
// Helpers

fn bytes(v: &Value) -> Vec<u8> {
    serde_json::to_vec(v).unwrap()
}

fn rv(v: &Value) -> u64 {
    v["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_else(|| panic!("no resourceVersion in {v}"))
        .parse()
        .unwrap()
}

fn name(v: &Value) -> &str {
    v["metadata"]["name"].as_str().unwrap_or_default()
}

async fn create(t: &TestSim, path: &str, v: &Value) -> Value {
    let (code, body) = t.raw("POST", path, JSON, bytes(v)).await;
    assert_eq!(code, 201, "creating at {path}: {body}");
    body
}

async fn get(t: &TestSim, path: &str) -> (u16, Value) {
    t.raw("GET", path, None, vec![]).await
}

async fn merge(t: &TestSim, path: &str, patch: Value) -> Value {
    let (code, body) = t.raw("PATCH", path, MERGE, bytes(&patch)).await;
    assert_eq!(code, 200, "patching {path}: {body}");
    body
}

async fn make_namespace(t: &TestSim, ns: &str) -> Value {
    create(
        t,
        "/api/v1/namespaces",
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
    )
    .await
}

fn lease_with_labels(n: &str, labels: Value) -> Value {
    let mut l = mk_lease(n, "holder");
    l["metadata"]["labels"] = labels;
    l
}

fn scheduled_pod(n: &str, labels: Value, grace: i64) -> Value {
    let mut p = mk_pod(n, labels);
    p["spec"]["nodeName"] = json!(kube_sim::kubelet::NODE_NAME);
    p["spec"]["terminationGracePeriodSeconds"] = json!(grace);
    p
}

/// Sends a request with extra headers and returns the streaming response.
async fn send(
    t: &TestSim,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> http::Response<kube::client::Body> {
    let mut req = http::Request::builder().method(method).uri(t.p(path));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req
        .body(kube::client::Body::from(Vec::<u8>::new()))
        .unwrap();
    t.client.send(req).await.expect("request sent")
}

/// A raw watch stream: newline-delimited JSON events read frame by frame.
struct RawWatch {
    status: u16,
    headers: http::HeaderMap,
    body: kube::client::Body,
    buf: Vec<u8>,
    /// Every frame received, for framing checks.
    frames: Vec<Vec<u8>>,
    ended: bool,
}

impl RawWatch {
    async fn open(t: &TestSim, path: &str) -> Self {
        Self::open_with(t, path, &[]).await
    }

    async fn open_with(t: &TestSim, path: &str, headers: &[(&str, &str)]) -> Self {
        let resp = send(t, "GET", path, headers).await;
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        Self {
            status,
            headers,
            body: resp.into_body(),
            buf: Vec::new(),
            frames: Vec::new(),
            ended: false,
        }
    }

    /// The next event; `Ok(None)` when the stream ended, `Err` when nothing came in `wait`.
    async fn try_next(&mut self, wait: Duration) -> Result<Option<Value>, ()> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if let Some(pos) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=pos).collect();
                let v: Value =
                    serde_json::from_slice(&line[..line.len() - 1]).unwrap_or_else(|e| {
                        panic!(
                            "watch line is not one JSON object ({e}): {}",
                            String::from_utf8_lossy(&line)
                        )
                    });
                return Ok(Some(v));
            }
            if self.ended {
                assert!(
                    self.buf.is_empty(),
                    "watch stream ended inside a line: {}",
                    String::from_utf8_lossy(&self.buf)
                );
                return Ok(None);
            }
            match tokio::time::timeout_at(deadline, self.body.frame()).await {
                Err(_) => return Err(()),
                Ok(None) => self.ended = true,
                Ok(Some(Err(e))) => panic!("watch stream failed: {e}"),
                Ok(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data() {
                        self.frames.push(data.to_vec());
                        self.buf.extend_from_slice(&data);
                    }
                }
            }
        }
    }

    /// The next event, which must come within `SOON`.
    async fn next(&mut self) -> Value {
        match self.try_next(SOON).await {
            Ok(Some(v)) => v,
            Ok(None) => panic!("watch stream ended while an event was expected"),
            Err(()) => panic!("no watch event within {SOON:?}"),
        }
    }

    /// Asserts that nothing arrives within `wait` (the stream stays open and quiet).
    async fn expect_quiet(&mut self, wait: Duration) {
        if let Ok(v) = self.try_next(wait).await {
            panic!("expected no watch event, got {v:?}");
        }
    }

    /// Asserts that the stream ends (cleanly) within `wait`.
    async fn expect_end(&mut self, wait: Duration) {
        match self.try_next(wait).await {
            Ok(None) => {}
            Ok(Some(v)) => panic!("expected the watch to end, got {v}"),
            Err(()) => panic!("watch did not end within {wait:?}"),
        }
    }
}

/// `(type, name)` of a watch event.
fn brief(e: &Value) -> (String, String) {
    (
        e["type"].as_str().unwrap_or_default().to_owned(),
        name(&e["object"]).to_owned(),
    )
}

fn briefs(es: &[Value]) -> Vec<(String, String)> {
    es.iter().map(brief).collect()
}

fn pair(t: &str, n: &str) -> (String, String) {
    (t.to_owned(), n.to_owned())
}

/// Lease names in a list answer, in order.
fn names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| name(i).to_owned())
        .collect()
}

fn status_of(e: &kube::Error) -> &kube::core::Status {
    match e {
        kube::Error::Api(s) => s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn assert_status(body: &Value, code: u16, reason: &str) {
    assert_eq!(body["kind"], "Status", "{body}");
    assert_eq!(body["apiVersion"], "v1", "{body}");
    assert_eq!(body["status"], "Failure", "{body}");
    assert_eq!(body["code"], code, "{body}");
    assert_eq!(body["reason"], reason, "{body}");
}

fn modified_msg(qualified: &str, n: &str) -> String {
    format!(
        "Operation cannot be fulfilled on {qualified} \"{n}\": the object has been modified; please apply your changes to the latest version and try again"
    )
}

// ---------------------------------------------------------------------------------------------
// D. Status, delete, finalizers

#[tokio::test]
async fn f27_status_subresource_changes_only_status_and_main_resource_ignores_status() {
    let t = common::start().await;
    let pod = create(&t, PODS, &mk_pod("p27", json!({"app": "x"}))).await;
    assert_eq!(pod["status"]["phase"], "Pending");

    // /status: the status change lands, the spec change is dropped.
    let mut s = pod.clone();
    s["status"]["phase"] = json!("Running");
    s["status"]["podIP"] = json!("10.244.0.9");
    s["spec"]["activeDeadlineSeconds"] = json!(30);
    let (code, after_status) = t
        .raw("PUT", &format!("{PODS}/p27/status"), JSON, bytes(&s))
        .await;
    assert_eq!(code, 200, "{after_status}");
    assert_eq!(after_status["status"]["phase"], "Running");
    assert_eq!(after_status["status"]["podIP"], "10.244.0.9");
    assert!(
        after_status["spec"].get("activeDeadlineSeconds").is_none(),
        "spec changed through /status: {after_status}"
    );
    assert!(rv(&after_status) > rv(&pod));

    // Main resource: the spec change lands, the status change is dropped.
    let mut m = after_status.clone();
    m["status"]["phase"] = json!("Failed");
    m["spec"]["containers"][0]["image"] = json!("example/app:2");
    let (code, after_main) = t.raw("PUT", &format!("{PODS}/p27"), JSON, bytes(&m)).await;
    assert_eq!(code, 200, "{after_main}");
    assert_eq!(
        after_main["spec"]["containers"][0]["image"],
        "example/app:2"
    );
    assert_eq!(
        after_main["status"]["phase"], "Running",
        "status changed through the main resource"
    );
    assert_eq!(after_main["status"]["podIP"], "10.244.0.9");

    // Both check resourceVersion: the stale bodies conflict.
    for (path, stale) in [
        (format!("{PODS}/p27/status"), &s),
        (format!("{PODS}/p27"), &m),
    ] {
        let mut stale = stale.clone();
        stale["metadata"]["resourceVersion"] = after_status["metadata"]["resourceVersion"].clone();
        stale["status"]["phase"] = json!("Succeeded");
        let (code, err) = t.raw("PUT", &path, JSON, bytes(&stale)).await;
        assert_eq!(code, 409, "{path}: {err}");
        assert_status(&err, 409, "Conflict");
        assert_eq!(err["message"], modified_msg("pods", "p27"));
        assert_eq!(err["details"], json!({"name": "p27", "kind": "pods"}));
    }
    // A resourceVersion in a /status patch is a precondition too.
    let patch = json!({"metadata": {"resourceVersion": pod["metadata"]["resourceVersion"]}, "status": {"phase": "Succeeded"}});
    let (code, err) = t
        .raw("PATCH", &format!("{PODS}/p27/status"), MERGE, bytes(&patch))
        .await;
    assert_eq!(code, 409, "{err}");
    assert_eq!(err["message"], modified_msg("pods", "p27"));

    let (_, now) = get(&t, &format!("{PODS}/p27")).await;
    assert_eq!(now["status"]["phase"], "Running");
    assert_eq!(rv(&now), rv(&after_main));

    // kube-rs: patch_status changes status only.
    let pods: Api<Pod> = Api::default_namespaced(t.client.clone());
    let p = pods
        .patch_status(
            "p27",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"activeDeadlineSeconds": 5}, "status": {"phase": "Succeeded"}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(p.status.unwrap().phase.as_deref(), Some("Succeeded"));
    assert_eq!(p.spec.unwrap().active_deadline_seconds, None);
}

#[tokio::test]
async fn f28_delete_returns_pods_and_a_status_for_leases_and_watchers_get_deleted_with_a_new_rv() {
    let t = common::start().await;
    let lease = create(&t, LEASES, &mk_lease("l28", "a")).await;
    let mut w = RawWatch::open(
        &t,
        &format!("{LEASES}?watch=true&resourceVersion={}", rv(&lease)),
    )
    .await;
    let (code, answer) = t
        .raw("DELETE", &format!("{LEASES}/l28"), None, vec![])
        .await;
    assert_eq!(code, 200, "{answer}");
    assert_eq!(
        answer,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
               "details": {"name": "l28", "group": "coordination.k8s.io", "kind": "leases", "uid": lease["metadata"]["uid"]}})
    );
    let ev = w.next().await;
    assert_eq!(brief(&ev), pair("DELETED", "l28"));
    assert!(
        rv(&ev["object"]) > rv(&lease),
        "DELETED must carry a new resourceVersion: {ev}"
    );
    assert_eq!(ev["object"]["spec"]["holderIdentity"], "a");
    let (_, list) = get(&t, LEASES).await;
    if t.is_real() {
        // Other writers (the apiserver's own Lease, parallel tests) may have come after.
        assert!(rv(&list) >= rv(&ev["object"]), "{list}");
    } else {
        assert_eq!(
            rv(&list),
            rv(&ev["object"]),
            "the deletion is the newest change"
        );
    }

    // A kind without a registry-specific answer: Status without a group.
    let cm = create(
        &t,
        CONFIGMAPS,
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c28"}}),
    )
    .await;
    let (code, answer) = t
        .raw("DELETE", &format!("{CONFIGMAPS}/c28"), None, vec![])
        .await;
    assert_eq!(code, 200);
    assert_eq!(
        answer["details"],
        json!({"name": "c28", "kind": "configmaps", "uid": cm["metadata"]["uid"]})
    );

    // Pods answer with the object.
    let pod = create(&t, PODS, &mk_pod("p28", json!({}))).await;
    let mut pw = RawWatch::open(
        &t,
        &format!("{PODS}?watch=true&resourceVersion={}", rv(&pod)),
    )
    .await;
    let (code, answer) = t.raw("DELETE", &format!("{PODS}/p28"), None, vec![]).await;
    assert_eq!(code, 200, "{answer}");
    assert_eq!(answer["kind"], "Pod");
    assert_eq!(answer["apiVersion"], "v1");
    assert_eq!(answer["metadata"]["uid"], pod["metadata"]["uid"]);
    // (kube-apiserver first records deletionTimestamp with a MODIFIED, then deletes.)
    let mut ev = pw.next().await;
    if ev["type"] == "MODIFIED" {
        assert!(ev["object"]["metadata"]["deletionTimestamp"].is_string());
        ev = pw.next().await;
    }
    assert_eq!(brief(&ev), pair("DELETED", "p28"));
    assert!(rv(&ev["object"]) > rv(&pod));

    // kube-rs tells the two answers apart.
    let leases: Api<Lease> = Api::default_namespaced(t.client.clone());
    leases
        .create(
            &PostParams::default(),
            &serde_json::from_value(mk_lease("l28b", "a")).unwrap(),
        )
        .await
        .unwrap();
    let res = leases
        .delete("l28b", &DeleteParams::default())
        .await
        .unwrap();
    assert!(res.is_right(), "a lease delete answers with a Status");
    let pods: Api<Pod> = Api::default_namespaced(t.client.clone());
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(mk_pod("p28b", json!({}))).unwrap(),
    )
    .await
    .unwrap();
    let res = pods.delete("p28b", &DeleteParams::default()).await.unwrap();
    assert_eq!(
        res.left()
            .expect("a pod delete answers with the pod")
            .metadata
            .name
            .as_deref(),
        Some("p28b")
    );
}

#[tokio::test]
async fn f29_finalizers_hold_a_deleted_object_until_they_are_emptied() {
    let t = common::start().await;
    let mut l = mk_lease("l29", "a");
    l["metadata"]["finalizers"] = json!(["example.com/hold"]);
    let lease = create(&t, LEASES, &l).await;
    let mut w = RawWatch::open(
        &t,
        &format!("{LEASES}?watch=true&resourceVersion={}", rv(&lease)),
    )
    .await;

    let (code, answer) = t
        .raw("DELETE", &format!("{LEASES}/l29"), None, vec![])
        .await;
    assert_eq!(code, 200, "{answer}");
    // With finalizers pending the answer is the object, not a Status.
    assert_eq!(answer["kind"], "Lease");
    assert!(
        answer["metadata"]["deletionTimestamp"].is_string(),
        "{answer}"
    );
    assert_eq!(answer["metadata"]["deletionGracePeriodSeconds"], 0);
    let ev = w.next().await;
    assert_eq!(brief(&ev), pair("MODIFIED", "l29"));
    assert_eq!(
        ev["object"]["metadata"]["deletionTimestamp"],
        answer["metadata"]["deletionTimestamp"]
    );
    let (code, still) = get(&t, &format!("{LEASES}/l29")).await;
    assert_eq!(code, 200);
    assert_eq!(still["metadata"]["finalizers"], json!(["example.com/hold"]));

    // Deleting again changes nothing.
    let (code, again) = t
        .raw("DELETE", &format!("{LEASES}/l29"), None, vec![])
        .await;
    assert_eq!(code, 200);
    assert_eq!(rv(&again), rv(&still));

    // No new finalizer on an object being deleted.
    let (code, err) = t
        .raw(
            "PATCH",
            &format!("{LEASES}/l29"),
            MERGE,
            bytes(&json!({"metadata": {"finalizers": ["example.com/hold", "example.com/other"]}})),
        )
        .await;
    assert_eq!(code, 422, "{err}");
    assert_status(&err, 422, "Invalid");
    assert_eq!(
        err["message"],
        "Lease.coordination.k8s.io \"l29\" is invalid: metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{\"example.com/other\"}"
    );
    assert_eq!(err["details"]["causes"][0]["field"], "metadata.finalizers");
    assert_eq!(err["details"]["causes"][0]["reason"], "FieldValueForbidden");

    // Other updates are still allowed and keep it.
    let held = merge(
        &t,
        &format!("{LEASES}/l29"),
        json!({"spec": {"holderIdentity": "b"}}),
    )
    .await;
    assert_eq!(
        held["metadata"]["deletionTimestamp"],
        answer["metadata"]["deletionTimestamp"]
    );
    assert_eq!(brief(&w.next().await), pair("MODIFIED", "l29"));

    // Emptying the finalizers removes it.
    let gone = merge(
        &t,
        &format!("{LEASES}/l29"),
        json!({"metadata": {"finalizers": null}}),
    )
    .await;
    assert_eq!(name(&gone), "l29");
    let ev = w.next().await;
    assert_eq!(brief(&ev), pair("DELETED", "l29"));
    assert!(rv(&ev["object"]) > rv(&held));
    let (code, _) = get(&t, &format!("{LEASES}/l29")).await;
    assert_eq!(code, 404);
}

#[tokio::test]
async fn f30_failed_delete_preconditions_conflict() {
    let t = common::start().await;
    let lease = create(&t, LEASES, &mk_lease("l30", "a")).await;
    let uid = lease["metadata"]["uid"].as_str().unwrap().to_owned();
    let wrong_uid = json!({"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": "00000000-0000-0000-0000-000000000000"}});
    let wrong_rv = json!({"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"resourceVersion": "1"}});
    let lease_rv = rv(&lease);
    let expected = [
        format!(
            "Operation cannot be fulfilled on Lease.coordination.k8s.io \"l30\": the UID in the precondition (00000000-0000-0000-0000-000000000000) does not match the UID in record ({uid}). The object might have been deleted and then recreated"
        ),
        format!(
            "Operation cannot be fulfilled on Lease.coordination.k8s.io \"l30\": the ResourceVersion in the precondition (1) does not match the ResourceVersion in record ({lease_rv}). The object might have been modified"
        ),
    ];
    for (body, want) in [wrong_uid, wrong_rv].into_iter().zip(expected) {
        let (code, err) = t
            .raw("DELETE", &format!("{LEASES}/l30"), JSON, bytes(&body))
            .await;
        assert_eq!(code, 409, "{err}");
        assert_status(&err, 409, "Conflict");
        assert_eq!(
            err["details"],
            json!({"name": "l30", "group": "coordination.k8s.io", "kind": "Lease"})
        );
        assert_eq!(err["message"], want);
        let (code, _) = get(&t, &format!("{LEASES}/l30")).await;
        assert_eq!(code, 200, "a failed precondition deletes nothing");
    }
    // kube-rs preconditions: wrong ones conflict, right ones delete.
    let leases: Api<Lease> = Api::default_namespaced(t.client.clone());
    let dp = DeleteParams::default().preconditions(Preconditions {
        uid: Some("nope".into()),
        resource_version: None,
    });
    let err = leases.delete("l30", &dp).await.unwrap_err();
    assert_eq!(
        (status_of(&err).code, status_of(&err).reason.as_str()),
        (409, "Conflict")
    );
    let dp = DeleteParams::default().preconditions(Preconditions {
        uid: Some(uid),
        resource_version: Some(rv(&lease).to_string()),
    });
    leases.delete("l30", &dp).await.unwrap();
    let (code, _) = get(&t, &format!("{LEASES}/l30")).await;
    assert_eq!(code, 404);
}

#[tokio::test]
async fn f31_unscheduled_pods_go_at_once_scheduled_pods_wait_for_their_grace_period() {
    let t = common::start().await;
    // No nodeName: removed at once, whatever the grace period.
    create(&t, PODS, &mk_pod("p31-pending", json!({}))).await;
    let (code, _) = t
        .raw(
            "DELETE",
            &format!("{PODS}/p31-pending?gracePeriodSeconds=60"),
            None,
            vec![],
        )
        .await;
    assert_eq!(code, 200);
    assert_eq!(get(&t, &format!("{PODS}/p31-pending")).await.0, 404);

    // Scheduled: Terminating for spec.terminationGracePeriodSeconds.
    create(&t, PODS, &scheduled_pod("p31", json!({}), 45)).await;
    let before = jiff::Timestamp::now();
    let (code, answer) = t.raw("DELETE", &format!("{PODS}/p31"), None, vec![]).await;
    assert_eq!(code, 200, "{answer}");
    assert_eq!(answer["metadata"]["deletionGracePeriodSeconds"], 45);
    let at: jiff::Timestamp = answer["metadata"]["deletionTimestamp"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let ahead = at.as_second() - before.as_second();
    assert!(
        (44..=46).contains(&ahead),
        "deletionTimestamp should be ~45 s ahead, is {ahead} s"
    );
    let (code, still) = get(&t, &format!("{PODS}/p31")).await;
    assert_eq!(code, 200);
    assert_eq!(rv(&still), rv(&answer));
    // Deleting again with a longer (or no) grace period changes nothing.
    let (code, again) = t
        .raw(
            "DELETE",
            &format!("{PODS}/p31?gracePeriodSeconds=100"),
            None,
            vec![],
        )
        .await;
    assert_eq!(code, 200);
    assert_eq!(rv(&again), rv(&answer));
    // A shorter one shortens it.
    let (code, shorter) = t
        .raw(
            "DELETE",
            &format!("{PODS}/p31?gracePeriodSeconds=20"),
            None,
            vec![],
        )
        .await;
    assert_eq!(code, 200);
    assert_eq!(shorter["metadata"]["deletionGracePeriodSeconds"], 20);
    // ...by the difference, counted from the original request: 45 s → 20 s moves it 25 s back.
    let moved: jiff::Timestamp = shorter["metadata"]["deletionTimestamp"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(at.as_second() - moved.as_second(), 25);
    // gracePeriodSeconds=0 removes it now.
    let (code, _) = t
        .raw(
            "DELETE",
            &format!("{PODS}/p31?gracePeriodSeconds=0"),
            None,
            vec![],
        )
        .await;
    assert_eq!(code, 200);
    assert_eq!(get(&t, &format!("{PODS}/p31")).await.0, 404);

    // gracePeriodSeconds=0 in the body on the first delete.
    create(&t, PODS, &scheduled_pod("p31-now", json!({}), 45)).await;
    let (code, _) = t
        .raw(
            "DELETE",
            &format!("{PODS}/p31-now"),
            JSON,
            bytes(&json!({"gracePeriodSeconds": 0})),
        )
        .await;
    assert_eq!(code, 200);
    assert_eq!(get(&t, &format!("{PODS}/p31-now")).await.0, 404);
}

#[tokio::test]
async fn f32_deleting_a_namespace_terminates_it_removes_its_contents_then_it() {
    sim_only!(
        "namespace deletion finishes only with kube-controller-manager, which the real tier does not run"
    );
    let t = common::start().await;
    let ns = make_namespace(&t, "doomed").await;
    let leases = "/apis/coordination.k8s.io/v1/namespaces/doomed/leases";
    create(&t, leases, &mk_lease("l1", "a")).await;
    let mut held = mk_lease("l2", "a");
    held["metadata"]["finalizers"] = json!(["example.com/hold"]);
    create(&t, leases, &held).await;
    create(
        &t,
        "/api/v1/namespaces/doomed/configmaps",
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}),
    )
    .await;
    create(
        &t,
        "/api/v1/namespaces/doomed/pods",
        &mk_pod("p", json!({})),
    )
    .await;
    let mut nsw = RawWatch::open(
        &t,
        &format!(
            "/api/v1/namespaces?watch=true&fieldSelector=metadata.name%3Ddoomed&resourceVersion={}",
            t.current_rv().await
        ),
    )
    .await;
    let mut lw = RawWatch::open(
        &t,
        &format!(
            "{leases}?watch=true&resourceVersion={}",
            t.current_rv().await
        ),
    )
    .await;

    let (code, answer) = t
        .raw("DELETE", "/api/v1/namespaces/doomed", None, vec![])
        .await;
    assert_eq!(code, 200, "{answer}");
    assert_eq!(answer["kind"], "Namespace");
    assert_eq!(answer["status"]["phase"], "Terminating");
    assert!(answer["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(answer["spec"]["finalizers"], json!(["kubernetes"]));
    assert_eq!(answer["metadata"]["uid"], ns["metadata"]["uid"]);

    let first = nsw.next().await;
    assert_eq!(brief(&first), pair("MODIFIED", "doomed"));
    assert_eq!(first["object"]["status"]["phase"], "Terminating");

    // The contents are deleted; l2 waits for its finalizer, and so does the namespace.
    let mut seen = BTreeSet::new();
    while seen.len() < 2 {
        let ev = lw.next().await;
        seen.insert(brief(&ev));
    }
    assert_eq!(
        seen,
        BTreeSet::from([pair("DELETED", "l1"), pair("MODIFIED", "l2")])
    );
    let p = eventually(SOON, || async {
        (get(&t, "/api/v1/namespaces/doomed/pods/p").await.0 == 404).then_some(())
    })
    .await;
    assert!(p.is_some(), "the unscheduled pod is removed");
    // The namespace controller reports what holds the namespace in its conditions.
    let conditions = eventually(SOON, || async {
        let (_, ns_now) = get(&t, "/api/v1/namespaces/doomed").await;
        assert_eq!(ns_now["status"]["phase"], "Terminating");
        let cs = ns_now["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let remaining = cs
            .iter()
            .find(|c| c["type"] == "NamespaceContentRemaining")?;
        (remaining["message"]
            == "Some resources are remaining: leases.coordination.k8s.io has 1 resource instances")
            .then_some(cs)
    })
    .await
    .expect("NamespaceContentRemaining names the held lease");
    let by_type = |ty: &str| {
        conditions
            .iter()
            .find(|c| c["type"] == ty)
            .cloned()
            .unwrap()
    };
    assert_eq!(by_type("NamespaceContentRemaining")["status"], "True");
    assert_eq!(
        by_type("NamespaceContentRemaining")["reason"],
        "SomeResourcesRemain"
    );
    let fin = by_type("NamespaceFinalizersRemaining");
    assert_eq!(
        (
            fin["status"].as_str(),
            fin["reason"].as_str(),
            fin["message"].as_str()
        ),
        (
            Some("True"),
            Some("SomeFinalizerRemain"),
            Some("Some finalizers are remaining: example.com/hold in 1 resource instances")
        )
    );
    let discovery = by_type("NamespaceDeletionDiscoveryFailure");
    assert_eq!(
        (
            discovery["status"].as_str(),
            discovery["reason"].as_str(),
            discovery["message"].as_str()
        ),
        (
            Some("False"),
            Some("ResourcesDiscovered"),
            Some("All resources successfully discovered")
        )
    );
    let out = t.kubectl(&["describe", "namespace", "doomed"]).await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("Terminating") && text.contains("NamespaceFinalizersRemaining"),
        "{text}"
    );

    // Nothing new goes in while it terminates.
    let (code, err) = t
        .raw("POST", leases, JSON, bytes(&mk_lease("late", "a")))
        .await;
    assert_eq!(code, 403, "{err}");
    assert_status(&err, 403, "Forbidden");
    assert_eq!(
        err["message"],
        "leases.coordination.k8s.io \"late\" is forbidden: unable to create new content in namespace doomed because it is being terminated"
    );

    // Once the last content goes, so does the namespace.
    merge(
        &t,
        &format!("{leases}/l2"),
        json!({"metadata": {"finalizers": null}}),
    )
    .await;
    assert_eq!(brief(&lw.next().await), pair("DELETED", "l2"));
    loop {
        let ev = nsw.next().await;
        match ev["type"].as_str().unwrap() {
            "MODIFIED" => assert_eq!(ev["object"]["status"]["phase"], "Terminating"),
            "DELETED" => break,
            other => panic!("unexpected {other}: {ev}"),
        }
    }
    assert_eq!(get(&t, "/api/v1/namespaces/doomed").await.0, 404);
    for path in [
        leases,
        "/api/v1/namespaces/doomed/configmaps",
        "/api/v1/namespaces/doomed/pods",
    ] {
        let (code, list) = get(&t, path).await;
        assert_eq!(code, 200);
        assert_eq!(list["items"], json!([]), "{path}");
    }
}

// ---------------------------------------------------------------------------------------------
// E. List and watch

#[tokio::test]
async fn f33_list_resource_version_is_the_global_one_and_items_carry_their_own() {
    let t = common::start().await;
    let a = create(&t, LEASES, &mk_lease("a", "x")).await;
    let cm = create(
        &t,
        CONFIGMAPS,
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c33"}}),
    )
    .await;
    assert!(rv(&cm) > rv(&a));
    let (code, list) = get(&t, LEASES).await;
    assert_eq!(code, 200);
    assert_eq!(list["kind"], "LeaseList");
    assert_eq!(list["apiVersion"], "coordination.k8s.io/v1");
    // On a real apiserver other writers (its own identity Lease, parallel tests) move the
    // global resourceVersion on; the list is never older than the last write.
    let newest = |got: u64| {
        if t.is_real() {
            assert!(got >= rv(&cm), "{got} < {}", rv(&cm));
        } else {
            assert_eq!(
                got,
                rv(&cm),
                "a list answers at the newest (global) resourceVersion"
            );
        }
    };
    newest(rv(&list));
    assert_eq!(
        list["items"][0]["metadata"]["resourceVersion"],
        a["metadata"]["resourceVersion"]
    );
    // An empty list still has one.
    let (_, empty) = get(
        &t,
        "/apis/coordination.k8s.io/v1/namespaces/kube-public/leases",
    )
    .await;
    assert_eq!(empty["items"], json!([]));
    newest(rv(&empty));
    // kube-rs sees the same.
    let leases: Api<Lease> = Api::default_namespaced(t.client.clone());
    let l = leases.list(&ListParams::default()).await.unwrap();
    newest(l.metadata.resource_version.unwrap().parse().unwrap());
    assert!(l.items.iter().all(|i| {
        i.metadata
            .resource_version
            .as_deref()
            .is_some_and(|r| !r.is_empty())
    }));
}

#[tokio::test]
async fn f34_limit_pages_by_namespace_then_name_with_a_consistent_continue() {
    sim_only!(
        "exact cluster-wide pages: a real cluster also holds other tests' Leases and the apiserver's own (namespaced pages are compared in differential.rs)"
    );
    let t = common::start().await;
    make_namespace(&t, "another").await;
    for (ns, n) in [
        ("default", "c"),
        ("another", "e"),
        ("default", "a"),
        ("another", "d"),
        ("default", "b"),
    ] {
        create(
            &t,
            &format!("/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"),
            &mk_lease(n, "v1"),
        )
        .await;
    }
    let snapshot = t.current_rv().await;
    let (code, p1) = get(&t, &format!("{ALL_LEASES}?limit=2")).await;
    assert_eq!(code, 200, "{p1}");
    assert_eq!(
        names(&p1),
        ["d", "e"],
        "namespace 'another' sorts before 'default'"
    );
    assert_eq!(rv(&p1), snapshot);
    assert_eq!(p1["metadata"]["remainingItemCount"], 3);
    let tok1 = p1["metadata"]["continue"]
        .as_str()
        .expect("a continue token")
        .to_owned();

    // Changes after the first page do not show in the rest of it.
    merge(
        &t,
        &format!("{LEASES}/b"),
        json!({"spec": {"holderIdentity": "v2"}}),
    )
    .await;
    create(&t, LEASES, &mk_lease("bb", "v2")).await;
    t.raw("DELETE", &format!("{LEASES}/c"), None, vec![]).await;

    let (_, p2) = get(&t, &format!("{ALL_LEASES}?limit=2&continue={tok1}")).await;
    assert_eq!(names(&p2), ["a", "b"]);
    assert_eq!(
        p2["items"][1]["spec"]["holderIdentity"], "v1",
        "pages reflect the first page's resourceVersion"
    );
    assert_eq!(rv(&p2), snapshot);
    assert_eq!(p2["metadata"]["remainingItemCount"], 1);
    let tok2 = p2["metadata"]["continue"].as_str().unwrap().to_owned();
    let (_, p3) = get(&t, &format!("{ALL_LEASES}?limit=2&continue={tok2}")).await;
    assert_eq!(names(&p3), ["c"]);
    assert!(
        p3["metadata"].get("continue").is_none_or(|c| c == ""),
        "{p3}"
    );
    assert!(p3["metadata"].get("remainingItemCount").is_none());

    // A namespaced list pages the same way.
    let (_, n1) = get(&t, &format!("{LEASES}?limit=1")).await;
    assert_eq!(names(&n1), ["a"]);

    // Garbage tokens are a bad request.
    let (code, err) = get(&t, &format!("{ALL_LEASES}?limit=2&continue=not-a-token")).await;
    assert_eq!(code, 400, "{err}");
    assert_status(&err, 400, "BadRequest");
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .starts_with("invalid continue token: "),
        "{err}"
    );

    // kube-rs pagination.
    let leases: Api<Lease> = Api::all(t.client.clone());
    let mut lp = ListParams::default().limit(2);
    let mut seen = Vec::new();
    loop {
        let page = leases.list(&lp).await.unwrap();
        assert!(page.items.len() <= 2);
        seen.extend(page.items.iter().map(|l| {
            format!(
                "{}/{}",
                l.metadata.namespace.clone().unwrap(),
                l.metadata.name.clone().unwrap()
            )
        }));
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(c) => lp = lp.continue_token(&c),
            None => break,
        }
    }
    assert_eq!(
        seen,
        [
            "another/d",
            "another/e",
            "default/a",
            "default/b",
            "default/bb"
        ]
    );
}

#[tokio::test]
async fn f34_expired_continue_token_is_410_expired() {
    sim_only!(
        "needs a 4-change history to expire a continue token (etcd compacts every 5 minutes)"
    );
    let t = common::start_with(SimOptions {
        history: 4,
        ..Default::default()
    })
    .await;
    for n in ["a", "b", "c"] {
        create(&t, LEASES, &mk_lease(n, "x")).await;
    }
    let (_, p1) = get(&t, &format!("{LEASES}?limit=1")).await;
    let tok = p1["metadata"]["continue"].as_str().unwrap().to_owned();
    for i in 0..6 {
        create(&t, CONFIGMAPS, &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("c{i}")}})).await;
    }
    let (code, err) = get(&t, &format!("{LEASES}?limit=1&continue={tok}")).await;
    assert_eq!(code, 410, "{err}");
    assert_status(&err, 410, "Expired");
    assert_eq!(
        err["message"],
        "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list."
    );
}

#[tokio::test]
async fn f35_watch_from_a_resource_version_replays_every_later_change_in_order() {
    let t = common::start().await;
    let a = create(&t, LEASES, &mk_lease("a", "1")).await;
    let from = rv(&a);
    merge(
        &t,
        &format!("{LEASES}/a"),
        json!({"spec": {"holderIdentity": "2"}}),
    )
    .await;
    create(&t, LEASES, &mk_lease("b", "1")).await;
    create(
        &t,
        CONFIGMAPS,
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "other-kind"}}),
    )
    .await;
    create(
        &t,
        "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases",
        &mk_lease("elsewhere", "1"),
    )
    .await;
    t.raw("DELETE", &format!("{LEASES}/a"), None, vec![]).await;
    merge(
        &t,
        &format!("{LEASES}/b"),
        json!({"spec": {"holderIdentity": "2"}}),
    )
    .await;

    let mut w = RawWatch::open(&t, &format!("{LEASES}?watch=true&resourceVersion={from}")).await;
    assert_eq!(w.status, 200);
    let mut got = Vec::new();
    for _ in 0..4 {
        got.push(w.next().await);
    }
    assert_eq!(
        briefs(&got),
        [
            pair("MODIFIED", "a"),
            pair("ADDED", "b"),
            pair("DELETED", "a"),
            pair("MODIFIED", "b")
        ]
    );
    assert!(
        got.windows(2)
            .all(|p| rv(&p[0]["object"]) < rv(&p[1]["object"])),
        "in resourceVersion order"
    );
    assert_eq!(got[0]["object"]["spec"]["holderIdentity"], "2");
    assert_eq!(got[0]["object"]["kind"], "Lease");
    assert_eq!(got[0]["object"]["apiVersion"], "coordination.k8s.io/v1");
    w.expect_quiet(Duration::from_millis(200)).await;
    // Then live changes.
    merge(
        &t,
        &format!("{LEASES}/b"),
        json!({"spec": {"holderIdentity": "3"}}),
    )
    .await;
    let live = w.next().await;
    assert_eq!(brief(&live), pair("MODIFIED", "b"));
    assert_eq!(live["object"]["spec"]["holderIdentity"], "3");

    // The same through kube-rs.
    let leases: Api<Lease> = Api::default_namespaced(t.client.clone());
    let evs: Vec<WatchEvent<Lease>> = leases
        .watch(
            &WatchParams::default().disable_bookmarks(),
            &from.to_string(),
        )
        .await
        .unwrap()
        .take(5)
        .try_collect()
        .await
        .unwrap();
    let kinds: Vec<String> = evs
        .iter()
        .map(|e| match e {
            WatchEvent::Added(l) => format!("ADDED {}", l.metadata.name.clone().unwrap()),
            WatchEvent::Modified(l) => format!("MODIFIED {}", l.metadata.name.clone().unwrap()),
            WatchEvent::Deleted(l) => format!("DELETED {}", l.metadata.name.clone().unwrap()),
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "MODIFIED a",
            "ADDED b",
            "DELETED a",
            "MODIFIED b",
            "MODIFIED b"
        ]
    );
}

#[tokio::test]
async fn f35_kube_rs_reflector_list_then_watch_tracks_changes() {
    let t = common::start().await;
    create(&t, LEASES, &mk_lease("a", "1")).await;
    create(&t, LEASES, &mk_lease("b", "1")).await;
    let api: Api<Lease> = Api::default_namespaced(t.client.clone());
    let (store, writer) = reflector::store();
    let stream = reflector(writer, watcher(api, watcher::Config::default()))
        .default_backoff()
        .applied_objects();
    let task = tokio::spawn(stream.for_each(|_| futures::future::ready(())));
    tokio::time::timeout(SOON, store.wait_until_ready())
        .await
        .expect("initial list")
        .unwrap();
    let holders = |s: &reflector::Store<Lease>| {
        let mut v: Vec<(String, String)> = s
            .state()
            .iter()
            .map(|l| {
                (
                    l.metadata.name.clone().unwrap(),
                    l.spec
                        .as_ref()
                        .unwrap()
                        .holder_identity
                        .clone()
                        .unwrap_or_default(),
                )
            })
            .collect();
        v.sort();
        v
    };
    assert_eq!(
        holders(&store),
        [("a".into(), "1".into()), ("b".into(), "1".into())]
    );
    merge(
        &t,
        &format!("{LEASES}/a"),
        json!({"spec": {"holderIdentity": "2"}}),
    )
    .await;
    create(&t, LEASES, &mk_lease("c", "1")).await;
    t.raw("DELETE", &format!("{LEASES}/b"), None, vec![]).await;
    let want: Vec<(String, String)> = vec![("a".into(), "2".into()), ("c".into(), "1".into())];
    let ok = eventually(SOON, || {
        let got = holders(&store);
        let want = want.clone();
        async move { (got == want).then_some(()) }
    })
    .await;
    assert!(ok.is_some(), "reflector ended with {:?}", holders(&store));
    task.abort();
}

#[tokio::test]
async fn f36_watch_without_or_at_zero_resource_version_starts_with_added_for_every_match() {
    let t = common::start().await;
    for n in ["c", "a", "b"] {
        create(
            &t,
            LEASES,
            &lease_with_labels(n, json!({"team": if n == "b" { "blue" } else { "red" }})),
        )
        .await;
    }
    for query in [
        "watch=true",
        "watch=true&resourceVersion=0",
        "watch=true&resourceVersion=",
    ] {
        let mut w = RawWatch::open(&t, &format!("{LEASES}?{query}")).await;
        let mut got = BTreeSet::new();
        for _ in 0..3 {
            got.insert(brief(&w.next().await));
        }
        assert_eq!(
            got,
            BTreeSet::from([pair("ADDED", "a"), pair("ADDED", "b"), pair("ADDED", "c")]),
            "{query}"
        );
        w.expect_quiet(Duration::from_millis(100)).await;
        merge(
            &t,
            &format!("{LEASES}/a"),
            json!({"spec": {"holderIdentity": query}}),
        )
        .await;
        assert_eq!(brief(&w.next().await), pair("MODIFIED", "a"), "{query}");
    }
    // Only matches are sent.
    let mut w = RawWatch::open(&t, &format!("{LEASES}?watch=true&labelSelector=team%3Dred")).await;
    let mut got = BTreeSet::new();
    for _ in 0..2 {
        got.insert(brief(&w.next().await));
    }
    assert_eq!(
        got,
        BTreeSet::from([pair("ADDED", "a"), pair("ADDED", "c")])
    );
    w.expect_quiet(Duration::from_millis(100)).await;
}

#[tokio::test]
#[allow(deprecated)] // metadata_watcher is what existing controllers call
async fn f36_kube_rs_metadata_watcher_sees_partial_object_metadata() {
    let t = common::start().await;
    create(&t, LEASES, &lease_with_labels("m1", json!({"app": "meta"}))).await;
    // The raw list and watch answers.
    let resp = send(
        &t,
        "GET",
        LEASES,
        &[(
            "accept",
            "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
        )],
    )
    .await;
    let list: Value =
        serde_json::from_slice(&resp.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert_eq!(list["kind"], "PartialObjectMetadataList");
    assert_eq!(list["apiVersion"], "meta.k8s.io/v1");
    assert_eq!(list["items"][0]["kind"], "PartialObjectMetadata");
    assert_eq!(
        list["items"][0]["metadata"]["labels"],
        json!({"app": "meta"})
    );
    assert!(list["items"][0].get("spec").is_none());

    let api: Api<Lease> = Api::default_namespaced(t.client.clone());
    let (store, writer) = reflector::store();
    let stream = reflector(
        writer,
        kube::runtime::metadata_watcher(api, watcher::Config::default()),
    )
    .default_backoff()
    .applied_objects();
    let task = tokio::spawn(stream.for_each(|_| futures::future::ready(())));
    tokio::time::timeout(SOON, store.wait_until_ready())
        .await
        .expect("initial list")
        .unwrap();
    create(
        &t,
        LEASES,
        &lease_with_labels("m2", json!({"app": "meta2"})),
    )
    .await;
    let found = eventually(SOON, || {
        let s = store.state();
        async move {
            s.iter()
                .find(|m| m.metadata.name.as_deref() == Some("m2"))
                .cloned()
        }
    })
    .await
    .expect("m2 arrives through the metadata watch");
    assert_eq!(found.metadata.labels.as_ref().unwrap()["app"], "meta2");
    assert_eq!(
        found.types.as_ref().map(|t| t.kind.as_str()),
        Some("PartialObjectMetadata")
    );
    assert_eq!(store.state().len(), 2);
    task.abort();

    // The newer spelling: a watcher over `Api<PartialObjectMeta<Lease>>`.
    let api: Api<kube::core::PartialObjectMeta<Lease>> = Api::default_namespaced(t.client.clone());
    let items: Vec<_> = watcher(api, watcher::Config::default())
        .default_backoff()
        .applied_objects()
        .take(2)
        .try_collect()
        .await
        .unwrap();
    let mut got: Vec<String> = items
        .iter()
        .map(|m| m.metadata.labels.as_ref().unwrap()["app"].clone())
        .collect();
    got.sort();
    assert_eq!(got, ["meta", "meta2"]);
}

#[tokio::test]
async fn f37_watch_from_compacted_rv_sends_410_error_event() {
    sim_only!(
        "needs a 5-change history; the real 410 is compared in differential.rs d_watch_from_a_compacted_resource_version"
    );
    let t = common::start_with(SimOptions {
        history: 5,
        ..Default::default()
    })
    .await;
    let a = create(&t, LEASES, &mk_lease("a", "0")).await;
    for i in 1..=10 {
        merge(
            &t,
            &format!("{LEASES}/a"),
            json!({"spec": {"holderIdentity": i.to_string()}}),
        )
        .await;
    }
    let newest = t.current_rv().await;
    let oldest_kept = newest - 4; // the last 5 changes are kept
    let mut w = RawWatch::open(
        &t,
        &format!("{LEASES}?watch=true&resourceVersion={}", rv(&a)),
    )
    .await;
    assert_eq!(w.status, 200, "a watch never answers with HTTP 410");
    let ev = w.next().await;
    assert_eq!(
        ev,
        json!({"type": "ERROR", "object": {
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": format!("too old resource version: {} ({})", rv(&a), oldest_kept - 1),
            "reason": "Expired", "code": 410
        }})
    );
    w.expect_end(SOON).await;

    // The oldest resumable point still works.
    let mut ok = RawWatch::open(
        &t,
        &format!("{LEASES}?watch=true&resourceVersion={}", oldest_kept - 1),
    )
    .await;
    for _ in 0..5 {
        assert_eq!(ok.next().await["type"], "MODIFIED");
    }
    // kube-rs surfaces it as a 410 watch error.
    let api: Api<Lease> = Api::default_namespaced(t.client.clone());
    let mut s = api
        .watch(&WatchParams::default(), &rv(&a).to_string())
        .await
        .unwrap()
        .boxed();
    match s.next().await {
        Some(Ok(WatchEvent::Error(e))) => assert_eq!((e.code, e.reason.as_str()), (410, "Expired")),
        other => panic!("expected a 410 ERROR event, got {other:?}"),
    }
    assert!(s.next().await.is_none());
}

#[tokio::test]
async fn f37_kube_rs_reflector_relists_after_its_resource_version_is_compacted() {
    sim_only!("needs a 5-change history to compact under a running reflector");
    let t = common::start_with(SimOptions {
        history: 5,
        ..Default::default()
    })
    .await;
    create(&t, LEASES, &mk_lease("a", "1")).await;
    create(&t, LEASES, &mk_lease("b", "1")).await;
    let api: Api<Lease> = Api::default_namespaced(t.client.clone());
    let (store, writer) = reflector::store();
    let cfg = watcher::Config::default().disable_bookmarks();
    let mut stream = reflector(writer, watcher(api, cfg)).boxed();
    // Drive the list; the watch is only requested on the next poll.
    loop {
        match tokio::time::timeout(SOON, stream.next())
            .await
            .expect("watcher progresses")
        {
            Some(Ok(watcher::Event::InitDone)) => break,
            Some(Ok(_)) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(store.state().len(), 2);
    // Meanwhile: changes to the leases, then enough other writes to compact the list's version.
    t.raw("DELETE", &format!("{LEASES}/a"), None, vec![]).await;
    merge(
        &t,
        &format!("{LEASES}/b"),
        json!({"spec": {"holderIdentity": "2"}}),
    )
    .await;
    create(&t, LEASES, &mk_lease("c", "1")).await;
    for i in 0..8 {
        create(&t, CONFIGMAPS, &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("c{i}")}})).await;
    }
    // The watch from the list's resourceVersion gets the 410; the watcher relists.
    let mut saw_410 = false;
    let mut after = Vec::new();
    loop {
        match tokio::time::timeout(SOON, stream.next())
            .await
            .expect("watcher progresses")
        {
            Some(Err(watcher::Error::WatchError(e))) => {
                assert_eq!((e.code, e.reason.as_str()), (410, "Expired"));
                assert!(
                    e.message.starts_with("too old resource version: "),
                    "{}",
                    e.message
                );
                saw_410 = true;
            }
            Some(Ok(watcher::Event::InitDone)) => break,
            Some(Ok(ev)) => after.push(format!("{ev:?}").split('(').next().unwrap().to_owned()),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(saw_410, "the watcher saw the 410");
    assert_eq!(after, ["Init", "InitApply", "InitApply"]);
    let mut state: Vec<(String, String)> = store
        .state()
        .iter()
        .map(|l| {
            (
                l.metadata.name.clone().unwrap(),
                l.spec.clone().unwrap().holder_identity.unwrap(),
            )
        })
        .collect();
    state.sort();
    assert_eq!(
        state,
        [
            ("b".to_owned(), "2".to_owned()),
            ("c".to_owned(), "1".to_owned())
        ]
    );
}

#[tokio::test]
async fn f38_bookmarks_only_when_allowed_periodically_and_before_the_timeout() {
    sim_only!("needs a 200 ms bookmark interval (the real one is a minute)");
    let t = common::start_with(SimOptions {
        bookmark_interval: Duration::from_millis(200),
        ..Default::default()
    })
    .await;
    let a = create(&t, LEASES, &mk_lease("a", "1")).await;
    let mut w = RawWatch::open(
        &t,
        &format!(
            "{LEASES}?watch=true&allowWatchBookmarks=true&resourceVersion={}",
            rv(&a)
        ),
    )
    .await;
    let started = Instant::now();
    let b1 = w.next().await;
    assert!(started.elapsed() < Duration::from_secs(1));
    assert_eq!(
        b1,
        json!({"type": "BOOKMARK", "object": {"kind": "Lease", "apiVersion": "coordination.k8s.io/v1", "metadata": {"resourceVersion": rv(&a).to_string()}}})
    );
    merge(
        &t,
        &format!("{LEASES}/a"),
        json!({"spec": {"holderIdentity": "2"}}),
    )
    .await;
    let m = w.next().await;
    assert_eq!(brief(&m), pair("MODIFIED", "a"));
    let b2 = w.next().await;
    assert_eq!(b2["type"], "BOOKMARK");
    assert!(
        rv(&b2["object"]) >= rv(&m["object"]),
        "bookmarks never go back: {b2}"
    );

    // Without the flag: none, even over many intervals (checked below, after it times out).
    let mut quiet = RawWatch::open(
        &t,
        &format!(
            "{LEASES}?watch=true&timeoutSeconds=3&resourceVersion={}",
            t.current_rv().await
        ),
    )
    .await;
    // A watch shorter than the closing-bookmark lead gets none either (kube-apiserver schedules
    // no bookmark whose time has passed).
    let mut short = RawWatch::open(
        &t,
        &format!(
            "{LEASES}?watch=true&allowWatchBookmarks=true&timeoutSeconds=1&resourceVersion={}",
            t.current_rv().await
        ),
    )
    .await;

    // The closing bookmark comes shortly before the timeout even with a long interval.
    let slow = common::start().await; // 60 s interval
    let l = create(&slow, LEASES, &mk_lease("a", "1")).await;
    let mut w = RawWatch::open(
        &slow,
        &format!(
            "{LEASES}?watch=true&allowWatchBookmarks=true&timeoutSeconds=3&resourceVersion={}",
            rv(&l)
        ),
    )
    .await;
    let started = Instant::now();
    let b = w.next().await;
    assert_eq!(b["type"], "BOOKMARK");
    assert!(
        started.elapsed() < Duration::from_millis(2500),
        "closing bookmark at {:?}",
        started.elapsed()
    );
    w.expect_end(Duration::from_secs(4)).await;
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(2900) && took < Duration::from_secs(4),
        "watch lasted {took:?}"
    );
    quiet.expect_end(SOON).await;
    short.expect_end(SOON).await;

    // kube-rs parses them.
    let api: Api<Lease> = Api::default_namespaced(t.client.clone());
    let mut s = api
        .watch(&WatchParams::default().timeout(5), &rv(&a).to_string())
        .await
        .unwrap()
        .boxed();
    let mut bookmark = None;
    while let Some(ev) = tokio::time::timeout(SOON, s.next()).await.expect("events") {
        if let WatchEvent::Bookmark(b) = ev.unwrap() {
            bookmark = Some(b);
            break;
        }
    }
    let b = bookmark.expect("a bookmark");
    assert!(b.metadata.resource_version.parse::<u64>().unwrap() >= rv(&m["object"]));
}

#[tokio::test]
async fn f38_kube_rs_watcher_resumes_from_bookmarks_without_relisting() {
    sim_only!("needs a 5-change history and 100 ms bookmarks");
    // Little history and frequent bookmarks: writes elsewhere compact the list's
    // resourceVersion, but the bookmarks carry the watcher past them, so when its watch times
    // out it resumes instead of relisting (f37 shows the relist without bookmarks).
    let t = common::start_with(SimOptions {
        history: 5,
        bookmark_interval: Duration::from_millis(100),
        ..Default::default()
    })
    .await;
    create(&t, LEASES, &mk_lease("a", "1")).await;
    let api: Api<Lease> = Api::default_namespaced(t.client.clone());
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut stream = watcher(api, watcher::Config::default().timeout(3)).boxed();
    let task = tokio::spawn(async move {
        while let Some(ev) = stream.next().await {
            let desc = match ev {
                Ok(watcher::Event::Init) => "Init".to_owned(),
                Ok(watcher::Event::InitApply(l)) => {
                    format!("InitApply {}", l.metadata.name.unwrap())
                }
                Ok(watcher::Event::InitDone) => "InitDone".to_owned(),
                Ok(watcher::Event::Apply(l)) => format!(
                    "Apply {} {}",
                    l.metadata.name.unwrap(),
                    l.spec.unwrap().holder_identity.unwrap()
                ),
                Ok(watcher::Event::Delete(l)) => format!("Delete {}", l.metadata.name.unwrap()),
                Err(e) => format!("Err {e}"),
            };
            if tx.send(desc).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    while seen.last().map(String::as_str) != Some("InitDone") {
        seen.push(
            tokio::time::timeout(SOON, rx.recv())
                .await
                .expect("initial list")
                .unwrap(),
        );
    }
    assert_eq!(seen, ["Init", "InitApply a", "InitDone"]);
    for i in 0..10 {
        create(&t, CONFIGMAPS, &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("c{i}")}})).await;
    }
    // Past the first watch's 3 s timeout: the watcher has re-watched from a bookmark.
    tokio::time::sleep(Duration::from_millis(3500)).await;
    merge(
        &t,
        &format!("{LEASES}/a"),
        json!({"spec": {"holderIdentity": "2"}}),
    )
    .await;
    let next = tokio::time::timeout(SOON, rx.recv())
        .await
        .expect("the change arrives")
        .unwrap();
    assert_eq!(next, "Apply a 2", "no error and no relist in between");
    assert!(rx.try_recv().is_err());
    task.abort();
}

#[tokio::test]
async fn f39_timeout_seconds_ends_the_watch_cleanly_and_without_it_the_watch_stays() {
    sim_only!("needs a 300 ms bookmark interval");
    let t = common::start_with(SimOptions {
        bookmark_interval: Duration::from_millis(300),
        ..Default::default()
    })
    .await;
    let start_rv = t.current_rv().await;
    let mut w = RawWatch::open(
        &t,
        &format!("{LEASES}?watch=true&timeoutSeconds=1&resourceVersion={start_rv}"),
    )
    .await;
    let started = Instant::now();
    create(&t, LEASES, &mk_lease("a", "1")).await;
    assert_eq!(brief(&w.next().await), pair("ADDED", "a"));
    w.expect_end(SOON).await;
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(950) && took < Duration::from_millis(1600),
        "watch lasted {took:?}"
    );

    // No timeoutSeconds: still open and live well past that (the default is 30 min).
    let mut w = RawWatch::open(
        &t,
        &format!(
            "{LEASES}?watch=true&allowWatchBookmarks=true&resourceVersion={}",
            t.current_rv().await
        ),
    )
    .await;
    let started = Instant::now();
    let mut bookmarks = 0;
    while started.elapsed() < Duration::from_secs(2) {
        let ev = w.next().await;
        assert_eq!(ev["type"], "BOOKMARK");
        bookmarks += 1;
    }
    assert!(bookmarks >= 4, "{bookmarks} bookmarks in 2 s");
    merge(
        &t,
        &format!("{LEASES}/a"),
        json!({"spec": {"holderIdentity": "2"}}),
    )
    .await;
    loop {
        let ev = w.next().await;
        if ev["type"] != "BOOKMARK" {
            assert_eq!(brief(&ev), pair("MODIFIED", "a"));
            break;
        }
    }
}

#[tokio::test]
async fn f40_send_initial_events_then_an_initial_events_end_bookmark_then_live_events() {
    sim_only!(
        "the WatchList feature gate (sendInitialEvents) is off by default in kube-apiserver 1.33; the simulator enables it here, the real tier checks the 422 in f40_without_the_watch_list_gate_send_initial_events_is_422"
    );
    let t = common::start_with(SimOptions {
        watch_list: true,
        ..Default::default()
    })
    .await;
    create(&t, LEASES, &mk_lease("a", "1")).await;
    create(&t, LEASES, &mk_lease("b", "1")).await;
    let at = t.current_rv().await;
    let mut w = RawWatch::open(&t, &format!("{LEASES}?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true")).await;
    assert_eq!(w.status, 200);
    let mut initial = BTreeSet::new();
    for _ in 0..2 {
        initial.insert(brief(&w.next().await));
    }
    assert_eq!(
        initial,
        BTreeSet::from([pair("ADDED", "a"), pair("ADDED", "b")])
    );
    let end = w.next().await;
    assert_eq!(
        end,
        json!({"type": "BOOKMARK", "object": {"kind": "Lease", "apiVersion": "coordination.k8s.io/v1",
               "metadata": {"resourceVersion": at.to_string(), "annotations": {"k8s.io/initial-events-end": "true"}}}})
    );
    create(&t, LEASES, &mk_lease("c", "1")).await;
    assert_eq!(brief(&w.next().await), pair("ADDED", "c"));

    // With resourceVersion=0 as kube-rs sends it.
    let mut w = RawWatch::open(&t, &format!("{LEASES}?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&resourceVersion=0")).await;
    for _ in 0..3 {
        assert_eq!(w.next().await["type"], "ADDED");
    }
    let end = w.next().await;
    assert_eq!(
        end["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );

    // sendInitialEvents without NotOlderThan is invalid.
    let (code, err) = get(&t, &format!("{LEASES}?watch=true&sendInitialEvents=true")).await;
    assert_eq!(code, 422, "{err}");
    assert_status(&err, 422, "Invalid");
    assert_eq!(
        err["message"],
        "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"
    );
    assert_eq!(
        err["details"],
        json!({"group": "meta.k8s.io", "kind": "ListOptions", "causes": [{"reason": "FieldValueForbidden", "message": "Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan", "field": "resourceVersionMatch"}]})
    );
}

/// Found by the real tier: kube-apiserver 1.33 turned the WatchList gate off by default, so a
/// `sendInitialEvents` watch is refused (kube-rs `streaming_lists()` fails to start).
#[tokio::test]
async fn f40_without_the_watch_list_gate_send_initial_events_is_422() {
    let t = common::start().await;
    let (code, err) = get(
        &t,
        &format!("{LEASES}?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"),
    )
    .await;
    assert_eq!(code, 422, "{err}");
    assert_eq!(
        err["message"],
        "ListOptions.meta.k8s.io \"\" is invalid: sendInitialEvents: Forbidden: sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled"
    );
    let api: Api<Lease> = Api::default_namespaced(t.client.clone());
    let mut stream = watcher(api, watcher::Config::default().streaming_lists()).boxed();
    let first = tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await
        .expect("the watcher reports within 5 s");
    assert!(
        matches!(first, Some(Err(watcher::Error::WatchStartFailed(_)))),
        "{first:?}"
    );
}

#[tokio::test]
async fn f40_kube_rs_streaming_list_reflector() {
    sim_only!(
        "the WatchList feature gate (sendInitialEvents) is off by default in kube-apiserver 1.33; the simulator enables it here, the real tier checks the 422 in f40_without_the_watch_list_gate_send_initial_events_is_422"
    );
    let t = common::start_with(SimOptions {
        watch_list: true,
        ..Default::default()
    })
    .await;
    create(&t, LEASES, &mk_lease("a", "1")).await;
    create(&t, LEASES, &mk_lease("b", "1")).await;
    let api: Api<Lease> = Api::default_namespaced(t.client.clone());
    let (store, writer) = reflector::store();
    let mut stream = reflector(
        writer,
        watcher(api, watcher::Config::default().streaming_lists()),
    )
    .boxed();
    let mut seq = Vec::new();
    loop {
        let ev = tokio::time::timeout(SOON, stream.next())
            .await
            .expect("watcher progresses")
            .unwrap()
            .unwrap();
        let done = matches!(ev, watcher::Event::InitDone);
        seq.push(match ev {
            watcher::Event::Init => "Init".to_owned(),
            watcher::Event::InitApply(l) => format!("InitApply {}", l.metadata.name.unwrap()),
            watcher::Event::InitDone => "InitDone".to_owned(),
            other => format!("{other:?}"),
        });
        if done {
            break;
        }
    }
    assert_eq!(seq, ["Init", "InitApply a", "InitApply b", "InitDone"]);
    assert_eq!(store.state().len(), 2);
    create(&t, LEASES, &mk_lease("c", "1")).await;
    t.raw("DELETE", &format!("{LEASES}/a"), None, vec![]).await;
    let mut live = Vec::new();
    while live.len() < 2 {
        match tokio::time::timeout(SOON, stream.next())
            .await
            .expect("live events")
            .unwrap()
            .unwrap()
        {
            watcher::Event::Apply(l) => live.push(format!("Apply {}", l.metadata.name.unwrap())),
            watcher::Event::Delete(l) => live.push(format!("Delete {}", l.metadata.name.unwrap())),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(live, ["Apply c", "Delete a"]);
    let mut names: Vec<String> = store
        .state()
        .iter()
        .map(|l| l.metadata.name.clone().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["b", "c"]);
}

#[tokio::test]
async fn f41_label_and_field_selectors_filter_lists() {
    let t = common::start().await;
    for (n, labels) in [
        ("web1", json!({"app": "web", "tier": "front"})),
        ("web2", json!({"app": "web", "tier": "back"})),
        ("db", json!({"app": "db"})),
        ("bare", json!({})),
    ] {
        create(&t, LEASES, &lease_with_labels(n, labels)).await;
    }
    let cases = [
        ("app=web", vec!["web1", "web2"]),
        ("app==web", vec!["web1", "web2"]),
        ("app!=web", vec!["bare", "db"]),
        ("app in (db,cache)", vec!["db"]),
        ("app notin (web)", vec!["bare", "db"]),
        ("tier", vec!["web1", "web2"]),
        ("!tier", vec!["bare", "db"]),
        ("app=web,tier=back", vec!["web2"]),
    ];
    let leases: Api<Lease> = Api::default_namespaced(t.client.clone());
    for (sel, want) in cases {
        let got: Vec<String> = leases
            .list(&ListParams::default().labels(sel))
            .await
            .unwrap()
            .items
            .into_iter()
            .map(|l| l.metadata.name.unwrap())
            .collect();
        assert_eq!(got, want, "labelSelector {sel}");
    }
    let ns_sel = format!("metadata.namespace={}", t.ns);
    for (sel, want) in [
        ("metadata.name=db", vec!["db"]),
        ("metadata.name!=db", vec!["bare", "web1", "web2"]),
        (ns_sel.as_str(), vec!["bare", "db", "web1", "web2"]),
    ] {
        let got: Vec<String> = leases
            .list(&ListParams::default().fields(sel))
            .await
            .unwrap()
            .items
            .into_iter()
            .map(|l| l.metadata.name.unwrap())
            .collect();
        assert_eq!(got, want, "fieldSelector {sel}");
    }
    let all: Api<Lease> = Api::all(t.client.clone());
    // kube-public: on a real apiserver kube-system holds its identity Lease.
    assert!(
        all.list(&ListParams::default().fields("metadata.namespace=kube-public"))
            .await
            .unwrap()
            .items
            .is_empty()
    );

    // Pods: spec.nodeName, status.phase, status.podIP.
    create(&t, PODS, &scheduled_pod("on-node", json!({}), 30)).await;
    create(&t, PODS, &mk_pod("pending", json!({}))).await;
    merge(
        &t,
        &format!("{PODS}/on-node/status"),
        json!({"status": {"phase": "Running", "podIP": "10.244.0.7"}}),
    )
    .await;
    let pods: Api<Pod> = Api::default_namespaced(t.client.clone());
    for (sel, want) in [
        ("spec.nodeName=sim-node-1", vec!["on-node"]),
        ("spec.nodeName=", vec!["pending"]),
        ("status.phase=Running", vec!["on-node"]),
        ("status.phase!=Running", vec!["pending"]),
        ("status.podIP=10.244.0.7", vec!["on-node"]),
    ] {
        let got: Vec<String> = pods
            .list(&ListParams::default().fields(sel))
            .await
            .unwrap()
            .items
            .into_iter()
            .map(|p| p.metadata.name.unwrap())
            .collect();
        assert_eq!(got, want, "fieldSelector {sel}");
    }

    // Events: involvedObject.*, reason, type.
    for (n, obj, reason, ty) in [
        ("e1", "on-node", "Started", "Normal"),
        ("e2", "on-node", "BackOff", "Warning"),
        ("e3", "pending", "Scheduled", "Normal"),
    ] {
        let ev = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": n},
            "involvedObject": {"kind": "Pod", "namespace": t.ns, "name": obj, "apiVersion": "v1"},
            "reason": reason, "type": ty, "message": "m", "source": {"component": "kubelet"}});
        create(&t, "/api/v1/namespaces/{ns}/events", &ev).await;
    }
    for (sel, want) in [
        ("involvedObject.name=on-node", vec!["e1", "e2"]),
        (
            "involvedObject.kind=Pod,involvedObject.name=pending",
            vec!["e3"],
        ),
        ("reason=BackOff", vec!["e2"]),
        ("type=Normal", vec!["e1", "e3"]),
    ] {
        let (code, list) = get(
            &t,
            &format!(
                "/api/v1/namespaces/{{ns}}/events?fieldSelector={}",
                sel.replace('=', "%3D").replace(',', "%2C")
            ),
        )
        .await;
        assert_eq!(code, 200, "{list}");
        assert_eq!(names(&list), want, "fieldSelector {sel}");
    }

    // Unknown field selectors are a bad request, on list and watch.
    for q in [
        "fieldSelector=spec.holderIdentity%3Dx",
        "watch=true&fieldSelector=spec.holderIdentity%3Dx",
    ] {
        let (code, err) = get(&t, &format!("{LEASES}?{q}")).await;
        assert_eq!(code, 400, "{q}: {err}");
        assert_status(&err, 400, "BadRequest");
        assert_eq!(
            err["message"],
            "\"spec.holderIdentity\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
        );
    }
    let (code, err) = get(&t, &format!("{PODS}?fieldSelector=spec.bogus%3Dx")).await;
    assert_eq!(code, 400, "{err}");
    assert_eq!(err["message"], "field label not supported: spec.bogus");
}

#[tokio::test]
async fn f41_objects_entering_a_watch_selector_are_added_and_leaving_ones_deleted() {
    let t = common::start().await;
    let from = t.current_rv().await;
    let mut w = RawWatch::open(
        &t,
        &format!("{LEASES}?watch=true&labelSelector=app%3Dweb&resourceVersion={from}"),
    )
    .await;
    let l1 = create(&t, LEASES, &lease_with_labels("l1", json!({"app": "web"}))).await;
    create(&t, LEASES, &lease_with_labels("l2", json!({"app": "db"}))).await;
    let entered = merge(
        &t,
        &format!("{LEASES}/l2"),
        json!({"metadata": {"labels": {"app": "web"}}}),
    )
    .await;
    let left = merge(
        &t,
        &format!("{LEASES}/l1"),
        json!({"metadata": {"labels": {"app": "db"}}}),
    )
    .await;
    merge(
        &t,
        &format!("{LEASES}/l1"),
        json!({"spec": {"holderIdentity": "unseen"}}),
    )
    .await;
    merge(
        &t,
        &format!("{LEASES}/l2"),
        json!({"spec": {"holderIdentity": "seen"}}),
    )
    .await;
    t.raw("DELETE", &format!("{LEASES}/l2"), None, vec![]).await;
    t.raw("DELETE", &format!("{LEASES}/l1"), None, vec![]).await;
    let mut got = Vec::new();
    for _ in 0..5 {
        got.push(w.next().await);
    }
    assert_eq!(
        briefs(&got),
        [
            pair("ADDED", "l1"),
            pair("ADDED", "l2"),
            pair("DELETED", "l1"),
            pair("MODIFIED", "l2"),
            pair("DELETED", "l2")
        ]
    );
    assert_eq!(
        got[1]["object"], entered,
        "entering: ADDED with the new state"
    );
    // Leaving: DELETED with the state before the change and the change's resourceVersion,
    // as the cacher sends it (found by the real tier; the simulator sent the new state).
    let mut before = l1.clone();
    before["metadata"]["resourceVersion"] = left["metadata"]["resourceVersion"].clone();
    assert_eq!(
        got[2]["object"], before,
        "leaving: DELETED with the previous state"
    );
    w.expect_quiet(Duration::from_millis(200)).await;

    // Field selectors too.
    let mut w = RawWatch::open(
        &t,
        &format!(
            "{LEASES}?watch=true&fieldSelector=metadata.name%3Dx&resourceVersion={}",
            t.current_rv().await
        ),
    )
    .await;
    create(&t, LEASES, &mk_lease("y", "1")).await;
    create(&t, LEASES, &mk_lease("x", "1")).await;
    assert_eq!(brief(&w.next().await), pair("ADDED", "x"));
    w.expect_quiet(Duration::from_millis(100)).await;

    // kube-rs watcher with label and field selectors.
    let api: Api<Lease> = Api::default_namespaced(t.client.clone());
    let (store, writer) = reflector::store();
    let cfg = watcher::Config::default()
        .labels("app in (web,api)")
        .fields("metadata.name!=skip");
    let task = tokio::spawn(
        reflector(writer, watcher(api, cfg))
            .default_backoff()
            .for_each(|_| futures::future::ready(())),
    );
    tokio::time::timeout(SOON, store.wait_until_ready())
        .await
        .unwrap()
        .unwrap();
    for (n, app) in [
        ("w1", "web"),
        ("w2", "api"),
        ("skip", "web"),
        ("o", "other"),
    ] {
        create(&t, LEASES, &lease_with_labels(n, json!({"app": app}))).await;
    }
    merge(
        &t,
        &format!("{LEASES}/w1"),
        json!({"metadata": {"labels": {"app": "other"}}}),
    )
    .await;
    merge(
        &t,
        &format!("{LEASES}/o"),
        json!({"metadata": {"labels": {"app": "api"}}}),
    )
    .await;
    let want = vec!["o".to_owned(), "w2".to_owned()];
    let ok = eventually(SOON, || {
        let mut got: Vec<String> = store
            .state()
            .iter()
            .map(|l| l.metadata.name.clone().unwrap())
            .collect();
        got.sort();
        let want = want.clone();
        async move { (got == want).then_some(()) }
    })
    .await;
    assert!(
        ok.is_some(),
        "store: {:?}",
        store
            .state()
            .iter()
            .map(|l| l.metadata.name.clone())
            .collect::<Vec<_>>()
    );
    task.abort();
}

#[tokio::test]
async fn f42_watch_is_one_json_object_per_line_flushed_at_once_never_compressed() {
    let t = common::start().await;
    let from = t.current_rv().await;
    let mut w = RawWatch::open_with(
        &t,
        &format!("{LEASES}?watch=true&resourceVersion={from}"),
        &[("accept-encoding", "gzip, deflate")],
    )
    .await;
    assert_eq!(w.status, 200);
    assert!(
        w.headers.get("content-encoding").is_none(),
        "{:?}",
        w.headers
    );
    assert_eq!(w.headers.get("content-type").unwrap(), "application/json");
    for i in 0..3 {
        let started = Instant::now();
        create(&t, LEASES, &mk_lease(&format!("l{i}"), "1")).await;
        // Each event arrives while the stream is open and nothing else is written.
        let ev = w.next().await;
        assert!(started.elapsed() < SOON, "{:?}", started.elapsed());
        assert_eq!(brief(&ev), pair("ADDED", &format!("l{i}")));
    }
    // Every frame is whole lines, each line one JSON object.
    assert!(!w.frames.is_empty());
    for f in &w.frames {
        assert_eq!(
            f.last(),
            Some(&b'\n'),
            "frame does not end a line: {}",
            String::from_utf8_lossy(f)
        );
        for line in f.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            let v: Value = serde_json::from_slice(line).unwrap();
            assert!(v["type"].is_string() && v["object"].is_object());
            assert!(!line.contains(&b'\n'));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// F. Resource-specific

#[tokio::test]
async fn f43_lease_times_are_micro_time_with_six_fractional_digits() {
    let t = common::start().await;
    let mut l = mk_lease("l43", "a");
    l["spec"]["acquireTime"] = json!("2026-11-22T10:00:00.123456Z");
    l["spec"]["renewTime"] = json!("2026-11-22T10:00:01.000000Z");
    let created = create(&t, LEASES, &l).await;
    assert_eq!(
        created["spec"]["acquireTime"],
        "2026-11-22T10:00:00.123456Z"
    );
    assert_eq!(created["spec"]["renewTime"], "2026-11-22T10:00:01.000000Z");
    for (bad, tail, layout) in [
        ("2026-11-22T10:00:00Z", "Z", ".000000"),
        ("2026-11-22T10:00:00.123Z", ".123Z", ".000000"),
        // Found by the differential tests: six digits parse, then the zone fails.
        ("2026-11-22T10:00:00.123456789Z", "789Z", "Z07:00"),
    ] {
        let mut l = mk_lease("l43-bad", "a");
        l["spec"]["renewTime"] = json!(bad);
        let (code, err) = t.raw("POST", LEASES, JSON, bytes(&l)).await;
        assert_eq!(code, 400, "{bad}: {err}");
        assert_status(&err, 400, "BadRequest");
        assert_eq!(
            err["message"],
            format!(
                "Lease in version \"v1\" cannot be handled as a Lease: parsing time \"{bad}\" as \"2006-01-02T15:04:05.000000Z07:00\": cannot parse \"{tail}\" as \"{layout}\""
            )
        );
        // Updates are decoded the same way.
        let (code, _) = t
            .raw(
                "PATCH",
                &format!("{LEASES}/l43"),
                MERGE,
                bytes(&json!({"spec": {"renewTime": bad}})),
            )
            .await;
        assert!(code == 400 || code == 422, "{bad} through a patch: {code}");
    }
    // kube-rs writes MicroTime in that form and reads it back.
    let leases: Api<Lease> = Api::default_namespaced(t.client.clone());
    let now = jiff::Timestamp::now();
    let p = json!({"spec": {"renewTime": k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(now)}});
    leases
        .patch("l43", &PatchParams::default(), &Patch::Merge(&p))
        .await
        .unwrap();
    let (_, raw) = get(&t, &format!("{LEASES}/l43")).await;
    let s = raw["spec"]["renewTime"].as_str().unwrap();
    assert_eq!(s.len(), "2026-11-22T10:00:01.000000Z".len(), "{s}");
    // Six fractional digits and a zone, the rest an RFC 3339 date-time.
    let micro = s.as_bytes()[19] == b'.'
        && s[20..26].bytes().all(|b| b.is_ascii_digit())
        && s.ends_with('Z')
        && s[..19].parse::<jiff::civil::DateTime>().is_ok();
    assert!(micro, "{s}");
    let back = leases.get("l43").await.unwrap();
    assert_eq!(
        back.spec.unwrap().renew_time.unwrap().0.as_microsecond(),
        now.as_microsecond()
    );
}

#[tokio::test]
async fn f44_lease_duration_and_transitions_are_validated_and_gated_fields_dropped() {
    let t = common::start().await;
    let mut l = mk_lease("l44", "a");
    l["spec"]["leaseDurationSeconds"] = json!(0);
    let (code, err) = t.raw("POST", LEASES, JSON, bytes(&l)).await;
    assert_eq!(code, 422, "{err}");
    assert_status(&err, 422, "Invalid");
    assert_eq!(
        err["message"],
        "Lease.coordination.k8s.io \"l44\" is invalid: spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0"
    );
    assert_eq!(
        err["details"],
        json!({"name": "l44", "group": "coordination.k8s.io", "kind": "Lease", "causes": [
            {"reason": "FieldValueInvalid", "message": "Invalid value: 0: must be greater than 0", "field": "spec.leaseDurationSeconds"}]})
    );
    l["spec"]["leaseDurationSeconds"] = json!(-3);
    l["spec"]["leaseTransitions"] = json!(-1);
    let (code, err) = t.raw("POST", LEASES, JSON, bytes(&l)).await;
    assert_eq!(code, 422);
    assert_eq!(
        err["message"],
        "Lease.coordination.k8s.io \"l44\" is invalid: [spec.leaseDurationSeconds: Invalid value: -3: must be greater than 0, spec.leaseTransitions: Invalid value: -1: must be greater than or equal to 0]"
    );
    // Updates too.
    let ok = create(&t, LEASES, &mk_lease("l44", "a")).await;
    let (code, err) = t
        .raw(
            "PATCH",
            &format!("{LEASES}/l44"),
            MERGE,
            bytes(&json!({"spec": {"leaseTransitions": -2}})),
        )
        .await;
    assert_eq!(code, 422, "{err}");
    assert_eq!(
        err["message"],
        "Lease.coordination.k8s.io \"l44\" is invalid: spec.leaseTransitions: Invalid value: -2: must be greater than or equal to 0"
    );

    // strategy / preferredHolder belong to a disabled gate: dropped on create and update.
    let mut g = mk_lease("l44-gated", "a");
    g["spec"]["strategy"] = json!("OldestEmulationVersion");
    g["spec"]["preferredHolder"] = json!("b");
    let created = create(&t, LEASES, &g).await;
    assert!(
        created["spec"].get("strategy").is_none()
            && created["spec"].get("preferredHolder").is_none(),
        "{created}"
    );
    let patched = merge(
        &t,
        &format!("{LEASES}/l44"),
        json!({"spec": {"strategy": "OldestEmulationVersion", "preferredHolder": "b"}}),
    )
    .await;
    assert!(
        patched["spec"].get("strategy").is_none()
            && patched["spec"].get("preferredHolder").is_none(),
        "{patched}"
    );
    // The field manager runs before the strategy drops them: managedFields still name them,
    // so the write is a write (found by the real tier; the simulator saw a no-op).
    assert!(rv(&patched) > rv(&ok), "{patched}");
    let fields = patched["metadata"]["managedFields"].to_string();
    assert!(
        fields.contains("f:strategy") && fields.contains("f:preferredHolder"),
        "{fields}"
    );
    assert!(
        created["metadata"]["managedFields"]
            .to_string()
            .contains("f:strategy"),
        "{created}"
    );
}

/// `kubectl` running in the background, read line by line.
struct Kubectl {
    child: tokio::process::Child,
    lines: tokio::sync::mpsc::UnboundedReceiver<String>,
}

impl Kubectl {
    fn spawn(t: &TestSim, args: &[&str]) -> Self {
        let mut child = tokio::process::Command::new(common::kubectl_path())
            .args(args)
            .env("KUBECONFIG", &t.kubeconfig)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("kubectl runs");
        let out = std::fs::File::from(child.stdout.take().unwrap().into_owned_fd().unwrap());
        let (tx, lines) = tokio::sync::mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for line in std::io::BufRead::lines(std::io::BufReader::new(out)) {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self { child, lines }
    }

    /// The next line printed, within 20 s (kubectl's start-up includes discovery).
    async fn line(&mut self) -> String {
        tokio::time::timeout(Duration::from_secs(20), self.lines.recv())
            .await
            .expect("kubectl prints a line")
            .expect("kubectl still running")
    }
}

#[tokio::test]
async fn f45_a_client_go_style_release_is_accepted_and_kubectl_watch_shows_the_empty_holder() {
    let t = common::start().await;
    let mut l = mk_lease("l45", "pod-0");
    l["spec"]["acquireTime"] = json!("2026-11-22T10:00:00.000000Z");
    l["spec"]["renewTime"] = json!("2026-11-22T10:00:05.000000Z");
    l["spec"]["leaseTransitions"] = json!(2);
    let created = create(&t, LEASES, &l).await;

    let mut kubectl = Kubectl::spawn(&t, &["get", "leases", "-w"]);
    let header = kubectl.line().await;
    assert_eq!(
        header.split_whitespace().collect::<Vec<_>>(),
        ["NAME", "HOLDER", "AGE"]
    );
    let row = kubectl.line().await;
    assert_eq!(
        row.split_whitespace().take(2).collect::<Vec<_>>(),
        ["l45", "pod-0"]
    );

    // What client-go's leader election PUTs on release.
    let mut release = created.clone();
    release["spec"] = json!({"holderIdentity": "", "leaseDurationSeconds": 1, "acquireTime": "2026-11-22T10:00:09.000000Z",
                             "renewTime": "2026-11-22T10:00:09.000000Z", "leaseTransitions": 2});
    let (code, released) = t
        .raw("PUT", &format!("{LEASES}/l45"), JSON, bytes(&release))
        .await;
    assert_eq!(code, 200, "{released}");
    assert_eq!(released["spec"]["holderIdentity"], "");
    assert_eq!(released["spec"]["leaseDurationSeconds"], 1);

    let row = kubectl.line().await;
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cols.len(), 2, "the holder column is empty: {row:?}");
    assert_eq!(cols[0], "l45");
    assert!(cols[1].ends_with('s'), "{row:?}");
    let _ = kubectl.child.kill().await;

    // The Table kubectl reads: Holder cell is "".
    let resp = send(
        &t,
        "GET",
        &format!("{LEASES}?fieldSelector=metadata.name%3Dl45"),
        &[("accept", TABLE_ACCEPT)],
    )
    .await;
    let table: Value =
        serde_json::from_slice(&resp.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert_eq!(table["kind"], "Table");
    assert_eq!(table["apiVersion"], "meta.k8s.io/v1");
    let cols: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(cols, ["Name", "Holder", "Age"]);
    assert_eq!(table["rows"][0]["cells"][0], "l45");
    assert_eq!(table["rows"][0]["cells"][1], "");
    // The list's resourceVersion is the store's at the time of the read: at least the
    // release's, at most the newest after it (on a real kube-apiserver other writers — its own
    // identity Leases, tests running beside this one — share the counter, so not equality).
    let after = t.current_rv().await;
    assert!(
        (rv(&released)..=after).contains(&rv(&table)),
        "list at {}, release at {}, newest {after}",
        rv(&table),
        rv(&released)
    );

    // A Table watch: column definitions only on the first event.
    let mut w = RawWatch::open_with(
        &t,
        &format!("{LEASES}?watch=true"),
        &[("accept", TABLE_ACCEPT)],
    )
    .await;
    let first = w.next().await;
    assert_eq!(first["type"], "ADDED");
    assert_eq!(first["object"]["kind"], "Table");
    assert_eq!(first["object"]["columnDefinitions"][1]["name"], "Holder");
    merge(
        &t,
        &format!("{LEASES}/l45"),
        json!({"spec": {"holderIdentity": "pod-1"}}),
    )
    .await;
    let next = w.next().await;
    assert_eq!(next["type"], "MODIFIED");
    assert!(
        next["object"]["columnDefinitions"]
            .as_array()
            .is_none_or(Vec::is_empty),
        "{next}"
    );
    assert_eq!(next["object"]["rows"][0]["cells"][1], "pod-1");
}

fn events_k8s_io(n: &str, regarding: &Value, reason: &str, note: &str) -> Value {
    json!({
        "apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": n},
        "eventTime": "2026-11-22T10:00:00.000000Z", "reportingController": "example.com/ctl", "reportingInstance": "ctl-1",
        "action": "Starting", "reason": reason, "type": "Normal", "note": note, "regarding": regarding
    })
}

#[tokio::test]
async fn f46_events_k8s_io_events_are_core_events_too_and_the_kube_rs_recorder_makes_series() {
    let t = common::start().await;
    let pod = create(&t, PODS, &mk_pod("p46", json!({}))).await;
    let regarding = json!({"kind": "Pod", "namespace": t.ns, "name": "p46", "uid": pod["metadata"]["uid"], "apiVersion": "v1"});
    let created = create(
        &t,
        "/apis/events.k8s.io/v1/namespaces/{ns}/events",
        &events_k8s_io("p46.1", &regarding, "Started", "container started"),
    )
    .await;
    assert_eq!(created["apiVersion"], "events.k8s.io/v1");
    assert_eq!(created["regarding"], regarding);
    assert_eq!(created["note"], "container started");

    let (code, core) = get(&t, "/api/v1/namespaces/{ns}/events/p46.1").await;
    assert_eq!(code, 200, "{core}");
    assert_eq!(core["apiVersion"], "v1");
    assert_eq!(core["kind"], "Event");
    assert_eq!(core["involvedObject"], regarding);
    assert_eq!(core["message"], "container started");
    assert_eq!(core["reason"], "Started");
    assert_eq!(core["type"], "Normal");
    assert_eq!(core["reportingComponent"], "example.com/ctl");
    assert_eq!(core["reportingInstance"], "ctl-1");
    assert!(
        core.get("regarding").is_none() && core.get("note").is_none(),
        "{core}"
    );

    // What kubectl describe asks for.
    let sel = format!(
        "involvedObject.name%3Dp46%2CinvolvedObject.namespace%3D{}%2CinvolvedObject.uid%3D{}",
        t.ns,
        pod["metadata"]["uid"].as_str().unwrap()
    );
    let (_, list) = get(
        &t,
        &format!("/api/v1/namespaces/{{ns}}/events?fieldSelector={sel}"),
    )
    .await;
    assert_eq!(names(&list), ["p46.1"]);
    let out = t.kubectl(&["describe", "pod", "p46"]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let events_part = text.split("Events:").nth(1).expect("an Events section");
    assert!(
        events_part.contains("Started") && events_part.contains("container started"),
        "{text}"
    );

    // kube-rs Recorder: create, then a merge patch with series.
    use kube::runtime::events::{Event, EventType, Recorder, Reporter};
    let recorder = Recorder::new(
        t.client.clone(),
        Reporter {
            controller: "leasehold-test".into(),
            instance: Some("test-0".into()),
        },
    );
    let pods: Api<Pod> = Api::default_namespaced(t.client.clone());
    let p = pods.get("p46").await.unwrap();
    let ev = Event {
        type_: EventType::Warning,
        reason: "Flapping".into(),
        note: Some("lost the lease".into()),
        action: "Renew".into(),
        secondary: None,
    };
    let reference = kube::Resource::object_ref(&p, &());
    recorder.publish(&ev, &reference).await.unwrap();
    recorder.publish(&ev, &reference).await.unwrap();
    let (_, list) = get(
        &t,
        "/api/v1/namespaces/{ns}/events?fieldSelector=reason%3DFlapping",
    )
    .await;
    let items = list["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "one Event with a series: {list}");
    let e = &items[0];
    assert_eq!(e["series"]["count"], 2);
    assert!(e["series"]["lastObservedTime"].is_string());
    assert_eq!(e["message"], "lost the lease");
    assert_eq!(e["type"], "Warning");
    assert_eq!(e["involvedObject"]["name"], "p46");
    assert_eq!(e["involvedObject"]["uid"], pod["metadata"]["uid"]);
    assert_eq!(e["reportingComponent"], "leasehold-test");
    let (_, v1) = get(
        &t,
        &format!(
            "/apis/events.k8s.io/v1/namespaces/{{ns}}/events/{}",
            name(e)
        ),
    )
    .await;
    assert_eq!(v1["series"]["count"], 2);
    assert_eq!(v1["regarding"]["name"], "p46");
    assert_eq!(v1["note"], "lost the lease");
}

#[tokio::test]
async fn f47_token_and_access_reviews_are_create_only_and_answer_with_status() {
    sim_only!(
        "a simulator auth table with an RBAC-like rule (the real reviews are compared in differential.rs d_token_and_access_reviews)"
    );
    use kube_sim::auth::{AuthTable, Rule, User};
    let auth = AuthTable {
        users: vec![User {
            token: "viewer-token".into(),
            name: "viewer".into(),
            uid: "v-1".into(),
            groups: vec!["viewers".into()],
        }],
        rules: vec![Rule {
            name: "view-leases".into(),
            subjects: vec!["group:viewers".into()],
            verbs: vec!["get".into(), "list".into(), "watch".into()],
            api_groups: vec!["coordination.k8s.io".into()],
            resources: vec!["leases".into()],
            namespaces: vec!["default".into()],
        }],
    };
    let t = common::start_with(SimOptions {
        auth,
        ..Default::default()
    })
    .await;

    // TokenReview.
    let tr = |token: &str| json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}});
    let (code, ok) = t
        .raw(
            "POST",
            "/apis/authentication.k8s.io/v1/tokenreviews",
            JSON,
            bytes(&tr("viewer-token")),
        )
        .await;
    assert_eq!(code, 201, "{ok}");
    assert_eq!(ok["kind"], "TokenReview");
    assert_eq!(ok["status"]["authenticated"], true);
    assert_eq!(ok["status"]["user"]["username"], "viewer");
    assert_eq!(ok["status"]["user"]["uid"], "v-1");
    assert_eq!(
        ok["status"]["user"]["groups"],
        json!(["viewers", "system:authenticated"])
    );
    let (code, bad) = t
        .raw(
            "POST",
            "/apis/authentication.k8s.io/v1/tokenreviews",
            JSON,
            bytes(&tr("nope")),
        )
        .await;
    assert_eq!(code, 201);
    assert!(!bad["status"]["authenticated"].as_bool().unwrap_or(false));
    assert_eq!(bad["status"]["user"], json!({}));

    // SubjectAccessReview.
    let sar = |verb: &str, ns: &str| {
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
               "spec": {"user": "viewer", "groups": ["viewers"], "resourceAttributes": {"verb": verb, "group": "coordination.k8s.io", "resource": "leases", "namespace": ns}}})
    };
    for (verb, ns, allowed) in [
        ("list", "default", true),
        ("watch", "default", true),
        ("update", "default", false),
        ("list", "kube-system", false),
    ] {
        let (code, r) = t
            .raw(
                "POST",
                "/apis/authorization.k8s.io/v1/subjectaccessreviews",
                JSON,
                bytes(&sar(verb, ns)),
            )
            .await;
        assert_eq!(code, 201, "{r}");
        assert_eq!(r["status"]["allowed"], allowed, "{verb} in {ns}: {r}");
        assert_eq!(r["spec"]["user"], "viewer");
    }
    // SelfSubjectAccessReview as the viewer.
    let viewer = t.sim().client_for("viewer-token").await.unwrap();
    let ssar = |verb: &str| {
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
               "spec": {"resourceAttributes": {"verb": verb, "group": "coordination.k8s.io", "resource": "leases", "namespace": "default"}}})
    };
    for (verb, allowed) in [("get", true), ("delete", false)] {
        let req = http::Request::post("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews")
            .header("content-type", "application/json")
            .body(kube::client::Body::from(bytes(&ssar(verb))))
            .unwrap();
        let resp = viewer.send(req).await.unwrap();
        assert_eq!(resp.status(), 201);
        let r: Value =
            serde_json::from_slice(&resp.into_body().collect().await.unwrap().to_bytes()).unwrap();
        assert_eq!(r["status"]["allowed"], allowed, "{verb}: {r}");
    }
    // The viewer's own requests follow the same rules.
    let leases: Api<Lease> = Api::default_namespaced(viewer.clone());
    leases.list(&ListParams::default()).await.unwrap();
    let err = leases
        .create(
            &PostParams::default(),
            &serde_json::from_value(mk_lease("x", "v")).unwrap(),
        )
        .await
        .unwrap_err();
    assert_eq!(status_of(&err).code, 403);

    // POST only, nothing stored; discovery says `create`.
    for path in [
        "/apis/authentication.k8s.io/v1/tokenreviews",
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
    ] {
        let (code, err) = get(&t, path).await;
        assert_eq!(code, 405, "GET {path}: {err}");
        assert_status(&err, 405, "MethodNotAllowed");
    }
    for (gv, res) in [
        ("authentication.k8s.io/v1", "tokenreviews"),
        ("authorization.k8s.io/v1", "subjectaccessreviews"),
        ("authorization.k8s.io/v1", "selfsubjectaccessreviews"),
    ] {
        let (_, list) = get(&t, &format!("/apis/{gv}")).await;
        let r = list["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == res)
            .unwrap_or_else(|| panic!("{res} in {list}"));
        assert_eq!(r["verbs"], json!(["create"]), "{res}");
        assert_eq!(r["namespaced"], false);
    }
}

/// The fake kubelet; on a real apiserver over this test's namespace only.
fn kubelet(t: &TestSim, all_pods: bool) -> tokio::task::JoinHandle<anyhow::Result<()>> {
    tokio::spawn(kube_sim::kubelet::run(
        t.client.clone(),
        kube_sim::kubelet::KubeletOptions {
            all_pods,
            namespace: t.is_real().then(|| t.ns.clone()),
        },
    ))
}

async fn wait_pod(t: &TestSim, n: &str, what: &str, f: impl Fn(&Value) -> bool) -> Value {
    let path = format!("{PODS}/{n}");
    let found = eventually(Duration::from_secs(5), || {
        let path = path.clone();
        let f = &f;
        async move {
            let (code, p) = get(t, &path).await;
            (code == 200 && f(&p)).then_some(p)
        }
    })
    .await;
    found.unwrap_or_else(|| panic!("pod {n} never became {what}"))
}

#[tokio::test]
async fn f48_services_get_cluster_ips_load_balancers_ingress_and_endpoint_slices_list_ready_pods() {
    let t = common::start().await;
    let svc = |n: &str, spec: Value| json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": n}, "spec": spec});
    let web = create(
        &t,
        "/api/v1/namespaces/{ns}/services",
        &svc(
            "web",
            json!({"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]}),
        ),
    )
    .await;
    let ip: std::net::Ipv4Addr = web["spec"]["clusterIP"].as_str().unwrap().parse().unwrap();
    assert_eq!(
        u32::from(ip) & 0xfff0_0000,
        u32::from(std::net::Ipv4Addr::new(10, 96, 0, 0)),
        "{ip} is in 10.96.0.0/12"
    );
    assert_ne!(
        ip.to_string(),
        "10.96.0.1",
        "that one is the kubernetes Service's"
    );
    assert_eq!(web["spec"]["clusterIPs"], json!([ip.to_string()]));
    assert_eq!(web["spec"]["type"], "ClusterIP");
    let headless = create(
        &t,
        "/api/v1/namespaces/{ns}/services",
        &svc(
            "headless",
            json!({"clusterIP": "None", "selector": {"app": "web"}, "ports": [{"port": 80}]}),
        ),
    )
    .await;
    assert_eq!(headless["spec"]["clusterIP"], "None");
    assert_eq!(headless["spec"]["clusterIPs"], json!(["None"]));
    let lb = create(
        &t,
        "/api/v1/namespaces/{ns}/services",
        &svc(
            "lb",
            json!({"type": "LoadBalancer", "selector": {"app": "web"}, "ports": [{"port": 443}]}),
        ),
    )
    .await;
    let np = lb["spec"]["ports"][0]["nodePort"].as_i64().unwrap();
    assert!((30000..=32767).contains(&np));
    assert!(lb["status"]["loadBalancer"].get("ingress").is_none());

    for (n, app) in [("web-0", "web"), ("web-1", "web"), ("other", "other")] {
        create(&t, PODS, &scheduled_pod(n, json!({"app": app}), 2)).await;
    }
    let k = kubelet(&t, false);

    // The cloud loop gives the LoadBalancer an ingress IP.
    let ingress = eventually(Duration::from_secs(5), || async {
        let (_, s) = get(&t, "/api/v1/namespaces/{ns}/services/lb").await;
        s["status"]["loadBalancer"]["ingress"][0]["ip"]
            .as_str()
            .map(str::to_owned)
    })
    .await
    .expect("LoadBalancer ingress");
    assert!(ingress.starts_with("172.18.255."), "{ingress}");
    let (_, web_now) = get(&t, "/api/v1/namespaces/{ns}/services/web").await;
    assert!(
        web_now["status"]["loadBalancer"].get("ingress").is_none(),
        "only LoadBalancers get one"
    );

    // EndpointSlices list the ready pods' IPs.
    let ips: Vec<String> = {
        let mut v = Vec::new();
        for n in ["web-0", "web-1"] {
            let p = wait_pod(&t, n, "running with an IP", |p| {
                p["status"]["podIP"].is_string()
            })
            .await;
            v.push(p["status"]["podIP"].as_str().unwrap().to_owned());
        }
        v
    };
    let slices = "/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices?labelSelector=kubernetes.io%2Fservice-name%3Dweb";
    let endpoints = |want_ready: Vec<(String, bool)>| {
        let t = &t;
        async move {
            let (_, l) = get(t, slices).await;
            let items = l["items"].as_array()?.clone();
            if items.len() != 1 {
                return None;
            }
            let s = &items[0];
            let mut got: Vec<(String, bool)> = s["endpoints"]
                .as_array()?
                .iter()
                .map(|e| {
                    (
                        e["addresses"][0].as_str().unwrap_or_default().to_owned(),
                        e["conditions"]["ready"].as_bool().unwrap_or(false),
                    )
                })
                .collect();
            got.sort();
            (got == want_ready).then(|| s.clone())
        }
    };
    let mut want: Vec<(String, bool)> = ips.iter().map(|i| (i.clone(), true)).collect();
    want.sort();
    let slice = eventually(Duration::from_secs(5), || endpoints(want.clone()))
        .await
        .expect("an EndpointSlice with both pod IPs, ready");
    assert_eq!(slice["addressType"], "IPv4");
    assert_eq!(
        slice["metadata"]["labels"]["kubernetes.io/service-name"],
        "web"
    );
    assert_eq!(
        slice["metadata"]["ownerReferences"][0]["uid"],
        web["metadata"]["uid"]
    );
    assert_eq!(
        slice["ports"],
        json!([{"name": "", "port": 8080, "protocol": "TCP"}])
    );

    // A pod that stops being ready stays listed, not ready.
    let (_, before) = get(&t, &format!("{PODS}/web-1")).await;
    kube_sim::kubelet::set_ready(&t.client, &t.ns, "web-1", false)
        .await
        .unwrap();
    let (_, after) = get(&t, &format!("{PODS}/web-1")).await;
    let cs = |p: &Value, k: &str| p["status"]["containerStatuses"][0][k].clone();
    assert_eq!(cs(&after, "ready"), false);
    assert_eq!(
        cs(&after, "containerID"),
        cs(&before, "containerID"),
        "readiness is not a restart"
    );
    assert_eq!(cs(&after, "state"), cs(&before, "state"));
    let mut want: Vec<(String, bool)> = vec![(ips[0].clone(), true), (ips[1].clone(), false)];
    want.sort();
    let slice = eventually(Duration::from_secs(5), || endpoints(want.clone()))
        .await
        .expect("web-1 not ready");
    let e1 = slice["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["targetRef"]["name"] == "web-1")
        .unwrap();
    assert_eq!(
        e1["conditions"],
        json!({"ready": false, "serving": false, "terminating": false})
    );

    // A terminating pod is listed as terminating, serving but not ready.
    t.raw("DELETE", &format!("{PODS}/web-0"), None, vec![])
        .await;
    let mut want: Vec<(String, bool)> = vec![(ips[0].clone(), false), (ips[1].clone(), false)];
    want.sort();
    let slice = eventually(Duration::from_secs(5), || endpoints(want.clone()))
        .await
        .expect("web-0 terminating");
    let e0 = slice["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["targetRef"]["name"] == "web-0")
        .unwrap();
    assert_eq!(
        e0["conditions"],
        json!({"ready": false, "serving": true, "terminating": true})
    );
    // A failed pod is no endpoint at all.
    kube_sim::kubelet::fail(&t.client, &t.ns, "web-1")
        .await
        .unwrap();
    let gone_from_slice = eventually(Duration::from_secs(5), || async {
        let (_, l) = get(&t, slices).await;
        let eps = l["items"][0]["endpoints"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        (!eps.iter().any(|e| e["targetRef"]["name"] == "web-1")).then_some(())
    })
    .await;
    assert!(gone_from_slice.is_some(), "a Failed pod leaves the slice");

    // Deleting the Service takes its slices with it (ownerReferences).
    t.raw(
        "DELETE",
        "/api/v1/namespaces/{ns}/services/web",
        None,
        vec![],
    )
    .await;
    let collected = eventually(Duration::from_secs(5), || async {
        let (_, l) = get(&t, slices).await;
        (l["items"] == json!([])).then_some(())
    })
    .await;
    assert!(
        collected.is_some(),
        "the Service's EndpointSlice is garbage-collected"
    );
    k.abort();
}

// ---------------------------------------------------------------------------------------------
// G. The fake kubelet

#[tokio::test]
async fn f49_the_kubelet_runs_scheduled_pods_ready_with_ips() {
    let t = common::start().await;
    let mut with_init = scheduled_pod("p49", json!({"app": "x"}), 30);
    with_init["spec"]["initContainers"] = json!([{"name": "setup", "image": "example/setup:1"}]);
    create(&t, PODS, &with_init).await;
    create(&t, PODS, &mk_pod("unscheduled", json!({}))).await;
    let k = kubelet(&t, false);
    let p = wait_pod(&t, "p49", "Running", |p| p["status"]["phase"] == "Running").await;
    let s = &p["status"];
    assert!(s["podIP"].as_str().unwrap().starts_with("10.244."), "{s}");
    assert_eq!(s["podIPs"], json!([{"ip": s["podIP"]}]));
    assert_eq!(s["hostIP"], "172.18.0.2");
    assert!(
        s["startTime"]
            .as_str()
            .unwrap()
            .parse::<jiff::Timestamp>()
            .is_ok()
    );
    let conds: BTreeSet<(String, String)> = s["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["type"].as_str().unwrap().to_owned(),
                c["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    for c in ["Initialized", "Ready", "ContainersReady", "PodScheduled"] {
        assert!(
            conds.contains(&(c.to_owned(), "True".to_owned())),
            "{c}: {conds:?}"
        );
    }
    let cs = &s["containerStatuses"][0];
    assert_eq!(cs["name"], "app");
    assert_eq!(cs["ready"], true);
    assert_eq!(cs["restartCount"], 0);
    assert!(cs["state"]["running"]["startedAt"].is_string());
    assert_eq!(
        s["qosClass"], "BestEffort",
        "the kubelet keeps what it does not own"
    );
    let init = &s["initContainerStatuses"][0];
    assert_eq!(init["name"], "setup");
    assert_eq!(init["state"]["terminated"]["reason"], "Completed");
    assert_eq!(init["state"]["terminated"]["exitCode"], 0);
    let (_, u) = get(&t, &format!("{PODS}/unscheduled")).await;
    assert_eq!(u["status"]["phase"], "Pending", "no node, no kubelet");

    // Table output (kubectl get pods).
    let resp = send(&t, "GET", PODS, &[("accept", TABLE_ACCEPT)]).await;
    let table: Value =
        serde_json::from_slice(&resp.into_body().collect().await.unwrap().to_bytes()).unwrap();
    let cols: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        cols,
        [
            "Name",
            "Ready",
            "Status",
            "Restarts",
            "Age",
            "IP",
            "Node",
            "Nominated Node",
            "Readiness Gates"
        ]
    );
    let row = table["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["cells"][0] == "p49")
        .unwrap();
    assert_eq!(
        row["cells"].as_array().unwrap()[1..4],
        [json!("1/1"), json!("Running"), json!("0")]
    );
    assert_eq!(row["cells"][5], s["podIP"]);
    assert_eq!(row["cells"][6], "sim-node-1");
    assert_eq!(row["object"]["kind"], "PartialObjectMetadata");
    let out = t.kubectl(&["get", "pod", "p49", "--no-headers"]).await;
    let line = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        line.split_whitespace().take(4).collect::<Vec<_>>(),
        ["p49", "1/1", "Running", "0"],
        "{line}"
    );
    k.abort();

    // With all_pods, unscheduled pods run too.
    let k = kubelet(&t, true);
    let u = wait_pod(&t, "unscheduled", "Running", |p| {
        p["status"]["phase"] == "Running"
    })
    .await;
    assert!(u["status"]["podIP"].is_string());
    assert_ne!(u["status"]["podIP"], s["podIP"], "pod IPs are unique");
    k.abort();
}

#[tokio::test]
async fn f50_the_kubelet_honours_the_grace_period_and_crash_removes_at_once() {
    let t = common::start().await;
    for n in ["graceful", "crashing", "finishing", "failing"] {
        create(
            &t,
            PODS,
            &scheduled_pod(n, json!({}), if n == "graceful" { 2 } else { 30 }),
        )
        .await;
    }
    let k = kubelet(&t, false);
    for n in ["graceful", "crashing", "finishing", "failing"] {
        wait_pod(&t, n, "Running", |p| p["status"]["phase"] == "Running").await;
    }

    // Graceful: Terminating for the grace period, then removed by the kubelet.
    let (_, p) = get(&t, &format!("{PODS}/graceful")).await;
    let mut w = RawWatch::open(
        &t,
        &format!(
            "{PODS}?watch=true&fieldSelector=metadata.name%3Dgraceful&resourceVersion={}",
            rv(&p)
        ),
    )
    .await;
    let deleted_at = Instant::now();
    let (code, answer) = t
        .raw("DELETE", &format!("{PODS}/graceful"), None, vec![])
        .await;
    assert_eq!(code, 200);
    assert_eq!(answer["metadata"]["deletionGracePeriodSeconds"], 2);
    let m = w.next().await;
    assert_eq!(brief(&m), pair("MODIFIED", "graceful"));
    assert!(m["object"]["metadata"]["deletionTimestamp"].is_string());
    let resp = send(
        &t,
        "GET",
        &format!("{PODS}?fieldSelector=metadata.name%3Dgraceful"),
        &[("accept", TABLE_ACCEPT)],
    )
    .await;
    let table: Value =
        serde_json::from_slice(&resp.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert_eq!(table["rows"][0]["cells"][2], "Terminating");
    let gone = loop {
        let ev = match w.try_next(Duration::from_secs(5)).await {
            Ok(Some(ev)) => ev,
            other => panic!("no DELETED within 5 s: {other:?}"),
        };
        if ev["type"] == "DELETED" {
            break deleted_at.elapsed();
        }
        assert_eq!(ev["type"], "MODIFIED", "{ev}");
    };
    assert!(
        gone >= Duration::from_secs(2),
        "removed after {gone:?}, before its 2 s grace period"
    );
    // Its grace, then the kubelet's next pass (a loaded real tier adds its writes' latency).
    assert!(
        gone < Duration::from_secs(2) + SOON,
        "removed only after {gone:?}"
    );

    // Crash: gone at once, no grace.
    kube_sim::kubelet::crash(&t.client, &t.ns, "crashing")
        .await
        .unwrap();
    assert_eq!(get(&t, &format!("{PODS}/crashing")).await.0, 404);

    // Finish: a terminating pod whose containers exited goes before its grace period ends.
    t.raw("DELETE", &format!("{PODS}/finishing"), None, vec![])
        .await;
    let (_, p) = get(&t, &format!("{PODS}/finishing")).await;
    assert_eq!(p["metadata"]["deletionGracePeriodSeconds"], 30);
    kube_sim::kubelet::finish(&t.client, &t.ns, "finishing")
        .await
        .unwrap();
    assert_eq!(get(&t, &format!("{PODS}/finishing")).await.0, 404);

    // Fail: the pod is marked Failed; a finished pod is then deleted at once.
    kube_sim::kubelet::fail(&t.client, &t.ns, "failing")
        .await
        .unwrap();
    let (_, p) = get(&t, &format!("{PODS}/failing")).await;
    assert_eq!(p["status"]["phase"], "Failed");
    assert_eq!(
        p["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"],
        137
    );
    assert_eq!(p["status"]["containerStatuses"][0]["ready"], false);
    let ready = p["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .unwrap();
    assert_eq!(ready["status"], "False");
    let (code, _) = t
        .raw("DELETE", &format!("{PODS}/failing"), None, vec![])
        .await;
    assert_eq!(code, 200);
    assert_eq!(get(&t, &format!("{PODS}/failing")).await.0, 404);
    k.abort();
}

/// An immediate pod delete is still a graceful one of zero seconds: watchers see the deletion
/// mark (MODIFIED, deletionGracePeriodSeconds 0) and then DELETED, as kube-apiserver sends them.
#[tokio::test]
async fn f28_immediate_pod_delete_is_marked_then_removed() {
    let t = common::start().await;
    let created = create(&t, PODS, &mk_pod("p28-now", json!({}))).await;
    let from = rv(&created);
    let (code, _) = t
        .raw("DELETE", &format!("{PODS}/p28-now"), None, vec![])
        .await;
    assert_eq!(code, 200);
    let events = t
        .watch_events(
            &format!("{PODS}?watch=true&resourceVersion={from}"),
            &[],
            2,
            Duration::from_secs(3),
        )
        .await;
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["MODIFIED", "DELETED"]);
    assert_eq!(
        events[0]["object"]["metadata"]["deletionGracePeriodSeconds"],
        0
    );
    assert!(events[0]["object"]["metadata"]["deletionTimestamp"].is_string());
}

/// `ObjectMeta` maps are `omitempty`: removing the last label or annotation removes the map.
#[tokio::test]
async fn f22_removing_the_last_label_leaves_no_empty_map() {
    let t = common::start().await;
    let mut lease = mk_lease("l22", "a");
    lease["metadata"]["labels"] = json!({"team": "x"});
    lease["metadata"]["annotations"] = json!({"note": "y"});
    create(&t, LEASES, &lease).await;
    let patch = json!({"metadata": {"labels": {"team": null}, "annotations": {"note": null}}});
    let (code, out) = t
        .raw(
            "PATCH",
            &format!("{LEASES}/l22"),
            Some("application/merge-patch+json"),
            bytes(&patch),
        )
        .await;
    assert_eq!(code, 200, "{out}");
    assert!(out["metadata"].get("labels").is_none(), "{out}");
    assert!(out["metadata"].get("annotations").is_none(), "{out}");
}
