//! The readings runc's parser gives, pinned.

use super::go_flag::{go_parse, lossy};
use super::reorder::{reorder, Reorder};
use super::*;
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;

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
fn unknown_globals_are_an_error_and_hide_the_verb() {
    // The bypass: a future flag with a value would make `create` the verb.
    let inv = scan_globals(os(&["--future-flag", "v", "create", "c"])).unwrap();
    assert_eq!(inv.error, Some(ArgsError::Unknown("future-flag".into())));
    assert_eq!(inv.verb_index, None);
    assert_eq!(inv.runc_args.len(), 4);
    let inv = scan_globals(os(&["--x=v", "--rootless", "auto", "list"])).unwrap();
    assert!(inv.error.is_some());
    // Bool globals take no separate value: `false` is the verb.
    let inv = scan_globals(os(&["--debug", "false", "create", "c"])).unwrap();
    assert_eq!(inv.verb(), "false");
    let inv = scan_globals(os(&["--debug=maybe", "create", "c"])).unwrap();
    assert!(matches!(inv.error, Some(ArgsError::BadBool { .. })));
    for bad in [
        &["---root", "/r", "create"][..],
        &["-=x", "create"],
        &["--root"],
    ] {
        assert!(scan_globals(os(bad)).unwrap().error.is_some(), "{bad:?}");
    }
}

#[test]
fn double_dash_before_the_verb_is_go_flags_terminator() {
    let inv = scan_globals(os(&["--root", "/r", "--", "create", "--bundle", "b", "c"])).unwrap();
    assert_eq!(inv.error, None);
    assert_eq!(inv.verb(), "create");
    assert_eq!(strs(inv.verb_args()), ["--bundle", "b", "c"]);
    assert_eq!(strs(&inv.runc_args)[2], "--");
    // `--root --` : the `--` is root's value, not a terminator.
    let inv = scan_globals(os(&["--root", "--", "exec", "c", "sh"])).unwrap();
    assert_eq!(inv.root.as_deref(), Some(OsStr::new("--")));
    assert_eq!(inv.verb(), "exec");
    let inv = scan_globals(os(&["--"])).unwrap();
    assert_eq!(inv.verb_index, None);
}

#[test]
fn help_and_version_run_nothing_unless_false() {
    let inv = scan_globals(os(&["--help", "create", "c"])).unwrap();
    assert!(inv.no_action);
    let inv = scan_globals(os(&["-h=false", "-v=0", "create", "c"])).unwrap();
    assert!(!inv.no_action);
    assert_eq!(inv.verb(), "create");
    let inv = scan_globals(os(&["--version", "--version=false", "create"])).unwrap();
    assert!(!inv.no_action);
    let inv = scan_globals(os(&["-h", "--help", "create"])).unwrap();
    assert_eq!(
        inv.error,
        Some(ArgsError::TwoForms("help".into(), "h".into()))
    );
    assert_eq!(
        scan_globals(os(&["--config", "/a", "--config=/b", "state"])),
        Err(ArgsError::ConfigTwice)
    );
}

/// (flag name, value) pairs and the operands.
type Reading = (Vec<(String, Option<String>)>, Vec<String>);

fn classified(verb: &str, args: &[&str]) -> Result<Reading, ArgsError> {
    let items = classify_verb(verb, &os(args))?;
    let flags = items
        .iter()
        .filter_map(|i| match i {
            Item::Flag { name, value, .. } => {
                Some((name.clone(), value.as_ref().map(|v| lossy(v))))
            }
            _ => None,
        })
        .collect();
    let ops = positionals(&items).iter().map(|v| lossy(v)).collect();
    Ok((flags, ops))
}

#[test]
fn unknown_verb_flags_are_refused_not_guessed() {
    // Today's runc refuses this; the next one might give the flag a value.
    let err = classify_verb(
        "exec",
        &os(&[
            "--future-flag",
            "v",
            "-e",
            "GITHUB_TOKEN=x",
            "--cap",
            "CAP_SYS_ADMIN",
            "c",
            "sh",
        ]),
    )
    .unwrap_err();
    assert_eq!(err, ArgsError::Unknown("future-flag".into()));
    assert!(classify_verb("create", &os(&["--future=1", "c"])).is_err());
    // After the operand, urfave/cli v1.22.6+ leaves an unknown flag an
    // operand (v1.22.1 fails on it): two operands, which `main` refuses.
    let (_, ops) = classified("create", &["c", "--future=1"]).unwrap();
    assert_eq!(ops, ["c", "--future=1"]);
    // After exec's container id everything is the command, flags or not.
    let (flags, ops) = classified("exec", &["-t", "c", "sh", "--future-flag", "-e"]).unwrap();
    assert_eq!(flags, [("tty".to_string(), None)]);
    assert_eq!(ops, ["c", "sh", "--future-flag", "-e"]);
}

