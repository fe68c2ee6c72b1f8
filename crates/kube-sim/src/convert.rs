//! Conversion between `events.k8s.io/v1` Events and the stored `core/v1` form, so both APIs
//! show the same events (kube-apiserver stores one and converts: `regarding` ↔
//! `involvedObject`, `note` ↔ `message`, `deprecated*` ↔ the old core fields).

use serde_json::{Map, Value};

/// (events.k8s.io/v1 field, core/v1 field) pairs that only differ in name.
const RENAMES: &[(&str, &str)] = &[
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
    ("reportingController", "reportingComponent"),
];

fn rename(v: &Value, api_version: &str, to_core: bool) -> Value {
    let Some(obj) = v.as_object() else {
        return v.clone();
    };
    let mut out = Map::new();
    for (k, val) in obj {
        let renamed = RENAMES
            .iter()
            .find(|(ev, core)| if to_core { k == ev } else { k == core })
            .map(|(ev, core)| if to_core { *core } else { *ev });
        out.insert(renamed.unwrap_or(k).to_owned(), val.clone());
    }
    out.insert("apiVersion".into(), Value::String(api_version.into()));
    Value::Object(out)
}

/// events.k8s.io/v1 → core/v1.
pub fn event_to_core(v: &Value) -> Value {
    rename(v, "v1", true)
}

/// core/v1 → events.k8s.io/v1.
pub fn event_from_core(v: &Value) -> Value {
    rename(v, "events.k8s.io/v1", false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn round_trip_renames_fields() {
        let ev = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "regarding": {"name": "p"}, "note": "hi", "series": {"count": 2}});
        let core = event_to_core(&ev);
        assert_eq!(core["involvedObject"]["name"], "p");
        assert_eq!(core["message"], "hi");
        assert_eq!(core["apiVersion"], "v1");
        assert_eq!(event_from_core(&core), ev);
    }
}
