//! `vibe-shim doctor --full`: the hostile battery. Each door is a client
//! flag (or an exec or update into a running container) that tries to
//! loosen the policy, run through the engine and the runtime named; the
//! container runs the probe (`vibe-shim-probe --json`), and the door is
//! judged by the probe's verdicts from inside: closed when vibe-shim
//! refused it (the message names vibe-shim) or when every probe rule
//! holds, OPEN when one does not, ERROR for anything else. One row per
//! door, then one per rule the probe judged. Every container it makes is
//! removed (the runner's drop).

use std::path::{Path, PathBuf};

use vibe_policy::config::PROBE_PATH;
use vibe_probe::report::{self, Check};

use super::{first_line, judge_failure, render, shorten, Docker, Row, Verdict};

/// `doctor --full`'s own options (with `-H`, `--docker`, `--image` and
/// `--worktree` of [`super::DoctorArgs`]).
#[derive(Debug, Default, clap::Args)]
pub struct FullArgs {
    /// With --full: the runtime each container is run with, as the engine
    /// registered it (e.g. the name vibe-shim was installed as) [default:
    /// the engine's default runtime]
    #[arg(long, value_name = "NAME", requires = "full")]
    runtime: Option<String>,
    /// With --full: the static probe to bind into each container at
    /// /vibe-shim-probe (read-only) [default: none, the policy's
    /// filesystem.probe binds it]
    #[arg(long, value_name = "PATH", requires = "full")]
    probe: Option<PathBuf>,
    /// With --full: an argument for the probe (repeatable), e.g.
    /// --probe-arg=--outside=198.51.100.7:443
    #[arg(
        long,
        value_name = "ARG",
        allow_hyphen_values = true,
        requires = "full"
    )]
    probe_arg: Vec<String>,
    /// With --full: an argument added to every container's `run`
    /// (repeatable), e.g. --run-arg=--dns=172.30.63.1
    #[arg(
        long,
        value_name = "ARG",
        allow_hyphen_values = true,
        requires = "full"
    )]
    run_arg: Vec<String>,
    /// With --full: print JSON (one object, the rows in `rows`) instead of
    /// the table
    #[arg(long, requires = "full")]
    json: bool,
}

/// What a door asks of the engine, beyond the battery's own flags.
#[derive(Debug, Clone, PartialEq)]
pub enum Attempt {
    /// `run` with these flags before the image.
    Run(Vec<String>),
    /// `exec` with these flags into a running container.
    Exec(Vec<String>),
    /// `update` with these flags, then a plain `exec` of the probe.
    Update(Vec<String>),
    /// Not tried here, and why.
    NotApplicable(String),
}

/// One door: its name in the table, a short id for its container's name.
#[derive(Debug, Clone, PartialEq)]
pub struct Door {
    pub name: String,
    pub id: &'static str,
    pub attempt: Attempt,
    /// The engine's own error when this host does not offer the door at
    /// all (shared propagation from a private mount): `n/a`, not ERROR.
    pub absent: Option<&'static str>,
}

/// What the battery needs to know of this host and engine to pick its doors.
#[derive(Debug, Clone, Default)]
pub struct Host {
    /// The engine's own socket, when it is a local unix one that exists.
    pub engine_socket: Option<String>,
    /// A block device of this host (`/dev/vda`).
    pub block_device: Option<String>,
    /// `docker run --help` lists `--annotation` (Docker 24 on).
    pub annotations: bool,
    /// `--worktree DIR`: a directory the policy binds read-write.
    pub worktree: Option<String>,
}

fn run_door(name: &str, id: &'static str, flags: &[&str]) -> Door {
    Door {
        name: name.to_string(),
        id,
        attempt: Attempt::Run(flags.iter().map(|f| f.to_string()).collect()),
        absent: None,
    }
}

fn when(name: &str, id: &'static str, attempt: Option<Attempt>, why: &str) -> Door {
    Door {
        name: name.to_string(),
        id,
        attempt: attempt.unwrap_or_else(|| Attempt::NotApplicable(why.to_string())),
        absent: None,
    }
}

