//! `meta.k8s.io/v1` Table output (`kubectl get`), with the columns kube-apiserver's printers
//! give each kind (`pkg/printers/internalversion/printers.go`). Pure: `now` is passed in.

use jiff::Timestamp;
use serde_json::{Value, json};

use super::registry::ResourceType;

/// What each row carries in `object` (`includeObject` query parameter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IncludeObject {
    None,
    Metadata,
    Object,
}

impl IncludeObject {
    /// Parses `includeObject` (default `Metadata`, as the apiserver's).
    pub fn parse(s: Option<&str>) -> Self {
        match s {
            Some("None") => Self::None,
            Some("Object") => Self::Object,
            _ => Self::Metadata,
        }
    }
}

fn col(name: &str, ty: &str, format: &str, description: &str, priority: u8) -> Value {
    json!({ "name": name, "type": ty, "format": format, "description": description, "priority": priority })
}

const NAME_DESC: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";
const AGE_DESC: &str = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";

/// Column definitions of a kind.
pub fn columns(rt: &ResourceType) -> Vec<Value> {
    let name = col("Name", "string", "name", NAME_DESC, 0);
    let age = col("Age", "string", "", AGE_DESC, 0);
    match (rt.group, rt.kind) {
        ("coordination.k8s.io", "Lease") => vec![
            name,
            col(
                "Holder",
                "string",
                "",
                "holderIdentity contains the identity of the holder of a current lease. If Coordinated Leader Election is used, the holder identity must be equal to the elected LeaseCandidate.metadata.name field.",
                0,
            ),
            age,
        ],
        ("", "Pod") => vec![
            name,
            col(
                "Ready",
                "string",
                "",
                "The aggregate readiness state of this pod for accepting traffic.",
                0,
            ),
            col(
                "Status",
                "string",
                "",
                "The aggregate status of the containers in this pod.",
                0,
            ),
            col(
                "Restarts",
                "string",
                "",
                "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.",
                0,
            ),
            age,
            col(
                "IP",
                "string",
                "",
                "podIP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated.",
                1,
            ),
            col(
                "Node",
                "string",
                "",
                "NodeName indicates in which node this pod is scheduled. If empty, this pod is a candidate for scheduling by the scheduler defined in schedulerName. Once this field is set, the kubelet for this node becomes responsible for the lifecycle of this pod. This field should not be used to express a desire for the pod to be scheduled on a specific node. https://kubernetes.io/docs/concepts/scheduling-eviction/assign-pod-node/#nodename",
                1,
            ),
            col(
                "Nominated Node",
                "string",
                "",
                "nominatedNodeName is set only when this pod preempts other pods on the node, but it cannot be scheduled right away as preemption victims receive their graceful termination periods. This field does not guarantee that the pod will be scheduled on this node. Scheduler may decide to place the pod elsewhere if other nodes become available sooner. Scheduler may also decide to give the resources on this node to a higher priority pod that is created after preemption. As a result, this field may be different than PodSpec.nodeName when the pod is scheduled.",
                1,
            ),
            col(
                "Readiness Gates",
                "string",
                "",
                "If specified, all readiness gates will be evaluated for pod readiness. A pod is ready when all its containers are ready AND all conditions specified in the readiness gates have status equal to \"True\" More info: https://git.k8s.io/enhancements/keps/sig-network/580-pod-readiness-gates",
                1,
            ),
        ],
        ("", "Endpoints") => vec![name, col("Endpoints", "string", "", ENDPOINTS_DESC, 0), age],
        ("", "Service") => vec![
            name,
            col(
                "Type",
                "string",
                "",
                "type determines how the Service is exposed.",
                0,
            ),
            col(
                "Cluster-IP",
                "string",
                "",
                "clusterIP is the IP address of the service.",
                0,
            ),
            col(
                "External-IP",
                "string",
                "",
                "externalIPs is a list of IP addresses for which nodes in the cluster will also accept traffic for this service.",
                0,
            ),
            col(
                "Port(s)",
                "string",
                "",
                "The list of ports that are exposed by this service.",
                0,
            ),
            age,
            col(
                "Selector",
                "string",
                "",
                "Route service traffic to pods with label keys and values matching this selector.",
                1,
            ),
        ],
        ("", "Namespace") => vec![
            name,
            col("Status", "string", "", "The status of the namespace", 0),
            age,
        ],
        ("", "ConfigMap") => vec![
            name,
            col(
                "Data",
                "string",
                "",
                "Data contains the configuration data.",
                0,
            ),
            age,
        ],
        ("", "Secret") => vec![
            name,
            col("Type", "string", "", "The type of secret", 0),
            col("Data", "string", "", "Data contains the secret data.", 0),
            age,
        ],
        ("discovery.k8s.io", "EndpointSlice") => vec![
            name,
            col(
                "AddressType",
                "string",
                "",
                "Type of address carried by this EndpointSlice.",
                0,
            ),
            col(
                "Ports",
                "string",
                "",
                "Ports advertised by this EndpointSlice.",
                0,
            ),
            col(
                "Endpoints",
                "string",
                "",
                "Endpoints included in this EndpointSlice.",
                0,
            ),
            age,
        ],
        ("", "Event") => vec![
            col(
                "Last Seen",
                "string",
                "",
                "Time when last this event was observed.",
                0,
            ),
            col(
                "Type",
                "string",
                "",
                "Type of this event (Normal, Warning), new types could be added in the future.",
                0,
            ),
            col(
                "Reason",
                "string",
                "",
                "This should be a short, machine understandable string that gives the reason for the transition into the object's current status.",
                0,
            ),
            col(
                "Object",
                "string",
                "",
                "The object that this event is about.",
                0,
            ),
            col(
                "Message",
                "string",
                "",
                "A human-readable description of the status of this operation.",
                0,
            ),
        ],
        _ => vec![name, col("Created At", "date", "", AGE_DESC, 0)],
    }
}