#[test]
fn bool_values_ints_and_two_forms() {
    let (flags, _) = classified("exec", &["-t=false", "--no-new-privs=0", "c", "x"]).unwrap();
    assert_eq!(flags[0], ("tty".into(), Some("false".into())));
    let items = classify_verb(
        "exec",
        &os(&["-t=false", "--no-new-privs=0", "-d", "c", "x"]),
    )
    .unwrap();
    assert_eq!(flag_bool(&items, "tty"), Some(false));
    assert_eq!(flag_bool(&items, "no-new-privs"), Some(false));
    assert_eq!(flag_bool(&items, "detach"), Some(true));
    assert_eq!(flag_bool(&items, "ignore-paused"), None);
    assert!(classify_verb("exec", &os(&["-t=yes", "c", "x"])).is_err());
    // Go reads 010 as octal and 0x10 as hex: only plain decimal passes.
    for bad in ["010", "0x10", "1_0", "", " 5"] {
        assert!(
            classify_verb("update", &os(&["--pids-limit", bad, "c"])).is_err(),
            "{bad:?}"
        );
    }
    assert!(classify_verb("update", &os(&["--pids-limit", "-1", "c"])).is_ok());
    assert!(classify_verb("exec", &os(&["--preserve-fds", "1025", "c", "x"])).is_err());
    assert!(classify_verb("exec", &os(&["--preserve-fds=-1", "c", "x"])).is_err());
    assert!(classify_verb("exec", &os(&["--preserve-fds", "3", "c", "x"])).is_ok());
    assert!(classify_verb("exec", &os(&["-g", "x", "c", "x"])).is_err());
    assert_eq!(
        classify_verb("exec", &os(&["--process", "/a", "-p", "/b", "c"])),
        Err(ArgsError::TwoForms("process".into(), "p".into()))
    );
    let items = classify_verb("exec", &os(&["-p", "/a", "-p", "/b", "c"])).unwrap();
    assert_eq!(flag_value(&items, "process").unwrap(), "/b");
    assert!(classify_verb("exec", &os(&["c", "x"])).is_ok());
    assert_eq!(
        classify_verb("create", &os(&["--bundle"])),
        Err(ArgsError::NeedsValue("bundle".into()))
    );
}

#[test]
fn reordering_verbs_read_flags_after_the_id() {
    // urfave/cli moves flags after the operand to the front.
    let (flags, ops) = classified("update", &["c", "--pids-limit", "-1"]).unwrap();
    assert_eq!(flags, [("pids-limit".to_string(), Some("-1".to_string()))]);
    assert_eq!(ops, ["c"]);
    // A trailing value flag takes the first operand as its value.
    let (flags, ops) = classified("create", &["a", "b", "--pid-file"]).unwrap();
    assert_eq!(flags, [("pid-file".to_string(), Some("a".to_string()))]);
    assert_eq!(ops, ["b"]);
    // A bool followed by a word: the word is an operand and ends the flags.
    let (flags, ops) = classified("create", &["--no-pivot", "c", "--bundle", "/x"]).unwrap();
    assert_eq!(flags, [("no-pivot".to_string(), None)]);
    assert_eq!(ops, ["c", "--bundle", "/x"]);
    // `--` ends the flags (and is a value right after a value flag).
    let (flags, ops) = classified("create", &["--", "-weird"]).unwrap();
    assert!(flags.is_empty());
    assert_eq!(ops, ["-weird"]);
    let (flags, ops) = classified("create", &["--pid-file", "--", "c"]).unwrap();
    assert_eq!(flags, [("pid-file".to_string(), Some("--".to_string()))]);
    assert_eq!(ops, ["c"]);
}

