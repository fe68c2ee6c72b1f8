//! Resource requests: get, list, watch, create, update, patch, delete, deletecollection and the
//! review resources, with kube-apiserver's order of checks (decode → admission → validation →
//! precondition → commit). Every read-modify-write happens inside one store transaction, so a
//! `resourceVersion` precondition is a true compare-and-swap.

use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use bytes::{BufMut, Bytes, BytesMut};
use serde_json::{Value, json};

use super::apply::{self, Manager};
use super::auth::Identity;
use super::convert;
use super::openapi;
use super::registry::{self, ResourceType, TypeId};
use super::request::{Query, ResourceRequest, parse_rv};
use super::schema::NodeId;
use super::selector::{FieldSelector, LabelSelector};
use super::smp;
use super::status::{ApiResult, Cause, StatusError};
use super::store::{ListQuery, Stored, Txn};
use super::strategy::{self, meta_mut};
use super::table::{self, IncludeObject};
use super::watch::{self, Encoder, Filter, Start, WatchSpec};
use super::{Shared, now_rfc3339};

/// The default watch duration without `timeoutSeconds` (the apiserver's min-request-timeout).
const DEFAULT_WATCH_TIMEOUT: Duration = Duration::from_secs(1800);
/// How long a list with a future resourceVersion waits for the store to catch up.
const FUTURE_RV_WAIT: Duration = Duration::from_secs(3);

/// How an answer is encoded (from the Accept header).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Json,
    Table(IncludeObject),
    PartialMetadata,
}

/// Picks the response format from `Accept`, like the apiserver's content negotiation.
pub fn negotiate(headers: &HeaderMap, include: IncludeObject) -> ApiResult<Format> {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if accept.trim().is_empty() {
        return Ok(Format::Json);
    }
    for item in accept.split(',') {
        let mut parts = item.split(';').map(str::trim);
        let media = parts.next().unwrap_or("");
        let params: Vec<(&str, &str)> = parts.filter_map(|p| p.split_once('=')).collect();
        let param = |k: &str| params.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
        if !matches!(media, "application/json" | "*/*" | "application/*") {
            continue;
        }
        match (param("as"), param("g"), param("v")) {
            (None, _, _) => return Ok(Format::Json),
            (Some("Table"), Some("meta.k8s.io"), Some("v1" | "v1beta1")) => {
                return Ok(Format::Table(include));
            }
            (
                Some("PartialObjectMetadata" | "PartialObjectMetadataList"),
                Some("meta.k8s.io"),
                Some("v1" | "v1beta1"),
            ) => {
                return Ok(Format::PartialMetadata);
            }
            _ => continue,
        }
    }
    Err(StatusError::not_acceptable(accept))
}

/// Everything a handler needs about one request.
pub struct Ctx<'a> {
    pub shared: &'a Shared,
    pub req: ResourceRequest,
    pub query: Query,
    pub headers: &'a HeaderMap,
    pub who: Identity,
}

/// Storage of a request's type and whether objects are converted on the way (events.k8s.io).
fn storage(rt: &ResourceType, type_id: TypeId) -> (TypeId, bool) {
    if rt.group == "events.k8s.io" {
        (registry::id_of("", "events"), true)
    } else {
        (type_id, false)
    }
}

fn to_view(converted: bool, v: Value) -> Value {
    if converted {
        convert::event_from_core(&v)
    } else {
        v
    }
}

fn json_response(code: StatusCode, body: Vec<u8>) -> Response {
    let mut r = (code, body).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

fn value_response(code: StatusCode, v: &Value) -> Response {
    json_response(code, serde_json::to_vec(v).unwrap_or_default())
}

impl Ctx<'_> {
    fn rt(&self) -> &'static ResourceType {
        self.req.rt
    }

    fn node(&self) -> Option<NodeId> {
        let rt = self.rt();
        self.shared.schema.kind(rt.group, rt.version, rt.kind)
    }

    fn name(&self) -> &str {
        self.req.name.as_deref().unwrap_or_default()
    }

    fn format(&self) -> ApiResult<Format> {
        negotiate(self.headers, IncludeObject::parse(None))
    }

    /// Renders one object in the negotiated format.
    fn render(&self, format: Format, v: &Value) -> Value {
        match format {
            Format::Json => v.clone(),
            Format::PartialMetadata => table::partial_metadata(v),
            Format::Table(inc) => {
                let rv = v
                    .pointer("/metadata/resourceVersion")
                    .cloned()
                    .unwrap_or(json!(""));
                table::table(
                    self.rt(),
                    std::slice::from_ref(v),
                    json!({ "resourceVersion": rv }),
                    jiff::Timestamp::now(),
                    inc,
                    true,
                )
            }
        }
    }

    fn manager(&self) -> String {
        if let Some(m) = &self.query.field_manager {
            return m.clone();
        }
        let ua = self
            .headers
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("unknown");
        ua.split('/')
            .next()
            .unwrap_or(ua)
            .chars()
            .take(128)
            .collect()
    }
}

// ---------------------------------------------------------------------------------------------
// Reads

/// Marking an object for deletion bumps a generation it has (the registry's `BeforeDelete`
/// and `markAsDeleting`; found by the real tier for pods).
fn bump_generation(v: &mut Value) {
    if let Some(g) = v.pointer("/metadata/generation").and_then(Value::as_i64)
        && g > 0
    {
        meta_mut(v).insert("generation".into(), json!(g + 1));
    }
}

/// A typed list's item: the apiserver's JSON lists carry no `kind`/`apiVersion` per item.
fn without_type_meta(mut v: Value) -> Value {
    if let Some(o) = v.as_object_mut() {
        o.shift_remove("kind");
        o.shift_remove("apiVersion");
    }
    v
}

/// GET of one object.
pub fn get(ctx: &Ctx<'_>) -> ApiResult<Response> {
    let rt = ctx.rt();
    let format = ctx.format()?;
    let (sid, converted) = storage(rt, ctx.req.type_id);
    let obj = ctx
        .shared
        .store
        .get(sid, &ctx.req.namespace, ctx.name())
        .ok_or_else(|| StatusError::not_found(rt, ctx.name()))?;
    if format == Format::Json && !converted {
        return Ok(json_response(StatusCode::OK, obj.json.to_vec()));
    }
    Ok(value_response(
        StatusCode::OK,
        &ctx.render(format, &to_view(converted, obj.value())),
    ))
}

struct Selectors {
    labels: Option<LabelSelector>,
    fields: Option<FieldSelector>,
}

fn selectors(ctx: &Ctx<'_>) -> ApiResult<Selectors> {
    let rt = ctx.rt();
    let (labels, fields) = super::selector::parse_list_selectors(
        ctx.query.label_selector.as_deref().unwrap_or(""),
        ctx.query.field_selector.as_deref().unwrap_or(""),
        rt.group,
        rt.version,
        rt.kind,
    )
    .map_err(|e| StatusError::bad_request(e.to_string()))?;
    Ok(Selectors {
        labels: Some(labels),
        fields: Some(fields),
    })
}

fn filter_of(sel: Selectors) -> (Filter, bool) {
    let filtered = sel.labels.as_ref().is_some_and(|l| !l.is_empty())
        || sel.fields.as_ref().is_some_and(|f| !f.is_empty());
    let f: Filter = Arc::new(move |o: &Stored| {
        sel.labels.as_ref().is_none_or(|l| l.matches(&o.labels))
            && sel
                .fields
                .as_ref()
                .is_none_or(|f| f.matches(&|name| o.field(name)))
    });
    (f, filtered)
}

fn encode_continue(rv: u64, key: &(String, String)) -> String {
    let start = format!("{}/{}\u{0}", key.0, key.1);
    let token = json!({ "v": "meta.k8s.io/v1", "rv": rv, "start": start });
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(serde_json::to_vec(&token).unwrap_or_default())
}

fn decode_continue(token: &str) -> ApiResult<(u64, (String, String))> {
    use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
    /// Go's `base64.RawURLEncoding`: no padding, lenient about trailing bits.
    const RAW_URL: GeneralPurpose = GeneralPurpose::new(
        &base64::alphabet::URL_SAFE,
        GeneralPurposeConfig::new()
            .with_encode_padding(false)
            .with_decode_allow_trailing_bits(true)
            .with_decode_padding_mode(DecodePaddingMode::RequireNone),
    );
    // `storage.DecodeContinue`'s errors, wrapped as the list handler wraps them.
    const INVALID: &str = "continue key is not valid";
    let bad = |why: String| StatusError::bad_request(format!("invalid continue token: {why}"));
    let raw = RAW_URL.decode(token).map_err(|e| {
        let at = match e {
            base64::DecodeError::InvalidByte(at, _)
            | base64::DecodeError::InvalidLastSymbol(at, _) => at,
            _ => token.len(),
        };
        bad(format!("{INVALID}: illegal base64 data at input byte {at}"))
    })?;
    let v: Value = serde_json::from_slice(&raw)
        .map_err(|e| bad(format!("{INVALID}: {}", go_json_error(&raw, &e))))?;
    let version = v["v"].as_str().unwrap_or_default();
    if version != "meta.k8s.io/v1" {
        return Err(bad(format!(
            "{INVALID} server does not recognize this encoded version {version:?}"
        )));
    }
    let rv = v["rv"].as_u64().filter(|r| *r > 0).ok_or_else(|| {
        bad(format!(
            "{INVALID}: incorrect encoded start resourceVersion (version meta.k8s.io/v1)"
        ))
    })?;
    let start = v["start"].as_str().unwrap_or_default();
    if start.is_empty() {
        return Err(bad(format!(
            "{INVALID}: encoded start key empty (version meta.k8s.io/v1)"
        )));
    }
    let start = start.strip_suffix('\u{0}').unwrap_or(start);
    let (ns, name) = start
        .split_once('/')
        .ok_or_else(|| bad(INVALID.to_owned()))?;
    Ok((rv, (ns.to_owned(), name.to_owned())))
}

