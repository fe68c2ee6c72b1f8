//! Tests of [`Auth`] as the router uses it: mode checks, token mode end to end, and
//! Kubernetes mode against the in-repo simulator.

use std::net::SocketAddr;
use std::time::Duration;

use super::*;
use kube_sim::auth::{AuthTable, Rule, User};
use kube_sim::{SimOptions, Simulator};

fn settings(mode: Mode) -> AuthSettings {
    AuthSettings {
        mode,
        ..AuthSettings::default()
    }
}

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

#[tokio::test]
async fn none_mode_only_on_loopback() {
    for ok in [
        "127.0.0.1:8080",
        "127.10.0.1:80",
        "[::1]:8080",
        "[::ffff:127.0.0.1]:80",
    ] {
        let auth = Auth::new(&settings(Mode::None), addr(ok), None)
            .await
            .unwrap_or_else(|e| panic!("{ok}: {e}"));
        assert_eq!(auth.mode(), Mode::None);
        let anon = auth.anonymous().unwrap();
        assert_eq!(anon.user, ANONYMOUS_USER);
        assert_eq!(
            auth.authenticate("anything").await.unwrap(),
            Some(anon.clone())
        );
        for action in Action::ALL {
            assert!(auth.authorize(&anon, action, Some("c")).await.unwrap());
        }
    }
    for refused in [
        "0.0.0.0:8080",
        "[::]:8080",
        "203.0.113.7:8080",
        "[2001:db8::1]:80",
    ] {
        let e = Auth::new(&settings(Mode::None), addr(refused), None)
            .await
            .err()
            .unwrap_or_else(|| panic!("{refused} accepted"));
        assert!(matches!(e, AuthError::NoneModeNotLoopback { .. }), "{e}");
        let text = e.to_string();
        assert!(
            text.contains("loopback") && text.contains(refused),
            "{text}"
        );
    }
}

#[tokio::test]
async fn settings_that_do_not_fit_are_refused() {
    let local = addr("127.0.0.1:8080");
    let e = Auth::new(&settings(Mode::Token), local, None).await.err();
    assert!(e.unwrap().to_string().contains("token_file"));
    let e = Auth::new(&settings(Mode::Kubernetes), local, None)
        .await
        .err();
    assert!(e.unwrap().to_string().contains("kubernetes"));
    let s = AuthSettings {
        token_file: Some("/tmp/tokens.csv".into()),
        ..settings(Mode::None)
    };
    assert!(Auth::new(&s, local, None).await.is_err());
    let s = AuthSettings {
        session_ttl: Duration::ZERO,
        ..settings(Mode::None)
    };
    assert!(Auth::new(&s, local, None).await.is_err());
}

/// A token file that names nobody (empty, or comments only) would start a server nobody can
/// log in to: start-up stops, naming the file.
#[tokio::test]
async fn a_token_file_without_users_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    for text in ["", "# nobody yet\n\n"] {
        let file = dir.path().join("tokens.csv");
        std::fs::write(&file, text).unwrap();
        let s = AuthSettings {
            token_file: Some(file.clone()),
            ..settings(Mode::Token)
        };
        let e = Auth::new(&s, addr("0.0.0.0:8080"), None)
            .await
            .expect_err("refused")
            .to_string();
        assert!(e.starts_with(&file.display().to_string()), "{e}");
        assert!(e.contains("names no user"), "{e}");
    }
}

