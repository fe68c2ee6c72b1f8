//! Authentication and authorisation of HTTP callers. (Temporary shim with the agreed interface;
//! replaced by the full module.)

use std::net::SocketAddr;

use serde::Deserialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    #[default]
    Kubernetes,
    Token,
    None,
}

#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
pub struct AuthSettings {
    #[serde(default)]
    pub mode: Mode,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub user: String,
    pub uid: String,
    pub groups: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Read,
    Rebalance,
    RemoveInstance,
    Uncordon,
    CancelOperation,
}

#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("{0}")]
    Config(String),
}

#[derive(Debug, Clone)]
pub struct Auth {
    mode: Mode,
}

impl Auth {
    pub async fn new(
        settings: &AuthSettings,
        _listen: SocketAddr,
        _client: Option<kube::Client>,
    ) -> Result<Auth, AuthError> {
        Ok(Auth {
            mode: settings.mode,
        })
    }
    pub fn mode(&self) -> Mode {
        self.mode
    }
    pub async fn authenticate(&self, _token: &str) -> Result<Option<Principal>, AuthError> {
        Ok(None)
    }
    pub fn anonymous(&self) -> Option<Principal> {
        None
    }
    pub async fn authorize(
        &self,
        _who: &Principal,
        _action: Action,
        _cluster: Option<&str>,
    ) -> Result<bool, AuthError> {
        Ok(false)
    }
}
