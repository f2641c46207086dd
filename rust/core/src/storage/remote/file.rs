//! Remote stores: byte ranges of an object in S3-compatible storage, GCS, Azure or behind plain
//! HTTP, fetched with the Apache Arrow project's `object_store` client into the node cache
//! (`cache`), which the reader then reads as it reads a local file.
//!
//! - Configuration as the ecosystem does it: each cloud's environment variables (`AWS_*`,
//!   `GOOGLE_*`, `AZURE_*`), then `storage_options` (object_store's keys, plus docstore's own:
//!   `max_in_flight`, `merge_gap`, `max_request_bytes`, `max_retries`, `retry_timeout`,
//!   `init_backoff`, `max_backoff`, `cache_lease`). Options go through each builder's
//!   `with_config`, never `with_client_options`, which would replace what the builder took from
//!   the environment (`AWS_ALLOW_HTTP` included).
//! - Batches: the missing units of every range a batch needs, merged where they are at most
//!   `merge_gap` apart (default 16 KiB: a request costs a round trip, 16 KiB at 1 Gb/s a tenth
//!   of a millisecond; object_store's own `get_ranges` merges up to 1 MiB, which downloads most
//!   of the object for random documents), documents only where they touch (`data_merge_gap`,
//!   0: what lies between two random documents is paid in bytes, not saved in requests), fetched
//!   with at most `max_in_flight` requests at once (default 256: 1024 at once means 1024 new
//!   connections, slower when measured).
//! - Faults: object_store retries timeouts, 5xx and dropped connections with backoff
//!   (`max_retries`, `retry_timeout`); a response of the wrong length, or a body cut short, is
//!   retried here too (twice). What finally surfaces is an `Io` error naming the URL, the byte
//!   range and the cause (`StoreIOError` in Python). Nothing waits forever: every request has
//!   object_store's timeouts (`timeout`, `connect_timeout`), every retry loop a bound.
//! - Damage: cached bytes that fail a check, pinned or not, are dropped and fetched again
//!   (`Collection`'s retry: `invalidate_read`, then `RemoteFile::refetch_pinned`); only bytes
//!   the server itself sends damaged raise `Error::Corrupt`. Heals count in `RemoteStats`.
//! - fork(): a tokio runtime made before a fork hangs forever in the child (its threads are not
//!   there). The runtime and the client are made per process (`process::PerProcess`, as the
//!   decode pool is in `parallel`); a child makes its own and leaks what it inherited.

use crate::error::{Error, Result};
use crate::process::PerProcess;
use crate::storage::cache::{CacheConfig, CacheFile};
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use memmap2::Mmap;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, ObjectStoreScheme, RetryConfig};
use std::mem::ManuallyDrop;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use xxhash_rust::xxh3::xxh3_64;

/// Bytes the first request of an open asks for: the header, the schema and the dictionary (at
/// most 64 KiB) of nearly every store, in one request.
pub const OPEN_PREFIX: u64 = 128 << 10;
/// The shortest lease (`cache_lease`): bytes used within it are never evicted, so that a read
/// finds what its `ensure` just made present.
const MIN_LEASE: u64 = 2;
/// Extra attempts at a range whose response was short or failed after object_store's retries.
const EXTRA_ATTEMPTS: u32 = 2;

/// How to reach and cache a remote store.
#[derive(Clone, Debug)]
pub struct RemoteOptions {
    /// Passed to object_store's builder (`with_config`), after the environment.
    pub storage_options: Vec<(String, String)>,
    pub cache: CacheConfig,
    /// Range requests in flight at once, at most.
    pub max_in_flight: usize,
    /// Missing ranges at most this many bytes apart are fetched in one request.
    pub merge_gap: u64,
    /// The same for documents (ranges of the data section): fetching the bytes between two
    /// documents is paid in bandwidth, not saved in requests.
    pub data_merge_gap: u64,
    /// A request asks for at most this many bytes (larger ranges are split, fetched at once).
    pub max_request: u64,
    /// What one request for a piece of the index is taken to cost, in bytes: a section of the
    /// index is fetched whole once the requests for its pieces have cost its size (0: never).
    pub request_cost: u64,
    pub max_retries: usize,
    pub retry_timeout: Duration,
    pub init_backoff: Duration,
    pub max_backoff: Duration,
}

/// The default cache directory: `DOCSTORE_CACHE_DIR`, else `$XDG_CACHE_HOME/docstore`, else
/// `~/.cache/docstore`.
pub fn default_cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("DOCSTORE_CACHE_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("docstore")
}

/// The default cache budget: `DOCSTORE_CACHE_BYTES`, else 10 GiB.
pub fn default_cache_bytes() -> u64 {
    std::env::var("DOCSTORE_CACHE_BYTES")
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|v| *v >= 0.0)
        .map_or(10 << 30, |v| v as u64)
}

fn invalid(msg: impl Into<String>) -> Error {
    Error::InvalidArgument(msg.into())
}

/// `30s`, `500ms`, `2m`, or a number of seconds.
fn duration(key: &str, value: &str) -> Result<Duration> {
    let v = value.trim();
    // The unit is what ends the value (`1e3ms`: a number may have an exponent).
    let number = v.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit = match &v[number.len()..] {
        "" => "s",
        unit => unit,
    };
    let n: f64 = number
        .trim()
        .parse()
        .ok()
        .filter(|n: &f64| n.is_finite() && *n >= 0.0)
        .ok_or_else(|| {
            invalid(format!(
                "{key}: {value:?} is not a duration (e.g. 30s, 500ms)"
            ))
        })?;
    let seconds = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" | "min" => n * 60.0,
        _ => {
            return Err(invalid(format!(
                "{key}: unknown unit in {value:?} (ms, s, m)"
            )))
        }
    };
    // Bounded (a year): `from_secs_f64` panics past u64 seconds, and nothing waits that long.
    Duration::try_from_secs_f64(seconds)
        .ok()
        .filter(|d| *d <= MAX_DURATION)
        .ok_or_else(|| invalid(format!("{key}: {value:?} is too long (at most a year)")))
}

/// The longest duration an option takes.
const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

fn number(key: &str, value: &str) -> Result<u64> {
    value
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|n| n.is_finite() && *n >= 0.0)
        .map(|n| n as u64)
        .ok_or_else(|| invalid(format!("{key}: {value:?} is not a number")))
}

impl RemoteOptions {
    /// Options from `storage_options` (docstore's own keys taken out), the cache directory
    /// (`None`: the default) and budget (`None`: the default; 0: a private cache).
    pub fn new(
        options: Vec<(String, String)>,
        cache_dir: Option<PathBuf>,
        cache_bytes: Option<u64>,
    ) -> Result<RemoteOptions> {
        let budget = cache_bytes.unwrap_or_else(default_cache_bytes);
        let mut out = RemoteOptions {
            storage_options: Vec::new(),
            cache: CacheConfig {
                dir: (budget > 0).then(|| cache_dir.unwrap_or_else(default_cache_dir)),
                budget,
                lease: 30,
            },
            max_in_flight: 256,
            merge_gap: 16 << 10,
            data_merge_gap: 0,
            max_request: 8 << 20,
            // A request's round trip is shared by the 256 in flight: 25 ms at 1 Gb/s is 3 MB
            // for them all, ~12 KiB each, plus its own overhead (~0.1 ms of CPU measured here).
            request_cost: 32 << 10,
            max_retries: 5,
            retry_timeout: Duration::from_secs(60),
            init_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
        };
        for (key, value) in options {
            match key.to_ascii_lowercase().as_str() {
                "max_in_flight" => {
                    out.max_in_flight = number(&key, &value)?.clamp(1, 4096) as usize
                }
                "merge_gap" => out.merge_gap = number(&key, &value)?,
                "data_merge_gap" => out.data_merge_gap = number(&key, &value)?,
                "max_request_bytes" => out.max_request = number(&key, &value)?.max(64 << 10),
                "request_cost_bytes" => out.request_cost = number(&key, &value)?,
                "max_retries" => out.max_retries = number(&key, &value)? as usize,
                "retry_timeout" => out.retry_timeout = duration(&key, &value)?,
                "init_backoff" => out.init_backoff = duration(&key, &value)?,
                "max_backoff" => out.max_backoff = duration(&key, &value)?,
                "cache_lease" => {
                    // At least MIN_LEASE: a read must find what it just made present.
                    let secs = duration(&key, &value)?.as_secs();
                    out.cache.lease = secs.clamp(MIN_LEASE, u32::MAX.into()) as u32
                }
                _ => out.storage_options.push((key, value)),
            }
        }
        Ok(out)
    }

    fn retry_config(&self) -> RetryConfig {
        RetryConfig {
            backoff: object_store::BackoffConfig {
                init_backoff: self.init_backoff,
                max_backoff: self.max_backoff,
                base: 2.0,
            },
            max_retries: self.max_retries,
            retry_timeout: self.retry_timeout,
        }
    }
}

/// What identifies the object a store was opened from, as its server states it in every
/// response (`ObjectMeta`): its size, and whichever of an S3/GCS/Azure version, an ETag and a
/// Last-Modified it gives. The open's pins every later request (`fetch`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Identity {
    pub size: u64,
    pub version: Option<String>,
    pub e_tag: Option<String>,
    /// Seconds since the epoch (`None`: the server sent none).
    pub last_modified: Option<i64>,
}

