//! Verifying a collection: every byte of every file, then the global id index against the
//! shards. A remote collection is verified from a whole local copy of each file, checked to be
//! the file opened.

use super::{Collection, Ids};
use crate::error::{Error, Result};
use crate::storage::source::Source;
use crate::storage::StoreFile;
use crate::store::Store;
use rayon::prelude::*;
use std::path::Path;

impl Collection {
    /// The collection over a whole local copy of each file, each checked to be the file
    /// opened (its fingerprint); `None` when the files are local already.
    fn local_copy(&self) -> Result<Option<Collection>> {
        let copy = |store: &Store<StoreFile>| -> Result<Option<Store<StoreFile>>> {
            let Some(file) = self.source.local_copy(store.storage())? else {
                return Ok(None);
            };
            let copy = Store::from_bytes(file)?;
            if copy.fingerprint() != store.fingerprint() {
                return Err(Error::corrupt(format!(
                    "{} changed since it was opened",
                    self.name_of(store).display()
                )));
            }
            Ok(Some(copy))
        };
        let Some(shards) = self
            .shards
            .iter()
            .map(copy)
            .collect::<Result<Option<_>>>()?
        else {
            return Ok(None);
        };
        let ids = match &self.ids {
            Ids::Global(index, path) => Ids::Global(
                copy(index)?.expect("the index is where the shards are"),
                path.clone(),
            ),
            Ids::Own => Ids::Own,
        };
        Ok(Some(Collection {
            shards,
            paths: self.paths.clone(),
            starts: self.starts.clone(),
            ids,
            locates_blobs: self.locates_blobs,
            fingerprint: self.fingerprint,
            source: Source::local(),
        }))
    }

    /// The path or URL `store` (one of the files) was opened from.
    fn name_of(&self, store: &Store<StoreFile>) -> &Path {
        let at = (self.shards.iter()).position(|s| std::ptr::eq(s, store));
        match (at, &self.ids) {
            (Some(at), _) => &self.paths[at],
            (None, Ids::Global(_, path)) => path,
            (None, Ids::Own) => &self.paths[0],
        }
    }

    /// Reads every byte of every file (see `Store::verify`), and checks that the global index
    /// holds exactly the shards' ids at their global positions. A remote collection is read
    /// from a whole copy of each file.
    pub fn verify(&self) -> Result<()> {
        self.verify_counting(&std::sync::atomic::AtomicU64::new(0))
    }

    /// The steps `verify_counting` counts (`Store::verify_steps` of every file).
    pub fn verify_steps(&self) -> u64 {
        self.files().map(Store::verify_steps).sum()
    }

    /// `verify`, adding to `done` as it goes (about `verify_steps()` in all), for a progress bar.
    pub fn verify_counting(&self, done: &std::sync::atomic::AtomicU64) -> Result<()> {
        if let Some(copy) = self.local_copy()? {
            return copy.verify_counting(done);
        }
        // Every file is read, and every damaged one named (when there are several), not only
        // the first.
        let mut damaged = Vec::new();
        for store in self.files() {
            match store.verify_counting(done) {
                Ok(()) => {}
                Err(Error::Corrupt(msg)) if !self.is_collection() => {
                    return Err(Error::Corrupt(msg))
                }
                Err(Error::Corrupt(msg)) => {
                    damaged.push(format!("{}: {msg}", self.name_of(store).display()))
                }
                Err(other) => return Err(other),
            }
        }
        match damaged.len() {
            0 => {}
            1 => return Err(Error::corrupt(damaged.remove(0))),
            n => {
                return Err(Error::corrupt(format!(
                    "{n} damaged files: {}",
                    damaged.join("; ")
                )))
            }
        }
        match &self.ids {
            Ids::Global(index, _) => self.verify_index(index),
            // The only shard's key index was checked against its keys with the shard.
            Ids::Own => Ok(()),
        }
    }

    /// That the global id `index` holds exactly the shards' ids at their global positions, and
    /// (format v3) locates each document's blob where its shard holds it.
    fn verify_index(&self, index: &Store<StoreFile>) -> Result<()> {
        if index.len() != self.len() {
            return Err(Error::corrupt(
                "the global id index and the shards count different documents",
            ));
        }
        crate::runtime::parallel::pool().install(|| {
            (0..self.len()).into_par_iter().try_for_each(|pos| {
                if index.key_at(pos)? != self.key_at(pos)? {
                    return Err(Error::corrupt(format!(
                        "the global id index and the shards disagree at position {pos}"
                    )));
                }
                Ok(())
            })?;
            if !index.header().locates_shard_blobs() {
                return Ok(());
            }
            // Every entry locates its document's blob in its shard.
            (0..index.len()).into_par_iter().try_for_each(|rank| {
                let found = index.found_at(rank)?;
                let (shard, local) = self.shard_of(found.pos)?;
                let blob = self.shards[shard].blob_range_at(local)?;
                if found.blob != Some((blob.start as u64, blob.len() as u64)) {
                    return Err(Error::corrupt(format!(
                        "the global id index locates the blob of position {} elsewhere than \
                         its shard holds it",
                        found.pos
                    )));
                }
                Ok(())
            })
        })
    }
}
