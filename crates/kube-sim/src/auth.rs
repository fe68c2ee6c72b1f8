//! Who may call the simulator, and the answers to TokenReview and SubjectAccessReview.
//!
//! A small table stands in for kube-apiserver's token authenticator and RBAC: users with
//! bearer tokens and groups, and rules granting verbs on (group, resource[/subresource]) in
//! namespaces. The same table authorises the simulator's own API requests and answers reviews,
//! so a test can give Leasehold a token that TokenReview knows and SAR judges. Tokens never
//! appear in `Debug` output or logs.

use serde::Deserialize;
use serde_json::{Value, json};

/// The group that may do anything, as in Kubernetes.
pub const MASTERS: &str = "system:masters";
/// The group every authenticated user is in.
pub const AUTHENTICATED: &str = "system:authenticated";
/// The default ClusterRole (and binding) that lets every authenticated user review itself.
const BASIC_USER: &str = "system:basic-user";
/// The API audience: what kube-apiserver defaults `--api-audiences` to, its service-account
/// issuer (kubeadm's, and scripts/envtest.sh's).
pub const API_AUDIENCE: &str = "https://kubernetes.default.svc.cluster.local";
/// The token the simulator writes into its own kubeconfig.
pub const DEFAULT_ADMIN_TOKEN: &str = "leasehold-sim-admin";

/// A user known by bearer token.
#[derive(Clone, Deserialize)]
pub struct User {
    pub token: String,
    pub name: String,
    #[serde(default)]
    pub uid: String,
    #[serde(default)]
    pub groups: Vec<String>,
}

impl std::fmt::Debug for User {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("User")
            .field("name", &self.name)
            .field("groups", &self.groups)
            .finish_non_exhaustive()
    }
}

/// A grant: subjects may do `verbs` on `resources` of `api_groups` in `namespaces`.
/// `*` matches anything; empty `namespaces` means every namespace and cluster scope.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Rule {
    #[serde(default)]
    pub name: String,
    /// `user:<name>` or `group:<name>`.
    pub subjects: Vec<String>,
    pub verbs: Vec<String>,
    #[serde(default)]
    pub api_groups: Vec<String>,
    /// `resource` or `resource/subresource`.
    pub resources: Vec<String>,
    #[serde(default)]
    pub namespaces: Vec<String>,
}

/// The table of users and rules.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct AuthTable {
    #[serde(default)]
    pub users: Vec<User>,
    #[serde(default)]
    pub rules: Vec<Rule>,
}

/// An authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
}

/// What is being asked (SubjectAccessReview `resourceAttributes`).
#[derive(Debug, Clone, Default)]
pub struct Attributes {
    pub verb: String,
    pub group: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
}

impl AuthTable {
    /// A table with one admin user holding `token`.
    pub fn with_admin(token: &str) -> Self {
        Self {
            users: vec![User {
                token: token.to_owned(),
                name: "leasehold-sim-admin".into(),
                uid: "admin".into(),
                groups: vec![MASTERS.into(), AUTHENTICATED.into()],
            }],
            rules: vec![],
        }
    }

    /// Finds the user behind a bearer token (constant-time per comparison).
    pub fn authenticate(&self, token: &str) -> Option<Identity> {
        self.users
            .iter()
            .find(|u| ct_eq(u.token.as_bytes(), token.as_bytes()))
            .map(|u| {
                let mut groups = u.groups.clone();
                if !groups.iter().any(|g| g == AUTHENTICATED) {
                    groups.push(AUTHENTICATED.into());
                }
                Identity {
                    name: u.name.clone(),
                    uid: u.uid.clone(),
                    groups,
                }
            })
    }

    /// Whether `who` may do `what`, and the rule that allowed it.
    pub fn authorize(&self, who: &Identity, what: &Attributes) -> Option<String> {
        if who.groups.iter().any(|g| g == MASTERS) {
            // The apiserver's privileged-group authorizer allows without a reason.
            return Some(String::new());
        }
        // The default `system:basic-user` ClusterRole, bound to every authenticated user: a
        // user may always ask what it may do (`kubectl auth can-i`, `kubectl auth whoami`).
        let basic_user = what.verb == "create"
            && what.subresource.is_empty()
            && matches!(
                (what.group.as_str(), what.resource.as_str()),
                (
                    "authorization.k8s.io",
                    "selfsubjectaccessreviews" | "selfsubjectrulesreviews"
                ) | ("authentication.k8s.io", "selfsubjectreviews")
            );
        if basic_user && who.groups.iter().any(|g| g == AUTHENTICATED) {
            return Some(format!(
                "RBAC: allowed by ClusterRoleBinding \"{BASIC_USER}\" of ClusterRole \"{BASIC_USER}\" to Group \"{AUTHENTICATED}\""
            ));
        }
        let subject_matches = |s: &String| {
            s.strip_prefix("user:").is_some_and(|u| u == who.name)
                || s.strip_prefix("group:")
                    .is_some_and(|g| who.groups.iter().any(|x| x == g))
        };
        let any = |list: &[String], v: &str| list.iter().any(|x| x == "*" || x == v);
        let resource = if what.subresource.is_empty() {
            what.resource.clone()
        } else {
            format!("{}/{}", what.resource, what.subresource)
        };
        self.rules
            .iter()
            .find(|r| {
                r.subjects.iter().any(subject_matches)
                    && any(&r.verbs, &what.verb)
                    && (r.api_groups.is_empty() && what.group.is_empty()
                        || any(&r.api_groups, &what.group))
                    && (any(&r.resources, &resource)
                        || r.resources
                            .iter()
                            .any(|x| x == &format!("{}/*", what.resource)))
                    && (r.namespaces.is_empty() || any(&r.namespaces, &what.namespace))
            })
            .map(|r| format!("allowed by rule {:?}", r.name))
    }

