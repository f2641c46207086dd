//! How every docstore writer puts what it wrote at its target: the one publication protocol, used
//! by the store writer (`writer`), `seal` and append (`collection::seal`), and, through
//! `_docstore.Staging`, by every Python writer (`on_duplicate="last"`, `upgrade`, the dedup of a
//! seal, the Ray and Spark sinks, `docstore build --shards`, `docstore export`).
//!
//! 1. **Stage.** The work is done in a scratch directory beside the target, on its file system
//!    (`Scratch`), so that publishing is a rename, never a copy.
//! 2. **Lock.** The target's lock (`TargetLock`) is held while a scratch directory of the target
//!    is made (and dead ones swept), while anything is published there, and by an append from
//!    reading what is there to publishing the result (`lock_target`).
//! 3. **Check.** An overwrite replaces only a docstore store (`check_replaceable_file`) or
//!    collection (`collection::check_replaceable`), checked under the lock: never a file or a
//!    directory of the user's. A published file must be a store (`publish_file`), but for an
//!    export, which replaces only a regular file (`publish_export`).
//! 4. **Publish.** A file is linked to the target (which fails if anything is there) or, with
//!    `overwrite`, renamed over it; a directory is renamed to the target (failing if anything is
//!    there) or exchanged with what is there (`Scratch::publish`: readers of the old one keep it).
//! 5. **Sweep.** Whoever makes a scratch directory of a target first removes what killed
//!    processes left beside it (`sweep_dead_scratch`), the dead staging directories of the
//!    Python package before this protocol too (`legacy`).
//!
//! **One naming scheme.** Everything docstore puts beside a target starts with the target's
//! prefix `.{head}.{hash}.` (`scratch_prefix`): its lock file `{prefix}docstore-lock`, its
//! scratch directories `{prefix}{random}.docstore-tmp` (`.docstore-new` while being locked),
//! each holding the file `lock`, `flock`ed by its maker for its life, with its pid in it.
//!
//! **A scratch directory without its lock file is dead** (one reading, in Rust and in Python).
//! The kills that leave one so are a publish killed between taking its lock file away and
//! renaming it, and an overwrite killed between exchanging the old target into the scratch name
//! and removing it: only this reading ever removes those. It is safe because a live directory
//! never shows its scratch name without its lock file but while its maker publishes it, under
//! the target's lock: it is made as `.docstore-new`, its lock file locked and its pid written,
//! and only then renamed to its scratch name; and a sweep runs only under the target's lock
//! (where the file system has no `flock`, nothing is swept).

use crate::error::{Error, Result};
use crate::format;
use crate::runtime::platform;
use std::fs::File;
use std::io::{ErrorKind, Read, Write};
use std::path::{Path, PathBuf};
use xxhash_rust::xxh3::xxh3_64;

mod legacy;

/// Random alphanumerics in a scratch directory's name.
const SCRATCH_RANDOM: usize = 6;
/// Bytes of the target's name that its scratch directory's name repeats, to say whose it is.
const SCRATCH_NAME_BYTES: usize = 32;
/// The end of a scratch directory's name, and of one being made (before its lock is taken).
const SCRATCH_SUFFIX: &str = ".docstore-tmp";
const PREPARED_SUFFIX: &str = ".docstore-new";
/// The end of a target's lock file's name, after the target's prefix.
const TARGET_LOCK: &str = "docstore-lock";
/// A file in the scratch directory, `flock`ed by its maker for as long as it lives and holding
/// its pid. The kernel drops the lock when the process dies, so a scratch directory whose lock
/// can be taken belongs to a killed process.
const SCRATCH_LOCK: &str = "lock";
/// What the lock file of a scratch directory that no process holds says instead of a pid
/// (`Scratch::unheld`): never swept, it goes when its job ends (or by hand).
const UNHELD: &str = "unheld";

/// The directory and the file name of `target`, once the directory is known to exist.
pub(crate) fn split_target(target: &Path) -> Result<(PathBuf, String)> {
    let Some(name) = target.file_name().map(|n| n.to_string_lossy().into_owned()) else {
        return Err(Error::Io(std::io::Error::new(
            ErrorKind::InvalidInput,
            format!("{:?} does not name a file", target.display().to_string()),
        )));
    };
    let parent = match target.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if !parent.is_dir() {
        let (kind, message) = if parent.exists() {
            (
                ErrorKind::NotADirectory,
                format!("{} is not a directory", parent.display()),
            )
        } else {
            (
                ErrorKind::NotFound,
                format!("directory {} does not exist", parent.display()),
            )
        };
        return Err(Error::Io(std::io::Error::new(kind, message)));
    }
    Ok((parent, name))
}

