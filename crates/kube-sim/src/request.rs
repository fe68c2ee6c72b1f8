//! Parses a request path and query into what the simulator must do, the way kube-apiserver's
//! `RequestInfoFactory` and list-option validation do. Pure: no store access.

use std::collections::HashMap;

use super::registry::{self, ResourceType, TypeId};
use super::status::{ApiResult, Cause, StatusError};

/// What a path names.
#[derive(Debug)]
pub enum Target {
    /// `/api`, `/apis`, `/version`, `/openapi/...`: answered by discovery code.
    NonResource,
    /// A served resource type, possibly an object and subresource.
    Resource(ResourceRequest),
}

/// A request on a served resource.
#[derive(Debug)]
pub struct ResourceRequest {
    pub type_id: TypeId,
    pub rt: &'static ResourceType,
    /// Empty for cluster-scoped types or cluster-wide collection requests.
    pub namespace: String,
    pub name: Option<String>,
    pub subresource: Option<String>,
}

/// Subresources that follow a namespace's name (`/api/v1/namespaces/x/status`).
const NAMESPACE_SUBRESOURCES: &[&str] = &["status", "finalize"];

/// Parses `/api/v1/...` and `/apis/{group}/{version}/...`.
pub fn parse_path(path: &str) -> ApiResult<Target> {
    let parts: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|p| !p.is_empty())
        .collect();
    let (group, version, rest) = match parts.as_slice() {
        ["api", "v1", rest @ ..] if !rest.is_empty() => ("", "v1", rest),
        ["apis", g, v, rest @ ..] if !rest.is_empty() => (*g, *v, rest),
        _ => return Ok(Target::NonResource),
    };
    let mut rest = rest;
    let mut namespace = String::new();
    if rest[0] == "namespaces" && rest.len() > 1 {
        namespace = rest[1].to_owned();
        if rest.len() > 2 && !NAMESPACE_SUBRESOURCES.contains(&rest[2]) {
            rest = &rest[2..];
        }
    }
    let (resource, name, sub) = match rest {
        [r] => (*r, None, None),
        [r, n] => (*r, Some(*n), None),
        [r, n, s] => (*r, Some(*n), Some(*s)),
        _ => return Err(unknown_resource(group)),
    };
    let Some((type_id, rt)) = registry::lookup(group, version, resource) else {
        return Err(unknown_resource(group));
    };
    if rt.resource == "namespaces" {
        // `/api/v1/namespaces/{name}`: the namespace is the object.
        let name = name
            .map(str::to_owned)
            .or_else(|| (!namespace.is_empty()).then(|| namespace.clone()));
        return Ok(Target::Resource(ResourceRequest {
            type_id,
            rt,
            namespace: String::new(),
            name,
            subresource: sub.map(str::to_owned),
        }));
    }
    if !rt.namespaced && !namespace.is_empty() {
        return Err(StatusError::no_route());
    }
    if let Some(s) = sub {
        let ok = s == "status" && rt.status;
        if !ok {
            return Err(StatusError::no_route());
        }
    }
    Ok(Target::Resource(ResourceRequest {
        type_id,
        rt,
        namespace,
        name: name.map(str::to_owned),
        subresource: sub.map(str::to_owned),
    }))
}

/// The 404 for a path naming no served resource. Paths under `/api/` and under a served API
/// group reach go-restful, whose 404 has empty `details`; anything else falls through to the
/// apiserver's NotFoundHandler, whose Status has none.
fn unknown_resource(group: &str) -> StatusError {
    if group.is_empty() || registry::group_versions().iter().any(|(g, _)| *g == group) {
        StatusError::no_route()
    } else {
        StatusError::path_not_found()
    }
}

/// Parsed query parameters of list, watch and write requests.
#[derive(Debug, Default, Clone)]
pub struct Query {
    pub watch: bool,
    pub resource_version: Option<String>,
    pub resource_version_match: Option<String>,
    pub limit: usize,
    pub continue_token: Option<String>,
    pub label_selector: Option<String>,
    pub field_selector: Option<String>,
    pub timeout_seconds: Option<u64>,
    pub allow_bookmarks: bool,
    pub send_initial_events: Option<bool>,
    pub dry_run: bool,
    /// The `dryRun` value as given (validated per verb by [`Query::validate_write_options`]).
    pub dry_run_value: Option<String>,
    pub field_manager: Option<String>,
    pub force: Option<bool>,
    pub field_validation: Option<String>,
    pub grace_period_seconds: Option<i64>,
    pub propagation_policy: Option<String>,
}

