//! The faces of Leasehold: the REST API under `/api/v1` (with its OpenAPI document), the live
//! dashboard, the SSE stream, health and metrics, behind authentication and authorisation.
//! `http` reads the model and calls the engine; nothing below it imports `http`.

pub mod auth;
