//! Kubernetes `Status` errors: the one error type of the simulator's HTTP boundary.
//!
//! Every non-2xx answer is a `meta/v1 Status` with the reason, code and message
//! kube-apiserver would give (kube-rs matches on `reason` and `code`). Constructors are named
//! after the apiserver's `k8s.io/apimachinery/pkg/api/errors` helpers so the mapping is easy
//! to audit.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::registry::ResourceType;

/// One `details.causes` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cause {
    pub reason: String,
    pub message: String,
    pub field: String,
}

/// A failed request, rendered as a Kubernetes `Status`.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct StatusError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub details: Option<Value>,
    /// Answered as Go's `http.NotFound` does (plain text), not as a Status.
    pub plain_text: bool,
}

/// Result alias used across the simulator's request handling.
pub type ApiResult<T> = Result<T, StatusError>;

impl StatusError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            details: None,
            plain_text: false,
        }
    }

    fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    /// `StatusDetails` in Go field order: name, group, kind (group omitted when empty).
    fn name_details(rt: &ResourceType, name: &str) -> Value {
        let mut d = json!({ "name": name });
        if !rt.group.is_empty() {
            d["group"] = json!(rt.group);
        }
        d["kind"] = json!(rt.resource);
        d
    }

    /// 404 for a missing object: `pods "x" not found`.
    pub fn not_found(rt: &ResourceType, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} \"{}\" not found", rt.qualified(), name),
        )
        .with_details(Self::name_details(rt, name))
    }

    /// 404 for a path under a served group-version that names no resource: go-restful's
    /// answer, which the apiserver renders through `NewGenericServerResponse` (empty details).
    pub fn no_route() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
        .with_details(json!({}))
    }

    /// 404 for a path no API group serves at all: the apiserver's `NotFoundHandler`
    /// (`pkg/util/notfoundhandler`), which answers with Go's plain-text `http.NotFound` once
    /// its paths are installed, not with a Status (found by the differential tests).
    pub fn path_not_found() -> Self {
        let mut e = Self::new(404, "NotFound", "404 page not found");
        e.plain_text = true;
        e
    }

    /// 409 for a create of an existing object.
    pub fn already_exists(rt: &ResourceType, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{}\" already exists", rt.qualified(), name),
        )
        .with_details(Self::name_details(rt, name))
    }

    /// 409 for a stale `resourceVersion` or failed precondition.
    pub fn conflict(rt: &ResourceType, name: &str, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{}\": {}",
                rt.qualified(),
                name,
                why
            ),
        )
        .with_details(Self::name_details(rt, name))
    }

    /// 409 for a failed DeleteOptions precondition (`storage.NewInvalidObjError`, wrapped by
    /// the registry with the kind-qualified name).
    pub fn precondition_failed(rt: &ResourceType, name: &str, why: &str) -> Self {
        let mut d = json!({ "name": name });
        if !rt.group.is_empty() {
            d["group"] = json!(rt.group);
        }
        d["kind"] = json!(rt.kind);
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{}\": {}",
                rt.group_kind(),
                name,
                why
            ),
        )
        .with_details(d)
    }

    /// The reason text of an optimistic-concurrency conflict.
    pub const MODIFIED: &'static str = "the object has been modified; please apply your changes to the latest version and try again";

    /// 409 for server-side apply field-manager conflicts, as `errors.NewApplyConflict`:
    /// details carry only the causes (no name, group or kind).
    pub fn conflict_with_causes(message: String, causes: &[Cause]) -> Self {
        Self::new(409, "Conflict", message).with_details(json!({ "causes": causes_json(causes) }))
    }

    /// 422 with field causes: `Lease.coordination.k8s.io "x" is invalid: spec.y: ...`.
    pub fn invalid(rt: &ResourceType, name: &str, causes: &[Cause]) -> Self {
        Self::invalid_kind(rt.group, rt.kind, name, causes)
    }

    /// `errors.NewInvalid(schema.GroupKind{group, kind}, name, causes)`: the message names
    /// `kind.group`, details leave out what is empty (Go's `omitempty`). The apiserver also
    /// passes a resource as the kind (`leases.coordination.k8s.io "x" is invalid`) and empty
    /// group and kind (` "" is invalid: patch: ...`).
    pub fn invalid_kind(group: &str, kind: &str, name: &str, causes: &[Cause]) -> Self {
        let parts: Vec<String> = causes
            .iter()
            .map(|c| {
                if c.field.is_empty() {
                    c.message.clone()
                } else {
                    format!("{}: {}", c.field, c.message)
                }
            })
            .collect();
        let joined = if parts.len() == 1 {
            parts[0].clone()
        } else {
            format!("[{}]", parts.join(", "))
        };
        let mut d = serde_json::Map::new();
        if !name.is_empty() {
            d.insert("name".into(), json!(name));
        }
        if !group.is_empty() {
            d.insert("group".into(), json!(group));
        }
        if !kind.is_empty() {
            d.insert("kind".into(), json!(kind));
        }
        d.insert("causes".into(), causes_json(causes));
        let group_kind = if group.is_empty() {
            kind.to_owned()
        } else {
            format!("{kind}.{group}")
        };
        Self::new(
            422,
            "Invalid",
            format!("{group_kind} {name:?} is invalid: {joined}"),
        )
        .with_details(Value::Object(d))
    }

    /// 422 for invalid request options (`CreateOptions.meta.k8s.io "" is invalid: ...`).
    pub fn options_invalid(options_kind: &str, causes: &[Cause]) -> Self {
        Self::invalid_kind("meta.k8s.io", options_kind, "", causes)
    }

    /// 422 as `NewGenericServerResponse(422, ...)` renders it: a JSON patch that cannot be
    /// applied (a failed `test`, a missing path). The patch library's own message is dropped.
    pub fn unprocessable() -> Self {
        Self::new(
            422,
            "Invalid",
            "the server rejected our request due to an error in our request",
        )
        .with_details(json!({}))
    }

    /// 400 Bad Request.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 403 Forbidden.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(403, "Forbidden", message)
    }

    /// 403 when creating into a namespace being deleted.
    pub fn namespace_terminating(rt: &ResourceType, name: &str, namespace: &str) -> Self {
        let mut d = Self::name_details(rt, name);
        d["causes"] = json!([{
            "reason": "NamespaceTerminating",
            "message": format!("namespace {namespace} is being terminated"),
            "field": "metadata.namespace"
        }]);
        Self::new(
            403,
            "Forbidden",
            format!(
                "{} \"{}\" is forbidden: unable to create new content in namespace {} because it is being terminated",
                rt.qualified(),
                name,
                namespace
            ),
        )
        .with_details(d)
    }

    /// 401 Unauthorized.
    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized")
    }

    /// 410 Expired.
    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    /// 405 Method Not Allowed.
    pub fn method_not_allowed() -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )
        .with_details(json!({}))
    }

    /// 406 Not Acceptable.
    pub fn not_acceptable(accept: &str) -> Self {
        Self::new(
            406,
            "NotAcceptable",
            format!(
                "only the following media types are accepted: application/json, application/yaml (asked for {accept})"
            ),
        )
    }

    /// 413 Request Entity Too Large.
    pub fn too_large(limit: usize) -> Self {
        Self::new(
            413,
            "RequestEntityTooLarge",
            format!("Request entity too large: limit is {limit}"),
        )
    }

    /// 413 with the apiserver's own explanation (`NewRequestEntityTooLargeError`).
    pub fn too_large_message(message: impl Into<String>) -> Self {
        Self::new(
            413,
            "RequestEntityTooLarge",
            format!("Request entity too large: {}", message.into()),
        )
    }

    /// 415 Unsupported Media Type, as `negotiation.NewUnsupportedMediaTypeError(accepted)`.
    pub fn unsupported_media_type(accepted: &[&str]) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: {}",
                accepted.join(", ")
            ),
        )
    }

    /// 504 when a resourceVersion is ahead of the store and does not arrive in time.
    pub fn too_large_resource_version(asked: u64, current: u64) -> Self {
        Self::new(504, "Timeout", format!("Too large resource version: {asked}, current: {current}")).with_details(json!({
            "causes": [{ "reason": "ResourceVersionTooLarge", "message": "Too large resource version" }],
            "retryAfterSeconds": 1
        }))
    }

    /// A plain Go error reaching the client (`ErrorToAPIStatus` default): the given code,
    /// no reason (`StatusReasonUnknown` is empty and omitted).
    pub fn unknown(code: u16, message: impl Into<String>) -> Self {
        Self::new(code, "", message)
    }

    /// 500 Internal Error (never expected; carries no internals).
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    /// The `Status` body.
    pub fn to_status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if self.reason.is_empty()
            && let Some(o) = s.as_object_mut()
        {
            o.remove("reason");
        }
        if let Some(d) = &self.details {
            s["details"] = d.clone();
        }
        s
    }
}

