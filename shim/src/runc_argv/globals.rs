//! runc's global flags (before the verb) and vibe-shim's own `--config`.

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;

use super::go_flag::{
    boolean, check_value, lookup, parse_go_bool, split_flag, value, FlagDef, Kind, HELP,
};
use super::ArgsError;

/// runc's global flags (before the verb), urfave/cli's help and version
/// flags included. `criu` is a value in every version (ignored from 1.2).
pub const GLOBAL_FLAGS: &[FlagDef] = &[
    boolean(&["debug"]),
    value(&["log"]),
    value(&["log-format"]),
    value(&["root"]),
    value(&["criu"]),
    boolean(&["systemd-cgroup"]),
    value(&["rootless"]),
    HELP,
    boolean(&["version", "v"]),
];

/// The global part of the command line, with `--config` taken out.
#[derive(Debug, Clone, PartialEq)]
pub struct Invocation {
    /// vibe-shim's own `--config` (global position only).
    pub config: Option<PathBuf>,
    /// Everything runc gets: argv[1..] without `--config`.
    pub runc_args: Vec<OsString>,
    pub root: Option<OsString>,
    pub log: Option<OsString>,
    pub log_format: Option<OsString>,
    /// `--criu` was given (it picks the binary runc 1.1 runs as root).
    pub criu: bool,
    /// `--systemd-cgroup`: runc reads `cgroupsPath` as `slice:prefix:name`.
    pub systemd_cgroup: bool,
    /// Index of the verb in `runc_args`.
    pub verb_index: Option<usize>,
    /// `--help` or `--version`: runc prints and runs no verb.
    pub no_action: bool,
    /// Why runc would refuse the global flags (the verb is then unknown).
    pub error: Option<ArgsError>,
}

impl Invocation {
    /// The verb as text (`""` for none, e.g. `--version`).
    pub fn verb(&self) -> &str {
        self.verb_index
            .and_then(|i| self.runc_args.get(i))
            .and_then(|v| v.to_str())
            .unwrap_or("")
    }

    /// Tokens after the verb.
    pub fn verb_args(&self) -> &[OsString] {
        match self.verb_index {
            Some(i) => &self.runc_args[i + 1..],
            None => &[],
        }
    }

    /// Whether `--log-format json` was given (runc's default is text).
    pub fn log_is_json(&self) -> bool {
        self.log_format.as_deref() == Some(OsStr::new("json"))
    }
}

/// Scans the global part of argv as Go's `flag` does: finds the verb,
/// records `--root`, `--log`, `--log-format`, `--help`/`--version`, and
/// removes vibe-shim's own `--config`. A flag runc would refuse stops the
/// scan and is kept in [`Invocation::error`]; the verb is then unknown.
pub fn scan_globals(args: Vec<OsString>) -> Result<Invocation, ArgsError> {
    let mut inv = Invocation {
        config: None,
        runc_args: Vec::with_capacity(args.len()),
        root: None,
        log: None,
        log_format: None,
        criu: false,
        systemd_cgroup: false,
        verb_index: None,
        no_action: false,
        error: None,
    };
    let mut written: Vec<String> = Vec::new();
    let mut help = false;
    let mut version = false;
    let mut tokens = args.into_iter();
    while let Some(token) = tokens.next() {
        if token == "--" {
            inv.runc_args.push(token);
            if tokens.len() > 0 {
                inv.verb_index = Some(inv.runc_args.len());
            }
            inv.runc_args.extend(tokens.by_ref());
            break;
        }
        let (name, inline) = match split_flag(&token) {
            None => {
                inv.verb_index = Some(inv.runc_args.len());
                inv.runc_args.push(token);
                inv.runc_args.extend(tokens.by_ref());
                break;
            }
            Some(Err(e)) => {
                inv.error = Some(e);
                inv.runc_args.push(token);
                inv.runc_args.extend(tokens.by_ref());
                break;
            }
            Some(Ok((name, inline))) => (name.to_vec(), inline.map(OsStr::to_os_string)),
        };
        if name == b"config" {
            let value = match inline {
                Some(v) => v,
                None => tokens.next().ok_or(ArgsError::ConfigWithoutValue)?,
            };
            if inv.config.replace(PathBuf::from(value)).is_some() {
                return Err(ArgsError::ConfigTwice);
            }
            continue;
        }
        let Some(def) = lookup(GLOBAL_FLAGS, &name) else {
            inv.error = Some(ArgsError::Unknown(String::from_utf8_lossy(&name).into()));
            inv.runc_args.push(token);
            inv.runc_args.extend(tokens.by_ref());
            break;
        };
        inv.runc_args.push(token);
        let value = match (def.kind, inline) {
            (_, Some(v)) => Some(v),
            (Kind::Bool, None) => None,
            (_, None) => tokens.next().inspect(|v| inv.runc_args.push(v.clone())),
        };
        let checked = match &value {
            Some(v) => check_value(def, v),
            None if def.takes_value() => Err(ArgsError::NeedsValue(def.names[0].into())),
            None => Ok(()),
        };
        if let Err(e) = checked {
            inv.error = Some(e);
            inv.runc_args.extend(tokens.by_ref());
            break;
        }
        written.push(String::from_utf8_lossy(&name).into_owned());
        let on = || {
            value
                .as_deref()
                .is_none_or(|v| parse_go_bool(v) == Some(true))
        };
        match def.names[0] {
            "root" => inv.root = value.clone(),
            "log" => inv.log = value.clone(),
            "log-format" => inv.log_format = value.clone(),
            "criu" => inv.criu = true,
            "systemd-cgroup" => inv.systemd_cgroup = on(),
            "help" => help = on(),
            "version" => version = on(),
            _ => {}
        }
    }
    inv.no_action = help || version;
    for pair in [["help", "h"], ["version", "v"]] {
        if pair.iter().all(|n| written.iter().any(|w| w == n)) && inv.error.is_none() {
            inv.error = Some(ArgsError::TwoForms(pair[0].into(), pair[1].into()));
        }
    }
    Ok(inv)
}
