//! Shared helpers for the integration suites in `tests/tests/`.
//!
//! - [`bundle`]: busybox OCI bundles driven through vibe-shim and the real runc.
//! - [`docker`]: the private test dockerd started by `tests/env/up.sh`.
//! - [`netns`]: test hosts in network namespaces for the network suite.

pub mod bundle;
pub mod docker;
pub mod netns;
pub mod race;