impl Identity {
    fn of(meta: &object_store::ObjectMeta) -> Identity {
        // object_store reads a missing Last-Modified as the epoch.
        let seconds = meta.last_modified.timestamp();
        Identity {
            size: meta.size,
            version: meta.version.clone(),
            e_tag: meta.e_tag.clone(),
            last_modified: (seconds != 0).then_some(seconds),
        }
    }

    /// The ETag, if strong: a weak one (`W/...`) never matches `If-Match` (RFC 9110 compares
    /// strongly), and may stay the same while the bytes change.
    fn strong_e_tag(&self) -> Option<&str> {
        self.e_tag.as_deref().filter(|tag| !tag.starts_with("W/"))
    }

    /// Whether anything but the size ties the object to one version: a version, a strong ETag
    /// or a Last-Modified. Bytes of an object that nothing pins are never shared (`RemoteFile`).
    pub fn pins(&self) -> bool {
        self.version.is_some() || self.strong_e_tag().is_some() || self.last_modified.is_some()
    }

    /// Whether a server check ties every response to the version opened: a version, or a
    /// strong ETag (`If-Match`). Else (Last-Modified alone, or a weak ETag) a replacement that
    /// keeps them is not seen in a response: `RemoteFile::fetch` checks the header after.
    pub fn pins_strongly(&self) -> bool {
        self.version.is_some() || self.strong_e_tag().is_some()
    }

    /// A range request for this object only: its version (S3, GCS, Azure: that version is
    /// served even after a replacement) and `If-Match` its strong ETag (the server checks it);
    /// `differs` checks every response besides, for what the server does not.
    fn get_options(&self, range: Range<u64>) -> object_store::GetOptions {
        object_store::GetOptions {
            range: Some(object_store::GetRange::Bounded(range)),
            if_match: self.strong_e_tag().map(str::to_string),
            version: self.version.clone(),
            ..Default::default()
        }
    }

    /// `get_options` for the whole object (a server that ignores Range: `Remote::fetch_whole`).
    fn whole_options(&self) -> object_store::GetOptions {
        object_store::GetOptions {
            range: None,
            ..self.get_options(0..0)
        }
    }

    /// How `response` (a response's identity) shows another object than this one, if it does:
    /// another size, version, ETag (weak ones included) or Last-Modified.
    fn differs(&self, response: &Identity) -> Option<String> {
        if response.size != self.size {
            return Some(format!(
                "its size is {} bytes, not {}",
                response.size, self.size
            ));
        }
        if self.version.is_some() && response.version != self.version {
            return Some(format!(
                "its version is {:?}, not {:?}",
                response.version.as_deref().unwrap_or("none"),
                self.version.as_deref().unwrap_or_default()
            ));
        }
        if response.e_tag != self.e_tag {
            return Some(format!(
                "its ETag is {}, not {}",
                response.e_tag.as_deref().unwrap_or("none"),
                self.e_tag.as_deref().unwrap_or("none")
            ));
        }
        if response.last_modified != self.last_modified {
            return Some("its Last-Modified changed".to_string());
        }
        None
    }

    /// What a server's 412 (`If-Match` failed) says changed.
    fn describe(&self) -> String {
        match self.strong_e_tag() {
            Some(tag) => format!("its ETag is no longer {tag}"),
            None => "it was modified since".to_string(),
        }
    }
}

/// Counters of one remote store (every file of a collection together).
#[derive(Debug, Default)]
pub struct RemoteStats {
    /// Range requests sent (retries included).
    pub requests: AtomicU64,
    /// Bytes received.
    pub bytes: AtomicU64,
    /// Bytes requested for documents (ranges of the data section; the rest is the index).
    pub data_bytes: AtomicU64,
    /// Sequential round trips: fetches that started while no other of this process was under
    /// way (those of a collection's shards, sent together from several threads, are one round).
    pub rounds: AtomicU64,
    /// Bytes of whole index sections bought (see `rent`): at most an eighth of the cache's
    /// budget.
    pub bought: AtomicU64,
    /// Requests retried here after object_store's own retries (short or failed responses).
    pub retries: AtomicU64,
    /// Damaged cached bytes replaced by the server's (see `RemoteFile::refetch`): reads and
    /// opens that found damage in the cache, fetched what they read again and then passed.
    pub heals: AtomicU64,
    pub in_flight: AtomicUsize,
    pub peak_in_flight: AtomicUsize,
}

/// This process's runtime and client (see the module note on fork).
struct Conn {
    /// Shut down without waiting when dropped (see `Drop`).
    runtime: ManuallyDrop<tokio::runtime::Runtime>,
    store: Arc<dyn ObjectStore>,
    /// `max_in_flight` permits, one per request, for every thread and file of this remote: a
    /// batch over 64 shards, fetched from 64 threads at once, still sends at most that many.
    /// Here, not in `Remote`: permits held in a parent at a fork would never come back.
    permits: tokio::sync::Semaphore,
    /// Fetches under way in this process (`RemoteStats::rounds`): here for the same reason.
    fetching: AtomicUsize,
}

/// A remote location (a bucket, a container, an HTTP server) and how to read it: shared by the
/// files of a collection.
pub struct Remote {
    /// The URL as given, credentials included: only the client's builder sees it.
    url: url::Url,
    /// The URL as shown in messages (`crate::storage::url::redact`).
    shown: String,
    scheme: ObjectStoreScheme,
    options: RemoteOptions,
    /// What besides the URL says which server and account the objects are on (the endpoint,
    /// account, bucket as configured): part of every cache entry's key (`cache_key`).
    locator: std::sync::OnceLock<String>,
    conn: PerProcess<Conn>,
    /// The client to use instead of one built from the URL (`Remote::over`: tests).
    given: Option<Arc<dyn ObjectStore>>,
    pub stats: RemoteStats,
    /// The server answered a ranged GET with the whole object (Python's `http.server`): its
    /// files are read whole into the cache (`RemoteFile::fill`), within the cache's budget.
    ignores_ranges: std::sync::atomic::AtomicBool,
    /// What this remote's files read whole: what the budget check (`claim_whole`) and the
    /// warning (`take_warning`) count.
    whole: std::sync::Mutex<Whole>,
    /// S3 with no credentials configured: the instance metadata endpoint that object_store asks
    /// for them instead, so that its failure is told as "no credentials" (`error`).
    metadata: std::sync::OnceLock<String>,
}

/// Files of one remote read whole (`Remote::ignores_ranges`).
#[derive(Default)]
struct Whole {
    /// Files and their bytes, all claimed against the cache's budget.
    files: u64,
    bytes: u64,
    /// Of those, the bytes fetched at open (the rest were in the cache already).
    fetched: u64,
    /// Whether the warning was given (once per open).
    warned: bool,
}

impl Drop for Conn {
    /// Without waiting for the runtime's blocking threads (a DNS lookup that hangs), and without
    /// the panic of dropping a runtime inside another's context. `PerProcess` drops it only in
    /// the process that made it.
    fn drop(&mut self) {
        // SAFETY: taken once, here; `self.runtime` is not used again.
        let runtime = unsafe { ManuallyDrop::take(&mut self.runtime) };
        runtime.shutdown_background();
    }
}

/// What failed under an object_store error, as a user can act on it: whether a connection could
/// not be made (`HttpErrorKind::Connect`), the host and port asked (from the failed request's
/// text: the URL's, or an endpoint's), the innermost cause ("Connection refused"), and the whole
/// chain of messages.
struct Cause {
    connect: bool,
    host: Option<String>,
    innermost: String,
    chain: String,
}

