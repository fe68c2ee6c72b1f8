//! Kubernetes label selectors and field selectors for list/watch requests.
//!
//! This module reproduces, byte for byte, what kube-apiserver 1.33 does with
//! the `labelSelector` and `fieldSelector` query parameters:
//!
//! * [`LabelSelector::parse`] is a line-by-line port of
//!   `k8s.io/apimachinery/pkg/labels.Parse` (lexer, recursive-descent parser,
//!   `NewRequirement` validation, `field.ErrorList` aggregation), including its
//!   error strings such as
//!   `unable to parse requirement: <nil>: Invalid value: "a/b/c": ...` and
//!   `found ',', expected: ',' or 'end of string'`.
//! * [`FieldSelector::parse`] is a port of
//!   `k8s.io/apimachinery/pkg/fields.ParseSelector` (`a=b,c!=d`, `==`, and the
//!   backslash escapes `\,` `\=` `\\`).
//! * [`FieldSelector::convert`] / [`convert_field_label`] reproduce the
//!   per-kind *field label conversion functions* that the apiserver applies
//!   after parsing (`ListResource` in
//!   `k8s.io/apiserver/pkg/endpoints/handlers/get.go` calls
//!   `opts.FieldSelector.Transform(scope.Convertor.ConvertFieldLabel)`), which
//!   is where an unsupported field is rejected, with a message that depends on
//!   the kind (see [`supported_fields`]).
//!
//! Every [`SelectorError`] displays as the exact `message` of the 400
//! `BadRequest` Status the apiserver returns; the apiserver does not prefix it
//! with the parameter name (see [`list_options_error`]).
//!
//! The module performs no I/O, has no global state and never panics.
//!
//! # Fidelity notes
//!
//! * Parsing, `Display` (Go's `String()`), matching and every error message
//!   were checked differentially against `k8s.io/apimachinery` v0.33.5 on
//!   several hundred thousand generated selectors, including Go quirks: a
//!   NUL byte ends a label-selector token, `x in (a,,)` is an error while
//!   `x in (a,,b)` is not, field-selector terms are sorted before they are
//!   examined, an unescaped `=` in a field value is reported as its code
//!   point (`61`), and bad values are quoted with Go's `%q` ([`go_quote`],
//!   exact for all of Unicode 15.0.0).
//! * Go sorts requirements with the unstable `sort.Sort`; this module sorts
//!   stably, which only matters for the `Display` order of more than 12
//!   requirements sharing a key.
//! * kube-apiserver's JSON encoder escapes `<`, `>` and `&` in the Status
//!   message as `\u003c`, `\u003e`, `\u0026`; the caller's encoder must do the
//!   same for the bytes on the wire to match.

use std::collections::BTreeMap;
use std::fmt;

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

/// A selector the apiserver would reject with `400 BadRequest`.
///
/// `Display` yields the exact `message` of the apiserver's Status object.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// `labels.Parse` failed; the string is the complete Go error text, e.g.
    /// `unable to parse requirement: found '', expected: identifier`.
    #[error("{0}")]
    InvalidLabelSelector(String),
    /// A field-selector term contains none of `!=`, `==`, `=`.
    #[error("invalid selector: '{selector}'; can't understand '{term}'")]
    InvalidFieldSelectorTerm {
        /// The whole `fieldSelector` string as received.
        selector: String,
        /// The offending comma-separated term (escapes preserved).
        term: String,
    },
    /// A field-selector value contains a backslash not followed by `\`, `,`
    /// or `=` (the payload is the bad sequence, e.g. `\a`, or a lone `\`).
    #[error("invalid field selector: invalid escape sequence: {0}")]
    InvalidEscapeSequence(String),
    /// A field-selector value contains an unescaped `=` (or `,`). Go prints
    /// the rune with `%v`, i.e. as its decimal code point (`61` for `=`).
    #[error("invalid field selector: unescaped character in value: {}", u32::from(*.0))]
    UnescapedCharacter(char),
    /// The field label conversion function of the requested kind rejected a
    /// field; the string is the complete message, e.g.
    /// `field label not supported: spec.foo`.
    #[error("{0}")]
    UnsupportedField(String),
}

/// The Status `message` kube-apiserver returns for an invalid `labelSelector`
/// or `fieldSelector` query parameter of a list, watch or deletecollection
/// request.
///
/// In kube-apiserver 1.33 both parameters are parsed while decoding
/// `ListOptions` (`metainternalversionscheme.ParameterCodec.DecodeParameters`
/// → `metav1.Convert_string_To_labels_Selector` /
/// `Convert_string_To_fields_Selector`, which return the parse error
/// unchanged) and the handler answers `errors.NewBadRequest(err.Error())`.
/// Unsupported field names are rejected later by
/// `FieldSelector.Transform(ConvertFieldLabel)`, again as
/// `NewBadRequest(err.Error())`. So the message is exactly the error's
/// `Display`, with no mention of `param`; the parameter is accepted only so
/// callers document which one failed. When both parameters are invalid the
/// `labelSelector` error wins (it is converted first); see
/// [`parse_list_selectors`].
#[cfg(test)]
pub fn list_options_error(param: &str, err: &SelectorError) -> String {
    let _ = param;
    err.to_string()
}

/// Parses both selector parameters of a list/watch request in the order the
/// apiserver does (label selector first, then field selector, then the field
/// label conversion for `group`/`version`/`kind`), returning the first error.
///
/// `kind` is the kind being listed (e.g. `Pod`), `version` its API version as
/// requested (e.g. `v1`); the returned field selector uses the *internal*
/// field names (see [`FieldSelector::convert`]).
pub fn parse_list_selectors(
    label_selector: &str,
    field_selector: &str,
    group: &str,
    version: &str,
    kind: &str,
) -> Result<(LabelSelector, FieldSelector), SelectorError> {
    let labels = LabelSelector::parse(label_selector)?;
    let fields = FieldSelector::parse(field_selector)?;
    let fields = fields.convert(group, version, kind)?;
    Ok((labels, fields))
}

// ---------------------------------------------------------------------------
// Label selectors
// ---------------------------------------------------------------------------

/// A label-selector operator (`k8s.io/apimachinery/pkg/selection.Operator`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operator {
    /// `key in (a,b)`
    In,
    /// `key notin (a,b)`
    NotIn,
    /// `key=value`
    Equals,
    /// `key==value`
    DoubleEquals,
    /// `key!=value`
    NotEquals,
    /// `key`
    Exists,
    /// `!key`
    DoesNotExist,
    /// `key>value` (integers)
    GreaterThan,
    /// `key<value` (integers)
    LessThan,
}

impl Operator {}

/// One requirement of a label selector (`labels.Requirement`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    key: String,
    operator: Operator,
    /// Sorted and de-duplicated, as `sets.String.List()` returns them.
    values: Vec<String>,
}

impl Requirement {
    /// The label key.
    #[cfg(test)]
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The operator.
    #[cfg(test)]
    pub fn operator(&self) -> Operator {
        self.operator
    }

    /// The values, sorted and de-duplicated (empty for `Exists` and
    /// `DoesNotExist`).
    #[cfg(test)]
    pub fn values(&self) -> &[String] {
        &self.values
    }

    fn has_value(&self, v: &str) -> bool {
        self.values.iter().any(|x| x == v)
    }

    /// `labels.Requirement.Matches`.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let got = labels.get(&self.key);
        match self.operator {
            Operator::In | Operator::Equals | Operator::DoubleEquals => {
                got.is_some_and(|v| self.has_value(v))
            }
            Operator::NotIn | Operator::NotEquals => got.is_none_or(|v| !self.has_value(v)),
            Operator::Exists => got.is_some(),
            Operator::DoesNotExist => got.is_none(),
            Operator::GreaterThan | Operator::LessThan => {
                let Some(got) = got else { return false };
                let Ok(have) = parse_go_int64(got) else {
                    return false;
                };
                if self.values.len() != 1 {
                    return false;
                }
                let Ok(want) = parse_go_int64(&self.values[0]) else {
                    return false;
                };
                if self.operator == Operator::GreaterThan {
                    have > want
                } else {
                    have < want
                }
            }
        }
    }
}

impl fmt::Display for Requirement {
    /// `labels.Requirement.String()`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.operator == Operator::DoesNotExist {
            f.write_str("!")?;
        }
        f.write_str(&self.key)?;
        let (open, close) = match self.operator {
            Operator::Equals => ("=", ""),
            Operator::DoubleEquals => ("==", ""),
            Operator::NotEquals => ("!=", ""),
            Operator::In => (" in (", ")"),
            Operator::NotIn => (" notin (", ")"),
            Operator::GreaterThan => (">", ""),
            Operator::LessThan => ("<", ""),
            Operator::Exists | Operator::DoesNotExist => return Ok(()),
        };
        f.write_str(open)?;
        f.write_str(&self.values.join(","))?;
        f.write_str(close)
    }
}

/// A parsed `labelSelector` (the AND of its requirements).
///
/// The default value is the empty selector, which matches everything.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LabelSelector {
    /// Sorted by key, like Go's `sort.Sort(ByKey(items))`.
    requirements: Vec<Requirement>,
}

impl LabelSelector {
    /// Parses the `labelSelector` query parameter exactly like
    /// `k8s.io/apimachinery/pkg/labels.Parse` in Kubernetes 1.33.
    ///
    /// Grammar (whitespace is `' '`, `\t`, `\r`, `\n`):
    ///
    /// ```text
    /// <selector-syntax>         ::= <requirement> | <requirement> "," <selector-syntax>
    /// <requirement>             ::= [!] KEY [ <set-based-restriction> | <exact-match-restriction> ]
    /// <set-based-restriction>   ::= "" | ("in" | "notin") "(" VALUE { "," VALUE } ")"
    /// <exact-match-restriction> ::= ("=" | "==" | "!=" | ">" | "<") VALUE
    /// ```
    ///
    /// KEY must be a qualified name (`[prefix/]name`, name ≤ 63 bytes of
    /// `[-A-Za-z0-9_.]` starting and ending alphanumeric, prefix a DNS-1123
    /// subdomain ≤ 253 bytes); VALUE must be a valid label value (empty, or
    /// ≤ 63 bytes like a name part); `>`/`<` values must also be base-10
    /// int64s. Empty values are allowed (`x=`, `x in ()`, `x in (a,)`), `in`
    /// and `notin` are plain identifiers in value position, and the error
    /// messages are those of the apiserver, e.g.
    /// `unable to parse requirement: found '', expected: identifier`.
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        let mut parser = Parser::new(s);
        let mut requirements = parser
            .parse()
            .map_err(SelectorError::InvalidLabelSelector)?;
        // Go uses the unstable sort.Sort; it is an insertion sort (stable) for
        // up to 12 elements, which covers any realistic selector.
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(LabelSelector { requirements })
    }

    /// Whether every requirement matches `labels` (an empty selector matches
    /// everything).
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }

    /// Whether the selector has no requirements (`labels.Selector.Empty()`).
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// The requirements, sorted by key.
    #[cfg(test)]
    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }
}

impl fmt::Display for LabelSelector {
    /// `labels.Selector.String()`: requirements joined by `,`, e.g.
    /// `x in (a,b),y!=c,!z`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

/// Go `strconv.ParseInt(s, 10, 64)` (optional sign, ASCII digits, no `_`).
fn parse_go_int64(s: &str) -> Result<i64, ()> {
    // Rust's i64 parser accepts exactly the same base-10 syntax.
    s.parse::<i64>().map_err(|_| ())
}

// --- lexer -----------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token {
    Error,
    EndOfString,
    ClosedPar,
    Comma,
    DoesNotExist,
    DoubleEquals,
    Equals,
    GreaterThan,
    Identifier,
    In,
    LessThan,
    NotEquals,
    NotIn,
    OpenPar,
}

fn string_to_token(s: &[u8]) -> Option<Token> {
    Some(match s {
        b")" => Token::ClosedPar,
        b"," => Token::Comma,
        b"!" => Token::DoesNotExist,
        b"==" => Token::DoubleEquals,
        b"=" => Token::Equals,
        b">" => Token::GreaterThan,
        b"in" => Token::In,
        b"<" => Token::LessThan,
        b"!=" => Token::NotEquals,
        b"notin" => Token::NotIn,
        b"(" => Token::OpenPar,
        _ => return None,
    })
}

fn is_whitespace(ch: u8) -> bool {
    matches!(ch, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_special_symbol(ch: u8) -> bool {
    matches!(ch, b'=' | b'!' | b'(' | b')' | b',' | b'>' | b'<')
}

fn bytes_to_string(b: &[u8]) -> String {
    // Tokens are split only at ASCII bytes, so slices of valid UTF-8 input
    // stay valid; the lossy conversion is merely panic-free insurance.
    String::from_utf8_lossy(b).into_owned()
}

/// Port of `labels.Lexer`. Like Go, `read` yields 0 both at the end of the
/// input and for an embedded NUL byte, which therefore ends a token.
struct Lexer<'a> {
    s: &'a [u8],
    pos: usize,
}

impl Lexer<'_> {
    fn read(&mut self) -> u8 {
        match self.s.get(self.pos) {
            Some(&b) => {
                self.pos += 1;
                b
            }
            None => 0,
        }
    }

    fn unread(&mut self) {
        self.pos = self.pos.saturating_sub(1);
    }

    fn scan_id_or_keyword(&mut self) -> (Token, String) {
        let mut buffer = Vec::new();
        loop {
            let ch = self.read();
            if ch == 0 {
                break;
            } else if is_special_symbol(ch) || is_whitespace(ch) {
                self.unread();
                break;
            } else {
                buffer.push(ch);
            }
        }
        match string_to_token(&buffer) {
            Some(tok) => (tok, bytes_to_string(&buffer)),
            None => (Token::Identifier, bytes_to_string(&buffer)),
        }
    }

    fn scan_special_symbol(&mut self) -> (Token, String) {
        let mut last: Option<(Token, String)> = None;
        let mut buffer = Vec::new();
        loop {
            let ch = self.read();
            if ch == 0 {
                break;
            } else if is_special_symbol(ch) {
                buffer.push(ch);
                if let Some(tok) = string_to_token(&buffer) {
                    last = Some((tok, bytes_to_string(&buffer)));
                } else if last.is_some() {
                    self.unread();
                    break;
                }
            } else {
                self.unread();
                break;
            }
        }
        match last {
            Some(item) => item,
            None => (
                Token::Error,
                format!(
                    "error expected: keyword found '{}'",
                    bytes_to_string(&buffer)
                ),
            ),
        }
    }

    fn skip_white_spaces(&mut self, mut ch: u8) -> u8 {
        loop {
            if !is_whitespace(ch) {
                return ch;
            }
            ch = self.read();
        }
    }

    fn lex(&mut self) -> (Token, String) {
        let first = self.read();
        let ch = self.skip_white_spaces(first);
        if ch == 0 {
            (Token::EndOfString, String::new())
        } else if is_special_symbol(ch) {
            self.unread();
            self.scan_special_symbol()
        } else {
            self.unread();
            self.scan_id_or_keyword()
        }
    }
}

