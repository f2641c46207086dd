//! Every operating-system call whose form differs between Linux, macOS and Windows, in one place:
//! the rest of the core calls these and never `libc` or `windows-sys` for them. docs/wheels.md
//! says what each platform guarantees.
//!
//! | what | Linux | macOS | Windows |
//! |---|---|---|---|
//! | publish without replacing | `renameat2(RENAME_NOREPLACE)` | `renamex_np(RENAME_EXCL)` | `MoveFileExW` without `REPLACE_EXISTING` |
//! | exchange (overwrite) | `renameat2(RENAME_EXCHANGE)`: atomic | `renamex_np(RENAME_SWAP)`: atomic | three renames: not atomic (`exchange`) |
//! | file locks | `flock` | `flock` | `LockFileEx` (all through std's `File::lock`) |
//! | page-cache hints | `posix_fadvise`, `madvise`, `mincore` | `F_RDADVISE`, `madvise`, `mincore` | none (no-ops) |
//! | space reserved / freed in the remote cache | `posix_fallocate`, hole punching | `F_PREALLOCATE`-less extension, `F_PUNCHHOLE` | extension only; evicted ranges stay allocated |
//! | file identity | `(st_dev, st_ino)` | `(st_dev, st_ino)` | volume serial and file index |
//!
//! File locks use std's `File::lock` (Rust 1.89): the same `flock` the core called through libc
//! on Unix and `LockFileEx` on Windows, with nothing to depend on; fs4 and rustix wrap the
//! same calls.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::Path;

/// Gives `from` the name `to` unless something is there: an error of kind `AlreadyExists` then,
/// and nothing moved. Atomic on every platform (no moment where `to` is half there).
pub fn rename_noreplace(from: &Path, to: &Path) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    return unix::rename2(from, to, libc::RENAME_NOREPLACE);
    #[cfg(target_vendor = "apple")]
    return unix::renamex(from, to, libc::RENAME_EXCL);
    #[cfg(windows)]
    return windows::move_file(from, to);
    #[cfg(not(any(target_os = "linux", target_vendor = "apple", windows)))]
    {
        // No atomic form here: look, then rename (a racing creator can be replaced).
        if std::fs::symlink_metadata(to).is_ok() {
            return Err(io::ErrorKind::AlreadyExists.into());
        }
        std::fs::rename(from, to)
    }
}

/// Swaps what `from` and `to` name: afterwards `to` is what `from` was, and `from` what `to`
/// was (the caller removes it). On Linux and macOS one atomic step: a reader opening `to`
/// finds the old or the new, never nothing. On Windows there is no exchange: `to` is moved
/// aside to `{from}.old`, `from` moved to `to`, and the old one moved to `from`. Between the
/// first two moves `to` names nothing (an open there fails with NotFound); a kill there leaves
/// the old one at `{from}.old`, where the user finds it. A first move that fails (Windows
/// refuses to rename a directory with a file open in it, or a file still mapped by another
/// process without delete sharing) leaves everything as it was.
pub fn exchange(from: &Path, to: &Path) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    return unix::rename2(from, to, libc::RENAME_EXCHANGE);
    #[cfg(target_vendor = "apple")]
    return unix::renamex(from, to, libc::RENAME_SWAP);
    #[cfg(not(any(target_os = "linux", target_vendor = "apple")))]
    {
        let mut aside = from.as_os_str().to_owned();
        aside.push(".old");
        let aside = std::path::PathBuf::from(aside);
        std::fs::rename(to, &aside)?;
        if let Err(e) = rename_noreplace(from, to) {
            let _ = std::fs::rename(&aside, to);
            return Err(e);
        }
        std::fs::rename(&aside, from)
    }
}

/// Waits for an exclusive lock on `file`; false where the file system has none (the caller
/// goes on without it, as it always has).
pub fn lock(file: &File) -> bool {
    file.lock().is_ok()
}

/// Takes an exclusive lock on `file` if no one holds one; false if someone does (or the file
/// system has no locks).
pub fn try_lock(file: &File) -> bool {
    file.try_lock().is_ok()
}

/// Lets go of `lock`'s lock (before closing: a forked child shares a `flock` and would hold it).
pub fn unlock(file: &File) {
    let _ = file.unlock();
}

