//! cgroup ceilings from `[resources]`: memory with swap counted, a CFS CPU
//! quota and a ceiling on CPU shares, for cgroup v1 keys and v2 `unified`
//! keys alike, on create and on `runc update`. Like `pids`: the container
//! gets min(requested, policy), and "unlimited" (`-1`, `max`, absent on
//! create) becomes the policy's value.
//!
//! OCI `memory.swap` is memory+swap (v1 memsw; runc writes `memory.swap.max`
//! = swap - limit on v2), so capping it at `memory_max` counts swap in.
//! Kernel memory needs no key of its own: v1 charges it to
//! `memory.limit_in_bytes`, v2 to `memory.max`. TCP socket buffers are the
//! exception: v1 counts them apart (`memory.kmem.tcp.*`), unbounded unless
//! a limit is written, and runc (1.0 on, 1.1.5 here) ignores `kernelTCP`
//! with a warning. So on create a createRuntime hook writes the bound into
//! the container's v1 memory cgroup, and fails the create if it cannot; on
//! v2, where sockets are charged to `memory.max`, it does nothing. The
//! network hook (vibe-shim too, in the same stage) carries the bound as
//! `--kernel-tcp <bytes>`, which saves runc a process per create; without
//! it, the bound is a hook of its own (`vibe-shim hook kernel-tcp <marker>
//! <bytes>`).

use serde_json::{Map, Value};

use crate::config::{parse_size, ResourcesSection};
use crate::decision::{Denial, Record};
use crate::engine::context::{RuleContext, KERNEL_TCP_HOOK_MARKER, NETWORK_HOOK_MARKER};
use crate::lang::json::{array_at, as_object, object_at, set, strings};
use crate::rules::network_hook::remove_marked;

const RULE: &str = "resources";
/// The TCP bound hook's name after `vibe-shim hook`.
pub const KERNEL_TCP_HOOK: &str = "kernel-tcp";
/// The network hook's argument that carries the bound.
pub const KERNEL_TCP_FLAG: &str = "--kernel-tcp";
/// runc kills a hook that takes longer (seconds).
const HOOK_TIMEOUT_SECS: u64 = 10;

/// The kernel's CFS period bounds (microseconds) and the default period.
pub const CPU_PERIOD_MIN: u64 = 1_000;
pub const CPU_PERIOD_MAX: u64 = 1_000_000;
pub const CPU_PERIOD_DEFAULT: u64 = 100_000;
/// A cgroup's CPU shares when none are set.
const DEFAULT_SHARES: u64 = 1024;

/// Create or update: on update a missing or zero field means "no change" to
/// runc, and is left alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verb {
    Create,
    Update,
}

/// `memory_max` as the signed number the OCI fields use.
pub fn memory_max(r: &ResourcesSection) -> i64 {
    i64::try_from(r.memory_max.0).unwrap_or(i64::MAX)
}

/// A memory limit: kept when in `1..=max`, else `max` (`-1`, `0`, not a
/// number, too high).
pub fn clamp_memory(requested: Option<i64>, max: i64) -> i64 {
    match requested {
        Some(n) if n > 0 && n <= max => n,
        _ => max,
    }
}

/// A CFS period: kept when the kernel accepts it, else the default.
pub fn clamp_period(requested: Option<u64>) -> u64 {
    match requested {
        Some(p) if (CPU_PERIOD_MIN..=CPU_PERIOD_MAX).contains(&p) => p,
        _ => CPU_PERIOD_DEFAULT,
    }
}

/// A CFS quota for `period`: kept when in `1..=cpus*period`, else the
/// maximum (`-1` is unlimited).
pub fn clamp_quota(requested: Option<i64>, period: u64, r: &ResourcesSection) -> i64 {
    let max = r.cpu_quota(period);
    match requested {
        Some(q) if q > 0 && q <= max => q,
        _ => max,
    }
}

/// CPU shares: kept when in `1..=cpu_shares_max`, else the ceiling.
pub fn clamp_shares(requested: u64, r: &ResourcesSection) -> u64 {
    requested.clamp(1, r.cpu_shares_max)
}

/// Create: `linux.resources` always carries the memory and CPU ceilings.
pub fn apply(spec: &mut Value, cx: &RuleContext, rec: &mut Record) -> Result<(), Denial> {
    // Our hook from an earlier pass (a restored bundle), or a forged copy:
    // gone before `client_hooks` judges the client's hooks; `apply_hook`
    // adds the judged one back.
    if shim_exe(cx).is_some() {
        remove_marked(spec, KERNEL_TCP_HOOK_MARKER, RULE, rec);
    }
    let linux = object_at(spec, "linux");
    let resources = linux
        .entry("resources".to_string())
        .or_insert_with(|| Value::Object(Map::new()));
    clamp_resources(resources, "/linux/resources", Verb::Create, cx, rec)
}