#[tokio::test]
async fn token_mode_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tokens.csv");
    std::fs::write(
        &file,
        "# leasehold users\n\
         view-tok,vera,1,leasehold:viewers\n\
         op-tok,otto,2,\"dev,leasehold:operators\"\n\
         admin-tok,ada,3,\"leasehold:admins\"\n\
         none-tok,nemo,4,dev\n",
    )
    .unwrap();
    let s = AuthSettings {
        token_file: Some(file),
        ..settings(Mode::Token)
    };
    let auth = Auth::new(&s, addr("0.0.0.0:8080"), None).await.unwrap();
    assert_eq!(auth.mode(), Mode::Token);
    assert!(auth.anonymous().is_none());
    assert!(!format!("{auth:?}").contains("-tok"));
    assert_eq!(auth.authenticate("").await.unwrap(), None);
    assert_eq!(auth.authenticate("wrong").await.unwrap(), None);

    // Columns: Read, Rebalance, RemoveInstance, Uncordon, CancelOperation.
    let matrix = [
        (
            "view-tok",
            Some(Role::Viewer),
            [true, false, false, false, false],
        ),
        ("op-tok", Some(Role::Operator), [true; 5]),
        ("admin-tok", Some(Role::Admin), [true; 5]),
        ("none-tok", None, [false; 5]),
    ];
    // What a page tells someone who may not: the lowest role that may, and its groups.
    assert_eq!(
        auth.requirement(Action::RemoveInstance, Some("prod")),
        "the operator role or higher (a group of http.auth.roles.operator or admin: \
         leasehold:operators, leasehold:admins, system:masters)"
    );
    assert_eq!(
        auth.requirement(Action::Read, None),
        "the viewer role or higher (a group of http.auth.roles.viewer, operator or admin: \
         leasehold:viewers, leasehold:operators, leasehold:admins, system:masters)"
    );
    for (token, role, row) in matrix {
        let who = auth
            .authenticate(token)
            .await
            .unwrap()
            .expect("known token");
        assert_eq!(auth.role(&who), role, "{}", who.user);
        for (action, allowed) in Action::ALL.into_iter().zip(row) {
            for cluster in [None, Some("prod")] {
                assert_eq!(
                    auth.authorize(&who, action, cluster).await.unwrap(),
                    allowed,
                    "{} {action:?} {cluster:?}",
                    who.user
                );
            }
        }
    }
}

#[tokio::test]
async fn token_mode_reports_a_bad_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tokens.csv");
    std::fs::write(&file, "good,u,1\n\nsecret-tok,user-without-uid\n").unwrap();
    let s = AuthSettings {
        token_file: Some(file.clone()),
        ..settings(Mode::Token)
    };
    let e = Auth::new(&s, addr("0.0.0.0:8080"), None)
        .await
        .err()
        .unwrap();
    let text = e.to_string();
    assert!(
        text.starts_with(&format!("{}:3: ", file.display())),
        "{text}"
    );
    assert!(!text.contains("secret-tok"), "{text}");
}

fn user(token: &str, name: &str, groups: &[&str]) -> User {
    User {
        token: token.into(),
        name: name.into(),
        uid: format!("uid-{name}"),
        groups: groups.iter().map(|g| g.to_string()).collect(),
    }
}

fn rule(subject: &str, verbs: &[&str], resources: &[&str]) -> Rule {
    Rule {
        name: format!("{subject} {verbs:?} {resources:?}"),
        subjects: vec![subject.into()],
        verbs: verbs.iter().map(|v| v.to_string()).collect(),
        api_groups: vec![API_GROUP.into()],
        resources: resources.iter().map(|r| r.to_string()).collect(),
        namespaces: vec![],
    }
}

