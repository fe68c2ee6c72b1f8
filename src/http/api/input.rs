//! What the API takes from a request, held to what its OpenAPI document says it takes. The
//! document is the rule: [`strict`], a route layer of every API route, refuses a query
//! parameter the operation does not list or gives twice, a value outside the type, range or
//! words the document gives it, a POST body not declared JSON (415), and a JSON body that does
//! not match its schema — each with a `detail` that names the parameter or field and says in
//! plain words what it takes. The extractors here ([`ApiPath`], [`ApiQuery`],
//! [`OptionalJson`]) then only turn what passed into the handler's types. Nothing here knows
//! clusters or permissions: an unknown cluster named in a filter is the handler's 404, and
//! headers (`Idempotency-Key`) are `http::idempotency`'s.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::rejection::PathRejection;
use axum::extract::{FromRequest, FromRequestParts, MatchedPath, Path, Query, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::super::BODY_LIMIT;
use super::super::error::ApiError;

/// Where the API is mounted; the document's paths are relative to it.
pub const API_BASE: &str = "/api/v1";

/// Longest given value a `detail` repeats (a huge value is cut, not echoed whole).
const ECHO_LIMIT: usize = 64;

/// What each operation of the document takes: its query parameters and its JSON body.
pub(super) struct Inputs {
    /// By method and path template as the document writes it (`/clusters/{cluster}`).
    operations: HashMap<(Method, String), Takes>,
    /// The document's named schemas, for `$ref`s.
    schemas: Map<String, Value>,
}

/// What one operation takes.
struct Takes {
    /// Each query parameter with its schema, in the document's order.
    query: Vec<(String, Value)>,
    /// The schema of its JSON body; `None`: it takes none (a GET), and its body is not read.
    body: Option<Value>,
}

impl Inputs {
    /// Reads what each operation takes from the document.
    pub(super) fn new(doc: &utoipa::openapi::OpenApi) -> Self {
        let doc = serde_json::to_value(doc).unwrap_or_default();
        let mut operations = HashMap::new();
        for (path, item) in doc["paths"].as_object().into_iter().flatten() {
            for (method, op) in item.as_object().into_iter().flatten() {
                let Ok(method) = method.to_uppercase().parse::<Method>() else {
                    continue;
                };
                let query = op["parameters"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|p| p["in"] == "query")
                    .filter_map(|p| Some((p["name"].as_str()?.to_owned(), p["schema"].clone())))
                    .collect();
                let body = op
                    .pointer("/requestBody/content/application~1json/schema")
                    .cloned();
                operations.insert((method, path.clone()), Takes { query, body });
            }
        }
        let schemas = doc
            .pointer("/components/schemas")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        Inputs {
            operations,
            schemas,
        }
    }

    /// `schema`, its `$ref` followed.
    fn resolve<'a>(&'a self, schema: &'a Value) -> &'a Value {
        match schema["$ref"].as_str() {
            Some(r) => r
                .strip_prefix("#/components/schemas/")
                .and_then(|name| self.schemas.get(name))
                .unwrap_or(schema),
            None => schema,
        }
    }

    /// Whether `value` is one `schema` allows: the subset of JSON Schema the document uses
    /// (`$ref`, `oneOf`, `type`, `enum`, `minimum`, `maximum`; objects only shallowly, the
    /// body's fields are checked by [`Inputs::check_body`]).
    fn fits(&self, schema: &Value, value: &Value) -> bool {
        let schema = self.resolve(schema);
        if let Some(any) = schema["oneOf"].as_array() {
            return any.iter().any(|s| self.fits(s, value));
        }
        if let Some(words) = schema["enum"].as_array()
            && !words.contains(value)
        {
            return false;
        }
        types(schema).iter().any(|t| match *t {
            "null" => value.is_null(),
            "boolean" => value.is_boolean(),
            "string" => value.is_string(),
            "object" => value.is_object(),
            "integer" => whole(value).is_some_and(|n| {
                whole(&schema["minimum"]).is_none_or(|min| n >= min)
                    && whole(&schema["maximum"]).is_none_or(|max| n <= max)
            }),
            _ => false,
        })
    }

    /// What `schema` allows, in plain words ("a whole number from 1 to 1000").
    fn words(&self, schema: &Value) -> String {
        let schema = self.resolve(schema);
        if let Some(any) = schema["oneOf"].as_array() {
            let each: Vec<String> = any.iter().map(|s| self.words(s)).collect();
            return each.join(" or ");
        }
        let each: Vec<String> = types(schema)
            .iter()
            .map(|t| match *t {
                "null" => "null".to_owned(),
                "boolean" => "true or false".to_owned(),
                "object" => "a JSON object".to_owned(),
                "integer" => match (whole(&schema["minimum"]), whole(&schema["maximum"])) {
                    (Some(min), Some(max)) => format!("a whole number from {min} to {max}"),
                    (Some(min), None) => format!("a whole number, {min} or more"),
                    (None, Some(max)) => format!("a whole number, at most {max}"),
                    (None, None) => "a whole number".to_owned(),
                },
                "string" => match schema["enum"].as_array() {
                    Some(words) => {
                        let words: Vec<&str> = words.iter().filter_map(Value::as_str).collect();
                        format!("one of {}", words.join(", "))
                    }
                    None => "text".to_owned(),
                },
                other => other.to_owned(),
            })
            .collect();
        each.join(" or ")
    }

    /// Every query parameter is one `op` lists, given once, with a value its schema allows.
    fn check_query(&self, what: &str, op: &Takes, query: &str) -> Result<(), ApiError> {
        let mut seen: Vec<String> = Vec::new();
        for (name, given) in form_urlencoded::parse(query.as_bytes()) {
            let Some((_, schema)) = op.query.iter().find(|(n, _)| *n == name) else {
                let takes: Vec<&str> = op.query.iter().map(|(n, _)| n.as_str()).collect();
                return Err(ApiError::BadRequest(match takes.as_slice() {
                    [] => format!(
                        "unknown query parameter {:?}: {what} takes no query parameters",
                        echo(&name)
                    ),
                    _ => format!(
                        "unknown query parameter {:?}: {what} takes {}",
                        echo(&name),
                        takes.join(", ")
                    ),
                }));
            };
            if seen.iter().any(|s| *s == name) {
                return Err(ApiError::BadRequest(format!(
                    "{name}: given more than once; give it once"
                )));
            }
            let value = self.query_value(schema, &given);
            if !self.fits(schema, &value) {
                return Err(ApiError::BadRequest(format!(
                    "{name}: must be {}, not {:?}",
                    self.words(schema),
                    echo(&given)
                )));
            }
            seen.push(name.into_owned());
        }
        Ok(())
    }

    /// A query string value as the JSON value its schema would take: a number or a boolean
    /// when the schema takes one and the text spells one, else the text.
    fn query_value(&self, schema: &Value, given: &str) -> Value {
        let schema = self.resolve(schema);
        let types = types(schema);
        if types.contains(&"integer")
            && let Ok(n) = given.parse::<i128>()
        {
            if let Ok(n) = i64::try_from(n) {
                return Value::from(n);
            }
            if let Ok(n) = u64::try_from(n) {
                return Value::from(n);
            }
        }
        if types.contains(&"boolean")
            && let Ok(b) = given.parse::<bool>()
        {
            return Value::Bool(b);
        }
        Value::String(given.to_owned())
    }

    /// The body is `null` or an object whose every field the schema names, each with a value
    /// its schema allows. A whole number written as a fraction (`3.0`) where the schema takes
    /// an integer is rewritten as one (`3`), which is what the handler's type reads.
    fn check_body(&self, schema: &Value, body: &mut Value) -> Result<(), ApiError> {
        if body.is_null() && self.fits(schema, body) {
            return Ok(());
        }
        let object = match self.resolve(schema)["oneOf"].as_array() {
            Some(any) => any
                .iter()
                .map(|s| self.resolve(s))
                .find(|s| s["type"] == "object"),
            None => Some(self.resolve(schema)),
        };
        let Some(object) = object.filter(|s| s["type"] == "object") else {
            return Err(ApiError::BadRequest(format!(
                "the body must be {}",
                self.words(schema)
            )));
        };
        let empty = Map::new();
        let fields = object["properties"].as_object().unwrap_or(&empty);
        let names: Vec<&str> = fields.keys().map(String::as_str).collect();
        let takes = match names.as_slice() {
            [] => "this request takes no parameters: send nothing, null or {}".to_owned(),
            _ => format!("it takes {}", names.join(", ")),
        };
        let Some(given) = body.as_object_mut() else {
            return Err(ApiError::BadRequest(format!(
                "the body must be a JSON object (or nothing); {takes}"
            )));
        };
        for (name, value) in given {
            let Some(field) = fields.get(name) else {
                return Err(ApiError::BadRequest(format!(
                    "unknown field {:?} in the body; {takes}",
                    echo(name)
                )));
            };
            if !self.fits(field, value) {
                return Err(ApiError::BadRequest(format!(
                    "{name}: must be {}, not {}",
                    self.words(field),
                    echo(&value.to_string())
                )));
            }
            if value.is_f64()
                && let Some(n) = whole(value)
            {
                if let Ok(n) = i64::try_from(n) {
                    *value = Value::from(n);
                } else if let Ok(n) = u64::try_from(n) {
                    *value = Value::from(n);
                }
            }
        }
        Ok(())
    }

    /// Checks a request against what its operation takes; the request, its body buffered, if
    /// it passes.
    async fn admit(&self, req: Request) -> Result<Request, ApiError> {
        let Some(route) = req.extensions().get::<MatchedPath>() else {
            return Ok(req);
        };
        let route = route.as_str();
        let route = route.strip_prefix(API_BASE).unwrap_or(route).to_owned();
        // axum answers HEAD with the GET handler.
        let method = match req.method() {
            &Method::HEAD => Method::GET,
            m => m.clone(),
        };
        // Not an operation of the document: the method router answers 405.
        let Some(op) = self.operations.get(&(method.clone(), route.clone())) else {
            return Ok(req);
        };
        let what = format!("{method} {route}");
        self.check_query(&what, op, req.uri().query().unwrap_or(""))?;
        // Every POST takes a body; a GET's, which HTTP gives no meaning, is not read.
        let Some(schema) = &op.body else {
            return Ok(req);
        };
        let declared = content_type(req.headers());
        let (parts, body) = req.into_parts();
        let bytes = axum::body::to_bytes(body, BODY_LIMIT)
            .await
            .map_err(|e| body_error(&e))?;
        if bytes.is_empty() {
            return Ok(Request::from_parts(parts, Body::empty()));
        }
        if !declared.as_deref().is_some_and(is_json) {
            return Err(ApiError::UnsupportedMediaType(format!(
                "the body of {what} is JSON: send it with Content-Type: application/json ({})",
                match &declared {
                    Some(t) => format!("not {:?}", echo(t)),
                    None => "none was sent".to_owned(),
                }
            )));
        }
        let mut value: Value = serde_json::from_slice(&bytes)
            .map_err(|e| ApiError::BadRequest(format!("the body is not valid JSON: {e}")))?;
        self.check_body(schema, &mut value)?;
        let checked = serde_json::to_vec(&value)
            .map_err(|e| ApiError::Internal(format!("re-encoding a checked body: {e}")))?;
        Ok(Request::from_parts(parts, Body::from(checked)))
    }
}

/// The route layer of every API route: refuses what the document does not say the operation
/// takes, before any handler (or authentication) runs.
pub(super) async fn strict(
    State(inputs): State<Arc<Inputs>>,
    req: Request,
    next: Next,
) -> Response {
    match inputs.admit(req).await {
        Ok(req) => next.run(req).await,
        Err(e) => e.into_response(),
    }
}

/// The types a schema allows (`type` is one name or a list).
fn types(schema: &Value) -> Vec<&str> {
    match &schema["type"] {
        Value::String(t) => vec![t.as_str()],
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

/// A JSON number that is a whole number (`3`, or `3.0` as JSON Schema counts it), of any sign
/// and size JSON numbers here take.
fn whole(v: &Value) -> Option<i128> {
    v.as_i64()
        .map(i128::from)
        .or_else(|| v.as_u64().map(i128::from))
        .or_else(|| {
            // Beyond ±2^64 nothing here takes it anyway; the cast saturates.
            v.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i128)
        })
}

/// `text`, cut to [`ECHO_LIMIT`] characters.
fn echo(text: &str) -> String {
    match text.char_indices().nth(ECHO_LIMIT) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

/// The request's media type (`Content-Type` without its parameters), if it sent one.
fn content_type(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(header::CONTENT_TYPE)?;
    let value = String::from_utf8_lossy(value.as_bytes());
    let essence = value.split(';').next().unwrap_or_default();
    Some(essence.trim().to_ascii_lowercase())
}

/// `application/json` or a `+json` type (`application/merge-patch+json`): the body is JSON.
fn is_json(media_type: &str) -> bool {
    media_type == "application/json"
        || media_type
            .strip_prefix("application/")
            .is_some_and(|sub| sub.ends_with("+json"))
}

/// A body that could not be read: over the limit (413), or broken off.
fn body_error(e: &axum::Error) -> ApiError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if s.is::<http_body_util::LengthLimitError>() {
            return ApiError::TooLarge;
        }
        source = s.source();
    }
    ApiError::BadRequest(format!("could not read the request body: {e}"))
}

/// axum's `Path`, with a path segment that does not decode answered as a 400 problem.
pub(super) struct ApiPath<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for ApiPath<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match Path::<T>::from_request_parts(parts, state).await {
            Ok(Path(v)) => Ok(ApiPath(v)),
            Err(e @ PathRejection::FailedToDeserializePathParams(_)) => Err(ApiError::BadRequest(
                format!("a path segment does not decode: {}", e.body_text()),
            )),
            Err(e) => Err(ApiError::Internal(e.body_text())),
        }
    }
}

