//! The crate's ground floor, kept true: a module may name (`crate::...`)
//! only modules on its own floor or below. Low to high:
//!
//! 0. `decision`: the record of changes and the denial.
//! 1. `lang`: JSON helpers, Go's JSON reading, the pattern and host-name
//!    grammars, timestamps.
//! 2. `config`: the policy file; `egress::credential`: a credential entry
//!    bound to one container (its placeholder), which a rule's context holds.
//! 3. `host`: what the policy may ask the host (it names no config type).
//! 4. `engine::context`, `engine::profile`: what a rule sees, the hook
//!    markers, which policy file applies.
//! 5. `rules`.
//! 6. `engine` (the chains, the input check, the invariants oracle).
//! 7. `egress`, `authz`, `network`, `runc`, `notice`, `assurance`: decisions
//!    built on the above.
//!
//! Test code (everything after a file's first `#[cfg(test)]`) and comments
//! may reach any floor: tests drive the whole pipeline.

use std::path::{Path, PathBuf};

/// The floor of a source file, by its path under `src/`.
fn file_floor(rel: &str) -> Option<u8> {
    let top = rel.split('/').next()?.trim_end_matches(".rs");
    Some(match top {
        "decision" => 0,
        "lang" => 1,
        "config" => 2,
        "host" => 3,
        "engine" => match rel {
            "engine/context.rs" | "engine/profile.rs" => 4,
            _ => 6,
        },
        "rules" => 5,
        "egress" if rel == "egress/credential.rs" => 2,
        "egress" | "authz" | "network" | "runc" | "notice" | "assurance" => 7,
        _ => return None,
    })
}

/// The floor a `crate::` path names, by its first segment or two.
fn path_floor(path: &str) -> Option<u8> {
    let mut segments = path.split("::");
    let first = segments.next()?;
    Some(match first {
        "decision" | "Denial" | "Change" | "Record" | "Refusal" => 0,
        "lang" => 1,
        "config" | "Policy" | "ConfigError" => 2,
        "host" | "HostView" | "FakeHost" => 3,
        "CreateContext"
        | "NETWORK_HOOK_MARKER"
        | "TMPFS_MODES_HOOK_MARKER"
        | "KERNEL_TCP_HOOK_MARKER" => 4,
        "engine" => match segments.next() {
            Some("context" | "profile") => 4,
            _ => 6,
        },
        "rules" => 5,
        "enforce_create" | "enforce_process" | "enforce_update" | "Rewrite" => 6,
        "egress" => match segments.next() {
            Some("credential") => 2,
            _ => 7,
        },
        "authz" | "network" | "runc" | "notice" | "assurance" => 7,
        _ => return None,
    })
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The `crate::a::b` paths named in non-test, non-comment code; a
/// `super::x` in a module directory is read as that directory's `x`.
fn named_paths(rel: &str, text: &str) -> Vec<(usize, String)> {
    let dir = rel.rsplit_once('/').map(|(d, _)| d);
    let mut out = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let code = line.trim_start();
        if code.starts_with("#[cfg(test)]") {
            break;
        }
        if code.starts_with("//") {
            continue;
        }
        for (prefix, base) in [("crate::", None), ("super::", dir)] {
            if prefix == "super::" && base.is_none() {
                continue;
            }
            let mut rest = code;
            while let Some(at) = rest.find(prefix) {
                let before = rest[..at].chars().next_back();
                rest = &rest[at + prefix.len()..];
                if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                    continue;
                }
                let end = rest
                    .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                    .unwrap_or(rest.len());
                let named = rest[..end].trim_end_matches(':');
                let full = match base {
                    Some(d) => format!("{}::{named}", d.replace('/', "::")),
                    None => named.to_string(),
                };
                out.push((index + 1, full));
            }
        }
    }
    out
}

#[test]
fn no_module_imports_a_higher_floor() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut upward = Vec::new();
    let mut unplaced = Vec::new();
    for file in &files {
        let rel = file
            .strip_prefix(&src)
            .expect("under src")
            .to_string_lossy()
            .replace('\\', "/");
        if rel == "lib.rs" {
            continue;
        }
        let Some(floor) = file_floor(&rel) else {
            unplaced.push(rel);
            continue;
        };
        let text = std::fs::read_to_string(file).expect("read source");
        for (line, path) in named_paths(&rel, &text) {
            if let Some(to) = path_floor(&path) {
                if to > floor {
                    upward.push(format!(
                        "{rel}:{line}: crate::{path} (floor {floor} -> {to})"
                    ));
                }
            }
        }
    }
    assert!(
        unplaced.is_empty(),
        "modules with no floor (add them to tests/floors.rs): {unplaced:?}"
    );
    assert!(upward.is_empty(), "upward imports:\n{}", upward.join("\n"));
}

#[test]
fn the_check_sees_an_upward_import() {
    let found = named_paths(
        "lang/x.rs",
        "use crate::config::Policy;\n// crate::rules::x\n#[cfg(test)]\nuse crate::rules::y;\n",
    );
    assert_eq!(found, vec![(1, "config::Policy".to_string())]);
    assert_eq!(path_floor("config::Policy"), Some(2));
    assert_eq!(path_floor("engine::context::RuleContext"), Some(4));
    assert_eq!(path_floor("engine::RuleContext"), Some(6));
    assert!(file_floor("lang/x.rs") < path_floor("config::Policy"));
}