/// The TCP socket memory bound for this spec: its (judged) `kernelTCP`
/// when in `1..=bound`, else the policy's bound.
pub fn kernel_tcp_bound(spec: &Value, r: &ResourcesSection) -> u64 {
    let max = i64::try_from(r.kernel_tcp()).unwrap_or(i64::MAX);
    let requested = spec
        .pointer("/linux/resources/memory/kernelTCP")
        .and_then(Value::as_i64);
    // clamp_memory returns a value in 1..=max, so never negative.
    u64::try_from(clamp_memory(requested, max)).unwrap_or(r.kernel_tcp())
}

/// Create: gives the TCP bound to our network hook in
/// `hooks.createRuntime`, or installs a hook of its own when there is none
/// (after removing any entry that pretends to be it). Runs after
/// `network_hook` and `client_hooks`, so the client's hooks are judged
/// without it and the network entry is the one that rule just wrote.
pub fn apply_hook(spec: &mut Value, cx: &RuleContext, rec: &mut Record) -> Result<(), Denial> {
    let Some(exe) = shim_exe(cx) else {
        return Ok(());
    };
    remove_marked(spec, KERNEL_TCP_HOOK_MARKER, RULE, rec);
    let bytes = kernel_tcp_bound(spec, &cx.policy.resources);
    if carry_on_network_hook(spec, bytes, rec) {
        return Ok(());
    }
    let args = [
        "vibe-shim",
        "hook",
        KERNEL_TCP_HOOK,
        KERNEL_TCP_HOOK_MARKER,
        &bytes.to_string(),
    ];
    let entry = serde_json::json!({"path": exe, "args": args, "timeout": HOOK_TIMEOUT_SECS});
    // remove_marked made `hooks` an object, so this always runs.
    if let Some(hooks) = spec.get_mut("hooks") {
        let list = array_at(hooks, "createRuntime");
        list.push(entry.clone());
        rec.change(
            RULE,
            format!("/hooks/createRuntime/{}", list.len() - 1),
            Value::Null,
            entry,
        );
    }
    Ok(())
}

/// Puts `--kernel-tcp <bytes>` into our network hook's arguments, before
/// its marker (which stays last); false when `createRuntime` has no such
/// entry.
fn carry_on_network_hook(spec: &mut Value, bytes: u64, rec: &mut Record) -> bool {
    let Some(list) = spec
        .pointer_mut("/hooks/createRuntime")
        .and_then(Value::as_array_mut)
    else {
        return false;
    };
    let ours = list.iter().rposition(|hook| {
        strings(hook.get("args")).last().map(String::as_str) == Some(NETWORK_HOOK_MARKER)
    });
    let Some((index, Some(args))) = ours.map(|i| (i, list[i].get_mut("args"))) else {
        return false;
    };
    let Value::Array(items) = args else {
        return false;
    };
    let before = Value::Array(items.clone());
    // Exactly one bound, however many passes the spec has been through.
    while let Some(at) = items.iter().position(|a| a == KERNEL_TCP_FLAG) {
        items.drain(at..(at + 2).min(items.len() - 1));
    }
    let at = items.len() - 1;
    items.splice(
        at..at,
        [Value::from(KERNEL_TCP_FLAG), Value::from(bytes.to_string())],
    );
    rec.change(
        RULE,
        format!("/hooks/createRuntime/{index}/args"),
        before,
        Value::Array(items.clone()),
    );
    true
}

/// The bound the network hook carries (`--kernel-tcp <bytes>` among its
/// arguments), `None` when it carries none; the same bytes as the own
/// hook's.
pub fn kernel_tcp_flag(args: &[String]) -> Result<Option<u64>, String> {
    let Some(at) = args.iter().position(|a| a == KERNEL_TCP_FLAG) else {
        return Ok(None);
    };
    match args.get(at + 1) {
        Some(bytes) => parse_bytes(bytes).map(Some),
        None => Err(format!("{KERNEL_TCP_FLAG} without a byte count")),
    }
}

/// The hook is vibe-shim itself: the binary the network hook entry names
/// (absent only in tests, exec and `policy explain`).
fn shim_exe(cx: &RuleContext) -> Option<String> {
    cx.create?
        .network_hook
        .as_ref()?
        .get("path")?
        .as_str()
        .map(str::to_string)
}

/// The hook's arguments after its name: the marker, then the bound in
/// bytes (at least one page's worth, as the policy allows).
pub fn parse_kernel_tcp_args(args: &[String]) -> Result<u64, String> {
    match args {
        [marker, bytes] if marker == KERNEL_TCP_HOOK_MARKER => parse_bytes(bytes),
        _ => Err(format!(
            "expected {KERNEL_TCP_HOOK_MARKER} <bytes>, got {args:?}"
        )),
    }
}

