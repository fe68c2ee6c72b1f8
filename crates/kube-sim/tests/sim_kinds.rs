//! The kinds the simulator serves for installing applications (deploy/): apps/v1 Deployment and
//! StatefulSet, ServiceAccount, PersistentVolumeClaim, RBAC, PodDisruptionBudget and
//! NetworkPolicy — discovery, OpenAPI for kubectl, defaulting, validation with
//! kube-apiserver's messages, and dry runs that store nothing.

use kube_sim::testkit as common;

use serde_json::{Value, json};

fn deployment(name: &str, selector: Value, template_labels: Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "selector": selector,
            "template": {
                "metadata": {"labels": template_labels},
                "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}
            }
        }
    })
}

async fn post(t: &common::TestSim, path: &str, body: &Value) -> (u16, Value) {
    t.raw(
        "POST",
        path,
        Some("application/json"),
        serde_json::to_vec(body).unwrap(),
    )
    .await
}

#[tokio::test]
async fn discovery_lists_the_new_kinds_with_their_short_names() {
    let t = common::start().await;
    let out = t.kubectl(&["api-resources", "--no-headers"]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<Vec<&str>> = text
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    for want in [
        vec!["deployments", "deploy", "apps/v1", "true", "Deployment"],
        vec!["statefulsets", "sts", "apps/v1", "true", "StatefulSet"],
        vec!["serviceaccounts", "sa", "v1", "true", "ServiceAccount"],
        vec![
            "persistentvolumeclaims",
            "pvc",
            "v1",
            "true",
            "PersistentVolumeClaim",
        ],
        vec![
            "poddisruptionbudgets",
            "pdb",
            "policy/v1",
            "true",
            "PodDisruptionBudget",
        ],
        vec![
            "networkpolicies",
            "netpol",
            "networking.k8s.io/v1",
            "true",
            "NetworkPolicy",
        ],
        vec!["roles", "rbac.authorization.k8s.io/v1", "true", "Role"],
        vec![
            "rolebindings",
            "rbac.authorization.k8s.io/v1",
            "true",
            "RoleBinding",
        ],
        vec![
            "clusterroles",
            "rbac.authorization.k8s.io/v1",
            "false",
            "ClusterRole",
        ],
        vec![
            "clusterrolebindings",
            "rbac.authorization.k8s.io/v1",
            "false",
            "ClusterRoleBinding",
        ],
    ] {
        assert!(rows.contains(&want), "{want:?} in\n{text}");
    }
}

#[tokio::test]
async fn explain_reads_the_vendored_openapi_of_the_new_groups() {
    let t = common::start().await;
    for (what, needle) in [
        ("deployment.spec.strategy", "RollingUpdate"),
        (
            "statefulset.spec.volumeClaimTemplates",
            "PersistentVolumeClaim",
        ),
        ("clusterrole.rules", "verbs"),
        ("poddisruptionbudget.spec", "maxUnavailable"),
        ("networkpolicy.spec.policyTypes", "Egress"),
    ] {
        let out = t.kubectl(&["explain", what]).await;
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains(needle),
            "{what}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[tokio::test]
async fn a_dry_run_create_answers_the_defaulted_object_and_stores_nothing() {
    let t = common::start().await;
    let d = deployment(
        "web",
        json!({"matchLabels": {"app": "web"}}),
        json!({"app": "web"}),
    );
    let (code, got) = post(
        &t,
        "/apis/apps/v1/namespaces/default/deployments?dryRun=All",
        &d,
    )
    .await;
    assert_eq!(code, 201, "{got}");
    assert!(got["metadata"]["uid"].is_string());
    assert_eq!(got["metadata"]["generation"], 1);
    assert_eq!(got["spec"]["replicas"], 1);
    assert_eq!(got["spec"]["revisionHistoryLimit"], 10);
    assert_eq!(got["spec"]["progressDeadlineSeconds"], 600);
    assert_eq!(
        got["spec"]["strategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}})
    );
    let pod = &got["spec"]["template"]["spec"];
    assert_eq!(pod["restartPolicy"], "Always");
    assert_eq!(pod["containers"][0]["imagePullPolicy"], "IfNotPresent");
    let (code, _) = t
        .raw(
            "GET",
            "/apis/apps/v1/namespaces/default/deployments/web",
            None,
            vec![],
        )
        .await;
    assert_eq!(code, 404, "the dry run stored nothing");

    // A real create stores it; kubectl lists it.
    let (code, _) = post(&t, "/apis/apps/v1/namespaces/default/deployments", &d).await;
    assert_eq!(code, 201);
    let out = t.kubectl(&["get", "deploy", "-o", "name"]).await;
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "deployment.apps/web\n"
    );

    // StatefulSets: their own defaults, claims included.
    let sts = json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "db"},
        "spec": {
            "serviceName": "db",
            "selector": {"matchLabels": {"app": "db"}},
            "template": {"metadata": {"labels": {"app": "db"}},
                         "spec": {"containers": [{"name": "db", "image": "db:1"}]}},
            "volumeClaimTemplates": [{"metadata": {"name": "data"},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]
        }
    });
    let (code, got) = post(
        &t,
        "/apis/apps/v1/namespaces/default/statefulsets?dryRun=All",
        &sts,
    )
    .await;
    assert_eq!(code, 201, "{got}");
    assert_eq!(got["spec"]["podManagementPolicy"], "OrderedReady");
    assert_eq!(
        got["spec"]["updateStrategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}})
    );
    assert_eq!(
        got["spec"]["volumeClaimTemplates"][0]["spec"]["volumeMode"],
        "Filesystem"
    );
}

/// POSTs `body` and returns the Status message of the 422.
async fn invalid(t: &common::TestSim, path: &str, body: Value) -> String {
    let (code, got) = post(t, path, &body).await;
    assert_eq!(code, 422, "{got}");
    assert_eq!(got["reason"], "Invalid");
    got["message"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn invalid_objects_are_refused_with_kube_apiservers_messages() {
    let t = common::start().await;
    let deploys = "/apis/apps/v1/namespaces/default/deployments?dryRun=All";
    let msg = invalid(
        &t,
        deploys,
        deployment(
            "web",
            json!({"matchLabels": {"app": "web"}}),
            json!({"app": "other"}),
        ),
    )
    .await;
    assert_eq!(
        msg,
        "Deployment.apps \"web\" is invalid: spec.template.metadata.labels: Invalid value: \
         map[string]string{\"app\":\"other\"}: `selector` does not match template `labels`"
    );
    let mut no_selector = deployment("web", json!(null), json!({"app": "web"}));
    no_selector["spec"]
        .as_object_mut()
        .unwrap()
        .remove("selector");
    no_selector["spec"]["template"]["spec"]["containers"][0]
        .as_object_mut()
        .unwrap()
        .remove("image");
    let msg = invalid(&t, deploys, no_selector).await;
    assert_eq!(
        msg,
        "Deployment.apps \"web\" is invalid: [spec.selector: Required value, \
         spec.template.metadata.labels: Invalid value: map[string]string{\"app\":\"web\"}: \
         `selector` does not match template `labels`, \
         spec.template.spec.containers[0].image: Required value]"
    );

    let msg = invalid(
        &t,
        "/apis/apps/v1/namespaces/default/statefulsets",
        json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "Db"},
               "spec": {"selector": {"matchLabels": {"app": "db"}},
                        "template": {"metadata": {"labels": {"app": "db"}},
                                     "spec": {"containers": [{"name": "db", "image": "db:1"}]}}}}),
    )
    .await;
    assert!(
        msg.starts_with("StatefulSet.apps \"Db\" is invalid: metadata.name: Invalid value: \"Db\": a lowercase RFC 1123 label"),
        "{msg}"
    );

    let rbac = "/apis/rbac.authorization.k8s.io/v1";
    let msg = invalid(
        &t,
        &format!("{rbac}/namespaces/default/roles"),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "r"},
               "rules": [{"apiGroups": [""], "resources": ["pods"]}]}),
    )
    .await;
    assert_eq!(
        msg,
        "Role.rbac.authorization.k8s.io \"r\" is invalid: rules[0].verbs: Required value: verbs must contain at least one value"
    );
    let msg = invalid(
        &t,
        &format!("{rbac}/namespaces/default/rolebindings"),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "b"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Secret", "name": "r"},
               "subjects": [{"kind": "ServiceAccount", "name": "sa"}]}),
    )
    .await;
    assert_eq!(
        msg,
        "RoleBinding.rbac.authorization.k8s.io \"b\" is invalid: roleRef.kind: Unsupported value: \"Secret\": supported values: \"Role\", \"ClusterRole\""
    );
    let msg = invalid(
        &t,
        &format!("{rbac}/clusterrolebindings"),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "b"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "r"},
               "subjects": [{"kind": "ServiceAccount", "name": "sa"}]}),
    )
    .await;
    assert_eq!(
        msg,
        "ClusterRoleBinding.rbac.authorization.k8s.io \"b\" is invalid: subjects[0].namespace: Required value"
    );

    let msg = invalid(
        &t,
        "/apis/policy/v1/namespaces/default/poddisruptionbudgets",
        json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "p"},
               "spec": {"minAvailable": 1, "maxUnavailable": 1}}),
    )
    .await;
    assert!(
        msg.starts_with("PodDisruptionBudget.policy \"p\" is invalid: spec: Invalid value: ")
            && msg.ends_with(": minAvailable and maxUnavailable cannot be both set"),
        "{msg}"
    );
    let msg = invalid(
        &t,
        "/api/v1/namespaces/default/persistentvolumeclaims",
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "c"}, "spec": {}}),
    )
    .await;
    assert_eq!(
        msg,
        "PersistentVolumeClaim \"c\" is invalid: [spec.accessModes: Required value: at least 1 access mode is required, spec.resources[storage]: Required value]"
    );
    let msg = invalid(
        &t,
        "/apis/networking.k8s.io/v1/namespaces/default/networkpolicies",
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": "n"},
               "spec": {"podSelector": {}, "policyTypes": ["Sideways"]}}),
    )
    .await;
    assert_eq!(
        msg,
        "NetworkPolicy.networking.k8s.io \"n\" is invalid: spec.policyTypes[0]: Unsupported value: \"Sideways\": supported values: \"Ingress\", \"Egress\""
    );
}

