//! The configuration file (`leasehold serve --config FILE`): which clusters Leasehold manages
//! and how. It owns parsing (YAML) and validation; an invalid file stops start-up with the
//! file, the field and why. It never reads Kubernetes or the environment: credentials are named
//! (`{env: VAR}` or `{secret: {name, key}}`) and resolved where they are used, so secrets never
//! sit in the config.

pub mod http;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use self::http::HttpSettings;
use crate::protocol::{Protocol, names};
use crate::targets::yaml;
pub use crate::targets::{TargetEntry, TargetSpec, parse_target_list};

/// The whole file.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// History database URL: `sqlite:PATH` (created on first run) or `postgres://…`.
    #[serde(default = "default_database")]
    pub database: String,
    /// Keep history this long (`0s` keeps everything).
    #[serde(default = "default_retention", with = "duration")]
    pub history_retention: Duration,
    /// The control plane's own leader election.
    #[serde(default)]
    pub control_plane: ControlPlane,
    /// The managed clusters.
    pub clusters: Vec<Cluster>,
    /// The HTTP server: listen address and authentication.
    #[serde(default, skip_serializing)]
    pub http: HttpSettings,
}

/// Control-plane replicas elect one acting replica through a Lease.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ControlPlane {
    /// Namespace of the election Lease.
    #[serde(default = "default_cp_namespace")]
    pub namespace: String,
    /// Name of the election Lease.
    #[serde(default = "default_cp_lease")]
    pub lease_name: String,
    /// How long a replica's claim lasts without renewal.
    #[serde(default = "default_cp_duration", with = "duration")]
    pub lease_duration: Duration,
}

impl Default for ControlPlane {
    fn default() -> Self {
        Self {
            namespace: default_cp_namespace(),
            lease_name: default_cp_lease(),
            lease_duration: default_cp_duration(),
        }
    }
}

/// One managed cluster.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Cluster {
    /// Unique name; part of Lease names, so a DNS label.
    pub name: String,
    /// Namespace of its pods, Services and Leases.
    pub namespace: String,
    /// Member pods: these labels must all match.
    pub selector: BTreeMap<String, String>,
    /// Headless Service giving members stable DNS names.
    #[serde(default)]
    pub headless_service: Option<String>,
    /// LoadBalancer Service clients reach the cluster through.
    #[serde(default)]
    pub load_balancer_service: Option<String>,
    /// Who drives the Leases.
    #[serde(default = "default_protocol")]
    pub protocol: Protocol,
    /// Gone: Leasehold speaks one member protocol. Kept only so that a configuration that
    /// still sets it is refused with a message saying why (`validate`), not as an unknown field.
    #[serde(default, skip_serializing)]
    protocol_version: Option<serde::de::IgnoredAny>,
    /// The namespace of the member Leases, when not `namespace` (members run
    /// `leasehold agent --member-lease-namespace` with the same value). Only the control plane
    /// watches it; the API server hands every Lease event to every watcher of its namespace, so
    /// with hundreds of members, member renewals kept apart from the target Leases the members
    /// watch are what keeps that fan-out small (docs/protocol.md).
    #[serde(default)]
    pub member_lease_namespace: Option<String>,
    /// First part of Lease names (`<prefix>-<cluster>-…`); `gnmic` for gnmic clusters.
    #[serde(default)]
    pub lease_prefix: Option<String>,
    /// The targets to spread over members.
    #[serde(default)]
    pub targets: Targets,
    /// Static roles by pod labels, first match wins (e.g. `controlling`, `copy`).
    #[serde(default)]
    pub roles: Vec<Role>,
    /// How the control plane acts.
    #[serde(default)]
    pub policy: Policy,
}

impl Cluster {
    /// The Lease name prefix in effect.
    pub fn prefix(&self) -> &str {
        match (&self.lease_prefix, self.protocol) {
            (Some(p), _) => p,
            (None, Protocol::Native) => "leasehold",
            (None, Protocol::Gnmic) => "gnmic",
        }
    }

