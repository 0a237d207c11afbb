//! The files of `[[network.credentials]]`, as create and the network hook
//! touch them.
//!
//! At create each secret file is opened without following a symlink and
//! judged on that descriptor (a regular file of root's, readable by nobody
//! else), read once to shape the container's placeholder, and dropped: the
//! secret is never written anywhere. The egress daemon reads the file again
//! at every request, so a rotated secret needs no restart.
//!
//! In the container's state directory (root's only) create writes
//! `credentials.json` (the bindings the network hook hands the daemon) and
//! `ca-bundle.pem` (the host's system roots), which runc binds read-only
//! into the container. The hook appends the daemon's CA to that file in
//! place: runc has bound that inode already, so a renamed file would never
//! be seen.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use vibe_hooks::fsio::{read_private, PrivateFileError};
use vibe_policy::config::Policy;
use vibe_policy::egress::credential::{placeholder, Binding};
use vibe_policy::egress::inject::{secret_from_file, SecretError, MAX_SECRET_FILE};

/// The bindings the hook hands the egress daemon.
pub const BINDINGS_FILE: &str = "credentials.json";
/// The container's trust bundle, bound at `TRUST_BUNDLE_PATH`.
pub const BUNDLE_FILE: &str = "ca-bundle.pem";
/// The host's system roots, the first of these that exists.
const SYSTEM_ROOTS: [&str; 3] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
];
/// Random bytes drawn per credential.
const RANDOM_PER_SECRET: usize = MAX_SECRET_FILE as usize;

#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    #[error("credential {name}: {source}")]
    File {
        name: String,
        #[source]
        source: PrivateFileError,
    },
    #[error("credential {name}: {path}: {source}")]
    Secret {
        name: String,
        path: PathBuf,
        #[source]
        source: SecretError,
    },
    #[error("cannot read random bytes for the placeholders: {0}")]
    Random(#[source] std::io::Error),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The bytes of credential `name`'s secret file, read as the egress daemon
/// reads it ([`read_private`]); the caller zeroes them.
pub fn read_secret_file(name: &str, path: &Path) -> Result<Vec<u8>, CredentialError> {
    read_private(path, MAX_SECRET_FILE).map_err(|source| CredentialError::File {
        name: name.to_string(),
        source,
    })
}

/// The container's bindings, one per credential whose file is there (an
/// `optional` one whose file is missing is left out; any other failure
/// refuses the create). Empty without credentials.
pub fn bindings(policy: &Policy) -> Result<Vec<Binding>, CredentialError> {
    let sections = &policy.network.credentials;
    if sections.is_empty() {
        return Ok(Vec::new());
    }
    // One byte per placeholder character: more than any key is long.
    let mut random = vec![0u8; RANDOM_PER_SECRET * sections.len()];
    File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut random))
        .map_err(CredentialError::Random)?;
    let mut out = Vec::new();
    for (section, random) in sections.iter().zip(random.chunks(RANDOM_PER_SECRET)) {
        let mut bytes = match read_secret_file(&section.name, &section.source) {
            Err(CredentialError::File { source, .. })
                if section.optional && source.is_missing() =>
            {
                continue
            }
            other => other?,
        };
        let secret = secret_from_file(&bytes).map_err(|source| CredentialError::Secret {
            name: section.name.clone(),
            path: section.source.clone(),
            source,
        });
        // The secret's bytes go before anything else can fail or wait.
        bytes.fill(0);
        let secret = secret?;
        out.push(Binding::new(section, placeholder(&secret, random)));
    }
    Ok(out)
}

/// Writes `credentials.json` and `ca-bundle.pem` into the container's
/// state directory `dir` (nothing without bindings).
pub fn write_state(dir: &Path, bindings: &[Binding]) -> Result<(), CredentialError> {
    if bindings.is_empty() {
        return Ok(());
    }
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| CredentialError::Io { path, source }
    };
    let path = dir.join(BINDINGS_FILE);
    let json = serde_json::to_vec(bindings).map_err(|e| io(&path)(std::io::Error::other(e)))?;
    vibe_hooks::fsio::write_new(&path, &json, 0o600, super::state_dir::STATE).map_err(io(&path))?;
    // No system roots is no error: only the credential hosts then verify.
    let roots = SYSTEM_ROOTS
        .iter()
        .find_map(|p| std::fs::read(p).ok())
        .unwrap_or_default();
    let path = dir.join(BUNDLE_FILE);
    vibe_hooks::fsio::write_new(&path, &roots, 0o644, super::state_dir::STATE).map_err(io(&path))
}

/// The bindings create wrote for the container whose state directory is
/// `dir`; none when it wrote none.
pub fn read_bindings(dir: &Path) -> Result<Vec<Binding>, CredentialError> {
    let path = dir.join(BINDINGS_FILE);
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(CredentialError::Io { path, source }),
    };
    serde_json::from_slice(&bytes).map_err(|e| CredentialError::Io {
        path,
        source: std::io::Error::other(e),
    })
}

