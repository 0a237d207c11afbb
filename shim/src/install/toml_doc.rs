//! Key edits on a TOML document that keep everything else (comments,
//! order, formatting) as the admin wrote it: toml_edit, not a re-serialise.
//! Shared by the containerd and podman edits.

use serde_json::Value as Json;
use toml_edit::{DocumentMut, Item, Table, Value};

use super::{Edit, EditError, KeyChange, Record};

pub fn parse(text: &str) -> Result<DocumentMut, EditError> {
    Ok(text.parse::<DocumentMut>()?)
}

/// A TOML value as JSON, for the record; `None` for kinds install never
/// writes (tables, dates, floats).
pub fn to_json(item: &Item) -> Option<Json> {
    match item.as_value()? {
        Value::String(s) => Some(Json::from(s.value().as_str())),
        Value::Integer(i) => Some(Json::from(*i.value())),
        Value::Boolean(b) => Some(Json::from(*b.value())),
        Value::Array(a) => a
            .iter()
            .map(|v| to_json(&Item::Value(v.clone())))
            .collect::<Option<Vec<_>>>()
            .map(Json::from),
        _ => None,
    }
}

pub fn from_json(json: &Json) -> Option<Value> {
    match json {
        Json::String(s) => Some(Value::from(s.as_str())),
        Json::Number(n) => n.as_i64().map(Value::from),
        Json::Bool(b) => Some(Value::from(*b)),
        Json::Array(items) => {
            let mut array = toml_edit::Array::new();
            for item in items {
                array.push(from_json(item)?);
            }
            Some(Value::Array(array))
        }
        _ => None,
    }
}

fn dotted(path: &[String]) -> String {
    path.iter()
        .map(|k| {
            match k
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            {
                true => k.clone(),
                false => format!("{k:?}"),
            }
        })
        .collect::<Vec<_>>()
        .join(".")
}

/// The table at `path`, created (implicit, so only tables holding keys get
/// a header) when missing; each one created is pushed onto `created`.
fn table_at<'a>(
    doc: &'a mut DocumentMut,
    path: &[String],
    created: &mut Vec<Vec<String>>,
) -> Result<&'a mut Table, EditError> {
    let mut table = doc.as_table_mut();
    for (i, key) in path.iter().enumerate() {
        if !table.contains_key(key) {
            let mut new = Table::new();
            new.set_implicit(true);
            table.insert(key, Item::Table(new));
            created.push(path[..=i].to_vec());
        }
        table = match table.get_mut(key) {
            Some(Item::Table(t)) => t,
            _ => {
                return Err(EditError::Shape(format!(
                    "{} is not a table (an inline table or a value): edit it by hand",
                    dotted(&path[..=i])
                )))
            }
        };
    }
    Ok(table)
}

fn table_get<'a>(doc: &'a mut DocumentMut, path: &[String]) -> Option<&'a mut Table> {
    let mut table = doc.as_table_mut();
    for key in path {
        table = table.get_mut(key)?.as_table_mut()?;
    }
    Some(table)
}

/// Sets each `(path, value)`; already equal values are left alone.
pub fn set_all(mut doc: DocumentMut, sets: &[(Vec<String>, Json)]) -> Result<Edit, EditError> {
    let mut changes = Vec::new();
    let mut created_tables = Vec::new();
    for (path, want) in sets {
        let (key, parent) = path.split_last().ok_or("empty key path")?;
        let table = table_at(&mut doc, parent, &mut created_tables)?;
        let before = match table.get(key) {
            None => None,
            Some(item) => Some(to_json(item).ok_or_else(|| {
                format!(
                    "{} holds a value of another kind: edit it by hand",
                    dotted(path)
                )
            })?),
        };
        if before.as_ref() == Some(want) {
            continue;
        }
        let value = from_json(want).ok_or("internal: value has no TOML form")?;
        table.insert(key, toml_edit::value(value));
        changes.push(KeyChange {
            path: path.clone(),
            before,
            after: want.clone(),
        });
    }
    let text = (!changes.is_empty()).then(|| doc.to_string());
    Ok(Edit {
        text,
        changes,
        created_tables,
    })
}

/// Undoes a record's changes: a key that still holds what install wrote
/// gets its old value back (or goes); one changed since is the admin's and
/// stays. Tables install created go when empty.
pub fn revert(text: &str, record: &Record) -> Result<String, EditError> {
    let mut doc = parse(text)?;
    for change in record.changes.iter().rev() {
        let Some((key, parent)) = change.path.split_last() else {
            continue;
        };
        let Some(table) = table_get(&mut doc, parent) else {
            continue;
        };
        if table.get(key).and_then(to_json).as_ref() != Some(&change.after) {
            continue;
        }
        match change.before.as_ref().and_then(from_json) {
            Some(old) => {
                table.insert(key, toml_edit::value(old));
            }
            None => {
                table.remove(key);
            }
        }
    }
    let mut tables = record.created_tables.clone();
    tables.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for path in tables {
        let Some((key, parent)) = path.split_last() else {
            continue;
        };
        if let Some(table) = table_get(&mut doc, parent) {
            if table
                .get(key)
                .and_then(Item::as_table)
                .is_some_and(Table::is_empty)
            {
                table.remove(key);
            }
        }
    }
    Ok(doc.to_string())
}
