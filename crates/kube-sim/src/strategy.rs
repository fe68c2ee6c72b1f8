//! Per-kind rules applied on create and update: the simulator's equivalent of the
//! `strategy.go` files under kube-apiserver's `pkg/registry` (defaults, status handling,
//! generation, validation) plus typed decoding checks through k8s-openapi.
//!
//! Pure functions over JSON values; the handlers call them inside a store transaction.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::names;
use super::registry::{NameRule, ResourceType, TypeId, get};
use super::status::Cause;

/// Default `terminationGracePeriodSeconds` of a pod.
pub const DEFAULT_POD_GRACE: i64 = 30;

/// Labels and selectable field values of an object, for the store's indexes.
pub fn index(
    type_id: TypeId,
    v: &Value,
) -> (BTreeMap<String, String>, Vec<(&'static str, String)>) {
    let rt = get(type_id);
    let labels = v
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                .collect()
        })
        .unwrap_or_default();
    let mut fields = vec![
        ("metadata.name", str_at(v, "/metadata/name")),
        ("metadata.namespace", str_at(v, "/metadata/namespace")),
    ];
    let extra: &[(&'static str, &str)] = match (rt.group, rt.kind) {
        ("", "Pod") => &[
            ("spec.nodeName", "/spec/nodeName"),
            ("spec.restartPolicy", "/spec/restartPolicy"),
            ("spec.schedulerName", "/spec/schedulerName"),
            ("spec.serviceAccountName", "/spec/serviceAccountName"),
            ("status.phase", "/status/phase"),
            ("status.podIP", "/status/podIP"),
            ("status.nominatedNodeName", "/status/nominatedNodeName"),
        ],
        ("", "Event") => &[
            ("involvedObject.kind", "/involvedObject/kind"),
            ("involvedObject.namespace", "/involvedObject/namespace"),
            ("involvedObject.name", "/involvedObject/name"),
            ("involvedObject.uid", "/involvedObject/uid"),
            ("involvedObject.apiVersion", "/involvedObject/apiVersion"),
            (
                "involvedObject.resourceVersion",
                "/involvedObject/resourceVersion",
            ),
            ("involvedObject.fieldPath", "/involvedObject/fieldPath"),
            ("reason", "/reason"),
            ("reportingComponent", "/reportingComponent"),
            ("source", "/source/component"),
            ("type", "/type"),
        ],
        ("", "Namespace") => &[("status.phase", "/status/phase")],
        ("", "Secret") => &[("type", "/type")],
        ("", "Service") => &[
            ("spec.clusterIP", "/spec/clusterIP"),
            ("spec.type", "/spec/type"),
        ],
        _ => &[],
    };
    for (name, ptr) in extra {
        fields.push((name, str_at(v, ptr)));
    }
    if (rt.group, rt.kind) == ("", "Pod") {
        let host = v
            .pointer("/spec/hostNetwork")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        fields.push(("spec.hostNetwork", host.to_string()));
        let ips: Vec<&str> = v
            .pointer("/status/podIPs")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(|i| i["ip"].as_str()).collect())
            .unwrap_or_default();
        fields.push(("status.podIPs", ips.join(",")));
    }
    (labels, fields)
}