/// `duration.HumanDuration` from k8s.io/apimachinery: the Age column.
pub fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".into();
    }
    if seconds < 0 {
        return "0s".into();
    }
    if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    }
    if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = seconds / 3600;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{}h", hours / 24, h)
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let dy = (hours / 24) % 365;
        return if dy == 0 {
            format!("{}y", hours / 24 / 365)
        } else {
            format!("{}y{}d", hours / 24 / 365, dy)
        };
    }
    format!("{}y", hours / 24 / 365)
}

fn age(v: &Value, field: &str, now: Timestamp) -> String {
    match v
        .pointer(field)
        .and_then(Value::as_str)
        .and_then(|t| t.parse::<Timestamp>().ok())
    {
        Some(t) => human_duration(now.as_second() - t.as_second()),
        None => "<unknown>".into(),
    }
}

fn s<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.pointer(ptr).and_then(Value::as_str).unwrap_or_default()
}

/// `v1.Endpoints{}.SwaggerDoc()["subsets"]`, which the printer uses for its column.
const ENDPOINTS_DESC: &str = "The set of all endpoints is the union of all subsets. Addresses are placed into subsets according to the IPs they share. A single address with multiple ports, some of which are ready and some of which are not (because they come from different containers) will result in the address being displayed in different subsets for the different ports. No address will appear in both Addresses and NotReadyAddresses in the same subset. Sets of addresses and ports that comprise a service.";

/// The printers' `formatEndpoints`: the first three ready `ip:port` pairs (bare IPs for a
/// subset without ports), then `+ N more...`; `<none>` without subsets.
fn format_endpoints(v: &Value) -> String {
    let subsets = v["subsets"].as_array().cloned().unwrap_or_default();
    if subsets.is_empty() {
        return "<none>".into();
    }
    const MAX: usize = 3;
    let (mut list, mut count, mut more) = (Vec::new(), 0usize, false);
    for ss in &subsets {
        let addrs: Vec<&str> = ss["addresses"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|x| x["ip"].as_str().unwrap_or_default())
                    .collect()
            })
            .unwrap_or_default();
        let ports = ss["ports"].as_array().cloned().unwrap_or_default();
        let pairs: Vec<String> = if ports.is_empty() {
            addrs.iter().map(|a| (*a).to_owned()).collect()
        } else {
            ports
                .iter()
                .flat_map(|p| {
                    let port = p["port"].as_i64().unwrap_or(0);
                    addrs.iter().map(move |a| {
                        if a.contains(':') {
                            format!("[{a}]:{port}")
                        } else {
                            format!("{a}:{port}")
                        }
                    })
                })
                .collect()
        };
        count += pairs.len();
        for pair in pairs {
            if list.len() == MAX {
                more = true;
                break;
            }
            list.push(pair);
        }
    }
    let ret = list.join(",");
    if more {
        format!("{ret} + {} more...", count - MAX)
    } else {
        ret
    }
}