fn parse_bool(name: &str, v: &str) -> ApiResult<bool> {
    match v {
        "true" | "1" | "True" | "TRUE" | "t" | "T" => Ok(true),
        "false" | "0" | "False" | "FALSE" | "f" | "F" | "" => Ok(false),
        _ => Err(StatusError::bad_request(format!(
            "failed to parse query parameter {name}: strconv.ParseBool: parsing {v:?}: invalid syntax"
        ))),
    }
}

fn parse_int<T: std::str::FromStr>(name: &str, v: &str) -> ApiResult<T> {
    v.parse::<T>()
        .map_err(|_| StatusError::bad_request(format!("failed to parse query parameter {name}: strconv.ParseInt: parsing {v:?}: invalid syntax")))
}

impl Query {
    /// Decodes the raw query string.
    pub fn parse(raw: Option<&str>) -> ApiResult<Self> {
        let pairs: HashMap<String, String> = raw.map(form_urlencoded_pairs).unwrap_or_default();
        let mut q = Query::default();
        for (k, v) in &pairs {
            match k.as_str() {
                "watch" => q.watch = parse_bool(k, v)?,
                "resourceVersion" => q.resource_version = Some(v.clone()),
                "resourceVersionMatch" => {
                    q.resource_version_match = Some(v.clone()).filter(|s| !s.is_empty())
                }
                "limit" => q.limit = parse_int::<i64>(k, v)?.max(0) as usize,
                "continue" => q.continue_token = Some(v.clone()).filter(|s| !s.is_empty()),
                "labelSelector" => q.label_selector = Some(v.clone()).filter(|s| !s.is_empty()),
                "fieldSelector" => q.field_selector = Some(v.clone()).filter(|s| !s.is_empty()),
                "timeoutSeconds" => q.timeout_seconds = Some(parse_int::<u64>(k, v)?),
                "allowWatchBookmarks" => q.allow_bookmarks = parse_bool(k, v)?,
                "sendInitialEvents" => q.send_initial_events = Some(parse_bool(k, v)?),
                "dryRun" => {
                    q.dry_run = v == "All";
                    q.dry_run_value = Some(v.clone());
                }
                "fieldManager" => q.field_manager = Some(v.clone()),
                "force" => q.force = Some(parse_bool(k, v)?),
                "fieldValidation" => q.field_validation = Some(v.clone()),
                "gracePeriodSeconds" => q.grace_period_seconds = Some(parse_int(k, v)?),
                "propagationPolicy" => q.propagation_policy = Some(v.clone()),
                _ => {}
            }
        }
        Ok(q)
    }

    /// `ValidateCreateOptions`, `ValidateUpdateOptions`, `ValidatePatchOptions` (apart from the
    /// apply-specific rules, which the patch handler adds as `extra`) and
    /// `ValidateDeleteOptions`: 422 `{CreateOptions,…}.meta.k8s.io "" is invalid`.
    /// `options_kind` is `CreateOptions`, `UpdateOptions`, `PatchOptions` or `DeleteOptions`.
    pub fn validate_write_options(&self, options_kind: &str, extra: Vec<Cause>) -> ApiResult<()> {
        let mut errs = extra;
        if options_kind != "DeleteOptions"
            && let Some(m) = &self.field_manager
        {
            if m.len() > 128 {
                errs.push(Cause {
                    reason: "FieldValueTooLong".into(),
                    message: "Too long: may not be more than 128 bytes".into(),
                    field: "fieldManager".into(),
                });
            }
            for (i, c) in m.chars().enumerate() {
                if c.is_control() {
                    errs.push(Cause::invalid(
                        "fieldManager",
                        &serde_json::json!(m),
                        &format!("invalid character U+{:04X} (at position {i})", c as u32),
                    ));
                }
            }
        }
        if let Some(v) = &self.dry_run_value
            && v != "All"
        {
            let mut c = Cause::not_supported("dryRun", &serde_json::json!(""), &["All"]);
            c.message = format!("Unsupported value: []string{{{v:?}}}: supported values: \"All\"");
            errs.push(c);
        }
        if options_kind != "DeleteOptions"
            && let Some(v) = &self.field_validation
            && !matches!(v.as_str(), "" | "Ignore" | "Warn" | "Strict")
        {
            errs.push(Cause::not_supported(
                "fieldValidation",
                &serde_json::json!(v),
                &["", "Ignore", "Strict", "Warn"],
            ));
        }
        if errs.is_empty() {
            Ok(())
        } else {
            Err(StatusError::options_invalid(options_kind, &errs))
        }
    }