fn str_at(v: &Value, ptr: &str) -> String {
    match v.pointer(ptr) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

/// Decodes the body into the kind's typed struct (k8s-openapi) to reject what Go's decoder
/// rejects: wrong JSON types, malformed times and quantities. Returns the decoder's message.
pub fn typecheck(rt: &ResourceType, v: &Value) -> Result<(), String> {
    use k8s_openapi::api;
    fn check<'a, T: Deserialize<'a>>(v: &'a Value) -> Result<(), String> {
        T::deserialize(v).map(|_| ()).map_err(|e| e.to_string())
    }
    let res = match (rt.group, rt.kind) {
        ("", "Namespace") => check::<api::core::v1::Namespace>(v),
        ("", "Pod") => check::<api::core::v1::Pod>(v),
        ("", "Service") => check::<api::core::v1::Service>(v),
        ("", "Endpoints") => check::<api::core::v1::Endpoints>(v),
        ("", "ConfigMap") => check::<api::core::v1::ConfigMap>(v),
        ("", "Secret") => check::<api::core::v1::Secret>(v),
        ("", "Event") => check::<api::core::v1::Event>(v),
        ("coordination.k8s.io", "Lease") => check::<api::coordination::v1::Lease>(v),
        ("discovery.k8s.io", "EndpointSlice") => check::<api::discovery::v1::EndpointSlice>(v),
        ("events.k8s.io", "Event") => check::<api::events::v1::Event>(v),
        ("", "ServiceAccount") => check::<api::core::v1::ServiceAccount>(v),
        ("", "PersistentVolumeClaim") => check::<api::core::v1::PersistentVolumeClaim>(v),
        ("apps", "Deployment") => check::<api::apps::v1::Deployment>(v),
        ("apps", "StatefulSet") => check::<api::apps::v1::StatefulSet>(v),
        ("networking.k8s.io", "NetworkPolicy") => check::<api::networking::v1::NetworkPolicy>(v),
        ("flowcontrol.apiserver.k8s.io", "FlowSchema") => {
            check::<api::flowcontrol::v1::FlowSchema>(v)
        }
        ("flowcontrol.apiserver.k8s.io", "PriorityLevelConfiguration") => {
            check::<api::flowcontrol::v1::PriorityLevelConfiguration>(v)
        }
        ("policy", "PodDisruptionBudget") => check::<api::policy::v1::PodDisruptionBudget>(v),
        ("rbac.authorization.k8s.io", "Role") => check::<api::rbac::v1::Role>(v),
        ("rbac.authorization.k8s.io", "ClusterRole") => check::<api::rbac::v1::ClusterRole>(v),
        ("rbac.authorization.k8s.io", "RoleBinding") => check::<api::rbac::v1::RoleBinding>(v),
        ("rbac.authorization.k8s.io", "ClusterRoleBinding") => {
            check::<api::rbac::v1::ClusterRoleBinding>(v)
        }
        ("authentication.k8s.io", "TokenReview") => {
            check::<api::authentication::v1::TokenReview>(v)
        }
        ("authorization.k8s.io", "SubjectAccessReview") => {
            check::<api::authorization::v1::SubjectAccessReview>(v)
        }
        ("authorization.k8s.io", "SelfSubjectAccessReview") => {
            check::<api::authorization::v1::SelfSubjectAccessReview>(v)
        }
        ("authorization.k8s.io", "LocalSubjectAccessReview") => {
            check::<api::authorization::v1::LocalSubjectAccessReview>(v)
        }
        _ => Ok(()),
    };
    res?;
    if rt.kind == "Lease" {
        for field in ["acquireTime", "renewTime"] {
            if let Some(t) = v.pointer(&format!("/spec/{field}")).and_then(Value::as_str)
                && !is_micro_time(t)
            {
                // Go's time.Parse takes exactly six fractional digits, then the zone: with more
                // digits it is the zone that fails to parse.
                let b = t.as_bytes();
                let six = b.len() >= 26
                    && b.get(19) == Some(&b'.')
                    && b[20..26].iter().all(u8::is_ascii_digit);
                let (rest, layout) = if six {
                    (t.get(26..).unwrap_or_default(), "Z07:00")
                } else {
                    (t.get(19..).unwrap_or_default(), ".000000")
                };
                return Err(format!(
                    "parsing time {t:?} as \"2006-01-02T15:04:05.000000Z07:00\": cannot parse {rest:?} as \"{layout}\""
                ));
            }
        }
    }
    Ok(())
}

/// `metav1.MicroTime` wire form: RFC 3339 with exactly six fractional digits.
pub fn is_micro_time(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() < 27 || b.get(19) != Some(&b'.') {
        return false;
    }
    let frac = &b[20..26];
    let rest = &s[26..];
    frac.iter().all(u8::is_ascii_digit)
        && (rest == "Z" || (rest.len() == 6 && (rest.starts_with('+') || rest.starts_with('-'))))
        && s[..19].parse::<jiff::civil::DateTime>().is_ok()
}

/// Object metadata as a mutable map (created when missing).
pub fn meta_mut(v: &mut Value) -> &mut Map<String, Value> {
    if !v.get("metadata").is_some_and(Value::is_object) {
        v["metadata"] = json!({});
    }
    v["metadata"]
        .as_object_mut()
        .expect("metadata was just made an object")
}

/// Whether the kind's strategy maintains `metadata.generation`. Pods have it since 1.33
/// (set to 1 on create, bumped by spec changes; kubernetes#130181).
fn has_generation(rt: &ResourceType) -> bool {
    rt.generation || (rt.group, rt.kind) == ("", "Pod")
}

/// Defaulting and conversion the apiserver applies whenever it decodes an object (create and
/// update alike): the namespace name label, Secret `stringData` folded into `data`.
fn default_on_decode(rt: &ResourceType, v: &mut Value) {
    match (rt.group, rt.kind) {
        ("", "Namespace") => {
            // SetDefaults_Namespace: `kubernetes.io/metadata.name` always equals the name.
            if let Some(name) = v
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
                .map(str::to_owned)
            {
                let meta = meta_mut(v);
                if !meta.get("labels").is_some_and(Value::is_object) {
                    meta.insert("labels".into(), json!({}));
                }
                if let Some(labels) = meta.get_mut("labels").and_then(Value::as_object_mut) {
                    labels.insert("kubernetes.io/metadata.name".into(), json!(name));
                }
            }
        }
        ("", "Secret") => {
            // Conversion from v1: each stringData entry overwrites the data entry, base64.
            use base64::Engine as _;
            let Some(obj) = v.as_object_mut() else { return };
            let Some(Value::Object(string_data)) = obj.remove("stringData") else {
                return;
            };
            if !obj.get("data").is_some_and(Value::is_object) {
                obj.insert("data".into(), json!({}));
            }
            if let Some(data) = obj.get_mut("data").and_then(Value::as_object_mut) {
                for (k, val) in string_data {
                    let text = val.as_str().unwrap_or_default();
                    data.insert(
                        k,
                        json!(base64::engine::general_purpose::STANDARD.encode(text)),
                    );
                }
            }
        }
        ("", "Endpoints") => {
            // SetDefaults_EndpointPort: the protocol is TCP unless given.
            for subset in v
                .get_mut("subsets")
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                for port in subset
                    .get_mut("ports")
                    .and_then(Value::as_array_mut)
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_object_mut)
                {
                    port.entry("protocol").or_insert(json!("TCP"));
                }
            }
        }
        (group, kind) => super::kinds::default(group, kind, v),
    }
}

