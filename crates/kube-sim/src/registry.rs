//! The resource types the simulator serves: the equivalent of kube-apiserver's registry
//! table. Discovery, routing, validation strategies and table printing all read this one list,
//! so adding a kind is one entry here plus (optionally) a strategy in `strategy.rs`.

/// Verbs of an ordinary stored resource.
const CRUD: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];
/// Verbs of a namespace (no deletecollection on namespaces).
const NS_VERBS: &[&str] = &[
    "create", "delete", "get", "list", "patch", "update", "watch",
];
/// Verbs of a review resource (TokenReview, SubjectAccessReview): create only, nothing stored.
const REVIEW: &[&str] = &["create"];
/// Verbs of a `/status` subresource.
const STATUS_VERBS: &[&str] = &["get", "patch", "update"];

/// One served resource type.
#[derive(Debug)]
pub struct ResourceType {
    pub group: &'static str,
    pub version: &'static str,
    /// Plural, lower case, as in URLs.
    pub resource: &'static str,
    pub singular: &'static str,
    pub kind: &'static str,
    pub namespaced: bool,
    pub verbs: &'static [&'static str],
    pub short_names: &'static [&'static str],
    pub categories: &'static [&'static str],
    /// Has a `/status` subresource (status is written only through it).
    pub status: bool,
    /// Sets and bumps `metadata.generation` on spec changes.
    pub generation: bool,
    /// PUT without `metadata.resourceVersion` is allowed (an unconditional update).
    pub unconditional_update: bool,
    /// PUT of a missing object creates it.
    pub create_on_update: bool,
    /// DELETE answers with the deleted object rather than a `Status`.
    pub return_deleted_object: bool,
    /// Create-only review resource: answered, never stored.
    pub review: bool,
    /// Names are DNS-1123 labels (else subdomains); services are DNS-1035 labels.
    pub name_rule: NameRule,
}

/// Which name validation applies to a kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameRule {
    Subdomain,
    Label1123,
    Label1035,
    /// Any path segment name (events, reviews).
    PathSegment,
}

impl ResourceType {
    /// `leases.coordination.k8s.io` or `pods` — the form used in error messages.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.resource.to_owned()
        } else {
            format!("{}.{}", self.resource, self.group)
        }
    }
    /// `Lease.coordination.k8s.io` or `Pod` — the form used in Invalid messages.
    pub fn group_kind(&self) -> String {
        if self.group.is_empty() {
            self.kind.to_owned()
        } else {
            format!("{}.{}", self.kind, self.group)
        }
    }
    /// `coordination.k8s.io/v1` or `v1`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_owned()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
    /// `LeaseList`.
    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }
}

macro_rules! rt {
    ($group:expr, $version:expr, $resource:expr, $singular:expr, $kind:expr, namespaced: $ns:expr,
     verbs: $verbs:expr, short: $short:expr, cat: $cat:expr, status: $status:expr, generation: $gen:expr,
     unconditional: $uncond:expr, create_on_update: $cou:expr, return_deleted: $ret:expr, names: $names:expr) => {
        ResourceType {
            group: $group,
            version: $version,
            resource: $resource,
            singular: $singular,
            kind: $kind,
            namespaced: $ns,
            verbs: $verbs,
            short_names: $short,
            categories: $cat,
            status: $status,
            generation: $gen,
            unconditional_update: $uncond,
            create_on_update: $cou,
            return_deleted_object: $ret,
            review: false,
            name_rule: $names,
        }
    };
}