impl Cause {
    fn of(e: &object_store::Error) -> Cause {
        use object_store::client::{HttpError, HttpErrorKind};
        let mut cause = Cause {
            connect: false,
            host: None,
            innermost: String::new(),
            chain: String::new(),
        };
        let mut next: Option<&(dyn std::error::Error + 'static)> = Some(e);
        while let Some(error) = next {
            if let Some(http) = error.downcast_ref::<HttpError>() {
                cause.connect |= http.kind() == HttpErrorKind::Connect;
            }
            cause.innermost = error.to_string();
            cause.chain.push_str(&cause.innermost);
            cause.chain.push('\n');
            next = error.source();
        }
        // object_store's request errors read "Error performing GET http://host:port/path in ...".
        cause.host = (cause.chain.split("Error performing ").nth(1))
            .and_then(|rest| rest.split_whitespace().nth(1))
            .and_then(|uri| url::Url::parse(uri).ok())
            .and_then(|uri| {
                Some(format!(
                    "{}:{}",
                    uri.host_str()?,
                    uri.port_or_known_default()?
                ))
            });
        cause
    }

    /// The status a server answered with, if it is one ("403 Forbidden").
    fn status(&self) -> Option<&str> {
        let rest = self.chain.split("status code: ").nth(1)?;
        Some(rest.split([':', '\n']).next()?.trim())
    }
}

impl Remote {
    /// `e`, an object_store error of a request for `url` (`what`: the bytes asked), as a core
    /// error a user can act on, without what the server's page says or the URL's credentials:
    /// - a missing object: `not found: URL` (`StoreNotFoundError`);
    /// - S3 with no credentials configured, whose instance metadata endpoint gave none: that no
    ///   credentials were found, and where to give them;
    /// - a connection that could not be made: `cannot connect to host:port`;
    /// - anything else as object_store says it.
    fn error(&self, url: &str, what: &str, e: object_store::Error) -> Error {
        use std::io::ErrorKind;
        let cause = Cause::of(&e);
        let (kind, message) = match &e {
            _ if (self.metadata.get()).is_some_and(|m| cause.chain.contains(m.as_str())) => {
                let endpoint = self.metadata.get().map_or("", String::as_str);
                let why = match cause.status() {
                    Some(status) if !cause.connect => format!("it answered {status}"),
                    _ => format!("it cannot be reached: {}", cause.innermost),
                };
                (
                    ErrorKind::PermissionDenied,
                    format!(
                        "{url}{what}: no AWS credentials found: none in the environment or \
                         storage_options, and the instance metadata service ({endpoint}) gave \
                         none ({why}). Set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and \
                         AWS_SESSION_TOKEN for temporary ones), or give storage_options=\
                         {{\"aws_access_key_id\": ..., \"aws_secret_access_key\": ...}}; a public \
                         bucket is read without credentials with storage_options=\
                         {{\"skip_signature\": \"true\"}} (or AWS_SKIP_SIGNATURE=true)"
                    ),
                )
            }
            object_store::Error::NotFound { .. } => {
                (ErrorKind::NotFound, format!("not found: {url}{what}"))
            }
            _ if cause.connect => {
                let host = (cause.host.clone())
                    .or_else(|| {
                        let port = self.url.port_or_known_default()?;
                        Some(format!("{}:{port}", self.url.host_str()?))
                    })
                    .unwrap_or_else(|| "the server".into());
                (
                    ErrorKind::ConnectionRefused,
                    format!(
                        "cannot connect to {host} ({url}{what}): {}; is the server running, \
                         and is that its address?",
                        cause.innermost
                    ),
                )
            }
            object_store::Error::PermissionDenied { .. }
            | object_store::Error::Unauthenticated { .. } => {
                (ErrorKind::PermissionDenied, format!("{url}{what}: {e}"))
            }
            _ => (ErrorKind::Other, format!("{url}{what}: {e}")),
        };
        // object_store's message may show the URL it requested, userinfo included.
        Error::Io(std::io::Error::new(kind, crate::storage::url::redact_text(&message)))
    }
}

impl Remote {
    /// Counts `bytes` of whole sections as bought, if they fit the eighth of the cache's budget
    /// that purchases may take (the private cache's budget when `cache_bytes=0`).
    pub fn claim_purchase(&self, bytes: u64) -> bool {
        let budget = match self.options.cache.budget {
            0 => crate::storage::cache::PRIVATE_BUDGET,
            budget => budget,
        };
        (self.stats.bought)
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bought| {
                (bought + bytes <= budget / 8).then_some(bought + bytes)
            })
            .is_ok()
    }

    /// A client for `url` (its scheme and bucket or host; the path is the caller's), made at once
    /// so that bad options fail here.
    pub fn new(url: &str, options: RemoteOptions) -> Result<Arc<Remote>> {
        Remote::with(url, options, None)
    }

    /// `new` over `store` instead of the client the URL names: what the core's tests read
    /// through (an in-memory store that counts requests). Not reachable from Python.
    #[doc(hidden)]
    pub fn over(
        url: &str,
        options: RemoteOptions,
        store: Arc<dyn ObjectStore>,
    ) -> Result<Arc<Remote>> {
        Remote::with(url, options, Some(store))
    }

    fn with(
        url: &str,
        options: RemoteOptions,
        given: Option<Arc<dyn ObjectStore>>,
    ) -> Result<Arc<Remote>> {
        let shown = crate::storage::url::redact(url);
        let bad =
            |e: &dyn std::fmt::Display| invalid(crate::storage::url::redact_text(&format!("{shown}: {e}")));
        let parsed = url::Url::parse(url).map_err(|e| bad(&e))?;
        let (scheme, _) = ObjectStoreScheme::parse(&parsed).map_err(|e| bad(&e))?;
        if matches!(scheme, ObjectStoreScheme::Local | ObjectStoreScheme::Memory) {
            return Err(invalid(format!(
                "{shown}: not a remote URL (s3://, gs://, az://, http(s)://); give a path"
            )));
        }
        let remote = Arc::new(Remote {
            url: parsed,
            shown,
            scheme,
            options,
            locator: std::sync::OnceLock::new(),
            conn: PerProcess::new(),
            given,
            stats: RemoteStats::default(),
            ignores_ranges: Default::default(),
            whole: Default::default(),
            metadata: std::sync::OnceLock::new(),
        });
        remote.conn()?;
        Ok(remote)
    }

    pub fn options(&self) -> &RemoteOptions {
        &self.options
    }

    /// The name of the cache entry of the object at `path` that `identity` identifies: a hash
    /// of what the client knows, never of what the object says of itself. The normalised URL
    /// (scheme, host and port or bucket; no credentials, no query), the endpoint and account
    /// configured, the object's path, version, ETag, Last-Modified and size.
    pub fn cache_key(&self, path: &ObjectPath, identity: &Identity) -> String {
        let origin = match self.url.port() {
            Some(port) => format!(
                "{}://{}:{port}",
                self.url.scheme(),
                self.url.host_str().unwrap_or_default()
            ),
            None => format!(
                "{}://{}",
                self.url.scheme(),
                self.url.host_str().unwrap_or_default()
            ),
        };
        let size = identity.size.to_string();
        let modified = identity.last_modified.map(|s| s.to_string());
        let parts = [
            Some(origin.as_str()),
            self.locator.get().map(String::as_str),
            Some(path.as_ref()),
            identity.version.as_deref(),
            identity.e_tag.as_deref(),
            modified.as_deref(),
            Some(size.as_str()),
        ];
        // Each part length-prefixed (and absent apart from empty): no two keys hash one input.
        let mut input = Vec::new();
        for part in parts {
            match part {
                Some(part) => {
                    input.extend_from_slice(&(part.len() as u64).to_le_bytes());
                    input.extend_from_slice(part.as_bytes());
                }
                None => input.extend_from_slice(&u64::MAX.to_le_bytes()),
            }
        }
        format!("{:032x}", xxhash_rust::xxh3::xxh3_128(&input))
    }

    /// The object path of `url` (a URL under this remote's).
    pub fn path_of(&self, url: &str) -> Result<ObjectPath> {
        let bad =
            |e: &dyn std::fmt::Display| invalid(crate::storage::url::redact_text(&format!("{url}: {e}")));
        let parsed = url::Url::parse(url).map_err(|e| bad(&e))?;
        let (_, path) = ObjectStoreScheme::parse(&parsed).map_err(|e| bad(&e))?;
        Ok(path)
    }

    fn build(&self) -> Result<Arc<dyn ObjectStore>> {
        use object_store::{aws, azure, gcp, http, ClientConfigKey};
        crate::platform::install_tls_provider();
        let url = self.url.as_str();
        let shown = &self.shown;
        let options = &self.options.storage_options;
        let unknown = |key: &str| invalid(format!("unknown storage option {key:?} for {shown}"));
        let built =
            |e: object_store::Error| invalid(crate::storage::url::redact_text(&format!("{shown}: {e}")));
        let retry = self.options.retry_config();
        // Each builder starts from the environment, then takes the options one by one: never
        // `with_client_options`, which would drop what came from the environment.
        macro_rules! build {
            ($builder:expr, $key:ty, [$($locator:expr),*]) => {
                build!($builder, $key, [$($locator),*], |_: &_| -> Result<()> { Ok(()) })
            };
            ($builder:expr, $key:ty, [$($locator:expr),*], $check:expr) => {{
                let mut builder = $builder.with_url(url);
                for (key, value) in options {
                    let parsed: $key =
                        key.to_ascii_lowercase().parse().map_err(|_| unknown(key))?;
                    builder = builder.with_config(parsed, value);
                }
                $check(&builder)?;
                let values = [$(builder.get_config_value(&$locator)),*];
                let _ = self.locator.set(format!("{values:?}"));
                Arc::new(builder.with_retry(retry).build().map_err(built)?) as Arc<dyn ObjectStore>
            }};
        }
        Ok(match self.scheme {
            ObjectStoreScheme::AmazonS3 => {
                use aws::AmazonS3ConfigKey as K;
                // An http:// endpoint without consent fails at the first request with only
                // "HTTP error: builder error": say what to set, now.
                let check = |b: &aws::AmazonS3Builder| {
                    let endpoint = b.get_config_value(&K::Endpoint).unwrap_or_default();
                    let allowed = b.get_config_value(&K::Client(ClientConfigKey::AllowHttp));
                    if endpoint.starts_with("http://") && allowed.as_deref() != Some("true") {
                        return Err(invalid(crate::storage::url::redact_text(&format!(
                            "{shown}: the endpoint {endpoint} is plain http://, which S3 clients \
                             refuse unless told: set AWS_ALLOW_HTTP=true in the environment (or \
                             storage_options={{\"allow_http\": \"true\"}}), or use https://"
                        ))));
                    }
                    // No credentials configured: object_store asks the instance metadata service,
                    // whose failure (a 403, no route) would be all the user sees.
                    let given = |key| b.get_config_value(&key).is_some_and(|v| !v.is_empty());
                    let configured = given(K::AccessKeyId)
                        || given(K::SecretAccessKey)
                        || (given(K::WebIdentityTokenFile) && given(K::RoleArn))
                        || given(K::ContainerCredentialsRelativeUri)
                        || given(K::ContainerCredentialsFullUri)
                        || b.get_config_value(&K::SkipSignature).as_deref() == Some("true");
                    if !configured {
                        let endpoint = (b.get_config_value(&K::MetadataEndpoint))
                            .filter(|e| !e.is_empty())
                            .unwrap_or_else(|| "http://169.254.169.254".into());
                        let _ = self
                            .metadata
                            .set(endpoint.trim_end_matches('/').to_string());
                    }
                    Ok(())
                };
                build!(
                    aws::AmazonS3Builder::from_env(),
                    aws::AmazonS3ConfigKey,
                    [
                        K::Endpoint,
                        K::S3Endpoint,
                        K::Bucket,
                        K::VirtualHostedStyleRequest
                    ],
                    check
                )
            }
            ObjectStoreScheme::GoogleCloudStorage => {
                use gcp::GoogleConfigKey as K;
                build!(
                    gcp::GoogleCloudStorageBuilder::from_env(),
                    gcp::GoogleConfigKey,
                    [K::Bucket, K::BaseUrl]
                )
            }
            ObjectStoreScheme::MicrosoftAzure => {
                use azure::AzureConfigKey as K;
                build!(
                    azure::MicrosoftAzureBuilder::from_env(),
                    azure::AzureConfigKey,
                    [
                        K::AccountName,
                        K::ContainerName,
                        K::Endpoint,
                        K::UseEmulator
                    ]
                )
            }
            ObjectStoreScheme::Http => {
                let base = &self.url[..url::Position::BeforePath];
                let mut builder = http::HttpBuilder::new().with_url(base);
                if self.url.scheme() == "http" {
                    // The URL says plain HTTP: that is consent enough.
                    builder = builder.with_config(ClientConfigKey::AllowHttp, "true");
                }
                for (key, value) in options {
                    let parsed: ClientConfigKey =
                        key.to_ascii_lowercase().parse().map_err(|_| unknown(key))?;
                    builder = builder.with_config(parsed, value);
                }
                Arc::new(builder.with_retry(retry).build().map_err(built)?)
            }
            _ => return Err(invalid(format!("{shown}: unsupported scheme"))),
        })
    }

