//! Targets from Kubernetes discovery: a target list's `endpoints` entry names a Service (and
//! one of its ports), and every ready endpoint of that Service's EndpointSlices is a target.
//! This module owns the entry ([`EndpointsSource`]), the key of each target it yields
//! ([`EndpointKey`]: `<service>/<pod>/<host>:<port>`, from which an agent that watches nothing
//! derives the scrape address), and the expansion of an entry over the slices the control plane
//! watches ([`expand`], over [`Slice`], the few fields of an EndpointSlice it needs). Plain
//! data and pure functions: the index converts the Kubernetes objects and calls [`expand`]; the
//! agent parses keys.
//!
//! Readiness is Kubernetes' own `conditions.ready` (absent counts as ready, as the API says):
//! a pod that is not ready, or is terminating (the EndpointSlice controller then sets `ready`
//! false unless the Service publishes not-ready addresses), is not a target.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};

use super::{Scheme, ScrapeTarget, TargetSpec, check_scrape_settings};

/// An `endpoints` entry of a target list: the targets of a Service's ready endpoints, in the
/// cluster's namespace.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct EndpointsSource {
    /// The Service, whose EndpointSlices carry the label `kubernetes.io/service-name: <service>`.
    pub service: String,
    /// Which of the Service's ports to scrape: its name (as in the Service and its
    /// EndpointSlices) or, for an unnamed port, the endpoints' port number (the container's).
    pub port: PortRef,
    /// What scrapers are given for every target besides its address.
    #[serde(default)]
    pub scrape: ScrapeTemplate,
}

/// A port of a Service, by name or by the endpoints' number.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum PortRef {
    /// The endpoints' port number (`port` in the EndpointSlice).
    Number(u16),
    /// The port's name.
    Name(String),
}

impl fmt::Display for PortRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PortRef::Number(n) => write!(f, "{n}"),
            PortRef::Name(n) => write!(f, "{n:?}"),
        }
    }
}

/// A [`ScrapeTarget`] without its address, which each endpoint gives.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ScrapeTemplate {
    /// The `job` label; left out, the scraper's own job name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// More labels for every target's series.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// The path to scrape.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics_path: Option<String>,
    /// `http` or `https`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheme: Option<Scheme>,
    /// Refused (`check`): present only to say why.
    #[serde(default, skip_serializing)]
    address: Option<serde_json::Value>,
}

/// The labels the agent gives every target of an `endpoints` entry: the Service's name, and
/// the pod's when the endpoint names one.
pub const SERVICE_LABEL: &str = "service";
/// See [`SERVICE_LABEL`].
pub const POD_LABEL: &str = "pod";

impl EndpointsSource {
    /// What is wrong with this entry, if anything: `(field, why)`, the field relative to it.
    pub fn check(&self) -> Result<(), (String, String)> {
        if !crate::protocol::names::is_dns_label(&self.service) {
            return Err((
                "service".into(),
                format!("{:?} is not a Service name (a DNS label)", self.service),
            ));
        }
        match &self.port {
            PortRef::Number(0) => {
                return Err(("port".into(), "must be 1 to 65535".into()));
            }
            PortRef::Name(n) if !is_port_name(n) => {
                return Err((
                    "port".into(),
                    format!(
                        "{n:?} is neither a port name (lower-case letters, digits and `-`, at most \
                         15, at least one letter) nor a port number"
                    ),
                ));
            }
            _ => {}
        }
        let s = &self.scrape;
        if s.address.is_some() {
            return Err((
                "scrape.address".into(),
                "each endpoint gives its own address: leave it out".into(),
            ));
        }
        check_scrape_settings(
            s.job.as_deref(),
            s.metrics_path.as_deref(),
            &s.labels,
            &[SERVICE_LABEL, POD_LABEL],
        )
        .map_err(|(f, why)| (format!("scrape.{f}"), why))
    }

    /// What scrapers are given for the target `key` of this entry: the address from the key,
    /// the rest from the entry, and the labels [`SERVICE_LABEL`] and [`POD_LABEL`].
    pub fn scrape_target(&self, key: &EndpointKey<'_>) -> ScrapeTarget {
        let mut labels = self.scrape.labels.clone();
        labels.insert(SERVICE_LABEL.into(), key.service.into());
        if let Some(pod) = key.pod {
            labels.insert(POD_LABEL.into(), pod.into());
        }
        ScrapeTarget {
            address: key.address.into(),
            job: self.scrape.job.clone(),
            labels,
            metrics_path: self.scrape.metrics_path.clone(),
            scheme: self.scrape.scheme,
        }
    }
}