/// Reads exactly `buf.len()` bytes at `offset`, without moving a shared cursor (`pread`).
#[cfg(unix)]
pub fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, buf, offset)
}

/// Writes all of `buf` at `offset`, without moving a shared cursor (`pwrite`).
#[cfg(unix)]
pub fn write_all_at(file: &File, buf: &[u8], offset: u64) -> io::Result<()> {
    std::os::unix::fs::FileExt::write_all_at(file, buf, offset)
}

/// Reads exactly `buf.len()` bytes at `offset` (`seek_read` moves the handle's cursor, which
/// no caller here uses).
#[cfg(windows)]
pub fn read_exact_at(file: &File, mut buf: &mut [u8], mut offset: u64) -> io::Result<()> {
    while !buf.is_empty() {
        match std::os::windows::fs::FileExt::seek_read(file, buf, offset) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => {
                buf = &mut buf[n..];
                offset += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Writes all of `buf` at `offset` (moving the handle's cursor, as `read_exact_at`).
#[cfg(windows)]
pub fn write_all_at(file: &File, mut buf: &[u8], mut offset: u64) -> io::Result<()> {
    while !buf.is_empty() {
        match std::os::windows::fs::FileExt::seek_write(file, buf, offset) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                buf = &buf[n..];
                offset += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Options that open only the file itself, never what a symbolic link there points to (the
/// open fails on Unix; on Windows the link itself is opened, and its metadata is no regular
/// file's, which callers check), and never block on a FIFO. `mode` is the permission bits a
/// created file gets on Unix (Windows: the directory's ACL decides).
pub fn no_follow(options: &mut OpenOptions, mode: u32) -> &mut OpenOptions {
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options
            .mode(mode)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
    }
    #[cfg(windows)]
    {
        use std::os::windows::fs::OpenOptionsExt;
        let _ = mode;
        options.custom_flags(windows_sys::Win32::Storage::FileSystem::FILE_FLAG_OPEN_REPARSE_POINT)
    }
}

/// Options that never block on a FIFO (`O_NONBLOCK`; Windows has no FIFOs in the file system).
pub fn no_block(options: &mut OpenOptions) -> &mut OpenOptions {
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK)
    }
    #[cfg(windows)]
    options
}

/// Makes the entries of directory `dir` durable (`fsync` of the directory on Unix). Windows
/// cannot open a directory for that, and needs nothing: NTFS journals its metadata.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    #[cfg(unix)]
    return File::open(dir)?.sync_all();
    #[cfg(not(unix))]
    {
        let _ = dir;
        Ok(())
    }
}

/// What identifies a file on its machine while it exists: two paths or handles name the same
/// file exactly when their identities are equal.
pub fn identity(file: &File) -> io::Result<(u64, u64)> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let meta = file.metadata()?;
        Ok((meta.dev(), meta.ino()))
    }
    #[cfg(windows)]
    windows::identity(file)
}

/// `identity` of what `path` names (a link itself, not where it points).
pub fn identity_at(path: &Path) -> io::Result<(u64, u64)> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::symlink_metadata(path)?;
        Ok((meta.dev(), meta.ino()))
    }
    #[cfg(windows)]
    {
        use std::os::windows::fs::OpenOptionsExt;
        use windows_sys::Win32::Storage::FileSystem as fs;
        // Metadata only (no read access), a directory too, the link itself.
        let file = File::options()
            .access_mode(0)
            .custom_flags(fs::FILE_FLAG_BACKUP_SEMANTICS | fs::FILE_FLAG_OPEN_REPARSE_POINT)
            .open(path)?;
        windows::identity(&file)
    }
}

/// The user that owns what `meta` describes (its uid); `None` on Windows, where ownership is an
/// ACL's and the remote cache relies on the directory's (docs/wheels.md).
pub fn owner(meta: &std::fs::Metadata) -> Option<u32> {
    #[cfg(unix)]
    return Some(std::os::unix::fs::MetadataExt::uid(meta));
    #[cfg(not(unix))]
    {
        let _ = meta;
        None
    }
}