/// The start of every name beside target `name` that is the target's, `.{head}.{hash}.`: `head`
/// is the name's first 32 bytes at most (cut at a character), `hash` the xxh3 of the whole name
/// in 16 hex digits. A scratch name is then at most 1 + 32 + 1 + 16 + 1 + 6 + 13 = 70 bytes,
/// whatever the target's length: a target name may use all 255 bytes a file name can have.
fn scratch_prefix(name: &str) -> String {
    let mut head = SCRATCH_NAME_BYTES.min(name.len());
    while !name.is_char_boundary(head) {
        head -= 1;
    }
    format!(".{}.{:016x}.", &name[..head], xxh3_64(name.as_bytes()))
}

/// What a name in a target's directory is to the target whose `scratch_prefix` is `prefix`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Beside {
    /// `{prefix}{random}.docstore-tmp`: a scratch directory of the target.
    Scratch,
    /// `{prefix}{random}.docstore-new`: one being made (or left so by a kill).
    Prepared,
    /// Anything else: the target's lock file, another target's, the user's.
    Other,
}

/// What `name` is to the target whose `scratch_prefix` is `prefix` (the hash in the prefix tells
/// targets apart, so that `corpus.v2`'s are not `corpus`'s).
fn beside(name: &str, prefix: &str) -> Beside {
    let Some(rest) = name.strip_prefix(prefix) else {
        return Beside::Other;
    };
    let (random, kind) = match (
        rest.strip_suffix(SCRATCH_SUFFIX),
        rest.strip_suffix(PREPARED_SUFFIX),
    ) {
        (Some(random), _) => (random, Beside::Scratch),
        (_, Some(random)) => (random, Beside::Prepared),
        _ => return Beside::Other,
    };
    match random.len() == SCRATCH_RANDOM && random.bytes().all(|b| b.is_ascii_alphanumeric()) {
        true => kind,
        false => Beside::Other,
    }
}

/// Six random alphanumerics (std's per-instance random hash keys).
fn random_part() -> String {
    use std::hash::{BuildHasher, Hasher};
    const ALPHANUMERIC: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    let mut bits = hasher.finish();
    (0..SCRATCH_RANDOM)
        .map(|_| {
            let c = ALPHANUMERIC[(bits % 62) as usize];
            bits /= 62;
            c as char
        })
        .collect()
}

/// A target's lock file, beside it: `{scratch_prefix}docstore-lock`, `flock`ed by every docstore
/// process while it creates a scratch directory of the target (and sweeps dead ones), publishes
/// to the target, or appends to it (from reading what is there to publishing the result). Two
/// writers of one target thus never publish over each other's append, and a sweeper holding it
/// knows that no live process is between making a scratch directory and renaming it to its
/// scratch name, nor between taking its lock file away and publishing it (`Scratch::publish`).
/// Its holder removes it when done, so that nothing stays beside the target.
pub(crate) struct TargetLock {
    /// `None` where the file system has no `flock`: nothing is held, and nothing is swept.
    file: Option<File>,
    path: PathBuf,
}

impl TargetLock {
    /// Waits for the lock of target `name` in `parent`.
    pub(crate) fn acquire(parent: &Path, name: &str) -> Result<TargetLock> {
        let path = parent.join(format!("{}{TARGET_LOCK}", scratch_prefix(name)));
        let mut tries = 0;
        loop {
            let created =
                platform::no_follow(File::options().read(true).write(true).create(true), 0o644)
                    .open(&path);
            let file = match created {
                // Another user's, in a directory both write to: a lock needs only reading.
                Err(denied) if denied.kind() == ErrorKind::PermissionDenied => {
                    match platform::no_follow(File::options().read(true), 0o644).open(&path) {
                        // Removed meanwhile by its holder (try again), or never there: the
                        // directory is not writable (say so).
                        Err(e) if e.kind() == ErrorKind::NotFound && tries < 8 => {
                            tries += 1;
                            continue;
                        }
                        Err(_) => return Err(denied.into()),
                        Ok(file) => file,
                    }
                }
                other => other?,
            };
            if !platform::lock(&file) {
                let _ = std::fs::remove_file(&path);
                return Ok(TargetLock { file: None, path });
            }
            // The holder before us removes the file as it lets go: a lock taken on a removed
            // file (or on one since replaced) is no lock; take the file that is there now.
            let (held, named) = (platform::identity(&file)?, platform::identity_at(&path));
            if named.is_ok_and(|n| n == held) {
                return Ok(TargetLock {
                    file: Some(file),
                    path,
                });
            }
        }
    }

