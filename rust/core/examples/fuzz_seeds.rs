//! Writes the fuzz targets' seed corpora (small stores of every field type for `store`,
//! English-like documents and dictionaries for `compress`):
//! `cargo run --release -p docstore-core --example fuzz_seeds -- rust/core/fuzz/corpus`.

#[path = "../fuzz/harness.rs"]
mod harness;

use std::path::Path;

fn write_all(dir: &Path, inputs: &[Vec<u8>]) {
    std::fs::create_dir_all(dir).expect("cannot create the corpus directory");
    for (i, input) in inputs.iter().enumerate() {
        std::fs::write(dir.join(format!("seed-{i}")), input).expect("cannot write a seed");
    }
}

fn main() {
    let out = std::path::PathBuf::from(
        std::env::args()
            .nth(1)
            .expect("usage: fuzz_seeds CORPUS_DIR"),
    );
    let scratch = tempfile::tempdir().expect("cannot create a scratch directory");
    write_all(&out.join("store"), &harness::seed_stores(scratch.path()));
    write_all(&out.join("compress"), &harness::seed_compress_inputs());
}
