//! Strategies of the kinds that installing an application needs — `apps/v1` Deployment and
//! StatefulSet, ServiceAccount, PersistentVolumeClaim, the four `rbac.authorization.k8s.io/v1`
//! kinds, `policy/v1` PodDisruptionBudget and `networking.k8s.io/v1` NetworkPolicy — so that
//! `kubectl apply --dry-run=server` of Leasehold's own manifests is checked the way
//! kube-apiserver checks it: the `SetDefaults_*` functions of `pkg/apis/*/v1/defaults.go` that
//! shape the stored object, and the required-field and cross-field rules of
//! `pkg/apis/*/validation` with their messages. Only the rules listed here are implemented (see
//! docs/fidelity.md); nothing runs these objects — no controller creates ReplicaSets or pods.
//!
//! Pure functions over JSON values, called from `strategy.rs`.

use serde_json::{Map, Value, json};

use super::names;
use super::status::Cause;

/// `SetDefaults_*` of the kind, applied whenever the object is decoded (create and update).
pub fn default(group: &str, kind: &str, v: &mut Value) {
    match (group, kind) {
        ("apps", "Deployment") => {
            let spec = object_at(v, "spec");
            spec.entry("replicas").or_insert(json!(1));
            spec.entry("revisionHistoryLimit").or_insert(json!(10));
            spec.entry("progressDeadlineSeconds").or_insert(json!(600));
            let strategy = spec.entry("strategy").or_insert(json!({})).as_object_mut();
            if let Some(s) = strategy {
                s.entry("type").or_insert(json!("RollingUpdate"));
                if s["type"] == "RollingUpdate" {
                    let ru = s.entry("rollingUpdate").or_insert(json!({}));
                    if let Some(ru) = ru.as_object_mut() {
                        ru.entry("maxUnavailable").or_insert(json!("25%"));
                        ru.entry("maxSurge").or_insert(json!("25%"));
                    }
                }
            }
            default_template(v);
        }
        ("apps", "StatefulSet") => {
            let spec = object_at(v, "spec");
            spec.entry("replicas").or_insert(json!(1));
            spec.entry("revisionHistoryLimit").or_insert(json!(10));
            spec.entry("podManagementPolicy")
                .or_insert(json!("OrderedReady"));
            spec.entry("persistentVolumeClaimRetentionPolicy")
                .or_insert(json!({"whenDeleted": "Retain", "whenScaled": "Retain"}));
            if let Some(s) = spec
                .entry("updateStrategy")
                .or_insert(json!({}))
                .as_object_mut()
            {
                s.entry("type").or_insert(json!("RollingUpdate"));
                if s["type"] == "RollingUpdate" {
                    let ru = s.entry("rollingUpdate").or_insert(json!({}));
                    if let Some(ru) = ru.as_object_mut() {
                        ru.entry("partition").or_insert(json!(0));
                    }
                }
            }
            if let Some(claims) = v
                .pointer_mut("/spec/volumeClaimTemplates")
                .and_then(Value::as_array_mut)
            {
                for c in claims {
                    default_claim(c);
                }
            }
            default_template(v);
        }
        ("", "PersistentVolumeClaim") => default_claim(v),
        ("networking.k8s.io", "NetworkPolicy") => {
            // SetDefaults_NetworkPolicy: Ingress always, Egress when egress rules are given.
            let spec = object_at(v, "spec");
            if spec
                .get("policyTypes")
                .and_then(Value::as_array)
                .is_none_or(Vec::is_empty)
            {
                let mut types = vec![json!("Ingress")];
                if spec
                    .get("egress")
                    .and_then(Value::as_array)
                    .is_some_and(|e| !e.is_empty())
                {
                    types.push(json!("Egress"));
                }
                spec.insert("policyTypes".into(), Value::Array(types));
            }
            for dir in ["ingress", "egress"] {
                if let Some(rules) = spec.get_mut(dir).and_then(Value::as_array_mut) {
                    for r in rules {
                        if let Some(ports) = r.get_mut("ports").and_then(Value::as_array_mut) {
                            for p in ports.iter_mut().filter_map(Value::as_object_mut) {
                                p.entry("protocol").or_insert(json!("TCP"));
                            }
                        }
                    }
                }
            }
        }
        ("rbac.authorization.k8s.io", "RoleBinding" | "ClusterRoleBinding") => {
            // SetDefaults_Subject: User and Group subjects get the RBAC group.
            if let Some(subjects) = v.get_mut("subjects").and_then(Value::as_array_mut) {
                for s in subjects.iter_mut().filter_map(Value::as_object_mut) {
                    let kind = s.get("kind").and_then(Value::as_str).unwrap_or_default();
                    if (kind == "User" || kind == "Group")
                        && s.get("apiGroup")
                            .and_then(Value::as_str)
                            .is_none_or(str::is_empty)
                    {
                        s.insert("apiGroup".into(), json!("rbac.authorization.k8s.io"));
                    }
                }
            }
        }
        _ => {}
    }
}