    pub(crate) fn held(&self) -> bool {
        self.file.is_some()
    }
}

impl Drop for TargetLock {
    fn drop(&mut self) {
        if let Some(file) = self.file.take() {
            // Removed while held: whoever waits on this file finds it gone and tries again.
            let _ = std::fs::remove_file(&self.path);
            // Unlocked, not only closed: a child forked meanwhile shares the lock, and would
            // hold it for its whole life.
            platform::unlock(&file);
            drop(file);
        }
    }
}

/// The lock of a target, held (`lock_target`): other docstore writers of the target, seals and
/// appends wait until it is dropped, or spent by `HeldTarget::append` (in `collection::seal`).
pub struct HeldTarget {
    pub(crate) target: PathBuf,
    pub(crate) lock: TargetLock,
}

/// Waits for the lock of `target`, for a caller that reads what is there and then appends to it
/// (`HeldTarget::append`) with nothing published in between: the ids that
/// `seal(append=True, on_duplicate="first")` drops as repeats must be those of the collection it
/// appends to. A writer or seal of the same target started meanwhile, in this process too,
/// waits for it.
pub fn lock_target(target: &Path) -> Result<HeldTarget> {
    let (parent, name) = split_target(target)?;
    Ok(HeldTarget {
        target: target.to_path_buf(),
        lock: TargetLock::acquire(&parent, &name)?,
    })
}

/// Refuses to replace what is at `target` unless it is a docstore store file (a regular file that
/// starts with the magic bytes, damaged or not) or an empty file: a writer or a seal with
/// `overwrite` must never destroy a file of the user's. Nothing there is fine.
pub(crate) fn check_replaceable_file(target: &Path) -> Result<()> {
    let meta = match std::fs::symlink_metadata(target) {
        Ok(meta) => meta,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    let kind = meta.file_type();
    let what = if kind.is_symlink() {
        "a symbolic link (remove it, or write to where it points)"
    } else if kind.is_dir() {
        "a directory"
    } else if !kind.is_file() {
        "not a regular file (a FIFO, socket or device)"
    } else if meta.len() == 0 || starts_with_magic(target)? {
        return Ok(());
    } else {
        "a file that is not a docstore store"
    };
    Err(refused(target, what))
}

/// Whether the regular file at `path` starts with a store's magic bytes.
pub(crate) fn starts_with_magic(path: &Path) -> Result<bool> {
    let mut file = platform::no_follow(File::options().read(true), 0o644).open(path)?;
    let mut magic = [0u8; 8];
    let mut got = 0;
    while got < magic.len() {
        match file.read(&mut magic[got..])? {
            0 => break,
            n => got += n,
        }
    }
    Ok(got == magic.len() && magic == format::MAGIC)
}

/// The error of an overwrite refused because `target` is `what`.
pub(crate) fn refused(target: &Path, what: &str) -> Error {
    Error::Io(std::io::Error::new(
        ErrorKind::AlreadyExists,
        format!(
            "{} is {what}: overwrite replaces only a docstore store or collection, so it is left \
             as it is; remove it yourself, or choose another target",
            target.display()
        ),
    ))
}

/// Moves the finished store file `finished` to `target`: atomically, and without replacing an
/// existing store unless `overwrite` (nor anything but a store: see `check_replaceable_file`).
/// Under the target's lock, so that a collection appended to meanwhile is not replaced under its
/// append, nor this store by it. The one way every writer publishes a store file; `finished`
/// must be on the target's file system (a scratch directory beside it). Without `overwrite`,
/// `finished` is linked, not moved: its caller removes it with its directory.
pub fn publish_file(finished: &Path, target: &Path, overwrite: bool) -> Result<()> {
    if !starts_with_magic(finished)? {
        return Err(Error::InvalidArgument(format!(
            "{} is not a docstore store file: only a finished store is published",
            finished.display()
        )));
    }
    publish_as(finished, target, overwrite, check_replaceable_file)
}

/// Moves the file `finished` that `docstore export` wrote (JSON lines, Parquet: no store) to
/// `target`, as `publish_file` publishes a store, replacing only a regular file there.
pub fn publish_export(finished: &Path, target: &Path) -> Result<()> {
    publish_as(finished, target, true, check_regular_file)
}

/// `finished` published at `target`, under its lock; with `overwrite`, over what `replaceable`
/// accepts.
fn publish_as(
    finished: &Path,
    target: &Path,
    overwrite: bool,
    replaceable: fn(&Path) -> Result<()>,
) -> Result<()> {
    let (parent, name) = split_target(target)?;
    let _lock = TargetLock::acquire(&parent, &name)?;
    if overwrite {
        replaceable(target)?;
        std::fs::rename(finished, target)?;
    } else {
        // link() fails if the target exists, so a store created meanwhile is never clobbered.
        std::fs::hard_link(finished, target).map_err(|e| match e.kind() {
            ErrorKind::AlreadyExists => Error::AlreadyExists(target.to_path_buf()),
            _ => Error::Io(e),
        })?;
    }
    sync_parent(target);
    Ok(())
}

/// Refuses to replace what is at `target` with an export unless it is a regular file or nothing.
fn check_regular_file(target: &Path) -> Result<()> {
    match std::fs::symlink_metadata(target) {
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e.into()),
        Ok(meta) if meta.file_type().is_file() => Ok(()),
        Ok(_) => Err(Error::Io(std::io::Error::new(
            ErrorKind::AlreadyExists,
            format!(
                "{} is not a regular file: an export replaces only a file, so it is left as it is",
                target.display()
            ),
        ))),
    }
}

