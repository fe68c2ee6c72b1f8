//! Authentication and authorisation of HTTP callers (being written).
