//! Fidelity tests for behaviour 25 of `/work/shared/kubernetes-fidelity.md`: server-side apply
//! and `metadata.managedFields`, as kube-apiserver 1.33 does them (field manager chain of
//! `k8s.io/apimachinery/pkg/util/managedfields`, structured-merge-diff, `NewApplyConflict`).
use kube_sim::testkit as common;

use common::{TestSim, mk_lease};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::core::Status;
use serde_json::{Value, json};

const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases";
const APPLY: Option<&str> = Some("application/apply-patch+yaml");

fn body(v: &Value) -> Vec<u8> {
    serde_json::to_vec(v).unwrap()
}

fn leases(t: &TestSim) -> Api<Lease> {
    Api::namespaced(t.client.clone(), &t.ns)
}

fn api_err<T: std::fmt::Debug>(r: Result<T, kube::Error>) -> Box<Status> {
    match r {
        Err(kube::Error::Api(s)) => s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// An applied configuration of a Lease with the given spec.
fn applied(name: &str, spec: Value) -> Value {
    json!({ "apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": { "name": name }, "spec": spec })
}

async fn apply(
    t: &TestSim,
    name: &str,
    manager: &str,
    force: bool,
    spec: Value,
) -> Result<Lease, kube::Error> {
    let mut pp = PatchParams::apply(manager);
    pp.force = force;
    leases(t)
        .patch(name, &pp, &Patch::Apply(applied(name, spec)))
        .await
}

/// The managedFields of an object as JSON, keyed by (manager, operation).
fn managed(v: &Value) -> Vec<Value> {
    v.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

fn entry<'a>(entries: &'a [Value], manager: &str, operation: &str) -> Option<&'a Value> {
    entries
        .iter()
        .find(|e| e["manager"] == manager && e["operation"] == operation)
}

async fn get_raw(t: &TestSim, name: &str) -> Value {
    let (code, v) = t
        .raw("GET", &format!("{LEASES}/{name}"), None, vec![])
        .await;
    assert_eq!(code, 200, "{v}");
    v
}

fn is_rfc3339_seconds(ts: &str) -> bool {
    ts.len() == 20 && ts.ends_with('Z') && ts.parse::<jiff::Timestamp>().is_ok()
}

#[tokio::test]
async fn f25_field_manager_is_required() {
    let t = common::start().await;
    let (code, v) = t
        .raw(
            "PATCH",
            &format!("{LEASES}/x"),
            APPLY,
            body(&applied("x", json!({"holderIdentity": "a"}))),
        )
        .await;
    assert_eq!(code, 422);
    assert_eq!(
        v,
        json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
            "reason": "Invalid",
            "details": { "group": "meta.k8s.io", "kind": "PatchOptions", "causes": [{ "reason": "FieldValueRequired", "message": "Required value: is required for apply patch", "field": "fieldManager" }] },
            "code": 422
        })
    );
    // kube-rs without a field manager gets the same answer.
    let s = api_err(
        leases(&t)
            .patch(
                "x",
                &PatchParams::default(),
                &Patch::Apply(applied("x", json!({}))),
            )
            .await,
    );
    assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"));
    assert!(leases(&t).get_opt("x").await.unwrap().is_none());
}

