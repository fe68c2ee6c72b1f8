//! Controllers that run inside the simulated API server process with direct store access.
//! Only the namespace lifecycle lives here (kube-controller-manager's namespace controller):
//! a Terminating namespace has its contents deleted, then its `kubernetes` finalizer removed.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::Shared;
use super::handlers::internal;
use super::registry::{self, TYPES, TypeId};

/// Pause between sweeps, so a burst of writes costs one sweep.
const SWEEP_DEBOUNCE: Duration = Duration::from_millis(100);

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

fn sweep(shared: &Shared) {
    let ns_type = registry::id_of("", "namespaces");
    let (_, all) = shared.store.snapshot(ns_type, None);
    for ns in all
        .iter()
        .filter(|n| n.field("status.phase").as_deref() == Some("Terminating"))
    {
        let name = ns.field("metadata.name").unwrap_or_default();
        let mut remaining = 0usize;
        for t in stored_types() {
            let (_, items) = shared.store.snapshot(t, Some(&name));
            for item in items {
                remaining += 1;
                let v = item.value();
                if v.pointer("/metadata/deletionTimestamp")
                    .is_some_and(|d| !d.is_null())
                {
                    continue;
                }
                let obj_name = item.field("metadata.name").unwrap_or_default();
                if let Err(e) = internal::delete(shared, t, &name, &obj_name)
                    && e.code != 404
                {
                    tracing::warn!(namespace = %name, object = %obj_name, error = %e, "namespace cleanup could not delete an object");
                }
            }
        }
        if remaining == 0 {
            let v = ns.value();
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
