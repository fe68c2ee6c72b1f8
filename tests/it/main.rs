//! The product's integration tests, linked once: one module per area. Each area runs against
//! the simulator by default and against a real kube-apiserver on the real tier
//! (`scripts/test-real.sh`, which gives each area a fresh control plane), but `statefulsets`
//! and `helm_install`, which need a whole cluster (real controllers and kwok) and say they
//! skipped elsewhere; `scripts/test.sh`
//! runs the areas one after another, as the heavy ones (agents renewing hundreds of Leases, the
//! whole demo, Chromium) starve each other side by side on a 2-core machine.

mod common;

mod agent;
mod api;
mod architecture;
mod backup;
mod browser;
mod ctl;
mod demo;
mod deploy;
mod engine;
mod faults;
mod gnmic_compare;
mod helm_install;
mod idempotency;
mod managed_gnmic;
mod managed_scrape;
mod metrics;
mod observed_gnmic;
mod overlap;
mod pressure;
mod scrape_acceptance;
mod scrape_endpoints;
mod scrape_otel;
mod shared_watch;
mod statefulsets;
mod tls;
mod ui;