/// `ObjectMeta`'s maps and lists are `omitempty` in Go: an emptied one is not stored.
pub fn omit_empty_metadata(v: &mut Value) {
    let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    for k in [
        "labels",
        "annotations",
        "finalizers",
        "ownerReferences",
        "managedFields",
    ] {
        let empty = match meta.get(k) {
            Some(Value::Object(m)) => m.is_empty(),
            Some(Value::Array(a)) => a.is_empty(),
            Some(Value::Null) => true,
            _ => false,
        };
        if empty {
            meta.remove(k);
        }
    }
}

/// Defaults and status handling on create (`PrepareForCreate` + defaulting).
pub fn prepare_create(rt: &ResourceType, v: &mut Value) {
    omit_empty_metadata(v);
    if has_generation(rt) {
        meta_mut(v).insert("generation".into(), json!(1));
    } else {
        meta_mut(v).remove("generation");
    }
    default_on_decode(rt, v);
    match (rt.group, rt.kind) {
        ("", "Pod") => {
            default_pod(v);
            let qos = pod_qos(v);
            v["status"] = json!({ "phase": "Pending", "qosClass": qos });
        }
        ("", "Namespace") => {
            let finalizers = v.pointer("/spec/finalizers").cloned();
            v["spec"] = json!({ "finalizers": finalizers.unwrap_or(json!(["kubernetes"])) });
            v["status"] = json!({ "phase": "Active" });
        }
        ("", "Service") => {
            default_service(v);
            v["status"] = json!({ "loadBalancer": {} });
        }
        ("", "Secret") if v.get("type").is_none_or(Value::is_null) => {
            v["type"] = json!("Opaque");
        }
        (group, kind) => {
            if let Some(status) = super::kinds::initial_status(group, kind) {
                v["status"] = status;
            }
        }
    }
}

/// Pod conditions' `lastProbeTime` and `lastTransitionTime` are non-pointer `metav1.Time`s in
/// Go: decoded and written back, absent ones become `null` (found by the real tier).
fn pod_condition_times(v: &mut Value) {
    if let Some(cs) = v
        .pointer_mut("/status/conditions")
        .and_then(Value::as_array_mut)
    {
        for c in cs.iter_mut().filter_map(Value::as_object_mut) {
            for k in ["lastProbeTime", "lastTransitionTime"] {
                c.entry(k).or_insert(Value::Null);
            }
        }
    }
}

