//! The dictionary's training time on an existing store's records (its first 16 MiB, of which
//! training reads 8), its first round and best of ROUNDS, and a hash of the dictionary it trains, which must be the
//! same on any number of threads: `THREADS=N cargo bench -p docstore-core --bench train_timing
//! -- STORE [ROUNDS]` (`THREADS` sets the pool's threads; all cores without it).

use docstore_core::{codec, Store};
use std::time::Instant;

fn main() {
    // `cargo bench` passes `--bench` before the arguments given after `--`
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let path = args.first().expect("usage: train_timing STORE [ROUNDS]");
    let rounds: usize = args
        .get(1)
        .map_or(10, |r| r.parse().expect("ROUNDS is a number"));
    if let Ok(threads) = std::env::var("THREADS") {
        let threads = threads.parse().expect("THREADS is a number");
        docstore_core::runtime::parallel::set_num_threads(threads)
            .expect("a valid number of threads");
    }
    let store = Store::open(path).expect("cannot open the store");
    let raws: Vec<Vec<u8>> = (0..store.len())
        .map(|p| store.record(p).expect("readable record").into_owned())
        .take_while({
            let mut bytes = 0;
            move |r| {
                bytes += r.len();
                bytes < 2 * codec::MAX_TRAINING_BYTES
            }
        })
        .collect();
    // The first round pays for its memory's first touch, as a build in a fresh process does.
    let (mut first, mut best) = (None, f64::INFINITY);
    let mut dict = Vec::new();
    for _ in 0..rounds {
        let start = Instant::now();
        dict = codec::dictionary_for(raws.iter().map(Vec::as_slice), 64 << 10);
        let elapsed = start.elapsed().as_secs_f64();
        first.get_or_insert(elapsed);
        best = best.min(elapsed);
    }
    println!(
        "{} records, dictionary of {} bytes (xxh3 {:016x}): first round {:.2} ms, best of {rounds} {:.2} ms",
        raws.len(),
        dict.len(),
        xxhash_rust::xxh3::xxh3_64(&dict),
        first.unwrap_or(f64::NAN) * 1e3,
        best * 1e3
    );
}