/// Unix permission bits (`st_mode & 0o7777`) of what `meta` describes; `None` on Windows.
pub fn mode(meta: &std::fs::Metadata) -> Option<u32> {
    #[cfg(unix)]
    return Some(std::os::unix::fs::MetadataExt::mode(meta) & 0o7777);
    #[cfg(not(unix))]
    {
        let _ = meta;
        None
    }
}

/// This process's effective user (`geteuid`); `None` on Windows.
pub fn user() -> Option<u32> {
    // SAFETY: a plain system call without arguments; it cannot fail.
    #[cfg(unix)]
    return Some(unsafe { libc::geteuid() });
    #[cfg(not(unix))]
    None
}

/// Sets the Unix permission bits of `path` to `mode` whatever the umask; nothing on Windows.
pub fn set_mode(path: &Path, mode: u32) -> io::Result<()> {
    #[cfg(unix)]
    return std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(mode));
    #[cfg(not(unix))]
    {
        let _ = (path, mode);
        Ok(())
    }
}

/// Makes `dir` and its missing parents, the new ones with permission bits `mode` (less the
/// umask) on Unix.
pub fn create_dir_all(dir: &Path, mode: u32) -> io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, mode);
    #[cfg(not(unix))]
    let _ = mode;
    builder.create(dir)
}

/// Seconds since the Unix epoch, cheaply (a coarse clock where there is one: every read of the
/// remote cache stamps its segments).
pub fn now_seconds() -> u32 {
    #[cfg(target_os = "linux")]
    {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: writes the current time into `ts`, a valid timespec.
        unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut ts) };
        ts.tv_sec as u32
    }
    #[cfg(not(target_os = "linux"))]
    {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as u32)
    }
}

/// Allocates the first `len` bytes of `file` on disk where the file system can (extending it if
/// shorter), so that writes through a mapping of them never meet a full disk. Elsewhere (macOS,
/// Windows, file systems that cannot reserve) a plain extension.
pub fn reserve(file: &File, len: u64) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        // SAFETY: a plain system call on the caller's open descriptor.
        match unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len as libc::off_t) } {
            0 => return Ok(()),
            libc::EOPNOTSUPP | libc::ENOSYS | libc::EINVAL => {}
            errno => return Err(io::Error::from_raw_os_error(errno)),
        }
    }
    if file.metadata()?.len() < len {
        file.set_len(len)?;
    }
    Ok(())
}

/// Gives `len` bytes at `offset` of `file` back to the file system, keeping the file's size
/// (they read as zeros). A hint: where it is not done (Windows, file systems without holes)
/// the bytes stay allocated.
pub fn punch_hole(file: &File, offset: u64, len: u64) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        // SAFETY: a plain system call on the caller's descriptor; the result is a hint's.
        unsafe {
            libc::fallocate(
                file.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                offset as libc::off_t,
                len as libc::off_t,
            )
        };
    }
    #[cfg(target_vendor = "apple")]
    {
        use std::os::fd::AsRawFd;
        let hole = libc::fpunchhole_t {
            fp_flags: 0,
            reserved: 0,
            fp_offset: offset as libc::off_t,
            fp_length: len as libc::off_t,
        };
        // SAFETY: F_PUNCHHOLE reads one fpunchhole_t, which outlives the call.
        unsafe { libc::fcntl(file.as_raw_fd(), libc::F_PUNCHHOLE, &hole) };
    }
    #[cfg(not(any(target_os = "linux", target_vendor = "apple")))]
    let _ = (file, offset, len);
}

/// Makes rustls with `ring` this process's TLS provider, before the first HTTPS client is built
/// (reqwest is built without one: its default, aws-lc-rs, does not cross-build; Cargo.toml).
/// Without it, building a client would panic.
pub fn install_tls_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // An error means a provider is installed already: that one is used, which is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// Page-cache hints for batch lookups in a cold cache (`pagecache`): no-ops where the OS has
/// none, so that callers need no `cfg`.
pub mod hints {
    use std::fs::File;