/// Status set on create (`PrepareForCreate`).
pub fn initial_status(group: &str, kind: &str) -> Option<Value> {
    match (group, kind) {
        ("apps", "Deployment") | ("apps", "StatefulSet") => Some(json!({})),
        ("", "PersistentVolumeClaim") => Some(json!({"phase": "Pending"})),
        ("policy", "PodDisruptionBudget") => Some(json!({
            "currentHealthy": 0, "desiredHealthy": 0, "disruptionsAllowed": 0, "expectedPods": 0
        })),
        _ => None,
    }
}

/// The kind's validation (`Validate<Kind>`), after the generic metadata checks.
pub fn validate(group: &str, kind: &str, v: &Value, errs: &mut Vec<Cause>) {
    match (group, kind) {
        ("apps", "Deployment") => validate_workload(v, "deployment", errs),
        ("apps", "StatefulSet") => {
            validate_workload(v, "statefulset", errs);
            if let Some(claims) = v
                .pointer("/spec/volumeClaimTemplates")
                .and_then(Value::as_array)
            {
                for (i, c) in claims.iter().enumerate() {
                    let at = format!("spec.volumeClaimTemplates[{i}].spec");
                    validate_claim_spec(c.get("spec").unwrap_or(&Value::Null), &at, errs);
                }
            }
        }
        ("", "PersistentVolumeClaim") => {
            validate_claim_spec(v.get("spec").unwrap_or(&Value::Null), "spec", errs);
        }
        ("rbac.authorization.k8s.io", "Role") => validate_rules(v, true, errs),
        ("rbac.authorization.k8s.io", "ClusterRole") => validate_rules(v, false, errs),
        ("rbac.authorization.k8s.io", "RoleBinding") => validate_binding(v, true, errs),
        ("rbac.authorization.k8s.io", "ClusterRoleBinding") => validate_binding(v, false, errs),
        ("policy", "PodDisruptionBudget") => {
            let spec = v.get("spec").cloned().unwrap_or(json!({}));
            if !spec.get("minAvailable").is_none_or(Value::is_null)
                && !spec.get("maxUnavailable").is_none_or(Value::is_null)
            {
                errs.push(Cause::invalid_rendered(
                    "spec",
                    &go_struct(&spec),
                    "minAvailable and maxUnavailable cannot be both set",
                ));
            }
            for f in ["minAvailable", "maxUnavailable"] {
                check_int_or_percent(&spec, f, &format!("spec.{f}"), errs);
            }
        }
        ("networking.k8s.io", "NetworkPolicy") => {
            let types = v
                .pointer("/spec/policyTypes")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            for (i, t) in types.iter().enumerate() {
                let s = t.as_str().unwrap_or_default();
                if s != "Ingress" && s != "Egress" {
                    errs.push(Cause::not_supported(
                        &format!("spec.policyTypes[{i}]"),
                        t,
                        &["Ingress", "Egress"],
                    ));
                }
            }
            for dir in ["ingress", "egress"] {
                let rules = v.pointer(&format!("/spec/{dir}")).and_then(Value::as_array);
                for (i, r) in rules.into_iter().flatten().enumerate() {
                    let ports = r.get("ports").and_then(Value::as_array);
                    for (j, p) in ports.into_iter().flatten().enumerate() {
                        if let Some(n) = p.get("port").and_then(Value::as_i64)
                            && !(1..=65535).contains(&n)
                        {
                            errs.push(Cause::invalid(
                                &format!("spec.{dir}[{i}].ports[{j}].port"),
                                &json!(n),
                                "must be between 1 and 65535, inclusive",
                            ));
                        }
                    }
                }
            }
        }
        _ => {}
    }
}

/// The object at `key` of `v` (created when missing or not an object).
fn object_at<'a>(v: &'a mut Value, key: &str) -> &'a mut Map<String, Value> {
    if !v.get(key).is_some_and(Value::is_object) {
        v[key] = json!({});
    }
    v[key].as_object_mut().expect("just made an object")
}

/// The pod template of a workload gets a pod's defaults (`SetDefaults_PodSpec` and friends).
fn default_template(v: &mut Value) {
    if let Some(template) = v.pointer_mut("/spec/template")
        && template.get("spec").is_some_and(Value::is_object)
    {
        super::strategy::default_pod(template);
    }
}

fn default_claim(v: &mut Value) {
    if let Some(spec) = v.get_mut("spec").and_then(Value::as_object_mut) {
        spec.entry("volumeMode").or_insert(json!("Filesystem"));
    }
}

