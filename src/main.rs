use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = leasehold::cli::Cli::parse();
    leasehold::telemetry::init();
    leasehold::cli::run(cli).await
}
