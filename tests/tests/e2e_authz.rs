//! End-to-end: the Docker API gate (`vibe-shim authz`) in front of a private
//! dockerd of its own, started by `tests/env/authz.sh up` with
//! `--authorization-plugin` (tests/run.sh's e2e-authz step does that and
//! sets VIBE_AUTHZ_E2E=1; the general e2e steps leave this suite out).
//! Without that env every test fails, naming the command that sets it up: a
//! gate test that passes without a gate would prove nothing. Refusals are
//! checked as the client sees them and by host evidence; the allowed
//! container is judged from inside.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{RwLock, RwLockReadGuard};
use std::time::Duration;

use vibe_shim_tests::docker::{runtime, IMAGE};
use vibe_shim_tests::harness::{run_bounded, unique_name, Output};

/// The plugin-killed test stops the plugin: it runs alone.
static PLUGIN: RwLock<()> = RwLock::new(());

struct AuthzEnv {
    state: String,
    runtime: String,
    /// `host` (Docker 20.10) or `sid` (Docker 28.5).
    stack: String,
    docker_host: String,
    plugin: String,
    plugin_log: PathBuf,
    script: PathBuf,
}

/// The authz env; panics outside tests/env/authz.sh's run, so no test of
/// the gate passes green without the gate in front of dockerd.
fn authz_env() -> AuthzEnv {
    assert_eq!(
        std::env::var("VIBE_AUTHZ_E2E").as_deref(),
        Ok("1"),
        "VIBE_AUTHZ_E2E=1 and the authz env are required: run `tests/env/authz.sh e2e` as root \
         (tests/run.sh's e2e-authz step)"
    );
    let state = std::env::var("VIBE_AUTHZ_STATE").unwrap_or_else(|_| "/run/vibe-authz".into());
    let file = Path::new(&state).join("env");
    let text = std::fs::read_to_string(&file)
        .unwrap_or_else(|e| panic!("{}: {e}: run tests/env/authz.sh up", file.display()));
    let get = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("{key} missing from {}", file.display()))
            .to_string()
    };
    assert_eq!(
        get("AUTHZ_RUNTIME"),
        runtime(),
        "the authz dockerd registers another runtime than runtime(): set VIBE_TEST_RUNTIME alike"
    );
    AuthzEnv {
        state,
        runtime: get("AUTHZ_RUNTIME"),
        stack: text
            .lines()
            .find_map(|l| l.strip_prefix("AUTHZ_STACK="))
            .unwrap_or("host")
            .to_string(),
        docker_host: get("DOCKER_HOST"),
        plugin: get("AUTHZ_PLUGIN"),
        plugin_log: PathBuf::from(get("AUTHZ_PLUGIN_LOG")),
        script: PathBuf::from(get("AUTHZ_SCRIPT")),
    }
}

fn shared() -> RwLockReadGuard<'static, ()> {
    PLUGIN.read().unwrap_or_else(|e| e.into_inner())
}

impl AuthzEnv {
    fn docker(&self, args: &[&str]) -> Output {
        self.docker_timeout(args, Duration::from_secs(90))
    }

    fn docker_timeout(&self, args: &[&str], timeout: Duration) -> Output {
        self.docker_env(args, &[], timeout)
    }

    fn docker_env(&self, args: &[&str], vars: &[(&str, &str)], timeout: Duration) -> Output {
        let mut cmd = Command::new("docker");
        cmd.env_remove("DOCKER_CONTEXT")
            .env_remove("DOCKER_CONFIG")
            .envs(vars.iter().copied())
            .arg("-H")
            .arg(&self.docker_host)
            .args(args);
        run_bounded(cmd, None, timeout)
    }

    /// Raw API call with one Content-Type and curl's `--data-binary` (a
    /// literal, or `@file`); the body then the status, as `api`.
    fn api_raw(&self, path: &str, data: &str, content_type: &str) -> (u16, String) {
        let socket = self.docker_host.trim_start_matches("unix://");
        let mut cmd = Command::new("curl");
        cmd.args([
            "-sS",
            "--max-time",
            "60",
            "--unix-socket",
            socket,
            "-X",
            "POST",
            "-H",
            &format!("Content-Type: {content_type}"),
            "--data-binary",
            data,
            "-w",
            "\n%{http_code}",
            &format!("http://docker{path}"),
        ]);
        let out = run_bounded(cmd, None, Duration::from_secs(90));
        let (text, code) = out.stdout.rsplit_once('\n').unwrap_or(("", "0"));
        (code.trim().parse().unwrap_or(0), text.to_string())
    }

    /// A raw API answer that is this plugin's refusal under `rule`.
    fn assert_api_refused(&self, (code, text): &(u16, String), rule: &str, what: &str) {
        assert_eq!(*code, 403, "{what}: {text}");
        let want = format!(
            "authorization denied by plugin {}: vibe-shim: {rule}: ",
            self.plugin
        );
        assert!(text.contains(&want), "{what}: want {want:?}, got {text}");
    }

    /// Raw API call: `curl --unix-socket`, printing the body then the status.
    fn api(&self, method: &str, path: &str, body: &str) -> (u16, String) {
        self.api_with(method, path, body, "Content-Type: application/json")
    }

    fn api_with(&self, method: &str, path: &str, body: &str, header: &str) -> (u16, String) {
        let socket = self.docker_host.trim_start_matches("unix://");
        let mut cmd = Command::new("curl");
        cmd.args([
            "-sS",
            "--unix-socket",
            socket,
            "-X",
            method,
            "-H",
            "Content-Type: application/json",
            "-H",
            header,
            "--data-binary",
            body,
            "-w",
            "\n%{http_code}",
            &format!("http://docker{path}"),
        ]);
        let out = run_bounded(cmd, None, Duration::from_secs(60));
        let (text, code) = out.stdout.rsplit_once('\n').unwrap_or(("", "0"));
        (code.trim().parse().unwrap_or(0), text.to_string())
    }