/// Status and generation handling on update (`PrepareForUpdate`), for the main resource
/// (`subresource = None`) or `/status`.
pub fn prepare_update(rt: &ResourceType, old: &Value, new: &mut Value, subresource: Option<&str>) {
    omit_empty_metadata(new);
    if (rt.group, rt.kind) == ("", "Pod") {
        pod_condition_times(new);
    }
    match subresource {
        Some("status") => {
            // Only status changes through /status; everything else stays as stored.
            let status = new.get("status").cloned();
            let mut merged = old.clone();
            match status {
                Some(s) => merged["status"] = s,
                None => {
                    if let Some(o) = merged.as_object_mut() {
                        o.remove("status");
                    }
                }
            }
            // Labels and annotations may change through /status too.
            for k in ["labels", "annotations", "resourceVersion", "managedFields"] {
                match new.pointer(&format!("/metadata/{k}")) {
                    Some(x) => {
                        meta_mut(&mut merged).insert(k.into(), x.clone());
                    }
                    None => {
                        meta_mut(&mut merged).remove(k);
                    }
                }
            }
            *new = merged;
        }
        _ => {
            if rt.status {
                match old.get("status") {
                    Some(s) => new["status"] = s.clone(),
                    None => {
                        if let Some(o) = new.as_object_mut() {
                            o.remove("status");
                        }
                    }
                }
            }
            if (rt.group, rt.kind) == ("", "Namespace") {
                // spec.finalizers changes only through /finalize.
                new["spec"] = old.get("spec").cloned().unwrap_or(json!({}));
            }
            if rt.kind == "Service" {
                default_service(new);
                for f in ["clusterIP", "clusterIPs"] {
                    if new.pointer(&format!("/spec/{f}")).is_none()
                        && let Some(x) = old.pointer(&format!("/spec/{f}"))
                    {
                        new["spec"][f] = x.clone();
                    }
                }
            }
        }
    }
    // Immutable metadata.
    let keep = [
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
    ];
    let old_meta = old.get("metadata").cloned().unwrap_or(json!({}));
    let m = meta_mut(new);
    for k in keep {
        match old_meta.get(k) {
            Some(x) => {
                m.insert(k.into(), x.clone());
            }
            None => {
                m.remove(k);
            }
        }
    }
    if subresource.is_none() {
        default_on_decode(rt, new);
    }
    if has_generation(rt) && subresource.is_none() {
        let changed = if rt.kind == "EndpointSlice" {
            // The endpointslice strategy: anything but metadata, and the labels.
            strip_meta_status(old) != strip_meta_status(new)
                || old.pointer("/metadata/labels") != new.pointer("/metadata/labels")
        } else {
            old.get("spec") != new.get("spec")
                || (old.get("spec").is_none() && strip_meta_status(old) != strip_meta_status(new))
        };
        if changed {
            let g = old
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(0)
                + 1;
            meta_mut(new).insert("generation".into(), json!(g));
        }
    }
}

fn strip_meta_status(v: &Value) -> Value {
    let mut c = v.clone();
    if let Some(o) = c.as_object_mut() {
        o.remove("metadata");
        o.remove("status");
    }
    c
}

/// Fields of disabled feature gates, dropped by the strategy (`dropDisabledFields`) on create
/// and main-resource updates. The field manager has already run by then, so managedFields
/// keep naming them and a write of only such fields is still a write (found by the real tier).
pub fn drop_gated_fields(rt: &ResourceType, v: &mut Value, subresource: Option<&str>) {
    if (rt.group, rt.kind) == ("coordination.k8s.io", "Lease") && subresource.is_none() {
        drop_gated_lease_fields(v);
    }
}

/// `strategy` and `preferredHolder` belong to the CoordinatedLeaderElection gate, off by default.
fn drop_gated_lease_fields(v: &mut Value) {
    if let Some(spec) = v.get_mut("spec").and_then(Value::as_object_mut) {
        spec.remove("strategy");
        spec.remove("preferredHolder");
    }
}

/// Pod defaults: decoding's, then the Priority admission plugin's.
pub(super) fn default_pod(v: &mut Value) {
    default_pod_decode(v);
    if let Some(spec) = v.get_mut("spec").and_then(Value::as_object_mut) {
        spec.entry("preemptionPolicy")
            .or_insert(json!("PreemptLowerPriority"));
        spec.entry("priority").or_insert(json!(0));
    }
}

/// What the field manager sees of a new object, for kinds where that is not what is stored:
/// the request as decoded (with decoding's defaults), before admission, allocation and
/// `PrepareForCreate`, without the status the strategy resets. The apiserver records
/// managedFields from it (found by the real tier: the simulator named `priority`,
/// `status.phase`, allocated `clusterIP`s… too).
pub fn field_manager_view(rt: &ResourceType, v: &Value) -> Option<Value> {
    let pod = match (rt.group, rt.kind) {
        ("", "Pod") => true,
        ("", "Service") => false,
        _ => return None,
    };
    let mut pre = v.clone();
    omit_empty_metadata(&mut pre);
    if let Some(o) = pre.as_object_mut() {
        o.remove("status");
    }
    if pod {
        default_pod_decode(&mut pre);
    } else {
        default_service(&mut pre);
    }
    Some(pre)
}