#[tokio::test]
async fn kubectl_typed_creates_send_protobuf_and_work() {
    let t = common::start().await;
    for args in [
        vec![
            "create",
            "deployment",
            "web",
            "--image=nginx:1.27",
            "--replicas=2",
        ],
        vec!["create", "serviceaccount", "robot"],
        vec![
            "create",
            "role",
            "reader",
            "--verb=get,list",
            "--resource=pods",
        ],
        vec![
            "create",
            "rolebinding",
            "reader",
            "--role=reader",
            "--serviceaccount=default:robot",
        ],
        vec![
            "create",
            "clusterrole",
            "watcher",
            "--verb=watch",
            "--resource=leases.coordination.k8s.io",
        ],
        vec![
            "create",
            "poddisruptionbudget",
            "web",
            "--selector=app=web",
            "--min-available=1",
        ],
    ] {
        let out = t.kubectl(&args).await;
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = t
        .kubectl(&[
            "get",
            "deploy/web",
            "-o",
            "jsonpath={.spec.replicas} {.spec.template.spec.containers[0].image}",
        ])
        .await;
    assert_eq!(String::from_utf8_lossy(&out.stdout), "2 nginx:1.27");
    let out = t
        .kubectl(&[
            "get",
            "rolebinding/reader",
            "-o",
            "jsonpath={.subjects[0].namespace}/{.subjects[0].name} {.roleRef.kind}",
        ])
        .await;
    assert_eq!(String::from_utf8_lossy(&out.stdout), "default/robot Role");
    // A dry run through kubectl stores nothing either.
    let out = t
        .kubectl(&[
            "create",
            "deployment",
            "ghost",
            "--image=x:1",
            "--dry-run=server",
        ])
        .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = t.kubectl(&["get", "deploy", "-o", "name"]).await;
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "deployment.apps/web\n"
    );
}

#[tokio::test]
async fn deleting_a_namespace_removes_the_new_kinds_too() {
    let t = common::start().await;
    let out = t.kubectl(&["create", "namespace", "gone"]).await;
    assert!(out.status.success());
    let out = t
        .kubectl(&[
            "-n",
            "gone",
            "create",
            "deployment",
            "web",
            "--image=nginx:1.27",
        ])
        .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = t
        .kubectl(&["delete", "namespace", "gone", "--wait=true"])
        .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (code, _) = t
        .raw(
            "GET",
            "/apis/apps/v1/namespaces/gone/deployments/web",
            None,
            vec![],
        )
        .await;
    assert_eq!(code, 404);
}
