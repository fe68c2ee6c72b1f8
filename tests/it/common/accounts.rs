//! Kubeconfigs for ServiceAccounts, with tokens from the TokenRequest API, so a process under
//! test is authorised (and classified by API Priority and Fairness) as the account the
//! manifests give it, not as the admin, whom priority and fairness exempt.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::Api;
use serde_json::{Value, json};

use super::eventually;

/// A kubeconfig for ServiceAccount `sa` of `ns` (a token valid for an hour), written in `dir`.
pub async fn service_account_kubeconfig(
    t: &super::TestSim,
    ns: &str,
    sa: &str,
    dir: &Path,
) -> PathBuf {
    let sas: Api<ServiceAccount> = Api::namespaced(t.client.clone(), ns);
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: vec![],
            expiration_seconds: Some(3600),
            ..Default::default()
        },
        ..Default::default()
    };
    let token = eventually(Duration::from_secs(20), || async {
        let answer = sas
            .create_token_request(sa, &Default::default(), &request)
            .await
            .ok()?;
        Some(answer.status?.token)
    })
    .await
    .unwrap_or_else(|| panic!("no token for serviceaccount {ns}/{sa}"));
    let admin: Value = serde_json::from_str(&t.kubeconfig_text()).unwrap();
    let cluster = &admin["clusters"][0]["cluster"];
    let kc = json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "envtest", "cluster": cluster}],
        "users": [{"name": sa, "user": {"token": token}}],
        "contexts": [{"name": sa, "context": {"cluster": "envtest", "user": sa, "namespace": ns}}],
        "current-context": sa,
    });
    let path = dir.join(format!("kubeconfig-{ns}-{sa}"));
    std::fs::write(&path, serde_json::to_vec_pretty(&kc).unwrap()).unwrap();
    path
}
