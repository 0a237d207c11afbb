//! The certificate authority the egress daemon terminates one container's
//! credential hosts with.
//!
//! One CA per registered container, made at registration: a container
//! trusts only its own, so a CA key that leaked out of one container's
//! registration (it never should: the key stays in the daemon's memory and
//! its root-only records) vouches for nothing another container sees. Its
//! X.509 name constraints permit exactly that container's credential hosts
//! (and, as RFC 5280 reads a DNS subtree, their subdomains), so no verifier
//! that honours them accepts it for any other name; `pathlen 0` forbids
//! intermediates under it.
//!
//! Leaves are minted per host on first use, cached, and minted again well
//! before their short validity ends.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose,
    GeneralSubtree, IsCa, KeyPair, KeyUsagePurpose, NameConstraints,
};
use rustls::ServerConfig;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use serde::{Deserialize, Serialize};

/// How long a CA is valid: longer than any container lives, since the
/// container's bundle holds the certificate made at its start and is never
/// re-issued. Its key stays in the daemon and its names are constrained, so
/// a long life costs little; the leaves it signs live a week.
pub const CA_VALIDITY: Duration = Duration::from_secs(10 * 365 * 24 * 3600);
/// How long a leaf is valid, and how old a cached one may get.
pub const LEAF_VALIDITY: Duration = Duration::from_secs(7 * 24 * 3600);
const LEAF_REUSE: Duration = Duration::from_secs(6 * 24 * 3600);
/// Clocks disagree: certificates start this much in the past.
const BACKDATE: Duration = Duration::from_secs(3600);

const CA_NAME: &str = "vibe-shim egress credential CA";

/// The only protocol a terminated connection offers.
pub const ALPN_HTTP11: &[u8] = b"http/1.1";

#[derive(Debug, thiserror::Error)]
pub enum CaError {
    #[error("no credential host to constrain the CA to")]
    NoHosts,
    #[error("credential host {0:?} is not a DNS name")]
    BadHost(String),
    #[error("cannot make a certificate: {0}")]
    Rcgen(#[from] rcgen::Error),
    #[error("cannot set up TLS: {0}")]
    Tls(#[from] rustls::Error),
    #[error("{0} is not a credential host of this container")]
    NotBound(String),
}

/// What the daemon's record keeps of a CA (root-only file, 0600): enough to
/// sign leaves again after a restart that the container's bundle accepts.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoredCa {
    pub cert_pem: String,
    pub key_pem: String,
    pub hosts: Vec<String>,
}

impl std::fmt::Debug for StoredCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredCa")
            .field("hosts", &self.hosts)
            .field("key_pem", &"<redacted>")
            .finish_non_exhaustive()
    }
}

/// One container's CA, with its cache of leaves.
pub struct Ca {
    hosts: Vec<String>,
    key: KeyPair,
    /// The CA as rcgen signs with it (its name and key identifier are
    /// those of `pem`'s certificate).
    issuer: rcgen::Certificate,
    pem: String,
    leaves: Mutex<HashMap<String, (Instant, Arc<ServerConfig>)>>,
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ca")
            .field("hosts", &self.hosts)
            .finish_non_exhaustive()
    }
}

fn offset(from_now: Duration, past: bool) -> time::OffsetDateTime {
    let now = time::OffsetDateTime::now_utc();
    let d = time::Duration::try_from(from_now).unwrap_or(time::Duration::ZERO);
    if past {
        now - d
    } else {
        now + d
    }
}

/// The CA's parameters: name, constraints, usages (the same when the CA is
/// made and when it is restored, so leaves name the same issuer).
fn ca_params(hosts: &[String]) -> Result<CertificateParams, CaError> {
    let mut p = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, CA_NAME);
    dn.push(DnType::OrganizationName, "vibe-shim");
    p.distinguished_name = dn;
    p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign];
    p.name_constraints = Some(NameConstraints {
        permitted_subtrees: hosts
            .iter()
            .map(|h| GeneralSubtree::DnsName(h.clone()))
            .collect(),
        excluded_subtrees: Vec::new(),
    });
    p.not_before = offset(BACKDATE, true);
    p.not_after = offset(CA_VALIDITY, false);
    Ok(p)
}

