//! Leasehold's Kubernetes side: talking to the API server about Leases. Owns the client-side
//! machinery (leader election today); the Lease contract itself lives in `protocol`, and nothing
//! here imports `http` or the engine.

pub mod election;
