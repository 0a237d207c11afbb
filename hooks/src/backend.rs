//! How a table reaches nf_tables: netlink in process (the default,
//! `nftables.rs`), or the `nft` binary an admin named in `[network] nft`
//! (`nft.rs`). Chosen once per hook run, from the policy, and used for every
//! table that run installs. Reading a table back and deleting one always go
//! over netlink: both forms list alike, and the binary is only for writing.

use std::path::PathBuf;

use vibe_policy::config::NetworkSection;
use vibe_policy::network::ruleset::{self, Rule, Table};

use crate::nfnetlink::NetlinkError;
use crate::nft::{self, NftError};
use crate::nftables;

/// Why a table could not be installed, as the backend said it.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error(transparent)]
    Nft(#[from] NftError),
    #[error(transparent)]
    Netlink(#[from] NetlinkError),
}

/// The writer of tables, in the calling thread's network namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backend {
    /// nf_tables over netlink, in process.
    Netlink,
    /// `nft -f -` with the table's text (a child inherits the thread's
    /// namespace).
    Binary(PathBuf),
}

impl Backend {
    /// The policy's choice: `[network] nft` must be an executable file (no
    /// search, no fallback); without it, netlink.
    pub fn for_policy(net: &NetworkSection) -> Result<Backend, NftError> {
        Ok(match net.nft.as_deref() {
            Some(configured) => Backend::Binary(nft::check_executable(configured)?),
            None => Backend::Netlink,
        })
    }

    /// Installs `table` in one transaction, replacing any rules it had.
    pub fn apply(&self, table: &Table) -> Result<(), BackendError> {
        match self {
            Backend::Netlink => nftables::apply(table)?,
            Backend::Binary(nft) => nft::apply(nft, &ruleset::ruleset(table))?,
        }
        Ok(())
    }

    /// Adds `rule` to chain `chain` of table `inet TABLE` in front of the
    /// rule with handle `before`, in a transaction that deletes nothing.
    pub fn insert_before(
        &self,
        table: &str,
        chain: &str,
        before: u64,
        rule: &Rule,
    ) -> Result<(), BackendError> {
        match self {
            Backend::Netlink => nftables::insert_before(table, chain, before, rule)?,
            Backend::Binary(nft) => nft::apply(
                nft,
                &format!("insert rule inet {table} {chain} position {before} {rule}\n"),
            )?,
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chosen_from_the_policy() {
        let mut net = NetworkSection::default();
        assert_eq!(Backend::for_policy(&net).unwrap(), Backend::Netlink);
        net.nft = Some("/bin/sh".into());
        assert_eq!(
            Backend::for_policy(&net).unwrap(),
            Backend::Binary("/bin/sh".into())
        );
        net.nft = Some("/nonexistent/nft".into());
        assert!(matches!(
            Backend::for_policy(&net),
            Err(NftError::NotExecutable(_))
        ));
    }
}
