//! A fake kubelet, cloud load-balancer loop and EndpointSlice controller. Like the real
//! components they are only API clients (kube-rs), so the same loop drives pods on the
//! simulator and on a real kube-apiserver that has no nodes (the envtest situation).
//!
//! - pods on the node (or every pod, with `all_pods`) become Running and Ready with an IP;
//! - a terminating pod is removed once its grace period has passed since the kubelet saw the
//!   deletion, as a kubelet's SIGTERM-then-SIGKILL does (or at once, through [`finish`]);
//!   [`crash`] removes a pod with no grace at all, [`fail`] marks it Failed;
//! - `type: LoadBalancer` Services get `status.loadBalancer.ingress`;
//! - each Service with a selector gets an EndpointSlice listing its pods' IPs and readiness,
//!   and a v1 Endpoints of its name (the endpoints controller's, which in-cluster clients such
//!   as gnmic's Kubernetes locker still read): ready pods in `addresses`, the others in
//!   `notReadyAddresses`, each with its `targetRef`; Endpoints whose Service is gone are
//!   deleted.

use std::collections::{BTreeMap, HashSet};
use std::net::Ipv4Addr;
use std::time::Duration;

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Endpoints, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

/// The field manager of everything this loop writes.
pub const MANAGER: &str = "leasehold-fake-kubelet";
/// The simulated node's name.
pub const NODE_NAME: &str = "sim-node-1";
/// The simulated node's IP.
const NODE_IP: &str = "172.18.0.2";
/// Pod IPs come from 10.244.0.0/16.
const POD_CIDR_BASE: u32 = u32::from_be_bytes([10, 244, 0, 0]);
/// LoadBalancer ingress IPs come from 172.18.255.0/24.
const LB_BASE: u32 = u32::from_be_bytes([172, 18, 255, 1]);
/// How often the loop re-checks grace periods even without events.
const TICK: Duration = Duration::from_millis(250);
/// Label the EndpointSlice controller sets.
const MANAGED_BY: &str = "endpointslice-controller.k8s.io";
/// Label and value the endpoints controller marks its Endpoints with (kube 1.33).
const ENDPOINTS_MANAGED_BY: (&str, &str) =
    ("endpoints.kubernetes.io/managed-by", "endpoint-controller");
/// Label the endpoints controller sets on a headless Service's Endpoints.
const HEADLESS: &str = "service.kubernetes.io/headless";

/// Settings of the fake kubelet.
#[derive(Debug, Clone)]
pub struct KubeletOptions {
    /// Run every pod, scheduled or not; otherwise only pods with a `spec.nodeName` (there is one
    /// simulated node, so any node name counts).
    pub all_pods: bool,
    /// Only pods and Services in this namespace (the real-apiserver test tier runs one loop per
    /// test namespace, so parallel tests do not drive each other's pods); every namespace when
    /// `None`.
    pub namespace: Option<String>,
}

impl Default for KubeletOptions {
    fn default() -> Self {
        Self {
            all_pods: true,
            namespace: None,
        }
    }
}

fn now_micro() -> String {
    Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Runs the loops until the watches fail permanently.
pub async fn run(client: Client, opts: KubeletOptions) -> anyhow::Result<()> {
    let (pods, services): (Api<Pod>, Api<Service>) = match &opts.namespace {
        Some(ns) => (
            Api::namespaced(client.clone(), ns),
            Api::namespaced(client.clone(), ns),
        ),
        None => (Api::all(client.clone()), Api::all(client.clone())),
    };
    let (pod_store, pod_writer) = reflector::store();
    let (svc_store, svc_writer) = reflector::store();
    let pod_events = reflector(
        pod_writer,
        watcher(pods, watcher::Config::default()).default_backoff(),
    )
    .applied_objects()
    .map(|_| ());
    let svc_events = reflector(
        svc_writer,
        watcher(services, watcher::Config::default()).default_backoff(),
    )
    .applied_objects()
    .map(|_| ());
    let mut events = futures::stream::select(Box::pin(pod_events), Box::pin(svc_events));
    let mut state = State {
        client,
        opts,
        next_ip: 1,
        assigned: BTreeMap::new(),
        terminating: BTreeMap::new(),
    };
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            ev = events.next() => if ev.is_none() { anyhow::bail!("kubelet watches ended") },
            _ = tick.tick() => {}
        }
        // Drain whatever else is ready so a burst is handled once.
        while let Some(Some(())) = futures::FutureExt::now_or_never(events.next()) {}
        let pods: Vec<_> = pod_store.state();
        let svcs: Vec<_> = svc_store.state();
        if let Err(e) = state.reconcile(&pods, &svcs).await {
            tracing::debug!(error = %e, "fake kubelet pass failed; retrying");
        }
    }
}

