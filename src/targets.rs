//! The target list: what a cluster's targets are, as the configuration file (`targets.inline`)
//! and a ConfigMap key (`targets.config_map`) state them — a key, a weight, a pin, and for a
//! managed app the app's own definition of the target ([`GnmicTarget`]: what a `gnmic collect`
//! needs to collect from a device). The control plane reads keys, weights and pins; the agent
//! of a managed gnmic cluster reads the definitions from the same list. Plain data and its
//! checks: no I/O. Credentials are never in it, only the name of the Secret that holds them.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Deserializer, Serialize};

/// One target: a key, or `{key, weight, pin, gnmic}`.
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
    pub gnmic: Option<GnmicTarget>,
}

impl<'de> Deserialize<'de> for TargetSpec {
    /// A bare scalar is a key (numbers and booleans keep their text as far as YAML lets them:
    /// quote keys such as `1.50` or `true`); a mapping is `{key, weight, pin, gnmic}`.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::{self, MapAccess, Visitor};
        use std::fmt;

        struct V;
        impl V {
            fn key<E>(self, key: String) -> Result<TargetSpec, E> {
                Ok(TargetSpec {
                    key,
                    weight: 1,
                    pin: None,
                    gnmic: None,
                })
            }
        }
        impl<'de> Visitor<'de> for V {
            type Value = TargetSpec;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a target key or {key, weight, pin, gnmic}")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<TargetSpec, E> {
                self.key(v.to_owned())
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<TargetSpec, E> {
                self.key(v.to_string())
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<TargetSpec, E> {
                self.key(v.to_string())
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<TargetSpec, E> {
                self.key(v.to_string())
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<TargetSpec, E> {
                self.key(v.to_string())
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<TargetSpec, A::Error> {
                #[derive(Deserialize)]
                #[serde(deny_unknown_fields)]
                struct Full {
                    key: String,
                    #[serde(default = "one")]
                    weight: u32,
                    #[serde(default)]
                    pin: Option<String>,
                    #[serde(default)]
                    gnmic: Option<GnmicTarget>,
                }
                let f = Full::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(TargetSpec {
                    key: f.key,
                    weight: f.weight,
                    pin: f.pin,
                    gnmic: f.gnmic,
                })
            }
        }
        d.deserialize_any(V)
    }
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

/// Parses a target list as stored in a ConfigMap key (the `inline` format, as YAML).
pub fn parse_target_list(text: &str) -> Result<Vec<TargetSpec>, String> {
    let list: Vec<TargetSpec> = yaml(text).map_err(|e| e.to_string())?;
    let mut keys = BTreeSet::new();
    for (i, t) in list.iter().enumerate() {
        t.check()
            .map_err(|(field, why)| format!("[{i}].{field}: {why}"))?;
        if !keys.insert(&t.key) {
            return Err(format!("[{i}]: {:?} is listed twice", t.key));
        }
    }
    Ok(list)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gnmic_definition_is_read_in_gnmics_spelling() {
        let list = parse_target_list(
            "- spine-1\n- {key: leaf-2, weight: 2, gnmic: {address: '10.0.0.2:57400', skip-verify: true, \
             subscriptions: [if], credentials: {secret: leaf-creds}}}\n",
        )
        .unwrap();
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
    fn go_durations() {
        for ok in ["10s", "500ms", "1m30s", "1h", "250us", "7ns"] {
            assert!(is_go_duration(ok), "{ok}");
        }
        for bad in ["", "10", "s", "1.5s", "-1s", "0s", "0m0s", "10 s", "1d"] {
            assert!(!is_go_duration(bad), "{bad}");
        }
    }
}
