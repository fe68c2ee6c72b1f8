//! Scrape targets from a Service's EndpointSlices, with real agents: the target list names a
//! Service and a port (`endpoints:`) instead of listing pods; the control plane expands it from
//! the EndpointSlices it watches, and each `leasehold agent --scrape-sd-listen` process derives
//! what it serves at `/sd` from the keys of the targets its member holds and the entry in its
//! target list file — it watches nothing. Checked against what the agents serve: every ready
//! endpoint served once, by one member, with the entry's job and labels and the Service's and
//! pod's names; an endpoint turning unready, a slice going, and a new slice (IPv6) followed.
//! The slices are written by the test (no Service object: on the real tier no controller may
//! rewrite them), as the EndpointSlice controller would write them.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::{Value, json};

use crate::common::cluster::*;
use crate::common::eventually;
use crate::common::scrape::{free_addr, get_json};

/// An EndpointSlice of Service `web` with port `metrics` (9100): `(address, ready, pod)`.
fn slice(name: &str, family: &str, endpoints: &[(&str, bool, &str)]) -> EndpointSlice {
    let endpoints: Vec<Value> = endpoints
        .iter()
        .map(|(address, ready, pod)| {
            json!({"addresses": [address],
                "conditions": {"ready": ready, "serving": ready, "terminating": false},
                "targetRef": {"kind": "Pod", "name": pod}})
        })
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": name, "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": family,
        "ports": [{"name": "metrics", "port": 9100, "protocol": "TCP"},
                  {"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": endpoints,
    }))
    .unwrap()
}

/// Address → (the members serving it, the labels of its group) over the agents' `/sd`.
async fn served(sds: &[(&str, String)]) -> Option<BTreeMap<String, (Vec<String>, Value)>> {
    let mut out: BTreeMap<String, (Vec<String>, Value)> = BTreeMap::new();
    for (member, url) in sds {
        for group in get_json(url).await?.as_array()? {
            let address = group["targets"][0].as_str()?.to_owned();
            let e = out.entry(address).or_default();
            e.0.push((*member).to_owned());
            e.1 = group["labels"].clone();
        }
    }
    Some(out)
}

/// Waits until the agents serve exactly `want` (addresses), each by one member.
async fn serving_exactly(
    h: &Harness,
    sds: &[(&str, String)],
    want: &[&str],
) -> BTreeMap<String, (Vec<String>, Value)> {
    let got = eventually(Duration::from_secs(30), || async {
        let s = served(sds).await?;
        let addresses: Vec<&str> = s.keys().map(String::as_str).collect();
        (addresses == want && s.values().all(|(by, _)| by.len() == 1)).then_some(s)
    })
    .await;
    match got {
        Some(s) => s,
        None => panic!(
            "the agents never served exactly {want:?}: they serve {:?}; the control plane's \
             targets: {:?}, error {:?}; {}",
            served(sds).await,
            h.model()
                .targets
                .iter()
                .map(|t| (t.key.to_string(), t.owner.clone()))
                .collect::<Vec<_>>(),
            h.model().targets_error,
            h.diagnosis(20)
        ),
    }
}

#[tokio::test]
async fn agents_serve_the_ready_endpoints_of_a_service_and_follow_its_slices() {
    let dir = tempfile::tempdir().unwrap();
    let entry = "{endpoints: {service: web, port: metrics, \
                 scrape: {job: web, labels: {team: a}, metrics_path: /m}}}"
        .to_owned();
    let (mut h, targets_file) = managed_harness(&[entry], dir.path()).await;
    let slices: Api<EndpointSlice> = Api::namespaced(h.t.client.clone(), &h.ns);
    let pp = PostParams::default();
    slices
        .create(
            &pp,
            &slice(
                "web-a",
                "IPv4",
                &[
                    ("10.1.0.1", true, "web-0"),
                    ("10.1.0.2", true, "web-1"),
                    ("10.1.0.3", false, "web-2"),
                ],
            ),
        )
        .await
        .unwrap();
    let mut sds = Vec::new();
    for m in ["c-0", "c-1"] {
        let sd = free_addr();
        h.add_scrape_member(m, sd, &targets_file, None).await;
        sds.push((m, format!("http://{sd}/sd")));
    }
    h.wait_pods_ready(2).await;
    h.wait_registered(&["c-0", "c-1"]).await;
    h.start_engine("cp-a").await;

    // The two ready endpoints, each served by one member, with what the entry says and the
    // Service's and pod's names; not the unready one.
    let s = serving_exactly(&h, &sds, &["10.1.0.1:9100", "10.1.0.2:9100"]).await;
    let labels = &s["10.1.0.1:9100"].1;
    for (name, value) in [
        ("job", "web"),
        ("team", "a"),
        ("__metrics_path__", "/m"),
        ("service", "web"),
        ("pod", "web-0"),
        ("leasehold_target", "web/web-0/10.1.0.1:9100"),
    ] {
        assert_eq!(labels[name], value, "{name}: {labels}");
    }
    let keys: Vec<String> = h
        .model()
        .targets
        .iter()
        .map(|t| t.key.to_string())
        .collect();
    assert_eq!(keys, ["web/web-0/10.1.0.1:9100", "web/web-1/10.1.0.2:9100"]);

    // web-1 turns unready, web-2 ready: the targets follow.
    let mut a = slices.get("web-a").await.unwrap();
    a.endpoints[1].conditions.as_mut().unwrap().ready = Some(false);
    a.endpoints[2].conditions.as_mut().unwrap().ready = Some(true);
    slices.replace("web-a", &pp, &a).await.unwrap();
    serving_exactly(&h, &sds, &["10.1.0.1:9100", "10.1.0.3:9100"]).await;

    // A second slice, IPv6: its endpoint is served in brackets.
    slices
        .create(&pp, &slice("web-b", "IPv6", &[("fd00::7", true, "web-3")]))
        .await
        .unwrap();
    let s = serving_exactly(
        &h,
        &sds,
        &["10.1.0.1:9100", "10.1.0.3:9100", "[fd00::7]:9100"],
    )
    .await;
    assert_eq!(
        s["[fd00::7]:9100"].1["leasehold_target"],
        "web/web-3/[fd00::7]:9100"
    );

    // The first slice goes: only the second's endpoint is left.
    slices
        .delete("web-a", &DeleteParams::default())
        .await
        .unwrap();
    serving_exactly(&h, &sds, &["[fd00::7]:9100"]).await;
    let m = h.model();
    assert_eq!(m.targets_error, None);
    assert_eq!(m.targets.len(), 1, "the gone targets' Leases deleted");
    h.finish().await;
}
