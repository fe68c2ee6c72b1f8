//! The end of a remove-instance operation, after the drain: the removal webhook (once), the
//! optional pod deletion, cleanup of Leases the removed instance still holds, and the
//! `removed` instance event. Each step stores a phase marker when done, so a resumed operation
//! skips what already happened — the webhook is never called twice. Webhook credentials come
//! from the environment or a Secret at call time and are never logged or stored.

use std::sync::Arc;

use anyhow::Context as _;
use base64::Engine as _;
use http::{HeaderMap, HeaderValue, Method, header};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::Api;
use kube::api::DeleteParams;
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use tracing::info;

use super::Inner;
use crate::config::{Cluster, SecretSource, Webhook, WebhookAuth};
use crate::k8s::leases;
use crate::k8s::model::ClusterModel;
use crate::model::InstanceEventKind;
use crate::net::HttpClient;
use crate::protocol::{self, LeaseRole};
use crate::store::{InstanceEvent, Operation, now_ms};

/// The instance is cordoned (set when the operation is created).
pub const PHASE_CORDONED: &str = "cordoned";
/// The removal webhook answered 2xx.
pub const PHASE_WEBHOOK: &str = "webhook_called";
/// The pod was deleted.
pub const PHASE_POD_DELETED: &str = "pod_deleted";
/// Leases still held by the removed instance were cleaned up.
pub const PHASE_LEASES: &str = "leases_cleaned";

/// Phases in order; a stored phase means it and every earlier one are done.
const ORDER: [&str; 4] = [
    PHASE_CORDONED,
    PHASE_WEBHOOK,
    PHASE_POD_DELETED,
    PHASE_LEASES,
];

fn done(op: &Operation, phase: &str) -> bool {
    let at = |p: &str| ORDER.iter().position(|x| *x == p);
    match (op.phase.as_deref().and_then(at), at(phase)) {
        (Some(have), Some(want)) => have >= want,
        _ => false,
    }
}

pub(super) async fn finish(
    inner: &Arc<Inner>,
    spec: &Cluster,
    op: &Operation,
) -> anyhow::Result<()> {
    let instance = op
        .instance
        .as_deref()
        .context("remove-instance operation without an instance")?;
    // The latest phase: a previous attempt may have got further than `op` says.
    let op = inner
        .store
        .operation(&op.id)
        .await?
        .context("operation vanished")?;
    // Fresh, built on the model thread like every view.
    let view = inner
        .build_view(&spec.name, false)
        .await
        .context("unknown cluster")?;
    let model = &view.model;
    if let Some(hook) = &spec.policy.removal.webhook
        && !done(&op, PHASE_WEBHOOK)
    {
        call_webhook(inner, spec, model, hook, instance).await?;
        inner
            .store
            .set_operation_phase(&op.id, PHASE_WEBHOOK, now_ms())
            .await?;
    }
    if spec.policy.removal.delete_pod && !done(&op, PHASE_POD_DELETED) {
        let pods: Api<Pod> = Api::namespaced(inner.client.clone(), &spec.namespace);
        match pods.delete(instance, &DeleteParams::default()).await {
            Ok(_) => info!(instance, "pod deleted"),
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e).context("deleting the pod"),
        }
        inner
            .store
            .set_operation_phase(&op.id, PHASE_POD_DELETED, now_ms())
            .await?;
    }
    if !done(&op, PHASE_LEASES) {
        clean_leases(inner, spec, model, instance).await?;
        inner
            .store
            .set_operation_phase(&op.id, PHASE_LEASES, now_ms())
            .await?;
    }
    inner
        .store
        .record_instance_event(&InstanceEvent {
            cluster: spec.name.clone(),
            instance: instance.to_owned(),
            kind: InstanceEventKind::Removed,
            at_ms: now_ms(),
            detail: Some(format!("operation {}", op.id)),
        })
        .await?;
    Ok(())
}

/// Leases of targets no longer configured that the removed instance still holds go away; the
/// configured ones were drained to other members.
async fn clean_leases(
    inner: &Inner,
    spec: &Cluster,
    model: &ClusterModel,
    instance: &str,
) -> anyhow::Result<()> {
    let api: Api<Lease> = Api::namespaced(inner.client.clone(), &spec.namespace);
    for t in model
        .targets
        .iter()
        .filter(|t| !t.configured && t.owner.as_deref() == Some(instance))
    {
        if let Some(lease) = &t.lease {
            leases::delete_if(&api, lease, |l| {
                protocol::parse_native(l, &spec.name).is_some_and(|v| {
                    matches!(v.role, LeaseRole::Target(_))
                        && v.holding.holder.as_deref() == Some(instance)
                })
            })
            .await?;
        }
    }
    Ok(())
}

