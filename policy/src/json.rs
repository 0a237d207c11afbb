//! Small helpers for editing a spec as `serde_json::Value`, so unknown fields
//! survive every rewrite.

use serde_json::{Map, Value};

/// `value[key]` as an object, created (or replaced, if not an object) when needed.
pub fn object_at<'a>(value: &'a mut Value, key: &str) -> &'a mut Map<String, Value> {
    let map = as_object(value);
    let slot = map
        .entry(key.to_string())
        .or_insert_with(|| Value::Object(Map::new()));
    as_object(slot)
}

/// `value[key]` as an array, created (or replaced, if not an array) when needed.
pub fn array_at<'a>(value: &'a mut Value, key: &str) -> &'a mut Vec<Value> {
    let map = as_object(value);
    let slot = map
        .entry(key.to_string())
        .or_insert_with(|| Value::Array(Vec::new()));
    if !slot.is_array() {
        *slot = Value::Array(Vec::new());
    }
    match slot {
        Value::Array(items) => items,
        _ => unreachable!("slot was just made an array"),
    }
}

/// The value itself as an object, replacing a non-object with `{}`.
pub fn as_object(value: &mut Value) -> &mut Map<String, Value> {
    if !value.is_object() {
        *value = Value::Object(Map::new());
    }
    match value {
        Value::Object(map) => map,
        _ => unreachable!("value was just made an object"),
    }
}

/// A string field, or `""`.
pub fn str_field<'a>(value: &'a Value, key: &str) -> &'a str {
    value.get(key).and_then(Value::as_str).unwrap_or("")
}

/// A list of strings (non-strings are skipped).
pub fn strings(value: Option<&Value>) -> Vec<String> {
    value
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Lexically normalises an absolute path: collapses `//`, `.` and `..`
/// (never above `/`). Used where the path is inside the container and so
/// cannot be canonicalised on the host.
pub fn clean_path(path: &str) -> String {
    if is_clean(path) {
        return path.to_string();
    }
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    format!("/{}", parts.join("/"))
}

/// Whether the clean absolute path `path` is `dir` or lies beneath it,
/// compared by whole components (`/tmpx` is not under `/tmp`). Both
/// arguments must already be clean (see [`clean_path`]).
pub fn clean_path_within(path: &str, dir: &str) -> bool {
    if dir == "/" {
        return path.starts_with('/');
    }
    match path.strip_prefix(dir) {
        Some(rest) => rest.is_empty() || rest.starts_with('/'),
        None => false,
    }
}

/// Whether `clean_path` would return `path` unchanged: the common case for
/// engine-written specs, checked without allocating.
fn is_clean(path: &str) -> bool {
    let Some(rest) = path.strip_prefix('/') else {
        return false;
    };
    rest.is_empty()
        || rest
            .split('/')
            .all(|part| !part.is_empty() && part != "." && part != "..")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn clean_path_collapses() {
        assert_eq!(clean_path("//proc/./self/../1/fd/"), "/proc/1/fd");
        assert_eq!(clean_path("/../.."), "/");
        assert_eq!(clean_path("tmp/x"), "/tmp/x");
        assert_eq!(clean_path("/"), "/");
        assert_eq!(clean_path("/etc/hosts"), "/etc/hosts");
        assert_eq!(clean_path("/etc/"), "/etc");
        assert_eq!(clean_path("/a/.b/..c"), "/a/.b/..c");
    }

    #[test]
    fn within_compares_whole_components() {
        assert!(clean_path_within("/tmp/x", "/tmp"));
        assert!(clean_path_within("/tmp", "/tmp"));
        assert!(!clean_path_within("/tmpx", "/tmp"));
        assert!(clean_path_within("/anything", "/"));
        assert!(!clean_path_within("/", "/tmp"));
    }

    #[test]
    fn object_and_array_helpers_create_and_keep() {
        let mut v = json!({"a": {"keep": 1}, "b": 3});
        object_at(&mut v, "a").insert("new".into(), json!(2));
        array_at(&mut v, "b").push(json!("x"));
        assert_eq!(v, json!({"a": {"keep": 1, "new": 2}, "b": ["x"]}));
    }
}
