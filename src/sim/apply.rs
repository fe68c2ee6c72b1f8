//! TEMPORARY stand-in until the server-side apply module lands (replaced in the same session).
use serde_json::Value;
use super::schema::{NodeId, Schema};
pub struct Manager<'a> { pub name: &'a str, pub api_version: &'a str, pub time: &'a str, pub subresource: Option<&'a str> }
#[derive(Debug)]
pub enum ApplyError { Conflict(Vec<(String, String)>), Invalid(String) }
impl ApplyError {
    pub fn message(&self) -> String { format!("{self:?}") }
    pub fn causes(&self) -> Vec<(String, String, String)> { vec![] }
}
pub fn apply(_s: &Schema, _n: Option<NodeId>, live: Option<&Value>, applied: &Value, _m: &Manager<'_>, _f: bool) -> Result<Value, ApplyError> {
    let mut v = live.cloned().unwrap_or(Value::Object(Default::default()));
    json_patch::merge(&mut v, applied);
    Ok(v)
}
pub fn record_update(_s: &Schema, _n: Option<NodeId>, _o: Option<&Value>, new: &Value, _m: &Manager<'_>) -> Value { new.clone() }