struct State {
    client: Client,
    opts: KubeletOptions,
    next_ip: u32,
    /// Pod uid → IP.
    assigned: BTreeMap<String, String>,
    /// Pod uid → when its containers must be gone: first sight of the deletion plus
    /// `deletionGracePeriodSeconds` (shortened when a later delete shortens the period).
    /// `deletionTimestamp` is only whole seconds, so it is not precise enough to wait for.
    terminating: BTreeMap<String, tokio::time::Instant>,
}

impl State {
    /// A free pod IP: not assigned by this loop and not in use by any pod (another kubelet
    /// run, or a restart of this one, may have handed out addresses already).
    fn ip_for(&mut self, uid: &str, in_use: &HashSet<String>) -> String {
        if let Some(ip) = self.assigned.get(uid) {
            return ip.clone();
        }
        let mine: HashSet<&String> = self.assigned.values().collect();
        let ip = loop {
            let candidate = Ipv4Addr::from(POD_CIDR_BASE + self.next_ip).to_string();
            self.next_ip = if self.next_ip >= 0xfffe {
                1
            } else {
                self.next_ip + 1
            };
            if !in_use.contains(&candidate) && !mine.contains(&candidate) {
                break candidate;
            }
        };
        self.assigned.insert(uid.to_owned(), ip.clone());
        ip
    }

