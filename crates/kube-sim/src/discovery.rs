//! Legacy discovery documents (`/version`, `/api`, `/api/v1`, `/apis`, `/apis/{g}`,
//! `/apis/{g}/{v}`), built from the registry. Legacy JSON on every endpoint: client-go picks
//! legacy discovery from the `application/json` Content-Type (aggregated discovery is an
//! alternative the real apiserver also offers; see docs/fidelity.md).

use serde_json::{Value, json};

use super::registry::{self, TYPES};

/// The Kubernetes version the simulator claims: the oldest the crate's k8s-openapi feature
/// supports, so clients see the API level Leasehold is built against.
pub const MAJOR: &str = "1";
/// See [`MAJOR`].
pub const MINOR: &str = "33";

/// `GET /version`.
pub fn version() -> Value {
    json!({
        "major": MAJOR,
        "minor": MINOR,
        "emulationMajor": MAJOR,
        "emulationMinor": MINOR,
        "minCompatibilityMajor": MAJOR,
        "minCompatibilityMinor": "32",
        "gitVersion": format!("v{MAJOR}.{MINOR}.0-leasehold-sim"),
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "n/a (leasehold simulator)",
        "compiler": "rustc",
        "platform": format!("{}/{}", std::env::consts::OS, if std::env::consts::ARCH == "x86_64" { "amd64" } else { std::env::consts::ARCH }),
    })
}

/// `GET /api`.
pub fn api_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{ "clientCIDR": "0.0.0.0/0", "serverAddress": server_address }]
    })
}

fn group_entry(group: &str) -> Value {
    let versions: Vec<Value> = registry::group_versions()
        .into_iter()
        .filter(|(g, _)| *g == group)
        .map(|(g, v)| json!({ "groupVersion": format!("{g}/{v}"), "version": v }))
        .collect();
    json!({ "name": group, "versions": versions.clone(), "preferredVersion": versions.first().cloned().unwrap_or(json!({})) })
}

/// The order kube-apiserver 1.33 lists its built-in groups in (`/apis`): the aggregator's
/// group priorities. Groups not named here follow, in registry order.
const GROUP_ORDER: &[&str] = &[
    "apiregistration.k8s.io",
    "apps",
    "events.k8s.io",
    "authentication.k8s.io",
    "authorization.k8s.io",
    "autoscaling",
    "batch",
    "certificates.k8s.io",
    "networking.k8s.io",
    "policy",
    "rbac.authorization.k8s.io",
    "storage.k8s.io",
    "admissionregistration.k8s.io",
    "apiextensions.k8s.io",
    "scheduling.k8s.io",
    "coordination.k8s.io",
    "node.k8s.io",
    "discovery.k8s.io",
    "flowcontrol.apiserver.k8s.io",
];

/// `storageVersionHash` of a stored kind: the first 8 bytes of SHA-256 of
/// `group/version/kind`, base64 (apiserver `discovery.StorageVersionHash`).
fn storage_version_hash(group: &str, version: &str, kind: &str) -> String {
    use base64::Engine as _;
    let d = ring::digest::digest(
        &ring::digest::SHA256,
        format!("{group}/{version}/{kind}").as_bytes(),
    );
    base64::engine::general_purpose::STANDARD.encode(&d.as_ref()[..8])
}

/// `GET /apis`.
pub fn api_groups() -> Value {
    let mut groups: Vec<&str> = Vec::new();
    for (g, _) in registry::group_versions() {
        if !g.is_empty() && !groups.contains(&g) {
            groups.push(g);
        }
    }
    // Stable: known groups by the apiserver's order, the rest after them as registered.
    groups.sort_by_key(|g| {
        GROUP_ORDER
            .iter()
            .position(|o| o == g)
            .unwrap_or(usize::MAX)
    });
    json!({ "kind": "APIGroupList", "apiVersion": "v1", "groups": groups.iter().map(|g| group_entry(g)).collect::<Vec<_>>() })
}

/// `GET /apis/{group}`, if served.
pub fn api_group(group: &str) -> Option<Value> {
    if !TYPES.iter().any(|t| t.group == group && !group.is_empty()) {
        return None;
    }
    let mut g = group_entry(group);
    let o = g.as_object_mut()?;
    o.insert("kind".into(), json!("APIGroup"));
    o.insert("apiVersion".into(), json!("v1"));
    Some(g)
}

/// `GET /api/v1` or `GET /apis/{group}/{version}`, if served.
pub fn resource_list(group: &str, version: &str) -> Option<Value> {
    let mut resources = Vec::new();
    for t in TYPES
        .iter()
        .filter(|t| t.group == group && t.version == version)
    {
        let mut r = json!({
            "name": t.resource,
            "singularName": t.singular,
            "namespaced": t.namespaced,
            "kind": t.kind,
            "verbs": t.verbs,
        });
        if !t.short_names.is_empty() {
            r["shortNames"] = json!(t.short_names);
        }
        if !t.categories.is_empty() {
            r["categories"] = json!(t.categories);
        }
        if !t.review {
            // events.k8s.io Events are stored as core/v1 Events: the hash names the storage.
            let (g, v) = if t.group == "events.k8s.io" {
                ("", "v1")
            } else {
                (t.group, t.version)
            };
            r["storageVersionHash"] = json!(storage_version_hash(g, v, t.kind));
        }
        resources.push(r);
        if t.resource == "namespaces" {
            resources.push(json!({ "name": "namespaces/finalize", "singularName": "", "namespaced": false, "kind": "Namespace", "verbs": ["update"] }));
        }
        if t.status {
            resources.push(json!({
                "name": format!("{}/status", t.resource),
                "singularName": "",
                "namespaced": t.namespaced,
                "kind": t.kind,
                "verbs": registry::status_verbs(),
            }));
        }
    }
    if resources.is_empty() {
        return None;
    }
    // go-restful lists them by path.
    resources.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    let gv = if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    };
    let mut list = json!({ "kind": "APIResourceList", "groupVersion": gv, "resources": resources });
    if !group.is_empty() {
        list["apiVersion"] = json!("v1");
    }
    Some(list)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_resource_list_has_subresources_and_short_names() {
        let l = resource_list("", "v1").unwrap();
        let names: Vec<&str> = l["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        assert!(names.contains(&"pods/status"));
        assert!(names.contains(&"services/status"));
        let pods = l["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == "pods")
            .unwrap();
        assert_eq!(pods["shortNames"], json!(["po"]));
        assert!(
            l.get("apiVersion").is_none(),
            "legacy /api/v1 has no apiVersion"
        );
    }

    #[test]
    fn storage_version_hashes_are_the_apiservers() {
        // Values read from kube-apiserver v1.33.13's discovery.
        assert_eq!(storage_version_hash("", "v1", "ConfigMap"), "qFsyl6wFWjQ=");
        assert_eq!(
            storage_version_hash("coordination.k8s.io", "v1", "Lease"),
            "gqkMMb/YqFM="
        );
    }

    #[test]
    fn groups_list_coordination_and_reviews() {
        let g = api_groups();
        let names: Vec<&str> = g["groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["name"].as_str().unwrap())
            .collect();
        for want in [
            "coordination.k8s.io",
            "discovery.k8s.io",
            "events.k8s.io",
            "authentication.k8s.io",
            "authorization.k8s.io",
        ] {
            assert!(names.contains(&want), "{want} missing");
        }
        let reviews = resource_list("authentication.k8s.io", "v1").unwrap();
        assert_eq!(reviews["resources"][0]["verbs"], json!(["create"]));
        assert!(api_group("nope.io").is_none());
    }
}
