//! The thread pool for parallel compression and decoding, safe across `fork()`.
//!
//! A forked child inherits a copy of the parent's memory but none of its threads: a rayon pool
//! created before the fork would wait forever for workers that do not exist in the child (the
//! classic DataLoader hang). Each pool is kept by a `process::PerProcess`: a process that finds
//! a pool of another (its parent's) builds its own and leaks the inherited one (dropping it would
//! talk to threads that are not there). No lock is held across calls, so a fork can never
//! inherit one.
//!
//! There is one pool per thread count, kept for the life of the process: switching the count
//! back and forth reuses pools instead of starting threads each time, and a pool is never freed
//! while another thread may still be inside it.

use crate::error::{Error, Result};
use crate::runtime::process::PerProcess;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

struct OwnedPool {
    threads: usize,
    pool: rayon::ThreadPool,
    /// A `claim` holds the pool (per pool, so a forked child never inherits a claim).
    claimed: AtomicBool,
}

/// The most threads a pool may have.
pub const MAX_THREADS: usize = 1024;

/// `POOLS[n]`: this process's pool of `n` threads, if built (statics are never dropped).
static POOLS: [PerProcess<OwnedPool>; MAX_THREADS + 1] =
    [const { PerProcess::new() }; MAX_THREADS + 1];
/// 0 means "decide from the environment".
static REQUESTED_THREADS: AtomicUsize = AtomicUsize::new(0);

/// Threads used by parallel work: `set_num_threads`, else `DOCSTORE_NUM_THREADS`, else all cores.
pub fn num_threads() -> usize {
    match REQUESTED_THREADS.load(Ordering::Relaxed) {
        0 => default_threads(),
        n => n,
    }
}

/// Read once: finding the core count reads cgroup files, too slow for every lookup.
fn default_threads() -> usize {
    static DEFAULT: OnceLock<usize> = OnceLock::new();
    *DEFAULT.get_or_init(|| {
        std::env::var("DOCSTORE_NUM_THREADS")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .filter(|n: &usize| *n > 0)
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
            .min(MAX_THREADS)
    })
}

/// The pool, claimed for one batch of lookups; released when dropped.
pub struct Claim(&'static OwnedPool);

impl Claim {
    /// Runs `work` on the calling thread and on all but one of the pool's threads at once;
    /// returns when every run has. `work` shares its tasks out itself (an atomic counter, say),
    /// so the calling thread starts at once instead of waiting for sleeping workers to wake,
    /// which on a busy VM costs more than a batch of short documents takes to decode.
    pub fn run_with_caller(&self, work: impl Fn() + Sync) {
        self.run_beside(&work, &work);
    }

    /// `f(k, &mut items[k])` for every item, shared out among the calling thread and the pool's
    /// (each item taken once, in turn, by whichever thread is free): the results in the items'
    /// order. A panic in `f` reaches the caller (once every run has finished).
    pub fn map<T: Send, R: Send>(
        &self,
        items: &mut [T],
        f: impl Fn(usize, &mut T) -> R + Sync,
    ) -> Vec<R> {
        let slots: Vec<Mutex<(&mut T, Option<R>)>> = items
            .iter_mut()
            .map(|item| Mutex::new((item, None)))
            .collect();
        let next = AtomicUsize::new(0);
        self.run_with_caller(|| loop {
            let k = next.fetch_add(1, Ordering::Relaxed);
            let Some(slot) = slots.get(k) else { break };
            // Never contended: each index is taken once.
            let mut slot = slot.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            let (item, result) = &mut *slot;
            *result = Some(f(k, item));
        });
        (slots.into_iter())
            .map(|slot| {
                let (_, result) = slot.into_inner().unwrap_or_else(|p| p.into_inner());
                result.expect("every item ran before run_with_caller returned")
            })
            .collect()
    }

    /// Runs `helper` on all but one of the pool's threads while `caller` runs on the calling
    /// thread (which may hold what cannot be sent to another thread); returns `caller`'s result
    /// once every run has finished.
    pub fn run_beside<R>(&self, helper: impl Fn() + Sync, caller: impl FnOnce() -> R) -> R {
        let helpers = self.0.threads.saturating_sub(1);
        self.0.pool.in_place_scope(|scope| {
            for _ in 0..helpers {
                scope.spawn(|_| helper());
            }
            caller()
        })
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.0.claimed.store(false, Ordering::Release);
    }
}

/// The pool for one batch, or `None` to work on the calling thread: when parallel work is set
/// to one thread, or while another thread's batch holds the pool. Its threads already keep the
/// cores busy then, and queueing behind them is slower than decoding here, so several calling
/// threads each use a core of their own.
pub fn claim() -> Option<Claim> {
    if num_threads() == 1 {
        return None;
    }
    let owned = owned_pool();
    owned
        .claimed
        .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
        .ok()
        .map(|_| Claim(owned))
}

/// Sets the number of threads of the pool (0 returns to the default, at most `MAX_THREADS`).
/// Takes effect on next use.
pub fn set_num_threads(n: usize) -> Result<()> {
    if n > MAX_THREADS {
        return Err(Error::InvalidArgument(format!(
            "at most {MAX_THREADS} threads, got {n}"
        )));
    }
    REQUESTED_THREADS.store(n, Ordering::Relaxed);
    Ok(())
}

/// This process's pool, built on first use (and again after a fork or a thread count change).
pub fn pool() -> &'static rayon::ThreadPool {
    &owned_pool().pool
}

fn owned_pool() -> &'static OwnedPool {
    let threads = num_threads();
    POOLS[threads].get_or_init(|| OwnedPool {
        threads,
        pool: rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("docstore-{i}"))
            .build()
            .expect("cannot start docstore's thread pool"),
        claimed: AtomicBool::new(false),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rayon::prelude::*;

    #[test]
    fn pool_follows_thread_count_and_serves_one_batch_at_a_time() {
        let sum: u64 = pool().install(|| (0..1000u64).into_par_iter().sum());
        assert_eq!(sum, 499_500);
        set_num_threads(3).unwrap();
        let three: *const rayon::ThreadPool = pool();
        assert_eq!(pool().current_num_threads(), 3);
        set_num_threads(0).unwrap();
        assert_eq!(pool().current_num_threads(), num_threads());
        set_num_threads(3).unwrap();
        assert!(std::ptr::eq(three, pool()), "a pool per count, reused");
        assert!(set_num_threads(MAX_THREADS + 1).is_err());
        assert_eq!(num_threads(), 3, "a refused count changes nothing");

        // One test, not two: tests run in parallel and the thread count is process-wide.
        set_num_threads(2).unwrap();
        let first = claim().expect("a free pool");
        assert!(claim().is_none(), "the pool is held by the first batch");
        let second = std::thread::spawn(|| claim().is_none()).join().unwrap();
        assert!(
            second,
            "another thread works on its own while the pool is held"
        );
        // A claim maps every item once, the results in order.
        let mut items: Vec<u64> = (0..1000).collect();
        let doubled = first.map(&mut items, |k, item| {
            *item += 1;
            k as u64 * 2
        });
        assert_eq!(doubled, (0..1000).map(|k| k * 2).collect::<Vec<u64>>());
        assert!(
            items.iter().zip(1..).all(|(&item, k)| item == k),
            "each once"
        );
        drop(first);
        assert!(claim().is_some(), "released when the claim is dropped");
        set_num_threads(1).unwrap();
        assert!(claim().is_none(), "one thread: always the calling thread");
        set_num_threads(0).unwrap();
    }
}