/// Appends the daemon's CA to the container's bundle, on the same inode.
pub fn append_ca(dir: &Path, ca_pem: &str) -> Result<(), CredentialError> {
    let path = dir.join(BUNDLE_FILE);
    let io = |source| CredentialError::Io {
        path: path.clone(),
        source,
    };
    let mut file = OpenOptions::new()
        .append(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
        .open(&path)
        .map_err(io)?;
    let mut text = String::with_capacity(ca_pem.len() + 1);
    text.push('\n');
    text.push_str(ca_pem);
    if !text.ends_with('\n') {
        text.push('\n');
    }
    // Not synced: the bundle lives in the container's state directory.
    file.write_all(text.as_bytes()).map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn policy_with(source: &Path, optional: bool) -> Policy {
        let text = format!(
            "[network]\nmode = \"proxy\"\nhosts = [\"api.example.com\"]\n\
             [[network.credentials]]\nname = \"api\"\nhosts = [\"api.example.com\"]\n\
             env = \"API_KEY\"\nheader = \"x-api-key\"\nsource = \"{}\"\noptional = {optional}\n",
            source.display()
        );
        Policy::from_toml_str(&text, Path::new("/etc/vibe-shim/config.toml")).unwrap()
    }

    fn secret_file(dir: &Path, mode: u32) -> PathBuf {
        let path = dir.join("secret");
        std::fs::write(&path, "sk-proj-0123456789abcdefghij\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        path
    }

    #[test]
    fn a_private_file_gives_a_placeholder_of_its_shape() {
        if !nix::unistd::geteuid().is_root() {
            panic!("this test needs root (the secret file must be root's)");
        }
        let dir = tempfile::tempdir().unwrap();
        let path = secret_file(dir.path(), 0o600);
        let found = bindings(&policy_with(&path, false)).unwrap();
        assert_eq!(found.len(), 1);
        let p = &found[0].placeholder;
        assert!(p.starts_with("sk-proj-") && p.len() == "sk-proj-0123456789abcdefghij".len());
        assert!(!p.contains("0123456789abcdefghij"));
        assert_eq!(found[0].hosts, ["api.example.com"]);
        // Two creates, two placeholders.
        let again = bindings(&policy_with(&path, false)).unwrap();
        assert_ne!(again[0].placeholder, *p);
    }

    #[test]
    fn an_open_mode_a_symlink_or_a_missing_file_is_refused() {
        if !nix::unistd::geteuid().is_root() {
            panic!("this test needs root (the secret file must be root's)");
        }
        let dir = tempfile::tempdir().unwrap();
        for mode in [0o640, 0o604, 0o644, 0o660] {
            let path = secret_file(dir.path(), mode);
            let err = bindings(&policy_with(&path, false)).unwrap_err();
            let not_private = matches!(
                err,
                CredentialError::File {
                    source: PrivateFileError::NotPrivate { .. },
                    ..
                }
            );
            assert!(not_private, "{mode:o}: {err}");
            assert!(!err.to_string().contains("abcdef"), "{err}");
        }
        let target = secret_file(dir.path(), 0o600);
        // A root's symlink is the admin's and is followed; anyone else's
        // is refused.
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert_eq!(bindings(&policy_with(&link, false)).unwrap().len(), 1);
        std::os::unix::fs::lchown(&link, Some(65534), Some(65534)).unwrap();
        let err = bindings(&policy_with(&link, false)).unwrap_err();
        assert!(matches!(err, CredentialError::File { .. }), "{err}");
        let missing = dir.path().join("missing");
        assert!(bindings(&policy_with(&missing, false)).is_err());
        // Optional: a missing file is skipped, nothing else is.
        assert!(bindings(&policy_with(&missing, true)).unwrap().is_empty());
        let link_err = bindings(&policy_with(&link, true)).unwrap_err();
        assert!(matches!(link_err, CredentialError::File { .. }));
    }

    #[test]
    fn the_bundle_grows_in_place() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let b = Binding::new(
            &policy_with(Path::new("/x"), true).network.credentials[0],
            "sk-test-AAAAAAAAAAAAAAAAAAAA".into(),
        );
        write_state(dir.path(), std::slice::from_ref(&b)).unwrap();
        let before = std::fs::metadata(dir.path().join(BUNDLE_FILE))
            .unwrap()
            .ino();
        append_ca(
            dir.path(),
            "-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----",
        )
        .unwrap();
        let meta = std::fs::metadata(dir.path().join(BUNDLE_FILE)).unwrap();
        assert_eq!(meta.ino(), before);
        let text = std::fs::read_to_string(dir.path().join(BUNDLE_FILE)).unwrap();
        assert!(text.ends_with("-----END CERTIFICATE-----\n"));
        assert_eq!(read_bindings(dir.path()).unwrap(), vec![b]);
        assert!(read_bindings(&dir.path().join("none")).unwrap().is_empty());
        write_state(dir.path(), &[]).unwrap();
    }
}