/// The battery, in the order of the table (docs/admin/doctor.md lists it).
pub fn doors(host: &Host) -> Vec<Door> {
    let own = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let mut doors = vec![
        run_door("(no flags)", "base", &[]),
        run_door("--privileged", "privileged", &["--privileged"]),
        run_door("--cap-add ALL", "cap-all", &["--cap-add", "ALL"]),
        run_door(
            "--cap-add SYS_ADMIN",
            "cap-sysadmin",
            &["--cap-add", "SYS_ADMIN"],
        ),
        run_door(
            "--security-opt seccomp=unconfined",
            "seccomp",
            &["--security-opt", "seccomp=unconfined"],
        ),
        run_door(
            "--security-opt apparmor=unconfined",
            "apparmor",
            &["--security-opt", "apparmor=unconfined"],
        ),
        run_door(
            "--security-opt no-new-privileges=false",
            "nnp",
            &["--security-opt", "no-new-privileges=false"],
        ),
        run_door(
            "--security-opt systempaths=unconfined",
            "systempaths",
            &["--security-opt", "systempaths=unconfined"],
        ),
    ];
    for ns in ["pid", "net", "ipc", "uts", "userns", "cgroupns"] {
        let flag = format!("--{ns}=host");
        let id = match ns {
            "pid" => "pid-host",
            "net" => "net-host",
            "ipc" => "ipc-host",
            "uts" => "uts-host",
            "userns" => "userns-host",
            _ => "cgroupns-host",
        };
        doors.push(run_door(&flag, id, &[&flag]));
    }
    doors.push(run_door("-v /:/host", "root-bind", &["-v", "/:/host"]));
    doors.push(when(
        "engine socket bound in",
        "socket",
        host.engine_socket.as_ref().map(|s| {
            // --mount, not -v: a missing source is an error, never created.
            Attempt::Run(own(&[
                "--mount",
                &format!("type=bind,source={s},target=/var/run/docker.sock"),
            ]))
        }),
        "the engine is not on a local unix socket",
    ));
    doors.push(when(
        "--device <a host block device>",
        "device",
        host.block_device
            .as_ref()
            .map(|d| Attempt::Run(own(&["--device", &format!("{d}:/dev/xblk")]))),
        "no block device in /sys/block",
    ));
    doors.extend([
        run_door("--pids-limit -1", "pids", &["--pids-limit", "-1"]),
        run_door(
            "--memory 1t --memory-swap -1",
            "memory",
            &["--memory", "1t", "--memory-swap", "-1"],
        ),
        run_door(
            "--ulimit rtprio=99:99",
            "ulimit",
            &["--ulimit", "rtprio=99:99"],
        ),
        run_door(
            "--tmpfs /scratch (no size)",
            "tmpfs",
            &["--tmpfs", "/scratch"],
        ),
        run_door("--shm-size 64g", "shm", &["--shm-size", "64g"]),
        run_door(
            "-e GITHUB_TOKEN=... (a secret-looking env)",
            "env",
            &["-e", "GITHUB_TOKEN=ghp_vibe_shim_doctor"],
        ),
        run_door("--read-only=false", "rw", &["--read-only=false"]),
        run_door("--user 0", "user0", &["--user", "0"]),
        run_door("--group-add 0", "group0", &["--group-add", "0"]),
        run_door(
            "--sysctl net.ipv4.ip_unprivileged_port_start=0",
            "sysctl",
            &["--sysctl", "net.ipv4.ip_unprivileged_port_start=0"],
        ),
    ]);
    doors.push(when(
        "--annotation org.systemd.property.TasksMax=infinity",
        "annotation",
        host.annotations.then(|| {
            Attempt::Run(own(&[
                "--annotation",
                "org.systemd.property.TasksMax=infinity",
            ]))
        }),
        "this engine's run has no --annotation (Docker 24 adds it)",
    ));
    doors.push(Door {
        absent: Some("is not a shared mount"),
        ..when(
            "--mount bind-propagation=rshared (worktree)",
            "propagation",
            host.worktree.as_ref().map(|w| {
                Attempt::Run(own(&[
                    "--mount",
                    &format!("type=bind,source={w},target=/x,bind-propagation=rshared"),
                ]))
            }),
            "give --worktree DIR (a directory the policy binds read-write) to try it",
        )
    });
    doors.extend([
        Door {
            name: "exec --privileged".into(),
            id: "exec-privileged",
            absent: None,
            attempt: Attempt::Exec(own(&["--privileged"])),
        },
        Door {
            name: "exec -u 0".into(),
            id: "exec-root",
            absent: None,
            attempt: Attempt::Exec(own(&["-u", "0"])),
        },
        Door {
            name: "exec -e GITHUB_TOKEN=...".into(),
            id: "exec-env",
            absent: None,
            attempt: Attempt::Exec(own(&["-e", "GITHUB_TOKEN=ghp_vibe_shim_doctor"])),
        },
        Door {
            name: "update --pids-limit -1".into(),
            id: "update-pids",
            absent: None,
            attempt: Attempt::Update(own(&["--pids-limit", "-1"])),
        },
        Door {
            name: "update --memory 1t --memory-swap -1".into(),
            id: "update-memory",
            absent: None,
            attempt: Attempt::Update(own(&["--memory", "1t", "--memory-swap", "-1"])),
        },
    ]);
    doors
}