    async fn reconcile(
        &mut self,
        pods: &[std::sync::Arc<Pod>],
        svcs: &[std::sync::Arc<Service>],
    ) -> anyhow::Result<()> {
        let now = tokio::time::Instant::now();
        let live: HashSet<String> = pods.iter().filter_map(|p| p.uid()).collect();
        self.terminating.retain(|uid, _| live.contains(uid));
        self.assigned.retain(|uid, _| live.contains(uid));
        let in_use: HashSet<String> = pods
            .iter()
            .filter_map(|p| p.status.as_ref().and_then(|s| s.pod_ip.clone()))
            .collect();
        for pod in pods {
            let ns = pod.namespace().unwrap_or_default();
            let name = pod.name_any();
            let api: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
            let scheduled = pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.as_ref())
                .is_some_and(|n| !n.is_empty());
            if !(scheduled || self.opts.all_pods) {
                continue;
            }
            if pod.metadata.deletion_timestamp.is_some() {
                let grace = pod
                    .metadata
                    .deletion_grace_period_seconds
                    .unwrap_or(0)
                    .max(0);
                let uid = pod.uid().unwrap_or_default();
                let by = now + Duration::from_secs(grace.unsigned_abs());
                let deadline = self.terminating.entry(uid.clone()).or_insert(by);
                *deadline = (*deadline).min(by);
                if *deadline <= now {
                    let _ = remove(&api, &name, uid).await;
                }
                continue;
            }
            let phase = pod
                .status
                .as_ref()
                .and_then(|s| s.phase.clone())
                .unwrap_or_default();
            let uid = pod.uid().unwrap_or_default();
            if (phase == "Pending" || phase.is_empty()) && !self.assigned.contains_key(&uid) {
                let ip = self.ip_for(&uid, &in_use);
                let status = running_status(pod, &ip, true);
                let _ = api
                    .patch_status(
                        &name,
                        &PatchParams::default(),
                        &Patch::Merge(json!({ "status": status })),
                    )
                    .await;
            }
        }
        self.load_balancers(svcs).await;
        let endpoints = self.endpoints(pods, svcs).await;
        self.endpoint_slices(pods, svcs).await?;
        endpoints
    }

    /// The endpoints controller (`pkg/controller/endpoint`): one Endpoints per Service with a
    /// selector, named like it, listing its pods.
    async fn endpoints(
        &self,
        pods: &[std::sync::Arc<Pod>],
        svcs: &[std::sync::Arc<Service>],
    ) -> anyhow::Result<()> {
        let all: Api<Endpoints> = match &self.opts.namespace {
            Some(ns) => Api::namespaced(self.client.clone(), ns),
            None => Api::all(self.client.clone()),
        };
        let existing: BTreeMap<(String, String), Endpoints> = all
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .map(|e| ((e.namespace().unwrap_or_default(), e.name_any()), e))
            .collect();
        let mut wanted = HashSet::new();
        for svc in svcs {
            let Some(desired) = desired_endpoints(svc, pods) else {
                continue;
            };
            let ns = svc.namespace().unwrap_or_default();
            let name = svc.name_any();
            let api: Api<Endpoints> = Api::namespaced(self.client.clone(), &ns);
            wanted.insert((ns.clone(), name.clone()));
            match existing.get(&(ns.clone(), name.clone())) {
                Some(current) => {
                    let now = json!({
                        "labels": serde_json::to_value(&current.metadata.labels)?,
                        "subsets": serde_json::to_value(&current.subsets)?,
                    });
                    let want = json!({
                        "labels": desired["metadata"]["labels"],
                        "subsets": desired.get("subsets").cloned().unwrap_or(Value::Null),
                    });
                    if now != want {
                        // A PUT, as the controller does: the subsets and labels are replaced.
                        let mut put = desired.clone();
                        put["metadata"]["resourceVersion"] =
                            json!(current.resource_version().unwrap_or_default());
                        put["metadata"]["annotations"] =
                            serde_json::to_value(&current.metadata.annotations)?;
                        let obj: Endpoints = serde_json::from_value(put)?;
                        api.replace(&name, &post_params(), &obj).await?;
                    }
                }
                None => {
                    let obj: Endpoints = serde_json::from_value(desired)?;
                    api.create(&post_params(), &obj).await?;
                }
            }
        }
        // A Service deleted (or no longer selecting): its controller-made Endpoints go.
        for ((ns, name), ep) in &existing {
            let ours = ep.labels().get(ENDPOINTS_MANAGED_BY.0).map(String::as_str)
                == Some(ENDPOINTS_MANAGED_BY.1);
            if !ours || wanted.contains(&(ns.clone(), name.clone())) {
                continue;
            }
            let api: Api<Endpoints> = Api::namespaced(self.client.clone(), ns);
            let dp = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: ep.uid(),
                    resource_version: None,
                }),
                ..Default::default()
            };
            let _ = api.delete(name, &dp).await;
        }
        Ok(())
    }

    async fn load_balancers(&self, svcs: &[std::sync::Arc<Service>]) {
        let taken: HashSet<String> = svcs
            .iter()
            .flat_map(|s| {
                s.status
                    .as_ref()
                    .and_then(|st| st.load_balancer.as_ref())
                    .and_then(|lb| lb.ingress.clone())
                    .unwrap_or_default()
            })
            .filter_map(|i| i.ip)
            .collect();
        let mut next = 0u32;
        for svc in svcs {
            let is_lb = svc.spec.as_ref().and_then(|s| s.type_.as_deref()) == Some("LoadBalancer");
            let has = svc
                .status
                .as_ref()
                .and_then(|s| s.load_balancer.as_ref())
                .and_then(|lb| lb.ingress.as_ref())
                .is_some_and(|i| !i.is_empty());
            if !is_lb || has {
                continue;
            }
            let ip = loop {
                let candidate = Ipv4Addr::from(LB_BASE + next).to_string();
                next += 1;
                if !taken.contains(&candidate) {
                    break candidate;
                }
            };
            let api: Api<Service> =
                Api::namespaced(self.client.clone(), &svc.namespace().unwrap_or_default());
            let patch = json!({ "status": { "loadBalancer": { "ingress": [{ "ip": ip, "ipMode": "VIP" }] } } });
            let _ = api
                .patch_status(
                    &svc.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(patch),
                )
                .await;
        }
    }

    async fn endpoint_slices(
        &self,
        pods: &[std::sync::Arc<Pod>],
        svcs: &[std::sync::Arc<Service>],
    ) -> anyhow::Result<()> {
        for svc in svcs {
            let Some(selector) = svc
                .spec
                .as_ref()
                .and_then(|s| s.selector.clone())
                .filter(|s| !s.is_empty())
            else {
                continue;
            };
            let ns = svc.namespace().unwrap_or_default();
            let svc_name = svc.name_any();
            let mut matching: Vec<&Pod> = pods
                .iter()
                .map(|p| p.as_ref())
                .filter(|p| p.namespace().as_deref() == Some(&ns))
                .filter(|p| selector.iter().all(|(k, v)| p.labels().get(k) == Some(v)))
                .filter(|p| p.status.as_ref().and_then(|s| s.pod_ip.as_ref()).is_some())
                // Pods in a terminal phase are no endpoints (the controller's ShouldPodBeInEndpoints).
                .filter(|p| {
                    let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
                    !matches!(phase, Some("Failed" | "Succeeded"))
                })
                .collect();
            matching.sort_by_key(|p| p.name_any());
            let endpoints: Vec<Value> = matching
                .iter()
                .map(|p| {
                    let ready = is_ready(p);
                    let terminating = p.metadata.deletion_timestamp.is_some();
                    json!({
                        "addresses": [p.status.as_ref().and_then(|s| s.pod_ip.clone()).unwrap_or_default()],
                        "conditions": { "ready": ready && !terminating, "serving": ready, "terminating": terminating },
                        "nodeName": p.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_else(|| NODE_NAME.into()),
                        "targetRef": { "kind": "Pod", "namespace": ns, "name": p.name_any(), "uid": p.uid().unwrap_or_default() }
                    })
                })
                .collect();
            let ports: Vec<Value> = svc
                .spec
                .as_ref()
                .and_then(|s| s.ports.clone())
                .unwrap_or_default()
                .iter()
                .map(|p| {
                    let port = match &p.target_port {
                        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(i)) => *i,
                        _ => p.port,
                    };
                    json!({ "name": p.name.clone().unwrap_or_default(), "port": port, "protocol": p.protocol.clone().unwrap_or_else(|| "TCP".into()) })
                })
                .collect();
            let api: Api<EndpointSlice> = Api::namespaced(self.client.clone(), &ns);
            let lp =
                ListParams::default().labels(&format!("kubernetes.io/service-name={svc_name}"));
            let existing = api.list(&lp).await?;
            let desired = json!({ "endpoints": endpoints, "ports": ports });
            match existing.items.first() {
                Some(slice) => {
                    let current = json!({ "endpoints": serde_json::to_value(&slice.endpoints)?, "ports": serde_json::to_value(&slice.ports)? });
                    if current != desired {
                        let patch =
                            json!({ "endpoints": desired["endpoints"], "ports": desired["ports"] });
                        api.patch(
                            &slice.name_any(),
                            &PatchParams::default(),
                            &Patch::Merge(patch),
                        )
                        .await?;
                    }
                }
                None => {
                    let slice: EndpointSlice = serde_json::from_value(json!({
                        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                        "metadata": {
                            "generateName": format!("{svc_name}-"),
                            "labels": { "kubernetes.io/service-name": svc_name, "endpointslice.kubernetes.io/managed-by": MANAGED_BY },
                            "ownerReferences": [{ "apiVersion": "v1", "kind": "Service", "name": svc_name, "uid": svc.uid().unwrap_or_default(), "controller": true, "blockOwnerDeletion": true }]
                        },
                        "addressType": "IPv4",
                        "endpoints": desired["endpoints"],
                        "ports": desired["ports"],
                    }))?;
                    api.create(
                        &PostParams {
                            field_manager: Some(MANAGER.into()),
                            ..Default::default()
                        },
                        &slice,
                    )
                    .await?;
                }
            }
        }
        self.collect_orphaned_slices(svcs).await
    }

    /// The garbage collector's part: slices whose owning Service (by uid) is gone, or no longer
    /// selects pods, are deleted.
    async fn collect_orphaned_slices(
        &self,
        svcs: &[std::sync::Arc<Service>],
    ) -> anyhow::Result<()> {
        let owners: HashSet<String> = svcs
            .iter()
            .filter(|s| {
                s.spec
                    .as_ref()
                    .and_then(|sp| sp.selector.as_ref())
                    .is_some_and(|sel| !sel.is_empty())
            })
            .filter_map(|s| s.uid())
            .collect();
        let all: Api<EndpointSlice> = Api::all(self.client.clone());
        let lp = ListParams::default().labels(&format!(
            "endpointslice.kubernetes.io/managed-by={MANAGED_BY}"
        ));
        for slice in all.list(&lp).await?.items {
            let owner = slice
                .metadata
                .owner_references
                .as_ref()
                .and_then(|o| o.iter().find(|r| r.kind == "Service"))
                .map(|r| r.uid.clone());
            if owner.is_some_and(|uid| owners.contains(&uid)) {
                continue;
            }
            let api: Api<EndpointSlice> =
                Api::namespaced(self.client.clone(), &slice.namespace().unwrap_or_default());
            let dp = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: slice.uid(),
                    resource_version: None,
                }),
                ..Default::default()
            };
            let _ = api.delete(&slice.name_any(), &dp).await;
        }
        Ok(())
    }
}

