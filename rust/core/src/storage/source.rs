//! Where a reader's files come from: local files, or a remote location (a bucket, a server)
//! whose objects are read through the node cache (`remote`, `cache`).
//!
//! A collection reads its files through one `Source` and knows nothing of remote stores: it
//! asks its shards' storage for ranges and gets errors back. What a remote read needs besides
//! (the files opened at once, a read that finds damage run again on bytes fetched anew, the
//! shards of a batch fetched in one round, a whole copy for `verify`) is decided here.

use super::remote::{Remote, RemoteOptions, RemoteStats};
use std::sync::Arc;

/// Local files, or a remote location and its client (counters included).
#[derive(Clone, Default)]
pub struct Source {
    remote: Option<Arc<Remote>>,
}

impl Source {
    /// Local files: every byte is where it is read.
    pub fn local() -> Source {
        Source { remote: None }
    }

    /// The remote location of `url` (its scheme and bucket or host), its client made at once so
    /// that bad options fail here.
    pub fn remote(url: &str, options: RemoteOptions) -> crate::Result<Source> {
        Ok(Source {
            remote: Some(Remote::new(url, options)?),
        })
    }

    /// `remote` over `store` instead of the client the URL names: what the core's tests read
    /// through (an in-memory store that counts what it is asked). Not reachable from Python.
    #[doc(hidden)]
    pub fn over(
        url: &str,
        options: RemoteOptions,
        store: Arc<dyn object_store::ObjectStore>,
    ) -> crate::Result<Source> {
        Ok(Source {
            remote: Some(Remote::over(url, options, store)?),
        })
    }

    /// Whether the files are remote.
    pub fn is_remote(&self) -> bool {
        self.remote.is_some()
    }

    /// The remote client's counters (`None` for local files).
    pub fn stats(&self) -> Option<&RemoteStats> {
        self.remote.as_ref().map(|r| &r.stats)
    }

    pub(crate) fn client(&self) -> Option<&Arc<Remote>> {
        self.remote.as_ref()
    }
}
