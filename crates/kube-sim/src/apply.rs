//! Server-side apply and `metadata.managedFields` tracking, as kube-apiserver does it.
//!
//! This is a port of the parts of `sigs.k8s.io/structured-merge-diff` (`merge/update.go`,
//! `typed/{merge,compare,remove,tofieldset,validate}.go`, `fieldpath/*`) and of apimachinery's
//! field manager chain (`pkg/util/managedfields/internal`: version check, last-applied
//! upgrade/sync, skip-non-applied, cap-managers, build-manager-info, managed-fields updater,
//! strip-meta, structured merge) that the simulator needs:
//!
//! * [`apply`] merges an applied configuration into the live object, detects conflicts with
//!   other managers, prunes fields the applier stopped applying, and rewrites
//!   `metadata.managedFields`.
//! * [`record_update`] records a non-apply write (create, update, any patch) in
//!   `metadata.managedFields` with operation `Update`.
//!
//! Field sets are kept in the same shape as SMD's `fieldpath.Set` (members plus children,
//! ordered like `PathElement.Compare`), and serialised to `FieldsV1` the way SMD does
//! (`f:`, `k:`, `v:`, `i:` keys, `"."` first for a node that is both owned and has owned
//! children). Schema nodes come from [`super::schema`]; `None` (or an untyped node) means the
//! "deduced" type: maps merge per key, lists are atomic, scalars are leaves.
//!
//! Pure: no I/O, no globals, no clock (times are passed in), no panics on any JSON input.
//! A [`NodeId`] must belong to the [`Schema`] it is used with.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde_json::{Map, Number, Value};

use super::schema::{ListType, NodeId, Schema, Shape};
use super::selector::go_quote;

/// Annotation kubectl client-side apply keeps its last applied configuration in.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";
/// Manager that owns what existed before an object's first apply (skipnonapplied.go).
const BEFORE_FIRST_APPLY: &str = "before-first-apply";
/// Bucket the oldest Update entries are merged into (capmanagers.go).
const ANCIENT_CHANGES: &str = "ancient-changes";
/// `DefaultMaxUpdateManagers` in fieldmanager.go.
const MAX_UPDATE_MANAGERS: usize = 10;
/// `TotalAnnotationSizeLimitB` in apimachinery validation.
const MAX_ANNOTATIONS_BYTES: usize = 256 * 1024;
/// Objects nested deeper than this are refused instead of risking the stack.
const MAX_DEPTH: usize = 256;

// ---------------------------------------------------------------------------------------------
// Public API
// ---------------------------------------------------------------------------------------------

/// The writer of a request, as the field manager sees it.
#[derive(Debug, Clone, Copy)]
pub struct Manager<'a> {
    /// `fieldManager` (an empty name is recorded as `unknown`, like the apiserver does).
    pub name: &'a str,
    /// Group/version of the endpoint written to, e.g. `coordination.k8s.io/v1` or `v1`.
    pub api_version: &'a str,
    /// Time of the write, RFC 3339 in whole seconds with `Z`.
    pub time: &'a str,
    /// Subresource written to (`status`, `scale`, ...), `None` for the main resource.
    pub subresource: Option<&'a str>,
}

/// One field another manager owns that the apply would change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// The other manager's name.
    pub manager: String,
    /// The other manager's operation, `Apply` or `Update`.
    pub operation: String,
    /// The other manager's apiVersion.
    pub api_version: String,
    /// The other manager's subresource, empty for the main resource.
    pub subresource: String,
    /// The conflicting field, e.g. `.spec.holderIdentity` or `.spec.containers[name="c"].image`.
    pub field: String,
}

/// Why an apply was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApplyError {
    /// Fields owned by other managers would change: 409 Conflict with `FieldManagerConflict`
    /// causes.
    #[error("{}", conflicts_message(.0))]
    Conflict(Vec<Conflict>),
    /// The request is malformed: 400 BadRequest (e.g. `metadata.managedFields must be nil`,
    /// `invalid object type: ...`).
    #[error("{0}")]
    Invalid(String),
    /// What the apiserver reports as a plain (non-Status) error, i.e. 500 with no reason:
    /// `failed to create typed patch object (...)` for configs that don't fit the schema,
    /// `failed to decode managed fields: ...` for corrupt live managedFields.
    #[error("{0}")]
    Internal(String),
}

impl ApplyError {
    /// The Status message the apiserver sends, e.g. `Apply failed with 1 conflict: conflict
    /// with "kubectl" using coordination.k8s.io/v1: .spec.holderIdentity`.
    pub fn message(&self) -> String {
        self.to_string()
    }

    /// Status `details.causes` as `(reason, message, field)`: one
    /// `("FieldManagerConflict", "conflict with \"m\" using v1", ".spec.x")` per conflict.
    pub fn causes(&self) -> Vec<(String, String, String)> {
        match self {
            ApplyError::Conflict(cs) => cs
                .iter()
                .map(|c| {
                    (
                        "FieldManagerConflict".to_owned(),
                        format!("conflict with {}", print_manager(c)),
                        c.field.clone(),
                    )
                })
                .collect(),
            _ => Vec::new(),
        }
    }
}

/// Server-side apply: merges `applied` (the user's partial config; must include apiVersion,
/// kind, metadata.name) into `live` (None = object does not exist yet) and returns the new
/// full object with an updated `metadata.managedFields`.
///
/// `node` is the schema root of the kind (`None`: deduced/untyped). `force` takes ownership of
/// conflicting fields instead of failing. The caller still owns name/namespace/uid/
/// resourceVersion handling, defaulting, validation and admission.
pub fn apply(
    schema: &Schema,
    node: Option<NodeId>,
    live: Option<&Value>,
    applied: &Value,
    mgr: &Manager,
    force: bool,
) -> Result<Value, ApplyError> {
    let applied: Value = match applied {
        Value::Object(_) => applied.clone(),
        // `yaml.Unmarshal("null", &map)` leaves the map empty.
        Value::Null => Value::Object(Map::new()),
        other => {
            return Err(ApplyError::Invalid(format!(
                "error decoding YAML: error unmarshaling JSON: while decoding JSON: json: \
                 cannot unmarshal {} into Go value of type map[string]interface {{}}",
                go_type_name(other)
            )));
        }
    };
    let live = live.filter(|l| l.is_object());
    if !depth_ok(&applied) || live.is_some_and(|l| !depth_ok(l)) {
        return Err(ApplyError::Invalid(format!(
            "object nesting exceeds {MAX_DEPTH} levels"
        )));
    }

    // FieldManager.Apply: the live managedFields must decode.
    let managed = match live {
        Some(l) => decode_managed(managed_fields_of(l))
            .map_err(|e| ApplyError::Internal(format!("failed to decode managed fields: {e}")))?,
        None => Managed::default(),
    };

    // versionCheckManager: the applied object must be of the endpoint's kind and version.
    let applied_gvk = gvk_of(&applied);
    let (eg, ev) = parse_group_version(mgr.api_version).unwrap_or_default();
    let kind_ok = match live
        .and_then(|l| l.get("kind"))
        .and_then(Value::as_str)
        .filter(|k| !k.is_empty())
    {
        Some(k) => applied_gvk.2 == k,
        None => match (
            node,
            schema.kind(&applied_gvk.0, &applied_gvk.1, &applied_gvk.2),
        ) {
            (Some(n), Some(k)) => n == k,
            _ => true,
        },
    };
    if applied_gvk.2.is_empty() || applied_gvk.0 != eg || applied_gvk.1 != ev || !kind_ok {
        return Err(ApplyError::Invalid(format!(
            "invalid object type: {}",
            gvk_string(&applied_gvk)
        )));
    }

    // structuredMergeManager.Apply.
    if applied_has_managed_fields(&applied) {
        return Err(ApplyError::Invalid(
            "metadata.managedFields must be nil".to_owned(),
        ));
    }
    let cx = Cx::new(schema, node, mgr);
    let mut errs = Vec::new();
    validate(schema, node, &applied, &mut Vec::new(), &mut errs);
    if !errs.is_empty() {
        return Err(ApplyError::Internal(format!(
            "failed to create typed patch object ({}/{}; {}): {}",
            meta_str(&applied, "namespace"),
            meta_str(&applied, "name"),
            gvk_string(&applied_gvk),
            validation_errors_string(&errs)
        )));
    }

    let live_base = match live {
        Some(l) => without_managed_fields(l),
        None => Value::Object(Map::new()),
    };

    // lastAppliedManager: kubectl may take over fields client-side apply set.
    let (mut object, managed) = match apply_inner(&cx, &live_base, &applied, &managed, force) {
        Ok(done) => done,
        Err(conflicts) => {
            let allowed = if mgr.name == "kubectl" {
                allowed_from_last_applied(&cx, &live_base)
            } else {
                None
            };
            let Some(allowed) = allowed else {
                return Err(ApplyError::Conflict(public_conflicts(&conflicts)));
            };
            let remaining: Vec<RawConflict> = conflicts
                .into_iter()
                .filter(|c| !allowed.has(&c.path))
                .collect();
            if !remaining.is_empty() {
                return Err(ApplyError::Conflict(public_conflicts(&remaining)));
            }
            apply_inner(&cx, &live_base, &applied, &managed, true)
                .map_err(|c| ApplyError::Conflict(public_conflicts(&c)))?
        }
    };

    // lastAppliedUpdater: keep kubectl's client-side annotation in sync.
    if mgr.name == "kubectl" && has_last_applied(&object) {
        set_last_applied(&mut object, &build_last_applied(&applied));
    }
    encode_managed(&mut object, &managed);
    Ok(object)
}

/// Records a non-apply write (PUT, merge/JSON/strategic patch, create): fields that changed
/// between `old` and `new` become owned by `mgr` with operation "Update" (and are removed from
/// other managers' sets); returns `new` with updated metadata.managedFields. Never conflicts.
///
/// Like the apiserver: `new`'s own managedFields win when they decode and are non-empty (a
/// client may write them); `[]` or `[{}]` resets tracking; an existing object (with a uid)
/// that has no managedFields stays untracked until its first apply; subresource writes always
/// start from `old`'s managedFields.
pub fn record_update(
    schema: &Schema,
    node: Option<NodeId>,
    old: Option<&Value>,
    new: &Value,
    mgr: &Manager,
) -> Value {
    let mut out = new.clone();
    if !out.is_object() {
        return out;
    }
    let old = old.filter(|o| o.is_object());
    if !depth_ok(new) || old.is_some_and(|o| !depth_ok(o)) {
        // UpdateNoErrors: keep the live managedFields.
        let live_fields = old.and_then(managed_fields_of).cloned();
        set_managed_fields_raw(&mut out, live_fields);
        return out;
    }
    let is_subresource = mgr.subresource.is_some_and(|s| !s.is_empty());
    let mut managed = decode_live_or_new(old, new, is_subresource);
    remove_managed_fields(&mut out);

    // skipNonAppliedManager: an existing untracked object stays untracked.
    let has_uid = old
        .and_then(|o| o.get("metadata"))
        .and_then(|m| m.get("uid"))
        .and_then(Value::as_str)
        .is_some_and(|u| !u.is_empty());
    if managed.fields.is_empty() && has_uid {
        return out;
    }

    let cx = Cx::new(schema, node, mgr);
    let mut old_base = match old {
        Some(o) => without_managed_fields(o),
        None => Value::Object(Map::new()),
    };
    // In the Go types `metadata`, `spec` and `status` are struct values, not pointers: they
    // exist (empty) on every object, so creating them is no change and earns no "." entry.
    if let (Some(base), Some(newest)) = (old_base.as_object_mut(), out.as_object()) {
        for k in ["metadata", "spec", "status"] {
            if newest.get(k).is_some_and(Value::is_object) {
                base.entry(k).or_insert_with(|| Value::Object(Map::new()));
            }
        }
        // Likewise a field without `omitempty`: a Pod's `spec.containers` is `null` in the
        // zero Pod, so creating the list earns no "." either (found by the real tier).
        let is_pod = newest.get("kind").and_then(Value::as_str) == Some("Pod")
            && newest.get("apiVersion").and_then(Value::as_str) == Some("v1");
        if is_pod && let Some(spec) = base.get_mut("spec").and_then(Value::as_object_mut) {
            spec.entry("containers").or_insert(Value::Null);
        }
    }
    let id = cx.update_id(&cx.name);
    update_stack(&cx, &old_base, &out, &mut managed, &id);
    encode_managed(&mut out, &managed);
    out
}

// ---------------------------------------------------------------------------------------------
// The field manager chain
// ---------------------------------------------------------------------------------------------

/// Per-request context.
struct Cx<'s> {
    schema: &'s Schema,
    root: Ty,
    name: String,
    api_version: String,
    subresource: String,
    time: String,
}

impl<'s> Cx<'s> {
    fn new(schema: &'s Schema, root: Ty, mgr: &Manager) -> Self {
        let name = if mgr.name.is_empty() {
            "unknown".to_owned()
        } else {
            mgr.name.to_owned()
        };
        Cx {
            schema,
            root,
            name,
            api_version: mgr.api_version.to_owned(),
            subresource: mgr.subresource.unwrap_or("").to_owned(),
            time: normalize_time(mgr.time).0,
        }
    }

    fn update_id(&self, manager: &str) -> Id {
        Id {
            manager: manager.to_owned(),
            apply: false,
            api_version: self.api_version.clone(),
            subresource: self.subresource.clone(),
        }
    }

    fn apply_id(&self) -> Id {
        Id {
            manager: self.name.clone(),
            apply: true,
            api_version: String::new(),
            subresource: self.subresource.clone(),
        }
    }
}

/// skipNonApplied → buildManagerInfo → managedFieldsUpdater → stripMeta → SMD `Updater.Apply`.
fn apply_inner(
    cx: &Cx,
    live: &Value,
    applied: &Value,
    managed: &Managed,
    force: bool,
) -> Result<(Value, Managed), Vec<RawConflict>> {
    let mut managed = managed.clone();
    if managed.fields.is_empty() {
        // Whatever exists before the first apply is owned by "before-first-apply".
        let empty = Value::Object(Map::new());
        update_stack(
            cx,
            &empty,
            live,
            &mut managed,
            &cx.update_id(BEFORE_FIRST_APPLY),
        );
    }
    let id = cx.apply_id();
    let merged = merge(cx.schema, cx.root, live, applied);
    let last = managed.fields.get(&id).map(|e| e.set.clone());
    let set = to_field_set(cx, applied);
    managed.fields.insert(
        id.clone(),
        Entry {
            set,
            api_version: cx.api_version.clone(),
            applied: true,
        },
    );
    let merged = prune(cx, merged, &managed, last.as_ref());
    smd_update(cx, live, &merged, &mut managed, Some(&id), force)?;
    let noop = value_eq(live, &merged);
    strip_entry(&mut managed, &id);
    if !noop {
        managed.times.insert(id, cx.time.clone());
    }
    Ok((if noop { live.clone() } else { merged }, managed))
}

/// capManagers → buildManagerInfo → managedFieldsUpdater → stripMeta → SMD `Updater.Update`.
fn update_stack(cx: &Cx, old: &Value, new: &Value, managed: &mut Managed, id: &Id) {
    // SMD runs the update as a fresh "current-operation" manager, so the writer's previous
    // entry loses changed fields like everyone else's before being re-merged below.
    let Ok(cmp) = smd_update(cx, old, new, managed, None, true) else {
        return;
    };
    let own = Set::default()
        .union(&cmp.modified)
        .union(&cmp.added)
        .difference(&cmp.removed)
        .difference(&strip_set());
    if !own.is_empty() {
        let set = match managed.fields.remove(id) {
            Some(previous) => own.union(&previous.set),
            None => own,
        };
        managed.fields.insert(
            id.clone(),
            Entry {
                set,
                api_version: cx.api_version.clone(),
                applied: false,
            },
        );
        managed.times.insert(id.clone(), cx.time.clone());
    }
    cap_update_managers(managed);
}

