//! Controllers that run inside the simulated API server process with direct store access.
//! Only the namespace lifecycle lives here (kube-controller-manager's namespace controller):
//! a Terminating namespace has its contents deleted, its deletion conditions kept up to date
//! (what remains and which finalizers hold it, as `kubectl describe namespace` shows), then
//! its `kubernetes` finalizer removed.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::http::HeaderMap;
use serde_json::{Value, json};

use super::auth::Identity;
use super::handlers::{self, Ctx, internal};
use super::registry::{self, TYPES, TypeId};
use super::request::{Query, ResourceRequest};
use super::status::ApiResult;
use super::{Shared, now_rfc3339};

/// Pause between sweeps, so a burst of writes costs one sweep.
const SWEEP_DEBOUNCE: Duration = Duration::from_millis(100);
/// The field manager of the controller's status writes.
const MANAGER: &str = "kube-controller-manager";

/// Runs the namespace controller until the store goes away.
pub async fn namespaces(shared: Arc<Shared>) -> anyhow::Result<()> {
    let mut rx = shared.store.subscribe();
    loop {
        sweep(&shared);
        if rx.changed().await.is_err() {
            return Ok(());
        }
        tokio::time::sleep(SWEEP_DEBOUNCE).await;
    }
}

fn stored_types() -> impl Iterator<Item = TypeId> {
    TYPES
        .iter()
        .enumerate()
        .filter(|(_, t)| t.namespaced && !t.review && t.group != "events.k8s.io")
        .map(|(i, _)| i as TypeId)
}

fn is_deleting(v: &Value) -> bool {
    v.pointer("/metadata/deletionTimestamp")
        .is_some_and(|d| !d.is_null())
}

/// What is left in a namespace after a deletion pass: instances per `resource.group` (the
/// core group prints as `pods.`, as the controller's message does) and per finalizer.
#[derive(Debug, Default, PartialEq, Eq)]
struct Remaining {
    by_resource: BTreeMap<String, usize>,
    by_finalizer: BTreeMap<String, usize>,
}

impl Remaining {
    fn is_empty(&self) -> bool {
        self.by_resource.is_empty()
    }
}

fn sweep(shared: &Shared) {
    let ns_type = registry::id_of("", "namespaces");
    let (_, all) = shared.store.snapshot(ns_type, None);
    for ns in all
        .iter()
        .filter(|n| n.field("status.phase").as_deref() == Some("Terminating"))
    {
        let name = ns.field("metadata.name").unwrap_or_default();
        let mut remaining = Remaining::default();
        for t in stored_types() {
            let (_, items) = shared.store.snapshot(t, Some(&name));
            for item in &items {
                if is_deleting(&item.value()) {
                    continue;
                }
                let obj_name = item.field("metadata.name").unwrap_or_default();
                if let Err(e) = internal::delete(shared, t, &name, &obj_name)
                    && e.code != 404
                {
                    tracing::warn!(namespace = %name, object = %obj_name, error = %e, "namespace cleanup could not delete an object");
                }
            }
            // What the deletions left (finalizers, graceful pods).
            let (_, left) = shared.store.snapshot(t, Some(&name));
            if left.is_empty() {
                continue;
            }
            let rt = registry::get(t);
            remaining
                .by_resource
                .insert(format!("{}.{}", rt.resource, rt.group), left.len());
            for item in &left {
                let v = item.value();
                for f in v
                    .pointer("/metadata/finalizers")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                {
                    *remaining.by_finalizer.entry(f.to_owned()).or_default() += 1;
                }
            }
        }
        let v = ns.value();
        if let Some(status) = updated_status(&v, &remaining)
            && let Err(e) = update_status(shared, &name, &v, status)
            && e.code != 404
            && e.code != 409
        {
            tracing::warn!(namespace = %name, error = %e, "namespace status update failed");
        }
        if remaining.is_empty() {
            let finalizers: Vec<String> = v
                .pointer("/spec/finalizers")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .filter(|f| *f != "kubernetes")
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default();
            if let Err(e) = internal::finalize(shared, &name, finalizers)
                && e.code != 404
            {
                tracing::warn!(namespace = %name, error = %e, "namespace finalize failed");
            }
        }
    }
}

/// The condition types the namespace deleter maintains, in its order, with the reason and
/// message of their "ok" (False) form (`pkg/controller/namespace/deletion`).
const CONDITIONS: &[(&str, &str, &str)] = &[
    (
        "NamespaceDeletionDiscoveryFailure",
        "ResourcesDiscovered",
        "All resources successfully discovered",
    ),
    (
        "NamespaceDeletionGroupVersionParsingFailure",
        "ParsedGroupVersions",
        "All legacy kube types successfully parsed",
    ),
    (
        "NamespaceDeletionContentFailure",
        "ContentDeleted",
        "All content successfully deleted, may be waiting on finalization",
    ),
    (
        "NamespaceContentRemaining",
        "ContentRemoved",
        "All content successfully removed",
    ),
    (
        "NamespaceFinalizersRemaining",
        "ContentRemoved",
        "All content successfully removed",
    ),
];

