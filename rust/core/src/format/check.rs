//! The per-document check of format v2: four bytes in front of every blob that bind the stored
//! bytes to the document's key, so that every read proves it returns the document asked for.
//!
//! Section checksums only tell `verify()` that something is damaged somewhere; a lookup cannot
//! afford to hash a whole section. One flipped bit in the key index or the doc offsets used to make
//! a lookup return another document without a word. With the key in the check, a lookup by id
//! hashes the id it was asked for with the blob it found: a wrong position, a shifted offset or a
//! damaged blob all fail it. xxh3 of a few hundred bytes costs ~2% of a lookup.
//!
//! Format v3 binds the document's position too: a lookup by key there takes the blob's location
//! from the key index entry, not from the doc offsets of the entry's position, so the check is
//! what proves that position (a damaged one fails it instead of being handed out).

use crate::error::{Error, Result};
use xxhash_rust::xxh3::xxh3_64;

/// Bytes of the check in front of each blob (u32, little-endian).
pub const CHECK_LEN: usize = 4;

/// The check of a document whose key (and position) hash to `key_hash` (`doc_hash`) and whose
/// blob, check excluded, is `body`: the low 32 bits of `key_hash` XOR xxh3-64(body). Not xxh3 seeded
/// with the key's hash: for inputs over 240 bytes a seed makes xxh3 derive a 192-byte secret on
/// every call, which measured +8% on a hot `store[id]`.
pub fn doc_check(key_hash: u64, body: &[u8]) -> u32 {
    (key_hash ^ xxh3_64(body)) as u32
}

/// The hash of `key` that its check holds: hashed once per document by the writer, once per lookup by a reader.
pub fn key_hash(key: &[u8]) -> u64 {
    xxh3_64(key)
}

/// What the check of the document `key` at `pos` holds besides its body: the key's hash, XOR
/// (format v3, `binds_position`) xxh3-64 of the position as 8 little-endian bytes.
pub fn doc_hash(key_hash: u64, pos: u64, binds_position: bool) -> u64 {
    match binds_position {
        true => key_hash ^ xxh3_64(&pos.to_le_bytes()),
        false => key_hash,
    }
}

/// Appends `check ‖ body` for a blob that `put_body` appends to `out`.
pub fn put_checked(key_hash: u64, out: &mut Vec<u8>, put_body: impl FnOnce(&mut Vec<u8>)) {
    let start = out.len();
    out.extend_from_slice(&[0; CHECK_LEN]);
    put_body(out);
    let check = doc_check(key_hash, &out[start + CHECK_LEN..]);
    out[start..start + CHECK_LEN].copy_from_slice(&check.to_le_bytes());
}

/// The body of a checked `blob` once its check holds for `key` (and, `binds_position`, `pos`);
/// `CorruptStoreError` naming the key and position otherwise.
pub fn checked_body<'a>(
    blob: &'a [u8],
    key: &[u8],
    pos: u64,
    binds_position: bool,
) -> Result<&'a [u8]> {
    let fail = |what: &str| {
        Error::corrupt(format!(
            "document {:?} at position {pos} {what}: the store is damaged (run verify())",
            String::from_utf8_lossy(key)
        ))
    };
    if blob.len() <= CHECK_LEN {
        return Err(fail("is shorter than its check"));
    }
    let (stored, body) = blob.split_at(CHECK_LEN);
    let stored = u32::from_le_bytes(stored.try_into().expect("CHECK_LEN bytes"));
    if doc_check(doc_hash(key_hash(key), pos, binds_position), body) != stored {
        return Err(fail("fails its check"));
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binds_the_key_and_every_byte() {
        let mut blob = Vec::new();
        put_checked(key_hash(b"doc1"), &mut blob, |out| {
            out.extend_from_slice(b"\x0ahello")
        });
        assert_eq!(
            checked_body(&blob, b"doc1", 0, false).unwrap(),
            b"\x0ahello"
        );
        assert!(
            checked_body(&blob, b"doc2", 0, false).is_err(),
            "another key"
        );
        for i in 0..blob.len() {
            for bit in 0..8 {
                let mut bad = blob.clone();
                bad[i] ^= 1 << bit;
                assert!(
                    checked_body(&bad, b"doc1", 0, false).is_err(),
                    "flip at {i}.{bit}"
                );
            }
        }
        assert!(checked_body(&blob[..CHECK_LEN], b"doc1", 0, false).is_err());
        assert!(checked_body(&blob[1..], b"doc1", 0, false).is_err());
    }

    #[test]
    fn binds_the_position_from_v3() {
        let mut blob = Vec::new();
        put_checked(doc_hash(key_hash(b"doc1"), 7, true), &mut blob, |out| {
            out.push(0)
        });
        assert!(checked_body(&blob, b"doc1", 7, true).is_ok());
        assert!(
            checked_body(&blob, b"doc1", 6, true).is_err(),
            "another position"
        );
        assert!(
            checked_body(&blob, b"doc1", 7, false).is_err(),
            "a v2 check"
        );
    }

    #[test]
    fn is_the_documented_hash() {
        // docs/format.md §6.3: low 32 bits of xxh3-64(key) ^ xxh3-64(body), and from v3
        // ^ xxh3-64(position as u64 LE).
        let body = b"\x00";
        let expected = (xxh3_64(b"k") ^ xxh3_64(body)) & 0xffff_ffff;
        assert_eq!(u64::from(doc_check(key_hash(b"k"), body)), expected);
        let expected = (xxh3_64(b"k") ^ xxh3_64(body) ^ xxh3_64(&5u64.to_le_bytes())) & 0xffff_ffff;
        assert_eq!(
            u64::from(doc_check(doc_hash(key_hash(b"k"), 5, true), body)),
            expected
        );
    }
}
