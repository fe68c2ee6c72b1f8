//! Managed gnmic: the agent drives a standalone `gnmic collect` in its pod over gnmic's REST API,
//! as a built-in hook kind ([`Gnmic`], `leasehold agent --gnmic-api`). gnmic collects exactly
//! what the member holds:
//!
//! - on acquire, the target's definition (from the target list, `targets::GnmicTarget`, with
//!   credentials read from the mounted Secret it names) is added, and the call returns once
//!   gnmic lists the target;
//! - on release or hand-over, the target is deleted, and the call returns only once gnmic no
//!   longer lists it — so the Lease is handed over after the old gnmic stopped. This kind
//!   [confirms its stops](crate::agent::Hooks::confirms_stop): if gnmic cannot be told, the
//!   member keeps the target (and asks again) rather than hand over while it may still collect;
//! - on a lost authority, every target is deleted at once, and `GET /app` on the agent's
//!   `--authority-listen` answers 503 while gnmic might still collect something the member no
//!   longer holds (point the gnmic container's liveness probe at it: a restarted gnmic forgets
//!   every target).
//!
//! One task, [`Gnmic::reconcile`], is the only one that talks to gnmic. Hook calls only change
//! what is wanted — per target, the fencing generation of the hold — and wait until gnmic's
//! own list agrees. A call that arrives late can therefore never undo a newer decision: a
//! release of generation `g` does nothing once generation `g' > g` is wanted, an acquire of `g`
//! does nothing once `g` was released. The reconciler follows gnmic's state (a poll of
//! `GET /api/v1/targets`): it re-adds what a restarted gnmic forgot, restarts targets whose
//! first start failed (disable, enable, with backoff: gnmic never retries them), removes what
//! gnmic runs but the member does not hold, and replaces a target whose definition changed.

mod api;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt as _;
use futures::future::BoxFuture;
use serde::Serialize;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

pub use self::api::{ApiError, GnmicApi, Reported, ReportedState};
use super::definitions::Definitions;
use super::hooks::{Assignment, Hooks};
use crate::targets::GnmicTarget;

/// How often gnmic's state is read when nothing changes.
pub const DEFAULT_POLL: Duration = Duration::from_millis(500);
/// Where the Secrets that targets name are mounted: `<dir>/<secret>/<key>`.
pub const DEFAULT_SECRETS_DIR: &str = "/etc/leasehold/secrets";
/// A target added but not yet listed by gnmic is added again after this long (gnmic applies
/// changes one at a time; an unanswering device holds the others for ~20 s).
const REPOST_AFTER: Duration = Duration::from_secs(5);
/// A failed target is restarted after this long, doubling up to [`RECOVER_MAX`].
const RECOVER_FIRST: Duration = Duration::from_secs(1);
const RECOVER_MAX: Duration = Duration::from_secs(60);
/// After a pass that changed something, gnmic is read again this soon (it removes a target
/// within ~35 ms).
const SETTLE: Duration = Duration::from_millis(20);
/// How long gnmic may keep collecting a target the member does not hold before `GET /app`
/// fails (a delete takes ~35 ms; an unreachable API, as long as it stays so).
const STRAY_GRACE: Duration = Duration::from_secs(2);

/// How long gnmic may take to answer at first before the agent says it does not.
const STARTUP: Duration = Duration::from_secs(10);

/// Managed mode's settings.
#[derive(Debug, Clone)]
pub struct GnmicSettings {
    /// gnmic's API (`http://127.0.0.1:7890`): bind gnmic's `api-server` to loopback, it has no
    /// authentication.
    pub api: String,
    /// The target list with the definitions (the ConfigMap key the control plane reads,
    /// mounted as a file); read again when it changes.
    pub targets_file: PathBuf,
    /// Where the Secrets named by `credentials.secret` are mounted.
    pub secrets_dir: PathBuf,
    /// How often gnmic's state is read.
    pub poll: Duration,
}

/// What gnmic was last seen doing, as the reconciler publishes it.
#[derive(Debug, Clone, Default)]
pub struct Seen {
    /// The last read of gnmic's list succeeded.
    pub reachable: bool,
    /// Every target gnmic lists, with its state.
    pub targets: BTreeMap<String, ReportedState>,
    /// The `epoch` of what was wanted when that list was read.
    pub epoch: u64,
    /// A target gnmic listed though the member did not hold it, or an unreachable gnmic while
    /// some target had to stop: since when (cleared once gnmic is seen with nothing stray).
    pub stray_since: Option<Instant>,
    /// Per wanted target, why it cannot be given to gnmic (no definition, an unreadable Secret,
    /// gnmic refused it).
    pub problems: BTreeMap<String, String>,
}