/// What became of one door's container.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// vibe-shim refused it: what it said.
    Refused(String),
    /// The probe ran and gave these verdicts.
    Ran(Vec<Check>),
    /// Anything else: why the door is not proven closed.
    Error(String),
    NotApplicable(String),
}

/// A probe container's outcome from its command's output: the probe's
/// JSON (the last line that is one) when it printed it, whatever the exit
/// code (1 when a rule fails); else a refusal naming vibe-shim; else `n/a`
/// when the engine's error has the door's `absent` marker; else an error.
pub fn outcome(ok: bool, stdout: &str, stderr: &str, absent: Option<&str>) -> Outcome {
    if let Some(checks) = stdout.lines().rev().find_map(report::from_json) {
        return Outcome::Ran(checks);
    }
    // `docker exec` prints the runtime's failure on stdout. The probe's
    // own name (its path, its bind's source) is no refusal.
    let said = format!("{stderr}\n{stdout}").replace("vibe-shim-probe", "<probe>");
    match (ok, judge_failure(&said)) {
        (true, _) => Outcome::Error(format!(
            "ran, but the probe gave no verdict: {:?}",
            shorten(first_line(stdout), 120)
        )),
        (false, (Verdict::Closed, why)) => Outcome::Refused(why),
        (false, (_, why)) if absent.is_some_and(|a| said.contains(a)) => {
            Outcome::NotApplicable(format!("not offered on this host: {why}"))
        }
        (false, (_, why)) => Outcome::Error(why),
    }
}

/// A door's rows: its own (closed on a refusal or when every rule holds),
/// then one per probe rule.
pub fn door_rows(door: &str, outcome: Outcome) -> Vec<Row> {
    let row = |rule: Option<&str>, verdict, evidence: String| Row {
        door: door.to_string(),
        rule: rule.map(str::to_string),
        verdict,
        evidence,
    };
    match outcome {
        Outcome::Refused(why) => vec![row(None, Verdict::Closed, why)],
        Outcome::Error(why) => vec![row(None, Verdict::Error, why)],
        Outcome::NotApplicable(why) => vec![row(None, Verdict::NotApplicable, why)],
        Outcome::Ran(checks) if checks.is_empty() => {
            vec![row(None, Verdict::Error, "the probe judged no rule".into())]
        }
        Outcome::Ran(checks) => {
            let failing = report::failing(&checks);
            let mut rows = vec![match failing.is_empty() {
                true => row(
                    None,
                    Verdict::Closed,
                    format!("ran; every probe rule holds ({})", checks.len()),
                ),
                false => row(
                    None,
                    Verdict::Open,
                    format!(
                        "ran; {} of {} rules do not hold: {}",
                        failing.len(),
                        checks.len(),
                        failing.join(", ")
                    ),
                ),
            }];
            rows.extend(checks.iter().map(|c| {
                let verdict = match c.verdict {
                    report::Verdict::Pass => Verdict::Closed,
                    report::Verdict::Fail => Verdict::Open,
                    report::Verdict::Skip => Verdict::NotApplicable,
                };
                row(
                    Some(&c.rule),
                    verdict,
                    format!("{}: {}", c.verdict.as_str(), c.observed),
                )
            }));
            rows
        }
    }
}

