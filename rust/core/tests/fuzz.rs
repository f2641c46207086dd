//! The fuzz targets' harness (`rust/core/fuzz/`) on stable Rust: deterministic mutations of
//! small stores, checksums resealed, every read the API offers; the compression seeds at every
//! level. libFuzzer explores further (`rust/core/fuzz/README.md`); this runs in every
//! `cargo test` and replays the inputs it found.

#[path = "../fuzz/harness.rs"]
mod harness;

#[path = "common/rng.rs"]
mod rng;
use rng::Rng;

/// Numbers that sit on boundaries: lengths, counts and offsets set to these find off-by-ones.
const INTERESTING: [u64; 10] = [
    0,
    1,
    7,
    8,
    255,
    4096,
    u32::MAX as u64,
    u32::MAX as u64 + 1,
    i64::MAX as u64,
    u64::MAX,
];

/// Changes `file` in one of the ways libFuzzer's mutators do, favouring the header (512 bytes)
/// and the index sections, where one changed number reaches furthest.
fn mutate(rng: &mut Rng, file: &mut Vec<u8>) {
    let at = |rng: &mut Rng, len: usize| {
        if rng.below(3) == 0 {
            rng.below(len.min(512))
        } else {
            rng.below(len)
        }
    };
    match rng.below(6) {
        0 => {
            let i = at(rng, file.len());
            file[i] ^= 1 << rng.below(8);
        }
        1 => {
            let i = at(rng, file.len());
            file[i] = rng.next() as u8;
        }
        2 | 3 if file.len() >= 8 => {
            let width = if rng.below(2) == 0 { 4 } else { 8 };
            let i = at(rng, file.len().saturating_sub(width));
            let value = if rng.below(2) == 0 {
                INTERESTING[rng.below(INTERESTING.len())]
            } else {
                rng.next() % (file.len() as u64 * 2)
            };
            file[i..i + width].copy_from_slice(&value.to_le_bytes()[..width]);
        }
        4 => {
            let len = rng.below(file.len() + 1);
            file.truncate(len);
        }
        2 | 3 => {}
        _ => {
            let (from, to) = (rng.below(file.len()), rng.below(file.len()));
            let len = rng.below(64).min(file.len() - from).min(file.len() - to);
            file.copy_within(from..from + len, to);
        }
    }
}

#[test]
fn mutated_stores_with_valid_checksums_are_errors_or_consistent_never_crashes() {
    let dir = tempfile::tempdir().unwrap();
    let seeds = harness::seed_stores(dir.path());
    for seed in &seeds {
        assert_eq!(harness::fuzz_store(seed), harness::Reached::Verified);
    }
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut reached = std::collections::BTreeMap::new();
    for _ in 0..RUNS {
        let mut file = seeds[rng.below(seeds.len())].clone();
        for _ in 0..1 + rng.below(4) {
            if file.is_empty() {
                break;
            }
            mutate(&mut rng, &mut file);
        }
        *reached.entry(harness::fuzz_store(&file)).or_insert(0) += 1;
    }
    // The mutations must get past `open` (else they test only its first checks), and some must
    // leave a store that still verifies (the changed bytes were padding or equal values).
    println!("{reached:?}");
    assert!(reached[&harness::Reached::Opened] > RUNS / 4, "{reached:?}");
    assert!(
        reached[&harness::Reached::Verified] > RUNS / 100,
        "{reached:?}"
    );
}

const RUNS: usize = 30_000;

#[test]
fn documents_compress_and_decode_back_at_every_level() {
    for input in harness::seed_compress_inputs() {
        for level in 0..=12 {
            let mut input = input.clone();
            input[0] = level;
            harness::fuzz_compress(&input);
        }
    }
}

#[test]
fn inputs_the_fuzzer_found_stay_fixed() {
    replay("store", |bytes| {
        harness::fuzz_store(bytes);
    });
    replay("compress", harness::fuzz_compress);
}

/// Runs `target`'s harness on every input kept in `fuzz/regressions/<target>/`.
fn replay(target: &str, run: impl Fn(&[u8])) {
    let found = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/regressions");
    // A target with nothing found yet has no folder (git keeps no empty ones).
    let Ok(entries) = std::fs::read_dir(found.join(target)) else {
        return;
    };
    for entry in entries {
        run(&std::fs::read(entry.unwrap().path()).unwrap());
    }
}
