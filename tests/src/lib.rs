//! Shared helpers for the integration suites in `tests/tests/`.
//!
//! - [`bundle`]: busybox OCI bundles driven through vibe-shim and the real runc.
//! - [`harness`]: bounded command runs and their [`harness::Output`].
//! - [`env`]: the test environment written by `tests/env/up.sh`.
//! - [`docker`]: the docker CLI on the private test dockerd, [`docker::Container`].
//! - [`posture`]: the posture probe and [`posture::assert_confined`].
//! - [`policy`]: the test policy's numbers, [`policy::TestPolicy`].
//! - [`egress`]: the egress suites' daemon, /etc/hosts names and slot.
//! - [`netns`]: test hosts in network namespaces for the network suite.
//! - [`race`]: bind-source flippers for the race tests.
//! - [`probe`]: the static probe, copied for a container to bind.

pub mod bundle;
pub mod docker;
pub mod egress;
pub mod env;
pub mod harness;
pub mod netns;
pub mod policy;
pub mod posture;
pub mod probe;
pub mod race;
