//! One entry of the key index, and the blocks and fences the entries form (docs/format.md
//! §4.7, §4.8).
//!
//! ```text
//!            +0          +8         +12        +16           +24          +32
//! entry r    | prefix u64 | position | key len  | blob offset | blob length |
//!                           u32        u32        u64 (v3)      u64 (v3)
//! ```
//!
//! `prefix` is `key_prefix` of the key's bytes after the prefix all keys share. Entries
//! `B*b .. B*b+B-1` (`B = KEY_INDEX_ALIGN / entry size`: 128 in version 3, 256 before) form
//! block `b`, one page of the file; fence `b` is the prefix of block `b`'s first entry.
//!
//! No dependency on the rest of the format: `format` reads its sizes from here.

/// The key index starts at a multiple of this (a page), so that each block of
/// `KEY_INDEX_ALIGN / entry size` entries is exactly one page: a lookup in a cold cache reads
/// one page of the index.
pub const KEY_INDEX_ALIGN: u64 = 4096;
/// Bytes of a key index entry before version 3: prefix u64, position u32, key length u32.
pub const KEY_ENTRY_V2: usize = 16;
/// Bytes of a key index entry from version 3: the above, then blob offset u64, blob length u64.
pub const KEY_ENTRY_V3: usize = 32;
/// Whether the entry of `rank` starts a block of `block` entries, and so has a fence.
pub fn starts_block(rank: u64, block: u64) -> bool {
    rank.is_multiple_of(block)
}

/// The first 8 bytes of `rest` as a big-endian number, zero-padded: ordering these numbers orders
/// the keys (ties are resolved by comparing whole keys).
pub fn key_prefix(rest: &[u8]) -> u64 {
    let mut bytes = [0u8; 8];
    let n = rest.len().min(8);
    bytes[..n].copy_from_slice(&rest[..n]);
    u64::from_be_bytes(bytes)
}

/// One entry of the key index.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KeyEntry {
    /// `key_prefix` of the key's bytes after the common prefix.
    pub prefix: u64,
    /// Position (insertion index) of the key's document.
    pub position: u32,
    /// Length of the key in bytes.
    pub key_len: u32,
    /// Version 3: where the document's blob lies in the data section (offset, length); zero in
    /// the entries of older versions, which do not hold it.
    pub blob_offset: u64,
    pub blob_len: u64,
}

impl KeyEntry {
    /// The entry's `size` bytes (`KEY_ENTRY_V2` or `KEY_ENTRY_V3`) onto the end of `out`.
    pub fn encode(&self, size: usize, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.prefix.to_le_bytes());
        out.extend_from_slice(&self.position.to_le_bytes());
        out.extend_from_slice(&self.key_len.to_le_bytes());
        if size == KEY_ENTRY_V3 {
            out.extend_from_slice(&self.blob_offset.to_le_bytes());
            out.extend_from_slice(&self.blob_len.to_le_bytes());
        }
    }

    /// The entry of rank `rank` in a key index section of `size`-byte entries.
    pub fn at(index: &[u8], rank: u64, size: usize) -> KeyEntry {
        let at = rank as usize * size;
        let mut entry = KeyEntry {
            prefix: u64_at(index, at),
            position: u32_at(index, at + 8),
            key_len: u32_at(index, at + 12),
            ..KeyEntry::default()
        };
        if size == KEY_ENTRY_V3 {
            entry.blob_offset = u64_at(index, at + 16);
            entry.blob_len = u64_at(index, at + 24);
        }
        entry
    }
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap())
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_at_both_sizes_and_lie_end_to_end() {
        let entries = [
            KeyEntry {
                prefix: u64::MAX - 1,
                position: 7,
                key_len: 3,
                blob_offset: 1 << 40,
                blob_len: 99,
            },
            KeyEntry {
                prefix: 1,
                position: u32::MAX - 1,
                key_len: u32::MAX,
                blob_offset: 0,
                blob_len: u64::MAX,
            },
        ];
        for size in [KEY_ENTRY_V2, KEY_ENTRY_V3] {
            let mut index = Vec::new();
            for entry in &entries {
                entry.encode(size, &mut index);
            }
            assert_eq!(index.len(), 2 * size);
            for (rank, entry) in entries.iter().enumerate() {
                let mut want = *entry;
                if size == KEY_ENTRY_V2 {
                    (want.blob_offset, want.blob_len) = (0, 0); // not held before version 3
                }
                assert_eq!(KeyEntry::at(&index, rank as u64, size), want);
            }
        }
        // The layout of docs/format.md §4.7: struct.pack("<QIIQQ", ...).
        let mut bytes = Vec::new();
        entries[0].encode(KEY_ENTRY_V3, &mut bytes);
        assert_eq!(&bytes[..8], &(u64::MAX - 1).to_le_bytes());
        assert_eq!(&bytes[8..16], &[7, 0, 0, 0, 3, 0, 0, 0]);
        assert_eq!(&bytes[16..24], &(1u64 << 40).to_le_bytes());
    }

    #[test]
    fn prefixes_order_as_their_keys_first_eight_bytes() {
        assert_eq!(key_prefix(b""), 0);
        assert_eq!(key_prefix(b"a"), 0x61 << 56);
        assert_eq!(key_prefix(b"abcdefghXYZ"), key_prefix(b"abcdefgh"));
        let keys: [&[u8]; 6] = [b"", b"\0", b"a", b"a\0b", b"ab", b"\xff"];
        for pair in keys.windows(2) {
            assert!(key_prefix(pair[0]) <= key_prefix(pair[1]), "{pair:?}");
        }
        assert!(starts_block(0, 128) && starts_block(256, 128) && !starts_block(127, 128));
    }
}
