//! Smoke test: the simulator starts, kube-rs and kubectl both talk to it.
use kube_sim::testkit as common;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, PostParams};

#[tokio::test]
async fn kube_rs_and_kubectl_see_the_same_lease() {
    let t = common::start().await;
    let leases: Api<Lease> = Api::namespaced(t.client.clone(), &t.ns);
    let lease: Lease = serde_json::from_value(common::mk_lease("smoke", "pod-0")).unwrap();
    let created = leases.create(&PostParams::default(), &lease).await.unwrap();
    assert!(created.metadata.uid.is_some());
    let out = t
        .kubectl(&[
            "get",
            "lease",
            "smoke",
            "-o",
            "jsonpath={.spec.holderIdentity}",
        ])
        .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "pod-0");
}