// --- parser ----------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq)]
enum Context {
    KeyAndOperator,
    Values,
}

/// Port of `labels.Parser` (with a nil field path, as the apiserver uses).
struct Parser {
    items: Vec<(Token, String)>,
    position: usize,
}

impl Parser {
    fn new(s: &str) -> Self {
        let mut lexer = Lexer {
            s: s.as_bytes(),
            pos: 0,
        };
        let mut items = Vec::new();
        loop {
            let (tok, lit) = lexer.lex();
            items.push((tok, lit));
            if tok == Token::EndOfString {
                break;
            }
        }
        Parser { items, position: 0 }
    }

    fn item(&self, index: usize) -> (Token, String) {
        // Go never reads past the final EndOfString item; clamp anyway.
        let index = index.min(self.items.len().saturating_sub(1));
        self.items
            .get(index)
            .cloned()
            .unwrap_or((Token::EndOfString, String::new()))
    }

    fn contextualize(tok: Token, ctx: Context) -> Token {
        if ctx == Context::Values && matches!(tok, Token::In | Token::NotIn) {
            Token::Identifier
        } else {
            tok
        }
    }

    fn lookahead(&self, ctx: Context) -> (Token, String) {
        let (tok, lit) = self.item(self.position);
        (Self::contextualize(tok, ctx), lit)
    }

    fn consume(&mut self, ctx: Context) -> (Token, String) {
        let (tok, lit) = self.item(self.position);
        self.position += 1;
        (Self::contextualize(tok, ctx), lit)
    }

    fn parse(&mut self) -> Result<Vec<Requirement>, String> {
        let mut requirements = Vec::new();
        loop {
            let (tok, lit) = self.lookahead(Context::Values);
            match tok {
                Token::Identifier | Token::DoesNotExist => {
                    let r = self
                        .parse_requirement()
                        .map_err(|e| format!("unable to parse requirement: {e}"))?;
                    requirements.push(r);
                    let (t, l) = self.consume(Context::Values);
                    match t {
                        Token::EndOfString => return Ok(requirements),
                        Token::Comma => {
                            let (t2, l2) = self.lookahead(Context::Values);
                            if t2 != Token::Identifier && t2 != Token::DoesNotExist {
                                return Err(format!(
                                    "found '{l2}', expected: identifier after ','"
                                ));
                            }
                        }
                        _ => {
                            return Err(format!("found '{l}', expected: ',' or 'end of string'"));
                        }
                    }
                }
                Token::EndOfString => return Ok(requirements),
                _ => {
                    return Err(format!(
                        "found '{lit}', expected: !, identifier, or 'end of string'"
                    ));
                }
            }
        }
    }

    fn parse_requirement(&mut self) -> Result<Requirement, String> {
        let (key, operator) = self.parse_key_and_infer_operator()?;
        if let Some(op @ (Operator::Exists | Operator::DoesNotExist)) = operator {
            return new_requirement(key, op, Vec::new());
        }
        let op = self.parse_operator()?;
        let values = match op {
            Operator::In | Operator::NotIn => self.parse_values()?,
            _ => self.parse_exact_value()?,
        };
        new_requirement(key, op, values)
    }

    fn parse_key_and_infer_operator(&mut self) -> Result<(String, Option<Operator>), String> {
        let mut operator = None;
        let (mut tok, mut literal) = self.consume(Context::Values);
        if tok == Token::DoesNotExist {
            operator = Some(Operator::DoesNotExist);
            (tok, literal) = self.consume(Context::Values);
        }
        if tok != Token::Identifier {
            return Err(format!("found '{literal}', expected: identifier"));
        }
        // Go passes the parser's nil *field.Path here, which prints "<nil>".
        if let Some(err) = validate_label_key(&literal, "<nil>") {
            return Err(err);
        }
        let (t, _) = self.lookahead(Context::Values);
        if (t == Token::EndOfString || t == Token::Comma)
            && operator != Some(Operator::DoesNotExist)
        {
            operator = Some(Operator::Exists);
        }
        Ok((literal, operator))
    }

    fn parse_operator(&mut self) -> Result<Operator, String> {
        let (tok, lit) = self.consume(Context::KeyAndOperator);
        Ok(match tok {
            Token::In => Operator::In,
            Token::Equals => Operator::Equals,
            Token::DoubleEquals => Operator::DoubleEquals,
            Token::GreaterThan => Operator::GreaterThan,
            Token::LessThan => Operator::LessThan,
            Token::NotIn => Operator::NotIn,
            Token::NotEquals => Operator::NotEquals,
            _ => {
                return Err(format!(
                    "found '{lit}', expected: in, notin, =, ==, !=, gt, lt"
                ));
            }
        })
    }

    fn parse_values(&mut self) -> Result<Vec<String>, String> {
        let (tok, lit) = self.consume(Context::Values);
        if tok != Token::OpenPar {
            return Err(format!("found '{lit}' expected: '('"));
        }
        let (tok, lit) = self.lookahead(Context::Values);
        match tok {
            Token::Identifier | Token::Comma => {
                let set = self.parse_identifiers_list()?;
                let (tok, _) = self.consume(Context::Values);
                if tok != Token::ClosedPar {
                    // Go reports the literal seen right after '(' here.
                    return Err(format!("found '{lit}', expected: ')'"));
                }
                Ok(set)
            }
            Token::ClosedPar => {
                self.consume(Context::Values);
                Ok(vec![String::new()])
            }
            _ => Err(format!("found '{lit}', expected: ',', ')' or identifier")),
        }
    }

    fn parse_identifiers_list(&mut self) -> Result<Vec<String>, String> {
        let mut set: Vec<String> = Vec::new();
        let insert = |set: &mut Vec<String>, v: String| {
            if let Err(pos) = set.binary_search(&v) {
                set.insert(pos, v);
            }
        };
        loop {
            let (tok, lit) = self.consume(Context::Values);
            match tok {
                Token::Identifier => {
                    insert(&mut set, lit);
                    let (tok2, lit2) = self.lookahead(Context::Values);
                    match tok2 {
                        Token::Comma => continue,
                        Token::ClosedPar => return Ok(set),
                        _ => return Err(format!("found '{lit2}', expected: ',' or ')'")),
                    }
                }
                Token::Comma => {
                    if set.is_empty() {
                        insert(&mut set, String::new()); // "(,"
                    }
                    let (tok2, _) = self.lookahead(Context::Values);
                    if tok2 == Token::ClosedPar {
                        insert(&mut set, String::new()); // ",)"
                        return Ok(set);
                    }
                    if tok2 == Token::Comma {
                        self.consume(Context::Values);
                        insert(&mut set, String::new()); // ",,"
                    }
                }
                _ => return Err(format!("found '{lit}', expected: ',', or identifier")),
            }
        }
    }

    fn parse_exact_value(&mut self) -> Result<Vec<String>, String> {
        let (tok, _) = self.lookahead(Context::Values);
        if tok == Token::EndOfString || tok == Token::Comma {
            return Ok(vec![String::new()]);
        }
        let (tok, lit) = self.consume(Context::Values);
        if tok == Token::Identifier {
            return Ok(vec![lit]);
        }
        Err(format!("found '{lit}', expected: identifier"))
    }
}

/// Port of `labels.NewRequirement` with a nil path: validates and returns
/// the aggregated `field.ErrorList` text on failure. `values` must already be
/// sorted and de-duplicated.
fn new_requirement(key: String, op: Operator, values: Vec<String>) -> Result<Requirement, String> {
    let mut errs: Vec<String> = Vec::new();
    if let Some(e) = validate_label_key(&key, "key") {
        errs.push(e);
    }
    let count_error = |detail: &str| invalid_error("values", &go_string_slice(&values), detail);
    match op {
        Operator::In | Operator::NotIn => {
            if values.is_empty() {
                errs.push(count_error(
                    "for 'in', 'notin' operators, values set can't be empty",
                ));
            }
        }
        Operator::Equals | Operator::DoubleEquals | Operator::NotEquals => {
            if values.len() != 1 {
                errs.push(count_error(
                    "exact-match compatibility requires one single value",
                ));
            }
        }
        Operator::Exists | Operator::DoesNotExist => {
            if !values.is_empty() {
                errs.push(count_error(
                    "values set must be empty for exists and does not exist",
                ));
            }
        }
        Operator::GreaterThan | Operator::LessThan => {
            if values.len() != 1 {
                errs.push(count_error(
                    "for 'Gt', 'Lt' operators, exactly one value is required",
                ));
            }
            for (i, v) in values.iter().enumerate() {
                if parse_go_int64(v).is_err() {
                    errs.push(invalid_error(
                        &format!("values[{i}]"),
                        &go_quote(v),
                        "for 'Gt', 'Lt' operators, the value must be an integer",
                    ));
                }
            }
        }
    }
    for (i, v) in values.iter().enumerate() {
        let problems = is_valid_label_value(v);
        if !problems.is_empty() {
            errs.push(invalid_error(
                &format!("values[{i}][{key}]"),
                &go_quote(v),
                &problems.join("; "),
            ));
        }
    }
    if errs.is_empty() {
        Ok(Requirement {
            key,
            operator: op,
            values,
        })
    } else {
        Err(aggregate(errs))
    }
}

/// `field.ErrorList.ToAggregate().Error()`: de-duplicated messages, a single
/// one verbatim, several as `[a, b]`.
fn aggregate(errs: Vec<String>) -> String {
    let mut unique: Vec<String> = Vec::new();
    for e in errs {
        if !unique.contains(&e) {
            unique.push(e);
        }
    }
    if unique.len() == 1 {
        unique.pop().unwrap_or_default()
    } else {
        format!("[{}]", unique.join(", "))
    }
}

/// `field.Invalid(path, value, detail).Error()` with an already formatted
/// bad value.
fn invalid_error(path: &str, formatted_value: &str, detail: &str) -> String {
    if detail.is_empty() {
        format!("{path}: Invalid value: {formatted_value}")
    } else {
        format!("{path}: Invalid value: {formatted_value}: {detail}")
    }
}

/// Go `fmt.Sprintf("%#v", []string{...})`.
fn go_string_slice(values: &[String]) -> String {
    let inner: Vec<String> = values.iter().map(|v| go_quote(v)).collect();
    format!("[]string{{{}}}", inner.join(", "))
}

/// `labels.validateLabelKey`: `None` when valid.
fn validate_label_key(key: &str, path: &str) -> Option<String> {
    let errs = is_qualified_name(key);
    if errs.is_empty() {
        None
    } else {
        Some(invalid_error(path, &go_quote(key), &errs.join("; ")))
    }
}

// --- k8s.io/apimachinery/pkg/util/validation (1.33) --------------------------

const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_NAME_ERR_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const QUALIFIED_NAME_MAX_LENGTH: usize = 63;
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const LABEL_VALUE_ERR_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_MAX_LENGTH: usize = 63;
const DNS1123_SUBDOMAIN_FMT: &str =
    "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1123_SUBDOMAIN_ERR_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_MAX_LENGTH: usize = 253;

fn max_len_error(n: usize) -> String {
    format!("must be no more than {n} characters")
}

fn regex_error(msg: &str, re: &str, examples: &[&str]) -> String {
    if examples.is_empty() {
        return format!("{msg} (regex used for validation is '{re}')");
    }
    let mut out = format!("{msg} (e.g. ");
    for (i, ex) in examples.iter().enumerate() {
        if i > 0 {
            out.push_str(" or ");
        }
        out.push('\'');
        out.push_str(ex);
        out.push_str("', ");
    }
    out.push_str("regex used for validation is '");
    out.push_str(re);
    out.push_str("')");
    out
}