/// SMD `Updater.update`: other managers lose fields that changed (or conflict, unless
/// `force`) and fields that were removed; empty managers are dropped.
fn smd_update(
    cx: &Cx,
    old: &Value,
    new: &Value,
    managed: &mut Managed,
    workflow: Option<&Id>,
    force: bool,
) -> Result<Comparison, Vec<RawConflict>> {
    let cmp = compare_root(cx, old, new);
    let changed = cmp.modified.union(&cmp.added);
    let mut conflicts: Vec<(Id, Set)> = Vec::new();
    for (id, entry) in &managed.fields {
        if Some(id) == workflow {
            continue;
        }
        let c = entry.set.intersection(&changed);
        if !c.is_empty() {
            conflicts.push((id.clone(), c));
        }
    }
    if !force && !conflicts.is_empty() {
        conflicts.sort_by_cached_key(|(id, _)| id_json(id));
        let mut out = Vec::new();
        for (id, set) in &conflicts {
            let api_version = managed
                .fields
                .get(id)
                .map(|e| e.api_version.clone())
                .unwrap_or_default();
            set.iterate(&mut Vec::new(), &mut |path| {
                out.push(RawConflict {
                    id: id.clone(),
                    api_version: api_version.clone(),
                    path: path.to_vec(),
                });
            });
        }
        return Err(out);
    }
    for (id, c) in &conflicts {
        if let Some(e) = managed.fields.get_mut(id) {
            e.set = e.set.difference(c);
        }
    }
    if !cmp.removed.is_empty() {
        for (id, e) in managed.fields.iter_mut() {
            if Some(id) != workflow {
                e.set = e.set.difference(&cmp.removed);
            }
        }
    }
    managed.fields.retain(|_, e| !e.set.is_empty());
    Ok(cmp)
}

/// A conflict before it is rendered for the API.
struct RawConflict {
    id: Id,
    api_version: String,
    path: Vec<Pe>,
}

fn public_conflicts(raw: &[RawConflict]) -> Vec<Conflict> {
    raw.iter()
        .map(|c| Conflict {
            manager: c.id.manager.clone(),
            operation: c.id.operation().to_owned(),
            api_version: c.api_version.clone(),
            subresource: c.id.subresource.clone(),
            field: path_string(&c.path),
        })
        .collect()
}

/// SMD `Updater.prune`: drop what the applier applied last time but not now, unless some
/// manager (applier or updater) still owns it.
fn prune(cx: &Cx, merged: Value, managed: &Managed, last: Option<&Set>) -> Value {
    let Some(last) = last.filter(|s| !s.is_empty()) else {
        return merged;
    };
    let s = cx.schema;
    let last_e = ensure_named(s, cx.root, last);
    let pruned = remove_root(cx, &merged, &last_e);

    // addBackOwnedItems
    let mut owned = Set::default();
    for e in managed.fields.values() {
        owned = owned.union(&e.set);
    }
    let merged_set = ensure_named(s, cx.root, &to_field_set(cx, &merged));
    let pruned_set = ensure_named(s, cx.root, &to_field_set(cx, &pruned));
    let owned = ensure_named(s, cx.root, &owned);
    let pruned = remove_root(
        cx,
        &merged,
        &merged_set.difference(&pruned_set.union(&owned)),
    );

    // addBackDanglingItems
    let pruned_set = ensure_named(s, cx.root, &to_field_set(cx, &pruned));
    remove_root(
        cx,
        &merged,
        &merged_set.difference(&pruned_set).intersection(&last_e),
    )
}

/// stripMetaManager: these fields are never owned.
fn strip_set() -> Set {
    let mut s = Set::default();
    for f in ["apiVersion", "kind", "metadata"] {
        s.insert(&[Pe::Field(f.to_owned())]);
    }
    for f in [
        "name",
        "namespace",
        "creationTimestamp",
        "selfLink",
        "uid",
        "clusterName",
        "generation",
        "managedFields",
        "resourceVersion",
    ] {
        s.insert(&[Pe::Field("metadata".to_owned()), Pe::Field(f.to_owned())]);
    }
    s
}

fn strip_entry(managed: &mut Managed, id: &Id) {
    if let Some(e) = managed.fields.get_mut(id) {
        e.set = e.set.difference(&strip_set());
        if e.set.is_empty() {
            managed.fields.remove(id);
        }
    }
}

/// capManagersManager: at most ten Update entries; the oldest merge into per-version
/// `ancient-changes` buckets.
fn cap_update_managers(managed: &mut Managed) {
    let mut updaters: Vec<Id> = managed
        .fields
        .iter()
        .filter(|(_, e)| !e.applied)
        .map(|(id, _)| id.clone())
        .collect();
    if updaters.len() <= MAX_UPDATE_MANAGERS {
        return;
    }
    updaters.sort_by_cached_key(|id| (time_secs(managed.times.get(id)), id_json(id)));
    let mut first_by_version: BTreeMap<String, Id> = BTreeMap::new();
    let mut length = updaters.len();
    for m in &updaters {
        if length <= MAX_UPDATE_MANAGERS {
            break;
        }
        let Some(vs) = managed.fields.get(m).cloned() else {
            continue;
        };
        let time = managed.times.get(m).cloned();
        let version = vs.api_version.clone();
        let bucket = Id {
            manager: ANCIENT_CHANGES.to_owned(),
            apply: false,
            api_version: version.clone(),
            subresource: String::new(),
        };
        match first_by_version.get(&version).cloned() {
            Some(first) => {
                if !managed.fields.contains_key(&bucket)
                    && let Some(s) = managed.fields.remove(&first)
                {
                    managed.fields.insert(bucket.clone(), s);
                }
                if *m == bucket {
                    continue;
                }
                let bucket_set = managed
                    .fields
                    .get(&bucket)
                    .map(|e| e.set.clone())
                    .unwrap_or_default();
                managed.fields.insert(
                    bucket.clone(),
                    Entry {
                        set: vs.set.union(&bucket_set),
                        api_version: vs.api_version.clone(),
                        applied: vs.applied,
                    },
                );
                managed.fields.remove(m);
                length -= 1;
                match time {
                    Some(t) => managed.times.insert(bucket, t),
                    None => managed.times.remove(&bucket),
                };
            }
            None => {
                first_by_version.insert(version, m.clone());
            }
        }
    }
}

/// decodeLiveOrNew in fieldmanager.go.
fn decode_live_or_new(old: Option<&Value>, new: &Value, is_subresource: bool) -> Managed {
    let live_fields = old.and_then(managed_fields_of);
    if is_subresource {
        return decode_managed(live_fields).unwrap_or_default();
    }
    let new_fields = managed_fields_of(new);
    if is_reset_managed_fields(new_fields) {
        return Managed::default();
    }
    match decode_managed(new_fields) {
        Ok(m) if !m.fields.is_empty() => m,
        _ => decode_managed(live_fields).unwrap_or_default(),
    }
}

/// `[]` or `[{}]` clears managedFields.
fn is_reset_managed_fields(v: Option<&Value>) -> bool {
    match v {
        Some(Value::Array(items)) => match items.as_slice() {
            [] => true,
            [Value::Object(entry)] => entry
                .values()
                .all(|v| v.is_null() || v.as_str().is_some_and(str::is_empty)),
            _ => false,
        },
        _ => false,
    }
}

/// Unstructured `GetManagedFields() != nil`: a list whose items all look like entries.
fn applied_has_managed_fields(applied: &Value) -> bool {
    match applied.get("metadata").and_then(|m| m.get("managedFields")) {
        Some(Value::Array(items)) => items.iter().all(Value::is_object),
        _ => false,
    }
}

// ---------------------------------------------------------------------------------------------
// kubectl client-side apply interop (lastappliedmanager.go, lastappliedupdater.go)
// ---------------------------------------------------------------------------------------------

fn last_applied_of(obj: &Value) -> Option<&str> {
    obj.get("metadata")?
        .get("annotations")?
        .get(LAST_APPLIED)?
        .as_str()
        .filter(|s| !s.is_empty())
}

fn has_last_applied(obj: &Value) -> bool {
    let annotations = obj.get("metadata").and_then(|m| m.get("annotations"));
    let all_strings = annotations
        .and_then(Value::as_object)
        .is_some_and(|a| a.values().all(Value::is_string));
    all_strings && last_applied_of(obj).is_some()
}

/// Fields of the last-applied annotation that still match the live object: conflicts on
/// those are kubectl's own (client-side) and may be taken over.
fn allowed_from_last_applied(cx: &Cx, live: &Value) -> Option<Set> {
    let raw = last_applied_of(live)?;
    let obj: Value = serde_json::from_str(raw).ok()?;
    let map = obj.as_object()?;
    map.get("kind")
        .and_then(Value::as_str)
        .filter(|k| !k.is_empty())?;
    if map.get("apiVersion").and_then(Value::as_str).unwrap_or("") != cx.api_version {
        return None;
    }
    if !depth_ok(&obj) {
        return None;
    }
    let mut errs = Vec::new();
    validate(cx.schema, cx.root, &obj, &mut Vec::new(), &mut errs);
    if !errs.is_empty() {
        return None;
    }
    let set = to_field_set(cx, &obj);
    let cmp = compare_root(cx, &obj, live);
    Some(
        set.difference(&cmp.modified)
            .difference(&cmp.added)
            .difference(&cmp.removed),
    )
}

/// The applied config minus the annotation itself, as `json.Encoder` writes it.
fn build_last_applied(applied: &Value) -> String {
    let mut obj = applied.clone();
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        let strings = meta
            .get("annotations")
            .and_then(Value::as_object)
            .map(|a| a.values().all(Value::is_string));
        match strings {
            Some(true) => {
                if let Some(a) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
                    a.remove(LAST_APPLIED);
                }
            }
            // GetAnnotations() is nil, so SetAnnotations(nil) drops the field.
            _ => {
                meta.remove("annotations");
            }
        }
    }
    let mut out = String::new();
    go_json(&obj, &mut out);
    out.push('\n');
    out
}

fn set_last_applied(obj: &mut Value, value: &str) {
    let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    let mut annotations: Map<String, Value> = match meta.get("annotations") {
        Some(Value::Object(a)) if a.values().all(Value::is_string) => a.clone(),
        _ => Map::new(),
    };
    annotations.insert(LAST_APPLIED.to_owned(), Value::String(value.to_owned()));
    let size: usize = annotations
        .iter()
        .map(|(k, v)| k.len() + v.as_str().map_or(0, str::len))
        .sum();
    if size > MAX_ANNOTATIONS_BYTES {
        annotations.remove(LAST_APPLIED);
    }
    meta.insert("annotations".to_owned(), Value::Object(annotations));
}

// ---------------------------------------------------------------------------------------------
// managedFields encoding (managedfields.go)
// ---------------------------------------------------------------------------------------------

/// Manager identifier (`BuildManagerIdentifier`): Apply entries leave out the apiVersion.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Id {
    manager: String,
    apply: bool,
    api_version: String,
    subresource: String,
}

impl Id {
    fn operation(&self) -> &'static str {
        if self.apply { "Apply" } else { "Update" }
    }
}

/// The identifier as the apiserver spells it (JSON of the stripped entry); used for ordering.
fn id_json(id: &Id) -> String {
    identifier_json(
        &id.manager,
        id.operation(),
        &id.api_version,
        &id.subresource,
    )
}

fn identifier_json(manager: &str, operation: &str, api_version: &str, subresource: &str) -> String {
    let mut m = Map::new();
    if !manager.is_empty() {
        m.insert("manager".to_owned(), Value::String(manager.to_owned()));
    }
    m.insert("operation".to_owned(), Value::String(operation.to_owned()));
    if operation == "Update" && !api_version.is_empty() {
        m.insert(
            "apiVersion".to_owned(),
            Value::String(api_version.to_owned()),
        );
    }
    if !subresource.is_empty() {
        m.insert(
            "subresource".to_owned(),
            Value::String(subresource.to_owned()),
        );
    }
    // Struct field order, not sorted: encode by hand.
    let mut out = String::from("{");
    for (i, (k, v)) in m.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        go_json_str(k, &mut out);
        out.push(':');
        go_json(v, &mut out);
    }
    out.push('}');
    out
}

#[derive(Debug, Clone)]
struct Entry {
    set: Set,
    api_version: String,
    applied: bool,
}

#[derive(Debug, Clone, Default)]
struct Managed {
    fields: BTreeMap<Id, Entry>,
    times: BTreeMap<Id, String>,
}

fn managed_fields_of(obj: &Value) -> Option<&Value> {
    obj.get("metadata")?.get("managedFields")
}

fn without_managed_fields(obj: &Value) -> Value {
    let mut out = obj.clone();
    remove_managed_fields(&mut out);
    out
}

fn remove_managed_fields(obj: &mut Value) {
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
    }
}

fn set_managed_fields_raw(obj: &mut Value, fields: Option<Value>) {
    remove_managed_fields(obj);
    if let Some(f) = fields
        && let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut)
    {
        meta.insert("managedFields".to_owned(), f);
    }
}

/// DecodeManagedFields.
fn decode_managed(v: Option<&Value>) -> Result<Managed, String> {
    let mut managed = Managed::default();
    let items = match v {
        None | Some(Value::Null) => return Ok(managed),
        Some(Value::Array(items)) => items,
        Some(_) => return Err("managedFields must be a list".to_owned()),
    };
    for (i, item) in items.iter().enumerate() {
        let Value::Object(m) = item else {
            return Err(format!("managed fields entry {i} is not an object"));
        };
        let text = |key: &str| -> Result<String, String> {
            match m.get(key) {
                None | Some(Value::Null) => Ok(String::new()),
                Some(Value::String(s)) => Ok(s.clone()),
                Some(_) => Err(format!("managed fields entry {i}: {key} must be a string")),
            }
        };
        let manager = text("manager")?;
        let operation = text("operation")?;
        let api_version = text("apiVersion")?;
        let fields_type = text("fieldsType")?;
        let subresource = text("subresource")?;
        let time = text("time")?;
        let apply = match operation.as_str() {
            "Apply" => true,
            "Update" => false,
            _ => return Err("operation must be `Apply` or `Update`".to_owned()),
        };
        if api_version.is_empty() {
            return Err("apiVersion must not be empty".to_owned());
        }
        match fields_type.as_str() {
            "FieldsV1" => {}
            "" => return Err(format!("missing fieldsType in managed fields entry {i}")),
            other => {
                return Err(format!(
                    "invalid fieldsType {} in managed fields entry {i}",
                    go_quote(other)
                ));
            }
        }
        let set = match m.get("fieldsV1") {
            None | Some(Value::Null) => Set::default(),
            Some(f) => fields_to_set(f).map_err(|e| {
                format!("error decoding versioned set for {manager:?}: error decoding set: {e}")
            })?,
        };
        let id = Id {
            manager,
            apply,
            api_version: if apply {
                String::new()
            } else {
                api_version.clone()
            },
            subresource,
        };
        if time.is_empty() {
            managed.times.remove(&id);
        } else {
            managed.times.insert(id.clone(), normalize_time(&time).0);
        }
        managed.fields.insert(
            id,
            Entry {
                set,
                api_version,
                applied: apply,
            },
        );
    }
    Ok(managed)
}

