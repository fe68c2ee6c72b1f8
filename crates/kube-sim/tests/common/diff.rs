//! The differential recorder: one request script sent to the simulator and to a real
//! kube-apiserver, each answer normalised (resourceVersions, uids, timestamps, the namespace
//! name, allocated IPs and continue tokens become placeholders numbered by first appearance),
//! then compared, with a readable line diff of every step that differs.
//!
//! Placeholders keep what matters: two answers carrying the same resourceVersion get the same
//! `<rv:N>`, a MicroTime stays distinguishable from a whole-second time (`<time.6>` vs
//! `<time>`), and a list's own resourceVersion is `<list-rv>` (on a real apiserver other
//! writers, such as its own identity Lease, move it).

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::TestSim;

/// What a step sends.
#[derive(Clone, Debug)]
pub enum Action {
    /// An HTTP request.
    Req {
        method: &'static str,
        path: String,
        headers: Vec<(&'static str, String)>,
        body: Option<Vec<u8>>,
    },
    /// A watch: the events that arrive within `wait` (or the first `max`).
    Watch {
        path: String,
        max: usize,
        wait: Duration,
    },
    /// kubectl with these arguments (and this stdin); records exit status, stdout, stderr.
    Kubectl {
        args: Vec<String>,
        stdin: Option<String>,
    },
}

/// One step of a script.
#[derive(Clone, Debug)]
pub struct Step {
    pub label: String,
    pub action: Action,
    /// (name, JSON pointer): values of the answer saved for later paths and bodies (`{name}`).
    pub save: Vec<(String, String)>,
    /// JSON pointers removed from the answer before comparing, each with the reason.
    pub ignore: Vec<(String, String)>,
    /// A filter keeping only the parts both backends are expected to share (e.g. the
    /// simulator's kinds out of a real discovery document).
    pub keep: Option<fn(&mut Value)>,
    /// For watches: only the events this keeps are compared.
    pub keep_events: Option<fn(&Value) -> bool>,
}

fn step(label: &str, action: Action) -> Step {
    Step {
        label: label.into(),
        action,
        save: vec![],
        ignore: vec![],
        keep: None,
        keep_events: None,
    }
}

/// A request without body.
pub fn req(label: &str, method: &'static str, path: &str) -> Step {
    step(
        label,
        Action::Req {
            method,
            path: path.into(),
            headers: vec![],
            body: None,
        },
    )
}

/// GET `path`.
pub fn get(label: &str, path: &str) -> Step {
    req(label, "GET", path)
}

/// DELETE `path`.
pub fn delete(label: &str, path: &str) -> Step {
    req(label, "DELETE", path)
}

/// A request with a JSON body (`application/json`).
pub fn send(label: &str, method: &'static str, path: &str, body: Value) -> Step {
    send_as(label, method, path, "application/json", body.to_string())
}

/// POST a JSON body.
pub fn post(label: &str, path: &str, body: Value) -> Step {
    send(label, "POST", path, body)
}

/// PUT a JSON body.
pub fn put(label: &str, path: &str, body: Value) -> Step {
    send(label, "PUT", path, body)
}

/// PATCH with a content type (`merge`, `strategic`, `json`, `apply` or a full type).
pub fn patch(label: &str, path: &str, kind: &str, body: Value) -> Step {
    let ct = match kind {
        "merge" => "application/merge-patch+json",
        "strategic" => "application/strategic-merge-patch+json",
        "json" => "application/json-patch+json",
        "apply" => "application/apply-patch+yaml",
        other => other,
    };
    send_as(label, "PATCH", path, ct, body.to_string())
}

/// A request with a raw body and content type.
pub fn send_as(label: &str, method: &'static str, path: &str, ct: &str, body: String) -> Step {
    step(
        label,
        Action::Req {
            method,
            path: path.into(),
            headers: vec![("content-type", ct.to_owned())],
            body: Some(body.into_bytes()),
        },
    )
}

/// A watch collecting at most `max` events within `wait_ms`.
pub fn watch(label: &str, path: &str, max: usize, wait_ms: u64) -> Step {
    step(
        label,
        Action::Watch {
            path: path.into(),
            max,
            wait: Duration::from_millis(wait_ms),
        },
    )
}

/// kubectl with these arguments.
pub fn kubectl(label: &str, args: &[&str]) -> Step {
    step(
        label,
        Action::Kubectl {
            args: args.iter().map(|s| s.to_string()).collect(),
            stdin: None,
        },
    )
}

/// kubectl with stdin (`-f -`).
pub fn kubectl_stdin(label: &str, args: &[&str], stdin: &str) -> Step {
    step(
        label,
        Action::Kubectl {
            args: args.iter().map(|s| s.to_string()).collect(),
            stdin: Some(stdin.into()),
        },
    )
}

impl Step {
    /// Saves the value at `pointer` of the answer as `{name}`.
    pub fn save(mut self, name: &str, pointer: &str) -> Step {
        self.save.push((name.into(), pointer.into()));
        self
    }

