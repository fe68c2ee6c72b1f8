//! A managed app's target definitions, read from the target list file the agent is given (the
//! ConfigMap key the control plane reads, mounted): read again whenever the file changes (its
//! modification time or size), and a list that does not parse keeps the last good one. Shared
//! by the managed kinds (`gnmic`, `scrape`), each taking its own part of an entry.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use crate::targets::{TargetSpec, parse_target_list};

/// The definitions of one kind, `T`, by target key.
pub(super) struct Definitions<T> {
    path: PathBuf,
    /// What a definition is called in logs (`gnmic definitions`).
    what: &'static str,
    /// An entry's definition of this kind, if it has one.
    take: fn(TargetSpec) -> Option<T>,
    state: Mutex<State<T>>,
}

struct State<T> {
    stamp: Option<(SystemTime, u64)>,
    by_key: Arc<BTreeMap<String, T>>,
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
        let d = Definitions {
            path: path.to_owned(),
            what,
            take,
            state: Mutex::new(State {
                stamp: None,
                by_key: Arc::new(BTreeMap::new()),
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

    /// The definitions now, read again first if the file changed since the last read.
    pub(super) fn current(&self) -> Arc<BTreeMap<String, T>> {
        let stamp = std::fs::metadata(&self.path)
            .ok()
            .and_then(|m| Some((m.modified().ok()?, m.len())));
        let mut state = self.state.lock().unwrap();
        if stamp.is_some() && stamp == state.stamp {
            return state.by_key.clone();
        }
        state.stamp = stamp;
        let file = self.path.display();
        match self.parse() {
            Ok(by_key) => {
                if state.error.take().is_some() || !state.by_key.is_empty() {
                    tracing::info!(%file, targets = by_key.len(), what = self.what, "target definitions read");
                }
                state.by_key = Arc::new(by_key);
            }
            Err(error) => {
                tracing::error!(%file, %error, what = self.what, "target definitions unreadable; keeping the last good ones");
                state.error = Some(error);
            }
        }
        state.by_key.clone()
    }

    fn parse(&self) -> Result<BTreeMap<String, T>, String> {
        let file = self.path.display();
        let text = std::fs::read_to_string(&self.path).map_err(|e| format!("{file}: {e}"))?;
        let list = parse_target_list(&text).map_err(|e| format!("{file}: {e}"))?;
        Ok(list
            .into_iter()
            .filter_map(|t| {
                let key = t.key.clone();
                Some((key, (self.take)(t)?))
            })
            .collect())
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
}
