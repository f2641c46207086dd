//! The thread pool for parallel compression and decoding, safe across `fork()`.
//!
//! A forked child inherits a copy of the parent's memory but none of its threads: a rayon pool
//! created before the fork would wait forever for workers that do not exist in the child (the
//! classic DataLoader hang). Each pool remembers the pid that created it; a process that finds a
//! pool of another pid builds its own and leaks the inherited one (dropping it would talk to
//! threads that are not there). No lock is held across calls, so a fork can never inherit one.

use std::ptr;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use std::sync::OnceLock;

struct OwnedPool {
    pid: u32,
    threads: usize,
    pool: rayon::ThreadPool,
}

static POOL: AtomicPtr<OwnedPool> = AtomicPtr::new(ptr::null_mut());
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
    })
}

/// Runs `serial` on the calling thread when parallel work is set to one thread (so that
/// several calling threads each work on their own core), else `parallel` inside the pool.
pub fn run<R: Send>(serial: impl FnOnce() -> R, parallel: impl FnOnce() -> R + Send) -> R {
    if num_threads() == 1 {
        serial()
    } else {
        pool().install(parallel)
    }
}

/// Sets the number of threads of the pool (0 returns to the default). Takes effect on next use.
pub fn set_num_threads(n: usize) {
    REQUESTED_THREADS.store(n, Ordering::Relaxed);
}

/// This process's pool, built on first use (and again after a fork or a thread count change).
pub fn pool() -> &'static rayon::ThreadPool {
    let pid = std::process::id();
    let threads = num_threads();
    loop {
        let current = POOL.load(Ordering::Acquire);
        // SAFETY: pools are leaked, never freed, so any pointer ever stored stays valid.
        if let Some(owned) = unsafe { current.as_ref() } {
            if owned.pid == pid && owned.threads == threads {
                return &owned.pool;
            }
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("docstore-{i}"))
            .build()
            .expect("cannot start docstore's thread pool");
        let fresh = Box::into_raw(Box::new(OwnedPool { pid, threads, pool }));
        match POOL.compare_exchange(current, fresh, Ordering::AcqRel, Ordering::Acquire) {
            // The replaced pool is leaked: in a child its threads do not exist, and in the parent
            // another thread may still be inside it.
            Ok(_) => return unsafe { &(*fresh).pool },
            // Another thread installed one first: ours was never shared, so it can go.
            Err(_) => drop(unsafe { Box::from_raw(fresh) }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rayon::prelude::*;

    #[test]
    fn pool_runs_parallel_work_and_follows_thread_count() {
        let sum: u64 = pool().install(|| (0..1000u64).into_par_iter().sum());
        assert_eq!(sum, 499_500);
        set_num_threads(3);
        assert_eq!(pool().current_num_threads(), 3);
        set_num_threads(0);
        assert_eq!(pool().current_num_threads(), num_threads());
    }
}
