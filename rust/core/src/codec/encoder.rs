//! An lz4 block compressor specialised for "small document + static shared dictionary".
//!
//! Output is a standard lz4 block (no frame) that decodes with
//! `LZ4_decompress_safe_usingDict(block, out, len, raw_len, dict, dict_len)`: the history is the
//! dictionary immediately followed by the document, and match offsets (1..=65535) count back from
//! the current position through the document and on into the end of the dictionary.
//!
//! Compared with liblz4 HC (level 3) with an attached dictionary, which inserts every document
//! position into a 256 KiB per-thread hash + chain state and walks the dictionary state's chains
//! (one dependent, often cache-missing load per candidate):
//!
//! * the dictionary's match index ([`DictIndex`]) is built once, read-only, shared by threads:
//!   2^15 buckets of 4 u16 slots (256 KiB) holding, per 4-byte hash, the 4 positions nearest the
//!   dictionary's end: the first 4 links of HC's chain, but in one cache line;
//! * a search reads its bucket, prefetches the 4 candidates at once, and measures each with one
//!   16-byte SIMD compare forwards (and one backwards for the "wider" searches), selecting the
//!   best without data-dependent branches; only matches filling the 16 bytes are counted further;
//! * in-document matches use a tiny per-document head table (one candidate, no chain) sized to
//!   the document and zeroed per document: it stays in L1;
//! * the bucket of a position two ahead is prefetched while the current one is searched.
//!
//! The parse is liblz4 HC's ("hash chain", levels 3..9), ported as is: at each position find the
//! best match, then look for a wider/longer overlapping match starting near its end (at
//! `ip + len - 2`, then `start2 + len2 - 3`) and trim/shift the matches to keep whichever
//! combination covers more. So compressed sizes track liblz4 HC level 3 closely.
//!
//! lz4 block rules respected: minimum match 4; the last 5 bytes are always literals
//! (`LASTLITERALS`); the last match starts at least 12 bytes before the end (`MFLIMIT`);
//! inputs shorter than 13 bytes are all literals; offsets are 1..=65535. Inputs of any length
//! are accepted (over 64 KiB, only the last 64 KiB of history are reachable, as in lz4).
//!
//! Unsafe code: the hot paths read through raw pointers (bounds argued at each site, checked by
//! debug assertions, exercised by the tests in `tests/roundtrip.rs` in debug builds). x86_64 uses
//! SSE2 (baseline) and prefetch intrinsics; other targets use portable fallbacks.

const MINMATCH: usize = 4;
const LASTLITERALS: usize = 5;
const MFLIMIT: usize = 12;
/// Inputs shorter than this are emitted as a single literal run (as liblz4 does).
const MIN_LENGTH: usize = MFLIMIT + 1;
const MAX_DISTANCE: usize = 65535;
const ML_BITS: u32 = 4;
const ML_MASK: usize = (1 << ML_BITS) - 1;
const RUN_MASK: usize = 15;
/// liblz4 HC's OPTIMAL_ML: the longest match whose length fits in the token.
const OPTIMAL_ML: usize = ML_MASK - 1 + MINMATCH;

/// Dictionary index shape: 2^DICT_HASH_LOG buckets of DICT_WAYS u16 slots (256 KiB). 14 bits
/// (128 KiB) is ~3% faster but ~0.9% (passages) to ~1.3% (news) larger.
const DICT_HASH_LOG: u32 = 15;
const DICT_WAYS: usize = 4;

/// Largest hash of the per-document table (chosen from the document's size, up to this).
const DOC_HASH_LOG_MAX: u32 = 14;
const DOC_HASH_LOG_MIN: u32 = 6;

/// Worst-case size of a block for `n` input bytes (as `LZ4_compressBound`).
pub fn compress_bound(n: usize) -> usize {
    n + n / 255 + 16
}

#[inline(always)]
fn hash4(v: u32, log: u32) -> usize {
    (v.wrapping_mul(2_654_435_761) >> (32 - log)) as usize
}

// Hot-path helpers on raw pointers: every caller keeps the reads inside its slices (argued at
// each call site and checked by debug assertions); bounds checks there cost ~30% of the run time.

