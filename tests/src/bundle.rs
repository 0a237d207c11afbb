//! TODO: bundle helpers.