/// `^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$`
fn matches_qualified_name(s: &str) -> bool {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(f), Some(l)) => {
            f.is_ascii_alphanumeric()
                && l.is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

/// `^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
fn matches_dns1123_subdomain(s: &str) -> bool {
    let label_ok = |l: &str| {
        let b = l.as_bytes();
        let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
        match (b.first(), b.last()) {
            (Some(f), Some(e)) => alnum(f) && alnum(e) && b.iter().all(|c| alnum(c) || *c == b'-'),
            _ => false,
        }
    };
    s.split('.').all(label_ok)
}

fn is_dns1123_subdomain(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if v.len() > DNS1123_SUBDOMAIN_MAX_LENGTH {
        errs.push(max_len_error(DNS1123_SUBDOMAIN_MAX_LENGTH));
    }
    if !matches_dns1123_subdomain(v) {
        errs.push(regex_error(
            DNS1123_SUBDOMAIN_ERR_MSG,
            DNS1123_SUBDOMAIN_FMT,
            &["example.com"],
        ));
    }
    errs
}

/// `validation.IsQualifiedName` (label keys).
fn is_qualified_name(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = v.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_string());
            } else {
                errs.extend(
                    is_dns1123_subdomain(prefix)
                        .into_iter()
                        .map(|m| format!("prefix part {m}")),
                );
            }
            *name
        }
        _ => {
            errs.push(format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(
                    QUALIFIED_NAME_ERR_MSG,
                    QUALIFIED_NAME_FMT,
                    &["MyName", "my.name", "123-abc"]
                )
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_string());
    } else if name.len() > QUALIFIED_NAME_MAX_LENGTH {
        errs.push(format!(
            "name part {}",
            max_len_error(QUALIFIED_NAME_MAX_LENGTH)
        ));
    }
    if !matches_qualified_name(name) {
        errs.push(format!(
            "name part {}",
            regex_error(
                QUALIFIED_NAME_ERR_MSG,
                QUALIFIED_NAME_FMT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    errs
}

/// `validation.IsValidLabelValue`.
fn is_valid_label_value(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if v.len() > LABEL_VALUE_MAX_LENGTH {
        errs.push(max_len_error(LABEL_VALUE_MAX_LENGTH));
    }
    if !v.is_empty() && !matches_qualified_name(v) {
        errs.push(regex_error(
            LABEL_VALUE_ERR_MSG,
            LABEL_VALUE_FMT,
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

// --- Go %q -----------------------------------------------------------------

/// Go `strconv.Quote` (what `%q` prints for a string).
///
/// Printability follows Go's `strconv.IsPrint` exactly for Latin-1 and for
/// controls, spaces, format characters, private-use and non-characters; other
/// *unassigned* code points are treated as printable (Go escapes them).
/// The one Go `%q` of the simulator (also used by `apply` and `openapi` for byte-exact
/// messages); checked against Go's `strconv.Quote` on every code point.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if go_is_print(c) => out.push(c),
            '\u{07}' => out.push_str("\\a"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{0b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if (c as u32) < 0x10000 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push_str(&format!("\\U{:08x}", c as u32)),
        }
    }
    out.push('"');
    out
}

/// Go's `strconv.IsPrint` (Unicode 15.0.0, the tables of Go 1.24 that
/// kube-apiserver 1.33 is built with).
fn go_is_print(c: char) -> bool {
    let r = u32::from(c);
    if r <= 0xFF {
        return (0x20..=0x7E).contains(&r) || ((0xA1..=0xFF).contains(&r) && r != 0xAD);
    }
    // Index of the first range whose end is >= r.
    let pairs = GO_NOT_PRINT_RANGES.len() / 2;
    let (mut lo, mut hi) = (0, pairs);
    while lo < hi {
        let mid = (lo + hi) / 2;
        if GO_NOT_PRINT_RANGES[2 * mid + 1] < r {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    !(lo < pairs && GO_NOT_PRINT_RANGES[2 * lo] <= r)
}

/// Inclusive `[start, end]` pairs of the code points above U+00FF for which
/// Go's `strconv.IsPrint` is false (generated from Go's tables, Unicode
/// 15.0.0; surrogates merged in as they never occur in a `str`).
#[rustfmt::skip]
const GO_NOT_PRINT_RANGES: &[u32] = &[
    0x378, 0x379, 0x380, 0x383, 0x38B, 0x38B, 0x38D, 0x38D, 0x3A2, 0x3A2, 0x530, 0x530,
    0x557, 0x558, 0x58B, 0x58C, 0x590, 0x590, 0x5C8, 0x5CF, 0x5EB, 0x5EE, 0x5F5, 0x605,
    0x61C, 0x61C, 0x6DD, 0x6DD, 0x70E, 0x70F, 0x74B, 0x74C, 0x7B2, 0x7BF, 0x7FB, 0x7FC,
    0x82E, 0x82F, 0x83F, 0x83F, 0x85C, 0x85D, 0x85F, 0x85F, 0x86B, 0x86F, 0x88F, 0x897,
    0x8E2, 0x8E2, 0x984, 0x984, 0x98D, 0x98E, 0x991, 0x992, 0x9A9, 0x9A9, 0x9B1, 0x9B1,
    0x9B3, 0x9B5, 0x9BA, 0x9BB, 0x9C5, 0x9C6, 0x9C9, 0x9CA, 0x9CF, 0x9D6, 0x9D8, 0x9DB,
    0x9DE, 0x9DE, 0x9E4, 0x9E5, 0x9FF, 0xA00, 0xA04, 0xA04, 0xA0B, 0xA0E, 0xA11, 0xA12,
    0xA29, 0xA29, 0xA31, 0xA31, 0xA34, 0xA34, 0xA37, 0xA37, 0xA3A, 0xA3B, 0xA3D, 0xA3D,
    0xA43, 0xA46, 0xA49, 0xA4A, 0xA4E, 0xA50, 0xA52, 0xA58, 0xA5D, 0xA5D, 0xA5F, 0xA65,
    0xA77, 0xA80, 0xA84, 0xA84, 0xA8E, 0xA8E, 0xA92, 0xA92, 0xAA9, 0xAA9, 0xAB1, 0xAB1,
    0xAB4, 0xAB4, 0xABA, 0xABB, 0xAC6, 0xAC6, 0xACA, 0xACA, 0xACE, 0xACF, 0xAD1, 0xADF,
    0xAE4, 0xAE5, 0xAF2, 0xAF8, 0xB00, 0xB00, 0xB04, 0xB04, 0xB0D, 0xB0E, 0xB11, 0xB12,
    0xB29, 0xB29, 0xB31, 0xB31, 0xB34, 0xB34, 0xB3A, 0xB3B, 0xB45, 0xB46, 0xB49, 0xB4A,
    0xB4E, 0xB54, 0xB58, 0xB5B, 0xB5E, 0xB5E, 0xB64, 0xB65, 0xB78, 0xB81, 0xB84, 0xB84,
    0xB8B, 0xB8D, 0xB91, 0xB91, 0xB96, 0xB98, 0xB9B, 0xB9B, 0xB9D, 0xB9D, 0xBA0, 0xBA2,
    0xBA5, 0xBA7, 0xBAB, 0xBAD, 0xBBA, 0xBBD, 0xBC3, 0xBC5, 0xBC9, 0xBC9, 0xBCE, 0xBCF,
    0xBD1, 0xBD6, 0xBD8, 0xBE5, 0xBFB, 0xBFF, 0xC0D, 0xC0D, 0xC11, 0xC11, 0xC29, 0xC29,
    0xC3A, 0xC3B, 0xC45, 0xC45, 0xC49, 0xC49, 0xC4E, 0xC54, 0xC57, 0xC57, 0xC5B, 0xC5C,
    0xC5E, 0xC5F, 0xC64, 0xC65, 0xC70, 0xC76, 0xC8D, 0xC8D, 0xC91, 0xC91, 0xCA9, 0xCA9,
    0xCB4, 0xCB4, 0xCBA, 0xCBB, 0xCC5, 0xCC5, 0xCC9, 0xCC9, 0xCCE, 0xCD4, 0xCD7, 0xCDC,
    0xCDF, 0xCDF, 0xCE4, 0xCE5, 0xCF0, 0xCF0, 0xCF4, 0xCFF, 0xD0D, 0xD0D, 0xD11, 0xD11,
    0xD45, 0xD45, 0xD49, 0xD49, 0xD50, 0xD53, 0xD64, 0xD65, 0xD80, 0xD80, 0xD84, 0xD84,
    0xD97, 0xD99, 0xDB2, 0xDB2, 0xDBC, 0xDBC, 0xDBE, 0xDBF, 0xDC7, 0xDC9, 0xDCB, 0xDCE,
    0xDD5, 0xDD5, 0xDD7, 0xDD7, 0xDE0, 0xDE5, 0xDF0, 0xDF1, 0xDF5, 0xE00, 0xE3B, 0xE3E,
    0xE5C, 0xE80, 0xE83, 0xE83, 0xE85, 0xE85, 0xE8B, 0xE8B, 0xEA4, 0xEA4, 0xEA6, 0xEA6,
    0xEBE, 0xEBF, 0xEC5, 0xEC5, 0xEC7, 0xEC7, 0xECF, 0xECF, 0xEDA, 0xEDB, 0xEE0, 0xEFF,
    0xF48, 0xF48, 0xF6D, 0xF70, 0xF98, 0xF98, 0xFBD, 0xFBD, 0xFCD, 0xFCD, 0xFDB, 0xFFF,
    0x10C6, 0x10C6, 0x10C8, 0x10CC, 0x10CE, 0x10CF, 0x1249, 0x1249, 0x124E, 0x124F, 0x1257, 0x1257,
    0x1259, 0x1259, 0x125E, 0x125F, 0x1289, 0x1289, 0x128E, 0x128F, 0x12B1, 0x12B1, 0x12B6, 0x12B7,
    0x12BF, 0x12BF, 0x12C1, 0x12C1, 0x12C6, 0x12C7, 0x12D7, 0x12D7, 0x1311, 0x1311, 0x1316, 0x1317,
    0x135B, 0x135C, 0x137D, 0x137F, 0x139A, 0x139F, 0x13F6, 0x13F7, 0x13FE, 0x13FF, 0x1680, 0x1680,
    0x169D, 0x169F, 0x16F9, 0x16FF, 0x1716, 0x171E, 0x1737, 0x173F, 0x1754, 0x175F, 0x176D, 0x176D,
    0x1771, 0x1771, 0x1774, 0x177F, 0x17DE, 0x17DF, 0x17EA, 0x17EF, 0x17FA, 0x17FF, 0x180E, 0x180E,
    0x181A, 0x181F, 0x1879, 0x187F, 0x18AB, 0x18AF, 0x18F6, 0x18FF, 0x191F, 0x191F, 0x192C, 0x192F,
    0x193C, 0x193F, 0x1941, 0x1943, 0x196E, 0x196F, 0x1975, 0x197F, 0x19AC, 0x19AF, 0x19CA, 0x19CF,
    0x19DB, 0x19DD, 0x1A1C, 0x1A1D, 0x1A5F, 0x1A5F, 0x1A7D, 0x1A7E, 0x1A8A, 0x1A8F, 0x1A9A, 0x1A9F,
    0x1AAE, 0x1AAF, 0x1ACF, 0x1AFF, 0x1B4D, 0x1B4F, 0x1B7F, 0x1B7F, 0x1BF4, 0x1BFB, 0x1C38, 0x1C3A,
    0x1C4A, 0x1C4C, 0x1C89, 0x1C8F, 0x1CBB, 0x1CBC, 0x1CC8, 0x1CCF, 0x1CFB, 0x1CFF, 0x1F16, 0x1F17,
    0x1F1E, 0x1F1F, 0x1F46, 0x1F47, 0x1F4E, 0x1F4F, 0x1F58, 0x1F58, 0x1F5A, 0x1F5A, 0x1F5C, 0x1F5C,
    0x1F5E, 0x1F5E, 0x1F7E, 0x1F7F, 0x1FB5, 0x1FB5, 0x1FC5, 0x1FC5, 0x1FD4, 0x1FD5, 0x1FDC, 0x1FDC,
    0x1FF0, 0x1FF1, 0x1FF5, 0x1FF5, 0x1FFF, 0x200F, 0x2028, 0x202F, 0x205F, 0x206F, 0x2072, 0x2073,
    0x208F, 0x208F, 0x209D, 0x209F, 0x20C1, 0x20CF, 0x20F1, 0x20FF, 0x218C, 0x218F, 0x2427, 0x243F,
    0x244B, 0x245F, 0x2B74, 0x2B75, 0x2B96, 0x2B96, 0x2CF4, 0x2CF8, 0x2D26, 0x2D26, 0x2D28, 0x2D2C,
    0x2D2E, 0x2D2F, 0x2D68, 0x2D6E, 0x2D71, 0x2D7E, 0x2D97, 0x2D9F, 0x2DA7, 0x2DA7, 0x2DAF, 0x2DAF,
    0x2DB7, 0x2DB7, 0x2DBF, 0x2DBF, 0x2DC7, 0x2DC7, 0x2DCF, 0x2DCF, 0x2DD7, 0x2DD7, 0x2DDF, 0x2DDF,
    0x2E5E, 0x2E7F, 0x2E9A, 0x2E9A, 0x2EF4, 0x2EFF, 0x2FD6, 0x2FEF, 0x2FFC, 0x3000, 0x3040, 0x3040,
    0x3097, 0x3098, 0x3100, 0x3104, 0x3130, 0x3130, 0x318F, 0x318F, 0x31E4, 0x31EF, 0x321F, 0x321F,
    0xA48D, 0xA48F, 0xA4C7, 0xA4CF, 0xA62C, 0xA63F, 0xA6F8, 0xA6FF, 0xA7CB, 0xA7CF, 0xA7D2, 0xA7D2,
    0xA7D4, 0xA7D4, 0xA7DA, 0xA7F1, 0xA82D, 0xA82F, 0xA83A, 0xA83F, 0xA878, 0xA87F, 0xA8C6, 0xA8CD,
    0xA8DA, 0xA8DF, 0xA954, 0xA95E, 0xA97D, 0xA97F, 0xA9CE, 0xA9CE, 0xA9DA, 0xA9DD, 0xA9FF, 0xA9FF,
    0xAA37, 0xAA3F, 0xAA4E, 0xAA4F, 0xAA5A, 0xAA5B, 0xAAC3, 0xAADA, 0xAAF7, 0xAB00, 0xAB07, 0xAB08,
    0xAB0F, 0xAB10, 0xAB17, 0xAB1F, 0xAB27, 0xAB27, 0xAB2F, 0xAB2F, 0xAB6C, 0xAB6F, 0xABEE, 0xABEF,
    0xABFA, 0xABFF, 0xD7A4, 0xD7AF, 0xD7C7, 0xD7CA, 0xD7FC, 0xF8FF, 0xFA6E, 0xFA6F, 0xFADA, 0xFAFF,
    0xFB07, 0xFB12, 0xFB18, 0xFB1C, 0xFB37, 0xFB37, 0xFB3D, 0xFB3D, 0xFB3F, 0xFB3F, 0xFB42, 0xFB42,
    0xFB45, 0xFB45, 0xFBC3, 0xFBD2, 0xFD90, 0xFD91, 0xFDC8, 0xFDCE, 0xFDD0, 0xFDEF, 0xFE1A, 0xFE1F,
    0xFE53, 0xFE53, 0xFE67, 0xFE67, 0xFE6C, 0xFE6F, 0xFE75, 0xFE75, 0xFEFD, 0xFF00, 0xFFBF, 0xFFC1,
    0xFFC8, 0xFFC9, 0xFFD0, 0xFFD1, 0xFFD8, 0xFFD9, 0xFFDD, 0xFFDF, 0xFFE7, 0xFFE7, 0xFFEF, 0xFFFB,
    0xFFFE, 0xFFFF, 0x1000C, 0x1000C, 0x10027, 0x10027, 0x1003B, 0x1003B, 0x1003E, 0x1003E, 0x1004E, 0x1004F,
    0x1005E, 0x1007F, 0x100FB, 0x100FF, 0x10103, 0x10106, 0x10134, 0x10136, 0x1018F, 0x1018F, 0x1019D, 0x1019F,
    0x101A1, 0x101CF, 0x101FE, 0x1027F, 0x1029D, 0x1029F, 0x102D1, 0x102DF, 0x102FC, 0x102FF, 0x10324, 0x1032C,
    0x1034B, 0x1034F, 0x1037B, 0x1037F, 0x1039E, 0x1039E, 0x103C4, 0x103C7, 0x103D6, 0x103FF, 0x1049E, 0x1049F,
    0x104AA, 0x104AF, 0x104D4, 0x104D7, 0x104FC, 0x104FF, 0x10528, 0x1052F, 0x10564, 0x1056E, 0x1057B, 0x1057B,
    0x1058B, 0x1058B, 0x10593, 0x10593, 0x10596, 0x10596, 0x105A2, 0x105A2, 0x105B2, 0x105B2, 0x105BA, 0x105BA,
    0x105BD, 0x105FF, 0x10737, 0x1073F, 0x10756, 0x1075F, 0x10768, 0x1077F, 0x10786, 0x10786, 0x107B1, 0x107B1,
    0x107BB, 0x107FF, 0x10806, 0x10807, 0x10809, 0x10809, 0x10836, 0x10836, 0x10839, 0x1083B, 0x1083D, 0x1083E,
    0x10856, 0x10856, 0x1089F, 0x108A6, 0x108B0, 0x108DF, 0x108F3, 0x108F3, 0x108F6, 0x108FA, 0x1091C, 0x1091E,
    0x1093A, 0x1093E, 0x10940, 0x1097F, 0x109B8, 0x109BB, 0x109D0, 0x109D1, 0x10A04, 0x10A04, 0x10A07, 0x10A0B,
    0x10A14, 0x10A14, 0x10A18, 0x10A18, 0x10A36, 0x10A37, 0x10A3B, 0x10A3E, 0x10A49, 0x10A4F, 0x10A59, 0x10A5F,
    0x10AA0, 0x10ABF, 0x10AE7, 0x10AEA, 0x10AF7, 0x10AFF, 0x10B36, 0x10B38, 0x10B56, 0x10B57, 0x10B73, 0x10B77,
    0x10B92, 0x10B98, 0x10B9D, 0x10BA8, 0x10BB0, 0x10BFF, 0x10C49, 0x10C7F, 0x10CB3, 0x10CBF, 0x10CF3, 0x10CF9,
    0x10D28, 0x10D2F, 0x10D3A, 0x10E5F, 0x10E7F, 0x10E7F, 0x10EAA, 0x10EAA, 0x10EAE, 0x10EAF, 0x10EB2, 0x10EFC,
    0x10F28, 0x10F2F, 0x10F5A, 0x10F6F, 0x10F8A, 0x10FAF, 0x10FCC, 0x10FDF, 0x10FF7, 0x10FFF, 0x1104E, 0x11051,
    0x11076, 0x1107E, 0x110BD, 0x110BD, 0x110C3, 0x110CF, 0x110E9, 0x110EF, 0x110FA, 0x110FF, 0x11135, 0x11135,
    0x11148, 0x1114F, 0x11177, 0x1117F, 0x111E0, 0x111E0, 0x111F5, 0x111FF, 0x11212, 0x11212, 0x11242, 0x1127F,
    0x11287, 0x11287, 0x11289, 0x11289, 0x1128E, 0x1128E, 0x1129E, 0x1129E, 0x112AA, 0x112AF, 0x112EB, 0x112EF,
    0x112FA, 0x112FF, 0x11304, 0x11304, 0x1130D, 0x1130E, 0x11311, 0x11312, 0x11329, 0x11329, 0x11331, 0x11331,
    0x11334, 0x11334, 0x1133A, 0x1133A, 0x11345, 0x11346, 0x11349, 0x1134A, 0x1134E, 0x1134F, 0x11351, 0x11356,
    0x11358, 0x1135C, 0x11364, 0x11365, 0x1136D, 0x1136F, 0x11375, 0x113FF, 0x1145C, 0x1145C, 0x11462, 0x1147F,
    0x114C8, 0x114CF, 0x114DA, 0x1157F, 0x115B6, 0x115B7, 0x115DE, 0x115FF, 0x11645, 0x1164F, 0x1165A, 0x1165F,
    0x1166D, 0x1167F, 0x116BA, 0x116BF, 0x116CA, 0x116FF, 0x1171B, 0x1171C, 0x1172C, 0x1172F, 0x11747, 0x117FF,
    0x1183C, 0x1189F, 0x118F3, 0x118FE, 0x11907, 0x11908, 0x1190A, 0x1190B, 0x11914, 0x11914, 0x11917, 0x11917,
    0x11936, 0x11936, 0x11939, 0x1193A, 0x11947, 0x1194F, 0x1195A, 0x1199F, 0x119A8, 0x119A9, 0x119D8, 0x119D9,
    0x119E5, 0x119FF, 0x11A48, 0x11A4F, 0x11AA3, 0x11AAF, 0x11AF9, 0x11AFF, 0x11B0A, 0x11BFF, 0x11C09, 0x11C09,
    0x11C37, 0x11C37, 0x11C46, 0x11C4F, 0x11C6D, 0x11C6F, 0x11C90, 0x11C91, 0x11CA8, 0x11CA8, 0x11CB7, 0x11CFF,
    0x11D07, 0x11D07, 0x11D0A, 0x11D0A, 0x11D37, 0x11D39, 0x11D3B, 0x11D3B, 0x11D3E, 0x11D3E, 0x11D48, 0x11D4F,
    0x11D5A, 0x11D5F, 0x11D66, 0x11D66, 0x11D69, 0x11D69, 0x11D8F, 0x11D8F, 0x11D92, 0x11D92, 0x11D99, 0x11D9F,
    0x11DAA, 0x11EDF, 0x11EF9, 0x11EFF, 0x11F11, 0x11F11, 0x11F3B, 0x11F3D, 0x11F5A, 0x11FAF, 0x11FB1, 0x11FBF,
    0x11FF2, 0x11FFE, 0x1239A, 0x123FF, 0x1246F, 0x1246F, 0x12475, 0x1247F, 0x12544, 0x12F8F, 0x12FF3, 0x12FFF,
    0x13430, 0x1343F, 0x13456, 0x143FF, 0x14647, 0x167FF, 0x16A39, 0x16A3F, 0x16A5F, 0x16A5F, 0x16A6A, 0x16A6D,
    0x16ABF, 0x16ABF, 0x16ACA, 0x16ACF, 0x16AEE, 0x16AEF, 0x16AF6, 0x16AFF, 0x16B46, 0x16B4F, 0x16B5A, 0x16B5A,
    0x16B62, 0x16B62, 0x16B78, 0x16B7C, 0x16B90, 0x16E3F, 0x16E9B, 0x16EFF, 0x16F4B, 0x16F4E, 0x16F88, 0x16F8E,
    0x16FA0, 0x16FDF, 0x16FE5, 0x16FEF, 0x16FF2, 0x16FFF, 0x187F8, 0x187FF, 0x18CD6, 0x18CFF, 0x18D09, 0x1AFEF,
    0x1AFF4, 0x1AFF4, 0x1AFFC, 0x1AFFC, 0x1AFFF, 0x1AFFF, 0x1B123, 0x1B131, 0x1B133, 0x1B14F, 0x1B153, 0x1B154,
    0x1B156, 0x1B163, 0x1B168, 0x1B16F, 0x1B2FC, 0x1BBFF, 0x1BC6B, 0x1BC6F, 0x1BC7D, 0x1BC7F, 0x1BC89, 0x1BC8F,
    0x1BC9A, 0x1BC9B, 0x1BCA0, 0x1CEFF, 0x1CF2E, 0x1CF2F, 0x1CF47, 0x1CF4F, 0x1CFC4, 0x1CFFF, 0x1D0F6, 0x1D0FF,
    0x1D127, 0x1D128, 0x1D173, 0x1D17A, 0x1D1EB, 0x1D1FF, 0x1D246, 0x1D2BF, 0x1D2D4, 0x1D2DF, 0x1D2F4, 0x1D2FF,
    0x1D357, 0x1D35F, 0x1D379, 0x1D3FF, 0x1D455, 0x1D455, 0x1D49D, 0x1D49D, 0x1D4A0, 0x1D4A1, 0x1D4A3, 0x1D4A4,
    0x1D4A7, 0x1D4A8, 0x1D4AD, 0x1D4AD, 0x1D4BA, 0x1D4BA, 0x1D4BC, 0x1D4BC, 0x1D4C4, 0x1D4C4, 0x1D506, 0x1D506,
    0x1D50B, 0x1D50C, 0x1D515, 0x1D515, 0x1D51D, 0x1D51D, 0x1D53A, 0x1D53A, 0x1D53F, 0x1D53F, 0x1D545, 0x1D545,
    0x1D547, 0x1D549, 0x1D551, 0x1D551, 0x1D6A6, 0x1D6A7, 0x1D7CC, 0x1D7CD, 0x1DA8C, 0x1DA9A, 0x1DAA0, 0x1DAA0,
    0x1DAB0, 0x1DEFF, 0x1DF1F, 0x1DF24, 0x1DF2B, 0x1DFFF, 0x1E007, 0x1E007, 0x1E019, 0x1E01A, 0x1E022, 0x1E022,
    0x1E025, 0x1E025, 0x1E02B, 0x1E02F, 0x1E06E, 0x1E08E, 0x1E090, 0x1E0FF, 0x1E12D, 0x1E12F, 0x1E13E, 0x1E13F,
    0x1E14A, 0x1E14D, 0x1E150, 0x1E28F, 0x1E2AF, 0x1E2BF, 0x1E2FA, 0x1E2FE, 0x1E300, 0x1E4CF, 0x1E4FA, 0x1E7DF,
    0x1E7E7, 0x1E7E7, 0x1E7EC, 0x1E7EC, 0x1E7EF, 0x1E7EF, 0x1E7FF, 0x1E7FF, 0x1E8C5, 0x1E8C6, 0x1E8D7, 0x1E8FF,
    0x1E94C, 0x1E94F, 0x1E95A, 0x1E95D, 0x1E960, 0x1EC70, 0x1ECB5, 0x1ED00, 0x1ED3E, 0x1EDFF, 0x1EE04, 0x1EE04,
    0x1EE20, 0x1EE20, 0x1EE23, 0x1EE23, 0x1EE25, 0x1EE26, 0x1EE28, 0x1EE28, 0x1EE33, 0x1EE33, 0x1EE38, 0x1EE38,
    0x1EE3A, 0x1EE3A, 0x1EE3C, 0x1EE41, 0x1EE43, 0x1EE46, 0x1EE48, 0x1EE48, 0x1EE4A, 0x1EE4A, 0x1EE4C, 0x1EE4C,
    0x1EE50, 0x1EE50, 0x1EE53, 0x1EE53, 0x1EE55, 0x1EE56, 0x1EE58, 0x1EE58, 0x1EE5A, 0x1EE5A, 0x1EE5C, 0x1EE5C,
    0x1EE5E, 0x1EE5E, 0x1EE60, 0x1EE60, 0x1EE63, 0x1EE63, 0x1EE65, 0x1EE66, 0x1EE6B, 0x1EE6B, 0x1EE73, 0x1EE73,
    0x1EE78, 0x1EE78, 0x1EE7D, 0x1EE7D, 0x1EE7F, 0x1EE7F, 0x1EE8A, 0x1EE8A, 0x1EE9C, 0x1EEA0, 0x1EEA4, 0x1EEA4,
    0x1EEAA, 0x1EEAA, 0x1EEBC, 0x1EEEF, 0x1EEF2, 0x1EFFF, 0x1F02C, 0x1F02F, 0x1F094, 0x1F09F, 0x1F0AF, 0x1F0B0,
    0x1F0C0, 0x1F0C0, 0x1F0D0, 0x1F0D0, 0x1F0F6, 0x1F0FF, 0x1F1AE, 0x1F1E5, 0x1F203, 0x1F20F, 0x1F23C, 0x1F23F,
    0x1F249, 0x1F24F, 0x1F252, 0x1F25F, 0x1F266, 0x1F2FF, 0x1F6D8, 0x1F6DB, 0x1F6ED, 0x1F6EF, 0x1F6FD, 0x1F6FF,
    0x1F777, 0x1F77A, 0x1F7DA, 0x1F7DF, 0x1F7EC, 0x1F7EF, 0x1F7F1, 0x1F7FF, 0x1F80C, 0x1F80F, 0x1F848, 0x1F84F,
    0x1F85A, 0x1F85F, 0x1F888, 0x1F88F, 0x1F8AE, 0x1F8AF, 0x1F8B2, 0x1F8FF, 0x1FA54, 0x1FA5F, 0x1FA6E, 0x1FA6F,
    0x1FA7D, 0x1FA7F, 0x1FA89, 0x1FA8F, 0x1FABE, 0x1FABE, 0x1FAC6, 0x1FACD, 0x1FADC, 0x1FADF, 0x1FAE9, 0x1FAEF,
    0x1FAF9, 0x1FAFF, 0x1FB93, 0x1FB93, 0x1FBCB, 0x1FBEF, 0x1FBFA, 0x1FFFF, 0x2A6E0, 0x2A6FF, 0x2B73A, 0x2B73F,
    0x2B81E, 0x2B81F, 0x2CEA2, 0x2CEAF, 0x2EBE1, 0x2F7FF, 0x2FA1E, 0x2FFFF, 0x3134B, 0x3134F, 0x323B0, 0xE00FF,
    0xE01F0, 0x10FFFF,
];

// ---------------------------------------------------------------------------
// Field selectors
// ---------------------------------------------------------------------------

/// A field-selector operator. `==` parses to [`FieldOperator::Equals`], as in
/// Go (both become a `hasTerm`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FieldOperator {
    /// `field=value` or `field==value`
    Equals,
    /// `field!=value`
    NotEquals,
}

/// One term of a field selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldTerm {
    field: String,
    operator: FieldOperator,
    value: String,
}

impl fmt::Display for FieldTerm {
    /// `hasTerm.String()` / `notHasTerm.String()` (value re-escaped).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let op = match self.operator {
            FieldOperator::Equals => "=",
            FieldOperator::NotEquals => "!=",
        };
        write!(f, "{}{}{}", self.field, op, escape_field_value(&self.value))
    }
}

/// A parsed `fieldSelector` (the AND of its terms).
///
/// The default value is the empty selector, which matches everything.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FieldSelector {
    /// In the order Go keeps them: sorted by raw (escaped) term text.
    terms: Vec<FieldTerm>,
}

impl FieldSelector {
    /// Parses `fieldSelector` exactly like
    /// `k8s.io/apimachinery/pkg/fields.ParseSelector` in Kubernetes 1.33.
    ///
    /// Terms are separated by unescaped `,`; each is split at the first
    /// `!=`, `==` or `=` (the field part has no escaping); the value may
    /// contain `\\`, `\,` and `\=` and no other backslash or unescaped `=`.
    /// Empty terms are skipped, and a term with an empty field *and* an empty
    /// value (`=`, `!=`) is dropped, so it selects everything. Field names are
    /// not checked here: see [`FieldSelector::convert`].
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        let mut parts = split_terms(s);
        parts.sort_unstable();
        let mut terms = Vec::new();
        for part in parts {
            if part.is_empty() {
                continue;
            }
            let Some((lhs, op, rhs)) = split_term(part) else {
                return Err(SelectorError::InvalidFieldSelectorTerm {
                    selector: s.to_string(),
                    term: part.to_string(),
                });
            };
            let value = unescape_field_value(rhs)?;
            terms.push(FieldTerm {
                field: lhs.to_string(),
                operator: op,
                value,
            });
        }
        // The identity Transform run by ParseSelector turns a term with an
        // empty field and an empty value into Everything(), which andTerm
        // then drops.
        terms.retain(|t| !(t.field.is_empty() && t.value.is_empty()));
        Ok(FieldSelector { terms })
    }

    /// The field names used, in selector order (duplicates kept), so the
    /// caller can check them; [`FieldSelector::convert`] does that check with
    /// the apiserver's messages.
    #[cfg(test)]
    pub fn fields(&self) -> Vec<&str> {
        self.terms.iter().map(|t| t.field.as_str()).collect()
    }

    /// Whether every term matches. `get` returns the object's value for a
    /// field name; `None` is treated as `""`, like Go's `fields.Set.Get`
    /// (so `f!=x` matches an object without `f`, and `f=` matches it).
    pub fn matches(&self, get: &dyn Fn(&str) -> Option<String>) -> bool {
        self.terms.iter().all(|t| {
            let have = get(&t.field).unwrap_or_default();
            match t.operator {
                FieldOperator::Equals => have == t.value,
                FieldOperator::NotEquals => have != t.value,
            }
        })
    }

    /// Whether the selector has no terms (`fields.Selector.Empty()`).
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// Applies the apiserver's field label conversion for the listed kind
    /// (`Transform(scope.Convertor.ConvertFieldLabel)` in `get.go`): each
    /// field is checked in term order with [`convert_field_label`], the first
    /// unsupported one yields [`SelectorError::UnsupportedField`], and
    /// aliases are rewritten to the internal names the object's field set
    /// uses (e.g. Pod `spec.host` → `spec.nodeName`, events.k8s.io
    /// `regarding.kind` → `involvedObject.kind`).
    pub fn convert(&self, group: &str, version: &str, kind: &str) -> Result<Self, SelectorError> {
        let mut terms = Vec::with_capacity(self.terms.len());
        for t in &self.terms {
            let field = convert_field_label(group, version, kind, &t.field)?;
            terms.push(FieldTerm {
                field,
                operator: t.operator,
                value: t.value.clone(),
            });
        }
        Ok(FieldSelector { terms })
    }
}

impl fmt::Display for FieldSelector {
    /// `fields.Selector.String()`, e.g. `a=b,c!=d\,e`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, t) in self.terms.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{t}")?;
        }
        Ok(())
    }
}

