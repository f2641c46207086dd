//! Remote reads counted where they are made: a store file and a collection uploaded to an
//! in-memory object store (object_store's `InMemory`) behind a wrapper that counts what it is
//! asked (requests, bytes, round trips) and answers each request after a fixed latency, as a
//! network does. A round trip is counted as a network would make one wait: a request that
//! starts once another has been answered is one round after it (the depth of the chain of
//! requests each waited for), so requests sent together are one round. docs/remote.md's promises are asserted here: an open costs two requests, a
//! cold lookup by a short id two round trips, a cold batch two, whatever its size or its
//! number of shards (their requests go out together).

mod common;

use async_trait::async_trait;
use bytes::Bytes;
use common::{key, number, sealed, write};
use docstore_core::storage::{RemoteOptions, Source};
use docstore_core::{Collection, RecordBatch};
use futures::stream::BoxStream;
use object_store::memory::InMemory;
use object_store::path::Path as ObjectPath;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    ObjectStoreExt, PutMultipartOptions, PutOptions, PutPayload, PutResult,
};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// What each request waits before it is answered: long enough that requests sent together
/// overlap (and count as one round), as on a network.
const LATENCY: Duration = Duration::from_millis(40);

/// `InMemory`, counting the reads it answers, and the most it answered at once (`peak`). By
/// default each read waits `LATENCY`, however many are in flight: a server that scales. Set
/// `capacity`, and a read that arrives with more in flight is refused (after the latency, as a
/// 503 of an overloaded server); set `workers`, and the latency grows with the load (that many
/// reads are worked on at once: the latency times the reads in flight over the workers).
#[derive(Debug, Default)]
struct Counting {
    inner: InMemory,
    requests: AtomicU64,
    bytes: AtomicU64,
    /// The deepest chain of requests answered so far: a request started now is one deeper.
    depth: AtomicU64,
    in_flight: AtomicU64,
    peak: AtomicU64,
    capacity: AtomicU64,
    refused: AtomicU64,
    workers: AtomicU64,
}

/// Requests, bytes and round trips, as `Counting` saw them (and the client's own counters).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Seen {
    requests: u64,
    bytes: u64,
    rounds: u64,
}

impl Counting {
    fn seen(&self) -> Seen {
        Seen {
            requests: self.requests.load(Ordering::SeqCst),
            bytes: self.bytes.load(Ordering::SeqCst),
            rounds: self.depth.load(Ordering::SeqCst),
        }
    }
}

impl std::fmt::Display for Counting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Counting({})", self.inner)
    }
}

