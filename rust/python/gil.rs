//! When a single lookup lets go of the GIL.
//!
//! A lookup may wait on the disk (a page of the mapping, or a `pread`) or on the network: it
//! must not stop other Python threads meanwhile, so it releases the GIL around its read. Taking
//! it back costs ~320 instructions (CPython's mutex and condition variable, pyo3's bookkeeping),
//! 5% of a hot `store[id]` of a passage, more in time. When this thread is the only one of the
//! only interpreter, no other Python thread exists to be stopped, so a local read keeps the GIL
//! and saves that.
//!
//! A thread that `threading` starts is listed before it runs (its parent makes its thread
//! state), so it is seen. One that C code attaches (`PyGILState_Ensure`) during a read waits
//! for that read only, as for any C call that holds the GIL.

use pyo3::prelude::*;

/// Whether another Python thread may want the GIL during a read: one that `may_block` (on the
/// network: `Collection::may_block`), or one while another thread or interpreter exists. Always on a free-threaded CPython: there, a thread that
/// stays attached holds up every other thread's stop-the-world pause (the garbage collector's),
/// and the thread list is not ours to read without the lock CPython keeps to itself.
#[cfg(not(Py_GIL_DISABLED))]
pub(crate) fn others_may_wait(py: Python<'_>, may_block: bool) -> bool {
    may_block || !alone(py)
}

#[cfg(Py_GIL_DISABLED)]
pub(crate) fn others_may_wait(_py: Python<'_>, _may_block: bool) -> bool {
    true
}

/// Whether the calling thread (which holds the GIL) is the only thread state of the only
/// interpreter.
#[cfg(not(Py_GIL_DISABLED))]
fn alone(_py: Python<'_>) -> bool {
    use pyo3::ffi;
    // SAFETY: the GIL is held (`_py`): the current thread state and interpreter are valid and
    // stay so. Our own thread state is not freed while we run, so reading its successor is
    // safe; CPython changes these lists under a lock of its own that it does not export, so a
    // thread or interpreter being added right now may be missed, or seen late: it then waits
    // for this one read, as described above.
    unsafe {
        let me = ffi::PyThreadState_Get();
        let interp = ffi::PyInterpreterState_Get();
        ffi::PyInterpreterState_ThreadHead(interp) == me
            && ffi::PyThreadState_Next(me).is_null()
            && ffi::PyInterpreterState_Head() == interp
            && ffi::PyInterpreterState_Next(interp).is_null()
    }
}
