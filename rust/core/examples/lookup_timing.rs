//! Times raw lookups on an existing store: `cargo run --release --example lookup_timing -- STORE`.
use docstore_core::Store;
use std::time::Instant;

fn main() {
    let path = std::env::args().nth(1).expect("usage: lookup_timing STORE");
    let store = Store::open(&path).unwrap();
    let n = store.len();
    let mut x = 12345u64;
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
    for round in 0..2 {
        let t = Instant::now();
        let found = keys
            .iter()
            .filter(|k| store.position(k.as_bytes()).unwrap().is_some())
            .count();
        let search = t.elapsed().as_nanos() as f64 / keys.len() as f64;
        let t = Instant::now();
        let bytes: usize = positions
            .iter()
            .map(|&p| store.record(p).unwrap().len())
            .sum();
        let decode = t.elapsed().as_nanos() as f64 / keys.len() as f64;
        let t = Instant::now();
        let kl: usize = positions
            .iter()
            .map(|&p| store.key_at(p).unwrap().len())
            .sum();
        let key_at = t.elapsed().as_nanos() as f64 / keys.len() as f64;
        let t = Instant::now();
        let bl: usize = positions
            .iter()
            .map(|&p| store.blob(p).unwrap()[0] as usize)
            .sum();
        let blob = t.elapsed().as_nanos() as f64 / keys.len() as f64;
        let b0 = store.blob(positions[0]).unwrap();
        let t = Instant::now();
        let hot: usize = (0..200_000)
            .map(|_| {
                docstore_core::codec::decompress(b0, store.dictionary())
                    .unwrap()
                    .len()
            })
            .sum();
        let hot = t.elapsed().as_nanos() as f64 / 200_000.0;
        println!(
            "blob touch {blob:.0} ns, hot decompress of one {hot:.0} ns ({bl} {hot}) raw {}",
            b0.len()
        );
        let t = Instant::now();
        let pb: usize = positions
            .iter()
            .map(|&p| {
                docstore_core::codec::decompress_with(
                    store.blob(p).unwrap(),
                    store.dictionary(),
                    7,
                    |r| r.len(),
                )
                .unwrap()
            })
            .sum();
        let pre = t.elapsed().as_nanos() as f64 / keys.len() as f64;
        println!("prefix-mode record {pre:.0} ns {pb}");
        println!("round {round}: position {search:.0} ns, record {decode:.0} ns, key_at {key_at:.0} ns ({found} {bytes} {kl})");
    }
}