fn or_none(x: String) -> String {
    if x.is_empty() { "<none>".into() } else { x }
}

/// The cells of one row.
pub fn cells(rt: &ResourceType, v: &Value, now: Timestamp) -> Vec<Value> {
    let name = json!(s(v, "/metadata/name"));
    let created = age(v, "/metadata/creationTimestamp", now);
    match (rt.group, rt.kind) {
        ("coordination.k8s.io", "Lease") => {
            vec![name, json!(s(v, "/spec/holderIdentity")), json!(created)]
        }
        ("", "Pod") => pod_cells(v, name, created),
        ("", "Endpoints") => vec![name, json!(format_endpoints(v)), json!(created)],
        ("", "Service") => {
            let ty = s(v, "/spec/type");
            let ingress: Vec<&str> = v
                .pointer("/status/loadBalancer/ingress")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|i| i["ip"].as_str().or_else(|| i["hostname"].as_str()))
                        .collect()
                })
                .unwrap_or_default();
            let external = if !ingress.is_empty() {
                ingress.join(",")
            } else if ty == "LoadBalancer" {
                "<pending>".into()
            } else {
                "<none>".into()
            };
            let ports: Vec<String> = v
                .pointer("/spec/ports")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .map(|p| match p["nodePort"].as_i64() {
                            Some(np) => format!(
                                "{}:{}/{}",
                                p["port"],
                                np,
                                p["protocol"].as_str().unwrap_or("TCP")
                            ),
                            None => {
                                format!("{}/{}", p["port"], p["protocol"].as_str().unwrap_or("TCP"))
                            }
                        })
                        .collect()
                })
                .unwrap_or_default();
            let selector: Vec<String> = v
                .pointer("/spec/selector")
                .and_then(Value::as_object)
                .map(|m| {
                    m.iter()
                        .map(|(k, x)| format!("{k}={}", x.as_str().unwrap_or_default()))
                        .collect()
                })
                .unwrap_or_default();
            vec![
                name,
                json!(ty),
                json!(or_none(s(v, "/spec/clusterIP").to_owned())),
                json!(external),
                json!(or_none(ports.join(","))),
                json!(created),
                json!(or_none(selector.join(","))),
            ]
        }
        ("", "Namespace") => vec![name, json!(s(v, "/status/phase")), json!(created)],
        ("", "ConfigMap") => {
            let n = ["data", "binaryData"]
                .iter()
                .map(|k| v[k].as_object().map_or(0, |m| m.len()))
                .sum::<usize>();
            vec![name, json!(n), json!(created)]
        }
        ("", "Secret") => {
            let n = v["data"].as_object().map_or(0, |m| m.len());
            vec![name, json!(s(v, "/type")), json!(n), json!(created)]
        }
        ("discovery.k8s.io", "EndpointSlice") => {
            let ports: Vec<String> = v["ports"]
                .as_array()
                .map(|a| a.iter().map(|p| p["port"].to_string()).collect())
                .unwrap_or_default();
            let eps: Vec<&str> = v["endpoints"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .flat_map(|e| {
                            e["addresses"]
                                .as_array()
                                .into_iter()
                                .flatten()
                                .filter_map(Value::as_str)
                        })
                        .collect()
                })
                .unwrap_or_default();
            let shown = if eps.len() > 3 {
                format!("{} + {} more...", eps[..3].join(","), eps.len() - 3)
            } else {
                eps.join(",")
            };
            vec![
                name,
                json!(s(v, "/addressType")),
                json!(or_none(ports.join(","))),
                json!(or_none(shown)),
                json!(created),
            ]
        }
        ("", "Event") => {
            let last = if v.pointer("/lastTimestamp").is_some_and(|x| !x.is_null()) {
                age(v, "/lastTimestamp", now)
            } else {
                age(v, "/eventTime", now)
            };
            let obj = format!(
                "{}/{}",
                s(v, "/involvedObject/kind").to_lowercase(),
                s(v, "/involvedObject/name")
            );
            vec![
                json!(last),
                json!(s(v, "/type")),
                json!(s(v, "/reason")),
                json!(obj),
                json!(s(v, "/message")),
            ]
        }
        _ => vec![name, json!(s(v, "/metadata/creationTimestamp"))],
    }
}