#[tokio::test]
async fn f25_apply_creates_with_a_managed_fields_entry() {
    let t = common::start().await;
    let (code, v) = t
        .raw(
            "PATCH",
            &format!("{LEASES}/made?fieldManager=mgr-a"),
            APPLY,
            body(&applied("made", json!({"holderIdentity": "a"}))),
        )
        .await;
    assert_eq!(code, 201, "apply of a missing object creates it: {v}");
    assert_eq!(v["spec"]["holderIdentity"], "a");
    assert!(v["metadata"]["uid"].is_string());
    let entries = managed(&v);
    assert_eq!(entries.len(), 1, "{entries:?}");
    let e = &entries[0];
    let keys: std::collections::BTreeSet<&str> =
        e.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "apiVersion",
            "fieldsType",
            "fieldsV1",
            "manager",
            "operation",
            "time"
        ]
        .into_iter()
        .collect()
    );
    assert_eq!(e["manager"], "mgr-a");
    assert_eq!(e["operation"], "Apply");
    assert_eq!(e["apiVersion"], "coordination.k8s.io/v1");
    assert_eq!(e["fieldsType"], "FieldsV1");
    assert!(is_rfc3339_seconds(e["time"].as_str().unwrap()), "{e}");
    assert_eq!(e["fieldsV1"], json!({"f:spec": {"f:holderIdentity": {}}}));
    // Applying the same configuration again is a no-op: 200, same resourceVersion.
    let again = apply(&t, "made", "mgr-a", false, json!({"holderIdentity": "a"}))
        .await
        .unwrap();
    assert_eq!(
        again.metadata.resource_version.as_deref(),
        v["metadata"]["resourceVersion"].as_str()
    );
    // Labels are tracked per key.
    let l = leases(&t)
        .patch(
            "made",
            &PatchParams::apply("mgr-a"),
            &Patch::Apply(json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "made", "labels": {"team": "x"}}, "spec": {"holderIdentity": "a"}})),
        )
        .await
        .unwrap();
    let v = serde_json::to_value(&l).unwrap();
    let e = entry(&managed(&v), "mgr-a", "Apply").cloned().unwrap();
    assert_eq!(
        e["fieldsV1"],
        json!({"f:metadata": {"f:labels": {"f:team": {}}}, "f:spec": {"f:holderIdentity": {}}})
    );
}

#[tokio::test]
async fn f25_apply_resource_version_is_a_precondition_only_on_update() {
    let t = common::start().await;
    // Creating through apply ignores a resourceVersion in the configuration.
    let mut cfg = applied("rv", json!({"holderIdentity": "a"}));
    cfg["metadata"]["resourceVersion"] = json!("12345");
    let (code, v) = t
        .raw(
            "PATCH",
            &format!("{LEASES}/rv?fieldManager=m"),
            APPLY,
            body(&cfg),
        )
        .await;
    assert_eq!(code, 201, "{v}");
    assert_ne!(v["metadata"]["resourceVersion"], "12345");
    // On an existing object a stale one conflicts.
    let (code, v) = t
        .raw(
            "PATCH",
            &format!("{LEASES}/rv?fieldManager=m"),
            APPLY,
            body(&cfg),
        )
        .await;
    assert_eq!(code, 409, "{v}");
    assert_eq!(
        v["message"],
        "Operation cannot be fulfilled on leases.coordination.k8s.io \"rv\": the object has been modified; please apply your changes to the latest version and try again"
    );
}

#[tokio::test]
async fn f25_managed_fields_in_an_apply_body_are_refused() {
    let t = common::start().await;
    let mut cfg = applied("mf", json!({"holderIdentity": "a"}));
    cfg["metadata"]["managedFields"] =
        json!([{"manager": "x", "operation": "Apply", "fieldsType": "FieldsV1", "fieldsV1": {}}]);
    let (code, v) = t
        .raw(
            "PATCH",
            &format!("{LEASES}/mf?fieldManager=mgr-a"),
            APPLY,
            body(&cfg),
        )
        .await;
    assert_eq!(code, 400);
    assert_eq!(
        v,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": "metadata.managedFields must be nil", "reason": "BadRequest", "code": 400})
    );
    assert!(leases(&t).get_opt("mf").await.unwrap().is_none());
}

