//! The lowest floor: the languages the policy reads and writes, with no
//! knowledge of the policy itself.
//!
//! - [`container_id`]: the container ids vibe-shim accepts, one rule for
//!   every state dir, record and table name.
//! - [`json`]: small helpers over `serde_json::Value` and JSON pointers.
//! - [`gojson`]: Go's `encoding/json` reading of a document, as runc sees it.
//! - [`rfc3339`]: the audit line's timestamps.
//! - [`pattern`]: the `[[hooks.allow]]` argument and env patterns.
//! - [`hosts`]: the host-name grammar of `[network] hosts`.
//! - [`text`]: text made fit for a one-line message, and mountinfo's escapes undone.
//! - [`passwd`]: an image's `/etc/passwd`, read for the home directories.

pub mod container_id;
pub mod gojson;
pub(crate) mod hosts;
pub mod json;
pub mod passwd;
pub(crate) mod pattern;
pub mod rfc3339;
pub mod text;