/// EncodeObjectManagedFields: entries sorted like `sortEncodedManagedFields`; none → the
/// field is dropped.
fn encode_managed(obj: &mut Value, managed: &Managed) {
    remove_managed_fields(obj);
    if managed.fields.is_empty() {
        return;
    }
    let Some(root) = obj.as_object_mut() else {
        return;
    };
    let meta = root
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    let Some(meta) = meta.as_object_mut() else {
        return;
    };
    let mut entries: Vec<(&'static str, i64, &Id, &Entry, Option<&String>)> = managed
        .fields
        .iter()
        .map(|(id, e)| {
            let op = if e.applied { "Apply" } else { "Update" };
            let time = managed.times.get(id);
            (op, time_secs(time), id, e, time)
        })
        .collect();
    entries.sort_by(|a, b| {
        a.0.cmp(b.0)
            .then(a.1.cmp(&b.1))
            .then_with(|| a.2.manager.cmp(&b.2.manager))
            .then_with(|| a.3.api_version.cmp(&b.3.api_version))
            .then_with(|| a.2.subresource.cmp(&b.2.subresource))
    });
    let list = entries
        .into_iter()
        .map(|(op, _, id, e, time)| {
            let mut m = Map::new();
            if !id.manager.is_empty() {
                m.insert("manager".to_owned(), Value::String(id.manager.clone()));
            }
            m.insert("operation".to_owned(), Value::String(op.to_owned()));
            if !e.api_version.is_empty() {
                m.insert(
                    "apiVersion".to_owned(),
                    Value::String(e.api_version.clone()),
                );
            }
            if let Some(t) = time {
                m.insert("time".to_owned(), Value::String(t.clone()));
            }
            m.insert(
                "fieldsType".to_owned(),
                Value::String("FieldsV1".to_owned()),
            );
            m.insert("fieldsV1".to_owned(), set_to_fields(&e.set));
            if !id.subresource.is_empty() {
                m.insert(
                    "subresource".to_owned(),
                    Value::String(id.subresource.clone()),
                );
            }
            Value::Object(m)
        })
        .collect();
    meta.insert("managedFields".to_owned(), Value::Array(list));
}

// ---------------------------------------------------------------------------------------------
// Field sets (fieldpath)
// ---------------------------------------------------------------------------------------------

/// `fieldpath.PathElement`.
#[derive(Debug, Clone)]
enum Pe {
    /// A field of a map or struct (`f:`).
    Field(String),
    /// An associative-list item by its keys, sorted by name (`k:`).
    Key(Vec<(String, Value)>),
    /// A set item (`v:`).
    Value(Value),
    /// A list index (`i:`), only ever read from existing managedFields.
    Index(i64),
}

impl Pe {
    fn rank(&self) -> u8 {
        match self {
            Pe::Field(_) => 0,
            Pe::Key(_) => 1,
            Pe::Value(_) => 2,
            Pe::Index(_) => 3,
        }
    }
}

impl Ord for Pe {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (Pe::Field(a), Pe::Field(b)) => a.cmp(b),
            (Pe::Key(a), Pe::Key(b)) => cmp_field_lists(a, b),
            (Pe::Value(a), Pe::Value(b)) => cmp_value(a, b),
            (Pe::Index(a), Pe::Index(b)) => a.cmp(b),
            _ => self.rank().cmp(&other.rank()),
        }
    }
}

impl PartialOrd for Pe {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Pe {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Pe {}

fn cmp_field_lists(a: &[(String, Value)], b: &[(String, Value)]) -> Ordering {
    for (x, y) in a.iter().zip(b) {
        let c = x.0.cmp(&y.0).then_with(|| cmp_value(&x.1, &y.1));
        if c != Ordering::Equal {
            return c;
        }
    }
    a.len().cmp(&b.len())
}

/// `fieldpath.Set`: members are owned paths; children hold owned paths below a node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Set {
    members: BTreeSet<Pe>,
    children: BTreeMap<Pe, Set>,
}

impl Set {
    fn insert(&mut self, path: &[Pe]) {
        match path {
            [] => {}
            [last] => {
                self.members.insert(last.clone());
            }
            [first, rest @ ..] => self.children.entry(first.clone()).or_default().insert(rest),
        }
    }

    fn has(&self, path: &[Pe]) -> bool {
        match path {
            [] => false,
            [last] => self.members.contains(last),
            [first, rest @ ..] => self.children.get(first).is_some_and(|c| c.has(rest)),
        }
    }

    fn is_empty(&self) -> bool {
        self.members.is_empty() && self.children.values().all(Set::is_empty)
    }

    fn union(&self, other: &Set) -> Set {
        let mut out = self.clone();
        out.members.extend(other.members.iter().cloned());
        for (pe, c) in &other.children {
            let merged = match out.children.get(pe) {
                Some(mine) => mine.union(c),
                None => c.clone(),
            };
            out.children.insert(pe.clone(), merged);
        }
        out
    }

    fn intersection(&self, other: &Set) -> Set {
        let members = self.members.intersection(&other.members).cloned().collect();
        let mut children = BTreeMap::new();
        for (pe, c) in &self.children {
            if let Some(o) = other.children.get(pe) {
                let i = c.intersection(o);
                if !i.is_empty() {
                    children.insert(pe.clone(), i);
                }
            }
        }
        Set { members, children }
    }

    fn difference(&self, other: &Set) -> Set {
        let members = self.members.difference(&other.members).cloned().collect();
        let mut children = BTreeMap::new();
        for (pe, c) in &self.children {
            let d = match other.children.get(pe) {
                Some(o) => c.difference(o),
                None => c.clone(),
            };
            if !d.is_empty() {
                children.insert(pe.clone(), d);
            }
        }
        Set { members, children }
    }

    /// Preorder like SMD's `Iterate`: members first, then each child subtree.
    fn iterate(&self, prefix: &mut Vec<Pe>, f: &mut dyn FnMut(&[Pe])) {
        for m in &self.members {
            prefix.push(m.clone());
            f(prefix);
            prefix.pop();
        }
        for (pe, c) in &self.children {
            prefix.push(pe.clone());
            c.iterate(prefix, f);
            prefix.pop();
        }
    }
}

/// `EnsureNamedFieldsAreMembers`: a struct field with owned children is itself owned.
fn ensure_named(s: &Schema, ty: Ty, set: &Set) -> Set {
    let (named, additional, items) = match ty.map(|id| &s.node(id).shape) {
        Some(Shape::Object { fields, additional }) => (Some(fields), *additional, None),
        Some(Shape::Array { items }) => (None, None, Some(*items)),
        _ => (None, None, None),
    };
    let mut out = Set {
        members: set.members.clone(),
        children: BTreeMap::new(),
    };
    for (pe, child) in &set.children {
        let child_ty = match pe {
            Pe::Field(name) => match named.and_then(|f| f.get(name)) {
                Some(id) => {
                    out.members.insert(pe.clone());
                    Some(*id)
                }
                None => additional,
            },
            Pe::Key(_) => items,
            _ => None,
        };
        out.children
            .insert(pe.clone(), ensure_named(s, child_ty, child));
    }
    out
}

/// `SetToFields`: SMD's `emitContentsV1`.
fn set_to_fields(set: &Set) -> Value {
    Value::Object(emit_set(set, false))
}

fn emit_set(set: &Set, include_self: bool) -> Map<String, Value> {
    let mut out = Map::new();
    if include_self && !(set.members.is_empty() && set.children.is_empty()) {
        out.insert(".".to_owned(), Value::Object(Map::new()));
    }
    let keys: BTreeSet<&Pe> = set.members.iter().chain(set.children.keys()).collect();
    for pe in keys {
        let member = set.members.contains(pe);
        let value = match set.children.get(pe) {
            Some(c) => Value::Object(emit_set(c, member)),
            None => Value::Object(Map::new()),
        };
        out.insert(serialize_pe(pe), value);
    }
    out
}

/// `FieldsToSet`: SMD's `readIterV1`.
fn fields_to_set(v: &Value) -> Result<Set, String> {
    match v {
        Value::Object(m) => Ok(read_fields(m)?.0.unwrap_or_default()),
        _ => Err("ReadMapCB: expect { or n".to_owned()),
    }
}

fn read_fields(m: &Map<String, Value>) -> Result<(Option<Set>, bool), String> {
    let mut children: Option<Set> = None;
    let mut is_member = false;
    for (k, v) in m {
        if k == "." {
            is_member = true;
            continue;
        }
        let pe = match deserialize_pe(k)? {
            Some(pe) => pe,
            None => continue, // unknown element type: dropped, like SMD
        };
        let (grandchildren, child_member) = match v {
            Value::Object(cm) => read_fields(cm)?,
            Value::Null => (None, true),
            _ => return Err("ReadMapCB: expect { or n".to_owned()),
        };
        if child_member {
            children.get_or_insert_default().members.insert(pe.clone());
        }
        if let Some(g) = grandchildren {
            children.get_or_insert_default().children.insert(pe, g);
        }
    }
    if children.is_none() {
        is_member = true;
    }
    Ok((children, is_member))
}

fn deserialize_pe(s: &str) -> Result<Option<Pe>, String> {
    let b = s.as_bytes();
    if b.len() < 2 {
        return Err("key must be 2 characters long:".to_owned());
    }
    if b[1] != b':' {
        return Err(format!("missing colon: {s}"));
    }
    // b[0] and b[1] are ASCII, so 2 is a char boundary.
    let rest = s.get(2..).unwrap_or("");
    match b[0] {
        b'f' => Ok(Some(Pe::Field(rest.to_owned()))),
        b'v' => serde_json::from_str(rest)
            .map(|v| Some(Pe::Value(v)))
            .map_err(|e| e.to_string()),
        b'k' => match serde_json::from_str::<Value>(rest).map_err(|e| e.to_string())? {
            Value::Object(m) => {
                let mut fields: Vec<(String, Value)> = m.into_iter().collect();
                fields.sort_by(|a, b| a.0.cmp(&b.0));
                Ok(Some(Pe::Key(fields)))
            }
            _ => Err("ReadObjectCB: expect { or n".to_owned()),
        },
        b'i' => rest
            .parse::<i64>()
            .map(|i| Some(Pe::Index(i)))
            .map_err(|e| e.to_string()),
        _ => Ok(None),
    }
}

fn serialize_pe(pe: &Pe) -> String {
    let mut out = String::new();
    match pe {
        Pe::Field(name) => {
            out.push_str("f:");
            out.push_str(name);
        }
        Pe::Key(fields) => {
            out.push_str("k:{");
            for (i, (name, v)) in fields.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                go_json_str(name, &mut out);
                out.push(':');
                go_json(v, &mut out);
            }
            out.push('}');
        }
        Pe::Value(v) => {
            out.push_str("v:");
            go_json(v, &mut out);
        }
        Pe::Index(i) => {
            let _ = write!(out, "i:{i}");
        }
    }
    out
}

