use super::evict::PURCHASE_PATIENCE;
use super::map::PURCHASE_AT;
use super::*;
use std::path::Path;

fn config(dir: &Path, budget: u64, lease: u32) -> CacheConfig {
    CacheConfig {
        dir: Some(dir.to_path_buf()),
        budget,
        lease,
    }
}

#[test]
fn damage_in_a_pinned_segment_is_marked_missing_in_place_not_evicted() {
    let dir = tempfile::tempdir().unwrap();
    let size = 2 * SEGMENT;
    let cache = CacheFile::open(&config(dir.path(), 1 << 30, 30), "k7", 7, size).unwrap();
    let all = cache.units(&(0..size));
    cache.write(all.clone(), &vec![5u8; size as usize]).unwrap();
    cache.pin(&cache.units(&(0..512)));
    let damaged = cache.units(&(4096..4200));
    cache.invalidate(&damaged);
    assert!(!cache.present(&damaged), "fetched again by the next read");
    assert!(
        cache.present(&cache.units(&(0..4096))),
        "the rest of the segment stays"
    );
    // In place: what a reader reads there unasked is never a hole.
    assert_eq!(&cache.map_data().unwrap()[4096..4200], &[5u8; 104][..]);
    assert_eq!(cache.held(), size - (damaged.end - damaged.start) * UNIT);
    // An unpinned segment is evicted whole, as before.
    let other = cache.units(&(SEGMENT + 10..SEGMENT + 20));
    cache.invalidate(&other);
    assert!(!cache.present(&cache.units(&(SEGMENT..2 * SEGMENT - 1))));
    assert_eq!(cache.held(), SEGMENT - (damaged.end - damaged.start) * UNIT);
}

#[test]
// Windows refuses to truncate a mapped file (ERROR_USER_MAPPED_FILE): this cannot happen there.
#[cfg(not(windows))]
fn a_data_file_truncated_under_the_map_is_restored_and_its_lost_bytes_missing() {
    let dir = tempfile::tempdir().unwrap();
    let size = 2 * SEGMENT;
    let cache = CacheFile::open(&config(dir.path(), 1 << 30, 30), "k7", 7, size).unwrap();
    let map = cache.map_data().unwrap();
    let all = cache.units(&(0..size));
    cache.write(all.clone(), &vec![5u8; size as usize]).unwrap();
    assert!(cache.intact().unwrap());
    assert_eq!(cache.restore().unwrap(), size, "nothing lost");
    let entry = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.join("data").exists())
        .unwrap();
    let cut = 1000;
    File::options()
        .write(true)
        .open(entry.join("data"))
        .unwrap()
        .set_len(cut)
        .unwrap();
    assert!(!cache.intact().unwrap());
    let lost = cache.restore().unwrap();
    assert_eq!(lost, cut / UNIT * UNIT);
    assert!(cache.intact().unwrap());
    assert!(cache.present(&cache.units(&(0..lost))));
    assert!(!cache.present(&cache.units(&(lost..lost + 1))));
    assert!(!cache.present(&cache.units(&(size - 1..size))));
    assert_eq!(cache.held(), lost);
    // The mapping reads again (zeros where the bytes were lost), no SIGBUS.
    assert_eq!(map[size as usize - 1], 0);
    assert_eq!(map[0], 5);
    // A truncated map is an error (it cannot be trusted), not a crash.
    File::options()
        .write(true)
        .open(entry.join("map"))
        .unwrap()
        .set_len(10)
        .unwrap();
    assert!(!cache.intact().unwrap());
    assert!(cache.restore().is_err());
}