/// # Safety
/// `p..p + 2` lies within one allocation (any alignment).
#[inline(always)]
unsafe fn rd16(p: *const u8) -> u16 {
    p.cast::<u16>().read_unaligned()
}

/// # Safety
/// `p..p + 4` lies within one allocation (any alignment).
#[inline(always)]
unsafe fn rd32(p: *const u8) -> u32 {
    u32::from_le(p.cast::<u32>().read_unaligned())
}

/// # Safety
/// `p..p + 8` lies within one allocation (any alignment).
#[inline(always)]
unsafe fn rd64(p: *const u8) -> u64 {
    u64::from_le(p.cast::<u64>().read_unaligned())
}

/// Number of equal leading bytes at `a` and `b`, at most `max`.
///
/// # Safety
/// `a..a + max` and `b..b + max` are readable.
#[inline(always)]
unsafe fn count(a: *const u8, b: *const u8, max: usize) -> usize {
    let mut k = 0;
    while k + 8 <= max {
        let diff = rd64(a.add(k)) ^ rd64(b.add(k));
        if diff != 0 {
            return k + (diff.trailing_zeros() / 8) as usize;
        }
        k += 8;
    }
    while k < max && *a.add(k) == *b.add(k) {
        k += 1;
    }
    k
}

/// Number of equal bytes going backwards from `a[-1]` and `b[-1]`, at most `max`.
///
/// # Safety
/// `a - max..a` and `b - max..b` are readable.
#[inline(always)]
unsafe fn count_back(a: *const u8, b: *const u8, max: usize) -> usize {
    let mut k = 0;
    while k + 8 <= max {
        let diff = rd64(a.sub(k + 8)) ^ rd64(b.sub(k + 8));
        if diff != 0 {
            return k + (diff.leading_zeros() / 8) as usize;
        }
        k += 8;
    }
    while k < max && *a.sub(k + 1) == *b.sub(k + 1) {
        k += 1;
    }
    k
}

/// Number of equal leading bytes of the 16 at `a` and the 16 at `b` (16 if all are).
///
/// # Safety
/// `a..a + 16` and `b..b + 16` are readable.
#[inline(always)]
unsafe fn equal_ahead16(a: *const u8, b: *const u8) -> usize {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::*;
        let eq = _mm_cmpeq_epi8(_mm_loadu_si128(a.cast()), _mm_loadu_si128(b.cast()));
        let mask = _mm_movemask_epi8(eq) as u32; // bit i: byte i equal
        (!mask).trailing_zeros().min(16) as usize
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let x = a.cast::<u128>().read_unaligned() ^ b.cast::<u128>().read_unaligned();
        (u128::from_le(x).trailing_zeros() / 8) as usize
    }
}

/// Number of equal bytes going backwards from `a[-1]` and `b[-1]`, among 16 (16 if all are).
///
/// # Safety
/// `a - 16..a` and `b - 16..b` are readable.
#[inline(always)]
unsafe fn equal_behind16(a: *const u8, b: *const u8) -> usize {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::*;
        let eq = _mm_cmpeq_epi8(
            _mm_loadu_si128(a.sub(16).cast()),
            _mm_loadu_si128(b.sub(16).cast()),
        );
        let mask = _mm_movemask_epi8(eq) as u32; // bit 15: byte a[-1] equal
        (!(mask << 16)).leading_zeros() as usize
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let x =
            a.sub(16).cast::<u128>().read_unaligned() ^ b.sub(16).cast::<u128>().read_unaligned();
        (u128::from_le(x).leading_zeros() / 8) as usize
    }
}

/// Exact forward match length of document position `ip` against dictionary position `p`
/// (`d = dn - p`), at most `room`: through the end of the dictionary, then on into the document,
/// which follows the dictionary in the history.
///
/// # Safety
/// `dict..dict + p + d` (`p + d` is the dictionary's length) and `s..s + ip + room` are readable.
#[inline(never)]
unsafe fn dict_match_len(
    s: *const u8,
    ip: usize,
    dict: *const u8,
    p: usize,
    d: usize,
    room: usize,
) -> usize {
    let lim = d.min(room);
    let mut len = count(s.add(ip), dict.add(p), lim);
    if len == d && d < room {
        len += count(s.add(ip + len), s, room - len);
    }
    len
}

