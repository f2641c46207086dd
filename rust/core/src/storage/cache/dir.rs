//! The cache directory and its entries: who may use a directory (`check_dir`, `Sharing`), which
//! files of it are trusted (`trusted`, `open_trusted`), an entry found (`open_existing`) or made
//! (`create_files`), and the node's `usage` counter.

use super::map::{map_len, BYTES_AT, FINGERPRINT_AT, MAGIC, MAP_HEADER, SEGMENT, UNIT};
use super::{io, CacheFile};
use crate::error::{Error, Result};
use crate::runtime::platform;
use memmap2::MmapMut;
use std::fs::File;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// The `usage` counter: shared by the node, or this process's own.
pub(super) enum Usage {
    Shared(MmapMut),
    Private(AtomicU64),
}

impl Usage {
    pub(super) fn counter(&self) -> &AtomicU64 {
        match self {
            // SAFETY: the mapping is at least 8 bytes, page-aligned, lives as long as `self`, and
            // every process only ever accesses these bytes atomically.
            Usage::Shared(map) => unsafe { AtomicU64::from_ptr(map.as_ptr() as *mut u64) },
            Usage::Private(counter) => counter,
        }
    }
}

/// Who may use a cache directory, from its mode (`check_dir`), and so what its entries are made
/// as and which it trusts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Sharing {
    /// This user's own (writable by no one else): entries 0700, files 0600.
    Private,
    /// Writable by every user, with the sticky bit (`/tmp`-like): no user can rename or delete
    /// another's files, nor may trust them. Each user's entries carry their uid in their name
    /// and the counter is `usage.<uid>`: users of one directory never meet each other's files.
    Sticky(u32),
    /// A group's (setgid, writable by the group, not by others): its members share entries and
    /// the counter, made 2770 and 0660 whatever the umask (the setgid bit gives them the
    /// directory's group). An entry or file of that group that others cannot write is trusted
    /// whichever member made it: only members (and root) can write the directory.
    Group(u32),
}

impl Sharing {
    pub(super) fn dir_mode(self) -> u32 {
        match self {
            Sharing::Group(_) => 0o2770,
            _ => 0o700,
        }
    }

    pub(super) fn file_mode(self) -> u32 {
        match self {
            Sharing::Group(_) => 0o660,
            _ => 0o600,
        }
    }

    /// The name of the entry `key` of `size` bytes.
    pub(super) fn entry_name(self, key: &str, size: u64) -> String {
        match self {
            Sharing::Sticky(uid) => format!("{key}u{uid}-{size:x}"),
            _ => format!("{key}-{size:x}"),
        }
    }

    pub(super) fn usage_name(self) -> String {
        match self {
            Sharing::Sticky(uid) => format!("usage.{uid}"),
            _ => "usage".to_string(),
        }
    }
}