fn post_params() -> PostParams {
    PostParams {
        field_manager: Some(MANAGER.into()),
        ..Default::default()
    }
}

/// What the endpoints controller's `syncService` would write for `svc` (JSON), or `None` for
/// a Service without a selector (its Endpoints are its users' to write).
///
/// Pods in the Service's namespace that match the selector and have an IP and are not
/// finished; a terminating pod only with `publishNotReadyAddresses`. Ready pods (or all, with
/// `publishNotReadyAddresses`) go to `addresses`, the others to `notReadyAddresses`, sorted by
/// IP; one subset for the Service's ports (a named `targetPort` resolved against the pod's
/// container ports, a pod lacking it left out). No subsets without a matching pod.
fn desired_endpoints(svc: &Service, pods: &[std::sync::Arc<Pod>]) -> Option<Value> {
    let spec = svc.spec.as_ref()?;
    let selector = spec.selector.clone().filter(|s| !s.is_empty())?;
    let ns = svc.namespace().unwrap_or_default();
    let name = svc.name_any();
    let publish_not_ready = spec.publish_not_ready_addresses.unwrap_or(false);
    let svc_ports = spec.ports.clone().unwrap_or_default();
    let mut ready: Vec<(String, Value)> = Vec::new();
    let mut not_ready: Vec<(String, Value)> = Vec::new();
    let mut ports: Option<Vec<Value>> = None;
    for pod in pods.iter().map(|p| p.as_ref()) {
        if pod.namespace().as_deref() != Some(&ns)
            || !selector.iter().all(|(k, v)| pod.labels().get(k) == Some(v))
        {
            continue;
        }
        let status = pod.status.as_ref();
        let Some(ip) = status
            .and_then(|s| s.pod_ip.clone())
            .filter(|i| !i.is_empty())
        else {
            continue;
        };
        let phase = status.and_then(|s| s.phase.as_deref());
        if matches!(phase, Some("Failed" | "Succeeded")) {
            continue;
        }
        let terminating = pod.metadata.deletion_timestamp.is_some();
        if terminating && !publish_not_ready {
            continue;
        }
        // The Service's ports as this pod serves them.
        let mut pod_ports = Vec::new();
        for sp in &svc_ports {
            use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
            let protocol = sp.protocol.clone().unwrap_or_else(|| "TCP".into());
            let port = match &sp.target_port {
                None => Some(sp.port),
                Some(IntOrString::Int(i)) => Some(*i),
                Some(IntOrString::String(port_name)) => pod
                    .spec
                    .as_ref()
                    .into_iter()
                    .flat_map(|s| s.containers.iter())
                    .flat_map(|c| c.ports.iter().flatten())
                    .find(|cp| {
                        cp.name.as_deref() == Some(port_name)
                            && cp.protocol.as_deref().unwrap_or("TCP") == protocol
                    })
                    .map(|cp| cp.container_port),
            };
            let Some(port) = port else { continue };
            let mut ep = json!({ "port": port, "protocol": protocol });
            if let Some(n) = sp.name.as_ref().filter(|n| !n.is_empty()) {
                ep["name"] = json!(n);
            }
            if let Some(a) = &sp.app_protocol {
                ep["appProtocol"] = json!(a);
            }
            pod_ports.push(ep);
        }
        if pod_ports.is_empty() && !svc_ports.is_empty() {
            continue;
        }
        ports.get_or_insert(pod_ports);
        let mut addr = json!({
            "ip": ip,
            "targetRef": { "kind": "Pod", "namespace": ns, "name": pod.name_any(), "uid": pod.uid().unwrap_or_default() }
        });
        let pod_spec = pod.spec.as_ref();
        if let Some(node) = pod_spec
            .and_then(|s| s.node_name.as_ref())
            .filter(|n| !n.is_empty())
        {
            addr["nodeName"] = json!(node);
        }
        // A pod's hostname is published when its subdomain is this Service.
        if let (Some(h), Some(sub)) = (
            pod_spec.and_then(|s| s.hostname.as_ref()),
            pod_spec.and_then(|s| s.subdomain.as_ref()),
        ) && *sub == name
            && !h.is_empty()
        {
            addr["hostname"] = json!(h);
        }
        if publish_not_ready || (is_ready(pod) && !terminating) {
            ready.push((ip, addr));
        } else {
            not_ready.push((ip, addr));
        }
    }
    // LessEndpointAddress: by IP (as bytes of its string), then by the pod's uid.
    let key = |(ip, a): &(String, Value)| (ip.clone(), a["targetRef"]["uid"].to_string());
    ready.sort_by_key(key);
    not_ready.sort_by_key(key);
    let mut labels = svc.labels().clone();
    labels.insert(ENDPOINTS_MANAGED_BY.0.into(), ENDPOINTS_MANAGED_BY.1.into());
    if spec.cluster_ip.as_deref() == Some("None") {
        labels.insert(HEADLESS.into(), String::new());
    }
    let mut out = json!({
        "apiVersion": "v1", "kind": "Endpoints",
        "metadata": { "name": name, "namespace": ns, "labels": labels },
    });
    if !ready.is_empty() || !not_ready.is_empty() {
        let mut subset = json!({});
        if !ready.is_empty() {
            subset["addresses"] = Value::Array(ready.into_iter().map(|(_, a)| a).collect());
        }
        if !not_ready.is_empty() {
            subset["notReadyAddresses"] =
                Value::Array(not_ready.into_iter().map(|(_, a)| a).collect());
        }
        if let Some(p) = ports.filter(|p| !p.is_empty()) {
            subset["ports"] = Value::Array(p);
        }
        out["subsets"] = json!([subset]);
    }
    Some(out)
}

