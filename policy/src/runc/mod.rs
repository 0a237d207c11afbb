//! Decisions that follow runc's own reading of its command line: the
//! process runc builds for an exec without `--process`, the update flags
//! judged as the resources document runc builds from them, and the bundle
//! paths runc resolves against its bundle directory. The shim reads argv;
//! these turn what it read into documents and judged values.

pub mod bundle;
pub mod process;
pub mod update;