#[test]
fn urfave_versions_that_accept_must_agree() {
    let run = |args: &[OsString], v| go_parse(&reorder(args, CREATE_FLAGS, v), CREATE_FLAGS);
    // containerd's own update line reads the same in both.
    let (flags, ops) = classified("update", &["--resources", "-", "c"]).unwrap();
    assert_eq!(flags, [("resources".to_string(), Some("-".to_string()))]);
    assert_eq!(ops, ["c"]);
    let (flags, ops) = classified("create", &["c", "--pid-file", "-q"]).unwrap();
    assert_eq!(flags, [("pid-file".to_string(), Some("-q".to_string()))]);
    assert_eq!(ops, ["c"]);
    // v1.22.1 stops at `--`, so `c` is --pid-file's value and `x` the
    // id; v1.22.6+ takes `--` as the value: two ids. Disagreement.
    let args = os(&["c", "--pid-file", "--", "x"]);
    assert_ne!(
        run(&args, Reorder::V1_22_1).unwrap(),
        run(&args, Reorder::V1_22_6).unwrap()
    );
    assert_eq!(
        classify_verb("create", &args),
        Err(ArgsError::VersionsDisagree)
    );
    // v1.22.1 moves every dash-token (then fails on it); v1.22.6+ keeps
    // an unknown one an operand.
    let args = os(&["c", "-x"]);
    assert!(run(&args, Reorder::V1_22_1).is_err());
    assert!(run(&args, Reorder::V1_22_6).is_ok());
}

#[test]
fn checkpoint_reads_as_runc_reads_it() {
    // containerd's line (runc's go-runc): flags, then the id.
    let (flags, ops) = classified(
        "checkpoint",
        &[
            "--image-path",
            "/i",
            "--work-path",
            "/w",
            "--leave-running",
            "abc",
        ],
    )
    .unwrap();
    assert_eq!(ops, ["abc"]);
    assert_eq!(flags[0], ("image-path".into(), Some("/i".into())));
    assert_eq!(flags[1], ("work-path".into(), Some("/w".into())));
    // Reordered: a flag after the id is still read, value and all.
    let items = classify_verb("checkpoint", &os(&["abc", "--page-server", "h:1"])).unwrap();
    assert_eq!(flag_value(&items, "page-server").unwrap(), "h:1");
    assert_eq!(first_positional(&items).unwrap(), "abc");
    // status-fd is an IntFlag (-1 by default); a bool takes no value.
    assert!(classify_verb("checkpoint", &os(&["--status-fd", "-1", "c"])).is_ok());
    assert!(classify_verb("checkpoint", &os(&["--status-fd", "0x3", "c"])).is_err());
    let (flags, ops) = classified("checkpoint", &["--pre-dump", "c"]).unwrap();
    assert_eq!(flags, [("pre-dump".to_string(), None)]);
    assert_eq!(ops, ["c"]);
    // restore's flags are not checkpoint's.
    assert!(classify_verb("checkpoint", &os(&["--pid-file", "/p", "c"])).is_err());
    assert!(classify_verb("checkpoint", &os(&["--bundle", "/b", "c"])).is_err());
}

#[test]
fn help_after_the_verb_is_a_flag() {
    let items = classify_verb("create", &os(&["c", "--help"])).unwrap();
    assert_eq!(flag_bool(&items, "help"), Some(true));
    let items = classify_verb("start", &os(&["c"])).unwrap();
    assert_eq!(first_positional(&items).unwrap(), "c");
    assert!(classify_verb("start", &os(&["--detach", "c"])).is_err());
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
    for line in &lines[3..] {
        let inv = scan_globals(os(&line.split(' ').collect::<Vec<_>>())).unwrap();
        assert_eq!(inv.error, None);
        assert!(classify_verb(inv.verb(), inv.verb_args()).is_ok(), "{line}");
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

#[test]
fn every_verb_has_one_treatment() {
    for (i, (verb, _)) in VERBS.iter().enumerate() {
        assert!(VERBS[..i].iter().all(|(v, _)| v != verb), "{verb}");
    }
    assert!(is_enforced("checkpoint"));
    assert_eq!(treatment("kill"), Some(Treatment::PassThrough));
    assert_eq!(treatment("hook"), Some(Treatment::Own));
    assert_eq!(treatment("init"), None);
}