#[tokio::test]
async fn f25_conflicts_name_the_owner_and_force_moves_ownership() {
    let t = common::start().await;
    apply(
        &t,
        "c",
        "mgr-a",
        false,
        json!({"holderIdentity": "a", "leaseDurationSeconds": 10}),
    )
    .await
    .unwrap();
    // One conflict.
    let (code, v) = t
        .raw(
            "PATCH",
            &format!("{LEASES}/c?fieldManager=mgr-b"),
            APPLY,
            body(&applied("c", json!({"holderIdentity": "b"}))),
        )
        .await;
    assert_eq!(code, 409);
    assert_eq!(
        v,
        json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "Apply failed with 1 conflict: conflict with \"mgr-a\": .spec.holderIdentity",
            "reason": "Conflict",
            "details": { "causes": [{ "reason": "FieldManagerConflict", "message": "conflict with \"mgr-a\"", "field": ".spec.holderIdentity" }] },
            "code": 409
        })
    );
    // Two conflicts with one manager.
    let s = api_err(
        apply(
            &t,
            "c",
            "mgr-b",
            false,
            json!({"holderIdentity": "b", "leaseDurationSeconds": 20}),
        )
        .await,
    );
    assert_eq!((s.code, s.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        s.message,
        "Apply failed with 2 conflicts: conflicts with \"mgr-a\":\n- .spec.holderIdentity\n- .spec.leaseDurationSeconds"
    );
    let causes: Vec<(&str, &str, &str)> = s
        .details
        .as_ref()
        .unwrap()
        .causes
        .iter()
        .map(|c| (c.reason.as_str(), c.message.as_str(), c.field.as_str()))
        .collect();
    assert_eq!(
        causes,
        [
            (
                "FieldManagerConflict",
                "conflict with \"mgr-a\"",
                ".spec.holderIdentity"
            ),
            (
                "FieldManagerConflict",
                "conflict with \"mgr-a\"",
                ".spec.leaseDurationSeconds"
            )
        ]
    );
    assert_eq!(
        leases(&t)
            .get("c")
            .await
            .unwrap()
            .spec
            .unwrap()
            .holder_identity
            .as_deref(),
        Some("a")
    );

    // force=true takes the field.
    let l = apply(&t, "c", "mgr-b", true, json!({"holderIdentity": "b"}))
        .await
        .unwrap();
    assert_eq!(
        l.spec.as_ref().unwrap().holder_identity.as_deref(),
        Some("b")
    );
    let v = serde_json::to_value(&l).unwrap();
    let entries = managed(&v);
    assert_eq!(
        entry(&entries, "mgr-b", "Apply").unwrap()["fieldsV1"],
        json!({"f:spec": {"f:holderIdentity": {}}})
    );
    assert_eq!(
        entry(&entries, "mgr-a", "Apply").unwrap()["fieldsV1"],
        json!({"f:spec": {"f:leaseDurationSeconds": {}}})
    );
    // Now mgr-a is the one in conflict.
    let s = api_err(
        apply(
            &t,
            "c",
            "mgr-a",
            false,
            json!({"holderIdentity": "a", "leaseDurationSeconds": 10}),
        )
        .await,
    );
    assert_eq!(
        s.message,
        "Apply failed with 1 conflict: conflict with \"mgr-b\": .spec.holderIdentity"
    );
}

#[tokio::test]
async fn f25_equal_values_are_co_owned_and_dropped_fields_are_removed() {
    let t = common::start().await;
    apply(
        &t,
        "co",
        "mgr-a",
        false,
        json!({"holderIdentity": "same", "leaseDurationSeconds": 10}),
    )
    .await
    .unwrap();
    // Same value from another applier: no conflict, both own it.
    let l = apply(&t, "co", "mgr-b", false, json!({"holderIdentity": "same"}))
        .await
        .expect("equal values do not conflict");
    let v = serde_json::to_value(&l).unwrap();
    let entries = managed(&v);
    assert_eq!(
        entry(&entries, "mgr-a", "Apply").unwrap()["fieldsV1"],
        json!({"f:spec": {"f:holderIdentity": {}, "f:leaseDurationSeconds": {}}})
    );
    assert_eq!(
        entry(&entries, "mgr-b", "Apply").unwrap()["fieldsV1"],
        json!({"f:spec": {"f:holderIdentity": {}}})
    );
    // mgr-a stops applying both fields: leaseDurationSeconds (only mgr-a's) goes, holderIdentity
    // (still mgr-b's) stays.
    let l = apply(&t, "co", "mgr-a", false, json!({})).await.unwrap();
    let spec = l.spec.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("same"));
    assert_eq!(
        spec.lease_duration_seconds, None,
        "a field dropped by its only applier is removed"
    );
    // mgr-b drops it too: gone.
    let l = apply(&t, "co", "mgr-b", false, json!({})).await.unwrap();
    assert_eq!(l.spec.and_then(|s| s.holder_identity), None);
}