/// Go's `encoding/json` wording for the common syntax errors (a bad first character, empty
/// input); serde_json's own text otherwise.
fn go_json_error(data: &[u8], err: &serde_json::Error) -> String {
    let Some(&c) = data.iter().find(|b| !b.is_ascii_whitespace()) else {
        return "unexpected end of JSON input".to_owned();
    };
    if matches!(
        c,
        b'{' | b'[' | b'"' | b'-' | b'0'..=b'9' | b't' | b'f' | b'n'
    ) {
        return err.to_string();
    }
    let quoted = match c {
        b'\'' => "'\\''".to_owned(),
        b'"' => "'\"'".to_owned(),
        _ => {
            let q = super::selector::go_quote(&char::from(c).to_string());
            format!("'{}'", &q[1..q.len() - 1])
        }
    };
    format!("invalid character {quoted} looking for beginning of value")
}

/// The 410 a continue token gets once its resourceVersion is compacted.
fn continue_expired() -> StatusError {
    StatusError::expired(
        "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.",
    )
}

/// LIST (or WATCH when `watch=true`).
pub async fn list(ctx: &Ctx<'_>) -> ApiResult<Response> {
    ctx.query.validate_list(ctx.shared.options.watch_list)?;
    let rt = ctx.rt();
    let format = ctx.format()?;
    let (sid, converted) = storage(rt, ctx.req.type_id);
    let sel = selectors(ctx)?;
    let namespace = (!ctx.req.namespace.is_empty()).then(|| ctx.req.namespace.clone());
    if ctx.query.watch {
        return watch_response(ctx, format, sid, converted, namespace, sel);
    }
    let (filter, filtered) = filter_of(sel);
    let store = &ctx.shared.store;
    let (at, after) = match &ctx.query.continue_token {
        Some(tok) => {
            let (rv, key) = decode_continue(tok)?;
            (Some(rv), Some(key))
        }
        None => {
            let asked = ctx.query.rv_number()?;
            let exact = ctx.query.resource_version_match.as_deref() == Some("Exact");
            if let Some(rv) = asked {
                wait_for_rv(ctx, rv).await?;
            }
            (if exact { asked } else { None }, None)
        }
    };
    let q = ListQuery {
        type_id: sid,
        namespace: namespace.as_deref(),
        at,
        after,
        limit: ctx.query.limit,
        filter: &*filter,
        filtered,
    };
    let page = store.list(&q).map_err(|c| {
        if ctx.query.continue_token.is_some() {
            continue_expired()
        } else {
            StatusError::expired(format!(
                "The resourceVersion for the provided list is too old. ({})",
                c.compacted
            ))
        }
    })?;
    let mut meta = json!({ "resourceVersion": page.rv.to_string() });
    if let Some(key) = &page.last_key {
        meta["continue"] = json!(encode_continue(page.rv, key));
        if let Some(rem) = page.remaining {
            meta["remainingItemCount"] = json!(rem);
        }
    }
    match format {
        Format::Json if !converted => {
            let mut b = BytesMut::with_capacity(
                page.items.iter().map(|i| i.json.len() + 1).sum::<usize>() + 256,
            );
            let head =
                json!({ "kind": rt.list_kind(), "apiVersion": rt.api_version(), "metadata": meta });
            let head = serde_json::to_vec(&head).unwrap_or_default();
            b.put_slice(&head[..head.len() - 1]);
            b.put_slice(b",\"items\":[");
            for (i, item) in page.items.iter().enumerate() {
                if i > 0 {
                    b.put_u8(b',');
                }
                b.put_slice(&item.list_item_json());
            }
            b.put_slice(b"]}");
            Ok(json_response(StatusCode::OK, b.to_vec()))
        }
        Format::Json => {
            let items: Vec<Value> = page
                .items
                .iter()
                .map(|i| without_type_meta(to_view(true, i.value())))
                .collect();
            Ok(value_response(
                StatusCode::OK,
                &json!({ "kind": rt.list_kind(), "apiVersion": rt.api_version(), "metadata": meta, "items": items }),
            ))
        }
        Format::PartialMetadata => {
            let items: Vec<Value> = page
                .items
                .iter()
                .map(|i| table::partial_metadata(&i.value()))
                .collect();
            Ok(value_response(
                StatusCode::OK,
                &json!({ "kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1", "metadata": meta, "items": items }),
            ))
        }
        Format::Table(inc) => {
            let items: Vec<Value> = page
                .items
                .iter()
                .map(|i| to_view(converted, i.value()))
                .collect();
            Ok(value_response(
                StatusCode::OK,
                &table::table(rt, &items, meta, jiff::Timestamp::now(), inc, true),
            ))
        }
    }
}

async fn wait_for_rv(ctx: &Ctx<'_>, rv: u64) -> ApiResult<()> {
    let store = &ctx.shared.store;
    if store.rv() >= rv {
        return Ok(());
    }
    let mut rx = store.subscribe();
    let deadline = tokio::time::Instant::now() + FUTURE_RV_WAIT;
    while store.rv() < rv {
        if tokio::time::timeout_at(deadline, rx.changed())
            .await
            .is_err()
        {
            return Err(StatusError::too_large_resource_version(rv, store.rv()));
        }
    }
    Ok(())
}

fn watch_response(
    ctx: &Ctx<'_>,
    format: Format,
    sid: TypeId,
    converted: bool,
    namespace: Option<String>,
    sel: Selectors,
) -> ApiResult<Response> {
    let rt = ctx.rt();
    let q = &ctx.query;
    let start = match (q.send_initial_events, q.rv_number()?) {
        (Some(true), _) => Start::Initial {
            end_bookmark: q.allow_bookmarks,
        },
        (Some(false), Some(rv)) => Start::After(rv),
        (Some(false), None) => Start::After(ctx.shared.store.rv()),
        (None, None)
            if q.resource_version.as_deref() == Some("0")
                || q.resource_version.as_deref().unwrap_or("").is_empty() =>
        {
            Start::Initial {
                end_bookmark: false,
            }
        }
        (None, Some(rv)) => Start::After(rv),
        (None, None) => Start::Initial {
            end_bookmark: false,
        },
    };
    let (filter, _) = filter_of(sel);
    let now_rt: &'static ResourceType = rt;
    let encode: Encoder = Arc::new(move |o: &Stored, first: bool| match (format, converted) {
        (Format::Json, false) => o.json.clone(),
        (Format::Json, true) => {
            Bytes::from(serde_json::to_vec(&to_view(true, o.value())).unwrap_or_default())
        }
        (Format::PartialMetadata, _) => Bytes::from(
            serde_json::to_vec(&table::partial_metadata(&o.value())).unwrap_or_default(),
        ),
        (Format::Table(inc), _) => {
            let v = to_view(converted, o.value());
            let meta = json!({ "resourceVersion": o.rv.to_string() });
            Bytes::from(
                serde_json::to_vec(&table::table(
                    now_rt,
                    &[v],
                    meta,
                    jiff::Timestamp::now(),
                    inc,
                    first,
                ))
                .unwrap_or_default(),
            )
        }
    });
    let (kind, api_version) = match format {
        Format::Json => (rt.kind.to_owned(), rt.api_version()),
        Format::PartialMetadata => (
            "PartialObjectMetadata".to_owned(),
            "meta.k8s.io/v1".to_owned(),
        ),
        Format::Table(_) => ("Table".to_owned(), "meta.k8s.io/v1".to_owned()),
    };
    let spec = WatchSpec {
        storage_type: sid,
        namespace,
        filter,
        encode,
        start,
        bookmarks: q.allow_bookmarks,
        bookmark_interval: ctx.shared.options.bookmark_interval,
        timeout: q
            .timeout_seconds
            .map(Duration::from_secs)
            .unwrap_or(DEFAULT_WATCH_TIMEOUT),
        kind,
        api_version,
    };
    let body = axum::body::Body::from_stream(watch::stream(ctx.shared.store.clone(), spec));
    let mut resp = (StatusCode::OK, body).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, private"),
    );
    Ok(resp)
}

