//! A collection directory held open while a collection is opened from it.
//!
//! `seal(..., overwrite=True)` exchanges the directory at the target with a new one, then removes
//! the old one. An open that resolved the target's path once per file could read the old
//! manifest and a new shard (a mix, refused as damage), or find a file the seal had just
//! removed. Every file is opened relative to one directory descriptor instead, so that one open
//! reads one version; `replaced` tells a failure that a concurrent publish explains.

use crate::error::{Error, Result};
use std::fs::File;
use std::path::{Path, PathBuf};
#[cfg(unix)]
use {
    std::ffi::CString,
    std::os::unix::ffi::OsStrExt,
    std::os::unix::fs::{MetadataExt, OpenOptionsExt},
    std::os::unix::io::{AsRawFd, FromRawFd},
};

pub(super) struct CollectionDir {
    fd: File,
    path: PathBuf,
}

#[cfg(unix)]
impl CollectionDir {
    pub(super) fn open(path: &Path) -> Result<CollectionDir> {
        let fd = File::options()
            .read(true)
            .custom_flags(libc::O_DIRECTORY)
            .open(path)?;
        Ok(CollectionDir {
            fd,
            path: path.to_path_buf(),
        })
    }

    /// The path the directory was opened by.
    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the path now names another directory than the one opened (or nothing): the
    /// collection was replaced or removed since.
    pub(super) fn replaced(&self) -> bool {
        match (self.fd.metadata(), std::fs::metadata(&self.path)) {
            (Ok(held), Ok(now)) => (held.dev(), held.ino()) != (now.dev(), now.ino()),
            _ => true,
        }
    }

    /// Opens the regular file `relative` (a name the manifest gave, checked to stay inside) in
    /// this directory, whatever the path names meanwhile.
    pub(super) fn open_file(&self, relative: &Path) -> Result<File> {
        let shown = self.path.join(relative);
        let named = |e: std::io::Error| {
            Error::Io(std::io::Error::new(
                e.kind(),
                format!("{}: {e}", shown.display()),
            ))
        };
        let name = CString::new(relative.as_os_str().as_bytes()).map_err(|_| {
            Error::Io(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{:?}: a NUL in a file name", relative.display().to_string()),
            ))
        })?;
        // Opening a FIFO for reading blocks until a writer comes: look before opening (what is
        // opened is looked at again, in case it changed between the two looks).
        let mut stat = std::mem::MaybeUninit::<libc::stat>::uninit();
        // SAFETY: a directory descriptor `self.fd` owns, a NUL-terminated name that outlives the
        // call, and room for one `stat`, which the call fills when it returns 0.
        let rc = unsafe { libc::fstatat(self.fd.as_raw_fd(), name.as_ptr(), stat.as_mut_ptr(), 0) };
        if rc != 0 {
            return Err(named(std::io::Error::last_os_error()));
        }
        // SAFETY: filled by the successful call above.
        let mode = unsafe { stat.assume_init() }.st_mode;
        not_regular(mode, &shown)?;
        // SAFETY: as for `fstatat`; the descriptor returned is checked before use.
        let fd = unsafe {
            libc::openat(
                self.fd.as_raw_fd(),
                name.as_ptr(),
                libc::O_RDONLY | libc::O_NONBLOCK | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(named(std::io::Error::last_os_error()));
        }
        // SAFETY: a descriptor just opened, owned by nothing else: the `File` closes it.
        let file = unsafe { File::from_raw_fd(fd) };
        let mode = file.metadata().map_err(named)?.mode();
        // `mode_t` is u16 on macOS; a mode's bits all fit.
        not_regular(mode as libc::mode_t, &shown)?;
        Ok(file)
    }
}

/// Windows has no `openat`: the directory is held open (a handle with backup semantics, which
/// is how Windows opens a directory), and files are opened by path under it. A publish that
/// exchanged the directory meanwhile is what `replaced` tells, as on Unix; what Windows adds is
/// that the exchange itself is refused while a file in the directory is open (docs/wheels.md).
#[cfg(windows)]
impl CollectionDir {
    fn open_dir(path: &Path) -> std::io::Result<File> {
        use std::os::windows::fs::OpenOptionsExt;
        File::options()
            .read(true)
            .custom_flags(windows_sys::Win32::Storage::FileSystem::FILE_FLAG_BACKUP_SEMANTICS)
            .open(path)
    }

    pub(super) fn open(path: &Path) -> Result<CollectionDir> {
        let fd = Self::open_dir(path)?;
        if !fd.metadata()?.is_dir() {
            return Err(Error::Io(std::io::Error::new(
                std::io::ErrorKind::NotADirectory,
                format!("{} is not a directory", path.display()),
            )));
        }
        Ok(CollectionDir {
            fd,
            path: path.to_path_buf(),
        })
    }

    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    pub(super) fn replaced(&self) -> bool {
        let now = Self::open_dir(&self.path).and_then(|d| crate::runtime::platform::identity(&d));
        match (crate::runtime::platform::identity(&self.fd), now) {
            (Ok(held), Ok(now)) => held != now,
            _ => true,
        }
    }

    pub(super) fn open_file(&self, relative: &Path) -> Result<File> {
        let shown = self.path.join(relative);
        let named = |e: std::io::Error| {
            Error::Io(std::io::Error::new(
                e.kind(),
                format!("{}: {e}", shown.display()),
            ))
        };
        let file = crate::runtime::platform::no_follow(File::options().read(true), 0o644)
            .open(&shown)
            .map_err(named)?;
        let kind = file.metadata().map_err(named)?.file_type();
        let what = if kind.is_file() {
            return Ok(file);
        } else if kind.is_dir() {
            "a directory"
        } else {
            "not a regular file (a link or a device)"
        };
        Err(Error::Io(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{} is {what}", shown.display()),
        )))
    }
}

/// An error unless `mode` is a regular file's.
#[cfg(unix)]
fn not_regular(mode: libc::mode_t, shown: &Path) -> Result<()> {
    let what = match mode & libc::S_IFMT {
        libc::S_IFREG => return Ok(()),
        libc::S_IFDIR => "a directory",
        _ => "not a regular file (a FIFO, socket or device)",
    };
    Err(Error::Io(std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        format!("{} is {what}", shown.display()),
    )))
}
