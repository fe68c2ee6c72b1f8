//! Decodes Kubernetes protobuf request bodies (`application/vnd.kubernetes.protobuf`) into the
//! JSON form the rest of the simulator works with.
//!
//! kubectl ≥ 1.32 sends the bodies of typed-client requests (`create namespace|configmap|secret|
//! service`, `auth can-i`, deletes with `DeleteOptions`) as protobuf, with no JSON fallback. The
//! wire format is the one of `k8s.io/apimachinery/pkg/runtime/serializer/protobuf`: the magic
//! `k8s\0`, then a `runtime.Unknown` envelope whose `typeMeta` names the object's `apiVersion`
//! and `kind` and whose `raw` holds the object's own message.
//!
//! Decoding is driven by the real `generated.proto` files of `k8s.io/api` and
//! `k8s.io/apimachinery`, vendored comment-free under `proto/` by `scripts/vendor-proto.sh` and
//! parsed once into a registry. What the `.proto` files cannot say about the JSON form comes from
//! `proto/go-json.txt`, which that script reads off the Go struct tags: which fields are Go
//! pointers (a zero `gracePeriodSeconds` must survive), which lack `omitempty`, which are inlined
//! (`Volume.volumeSource`, `Probe.handler`, …), which messages are top-level kinds and which are Go
//! slices (`Verbs`, `ExtraValue`). With both, the output equals what the Go API server gets by
//! decoding the protobuf body into its Go type and marshalling that to JSON (map keys sorted, zero
//! values dropped or kept exactly as Go's `encoding/json` does), with two liberties: a `Quantity`
//! keeps the client's spelling instead of being re-canonicalised (Go clients send the canonical
//! form), and a `RawExtension` holding a nested protobuf envelope is decoded (Go's JSON marshaller
//! refuses one; an empty one becomes `null`).
//!
//! The types with a hand-written JSON form are converted like their Go `MarshalJSON`: `Time`
//! (RFC 3339, whole seconds, `null` when zero), `MicroTime` (six fractional digits), `Duration`
//! (Go's `time.Duration` string), `Quantity` (string), `IntOrString` (number or string),
//! `RawExtension` and `FieldsV1` (their embedded JSON). Protobuf `bytes` become base64 strings.
//!
//! Malformed input of any kind gives a [`ProtoError`], never a panic; unknown field numbers are
//! skipped as protobuf does, and nesting is limited to [`MAX_DEPTH`].

use std::collections::{BTreeMap, HashMap};
use std::sync::OnceLock;

use base64::Engine as _;
use serde_json::{Map, Number, Value};

/// The media type of Kubernetes protobuf bodies.
pub const CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// How deeply messages (and envelopes embedded in `RawExtension`s) may nest.
pub const MAX_DEPTH: usize = 64;

/// The prefix of every Kubernetes protobuf body.
const MAGIC: &[u8] = b"k8s\0";

/// Embeds vendored files as `(name, text)` pairs.
macro_rules! vendored {
    ($($file:literal),* $(,)?) => {
        &[$(($file, include_str!(concat!("proto/", $file)))),*]
    };
}

/// The vendored `.proto` files, in no particular order (imports are not followed: every file is
/// loaded and names are resolved across all of them).
const PROTO_FILES: &[(&str, &str)] = vendored![
    "runtime.proto",
    "runtime-schema.proto",
    "intstr.proto",
    "resource.proto",
    "meta-v1.proto",
    "core-v1.proto",
    "coordination-v1.proto",
    "discovery-v1.proto",
    "events-v1.proto",
    "authentication-v1.proto",
    "authorization-v1.proto",
    "apps-v1.proto",
    "networking-v1.proto",
    "policy-v1.proto",
    "rbac-v1.proto",
];

/// Go JSON facts for the messages above (see the file's header and `scripts/vendor-proto.sh`).
const GO_JSON: &str = include_str!("proto/go-json.txt");

/// The proto package of `k8s.io/apimachinery/pkg/apis/meta/v1`, whose option kinds
/// (`DeleteOptions`, …) and `Status` are registered in every group-version.
const META_V1: &str = "k8s.io.apimachinery.pkg.apis.meta.v1";

/// Why a protobuf body could not be decoded. The `Display` form suits a 400 response message.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProtoError {
    /// The body does not start with the `k8s\0` magic.
    #[error(
        "provided data does not appear to be a Kubernetes protobuf message (expected the prefix \"k8s\\x00\")"
    )]
    NotProtobuf,
    /// The body is only the magic.
    #[error("empty protobuf body")]
    Empty,
    /// The envelope lacks the kind or the apiVersion (`"kind"` or `"apiVersion"`).
    #[error("the protobuf envelope does not name the object's {0}")]
    MissingTypeMeta(&'static str),
    /// The envelope's apiVersion is not `version` or `group/version`.
    #[error("invalid apiVersion {0:?} in the protobuf envelope")]
    InvalidApiVersion(String),
    /// No vendored definition for this kind in this group-version.
    #[error("no protobuf definition for kind {kind:?} in apiVersion {api_version:?}")]
    UnknownKind {
        /// The envelope's apiVersion.
        api_version: String,
        /// The envelope's kind.
        kind: String,
    },
    /// The bytes are not a valid protobuf encoding of the expected message.
    #[error("malformed protobuf in {at}: {reason}")]
    Malformed {
        /// The message, or `Message.field`, being decoded.
        at: String,
        /// What was wrong.
        reason: &'static str,
    },
    /// Well-formed protobuf whose value has no JSON form (as Go's decoder or marshaller would say).
    #[error("invalid value in {at}: {reason}")]
    InvalidValue {
        /// The message, or `Message.field`, being decoded.
        at: String,
        /// What was wrong.
        reason: String,
    },
    /// Messages nested deeper than [`MAX_DEPTH`].
    #[error("protobuf message nested deeper than {MAX_DEPTH} levels")]
    TooDeep,
    /// The vendored definitions failed to load (a build-time bug, caught by the tests).
    #[error("protobuf definitions failed to load: {0}")]
    Schema(String),
}

/// Whether a `Content-Type` header value names the Kubernetes protobuf media type (parameters such
/// as `;charset=` are ignored; the `;stream=watch` framing is not a request-body type).
pub fn is_protobuf(content_type: &str) -> bool {
    let mut parts = content_type.split(';');
    let media = parts.next().unwrap_or_default().trim();
    media.eq_ignore_ascii_case(CONTENT_TYPE)
        && !parts.any(|p| p.trim().to_ascii_lowercase().replace(' ', "") == "stream=watch")
}

/// Decodes a `application/vnd.kubernetes.protobuf` body (with the `k8s\0` envelope) into the
/// object's JSON form, with `apiVersion` and `kind` from the envelope.
pub fn decode(body: &[u8]) -> Result<Value, ProtoError> {
    let rest = body.strip_prefix(MAGIC).ok_or(ProtoError::NotProtobuf)?;
    if rest.is_empty() {
        return Err(ProtoError::Empty);
    }
    Decoder { reg: registry()? }.envelope(rest, 0)
}

// ---------------------------------------------------------------------------------------------
// Wire format

/// One field's value as it appears on the wire.
#[derive(Clone, Copy, Debug)]
enum Wire<'a> {
    Varint(u64),
    Fixed64([u8; 8]),
    Len(&'a [u8]),
    Fixed32([u8; 4]),
    /// A (deprecated) group, already skipped.
    Group,
}