// ---------------------------------------------------------------------------------------------
// Decoding

/// Decodes a create/update body the way the apiserver's JSON serializer and versioning
/// decoder do: find apiVersion/kind (defaulted from the endpoint), decode into that kind,
/// convert to the endpoint's kind, check the group-version; then Go typing and the
/// `fieldValidation` directive (unknown fields rejected, reported or dropped). Decoding errors
/// carry `transformDecodeError`'s wording.
/// The request body as JSON: protobuf bodies (kubectl's typed clients send them) are decoded
/// through the vendored `.proto` definitions first.
fn json_body<'a>(ctx: &Ctx<'_>, body: &'a [u8]) -> ApiResult<std::borrow::Cow<'a, [u8]>> {
    let ct = ctx
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !super::protobuf::is_protobuf(ct) {
        return Ok(std::borrow::Cow::Borrowed(body));
    }
    let v = super::protobuf::decode(body).map_err(|e| StatusError::bad_request(e.to_string()))?;
    Ok(std::borrow::Cow::Owned(
        serde_json::to_vec(&v).unwrap_or_default(),
    ))
}

fn decode_object(ctx: &Ctx<'_>, body: &[u8], warnings: &mut Vec<String>) -> ApiResult<Value> {
    let rt = ctx.rt();
    let body = &*json_body(ctx, body)?;
    let unrecognized = |why: String| {
        StatusError::bad_request(format!(
            "the object provided is unrecognized (must be of type {}): couldn't get version/kind; json parse error: {why} ({})",
            rt.kind,
            summarize(body)
        ))
    };
    let mut v: Value = serde_json::from_slice(body).map_err(|e| unrecognized(e.to_string()))?;
    if v.is_null() {
        v = json!({});
    }
    if !v.is_object() {
        return Err(unrecognized(format!(
            "json: cannot unmarshal {} into Go value of type struct {{ APIVersion string \"json:\\\"apiVersion,omitempty\\\"\"; Kind string \"json:\\\"kind,omitempty\\\"\" }}",
            go_json_type(&v)
        )));
    }
    for field in ["apiVersion", "kind"] {
        if let Some(x) = v.get(field).filter(|x| !x.is_string() && !x.is_null()) {
            return Err(unrecognized(format!(
                "json: cannot unmarshal {} into Go struct field .{field} of type string",
                go_json_type(x)
            )));
        }
    }
    let (group, version, kind) = body_gvk(rt, &v);
    let prefix = format!(
        "{kind} in version {version:?} cannot be handled as a {}: ",
        rt.kind
    );
    if (group.as_str(), version.as_str(), kind.as_str()) != (rt.group, rt.version, rt.kind) {
        let gv = if group.is_empty() {
            version.clone()
        } else {
            format!("{group}/{version}")
        };
        return Err(StatusError::bad_request(
            if !registered(&group, &version, &kind) {
                format!(
                    "{prefix}no kind {kind:?} is registered for version {gv:?} in scheme \"pkg/api/legacyscheme/scheme.go:30\""
                )
            } else if kind != rt.kind {
                format!(
                    "{prefix}converting ({version}.{kind}) to ({}.{}): unknown conversion",
                    internal_package(rt.group),
                    rt.kind
                )
            } else {
                format!(
                    "the API version in the data ({gv}) does not match the expected API version ({})",
                    rt.api_version()
                )
            },
        ));
    }
    v["apiVersion"] = json!(rt.api_version());
    v["kind"] = json!(rt.kind);
    let (_, converted) = storage(rt, ctx.req.type_id);
    strict_fields(ctx, Some(body), &mut v, warnings, &|problems| {
        StatusError::bad_request(format!("{prefix}{problems}"))
    })?;
    strategy::typecheck(rt, &v).map_err(|e| StatusError::bad_request(format!("{prefix}{e}")))?;
    if converted {
        v = convert::event_to_core(&v);
    }
    Ok(v)
}

/// The group, version and kind a body declares, defaulted from the endpoint as the JSON
/// serializer's `gvkWithDefaults` does.
fn body_gvk(rt: &ResourceType, v: &Value) -> (String, String, String) {
    let api_version = v["apiVersion"].as_str().unwrap_or_default();
    let (mut group, mut version) = match api_version.split_once('/') {
        Some((g, ver)) => (g.to_owned(), ver.to_owned()),
        None => (String::new(), api_version.to_owned()),
    };
    let mut kind = v["kind"].as_str().unwrap_or_default().to_owned();
    if kind.is_empty() {
        kind = rt.kind.to_owned();
    }
    if version.is_empty() && group.is_empty() {
        group = rt.group.to_owned();
        version = rt.version.to_owned();
    }
    if version.is_empty() && group == rt.group {
        version = rt.version.to_owned();
    }
    (group, version, kind)
}

/// Older versions of the served groups that kube-apiserver's scheme still decodes (the
/// version check then refuses them).
const OLDER_VERSIONS: &[(&str, &str)] = &[
    ("coordination.k8s.io", "v1beta1"),
    ("discovery.k8s.io", "v1beta1"),
    ("events.k8s.io", "v1beta1"),
    ("authentication.k8s.io", "v1beta1"),
    ("authorization.k8s.io", "v1beta1"),
];

/// Whether the apiserver's scheme knows this group/version/kind (as far as the simulator
/// can tell: its own kinds, in their served and older versions).
fn registered(group: &str, version: &str, kind: &str) -> bool {
    registry::TYPES.iter().any(|t| {
        t.group == group
            && t.kind == kind
            && (t.version == version || OLDER_VERSIONS.contains(&(group, version)))
    })
}

/// The Go package of a group's internal types, for conversion error messages.
fn internal_package(group: &str) -> &str {
    match group {
        "" | "events.k8s.io" => "core",
        g => g.split('.').next().unwrap_or(g),
    }
}

/// `summarizeData(body, 30)` of the apiserver's decode errors.
fn summarize(body: &[u8]) -> String {
    const MAX: usize = 30;
    match body.first() {
        None => "<empty>".to_owned(),
        Some(b'{') if body.len() > MAX => format!("{} ...", String::from_utf8_lossy(&body[..MAX])),
        Some(b'{') => String::from_utf8_lossy(body).into_owned(),
        Some(_) => {
            let hex: String = body.iter().take(MAX).map(|b| format!("{b:02x}")).collect();
            if body.len() > MAX {
                format!("{hex} ...")
            } else {
                hex
            }
        }
    }
}

/// The JSON type name Go's `encoding/json` uses in unmarshal errors.
fn go_json_type(v: &Value) -> &'static str {
    match v {
        Value::Array(_) => "array",
        Value::Object(_) => "object",
        Value::String(_) => "string",
        Value::Number(_) => "number",
        Value::Bool(_) => "bool",
        Value::Null => "null",
    }
}

/// Applies the `fieldValidation` directive and always drops unknown fields, as decoding into
/// Go structs does. `strict_error` turns `strict decoding error: …` into the request's error.
fn strict_fields(
    ctx: &Ctx<'_>,
    raw: Option<&[u8]>,
    v: &mut Value,
    warnings: &mut Vec<String>,
    strict_error: &dyn Fn(String) -> StatusError,
) -> ApiResult<()> {
    let Some(node) = ctx.node() else {
        return Ok(());
    };
    let directive = ctx
        .query
        .field_validation
        .as_deref()
        .filter(|d| !d.is_empty())
        .unwrap_or("Warn");
    let problems: Vec<String> = match raw {
        Some(raw) => match openapi::strict_errors(ctx.shared.schema, node, raw) {
            Ok(errs) => errs.iter().map(ToString::to_string).collect(),
            Err(_) => openapi::unknown_fields(ctx.shared.schema, node, v)
                .iter()
                .map(|f| format!("unknown field {f:?}"))
                .collect(),
        },
        None => openapi::unknown_fields(ctx.shared.schema, node, v)
            .iter()
            .map(|f| format!("unknown field {f:?}"))
            .collect(),
    };
    if !problems.is_empty() {
        match directive {
            "Strict" => {
                return Err(strict_error(format!(
                    "strict decoding error: {}",
                    problems.join(", ")
                )));
            }
            "Warn" => warnings.extend(problems),
            _ => {}
        }
    }
    prune(ctx.shared.schema, node, v);
    Ok(())
}

/// Removes fields the schema does not know.
fn prune(schema: &super::schema::Schema, node: NodeId, v: &mut Value) {
    use super::schema::Shape;
    match (&schema.node(node).shape, v) {
        (Shape::Object { fields, additional }, Value::Object(map)) => {
            map.retain(|k, _| fields.contains_key(k) || additional.is_some());
            for (k, child) in map.iter_mut() {
                if let Some(n) = fields.get(k).copied().or(*additional) {
                    prune(schema, n, child);
                }
            }
        }
        (Shape::Array { items }, Value::Array(list)) => {
            for child in list {
                prune(schema, *items, child);
            }
        }
        _ => {}
    }
}