/// Deployment and StatefulSet: replicas, selector, template labels, the pod template's
/// containers (`ValidateDeploymentSpec`, `ValidateStatefulSetSpec`).
fn validate_workload(v: &Value, what: &str, errs: &mut Vec<Cause>) {
    if let Some(r) = v.pointer("/spec/replicas").and_then(Value::as_i64)
        && r < 0
    {
        errs.push(Cause::invalid(
            "spec.replicas",
            &json!(r),
            "must be greater than or equal to 0",
        ));
    }
    let selector = v.pointer("/spec/selector").filter(|s| !s.is_null());
    let template_labels = v
        .pointer("/spec/template/metadata/labels")
        .and_then(Value::as_object);
    match selector {
        None => {
            // A nil selector becomes `labels.Nothing()`, which matches no template either.
            errs.push(Cause::required("spec.selector", ""));
            errs.push(Cause::invalid_rendered(
                "spec.template.metadata.labels",
                &go_map(template_labels),
                "`selector` does not match template `labels`",
            ));
        }
        Some(s) => {
            let labels = s.get("matchLabels").and_then(Value::as_object);
            let exprs = s.get("matchExpressions").and_then(Value::as_array);
            if labels.is_none_or(Map::is_empty) && exprs.is_none_or(Vec::is_empty) {
                errs.push(Cause::invalid_rendered(
                    "spec.selector",
                    &go_struct(s),
                    &format!("empty selector is invalid for {what}"),
                ));
            }
            let matches = labels
                .into_iter()
                .flatten()
                .all(|(k, want)| template_labels.and_then(|t| t.get(k)) == Some(want));
            if !matches {
                errs.push(Cause::invalid_rendered(
                    "spec.template.metadata.labels",
                    &go_map(template_labels),
                    "`selector` does not match template `labels`",
                ));
            }
        }
    }
    match v.pointer("/spec/template/spec") {
        None | Some(Value::Null) => errs.push(Cause::required("spec.template.spec.containers", "")),
        Some(spec) => validate_pod_spec(spec, "spec.template.spec", errs),
    }
}

/// The container rules of a pod spec: at least one container, each named (a DNS label, unique)
/// with an image.
pub fn validate_pod_spec(spec: &Value, at: &str, errs: &mut Vec<Cause>) {
    let mut seen = Vec::new();
    match spec.get("containers").and_then(Value::as_array) {
        None => errs.push(Cause::required(&format!("{at}.containers"), "")),
        Some(cs) if cs.is_empty() => errs.push(Cause::required(&format!("{at}.containers"), "")),
        Some(_) => {}
    }
    for list in ["initContainers", "containers"] {
        let cs = spec.get(list).and_then(Value::as_array);
        for (i, c) in cs.into_iter().flatten().enumerate() {
            let path = format!("{at}.{list}[{i}]");
            let name = c["name"].as_str().unwrap_or_default();
            if name.is_empty() {
                errs.push(Cause::required(&format!("{path}.name"), ""));
            } else {
                for p in names::dns1123_label(name) {
                    errs.push(Cause::invalid(&format!("{path}.name"), &json!(name), &p));
                }
                if seen.contains(&name) {
                    errs.push(Cause::duplicate(&format!("{path}.name"), &json!(name)));
                }
                seen.push(name);
            }
            if c["image"].as_str().unwrap_or_default().is_empty() {
                errs.push(Cause::required(&format!("{path}.image"), ""));
            }
        }
    }
}

/// `ValidatePersistentVolumeClaimSpec`: access modes and a storage request.
fn validate_claim_spec(spec: &Value, at: &str, errs: &mut Vec<Cause>) {
    const MODES: [&str; 4] = [
        "ReadOnlyMany",
        "ReadWriteMany",
        "ReadWriteOnce",
        "ReadWriteOncePod",
    ];
    let modes = spec
        .get("accessModes")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if modes.is_empty() {
        errs.push(Cause::required(
            &format!("{at}.accessModes"),
            "at least 1 access mode is required",
        ));
    }
    for m in &modes {
        if !MODES.contains(&m.as_str().unwrap_or_default()) {
            errs.push(Cause::not_supported(
                &format!("{at}.accessModes"),
                m,
                &MODES,
            ));
        }
    }
    if spec.pointer("/resources/requests/storage").is_none() {
        errs.push(Cause::required(&format!("{at}.resources[storage]"), ""));
    }
}

