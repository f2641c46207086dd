//! A batch of keys searched the way its storage wants, chunk by chunk on the caller's threads.
//!
//! The caller (the bindings) owns its threads, its scratch and what it builds of each chunk;
//! the collection owns how a batch is searched: a batch that may wait on the network (a remote
//! store) is searched whole first, so that what it fetches is a few rounds of concurrent
//! requests for the whole batch, not a few per chunk. So is a local one whose index looks
//! uncached: its reads are then asked of the device at once, two rounds for the batch, rather
//! than two per chunk of a few dozen keys (each chunk's thread waiting on its own reads, 16
//! rounds a batch of 1,024 on two threads). A warm local batch is searched chunk by chunk where
//! each chunk is read, one pass over the caller's threads, not two (each pass waits for the
//! threads to wake).

use super::{Collection, Located};
use crate::error::Result;

/// How the caller runs a batch's work: its threads, and a scratch `S` per chunk. Its errors
/// are its own (`Error`): what it builds of a chunk may fail in its own terms.
pub trait RunChunks<S, R> {
    type Error;

    /// Runs `f`, work on the whole batch that may wait on the network, as the caller runs
    /// blocking work (the bindings let other Python threads run meanwhile).
    fn whole<V: Send>(
        &mut self,
        f: impl FnOnce() -> Result<V> + Send,
    ) -> std::result::Result<V, Self::Error>;

    /// Runs `read` on chunks of `items`, in order, each chunk with a scratch of its own, and
    /// takes each chunk's scratch and result as the caller wants (in the order of the chunks).
    fn chunks<T: Sync>(
        &mut self,
        items: &[T],
        read: impl Fn(&[T], &mut S) -> Result<R> + Sync,
    ) -> std::result::Result<(), Self::Error>;
}

/// Each key of a chunk with what `Collection::locate_batch` found for it.
pub type LocatedChunk<'a, 'k> = &'a [(&'k [u8], Option<Located>)];

impl Collection {
    /// Searches `keys` and runs `read` on them chunk by chunk through `run`, each key with what
    /// was found for it (`locate_batch`; `read_located` and `confirm_located` take that): the
    /// batch searched whole first when a read may wait on the network or the device, else each
    /// chunk searched where it is read (see the module).
    pub fn search_in_chunks<S, R, C: RunChunks<S, R>>(
        &self,
        keys: &[&[u8]],
        run: &mut C,
        read: impl for<'a, 'k> Fn(LocatedChunk<'a, 'k>, &mut S) -> Result<R> + Sync,
    ) -> std::result::Result<(), C::Error> {
        if self.may_block() || self.id_index().index_looks_cold(keys) {
            let items = run.whole(|| self.locate_batch(keys))?;
            return run.chunks(&items, |chunk, scratch| read(chunk, scratch));
        }
        run.chunks(keys, |chunk, scratch| {
            read(&self.locate_batch(chunk)?, scratch)
        })
    }
}