/// `fields.EscapeValue`: prefixes `\`, `,` and `=` with a backslash.
pub fn escape_field_value(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '\\' | ',' | '=') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// `fields.UnescapeValue`.
fn unescape_field_value(s: &str) -> Result<String, SelectorError> {
    if !s.contains(['\\', ',', '=']) {
        return Ok(s.to_string());
    }
    let mut out = String::with_capacity(s.len());
    let mut in_slash = false;
    for c in s.chars() {
        if in_slash {
            match c {
                '\\' | ',' | '=' => out.push(c),
                _ => return Err(SelectorError::InvalidEscapeSequence(format!("\\{c}"))),
            }
            in_slash = false;
            continue;
        }
        match c {
            '\\' => in_slash = true,
            ',' | '=' => return Err(SelectorError::UnescapedCharacter(c)),
            _ => out.push(c),
        }
    }
    if in_slash {
        return Err(SelectorError::InvalidEscapeSequence("\\".to_string()));
    }
    Ok(out)
}

/// `fields.splitTerms`: split at commas not preceded by an escaping `\`.
fn split_terms(s: &str) -> Vec<&str> {
    if s.is_empty() {
        return Vec::new();
    }
    let mut terms = Vec::new();
    let mut start = 0;
    let mut in_slash = false;
    for (i, c) in s.char_indices() {
        if in_slash {
            in_slash = false;
        } else if c == '\\' {
            in_slash = true;
        } else if c == ',' {
            terms.push(&s[start..i]);
            start = i + 1;
        }
    }
    terms.push(&s[start..]);
    terms
}

