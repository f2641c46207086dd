//! This process's id, asked on every writer call (to refuse work in a forked child) and every
//! batch lookup (to find this process's pool): glibc no longer caches `getpid()`, so each ask was
//! a system call, ~2% of a build's CPU and more of a single `add`.
//!
//! On Linux and macOS the id is cached and forgotten in every forked child by a `pthread_atfork`
//! handler. The handler is registered when the library is loaded (an `.init_array` or
//! `__mod_init_func` constructor), before any of our code can run: registering on first use
//! instead could race a fork in another thread and leave a child with its parent's id. Windows
//! has no fork, and its `GetCurrentProcessId` reads the thread's own block, no system call.
//!
//! A pid alone does not tell a forked child from its parent's memory: a descendant that inherits
//! a store can get the pid of the process that built its runtime (that process gone, the pids
//! wrapped, or a new pid namespace). The same handler counts forks (`instance`): every process
//! that inherits memory has a count higher than the memory's maker had.
//!
//! `PerProcess` keeps what is made for one process (the decode pool, a remote's runtime and
//! client) on those terms.

use std::marker::PhantomData;
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};

#[cfg(any(target_os = "linux", target_vendor = "apple"))]
mod cached {
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

    /// 0: not known in this process yet.
    static PID: AtomicU32 = AtomicU32::new(0);
    /// Forks between the first process of this memory and this one (see `instance`).
    static FORKS: AtomicU32 = AtomicU32::new(0);
    /// Whether the constructor ran (a linker may drop an unreferenced one): without the handler,
    /// a cached id could be a parent's.
    static REGISTERED: AtomicBool = AtomicBool::new(false);

    /// Runs in the child right after `fork()`: an atomic store is async-signal-safe.
    extern "C" fn forget_in_child() {
        PID.store(0, Ordering::Relaxed);
        FORKS.fetch_add(1, Ordering::Relaxed);
    }

    pub fn forks() -> u32 {
        FORKS.load(Ordering::Relaxed)
    }

    extern "C" fn register() {
        // SAFETY: registers a handler that only stores to an atomic; no prepare/parent hooks.
        let status = unsafe { libc::pthread_atfork(None, None, Some(forget_in_child)) };
        REGISTERED.store(status == 0, Ordering::Relaxed);
    }

    /// Run by the loader: ELF's `.init_array`, Mach-O's `__mod_init_func`.
    #[used]
    #[cfg_attr(target_os = "linux", link_section = ".init_array")]
    #[cfg_attr(target_vendor = "apple", link_section = "__DATA,__mod_init_func")]
    static REGISTER: extern "C" fn() = register;

    pub fn is_cached() -> bool {
        REGISTERED.load(Ordering::Relaxed)
    }

    pub fn id() -> u32 {
        if !REGISTERED.load(Ordering::Relaxed) {
            return std::process::id();
        }
        match PID.load(Ordering::Relaxed) {
            0 => {
                let pid = std::process::id();
                PID.store(pid, Ordering::Relaxed);
                pid
            }
            pid => pid,
        }
    }
}

/// This process's id (`getpid()`), without a system call after the first ask.
#[cfg(any(target_os = "linux", target_vendor = "apple"))]
pub fn id() -> u32 {
    cached::id()
}

/// This process among those that share memory with it by `fork`: its id and the forks since the
/// memory's first process (where the fork handler runs; the id alone elsewhere). What is made
/// for one process (a runtime, a thread pool) records it, and is that process's only while it
/// matches: a forked descendant never matches, whatever its pid.
pub fn instance() -> u64 {
    #[cfg(any(target_os = "linux", target_vendor = "apple"))]
    let forks = cached::forks();
    #[cfg(not(any(target_os = "linux", target_vendor = "apple")))]
    let forks = 0u32;
    u64::from(forks) << 32 | u64::from(id())
}