#[tokio::test]
async fn f25_force_on_a_non_apply_patch_is_422() {
    let t = common::start().await;
    leases(&t)
        .create(
            &PostParams::default(),
            &serde_json::from_value(mk_lease("f", "a")).unwrap(),
        )
        .await
        .unwrap();
    let (code, v) = t
        .raw(
            "PATCH",
            &format!("{LEASES}/f?force=true"),
            Some("application/merge-patch+json"),
            body(&json!({"spec": {"holderIdentity": "b"}})),
        )
        .await;
    assert_eq!(code, 422);
    assert_eq!(
        v,
        json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "PatchOptions.meta.k8s.io \"\" is invalid: force: Forbidden: may not be specified for non-apply patch",
            "reason": "Invalid",
            "details": { "group": "meta.k8s.io", "kind": "PatchOptions", "causes": [{ "reason": "FieldValueForbidden", "message": "Forbidden: may not be specified for non-apply patch", "field": "force" }] },
            "code": 422
        })
    );
    for ct in [
        "application/strategic-merge-patch+json",
        "application/json-patch+json",
    ] {
        let b = if ct.contains("json-patch") {
            body(&json!([]))
        } else {
            body(&json!({}))
        };
        let (code, _) = t
            .raw("PATCH", &format!("{LEASES}/f?force=false"), Some(ct), b)
            .await;
        assert_eq!(code, 422, "{ct}: force is forbidden whatever its value");
    }
    assert_eq!(
        leases(&t)
            .get("f")
            .await
            .unwrap()
            .spec
            .unwrap()
            .holder_identity
            .as_deref(),
        Some("a")
    );
}

