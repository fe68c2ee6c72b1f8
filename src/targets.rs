//! The target list: what a cluster's targets are, as the configuration file (`targets.inline`)
//! and a ConfigMap key (`targets.config_map`) state them — a key, a weight, a pin, and for a
//! managed app the app's own definition of the target ([`GnmicTarget`]: what a `gnmic collect`
//! needs to collect from a device; [`ScrapeTarget`]: what a scraper such as Prometheus needs
//! to scrape it) — or, in an `endpoints` entry ([`endpoints`]), the targets of a Service's
//! ready endpoints, which the control plane expands from the EndpointSlices it watches and an
//! agent derives from each target's key. The control plane reads keys, weights and pins; the
//! agent of a managed cluster reads the definitions from the same list. Plain data and its
//! checks: no I/O. Credentials are never in it, only the name of the Secret that holds them.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Deserializer, Serialize};

pub mod endpoints;

pub use endpoints::EndpointsSource;

/// One target: a key, or `{key, weight, pin, gnmic, scrape}`. The app settings are boxed: the
/// control plane keeps every configured target (50,000 at the scale benchmarked), and most
/// carry at most one of them, so a bare key costs 72 bytes here instead of several hundred.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TargetSpec {
    /// Any string; it becomes a Lease name directly or hashed.
    pub key: String,
    /// Relative load (default 1).
    pub weight: u32,
    /// The member that must own it.
    pub pin: Option<String>,
    /// What a managed `gnmic collect` is given for it (clusters whose agents run with
    /// `--gnmic-api`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gnmic: Option<Box<GnmicTarget>>,
    /// What scrapers are given for it over HTTP service discovery (clusters whose agents run
    /// with `--scrape-sd-listen`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scrape: Option<Box<ScrapeTarget>>,
}

impl<'de> Deserialize<'de> for TargetSpec {
    /// As a [`TargetEntry`] that is one target.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match TargetEntry::deserialize(d)? {
            TargetEntry::Target(t) => Ok(t),
            TargetEntry::Endpoints(_) => Err(serde::de::Error::custom(
                "an `endpoints` entry is not one target",
            )),
        }
    }
}

/// One entry of a target list: one target, or the targets of a Service's ready endpoints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum TargetEntry {
    /// A key, or `{key, weight, pin, gnmic, scrape}`.
    Target(TargetSpec),
    /// `{endpoints: {service, port, scrape}, weight}`.
    Endpoints(Box<EndpointsEntry>),
}

/// An entry `{endpoints: {service, port, scrape}, weight}`: a target per ready endpoint of the
/// Service ([`endpoints::expand`]), each of weight `weight`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EndpointsEntry {
    /// Where the targets come from and what scrapers are given for them.
    pub endpoints: EndpointsSource,
    /// Each target's relative load (default 1).
    pub weight: u32,
}

impl<'de> Deserialize<'de> for TargetEntry {
    /// A bare scalar is a key (numbers and booleans keep their text as far as YAML lets them:
    /// quote keys such as `1.50` or `true`); a mapping is `{key, weight, pin, gnmic, scrape}`
    /// or `{endpoints, weight}`.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::{self, MapAccess, Visitor};
        use std::fmt;