/// Fills the URL template. Values are percent-encoded.
pub fn render_url(
    template: &str,
    spec: &Cluster,
    model: &ClusterModel,
    instance: &str,
    ip: Option<&str>,
) -> Result<String, String> {
    let enc = |s: &str| utf8_percent_encode(s, NON_ALPHANUMERIC).to_string();
    let inst = model.instance(instance);
    let mut out = String::new();
    let mut rest = template;
    while let Some(start) = rest.find('{') {
        out.push_str(&rest[..start]);
        let end = rest[start..].find('}').ok_or("unclosed { in webhook URL")? + start;
        let name = &rest[start + 1..end];
        let value = match name {
            "cluster" => enc(&spec.name),
            "namespace" => enc(&spec.namespace),
            "instance" => enc(instance),
            "ip" => enc(ip
                .or(inst.and_then(|i| i.ip.as_deref()))
                .ok_or("the instance's IP is unknown")?),
            "dns" => enc(inst
                .and_then(|i| i.dns.as_deref())
                .ok_or("the instance has no stable DNS name")?),
            _ => match name.strip_prefix("role:") {
                // A host name, not encoded: it is the authority part of the URL.
                Some(role) => model
                    .instances
                    .iter()
                    .find(|i| i.role.as_deref() == Some(role) && i.ready && i.name != instance)
                    .and_then(|i| i.dns.clone().or_else(|| i.ip.clone()))
                    .ok_or_else(|| format!("no ready instance with role {role:?}"))?,
                None => return Err(format!("unknown placeholder {{{name}}} in webhook URL")),
            },
        };
        out.push_str(&value);
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

async fn secret_value(
    inner: &Inner,
    namespace: &str,
    src: &SecretSource,
) -> anyhow::Result<String> {
    match src {
        SecretSource::Env(var) => {
            std::env::var(var).with_context(|| format!("environment variable {var} is not set"))
        }
        SecretSource::Secret { name, key } => {
            let secrets: Api<Secret> = Api::namespaced(inner.client.clone(), namespace);
            let secret = secrets
                .get(name)
                .await
                .with_context(|| format!("reading Secret {name}"))?;
            let bytes = secret
                .data
                .as_ref()
                .and_then(|d| d.get(key))
                .map(|b| b.0.clone())
                .or_else(|| {
                    secret
                        .string_data
                        .as_ref()
                        .and_then(|d| d.get(key))
                        .map(|s| s.clone().into_bytes())
                })
                .with_context(|| format!("Secret {name} has no key {key:?}"))?;
            String::from_utf8(bytes)
                .with_context(|| format!("Secret {name} key {key:?} is not UTF-8"))
        }
    }
}

async fn call_webhook(
    inner: &Inner,
    spec: &Cluster,
    model: &ClusterModel,
    hook: &Webhook,
    instance: &str,
) -> anyhow::Result<()> {
    let departed_ip = inner.shared.read(|ix| ix.departed_ip(&spec.name, instance));
    let url = render_url(&hook.url, spec, model, instance, departed_ip.as_deref())
        .map_err(anyhow::Error::msg)?;
    let mut headers = HeaderMap::new();
    if let Some(auth) = &hook.auth {
        let value = match auth {
            WebhookAuth::Bearer { token } => format!(
                "Bearer {}",
                secret_value(inner, &spec.namespace, token).await?
            ),
            WebhookAuth::Basic { username, password } => {
                let user = secret_value(inner, &spec.namespace, username).await?;
                let pass = secret_value(inner, &spec.namespace, password).await?;
                format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"))
                )
            }
        };
        let mut v =
            HeaderValue::from_str(&value).context("credentials are not a valid header value")?;
        v.set_sensitive(true);
        headers.insert(header::AUTHORIZATION, v);
    }
    let method = Method::from_bytes(hook.method.as_bytes()).context("webhook method")?;
    let client = HttpClient::new()?;
    // The URL path is logged without its query (which may carry names an operator considers private).
    let shown = url.split('?').next().unwrap_or_default().to_owned();
    let (status, body) = client
        .call(method, &url, headers, Default::default(), hook.timeout)
        .await
        .with_context(|| format!("removal webhook {shown}"))?;
    if !status.is_success() {
        anyhow::bail!("removal webhook {shown} answered {status}: {}", body.trim());
    }
    info!(instance, url = %shown, %status, "removal webhook called");
    Ok(())
}
