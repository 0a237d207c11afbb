//! TODO(stub): network confinement.