/// The hosts sorted, deduplicated, each a DNS name.
fn checked_hosts(hosts: &[String]) -> Result<Vec<String>, CaError> {
    let mut out: Vec<String> = hosts.iter().map(|h| h.to_ascii_lowercase()).collect();
    out.sort();
    out.dedup();
    if out.is_empty() {
        return Err(CaError::NoHosts);
    }
    for h in &out {
        if rustls_pki_types::DnsName::try_from(h.as_str()).is_err()
            || h.parse::<std::net::IpAddr>().is_ok()
        {
            return Err(CaError::BadHost(h.clone()));
        }
    }
    Ok(out)
}

impl Ca {
    /// A new CA (ECDSA P-256) for these hosts.
    pub fn generate(hosts: &[String]) -> Result<Ca, CaError> {
        let hosts = checked_hosts(hosts)?;
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
        let cert = ca_params(&hosts)?.self_signed(&key)?;
        let pem = cert.pem();
        Ok(Ca {
            hosts,
            key,
            issuer: cert,
            pem,
            leaves: Mutex::new(HashMap::new()),
        })
    }

    /// The CA a record kept.
    pub fn restore(stored: &StoredCa) -> Result<Ca, CaError> {
        let hosts = checked_hosts(&stored.hosts)?;
        let key = KeyPair::from_pem(&stored.key_pem)?;
        let issuer = ca_params(&hosts)?.self_signed(&key)?;
        Ok(Ca {
            hosts,
            key,
            issuer,
            pem: stored.cert_pem.clone(),
            leaves: Mutex::new(HashMap::new()),
        })
    }

    pub fn stored(&self) -> StoredCa {
        StoredCa {
            cert_pem: self.pem.clone(),
            key_pem: self.key.serialize_pem(),
            hosts: self.hosts.clone(),
        }
    }

    /// The CA certificate, PEM (for the container's trust bundle).
    pub fn cert_pem(&self) -> &str {
        &self.pem
    }

    pub fn hosts(&self) -> &[String] {
        &self.hosts
    }

    /// The server side of a terminated connection to `host`: its leaf
    /// (minted now if none is cached or the cached one is old), HTTP/1.1
    /// only.
    pub fn server_config(&self, host: &str) -> Result<Arc<ServerConfig>, CaError> {
        if !self.hosts.iter().any(|h| h == host) {
            return Err(CaError::NotBound(host.to_string()));
        }
        let mut leaves = self.leaves.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((minted, config)) = leaves.get(host) {
            if minted.elapsed() < LEAF_REUSE {
                return Ok(config.clone());
            }
        }
        let config = Arc::new(self.mint(host)?);
        leaves.insert(host.to_string(), (Instant::now(), config.clone()));
        Ok(config)
    }

    fn mint(&self, host: &str) -> Result<ServerConfig, CaError> {
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
        let mut p = CertificateParams::new(vec![host.to_string()])?;
        p.distinguished_name = DistinguishedName::new();
        p.distinguished_name.push(DnType::CommonName, host);
        p.is_ca = IsCa::ExplicitNoCa;
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        p.use_authority_key_identifier_extension = true;
        p.not_before = offset(BACKDATE, true);
        p.not_after = offset(LEAF_VALIDITY, false);
        let leaf = p.signed_by(&key, &self.issuer, &self.key)?;
        let chain = vec![CertificateDer::from(leaf.der().to_vec())];
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let mut config = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(chain, key)?;
        // A client that offers ALPN without http/1.1 (h2 only) fails the
        // handshake (no_application_protocol): nothing but HTTP/1.1 is judged.
        config.alpn_protocols = vec![ALPN_HTTP11.to_vec()];
        // Our order ([`provider`]) over the client's: AES-128-GCM where the
        // client offers it (it runs on this host, with the same AES-NI).
        config.ignore_client_order = true;
        Ok(config)
    }
}

