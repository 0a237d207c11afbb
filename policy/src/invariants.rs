//! TODO(stub): invariants every rewritten spec satisfies.