    /// Leaves the value at `pointer` out of the comparison, for `why`.
    pub fn ignore(mut self, pointer: &str, why: &str) -> Step {
        self.ignore.push((pointer.into(), why.into()));
        self
    }

    /// Adds a header.
    pub fn header(mut self, name: &'static str, value: &str) -> Step {
        if let Action::Req { headers, .. } = &mut self.action {
            headers.push((name, value.into()));
        }
        self
    }

    /// Compares only the watch events `f` keeps.
    pub fn keep_events(mut self, f: fn(&Value) -> bool) -> Step {
        self.keep_events = Some(f);
        self
    }

    /// Keeps only what `f` leaves of the answer.
    pub fn keep(mut self, f: fn(&mut Value)) -> Step {
        self.keep = Some(f);
        self
    }
}

/// Replaces `{name}` by saved values (and `{ns}` by the namespace).
fn fill(s: &str, vars: &BTreeMap<String, String>) -> String {
    let mut out = s.to_owned();
    for (k, v) in vars {
        out = out.replace(&format!("{{{k}}}"), v);
    }
    out
}

/// Runs `script` against `t` in namespace `ns`; returns one raw record per step (`label`, then
/// `code` + `body`, `events`, or `exit` + `stdout` + `stderr`).
pub async fn run(t: &TestSim, ns: &str, script: &[Step]) -> Vec<Value> {
    let mut vars = BTreeMap::new();
    vars.insert("ns".to_owned(), ns.to_owned());
    let mut out = Vec::new();
    for s in script {
        let mut rec = match &s.action {
            Action::Req {
                method,
                path,
                headers,
                body,
            } => {
                let path = fill(path, &vars);
                let hs: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
                let body = body
                    .as_ref()
                    .map(|b| fill(&String::from_utf8_lossy(b), &vars).into_bytes())
                    .unwrap_or_default();
                let (code, _, v) = t.raw_with_headers(method, &path, &hs, body).await;
                json!({ "code": code, "body": v })
            }
            Action::Watch { path, max, wait } => {
                let evs = t.watch_events(&fill(path, &vars), &[], *max, *wait).await;
                json!({ "events": evs })
            }
            Action::Kubectl { args, stdin } => {
                let args: Vec<String> = args.iter().map(|a| fill(a, &vars)).collect();
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                let o = match stdin {
                    Some(input) => t.kubectl_stdin(&args, &fill(input, &vars)).await,
                    None => t.kubectl(&args).await,
                };
                let stdout = String::from_utf8_lossy(&o.stdout);
                json!({
                    "exit": o.status.code(),
                    // `-o json` output is compared as JSON.
                    "stdout": serde_json::from_str::<Value>(&stdout)
                        .unwrap_or_else(|_| Value::String(stdout.into_owned())),
                    "stderr": String::from_utf8_lossy(&o.stderr),
                })
            }
        };
        for (name, ptr) in &s.save {
            let v = rec
                .pointer(&format!("/body{ptr}"))
                .or_else(|| rec.pointer(ptr))
                .unwrap_or_else(|| panic!("step {:?}: nothing at {ptr} in {rec}", s.label));
            let v = v
                .as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| v.to_string());
            vars.insert(name.clone(), v);
        }
        for (ptr, _) in &s.ignore {
            remove(&mut rec, &format!("/body{ptr}"));
            remove(&mut rec, ptr);
        }
        if let Some(f) = s.keep
            && let Some(b) = rec.get_mut("body")
        {
            f(b);
        }
        if let Some(f) = s.keep_events
            && let Some(evs) = rec.get_mut("events").and_then(Value::as_array_mut)
        {
            evs.retain(f);
        }
        rec.as_object_mut()
            .unwrap()
            .insert("step".into(), Value::String(s.label.clone()));
        out.push(rec);
    }
    out
}

