//! The physical floors of docstore's benchmark figures, measured on a store's own bytes: one
//! thread, hot cache, no Python. `benches/test_floors.py` (group `cmp:floors`) runs it in the same
//! pytest run as the figures it judges, and `benches/report.py` sets each figure beside its floor.
//!
//! ```text
//! cargo bench -p docstore-core --bench floors -- STORE SINGLE_KEYS BATCH_KEYS [BUILD_DOCS]
//! ```
//!
//! SINGLE_KEYS and BATCH_KEYS are files of ids, one per line (the ids the `get` and `get_many`
//! benchmarks look up). Prints one JSON object; times are nanoseconds per document in the fastest
//! of the timed rounds over the same documents:
//!
//! * `search_ns`: the key index search alone (`Store::locate`: no check, no decode);
//! * `decode_ns`: liblz4 decoding the same documents' payloads (after the check and the varint
//!   header, docs/format.md §6.1) with the store's dictionary, as fast as liblz4 goes: into a
//!   buffer right behind a copy of the dictionary (its prefix mode), no allocation;
//! * `check_ns`: the format v2 check of the same blobs (xxh3 of the key and of the body);
//! * `core_get_ns`: docstore's core doing the whole lookup (search, check, decode), for reference;
//! * `batch_search_ns`, `batch_decode_ns`: the same over the batch's ids;
//! * `hc_ns`: liblz4 compressing the first BUILD_DOCS raw records (default 20,000) at the store's
//!   level against its dictionary (HC for levels 1-12, fast for 0), attached as liblz4 documents;
//!   `encoder_ns`: docstore's own compressor on the same records, for reference.
//!
//! liblz4 is called directly (through the symbols lz4-sys links), not through docstore's codec:
//! a floor must not inherit docstore's own overheads.

use docstore_core::format::check;
use docstore_core::{codec, Store, StoreFile};
use std::hint::black_box;
use std::os::raw::{c_char, c_int};
use std::time::Instant;

use codec::ffi;

/// Nanoseconds per item of `f` over `items` items in its fastest round: rounds until `MIN_TIME`
/// has passed (at least 7, at most 1000), the first round a warm-up. A floor is a best case, and
/// on a shared machine the fastest round is the one other work disturbed least.
fn time_per_item(items: usize, mut f: impl FnMut()) -> f64 {
    const MIN_TIME: f64 = 0.5;
    f();
    let mut rounds = Vec::new();
    let start = Instant::now();
    while rounds.len() < 7 || (start.elapsed().as_secs_f64() < MIN_TIME && rounds.len() < 1000) {
        let t = Instant::now();
        f();
        rounds.push(t.elapsed().as_nanos() as f64 / items.max(1) as f64);
    }
    rounds.into_iter().fold(f64::INFINITY, f64::min)
}

/// A stored document: its lz4 payload (or raw record) and decoded length (docs/format.md §6.1).
struct Payload<'a> {
    bytes: &'a [u8],
    raw_len: usize,
    compressed: bool,
}

fn payload(blob: &[u8], checked: bool) -> Payload<'_> {
    let body = if checked {
        &blob[check::CHECK_LEN..]
    } else {
        blob
    };
    let (mut header, mut shift, mut i) = (0u64, 0, 0);
    loop {
        let b = body[i];
        header |= u64::from(b & 0x7f) << shift;
        i += 1;
        if b < 0x80 {
            break;
        }
        shift += 7;
    }
    Payload {
        bytes: &body[i..],
        raw_len: (header >> 1) as usize,
        compressed: header & 1 == 1,
    }
}

