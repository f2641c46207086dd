//! Batch lookups split into chunks, decoded on the calling thread and the pool's together, each
//! chunk with its own scratch; small batches stay on the calling thread, where they are faster.

use crate::errors::{new_error, Exc, IntoPy};
use crate::scratch::Decoded;
use docstore_core::runtime::parallel;
use pyo3::prelude::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, TryLockError};

/// Batches smaller than this decode on the calling thread: waking the pool's threads costs more
/// than decoding a few dozen short documents (measured ~10x slower for 32 passages on a busy
/// 2-core machine).
const PARALLEL_MIN: usize = 256;
/// Keys or positions per parallel task: several prefetch groups, few tasks.
const CHUNK: usize = 64;

/// `f` over chunks of `items`, each chunk with its own `scratch` (emptied first, grown as
/// needed, left filled for the caller): on the calling thread for small batches (or when the
/// pool is set to one thread or busy with another thread's batch), else on the calling thread
/// and the pool's together.
pub(crate) fn in_chunks<T: Sync, S: Default + Clearable + Send, R: Send>(
    items: &[T],
    scratch: &mut Vec<S>,
    f: impl Fn(&[T], &mut S) -> docstore_core::Result<R> + Sync,
) -> docstore_core::Result<Vec<R>> {
    let pool = if items.len() < PARALLEL_MIN {
        None
    } else {
        parallel::claim()
    };
    let chunk = if pool.is_none() {
        items.len().max(1)
    } else {
        CHUNK
    };
    let chunks = items.len().div_ceil(chunk);
    if scratch.len() < chunks {
        scratch.resize_with(chunks, S::default);
    }
    // All of it: batches kept from a larger call must not pass stale records to the caller.
    scratch.iter_mut().for_each(Clearable::clear);
    let scratch = &mut scratch[..chunks];
    let Some(pool) = pool else {
        return items
            .chunks(chunk)
            .zip(scratch.iter_mut())
            .map(|(items, s)| f(items, s))
            .collect();
    };
    // Chunks are claimed in turn by the calling thread and the pool's, each with its scratch.
    pool.map(scratch, |k, scratch| {
        let end = (k * chunk + chunk).min(items.len());
        f(&items[k * chunk..end], scratch)
    })
    .into_iter()
    .collect()
}

/// `f` over chunks of `items` as `in_chunks` does (with Python released), then `then` on each
/// chunk's scratch and result, in order, with Python held. With the pool, the calling thread
/// hands a chunk to `then` as soon as it and those before it are done, between decoding chunks
/// of its own: making the Python objects, which only one thread can do, overlaps the pool's
/// decoding instead of waiting for all of it. Python is held only while `then` runs, so waiting
/// for the pool (which may be busy with another thread's work) never blocks other Python threads.
pub(crate) fn in_chunks_then<T: Sync, S: Default + Clearable + Send, R: Send>(
    py: Python<'_>,
    items: &[T],
    scratch: &mut Vec<S>,
    f: impl Fn(&[T], &mut S) -> docstore_core::Result<R> + Sync,
    mut then: impl FnMut(&S, R) -> PyResult<()>,
) -> PyResult<()> {
    let pool = if items.len() < PARALLEL_MIN {
        None
    } else {
        parallel::claim()
    };
    let Some(pool) = pool else {
        let results = py.detach(|| in_chunks(items, scratch, &f)).py_err(py)?;
        return scratch
            .iter()
            .zip(results)
            .try_for_each(|(s, r)| then(s, r));
    };
    let chunks = items.len().div_ceil(CHUNK);
    if scratch.len() < chunks {
        scratch.resize_with(chunks, S::default);
    }
    scratch.iter_mut().for_each(Clearable::clear);
    let slots: Vec<Slot<'_, S, R>> = scratch[..chunks]
        .iter_mut()
        .map(|s| Mutex::new((s, None)))
        .collect();
    let next = AtomicUsize::new(0);
    // Claims the next chunk and runs `f` on it, its slot locked meanwhile; false when none is left.
    let decode_one = || {
        let k = next.fetch_add(1, Ordering::Relaxed);
        let Some(slot) = slots.get(k) else {
            return false;
        };
        let mut slot = slot.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let (scratch, result) = &mut *slot;
        let end = (k * CHUNK + CHUNK).min(items.len());
        *result = Some(f(&items[k * CHUNK..end], scratch));
        true
    };
    let then = OnThisThread(&mut then);
    py.detach(|| {
        pool.run_beside(
            || while decode_one() {},
            || {
                let then = then; // the whole wrapper, not its field
                let mut handed = 0;
                let mut hand_over = || loop {
                    let more = decode_one();
                    while handed < chunks {
                        let Some(mut slot) = finished(&slots[handed], !more) else {
                            break;
                        };
                        let (scratch, result) = &mut *slot;
                        let result = result.take();
                        Python::attach(|py| match result {
                            Some(result) => result.py_err(py).and_then(|r| (then.0)(scratch, r)),
                            // Its decoding thread panicked (the panic resurfaces as the pool's
                            // scope ends, and `guard` reports it).
                            None => Err(new_error(
                                py,
                                Exc::Internal,
                                "a decoding thread failed".into(),
                            )),
                        })?;
                        handed += 1;
                    }
                    if !more && handed == chunks {
                        return Ok(());
                    }
                };
                let outcome = hand_over();
                // Whatever is left (after an error) is no one's: helpers yet to start stop at once.
                next.store(chunks, Ordering::Relaxed);
                outcome
            },
        )
    })
}

/// The slot of a chunk once decoded, locked; `None` if it is not yet (unless `wait`: then once
/// it is). A slot whose decoding thread panicked counts as decoded, with no result.
fn finished<'a, 's, S, R>(
    slot: &'a Slot<'s, S, R>,
    wait: bool,
) -> Option<MutexGuard<'a, SlotState<'s, S, R>>> {
    loop {
        let guard = match slot.try_lock() {
            Ok(guard) => guard,
            Err(TryLockError::Poisoned(poisoned)) => return Some(poisoned.into_inner()),
            Err(TryLockError::WouldBlock) if !wait => return None,
            // Being decoded: wait until its thread lets go.
            Err(TryLockError::WouldBlock) => {
                drop(slot.lock());
                continue;
            }
        };
        if guard.1.is_some() {
            return Some(guard);
        }
        // Claimed but not yet locked by its thread (or not claimed yet, while this thread decodes).
        drop(guard);
        if !wait {
            return None;
        }
        std::thread::yield_now();
    }
}

/// What holds Python objects (a closure over them, say), carried by the thread that owns it
/// through a section where Python is released, to be used again only on that thread and only
/// with Python held (`Python::attach`). It is never sent to another thread.
struct OnThisThread<T>(T);

// SAFETY: see above: the value never leaves the thread that made it, and is only used with
// Python held; `Send` is claimed only to pass it into `Python::detach`, which runs its closure on
// the calling thread.
unsafe impl<T> Send for OnThisThread<T> {}

/// One chunk's scratch and, once it has run, its result.
type Slot<'a, S, R> = Mutex<SlotState<'a, S, R>>;
type SlotState<'a, S, R> = (&'a mut S, Option<docstore_core::Result<R>>);

/// Per-chunk scratch that `in_chunks` empties before use.
pub(crate) trait Clearable {
    fn clear(&mut self);
}

impl Clearable for Decoded {
    fn clear(&mut self) {
        Decoded::clear(self);
    }
}

/// No scratch.
impl Clearable for () {
    fn clear(&mut self) {}
}