/// Safe 4-byte read for the index builder.
fn read32(s: &[u8], i: usize) -> u32 {
    u32::from_le_bytes(s[i..i + 4].try_into().unwrap())
}

/// Read-only match index over a dictionary, built once and shared by all threads.
///
/// A hash of the 4 bytes at a position selects a bucket of `ways` slots holding the most recent
/// (closest to the dictionary's end) positions with that hash, newest first: the first links of a
/// hash chain, but in one cache line, so the candidates' dictionary bytes can all be fetched at
/// once where a chain needs one dependent (cache-missing) load per candidate.
///
/// Positions are kept as their distance from the dictionary's end (`d = dict.len() - p`, so a
/// match at `p` seen from document position `ip` has offset `d + ip`); 0 means "empty slot".
pub struct DictIndex {
    /// `PAD` zero bytes, the dictionary, `PAD` zero bytes: 16-byte reads just outside the
    /// dictionary stay in bounds (their bytes are never counted as matching).
    padded: Box<[u8]>,
    buckets: Box<[u16]>,
    hash_log: u32,
}

const PAD: usize = 16;

impl DictIndex {
    /// `dict` is cut to its last 64 KiB (all an lz4 block can reach).
    pub fn new(dict: &[u8]) -> DictIndex {
        DictIndex::with_params(dict, DICT_HASH_LOG)
    }

    /// `2^hash_log` buckets of `DICT_WAYS` slots.
    pub fn with_params(dict: &[u8], hash_log: u32) -> DictIndex {
        assert!(
            (4..=20).contains(&hash_log),
            "dictionary hash bits out of range"
        );
        let ways = DICT_WAYS;
        let dict = &dict[dict.len().saturating_sub(64 * 1024)..];
        let n = dict.len();
        let mut padded = vec![0u8; n + 2 * PAD].into_boxed_slice();
        padded[PAD..PAD + n].copy_from_slice(dict);
        let mut buckets = vec![0u16; ways << hash_log].into_boxed_slice();
        let mut filled = vec![0u8; 1 << hash_log];
        if n >= 8 {
            // Newest first; positions further than 65535 from the end are unreachable. The last
            // 7 are left out (so d >= 8): a match running past the dictionary's end into the
            // document is then always a long one, measured by the slow path.
            for p in (n.saturating_sub(MAX_DISTANCE)..n.saturating_sub(7)).rev() {
                let h = hash4(read32(dict, p), hash_log);
                if (filled[h] as usize) < ways {
                    buckets[h * ways + filled[h] as usize] = (n - p) as u16;
                    filled[h] += 1;
                }
            }
        }
        DictIndex {
            padded,
            buckets,
            hash_log,
        }
    }

    pub fn dictionary(&self) -> &[u8] {
        &self.padded[PAD..self.padded.len() - PAD]
    }
}

/// A match found by the search: `len` bytes at offset `off`, starting `back` bytes before the
/// searched position (`off == 0`: none).
#[derive(Clone, Copy, Default, Debug)]
struct Match {
    len: usize,
    off: usize,
    back: usize,
}

/// Per-thread compressor state: the small in-document hash table (reused across calls).
pub struct Encoder {
    /// hash of 4 bytes -> latest document position + 1 with that hash (0 = none). One candidate
    /// per search, no chain: in-document matches are a minority for documents this small, and
    /// inserting every position into a chain cost more than it gained.
    head: Vec<u32>,
    hash_log: u32,
    /// Next document position to insert into the table.
    next_insert: usize,
}

impl Encoder {
    pub fn new() -> Encoder {
        Encoder {
            head: Vec::new(),
            hash_log: DOC_HASH_LOG_MIN,
            next_insert: 0,
        }
    }