    /// The refusal line the docker CLI prints for this plugin.
    fn assert_refused(&self, out: &Output, rule: &str) {
        assert!(!out.success(), "not refused: {out}");
        let prefix = format!(
            "Error response from daemon: authorization denied by plugin {}: vibe-shim: {rule}: ",
            self.plugin
        );
        let line = out
            .stderr
            .lines()
            .find(|l| l.contains("authorization denied"))
            .unwrap_or_else(|| panic!("no refusal line: {out}"));
        assert!(
            line.trim_start_matches("docker: ").starts_with(&prefix),
            "want {prefix:?}..., got {line:?}"
        );
    }

    /// `tests/env/authz.sh VERB` with the same plugin, state and runtime as
    /// the env's `up`, and `plugin_args` for a plugin it starts.
    fn script(&self, verb: &str, plugin_args: &str) -> Output {
        let mut cmd = Command::new("bash");
        cmd.arg(&self.script)
            .arg(verb)
            .env("VIBE_AUTHZ_STATE", &self.state)
            .env("VIBE_AUTHZ_PLUGIN", &self.plugin)
            .env("VIBE_TEST_RUNTIME", &self.runtime)
            .env("VIBE_AUTHZ_PLUGIN_ARGS", plugin_args);
        run_bounded(cmd, None, Duration::from_secs(60))
    }

    fn plugin_log_has(&self, needle: &str) -> bool {
        std::fs::read_to_string(&self.plugin_log)
            .unwrap_or_default()
            .lines()
            .any(|l| l.contains("\"level\":\"deny\"") && l.contains(needle))
    }
}

/// `docker rm -f` on drop.
struct Named<'a> {
    env: &'a AuthzEnv,
    name: String,
    volume: bool,
}

impl Named<'_> {
    /// `docker VERB… --name NAME --network none FLAGS… IMAGE CMD…`.
    fn docker(&self, verb: &[&str], flags: &[&str], cmd: &[&str]) -> Output {
        let mut args = verb.to_vec();
        args.extend(["--name", &self.name, "--network", "none"]);
        args.extend_from_slice(flags);
        args.push(IMAGE);
        args.extend_from_slice(cmd);
        self.env.docker(&args)
    }
}

impl Drop for Named<'_> {
    fn drop(&mut self) {
        let args: &[&str] = if self.volume {
            &["volume", "rm", "-f", &self.name]
        } else {
            &["rm", "-f", &self.name]
        };
        let _ = self.env.docker(args);
    }
}

fn named<'a>(env: &'a AuthzEnv, tag: &str) -> Named<'a> {
    Named {
        env,
        name: unique_name(tag),
        volume: false,
    }
}

/// `docker volume create` of a local volume that binds host `device`.
fn bind_volume(env: &AuthzEnv, name: &str, device: &str) -> Output {
    let device = format!("device={device}");
    env.docker(&[
        "volume",
        "create",
        "-d",
        "local",
        "-o",
        "type=none",
        "-o",
        "o=bind",
        "-o",
        &device,
        name,
    ])
}

const WORKTREES: &str = "/var/tmp/vibe-test/worktrees";
/// Outside the allowlist, and the same path in the sid tree's namespace.
const SHARED: &str = "/var/tmp/vibe-test";

#[test]
#[ignore = "needs root and the authz env: run tests/env/authz.sh e2e"]
fn bind_outside_the_allowlist_is_refused_in_one_line() {
    let env = authz_env();
    let _g = shared();
    let c = named(&env, "authz-etc");
    let out = c.docker(&["run", "--rm"], &["-v", "/etc:/x"], &["cat", "/x/shadow"]);
    env.assert_refused(&out, "authz-binds");
    assert!(out.stderr.contains("(/HostConfig/Binds/0: /etc)"), "{out}");
    assert!(!out.stdout.contains("root:"), "{out}");
    assert!(
        env.plugin_log_has("/HostConfig/Binds/0"),
        "no denial line in the plugin log"
    );
}

#[test]
#[ignore = "needs root and the authz env: run tests/env/authz.sh e2e"]
fn refused_bind_source_directory_is_never_created() {
    let env = authz_env();
    let _g = shared();
    // /var/tmp/vibe-test is the same directory for the sid tree's dockerd.
    let parent = PathBuf::from(SHARED).join(unique_name("authz-missing"));
    let source = parent.join("sub");
    let c = named(&env, "authz-missing");
    let bind = format!("{}:/x", source.display());
    let out = c.docker(&["run", "--rm"], &["-v", &bind], &["true"]);
    env.assert_refused(&out, "authz-binds");
    assert!(
        !source.exists() && !parent.exists(),
        "dockerd created {}",
        source.display()
    );
}

#[test]
#[ignore = "needs root and the authz env: run tests/env/authz.sh e2e"]
fn mount_type_bind_and_volume_bind_options_are_refused() {
    let env = authz_env();
    let _g = shared();
    let c = named(&env, "authz-mount");
    let out = c.docker(
        &["run", "--rm"],
        &["--mount", "type=bind,source=/etc,target=/x"],
        &["true"],
    );
    env.assert_refused(&out, "authz-binds");
    let out = env.docker(&[
        "run", "--rm", "--name", &c.name, "--network", "none", "--mount",
        "type=volume,target=/x,volume-driver=local,volume-opt=type=none,volume-opt=o=bind,volume-opt=device=/etc",
        IMAGE, "true",
    ]);
    env.assert_refused(&out, "authz-volume");
    let v = Named {
        env: &env,
        name: unique_name("authz-vol"),
        volume: true,
    };
    let out = bind_volume(&env, &v.name, "/etc");
    env.assert_refused(&out, "authz-volume");
    let listed = env.docker(&["volume", "ls", "-q"]);
    assert!(!listed.stdout.lines().any(|l| l == v.name), "{listed}");
}