/// `--json`: the run's context, the overall verdict, every row.
pub fn json(context: &serde_json::Value, rows: &[Row]) -> String {
    let verdict = match super::exit_code(rows) {
        0 => "closed",
        _ => "open",
    };
    let rows: Vec<_> = rows
        .iter()
        .map(|r| {
            serde_json::json!({
                "door": r.door,
                "rule": r.rule,
                "result": r.verdict.label(),
                "evidence": r.evidence,
            })
        })
        .collect();
    serde_json::json!({"battery": context, "verdict": verdict, "rows": rows}).to_string()
}

// ---------------------------------------------------------------------------
// Plumbing: the engine.

/// How each container gets the probe, and what every `run` carries.
struct Battery<'a> {
    runtime: Option<String>,
    probe_mount: Option<String>,
    run_args: &'a [String],
    probe_args: Vec<String>,
}

impl Battery<'_> {
    /// `run --name NAME --label LABEL [--runtime] [-v probe] [run args] FLAGS`.
    fn run_flags(&self, name: &str, flags: &[String]) -> Vec<String> {
        let mut args: Vec<String> = ["run", "--name", name, "--label", super::LABEL]
            .iter()
            .map(|s| s.to_string())
            .collect();
        args.extend(self.runtime.iter().map(|r| format!("--runtime={r}")));
        args.extend(
            self.probe_mount
                .iter()
                .flat_map(|m| ["-v".to_string(), m.clone()]),
        );
        args.extend(self.run_args.iter().cloned());
        args.extend(flags.iter().cloned());
        args
    }

    /// The probe's command line inside the container.
    fn probe(&self) -> Vec<String> {
        let mut args = vec![PROBE_PATH.to_string(), "--json".to_string()];
        args.extend(self.probe_args.iter().cloned());
        args
    }
}

fn call(d: &Docker, args: &[String]) -> super::Out {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    d.run(&args)
}

fn probe_outcome(out: &super::Out, absent: Option<&str>) -> Outcome {
    outcome(
        out.ok,
        &String::from_utf8_lossy(&out.stdout),
        &out.stderr,
        absent,
    )
}

/// The container exec and update doors go into: running `sleep`,
/// started as the baseline door is. `Err` is the outcome for each of them.
fn sleeper(d: &mut Docker, b: &Battery) -> Result<String, Outcome> {
    let name = d.name("sleeper");
    let mut args = b.run_flags(&name, &["-d".to_string()]);
    args.extend([d.image.clone(), "sleep".into(), "3600".into()]);
    let out = call(d, &args);
    match out.ok {
        true => Ok(name),
        false => Err(match judge_failure(&out.stderr) {
            (Verdict::Closed, why) => Outcome::Error(format!(
                "the container to go into was refused, as no door should be: {why}"
            )),
            (_, why) => Outcome::Error(format!("the container to go into: {why}")),
        }),
    }
}

fn try_door(
    d: &mut Docker,
    b: &Battery,
    door: &Door,
    running: &mut Option<Result<String, Outcome>>,
) -> Outcome {
    let exec = |d: &Docker, name: &str, flags: &[String]| {
        let mut args = vec!["exec".to_string()];
        args.extend(flags.iter().cloned());
        args.push(name.to_string());
        args.extend(b.probe());
        probe_outcome(&call(d, &args), None)
    };
    let mut into_running = |d: &mut Docker| running.get_or_insert_with(|| sleeper(d, b)).clone();
    match &door.attempt {
        Attempt::NotApplicable(why) => Outcome::NotApplicable(why.clone()),
        Attempt::Run(flags) => {
            let name = d.name(door.id);
            let mut args = b.run_flags(&name, flags);
            args.push(d.image.clone());
            args.extend(b.probe());
            probe_outcome(&call(d, &args), door.absent)
        }
        Attempt::Exec(flags) => match into_running(d) {
            Ok(name) => exec(d, &name, flags),
            Err(outcome) => outcome,
        },
        Attempt::Update(flags) => {
            let name = match into_running(d) {
                Ok(name) => name,
                Err(outcome) => return outcome,
            };
            let mut args = vec!["update".to_string()];
            args.extend(flags.iter().cloned());
            args.push(name.clone());
            let out = call(d, &args);
            match (out.ok, judge_failure(&out.stderr)) {
                (true, _) => exec(d, &name, &[]),
                (false, (Verdict::Closed, why)) => Outcome::Refused(why),
                (false, (_, why)) => Outcome::Error(format!("update {why}")),
            }
        }
    }
}