/// The one crypto provider (ring) both sides of a terminated connection
/// use: rustls's default suites, AES-128-GCM moved first in each protocol
/// version. Every byte is decrypted and encrypted again here, and
/// AES-128 does 10 rounds per block where AES-256 does 14 (about 12 %
/// less time per record with ring's VAES code); the key exchange rustls
/// prefers (X25519) has 128-bit security, so AES-256 adds the session no
/// strength. No suite is added or dropped.
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    use rustls::CipherSuite as S;
    let mut p = rustls::crypto::ring::default_provider();
    // Stable: TLS 1.3 before 1.2 stays, and so does the rest's order.
    p.cipher_suites.sort_by_key(|s| {
        let aes128 = matches!(
            s.suite(),
            S::TLS13_AES_128_GCM_SHA256
                | S::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
                | S::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256
        );
        (s.tls13().is_none(), !aes128)
    });
    Arc::new(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_checked_and_a_stored_ca_signs_again() {
        assert!(matches!(Ca::generate(&[]), Err(CaError::NoHosts)));
        assert!(matches!(
            Ca::generate(&["10.0.0.1".into()]),
            Err(CaError::BadHost(_))
        ));
        let ca =
            Ca::generate(&["b.example".into(), "A.example".into(), "b.example".into()]).unwrap();
        assert_eq!(ca.hosts(), ["a.example", "b.example"]);
        assert!(ca.cert_pem().starts_with("-----BEGIN CERTIFICATE-----"));
        let stored = ca.stored();
        assert!(!format!("{stored:?}").contains("PRIVATE"));
        let again = Ca::restore(&stored).unwrap();
        assert_eq!(again.cert_pem(), ca.cert_pem());
        assert!(again.server_config("a.example").is_ok());
        assert!(matches!(
            again.server_config("c.example"),
            Err(CaError::NotBound(_))
        ));
        let one = ca.server_config("b.example").unwrap();
        assert!(Arc::ptr_eq(&one, &ca.server_config("b.example").unwrap()));
    }

    /// Both sides of a terminated connection settle on AES-128-GCM: the
    /// container's side even when its client (here rustls's defaults, as
    /// OpenSSL's) puts AES-256-GCM first, the upstream's side where the
    /// server follows the client's order; and only rustls's own suites.
    #[test]
    fn terminated_tls_prefers_aes_128_gcm_from_the_default_suites() {
        use rustls::pki_types::{pem::PemObject, ServerName};
        use rustls::{ClientConfig, ClientConnection, RootCertStore, ServerConnection};
        let mut defaults = rustls::crypto::ring::default_provider().cipher_suites;
        let mut ours = provider().cipher_suites.clone();
        assert_eq!(
            ours[0].suite(),
            rustls::CipherSuite::TLS13_AES_128_GCM_SHA256
        );
        for v in [&mut defaults, &mut ours] {
            v.sort_by_key(|s| u16::from(s.suite()));
        }
        assert_eq!(ours, defaults);

        let ca = Ca::generate(&["a.example".into()]).unwrap();
        let mut roots = RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(ca.cert_pem().as_bytes()).unwrap())
            .unwrap();
        let client = |provider: Arc<rustls::crypto::CryptoProvider>| {
            let config = ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_root_certificates(roots.clone())
                .with_no_client_auth();
            let name = ServerName::try_from("a.example").unwrap();
            ClientConnection::new(Arc::new(config), name).unwrap()
        };
        let third_party = Arc::new(rustls::crypto::ring::default_provider());
        let ours = ca.server_config("a.example").unwrap();
        // An upstream at rustls's defaults: its own order, the client's first.
        let upstream = Arc::new(
            rustls::ServerConfig::builder_with_provider(third_party.clone())
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_no_client_auth()
                .with_cert_resolver(ours.cert_resolver.clone()),
        );
        for (mut c, server) in [(client(third_party), ours), (client(provider()), upstream)] {
            let mut s = ServerConnection::new(server).unwrap();
            while c.is_handshaking() || s.is_handshaking() {
                let mut wire = Vec::new();
                while c.wants_write() {
                    c.write_tls(&mut wire).unwrap();
                }
                s.read_tls(&mut wire.as_slice()).unwrap();
                s.process_new_packets().unwrap();
                let mut wire = Vec::new();
                while s.wants_write() {
                    s.write_tls(&mut wire).unwrap();
                }
                c.read_tls(&mut wire.as_slice()).unwrap();
                c.process_new_packets().unwrap();
            }
            let suite = c.negotiated_cipher_suite().unwrap().suite();
            assert_eq!(suite, rustls::CipherSuite::TLS13_AES_128_GCM_SHA256);
        }
    }
}