fn with_warnings(mut resp: Response, warnings: &[String]) -> Response {
    for w in warnings {
        if let Ok(h) = HeaderValue::from_str(&format!("299 - {:?}", w)) {
            resp.headers_mut().append("Warning", h);
        }
    }
    resp
}

// ---------------------------------------------------------------------------------------------
// Writes

fn admit_namespace(ctx: &Ctx<'_>, txn: &Txn<'_>, name: &str) -> ApiResult<()> {
    let rt = ctx.rt();
    if !rt.namespaced {
        return Ok(());
    }
    let ns_type = registry::id_of("", "namespaces");
    let ns = txn
        .get(ns_type, "", &ctx.req.namespace)
        .ok_or_else(|| StatusError::not_found(registry::get(ns_type), &ctx.req.namespace))?;
    if ns.field("status.phase").as_deref() == Some("Terminating") {
        return Err(StatusError::namespace_terminating(
            rt,
            name,
            &ctx.req.namespace,
        ));
    }
    Ok(())
}

fn manager<'a>(
    ctx: &'a Ctx<'_>,
    name: &'a str,
    time: &'a str,
    api_version: &'a str,
) -> Manager<'a> {
    Manager {
        name,
        api_version,
        time,
        subresource: ctx.req.subresource.as_deref(),
    }
}

/// Prepares a new object for storage: name, namespace, system metadata, defaults, validation.
/// Returns the name and, for kinds whose stored form is not what the field manager sees, that
/// view ([`strategy::field_manager_view`]).
fn prepare_new(
    ctx: &Ctx<'_>,
    txn: &Txn<'_>,
    v: &mut Value,
    applied: bool,
) -> ApiResult<(String, Option<Value>)> {
    let rt = ctx.rt();
    let meta = meta_mut(v);
    if rt.namespaced {
        let ns = meta
            .get("namespace")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if !ns.is_empty() && ns != ctx.req.namespace {
            return Err(StatusError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        meta.insert("namespace".into(), json!(ctx.req.namespace));
    } else {
        meta.remove("namespace");
    }
    let (sid, _) = storage(rt, ctx.req.type_id);
    let mut name = meta
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    if name.is_empty()
        && let Some(prefix) = meta
            .get("generateName")
            .and_then(Value::as_str)
            .filter(|p| !p.is_empty())
    {
        name = super::names::generate(prefix);
        while txn.get(sid, &ctx.req.namespace, &name).is_some() {
            name = super::names::generate(prefix);
        }
        meta.insert("name".into(), json!(name));
    }
    for k in [
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "selfLink",
    ] {
        meta.remove(k);
    }
    if !applied {
        meta.remove("managedFields");
    }
    meta.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
    meta.insert("creationTimestamp".into(), json!(now_rfc3339()));
    let view = strategy::field_manager_view(rt, v);
    if rt.kind == "Service" {
        super::services::allocate(txn, v)?;
    }
    strategy::prepare_create(rt, v);
    Ok((name, view))
}

/// POST: create.
pub fn create(ctx: &Ctx<'_>, body: &[u8]) -> ApiResult<Response> {
    let rt = ctx.rt();
    if ctx.req.name.is_some() {
        return Err(StatusError::method_not_allowed());
    }
    check_body_type(ctx)?;
    ctx.query
        .validate_write_options("CreateOptions", Vec::new())?;
    let mut warnings = Vec::new();
    let mut v = decode_object(ctx, body, &mut warnings)?;
    if rt.review {
        return review(ctx, v);
    }
    let (code, out) = ctx
        .shared
        .store
        .transact(|txn| create_in(ctx, txn, &mut v, None))?;
    Ok(with_warnings(
        value_response(code, &ctx.render(ctx.format()?, &out)),
        &warnings,
    ))
}

/// Creates `v` inside a transaction; `applied` carries managedFields already computed by an
/// apply. Returns the stored object in the request's view.
fn create_in(
    ctx: &Ctx<'_>,
    txn: &mut Txn<'_>,
    v: &mut Value,
    applied: Option<()>,
) -> ApiResult<(StatusCode, Value)> {
    let rt = ctx.rt();
    let (sid, converted) = storage(rt, ctx.req.type_id);
    let (name, view) = prepare_new(ctx, txn, v, applied.is_some())?;
    // Admission (NamespaceLifecycle) runs before the strategy's validation.
    admit_namespace(ctx, txn, &name)?;
    let mut causes = strategy::validate(rt, v, None);
    if ctx.shared.options.loopback_endpoints {
        strategy::allow_loopback_endpoints(rt, &mut causes);
    }
    if !causes.is_empty() {
        return Err(StatusError::invalid(rt, &name, &causes));
    }
    if v.pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .is_some_and(|s| !s.is_empty())
    {
        // etcd3's Create refuses it with a plain error, which reaches the client as a 500
        // without a reason.
        return Err(StatusError::unknown(
            500,
            "resourceVersion should not be set on objects to be created",
        ));
    }
    if txn.get(sid, &ctx.req.namespace, &name).is_some() {
        return Err(StatusError::already_exists(rt, &name));
    }
    if applied.is_none() {
        let mgr_name = ctx.manager();
        let time = now_rfc3339();
        let av = rt.api_version();
        let recorded = apply::record_update(
            ctx.shared.schema,
            ctx.node(),
            None,
            view.as_ref().unwrap_or(v),
            &manager(ctx, &mgr_name, &time, &av),
        );
        match view {
            None => *v = recorded,
            Some(_) => match recorded.pointer("/metadata/managedFields") {
                Some(mf) => {
                    meta_mut(v).insert("managedFields".into(), mf.clone());
                }
                None => {
                    meta_mut(v).remove("managedFields");
                }
            },
        }
    }
    strategy::drop_gated_fields(rt, v, None);
    if ctx.query.dry_run {
        return Ok((StatusCode::CREATED, to_view(converted, v.clone())));
    }
    let stored = txn.put(sid, &ctx.req.namespace, &name, v.clone(), strategy::index);
    Ok((StatusCode::CREATED, to_view(converted, stored.value())))
}

/// PUT: replace (or create, for kinds that allow it).
pub fn update(ctx: &Ctx<'_>, body: &[u8]) -> ApiResult<Response> {
    let rt = ctx.rt();
    let name = ctx.name().to_owned();
    if name.is_empty() || rt.review {
        return Err(StatusError::method_not_allowed());
    }
    check_body_type(ctx)?;
    ctx.query
        .validate_write_options("UpdateOptions", Vec::new())?;
    let mut warnings = Vec::new();
    let v = decode_object(ctx, body, &mut warnings)?;
    let body_name = v
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    if body_name != name {
        return Err(StatusError::bad_request(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({name})"
        )));
    }
    let (code, out) = guaranteed_update(ctx, false, |old| {
        let mut v = v.clone();
        let Some(old) = old else {
            if rt.create_on_update && ctx.req.subresource.is_none() {
                meta_mut(&mut v).remove("resourceVersion");
                return Ok(Step::Create(v));
            }
            return Err(StatusError::not_found(rt, &name));
        };
        let rv_given = v
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        if rv_given.is_empty() && !rt.unconditional_update {
            // The registry store names the resource, not the kind, here (`Invalid value: 0x0`
            // is Go's %#v of the uint64 0).
            let cause = Cause::invalid(
                "metadata.resourceVersion",
                &json!("0x0"),
                "must be specified for an update",
            )
            .with_raw_value("0x0");
            return Err(StatusError::invalid_kind(
                rt.group,
                rt.resource,
                &name,
                &[cause],
            ));
        }
        if rv_given.is_empty() {
            meta_mut(&mut v).insert("resourceVersion".into(), json!(old.rv.to_string()));
        }
        Ok(Step::Decided(
            old.rv,
            finish_update(ctx, &old, old.value(), v, false)?,
        ))
    })?;
    Ok(with_warnings(
        value_response(code, &ctx.render(ctx.format()?, &out)),
        &warnings,
    ))
}

impl Cause {
    fn with_raw_value(mut self, raw: &str) -> Self {
        self.message = self.message.replacen(&format!("{raw:?}"), raw, 1);
        self
    }
}

/// Common tail of update and patch, computed outside the store lock: precondition, strategy,
/// validation, managed fields, no-op detection, finalizer completion. [`commit`] applies the
/// decision if the object is still at `old`'s resourceVersion.
fn finish_update(
    ctx: &Ctx<'_>,
    old: &Stored,
    old_v: Value,
    mut new: Value,
    applied: bool,
) -> ApiResult<Decision> {
    let rt = ctx.rt();
    let name = ctx.name().to_owned();
    let (_, converted) = storage(rt, ctx.req.type_id);
    let given = new
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    if !given.is_empty() {
        let rv = parse_rv(&given).map_err(|_| {
            StatusError::invalid(
                rt,
                &name,
                &[Cause::invalid(
                    "metadata.resourceVersion",
                    &json!(given),
                    "must be a valid resource version",
                )],
            )
        })?;
        if rv != old.rv {
            return Err(StatusError::conflict(rt, &name, StatusError::MODIFIED));
        }
    }
    // `EnsureObjectNamespaceMatchesRequestNamespace`.
    if rt.namespaced {
        let ns = new
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if !ns.is_empty() && ns != ctx.req.namespace {
            return Err(StatusError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        meta_mut(&mut new).insert("namespace".into(), json!(ctx.req.namespace));
    } else {
        meta_mut(&mut new).remove("namespace");
    }
    if rt.kind == "Service" {
        super::services::keep_allocations(&old_v, &mut new);
    }
    strategy::prepare_update(rt, &old_v, &mut new, ctx.req.subresource.as_deref());
    let mut causes = strategy::validate(rt, &new, Some(&old_v));
    if ctx.shared.options.loopback_endpoints {
        strategy::allow_loopback_endpoints(rt, &mut causes);
    }
    if !causes.is_empty() {
        return Err(StatusError::invalid(rt, &name, &causes));
    }
    if !applied {
        let mgr_name = ctx.manager();
        let time = now_rfc3339();
        let av = rt.api_version();
        new = apply::record_update(
            ctx.shared.schema,
            ctx.node(),
            Some(&old_v),
            &new,
            &manager(ctx, &mgr_name, &time, &av),
        );
    }
    strategy::drop_gated_fields(rt, &mut new, ctx.req.subresource.as_deref());
    meta_mut(&mut new).insert("resourceVersion".into(), json!(old.rv.to_string()));
    if unchanged(&old_v, &new) {
        return Ok(Decision::Keep(to_view(converted, old_v)));
    }
    let deleting = new
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|d| !d.is_null());
    let finalizers_empty = new
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty);
    let graceful_pending = rt.kind == "Pod"
        && new
            .pointer("/metadata/deletionGracePeriodSeconds")
            .and_then(Value::as_i64)
            .unwrap_or(0)
            > 0;
    if ctx.query.dry_run {
        return Ok(Decision::Keep(to_view(converted, new)));
    }
    if deleting && finalizers_empty && !graceful_pending && rt.kind != "Namespace" {
        return Ok(Decision::Delete(new));
    }
    if rt.kind == "Namespace"
        && deleting
        && finalizers_empty
        && new
            .pointer("/spec/finalizers")
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty)
    {
        return Ok(Decision::Delete(new));
    }
    Ok(Decision::Put(new))
}