fn causes_json(causes: &[Cause]) -> Value {
    Value::Array(
        causes
            .iter()
            .map(|c| {
                let mut v = json!({ "reason": c.reason, "message": c.message });
                if !c.field.is_empty() {
                    v["field"] = json!(c.field);
                }
                v
            })
            .collect(),
    )
}

impl Cause {
    /// `field.Invalid`: `Invalid value: <v>: <detail>`.
    pub fn invalid(field: &str, value: &Value, detail: &str) -> Self {
        Self {
            reason: "FieldValueInvalid".into(),
            message: format!("Invalid value: {}: {}", go_value(value), detail),
            field: field.into(),
        }
    }
    /// `field.Invalid` with a value already rendered (a Go map or struct).
    pub fn invalid_rendered(field: &str, rendered: &str, detail: &str) -> Self {
        Self {
            reason: "FieldValueInvalid".into(),
            message: format!("Invalid value: {rendered}: {detail}"),
            field: field.into(),
        }
    }
    /// `field.Duplicate`.
    pub fn duplicate(field: &str, value: &Value) -> Self {
        Self {
            reason: "FieldValueDuplicate".into(),
            message: format!("Duplicate value: {}", go_value(value)),
            field: field.into(),
        }
    }
    /// `field.Required`.
    pub fn required(field: &str, detail: &str) -> Self {
        let message = if detail.is_empty() {
            "Required value".to_owned()
        } else {
            format!("Required value: {detail}")
        };
        Self {
            reason: "FieldValueRequired".into(),
            message,
            field: field.into(),
        }
    }
    /// `field.Forbidden`.
    pub fn forbidden(field: &str, detail: &str) -> Self {
        Self {
            reason: "FieldValueForbidden".into(),
            message: format!("Forbidden: {detail}"),
            field: field.into(),
        }
    }
    /// `field.NotSupported`.
    pub fn not_supported(field: &str, value: &Value, valid: &[&str]) -> Self {
        let quoted: Vec<String> = valid.iter().map(|v| format!("\"{v}\"")).collect();
        Self {
            reason: "FieldValueNotSupported".into(),
            message: format!(
                "Unsupported value: {}: supported values: {}",
                go_value(value),
                quoted.join(", ")
            ),
            field: field.into(),
        }
    }
}

/// Formats a value the way `field.Invalid` prints it (`%#v`-like: strings quoted, numbers bare).
pub fn go_value(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        Value::Null => "null".into(),
        other => other.to_string(),
    }
}

impl IntoResponse for StatusError {
    fn into_response(self) -> Response {
        if self.plain_text {
            let mut resp = (StatusCode::NOT_FOUND, "404 page not found\n").into_response();
            let h = resp.headers_mut();
            h.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            h.insert(
                "x-content-type-options",
                HeaderValue::from_static("nosniff"),
            );
            return resp;
        }
        let body = serde_json::to_vec(&self.to_status()).unwrap_or_default();
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut resp = (code, body).into_response();
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        resp
    }
}