/// Removes the value at `pointer` (with `*` matching every array element or object member).
pub fn remove(v: &mut Value, pointer: &str) {
    let parts: Vec<&str> = pointer.split('/').skip(1).collect();
    remove_at(v, &parts);
}

fn remove_at(v: &mut Value, parts: &[&str]) {
    match parts {
        [] => {}
        [last] => match v {
            Value::Object(m) if *last == "*" => m.clear(),
            Value::Object(m) => {
                m.shift_remove(*last);
            }
            Value::Array(a) => {
                if let Ok(i) = last.parse::<usize>()
                    && i < a.len()
                {
                    a.remove(i);
                }
            }
            _ => {}
        },
        [first, rest @ ..] => match v {
            Value::Object(m) if *first == "*" => m.values_mut().for_each(|c| remove_at(c, rest)),
            Value::Array(a) if *first == "*" => a.iter_mut().for_each(|c| remove_at(c, rest)),
            Value::Object(m) => {
                if let Some(c) = m.get_mut(*first) {
                    remove_at(c, rest)
                }
            }
            Value::Array(a) => {
                if let Some(c) = first.parse::<usize>().ok().and_then(|i| a.get_mut(i)) {
                    remove_at(c, rest)
                }
            }
            _ => {}
        },
    }
}

/// Where a value sits: a list's (or bookmark's) metadata carries a resourceVersion that other
/// writers move.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ctx {
    Plain,
    /// An object whose `metadata` is list metadata (a BOOKMARK's object).
    ListLike,
    ListMeta,
}

/// Numbers placeholders by first appearance within one backend's run.
#[derive(Default)]
pub struct Normaliser {
    ns: String,
    rvs: BTreeMap<String, usize>,
    uids: BTreeMap<String, usize>,
    ips: BTreeMap<String, usize>,
}

fn is_uuid(s: &str) -> bool {
    s.len() == 36
        && s.char_indices().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_hexdigit(),
        })
}

/// `<time>` / `<time.N>` for an RFC 3339 UTC timestamp (N fractional digits), else None.
fn time_kind(s: &str) -> Option<String> {
    let b = s.as_bytes();
    if b.len() < 20 || !s.ends_with('Z') {
        return None;
    }
    let shape = |i: usize, c: u8| b.get(i) == Some(&c);
    let digits = |r: std::ops::Range<usize>| r.clone().all(|i| b[i].is_ascii_digit());
    if !(digits(0..4)
        && shape(4, b'-')
        && digits(5..7)
        && shape(7, b'-')
        && digits(8..10)
        && shape(10, b'T')
        && digits(11..13)
        && shape(13, b':')
        && digits(14..16)
        && shape(16, b':')
        && digits(17..19))
    {
        return None;
    }
    match &s[19..s.len() - 1] {
        "" => Some("<time>".into()),
        f if f.starts_with('.') && f[1..].bytes().all(|c| c.is_ascii_digit()) => {
            Some(format!("<time.{}>", f.len() - 1))
        }
        _ => None,
    }
}

/// Kubernetes ages as kubectl and Tables print them (`5s`, `2m3s`, `<unknown>`).
fn is_age(s: &str) -> bool {
    !s.is_empty()
        && s.bytes().any(|c| c.is_ascii_digit())
        && s.bytes()
            .all(|c| c.is_ascii_digit() || b"smhdy".contains(&c))
        && s.bytes().last().is_some_and(|c| b"smhdy".contains(&c))
}

impl Normaliser {
    pub fn new(ns: &str) -> Normaliser {
        Normaliser {
            ns: ns.to_owned(),
            ..Default::default()
        }
    }

    fn token(map: &mut BTreeMap<String, usize>, kind: &str, v: &str) -> String {
        let n = map.len() + 1;
        let i = *map.entry(v.to_owned()).or_insert(n);
        format!("<{kind}:{i}>")
    }

    /// Normalises one record in place.
    pub fn record(&mut self, v: &mut Value) {
        self.value(v, None, Ctx::Plain);
    }