    /// This process's runtime and client, made on first use (and again after a fork).
    fn conn(&self) -> Result<&Conn> {
        self.conn.get_or_try_init(|| {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("docstore-io")
                .enable_all()
                .build()
                .map_err(Error::Io)?;
            let store = match &self.given {
                Some(store) => store.clone(),
                None => {
                    // Builders may look at the runtime (credential providers): build inside it.
                    let _entered = runtime.enter();
                    self.build()?
                }
            };
            Ok(Conn {
                runtime: ManuallyDrop::new(runtime),
                store,
                permits: tokio::sync::Semaphore::new(self.options.max_in_flight),
                fetching: AtomicUsize::new(0),
            })
        })
    }

    /// The first bytes of `path` (up to `len`) and what identifies the object (its size,
    /// version, ETag, Last-Modified, as the server gives them): one request. A server that
    /// answers the ranged GET with the whole object (`ignores_ranges`, then set) is asked again
    /// without a range, and only the first bytes of its answer are read.
    pub fn head(&self, path: &ObjectPath, url: &str, len: u64) -> Result<(Bytes, Identity)> {
        let conn = self.conn()?;
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        let _round = Round::start(conn, &self.stats);
        let started = Instant::now();
        let mut attempt = 0;
        loop {
            let whole = self.ignores_ranges();
            let options = object_store::GetOptions {
                range: (!whole).then_some(object_store::GetRange::Bounded(0..len)),
                ..Default::default()
            };
            let result = conn.runtime.block_on(async {
                let got = conn.store.get_opts(path, options).await?;
                let identity = Identity::of(&got.meta);
                let bytes = match whole {
                    true => prefix(got.into_stream(), len.min(identity.size)).await?,
                    false => got.bytes().await?,
                };
                Ok::<_, object_store::Error>((bytes, identity))
            });
            let fail = match result {
                Ok((bytes, identity)) if bytes.len() as u64 == len.min(identity.size) => {
                    self.stats
                        .bytes
                        .fetch_add(bytes.len() as u64, Ordering::Relaxed);
                    return Ok((bytes, identity));
                }
                Ok((bytes, identity)) => Error::Io(std::io::Error::other(format!(
                    "{url}: short response ({} of {} bytes)",
                    bytes.len(),
                    len.min(identity.size)
                ))),
                // object_store's HTTP client refuses a 200 to a ranged GET (it dropped the body).
                Err(object_store::Error::NotSupported { .. }) if !whole => {
                    self.ignores_ranges.store(true, Ordering::Relaxed);
                    self.stats.requests.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                Err(
                    e @ (object_store::Error::NotFound { .. }
                    | object_store::Error::PermissionDenied { .. }
                    | object_store::Error::Unauthenticated { .. }),
                ) => return Err(self.error(url, "", e)),
                Err(e) => self.error(url, "", e),
            };
            attempt += 1;
            if attempt > EXTRA_ATTEMPTS || started.elapsed() > self.options.retry_timeout {
                return Err(fail);
            }
            self.stats.retries.fetch_add(1, Ordering::Relaxed);
            std::thread::sleep(self.backoff(attempt));
        }
    }

    /// Whether the server answered a ranged GET with the whole object: this remote's files are
    /// then read whole (`fetch_whole`).
    pub fn ignores_ranges(&self) -> bool {
        self.ignores_ranges.load(Ordering::Relaxed)
    }

    /// Counts a file of `size` bytes read whole (`fetched`: of them, fetched now rather than
    /// found in the cache) against `budget`, the budget of its cache (`cache_bytes`, or the
    /// private cache's): every file of this remote read whole must fit it together, else
    /// `InvalidArgument` saying how much is needed and how to give it. `private` tells why the
    /// cache is private when it is (`cache_bytes=0`, or a server that pins no version).
    pub fn claim_whole(
        &self,
        url: &str,
        size: u64,
        budget: u64,
        private: Option<&str>,
    ) -> Result<()> {
        let mut whole = self.whole.lock().unwrap_or_else(|e| e.into_inner());
        let total = whole.bytes + size;
        if total > budget {
            let others = match whole.files {
                0 => String::new(),
                n => format!(
                    ", {} with the {n} other file(s) of the collection",
                    mib(total)
                ),
            };
            let raise = match private {
                Some(why) => format!(
                    "{why}, so its bytes go to a private cache of {}: serve it from a server \
                     that answers Range requests (nginx, Apache, caddy, S3 ...){}",
                    mib(budget),
                    if why.starts_with("cache_bytes=0") {
                        format!(", or give cache_bytes={total} or more")
                    } else {
                        String::new()
                    }
                ),
                None => format!(
                    "give cache_bytes={total} or more to docstore.open (or set \
                     DOCSTORE_CACHE_BYTES), or serve it from a server that answers Range \
                     requests (nginx, Apache, caddy, S3 ...), which fetches only what lookups read"
                ),
            };
            return Err(invalid(format!(
                "{url}: the server ignores HTTP Range requests, so the whole object must be read \
                 into the node cache, and it does not fit: {} ({size} bytes{others}) against \
                 the cache's budget of {} ({budget} bytes, cache_bytes): {raise}",
                mib(size),
                mib(budget),
            )));
        }
        whole.files += 1;
        whole.bytes = total;
        Ok(())
    }

    /// Counts `bytes` of a file read whole as fetched (not found in the cache).
    pub fn note_fetched(&self, bytes: u64) {
        self.whole.lock().unwrap_or_else(|e| e.into_inner()).fetched += bytes;
    }

    /// The warning of an open whose files were read whole (a server that ignores Range), once.
    pub fn take_warning(&self) -> Option<String> {
        let mut whole = self.whole.lock().unwrap_or_else(|e| e.into_inner());
        if whole.files == 0 || whole.warned {
            return None;
        }
        whole.warned = true;
        let what = match whole.files {
            1 => format!("the whole object ({})", mib(whole.bytes)),
            n => format!("each of its {n} files whole ({} in all)", mib(whole.bytes)),
        };
        let how = match whole.fetched {
            0 => {
                "found whole in the node cache (an earlier open read it), not fetched again".into()
            }
            n if n == whole.bytes => "read into the node cache once".to_string(),
            n => format!("what the node cache lacked ({}) read into it once", mib(n)),
        };
        Some(format!(
            "{}: the server ignores HTTP Range requests (it answered a ranged GET with the whole \
             object), so docstore reads {what}: {how}; later reads are served from the cache. A \
             server that answers Range requests (nginx, Apache, caddy, S3 ...) fetches only what \
             lookups read (docs/remote.md)",
            self.shown
        ))
    }

    fn backoff(&self, attempt: u32) -> Duration {
        let factor = 2u32.saturating_pow(attempt.saturating_sub(1));
        (self.options.init_backoff * factor).min(self.options.max_backoff)
    }

    /// A whole small object (a collection's manifest).
    pub fn get_all(&self, path: &ObjectPath, url: &str) -> Result<Bytes> {
        let conn = self.conn()?;
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        let _round = Round::start(conn, &self.stats);
        let bytes = conn
            .runtime
            .block_on(async { conn.store.get(path).await?.bytes().await })
            .map_err(|e| self.error(url, "", e))?;
        self.stats
            .bytes
            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        Ok(bytes)
    }

    /// Fetches `ranges` of `path`, at most `max_in_flight` at once, each checked for its length
    /// and retried; `sink` gets each one as it arrives. Only from the object `pin` identifies:
    /// each request asks for it (its version, `If-Match` its strong ETag, else
    /// `If-Unmodified-Since` its Last-Modified), and each response must show the same size,
    /// version, ETag and Last-Modified; bytes of an object replaced since are `Error::Changed`,
    /// never handed to `sink`.
    pub fn fetch(
        &self,
        path: &ObjectPath,
        url: &str,
        pin: &Identity,
        ranges: Vec<Range<u64>>,
        sink: impl Fn(Range<u64>, Bytes) -> Result<()>,
    ) -> Result<()> {
        let conn = self.conn()?;
        let _round = Round::start(conn, &self.stats);
        let (store, permits) = (&conn.store, &conn.permits);
        conn.runtime.block_on(async {
            futures::stream::iter(ranges)
                .map(|range| async move {
                    let _permit = permits
                        .acquire()
                        .await
                        .expect("the semaphore is never closed");
                    let bytes = self.fetch_one(store, path, url, pin, range.clone()).await?;
                    Ok::<_, Error>((range, bytes))
                })
                .buffer_unordered(self.options.max_in_flight)
                .try_for_each(|(range, bytes)| {
                    let done = sink(range, bytes);
                    async move { done }
                })
                .await
        })
    }

    /// `fetch` from a server that ignores Range (`ignores_ranges`): one GET of the whole object,
    /// asking for the object `pin` identifies as `fetch` does (its version, `If-Match` its strong
    /// ETag; the response's identity checked before its body is read), whose body streams past
    /// `ranges`: each is handed to `sink` once the body has passed its end, and the rest of the
    /// body is not read once every range has been. With `fingerprint`, nothing is handed over
    /// before the body's header is found to have it (else `Error::Changed`): the header and the
    /// bytes come in one response, so they are of one version, which the header fetched again
    /// after a fetch (`RemoteFile::fence`) would otherwise prove. A failed request or a body cut
    /// short is tried again (`EXTRA_ATTEMPTS`), without the ranges handed over already.
    pub fn fetch_whole(
        &self,
        path: &ObjectPath,
        url: &str,
        pin: &Identity,
        fingerprint: Option<u64>,
        mut ranges: Vec<Range<u64>>,
        sink: impl Fn(Range<u64>, Bytes) -> Result<()>,
    ) -> Result<()> {
        ranges.retain(|r| !r.is_empty());
        ranges.sort_unstable_by_key(|r| (r.start, r.end));
        let mut done = vec![false; ranges.len()];
        let conn = self.conn()?;
        let _round = Round::start(conn, &self.stats);
        let started = Instant::now();
        let mut attempt = 0;
        loop {
            if done.iter().all(|d| *d) {
                return Ok(());
            }
            let attempt_once = self.stream_whole(
                &conn.store,
                path,
                url,
                pin,
                fingerprint,
                &ranges,
                &mut done,
                &sink,
            );
            let fail = match conn.runtime.block_on(attempt_once) {
                Ok(()) => return Ok(()),
                Err(Attempt::Stop(e)) => return Err(e),
                Err(Attempt::Retry(e)) => e,
            };
            attempt += 1;
            if attempt > EXTRA_ATTEMPTS || started.elapsed() > self.options.retry_timeout {
                return Err(fail);
            }
            self.stats.retries.fetch_add(1, Ordering::Relaxed);
            std::thread::sleep(self.backoff(attempt));
        }
    }

    /// One attempt of `fetch_whole`: the ranges not `done` yet, from one GET.
    #[allow(clippy::too_many_arguments)]
    async fn stream_whole(
        &self,
        store: &Arc<dyn ObjectStore>,
        path: &ObjectPath,
        url: &str,
        pin: &Identity,
        fingerprint: Option<u64>,
        ranges: &[Range<u64>],
        done: &mut [bool],
        sink: &impl Fn(Range<u64>, Bytes) -> Result<()>,
    ) -> std::result::Result<(), Attempt> {
        let header = crate::format::HEADER_SIZE;
        let changed = |why: String| {
            Attempt::Stop(Error::Changed(format!(
                "{url} was replaced since it was opened ({why}): open it again"
            )))
        };
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        let got = match store.get_opts(path, pin.whole_options()).await {
            Ok(got) => got,
            Err(e) if precondition_failed(&e) => return Err(changed(pin.describe())),
            Err(
                e @ (object_store::Error::NotFound { .. }
                | object_store::Error::PermissionDenied { .. }
                | object_store::Error::Unauthenticated { .. }),
            ) => return Err(Attempt::Stop(self.error(url, "", e))),
            Err(e) => return Err(Attempt::Retry(self.error(url, "", e))),
        };
        if let Some(why) = pin.differs(&Identity::of(&got.meta)) {
            return Err(changed(why));
        }
        let size = got.meta.size;
        let mut body = got.into_stream();
        let (mut offset, mut next) = (0u64, 0usize);
        let mut head: Vec<u8> = Vec::with_capacity(header);
        let mut checked = fingerprint.is_none();
        // The ranges begun and not handed over yet, with what came of each.
        let mut open: Vec<(usize, Vec<u8>)> = Vec::new();
        while next < ranges.len() || !open.is_empty() {
            let Some(chunk) = body.next().await else {
                break;
            };
            let chunk = chunk.map_err(|e| Attempt::Retry(self.error(url, "", e)))?;
            let (at, end) = (offset, offset + chunk.len() as u64);
            self.stats
                .bytes
                .fetch_add(chunk.len() as u64, Ordering::Relaxed);
            if head.len() < header {
                let take = (header - head.len()).min(chunk.len());
                head.extend_from_slice(&chunk[..take]);
            }
            if let (false, Some(fingerprint)) = (checked, fingerprint) {
                if head.len() == header {
                    if crate::format::header_checksum(&head) != fingerprint {
                        return Err(changed("its header changed".into()));
                    }
                    checked = true;
                }
            }
            while next < ranges.len() && ranges[next].start < end {
                if !done[next] {
                    let len = ranges[next].end - ranges[next].start;
                    open.push((next, Vec::with_capacity(len as usize)));
                }
                next += 1;
            }
            for (i, bytes) in &mut open {
                let r = &ranges[*i];
                let (from, to) = (r.start.max(at), r.end.min(end));
                if from < to {
                    bytes.extend_from_slice(&chunk[(from - at) as usize..(to - at) as usize]);
                }
            }
            offset = end;
            if checked {
                let mut k = 0;
                while k < open.len() {
                    if ranges[open[k].0].end <= offset {
                        let (i, bytes) = open.swap_remove(k);
                        sink(ranges[i].clone(), Bytes::from(bytes)).map_err(Attempt::Stop)?;
                        done[i] = true;
                    } else {
                        k += 1;
                    }
                }
            }
        }
        if done.iter().all(|d| *d) {
            return Ok(());
        }
        Err(Attempt::Retry(Error::Io(std::io::Error::other(format!(
            "{url}: short response (the body ended after {offset} of {size} bytes)"
        )))))
    }

    async fn fetch_one(
        &self,
        store: &Arc<dyn ObjectStore>,
        path: &ObjectPath,
        url: &str,
        pin: &Identity,
        range: Range<u64>,
    ) -> Result<Bytes> {
        let started = Instant::now();
        let mut attempt = 0;
        let what = format!(" (bytes {}..{})", range.start, range.end);
        let options = pin.get_options(range.clone());
        let changed = |why: String| {
            Error::Changed(format!(
                "{url} was replaced since it was opened ({why}): open it again"
            ))
        };
        loop {
            self.stats.requests.fetch_add(1, Ordering::Relaxed);
            let now = self.stats.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
            self.stats.peak_in_flight.fetch_max(now, Ordering::Relaxed);
            let result = match store.get_opts(path, options.clone()).await {
                // Checked before its body is read: another version's bytes are never used.
                Ok(got) => match pin.differs(&Identity::of(&got.meta)) {
                    Some(why) => {
                        self.stats.in_flight.fetch_sub(1, Ordering::Relaxed);
                        return Err(changed(why));
                    }
                    None => got.bytes().await,
                },
                Err(e) => Err(e),
            };
            self.stats.in_flight.fetch_sub(1, Ordering::Relaxed);
            let fail = match result {
                Ok(bytes) if bytes.len() as u64 == range.end - range.start => {
                    self.stats
                        .bytes
                        .fetch_add(bytes.len() as u64, Ordering::Relaxed);
                    return Ok(bytes);
                }
                Ok(bytes) => Error::Io(std::io::Error::other(format!(
                    "{url}{what}: short response ({} of {} bytes)",
                    bytes.len(),
                    range.end - range.start
                ))),
                Err(e) if precondition_failed(&e) => return Err(changed(pin.describe())),
                Err(
                    e @ (object_store::Error::NotFound { .. }
                    | object_store::Error::PermissionDenied { .. }
                    | object_store::Error::Unauthenticated { .. }),
                ) => return Err(self.error(url, &what, e)),
                Err(e) => self.error(url, &what, e),
            };
            attempt += 1;
            if attempt > EXTRA_ATTEMPTS || started.elapsed() > self.options.retry_timeout {
                return Err(fail);
            }
            self.stats.retries.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(self.backoff(attempt)).await;
        }
    }
}

/// Whether `e` is a 412 answer to `If-Match`: object_store's S3, GCS and Azure clients say so
/// (`Precondition`); its HTTP client passes the status on as a generic error, whose causes name
/// it (nginx and Apache answer 412 to an `If-Match` of a replaced file).
fn precondition_failed(e: &object_store::Error) -> bool {
    if matches!(e, object_store::Error::Precondition { .. }) {
        return true;
    }
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(error) = cause {
        if error.to_string().contains("412 Precondition Failed") {
            return true;
        }
        cause = error.source();
    }
    false
}

/// How an attempt of `Remote::fetch_whole` failed: worth another try, or not.
enum Attempt {
    Retry(Error),
    Stop(Error),
}

/// The first `len` bytes of a response's body (the rest is not read: dropped with the stream).
async fn prefix(
    mut body: futures::stream::BoxStream<'static, object_store::Result<Bytes>>,
    len: u64,
) -> object_store::Result<Bytes> {
    let mut first = Vec::with_capacity(len as usize);
    while (first.len() as u64) < len {
        let Some(chunk) = body.next().await else {
            break;
        };
        let chunk = chunk?;
        let take = (len as usize - first.len()).min(chunk.len());
        first.extend_from_slice(&chunk[..take]);
    }
    Ok(Bytes::from(first))
}

/// `bytes` for a message: "1.5 MiB", "80.0 KiB", "512 bytes".
fn mib(bytes: u64) -> String {
    let units = [(30, "GiB"), (20, "MiB"), (10, "KiB")];
    match units.iter().find(|(shift, _)| bytes >= 1u64 << shift) {
        Some((shift, unit)) => format!("{:.1} {unit}", bytes as f64 / (1u64 << shift) as f64),
        None => format!("{bytes} bytes"),
    }
}

/// A fetch under way, counted as a round trip when no other was (`RemoteStats::rounds`).
struct Round<'s>(&'s AtomicUsize);