/// One target of this member as `GET /app` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct TargetReport {
    /// The target's key.
    pub target: String,
    /// The generation of the member's hold.
    pub generation: u64,
    /// gnmic's state (`running`, `failed`, …; `absent` when gnmic does not list it).
    pub state: String,
    /// gRPC connectivity as gnmic reports it.
    pub connection: String,
    /// Really collecting: `running` with a `READY` connection.
    pub collecting: bool,
    /// Why not, when known (gnmic's failed reason, or ours).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

/// The answer of `GET /app`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct AppReport {
    /// gnmic collects nothing the member does not hold (the liveness probe's answer).
    pub healthy: bool,
    /// gnmic's API answered the last read.
    pub reachable: bool,
    /// How many held targets gnmic really collects.
    pub collecting: usize,
    /// Every held target.
    pub targets: Vec<TargetReport>,
}

#[derive(Debug, Default)]
struct Wanted {
    /// Target → generation of the hold gnmic must collect for.
    want: BTreeMap<String, u64>,
    /// Target → the newest generation released (a later acquire of it is stale).
    released: BTreeMap<String, u64>,
    /// Bumped at every change of `want`.
    epoch: u64,
}

struct Inner {
    api: GnmicApi,
    settings: GnmicSettings,
    wanted: Mutex<Wanted>,
    /// The definitions in `targets_file`.
    defs: Definitions<GnmicTarget>,
    kick: Notify,
    seen: watch::Sender<Seen>,
}

/// Managed gnmic as the member's hooks. Run [`Gnmic::reconcile`] beside the agent.
#[derive(Clone)]
pub struct Gnmic {
    inner: Arc<Inner>,
}

impl Gnmic {
    /// Managed mode with `settings`; the target list is read at once (an unreadable file is
    /// an error: start-up stops with it).
    pub fn new(settings: GnmicSettings) -> Result<Gnmic, String> {
        let defs = Definitions::read(&settings.targets_file, "gnmic", |t| t.gnmic.map(|g| *g))?;
        let inner = Inner {
            api: GnmicApi::new(&settings.api),
            settings,
            wanted: Mutex::default(),
            defs,
            kick: Notify::new(),
            seen: watch::Sender::new(Seen::default()),
        };
        Ok(Gnmic {
            inner: Arc::new(inner),
        })
    }

    /// What gnmic was last seen doing.
    pub fn seen(&self) -> watch::Receiver<Seen> {
        self.inner.seen.subscribe()
    }

    /// The report of `GET /app`.
    pub fn report(&self) -> AppReport {
        let want = self.inner.wanted.lock().unwrap().want.clone();
        let seen = self.inner.seen.borrow().clone();
        report(&want, &seen, Instant::now())
    }

    fn definition(&self, target: &str) -> Option<GnmicTarget> {
        self.inner.defs.current().get(target).cloned()
    }

    /// Changes what is wanted by `f` (which says whether it changed anything) and returns the
    /// epoch to wait for.
    fn change(&self, f: impl FnOnce(&mut Wanted) -> bool) -> Option<u64> {
        let mut w = self.inner.wanted.lock().unwrap();
        if !f(&mut w) {
            return None;
        }
        w.epoch += 1;
        let epoch = w.epoch;
        drop(w);
        self.inner.kick.notify_one();
        Some(epoch)
    }

    /// Waits until gnmic's list, read with `epoch` or later wanted, satisfies `done`.
    async fn until(&self, epoch: u64, done: impl Fn(&Seen) -> bool) {
        let mut rx = self.inner.seen.subscribe();
        let _ = rx.wait_for(|s| s.epoch >= epoch && done(s)).await;
    }

