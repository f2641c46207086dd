//! The staging directories that the Python package made beside a target before the one protocol
//! (its `_staging.py`, now gone), swept when dead as the core's own are, so that the leftovers of
//! a job of the version before that was killed go with the next writer of the target too.
//!
//! Their names, for a target `NAME` (`SHA` the first 12 hex digits of the SHA-1 of `NAME`, `UUID`
//! 32 lowercase hex digits): `.docstore-{build,dedup,last,shards,upgrade}-SHA-UUID` (`build()`'s
//! widening, a seal's dedup, `on_duplicate="last"`, `docstore build --shards`, `upgrade`) and
//! `.NAME.staging-UUID` (the Ray and Spark sinks). Each held the file `lock`, `flock`ed by its
//! maker for its life (locked under the name `lock.PID`, then renamed), with its pid in it; a
//! bare Spark job's had none. Their makers never took the target's lock, so what tells a dead one
//! from a live one is the directory alone:
//!
//! - with its `lock` file: dead when that lock is free and holds another pid than this process's
//!   (the rule the old sweep applied);
//! - without it: dead when it was last changed before this process started, made by a process
//!   older than this writer (a live maker renames its `lock` into place within moments of
//!   making the directory). Where the start of this process is not known (but on Linux), such a
//!   directory is left alone, as the old sweep left it.

use crate::runtime::platform;
use std::fs::File;
use std::io::{ErrorKind, Read};
use std::path::Path;
use std::time::SystemTime;

/// What `_staging.py` named the lock file in a staging directory.
const LOCK: &str = "lock";
/// The kinds of the `.docstore-{kind}-SHA-UUID` names.
const KINDS: [&str; 5] = ["build", "dedup", "last", "shards", "upgrade"];

/// The names of the old staging directories of one target.
pub(super) struct OldNames {
    /// `.NAME.staging-`
    engines: String,
    /// The first 12 hex digits of the SHA-1 of the target's name.
    sha: String,
}

impl OldNames {
    pub(super) fn of(target_name: &str) -> OldNames {
        let digest = sha1(target_name.as_bytes());
        let sha = digest
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>();
        OldNames {
            engines: format!(".{target_name}.staging-"),
            sha: sha[..12].to_string(),
        }
    }

    /// Whether `name` is an old staging directory's name of the target.
    pub(super) fn matches(&self, name: &str) -> bool {
        let uuid = |rest: &str| {
            rest.len() == 32 && rest.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        };
        if let Some(rest) = name.strip_prefix(self.engines.as_str()) {
            return uuid(rest);
        }
        let Some(rest) = name.strip_prefix(".docstore-") else {
            return false;
        };
        KINDS.iter().any(|kind| {
            rest.strip_prefix(kind)
                .and_then(|r| r.strip_prefix('-'))
                .and_then(|r| r.strip_prefix(self.sha.as_str()))
                .and_then(|r| r.strip_prefix('-'))
                .is_some_and(uuid)
        })
    }
}

/// Whether the old staging directory `dir` is dead (module doc); `me` is this process's pid.
pub(super) fn is_dead(dir: &Path, me: &str) -> bool {
    let Ok(meta) = std::fs::symlink_metadata(dir) else {
        return false;
    };
    if !meta.is_dir() {
        return false; // never one of theirs: not ours to remove
    }
    match File::open(dir.join(LOCK)) {
        Ok(mut lock) => {
            let mut pid = String::new();
            platform::try_lock(&lock) && lock.read_to_string(&mut pid).is_ok() && pid.trim() != me
        }
        Err(e) if e.kind() == ErrorKind::NotFound => match (meta.modified(), process_started()) {
            (Ok(changed), Some(started)) => changed < started,
            _ => false,
        },
        Err(_) => false,
    }
}

/// When this process started (Linux: `/proc/self/stat`'s start time after the boot time of
/// `/proc/stat`, rounded down to the second: earlier, never later); `None` elsewhere.
#[cfg(target_os = "linux")]
fn process_started() -> Option<SystemTime> {
    use std::time::{Duration, UNIX_EPOCH};
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The fields after the command (which may hold spaces), in parentheses: the 22nd field,
    // the start in clock ticks after boot, is the 20th after it.
    let after = &stat[stat.rfind(')')? + 1..];
    let ticks: u64 = after.split_whitespace().nth(19)?.parse().ok()?;
    let system = std::fs::read_to_string("/proc/stat").ok()?;
    let boot: u64 = system
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    // SAFETY: sysconf reads a constant of the system.
    let hz = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).ok()?;
    if hz == 0 {
        return None;
    }
    Some(UNIX_EPOCH + Duration::from_secs(boot + ticks / hz))
}