/// An IANA service name, as Kubernetes takes a port's name: 1–15 lower-case letters, digits
/// and `-`, at least one letter, no `-` at either end or twice in a row.
fn is_port_name(n: &str) -> bool {
    (1..=15).contains(&n.len())
        && n.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && n.bytes().any(|b| b.is_ascii_lowercase())
        && !n.starts_with('-')
        && !n.ends_with('-')
        && !n.contains("--")
}

/// The key of a target from an `endpoints` entry: `<service>/<pod>/<host>:<port>`, or
/// `<service>/<host>:<port>` for an endpoint that names no pod; an IPv6 host in brackets.
/// Stable while the endpoint exists (its address, port and pod do not change), and all an
/// agent needs besides the entry: the address to scrape and the pod's name. Service and pod
/// names cannot hold `/`, so the parts are never ambiguous.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndpointKey<'a> {
    /// The Service.
    pub service: &'a str,
    /// The pod the endpoint stands for, if it names one.
    pub pod: Option<&'a str>,
    /// `host:port`, as scrapers take it.
    pub address: &'a str,
}

impl<'a> EndpointKey<'a> {
    /// The parts of `key`, if it is such a key.
    pub fn parse(key: &'a str) -> Option<EndpointKey<'a>> {
        let mut parts = key.split('/');
        let service = parts.next()?;
        let (pod, address) = match (parts.next()?, parts.next(), parts.next()) {
            (address, None, _) => (None, address),
            (pod, Some(address), None) => (Some(pod), address),
            _ => return None,
        };
        let ok = crate::protocol::names::is_dns_label(service)
            && pod.is_none_or(crate::protocol::names::is_dns_subdomain)
            && super::is_scrape_address(address);
        ok.then_some(EndpointKey {
            service,
            pod,
            address,
        })
    }
}

/// The key of `service`'s endpoint at `host` (an IP address or a name) and `port`.
pub fn endpoint_key(service: &str, pod: Option<&str>, host: &str, port: u16) -> String {
    let host = match host.parse::<std::net::Ipv6Addr>() {
        Ok(v6) => format!("[{v6}]"),
        Err(_) => host.to_owned(),
    };
    match pod {
        Some(pod) => format!("{service}/{pod}/{host}:{port}"),
        None => format!("{service}/{host}:{port}"),
    }
}

/// What expansion needs of one EndpointSlice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slice {
    /// Its `kubernetes.io/service-name` label.
    pub service: String,
    /// Its ports: (name, number); a port without a number stands for all ports and gives no
    /// target.
    pub ports: Vec<(Option<String>, Option<u16>)>,
    /// Its endpoints.
    pub endpoints: Vec<Endpoint>,
}

/// One endpoint of a [`Slice`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// Its first address (the API says they are fungible, and consumers may take the first).
    pub address: String,
    /// `conditions.ready`, absent counting as true.
    pub ready: bool,
    /// The pod it stands for (`targetRef`), if any.
    pub pod: Option<String>,
}

impl Slice {
    /// The number of `port` among this slice's ports, if it has it.
    fn port(&self, port: &PortRef) -> Option<u16> {
        self.ports.iter().find_map(|(name, number)| match port {
            PortRef::Name(n) if name.as_deref() == Some(n.as_str()) => *number,
            PortRef::Number(n) if *number == Some(*n) => *number,
            _ => None,
        })
    }
}

