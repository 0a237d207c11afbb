//! Small helpers for editing a spec as `serde_json::Value`, so unknown fields
//! survive every rewrite.

use std::borrow::Cow;

use serde_json::{Map, Value};

/// `value[key]` as an object, created (or replaced, if not an object) when needed.
pub fn object_at<'a>(value: &'a mut Value, key: &str) -> &'a mut Map<String, Value> {
    let map = as_object(value);
    let slot = map
        .entry(key.to_string())
        .or_insert_with(|| Value::Object(Map::new()));
    as_object(slot)
}

/// An object with these fields, in this order. Sized once, unlike `json!`,
/// which grows the map one key at a time.
pub fn object<const N: usize>(fields: [(&str, Value); N]) -> Value {
    Value::Object(
        fields
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
    )
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

/// Objects up to this size are searched by scanning their keys.
const SCAN_LIMIT: usize = 8;

/// `value[key]` when `value` is an object. Same result as `Value::get`, but a
/// small object (a mount has four keys) is scanned instead of hashing the
/// key: the rules look up mount fields hundreds of times per spec.
pub fn field<'a>(value: &'a Value, key: &str) -> Option<&'a Value> {
    let map = value.as_object()?;
    if map.len() > SCAN_LIMIT {
        return map.get(key);
    }
    map.iter().find_map(|(k, v)| (k == key).then_some(v))
}

/// The mutable form of [`field`].
pub fn field_mut<'a>(value: &'a mut Value, key: &str) -> Option<&'a mut Value> {
    entry_mut(value.as_object_mut()?, key)
}

fn entry_mut<'a>(map: &'a mut Map<String, Value>, key: &str) -> Option<&'a mut Value> {
    if map.len() > SCAN_LIMIT {
        return map.get_mut(key);
    }
    map.iter_mut().find_map(|(k, v)| (k == key).then_some(v))
}

/// Sets `map[key]` (in place if present, so the order is kept) and returns
/// the value it replaced, or `Null`. Unlike `Map::insert`, an existing key
/// is not allocated again.
pub fn set(map: &mut Map<String, Value>, key: &str, value: Value) -> Value {
    if let Some(slot) = entry_mut(map, key) {
        return std::mem::replace(slot, value);
    }
    map.insert(key.to_string(), value);
    Value::Null
}

/// A string field, or `""`.
pub fn str_field<'a>(value: &'a Value, key: &str) -> &'a str {
    field(value, key).and_then(Value::as_str).unwrap_or("")
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

/// The string items of a list, borrowed (non-strings are skipped, as in
/// [`strings`]); lets rules read a list without copying it.
pub fn str_items(value: Option<&Value>) -> impl Iterator<Item = &str> {
    value
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
}

/// Whether `value` is an array holding exactly `items`, in order.
pub fn is_string_array(value: Option<&Value>, items: &[&str]) -> bool {
    match value {
        Some(Value::Array(current)) => {
            current.len() == items.len()
                && current
                    .iter()
                    .zip(items)
                    .all(|(v, item)| v.as_str() == Some(*item))
        }
        _ => false,
    }
}

/// A JSON array of strings.
pub fn string_array(items: &[&str]) -> Value {
    Value::Array(items.iter().map(|item| Value::from(*item)).collect())
}

/// RFC 6901 escaping of one JSON-pointer path segment (a map key in a
/// recorded field).
pub fn pointer_segment(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// Lexically normalises an absolute path: collapses `//`, `.` and `..`
/// (never above `/`). Used where the path is inside the container and so
/// cannot be canonicalised on the host. Borrows when already clean, the
/// common case for engine-written specs.
pub fn clean_path(path: &str) -> Cow<'_, str> {
    if is_clean(path) {
        return Cow::Borrowed(path);
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
    Cow::Owned(format!("/{}", parts.join("/")))
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

/// Whether `clean_path` would return `path` unchanged.
fn is_clean(path: &str) -> bool {
    let Some(rest) = path.strip_prefix('/') else {
        return false;
    };
    // Bytes, not `str::split`: this runs for every mount in several rules.
    rest.is_empty()
        || rest
            .as_bytes()
            .split(|&b| b == b'/')
            .all(|part| !matches!(part, b"" | b"." | b".."))
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
    fn field_scans_small_objects_and_hashes_large_ones_alike() {
        let small = json!({"a": 1, "destination": "/x"});
        let large: Value = (0..20).map(|i| (format!("k{i}"), json!(i))).collect();
        for (value, key) in [(&small, "destination"), (&large, "k17")] {
            assert_eq!(field(value, key), value.get(key));
            assert_eq!(field(value, "missing"), None);
        }
        assert_eq!(field(&json!([1]), "a"), None);
        assert_eq!(str_field(&small, "destination"), "/x");
    }

    #[test]
    fn set_replaces_in_place_or_appends() {
        let mut v = json!({"a": 1, "b": 2});
        let map = v.as_object_mut().unwrap();
        assert_eq!(set(map, "a", json!(3)), json!(1));
        assert_eq!(set(map, "c", json!(4)), Value::Null);
        assert_eq!(v.to_string(), r#"{"a":3,"b":2,"c":4}"#);
    }

    #[test]
    fn string_list_helpers() {
        let list = json!(["a", 1, "b"]);
        assert_eq!(str_items(Some(&list)).collect::<Vec<_>>(), ["a", "b"]);
        assert!(is_string_array(Some(&json!(["a", "b"])), &["a", "b"]));
        assert!(!is_string_array(Some(&list), &["a", "b"]));
        assert!(!is_string_array(None, &[]));
        assert_eq!(string_array(&["a", "b"]), json!(["a", "b"]));
        assert_eq!(
            object([("x", json!(1)), ("y", json!("z"))]).to_string(),
            r#"{"x":1,"y":"z"}"#
        );
    }

    #[test]
    fn object_and_array_helpers_create_and_keep() {
        let mut v = json!({"a": {"keep": 1}, "b": 3});
        object_at(&mut v, "a").insert("new".into(), json!(2));
        array_at(&mut v, "b").push(json!("x"));
        assert_eq!(v, json!({"a": {"keep": 1, "new": 2}, "b": ["x"]}));
    }
}
