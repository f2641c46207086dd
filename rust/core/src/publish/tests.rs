use super::{beside, scratch_prefix, Beside, Scratch, TargetLock};
use crate::{Error, Writer, WriterOptions};
use std::path::Path;

fn names(dir: &Path) -> Vec<String> {
    let names = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name());
    let mut names: Vec<_> = names.map(|n| n.to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

#[test]
fn a_target_lock_excludes_other_holders_and_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let first = TargetLock::acquire(dir.path(), "corpus").unwrap();
    assert!(first.held());
    let (sender, receiver) = std::sync::mpsc::channel();
    let path = dir.path().to_path_buf();
    let waiter = std::thread::spawn(move || {
        let second = TargetLock::acquire(&path, "corpus").unwrap();
        sender.send(second.held()).unwrap();
    });
    // Another target's lock is another file: not held by `first`.
    drop(TargetLock::acquire(dir.path(), "corpus.v2").unwrap());
    let waited = receiver.recv_timeout(std::time::Duration::from_millis(300));
    assert!(waited.is_err(), "a second holder took the lock held");
    drop(first);
    assert!(receiver.recv().unwrap());
    waiter.join().unwrap();
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn scratch_names_are_told_apart_by_their_whole_name() {
    let corpus = scratch_prefix("corpus");
    assert!(corpus.starts_with(".corpus.") && corpus.len() == 1 + 6 + 1 + 16 + 1);
    let (v2, short) = (scratch_prefix("corpus.v2"), scratch_prefix("corpu"));
    for (name, prefix, is) in [
        (
            format!("{corpus}a1B2c3.docstore-tmp"),
            &corpus,
            Beside::Scratch,
        ),
        (
            format!("{corpus}a1B2c3.docstore-new"),
            &corpus,
            Beside::Prepared,
        ),
        (
            format!("{corpus}a1B2c.docstore-tmp"),
            &corpus,
            Beside::Other,
        ),
        (
            format!("{corpus}a1B2c3.docstore-tm"),
            &corpus,
            Beside::Other,
        ),
        (format!("{corpus}docstore-lock"), &corpus, Beside::Other),
        (format!("{v2}a1B2c3.docstore-tmp"), &corpus, Beside::Other),
        (
            format!("{corpus}a1B2c3.docstore-tmp"),
            &short,
            Beside::Other,
        ),
    ] {
        assert_eq!(beside(&name, prefix), is, "{name}");
    }
    // Long names share their first 32 bytes, not their hash; the name stays short.
    let a = scratch_prefix(&"é".repeat(127));
    assert_ne!(a, scratch_prefix(&format!("{}x", "é".repeat(127))));
    assert!(a.starts_with(&format!(".{}.", "é".repeat(16))));
    assert!(a.len() + 6 + ".docstore-tmp".len() <= 70);
}

#[test]
fn a_sweep_removes_what_kills_leave_and_keeps_the_live_and_the_unheld() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("corpus");
    let prefix = scratch_prefix("corpus");
    let live = Scratch::new(&target, None).unwrap(); // locked, this process's pid in it
    let name = live.path().file_name().unwrap().to_str().unwrap();
    assert_eq!(beside(name, &prefix), Beside::Scratch);
    let pid = std::fs::read_to_string(live.path().join("lock")).unwrap();
    assert_eq!(pid, std::process::id().to_string());
    let unheld = Scratch::unheld(&target).unwrap();
    let at = |random: &str, suffix: &str| dir.path().join(format!("{prefix}{random}{suffix}"));
    // Killed mid-publish (no lock file); killed while being made; an old store exchanged
    // into the name; a dead process's (its lock free, another pid in it).
    let dead = [
        at("Dead00", ".docstore-tmp"),
        at("Making", ".docstore-new"),
        at("NoLock", ".docstore-tmp"),
        at("OldOne", ".docstore-tmp"),
    ];
    for path in &dead[..3] {
        std::fs::create_dir(path).unwrap();
    }
    std::fs::write(&dead[3], b"DOCSTORE").unwrap();
    std::fs::write(dead[0].join("lock"), b"1").unwrap();
    // Not the target's: another target's, the user's.
    let other = dir
        .path()
        .join(format!("{}NoLock.docstore-tmp", scratch_prefix("corpus2")));
    std::fs::create_dir(&other).unwrap();
    std::fs::create_dir(dir.path().join("NoLock.docstore-tmp")).unwrap();
    let mut removed = super::sweep(&target).unwrap();
    removed.sort();
    assert_eq!(removed, dead);
    assert!(live.path().is_dir() && unheld.is_dir() && other.is_dir());
    // The unheld one goes when attached and removed, not when only dropped; only a scratch
    // directory of the target attaches.
    assert!(Scratch::attach(&target, &other).is_err());
    assert!(Scratch::attach(&dir.path().join("corpus2"), &unheld).is_err());
    drop(Scratch::attach(&target, &unheld).unwrap());
    assert!(unheld.is_dir());
    Scratch::attach(&target, &unheld).unwrap().remove();
    let live_dir = live.path().to_path_buf();
    drop(live);
    assert!(!unheld.exists() && !live_dir.exists());
}

#[test]
fn a_published_directory_replaces_a_store_and_leaves_no_scratch() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("corpus");
    let schema = crate::Schema::new(vec![]).unwrap();
    Writer::create(&target, schema, WriterOptions::default())
        .and_then(Writer::finish)
        .unwrap();
    let (parent, name) = super::split_target(&target).unwrap();
    let lock = TargetLock::acquire(&parent, &name).unwrap();
    let scratch = Scratch::create(&parent, &name, &lock).unwrap();
    std::fs::write(scratch.path().join("inside"), b"x").unwrap();
    let refused = Scratch::create(&parent, &name, &lock).unwrap();
    assert!(matches!(
        refused.publish(&target, false, &lock),
        Err(Error::AlreadyExists(_))
    ));
    scratch.publish(&target, true, &lock).unwrap();
    drop(lock);
    assert_eq!(names(&target), ["inside"]);
    assert_eq!(names(dir.path()), ["corpus"]);
}
