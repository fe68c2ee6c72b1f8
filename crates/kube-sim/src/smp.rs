//! Strategic merge patch (`application/strategic-merge-patch+json`), applied the way
//! kube-apiserver applies it.
//!
//! This module owns the *apply* half of `k8s.io/apimachinery/pkg/util/strategicpatch`
//! (`StrategicMergeMapPatch` with `MergeParallelList` and `IgnoreUnmatchedNulls`, as the
//! apiserver's PATCH handler calls it): original + patch → result. It does not create patches,
//! decode into typed objects, default or validate; callers do that afterwards.
//!
//! Patch metadata (list merge strategy and merge key) comes from the shared [`Schema`]: a list
//! node with `patch.merge` merges (by `merge_key` for objects, as a set for scalars), every other
//! list is replaced whole. Where the schema has no node (or an `Untyped` one) the subtree has no
//! metadata, which is what the apiserver does for `map[string]T` fields: maps merge recursively,
//! lists are replaced, and map-level directives still work. With no directives in the patch that
//! is exactly JSON merge patch (RFC 7386).
//!
//! Behaviour follows upstream closely, including its quirks:
//! - `$patch: merge` on a map is an error ("unknown patch type"), as is any `$patch` value other
//!   than `replace`/`delete`; inside a merging list `merge` gives "merging lists cannot yet be
//!   specified in the patch".
//! - `$retainKeys` is honoured on any map, whatever the schema says (upstream never consults
//!   the `retainKeys` strategy when applying).
//! - `$deleteFromPrimitiveList/<f>` deletes from list `f` whatever its strategy.
//! - New items appended to a merging list without `$setElementOrder` go *first*
//!   (upstream's `mergeSortedSlice` places patch items not found on the server before the
//!   server's items).
//! - `$patch: delete` in a merging list deletes every item with that key.
//! - Values taken from the patch for fields absent in the original lose their null members and
//!   any map carrying `$patch` (upstream `removeDirectives`); values copied verbatim elsewhere
//!   (new merging-list items, replaced lists, `$patch: replace` bodies) lose directive keys and
//!   null members, which is what the apiserver's decode into the typed object does to them.
//!   Either way no directive is ever returned.
//! - Ordering under `$setElementOrder` reproduces upstream, including the effect of Go slice
//!   aliasing after `$patch: delete` items (deleted slots are reused by appended items in the
//!   server-side order list).
//!
//! Pure: no I/O, no globals, no panics on any JSON input.

use std::collections::VecDeque;

use serde_json::{Map, Value};

use super::schema::{NodeId, Schema, Shape};

type JsonMap = Map<String, Value>;

const DIRECTIVE_MARKER: &str = "$patch";
const DELETE_DIRECTIVE: &str = "delete";
const REPLACE_DIRECTIVE: &str = "replace";
const MERGE_DIRECTIVE: &str = "merge";
const RETAIN_KEYS_DIRECTIVE: &str = "$retainKeys";
const DELETE_FROM_PRIMITIVE_LIST_PREFIX: &str = "$deleteFromPrimitiveList";
const SET_ELEMENT_ORDER_PREFIX: &str = "$setElementOrder";

/// Go's name for a JSON list as the apiserver holds it.
const GO_SLICE: &str = "[]interface {}";
/// Go's name for a JSON object as the apiserver holds it.
const GO_MAP: &str = "map[string]interface {}";

/// Deepest nesting of the original or the patch that [`apply`] accepts.
pub const MAX_DEPTH: usize = 256;

/// Why a strategic merge patch could not be applied.
///
/// Messages are upstream's (`mergepatch` errors and `strategicpatch` `fmt.Errorf`s), with Go's
/// `%v` rendering of the offending values. [`SmpError::http_status`] gives the status
/// kube-apiserver answers with: its `interpretStrategicMergePatchError` turns the `mergepatch`
/// sentinel errors into 400/422 and passes every other error through, which the response writer
/// turns into a 500 `Status` with reason `Unknown` (kubectl: "Error from server: <message>").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SmpError {
    /// The patch body is not a JSON object; the apiserver's decode into a map fails.
    /// HTTP 400 (BadRequest).
    #[error("json: cannot unmarshal {found} into Go value of type map[string]interface {{}}")]
    PatchNotAnObject {
        /// JSON kind found instead ("array", "string", "number", "bool").
        found: &'static str,
    },
    /// `mergepatch.ErrBadJSONDoc`: the original is not a JSON object. HTTP 400.
    #[error("invalid JSON document")]
    BadJsonDoc,
    /// `mergepatch.ErrBadPatchFormatForPrimitiveList`: a `$deleteFromPrimitiveList` key is not
    /// `$deleteFromPrimitiveList/<field>`. HTTP 400.
    #[error("invalid patch format of primitive list")]
    BadPatchFormatForPrimitiveList,
    /// `mergepatch.ErrBadPatchFormatForRetainKeys`: `$retainKeys` is not a list, or the patch
    /// sets a key it does not list. HTTP 400.
    #[error("invalid patch format of retainKeys")]
    BadPatchFormatForRetainKeys,
    /// `mergepatch.ErrBadPatchFormatForSetElementOrderList`: a `$setElementOrder` key is not
    /// `$setElementOrder/<field>`. HTTP 400.
    #[error("invalid patch format of setElementOrder list")]
    BadPatchFormatForSetElementOrderList,
    /// `mergepatch.ErrNoListOfLists`: a merged list holds lists. HTTP 422.
    #[error("lists of lists are not supported")]
    NoListOfLists,
    /// Input exceeds [`MAX_DEPTH`] levels of nesting. HTTP 400 (the apiserver's JSON decoder
    /// rejects over-deep documents as a bad request, though only past 10000 levels).
    #[error("exceeded max depth")]
    TooDeep,
    /// `mergepatch.ErrNoMergeKey`: an item of a list merged by key lacks the key. HTTP 500.
    #[error("map: {map} does not contain declared merge key: {key}")]
    NoMergeKey {
        /// The item, rendered like Go's `%v`.
        map: String,
        /// The declared merge key.
        key: String,
    },
    /// `mergepatch.ErrBadArgType`: a value has the wrong JSON kind (e.g. a `$setElementOrder`
    /// that is not a list, a scalar in a list merged by key). HTTP 500.
    #[error("expected a {expected}, but received a {actual}")]
    BadArgType {
        /// Go type expected.
        expected: &'static str,
        /// Go type found.
        actual: &'static str,
    },
    /// `mergepatch.ErrBadPatchType`: `$patch` has a value other than `replace`/`delete`
    /// (on a map, `merge` too). HTTP 500.
    #[error("unknown patch type: {directive} in map: {map}")]
    BadPatchType {
        /// The `$patch` value, rendered like Go's `%s`.
        directive: String,
        /// The map holding it, rendered like Go's `%v`.
        map: String,
    },
    /// `$patch: merge` on an item of a merging list. HTTP 500.
    #[error("merging lists cannot yet be specified in the patch")]
    MergeListDirective,
    /// A list of objects is merged (`$deleteFromPrimitiveList` on it, or a schema with
    /// `patch.merge` but no merge key). HTTP 500.
    #[error("cannot merge lists without merge key for {0}")]
    NoMergeKeyForType(&'static str),
    /// A merged list mixes element kinds. HTTP 500.
    #[error("list element types are not identical: {0}")]
    ElementTypesNotIdentical(String),
    /// `$setElementOrder` names a list that is empty in both original and patch. HTTP 500.
    #[error("no elements in any of the given slices")]
    NoElements,
    /// The patch list's items are not a subsequence of its `$setElementOrder` list. HTTP 500.
    #[error(
        "the order in patch list:\n{patch_list}\n doesn't match $setElementOrder list:\n{order_list}"
    )]
    SetElementOrderMismatch {
        /// The patch list, rendered like Go's `%v`.
        patch_list: String,
        /// The `$setElementOrder` list, rendered like Go's `%v`.
        order_list: String,
    },
    /// An item searched by merge key is not a map. HTTP 500.
    #[error("value for key {0} is not a map")]
    NotAMap(usize),
    /// Input on which upstream panics (e.g. comparing maps used as merge-key values); the
    /// apiserver recovers and answers HTTP 500.
    #[error("{0}")]
    Internal(&'static str),
}

impl SmpError {
    /// The HTTP status kube-apiserver answers a PATCH with when applying fails this way.
    pub fn http_status(&self) -> u16 {
        match self {
            SmpError::PatchNotAnObject { .. }
            | SmpError::BadJsonDoc
            | SmpError::BadPatchFormatForPrimitiveList
            | SmpError::BadPatchFormatForRetainKeys
            | SmpError::BadPatchFormatForSetElementOrderList
            | SmpError::TooDeep => 400,
            SmpError::NoListOfLists => 422,
            _ => 500,
        }
    }
}

/// Applies a strategic merge patch `patch` to `original` (both full objects) and returns the
/// result.
///
/// `node` is the schema node of the object's root (`None` = no type information: JSON merge
/// patch, RFC 7386, plus map-level directives). It must come from `schema` (ids from another
/// schema make [`Schema::node`] panic). A `null` patch leaves the original unchanged, as the
/// apiserver does; a `null` original counts as `{}`.
pub fn apply(
    schema: &Schema,
    node: Option<NodeId>,
    original: &Value,
    patch: &Value,
) -> Result<Value, SmpError> {
    if depth_exceeds(original, MAX_DEPTH) || depth_exceeds(patch, MAX_DEPTH) {
        return Err(SmpError::TooDeep);
    }
    let original = match original {
        Value::Object(m) => m.clone(),
        Value::Null => JsonMap::new(),
        _ => return Err(SmpError::BadJsonDoc),
    };
    let patch = match patch {
        Value::Object(m) => m.clone(),
        Value::Null => return Ok(Value::Object(original)),
        other => {
            return Err(SmpError::PatchNotAnObject {
                found: json_kind(other),
            });
        }
    };
    let patcher = Patcher { schema };
    patcher.merge_map(original, patch, node).map(Value::Object)
}

/// Patch metadata of a list field.
struct ListMeta {
    /// `patchStrategy: merge`.
    merge: bool,
    /// `patchMergeKey`, empty when none.
    merge_key: String,
    /// Schema node of the items.
    items: Option<NodeId>,
}

/// Go's dynamic types of decoded JSON, which upstream compares with `reflect.TypeOf`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GoType {
    Nil,
    Bool,
    Int,
    Float,
    String,
    Slice,
    Map,
}

struct Patcher<'a> {
    schema: &'a Schema,
}