/// Whether `id` answers from its cache (it falls back to `getpid()` each time if the constructor
/// did not run).
pub fn is_cached() -> bool {
    #[cfg(any(target_os = "linux", target_vendor = "apple"))]
    return cached::is_cached();
    #[cfg(not(any(target_os = "linux", target_vendor = "apple")))]
    return false;
}

/// This process's id (`getpid()`).
#[cfg(not(any(target_os = "linux", target_vendor = "apple")))]
pub fn id() -> u32 {
    std::process::id()
}

/// A value made once per process and shared by its threads, safe across `fork()`: a runtime,
/// a thread pool, a client. A forked child inherits a copy of its parent's memory but none of
/// its threads, so a pool or runtime made before the fork would wait forever in the child for
/// workers that are not there (the classic DataLoader hang).
///
/// The value records the process that made it (`instance`). A process that finds another's
/// makes its own and leaks the inherited one: dropping it would talk to threads that do not
/// exist. On drop, the value is dropped only in the process that made it. No lock is held, so a
/// fork never inherits one; threads that race to make the first value each make one, one is
/// kept and the others are dropped before anyone sees them.
pub struct PerProcess<T> {
    made: AtomicPtr<Made<T>>,
    /// Owns a `T` as a `OnceLock<T>` does, and so is `Send` and `Sync` under the same bounds (a
    /// value made by one thread through `&self` is shared with all and dropped by the owner).
    _owns: PhantomData<std::sync::OnceLock<T>>,
}

struct Made<T> {
    /// The process that made it (`instance`).
    by: u64,
    value: T,
}

impl<T> PerProcess<T> {
    pub const fn new() -> Self {
        PerProcess {
            made: AtomicPtr::new(ptr::null_mut()),
            _owns: PhantomData,
        }
    }

    /// This process's value, made by `make` on first use in this process (and again after a
    /// fork). An error from `make` is returned and nothing is kept: the next call tries again.
    pub fn get_or_try_init<E>(&self, make: impl FnOnce() -> Result<T, E>) -> Result<&T, E> {
        let me = instance();
        let mut current = self.made.load(Ordering::Acquire);
        // SAFETY: a stored pointer came from `Box::into_raw` and is freed only by `drop`, which
        // has `&mut self` (a replaced one is leaked): it stays valid as long as `&self`.
        if let Some(made) = unsafe { current.as_ref() } {
            if made.by == me {
                return Ok(&made.value);
            }
        }
        let fresh = Box::into_raw(Box::new(Made {
            by: me,
            value: make()?,
        }));
        loop {
            match (self.made).compare_exchange(current, fresh, Ordering::AcqRel, Ordering::Acquire)
            {
                // What it replaced (a parent's, after a fork) is leaked: its threads are not here.
                // SAFETY: `fresh` came from `Box::into_raw` and, installed, lives until `drop`.
                Ok(_) => return Ok(unsafe { &(*fresh).value }),
                Err(won) => {
                    // SAFETY: as for `current` above.
                    match unsafe { won.as_ref() } {
                        // Another thread of this process installed its value first.
                        Some(made) if made.by == me => {
                            // SAFETY: `fresh` came from `Box::into_raw` and no other thread
                            // ever saw it.
                            drop(unsafe { Box::from_raw(fresh) });
                            return Ok(&made.value);
                        }
                        // Another process's (if `make` forked): replace it as well.
                        _ => current = won,
                    }
                }
            }
        }
    }

    /// `get_or_try_init` for a `make` that cannot fail.
    pub fn get_or_init(&self, make: impl FnOnce() -> T) -> &T {
        match self.get_or_try_init(|| Ok::<T, std::convert::Infallible>(make())) {
            Ok(value) => value,
            Err(never) => match never {},
        }
    }
}