/// The outcome of an update, decided without holding the store lock.
enum Decision {
    /// Nothing to store (no-op or dry run): answer with this object.
    Keep(Value),
    /// Store this object.
    Put(Value),
    /// The last finalizer is gone: remove the object, this being its final state.
    Delete(Value),
}

/// One attempt of a read-modify-write.
enum Step {
    /// The object does not exist and the request creates it (PUT/apply of a missing object).
    Create(Value),
    /// Based on the object at this resourceVersion.
    Decided(u64, Decision),
}

/// Applies a decision inside the store lock.
fn commit(ctx: &Ctx<'_>, txn: &mut Txn<'_>, decision: Decision) -> Value {
    let (sid, converted) = storage(ctx.rt(), ctx.req.type_id);
    let (ns, name) = (&ctx.req.namespace, ctx.name());
    match decision {
        Decision::Keep(v) => v,
        Decision::Put(v) => to_view(
            converted,
            txn.put(sid, ns, name, v, strategy::index).value(),
        ),
        Decision::Delete(v) => to_view(
            converted,
            txn.delete(sid, ns, name, v, strategy::index)
                .map(|g| g.value())
                .unwrap_or_default(),
        ),
    }
}

/// kube-apiserver's `GuaranteedUpdate`: read the object, compute the change outside the lock,
/// then commit only if the object is still at the resourceVersion it was computed from
/// (compare-and-swap); if another write got in between, compute again from the new state.
/// `applied_create` tells whether a `Step::Create` object already carries apply's managedFields.
fn guaranteed_update(
    ctx: &Ctx<'_>,
    applied_create: bool,
    mut attempt: impl FnMut(Option<std::sync::Arc<Stored>>) -> ApiResult<Step>,
) -> ApiResult<(StatusCode, Value)> {
    let (sid, _) = storage(ctx.rt(), ctx.req.type_id);
    let store = &ctx.shared.store;
    loop {
        let current = store.get(sid, &ctx.req.namespace, ctx.name());
        match attempt(current)? {
            Step::Create(mut v) => {
                return store
                    .transact(|txn| create_in(ctx, txn, &mut v, applied_create.then_some(())));
            }
            Step::Decided(_, Decision::Keep(v)) => return Ok((StatusCode::OK, v)),
            Step::Decided(rv, decision) => {
                let done = store.transact(|txn| {
                    (txn.get(sid, &ctx.req.namespace, ctx.name()).map(|o| o.rv) == Some(rv))
                        .then(|| commit(ctx, txn, decision))
                });
                if let Some(v) = done {
                    return Ok((StatusCode::OK, v));
                }
            }
        }
    }
}

/// Equal apart from managedFields timestamps: such a write is a no-op (same resourceVersion,
/// no event), as the apiserver's managed-fields timestamp transformer makes it.
fn unchanged(old: &Value, new: &Value) -> bool {
    fn same_ignoring_time(a: &Value, b: &Value) -> bool {
        match (a.as_object(), b.as_object()) {
            (Some(x), Some(y)) => {
                x.len() == y.len()
                    && x.iter().all(|(k, v)| k == "time" || y.get(k) == Some(v))
                    && x.contains_key("time") == y.contains_key("time")
            }
            _ => a == b,
        }
    }
    let (Some(o), Some(n)) = (old.as_object(), new.as_object()) else {
        return old == new;
    };
    if o.len() != n.len()
        || !o
            .iter()
            .all(|(k, v)| k == "metadata" || n.get(k) == Some(v))
    {
        return false;
    }
    let (om, nm) = (&o.get("metadata"), &n.get("metadata"));
    let (Some(om), Some(nm)) = (om.and_then(Value::as_object), nm.and_then(Value::as_object))
    else {
        return om == nm;
    };
    if om.len() != nm.len()
        || !om
            .iter()
            .all(|(k, v)| k == "managedFields" || nm.get(k) == Some(v))
    {
        return false;
    }
    match (
        om.get("managedFields").and_then(Value::as_array),
        nm.get("managedFields").and_then(Value::as_array),
    ) {
        (Some(a), Some(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| same_ignoring_time(x, y))
        }
        (a, b) => a == b,
    }
}

/// The four patch types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PatchKind {
    Json,
    Merge,
    Strategic,
    Apply,
}

