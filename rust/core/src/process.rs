//! This process's id, asked on every writer call (to refuse work in a forked child) and every
//! batch lookup (to find this process's pool): glibc no longer caches `getpid()`, so each ask was
//! a system call, ~2% of a build's CPU and more of a single `add`.
//!
//! On Linux the id is cached and forgotten in every forked child by a `pthread_atfork` handler.
//! The handler is registered when the library is loaded (an `.init_array` constructor), before
//! any of our code can run: registering on first use instead could race a fork in another thread
//! and leave a child with its parent's id. Elsewhere every ask is a system call, as before.
//!
//! A pid alone does not tell a forked child from its parent's memory: a descendant that inherits
//! a store can get the pid of the process that built its runtime (that process gone, the pids
//! wrapped, or a new pid namespace). The same handler counts forks (`instance`): every process
//! that inherits memory has a count higher than the memory's maker had.

#[cfg(target_os = "linux")]
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

    #[used]
    #[link_section = ".init_array"]
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
#[cfg(target_os = "linux")]
pub fn id() -> u32 {
    cached::id()
}

/// This process among those that share memory with it by `fork`: its id and the forks since the
/// memory's first process (where the fork handler runs; the id alone elsewhere). What is made
/// for one process (a runtime, a thread pool) records it, and is that process's only while it
/// matches: a forked descendant never matches, whatever its pid.
pub fn instance() -> u64 {
    #[cfg(target_os = "linux")]
    let forks = cached::forks();
    #[cfg(not(target_os = "linux"))]
    let forks = 0u32;
    u64::from(forks) << 32 | u64::from(id())
}

/// Whether `id` answers from its cache (it falls back to `getpid()` each time if the constructor
/// did not run).
pub fn is_cached() -> bool {
    #[cfg(target_os = "linux")]
    return cached::is_cached();
    #[cfg(not(target_os = "linux"))]
    return false;
}

/// This process's id (`getpid()`).
#[cfg(not(target_os = "linux"))]
pub fn id() -> u32 {
    std::process::id()
}

#[cfg(all(test, unix))]
mod tests {
    #[test]
    fn is_the_process_id_and_a_forked_child_gets_its_own() {
        let parent = super::id();
        assert_eq!(parent, std::process::id());
        #[cfg(target_os = "linux")]
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
}
