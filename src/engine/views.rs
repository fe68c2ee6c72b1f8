//! The latest model of each cluster, shared by the control loop and readers (the HTTP API and
//! dashboard). Building a model walks every target (tens of milliseconds and megabytes at
//! 50,000), so it is built once and shared: the control loop builds a fresh one every pass and
//! leaves it here; a reader takes the latest if nothing changed since it was built or it is
//! younger than [`MAX_READ_AGE`], and builds (and leaves) one otherwise.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::k8s::model::ClusterModel;

/// How old a model a reader accepts while the index keeps changing.
pub const MAX_READ_AGE: Duration = Duration::from_millis(250);

/// One built model and what readers derive from it once.
#[derive(Debug)]
pub struct View {
    /// The model.
    pub model: ClusterModel,
    /// The index version it was built from.
    version: u64,
    built: Instant,
    imbalance: OnceLock<f64>,
}

impl View {
    /// `f` computed on first use, then remembered for this model.
    pub(super) fn imbalance(&self, f: impl FnOnce(&ClusterModel) -> f64) -> f64 {
        *self.imbalance.get_or_init(|| f(&self.model))
    }
}

/// The latest view per cluster.
#[derive(Debug, Default)]
pub(super) struct Views {
    latest: Mutex<HashMap<String, Arc<View>>>,
}

impl Views {
    /// Keeps `model`, built from index `version`, as the cluster's latest, and returns it.
    pub(super) fn keep(&self, model: ClusterModel, version: u64) -> Arc<View> {
        let view = Arc::new(View {
            version,
            built: Instant::now(),
            imbalance: OnceLock::new(),
            model,
        });
        let mut latest = self.latest.lock().unwrap_or_else(|e| e.into_inner());
        // A slower builder must not replace a view built from a newer index.
        match latest.get(&view.model.name) {
            Some(cur) if cur.version > view.version => cur.clone(),
            _ => {
                latest.insert(view.model.name.clone(), view.clone());
                view
            }
        }
    }

    /// The latest view of `cluster` if it is good enough for a reader at index `version`.
    pub(super) fn recent(&self, cluster: &str, version: u64) -> Option<Arc<View>> {
        let latest = self.latest.lock().unwrap_or_else(|e| e.into_inner());
        latest
            .get(cluster)
            .filter(|v| v.version == version || v.built.elapsed() < MAX_READ_AGE)
            .cloned()
    }
}