        struct V;
        impl V {
            fn key<E>(self, key: String) -> Result<TargetEntry, E> {
                Ok(TargetEntry::Target(TargetSpec {
                    key,
                    weight: 1,
                    pin: None,
                    gnmic: None,
                    scrape: None,
                }))
            }
        }
        impl<'de> Visitor<'de> for V {
            type Value = TargetEntry;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(
                    "a target key, {key, weight, pin, gnmic, scrape} or {endpoints, weight}",
                )
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<TargetEntry, E> {
                self.key(v.to_owned())
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<TargetEntry, E> {
                self.key(v.to_string())
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<TargetEntry, E> {
                self.key(v.to_string())
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<TargetEntry, E> {
                self.key(v.to_string())
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<TargetEntry, E> {
                self.key(v.to_string())
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<TargetEntry, A::Error> {
                #[derive(Deserialize)]
                #[serde(deny_unknown_fields)]
                struct Full {
                    #[serde(default)]
                    key: Option<String>,
                    #[serde(default = "one")]
                    weight: u32,
                    #[serde(default)]
                    pin: Option<String>,
                    #[serde(default)]
                    gnmic: Option<Box<GnmicTarget>>,
                    #[serde(default)]
                    scrape: Option<Box<ScrapeTarget>>,
                    #[serde(default)]
                    endpoints: Option<EndpointsSource>,
                }
                let f = Full::deserialize(de::value::MapAccessDeserializer::new(map))?;
                let Some(endpoints) = f.endpoints else {
                    let Some(key) = f.key else {
                        return Err(de::Error::custom(
                            "an entry needs a `key` (one target) or `endpoints` (the targets of \
                             a Service's EndpointSlices)",
                        ));
                    };
                    return Ok(TargetEntry::Target(TargetSpec {
                        key,
                        weight: f.weight,
                        pin: f.pin,
                        gnmic: f.gnmic,
                        scrape: f.scrape,
                    }));
                };
                let refused = if f.key.is_some() {
                    Some(
                        "an entry has either a `key` (one target) or `endpoints` (the targets of \
                         a Service's EndpointSlices), not both",
                    )
                } else if f.pin.is_some() {
                    Some("`pin` names one target's member: an `endpoints` entry has many targets")
                } else if f.gnmic.is_some() {
                    Some("gnmic targets cannot come from `endpoints`")
                } else if f.scrape.is_some() {
                    Some(
                        "an `endpoints` entry's scrape settings go inside it: \
                         {endpoints: {service, port, scrape: {job, labels, metrics_path, scheme}}}",
                    )
                } else {
                    None
                };
                if let Some(why) = refused {
                    return Err(de::Error::custom(why));
                }
                Ok(TargetEntry::Endpoints(Box::new(EndpointsEntry {
                    endpoints,
                    weight: f.weight,
                })))
            }
        }
        d.deserialize_any(V)
    }
}

impl TargetEntry {
    /// What is wrong with this entry, if anything: `(field, why)`, the field relative to the
    /// entry.
    pub fn check(&self) -> Result<(), (String, String)> {
        match self {
            TargetEntry::Target(t) => t.check(),
            TargetEntry::Endpoints(e) => {
                if e.weight == 0 {
                    return Err(("weight".into(), "must be at least 1".into()));
                }
                e.endpoints
                    .check()
                    .map_err(|(f, why)| (format!("endpoints.{f}"), why))
            }
        }
    }

    /// The one target this entry is, if it is one.
    pub fn target(&self) -> Option<&TargetSpec> {
        match self {
            TargetEntry::Target(t) => Some(t),
            TargetEntry::Endpoints(_) => None,
        }
    }
}

/// Checks a whole list: each entry ([`TargetEntry::check`]), no key listed twice, at most one
/// `endpoints` entry per Service (a target's key names its Service, and an agent finds the
/// entry by it), and no key that an `endpoints` entry's targets could have. The error:
/// `(index, field, why)`.
pub fn check_list(list: &[TargetEntry]) -> Result<(), (usize, String, String)> {
    let services: BTreeSet<&str> = list
        .iter()
        .filter_map(|e| match e {
            TargetEntry::Endpoints(e) => Some(e.endpoints.service.as_str()),
            TargetEntry::Target(_) => None,
        })
        .collect();
    let mut keys = BTreeSet::new();
    let mut seen_services = BTreeSet::new();
    for (i, e) in list.iter().enumerate() {
        e.check().map_err(|(field, why)| (i, field, why))?;
        match e {
            TargetEntry::Target(t) => {
                if !keys.insert(&t.key) {
                    return Err((i, "key".into(), format!("{:?} is listed twice", t.key)));
                }
                if let Some(k) = endpoints::EndpointKey::parse(&t.key)
                    && services.contains(k.service)
                {
                    return Err((
                        i,
                        "key".into(),
                        format!(
                            "{:?} is the key of an endpoint of Service {:?}, whose targets an \
                             `endpoints` entry lists",
                            t.key, k.service
                        ),
                    ));
                }
            }
            TargetEntry::Endpoints(e) => {
                if !seen_services.insert(&e.endpoints.service) {
                    return Err((
                        i,
                        "endpoints.service".into(),
                        format!(
                            "Service {:?} is listed twice: one `endpoints` entry per Service \
                             (a target's key names its Service, not the entry)",
                            e.endpoints.service
                        ),
                    ));
                }
            }
        }
    }
    Ok(())
}

fn one() -> u32 {
    1
}

/// YAML 1.2 reading: only `true`/`false` are booleans and `0012` stays text, so keys such as
/// `y`, `on` or `007` arrive as written.
pub(crate) fn yaml<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, serde_saphyr::Error> {
    let mut options = serde_saphyr::Options::default();
    options.strict_booleans = true;
    options.leading_zero_numbers_as_strings = true;
    serde_saphyr::from_str_with_options(text, options)
}

impl TargetSpec {
    /// What is wrong with this entry, if anything: `(field, why)`, the field relative to the
    /// entry.
    pub fn check(&self) -> Result<(), (String, String)> {
        if self.key.is_empty() {
            return Err(("key".into(), "must not be empty".into()));
        }
        if self.weight == 0 {
            return Err(("weight".into(), "must be at least 1".into()));
        }
        if let Some(g) = &self.gnmic {
            // gnmic's API routes name a target in one path segment (`/targets/{id}`), which
            // cannot hold a `/`, even percent-encoded.
            if self.key.contains('/') {
                return Err((
                    "key".into(),
                    format!(
                        "{:?}: a target gnmic collects cannot have `/` in its key (gnmic's API \
                         cannot name it)",
                        self.key
                    ),
                ));
            }
            g.check().map_err(|(f, why)| (format!("gnmic.{f}"), why))?;
        }
        if let Some(s) = &self.scrape {
            s.check().map_err(|(f, why)| (format!("scrape.{f}"), why))?;
        }
        Ok(())
    }
}

/// One target as a managed `gnmic collect` is given it (`POST /api/v1/config/targets`), in
/// gnmic's own spelling (`skip-verify`, `tls-ca`, …). gnmic applies no defaults on that path,
/// so the agent sends [`GnmicTarget::DEFAULT_TIMEOUT`] when `timeout` is left out; a field gnmic
/// does not know is refused here (gnmic itself would ignore a typo in silence). The target's
/// name in gnmic is its key. Credentials come from the Secret `credentials.secret`, mounted in
/// the agent's container; a `username`, `password` or `token` written here is refused.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct GnmicTarget {
    /// `host:port` of the device's gNMI server.
    pub address: String,
    /// gnmic's dial and request timeout, a Go duration (`10s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    /// Plain-text gRPC (no TLS).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub insecure: Option<bool>,
    /// TLS without verifying the device's certificate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip_verify: Option<bool>,
    /// Paths inside the gnmic container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_ca: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_cert: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_server_name: Option<String>,
    /// Subscription names from gnmic's configuration (empty: all of them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subscriptions: Vec<String>,
    /// Output names from gnmic's configuration (empty: all of them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outputs: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub event_tags: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encoding: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gzip: Option<bool>,
    /// How long gnmic waits before redialling a device that went away (a Go duration).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_timer: Option<String>,
    /// The Secret holding `username` and `password` (or `token`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<Credentials>,
    /// Refused (`check`): present only to say why.
    #[serde(default, skip_serializing)]
    username: Option<serde_json::Value>,
    #[serde(default, skip_serializing)]
    password: Option<serde_json::Value>,
    #[serde(default, skip_serializing)]
    token: Option<serde_json::Value>,
}

/// Where a target's credentials are: a Secret in the cluster's namespace, mounted in the
/// agent's container at `<--gnmic-secrets-dir>/<secret>/` with keys `username` and `password`,
/// or `token`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Credentials {
    /// The Secret's name.
    pub secret: String,
}

impl GnmicTarget {
    /// gnmic's own default for `timeout`, which its API does not apply.
    pub const DEFAULT_TIMEOUT: &'static str = "10s";

