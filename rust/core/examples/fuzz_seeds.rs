//! Writes the fuzz targets' seed corpus (small stores of every field type):
//! `cargo run --release -p docstore-core --example fuzz_seeds -- rust/core/fuzz/corpus/store`.

#[path = "../fuzz/harness.rs"]
mod harness;

fn main() {
    let out = std::path::PathBuf::from(
        std::env::args()
            .nth(1)
            .expect("usage: fuzz_seeds OUTPUT_DIR"),
    );
    std::fs::create_dir_all(&out).expect("cannot create the output directory");
    let scratch = tempfile::tempdir().expect("cannot create a scratch directory");
    for (i, store) in harness::seed_stores(scratch.path()).iter().enumerate() {
        std::fs::write(out.join(format!("seed-{i}")), store).expect("cannot write a seed");
    }
}
