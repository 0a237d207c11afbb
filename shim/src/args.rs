//! A tolerant scanner for runc's command line.
//!
//! runc (urfave/cli over Go's `flag`) accepts `--f v`, `--f=v`, `-f v` and
//! `-f=v` for every flag, and boolean flags without a value. A strict parser
//! (clap, liboci-cli) rejects forms runc accepts, so this module only finds
//! what vibe-shim needs (the verb, the container id, the flags it rewrites)
//! and remembers where each token was, so every other byte reaches runc as
//! given. Tokens stay `OsString`: argv is bytes, not UTF-8.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ArgsError {
    #[error("--config needs a value")]
    ConfigWithoutValue,
}

/// One flag this scanner knows for a verb (or globally).
#[derive(Debug)]
pub struct FlagDef {
    /// Every accepted name; the first is the canonical one reported in [`Item`].
    pub names: &'static [&'static str],
    pub takes_value: bool,
}

const fn value(names: &'static [&'static str]) -> FlagDef {
    FlagDef {
        names,
        takes_value: true,
    }
}

const fn boolean(names: &'static [&'static str]) -> FlagDef {
    FlagDef {
        names,
        takes_value: false,
    }
}

/// runc's global flags (before the verb).
pub const GLOBAL_FLAGS: &[FlagDef] = &[
    value(&["root"]),
    value(&["log"]),
    value(&["log-format"]),
    value(&["criu"]),
    value(&["rootless"]),
    boolean(&["debug"]),
    boolean(&["systemd-cgroup"]),
    boolean(&["help", "h"]),
    boolean(&["version", "v"]),
];

/// runc's verbs plus vibe-shim's own (`hook`, `policy`); used to decide
/// whether an unknown global `--x` takes the next token as its value.
pub const KNOWN_VERBS: &[&str] = &[
    "checkpoint",
    "create",
    "delete",
    "events",
    "exec",
    "features",
    "init",
    "kill",
    "list",
    "pause",
    "ps",
    "restore",
    "resume",
    "run",
    "spec",
    "start",
    "state",
    "update",
    "help",
    "h",
    "hook",
    "policy",
];

pub const CREATE_FLAGS: &[FlagDef] = &[
    value(&["bundle", "b"]),
    value(&["console-socket"]),
    value(&["pidfd-socket"]),
    value(&["pid-file"]),
    value(&["preserve-fds"]),
    boolean(&["no-pivot"]),
    boolean(&["no-new-keyring"]),
];

pub const RUN_FLAGS: &[FlagDef] = &[
    value(&["bundle", "b"]),
    value(&["console-socket"]),
    value(&["pidfd-socket"]),
    value(&["pid-file"]),
    value(&["preserve-fds"]),
    boolean(&["no-pivot"]),
    boolean(&["no-new-keyring"]),
    boolean(&["detach", "d"]),
    boolean(&["keep"]),
    boolean(&["no-subreaper"]),
];

pub const RESTORE_FLAGS: &[FlagDef] = &[
    value(&["bundle", "b"]),
    value(&["console-socket"]),
    value(&["pid-file"]),
    value(&["image-path"]),
    value(&["work-path"]),
    value(&["parent-path"]),
    value(&["manage-cgroups-mode"]),
    value(&["lsm-profile"]),
    value(&["lsm-mount-context"]),
    value(&["empty-ns"]),
    boolean(&["tcp-established"]),
    boolean(&["tcp-skip-in-flight"]),
    boolean(&["link-remap"]),
    boolean(&["ext-unix-sk"]),
    boolean(&["shell-job"]),
    boolean(&["file-locks"]),
    boolean(&["detach", "d"]),
    boolean(&["no-subreaper"]),
    boolean(&["no-pivot"]),
    boolean(&["auto-dedup"]),
    boolean(&["lazy-pages"]),
];