/// The defaults decoding a Pod applies (`SetDefaults_PodSpec`, `SetDefaults_Container`).
fn default_pod_decode(v: &mut Value) {
    let Some(spec) = v.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    let defaults = [
        ("restartPolicy", json!("Always")),
        ("terminationGracePeriodSeconds", json!(DEFAULT_POD_GRACE)),
        ("dnsPolicy", json!("ClusterFirst")),
        ("securityContext", json!({})),
        ("schedulerName", json!("default-scheduler")),
        ("enableServiceLinks", json!(true)),
    ];
    for (k, d) in defaults {
        spec.entry(k).or_insert(d);
    }
    for list in ["initContainers", "containers"] {
        if let Some(cs) = spec.get_mut(list).and_then(Value::as_array_mut) {
            for c in cs.iter_mut().filter_map(Value::as_object_mut) {
                let image = c
                    .get("image")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                let latest = !image.contains(':') || image.ends_with(":latest");
                c.entry("imagePullPolicy").or_insert(json!(if latest {
                    "Always"
                } else {
                    "IfNotPresent"
                }));
                c.entry("terminationMessagePath")
                    .or_insert(json!("/dev/termination-log"));
                c.entry("terminationMessagePolicy").or_insert(json!("File"));
                c.entry("resources").or_insert(json!({}));
                if let Some(ports) = c.get_mut("ports").and_then(Value::as_array_mut) {
                    for p in ports.iter_mut().filter_map(Value::as_object_mut) {
                        p.entry("protocol").or_insert(json!("TCP"));
                    }
                }
            }
        }
    }
}

fn pod_qos(v: &Value) -> &'static str {
    let containers = v.pointer("/spec/containers").and_then(Value::as_array);
    let any_resources = containers.is_some_and(|cs| {
        cs.iter().any(|c| {
            ["requests", "limits"]
                .iter()
                .any(|k| c["resources"][k].as_object().is_some_and(|m| !m.is_empty()))
        })
    });
    if any_resources {
        "Burstable"
    } else {
        "BestEffort"
    }
}

fn default_service(v: &mut Value) {
    let Some(spec) = v.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    spec.entry("type").or_insert(json!("ClusterIP"));
    spec.entry("sessionAffinity").or_insert(json!("None"));
    spec.entry("internalTrafficPolicy")
        .or_insert(json!("Cluster"));
    let lb = spec.get("type").and_then(Value::as_str) == Some("LoadBalancer");
    if lb {
        spec.entry("externalTrafficPolicy")
            .or_insert(json!("Cluster"));
        spec.entry("allocateLoadBalancerNodePorts")
            .or_insert(json!(true));
    }
    if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            p.entry("protocol").or_insert(json!("TCP"));
            if let Some(port) = p.get("port").cloned() {
                p.entry("targetPort").or_insert(port);
            }
        }
    }
}

/// Name and generic metadata validation, then the kind's own rules.
pub fn validate(rt: &ResourceType, v: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut errs = Vec::new();
    let name = v
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let check_name = |n: &str| match rt.name_rule {
        NameRule::Subdomain => names::dns1123_subdomain(n),
        NameRule::Label1123 => names::dns1123_label(n),
        NameRule::Label1035 => names::dns1035_label(n),
        NameRule::PathSegment => names::path_segment(n),
    };
    // ValidateObjectMeta: a generateName prefix is checked with its trailing '-' masked.
    if old.is_none()
        && let Some(prefix) = v
            .pointer("/metadata/generateName")
            .and_then(Value::as_str)
            .filter(|p| !p.is_empty())
    {
        // `maskTrailingDash`: the last two bytes become "a" (sic).
        let masked = if prefix.len() > 1 && prefix.ends_with('-') {
            format!("{}a", prefix.get(..prefix.len() - 2).unwrap_or_default())
        } else {
            prefix.to_owned()
        };
        for p in check_name(&masked) {
            errs.push(Cause::invalid("metadata.generateName", &json!(prefix), &p));
        }
    }
    if name.is_empty() {
        errs.push(Cause::required(
            "metadata.name",
            "name or generateName is required",
        ));
    } else {
        for p in check_name(name) {
            errs.push(Cause::invalid("metadata.name", &json!(name), &p));
        }
    }
    if let Some(labels) = v.pointer("/metadata/labels").and_then(Value::as_object) {
        for (k, val) in labels {
            for p in names::qualified_name(k) {
                errs.push(Cause::invalid("metadata.labels", &json!(k), &p));
            }
            for p in names::label_value(val.as_str().unwrap_or_default()) {
                errs.push(Cause::invalid("metadata.labels", val, &p));
            }
        }
    }
    if let (Some(old), Some(new_f)) = (
        old,
        v.pointer("/metadata/finalizers").and_then(Value::as_array),
    ) && old
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|d| !d.is_null())
    {
        let old_f = old
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let added: Vec<&str> = new_f
            .iter()
            .filter(|f| !old_f.contains(f))
            .filter_map(Value::as_str)
            .collect();
        if !added.is_empty() {
            let list: Vec<String> = added.iter().map(|f| format!("{f:?}")).collect();
            errs.push(Cause::forbidden(
                "metadata.finalizers",
                &format!("no new finalizers can be added if the object is being deleted, found new finalizers []string{{{}}}", list.join(", ")),
            ));
        }
    }
    match (rt.group, rt.kind) {
        ("coordination.k8s.io", "Lease") => validate_lease(v, &mut errs),
        ("", "Pod") => validate_pod(v, old, &mut errs),
        ("", "Service") => validate_service(v, &mut errs),
        ("", "Endpoints") => validate_endpoints(v, &mut errs),
        ("", "ConfigMap") | ("", "Secret") => validate_data_keys(v, &mut errs),
        (group, kind) => super::kinds::validate(group, kind, v, &mut errs),
    }
    errs
}