    /// The namespace of the member Leases (`member_lease_namespace`, else
    /// `namespace`).
    pub fn member_namespace(&self) -> &str {
        self.member_lease_namespace
            .as_deref()
            .unwrap_or(&self.namespace)
    }

    /// Member Leases live in a namespace of their own, watched apart.
    pub fn separate_member_namespace(&self) -> bool {
        self.member_namespace() != self.namespace
    }
}

/// Where a cluster's targets come from.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Targets {
    /// Listed in the file: targets, and `endpoints` entries (the targets of a Service's ready
    /// endpoints). Shared, not copied, by every clone of the configuration (a list can hold
    /// 50,000).
    #[serde(default)]
    pub inline: Arc<[TargetEntry]>,
    /// Listed in a ConfigMap key (same format as `inline`, as YAML), reloaded when it changes.
    #[serde(default)]
    pub config_map: Option<ConfigMapRef>,
}

/// A ConfigMap key in the cluster's namespace.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigMapRef {
    /// The ConfigMap.
    pub name: String,
    /// The key holding the target list.
    pub key: String,
}

/// A static role: pods matching `selector` play `name`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Role {
    /// The role's name.
    pub name: String,
    /// Labels that must all match.
    pub selector: BTreeMap<String, String>,
}

/// What to do when a member joins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OnJoin {
    /// Nothing: new members get only unplaced targets.
    Off,
    /// Store a proposed rebalance for someone to run.
    Propose,
    /// Run a rebalance.
    Auto,
}

/// How the control plane acts on a cluster.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// Duration members promise on target Leases.
    #[serde(default = "lease_duration", with = "duration")]
    pub lease_duration: Duration,
    /// What a joining member triggers.
    #[serde(default = "default_on_join")]
    pub on_join: OnJoin,
    /// Membership must be still this long before a join triggers anything, so members that
    /// start together cause one rebalance, not one each.
    #[serde(default = "default_join_settle", with = "duration")]
    pub join_settle: Duration,
    /// Moves of one operation in flight at once.
    #[serde(default = "default_max_moves")]
    pub max_concurrent_moves: usize,
    /// A move not completed (new owner holding) in this time is retried.
    #[serde(default = "default_move_timeout", with = "duration")]
    pub move_timeout: Duration,
    /// Retries of a timed-out move before it fails.
    #[serde(default = "default_move_retries")]
    pub move_retries: u32,
    /// When at least this share of the members (and at least two) lapse together,
    /// it is taken for a slow API server rather than dead members — a mass lapse: at most one
    /// lapsed member is failed over per lease duration, and the cluster shows why.
    #[serde(default = "default_mass_lapse_share")]
    pub mass_lapse_share: f64,
    /// How a target moves between two live members: `overlap` (the default) where the next
    /// owner's agent can prove its app's start (scrape agents with `--scrape-api`), else
    /// exclusive; `exclusive` always.
    #[serde(default = "default_handoff")]
    pub handoff: Handoff,
    /// In an overlap hand-off, how long the holder waits for the next owner's app to prove it
    /// works on the target before it stops its own first, as in an exclusive one.
    #[serde(default = "default_overlap_wait", with = "duration")]
    pub overlap_wait: Duration,
    /// Removal of an instance.
    #[serde(default)]
    pub removal: Removal,
}

/// How a target moves between two live members (docs/protocol.md, "Overlap hand-off").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Handoff {
    /// Never two: the old owner's app stops, then the new owner's starts.
    Exclusive,
    /// The new owner's app starts first and proves it works; only then does the old owner's
    /// stop (bounded by `overlap_wait`). For work where a short double is harmless and a gap
    /// is not (scrapers).
    Overlap,
}

