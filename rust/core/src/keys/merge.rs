//! Merging runs of keys that are each sorted already into one sorted sequence: the runs a key
//! sort spilled (`sort`), or the key indexes of a collection's shards when it is sealed
//! (`store_runs`). A k-way merge over a heap holds one key per run, whatever the runs' lengths;
//! a key in two runs is met as two equal keys in a row.

use crate::error::{Error, Result};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// A k-way merge of runs that are each sorted by key (byte-wise) and free of duplicates: calls
/// `f(key, position)` for every key in sorted order, reading one entry of each run at a time
/// (memory bounded by the number of runs). A key found in two runs is `duplicate(key, run, run)`.
pub(crate) fn merge<I>(
    runs: Vec<I>,
    mut f: impl FnMut(&[u8], u32) -> Result<()>,
    duplicate: impl Fn(&[u8], usize, usize) -> Error,
) -> Result<()>
where
    I: Iterator<Item = Result<(Vec<u8>, u32)>>,
{
    let mut runs = runs;
    let mut heap = BinaryHeap::with_capacity(runs.len());
    for (i, run) in runs.iter_mut().enumerate() {
        if let Some((key, pos)) = run.next().transpose()? {
            heap.push(Reverse((key, i, pos)));
        }
    }
    let mut previous: Option<(Vec<u8>, usize)> = None;
    while let Some(Reverse((key, i, pos))) = heap.pop() {
        if let Some((last, run)) = &previous {
            match last.as_slice().cmp(&key) {
                std::cmp::Ordering::Equal => return Err(duplicate(&key, *run, i)),
                std::cmp::Ordering::Greater => {
                    return Err(Error::corrupt("keys of a sorted run are out of order"))
                }
                std::cmp::Ordering::Less => {}
            }
        }
        f(&key, pos)?;
        if let Some((next, next_pos)) = runs[i].next().transpose()? {
            heap.push(Reverse((next, i, next_pos)));
        }
        previous = Some((key, i));
    }
    Ok(())
}

/// What a merge reads of a store's key index: its keys in rank order, with their positions.
pub(crate) trait SortedKeys {
    fn len(&self) -> u64;
    fn key_of_rank(&self, rank: u64) -> Result<&[u8]>;
    fn position_of_rank(&self, rank: u64) -> Result<u64>;
    /// The rank of the key of the document at `position` (the store's key ranks).
    fn rank_at(&self, position: u64) -> Result<u64>;
}

/// The length of the prefix every key of `stores` starts with: what the smallest and the largest
/// of their keys share.
pub(crate) fn common_prefix(stores: &[impl SortedKeys]) -> Result<usize> {
    let mut ends = Vec::with_capacity(2 * stores.len());
    for store in stores.iter().filter(|s| s.len() > 0) {
        ends.push(store.key_of_rank(0)?);
        ends.push(store.key_of_rank(store.len() - 1)?);
    }
    Ok(match (ends.iter().min(), ends.iter().max()) {
        (Some(a), Some(b)) => a.iter().zip(b.iter()).take_while(|(x, y)| x == y).count(),
        _ => 0,
    })
}