/// PATCH.
pub fn patch(ctx: &Ctx<'_>, body: &[u8]) -> ApiResult<Response> {
    let rt = ctx.rt();
    let name = ctx.name().to_owned();
    if name.is_empty() || rt.review {
        return Err(StatusError::method_not_allowed());
    }
    let ct = ctx
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let media = ct.split(';').next().unwrap_or("").trim();
    let kind = match media {
        "application/json-patch+json" => PatchKind::Json,
        "application/merge-patch+json" => PatchKind::Merge,
        "application/strategic-merge-patch+json" => PatchKind::Strategic,
        "application/apply-patch+yaml" | "application/apply-patch+json" => PatchKind::Apply,
        _ => return Err(StatusError::unsupported_media_type(PATCH_TYPES)),
    };
    let mut option_errs = Vec::new();
    if kind == PatchKind::Apply && ctx.query.field_manager.as_deref().unwrap_or("").is_empty() {
        option_errs.push(Cause::required(
            "fieldManager",
            "is required for apply patch",
        ));
    }
    if kind != PatchKind::Apply && ctx.query.force.is_some() {
        option_errs.push(Cause::forbidden(
            "force",
            "may not be specified for non-apply patch",
        ));
    }
    ctx.query
        .validate_write_options("PatchOptions", option_errs)?;
    let patch: Value = serde_json::from_slice(body).map_err(|e| match kind {
        PatchKind::Apply => StatusError::bad_request(format!("error decoding YAML: {e}")),
        PatchKind::Strategic => StatusError::bad_request(e.to_string()),
        _ => StatusError::bad_request(format!("error decoding patch: {e}")),
    })?;
    // Decoding checks of the patch itself, before the object is read.
    let ops: Option<json_patch::Patch> = match kind {
        PatchKind::Json => {
            let Some(list) = patch.as_array() else {
                return Err(StatusError::bad_request(format!(
                    "error decoding patch: json: cannot unmarshal {} into Go value of type []handlers.jsonPatchOp",
                    go_json_type(&patch)
                )));
            };
            if let Some(bad) = list.iter().find(|op| !op.is_object()) {
                return Err(StatusError::bad_request(format!(
                    "error decoding patch: json: cannot unmarshal {} into Go value of type handlers.jsonPatchOp",
                    go_json_type(bad)
                )));
            }
            if list.len() > MAX_JSON_PATCH_OPERATIONS {
                return Err(StatusError::too_large_message(format!(
                    "The allowed maximum operations in a JSON patch is {MAX_JSON_PATCH_OPERATIONS}, got {}",
                    list.len()
                )));
            }
            // Operations the patch library cannot even decode (an unknown op, a missing path)
            // fail when applied, as evanphx/json-patch's do.
            serde_json::from_value(patch.clone()).ok()
        }
        PatchKind::Merge | PatchKind::Strategic if !patch.is_object() => {
            let prefix = if kind == PatchKind::Merge {
                "error decoding patch: "
            } else {
                ""
            };
            return Err(StatusError::bad_request(format!(
                "{prefix}json: cannot unmarshal {} into Go value of type map[string]interface {{}}",
                go_json_type(&patch)
            )));
        }
        _ => None,
    };
    let mut warnings = Vec::new();
    let (_, converted) = storage(rt, ctx.req.type_id);
    let (code, out) = guaranteed_update(ctx, true, |old| {
        // A retry starts over; warnings of the attempt that lost the race are dropped.
        warnings.clear();
        let Some(old) = old else {
            if kind == PatchKind::Apply && ctx.req.subresource.is_none() {
                let mut v = run_apply(ctx, None, &patch)?;
                strict_fields(ctx, None, &mut v, &mut warnings, &StatusError::bad_request)?;
                if converted {
                    v = convert::event_to_core(&v);
                }
                if v.pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .is_some_and(|n| n != name)
                {
                    return Err(name_mismatch(
                        v.pointer("/metadata/name")
                            .and_then(Value::as_str)
                            .unwrap_or_default(),
                        &name,
                    ));
                }
                meta_mut(&mut v).insert("name".into(), json!(name));
                // The create-on-update path stores whatever resourceVersion the applied
                // configuration carried as unset (etcd3's PrepareObjectForStorage).
                meta_mut(&mut v).remove("resourceVersion");
                return Ok(Step::Create(v));
            }
            return Err(StatusError::not_found(rt, &name));
        };
        let old_core = old.value();
        let old_view = if converted {
            convert::event_from_core(&old_core)
        } else {
            old_core.clone()
        };
        let mut new = match kind {
            PatchKind::Json => {
                let ops = ops.as_ref().ok_or_else(StatusError::unprocessable)?;
                let mut doc = old_view.clone();
                json_patch::patch(&mut doc, ops).map_err(|_| StatusError::unprocessable())?;
                doc
            }
            PatchKind::Merge => {
                let mut doc = old_view.clone();
                json_patch::merge(&mut doc, &patch);
                doc
            }
            PatchKind::Strategic => smp::apply(ctx.shared.schema, ctx.node(), &old_view, &patch)
                .map_err(|e| match e.http_status() {
                    400 => StatusError::bad_request(e.to_string()),
                    422 => StatusError::unprocessable(),
                    _ => StatusError::internal(format!("Internal error occurred: {e}")),
                })?,
            PatchKind::Apply => run_apply(ctx, Some(&old_view), &patch)?,
        };
        let new_name = new
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if new_name != name {
            return Err(name_mismatch(new_name, &name));
        }
        // What a decoding error of the patched object shows as the invalid value: the patched
        // JSON, or (strategic merge) the patch map as Go's %+v prints it.
        let shown = match kind {
            PatchKind::Strategic => go_map_string(&patch),
            _ => serde_json::to_string(&new).unwrap_or_default(),
        };
        let patch_error = |why: String| match kind {
            PatchKind::Apply => StatusError::bad_request(why),
            _ => StatusError::invalid_kind(
                "",
                "",
                "",
                &[Cause::invalid("patch", &json!(shown), &why)],
            ),
        };
        strategy::typecheck(rt, &new).map_err(&patch_error)?;
        strict_fields(ctx, None, &mut new, &mut warnings, &patch_error)?;
        if converted {
            new = convert::event_to_core(&new);
        }
        Ok(Step::Decided(
            old.rv,
            finish_update(ctx, &old, old_core, new, kind == PatchKind::Apply)?,
        ))
    })?;
    Ok(with_warnings(
        value_response(code, &ctx.render(ctx.format()?, &out)),
        &warnings,
    ))
}

/// The patch types the apiserver lists in its 415 for built-in kinds.
const PATCH_TYPES: &[&str] = &[
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
];

/// Request body media types the simulator decodes: JSON, and protobuf (kubectl's typed clients
/// send it, e.g. `kubectl create namespace`). kube-apiserver also takes YAML and CBOR; the
/// simulator refuses those with the 415 a server without them would give.
const BODY_TYPES: &[&str] = &["application/json", "application/vnd.kubernetes.protobuf"];

/// `NegotiateInputSerializer`: an empty Content-Type means JSON.
fn check_body_type(ctx: &Ctx<'_>) -> ApiResult<()> {
    let ct = ctx
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let media = ct.split(';').next().unwrap_or("").trim();
    if media.is_empty() || BODY_TYPES.contains(&media) {
        Ok(())
    } else {
        Err(StatusError::unsupported_media_type(BODY_TYPES))
    }
}

/// `maxJSONPatchOperations` of the apiserver's patch handler.
const MAX_JSON_PATCH_OPERATIONS: usize = 10_000;

/// `checkName`'s 400 when a body or patch renames the object.
fn name_mismatch(body_name: &str, url_name: &str) -> StatusError {
    StatusError::bad_request(format!(
        "the name of the object ({body_name}) does not match the name on the URL ({url_name})"
    ))
}

/// A JSON value as Go's `fmt.Sprintf("%+v", v)` prints the `map[string]interface{}` it decodes
/// to: `map[k:v ...]` with sorted keys, `[a b]` for lists, `<nil>` for null.
fn go_map_string(v: &Value) -> String {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let parts: Vec<String> = keys
                .iter()
                .map(|k| format!("{k}:{}", go_map_string(&m[k.as_str()])))
                .collect();
            format!("map[{}]", parts.join(" "))
        }
        Value::Array(a) => format!(
            "[{}]",
            a.iter().map(go_map_string).collect::<Vec<_>>().join(" ")
        ),
        Value::String(s) => s.clone(),
        Value::Null => "<nil>".to_owned(),
        other => other.to_string(),
    }
}

fn run_apply(ctx: &Ctx<'_>, live: Option<&Value>, applied: &Value) -> ApiResult<Value> {
    let rt = ctx.rt();
    let mgr_name = ctx.manager();
    let time = now_rfc3339();
    let av = rt.api_version();
    let mgr = manager(ctx, &mgr_name, &time, &av);
    apply::apply(
        ctx.shared.schema,
        ctx.node(),
        live,
        applied,
        &mgr,
        ctx.query.force.unwrap_or(false),
    )
    .map_err(|e| match &e {
        apply::ApplyError::Conflict(_) => {
            let causes: Vec<Cause> = e
                .causes()
                .into_iter()
                .map(|(reason, message, field)| Cause {
                    reason,
                    message,
                    field,
                })
                .collect();
            StatusError::conflict_with_causes(e.message(), &causes)
        }
        apply::ApplyError::Invalid(_) => StatusError::bad_request(e.message()),
        apply::ApplyError::Internal(_) => StatusError::unknown(500, e.message()),
    })
}

// ---------------------------------------------------------------------------------------------
// Delete

/// DeleteOptions from the body and the query.
struct DeleteOptions {
    grace: Option<i64>,
    uid: Option<String>,
    rv: Option<String>,
}

fn delete_options(ctx: &Ctx<'_>, body: &[u8]) -> ApiResult<DeleteOptions> {
    let mut o = DeleteOptions {
        grace: ctx.query.grace_period_seconds,
        uid: None,
        rv: None,
    };
    let body = &*json_body(ctx, body)?;
    if body.iter().any(|b| !b.is_ascii_whitespace()) {
        let v: Value = serde_json::from_slice(body).map_err(|e| {
            StatusError::bad_request(format!("couldn't get version/kind; json parse error: {e}"))
        })?;
        if let Some(g) = v["gracePeriodSeconds"].as_i64() {
            o.grace = Some(g);
        }
        o.uid = v
            .pointer("/preconditions/uid")
            .and_then(Value::as_str)
            .map(str::to_owned);
        o.rv = v
            .pointer("/preconditions/resourceVersion")
            .and_then(Value::as_str)
            .map(str::to_owned);
        if v["dryRun"]
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x == "All"))
        {
            // Handled through the query flag by callers; the body form is accepted too.
        }
    }
    Ok(o)
}