#[cfg(not(target_os = "linux"))]
fn process_started() -> Option<SystemTime> {
    None
}

/// SHA-1 of `data`: only to know the old names, which `_staging.py`'s callers made with it.
/// `ring`'s, already linked for object storage's TLS and request signing.
fn sha1(data: &[u8]) -> [u8; 20] {
    let digest = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, data);
    let mut out = [0u8; 20];
    out.copy_from_slice(digest.as_ref());
    out
}

#[cfg(test)]
mod tests {
    use super::{sha1, OldNames};

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn sha1_is_sha1() {
        assert_eq!(hex(&sha1(b"")), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
        assert_eq!(
            hex(&sha1(b"abc")),
            "a9993e364706816aba3e25717850c26c9cd0d89d"
        );
        let long = b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
        assert_eq!(hex(&sha1(long)), "84983e441c3bd26ebaae4aa1f95129e5e54670f1");
        assert_eq!(
            hex(&sha1(&[b'a'; 1000])),
            "291e9a6c66994949b57ba5e650361e98fc36b1ba"
        );
    }

    #[test]
    fn the_old_names_of_a_target_and_no_other() {
        // hashlib.sha1(b"corpus").hexdigest()[:12], as _staging.py's callers named them.
        let names = OldNames::of("corpus");
        let uuid = "0123456789abcdef0123456789abcdef";
        assert_eq!(names.sha, hex(&sha1(b"corpus"))[..12]);
        for kind in ["build", "dedup", "last", "shards", "upgrade"] {
            assert!(names.matches(&format!(".docstore-{kind}-{}-{uuid}", names.sha)));
        }
        assert!(names.matches(&format!(".corpus.staging-{uuid}")));
        let other = OldNames::of("corpus.v2").sha;
        for name in [
            format!(".docstore-build-{other}-{uuid}"),
            format!(".docstore-export-{}-{uuid}", names.sha),
            format!(".docstore-last-{}-{}", names.sha, &uuid[1..]),
            format!(".docstore-last-{}-{}", names.sha, uuid.to_uppercase()),
            format!(".corpus.v2.staging-{uuid}"),
            format!(".corpus.staging-{uuid}x"),
            "corpus".to_string(),
        ] {
            assert!(!names.matches(&name), "{name}");
        }
    }

    #[test]
    #[cfg(unix)] // _staging.py used fcntl: there were none on Windows
    fn an_old_directory_is_dead_when_its_lock_is_free_or_it_has_none_and_is_older() {
        use super::is_dead;
        use std::time::{Duration, SystemTime};
        let dir = tempfile::tempdir().unwrap();
        let me = std::process::id().to_string();
        let at = |name: &str, lock: Option<&str>| {
            let path = dir.path().join(name);
            std::fs::create_dir(&path).unwrap();
            if let Some(pid) = lock {
                std::fs::write(path.join("lock"), pid).unwrap();
            }
            path
        };
        let free = at("free", Some("1\n"));
        let held = at("held", Some("1\n"));
        let lock = std::fs::File::open(held.join("lock")).unwrap();
        lock.lock().unwrap();
        let mine = at("mine", Some(&format!("{me}\n")));
        let new = at("new", None);
        let old = at("old", None);
        let past = SystemTime::now() - Duration::from_secs(400 * 24 * 3600);
        std::fs::File::open(&old)
            .unwrap()
            .set_modified(past)
            .unwrap();
        assert!(is_dead(&free, &me));
        assert!(!is_dead(&held, &me) && !is_dead(&mine, &me) && !is_dead(&new, &me));
        assert_eq!(is_dead(&old, &me), cfg!(target_os = "linux"));
        std::fs::write(dir.path().join("file"), b"x").unwrap();
        assert!(!is_dead(&dir.path().join("file"), &me));
        drop(lock);
        assert!(is_dead(&held, &me));
    }
}
