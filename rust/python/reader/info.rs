//! What a store is, for `docstore info` and friends: its counts and sizes (`_info`), a remote
//! store's counters (`_remote_stats`), its compression dictionary, and `verify`.

use super::Reader;
use crate::errors::{guard, IntoPy};
use docstore_core::{Store, StoreFile};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};
use std::sync::atomic::Ordering;

impl Reader {
    /// Counts and sizes: `count`, `raw_bytes`, `stored_bytes`, `level`, `dictionary_bytes`,
    /// `format_version`, `checked_reads`, and for a collection its `shards` (each with the same
    /// keys, and `path`).
    pub(super) fn info<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let store = self.store(py)?;
        let describe = |shard: &Store<StoreFile>| -> PyResult<_> {
            let header = shard.header();
            let info = PyDict::new(py);
            info.set_item("count", header.count)?;
            info.set_item("raw_bytes", header.raw_bytes)?;
            info.set_item("stored_bytes", shard.file_len())?;
            // As the writer's `level=` takes it: the header's 0xFF (none) is -1.
            info.set_item("level", header.level as i8)?;
            info.set_item("dictionary_bytes", shard.dictionary().len())?;
            info.set_item("format_version", header.version)?;
            info.set_item("checked_reads", shard.checked())?;
            Ok(info)
        };
        let shards = store.shards();
        if !store.is_collection() {
            return describe(&shards[0]);
        }
        let info = PyDict::new(py);
        let list = PyList::empty(py);
        let (mut raw, mut dictionary) = (0u64, 0usize);
        for (shard, path) in shards.iter().zip(store.shard_paths()) {
            let item = describe(shard)?;
            match &self.url {
                Some(_) => item.set_item("path", path.to_string_lossy())?,
                None => item.set_item("path", path)?,
            }
            list.append(item)?;
            raw += shard.header().raw_bytes;
            dictionary += shard.dictionary().len();
        }
        let levels: std::collections::BTreeSet<i8> =
            shards.iter().map(|s| s.header().level as i8).collect();
        info.set_item("count", store.len())?;
        info.set_item("raw_bytes", raw)?;
        info.set_item("stored_bytes", store.file_len())?;
        // One level when the shards agree, else None.
        let level = (levels.len() == 1)
            .then(|| levels.first().copied())
            .flatten();
        info.set_item("level", level)?;
        info.set_item("dictionary_bytes", dictionary)?;
        // The oldest file's: what `docstore upgrade` would change.
        let versions = shards
            .iter()
            .chain(store.index())
            .map(|s| s.header().version);
        info.set_item("format_version", versions.min())?;
        info.set_item("checked_reads", store.checked())?;
        info.set_item("shards", list)?;
        Ok(info)
    }

    /// A remote store's counters since it was opened, and what the node cache holds of it;
    /// `None` for a local one.
    pub(super) fn remote_stats<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<Option<Bound<'py, PyDict>>> {
        let store = self.store(py)?;
        let (Some(stats), Some((held, usage))) = (store.source().stats(), store.cache_usage())
        else {
            return Ok(None);
        };
        let dict = PyDict::new(py);
        dict.set_item("requests", stats.requests.load(Ordering::Relaxed))?;
        dict.set_item("bytes", stats.bytes.load(Ordering::Relaxed))?;
        dict.set_item("data_bytes", stats.data_bytes.load(Ordering::Relaxed))?;
        dict.set_item("round_trips", stats.rounds.load(Ordering::Relaxed))?;
        dict.set_item("retries", stats.retries.load(Ordering::Relaxed))?;
        dict.set_item("heals", stats.heals.load(Ordering::Relaxed))?;
        dict.set_item(
            "peak_in_flight",
            stats.peak_in_flight.load(Ordering::Relaxed),
        )?;
        dict.set_item("limit", stats.limit.load(Ordering::Relaxed))?;
        dict.set_item("backoffs", stats.backoffs.load(Ordering::Relaxed))?;
        dict.set_item("cache_bytes_held", held)?;
        dict.set_item("cache_dir_bytes", usage)?;
        Ok(Some(dict))
    }

    /// The compression dictionary (of the first shard, in a collection).
    pub(super) fn dictionary<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let store = self.store(py)?;
        Ok(PyBytes::new(py, store.shards()[0].dictionary()))
    }

    /// Reads and checks every byte, reporting to `progress(done, total)` when given.
    pub(super) fn verify_impl(
        &self,
        py: Python<'_>,
        progress: Option<Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let store = self.store(py)?;
        let Some(progress) = progress else {
            return guard(py, || py.detach(|| store.verify()).py_err(py));
        };
        let total = store.verify_steps();
        let done = std::sync::atomic::AtomicU64::new(0);
        guard(py, || {
            let counts = || (done.load(Ordering::Relaxed), total);
            crate::progress::reporting(py, &progress, counts, || store.verify_counting(&done))
        })
    }
}