/// liblz4 decode of every payload into `buf` = `dictionary ‖ output`; the decoded bytes.
fn decode_all(payloads: &[Payload], dict_len: usize, buf: &mut [u8]) -> usize {
    let mut total = 0;
    let (dict, out) = buf.split_at_mut(dict_len);
    for p in payloads {
        if !p.compressed {
            out[..p.raw_len].copy_from_slice(p.bytes);
            total += p.raw_len;
            continue;
        }
        // SAFETY: `out` has room for the largest raw_len (sized by the caller); the dictionary
        // lies right before it, in the same buffer.
        let n = unsafe {
            ffi::LZ4_decompress_safe_usingDict(
                p.bytes.as_ptr().cast::<c_char>(),
                out.as_mut_ptr().cast::<c_char>(),
                p.bytes.len() as c_int,
                p.raw_len as c_int,
                dict.as_ptr().cast::<c_char>(),
                dict.len() as c_int,
            )
        };
        assert_eq!(n as usize, p.raw_len, "liblz4 could not decode a document");
        total += p.raw_len;
    }
    total
}

fn read_keys(path: &str) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {path}: {e}"))
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

struct Lookups<'a> {
    keys: Vec<String>,
    positions: Vec<u64>,
    payloads: Vec<Payload<'a>>,
    raw_bytes: usize,
}