impl Patcher<'_> {
    /// The schema node of field `key` of object node `node`.
    fn child(&self, node: Option<NodeId>, key: &str) -> Option<NodeId> {
        node.and_then(|id| self.schema.field(id, key))
    }

    /// Patch metadata of the list whose schema node is `list`.
    fn list_meta(&self, list: Option<NodeId>) -> ListMeta {
        match list {
            Some(id) => {
                let node = self.schema.node(id);
                ListMeta {
                    merge: node.patch.merge,
                    merge_key: node.patch.merge_key.clone().unwrap_or_default(),
                    items: self.schema.items(id),
                }
            }
            None => ListMeta {
                merge: false,
                merge_key: String::new(),
                items: None,
            },
        }
    }

    /// Upstream's `LookupPatchMeta.Name()` for list items: the Go kind of the item type.
    fn item_kind_name(&self, items: Option<NodeId>) -> &'static str {
        match items.map(|id| &self.schema.node(id).shape) {
            Some(Shape::Object { fields, .. }) if !fields.is_empty() => "struct",
            Some(Shape::Object { .. }) => "map",
            _ => "interface",
        }
    }

    /// `mergeMap`: merges `patch` into `original`.
    fn merge_map(
        &self,
        mut original: JsonMap,
        mut patch: JsonMap,
        node: Option<NodeId>,
    ) -> Result<JsonMap, SmpError> {
        if let Some(directive) = patch.get(DIRECTIVE_MARKER).cloned() {
            return handle_directive_in_merge_map(&directive, patch);
        }
        apply_retain_keys_directive(&mut original, &mut patch)?;
        self.merge_patch_into_original(&mut original, &mut patch, node)?;

        for (key, patch_v) in patch {
            let (key, is_delete_list) = if key.starts_with(DELETE_FROM_PRIMITIVE_LIST_PREFIX) {
                let field = extract_key(&key, DELETE_FROM_PRIMITIVE_LIST_PREFIX)?;
                (if field.is_empty() { key } else { field }, true)
            } else {
                (key, false)
            };

            if patch_v.is_null() {
                original.shift_remove(&key);
                continue;
            }
            let Some(orig_v) = original.get_mut(&key) else {
                if !is_delete_list && let Some(v) = prune(patch_v) {
                    original.insert(key, v);
                }
                continue;
            };
            if go_type(orig_v) != go_type(&patch_v) {
                if !is_delete_list {
                    match prune(patch_v) {
                        Some(v) => *orig_v = v,
                        None => {
                            original.shift_remove(&key);
                        }
                    }
                }
                continue;
            }
            match patch_v {
                Value::Object(p) => {
                    let o = take_map(orig_v);
                    let child = self.child(node, &key);
                    *orig_v = Value::Object(self.merge_map(o, p, child)?);
                }
                Value::Array(p) => {
                    let o = take_vec(orig_v);
                    let meta = self.list_meta(self.child(node, &key));
                    let (merged, _) = self.merge_slice_handler(o, p, &meta, is_delete_list)?;
                    *orig_v = Value::Array(merged);
                }
                scalar => *orig_v = scalar,
            }
        }
        Ok(original)
    }

    /// `mergePatchIntoOriginal`: handles every `$setElementOrder/<f>` of `patch` together with
    /// list `f`, removing both from `patch`.
    fn merge_patch_into_original(
        &self,
        original: &mut JsonMap,
        patch: &mut JsonMap,
        node: Option<NodeId>,
    ) -> Result<(), SmpError> {
        let keys: Vec<String> = patch
            .keys()
            .filter(|k| k.starts_with(SET_ELEMENT_ORDER_PREFIX))
            .cloned()
            .collect();
        for key in keys {
            let Some(order_v) = patch.shift_remove(&key) else {
                continue;
            };
            let set_order = match order_v {
                Value::Array(a) => a,
                other => return Err(bad_arg_type(GO_SLICE, &other)),
            };
            let field = extract_key(&key, SET_ELEMENT_ORDER_PREFIX)?;
            let original_list = list_field(original, &field)?;
            let patch_list = list_field(patch, &field)?;
            let meta = self.list_meta(self.child(node, &field));
            let key_name = meta.merge_key.as_str();
            validate_patch_with_set_order_list(
                patch_list.as_deref().unwrap_or_default(),
                &set_order,
                key_name,
            )?;

            let (merged, server_order) = match (original_list, patch_list.clone()) {
                (Some(o), None) => (o.clone(), o),
                (None, Some(p)) => (p.into_iter().filter_map(prune).collect(), Vec::new()),
                (Some(o), Some(p)) => self.merge_slice_handler(o, p, &meta, false)?,
                (None, None) => continue,
            };
            let (patch_items, server_only) = partition(&merged, &set_order, key_name)?;
            let kind = slice_element_type(&[
                server_order.as_slice(),
                patch_list.as_deref().unwrap_or_default(),
            ])?;
            let both = normalize_element_order(
                patch_items,
                server_only,
                &set_order,
                &server_order,
                key_name,
                kind,
            )?;
            original.insert(field.clone(), Value::Array(both));
            patch.shift_remove(&field);
        }
        Ok(())
    }

    /// `mergeSliceHandler`. Returns the merged list and the server-side order list upstream
    /// goes on to use for `$setElementOrder` (see [`Patcher::merge_slice`]).
    fn merge_slice_handler(
        &self,
        original: Vec<Value>,
        patch: Vec<Value>,
        meta: &ListMeta,
        is_delete_list: bool,
    ) -> Result<(Vec<Value>, Vec<Value>), SmpError> {
        if meta.merge || is_delete_list {
            self.merge_slice(original, patch, meta, is_delete_list)
        } else {
            Ok((patch.into_iter().map(strip).collect(), original))
        }
    }

    /// `mergeSlice`: merges two lists of a merging field.
    ///
    /// The second value returned is what upstream's caller sees in its own copy of the original
    /// list afterwards: Go deletes items in place and appends into the freed slots, so after
    /// `$patch: delete` items the original's backing array holds the remaining items followed by
    /// newly appended ones. `$setElementOrder` orders server-only items by that array.
    fn merge_slice(
        &self,
        original: Vec<Value>,
        patch: Vec<Value>,
        meta: &ListMeta,
        is_delete_list: bool,
    ) -> Result<(Vec<Value>, Vec<Value>), SmpError> {
        if original.is_empty() && patch.is_empty() {
            return Ok((original, Vec::new()));
        }
        let kind = slice_element_type(&[original.as_slice(), patch.as_slice()])?;
        let key = meta.merge_key.as_str();

        if kind != GoType::Map {
            if is_delete_list {
                let kept = original
                    .iter()
                    .filter(|v| !patch.contains(v))
                    .cloned()
                    .collect();
                return Ok((kept, original));
            }
            let mut merged: Vec<Value> = Vec::with_capacity(original.len() + patch.len());
            for v in original.iter().chain(patch.iter()) {
                if !merged.contains(v) {
                    merged.push(v.clone());
                }
            }
            let (patch_items, server_only) = partition(&merged, &patch, key)?;
            let out =
                normalize_element_order(patch_items, server_only, &patch, &original, key, kind)?;
            return Ok((out, original));
        }

        if key.is_empty() {
            return Err(SmpError::NoMergeKeyForType(self.item_kind_name(meta.items)));
        }

        // mergeSliceWithSpecialElements
        let orig_len = original.len();
        let mut backing = original;
        let mut live = orig_len;
        let mut replace = false;
        let mut plain: Vec<JsonMap> = Vec::new();
        for item in patch {
            let Value::Object(m) = item else {
                return Err(SmpError::Internal("interface conversion: not a map"));
            };
            match m.get(DIRECTIVE_MARKER) {
                None => plain.push(m),
                Some(directive) => match directive.as_str() {
                    Some(DELETE_DIRECTIVE) => {
                        let Some(value) = m.get(key) else {
                            return Err(no_merge_key(&m, key));
                        };
                        delete_matching_entries(&mut backing, &mut live, key, value)?;
                    }
                    Some(REPLACE_DIRECTIVE) => replace = true,
                    Some(MERGE_DIRECTIVE) => return Err(SmpError::MergeListDirective),
                    _ => {
                        return Err(SmpError::BadPatchType {
                            directive: go_s(directive),
                            map: go_v_map(&m),
                        });
                    }
                },
            }
        }

        let (server_order, merged, patch_order) = if replace {
            let items: Vec<Value> = plain.into_iter().map(|m| strip(Value::Object(m))).collect();
            (items.clone(), items, Vec::new())
        } else {
            // mergeSliceWithoutSpecialElements
            let post_deletion: Vec<Value> = backing.iter().take(live).cloned().collect();
            let mut working = post_deletion.clone();
            for m in &plain {
                let Some(value) = m.get(key) else {
                    return Err(no_merge_key(m, key));
                };
                match find_map_in_slice(&working, key, value)? {
                    Some(idx) => {
                        if let Some(slot) = working.get_mut(idx) {
                            let o = take_map(slot);
                            *slot = Value::Object(self.merge_map(o, m.clone(), meta.items)?);
                        }
                    }
                    None => {
                        let item = strip(Value::Object(m.clone()));
                        if live < orig_len {
                            if let Some(slot) = backing.get_mut(live) {
                                *slot = item.clone();
                            }
                            live += 1;
                        }
                        working.push(item);
                    }
                }
            }
            (
                post_deletion,
                working,
                plain.into_iter().map(Value::Object).collect(),
            )
        };

        let (patch_items, server_only) = partition_maps(&merged, &patch_order, key)?;
        let out = normalize_element_order(
            patch_items,
            server_only,
            &patch_order,
            &server_order,
            key,
            kind,
        )?;
        Ok((out, backing))
    }
}

/// `handleDirectiveInMergeMap`: a map whose patch carries `$patch`.
fn handle_directive_in_merge_map(
    directive: &Value,
    mut patch: JsonMap,
) -> Result<JsonMap, SmpError> {
    match directive.as_str() {
        Some(REPLACE_DIRECTIVE) => {
            patch.shift_remove(DIRECTIVE_MARKER);
            Ok(strip_map(patch))
        }
        Some(DELETE_DIRECTIVE) => Ok(JsonMap::new()),
        _ => Err(SmpError::BadPatchType {
            directive: go_s(directive),
            map: go_v_map(&patch),
        }),
    }
}

/// `applyRetainKeysDirective`: clears the keys of `original` that `$retainKeys` does not list.
fn apply_retain_keys_directive(
    original: &mut JsonMap,
    patch: &mut JsonMap,
) -> Result<(), SmpError> {
    let Some(retain) = patch.shift_remove(RETAIN_KEYS_DIRECTIVE) else {
        return Ok(());
    };
    let Value::Array(list) = retain else {
        return Err(SmpError::BadPatchFormatForRetainKeys);
    };
    if let Some(bad) = list.iter().find(|v| v.is_object() || v.is_array()) {
        return Err(unhashable(bad));
    }
    let listed = |k: &str| list.iter().any(|v| v.as_str() == Some(k));
    for (k, v) in patch.iter() {
        if v.is_null()
            || k.starts_with(DELETE_FROM_PRIMITIVE_LIST_PREFIX)
            || k.starts_with(SET_ELEMENT_ORDER_PREFIX)
        {
            continue;
        }
        if !listed(k) {
            return Err(SmpError::BadPatchFormatForRetainKeys);
        }
    }
    original.retain(|k, _| listed(k));
    Ok(())
}

/// `validatePatchWithSetOrderList`: the patch list's non-deleting items must appear in the
/// `$setElementOrder` list, in the same relative order.
fn validate_patch_with_set_order_list(
    patch_list: &[Value],
    set_order: &[Value],
    merge_key: &str,
) -> Result<(), SmpError> {
    if set_order.is_empty() || patch_list.is_empty() {
        return Ok(());
    }
    let non_delete: Vec<&Value> = if merge_key.is_empty() {
        patch_list.iter().collect()
    } else {
        let mut kept = Vec::new();
        for item in patch_list {
            let Value::Object(m) = item else {
                return Err(bad_arg_type(GO_MAP, item));
            };
            if m.get(DIRECTIVE_MARKER).and_then(Value::as_str) != Some(DELETE_DIRECTIVE) {
                kept.push(item);
            }
        }
        kept
    };
    let (mut pi, mut si) = (0, 0);
    while let (Some(item), Some(order_item)) = (non_delete.get(pi), set_order.get(si)) {
        if item
            .as_object()
            .is_some_and(|m| m.contains_key(DIRECTIVE_MARKER))
        {
            pi += 1;
            continue;
        }
        if merge_key_value_equal(item, order_item, merge_key)? {
            pi += 1;
        }
        si += 1;
    }
    if pi < non_delete.len() && si >= set_order.len() {
        return Err(SmpError::SetElementOrderMismatch {
            patch_list: go_v_list(patch_list),
            order_list: go_v_list(set_order),
        });
    }
    Ok(())
}

/// `mergeKeyValueEqual`.
fn merge_key_value_equal(left: &Value, right: &Value, merge_key: &str) -> Result<bool, SmpError> {
    if merge_key.is_empty() {
        return go_eq(left, right);
    }
    let Value::Object(l) = left else {
        return Err(bad_arg_type(GO_MAP, left));
    };
    let Value::Object(r) = right else {
        return Err(bad_arg_type(GO_MAP, right));
    };
    let Some(lv) = l.get(merge_key) else {
        return Err(no_merge_key(l, merge_key));
    };
    let Some(rv) = r.get(merge_key) else {
        return Err(no_merge_key(r, merge_key));
    };
    go_eq(lv, rv)
}

/// `deleteMatchingEntries` on the first `live` slots of `backing`, shifting in place like Go's
/// `append(s[:i], s[i+1:]...)` (the vacated last slot keeps its old value).
fn delete_matching_entries(
    backing: &mut [Value],
    live: &mut usize,
    key: &str,
    value: &Value,
) -> Result<(), SmpError> {
    loop {
        let view = backing.get(..*live).unwrap_or_default();
        let Some(idx) = find_map_in_slice(view, key, value)? else {
            return Ok(());
        };
        let last = *live - 1;
        if idx < last
            && let Some(window) = backing.get_mut(idx..*live)
        {
            window.rotate_left(1);
            let prev = window.get(window.len() - 2).cloned();
            if let (Some(prev), Some(slot)) = (prev, window.last_mut()) {
                *slot = prev;
            }
        }
        *live = last;
    }
}

/// `findMapInSliceBasedOnKeyValue`: index of the first map whose `key` equals `value`.
fn find_map_in_slice(list: &[Value], key: &str, value: &Value) -> Result<Option<usize>, SmpError> {
    for (i, item) in list.iter().enumerate() {
        let Value::Object(m) = item else {
            return Err(SmpError::NotAMap(i));
        };
        if let Some(candidate) = m.get(key)
            && go_eq(candidate, value)?
        {
            return Ok(Some(i));
        }
    }
    Ok(None)
}

/// Splits `merged` into items present in `by` and the rest (by merge key when one is set).
fn partition(
    merged: &[Value],
    by: &[Value],
    merge_key: &str,
) -> Result<(Vec<Value>, Vec<Value>), SmpError> {
    if merge_key.is_empty() {
        partition_primitives(merged, by)
    } else {
        partition_maps(merged, by, merge_key)
    }
}

/// `partitionPrimitivesByPresentInList` (a Go map lookup: maps and lists cannot be keys).
fn partition_primitives(
    merged: &[Value],
    by: &[Value],
) -> Result<(Vec<Value>, Vec<Value>), SmpError> {
    if let Some(bad) = by
        .iter()
        .chain(merged.iter())
        .find(|v| v.is_object() || v.is_array())
    {
        return Err(unhashable(bad));
    }
    let (inside, outside) = merged.iter().cloned().partition(|v| by.contains(v));
    Ok((inside, outside))
}

/// `partitionMapsByPresentInList`.
fn partition_maps(
    merged: &[Value],
    by: &[Value],
    merge_key: &str,
) -> Result<(Vec<Value>, Vec<Value>), SmpError> {
    let mut inside = Vec::new();
    let mut outside = Vec::new();
    for item in merged {
        let Value::Object(m) = item else {
            return Err(bad_arg_type(GO_MAP, item));
        };
        let Some(value) = m.get(merge_key) else {
            return Err(no_merge_key(m, merge_key));
        };
        if find_map_in_slice(by, merge_key, value)?.is_some() {
            inside.push(item.clone());
        } else {
            outside.push(item.clone());
        }
    }
    Ok((inside, outside))
}