/// Makes a rename in `target`'s directory durable (best effort).
fn sync_parent(target: &Path) {
    if let Some(parent) = target.parent().filter(|p| !p.as_os_str().is_empty()) {
        if let Ok(dir) = File::open(parent) {
            let _ = dir.sync_all();
        }
    }
}

/// A scratch directory of a target, beside it: where a writer stages what it publishes. Locked by
/// its maker until dropped, when it is removed with everything in it, unless it was published
/// (`publish`), is another process's (`attach`: removed by `remove` alone), or is dropped in a
/// forked child (a fork's copy is its parent's, left alone).
pub struct Scratch {
    /// `lock` inside, locked for this value's life; `None` for one that no process holds
    /// (`unheld`, `attach`).
    lock: Option<File>,
    dir: PathBuf,
    /// The process that made or attached it (`process::instance`): only it removes the
    /// directory.
    owner: u64,
    /// Whether the directory is there to remove (false once published).
    there: bool,
    /// Made by another process (`attach`): dropping this value leaves it.
    attached: bool,
}

impl Scratch {
    /// A new scratch directory of target `name` in `parent` (`split_target`), locked by this
    /// process until dropped, once the dead ones there are swept; `lock`: the target's, held.
    pub(crate) fn create(parent: &Path, name: &str, lock: &TargetLock) -> Result<Scratch> {
        Scratch::make(parent, name, lock, true)
    }

    /// A scratch directory of `target` that no process holds: for a job whose processes all end
    /// before it does (a bare Spark `df.write.format("docstore")`), which removes it with
    /// `attach(..)` dropped when it ends. Never swept: a killed job's stays until removed by
    /// hand. Dropping this value leaves it there.
    pub fn unheld(target: &Path) -> Result<PathBuf> {
        let (parent, name) = split_target(target)?;
        let lock = TargetLock::acquire(&parent, &name)?;
        let mut scratch = Scratch::make(&parent, &name, &lock, false)?;
        scratch.there = false;
        Ok(scratch.dir.clone())
    }

    /// A scratch directory of `target` beside it (`create`), its target's lock taken here for
    /// the moment it takes, or given when the caller holds it (`held`).
    pub fn new(target: &Path, held: Option<&HeldTarget>) -> Result<Scratch> {
        let (parent, name) = split_target(target)?;
        let same = |held: &Path| std::path::absolute(held).ok() == std::path::absolute(target).ok();
        match held {
            Some(held) if same(&held.target) => Scratch::create(&parent, &name, &held.lock),
            Some(held) => Err(Error::InvalidArgument(format!(
                "the lock held is that of {}, not of {}",
                held.target.display(),
                target.display()
            ))),
            None => Scratch::create(&parent, &name, &TargetLock::acquire(&parent, &name)?),
        }
    }