/// `fieldpath.Path.String()`: `.spec.containers[name="c"].ports[containerPort=80,...]`.
fn path_string(path: &[Pe]) -> String {
    let mut out = String::new();
    for pe in path {
        match pe {
            Pe::Field(name) => {
                out.push('.');
                out.push_str(name);
            }
            Pe::Key(fields) => {
                out.push('[');
                for (i, (name, v)) in fields.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(name);
                    out.push('=');
                    out.push_str(&value_to_string(v));
                }
                out.push(']');
            }
            Pe::Value(v) => {
                out.push_str("[=");
                out.push_str(&value_to_string(v));
                out.push(']');
            }
            Pe::Index(i) => {
                let _ = write!(out, "[{i}]");
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Typed walking (typed/*)
// ---------------------------------------------------------------------------------------------

/// A schema node, or `None` for the deduced type.
type Ty = Option<NodeId>;

#[derive(Clone, Copy)]
enum ListKind<'s> {
    Atomic,
    Set,
    Keys(&'s [String]),
}

#[derive(Clone, Copy)]
struct MapT<'s> {
    named: Option<&'s BTreeMap<String, NodeId>>,
    additional: Option<NodeId>,
    deduced: bool,
    atomic: bool,
}

impl MapT<'_> {
    /// Type of field `key`; `None` when the schema doesn't declare it.
    fn child(&self, key: &str) -> Option<Ty> {
        if self.deduced {
            return Some(None);
        }
        match self.named.and_then(|f| f.get(key)) {
            Some(id) => Some(Some(*id)),
            None => self.additional.map(Some),
        }
    }

    /// Undeclared fields of live objects are treated as deduced.
    fn child_lenient(&self, key: &str) -> Ty {
        self.child(key).unwrap_or(None)
    }

    fn is_named(&self, key: &str) -> bool {
        self.named.is_some_and(|f| f.contains_key(key))
    }
}

#[derive(Clone, Copy)]
struct ListT<'s> {
    elem: Ty,
    kind: ListKind<'s>,
}

impl ListT<'_> {
    fn atomic(&self) -> bool {
        matches!(self.kind, ListKind::Atomic)
    }
}

/// The part of a type that applies to a value (SMD's `deduceAtom`).
#[derive(Clone, Copy)]
enum Atom<'s> {
    Scalar,
    Map(MapT<'s>),
    List(ListT<'s>),
    /// The value doesn't fit the schema (`expected ...`).
    Mismatch(&'static str),
}

impl Atom<'_> {
    fn tag(&self) -> u8 {
        match self {
            Atom::Scalar => 0,
            Atom::Map(_) => 1,
            Atom::List(_) => 2,
            Atom::Mismatch(_) => 3,
        }
    }
}

const DEDUCED_MAP: MapT<'static> = MapT {
    named: None,
    additional: None,
    deduced: true,
    atomic: false,
};

fn deduced_atom(v: &Value) -> Atom<'static> {
    match v {
        // null deduces to the map part, like SMD's handleAtom order.
        Value::Object(_) | Value::Null => Atom::Map(DEDUCED_MAP),
        Value::Array(_) => Atom::List(ListT {
            elem: None,
            kind: ListKind::Atomic,
        }),
        _ => Atom::Scalar,
    }
}

fn resolve<'s>(s: &'s Schema, ty: Ty, v: &Value) -> Atom<'s> {
    let Some(id) = ty else {
        return deduced_atom(v);
    };
    let node = s.node(id);
    match &node.shape {
        Shape::Untyped => deduced_atom(v),
        Shape::Object { fields, additional } => match v {
            Value::Object(_) | Value::Null => Atom::Map(MapT {
                named: Some(fields),
                additional: *additional,
                deduced: false,
                atomic: node.atomic_map,
            }),
            _ => Atom::Mismatch("map"),
        },
        Shape::Array { items } => match v {
            Value::Array(_) | Value::Null => Atom::List(ListT {
                elem: Some(*items),
                kind: match &node.list_type {
                    ListType::Atomic => ListKind::Atomic,
                    ListType::Set => ListKind::Set,
                    ListType::Map(keys) if keys.is_empty() => ListKind::Set,
                    ListType::Map(keys) => ListKind::Keys(keys),
                },
            }),
            _ => Atom::Mismatch("list"),
        },
        Shape::Scalar => match v {
            Value::Object(_) | Value::Array(_) => Atom::Mismatch("scalar"),
            _ => Atom::Scalar,
        },
    }
}

/// `listItemToPathElement`.
fn item_pe(kind: &ListKind, item: &Value) -> Result<Pe, String> {
    match kind {
        ListKind::Atomic => Err("invalid indexing of non-associative list".to_owned()),
        ListKind::Keys(keys) => {
            let m = match item {
                Value::Object(m) => m,
                Value::Null => {
                    return Err("associative list with keys may not have a null element".into());
                }
                _ => return Err("associative list with keys may not have non-map elements".into()),
            };
            let mut fields = Vec::with_capacity(keys.len());
            for key in keys.iter() {
                match m.get(key) {
                    Some(v) => fields.push((key.clone(), v.clone())),
                    // The one defaulted key in the built-in API (ports' protocol); the schema
                    // model carries no defaults.
                    None if key == "protocol" => {
                        fields.push((key.clone(), Value::String("TCP".to_owned())));
                    }
                    None => {
                        return Err(format!(
                            "associative list with keys has an element that omits key field {} \
                             (and doesn't have default value)",
                            go_quote(key)
                        ));
                    }
                }
            }
            fields.sort_by(|a, b| a.0.cmp(&b.0));
            Ok(Pe::Key(fields))
        }
        ListKind::Set => match item {
            Value::Object(_) => {
                Err("associative list without keys has an element that's a map type".into())
            }
            Value::Array(_) => Err("not supported: associative list with lists as elements".into()),
            Value::Null => {
                Err("associative list without keys has an element that's an explicit null".into())
            }
            _ => Ok(Pe::Value(item.clone())),
        },
    }
}

/// Strict check of an applied configuration (SMD validation with duplicates refused).
fn validate(s: &Schema, ty: Ty, v: &Value, path: &mut Vec<Pe>, errs: &mut Vec<String>) {
    match resolve(s, ty, v) {
        Atom::Mismatch(expected) => errs.push(validation_error(
            path,
            &format!("expected {expected}, got {}", short_json(v)),
        )),
        Atom::Scalar => {}
        Atom::Map(mt) => {
            if let Value::Object(m) = v {
                for (k, cv) in m {
                    path.push(Pe::Field(k.clone()));
                    match mt.child(k) {
                        Some(cty) => validate(s, cty, cv, path, errs),
                        None => errs.push(validation_error(path, "field not declared in schema")),
                    }
                    path.pop();
                }
            }
        }
        Atom::List(lt) => {
            let Value::Array(items) = v else {
                return;
            };
            if lt.atomic() {
                for (i, item) in items.iter().enumerate() {
                    path.push(Pe::Index(i64::try_from(i).unwrap_or(i64::MAX)));
                    validate(s, lt.elem, item, path, errs);
                    path.pop();
                }
                return;
            }
            let mut seen = BTreeSet::new();
            for (i, item) in items.iter().enumerate() {
                match item_pe(&lt.kind, item) {
                    Err(e) => errs.push(validation_error(path, &format!("element {i}: {e}"))),
                    Ok(pe) => {
                        if !seen.insert(pe.clone()) {
                            errs.push(validation_error(
                                path,
                                &format!(
                                    "duplicate entries for key {}",
                                    path_string(std::slice::from_ref(&pe))
                                ),
                            ));
                        }
                        path.push(pe);
                        validate(s, lt.elem, item, path, errs);
                        path.pop();
                    }
                }
            }
        }
    }
}

fn validation_error(path: &[Pe], msg: &str) -> String {
    format!("{}: {msg}", path_string(path))
}

/// `ValidationErrors.Error()`.
fn validation_errors_string(errs: &[String]) -> String {
    match errs {
        [one] => one.clone(),
        _ => {
            let mut out = String::from("errors:");
            for e in errs {
                out.push_str("\n  ");
                out.push_str(e);
            }
            out
        }
    }
}

fn to_field_set(cx: &Cx, v: &Value) -> Set {
    let mut out = Set::default();
    walk_field_set(cx.schema, cx.root, v, &mut Vec::new(), &mut out);
    out
}

/// `TypedValue.ToFieldSet`: leaves, list items, and keys of non-struct maps.
fn walk_field_set(s: &Schema, ty: Ty, v: &Value, path: &mut Vec<Pe>, out: &mut Set) {
    match resolve(s, ty, v) {
        Atom::Map(mt) if !mt.atomic => {
            if let Value::Object(m) = v {
                for (k, cv) in m {
                    path.push(Pe::Field(k.clone()));
                    walk_field_set(s, mt.child_lenient(k), cv, path, out);
                    if !mt.is_named(k) {
                        out.insert(path);
                    }
                    path.pop();
                }
            }
        }
        Atom::List(lt) if !lt.atomic() => {
            if let Value::Array(items) = v {
                for item in items {
                    if let Ok(pe) = item_pe(&lt.kind, item) {
                        path.push(pe);
                        walk_field_set(s, lt.elem, item, path, out);
                        out.insert(path);
                        path.pop();
                    }
                }
            }
        }
        _ => out.insert(path),
    }
}

/// `TypedValue.Merge` with `ruleKeepRHS`: `r` wins on leaves; granular maps and lists merge.
fn merge(s: &Schema, ty: Ty, l: &Value, r: &Value) -> Value {
    let al = resolve(s, ty, l);
    let ar = resolve(s, ty, r);
    if al.tag() != ar.tag() {
        return r.clone();
    }
    match ar {
        Atom::Map(mt) if !mt.atomic => {
            let empty = Map::new();
            let lm = l.as_object().unwrap_or(&empty);
            let rm = r.as_object().unwrap_or(&empty);
            if lm.is_empty() && rm.is_empty() {
                return r.clone();
            }
            let mut out = Map::new();
            for (k, lv) in lm {
                let v = match rm.get(k) {
                    Some(rv) => merge(s, mt.child_lenient(k), lv, rv),
                    None => lv.clone(),
                };
                out.insert(k.clone(), v);
            }
            for (k, rv) in rm {
                if !lm.contains_key(k) {
                    out.insert(k.clone(), rv.clone());
                }
            }
            Value::Object(out)
        }
        Atom::List(lt) if !lt.atomic() => {
            let empty = Vec::new();
            let li = l.as_array().unwrap_or(&empty);
            let ri = r.as_array().unwrap_or(&empty);
            if li.is_empty() && ri.is_empty() {
                return r.clone();
            }
            Value::Array(merge_list(s, lt, li, ri))
        }
        _ => r.clone(),
    }
}

/// An lhs list position: a keyed item (first of its duplicates) or an item without a key.
enum Slot {
    Keyed(Pe),
    Raw(usize),
}

/// SMD's associative-list merge, including its ordering (shared items follow the rhs order,
/// lhs-only items keep their place). Duplicated lhs keys are replaced by the rhs item if the
/// config names the key, else kept as they are.
fn merge_list(s: &Schema, lt: ListT, l: &[Value], r: &[Value]) -> Vec<Value> {
    let mut r_order: Vec<Pe> = Vec::new();
    let mut r_map: BTreeMap<Pe, &Value> = BTreeMap::new();
    let mut r_raw: Vec<&Value> = Vec::new();
    for item in r {
        match item_pe(&lt.kind, item) {
            Ok(pe) => {
                if !r_map.contains_key(&pe) {
                    r_map.insert(pe.clone(), item);
                    r_order.push(pe);
                }
            }
            Err(_) => r_raw.push(item),
        }
    }
    let mut l_order: Vec<Slot> = Vec::new();
    let mut l_map: BTreeMap<Pe, Vec<&Value>> = BTreeMap::new();
    for (i, item) in l.iter().enumerate() {
        match item_pe(&lt.kind, item) {
            Ok(pe) => {
                let group = l_map.entry(pe.clone()).or_default();
                if group.is_empty() {
                    l_order.push(Slot::Keyed(pe));
                }
                group.push(item);
            }
            Err(_) => l_order.push(Slot::Raw(i)),
        }
    }
    let mut shared = r_order
        .iter()
        .filter(|pe| l_map.contains_key(*pe))
        .cloned()
        .collect::<std::collections::VecDeque<Pe>>();
    let mut next_shared = shared.pop_front();

    let merge_item = |pe: &Pe, rv: Option<&Value>, out: &mut Vec<Value>| {
        let lv = l_map.get(pe);
        match (lv, rv) {
            (Some(ls), Some(rv)) => match ls.as_slice() {
                [one] => out.push(merge(s, lt.elem, one, rv)),
                _ => out.push(rv.clone()),
            },
            (Some(ls), None) => out.extend(ls.iter().map(|v| (*v).clone())),
            (None, Some(rv)) => out.push(rv.clone()),
            (None, None) => {}
        }
    };
    let in_rhs = |slot: &Slot| match slot {
        Slot::Keyed(pe) => r_map.contains_key(pe),
        Slot::Raw(_) => false,
    };

    let mut out = Vec::with_capacity(l.len().max(r.len()));
    let (mut li, mut ri) = (0usize, 0usize);
    while li < l_order.len() || ri < r_order.len() {
        let before = (li, ri);
        if let (Some(slot), Some(rpe)) = (l_order.get(li), r_order.get(ri)) {
            if let Slot::Keyed(lpe) = slot
                && lpe == rpe
            {
                merge_item(lpe, r_map.get(lpe).copied(), &mut out);
                li += 1;
                ri += 1;
                next_shared = shared.pop_front();
                continue;
            }
            if let Slot::Keyed(lpe) = slot
                && in_rhs(slot)
                && next_shared.as_ref().is_some_and(|n| n != lpe)
            {
                li += 1;
                continue;
            }
        }
        if let Some(slot) = l_order.get(li)
            && !in_rhs(slot)
        {
            match slot {
                Slot::Keyed(pe) => merge_item(pe, None, &mut out),
                Slot::Raw(i) => out.extend(l.get(*i).cloned()),
            }
            li += 1;
            continue;
        }
        if let Some(rpe) = r_order.get(ri) {
            merge_item(rpe, r_map.get(rpe).copied(), &mut out);
            ri += 1;
            if next_shared.as_ref() == Some(rpe) {
                next_shared = shared.pop_front();
            }
        }
        if (li, ri) == before {
            // A shared lhs item whose rhs twin was already emitted.
            li += 1;
        }
    }
    out.extend(r_raw.into_iter().cloned());
    out
}

/// `TypedValue.Compare`.
#[derive(Debug, Default)]
struct Comparison {
    removed: Set,
    modified: Set,
    added: Set,
}

fn compare_root(cx: &Cx, old: &Value, new: &Value) -> Comparison {
    let mut c = Comparison::default();
    compare(
        cx.schema,
        cx.root,
        Some(old),
        Some(new),
        &mut Vec::new(),
        &mut c,
    );
    c
}

fn compare(
    s: &Schema,
    ty: Ty,
    l: Option<&Value>,
    r: Option<&Value>,
    path: &mut Vec<Pe>,
    c: &mut Comparison,
) {
    match (l, r) {
        (None, None) => {}
        (Some(l), None) => one_sided(s, ty, l, path, &mut c.removed),
        (None, Some(r)) => one_sided(s, ty, r, path, &mut c.added),
        (Some(l), Some(r)) => compare_both(s, ty, l, r, path, c),
    }
}

/// A value present on one side only: its leaves and every granular node in it.
fn one_sided(s: &Schema, ty: Ty, v: &Value, path: &mut Vec<Pe>, set: &mut Set) {
    children_one_sided(s, resolve(s, ty, v), v, path, set);
    set.insert(path);
}

fn children_one_sided(s: &Schema, atom: Atom, v: &Value, path: &mut Vec<Pe>, set: &mut Set) {
    match (atom, v) {
        (Atom::Map(mt), Value::Object(m)) if !mt.atomic => {
            for (k, cv) in m {
                path.push(Pe::Field(k.clone()));
                one_sided(s, mt.child_lenient(k), cv, path, set);
                path.pop();
            }
        }
        (Atom::List(lt), Value::Array(items)) if !lt.atomic() => {
            let mut seen = BTreeSet::new();
            for item in items {
                if let Ok(pe) = item_pe(&lt.kind, item)
                    && seen.insert(pe.clone())
                {
                    path.push(pe);
                    one_sided(s, lt.elem, item, path, set);
                    path.pop();
                }
            }
        }
        _ => {}
    }
}

fn is_granular_nonempty(atom: &Atom, v: &Value) -> bool {
    match (atom, v) {
        (Atom::Map(mt), Value::Object(m)) => !mt.atomic && !m.is_empty(),
        (Atom::List(lt), Value::Array(a)) => !lt.atomic() && !a.is_empty(),
        _ => false,
    }
}

fn compare_both(s: &Schema, ty: Ty, l: &Value, r: &Value, path: &mut Vec<Pe>, c: &mut Comparison) {
    let al = resolve(s, ty, l);
    let ar = resolve(s, ty, r);
    if al.tag() != ar.tag() {
        // The value changed shape (deduced types, or live data off-schema).
        if is_granular_nonempty(&al, l) {
            children_one_sided(s, al, l, path, &mut c.removed);
        } else {
            c.modified.insert(path);
        }
        if is_granular_nonempty(&ar, r) {
            children_one_sided(s, ar, r, path, &mut c.added);
        } else {
            c.modified.insert(path);
        }
        return;
    }
    match ar {
        Atom::Map(mt) if !mt.atomic => {
            let empty = Map::new();
            let lm = l.as_object().unwrap_or(&empty);
            let rm = r.as_object().unwrap_or(&empty);
            if lm.is_empty() && rm.is_empty() {
                compare_leaf(l, r, path, c);
                return;
            }
            for (k, lv) in lm {
                path.push(Pe::Field(k.clone()));
                compare(s, mt.child_lenient(k), Some(lv), rm.get(k), path, c);
                path.pop();
            }
            for (k, rv) in rm {
                if !lm.contains_key(k) {
                    path.push(Pe::Field(k.clone()));
                    compare(s, mt.child_lenient(k), None, Some(rv), path, c);
                    path.pop();
                }
            }
        }
        Atom::List(lt) if !lt.atomic() => {
            let empty = Vec::new();
            let li = l.as_array().unwrap_or(&empty);
            let ri = r.as_array().unwrap_or(&empty);
            if li.is_empty() && ri.is_empty() {
                compare_leaf(l, r, path, c);
                return;
            }
            compare_list(s, lt, li, ri, path, c);
        }
        _ => compare_leaf(l, r, path, c),
    }
}

fn compare_leaf(l: &Value, r: &Value, path: &[Pe], c: &mut Comparison) {
    if !value_eq(l, r) {
        c.modified.insert(path);
    }
}

fn group_items<'v>(kind: &ListKind, items: &'v [Value]) -> (Vec<Pe>, BTreeMap<Pe, Vec<&'v Value>>) {
    let mut order = Vec::new();
    let mut groups: BTreeMap<Pe, Vec<&Value>> = BTreeMap::new();
    for item in items {
        if let Ok(pe) = item_pe(kind, item) {
            let g = groups.entry(pe.clone()).or_default();
            if g.is_empty() {
                order.push(pe);
            }
            g.push(item);
        }
    }
    (order, groups)
}

/// SMD's list comparison, duplicates included (a duplicated key is compared as one atom).
fn compare_list(
    s: &Schema,
    lt: ListT,
    l: &[Value],
    r: &[Value],
    path: &mut Vec<Pe>,
    c: &mut Comparison,
) {
    let (l_order, l_groups) = group_items(&lt.kind, l);
    let (r_order, r_groups) = group_items(&lt.kind, r);
    let mut all = l_order;
    all.extend(r_order.into_iter().filter(|pe| !l_groups.contains_key(pe)));
    let none: Vec<&Value> = Vec::new();
    for pe in all {
        let ll = l_groups.get(&pe).unwrap_or(&none);
        let rl = r_groups.get(&pe).unwrap_or(&none);
        path.push(pe);
        match (ll.len(), rl.len()) {
            (a, b) if a <= 1 && b <= 1 => {
                compare(
                    s,
                    lt.elem,
                    ll.first().copied(),
                    rl.first().copied(),
                    path,
                    c,
                );
            }
            (a, b) if a >= 2 && b >= 2 => {
                let same = a == b && ll.iter().zip(rl.iter()).all(|(x, y)| value_eq(x, y));
                if !same {
                    c.modified.insert(path);
                }
            }
            (a, _) if a >= 2 => {
                if let Some(r0) = rl.first() {
                    compare(s, lt.elem, None, Some(r0), path, c);
                }
                c.removed.insert(path);
            }
            _ => {
                if let Some(l0) = ll.first() {
                    compare(s, lt.elem, Some(l0), None, path, c);
                }
                c.added.insert(path);
            }
        }
        path.pop();
    }
}

fn remove_root(cx: &Cx, v: &Value, set: &Set) -> Value {
    remove_items(cx.schema, cx.root, v, set).unwrap_or_else(|| Value::Object(Map::new()))
}

/// `TypedValue.RemoveItems`. A map or list emptied by the removal is dropped (`None`) where
/// SMD leaves a null behind.
fn remove_items(s: &Schema, ty: Ty, v: &Value, set: &Set) -> Option<Value> {
    match resolve(s, ty, v) {
        Atom::Map(mt) if !mt.atomic => {
            let Value::Object(m) = v else {
                return Some(v.clone());
            };
            if m.is_empty() {
                return Some(v.clone());
            }
            let mut out = Map::new();
            for (k, cv) in m {
                let pe = Pe::Field(k.clone());
                if set.members.contains(&pe) {
                    continue;
                }
                match set.children.get(&pe) {
                    Some(sub) if !sub.is_empty() => {
                        if let Some(nv) = remove_items(s, mt.child_lenient(k), cv, sub) {
                            out.insert(k.clone(), nv);
                        }
                    }
                    _ => {
                        out.insert(k.clone(), cv.clone());
                    }
                }
            }
            (!out.is_empty()).then_some(Value::Object(out))
        }
        Atom::List(lt) if !lt.atomic() => {
            let Value::Array(items) = v else {
                return Some(v.clone());
            };
            if items.is_empty() {
                return Some(v.clone());
            }
            let mut out = Vec::new();
            for item in items {
                let Ok(pe) = item_pe(&lt.kind, item) else {
                    out.push(item.clone());
                    continue;
                };
                if set.members.contains(&pe) {
                    continue;
                }
                match set.children.get(&pe) {
                    Some(sub) if !sub.is_empty() => {
                        out.extend(remove_items(s, lt.elem, item, sub));
                    }
                    _ => out.push(item.clone()),
                }
            }
            (!out.is_empty()).then_some(Value::Array(out))
        }
        _ => Some(v.clone()),
    }
}

// ---------------------------------------------------------------------------------------------
// Values (value/*), Go-compatible text
// ---------------------------------------------------------------------------------------------

fn cmp_number(a: &Number, b: &Number) -> Ordering {
    if let (Some(x), Some(y)) = (a.as_i64(), b.as_i64()) {
        return x.cmp(&y);
    }
    if let (Some(x), Some(y)) = (a.as_u64(), b.as_u64()) {
        return x.cmp(&y);
    }
    if a.is_i64() && b.is_u64() {
        return Ordering::Less;
    }
    if a.is_u64() && b.is_i64() {
        return Ordering::Greater;
    }
    let x = a.as_f64().unwrap_or(0.0);
    let y = b.as_f64().unwrap_or(0.0);
    x.partial_cmp(&y).unwrap_or(Ordering::Equal)
}

/// `value.Compare`: numbers < strings < bools < lists < maps < null.
fn cmp_value(a: &Value, b: &Value) -> Ordering {
    fn rank(v: &Value) -> u8 {
        match v {
            Value::Number(_) => 0,
            Value::String(_) => 1,
            Value::Bool(_) => 2,
            Value::Array(_) => 3,
            Value::Object(_) => 4,
            Value::Null => 5,
        }
    }
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => cmp_number(x, y),
        (Value::String(x), Value::String(y)) => x.cmp(y),
        (Value::Bool(x), Value::Bool(y)) => x.cmp(y),
        (Value::Array(x), Value::Array(y)) => {
            for (p, q) in x.iter().zip(y) {
                let c = cmp_value(p, q);
                if c != Ordering::Equal {
                    return c;
                }
            }
            x.len().cmp(&y.len())
        }
        (Value::Object(x), Value::Object(y)) => {
            let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                match (x.get(k), y.get(k)) {
                    (Some(p), Some(q)) => {
                        let c = cmp_value(p, q);
                        if c != Ordering::Equal {
                            return c;
                        }
                    }
                    (None, _) => return Ordering::Greater,
                    (_, None) => return Ordering::Less,
                }
            }
            Ordering::Equal
        }
        (Value::Null, Value::Null) => Ordering::Equal,
        _ => rank(a).cmp(&rank(b)),
    }
}

/// `value.Equals`: deep, with numbers compared numerically.
fn value_eq(a: &Value, b: &Value) -> bool {
    cmp_value(a, b) == Ordering::Equal
}

fn depth_ok(v: &Value) -> bool {
    let mut stack = vec![(v, 0usize)];
    while let Some((v, d)) = stack.pop() {
        if d > MAX_DEPTH {
            return false;
        }
        match v {
            Value::Array(a) => stack.extend(a.iter().map(|x| (x, d + 1))),
            Value::Object(m) => stack.extend(m.values().map(|x| (x, d + 1))),
            _ => {}
        }
    }
    true
}

/// `encoding/json` output: sorted keys, HTML-safe escaping, Go float formatting.
fn go_json(v: &Value, out: &mut String) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&go_number(n)),
        Value::String(s) => go_json_str(s, out),
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                go_json(x, out);
            }
            out.push(']');
        }
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                go_json_str(k, out);
                out.push(':');
                if let Some(x) = m.get(k) {
                    go_json(x, out);
                }
            }
            out.push('}');
        }
    }
}

fn go_json_str(s: &str, out: &mut String) {
    out.push('"');
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", u32::from(ch));
            }
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

fn go_number(n: &Number) -> String {
    if n.is_i64() || n.is_u64() {
        return n.to_string();
    }
    let f = n.as_f64().unwrap_or(0.0);
    let abs = f.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        // strconv 'e' then encoding/json's "e-09" -> "e-9" clean-up.
        let (mantissa, exp) = split_exp(f);
        if exp < 0 {
            format!("{mantissa}e-{}", -exp)
        } else {
            format!("{mantissa}e+{exp:02}")
        }
    } else {
        format!("{f}")
    }
}

/// Shortest mantissa and decimal exponent of `f`.
fn split_exp(f: f64) -> (String, i32) {
    let s = format!("{f:e}");
    match s.split_once('e') {
        Some((m, e)) => (m.to_owned(), e.parse().unwrap_or(0)),
        None => (s, 0),
    }
}

/// `fmt.Sprintf("%v", float64)`: shortest `%g`, exponent form below 1e-4 or from 1e6.
fn go_float_v(f: f64) -> String {
    if f == 0.0 {
        return format!("{f}");
    }
    let (mantissa, exp) = split_exp(f);
    if (-4..6).contains(&exp) {
        return format!("{f}");
    }
    let sign = if exp < 0 { '-' } else { '+' };
    format!("{mantissa}e{sign}{:02}", exp.abs())
}

/// `value.ToString`, used in path strings.
fn value_to_string(v: &Value) -> String {
    match v {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => {
            if n.is_i64() || n.is_u64() {
                n.to_string()
            } else {
                go_float_v(n.as_f64().unwrap_or(0.0))
            }
        }
        Value::String(s) => go_quote(s),
        Value::Array(a) => {
            let items: Vec<String> = a.iter().map(value_to_string).collect();
            format!("[{}]", items.join(","))
        }
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let items: Vec<String> = keys
                .into_iter()
                .map(|k| format!("{k}={}", m.get(k).map(value_to_string).unwrap_or_default()))
                .collect();
            format!("{{{}}}", items.join(";"))
        }
    }
}

fn go_type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn short_json(v: &Value) -> String {
    let mut s = String::new();
    go_json(v, &mut s);
    if s.len() > 64 {
        let cut = (0..=64).rev().find(|i| s.is_char_boundary(*i)).unwrap_or(0);
        s.truncate(cut);
        s.push_str("...");
    }
    s
}

fn meta_str<'v>(obj: &'v Value, key: &str) -> &'v str {
    obj.get("metadata")
        .and_then(|m| m.get(key))
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// `schema.ParseGroupVersion`.
fn parse_group_version(s: &str) -> Option<(String, String)> {
    if s.is_empty() || s == "/" {
        return Some((String::new(), String::new()));
    }
    match s.split_once('/') {
        None => Some((String::new(), s.to_owned())),
        Some((g, v)) if !v.contains('/') => Some((g.to_owned(), v.to_owned())),
        Some(_) => None,
    }
}

/// Group, version, kind of an unstructured object.
fn gvk_of(obj: &Value) -> (String, String, String) {
    let api_version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = obj
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    match parse_group_version(api_version) {
        Some((g, v)) => (g, v, kind),
        None => (String::new(), String::new(), kind),
    }
}

fn gvk_string(gvk: &(String, String, String)) -> String {
    format!("{}/{}, Kind={}", gvk.0, gvk.1, gvk.2)
}

// ---------------------------------------------------------------------------------------------
// Conflict messages (apimachinery internal/conflict.go)
// ---------------------------------------------------------------------------------------------

/// `printManager`: `"name"`, plus ` with subresource "x"`, plus ` using <apiVersion>` for
/// Update managers.
fn print_manager(c: &Conflict) -> String {
    let mut s = go_quote(&c.manager);
    if !c.subresource.is_empty() {
        s = format!("{s} with subresource {}", go_quote(&c.subresource));
    }
    if c.operation == "Update" {
        s = format!("{s} using {}", c.api_version);
    }
    s
}

fn conflicts_message(cs: &[Conflict]) -> String {
    if let [c] = cs {
        return format!(
            "Apply failed with 1 conflict: conflict with {}: {}",
            print_manager(c),
            c.field
        );
    }
    let mut groups: BTreeMap<String, (String, Vec<&str>)> = BTreeMap::new();
    for c in cs {
        let key = identifier_json(&c.manager, &c.operation, &c.api_version, &c.subresource);
        groups
            .entry(key)
            .or_insert_with(|| (print_manager(c), Vec::new()))
            .1
            .push(&c.field);
    }
    let mut lines = Vec::new();
    for (printed, fields) in groups.values() {
        lines.push(format!("conflicts with {printed}:"));
        lines.extend(fields.iter().map(|f| format!("- {f}")));
    }
    format!(
        "Apply failed with {} conflicts: {}",
        cs.len(),
        lines.join("\n")
    )
}

// ---------------------------------------------------------------------------------------------
// Time (metav1.Time: RFC 3339, whole seconds, UTC)
// ---------------------------------------------------------------------------------------------

/// The time as the apiserver would re-encode it, and its Unix seconds (0 if unparsable).
fn normalize_time(s: &str) -> (String, i64) {
    match parse_rfc3339(s) {
        Some(t) => (format_rfc3339(t), t),
        None => (s.to_owned(), 0),
    }
}

fn time_secs(t: Option<&String>) -> i64 {
    t.and_then(|s| parse_rfc3339(s)).unwrap_or(0)
}

fn parse_rfc3339(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    let num = |from: usize, to: usize| -> Option<i64> {
        let part = b.get(from..to)?;
        if part.is_empty() || !part.iter().all(u8::is_ascii_digit) {
            return None;
        }
        part.iter().try_fold(0i64, |acc, d| {
            acc.checked_mul(10)?.checked_add(i64::from(d - b'0'))
        })
    };
    let sep = |i: usize, c: &[u8]| b.get(i).is_some_and(|x| c.contains(x));
    if !(sep(4, b"-") && sep(7, b"-") && sep(10, b"Tt") && sep(13, b":") && sep(16, b":")) {
        return None;
    }
    let (y, mo, d) = (num(0, 4)?, num(5, 7)?, num(8, 10)?);
    let (h, mi, se) = (num(11, 13)?, num(14, 16)?, num(17, 19)?);
    if !(1..=12).contains(&mo) || d < 1 || d > days_in_month(y, mo) || h > 23 || mi > 59 || se > 59
    {
        return None;
    }
    let mut i = 19;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == start {
            return None;
        }
    }
    let offset = match b.get(i) {
        Some(b'Z' | b'z') if i + 1 == b.len() => 0,
        Some(sign @ (b'+' | b'-')) if i + 6 == b.len() && sep(i + 3, b":") => {
            let (oh, om) = (num(i + 1, i + 3)?, num(i + 4, i + 6)?);
            if oh > 23 || om > 59 {
                return None;
            }
            let o = oh * 3600 + om * 60;
            if *sign == b'-' { -o } else { o }
        }
        _ => return None,
    };
    Some(days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + se - offset)
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn format_rfc3339(t: i64) -> String {
    let days = t.div_euclid(86_400);
    let secs = t.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

#[cfg(test)]
mod tests {
    use super::super::schema::Node;
    use super::*;
    use serde_json::json;

    const LEASE_GV: &str = "coordination.k8s.io/v1";
    const T1: &str = "2024-01-01T00:00:01Z";
    const T2: &str = "2024-01-01T00:00:02Z";
    const T3: &str = "2024-01-01T00:00:03Z";
    const T4: &str = "2024-01-01T00:00:04Z";

    struct Fixture {
        schema: Schema,
        lease: NodeId,
        widget: NodeId,
        leaf: NodeId,
    }

    fn push(s: &mut Schema, shape: Shape) -> NodeId {
        s.push(Node {
            shape,
            ..Node::default()
        })
    }

    fn object(s: &mut Schema, fields: &[(&str, NodeId)], additional: Option<NodeId>) -> NodeId {
        push(
            s,
            Shape::Object {
                fields: fields.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect(),
                additional,
            },
        )
    }

    fn array(s: &mut Schema, items: NodeId, list_type: ListType) -> NodeId {
        s.push(Node {
            shape: Shape::Array { items },
            list_type,
            ..Node::default()
        })
    }

    fn keys(k: &[&str]) -> ListType {
        ListType::Map(k.iter().map(|s| (*s).to_owned()).collect())
    }

    fn fixture() -> Fixture {
        let mut s = Schema::default();
        let st = push(&mut s, Shape::Scalar);
        let untyped = push(&mut s, Shape::Untyped);
        let string_map = object(&mut s, &[], Some(st));
        let finalizers = array(&mut s, st, ListType::Set);
        let owner_ref = object(
            &mut s,
            &[("apiVersion", st), ("kind", st), ("name", st), ("uid", st)],
            None,
        );
        let owner_refs = array(&mut s, owner_ref, keys(&["uid"]));
        let managed_fields = array(&mut s, untyped, ListType::Atomic);
        let meta = object(
            &mut s,
            &[
                ("name", st),
                ("namespace", st),
                ("uid", st),
                ("resourceVersion", st),
                ("generation", st),
                ("creationTimestamp", st),
                ("labels", string_map),
                ("annotations", string_map),
                ("finalizers", finalizers),
                ("ownerReferences", owner_refs),
                ("managedFields", managed_fields),
            ],
            None,
        );
        let lease_spec = object(
            &mut s,
            &[
                ("holderIdentity", st),
                ("leaseDurationSeconds", st),
                ("acquireTime", st),
                ("renewTime", st),
                ("leaseTransitions", st),
            ],
            None,
        );
        let lease = object(
            &mut s,
            &[
                ("apiVersion", st),
                ("kind", st),
                ("metadata", meta),
                ("spec", lease_spec),
            ],
            None,
        );
        s.set_kind("coordination.k8s.io", "v1", "Lease", lease);

        let port = object(
            &mut s,
            &[("containerPort", st), ("protocol", st), ("name", st)],
            None,
        );
        let ports = array(&mut s, port, keys(&["containerPort", "protocol"]));
        let env_var = object(&mut s, &[("name", st), ("value", st)], None);
        let env = array(&mut s, env_var, keys(&["name"]));
        let args = array(&mut s, st, ListType::Atomic);
        let container = object(
            &mut s,
            &[
                ("name", st),
                ("image", st),
                ("args", args),
                ("ports", ports),
                ("env", env),
            ],
            None,
        );
        let containers = array(&mut s, container, keys(&["name"]));
        let selector = s.push(Node {
            shape: Shape::Object {
                fields: [("matchLabels".to_owned(), string_map)]
                    .into_iter()
                    .collect(),
                additional: None,
            },
            atomic_map: true,
            ..Node::default()
        });
        let tags = array(&mut s, st, ListType::Set);
        let rolling = object(&mut s, &[("maxSurge", st), ("maxUnavailable", st)], None);
        let strategy = object(&mut s, &[("type", st), ("rollingUpdate", rolling)], None);
        let spec = object(
            &mut s,
            &[
                ("replicas", st),
                ("containers", containers),
                ("selector", selector),
                ("tags", tags),
                ("config", untyped),
                ("strategy", strategy),
            ],
            None,
        );
        let status = object(&mut s, &[("replicas", st), ("phase", st)], None);
        let widget = object(
            &mut s,
            &[
                ("apiVersion", st),
                ("kind", st),
                ("metadata", meta),
                ("spec", spec),
                ("status", status),
            ],
            None,
        );
        s.set_kind("example.com", "v1", "Widget", widget);

        let leaf = object(
            &mut s,
            &[
                ("apiVersion", st),
                ("kind", st),
                ("metadata", meta),
                ("numeric", st),
                ("string", st),
                ("bool", st),
            ],
            None,
        );
        s.set_kind("example.com", "v1", "Leaf", leaf);
        Fixture {
            schema: s,
            lease,
            widget,
            leaf,
        }
    }

    fn m<'a>(name: &'a str, time: &'a str) -> Manager<'a> {
        Manager {
            name,
            api_version: LEASE_GV,
            time,
            subresource: None,
        }
    }

    fn wm<'a>(name: &'a str, time: &'a str) -> Manager<'a> {
        Manager {
            name,
            api_version: "example.com/v1",
            time,
            subresource: None,
        }
    }

    fn lease(spec: Value) -> Value {
        json!({
            "apiVersion": LEASE_GV,
            "kind": "Lease",
            "metadata": {"name": "l", "namespace": "default"},
            "spec": spec,
        })
    }

    fn widget(spec: Value) -> Value {
        json!({
            "apiVersion": "example.com/v1",
            "kind": "Widget",
            "metadata": {"name": "w", "namespace": "default"},
            "spec": spec,
        })
    }

    fn entries(obj: &Value) -> Vec<Value> {
        obj["metadata"]["managedFields"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    fn entry(obj: &Value, manager: &str, op: &str) -> Value {
        entries(obj)
            .into_iter()
            .find(|e| e["manager"] == manager && e["operation"] == op)
            .unwrap_or(Value::Null)
    }

    fn fields(obj: &Value, manager: &str, op: &str) -> Value {
        entry(obj, manager, op)["fieldsV1"].clone()
    }

    fn managers(obj: &Value) -> Vec<String> {
        entries(obj)
            .iter()
            .map(|e| {
                format!(
                    "{}/{}",
                    e["manager"].as_str().unwrap_or(""),
                    e["operation"].as_str().unwrap_or("")
                )
            })
            .collect()
    }

    fn ap(f: &Fixture, live: Option<&Value>, applied: &Value, mgr: &Manager) -> Value {
        apply(&f.schema, Some(f.lease), live, applied, mgr, false).expect("apply")
    }

    fn apw(f: &Fixture, live: Option<&Value>, applied: &Value, mgr: &Manager) -> Value {
        apply(&f.schema, Some(f.widget), live, applied, mgr, false).expect("apply")
    }

    // ---- the brief's scenarios --------------------------------------------------------------

    #[test]
    fn first_apply_creates_entry() {
        let f = fixture();
        let mut cfg = lease(json!({"holderIdentity": "a"}));
        cfg["metadata"]["labels"] = json!({"app": "x"});
        let out = ap(&f, None, &cfg, &m("m1", T1));
        let mut expected = cfg.clone();
        expected["metadata"]["managedFields"] = json!([{
            "manager": "m1",
            "operation": "Apply",
            "apiVersion": LEASE_GV,
            "time": T1,
            "fieldsType": "FieldsV1",
            "fieldsV1": {
                "f:metadata": {"f:labels": {"f:app": {}}},
                "f:spec": {"f:holderIdentity": {}}
            }
        }]);
        assert_eq!(out, expected);
        // Serialised key order matches the apiserver's.
        let text = serde_json::to_string(&out["metadata"]["managedFields"][0]).unwrap();
        assert_eq!(
            text,
            r#"{"manager":"m1","operation":"Apply","apiVersion":"coordination.k8s.io/v1","time":"2024-01-01T00:00:01Z","fieldsType":"FieldsV1","fieldsV1":{"f:metadata":{"f:labels":{"f:app":{}}},"f:spec":{"f:holderIdentity":{}}}}"#
        );
    }

    #[test]
    fn different_value_conflicts_with_exact_message() {
        let f = fixture();
        let live = ap(
            &f,
            None,
            &lease(json!({"holderIdentity": "a"})),
            &m("m1", T1),
        );
        let err = apply(
            &f.schema,
            Some(f.lease),
            Some(&live),
            &lease(json!({"holderIdentity": "b"})),
            &m("m2", T2),
            false,
        )
        .unwrap_err();
        assert_eq!(
            err.message(),
            r#"Apply failed with 1 conflict: conflict with "m1": .spec.holderIdentity"#
        );
        assert!(matches!(err, ApplyError::Conflict(_)), "{err:?}");
        assert_eq!(
            err.causes(),
            vec![(
                "FieldManagerConflict".to_owned(),
                r#"conflict with "m1""#.to_owned(),
                ".spec.holderIdentity".to_owned()
            )]
        );
        let ApplyError::Conflict(cs) = &err else {
            panic!("not a conflict")
        };
        assert_eq!(cs[0].manager, "m1");
        assert_eq!(cs[0].operation, "Apply");
    }

    #[test]
    fn update_manager_conflict_names_api_version() {
        let f = fixture();
        let created = record_update(
            &f.schema,
            Some(f.lease),
            None,
            &lease(json!({"holderIdentity": "a"})),
            &m("kubectl", T1),
        );
        let err = apply(
            &f.schema,
            Some(f.lease),
            Some(&created),
            &lease(json!({"holderIdentity": "b"})),
            &m("other", T2),
            false,
        )
        .unwrap_err();
        assert_eq!(
            err.message(),
            r#"Apply failed with 1 conflict: conflict with "kubectl" using coordination.k8s.io/v1: .spec.holderIdentity"#
        );
        assert_eq!(
            err.causes()[0].1,
            r#"conflict with "kubectl" using coordination.k8s.io/v1"#
        );
    }

    #[test]
    fn same_value_is_co_owned() {
        let f = fixture();
        let live = ap(
            &f,
            None,
            &lease(json!({"holderIdentity": "a"})),
            &m("m1", T1),
        );
        let out = ap(
            &f,
            Some(&live),
            &lease(json!({"holderIdentity": "a"})),
            &m("m2", T2),
        );
        let spec_owned = json!({"f:spec": {"f:holderIdentity": {}}});
        assert_eq!(fields(&out, "m1", "Apply"), spec_owned);
        assert_eq!(fields(&out, "m2", "Apply"), spec_owned);
        // A no-op apply doesn't stamp a time (managedFieldsUpdater only does so when the
        // object changed), so m2's entry has none and sorts first.
        assert_eq!(entry(&out, "m2", "Apply").get("time"), None);
        assert_eq!(managers(&out), ["m2/Apply", "m1/Apply"]);
        assert_eq!(out["spec"], json!({"holderIdentity": "a"}));
    }

    #[test]
    fn force_moves_ownership() {
        let f = fixture();
        let mut cfg = lease(json!({"holderIdentity": "a"}));
        cfg["metadata"]["labels"] = json!({"app": "x"});
        let live = ap(&f, None, &cfg, &m("m1", T1));
        let out = apply(
            &f.schema,
            Some(f.lease),
            Some(&live),
            &lease(json!({"holderIdentity": "b"})),
            &m("m2", T2),
            true,
        )
        .unwrap();
        assert_eq!(out["spec"]["holderIdentity"], "b");
        assert_eq!(
            fields(&out, "m1", "Apply"),
            json!({"f:metadata": {"f:labels": {"f:app": {}}}})
        );
        assert_eq!(
            fields(&out, "m2", "Apply"),
            json!({"f:spec": {"f:holderIdentity": {}}})
        );
        // Forcing away a manager's last field drops its entry.
        let out2 = apply(
            &f.schema,
            Some(f.lease),
            Some(&out),
            &{
                let mut c = lease(json!({"holderIdentity": "c"}));
                c["metadata"]["labels"] = json!({"app": "y"});
                c
            },
            &m("m3", T3),
            true,
        )
        .unwrap();
        assert_eq!(managers(&out2), ["m3/Apply"]);
    }

    #[test]
    fn field_dropped_by_only_applier_is_removed() {
        let f = fixture();
        let live = ap(
            &f,
            None,
            &lease(json!({"holderIdentity": "a", "leaseDurationSeconds": 10})),
            &m("m1", T1),
        );
        let out = ap(
            &f,
            Some(&live),
            &lease(json!({"holderIdentity": "a"})),
            &m("m1", T2),
        );
        assert_eq!(out["spec"], json!({"holderIdentity": "a"}));
        assert_eq!(
            fields(&out, "m1", "Apply"),
            json!({"f:spec": {"f:holderIdentity": {}}})
        );
        assert_eq!(entry(&out, "m1", "Apply")["time"], T2);
    }

    #[test]
    fn field_dropped_but_co_owned_stays() {
        let f = fixture();
        let live = ap(
            &f,
            None,
            &lease(json!({"holderIdentity": "a", "leaseDurationSeconds": 10})),
            &m("m1", T1),
        );
        let live = ap(
            &f,
            Some(&live),
            &lease(json!({"leaseDurationSeconds": 10})),
            &m("m2", T2),
        );
        let out = ap(
            &f,
            Some(&live),
            &lease(json!({"holderIdentity": "a"})),
            &m("m1", T3),
        );
        assert_eq!(
            out["spec"],
            json!({"holderIdentity": "a", "leaseDurationSeconds": 10})
        );
        assert_eq!(
            fields(&out, "m1", "Apply"),
            json!({"f:spec": {"f:holderIdentity": {}}})
        );
        assert_eq!(
            fields(&out, "m2", "Apply"),
            json!({"f:spec": {"f:leaseDurationSeconds": {}}})
        );
    }

    #[test]
    fn field_dropped_but_owned_by_updater_stays() {
        let f = fixture();
        let live = ap(
            &f,
            None,
            &lease(json!({"holderIdentity": "a", "leaseDurationSeconds": 10})),
            &m("m1", T1),
        );
        // An Update that sets the same value takes nothing (nothing changed).
        let mut changed = live.clone();
        changed["spec"]["acquireTime"] = json!("x");
        let live = record_update(
            &f.schema,
            Some(f.lease),
            Some(&live),
            &changed,
            &m("ctl", T2),
        );
        assert_eq!(
            fields(&live, "ctl", "Update"),
            json!({"f:spec": {"f:acquireTime": {}}})
        );
        // m1 never owned acquireTime, so dropping everything but holderIdentity keeps it.
        let out = ap(
            &f,
            Some(&live),
            &lease(json!({"holderIdentity": "a"})),
            &m("m1", T3),
        );
        assert_eq!(
            out["spec"],
            json!({"holderIdentity": "a", "acquireTime": "x"})
        );
    }

    #[test]
    fn update_takes_ownership_then_apply_conflicts() {
        let f = fixture();
        let mut cfg = lease(json!({"holderIdentity": "a"}));
        cfg["metadata"]["labels"] = json!({"app": "x"});
        let live = ap(&f, None, &cfg, &m("m1", T1));
        let mut new = live.clone();
        new["spec"]["holderIdentity"] = json!("b");
        let live = record_update(
            &f.schema,
            Some(f.lease),
            Some(&live),
            &new,
            &m("kube-controller-manager", T2),
        );
        assert_eq!(
            fields(&live, "kube-controller-manager", "Update"),
            json!({"f:spec": {"f:holderIdentity": {}}})
        );
        assert_eq!(
            fields(&live, "m1", "Apply"),
            json!({"f:metadata": {"f:labels": {"f:app": {}}}})
        );
        assert_eq!(
            managers(&live),
            ["m1/Apply", "kube-controller-manager/Update"]
        );
        let err = apply(
            &f.schema,
            Some(f.lease),
            Some(&live),
            &cfg,
            &m("m1", T3),
            false,
        )
        .unwrap_err();
        assert_eq!(
            err.message(),
            r#"Apply failed with 1 conflict: conflict with "kube-controller-manager" using coordination.k8s.io/v1: .spec.holderIdentity"#
        );
    }

    #[test]
    fn list_map_merges_by_key_with_per_item_ownership() {
        let f = fixture();
        let live = apw(
            &f,
            None,
            &widget(
                json!({"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]}),
            ),
            &wm("m1", T1),
        );
        assert_eq!(
            fields(&live, "m1", "Apply"),
            json!({"f:spec": {"f:containers": {
                "k:{\"name\":\"a\"}": {".": {}, "f:image": {}, "f:name": {}},
                "k:{\"name\":\"b\"}": {".": {}, "f:image": {}, "f:name": {}}
            }}})
        );
        let live = apw(
            &f,
            Some(&live),
            &widget(json!({"containers": [{"name": "b", "args": ["--v"]}]})),
            &wm("m2", T2),
        );
        assert_eq!(
            live["spec"]["containers"],
            json!([{"name": "a", "image": "x"}, {"name": "b", "image": "y", "args": ["--v"]}])
        );
        assert_eq!(
            fields(&live, "m2", "Apply"),
            json!({"f:spec": {"f:containers": {
                "k:{\"name\":\"b\"}": {".": {}, "f:args": {}, "f:name": {}}
            }}})
        );
        // m2 moves on to container c: its args on b go, b itself stays (m1 owns it).
        let live = apw(
            &f,
            Some(&live),
            &widget(json!({"containers": [{"name": "c", "image": "z"}]})),
            &wm("m2", T3),
        );
        assert_eq!(
            live["spec"]["containers"],
            json!([{"name": "a", "image": "x"}, {"name": "b", "image": "y"}, {"name": "c", "image": "z"}])
        );
        // Changing a's image conflicts on that item's field only.
        let err = apply(
            &f.schema,
            Some(f.widget),
            Some(&live),
            &widget(json!({"containers": [{"name": "a", "image": "other"}]})),
            &wm("m2", T4),
            false,
        )
        .unwrap_err();
        assert_eq!(
            err.message(),
            r#"Apply failed with 1 conflict: conflict with "m1": .spec.containers[name="a"].image"#
        );
    }

    #[test]
    fn dropping_an_item_removes_it_when_unowned() {
        let f = fixture();
        let live = apw(
            &f,
            None,
            &widget(
                json!({"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]}),
            ),
            &wm("m1", T1),
        );
        let out = apw(
            &f,
            Some(&live),
            &widget(json!({"containers": [{"name": "b", "image": "y"}]})),
            &wm("m1", T2),
        );
        assert_eq!(
            out["spec"]["containers"],
            json!([{"name": "b", "image": "y"}])
        );
        // Dropping the whole list removes the field (not left behind as [] or null).
        let out = apw(
            &f,
            Some(&out),
            &widget(json!({"replicas": 1})),
            &wm("m1", T3),
        );
        assert_eq!(out["spec"], json!({"replicas": 1}));
    }

    #[test]
    fn dropped_nested_struct_is_pruned_whole() {
        let f = fixture();
        let live = apw(
            &f,
            None,
            &widget(
                json!({"replicas": 1, "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}}),
            ),
            &wm("m1", T1),
        );
        assert_eq!(
            fields(&live, "m1", "Apply"),
            json!({"f:spec": {"f:replicas": {}, "f:strategy": {"f:rollingUpdate": {"f:maxSurge": {}}, "f:type": {}}}})
        );
        // Another manager's field inside the struct keeps the struct alive.
        let mut new = live.clone();
        new["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] = json!(0);
        let kept = record_update(&f.schema, Some(f.widget), Some(&live), &new, &wm("ctl", T2));
        let out = apw(
            &f,
            Some(&kept),
            &widget(json!({"replicas": 2})),
            &wm("m1", T3),
        );
        assert_eq!(
            out["spec"],
            json!({"replicas": 2, "strategy": {"rollingUpdate": {"maxUnavailable": 0}}})
        );
        // Otherwise it goes entirely.
        let out = apw(
            &f,
            Some(&live),
            &widget(json!({"replicas": 2})),
            &wm("m1", T3),
        );
        assert_eq!(out["spec"], json!({"replicas": 2}));
    }

    #[test]
    fn set_items_are_owned_by_value() {
        let f = fixture();
        let mut c1 = lease(json!({"holderIdentity": "a"}));
        c1["metadata"]["finalizers"] = json!(["x"]);
        let live = ap(&f, None, &c1, &m("m1", T1));
        let mut c2 = lease(json!({}));
        c2["metadata"]["finalizers"] = json!(["y"]);
        let live = ap(&f, Some(&live), &c2, &m("m2", T2));
        assert_eq!(live["metadata"]["finalizers"], json!(["x", "y"]));
        assert_eq!(
            fields(&live, "m1", "Apply"),
            json!({"f:metadata": {"f:finalizers": {"v:\"x\"": {}}}, "f:spec": {"f:holderIdentity": {}}})
        );
        assert_eq!(
            fields(&live, "m2", "Apply"),
            json!({"f:metadata": {"f:finalizers": {"v:\"y\"": {}}}})
        );
        let out = ap(
            &f,
            Some(&live),
            &lease(json!({"holderIdentity": "a"})),
            &m("m1", T3),
        );
        assert_eq!(out["metadata"]["finalizers"], json!(["y"]));
    }

    #[test]
    fn managed_fields_in_applied_config_is_rejected() {
        let f = fixture();
        let mut cfg = lease(json!({"holderIdentity": "a"}));
        cfg["metadata"]["managedFields"] = json!([{"manager": "x", "operation": "Apply"}]);
        let err = apply(&f.schema, Some(f.lease), None, &cfg, &m("m1", T1), false).unwrap_err();
        assert_eq!(
            err,
            ApplyError::Invalid("metadata.managedFields must be nil".into())
        );
        assert!(matches!(err, ApplyError::Invalid(_)), "{err:?}");
        assert!(err.causes().is_empty());
        cfg["metadata"]["managedFields"] = json!([]);
        assert!(apply(&f.schema, Some(f.lease), None, &cfg, &m("m1", T1), false).is_err());
        // null is nil.
        cfg["metadata"]["managedFields"] = Value::Null;
        let out = apply(&f.schema, Some(f.lease), None, &cfg, &m("m1", T1), false).unwrap();
        assert_eq!(entries(&out).len(), 1);
        assert_eq!(
            fields(&out, "m1", "Apply"),
            json!({"f:spec": {"f:holderIdentity": {}}})
        );
    }

    // ---- record_update ------------------------------------------------------------------------

    #[test]
    fn create_records_update_entry_with_dot_for_new_maps() {
        let f = fixture();
        let mut new = lease(json!({"holderIdentity": "a"}));
        new["metadata"]["labels"] = json!({"app": "x"});
        new["metadata"]["uid"] = json!("u1");
        let out = record_update(
            &f.schema,
            Some(f.lease),
            None,
            &new,
            &m("kubectl-create", T1),
        );
        assert_eq!(
            entries(&out),
            vec![json!({
                "manager": "kubectl-create",
                "operation": "Update",
                "apiVersion": LEASE_GV,
                "time": T1,
                "fieldsType": "FieldsV1",
                "fieldsV1": {
                    "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                    "f:spec": {"f:holderIdentity": {}}
                }
            })]
        );
        let text = serde_json::to_string(&out["metadata"]["managedFields"][0]["fieldsV1"]).unwrap();
        assert_eq!(
            text,
            r#"{"f:metadata":{"f:labels":{".":{},"f:app":{}}},"f:spec":{"f:holderIdentity":{}}}"#
        );
    }

    #[test]
    fn updates_by_same_manager_merge_and_restamp() {
        let f = fixture();
        let mut new = lease(json!({"holderIdentity": "a"}));
        new["metadata"]["uid"] = json!("u1");
        let v1 = record_update(&f.schema, Some(f.lease), None, &new, &m("ctl", T1));
        let mut new2 = v1.clone();
        new2["spec"]["renewTime"] = json!("r");
        let v2 = record_update(&f.schema, Some(f.lease), Some(&v1), &new2, &m("ctl", T2));
        assert_eq!(entries(&v2).len(), 1);
        assert_eq!(entry(&v2, "ctl", "Update")["time"], T2);
        assert_eq!(
            fields(&v2, "ctl", "Update"),
            json!({"f:spec": {"f:holderIdentity": {}, "f:renewTime": {}}})
        );
        // A write that changes nothing keeps the entry and its time.
        let v3 = record_update(&f.schema, Some(f.lease), Some(&v2), &v2, &m("ctl", T3));
        assert_eq!(entries(&v3), entries(&v2));
        // Only stripped fields changed: no new time either.
        let mut v4 = v2.clone();
        v4["metadata"]["resourceVersion"] = json!("9");
        let v4 = record_update(&f.schema, Some(f.lease), Some(&v2), &v4, &m("ctl", T4));
        assert_eq!(entry(&v4, "ctl", "Update")["time"], T2);
    }

    #[test]
    fn removed_fields_leave_every_set() {
        let f = fixture();
        let live = ap(
            &f,
            None,
            &lease(json!({"holderIdentity": "a", "leaseDurationSeconds": 10})),
            &m("m1", T1),
        );
        let mut new = live.clone();
        new["spec"]
            .as_object_mut()
            .unwrap()
            .remove("leaseDurationSeconds");
        let out = record_update(&f.schema, Some(f.lease), Some(&live), &new, &m("ctl", T2));
        assert_eq!(managers(&out), ["m1/Apply"]);
        assert_eq!(
            fields(&out, "m1", "Apply"),
            json!({"f:spec": {"f:holderIdentity": {}}})
        );
    }

    #[test]
    fn reset_and_untracked_objects() {
        let f = fixture();
        let mut new = lease(json!({"holderIdentity": "a"}));
        new["metadata"]["uid"] = json!("u1");
        let v1 = record_update(&f.schema, Some(f.lease), None, &new, &m("ctl", T1));
        assert_eq!(entries(&v1).len(), 1);
        for reset in [json!([]), json!([{}])] {
            let mut put = v1.clone();
            put["metadata"]["managedFields"] = reset;
            put["spec"]["holderIdentity"] = json!("b");
            let out = record_update(&f.schema, Some(f.lease), Some(&v1), &put, &m("ctl", T2));
            assert!(out["metadata"].get("managedFields").is_none(), "{out}");
            // ...and the untracked object stays untracked on the next update.
            let mut next = out.clone();
            next["spec"]["holderIdentity"] = json!("c");
            let out2 = record_update(&f.schema, Some(f.lease), Some(&out), &next, &m("ctl", T3));
            assert!(out2["metadata"].get("managedFields").is_none());
        }
        // A PUT echoing managedFields back keeps them as the base.
        let mut put = v1.clone();
        put["spec"]["renewTime"] = json!("r");
        let out = record_update(&f.schema, Some(f.lease), Some(&v1), &put, &m("other", T2));
        assert_eq!(managers(&out), ["ctl/Update", "other/Update"]);
    }

    #[test]
    fn subresource_writes_are_separate_entries() {
        let f = fixture();
        let live = apw(&f, None, &widget(json!({"replicas": 1})), &wm("m1", T1));
        let mut new = live.clone();
        new["status"] = json!({"phase": "Ready"});
        // A status write ignores managedFields smuggled into the body.
        new["metadata"]["managedFields"] = json!([]);
        let mgr = Manager {
            name: "ctl",
            api_version: "example.com/v1",
            time: T2,
            subresource: Some("status"),
        };
        let out = record_update(&f.schema, Some(f.widget), Some(&live), &new, &mgr);
        let e = entry(&out, "ctl", "Update");
        assert_eq!(e["subresource"], "status");
        assert_eq!(e["fieldsV1"], json!({"f:status": {"f:phase": {}}}));
        assert_eq!(entries(&out).len(), 2);
        let mut cfg = widget(json!({}));
        cfg["status"] = json!({"phase": "Broken"});
        let err = apply(
            &f.schema,
            Some(f.widget),
            Some(&out),
            &cfg,
            &wm("m1", T3),
            false,
        )
        .unwrap_err();
        assert_eq!(
            err.message(),
            r#"Apply failed with 1 conflict: conflict with "ctl" with subresource "status" using example.com/v1: .status.phase"#
        );
    }

    // ---- apply details ---------------------------------------------------------------------

    #[test]
    fn before_first_apply_owns_untracked_fields() {
        let f = fixture();
        let mut live = lease(json!({"holderIdentity": "a", "leaseDurationSeconds": 10}));
        live["metadata"]["uid"] = json!("u1");
        live["metadata"]["resourceVersion"] = json!("5");
        let err = apply(
            &f.schema,
            Some(f.lease),
            Some(&live),
            &lease(json!({"holderIdentity": "b"})),
            &m("m1", T1),
            false,
        )
        .unwrap_err();
        assert_eq!(
            err.message(),
            r#"Apply failed with 1 conflict: conflict with "before-first-apply" using coordination.k8s.io/v1: .spec.holderIdentity"#
        );
        let out = ap(
            &f,
            Some(&live),
            &lease(json!({"holderIdentity": "a"})),
            &m("m1", T1),
        );
        assert_eq!(managers(&out), ["m1/Apply", "before-first-apply/Update"]);
        assert_eq!(
            fields(&out, "before-first-apply", "Update"),
            json!({"f:spec": {".": {}, "f:holderIdentity": {}, "f:leaseDurationSeconds": {}}})
        );
        assert_eq!(entry(&out, "before-first-apply", "Update")["time"], T1);
    }

    #[test]
    fn multiple_conflicts_message() {
        let f = fixture();
        let live = ap(
            &f,
            None,
            &lease(json!({"holderIdentity": "a", "leaseDurationSeconds": 10})),
            &m("m1", T1),
        );
        let mut new = live.clone();
        new["spec"]["renewTime"] = json!("r1");
        let live = record_update(&f.schema, Some(f.lease), Some(&live), &new, &m("kcm", T2));
        let err = apply(
            &f.schema,
            Some(f.lease),
            Some(&live),
            &lease(json!({"holderIdentity": "b", "leaseDurationSeconds": 20, "renewTime": "r2"})),
            &m("m3", T3),
            false,
        )
        .unwrap_err();
        assert_eq!(
            err.message(),
            "Apply failed with 3 conflicts: conflicts with \"kcm\" using coordination.k8s.io/v1:\n\
             - .spec.renewTime\n\
             conflicts with \"m1\":\n\
             - .spec.holderIdentity\n\
             - .spec.leaseDurationSeconds"
        );
        let fields_: Vec<String> = err.causes().into_iter().map(|c| c.2).collect();
        assert_eq!(
            fields_,
            [
                ".spec.renewTime",
                ".spec.holderIdentity",
                ".spec.leaseDurationSeconds"
            ]
        );
    }

    #[test]
    fn entries_sort_by_operation_then_time_then_name() {
        let f = fixture();
        let v = ap(
            &f,
            None,
            &lease(json!({"holderIdentity": "a"})),
            &m("zeta", T2),
        );
        let mut n = v.clone();
        n["spec"]["renewTime"] = json!("r");
        let v = record_update(&f.schema, Some(f.lease), Some(&v), &n, &m("alpha", T1));
        let v = ap(
            &f,
            Some(&v),
            &lease(json!({"acquireTime": "q"})),
            &m("beta", T3),
        );
        let mut n = v.clone();
        n["spec"]["leaseTransitions"] = json!(1);
        let v = record_update(&f.schema, Some(f.lease), Some(&v), &n, &m("aaa", T1));
        assert_eq!(
            managers(&v),
            ["zeta/Apply", "beta/Apply", "aaa/Update", "alpha/Update"]
        );
    }

    #[test]
    fn update_managers_are_capped_at_ten() {
        let f = fixture();
        let mut obj = lease(json!({}));
        obj["metadata"]["uid"] = json!("u");
        let mut live: Option<Value> = None;
        for i in 0..11 {
            let mut new = live.clone().unwrap_or_else(|| obj.clone());
            new["metadata"]["labels"][format!("l{i:02}")] = json!("v");
            let time = format!("2024-01-01T00:00:{i:02}Z");
            let out = record_update(
                &f.schema,
                Some(f.lease),
                live.as_ref(),
                &new,
                &m(&format!("u{i:02}"), &time),
            );
            live = Some(out);
        }
        let live = live.unwrap();
        let es = entries(&live);
        assert_eq!(es.len(), 10);
        let bucket = entry(&live, "ancient-changes", "Update");
        assert_eq!(bucket["time"], "2024-01-01T00:00:01Z");
        assert_eq!(
            bucket["fieldsV1"],
            // u00 created the object with an empty spec, which it owns as a leaf.
            json!({"f:metadata": {"f:labels": {".": {}, "f:l00": {}, "f:l01": {}}}})
        );
        assert_eq!(entry(&live, "u00", "Update"), Value::Null);
    }

    #[test]
    fn atomic_list_and_atomic_map_are_single_fields() {
        let f = fixture();
        let live = apw(
            &f,
            None,
            &widget(json!({
                "containers": [{"name": "x", "args": ["a", "b"]}],
                "selector": {"matchLabels": {"a": "1"}}
            })),
            &wm("m1", T1),
        );
        assert_eq!(
            fields(&live, "m1", "Apply"),
            json!({"f:spec": {
                "f:containers": {"k:{\"name\":\"x\"}": {".": {}, "f:args": {}, "f:name": {}}},
                "f:selector": {}
            }})
        );
        let cfg = widget(json!({
            "containers": [{"name": "x", "args": ["c"]}],
            "selector": {"matchLabels": {"b": "2"}}
        }));
        let err = apply(
            &f.schema,
            Some(f.widget),
            Some(&live),
            &cfg,
            &wm("m2", T2),
            false,
        )
        .unwrap_err();
        let fields_: Vec<String> = err.causes().into_iter().map(|c| c.2).collect();
        assert_eq!(
            fields_,
            [".spec.selector", ".spec.containers[name=\"x\"].args"]
        );
        let out = apply(
            &f.schema,
            Some(f.widget),
            Some(&live),
            &cfg,
            &wm("m2", T2),
            true,
        )
        .unwrap();
        assert_eq!(
            out["spec"]["containers"],
            json!([{"name": "x", "args": ["c"]}])
        );
        assert_eq!(out["spec"]["selector"], json!({"matchLabels": {"b": "2"}}));
    }

    #[test]
    fn untyped_maps_are_granular_and_lists_atomic() {
        let f = fixture();
        let live = apw(
            &f,
            None,
            &widget(json!({"config": {"a": {"b": 1}, "list": [1, 2]}})),
            &wm("m1", T1),
        );
        assert_eq!(
            fields(&live, "m1", "Apply"),
            json!({"f:spec": {"f:config": {"f:a": {".": {}, "f:b": {}}, "f:list": {}}}})
        );
        let out = apw(
            &f,
            Some(&live),
            &widget(json!({"config": {"a": {"c": 2}, "list": [1, 2]}})),
            &wm("m2", T2),
        );
        assert_eq!(
            out["spec"]["config"],
            json!({"a": {"b": 1, "c": 2}, "list": [1, 2]})
        );
        // No schema at all: the whole object is deduced.
        let out = apply(
            &f.schema,
            None,
            None,
            &widget(json!({"anything": {"x": [{"y": 1}]}})),
            &wm("m1", T1),
            false,
        )
        .unwrap();
        assert_eq!(
            fields(&out, "m1", "Apply"),
            json!({"f:spec": {".": {}, "f:anything": {".": {}, "f:x": {}}}})
        );
    }

    #[test]
    fn undeclared_fields_and_bad_lists_are_typed_patch_errors() {
        let f = fixture();
        let err = apply(
            &f.schema,
            Some(f.lease),
            None,
            &lease(json!({"bogus": 1})),
            &m("m1", T1),
            false,
        )
        .unwrap_err();
        assert_eq!(
            err.message(),
            "failed to create typed patch object (default/l; coordination.k8s.io/v1, Kind=Lease): \
             .spec.bogus: field not declared in schema"
        );
        assert!(matches!(err, ApplyError::Internal(_)), "{err:?}");
        let err = apply(
            &f.schema,
            Some(f.widget),
            None,
            &widget(json!({"containers": [{"image": "x"}, {"name": "a"}, {"name": "a"}]})),
            &wm("m1", T1),
            false,
        )
        .unwrap_err();
        assert_eq!(
            err.message(),
            "failed to create typed patch object (default/w; example.com/v1, Kind=Widget): errors:\n  \
             .spec.containers: element 0: associative list with keys has an element that omits key field \"name\" (and doesn't have default value)\n  \
             .spec.containers: duplicate entries for key [name=\"a\"]"
        );
    }

    #[test]
    fn wrong_kind_or_version_is_bad_request() {
        let f = fixture();
        let mut cfg = lease(json!({}));
        cfg["apiVersion"] = json!("coordination.k8s.io/v2");
        let err = apply(&f.schema, Some(f.lease), None, &cfg, &m("m1", T1), false).unwrap_err();
        assert_eq!(
            err,
            ApplyError::Invalid("invalid object type: coordination.k8s.io/v2, Kind=Lease".into())
        );
        let mut cfg = lease(json!({}));
        cfg.as_object_mut().unwrap().remove("kind");
        let err = apply(&f.schema, Some(f.lease), None, &cfg, &m("m1", T1), false).unwrap_err();
        assert_eq!(
            err.message(),
            "invalid object type: coordination.k8s.io/v1, Kind="
        );
        // The kind must match the live object's (or the schema root's).
        let live = ap(&f, None, &lease(json!({})), &m("m1", T1));
        let mut cfg = lease(json!({}));
        cfg["kind"] = json!("Other");
        assert!(
            apply(
                &f.schema,
                Some(f.lease),
                Some(&live),
                &cfg,
                &m("m1", T1),
                false
            )
            .is_err()
        );
        let w = wm("m1", T1);
        let err = apply(
            &f.schema,
            Some(f.widget),
            None,
            &{
                let mut c = widget(json!({}));
                c["kind"] = json!("Leaf");
                c
            },
            &w,
            false,
        )
        .unwrap_err();
        assert_eq!(
            err.message(),
            "invalid object type: example.com/v1, Kind=Leaf"
        );
        let err = apply(
            &f.schema,
            Some(f.lease),
            None,
            &json!([1]),
            &m("m1", T1),
            false,
        )
        .unwrap_err();
        assert!(matches!(err, ApplyError::Invalid(_)), "{err:?}");
    }

    #[test]
    fn kubectl_takes_over_client_side_apply_fields() {
        let f = fixture();
        let last = r#"{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"annotations":{},"name":"l","namespace":"default"},"spec":{"holderIdentity":"a"}}
"#;
        let mut created = lease(json!({"holderIdentity": "a"}));
        created["metadata"]["annotations"] = json!({LAST_APPLIED: last});
        created["metadata"]["uid"] = json!("u1");
        let live = record_update(
            &f.schema,
            Some(f.lease),
            None,
            &created,
            &m("kubectl-client-side-apply", T1),
        );
        let cfg = lease(json!({"holderIdentity": "b"}));
        // Another manager conflicts...
        assert!(
            apply(
                &f.schema,
                Some(f.lease),
                Some(&live),
                &cfg,
                &m("helm", T2),
                false
            )
            .is_err()
        );
        // ...kubectl takes the field over and re-syncs the annotation.
        let out = apply(
            &f.schema,
            Some(f.lease),
            Some(&live),
            &cfg,
            &m("kubectl", T2),
            false,
        )
        .unwrap();
        assert_eq!(out["spec"]["holderIdentity"], "b");
        assert_eq!(
            fields(&out, "kubectl", "Apply"),
            json!({"f:spec": {"f:holderIdentity": {}}})
        );
        assert_eq!(
            fields(&out, "kubectl-client-side-apply", "Update"),
            json!({
                "f:metadata": {"f:annotations": {".": {}, format!("f:{LAST_APPLIED}"): {}}}
            })
        );
        assert_eq!(
            out["metadata"]["annotations"][LAST_APPLIED],
            "{\"apiVersion\":\"coordination.k8s.io/v1\",\"kind\":\"Lease\",\"metadata\":{\"name\":\"l\",\"namespace\":\"default\"},\"spec\":{\"holderIdentity\":\"b\"}}\n"
        );
        // A field whose live value drifted from last-applied still conflicts.
        let mut drifted = live.clone();
        drifted["spec"]["holderIdentity"] = json!("z");
        let drifted = record_update(
            &f.schema,
            Some(f.lease),
            Some(&live),
            &drifted,
            &m("kubectl-edit", T2),
        );
        let err = apply(
            &f.schema,
            Some(f.lease),
            Some(&drifted),
            &cfg,
            &m("kubectl", T3),
            false,
        )
        .unwrap_err();
        assert_eq!(
            err.message(),
            r#"Apply failed with 1 conflict: conflict with "kubectl-edit" using coordination.k8s.io/v1: .spec.holderIdentity"#
        );
    }

    #[test]
    fn ports_default_protocol_and_key_encoding() {
        let f = fixture();
        let out = apw(
            &f,
            None,
            &widget(json!({"containers": [{"name": "a<b", "ports": [{"containerPort": 80}]}]})),
            &wm("m1", T1),
        );
        assert_eq!(
            fields(&out, "m1", "Apply"),
            json!({"f:spec": {"f:containers": {"k:{\"name\":\"a\\u003cb\"}": {
                ".": {},
                "f:name": {},
                "f:ports": {"k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}}}
            }}}})
        );
        let err = apply(
            &f.schema,
            Some(f.widget),
            Some(&out),
            &widget(
                json!({"containers": [{"name": "a<b", "ports": [{"containerPort": 80, "name": "web"}]}]}),
            ),
            &wm("m2", T2),
            false,
        );
        assert!(
            err.is_ok(),
            "adding a field to an owned item is no conflict"
        );
        let live = err.unwrap();
        let err = apply(
            &f.schema,
            Some(f.widget),
            Some(&live),
            &widget(json!({"containers": [{"name": "a<b", "ports": [{"containerPort": 80, "name": "api"}]}]})),
            &wm("m3", T3),
            false,
        )
        .unwrap_err();
        assert_eq!(
            err.causes()[0].2,
            r#".spec.containers[name="a<b"].ports[containerPort=80,protocol="TCP"].name"#
        );
    }

    #[test]
    fn noop_apply_keeps_time_and_empty_apply_releases_everything() {
        let f = fixture();
        let cfg = lease(json!({"holderIdentity": "a"}));
        let v1 = ap(&f, None, &cfg, &m("m1", T1));
        let v2 = ap(&f, Some(&v1), &cfg, &m("m1", T2));
        assert_eq!(v2, v1);
        let v3 = ap(&f, Some(&v2), &lease(json!(null)), &m("m1", T3));
        assert!(v3.get("spec").is_none(), "{v3}");
        assert!(v3["metadata"].get("managedFields").is_none());
    }

    #[test]
    fn times_are_normalised() {
        let f = fixture();
        let out = ap(
            &f,
            None,
            &lease(json!({"holderIdentity": "a"})),
            &m("m1", "2024-03-01T01:30:00.123+01:30"),
        );
        assert_eq!(entry(&out, "m1", "Apply")["time"], "2024-03-01T00:00:00Z");
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(format_rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(parse_rfc3339("2023-02-29T00:00:00Z"), None);
        assert_eq!(parse_rfc3339("garbage"), None);
    }

    #[test]
    fn fields_v1_round_trips() {
        let raw = json!({
            "f:spec": {
                "f:containers": {
                    "k:{\"name\":\"b\"}": {".": {}, "f:image": {}},
                    "k:{\"name\":\"a\"}": {}
                },
                "f:ports": {"k:{\"protocol\":\"TCP\",\"containerPort\":80}": {}},
                "f:list": {"i:1": {}, "i:0": {}},
                "f:set": {"v:\"b\"": {}, "v:2": {}, "v:1.5": {}},
                "x:future": {}
            },
            "f:a": {"f:b": {}, ".": {}}
        });
        let set = fields_to_set(&raw).unwrap();
        let text = serde_json::to_string(&set_to_fields(&set)).unwrap();
        assert_eq!(
            text,
            concat!(
                r#"{"f:a":{".":{},"f:b":{}},"f:spec":{"f:containers":{"k:{\"name\":\"a\"}":{},"#,
                r#""k:{\"name\":\"b\"}":{".":{},"f:image":{}}},"f:list":{"i:0":{},"i:1":{}},"#,
                r#""f:ports":{"k:{\"containerPort\":80,\"protocol\":\"TCP\"}":{}},"#,
                r##""f:set":{"v:1.5":{},"v:2":{},"v:\"b\"":{}}}}"##
            )
        );
        let mut paths = Vec::new();
        set.iterate(&mut Vec::new(), &mut |p| paths.push(path_string(p)));
        assert_eq!(
            paths,
            [
                ".a",
                ".a.b",
                ".spec.containers[name=\"a\"]",
                ".spec.containers[name=\"b\"]",
                ".spec.containers[name=\"b\"].image",
                ".spec.list[0]",
                ".spec.list[1]",
                ".spec.ports[containerPort=80,protocol=\"TCP\"]",
                ".spec.set[=1.5]",
                ".spec.set[=2]",
                ".spec.set[=\"b\"]",
            ]
        );
        assert!(fields_to_set(&json!({"q": {}})).is_err());
        assert!(fields_to_set(&json!({"fx": {}})).is_err());
        assert!(fields_to_set(&json!({"k:[1]": {}})).is_err());
        assert!(fields_to_set(&json!("nope")).is_err());
    }

    #[test]
    fn corrupt_or_hostile_input_never_panics() {
        let f = fixture();
        let mut live = lease(json!({"holderIdentity": "a"}));
        live["metadata"]["managedFields"] = json!([{"manager": "x", "operation": "Bogus", "apiVersion": "v1", "fieldsType": "FieldsV1"}]);
        let err = apply(
            &f.schema,
            Some(f.lease),
            Some(&live),
            &lease(json!({})),
            &m("m1", T1),
            false,
        )
        .unwrap_err();
        assert_eq!(
            err.message(),
            "failed to decode managed fields: operation must be `Apply` or `Update`"
        );
        // record_update falls back to an empty history instead.
        let mut new = live.clone();
        new["spec"]["holderIdentity"] = json!("b");
        let out = record_update(&f.schema, Some(f.lease), Some(&live), &new, &m("ctl", T1));
        assert_eq!(managers(&out), ["ctl/Update"]);
        // Off-schema live data and shape changes.
        let weird = json!({"apiVersion": LEASE_GV, "kind": "Lease", "metadata": "oops", "spec": [1, 2], "extra": {"a": 1}});
        let out = record_update(
            &f.schema,
            Some(f.lease),
            Some(&weird),
            &lease(json!({"holderIdentity": "a"})),
            &m("ctl", T1),
        );
        assert!(out.is_object());
        let _ = apply(
            &f.schema,
            Some(f.lease),
            Some(&weird),
            &lease(json!({"holderIdentity": "a"})),
            &m("m1", T1),
            true,
        );
        let _ = apply(
            &f.schema,
            Some(f.widget),
            None,
            &widget(json!({"containers": "nope", "tags": [{"a": 1}, null], "config": [1]})),
            &wm("m1", T1),
            true,
        );
        // Deep nesting is refused, not recursed into.
        let mut deep = json!(1);
        for _ in 0..300 {
            deep = json!({"a": deep});
        }
        let err = apply(
            &f.schema,
            Some(f.widget),
            None,
            &widget(json!({"config": deep})),
            &wm("m1", T1),
            false,
        );
        assert!(matches!(err, Err(ApplyError::Invalid(_))));
        let out = record_update(
            &f.schema,
            None,
            None,
            &widget(json!({"config": deep})),
            &wm("m1", T1),
        );
        assert!(out["metadata"].get("managedFields").is_none());
        assert_eq!(
            record_update(&f.schema, None, None, &json!(3), &wm("m1", T1)),
            json!(3)
        );
    }

    // ---- ports of structured-merge-diff merge tests ------------------------------------------

    fn leaf_obj(fields: Value) -> Value {
        let mut o =
            json!({"apiVersion": "example.com/v1", "kind": "Leaf", "metadata": {"name": "x"}});
        for (k, v) in fields.as_object().cloned().unwrap_or_default() {
            o[k] = v;
        }
        o
    }

    fn leaf_apply(
        f: &Fixture,
        live: Option<&Value>,
        cfg: Value,
        name: &str,
        force: bool,
    ) -> Result<Value, ApplyError> {
        apply(
            &f.schema,
            Some(f.leaf),
            live,
            &leaf_obj(cfg),
            &wm(name, T1),
            force,
        )
    }

    fn leaf_update(f: &Fixture, live: &Value, set: Value, name: &str) -> Value {
        let mut new = live.clone();
        for (k, v) in set.as_object().cloned().unwrap_or_default() {
            new[k] = v;
        }
        record_update(&f.schema, Some(f.leaf), Some(live), &new, &wm(name, T2))
    }

    fn strip_meta(v: &Value) -> Value {
        let mut v = v.clone();
        if let Some(o) = v.as_object_mut() {
            o.remove("apiVersion");
            o.remove("kind");
            o.remove("metadata");
        }
        v
    }

    #[test]
    fn smd_leaf_apply_update_apply_with_conflict() {
        let f = fixture();
        let v = leaf_apply(
            &f,
            None,
            json!({"numeric": 1, "string": "string"}),
            "default",
            false,
        )
        .unwrap();
        let v = leaf_update(
            &f,
            &v,
            json!({"string": "controller string", "bool": true}),
            "controller",
        );
        let err = leaf_apply(
            &f,
            Some(&v),
            json!({"numeric": 2, "string": "user string"}),
            "default",
            false,
        )
        .unwrap_err();
        assert_eq!(
            err.message(),
            r#"Apply failed with 1 conflict: conflict with "controller" using example.com/v1: .string"#
        );
        let v = leaf_apply(
            &f,
            Some(&v),
            json!({"numeric": 2, "string": "user string"}),
            "default",
            true,
        )
        .unwrap();
        assert_eq!(
            strip_meta(&v),
            json!({"numeric": 2, "string": "user string", "bool": true})
        );
        assert_eq!(
            fields(&v, "default", "Apply"),
            json!({"f:numeric": {}, "f:string": {}})
        );
        assert_eq!(fields(&v, "controller", "Update"), json!({"f:bool": {}}));
    }

    #[test]
    fn smd_leaf_update_apply_omits() {
        let f = fixture();
        let v = leaf_apply(&f, None, json!({"numeric": 2}), "default", false).unwrap();
        let v = leaf_update(&f, &v, json!({"numeric": 1}), "controller");
        // The applier lost its only field, so its entry is gone and nothing is pruned.
        assert_eq!(managers(&v), ["controller/Update"]);
        let v = leaf_apply(&f, Some(&v), json!({}), "default", false).unwrap();
        assert_eq!(strip_meta(&v), json!({"numeric": 1}));
        assert_eq!(managers(&v), ["controller/Update"]);
    }

    #[test]
    fn smd_leaf_apply_twice_remove() {
        let f = fixture();
        let v = leaf_apply(
            &f,
            None,
            json!({"numeric": 1, "string": "string", "bool": false}),
            "default",
            false,
        )
        .unwrap();
        let v = leaf_apply(
            &f,
            Some(&v),
            json!({"string": "new string"}),
            "default",
            false,
        )
        .unwrap();
        assert_eq!(strip_meta(&v), json!({"string": "new string"}));
        assert_eq!(fields(&v, "default", "Apply"), json!({"f:string": {}}));
    }

    #[test]
    fn smd_set_apply_update_apply_no_overlap() {
        let f = fixture();
        let v = apw(
            &f,
            None,
            &widget(json!({"tags": ["a", "c"]})),
            &wm("default", T1),
        );
        let mut new = v.clone();
        new["spec"]["tags"] = json!(["a", "b", "c", "d"]);
        let v = record_update(
            &f.schema,
            Some(f.widget),
            Some(&v),
            &new,
            &wm("controller", T2),
        );
        let v = apw(
            &f,
            Some(&v),
            &widget(json!({"tags": ["a", "aprime", "c", "cprime"]})),
            &wm("default", T3),
        );
        // SMD's list merge: shared items follow the config's order, others keep their place.
        assert_eq!(
            v["spec"]["tags"],
            json!(["a", "b", "aprime", "c", "d", "cprime"])
        );
        assert_eq!(
            fields(&v, "default", "Apply"),
            json!({"f:spec": {"f:tags": {"v:\"a\"": {}, "v:\"aprime\"": {}, "v:\"c\"": {}, "v:\"cprime\"": {}}}})
        );
        assert_eq!(
            fields(&v, "controller", "Update"),
            json!({"f:spec": {"f:tags": {"v:\"b\"": {}, "v:\"d\"": {}}}})
        );
    }

    #[test]
    fn smd_set_apply_twice_reorder() {
        let f = fixture();
        let v = apw(
            &f,
            None,
            &widget(json!({"tags": ["a", "b", "c", "d"]})),
            &wm("default", T1),
        );
        let v = apw(
            &f,
            Some(&v),
            &widget(json!({"tags": ["a", "d", "c", "b"]})),
            &wm("default", T2),
        );
        assert_eq!(v["spec"]["tags"], json!(["a", "d", "c", "b"]));
    }

    #[test]
    fn merge_list_orders_like_smd() {
        let f = fixture();
        let lt = ListT {
            elem: None,
            kind: ListKind::Set,
        };
        let l: Vec<Value> = ["a", "b"].iter().map(|s| json!(s)).collect();
        let r: Vec<Value> = ["b", "c", "a"].iter().map(|s| json!(s)).collect();
        assert_eq!(
            merge_list(&f.schema, lt, &l, &r),
            vec![json!("b"), json!("c"), json!("a")]
        );
        let l: Vec<Value> = ["x", "a"].iter().map(|s| json!(s)).collect();
        let r: Vec<Value> = ["a", "y"].iter().map(|s| json!(s)).collect();
        assert_eq!(
            merge_list(&f.schema, lt, &l, &r),
            vec![json!("x"), json!("a"), json!("y")]
        );
    }

    #[test]
    fn go_formatting_helpers() {
        let mut s = String::new();
        go_json(
            &json!({"b": [1, 2.5, "x<y&z"], "a": null, "c": 1e21, "d": 1e-7}),
            &mut s,
        );
        assert_eq!(
            s,
            r#"{"a":null,"b":[1,2.5,"x\u003cy\u0026z"],"c":1e+21,"d":1e-7}"#
        );
        assert_eq!(go_quote("a\"b\n"), r#""a\"b\n""#);
        assert_eq!(value_to_string(&json!(1_000_000.0)), "1e+06");
        assert_eq!(value_to_string(&json!(123_456.0)), "123456");
        assert_eq!(value_to_string(&json!(0.5)), "0.5");
        assert_eq!(value_to_string(&json!(0.00001)), "1e-05");
        assert_eq!(
            id_json(&Id {
                manager: "m".into(),
                apply: false,
                api_version: "v1".into(),
                subresource: "status".into()
            }),
            r#"{"manager":"m","operation":"Update","apiVersion":"v1","subresource":"status"}"#
        );
    }
}
