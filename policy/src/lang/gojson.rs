//! Reads a client's JSON document the way vibe-shim must, given that runc
//! reads it with Go's `encoding/json`.
//!
//! Go matches an object key to a struct field case-insensitively: exact
//! spelling first, else the field whose name folds equal (Go >= 1.21
//! `foldName`: ASCII letters upper-cased, other runes to the smallest rune of
//! their `unicode.SimpleFold` orbit; the only non-ASCII runes that land on
//! ASCII are `ſ` U+017F -> `S` and the Kelvin sign U+212A -> `K`; Go <= 1.20's
//! `equalFoldRight` special-cases exactly the same two). A repeated key
//! decodes again into the same field, so the last one wins (and a struct or
//! slice element merges with what the earlier one left). serde_json and the
//! rules see only the exact spelling, and only one value per key.
//!
//! So every document runc decodes is parsed here, with a schema of the Go
//! structs runc decodes it into, and refused when a key is not spelled
//! exactly as the field it folds to, or when a key repeats at any level runc
//! decodes (struct fields and Go maps alike). Keys that fold to no field
//! runc knows are kept, as before: runc ignores them. The check runs inside
//! the one serde parse that builds the `Value` (keys arrive unescaped, so
//! `"pro\u0063ess"` is `process`), before duplicates vanish.
//!
//! Other Go-vs-serde differences, all on the refusing side of serde:
//! invalid UTF-8 and lone surrogate escapes (Go substitutes U+FFFD; serde
//! refuses), data after the first value (Go's `Decoder.Decode` ignores it;
//! serde refuses), a leading BOM (both refuse), nesting deeper than 128
//! (serde refuses). Numbers and `null` are judged on the rewritten output,
//! which is what runc reads: serde writes back the same number it read, and
//! Go refuses a non-integer or out-of-range number for an integer field.
//!
//! [`go_view`] decodes a document as runc would (fold matching, last wins,
//! merging, unknown keys dropped); the property test judges the rewritten
//! output through it.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::{Map, Number, Value};

use crate::decision::Denial;

/// The rule name in a refusal.
pub const RULE: &str = "json-keys";

/// Why a document was not taken.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Not one JSON value serde accepts (the caller words this refusal).
    #[error("not JSON: {0}")]
    Syntax(serde_json::Error),
    /// A key runc would read differently from vibe-shim.
    #[error("{0}")]
    Key(Denial),
}