impl Policy {
    /// The overlap bound (ms) written with a desired owner, or `None` for an exclusive
    /// hand-off; `prepares`: the desired owner's agent can prove its app's start.
    pub fn overlap_ms(&self, prepares: bool) -> Option<i64> {
        (self.handoff == Handoff::Overlap && prepares).then(|| {
            i64::try_from(self.overlap_wait.as_millis())
                .unwrap_or(i64::MAX)
                .max(1)
        })
    }
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            lease_duration: lease_duration(),
            on_join: default_on_join(),
            join_settle: default_join_settle(),
            max_concurrent_moves: default_max_moves(),
            move_timeout: default_move_timeout(),
            move_retries: default_move_retries(),
            mass_lapse_share: default_mass_lapse_share(),
            handoff: default_handoff(),
            overlap_wait: default_overlap_wait(),
            removal: Removal::default(),
        }
    }
}

/// Removal of an instance.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Removal {
    /// Called once after the drain (e.g. MMR `repl/remove`).
    #[serde(default)]
    pub webhook: Option<Webhook>,
    /// Delete the pod at the end.
    #[serde(default)]
    pub delete_pod: bool,
}

/// An HTTP call made when an instance is removed.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Webhook {
    /// URL template: `{cluster}`, `{namespace}`, `{instance}`, `{ip}`, `{dns}` and
    /// `{role:NAME}` (the stable DNS name, else IP, of the first ready instance with that role)
    /// are replaced; values are URL-encoded.
    pub url: String,
    /// HTTP method.
    #[serde(default = "default_method")]
    pub method: String,
    /// Give up after this long.
    #[serde(default = "default_webhook_timeout", with = "duration")]
    pub timeout: Duration,
    /// Credentials, sent as an `Authorization` header; never logged.
    #[serde(default)]
    pub auth: Option<WebhookAuth>,
}

/// Credentials of a webhook. Values come from the environment or a Secret, never the file.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum WebhookAuth {
    /// `Authorization: Bearer <token>`.
    Bearer {
        /// Where the token is.
        token: SecretSource,
    },
    /// `Authorization: Basic …`.
    Basic {
        /// Where the user name is.
        username: SecretSource,
        /// Where the password is.
        password: SecretSource,
    },
}

/// Where a secret value is read from.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum SecretSource {
    /// An environment variable of the Leasehold process.
    Env(String),
    /// A key of a Secret in the cluster's namespace.
    Secret {
        /// The Secret.
        name: String,
        /// The key.
        key: String,
    },
}

fn default_database() -> String {
    "sqlite:leasehold.db".into()
}
/// Thirty days of history by default: enough to answer "why did this move last week".
fn default_retention() -> Duration {
    Duration::from_secs(30 * 24 * 3600)
}
fn default_cp_namespace() -> String {
    "leasehold".into()
}
fn default_cp_lease() -> String {
    "leasehold-control-plane".into()
}
/// client-go's default lease duration.
fn default_cp_duration() -> Duration {
    Duration::from_secs(15)
}
fn default_protocol() -> Protocol {
    Protocol::Native
}
/// client-go's default lease duration.
fn lease_duration() -> Duration {
    Duration::from_secs(15)
}
fn default_on_join() -> OnJoin {
    OnJoin::Propose
}
fn default_join_settle() -> Duration {
    Duration::from_secs(5)
}
/// Cruise Control's per-broker default is 5–10 concurrent movements.
fn default_max_moves() -> usize {
    10
}
fn default_handoff() -> Handoff {
    Handoff::Overlap
}
fn default_overlap_wait() -> Duration {
    Duration::from_secs(30)
}
fn default_move_timeout() -> Duration {
    Duration::from_secs(30)
}
fn default_move_retries() -> u32 {
    2
}
/// The share of a cluster's members whose member Leases must lapse together for a mass lapse
/// (`policy.mass_lapse_share`), as the node lifecycle controller's `--unhealthy-zone-threshold`
/// (0.55): about half.
pub const DEFAULT_MASS_LAPSE_SHARE: f64 = 0.5;

fn default_mass_lapse_share() -> f64 {
    DEFAULT_MASS_LAPSE_SHARE
}
fn default_method() -> String {
    "POST".into()
}
fn default_webhook_timeout() -> Duration {
    Duration::from_secs(10)
}

