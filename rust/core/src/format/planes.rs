//! Numeric arrays are stored as byte planes: byte 0 of every element, then byte 1, and so on
//! (the "shuffle" filter of Blosc and HDF5).
//!
//! lz4 finds few repeats in interleaved numeric bytes, but the planes of small integers are long
//! runs: token ids below 65,536 held as int32 have two all-zero planes out of four. A store of
//! 60,000 generated token arrays (`benches/corpora.py`) takes 0.41 of their raw bytes as planes,
//! 0.54 as plain elements.

use std::mem::MaybeUninit;

/// Appends the planes of `elements` (little-endian elements of `size` bytes) to `out`.
pub fn split(elements: &[u8], size: usize, out: &mut Vec<u8>) {
    debug_assert_eq!(elements.len() % size.max(1), 0);
    if size <= 1 {
        out.extend_from_slice(elements);
        return;
    }
    let start = out.len();
    out.resize(start + elements.len(), 0);
    let planes = &mut out[start..];
    let count = elements.len() / size;
    for (i, element) in elements.chunks_exact(size).enumerate() {
        for (b, &byte) in element.iter().enumerate() {
            planes[b * count + i] = byte;
        }
    }
}

/// Writes the little-endian elements of `size` bytes whose planes are `planes` to `out` (as
/// long as `planes`).
pub fn join(planes: &[u8], size: usize, out: &mut [u8]) {
    // SAFETY: initialised bytes may be viewed as maybe-uninitialised ones; `join_uninit` only
    // writes initialised bytes through the view.
    let out = unsafe { &mut *(out as *mut [u8] as *mut [MaybeUninit<u8>]) };
    join_uninit(planes, size, out);
}

/// `join` into memory not yet initialised (a new numpy array), every byte of which it writes.
pub fn join_uninit(planes: &[u8], size: usize, out: &mut [MaybeUninit<u8>]) {
    assert_eq!(
        planes.len(),
        out.len(),
        "planes and elements differ in length"
    );
    match size {
        // SAFETY: `out` has room for `planes.len()` bytes (asserted above).
        0 | 1 => unsafe {
            std::ptr::copy_nonoverlapping(planes.as_ptr(), out.as_mut_ptr().cast(), planes.len())
        },
        2 => join_sized::<2>(planes, out),
        4 => join_sized::<4>(planes, out),
        8 => join_sized::<8>(planes, out),
        _ => {
            let count = planes.len() / size;
            for (i, element) in out.chunks_exact_mut(size).enumerate() {
                for (b, byte) in element.iter_mut().enumerate() {
                    byte.write(planes[b * count + i]);
                }
            }
        }
    }
}

