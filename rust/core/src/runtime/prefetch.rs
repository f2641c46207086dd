//! A hint to the CPU to load memory that a loop will soon read at a place it cannot predict.

/// Asks the CPU to start loading `items[at]` into cache (no effect where unsupported, or when
/// `at` is out of bounds).
#[inline(always)]
pub(crate) fn prefetch<T>(items: &[T], at: usize) {
    #[cfg(target_arch = "x86_64")]
    if at < items.len() {
        // SAFETY: `at` is in bounds; a prefetch never faults and changes no memory.
        unsafe {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            _mm_prefetch::<_MM_HINT_T0>(items.as_ptr().add(at).cast());
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (items, at);
}