fn is_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn running_status(pod: &Pod, ip: &str, ready: bool) -> Value {
    let now = now_micro();
    let flag = if ready { "True" } else { "False" };
    let containers: Vec<Value> = pod
        .spec
        .as_ref()
        .map(|s| s.containers.clone())
        .unwrap_or_default()
        .iter()
        .map(|c| {
            json!({
                "name": c.name,
                "image": c.image.clone().unwrap_or_default(),
                "imageID": format!("sim://{}", c.image.clone().unwrap_or_default()),
                "containerID": format!("containerd://{}", uuid::Uuid::new_v4().simple()),
                "ready": ready,
                "started": true,
                "restartCount": 0,
                "state": { "running": { "startedAt": now } }
            })
        })
        .collect();
    // Init containers ran to completion before the app containers started.
    let init: Vec<Value> = pod
        .spec
        .as_ref()
        .and_then(|s| s.init_containers.clone())
        .unwrap_or_default()
        .iter()
        .map(|c| {
            let id = format!("containerd://{}", uuid::Uuid::new_v4().simple());
            json!({
                "name": c.name,
                "image": c.image.clone().unwrap_or_default(),
                "imageID": format!("sim://{}", c.image.clone().unwrap_or_default()),
                "containerID": id,
                "ready": true,
                "started": false,
                "restartCount": 0,
                "state": { "terminated": { "exitCode": 0, "reason": "Completed", "startedAt": now, "finishedAt": now, "containerID": id } }
            })
        })
        .collect();
    let mut status = json!({
        "phase": "Running",
        "podIP": ip,
        "podIPs": [{ "ip": ip }],
        "hostIP": NODE_IP,
        "hostIPs": [{ "ip": NODE_IP }],
        "startTime": now,
        "conditions": [
            { "type": "PodReadyToStartContainers", "status": "True", "lastTransitionTime": now, "lastProbeTime": null },
            { "type": "Initialized", "status": "True", "lastTransitionTime": now, "lastProbeTime": null },
            { "type": "Ready", "status": flag, "lastTransitionTime": now, "lastProbeTime": null },
            { "type": "ContainersReady", "status": flag, "lastTransitionTime": now, "lastProbeTime": null },
            { "type": "PodScheduled", "status": "True", "lastTransitionTime": now, "lastProbeTime": null }
        ],
        "containerStatuses": containers,
    });
    if !init.is_empty() {
        status["initContainerStatuses"] = Value::Array(init);
    }
    status
}