/// The shape of a Go type, as far as decoding keys is concerned.
#[derive(Debug)]
pub enum Kind {
    /// A string, number or bool (or a type runc never decodes keys in).
    Leaf,
    /// `interface{}`: objects become `map[string]interface{}`.
    Any,
    /// A struct: its JSON field names (embedded structs flattened).
    Struct(&'static [Field]),
    /// `map[string]T`.
    Map(&'static Kind),
    /// `[]T`.
    List(&'static Kind),
}

/// One struct field: its JSON name and type.
#[derive(Debug)]
pub struct Field(pub &'static str, pub Kind);

use Kind::{Any, Leaf, List, Map as GoMap, Struct};

const STRINGS: Kind = List(&Leaf);

// The structs of opencontainers/runtime-spec specs-go/config.go, the union of
// v1.0.2 (runc 1.1), v1.1.0 (runc 1.2) and v1.2.x (runc 1.3) plus newer
// fields: a field runc does not know only makes the check stricter.

const ID_MAPPING: Kind = Struct(&[
    Field("containerID", Leaf),
    Field("hostID", Leaf),
    Field("size", Leaf),
]);

const USER: &[Field] = &[
    Field("uid", Leaf),
    Field("gid", Leaf),
    Field("umask", Leaf),
    Field("additionalGids", List(&Leaf)),
    Field("username", Leaf),
];

const CAPABILITIES: &[Field] = &[
    Field("bounding", STRINGS),
    Field("effective", STRINGS),
    Field("inheritable", STRINGS),
    Field("permitted", STRINGS),
    Field("ambient", STRINGS),
];

/// `specs.Process`: the spec's `process` and runc exec's `--process` file.
pub const PROCESS: &[Field] = &[
    Field("terminal", Leaf),
    Field(
        "consoleSize",
        Struct(&[Field("height", Leaf), Field("width", Leaf)]),
    ),
    Field("user", Struct(USER)),
    Field("args", STRINGS),
    Field("commandLine", Leaf),
    Field("env", STRINGS),
    Field("cwd", Leaf),
    Field("capabilities", Struct(CAPABILITIES)),
    Field(
        "rlimits",
        List(&Struct(&[
            Field("type", Leaf),
            Field("hard", Leaf),
            Field("soft", Leaf),
        ])),
    ),
    Field("noNewPrivileges", Leaf),
    Field("apparmorProfile", Leaf),
    Field("oomScoreAdj", Leaf),
    Field(
        "scheduler",
        Struct(&[
            Field("policy", Leaf),
            Field("nice", Leaf),
            Field("priority", Leaf),
            Field("flags", STRINGS),
            Field("runtime", Leaf),
            Field("deadline", Leaf),
            Field("period", Leaf),
        ]),
    ),
    Field("selinuxLabel", Leaf),
    Field(
        "ioPriority",
        Struct(&[Field("class", Leaf), Field("priority", Leaf)]),
    ),
    Field(
        "execCPUAffinity",
        Struct(&[Field("initial", Leaf), Field("final", Leaf)]),
    ),
];

const ROOT: &[Field] = &[Field("path", Leaf), Field("readonly", Leaf)];

const MOUNT: &[Field] = &[
    Field("destination", Leaf),
    Field("type", Leaf),
    Field("source", Leaf),
    Field("options", STRINGS),
    Field("uidMappings", List(&ID_MAPPING)),
    Field("gidMappings", List(&ID_MAPPING)),
];

const HOOK: Kind = Struct(&[
    Field("path", Leaf),
    Field("args", STRINGS),
    Field("env", STRINGS),
    Field("timeout", Leaf),
]);

const HOOKS: &[Field] = &[
    Field("prestart", List(&HOOK)),
    Field("createRuntime", List(&HOOK)),
    Field("createContainer", List(&HOOK)),
    Field("startContainer", List(&HOOK)),
    Field("poststart", List(&HOOK)),
    Field("poststop", List(&HOOK)),
];

/// `LinuxWeightDevice` and `LinuxThrottleDevice` embed `LinuxBlockIODevice`,
/// whose fields Go promotes to the outer object.
const WEIGHT_DEVICE: Kind = Struct(&[
    Field("major", Leaf),
    Field("minor", Leaf),
    Field("weight", Leaf),
    Field("leafWeight", Leaf),
]);
const THROTTLE_DEVICE: Kind = Struct(&[
    Field("major", Leaf),
    Field("minor", Leaf),
    Field("rate", Leaf),
]);

/// `specs.LinuxResources`: the spec's `linux.resources` and runc update's
/// `--resources` document (runc's update.go decodes into this type).
pub const RESOURCES: &[Field] = &[
    Field(
        "devices",
        List(&Struct(&[
            Field("allow", Leaf),
            Field("type", Leaf),
            Field("major", Leaf),
            Field("minor", Leaf),
            Field("access", Leaf),
        ])),
    ),
    Field(
        "memory",
        Struct(&[
            Field("limit", Leaf),
            Field("reservation", Leaf),
            Field("swap", Leaf),
            Field("kernel", Leaf),
            Field("kernelTCP", Leaf),
            Field("swappiness", Leaf),
            Field("disableOOMKiller", Leaf),
            Field("useHierarchy", Leaf),
            Field("checkBeforeUpdate", Leaf),
        ]),
    ),
    Field(
        "cpu",
        Struct(&[
            Field("shares", Leaf),
            Field("quota", Leaf),
            Field("burst", Leaf),
            Field("period", Leaf),
            Field("realtimeRuntime", Leaf),
            Field("realtimePeriod", Leaf),
            Field("cpus", Leaf),
            Field("mems", Leaf),
            Field("idle", Leaf),
        ]),
    ),
    Field("pids", Struct(&[Field("limit", Leaf)])),
    Field(
        "blockIO",
        Struct(&[
            Field("weight", Leaf),
            Field("leafWeight", Leaf),
            Field("weightDevice", List(&WEIGHT_DEVICE)),
            Field("throttleReadBpsDevice", List(&THROTTLE_DEVICE)),
            Field("throttleWriteBpsDevice", List(&THROTTLE_DEVICE)),
            Field("throttleReadIOPSDevice", List(&THROTTLE_DEVICE)),
            Field("throttleWriteIOPSDevice", List(&THROTTLE_DEVICE)),
        ]),
    ),
    Field(
        "hugepageLimits",
        List(&Struct(&[Field("pageSize", Leaf), Field("limit", Leaf)])),
    ),
    Field(
        "network",
        Struct(&[
            Field("classID", Leaf),
            Field(
                "priorities",
                List(&Struct(&[Field("name", Leaf), Field("priority", Leaf)])),
            ),
        ]),
    ),
    Field(
        "rdma",
        GoMap(&Struct(&[
            Field("hcaHandles", Leaf),
            Field("hcaObjects", Leaf),
        ])),
    ),
    Field("unified", GoMap(&Leaf)),
];

const DEVICE: Kind = Struct(&[
    Field("path", Leaf),
    Field("type", Leaf),
    Field("major", Leaf),
    Field("minor", Leaf),
    Field("fileMode", Leaf),
    Field("uid", Leaf),
    Field("gid", Leaf),
]);

const SECCOMP: &[Field] = &[
    Field("defaultAction", Leaf),
    Field("defaultErrnoRet", Leaf),
    Field("architectures", STRINGS),
    Field("flags", STRINGS),
    Field("listenerPath", Leaf),
    Field("listenerMetadata", Leaf),
    Field(
        "syscalls",
        List(&Struct(&[
            Field("names", STRINGS),
            Field("action", Leaf),
            Field("errnoRet", Leaf),
            Field(
                "args",
                List(&Struct(&[
                    Field("index", Leaf),
                    Field("value", Leaf),
                    Field("valueTwo", Leaf),
                    Field("op", Leaf),
                ])),
            ),
        ])),
    ),
];

const LINUX: &[Field] = &[
    Field("uidMappings", List(&ID_MAPPING)),
    Field("gidMappings", List(&ID_MAPPING)),
    Field("sysctl", GoMap(&Leaf)),
    Field("resources", Struct(RESOURCES)),
    Field("cgroupsPath", Leaf),
    Field(
        "namespaces",
        List(&Struct(&[Field("type", Leaf), Field("path", Leaf)])),
    ),
    Field("devices", List(&DEVICE)),
    Field("seccomp", Struct(SECCOMP)),
    Field("rootfsPropagation", Leaf),
    Field("maskedPaths", STRINGS),
    Field("readonlyPaths", STRINGS),
    Field("mountLabel", Leaf),
    Field(
        "intelRdt",
        Struct(&[
            Field("closID", Leaf),
            Field("schemata", Leaf),
            Field("l3CacheSchema", Leaf),
            Field("memBwSchema", Leaf),
            Field("enableCMT", Leaf),
            Field("enableMBM", Leaf),
        ]),
    ),
    Field(
        "personality",
        Struct(&[Field("domain", Leaf), Field("flags", STRINGS)]),
    ),
    Field(
        "timeOffsets",
        GoMap(&Struct(&[Field("secs", Leaf), Field("nanosecs", Leaf)])),
    ),
    Field("netDevices", GoMap(&Struct(&[Field("name", Leaf)]))),
    Field(
        "memoryPolicy",
        Struct(&[
            Field("mode", Leaf),
            Field("nodes", Leaf),
            Field("flags", STRINGS),
        ]),
    ),
];

const SOLARIS: &[Field] = &[
    Field("milestone", Leaf),
    Field("limitpriv", Leaf),
    Field("maxShmMemory", Leaf),
    Field(
        "anet",
        List(&Struct(&[
            Field("linkname", Leaf),
            Field("lowerLink", Leaf),
            Field("allowedAddress", Leaf),
            Field("configureAllowedAddress", Leaf),
            Field("defrouter", Leaf),
            Field("linkProtection", Leaf),
            Field("macAddress", Leaf),
        ])),
    ),
    Field("cappedCPU", Struct(&[Field("ncpus", Leaf)])),
    Field(
        "cappedMemory",
        Struct(&[Field("physical", Leaf), Field("swap", Leaf)]),
    ),
];

const WINDOWS: &[Field] = &[
    Field("layerFolders", STRINGS),
    Field(
        "devices",
        List(&Struct(&[Field("id", Leaf), Field("idType", Leaf)])),
    ),
    Field(
        "resources",
        Struct(&[
            Field("memory", Struct(&[Field("limit", Leaf)])),
            Field(
                "cpu",
                Struct(&[
                    Field("count", Leaf),
                    Field("shares", Leaf),
                    Field("maximum", Leaf),
                ]),
            ),
            Field(
                "storage",
                Struct(&[
                    Field("iops", Leaf),
                    Field("bps", Leaf),
                    Field("sandboxSize", Leaf),
                ]),
            ),
        ]),
    ),
    Field("credentialSpec", Any),
    Field("servicing", Leaf),
    Field("ignoreFlushesDuringBoot", Leaf),
    Field("hyperv", Struct(&[Field("utilityVMPath", Leaf)])),
    Field(
        "network",
        Struct(&[
            Field("endpointList", STRINGS),
            Field("allowUnqualifiedDNSQuery", Leaf),
            Field("DNSSearchList", STRINGS),
            Field("networkSharedContainerName", Leaf),
            Field("networkNamespace", Leaf),
        ]),
    ),
];

const VM_PATH_PARAMS: Kind = Struct(&[Field("path", Leaf), Field("parameters", STRINGS)]);

const VM: &[Field] = &[
    Field("hypervisor", VM_PATH_PARAMS),
    Field(
        "kernel",
        Struct(&[
            Field("path", Leaf),
            Field("parameters", STRINGS),
            Field("initrd", Leaf),
        ]),
    ),
    Field(
        "image",
        Struct(&[Field("path", Leaf), Field("format", Leaf)]),
    ),
];

/// `specs.Spec`: a bundle's config.json (runc's `loadSpec`).
pub const SPEC: &[Field] = &[
    Field("ociVersion", Leaf),
    Field("process", Struct(PROCESS)),
    Field("root", Struct(ROOT)),
    Field("hostname", Leaf),
    Field("domainname", Leaf),
    Field("mounts", List(&Struct(MOUNT))),
    Field("hooks", Struct(HOOKS)),
    Field("annotations", GoMap(&Leaf)),
    Field("linux", Struct(LINUX)),
    Field("solaris", Struct(SOLARIS)),
    Field("windows", Struct(WINDOWS)),
    Field("vm", Struct(VM)),
    Field("zos", Struct(&[Field("devices", List(&DEVICE))])),
];

/// `specs.Spec`, the type of config.json.
pub static SPEC_KIND: Kind = Struct(SPEC);
/// `specs.Process`, the type of an exec `--process` file.
pub static PROCESS_KIND: Kind = Struct(PROCESS);
/// `specs.LinuxResources`, the type of an update `--resources` document.
pub static RESOURCES_KIND: Kind = Struct(RESOURCES);

/// config.json, as runc's create/run/restore decode it.
pub fn spec_from_slice(bytes: &[u8]) -> Result<Value, Error> {
    from_slice(bytes, &SPEC_KIND)
}

/// An exec `--process` file.
pub fn process_from_slice(bytes: &[u8]) -> Result<Value, Error> {
    from_slice(bytes, &PROCESS_KIND)
}

/// An update `--resources` document.
pub fn resources_from_slice(bytes: &[u8]) -> Result<Value, Error> {
    from_slice(bytes, &RESOURCES_KIND)
}

/// Parses `bytes` as one JSON value, refusing keys Go would read differently
/// from serde under `kind`.
pub fn from_slice(bytes: &[u8], kind: &'static Kind) -> Result<Value, Error> {
    let mut denial = None;
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let parsed = Checked {
        kind,
        denial: &mut denial,
    }
    .deserialize(&mut de)
    .and_then(|value| de.end().map(|()| value));
    match (parsed, denial) {
        (Ok(value), _) => Ok(value),
        (Err(_), Some(denial)) => Err(Error::Key(denial)),
        (Err(e), None) => Err(Error::Syntax(e)),
    }
}

/// How `key` matches the fields of a Go struct.
enum Match {
    Exact(usize),
    Folded(usize),
    Unknown,
}

fn lookup(fields: &[Field], key: &str) -> Match {
    if let Some(i) = fields.iter().position(|f| f.0 == key) {
        return Match::Exact(i);
    }
    match fields.iter().position(|f| folds_to(key, f.0)) {
        Some(i) => Match::Folded(i),
        None => Match::Unknown,
    }
}

/// Whether Go's `encoding/json` folds `key` to the ASCII field name `name`.
pub fn folds_to(key: &str, name: &str) -> bool {
    let mut name = name.bytes();
    for c in key.chars() {
        let folded = match c {
            '\u{017F}' => b'S',
            '\u{212A}' => b'K',
            c if c.is_ascii() => (c as u8).to_ascii_uppercase(),
            // Every other rune folds to a non-ASCII rune: no ASCII name matches.
            _ => return false,
        };
        match name.next() {
            Some(n) if n.to_ascii_uppercase() == folded => {}
            _ => return false,
        }
    }
    name.next().is_none()
}

/// On a refusal from below, prefixes its path with this level's segment.
fn prefix(denial: &mut Option<Denial>, segment: &str) {
    if let Some(d) = denial {
        d.field = format!("/{segment}{}", d.field);
    }
}

/// A seed that parses one value of Go type `kind` into a `Value`, recording
/// a refusal in `denial` (and aborting the parse) when a key is smuggled.
struct Checked<'a> {
    kind: &'static Kind,
    denial: &'a mut Option<Denial>,
}

impl<'de> DeserializeSeed<'de> for Checked<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        match self.kind {
            // serde_json's own Value visitor is the fast path for the bulk.
            Leaf => Value::deserialize(d),
            _ => d.deserialize_any(self),
        }
    }
}

impl<'de> Visitor<'de> for Checked<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        // A list where Go wants something else fails runc's decode; its
        // items are still parsed as `interface{}`.
        let item: &'static Kind = match self.kind {
            List(item) => item,
            _ => &Any,
        };
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        loop {
            let seed = Checked {
                kind: item,
                denial: &mut *self.denial,
            };
            match seq.next_element_seed(seed) {
                Ok(Some(value)) => out.push(value),
                Ok(None) => return Ok(Value::Array(out)),
                Err(e) => {
                    prefix(self.denial, &out.len().to_string());
                    return Err(e);
                }
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        // Bit i: field i was seen (no Go struct here has 64 fields).
        let mut seen: u64 = 0;
        while let Some(key) = map.next_key::<String>()? {
            let child: Option<&'static Kind> = match self.kind {
                Struct(fields) => match lookup(fields, &key) {
                    Match::Exact(i) => {
                        if seen & (1 << i) != 0 {
                            return Err(refuse(self.denial, &key, duplicate(&key)));
                        }
                        seen |= 1 << i;
                        Some(&fields[i].1)
                    }
                    Match::Folded(i) => {
                        let reason = format!(
                            "key {key:?} is not spelled as the field it means: runc (Go \
                             encoding/json) matches keys case-insensitively and reads it \
                             as {:?}",
                            fields[i].0
                        );
                        return Err(refuse(self.denial, &key, reason));
                    }
                    // runc ignores it; kept as it was.
                    Match::Unknown => None,
                },
                GoMap(item) => {
                    if out.contains_key(&key) {
                        return Err(refuse(self.denial, &key, duplicate(&key)));
                    }
                    Some(item)
                }
                // `interface{}` (or an object where Go wants a list or a
                // scalar, which fails runc's decode): duplicates refused too.
                _ => {
                    if out.contains_key(&key) {
                        return Err(refuse(self.denial, &key, duplicate(&key)));
                    }
                    Some(&Any)
                }
            };
            let value = match child {
                Some(kind) => {
                    let seed = Checked {
                        kind,
                        denial: &mut *self.denial,
                    };
                    match map.next_value_seed(seed) {
                        Ok(value) => value,
                        Err(e) => {
                            prefix(self.denial, &crate::lang::json::pointer_segment(&key));
                            return Err(e);
                        }
                    }
                }
                None => map.next_value::<Value>()?,
            };
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

fn duplicate(key: &str) -> String {
    format!(
        "duplicate key {key:?}: runc (Go encoding/json) reads the last one, so only one \
         is accepted"
    )
}

/// Records the refusal of `key` and returns the error that aborts the parse.
fn refuse<E: de::Error>(slot: &mut Option<Denial>, key: &str, reason: String) -> E {
    *slot = Some(Denial::new(
        RULE,
        format!("/{}", crate::lang::json::pointer_segment(key)),
        key,
        reason,
    ));
    E::custom("refused by vibe-shim")
}

/// `document` decoded as runc's Go code would decode it into `kind`: keys
/// matched to fields by Go's folding (exact spelling first), unknown keys
/// dropped, repeated keys decoded again into the same field (last wins, a
/// struct, map or slice element merging with what was there), each field
/// under its own spelling. `Err` when Go's decode would fail on a type
/// mismatch, so runc would refuse the document. Simplification: `null`
/// clears any non-scalar (as for Go's pointers, maps and slices) and leaves
/// a scalar as it was (as for Go's value types).
pub fn go_view(document: &[u8], kind: &'static Kind) -> Result<Value, String> {
    let raw: Raw = serde_json::from_slice(document).map_err(|e| e.to_string())?;
    Ok(go_decode(&raw, kind, None)?.unwrap_or(Value::Null))
}

/// A JSON value that keeps every member of an object, repeats included.
#[derive(Debug)]
enum Raw {
    Scalar(Value),
    List(Vec<Raw>),
    Object(Vec<(String, Raw)>),
}

impl<'de> Deserialize<'de> for Raw {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Raw, D::Error> {
        d.deserialize_any(RawVisitor)
    }
}

struct RawVisitor;

impl<'de> Visitor<'de> for RawVisitor {
    type Value = Raw;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Raw, E> {
        Ok(Raw::Scalar(Value::Bool(v)))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Raw, E> {
        Ok(Raw::Scalar(Value::from(v)))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Raw, E> {
        Ok(Raw::Scalar(Value::from(v)))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Raw, E> {
        Ok(Raw::Scalar(
            Number::from_f64(v).map_or(Value::Null, Value::Number),
        ))
    }
    fn visit_str<E>(self, v: &str) -> Result<Raw, E> {
        Ok(Raw::Scalar(Value::String(v.to_string())))
    }
    fn visit_unit<E>(self) -> Result<Raw, E> {
        Ok(Raw::Scalar(Value::Null))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Raw, A::Error> {
        let mut out = Vec::new();
        while let Some(item) = seq.next_element()? {
            out.push(item);
        }
        Ok(Raw::List(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Raw, A::Error> {
        let mut out = Vec::new();
        while let Some((k, v)) = map.next_entry()? {
            out.push((k, v));
        }
        Ok(Raw::Object(out))
    }
}

/// Decodes `raw` into a Go value of `kind` that already holds `prior`;
/// `None` is Go's nil (or a field never set).
fn go_decode(
    raw: &Raw,
    kind: &'static Kind,
    prior: Option<Value>,
) -> Result<Option<Value>, String> {
    let mismatch = || Err(format!("Go cannot decode {raw:?} into {kind:?}"));
    match (raw, kind) {
        (Raw::Scalar(Value::Null), Leaf) => Ok(prior),
        (Raw::Scalar(Value::Null), _) => Ok(None),
        (_, Any) => Ok(Some(any_value(raw))),
        (Raw::Scalar(v), Leaf) => Ok(Some(v.clone())),
        (_, Leaf) | (Raw::Scalar(_), _) => mismatch(),
        (Raw::Object(members), Struct(fields)) => {
            let mut out = match prior {
                Some(Value::Object(map)) => map,
                _ => Map::new(),
            };
            for (key, value) in members {
                let Some(i) = go_field(fields, key) else {
                    continue;
                };
                let Field(name, field_kind) = &fields[i];
                match go_decode(value, field_kind, out.remove(*name))? {
                    Some(v) => out.insert(name.to_string(), v),
                    None => None,
                };
            }
            Ok(Some(Value::Object(out)))
        }
        (Raw::Object(members), GoMap(item)) => {
            // Go reuses a non-nil map; each element is decoded afresh.
            let mut out = match prior {
                Some(Value::Object(map)) => map,
                _ => Map::new(),
            };
            for (key, value) in members {
                let v = go_decode(value, item, None)?.unwrap_or(Value::Null);
                out.insert(key.clone(), v);
            }
            Ok(Some(Value::Object(out)))
        }
        (Raw::List(items), List(item)) => {
            // Go decodes element i into the slice's existing element i.
            let mut old = match prior {
                Some(Value::Array(old)) => old.into_iter(),
                _ => Vec::new().into_iter(),
            };
            let mut out = Vec::with_capacity(items.len());
            for raw_item in items {
                let v = go_decode(raw_item, item, old.next())?.unwrap_or(Value::Null);
                out.push(v);
            }
            Ok(Some(Value::Array(out)))
        }
        _ => mismatch(),
    }
}

/// The field Go decodes `key` into: the exact spelling, else the first that
/// folds equal. Written apart from [`lookup`] and [`folds_to`], so that the
/// property test's oracle does not share a mistake with the check it judges.
fn go_field(fields: &[Field], key: &str) -> Option<usize> {
    // Go's foldName: ASCII upper-cased; ſ and the Kelvin sign are the only
    // runes whose SimpleFold orbit's smallest rune is ASCII.
    fn fold(c: char) -> char {
        match c {
            '\u{017F}' => 'S',
            '\u{212A}' => 'K',
            c => c.to_ascii_uppercase(),
        }
    }
    let folded = |s: &str| s.chars().map(fold).collect::<String>();
    fields.iter().position(|f| f.0 == key).or_else(|| {
        let key = folded(key);
        fields.iter().position(|f| folded(f.0) == key)
    })
}

/// `interface{}`: maps with exact keys, last one wins.
fn any_value(raw: &Raw) -> Value {
    match raw {
        Raw::Scalar(v) => v.clone(),
        Raw::List(items) => Value::Array(items.iter().map(any_value).collect()),
        Raw::Object(members) => {
            let mut out = Map::new();
            for (k, v) in members {
                out.insert(k.clone(), any_value(v));
            }
            Value::Object(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/docker-20.10");

    fn refused(bytes: &[u8]) -> Denial {
        match spec_from_slice(bytes) {
            Err(Error::Key(denial)) => denial,
            other => panic!("{}: {other:?}", String::from_utf8_lossy(bytes)),
        }
    }

    fn key_denial(result: Result<Value, Error>) -> Denial {
        match result {
            Err(Error::Key(denial)) => denial,
            other => panic!("{other:?}"),
        }
    }

    /// Every key of `value` under `kind` is a field runc knows, spelled exactly.
    fn all_keys_known(value: &Value, kind: &Kind, path: &str, unknown: &mut Vec<String>) {
        match (value, kind) {
            (Value::Object(map), Struct(fields)) => {
                for (k, v) in map {
                    match fields.iter().find(|f| f.0 == k) {
                        Some(f) => all_keys_known(v, &f.1, &format!("{path}/{k}"), unknown),
                        None => unknown.push(format!("{path}/{k}")),
                    }
                }
            }
            (Value::Object(map), GoMap(item)) => {
                for (k, v) in map {
                    all_keys_known(v, item, &format!("{path}/{k}"), unknown);
                }
            }
            (Value::Array(items), List(item)) => {
                for (i, v) in items.iter().enumerate() {
                    all_keys_known(v, item, &format!("{path}/{i}"), unknown);
                }
            }
            _ => {}
        }
    }

    #[test]
    fn docker_documents_parse_exactly_as_serde_does_and_every_key_is_in_the_schema() {
        let mut seen = 0;
        for entry in std::fs::read_dir(FIXTURES).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            let kind: &Kind = match name.split('-').next().unwrap() {
                "config" => &SPEC_KIND,
                "process" => &PROCESS_KIND,
                "update" => &RESOURCES_KIND,
                _ => continue,
            };
            let bytes = std::fs::read(&path).unwrap();
            let ours = from_slice(&bytes, kind).unwrap();
            let plain: Value = serde_json::from_slice(&bytes).unwrap();
            assert_eq!(ours.to_string(), plain.to_string(), "{name}");
            let mut unknown = Vec::new();
            all_keys_known(&ours, kind, "", &mut unknown);
            assert!(unknown.is_empty(), "{name}: {unknown:?}");
            assert_eq!(go_view(&bytes, kind).unwrap(), plain, "{name}");
            seen += 1;
        }
        assert!(seen >= 25);
    }

    #[test]
    fn go_folding_rule() {
        for (key, name) in [
            ("Process", "process"),
            ("PROCESS", "process"),
            ("proce\u{17F}s", "process"),
            ("\u{17F}ysctl", "sysctl"),
            ("hoo\u{212A}s", "hooks"),
            ("\u{212A}ernel", "kernel"),
            ("noNewPrivileges", "NONEWPRIVILEGES"),
        ] {
            assert!(folds_to(key, name), "{key} {name}");
        }
        // Dotless and dotted i are their own fold orbits in Go's tables;
        // nothing else non-ASCII reaches ASCII.
        for (key, name) in [
            ("l\u{131}nux", "linux"),
            ("l\u{130}nux", "linux"),
            ("processs", "process"),
            ("proces", "process"),
            ("pr0cess", "process"),
            ("process\u{0}", "process"),
            ("ﬆart", "start"),
        ] {
            assert!(!folds_to(key, name), "{key} {name}");
        }
    }

    #[test]
    fn no_struct_has_two_fields_go_would_confuse() {
        fn walk(kind: &Kind, depth: usize) {
            if depth > 8 {
                return;
            }
            match kind {
                Struct(fields) => {
                    assert!(fields.len() < 64);
                    for (i, a) in fields.iter().enumerate() {
                        for b in &fields[i + 1..] {
                            assert!(!folds_to(a.0, b.0), "{} {}", a.0, b.0);
                        }
                        walk(&a.1, depth + 1);
                    }
                }
                GoMap(item) | List(item) => walk(item, depth + 1),
                Leaf | Any => {}
            }
        }
        walk(&SPEC_KIND, 0);
    }

    #[test]
    fn case_and_fold_variants_of_known_fields_are_refused_at_every_level() {
        let cases: &[(&str, &str, &str)] = &[
            (
                r#"{"process":{},"Process":{"user":{"uid":0}}}"#,
                "/Process",
                "Process",
            ),
            (r#"{"MOUNTS":[]}"#, "/MOUNTS", "MOUNTS"),
            (r#"{"Linux":{}}"#, "/Linux", "Linux"),
            (r#"{"Root":{"path":"/"}}"#, "/Root", "Root"),
            (r#"{"Hooks":{}}"#, "/Hooks", "Hooks"),
            ("{\"hoo\u{212A}s\":{}}", "/hoo\u{212A}s", "hoo\u{212A}s"),
            (
                r#"{"linux":{"resources":{"pids":{"limit":5},"Pids":{"limit":-1}}}}"#,
                "/linux/resources/Pids",
                "Pids",
            ),
            (
                r#"{"linux":{"resources":{"pids":{"limit":5,"LIMIT":-1}}}}"#,
                "/linux/resources/pids/LIMIT",
                "LIMIT",
            ),
            (
                "{\"linux\":{\"\u{17F}ysctl\":{}}}",
                "/linux/\u{17F}ysctl",
                "\u{17F}ysctl",
            ),
            (
                r#"{"mounts":[{"destination":"/a"},{"destination":"/b","Source":"/"}]}"#,
                "/mounts/1/Source",
                "Source",
            ),
            (
                r#"{"process":{"capabilities":{"Bounding":["CAP_SYS_ADMIN"]}}}"#,
                "/process/capabilities/Bounding",
                "Bounding",
            ),
            (
                r#"{"hooks":{"prestart":[{"path":"/a","Path":"/b"}]}}"#,
                "/hooks/prestart/0/Path",
                "Path",
            ),
            // An escaped key is compared after unescaping, as Go does.
            (r#"{"Pro\u0063ess":{}}"#, "/Process", "Process"),
            (r#"{"process":{"us\u0065R":{}}}"#, "/process/useR", "useR"),
        ];
        for (doc, field, key) in cases {
            let denial = refused(doc.as_bytes());
            assert_eq!(denial.rule, RULE, "{doc}");
            assert_eq!(denial.field, *field, "{doc}");
            assert_eq!(denial.value, *key, "{doc}");
            assert!(denial.reason.contains("case-insensitively"), "{denial}");
        }
    }

    #[test]
    fn duplicate_keys_are_refused_in_structs_and_go_maps() {
        let cases: &[(&str, &str)] = &[
            (r#"{"process":{},"process":{}}"#, "/process"),
            (r#"{"process":{},"pro\u0063ess":{}}"#, "/process"),
            (
                r#"{"process":{"user":{"uid":1,"uid":0}}}"#,
                "/process/user/uid",
            ),
            (r#"{"annotations":{"a":"1","a":"2"}}"#, "/annotations/a"),
            (
                r#"{"linux":{"sysctl":{"kernel.x":"1","kernel.x":"2"}}}"#,
                "/linux/sysctl/kernel.x",
            ),
            (
                r#"{"linux":{"resources":{"unified":{"pids.max":"5","pids.max":"max"}}}}"#,
                "/linux/resources/unified/pids.max",
            ),
            (
                r#"{"linux":{"namespaces":[{"type":"pid"},{"type":"pid","type":"user"}]}}"#,
                "/linux/namespaces/1/type",
            ),
            (
                r#"{"windows":{"credentialSpec":{"a":{"b":1,"b":2}}}}"#,
                "/windows/credentialSpec/a/b",
            ),
            (
                r#"{"annotations":{"a/b~":"1","a/b~":"2"}}"#,
                "/annotations/a~1b~0",
            ),
        ];
        for (doc, field) in cases {
            let denial = refused(doc.as_bytes());
            assert_eq!(denial.rule, RULE, "{doc}");
            assert_eq!(denial.field, *field, "{doc}");
            assert!(denial.reason.contains("duplicate key"), "{denial}");
        }
    }

    #[test]
    fn keys_runc_does_not_know_are_kept() {
        let doc = "{\"l\u{131}nux\":{\"Process\":1},\"processx\":2,\"x\":{\"a\":1,\"a\":2},\
                   \"annotations\":{\"Process\":\"3\",\"process\":\"4\"},\
                   \"linux\":{\"sysctl\":{\"Net.X\":\"1\",\"net.x\":\"2\"}}}";
        let value = spec_from_slice(doc.as_bytes()).unwrap();
        assert_eq!(
            value,
            json!({"l\u{131}nux": {"Process": 1}, "processx": 2, "x": {"a": 2},
                   "annotations": {"Process": "3", "process": "4"},
                   "linux": {"sysctl": {"Net.X": "1", "net.x": "2"}}})
        );
    }

    #[test]
    fn process_and_resources_documents_have_their_own_schema() {
        let d = key_denial(process_from_slice(br#"{"args":["sh"],"User":{"uid":0}}"#));
        assert_eq!((d.field.as_str(), d.value.as_str()), ("/User", "User"));
        let d = key_denial(process_from_slice(br#"{"env":[],"env":["A=1"]}"#));
        assert_eq!(d.field, "/env");
        assert!(process_from_slice(br#"{"process":{"User":1}}"#).is_ok());
        let d = key_denial(resources_from_slice(
            br#"{"pids":{"limit":5},"Pids":{"limit":-1}}"#,
        ));
        assert_eq!(d.field, "/Pids");
        let d = key_denial(resources_from_slice(
            br#"{"unified":{"pids.max":"1","pids.max":"max"}}"#,
        ));
        assert_eq!(d.field, "/unified/pids.max");
        assert!(resources_from_slice(br#"{"linux":1,"Linux":2}"#).is_ok());
    }

    #[test]
    fn what_go_and_serde_parse_differently_is_refused() {
        for (doc, why) in [
            (&b"\xef\xbb\xbf{}"[..], "BOM"),
            (b"{} {}", "trailing value"),
            (b"{}x", "trailing garbage"),
            (b"{\"hostname\":\"\xff\"}", "invalid UTF-8"),
            (b"{\"\xff\":1}", "invalid UTF-8 key"),
            (br#"{"hostname":"\ud800"}"#, "lone surrogate"),
            (br#"{"process":{"args":["a"],}}"#, "trailing comma"),
        ] {
            let result = spec_from_slice(doc);
            assert!(matches!(result, Err(Error::Syntax(_))), "{why}: {result:?}");
        }
        assert_eq!(spec_from_slice(b" {}\n\t").unwrap(), json!({}));
        assert_eq!(spec_from_slice(b"null").unwrap(), Value::Null);
    }

    #[test]
    fn go_view_folds_merges_and_keeps_the_last() {
        let doc = br#"{
            "process": {"user": {"uid": 1000, "gid": 1000}, "args": ["a"], "noNewPrivileges": true},
            "Process": {"USER": {"uid": 0}, "noNewPrivileges": null, "x": 1},
            "mounts": [{"destination": "/a", "source": "/s", "options": ["ro"]}],
            "mount\u017F": [{"destination": "/b"}],
            "annotations": {"a": "1"},
            "Annotations": {"b": "2", "a": "3"},
            "linux": {"resources": {"pids": {"limit": 5}}},
            "l\u0131nux": {"resources": {"pids": {"limit": -1}}},
            "linuX": {"Resources": {"pids": null}}
        }"#;
        let view = go_view(doc, &SPEC_KIND).unwrap();
        assert_eq!(
            view,
            json!({
                "process": {"user": {"uid": 0, "gid": 1000}, "args": ["a"], "noNewPrivileges": true},
                "mounts": [{"destination": "/b", "source": "/s", "options": ["ro"]}],
                "annotations": {"a": "3", "b": "2"},
                "linux": {"resources": {}}
            })
        );
        assert!(go_view(br#"{"process":[]}"#, &SPEC_KIND).is_err());
        assert!(go_view(br#"{"hostname":{}}"#, &SPEC_KIND).is_err());
        assert!(go_view(
            br#"{"windows":{"credentialSpec":{"a":[1,{"b":2}]}}}"#,
            &SPEC_KIND
        )
        .is_ok());
    }
}