impl CacheFile {
    /// The entry at `dir`: `None` if there is none; an error if it is not one this user can
    /// trust: a link or not a directory, files that are links or not this user's (nor, in a
    /// group's directory, the group's), another size or layout, or (with `fingerprint`) another
    /// store's.
    pub(super) fn open_existing(
        dir: &Path,
        size: u64,
        fingerprint: Option<u64>,
        sharing: Sharing,
    ) -> Result<Option<(File, (MmapMut, File))>> {
        match std::fs::symlink_metadata(dir) {
            Ok(meta) => trusted(dir, &meta, true, sharing)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io(dir.display(), e)),
        }
        let data = match open_trusted(&dir.join("data"), false, sharing) {
            Ok(file) => file,
            Err(Error::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let map_file = open_trusted(&dir.join("map"), false, sharing)?;
        if data.metadata()?.len() != size || map_file.metadata()?.len() != map_len(size) {
            return Err(Error::corrupt("cache entry of another size"));
        }
        // (A map made sparse by an older docstore, or copied: see `reserve`.)
        reserve(&map_file, map_len(size))?;
        // SAFETY: the map file is only ever accessed through atomics (and its header, written
        // before the directory was renamed into place, is only read).
        let map = unsafe { MmapMut::map_mut(&map_file)? };
        if &map[..8] != MAGIC || u64_at(&map, 8) != size || u32_at(&map, 16) as u64 != UNIT {
            return Err(Error::corrupt("not a docstore cache entry"));
        }
        if fingerprint.is_some_and(|f| u64_at(&map, FINGERPRINT_AT as usize) != f) {
            // The same URL, version and size, another header: a server that reuses its
            // validators. What the entry holds may be another object's bytes.
            return Err(Error::corrupt("cache entry of another store"));
        }
        Ok(Some((data, (map, map_file))))
    }
}

/// Allocates the first `len` bytes of `file` on disk (extending it if shorter): writes through a
/// mapping of them can then never meet a full disk. Filesystems that cannot reserve get a plain
/// extension.
pub(super) fn reserve(file: &File, len: u64) -> std::io::Result<()> {
    platform::reserve(file, len)
}

/// Makes `data` (sparse, `size` bytes) and `map` (header written, `fingerprint` included) in
/// `dir`: `mode` whatever the umask, never through a link.
pub(super) fn create_files(
    dir: &Path,
    size: u64,
    fingerprint: u64,
    mode: u32,
) -> Result<(File, (MmapMut, File))> {
    let create = |name: &str| -> Result<File> {
        let path = dir.join(name);
        let file = platform::no_follow(
            File::options().read(true).write(true).create_new(true),
            mode,
        )
        .open(&path)
        .map_err(|e| io(path.display(), e))?;
        platform::set_mode(&path, mode).map_err(|e| io(path.display(), e))?;
        Ok(file)
    };
    let data = create("data")?;
    data.set_len(size).map_err(|e| io(dir.display(), e))?;
    let map_file = create("map")?;
    // Reserved, not sparse: a page of a shared mapping that the disk has no room for kills the
    // process with SIGBUS when first written; here it is an error instead.
    reserve(&map_file, map_len(size)).map_err(|e| io(dir.display(), e))?;
    let mut header = [0u8; MAP_HEADER as usize];
    header[..8].copy_from_slice(MAGIC);
    header[8..16].copy_from_slice(&size.to_le_bytes());
    header[16..20].copy_from_slice(&(UNIT as u32).to_le_bytes());
    header[20..24].copy_from_slice(&(SEGMENT as u32).to_le_bytes());
    let at = FINGERPRINT_AT as usize;
    header[at..at + 8].copy_from_slice(&fingerprint.to_le_bytes());
    platform::write_all_at(&map_file, &header, 0)?;
    // SAFETY: a file this process just made; every later access to its words is atomic.
    let map = unsafe { MmapMut::map_mut(&map_file)? };
    Ok((data, (map, map_file)))
}

/// Refuses what `meta` describes unless it is this user's own or, in a group's directory, of
/// that group and not writable by others (`dir`: a directory, else a regular file), never a
/// link: another user's file could be changed under the readers.
pub(super) fn trusted(
    path: &Path,
    meta: &std::fs::Metadata,
    dir: bool,
    sharing: Sharing,
) -> Result<()> {
    let kind = meta.file_type();
    let what = match dir {
        true => "a directory",
        false => "a regular file",
    };
    if (dir && !kind.is_dir()) || (!dir && !kind.is_file()) {
        return Err(io(
            path.display(),
            std::io::Error::other(format!("not {what} (a link?): not used")),
        ));
    }
    // Windows: no uid; the cache directory's ACL keeps other users out.
    if let Some((uid, me)) = platform::owner(meta).zip(platform::user()) {
        if uid != me && !of_group(meta, sharing) {
            return Err(io(
                path.display(),
                std::io::Error::other(format!(
                    "owned by uid {uid}, not by this user (uid {me}): not used"
                )),
            ));
        }
    }
    Ok(())
}

/// Whether `meta` is of the group whose directory `sharing` is, and not writable by others.
pub(super) fn of_group(meta: &std::fs::Metadata, sharing: Sharing) -> bool {
    match sharing {
        Sharing::Group(gid) => {
            group_of(meta) == Some(gid) && platform::mode(meta).is_some_and(|m| m & 0o002 == 0)
        }
        _ => false,
    }
}

/// The group that owns what `meta` describes; `None` on Windows.
pub(super) fn group_of(meta: &std::fs::Metadata) -> Option<u32> {
    #[cfg(unix)]
    return Some(std::os::unix::fs::MetadataExt::gid(meta));
    #[cfg(not(unix))]
    {
        let _ = meta;
        None
    }
}

/// Opens a file of the cache for reading and writing, never through a link (`O_NOFOLLOW`), and
/// only if it is a regular file this user may trust (`trusted`; `create`: made if missing, with
/// the directory's file mode whatever the umask, so that a group's members can all write it).
pub(super) fn open_trusted(path: &Path, create: bool, sharing: Sharing) -> Result<File> {
    let mode = sharing.file_mode();
    let open = |new: bool| {
        platform::no_follow(
            File::options()
                .read(true)
                .write(true)
                .create_new(new)
                .truncate(false),
            mode,
        )
        .open(path)
    };
    let file = match create {
        true => match open(true) {
            Ok(file) => {
                platform::set_mode(path, mode).map_err(|e| io(path.display(), e))?;
                Ok(file)
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => open(false),
            Err(e) => Err(e),
        },
        false => open(false),
    }
    .map_err(|e| io(path.display(), e))?;
    trusted(path, &file.metadata()?, false, sharing)?;
    Ok(file)
}

/// Makes `dir` (0700, whatever the umask) if missing, and refuses it unless this user or root
/// owns it, and only they may write it, or others may with the sticky bit (a shared `/tmp`-like
/// directory, where no user can rename or delete another's entries), or its group may with the
/// setgid bit (a group's directory: `Sharing`). A `cache_dir` that is a link is followed: the
/// user named it.
pub(super) fn check_dir(dir: &Path) -> Result<Sharing> {
    let meta = match std::fs::metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            match platform::create_dir_all(dir, 0o700) {
                Ok(()) => {
                    let _ = platform::set_mode(dir, 0o700);
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(io(dir.display(), e)),
            }
            std::fs::metadata(dir).map_err(|e| io(dir.display(), e))?
        }
        Err(e) => return Err(io(dir.display(), e)),
        Ok(meta) => meta,
    };
    let refuse = |why: String| {
        Err(Error::InvalidArgument(format!(
            "cache_dir {}: {why}; another user could change what docstore reads there: give a \
             directory of your own",
            dir.display()
        )))
    };
    if !meta.is_dir() {
        return refuse("not a directory".to_string());
    }
    // Windows has neither uid nor mode bits: there the directory's ACL is what protects it.
    if let Some((uid, me)) = platform::owner(&meta).zip(platform::user()) {
        if uid != me && uid != 0 {
            return refuse(format!(
                "owned by uid {uid}, not by this user (uid {me}) or root"
            ));
        }
    }
    let (Some(mode), Some(me), Some(gid)) =
        (platform::mode(&meta), platform::user(), group_of(&meta))
    else {
        return Ok(Sharing::Private);
    };
    let group = mode & 0o2020 == 0o2020 && mode & 0o002 == 0;
    if mode & 0o022 != 0 && mode & 0o1000 == 0 && !group {
        return refuse(format!(
            "writable by other users (mode {mode:o}) without the sticky bit (nor, writable by \
             its group alone, the setgid bit of a group's directory)"
        ));
    }
    if group && !writable(dir) {
        return Err(Error::InvalidArgument(format!(
            "cache_dir {}: the directory of group {gid} (mode {mode:o}), which this user may \
             not write: not a member of the group? Give a directory of your own",
            dir.display()
        )));
    }
    Ok(match mode {
        _ if group => Sharing::Group(gid),
        _ if mode & 0o022 != 0 => Sharing::Sticky(me),
        _ => Sharing::Private,
    })
}

/// Whether this process may make files in `dir` (`faccessat` with the effective ids and groups).
pub(super) fn writable(dir: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        let Ok(path) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
            return false;
        };
        // SAFETY: a NUL-terminated path that outlives the call; no other pointer is passed.
        let got = unsafe {
            libc::faccessat(
                libc::AT_FDCWD,
                path.as_ptr(),
                libc::W_OK | libc::X_OK,
                libc::AT_EACCESS,
            )
        };
        got == 0
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
        true
    }
}