fn validate_lease(v: &Value, errs: &mut Vec<Cause>) {
    if let Some(d) = v
        .pointer("/spec/leaseDurationSeconds")
        .and_then(Value::as_i64)
        && d <= 0
    {
        errs.push(Cause::invalid(
            "spec.leaseDurationSeconds",
            &json!(d),
            "must be greater than 0",
        ));
    }
    if let Some(t) = v.pointer("/spec/leaseTransitions").and_then(Value::as_i64)
        && t < 0
    {
        errs.push(Cause::invalid(
            "spec.leaseTransitions",
            &json!(t),
            "must be greater than or equal to 0",
        ));
    }
}

fn validate_pod(v: &Value, old: Option<&Value>, errs: &mut Vec<Cause>) {
    let containers = v.pointer("/spec/containers").and_then(Value::as_array);
    match containers {
        None => errs.push(Cause::required("spec.containers", "")),
        Some(cs) if cs.is_empty() => errs.push(Cause::required("spec.containers", "")),
        Some(cs) => {
            for (i, c) in cs.iter().enumerate() {
                let name = c["name"].as_str().unwrap_or_default();
                if name.is_empty() {
                    errs.push(Cause::required(&format!("spec.containers[{i}].name"), ""));
                } else {
                    for p in names::dns1123_label(name) {
                        errs.push(Cause::invalid(
                            &format!("spec.containers[{i}].name"),
                            &json!(name),
                            &p,
                        ));
                    }
                }
                if c["image"].as_str().unwrap_or_default().is_empty() && old.is_none() {
                    errs.push(Cause::required(&format!("spec.containers[{i}].image"), ""));
                }
            }
        }
    }
    if let Some(old) = old {
        let count = |p: &Value, list: &str| {
            p.pointer(&format!("/spec/{list}"))
                .and_then(Value::as_array)
                .map_or(0, Vec::len)
        };
        if count(old, "containers") != count(v, "containers") {
            // ValidatePodUpdate says only this, before comparing the rest (found by the real tier).
            errs.push(Cause::forbidden(
                "spec.containers",
                "pod updates may not add or remove containers",
            ));
            return;
        }
        // Pod specs are immutable apart from container images (and a few scheduling fields).
        let strip = |p: &Value| {
            let mut s = p.get("spec").cloned().unwrap_or(json!({}));
            for list in ["containers", "initContainers"] {
                if let Some(cs) = s.get_mut(list).and_then(Value::as_array_mut) {
                    for c in cs.iter_mut().filter_map(Value::as_object_mut) {
                        c.remove("image");
                    }
                }
            }
            if let Some(o) = s.as_object_mut() {
                for k in [
                    "activeDeadlineSeconds",
                    "tolerations",
                    "terminationGracePeriodSeconds",
                ] {
                    o.remove(k);
                }
            }
            s
        };
        if strip(old) != strip(v) {
            errs.push(Cause::forbidden(
                "spec",
                "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
            ));
        }
    }
}

fn validate_service(v: &Value, errs: &mut Vec<Cause>) {
    let headless = v.pointer("/spec/clusterIP").and_then(Value::as_str) == Some("None");
    let ty = v
        .pointer("/spec/type")
        .and_then(Value::as_str)
        .unwrap_or("ClusterIP");
    let valid_types = ["ClusterIP", "NodePort", "LoadBalancer", "ExternalName"];
    if !valid_types.contains(&ty) {
        errs.push(Cause::not_supported("spec.type", &json!(ty), &valid_types));
    }
    let ports = v.pointer("/spec/ports").and_then(Value::as_array);
    if ports.is_none_or(Vec::is_empty) && !headless && ty != "ExternalName" {
        errs.push(Cause::required("spec.ports", ""));
    }
    for (i, p) in ports.into_iter().flatten().enumerate() {
        let port = p["port"].as_i64().unwrap_or(0);
        if !(1..=65535).contains(&port) {
            errs.push(Cause::invalid(
                &format!("spec.ports[{i}].port"),
                &p["port"],
                "must be between 1 and 65535, inclusive",
            ));
        }
        if ports.is_some_and(|ps| ps.len() > 1) && p["name"].as_str().unwrap_or_default().is_empty()
        {
            errs.push(Cause::required(&format!("spec.ports[{i}].name"), ""));
        }
    }
}

/// The detail `ValidateNonSpecialIP` gives a loopback address.
const LOOPBACK_DETAIL: &str = "may not be in the loopback range (127.0.0.0/8, ::1/128)";