#[test]
fn one_purchase_at_a_time_across_opens_and_a_stale_one_is_taken_over() {
    let dir = tempfile::tempdir().unwrap();
    let a = CacheFile::open(&config(dir.path(), 1 << 30, 30), "k7", 7, SEGMENT).unwrap();
    let b = CacheFile::open(&config(dir.path(), 1 << 30, 30), "k7", 7, SEGMENT).unwrap();
    let stamp = a.begin_purchase().unwrap();
    assert!(
        b.begin_purchase().is_none(),
        "another open (process) is buying"
    );
    a.end_purchase(stamp);
    let stamp = b.begin_purchase().unwrap();
    // A purchase begun longer ago than the patience: its process died (or hangs).
    let stale = u64::from(now()) - PURCHASE_PATIENCE - 1;
    b.word(PURCHASE_AT).store(stale, Ordering::Release);
    let taken = a.begin_purchase().unwrap();
    b.end_purchase(stale); // the first owner, late: the new owner's claim stands
    assert!(b.begin_purchase().is_none());
    a.end_purchase(taken);
    assert!(b.begin_purchase().is_some());
    let _ = stamp;
}

#[test]
fn writes_are_present_once_written_and_shared_between_opens() {
    let dir = tempfile::tempdir().unwrap();
    let size = 3 * SEGMENT + 100;
    let a = CacheFile::open(&config(dir.path(), 1 << 30, 30), "k7", 7, size).unwrap();
    let units = a.units(&(1000..5000));
    let mut missing = Vec::new();
    a.missing(units.clone(), &mut missing);
    assert_eq!(missing, vec![units.clone()]);
    let range = a.bytes_of(&units);
    a.write(
        units.clone(),
        &vec![9u8; (range.end - range.start) as usize],
    )
    .unwrap();
    assert!(a.present(&units));
    let b = CacheFile::open(&config(dir.path(), 1 << 30, 30), "k7", 7, size).unwrap();
    assert!(b.present(&units), "another open (process) sees the write");
    assert_eq!(&b.map_data().unwrap()[1000..5000], &[9u8; 4000][..]);
    assert_eq!(b.usage(), (units.end - units.start) * UNIT);
    // The tail unit is clipped to the file.
    let tail = a.units(&(size - 10..size));
    assert_eq!(a.bytes_of(&tail), (size - 10) / UNIT * UNIT..size);
    let mut partial = Vec::new();
    a.missing(0..units.end + 5, &mut partial);
    assert_eq!(partial, vec![0..units.start, units.end..units.end + 5]);
}

#[test]
fn evicts_past_the_budget_outside_the_lease_and_punches_holes() {
    let dir = tempfile::tempdir().unwrap();
    let size = 8 * SEGMENT;
    let cache = CacheFile::open(&config(dir.path(), 2 * SEGMENT, 0), "k1", 1, size).unwrap();
    for segment in 0..4 {
        let units = cache.units(&(segment * SEGMENT..(segment + 1) * SEGMENT));
        cache.write(units, &vec![1u8; SEGMENT as usize]).unwrap();
    }
    assert!(cache.usage() <= 2 * SEGMENT, "{}", cache.usage());
    let present = (0..4)
        .filter(|s| cache.present(&cache.units(&(s * SEGMENT..s * SEGMENT + 1))))
        .count();
    assert!(present <= 2);
    let leased = CacheFile::open(&config(dir.path(), SEGMENT, 3600), "k2", 2, size).unwrap();
    for segment in 0..3 {
        let units = leased.units(&(segment * SEGMENT..(segment + 1) * SEGMENT));
        leased.write(units, &vec![1u8; SEGMENT as usize]).unwrap();
    }
    assert!(
        (0..3).all(|s| leased.present(&leased.units(&(s * SEGMENT..s * SEGMENT + 1)))),
        "nothing used within the lease is evicted"
    );
}

#[test]
fn a_sweep_from_another_entry_honours_the_longest_lease_of_its_readers() {
    for (lease, kept) in [(3600, true), (0, false)] {
        let dir = tempfile::tempdir().unwrap();
        let idle =
            CacheFile::open(&config(dir.path(), 1 << 30, lease), "k1", 1, 4 * SEGMENT).unwrap();
        let first = idle.units(&(0..SEGMENT));
        idle.write(first.clone(), &vec![7u8; SEGMENT as usize])
            .unwrap();
        // Stamped in an earlier second than the sweep's, so that a lease of 0 has run out.
        idle.segment_word(0).fetch_sub(1, Ordering::Relaxed);
        let busy =
            CacheFile::open(&config(dir.path(), SEGMENT / 2, 0), "k2", 2, 4 * SEGMENT).unwrap();
        busy.write(busy.units(&(0..SEGMENT)), &vec![9u8; SEGMENT as usize])
            .unwrap();
        assert_eq!(idle.present(&first), kept, "lease {lease}");
    }
}

