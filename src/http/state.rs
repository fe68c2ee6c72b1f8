//! What every handler gets: the engine (model, operations, store), authentication, and the
//! cache of cluster models the API and dashboard read from.
//!
//! Building a model walks every target (tens of milliseconds at 50,000), so requests never
//! build one: a task owned by `http::run` rebuilds a cluster's model when the index changed,
//! at most every [`MODEL_REFRESH`], and requests borrow the latest `Arc`. Reads are therefore
//! at most that much (plus one build) behind the watch.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use crate::engine::Engine;
use crate::k8s::model::ClusterModel;

use super::auth::Auth;

/// Shortest time between two model builds of one cluster for readers.
pub const MODEL_REFRESH: Duration = Duration::from_millis(250);

/// The state every handler shares (cheap to clone).
#[derive(Clone)]
pub struct AppState {
    /// The engine: model, plans, operations, the history store.
    pub engine: Engine,
    /// Who callers are and what they may do.
    pub auth: Auth,
    /// The latest model per cluster.
    pub models: Models,
    /// The live event feed.
    pub events: super::events::Hub,
}

/// A cluster's model as readers see it, with what is derived from it once per build.
#[derive(Clone)]
pub struct Snapshot {
    /// The model.
    pub model: Arc<ClusterModel>,
    /// Largest load over fair share, minus 1 (the planner's measure).
    pub imbalance: f64,
}

/// The latest model of each cluster, shared by readers.
#[derive(Clone, Default)]
pub struct Models {
    inner: Arc<RwLock<HashMap<String, Snapshot>>>,
}

impl Models {
    /// The latest model of `cluster`, if it was built at least once.
    pub fn get(&self, cluster: &str) -> Option<Snapshot> {
        self.inner
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(cluster)
            .cloned()
    }

    /// Rebuilds every cluster's model from the engine now.
    pub fn refresh(&self, engine: &Engine) {
        for c in &engine.config().clusters {
            if let Ok(model) = engine.model(&c.name) {
                let imbalance = engine.imbalance(&model);
                let snap = Snapshot {
                    model: Arc::new(model),
                    imbalance,
                };
                self.inner
                    .write()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(c.name.clone(), snap);
            }
        }
    }

    /// Keeps the models fresh until the index's change feed closes: rebuilds after each
    /// change, at most every [`MODEL_REFRESH`].
    pub async fn run(self, engine: Engine) {
        let mut versions = engine.shared().versions();
        loop {
            self.refresh(&engine);
            tokio::time::sleep(MODEL_REFRESH).await;
            if versions.changed().await.is_err() {
                return;
            }
        }
    }
}
