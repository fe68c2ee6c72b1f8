//! What in-cluster clients need besides Leases (issue 33): v1 Endpoints — served, validated
//! and printed like kube-apiserver's, and maintained from Services and pods by the fake
//! kubelet's endpoints controller as kube-controller-manager's does (gnmic's Kubernetes locker
//! finds its members there) — and HTTPS with a generated CA, in the kubeconfig and in a
//! service-account directory (client-go's in-cluster configuration). `gnmic.rs` runs a real
//! gnmic on both.
//!
//! The Endpoints tests run on both tiers (on a real apiserver with no controller-manager the
//! fake kubelet's loop is the only endpoints controller, as with EndpointSlices); the HTTPS and
//! `loopback_endpoints` ones are the simulator's options.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Endpoints, Pod, Service};
use kube::api::{Api, DeleteParams, PostParams};
use kube_sim::testkit::{self as common, eventually};
use kube_sim::{SimOptions, sim_only};
use serde_json::{Value, json};

const EPS: &str = "/api/v1/namespaces/{ns}/endpoints";
const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json";
const DEPRECATED: &str =
    "299 - \"v1 Endpoints is deprecated in v1.33+; use discovery.k8s.io/v1 EndpointSlice\"";

fn endpoints(name: &str, ip: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Endpoints",
        "metadata": { "name": name },
        "subsets": [{ "addresses": [{ "ip": ip }], "ports": [{ "name": "api", "port": 7890 }] }]
    })
}

async fn send(t: &common::TestSim, method: &str, path: &str, body: &Value) -> (u16, Value) {
    t.raw(
        method,
        path,
        Some("application/json"),
        serde_json::to_vec(body).unwrap(),
    )
    .await
}