/// `join` for a size known at compile time: sixteen elements at a time with SSE2 (part of every
/// x86-64 CPU) where available, then one by one.
fn join_sized<const SIZE: usize>(planes: &[u8], out: &mut [MaybeUninit<u8>]) {
    assert_eq!(planes.len(), out.len());
    let count = planes.len() / SIZE;
    #[cfg(target_arch = "x86_64")]
    let done = {
        // SAFETY: SSE2 is part of x86-64; `join16` reads 16 bytes at `i` of each plane and writes
        // 16 * SIZE bytes at `i * SIZE` of `out`, in bounds for every `i + 16 <= count` as
        // `planes` and `out` both hold `SIZE * count` bytes (asserted above).
        let mut i = 0;
        while i + 16 <= count {
            // SAFETY: as above, `i + 16 <= count`.
            unsafe { sse2::join16::<SIZE>(planes, count, i, out) };
            i += 16;
        }
        i
    };
    #[cfg(not(target_arch = "x86_64"))]
    let done = 0;
    for i in done..count {
        for b in 0..SIZE {
            out[i * SIZE + b].write(planes[b * count + i]);
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod sse2 {
    use std::arch::x86_64::*;
    use std::mem::MaybeUninit;

    /// Joins elements `i..i + 16` (of `count`) from the planes into `out`: interleaving bytes,
    /// then byte pairs, then quads, as a transpose of 16-byte rows.
    ///
    /// # Safety
    /// `i + 16 <= count`, `planes.len() >= SIZE * count`, `out.len() >= SIZE * count`.
    #[inline(always)]
    pub unsafe fn join16<const SIZE: usize>(
        planes: &[u8],
        count: usize,
        i: usize,
        out: &mut [MaybeUninit<u8>],
    ) {
        // SAFETY: the caller's contract (above) keeps every load and store in bounds.
        unsafe {
            let load = |b: usize| _mm_loadu_si128(planes.as_ptr().add(b * count + i).cast());
            let dst = out.as_mut_ptr().add(i * SIZE).cast::<__m128i>();
            match SIZE {
                2 => {
                    let (a0, a1) = (load(0), load(1));
                    _mm_storeu_si128(dst, _mm_unpacklo_epi8(a0, a1));
                    _mm_storeu_si128(dst.add(1), _mm_unpackhi_epi8(a0, a1));
                }
                4 => {
                    let (a0, a1, a2, a3) = (load(0), load(1), load(2), load(3));
                    let (lo01, hi01) = (_mm_unpacklo_epi8(a0, a1), _mm_unpackhi_epi8(a0, a1));
                    let (lo23, hi23) = (_mm_unpacklo_epi8(a2, a3), _mm_unpackhi_epi8(a2, a3));
                    _mm_storeu_si128(dst, _mm_unpacklo_epi16(lo01, lo23));
                    _mm_storeu_si128(dst.add(1), _mm_unpackhi_epi16(lo01, lo23));
                    _mm_storeu_si128(dst.add(2), _mm_unpacklo_epi16(hi01, hi23));
                    _mm_storeu_si128(dst.add(3), _mm_unpackhi_epi16(hi01, hi23));
                }
                8 => {
                    let a: [__m128i; 8] = std::array::from_fn(load);
                    // Pairs of bytes, then quads, then the 8 bytes of each element.
                    let pairs =
                        |x: __m128i, y: __m128i| [_mm_unpacklo_epi8(x, y), _mm_unpackhi_epi8(x, y)];
                    let [p01l, p01h] = pairs(a[0], a[1]);
                    let [p23l, p23h] = pairs(a[2], a[3]);
                    let [p45l, p45h] = pairs(a[4], a[5]);
                    let [p67l, p67h] = pairs(a[6], a[7]);
                    let quads = |x: __m128i, y: __m128i| {
                        [_mm_unpacklo_epi16(x, y), _mm_unpackhi_epi16(x, y)]
                    };
                    let [q0, q1] = quads(p01l, p23l); // elements 0-3, 4-7: bytes 0-3
                    let [q2, q3] = quads(p01h, p23h); // elements 8-11, 12-15: bytes 0-3
                    let [r0, r1] = quads(p45l, p67l); // the same elements: bytes 4-7
                    let [r2, r3] = quads(p45h, p67h);
                    for (k, (q, r)) in [(q0, r0), (q1, r1), (q2, r2), (q3, r3)]
                        .into_iter()
                        .enumerate()
                    {
                        _mm_storeu_si128(dst.add(2 * k), _mm_unpacklo_epi32(q, r));
                        _mm_storeu_si128(dst.add(2 * k + 1), _mm_unpackhi_epi32(q, r));
                    }
                }
                _ => unreachable!("join16 is for 2, 4 and 8-byte elements"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_then_join_gives_the_elements_back_for_every_size() {
        for size in [1, 2, 3, 4, 8] {
            for count in [0, 1, 2, 7, 15, 16, 17, 33, 100] {
                let elements: Vec<u8> = (0..size * count).map(|i| (i * 37 % 251) as u8).collect();
                let mut planes = vec![9];
                split(&elements, size, &mut planes);
                assert_eq!(planes.len(), 1 + elements.len());
                let mut back = vec![0; elements.len()];
                join(&planes[1..], size, &mut back);
                assert_eq!(back, elements, "size {size}, count {count}");
            }
        }
    }

    #[test]
    fn planes_hold_byte_b_of_every_element_in_turn() {
        let elements: Vec<u8> = [0x0201u16, 0x0403, 0x0605]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let mut planes = Vec::new();
        split(&elements, 2, &mut planes);
        assert_eq!(planes, [1, 3, 5, 2, 4, 6]);
    }
}