    /// The scratch directory `dir` of `target` that another process made (`unheld`, or one it
    /// holds), to remove by `remove`: refused unless `dir` is one of `target`'s, there.
    pub fn attach(target: &Path, dir: &Path) -> Result<Scratch> {
        let (parent, name) = split_target(target)?;
        let named = dir.file_name().and_then(|n| n.to_str());
        let beside_target = match dir.parent().filter(|p| !p.as_os_str().is_empty()) {
            Some(p) => std::fs::canonicalize(p).ok() == std::fs::canonicalize(&parent).ok(),
            None => false,
        };
        if !beside_target
            || named.map(|n| beside(n, &scratch_prefix(&name))) != Some(Beside::Scratch)
        {
            return Err(Error::InvalidArgument(format!(
                "{} is not a scratch directory of {}",
                dir.display(),
                target.display()
            )));
        }
        if !std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir()) {
            let gone = format!("scratch directory {} does not exist", dir.display());
            return Err(Error::Io(std::io::Error::new(ErrorKind::NotFound, gone)));
        }
        Ok(Scratch {
            lock: None,
            dir: dir.to_path_buf(),
            owner: crate::runtime::process::instance(),
            there: true,
            attached: true,
        })
    }

    fn make(parent: &Path, name: &str, lock: &TargetLock, held: bool) -> Result<Scratch> {
        let prefix = scratch_prefix(name);
        sweep_dead_scratch(parent, name, lock);
        loop {
            let random = random_part();
            let prepared = parent.join(format!("{prefix}{random}{PREPARED_SUFFIX}"));
            let dir = parent.join(format!("{prefix}{random}{SCRATCH_SUFFIX}"));
            match std::fs::create_dir(&prepared) {
                Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
                made => made?,
            }
            match prepare(&prepared, &dir, held) {
                Ok(Some(lock)) => {
                    return Ok(Scratch {
                        lock,
                        dir,
                        owner: crate::runtime::process::instance(),
                        there: true,
                        attached: false,
                    })
                }
                Ok(None) => continue, // the scratch name is taken: another random part
                Err(e) => {
                    let _ = std::fs::remove_dir_all(&prepared);
                    return Err(e);
                }
            }
        }
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Gives the directory the name `target`, in one step: a rename that fails if something is
    /// there, or with `overwrite` an exchange with what is there (removed afterwards; readers
    /// that hold it open keep reading it), which the caller has found replaceable under `lock`,
    /// the target's, held until this returns. The lock file goes first: it is not the
    /// published directory's. A kill from there on leaves a scratch directory without a lock
    /// file (this one, or the old target under its name), which is dead (module doc).
    pub(crate) fn publish(
        mut self,
        target: &Path,
        overwrite: bool,
        _lock: &TargetLock,
    ) -> Result<()> {
        // Closed before it is removed: Windows cannot rename a directory that holds an open
        // file. The target's lock, held, keeps sweepers out meanwhile.
        drop(self.lock.take());
        std::fs::remove_file(self.dir.join(SCRATCH_LOCK))?;
        match platform::rename_noreplace(&self.dir, target) {
            Ok(()) => self.there = false,
            Err(e) if e.kind() == ErrorKind::AlreadyExists && overwrite => {
                platform::exchange(&self.dir, target)?;
                // The scratch path now holds what was at the target: removed (by the drop,
                // whatever stops this one).
                remove_any(&self.dir)?;
                self.there = false;
            }
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                return Err(Error::AlreadyExists(target.to_path_buf()))
            }
            Err(e) => return Err(e.into()),
        }
        sync_parent(target);
        Ok(())
    }
}

impl Scratch {
    /// Removes the directory now, with everything in it (an attached one too), and lets its
    /// lock go; nothing in a forked child.
    pub fn remove(mut self) {
        self.attached = false;
        drop(self);
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if !self.there || self.attached || crate::runtime::process::instance() != self.owner {
            return;
        }
        // Closed first: Windows cannot remove a directory that holds an open file. A sweeper
        // that takes the lock meanwhile removes what this removes.
        drop(self.lock.take());
        let _ = remove_any(&self.dir);
    }
}

