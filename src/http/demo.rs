//! Demo-only controls (`leasehold demo`): add a member, stop one gracefully, crash one, so a
//! visitor sees failover, rebalance and removal. The HTTP side only sends a [`DemoAction`] to
//! the demo's own task and waits for its answer; nothing outside the demo creates
//! [`DemoControls`], so `leasehold serve` has no such routes' effects.

use tokio::sync::{mpsc, oneshot};

use super::error::ApiError;

/// What a visitor may do to the demo's simulated cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DemoAction {
    /// Start one more member pod with its agent.
    AddMember {
        /// Cluster.
        cluster: String,
    },
    /// Stop a member's agent gracefully (it releases its targets), then delete its pod.
    StopMember {
        /// Cluster.
        cluster: String,
        /// Member (pod name).
        instance: String,
    },
    /// Kill a member's agent without releasing anything; its pod turns unready (a crash).
    CrashMember {
        /// Cluster.
        cluster: String,
        /// Member (pod name).
        instance: String,
    },
}

/// One request to the demo task, with where to send its outcome (a message for people).
#[derive(Debug)]
pub struct DemoRequest {
    /// What to do.
    pub action: DemoAction,
    /// The outcome: what was done, or why not.
    pub reply: oneshot::Sender<Result<String, String>>,
}

/// The HTTP side's handle on the demo task.
#[derive(Debug, Clone)]
pub struct DemoControls {
    tx: mpsc::Sender<DemoRequest>,
}

impl DemoControls {
    /// A handle and the receiver the demo task serves.
    pub fn channel() -> (DemoControls, mpsc::Receiver<DemoRequest>) {
        let (tx, rx) = mpsc::channel(16);
        (DemoControls { tx }, rx)
    }

    /// Asks the demo task to do `action` and waits for its answer.
    pub async fn send(&self, action: DemoAction) -> Result<String, ApiError> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .send(DemoRequest { action, reply })
            .await
            .map_err(|_| ApiError::Unavailable("the demo has stopped".into()))?;
        answer
            .await
            .map_err(|_| ApiError::Unavailable("the demo has stopped".into()))?
            .map_err(ApiError::BadRequest)
    }
}