#[test]
fn an_entry_made_for_another_store_is_set_aside_not_read() {
    let dir = tempfile::tempdir().unwrap();
    let first = CacheFile::open(&config(dir.path(), 1 << 30, 30), "k", 1, SEGMENT).unwrap();
    let units = first.units(&(0..4096));
    first.write(units.clone(), &[5u8; 4096]).unwrap();
    assert!(
        CacheFile::open(&config(dir.path(), 1 << 30, 30), "k", 1, SEGMENT)
            .unwrap()
            .present(&units)
    );
    // The same key (URL, validators, size), another header: never the first one's bytes.
    let other = CacheFile::open(&config(dir.path(), 1 << 30, 30), "k", 2, SEGMENT).unwrap();
    assert!(!other.present(&units));
}

#[test]
#[cfg(unix)] // modes and symbolic links as Unix has them
fn a_cache_dir_others_may_write_is_refused_unless_sticky() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let mode = |m| std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(m));
    mode(0o777).unwrap();
    let err = CacheFile::open(&config(dir.path(), 1 << 30, 30), "k", 1, SEGMENT)
        .err()
        .unwrap();
    assert!(
        matches!(&err, Error::InvalidArgument(m) if m.contains("writable by other users")),
        "{err}"
    );
    mode(0o1777).unwrap();
    CacheFile::open(&config(dir.path(), 1 << 30, 30), "k", 1, SEGMENT).unwrap();
}

#[test]
#[cfg(unix)] // modes as Unix has them
fn a_groups_directory_gets_entries_its_group_can_write_and_a_sticky_one_per_user_names() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let me = platform::user().unwrap();
    let mode = |p: &Path| std::fs::symlink_metadata(p).unwrap().mode() & 0o7777;
    let group = tempfile::tempdir().unwrap();
    std::fs::set_permissions(group.path(), std::fs::Permissions::from_mode(0o2770)).unwrap();
    let file = CacheFile::open(&config(group.path(), 1 << 30, 30), "k", 1, SEGMENT).unwrap();
    file.write(file.units(&(0..64)), &[1u8; 64]).unwrap();
    let entry = group.path().join(format!("k-{SEGMENT:x}"));
    assert_eq!(mode(&entry), 0o2770);
    for name in ["data", "map"] {
        assert_eq!(mode(&entry.join(name)), 0o660, "{name}");
    }
    assert_eq!(mode(&group.path().join("usage")), 0o660);
    let sticky = tempfile::tempdir().unwrap();
    std::fs::set_permissions(sticky.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    CacheFile::open(&config(sticky.path(), 1 << 30, 30), "k", 1, SEGMENT).unwrap();
    let entry = sticky.path().join(format!("ku{me}-{SEGMENT:x}"));
    assert_eq!(mode(&entry), 0o700);
    assert_eq!(mode(&sticky.path().join(format!("usage.{me}"))), 0o600);
    assert!(!sticky.path().join("usage").exists());
}

#[test]
#[cfg(unix)] // modes and symbolic links as Unix has them
fn a_usage_link_is_replaced_never_written_through() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, b"precious bytes").unwrap();
    let cache = dir.path().join("cache");
    std::fs::create_dir(&cache).unwrap();
    std::os::unix::fs::symlink(&victim, cache.join("usage")).unwrap();
    let file = CacheFile::open(&config(&cache, 1 << 30, 30), "k", 1, SEGMENT).unwrap();
    file.write(file.units(&(0..64)), &[1u8; 64]).unwrap();
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious bytes");
    let usage = std::fs::symlink_metadata(cache.join("usage")).unwrap();
    assert!(usage.file_type().is_file());
    assert_eq!(usage.mode() & 0o777, 0o600);
}