/// Every served resource type. Order is discovery order within a group-version.
pub static TYPES: &[ResourceType] = &[
    rt!("", "v1", "namespaces", "namespace", "Namespace", namespaced: false, verbs: NS_VERBS, short: &["ns"], cat: &[],
        status: true, generation: false, unconditional: true, create_on_update: false, return_deleted: true, names: NameRule::Label1123),
    rt!("", "v1", "pods", "pod", "Pod", namespaced: true, verbs: CRUD, short: &["po"], cat: &["all"],
        status: true, generation: false, unconditional: true, create_on_update: false, return_deleted: true, names: NameRule::Subdomain),
    rt!("", "v1", "services", "service", "Service", namespaced: true,
        verbs: &["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"], short: &["svc"], cat: &["all"],
        status: true, generation: false, unconditional: true, create_on_update: false, return_deleted: true, names: NameRule::Label1035),
    // Written by clients: the endpoints controller (here the fake kubelet's loop, `kubelet.rs`)
    // or a Service's users. Unconditional updates and create-on-update, as
    // `pkg/registry/core/endpoint/strategy.go`.
    rt!("", "v1", "endpoints", "endpoints", "Endpoints", namespaced: true, verbs: CRUD, short: &["ep"], cat: &[],
        status: false, generation: false, unconditional: true, create_on_update: true, return_deleted: false, names: NameRule::Subdomain),
    rt!("", "v1", "configmaps", "configmap", "ConfigMap", namespaced: true, verbs: CRUD, short: &["cm"], cat: &[],
        status: false, generation: false, unconditional: true, create_on_update: false, return_deleted: false, names: NameRule::Subdomain),
    rt!("", "v1", "secrets", "secret", "Secret", namespaced: true, verbs: CRUD, short: &[], cat: &[],
        status: false, generation: false, unconditional: true, create_on_update: false, return_deleted: false, names: NameRule::Subdomain),
    rt!("", "v1", "events", "event", "Event", namespaced: true, verbs: CRUD, short: &["ev"], cat: &[],
        status: false, generation: false, unconditional: true, create_on_update: true, return_deleted: false, names: NameRule::PathSegment),
    rt!("", "v1", "serviceaccounts", "serviceaccount", "ServiceAccount", namespaced: true, verbs: CRUD, short: &["sa"], cat: &[],
        status: false, generation: false, unconditional: true, create_on_update: false, return_deleted: false, names: NameRule::Subdomain),
    rt!("", "v1", "persistentvolumeclaims", "persistentvolumeclaim", "PersistentVolumeClaim", namespaced: true, verbs: CRUD, short: &["pvc"], cat: &[],
        status: true, generation: false, unconditional: true, create_on_update: false, return_deleted: true, names: NameRule::Subdomain),
    rt!("apps", "v1", "deployments", "deployment", "Deployment", namespaced: true, verbs: CRUD, short: &["deploy"], cat: &["all"],
        status: true, generation: true, unconditional: true, create_on_update: false, return_deleted: false, names: NameRule::Subdomain),
    rt!("apps", "v1", "statefulsets", "statefulset", "StatefulSet", namespaced: true, verbs: CRUD, short: &["sts"], cat: &["all"],
        status: true, generation: true, unconditional: true, create_on_update: false, return_deleted: false, names: NameRule::Label1123),
    rt!("coordination.k8s.io", "v1", "leases", "lease", "Lease", namespaced: true, verbs: CRUD, short: &[], cat: &[],
        status: false, generation: false, unconditional: false, create_on_update: true, return_deleted: false, names: NameRule::Subdomain),
    rt!("discovery.k8s.io", "v1", "endpointslices", "endpointslice", "EndpointSlice", namespaced: true, verbs: CRUD, short: &[], cat: &[],
        status: false, generation: true, unconditional: true, create_on_update: false, return_deleted: false, names: NameRule::Subdomain),
    rt!("events.k8s.io", "v1", "events", "event", "Event", namespaced: true, verbs: CRUD, short: &["ev"], cat: &[],
        status: false, generation: false, unconditional: true, create_on_update: true, return_deleted: false, names: NameRule::PathSegment),
    rt!("flowcontrol.apiserver.k8s.io", "v1", "flowschemas", "flowschema", "FlowSchema", namespaced: false, verbs: CRUD, short: &[], cat: &[],
        status: true, generation: true, unconditional: true, create_on_update: false, return_deleted: false, names: NameRule::Subdomain),
    rt!("flowcontrol.apiserver.k8s.io", "v1", "prioritylevelconfigurations", "prioritylevelconfiguration", "PriorityLevelConfiguration", namespaced: false, verbs: CRUD, short: &[], cat: &[],
        status: true, generation: true, unconditional: true, create_on_update: false, return_deleted: false, names: NameRule::Subdomain),
    rt!("networking.k8s.io", "v1", "networkpolicies", "networkpolicy", "NetworkPolicy", namespaced: true, verbs: CRUD, short: &["netpol"], cat: &[],
        status: false, generation: true, unconditional: true, create_on_update: false, return_deleted: false, names: NameRule::Subdomain),
    rt!("policy", "v1", "poddisruptionbudgets", "poddisruptionbudget", "PodDisruptionBudget", namespaced: true, verbs: CRUD, short: &["pdb"], cat: &[],
        status: true, generation: true, unconditional: true, create_on_update: false, return_deleted: false, names: NameRule::Subdomain),
    rt!("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "clusterrolebinding", "ClusterRoleBinding", namespaced: false, verbs: CRUD, short: &[], cat: &[],
        status: false, generation: false, unconditional: true, create_on_update: false, return_deleted: false, names: NameRule::PathSegment),
    rt!("rbac.authorization.k8s.io", "v1", "clusterroles", "clusterrole", "ClusterRole", namespaced: false, verbs: CRUD, short: &[], cat: &[],
        status: false, generation: false, unconditional: true, create_on_update: false, return_deleted: false, names: NameRule::PathSegment),
    rt!("rbac.authorization.k8s.io", "v1", "rolebindings", "rolebinding", "RoleBinding", namespaced: true, verbs: CRUD, short: &[], cat: &[],
        status: false, generation: false, unconditional: true, create_on_update: false, return_deleted: false, names: NameRule::PathSegment),
    rt!("rbac.authorization.k8s.io", "v1", "roles", "role", "Role", namespaced: true, verbs: CRUD, short: &[], cat: &[],
        status: false, generation: false, unconditional: true, create_on_update: false, return_deleted: false, names: NameRule::PathSegment),
    review(
        "authentication.k8s.io",
        "tokenreviews",
        "tokenreview",
        "TokenReview",
        false,
    ),
    review(
        "authorization.k8s.io",
        "localsubjectaccessreviews",
        "localsubjectaccessreview",
        "LocalSubjectAccessReview",
        true,
    ),
    review(
        "authorization.k8s.io",
        "selfsubjectaccessreviews",
        "selfsubjectaccessreview",
        "SelfSubjectAccessReview",
        false,
    ),
    review(
        "authorization.k8s.io",
        "subjectaccessreviews",
        "subjectaccessreview",
        "SubjectAccessReview",
        false,
    ),
];