/// `normalizeElementOrder`: patch items in `patch_order`, server-only items in `server_order`,
/// then interleaved.
fn normalize_element_order(
    patch_items: Vec<Value>,
    server_only: Vec<Value>,
    patch_order: &[Value],
    server_order: &[Value],
    merge_key: &str,
    kind: GoType,
) -> Result<Vec<Value>, SmpError> {
    let patch_items = normalize_slice_order(patch_items, patch_order, merge_key, kind)?;
    let server_only = normalize_slice_order(server_only, server_order, merge_key, kind)?;
    merge_sorted_slice(server_only, patch_items, server_order, merge_key, kind)
}

/// `normalizeSliceOrder`: stable-sorts `to_sort` by position in `order` (with upstream's
/// comparator and Go's stable sort, so even items missing from `order` land where they do
/// upstream); `$patch: delete` items go last.
fn normalize_slice_order(
    to_sort: Vec<Value>,
    order: &[Value],
    merge_key: &str,
    kind: GoType,
) -> Result<Vec<Value>, SmpError> {
    let (to_sort, to_delete) = if kind == GoType::Map {
        for item in to_sort.iter().chain(order.iter()) {
            let Value::Object(m) = item else {
                return Err(bad_arg_type(GO_MAP, item));
            };
            if !m.contains_key(merge_key) {
                return Err(no_merge_key(m, merge_key));
            }
        }
        to_sort.into_iter().partition(|item| {
            item.get(DIRECTIVE_MARKER).and_then(Value::as_str) != Some(DELETE_DIRECTIVE)
        })
    } else {
        (to_sort, Vec::new())
    };
    let mut keyed = Vec::with_capacity(to_sort.len());
    for item in to_sort {
        keyed.push((index_of(order, &item, merge_key, kind)?, item));
    }
    go_stable_sort(
        &mut keyed,
        &|a: &(Option<usize>, Value), b| match (a.0, b.0) {
            (Some(x), Some(y)) => x < y,
            _ => true,
        },
    );
    Ok(keyed.into_iter().map(|(_, v)| v).chain(to_delete).collect())
}

/// `mergeSortedSlice`: interleaves server-only items (`left`) into patch items (`right`),
/// keeping both relative orders; a left item goes first only when both are on the server and
/// it comes earlier there.
fn merge_sorted_slice(
    left: Vec<Value>,
    right: Vec<Value>,
    server_order: &[Value],
    merge_key: &str,
    kind: GoType,
) -> Result<Vec<Value>, SmpError> {
    let mut l = VecDeque::with_capacity(left.len());
    for item in left {
        l.push_back((index_of(server_order, &item, merge_key, kind)?, item));
    }
    let mut r = VecDeque::with_capacity(right.len());
    for item in right {
        r.push_back((index_of(server_order, &item, merge_key, kind)?, item));
    }
    let mut out = Vec::with_capacity(l.len() + r.len());
    loop {
        let take_left = match (l.front(), r.front()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some((li, _)), Some((ri, _))) => matches!((li, ri), (Some(a), Some(b)) if a < b),
        };
        let next = if take_left {
            l.pop_front()
        } else {
            r.pop_front()
        };
        if let Some((_, v)) = next {
            out.push(v);
        }
    }
    Ok(out)
}

/// `index`: position of `item` in `list` (by merge-key value for maps), `None` if absent.
fn index_of(
    list: &[Value],
    item: &Value,
    merge_key: &str,
    kind: GoType,
) -> Result<Option<usize>, SmpError> {
    if kind == GoType::Map {
        let probe = map_key_value(item, merge_key);
        for (i, v) in list.iter().enumerate() {
            let candidate = map_key_value(v, merge_key);
            let equal = match (probe, candidate) {
                (None, None) => true,
                (Some(a), Some(b)) => go_eq(a, b)?,
                _ => false,
            };
            if equal {
                return Ok(Some(i));
            }
        }
    } else {
        for (i, v) in list.iter().enumerate() {
            if go_eq(item, v)? {
                return Ok(Some(i));
            }
        }
    }
    Ok(None)
}

/// The merge-key value of a list item as Go reads it (`nil` for non-maps, missing keys and
/// JSON null alike).
fn map_key_value<'v>(item: &'v Value, merge_key: &str) -> Option<&'v Value> {
    item.as_object()
        .and_then(|m| m.get(merge_key))
        .filter(|v| !v.is_null())
}

/// `sliceElementType`: the common Go type of the elements of `lists`.
fn slice_element_type(lists: &[&[Value]]) -> Result<GoType, SmpError> {
    let mut prev: Option<GoType> = None;
    for item in lists.iter().flat_map(|l| l.iter()) {
        let current = go_type(item);
        match prev {
            None => {
                match current {
                    GoType::Nil => {
                        return Err(SmpError::Internal(
                            "runtime error: invalid memory address or nil pointer dereference",
                        ));
                    }
                    GoType::Slice => return Err(SmpError::NoListOfLists),
                    _ => {}
                }
                prev = Some(current);
            }
            Some(p) if p != current => {
                let rendered: Vec<String> = lists.iter().map(|l| go_v_list(l)).collect();
                return Err(SmpError::ElementTypesNotIdentical(format!(
                    "[{}]",
                    rendered.join(" ")
                )));
            }
            Some(_) => {}
        }
    }
    prev.ok_or(SmpError::NoElements)
}

/// `extractKey`: `<prefix>/<field>` → `<field>`.
fn extract_key(s: &str, prefix: &str) -> Result<String, SmpError> {
    match s.split_once('/') {
        Some((head, field)) if head == prefix => Ok(field.to_owned()),
        _ if prefix == DELETE_FROM_PRIMITIVE_LIST_PREFIX => {
            Err(SmpError::BadPatchFormatForPrimitiveList)
        }
        _ => Err(SmpError::BadPatchFormatForSetElementOrderList),
    }
}

/// The list at `key` of `map`, if present; an error if present but not a list.
fn list_field(map: &JsonMap, key: &str) -> Result<Option<Vec<Value>>, SmpError> {
    match map.get(key) {
        None => Ok(None),
        Some(Value::Array(a)) => Ok(Some(a.clone())),
        Some(other) => Err(bad_arg_type(GO_SLICE, other)),
    }
}

// ---------------------------------------------------------------------------------------------
// Sanitizing values taken from the patch.

/// Whether `key` is a patch directive rather than data.
fn is_directive_key(key: &str) -> bool {
    key == DIRECTIVE_MARKER
        || key == RETAIN_KEYS_DIRECTIVE
        || key.starts_with(SET_ELEMENT_ORDER_PREFIX)
        || key.starts_with(DELETE_FROM_PRIMITIVE_LIST_PREFIX)
}

/// Upstream's `discardNullValuesFromPatch` then `removeDirectives`, for patch values of fields
/// absent from the original: null members go, a map with `$patch` goes entirely (`None` at the
/// top), other directive keys go.
fn prune(value: Value) -> Option<Value> {
    match value {
        Value::Object(m) => {
            if m.get(DIRECTIVE_MARKER).is_some_and(|d| !d.is_null()) {
                return None;
            }
            let mut out = JsonMap::new();
            for (k, v) in m {
                if v.is_null() || is_directive_key(&k) {
                    continue;
                }
                if let Some(v) = prune(v) {
                    out.insert(k, v);
                }
            }
            Some(Value::Object(out))
        }
        Value::Array(a) => Some(Value::Array(a.into_iter().filter_map(prune).collect())),
        other => Some(other),
    }
}

/// What decoding into the typed object leaves of a value upstream copies verbatim: directive
/// keys and null members are dropped, everything else is kept.
fn strip(value: Value) -> Value {
    match value {
        Value::Object(m) => Value::Object(strip_map(m)),
        Value::Array(a) => Value::Array(a.into_iter().map(strip).collect()),
        other => other,
    }
}

/// [`strip`] for a map.
fn strip_map(m: JsonMap) -> JsonMap {
    m.into_iter()
        .filter(|(k, v)| !v.is_null() && !is_directive_key(k))
        .map(|(k, v)| (k, strip(v)))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Go semantics helpers.

fn go_type(v: &Value) -> GoType {
    match v {
        Value::Null => GoType::Nil,
        Value::Bool(_) => GoType::Bool,
        Value::Number(n) if n.is_i64() => GoType::Int,
        Value::Number(_) => GoType::Float,
        Value::String(_) => GoType::String,
        Value::Array(_) => GoType::Slice,
        Value::Object(_) => GoType::Map,
    }
}

/// `reflect.TypeOf(v)` printed with `%s`.
fn go_type_name(v: &Value) -> &'static str {
    match go_type(v) {
        GoType::Nil => "%!s(<nil>)",
        GoType::Bool => "bool",
        GoType::Int => "int64",
        GoType::Float => "float64",
        GoType::String => "string",
        GoType::Slice => GO_SLICE,
        GoType::Map => GO_MAP,
    }
}

/// Go `==` on two `interface{}` values: comparing two maps or two lists panics.
fn go_eq(a: &Value, b: &Value) -> Result<bool, SmpError> {
    match (a, b) {
        (Value::Object(_), Value::Object(_)) => Err(SmpError::Internal(
            "runtime error: comparing uncomparable type map[string]interface {}",
        )),
        (Value::Array(_), Value::Array(_)) => Err(SmpError::Internal(
            "runtime error: comparing uncomparable type []interface {}",
        )),
        _ => Ok(a == b),
    }
}

/// The panic of using a map or list as a Go map key.
fn unhashable(v: &Value) -> SmpError {
    if v.is_object() {
        SmpError::Internal("runtime error: hash of unhashable type map[string]interface {}")
    } else {
        SmpError::Internal("runtime error: hash of unhashable type []interface {}")
    }
}

fn bad_arg_type(expected: &'static str, actual: &Value) -> SmpError {
    SmpError::BadArgType {
        expected,
        actual: go_type_name(actual),
    }
}

fn no_merge_key(m: &JsonMap, key: &str) -> SmpError {
    SmpError::NoMergeKey {
        map: go_v_map(m),
        key: key.to_owned(),
    }
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Array(_) => "array",
        Value::String(_) => "string",
        Value::Number(_) => "number",
        Value::Bool(_) => "bool",
        Value::Null | Value::Object(_) => "object",
    }
}

fn take_map(v: &mut Value) -> JsonMap {
    match std::mem::take(v) {
        Value::Object(m) => m,
        _ => JsonMap::new(),
    }
}

fn take_vec(v: &mut Value) -> Vec<Value> {
    match std::mem::take(v) {
        Value::Array(a) => a,
        _ => Vec::new(),
    }
}

/// Whether `v` nests deeper than `limit` (iterative, so it cannot overflow the stack).
fn depth_exceeds(v: &Value, limit: usize) -> bool {
    let mut stack = vec![(v, 1usize)];
    while let Some((v, depth)) = stack.pop() {
        if depth > limit {
            return true;
        }
        match v {
            Value::Array(a) => stack.extend(a.iter().map(|c| (c, depth + 1))),
            Value::Object(m) => stack.extend(m.values().map(|c| (c, depth + 1))),
            _ => {}
        }
    }
    false
}

/// Go's `sort.SliceStable` (insertion sort on blocks of 20, then `symMerge`), reproduced so
/// that upstream's non-transitive comparator gives the same order here.
fn go_stable_sort<T>(data: &mut [T], less: &dyn Fn(&T, &T) -> bool) {
    let n = data.len();
    let mut block = 20;
    let (mut a, mut b) = (0, block);
    while b <= n {
        insertion_sort(data, a, b, less);
        a = b;
        b += block;
    }
    insertion_sort(data, a, n, less);
    while block < n {
        a = 0;
        b = 2 * block;
        while b <= n {
            sym_merge(data, a, a + block, b, less);
            a = b;
            b += 2 * block;
        }
        let m = a + block;
        if m < n {
            sym_merge(data, a, m, n, less);
        }
        block *= 2;
    }
}

fn insertion_sort<T>(data: &mut [T], a: usize, b: usize, less: &dyn Fn(&T, &T) -> bool) {
    for i in a + 1..b {
        let mut j = i;
        while j > a && less(&data[j], &data[j - 1]) {
            data.swap(j, j - 1);
            j -= 1;
        }
    }
}

/// Merges the sorted runs `data[a..m]` and `data[m..b]` (requires `a < m < b`).
fn sym_merge<T>(data: &mut [T], a: usize, m: usize, b: usize, less: &dyn Fn(&T, &T) -> bool) {
    if m - a == 1 {
        let (mut i, mut j) = (m, b);
        while i < j {
            let h = (i + j) / 2;
            if less(&data[h], &data[a]) {
                i = h + 1;
            } else {
                j = h;
            }
        }
        for k in a..i.saturating_sub(1) {
            data.swap(k, k + 1);
        }
        return;
    }
    if b - m == 1 {
        let (mut i, mut j) = (a, m);
        while i < j {
            let h = (i + j) / 2;
            if !less(&data[m], &data[h]) {
                i = h + 1;
            } else {
                j = h;
            }
        }
        let mut k = m;
        while k > i {
            data.swap(k, k - 1);
            k -= 1;
        }
        return;
    }
    let mid = (a + b) / 2;
    let n = mid + m;
    let (mut start, mut r) = if m > mid { (n - b, mid) } else { (a, m) };
    let p = n - 1;
    while start < r {
        let c = (start + r) / 2;
        if !less(&data[p - c], &data[c]) {
            start = c + 1;
        } else {
            r = c;
        }
    }
    let end = n - start;
    if start < m && m < end {
        rotate(data, start, m, end);
    }
    if a < start && start < mid {
        sym_merge(data, a, start, mid, less);
    }
    if mid < end && end < b {
        sym_merge(data, mid, end, b, less);
    }
}

