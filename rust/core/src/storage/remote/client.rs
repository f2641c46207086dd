//! A remote location and how to read it: this process's runtime and client (`Conn`), built per
//! scheme from the environment and the options, the counters (`RemoteStats`), errors a user can
//! act on, and the requests themselves: the open's first bytes (`head`), a small object whole
//! (`get_all`), and ranges as many at once as the limit allows (`limit`), each checked and
//! retried (`fetch`).
//! Servers that ignore Range are `whole`'s.

use super::identity::{precondition_failed, Identity};
use super::limit::{Limiter, Observed, Outcome};
use super::options::{invalid, RemoteOptions};
use super::whole::Whole;
use crate::error::{Error, Result};
use crate::runtime::process::PerProcess;
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreScheme};
use std::mem::ManuallyDrop;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Extra attempts at a range whose response was short or failed after object_store's retries.
pub(super) const EXTRA_ATTEMPTS: u32 = 2;

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
    /// The limit of requests in flight at the end of the last fetch (it adapts to the server:
    /// `limit`), and how many times this process cut it for congestion (errors, timeouts,
    /// 429 and 5xx answers).
    pub limit: AtomicUsize,
    pub backoffs: AtomicU64,
}

/// This process's runtime and client (see the module note on fork).
pub(super) struct Conn {
    /// Shut down without waiting when dropped (see `Drop`).
    pub(super) runtime: ManuallyDrop<tokio::runtime::Runtime>,
    pub(super) store: Arc<dyn ObjectStore>,
    /// A permit per request, for every thread and file of this remote: a batch over 64 shards,
    /// fetched from 64 threads at once, still sends at most the limit, which adapts to the
    /// server between `initial_in_flight` and `max_in_flight` (`limit`). Here, not in `Remote`:
    /// permits held in a parent at a fork would never come back.
    pub(super) limiter: Arc<Limiter>,
    /// Fetches under way in this process (`RemoteStats::rounds`): here for the same reason.
    fetching: AtomicUsize,
}

/// A remote location (a bucket, a container, an HTTP server) and how to read it: shared by the
/// files of a collection.
pub struct Remote {
    /// The URL as given, credentials included: only the client's builder sees it.
    url: url::Url,
    /// The URL as shown in messages (`crate::storage::url::redact`).
    pub(super) shown: String,
    scheme: ObjectStoreScheme,
    pub(super) options: RemoteOptions,
    /// What besides the URL says which server and account the objects are on (the endpoint,
    /// account, bucket as configured): part of every cache entry's key (`cache_key`).
    locator: std::sync::OnceLock<String>,
    conn: PerProcess<Conn>,
    /// The client to use instead of one built from the URL (`Remote::over`: tests).
    given: Option<Arc<dyn ObjectStore>>,
    pub stats: RemoteStats,
    /// The server answered a ranged GET with the whole object (Python's `http.server`): its
    /// files are read whole into the cache (`RemoteFile::fill`), within the cache's budget.
    pub(super) ignores_ranges: std::sync::atomic::AtomicBool,
    /// What this remote's files read whole: what the budget check (`claim_whole`) and the
    /// warning (`take_warning`) count.
    pub(super) whole: std::sync::Mutex<Whole>,
    /// S3 with no credentials configured: the instance metadata endpoint that object_store asks
    /// for them instead, so that its failure is told as "no credentials" (`error`).
    metadata: std::sync::OnceLock<String>,
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
    pub(super) fn error(&self, url: &str, what: &str, e: object_store::Error) -> Error {
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
        Error::Io(std::io::Error::new(
            kind,
            crate::storage::url::redact_text(&message),
        ))
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
        let bad = |e: &dyn std::fmt::Display| {
            invalid(crate::storage::url::redact_text(&format!("{shown}: {e}")))
        };
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
        let bad = |e: &dyn std::fmt::Display| {
            invalid(crate::storage::url::redact_text(&format!("{url}: {e}")))
        };
        let parsed = url::Url::parse(url).map_err(|e| bad(&e))?;
        let (_, path) = ObjectStoreScheme::parse(&parsed).map_err(|e| bad(&e))?;
        Ok(path)
    }