fn lookups<'a>(store: &'a Store<StoreFile>, keys: Vec<String>) -> Lookups<'a> {
    let positions: Vec<u64> = keys
        .iter()
        .map(|k| {
            store
                .position(k.as_bytes())
                .expect("damaged store")
                .unwrap_or_else(|| panic!("{k:?} is not in the store"))
        })
        .collect();
    let payloads: Vec<Payload> = positions
        .iter()
        .map(|&p| payload(store.blob(p).expect("damaged store"), store.checked()))
        .collect();
    let raw_bytes = payloads.iter().map(|p| p.raw_len).sum();
    Lookups {
        keys,
        positions,
        payloads,
        raw_bytes,
    }
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--")) // `cargo bench` passes --bench
        .collect();
    if args.len() < 3 {
        eprintln!("usage: floors STORE SINGLE_KEYS BATCH_KEYS [BUILD_DOCS]");
        std::process::exit(2);
    }
    let store = Store::open(&args[0]).expect("cannot open the store");
    let build_docs: u64 = args
        .get(3)
        .map_or(20_000, |s| s.parse().expect("BUILD_DOCS"));
    let dict = store.dictionary();
    let level = store.header().level;
    let single = lookups(&store, read_keys(&args[1]));
    let batch = lookups(&store, read_keys(&args[2]));
    let widest = (single.payloads.iter().chain(&batch.payloads))
        .map(|p| p.raw_len)
        .max()
        .unwrap_or(0);
    let mut buf = vec![0u8; dict.len() + widest];
    buf[..dict.len()].copy_from_slice(dict);

    let search = |l: &Lookups| {
        time_per_item(l.keys.len(), || {
            for k in &l.keys {
                black_box(store.locate(black_box(k.as_bytes())).unwrap());
            }
        })
    };
    let search_ns = search(&single);
    let batch_search_ns = search(&batch);
    let decode_ns = time_per_item(single.payloads.len(), || {
        black_box(decode_all(&single.payloads, dict.len(), &mut buf));
    });
    let batch_decode_ns = time_per_item(batch.payloads.len(), || {
        black_box(decode_all(&batch.payloads, dict.len(), &mut buf));
    });
    let check_ns = if store.checked() {
        time_per_item(single.keys.len(), || {
            for (k, &p) in single.keys.iter().zip(&single.positions) {
                let blob = store.blob(p).unwrap();
                let v3 = store.header().binds_position();
                black_box(check::checked_body(blob, k.as_bytes(), p, v3).unwrap());
            }
        })
    } else {
        0.0
    };
    let core_get_ns = time_per_item(single.keys.len(), || {
        for k in &single.keys {
            let pos = store.locate(k.as_bytes()).unwrap().unwrap();
            black_box(
                store
                    .with_record_of(pos, k.as_bytes(), |r| r.len())
                    .unwrap(),
            );
        }
    });

    // Build: the store's own raw records, compressed as docstore would store them.
    let n = store.len().min(build_docs);
    let records: Vec<Vec<u8>> = (0..n)
        .map(|p| store.record(p).expect("damaged store").into_owned())
        .collect();
    let build_raw: usize = records.iter().map(Vec::len).sum();
    let widest_raw = records.iter().map(Vec::len).max().unwrap_or(0);
    // SAFETY: bounded by the largest record, which the store held as one lz4 block.
    let bound = unsafe { ffi::LZ4_compressBound(widest_raw as c_int) } as usize;
    let mut out = vec![0u8; bound.max(1)];
    let (mut hc_ns, mut hc_bytes) = (None, 0usize);
    if level != 0xFF {
        // SAFETY: the streams are created here and used on this thread only; the dictionary
        // streams outlive every compression that attaches them; `out` holds `bound` bytes.
        unsafe {
            let (dict_hc, work_hc) = (ffi::LZ4_createStreamHC(), ffi::LZ4_createStreamHC());
            let (dict_fast, work_fast) = (ffi::LZ4_createStream(), ffi::LZ4_createStream());
            assert!(
                !dict_hc.is_null()
                    && !work_hc.is_null()
                    && !dict_fast.is_null()
                    && !work_fast.is_null()
            );
            ffi::LZ4_resetStreamHC_fast(dict_hc, c_int::from(level.max(1)));
            ffi::LZ4_loadDictHC(dict_hc, dict.as_ptr().cast(), dict.len() as c_int);
            ffi::LZ4_loadDict(dict_fast, dict.as_ptr().cast(), dict.len() as c_int);
            let mut compress = |raw: &[u8]| -> usize {
                let (src, dst) = (
                    raw.as_ptr().cast::<c_char>(),
                    out.as_mut_ptr().cast::<c_char>(),
                );
                let written = if level == 0 {
                    ffi::LZ4_resetStream_fast(work_fast);
                    if !dict.is_empty() {
                        ffi::LZ4_attach_dictionary(work_fast, dict_fast);
                    }
                    ffi::LZ4_compress_fast_continue(
                        work_fast,
                        src,
                        dst,
                        raw.len() as c_int,
                        bound as c_int,
                        1,
                    )
                } else {
                    ffi::LZ4_resetStreamHC_fast(work_hc, c_int::from(level));
                    if !dict.is_empty() {
                        ffi::LZ4_attach_HC_dictionary(work_hc, dict_hc);
                    }
                    ffi::LZ4_compress_HC_continue(
                        work_hc,
                        src,
                        dst,
                        raw.len() as c_int,
                        bound as c_int,
                    )
                };
                assert!(written > 0, "liblz4 could not compress a record");
                written as usize
            };
            hc_bytes = records.iter().map(|r| compress(r)).sum();
            hc_ns = Some(time_per_item(records.len(), || {
                for r in &records {
                    black_box(compress(r));
                }
            }));
        }
    }
    let compressor =
        codec::Compressor::new(if level == 0xFF { -1 } else { i32::from(level) }, dict)
            .expect("the store's level");
    let mut blob = Vec::new();
    let encoder_ns = time_per_item(records.len(), || {
        for r in &records {
            blob.clear();
            compressor.compress(r, &mut blob);
            black_box(blob.len());
        }
    });

    let opt = |x: Option<f64>| x.map_or("null".to_owned(), |v| format!("{v:.2}"));
    println!(
        "{{\"store_docs\": {}, \"checked\": {}, \"level\": {}, \"dict_bytes\": {}, \
         \"single_docs\": {}, \"single_raw_bytes\": {}, \"search_ns\": {search_ns:.2}, \
         \"decode_ns\": {decode_ns:.2}, \"check_ns\": {check_ns:.2}, \"core_get_ns\": {core_get_ns:.2}, \
         \"batch_docs\": {}, \"batch_raw_bytes\": {}, \"batch_search_ns\": {batch_search_ns:.2}, \
         \"batch_decode_ns\": {batch_decode_ns:.2}, \"build_docs\": {}, \"build_raw_bytes\": {build_raw}, \
         \"hc_ns\": {}, \"hc_compressed_bytes\": {hc_bytes}, \"encoder_ns\": {encoder_ns:.2}}}",
        store.len(),
        store.checked(),
        level,
        dict.len(),
        single.keys.len(),
        single.raw_bytes,
        batch.keys.len(),
        batch.raw_bytes,
        records.len(),
        opt(hc_ns),
    );
}