/// Crash control: the pod disappears at once, with no graceful termination.
pub async fn crash(client: &Client, namespace: &str, name: &str) -> kube::Result<()> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    api.delete(
        name,
        &DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        },
    )
    .await
    .map(|_| ())
}

/// The containers of a terminating pod have exited: it is removed now, as a kubelet does
/// when a process ends before its grace period.
pub async fn finish(client: &Client, namespace: &str, name: &str) -> kube::Result<()> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let pod = api.get(name).await?;
    remove(&api, name, pod.uid().unwrap_or_default()).await
}

/// Removes pod `name` once its containers have stopped, as a kubelet does: a delete with no
/// grace left, and only if it is still the pod with `uid` (not a new one of the same name).
pub async fn remove(api: &Api<Pod>, name: &str, uid: String) -> kube::Result<()> {
    let dp = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..Default::default()
    };
    api.delete(name, &dp).await.map(|_| ())
}

/// Flips a running pod's readiness (a failing readiness probe, or its recovery).
pub async fn set_ready(
    client: &Client,
    namespace: &str,
    name: &str,
    ready: bool,
) -> kube::Result<()> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let pod = api.get_status(name).await?;
    let status = serde_json::to_value(&pod.status).unwrap_or(Value::Null);
    let now = now_micro();
    let flag = if ready { "True" } else { "False" };
    // Only readiness changes: the containers keep running (same IDs, start times, restarts).
    let mut containers = status["containerStatuses"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for c in &mut containers {
        c["ready"] = json!(ready);
    }
    let mut conditions = status["conditions"].as_array().cloned().unwrap_or_default();
    for c in conditions
        .iter_mut()
        .filter(|c| c["type"] == "Ready" || c["type"] == "ContainersReady")
    {
        if c["status"] != flag {
            c["status"] = json!(flag);
            c["lastTransitionTime"] = json!(now);
        }
    }
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(
            json!({ "status": { "conditions": conditions, "containerStatuses": containers } }),
        ),
    )
    .await
    .map(|_| ())
}