/// `fields.splitTerm`: split at the first `!=`, `==` or `=` (checked in that
/// order at each position).
fn split_term(term: &str) -> Option<(&str, FieldOperator, &str)> {
    for (i, _) in term.char_indices() {
        let rest = &term[i..];
        for (op, kind) in [
            ("!=", FieldOperator::NotEquals),
            ("==", FieldOperator::Equals),
            ("=", FieldOperator::Equals),
        ] {
            if let Some(rhs) = rest.strip_prefix(op) {
                return Some((&term[..i], kind, rhs));
            }
        }
    }
    None
}

// ---------------------------------------------------------------------------
// Field label conversion (which fields each kind supports)
// ---------------------------------------------------------------------------

/// The message of the field label conversion functions registered for most
/// kinds that have any (core/v1 `Pod`, `Node`, `ReplicationController`,
/// `Event`, `Namespace`, `Secret`, `Service`; events.k8s.io `Event`;
/// certificates.k8s.io `CertificateSigningRequest` and `ClusterTrustBundle`)
/// and of custom resources (apiextensions-apiserver `crConverter`), e.g.
/// `field label not supported: spec.foo`.
///
/// Kinds without a registered function use
/// `runtime.DefaultMetaV1FieldSelectorConversion` instead, and a few kinds
/// have their own wording; [`convert_field_label`] picks the right one.
pub fn unsupported_field_message(field: &str) -> String {
    format!("field label not supported: {field}")
}

const META_NAME_NAMESPACE: &[&str] = &["metadata.name", "metadata.namespace"];
const POD_FIELDS: &[&str] = &[
    "metadata.name",
    "metadata.namespace",
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.podIPs",
    "status.nominatedNodeName",
];
const NODE_FIELDS: &[&str] = &["metadata.name", "spec.unschedulable"];
const RC_FIELDS: &[&str] = &["metadata.name", "metadata.namespace", "status.replicas"];
const CORE_EVENT_FIELDS: &[&str] = &[
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
    "metadata.namespace",
    "metadata.name",
];
const NAMESPACE_FIELDS: &[&str] = &["status.phase", "metadata.name"];
const SECRET_FIELDS: &[&str] = &["type", "metadata.namespace", "metadata.name"];
const SERVICE_FIELDS: &[&str] = &[
    "metadata.namespace",
    "metadata.name",
    "spec.clusterIP",
    "spec.type",
];
/// events.k8s.io `Event`: (external name, internal field-set name).
const EVENTS_API_FIELDS: &[(&str, &str)] = &[
    ("reason", "reason"),
    ("regarding.kind", "involvedObject.kind"),
    ("regarding.namespace", "involvedObject.namespace"),
    ("regarding.name", "involvedObject.name"),
    ("regarding.uid", "involvedObject.uid"),
    ("regarding.apiVersion", "involvedObject.apiVersion"),
    (
        "regarding.resourceVersion",
        "involvedObject.resourceVersion",
    ),
    ("regarding.fieldPath", "involvedObject.fieldPath"),
    ("reportingController", "reportingComponent"),
    ("type", "type"),
    ("metadata.namespace", "metadata.namespace"),
    ("metadata.name", "metadata.name"),
];
#[cfg(test)]
const EVENTS_API_FIELD_NAMES: &[&str] = &[
    "reason",
    "regarding.kind",
    "regarding.namespace",
    "regarding.name",
    "regarding.uid",
    "regarding.apiVersion",
    "regarding.resourceVersion",
    "regarding.fieldPath",
    "reportingController",
    "type",
    "metadata.namespace",
    "metadata.name",
];
const SIGNER_FIELDS: &[&str] = &["metadata.name", "spec.signerName"];
const JOB_FIELDS: &[&str] = &["metadata.name", "metadata.namespace", "status.successful"];
const RESOURCE_SLICE_FIELDS: &[&str] = &["metadata.name", "spec.nodeName", "spec.driver"];

/// The field selector names kube-apiserver 1.33 accepts for a kind, as
/// decided by the field label conversion function registered for the
/// group/kind (its served versions), or by
/// `runtime.DefaultMetaV1FieldSelectorConversion` when none is registered.
///
/// | group / kind | accepted fields | message for any other field `F` |
/// |---|---|---|
/// | core `Pod` | `metadata.name`, `metadata.namespace`, `spec.nodeName`, `spec.restartPolicy`, `spec.schedulerName`, `spec.serviceAccountName`, `spec.hostNetwork`, `status.phase`, `status.podIP`, `status.podIPs`, `status.nominatedNodeName`; alias `spec.host` → `spec.nodeName` | `field label not supported: F` |
/// | core `Node` | `metadata.name`, `spec.unschedulable` | same |
/// | core `ReplicationController` | `metadata.name`, `metadata.namespace`, `status.replicas` | same |
/// | core `Event` | `involvedObject.kind`, `.namespace`, `.name`, `.uid`, `.apiVersion`, `.resourceVersion`, `.fieldPath`, `reason`, `reportingComponent`, `source`, `type`, `metadata.namespace`, `metadata.name` | same |
/// | core `Namespace` | `status.phase`, `metadata.name` | same |
/// | core `Secret` | `type`, `metadata.namespace`, `metadata.name` | same |
/// | core `Service` | `metadata.namespace`, `metadata.name`, `spec.clusterIP`, `spec.type` | same |
/// | `events.k8s.io` `Event` | `reason`, `regarding.{kind,namespace,name,uid,apiVersion,resourceVersion,fieldPath}` (→ `involvedObject.*`), `reportingController` (→ `reportingComponent`), `type`, `metadata.namespace`, `metadata.name` | same |
/// | `certificates.k8s.io` `CertificateSigningRequest`, `ClusterTrustBundle` | `metadata.name`, `spec.signerName` | same |
/// | `batch` `Job` (v1) | `metadata.name`, `metadata.namespace`, `status.successful` | `field label "F" not supported for Job` |
/// | `resource.k8s.io` `ResourceSlice` | `metadata.name`, `spec.nodeName`, `spec.driver` | `field label not supported for resource.k8s.io/VERSION, Kind=ResourceSlice: F` |
/// | every other built-in kind (ConfigMap, Deployment, ReplicaSet, CronJob, PersistentVolume, …) | `metadata.name`, `metadata.namespace` (also for cluster-scoped kinds, where the namespace is `""`) | `"F" is not a known field selector: only "metadata.name", "metadata.namespace"` (`%q`-quoted) |
/// | custom resources | `metadata.name`, `metadata.namespace` (namespaced only), the CRD's `selectableFields` | `field label not supported: F` ([`unsupported_field_message`]) |
///
/// Values the apiserver computes for them (what the `get` callback of
/// [`FieldSelector::matches`] should return): booleans as `true`/`false`
/// (`spec.hostNetwork`, false without a security context;
/// `spec.unschedulable`), integers in decimal (`status.replicas`,
/// `status.successful` = succeeded count), `status.podIP` = the first entry
/// of `status.podIPs`; `status.podIPs` is accepted but never present in the
/// pod's field set, so it always reads as `""`; the core Event `source` is
/// `source.component`, or `reportingController` when that is empty;
/// `metadata.namespace` of cluster-scoped objects reads as `""`.
#[cfg(test)]
pub fn supported_fields(group: &str, kind: &str) -> &'static [&'static str] {
    match (group, kind) {
        ("", "Pod") => POD_FIELDS,
        ("", "Node") => NODE_FIELDS,
        ("", "ReplicationController") => RC_FIELDS,
        ("", "Event") => CORE_EVENT_FIELDS,
        ("", "Namespace") => NAMESPACE_FIELDS,
        ("", "Secret") => SECRET_FIELDS,
        ("", "Service") => SERVICE_FIELDS,
        ("events.k8s.io", "Event") => EVENTS_API_FIELD_NAMES,
        ("certificates.k8s.io", "CertificateSigningRequest" | "ClusterTrustBundle") => {
            SIGNER_FIELDS
        }
        ("batch", "Job") => JOB_FIELDS,
        ("resource.k8s.io", "ResourceSlice") => RESOURCE_SLICE_FIELDS,
        _ => META_NAME_NAMESPACE,
    }
}

