//! The OCI state runc writes to a hook's stdin. (The container's resolv.conf
//! is never read: a client writes it, and DNS goes only where the policy's
//! `resolvers` say.)

use std::path::PathBuf;

use serde::Deserialize;

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("cannot parse the OCI state on stdin: {0}")]
    Json(#[from] serde_json::Error),
    #[error("the OCI state has no usable pid ({0})")]
    Pid(i64),
}

/// The fields of the OCI state the hook needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerState {
    pub id: String,
    pub pid: i32,
    pub bundle: PathBuf,
}

#[derive(Deserialize)]
struct RawState {
    #[serde(default)]
    id: String,
    #[serde(default)]
    pid: i64,
    #[serde(default)]
    bundle: PathBuf,
}

impl ContainerState {
    pub fn parse(json: &[u8]) -> Result<Self, StateError> {
        let raw: RawState = serde_json::from_slice(json)?;
        let pid = i32::try_from(raw.pid)
            .ok()
            .filter(|p| *p > 0)
            .ok_or(StateError::Pid(raw.pid))?;
        Ok(ContainerState {
            id: raw.id,
            pid,
            bundle: raw.bundle,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_runc_state() {
        let s = ContainerState::parse(
            br#"{"ociVersion":"1.0.2","id":"abc","status":"creating","pid":4242,"bundle":"/run/b","annotations":{}}"#,
        )
        .unwrap();
        assert_eq!(
            s,
            ContainerState {
                id: "abc".into(),
                pid: 4242,
                bundle: "/run/b".into()
            }
        );
    }

    #[test]
    fn rejects_bad_state() {
        assert!(ContainerState::parse(b"not json").is_err());
        assert!(ContainerState::parse(br#"{"id":"x","bundle":"/b"}"#).is_err());
        assert!(ContainerState::parse(br#"{"id":"x","pid":0}"#).is_err());
        assert!(ContainerState::parse(br#"{"id":"x","pid":-5}"#).is_err());
        assert!(ContainerState::parse(br#"{"id":"x","pid":99999999999}"#).is_err());
        let msg = ContainerState::parse(b"[").unwrap_err().to_string();
        assert!(msg.starts_with("cannot parse the OCI state"), "{msg}");
    }
}
