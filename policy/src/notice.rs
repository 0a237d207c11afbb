//! What vibe-shim changed in one container, said once: the facts are a pure
//! function of the create's rewrite (its record of changes and the judged
//! spec) and the policy; [`Notice::render`] is the one text of them. The
//! container reads that text at [`crate::config::NOTICE_PATH`], `vibe-shim
//! explain` prints it on the host, and the audit line carries the facts.
//!
//! Environment variables appear by name only, never with a value.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::config::{HomeMode, NetworkMode, Policy};
use crate::decision::Change;
use crate::engine::context::CreateContext;
use crate::lang::json::{clean_path, str_field, str_items};
use crate::rules::home::{self, HomeSource};

/// The facts of one container's notice.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Notice {
    pub container_id: String,
    /// The policy file and the drop-ins that made the policy.
    pub policy_files: Vec<String>,
    pub user: UserFact,
    /// `None` under `[filesystem] home = "image"`.
    pub home: Option<HomeFact>,
    /// Variable names the client set that the process does not get.
    pub env_dropped: Vec<String>,
    /// Variables that hold a credential's placeholder, not a client's value.
    pub env_placeholders: Vec<String>,
    /// Limits the client asked for and did not get as asked.
    pub clamped: Vec<Clamp>,
    /// The ceilings in force.
    pub limits: Limits,
    pub network: NetworkFact,
}

/// `uid:gid` asked and given (equal when the client's user was kept).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UserFact {
    pub asked: String,
    pub given: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HomeFact {
    pub dir: String,
    pub source: HomeSource,
    pub kind: HomeKind,
}

/// What is mounted at HOME.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HomeKind {
    /// vibe-shim's private tmpfs: empty at start, gone at exit.
    Tmpfs,
    /// A bind the binds rule allowed: it outlives the container.
    Bind,
    /// Inside one of the policy's tmpfs directories.
    UnderTmpfs,
}