impl<'s> Round<'s> {
    fn start(conn: &'s Conn, stats: &RemoteStats) -> Round<'s> {
        if conn.fetching.fetch_add(1, Ordering::AcqRel) == 0 {
            stats.rounds.fetch_add(1, Ordering::Relaxed);
        }
        Round(&conn.fetching)
    }
}

impl Drop for Round<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

thread_local! {
    /// What this thread's current read made present, per file (by address): evicted again if
    /// the read finds damage (`invalidate_read`).
    static READ: std::cell::RefCell<Vec<(usize, Range<u64>)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Ranges a read remembers for `invalidate_read`, at most (past that, the rest is not evicted
/// again: it is refetched only when its lease runs out).
const READ_MEMORY: usize = 1 << 16;

/// Starts a read on this thread (see `invalidate_read`).
pub fn begin_read() {
    READ.with(|r| r.borrow_mut().clear());
}

/// Evicts from `files` what this thread's read since `begin_read` made present; with
/// `pinned`, also fetches again what is pinned in the files the read touched (every file if it
/// touched none).
pub fn invalidate_read<'a>(
    files: impl Iterator<Item = &'a RemoteFile> + Clone,
    pinned: bool,
) -> Result<()> {
    let read = READ.with(|r| std::mem::take(&mut *r.borrow_mut()));
    for file in files.clone() {
        let me = file as *const RemoteFile as usize;
        let ranges: Vec<Range<u64>> = (read.iter())
            .filter(|(at, _)| *at == me)
            .map(|(_, r)| r.clone())
            .collect();
        file.invalidate(&ranges);
        if pinned && (!ranges.is_empty() || read.is_empty()) {
            file.refetch_pinned()?;
        }
    }
    Ok(())
}

/// One remote store file behind its node cache.
pub struct RemoteFile {
    remote: Arc<Remote>,
    path: ObjectPath,
    url: String,
    size: u64,
    cache: CacheFile,
    /// Where the documents (the data section) lie in the file.
    documents: Range<u64>,
    /// The object opened: every later request asks for it, every response must be from it.
    pin: Identity,
    /// The header fetched at open and its checksum: what pinned bytes fetched again are checked
    /// against.
    header: crate::format::Header,
    fingerprint: u64,
    /// What `pin` was asked to keep (byte ranges): what a reader reads without a check per read,
    /// fetched again whole when reads keep failing (`refetch_pinned`).
    pinned: std::sync::Mutex<Vec<Range<u64>>>,
    /// The millisecond (`guard`'s clock) the cache files' lengths were last found right.
    guarded: AtomicU64,
    /// Requests for pieces of each index section so far (`rent`).
    rent: super::rent::Rent,
    /// Its server ignores Range (`Remote::ignores_ranges`): what is missing comes whole
    /// (`fill`), in one GET of the object.
    whole: bool,
}

/// A purchase of whole index sections under way (`RemoteFile::ensure`), ended when dropped.
struct Purchase<'c>(&'c CacheFile, u64);

impl Drop for Purchase<'_> {
    fn drop(&mut self) {
        self.0.end_purchase(self.1);
    }
}