#[tokio::test]
async fn endpoints_are_served_validated_printed_and_watched_by_name() {
    let t = common::start().await;

    // Discovery (kubectl api-resources).
    let out = t.kubectl(&["api-resources", "--no-headers"]).await;
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>()
                == ["endpoints", "ep", "v1", "true", "Endpoints"]),
        "{text}"
    );

    // Create: 201, the protocol defaulted, the deprecation warning.
    let (code, headers, created) = t
        .raw_with_headers(
            "POST",
            EPS,
            &[("content-type", "application/json")],
            serde_json::to_vec(&endpoints("web", "10.1.2.3")).unwrap(),
        )
        .await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(created["subsets"][0]["ports"][0]["protocol"], "TCP");
    assert!(created["metadata"].get("generation").is_none());
    let warnings: Vec<&str> = headers
        .get_all("warning")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    assert_eq!(warnings, [DEPRECATED]);

    // Validation, with kube-apiserver's messages.
    let (code, err) = send(&t, "POST", EPS, &endpoints("lo", "127.0.0.1")).await;
    assert_eq!(code, 422, "{err}");
    assert_eq!(
        err["message"],
        "Endpoints \"lo\" is invalid: subsets[0].addresses[0].ip: Invalid value: \"127.0.0.1\": may not be in the loopback range (127.0.0.0/8, ::1/128)"
    );
    let bad = json!({
        "apiVersion": "v1", "kind": "Endpoints", "metadata": { "name": "bad" },
        "subsets": [
            { "ports": [{ "port": 80 }] },
            { "addresses": [{ "ip": "169.254.1.1" }], "ports": [{ "name": "a", "port": 0 }, { "port": 81, "protocol": "HTTP" }] }
        ]
    });
    let (code, err) = send(&t, "POST", EPS, &bad).await;
    assert_eq!(code, 422, "{err}");
    let causes: Vec<(String, String)> = err["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["field"].as_str().unwrap().to_owned(),
                c["message"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    for (field, message) in [
        (
            "subsets[0]",
            "Required value: must specify `addresses` or `notReadyAddresses`",
        ),
        (
            "subsets[1].addresses[0].ip",
            "Invalid value: \"169.254.1.1\": may not be in the link-local range (169.254.0.0/16, fe80::/10)",
        ),
        (
            "subsets[1].ports[0].port",
            "Invalid value: 0: must be between 1 and 65535, inclusive",
        ),
        ("subsets[1].ports[1].name", "Required value"),
        (
            "subsets[1].ports[1].protocol",
            "Unsupported value: \"HTTP\": supported values: \"SCTP\", \"TCP\", \"UDP\"",
        ),
    ] {
        assert!(
            causes.iter().any(|(f, m)| f == field && m == message),
            "{field}: {message} in {causes:#?}"
        );
    }

    // PUT to a missing Endpoints creates it (the strategy allows create-on-update).
    let (code, put) = send(
        &t,
        "PUT",
        &format!("{EPS}/made-by-put"),
        &endpoints("made-by-put", "10.1.2.4"),
    )
    .await;
    assert_eq!(code, 201, "{put}");

    // The printers' column.
    let (code, _, table) = t
        .raw_with_headers("GET", &format!("{EPS}/web"), &[("accept", TABLE)], vec![])
        .await;
    assert_eq!(code, 200, "{table}");
    assert_eq!(table["columnDefinitions"][1]["name"], "Endpoints");
    assert_eq!(table["rows"][0]["cells"][1], "10.1.2.3:7890");
    let out = t.kubectl(&["get", "endpoints", "web"]).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(stdout.contains("10.1.2.3:7890"), "{stdout}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("v1 Endpoints is deprecated"),
        "kubectl prints the warning: {out:?}"
    );

    // gnmic's watch: one Endpoints by name, with a timeout, from no resourceVersion.
    let api: Api<Endpoints> = Api::namespaced(t.client.clone(), &t.ns);
    let watch = format!("{EPS}?watch=true&fieldSelector=metadata.name%3Dweb&timeoutSeconds=3");
    let writer = {
        let api = api.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let mut ep = api.get("web").await.unwrap();
            ep.subsets.as_mut().unwrap()[0]
                .addresses
                .as_mut()
                .unwrap()
                .push(serde_json::from_value(json!({ "ip": "10.1.2.5" })).unwrap());
            api.replace("web", &PostParams::default(), &ep)
                .await
                .unwrap();
            let other = serde_json::from_value(endpoints("other", "10.9.9.9")).unwrap();
            api.create(&PostParams::default(), &other).await.unwrap();
        })
    };
    let events = t.watch_events(&watch, &[], 2, Duration::from_secs(5)).await;
    writer.await.unwrap();
    let seen: Vec<(String, usize)> = events
        .iter()
        .map(|e| {
            (
                e["type"].as_str().unwrap_or_default().to_owned(),
                e["object"]["subsets"][0]["addresses"]
                    .as_array()
                    .map_or(0, Vec::len),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [("ADDED".to_owned(), 1), ("MODIFIED".to_owned(), 2)],
        "{events:#?}"
    );
    assert!(
        events
            .iter()
            .all(|e| e["object"]["metadata"]["name"] == "web"),
        "{events:#?}"
    );
}

#[tokio::test]
async fn loopback_endpoints_is_a_simulator_option() {
    sim_only!("SimOptions::loopback_endpoints");
    let t = common::start_with(SimOptions {
        loopback_endpoints: true,
        ..SimOptions::default()
    })
    .await;
    let (code, created) = send(&t, "POST", EPS, &endpoints("lo", "127.0.0.2")).await;
    assert_eq!(code, 201, "{created}");
    // Only the loopback rule is relaxed.
    let (code, err) = send(&t, "POST", EPS, &endpoints("ll", "169.254.0.9")).await;
    assert_eq!(code, 422, "{err}");
    let (code, err) = send(&t, "POST", EPS, &endpoints("un", "0.0.0.0")).await;
    assert_eq!(code, 422, "{err}");
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .contains("may not be unspecified (0.0.0.0)"),
        "{err}"
    );
}

fn scheduled_pod(name: &str, app: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": name, "labels": { "app": app } },
        "spec": {
            "nodeName": kube_sim::kubelet::NODE_NAME,
            "terminationGracePeriodSeconds": 0,
            "containers": [{ "name": "app", "image": "example/app:1",
                             "ports": [{ "name": "http", "containerPort": 8080 }] }]
        }
    }))
    .unwrap()
}

/// The addresses and not-ready addresses of an Endpoints, as (pod name, ip) lists, and its ports.
type Members = (Vec<(String, String)>, Vec<(String, String)>, Value);

