//! The key index: every document's key, in sorted byte order, found by key and by position
//! (docs/format.md §4.5-4.9, §7). Five sections after the data, one concept per file here:
//!
//! ```text
//! keys         | k0 | k1 | k2 | ... |                  the keys by rank, concatenated
//! key offsets  | 0 | end of k0 | ... | end of all |    count + 1 u64
//! key index    | e0 | e1 | ... | eB-1 | eB | ...      one entry per rank, from a page boundary
//!              \_____ block 0: one page ___/ block 1   B = 4096 / entry size
//!              entry: prefix u64 | position u32 | key len u32 | (v3) blob offset u64 | len u64
//! key fences   | prefix of e0 | of eB | of e2B | ... | one u64 per block: which page holds a key
//! key ranks    | rank of position 0 | of 1 | ... |     count u32, the inverse of the positions
//! ```
//!
//! All five are written by `build`, the entries and fences laid out by `format::key_entry` (the
//! format's, so that the format imports nothing from here); `Store::verify` checks that they
//! agree (docs/format.md §8).
//!
//! - `sort`: a writer's keys, sorted with bounded memory (runs spilled to disk).
//! - `merge`: sorted runs merged: a sort's spilled runs, or a collection's shards when sealed.
//! - `build`: the five sections written from sorted keys, for `Writer::finish_with`.
//! - The search (fences, then one block's prefixes, then whole keys) is still in
//!   `store/search.rs` (`Store::locate`, `locate_many`, `settle`, `search_keys`).

pub(crate) mod build;
pub(crate) mod merge;
pub(crate) mod sort;