fn pod_cells(v: &Value, name: Value, created: String) -> Vec<Value> {
    let total = v
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    let statuses = v
        .pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let ready = statuses
        .iter()
        .filter(|c| c["ready"].as_bool() == Some(true))
        .count();
    let restarts: i64 = statuses
        .iter()
        .map(|c| c["restartCount"].as_i64().unwrap_or(0))
        .sum();
    let mut reason = s(v, "/status/reason").to_owned();
    if reason.is_empty() {
        reason = s(v, "/status/phase").to_owned();
    }
    for c in &statuses {
        if let Some(w) = c.pointer("/state/waiting/reason").and_then(Value::as_str) {
            reason = w.to_owned();
        } else if let Some(t) = c
            .pointer("/state/terminated/reason")
            .and_then(Value::as_str)
        {
            reason = t.to_owned();
        }
    }
    if v.pointer("/metadata/deletionTimestamp")
        .is_some_and(|d| !d.is_null())
    {
        reason = "Terminating".into();
    }
    vec![
        name,
        json!(format!("{ready}/{total}")),
        json!(reason),
        json!(restarts.to_string()),
        json!(created),
        json!(or_none(s(v, "/status/podIP").to_owned())),
        json!(or_none(s(v, "/spec/nodeName").to_owned())),
        json!("<none>"),
        json!("<none>"),
    ]
}

/// The `PartialObjectMetadata` form of an object.
pub fn partial_metadata(v: &Value) -> Value {
    json!({ "kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": v.get("metadata").cloned().unwrap_or(json!({})) })
}

/// One table row.
pub fn row(rt: &ResourceType, v: &Value, now: Timestamp, include: IncludeObject) -> Value {
    let mut r = json!({ "cells": cells(rt, v, now) });
    match include {
        IncludeObject::None => {}
        IncludeObject::Metadata => r["object"] = partial_metadata(v),
        IncludeObject::Object => r["object"] = v.clone(),
    }
    r
}

/// A whole Table; `with_columns` is false for watch events after the first.
pub fn table(
    rt: &ResourceType,
    items: &[Value],
    meta: Value,
    now: Timestamp,
    include: IncludeObject,
    with_columns: bool,
) -> Value {
    let mut t = json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": meta,
        "rows": items.iter().map(|v| row(rt, v, now, include)).collect::<Vec<_>>(),
    });
    t["columnDefinitions"] = if with_columns {
        Value::Array(columns(rt))
    } else {
        Value::Null
    };
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::{get, id_of};

    #[test]
    fn human_durations_match_apimachinery() {
        assert_eq!(human_duration(5), "5s");
        assert_eq!(human_duration(119), "119s");
        assert_eq!(human_duration(120), "2m");
        assert_eq!(human_duration(125), "2m5s");
        assert_eq!(human_duration(3600 * 5 + 60), "5h1m");
        assert_eq!(human_duration(3600 * 30), "30h");
        assert_eq!(human_duration(86400 * 3), "3d");
        assert_eq!(human_duration(-5), "<invalid>");
    }

    #[test]
    fn lease_rows_show_the_holder() {
        let rt = get(id_of("coordination.k8s.io", "leases"));
        let now: Timestamp = "2026-11-22T10:05:00Z".parse().unwrap();
        let v = json!({"metadata": {"name": "l", "creationTimestamp": "2026-11-22T10:00:00Z"}, "spec": {"holderIdentity": "pod-0"}});
        assert_eq!(
            cells(rt, &v, now),
            vec![json!("l"), json!("pod-0"), json!("5m")]
        );
        let t = table(
            rt,
            &[v],
            json!({"resourceVersion": "5"}),
            now,
            IncludeObject::Metadata,
            true,
        );
        assert_eq!(t["columnDefinitions"][1]["name"], "Holder");
        assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
    }

    #[test]
    fn pod_rows_show_readiness_and_terminating() {
        let rt = get(id_of("", "pods"));
        let now: Timestamp = "2026-11-22T10:00:10Z".parse().unwrap();
        let v = json!({"metadata": {"name": "p", "creationTimestamp": "2026-11-22T10:00:00Z", "deletionTimestamp": "2026-11-22T10:01:00Z"},
            "spec": {"containers": [{"name": "c"}]},
            "status": {"phase": "Running", "containerStatuses": [{"ready": true, "restartCount": 2}]}});
        let c = cells(rt, &v, now);
        assert_eq!(c[1], "1/1");
        assert_eq!(c[2], "Terminating");
        assert_eq!(c[3], "2");
    }
}
