//! What every handler gets: the engine (the latest cluster models via `Engine::view`, plans,
//! operations, the store), authentication, and the live event feed.

use crate::engine::Engine;

use super::auth::Auth;
use super::demo::DemoControls;
use super::events::Hub;
use super::host::AllowedHosts;
use super::refusals::Budget;

/// The state every handler shares (cheap to clone).
#[derive(Clone)]
pub struct AppState {
    /// The engine: models, plans, operations, the history store.
    pub engine: Engine,
    /// Who callers are and what they may do.
    pub auth: Auth,
    /// The live event feed.
    pub events: Hub,
    /// Served over TLS (session cookies get `Secure`).
    pub tls: bool,
    /// Demo-only controls; `None` outside `leasehold demo`.
    pub demo: Option<DemoControls>,
    /// The `Host` names requests may use.
    pub hosts: AllowedHosts,
    /// How many refused requests may still be audited this minute.
    pub refusals: Budget,
}