    /// Appends the lz4 block of `src` (history: `index`'s dictionary) to `out`.
    pub fn compress(&mut self, index: &DictIndex, src: &[u8], out: &mut Vec<u8>) {
        let n = src.len();
        out.reserve(compress_bound(n));
        let mut w = Writer {
            // SAFETY: `compress_bound(n)` bytes of spare capacity are reserved above, and lz4's
            // worst case (all literals) fits in it.
            op: unsafe { out.as_mut_ptr().add(out.len()) },
        };
        let start = w.op;
        let mut anchor = 0;
        if n >= MIN_LENGTH {
            let mut s = Search {
                enc: self,
                dict: index,
                src,
            };
            s.reset();
            anchor = s.parse(&mut w);
        }
        w.last_literals(&src[anchor..]);
        // SAFETY: the writer initialised exactly these bytes, within the reserved capacity.
        unsafe {
            let written = w.op.offset_from(start) as usize;
            debug_assert!(written <= compress_bound(n));
            out.set_len(out.len() + written);
        }
    }
}

impl Default for Encoder {
    fn default() -> Encoder {
        Encoder::new()
    }
}

/// One document's compression: the encoder's tables, the dictionary index and the input.
struct Search<'a> {
    enc: &'a mut Encoder,
    dict: &'a DictIndex,
    src: &'a [u8],
}

