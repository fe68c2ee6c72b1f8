//! The real Kubernetes OpenAPI v3 documents: served the way kube-apiserver serves them, and
//! turned into the simulator's [`Schema`].
//!
//! The documents in `openapi/` are trimmed copies of `api/openapi-spec/v3` from
//! `k8s.io/kubernetes` (Apache-2.0; see `openapi/README.md`), regenerated with
//! `scripts/vendor-openapi.sh`. They keep the served resources' paths with all their
//! `parameters` (kubectl reads the `fieldValidation` parameter of a kind's PATCH operation to
//! decide whether the server validates fields), and the component schemas those paths reach,
//! with every `x-kubernetes-*` extension.
//!
//! * [`v3_root`] and [`v3_document`] answer `GET /openapi/v3` and `GET /openapi/v3/<gv>`.
//! * [`build_schema`] maps the component schemas onto [`Schema`] nodes the way kube-openapi's
//!   `schemaconv` maps them onto structured-merge-diff types (list types, merge keys, atomic
//!   maps, untyped values).
//! * [`unknown_fields`] and [`strict_errors`] implement `fieldValidation=Strict`/`Warn`: the
//!   unknown (and duplicate) fields of a request body, with the paths the apiserver's strict
//!   JSON decoder (`sigs.k8s.io/json`) prints, e.g. `spec.template.spec.containers[0].foo`.
//!
//! Everything here is pure: the documents are compile-time data and nothing does I/O.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::sync::OnceLock;

use serde_json::{Map, Value};

use super::schema::{ListType, Node, NodeId, Schema, Shape};
use super::selector::go_quote;

/// The vendored documents, by group-version path as listed in `/openapi/v3` (sorted).
const DOCUMENTS: &[(&str, &str)] = &[
    ("api/v1", include_str!("openapi/api__v1.json")),
    ("apis/apps/v1", include_str!("openapi/apis__apps__v1.json")),
    (
        "apis/authentication.k8s.io/v1",
        include_str!("openapi/apis__authentication.k8s.io__v1.json"),
    ),
    (
        "apis/authorization.k8s.io/v1",
        include_str!("openapi/apis__authorization.k8s.io__v1.json"),
    ),
    (
        "apis/coordination.k8s.io/v1",
        include_str!("openapi/apis__coordination.k8s.io__v1.json"),
    ),
    (
        "apis/discovery.k8s.io/v1",
        include_str!("openapi/apis__discovery.k8s.io__v1.json"),
    ),
    (
        "apis/events.k8s.io/v1",
        include_str!("openapi/apis__events.k8s.io__v1.json"),
    ),
    (
        "apis/flowcontrol.apiserver.k8s.io/v1",
        include_str!("openapi/apis__flowcontrol.apiserver.k8s.io__v1.json"),
    ),
    (
        "apis/networking.k8s.io/v1",
        include_str!("openapi/apis__networking.k8s.io__v1.json"),
    ),
    (
        "apis/policy/v1",
        include_str!("openapi/apis__policy__v1.json"),
    ),
    (
        "apis/rbac.authorization.k8s.io/v1",
        include_str!("openapi/apis__rbac.authorization.k8s.io__v1.json"),
    ),
];

/// Prefix of a `$ref` to a component schema.
const REF_PREFIX: &str = "#/components/schemas/";

/// Components kube-openapi's `schemaconv` hard-codes rather than reading their schema.
const QUANTITY: &str = "io.k8s.apimachinery.pkg.api.resource.Quantity";
const RAW_EXTENSION: &str = "io.k8s.apimachinery.pkg.runtime.RawExtension";

/// How deep [`unknown_fields`] and [`strict_errors`] follow nesting before giving up.
const MAX_DEPTH: usize = 1000;

/// The strict decoder stops collecting after this many findings, like `sigs.k8s.io/json`.
const MAX_STRICT_ERRORS: usize = 100;

/// The body of `GET /openapi/v3`, in the apiserver's shape:
/// `{"paths": {"api/v1": {"serverRelativeURL": "/openapi/v3/api/v1?hash=<HEX>"}, ...}}`,
/// keys sorted as Go's encoder sorts map keys.
pub fn v3_root() -> Value {
    let by_path: BTreeMap<&str, &str> = DOCUMENTS
        .iter()
        .zip(hashes())
        .map(|((gv, _), hash)| (*gv, hash.as_str()))
        .collect();
    let mut paths = Map::new();
    for (gv, hash) in by_path {
        let mut entry = Map::new();
        entry.insert(
            "serverRelativeURL".to_owned(),
            Value::String(format!("/openapi/v3/{gv}?hash={hash}")),
        );
        paths.insert(gv.to_owned(), Value::Object(entry));
    }
    let mut root = Map::new();
    root.insert("paths".to_owned(), Value::Object(paths));
    Value::Object(root)
}

/// The document for `gv_path` (`"api/v1"`, `"apis/coordination.k8s.io/v1"`; a leading `/` is
/// ignored) and its hash, the value of the `hash` query parameter and of the `ETag`.
pub fn v3_document(gv_path: &str) -> Option<(&'static str, String)> {
    let gv_path = gv_path.trim_start_matches('/');
    DOCUMENTS
        .iter()
        .zip(hashes())
        .find(|((gv, _), _)| *gv == gv_path)
        .map(|((_, doc), hash)| (*doc, hash.clone()))
}

/// The documents' hashes, in [`DOCUMENTS`] order, computed once.
fn hashes() -> &'static [String] {
    static HASHES: OnceLock<Vec<String>> = OnceLock::new();
    HASHES.get_or_init(|| {
        DOCUMENTS
            .iter()
            .map(|(_, doc)| format!("{:016X}", fnv1a64(doc.as_bytes())))
            .collect()
    })
}

/// FNV-1a, 64 bit: a small stable digest (the apiserver uses SHA-512; clients treat the hash
/// as opaque).
fn fnv1a64(bytes: &[u8]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes
        .iter()
        .fold(OFFSET, |h, b| (h ^ u64::from(*b)).wrapping_mul(PRIME))
}

