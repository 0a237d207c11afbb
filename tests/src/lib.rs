//! TODO: shared helpers for the integration suites.
