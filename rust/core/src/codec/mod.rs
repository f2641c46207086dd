//! Per-document lz4 compression against a dictionary shared by the whole store.
//!
//! Each document is one independent lz4 block, so one document decodes without its neighbours.
//! Short documents barely compress alone; a dictionary trained on the corpus gives every block
//! a 64 KiB history to match against, and lz4's HC mode finds the longer matches. Decoding is the
//! same plain `LZ4_decompress_safe_usingDict` whatever level wrote the block.
//!
//! At the default level (3) with a dictionary, blocks come from docstore's own encoder
//! (`encoder`): lz4 HC's level-3 parse over a read-only index of the dictionary, ~1.35x faster
//! than liblz4's at the same size. Every block it writes is decoded and compared before it is
//! kept; liblz4 compresses the document instead should one ever not round-trip.
//!
//! A stored blob is `varint(raw_len << 1 | compressed)` followed by the lz4 block, or by the raw
//! record when compression would not shrink it.

use crate::error::{try_reserve, Error, Result};
use crate::format::varint;
use encoder::{DictIndex, Encoder};
use std::borrow::Cow;
use std::cell::RefCell;
use std::os::raw::{c_char, c_int};
use std::ptr::NonNull;
use std::sync::Arc;
use xxhash_rust::xxh3::xxh3_64;

// liblz4 is compiled and linked by lz4-sys; we declare the (stable, v1.10) streaming functions
// we need ourselves because lz4-sys does not bind them.
use lz4_sys as _;

/// The liblz4 functions docstore calls. Public (hidden) for `benches/floors.rs`, whose floors
/// must call liblz4 itself, not this codec.
#[doc(hidden)]
#[allow(non_snake_case)]
pub mod ffi {
    use std::os::raw::{c_char, c_int};

    #[repr(C)]
    pub struct StreamHC {
        _opaque: [u8; 0],
    }
    #[repr(C)]
    pub struct Stream {
        _opaque: [u8; 0],
    }

    extern "C" {
        pub fn LZ4_createStreamHC() -> *mut StreamHC;
        pub fn LZ4_freeStreamHC(stream: *mut StreamHC) -> c_int;
        pub fn LZ4_resetStreamHC_fast(stream: *mut StreamHC, level: c_int);
        pub fn LZ4_loadDictHC(stream: *mut StreamHC, dict: *const c_char, size: c_int) -> c_int;
        pub fn LZ4_attach_HC_dictionary(work: *mut StreamHC, dict: *const StreamHC);
        pub fn LZ4_compress_HC_continue(
            stream: *mut StreamHC,
            src: *const c_char,
            dst: *mut c_char,
            src_size: c_int,
            dst_capacity: c_int,
        ) -> c_int;

        pub fn LZ4_createStream() -> *mut Stream;
        pub fn LZ4_freeStream(stream: *mut Stream) -> c_int;
        pub fn LZ4_resetStream_fast(stream: *mut Stream);
        pub fn LZ4_loadDict(stream: *mut Stream, dict: *const c_char, size: c_int) -> c_int;
        pub fn LZ4_attach_dictionary(work: *mut Stream, dict: *const Stream);
        pub fn LZ4_compress_fast_continue(
            stream: *mut Stream,
            src: *const c_char,
            dst: *mut c_char,
            src_size: c_int,
            dst_capacity: c_int,
            acceleration: c_int,
        ) -> c_int;

        pub fn LZ4_compressBound(input_size: c_int) -> c_int;
        pub fn LZ4_decompress_safe_usingDict(
            src: *const c_char,
            dst: *mut c_char,
            src_size: c_int,
            dst_capacity: c_int,
            dict: *const c_char,
            dict_size: c_int,
        ) -> c_int;
    }
}

/// lz4's largest block input (LZ4_MAX_INPUT_SIZE); larger records are stored uncompressed.
const MAX_INPUT: usize = 0x7E00_0000;
/// The longest dictionary: a limit of the format (its header check refuses longer), kept there.
pub use crate::format::MAX_DICT_SIZE;
/// Highest lz4 HC level.
pub const MAX_LEVEL: i32 = 12;
/// The level that stores every record as it is: the largest files, and lookups that decode
/// nothing (a record is read straight from the mapped file).
pub const LEVEL_NONE: i32 = -1;
/// The level at which docstore's encoder replaces liblz4's (it ports HC's level-3 parse).
const ENCODER_LEVEL: i32 = 3;
/// The most output room a thread keeps in its decode buffer (beyond the dictionary).
const KEEP_DECODE_BYTES: usize = 16 << 20;
/// lz4's largest expansion: each byte of a block yields at most this many decoded bytes. A literal
/// byte yields itself; a match costs a token and a 2-byte offset for at most 4 + 15 bytes, and
/// each length byte after them (255 meaning "and more") adds at most 255: so a match of `3 + k`
/// bytes yields at most `18 + 255 k < 255 (3 + k)`. Extra literal-length bytes yield nothing.
const MAX_EXPANSION: u64 = 255;
/// A compressed blob that claims more than this is parsed before its output is allocated: its
/// lz4 sequences must add up to exactly the length it claims (`block_len`).
const SCAN_CLAIMS_OVER: usize = 1 << 20;

mod compress;
mod decode;
pub(crate) mod encoder;
#[cfg(test)]
mod tests;

pub use compress::Compressor;
pub(crate) use decode::release_if_huge;
pub use decode::{decompress, decompress_with};

/// Training reads at most this much of the sample: its time and memory (~6 bytes per sample
/// byte) grow with it, and more than the default first batch (4 MiB) adds little.
pub const MAX_TRAINING_BYTES: usize = 8 << 20;

/// The dictionary for records like `records` (a sample of the corpus): at most `size` bytes
/// (and 64 KiB, all lz4 can use), trained by `dictionary::train` on the first 8 MiB.
/// Deterministic.
pub fn dictionary_for<'a>(records: impl Iterator<Item = &'a [u8]> + Clone, size: usize) -> Vec<u8> {
    let mut budget = MAX_TRAINING_BYTES;
    let records = records.map_while(move |record| {
        let take = record.len().min(budget);
        budget -= take;
        (take > 0 || record.is_empty()).then(|| &record[..take])
    });
    let total: usize = records.clone().map(<[u8]>::len).sum();
    // A dictionary larger than a quarter of the data costs more than it saves.
    let size = size.min(MAX_DICT_SIZE).min(total / 4);
    if size == 0 {
        return Vec::new();
    }
    crate::dictionary::train(records, size)
}

/// Bytes of `docs` compressed one by one at `level` against `dict` (for tests).
#[cfg(test)]
pub(crate) fn compressed_size(docs: &[Vec<u8>], level: i32, dict: &[u8]) -> usize {
    let compressor = Compressor::new(level, dict).unwrap();
    docs.iter()
        .map(|doc| {
            let mut blob = Vec::new();
            compressor.compress(doc, &mut blob);
            blob.len()
        })
        .sum()
}