/// DELETE of one object.
pub fn delete(ctx: &Ctx<'_>, body: &[u8]) -> ApiResult<Response> {
    ctx.query
        .validate_write_options("DeleteOptions", Vec::new())?;
    let opts = delete_options(ctx, body)?;
    let name = ctx.name().to_owned();
    let dry = ctx.query.dry_run || body_dry_run(body);
    let (code, out) = ctx
        .shared
        .store
        .transact(|txn| delete_in(ctx, txn, &ctx.req.namespace.clone(), &name, &opts, dry))?;
    Ok(value_response(code, &out))
}

fn body_dry_run(body: &[u8]) -> bool {
    serde_json::from_slice::<Value>(body).ok().is_some_and(|v| {
        v["dryRun"]
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x == "All"))
    })
}

fn delete_in(
    ctx: &Ctx<'_>,
    txn: &mut Txn<'_>,
    namespace: &str,
    name: &str,
    opts: &DeleteOptions,
    dry: bool,
) -> ApiResult<(StatusCode, Value)> {
    let rt = ctx.rt();
    let (sid, converted) = storage(rt, ctx.req.type_id);
    let old = txn
        .get(sid, namespace, name)
        .ok_or_else(|| StatusError::not_found(rt, name))?;
    let mut v = old.value();
    let uid = v
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    if let Some(want) = &opts.uid
        && *want != uid
    {
        return Err(StatusError::precondition_failed(
            rt,
            name,
            &format!(
                "the UID in the precondition ({want}) does not match the UID in record ({uid}). The object might have been deleted and then recreated"
            ),
        ));
    }
    if let Some(want) = &opts.rv
        && *want != old.rv.to_string()
    {
        return Err(StatusError::precondition_failed(
            rt,
            name,
            &format!(
                "the ResourceVersion in the precondition ({want}) does not match the ResourceVersion in record ({}). The object might have been modified",
                old.rv
            ),
        ));
    }
    let now = now_rfc3339();
    let has_finalizers = v
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| !f.is_empty());
    let already_deleting = v
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|d| !d.is_null());

    // Namespaces: Terminating first; the namespace controller empties and removes them.
    if rt.kind == "Namespace" {
        if !already_deleting {
            meta_mut(&mut v).insert("deletionTimestamp".into(), json!(now));
            meta_mut(&mut v).insert("deletionGracePeriodSeconds".into(), json!(0));
            v["status"]["phase"] = json!("Terminating");
            if !dry {
                let s = txn.put(sid, "", name, v, strategy::index);
                return Ok((StatusCode::OK, s.value()));
            }
        }
        return Ok((StatusCode::OK, v));
    }

    // Pods on a node terminate gracefully.
    if rt.kind == "Pod" {
        let scheduled = v
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .is_some_and(|n| !n.is_empty());
        let phase = v
            .pointer("/status/phase")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let finished = phase == "Succeeded" || phase == "Failed";
        let default_grace = v
            .pointer("/spec/terminationGracePeriodSeconds")
            .and_then(Value::as_i64)
            .unwrap_or(strategy::DEFAULT_POD_GRACE);
        let mut grace = opts.grace.unwrap_or(default_grace).max(0);
        if !scheduled || finished {
            grace = 0;
        }
        let current = v
            .pointer("/metadata/deletionGracePeriodSeconds")
            .and_then(Value::as_i64);
        if grace > 0 && current.is_none_or(|c| grace < c) {
            // A shorter grace period moves the deadline back by the difference, from the
            // original deletion request (the apiserver's `BeforeDelete`).
            let base = match (already_deleting, current) {
                (true, Some(c)) => v
                    .pointer("/metadata/deletionTimestamp")
                    .and_then(Value::as_str)
                    .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                    .and_then(|t| t.checked_sub(jiff::SignedDuration::from_secs(c)).ok())
                    .unwrap_or_else(jiff::Timestamp::now),
                _ => jiff::Timestamp::now(),
            };
            let at = base
                .checked_add(jiff::SignedDuration::from_secs(grace))
                .unwrap_or(base);
            meta_mut(&mut v).insert(
                "deletionTimestamp".into(),
                json!(at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()),
            );
            meta_mut(&mut v).insert("deletionGracePeriodSeconds".into(), json!(grace));
            bump_generation(&mut v);
            if dry {
                return Ok((StatusCode::OK, v));
            }
            let s = txn.put(sid, namespace, name, v, strategy::index);
            return Ok((StatusCode::OK, s.value()));
        }
        if grace > 0 {
            return Ok((StatusCode::OK, v));
        }
        meta_mut(&mut v).insert("deletionGracePeriodSeconds".into(), json!(0));
        if !already_deleting {
            meta_mut(&mut v).insert("deletionTimestamp".into(), json!(now));
            bump_generation(&mut v);
        }
        // Pods are always deleted gracefully, if only for zero seconds: the deletion mark is
        // written first (MODIFIED), then the object goes (DELETED).
        if !dry && !has_finalizers && current != Some(0) {
            v = txn.put(sid, namespace, name, v, strategy::index).value();
        }
    }

    if has_finalizers {
        if !already_deleting {
            meta_mut(&mut v).insert("deletionTimestamp".into(), json!(now));
            meta_mut(&mut v).insert("deletionGracePeriodSeconds".into(), json!(0));
            if rt.kind != "Pod" {
                bump_generation(&mut v);
            }
            if !dry {
                let s = txn.put(sid, namespace, name, v, strategy::index);
                return Ok((StatusCode::OK, to_view(converted, s.value())));
            }
        }
        return Ok((StatusCode::OK, to_view(converted, v)));
    }
    if dry {
        return Ok((StatusCode::OK, deleted_answer(rt, name, &uid, converted, v)));
    }
    let gone = txn
        .delete(sid, namespace, name, v, strategy::index)
        .map(|g| g.value())
        .unwrap_or_default();
    Ok((
        StatusCode::OK,
        deleted_answer(rt, name, &uid, converted, gone),
    ))
}