    /// The OS's memory page size (4 KiB on x86_64, 16 KiB on Apple silicon).
    pub fn page_size() -> usize {
        #[cfg(unix)]
        {
            use std::sync::atomic::{AtomicUsize, Ordering};
            static SIZE: AtomicUsize = AtomicUsize::new(0);
            match SIZE.load(Ordering::Relaxed) {
                0 => {
                    // SAFETY: sysconf reads a constant of the system.
                    let size = match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
                        n if n > 0 && (n as usize).is_power_of_two() => n as usize,
                        _ => 4096,
                    };
                    SIZE.store(size, Ordering::Relaxed);
                    size
                }
                size => size,
            }
        }
        #[cfg(not(unix))]
        4096
    }

    /// Tells the kernel that `map` is read at random (`MADV_RANDOM`: no read-ahead around each
    /// fault); nothing on Windows, which has no such advice.
    pub fn random_access(map: &memmap2::Mmap) {
        #[cfg(unix)]
        let _ = map.advise(memmap2::Advice::Random);
        #[cfg(not(unix))]
        let _ = map;
    }

    /// Whether the page at `addr` (page-aligned, inside a live mapping) is in the page cache.
    /// True where it cannot be asked (Windows): no prefetch is then ever started.
    pub fn resident(addr: *const u8) -> bool {
        #[cfg(unix)]
        {
            let mut state = 0u8;
            // SAFETY: `addr` is a page of a live mapping (the caller's promise); `state` holds
            // the one page's byte (`c_char` on macOS, `c_uchar` on Linux: one byte either way).
            let ok = unsafe {
                libc::mincore(addr as *mut libc::c_void, 1, (&mut state as *mut u8).cast())
            } == 0;
            !ok || state & 1 == 1
        }
        #[cfg(not(unix))]
        {
            let _ = addr;
            true
        }
    }

    /// Asks the kernel to start reading `len` bytes of a mapping at `addr` (page-aligned, inside
    /// a live mapping) into the page cache.
    pub fn will_need(addr: *const u8, len: usize) {
        #[cfg(unix)]
        // SAFETY: the range lies within a live mapping; WILLNEED changes no memory contents.
        unsafe {
            libc::madvise(addr as *mut libc::c_void, len, libc::MADV_WILLNEED)
        };
        #[cfg(not(unix))]
        let _ = (addr, len);
    }

    /// Asks the kernel to start reading `len` bytes at `offset` of `file` into the page cache:
    /// `posix_fadvise(WILLNEED)` on Linux, `fcntl(F_RDADVISE)` on macOS, nothing elsewhere.
    pub fn will_need_file(file: &File, offset: u64, len: usize) {
        #[cfg(target_os = "linux")]
        {
            use std::os::fd::AsRawFd;
            // SAFETY: a plain system call on an open descriptor; a hint, its result is not needed.
            unsafe {
                libc::posix_fadvise(
                    file.as_raw_fd(),
                    offset as libc::off_t,
                    len as libc::off_t,
                    libc::POSIX_FADV_WILLNEED,
                )
            };
        }
        #[cfg(target_vendor = "apple")]
        {
            use std::os::fd::AsRawFd;
            let advice = libc::radvisory {
                ra_offset: offset as libc::off_t,
                ra_count: len.min(i32::MAX as usize) as libc::c_int,
            };
            // SAFETY: F_RDADVISE reads one radvisory, which outlives the call; a hint.
            unsafe { libc::fcntl(file.as_raw_fd(), libc::F_RDADVISE, &advice) };
        }
        #[cfg(not(any(target_os = "linux", target_vendor = "apple")))]
        let _ = (file, offset, len);
    }
}

#[cfg(unix)]
mod unix {
    use std::ffi::CString;
    use std::io;
    use std::os::unix::ffi::OsStrExt;
    use std::path::Path;