#[async_trait]
impl ObjectStore for Counting {
    async fn put_opts(
        &self,
        location: &ObjectPath,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &ObjectPath,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &ObjectPath,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.requests.fetch_add(1, Ordering::SeqCst);
        let depth = self.depth.load(Ordering::SeqCst) + 1;
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
        let capacity = self.capacity.load(Ordering::SeqCst);
        let workers = self.workers.load(Ordering::SeqCst);
        match workers {
            0 => tokio::time::sleep(LATENCY).await,
            // A quarter of the latency a read, `workers` at once.
            w => tokio::time::sleep(LATENCY / 4 * now.div_ceil(w) as u32).await,
        }
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        if capacity > 0 && now > capacity {
            self.refused.fetch_add(1, Ordering::SeqCst);
            return Err(object_store::Error::Generic {
                store: "Counting",
                source: "503 Slow Down".into(),
            });
        }
        let got = self.inner.get_opts(location, options).await;
        if let Ok(got) = &got {
            self.bytes
                .fetch_add(got.range.end - got.range.start, Ordering::SeqCst);
        }
        self.depth.fetch_max(depth, Ordering::SeqCst);
        got
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<ObjectPath>>,
    ) -> BoxStream<'static, object_store::Result<ObjectPath>> {
        self.inner.delete_stream(locations)
    }

    fn list(
        &self,
        prefix: Option<&ObjectPath>,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(
        &self,
        prefix: Option<&ObjectPath>,
    ) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &ObjectPath,
        to: &ObjectPath,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

/// Uploads `local` (a file, or a collection's directory, recursively) to `at` in `store`.
fn upload(store: &Counting, local: &Path, at: &str) {
    if local.is_dir() {
        for entry in std::fs::read_dir(local).unwrap() {
            let entry = entry.unwrap();
            let name = format!("{at}/{}", entry.file_name().to_string_lossy());
            upload(store, &entry.path(), &name);
        }
        return;
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let (path, bytes) = (ObjectPath::from(at), std::fs::read(local).unwrap());
    (runtime.block_on(store.inner.put(&path, Bytes::from(bytes).into()))).unwrap();
}

/// A remote store or collection at `url` read through `store`, with a cache of its own in
/// `cache`, sending as many requests at once as its rounds have (up to 256, from the first):
/// what is counted here is the rounds a read needs, not the limit's ramp (its own tests, below).
fn open(url: &str, store: &Arc<Counting>, cache: &Path) -> Collection {
    open_with(url, store, cache, &[("initial_in_flight", "256")])
}

fn open_with(
    url: &str,
    store: &Arc<Counting>,
    cache: &Path,
    options: &[(&str, &str)],
) -> Collection {
    let options = options.iter().map(|(k, v)| (k.to_string(), v.to_string()));
    let options =
        RemoteOptions::new(options.collect(), Some(cache.to_path_buf()), Some(1 << 30)).unwrap();
    let source = Source::over(url, options, store.clone()).unwrap();
    Collection::open_source(url, source).unwrap()
}

/// The client's counters, as `Seen` (`_remote_stats` in Python).
fn reported(c: &Collection) -> Seen {
    let stats = c.source().stats().expect("a remote collection");
    Seen {
        requests: stats.requests.load(Ordering::SeqCst),
        bytes: stats.bytes.load(Ordering::SeqCst),
        rounds: stats.rounds.load(Ordering::SeqCst),
    }
}

/// What the server counted from `before` to now, once checked to be the requests and bytes
/// the client counted; the rounds, the more of the server's and the client's (`round_trips` in
/// Python, which counts rounds of its own fetches).
fn since(c: &Collection, store: &Counting, before: (Seen, Seen)) -> Seen {
    let (server, client) = (store.seen(), reported(c));
    let delta = |now: Seen, then: Seen| Seen {
        requests: now.requests - then.requests,
        bytes: now.bytes - then.bytes,
        rounds: now.rounds - then.rounds,
    };
    let (server, client) = (delta(server, before.0), delta(client, before.1));
    assert_eq!(
        (server.requests, server.bytes),
        (client.requests, client.bytes),
        "what the server answered is what the client counted"
    );
    Seen {
        rounds: server.rounds.max(client.rounds),
        ..server
    }
}

/// Documents of a store large enough that the open's first request (128 KiB) holds none of
/// its key index or documents.
const DOCS: u64 = 30_000;

struct Fixture {
    _dir: tempfile::TempDir,
    store: Arc<Counting>,
    cache: std::path::PathBuf,
}

fn fixture(collection: bool) -> (Fixture, &'static str) {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Counting::default());
    let url = match collection {
        false => {
            let file = write(&dir.path().join("corpus.docstore"), 0..DOCS);
            upload(&store, &file, "corpus.docstore");
            "s3://bucket/corpus.docstore"
        }
        true => {
            let third = DOCS / 3;
            let local = sealed(dir.path(), "coll", &[third, third, DOCS - 2 * third]);
            upload(&store, &local, "coll");
            "s3://bucket/coll/"
        }
    };
    let cache = dir.path().join("cache");
    (
        Fixture {
            _dir: dir,
            store,
            cache,
        },
        url,
    )
}

/// Opens, then reads one id cold and a batch cold: what each cost, as the server saw it.
fn cold_costs(collection: bool) -> (Seen, Seen, Seen) {
    let (f, url) = fixture(collection);
    let c = open(url, &f.store, &f.cache);
    let opened = since(&c, &f.store, (Seen::zero(), Seen::zero()));

    let before = (f.store.seen(), reported(&c));
    let mut batch = RecordBatch::default();
    assert_eq!(
        c.read_one(key(1234).as_bytes(), &mut batch).unwrap(),
        Some(1234)
    );
    assert_eq!(number(batch.get(0)), 1234);
    let lookup = since(&c, &f.store, before);

    // A batch of ids spread over every shard, none read before: fewer requests than may be in
    // flight at once (256), which would make a third round.
    let ids: Vec<String> = (0..DOCS)
        .step_by(211)
        .filter(|&i| i != 1234)
        .map(key)
        .collect();
    let keys: Vec<&[u8]> = ids.iter().map(|k| k.as_bytes()).collect();
    let before = (f.store.seen(), reported(&c));
    let located = c.locate_batch(&keys).unwrap();
    batch.clear();
    let found = c.read_located(&located, &mut batch).unwrap();
    assert!(found.iter().all(Option::is_some));
    assert_eq!(batch.len(), ids.len());
    let many = since(&c, &f.store, before);

    // Warm: nothing asked.
    let before = (f.store.seen(), reported(&c));
    batch.clear();
    c.read_one(key(1234).as_bytes(), &mut batch).unwrap();
    c.read_located(&c.locate_batch(&keys).unwrap(), &mut batch)
        .unwrap();
    assert_eq!(
        since(&c, &f.store, before),
        Seen::zero(),
        "a warm read asks nothing"
    );
    (opened, lookup, many)
}

impl Seen {
    fn zero() -> Seen {
        Seen {
            requests: 0,
            bytes: 0,
            rounds: 0,
        }
    }
}

// The figures below are main's at 3a4f87d (recorded before the collection stopped naming
// remote types): requests and rounds exactly, bytes at most as many.

#[test]
fn a_remote_store_file_opens_in_two_requests_and_reads_cold_in_two_rounds() {
    let (opened, lookup, many) = cold_costs(false);
    eprintln!("store file: open {opened:?}, lookup {lookup:?}, batch {many:?}");
    // The header, schema and dictionary; then the key fences.
    assert_eq!((opened.requests, opened.rounds), (2, 2), "{opened:?}");
    // The key index block with the blob it locates (a short id is told apart by the block
    // alone, so its blob is fetched with it): one round of two requests.
    assert_eq!((lookup.requests, lookup.rounds), (2, 1), "{lookup:?}");
    assert!(lookup.bytes <= 4224, "{lookup:?}");
    // The blocks of every id with the blobs they locate, then what was not guessed: two
    // rounds, a request a document.
    assert_eq!((many.requests, many.rounds), (142, 2), "{many:?}");
    assert!(many.bytes <= 366_336, "{many:?}");
}

#[test]
fn a_remote_collection_reads_cold_in_two_rounds_over_all_its_shards() {
    let (opened, lookup, many) = cold_costs(true);
    eprintln!("collection: open {opened:?}, lookup {lookup:?}, batch {many:?}");
    // The manifest; then the four files at once: their first bytes, then their key fences.
    assert_eq!((opened.requests, opened.rounds), (9, 3), "{opened:?}");
    // The global index's block with the blob it locates in its shard.
    assert_eq!((lookup.requests, lookup.rounds), (2, 1), "{lookup:?}");
    assert!(lookup.bytes <= 4224, "{lookup:?}");
    // The index's blocks with the blobs they locate in all three shards at once, then the rest.
    assert_eq!((many.requests, many.rounds), (128, 2), "{many:?}");
    assert!(many.bytes <= 365_888, "{many:?}");
}

/// A cold batch of 600 ids of the store file (600 blobs, and the key index blocks before them)
/// through `options`, on a cache of its own (`name`), checked; what the client counted.
fn cold_batch(f: &Fixture, name: &str, options: &[(&str, &str)]) -> (u64, u64, usize) {
    let cache = f.cache.join(name);
    let c = open_with("s3://bucket/corpus.docstore", &f.store, &cache, options);
    let ids: Vec<String> = (0..DOCS).step_by(50).map(key).collect();
    let keys: Vec<&[u8]> = ids.iter().map(|k| k.as_bytes()).collect();
    let mut batch = RecordBatch::default();
    let found = c
        .read_located(&c.locate_batch(&keys).unwrap(), &mut batch)
        .unwrap();
    assert!(found.iter().all(Option::is_some));
    assert_eq!(batch.len(), ids.len());
    for (i, n) in (0..DOCS).step_by(50).enumerate() {
        assert_eq!(number(batch.get(i)), n);
    }
    let stats = c.source().stats().unwrap();
    (
        stats.requests.load(Ordering::SeqCst),
        stats.backoffs.load(Ordering::SeqCst),
        stats.limit.load(Ordering::SeqCst),
    )
}

fn peak(f: &Fixture) -> u64 {
    f.store.peak.swap(0, Ordering::SeqCst)
}

#[test]
fn the_limit_grows_to_the_allowed_depth_while_the_server_keeps_up() {
    let (f, _) = fixture(false);
    let (_, backoffs, limit) = cold_batch(&f, "a", &[("max_in_flight", "64")]);
    // From 32, two more for each answer: 64 in flight within the batch, and no more.
    assert_eq!((peak(&f), backoffs, limit), (64, 0, 64));
}

#[test]
fn a_server_that_slows_with_its_load_is_not_swamped() {
    let (f, _) = fixture(false);
    f.store.workers.store(4, Ordering::SeqCst);
    // Unloaded, a read takes 10 ms; the n-th in flight, 10 ms x n / 4. The limit holds the
    // latency under 3 x 10 + 1 ms: about 12 in flight (it starts at 32, and the first answers
    // of a round come sooner and grow it a little first).
    let (_, _, limit) = cold_batch(&f, "a", &[]);
    let seen = peak(&f);
    assert!(seen <= 48 && limit <= 16, "peak {seen}, limit {limit}");
    // A fixed 256, as before: the server had all the batch's requests at once.
    cold_batch(&f, "b", &[("initial_in_flight", "256")]);
    let fixed = peak(&f);
    assert!(fixed > 200, "{fixed}");
}

#[test]
fn a_server_that_refuses_past_its_capacity_is_backed_off_from() {
    let (f, _) = fixture(false);
    f.store.capacity.store(16, Ordering::SeqCst);
    let (requests, backoffs, limit) = cold_batch(&f, "a", &[("init_backoff", "10ms")]);
    let (seen, refused) = (peak(&f), f.store.refused.load(Ordering::SeqCst));
    eprintln!(
        "requests {requests}, refused {refused}, backoffs {backoffs}, limit {limit}, peak {seen}"
    );
    // The first 32 met a capacity of 16 (the answers among them grew the limit a little before
    // the refusals came): the limit halved, and halves again each time it grows past it (about
    // once per 64 answers: an eighth of a request per answer).
    assert!(
        backoffs >= 1 && limit <= 24,
        "backoffs {backoffs}, limit {limit}"
    );
    assert!(seen <= 48, "{seen}");
    // Refused: the first round's (16 of the first 32, and retries of them sent before the cut
    // was felt: more on a loaded machine, where answers and refusals interleave otherwise), then
    // a few per probe past the capacity. The bound of tests/remote/test_remote_limit.py; a
    // fixed 256 has 240 of its first round refused. (A tenth of the requests alone failed one
    // run in six while the whole suite ran beside it: 76 refused of 650.)
    assert!(
        refused <= 64 + requests / 10,
        "refused {refused} of {requests}"
    );
}
