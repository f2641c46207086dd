//! Missing units into requests: the runs of cache units a round lacks, merged where one request
//! is cheaper than two (`merge_gap`; documents only within `data_merge_gap`), then split where a
//! run is too long for one request (`max_request_bytes`). Free functions of plain ranges: what
//! the cache lacks is the caller's (`RemoteFile::fetch`).

use super::options::RemoteOptions;
use std::ops::Range;

/// The requests (byte ranges of a file of `size` bytes) that fetch `missing`, runs of cache
/// units of `unit` bytes, in any order. Runs at most `merge_gap` apart are merged into one
/// request; two runs inside `documents` (a byte range of the file) only within
/// `data_merge_gap`: the bytes between two random documents are fetched for nothing (4 KiB
/// gaps fetched 4x a 160-byte document's size). A merge never makes a run longer than one
/// request (`most`); a run longer than that is split (`split`).
pub(super) fn requests(
    mut missing: Vec<Range<u64>>,
    documents: &Range<u64>,
    options: &RemoteOptions,
    unit: u64,
    size: u64,
) -> Vec<Range<u64>> {
    missing.sort_unstable_by_key(|r| r.start);
    let (gap, data_gap) = (options.merge_gap / unit, options.data_merge_gap / unit);
    let most = most(options, unit);
    let documents = documents.start / unit..documents.end.div_ceil(unit);
    let in_documents = |r: &Range<u64>| documents.start <= r.start && r.end <= documents.end;
    let mut merged: Vec<Range<u64>> = Vec::with_capacity(missing.len());
    for run in missing {
        match merged.last_mut() {
            Some(last)
                if run.start
                    <= last.end
                        + if in_documents(last) && in_documents(&run) {
                            data_gap
                        } else {
                            gap
                        }
                    && run.end.max(last.end) - last.start <= most =>
            {
                last.end = last.end.max(run.end)
            }
            _ => merged.push(run),
        }
    }
    split(merged, most, unit, size)
}

/// The most units one request asks for (`max_request_bytes`, at least one unit).
pub(super) fn most(options: &RemoteOptions, unit: u64) -> u64 {
    (options.max_request / unit).max(1)
}

/// The byte ranges to request for `runs` of units of `unit` bytes: each run split into requests
/// of at most `most` units (fetched at once), clipped to the file's `size`.
pub(super) fn split(
    runs: impl IntoIterator<Item = Range<u64>>,
    most: u64,
    unit: u64,
    size: u64,
) -> Vec<Range<u64>> {
    let mut requests = Vec::new();
    for run in runs {
        let mut start = run.start;
        while start < run.end {
            let end = (start + most).min(run.end);
            requests.push(start * unit..(end * unit).min(size));
            start = end;
        }
    }
    requests
}

#[cfg(test)]
mod tests {
    use super::*;

    const UNIT: u64 = 64;
    const SIZE: u64 = 1 << 30;

    fn options(pairs: &[(&str, &str)]) -> RemoteOptions {
        let pairs = (pairs.iter()).map(|(k, v)| (k.to_string(), v.to_string()));
        RemoteOptions::new(pairs.collect(), None, Some(0)).unwrap()
    }

    /// Runs of units from byte ranges (`UNIT`-aligned in these tests).
    fn units(ranges: &[Range<u64>]) -> Vec<Range<u64>> {
        (ranges.iter())
            .map(|r| r.start / UNIT..r.end / UNIT)
            .collect()
    }

    /// Byte ranges, with the documents far past them (none of the runs is a document's).
    fn index(missing: &[Range<u64>], options: &RemoteOptions) -> Vec<Range<u64>> {
        let documents = SIZE / 2..SIZE;
        requests(units(missing), &documents, options, UNIT, SIZE)
    }

    #[test]
    fn runs_within_merge_gap_merge_and_farther_ones_do_not() {
        let o = options(&[("merge_gap", "4096")]);
        // 4096 bytes apart: merged; 4160 apart: not.
        assert_eq!(index(&[0..64, 4160..4224], &o), vec![0..4224]);
        assert_eq!(index(&[0..64, 4224..4288], &o), vec![0..64, 4224..4288]);
        // Touching and overlapping runs merge whatever the gap.
        let none = options(&[("merge_gap", "0")]);
        assert_eq!(index(&[0..128, 128..256], &none), vec![0..256]);
        assert_eq!(index(&[0..256, 64..128], &none), vec![0..256]);
        assert_eq!(index(&[0..64, 192..256], &none), vec![0..64, 192..256]);
        // The default: 16 KiB.
        let default = options(&[]);
        assert_eq!(default.merge_gap, 16 << 10);
        assert_eq!(index(&[0..64, 16_448..16_512], &default), vec![0..16_512]);
        assert_eq!(index(&[0..64, 16_512..16_576], &default).len(), 2);
    }