impl Search<'_> {
    /// Sizes and clears the per-document table for this input.
    fn reset(&mut self) {
        let n = self.src.len();
        let bits = usize::BITS - n.leading_zeros(); // ~ log2(n) + 1
        let e = &mut *self.enc;
        e.hash_log = bits.clamp(DOC_HASH_LOG_MIN, DOC_HASH_LOG_MAX);
        let hsize = 1usize << e.hash_log;
        if e.head.len() < hsize {
            e.head.resize(hsize, 0);
        }
        e.head[..hsize].fill(0);
        e.next_insert = 0;
    }

    /// Inserts document positions up to `target` (excluded) into the per-document table.
    /// Callers only insert below `n - MFLIMIT`, so the 4-byte reads stay inside `src`.
    #[inline(always)]
    fn insert_upto(&mut self, target: usize) {
        let e = &mut *self.enc;
        debug_assert!(target + MINMATCH <= self.src.len());
        let mut p = e.next_insert;
        while p < target {
            // SAFETY: p < target <= n - 4; the hash is < 2^hash_log <= head.len().
            unsafe {
                let h = hash4(rd32(self.src.as_ptr().add(p)), e.hash_log);
                *e.head.get_unchecked_mut(h) = (p + 1) as u32;
            }
            p += 1;
        }
        e.next_insert = e.next_insert.max(target);
    }

    /// Hints the CPU to fetch the dictionary bucket of position `ip` (`ip + 4 <= n`), and when
    /// `candidates`, reads that bucket (fetched earlier) and hints to fetch its candidates'
    /// dictionary bytes. A prefetch has no architectural effect.
    #[inline(always)]
    fn prefetch(&self, ip: usize, candidates: bool) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: ip + 4 <= n; bucket indexes are in bounds; dictionary addresses are only
        // prefetched, never dereferenced.
        unsafe {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            let index = self.dict;
            let h = hash4(rd32(self.src.as_ptr().add(ip)), index.hash_log) * DICT_WAYS;
            let bucket = index.buckets.as_ptr().add(h);
            if candidates {
                let end = index.padded.as_ptr().add(index.padded.len() - PAD);
                for slot in 0..DICT_WAYS {
                    let d = *bucket.add(slot) as usize;
                    _mm_prefetch::<_MM_HINT_T0>(end.wrapping_sub(d).cast());
                }
            } else {
                _mm_prefetch::<_MM_HINT_T0>(bucket.cast());
            }
        }
        // Elsewhere (aarch64 ...) the hint is left out: the arguments are unused, not a warning.
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (ip, candidates);
    }

    /// Longest match at `ip` (possibly extended backwards down to `low`) longer than `longest`:
    /// `off == 0` if there is none. `high` is the end of matchable input (`n - LASTLITERALS`).
    /// This is liblz4 HC's `LZ4HC_InsertAndGetWiderMatch` (without the pattern analysis that
    /// levels < 9 skip), with the dictionary's candidates taken from a bucket instead of a chain.
    ///
    /// Requires `low <= ip <= n - MFLIMIT` and `longest - 1 >= ip - low` (true of HC's calls).
    #[inline(always)]
    fn find_wider(&mut self, ip: usize, low: usize, high: usize, longest: usize) -> Match {
        debug_assert!(
            low <= ip && ip + MFLIMIT <= self.src.len() && high + LASTLITERALS == self.src.len()
        );
        debug_assert!(longest > ip - low);
        // Start fetching the dictionary candidates first: the in-document work below then
        // overlaps their cache misses.
        self.prefetch(ip, true);
        self.insert_upto(ip);
        let e = &*self.enc;
        let s = self.src.as_ptr();
        let look_back = ip - low;
        let mut best = Match {
            len: longest,
            ..Match::default()
        };
        // SAFETY: (whole block) document reads are within [0, high + 4) as argued inline;
        // dictionary reads are within [p - back, dn) with back <= p and p + 4 <= dn; the bucket
        // index is < 2^hash_log * ways.
        unsafe {
            let pattern = rd32(s.add(ip));

            // 1. The latest earlier position of this document with the same hash.
            let cand = *e.head.get_unchecked(hash4(pattern, e.hash_log)) as usize;
            if cand != 0 {
                let c = cand - 1;
                // Cheap filter (as HC): a match longer than `best` must also agree on the two
                // bytes ending at `low + best.len`. Both reads end before `high`, since
                // best.len <= high - low; `q >= 0` since best.len - 1 >= look_back.
                let q = best.len - 1 - look_back;
                if c < ip
                    && ip - c <= MAX_DISTANCE
                    && rd16(s.add(low + best.len - 1)) == rd16(s.add(c + q))
                    && rd32(s.add(c)) == pattern
                {
                    let back = count_back(s.add(ip), s.add(c), look_back.min(c));
                    let len = MINMATCH
                        + count(
                            s.add(ip + MINMATCH),
                            s.add(c + MINMATCH),
                            high - ip - MINMATCH,
                        );
                    if len + back > best.len {
                        best = Match {
                            len: len + back,
                            off: ip - c,
                            back,
                        };
                    }
                }
            }

            // 2. The dictionary bucket. Each candidate is measured with one 16-byte compare
            // forwards (and one backwards for a wider search), without branches; only matches
            // filling those 16 bytes are counted further (`dict_match_len`, `count_back`).
            let index = self.dict;
            let dict = index.padded.as_ptr().add(PAD); // dict[-PAD..dn + PAD] is readable
            let dn = index.padded.len() - 2 * PAD;
            let room = high - ip; // >= 7: ip <= n - 12
            let n = self.src.len();
            // The 16 document bytes at ip and the 16 before it. Near either end of the document
            // they come from a zero-filled copy: the bytes outside it are never counted, since
            // lengths are capped by `room` and backward lengths by `look_back <= ip`.
            let mut ahead = [0u8; 16];
            let fwd = if ip + 16 <= n {
                s.add(ip)
            } else {
                ahead[..n - ip].copy_from_slice(&self.src[ip..]);
                ahead.as_ptr()
            };
            let mut behind = [0u8; 16];
            let bwd = if ip >= 16 || look_back == 0 {
                s.add(ip) // (not read when look_back == 0)
            } else {
                behind[16 - ip..].copy_from_slice(&self.src[..ip]);
                behind.as_ptr().add(16)
            };
            let bucket = index
                .buckets
                .as_ptr()
                .add(hash4(pattern, index.hash_log) * DICT_WAYS);
            // Candidate d is within reach iff 1 <= d <= reach (0 = empty slot).
            let reach = MAX_DISTANCE.saturating_sub(ip); // 0 past 64 KiB: none
            let (mut best_len, mut best_off, mut best_back) = (best.len, best.off, best.back);
            for slot in 0..DICT_WAYS {
                // Branch-free in the common case: the loads of all slots can be in flight at once
                // and nothing waits on them to resolve a branch. Empty slots and candidates out
                // of reach are measured anyway (reads stay in bounds), then masked out.
                let d = *bucket.add(slot) as usize;
                // Indexed positions have p + 8 <= dn; an empty slot gives p = dn (padding).
                let p = dn - d;
                // p + 16 <= dn + PAD. Exact unless the match fills the 16 bytes, or reaches the
                // end of the dictionary (the history goes on with the document, not with the
                // padding).
                let f = equal_ahead16(dict.add(p), fwd);
                let t = d.min(16);
                let mut len = f.min(t).min(room);
                if f >= t && t < room && d != 0 {
                    len = dict_match_len(s, ip, dict, p, d, room); // long match: rarer
                }
                let mut back = 0;
                if look_back > 0 {
                    let blim = look_back.min(p);
                    let b = equal_behind16(dict.add(p), bwd); // p - 16 >= -PAD
                    back = b.min(blim);
                    if b == 16 && blim > 16 {
                        back = 16 + count_back(s.add(ip - 16), dict.add(p - 16), blim - 16);
                    }
                }
                let total = len + back;
                let better = (d.wrapping_sub(1) < reach) & (len >= MINMATCH) & (total > best_len);
                let mask = 0usize.wrapping_sub(better as usize);
                best_len = (total & mask) | (best_len & !mask);
                best_off = ((d + ip) & mask) | (best_off & !mask);
                best_back = (back & mask) | (best_back & !mask);
            }
            best = Match {
                len: best_len,
                off: best_off,
                back: best_back,
            };
        }
        if best.off == 0 {
            best.len = 0;
        }
        best
    }

    /// liblz4 HC's `LZ4HC_compress_hashChain` parse; returns the anchor (start of the final
    /// literal run).
    fn parse(&mut self, out: &mut Writer) -> usize {
        let src = self.src;
        let n = src.len();
        let mflimit = n - MFLIMIT;
        let matchlimit = n - LASTLITERALS;
        let mut ip = 0usize;
        let mut anchor = 0usize;

        'main: while ip <= mflimit {
            // Most searches here fail and the next ones are at ip + 1, ip + 2: start fetching
            // the bucket of ip + 2 (find_wider fetches its own candidates as it starts).
            if ip + 2 <= mflimit {
                self.prefetch(ip + 2, false);
            }
            let mut m1 = self.find_wider(ip, ip, matchlimit, MINMATCH - 1);
            if m1.len < MINMATCH {
                ip += 1;
                continue;
            }
            // Saved, in case we skip too much.
            let mut start0 = ip;
            let mut m0 = m1;
            let mut start2;
            let mut m2;
            let mut start3;
            let mut m3;

            'search2: loop {
                if ip + m1.len <= mflimit {
                    start2 = ip + m1.len - 2;
                    m2 = self.find_wider(start2, ip, matchlimit, m1.len);
                    start2 -= m2.back;
                } else {
                    start2 = 0;
                    m2 = Match::default();
                }

                if m2.len <= m1.len {
                    // No better match: encode m1 immediately.
                    out.sequence(src, &mut ip, &mut anchor, m1.len, m1.off);
                    continue 'main;
                }

                if start0 < ip && start2 < ip + m0.len {
                    // Squeezing m1 between m0 (the original m1) and m2: restore the first match.
                    ip = start0;
                    m1 = m0;
                }

                if start2 - ip < 3 {
                    // First match too small: removed.
                    ip = start2;
                    m1 = m2;
                    continue 'search2;
                }

                'search3: loop {
                    if start2 - ip < OPTIMAL_ML {
                        let mut new_ml = m1.len.min(OPTIMAL_ML);
                        if ip + new_ml > start2 + m2.len - MINMATCH {
                            new_ml = start2 - ip + m2.len - MINMATCH;
                        }
                        if new_ml > start2 - ip {
                            let correction = new_ml - (start2 - ip);
                            start2 += correction;
                            m2.len -= correction;
                        }
                    }

                    if start2 + m2.len <= mflimit {
                        start3 = start2 + m2.len - 3;
                        m3 = self.find_wider(start3, start2, matchlimit, m2.len);
                        start3 -= m3.back;
                    } else {
                        start3 = 0;
                        m3 = Match::default();
                    }

                    if m3.len <= m2.len {
                        // No better match: encode m1 and m2.
                        if start2 < ip + m1.len {
                            m1.len = start2 - ip;
                        }
                        out.sequence(src, &mut ip, &mut anchor, m1.len, m1.off);
                        ip = start2;
                        out.sequence(src, &mut ip, &mut anchor, m2.len, m2.off);
                        continue 'main;
                    }

                    if start3 < ip + m1.len + 3 {
                        // Not enough space for match 2: remove it.
                        if start3 >= ip + m1.len {
                            // Can write m1 now; m2 is dropped and m3 becomes m1.
                            if start2 < ip + m1.len {
                                let correction = ip + m1.len - start2;
                                start2 += correction;
                                m2.len -= correction;
                                if m2.len < MINMATCH {
                                    start2 = start3;
                                    m2 = m3;
                                }
                            }
                            out.sequence(src, &mut ip, &mut anchor, m1.len, m1.off);
                            ip = start3;
                            m1 = m3;
                            start0 = start2;
                            m0 = m2;
                            continue 'search2;
                        }
                        start2 = start3;
                        m2 = m3;
                        continue 'search3;
                    }

                    // Three ascending matches: write m1, trimmed to end where m2 starts.
                    if start2 < ip + m1.len {
                        if start2 - ip < OPTIMAL_ML {
                            if m1.len > OPTIMAL_ML {
                                m1.len = OPTIMAL_ML;
                            }
                            if ip + m1.len > start2 + m2.len - MINMATCH {
                                m1.len = start2 - ip + m2.len - MINMATCH;
                            }
                            if m1.len > start2 - ip {
                                let correction = m1.len - (start2 - ip);
                                start2 += correction;
                                m2.len -= correction;
                            }
                        } else {
                            m1.len = start2 - ip;
                        }
                    }
                    out.sequence(src, &mut ip, &mut anchor, m1.len, m1.off);
                    // m2 becomes m1, m3 becomes m2; find a new m3.
                    ip = start2;
                    m1 = m2;
                    start2 = start3;
                    m2 = m3;
                }
            }
        }
        anchor
    }
}