/// Builds the schema arena from all documents: one node per component schema (a component
/// found in several documents maps to one node), plus nodes for inline schemas. Registers
/// every component carrying `x-kubernetes-group-version-kind` via [`Schema::set_kind`]
/// (group `""` for core). Deterministic: the same documents give the same arena.
pub fn build_schema() -> Schema {
    let docs: Vec<Value> = DOCUMENTS
        .iter()
        .map(|(gv, text)| {
            serde_json::from_str(text).unwrap_or_else(|e| {
                panic!("embedded OpenAPI document {gv} is compile-time data and must parse: {e}")
            })
        })
        .collect();
    build_schema_from(&docs)
}

/// The schema of the vendored documents, built once per process (they are compile-time data).
pub fn schema() -> &'static Schema {
    static SCHEMA: OnceLock<Schema> = OnceLock::new();
    SCHEMA.get_or_init(build_schema)
}

/// [`build_schema`] over parsed documents.
fn build_schema_from(docs: &[Value]) -> Schema {
    // Every component, first occurrence wins, in document then (sorted) key order.
    let mut components: Vec<(&str, &Value)> = Vec::new();
    let mut seen = HashSet::new();
    for doc in docs {
        let Some(schemas) = doc
            .pointer("/components/schemas")
            .and_then(Value::as_object)
        else {
            continue;
        };
        for (name, schema) in schemas {
            if seen.insert(name.as_str()) {
                components.push((name.as_str(), schema));
            }
        }
    }

    let mut b = Builder::new();
    // Reserve a node per component first, so references (including recursive ones) resolve
    // to a fixed id before the component itself is converted.
    for (name, _) in &components {
        let id = b.schema.push(Node::default());
        b.ids.insert(name, id);
    }
    for (name, def) in &components {
        let node = match *name {
            QUANTITY => Node {
                shape: Shape::Scalar,
                ..Node::default()
            },
            RAW_EXTENSION => Node::default(),
            _ => b.node_of(def),
        };
        b.schema.set(b.ids[name], node);
    }
    // References whose wrapper overrides the target's extensions: copy the finished target.
    for (id, target, ext) in std::mem::take(&mut b.derived) {
        let mut node = b.schema.node(target).clone();
        apply_extensions(&mut node, &ext);
        b.schema.set(id, node);
    }
    for (name, def) in &components {
        let Some(gvks) = def
            .get("x-kubernetes-group-version-kind")
            .and_then(Value::as_array)
        else {
            continue;
        };
        for gvk in gvks {
            let field = |k: &str| gvk.get(k).and_then(Value::as_str);
            if let (Some(group), Some(version), Some(kind)) =
                (field("group"), field("version"), field("kind"))
            {
                let id = b.ids[name];
                b.schema.set_kind(group, version, kind, id);
            }
        }
    }
    b.schema
}

/// Extensions that change how a node merges; a `$ref` wrapper carrying any of them gets its
/// own node.
const MERGE_EXTENSIONS: &[&str] = &[
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
    "x-kubernetes-patch-strategy",
    "x-kubernetes-patch-merge-key",
];

/// State of [`build_schema`].
struct Builder<'a> {
    schema: Schema,
    /// Component name → its node.
    ids: HashMap<&'a str, NodeId>,
    /// Shared node for plain scalars.
    scalar: NodeId,
    /// Shared node for plain untyped values.
    untyped: NodeId,
    /// (node, referenced component node, wrapper extensions) to fill once components are done.
    derived: Vec<(NodeId, NodeId, Map<String, Value>)>,
}

impl<'a> Builder<'a> {
    fn new() -> Self {
        let mut schema = Schema::default();
        let scalar = schema.push(Node {
            shape: Shape::Scalar,
            ..Node::default()
        });
        let untyped = schema.push(Node::default());
        Builder {
            schema,
            ids: HashMap::new(),
            scalar,
            untyped,
            derived: Vec::new(),
        }
    }