    /// A definition for a device at `address`, everything else left to the defaults.
    pub fn at(address: &str) -> GnmicTarget {
        GnmicTarget {
            address: address.to_owned(),
            ..Default::default()
        }
    }

    fn check(&self) -> Result<(), (String, String)> {
        for (field, set) in [
            ("username", self.username.is_some()),
            ("password", self.password.is_some()),
            ("token", self.token.is_some()),
        ] {
            if set {
                return Err((
                    field.into(),
                    "credentials are never written in the target list: name the Secret that \
                     holds them (credentials: {secret: NAME})"
                        .into(),
                ));
            }
        }
        match self.address.rsplit_once(':') {
            Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0) => {}
            _ => {
                return Err((
                    "address".into(),
                    format!(
                        "{:?} is not host:port (gnmic's API adds no default port)",
                        self.address
                    ),
                ));
            }
        }
        for (field, value) in [
            ("timeout", &self.timeout),
            ("retry-timer", &self.retry_timer),
        ] {
            if let Some(v) = value
                && !is_go_duration(v)
            {
                return Err((
                    field.into(),
                    format!("{v:?} is not a positive duration such as 10s, 500ms or 1m30s"),
                ));
            }
        }
        if let Some(c) = &self.credentials
            && !crate::protocol::names::is_dns_subdomain(&c.secret)
        {
            return Err((
                "credentials.secret".into(),
                format!("{:?} is not a Secret name", c.secret),
            ));
        }
        Ok(())
    }
}

/// One target as scrapers are given it over HTTP service discovery (`leasehold agent
/// --scrape-sd-listen`, `agent::scrape`): where to scrape and with which labels. `metrics_path`
/// and `scheme` become Prometheus' `__metrics_path__` and `__scheme__` labels, `job` its `job`
/// label (left out: the scrape config's `job_name` applies); the agent adds
/// [`ScrapeTarget::KEY_LABEL`] and [`ScrapeTarget::GENERATION_LABEL`]. Labels of Prometheus'
/// own (`__…`) and the ones the agent sets are refused in `labels`, as is any field not known
/// here.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ScrapeTarget {
    /// `host:port` to scrape (`[::1]:9100` for IPv6).
    pub address: String,
    /// The `job` label; left out, the scraper's own job name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// More labels for the target's series.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// The path to scrape (`/metrics` when left out, Prometheus' default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics_path: Option<String>,
    /// `http` or `https` (left out: the scrape config's, `http` by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheme: Option<Scheme>,
}

