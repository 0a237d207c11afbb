//! Where a command line goes: judged, passed through, or refused, decided
//! from argv as runc will read it.

use std::ffi::OsStr;

use vibe_policy::Denial;

use super::checkpoint::CheckpointArgs;
use super::create::CreateArgs;
use super::exec::ExecArgs;
use super::start::StartArgs;
use super::update::UpdateArgs;
use super::{
    classify_verb, flag_bool, is_enforced, positionals, treatment, Invocation, Item, Treatment,
};

/// Where a command line goes once its argv is classified.
#[derive(Debug, PartialEq)]
pub enum Route {
    PassThrough,
    /// An enforced verb, its arguments read once.
    Enforce(Enforced),
}

/// An enforced verb's arguments as runc reads them.
#[derive(Debug, Clone, PartialEq)]
pub enum Enforced {
    /// `create`, `run` or `restore`.
    Create(CreateArgs),
    Exec(Box<ExecArgs>),
    Update(UpdateArgs),
    Start(StartArgs),
    Checkpoint(CheckpointArgs),
}

impl Enforced {
    /// `items` are `verb`'s arguments as [`classify_verb`] read them.
    pub fn from_items(verb: &str, items: Vec<Item>) -> Enforced {
        match verb {
            "exec" => Enforced::Exec(Box::new(ExecArgs::from_items(items))),
            "update" => Enforced::Update(UpdateArgs::from_items(items)),
            "start" => Enforced::Start(StartArgs::from_items(&items)),
            "checkpoint" => Enforced::Checkpoint(CheckpointArgs::from_items(items)),
            _ => Enforced::Create(CreateArgs::from_items(items)),
        }
    }

    /// The container id (the first operand).
    pub fn id(&self) -> &OsStr {
        match self {
            Enforced::Create(a) => &a.id,
            Enforced::Exec(a) => &a.id,
            Enforced::Update(a) => &a.id,
            Enforced::Start(a) => &a.id,
            Enforced::Checkpoint(a) => &a.id,
        }
    }
}

pub fn argv_denial(value: String, reason: String) -> Denial {
    Denial::new("argv", "argv", value, reason)
}

/// Classifies argv as runc will read it: enforced verbs are judged, verbs
/// that can neither start a process nor change its limits (and calls where
/// runc runs no verb: `--help`, `--version`, none) pass through, anything
/// else, or anything runc's parser could read another way, is refused.
pub fn check_argv(inv: &Invocation, verb: &str) -> Result<Route, Denial> {
    // The verb, not the whole argv: argv may carry secrets (`-e TOKEN=…`).
    let joined = || verb_lossy(inv);
    if let Some(e) = &inv.error {
        // runc 1.1-1.3 refuse this too; a later runc might read the flag
        // as taking a value and reach a verb this scan cannot see.
        let hides_verb = inv
            .runc_args
            .iter()
            .any(|a| a.to_str().is_some_and(is_enforced));
        return match hides_verb {
            false => Ok(Route::PassThrough),
            true => Err(argv_denial(
                "global flags".into(),
                format!("{e}; refused before an enforced verb"),
            )),
        };
    }
    if inv.criu && matches!(verb, "checkpoint" | "restore") {
        return Err(argv_denial(
            format!("--criu {verb}"),
            "--criu picks the binary runc 1.1 runs as root; not allowed".into(),
        ));
    }
    let pass_through = treatment(verb) == Some(Treatment::PassThrough);
    if inv.no_action || inv.verb_index.is_none() || pass_through {
        return Ok(Route::PassThrough);
    }
    if !is_enforced(verb) {
        return Err(argv_denial(
            verb_lossy(inv),
            "unknown verb: vibe-shim passes through only verbs that can neither start a process nor change its limits".into(),
        ));
    }
    let items = classify_verb(verb, inv.verb_args())
        .map_err(|e| argv_denial(joined(), format!("{verb}: {e}")))?;
    if flag_bool(&items, "help") == Some(true) {
        // runc prints the verb's help and runs nothing.
        return Ok(Route::PassThrough);
    }
    let operands = positionals(&items).len();
    let enforced = Enforced::from_items(verb, items);
    let has_process = matches!(&enforced, Enforced::Exec(a) if a.process.is_some());
    let wanted = match verb {
        "exec" if has_process => (1, usize::MAX),
        "exec" => (2, usize::MAX),
        _ => (1, 1),
    };
    if operands < wanted.0 || operands > wanted.1 {
        return Err(argv_denial(
            joined(),
            format!(
                "{verb}: expected a container id{} ({operands} operands given)",
                match verb {
                    "exec" if !has_process => " and a command",
                    _ => "",
                }
            ),
        ));
    }
    Ok(Route::Enforce(enforced))
}

fn verb_lossy(inv: &Invocation) -> String {
    inv.verb_index
        .and_then(|i| inv.runc_args.get(i))
        .map(|v| v.to_string_lossy().into_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;

    /// Where argv goes, without the arguments read.
    #[derive(Debug, PartialEq)]
    enum To {
        PassThrough,
        Enforce,
    }

    fn route(argv: &[&str]) -> Result<To, String> {
        let inv = super::super::scan_globals(argv.iter().map(OsString::from).collect()).unwrap();
        match check_argv(&inv, inv.verb()) {
            Ok(Route::PassThrough) => Ok(To::PassThrough),
            Ok(Route::Enforce(_)) => Ok(To::Enforce),
            Err(d) => Err(d.to_string()),
        }
    }

    #[test]
    fn verbs_are_routed_and_unclassifiable_argv_refused() {
        assert_eq!(route(&["--root", "/r", "state", "c"]), Ok(To::PassThrough));
        assert_eq!(route(&["--version"]), Ok(To::PassThrough));
        assert_eq!(route(&[]), Ok(To::PassThrough));
        assert_eq!(route(&["--help", "create", "c"]), Ok(To::PassThrough));
        assert_eq!(route(&["create", "--help", "c"]), Ok(To::PassThrough));
        assert_eq!(route(&["--", "create", "c"]), Ok(To::Enforce));
        assert_eq!(route(&["exec", "-p", "/f", "c"]), Ok(To::Enforce));
        assert_eq!(route(&["exec", "c", "sh"]), Ok(To::Enforce));
        // A future verb, or one runc runs no action for, is not passed blind.
        assert!(route(&["init"]).unwrap_err().contains("unknown verb"));
        assert!(route(&["--debug", "false", "create", "c"]).is_err());
        // An unknown global flag: harmless unless an enforced verb follows.
        assert_eq!(route(&["--future", "v", "state", "c"]), Ok(To::PassThrough));
        let err = route(&["--future", "v", "create", "c"]).unwrap_err();
        assert!(err.contains("future"), "{err}");
        // Operand counts as runc checks them.
        assert!(route(&["exec", "c"]).unwrap_err().contains("and a command"));
        assert!(route(&["create", "a", "b"]).is_err());
        assert!(route(&["update", "--pids-limit", "010", "c"]).is_err());
        assert!(route(&["--criu", "/x", "checkpoint", "c"]).is_err());
        // checkpoint makes runc write host paths: judged, not passed through.
        assert_eq!(route(&["checkpoint", "c"]), Ok(To::Enforce));
        assert!(route(&["checkpoint", "c", "d"]).is_err());
        assert_eq!(route(&["--criu", "/x", "kill", "c"]), Ok(To::PassThrough));
        // The refusal does not echo argv (an -e value may be a secret).
        let err = route(&["exec", "-e", "T=secret", "--nope", "c", "x"]).unwrap_err();
        assert!(!err.contains("secret"), "{err}");
    }
}
