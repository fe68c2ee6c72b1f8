//! Leasehold: see and steer who owns what in Lease-coordinated Kubernetes clusters.
//!
//! Flow: `config` (what to manage) → `k8s` (watchers, the pure index, Lease writes) →
//! `engine` (planner, operations, control-plane loops) → `store` (history in SQL) → `http`
//! (REST API, dashboard, event feed, auth). Beside them: `protocol`, the Lease contract members
//! and control plane share; `targets`, the target list (keys, weights, pins and a managed
//! app's definition of each target), read by both; `agent`, the member side; `model`, the shared vocabulary; `metrics`,
//! the Prometheus registry the engine records into and `http` serves; `ctl`, the REST API's
//! command-line client (`leasehold ctl`); `demo`, the one-command
//! demo on the Kubernetes API simulator (the `kube-sim` crate of this workspace); `cli`, the
//! command line; `telemetry`, logging.
//!
//! Dependencies point one way, from the top of this list to the bottom:
//!
//! | module | may use |
//! | --- | --- |
//! | `cli` | everything |
//! | `ctl` | `net` |
//! | `demo` | `agent`, `config`, `engine`, `http`, `model`, `net`, `store`, `targets` |
//! | `http` | `config`, `engine`, `k8s`, `metrics`, `model`, `net`, `protocol`, `store` |
//! | `engine` | `config`, `k8s`, `metrics`, `model`, `net`, `protocol`, `store` |
//! | `agent` | `k8s`, `model`, `net`, `protocol`, `targets` |
//! | `k8s` | `config`, `metrics`, `model`, `protocol` |
//! | `store`, `metrics` | `model` |
//! | `config` | `model`, `protocol`, `targets` |
//! | `targets` | `protocol` |
//! | `protocol` | `model` |
//! | `model`, `net`, `telemetry` | nothing |
//!
//! `tests/it/architecture.rs` fails on an import against this table or any cycle.

pub mod agent;
pub mod cli;
pub mod config;
pub mod ctl;
pub mod demo;
pub mod engine;
pub mod http;
pub mod k8s;
pub mod metrics;
pub mod model;
pub mod net;
pub mod protocol;
pub mod store;
pub mod targets;
pub mod telemetry;