/// The node's `usage` counter, made if missing; recounted from the stores' own counters, so that
/// a store directory deleted by hand stops counting.
pub(super) fn shared_usage(dir: &Path, sharing: Sharing) -> Result<Usage> {
    let usage = map_usage(dir, sharing)?;
    let mut total = 0u64;
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            // The entries this user trusts only, never through a link.
            let path = entry.path();
            let meta = std::fs::symlink_metadata(&path);
            if !meta.is_ok_and(|m| trusted(&path, &m, true, sharing).is_ok()) {
                continue;
            }
            let mut held = [0u8; 8];
            if let Ok(file) = open_trusted(&path.join("map"), false, sharing) {
                let mut magic = [0u8; 8];
                if platform::read_exact_at(&file, &mut magic, 0).is_ok()
                    && &magic == MAGIC
                    && platform::read_exact_at(&file, &mut held, BYTES_AT).is_ok()
                {
                    total += u64::from_le_bytes(held);
                }
            }
        }
    }
    usage.counter().store(total, Ordering::Relaxed);
    Ok(usage)
}

/// The directory's shared byte counter, mapped as it is (`shared_usage` also recounts it). A
/// `usage` that is a link, or not a file this user trusts, is replaced, never written through.
pub(super) fn map_usage(dir: &Path, sharing: Sharing) -> Result<Usage> {
    let path = dir.join(sharing.usage_name());
    let file = match open_trusted(&path, true, sharing) {
        Ok(file) => file,
        Err(_) => {
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io(path.display(), e)),
            }
            open_trusted(&path, true, sharing)?
        }
    };
    reserve(&file, 8).map_err(|e| io(path.display(), e))?;
    // SAFETY: an 8-byte counter only ever accessed atomically, by every process.
    let map = unsafe { MmapMut::map_mut(&file)? };
    Ok(Usage::Shared(map))
}

/// The little-endian `u64` at `at` of the map's header.
fn u64_at(map: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(map[at..at + 8].try_into().expect("8 bytes"))
}

/// The little-endian `u32` at `at` of the map's header.
fn u32_at(map: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(map[at..at + 4].try_into().expect("4 bytes"))
}