/// The namespace status with its deletion conditions brought up to date, or None when they
/// already say that (the controller writes only on change).
fn updated_status(ns: &Value, remaining: &Remaining) -> Option<Value> {
    let now = now_rfc3339();
    let mut status = ns.get("status").cloned().unwrap_or_else(|| json!({}));
    let mut conditions: Vec<Value> = status
        .get("conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut changed = false;
    for (ty, ok_reason, ok_message) in CONDITIONS {
        let failing = match *ty {
            "NamespaceContentRemaining" if !remaining.by_resource.is_empty() => {
                let parts: Vec<String> = remaining
                    .by_resource
                    .iter()
                    .map(|(r, n)| format!("{r} has {n} resource instances"))
                    .collect();
                Some((
                    "SomeResourcesRemain",
                    format!("Some resources are remaining: {}", parts.join(", ")),
                ))
            }
            "NamespaceFinalizersRemaining" if !remaining.by_finalizer.is_empty() => {
                let parts: Vec<String> = remaining
                    .by_finalizer
                    .iter()
                    .map(|(f, n)| format!("{f} in {n} resource instances"))
                    .collect();
                Some((
                    "SomeFinalizerRemain",
                    format!("Some finalizers are remaining: {}", parts.join(", ")),
                ))
            }
            _ => None,
        };
        let (flag, reason, message) = match &failing {
            Some((reason, message)) => ("True", *reason, message.as_str()),
            None => ("False", *ok_reason, *ok_message),
        };
        match conditions.iter_mut().find(|c| c["type"] == *ty) {
            None => {
                conditions.push(json!({ "type": ty, "status": flag, "lastTransitionTime": now, "reason": reason, "message": message }));
                changed = true;
            }
            Some(c) if c["status"] != flag || c["reason"] != reason || c["message"] != message => {
                if c["status"] != flag {
                    c["lastTransitionTime"] = json!(now);
                }
                c["status"] = json!(flag);
                c["reason"] = json!(reason);
                c["message"] = json!(message);
                changed = true;
            }
            Some(_) => {}
        }
    }
    if !changed {
        return None;
    }
    status["conditions"] = Value::Array(conditions);
    Some(status)
}

/// PUT `namespaces/{name}/status` as the controller, conditional on the version read.
fn update_status(shared: &Shared, name: &str, ns: &Value, status: Value) -> ApiResult<()> {
    let headers = HeaderMap::new();
    let type_id = registry::id_of("", "namespaces");
    let ctx = Ctx {
        shared,
        req: ResourceRequest {
            type_id,
            rt: registry::get(type_id),
            namespace: String::new(),
            name: Some(name.to_owned()),
            subresource: Some("status".into()),
        },
        query: Query {
            field_manager: Some(MANAGER.into()),
            ..Query::default()
        },
        headers: &headers,
        who: Identity {
            name: "system:serviceaccount:kube-system:namespace-controller".into(),
            uid: String::new(),
            groups: vec![
                super::auth::MASTERS.into(),
                super::auth::AUTHENTICATED.into(),
            ],
        },
    };
    let mut body = ns.clone();
    body["status"] = status;
    handlers::update(&ctx, &serde_json::to_vec(&body).unwrap_or_default()).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conditions_say_what_remains_and_change_only_when_it_does() {
        let ns = json!({"metadata": {"name": "x"}, "status": {"phase": "Terminating"}});
        let mut r = Remaining::default();
        r.by_resource.insert("leases.coordination.k8s.io".into(), 1);
        r.by_resource.insert("pods.".into(), 2);
        r.by_finalizer.insert("example.com/hold".into(), 1);
        let s = updated_status(&ns, &r).unwrap();
        let c = s["conditions"].as_array().unwrap();
        assert_eq!(c.len(), 5);
        assert_eq!(
            c[3]["message"],
            "Some resources are remaining: leases.coordination.k8s.io has 1 resource instances, pods. has 2 resource instances"
        );
        assert_eq!(
            c[4]["message"],
            "Some finalizers are remaining: example.com/hold in 1 resource instances"
        );
        assert_eq!(c[0]["status"], "False");
        let again = json!({"metadata": {"name": "x"}, "status": s});
        assert!(updated_status(&again, &r).is_none());
        let done = updated_status(&again, &Remaining::default()).unwrap();
        assert_eq!(done["conditions"][3]["reason"], "ContentRemoved");
        assert_eq!(done["conditions"][3]["status"], "False");
    }
}