    /// The apiserver's 403 message for a denied request.
    pub fn forbidden_message(who: &Identity, what: &Attributes, qualified: &str) -> String {
        let name = if what.name.is_empty() {
            String::new()
        } else {
            format!(" {:?}", what.name)
        };
        let group = format!(" in API group {:?}", what.group);
        let scope = if what.namespace.is_empty() {
            " at the cluster scope".to_owned()
        } else {
            format!(" in the namespace {:?}", what.namespace)
        };
        let res = if what.subresource.is_empty() {
            what.resource.clone()
        } else {
            format!("{}/{}", what.resource, what.subresource)
        };
        format!(
            "{qualified}{name} is forbidden: User {:?} cannot {} resource {:?}{group}{scope}",
            who.name, what.verb, res
        )
    }

    /// The `status` of a TokenReview for `spec`.
    pub fn token_review_status(&self, spec: &Value) -> Value {
        match spec["token"].as_str().and_then(|t| self.authenticate(t)) {
            Some(id) => json!({
                "authenticated": true,
                "user": { "username": id.name, "uid": id.uid, "groups": id.groups },
                "audiences": spec.get("audiences").cloned().unwrap_or(json!([API_AUDIENCE]))
            }),
            None => json!({ "user": {}, "error": "invalid bearer token" }),
        }
    }

    /// The `status` of a SubjectAccessReview for `spec` (or of a self review for `who`).
    pub fn access_review_status(
        &self,
        spec: &Value,
        who: Option<&Identity>,
        namespace: Option<&str>,
    ) -> Value {
        let id = match who {
            Some(w) => w.clone(),
            None => Identity {
                name: spec["user"].as_str().unwrap_or_default().to_owned(),
                uid: spec["uid"].as_str().unwrap_or_default().to_owned(),
                groups: spec["groups"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|g| g.as_str().map(str::to_owned))
                            .collect()
                    })
                    .unwrap_or_default(),
            },
        };
        let ra = &spec["resourceAttributes"];
        if ra.is_object() {
            let s = |k: &str| ra[k].as_str().unwrap_or_default().to_owned();
            let attrs = Attributes {
                verb: s("verb"),
                group: s("group"),
                resource: s("resource"),
                subresource: s("subresource"),
                namespace: namespace
                    .map(str::to_owned)
                    .unwrap_or_else(|| s("namespace")),
                name: s("name"),
            };
            return match self.authorize(&id, &attrs) {
                Some(reason) if reason.is_empty() => json!({ "allowed": true }),
                Some(reason) => json!({ "allowed": true, "reason": reason }),
                None => json!({ "allowed": false }),
            };
        }
        // Non-resource requests: only masters.
        if id.groups.iter().any(|g| g == MASTERS) {
            json!({ "allowed": true })
        } else {
            json!({ "allowed": false })
        }
    }
}

fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> AuthTable {
        let mut t = AuthTable::with_admin("admin-token");
        t.users.push(User {
            token: "v".into(),
            name: "viewer".into(),
            uid: "1".into(),
            groups: vec!["viewers".into()],
        });
        t.rules.push(Rule {
            name: "view".into(),
            subjects: vec!["group:viewers".into()],
            verbs: vec!["get".into(), "list".into()],
            api_groups: vec!["leasehold.io".into()],
            resources: vec!["clusters".into()],
            namespaces: vec![],
        });
        t
    }

    #[test]
    fn tokens_and_rules() {
        let t = table();
        assert!(t.authenticate("nope").is_none());
        let v = t.authenticate("v").unwrap();
        let mut a = Attributes {
            verb: "get".into(),
            group: "leasehold.io".into(),
            resource: "clusters".into(),
            ..Default::default()
        };
        assert!(t.authorize(&v, &a).is_some());
        a.verb = "create".into();
        assert!(t.authorize(&v, &a).is_none());
        a.subresource = "rebalance".into();
        let admin = t.authenticate("admin-token").unwrap();
        assert!(t.authorize(&admin, &a).is_some());
    }

    #[test]
    fn reviews() {
        let t = table();
        let s = t.token_review_status(&json!({"token": "v"}));
        assert_eq!(s["authenticated"], true);
        assert_eq!(s["user"]["username"], "viewer");
        assert_eq!(
            t.token_review_status(&json!({"token": "x"})),
            json!({"user": {}, "error": "invalid bearer token"})
        );
        assert_eq!(s["audiences"], json!([API_AUDIENCE]));
        let sar = json!({"user": "viewer", "groups": ["viewers"], "resourceAttributes": {"verb": "list", "group": "leasehold.io", "resource": "clusters"}});
        assert_eq!(t.access_review_status(&sar, None, None)["allowed"], true);
    }

    #[test]
    fn debug_never_shows_tokens() {
        let t = table();
        assert!(!format!("{t:?}").contains("admin-token"));
    }

    #[test]
    fn forbidden_message_matches_rbac() {
        let who = Identity {
            name: "bob".into(),
            uid: String::new(),
            groups: vec![],
        };
        let what = Attributes {
            verb: "create".into(),
            group: "coordination.k8s.io".into(),
            resource: "leases".into(),
            namespace: "default".into(),
            ..Default::default()
        };
        assert_eq!(
            AuthTable::forbidden_message(&who, &what, "leases.coordination.k8s.io"),
            "leases.coordination.k8s.io is forbidden: User \"bob\" cannot create resource \"leases\" in API group \"coordination.k8s.io\" in the namespace \"default\""
        );
    }
}
