//! TODO: docker helpers.