const fn review(
    group: &'static str,
    resource: &'static str,
    singular: &'static str,
    kind: &'static str,
    namespaced: bool,
) -> ResourceType {
    ResourceType {
        group,
        version: "v1",
        resource,
        singular,
        kind,
        namespaced,
        verbs: REVIEW,
        short_names: &[],
        categories: &[],
        status: false,
        generation: false,
        unconditional_update: false,
        create_on_update: false,
        return_deleted_object: false,
        review: true,
        name_rule: NameRule::PathSegment,
    }
}

/// Index of a type in [`TYPES`]; events and watch history carry it instead of a reference.
pub type TypeId = u16;

/// Finds a served type by group, version and plural resource name.
pub fn lookup(
    group: &str,
    version: &str,
    resource: &str,
) -> Option<(TypeId, &'static ResourceType)> {
    TYPES
        .iter()
        .enumerate()
        .find(|(_, t)| t.group == group && t.version == version && t.resource == resource)
        .map(|(i, t)| (i as TypeId, t))
}

/// The type behind an id.
pub fn get(id: TypeId) -> &'static ResourceType {
    &TYPES[id as usize]
}

/// The id of a served type known to exist (internal callers: namespace controller, kubelet).
pub fn id_of(group: &str, resource: &str) -> TypeId {
    TYPES
        .iter()
        .position(|t| t.group == group && t.resource == resource)
        .map(|i| i as TypeId)
        .unwrap_or_else(|| panic!("resource {resource}.{group} is not in the registry"))
}

/// Group-versions in discovery order: ("" = core, "v1"), then the named groups.
pub fn group_versions() -> Vec<(&'static str, &'static str)> {
    let mut out: Vec<(&str, &str)> = Vec::new();
    for t in TYPES {
        if !out.contains(&(t.group, t.version)) {
            out.push((t.group, t.version));
        }
    }
    out
}

/// Verbs of a `/status` subresource, for discovery.
pub fn status_verbs() -> &'static [&'static str] {
    STATUS_VERBS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_type_is_unique_and_resolvable() {
        for (i, t) in TYPES.iter().enumerate() {
            let (id, found) = lookup(t.group, t.version, t.resource).expect("registered");
            assert_eq!(id as usize, i, "{} is registered twice", t.resource);
            assert_eq!(found.kind, t.kind);
        }
    }

    #[test]
    fn qualified_names_match_apiserver_messages() {
        let (_, lease) = lookup("coordination.k8s.io", "v1", "leases").unwrap();
        assert_eq!(lease.qualified(), "leases.coordination.k8s.io");
        assert_eq!(lease.group_kind(), "Lease.coordination.k8s.io");
        let (_, pod) = lookup("", "v1", "pods").unwrap();
        assert_eq!(pod.qualified(), "pods");
        assert_eq!(pod.api_version(), "v1");
    }
}