    /// The node for a schema in a field, item or map-value position.
    fn convert(&mut self, s: &'a Value) -> NodeId {
        let Some(obj) = s.as_object() else {
            return self.untyped;
        };
        if let Some(name) = ref_target(obj) {
            let Some(&target) = self.ids.get(name) else {
                return self.untyped; // dangling reference: treat the value as opaque
            };
            let ext: Map<String, Value> = obj
                .iter()
                .filter(|(k, _)| MERGE_EXTENSIONS.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            if ext.is_empty() {
                return target;
            }
            let id = self.schema.push(Node::default());
            self.derived.push((id, target, ext));
            return id;
        }
        let node = self.node_of(s);
        if node == Node::default() {
            return self.untyped;
        }
        if node
            == (Node {
                shape: Shape::Scalar,
                ..Node::default()
            })
        {
            return self.scalar;
        }
        self.schema.push(node)
    }

    /// The node for an inline (non-reference) schema.
    fn node_of(&mut self, s: &'a Value) -> Node {
        let mut node = Node {
            shape: self.shape_of(s),
            ..Node::default()
        };
        if let Some(obj) = s.as_object() {
            apply_extensions(&mut node, obj);
        }
        node
    }

    /// The structural shape of an inline schema.
    fn shape_of(&mut self, s: &'a Value) -> Shape {
        let Some(obj) = s.as_object() else {
            return Shape::Untyped;
        };
        let flag = |k: &str| obj.get(k).and_then(Value::as_bool) == Some(true);
        if flag("x-kubernetes-preserve-unknown-fields") {
            return Shape::Untyped;
        }
        if flag("x-kubernetes-int-or-string")
            || obj.get("format").and_then(Value::as_str) == Some("int-or-string")
        {
            return Shape::Scalar;
        }
        match obj.get("type").and_then(Value::as_str) {
            Some("string" | "integer" | "number" | "boolean") => Shape::Scalar,
            Some("array") => self.array(obj),
            Some("object") => self.object(obj),
            Some(_) => Shape::Untyped,
            None if obj.contains_key("properties") || obj.contains_key("additionalProperties") => {
                self.object(obj)
            }
            None if obj.contains_key("items") => self.array(obj),
            // `oneOf: [{type: string}, {type: number}]` (Quantity and the like).
            None if one_of_scalars(obj) => Shape::Scalar,
            None => Shape::Untyped,
        }
    }

    fn array(&mut self, obj: &'a Map<String, Value>) -> Shape {
        let items = match obj.get("items") {
            Some(items) => self.convert(items),
            None => self.untyped,
        };
        Shape::Array { items }
    }

    fn object(&mut self, obj: &'a Map<String, Value>) -> Shape {
        let props = obj.get("properties").and_then(Value::as_object);
        let additional = match obj.get("additionalProperties") {
            Some(Value::Bool(false)) | None => None,
            Some(Value::Bool(true)) => Some(self.untyped),
            Some(schema) => Some(self.convert(schema)),
        };
        match (props.filter(|p| !p.is_empty()), additional) {
            (Some(props), additional) => {
                let fields = props
                    .iter()
                    .map(|(name, member)| (name.clone(), self.convert(member)))
                    .collect();
                Shape::Object { fields, additional }
            }
            // A free-form object (no properties, no additionalProperties or `true`).
            (None, None) if obj.get("additionalProperties") != Some(&Value::Bool(false)) => {
                Shape::Untyped
            }
            (None, Some(untyped)) if untyped == self.untyped => Shape::Untyped,
            (None, additional) => Shape::Object {
                fields: BTreeMap::new(),
                additional,
            },
        }
    }
}

/// The component a schema refers to: `$ref`, or a single-element `allOf: [{$ref}]` wrapper
/// (how Kubernetes attaches `default` and extensions to a reference).
fn ref_target(obj: &Map<String, Value>) -> Option<&str> {
    let r = match obj.get("$ref") {
        Some(r) => r,
        None => match obj
            .get("allOf")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
        {
            Some([only]) => only.get("$ref")?,
            _ => return None,
        },
    };
    r.as_str()?.strip_prefix(REF_PREFIX)
}

/// True for `oneOf`/`anyOf` alternatives that are all scalar types.
fn one_of_scalars(obj: &Map<String, Value>) -> bool {
    ["oneOf", "anyOf"].iter().any(|k| {
        obj.get(*k).and_then(Value::as_array).is_some_and(|alts| {
            !alts.is_empty()
                && alts.iter().all(|a| {
                    matches!(
                        a.get("type").and_then(Value::as_str),
                        Some("string" | "integer" | "number" | "boolean")
                    )
                })
        })
    })
}

/// Applies the merge-related `x-kubernetes-*` extensions of `ext` to `node`; extensions
/// absent from `ext` leave `node` as it is (so a reference wrapper overrides only what it
/// names).
fn apply_extensions(node: &mut Node, ext: &Map<String, Value>) {
    if let Some(map_type) = ext.get("x-kubernetes-map-type").and_then(Value::as_str) {
        node.atomic_map = map_type == "atomic";
    }
    let strategy = ext
        .get("x-kubernetes-patch-strategy")
        .and_then(Value::as_str);
    let merge_key = ext
        .get("x-kubernetes-patch-merge-key")
        .and_then(Value::as_str);
    if let Some(strategy) = strategy {
        let parts = || strategy.split(',').map(str::trim);
        node.patch.merge = parts().any(|p| p == "merge");
        node.patch.retain_keys = parts().any(|p| p == "retainKeys");
    }
    if strategy.is_some() || merge_key.is_some() {
        node.patch.merge_key = merge_key.map(str::to_owned);
    }
    if matches!(node.shape, Shape::Array { .. })
        && (ext.contains_key("x-kubernetes-list-type")
            || ext.contains_key("x-kubernetes-patch-strategy"))
    {
        node.list_type = list_type(ext);
    }
}

/// A list's type, as kube-openapi's `schemaconv` derives it (`getListElementRelationship`):
/// `x-kubernetes-list-type` wins; without it, `x-kubernetes-patch-strategy: merge` (or
/// `merge,retainKeys`) makes the list associative, keyed by the patch merge key, or a set when
/// there is no merge key; anything else is atomic.
fn list_type(ext: &Map<String, Value>) -> ListType {
    let str_of = |k: &str| ext.get(k).and_then(Value::as_str);
    match str_of("x-kubernetes-list-type") {
        Some("set") => ListType::Set,
        Some("map") => ListType::Map(
            ext.get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)
                .map(|keys| {
                    keys.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default(),
        ),
        Some(_) => ListType::Atomic,
        None => match str_of("x-kubernetes-patch-strategy") {
            Some("merge" | "merge,retainKeys") => match str_of("x-kubernetes-patch-merge-key") {
                Some(key) => ListType::Map(vec![key.to_owned()]),
                None => ListType::Set,
            },
            _ => ListType::Atomic,
        },
    }
}

/// Strict field validation, as the apiserver's `fieldValidation=Strict`: the paths of the
/// fields in `value` that the schema of `node` does not know, formatted as in
/// `strict decoding error: unknown field "spec.containers[0].foo"` (struct fields and map keys
/// joined by `.`, list items as `[i]`), in document order. Untyped nodes accept anything;
/// an unknown field's value is not looked into; values of the wrong JSON type are not this
/// function's business.
pub fn unknown_fields(schema: &Schema, node: NodeId, value: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let mut path = String::new();
    walk_value(schema, node, value, &mut path, 0, &mut out);
    out
}

fn walk_value(
    schema: &Schema,
    node: NodeId,
    value: &Value,
    path: &mut String,
    depth: usize,
    out: &mut Vec<String>,
) {
    if depth > MAX_DEPTH {
        return;
    }
    match (&schema.node(node).shape, value) {
        (Shape::Object { fields, additional }, Value::Object(map)) => {
            for (key, child) in map {
                let len = path.len();
                push_key(path, key);
                match fields.get(key).or(additional.as_ref()) {
                    Some(&child_node) => {
                        walk_value(schema, child_node, child, path, depth + 1, out)
                    }
                    None => out.push(path.clone()),
                }
                path.truncate(len);
            }
        }
        (Shape::Array { items }, Value::Array(list)) => {
            for (i, child) in list.iter().enumerate() {
                let len = path.len();
                push_index(path, i);
                walk_value(schema, *items, child, path, depth + 1, out);
                path.truncate(len);
            }
        }
        _ => {}
    }
}

fn push_key(path: &mut String, key: &str) {
    if !path.is_empty() {
        path.push('.');
    }
    path.push_str(key);
}

fn push_index(path: &mut String, i: usize) {
    use fmt::Write as _;
    let _ = write!(path, "[{i}]");
}

/// One finding of the strict decoder; `Display` gives the apiserver's text, e.g.
/// `unknown field "spec.foo"` or `duplicate field "metadata.name"`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum StrictError {
    /// A field the schema does not know.
    UnknownField(String),
    /// A known field (or map key) that appears more than once in one object.
    DuplicateField(String),
}

impl fmt::Display for StrictError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (what, path) = match self {
            StrictError::UnknownField(p) => ("unknown", p),
            StrictError::DuplicateField(p) => ("duplicate", p),
        };
        write!(f, "{what} field {}", go_quote(path))
    }
}