pub const EXEC_FLAGS: &[FlagDef] = &[
    value(&["console-socket"]),
    value(&["pidfd-socket"]),
    value(&["cwd"]),
    value(&["env", "e"]),
    value(&["process", "p"]),
    value(&["user", "u"]),
    value(&["additional-gids", "g"]),
    value(&["pid-file"]),
    value(&["process-label"]),
    value(&["apparmor"]),
    value(&["cap", "c"]),
    value(&["preserve-fds"]),
    value(&["cgroup"]),
    boolean(&["tty", "t"]),
    boolean(&["detach", "d"]),
    boolean(&["no-new-privs"]),
    boolean(&["ignore-paused"]),
];

pub const UPDATE_FLAGS: &[FlagDef] = &[
    value(&["resources", "r"]),
    value(&["blkio-weight"]),
    value(&["cpu-period"]),
    value(&["cpu-quota"]),
    value(&["cpu-share"]),
    value(&["cpu-rt-period"]),
    value(&["cpu-rt-runtime"]),
    value(&["cpuset-cpus"]),
    value(&["cpuset-mems"]),
    value(&["cpu-idle"]),
    value(&["kernel-memory"]),
    value(&["kernel-memory-tcp"]),
    value(&["memory"]),
    value(&["memory-reservation"]),
    value(&["memory-swap"]),
    value(&["pids-limit"]),
    value(&["l3-cache-schema"]),
    value(&["mem-bw-schema"]),
];

/// `vibe-shim policy explain|check` flags (ours, after the verb).
pub const POLICY_FLAGS: &[FlagDef] = &[value(&["bundle", "b"]), value(&["config"])];

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
    /// Index of the verb in `runc_args`.
    pub verb_index: Option<usize>,
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

/// A flag token split into its name and an inline `=value`.
fn split_flag(token: &OsStr) -> Option<(&str, Option<&OsStr>)> {
    let bytes = token.as_bytes();
    if bytes.len() < 2 || bytes[0] != b'-' || bytes == b"--" {
        return None;
    }
    let body = bytes.strip_prefix(b"--").unwrap_or_else(|| &bytes[1..]);
    let (name, value) = match body.iter().position(|&b| b == b'=') {
        Some(eq) => (&body[..eq], Some(OsStr::from_bytes(&body[eq + 1..]))),
        None => (body, None),
    };
    let name = std::str::from_utf8(name).ok()?;
    Some((name, value))
}

fn lookup<'a>(table: &'a [FlagDef], name: &str) -> Option<&'a FlagDef> {
    table.iter().find(|f| f.names.contains(&name))
}

/// Scans the global part of argv: finds the verb, records `--root`, `--log`
/// and `--log-format`, and removes vibe-shim's `--config`.
pub fn scan_globals(args: Vec<OsString>) -> Result<Invocation, ArgsError> {
    let mut inv = Invocation {
        config: None,
        runc_args: Vec::with_capacity(args.len()),
        root: None,
        log: None,
        log_format: None,
        verb_index: None,
    };
    let mut tokens = args.into_iter().peekable();
    while let Some(token) = tokens.next() {
        if token == "--" {
            inv.runc_args.push(token);
            inv.runc_args.extend(tokens.by_ref());
            break;
        }
        let Some((name, inline)) = split_flag(&token) else {
            inv.verb_index = Some(inv.runc_args.len());
            inv.runc_args.push(token);
            inv.runc_args.extend(tokens.by_ref());
            break;
        };
        if name == "config" {
            let value = match inline {
                Some(v) => v.to_os_string(),
                None => tokens.next().ok_or(ArgsError::ConfigWithoutValue)?,
            };
            inv.config = Some(PathBuf::from(value));
            continue;
        }
        let name = name.to_string();
        let inline = inline.map(OsStr::to_os_string);
        inv.runc_args.push(token);
        let takes_value = match lookup(GLOBAL_FLAGS, &name) {
            Some(def) => def.takes_value,
            // An unknown `--x v`: boolean if a verb follows, else it takes `v`.
            None => tokens
                .peek()
                .is_some_and(|next| !KNOWN_VERBS.contains(&next.to_str().unwrap_or(""))),
        };
        let value = match (takes_value, inline) {
            (_, Some(v)) => Some(v),
            (true, None) => tokens.next().inspect(|v| inv.runc_args.push(v.clone())),
            (false, None) => None,
        };
        match name.as_str() {
            "root" => inv.root = value,
            "log" => inv.log = value,
            "log-format" => inv.log_format = value,
            _ => {}
        }
    }
    Ok(inv)
}