    fn c(path: &Path) -> io::Result<CString> {
        CString::new(path.as_os_str().as_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in a path"))
    }

    /// `renameat2(2)` through the system call, so that the library does not need glibc 2.28's
    /// wrapper (wheels target glibc 2.17); Linux 3.15 and later.
    #[cfg(target_os = "linux")]
    pub(super) fn rename2(from: &Path, to: &Path, flags: libc::c_uint) -> io::Result<()> {
        let (from, to) = (c(from)?, c(to)?);
        // SAFETY: two NUL-terminated paths that outlive the call; AT_FDCWD resolves them as given.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_renameat2,
                libc::AT_FDCWD,
                from.as_ptr(),
                libc::AT_FDCWD,
                to.as_ptr(),
                flags,
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// `renamex_np(2)` (macOS 10.12 and later): `RENAME_EXCL` fails with EEXIST if `to`
    /// exists, `RENAME_SWAP` exchanges the two atomically.
    #[cfg(target_vendor = "apple")]
    pub(super) fn renamex(from: &Path, to: &Path, flags: libc::c_uint) -> io::Result<()> {
        let (from, to) = (c(from)?, c(to)?);
        // SAFETY: two NUL-terminated paths that outlive the call.
        let rc = unsafe { libc::renamex_np(from.as_ptr(), to.as_ptr(), flags) };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }
}

#[cfg(windows)]
mod windows {
    use std::fs::File;
    use std::io;
    use std::os::windows::ffi::OsStrExt;
    use std::os::windows::io::AsRawHandle;
    use std::path::Path;
    use windows_sys::Win32::Storage::FileSystem as fs;

    fn wide(path: &Path) -> Vec<u16> {
        path.as_os_str().encode_wide().chain([0]).collect()
    }

    /// `MoveFileExW` without `MOVEFILE_REPLACE_EXISTING`: fails if `to` exists (a file or a
    /// directory), atomically on one volume.
    pub(super) fn move_file(from: &Path, to: &Path) -> io::Result<()> {
        let (from, to) = (wide(from), wide(to));
        // SAFETY: two NUL-terminated UTF-16 paths that outlive the call.
        let ok = unsafe { fs::MoveFileExW(from.as_ptr(), to.as_ptr(), fs::MOVEFILE_WRITE_THROUGH) };
        if ok != 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        // ERROR_ALREADY_EXISTS (183) and ERROR_FILE_EXISTS (80) are what a taken name gives.
        match e.raw_os_error() {
            Some(80) | Some(183) => Err(io::Error::new(io::ErrorKind::AlreadyExists, e)),
            _ => Err(e),
        }
    }

    /// The volume serial number and the file index of an open handle.
    pub(super) fn identity(file: &File) -> io::Result<(u64, u64)> {
        // SAFETY: all-zero is a valid BY_HANDLE_FILE_INFORMATION (plain integers).
        let mut info: fs::BY_HANDLE_FILE_INFORMATION = unsafe { std::mem::zeroed() };
        // SAFETY: a handle the `File` owns, and room for one record, which the call fills.
        let ok = unsafe { fs::GetFileInformationByHandle(file.as_raw_handle(), &mut info) };
        if ok == 0 {
            return Err(io::Error::last_os_error());
        }
        let index = u64::from(info.nFileIndexHigh) << 32 | u64::from(info.nFileIndexLow);
        Ok((u64::from(info.dwVolumeSerialNumber), index))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn rename_noreplace_moves_to_a_free_name_and_refuses_a_taken_one() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b, c) = (
            dir.path().join("a"),
            dir.path().join("b"),
            dir.path().join("c"),
        );
        std::fs::write(&a, b"new").unwrap();
        std::fs::write(&b, b"old").unwrap();
        let e = rename_noreplace(&a, &b).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists, "{e}");
        assert_eq!(std::fs::read(&a).unwrap(), b"new");
        assert_eq!(std::fs::read(&b).unwrap(), b"old");
        // A directory is refused as a file is.
        std::fs::create_dir(&c).unwrap();
        assert_eq!(
            rename_noreplace(&a, &c).unwrap_err().kind(),
            io::ErrorKind::AlreadyExists
        );
        rename_noreplace(&a, &dir.path().join("d")).unwrap();
        assert_eq!(std::fs::read(dir.path().join("d")).unwrap(), b"new");
        assert!(!a.exists());
    }