    fn value(&mut self, v: &mut Value, key: Option<&str>, ctx: Ctx) {
        match v {
            Value::Object(m) => {
                let is_list = ctx == Ctx::ListLike
                    || m.get("kind")
                        .and_then(Value::as_str)
                        .is_some_and(|k| k.ends_with("List") || k == "Table");
                let is_bookmark = m.get("type").and_then(Value::as_str) == Some("BOOKMARK");
                for (k, c) in m.iter_mut() {
                    let child = if ctx == Ctx::ListMeta || (k == "metadata" && is_list) {
                        Ctx::ListMeta
                    } else if k == "object" && is_bookmark {
                        Ctx::ListLike
                    } else {
                        Ctx::Plain
                    };
                    self.value(c, Some(k), child);
                }
            }
            Value::Array(a) => {
                if key == Some("managedFields") {
                    // Entries sort by time (whole seconds) before manager: once times are
                    // placeholders, that order is timing, not behaviour.
                    a.sort_by_key(|e| {
                        (
                            e["operation"].as_str().unwrap_or_default().to_owned(),
                            e["manager"].as_str().unwrap_or_default().to_owned(),
                            e["subresource"].as_str().unwrap_or_default().to_owned(),
                        )
                    });
                }
                a.iter_mut().for_each(|c| self.value(c, key, Ctx::Plain))
            }
            Value::String(s) => *s = self.string(s, key, ctx == Ctx::ListMeta),
            _ => {}
        }
    }

    fn string(&mut self, s: &str, key: Option<&str>, in_list_meta: bool) -> String {
        match key {
            Some("resourceVersion") if in_list_meta => return "<list-rv>".into(),
            Some("resourceVersion") if s.bytes().all(|c| c.is_ascii_digit()) && !s.is_empty() => {
                return Normaliser::token(&mut self.rvs, "rv", s);
            }
            Some("continue") if !s.is_empty() => return "<continue>".into(),
            Some("clusterIP" | "clusterIPs" | "ip" | "podIP" | "hostIP")
                if s.contains('.') && s.bytes().all(|c| c.is_ascii_digit() || c == b'.') =>
            {
                return Normaliser::token(&mut self.ips, "ip", s);
            }
            Some(
                "gitVersion"
                | "gitCommit"
                | "buildDate"
                | "goVersion"
                | "compiler"
                | "platform"
                | "gitTreeState"
                | "emulationMajor"
                | "emulationMinor"
                | "minCompatibilityMajor"
                | "minCompatibilityMinor",
            ) => return "<build>".into(),
            Some("serverAddress") => return "<address>".into(),
            _ => {}
        }
        if let Some(t) = time_kind(s) {
            return t;
        }
        if is_uuid(s) {
            return Normaliser::token(&mut self.uids, "uid", s);
        }
        if is_age(s) {
            return "<age>".into();
        }
        self.text(s)
    }

    /// Free text (messages, kubectl output): the namespace, uuids, times and ages in it.
    pub fn text(&mut self, s: &str) -> String {
        let mut out = String::with_capacity(s.len());
        for (i, line) in s.split('\n').enumerate() {
            if i > 0 {
                out.push('\n');
            }
            let mut words = Vec::new();
            for w in line.split(' ') {
                let core = w.trim_matches(|c: char| "\"'(),.:;[]{}".contains(c));
                let repl = if core.is_empty() {
                    None
                } else if core == self.ns {
                    Some("{ns}".to_owned())
                } else if is_uuid(core) {
                    Some(Normaliser::token(&mut self.uids, "uid", core))
                } else if let Some(t) = time_kind(core) {
                    Some(t)
                } else if is_age(core) {
                    Some("<age>".into())
                } else {
                    // A resourceVersion seen in an object, quoted in a message.
                    self.rvs
                        .get(core)
                        .filter(|_| s.contains(' '))
                        .map(|i| format!("<rv:{i}>"))
                };
                words.push(match repl {
                    Some(r) => w.replacen(core, &r, 1),
                    None => w.to_owned(),
                });
            }
            out.push_str(&words.join(" "));
        }
        // Namespace inside paths and other words (`namespaces/lh-…/leases`).
        if !self.ns.is_empty() {
            out = out.replace(&self.ns, "{ns}");
        }
        // "too old resource version: N (M)": the numbers are each backend's own.
        if let Some(i) = out.find("too old resource version: ") {
            let head = &out[..i + "too old resource version: ".len()];
            out = format!("{head}<rv> (<rv>)");
        }
        // Column alignment in kubectl's tables depends on the widths of the values.
        if out.contains("  ") {
            out = out
                .lines()
                .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
                .collect::<Vec<_>>()
                .join("\n");
        }
        out
    }
}