#[tokio::test]
async fn f25_updates_are_recorded_and_never_conflict() {
    let t = common::start().await;
    apply(
        &t,
        "u",
        "mgr-a",
        false,
        json!({"holderIdentity": "a", "leaseDurationSeconds": 10}),
    )
    .await
    .unwrap();
    // A merge patch changing an applied field: no conflict, ownership moves to the patcher.
    let l = leases(&t)
        .patch(
            "u",
            &PatchParams {
                field_manager: Some("patcher".into()),
                ..PatchParams::default()
            },
            &Patch::Merge(json!({"spec": {"holderIdentity": "p"}})),
        )
        .await
        .expect("non-apply writes never conflict");
    let v = serde_json::to_value(&l).unwrap();
    let entries = managed(&v);
    let p = entry(&entries, "patcher", "Update").expect("an Update entry for the patcher");
    assert_eq!(p["apiVersion"], "coordination.k8s.io/v1");
    assert_eq!(p["fieldsType"], "FieldsV1");
    assert!(is_rfc3339_seconds(p["time"].as_str().unwrap()));
    assert_eq!(p["fieldsV1"], json!({"f:spec": {"f:holderIdentity": {}}}));
    assert_eq!(
        entry(&entries, "mgr-a", "Apply").unwrap()["fieldsV1"],
        json!({"f:spec": {"f:leaseDurationSeconds": {}}})
    );
    // The applier now conflicts with the Update manager, named with its apiVersion.
    let s = api_err(
        apply(
            &t,
            "u",
            "mgr-a",
            false,
            json!({"holderIdentity": "a", "leaseDurationSeconds": 10}),
        )
        .await,
    );
    assert_eq!((s.code, s.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        s.message,
        "Apply failed with 1 conflict: conflict with \"patcher\" using coordination.k8s.io/v1: .spec.holderIdentity"
    );
    assert_eq!(
        s.details.unwrap().causes[0].message,
        "conflict with \"patcher\" using coordination.k8s.io/v1"
    );

    // PUT is an Update too.
    let mut cur = leases(&t).get("u").await.unwrap();
    cur.spec.as_mut().unwrap().lease_duration_seconds = Some(30);
    let l = leases(&t)
        .replace(
            "u",
            &PostParams {
                field_manager: Some("putter".into()),
                ..PostParams::default()
            },
            &cur,
        )
        .await
        .expect("PUT never conflicts");
    let v = serde_json::to_value(&l).unwrap();
    let entries = managed(&v);
    assert_eq!(
        entry(&entries, "putter", "Update").unwrap()["fieldsV1"],
        json!({"f:spec": {"f:leaseDurationSeconds": {}}})
    );
    assert!(
        entry(&entries, "mgr-a", "Apply").is_none(),
        "mgr-a owns nothing any more: {entries:?}"
    );

    // Create is recorded as an Update.
    let cms: Api<ConfigMap> = Api::namespaced(t.client.clone(), &t.ns);
    let cm = cms
        .create(
            &PostParams {
                field_manager: Some("creator".into()),
                ..PostParams::default()
            },
            &serde_json::from_value(json!({"metadata": {"name": "u"}, "data": {"k": "v"}}))
                .unwrap(),
        )
        .await
        .unwrap();
    let v = serde_json::to_value(&cm).unwrap();
    let e = entry(&managed(&v), "creator", "Update")
        .cloned()
        .expect("create recorded as Update");
    assert_eq!(e["fieldsV1"], json!({"f:data": {".": {}, "f:k": {}}}));
}

#[tokio::test]
async fn f25_apply_refuses_other_kinds_and_unknown_fields() {
    let t = common::start().await;
    // Wrong kind or version in the applied configuration.
    let mut cfg = applied("k", json!({}));
    cfg["apiVersion"] = json!("coordination.k8s.io/v1beta1");
    let (code, v) = t
        .raw(
            "PATCH",
            &format!("{LEASES}/k?fieldManager=m"),
            APPLY,
            body(&cfg),
        )
        .await;
    assert_eq!(code, 400, "{v}");
    assert_eq!(v["reason"], "BadRequest");
    // Fields the schema does not declare.
    let (code, v) = t
        .raw(
            "PATCH",
            &format!("{LEASES}/k?fieldManager=m"),
            APPLY,
            body(&applied("k", json!({"bogus": 1}))),
        )
        .await;
    assert_eq!(v["kind"], "Status", "{v}");
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains(".spec.bogus: field not declared in schema"),
        "{v}"
    );
    assert!(code == 400 || code == 500, "{code}");
    // A name that differs from the URL.
    let (code, v) = t
        .raw(
            "PATCH",
            &format!("{LEASES}/k?fieldManager=m"),
            APPLY,
            body(&applied("other", json!({}))),
        )
        .await;
    assert_eq!(code, 400, "{v}");
    assert_eq!(
        v["message"],
        "the name of the object (other) does not match the name on the URL (k)"
    );
    assert!(leases(&t).get_opt("k").await.unwrap().is_none());
}

#[tokio::test]
async fn f25_dry_run_apply_stores_nothing() {
    let t = common::start().await;
    let mut pp = PatchParams::apply("m");
    pp.dry_run = true;
    let l = leases(&t)
        .patch(
            "dry",
            &pp,
            &Patch::Apply(applied("dry", json!({"holderIdentity": "a"}))),
        )
        .await
        .unwrap();
    assert_eq!(l.spec.unwrap().holder_identity.as_deref(), Some("a"));
    assert!(leases(&t).get_opt("dry").await.unwrap().is_none());
    // Against an existing object: answered, not stored.
    apply(&t, "dry", "m", false, json!({"holderIdentity": "a"}))
        .await
        .unwrap();
    let before = get_raw(&t, "dry").await;
    let l = leases(&t)
        .patch(
            "dry",
            &pp,
            &Patch::Apply(applied("dry", json!({"holderIdentity": "b"}))),
        )
        .await
        .unwrap();
    assert_eq!(l.spec.unwrap().holder_identity.as_deref(), Some("b"));
    assert_eq!(get_raw(&t, "dry").await, before);
}
