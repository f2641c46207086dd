//! External sort of (key, position) pairs with bounded memory: keys gather in an arena until it
//! holds `limit` bytes, then are sorted and spilled to a run file; the runs are merged at the end
//! (`merge`). Duplicates are found while sorting a run and while merging.

use super::merge::merge;
use crate::error::{Error, Result};
use crate::runtime::parallel;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::PathBuf;

pub struct KeySorter {
    arena: Vec<u8>,
    entries: Vec<Entry>,
    limit: usize,
    dir: PathBuf,
    runs: Vec<PathBuf>,
    /// The first key, cut to the prefix that every key since shares with it: the prefix common to
    /// all keys.
    common: Option<Vec<u8>>,
}

/// A buffered key: where it is in the arena, and its document's position.
#[derive(Clone, Copy)]
struct Entry {
    /// The 8 bytes after the common prefix, big-endian and zero-padded, so that most comparisons
    /// while sorting are one integer comparison instead of a `memcmp` call (set by `sort`).
    head: u64,
    start: u64,
    len: u32,
    position: u32,
}

/// Per-key bookkeeping counted against the limit besides the key bytes.
const ENTRY_COST: usize = std::mem::size_of::<Entry>();

impl KeySorter {
    pub fn new(dir: PathBuf, limit: usize) -> KeySorter {
        KeySorter {
            arena: Vec::new(),
            entries: Vec::new(),
            limit: limit.max(1),
            dir,
            runs: Vec::new(),
            common: None,
        }
    }

    pub fn push(&mut self, key: &[u8], position: u32) -> Result<()> {
        let len =
            u32::try_from(key.len()).map_err(|_| Error::InvalidKey("longer than 4 GiB".into()))?;
        self.entries.push(Entry {
            head: 0,
            start: self.arena.len() as u64,
            len,
            position,
        });
        self.arena.extend_from_slice(key);
        match &mut self.common {
            Some(common) => {
                let shared = common.iter().zip(key).take_while(|(a, b)| a == b).count();
                common.truncate(shared);
            }
            None => self.common = Some(key.to_vec()),
        }
        Ok(())
    }

    /// Length of the prefix shared by all keys pushed so far.
    pub fn common_prefix(&self) -> usize {
        self.common.as_ref().map_or(0, Vec::len)
    }

    pub fn is_full(&self) -> bool {
        self.arena.len() + self.entries.len() * ENTRY_COST >= self.limit
    }

    fn key(&self, entry: &Entry) -> &[u8] {
        &self.arena[entry.start as usize..entry.start as usize + entry.len as usize]
    }

    /// Sorts the buffered keys, failing on the first duplicate among them.
    fn sort(&mut self) -> Result<()> {
        let mut entries = std::mem::take(&mut self.entries);
        let arena = &self.arena;
        // Every buffered key starts with the common prefix: comparisons start after it.
        let skip = self.common_prefix();
        let key = |e: &Entry| &arena[e.start as usize + skip..e.start as usize + e.len as usize];
        for entry in &mut entries {
            let rest = key(entry);
            let mut head = [0u8; 8];
            let n = rest.len().min(8);
            head[..n].copy_from_slice(&rest[..n]);
            entry.head = u64::from_be_bytes(head);
        }
        // Equal heads fall back to the bytes (zero padding makes "a" and "a\0" equal heads).
        let same = |a: &Entry, b: &Entry| a.head == b.head && key(a) == key(b);
        parallel::pool().install(|| {
            use rayon::slice::ParallelSliceMut;
            entries
                .par_sort_unstable_by(|a, b| a.head.cmp(&b.head).then_with(|| key(a).cmp(key(b))));
        });
        if let Some(pair) = entries.windows(2).find(|w| same(&w[0], &w[1])) {
            return Err(Error::DuplicateKey(
                String::from_utf8_lossy(self.key(&pair[0])).into_owned(),
            ));
        }
        self.entries = entries;
        Ok(())
    }

    /// Sorts the buffer and writes it to a run file.
    pub fn spill(&mut self) -> Result<()> {
        if self.entries.is_empty() {
            return Ok(());
        }
        self.sort()?;
        let path = self.dir.join(format!("keys-{}.run", self.runs.len()));
        let mut out = BufWriter::with_capacity(1 << 20, File::create(&path)?);
        for entry in &self.entries {
            out.write_all(&entry.len.to_le_bytes())?;
            out.write_all(self.key(entry))?;
            out.write_all(&entry.position.to_le_bytes())?;
        }
        out.into_inner()
            .map_err(|e| e.into_error())?
            .sync_data()
            .ok();
        self.runs.push(path);
        self.entries.clear();
        self.arena.clear();
        Ok(())
    }

