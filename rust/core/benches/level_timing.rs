//! Compression speed, size and decoding speed of every lz4 level on an existing store's records,
//! one core, without Python (the trade-off behind the default level):
//! `cargo bench -p docstore-core --bench level_timing -- STORE`.

use docstore_core::codec::{self, Compressor};
use docstore_core::Store;
use std::time::Instant;

fn main() {
    // `cargo bench` passes `--bench` before the arguments given after `--`
    let path = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with("--"))
        .expect("usage: level_timing STORE");
    let store = Store::open(&path).expect("cannot open the store");
    let n = store.len().min(300_000);
    let raws: Vec<Vec<u8>> = (0..n)
        .map(|p| store.record(p).expect("readable record").into_owned())
        .collect();
    let total: usize = raws.iter().map(Vec::len).sum();
    let dict = store.dictionary();
    for level in [0, 1, 3, 4, 6, 9, 12] {
        let compressor = Compressor::new(level, dict).expect("valid level");
        let start = Instant::now();
        let blobs: Vec<Vec<u8>> = raws
            .iter()
            .map(|raw| {
                let mut blob = Vec::new();
                compressor.compress(raw, &mut blob);
                blob
            })
            .collect();
        let compress = start.elapsed().as_secs_f64();
        let stored: usize = blobs.iter().map(Vec::len).sum();
        let start = Instant::now();
        let mut decoded = 0;
        for _ in 0..3 {
            for blob in &blobs {
                decoded += codec::decompress_with(blob, dict, 1, <[u8]>::len).expect("decodes");
            }
        }
        let decode = start.elapsed().as_secs_f64();
        println!(
            "level {level:2}: compress {:4.0} MB/s, {:.3}x raw (records only), decode {:4.0} MB/s",
            total as f64 / compress / 1e6,
            stored as f64 / total as f64,
            decoded as f64 / decode / 1e6
        );
    }
}