/// Durations as `15s`, `500ms`, `2m`, `1h 30m` (jiff's friendly format).
mod duration {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let s = String::deserialize(d)?;
        parse(&s).map_err(serde::de::Error::custom)
    }

    pub fn serialize<S: Serializer>(v: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{}ms", v.as_millis()))
    }

    pub fn parse(s: &str) -> Result<Duration, String> {
        let d: jiff::SignedDuration = s
            .parse()
            .map_err(|_| format!("{s:?} is not a duration (like 15s, 500ms, 2m)"))?;
        Duration::try_from(d).map_err(|_| format!("{s:?} is negative"))
    }
}

/// Why a config file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{file}: {source}")]
    Read {
        /// The file.
        file: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The YAML does not match the schema.
    #[error("{file}: {message}")]
    Parse {
        /// The file.
        file: PathBuf,
        /// The parser's message (with line and column).
        message: String,
    },
    /// A field has a value that cannot work.
    #[error("{file}: {field}: {why}")]
    Invalid {
        /// The file.
        file: PathBuf,
        /// The field's path, e.g. `clusters[1].policy.max_concurrent_moves`.
        field: String,
        /// Why.
        why: String,
    },
}

impl Config {
    /// Reads and validates a config file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            file: path.to_owned(),
            source,
        })?;
        Self::parse(&text, path)
    }

    /// Parses and validates config text; `file` is only used in messages.
    pub fn parse(text: &str, file: &Path) -> Result<Config, ConfigError> {
        let config: Config = yaml(text).map_err(|e| ConfigError::Parse {
            file: file.to_owned(),
            message: e.to_string(),
        })?;
        config
            .validate()
            .map_err(|(field, why)| ConfigError::Invalid {
                file: file.to_owned(),
                field,
                why,
            })?;
        Ok(config)
    }

    /// The same configuration with another `database` (`leasehold serve --database`, env
    /// `LEASEHOLD_DATABASE`), checked like the file's. Errors never show the URL, which may
    /// hold a password.
    pub fn with_database(mut self, url: String) -> Result<Config, ConfigError> {
        self.database = url;
        self.validate()
            .map_err(|(field, why)| ConfigError::Invalid {
                file: PathBuf::from("--database"),
                field,
                why,
            })?;
        Ok(self)
    }

    /// Finds a cluster by name.
    pub fn cluster(&self, name: &str) -> Option<&Cluster> {
        self.clusters.iter().find(|c| c.name == name)
    }

    fn validate(&self) -> Result<(), (String, String)> {
        let cp = &self.control_plane;
        if !names::is_dns_label(&cp.namespace) {
            return Err(bad("control_plane.namespace", "must be a DNS label"));
        }
        if !names::is_dns_subdomain(&cp.lease_name) {
            return Err(bad(
                "control_plane.lease_name",
                "must be a valid Lease name",
            ));
        }
        if cp.lease_duration < Duration::from_secs(2) {
            return Err(bad("control_plane.lease_duration", "must be at least 2s"));
        }
        at_most(
            "control_plane.lease_duration",
            cp.lease_duration,
            MAX_DURATION,
        )?;
        at_most("history_retention", self.history_retention, MAX_RETENTION)?;
        if !(self.database.starts_with("sqlite:")
            || self.database.starts_with("postgres://")
            || self.database.starts_with("postgresql://"))
        {
            return Err(bad(
                "database",
                "must start with sqlite:, postgres:// or postgresql://",
            ));
        }
        if self.clusters.is_empty() {
            return Err(bad("clusters", "at least one cluster is needed"));
        }
        let mut seen = BTreeSet::new();
        for (i, c) in self.clusters.iter().enumerate() {
            let at = |f: &str| format!("clusters[{i}].{f}");
            if !seen.insert(&c.name) {
                return Err((at("name"), format!("{:?} is used twice", c.name)));
            }
            c.validate().map_err(|(f, why)| (at(&f), why))?;
        }
        Ok(())
    }
}

fn bad(field: &str, why: &str) -> (String, String) {
    (field.to_owned(), why.to_owned())
}

