//! docstore-core: an immutable, memory-mapped store of lz4-compressed documents with typed
//! fields, a sorted key index and O(1) access by position. No Python here: the bindings in
//! `rust/python` are a thin layer over this crate. The on-disk format is in docs/format.md.

pub mod codec;
pub mod collection;
pub mod columns;
mod dictionary;
pub mod error;
pub mod format;
mod keys;
pub mod publish;
pub mod repeats;
pub mod runtime;
pub mod storage;
mod store;
mod writer;

pub use collection::{Collection, Located};
pub use columns::{Column, Columns};
pub use error::{Error, Result};
pub use format::record::Value;
pub use format::schema::{ElemType, Field, FieldType, Schema, Shape};
pub use memmap2::Mmap;
pub use storage::{RemoteOptions, StoreFile};
pub use store::{DataAccess, RecordBatch, Store};
pub use writer::{Summary, Writer, WriterOptions, MAX_DOCS};
