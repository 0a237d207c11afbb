//! TODO(stub): vibe-shim entry point.
fn main() {}