    /// `ValidateListOptions` of the apiserver: 422 on contradictory options. `watch_list` is
    /// the WatchList feature gate (off by default in 1.33), which `sendInitialEvents` needs.
    pub fn validate_list(&self, watch_list: bool) -> ApiResult<()> {
        let mut errs = Vec::new();
        let m = self.resource_version_match.as_deref();
        if self.watch {
            if self.send_initial_events.is_some() && m != Some("NotOlderThan") {
                errs.push(Cause::forbidden(
                    "resourceVersionMatch",
                    "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
                ));
            }
            if self.send_initial_events.is_some() && !watch_list {
                errs.push(Cause::forbidden(
                    "sendInitialEvents",
                    "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled",
                ));
            }
            if let Some(m) = m {
                if self.send_initial_events.is_none() {
                    errs.push(Cause::forbidden("resourceVersionMatch", "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided"));
                }
                if m != "NotOlderThan" {
                    errs.push(Cause::not_supported(
                        "resourceVersionMatch",
                        &serde_json::json!(m),
                        &["NotOlderThan"],
                    ));
                }
                if self.continue_token.is_some() {
                    errs.push(Cause::forbidden(
                        "resourceVersionMatch",
                        "resourceVersionMatch is forbidden when continue is provided",
                    ));
                }
            }
        } else {
            if let Some(m) = m {
                if self
                    .resource_version
                    .as_deref()
                    .unwrap_or_default()
                    .is_empty()
                {
                    errs.push(Cause::forbidden(
                        "resourceVersionMatch",
                        "resourceVersionMatch is forbidden unless resourceVersion is provided",
                    ));
                }
                if self.continue_token.is_some() {
                    errs.push(Cause::forbidden(
                        "resourceVersionMatch",
                        "resourceVersionMatch is forbidden when continue is provided",
                    ));
                }
                if m != "Exact" && m != "NotOlderThan" {
                    errs.push(Cause::not_supported(
                        "resourceVersionMatch",
                        &serde_json::json!(m),
                        &["Exact", "NotOlderThan", ""],
                    ));
                }
                if m == "Exact" && self.resource_version.as_deref() == Some("0") {
                    errs.push(Cause::forbidden(
                        "resourceVersionMatch",
                        "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
                    ));
                }
            }
            if self.send_initial_events.is_some() {
                errs.push(Cause::forbidden(
                    "sendInitialEvents",
                    "sendInitialEvents is forbidden for list",
                ));
            }
        }
        if errs.is_empty() {
            return Ok(());
        }
        Err(list_options_invalid(&errs))
    }

    /// The requested resourceVersion as a number; "" and "0" are `None`.
    pub fn rv_number(&self) -> ApiResult<Option<u64>> {
        match self.resource_version.as_deref() {
            None | Some("") | Some("0") => Ok(None),
            Some(s) => parse_rv(s).map(Some),
        }
    }
}

/// Parses a resourceVersion given by a client.
pub fn parse_rv(s: &str) -> ApiResult<u64> {
    s.parse::<u64>().map_err(|_| {
        StatusError::bad_request(format!(
            "invalid resource version: strconv.ParseUint: parsing {s:?}: invalid syntax"
        ))
    })
}

fn list_options_invalid(errs: &[Cause]) -> StatusError {
    let parts: Vec<String> = errs
        .iter()
        .map(|c| format!("{}: {}", c.field, c.message))
        .collect();
    let joined = if parts.len() == 1 {
        parts[0].clone()
    } else {
        format!("[{}]", parts.join(", "))
    };
    let mut e =
        StatusError::bad_request(format!("ListOptions.meta.k8s.io \"\" is invalid: {joined}"));
    e.code = 422;
    e.reason = "Invalid";
    e.details = Some(serde_json::json!({
        "group": "meta.k8s.io",
        "kind": "ListOptions",
        "causes": errs.iter().map(|c| serde_json::json!({"reason": c.reason, "message": c.message, "field": c.field})).collect::<Vec<_>>()
    }));
    e
}