/// Reads the fields of one message, in order.
struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn new(data: &'a [u8]) -> Self {
        Reader { data, pos: 0 }
    }

    fn varint(&mut self) -> Result<u64, &'static str> {
        let mut value = 0u64;
        for i in 0..10 {
            let Some(&b) = self.data.get(self.pos) else {
                return Err("unexpected end of data");
            };
            self.pos += 1;
            // Like Go's decoder, bits past the 64th are dropped.
            value |= u64::from(b & 0x7f).checked_shl(7 * i).unwrap_or(0);
            if b < 0x80 {
                return Ok(value);
            }
        }
        Err("varint longer than 10 bytes")
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], &'static str> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&end| end <= self.data.len())
            .ok_or("unexpected end of data")?;
        let bytes = &self.data[self.pos..end];
        self.pos = end;
        Ok(bytes)
    }

    fn tag(&mut self) -> Result<(u32, u8), &'static str> {
        let key = self.varint()?;
        let number = key >> 3;
        if number == 0 || number > 0x1fff_ffff {
            return Err("illegal field number");
        }
        Ok((number as u32, (key & 7) as u8))
    }

    /// The next field, or `None` at the end of the message.
    fn field(&mut self) -> Result<Option<(u32, Wire<'a>)>, &'static str> {
        if self.pos >= self.data.len() {
            return Ok(None);
        }
        let (number, wire_type) = self.tag()?;
        let wire = match wire_type {
            0 => Wire::Varint(self.varint()?),
            1 => Wire::Fixed64(self.take(8)?.try_into().map_err(|_| "bad fixed64")?),
            2 => {
                let len = usize::try_from(self.varint()?).map_err(|_| "length too large")?;
                Wire::Len(self.take(len)?)
            }
            3 => {
                self.skip_group(number)?;
                Wire::Group
            }
            4 => return Err("unexpected end-group"),
            5 => Wire::Fixed32(self.take(4)?.try_into().map_err(|_| "bad fixed32")?),
            _ => return Err("illegal wire type"),
        };
        Ok(Some((number, wire)))
    }

    /// Skips past the end-group that closes the group `number` just opened.
    fn skip_group(&mut self, number: u32) -> Result<(), &'static str> {
        let mut open = vec![number];
        while let Some(&innermost) = open.last() {
            let (n, wire_type) = self.tag()?;
            match wire_type {
                0 => {
                    self.varint()?;
                }
                1 => {
                    self.take(8)?;
                }
                2 => {
                    let len = usize::try_from(self.varint()?).map_err(|_| "length too large")?;
                    self.take(len)?;
                }
                3 if open.len() < MAX_DEPTH => open.push(n),
                3 => return Err("groups nested too deeply"),
                4 if n == innermost => {
                    open.pop();
                }
                4 => return Err("mismatched end-group"),
                5 => {
                    self.take(4)?;
                }
                _ => return Err("illegal wire type"),
            }
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Registry

/// A protobuf scalar type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scalar {
    Double,
    Float,
    Int32,
    Int64,
    Uint32,
    Uint64,
    Sint32,
    Sint64,
    Fixed32,
    Fixed64,
    Sfixed32,
    Sfixed64,
    Bool,
    String,
    Bytes,
}

impl Scalar {
    fn parse(name: &str) -> Option<Scalar> {
        Some(match name {
            "double" => Scalar::Double,
            "float" => Scalar::Float,
            "int32" => Scalar::Int32,
            "int64" => Scalar::Int64,
            "uint32" => Scalar::Uint32,
            "uint64" => Scalar::Uint64,
            "sint32" => Scalar::Sint32,
            "sint64" => Scalar::Sint64,
            "fixed32" => Scalar::Fixed32,
            "fixed64" => Scalar::Fixed64,
            "sfixed32" => Scalar::Sfixed32,
            "sfixed64" => Scalar::Sfixed64,
            "bool" => Scalar::Bool,
            "string" => Scalar::String,
            "bytes" => Scalar::Bytes,
            _ => return None,
        })
    }

    /// The JSON of the Go zero value.
    fn zero(self) -> Value {
        match self {
            Scalar::Bool => Value::Bool(false),
            Scalar::String | Scalar::Bytes => Value::String(String::new()),
            _ => Value::from(0),
        }
    }

    /// Whether a repeated field of this type may arrive packed.
    fn packable(self) -> bool {
        !matches!(self, Scalar::String | Scalar::Bytes)
    }
}

/// A field's element type.
#[derive(Clone, Copy, Debug)]
enum Ty {
    Scalar(Scalar),
    /// Index into [`Registry::messages`].
    Message(usize),
}

/// A field's cardinality and type.
#[derive(Clone, Copy, Debug)]
enum Shape {
    Single(Ty),
    Repeated(Ty),
    Map(Scalar, Ty),
}

/// One field of a message, with its Go JSON facts.
#[derive(Debug)]
struct Field {
    name: String,
    shape: Shape,
    /// The JSON key (the proto name unless `go-json.txt` says otherwise).
    json: String,
    /// A Go pointer: present on the wire iff set, emitted even when zero.
    pointer: bool,
    /// Go's `omitempty`.
    omitempty: bool,
    /// An anonymous Go field without a JSON name: its fields are merged into the parent.
    inline: bool,
    /// `json:"-"`.
    skip: bool,
}

/// The types whose JSON form is written by hand in Go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Special {
    Time,
    MicroTime,
    Duration,
    Quantity,
    IntOrString,
    RawExtension,
    FieldsV1,
}

impl Special {
    fn of(full_name: &str) -> Option<Special> {
        Some(match full_name {
            "k8s.io.apimachinery.pkg.apis.meta.v1.Time" => Special::Time,
            "k8s.io.apimachinery.pkg.apis.meta.v1.MicroTime" => Special::MicroTime,
            "k8s.io.apimachinery.pkg.apis.meta.v1.Duration" => Special::Duration,
            "k8s.io.apimachinery.pkg.apis.meta.v1.FieldsV1" => Special::FieldsV1,
            "k8s.io.apimachinery.pkg.api.resource.Quantity"
            | "k8s.io.apimachinery.pkg.api.resource.QuantityValue" => Special::Quantity,
            "k8s.io.apimachinery.pkg.util.intstr.IntOrString" => Special::IntOrString,
            "k8s.io.apimachinery.pkg.runtime.RawExtension" => Special::RawExtension,
            _ => return None,
        })
    }
}

/// One message type.
#[derive(Debug)]
struct Message {
    full_name: String,
    fields: Vec<Field>,
    by_number: HashMap<u32, usize>,
    /// Embeds `TypeMeta` in Go: may be the object of a request body.
    kind: bool,
    /// A Go slice type (`Verbs`, `ExtraValue`): its JSON is its `items`.
    go_slice: bool,
    special: Option<Special>,
}

impl Message {
    /// The unqualified name, for error messages.
    fn short_name(&self) -> &str {
        self.full_name.rsplit('.').next().unwrap_or(&self.full_name)
    }
}

/// Every vendored message, by fully-qualified name.
#[derive(Debug)]
struct Registry {
    messages: Vec<Message>,
    index: HashMap<String, usize>,
}

impl Registry {
    /// Loads the vendored files.
    fn load() -> Result<Registry, String> {
        Registry::from_sources(PROTO_FILES, GO_JSON)
    }

    /// Parses `.proto` files (`(name, text)`) and resolves their type names across all of them,
    /// then applies the Go JSON facts.
    fn from_sources(files: &[(&str, &str)], go_json: &str) -> Result<Registry, String> {
        let mut parsed = Vec::new();
        for (file, text) in files {
            parse_file(text, &mut parsed).map_err(|e| format!("{file}: {e}"))?;
        }
        let mut index = HashMap::new();
        for (i, m) in parsed.iter().enumerate() {
            if index.insert(m.full_name.clone(), i).is_some() {
                return Err(format!("message {} defined twice", m.full_name));
            }
        }
        let resolve = |scope: &str, name: &str| -> Result<Ty, String> {
            if let Some(s) = Scalar::parse(name) {
                return Ok(Ty::Scalar(s));
            }
            if let Some(abs) = name.strip_prefix('.') {
                return index
                    .get(abs)
                    .map(|&i| Ty::Message(i))
                    .ok_or_else(|| format!("unknown type {name}"));
            }
            // Innermost scope first, as protoc does.
            let outermost_error = format!("unknown type {name} in {scope}");
            let mut scope = scope;
            loop {
                let candidate = if scope.is_empty() {
                    name.to_owned()
                } else {
                    format!("{scope}.{name}")
                };
                if let Some(&i) = index.get(&candidate) {
                    return Ok(Ty::Message(i));
                }
                if scope.is_empty() {
                    return Err(outermost_error);
                }
                scope = scope.rsplit_once('.').map_or("", |(parent, _)| parent);
            }
        };
        let mut messages = Vec::with_capacity(parsed.len());
        for m in &parsed {
            let mut fields = Vec::with_capacity(m.fields.len());
            let mut by_number = HashMap::new();
            for f in &m.fields {
                let ty = resolve(&m.full_name, &f.type_name)
                    .map_err(|e| format!("{}.{}: {e}", m.full_name, f.name))?;
                let shape = match (&f.map_key, f.repeated) {
                    (Some(key), _) => match Scalar::parse(key) {
                        Some(k) if !matches!(k, Scalar::Bytes | Scalar::Double | Scalar::Float) => {
                            Shape::Map(k, ty)
                        }
                        _ => {
                            return Err(format!(
                                "{}.{}: bad map key type {key}",
                                m.full_name, f.name
                            ));
                        }
                    },
                    (None, true) => Shape::Repeated(ty),
                    (None, false) => Shape::Single(ty),
                };
                if by_number.insert(f.number, fields.len()).is_some() {
                    return Err(format!(
                        "{}: field number {} used twice",
                        m.full_name, f.number
                    ));
                }
                fields.push(Field {
                    name: f.name.clone(),
                    shape,
                    json: f.name.clone(),
                    pointer: false,
                    omitempty: true,
                    inline: false,
                    skip: false,
                });
            }
            messages.push(Message {
                special: Special::of(&m.full_name),
                full_name: m.full_name.clone(),
                fields,
                by_number,
                kind: false,
                go_slice: false,
            });
        }
        let mut reg = Registry { messages, index };
        reg.apply_go_json(go_json)?;
        Ok(reg)
    }