    async fn acquire(&self, work: Assignment) -> Result<(), String> {
        if self.definition(&work.target).is_none() {
            return Err(format!(
                "no gnmic definition for target {:?} in {}",
                work.target,
                self.inner.settings.targets_file.display()
            ));
        }
        let g = work.generation;
        let epoch = self.change(|w| {
            if w.released.get(&work.target).is_some_and(|r| *r >= g)
                || w.want.get(&work.target).is_some_and(|h| *h >= g)
            {
                return false;
            }
            w.want.insert(work.target.clone(), g);
            true
        });
        let Some(epoch) = epoch else {
            return Ok(());
        };
        self.until(epoch, |s| {
            s.targets.contains_key(&work.target) || s.problems.contains_key(&work.target)
        })
        .await;
        match self.inner.seen.borrow().problems.get(&work.target) {
            Some(p) => Err(p.clone()),
            None => Ok(()),
        }
    }

    async fn release(&self, work: Assignment) -> Result<(), String> {
        let g = work.generation;
        let mut newer = false;
        let epoch = self.change(|w| {
            newer = w.want.get(&work.target).is_some_and(|h| *h > g);
            let r = w.released.entry(work.target.clone()).or_insert(g);
            *r = (*r).max(g);
            !newer && w.want.remove(&work.target).is_some()
        });
        if newer {
            // A late call: the member holds the target again, under a newer generation.
            return Ok(());
        }
        let epoch = epoch.unwrap_or_else(|| self.inner.wanted.lock().unwrap().epoch);
        self.until(epoch, |s| {
            s.reachable && !s.targets.contains_key(&work.target)
        })
        .await;
        Ok(())
    }