/// `v` with every object's keys sorted.
fn sorted(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            Value::Object(
                keys.into_iter()
                    .map(|k| (k.clone(), sorted(&m[k])))
                    .collect(),
            )
        }
        Value::Array(a) => Value::Array(a.iter().map(sorted).collect()),
        other => other.clone(),
    }
}

/// A line diff (longest common subsequence) of two texts: ` `, `-` (simulator), `+` (real).
pub fn line_diff(a: &str, b: &str) -> String {
    let a: Vec<&str> = a.lines().collect();
    let b: Vec<&str> = b.lines().collect();
    let (n, m) = (a.len(), b.len());
    let mut l = vec![vec![0u32; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            l[i][j] = if a[i] == b[j] {
                l[i + 1][j + 1] + 1
            } else {
                l[i + 1][j].max(l[i][j + 1])
            };
        }
    }
    let (mut i, mut j, mut out) = (0, 0, String::new());
    while i < n || j < m {
        if i < n && j < m && a[i] == b[j] {
            out += &format!("   {}\n", a[i]);
            i += 1;
            j += 1;
        } else if j < m && (i == n || l[i][j + 1] >= l[i + 1][j]) {
            out += &format!(" + {}\n", b[j]);
            j += 1;
        } else {
            out += &format!(" - {}\n", a[i]);
            i += 1;
        }
    }
    out
}

/// Runs `script` on both backends (each in its namespace), normalises and compares; panics with
/// a diff of every differing step.
pub async fn compare(sim: (&TestSim, &str), real: (&TestSim, &str), script: &[Step]) {
    let a = run(sim.0, sim.1, script).await;
    let b = run(real.0, real.1, script).await;
    let (mut na, mut nb) = (Normaliser::new(sim.1), Normaliser::new(real.1));
    let mut report = String::new();
    for (mut x, mut y) in a.into_iter().zip(b) {
        // The step's label is the script's own text: not normalised.
        let label = x.as_object_mut().and_then(|o| o.shift_remove("step"));
        y.as_object_mut().and_then(|o| o.shift_remove("step"));
        na.record(&mut x);
        nb.record(&mut y);
        x["step"] = label.clone().unwrap_or_default();
        y["step"] = label.unwrap_or_default();
        if x != y {
            // Key order is not compared (Go writes struct fields in declaration order).
            let px = serde_json::to_string_pretty(&sorted(&x)).unwrap();
            let py = serde_json::to_string_pretty(&sorted(&y)).unwrap();
            report += &format!(
                "\n--- step {:?}: simulator (-) vs kube-apiserver (+)\n{}",
                x["step"].as_str().unwrap_or_default(),
                line_diff(&px, &py)
            );
        }
    }
    assert!(
        report.is_empty(),
        "the simulator and kube-apiserver differ:{report}"
    );
}

mod tests {
    use super::*;

    #[test]
    fn placeholders_number_by_first_appearance() {
        let mut n = Normaliser::new("lh-1");
        let mut v = json!({"metadata": {"resourceVersion": "7", "uid": "0b7f5a5e-9f54-4c7e-9a55-ffb4d0a3e9f1",
            "creationTimestamp": "2026-01-01T00:00:00Z", "namespace": "lh-1"},
            "spec": {"renewTime": "2026-01-01T00:00:00.123456Z"}, "x": ["7", "9"]});
        n.record(&mut v);
        assert_eq!(
            v,
            json!({"metadata": {"resourceVersion": "<rv:1>", "uid": "<uid:1>",
            "creationTimestamp": "<time>", "namespace": "{ns}"},
            "spec": {"renewTime": "<time.6>"}, "x": ["7", "9"]})
        );
        assert_eq!(
            n.text("leases \"a\" in namespace lh-1 10s"),
            "leases \"a\" in namespace {ns} <age>"
        );
    }

    #[test]
    fn the_line_diff_marks_both_sides() {
        assert_eq!(line_diff("a\nb\nc", "a\nx\nc"), "   a\n + x\n - b\n   c\n");
    }
}