/// Milliseconds on a clock of this process (`RemoteFile::guard`).
pub fn guard_clock() -> u64 {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_millis() as u64 + 1
}

impl RemoteFile {
    /// Opens `url`: one request for its first bytes (header, schema, dictionary), which also
    /// gives its size and fingerprint, so its cache.
    pub fn open(remote: &Arc<Remote>, url: &str) -> Result<RemoteFile> {
        let path = remote.path_of(url)?;
        let (first, pin) = remote.head(&path, url, OPEN_PREFIX)?;
        let size = pin.size;
        let header = crate::format::Header::decode(&first, size)?;
        let data = header.section(crate::format::Section::Data);
        let fingerprint = crate::format::header_checksum(&first);
        // The entry is named by what the client knows (the URL, the version), not by what the
        // object says of itself (its fingerprint, kept in the entry as a check): see `cache`.
        // Bytes that no validator ties to one version are this process's alone.
        let cache = match pin.pins() {
            true => {
                let key = remote.cache_key(&path, &pin);
                CacheFile::open(&remote.options.cache, &key, fingerprint, size)?
            }
            false => CacheFile::private(&remote.options.cache, size)?,
        };
        let file = RemoteFile {
            remote: remote.clone(),
            path,
            url: url.to_string(),
            size,
            cache,
            documents: data.offset..data.offset + data.len,
            pin,
            header,
            fingerprint,
            pinned: std::sync::Mutex::new(Vec::new()),
            guarded: AtomicU64::new(0),
            rent: Default::default(),
            whole: remote.ignores_ranges(),
        };
        // What the cache lacks of an object read whole, before the open's own bytes go in: what
        // this open fetches (the warning says whether it found the object there).
        let lacked: u64 = match file.whole {
            true => {
                let mut missing = Vec::new();
                (file.cache).missing(file.cache.units(&(0..size)), &mut missing);
                (missing.iter())
                    .map(|u| file.cache.bytes_of(u))
                    .map(|r| r.end - r.start)
                    .sum()
            }
            false => 0,
        };
        // What the first request brought, whole units only (or all of it at the end of the file).
        let whole = if first.len() as u64 == size {
            file.cache.units(&(0..size))
        } else {
            0..first.len() as u64 / crate::storage::cache::UNIT
        };
        let bytes = file.cache.bytes_of(&whole);
        // The header's segment is pinned: a reader relies on it without a check per read.
        let header = 0..crate::format::HEADER_SIZE as u64;
        file.pin(std::slice::from_ref(&header));
        if !file.cache.present(&whole) {
            file.cache
                .write(whole, &first[..(bytes.end - bytes.start) as usize])?;
        } else {
            // The header just fetched passed its check and names this entry: a cached header
            // that differs was damaged there (on disk, or by another process's bad response).
            let header = file.cache.units(&header);
            let cached = file.cache.bytes_of(&header);
            let len = (cached.end - cached.start) as usize;
            if file.cache.read(cached)? != first[..len] {
                file.cache.write(header, &first[..len])?;
                remote.stats.heals.fetch_add(1, Ordering::Relaxed);
            }
        }
        if file.whole {
            // A server that ignores Range: the whole object, once, if the cache can hold it.
            let private = match () {
                _ if remote.options.cache.budget == 0 => Some("cache_bytes=0"),
                _ if file.cache.is_private() => Some(
                    "the server gives no ETag or Last-Modified that ties the bytes to a version",
                ),
                _ => None,
            };
            remote.claim_whole(url, size, file.cache.budget(), private)?;
            file.fill(&mut Vec::new())?;
            remote.note_fetched(lacked);
        }
        Ok(file)
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    pub fn remote(&self) -> &Arc<Remote> {
        &self.remote
    }

    pub fn cache(&self) -> &CacheFile {
        &self.cache
    }

    pub(crate) fn map(&self) -> Result<Mmap> {
        self.cache.map_data()
    }

    /// `fetch` of one range: when it is present (a warm cache), a presence check and a stamp.
    /// A piece read on its own: not counted as rent (`ensure`).
    pub fn ensure_one(&self, range: Range<u64>) -> Result<()> {
        if self.check(range.clone()) {
            return Ok(());
        }
        self.fetch(&mut vec![range])
    }

    /// Makes `ranges` present: what a reader's round asks for (`Storage::ensure`). Besides
    /// `fetch`, rent or buy (`rent`): the index sections whose pieces' requests have cost their
    /// size come whole in this round. A section fetched whole (bought, or a small store's) is
    /// checked against its checksum. Empties `ranges`.
    pub fn ensure(&self, ranges: &mut Vec<Range<u64>>) -> Result<()> {
        use crate::format::Section;
        ranges.retain(|r| !r.is_empty());
        let mut missing: Vec<Range<u64>> = (ranges.iter())
            .filter(|r| !self.cache.present(&self.cache.units(r)))
            .cloned()
            .collect();
        let buy = (self.rent).buys(&self.header, &self.remote.options, &missing);
        let whole = |s: Section| {
            let e = self.header.section(s);
            e.offset..e.offset + e.len
        };
        // One purchase at a time per cached store (ended when this round is).
        let purchase = match buy.is_empty() {
            true => None,
            false => {
                let bytes = buy.iter().map(|&s| self.header.section(s).len).sum();
                self.begin_purchase(bytes)
                    .map(|stamp| Purchase(&self.cache, stamp))
            }
        };
        if purchase.is_some() {
            self.rent.bought(&buy);
            for &s in &buy {
                let section = whole(s);
                missing.retain(|r| r.end <= section.start || r.start >= section.end);
                missing.push(section.clone());
                ranges.push(section);
            }
        }
        self.fetch(ranges)?;
        // The sections a reader reads piece by piece, and the documents (a one-document store's).
        const CHECKED: [Section; 6] = [
            Section::Data,
            Section::DocOffsets,
            Section::Keys,
            Section::KeyOffsets,
            Section::KeyIndex,
            Section::KeyRanks,
        ];
        for s in CHECKED {
            let section = whole(s);
            let covers = |r: &Range<u64>| r.start <= section.start && section.end <= r.end;
            if !section.is_empty()
                && missing.iter().any(covers)
                && xxh3_64(&self.cache.read(section)?) != self.header.section(s).checksum
            {
                return Err(Error::corrupt(format!("{} checksum mismatch", s.name())));
            }
        }
        drop(purchase);
        Ok(())
    }

    /// Starts fetching `bytes` of whole sections: a stamp, or `None` when another process of the
    /// node is at it (`cache::CacheFile::begin_purchase`) or this store has bought an eighth of
    /// its cache's budget already (`Remote::claim_purchase`).
    fn begin_purchase(&self, bytes: u64) -> Option<u64> {
        let stamp = self.cache.begin_purchase()?;
        if !self.remote.claim_purchase(bytes) {
            self.cache.end_purchase(stamp);
            return None;
        }
        Some(stamp)
    }

    /// Pinned bytes found damaged by `check`: fetched again from the server (`refetch_pinned`)
    /// and checked again, a heal counted when they pass (`Storage::heal_pinned`).
    pub fn heal_pinned(&self, check: &dyn Fn() -> Result<()>) -> Result<()> {
        self.refetch_pinned()?;
        check()?;
        self.remote.stats.heals.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Whether `range` is present; if so, stamps its segments and remembers it as read.
    pub fn check(&self, range: Range<u64>) -> bool {
        let units = self.cache.units(&range);
        if !self.cache.present(&units) {
            return false;
        }
        let me = self as *const RemoteFile as usize;
        READ.with(|r| {
            let mut read = r.borrow_mut();
            if read.len() < READ_MEMORY {
                read.push((me, range));
            }
        });
        self.cache.touch(&units);
        true
    }

    /// Makes `ranges` present in the cache: what is missing is fetched in one round of
    /// concurrent requests (see the module note). Empties `ranges`.
    pub fn fetch(&self, ranges: &mut Vec<Range<u64>>) -> Result<()> {
        let me = self as *const RemoteFile as usize;
        READ.with(|r| {
            let mut read = r.borrow_mut();
            let room = READ_MEMORY.saturating_sub(read.len());
            read.extend(ranges.iter().take(room).map(|range| (me, range.clone())));
        });
        if self.whole {
            return self.fill(ranges);
        }
        let mut missing = Vec::new();
        for range in ranges.iter() {
            let units = self.cache.units(range);
            self.cache.missing(units.clone(), &mut missing);
            self.cache.touch(&units);
        }
        ranges.clear();
        if missing.is_empty() {
            return Ok(());
        }
        // Merge runs of units close enough that one request is cheaper than two, then split
        // what is too long for one request.
        missing.sort_unstable_by_key(|r| r.start);
        let unit = crate::storage::cache::UNIT;
        let options = &self.remote.options;
        let (gap, data_gap) = (options.merge_gap / unit, options.data_merge_gap / unit);
        let most = (options.max_request / unit).max(1);
        // Documents merge only within `data_merge_gap`: the bytes between two random documents
        // are fetched for nothing (4 KiB gaps fetched 4x a 160-byte document's size).
        let documents = self.documents.start / unit..self.documents.end.div_ceil(unit);
        let in_documents = |r: &Range<u64>| documents.start <= r.start && r.end <= documents.end;
        let mut merged: Vec<Range<u64>> = Vec::with_capacity(missing.len());
        for run in missing {
            match merged.last_mut() {
                Some(last)
                    if run.start
                        <= last.end
                            + if in_documents(last) && in_documents(&run) {
                                data_gap
                            } else {
                                gap
                            }
                        && run.end.max(last.end) - last.start <= most =>
                {
                    last.end = last.end.max(run.end)
                }
                _ => merged.push(run),
            }
        }
        let requests = self.requests(merged, most);
        // Bytes for documents: requests inside the data section (they merge only there).
        let data: u64 = (requests.iter())
            .filter(|r| self.documents.start <= r.start && r.end <= self.documents.end)
            .map(|r| r.end - r.start)
            .sum();
        self.remote
            .stats
            .data_bytes
            .fetch_add(data, Ordering::Relaxed);
        let write = |range: Range<u64>, bytes: &[u8]| {
            let units = range.start / unit..range.end.div_ceil(unit);
            self.cache.write(units, bytes)
        };
        // (An object nothing pins has a private cache, which no other open reads.)
        if self.pin.pins_strongly() || !self.pin.pins() {
            return (self.remote).fetch(&self.path, &self.url, &self.pin, requests, |r, b| {
                write(r, &b)
            });
        }
        // Nothing but Last-Modified (and the size) pins the object, which a replacement may keep:
        // the round's bytes are kept aside until the header, fetched after them, still has the
        // fingerprint this entry was made for; another version's are never written to the cache
        // that later opens of this version read.
        let fetched = std::sync::Mutex::new(Vec::with_capacity(requests.len()));
        (self.remote).fetch(&self.path, &self.url, &self.pin, requests, |r, b| {
            fetched
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((r, b));
            Ok(())
        })?;
        self.fence()?;
        let fetched = fetched.into_inner().unwrap_or_else(|e| e.into_inner());
        fetched.into_iter().try_for_each(|(r, b)| write(r, &b))
    }

    /// `fetch` from a server that ignores Range: whatever of the object the cache lacks comes in
    /// one GET of the whole object (`Remote::fetch_whole`, its header checked against the
    /// fingerprint opened before any byte is written), so that later reads find it all. Each
    /// piece written keeps what came before it within the lease (`touch`): a cache over its
    /// budget evicts this entry's idle segments first, and would evict the start of the object
    /// while its end is still coming. Empties `ranges`.
    fn fill(&self, ranges: &mut Vec<Range<u64>>) -> Result<()> {
        for range in ranges.drain(..) {
            self.cache.touch(&self.cache.units(&range));
        }
        let mut missing = Vec::new();
        self.cache
            .missing(self.cache.units(&(0..self.size)), &mut missing);
        if missing.is_empty() {
            return Ok(());
        }
        let unit = crate::storage::cache::UNIT;
        let requests = self.requests(missing, (self.remote.options.max_request / unit).max(1));
        self.get(requests, |range, bytes| {
            let units = range.start / unit..range.end.div_ceil(unit);
            self.cache.write(units, &bytes)?;
            self.cache.touch(&self.cache.units(&(0..range.end)));
            Ok(())
        })
    }

    /// `Remote::fetch` of `ranges` of this file, or `Remote::fetch_whole` from a server that
    /// ignores Range.
    fn get(
        &self,
        ranges: Vec<Range<u64>>,
        sink: impl Fn(Range<u64>, Bytes) -> Result<()>,
    ) -> Result<()> {
        let (path, url, pin) = (&self.path, self.url.as_str(), &self.pin);
        match self.whole {
            true => (self.remote).fetch_whole(path, url, pin, Some(self.fingerprint), ranges, sink),
            false => self.remote.fetch(path, url, pin, ranges, sink),
        }
    }

    /// Fetches the header again: `Error::Changed` unless it still has the fingerprint opened.
    fn fence(&self) -> Result<()> {
        let header = 0..crate::format::HEADER_SIZE as u64;
        let got = std::sync::Mutex::new(None);
        (self.remote).fetch(&self.path, &self.url, &self.pin, vec![header], |_, b| {
            *got.lock().unwrap_or_else(|e| e.into_inner()) = Some(b);
            Ok(())
        })?;
        let got = got.into_inner().unwrap_or_else(|e| e.into_inner());
        match got {
            Some(b) if crate::format::header_checksum(&b) == self.fingerprint => Ok(()),
            _ => Err(Error::Changed(format!(
                "{} was replaced since it was opened (its header changed; the server gives no \
                 ETag that would say so): open it again",
                self.url
            ))),
        }
    }

    /// The byte ranges to request for `runs` of units: each run split into requests of at most
    /// `most` units (fetched at once).
    fn requests(&self, runs: impl IntoIterator<Item = Range<u64>>, most: u64) -> Vec<Range<u64>> {
        let mut requests = Vec::new();
        for run in runs {
            let mut start = run.start;
            while start < run.end {
                let end = (start + most).min(run.end);
                requests.push(self.cache.bytes_of(&(start..end)));
                start = end;
            }
        }
        requests
    }

    /// The whole object, downloaded into an unlinked temporary file (concurrent requests of at
    /// most `max_request_bytes`), mapped: what `verify` reads, whatever the cache's budget.
    pub fn download(&self) -> Result<Mmap> {
        let file = tempfile::tempfile().map_err(Error::Io)?;
        file.set_len(self.size)?;
        let step = self.remote.options.max_request;
        let ranges: Vec<Range<u64>> = (0..self.size.div_ceil(step))
            .map(|i| i * step..((i + 1) * step).min(self.size))
            .collect();
        self.get(ranges, |range, bytes| {
            crate::platform::write_all_at(&file, &bytes, range.start).map_err(Error::Io)
        })?;
        // SAFETY: a private, unlinked file that nothing else can open or change.
        Ok(unsafe { Mmap::map(&file)? })
    }

    /// Keeps what `ranges` cover in the cache for good (see `cache::PINNED`).
    pub fn pin(&self, ranges: &[Range<u64>]) {
        let mut pinned = self.pinned.lock().unwrap_or_else(|e| e.into_inner());
        for range in ranges {
            self.cache.pin(&self.cache.units(range));
            if !range.is_empty() && !pinned.contains(range) {
                pinned.push(range.clone());
            }
        }
    }

    /// Drops what `ranges` cover whatever its lease, pinned or not: bytes read there were found
    /// damaged, and the next read fetches them again (`cache::CacheFile::invalidate`).
    pub fn invalidate(&self, ranges: &[Range<u64>]) {
        for range in ranges {
            self.cache.invalidate(&self.cache.units(range));
        }
    }

    /// Before a read (`now`: `guard_clock`, read once per read): whether the cache files are
    /// still their length, at most once a millisecond. A data file truncated since (by hand:
    /// docstore never does) is made its size again and what is pinned past the cut fetched
    /// again; reading it through the map as it was would kill the process (SIGBUS). What is
    /// left: a truncation within the millisecond, or during a read, still does (docs/remote.md).
    pub fn guard(&self, now: u64) -> Result<()> {
        if self.guarded.load(Ordering::Relaxed) == now {
            return Ok(());
        }
        if !self.cache.intact()? {
            let lost = self.cache.restore()?;
            let pinned = self
                .pinned
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            if pinned.iter().any(|r| r.end > lost) {
                self.refetch_pinned()?;
            }
            self.remote.stats.heals.fetch_add(1, Ordering::Relaxed);
        }
        self.guarded.store(now, Ordering::Relaxed);
        Ok(())
    }

    /// Fetches what is pinned (header, schema, dictionary, key fences, common prefix) again
    /// from the server, checks it (the header by its own checksum and the fingerprint it was
    /// opened with, a whole section by its checksum) and writes it over what the cache holds,
    /// present or not: replaced in place, never made a hole, since readers read it unasked.
    /// Bytes the server sends damaged are not written: `Error::Corrupt`.
    pub fn refetch_pinned(&self) -> Result<()> {
        use crate::format::{Section, HEADER_SIZE};
        let pinned = self
            .pinned
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let unit = crate::storage::cache::UNIT;
        let most = (self.remote.options.max_request / unit).max(1);
        // Each pinned range's units, fetched into a buffer of their own.
        let buffers: Vec<(Range<u64>, std::sync::Mutex<Vec<u8>>)> = (pinned.iter())
            .map(|r| {
                let bytes = self.cache.bytes_of(&self.cache.units(r));
                let len = (bytes.end - bytes.start) as usize;
                (bytes, std::sync::Mutex::new(vec![0u8; len]))
            })
            .collect();
        let runs = (buffers.iter()).map(|(bytes, _)| bytes.start / unit..bytes.end.div_ceil(unit));
        let requests = self.requests(runs, most);
        self.get(requests, |range, fetched| {
            for (bytes, buffer) in &buffers {
                if bytes.start <= range.start && range.end <= bytes.end {
                    let at = (range.start - bytes.start) as usize;
                    let mut buffer = buffer.lock().unwrap_or_else(|e| e.into_inner());
                    buffer[at..at + fetched.len()].copy_from_slice(&fetched);
                }
            }
            Ok(())
        })?;
        let mut damaged = None;
        for (range, (bytes, buffer)) in pinned.iter().zip(buffers) {
            let buffer = buffer.into_inner().unwrap_or_else(|e| e.into_inner());
            let at = (range.start - bytes.start) as usize..(range.end - bytes.start) as usize;
            let got = &buffer[at];
            let sound = if *range == (0..HEADER_SIZE as u64) {
                crate::format::Header::decode(got, self.size).is_ok()
                    && crate::format::header_checksum(got) == self.fingerprint
            } else {
                // A whole section has its checksum (the common prefix has none: its bytes are
                // checked as keys, by every lookup's check).
                (Section::ALL.iter())
                    .map(|&s| self.header.section(s))
                    .find(|e| (e.offset..e.offset + e.len) == *range)
                    .is_none_or(|e| xxh3_64(got) == e.checksum)
            };
            if sound {
                let units = bytes.start / unit..bytes.end.div_ceil(unit);
                self.cache.write(units, &buffer)?;
            } else {
                damaged = Some(range.clone());
            }
        }
        match damaged {
            Some(r) => Err(Error::corrupt(format!(
                "{} (bytes {}..{}): fetched again from the server, still damaged",
                self.url, r.start, r.end
            ))),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `fetch_whole` (a server that ignores Range) hands over each range, unsorted and
    /// overlapping ones included, from one GET of the whole object; with a fingerprint that is
    /// not the body's header's, nothing at all (`Error::Changed`).
    #[test]
    fn fetch_whole_cuts_ranges_out_of_one_body_after_its_header_passes() {
        use object_store::memory::InMemory;
        let object: Vec<u8> = (0..20_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let store = InMemory::new();
        let path = ObjectPath::from("x.docstore");
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime
            .block_on(store.put(&path, object.clone().into()))
            .unwrap();
        let options = RemoteOptions::new(Vec::new(), None, Some(0)).unwrap();
        let url = "http://127.0.0.1:1/x.docstore";
        let remote = Remote::over(url, options, Arc::new(store)).unwrap();
        let (_, pin) = remote.head(&path, url, 16).unwrap();
        let ranges = vec![9_000..19_999, 0..512, 100..700, 5..6, 19_999..20_000];
        let got = std::sync::Mutex::new(Vec::new());
        let fingerprint = crate::format::header_checksum(&object[..crate::format::HEADER_SIZE]);
        let requests = remote.stats.requests.load(Ordering::Relaxed);
        (remote.fetch_whole(
            &path,
            url,
            &pin,
            Some(fingerprint),
            ranges.clone(),
            |r, b| {
                got.lock().unwrap().push((r, b));
                Ok(())
            },
        ))
        .unwrap();
        assert_eq!(remote.stats.requests.load(Ordering::Relaxed), requests + 1);
        let mut got = got.into_inner().unwrap();
        got.sort_by_key(|(r, _)| (r.start, r.end));
        let mut want = ranges.clone();
        want.sort_by_key(|r| (r.start, r.end));
        assert_eq!(got.iter().map(|(r, _)| r.clone()).collect::<Vec<_>>(), want);
        for (r, bytes) in &got {
            assert_eq!(&bytes[..], &object[r.start as usize..r.end as usize]);
        }
        let handed = std::sync::atomic::AtomicBool::new(false);
        let changed =
            remote.fetch_whole(&path, url, &pin, Some(fingerprint ^ 1), ranges, |_, _| {
                handed.store(true, Ordering::Relaxed);
                Ok(())
            });
        assert!(matches!(changed, Err(Error::Changed(_))), "{changed:?}");
        assert!(!handed.load(Ordering::Relaxed));
    }

    #[test]
    fn sizes_read_in_their_unit() {
        assert_eq!(mib(512), "512 bytes");
        assert_eq!(mib(81_120), "79.2 KiB");
        assert_eq!(mib(3 << 20), "3.0 MiB");
        assert_eq!(mib(10 << 30), "10.0 GiB");
    }

    #[test]
    fn durations_read_units_and_exponents_and_refuse_what_is_too_long() {
        let ok = |v: &str| duration("retry_timeout", v).unwrap();
        assert_eq!(ok("30s"), Duration::from_secs(30));
        assert_eq!(ok(" 500ms "), Duration::from_millis(500));
        assert_eq!(ok("2m"), Duration::from_secs(120));
        assert_eq!(ok("1e1ms"), Duration::from_millis(10));
        assert_eq!(ok("1.5"), Duration::from_millis(1500));
        assert_eq!(ok("31536000s"), MAX_DURATION, "a year, at most");
        for bad in [
            "1e300s",
            "1e300",
            "1e20m",
            "100000000000000000000s",
            "400000000s",
        ] {
            let e = duration("retry_timeout", bad).unwrap_err().to_string();
            assert!(
                e.contains("retry_timeout") && e.contains("too long"),
                "{bad}: {e}"
            );
        }
        for bad in ["", "s", "-1s", "NaN", "inf", "1e999s", "5h", "1e"] {
            assert!(
                matches!(duration("x", bad), Err(Error::InvalidArgument(_))),
                "{bad:?}"
            );
        }
    }
}
