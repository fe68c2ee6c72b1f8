//! Service IP and node-port allocation, as kube-apiserver's service registry does it:
//! ClusterIPs from the service CIDR (10.96.0.0/12) unless headless (`clusterIP: None`),
//! node ports from 30000–32767 for NodePort and LoadBalancer Services.

use std::collections::HashSet;
use std::net::Ipv4Addr;

use serde_json::{Value, json};

use super::registry::{self, id_of};
use super::status::{ApiResult, Cause, StatusError};
use super::store::Txn;

/// First address of the service CIDR (10.96.0.0/12); `.1` is the `kubernetes` Service.
const SERVICE_CIDR_BASE: u32 = u32::from_be_bytes([10, 96, 0, 0]);
/// Size of the service CIDR.
const SERVICE_CIDR_SIZE: u32 = 1 << 20;
/// The node-port range.
const NODE_PORTS: std::ops::RangeInclusive<i64> = 30000..=32767;

fn used(txn: &Txn<'_>) -> (HashSet<String>, HashSet<i64>) {
    let mut ips = HashSet::new();
    let mut ports = HashSet::new();
    for s in txn.all(id_of("", "services"), None) {
        let v = s.value();
        if let Some(ip) = v.pointer("/spec/clusterIP").and_then(Value::as_str) {
            ips.insert(ip.to_owned());
        }
        for p in v
            .pointer("/spec/ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(n) = p["nodePort"].as_i64() {
                ports.insert(n);
            }
        }
    }
    (ips, ports)
}

/// Fills `spec.clusterIP(s)`, IP families and node ports of a Service being created.
pub fn allocate(txn: &Txn<'_>, v: &mut Value) -> ApiResult<()> {
    let rt = registry::get(id_of("", "services"));
    let name = v
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let Some(spec) = v.get_mut("spec").and_then(Value::as_object_mut) else {
        return Ok(());
    };
    let ty = spec
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("ClusterIP")
        .to_owned();
    if ty == "ExternalName" {
        return Ok(());
    }
    let (ips, ports) = used(txn);
    let asked = spec
        .get("clusterIP")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let ip = if asked == "None" {
        "None".to_owned()
    } else if !asked.is_empty() {
        let parsed: Option<Ipv4Addr> = asked.parse().ok();
        let in_range = parsed
            .is_some_and(|a| (u32::from(a).wrapping_sub(SERVICE_CIDR_BASE)) < SERVICE_CIDR_SIZE);
        if !in_range {
            return Err(StatusError::invalid(rt, &name, &[Cause::invalid("spec.clusterIPs", &json!(format!("[]string{{{asked:?}}}")), &format!("failed to allocate IP {asked}: the provided IP ({asked}) is not in the valid range. The range of valid IPs is 10.96.0.0/12")).raw()]));
        }
        if ips.contains(&asked) {
            return Err(StatusError::invalid(
                rt,
                &name,
                &[Cause::invalid(
                    "spec.clusterIPs",
                    &json!(format!("[]string{{{asked:?}}}")),
                    &format!("failed to allocate IP {asked}: provided IP is already allocated"),
                )
                .raw()],
            ));
        }
        asked
    } else {
        (1..SERVICE_CIDR_SIZE - 1)
            .map(|i| Ipv4Addr::from(SERVICE_CIDR_BASE + i).to_string())
            .find(|a| !ips.contains(a))
            .ok_or_else(|| StatusError::internal("failed to allocate a serviceIP: range is full"))?
    };
    spec.insert("clusterIP".into(), json!(ip));
    spec.insert("clusterIPs".into(), json!([ip]));
    spec.entry("ipFamilies").or_insert(json!(["IPv4"]));
    spec.entry("ipFamilyPolicy").or_insert(json!("SingleStack"));
    if ty == "NodePort" || ty == "LoadBalancer" {
        let mut taken = ports;
        if let Some(list) = spec.get_mut("ports").and_then(Value::as_array_mut) {
            for p in list.iter_mut().filter_map(Value::as_object_mut) {
                if p.get("nodePort").and_then(Value::as_i64).is_none() {
                    let n = NODE_PORTS
                        .clone()
                        .find(|n| !taken.contains(n))
                        .ok_or_else(|| StatusError::internal("node ports exhausted"))?;
                    taken.insert(n);
                    p.insert("nodePort".into(), json!(n));
                }
            }
        }
    }
    Ok(())
}

/// On update, keeps what was allocated when the new spec leaves it out.
pub fn keep_allocations(old: &Value, new: &mut Value) {
    let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    for k in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
        if !spec.contains_key(k)
            && let Some(x) = old.pointer(&format!("/spec/{k}"))
        {
            spec.insert(k.into(), x.clone());
        }
    }
    let old_ports = old
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if let Some(list) = spec.get_mut("ports").and_then(Value::as_array_mut) {
        for p in list.iter_mut().filter_map(Value::as_object_mut) {
            if p.contains_key("nodePort") {
                continue;
            }
            if let Some(np) = old_ports
                .iter()
                .find(|o| o["port"] == p["port"])
                .and_then(|o| o.get("nodePort"))
            {
                p.insert("nodePort".into(), np.clone());
            }
        }
    }
}

impl Cause {
    /// Prints the value as given (Go's `%#v` of a string slice is not JSON).
    fn raw(mut self) -> Self {
        if let Some(rest) = self.message.strip_prefix("Invalid value: \"") {
            // `Invalid value: "[]string{\"x\"}": …` → `Invalid value: []string{"x"}: …`
            if let Some((v, tail)) = rest.split_once("\": ") {
                self.message = format!("Invalid value: {}: {tail}", v.replace("\\\"", "\""));
            }
        }
        self
    }
}