/// Removes what is at `path`: a directory with everything in it, or a file.
fn remove_any(path: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// The lock file of the new directory `prepared`, locked, with this process's pid in it (or
/// `UNHELD`, then closed), and then the directory renamed to its scratch name `dir`: under that
/// name it is never without its lock file. `None` when the name is taken (`prepared` removed);
/// the lock (`None` for an unheld directory) otherwise.
#[allow(clippy::option_option)]
fn prepare(prepared: &Path, dir: &Path, held: bool) -> Result<Option<Option<File>>> {
    let lock = lock_scratch(prepared, held)?;
    // Windows cannot rename a directory that holds an open file: the lock is let go for the
    // rename and taken again, under the target's lock (no sweeper looks meanwhile).
    #[cfg(windows)]
    drop(lock);
    match platform::rename_noreplace(prepared, dir) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::AlreadyExists => {
            std::fs::remove_dir_all(prepared)?;
            return Ok(None);
        }
        Err(e) => return Err(e.into()),
    }
    #[cfg(windows)]
    let lock = match held {
        true => Some(File::options().write(true).open(dir.join(SCRATCH_LOCK))?),
        false => None,
    };
    #[cfg(windows)]
    lock.iter().for_each(|file| _ = platform::lock(file));
    Ok(Some(lock))
}

/// Makes the lock file in `dir`: locked, and this process's pid written in it; or, not `held`,
/// `UNHELD` written in it and closed.
fn lock_scratch(dir: &Path, held: bool) -> Result<Option<File>> {
    let mut file = File::create(dir.join(SCRATCH_LOCK))?;
    if !held {
        file.write_all(UNHELD.as_bytes())?;
        return Ok(None);
    }
    if platform::lock(&file) {
        write!(file, "{}", std::process::id())?;
    }
    // Else a file system without flock: its lock file stays empty, and nothing is swept there.
    Ok(Some(file))
}

/// Removes, under the lock of `target`, what killed processes left beside it; returns the paths
/// removed. `Scratch::create` does it first; this is for a caller that wants it done now.
pub fn sweep(target: &Path) -> Result<Vec<PathBuf>> {
    let (parent, name) = split_target(target)?;
    let lock = TargetLock::acquire(&parent, &name)?;
    Ok(sweep_dead_scratch(&parent, &name, &lock))
}

/// Removes the scratch directories that killed processes left in `parent` for the target `name`
/// (and the staging directories of the Python package before this protocol: `legacy`);
/// `target_lock` is the target's, held. Returns their paths. Best effort: anything unexpected
/// leaves a directory alone.
fn sweep_dead_scratch(parent: &Path, name: &str, target_lock: &TargetLock) -> Vec<PathBuf> {
    let (prefix, old) = (scratch_prefix(name), legacy::OldNames::of(name));
    let mut removed = Vec::new();
    // Without the target's lock (no flock), a directory without its lock file may be one being
    // published right now: nothing is swept.
    if !target_lock.held() {
        return removed;
    }
    let Ok(entries) = std::fs::read_dir(parent) else {
        return removed;
    };
    let me = std::process::id().to_string();
    for entry in entries.flatten() {
        let file_name = entry.file_name();
        let Some(entry_name) = file_name.to_str() else {
            continue;
        };
        let path = entry.path();
        let dead = match beside(entry_name, &prefix) {
            Beside::Other => old.matches(entry_name) && legacy::is_dead(&path, &me),
            // Its maker holds the target's lock until it renames it: under that lock, a kill.
            Beside::Prepared => true,
            Beside::Scratch => is_dead(&path, &me),
        };
        if dead && remove_any(&path).is_ok() {
            removed.push(path);
        }
    }
    removed
}

/// Whether the scratch directory `dir` is dead (a sweeper holding its target's lock asks): no
/// lock file in it (module doc); its lock free, and no `UNHELD` mark nor this process's pid
/// in it (some file systems, NFS, do not hold a lock against the rest of the process that
/// took it); or not a directory at all (an old store file exchanged into the name).
fn is_dead(dir: &Path, me: &str) -> bool {
    match std::fs::symlink_metadata(dir) {
        Ok(meta) if !meta.is_dir() => return true,
        Ok(_) => {}
        Err(_) => return false,
    }
    match File::open(dir.join(SCRATCH_LOCK)) {
        Err(e) => e.kind() == ErrorKind::NotFound,
        Ok(mut lock) => {
            let mut pid = String::new();
            platform::try_lock(&lock)
                && lock.read_to_string(&mut pid).is_ok()
                && pid != UNHELD
                && pid != me
        }
    }
}

#[cfg(test)]
mod tests;