/// Crash control, the other way: every container exits with 137 (killed) and the pod is
/// marked Failed, as a kubelet reports a pod whose containers died and will not restart. A
/// finished pod is deleted at once by the API server, with no grace period.
pub async fn fail(client: &Client, namespace: &str, name: &str) -> kube::Result<()> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let pod = api.get_status(name).await?;
    let now = now_micro();
    let running = running_status(&pod, "", false);
    let containers: Vec<Value> = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.clone())
        .unwrap_or_default()
        .iter()
        .map(|c| {
            let started = c.state.as_ref().and_then(|s| s.running.as_ref()).and_then(|r| r.started_at.as_ref()).map(|t| t.0.to_string());
            json!({
                "name": c.name,
                "image": c.image,
                "imageID": c.image_id,
                "containerID": c.container_id,
                "ready": false,
                "started": false,
                "restartCount": c.restart_count,
                "state": { "terminated": {
                    "exitCode": 137, "reason": "Error", "startedAt": started.unwrap_or_else(|| now.clone()),
                    "finishedAt": now, "containerID": c.container_id
                } }
            })
        })
        .collect();
    let status = json!({ "phase": "Failed", "conditions": running["conditions"], "containerStatuses": containers });
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": status })),
    )
    .await
    .map(|_| ())
}