/// Rotates `data[a..b]` so that `data[m]` comes first, with Go's block swaps.
fn rotate<T>(data: &mut [T], a: usize, m: usize, b: usize) {
    let mut i = m - a;
    let mut j = b - m;
    while i != j {
        if i > j {
            swap_range(data, m - i, m, j);
            i -= j;
        } else {
            swap_range(data, m - i, m + j - i, i);
            j -= i;
        }
    }
    swap_range(data, m - i, m, i);
}

fn swap_range<T>(data: &mut [T], a: usize, b: usize, n: usize) {
    for i in 0..n {
        data.swap(a + i, b + i);
    }
}

// ---------------------------------------------------------------------------------------------
// Go `fmt` rendering of decoded JSON, for error messages.

/// `%v`.
fn go_v(v: &Value) -> String {
    match v {
        Value::Null => "<nil>".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => go_number(n),
        Value::String(s) => s.clone(),
        Value::Array(a) => go_v_list(a),
        Value::Object(m) => go_v_map(m),
    }
}

fn go_v_list(a: &[Value]) -> String {
    let items: Vec<String> = a.iter().map(go_v).collect();
    format!("[{}]", items.join(" "))
}

fn go_v_map(m: &JsonMap) -> String {
    let mut entries: Vec<(&String, &Value)> = m.iter().collect();
    entries.sort_by(|x, y| x.0.cmp(y.0));
    let items: Vec<String> = entries
        .into_iter()
        .map(|(k, v)| format!("{k}:{}", go_v(v)))
        .collect();
    format!("map[{}]", items.join(" "))
}

/// `%s` (non-strings come out as Go's `%!s(type=value)`).
fn go_s(v: &Value) -> String {
    match v {
        Value::Null => "%!s(<nil>)".to_owned(),
        Value::Bool(b) => format!("%!s(bool={b})"),
        Value::Number(n) if n.is_i64() => format!("%!s(int64={})", go_number(n)),
        Value::Number(n) => format!("%!s(float64={})", go_number(n)),
        Value::String(s) => s.clone(),
        Value::Array(a) => {
            let items: Vec<String> = a.iter().map(go_s).collect();
            format!("[{}]", items.join(" "))
        }
        Value::Object(m) => {
            let mut entries: Vec<(&String, &Value)> = m.iter().collect();
            entries.sort_by(|x, y| x.0.cmp(y.0));
            let items: Vec<String> = entries
                .into_iter()
                .map(|(k, v)| format!("{k}:{}", go_s(v)))
                .collect();
            format!("map[{}]", items.join(" "))
        }
    }
}

/// An int64 in decimal, a float64 like Go's `%v` (`strconv` 'g', shortest, exponent from 1e6).
fn go_number(n: &serde_json::Number) -> String {
    if let Some(i) = n.as_i64() {
        return i.to_string();
    }
    match n.as_f64() {
        Some(f) => go_float(f),
        None => n.to_string(),
    }
}