#[tokio::test]
async fn kubernetes_mode_against_the_simulator() {
    let opts = SimOptions {
        auth: AuthTable {
            users: vec![
                user("alice-token", "alice", &["ops"]),
                user("bob-token", "bob", &[]),
            ],
            rules: vec![
                rule("group:ops", &["get"], &["clusters"]),
                rule("group:ops", &["create"], &["clusters/rebalance"]),
                rule("user:bob", &["get"], &["clusters"]),
            ],
        },
        anonymous: false,
        ..SimOptions::default()
    };
    let sim = Simulator::start(addr("127.0.0.1:0"), opts).await.unwrap();
    let (proxy, link) = kube_sim::testkit::link_proxy(sim.addr()).await;
    let kubeconfig: kube::config::Kubeconfig = serde_json::from_str(
        &sim.kubeconfig()
            .replace(&sim.url(), &format!("http://{proxy}")),
    )
    .unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    let client = kube::Client::try_from(config).unwrap();
    let s = AuthSettings {
        cache_ttl: Duration::from_secs(300),
        ..settings(Mode::Kubernetes)
    };
    let auth = Auth::new(&s, addr("0.0.0.0:8080"), Some(client))
        .await
        .unwrap();
    assert_eq!(auth.mode(), Mode::Kubernetes);
    assert!(auth.anonymous().is_none());

    let alice = auth.authenticate("alice-token").await.unwrap().unwrap();
    assert_eq!(alice.user, "alice");
    assert_eq!(alice.uid, "uid-alice");
    assert!(alice.groups.contains(&"ops".to_owned()), "{alice:?}");
    assert!(alice.groups.contains(&"system:authenticated".to_owned()));
    let bob = auth.authenticate("bob-token").await.unwrap().unwrap();
    assert_eq!(bob.user, "bob");
    assert_eq!(auth.authenticate("mallory-token").await.unwrap(), None);
    assert_eq!(auth.authenticate("").await.unwrap(), None);

    let may = |who: &Principal, action, cluster| {
        let auth = auth.clone();
        let who = who.clone();
        async move { auth.authorize(&who, action, cluster).await.unwrap() }
    };
    assert!(may(&alice, Action::Read, Some("prod")).await);
    assert!(may(&alice, Action::Read, None).await);
    assert!(may(&alice, Action::Rebalance, Some("prod")).await);
    assert!(!may(&alice, Action::RemoveInstance, Some("prod")).await);
    assert!(!may(&alice, Action::CancelOperation, None).await);
    assert!(may(&bob, Action::Read, Some("prod")).await);
    assert!(!may(&bob, Action::Rebalance, Some("prod")).await);
    // What a page tells bob he would need: the rule alice has.
    assert_eq!(
        auth.requirement(Action::Rebalance, Some("prod")),
        "RBAC permission to create clusters/rebalance (name prod) in API group leasehold.io"
    );
    assert_eq!(
        auth.requirement(Action::CancelOperation, None),
        "RBAC permission to create clusters/operations in API group leasehold.io"
    );

    // Cut Leasehold off the API: cached answers (positive and negative) still come, anything
    // new is an infrastructure error, not a denial.
    link.send(kube_sim::testkit::Link::Cut).unwrap();
    assert_eq!(
        auth.authenticate("alice-token").await.unwrap(),
        Some(alice.clone())
    );
    assert_eq!(auth.authenticate("mallory-token").await.unwrap(), None);
    assert!(may(&alice, Action::Rebalance, Some("prod")).await);
    assert!(!may(&bob, Action::Rebalance, Some("prod")).await);
    let e = auth.authenticate("carol-token").await.expect_err("no API");
    assert!(
        matches!(
            e,
            AuthError::Review {
                review: "TokenReview",
                ..
            }
        ),
        "{e}"
    );
    assert!(!e.to_string().contains("carol-token"), "{e}");
    let e = auth
        .authorize(&alice, Action::Uncordon, Some("prod"))
        .await
        .expect_err("no API");
    assert!(
        matches!(
            e,
            AuthError::Review {
                review: "SubjectAccessReview",
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn verb_mapping_is_the_documented_rbac() {
    assert_eq!(verb_and_subresource(Action::Read), ("get", None));
    assert_eq!(
        verb_and_subresource(Action::Rebalance),
        ("create", Some("rebalance"))
    );
    assert_eq!(
        verb_and_subresource(Action::RemoveInstance),
        ("create", Some("instances"))
    );
    assert_eq!(
        verb_and_subresource(Action::Uncordon),
        ("update", Some("instances"))
    );
    assert_eq!(
        verb_and_subresource(Action::CancelOperation),
        ("create", Some("operations"))
    );
}
