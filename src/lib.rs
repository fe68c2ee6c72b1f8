//! Leasehold: see and steer who owns what in Lease-coordinated Kubernetes clusters.
//!
//! Modules: `sim` (a Kubernetes API simulator for demos and tests), `cli` (the command line),
//! `telemetry` (logging).

pub mod cli;
pub mod sim;
pub mod telemetry;
