//! A managed app's target definitions, read from the target list file the agent is given (the
//! ConfigMap key the control plane reads, mounted): read again whenever the file changes (its
//! modification time or size), and a list that does not parse keeps the last good one. Shared
//! by the managed kinds (`gnmic`, `scrape`), each taking its own part of an entry. A kind that
//! can serve the targets of an `endpoints` entry derives their definitions from their keys
//! ([`crate::targets::endpoints::EndpointKey`]): the agent watches nothing, the key and the
//! entry say it all.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use crate::targets::endpoints::EndpointKey;
use crate::targets::{EndpointsSource, TargetEntry, TargetSpec, parse_target_list};

/// The `endpoints` entries of a list, by Service.
type Sources = BTreeMap<String, EndpointsSource>;

/// How a kind derives a definition for the target `key` of an `endpoints` entry.
pub(super) type Derive<T> = fn(&EndpointsSource, &EndpointKey<'_>) -> T;

/// The definitions of one kind, `T`, by target key.
pub(super) struct Definitions<T> {
    path: PathBuf,
    /// What a definition is called in logs (`gnmic definitions`).
    what: &'static str,
    /// An entry's definition of this kind, if it has one.
    take: fn(TargetSpec) -> Option<T>,
    /// For the targets of `endpoints` entries, if this kind serves them.
    derive: Option<Derive<T>>,
    state: Mutex<State<T>>,
}

struct State<T> {
    stamp: Option<(SystemTime, u64)>,
    by_key: Arc<BTreeMap<String, T>>,
    /// The `endpoints` entries, by Service (at most one each: `targets::check_list`).
    sources: Arc<Sources>,
    error: Option<String>,
}

impl<T> Definitions<T> {
    /// The definitions `take` finds in the list at `path`, read at once: an unreadable file
    /// is an error (start-up stops with it).
    pub(super) fn read(
        path: &Path,
        what: &'static str,
        take: fn(TargetSpec) -> Option<T>,
    ) -> Result<Definitions<T>, String> {
        Self::read_deriving(path, what, take, None)
    }

    /// As [`Definitions::read`], with the definitions of the targets of `endpoints` entries
    /// derived by `derive` from their keys.
    pub(super) fn read_deriving(
        path: &Path,
        what: &'static str,
        take: fn(TargetSpec) -> Option<T>,
        derive: Option<Derive<T>>,
    ) -> Result<Definitions<T>, String> {
        let d = Definitions {
            path: path.to_owned(),
            what,
            take,
            derive,
            state: Mutex::new(State {
                stamp: None,
                by_key: Arc::new(BTreeMap::new()),
                sources: Arc::new(BTreeMap::new()),
                error: None,
            }),
        };
        d.current();
        let error = d.state.lock().unwrap().error.clone();
        match error {
            Some(e) => Err(e),
            None => Ok(d),
        }
    }

    /// The definitions now, read again first if the file changed since the last read (those
    /// of the targets listed by key; see [`Definitions::resolve`] for all).
    pub(super) fn current(&self) -> Arc<BTreeMap<String, T>> {
        self.refresh().0
    }

    /// The `endpoints` entries now, by Service, read again first if the file changed.
    pub(super) fn sources(&self) -> Arc<Sources> {
        self.refresh().1
    }

    /// The definitions of `keys` that have one: listed by key, or (kinds that derive them)
    /// derived from a key of an `endpoints` entry's target.
    pub(super) fn resolve<'k>(&self, keys: impl IntoIterator<Item = &'k str>) -> BTreeMap<String, T>
    where
        T: Clone,
    {
        let (by_key, sources) = self.refresh();
        keys.into_iter()
            .filter_map(|key| {
                let def = match by_key.get(key) {
                    Some(d) => d.clone(),
                    None => {
                        let derive = self.derive?;
                        let k = EndpointKey::parse(key)?;
                        derive(sources.get(k.service)?, &k)
                    }
                };
                Some((key.to_owned(), def))
            })
            .collect()
    }

    /// The definitions listed by key and the `endpoints` entries, the file read again first if
    /// it changed since the last read.
    fn refresh(&self) -> (Arc<BTreeMap<String, T>>, Arc<Sources>) {
        let stamp = std::fs::metadata(&self.path)
            .ok()
            .and_then(|m| Some((m.modified().ok()?, m.len())));
        let mut state = self.state.lock().unwrap();
        if stamp.is_some() && stamp == state.stamp {
            return (state.by_key.clone(), state.sources.clone());
        }
        state.stamp = stamp;
        let file = self.path.display();
        match self.parse() {
            Ok((by_key, sources)) => {
                if state.error.take().is_some() || !state.by_key.is_empty() {
                    tracing::info!(%file, targets = by_key.len(), services = sources.len(), what = self.what, "target definitions read");
                }
                state.by_key = Arc::new(by_key);
                state.sources = Arc::new(sources);
            }
            Err(error) => {
                tracing::error!(%file, %error, what = self.what, "target definitions unreadable; keeping the last good ones");
                state.error = Some(error);
            }
        }
        (state.by_key.clone(), state.sources.clone())
    }

    fn parse(&self) -> Result<(BTreeMap<String, T>, Sources), String> {
        let file = self.path.display();
        let text = std::fs::read_to_string(&self.path).map_err(|e| format!("{file}: {e}"))?;
        let list = parse_target_list(&text).map_err(|e| format!("{file}: {e}"))?;
        let mut by_key = BTreeMap::new();
        let mut sources = BTreeMap::new();
        for entry in list {
            match entry {
                TargetEntry::Target(t) => {
                    let key = t.key.clone();
                    if let Some(def) = (self.take)(t) {
                        by_key.insert(key, def);
                    }
                }
                TargetEntry::Endpoints(e) => {
                    sources.insert(e.endpoints.service.clone(), e.endpoints);
                }
            }
        }
        Ok((by_key, sources))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_that_stops_parsing_keeps_the_last_good_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.yaml");
        std::fs::write(&path, "- {key: a, weight: 2}\n- b\n").unwrap();
        let d = Definitions::read(&path, "weights", |t| Some(t.weight)).unwrap();
        assert_eq!(
            *d.current(),
            BTreeMap::from([("a".into(), 2), ("b".into(), 1)])
        );
        std::fs::write(&path, "- {key: a, weight: 0}\n").unwrap();
        assert_eq!(d.current().len(), 2, "kept");
        std::fs::write(&path, "- c\n").unwrap();
        assert_eq!(*d.current(), BTreeMap::from([("c".into(), 1)]));
        assert!(Definitions::read(&dir.path().join("none"), "w", |t| Some(t.weight)).is_err());
    }

    #[test]
    fn the_targets_of_an_endpoints_entry_are_derived_from_their_keys() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.yaml");
        std::fs::write(
            &path,
            "- {key: a, scrape: {address: 'h:1'}}\n\
             - {endpoints: {service: web, port: metrics, scrape: {job: web, labels: {team: x}}}}\n",
        )
        .unwrap();
        let d = Definitions::read_deriving(
            &path,
            "scrape",
            |t| t.scrape.map(|s| *s),
            Some(EndpointsSource::scrape_target),
        )
        .unwrap();
        let got = d.resolve([
            "a",
            "web/web-0/10.0.0.5:9100",
            "web/[fd00::5]:9100",
            // Another Service's, a key that is no endpoint's, and one not listed at all.
            "db/db-0/10.0.0.6:5432",
            "web",
            "b",
        ]);
        assert_eq!(
            got.keys().map(String::as_str).collect::<Vec<_>>(),
            ["a", "web/[fd00::5]:9100", "web/web-0/10.0.0.5:9100"]
        );
        let web0 = &got["web/web-0/10.0.0.5:9100"];
        assert_eq!(web0.address, "10.0.0.5:9100");
        assert_eq!(web0.job.as_deref(), Some("web"));
        assert_eq!(
            web0.labels
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>(),
            ["pod=web-0", "service=web", "team=x"]
        );
        assert_eq!(got["web/[fd00::5]:9100"].address, "[fd00::5]:9100");
        assert!(!got["web/[fd00::5]:9100"].labels.contains_key("pod"));
        assert_eq!(d.current().len(), 1, "only `a` is listed by key");
        assert_eq!(d.sources().keys().collect::<Vec<_>>(), ["web"]);
        // A kind that does not derive (gnmic) finds only what is listed.
        let plain = Definitions::read(&path, "scrape", |t| t.scrape.map(|s| *s)).unwrap();
        assert_eq!(plain.resolve(["a", "web/web-0/10.0.0.5:9100"]).len(), 1);
    }
}