/// One limit, as asked and as given (text: bytes shown with a unit).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Clamp {
    pub limit: String,
    pub asked: String,
    pub given: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Limits {
    pub pids: Option<i64>,
    pub memory: Option<String>,
    pub cpus: Option<String>,
    /// Every tmpfs's ceiling.
    pub tmpfs: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NetworkFact {
    pub mode: NetworkMode,
    /// The hosts mode "proxy" lets through (empty in the other modes).
    pub hosts: Vec<String>,
}

/// The notice's facts for a create's rewrite: `spec` is the judged spec,
/// `changes` the rewrite's record, `policy_files` the files that made
/// `policy`.
pub fn facts(
    spec: &Value,
    changes: &[Change],
    policy: &Policy,
    create: &CreateContext,
    policy_files: &[String],
) -> Notice {
    let process = spec.get("process").unwrap_or(&Value::Null);
    Notice {
        container_id: create.container_id.clone(),
        policy_files: policy_files.to_vec(),
        user: user(process, changes),
        home: home_fact(spec, process, changes, policy, create),
        env_dropped: env_dropped(changes),
        env_placeholders: create
            .credentials
            .iter()
            .filter_map(|b| {
                policy
                    .network
                    .credentials
                    .iter()
                    .find(|c| c.name == b.name)
                    .map(|c| c.env.clone())
            })
            .collect(),
        clamped: clamped(spec, changes),
        limits: limits(spec, policy),
        network: NetworkFact {
            mode: policy.network.mode,
            hosts: match policy.network.mode {
                NetworkMode::Proxy => policy.network.hosts.clone(),
                _ => Vec::new(),
            },
        },
    }
}

fn user(process: &Value, changes: &[Change]) -> UserFact {
    let given = |key: &str| {
        process
            .pointer(&format!("/user/{key}"))
            .and_then(Value::as_u64)
    };
    let asked = |key: &str| {
        let field = format!("/process/user/{key}");
        match changes
            .iter()
            .find(|c| c.rule == "user" && c.field == field)
        {
            Some(change) => change.before.as_u64(),
            None => given(key),
        }
    };
    let pair = |uid: Option<u64>, gid: Option<u64>| {
        let show = |id: Option<u64>| id.map_or("0".to_string(), |id| id.to_string());
        format!("{}:{}", show(uid), show(gid))
    };
    UserFact {
        asked: pair(asked("uid"), asked("gid")),
        given: pair(given("uid"), given("gid")),
    }
}

fn home_fact(
    spec: &Value,
    process: &Value,
    changes: &[Change],
    policy: &Policy,
    create: &CreateContext,
) -> Option<HomeFact> {
    if policy.filesystem.home != HomeMode::Tmpfs {
        return None;
    }
    let (dir, source) = home::explain(process, create, changes);
    let mounted = spec
        .get("mounts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .rev()
        .find(|m| clean_path(str_field(m, "destination")) == dir);
    let kind = match mounted {
        Some(m) if str_field(m, "type") == "tmpfs" => HomeKind::Tmpfs,
        Some(_) => HomeKind::Bind,
        None => HomeKind::UnderTmpfs,
    };
    Some(HomeFact { dir, source, kind })
}

/// The variable name of an env entry (or of a label the rules recorded).
fn env_name(entry: &Value) -> Option<&str> {
    let text = entry.as_str()?;
    Some(text.split_once('=').map_or(text, |(name, _)| name))
}

/// Names in a `/env` change's `before` that no later `/env` state holds.
fn env_dropped(changes: &[Change]) -> Vec<String> {
    let env_changes: Vec<&Change> = changes
        .iter()
        .filter(|c| c.field.ends_with("/env"))
        .collect();
    let Some(last) = env_changes.last() else {
        return Vec::new();
    };
    let kept: Vec<&str> = last
        .after
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(env_name)
        .collect();
    let mut dropped: Vec<String> = Vec::new();
    for change in &env_changes {
        for name in change
            .before
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(env_name)
        {
            if !kept.contains(&name) && !dropped.iter().any(|d| d == name) {
                dropped.push(name.to_string());
            }
        }
    }
    dropped
}

/// Bytes as the policy file writes them (`4g`, `64m`), exact.
pub fn bytes_text(bytes: u64) -> String {
    for (unit, shift) in [("t", 40), ("g", 30), ("m", 20), ("k", 10)] {
        if bytes >= 1 << shift && bytes.trailing_zeros() >= shift {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    bytes.to_string()
}

fn value_text(limit: &str, value: &Value) -> String {
    // runc reads a pids limit of 0 or below as none.
    if limit == "pids" && value.as_i64().is_some_and(|n| n <= 0) {
        return "unlimited".to_string();
    }
    match value.as_u64() {
        Some(n) if limit.starts_with("memory") => bytes_text(n),
        _ => match value {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        },
    }
}

/// Every limit the client set that a rule lowered, as asked and given.
fn clamped(spec: &Value, changes: &[Change]) -> Vec<Clamp> {
    let mut out = Vec::new();
    for change in changes {
        match change.rule {
            "pids" | "resources" if !change.before.is_null() && !change.after.is_null() => {
                let Some(rest) = change.field.strip_prefix("/linux/resources/") else {
                    continue;
                };
                let scalar = |v: &Value| v.is_number() || v.is_string();
                if !scalar(&change.before) || !scalar(&change.after) {
                    continue;
                }
                let limit = match rest {
                    "pids/limit" => "pids".to_string(),
                    "memory/limit" => "memory".to_string(),
                    other => other.replace('/', "."),
                };
                out.push(Clamp {
                    asked: value_text(&limit, &change.before),
                    given: value_text(&limit, &change.after),
                    limit,
                });
            }
            "rlimits" => out.extend(rlimit_clamps(&change.before, &change.after)),
            "tmpfs" if change.field.ends_with("/options") => {
                let (Some(asked), Some(given)) = (size_of(&change.before), size_of(&change.after))
                else {
                    continue;
                };
                if asked == given {
                    continue;
                }
                let dest = spec
                    .get("mounts")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .find(|m| m.get("options") == Some(&change.after))
                    .map(|m| str_field(m, "destination").to_string())
                    .unwrap_or_default();
                out.push(Clamp {
                    limit: format!("tmpfs {dest}").trim_end().to_string(),
                    asked,
                    given,
                });
            }
            _ => {}
        }
    }
    out
}

/// The last `size=` of a tmpfs's options, as bytes text.
fn size_of(options: &Value) -> Option<String> {
    let size = str_items(Some(options))
        .filter_map(|o| o.strip_prefix("size="))
        .last()?;
    Some(match crate::config::parse_size(size) {
        Some(bytes) => bytes_text(bytes),
        None => size.to_string(),
    })
}

fn rlimit_clamps(before: &Value, after: &Value) -> Vec<Clamp> {
    let hard = |list: &Value, kind: &str| {
        list.as_array()
            .into_iter()
            .flatten()
            .find(|e| str_field(e, "type") == kind)
            .and_then(|e| e.get("hard"))
            .and_then(Value::as_u64)
    };
    let mut out = Vec::new();
    for entry in before.as_array().into_iter().flatten() {
        let kind = str_field(entry, "type");
        if let (Some(asked), Some(given)) = (hard(before, kind), hard(after, kind)) {
            if asked != given {
                out.push(Clamp {
                    limit: kind.to_string(),
                    asked: asked.to_string(),
                    given: given.to_string(),
                });
            }
        }
    }
    out
}

fn limits(spec: &Value, policy: &Policy) -> Limits {
    let at = |p: &str| spec.pointer(p);
    let cpus = match (
        at("/linux/resources/cpu/quota").and_then(Value::as_i64),
        at("/linux/resources/cpu/period").and_then(Value::as_u64),
    ) {
        (Some(quota), Some(period)) if quota > 0 && period > 0 => {
            let cpus = quota as f64 / period as f64;
            Some(format!("{}", (cpus * 100.0).round() / 100.0))
        }
        _ => None,
    };
    Limits {
        pids: at("/linux/resources/pids/limit").and_then(Value::as_i64),
        memory: at("/linux/resources/memory/limit")
            .and_then(Value::as_u64)
            .map(bytes_text),
        cpus,
        tmpfs: bytes_text(policy.resources.tmpfs_max.0),
    }
}

impl Notice {
    /// The notice as the container reads it: a dozen short lines.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let mut line = |text: String| {
            out.push_str(&text);
            out.push('\n');
        };
        line(format!(
            "vibe-shim: what the host's policy changed in this container ({})",
            self.container_id
        ));
        line("(the same text: `vibe-shim explain <container-id>` on the host)".into());
        line(format!("policy: {}", self.policy_files.join(", ")));
        line(match self.user.asked == self.user.given {
            true => format!("user: {}", self.user.given),
            false => format!(
                "user: {} -> {} (forced by [process] user)",
                self.user.asked, self.user.given
            ),
        });
        if let Some(h) = &self.home {
            let why = match h.source {
                HomeSource::Passwd => {
                    let uid = self.user.given.split(':').next().unwrap_or("?");
                    format!("from the image's /etc/passwd for uid {uid}")
                }
                HomeSource::Client => "as the engine set it".to_string(),
                HomeSource::Default => "no usable entry in the image's /etc/passwd".to_string(),
            };
            let what = match h.kind {
                HomeKind::Tmpfs => "a private tmpfs: empty at start, lost at exit",
                HomeKind::Bind => "a bind mount: kept after exit",
                HomeKind::UnderTmpfs => "inside a policy tmpfs: lost at exit",
            };
            line(format!("HOME: {} ({why}); {what}", h.dir));
        }
        if !self.env_dropped.is_empty() {
            line(format!(
                "env dropped (names only; not in [process] env_allow): {}",
                self.env_dropped.join(", ")
            ));
        }
        if !self.env_placeholders.is_empty() {
            line(format!(
                "env placeholders (the egress proxy adds the real key): {}",
                self.env_placeholders.join(", ")
            ));
        }
        if !self.clamped.is_empty() {
            let items: Vec<String> = self
                .clamped
                .iter()
                .map(|c| format!("{} {} -> {}", c.limit, c.asked, c.given))
                .collect();
            line(format!("clamped (asked -> given): {}", items.join("; ")));
        }
        let l = &self.limits;
        let mut given = Vec::new();
        if let Some(pids) = l.pids {
            given.push(format!("pids {pids}"));
        }
        if let Some(memory) = &l.memory {
            given.push(format!("memory {memory}"));
        }
        if let Some(cpus) = &l.cpus {
            given.push(format!("cpus {cpus}"));
        }
        given.push(format!("each tmpfs {}", l.tmpfs));
        line(format!("limits: {}", given.join(", ")));
        let n = &self.network;
        line(match n.mode {
            NetworkMode::None => "network: none (loopback only)".to_string(),
            NetworkMode::Proxy => format!(
                "network: proxy (HTTP(S)_PROXY); allowed hosts: {}",
                match n.hosts.is_empty() {
                    true => "none".to_string(),
                    false => n.hosts.join(", "),
                }
            ),
            NetworkMode::Allowlist => "network: allowlist ([network] allow)".to_string(),
            NetworkMode::Open => "network: open".to_string(),
        });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::enforce_create;
    use crate::FakeHost;
    use serde_json::json;
    use std::collections::BTreeMap;

    fn docker_spec() -> Value {
        serde_json::from_str(include_str!(
            "../tests/fixtures/docker-20.10/config-default.json"
        ))
        .unwrap()
    }

    fn run(spec: Value, policy: &Policy, homes: &[(u32, &str)]) -> (Value, Notice) {
        let create = CreateContext {
            // The fixture's own id: its engine files are this container's.
            container_id: "156d3c431c92338ef3167b2311f0ab6060b9e10b5c6814ed4cb9c17205570050".into(),
            image_homes: homes
                .iter()
                .map(|(u, h)| (*u, h.to_string()))
                .collect::<BTreeMap<_, _>>(),
            ..CreateContext::default()
        };
        let rewrite = enforce_create(spec, policy, &FakeHost::new(), &create).unwrap();
        let files = ["/etc/vibe-shim/config.toml".to_string()];
        let notice = facts(&rewrite.document, &rewrite.changes, policy, &create, &files);
        (rewrite.document, notice)
    }

    fn agent_policy() -> Policy {
        Policy::from_toml_str(
            "[process]\nuser = \"1000:1000\"\n[network]\nmode = \"proxy\"\nhosts = [\"api.example.com\"]\n",
            std::path::Path::new("/etc/vibe-shim/config.toml"),
        )
        .unwrap()
    }

    #[test]
    fn names_the_dropped_env_the_clamps_the_user_and_the_passwd_home() {
        let mut spec = docker_spec();
        let env = spec["process"]["env"].as_array_mut().unwrap();
        env.push(json!("GH_TOKEN=ghp_secretvalue"));
        env.push(json!("HOME=/root"));
        spec["linux"]["resources"]["pids"] = json!({"limit": 999999});
        spec["linux"]["resources"]["memory"] = json!({"limit": 64_i64 << 30});
        spec["process"]["rlimits"] =
            json!([{"type": "RLIMIT_NOFILE", "hard": 1048576, "soft": 1048576}]);
        let (judged, notice) = run(spec, &agent_policy(), &[(1000, "/home/agent")]);
        assert_eq!(notice.env_dropped, ["GH_TOKEN"]);
        assert_eq!(notice.user.asked, "0:0");
        assert_eq!(notice.user.given, "1000:1000");
        let home = notice.home.clone().unwrap();
        assert_eq!(
            (home.dir.as_str(), home.source, home.kind),
            ("/home/agent", HomeSource::Passwd, HomeKind::Tmpfs)
        );
        assert!(strings_has(&judged["process"]["env"], "HOME=/home/agent"));
        let clamps: Vec<String> = notice
            .clamped
            .iter()
            .map(|c| format!("{} {} -> {}", c.limit, c.asked, c.given))
            .collect();
        assert!(
            clamps.contains(&"pids 999999 -> 4096".to_string()),
            "{clamps:?}"
        );
        assert!(
            clamps.contains(&"memory 64g -> 4g".to_string()),
            "{clamps:?}"
        );
        assert!(
            clamps.contains(&"RLIMIT_NOFILE 1048576 -> 65536".to_string()),
            "{clamps:?}"
        );
        assert_eq!(value_text("pids", &json!(-1)), "unlimited");
        let text = notice.render();
        eprintln!("{text}");
        assert!(text.lines().count() <= 14, "{text}");
        assert!(!text.contains("ghp_secretvalue"));
        for want in [
            "env dropped (names only; not in [process] env_allow): GH_TOKEN",
            "user: 0:0 -> 1000:1000 (forced by [process] user)",
            "HOME: /home/agent (from the image's /etc/passwd for uid 1000); a private tmpfs",
            "pids 999999 -> 4096",
            "limits: pids 4096, memory 4g, cpus 2, each tmpfs 1g",
            "network: proxy (HTTP(S)_PROXY); allowed hosts: api.example.com",
            "policy: /etc/vibe-shim/config.toml",
        ] {
            assert!(text.contains(want), "missing {want:?} in\n{text}");
        }
        let json = serde_json::to_string(&notice).unwrap();
        assert!(!json.contains("ghp_secretvalue"));
    }

    fn strings_has(list: &Value, want: &str) -> bool {
        list.as_array()
            .is_some_and(|l| l.iter().any(|e| e.as_str() == Some(want)))
    }

    #[test]
    fn home_source_says_client_or_default() {
        let mut spec = docker_spec();
        spec["process"]["env"]
            .as_array_mut()
            .unwrap()
            .push(json!("HOME=/work"));
        let (_, notice) = run(spec, &agent_policy(), &[]);
        let home = notice.home.unwrap();
        assert_eq!(
            (home.dir.as_str(), home.source),
            ("/work", HomeSource::Client)
        );
        // Docker 20.10 sets no HOME: the default, with nothing clamped.
        let (_, notice) = run(docker_spec(), &agent_policy(), &[(1000, "/")]);
        let home = notice.home.clone().unwrap();
        assert_eq!(
            (home.dir.as_str(), home.source),
            ("/home/user", HomeSource::Default)
        );
        assert!(notice.env_dropped.is_empty());
        assert!(!notice.render().contains("clamped"));
    }

    /// An engine that feeds the rewritten spec back (a restart from its
    /// copy) gets it judged again: the own notice mount is neither a client
    /// bind (binds) nor a client mount under /etc/vibe-shim (credentials).
    #[test]
    fn a_spec_fed_back_keeps_one_notice_mount() {
        let policy = Policy::from_toml_str(
            "[network]\nmode = \"proxy\"\nhosts = [\"api.example.com\"]\n\
             [[network.credentials]]\nname = \"api\"\nhosts = [\"api.example.com\"]\n\
             env = \"API_KEY\"\nheader = \"x-api-key\"\nsource = \"/x\"\n",
            std::path::Path::new("/etc/vibe-shim/config.toml"),
        )
        .unwrap();
        let create = CreateContext {
            container_id: "156d3c431c92338ef3167b2311f0ab6060b9e10b5c6814ed4cb9c17205570050".into(),
            notice: Some("/run/vibe-shim/containers/r/c/notice".into()),
            trust_bundle: Some("/run/vibe-shim/containers/r/c/ca-bundle.pem".into()),
            credentials: vec![crate::egress::credential::Binding::new(
                &policy.network.credentials[0],
                "sk-PLACEHOLDER".into(),
            )],
            ..CreateContext::default()
        };
        let host = FakeHost::new();
        let first = enforce_create(docker_spec(), &policy, &host, &create).unwrap();
        let again = enforce_create(first.document.clone(), &policy, &host, &create).unwrap();
        let at_notice = |spec: &Value| {
            spec["mounts"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|m| m["destination"] == crate::config::NOTICE_PATH)
                .count()
        };
        assert_eq!(at_notice(&first.document), 1);
        assert_eq!(at_notice(&again.document), 1);
        // Another path under /etc/vibe-shim is still the client's, refused.
        let mut forged = first.document.clone();
        forged["mounts"].as_array_mut().unwrap().push(json!({
            "destination": "/etc/vibe-shim/other", "type": "tmpfs", "source": "tmpfs"}));
        let refused = enforce_create(forged, &policy, &host, &create).unwrap_err();
        assert_eq!(refused.denial.rule, "credentials");
    }

    #[test]
    fn bytes_are_shown_with_their_unit() {
        assert_eq!(bytes_text(4 << 30), "4g");
        assert_eq!(bytes_text(64 << 20), "64m");
        assert_eq!(bytes_text(1500), "1500");
        assert_eq!(bytes_text(0), "0");
    }
}
