//! Remote stores (see `file`).

mod file;
mod rent;

pub use file::*;