/// `ValidatePolicyRule` for each rule of a Role or ClusterRole.
fn validate_rules(v: &Value, namespaced: bool, errs: &mut Vec<Cause>) {
    let rules = v.get("rules").and_then(Value::as_array);
    for (i, r) in rules.into_iter().flatten().enumerate() {
        let at = format!("rules[{i}]");
        let len = |k: &str| r.get(k).and_then(Value::as_array).map_or(0, Vec::len);
        if len("verbs") == 0 {
            errs.push(Cause::required(
                &format!("{at}.verbs"),
                "verbs must contain at least one value",
            ));
        }
        if len("nonResourceURLs") > 0 {
            if namespaced {
                errs.push(Cause::invalid(
                    &format!("{at}.nonResourceURLs"),
                    &r["nonResourceURLs"],
                    "namespaced rules cannot apply to non-resource URLs",
                ));
            }
            continue;
        }
        if len("apiGroups") == 0 {
            errs.push(Cause::required(
                &format!("{at}.apiGroups"),
                "resource rules must supply at least one api group",
            ));
        }
        if len("resources") == 0 {
            errs.push(Cause::required(
                &format!("{at}.resources"),
                "resource rules must supply at least one resource",
            ));
        }
    }
}

/// `ValidateRoleBinding` / `ValidateClusterRoleBinding`: the role reference and each subject.
fn validate_binding(v: &Value, namespaced: bool, errs: &mut Vec<Cause>) {
    const RBAC: &str = "rbac.authorization.k8s.io";
    let role_ref = v.get("roleRef").cloned().unwrap_or(json!({}));
    let s = |o: &Value, k: &str| {
        o.get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    if s(&role_ref, "apiGroup") != RBAC {
        errs.push(Cause::not_supported(
            "roleRef.apiGroup",
            &json!(s(&role_ref, "apiGroup")),
            &[RBAC],
        ));
    }
    let kinds: &[&str] = if namespaced {
        &["Role", "ClusterRole"]
    } else {
        &["ClusterRole"]
    };
    if !kinds.contains(&s(&role_ref, "kind").as_str()) {
        errs.push(Cause::not_supported(
            "roleRef.kind",
            &json!(s(&role_ref, "kind")),
            kinds,
        ));
    }
    let name = s(&role_ref, "name");
    if name.is_empty() {
        errs.push(Cause::required("roleRef.name", ""));
    } else {
        for p in names::path_segment(&name) {
            errs.push(Cause::invalid("roleRef.name", &json!(name), &p));
        }
    }
    let subjects = v.get("subjects").and_then(Value::as_array);
    for (i, sub) in subjects.into_iter().flatten().enumerate() {
        let at = format!("subjects[{i}]");
        let name = s(sub, "name");
        if name.is_empty() {
            errs.push(Cause::required(&format!("{at}.name"), ""));
        }
        match s(sub, "kind").as_str() {
            "ServiceAccount" => {
                if !name.is_empty() {
                    for p in names::dns1123_subdomain(&name) {
                        errs.push(Cause::invalid(&format!("{at}.name"), &json!(name), &p));
                    }
                }
                if !s(sub, "apiGroup").is_empty() {
                    errs.push(Cause::not_supported(
                        &format!("{at}.apiGroup"),
                        &json!(s(sub, "apiGroup")),
                        &[""],
                    ));
                }
                if !namespaced && s(sub, "namespace").is_empty() {
                    errs.push(Cause::required(&format!("{at}.namespace"), ""));
                }
            }
            "User" | "Group" => {
                if s(sub, "apiGroup") != RBAC {
                    errs.push(Cause::not_supported(
                        &format!("{at}.apiGroup"),
                        &json!(s(sub, "apiGroup")),
                        &[RBAC],
                    ));
                }
            }
            other => errs.push(Cause::not_supported(
                &format!("{at}.kind"),
                &json!(other),
                &["ServiceAccount", "User", "Group"],
            )),
        }
    }
}

/// An int-or-string that must be a non-negative integer or a percentage
/// (`ValidatePositiveIntOrPercent`).
fn check_int_or_percent(spec: &Value, key: &str, at: &str, errs: &mut Vec<Cause>) {
    match spec.get(key) {
        Some(Value::Number(n)) if n.as_i64().is_some_and(|n| n < 0) => {
            errs.push(Cause::invalid(
                at,
                &json!(n),
                "must be greater than or equal to 0",
            ));
        }
        Some(Value::String(s)) => {
            let ok = s
                .strip_suffix('%')
                .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()));
            if !ok {
                errs.push(Cause::invalid(
                    at,
                    &json!(s),
                    "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')",
                ));
            }
        }
        _ => {}
    }
}

/// Go's `%v`-ish rendering of a struct value, as `field.Invalid` prints a Go struct; the
/// simulator prints the JSON instead (clients match on the field and the detail).
fn go_struct(v: &Value) -> String {
    v.to_string()
}

/// Go's rendering of a `map[string]string` (`map[string]string{"app":"x"}`).
fn go_map(m: Option<&Map<String, Value>>) -> String {
    let mut pairs: Vec<String> = m
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k:?}:{:?}", v.as_str().unwrap_or_default()))
        .collect();
    pairs.sort();
    format!("map[string]string{{{}}}", pairs.join(", "))
}