/// A real block device of this host, as the device door passes it.
fn block_device() -> Option<String> {
    let mut names: Vec<String> = std::fs::read_dir("/sys/block")
        .ok()?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with("loop") && !n.starts_with("ram"))
        .filter(|n| Path::new(&format!("/dev/{n}")).exists())
        .collect();
    names.sort();
    names.first().map(|n| format!("/dev/{n}"))
}

/// The engine's socket, when `-H` (or $DOCKER_HOST, or the default) names
/// a local unix one that is there.
fn engine_socket(host: Option<&std::ffi::OsStr>) -> Option<String> {
    let host = host.map_or("unix:///var/run/docker.sock".into(), |h| {
        h.to_string_lossy()
    });
    let path = host.strip_prefix("unix://")?;
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(path)
        .is_ok_and(|m| m.file_type().is_socket())
        .then(|| path.to_string())
}

/// How the probe gets in: `--probe PATH` as a read-only bind, else the
/// policy's `filesystem.probe` (vibe-shim binds it itself). `Err` is the
/// usage error.
fn probe_mount(probe: Option<&Path>, config_path: &Path) -> Result<Option<String>, String> {
    if let Some(p) = probe {
        let abs = std::path::absolute(p).map_err(|e| format!("--probe {}: {e}", p.display()))?;
        if !abs.is_file() {
            return Err(format!("--probe {}: not a file", abs.display()));
        }
        return Ok(Some(format!("{}:{PROBE_PATH}:ro", abs.display())));
    }
    match crate::policy_file::load(config_path) {
        Ok(policy) if policy.filesystem.probe.is_some() => Ok(None),
        Ok(_) => Err(format!(
            "{} sets no filesystem.probe: give --probe PATH (the static vibe-shim-probe)",
            config_path.display()
        )),
        Err(e) => Err(format!(
            "cannot read {} for its filesystem.probe ({e}): give --probe PATH",
            config_path.display()
        )),
    }
}