    /// Calls `f(key, position)` for every key in sorted order; fails on a duplicate.
    pub fn finish(mut self, mut f: impl FnMut(&[u8], u32) -> Result<()>) -> Result<()> {
        if self.runs.is_empty() {
            self.sort()?;
            for entry in &self.entries {
                f(self.key(entry), entry.position)?;
            }
            return Ok(());
        }
        self.spill()?;
        let runs = self
            .runs
            .iter()
            .map(|p| {
                let mut reader = BufReader::with_capacity(1 << 20, File::open(p)?);
                Ok(std::iter::from_fn(move || {
                    read_entry(&mut reader).transpose()
                }))
            })
            .collect::<Result<Vec<_>>>()?;
        merge(runs, f, |key, _, _| {
            Error::DuplicateKey(String::from_utf8_lossy(key).into_owned())
        })
    }
}

fn read_entry(reader: &mut impl Read) -> Result<Option<(Vec<u8>, u32)>> {
    let mut len = [0u8; 4];
    match reader.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let mut key = vec![0u8; u32::from_le_bytes(len) as usize];
    reader.read_exact(&mut key)?;
    let mut pos = [0u8; 4];
    reader.read_exact(&mut pos)?;
    Ok(Some((key, u32::from_le_bytes(pos))))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sorted(keys: &[&str], limit: usize) -> Result<Vec<(String, u32)>> {
        let dir = tempfile::tempdir().unwrap();
        let mut sorter = KeySorter::new(dir.path().to_owned(), limit);
        for (i, k) in keys.iter().enumerate() {
            sorter.push(k.as_bytes(), i as u32)?;
            if sorter.is_full() {
                sorter.spill()?;
            }
        }
        let mut out = Vec::new();
        sorter.finish(|k, p| {
            out.push((String::from_utf8(k.to_vec()).unwrap(), p));
            Ok(())
        })?;
        Ok(out)
    }

    #[test]
    fn sorts_in_memory_and_with_spills_alike() {
        let keys: Vec<String> = (0..1000)
            .map(|i| format!("k{}", (i * 7919) % 1000))
            .collect();
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        let a = sorted(&keys, 1 << 30).unwrap();
        let b = sorted(&keys, 100).unwrap();
        assert_eq!(a, b);
        assert!(a.windows(2).all(|w| w[0].0 < w[1].0));
        assert_eq!(a.len(), 1000);
    }

    #[test]
    fn orders_bytewise_past_the_common_prefix_and_the_first_eight_bytes() {
        // Keys from a tiny alphabet (NUL included) of every length up to 20 under a shared
        // prefix: many tie on their first 8 bytes after it, or are prefixes of each other.
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let mut keys = std::collections::BTreeSet::new();
        while keys.len() < 3000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let len = (x % 21) as usize;
            let tail: String = (0..len)
                .map(|i| ['\0', 'a', 'b'][((x >> (8 + 2 * i)) % 3) as usize])
                .collect();
            keys.insert(format!("doc-{tail}"));
        }
        let mut shuffled: Vec<&str> = keys.iter().map(String::as_str).collect();
        shuffled.sort_by_key(|k| xxhash_rust::xxh3::xxh3_64(k.as_bytes()));
        for limit in [1 << 30, 2000] {
            let out = sorted(&shuffled, limit).unwrap();
            let got: Vec<&str> = out.iter().map(|(k, _)| k.as_str()).collect();
            let want: Vec<&str> = keys.iter().map(String::as_str).collect();
            assert_eq!(got, want, "limit {limit}");
        }
    }

    #[test]
    fn common_prefix_is_the_one_all_keys_share() {
        let dir = tempfile::tempdir().unwrap();
        let mut sorter = KeySorter::new(dir.path().to_owned(), 1 << 20);
        assert_eq!(sorter.common_prefix(), 0);
        for (i, (key, common)) in [("doc-123", 7), ("doc-12", 6), ("doc-2", 4), ("doc-29", 4)]
            .into_iter()
            .enumerate()
        {
            sorter.push(key.as_bytes(), i as u32).unwrap();
            assert_eq!(sorter.common_prefix(), common, "after {key}");
        }
        sorter.push(b"x", 4).unwrap();
        assert_eq!(sorter.common_prefix(), 0);
    }

    #[test]
    fn finds_duplicates_within_and_across_runs() {
        for limit in [1 << 30, 40] {
            let err = sorted(&["a", "b", "c", "d", "e", "b", "f"], limit).unwrap_err();
            assert!(
                matches!(err, Error::DuplicateKey(ref k) if k == "b"),
                "{err}"
            );
            // Named whole, though sorting skips the prefix all keys share.
            let err = sorted(&["doc-a", "doc-b", "doc-c", "doc-b"], limit).unwrap_err();
            assert!(
                matches!(err, Error::DuplicateKey(ref k) if k == "doc-b"),
                "{err}"
            );
            let err = sorted(&["0", "0"], limit).unwrap_err();
            assert!(
                matches!(err, Error::DuplicateKey(ref k) if k == "0"),
                "{err}"
            );
        }
    }
}