/// One element of a verb's arguments.
#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    Flag {
        /// Canonical name (first of [`FlagDef::names`]), or the name as written if unknown.
        name: String,
        value: Option<OsString>,
        /// Index of the flag token (relative to the scanned slice).
        flag_index: usize,
        /// Index of a separate value token; `None` for `--f=v` and booleans.
        value_index: Option<usize>,
    },
    Positional {
        index: usize,
        value: OsString,
    },
}

/// Scans a verb's arguments. Known value flags take the next token whatever
/// it looks like (as Go's `flag` does); unknown flags are taken as boolean
/// (runc refuses unknown verb flags anyway). With `stop_at_positional`
/// (runc `exec`, which does not reorder), everything after the first
/// positional is positional: it is the process's own argv.
pub fn scan_verb(args: &[OsString], table: &[FlagDef], stop_at_positional: bool) -> Vec<Item> {
    let mut items = Vec::new();
    let mut i = 0;
    let mut only_positional = false;
    while i < args.len() {
        let token = &args[i];
        if !only_positional && token == "--" {
            only_positional = true;
            i += 1;
            continue;
        }
        let flag = if only_positional {
            None
        } else {
            split_flag(token)
        };
        match flag {
            None => {
                items.push(Item::Positional {
                    index: i,
                    value: token.clone(),
                });
                if stop_at_positional {
                    only_positional = true;
                }
                i += 1;
            }
            Some((name, inline)) => {
                let def = lookup(table, name);
                let canonical = def.map_or(name, |d| d.names[0]).to_string();
                let takes_value = def.is_some_and(|d| d.takes_value);
                let (value, value_index) = match inline {
                    Some(v) => (Some(v.to_os_string()), None),
                    None if takes_value && i + 1 < args.len() => {
                        (Some(args[i + 1].clone()), Some(i + 1))
                    }
                    None => (None, None),
                };
                items.push(Item::Flag {
                    name: canonical,
                    value,
                    flag_index: i,
                    value_index,
                });
                i += if value_index.is_some() { 2 } else { 1 };
            }
        }
    }
    items
}

/// The value of the last occurrence of a flag (Go's `flag` keeps the last).
pub fn flag_value<'a>(items: &'a [Item], wanted: &str) -> Option<&'a OsString> {
    items.iter().rev().find_map(|item| match item {
        Item::Flag { name, value, .. } if name == wanted => value.as_ref(),
        _ => None,
    })
}

/// The first positional argument (the container id for most verbs).
pub fn first_positional(items: &[Item]) -> Option<&OsString> {
    items.iter().find_map(|item| match item {
        Item::Positional { value, .. } => Some(value),
        _ => None,
    })
}

/// Edits to a verb's argument list, applied in one pass so indexes stay valid.
#[derive(Debug, Default)]
pub struct Edits {
    /// Separate value tokens replaced whole.
    replace: Vec<(usize, OsString)>,
    /// `--f=v` tokens whose value is replaced.
    inline: Vec<(usize, OsString)>,
    remove: Vec<usize>,
    prepend: Vec<OsString>,
}

impl Edits {
    /// Replaces the value of a flag item, keeping its form (`--f v` / `--f=v`).
    pub fn set_flag_value(&mut self, item: &Item, new_value: &OsStr) {
        if let Item::Flag {
            flag_index,
            value_index,
            ..
        } = item
        {
            match value_index {
                Some(v) => self.replace.push((*v, new_value.to_os_string())),
                None => self.inline.push((*flag_index, new_value.to_os_string())),
            }
        }
    }

    /// Removes a flag item and its separate value token.
    pub fn remove_flag(&mut self, item: &Item) {
        if let Item::Flag {
            flag_index,
            value_index,
            ..
        } = item
        {
            self.remove.push(*flag_index);
            self.remove.extend(*value_index);
        }
    }