/// axum's `Query`, for a query string [`strict`] has checked.
pub(super) struct ApiQuery<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        Query::<T>::try_from_uri(&parts.uri)
            .map(|Query(v)| ApiQuery(v))
            .map_err(|e| ApiError::BadRequest(e.body_text()))
    }
}

/// An optional JSON body that [`strict`] has checked: none, or `null`, is `None`.
pub(super) struct OptionalJson<T>(pub Option<T>);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for OptionalJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = Bytes::from_request(req, state).await.map_err(|e| {
            if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::TooLarge
            } else {
                ApiError::BadRequest(e.body_text())
            }
        })?;
        if bytes.is_empty() {
            return Ok(OptionalJson(None));
        }
        serde_json::from_slice(&bytes)
            .map(OptionalJson)
            .map_err(|e| ApiError::BadRequest(format!("the body: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn inputs() -> Inputs {
        Inputs::new(&super::super::api_router().1)
    }

    fn refusal(r: Result<(), ApiError>) -> String {
        match r {
            Err(ApiError::BadRequest(detail)) => detail,
            other => panic!("not a 400: {other:?}"),
        }
    }

    #[test]
    fn every_whole_number_the_api_takes_has_its_range_in_the_document() {
        let inputs = inputs();
        let mut checked = 0;
        let mut check = |what: &str, schema: &Value| {
            let schema = inputs.resolve(schema);
            if types(schema).contains(&"integer") {
                checked += 1;
                assert!(
                    whole(&schema["minimum"]).is_some() && whole(&schema["maximum"]).is_some(),
                    "{what}: {schema}"
                );
            }
        };
        for ((method, path), op) in &inputs.operations {
            for (name, schema) in &op.query {
                check(&format!("{method} {path} ?{name}"), schema);
            }
            if let Some(body) = &op.body {
                let body = inputs.resolve(body);
                for alt in body["oneOf"].as_array().into_iter().flatten() {
                    let alt = inputs.resolve(alt);
                    for (name, field) in alt["properties"].as_object().into_iter().flatten() {
                        check(&format!("{method} {path} body {name}"), field);
                    }
                }
            }
        }
        assert!(checked >= 6, "{checked}");
    }

    #[test]
    fn query_parameters_are_held_to_the_document() {
        let inputs = inputs();
        let targets = &inputs.operations[&(Method::GET, "/clusters/{cluster}/targets".into())];
        let check = |q: &str| inputs.check_query("GET /clusters/{cluster}/targets", targets, q);
        assert!(check("owner=a&state=owned&q=x&limit=1000&cursor=abc").is_ok());
        assert_eq!(
            refusal(check("ownr=a")),
            "unknown query parameter \"ownr\": GET /clusters/{cluster}/targets takes owner, \
             state, q, cursor, limit"
        );
        for bad in [
            "limit=-1",
            "limit=0",
            "limit=1001",
            "limit=x",
            "limit=1.5",
            "limit=",
        ] {
            let detail = refusal(check(bad));
            assert!(
                detail.starts_with("limit: must be a whole number from 1 to 1000, not "),
                "{bad}: {detail}"
            );
        }
        assert_eq!(
            refusal(check("state=bogus")),
            "state: must be one of owned, unassigned, moving, expired, unworked, orphaned, not \"bogus\""
        );
        assert_eq!(
            refusal(check("limit=1&limit=2")),
            "limit: given more than once; give it once"
        );
        let clusters = &inputs.operations[&(Method::GET, "/clusters".into())];
        assert_eq!(
            refusal(inputs.check_query("GET /clusters", clusters, "x=1")),
            "unknown query parameter \"x\": GET /clusters takes no query parameters"
        );
        let long = format!("{}=1", "p".repeat(1000));
        assert!(refusal(check(&long)).len() < 200, "a long name is cut");
    }

    #[test]
    fn bodies_are_held_to_the_document() {
        let inputs = inputs();
        let rebalance = &inputs.operations[&(Method::POST, "/clusters/{cluster}/rebalance".into())];
        let schema = rebalance.body.as_ref().unwrap();
        let check = |mut v: Value| inputs.check_body(schema, &mut v);
        for ok in [
            json!(null),
            json!({}),
            json!({"dry_run": false, "max_moves": 3, "plan_id": "p-1", "reason": "r"}),
            json!({"max_moves": null}),
            json!({"max_moves": 3.0}),
        ] {
            assert!(check(ok.clone()).is_ok(), "{ok}");
        }
        let mut fraction = json!({"max_moves": 3.0});
        inputs.check_body(schema, &mut fraction).unwrap();
        assert_eq!(fraction, json!({"max_moves": 3}), "read as a whole number");
        let detail = refusal(check(json!({"max_moves": 2.5})));
        assert!(detail.ends_with("not 2.5"), "{detail}");
        // Read exactly (serde_json's float_roundtrip): without it this body's number was read
        // as 4439200373714158.5, one step of a double off, and refused (Schemathesis found it).
        let mut big: Value = serde_json::from_str(r#"{"max_moves": 4439200373714158.0}"#).unwrap();
        inputs.check_body(schema, &mut big).unwrap();
        assert_eq!(big, json!({"max_moves": 4439200373714158u64}));
        let detail = refusal(check(json!({"max_moves": -3})));
        assert!(
            detail.starts_with("max_moves: must be a whole number from 1 to ")
                && detail.ends_with("or null, not -3"),
            "{detail}"
        );
        assert_eq!(
            refusal(check(json!({"dry_run": "no"}))),
            "dry_run: must be true or false, not \"no\""
        );
        assert_eq!(
            refusal(check(json!({"bogus": 1}))),
            "unknown field \"bogus\" in the body; it takes dry_run, max_moves, plan_id, reason"
        );
        assert!(refusal(check(json!([1]))).starts_with("the body must be a JSON object"));
        let cancel = &inputs.operations[&(Method::POST, "/operations/{id}/cancel".into())];
        let schema = cancel.body.as_ref().unwrap();
        assert!(inputs.check_body(schema, &mut json!({})).is_ok());
        assert_eq!(
            refusal(inputs.check_body(schema, &mut json!({"now": true}))),
            "unknown field \"now\" in the body; this request takes no parameters: send nothing, \
             null or {}"
        );
    }

    #[test]
    fn the_documented_idempotency_key_is_the_one_taken() {
        let doc = serde_json::to_value(super::super::api_router().1).unwrap();
        let mut posts = 0;
        for item in doc["paths"].as_object().unwrap().values() {
            let Some(params) = item["post"]["parameters"].as_array() else {
                continue;
            };
            posts += 1;
            let key = params
                .iter()
                .find(|p| p["name"] == "Idempotency-Key" && p["in"] == "header")
                .unwrap_or_else(|| panic!("no Idempotency-Key: {params:?}"));
            assert_eq!(key["schema"]["minLength"], 1, "{key}");
            let max = crate::http::idempotency::MAX_KEY_LEN;
            assert_eq!(key["schema"]["maxLength"], max, "{key}");
        }
        assert_eq!(posts, 6);
    }

    #[test]
    fn every_post_takes_a_json_body_and_no_get_does() {
        let inputs = inputs();
        for ((method, path), op) in &inputs.operations {
            assert_eq!(
                op.body.is_some(),
                *method == Method::POST,
                "{method} {path}: {:?}",
                op.body
            );
        }
    }

    #[test]
    fn json_media_types() {
        for t in ["application/json", "application/merge-patch+json"] {
            assert!(is_json(t), "{t}");
        }
        for t in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "application/jsonx",
            "json",
        ] {
            assert!(!is_json(t), "{t}");
        }
        let mut h = HeaderMap::new();
        h.insert(
            header::CONTENT_TYPE,
            "Application/JSON; charset=utf-8".parse().unwrap(),
        );
        assert_eq!(content_type(&h).as_deref(), Some("application/json"));
    }
}