fn deleted_answer(rt: &ResourceType, name: &str, uid: &str, converted: bool, obj: Value) -> Value {
    if rt.return_deleted_object {
        return to_view(converted, obj);
    }
    // Go field order of StatusDetails: name, group, kind, uid.
    let mut details = json!({ "name": name });
    if !rt.group.is_empty() {
        details["group"] = json!(rt.group);
    }
    details["kind"] = json!(rt.resource);
    details["uid"] = json!(uid);
    json!({ "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details })
}

/// DELETE of a collection (selectors apply).
pub fn delete_collection(ctx: &Ctx<'_>, body: &[u8]) -> ApiResult<Response> {
    let rt = ctx.rt();
    if !rt.verbs.contains(&"deletecollection") {
        return Err(StatusError::method_not_allowed());
    }
    ctx.query
        .validate_write_options("DeleteOptions", Vec::new())?;
    let opts = delete_options(ctx, body)?;
    let dry = ctx.query.dry_run || body_dry_run(body);
    let (sid, _) = storage(rt, ctx.req.type_id);
    let (filter, _) = filter_of(selectors(ctx)?);
    let namespace = (!ctx.req.namespace.is_empty()).then(|| ctx.req.namespace.clone());
    let items = ctx.shared.store.transact(|txn| -> ApiResult<Vec<Value>> {
        let targets: Vec<(String, String)> = txn
            .all(sid, namespace.as_deref())
            .iter()
            .filter(|o| filter(o))
            .map(|o| {
                (
                    o.field("metadata.namespace").unwrap_or_default(),
                    o.field("metadata.name").unwrap_or_default(),
                )
            })
            .collect();
        let mut out = Vec::new();
        for (ns, name) in targets {
            let sub = Ctx {
                shared: ctx.shared,
                req: ResourceRequest {
                    type_id: ctx.req.type_id,
                    rt,
                    namespace: ns.clone(),
                    name: Some(name.clone()),
                    subresource: None,
                },
                query: ctx.query.clone(),
                headers: ctx.headers,
                who: ctx.who.clone(),
            };
            let (_, v) = delete_in(&sub, txn, &ns, &name, &opts, dry)?;
            out.push(if v["kind"] == "Status" { json!({}) } else { v });
        }
        Ok(out)
    })?;
    let items: Vec<Value> = items
        .into_iter()
        // delete_in already answered in the request's view (events.k8s.io converted).
        .filter(|v| v.as_object().is_some_and(|o| !o.is_empty()))
        .map(without_type_meta)
        .collect();
    Ok(value_response(
        StatusCode::OK,
        &json!({ "kind": rt.list_kind(), "apiVersion": rt.api_version(), "metadata": { "resourceVersion": ctx.shared.store.rv().to_string() }, "items": items }),
    ))
}

// ---------------------------------------------------------------------------------------------
// Reviews

fn review(ctx: &Ctx<'_>, mut v: Value) -> ApiResult<Response> {
    let rt = ctx.rt();
    let auth = &ctx.shared.auth;
    let spec = v.get("spec").cloned().unwrap_or(json!({}));
    let status = match rt.kind {
        "TokenReview" => auth.token_review_status(&spec),
        "SelfSubjectAccessReview" => auth.access_review_status(&spec, Some(&ctx.who), None),
        "LocalSubjectAccessReview" => {
            let ns = spec
                .pointer("/resourceAttributes/namespace")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if ns != ctx.req.namespace {
                return Err(StatusError::bad_request(format!(
                    "spec.resourceAttributes.namespace must match namespace: {}",
                    ctx.req.namespace
                )));
            }
            auth.access_review_status(&spec, None, Some(&ctx.req.namespace))
        }
        _ => {
            if spec["user"].as_str().unwrap_or_default().is_empty()
                && spec["groups"].as_array().is_none_or(Vec::is_empty)
            {
                return Err(StatusError::invalid(
                    rt,
                    "",
                    &[Cause::invalid(
                        "spec.user,spec.groups",
                        &json!("[]"),
                        "at least one of user or group must be specified",
                    )
                    .with_raw_value("[]")],
                ));
            }
            auth.access_review_status(&spec, None, None)
        }
    };
    // The create handler's field manager runs for reviews too (found by the real tier).
    let mgr_name = ctx.manager();
    let time = now_rfc3339();
    let av = rt.api_version();
    v = apply::record_update(
        ctx.shared.schema,
        ctx.node(),
        None,
        &v,
        &manager(ctx, &mgr_name, &time, &av),
    );
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        let mut ordered = serde_json::Map::new();
        ordered.insert("creationTimestamp".into(), Value::Null);
        ordered.append(m);
        *m = ordered;
    } else {
        v["metadata"] = json!({ "creationTimestamp": null });
    }
    v["status"] = status;
    Ok(value_response(StatusCode::CREATED, &v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continue_tokens_round_trip_and_reject_garbage() {
        let tok = encode_continue(42, &("default".into(), "a".into()));
        assert_eq!(
            decode_continue(&tok).unwrap(),
            (42, ("default".into(), "a".into()))
        );
        assert_eq!(decode_continue("!!!").unwrap_err().code, 400);
        let no_rv = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(br#"{"v":"meta.k8s.io/v1","rv":0,"start":"a/b\u0000"}"#);
        assert_eq!(decode_continue(&no_rv).unwrap_err().code, 400);
    }

    #[test]
    fn continue_token_errors_are_worded_like_the_apiserver() {
        // Observed from kube-apiserver v1.33.13 for `continue=garbage`.
        assert_eq!(
            decode_continue("garbage").unwrap_err().message,
            "invalid continue token: continue key is not valid: invalid character '\\u0081' looking for beginning of value"
        );
        assert_eq!(
            decode_continue("a!").unwrap_err().message,
            "invalid continue token: continue key is not valid: illegal base64 data at input byte 1"
        );
    }

    #[test]
    fn accept_header_negotiation() {
        let mut h = HeaderMap::new();
        h.insert(header::ACCEPT, HeaderValue::from_static("application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"));
        assert_eq!(
            negotiate(&h, IncludeObject::Metadata).unwrap(),
            Format::Table(IncludeObject::Metadata)
        );
        h.insert(
            header::ACCEPT,
            HeaderValue::from_static(
                "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
            ),
        );
        assert_eq!(
            negotiate(&h, IncludeObject::Metadata).unwrap(),
            Format::PartialMetadata
        );
        h.insert(
            header::ACCEPT,
            HeaderValue::from_static("application/vnd.kubernetes.protobuf"),
        );
        assert_eq!(
            negotiate(&h, IncludeObject::Metadata).unwrap_err().code,
            406
        );
        h.insert(
            header::ACCEPT,
            HeaderValue::from_static("application/vnd.kubernetes.protobuf, */*"),
        );
        assert_eq!(
            negotiate(&h, IncludeObject::Metadata).unwrap(),
            Format::Json
        );
    }

    #[test]
    fn noop_detection_ignores_managed_fields_time() {
        let a = json!({"metadata": {"managedFields": [{"manager": "m", "time": "1"}]}, "spec": {"x": 1}});
        let b = json!({"metadata": {"managedFields": [{"manager": "m", "time": "2"}]}, "spec": {"x": 1}});
        assert!(unchanged(&a, &b));
        let c = json!({"metadata": {"managedFields": [{"manager": "m", "time": "2"}]}, "spec": {"x": 2}});
        assert!(!unchanged(&a, &c));
    }
}

/// PUT `/api/v1/namespaces/{name}/finalize`: only `spec.finalizers` changes; an emptied,
/// terminating namespace is removed.
pub fn finalize_namespace(ctx: &Ctx<'_>, body: &[u8]) -> ApiResult<Response> {
    let rt = ctx.rt();
    if rt.kind != "Namespace" {
        return Err(StatusError::no_route());
    }
    check_body_type(ctx)?;
    ctx.query
        .validate_write_options("UpdateOptions", Vec::new())?;
    let mut warnings = Vec::new();
    let v = decode_object(ctx, body, &mut warnings)?;
    let name = ctx.name().to_owned();
    let out = ctx.shared.store.transact(|txn| -> ApiResult<Value> {
        let old = txn
            .get(ctx.req.type_id, "", &name)
            .ok_or_else(|| StatusError::not_found(rt, &name))?;
        if let Some(rv) = v
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            && parse_rv(rv)? != old.rv
        {
            return Err(StatusError::conflict(rt, &name, StatusError::MODIFIED));
        }
        let mut new = old.value();
        new["spec"]["finalizers"] = v.pointer("/spec/finalizers").cloned().unwrap_or(json!([]));
        if ctx.query.dry_run {
            return Ok(new);
        }
        let deleting = new
            .pointer("/metadata/deletionTimestamp")
            .is_some_and(|d| !d.is_null());
        let empty = |p: &str| {
            new.pointer(p)
                .and_then(Value::as_array)
                .is_none_or(Vec::is_empty)
        };
        if deleting && empty("/spec/finalizers") && empty("/metadata/finalizers") {
            return Ok(txn
                .delete(ctx.req.type_id, "", &name, new, strategy::index)
                .map(|g| g.value())
                .unwrap_or_default());
        }
        Ok(txn
            .put(ctx.req.type_id, "", &name, new, strategy::index)
            .value())
    })?;
    Ok(with_warnings(
        value_response(StatusCode::OK, &out),
        &warnings,
    ))
}

/// Requests the simulator makes of itself (start-up objects, the namespace controller): the
/// same code paths as HTTP requests, as the `system:apiserver` identity.
pub mod internal {
    use super::*;
    use crate::request::ResourceRequest;

    fn ctx<'a>(
        shared: &'a Shared,
        headers: &'a HeaderMap,
        type_id: TypeId,
        namespace: &str,
        name: Option<&str>,
    ) -> Ctx<'a> {
        let rt = registry::get(type_id);
        Ctx {
            shared,
            req: ResourceRequest {
                type_id,
                rt,
                namespace: namespace.to_owned(),
                name: name.map(str::to_owned),
                subresource: None,
            },
            query: Query {
                field_manager: Some("kube-apiserver".into()),
                ..Query::default()
            },
            headers,
            who: Identity {
                name: "system:apiserver".into(),
                uid: String::new(),
                groups: vec![crate::auth::MASTERS.into()],
            },
        }
    }

    /// Creates an object (AlreadyExists is an error for the caller to judge).
    pub fn create(
        shared: &Shared,
        type_id: TypeId,
        namespace: &str,
        mut v: Value,
    ) -> ApiResult<Value> {
        let headers = HeaderMap::new();
        let c = ctx(shared, &headers, type_id, namespace, None);
        shared
            .store
            .transact(|txn| create_in(&c, txn, &mut v, None))
            .map(|(_, v)| v)
    }

    /// Deletes an object with default options (graceful where the kind is).
    pub fn delete(
        shared: &Shared,
        type_id: TypeId,
        namespace: &str,
        name: &str,
    ) -> ApiResult<Value> {
        let headers = HeaderMap::new();
        let c = ctx(shared, &headers, type_id, namespace, Some(name));
        let opts = DeleteOptions {
            grace: None,
            uid: None,
            rv: None,
        };
        shared
            .store
            .transact(|txn| delete_in(&c, txn, namespace, name, &opts, false))
            .map(|(_, v)| v)
    }

    /// Sets a namespace's `spec.finalizers`, removing it when nothing holds it any more.
    pub fn finalize(shared: &Shared, name: &str, finalizers: Vec<String>) -> ApiResult<()> {
        let headers = HeaderMap::new();
        let type_id = registry::id_of("", "namespaces");
        let mut c = ctx(shared, &headers, type_id, "", Some(name));
        c.req.subresource = Some("finalize".into());
        let body = serde_json::to_vec(&json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": name }, "spec": { "finalizers": finalizers } }))
            .unwrap_or_default();
        finalize_namespace(&c, &body).map(|_| ())
    }
}
