//! What a path or URL names is decided once, in the core (`Location::of`,
//! `Collection::open_named`): a URL is remote, `file://` and a plain path are local, a directory
//! opens as a collection and a file as a single store, and a missing path is named in its error.

mod common;

use common::{key, sealed, write};
use docstore_core::collection::{is_url, Location};
use docstore_core::{Collection, DataAccess, Error, RemoteOptions};
use std::path::Path;

/// Opens `name` locally; a URL asks for remote options, which this refuses (no network here).
fn open(name: &Path) -> docstore_core::Result<(Collection, Location)> {
    let remote = || -> docstore_core::Result<RemoteOptions> {
        Err(Error::InvalidArgument("remote options asked for".into()))
    };
    Collection::open_named(name, DataAccess::Mmap, remote)
}

#[test]
fn a_url_is_remote_and_file_url_is_a_path() {
    for url in [
        "s3://bucket/corpus.docstore",
        "https://host/c/",
        "gs+x.y-z://b/k",
    ] {
        assert!(is_url(url), "{url}");
        assert_eq!(Location::of(Path::new(url)), Location::Url(url.into()));
        // The remote branch is taken: it asks for its options before any request.
        let err = open(Path::new(url)).err().expect("refused");
        assert!(
            err.to_string().contains("remote options asked for"),
            "{err}"
        );
    }
    for path in [
        "corpus.docstore",
        "/abs/dir",
        "1s3://b/k",
        "s 3://b/k",
        "://x",
        "a/b://c",
        "",
    ] {
        assert!(!is_url(path), "{path:?}");
    }
    assert!(is_url("file:///tmp/x"));
    assert_eq!(
        Location::of(Path::new("file:///tmp/x.docstore")),
        // `absolute`, because on Windows `/tmp` is on the current drive.
        Location::Path(std::path::absolute("/tmp/x.docstore").unwrap())
    );
}

#[test]
fn a_file_opens_as_a_store_a_directory_as_a_collection() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(&dir.path().join("one.docstore"), 0..50);
    let (store, location) = open(&file).unwrap();
    assert!(!store.is_collection() && store.len() == 50);
    assert_eq!(location, Location::Path(file.clone()));
    assert_eq!(store.key_at(7).unwrap(), key(7));

    let url = format!("file://{}", file.display());
    let (store, location) = open(Path::new(&url)).unwrap();
    assert!(!store.is_collection() && store.len() == 50);
    assert_eq!(location, Location::Path(file));

    let coll = sealed(dir.path(), "coll", &[30, 20]);
    let (store, location) = open(&coll).unwrap();
    assert!(store.is_collection() && store.len() == 50);
    assert_eq!(location, Location::Path(coll));
}

#[test]
fn a_relative_path_is_made_absolute() {
    let Location::Path(path) = Location::of(Path::new("some/corpus.docstore")) else {
        panic!("a path");
    };
    assert!(path.is_absolute() && path.ends_with("some/corpus.docstore"));
}

#[test]
fn a_missing_path_is_named_in_its_error() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nothing-here.docstore");
    let Err(Error::Io(io)) = open(&missing) else {
        panic!("a missing path is an I/O error");
    };
    assert_eq!(io.kind(), std::io::ErrorKind::NotFound);
    assert!(
        io.to_string().contains(&missing.display().to_string()),
        "{io}"
    );
    let Err(Error::Io(io)) = open(Path::new("")) else {
        panic!("an empty path is an I/O error");
    };
    assert!(io.to_string().starts_with("'' (an empty path)"), "{io}");
}