/// The apiserver's message for a non-empty list of findings:
/// `strict decoding error: unknown field "spec.foo", duplicate field "metadata.name"`.
#[cfg(test)]
pub fn strict_decoding_message(errors: &[StrictError]) -> Option<String> {
    if errors.is_empty() {
        return None;
    }
    let parts: Vec<String> = errors.iter().map(ToString::to_string).collect();
    Some(format!("strict decoding error: {}", parts.join(", ")))
}

/// Why [`strict_errors`] could not read a body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid JSON at byte {offset}: {reason}")]
pub struct RawJsonError {
    /// Byte offset of the problem.
    pub offset: usize,
    /// What was wrong.
    pub reason: &'static str,
}

/// Strict decoding over the raw request body, like `sigs.k8s.io/json`'s `UnmarshalStrict`:
/// unknown fields (as [`unknown_fields`]) and duplicate fields (a known field or map key
/// repeated within one object), in the order the decoder meets them, each reported once, at
/// most 100. Values of untyped nodes are opaque (built-in untyped values, RawExtension and
/// FieldsV1, decode through their own `UnmarshalJSON`, which checks nothing), as are values of
/// unknown fields; a field both unknown and repeated is reported only as unknown.
pub fn strict_errors(
    schema: &Schema,
    node: NodeId,
    raw: &[u8],
) -> Result<Vec<StrictError>, RawJsonError> {
    let mut scanner = Scanner {
        schema,
        raw,
        pos: 0,
        out: Vec::new(),
        seen: HashSet::new(),
    };
    let mut path = String::new();
    scanner.value(Some(node), &mut path, 0)?;
    scanner.skip_ws();
    if scanner.pos < raw.len() {
        return Err(scanner.error("trailing data after the JSON value"));
    }
    Ok(scanner.out)
}

/// A minimal JSON reader that follows the schema alongside the text.
struct Scanner<'s> {
    schema: &'s Schema,
    raw: &'s [u8],
    pos: usize,
    out: Vec<StrictError>,
    /// Messages already reported (the decoder dedupes its findings).
    seen: HashSet<StrictError>,
}

