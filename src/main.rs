/// mimalloc: the simulator and control plane churn through many small JSON allocations, where
/// glibc malloc cost about a third of the CPU under the load harness (docs/benchmarks.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = leasehold::cli::Cli::from_env();
    let logs = leasehold::telemetry::init(cli.command.log_filter())?;
    leasehold::cli::run(cli, logs).await
}