/// A bound as create wrote it: a positive decimal that fits an i64.
fn parse_bytes(bytes: &str) -> Result<u64, String> {
    bytes
        .parse::<u64>()
        .ok()
        .filter(|b| *b > 0 && i64::try_from(*b).is_ok())
        .ok_or_else(|| format!("not a byte count: {bytes:?}"))
}

/// Update (a top-level `LinuxResources`): only what is sent is judged.
pub fn apply_update(
    resources: &mut Value,
    cx: &RuleContext,
    rec: &mut Record,
) -> Result<(), Denial> {
    clamp_resources(resources, "", Verb::Update, cx, rec)
}

fn clamp_resources(
    resources: &mut Value,
    at: &str,
    verb: Verb,
    cx: &RuleContext,
    rec: &mut Record,
) -> Result<(), Denial> {
    let r = &cx.policy.resources;
    let map = as_object(resources);
    let limit = memory(map, at, verb, cx, rec);
    cpu(map, at, verb, r, rec);
    unified(map, at, limit, r, rec)
}

/// `field` as a number, `None` when absent; `Some(None)` when not a number.
fn number(map: &Map<String, Value>, field: &str) -> Option<Option<i64>> {
    map.get(field).map(Value::as_i64)
}

fn put(map: &mut Map<String, Value>, at: &str, field: &str, value: Value, rec: &mut Record) {
    let before = set(map, field, value.clone());
    rec.change(RULE, format!("{at}/{field}"), before, value);
}

/// Clamps `memory`; returns the memory limit now in force, when known.
fn memory(
    map: &mut Map<String, Value>,
    at: &str,
    verb: Verb,
    cx: &RuleContext,
    rec: &mut Record,
) -> Option<i64> {
    let max = memory_max(&cx.policy.resources);
    if verb == Verb::Update && !map.contains_key("memory") {
        return None;
    }
    let memory = as_object(
        map.entry("memory".to_string())
            .or_insert_with(|| Value::Object(Map::new())),
    );
    let at = format!("{at}/memory");
    let judged = |memory: &Map<String, Value>, field: &str| match (verb, number(memory, field)) {
        (Verb::Update, None | Some(Some(0))) => None,
        (_, requested) => Some(requested.flatten()),
    };
    let limit = judged(memory, "limit").map(|req| clamp_memory(req, max));
    if let Some(limit) = limit {
        put(memory, &at, "limit", limit.into(), rec);
    }
    // Without swap accounting a swap limit fails the create; with no swap
    // key runc leaves swap alone, and memory.limit still bounds RAM.
    let swap_wanted = memory.contains_key("swap") || cx.host.swap_limit_supported();
    if let Some(req) = judged(memory, "swap").filter(|_| swap_wanted) {
        put(memory, &at, "swap", clamp_memory(req, max).into(), rec);
    }
    // runc ignores kernelTCP (the hook sets the bound from this value on
    // create); kept within the bound so a runc that wrote it writes no
    // more. Never added: runc warns about any kernel memory key.
    let tcp_max = i64::try_from(cx.policy.resources.kernel_tcp()).unwrap_or(i64::MAX);
    if memory.contains_key("kernelTCP") {
        if let Some(req) = judged(memory, "kernelTCP") {
            put(
                memory,
                &at,
                "kernelTCP",
                clamp_memory(req, tcp_max).into(),
                rec,
            );
        }
    }
    // A soft limit (v2: memory.low, a protection) never above the limit.
    if let Some(Some(req)) = memory.get("reservation").map(Value::as_i64) {
        let bound = limit.unwrap_or(max);
        if req < 0 || req > bound {
            put(memory, &at, "reservation", bound.into(), rec);
        }
    } else if memory.contains_key("reservation") {
        put(memory, &at, "reservation", 0.into(), rec);
    }
    limit
}