/// Writes sequences into the reserved spare capacity of the output `Vec`.
struct Writer {
    op: *mut u8,
}

impl Writer {
    #[inline(always)]
    fn byte(&mut self, b: u8) {
        // SAFETY: the output never exceeds compress_bound(n), which was reserved.
        unsafe {
            self.op.write(b);
            self.op = self.op.add(1);
        }
    }

    /// A length continuation (`len >= 15` already in the token nibble).
    #[inline(always)]
    fn len_rest(&mut self, mut rest: usize) {
        while rest >= 255 {
            self.byte(255);
            rest -= 255;
        }
        self.byte(rest as u8);
    }

    #[inline(always)]
    fn literals(&mut self, lits: &[u8]) {
        // SAFETY: as `byte`.
        unsafe {
            std::ptr::copy_nonoverlapping(lits.as_ptr(), self.op, lits.len());
            self.op = self.op.add(lits.len());
        }
    }

    /// One sequence: literals `src[anchor..ip]`, then a match of `len` at `off`; moves `ip` past
    /// the match and `anchor` to it.
    #[inline(always)]
    fn sequence(&mut self, src: &[u8], ip: &mut usize, anchor: &mut usize, len: usize, off: usize) {
        assert!(len >= MINMATCH && (1..=MAX_DISTANCE).contains(&off));
        debug_assert!(*ip + len + LASTLITERALS <= src.len());
        let lit = *ip - *anchor;
        let ml = len - MINMATCH;
        self.byte(((lit.min(RUN_MASK) as u8) << ML_BITS) | ml.min(ML_MASK) as u8);
        if lit >= RUN_MASK {
            self.len_rest(lit - RUN_MASK);
        }
        self.literals(&src[*anchor..*ip]);
        self.byte(off as u8);
        self.byte((off >> 8) as u8);
        if ml >= ML_MASK {
            self.len_rest(ml - ML_MASK);
        }
        *ip += len;
        *anchor = *ip;
    }

    /// The final sequence: only literals.
    fn last_literals(&mut self, lits: &[u8]) {
        let lit = lits.len();
        self.byte((lit.min(RUN_MASK) as u8) << ML_BITS);
        if lit >= RUN_MASK {
            self.len_rest(lit - RUN_MASK);
        }
        self.literals(lits);
    }
}

/// Round trips through liblz4's decoder, on awkward inputs and dictionaries (a small
/// deterministic fuzzer).
#[cfg(test)]
mod tests;