fn members(ep: &Endpoints) -> Members {
    let v = serde_json::to_value(ep).unwrap();
    let list = |k: &str| -> Vec<(String, String)> {
        v["subsets"][0][k]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|x| {
                        (
                            x["targetRef"]["name"].as_str().unwrap_or_default().into(),
                            x["ip"].as_str().unwrap_or_default().into(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    (
        list("addresses"),
        list("notReadyAddresses"),
        v["subsets"][0]["ports"].clone(),
    )
}

#[tokio::test]
async fn the_endpoints_controller_follows_services_and_pods() {
    let mut t = common::start().await;
    let svcs: Api<Service> = Api::namespaced(t.client.clone(), &t.ns);
    let pods: Api<Pod> = Api::namespaced(t.client.clone(), &t.ns);
    let eps: Api<Endpoints> = Api::namespaced(t.client.clone(), &t.ns);
    let svc = |name: &str, selector: Option<Value>| -> Service {
        let mut spec = json!({ "ports": [{ "name": "web", "port": 80, "targetPort": "http" }] });
        if let Some(s) = selector {
            spec["selector"] = s;
        }
        serde_json::from_value(
            json!({ "metadata": { "name": name, "labels": { "tier": "front" } }, "spec": spec }),
        )
        .unwrap()
    };
    svcs.create(
        &PostParams::default(),
        &svc("web", Some(json!({ "app": "web" }))),
    )
    .await
    .unwrap();
    // A Service without a selector: its Endpoints are its users'.
    svcs.create(&PostParams::default(), &svc("manual", None))
        .await
        .unwrap();
    eps.create(
        &PostParams::default(),
        &serde_json::from_value(endpoints("manual", "10.1.1.1")).unwrap(),
    )
    .await
    .unwrap();
    for n in ["web-0", "web-1"] {
        pods.create(&PostParams::default(), &scheduled_pod(n, "web"))
            .await
            .unwrap();
    }
    pods.create(&PostParams::default(), &scheduled_pod("other", "other"))
        .await
        .unwrap();
    t.spawn_kubelet();

    let wait = |what: &'static str, f: fn(&Members) -> bool| {
        let eps = eps.clone();
        async move {
            eventually(Duration::from_secs(10), || async {
                let ep = eps.get_opt("web").await.ok()??;
                let m = members(&ep);
                f(&m).then_some((ep, m))
            })
            .await
            .unwrap_or_else(|| panic!("Endpoints web never {what}"))
        }
    };
    let (ep, (ready, not_ready, ports)) = wait("listed both pods", |m| m.0.len() == 2).await;
    assert_eq!(
        ready
            .iter()
            .map(|(n, _)| n.as_str())
            .collect::<Vec<_>>()
            .len(),
        2
    );
    let mut by_ip = ready.clone();
    by_ip.sort_by(|a, b| a.1.cmp(&b.1));
    assert_eq!(ready, by_ip, "addresses sorted by IP");
    assert!(not_ready.is_empty());
    assert_eq!(
        ports,
        json!([{ "name": "web", "port": 8080, "protocol": "TCP" }]),
        "the named targetPort resolved against the pod's container port"
    );
    let labels = ep.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.get("tier").map(String::as_str), Some("front"));
    assert_eq!(
        labels
            .get("endpoints.kubernetes.io/managed-by")
            .map(String::as_str),
        Some("endpoint-controller")
    );
    // Settled: the loop rewrites nothing while nothing changes.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(
        eps.get("web").await.unwrap().metadata.resource_version,
        ep.metadata.resource_version,
        "the endpoints loop keeps rewriting an unchanged Endpoints"
    );
    let v = serde_json::to_value(&ep).unwrap();
    let addr = &v["subsets"][0]["addresses"][0];
    assert_eq!(addr["targetRef"]["kind"], "Pod");
    assert_eq!(addr["targetRef"]["namespace"], json!(t.ns));
    assert_eq!(addr["nodeName"], kube_sim::kubelet::NODE_NAME);

    // A pod that is not ready moves to notReadyAddresses (gnmic then drops the member).
    kube_sim::kubelet::set_ready(&t.client, &t.ns, "web-1", false)
        .await
        .unwrap();
    let (_, (ready, not_ready, _)) = wait("moved web-1 to notReadyAddresses", |m| {
        m.0.len() == 1 && m.1.len() == 1
    })
    .await;
    assert_eq!(ready[0].0, "web-0");
    assert_eq!(not_ready[0].0, "web-1");

    // A deleted pod leaves.
    kube_sim::kubelet::crash(&t.client, &t.ns, "web-0")
        .await
        .unwrap();
    wait("dropped the deleted web-0", |m| {
        m.0.is_empty() && m.1.len() == 1
    })
    .await;

    // The Service deleted: its Endpoints go; the selector-less Service's stay as written.
    svcs.delete("web", &DeleteParams::default()).await.unwrap();
    let gone = eventually(Duration::from_secs(10), || async {
        matches!(eps.get_opt("web").await, Ok(None)).then_some(())
    })
    .await;
    assert!(gone.is_some(), "Endpoints web outlived its Service");
    let manual = eps.get("manual").await.unwrap();
    assert_eq!(
        members(&manual).0,
        [(String::new(), "10.1.1.1".to_owned())],
        "untouched"
    );
}

#[tokio::test]
async fn https_with_a_generated_ca_for_kube_rs_kubectl_and_in_cluster_clients() {
    sim_only!("SimOptions::tls");
    // No anonymous access: every request below must carry the token, which client-go sends
    // only over HTTPS.
    let t = common::start_with(SimOptions {
        tls: true,
        anonymous: false,
        ..SimOptions::default()
    })
    .await;
    let sim = t.sim();
    assert!(t.url().starts_with("https://127.0.0.1:"), "{}", t.url());
    let kc: Value = serde_json::from_str(&t.kubeconfig_text()).unwrap();
    let ca_data = kc["clusters"][0]["cluster"]["certificate-authority-data"]
        .as_str()
        .expect("certificate-authority-data");
    let ca = sim.ca_pem().expect("the CA");
    use base64::Engine as _;
    assert_eq!(
        base64::engine::general_purpose::STANDARD
            .decode(ca_data)
            .unwrap(),
        ca.as_bytes()
    );

    // kube-rs and kubectl, with the kubeconfig.
    let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(t.client.clone());
    assert!(nss.get("default").await.is_ok());
    let out = t
        .kubectl(&["get", "namespace", "default", "-o", "name"])
        .await;
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "namespace/default"
    );
    let out = t
        .kubectl(&["auth", "can-i", "delete", "leases.coordination.k8s.io"])
        .await;
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "yes",
        "{out:?}"
    );

    // The in-cluster layout: token, ca.crt, namespace; and the variables kubelet sets.
    let dir = tempfile::tempdir().unwrap();
    let sa = dir.path().join("sa");
    sim.write_service_account(&sa, kube_sim::auth::DEFAULT_ADMIN_TOKEN)
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(sa.join("token")).unwrap(),
        kube_sim::auth::DEFAULT_ADMIN_TOKEN
    );
    assert_eq!(std::fs::read_to_string(sa.join("ca.crt")).unwrap(), ca);
    assert_eq!(
        std::fs::read_to_string(sa.join("namespace")).unwrap(),
        "default"
    );
    let env = sim.in_cluster_env();
    assert_eq!(env[0], ("KUBERNETES_SERVICE_HOST", "127.0.0.1".to_owned()));
    assert_eq!(env[1].1, t.addr().port().to_string());

    // A client configured from those files alone, as client-go's InClusterConfig is (CA file,
    // token file, https://HOST:PORT) — once by IP, once by a DNS name of the certificate.
    for host in ["127.0.0.1", "localhost"] {
        let kubeconfig = json!({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{ "name": "c", "cluster": {
                "server": format!("https://{host}:{}", env[1].1),
                "certificate-authority": sa.join("ca.crt"),
            } }],
            "users": [{ "name": "u", "user": { "tokenFile": sa.join("token") } }],
            "contexts": [{ "name": "c", "context": { "cluster": "c", "user": "u" } }],
            "current-context": "c",
        });
        let kc: kube::config::Kubeconfig = serde_json::from_value(kubeconfig).unwrap();
        let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
            .await
            .unwrap();
        let client = kube::Client::try_from(cfg).unwrap();
        let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client);
        nss.get("kube-system")
            .await
            .unwrap_or_else(|e| panic!("in-cluster style client via {host}: {e}"));
    }

    // Plain HTTP to the HTTPS port gets no API answer.
    let plain = tokio::time::timeout(Duration::from_secs(5), async {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let mut s = tokio::net::TcpStream::connect(t.addr()).await.unwrap();
        s.write_all(b"GET /api HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut buf = Vec::new();
        let _ = s.read_to_end(&mut buf).await;
        buf
    })
    .await
    .unwrap_or_default();
    assert!(!String::from_utf8_lossy(&plain).contains("APIVersions"));
}
