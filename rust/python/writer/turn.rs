//! Taking turns at one `Writer`: a call holds the writer's state until it returns, a thread
//! waiting for its turn releases Python (the call in turn may need it to flush), a call that comes
//! back into the writer on the thread in turn fails instead of waiting for itself, and a forked
//! child never gets a turn (the parent's thread that held one at the fork is not there).

use super::{State, Writer};
use crate::errors::{new_error, Exc};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{MutexGuard, TryLockError};

/// A number for the calling thread, unique among live threads: the address of a thread-local.
fn this_thread() -> usize {
    thread_local!(static MARK: u8 = const { 0 });
    MARK.with(|mark| mark as *const u8 as usize)
}

/// The writer's state for one call; gives it back when dropped.
pub(super) struct Turn<'a> {
    state: MutexGuard<'a, State>,
    owner: &'a AtomicUsize,
}

impl Deref for Turn<'_> {
    type Target = State;
    fn deref(&self) -> &State {
        &self.state
    }
}

impl DerefMut for Turn<'_> {
    fn deref_mut(&mut self) -> &mut State {
        &mut self.state
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        self.owner.store(0, Ordering::Release);
    }
}

impl Writer {
    pub(super) fn in_forked_child(&self) -> bool {
        docstore_core::runtime::process::instance() != self.pid
    }

    /// The writer's state, once no other thread is using it.
    pub(super) fn lock(&self, py: Python<'_>) -> PyResult<Turn<'_>> {
        if self.in_forked_child() {
            let message = format!(
                "the writer of {} belongs to the process that created it (pid {}), not to \
                 this forked child",
                self.path.display(),
                self.pid as u32
            );
            return Err(new_error(py, Exc::Closed, message));
        }
        loop {
            let state = match self.state.try_lock() {
                Ok(state) => state,
                // A panic in a call is caught inside it (`guard`), so this is not expected; the
                // state is then as the call left it, which `inner` reports if it matters.
                Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
                Err(TryLockError::WouldBlock)
                    if self.owner.load(Ordering::Acquire) == this_thread() =>
                {
                    return Err(PyRuntimeError::new_err(
                        "the writer was called again from inside one of its own calls \
                         (by a value's __repr__ or __eq__, say)",
                    ));
                }
                // Wait without Python: the thread in turn may need it to finish its call.
                Err(TryLockError::WouldBlock) => {
                    py.detach(|| drop(self.state.lock()));
                    continue;
                }
            };
            self.owner.store(this_thread(), Ordering::Release);
            return Ok(Turn {
                state,
                owner: &self.owner,
            });
        }
    }
}