fn go_float(f: f64) -> String {
    if f == 0.0 {
        return if f.is_sign_negative() { "-0" } else { "0" }.to_owned();
    }
    if !f.is_finite() {
        return if f.is_nan() {
            "NaN"
        } else if f > 0.0 {
            "+Inf"
        } else {
            "-Inf"
        }
        .to_owned();
    }
    let sci = format!("{:e}", f.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let sign = if f < 0.0 { "-" } else { "" };
    if !(-4..6).contains(&exp) {
        let (first, rest) = digits.split_at(1.min(digits.len()));
        let frac = if rest.is_empty() {
            String::new()
        } else {
            format!(".{rest}")
        };
        let esign = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{first}{frac}e{esign}{:02}", exp.unsigned_abs());
    }
    if exp < 0 {
        let zeros = "0".repeat(exp.unsigned_abs() as usize - 1);
        return format!("{sign}0.{zeros}{digits}");
    }
    let int_len = exp as usize + 1;
    if digits.len() <= int_len {
        let pad = "0".repeat(int_len - digits.len());
        format!("{sign}{digits}{pad}")
    } else {
        let (i, frac) = digits.split_at(int_len);
        format!("{sign}{i}.{frac}")
    }
}

#[cfg(test)]
mod tests {
    use super::super::schema::{ListType, Node, NodeId, PatchStrategy, Schema, Shape};
    use super::{MAX_DEPTH, SmpError, apply, go_float, go_stable_sort};
    use serde_json::{Value, json};
    use std::collections::BTreeMap;

    // ---- schema builder ----------------------------------------------------------------

    #[derive(Default)]
    struct B {
        s: Schema,
    }

    impl B {
        fn scalar(&mut self) -> NodeId {
            self.s.push(Node {
                shape: Shape::Scalar,
                ..Node::default()
            })
        }
        fn untyped(&mut self) -> NodeId {
            self.s.push(Node::default())
        }
        fn placeholder(&mut self) -> NodeId {
            self.s.push(Node::default())
        }
        fn obj_node(fields: &[(&str, NodeId)]) -> Node {
            let fields: BTreeMap<String, NodeId> =
                fields.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect();
            Node {
                shape: Shape::Object {
                    fields,
                    additional: None,
                },
                ..Node::default()
            }
        }
        fn obj(&mut self, fields: &[(&str, NodeId)]) -> NodeId {
            self.s.push(Self::obj_node(fields))
        }
        fn retain_obj(&mut self, fields: &[(&str, NodeId)]) -> NodeId {
            let mut n = Self::obj_node(fields);
            n.patch.retain_keys = true;
            self.s.push(n)
        }
        fn map_of(&mut self, v: NodeId) -> NodeId {
            self.s.push(Node {
                shape: Shape::Object {
                    fields: BTreeMap::new(),
                    additional: Some(v),
                },
                ..Node::default()
            })
        }
        fn atomic(&mut self, items: NodeId) -> NodeId {
            self.s.push(Node {
                shape: Shape::Array { items },
                ..Node::default()
            })
        }
        fn merge(&mut self, items: NodeId, key: Option<&str>, retain: bool) -> NodeId {
            self.s.push(Node {
                shape: Shape::Array { items },
                list_type: match key {
                    Some(k) => ListType::Map(vec![k.to_owned()]),
                    None => ListType::Set,
                },
                patch: PatchStrategy {
                    merge: true,
                    retain_keys: retain,
                    merge_key: key.map(str::to_owned),
                },
                atomic_map: false,
            })
        }
    }

    /// Port of upstream's test type `MergeItem` (patch_test.go).
    fn merge_item() -> (Schema, NodeId) {
        let mut b = B::default();
        let s = b.scalar();
        let mi = b.placeholder();
        let merging_list = b.merge(mi, Some("name"), false);
        let non_merging_list = b.atomic(mi);
        let merging_int_list = b.merge(s, None, false);
        let non_merging_int_list = b.atomic(s);
        let merge_item_ptr = b.merge(mi, Some("name"), false);
        let simple_map = b.map_of(s);
        let replacing_item = b.untyped();
        let retain_keys_map = b.retain_obj(&[
            ("name", s),
            ("value", s),
            ("other", s),
            ("simpleMap", simple_map),
            ("mergingIntList", merging_int_list),
            ("mergingList", merging_list),
            ("nonMergingList", non_merging_list),
        ]);
        let retain_keys_merging_list = b.merge(mi, Some("name"), true);
        let node = B::obj_node(&[
            ("name", s),
            ("value", s),
            ("other", s),
            ("mergingList", merging_list),
            ("nonMergingList", non_merging_list),
            ("mergingIntList", merging_int_list),
            ("nonMergingIntList", non_merging_int_list),
            ("mergeItemPtr", merge_item_ptr),
            ("simpleMap", simple_map),
            ("replacingItem", replacing_item),
            ("retainKeysMap", retain_keys_map),
            ("retainKeysMergingList", retain_keys_merging_list),
        ]);
        b.s.set(mi, node);
        (b.s, mi)
    }

    /// A Pod-like schema with the real merge keys.
    fn pod() -> (Schema, NodeId) {
        let mut b = B::default();
        let s = b.scalar();
        let u = b.untyped();
        let smap = b.map_of(s);
        let finalizers = b.merge(s, None, false);
        let owner_ref = b.obj(&[
            ("apiVersion", s),
            ("kind", s),
            ("name", s),
            ("uid", s),
            ("controller", s),
        ]);
        let owner_refs = b.merge(owner_ref, Some("uid"), false);
        let meta = b.obj(&[
            ("name", s),
            ("namespace", s),
            ("labels", smap),
            ("annotations", smap),
            ("finalizers", finalizers),
            ("ownerReferences", owner_refs),
        ]);
        let port = b.obj(&[("containerPort", s), ("protocol", s), ("name", s)]);
        let ports = b.merge(port, Some("containerPort"), false);
        let env_var = b.obj(&[("name", s), ("value", s), ("valueFrom", u)]);
        let env = b.merge(env_var, Some("name"), false);
        let mount = b.obj(&[("name", s), ("mountPath", s), ("readOnly", s)]);
        let mounts = b.merge(mount, Some("mountPath"), false);
        let args = b.atomic(s);
        let resources = b.obj(&[("limits", smap), ("requests", smap)]);
        let container = b.obj(&[
            ("name", s),
            ("image", s),
            ("args", args),
            ("ports", ports),
            ("env", env),
            ("volumeMounts", mounts),
            ("resources", resources),
        ]);
        let containers = b.merge(container, Some("name"), false);
        let cm = b.obj(&[("name", s), ("items", u)]);
        let secret = b.obj(&[("secretName", s)]);
        let empty_dir = b.obj(&[("medium", s)]);
        let host_path = b.obj(&[("path", s)]);
        let volume = b.retain_obj(&[
            ("name", s),
            ("configMap", cm),
            ("secret", secret),
            ("emptyDir", empty_dir),
            ("hostPath", host_path),
        ]);
        let volumes = b.merge(volume, Some("name"), true);
        let tolerations = b.atomic(u);
        let local_ref = b.obj(&[("name", s)]);
        let pull_secrets = b.merge(local_ref, Some("name"), false);
        let spec = b.obj(&[
            ("containers", containers),
            ("initContainers", containers),
            ("volumes", volumes),
            ("tolerations", tolerations),
            ("nodeSelector", smap),
            ("imagePullSecrets", pull_secrets),
            ("restartPolicy", s),
        ]);
        let condition = b.obj(&[("type", s), ("status", s), ("reason", s)]);
        let conditions = b.merge(condition, Some("type"), false);
        let status = b.obj(&[("phase", s), ("conditions", conditions)]);
        let root = b.obj(&[
            ("apiVersion", s),
            ("kind", s),
            ("metadata", meta),
            ("spec", spec),
            ("status", status),
        ]);
        b.s.set_kind("", "v1", "Pod", root);
        (b.s, root)
    }

    fn ok(t: &(Schema, NodeId), original: Value, patch: Value) -> Value {
        match apply(&t.0, Some(t.1), &original, &patch) {
            Ok(v) => v,
            Err(e) => panic!("unexpected error: {e}"),
        }
    }

    fn err(t: &(Schema, NodeId), original: Value, patch: Value) -> SmpError {
        match apply(&t.0, Some(t.1), &original, &patch) {
            Ok(v) => panic!("expected an error, got {v}"),
            Err(e) => e,
        }
    }

    fn untyped(original: Value, patch: Value) -> Value {
        match apply(&Schema::default(), None, &original, &patch) {
            Ok(v) => v,
            Err(e) => panic!("unexpected error: {e}"),
        }
    }

    /// Asserts list order too (serde_json map equality ignores key order, list order counts).
    fn check(t: &(Schema, NodeId), original: Value, patch: Value, expected: Value) {
        assert_eq!(ok(t, original, patch), expected);
    }

    // ---- ported from upstream patch_test.go: maps ----------------------------------------

    #[test]
    fn upstream_nil_original_and_nil_patch() {
        let t = merge_item();
        check(
            &t,
            json!({}),
            json!({"name": 1, "value": 1}),
            json!({"name": 1, "value": 1}),
        );
        check(&t, json!({"name": 1}), json!({}), json!({"name": 1}));
    }

    #[test]
    fn upstream_add_and_delete_fields_from_map() {
        let t = merge_item();
        check(
            &t,
            json!({"name": 1}),
            json!({"value": 1}),
            json!({"name": 1, "value": 1}),
        );
        check(
            &t,
            json!({"name": 1, "other": "a"}),
            json!({"name": null, "value": 1}),
            json!({"value": 1, "other": "a"}),
        );
        check(
            &t,
            json!({"name": 1, "value": 1, "other": "a"}),
            json!({"name": null, "value": null}),
            json!({"other": "a"}),
        );
    }

    #[test]
    fn upstream_delete_field_from_nested_map() {
        let t = merge_item();
        check(
            &t,
            json!({"simpleMap": {"key1": 1, "key2": 1, "other": "a"}}),
            json!({"simpleMap": {"key2": null}}),
            json!({"simpleMap": {"key1": 1, "other": "a"}}),
        );
    }

    #[test]
    fn upstream_defined_nulls_are_not_stored() {
        let t = merge_item();
        check(
            &t,
            json!({"name": "a", "other": "a"}),
            json!({"name": 1, "value": 1, "other": null}),
            json!({"name": 1, "value": 1}),
        );
        check(
            &t,
            json!({"name": "original-name", "value": "original-value"}),
            json!({"name": "modified-name", "value": null}),
            json!({"name": "modified-name"}),
        );
    }

    #[test]
    fn upstream_delete_map_from_nested_map() {
        let t = merge_item();
        check(
            &t,
            json!({"simpleMap": {"key1": 1, "key2": 1}}),
            json!({"simpleMap": {"$patch": "delete"}}),
            json!({"simpleMap": {}}),
        );
    }

    #[test]
    fn upstream_replace_directive_on_root_map() {
        let t = merge_item();
        check(
            &t,
            json!({"name": 1, "value": 1}),
            json!({"$patch": "replace"}),
            json!({}),
        );
        check(
            &t,
            json!({"name": 1, "value": 1}),
            json!({"other": "a", "$patch": "replace"}),
            json!({"other": "a"}),
        );
    }

    // ---- ported: lists of scalars --------------------------------------------------------

    #[test]
    fn upstream_replace_non_merging_list_of_scalars() {
        let t = merge_item();
        check(
            &t,
            json!({"nonMergingIntList": [1, 4]}),
            json!({"nonMergingIntList": [2, 3]}),
            json!({"nonMergingIntList": [2, 3]}),
        );
    }

    #[test]
    fn upstream_unique_scalars_when_merging_lists() {
        let t = merge_item();
        check(
            &t,
            json!({"mergingIntList": [1, 2]}),
            json!({"mergingIntList": [2, 3]}),
            json!({"mergingIntList": [1, 2, 3]}),
        );
    }

    #[test]
    fn upstream_preserve_order_from_patch_in_merging_int_list() {
        let t = merge_item();
        check(
            &t,
            json!({"mergingIntList": [1, 2, 3]}),
            json!({"mergingIntList": [3, 1, 2]}),
            json!({"mergingIntList": [3, 1, 2]}),
        );
        check(
            &t,
            json!({"mergingIntList": [1, 2, 3]}),
            json!({"mergingIntList": [3, 1]}),
            json!({"mergingIntList": [2, 3, 1]}),
        );
    }

    #[test]
    fn upstream_merge_lists_of_scalars_with_set_element_order() {
        let t = merge_item();
        check(
            &t,
            json!({"mergingIntList": [1, 2, 4]}),
            json!({"$setElementOrder/mergingIntList": [1, 2, 3], "mergingIntList": [3]}),
            json!({"mergingIntList": [1, 2, 3, 4]}),
        );
    }

    #[test]
    fn upstream_add_item_to_int_list_and_preserve_order() {
        let t = merge_item();
        let patch = json!({"$setElementOrder/mergingIntList": [3, 1, 2], "mergingIntList": [3]});
        check(
            &t,
            json!({"mergingIntList": [1, 2]}),
            patch.clone(),
            json!({"mergingIntList": [3, 1, 2]}),
        );
        check(
            &t,
            json!({"mergingIntList": [1, 4, 2]}),
            patch,
            json!({"mergingIntList": [3, 1, 4, 2]}),
        );
        check(
            &t,
            json!({"mergingIntList": [1, 2]}),
            json!({"$setElementOrder/mergingIntList": [1, 4, 2, 3], "mergingIntList": [4, 3]}),
            json!({"mergingIntList": [1, 4, 2, 3]}),
        );
    }

    #[test]
    fn upstream_delete_from_primitive_list() {
        let t = merge_item();
        let patch = json!({
            "$setElementOrder/mergingIntList": [1, 2],
            "$deleteFromPrimitiveList/mergingIntList": [3]
        });
        check(
            &t,
            json!({"mergingIntList": [1, 2, 3]}),
            patch.clone(),
            json!({"mergingIntList": [1, 2]}),
        );
        check(
            &t,
            json!({"mergingIntList": [1, 2, 3, 4]}),
            patch.clone(),
            json!({"mergingIntList": [1, 2, 4]}),
        );
        // every duplicate goes
        check(
            &t,
            json!({"mergingIntList": [1, 2, 3, 3, 4]}),
            patch,
            json!({"mergingIntList": [1, 2, 4]}),
        );
    }

    #[test]
    fn upstream_add_and_delete_items_in_list_of_scalars() {
        let t = merge_item();
        let patch = json!({
            "$setElementOrder/mergingIntList": [1, 2, 4],
            "$deleteFromPrimitiveList/mergingIntList": [3],
            "mergingIntList": [4]
        });
        check(
            &t,
            json!({"mergingIntList": [1, 2, 3]}),
            patch.clone(),
            json!({"mergingIntList": [1, 2, 4]}),
        );
        check(
            &t,
            json!({"mergingIntList": [1, 2, 3, 4]}),
            patch,
            json!({"mergingIntList": [1, 2, 4]}),
        );
    }

    #[test]
    fn upstream_delete_and_reorder_int_list() {
        let t = merge_item();
        check(
            &t,
            json!({"mergingIntList": [1, 2, 3]}),
            json!({
                "$setElementOrder/mergingIntList": [2, 1],
                "$deleteFromPrimitiveList/mergingIntList": [3]
            }),
            json!({"mergingIntList": [2, 1]}),
        );
        check(
            &t,
            json!({"mergingIntList": [1, 2, 3]}),
            json!({
                "$setElementOrder/mergingIntList": [4, 2, 1],
                "mergingIntList": [4],
                "$deleteFromPrimitiveList/mergingIntList": [3]
            }),
            json!({"mergingIntList": [4, 2, 1]}),
        );
    }

    #[test]
    fn upstream_set_elements_order_in_int_list_with_server_only_items() {
        let t = merge_item();
        check(
            &t,
            json!({"mergingIntList": [1, 3, 4, 2, 9]}),
            json!({"$setElementOrder/mergingIntList": [4, 2, 3, 1]}),
            json!({"mergingIntList": [4, 2, 3, 1, 9]}),
        );
        check(
            &t,
            json!({"mergingIntList": [1, 2, 9, 3, 4]}),
            json!({"$setElementOrder/mergingIntList": [2, 1, 4, 3]}),
            json!({"mergingIntList": [2, 1, 9, 4, 3]}),
        );
        check(
            &t,
            json!({"mergingIntList": [1, 2, 7, 9, 8, 3, 4]}),
            json!({"$setElementOrder/mergingIntList": [2, 1, 4, 3]}),
            json!({"mergingIntList": [2, 1, 7, 9, 8, 4, 3]}),
        );
    }

    #[test]
    fn upstream_set_element_order_with_duplicates() {
        let t = merge_item();
        check(
            &t,
            json!({"mergingIntList": [1, 2, 3, 2, 4]}),
            json!({"$setElementOrder/mergingIntList": [2, 1, 4, 3, 2]}),
            json!({"mergingIntList": [2, 2, 1, 4, 3]}),
        );
        check(
            &t,
            json!({"mergingList": [
                {"name": 1}, {"name": 2, "value": "dup1"}, {"name": 3},
                {"name": 2, "value": "dup2"}, {"name": 4}
            ]}),
            json!({"$setElementOrder/mergingList": [
                {"name": 2}, {"name": 1}, {"name": 4}, {"name": 3}, {"name": 2}
            ]}),
            json!({"mergingList": [
                {"name": 2, "value": "dup1"}, {"name": 2, "value": "dup2"},
                {"name": 1}, {"name": 4}, {"name": 3}
            ]}),
        );
    }

    #[test]
    fn upstream_set_element_order_names_items_not_in_the_list() {
        let t = merge_item();
        check(
            &t,
            json!({"mergingList": [{"name": 1}, {"name": 3}]}),
            json!({
                "$setElementOrder/mergingList": [{"name": 3}, {"name": 2}, {"name": 1}],
                "mergingList": [{"name": 3, "value": 3}, {"name": 1, "value": 1}]
            }),
            json!({"mergingList": [{"name": 3, "value": 3}, {"name": 1, "value": 1}]}),
        );
        check(
            &t,
            json!({"mergingIntList": [1, 3]}),
            json!({"$setElementOrder/mergingIntList": [3, 2, 1]}),
            json!({"mergingIntList": [3, 1]}),
        );
    }

    // ---- ported: lists of maps -----------------------------------------------------------

    #[test]
    fn upstream_merge_lists_of_maps() {
        let t = merge_item();
        check(
            &t,
            json!({"mergingList": [{"name": 1, "other": "a"}, {"name": 2, "value": 2, "other": "b"}]}),
            json!({
                "$setElementOrder/mergingList": [{"name": 4}, {"name": 1}, {"name": 2}, {"name": 3}],
                "mergingList": [{"name": 4, "value": 4}, {"name": 3, "value": 3}]
            }),
            json!({"mergingList": [
                {"name": 4, "value": 4},
                {"name": 1, "other": "a"},
                {"name": 2, "value": 2, "other": "b"},
                {"name": 3, "value": 3}
            ]}),
        );
    }

    #[test]
    fn upstream_add_and_replace_field_in_merging_list() {
        let t = merge_item();
        check(
            &t,
            json!({"mergingList": [{"name": 1, "other": "a"}, {"name": 3, "value": 2, "other": "b"}]}),
            json!({
                "$setElementOrder/mergingList": [{"name": 1}, {"name": 2}],
                "mergingList": [{"name": 1, "value": 1}, {"name": 2, "value": 2}]
            }),
            json!({"mergingList": [
                {"name": 1, "value": 1, "other": "a"},
                {"name": 2, "value": 2},
                {"name": 3, "value": 2, "other": "b"}
            ]}),
        );
        check(
            &t,
            json!({"mergingList": [{"name": 1, "value": 3, "other": "a"}, {"name": 2, "value": 2}]}),
            json!({
                "$setElementOrder/mergingList": [{"name": 1}, {"name": 2}],
                "mergingList": [{"name": 1, "value": "a"}]
            }),
            json!({"mergingList": [{"name": 1, "value": "a", "other": "a"}, {"name": 2, "value": 2}]}),
        );
    }

    #[test]
    fn upstream_preserve_order_from_patch_in_merging_list() {
        let t = merge_item();
        let original =
            json!({"mergingList": [{"name": 1}, {"name": 2, "value": "b"}, {"name": 3}]});
        check(
            &t,
            original.clone(),
            json!({"mergingList": [
                {"name": 3, "value": "c"}, {"name": 1, "value": "a"}, {"name": 2, "other": "x"}
            ]}),
            json!({"mergingList": [
                {"name": 3, "value": "c"}, {"name": 1, "value": "a"},
                {"name": 2, "value": "b", "other": "x"}
            ]}),
        );
        check(
            &t,
            original,
            json!({"mergingList": [{"name": 3, "value": "c"}, {"name": 1, "value": "a"}]}),
            json!({"mergingList": [
                {"name": 2, "value": "b"}, {"name": 3, "value": "c"}, {"name": 1, "value": "a"}
            ]}),
        );
    }

    #[test]
    fn upstream_delete_map_from_merging_list() {
        let t = merge_item();
        let patch = json!({
            "$setElementOrder/mergingList": [{"name": 2}],
            "mergingList": [{"name": 1, "$patch": "delete"}]
        });
        check(
            &t,
            json!({"mergingList": [{"name": 1}, {"name": 2}]}),
            patch.clone(),
            json!({"mergingList": [{"name": 2}]}),
        );
        check(
            &t,
            json!({"mergingList": [{"name": 1, "other": "a"}, {"name": 2, "other": "b"}]}),
            patch.clone(),
            json!({"mergingList": [{"name": 2, "other": "b"}]}),
        );
        // deleting a missing item is fine
        check(
            &t,
            json!({"mergingList": [{"name": 2, "other": "b"}]}),
            patch,
            json!({"mergingList": [{"name": 2, "other": "b"}]}),
        );
    }

    #[test]
    fn upstream_delete_missing_map_from_merging_list_with_conflict() {
        let t = merge_item();
        check(
            &t,
            json!({"mergingList": [{"name": 3, "other": "a"}]}),
            json!({
                "$setElementOrder/mergingList": [{"name": 2}],
                "mergingList": [{"name": 2}, {"name": 1, "$patch": "delete"}]
            }),
            json!({"mergingList": [{"name": 2}, {"name": 3, "other": "a"}]}),
        );
    }

    /// These two depend on Go's in-place delete + append reusing the original's slots.
    #[test]
    fn upstream_add_map_and_delete_map_from_merging_list() {
        let t = merge_item();
        check(
            &t,
            json!({"mergingList": [{"name": 1}, {"name": 2, "other": "b"}, {"name": 4, "other": "c"}]}),
            json!({
                "$setElementOrder/mergingList": [{"name": 2}, {"name": 3}],
                "mergingList": [{"name": 3}, {"name": 1, "$patch": "delete"}]
            }),
            json!({"mergingList": [{"name": 2, "other": "b"}, {"name": 4, "other": "c"}, {"name": 3}]}),
        );
        check(
            &t,
            json!({"mergingList": [{"name": 1, "other": "a"}, {"name": 4, "other": "c"}]}),
            json!({
                "$setElementOrder/mergingList": [{"name": 2}, {"name": 3}],
                "mergingList": [{"name": 2}, {"name": 3}, {"name": 1, "$patch": "delete"}]
            }),
            json!({"mergingList": [{"name": 4, "other": "c"}, {"name": 2}, {"name": 3}]}),
        );
    }

    #[test]
    fn upstream_delete_all_maps_from_merging_list() {
        let t = merge_item();
        check(
            &t,
            json!({"mergingList": [{"name": 1, "other": "a"}, {"name": 2, "other": "b"}]}),
            json!({"mergingList": [{"name": 1, "$patch": "delete"}, {"name": 2, "$patch": "delete"}]}),
            json!({"mergingList": []}),
        );
        check(
            &t,
            json!({"mergingList": []}),
            json!({"mergingList": [{"name": 1, "$patch": "delete"}, {"name": 2, "$patch": "delete"}]}),
            json!({"mergingList": []}),
        );
        check(
            &t,
            json!({"mergingList": []}),
            json!({"mergingList": []}),
            json!({"mergingList": []}),
        );
    }

    #[test]
    fn upstream_delete_all_duplicate_entries_in_merging_list() {
        let t = merge_item();
        check(
            &t,
            json!({"mergingList": [
                {"name": 1}, {"name": 1}, {"name": 2, "value": "a"}, {"name": 3}, {"name": 3}
            ]}),
            json!({"mergingList": [
                {"name": 1, "$patch": "delete"}, {"name": 1, "$patch": "delete"},
                {"name": 3, "$patch": "delete"}, {"name": 3, "$patch": "delete"}
            ]}),
            json!({"mergingList": [{"name": 2, "value": "a"}]}),
        );
    }

    #[test]
    fn upstream_delete_all_items_from_merging_list_with_replace() {
        let t = merge_item();
        check(
            &t,
            json!({"mergingList": [{"name": 1}, {"name": 2}]}),
            json!({"mergingList": [{"$patch": "replace"}]}),
            json!({"mergingList": []}),
        );
    }

    #[test]
    fn upstream_delete_field_from_map_in_merging_list() {
        let t = merge_item();
        check(
            &t,
            json!({"mergingList": [{"name": 1, "value": 1, "other": "a"}, {"name": 2, "value": 2, "other": "b"}]}),
            json!({
                "$setElementOrder/mergingList": [{"name": 1}, {"name": 2}],
                "mergingList": [{"name": 1, "value": null}]
            }),
            json!({"mergingList": [{"name": 1, "other": "a"}, {"name": 2, "value": 2, "other": "b"}]}),
        );
    }

    #[test]
    fn upstream_replace_non_merging_list_nested_in_merging_list() {
        let t = merge_item();
        check(
            &t,
            json!({"mergingList": [
                {"name": 1, "other": "a", "nonMergingList": [{"name": 1}, {"name": 2, "value": 2}]},
                {"name": 2, "other": "b"}
            ]}),
            json!({
                "$setElementOrder/mergingList": [{"name": 1}, {"name": 2}],
                "mergingList": [{"name": 1, "nonMergingList": [{"name": 1, "value": 1}]}]
            }),
            json!({"mergingList": [
                {"name": 1, "other": "a", "nonMergingList": [{"name": 1, "value": 1}]},
                {"name": 2, "other": "b"}
            ]}),
        );
    }

    #[test]
    fn upstream_merging_list_nested_in_merging_list() {
        let t = merge_item();
        let current = json!({"mergingList": [
            {"name": 1, "other": "a", "mergingList": [{"name": 2, "value": 2, "other": "d"}]},
            {"name": 2, "other": "b"}
        ]});
        check(
            &t,
            current.clone(),
            json!({
                "$setElementOrder/mergingList": [{"name": 1}, {"name": 2}],
                "mergingList": [{
                    "$setElementOrder/mergingList": [{"name": 1}, {"name": 2}],
                    "name": 1,
                    "mergingList": [{"name": 1, "value": 1}]
                }]
            }),
            json!({"mergingList": [
                {"name": 1, "other": "a", "mergingList": [
                    {"name": 1, "value": 1}, {"name": 2, "value": 2, "other": "d"}
                ]},
                {"name": 2, "other": "b"}
            ]}),
        );
        check(
            &t,
            current,
            json!({
                "$setElementOrder/mergingList": [{"name": 1}, {"name": 2}],
                "mergingList": [{
                    "$setElementOrder/mergingList": [{"name": 2}, {"name": 1}],
                    "name": 1,
                    "mergingList": [{"name": 1, "value": 1}]
                }]
            }),
            json!({"mergingList": [
                {"name": 1, "other": "a", "mergingList": [
                    {"name": 2, "value": 2, "other": "d"}, {"name": 1, "value": 1}
                ]},
                {"name": 2, "other": "b"}
            ]}),
        );
    }

    #[test]
    fn upstream_add_map_to_merging_list_by_pointer() {
        let t = merge_item();
        let patch = json!({
            "$setElementOrder/mergeItemPtr": [{"name": 1}, {"name": 2}],
            "mergeItemPtr": [{"name": 2}]
        });
        check(
            &t,
            json!({"mergeItemPtr": [{"name": 1, "other": "a"}, {"name": 3}]}),
            patch.clone(),
            json!({"mergeItemPtr": [{"name": 1, "other": "a"}, {"name": 2}, {"name": 3}]}),
        );
        check(
            &t,
            json!({"mergeItemPtr": [{"name": 1}]}),
            patch,
            json!({"mergeItemPtr": [{"name": 1}, {"name": 2}]}),
        );
    }

    #[test]
    fn upstream_add_delete_change_items_and_preserve_order() {
        let t = merge_item();
        let current = json!({"mergingList": [
            {"name": 1, "other": "a"}, {"name": 2, "value": 2, "other": "b"}, {"name": 3, "value": 3}
        ]});
        check(
            &t,
            current.clone(),
            json!({
                "$setElementOrder/mergingList": [{"name": 2}, {"name": 1}],
                "mergingList": [{"name": 3, "$patch": "delete"}]
            }),
            json!({"mergingList": [{"name": 2, "value": 2, "other": "b"}, {"name": 1, "other": "a"}]}),
        );
        check(
            &t,
            current.clone(),
            json!({
                "$setElementOrder/mergingList": [{"name": 2}, {"name": 3}, {"name": 1}],
                "mergingList": [{"name": 3, "value": "x"}]
            }),
            json!({"mergingList": [
                {"name": 2, "value": 2, "other": "b"}, {"name": 3, "value": "x"}, {"name": 1, "other": "a"}
            ]}),
        );
        check(
            &t,
            current,
            json!({
                "$setElementOrder/mergingList": [{"name": 4}, {"name": 2}, {"name": 1}],
                "mergingList": [{"name": 4, "value": 4}, {"name": 3, "$patch": "delete"}]
            }),
            json!({"mergingList": [
                {"name": 4, "value": 4}, {"name": 2, "value": 2, "other": "b"}, {"name": 1, "other": "a"}
            ]}),
        );
    }

    #[test]
    fn upstream_set_elements_order_in_list_with_server_only_items() {
        let t = merge_item();
        check(
            &t,
            json!({"mergingList": [
                {"name": 1, "other": "a"}, {"name": 3, "value": 3}, {"name": 4, "value": 4},
                {"name": 2, "value": 2}, {"name": 9}
            ]}),
            json!({"$setElementOrder/mergingList": [{"name": 4}, {"name": 2}, {"name": 3}, {"name": 1}]}),
            json!({"mergingList": [
                {"name": 4, "value": 4}, {"name": 2, "value": 2}, {"name": 3, "value": 3},
                {"name": 1, "other": "a"}, {"name": 9}
            ]}),
        );
        check(
            &t,
            json!({"mergingList": [
                {"name": 1, "other": "a"}, {"name": 2, "value": 2}, {"name": 7}, {"name": 9},
                {"name": 8}, {"name": 3, "value": 3}, {"name": 4, "value": 4}
            ]}),
            json!({"$setElementOrder/mergingList": [{"name": 2}, {"name": 1}, {"name": 4}, {"name": 3}]}),
            json!({"mergingList": [
                {"name": 2, "value": 2}, {"name": 1, "other": "a"}, {"name": 7}, {"name": 9},
                {"name": 8}, {"name": 4, "value": 4}, {"name": 3, "value": 3}
            ]}),
        );
    }

    #[test]
    fn upstream_type_change_replaces_list() {
        let t = merge_item();
        check(
            &t,
            json!({"mergingList": [{"name": 1}, {"name": 1}]}),
            json!({"mergingList": {}}),
            json!({"mergingList": {}}),
        );
    }

    // ---- ported: retainKeys --------------------------------------------------------------

    #[test]
    fn upstream_retain_keys_without_directive_merges() {
        let t = merge_item();
        check(
            &t,
            json!({"retainKeysMap": {"name": "foo"}}),
            json!({"retainKeysMap": {"value": "bar"}}),
            json!({"retainKeysMap": {"name": "foo", "value": "bar"}}),
        );
        check(
            &t,
            json!({"retainKeysMap": {"name": "foo", "value": "a"}}),
            json!({"retainKeysMap": {"value": null}}),
            json!({"retainKeysMap": {"name": "foo"}}),
        );
        check(
            &t,
            json!({"retainKeysMap": {"name": "foo", "value": "a"}}),
            json!({"retainKeysMap": {}}),
            json!({"retainKeysMap": {"name": "foo", "value": "a"}}),
        );
        check(
            &t,
            json!({"retainKeysMergingList": [{"name": "bar"}, {"name": "foo", "value": "a"}]}),
            json!({"retainKeysMergingList": [{"name": "foo", "value": null}]}),
            json!({"retainKeysMergingList": [{"name": "bar"}, {"name": "foo"}]}),
        );
    }

    #[test]
    fn upstream_retain_keys_clears_unlisted_fields() {
        let t = merge_item();
        check(
            &t,
            json!({"retainKeysMap": {"value": "foo"}}),
            json!({"retainKeysMap": {"$retainKeys": ["other"], "other": "bar"}}),
            json!({"retainKeysMap": {"other": "bar"}}),
        );
        check(
            &t,
            json!({"retainKeysMap": {"name": "type1", "value": "foo"}}),
            json!({"retainKeysMap": {"$retainKeys": ["name", "other"], "name": "type2", "other": "bar"}}),
            json!({"retainKeysMap": {"name": "type2", "other": "bar"}}),
        );
        check(
            &t,
            json!({"retainKeysMap": {"name": "foo", "value": "bar", "other": "a"}}),
            json!({"retainKeysMap": {"$retainKeys": ["name"], "value": null}}),
            json!({"retainKeysMap": {"name": "foo"}}),
        );
        check(
            &t,
            json!({"retainKeysMap": {"name": "foo", "value": "bar", "other": "a"}}),
            json!({"retainKeysMap": {"$retainKeys": ["name", "value"]}}),
            json!({"retainKeysMap": {"name": "foo", "value": "bar"}}),
        );
    }

    #[test]
    fn upstream_retain_keys_with_nested_map() {
        let t = merge_item();
        check(
            &t,
            json!({"retainKeysMap": {"name": "foo", "value": "bar", "simpleMap": {"key1": "a", "key2": "b", "key3": "c"}}}),
            json!({"retainKeysMap": {
                "$retainKeys": ["name", "simpleMap", "value"],
                "simpleMap": {"key2": null, "key1": "x"}
            }}),
            json!({"retainKeysMap": {"name": "foo", "value": "bar", "simpleMap": {"key1": "x", "key3": "c"}}}),
        );
    }

    // ---- ported: errors ------------------------------------------------------------------

    #[test]
    fn upstream_set_element_order_mismatch_errors() {
        let t = merge_item();
        let e = err(
            &t,
            json!({"mergingList": [{"name": 1}, {"name": 3}, {"name": 2}]}),
            json!({
                "$setElementOrder/mergingList": [{"name": 1}, {"name": 2}, {"name": 3}],
                "mergingList": [{"name": 3, "value": 3}, {"name": 1, "value": 1}]
            }),
        );
        assert!(e.to_string().contains("doesn't match"), "{e}");
        assert_eq!(
            e.to_string(),
            "the order in patch list:\n[map[name:3 value:3] map[name:1 value:1]]\n doesn't match \
             $setElementOrder list:\n[map[name:1] map[name:2] map[name:3]]"
        );
        let e = err(
            &t,
            json!({"mergingIntList": [1, 3, 2]}),
            json!({"$setElementOrder/mergingIntList": [1, 2, 3], "mergingIntList": [3, 1]}),
        );
        assert!(e.to_string().contains("doesn't match"), "{e}");
        assert_eq!(e.http_status(), 500);
    }

    #[test]
    fn upstream_missing_merge_key_errors() {
        let t = merge_item();
        let e = err(
            &t,
            json!({"mergingList": [{"name": 1, "value": "a"}]}),
            json!({"mergingList": [{"value": "b"}]}),
        );
        assert_eq!(
            e,
            SmpError::NoMergeKey {
                map: "map[value:b]".into(),
                key: "name".into()
            }
        );
        assert_eq!(
            e.to_string(),
            "map: map[value:b] does not contain declared merge key: name"
        );
        assert_eq!(e.http_status(), 500);
    }

    // ---- Pod-like objects ----------------------------------------------------------------

    fn base_pod() -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "p",
                "labels": {"app": "web", "tier": "fe"},
                "finalizers": ["a", "b"],
                "ownerReferences": [
                    {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u1"},
                    {"apiVersion": "v1", "kind": "Foo", "name": "f", "uid": "u2"}
                ]
            },
            "spec": {
                "containers": [
                    {
                        "name": "app",
                        "image": "app:1",
                        "args": ["--a", "--b"],
                        "ports": [{"containerPort": 80, "protocol": "TCP"}],
                        "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                        "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}
                    },
                    {"name": "sidecar", "image": "side:1"}
                ],
                "volumes": [{"name": "data", "configMap": {"name": "cm"}}],
                "tolerations": [{"key": "k1", "operator": "Exists"}],
                "nodeSelector": {"disk": "ssd"}
            },
            "status": {
                "phase": "Running",
                "conditions": [
                    {"type": "Ready", "status": "False"},
                    {"type": "Initialized", "status": "True"}
                ]
            }
        })
    }

    fn at<'v>(v: &'v Value, path: &str) -> &'v Value {
        v.pointer(path).unwrap_or(&Value::Null)
    }

    #[test]
    fn pod_null_deletes_key() {
        let t = pod();
        let out = ok(
            &t,
            base_pod(),
            json!({"metadata": {"labels": {"tier": null, "new": "x"}}}),
        );
        assert_eq!(
            at(&out, "/metadata/labels"),
            &json!({"app": "web", "new": "x"})
        );
        let out = ok(&t, base_pod(), json!({"spec": {"nodeSelector": null}}));
        assert!(out.pointer("/spec/nodeSelector").is_none());
        // null for a key that is not there is not stored
        let out = ok(&t, base_pod(), json!({"spec": {"restartPolicy": null}}));
        assert!(out.pointer("/spec/restartPolicy").is_none());
    }

    #[test]
    fn pod_lists_without_strategy_are_replaced() {
        let t = pod();
        let out = ok(
            &t,
            base_pod(),
            json!({"spec": {
                "tolerations": [{"key": "k2", "operator": "Equal", "value": "v"}],
                "containers": [{"name": "app", "args": ["--c"]}]
            }}),
        );
        assert_eq!(
            at(&out, "/spec/tolerations"),
            &json!([{"key": "k2", "operator": "Equal", "value": "v"}])
        );
        assert_eq!(at(&out, "/spec/containers/0/args"), &json!(["--c"]));
    }

    #[test]
    fn pod_containers_merge_by_name() {
        let t = pod();
        let out = ok(
            &t,
            base_pod(),
            json!({"spec": {"containers": [{"name": "sidecar", "image": "side:2"}]}}),
        );
        let containers = at(&out, "/spec/containers");
        assert_eq!(containers.as_array().map(Vec::len), Some(2));
        assert_eq!(at(&out, "/spec/containers/0/image"), &json!("app:1"));
        assert_eq!(
            at(&out, "/spec/containers/1"),
            &json!({"name": "sidecar", "image": "side:2"})
        );
        assert_eq!(
            at(&out, "/spec/containers/0/env"),
            at(&base_pod(), "/spec/containers/0/env")
        );
    }

    #[test]
    fn pod_new_merge_list_item_goes_first_without_set_element_order() {
        let t = pod();
        let out = ok(
            &t,
            base_pod(),
            json!({"spec": {"containers": [{"name": "new", "image": "n:1"}]}}),
        );
        let names: Vec<&Value> = at(&out, "/spec/containers")
            .as_array()
            .map(|a| a.iter().map(|c| &c["name"]).collect())
            .unwrap_or_default();
        assert_eq!(names, [&json!("new"), &json!("app"), &json!("sidecar")]);
        // with $setElementOrder (what kubectl sends) the requested order wins
        let out = ok(
            &t,
            base_pod(),
            json!({"spec": {
                "$setElementOrder/containers": [{"name": "app"}, {"name": "sidecar"}, {"name": "new"}],
                "containers": [{"name": "new", "image": "n:1"}]
            }}),
        );
        let names: Vec<&Value> = at(&out, "/spec/containers")
            .as_array()
            .map(|a| a.iter().map(|c| &c["name"]).collect())
            .unwrap_or_default();
        assert_eq!(names, [&json!("app"), &json!("sidecar"), &json!("new")]);
    }

    #[test]
    fn pod_nested_merge_lists() {
        let t = pod();
        let out = ok(
            &t,
            base_pod(),
            json!({"spec": {"containers": [{
                "name": "app",
                "ports": [{"containerPort": 80, "name": "http"}, {"containerPort": 443}],
                "env": [{"name": "B", "value": "20"}, {"name": "C", "value": "3"}],
                "volumeMounts": [{"mountPath": "/data", "readOnly": true}]
            }]}}),
        );
        assert_eq!(
            at(&out, "/spec/containers/0/ports"),
            &json!([{"containerPort": 80, "protocol": "TCP", "name": "http"}, {"containerPort": 443}])
        );
        assert_eq!(
            at(&out, "/spec/containers/0/env"),
            &json!([{"name": "A", "value": "1"}, {"name": "B", "value": "20"}, {"name": "C", "value": "3"}])
        );
        assert_eq!(
            at(&out, "/spec/containers/0/volumeMounts"),
            &json!([{"name": "data", "mountPath": "/data", "readOnly": true}])
        );
    }

    #[test]
    fn pod_delete_item_by_merge_key() {
        let t = pod();
        let out = ok(
            &t,
            base_pod(),
            json!({"spec": {"containers": [{"name": "app", "$patch": "delete"}]}}),
        );
        assert_eq!(
            at(&out, "/spec/containers"),
            &json!([{"name": "sidecar", "image": "side:1"}])
        );
        let out = ok(
            &t,
            base_pod(),
            json!({"spec": {"containers": [{"name": "app", "env": [{"name": "A", "$patch": "delete"}]}]}}),
        );
        assert_eq!(
            at(&out, "/spec/containers/0/env"),
            &json!([{"name": "B", "value": "2"}])
        );
    }

    #[test]
    fn pod_replace_list_directive() {
        let t = pod();
        let out = ok(
            &t,
            base_pod(),
            json!({"spec": {"containers": [{"$patch": "replace"}, {"name": "only", "image": "o:1"}]}}),
        );
        assert_eq!(
            at(&out, "/spec/containers"),
            &json!([{"name": "only", "image": "o:1"}])
        );
    }

    #[test]
    fn pod_replace_and_delete_map_directives() {
        let t = pod();
        let out = ok(
            &t,
            base_pod(),
            json!({"spec": {"containers": [{"name": "app", "resources": {"$patch": "replace", "limits": {"cpu": "2"}}}]}}),
        );
        assert_eq!(
            at(&out, "/spec/containers/0/resources"),
            &json!({"limits": {"cpu": "2"}})
        );
        let out = ok(
            &t,
            base_pod(),
            json!({"metadata": {"labels": {"$patch": "replace", "only": "me"}}}),
        );
        assert_eq!(at(&out, "/metadata/labels"), &json!({"only": "me"}));
        let out = ok(
            &t,
            base_pod(),
            json!({"spec": {"nodeSelector": {"$patch": "delete"}}}),
        );
        assert_eq!(at(&out, "/spec/nodeSelector"), &json!({}));
    }

    #[test]
    fn pod_retain_keys_on_volume_source() {
        let t = pod();
        let out = ok(
            &t,
            base_pod(),
            json!({"spec": {"volumes": [
                {"name": "data", "$retainKeys": ["emptyDir", "name"], "emptyDir": {}}
            ]}}),
        );
        assert_eq!(
            at(&out, "/spec/volumes"),
            &json!([{"name": "data", "emptyDir": {}}])
        );
        // without the directive the old source stays
        let out = ok(
            &t,
            base_pod(),
            json!({"spec": {"volumes": [{"name": "data", "emptyDir": {}}]}}),
        );
        assert_eq!(
            at(&out, "/spec/volumes"),
            &json!([{"name": "data", "configMap": {"name": "cm"}, "emptyDir": {}}])
        );
    }

    #[test]
    fn pod_retain_keys_errors_are_bad_requests() {
        let t = pod();
        let e = err(
            &t,
            base_pod(),
            json!({"spec": {"volumes": [{"name": "data", "$retainKeys": ["name"], "emptyDir": {}}]}}),
        );
        assert_eq!(e, SmpError::BadPatchFormatForRetainKeys);
        assert_eq!(e.http_status(), 400);
        let e = err(
            &t,
            base_pod(),
            json!({"spec": {"$retainKeys": "containers"}}),
        );
        assert_eq!(e, SmpError::BadPatchFormatForRetainKeys);
    }

    #[test]
    fn pod_finalizers_are_a_set() {
        let t = pod();
        let out = ok(
            &t,
            base_pod(),
            json!({"metadata": {"finalizers": ["b", "c"]}}),
        );
        assert_eq!(at(&out, "/metadata/finalizers"), &json!(["a", "b", "c"]));
        let out = ok(&t, base_pod(), json!({"metadata": {"finalizers": ["a"]}}));
        assert_eq!(at(&out, "/metadata/finalizers"), &json!(["a", "b"]));
        // a new value not ordered by $setElementOrder goes first, as upstream does
        let out = ok(&t, base_pod(), json!({"metadata": {"finalizers": ["c"]}}));
        assert_eq!(at(&out, "/metadata/finalizers"), &json!(["c", "a", "b"]));
        let out = ok(
            &t,
            base_pod(),
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a", "zz"]}}),
        );
        assert_eq!(at(&out, "/metadata/finalizers"), &json!(["b"]));
        let out = ok(
            &t,
            base_pod(),
            json!({"metadata": {"$setElementOrder/finalizers": ["a", "b", "c"], "finalizers": ["c"]}}),
        );
        assert_eq!(at(&out, "/metadata/finalizers"), &json!(["a", "b", "c"]));
    }

    #[test]
    fn pod_owner_references_merge_by_uid() {
        let t = pod();
        let out = ok(
            &t,
            base_pod(),
            json!({"metadata": {"ownerReferences": [{"uid": "u2", "controller": true}]}}),
        );
        assert_eq!(
            at(&out, "/metadata/ownerReferences/1"),
            &json!({"apiVersion": "v1", "kind": "Foo", "name": "f", "uid": "u2", "controller": true})
        );
        assert_eq!(at(&out, "/metadata/ownerReferences/0/uid"), &json!("u1"));
    }

    #[test]
    fn pod_status_conditions_merge_by_type() {
        let t = pod();
        let out = ok(
            &t,
            base_pod(),
            json!({"status": {
                "$setElementOrder/conditions": [{"type": "Ready"}, {"type": "Initialized"}, {"type": "PodScheduled"}],
                "conditions": [
                    {"type": "Ready", "status": "True"},
                    {"type": "PodScheduled", "status": "True"}
                ]
            }}),
        );
        assert_eq!(
            at(&out, "/status/conditions"),
            &json!([
                {"type": "Ready", "status": "True"},
                {"type": "Initialized", "status": "True"},
                {"type": "PodScheduled", "status": "True"}
            ])
        );
    }

    #[test]
    fn delete_from_primitive_list_ignores_strategy() {
        let t = merge_item();
        check(
            &t,
            json!({"nonMergingIntList": [1, 2, 3, 2]}),
            json!({"$deleteFromPrimitiveList/nonMergingIntList": [2]}),
            json!({"nonMergingIntList": [1, 3]}),
        );
        // nothing to delete from: nothing is created
        check(
            &t,
            json!({}),
            json!({"$deleteFromPrimitiveList/mergingIntList": [2]}),
            json!({}),
        );
    }

    // ---- directives never stored ---------------------------------------------------------

    fn assert_no_directives(v: &Value) {
        match v {
            Value::Object(m) => {
                for (k, v) in m {
                    assert!(
                        !(k == "$patch"
                            || k == "$retainKeys"
                            || k.starts_with("$setElementOrder")
                            || k.starts_with("$deleteFromPrimitiveList")),
                        "directive {k} in output"
                    );
                    assert_no_directives(v);
                }
            }
            Value::Array(a) => a.iter().for_each(assert_no_directives),
            _ => {}
        }
    }

    #[test]
    fn directives_in_new_fields_are_never_stored() {
        let t = pod();
        let original =
            json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "app"}]}});
        let out = ok(
            &t,
            original,
            json!({
                "metadata": {"labels": {"a": "b", "gone": null}, "annotations": {"$patch": "replace", "x": "y"}},
                "spec": {
                    "volumes": [
                        {"name": "v", "$retainKeys": ["name", "emptyDir"], "emptyDir": {}},
                        {"name": "w", "$patch": "delete"}
                    ],
                    "nodeSelector": {"$setElementOrder/x": [], "$deleteFromPrimitiveList/y": [1], "k": "v"},
                    "containers": [{
                        "name": "new",
                        "$setElementOrder/ports": [{"containerPort": 1}],
                        "ports": [{"containerPort": 1}],
                        "resources": {"$patch": "delete", "limits": {"cpu": "1"}},
                        "env": [{"name": "E", "value": null}]
                    }]
                }
            }),
        );
        assert_no_directives(&out);
        assert_eq!(at(&out, "/metadata/labels"), &json!({"a": "b"}));
        // upstream removeDirectives drops a new map carrying $patch entirely
        assert!(out.pointer("/metadata/annotations").is_none());
        assert_eq!(
            at(&out, "/spec/volumes"),
            &json!([{"name": "v", "emptyDir": {}}])
        );
        assert_eq!(at(&out, "/spec/nodeSelector"), &json!({"k": "v"}));
        assert_eq!(
            at(&out, "/spec/containers/0"),
            &json!({"name": "new", "ports": [{"containerPort": 1}], "resources": {"limits": {"cpu": "1"}}, "env": [{"name": "E"}]})
        );
    }

    #[test]
    fn directives_in_replaced_values_are_never_stored() {
        let t = pod();
        let out = ok(
            &t,
            base_pod(),
            json!({
                "spec": {
                    "tolerations": [{"key": "k", "$patch": "delete", "$retainKeys": ["key"]}],
                    "containers": [
                        {"$patch": "replace"},
                        {"name": "x", "env": [{"name": "A", "$patch": "delete"}], "args": null}
                    ]
                },
                "metadata": {"labels": {"$patch": "replace", "$retainKeys": ["a"], "a": "1", "b": null}}
            }),
        );
        assert_no_directives(&out);
        assert_eq!(at(&out, "/spec/tolerations"), &json!([{"key": "k"}]));
        assert_eq!(
            at(&out, "/spec/containers"),
            &json!([{"name": "x", "env": [{"name": "A"}]}])
        );
        assert_eq!(at(&out, "/metadata/labels"), &json!({"a": "1"}));
    }

    // ---- errors --------------------------------------------------------------------------

    #[test]
    fn error_unknown_patch_directive_on_map() {
        let t = pod();
        let e = err(
            &t,
            base_pod(),
            json!({"metadata": {"labels": {"$patch": "foo", "a": "b"}}}),
        );
        assert_eq!(
            e.to_string(),
            "unknown patch type: foo in map: map[$patch:foo a:b]"
        );
        assert_eq!(e.http_status(), 500);
        // upstream has no `merge` for maps either
        let e = err(&t, base_pod(), json!({"spec": {"$patch": "merge"}}));
        assert!(matches!(e, SmpError::BadPatchType { .. }), "{e}");
        let e = err(&t, base_pod(), json!({"$patch": 5}));
        assert_eq!(
            e.to_string(),
            "unknown patch type: %!s(int64=5) in map: map[$patch:5]"
        );
    }

    #[test]
    fn error_unknown_patch_directive_in_list() {
        let t = pod();
        let e = err(
            &t,
            base_pod(),
            json!({"spec": {"containers": [{"name": "app", "$patch": "nope"}]}}),
        );
        assert_eq!(
            e.to_string(),
            "unknown patch type: nope in map: map[$patch:nope name:app]"
        );
        let e = err(
            &t,
            base_pod(),
            json!({"spec": {"containers": [{"name": "app", "$patch": "merge"}]}}),
        );
        assert_eq!(e, SmpError::MergeListDirective);
        let e = err(
            &t,
            base_pod(),
            json!({"spec": {"containers": [{"$patch": "delete"}]}}),
        );
        assert_eq!(
            e.to_string(),
            "map: map[$patch:delete] does not contain declared merge key: name"
        );
    }

    #[test]
    fn error_missing_merge_key_in_pod() {
        let t = pod();
        let e = err(
            &t,
            base_pod(),
            json!({"spec": {"containers": [{"image": "nginx:1.25"}]}}),
        );
        assert_eq!(
            e.to_string(),
            "map: map[image:nginx:1.25] does not contain declared merge key: name"
        );
        // a server-side item without its merge key fails too
        let e = err(
            &t,
            json!({"spec": {"imagePullSecrets": [{}]}}),
            json!({"spec": {"imagePullSecrets": [{"name": "s"}]}}),
        );
        assert!(matches!(e, SmpError::NoMergeKey { .. }), "{e}");
    }

    #[test]
    fn error_non_map_items_in_keyed_list() {
        let t = pod();
        let e = err(&t, base_pod(), json!({"spec": {"containers": ["app"]}}));
        assert!(matches!(e, SmpError::ElementTypesNotIdentical(_)), "{e}");
        assert!(
            e.to_string()
                .starts_with("list element types are not identical: [["),
            "{e}"
        );
        let e = err(
            &t,
            json!({"spec": {"containers": []}}),
            json!({"spec": {"containers": ["app"]}}),
        );
        assert_eq!(
            e,
            SmpError::BadArgType {
                expected: "map[string]interface {}",
                actual: "string"
            }
        );
        assert_eq!(
            e.to_string(),
            "expected a map[string]interface {}, but received a string"
        );
    }

    #[test]
    fn error_lists_of_lists() {
        let t = pod();
        let e = err(
            &t,
            json!({"metadata": {"finalizers": []}}),
            json!({"metadata": {"finalizers": [["x"]]}}),
        );
        assert_eq!(e, SmpError::NoListOfLists);
        assert_eq!(e.http_status(), 422);
    }

    #[test]
    fn error_malformed_parallel_list_keys() {
        let t = pod();
        let e = err(
            &t,
            base_pod(),
            json!({"metadata": {"$deleteFromPrimitiveListfinalizers": ["a"]}}),
        );
        assert_eq!(e, SmpError::BadPatchFormatForPrimitiveList);
        assert_eq!(e.http_status(), 400);
        let e = err(
            &t,
            base_pod(),
            json!({"metadata": {"$setElementOrder": ["a"]}}),
        );
        assert_eq!(e, SmpError::BadPatchFormatForSetElementOrderList);
        let e = err(
            &t,
            base_pod(),
            json!({"metadata": {"$setElementOrder/finalizers": "a"}}),
        );
        assert_eq!(
            e.to_string(),
            "expected a []interface {}, but received a string"
        );
        let e = err(
            &t,
            json!({"metadata": {"finalizers": []}}),
            json!({"metadata": {"$setElementOrder/finalizers": []}}),
        );
        assert_eq!(e, SmpError::NoElements);
    }

    #[test]
    fn error_patch_not_an_object() {
        let t = pod();
        let e = err(&t, base_pod(), json!(["a"]));
        assert_eq!(
            e.to_string(),
            "json: cannot unmarshal array into Go value of type map[string]interface {}"
        );
        assert_eq!(e.http_status(), 400);
        assert_eq!(err(&t, json!("x"), json!({})), SmpError::BadJsonDoc);
        // a JSON null patch decodes to an empty map: nothing changes
        assert_eq!(ok(&t, base_pod(), Value::Null), base_pod());
    }

    #[test]
    fn error_uncomparable_merge_key_values_do_not_panic() {
        let t = pod();
        let e = err(
            &t,
            json!({"spec": {"containers": [{"name": {"a": 1}}]}}),
            json!({"spec": {"containers": [{"name": {"a": 1}}]}}),
        );
        assert!(matches!(e, SmpError::Internal(_)), "{e}");
        assert_eq!(e.http_status(), 500);
        let e = err(
            &t,
            json!({"metadata": {"finalizers": []}}),
            json!({"metadata": {"finalizers": [null]}}),
        );
        assert!(matches!(e, SmpError::Internal(_)), "{e}");
    }

    #[test]
    fn error_too_deep() {
        let mut deep = json!(1);
        for _ in 0..MAX_DEPTH + 5 {
            deep = json!({ "a": deep });
        }
        let e = err(&pod(), json!({}), deep);
        assert_eq!(e, SmpError::TooDeep);
        let mut ok_depth = json!(1);
        for _ in 0..MAX_DEPTH - 2 {
            ok_depth = json!({ "a": ok_depth });
        }
        let out = untyped(ok_depth.clone(), ok_depth.clone());
        assert_eq!(out, ok_depth);
    }

    // ---- untyped: JSON merge patch -------------------------------------------------------

    #[test]
    fn untyped_is_json_merge_patch_rfc7386() {
        let cases = [
            (json!({"a": "b"}), json!({"a": "c"}), json!({"a": "c"})),
            (
                json!({"a": "b"}),
                json!({"b": "c"}),
                json!({"a": "b", "b": "c"}),
            ),
            (json!({"a": "b"}), json!({"a": null}), json!({})),
            (
                json!({"a": "b", "b": "c"}),
                json!({"a": null}),
                json!({"b": "c"}),
            ),
            (json!({"a": ["b"]}), json!({"a": "c"}), json!({"a": "c"})),
            (json!({"a": "c"}), json!({"a": ["b"]}), json!({"a": ["b"]})),
            (
                json!({"a": {"b": "c"}}),
                json!({"a": {"b": "d", "c": null}}),
                json!({"a": {"b": "d"}}),
            ),
            (
                json!({"a": [{"b": "c"}]}),
                json!({"a": [1]}),
                json!({"a": [1]}),
            ),
            (
                json!({"e": null}),
                json!({"a": 1}),
                json!({"e": null, "a": 1}),
            ),
            (
                json!({}),
                json!({"a": {"bb": {"ccc": null}}}),
                json!({"a": {"bb": {}}}),
            ),
        ];
        for (original, patch, expected) in cases {
            assert_eq!(
                untyped(original.clone(), patch.clone()),
                expected,
                "{original} + {patch}"
            );
        }
    }

    #[test]
    fn untyped_subtree_inside_typed_object() {
        let t = pod();
        let original = json!({"spec": {"containers": [{
            "name": "app",
            "env": [{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "x", "apiVersion": "v1"}, "list": [1, 2]}}]
        }]}});
        let out = ok(
            &t,
            original,
            json!({"spec": {"containers": [{
                "name": "app",
                "env": [{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "y"}, "list": [3]}}]
            }]}}),
        );
        assert_eq!(
            at(&out, "/spec/containers/0/env/0/valueFrom"),
            &json!({"fieldRef": {"fieldPath": "y", "apiVersion": "v1"}, "list": [3]})
        );
    }

    #[test]
    fn atomic_map_does_not_change_smp() {
        let mut b = B::default();
        let s = b.scalar();
        let inner = b.s.push(Node {
            shape: Shape::Object {
                fields: BTreeMap::from([("a".to_owned(), s), ("b".to_owned(), s)]),
                additional: None,
            },
            atomic_map: true,
            ..Node::default()
        });
        let root = b.obj(&[("m", inner)]);
        let t = (b.s, root);
        check(
            &t,
            json!({"m": {"a": 1, "b": 2}}),
            json!({"m": {"b": 3}}),
            json!({"m": {"a": 1, "b": 3}}),
        );
    }

    // ---- Go compatibility helpers --------------------------------------------------------

    #[test]
    fn go_float_formatting_matches_fmt_v() {
        let cases = [
            (1.5, "1.5"),
            (1e6, "1e+06"),
            (123456.0, "123456"),
            (1234567.0, "1.234567e+06"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (-2.25, "-2.25"),
            (1e21, "1e+21"),
        ];
        for (f, s) in cases {
            assert_eq!(go_float(f), s, "{f}");
        }
        let t = merge_item();
        let e = err(
            &t,
            json!({"mergingList": [{"name": 1}]}),
            json!({"mergingList": [{"value": 2.5}]}),
        );
        assert_eq!(
            e.to_string(),
            "map: map[value:2.5] does not contain declared merge key: name"
        );
    }

    #[test]
    fn go_stable_sort_matches_std_for_consistent_order() {
        let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
        for n in [0usize, 1, 2, 5, 19, 20, 21, 39, 40, 41, 64, 100, 257] {
            for _ in 0..5 {
                let mut v: Vec<(u64, usize)> = (0..n)
                    .map(|i| {
                        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                        ((seed >> 33) % 7, i)
                    })
                    .collect();
                let mut expected = v.clone();
                expected.sort_by_key(|x| x.0);
                go_stable_sort(&mut v, &|a, b| a.0 < b.0);
                assert_eq!(v, expected, "n={n}");
            }
        }
    }

    #[test]
    fn go_stable_sort_with_upstream_comparator_does_not_panic() {
        // upstream's "not found sorts first" comparator reverses items it cannot find
        let mut v = vec![(None, 'a'), (None, 'b'), (None, 'c')];
        go_stable_sort(&mut v, &|x: &(Option<usize>, char), y| match (x.0, y.0) {
            (Some(a), Some(b)) => a < b,
            _ => true,
        });
        assert_eq!(v, vec![(None, 'c'), (None, 'b'), (None, 'a')]);
        for n in [3usize, 25, 70] {
            let mut v: Vec<(Option<usize>, usize)> = (0..n)
                .map(|i| (if i % 3 == 0 { None } else { Some(n - i) }, i))
                .collect();
            go_stable_sort(&mut v, &|x, y| match (x.0, y.0) {
                (Some(a), Some(b)) => a < b,
                _ => true,
            });
            assert_eq!(v.len(), n);
        }
    }

    /// Many odd combinations: every one must return, none may panic.
    #[test]
    fn odd_inputs_never_panic() {
        let fragments = [
            json!(null),
            json!(1),
            json!(1.5),
            json!("s"),
            json!(true),
            json!([]),
            json!({}),
            json!([null]),
            json!([1, "a"]),
            json!([[1]]),
            json!([{"name": "app"}]),
            json!([{"name": "app", "$patch": "delete"}]),
            json!([{"$patch": "replace"}]),
            json!([{"$patch": 3}]),
            json!({"$patch": "delete"}),
            json!({"$patch": ["x"]}),
            json!({"$retainKeys": [{"a": 1}]}),
            json!({"$retainKeys": ["name"], "name": "x"}),
            json!([{"name": {"x": 1}}]),
            json!([{"name": [1]}]),
        ];
        let keys = [
            "containers",
            "finalizers",
            "labels",
            "$setElementOrder/containers",
            "$setElementOrder/finalizers",
            "$deleteFromPrimitiveList/finalizers",
            "$deleteFromPrimitiveList/containers",
            "$setElementOrder/",
            "$deleteFromPrimitiveList/",
            "$retainKeys",
            "$patch",
        ];
        let t = pod();
        let originals = [
            base_pod(),
            json!({}),
            json!({"spec": {"containers": [{"name": "app"}, {"name": "x"}]}, "metadata": {"finalizers": ["a"]}}),
        ];
        let mut runs = 0;
        for original in &originals {
            for k1 in keys {
                for f1 in &fragments {
                    for k2 in ["containers", "$setElementOrder/containers", "finalizers"] {
                        for f2 in &fragments {
                            let mut inner = serde_json::Map::new();
                            inner.insert(k1.to_owned(), f1.clone());
                            inner.insert(k2.to_owned(), f2.clone());
                            let section = if k1.contains("finalizers") || k1 == "labels" {
                                "metadata"
                            } else {
                                "spec"
                            };
                            let patch = json!({ section: Value::Object(inner) });
                            match apply(&t.0, Some(t.1), original, &patch) {
                                Ok(v) => assert_no_directives(&v),
                                Err(e) => assert!(!e.to_string().is_empty()),
                            }
                            let _ = apply(&Schema::default(), None, original, &patch);
                            runs += 1;
                        }
                    }
                }
            }
        }
        assert!(runs > 10_000);
    }
}