    /// The last `--name` flag and its value (empty if it has none), with
    /// every earlier `--name` removed: runc reads the last one, and only the
    /// one vibe-shim rewrites may reach it.
    pub fn keep_last_flag<'a>(
        &mut self,
        items: &'a [Item],
        name: &str,
    ) -> Option<(&'a Item, OsString)> {
        let mut last: Option<(&Item, &Option<OsString>)> = None;
        for item in items {
            if let Item::Flag { name: n, value, .. } = item {
                if n == name {
                    if let Some((earlier, _)) = last.replace((item, value)) {
                        self.remove_flag(earlier);
                    }
                }
            }
        }
        last.map(|(item, value)| (item, value.clone().unwrap_or_default()))
    }

    /// Adds tokens right after the verb (before the container id).
    pub fn prepend(&mut self, tokens: impl IntoIterator<Item = OsString>) {
        self.prepend.extend(tokens);
    }

    /// The edited argument list.
    pub fn apply(&self, args: &[OsString]) -> Vec<OsString> {
        let mut out = self.prepend.clone();
        for (i, token) in args.iter().enumerate() {
            if self.remove.contains(&i) {
                continue;
            }
            if let Some((_, inline)) = self.inline.iter().rev().find(|(j, _)| *j == i) {
                out.push(with_inline_value(token, inline));
            } else if let Some((_, new)) = self.replace.iter().rev().find(|(j, _)| *j == i) {
                out.push(new.clone());
            } else {
                out.push(token.clone());
            }
        }
        out
    }
}