/// `scheme.ConvertFieldLabel(gvk, label, value)` of kube-apiserver 1.33 for a
/// built-in kind: returns the internal field name (usually `label` itself)
/// or the exact error the apiserver returns for an unsupported field.
///
/// The conversion functions are registered per group/version/kind; this
/// reproduces all of them (including versions no longer served, such as
/// apps/v1beta1 `StatefulSet` and batch/v1beta1), falling back to
/// `runtime.DefaultMetaV1FieldSelectorConversion`. See [`supported_fields`].
pub fn convert_field_label(
    group: &str,
    version: &str,
    kind: &str,
    label: &str,
) -> Result<String, SelectorError> {
    let allow = |allowed: &[&str], err: fn(&str) -> String| {
        if allowed.contains(&label) {
            Ok(label.to_string())
        } else {
            Err(SelectorError::UnsupportedField(err(label)))
        }
    };
    match (group, version, kind) {
        ("", "v1", "Pod") => {
            if label == "spec.host" {
                Ok("spec.nodeName".to_string())
            } else {
                allow(POD_FIELDS, unsupported_field_message)
            }
        }
        ("", "v1", "Node") => allow(NODE_FIELDS, unsupported_field_message),
        ("", "v1", "ReplicationController") => allow(RC_FIELDS, unsupported_field_message),
        ("", "v1", "Event") => allow(CORE_EVENT_FIELDS, unsupported_field_message),
        ("", "v1", "Namespace") => allow(NAMESPACE_FIELDS, unsupported_field_message),
        ("", "v1", "Secret") => allow(SECRET_FIELDS, unsupported_field_message),
        ("", "v1", "Service") => allow(SERVICE_FIELDS, unsupported_field_message),
        ("events.k8s.io", "v1" | "v1beta1", "Event") => EVENTS_API_FIELDS
            .iter()
            .find(|(ext, _)| *ext == label)
            .map(|(_, internal)| internal.to_string())
            .ok_or_else(|| SelectorError::UnsupportedField(unsupported_field_message(label))),
        ("certificates.k8s.io", "v1" | "v1beta1", "CertificateSigningRequest")
        | ("certificates.k8s.io", "v1alpha1" | "v1beta1", "ClusterTrustBundle") => {
            allow(SIGNER_FIELDS, unsupported_field_message)
        }
        ("batch", "v1", "Job") => allow(JOB_FIELDS, |l| {
            format!("field label {} not supported for Job", go_quote(l))
        }),
        ("batch", "v1beta1", "Job" | "JobTemplate" | "CronJob") => {
            if JOB_FIELDS.contains(&label) {
                Ok(label.to_string())
            } else {
                Err(SelectorError::UnsupportedField(format!(
                    "field label {} not supported for {}",
                    go_quote(label),
                    go_quote(kind)
                )))
            }
        }
        ("resource.k8s.io", "v1alpha3" | "v1beta1" | "v1beta2", "ResourceSlice") => {
            if RESOURCE_SLICE_FIELDS.contains(&label) {
                Ok(label.to_string())
            } else {
                Err(SelectorError::UnsupportedField(format!(
                    "field label not supported for resource.k8s.io/{version}, Kind=ResourceSlice: {label}"
                )))
            }
        }
        ("apps", "v1beta1" | "v1beta2", "StatefulSet") => {
            if JOB_FIELDS.contains(&label) {
                Ok(label.to_string())
            } else {
                Err(SelectorError::UnsupportedField(format!(
                    "field label not supported for apps{version}.StatefulSet: {label}"
                )))
            }
        }
        _ => allow(META_NAME_NAMESPACE, |l| {
            format!(
                "{} is not a known field selector: only \"metadata.name\", \"metadata.namespace\"",
                go_quote(l)
            )
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn label_err(s: &str) -> String {
        match LabelSelector::parse(s) {
            Ok(sel) => panic!("{s:?} parsed as {sel}, expected an error"),
            Err(e) => e.to_string(),
        }
    }

    fn field_err(s: &str) -> String {
        match FieldSelector::parse(s) {
            Ok(sel) => panic!("{s:?} parsed as {sel}, expected an error"),
            Err(e) => e.to_string(),
        }
    }

    fn expect_label_match(sel: &str, labels: &[(&str, &str)], want: bool) {
        let parsed = LabelSelector::parse(sel).unwrap_or_else(|e| panic!("{sel:?}: {e}"));
        assert_eq!(parsed.matches(&set(labels)), want, "{sel:?} vs {labels:?}");
    }

    fn expect_field_match(sel: &str, fields: &[(&str, &str)], want: bool) {
        let parsed = FieldSelector::parse(sel).unwrap_or_else(|e| panic!("{sel:?}: {e}"));
        let m = set(fields);
        let get = |k: &str| m.get(k).cloned();
        assert_eq!(parsed.matches(&get), want, "{sel:?} vs {fields:?}");
    }

    const VALUE_REGEX_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
    const NAME_REGEX_MSG: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";

    // --- ported from labels/selector_test.go ------------------------------

    #[test]
    fn label_selector_parse_good_and_restring() {
        for s in [
            "x=a,y=b,z=c",
            "",
            "x!=a,y=b",
            "x=",
            "x= ",
            "x=,z= ",
            "x= ,z= ",
            "!x",
            "x>1",
            "x>1,z<5",
        ] {
            let sel = LabelSelector::parse(s).unwrap_or_else(|e| panic!("{s:?}: {e}"));
            assert_eq!(sel.to_string(), s.replace(' ', ""), "restring of {s:?}");
        }
        for s in ["x=a||y=b", "x==a==b", "!x=a", "x<a"] {
            assert!(LabelSelector::parse(s).is_err(), "{s:?} should fail");
        }
    }

    #[test]
    fn label_selector_deterministic_parse() {
        let a = LabelSelector::parse("x=a,a=x").unwrap();
        let b = LabelSelector::parse("a=x,x=a").unwrap();
        assert_eq!(a.to_string(), b.to_string());
        assert_eq!(a.to_string(), "a=x,x=a");
    }

    #[test]
    fn label_selector_matches() {
        expect_label_match("", &[("x", "y")], true);
        expect_label_match("x=y", &[("x", "y")], true);
        expect_label_match("x=y,z=w", &[("x", "y"), ("z", "w")], true);
        expect_label_match("x!=y,z!=w", &[("x", "z"), ("z", "a")], true);
        expect_label_match("notin=in", &[("notin", "in")], true);
        expect_label_match("x", &[("x", "z")], true);
        expect_label_match("!x", &[("y", "z")], true);
        expect_label_match("x>1", &[("x", "2")], true);
        expect_label_match("x<1", &[("x", "0")], true);
        expect_label_match("x=z", &[], false);
        expect_label_match("x=y", &[("x", "z")], false);
        expect_label_match("x=y,z=w", &[("x", "w"), ("z", "w")], false);
        expect_label_match("x!=y,z!=w", &[("x", "z"), ("z", "w")], false);
        expect_label_match("x", &[("y", "z")], false);
        expect_label_match("!x", &[("x", "z")], false);
        expect_label_match("x>1", &[("x", "0")], false);
        expect_label_match("x<1", &[("x", "2")], false);
        let ls = [("foo", "bar"), ("baz", "blah")];
        expect_label_match("foo=bar", &ls, true);
        expect_label_match("baz=blah", &ls, true);
        expect_label_match("foo=bar,baz=blah", &ls, true);
        expect_label_match("foo=blah", &ls, false);
        expect_label_match("baz=bar", &ls, false);
        expect_label_match("foo=bar,foobar=bar,baz=blah", &ls, false);
    }

    #[test]
    fn label_requirement_matching() {
        let xy = [("x", "foo"), ("y", "baz")];
        expect_label_match("x in (foo),y notin (alpha)", &xy, true);
        expect_label_match("x in (foo),y in (alpha)", &xy, false);
        expect_label_match("x notin (),y", &[("y", "")], true);
        expect_label_match("!x,y", &[("y", "")], true);
        expect_label_match("x notin (),!y", &[("y", "")], false);
        expect_label_match("x in ()", &[("y", "baz")], false);
        expect_label_match("x in ()", &[("x", "")], true);
        expect_label_match("z>1", &[("z", "2")], true);
        expect_label_match("z>1", &[("z", "v2")], false);
        expect_label_match("z>1", &[], false);
        expect_label_match("z<1", &[("z", "-5")], true);
        expect_label_match("z<10", &[("z", "+9")], true);
        expect_label_match("z<10", &[("z", " 9")], false);
        expect_label_match("z<10", &[("z", "99999999999999999999")], false);
        expect_label_match("x notin (a,b)", &[("x", "c")], true);
        expect_label_match("x notin (a,b)", &[("x", "b")], false);
        expect_label_match("x!=a", &[], true);
        expect_label_match("x==a", &[("x", "a")], true);
        expect_label_match("x=", &[("x", "")], true);
        expect_label_match("x=", &[], false);
    }

    #[test]
    fn lexer_tokens() {
        let cases = [
            ("", Token::EndOfString),
            (",", Token::Comma),
            ("notin", Token::NotIn),
            ("in", Token::In),
            ("=", Token::Equals),
            ("==", Token::DoubleEquals),
            (">", Token::GreaterThan),
            ("<", Token::LessThan),
            ("!", Token::DoesNotExist),
            ("!=", Token::NotEquals),
            ("(", Token::OpenPar),
            (")", Token::ClosedPar),
            ("~", Token::Identifier),
            ("||", Token::Identifier),
        ];
        for (s, want) in cases {
            let mut l = Lexer {
                s: s.as_bytes(),
                pos: 0,
            };
            let (tok, lit) = l.lex();
            assert_eq!(tok, want, "{s:?}");
            assert_eq!(lit, s, "{s:?}");
        }
    }

    #[test]
    fn lexer_sequences() {
        use Token::*;
        let cases: &[(&str, &[Token])] = &[
            (
                "key in ( value )",
                &[Identifier, In, OpenPar, Identifier, ClosedPar],
            ),
            (
                "key notin ( value )",
                &[Identifier, NotIn, OpenPar, Identifier, ClosedPar],
            ),
            (
                "key in ( value1, value2 )",
                &[
                    Identifier, In, OpenPar, Identifier, Comma, Identifier, ClosedPar,
                ],
            ),
            ("key", &[Identifier]),
            ("!key", &[DoesNotExist, Identifier]),
            ("()", &[OpenPar, ClosedPar]),
            (
                "x in (),y",
                &[Identifier, In, OpenPar, ClosedPar, Comma, Identifier],
            ),
            (
                "== != (), = notin",
                &[
                    DoubleEquals,
                    NotEquals,
                    OpenPar,
                    ClosedPar,
                    Comma,
                    Equals,
                    NotIn,
                ],
            ),
            ("key>2", &[Identifier, GreaterThan, Identifier]),
            ("key<1", &[Identifier, LessThan, Identifier]),
            ("a=!b", &[Identifier, Equals, DoesNotExist, Identifier]),
            (">=<", &[GreaterThan, Equals, LessThan]),
        ];
        for (s, want) in cases {
            let parser = Parser::new(s);
            let got: Vec<Token> = parser.items.iter().map(|(t, _)| *t).collect();
            let mut want = want.to_vec();
            want.push(EndOfString);
            assert_eq!(got, want, "{s:?}");
        }
    }

    #[test]
    fn parse_operator_errors() {
        for ok in ["in", "=", "==", ">", "<", "notin", "!="] {
            assert!(Parser::new(ok).parse_operator().is_ok(), "{ok:?}");
        }
        for (s, lit) in [("!", "!"), ("exists", "exists"), ("(", "(")] {
            assert_eq!(
                Parser::new(s).parse_operator().unwrap_err(),
                format!("found '{lit}', expected: in, notin, =, ==, !=, gt, lt")
            );
        }
    }

    #[test]
    fn set_selector_parser() {
        type Want<'a> = &'a [(&'a str, Operator, &'a [&'a str])];
        let valid: &[(&str, Want)] = &[
            ("", &[]),
            ("\rx", &[("x", Operator::Exists, &[])]),
            (
                "this-is-a-dns.domain.com/key-with-dash",
                &[(
                    "this-is-a-dns.domain.com/key-with-dash",
                    Operator::Exists,
                    &[],
                )],
            ),
            (
                "this-is-another-dns.domain.com/key-with-dash in (so,what)",
                &[(
                    "this-is-another-dns.domain.com/key-with-dash",
                    Operator::In,
                    &["so", "what"],
                )],
            ),
            (
                "0.1.2.domain/99 notin (10.10.100.1, tick.tack.clock)",
                &[(
                    "0.1.2.domain/99",
                    Operator::NotIn,
                    &["10.10.100.1", "tick.tack.clock"],
                )],
            ),
            ("foo  in\t (abc)", &[("foo", Operator::In, &["abc"])]),
            ("x notin\n (abc)", &[("x", Operator::NotIn, &["abc"])]),
            (
                "x  notin\t\t\t(abc,def)",
                &[("x", Operator::NotIn, &["abc", "def"])],
            ),
            ("x in (abc,def)", &[("x", Operator::In, &["abc", "def"])]),
            ("x in (abc,)", &[("x", Operator::In, &["", "abc"])]),
            ("x in ()", &[("x", Operator::In, &[""])]),
            (
                "x notin (abc,,def),bar,z in (),w",
                &[
                    ("bar", Operator::Exists, &[]),
                    ("w", Operator::Exists, &[]),
                    ("x", Operator::NotIn, &["", "abc", "def"]),
                    ("z", Operator::In, &[""]),
                ],
            ),
            (
                "x,y in (a)",
                &[("x", Operator::Exists, &[]), ("y", Operator::In, &["a"])],
            ),
            ("x=a", &[("x", Operator::Equals, &["a"])]),
            ("x>1", &[("x", Operator::GreaterThan, &["1"])]),
            ("x<7", &[("x", Operator::LessThan, &["7"])]),
            (
                "x=a,y!=b",
                &[
                    ("x", Operator::Equals, &["a"]),
                    ("y", Operator::NotEquals, &["b"]),
                ],
            ),
            (
                "x=a,y!=b,z in (h,i,j)",
                &[
                    ("x", Operator::Equals, &["a"]),
                    ("y", Operator::NotEquals, &["b"]),
                    ("z", Operator::In, &["h", "i", "j"]),
                ],
            ),
            ("x notin ( )", &[("x", Operator::NotIn, &[""])]),
            ("x notin (, a)", &[("x", Operator::NotIn, &["", "a"])]),
            ("a ", &[("a", Operator::Exists, &[])]),
            (
                "a in (x,y,notin, z,in)",
                &[("a", Operator::In, &["in", "notin", "x", "y", "z"])],
            ),
            ("x==a", &[("x", Operator::DoubleEquals, &["a"])]),
            ("in in (in)", &[("in", Operator::In, &["in"])]),
            ("x in (b,a,b)", &[("x", Operator::In, &["a", "b"])]),
            ("x in (a,,b)", &[("x", Operator::In, &["", "a", "b"])]),
            ("x in (,,,)", &[("x", Operator::In, &[""])]),
        ];
        for (s, want) in valid {
            let sel = LabelSelector::parse(s).unwrap_or_else(|e| panic!("{s:?}: {e}"));
            let got: Vec<(&str, Operator, Vec<&str>)> = sel
                .requirements()
                .iter()
                .map(|r| {
                    (
                        r.key(),
                        r.operator(),
                        r.values().iter().map(String::as_str).collect(),
                    )
                })
                .collect();
            let want: Vec<(&str, Operator, Vec<&str>)> =
                want.iter().map(|(k, o, v)| (*k, *o, v.to_vec())).collect();
            assert_eq!(got, want, "{s:?}");
        }
        for s in [
            "x=a||y=b",
            "x,,y",
            ",x,y",
            "x nott in (y)",
            "a in (xyz),",
            "a in (xyz)b notin ()",
            "a in (xyz abc)",
            "a notin(",
            "a (",
            "(",
        ] {
            assert!(LabelSelector::parse(s).is_err(), "{s:?} should fail");
        }
    }

    #[test]
    fn label_selector_to_string() {
        for (input, want) in [
            (
                "x in (def,abc),y notin (jkl),z",
                "x in (abc,def),y notin (jkl),z",
            ),
            ("x notin (abc,def),y!=jkl,!z", "x notin (abc,def),y!=jkl,!z"),
            (
                "x notin (abc),y in (jkl,mno),z notin ()",
                "x notin (abc),y in (jkl,mno),z notin ()",
            ),
            ("z!=a,y==jkl,x=abc", "x=abc,y==jkl,z!=a"),
            ("x>2,y<8,z", "x>2,y<8,z"),
        ] {
            assert_eq!(LabelSelector::parse(input).unwrap().to_string(), want);
        }
    }

    // --- exact apiserver messages (golden output of apimachinery v0.33.5) ---

    #[test]
    fn label_selector_error_messages() {
        let value_err =
            |path: &str, v: &str| format!("{path}: Invalid value: \"{v}\": {VALUE_REGEX_MSG}");
        let cases: Vec<(&str, String)> = vec![
            (
                "x=a||y=b",
                format!("unable to parse requirement: {}", value_err("values[0][x]", "a||y")),
            ),
            ("x==a==b", "found '==', expected: ',' or 'end of string'".into()),
            ("!x=a", "found '=', expected: ',' or 'end of string'".into()),
            (
                "x<a",
                "unable to parse requirement: values[0]: Invalid value: \"a\": for 'Gt', 'Lt' operators, the value must be an integer".into(),
            ),
            ("x,,y", "found ',', expected: identifier after ','".into()),
            (",x,y", "found ',', expected: !, identifier, or 'end of string'".into()),
            (
                "x nott in (y)",
                "unable to parse requirement: found 'nott', expected: in, notin, =, ==, !=, gt, lt".into(),
            ),
            ("a in (xyz),", "found '', expected: identifier after ','".into()),
            ("a in (xyz)b notin ()", "found 'b', expected: ',' or 'end of string'".into()),
            (
                "a in (xyz abc)",
                "unable to parse requirement: found 'abc', expected: ',' or ')'".into(),
            ),
            (
                "a notin(",
                "unable to parse requirement: found '', expected: ',', ')' or identifier".into(),
            ),
            (
                "a (",
                "unable to parse requirement: found '(', expected: in, notin, =, ==, !=, gt, lt".into(),
            ),
            ("(", "found '(', expected: !, identifier, or 'end of string'".into()),
            ("!", "unable to parse requirement: found '', expected: identifier".into()),
            ("x in (a", "unable to parse requirement: found '', expected: ',' or ')'".into()),
            (
                "x in (a,",
                "unable to parse requirement: found '', expected: ',', or identifier".into(),
            ),
            (
                "x in (,,",
                "unable to parse requirement: found '', expected: ',', or identifier".into(),
            ),
            ("x in a", "unable to parse requirement: found 'a' expected: '('".into()),
            // Go 1.33 quirk: ",," consumes the second comma, so ",,)" fails.
            (
                "x in (a,,)",
                "unable to parse requirement: found ')', expected: ',', or identifier".into(),
            ),
            ("x=(", "unable to parse requirement: found '(', expected: identifier".into()),
            (
                "x>",
                "unable to parse requirement: values[0]: Invalid value: \"\": for 'Gt', 'Lt' operators, the value must be an integer".into(),
            ),
            (
                "x>-1",
                format!("unable to parse requirement: {}", value_err("values[0][x]", "-1")),
            ),
            (
                "x>_x",
                format!(
                    "unable to parse requirement: [values[0]: Invalid value: \"_x\": for 'Gt', 'Lt' operators, the value must be an integer, {}]",
                    value_err("values[0][x]", "_x")
                ),
            ),
            (
                "x<9223372036854775808",
                "unable to parse requirement: values[0]: Invalid value: \"9223372036854775808\": for 'Gt', 'Lt' operators, the value must be an integer".into(),
            ),
            (
                "x in (_b,-a)",
                format!(
                    "unable to parse requirement: [{}, {}]",
                    value_err("values[0][x]", "-a"),
                    value_err("values[1][x]", "_b")
                ),
            ),
            (
                "a/b/c",
                "unable to parse requirement: <nil>: Invalid value: \"a/b/c\": a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')".into(),
            ),
            (
                "/a",
                "unable to parse requirement: <nil>: Invalid value: \"/a\": prefix part must be non-empty".into(),
            ),
            (
                "a/",
                format!(
                    "unable to parse requirement: <nil>: Invalid value: \"a/\": name part must be non-empty; {NAME_REGEX_MSG}"
                ),
            ),
            (
                "/",
                format!(
                    "unable to parse requirement: <nil>: Invalid value: \"/\": prefix part must be non-empty; name part must be non-empty; {NAME_REGEX_MSG}"
                ),
            ),
            (
                "-a",
                format!("unable to parse requirement: <nil>: Invalid value: \"-a\": {NAME_REGEX_MSG}"),
            ),
            (
                "A.B/c",
                "unable to parse requirement: <nil>: Invalid value: \"A.B/c\": prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".into(),
            ),
            (
                "x=y/z",
                format!("unable to parse requirement: {}", value_err("values[0][x]", "y/z")),
            ),
            (
                "a b",
                "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt".into(),
            ),
            (
                "a! =b",
                "unable to parse requirement: found '!', expected: in, notin, =, ==, !=, gt, lt".into(),
            ),
            (
                "x in ((a))",
                "unable to parse requirement: found '(', expected: ',', ')' or identifier".into(),
            ),
            ("x in (a))", "found ')', expected: ',' or 'end of string'".into()),
            (")", "found ')', expected: !, identifier, or 'end of string'".into()),
            ("=", "found '=', expected: !, identifier, or 'end of string'".into()),
            (
                "x\u{0}y",
                "unable to parse requirement: found 'y', expected: in, notin, =, ==, !=, gt, lt".into(),
            ),
            (
                "\"q\"",
                format!(
                    "unable to parse requirement: <nil>: Invalid value: \"\\\"q\\\"\": {NAME_REGEX_MSG}"
                ),
            ),
            (
                "a\u{ad}",
                format!(
                    "unable to parse requirement: <nil>: Invalid value: \"a\\u00ad\": {NAME_REGEX_MSG}"
                ),
            ),
            (
                "x=\u{1}\u{b}",
                format!("unable to parse requirement: {}", value_err("values[0][x]", "\\x01\\v")),
            ),
        ];
        for (s, want) in cases {
            assert_eq!(label_err(s), want, "{s:?}");
        }
    }

    #[test]
    fn label_length_limits() {
        let a63 = "a".repeat(63);
        let a64 = "a".repeat(64);
        assert!(LabelSelector::parse(&a63).is_ok());
        assert!(LabelSelector::parse(&format!("x={a63}")).is_ok());
        assert!(LabelSelector::parse(&format!("{}/{a63}", "b".repeat(253))).is_ok());
        assert_eq!(
            label_err(&a64),
            format!(
                "unable to parse requirement: <nil>: Invalid value: \"{a64}\": name part must be no more than 63 characters"
            )
        );
        assert_eq!(
            label_err(&format!("x={a64}")),
            format!(
                "unable to parse requirement: values[0][x]: Invalid value: \"{a64}\": must be no more than 63 characters"
            )
        );
        let long = format!("{}-", "a".repeat(70));
        assert_eq!(
            label_err(&format!("x={long}")),
            format!(
                "unable to parse requirement: values[0][x]: Invalid value: \"{long}\": must be no more than 63 characters; {VALUE_REGEX_MSG}"
            )
        );
        let prefix = "a".repeat(254);
        assert_eq!(
            label_err(&format!("{prefix}/b")),
            format!(
                "unable to parse requirement: <nil>: Invalid value: \"{prefix}/b\": prefix part must be no more than 253 characters"
            )
        );
    }

    #[test]
    fn label_nul_bytes_end_tokens_like_go() {
        // Go's lexer treats a NUL byte like the end of input.
        assert_eq!(LabelSelector::parse("x=\u{0}").unwrap().to_string(), "x=");
        assert_eq!(LabelSelector::parse("x,\u{0}y").unwrap().to_string(), "x,y");
        assert!(LabelSelector::parse("\u{0}").unwrap().is_empty());
    }

    #[test]
    fn empty_label_selectors_match_everything() {
        for s in ["", " ", "\t\r\n", "\u{0}garbage"] {
            let sel = LabelSelector::parse(s).unwrap();
            assert!(sel.is_empty(), "{s:?}");
            assert!(sel.matches(&set(&[])));
            assert!(sel.matches(&set(&[("a", "b")])));
        }
        assert!(LabelSelector::default().matches(&set(&[("x", "y")])));
        assert!(!LabelSelector::parse("x").unwrap().is_empty());
    }

    // --- ported from fields/selector_test.go ------------------------------

    #[test]
    fn field_split_terms() {
        let cases: &[(&str, &[&str])] = &[
            ("a", &["a"]),
            ("a=avalue", &["a=avalue"]),
            ("a=avalue,b=bvalue", &["a=avalue", "b=bvalue"]),
            (
                "a=avalue,b==bvalue,c!=cvalue",
                &["a=avalue", "b==bvalue", "c!=cvalue"],
            ),
            ("", &[]),
            ("a=a,", &["a=a", ""]),
            (",a=a", &["", "a=a"]),
            (r"k=\,,k2=v2", &[r"k=\,", "k2=v2"]),
            (r"k=\\,k2=v2", &[r"k=\\", "k2=v2"]),
            (r"k=\\\,,k2=v2", &[r"k=\\\,", "k2=v2"]),
            (r"k=\a\b\", &[r"k=\a\b\"]),
            (r"k=\", &[r"k=\"]),
            ("함=수,목=록", &["함=수", "목=록"]),
        ];
        for (s, want) in cases {
            assert_eq!(split_terms(s), want.to_vec(), "{s:?}");
        }
    }

    #[test]
    fn field_split_term() {
        use FieldOperator::*;
        type Split<'a> = Option<(&'a str, FieldOperator, &'a str)>;
        let cases: &[(&str, Split)] = &[
            ("a=value", Some(("a", Equals, "value"))),
            ("b==value", Some(("b", Equals, "value"))),
            ("c!=value", Some(("c", NotEquals, "value"))),
            ("", None),
            ("a", None),
            (r"k=\,", Some(("k", Equals, r"\,"))),
            (r"k=\=", Some(("k", Equals, r"\="))),
            (r"k=\\\a\b\=\,\", Some(("k", Equals, r"\\\a\b\=\,\"))),
            ("함=수", Some(("함", Equals, "수"))),
            ("a!==b", Some(("a", NotEquals, "=b"))),
            ("a=!=b", Some(("a", Equals, "!=b"))),
        ];
        for (s, want) in cases {
            assert_eq!(split_term(s), *want, "{s:?}");
        }
    }

    #[test]
    fn field_escape_round_trip() {
        for (raw, escaped) in [
            ("", ""),
            ("a", "a"),
            ("=", r"\="),
            (",", r"\,"),
            ("\\", r"\\"),
            (r"\=\,\", r"\\\=\\\,\\"),
        ] {
            assert_eq!(escape_field_value(raw), escaped);
            assert_eq!(unescape_field_value(escaped).unwrap(), raw);
        }
        for bad in [r"\", r"\\\", r"\a"] {
            assert!(matches!(
                unescape_field_value(bad),
                Err(SelectorError::InvalidEscapeSequence(_))
            ));
        }
    }

    #[test]
    fn field_selector_parse_good_and_bad() {
        for s in ["x=a,y=b,z=c", "", "x!=a,y=b", r"x=a||y\=b", r"x=a\=\=b"] {
            let sel = FieldSelector::parse(s).unwrap_or_else(|e| panic!("{s:?}: {e}"));
            assert_eq!(sel.to_string(), s);
        }
        for s in [
            "x=a||y=b",
            "x==a==b",
            "x=a,b",
            "x in (a)",
            "x in (a,b,c)",
            "x",
        ] {
            assert!(FieldSelector::parse(s).is_err(), "{s:?} should fail");
        }
        let a = FieldSelector::parse("x=a,a=x").unwrap();
        let b = FieldSelector::parse("a=x,x=a").unwrap();
        assert_eq!(a.to_string(), b.to_string());
        assert_eq!(a.fields(), vec!["a", "x"]);
        assert_eq!(FieldSelector::parse("b==c").unwrap().to_string(), "b=c");
    }

    #[test]
    fn field_selector_error_messages() {
        for (s, want) in [
            ("x=a,b", "invalid selector: 'x=a,b'; can't understand 'b'"),
            (
                "x in (a)",
                "invalid selector: 'x in (a)'; can't understand 'x in (a)'",
            ),
            ("x", "invalid selector: 'x'; can't understand 'x'"),
            // Terms are sorted before being examined.
            (
                "z=1=2,a",
                "invalid selector: 'z=1=2,a'; can't understand 'a'",
            ),
            (
                "a=b=c",
                "invalid field selector: unescaped character in value: 61",
            ),
            (
                "x==a==b",
                "invalid field selector: unescaped character in value: 61",
            ),
            (
                "a!==b",
                "invalid field selector: unescaped character in value: 61",
            ),
            (
                r"k=\a",
                r"invalid field selector: invalid escape sequence: \a",
            ),
            (
                r"k=\\\a",
                r"invalid field selector: invalid escape sequence: \a",
            ),
            (
                r"k=\ ",
                r"invalid field selector: invalid escape sequence: \ ",
            ),
            (
                r"k=\",
                r"invalid field selector: invalid escape sequence: \",
            ),
        ] {
            assert_eq!(field_err(s), want, "{s:?}");
        }
    }

    #[test]
    fn field_selector_matches() {
        expect_field_match("", &[("x", "y")], true);
        expect_field_match("x=y", &[("x", "y")], true);
        expect_field_match("x=y,z=w", &[("x", "y"), ("z", "w")], true);
        expect_field_match("x!=y,z!=w", &[("x", "z"), ("z", "a")], true);
        expect_field_match("notin=in", &[("notin", "in")], true);
        expect_field_match("x=y", &[("x", "z")], false);
        expect_field_match("x=y,z=w", &[("x", "w"), ("z", "w")], false);
        expect_field_match("x!=y,z!=w", &[("x", "z"), ("z", "w")], false);
        let fs = [("foo", "bar"), ("baz", "blah"), ("complex", r"=value\,\")];
        expect_field_match("foo=bar", &fs, true);
        expect_field_match("baz=blah", &fs, true);
        expect_field_match("foo=bar,baz=blah", &fs, true);
        expect_field_match(r"foo=bar,baz=blah,complex=\=value\\\,\\", &fs, true);
        expect_field_match("foo=blah", &fs, false);
        expect_field_match("baz=bar", &fs, false);
        expect_field_match("foo=bar,foobar=bar,baz=blah", &fs, false);
        // A missing field reads as "".
        expect_field_match("missing=", &[], true);
        expect_field_match("missing!=x", &[], true);
        expect_field_match("missing=x", &[], false);
    }

    #[test]
    fn empty_field_selectors_match_everything() {
        for s in ["", ",", ",,,", "=", "!=", "==", "=,!="] {
            let sel = FieldSelector::parse(s).unwrap_or_else(|e| panic!("{s:?}: {e}"));
            assert!(sel.is_empty(), "{s:?}");
            assert!(sel.fields().is_empty());
            assert!(sel.matches(&|_| None));
            assert!(sel.matches(&|_| Some("x".into())));
        }
        assert!(FieldSelector::default().matches(&|_| None));
        // An empty field with a non-empty value is kept.
        assert_eq!(FieldSelector::parse("=x").unwrap().fields(), vec![""]);
    }

    // --- field label conversion ------------------------------------------

    #[test]
    fn unsupported_field_messages() {
        assert_eq!(
            unsupported_field_message("spec.foo"),
            "field label not supported: spec.foo"
        );
        let err = |g, v, k, f| convert_field_label(g, v, k, f).unwrap_err().to_string();
        assert_eq!(
            err("", "v1", "Pod", "spec.foo"),
            "field label not supported: spec.foo"
        );
        assert_eq!(
            err("", "v1", "Node", "metadata.namespace"),
            "field label not supported: metadata.namespace"
        );
        assert_eq!(
            err("", "v1", "ConfigMap", "data.x"),
            "\"data.x\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
        );
        assert_eq!(
            err("apps", "v1", "ReplicaSet", "status.replicas"),
            "\"status.replicas\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
        );
        assert_eq!(
            err("batch", "v1", "Job", "spec.x"),
            "field label \"spec.x\" not supported for Job"
        );
        assert_eq!(
            err("batch", "v1beta1", "CronJob", "spec.x"),
            "field label \"spec.x\" not supported for \"CronJob\""
        );
        assert_eq!(
            err("resource.k8s.io", "v1beta1", "ResourceSlice", "spec.pool"),
            "field label not supported for resource.k8s.io/v1beta1, Kind=ResourceSlice: spec.pool"
        );
        assert_eq!(
            err("apps", "v1beta2", "StatefulSet", "x"),
            "field label not supported for appsv1beta2.StatefulSet: x"
        );
        assert_eq!(
            err("events.k8s.io", "v1", "Event", "involvedObject.kind"),
            "field label not supported: involvedObject.kind"
        );
        assert_eq!(
            err("", "v1", "ConfigMap", "a\"b"),
            "\"a\\\"b\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
        );
    }

    #[test]
    fn supported_fields_convert() {
        for (g, v, k) in [
            ("", "v1", "Pod"),
            ("", "v1", "Node"),
            ("", "v1", "ReplicationController"),
            ("", "v1", "Event"),
            ("", "v1", "Namespace"),
            ("", "v1", "Secret"),
            ("", "v1", "Service"),
            ("", "v1", "ConfigMap"),
            ("apps", "v1", "Deployment"),
            ("events.k8s.io", "v1", "Event"),
            ("certificates.k8s.io", "v1", "CertificateSigningRequest"),
            ("certificates.k8s.io", "v1beta1", "ClusterTrustBundle"),
            ("batch", "v1", "Job"),
            ("resource.k8s.io", "v1beta2", "ResourceSlice"),
        ] {
            for f in supported_fields(g, k) {
                assert!(
                    convert_field_label(g, v, k, f).is_ok(),
                    "{g}/{v} {k} should accept {f}"
                );
            }
        }
        assert!(supported_fields("", "Pod").contains(&"status.podIPs"));
        assert_eq!(
            supported_fields("", "Namespace"),
            &["status.phase", "metadata.name"]
        );
        assert_eq!(
            supported_fields("", "ConfigMap"),
            &["metadata.name", "metadata.namespace"]
        );
        assert_eq!(
            convert_field_label("", "v1", "Pod", "spec.host").unwrap(),
            "spec.nodeName"
        );
        assert_eq!(
            convert_field_label("events.k8s.io", "v1", "Event", "regarding.kind").unwrap(),
            "involvedObject.kind"
        );
        assert_eq!(
            convert_field_label("events.k8s.io", "v1", "Event", "reportingController").unwrap(),
            "reportingComponent"
        );
    }

    #[test]
    fn field_selector_convert() {
        let sel = FieldSelector::parse("spec.host=n1,status.phase!=Running").unwrap();
        let conv = sel.convert("", "v1", "Pod").unwrap();
        assert_eq!(conv.to_string(), "spec.nodeName=n1,status.phase!=Running");
        let pod = |f: &str| match f {
            "spec.nodeName" => Some("n1".to_string()),
            "status.phase" => Some("Pending".to_string()),
            _ => None,
        };
        assert!(conv.matches(&pod));
        // The first unsupported field in (sorted) term order is reported.
        let sel = FieldSelector::parse("zz=1,metadata.name=a,aa=2").unwrap();
        assert_eq!(
            sel.convert("", "v1", "Pod").unwrap_err().to_string(),
            "field label not supported: aa"
        );
        assert_eq!(
            parse_list_selectors("x=", "a=b", "", "v1", "Secret")
                .unwrap_err()
                .to_string(),
            "field label not supported: a"
        );
        // labelSelector errors win over fieldSelector errors.
        let err = parse_list_selectors("(", "x", "", "v1", "Pod").unwrap_err();
        assert_eq!(
            list_options_error("labelSelector", &err),
            "found '(', expected: !, identifier, or 'end of string'"
        );
        let err = parse_list_selectors("", "x", "", "v1", "Pod").unwrap_err();
        assert_eq!(
            list_options_error("fieldSelector", &err),
            "invalid selector: 'x'; can't understand 'x'"
        );
        let (l, f) = parse_list_selectors("", "", "", "v1", "Pod").unwrap();
        assert!(l.is_empty() && f.is_empty());
    }

    #[test]
    fn go_quote_matches_strconv_quote() {
        for (s, want) in [
            ("", "\"\""),
            ("a\"b\\c", "\"a\\\"b\\\\c\""),
            (
                "\u{0}\u{7}\u{8}\u{c}\n\r\t\u{b}\u{1f}\u{7f}",
                "\"\\x00\\a\\b\\f\\n\\r\\t\\v\\x1f\\x7f\"",
            ),
            ("é\u{a0}\u{ad}\u{a1}", "\"é\\u00a0\\u00ad¡\""),
            (
                "\u{2028}\u{200b}\u{feff}\u{e000}😀",
                "\"\\u2028\\u200b\\ufeff\\ue000😀\"",
            ),
            (
                "\u{378}\u{e0001}\u{10ffff}",
                "\"\\u0378\\U000e0001\\U0010ffff\"",
            ),
        ] {
            assert_eq!(go_quote(s), want, "{s:?}");
        }
    }

    #[test]
    fn no_panics_on_arbitrary_input() {
        let alphabet = [
            "a", "b", "x", "1", "-", "_", ".", "/", "=", "!", "(", ")", ",", " ", "\t", ">", "<",
            "in", "notin", "\\", "é", "\u{0}", "\"", "==", "!=", "\n", "😀",
        ];
        let mut state: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let labels = set(&[("a", "1"), ("x", "b"), ("in", "")]);
        for _ in 0..20_000 {
            let len = (next() % 12) as usize;
            let s: String = (0..len)
                .map(|_| alphabet[(next() % alphabet.len() as u64) as usize])
                .collect();
            if let Ok(sel) = LabelSelector::parse(&s) {
                let _ = sel.matches(&labels);
                let again = LabelSelector::parse(&sel.to_string());
                assert!(again.is_ok(), "{s:?} restring {sel} did not reparse");
            }
            if let Ok(sel) = FieldSelector::parse(&s) {
                let _ = sel.matches(&|_| None);
                assert_eq!(
                    FieldSelector::parse(&sel.to_string()).unwrap(),
                    sel,
                    "{s:?}"
                );
                let _ = sel.convert("", "v1", "Pod");
            }
        }
    }
}
