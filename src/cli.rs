//! The command line: one binary, one subcommand per role. Each subcommand parses its flags
//! and hands over to the library; nothing here holds logic of its own.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand};

use crate::sim::{self, SimOptions, Simulator};

/// Leasehold: see and steer who owns what in Lease-coordinated Kubernetes clusters.
#[derive(Debug, Parser)]
#[command(name = "leasehold", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// The roles the binary can play.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the demo on the built-in simulator (no cluster needed).
    Demo(DemoArgs),
    /// Run the Kubernetes API simulator (an in-memory kube-apiserver for demos and tests).
    Sim(SimArgs),
    /// Run the control plane for the clusters in a config file.
    Serve(ServeArgs),
}

/// Flags of `leasehold serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The configuration file (see docs/configuration.md).
    #[arg(long, env = "LEASEHOLD_CONFIG")]
    pub config: PathBuf,
    /// This replica's identity in the control-plane election (the pod name in Kubernetes).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
}

/// Flags of `leasehold demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Address of the simulated Kubernetes API.
    #[arg(long, default_value = "127.0.0.1:6443")]
    pub listen: SocketAddr,
    /// Member pods in the demo cluster.
    #[arg(long, default_value_t = 3)]
    pub members: usize,
    /// Targets (one Lease each).
    #[arg(long, default_value_t = 300)]
    pub targets: usize,
    /// Where to write the simulator's kubeconfig.
    #[arg(long, default_value = "leasehold-demo.kubeconfig")]
    pub kubeconfig_out: PathBuf,
}

/// Flags of `leasehold sim`.
#[derive(Debug, Args)]
pub struct SimArgs {
    /// Address to listen on (loopback by default; port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:6443", env = "LEASEHOLD_SIM_LISTEN")]
    pub listen: SocketAddr,
    /// Write a kubeconfig for the simulator here.
    #[arg(long)]
    pub kubeconfig_out: Option<PathBuf>,
    /// Run the fake kubelet: pods become Running/Ready, LoadBalancers get IPs, EndpointSlices
    /// follow pods.
    #[arg(long)]
    pub fake_kubelet: bool,
    /// Events kept for watch resumption and paginated lists.
    #[arg(long, default_value_t = sim::store::DEFAULT_HISTORY)]
    pub history: usize,
    /// Seconds between watch bookmarks.
    #[arg(long, default_value_t = 60)]
    pub bookmark_interval: u64,
    /// Refuse requests without a bearer token (by default they act as an admin, since kubectl
    /// sends no token over plain HTTP).
    #[arg(long)]
    pub no_anonymous: bool,
    /// A JSON file of extra users and rules (see docs/simulator.md); its tokens are never logged.
    #[arg(long)]
    pub auth_file: Option<PathBuf>,
}

/// Runs the parsed command.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Sim(args) => run_sim(args).await,
        Command::Serve(args) => run_serve(args).await,
        Command::Demo(a) => {
            crate::demo::run(crate::demo::DemoOptions {
                listen: a.listen,
                members: a.members,
                targets: a.targets,
                kubeconfig_out: a.kubeconfig_out,
            })
            .await
        }
    }
}

async fn run_serve(args: ServeArgs) -> anyhow::Result<()> {
    let config = crate::config::Config::load(&args.config)?;
    let store = crate::store::Store::connect(&config.database).await?;
    let client = kube::Client::try_default()
        .await
        .context("connecting to Kubernetes (in-cluster or KUBECONFIG)")?;
    let identity = args
        .identity
        .unwrap_or_else(|| format!("leasehold-{}", uuid::Uuid::new_v4().simple()));
    let engine = crate::engine::Engine::new(config, client, store, identity);
    engine
        .run(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
}

async fn run_sim(args: SimArgs) -> anyhow::Result<()> {
    let auth = match &args.auth_file {
        Some(p) => {
            let text =
                std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            serde_json::from_str(&text)
                .with_context(|| format!("{}: not a valid auth table", p.display()))?
        }
        None => Default::default(),
    };
    let opts = SimOptions {
        history: args.history,
        bookmark_interval: Duration::from_secs(args.bookmark_interval.max(1)),
        auth,
        anonymous: !args.no_anonymous,
        ..Default::default()
    };
    let mut simulator = Simulator::start(args.listen, opts).await?;
    if let Some(path) = &args.kubeconfig_out {
        std::fs::write(path, simulator.kubeconfig())
            .with_context(|| format!("writing {}", path.display()))?;
        println!("kubeconfig written to {}", path.display());
    }
    println!("Kubernetes API simulator at {}", simulator.url());
    if args.fake_kubelet {
        simulator.spawn_kubelet(Default::default()).await?;
    }
    simulator
        .run_until(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
}