    #[test]
    fn runs_are_sorted_first() {
        let o = options(&[("merge_gap", "128")]);
        let got = index(&[8192..8256, 0..64, 128..192, 4096..4160], &o);
        assert_eq!(got, vec![0..192, 4096..4160, 8192..8256]);
    }

    #[test]
    fn documents_merge_only_within_data_merge_gap() {
        let documents = 65_536..1 << 20;
        let missing = units(&[70_000 / UNIT * UNIT..70_080, 71_040..71_104]);
        // data_merge_gap 0 (the default): two documents 960 bytes apart are two requests, though
        // the index's merge_gap would merge them.
        let o = options(&[]);
        assert_eq!(o.data_merge_gap, 0);
        let got = requests(missing.clone(), &documents, &o, UNIT, SIZE);
        assert_eq!(got, vec![69_952..70_080, 71_040..71_104]);
        // Documents that touch still merge.
        let touching = units(&[69_952..70_080, 70_080..70_144]);
        let got = requests(touching, &documents, &o, UNIT, SIZE);
        assert_eq!(got, vec![69_952..70_144]);
        // Within data_merge_gap: one request.
        let o = options(&[("data_merge_gap", "1024")]);
        let got = requests(missing, &documents, &o, UNIT, SIZE);
        assert_eq!(got, vec![69_952..71_104]);
    }

    #[test]
    fn a_run_reaching_into_the_documents_merges_by_merge_gap() {
        // An index run and the first document: not both inside the documents, so `merge_gap`
        // decides; the run they make is not inside them either, so the next document merges
        // with it by `merge_gap` too.
        let documents = 4096..1 << 20;
        let missing = units(&[3968..4032, 4096..4160, 8192..8256, 40_000..40_064]);
        let o = options(&[]);
        let got = requests(missing, &documents, &o, UNIT, SIZE);
        assert_eq!(got, vec![3968..8256, 40_000..40_064]);
    }

    #[test]
    fn a_merge_never_makes_a_request_longer_than_max_request() {
        // max_request_bytes is at least 64 KiB: 1024 units.
        let o = options(&[("max_request_bytes", "65536"), ("merge_gap", "65536")]);
        assert_eq!(most(&o, UNIT), 1024);
        // Together 64 KiB + 64 bytes: not merged, though the gap allows it.
        let got = index(&[0..32_768, 32_832..65_600], &o);
        assert_eq!(got, vec![0..32_768, 32_832..65_600]);
        // Exactly 64 KiB together: merged.
        let got = index(&[0..32_768, 32_832..65_536], &o);
        assert_eq!(got, vec![0..65_536]);
    }

    #[test]
    fn long_runs_are_split_into_requests_of_max_request() {
        let o = options(&[("max_request_bytes", "65536")]);
        let got = index(std::slice::from_ref(&(0..150_016)), &o);
        assert_eq!(got, vec![0..65_536, 65_536..131_072, 131_072..150_016]);
        // A smaller max_request_bytes is raised to 64 KiB.
        assert_eq!(
            options(&[("max_request_bytes", "100")]).max_request,
            64 << 10
        );
    }

    #[test]
    fn requests_are_clipped_to_the_file() {
        // A file of 1000 bytes: its last unit is cut at the end of the file.
        let got = split(std::iter::once(0..16), 8, UNIT, 1000);
        assert_eq!(got, vec![0..512, 512..1000]);
        let o = options(&[("merge_gap", "0")]);
        let got = requests(vec![15..16, 0..1], &(0..0), &o, UNIT, 1000);
        assert_eq!(got, vec![0..64, 960..1000]);
    }

    #[test]
    fn nothing_missing_is_no_request() {
        assert!(index(&[], &options(&[])).is_empty());
        assert!(split(Vec::new(), 4, UNIT, SIZE).is_empty());
    }

    #[test]
    fn the_default_documents_gap_is_zero_and_most_is_at_least_one_unit() {
        let o = options(&[]);
        assert_eq!(most(&o, UNIT), (8 << 20) / UNIT);
        assert_eq!(most(&o, 1 << 30), 1);
    }
}