/// The longest lease duration, settling time, move or webhook timeout: an hour. Longer ones
/// make failover and handoffs wait so long that they could not be told from a hang (and a
/// Lease's `leaseDurationSeconds` is a 32-bit number of seconds).
pub const MAX_DURATION: Duration = Duration::from_secs(3600);

/// The longest history retention: ten years (`0s` keeps everything).
pub const MAX_RETENTION: Duration = Duration::from_secs(10 * 366 * 24 * 3600);

fn at_most(field: &str, d: Duration, max: Duration) -> Result<(), (String, String)> {
    if d > max {
        return Err((
            field.to_owned(),
            format!(
                "{} s is too long (at most {} s)",
                d.as_secs(),
                max.as_secs()
            ),
        ));
    }
    Ok(())
}

impl Cluster {
    fn validate(&self) -> Result<(), (String, String)> {
        if !names::is_dns_label(&self.name) || self.name.len() > 40 {
            return Err(bad(
                "name",
                "must be a DNS label of at most 40 characters (it is part of Lease names)",
            ));
        }
        if !names::is_dns_label(&self.namespace) {
            return Err(bad("namespace", "must be a DNS label"));
        }
        if self.selector.is_empty() {
            return Err(bad(
                "selector",
                "must name at least one label (an empty selector would take every pod)",
            ));
        }
        for (k, v) in &self.selector {
            if !names::is_label_key(k) {
                return Err((
                    format!("selector.{k}"),
                    "not a label key (a name of 1-63 letters, digits, '-', '_', '.', optionally \
                     behind a DNS prefix and '/')"
                        .into(),
                ));
            }
            if !names::is_label_value(v) {
                return Err((
                    format!("selector.{k}"),
                    format!("{v:?} is not a label value"),
                ));
            }
        }
        if !names::is_dns_label(self.prefix()) {
            return Err(bad("lease_prefix", "must be a DNS label"));
        }
        for (i, r) in self.roles.iter().enumerate() {
            if r.name.is_empty() || r.selector.is_empty() {
                return Err((
                    format!("roles[{i}]"),
                    "needs a name and a non-empty selector".into(),
                ));
            }
            if let Some((k, v)) = r
                .selector
                .iter()
                .find(|(k, v)| !names::is_label_key(k) || !names::is_label_value(v))
            {
                return Err((
                    format!("roles[{i}].selector.{k}"),
                    format!("{k}={v:?} is not a valid label"),
                ));
            }
        }
        crate::targets::check_list(&self.targets.inline)
            .map_err(|(i, field, why)| (format!("targets.inline[{i}].{field}"), why))?;
        if self.protocol_version.is_some() {
            return Err(bad(
                "protocol_version",
                "is no longer a setting: Leasehold speaks one member protocol (what was version 2: \
                 member Leases, target Leases written only when ownership changes). Version 1 was \
                 removed; remove this line, and run members with this release's `leasehold agent` \
                 (docs/protocol.md)",
            ));
        }
        if let Some(ns) = &self.member_lease_namespace {
            if !names::is_dns_label(ns) {
                return Err(bad("member_lease_namespace", "must be a DNS label"));
            }
            if self.protocol != Protocol::Native {
                return Err(bad(
                    "member_lease_namespace",
                    "applies to native clusters only (gnmic has no member Leases)",
                ));
            }
        }
        if self.protocol == Protocol::Native
            && self.targets.inline.is_empty()
            && self.targets.config_map.is_none()
        {
            return Err(bad(
                "targets",
                "a native cluster needs targets (inline or config_map)",
            ));
        }
        let p = &self.policy;
        if p.lease_duration < Duration::from_secs(2) {
            return Err(bad("policy.lease_duration", "must be at least 2s"));
        }
        for (field, d) in [
            ("policy.lease_duration", p.lease_duration),
            ("policy.join_settle", p.join_settle),
            ("policy.move_timeout", p.move_timeout),
            ("policy.overlap_wait", p.overlap_wait),
        ] {
            at_most(field, d, MAX_DURATION)?;
        }
        if p.overlap_wait.is_zero() {
            return Err(bad(
                "policy.overlap_wait",
                "must be above 0 (for no overlap, set policy.handoff: exclusive)",
            ));
        }
        if let Some(w) = &p.removal.webhook {
            at_most("policy.removal.webhook.timeout", w.timeout, MAX_DURATION)?;
        }
        if p.max_concurrent_moves == 0 {
            return Err(bad("policy.max_concurrent_moves", "must be at least 1"));
        }
        if !(p.mass_lapse_share > 0.0 && p.mass_lapse_share <= 1.0) {
            return Err(bad(
                "policy.mass_lapse_share",
                "must be a share of the members: above 0 and at most 1",
            ));
        }
        if p.move_timeout < p.lease_duration {
            return Err(bad(
                "policy.move_timeout",
                "must be at least policy.lease_duration (a handoff may wait for an expiry)",
            ));
        }
        if let Some(w) = &p.removal.webhook {
            if !(w.url.starts_with("http://") || w.url.starts_with("https://")) {
                return Err(bad(
                    "policy.removal.webhook.url",
                    "must be an http:// or https:// URL",
                ));
            }
            check_placeholders(&w.url)
                .map_err(|why| ("policy.removal.webhook.url".to_owned(), why))?;
            if ::http::Method::from_bytes(w.method.as_bytes()).is_err() {
                return Err(bad("policy.removal.webhook.method", "not an HTTP method"));
            }
        }
        Ok(())
    }
}