/// `--name=old` with its value replaced; the `-`/`--` prefix and name are kept.
fn with_inline_value(token: &OsStr, value: &OsStr) -> OsString {
    let bytes = token.as_bytes();
    let eq = bytes.iter().position(|&b| b == b'=').unwrap_or(bytes.len());
    let mut out = bytes[..eq].to_vec();
    out.push(b'=');
    out.extend_from_slice(value.as_bytes());
    OsString::from_vec(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    fn strs(args: &[OsString]) -> Vec<String> {
        args.iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn containerd_create() {
        let argv = os(&[
            "--root",
            "/run/vs-dev/exec/runtime-runc/moby",
            "--log",
            "/run/c/abc/log.json",
            "--log-format",
            "json",
            "create",
            "--bundle",
            "/run/c/abc",
            "--pid-file",
            "/run/c/abc/init.pid",
            "abc",
        ]);
        let inv = scan_globals(argv.clone()).unwrap();
        assert_eq!(inv.runc_args, argv);
        assert_eq!(inv.verb(), "create");
        assert_eq!(
            inv.root.as_deref(),
            Some(OsStr::new("/run/vs-dev/exec/runtime-runc/moby"))
        );
        assert_eq!(inv.log.as_deref(), Some(OsStr::new("/run/c/abc/log.json")));
        assert!(inv.log_is_json());
        let items = scan_verb(inv.verb_args(), CREATE_FLAGS, false);
        assert_eq!(flag_value(&items, "bundle").unwrap(), "/run/c/abc");
        assert_eq!(first_positional(&items).unwrap(), "abc");
    }

    #[test]
    fn config_is_removed_in_every_form() {
        for argv in [
            &["--config", "/p.toml", "--root", "/r", "state", "x"][..],
            &["--root", "/r", "--config=/p.toml", "state", "x"],
            &["-config", "/p.toml", "--root", "/r", "state", "x"],
            &["--root", "/r", "-config=/p.toml", "state", "x"],
        ] {
            let inv = scan_globals(os(argv)).unwrap();
            assert_eq!(inv.config, Some(PathBuf::from("/p.toml")), "{argv:?}");
            assert_eq!(
                strs(&inv.runc_args),
                ["--root", "/r", "state", "x"],
                "{argv:?}"
            );
        }
        assert_eq!(
            scan_globals(os(&["--config"])),
            Err(ArgsError::ConfigWithoutValue)
        );
        // After the verb it is runc's business (or a container's argv).
        let inv = scan_globals(os(&["exec", "c", "prog", "--config", "x"])).unwrap();
        assert_eq!(inv.config, None);
        assert_eq!(inv.runc_args.len(), 5);
    }

    #[test]
    fn single_dash_and_equals_globals() {
        let inv = scan_globals(os(&[
            "-root=/r",
            "-log",
            "/l",
            "-log-format=text",
            "--debug",
            "--systemd-cgroup",
            "kill",
            "c",
            "9",
        ]))
        .unwrap();
        assert_eq!(inv.root.as_deref(), Some(OsStr::new("/r")));
        assert_eq!(inv.log.as_deref(), Some(OsStr::new("/l")));
        assert!(!inv.log_is_json());
        assert_eq!(inv.verb(), "kill");
        assert_eq!(strs(inv.verb_args()), ["c", "9"]);
    }

    #[test]
    fn unknown_globals_guess_by_next_token() {
        let inv = scan_globals(os(&["--new-bool", "start", "c"])).unwrap();
        assert_eq!(inv.verb(), "start");
        let inv = scan_globals(os(&["--new-value", "v", "delete", "c"])).unwrap();
        assert_eq!(inv.verb(), "delete");
        let inv = scan_globals(os(&["--x=v", "--rootless", "auto", "list"])).unwrap();
        assert_eq!(inv.verb(), "list");
        assert_eq!(inv.runc_args.len(), 4);
    }

    #[test]
    fn version_and_help_have_no_verb() {
        let inv = scan_globals(os(&["--version"])).unwrap();
        assert_eq!(inv.verb(), "");
        let inv = scan_globals(os(&["-h"])).unwrap();
        assert_eq!(inv.verb(), "");
        assert_eq!(strs(&inv.runc_args), ["-h"]);
    }

    #[test]
    fn non_utf8_bytes_survive() {
        let weird = OsString::from_vec(vec![b'/', 0xff, b'x']);
        let argv = vec![
            OsString::from("--root"),
            weird.clone(),
            OsString::from("state"),
            weird.clone(),
        ];
        let inv = scan_globals(argv.clone()).unwrap();
        assert_eq!(inv.runc_args, argv);
        assert_eq!(inv.root, Some(weird));
    }

    #[test]
    fn containerd_exec_and_update() {
        let inv = scan_globals(os(&[
            "--root",
            "/r",
            "--log",
            "/l.json",
            "--log-format",
            "json",
            "exec",
            "--process",
            "/tmp/runc-process3830015844",
            "--detach",
            "--pid-file",
            "/x.pid",
            "abc",
        ]))
        .unwrap();
        let items = scan_verb(inv.verb_args(), EXEC_FLAGS, true);
        assert_eq!(
            flag_value(&items, "process").unwrap(),
            "/tmp/runc-process3830015844"
        );
        assert_eq!(first_positional(&items).unwrap(), "abc");
        let items = scan_verb(&os(&["--resources", "-", "abc"]), UPDATE_FLAGS, false);
        assert_eq!(flag_value(&items, "resources").unwrap(), "-");
        assert_eq!(first_positional(&items).unwrap(), "abc");
    }

    #[test]
    fn podman_style_and_short_forms() {
        // conmon: runc --root R --systemd-cgroup exec -d --pid-file P --process F --console-socket S ID
        let inv = scan_globals(os(&[
            "--root",
            "/run/runc",
            "--systemd-cgroup",
            "exec",
            "-d",
            "--pid-file",
            "/p",
            "--process=/f",
            "--console-socket",
            "/s",
            "ctr",
        ]))
        .unwrap();
        let items = scan_verb(inv.verb_args(), EXEC_FLAGS, true);
        assert_eq!(flag_value(&items, "process").unwrap(), "/f");
        assert_eq!(first_positional(&items).unwrap(), "ctr");
        let items = scan_verb(
            &os(&["-b=/bundle", "-pid-file", "/p", "ctr"]),
            CREATE_FLAGS,
            false,
        );
        assert_eq!(flag_value(&items, "bundle").unwrap(), "/bundle");
        assert_eq!(first_positional(&items).unwrap(), "ctr");
    }

    #[test]
    fn exec_stops_at_the_container_id() {
        let items = scan_verb(
            &os(&["-t", "ctr", "sh", "-c", "echo", "-e", "x"]),
            EXEC_FLAGS,
            true,
        );
        let positionals: Vec<_> = items
            .iter()
            .filter_map(|i| match i {
                Item::Positional { value, .. } => Some(value.to_string_lossy().into_owned()),
                _ => None,
            })
            .collect();
        assert_eq!(positionals, ["ctr", "sh", "-c", "echo", "-e", "x"]);
        // Other verbs reorder flags after the id (urfave/cli), so keep scanning.
        let items = scan_verb(&os(&["ctr", "--pids-limit", "-1"]), UPDATE_FLAGS, false);
        assert_eq!(flag_value(&items, "pids-limit").unwrap(), "-1");
        let items = scan_verb(&os(&["--", "-weird-id"]), CREATE_FLAGS, false);
        assert_eq!(first_positional(&items).unwrap(), "-weird-id");
    }

    #[test]
    fn value_flags_take_dashed_values() {
        let items = scan_verb(&os(&["-e", "-x", "ctr"]), EXEC_FLAGS, true);
        assert_eq!(flag_value(&items, "env").unwrap(), "-x");
        assert_eq!(first_positional(&items).unwrap(), "ctr");
    }

    #[test]
    fn edits_keep_form_and_order() {
        let args = os(&["--process", "/a", "-p=/b", "--cap", "X", "ctr", "sh"]);
        let items = scan_verb(&args, EXEC_FLAGS, true);
        let mut edits = Edits::default();
        edits.set_flag_value(&items[0], OsStr::new("/new"));
        edits.set_flag_value(&items[1], OsStr::new("/new2"));
        edits.remove_flag(&items[2]);
        edits.prepend([OsString::from("--no-new-privs")]);
        assert_eq!(
            strs(&edits.apply(&args)),
            [
                "--no-new-privs",
                "--process",
                "/new",
                "-p=/new2",
                "ctr",
                "sh"
            ]
        );
    }

    #[test]
    fn only_the_last_of_a_repeated_flag_survives() {
        let args = os(&["--process", "/a", "-e", "X=1", "-p=/b", "ctr", "sh"]);
        let items = scan_verb(&args, EXEC_FLAGS, true);
        let mut edits = Edits::default();
        let (last, value) = edits.keep_last_flag(&items, "process").unwrap();
        assert_eq!(value, "/b");
        edits.set_flag_value(last, OsStr::new("/new"));
        assert_eq!(
            strs(&edits.apply(&args)),
            ["-e", "X=1", "-p=/new", "ctr", "sh"]
        );
        assert!(edits.keep_last_flag(&items, "cwd").is_none());
    }

    /// Lines recorded from containerd-shim-runc-v2 (containerd 1.6.20) on
    /// this machine; the shim must hand each to runc unchanged.
    #[test]
    fn recorded_containerd_lines_pass_unchanged() {
        let lines = [
            "--root /run/vs-dev/exec/runtime-runc/moby --log /run/t/log.json --log-format json delete --force abc",
            "--root /run/vs-dev/exec/runtime-runc/moby --log /run/t/log.json --log-format json kill --all abc 9",
            "--root /run/vs-dev/exec/runtime-runc/moby --log /run/t/log.json --log-format json ps --format json abc",
            "--root /run/vs-dev/exec/runtime-runc/moby --log /run/t/log.json --log-format json start abc",
            "--root /run/vs-dev/exec/runtime-runc/moby --log /run/t/log.json --log-format json exec --process /tmp/runc-process1769853297 --console-socket /tmp/pty892541995/pty.sock --detach --pid-file /run/t/e5.pid abc",
        ];
        for line in lines {
            let argv = os(&line.split(' ').collect::<Vec<_>>());
            let inv = scan_globals(argv.clone()).unwrap();
            assert_eq!(inv.runc_args, argv, "{line}");
            assert_eq!(
                inv.root.as_deref(),
                Some(OsStr::new("/run/vs-dev/exec/runtime-runc/moby"))
            );
            assert!(inv.log_is_json());
        }
        let argv = os(&lines[4].split(' ').collect::<Vec<_>>());
        let inv = scan_globals(argv).unwrap();
        let items = scan_verb(inv.verb_args(), EXEC_FLAGS, true);
        assert_eq!(first_positional(&items).unwrap(), "abc");
        assert_eq!(
            flag_value(&items, "console-socket").unwrap(),
            "/tmp/pty892541995/pty.sock"
        );
    }
}
