//! Leasehold: see and steer who owns what in Lease-coordinated Kubernetes clusters.
//!
//! Flow: `config` (what to manage) → `k8s` (watchers, the pure index, Lease writes) →
//! `engine` (planner, operations, control-plane loops) → `store` (history in SQL); `protocol` is
//! the Lease contract members and control plane share, `agent` is the member side, `model` the
//! shared vocabulary. `sim` is a Kubernetes API simulator for demos and tests, `demo` the
//! one-command demo, `cli` the command line, `telemetry` logging, `metrics` the Prometheus
//! registry the engine records into and `http` serves.

pub mod agent;
pub mod cli;
pub mod config;
pub mod demo;
pub mod engine;
pub mod http;
pub mod k8s;
pub mod metrics;
pub mod model;
pub mod net;
pub mod protocol;
pub mod store;
pub mod telemetry;
