//! The simulator's HTTP front: authentication, authorisation, body limits, routing of
//! resource requests to `handlers` and of discovery/OpenAPI paths to their documents.
//! One fallback handler parses paths itself (like the apiserver's RequestInfoFactory), so
//! unknown paths get the apiserver's `Status` answers rather than a router's.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use tower_http::trace::TraceLayer;

use super::Shared;
use super::auth::{Attributes, AuthTable, Identity};
use super::discovery;
use super::handlers::{self, Ctx};
use super::openapi;
use super::request::{Query, Target, parse_path};
use super::status::{ApiResult, StatusError};

/// kube-apiserver's request body limit (`--max-request-body-bytes`, 3 MiB).
pub const MAX_BODY: usize = 3 * 1024 * 1024;

/// The router of the simulated API server.
pub fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .fallback(dispatch)
        .layer(TraceLayer::new_for_http())
        .with_state(shared)
}

async fn dispatch(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    match route(&shared, method, &uri, &headers, body).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

fn json_ok(v: &Value) -> Response {
    let mut r = (StatusCode::OK, serde_json::to_vec(v).unwrap_or_default()).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// Bearer tokens are checked against the auth table; a request with no credentials is
/// `system:anonymous`, which the simulator lets act as an admin unless started with
/// `anonymous = false` (client-go never sends a bearer token over plain HTTP, so kubectl on a
/// plain-HTTP simulator is always anonymous).
fn authenticate(shared: &Shared, headers: &HeaderMap) -> ApiResult<Identity> {
    match headers.get(header::AUTHORIZATION) {
        None if shared.options.anonymous => Ok(Identity {
            name: "system:anonymous".into(),
            uid: String::new(),
            groups: vec!["system:unauthenticated".into(), super::auth::MASTERS.into()],
        }),
        None => Err(StatusError::unauthorized()),
        Some(h) => {
            let token = h
                .to_str()
                .ok()
                .and_then(|v| v.strip_prefix("Bearer "))
                .map(str::trim)
                .ok_or_else(StatusError::unauthorized)?;
            shared
                .auth
                .authenticate(token)
                .ok_or_else(StatusError::unauthorized)
        }
    }
}

fn verb(method: &Method, has_name: bool, watch: bool) -> Option<&'static str> {
    Some(match (method.as_str(), has_name) {
        ("GET", true) => "get",
        ("GET", false) if watch => "watch",
        ("GET", false) => "list",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        _ => return None,
    })
}

async fn route(
    shared: &Arc<Shared>,
    method: Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    let path = uri.path();
    match path {
        "/healthz" | "/livez" | "/readyz" => return Ok((StatusCode::OK, "ok").into_response()),
        "/version" | "/version/" => return Ok(json_ok(&discovery::version())),
        _ => {}
    }
    let who = authenticate(shared, headers)?;
    let req = match parse_path(path)? {
        Target::NonResource => return non_resource(shared, path, uri.query(), headers),
        Target::Resource(r) => r,
    };
    let query = Query::parse(uri.query())?;
    let v = verb(&method, req.name.is_some(), query.watch)
        .ok_or_else(StatusError::method_not_allowed)?;
    if !req.rt.verbs.contains(&v) && req.subresource.is_none() {
        return Err(StatusError::method_not_allowed());
    }
    let attrs = Attributes {
        verb: v.into(),
        group: req.rt.group.into(),
        resource: req.rt.resource.into(),
        subresource: req.subresource.clone().unwrap_or_default(),
        namespace: req.namespace.clone(),
        name: req.name.clone().unwrap_or_default(),
    };
    if shared.auth.authorize(&who, &attrs).is_none() {
        let mut e = StatusError::forbidden(AuthTable::forbidden_message(
            &who,
            &attrs,
            &req.rt.qualified(),
        ));
        let mut d = serde_json::json!({ "kind": req.rt.resource });
        if !req.rt.group.is_empty() {
            d["group"] = req.rt.group.into();
        }
        if let Some(n) = &req.name {
            d["name"] = n.clone().into();
        }
        e.details = Some(d);
        return Err(e);
    }
    let body = match method {
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE => {
            axum::body::to_bytes(body, MAX_BODY)
                .await
                .map_err(|_| StatusError::too_large(MAX_BODY))?
        }
        _ => Default::default(),
    };
    let ctx = Ctx {
        shared,
        req,
        query,
        headers,
        who,
    };
    let sub = ctx.req.subresource.as_deref();
    let res = match (method.as_str(), ctx.req.name.is_some(), sub) {
        ("GET", true, _) => handlers::get(&ctx),
        ("GET", false, None) => handlers::list(&ctx).await,
        ("POST", _, None) => handlers::create(&ctx, &body),
        ("PUT", true, Some("finalize")) => handlers::finalize_namespace(&ctx, &body),
        ("PUT", true, _) => handlers::update(&ctx, &body),
        ("PATCH", true, _) => handlers::patch(&ctx, &body),
        ("DELETE", true, None) => handlers::delete(&ctx, &body),
        ("DELETE", false, None) => handlers::delete_collection(&ctx, &body),
        _ => Err(StatusError::method_not_allowed()),
    };
    // KEP-4974: every answer about v1 Endpoints carries the deprecation warning (kubectl prints
    // it) since 1.33.
    if (ctx.req.rt.group, ctx.req.rt.resource) == ("", "endpoints") {
        return res.map(|mut r| {
            r.headers_mut()
                .append("Warning", HeaderValue::from_static(ENDPOINTS_DEPRECATED));
            r
        });
    }
    res
}

/// The `Warning` header of every v1 Endpoints request.
const ENDPOINTS_DEPRECATED: &str =
    "299 - \"v1 Endpoints is deprecated in v1.33+; use discovery.k8s.io/v1 EndpointSlice\"";

fn non_resource(
    shared: &Shared,
    path: &str,
    query: Option<&str>,
    headers: &HeaderMap,
) -> ApiResult<Response> {
    let trimmed = path.trim_end_matches('/');
    let parts: Vec<&str> = trimmed.trim_start_matches('/').split('/').collect();
    let doc = match parts.as_slice() {
        ["api"] => Some(discovery::api_versions(&shared.options.server_address)),
        ["api", "v1"] => discovery::resource_list("", "v1"),
        ["apis"] => Some(discovery::api_groups()),
        ["apis", g] => discovery::api_group(g),
        ["apis", g, v] => discovery::resource_list(g, v),
        ["openapi", "v3"] => Some(openapi::v3_root()),
        ["openapi", "v3", rest @ ..] => {
            let gv = rest.join("/");
            let (text, hash) = openapi::v3_document(&gv).ok_or_else(StatusError::no_route)?;
            let _ = query;
            let mut r = (StatusCode::OK, text).into_response();
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            if let Ok(etag) = HeaderValue::from_str(&format!("\"{hash}\"")) {
                r.headers_mut().insert(header::ETAG, etag);
            }
            r.headers_mut().insert(
                header::CACHE_CONTROL,
                HeaderValue::from_static("public, immutable"),
            );
            if headers
                .get(header::IF_NONE_MATCH)
                .and_then(|v| v.to_str().ok())
                == Some(&format!("\"{hash}\""))
            {
                return Ok(StatusCode::NOT_MODIFIED.into_response());
            }
            return Ok(r);
        }
        _ => None,
    };
    doc.map(|d| json_ok(&d))
        .ok_or_else(|| match parts.as_slice() {
            // Under a served root go-restful answers (empty details); elsewhere the NotFoundHandler.
            ["api", ..] => StatusError::no_route(),
            ["apis", g, ..]
                if super::registry::group_versions()
                    .iter()
                    .any(|(sg, _)| sg == g) =>
            {
                StatusError::no_route()
            }
            _ => StatusError::path_not_found(),
        })
}