    /// Applies `go-json.txt`: `<message> [T] [L] <number><flags>...`.
    fn apply_go_json(&mut self, text: &str) -> Result<(), String> {
        for line in text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
        {
            let mut words = line.split_whitespace();
            let name = words.next().unwrap_or_default();
            let &i = self
                .index
                .get(name)
                .ok_or_else(|| format!("go-json.txt: unknown message {name}"))?;
            let msg = &mut self.messages[i];
            for word in words {
                match word {
                    "T" => msg.kind = true,
                    "L" => msg.go_slice = true,
                    _ => {
                        let digits = word
                            .find(|c: char| !c.is_ascii_digit())
                            .unwrap_or(word.len());
                        let number: u32 = word[..digits]
                            .parse()
                            .map_err(|_| format!("go-json.txt: bad entry {word:?} for {name}"))?;
                        let &fi = msg
                            .by_number
                            .get(&number)
                            .ok_or_else(|| format!("go-json.txt: {name} has no field {number}"))?;
                        let field = &mut msg.fields[fi];
                        let (flags, json) = word[digits..]
                            .split_once('=')
                            .unwrap_or((&word[digits..], ""));
                        for flag in flags.chars() {
                            match flag {
                                'p' => field.pointer = true,
                                'r' => field.omitempty = false,
                                'i' => field.inline = true,
                                'x' => field.skip = true,
                                _ => {
                                    return Err(format!(
                                        "go-json.txt: bad flag {flag:?} in {name}"
                                    ));
                                }
                            }
                        }
                        if !json.is_empty() {
                            field.json = json.to_owned();
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// The message for an envelope's `apiVersion` and `kind`.
    fn kind(&self, api_version: &str, kind: &str) -> Result<usize, ProtoError> {
        let (group, version) = match api_version.split_once('/') {
            None => ("", api_version),
            Some((g, v)) if !v.contains('/') && !g.is_empty() && !v.is_empty() => (g, v),
            Some(_) => return Err(ProtoError::InvalidApiVersion(api_version.to_owned())),
        };
        let package = match group {
            "" => Some(format!("k8s.io.api.core.{version}")),
            "meta.k8s.io" => Some(format!("k8s.io.apimachinery.pkg.apis.meta.{version}")),
            g if !g.contains('.') => Some(format!("k8s.io.api.{g}.{version}")),
            g => g.strip_suffix(".k8s.io").map(|rest| {
                let first = rest.split('.').next().unwrap_or(rest);
                format!("k8s.io.api.{first}.{version}")
            }),
        };
        // Option kinds and Status are registered in every group-version.
        package
            .into_iter()
            .chain([META_V1.to_owned()])
            .filter_map(|p| self.index.get(&format!("{p}.{kind}")).copied())
            .find(|&i| self.messages[i].kind)
            .ok_or_else(|| ProtoError::UnknownKind {
                api_version: api_version.to_owned(),
                kind: kind.to_owned(),
            })
    }
}

/// The registry, loaded on first use.
fn registry() -> Result<&'static Registry, ProtoError> {
    static REGISTRY: OnceLock<Result<Registry, String>> = OnceLock::new();
    REGISTRY
        .get_or_init(Registry::load)
        .as_ref()
        .map_err(|e| ProtoError::Schema(e.clone()))
}

// ---------------------------------------------------------------------------------------------
// .proto parser (the proto2 subset the Kubernetes files use)

/// A message as parsed, before type names are resolved.
struct ParsedMessage {
    full_name: String,
    fields: Vec<ParsedField>,
}

struct ParsedField {
    repeated: bool,
    map_key: Option<String>,
    type_name: String,
    name: String,
    number: u32,
}

#[derive(Debug, PartialEq)]
enum Tok<'a> {
    Word(&'a str),
    Str,
    Sym(char),
}

/// Splits `.proto` text into words (names, numbers), string literals and symbols, dropping
/// comments.
fn tokenize(text: &str) -> Result<Vec<Tok<'_>>, String> {
    let bytes = text.as_bytes();
    let mut toks = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if text[i..].starts_with("//") {
            i = text[i..].find('\n').map_or(bytes.len(), |n| i + n);
        } else if text[i..].starts_with("/*") {
            i = text[i + 2..]
                .find("*/")
                .map(|n| i + 2 + n + 2)
                .ok_or("unterminated comment")?;
        } else if c == b'"' || c == b'\'' {
            i += 1;
            loop {
                match bytes.get(i) {
                    None => return Err("unterminated string".into()),
                    Some(b'\\') => i += 2,
                    Some(&q) if q == c => break,
                    Some(_) => i += 1,
                }
            }
            i += 1;
            toks.push(Tok::Str);
        } else if c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-' | b'+') {
            let start = i;
            while i < bytes.len()
                && (bytes[i].is_ascii_alphanumeric()
                    || matches!(bytes[i], b'_' | b'.' | b'-' | b'+'))
            {
                i += 1;
            }
            toks.push(Tok::Word(&text[start..i]));
        } else if b"{};=<>,[]()".contains(&c) {
            toks.push(Tok::Sym(c as char));
            i += 1;
        } else {
            return Err(format!("unexpected character {:?}", c as char));
        }
    }
    Ok(toks)
}

/// A cursor over tokens.
struct Parser<'t, 'a> {
    toks: &'t [Tok<'a>],
    pos: usize,
}

impl<'a> Parser<'_, 'a> {
    fn peek(&self) -> Option<&Tok<'a>> {
        self.toks.get(self.pos)
    }

    fn next(&mut self) -> Result<&Tok<'a>, String> {
        let t = self.toks.get(self.pos).ok_or("unexpected end of file")?;
        self.pos += 1;
        Ok(t)
    }

    fn word(&mut self) -> Result<&'a str, String> {
        match self.next()? {
            Tok::Word(w) => Ok(w),
            t => Err(format!("expected a name, found {t:?}")),
        }
    }

    fn sym(&mut self, c: char) -> Result<(), String> {
        match self.next()? {
            Tok::Sym(s) if *s == c => Ok(()),
            t => Err(format!("expected {c:?}, found {t:?}")),
        }
    }

    /// Skips to just past the next `;` at this nesting level.
    fn skip_statement(&mut self) -> Result<(), String> {
        let mut depth = 0usize;
        loop {
            match self.next()? {
                Tok::Sym(';') if depth == 0 => return Ok(()),
                Tok::Sym('[' | '(' | '{' | '<') => depth += 1,
                Tok::Sym(']' | ')' | '}' | '>') => {
                    depth = depth.checked_sub(1).ok_or("unbalanced brackets")?
                }
                _ => {}
            }
        }
    }
}

/// Parses one file's messages (with their fully-qualified names) into `out`.
fn parse_file(text: &str, out: &mut Vec<ParsedMessage>) -> Result<(), String> {
    let toks = tokenize(text)?;
    let mut p = Parser {
        toks: &toks,
        pos: 0,
    };
    let mut package = String::new();
    while let Some(t) = p.peek() {
        match t {
            Tok::Sym(';') => p.pos += 1,
            Tok::Word("syntax" | "import" | "option") => {
                p.pos += 1;
                p.skip_statement()?;
            }
            Tok::Word("package") => {
                p.pos += 1;
                package = p.word()?.to_owned();
                p.sym(';')?;
            }
            Tok::Word("message") => {
                p.pos += 1;
                parse_message(&mut p, &package, out)?;
            }
            t => return Err(format!("unsupported top-level {t:?}")),
        }
    }
    Ok(())
}