/// How a target is scraped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scheme {
    Http,
    Https,
}

impl Scheme {
    /// The word Prometheus takes in `__scheme__`.
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }
}

impl ScrapeTarget {
    /// The label the agent gives every target: its key, so that a series says which target
    /// it is whichever member scraped it.
    pub const KEY_LABEL: &'static str = "leasehold_target";
    /// The label the agent gives every target: the fencing generation of the member's hold
    /// (`agent::Assignment::generation`), so that a scrape can be fenced.
    pub const GENERATION_LABEL: &'static str = "leasehold_generation";

    /// A target at `address`, everything else left to the defaults.
    pub fn at(address: &str) -> ScrapeTarget {
        ScrapeTarget {
            address: address.to_owned(),
            ..Default::default()
        }
    }

    fn check(&self) -> Result<(), (String, String)> {
        if !is_scrape_address(&self.address) {
            return Err((
                "address".into(),
                format!(
                    "{:?} is not host:port (a port is required; IPv6 in brackets: [::1]:9100)",
                    self.address
                ),
            ));
        }
        check_scrape_settings(
            self.job.as_deref(),
            self.metrics_path.as_deref(),
            &self.labels,
            &[],
        )
    }
}

/// The checks of a scrape definition's job, path and labels (`reserved`: more label names the
/// agent sets).
fn check_scrape_settings(
    job: Option<&str>,
    metrics_path: Option<&str>,
    labels: &BTreeMap<String, String>,
    reserved: &[&str],
) -> Result<(), (String, String)> {
    if job.is_some_and(str::is_empty) {
        return Err((
            "job".into(),
            "must not be empty (leave it out for the scraper's own job name)".into(),
        ));
    }
    if let Some(p) = metrics_path
        && (!p.starts_with('/') || p.contains(['?', '#']) || p.contains(char::is_whitespace))
    {
        return Err((
            "metrics_path".into(),
            format!("{p:?} is not a URL path such as /metrics (no query, no spaces)"),
        ));
    }
    for name in labels.keys() {
        let why = if !is_label_name(name) {
            "is not a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*)".to_owned()
        } else if name.starts_with("__") {
            "names starting with `__` are Prometheus' own: the scrape's path and scheme are \
             `metrics_path` and `scheme`"
                .to_owned()
        } else if name == "job" {
            "the job is `job`, beside `labels`".to_owned()
        } else if name == ScrapeTarget::KEY_LABEL
            || name == ScrapeTarget::GENERATION_LABEL
            || reserved.contains(&name.as_str())
        {
            "is set by the agent".to_owned()
        } else {
            continue;
        };
        return Err((format!("labels.{name}"), format!("{name:?} {why}")));
    }
    Ok(())
}