impl<T> Default for PerProcess<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Drop for PerProcess<T> {
    fn drop(&mut self) {
        let made = *self.made.get_mut();
        // SAFETY: `made` came from `Box::into_raw` (or is null) and `&mut self` means no reference
        // handed out by `get_or_try_init` is still alive.
        if let Some(owned) = unsafe { made.as_ref() } {
            // One inherited through fork is leaked: its threads are not here.
            if owned.by == instance() {
                // SAFETY: as above; nothing else frees it.
                drop(unsafe { Box::from_raw(made) });
            }
        }
    }
}

#[cfg(all(test, unix))]
mod tests {
    #[test]
    fn is_the_process_id_and_a_forked_child_gets_its_own() {
        let parent = super::id();
        assert_eq!(parent, std::process::id());
        #[cfg(any(target_os = "linux", target_vendor = "apple"))]
        assert!(
            super::is_cached(),
            "the constructor registered the fork handler"
        );
        assert_eq!(super::id(), parent, "cached");
        // SAFETY: the child only calls async-signal-safe functions and our cached id (atomics)
        // before `_exit`.
        unsafe {
            match libc::fork() {
                0 => {
                    let ok = super::id() == libc::getpid() as u32 && super::id() != parent;
                    libc::_exit(if ok { 0 } else { 1 });
                }
                -1 => panic!("fork failed"),
                child => {
                    let mut status = 0;
                    assert_eq!(libc::waitpid(child, &mut status, 0), child);
                    assert!(libc::WIFEXITED(status), "child crashed: {status}");
                    assert_eq!(libc::WEXITSTATUS(status), 0, "the child saw a wrong id");
                }
            }
        }
        assert_eq!(super::id(), parent, "the parent keeps its own");
    }

    #[test]
    fn a_forked_child_is_another_instance_even_with_its_parents_pid() {
        let parent = super::instance();
        assert_eq!(parent as u32, std::process::id());
        assert_eq!(super::instance(), parent, "stable within a process");
        // SAFETY: the child only reads atomics and calls `getpid`/`_exit` (async-signal-safe).
        unsafe {
            match libc::fork() {
                0 => {
                    let me = super::instance();
                    // What the parent made, as if it had had the child's pid (a pid reused by a
                    // descendant): still not the child's.
                    let same_pid = parent & !0xffff_ffff | u64::from(libc::getpid() as u32);
                    let ok = me != parent && me != same_pid && me as u32 == libc::getpid() as u32;
                    libc::_exit(if ok { 0 } else { 1 });
                }
                -1 => panic!("fork failed"),
                child => {
                    let mut status = 0;
                    assert_eq!(libc::waitpid(child, &mut status, 0), child);
                    assert!(libc::WIFEXITED(status), "child crashed: {status}");
                    assert_eq!(
                        libc::WEXITSTATUS(status),
                        0,
                        "the child took itself for its parent"
                    );
                }
            }
        }
        assert_eq!(super::instance(), parent);
    }