/// One run per store for `merge`: its keys in rank order, each with its position in `stores`
/// taken as one sequence (store `i`'s positions follow those of the stores before it; the caller
/// keeps their sum within `u32`). A run checks as it goes that each rank's position leads back to
/// that rank and that its keys come in order, so that a damaged store fails the merge rather than
/// give an index that agrees with its damage. Errors about store `i` go through `named(err, i)`.
pub(crate) fn store_runs<'a, S: SortedKeys>(
    stores: &'a [S],
    named: &'a impl Fn(Error, usize) -> Error,
) -> Vec<impl Iterator<Item = Result<(Vec<u8>, u32)>> + 'a> {
    let mut start = 0u64;
    let mut runs = Vec::with_capacity(stores.len());
    for (i, store) in stores.iter().enumerate() {
        let offset = start;
        start += store.len();
        runs.push((0..store.len()).map(move |rank| {
            let key = store.key_of_rank(rank).map_err(|e| named(e, i))?.to_vec();
            let local = store.position_of_rank(rank).map_err(|e| named(e, i))?;
            // The caller checked the key of `local` (sealing: against its document's check), and
            // it is this rank's key only if the position's rank is this rank: then ranks and
            // positions are one-to-one, and every merged key is a checked one at its own position.
            let damaged = |what: &str| {
                named(
                    Error::corrupt(format!(
                        "{what} at rank {rank}: the store is damaged (run verify())"
                    )),
                    i,
                )
            };
            if store.rank_at(local).map_err(|e| named(e, i))? != rank {
                return Err(damaged("key index and key ranks disagree"));
            }
            if rank > 0 && store.key_of_rank(rank - 1).map_err(|e| named(e, i))? >= &key[..] {
                return Err(damaged("keys are not sorted"));
            }
            Ok((key, (offset + local) as u32))
        }));
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_interleaves_sorted_runs_and_names_the_runs_of_a_duplicate() {
        let run = |keys: &[&str], first: u32| {
            let items: Vec<Result<(Vec<u8>, u32)>> = (keys.iter().zip(first..))
                .map(|(k, p)| Ok((k.as_bytes().to_vec(), p)))
                .collect();
            items.into_iter()
        };
        let mut out = Vec::new();
        merge(
            vec![run(&["a", "c", "e"], 0), run(&[], 3), run(&["b", "d"], 3)],
            |k, p| {
                out.push((String::from_utf8(k.to_vec()).unwrap(), p));
                Ok(())
            },
            |_, _, _| unreachable!(),
        )
        .unwrap();
        let keys: Vec<&str> = out.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["a", "b", "c", "d", "e"]);
        assert_eq!(out[1].1, 3);
        let err = merge(
            vec![run(&["a", "x"], 0), run(&["m"], 2), run(&["b", "x"], 3)],
            |_, _| Ok(()),
            |k, a, b| Error::DuplicateKey(format!("{}:{a}:{b}", String::from_utf8_lossy(k))),
        )
        .unwrap_err();
        assert!(
            matches!(err, Error::DuplicateKey(ref k) if k == "x:0:2"),
            "{err}"
        );
        // A run out of order (a damaged shard) is refused, not merged into an unsorted index.
        let err = merge(
            vec![run(&["b", "a"], 0)],
            |_, _| Ok(()),
            |_, _, _| unreachable!(),
        )
        .unwrap_err();
        assert!(matches!(err, Error::Corrupt(_)), "{err}");
    }

    /// A store's key index in memory: keys by rank, and the position of each rank.
    struct Keys {
        keys: Vec<&'static str>,
        positions: Vec<u64>,
        ranks: Vec<u64>,
    }

    impl Keys {
        fn new(keys: &[&'static str], positions: &[u64]) -> Keys {
            let mut ranks = vec![0; positions.len()];
            for (rank, &pos) in positions.iter().enumerate() {
                ranks[pos as usize] = rank as u64;
            }
            Keys {
                keys: keys.to_vec(),
                positions: positions.to_vec(),
                ranks,
            }
        }
    }

    impl SortedKeys for Keys {
        fn len(&self) -> u64 {
            self.keys.len() as u64
        }
        fn key_of_rank(&self, rank: u64) -> Result<&[u8]> {
            Ok(self.keys[rank as usize].as_bytes())
        }
        fn position_of_rank(&self, rank: u64) -> Result<u64> {
            Ok(self.positions[rank as usize])
        }
        fn rank_at(&self, position: u64) -> Result<u64> {
            Ok(self.ranks[position as usize])
        }
    }

    fn merged(stores: &[Keys]) -> Result<Vec<(String, u32)>> {
        let named = |e: Error, i: usize| match e {
            Error::Corrupt(msg) => Error::corrupt(format!("store {i}: {msg}")),
            other => other,
        };
        let mut out = Vec::new();
        merge(
            store_runs(stores, &named),
            |k, p| {
                out.push((String::from_utf8(k.to_vec()).unwrap(), p));
                Ok(())
            },
            |k, a, b| Error::DuplicateKey(format!("{}:{a}:{b}", String::from_utf8_lossy(k))),
        )?;
        Ok(out)
    }

    #[test]
    fn stores_merge_with_their_positions_one_after_the_other() {
        let stores = [
            Keys::new(&["doc-a", "doc-c"], &[1, 0]),
            Keys::new(&[], &[]),
            Keys::new(&["doc-b", "doc-d", "doc-e"], &[2, 0, 1]),
        ];
        assert_eq!(common_prefix(&stores).unwrap(), 4);
        let got = merged(&stores).unwrap();
        let want = [
            ("doc-a", 1),
            ("doc-b", 4),
            ("doc-c", 0),
            ("doc-d", 2),
            ("doc-e", 3),
        ];
        let want: Vec<(String, u32)> = want.iter().map(|&(k, p)| (k.into(), p)).collect();
        assert_eq!(got, want);
        assert_eq!(common_prefix(&[Keys::new(&[], &[])]).unwrap(), 0);
        assert_eq!(common_prefix(&[Keys::new(&["abc"], &[0])]).unwrap(), 3);
    }

    #[test]
    fn a_damaged_store_fails_the_merge_naming_it() {
        let good = || Keys::new(&["a", "c"], &[0, 1]);
        // Ranks and positions disagree: rank 1 names position 0, whose rank is 0.
        let mut disagree = Keys::new(&["b", "d"], &[0, 1]);
        disagree.positions[1] = 0;
        let err = merged(&[good(), disagree]).unwrap_err();
        let want = "store 1: key index and key ranks disagree at rank 1";
        assert!(
            matches!(err, Error::Corrupt(ref m) if m.starts_with(want)),
            "{err}"
        );
        let unsorted = Keys::new(&["d", "b"], &[0, 1]);
        let err = merged(&[unsorted, good()]).unwrap_err();
        let want = "store 0: keys are not sorted at rank 1";
        assert!(
            matches!(err, Error::Corrupt(ref m) if m.starts_with(want)),
            "{err}"
        );
        let err = merged(&[good(), Keys::new(&["b", "c"], &[1, 0])]).unwrap_err();
        assert!(
            matches!(err, Error::DuplicateKey(ref k) if k == "c:0:1"),
            "{err}"
        );
    }
}