/// `host:port` as a scraper takes it: a host (a name, an IPv4 address, or an IPv6 address in
/// brackets) without a path, user or spaces, and a port from 1 to 65535.
fn is_scrape_address(text: &str) -> bool {
    let Some((host, port)) = text.rsplit_once(':') else {
        return false;
    };
    let host_ok = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        Some(v6) => v6.parse::<std::net::Ipv6Addr>().is_ok(),
        None => {
            !host.is_empty()
                && host
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
        }
    };
    host_ok && port.parse::<u16>().is_ok_and(|p| p > 0)
}

/// A Prometheus label name: `[a-zA-Z_][a-zA-Z0-9_]*`.
fn is_label_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A positive Go duration (`time.ParseDuration` without sign or fraction): numbers with units
/// `ns`, `us`, `ms`, `s`, `m`, `h`, at least one of them not zero.
fn is_go_duration(text: &str) -> bool {
    let mut rest = text;
    let mut positive = false;
    if rest.is_empty() {
        return false;
    }
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return false;
        }
        positive |= rest[..digits].bytes().any(|b| b != b'0');
        rest = &rest[digits..];
        let unit = ["ns", "us", "ms", "s", "m", "h"]
            .into_iter()
            .find(|u| rest.starts_with(u));
        let Some(unit) = unit else { return false };
        rest = &rest[unit.len()..];
    }
    positive
}