/// Parses `Name { ... }` after the `message` keyword.
fn parse_message(
    p: &mut Parser<'_, '_>,
    scope: &str,
    out: &mut Vec<ParsedMessage>,
) -> Result<(), String> {
    let name = p.word()?;
    let full_name = if scope.is_empty() {
        name.to_owned()
    } else {
        format!("{scope}.{name}")
    };
    p.sym('{')?;
    let slot = out.len();
    out.push(ParsedMessage {
        full_name: full_name.clone(),
        fields: Vec::new(),
    });
    let mut fields = Vec::new();
    loop {
        match p.next()? {
            Tok::Sym('}') => break,
            Tok::Sym(';') => {}
            Tok::Word("message") => parse_message(p, &full_name, out)?,
            Tok::Word("option" | "reserved" | "extensions") => p.skip_statement()?,
            Tok::Word("map") => {
                p.sym('<')?;
                let key = p.word()?.to_owned();
                p.sym(',')?;
                let value = p.word()?.to_owned();
                p.sym('>')?;
                fields.push(parse_field_rest(p, false, Some(key), value)?);
            }
            Tok::Word(label @ ("optional" | "repeated" | "required")) => {
                let repeated = *label == "repeated";
                let type_name = p.word()?.to_owned();
                fields.push(parse_field_rest(p, repeated, None, type_name)?);
            }
            Tok::Word(w @ ("enum" | "oneof" | "extend" | "group" | "service")) => {
                return Err(format!("{full_name}: unsupported {w}"));
            }
            // proto3-style field without a label
            Tok::Word(type_name) => {
                let type_name = (*type_name).to_owned();
                fields.push(parse_field_rest(p, false, None, type_name)?);
            }
            t => return Err(format!("{full_name}: unexpected {t:?}")),
        }
    }
    out[slot].fields = fields;
    Ok(())
}

/// Parses `name = N [options];` after a field's type.
fn parse_field_rest(
    p: &mut Parser<'_, '_>,
    repeated: bool,
    map_key: Option<String>,
    type_name: String,
) -> Result<ParsedField, String> {
    let name = p.word()?.to_owned();
    p.sym('=')?;
    let number = p.word()?;
    let number: u32 = number
        .parse()
        .map_err(|_| format!("{name}: bad field number {number}"))?;
    if number == 0 || number > 0x1fff_ffff {
        return Err(format!("{name}: bad field number {number}"));
    }
    if p.peek() == Some(&Tok::Sym('[')) {
        p.skip_statement()?;
    } else {
        p.sym(';')?;
    }
    Ok(ParsedField {
        repeated,
        map_key,
        type_name,
        name,
        number,
    })
}

// ---------------------------------------------------------------------------------------------
// Decoding

/// What has been read for one field of the message being decoded.
enum Slot<'a> {
    Absent,
    Scalar(Value),
    /// The occurrences of a singular message field, merged by concatenation as protobuf does.
    Message(Vec<&'a [u8]>),
    List(Vec<Value>),
    Map(BTreeMap<String, Value>),
}

struct Decoder<'r> {
    reg: &'r Registry,
}

fn malformed(at: impl Into<String>, reason: &'static str) -> ProtoError {
    ProtoError::Malformed {
        at: at.into(),
        reason,
    }
}

fn invalid(at: impl Into<String>, reason: impl Into<String>) -> ProtoError {
    ProtoError::InvalidValue {
        at: at.into(),
        reason: reason.into(),
    }
}