    /// Keeps gnmic collecting exactly what is wanted, until dropped. The only task that talks to
    /// gnmic.
    pub async fn reconcile(self) {
        let mut posted: BTreeMap<String, Posted> = BTreeMap::new();
        let mut recovering: BTreeMap<String, (Instant, Duration)> = BTreeMap::new();
        let mut secrets = SecretCache::default();
        let mut was_reachable = None;
        let started = Instant::now();
        loop {
            let (want, epoch) = {
                let w = self.inner.wanted.lock().unwrap();
                (w.want.clone(), w.epoch)
            };
            let pass = self
                .pass(&want, epoch, &mut posted, &mut recovering, &mut secrets)
                .await;
            let reachable = pass.is_some();
            // gnmic starting beside the agent is not news: say it does not answer only once
            // it did, or once it has had STARTUP to come up.
            let starting = was_reachable.is_none() && started.elapsed() < STARTUP;
            if was_reachable != Some(reachable) && (reachable || !starting) {
                match reachable {
                    true => tracing::info!(api = %self.inner.settings.api, "gnmic answers"),
                    false => {
                        tracing::warn!(api = %self.inner.settings.api, "gnmic does not answer")
                    }
                }
                was_reachable = Some(reachable);
            }
            let wait = match pass {
                Some(true) => SETTLE,
                _ => self.inner.settings.poll,
            };
            tokio::select! {
                () = self.inner.kick.notified() => {}
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// One pass: read gnmic's list, act on the difference, publish what was seen. `None`:
    /// gnmic did not answer; `Some(changed)` otherwise.
    async fn pass(
        &self,
        want: &BTreeMap<String, u64>,
        epoch: u64,
        posted: &mut BTreeMap<String, Posted>,
        recovering: &mut BTreeMap<String, (Instant, Duration)>,
        secrets: &mut SecretCache,
    ) -> Option<bool> {
        let api = &self.inner.api;
        let now = Instant::now();
        let listed = match api.list().await {
            Ok(list) => list,
            Err(e) => {
                tracing::debug!(error = %e, "reading gnmic's targets");
                // gnmic may be restarting: whatever it does not list when it answers again, it
                // forgot — including a target given just before and not listed yet.
                for p in posted.values_mut() {
                    p.listed = true;
                }
                self.inner.seen.send_modify(|s| {
                    s.reachable = false;
                    s.epoch = epoch;
                    // Whatever gnmic runs now is unknown: if the member let something go
                    // that gnmic had, it may still be collecting it.
                    let stray = s.targets.keys().any(|t| !want.contains_key(t));
                    if stray {
                        s.stray_since.get_or_insert(now);
                    }
                });
                return None;
            }
        };
        let listed: BTreeMap<String, ReportedState> =
            listed.into_iter().map(|r| (r.name, r.state)).collect();
        let defs = self.inner.defs.current();
        let mut problems = BTreeMap::new();
        let mut changed = false;
        // Stop first: what the member no longer holds.
        for name in listed.keys().filter(|t| !want.contains_key(*t)) {
            posted.remove(name);
            recovering.remove(name);
            match api.delete(name).await {
                Ok(()) => changed = true,
                Err(e) => {
                    tracing::warn!(target = %name, error = %e, "could not remove a target from gnmic")
                }
            }
        }
        posted.retain(|t, _| want.contains_key(t));
        recovering.retain(|t, _| want.contains_key(t));
        // A target gnmic listed and no longer does: it restarted between two reads, and forgot
        // as well what it was given and had not listed yet.
        let restarted = posted
            .iter()
            .any(|(t, p)| p.listed && !listed.contains_key(t));
        if restarted {
            for p in posted.values_mut() {
                p.listed = true;
            }
        }
        for target in want.keys() {
            let Some(def) = defs.get(target) else {
                problems.insert(
                    target.clone(),
                    format!("no gnmic definition for {target:?}"),
                );
                continue;
            };
            let body = match body(target, def, &self.inner.settings.secrets_dir, secrets) {
                Ok(b) => b,
                Err(e) => {
                    problems.insert(target.clone(), e);
                    continue;
                }
            };
            let print = fingerprint(&body);
            let state = listed.get(target);
            let p = posted.get(target);
            let post = should_post(state.is_some(), p, print, now);
            if let Some(p) = posted.get_mut(target)
                && state.is_some()
            {
                p.listed = true;
            }
            if post {
                tracing::debug!(target = %target, listed = state.is_some(), "giving gnmic the target");
                match api.upsert(&body).await {
                    Ok(()) => {
                        changed = true;
                        posted.insert(
                            target.clone(),
                            Posted {
                                print,
                                at: now,
                                listed: false,
                            },
                        );
                    }
                    Err(e) => {
                        problems.insert(target.clone(), e.to_string());
                    }
                }
                continue;
            }
            if state.is_some_and(|s| s.state == "failed") {
                let (at, delay) = *recovering
                    .entry(target.clone())
                    .or_insert((now + RECOVER_FIRST, RECOVER_FIRST));
                if now >= at {
                    tracing::info!(target = %target, "gnmic failed to start the target; restarting it");
                    let restarted = async {
                        api.set_state(target, "disabled").await?;
                        api.set_state(target, "enabled").await
                    };
                    if let Err(e) = restarted.await {
                        tracing::warn!(target = %target, error = %e, "could not restart the target in gnmic");
                    }
                    let next = (delay * 2).min(RECOVER_MAX);
                    recovering.insert(target.clone(), (now + next, next));
                    changed = true;
                }
            } else if state.is_some_and(ReportedState::collecting) {
                recovering.remove(target);
            }
        }
        let stray = listed.keys().any(|t| !want.contains_key(t));
        self.inner.seen.send_modify(|s| {
            s.reachable = true;
            s.targets = listed;
            s.epoch = epoch;
            s.problems = problems;
            if stray {
                s.stray_since.get_or_insert(now);
            } else {
                s.stray_since = None;
            }
        });
        Some(changed)
    }
}

impl Hooks for Gnmic {
    fn on_acquire(&self, work: &Assignment) -> BoxFuture<'_, Result<(), String>> {
        self.acquire(work.clone()).boxed()
    }
    fn on_release(&self, work: &Assignment) -> BoxFuture<'_, Result<(), String>> {
        self.release(work.clone()).boxed()
    }
    fn confirms_stop(&self) -> bool {
        true
    }
    fn work(&self) -> Option<crate::protocol::AppWork> {
        let r = self.report();
        let why: Vec<String> = r
            .targets
            .iter()
            .map(|t| match &t.problem {
                Some(p) => format!("gnmic: {}: {p}", t.state),
                None if t.connection.is_empty() => format!("gnmic: {}", t.state),
                None => format!("gnmic: {}, {}", t.state, t.connection),
            })
            .collect();
        Some(crate::protocol::AppWork::of(
            "gnmic",
            r.reachable,
            r.targets
                .iter()
                .zip(&why)
                .map(|(t, why)| (t.target.as_str(), t.collecting, Some(why.as_str()))),
        ))
    }
}

/// What was last given to gnmic for a target.
struct Posted {
    /// The body's fingerprint (a changed definition or Secret is given again).
    print: u64,
    at: Instant,
    /// gnmic has listed it since, or may have restarted since (it did not answer, or forgot
    /// another target): if it does not list it, it forgot it.
    listed: bool,
}

/// Whether to give gnmic a wanted target (again): `listed` is whether gnmic lists it now,
/// `posted` what was last given, `print` the fingerprint of the body to give.
fn should_post(listed: bool, posted: Option<&Posted>, print: u64, now: Instant) -> bool {
    match (listed, posted) {
        // Never given, or given another definition.
        (_, None) => true,
        (_, Some(p)) if p.print != print => true,
        // gnmic forgot it (restarted): at once.
        (false, Some(p)) if p.listed => true,
        // Not listed yet: gnmic may still be applying it (one change at a time).
        (false, Some(p)) => now.duration_since(p.at) >= REPOST_AFTER,
        (true, Some(_)) => false,
    }
}

/// `GET /app`: [`AppReport`], 200 while gnmic collects nothing the member does not hold, 503
/// otherwise (the gnmic container's liveness probe).
pub fn router(gnmic: Gnmic) -> axum::Router {
    axum::Router::new()
        .route(
            "/app",
            axum::routing::get(
                |axum::extract::State(g): axum::extract::State<Gnmic>| async move {
                    let report = g.report();
                    let status = if report.healthy {
                        http::StatusCode::OK
                    } else {
                        http::StatusCode::SERVICE_UNAVAILABLE
                    };
                    (status, axum::Json(report))
                },
            ),
        )
        .with_state(gnmic)
}

/// The report for `want` from `seen` at `now`.
fn report(want: &BTreeMap<String, u64>, seen: &Seen, now: Instant) -> AppReport {
    let targets: Vec<TargetReport> = want
        .iter()
        .map(|(target, generation)| {
            let state = seen.targets.get(target);
            let problem = seen.problems.get(target).cloned().or_else(|| {
                state
                    .map(|s| s.failed_reason.clone())
                    .filter(|r| !r.is_empty())
            });
            TargetReport {
                target: target.clone(),
                generation: *generation,
                state: state.map_or("absent".into(), |s| s.state.clone()),
                connection: state.map_or(String::new(), |s| s.connection_state.clone()),
                collecting: state.is_some_and(ReportedState::collecting),
                problem,
            }
        })
        .collect();
    AppReport {
        healthy: seen
            .stray_since
            .is_none_or(|since| now.duration_since(since) < STRAY_GRACE),
        reachable: seen.reachable,
        collecting: targets.iter().filter(|t| t.collecting).count(),
        targets,
    }
}

/// Secrets read from their mount, each again at most every [`SECRET_REREAD`].
#[derive(Default)]
struct SecretCache {
    read: BTreeMap<String, (Instant, Result<SecretKeys, String>)>,
}

const SECRET_REREAD: Duration = Duration::from_secs(30);

/// A Secret's keys as managed mode reads them (`username`, `password`, `token`).
type SecretKeys = BTreeMap<&'static str, String>;

impl SecretCache {
    /// The `username`, `password` and `token` keys of the Secret mounted at `dir/name`.
    fn get(&mut self, dir: &Path, name: &str) -> Result<SecretKeys, String> {
        let now = Instant::now();
        if let Some((at, v)) = self.read.get(name)
            && now.duration_since(*at) < SECRET_REREAD
        {
            return v.clone();
        }
        let base = dir.join(name);
        let mut keys = BTreeMap::new();
        for key in ["username", "password", "token"] {
            match std::fs::read_to_string(base.join(key)) {
                Ok(v) => {
                    keys.insert(key, v.trim_end_matches(['\n', '\r']).to_owned());
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    let v = Err(format!(
                        "Secret {name:?} (mounted at {}): {e}",
                        base.display()
                    ));
                    self.read.insert(name.to_owned(), (now, v.clone()));
                    return v;
                }
            }
        }
        let v = if keys.is_empty() {
            Err(format!(
                "Secret {name:?}: no username, password or token at {}",
                base.display()
            ))
        } else {
            Ok(keys)
        };
        self.read.insert(name.to_owned(), (now, v.clone()));
        v
    }
}

/// The body of `POST /api/v1/config/targets` for `target`: its definition, gnmic's default
/// timeout where none is given, and its credentials.
fn body(
    target: &str,
    def: &GnmicTarget,
    secrets_dir: &Path,
    secrets: &mut SecretCache,
) -> Result<serde_json::Value, String> {
    let mut v = serde_json::to_value(def).map_err(|e| e.to_string())?;
    let obj = v.as_object_mut().ok_or("a definition is an object")?;
    obj.remove("credentials");
    obj.insert("name".into(), target.into());
    obj.entry("timeout")
        .or_insert_with(|| GnmicTarget::DEFAULT_TIMEOUT.into());
    if let Some(c) = &def.credentials {
        for (k, v) in secrets.get(secrets_dir, &c.secret)? {
            obj.insert(k.into(), v.into());
        }
    }
    Ok(v)
}

/// A fingerprint of a body (not a secret hash: it never leaves the process).
fn fingerprint(body: &serde_json::Value) -> u64 {
    use std::hash::{Hash as _, Hasher as _};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    body.to_string().hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_target_is_given_again_at_once_when_gnmic_forgot_it_and_late_when_it_may_be_applying_it() {
        let now = Instant::now();
        let given = |listed, ago| Posted {
            print: 7,
            at: now - ago,
            listed,
        };
        let just = Duration::from_millis(20);
        // Never given, or another definition: now.
        assert!(should_post(false, None, 7, now));
        assert!(should_post(true, None, 7, now));
        assert!(should_post(true, Some(&given(true, just)), 8, now));
        // Listed with this definition: nothing to do.
        assert!(!should_post(true, Some(&given(true, just)), 7, now));
        // Given, not listed yet: gnmic may be applying it; again only after REPOST_AFTER.
        assert!(!should_post(false, Some(&given(false, just)), 7, now));
        assert!(should_post(
            false,
            Some(&given(false, REPOST_AFTER)),
            7,
            now
        ));
        // Listed once (or gnmic did not answer since it was given) and gone: forgotten, now.
        assert!(should_post(false, Some(&given(true, just)), 7, now));
    }

    #[test]
    fn the_body_is_the_definition_with_gnmics_missing_defaults_and_the_secret() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("creds")).unwrap();
        std::fs::write(dir.path().join("creds/username"), "admin\n").unwrap();
        std::fs::write(dir.path().join("creds/password"), "s3cret").unwrap();
        let mut def = GnmicTarget::at("10.0.0.1:57400");
        def.insecure = Some(true);
        let mut secrets = SecretCache::default();
        let b = body("spine-1", &def, dir.path(), &mut secrets).unwrap();
        assert_eq!(
            b,
            serde_json::json!({"name": "spine-1", "address": "10.0.0.1:57400", "insecure": true, "timeout": "10s"})
        );
        def.timeout = Some("3s".into());
        def.credentials = Some(crate::targets::Credentials {
            secret: "creds".into(),
        });
        let b = body("spine-1", &def, dir.path(), &mut secrets).unwrap();
        assert_eq!(b["timeout"], "3s");
        assert_eq!(b["username"], "admin");
        assert_eq!(b["password"], "s3cret");
        assert!(b.get("credentials").is_none());
        def.credentials = Some(crate::targets::Credentials {
            secret: "missing".into(),
        });
        let e = body("spine-1", &def, dir.path(), &mut secrets).unwrap_err();
        assert!(e.contains("\"missing\""), "{e}");
    }

    #[test]
    fn the_report_says_per_held_target_whether_gnmic_really_collects_it() {
        let state = |s: &str, c: &str, why: &str| ReportedState {
            state: s.into(),
            connection_state: c.into(),
            failed_reason: why.into(),
        };
        let want = BTreeMap::from([
            ("a".to_owned(), 3),
            ("b".to_owned(), 1),
            ("c".to_owned(), 2),
        ]);
        let now = Instant::now();
        let mut seen = Seen {
            reachable: true,
            targets: BTreeMap::from([
                ("a".to_owned(), state("running", "READY", "")),
                (
                    "b".to_owned(),
                    state("failed", "TRANSIENT_FAILURE", "refused"),
                ),
            ]),
            ..Seen::default()
        };
        let r = report(&want, &seen, now);
        assert!(r.healthy && r.reachable);
        assert_eq!(r.collecting, 1);
        assert_eq!(r.targets[0].generation, 3);
        assert_eq!(r.targets[1].problem.as_deref(), Some("refused"));
        assert_eq!(r.targets[2].state, "absent");
        // Something stray for longer than the grace: unhealthy (the liveness probe fails).
        seen.stray_since = Some(now - STRAY_GRACE);
        assert!(!report(&want, &seen, now).healthy);
        seen.stray_since = Some(now - STRAY_GRACE / 2);
        assert!(report(&want, &seen, now).healthy);
    }
}
