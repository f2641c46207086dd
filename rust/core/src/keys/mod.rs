//! The key index: every document's key, sorted, found by key and by position.
//! (Module doc completed below, once the parts have moved here.)

pub mod entry;
pub(crate) mod merge;
pub(crate) mod sort;
