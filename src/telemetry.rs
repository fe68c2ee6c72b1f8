//! Logging set-up: `tracing` with an env filter (`RUST_LOG`, default `info`), pretty output on
//! a terminal and JSON lines otherwise (or when `LEASEHOLD_LOG_FORMAT=json`).

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber. Safe to call once per process.
pub fn init() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let json = std::env::var("LEASEHOLD_LOG_FORMAT")
        .map(|v| v == "json")
        .unwrap_or(!std::io::stderr().is_terminal());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}