/// Runs the battery through `d`; the exit code (1 when a row is OPEN or
/// ERROR, 2 on a usage error).
pub(super) fn run(
    d: &mut Docker,
    config_path: &Path,
    worktree: Option<&Path>,
    args: &FullArgs,
) -> i32 {
    let probe_mount = match probe_mount(args.probe.as_deref(), config_path) {
        Ok(m) => m,
        Err(why) => {
            eprintln!("vibe-shim doctor --full: {why}");
            return 2;
        }
    };
    let version = d.run(&["version", "--format", "{{.Server.Version}}"]);
    let version_text = String::from_utf8_lossy(&version.stdout).trim().to_string();
    if !version.ok || version_text.is_empty() {
        eprintln!(
            "vibe-shim doctor --full: cannot ask the engine its version: {}",
            first_line(&version.stderr)
        );
        return 1;
    }
    let help = d.run(&["run", "--help"]);
    let host = Host {
        engine_socket: engine_socket(d.host.as_deref()),
        block_device: block_device(),
        annotations: String::from_utf8_lossy(&help.stdout).contains("--annotation"),
        worktree: worktree.map(|w| w.display().to_string()),
    };
    let battery = Battery {
        runtime: args.runtime.clone(),
        probe_mount,
        run_args: &args.run_arg,
        probe_args: args.probe_arg.clone(),
    };
    let runtime = args.runtime.as_deref().unwrap_or("(the engine's default)");
    let context = serde_json::json!({
        "engine": format!("docker {version_text}"),
        "runtime": args.runtime,
        "image": d.image,
        "probe": battery.probe_mount.as_deref().unwrap_or("the policy's filesystem.probe"),
        "canaries": format!("{}-*", d.prefix),
    });
    if !args.json {
        println!(
            "# engine docker {version_text}, runtime {runtime}, image {}, canaries {}-*",
            d.image, d.prefix
        );
    }
    let mut running = None;
    let mut rows = Vec::new();
    for door in doors(&host) {
        let outcome = try_door(d, &battery, &door, &mut running);
        rows.extend(door_rows(&door.name, outcome));
    }
    d.remove_all();
    match args.json {
        true => println!("{}", json(&context, &rows)),
        false => print!("{}", render(&rows)),
    }
    super::exit_code(&rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::borrow::Cow;

    fn check(rule: &'static str, verdict: report::Verdict) -> Check {
        Check {
            rule: Cow::Borrowed(rule),
            verdict,
            observed: format!("seen for {rule}"),
        }
    }

    fn probe_json(checks: &[Check]) -> String {
        report::json(checks)
    }

    #[test]
    fn a_door_that_ran_is_judged_by_the_probes_verdicts() {
        use report::Verdict::*;
        let held = [check("caps", Pass), check("net.outside", Skip)];
        let rows = door_rows("--cap-add ALL", outcome(true, &probe_json(&held), "", None));
        assert_eq!(rows.len(), 3);
        assert_eq!(
            (rows[0].rule.as_deref(), &rows[0].verdict),
            (None, &Verdict::Closed)
        );
        assert_eq!(rows[1].rule.as_deref(), Some("caps"));
        assert_eq!(rows[1].verdict, Verdict::Closed);
        assert_eq!(rows[1].evidence, "pass: seen for caps");
        // A skipped rule does not count either way.
        assert_eq!(rows[2].verdict, Verdict::NotApplicable);
        assert_eq!(super::super::exit_code(&rows), 0);

        // The probe exits 1 when a rule fails: its verdicts still count.
        let failed = [check("caps", Fail), check("nnp", Pass)];
        let out = format!("some image's noise\n{}\n", probe_json(&failed));
        let rows = door_rows("--cap-add ALL", outcome(false, &out, "exit status 1", None));
        assert_eq!(rows[0].verdict, Verdict::Open);
        assert!(
            rows[0].evidence.contains("1 of 2 rules do not hold: caps"),
            "{:?}",
            rows[0]
        );
        assert_eq!(rows[1].verdict, Verdict::Open);
        assert_eq!(rows[2].verdict, Verdict::Closed);
        assert_eq!(super::super::exit_code(&rows), 1);
    }

    #[test]
    fn a_door_is_closed_without_a_verdict_only_by_a_vibe_shim_refusal() {
        let refused = "docker: Error response from daemon: failed to create shim task: OCI runtime create failed: vibe-shim: namespaces: no pid namespace entry: unknown";
        let rows = door_rows("--pid=host", outcome(false, "", refused, None));
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].verdict, Verdict::Closed);
        assert!(
            rows[0]
                .evidence
                .starts_with("refused: vibe-shim: namespaces"),
            "{:?}",
            rows[0]
        );
        // runc's own failure is not a closed door.
        let runc = "docker: Error response from daemon: OCI runtime create failed: runc create failed: unable to apply caps: operation not permitted: unknown";
        let rows = door_rows("--cap-add ALL", outcome(false, "", runc, None));
        assert_eq!(rows[0].verdict, Verdict::Error);
        // docker exec says it on stdout.
        let exec = "OCI runtime exec failed: exec failed: vibe-shim: exec: refused\n";
        assert_eq!(
            door_rows("x", outcome(false, exec, "", None))[0].verdict,
            Verdict::Closed
        );
        let exec = "OCI runtime exec failed: exec failed: unable to apply caps: operation not permitted: unknown\n";
        let rows = door_rows("x", outcome(false, exec, "", None));
        assert_eq!(rows[0].verdict, Verdict::Error);
        assert!(
            rows[0].evidence.contains("unable to apply caps"),
            "{:?}",
            rows[0]
        );
        // Ran, but no probe verdict (no probe in the container, say).
        let rows = door_rows("(no flags)", outcome(true, "hello\n", "", None));
        assert_eq!(rows[0].verdict, Verdict::Error);
        assert!(rows[0].evidence.contains("no verdict"), "{:?}", rows[0]);
        let missing = "docker: Error response from daemon: OCI runtime create failed: runc create failed: exec: \"/vibe-shim-probe\": stat /vibe-shim-probe: no such file or directory: unknown";
        assert_eq!(
            door_rows("x", outcome(false, "", missing, None))[0].verdict,
            Verdict::Error
        );
        // A probe that judged nothing proves nothing.
        let rows = door_rows("x", outcome(true, &probe_json(&[]), "", None));
        assert_eq!(rows[0].verdict, Verdict::Error);
        // The engine itself does not offer the door on this host.
        let private = "docker: Error response from daemon: path /srv/wt is mounted on / but it is not a shared mount.";
        let marker = Some("is not a shared mount");
        let rows = door_rows("x", outcome(false, "", private, marker));
        assert_eq!(rows[0].verdict, Verdict::NotApplicable);
        assert_eq!(
            door_rows("x", outcome(false, "", runc, marker))[0].verdict,
            Verdict::Error
        );
        let rows = door_rows("x", Outcome::NotApplicable("why".into()));
        assert_eq!(super::super::exit_code(&rows), 0);
    }

    /// The door: "vibe-shim" anywhere in the engine's error was read as a
    /// refusal, so a vibe-shim that crashed (containerd names the runtime
    /// binary), or runc failing on a path under /run/vibe-shim or
    /// /etc/vibe-shim, made the door read closed without any verdict.
    #[test]
    fn only_a_refusal_in_vibe_shims_words_closes_a_door_without_a_verdict() {
        for failure in [
            "docker: Error response from daemon: failed to create task for container: failed to create shim task: OCI runtime create failed: /usr/local/bin/vibe-shim did not terminate successfully: exit status 101: unknown",
            "docker: Error response from daemon: failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: error during container init: error mounting \"/run/vibe-shim/containers/%2Frun%2Fdocker/abc/notice\" to rootfs at \"/etc/vibe-shim/notice\": no such device: unknown",
            "docker: Error response from daemon: OCI runtime create failed: runc create failed: mkdir /etc/vibe-shim: read-only file system: unknown",
            "docker: Error response from daemon: unknown or invalid runtime name: vibe-shim-strict",
        ] {
            let rows = door_rows("x", outcome(false, "", failure, None));
            assert_eq!(rows[0].verdict, Verdict::Error, "{failure}: {:?}", rows[0]);
        }
        // vibe-shim's own refusal, and the API gate's, still close it.
        for refusal in [
            "docker: Error response from daemon: OCI runtime create failed: vibe-shim: namespaces: no pid namespace entry: unknown",
            "Error response from daemon: authorization denied by plugin vibe-shim: vibe-shim: authz-binds: bind mount source is not under an allowed path",
            "OCI runtime exec failed: exec failed: vibe-shim: exec: refused",
        ] {
            let rows = door_rows("x", outcome(false, "", refusal, None));
            assert_eq!(rows[0].verdict, Verdict::Closed, "{refusal}: {:?}", rows[0]);
        }
    }

    #[test]
    fn the_table_has_a_rule_column_and_the_json_every_row() {
        use report::Verdict::*;
        let mut rows = door_rows(
            "--user 0",
            outcome(true, &probe_json(&[check("caps", Pass)]), "", None),
        );
        rows.extend(door_rows(
            "--pid=host",
            Outcome::Refused("refused: vibe-shim: x".into()),
        ));
        let table = render(&rows);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(
            lines[0].split_whitespace().collect::<Vec<_>>(),
            ["DOOR", "RULE", "RESULT", "EVIDENCE"]
        );
        assert_eq!(
            lines[2].split_whitespace().take(3).collect::<Vec<_>>(),
            ["--user", "0", "caps"]
        );
        assert!(
            lines[3].starts_with("--pid=host  -     closed  refused"),
            "{table}"
        );
        let v: serde_json::Value =
            serde_json::from_str(&json(&serde_json::json!({"runtime": "runc"}), &rows)).unwrap();
        assert_eq!(v["verdict"], "closed");
        assert_eq!(v["battery"]["runtime"], "runc");
        assert_eq!(v["rows"][1]["rule"], "caps");
        assert_eq!(v["rows"][0]["rule"], serde_json::Value::Null);
        assert_eq!(v["rows"][2]["result"], "closed");
        rows.push(Row {
            door: "d".into(),
            rule: None,
            verdict: Verdict::Open,
            evidence: String::new(),
        });
        let v: serde_json::Value =
            serde_json::from_str(&json(&serde_json::json!({}), &rows)).unwrap();
        assert_eq!(v["verdict"], "open");
    }

    #[test]
    fn the_doors_that_need_something_of_the_host_say_so_without_it() {
        let bare = doors(&Host::default());
        let na: Vec<&str> = bare
            .iter()
            .filter(|d| matches!(d.attempt, Attempt::NotApplicable(_)))
            .map(|d| d.id)
            .collect();
        assert_eq!(na, ["socket", "device", "annotation", "propagation"]);
        let host = Host {
            engine_socket: Some("/run/x/docker.sock".into()),
            block_device: Some("/dev/vda".into()),
            annotations: true,
            worktree: Some("/srv/wt".into()),
        };
        let all = doors(&host);
        assert!(all
            .iter()
            .all(|d| !matches!(d.attempt, Attempt::NotApplicable(_))));
        let socket = all.iter().find(|d| d.id == "socket").unwrap();
        assert_eq!(
            socket.attempt,
            Attempt::Run(vec![
                "--mount".into(),
                "type=bind,source=/run/x/docker.sock,target=/var/run/docker.sock".into()
            ])
        );
        // Every door's container has a name of its own.
        let mut ids: Vec<&str> = all.iter().map(|d| d.id).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), all.len());
    }

    #[test]
    fn every_container_carries_the_label_the_runtime_and_the_probe() {
        let run_args = vec!["--dns=172.30.63.1".to_string()];
        let b = Battery {
            runtime: Some("vibe-shim".into()),
            probe_mount: Some("/opt/p:/vibe-shim-probe:ro".into()),
            run_args: &run_args,
            probe_args: vec!["--timeout-ms=500".into()],
        };
        assert_eq!(
            b.run_flags("c1", &["--user".into(), "0".into()]),
            [
                "run",
                "--name",
                "c1",
                "--label",
                "vibe-shim-doctor",
                "--runtime=vibe-shim",
                "-v",
                "/opt/p:/vibe-shim-probe:ro",
                "--dns=172.30.63.1",
                "--user",
                "0"
            ]
        );
        assert_eq!(
            b.probe(),
            ["/vibe-shim-probe", "--json", "--timeout-ms=500"]
        );
        let none = Battery {
            runtime: None,
            probe_mount: None,
            run_args: &[],
            probe_args: vec![],
        };
        assert_eq!(
            none.run_flags("c2", &[]),
            ["run", "--name", "c2", "--label", "vibe-shim-doctor"]
        );
    }

    fn parse_args(args: &[&str]) -> Result<super::super::DoctorArgs, clap::Error> {
        use clap::Parser;
        super::super::DoctorArgs::try_parse_from(
            std::iter::once("doctor").chain(args.iter().copied()),
        )
    }

    #[test]
    fn options() {
        let o = parse_args(&[
            "--full",
            "--runtime",
            "runc",
            "--probe=/p",
            "--probe-arg",
            "--outside=198.51.100.7:443",
            "--run-arg=--dns=192.0.2.53",
            "--json",
        ])
        .unwrap();
        assert!(o.full);
        assert_eq!(o.battery.runtime.as_deref(), Some("runc"));
        assert_eq!(o.battery.probe, Some(PathBuf::from("/p")));
        assert_eq!(o.battery.probe_arg, ["--outside=198.51.100.7:443"]);
        assert_eq!(o.battery.run_arg, ["--dns=192.0.2.53"]);
        assert!(o.battery.json);
        // The battery's options mean nothing to plain doctor.
        for alone in [&["--runtime", "runc"][..], &["--json"], &["--probe", "/p"]] {
            assert!(parse_args(alone).is_err(), "{alone:?}");
        }
        let plain = parse_args(&[]).unwrap();
        assert!(!plain.full && plain.battery.runtime.is_none());
    }

    #[test]
    fn the_probe_comes_from_the_option_or_the_policy() {
        let dir = tempfile::tempdir().unwrap();
        let probe = dir.path().join("vibe-shim-probe");
        std::fs::write(&probe, "").unwrap();
        assert_eq!(
            probe_mount(Some(&probe), Path::new("/nonexistent")),
            Ok(Some(format!("{}:/vibe-shim-probe:ro", probe.display())))
        );
        assert!(probe_mount(Some(&dir.path().join("missing")), Path::new("/x")).is_err());
        let why = probe_mount(None, &dir.path().join("none.toml")).unwrap_err();
        assert!(why.contains("give --probe PATH"), "{why}");
    }
}