impl Decoder<'_> {
    /// Decodes a `runtime.Unknown` envelope (after the magic) into the object's JSON.
    fn envelope(&self, data: &[u8], depth: usize) -> Result<Value, ProtoError> {
        const AT: &str = "runtime.Unknown";
        let mut api_version = String::new();
        let mut kind = String::new();
        let mut raw: &[u8] = &[];
        let mut r = Reader::new(data);
        while let Some((number, wire)) = r.field().map_err(|e| malformed(AT, e))? {
            match (number, wire) {
                (1, Wire::Len(type_meta)) => {
                    let mut t = Reader::new(type_meta);
                    while let Some((n, w)) =
                        t.field().map_err(|e| malformed("runtime.TypeMeta", e))?
                    {
                        match (n, w) {
                            (1, Wire::Len(s)) => {
                                api_version = String::from_utf8_lossy(s).into_owned()
                            }
                            (2, Wire::Len(s)) => kind = String::from_utf8_lossy(s).into_owned(),
                            (1 | 2, _) => {
                                return Err(malformed("runtime.TypeMeta", "wrong wire type"));
                            }
                            _ => {}
                        }
                    }
                }
                (2, Wire::Len(bytes)) => raw = bytes,
                // contentEncoding and contentType: ignored by Go's decoder too.
                (3 | 4, Wire::Len(_)) => {}
                (1..=4, _) => return Err(malformed(AT, "wrong wire type")),
                _ => {}
            }
        }
        if kind.is_empty() {
            return Err(ProtoError::MissingTypeMeta("kind"));
        }
        if api_version.is_empty() {
            return Err(ProtoError::MissingTypeMeta("apiVersion"));
        }
        let message = self.reg.kind(&api_version, &kind)?;
        let body = self.message(message, raw, depth + 1)?;
        let mut out = Map::new();
        out.insert("kind".into(), Value::String(kind));
        out.insert("apiVersion".into(), Value::String(api_version));
        if let Value::Object(fields) = body {
            out.extend(fields);
        }
        Ok(Value::Object(out))
    }

    /// Decodes one message into its Go JSON form.
    fn message(&self, index: usize, data: &[u8], depth: usize) -> Result<Value, ProtoError> {
        if depth > MAX_DEPTH {
            return Err(ProtoError::TooDeep);
        }
        let msg = &self.reg.messages[index];
        if let Some(special) = msg.special {
            return self.special(special, msg, data, depth);
        }
        let mut slots: Vec<Slot<'_>> = msg.fields.iter().map(|_| Slot::Absent).collect();
        let mut r = Reader::new(data);
        while let Some((number, wire)) = r.field().map_err(|e| malformed(msg.short_name(), e))? {
            let Some(&fi) = msg.by_number.get(&number) else {
                continue; // unknown field: skipped
            };
            let field = &msg.fields[fi];
            let at = || format!("{}.{}", msg.short_name(), field.name);
            match field.shape {
                Shape::Single(Ty::Scalar(s)) => {
                    slots[fi] = Slot::Scalar(scalar(s, wire).map_err(|e| at_err(at(), e))?)
                }
                Shape::Single(Ty::Message(_)) => {
                    let Wire::Len(bytes) = wire else {
                        return Err(malformed(at(), "wrong wire type"));
                    };
                    match &mut slots[fi] {
                        Slot::Message(parts) => parts.push(bytes),
                        slot => *slot = Slot::Message(vec![bytes]),
                    }
                }
                Shape::Repeated(ty) => {
                    if !matches!(slots[fi], Slot::List(_)) {
                        slots[fi] = Slot::List(Vec::new());
                    }
                    let Slot::List(list) = &mut slots[fi] else {
                        continue;
                    };
                    match (ty, wire) {
                        (Ty::Scalar(s), Wire::Len(bytes)) if s.packable() => {
                            let mut packed = Reader::new(bytes);
                            while packed.pos < bytes.len() {
                                let w = match s {
                                    Scalar::Double | Scalar::Fixed64 | Scalar::Sfixed64 => packed
                                        .take(8)
                                        .map(|b| Wire::Fixed64(b.try_into().unwrap_or([0; 8]))),
                                    Scalar::Float | Scalar::Fixed32 | Scalar::Sfixed32 => packed
                                        .take(4)
                                        .map(|b| Wire::Fixed32(b.try_into().unwrap_or([0; 4]))),
                                    _ => packed.varint().map(Wire::Varint),
                                }
                                .map_err(|e| malformed(at(), e))?;
                                list.push(scalar(s, w).map_err(|e| at_err(at(), e))?);
                            }
                        }
                        (Ty::Scalar(s), w) => list.push(scalar(s, w).map_err(|e| at_err(at(), e))?),
                        (Ty::Message(m), Wire::Len(bytes)) => {
                            list.push(self.message(m, bytes, depth + 1)?)
                        }
                        (Ty::Message(_), _) => return Err(malformed(at(), "wrong wire type")),
                    }
                }
                Shape::Map(key_type, value_type) => {
                    let Wire::Len(entry) = wire else {
                        return Err(malformed(at(), "wrong wire type"));
                    };
                    let (key, value) = self.map_entry(key_type, value_type, entry, depth).map_err(
                        |e| match e {
                            EntryError::Wire(reason) => malformed(at(), reason),
                            EntryError::Value(reason) => invalid(at(), reason),
                            EntryError::Nested(e) => e,
                        },
                    )?;
                    match &mut slots[fi] {
                        Slot::Map(map) => {
                            map.insert(key, value);
                        }
                        slot => *slot = Slot::Map(BTreeMap::from([(key, value)])),
                    }
                }
            }
        }

        let mut out = Map::new();
        for (field, slot) in msg.fields.iter().zip(slots) {
            if field.skip {
                continue;
            }
            let value = match (field.shape, slot) {
                (Shape::Single(Ty::Scalar(_)), Slot::Scalar(v)) => {
                    (field.pointer || !field.omitempty || !is_zero(&v)).then_some(v)
                }
                (Shape::Single(Ty::Scalar(s)), _) => {
                    if field.omitempty {
                        None
                    } else if field.pointer || s == Scalar::Bytes {
                        Some(Value::Null)
                    } else {
                        Some(s.zero())
                    }
                }
                (Shape::Single(Ty::Message(_)), Slot::Absent) if field.pointer => {
                    (!field.omitempty).then_some(Value::Null)
                }
                (Shape::Single(Ty::Message(m)), slot) => {
                    let parts = match slot {
                        Slot::Message(parts) => parts,
                        _ => Vec::new(),
                    };
                    let v = match parts.as_slice() {
                        [] => self.message(m, &[], depth + 1)?,
                        [one] => self.message(m, one, depth + 1)?,
                        many => self.message(m, &many.concat(), depth + 1)?,
                    };
                    let empty_slice = self.reg.messages[m].go_slice && v.is_null();
                    (!(field.omitempty && empty_slice)).then_some(v)
                }
                (Shape::Repeated(_), Slot::List(list)) if !list.is_empty() => {
                    Some(Value::Array(list))
                }
                (Shape::Map(..), Slot::Map(map)) if !map.is_empty() => {
                    Some(Value::Object(map.into_iter().collect()))
                }
                (Shape::Repeated(_) | Shape::Map(..), _) => {
                    (!field.omitempty).then_some(Value::Null)
                }
            };
            match value {
                Some(Value::Object(inner)) if field.inline => out.extend(inner),
                Some(_) if field.inline => {} // a nil embedded pointer: nothing to merge
                Some(v) => {
                    out.insert(field.json.clone(), v);
                }
                None => {}
            }
        }
        if msg.go_slice {
            return Ok(match out.remove("items") {
                Some(items @ Value::Array(_)) => items,
                _ => Value::Null,
            });
        }
        Ok(Value::Object(out))
    }

    /// Decodes one `map<K, V>` entry (key = field 1, value = field 2; either may be missing).
    fn map_entry(
        &self,
        key_type: Scalar,
        value_type: Ty,
        entry: &[u8],
        depth: usize,
    ) -> Result<(String, Value), EntryError> {
        let mut key = None;
        let mut value = None;
        let mut value_parts: Vec<&[u8]> = Vec::new();
        let mut r = Reader::new(entry);
        while let Some((number, wire)) = r.field().map_err(EntryError::Wire)? {
            match (number, value_type) {
                (1, _) => key = Some(scalar(key_type, wire).map_err(EntryError::from_scalar)?),
                (2, Ty::Scalar(s)) => {
                    value = Some(scalar(s, wire).map_err(EntryError::from_scalar)?)
                }
                (2, Ty::Message(_)) => match wire {
                    Wire::Len(bytes) => value_parts.push(bytes),
                    _ => return Err(EntryError::Wire("wrong wire type")),
                },
                _ => {}
            }
        }
        let key = match key.unwrap_or_else(|| key_type.zero()) {
            Value::String(s) => s,
            other => other.to_string(),
        };
        let value = match value_type {
            Ty::Scalar(s) => value.unwrap_or_else(|| s.zero()),
            Ty::Message(m) => self
                .message(m, &value_parts.concat(), depth + 1)
                .map_err(EntryError::Nested)?,
        };
        Ok((key, value))
    }

    /// Decodes a type whose Go JSON form is hand-written.
    fn special(
        &self,
        special: Special,
        msg: &Message,
        data: &[u8],
        depth: usize,
    ) -> Result<Value, ProtoError> {
        let at = msg.short_name();
        // Every special type is a handful of fields numbered 1..=3; last occurrence wins.
        let mut fields: [Option<Wire<'_>>; 3] = [None; 3];
        let mut r = Reader::new(data);
        while let Some((number, wire)) = r.field().map_err(|e| malformed(at, e))? {
            if let Some(slot) = fields.get_mut(number as usize - 1) {
                *slot = Some(wire);
            }
        }
        let int = |i: usize, s: Scalar| -> Result<i64, ProtoError> {
            match fields[i] {
                None => Ok(0),
                Some(w) => scalar(s, w)
                    .map_err(|e| at_err(at, e))
                    .map(|v| v.as_i64().unwrap_or(0)),
            }
        };
        let bytes = |i: usize| -> Result<Option<&[u8]>, ProtoError> {
            match fields[i] {
                None => Ok(None),
                Some(Wire::Len(b)) => Ok(Some(b)),
                Some(_) => Err(malformed(at, "wrong wire type")),
            }
        };
        match special {
            Special::Time | Special::MicroTime => {
                if data.is_empty() {
                    return Ok(Value::Null);
                }
                let seconds = int(0, Scalar::Int64)?;
                let nanos = if special == Special::Time {
                    0
                } else {
                    int(1, Scalar::Int32)?
                };
                format_time(seconds, nanos, special == Special::MicroTime)
                    .map_err(|e| invalid(at, e))
            }
            Special::Duration => Ok(Value::String(go_duration(int(0, Scalar::Int64)?))),
            Special::Quantity => match bytes(0)? {
                None => Ok(Value::String("0".into())),
                Some(s) => {
                    let s = String::from_utf8_lossy(s);
                    if !is_quantity(&s) {
                        return Err(invalid(
                            at,
                            format!(
                                "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$', got {s:?}"
                            ),
                        ));
                    }
                    Ok(Value::String(s.into_owned()))
                }
            },
            Special::IntOrString => match int(0, Scalar::Int64)? {
                0 => Ok(Value::from(int(1, Scalar::Int32)?)),
                1 => Ok(Value::String(
                    bytes(2)?
                        .map(String::from_utf8_lossy)
                        .unwrap_or_default()
                        .into_owned(),
                )),
                t => Err(invalid(at, format!("impossible IntOrString.Type {t}"))),
            },
            Special::RawExtension => match bytes(0)? {
                None | Some([]) => Ok(Value::Null),
                Some(raw) if raw.starts_with(MAGIC) => {
                    self.envelope(&raw[MAGIC.len()..], depth + 1)
                }
                Some([0xd9, 0xd9, 0xf7, ..]) => Err(invalid(at, "CBOR content is not supported")),
                Some(raw) => embedded_json(raw).map_err(|e| invalid(at, e)),
            },
            Special::FieldsV1 => match bytes(0)? {
                None | Some([]) => Ok(Value::Null),
                Some([first, ..])
                    if *first == 0xf6
                        || (0xa0..=0xbf).contains(first)
                        || (0xc6..=0xdb).contains(first) =>
                {
                    Err(invalid(at, "CBOR content is not supported"))
                }
                Some(raw) => embedded_json(raw).map_err(|e| invalid(at, e)),
            },
        }
    }
}