/// `ValidateEndpoints` (`pkg/apis/core/validation`): every address a valid IP that is not
/// special (`ValidateNonSpecialIP`), hostnames DNS-1123 labels, ports in range with a known
/// protocol, and a name on each port when a subset has several.
fn validate_endpoints(v: &Value, errs: &mut Vec<Cause>) {
    let subsets = v.get("subsets").and_then(Value::as_array);
    for (i, ss) in subsets.into_iter().flatten().enumerate() {
        let at = format!("subsets[{i}]");
        let addrs = ss.get("addresses").and_then(Value::as_array);
        let not_ready = ss.get("notReadyAddresses").and_then(Value::as_array);
        if addrs.is_none_or(Vec::is_empty) && not_ready.is_none_or(Vec::is_empty) {
            errs.push(Cause::required(
                &at,
                "must specify `addresses` or `notReadyAddresses`",
            ));
        }
        for (list, items) in [("addresses", addrs), ("notReadyAddresses", not_ready)] {
            for (j, a) in items.into_iter().flatten().enumerate() {
                let field = format!("{at}.{list}[{j}]");
                if let Some(h) = a
                    .get("hostname")
                    .and_then(Value::as_str)
                    .filter(|h| !h.is_empty())
                {
                    for p in names::dns1123_label(h) {
                        errs.push(Cause::invalid(&format!("{field}.hostname"), &json!(h), &p));
                    }
                }
                let ip = a.get("ip").and_then(Value::as_str).unwrap_or_default();
                for detail in special_ip(ip) {
                    errs.push(Cause::invalid(&format!("{field}.ip"), &json!(ip), &detail));
                }
            }
        }
        let ports = ss.get("ports").and_then(Value::as_array);
        let several = ports.is_some_and(|p| p.len() > 1);
        for (j, p) in ports.into_iter().flatten().enumerate() {
            let field = format!("{at}.ports[{j}]");
            let name = p.get("name").and_then(Value::as_str).unwrap_or_default();
            if several && name.is_empty() {
                errs.push(Cause::required(&format!("{field}.name"), ""));
            } else if !name.is_empty() {
                for msg in names::dns1123_label(name) {
                    errs.push(Cause::invalid(&format!("{field}.name"), &json!(name), &msg));
                }
            }
            let port = p.get("port").and_then(Value::as_i64).unwrap_or(0);
            if !(1..=65535).contains(&port) {
                errs.push(Cause::invalid(
                    &format!("{field}.port"),
                    &json!(port),
                    "must be between 1 and 65535, inclusive",
                ));
            }
            let proto = p.get("protocol").and_then(Value::as_str).unwrap_or("TCP");
            let valid = ["SCTP", "TCP", "UDP"];
            if !valid.contains(&proto) {
                errs.push(Cause::not_supported(
                    &format!("{field}.protocol"),
                    &json!(proto),
                    &valid,
                ));
            }
        }
    }
}

/// `ValidateNonSpecialIP`'s details for `ip` (none when it is an ordinary unicast address).
fn special_ip(ip: &str) -> Vec<String> {
    let Ok(parsed) = ip.parse::<std::net::IpAddr>() else {
        return vec!["must be a valid IP address".into()];
    };
    // Go's net.IP methods see an IPv4-mapped IPv6 address as the IPv4 one.
    let parsed = match parsed {
        std::net::IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(parsed, std::net::IpAddr::V4),
        v4 => v4,
    };
    let mut out = Vec::new();
    if parsed.is_unspecified() {
        out.push(format!("may not be unspecified ({ip})"));
    }
    if parsed.is_loopback() {
        out.push(LOOPBACK_DETAIL.to_owned());
    }
    let (link_local, link_local_multicast) = match parsed {
        std::net::IpAddr::V4(v4) => (v4.is_link_local(), v4.octets()[..3] == [224, 0, 0]),
        std::net::IpAddr::V6(v6) => (
            v6.segments()[0] & 0xffc0 == 0xfe80,
            v6.segments()[0] & 0xff0f == 0xff02,
        ),
    };
    if link_local {
        out.push("may not be in the link-local range (169.254.0.0/16, fe80::/10)".into());
    }
    if link_local_multicast {
        out.push("may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)".into());
    }
    out
}

/// [`crate::SimOptions::loopback_endpoints`]: drops the loopback refusals from an Endpoints
/// validation.
pub fn allow_loopback_endpoints(rt: &ResourceType, causes: &mut Vec<Cause>) {
    if (rt.group, rt.kind) == ("", "Endpoints") {
        causes.retain(|c| !c.message.ends_with(LOOPBACK_DETAIL));
    }
}

