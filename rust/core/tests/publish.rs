//! The publication protocol through the core's public API (`docstore_core::publish`): what a
//! published file may be and replace. The rest (names, locks, sweeps) is tested in `src/publish/`.

use docstore_core::publish::{publish_export, publish_file, Scratch};
use docstore_core::{Error, Schema, Writer, WriterOptions};
use std::path::Path;

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn store(path: &Path) {
    let schema = Schema::new(vec![]).unwrap();
    let mut writer = Writer::create(path, schema, WriterOptions::default()).unwrap();
    writer.add("a", &[]).unwrap();
    writer.finish().unwrap();
}

#[test]
fn publish_file_replaces_only_a_store_and_nothing_without_overwrite() {
    let dir = tempfile::tempdir().unwrap();
    let made = |name: &str| {
        let path = dir.path().join(name);
        store(&path);
        path
    };
    let (first, second) = (made("first"), made("second"));
    let (target, notes) = (dir.path().join("target"), dir.path().join("notes"));
    publish_file(&first, &target, false).unwrap();
    let refused = publish_file(&second, &target, false);
    assert!(
        matches!(refused, Err(Error::AlreadyExists(_))),
        "{refused:?}"
    );
    std::fs::write(&notes, b"the user's").unwrap();
    assert!(publish_file(&second, &notes, true).is_err());
    assert_eq!(std::fs::read(&notes).unwrap(), b"the user's");
    let other = dir.path().join("other");
    let not_a_store = publish_file(&notes, &other, false);
    assert!(matches!(not_a_store, Err(Error::InvalidArgument(_))));
    publish_file(&second, &target, true).unwrap(); // a store is replaced
    assert!(!second.exists() && target.exists() && !other.exists());
}

#[test]
fn an_export_replaces_a_regular_file_but_not_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    let (out, sub) = (dir.path().join("out.jsonl"), dir.path().join("sub"));
    std::fs::write(&out, b"old export").unwrap();
    std::fs::create_dir(&sub).unwrap();
    for (content, target) in [(&b"new"[..], &out), (b"x", &sub)] {
        let scratch = Scratch::new(target, None).unwrap();
        let finished = scratch.path().join("export");
        std::fs::write(&finished, content).unwrap();
        let published = publish_export(&finished, target);
        assert_eq!(published.is_ok(), target == &out, "{published:?}");
    }
    assert_eq!(std::fs::read(&out).unwrap(), b"new");
    assert!(sub.is_dir());
    assert_eq!(names(dir.path()), ["out.jsonl", "sub"]);
}