fn cpu(map: &mut Map<String, Value>, at: &str, verb: Verb, r: &ResourcesSection, rec: &mut Record) {
    if verb == Verb::Update && !map.contains_key("cpu") {
        return;
    }
    let cpu = as_object(
        map.entry("cpu".to_string())
            .or_insert_with(|| Value::Object(Map::new())),
    );
    let at = format!("{at}/cpu");
    let quota = cpu.get("quota").map(Value::as_i64);
    let period = cpu.get("period").map(Value::as_u64);
    let unset = |v: Option<Option<i64>>| matches!(v, None | Some(Some(0)));
    // runc keeps the old period when only the quota changes (and the other
    // way round), which could turn a small quota into many CPUs: an update
    // that touches either gets both.
    let touched = !(unset(quota) && unset(period.map(|p| p.map(|p| p as i64))));
    if verb == Verb::Create || touched {
        let period = clamp_period(period.flatten());
        let quota = clamp_quota(quota.flatten(), period, r);
        put(cpu, &at, "period", period.into(), rec);
        put(cpu, &at, "quota", quota.into(), rec);
    }
    match cpu.get("shares").map(Value::as_u64) {
        // Zero or absent is the kernel default, 1024: kept if allowed.
        None | Some(Some(0)) if verb == Verb::Update || r.cpu_shares_max >= DEFAULT_SHARES => {}
        None | Some(Some(0)) => put(cpu, &at, "shares", r.cpu_shares_max.into(), rec),
        Some(requested) => {
            let shares = clamp_shares(requested.unwrap_or(u64::MAX), r);
            put(cpu, &at, "shares", shares.into(), rec);
        }
    }
}