fn validate_data_keys(v: &Value, errs: &mut Vec<Cause>) {
    for field in ["data", "binaryData", "stringData"] {
        if let Some(m) = v.get(field).and_then(Value::as_object) {
            for k in m.keys() {
                let ok = !k.is_empty()
                    && k.len() <= 253
                    && k != "."
                    && k != ".."
                    && k.bytes()
                        .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_' || c == b'.');
                if !ok {
                    errs.push(Cause::invalid(
                        &format!("{field}[{k}]"),
                        &json!(k),
                        "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')",
                    ));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::{id_of, lookup};

    fn rt(group: &str, resource: &str) -> &'static ResourceType {
        get(id_of(group, resource))
    }

    #[test]
    fn micro_time_needs_six_fractional_digits() {
        assert!(is_micro_time("2026-11-22T10:00:00.123456Z"));
        assert!(is_micro_time("2026-11-22T10:00:00.123456+02:00"));
        assert!(!is_micro_time("2026-11-22T10:00:00Z"));
        assert!(!is_micro_time("2026-11-22T10:00:00.123Z"));
        assert!(!is_micro_time("2026-11-22T10:00:00.1234567Z"));
        assert!(!is_micro_time("not a time at all, really"));
    }

    #[test]
    fn lease_validation_messages() {
        let lease = rt("coordination.k8s.io", "leases");
        let v = json!({"metadata": {"name": "x"}, "spec": {"leaseDurationSeconds": 0, "leaseTransitions": -1}});
        let errs = validate(lease, &v, None);
        assert_eq!(errs.len(), 2);
        assert_eq!(errs[0].field, "spec.leaseDurationSeconds");
        assert_eq!(errs[0].message, "Invalid value: 0: must be greater than 0");
    }

    #[test]
    fn pods_get_pending_status_and_defaults() {
        let pod = rt("", "pods");
        let mut v = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x"}]}, "status": {"phase": "Running"}});
        prepare_create(pod, &mut v);
        assert_eq!(v["status"]["phase"], "Pending");
        assert_eq!(v["spec"]["terminationGracePeriodSeconds"], 30);
        assert_eq!(v["spec"]["containers"][0]["imagePullPolicy"], "Always");
    }

    #[test]
    fn status_subresource_changes_only_status() {
        let pod = rt("", "pods");
        let old = json!({"metadata": {"name": "p", "uid": "u"}, "spec": {"nodeName": "a"}, "status": {"phase": "Pending"}});
        let mut new = json!({"metadata": {"name": "p"}, "spec": {"nodeName": "b"}, "status": {"phase": "Running"}});
        prepare_update(pod, &old, &mut new, Some("status"));
        assert_eq!(new["spec"]["nodeName"], "a");
        assert_eq!(new["status"]["phase"], "Running");
        let mut main = json!({"metadata": {"name": "p"}, "spec": {"nodeName": "a"}, "status": {"phase": "Failed"}});
        prepare_update(pod, &old, &mut main, None);
        assert_eq!(main["status"]["phase"], "Pending");
        assert_eq!(main["metadata"]["uid"], "u");
    }

    #[test]
    fn generation_only_where_the_kind_has_it() {
        let lease = rt("coordination.k8s.io", "leases");
        let mut v = json!({"metadata": {"name": "l", "generation": 5}, "spec": {}});
        prepare_create(lease, &mut v);
        assert!(v["metadata"].get("generation").is_none());
        let (_, es) = lookup("discovery.k8s.io", "v1", "endpointslices").unwrap();
        let mut e = json!({"metadata": {"name": "e"}, "addressType": "IPv4", "endpoints": []});
        prepare_create(es, &mut e);
        assert_eq!(e["metadata"]["generation"], 1);
    }

    #[test]
    fn typecheck_rejects_wrong_types_and_bad_micro_times() {
        let lease = rt("coordination.k8s.io", "leases");
        let ok = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "x"}, "spec": {"renewTime": "2026-11-22T10:00:00.000001Z"}});
        assert!(typecheck(lease, &ok).is_ok());
        let bad = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "x"}, "spec": {"leaseDurationSeconds": "ten"}});
        assert!(typecheck(lease, &bad).is_err());
        let bad_time = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "x"}, "spec": {"renewTime": "2026-11-22T10:00:00Z"}});
        assert!(typecheck(lease, &bad_time).is_err());
    }

    #[test]
    fn no_new_finalizers_after_deletion() {
        let cm = rt("", "configmaps");
        let old = json!({"metadata": {"name": "c", "deletionTimestamp": "2026-01-01T00:00:00Z", "finalizers": ["a"]}});
        let new = json!({"metadata": {"name": "c", "deletionTimestamp": "2026-01-01T00:00:00Z", "finalizers": ["a", "b"]}});
        let errs = validate(cm, &new, Some(&old));
        assert_eq!(errs.len(), 1);
        assert!(
            errs[0].message.contains("no new finalizers"),
            "{}",
            errs[0].message
        );
    }
}