/// The targets of `sources` (each entry with its weight) over `slices`: one per ready
/// endpoint of a slice of the entry's Service that has the entry's port, keyed
/// [`endpoint_key`] (an endpoint listed in two slices, as happens while the controller moves
/// it, is one target). An error when a Service has endpoints but none of its slices has the
/// port: the entry names a port the Service does not have, and the caller keeps its last
/// good list. A Service with no slices, or with no endpoints, has no targets.
pub fn expand<'s>(
    sources: &[(&EndpointsSource, u32)],
    slices: impl IntoIterator<Item = &'s Slice> + Clone,
) -> Result<Vec<TargetSpec>, String> {
    let mut out: BTreeMap<String, TargetSpec> = BTreeMap::new();
    for (source, weight) in sources {
        let mut has_endpoints = false;
        let mut has_port = false;
        let mut ports: BTreeSet<String> = BTreeSet::new();
        for slice in slices.clone() {
            if slice.service != source.service {
                continue;
            }
            has_endpoints |= !slice.endpoints.is_empty();
            ports.extend(slice.ports.iter().map(|(name, number)| {
                match (name.as_deref().filter(|n| !n.is_empty()), number) {
                    (Some(n), Some(p)) => format!("{n} ({p})"),
                    (Some(n), None) => n.to_owned(),
                    (None, Some(p)) => p.to_string(),
                    (None, None) => "(all)".to_owned(),
                }
            }));
            let Some(port) = slice.port(&source.port) else {
                continue;
            };
            has_port |= !slice.endpoints.is_empty();
            for e in slice.endpoints.iter().filter(|e| e.ready) {
                let key = endpoint_key(&source.service, e.pod.as_deref(), &e.address, port);
                let Some(parsed) = EndpointKey::parse(&key) else {
                    // An address no scraper could take (not an IP, not a host name).
                    continue;
                };
                let scrape = source.scrape_target(&parsed);
                out.insert(
                    key.clone(),
                    TargetSpec {
                        key,
                        weight: *weight,
                        pin: None,
                        gnmic: None,
                        scrape: Some(Box::new(scrape)),
                    },
                );
            }
        }
        if has_endpoints && !has_port {
            return Err(format!(
                "endpoints of Service {:?}: its EndpointSlices have no port {} (they have: {})",
                source.service,
                source.port,
                ports.into_iter().collect::<Vec<_>>().join(", ")
            ));
        }
    }
    Ok(out.into_values().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(service: &str, port: PortRef) -> EndpointsSource {
        EndpointsSource {
            service: service.into(),
            port,
            scrape: ScrapeTemplate {
                job: Some("web".into()),
                labels: [("team".to_owned(), "a".to_owned())].into(),
                metrics_path: Some("/m".into()),
                ..Default::default()
            },
        }
    }

    fn ep(address: &str, ready: bool, pod: Option<&str>) -> Endpoint {
        Endpoint {
            address: address.into(),
            ready,
            pod: pod.map(str::to_owned),
        }
    }

    fn slice(service: &str, ports: &[(&str, u16)], endpoints: Vec<Endpoint>) -> Slice {
        Slice {
            service: service.into(),
            ports: ports
                .iter()
                .map(|(n, p)| ((!n.is_empty()).then(|| (*n).to_owned()), Some(*p)))
                .collect(),
            endpoints,
        }
    }

    #[test]
    fn keys_carry_the_service_the_pod_and_the_address() {
        assert_eq!(
            endpoint_key("web", Some("web-0"), "10.0.0.5", 9100),
            "web/web-0/10.0.0.5:9100"
        );
        assert_eq!(
            endpoint_key("web", None, "fd00::5", 9100),
            "web/[fd00::5]:9100"
        );
        assert_eq!(
            endpoint_key("web", Some("w"), "node-1.example", 80),
            "web/w/node-1.example:80"
        );
        let k = EndpointKey::parse("web/web-0/10.0.0.5:9100").unwrap();
        assert_eq!(
            (k.service, k.pod, k.address),
            ("web", Some("web-0"), "10.0.0.5:9100")
        );
        let k = EndpointKey::parse("web/[fd00::5]:9100").unwrap();
        assert_eq!(
            (k.service, k.pod, k.address),
            ("web", None, "[fd00::5]:9100")
        );
        for not in [
            "web",
            "t-01",
            "web/10.0.0.5",
            "web/a/b/10.0.0.5:1",
            "Web/10.0.0.5:1",
            "web/Pod_0/10.0.0.5:1",
            "web/fd00::5:9100",
            "/10.0.0.5:1",
        ] {
            assert_eq!(EndpointKey::parse(not), None, "{not}");
        }
    }

    #[test]
    fn an_agent_derives_the_scrape_target_from_the_key_and_the_entry() {
        let s = source("web", PortRef::Name("metrics".into()));
        let key = EndpointKey::parse("web/web-0/10.0.0.5:9100").unwrap();
        let t = s.scrape_target(&key);
        assert_eq!(t.address, "10.0.0.5:9100");
        assert_eq!(t.job.as_deref(), Some("web"));
        assert_eq!(t.metrics_path.as_deref(), Some("/m"));
        assert_eq!(
            t.labels,
            BTreeMap::from([
                ("pod".to_owned(), "web-0".to_owned()),
                ("service".to_owned(), "web".to_owned()),
                ("team".to_owned(), "a".to_owned()),
            ])
        );
    }

    #[test]
    fn ready_endpoints_of_the_services_slices_with_the_port_are_the_targets() {
        let metrics = source("web", PortRef::Name("metrics".into()));
        let by_number = source("db", PortRef::Number(5432));
        let slices = [
            slice(
                "web",
                &[("http", 8080), ("metrics", 9100)],
                vec![
                    ep("10.0.0.1", true, Some("web-a")),
                    ep("10.0.0.2", false, Some("web-b")),
                    ep("fd00::3", true, None),
                ],
            ),
            // The same endpoint in a second slice (the controller moving it): one target.
            slice(
                "web",
                &[("metrics", 9100)],
                vec![ep("10.0.0.1", true, Some("web-a"))],
            ),
            // Pods whose named port resolves elsewhere.
            slice(
                "web",
                &[("metrics", 9200)],
                vec![ep("10.0.0.4", true, Some("web-c"))],
            ),
            slice(
                "other",
                &[("metrics", 9100)],
                vec![ep("10.0.9.9", true, None)],
            ),
            slice(
                "db",
                &[("", 5432)],
                vec![ep("10.0.1.1", true, Some("db-0"))],
            ),
        ];
        let got = expand(&[(&metrics, 2), (&by_number, 1)], &slices).unwrap();
        let keys: Vec<(&str, u32)> = got.iter().map(|t| (t.key.as_str(), t.weight)).collect();
        assert_eq!(
            keys,
            [
                ("db/db-0/10.0.1.1:5432", 1),
                ("web/[fd00::3]:9100", 2),
                ("web/web-a/10.0.0.1:9100", 2),
                ("web/web-c/10.0.0.4:9200", 2),
            ]
        );
        let s = got[2].scrape.as_ref().unwrap();
        assert_eq!(s.address, "10.0.0.1:9100");
        assert_eq!(s.labels["pod"], "web-a");
        assert!(got.iter().all(|t| t.check().is_ok() && t.pin.is_none()));
    }

    #[test]
    fn a_port_the_service_does_not_have_is_an_error_but_no_endpoints_are_none() {
        let s = source("web", PortRef::Name("metrics".into()));
        let wrong = [slice(
            "web",
            &[("http", 8080)],
            vec![ep("10.0.0.1", true, None)],
        )];
        let e = expand(&[(&s, 1)], &wrong).unwrap_err();
        assert!(
            e.contains("Service \"web\"")
                && e.contains("no port \"metrics\"")
                && e.contains("http (8080)"),
            "{e}"
        );
        // No slices, or the controller's placeholder (no ports, no endpoints): no targets.
        assert_eq!(expand(&[(&s, 1)], &[]).unwrap(), []);
        let placeholder = [slice("web", &[], vec![])];
        assert_eq!(expand(&[(&s, 1)], &placeholder).unwrap(), []);
        // Every endpoint unready: no targets, and no error.
        let unready = [slice(
            "web",
            &[("metrics", 1)],
            vec![ep("10.0.0.1", false, None)],
        )];
        assert_eq!(expand(&[(&s, 1)], &unready).unwrap(), []);
    }

    #[test]
    fn port_names_are_kubernetes_ones() {
        for ok in ["metrics", "http-2", "a", "h2c"] {
            assert!(is_port_name(ok), "{ok}");
        }
        for bad in [
            "",
            "9100",
            "Metrics",
            "-m",
            "m-",
            "m--x",
            "a_b",
            "sixteen-letters1",
        ] {
            assert!(!is_port_name(bad), "{bad}");
        }
    }
}
