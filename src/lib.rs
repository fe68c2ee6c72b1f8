//! Leasehold: see and steer who owns what in Lease-coordinated Kubernetes clusters.
//!
//! Modules: `sim` (a Kubernetes API simulator for demos and tests), `demo` (the one-command demo), `cli` (the command line),
//! `telemetry` (logging).

pub mod cli;
pub mod demo;
pub mod sim;
pub mod telemetry;