/// Checks the `{…}` placeholders of a webhook URL template.
fn check_placeholders(template: &str) -> Result<(), String> {
    let mut rest = template;
    while let Some(start) = rest.find('{') {
        let Some(len) = rest[start..].find('}') else {
            return Err("has an unclosed {".into());
        };
        let name = &rest[start + 1..start + len];
        let known = matches!(name, "cluster" | "namespace" | "instance" | "ip" | "dns")
            || name.strip_prefix("role:").is_some_and(|r| !r.is_empty());
        if !known {
            return Err(format!(
                "unknown placeholder {{{name}}} (known: {{cluster}}, {{namespace}}, {{instance}}, {{ip}}, {{dns}}, {{role:NAME}})"
            ));
        }
        rest = &rest[start + len + 1..];
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = include_str!("../../docs/examples/leasehold.yaml");

    fn parse(text: &str) -> Result<Config, String> {
        Config::parse(text, Path::new("test.yaml")).map_err(|e| e.to_string())
    }

    #[test]
    fn the_documented_example_parses() {
        let c = parse(EXAMPLE).unwrap();
        assert_eq!(c.clusters.len(), 2);
        let collector = &c.clusters[0];
        assert_eq!(collector.prefix(), "leasehold");
        assert_eq!(collector.policy.on_join, OnJoin::Auto);
        assert_eq!(collector.targets.inline[0].target().unwrap().weight, 1);
        assert!(c.clusters[1].policy.removal.webhook.is_some());
    }

    #[test]
    fn defaults_are_safe() {
        let c = parse(
            "clusters:\n- name: a\n  namespace: ns\n  selector: {app: a}\n  targets: {inline: [x]}\n",
        )
        .unwrap();
        let p = &c.clusters[0].policy;
        assert_eq!(p.on_join, OnJoin::Propose, "no moves without asking");
        assert!(!p.removal.delete_pod);
        assert_eq!(c.database, "sqlite:leasehold.db");
    }

    #[test]
    fn errors_name_the_file_the_field_and_why() {
        let base = "clusters:\n- name: a\n  namespace: ns\n  selector: {app: a}\n  targets: {inline: [x]}\n";
        let e = parse(&format!("{base}  policy: {{max_concurrent_moves: 0}}\n")).unwrap_err();
        assert_eq!(
            e,
            "test.yaml: clusters[0].policy.max_concurrent_moves: must be at least 1"
        );
        let e = parse(&base.replace("name: a", "name: A_b")).unwrap_err();
        assert!(
            e.starts_with("test.yaml: clusters[0].name: must be a DNS label"),
            "{e}"
        );
        let e = parse(&format!("{base}  polcy: {{}}\n")).unwrap_err();
        assert!(e.starts_with("test.yaml: ") && e.contains("polcy"), "{e}");
        let e = parse(&format!("{base}  policy: {{lease_duration: soon}}\n")).unwrap_err();
        assert!(e.contains("\"soon\" is not a duration"), "{e}");
        let e = parse(&format!(
            "{base}  policy: {{removal: {{webhook: {{url: \"http://x/{{who}}\"}}}}}}\n"
        ))
        .unwrap_err();
        assert!(
            e.contains("policy.removal.webhook.url: unknown placeholder {who}"),
            "{e}"
        );
        let e = parse(&base.replace("[x]", "[x, {key: x}]")).unwrap_err();
        assert!(
            e.contains("targets.inline[1].key: \"x\" is listed twice"),
            "{e}"
        );
        let e = parse(&format!(
            "{base}- name: a\n  namespace: ns\n  selector: {{app: a}}\n  targets: {{inline: [y]}}\n"
        ))
        .unwrap_err();
        assert!(e.contains("clusters[1].name: \"a\" is used twice"), "{e}");
    }

    #[test]
    fn member_leases_may_live_apart_in_native_clusters() {
        let base = "clusters:\n- name: a\n  namespace: ns\n  selector: {app: a}\n  targets: {inline: [x]}\n";
        let c = parse(&format!("{base}  member_lease_namespace: ns-members\n")).unwrap();
        assert_eq!(c.clusters[0].member_namespace(), "ns-members");
        assert!(c.clusters[0].separate_member_namespace());
        let c = parse(base).unwrap();
        assert_eq!(c.clusters[0].member_namespace(), "ns");
        assert!(!c.clusters[0].separate_member_namespace());
        let gnmic =
            "clusters:\n- name: a\n  namespace: ns\n  selector: {app: a}\n  protocol: gnmic\n";
        let e = parse(&format!("{gnmic}  member_lease_namespace: ns-members\n")).unwrap_err();
        assert!(
            e.contains("member_lease_namespace: applies to native clusters only"),
            "{e}"
        );
        let e = parse(&format!("{base}  member_lease_namespace: Members_NS\n")).unwrap_err();
        assert!(
            e.contains("member_lease_namespace: must be a DNS label"),
            "{e}"
        );
    }

    /// The first member protocol was removed: a configuration that still names a version is
    /// refused, saying why, whatever the value (the one protocol is what version 2 was).
    #[test]
    fn a_protocol_version_is_refused_with_the_reason() {
        let base = "clusters:\n- name: a\n  namespace: ns\n  selector: {app: a}\n  targets: {inline: [x]}\n";
        for v in ["1", "2", "\"2\""] {
            let e = parse(&format!("{base}  protocol_version: {v}\n")).unwrap_err();
            assert!(
                e.contains("protocol_version: is no longer a setting")
                    && e.contains("Version 1 was removed; remove this line"),
                "{v}: {e}"
            );
        }
    }

    #[test]
    fn selectors_take_label_keys_and_durations_are_bounded() {
        let base = "clusters:\n- name: a\n  namespace: ns\n  selector: {app: a}\n  targets: {inline: [x]}\n";
        for (key, ok) in [
            ("app", true),
            ("app.kubernetes.io/name", true),
            ("leasehold.io/cluster", true),
            ("has space", false),
            ("-app", false),
            ("/app", false),
            ("Bad_Prefix/app", false),
            ("a/b/c", false),
            (&"k".repeat(64), false),
        ] {
            let r = parse(&base.replace("{app: a}", &format!("{{\"{key}\": a}}")));
            assert_eq!(r.is_ok(), ok, "{key}: {r:?}");
            if let Err(e) = r {
                assert!(
                    e.starts_with(&format!(
                        "test.yaml: clusters[0].selector.{key}: not a label key"
                    )),
                    "{e}"
                );
            }
        }
        let e = parse(&base.replace("{app: a}", "{app: \"a b\"}")).unwrap_err();
        assert!(
            e.contains("selector.app: \"a b\" is not a label value"),
            "{e}"
        );
        let e = parse(&format!(
            "{base}  roles: [{{name: primary, selector: {{\"x y\": \"1\"}}}}]\n"
        ))
        .unwrap_err();
        assert!(e.contains("clusters[0].roles[0].selector.x y"), "{e}");

        let e = parse(&format!(
            "{base}  policy: {{lease_duration: 100000h, move_timeout: 100000h}}\n"
        ))
        .unwrap_err();
        assert_eq!(
            e,
            "test.yaml: clusters[0].policy.lease_duration: 360000000 s is too long (at most 3600 s)"
        );
        // The hand-off: overlap by default, for next owners that can prove their start.
        let c = parse(base).unwrap();
        let p = &c.clusters[0].policy;
        assert_eq!(
            (p.handoff, p.overlap_wait),
            (Handoff::Overlap, Duration::from_secs(30))
        );
        assert_eq!(p.overlap_ms(true), Some(30_000));
        assert_eq!(
            p.overlap_ms(false),
            None,
            "a next owner that cannot prove: exclusive"
        );
        let c = parse(&format!("{base}  policy: {{handoff: exclusive}}\n")).unwrap();
        assert_eq!(c.clusters[0].policy.overlap_ms(true), None);
        let e = parse(&format!("{base}  policy: {{handoff: sometimes}}\n")).unwrap_err();
        assert!(
            e.contains("unknown variant `sometimes`, expected one of exclusive, overlap"),
            "{e}"
        );
        let e = parse(&format!("{base}  policy: {{overlap_wait: 0s}}\n")).unwrap_err();
        assert!(e.contains("policy.overlap_wait: must be above 0"), "{e}");
        let e = parse(&format!("{base}  policy: {{join_settle: 2h}}\n")).unwrap_err();
        assert!(
            e.contains("clusters[0].policy.join_settle: 7200 s is too long"),
            "{e}"
        );
        let e = parse(&format!("control_plane: {{lease_duration: 61m}}\n{base}")).unwrap_err();
        assert!(
            e.contains("control_plane.lease_duration: 3660 s is too long"),
            "{e}"
        );
        let e = parse(&format!("history_retention: 100000h\n{base}")).unwrap_err();
        assert!(
            e.contains("history_retention: 360000000 s is too long"),
            "{e}"
        );
        assert!(
            parse(&format!(
                "{base}  policy: {{lease_duration: 1h, move_timeout: 1h}}\n"
            ))
            .is_ok()
        );
    }

    #[test]
    fn the_database_can_come_from_outside_the_file() {
        let base = "clusters:\n- name: a\n  namespace: ns\n  selector: {app: a}\n  targets: {inline: [x]}\n";
        let c = parse(base).unwrap();
        let c = c
            .with_database("postgres://lh:secret@db:5432/lh".into())
            .unwrap();
        assert_eq!(c.database, "postgres://lh:secret@db:5432/lh");
        let e = c
            .with_database("mysql://lh:secret@db/lh".into())
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "--database: database: must start with sqlite:, postgres:// or postgresql://"
        );
        assert!(!e.contains("secret"));
    }

    #[test]
    fn any_target_key_is_accepted() {
        let list = parse_target_list(
            "- Router/1\n- {key: \"spine_2:57400\", weight: 3, pin: c-0}\n- \"café\"\n- y\n- 007\n- 42\n",
        )
        .unwrap();
        let list: Vec<&TargetSpec> = list.iter().filter_map(TargetEntry::target).collect();
        assert_eq!(list[1].weight, 3);
        assert_eq!(list[2].key, "café");
        let keys: Vec<_> = list[3..].iter().map(|t| t.key.as_str()).collect();
        assert_eq!(keys, ["y", "007", "42"]);
        assert!(parse_target_list("- a\n- a\n").is_err());
    }
}
