//! TODO: netns helpers.
