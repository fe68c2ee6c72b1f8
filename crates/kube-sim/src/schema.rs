//! The shape of Kubernetes types, as the simulator's patch, apply and validation code needs it.
//!
//! A [`Schema`] is an arena of [`Node`]s built from the real Kubernetes OpenAPI v3 documents
//! (see `openapi.rs`), so list merge keys, list types and known fields come from the same
//! source kube-apiserver uses. Nodes refer to each other by [`NodeId`], which keeps recursive
//! types (JSONSchemaProps) finite. This module is pure data: no I/O, no globals.

use std::collections::BTreeMap;

/// Index of a node in a [`Schema`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NodeId(pub u32);

/// How a list merges, in server-side apply terms (`x-kubernetes-list-type`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ListType {
    /// Replaced whole; owned as one field.
    #[default]
    Atomic,
    /// A set of scalars; each value is owned separately (`v:<value>` in fieldsV1).
    Set,
    /// Objects identified by these keys (`k:{...}` in fieldsV1).
    Map(Vec<String>),
}

/// How a field merges under a strategic merge patch (`x-kubernetes-patch-strategy`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PatchStrategy {
    /// `merge`: lists merge by `merge_key` (objects) or as sets (scalars).
    pub merge: bool,
    /// `retainKeys`: keys not named in `$retainKeys` are cleared.
    pub retain_keys: bool,
    /// `x-kubernetes-patch-merge-key`.
    pub merge_key: Option<String>,
}

/// The structural kind of a node.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Shape {
    /// A struct with named fields; `additional` is the value type of a map (`additionalProperties`).
    Object {
        fields: BTreeMap<String, NodeId>,
        additional: Option<NodeId>,
    },
    /// A list of `items`.
    Array { items: NodeId },
    /// string, integer, number, boolean (and int-or-string, quantities, times).
    Scalar,
    /// Anything goes (`x-kubernetes-preserve-unknown-fields`, RawExtension, untyped maps).
    #[default]
    Untyped,
}

/// One node of the schema.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Node {
    pub shape: Shape,
    /// Meaningful on arrays.
    pub list_type: ListType,
    /// Meaningful on arrays (and on structs for `retainKeys`).
    pub patch: PatchStrategy,
    /// `x-kubernetes-map-type: atomic` on an object: replaced and owned whole.
    pub atomic_map: bool,
}

/// An arena of nodes plus the root node of each kind.
#[derive(Debug, Clone, Default)]
pub struct Schema {
    nodes: Vec<Node>,
    /// Root node by (group, version, kind); core group is "".
    kinds: BTreeMap<(String, String, String), NodeId>,
}

impl Schema {
    /// Adds a node and returns its id.
    pub fn push(&mut self, node: Node) -> NodeId {
        let id = NodeId(u32::try_from(self.nodes.len()).expect("schema has fewer than 2^32 nodes"));
        self.nodes.push(node);
        id
    }

    /// Replaces a node (used to tie recursive definitions).
    pub fn set(&mut self, id: NodeId, node: Node) {
        self.nodes[id.0 as usize] = node;
    }

    /// The node behind an id.
    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id.0 as usize]
    }

    /// Registers the root node of a kind.
    pub fn set_kind(&mut self, group: &str, version: &str, kind: &str, id: NodeId) {
        self.kinds
            .insert((group.to_owned(), version.to_owned(), kind.to_owned()), id);
    }

    /// The root node of a kind, if the schema knows it.
    pub fn kind(&self, group: &str, version: &str, kind: &str) -> Option<NodeId> {
        self.kinds
            .get(&(group.to_owned(), version.to_owned(), kind.to_owned()))
            .copied()
    }

    /// The node of field `name` inside object node `id` (a named field, else the map value
    /// type). `None` when `id` is not an object or has no such field; untyped nodes answer
    /// `None` too, and callers treat the value as opaque.
    pub fn field(&self, id: NodeId, name: &str) -> Option<NodeId> {
        match &self.node(id).shape {
            Shape::Object { fields, additional } => fields.get(name).copied().or(*additional),
            _ => None,
        }
    }

    /// The item node of array node `id`.
    pub fn items(&self, id: NodeId) -> Option<NodeId> {
        match &self.node(id).shape {
            Shape::Array { items } => Some(*items),
            _ => None,
        }
    }
}