    use super::PerProcess;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Barrier};

    /// A value that counts its drops, and says which process made it.
    struct Probe {
        by: u64,
        drops: Arc<AtomicUsize>,
    }

    impl Drop for Probe {
        fn drop(&mut self) {
            self.drops.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn probe(makes: &AtomicUsize, drops: &Arc<AtomicUsize>) -> Probe {
        makes.fetch_add(1, Ordering::SeqCst);
        Probe {
            by: super::instance(),
            drops: drops.clone(),
        }
    }

    #[test]
    fn per_process_is_made_once_and_shared_between_threads() {
        let (makes, drops) = (AtomicUsize::new(0), Arc::new(AtomicUsize::new(0)));
        let one = PerProcess::new();
        let first: *const Probe = one.get_or_init(|| probe(&makes, &drops));
        let again: *const Probe = one.get_or_init(|| probe(&makes, &drops));
        assert!(std::ptr::eq(first, again));
        assert_eq!(makes.load(Ordering::SeqCst), 1, "made on first use only");

        // Threads that race for the first value each may make one; all get the one kept.
        let raced = PerProcess::new();
        let start = Barrier::new(8);
        let got: Vec<usize> = std::thread::scope(|scope| {
            let threads: Vec<_> = (0..8)
                .map(|_| {
                    scope.spawn(|| {
                        start.wait();
                        raced.get_or_init(|| probe(&makes, &drops)) as *const Probe as usize
                    })
                })
                .collect();
            threads.into_iter().map(|t| t.join().unwrap()).collect()
        });
        assert!(
            got.iter().all(|&p| p == got[0]),
            "one value for all: {got:?}"
        );
        let (made, dropped) = (makes.load(Ordering::SeqCst), drops.load(Ordering::SeqCst));
        assert!(made >= 2, "each PerProcess made its own");
        assert_eq!(
            made - dropped,
            2,
            "the losers of the race are dropped, the kept live"
        );
        drop(raced);
        drop(one);
        assert_eq!(drops.load(Ordering::SeqCst), makes.load(Ordering::SeqCst));
        drop(PerProcess::<Probe>::new()); // never made: nothing to drop
    }

    #[test]
    fn per_process_keeps_nothing_when_making_fails() {
        let value = PerProcess::new();
        assert_eq!(value.get_or_try_init(|| Err("no")), Err("no"));
        assert_eq!(value.get_or_try_init(|| Ok::<_, &str>(7)), Ok(&7));
        assert_eq!(value.get_or_try_init(|| Err("not asked")), Ok(&7));
    }

    #[test]
    fn per_process_a_forked_child_makes_its_own_and_the_parent_keeps_its_own() {
        let (makes, drops) = (AtomicUsize::new(0), Arc::new(AtomicUsize::new(0)));
        let used = PerProcess::new();
        let unused = PerProcess::new();
        let parents: *const Probe = used.get_or_init(|| probe(&makes, &drops));
        unused.get_or_init(|| probe(&makes, &drops));
        let parent = super::instance();
        // SAFETY: the child allocates (glibc's fork leaves malloc usable in the child), touches
        // only memory it owns, never unwinds past `catch_unwind` and leaves by `_exit`.
        unsafe {
            match libc::fork() {
                0 => {
                    let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        let child = used.get_or_init(|| probe(&makes, &drops));
                        let own = child.by == super::instance()
                            && child.by != parent
                            && !std::ptr::eq(child, parents)
                            && makes.load(Ordering::SeqCst) == 3;
                        let kept = std::ptr::eq(used.get_or_init(|| probe(&makes, &drops)), child);
                        // The parent's value, inherited and never replaced, is leaked.
                        drop(unused);
                        let leaked = drops.load(Ordering::SeqCst) == 0;
                        // The child's own is dropped, the parent's it replaced leaked.
                        drop(used);
                        let dropped = drops.load(Ordering::SeqCst) == 1;
                        [own, kept, leaked, dropped]
                    }));
                    let code = match ok {
                        Ok(checks) => checks
                            .iter()
                            .position(|ok| !ok)
                            .map_or(0, |failed| 10 + failed as i32),
                        Err(_) => 2,
                    };
                    libc::_exit(code);
                }
                -1 => panic!("fork failed"),
                child => {
                    let mut status = 0;
                    assert_eq!(libc::waitpid(child, &mut status, 0), child);
                    assert!(libc::WIFEXITED(status), "child crashed: {status}");
                    assert_eq!(
                        libc::WEXITSTATUS(status),
                        0,
                        "10: the child did not make its own, 11: nor keep it, 12: it dropped \
                         an inherited value, 13: it did not drop its own, 2: it panicked"
                    );
                }
            }
        }
        let after: *const Probe = used.get_or_init(|| probe(&makes, &drops));
        assert!(std::ptr::eq(after, parents), "the parent keeps its own");
        assert_eq!(makes.load(Ordering::SeqCst), 2);
        drop(used);
        drop(unused);
        assert_eq!(
            drops.load(Ordering::SeqCst),
            2,
            "the parent drops what it made"
        );
    }
}
