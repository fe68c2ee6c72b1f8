use clap::Parser;

/// mimalloc: the simulator and control plane churn through many small JSON allocations, where
/// glibc malloc cost about a third of the CPU under the load harness (docs/benchmarks.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = leasehold::cli::Cli::parse();
    leasehold::telemetry::init();
    leasehold::cli::run(cli).await
}