/// The cgroup v2 `unified` keys for memory and CPU. Values are rewritten as
/// plain decimal numbers, so the kernel reads exactly what was judged.
fn unified(
    map: &mut Map<String, Value>,
    at: &str,
    limit: Option<i64>,
    r: &ResourcesSection,
    rec: &mut Record,
) -> Result<(), Denial> {
    let Some(Value::Object(unified)) = map.get_mut("unified") else {
        return Ok(());
    };
    let at = format!("{at}/unified");
    let max = r.memory_max.0;
    let text = |unified: &Map<String, Value>, key: &str| {
        unified
            .get(key)
            .map(|v| v.as_str().map(str::trim).unwrap_or("").to_string())
    };
    let bad = |key: &str, value: &str, why: &str| {
        Denial::new(
            RULE,
            format!("{at}/{key}"),
            value,
            format!("cannot judge this value: {why}"),
        )
    };
    let bytes = |key: &str, value: &str| -> Result<u64, Denial> {
        if value == "max" {
            return Ok(u64::MAX);
        }
        parse_size(value).ok_or_else(|| bad(key, value, "expected \"max\" or a size"))
    };
    let memory_keys = ["memory.max", "memory.swap.max"];
    if memory_keys.iter().any(|k| unified.contains_key(*k)) {
        // v2 counts swap apart from memory: together they stay within max.
        let memory = match text(unified, "memory.max") {
            Some(v) => bytes("memory.max", &v)?.min(max),
            None => limit.and_then(|l| u64::try_from(l).ok()).unwrap_or(max),
        };
        let swap_room = max - memory.min(max);
        let swap = match text(unified, "memory.swap.max") {
            Some(v) => bytes("memory.swap.max", &v)?.min(swap_room),
            None => swap_room,
        };
        if unified.contains_key("memory.max") {
            put(unified, &at, "memory.max", memory.to_string().into(), rec);
        }
        put(
            unified,
            &at,
            "memory.swap.max",
            swap.to_string().into(),
            rec,
        );
    }
    for key in ["memory.min", "memory.low"] {
        if let Some(v) = text(unified, key) {
            let protected = bytes(key, &v)?.min(max);
            put(unified, &at, key, protected.to_string().into(), rec);
        }
    }
    if let Some(v) = text(unified, "cpu.max") {
        let mut parts = v.split_whitespace();
        let quota = match parts.next() {
            Some("max") => None,
            Some(q) => Some(
                q.parse::<i64>()
                    .map_err(|_| bad("cpu.max", &v, "expected \"QUOTA|max [PERIOD]\""))?,
            ),
            None => None,
        };
        let period = match parts.next() {
            Some(p) => Some(
                p.parse::<u64>()
                    .map_err(|_| bad("cpu.max", &v, "expected \"QUOTA|max [PERIOD]\""))?,
            ),
            None => None,
        };
        if parts.next().is_some() {
            return Err(bad("cpu.max", &v, "expected \"QUOTA|max [PERIOD]\""));
        }
        let period = clamp_period(period);
        let quota = clamp_quota(quota, period, r);
        put(
            unified,
            &at,
            "cpu.max",
            format!("{quota} {period}").into(),
            rec,
        );
    }
    if let Some(v) = text(unified, "cpu.weight") {
        let weight: u64 = v
            .parse()
            .map_err(|_| bad("cpu.weight", &v, "expected a number"))?;
        let weight = weight.clamp(1, r.cpu_weight_max());
        put(unified, &at, "cpu.weight", weight.to_string().into(), rec);
    }
    // The nice form of cpu.weight: below 0 is more than the default weight.
    if let Some(v) = text(unified, "cpu.weight.nice") {
        let nice: i64 = v
            .parse()
            .map_err(|_| bad("cpu.weight.nice", &v, "expected a number"))?;
        put(
            unified,
            &at,
            "cpu.weight.nice",
            nice.clamp(0, 19).to_string().into(),
            rec,
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ByteSize, Policy};
    use crate::host::FakeHost;
    use serde_json::json;

    fn policy() -> Policy {
        let mut p = Policy::default();
        p.resources.memory_max = ByteSize(64 << 20);
        p.resources.cpus = 0.5;
        p.resources.cpu_shares_max = 512;
        p
    }

    fn run_with(doc: &mut Value, update: bool, host: &FakeHost) -> Result<Record, Denial> {
        let rule = if update { apply_update } else { apply };
        crate::rules::run_rule_with(rule, doc, &policy(), host, None)
    }

    fn run(doc: &mut Value, update: bool) -> Record {
        run_with(doc, update, &FakeHost::new()).unwrap()
    }

    const MAX: i64 = 64 << 20;

    #[test]
    fn docker_default_gets_every_ceiling() {
        let mut spec: Value = serde_json::from_str(include_str!(
            "../../tests/fixtures/docker-20.10/config-default.json"
        ))
        .unwrap();
        let devices = spec["linux"]["resources"]["devices"].clone();
        run(&mut spec, false);
        let res = &spec["linux"]["resources"];
        assert_eq!(res["memory"]["limit"], MAX);
        assert_eq!(res["memory"]["swap"], MAX);
        assert_eq!(res["memory"]["disableOOMKiller"], false);
        assert_eq!(
            res["cpu"],
            json!({"shares": 512, "period": 100_000, "quota": 50_000})
        );
        assert_eq!(res["devices"], devices);
    }

    #[test]
    fn memory_is_min_of_request_and_policy() {
        for (limit, swap, want_limit, want_swap) in [
            (json!(0), json!(0), MAX, MAX),
            (json!(-1), json!(-1), MAX, MAX),
            (json!(64i64 << 30), json!(128i64 << 30), MAX, MAX),
            (json!(16 << 20), json!(32 << 20), 16 << 20, 32 << 20),
            (json!(16 << 20), json!(128i64 << 30), 16 << 20, MAX),
            (json!("1g"), json!(1.5), MAX, MAX),
        ] {
            let mut spec =
                json!({"linux": {"resources": {"memory": {"limit": limit, "swap": swap}}}});
            run(&mut spec, false);
            let memory = &spec["linux"]["resources"]["memory"];
            assert_eq!(memory["limit"], want_limit, "{limit}");
            assert_eq!(memory["swap"], want_swap, "{swap}");
        }
    }

    #[test]
    fn no_swap_accounting_adds_no_swap_key() {
        let host = FakeHost {
            no_swap_limit: true,
            ..FakeHost::new()
        };
        let mut spec = json!({});
        run_with(&mut spec, false, &host).unwrap();
        assert_eq!(spec["linux"]["resources"]["memory"], json!({"limit": MAX}));
        let mut spec = json!({"linux": {"resources": {"memory": {"swap": -1}}}});
        run_with(&mut spec, false, &host).unwrap();
        assert_eq!(spec["linux"]["resources"]["memory"]["swap"], MAX);
    }

    #[test]
    fn reservation_stays_under_the_limit() {
        for (req, want) in [
            (json!(1 << 20), json!(1 << 20)),
            (json!(-1), json!(MAX)),
            (json!(1i64 << 40), json!(MAX)),
            (json!("x"), json!(0)),
        ] {
            let mut spec = json!({"linux": {"resources": {"memory": {"reservation": req}}}});
            run(&mut spec, false);
            assert_eq!(spec["linux"]["resources"]["memory"]["reservation"], want);
        }
    }

    #[test]
    fn cpu_quota_period_and_shares() {
        for (quota, period, want_quota, want_period) in [
            (json!(-1), json!(100_000), 50_000, 100_000),
            (json!(6_400_000), json!(100_000), 50_000, 100_000),
            (json!(20_000), json!(100_000), 20_000, 100_000),
            (json!(100_000), json!(1000), 1000, 1000),
            (json!(100_000), json!(5), 50_000, 100_000),
            (json!(1_000_000), json!(1_000_000), 500_000, 1_000_000),
        ] {
            let mut spec =
                json!({"linux": {"resources": {"cpu": {"quota": quota, "period": period}}}});
            run(&mut spec, false);
            let cpu = &spec["linux"]["resources"]["cpu"];
            assert_eq!(
                (cpu["quota"].clone(), cpu["period"].clone()),
                (json!(want_quota), json!(want_period))
            );
        }
        for (shares, want) in [
            (json!(262_144), json!(512)),
            (json!(2), json!(2)),
            (json!(-5), json!(512)),
        ] {
            let mut spec = json!({"linux": {"resources": {"cpu": {"shares": shares}}}});
            run(&mut spec, false);
            assert_eq!(spec["linux"]["resources"]["cpu"]["shares"], want);
        }
        // Absent shares are the kernel's 1024: kept when the ceiling allows.
        let mut p = Policy::default();
        p.resources.cpu_shares_max = 2048;
        let host = FakeHost::new();
        let cx = RuleContext {
            policy: &p,
            host: &host,
            create: None,
            process_field: "",
        };
        let mut spec = json!({});
        apply(&mut spec, &cx, &mut Record::default()).unwrap();
        assert!(spec["linux"]["resources"]["cpu"].get("shares").is_none());
    }

    #[test]
    fn docker_update_memory_and_cpus_are_clamped() {
        let mut update: Value = serde_json::from_str(include_str!(
            "../../tests/fixtures/docker-20.10/update-memory.json"
        ))
        .unwrap();
        update["memory"]["limit"] = json!(64i64 << 30);
        update["memory"]["swap"] = json!(128i64 << 30);
        update["cpu"]["quota"] = json!(6_400_000);
        update["cpu"]["period"] = json!(100_000);
        run(&mut update, true);
        assert_eq!(update["memory"]["limit"], MAX);
        assert_eq!(update["memory"]["swap"], MAX);
        assert_eq!(update["memory"]["reservation"], 0);
        assert_eq!(
            update["cpu"],
            json!({"shares": 0, "quota": 50_000, "period": 100_000})
        );
    }

    #[test]
    fn update_leaves_what_is_not_sent() {
        let mut update: Value = serde_json::from_str(include_str!(
            "../../tests/fixtures/docker-20.10/update-pids-unlimited.json"
        ))
        .unwrap();
        let before = update.clone();
        assert!(run(&mut update, true).changes.is_empty());
        assert_eq!(update, before);
        // Zero is "no change" to runc.
        let mut update = json!({"memory": {"limit": 0, "swap": 0}, "cpu": {"quota": 0, "period": 0, "shares": 0}});
        assert!(run(&mut update, true).changes.is_empty());
        // A period alone could stretch the old quota: the quota comes too.
        let mut update = json!({"cpu": {"period": 1000}});
        run(&mut update, true);
        assert_eq!(update["cpu"], json!({"period": 1000, "quota": 1000}));
        let mut update = json!({"memory": {"limit": -1}, "cpu": {"shares": 262_144}});
        run(&mut update, true);
        assert_eq!(update["memory"], json!({"limit": MAX}));
        assert_eq!(update["cpu"]["shares"], 512);
    }

    #[test]
    fn unified_keys_are_clamped_and_normalised() {
        let mut spec = json!({"linux": {"resources": {
            "memory": {"limit": 16 << 20},
            "unified": {"memory.max": "max", "cpu.max": "max 1000", "cpu.weight": "10000",
                        "memory.min": "1t", "cpu.weight.nice": "-20", "io.weight": "500"}}}});
        run(&mut spec, false);
        let u = &spec["linux"]["resources"]["unified"];
        assert_eq!(u["memory.max"], (64 << 20).to_string());
        assert_eq!(u["memory.swap.max"], "0");
        assert_eq!(u["cpu.max"], "1000 1000");
        assert_eq!(u["cpu.weight"], "50");
        assert_eq!(u["memory.min"], (64 << 20).to_string());
        assert_eq!(u["cpu.weight.nice"], "0");
        assert_eq!(u["io.weight"], "500");
        // Swap alone: room left above the (OCI) limit.
        let mut spec = json!({"linux": {"resources": {"memory": {"limit": 16 << 20},
            "unified": {"memory.swap.max": "max"}}}});
        run(&mut spec, false);
        assert_eq!(
            spec["linux"]["resources"]["unified"]["memory.swap.max"],
            (48 << 20).to_string()
        );
        let mut update = json!({"unified": {"memory.max": "32M", "cpu.max": "20000"}});
        run(&mut update, true);
        assert_eq!(update["unified"]["memory.max"], (32 << 20).to_string());
        assert_eq!(update["unified"]["memory.swap.max"], (32 << 20).to_string());
        assert_eq!(update["unified"]["cpu.max"], "20000 100000");
    }

    fn create_with_hook() -> crate::engine::CreateContext {
        crate::engine::CreateContext {
            container_id: "c1".into(),
            network_hook: Some(json!({"path": "/usr/bin/vibe-shim", "args": []})),
            ..Default::default()
        }
    }

    fn hook_args(spec: &Value) -> Vec<Value> {
        let list = spec["hooks"]["createRuntime"].as_array().unwrap();
        let ours: Vec<_> = list
            .iter()
            .filter(|h| h["args"][3] == KERNEL_TCP_HOOK_MARKER)
            .collect();
        assert_eq!(ours.len(), 1, "{list:?}");
        ours[0]["args"].as_array().unwrap().clone()
    }

    #[test]
    fn kernel_tcp_is_min_of_request_and_bound_and_never_added() {
        // The bound defaults to memory_max.
        for (req, want) in [
            (json!(4 << 20), json!(4 << 20)),
            (json!(-1), json!(MAX)),
            (json!(1i64 << 40), json!(MAX)),
            (json!("1g"), json!(MAX)),
        ] {
            let mut spec = json!({"linux": {"resources": {"memory": {"kernelTCP": req}}}});
            run(&mut spec, false);
            assert_eq!(
                spec["linux"]["resources"]["memory"]["kernelTCP"], want,
                "{req}"
            );
        }
        let mut spec = json!({});
        run(&mut spec, false);
        assert!(spec["linux"]["resources"]["memory"]
            .get("kernelTCP")
            .is_none());
        // An own kernel_tcp_max.
        let mut p = policy();
        p.resources.kernel_tcp_max = Some(ByteSize(8 << 20));
        let mut spec = json!({"linux": {"resources": {"memory": {"kernelTCP": 16 << 20}}}});
        crate::rules::run_rule_with(apply, &mut spec, &p, &FakeHost::new(), None).unwrap();
        assert_eq!(spec["linux"]["resources"]["memory"]["kernelTCP"], 8 << 20);
    }

    #[test]
    fn update_kernel_tcp_is_clamped_and_zero_left() {
        let mut update = json!({"memory": {"kernelTCP": -1}});
        run(&mut update, true);
        assert_eq!(update["memory"], json!({"kernelTCP": MAX}));
        let mut update = json!({"memory": {"kernelTCP": 0, "kernel": 0}});
        assert!(run(&mut update, true).changes.is_empty());
        let mut update = json!({"memory": {"kernelTCP": 1 << 20}});
        assert!(run(&mut update, true).changes.is_empty());
    }

    #[test]
    fn the_hook_carries_the_judged_bound() {
        let create = create_with_hook();
        let host = FakeHost::new();
        let both = |spec: &mut Value, p: &Policy| {
            for rule in [apply as crate::engine::SpecRule, apply_hook] {
                crate::rules::run_rule_with(rule, spec, p, &host, Some(&create)).unwrap();
            }
        };
        let mut spec = json!({});
        both(&mut spec, &policy());
        assert_eq!(
            hook_args(&spec),
            [
                json!("vibe-shim"),
                json!("hook"),
                json!(KERNEL_TCP_HOOK),
                json!(KERNEL_TCP_HOOK_MARKER),
                json!(MAX.to_string())
            ]
        );
        assert_eq!(
            spec["hooks"]["createRuntime"][0]["path"],
            "/usr/bin/vibe-shim"
        );
        // A smaller request is what the hook writes; a larger one is not.
        for (req, want) in [(2 << 20, 2 << 20), (1i64 << 40, MAX)] {
            let mut spec = json!({"linux": {"resources": {"memory": {"kernelTCP": req}}}});
            both(&mut spec, &policy());
            assert_eq!(hook_args(&spec)[4], json!(want.to_string()));
        }
        let mut p = policy();
        p.resources.kernel_tcp_max = Some(ByteSize(8 << 20));
        let mut spec = json!({});
        both(&mut spec, &p);
        assert_eq!(hook_args(&spec)[4], json!((8 << 20).to_string()));
    }

    #[test]
    fn a_forged_hook_is_replaced_and_others_stay() {
        let create = create_with_hook();
        let mut spec = json!({"hooks": {
            "createRuntime": [
                {"path": "/bin/true", "args": ["true", KERNEL_TCP_HOOK_MARKER, "1"]},
                {"path": "/usr/bin/engine-hook", "args": ["engine-hook"]}],
            "poststart": [{"path": "/bin/true", "args": ["x", KERNEL_TCP_HOOK_MARKER]}]}});
        crate::rules::run_rule_with(
            apply_hook,
            &mut spec,
            &policy(),
            &FakeHost::new(),
            Some(&create),
        )
        .unwrap();
        let list = spec["hooks"]["createRuntime"].as_array().unwrap();
        assert_eq!(list.len(), 2, "{list:?}");
        assert_eq!(list[0]["path"], "/usr/bin/engine-hook");
        assert_eq!(hook_args(&spec)[4], json!(MAX.to_string()));
        assert!(spec["hooks"]["poststart"]
            .as_array()
            .is_none_or(|l| l.is_empty()));
        // A second pass (restore of a rewritten bundle) keeps exactly one.
        let mut again = spec.clone();
        for rule in [apply as crate::engine::SpecRule, apply_hook] {
            crate::rules::run_rule_with(
                rule,
                &mut again,
                &policy(),
                &FakeHost::new(),
                Some(&create),
            )
            .unwrap();
        }
        assert_eq!(
            again["hooks"]["createRuntime"],
            spec["hooks"]["createRuntime"]
        );
        // No create context (exec, explain): no hook.
        let mut spec = json!({});
        crate::rules::run_rule_with(apply_hook, &mut spec, &policy(), &FakeHost::new(), None)
            .unwrap();
        assert!(spec.get("hooks").is_none());
    }

    #[test]
    fn the_network_hook_carries_the_bound_when_there_is_one() {
        let network = json!({"path": "/usr/bin/vibe-shim",
            "args": ["vibe-shim", "hook", "network", NETWORK_HOOK_MARKER]});
        let create = crate::engine::CreateContext {
            container_id: "c1".into(),
            network_hook: Some(network.clone()),
            ..Default::default()
        };
        let host = FakeHost::new();
        let chain = |spec: &mut Value| {
            for rule in [
                apply as crate::engine::SpecRule,
                crate::rules::network_hook::apply,
                apply_hook,
            ] {
                crate::rules::run_rule_with(rule, spec, &policy(), &host, Some(&create)).unwrap();
            }
        };
        let mut spec = json!({"linux": {"resources": {"memory": {"kernelTCP": 2 << 20}}},
            "hooks": {"createRuntime": [
                {"path": "/usr/bin/engine-hook", "args": ["engine-hook"]},
                {"path": "/bin/true", "args": ["true", KERNEL_TCP_HOOK_MARKER, "1"]}]}});
        chain(&mut spec);
        let list = spec["hooks"]["createRuntime"].as_array().unwrap();
        assert_eq!(
            list.len(),
            2,
            "one process for the wall and the bound: {list:?}"
        );
        assert_eq!(list[0]["path"], "/usr/bin/engine-hook");
        let args = strings(list[1].get("args"));
        assert_eq!(
            args,
            [
                "vibe-shim",
                "hook",
                "network",
                KERNEL_TCP_FLAG,
                "2097152",
                NETWORK_HOOK_MARKER
            ]
        );
        assert_eq!(kernel_tcp_flag(&args), Ok(Some(2 << 20)));
        // A second pass (a restored bundle) keeps one entry, one bound.
        let mut again = spec.clone();
        chain(&mut again);
        assert_eq!(again["hooks"], spec["hooks"]);
        // So does the rule run twice over the same entry.
        crate::rules::run_rule_with(apply_hook, &mut again, &policy(), &host, Some(&create))
            .unwrap();
        assert_eq!(again["hooks"], spec["hooks"]);
    }

    #[test]
    fn the_flag_parses_strictly() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(kernel_tcp_flag(&args(&["network", "m"])), Ok(None));
        assert_eq!(
            kernel_tcp_flag(&args(&[KERNEL_TCP_FLAG, "4096", "m"])),
            Ok(Some(4096))
        );
        for bad in [
            &[KERNEL_TCP_FLAG][..],
            &[KERNEL_TCP_FLAG, "0"],
            &[KERNEL_TCP_FLAG, "-1"],
            &[KERNEL_TCP_FLAG, "1m"],
            &[KERNEL_TCP_FLAG, "18446744073709551615"],
        ] {
            assert!(kernel_tcp_flag(&args(bad)).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn hook_args_parse_strictly() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            parse_kernel_tcp_args(&args(&[KERNEL_TCP_HOOK_MARKER, "1048576"])),
            Ok(1 << 20)
        );
        for bad in [
            &[KERNEL_TCP_HOOK_MARKER, "0"][..],
            &[KERNEL_TCP_HOOK_MARKER, "-1"],
            &[KERNEL_TCP_HOOK_MARKER, "1m"],
            &[KERNEL_TCP_HOOK_MARKER, "18446744073709551615"],
            &[KERNEL_TCP_HOOK_MARKER],
            &["other", "1"],
            &[KERNEL_TCP_HOOK_MARKER, "1", "2"],
        ] {
            assert!(parse_kernel_tcp_args(&args(bad)).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn unparsable_unified_values_are_refused() {
        for (key, value) in [
            ("memory.max", "0x100000000"),
            ("cpu.max", "1 2 3"),
            ("cpu.max", "lots"),
            ("cpu.weight", "-1"),
            ("memory.low", "1.5g"),
        ] {
            let mut spec = json!({"linux": {"resources": {"unified": {key: value}}}});
            let denial = run_with(&mut spec, false, &FakeHost::new()).unwrap_err();
            assert_eq!(denial.rule, RULE);
            assert!(denial.field.ends_with(key), "{denial}");
            assert_eq!(denial.value, value);
        }
    }
}