    fn build(&self, limiter: &Arc<Limiter>) -> Result<Arc<dyn ObjectStore>> {
        use object_store::{aws, azure, gcp, http, ClientConfigKey};
        crate::runtime::platform::install_tls_provider();
        let url = self.url.as_str();
        let shown = &self.shown;
        let options = &self.options.storage_options;
        let unknown = |key: &str| invalid(format!("unknown storage option {key:?} for {shown}"));
        let built = |e: object_store::Error| {
            invalid(crate::storage::url::redact_text(&format!("{shown}: {e}")))
        };
        let retry = self.options.retry_config();
        // object_store's client, telling the limiter of every answer that shows congestion.
        let observed = || Observed {
            limiter: limiter.clone(),
        };
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
                let builder = builder.with_http_connector(observed());
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
                let builder = builder.with_http_connector(observed());
                Arc::new(builder.with_retry(retry).build().map_err(built)?)
            }
            _ => return Err(invalid(format!("{shown}: unsupported scheme"))),
        })
    }

    /// This process's runtime and client, made on first use (and again after a fork).
    pub(super) fn conn(&self) -> Result<&Conn> {
        self.conn.get_or_try_init(|| {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("docstore-io")
                .enable_all()
                .build()
                .map_err(Error::Io)?;
            let limiter = Arc::new(Limiter::new(
                self.options.initial_in_flight,
                self.options.max_in_flight,
            ));
            let store = match &self.given {
                Some(store) => store.clone(),
                None => {
                    // Builders may look at the runtime (credential providers): build inside it.
                    let _entered = runtime.enter();
                    self.build(&limiter)?
                }
            };
            self.stats.limit.store(limiter.limit(), Ordering::Relaxed);
            Ok(Conn {
                runtime: ManuallyDrop::new(runtime),
                store,
                limiter,
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
            let mut options = object_store::GetOptions {
                range: (!whole).then_some(object_store::GetRange::Bounded(0..len)),
                ..Default::default()
            };
            let result = conn.runtime.block_on(async {
                let permit = conn.limiter.acquire(len).await;
                options.extensions.insert(permit.sent());
                let result = async {
                    let got = conn.store.get_opts(path, options).await?;
                    let identity = Identity::of(&got.meta);
                    let bytes = match whole {
                        true => prefix(got.into_stream(), len.min(identity.size)).await?,
                        false => got.bytes().await?,
                    };
                    Ok::<_, object_store::Error>((bytes, identity))
                }
                .await;
                permit.done(match &result {
                    Ok((bytes, identity)) if bytes.len() as u64 == len.min(identity.size) => {
                        Outcome::Answered(bytes.len() as u64)
                    }
                    Ok(_) => Outcome::Congested,
                    Err(e) => outcome(e),
                });
                result
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

    pub(super) fn backoff(&self, attempt: u32) -> Duration {
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
            .block_on(async {
                // A manifest: its size is not known, so not timed.
                let permit = conn.limiter.acquire(u64::MAX).await;
                let mut options = object_store::GetOptions::default();
                options.extensions.insert(permit.sent());
                let result =
                    async { conn.store.get_opts(path, options).await?.bytes().await }.await;
                permit.done(match &result {
                    Ok(bytes) => Outcome::Answered(bytes.len() as u64),
                    Err(e) => outcome(e),
                });
                result
            })
            .map_err(|e| self.error(url, "", e))?;
        self.stats
            .bytes
            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        Ok(bytes)
    }

    /// Fetches `ranges` of `path`, as many at once as the limit allows, each checked for its length
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
        conn.runtime.block_on(async {
            futures::stream::iter(ranges)
                .map(|range| async move {
                    let bytes = self.fetch_one(conn, path, url, pin, range.clone()).await?;
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

    /// One range: each attempt under a permit of the limiter, which it tells what came of it.
    async fn fetch_one(
        &self,
        conn: &Conn,
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
        let expected = range.end - range.start;
        loop {
            let permit = conn.limiter.acquire(expected).await;
            let mut options = options.clone();
            options.extensions.insert(permit.sent());
            self.stats.requests.fetch_add(1, Ordering::Relaxed);
            let now = self.stats.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
            self.stats.peak_in_flight.fetch_max(now, Ordering::Relaxed);
            let result = match conn.store.get_opts(path, options).await {
                // Checked before its body is read: another version's bytes are never used.
                Ok(got) => match pin.differs(&Identity::of(&got.meta)) {
                    Some(why) => {
                        self.stats.in_flight.fetch_sub(1, Ordering::Relaxed);
                        permit.done(Outcome::Neutral);
                        return Err(changed(why));
                    }
                    None => got.bytes().await,
                },
                Err(e) => Err(e),
            };
            self.stats.in_flight.fetch_sub(1, Ordering::Relaxed);
            permit.done(match &result {
                Ok(bytes) if bytes.len() as u64 == expected => {
                    Outcome::Answered(bytes.len() as u64)
                }
                // A body cut short.
                Ok(_) => Outcome::Congested,
                Err(e) => outcome(e),
            });
            let fail = match result {
                Ok(bytes) if bytes.len() as u64 == expected => {
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

/// What an error of object_store says of the server's load: what it returns after its own
/// retries of timeouts, dropped connections, 429 and 5xx answers is `Generic`; a missing object,
/// a refused credential, a precondition that failed say nothing of it.
fn outcome(e: &object_store::Error) -> Outcome {
    match e {
        object_store::Error::Generic { .. } => Outcome::Congested,
        _ => Outcome::Neutral,
    }
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

/// A fetch under way, counted as a round trip when no other was (`RemoteStats::rounds`); at
/// its end the limiter's state is copied to the counters (`RemoteStats::limit`, `backoffs`).
pub(super) struct Round<'s> {
    conn: &'s Conn,
    stats: &'s RemoteStats,
}

impl<'s> Round<'s> {
    pub(super) fn start(conn: &'s Conn, stats: &'s RemoteStats) -> Round<'s> {
        if conn.fetching.fetch_add(1, Ordering::AcqRel) == 0 {
            stats.rounds.fetch_add(1, Ordering::Relaxed);
        }
        Round { conn, stats }
    }
}

impl Drop for Round<'_> {
    fn drop(&mut self) {
        self.conn.fetching.fetch_sub(1, Ordering::AcqRel);
        let limiter = &self.conn.limiter;
        self.stats.limit.store(limiter.limit(), Ordering::Relaxed);
        (self.stats.backoffs).store(limiter.backoffs(), Ordering::Relaxed);
    }
}