/// Why a map entry failed, before the field's name is known to the message.
enum EntryError {
    Wire(&'static str),
    Value(String),
    Nested(ProtoError),
}

impl EntryError {
    fn from_scalar(e: ScalarError) -> EntryError {
        match e {
            ScalarError::Wire(w) => EntryError::Wire(w),
            ScalarError::Value(v) => EntryError::Value(v),
        }
    }
}

/// Why a scalar could not be read.
enum ScalarError {
    Wire(&'static str),
    Value(String),
}

fn at_err(at: impl Into<String>, e: ScalarError) -> ProtoError {
    match e {
        ScalarError::Wire(reason) => malformed(at, reason),
        ScalarError::Value(reason) => invalid(at, reason),
    }
}

/// Converts one scalar from the wire to JSON, as Go decodes and then marshals it.
fn scalar(s: Scalar, wire: Wire<'_>) -> Result<Value, ScalarError> {
    let float = |f: f64| {
        Number::from_f64(f)
            .map(Value::Number)
            .ok_or_else(|| ScalarError::Value(format!("unsupported float value {f}")))
    };
    Ok(match (s, wire) {
        // Go truncates 32-bit varints to their low 32 bits.
        (Scalar::Int32, Wire::Varint(v)) => Value::from(v as u32 as i32),
        (Scalar::Int64, Wire::Varint(v)) => Value::from(v as i64),
        (Scalar::Uint32, Wire::Varint(v)) => Value::from(v as u32),
        (Scalar::Uint64, Wire::Varint(v)) => Value::from(v),
        (Scalar::Sint32, Wire::Varint(v)) => {
            let v = v as u32;
            Value::from((v >> 1) as i32 ^ -((v & 1) as i32))
        }
        (Scalar::Sint64, Wire::Varint(v)) => Value::from((v >> 1) as i64 ^ -((v & 1) as i64)),
        (Scalar::Bool, Wire::Varint(v)) => Value::Bool(v != 0),
        (Scalar::Fixed32, Wire::Fixed32(b)) => Value::from(u32::from_le_bytes(b)),
        (Scalar::Sfixed32, Wire::Fixed32(b)) => Value::from(i32::from_le_bytes(b)),
        // Go prints a float32 with its shortest 32-bit representation.
        (Scalar::Float, Wire::Fixed32(b)) => {
            let f = f32::from_le_bytes(b);
            float(f.to_string().parse().unwrap_or(f64::from(f)))?
        }
        (Scalar::Fixed64, Wire::Fixed64(b)) => Value::from(u64::from_le_bytes(b)),
        (Scalar::Sfixed64, Wire::Fixed64(b)) => Value::from(i64::from_le_bytes(b)),
        (Scalar::Double, Wire::Fixed64(b)) => float(f64::from_le_bytes(b))?,
        (Scalar::String, Wire::Len(b)) => Value::String(String::from_utf8_lossy(b).into_owned()),
        (Scalar::Bytes, Wire::Len(b)) => {
            Value::String(base64::engine::general_purpose::STANDARD.encode(b))
        }
        (_, w) => {
            return Err(ScalarError::Wire(match w {
                Wire::Group => "unexpected group",
                _ => "wrong wire type",
            }));
        }
    })
}

/// Whether Go's `omitempty` drops this scalar.
fn is_zero(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::String(s) => s.is_empty(),
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
    }
}

/// Parses the JSON held by a `RawExtension` or `FieldsV1`.
fn embedded_json(raw: &[u8]) -> Result<Value, String> {
    serde_json::from_slice(raw).map_err(|e| format!("embedded content is not valid JSON: {e}"))
}

/// Go's `time.Unix(0, 0)` minus Go's zero `time.Time` (January 1, year 1, UTC), in seconds.
const GO_ZERO_TIME_UNIX: i64 = -62_135_596_800;

/// Formats a `Time` (`micro` false: RFC 3339, whole seconds) or a `MicroTime` (six fractional
/// digits, truncated), in UTC; Go's zero time is `null`.
fn format_time(seconds: i64, nanos: i64, micro: bool) -> Result<Value, String> {
    // Normalise like Go's time.Unix.
    let seconds = seconds
        .checked_add(nanos.div_euclid(1_000_000_000))
        .ok_or("time out of range")?;
    let nanos = nanos.rem_euclid(1_000_000_000);
    if seconds == GO_ZERO_TIME_UNIX && nanos == 0 {
        return Ok(Value::Null);
    }
    let ts = jiff::Timestamp::new(seconds, nanos as i32)
        .map_err(|_| format!("time out of range: {seconds}s"))?;
    let dt = jiff::tz::Offset::UTC.to_datetime(ts);
    let year = i32::from(dt.year());
    let year = if year < 0 {
        format!("-{:04}", -year)
    } else {
        format!("{year:04}")
    };
    let mut s = format!(
        "{year}-{:02}-{:02}T{:02}:{:02}:{:02}",
        dt.month(),
        dt.day(),
        dt.hour(),
        dt.minute(),
        dt.second()
    );
    if micro {
        s.push_str(&format!(".{:06}", nanos / 1000));
    }
    s.push('Z');
    Ok(Value::String(s))
}

/// Go's `time.Duration.String()` of `nanos` nanoseconds (`"1h2m3.5s"`, `"1.5ms"`, `"0s"`).
fn go_duration(nanos: i64) -> String {
    let mut u = nanos.unsigned_abs();
    let neg = nanos < 0;
    let mut out = String::new();
    if u < 1_000_000_000 {
        let (prec, unit) = match u {
            0 => return "0s".into(),
            1..=999 => (0, "ns"),
            1_000..=999_999 => (3, "µs"),
            _ => (6, "ms"),
        };
        let (int, frac) = split_frac(u, prec);
        out.push_str(&int.to_string());
        out.push_str(&frac);
        out.push_str(unit);
    } else {
        let (secs, frac) = split_frac(u, 9);
        u = secs;
        let s = u % 60;
        u /= 60;
        let m = u % 60;
        let h = u / 60;
        if h > 0 {
            out.push_str(&format!("{h}h"));
        }
        if h > 0 || m > 0 {
            out.push_str(&format!("{m}m"));
        }
        out.push_str(&format!("{s}{frac}s"));
    }
    if neg {
        out.insert(0, '-');
    }
    out
}

/// Splits `v` into `v / 10^prec` and the fraction as `.ddd` without trailing zeros (empty when
/// zero), like Go's `fmtFrac`.
fn split_frac(v: u64, prec: u32) -> (u64, String) {
    let scale = 10u64.pow(prec);
    let frac = v % scale;
    if frac == 0 {
        return (v / scale, String::new());
    }
    let digits = format!("{frac:0width$}", width = prec as usize);
    (v / scale, format!(".{}", digits.trim_end_matches('0')))
}

/// Whether `s` matches Go's quantity pattern `^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$`.
fn is_quantity(s: &str) -> bool {
    let s = s.strip_prefix(['+', '-']).unwrap_or(s);
    let number_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    if number_end == 0 {
        return false;
    }
    let rest = s[number_end..].trim_start_matches(|c: char| "eEinumkKMGTP".contains(c));
    let rest = rest.strip_prefix(['+', '-']).unwrap_or(rest);
    rest.chars().all(|c| c.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Bodies encoded by the Go protobuf serializer of k8s.io/apimachinery v0.33.5 (named after the
    /// object) or captured from kubectl v1.32 (`kubectl_*`), each with the JSON that Go marshals
    /// after decoding it with that serializer: the API server's view of the body.
    const VECTORS: &str = include_str!("proto/test-vectors.json");

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
            .collect()
    }

    fn put_varint(mut v: u64, out: &mut Vec<u8>) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }

    fn key(number: u32, wire_type: u8) -> Vec<u8> {
        let mut out = Vec::new();
        put_varint(u64::from(number) << 3 | u64::from(wire_type), &mut out);
        out
    }

    fn len_field(number: u32, bytes: &[u8]) -> Vec<u8> {
        let mut out = key(number, 2);
        put_varint(bytes.len() as u64, &mut out);
        out.extend_from_slice(bytes);
        out
    }

    fn varint_field(number: u32, v: u64) -> Vec<u8> {
        let mut out = key(number, 0);
        put_varint(v, &mut out);
        out
    }

    fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
        let type_meta = [
            len_field(1, api_version.as_bytes()),
            len_field(2, kind.as_bytes()),
        ]
        .concat();
        [MAGIC.to_vec(), len_field(1, &type_meta), len_field(2, raw)].concat()
    }

    fn vectors() -> Vec<(String, Vec<u8>, Value)> {
        let parsed: Vec<Value> = serde_json::from_str(VECTORS).expect("test-vectors.json");
        parsed
            .into_iter()
            .map(|v| {
                (
                    v["name"].as_str().expect("name").to_owned(),
                    unhex(v["hex"].as_str().expect("hex")),
                    v["json"].clone(),
                )
            })
            .collect()
    }

    #[test]
    fn registry_loads() {
        let reg = registry().expect("vendored protos load");
        assert!(reg.messages.len() > 300, "{}", reg.messages.len());
        let volume = &reg.messages[reg.index["k8s.io.api.core.v1.Volume"]];
        assert!(
            volume
                .fields
                .iter()
                .any(|f| f.name == "volumeSource" && f.inline)
        );
    }