    #[test]
    fn exchange_swaps_files_and_directories() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::write(&a, b"new").unwrap();
        std::fs::write(&b, b"old").unwrap();
        exchange(&a, &b).unwrap();
        assert_eq!(std::fs::read(&b).unwrap(), b"new");
        assert_eq!(std::fs::read(&a).unwrap(), b"old");
        let (x, y) = (dir.path().join("x"), dir.path().join("y"));
        for (d, name) in [(&x, "new"), (&y, "old")] {
            std::fs::create_dir(d).unwrap();
            std::fs::write(d.join(name), b"").unwrap();
        }
        exchange(&x, &y).unwrap();
        assert!(y.join("new").exists() && x.join("old").exists());
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            4,
            "nothing left aside"
        );
    }

    #[test]
    fn an_https_client_builds_with_the_ring_provider() {
        // reqwest has no provider of its own here: without the install, `build` panics.
        install_tls_provider();
        let store = object_store::http::HttpBuilder::new()
            .with_url("https://127.0.0.1:9/")
            .build();
        assert!(store.is_ok(), "{:?}", store.err());
        assert!(rustls::crypto::CryptoProvider::get_default().is_some());
    }

    /// Overwriting a store that a reader has open: on Unix the reader keeps the old version
    /// and the path names the new one; Windows refuses to replace a mapped file, so the write
    /// fails and nothing changes (docs/wheels.md).
    #[test]
    fn overwrite_of_an_open_store() {
        use crate::{Schema, Store, Writer, WriterOptions};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.docstore");
        let build = |n: u32, overwrite: bool| -> crate::Result<()> {
            let options = WriterOptions {
                overwrite,
                ..WriterOptions::default()
            };
            let mut writer = Writer::create(&path, Schema::new(Vec::new())?, options)?;
            for i in 0..n {
                writer.add(&format!("k{i}"), &[])?;
            }
            writer.finish().map(|_| ())
        };
        build(3, false).unwrap();
        let open = Store::open(&path).unwrap();
        let again = build(5, true);
        assert_eq!(open.len(), 3, "the open reader keeps its version");
        #[cfg(windows)]
        {
            let e = again.unwrap_err();
            assert!(e.to_string().to_lowercase().contains("denied"), "{e}");
            assert_eq!(Store::open(&path).unwrap().len(), 3, "the old store stays");
        }
        #[cfg(not(windows))]
        {
            again.unwrap();
            assert_eq!(Store::open(&path).unwrap().len(), 5);
        }
        drop(open);
        build(6, true).unwrap();
        assert_eq!(
            Store::open(&path).unwrap().len(),
            6,
            "closed: replaced everywhere"
        );
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(left.len(), 1, "no scratch or lock file is left: {left:?}");
    }

    #[test]
    fn positional_reads_and_writes_and_identity() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let file = File::options()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .unwrap();
        write_all_at(&file, b"world", 6).unwrap();
        write_all_at(&file, b"hello ", 0).unwrap();
        let mut buf = [0u8; 5];
        read_exact_at(&file, &mut buf, 6).unwrap();
        assert_eq!(&buf, b"world");
        let e = read_exact_at(&file, &mut buf, 8).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        assert_eq!(identity(&file).unwrap(), identity_at(&path).unwrap());
        std::fs::write(dir.path().join("g"), b"").unwrap();
        assert_ne!(
            identity(&file).unwrap(),
            identity_at(&dir.path().join("g")).unwrap()
        );
        assert_ne!(
            identity_at(dir.path()).unwrap(),
            identity_at(&path).unwrap()
        );
    }

    #[test]
    fn a_lock_excludes_another_handle_until_let_go() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lock");
        let one = File::create(&path).unwrap();
        let two = File::options().write(true).open(&path).unwrap();
        assert!(lock(&one));
        assert!(matches!(
            two.try_lock(),
            Err(std::fs::TryLockError::WouldBlock)
        ));
        unlock(&one);
        assert!(two.try_lock().is_ok());
    }

    #[test]
    fn reserve_extends_and_punch_hole_keeps_the_size() {
        let mut file = tempfile::tempfile().unwrap();
        reserve(&file, 1 << 16).unwrap();
        assert_eq!(file.metadata().unwrap().len(), 1 << 16);
        file.write_all(&[7u8; 8192]).unwrap();
        punch_hole(&file, 0, 4096);
        assert_eq!(file.metadata().unwrap().len(), 1 << 16);
        let mut buf = [1u8; 4];
        read_exact_at(&file, &mut buf, 4096).unwrap();
        assert_eq!(buf, [7; 4], "bytes past the hole stay");
        reserve(&file, 100).unwrap();
        assert_eq!(file.metadata().unwrap().len(), 1 << 16, "never shrinks");
        let before = now_seconds();
        assert!(before > 1_700_000_000 && now_seconds() >= before);
    }
}
