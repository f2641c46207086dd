//! Times the core's lookups on an existing store, without Python:
//! `cargo bench -p docstore-core --bench lookup_timing -- STORE`.

use docstore_core::Store;
use std::time::Instant;

fn per_op(start: Instant, n: usize) -> f64 {
    start.elapsed().as_nanos() as f64 / n as f64
}

fn main() {
    // `cargo bench` passes `--bench` before the arguments given after `--`
    let path = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with("--"))
        .expect("usage: lookup_timing STORE");
    let store = Store::open(&path).expect("cannot open the store");
    let n = store.len();
    assert!(n > 0, "the store is empty");
    // xorshift: random positions without a dependency.
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let positions: Vec<u64> = (0..200_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        })
        .collect();
    let keys: Vec<String> = positions
        .iter()
        .map(|&p| store.key_at(p).unwrap().to_owned())
        .collect();
    for round in 1..=2 {
        let start = Instant::now();
        let found = keys
            .iter()
            .filter(|k| store.position(k.as_bytes()).unwrap().is_some())
            .count();
        let search = per_op(start, keys.len());
        let start = Instant::now();
        let bytes: usize = positions
            .iter()
            .map(|&p| store.with_record(p, |r| r.len()).unwrap())
            .sum();
        let decode = per_op(start, positions.len());
        let start = Instant::now();
        let key_bytes: usize = positions
            .iter()
            .map(|&p| store.key_at(p).unwrap().len())
            .sum();
        let key_at = per_op(start, positions.len());
        assert_eq!(found, keys.len());
        println!(
            "round {round}: position {search:.0} ns, decode {decode:.0} ns ({} B avg), key_at {key_at:.0} ns ({} B avg)",
            bytes / positions.len(),
            key_bytes / positions.len()
        );
    }
}