    #[test]
    fn go_vectors_decode_to_the_json_go_produces() {
        let vectors = vectors();
        assert_eq!(vectors.len(), 24);
        let mut failures = Vec::new();
        for (name, body, want) in &vectors {
            match decode(body) {
                Ok(got) if got == *want => {}
                Ok(got) => failures.push(format!("{name}:\n  got  {got}\n  want {want}")),
                Err(e) => failures.push(format!("{name}: {e}")),
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    #[test]
    fn go_vectors_keep_gos_key_order() {
        for (name, body, want) in vectors() {
            let got = decode(&body).expect("decodes");
            assert_eq!(got.to_string(), want.to_string(), "{name}");
        }
    }

    #[test]
    fn every_brief_kind_resolves() {
        let reg = registry().expect("registry");
        for (api_version, kind, message) in [
            ("v1", "Namespace", "k8s.io.api.core.v1.Namespace"),
            ("v1", "Pod", "k8s.io.api.core.v1.Pod"),
            ("v1", "Service", "k8s.io.api.core.v1.Service"),
            ("v1", "ConfigMap", "k8s.io.api.core.v1.ConfigMap"),
            ("v1", "Secret", "k8s.io.api.core.v1.Secret"),
            ("v1", "Event", "k8s.io.api.core.v1.Event"),
            ("events.k8s.io/v1", "Event", "k8s.io.api.events.v1.Event"),
            (
                "coordination.k8s.io/v1",
                "Lease",
                "k8s.io.api.coordination.v1.Lease",
            ),
            (
                "discovery.k8s.io/v1",
                "EndpointSlice",
                "k8s.io.api.discovery.v1.EndpointSlice",
            ),
            (
                "authentication.k8s.io/v1",
                "TokenReview",
                "k8s.io.api.authentication.v1.TokenReview",
            ),
            (
                "authorization.k8s.io/v1",
                "SubjectAccessReview",
                "k8s.io.api.authorization.v1.SubjectAccessReview",
            ),
            (
                "authorization.k8s.io/v1",
                "SelfSubjectAccessReview",
                "k8s.io.api.authorization.v1.SelfSubjectAccessReview",
            ),
            (
                "authorization.k8s.io/v1",
                "LocalSubjectAccessReview",
                "k8s.io.api.authorization.v1.LocalSubjectAccessReview",
            ),
            (
                "authorization.k8s.io/v1",
                "SelfSubjectRulesReview",
                "k8s.io.api.authorization.v1.SelfSubjectRulesReview",
            ),
            (
                "meta.k8s.io/v1",
                "DeleteOptions",
                "k8s.io.apimachinery.pkg.apis.meta.v1.DeleteOptions",
            ),
            (
                "v1",
                "DeleteOptions",
                "k8s.io.apimachinery.pkg.apis.meta.v1.DeleteOptions",
            ),
            (
                "apps/v1",
                "DeleteOptions",
                "k8s.io.apimachinery.pkg.apis.meta.v1.DeleteOptions",
            ),
            (
                "v1",
                "Status",
                "k8s.io.apimachinery.pkg.apis.meta.v1.Status",
            ),
            ("v1", "List", "k8s.io.api.core.v1.List"),
            ("v1", "ServiceAccount", "k8s.io.api.core.v1.ServiceAccount"),
            (
                "v1",
                "PersistentVolumeClaim",
                "k8s.io.api.core.v1.PersistentVolumeClaim",
            ),
            ("apps/v1", "Deployment", "k8s.io.api.apps.v1.Deployment"),
            ("apps/v1", "StatefulSet", "k8s.io.api.apps.v1.StatefulSet"),
            (
                "rbac.authorization.k8s.io/v1",
                "ClusterRoleBinding",
                "k8s.io.api.rbac.v1.ClusterRoleBinding",
            ),
            (
                "policy/v1",
                "PodDisruptionBudget",
                "k8s.io.api.policy.v1.PodDisruptionBudget",
            ),
            (
                "networking.k8s.io/v1",
                "NetworkPolicy",
                "k8s.io.api.networking.v1.NetworkPolicy",
            ),
        ] {
            let i = reg
                .kind(api_version, kind)
                .unwrap_or_else(|e| panic!("{api_version} {kind}: {e}"));
            assert_eq!(reg.messages[i].full_name, message);
        }
        for (api_version, kind) in [
            ("v1", "Lease"),
            ("batch/v1", "Job"),
            ("v1", "ObjectMeta"),
            ("v1", ""),
        ] {
            assert!(
                matches!(
                    reg.kind(api_version, kind),
                    Err(ProtoError::UnknownKind { .. })
                ),
                "{api_version} {kind}"
            );
        }
        for api_version in ["a/b/c", "/v1", "apps/"] {
            assert!(
                matches!(
                    reg.kind(api_version, "Pod"),
                    Err(ProtoError::InvalidApiVersion(_))
                ),
                "{api_version}"
            );
        }
    }

    #[test]
    fn unknown_fields_of_every_wire_type_are_skipped() {
        let unknown = [
            varint_field(900, 7),
            [key(901, 1), vec![0; 8]].concat(),
            len_field(902, b"junk"),
            [key(903, 5), vec![0; 4]].concat(),
            // a group holding a nested group and a varint
            [
                key(904, 3),
                key(905, 3),
                varint_field(1, 1),
                key(905, 4),
                key(904, 4),
            ]
            .concat(),
        ]
        .concat();
        let meta = [len_field(1, b"cfg"), unknown.clone()].concat();
        let entry = [len_field(1, b"k"), unknown.clone(), len_field(2, b"v")].concat();
        let raw = [
            unknown.clone(),
            len_field(1, &meta),
            len_field(2, &entry),
            unknown,
        ]
        .concat();
        let got = decode(&envelope("v1", "ConfigMap", &raw)).expect("decodes");
        assert_eq!(
            got,
            json!({"kind": "ConfigMap", "apiVersion": "v1",
                   "metadata": {"name": "cfg", "creationTimestamp": null}, "data": {"k": "v"}})
        );
    }

    #[test]
    fn repeated_scalars_may_be_packed_or_not_and_occurrences_merge() {
        let mut packed = Vec::new();
        for v in [1u64, 2, 300] {
            put_varint(v, &mut packed);
        }
        // supplementalGroups = 4 in PodSecurityContext (securityContext = 14 in PodSpec), sent
        // packed, then unpacked, in two occurrences of securityContext that protobuf merges.
        let first = [len_field(4, &packed), varint_field(3, 1)].concat();
        let second = [varint_field(4, u64::MAX), varint_field(2, 1000)].concat();
        let spec = [len_field(14, &first), len_field(14, &second)].concat();
        let got = decode(&envelope("v1", "Pod", &len_field(2, &spec))).expect("decodes");
        assert_eq!(
            got,
            json!({"kind": "Pod", "apiVersion": "v1", "metadata": {"creationTimestamp": null},
                   "spec": {"containers": null, "securityContext": {
                       "runAsUser": 1000, "runAsNonRoot": true, "supplementalGroups": [1, 2, 300, -1]}},
                   "status": {}})
        );
    }

    #[test]
    fn go_zero_values_follow_pointer_and_omitempty() {
        // DeleteOptions: every field is a pointer, so explicit zeros survive.
        let raw = [varint_field(1, 0), varint_field(3, 0), len_field(4, b"")].concat();
        let got = decode(&envelope("meta.k8s.io/v1", "DeleteOptions", &raw)).expect("decodes");
        assert_eq!(
            got,
            json!({"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1",
                   "gracePeriodSeconds": 0, "orphanDependents": false, "propagationPolicy": ""})
        );
        // ObjectMeta's non-pointer omitempty zeros disappear, as in Go's JSON.
        let meta = [
            len_field(1, b"ns"),
            len_field(2, b""),
            varint_field(7, 0),
            len_field(8, b""),
        ]
        .concat();
        let got = decode(&envelope("v1", "Namespace", &len_field(1, &meta))).expect("decodes");
        assert_eq!(
            got,
            json!({"kind": "Namespace", "apiVersion": "v1", "metadata": {"name": "ns", "creationTimestamp": null},
                   "spec": {}, "status": {}})
        );
        // Map entries may lack a key or a value.
        let entries = [
            len_field(2, &len_field(2, b"\x01")),
            len_field(2, &len_field(1, b"nokey")),
        ]
        .concat();
        let raw = [len_field(1, &len_field(1, b"s")), entries].concat();
        let got = decode(&envelope("v1", "Secret", &raw)).expect("decodes");
        assert_eq!(got["data"], json!({"": "AQ==", "nokey": ""}));
    }

    #[test]
    fn raw_extensions_hold_json_or_nested_envelopes() {
        let namespace = envelope("v1", "Namespace", &len_field(1, &len_field(1, b"inner")));
        let raw = [
            len_field(2, &len_field(1, br#"{"a": [1, 2]}"#)),
            len_field(2, &len_field(1, &namespace)),
            len_field(2, b""),
        ]
        .concat();
        let got = decode(&envelope("v1", "List", &raw)).expect("decodes");
        assert_eq!(
            got,
            json!({"kind": "List", "apiVersion": "v1", "metadata": {}, "items": [
                {"a": [1, 2]},
                {"kind": "Namespace", "apiVersion": "v1", "metadata": {"name": "inner", "creationTimestamp": null},
                 "spec": {}, "status": {}},
                null]})
        );
        let bad = len_field(2, &len_field(1, b"\x01\x02"));
        assert!(matches!(
            decode(&envelope("v1", "List", &bad)),
            Err(ProtoError::InvalidValue { .. })
        ));
    }

    #[test]
    fn nesting_is_limited() {
        let mut body = envelope("v1", "List", b"");
        for _ in 0..MAX_DEPTH {
            body = envelope("v1", "List", &len_field(2, &len_field(1, &body)));
        }
        assert!(matches!(decode(&body), Err(ProtoError::TooDeep)));
    }

    #[test]
    fn errors_name_the_problem() {
        assert!(matches!(decode(b"{}"), Err(ProtoError::NotProtobuf)));
        assert!(matches!(decode(b""), Err(ProtoError::NotProtobuf)));
        assert!(matches!(decode(MAGIC), Err(ProtoError::Empty)));
        let no_kind = [MAGIC.to_vec(), len_field(1, &len_field(1, b"v1"))].concat();
        assert!(matches!(
            decode(&no_kind),
            Err(ProtoError::MissingTypeMeta("kind"))
        ));
        let no_version = [MAGIC.to_vec(), len_field(1, &len_field(2, b"Pod"))].concat();
        assert!(matches!(
            decode(&no_version),
            Err(ProtoError::MissingTypeMeta("apiVersion"))
        ));
        let e = decode(&envelope("batch/v1", "Job", b"")).expect_err("unknown kind");
        assert_eq!(
            e.to_string(),
            r#"no protobuf definition for kind "Job" in apiVersion "batch/v1""#
        );

        // metadata.name sent as a varint
        let e = decode(&envelope(
            "v1",
            "ConfigMap",
            &len_field(1, &varint_field(1, 5)),
        ))
        .expect_err("wire type");
        assert_eq!(
            e.to_string(),
            "malformed protobuf in ObjectMeta.name: wrong wire type"
        );
        // a length running past the end
        let e = decode(&envelope("v1", "ConfigMap", &[0x0a, 0x05, 0x0a])).expect_err("truncated");
        assert_eq!(
            e.to_string(),
            "malformed protobuf in ConfigMap: unexpected end of data"
        );
        // IntOrString with an impossible type
        let port = [varint_field(3, 80), len_field(4, &varint_field(1, 7))].concat();
        let e = decode(&envelope(
            "v1",
            "Service",
            &len_field(2, &len_field(1, &port)),
        ))
        .expect_err("intstr");
        assert_eq!(
            e.to_string(),
            "invalid value in IntOrString: impossible IntOrString.Type 7"
        );
        // a malformed quantity
        let limits = len_field(
            1,
            &[len_field(1, b"cpu"), len_field(2, &len_field(1, b"lots"))].concat(),
        );
        let container = [len_field(1, b"c"), len_field(8, &limits)].concat();
        let e = decode(&envelope(
            "v1",
            "Pod",
            &len_field(2, &len_field(2, &container)),
        ))
        .expect_err("quantity");
        assert!(
            e.to_string()
                .starts_with("invalid value in Quantity: quantities must match"),
            "{e}"
        );
    }

    #[test]
    fn never_panics_on_random_or_mutated_input() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let vectors = vectors();
        for (_, body, _) in &vectors {
            for cut in 0..body.len() {
                let _ = decode(&body[..cut]);
            }
            for i in MAGIC.len()..body.len() {
                let mut mutated = body.clone();
                mutated[i] ^= 1 << (next() % 8);
                let _ = decode(&mutated);
                mutated[i] = next() as u8;
                let _ = decode(&mutated);
            }
        }
        let kinds = [
            ("v1", "Pod"),
            ("v1", "Service"),
            ("authorization.k8s.io/v1", "SelfSubjectAccessReview"),
            ("v1", "List"),
        ];
        for round in 0..20_000 {
            let len = (next() % 96) as usize;
            let raw: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            let body = if round % 2 == 0 {
                let (api_version, kind) = kinds[(next() % kinds.len() as u64) as usize];
                envelope(api_version, kind, &raw)
            } else {
                [MAGIC, &raw].concat()
            };
            let _ = decode(&body);
        }
    }

    #[test]
    fn parser_handles_the_proto2_subset() {
        let text = r#"
            // a comment
            syntax = "proto2";
            package a.b;
            import "other.proto";
            option go_package = "x/y";
            /* block
               comment */
            message Outer {
              message Inner { optional string s = 1 [default = "x;y"]; }
              optional Inner inner = 1;
              repeated .a.b.Outer.Inner inners = 2;
              map<string, Inner> byName = 3;
              map<int32, bytes> blobs = 4 [packed = false];
              reserved 5, 6;
              option deprecated = true;
              repeated sint64 deltas = 7;
              fixed32 f = 8;
            }
        "#;
        let reg =
            Registry::from_sources(&[("t.proto", text)], "a.b.Outer 8p=fixed").expect("parses");
        let outer = reg.index["a.b.Outer"];
        let inner = len_field(1, b"hi");
        let mut deltas = Vec::new();
        put_varint(3, &mut deltas); // -2 zigzagged
        put_varint(2, &mut deltas); // 1
        let body = [
            len_field(1, &inner),
            len_field(2, &inner),
            len_field(3, &[len_field(1, b"k"), len_field(2, &inner)].concat()),
            len_field(
                4,
                &[varint_field(1, u64::from(u32::MAX)), len_field(2, b"\xff")].concat(),
            ),
            len_field(7, &deltas),
            [key(8, 5), 0u32.to_le_bytes().to_vec()].concat(),
        ]
        .concat();
        let got = Decoder { reg: &reg }
            .message(outer, &body, 0)
            .expect("decodes");
        assert_eq!(
            got,
            json!({"inner": {"s": "hi"}, "inners": [{"s": "hi"}], "byName": {"k": {"s": "hi"}},
                   "blobs": {"-1": "/w=="}, "deltas": [-2, 1], "fixed": 0})
        );
        for bad in [
            "message M { optional Missing m = 1; }",
            "message M { optional string a = 1; optional string b = 1; }",
            "message M { map<bytes, string> m = 1; }",
            "message M { oneof x { string a = 1; } }",
            "enum E { A = 0; }",
            "message M { optional string a = 0; }",
            "message M { optional string a = 1 }",
        ] {
            assert!(
                Registry::from_sources(&[("bad.proto", bad)], "").is_err(),
                "{bad}"
            );
        }
        let ok = "message M { optional string a = 1; }";
        for bad_hints in ["N 1p", "M 2p", "M 1q", "M x"] {
            assert!(
                Registry::from_sources(&[("m.proto", ok)], bad_hints).is_err(),
                "{bad_hints}"
            );
        }
    }

    #[test]
    fn times_format_like_go() {
        assert_eq!(
            format_time(0, 999_999_999, false),
            Ok(json!("1970-01-01T00:00:00Z"))
        );
        assert_eq!(
            format_time(1_741_064_767, 0, false),
            Ok(json!("2025-03-04T05:06:07Z"))
        );
        assert_eq!(format_time(GO_ZERO_TIME_UNIX, 0, false), Ok(Value::Null));
        assert_eq!(
            format_time(GO_ZERO_TIME_UNIX, 1000, true),
            Ok(json!("0001-01-01T00:00:00.000001Z"))
        );
        assert_eq!(
            format_time(1, -1, true),
            Ok(json!("1970-01-01T00:00:00.999999Z"))
        );
        assert_eq!(
            format_time(-59_011_459_200, 0, false),
            Ok(json!("0100-01-01T00:00:00Z"))
        );
        assert!(format_time(i64::MAX, 0, false).is_err());
        assert!(format_time(i64::MAX, 1_000_000_000, true).is_err());
        // A Time message ignores nanos; an empty one is Go's zero time.
        let reg = registry().expect("registry");
        let time = reg.index["k8s.io.apimachinery.pkg.apis.meta.v1.Time"];
        let d = Decoder { reg };
        let bytes = [varint_field(1, 60), varint_field(2, 5)].concat();
        assert_eq!(
            d.message(time, &bytes, 0).ok(),
            Some(json!("1970-01-01T00:01:00Z"))
        );
        assert_eq!(d.message(time, &[], 0).ok(), Some(Value::Null));
    }

    #[test]
    fn durations_format_like_go() {
        for (nanos, want) in [
            (0, "0s"),
            (1, "1ns"),
            (1_500, "1.5µs"),
            (1_500_000, "1.5ms"),
            (1_000_000_000, "1s"),
            (90_000_000_000, "1m30s"),
            (3_600_000_000_000, "1h0m0s"),
            (3_661_500_000_000, "1h1m1.5s"),
            (-5_000_000_000, "-5s"),
            (i64::MIN, "-2562047h47m16.854775808s"),
        ] {
            assert_eq!(go_duration(nanos), want, "{nanos}");
        }
    }

    #[test]
    fn quantities_are_checked_like_go() {
        for ok in [
            "0", "100m", "1.5Gi", "-1", "+2", "1e3", "12E-3", "5Ki", ".5",
        ] {
            assert!(is_quantity(ok), "{ok}");
        }
        for bad in ["", "m", "1 Gi", "abc", "1Gi5x", "--1"] {
            assert!(!is_quantity(bad), "{bad}");
        }
    }

    #[test]
    fn content_types() {
        assert!(is_protobuf(CONTENT_TYPE));
        assert!(is_protobuf(
            "Application/VND.Kubernetes.Protobuf; charset=utf-8"
        ));
        assert!(!is_protobuf(
            "application/vnd.kubernetes.protobuf;stream=watch"
        ));
        assert!(!is_protobuf("application/json"));
    }
}