/// Parses a target list as stored in a ConfigMap key (the `inline` format, as YAML), and checks
/// it ([`check_list`]).
pub fn parse_target_list(text: &str) -> Result<Vec<TargetEntry>, String> {
    let list: Vec<TargetEntry> = yaml(text).map_err(|e| e.to_string())?;
    check_list(&list).map_err(|(i, field, why)| format!("[{i}].{field}: {why}"))?;
    Ok(list)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The control plane holds every configured target (twice: the list and the index), so a
    /// plain key must stay small: a bare key was 700 bytes before the app settings were boxed.
    #[test]
    fn a_target_without_app_settings_stays_small() {
        assert!(size_of::<TargetSpec>() <= 72, "{}", size_of::<TargetSpec>());
        assert!(
            size_of::<TargetEntry>() <= 72,
            "{}",
            size_of::<TargetEntry>()
        );
    }

    #[test]
    fn a_gnmic_definition_is_read_in_gnmics_spelling() {
        let list = parse_target_list(
            "- spine-1\n- {key: leaf-2, weight: 2, gnmic: {address: '10.0.0.2:57400', skip-verify: true, \
             subscriptions: [if], credentials: {secret: leaf-creds}}}\n",
        )
        .unwrap();
        let list: Vec<&TargetSpec> = list.iter().filter_map(TargetEntry::target).collect();
        assert_eq!(list[0].gnmic, None);
        let g = list[1].gnmic.as_ref().unwrap();
        assert_eq!(g.address, "10.0.0.2:57400");
        assert_eq!(g.skip_verify, Some(true));
        assert_eq!(g.subscriptions, ["if"]);
        assert_eq!(g.credentials.as_ref().unwrap().secret, "leaf-creds");
    }

    #[test]
    fn what_gnmic_would_take_wrongly_or_in_silence_is_refused_naming_the_field() {
        for (entry, want) in [
            (
                "{key: a, gnmic: {address: '10.0.0.1'}}",
                "[0].gnmic.address: ",
            ),
            (
                "{key: a, gnmic: {address: '10.0.0.1:0'}}",
                "[0].gnmic.address: ",
            ),
            ("{key: a/b, gnmic: {address: 'h:1'}}", "[0].key: "),
            (
                "{key: a, gnmic: {address: 'h:1', password: x}}",
                "[0].gnmic.password: ",
            ),
            (
                "{key: a, gnmic: {address: 'h:1', username: x}}",
                "[0].gnmic.username: ",
            ),
            (
                "{key: a, gnmic: {address: 'h:1', timeout: 10}}",
                "[0].gnmic.timeout: ",
            ),
            (
                "{key: a, gnmic: {address: 'h:1', timeout: 0s}}",
                "[0].gnmic.timeout: ",
            ),
            (
                "{key: a, gnmic: {address: 'h:1', retry-timer: 1.5s}}",
                "[0].gnmic.retry-timer: ",
            ),
            (
                "{key: a, gnmic: {address: 'h:1', credentials: {secret: Not_A_Name}}}",
                "[0].gnmic.credentials.secret: ",
            ),
            ("{key: a, weight: 0}", "[0].weight: "),
        ] {
            let e = parse_target_list(&format!("- {entry}\n")).unwrap_err();
            assert!(e.starts_with(want), "{entry}: {e}");
        }
        // A typo gnmic itself would ignore.
        let e = parse_target_list("- {key: a, gnmic: {address: 'h:1', skip_verify: true}}\n")
            .unwrap_err();
        assert!(e.contains("skip_verify"), "{e}");
    }

    #[test]
    fn a_scrape_definition_is_read_with_prometheus_names() {
        let list = parse_target_list(
            "- {key: node-1, scrape: {address: '10.0.0.1:9100'}}\n\
             - {key: node-2, gnmic: {address: 'h:1'}, scrape: {address: '[fd00::2]:9100', job: nodes, \
             labels: {rack: r1, _tier: a}, metrics_path: /probe, scheme: https}}\n",
        )
        .unwrap();
        let list: Vec<&TargetSpec> = list.iter().filter_map(TargetEntry::target).collect();
        assert_eq!(
            list[0].scrape,
            Some(Box::new(ScrapeTarget::at("10.0.0.1:9100")))
        );
        let s = list[1].scrape.as_ref().unwrap();
        assert_eq!(s.address, "[fd00::2]:9100");
        assert_eq!(s.job.as_deref(), Some("nodes"));
        assert_eq!(s.labels["rack"], "r1");
        assert_eq!(s.metrics_path.as_deref(), Some("/probe"));
        assert_eq!(s.scheme, Some(Scheme::Https));
        assert!(list[1].gnmic.is_some());
    }

    #[test]
    fn what_a_scraper_would_take_wrongly_is_refused_naming_the_field() {
        for (scrape, want) in [
            ("{address: '10.0.0.1'}", "[0].scrape.address: "),
            ("{address: '10.0.0.1:0'}", "[0].scrape.address: "),
            ("{address: '10.0.0.1:70000'}", "[0].scrape.address: "),
            ("{address: 'h:9100/metrics'}", "[0].scrape.address: "),
            ("{address: 'http://h:9100'}", "[0].scrape.address: "),
            ("{address: 'fd00::2:9100'}", "[0].scrape.address: "),
            ("{address: ':9100'}", "[0].scrape.address: "),
            ("{address: 'h:1', job: ''}", "[0].scrape.job: "),
            (
                "{address: 'h:1', metrics_path: metrics}",
                "[0].scrape.metrics_path: ",
            ),
            (
                "{address: 'h:1', metrics_path: '/m?x=1'}",
                "[0].scrape.metrics_path: ",
            ),
            (
                "{address: 'h:1', labels: {9lives: x}}",
                "[0].scrape.labels.9lives: ",
            ),
            (
                "{address: 'h:1', labels: {rack-1: x}}",
                "[0].scrape.labels.rack-1: ",
            ),
            (
                "{address: 'h:1', labels: {__metrics_path__: /x}}",
                "[0].scrape.labels.__metrics_path__: ",
            ),
            (
                "{address: 'h:1', labels: {__scheme__: https}}",
                "[0].scrape.labels.__scheme__: ",
            ),
            (
                "{address: 'h:1', labels: {job: x}}",
                "[0].scrape.labels.job: ",
            ),
            (
                "{address: 'h:1', labels: {leasehold_target: x}}",
                "[0].scrape.labels.leasehold_target: ",
            ),
            (
                "{address: 'h:1', labels: {leasehold_generation: '1'}}",
                "[0].scrape.labels.leasehold_generation: ",
            ),
        ] {
            let e = parse_target_list(&format!("- {{key: a, scrape: {scrape}}}\n")).unwrap_err();
            assert!(e.starts_with(want), "{scrape}: {e}");
        }
        // A scheme Prometheus does not have, and a field not known here (Prometheus' spelling
        // of the path is `metrics_path`).
        for (scrape, word) in [
            ("{address: 'h:1', scheme: ftp}", "ftp"),
            ("{address: 'h:1', path: /m}", "path"),
        ] {
            let e = parse_target_list(&format!("- {{key: a, scrape: {scrape}}}\n")).unwrap_err();
            assert!(e.contains(word), "{scrape}: {e}");
        }
        // The reserved names say what to use instead.
        let e = parse_target_list(
            "- {key: a, scrape: {address: 'h:1', labels: {__scheme__: https}}}\n",
        )
        .unwrap_err();
        assert!(e.contains("`scheme`"), "{e}");
    }

    #[test]
    fn an_endpoints_entry_is_read_beside_targets() {
        let list = parse_target_list(
            "- t-1\n\
             - {endpoints: {service: web, port: metrics, scrape: {job: web, labels: {team: a}, \
             metrics_path: /m, scheme: https}}, weight: 2}\n\
             - {endpoints: {service: db, port: 5432}}\n",
        )
        .unwrap();
        assert_eq!(list[0].target().unwrap().key, "t-1");
        let TargetEntry::Endpoints(web) = &list[1] else {
            panic!("{:?}", list[1]);
        };
        assert_eq!(web.weight, 2);
        assert_eq!(web.endpoints.service, "web");
        assert_eq!(
            web.endpoints.port,
            endpoints::PortRef::Name("metrics".into())
        );
        assert_eq!(web.endpoints.scrape.job.as_deref(), Some("web"));
        assert_eq!(web.endpoints.scrape.scheme, Some(Scheme::Https));
        let TargetEntry::Endpoints(db) = &list[2] else {
            panic!("{:?}", list[2]);
        };
        assert_eq!(
            (db.weight, &db.endpoints.port),
            (1, &endpoints::PortRef::Number(5432))
        );
    }

    #[test]
    fn a_bad_endpoints_entry_is_refused_saying_why() {
        for (entry, want) in [
            // No Service, or neither a key nor endpoints.
            ("{endpoints: {port: metrics}}", "missing field `service`"),
            ("{weight: 2}", "needs a `key` (one target) or `endpoints`"),
            // Both a key and endpoints, and what one target has but many cannot.
            (
                "{key: a, endpoints: {service: web, port: m}}",
                "either a `key` (one target) or `endpoints`",
            ),
            ("{endpoints: {service: web, port: m}, pin: c-0}", "`pin`"),
            (
                "{endpoints: {service: web, port: m}, scrape: {address: 'h:1'}}",
                "go inside it",
            ),
            (
                "{endpoints: {service: web, port: m}, gnmic: {address: 'h:1'}}",
                "gnmic targets cannot",
            ),
            (
                "{endpoints: {service: web, port: m, selector: {}}}",
                "selector",
            ),
            (
                "{endpoints: {service: Web_1, port: m}}",
                "[0].endpoints.service: ",
            ),
            (
                "{endpoints: {service: web, port: 0}}",
                "[0].endpoints.port: ",
            ),
            (
                "{endpoints: {service: web, port: Metrics}}",
                "[0].endpoints.port: ",
            ),
            (
                "{endpoints: {service: web, port: m}, weight: 0}",
                "[0].weight: ",
            ),
            (
                "{endpoints: {service: web, port: m, scrape: {address: 'h:1'}}}",
                "[0].endpoints.scrape.address: each endpoint gives its own address",
            ),
            (
                "{endpoints: {service: web, port: m, scrape: {labels: {pod: x}}}}",
                "[0].endpoints.scrape.labels.pod: \"pod\" is set by the agent",
            ),
            (
                "{endpoints: {service: web, port: m, scrape: {metrics_path: m}}}",
                "[0].endpoints.scrape.metrics_path: ",
            ),
        ] {
            let e = parse_target_list(&format!("- {entry}\n")).unwrap_err();
            assert!(e.contains(want), "{entry}: {e}");
        }
        // One entry per Service, and no listed key an endpoint's target could have.
        let e = parse_target_list(
            "- {endpoints: {service: web, port: a}}\n- {endpoints: {service: web, port: b}}\n",
        )
        .unwrap_err();
        assert!(
            e.starts_with("[1].endpoints.service: Service \"web\" is listed twice"),
            "{e}"
        );
        let e = parse_target_list(
            "- {endpoints: {service: web, port: a}}\n- web/web-0/10.0.0.1:80\n- db/10.0.0.1:80\n",
        )
        .unwrap_err();
        assert!(e.starts_with("[1].key: "), "{e}");
    }

    #[test]
    fn go_durations() {
        for ok in ["10s", "500ms", "1m30s", "1h", "250us", "7ns"] {
            assert!(is_go_duration(ok), "{ok}");
        }
        for bad in ["", "10", "s", "1.5s", "-1s", "0s", "0m0s", "10 s", "1d"] {
            assert!(!is_go_duration(bad), "{bad}");
        }
    }
}
