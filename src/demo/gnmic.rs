//! The demo with real gnmic (`leasehold demo --gnmic PATH`): the `collector` cluster becomes a
//! managed gnmic cluster. One gnmic process plays the network — its gNMI server answers for
//! every device (`subscribe --watch-config` with a `gnmi-server`: Capabilities and Subscribe) —
//! and each collector member gets its own `gnmic collect` process, driven by its agent's
//! managed-gnmic hooks (`agent::gnmic`) exactly as in a pod. A member stopped or crashed takes
//! its gnmic with it, as its pod would. Every process is killed when this is dropped; the
//! reconciler tasks are owned here and aborted with their member.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;

use super::layout::COLLECTOR;
use super::members::MemberApps;
use crate::agent::gnmic::{Gnmic, GnmicSettings};
use crate::agent::{Hooks, NoHooks};

/// How often each agent reads its gnmic's state in the demo.
const POLL: Duration = Duration::from_millis(500);

/// A loopback address free a moment ago (the process binds it at once).
fn free_addr() -> anyhow::Result<SocketAddr> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

/// Starts `bin` with `args`, its output appended to `log`; killed when dropped.
fn spawn(bin: &Path, args: &[&str], log: &Path) -> anyhow::Result<Child> {
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("opening {}", log.display()))?;
    Command::new(bin)
        .args(args)
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))
}

/// The simulated network: one gnmic serving gNMI for every device at [`Network::addr`].
pub struct Network {
    _process: Child,
    /// Where every device's gNMI server answers.
    pub addr: SocketAddr,
}

impl Network {
    /// Starts it with gnmic `bin`, its files in `dir`.
    pub fn start(bin: &Path, dir: &Path) -> anyhow::Result<Network> {
        let addr = free_addr()?;
        let api = free_addr()?;
        let config = dir.join("gnmic-network.yaml");
        std::fs::write(
            &config,
            format!(
                "gnmi-server:\n  address: {addr}\n  skip-verify: true\nsubscriptions:\n  all:\n    paths: [\"/\"]\n"
            ),
        )?;
        let process = spawn(
            bin,
            &[
                "--config",
                config.to_str().context("a UTF-8 state directory")?,
                "subscribe",
                "--watch-config",
                "--api",
                &api.to_string(),
            ],
            &dir.join("gnmic-network.log"),
        )?;
        Ok(Network {
            _process: process,
            addr,
        })
    }
}

/// One collector member's gnmic and the task that drives it.
struct Collector {
    _process: Child,
    reconciler: JoinHandle<()>,
}

impl Drop for Collector {
    fn drop(&mut self) {
        self.reconciler.abort();
    }
}

/// The apps of the demo's members with gnmic: a `gnmic collect` per collector member, nothing
/// beside the `replicas` members.
pub struct GnmicApps {
    bin: PathBuf,
    dir: PathBuf,
    targets: PathBuf,
    running: Mutex<BTreeMap<String, Collector>>,
}

impl GnmicApps {
    /// gnmic `bin`, files in `dir`, the target list (with each target's gnmic definition) in
    /// `targets`.
    pub fn new(bin: &Path, dir: &Path, targets: &Path) -> GnmicApps {
        GnmicApps {
            bin: bin.to_owned(),
            dir: dir.to_owned(),
            targets: targets.to_owned(),
            running: Mutex::default(),
        }
    }

    /// The API of `member`'s gnmic, started now.
    fn start(&self, member: &str) -> anyhow::Result<(Collector, Gnmic)> {
        let api = free_addr()?;
        let config = self.dir.join(format!("gnmic-{member}.yaml"));
        std::fs::write(
            &config,
            format!(
                "api-server:\n  address: {api}\nsubscriptions:\n  all:\n    paths: [\"/\"]\n    mode: stream\n    stream-mode: sample\n    sample-interval: 10s\n"
            ),
        )?;
        let process = spawn(
            &self.bin,
            &[
                "--config",
                config.to_str().context("a UTF-8 state directory")?,
                "collect",
            ],
            &self.dir.join(format!("gnmic-{member}.log")),
        )?;
        let gnmic = Gnmic::new(GnmicSettings {
            api: format!("http://{api}"),
            targets_file: self.targets.clone(),
            secrets_dir: self.dir.join("secrets"),
            poll: POLL,
        })
        .map_err(|e| anyhow::anyhow!(e))?;
        tracing::info!(%member, %api, "demo: gnmic collect started");
        let reconciler = tokio::spawn(gnmic.clone().reconcile());
        Ok((
            Collector {
                _process: process,
                reconciler,
            },
            gnmic,
        ))
    }

    fn gone(&self, member: &str) {
        if self.running.lock().unwrap().remove(member).is_some() {
            tracing::info!(%member, "demo: gnmic collect stopped with its member");
        }
    }
}

impl MemberApps for GnmicApps {
    fn hooks(&self, cluster: &str, member: &str) -> Arc<dyn Hooks> {
        if cluster != COLLECTOR {
            return Arc::new(NoHooks);
        }
        match self.start(member) {
            Ok((collector, gnmic)) => {
                self.running
                    .lock()
                    .unwrap()
                    .insert(member.to_owned(), collector);
                Arc::new(gnmic)
            }
            Err(error) => {
                // The member runs without an app; its acquire hooks fail and say why.
                tracing::error!(%member, error = format!("{error:#}"), "demo: could not start gnmic");
                Arc::new(NoHooks)
            }
        }
    }

    fn killed(&self, _cluster: &str, member: &str) {
        self.gone(member);
    }

    fn stopped(&self, _cluster: &str, member: &str) {
        self.gone(member);
    }
}