impl Scanner<'_> {
    fn error(&self, reason: &'static str) -> RawJsonError {
        RawJsonError {
            offset: self.pos,
            reason,
        }
    }

    fn report(&mut self, e: StrictError) {
        if self.out.len() < MAX_STRICT_ERRORS && self.seen.insert(e.clone()) {
            self.out.push(e);
        }
    }

    fn peek(&self) -> Option<u8> {
        self.raw.get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    fn expect(&mut self, byte: u8, reason: &'static str) -> Result<(), RawJsonError> {
        self.skip_ws();
        if self.peek() == Some(byte) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.error(reason))
        }
    }

    /// Reads one value; `node` is `None` where nothing is checked.
    fn value(
        &mut self,
        node: Option<NodeId>,
        path: &mut String,
        depth: usize,
    ) -> Result<(), RawJsonError> {
        if depth > MAX_DEPTH {
            return Err(self.error("nesting too deep"));
        }
        self.skip_ws();
        match self.peek() {
            Some(b'{') => self.object(node, path, depth),
            Some(b'[') => self.array(node, path, depth),
            Some(b'"') => self.string(false).map(drop),
            Some(b't') => self.literal(b"true"),
            Some(b'f') => self.literal(b"false"),
            Some(b'n') => self.literal(b"null"),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => Err(self.error("unexpected character")),
            None => Err(self.error("unexpected end of input")),
        }
    }

    fn object(
        &mut self,
        node: Option<NodeId>,
        path: &mut String,
        depth: usize,
    ) -> Result<(), RawJsonError> {
        self.pos += 1; // '{'
        let schema = self.schema;
        let shape = node.map(|n| &schema.node(n).shape);
        let (fields, additional) = match shape {
            Some(Shape::Object { fields, additional }) => (Some(fields), *additional),
            _ => (None, None),
        };
        let mut keys_seen: HashSet<String> = HashSet::new();
        self.skip_ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(());
        }
        loop {
            self.skip_ws();
            if self.peek() != Some(b'"') {
                return Err(self.error("expected an object key"));
            }
            let key = self.string(true)?.unwrap_or_default();
            self.expect(b':', "expected ':' after an object key")?;
            let len = path.len();
            let child = match fields {
                Some(fields) => {
                    push_key(path, &key);
                    match fields.get(&key).copied().or(additional) {
                        Some(child) => {
                            if !keys_seen.insert(key) {
                                self.report(StrictError::DuplicateField(path.clone()));
                            }
                            Some(child)
                        }
                        None => {
                            self.report(StrictError::UnknownField(path.clone()));
                            None
                        }
                    }
                }
                None => None,
            };
            self.value(child, path, depth + 1)?;
            path.truncate(len);
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(());
                }
                _ => return Err(self.error("expected ',' or '}' in an object")),
            }
        }
    }

    fn array(
        &mut self,
        node: Option<NodeId>,
        path: &mut String,
        depth: usize,
    ) -> Result<(), RawJsonError> {
        self.pos += 1; // '['
        let items = node.and_then(|n| self.schema.items(n));
        self.skip_ws();
        if self.peek() == Some(b']') {
            self.pos += 1;
            return Ok(());
        }
        let mut i = 0;
        loop {
            let len = path.len();
            if items.is_some() {
                push_index(path, i);
            }
            self.value(items, path, depth + 1)?;
            path.truncate(len);
            i += 1;
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    return Ok(());
                }
                _ => return Err(self.error("expected ',' or ']' in an array")),
            }
        }
    }

    fn literal(&mut self, word: &[u8]) -> Result<(), RawJsonError> {
        if self.raw[self.pos..].starts_with(word) {
            self.pos += word.len();
            Ok(())
        } else {
            Err(self.error("invalid literal"))
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.pos;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.pos += 1;
        }
        self.pos - start
    }

    fn number(&mut self) -> Result<(), RawJsonError> {
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        match self.peek() {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => return Err(self.error("invalid number")),
        }
        if self.peek() == Some(b'.') {
            self.pos += 1;
            if self.digits() == 0 {
                return Err(self.error("invalid number"));
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.pos += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            if self.digits() == 0 {
                return Err(self.error("invalid number"));
            }
        }
        Ok(())
    }

    fn hex4(&mut self) -> Result<u32, RawJsonError> {
        let digits = self
            .raw
            .get(self.pos..self.pos + 4)
            .ok_or_else(|| self.error("truncated \\u escape"))?;
        let mut v = 0u32;
        for d in digits {
            let n = char::from(*d)
                .to_digit(16)
                .ok_or_else(|| self.error("invalid \\u escape"))?;
            v = v * 16 + n;
        }
        self.pos += 4;
        Ok(v)
    }

    /// Reads a string at `pos` (on its opening quote); decodes it when `keep` (invalid UTF-8
    /// and lone surrogates become U+FFFD, as in Go).
    fn string(&mut self, keep: bool) -> Result<Option<String>, RawJsonError> {
        self.pos += 1; // '"'
        let mut buf: Vec<u8> = Vec::new();
        loop {
            let Some(b) = self.peek() else {
                return Err(self.error("unterminated string"));
            };
            self.pos += 1;
            match b {
                b'"' => break,
                b'\\' => {
                    let Some(e) = self.peek() else {
                        return Err(self.error("unterminated string"));
                    };
                    self.pos += 1;
                    let c = match e {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => self.unicode_escape()?,
                        _ => return Err(self.error("invalid escape")),
                    };
                    if keep {
                        let mut tmp = [0u8; 4];
                        buf.extend_from_slice(c.encode_utf8(&mut tmp).as_bytes());
                    }
                }
                0x00..=0x1f => return Err(self.error("control character in string")),
                _ => {
                    if keep {
                        buf.push(b);
                    }
                }
            }
        }
        Ok(keep.then(|| String::from_utf8_lossy(&buf).into_owned()))
    }

    /// The character of a `\u` escape, from the four hex digits after the `u`; joins surrogate pairs.
    fn unicode_escape(&mut self) -> Result<char, RawJsonError> {
        let first = self.hex4()?;
        if (0xD800..0xDC00).contains(&first) && self.raw[self.pos..].starts_with(b"\\u") {
            let save = self.pos;
            self.pos += 2;
            let second = self.hex4()?;
            if (0xDC00..0xE000).contains(&second) {
                let c = 0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00);
                return Ok(char::from_u32(c).unwrap_or(char::REPLACEMENT_CHARACTER));
            }
            self.pos = save; // not a pair: the second escape stands on its own
        }
        Ok(char::from_u32(first).unwrap_or(char::REPLACEMENT_CHARACTER))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Schema {
        build_schema()
    }

    fn kind(s: &Schema, group: &str, version: &str, kind: &str) -> NodeId {
        s.kind(group, version, kind)
            .unwrap_or_else(|| panic!("{group}/{version} {kind} is registered"))
    }

    /// Follows `path` (field names; `[]` for list items) from `root`.
    fn at(s: &Schema, root: NodeId, path: &[&str]) -> NodeId {
        path.iter().fold(root, |id, step| {
            if *step == "[]" {
                s.items(id).unwrap_or_else(|| panic!("{step}: not a list"))
            } else {
                s.field(id, step)
                    .unwrap_or_else(|| panic!("{step}: no such field"))
            }
        })
    }

    fn docs() -> Vec<(&'static str, Value)> {
        DOCUMENTS
            .iter()
            .map(|(gv, text)| (*gv, serde_json::from_str(text).expect("document parses")))
            .collect()
    }

    #[test]
    fn every_document_parses_and_is_self_contained() {
        for (gv, doc) in docs() {
            assert_eq!(doc["openapi"], "3.0.0", "{gv}");
            let paths = doc["paths"].as_object().expect("paths");
            assert!(!paths.is_empty(), "{gv}");
            for path in paths.keys() {
                assert!(path.starts_with(&format!("/{gv}/")), "{gv}: {path}");
            }
            let schemas = doc["components"]["schemas"].as_object().expect("schemas");
            let mut refs = Vec::new();
            collect_refs(&doc, &mut refs);
            for r in refs {
                let name = r.strip_prefix(REF_PREFIX).expect("component ref");
                assert!(schemas.contains_key(name), "{gv}: dangling {r}");
            }
            // Operation descriptions are dropped; schema descriptions stay for `kubectl explain`.
            let ops = serde_json::to_string(&doc["paths"]).expect("paths serialise");
            assert!(
                !ops.contains("\"description\":\""),
                "{gv}: operation descriptions kept"
            );
            assert!(
                schemas
                    .values()
                    .any(|s| s.get("description").is_some_and(Value::is_string)),
                "{gv}: schema descriptions missing"
            );
        }
    }

    fn collect_refs(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(map) => {
                if let Some(Value::String(r)) = map.get("$ref") {
                    out.push(r.clone());
                }
                map.values().for_each(|v| collect_refs(v, out));
            }
            Value::Array(list) => list.iter().for_each(|v| collect_refs(v, out)),
            _ => {}
        }
    }

    #[test]
    fn every_patch_operation_lists_field_validation() {
        let mut patches = 0;
        let mut gvks = HashSet::new();
        for (gv, doc) in docs() {
            for (path, item) in doc["paths"].as_object().expect("paths") {
                let Some(patch) = item.get("patch") else {
                    continue;
                };
                patches += 1;
                let params = patch["parameters"].as_array().expect("parameters");
                assert!(
                    params.iter().any(|p| p["name"] == "fieldValidation"),
                    "{gv} {path}: PATCH lacks fieldValidation"
                );
                // kubectl matches the operation by its x-kubernetes-group-version-kind.
                let gvk = &patch["x-kubernetes-group-version-kind"];
                assert!(gvk["kind"].is_string(), "{gv} {path}: PATCH lacks its GVK");
                gvks.insert(format!("{}/{}", gvk["group"], gvk["kind"]));
            }
        }
        assert_eq!(
            patches, 30,
            "12 in api/v1, 4 in apps/v1 (with /status), 2 in policy/v1, 4 in rbac, 4 in flowcontrol (with /status), one each for \
             Lease, EndpointSlice, Event, NetworkPolicy"
        );
        for k in [
            "\"\"/\"Pod\"",
            "\"\"/\"Namespace\"",
            "\"coordination.k8s.io\"/\"Lease\"",
            "\"events.k8s.io\"/\"Event\"",
            "\"discovery.k8s.io\"/\"EndpointSlice\"",
            "\"apps\"/\"Deployment\"",
            "\"apps\"/\"StatefulSet\"",
            "\"rbac.authorization.k8s.io\"/\"ClusterRole\"",
            "\"policy\"/\"PodDisruptionBudget\"",
            "\"networking.k8s.io\"/\"NetworkPolicy\"",
        ] {
            assert!(gvks.contains(k), "{k} in {gvks:?}");
        }
    }

    #[test]
    fn every_served_kind_is_registered() {
        let s = schema();
        for (group, k) in [
            ("", "Pod"),
            ("", "Service"),
            ("", "Endpoints"),
            ("", "Namespace"),
            ("", "ConfigMap"),
            ("", "Secret"),
            ("", "Event"),
            ("events.k8s.io", "Event"),
            ("coordination.k8s.io", "Lease"),
            ("discovery.k8s.io", "EndpointSlice"),
            ("", "ServiceAccount"),
            ("", "PersistentVolumeClaim"),
            ("apps", "Deployment"),
            ("apps", "StatefulSet"),
            ("rbac.authorization.k8s.io", "Role"),
            ("rbac.authorization.k8s.io", "RoleBinding"),
            ("rbac.authorization.k8s.io", "ClusterRole"),
            ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
            ("policy", "PodDisruptionBudget"),
            ("networking.k8s.io", "NetworkPolicy"),
            ("flowcontrol.apiserver.k8s.io", "FlowSchema"),
            ("flowcontrol.apiserver.k8s.io", "PriorityLevelConfiguration"),
            ("authentication.k8s.io", "TokenReview"),
            ("authorization.k8s.io", "SubjectAccessReview"),
            ("authorization.k8s.io", "SelfSubjectAccessReview"),
            ("authorization.k8s.io", "LocalSubjectAccessReview"),
        ] {
            let id = kind(&s, group, "v1", k);
            for f in ["apiVersion", "kind", "metadata"] {
                assert!(s.field(id, f).is_some(), "{k}.{f}");
            }
        }
        assert_ne!(
            kind(&s, "", "v1", "Event"),
            kind(&s, "events.k8s.io", "v1", "Event")
        );
        assert!(s.kind("", "v1", "Deployment").is_none());
    }

    #[test]
    fn pod_list_types_and_merge_keys() {
        let s = schema();
        let pod = kind(&s, "", "v1", "Pod");

        let containers = s.node(at(&s, pod, &["spec", "containers"]));
        assert_eq!(containers.list_type, ListType::Map(vec!["name".into()]));
        assert!(containers.patch.merge);
        assert_eq!(containers.patch.merge_key.as_deref(), Some("name"));

        let ports = s.node(at(&s, pod, &["spec", "containers", "[]", "ports"]));
        assert_eq!(
            ports.list_type,
            ListType::Map(vec!["containerPort".into(), "protocol".into()])
        );
        assert_eq!(ports.patch.merge_key.as_deref(), Some("containerPort"));

        let volumes = s.node(at(&s, pod, &["spec", "volumes"]));
        assert!(volumes.patch.merge && volumes.patch.retain_keys);
        assert_eq!(volumes.list_type, ListType::Map(vec!["name".into()]));

        let finalizers = s.node(at(&s, pod, &["metadata", "finalizers"]));
        assert_eq!(finalizers.list_type, ListType::Set);
        assert!(finalizers.patch.merge);
        assert_eq!(finalizers.patch.merge_key, None);

        let owners = s.node(at(&s, pod, &["metadata", "ownerReferences"]));
        assert_eq!(owners.list_type, ListType::Map(vec!["uid".into()]));
        assert_eq!(owners.patch.merge_key.as_deref(), Some("uid"));

        let labels = s.node(at(&s, pod, &["metadata", "labels"]));
        match &labels.shape {
            Shape::Object { fields, additional } => {
                assert!(fields.is_empty());
                let value = additional.expect("labels are a map");
                assert_eq!(s.node(value).shape, Shape::Scalar);
            }
            other => panic!("labels: {other:?}"),
        }
        assert!(!labels.atomic_map);

        // Scalars, quantities, times, int-or-string; untyped FieldsV1.
        for path in [
            &["spec", "containers", "[]", "image"][..],
            &["spec", "containers", "[]", "resources", "limits", "cpu"],
            &["metadata", "creationTimestamp"],
            &[
                "spec",
                "containers",
                "[]",
                "livenessProbe",
                "httpGet",
                "port",
            ],
        ] {
            assert_eq!(s.node(at(&s, pod, path)).shape, Shape::Scalar, "{path:?}");
        }
        let fields_v1 = at(&s, pod, &["metadata", "managedFields", "[]", "fieldsV1"]);
        assert_eq!(s.node(fields_v1).shape, Shape::Untyped);

        // Atomic maps: a component-level x-kubernetes-map-type, and an inline one.
        let secret_ref = at(
            &s,
            pod,
            &[
                "spec",
                "containers",
                "[]",
                "env",
                "[]",
                "valueFrom",
                "secretKeyRef",
            ],
        );
        assert!(s.node(secret_ref).atomic_map);
        let node_selector = s.node(at(&s, pod, &["spec", "nodeSelector"]));
        assert!(node_selector.atomic_map);
    }

    #[test]
    fn shared_components_map_to_one_node() {
        let s = schema();
        let pod_meta = at(&s, kind(&s, "", "v1", "Pod"), &["metadata"]);
        let lease_meta = at(
            &s,
            kind(&s, "coordination.k8s.io", "v1", "Lease"),
            &["metadata"],
        );
        assert_eq!(pod_meta, lease_meta);
    }

    #[test]
    fn wrapper_extensions_override_the_component() {
        let s = schema();
        let ev = kind(&s, "", "v1", "Event");
        assert!(s.node(at(&s, ev, &["involvedObject"])).atomic_map);

        // Like PersistentVolumeSpec.claimRef: an atomic ObjectReference marked granular, and
        // DeploymentSpec.strategy: a reference marked retainKeys. Also a recursive type.
        let doc = json!({"components": {"schemas": {
            "Ref": {"type": "object", "properties": {"name": {"type": "string"}},
                    "x-kubernetes-map-type": "atomic"},
            "Spec": {"type": "object", "properties": {
                "plain": {"allOf": [{"$ref": "#/components/schemas/Ref"}], "default": {}},
                "granular": {"allOf": [{"$ref": "#/components/schemas/Ref"}],
                             "x-kubernetes-map-type": "granular"},
                "strategy": {"allOf": [{"$ref": "#/components/schemas/Ref"}],
                             "x-kubernetes-patch-strategy": "retainKeys"},
                "tags": {"type": "array", "items": {"type": "string"},
                         "x-kubernetes-patch-strategy": "merge"},
                "retained": {"type": "array", "items": {"type": "string"},
                             "x-kubernetes-patch-strategy": "retainKeys"},
                "free": {"type": "object"},
                "anyMap": {"type": "object", "additionalProperties": true},
                "children": {"type": "array",
                             "items": {"$ref": "#/components/schemas/Spec"}}
            }, "x-kubernetes-group-version-kind": [{"group": "g", "version": "v", "kind": "K"}]}
        }}});
        let s = build_schema_from(&[doc]);
        let k = kind(&s, "g", "v", "K");
        let plain = at(&s, k, &["plain"]);
        assert!(s.node(plain).atomic_map);
        let granular = s.node(at(&s, k, &["granular"]));
        assert!(!granular.atomic_map);
        assert_eq!(granular.shape, s.node(plain).shape);
        let strategy = s.node(at(&s, k, &["strategy"]));
        assert!(strategy.patch.retain_keys && !strategy.patch.merge && strategy.atomic_map);
        assert_eq!(s.node(at(&s, k, &["tags"])).list_type, ListType::Set);
        assert_eq!(s.node(at(&s, k, &["retained"])).list_type, ListType::Atomic);
        assert_eq!(s.node(at(&s, k, &["free"])).shape, Shape::Untyped);
        assert_eq!(s.node(at(&s, k, &["anyMap"])).shape, Shape::Untyped);
        assert_eq!(at(&s, k, &["children", "[]"]), k);
        let nested = json!({"children": [{"children": [{"plain": {"name": "x", "nope": 1}}]}]});
        assert_eq!(
            unknown_fields(&s, k, &nested),
            vec!["children[0].children[0].plain.nope"]
        );
    }

    fn valid_pod() -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "p", "namespace": "default",
                "labels": {"app": "x"}, "annotations": {"a": "b"},
                "finalizers": ["example.com/f"],
                "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "x", "uid": "u", "controller": true}],
                "managedFields": [{"manager": "m", "operation": "Apply", "apiVersion": "v1",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:labels": {"f:app": {}}}},
                    "time": "2024-01-01T00:00:00Z"}],
                "creationTimestamp": "2024-01-01T00:00:00Z"
            },
            "spec": {
                "containers": [{
                    "name": "c", "image": "busybox",
                    "ports": [{"containerPort": 80, "protocol": "TCP"}],
                    "env": [{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                    "resources": {"limits": {"cpu": "1", "memory": "64Mi"}},
                    "livenessProbe": {"httpGet": {"port": "http", "path": "/"}}
                }],
                "nodeSelector": {"disk": "ssd"},
                "volumes": [{"name": "v", "emptyDir": {}}]
            },
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": null}]}
        })
    }

    #[test]
    fn unknown_fields_of_pods_and_leases() {
        let s = schema();
        let pod = kind(&s, "", "v1", "Pod");
        assert_eq!(unknown_fields(&s, pod, &valid_pod()), Vec::<String>::new());

        let mut bad = valid_pod();
        bad["spec"]["foo"] = json!({"deep": 1});
        bad["spec"]["containers"][0]["bogus"] = json!(true);
        bad["metadata"]["managedFields"][0]["fieldsV1"]["anything"] = json!(1);
        assert_eq!(
            unknown_fields(&s, pod, &bad),
            vec!["spec.containers[0].bogus", "spec.foo"]
        );

        let lease = kind(&s, "coordination.k8s.io", "v1", "Lease");
        let valid = json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "l", "namespace": "default", "resourceVersion": "1"},
            "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15,
                     "acquireTime": "2024-01-01T00:00:00.000000Z", "renewTime": "2024-01-01T00:00:01.000000Z",
                     "leaseTransitions": 2}
        });
        assert!(unknown_fields(&s, lease, &valid).is_empty());
        let mut bad = valid;
        bad["spec"]["holder"] = json!("x");
        bad["extra"] = json!(null);
        assert_eq!(
            unknown_fields(&s, lease, &bad),
            vec!["spec.holder", "extra"]
        );
        // Values of the wrong type are not unknown fields.
        assert!(unknown_fields(&s, lease, &json!({"spec": [1, 2], "metadata": "x"})).is_empty());
    }

    #[test]
    fn strict_errors_match_the_apiserver() {
        let s = schema();
        let pod = kind(&s, "", "v1", "Pod");
        // The shape of kube's own field-validation integration test, on a Pod.
        let body = r#"{
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "dupename", "name": "p", "labels": {"app": "x", "app": "y"}, "unknownMeta": "v"},
            "spec": {
                "unknown1": "v", "unknownDupe": "a", "unknownDupe": {"b": 1},
                "hostNetwork": true, "hostNetwork": false,
                "containers": [{"name": "c", "image": "i", "unknownNested": "v",
                                "imagePullPolicy": "Always", "imagePullPolicy": "Never"}]
            }
        }"#;
        let errors = strict_errors(&s, pod, body.as_bytes()).expect("valid JSON");
        assert_eq!(
            strict_decoding_message(&errors).as_deref(),
            Some(
                "strict decoding error: duplicate field \"metadata.name\", \
                 duplicate field \"metadata.labels.app\", unknown field \"metadata.unknownMeta\", \
                 unknown field \"spec.unknown1\", unknown field \"spec.unknownDupe\", \
                 duplicate field \"spec.hostNetwork\", \
                 unknown field \"spec.containers[0].unknownNested\", \
                 duplicate field \"spec.containers[0].imagePullPolicy\""
            )
        );

        let valid = serde_json::to_vec(&valid_pod()).expect("serialises");
        assert_eq!(strict_errors(&s, pod, &valid), Ok(vec![]));
        assert_eq!(strict_decoding_message(&[]), None);

        // Untyped values (FieldsV1) are opaque; escapes in keys are decoded.
        let body = r#"{"metadata": {"managedFields": [{"fieldsV1": {"a": 1, "a": 2}}]},
                       "sp\u0065c": {"f\"oo": 1}}"#;
        let errors = strict_errors(&s, pod, body.as_bytes()).expect("valid JSON");
        assert_eq!(errors, vec![StrictError::UnknownField("spec.f\"oo".into())]);
        assert_eq!(errors[0].to_string(), r#"unknown field "spec.f\"oo""#);
    }

    #[test]
    fn strict_errors_reject_malformed_json_without_panicking() {
        let s = schema();
        let pod = kind(&s, "", "v1", "Pod");
        for bad in [
            "",
            "{",
            "{\"a\"",
            "{\"a\":",
            "{\"a\":1,}",
            "[1,",
            "\"\\u12",
            "\"\\x\"",
            "01",
            "-",
            "1.",
            "1e",
            "tru",
            "{} {}",
            "{\"a\" 1}",
            "\"\u{1}\"",
            "[1 2]",
            "{1:2}",
        ] {
            assert!(strict_errors(&s, pod, bad.as_bytes()).is_err(), "{bad:?}");
        }
        let deep = "[".repeat(5000);
        assert!(strict_errors(&s, pod, deep.as_bytes()).is_err());
        for ok in [
            "null",
            "1",
            "-0.5e+3",
            "\"\\ud83d\\ude00\\ud800\"",
            "[]",
            "{}",
            " true ",
        ] {
            assert!(strict_errors(&s, pod, ok.as_bytes()).is_ok(), "{ok:?}");
        }
    }

    #[test]
    fn v3_root_shape() {
        let root = v3_root();
        let paths = root["paths"].as_object().expect("paths");
        assert_eq!(root.as_object().map(Map::len), Some(1));
        let keys: Vec<&str> = paths.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "api/v1",
                "apis/apps/v1",
                "apis/authentication.k8s.io/v1",
                "apis/authorization.k8s.io/v1",
                "apis/coordination.k8s.io/v1",
                "apis/discovery.k8s.io/v1",
                "apis/events.k8s.io/v1",
                "apis/flowcontrol.apiserver.k8s.io/v1",
                "apis/networking.k8s.io/v1",
                "apis/policy/v1",
                "apis/rbac.authorization.k8s.io/v1",
            ]
        );
        for (gv, entry) in paths {
            let url = entry["serverRelativeURL"].as_str().expect("url");
            let (doc, hash) = v3_document(gv).expect("document");
            assert_eq!(url, format!("/openapi/v3/{gv}?hash={hash}"));
            assert_eq!(hash.len(), 16);
            assert!(
                hash.chars()
                    .all(|c| c.is_ascii_digit() || c.is_ascii_uppercase())
            );
            assert!(doc.starts_with('{'));
            assert_eq!(entry.as_object().map(Map::len), Some(1));
        }
        assert_eq!(v3_root(), root);
        assert!(v3_document("/api/v1").is_some());
        assert!(v3_document("apis/batch/v1").is_none());
        assert_eq!(
            fnv1a64(b"a"),
            0xaf63_dc4c_8601_ec8c,
            "FNV-1a 64 reference vector"
        );
    }

    #[test]
    fn build_schema_is_deterministic() {
        assert_eq!(format!("{:?}", schema()), format!("{:?}", schema()));
    }

    #[test]
    fn go_quote_escapes() {
        assert_eq!(go_quote("a.b[0]"), "\"a.b[0]\"");
        assert_eq!(go_quote("x\"\\\n\u{1}é"), "\"x\\\"\\\\\\n\\x01é\"");
    }
}