/// Minimal `application/x-www-form-urlencoded` query decoding (`+` is a space, `%XX` escapes).
fn form_urlencoded_pairs(q: &str) -> HashMap<String, String> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => match std::str::from_utf8(&b[i + 1..i + 3])
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok())
            {
                Some(x) => {
                    out.push(x);
                    i += 2;
                }
                None => out.push(b'%'),
            },
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(path: &str) -> ResourceRequest {
        match parse_path(path).unwrap() {
            Target::Resource(r) => r,
            Target::NonResource => panic!("{path} is not a resource path"),
        }
    }

    #[test]
    fn paths_map_to_resources() {
        let r = res("/apis/coordination.k8s.io/v1/namespaces/default/leases/x");
        assert_eq!(
            (r.rt.resource, r.namespace.as_str(), r.name.as_deref()),
            ("leases", "default", Some("x"))
        );
        let r = res("/apis/coordination.k8s.io/v1/leases");
        assert_eq!((r.namespace.as_str(), r.name.as_deref()), ("", None));
        let r = res("/api/v1/namespaces/default");
        assert_eq!(
            (r.rt.resource, r.name.as_deref()),
            ("namespaces", Some("default"))
        );
        let r = res("/api/v1/namespaces/default/status");
        assert_eq!(
            (r.rt.resource, r.name.as_deref(), r.subresource.as_deref()),
            ("namespaces", Some("default"), Some("status"))
        );
        let r = res("/api/v1/namespaces/ns/pods/p/status");
        assert_eq!(
            (r.rt.resource, r.subresource.as_deref()),
            ("pods", Some("status"))
        );
        assert!(matches!(parse_path("/api"), Ok(Target::NonResource)));
        assert_eq!(
            parse_path("/api/v1/namespaces/x/widgets").unwrap_err().code,
            404
        );
        assert_eq!(
            parse_path("/apis/coordination.k8s.io/v1/namespaces/d/leases/x/status")
                .unwrap_err()
                .code,
            404
        );
    }

    #[test]
    fn query_decoding() {
        let q = Query::parse(Some(
            "labelSelector=app%3Dweb%2Ctier+in+(a)&limit=5&watch=1",
        ))
        .unwrap();
        assert_eq!(q.label_selector.as_deref(), Some("app=web,tier in (a)"));
        assert_eq!(q.limit, 5);
        assert!(q.watch);
        assert_eq!(Query::parse(Some("limit=x")).unwrap_err().code, 400);
        let q = Query::parse(Some("dryRun=Some")).unwrap();
        assert!(!q.dry_run);
        let e = q
            .validate_write_options("CreateOptions", vec![])
            .unwrap_err();
        assert_eq!(e.code, 422);
        assert_eq!(
            e.message,
            "CreateOptions.meta.k8s.io \"\" is invalid: dryRun: Unsupported value: []string{\"Some\"}: supported values: \"All\""
        );
        assert!(
            Query::parse(Some("dryRun=All"))
                .unwrap()
                .validate_write_options("PatchOptions", vec![])
                .is_ok()
        );
    }

    #[test]
    fn send_initial_events_needs_not_older_than() {
        let q = Query::parse(Some("watch=true&sendInitialEvents=true")).unwrap();
        let e = q.validate_list(true).unwrap_err();
        assert_eq!(e.code, 422);
        assert!(
            e.message.contains(
                "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"
            ),
            "{}",
            e.message
        );
        let ok = Query::parse(Some(
            "watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan",
        ))
        .unwrap();
        assert!(ok.validate_list(true).is_ok());
        // Found by the real tier: the WatchList gate is off by default in 1.33.
        let e = ok.validate_list(false).unwrap_err();
        assert_eq!(
            e.message,
            "ListOptions.meta.k8s.io \"\" is invalid: sendInitialEvents: Forbidden: sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled"
        );
    }
}
