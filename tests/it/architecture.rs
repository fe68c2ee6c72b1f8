//! The module graph points one way. Reads `src/` and collects, for every top-level module of
//! the product, the other top-level modules it names (`crate::x` paths, in `use` lines and
//! anywhere else, `use crate::{x, y}` groups included). Fails on an edge the layering below
//! does not allow, and on any cycle, naming the files that make it. The same layering is
//! described in `src/lib.rs` and docs/development.md.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Each top-level module and the modules it may use. Everything not named here may use
/// nothing (and a new top-level module must be added here to be allowed anything).
const LAYERS: &[(&str, &[&str])] = &[
    ("model", &[]),
    ("net", &[]),
    ("telemetry", &[]),
    ("protocol", &["model"]),
    ("targets", &["protocol"]),
    ("ctl", &["net"]),
    ("config", &["protocol", "model", "targets"]),
    ("metrics", &["model"]),
    ("store", &["model"]),
    (
        "k8s",
        &["config", "metrics", "model", "protocol", "targets"],
    ),
    ("agent", &["k8s", "protocol", "model", "net", "targets"]),
    (
        "engine",
        &[
            "config", "k8s", "metrics", "model", "net", "protocol", "store",
        ],
    ),
    (
        "http",
        &[
            "config", "engine", "k8s", "metrics", "model", "net", "protocol", "store",
        ],
    ),
    (
        "demo",
        &[
            "agent", "config", "engine", "http", "model", "net", "store", "targets",
        ],
    ),
    (
        "cli",
        &[
            "agent",
            "config",
            "ctl",
            "demo",
            "engine",
            "http",
            "k8s",
            "metrics",
            "model",
            "net",
            "protocol",
            "store",
            "targets",
            "telemetry",
        ],
    ),
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file under `src/` belongs to (`None` for lib.rs and main.rs).
fn module_of(file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src()).unwrap();
    let mut parts = rel.components();
    let first = parts.next()?.as_os_str().to_str()?.to_owned();
    if parts.next().is_some() {
        Some(first)
    } else {
        let stem = first.strip_suffix(".rs")?;
        (stem != "lib" && stem != "main").then(|| stem.to_owned())
    }
}

/// Top-level modules named in `text`: `crate::x` and the members of `crate::{x, y::z}`.
fn named_modules(text: &str) -> BTreeSet<String> {
    let ident = |s: &str| -> String {
        s.trim_start()
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut out = BTreeSet::new();
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(i) = rest.find("crate::") {
            let after = &rest[i + "crate::".len()..];
            // `kube_sim::` or `leasehold::` are other crates; only a bare `crate::` counts.
            let before = rest[..i].chars().last();
            if !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
                if let Some(group) = after.strip_prefix('{') {
                    let group = group.split('}').next().unwrap_or("");
                    for item in group.split(',') {
                        let name = ident(item);
                        if !name.is_empty() && name != "self" {
                            out.insert(name);
                        }
                    }
                } else {
                    let name = ident(after);
                    if !name.is_empty() {
                        out.insert(name);
                    }
                }
            }
            rest = after;
        }
    }
    out
}

/// module -> (used module -> the files that use it)
fn graph() -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let mut g: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for file in files {
        let Some(m) = module_of(&file) else { continue };
        let text = std::fs::read_to_string(&file).unwrap();
        let rel = file.strip_prefix(src()).unwrap().display().to_string();
        let entry = g.entry(m.clone()).or_default();
        for used in named_modules(&text) {
            if used != m {
                entry.entry(used).or_default().insert(rel.clone());
            }
        }
    }
    g
}

#[test]
fn the_parser_finds_every_form_of_crate_path() {
    let found = named_modules(
        "use crate::config::Config;\nuse crate::{model, k8s::index::Index};\n\
         let x = crate::net::f(); // crate::http in a comment\nuse kube_sim::crate_like;\n",
    );
    let want: BTreeSet<String> = ["config", "model", "k8s", "net"].map(String::from).into();
    assert_eq!(found, want);
}

#[test]
fn every_module_uses_only_what_its_layer_allows() {
    let allowed: BTreeMap<&str, BTreeSet<&str>> = LAYERS
        .iter()
        .map(|(m, deps)| (*m, deps.iter().copied().collect()))
        .collect();
    let g = graph();
    assert!(g.len() >= 10, "found only {:?} under src/", g.keys());
    let mut wrong = Vec::new();
    for (m, uses) in &g {
        for (used, files) in uses {
            let ok = allowed
                .get(m.as_str())
                .is_some_and(|a| a.contains(used.as_str()));
            if !ok {
                wrong.push(format!("{m} -> {used} (in {files:?})"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports against the layering (tests/it/architecture.rs LAYERS):\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_module_graph_has_no_cycle() {
    let g = graph();
    // Depth-first search; a back edge is a cycle.
    fn visit(
        m: &str,
        g: &BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == m) {
            let mut cycle = path[i..].to_vec();
            cycle.push(m.to_owned());
            return Some(cycle);
        }
        if done.contains(m) {
            return None;
        }
        path.push(m.to_owned());
        for used in g.get(m).into_iter().flat_map(|u| u.keys()) {
            if let Some(c) = visit(used, g, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(m.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    for m in g.keys() {
        if let Some(cycle) = visit(m, &g, &mut Vec::new(), &mut done) {
            let files: Vec<String> = cycle
                .windows(2)
                .map(|w| format!("{} -> {}: {:?}", w[0], w[1], g[&w[0]][&w[1]]))
                .collect();
            panic!("import cycle {}\n{}", cycle.join(" -> "), files.join("\n"));
        }
    }
}