#[test]
#[ignore = "needs root and the authz env: run tests/env/authz.sh e2e"]
fn go_folded_and_duplicate_keys_cannot_smuggle_binds() {
    let env = authz_env();
    let _g = shared();
    let path = "/v1.41/containers/create";
    let image = IMAGE;
    for (body, rule) in [
        (
            format!(r#"{{"Image":"{image}","hostconfig":{{"Binds":["/etc:/x"]}}}}"#),
            "json-keys",
        ),
        (
            format!(
                r#"{{"Image":"{image}","HostConfig":{{"NetworkMode":"none"}},"HostConfig":{{"Binds":["/etc:/x"]}}}}"#
            ),
            "json-keys",
        ),
        (
            format!("{{\"Image\":\"{image}\",\"HostConfig\":{{\"Bind\u{017F}\":[\"/etc:/x\"]}}}}"),
            "json-keys",
        ),
        // moby 20.10 also reads HostConfig fields at the top level.
        (
            format!(r#"{{"Image":"{image}","Binds":["/etc:/x"]}}"#),
            "authz-binds",
        ),
        (
            format!(r#"{{"Image":"{image}","HostConfig":{{"Binds":["/%65tc:/x"]}}}}"#),
            "authz-binds",
        ),
    ] {
        let (code, text) = env.api("POST", path, &body);
        assert_eq!(code, 403, "{body} -> {text}");
        let want = format!(
            "authorization denied by plugin {}: vibe-shim: {rule}: ",
            env.plugin
        );
        assert!(text.contains(&want), "{body} -> {text}");
    }
    // A chunked body (no Content-Length): dockerd 20.10 shows it to the
    // plugin; were it not shown, the gate would refuse it unseen.
    let body = format!(r#"{{"Image":"{image}","HostConfig":{{"Binds":["/etc:/x"]}}}}"#);
    let (code, text) = env.api_with("POST", path, &body, "Transfer-Encoding: chunked");
    assert_eq!(code, 403, "{text}");
    assert!(
        text.contains("vibe-shim: authz-binds: ") || text.contains("vibe-shim: authz-body: "),
        "{text}"
    );
    // Over 1 MiB dockerd shows the plugin no body at all: refused unseen.
    let big = PathBuf::from("/var/tmp").join(unique_name("authz-big.json"));
    let padded = format!(
        r#"{{"Image":"{image}",{}"HostConfig":{{"Binds":["/etc:/x"]}}}}"#,
        " ".repeat(1 << 20)
    );
    std::fs::write(&big, padded).unwrap();
    let (code, text) = env.api("POST", path, &format!("@{}", big.display()));
    let _ = std::fs::remove_file(&big);
    assert_eq!(code, 403, "{text}");
    assert!(text.contains("vibe-shim: authz-body: "), "{text}");
    // A path-encoded route is the same endpoint to dockerd.
    let body = format!(r#"{{"Image":"{image}","HostConfig":{{"Binds":["/etc:/x"]}}}}"#);
    let (code, text) = env.api("POST", "/v1.41/containers/%63reate", &body);
    assert_eq!(code, 403, "{text}");
}

#[test]
#[ignore = "needs root and the authz env: run tests/env/authz.sh e2e"]
fn docker_cp_is_refused_both_ways() {
    let env = authz_env();
    let _g = shared();
    let c = named(&env, "authz-cp");
    c.docker(&["create"], &[], &["true"]).ok();
    let dest = PathBuf::from("/var/tmp").join(unique_name("authz-cp-out"));
    let from = format!("{}:/bin/busybox", c.name);
    let out = env.docker(&["cp", &from, dest.to_str().unwrap()]);
    env.assert_refused(&out, "authz-archive");
    assert!(!dest.exists());
    // Copying in: the CLI's first HEAD is refused and it prints only "no
    // such directory"; the PUT itself is refused with the vibe-shim line.
    let to = format!("{}:/tmp/", c.name);
    let out = env.docker(&["cp", "/etc/hostname", &to]);
    assert!(!out.success(), "{out}");
    let put = format!("/v1.41/containers/{}/archive?path=/tmp", c.name);
    let (code, text) = env.api("PUT", &put, "x");
    assert_eq!(code, 403, "{text}");
    assert!(text.contains("vibe-shim: authz-archive: "), "{text}");
    // export only reads the container's own layer: allowed.
    let tar = PathBuf::from("/var/tmp").join(unique_name("authz-export.tar"));
    let out = env.docker(&["export", "-o", tar.to_str().unwrap(), &c.name]);
    let size = std::fs::metadata(&tar).map(|m| m.len()).unwrap_or(0);
    let _ = std::fs::remove_file(&tar);
    assert!(out.success() && size > 0, "{out}");
}

#[test]
#[ignore = "needs root and the authz env: run tests/env/authz.sh e2e"]
fn other_runtimes_are_refused() {
    let env = authz_env();
    let _g = shared();
    for rt in ["runc", "io.containerd.runc.v2"] {
        let c = named(&env, "authz-rt");
        let flag = format!("--runtime={rt}");
        let out = c.docker(&["run", "--rm"], &[&flag], &["true"]);
        env.assert_refused(&out, "authz-runtime");
    }
}

#[test]
#[ignore = "needs root and the authz env: run tests/env/authz.sh e2e"]
fn allowed_bind_with_the_default_runtime_runs_confined() {
    let env = authz_env();
    let _g = shared();
    let dir = Path::new(WORKTREES).join(unique_name("authz-ok"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("f"), "from-host\n").unwrap();
    let c = named(&env, "authz-ok");
    let mount = format!("type=bind,src={},dst=/w", dir.display());
    // A writable bind needs a regular id (the runtime's host_ids rule).
    let out = c.docker(
        &["run", "--rm"],
        &["-u", "1000:1000", "--mount", &mount],
        &[
            "sh",
            "-c",
            "cat /w/f; grep -E '^(NoNewPrivs|CapEff)' /proc/self/status",
        ],
    );
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.success(), "{out}");
    assert!(out.stdout.contains("from-host"), "{out}");
    // The default runtime is vibe-shim's: confined, seen from inside.
    assert!(out.stdout.contains("NoNewPrivs:\t1"), "{out}");
    assert!(out.stdout.contains("CapEff:\t0000000000000000"), "{out}");
}

#[test]
#[ignore = "needs root and the authz env: run tests/env/authz.sh e2e"]
fn plugin_down_means_dockerd_refuses() {
    let env = authz_env();
    let _alone = PLUGIN.write().unwrap_or_else(|e| e.into_inner());
    let script = |verb: &str| env.script(verb, "");
    script("plugin-kill").ok();
    let marker = PathBuf::from(SHARED).join(unique_name("authz-down"));
    let c = named(&env, "authz-down");
    let bind = format!("{}:/x", marker.display());
    // dockerd retries an unreachable plugin for about 30 s, then refuses.
    let out = env.docker_timeout(
        &[
            "run",
            "--rm",
            "--name",
            &c.name,
            "--network",
            "none",
            "-v",
            &bind,
            IMAGE,
            "true",
        ],
        Duration::from_secs(150),
    );
    let body = format!(r#"{{"Image":"{IMAGE}","HostConfig":{{"Binds":["{bind}"]}}}}"#);
    let (code, text) = env.api("POST", "/v1.41/containers/create", &body);
    let restarted = script("plugin-start");
    assert!(code >= 400, "created without the plugin: {code} {text}");
    assert!(
        text.contains(&format!("plugin {} failed", env.plugin)),
        "{text}"
    );
    assert!(
        !out.success() && !out.timed_out,
        "ran without the plugin: {out}"
    );
    // dockerd answers every request (the CLI's /_ping first) with an error
    // naming the plugin, which the 20.10 CLI reports as a 500 on /_ping.
    assert!(
        out.stderr.contains(&env.plugin) || out.stderr.contains("500 Internal Server Error"),
        "{out}"
    );
    assert!(!marker.exists(), "dockerd created {}", marker.display());
    assert!(restarted.success(), "{restarted}");
    let out = env.docker(&["run", "--rm", "--network", "none", IMAGE, "true"]);
    assert!(out.success(), "after restart: {out}");
}

/// The plugin restarted with `plugin_args` while this lives; the env's
/// own plugin again on drop (also after a failed assertion).
struct PluginWith<'a> {
    env: &'a AuthzEnv,
}

impl<'a> PluginWith<'a> {
    fn start(env: &'a AuthzEnv, plugin_args: &str) -> PluginWith<'a> {
        let _ = env.script("plugin-stop", "");
        let out = env.script("plugin-start", plugin_args);
        assert!(out.success(), "plugin {plugin_args}: {out}");
        PluginWith { env }
    }
}

impl Drop for PluginWith<'_> {
    fn drop(&mut self) {
        let _ = self.env.script("plugin-stop", "");
        let out = self.env.script("plugin-start", "");
        if !out.success() {
            eprintln!("could not restart the env's plugin: {out}");
        }
    }
}

/// The `-v` creation door. dockerd creates a missing `-v` source with
/// MkdirAll, as root, when the container starts: after the gate judged the
/// create. A container that writes its worktree swaps a directory on the
/// path for a symlink in between, and dockerd creates the rest wherever the
/// symlink points (seen on Docker 20.10 with the previous gate: `create -v
/// <worktree>/d/new`, then `d` -> an outside directory, then `start` made
/// `<outside>/new`). The gate now refuses `-v` host paths and
/// CreateMountpoint; `--mount type=bind` never creates, even at start.
/// The swap is done from the host here, as the container could.
#[test]
#[ignore = "needs root and the authz env: run tests/env/authz.sh e2e"]
fn binds_dockerd_would_create_are_refused_and_mount_never_creates() {
    let env = authz_env();
    let _g = shared();
    let worktree = Path::new(WORKTREES).join(unique_name("authz-create"));
    let outside = Path::new(SHARED).join(unique_name("authz-create-out"));
    std::fs::create_dir_all(worktree.join("d/new")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    let cleanup = || {
        let _ = std::fs::remove_dir_all(&worktree);
        let _ = std::fs::remove_dir_all(&outside);
    };
    let source = worktree.join("d/new");
    let c = named(&env, "authz-create");
    let bind = format!("{}:/x", source.display());
    let out = c.docker(&["create"], &["-v", &bind], &["true"]);
    env.assert_refused(&out, "authz-binds");
    assert!(out.stderr.contains("--mount type=bind"), "{out}");
    // bind-create-src (CreateMountpoint), as the raw API (the 20.10 CLI
    // does not send it) and as Compose sends it by default.
    let body = serde_json::json!({"Image": IMAGE, "HostConfig": {"Mounts": [{
        "Type": "bind", "Source": source.display().to_string(), "Target": "/x",
        "BindOptions": {"CreateMountpoint": true}}]}});
    let (code, text) = env.api("POST", "/v1.41/containers/create", &body.to_string());
    assert_eq!(code, 403, "{text}");
    assert!(text.contains("authz-binds"), "{text}");
    // The same swap against `--mount`: created, swapped, started.
    let mount = format!("type=bind,src={},dst=/x", source.display());
    let out = c.docker(&["create"], &["--mount", &mount], &["true"]);
    assert!(out.success(), "--mount type=bind refused: {out}");
    std::fs::remove_dir_all(worktree.join("d")).unwrap();
    std::os::unix::fs::symlink(&outside, worktree.join("d")).unwrap();
    let out = env.docker(&["start", "-a", &c.name]);
    let made: Vec<_> = std::fs::read_dir(&outside)
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    cleanup();
    assert!(
        made.is_empty(),
        "dockerd created {made:?} in {}: {out}",
        outside.display()
    );
    assert!(!out.success(), "started with the swapped source: {out}");
}

/// `--allow-bind-create` lets `-v` through again (the source must still be
/// allowed), for admins who accept that door (README Limits).
#[test]
#[ignore = "needs root and the authz env: run tests/env/authz.sh e2e"]
fn allow_bind_create_lets_allowed_v_binds_through() {
    let env = authz_env();
    let _alone = PLUGIN.write().unwrap_or_else(|e| e.into_inner());
    let _plugin = PluginWith::start(&env, "--allow-bind-create");
    let dir = Path::new(WORKTREES).join(unique_name("authz-allow-create"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("f"), "from-host\n").unwrap();
    let bind = format!("{}:/w", dir.display());
    let out = named(&env, "authz-allow").docker(
        &["run", "--rm"],
        &["-u", "1000:1000", "-v", &bind],
        &["cat", "/w/f"],
    );
    let outside =
        named(&env, "authz-allow").docker(&["run", "--rm"], &["-v", "/etc:/w"], &["true"]);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.success() && out.stdout.contains("from-host"), "{out}");
    env.assert_refused(&outside, "authz-binds");
}

/// A local volume binding an allowed directory: the local driver resolves
/// `device` again at each use, and dockerd copies the image's directory
/// into an empty volume as root, owners and setuid bits kept. With `device`
/// swapped for a symlink to an empty host directory after `volume create`,
/// `docker create` made dockerd write a setuid-root file there (seen on
/// 20.10 with the previous gate). Refused now, at volume create and inline.
#[test]
#[ignore = "needs root and the authz env: run tests/env/authz.sh e2e"]
fn local_volumes_that_bind_even_allowed_paths_are_refused() {
    let env = authz_env();
    let _g = shared();
    let dir = Evidence::new("authz-bindvol");
    let v = Named {
        env: &env,
        name: unique_name("authz-bindvol"),
        volume: true,
    };
    let out = bind_volume(&env, &v.name, dir.0.to_str().unwrap());
    env.assert_refused(&out, "authz-volume");
    assert!(out.stderr.contains("--mount type=bind"), "{out}");
    let listed = env.docker(&["volume", "ls", "-q"]);
    assert!(!listed.stdout.lines().any(|l| l == v.name), "{listed}");
    let mount = format!(
        "type=volume,source={},target=/x,volume-opt=type=none,volume-opt=o=bind,volume-opt=device={}",
        v.name,
        dir.0.display()
    );
    let c = named(&env, "authz-bindvol");
    let out = c.docker(&["create"], &["--mount", &mount], &["true"]);
    env.assert_refused(&out, "authz-volume");
    // A volume without options stays: it lives under dockerd's data-root.
    let plain = Named {
        env: &env,
        name: unique_name("authz-plainvol"),
        volume: true,
    };
    let out = env.docker(&["volume", "create", &plain.name]);
    assert!(out.success(), "{out}");
}

/// `--volumes-from` copies a `--mount type=bind` without its never-create
/// flag: dockerd ran MkdirAll on the swapped source when the copying
/// container started (seen on 20.10 with the previous gate).
#[test]
#[ignore = "needs root and the authz env: run tests/env/authz.sh e2e"]
fn volumes_from_is_refused() {
    let env = authz_env();
    let _g = shared();
    let dir = Evidence::new("authz-volfrom");
    let a = named(&env, "authz-volfrom-a");
    let out = a.docker(&["create"], &["--mount", &dir.mount()], &["true"]);
    assert!(out.success(), "{out}");
    let b = named(&env, "authz-volfrom-b");
    let out = b.docker(&["create"], &["--volumes-from", &a.name], &["true"]);
    env.assert_refused(&out, "authz-volumes-from");
}

/// Log drivers run in dockerd, on the host's network: `--log-driver
/// syslog --log-opt syslog-address=...` sent a `--network none`
/// container's output to a listener of the client's choice (seen on 20.10
/// with the previous gate, and likewise splunk over HTTP). The listener
/// here gets nothing.
#[test]
#[ignore = "needs root and the authz env: run tests/env/authz.sh e2e"]
fn log_drivers_that_send_elsewhere_are_refused() {
    let env = authz_env();
    let _g = shared();
    let listener = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    listener
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let address = format!("syslog-address=udp://{}", listener.local_addr().unwrap());
    let c = named(&env, "authz-log");
    let out = c.docker(
        &["run", "--rm"],
        &["--log-driver", "syslog", "--log-opt", &address],
        &["echo", "EXFIL"],
    );
    env.assert_refused(&out, "authz-log");
    // The daemon's default driver, told an address: refused too.
    let out = c.docker(
        &["run", "--rm"],
        &["--log-opt", &address],
        &["echo", "EXFIL"],
    );
    env.assert_refused(&out, "authz-log");
    let mut buf = [0u8; 512];
    assert!(
        listener.recv(&mut buf).is_err(),
        "the listener got a log line: {}",
        String::from_utf8_lossy(&buf)
    );
    // Local drivers with their options still run.
    let out = c.docker(
        &["run", "--rm"],
        &["--log-driver", "json-file", "--log-opt", "max-size=1m"],
        &["echo", "ok"],
    );
    assert!(out.success() && out.stdout.contains("ok"), "{out}");
}

/// `docker network create` changes the host: a client subnet became a
/// host route (`ip route get 198.51.100.7` went to the new bridge), a
/// named host bridge lost its address, macvlan answered ARP on a host
/// segment (seen on 20.10 with the previous gate). Only a plain bridge
/// network on the daemon's pools is allowed.
#[test]
#[ignore = "needs root and the authz env: run tests/env/authz.sh e2e"]
fn network_create_cannot_touch_the_hosts_networking() {
    let env = authz_env();
    let _g = shared();
    let route = || {
        let out = run_bounded(
            {
                let mut cmd = Command::new("ip");
                cmd.args(["route", "get", "198.51.100.7"]);
                cmd
            },
            None,
            Duration::from_secs(10),
        );
        out.stdout
    };
    let before = route();
    let name = unique_name("authz-net");
    for flags in [
        &["--subnet", "198.51.100.0/24"][..],
        &["-o", "com.docker.network.bridge.name=vibeauthz0"],
        &["-d", "macvlan", "-o", "parent=lo"],
        &["--ipam-driver", "other"],
    ] {
        let mut args = vec!["network", "create"];
        args.extend_from_slice(flags);
        args.push(&name);
        let out = env.docker(&args);
        let _ = env.docker(&["network", "rm", &name]);
        env.assert_refused(&out, "authz-network");
    }
    assert_eq!(route(), before, "the host's route to 198.51.100.7 changed");
    let out = env.docker(&["network", "create", "--internal", &name]);
    let _ = env.docker(&["network", "rm", &name]);
    assert!(out.success(), "a plain bridge network: {out}");
}

// ---- Docker 28 (API 1.51) doors: refused on both stacks -----------------------

/// An allowed worktree the container would write `ran` into: host evidence
/// that it never ran. Removed on drop.
struct Evidence(PathBuf);

impl Evidence {
    fn new(tag: &str) -> Self {
        let dir = Path::new(WORKTREES).join(unique_name(tag));
        std::fs::create_dir_all(&dir).unwrap();
        Evidence(dir)
    }

    /// As `--mount` (a `-v` bind would be refused for what dockerd may
    /// create, before the door under test is judged).
    fn mount(&self) -> String {
        format!("type=bind,src={},dst=/w", self.0.display())
    }

    fn assert_never_ran(&self) {
        assert!(
            !self.0.join("ran").exists(),
            "the container ran: {}",
            self.0.display()
        );
    }
}

impl Drop for Evidence {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `docker run` with `extra` flags and the evidence mount, `touch /w/ran`.
fn run_door(env: &AuthzEnv, tag: &str, extra: &[&str], rule: &str) {
    let ev = Evidence::new(tag);
    let c = named(env, tag);
    let mount = ev.mount();
    let mut flags = vec!["--mount", mount.as_str()];
    flags.extend_from_slice(extra);
    let out = c.docker(&["run", "--rm"], &flags, &["touch", "/w/ran"]);
    env.assert_refused(&out, rule);
    ev.assert_never_ran();
}

/// The raw create body (API 1.51 path) with the evidence mount added last,
/// under a unique name. The create is only a create (nothing to run), so
/// the host evidence is dockerd's: no container of that name exists after.
fn create_door(env: &AuthzEnv, tag: &str, host_config: serde_json::Value, rule: &str) {
    let ev = Evidence::new(tag);
    let c = named(env, tag);
    let mut hc = host_config;
    let evidence = serde_json::json!({"Type": "bind", "Source": ev.0, "Target": "/w"});
    match hc["Mounts"].as_array_mut() {
        Some(mounts) => mounts.push(evidence),
        None => hc["Mounts"] = serde_json::json!([evidence]),
    }
    hc["NetworkMode"] = serde_json::json!("none");
    let body = serde_json::json!({"Image": IMAGE, "Cmd": ["touch", "/w/ran"], "HostConfig": hc});
    let path = |v: &str| format!("/{v}/containers/create?name={}", c.name);
    let mut answer = env.api("POST", &path("v1.51"), &body.to_string());
    // 20.10 may answer a version above its own (1.41) before the plugin.
    if answer.0 == 400 && answer.1.contains("version") {
        answer = env.api("POST", &path("v1.41"), &body.to_string());
    }
    let (code, text) = answer;
    assert_eq!(code, 403, "{body} -> {text}");
    let want = format!(
        "authorization denied by plugin {}: vibe-shim: {rule}: ",
        env.plugin
    );
    assert!(text.contains(&want), "{body} -> {text}");
    let filter = format!("name=^{}$", c.name);
    let left = env.docker(&["ps", "-aq", "--filter", &filter]);
    assert!(left.success(), "{left}");
    assert!(
        left.stdout.trim().is_empty(),
        "dockerd created {} after the refusal: {left}",
        c.name
    );
}

#[test]
#[ignore = "needs root and the authz env: run tests/env/authz.sh e2e"]
fn mount_type_image_is_refused() {
    let env = authz_env();
    let _g = shared();
    create_door(
        &env,
        "authz-image",
        serde_json::json!({"Mounts": [{"Type": "image", "Source": IMAGE, "Target": "/img",
            "ImageOptions": {"Subpath": "bin"}}]}),
        "authz-binds",
    );
    if env.stack == "sid" {
        // Docker 28's CLI spelling (API >= 1.48).
        let mount = format!("type=image,source={IMAGE},target=/img,image-subpath=bin");
        run_door(&env, "authz-image-cli", &["--mount", &mount], "authz-binds");
    }
}

#[test]
#[ignore = "needs root and the authz env: run tests/env/authz.sh e2e"]
fn volume_subpath_is_refused() {
    let env = authz_env();
    let _g = shared();
    // A plain named volume (allowed); a container that uses it could have
    // planted a symlink to the host's /etc in it.
    let v = Named {
        env: &env,
        name: unique_name("authz-subpath"),
        volume: true,
    };
    let out = env.docker(&["volume", "create", &v.name]);
    assert!(out.success(), "{out}");
    create_door(
        &env,
        "authz-subpath",
        serde_json::json!({"Mounts": [{"Type": "volume", "Source": v.name, "Target": "/x",
            "VolumeOptions": {"Subpath": "link"}}]}),
        "authz-binds",
    );
    if env.stack == "sid" {
        let mount = format!(
            "type=volume,source={},target=/x,volume-subpath=link",
            v.name
        );
        run_door(
            &env,
            "authz-subpath-cli",
            &["--mount", &mount],
            "authz-binds",
        );
    }
}

#[test]
#[ignore = "needs root and the authz env: run tests/env/authz.sh e2e"]
fn device_requests_and_annotations_are_refused() {
    let env = authz_env();
    let _g = shared();
    run_door(&env, "authz-gpus", &["--gpus", "all"], "authz-devices");
    create_door(
        &env,
        "authz-cdi",
        serde_json::json!({"DeviceRequests": [{"Driver": "cdi",
            "DeviceIDs": ["vendor.example/gpu=0"]}]}),
        "authz-devices",
    );
    create_door(
        &env,
        "authz-annot",
        serde_json::json!({"Annotations": {"org.systemd.property.TasksMax": "infinity"}}),
        "authz-annotations",
    );
    if env.stack == "sid" {
        run_door(
            &env,
            "authz-annot-cli",
            &["--annotation", "org.systemd.property.TasksMax=infinity"],
            "authz-annotations",
        );
    }
    // A HostConfig field no API up to 1.51 has: the gate cannot judge it.
    create_door(
        &env,
        "authz-unknown",
        serde_json::json!({"HostMounts": ["/etc"]}),
        "authz-body",
    );
}

// ---- builds, BuildKit and cgroup parents --------------------------------------

/// A build context: a directory with this Dockerfile, and its tar (what
/// `POST /build` takes). Removed on drop.
struct BuildContext {
    dir: PathBuf,
    tar: PathBuf,
}

impl BuildContext {
    fn new(tag: &str, dockerfile: &str) -> Self {
        let dir = Path::new(SHARED).join(unique_name(tag));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("Dockerfile"), dockerfile).unwrap();
        let tar = dir.with_extension("tar");
        let mut cmd = Command::new("tar");
        cmd.arg("-C").arg(&dir).arg("-cf").arg(&tar).arg(".");
        let out = run_bounded(cmd, None, Duration::from_secs(30));
        assert!(out.success(), "{out}");
        BuildContext { dir, tar }
    }

    fn dir(&self) -> &str {
        self.dir.to_str().unwrap()
    }

    fn data(&self) -> String {
        format!("@{}", self.tar.display())
    }
}

impl Drop for BuildContext {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
        let _ = std::fs::remove_file(&self.tar);
    }
}

/// An HTTP listener on loopback that counts connections (answering 404):
/// whatever dockerd fetches from the host's network namespace lands here.
struct Fetches {
    port: u16,
    hits: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Fetches {
    fn start() -> Self {
        use std::io::{Read, Write};
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (h, st) = (hits.clone(), stop.clone());
        std::thread::spawn(move || {
            while !st.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((mut conn, _)) => {
                        h.fetch_add(1, Ordering::SeqCst);
                        let _ = conn.set_read_timeout(Some(Duration::from_millis(200)));
                        let _ = conn.read(&mut [0u8; 1024]);
                        let _ = conn.write_all(b"HTTP/1.0 404 Not Found\r\n\r\n");
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        });
        Fetches { port, hits, stop }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}/{path}", self.port)
    }

    fn count(&self) -> usize {
        self.hits.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Drop for Fetches {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Door: `POST /build` was allowed without lockdown, and the legacy
/// builder's RUN step ran under the daemon's default runtime, on plain runc
/// (`CapEff 00000000a80425fb`, `NoNewPrivs 0`, `pids.max` max, `mknod`
/// working; seen on 20.10 with the previous gate, `--network host
/// --cgroup-parent /` included). This env has no lockdown: every build and
/// BuildKit's endpoints are refused, and no image is made.
#[test]
#[ignore = "needs root and the authz env: run tests/env/authz.sh e2e"]
fn builds_are_refused_without_lockdown() {
    let env = authz_env();
    let _g = shared();
    let ctx = BuildContext::new(
        "authz-build",
        &format!("FROM {IMAGE}\nRUN grep -E '^(CapEff|NoNewPrivs)' /proc/self/status\n"),
    );
    let tag = unique_name("authz-build");
    let long = Duration::from_secs(120);
    let legacy = [("DOCKER_BUILDKIT", "0")];
    // The door as the reviewer opened it: the CLI sends `cgroupparent`
    // before `networkmode`, and the first refused parameter is named.
    let out = env.docker_env(
        &[
            "build",
            "--network",
            "host",
            "--cgroup-parent",
            "/",
            "-t",
            &tag,
            ctx.dir(),
        ],
        &legacy,
        long,
    );
    env.assert_refused(&out, "authz-cgroup-parent");
    let answer = env.api_raw(
        "/v1.41/build?networkmode=host",
        &ctx.data(),
        "application/x-tar",
    );
    env.assert_api_refused(&answer, "authz-build", "networkmode=host");
    assert!(answer.1.contains("(?networkmode: host)"), "{}", answer.1);
    // A plain build: refused for want of lockdown.
    let out = env.docker_env(&["build", "-t", &tag, ctx.dir()], &legacy, long);
    env.assert_refused(&out, "authz-build");
    assert!(out.stderr.contains("without lockdown"), "{out}");
    // BuildKit: its /session, /grpc and a version=2 build.
    let out = env.docker_env(
        &["build", "-t", &tag, ctx.dir()],
        &[("DOCKER_BUILDKIT", "1")],
        long,
    );
    assert!(!out.success(), "a BuildKit build ran: {out}");
    for path in ["/v1.41/session", "/v1.41/grpc"] {
        let answer = env.api_raw(path, "", "application/json");
        env.assert_api_refused(&answer, "authz-build", path);
    }
    let answer = env.api_raw(
        "/v1.41/build?version=2&remote=client-session&session=x",
        &ctx.data(),
        "application/x-tar",
    );
    env.assert_api_refused(&answer, "authz-build", "version=2");
    let answer = env.api_raw("/v1.41/build", &ctx.data(), "application/x-tar");
    env.assert_api_refused(&answer, "authz-build", "raw build");
    let image = env.docker(&["image", "inspect", &tag]);
    assert!(!image.success(), "the build made {tag}: {image}");
}

/// Door: `--cgroup-parent /docker/<victim>` nested a container under
/// another container's cgroup, so what it forked counted against the
/// victim's pids and memory limits (seen on 20.10 with the previous gate).
/// Refused at create (either HostConfig place) and for builds.
#[test]
#[ignore = "needs root and the authz env: run tests/env/authz.sh e2e"]
fn cgroup_parents_are_refused() {
    let env = authz_env();
    let _g = shared();
    let victim = named(&env, "authz-victim");
    let out = victim.docker(&["create"], &[], &["sleep", "60"]);
    assert!(out.success(), "{out}");
    let parent = format!("/docker/{}", out.stdout.trim());
    run_door(
        &env,
        "authz-cgparent",
        &["--cgroup-parent", &parent],
        "authz-cgroup-parent",
    );
    create_door(
        &env,
        "authz-cgparent-api",
        serde_json::json!({"CgroupParent": parent}),
        "authz-cgroup-parent",
    );
    // The create body's top level (20.10 reads it without a HostConfig).
    let c = named(&env, "authz-cgparent-top");
    let body = serde_json::json!({"Image": IMAGE, "Cmd": ["true"], "CgroupParent": parent});
    let answer = env.api_raw(
        &format!("/v1.41/containers/create?name={}", c.name),
        &body.to_string(),
        "application/json",
    );
    env.assert_api_refused(&answer, "authz-cgroup-parent", "top-level CgroupParent");
    // A build's, judged before lockdown.
    let ctx = BuildContext::new("authz-cgparent-build", &format!("FROM {IMAGE}\n"));
    let answer = env.api_raw(
        &format!("/v1.41/build?cgroupparent={parent}"),
        &ctx.data(),
        "application/x-tar",
    );
    env.assert_api_refused(&answer, "authz-cgroup-parent", "build cgroupparent");
}

/// Door: dockerd fetches remote build contexts (`remote=` URLs and git)
/// and `ADD <url>` itself, from the host's network namespace whatever the
/// build's network mode (169.254.169.254 or the LAN included). A form body
/// carries `remote=` past the plugin, which is not shown it. Nothing here
/// may reach the loopback listener.
#[test]
#[ignore = "needs root and the authz env: run tests/env/authz.sh e2e"]
fn builds_never_fetch_from_the_hosts_network() {
    let env = authz_env();
    let _g = shared();
    let fetches = Fetches::start();
    let ctx = BuildContext::new(
        "authz-fetch",
        &format!("FROM {IMAGE}\nADD {} /fetched\n", fetches.url("add")),
    );
    let remote = fetches.url("Dockerfile");
    for query in [
        format!("remote={remote}"),
        format!("remote=git://127.0.0.1:{}/x.git", fetches.port),
    ] {
        let answer = env.api_raw(&format!("/v1.41/build?{query}"), "", "application/x-tar");
        env.assert_api_refused(&answer, "authz-build", &query);
        assert!(answer.1.contains("(?remote: "), "{query}: {}", answer.1);
    }
    let form = format!("remote={remote}");
    let answer = env.api_raw("/v1.41/build", &form, "application/x-www-form-urlencoded");
    env.assert_api_refused(&answer, "authz-build", "form body");
    for builder in ["0", "1"] {
        let out = env.docker_env(
            &["build", "-t", &unique_name("authz-fetch"), ctx.dir()],
            &[("DOCKER_BUILDKIT", builder)],
            Duration::from_secs(120),
        );
        assert!(!out.success(), "DOCKER_BUILDKIT={builder} built: {out}");
    }
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(fetches.count(), 0, "dockerd fetched from 127.0.0.1");
}
