//! Remote stores: byte ranges of an object in S3-compatible storage, GCS, Azure or behind plain
//! HTTP, fetched with the Apache Arrow project's `object_store` client into the node cache
//! (`cache`), which the reader then reads as it reads a local file.
//!
//! - Configuration as the ecosystem does it: each cloud's environment variables (`AWS_*`,
//!   `GOOGLE_*`, `AZURE_*`), then `storage_options` (object_store's keys, plus docstore's own:
//!   `max_in_flight`, `initial_in_flight`, `merge_gap`, `max_request_bytes`, `max_retries`,
//!   `retry_timeout`,
//!   `init_backoff`, `max_backoff`, `cache_lease`). Options go through each builder's
//!   `with_config`, never `with_client_options`, which would replace what the builder took from
//!   the environment (`AWS_ALLOW_HTTP` included).
//! - Batches: the missing units of every range a batch needs, merged where they are at most
//!   `merge_gap` apart (default 16 KiB: a request costs a round trip, 16 KiB at 1 Gb/s a tenth
//!   of a millisecond; object_store's own `get_ranges` merges up to 1 MiB, which downloads most
//!   of the object for random documents), documents only where they touch (`data_merge_gap`,
//!   0: what lies between two random documents is paid in bytes, not saved in requests), fetched
//!   with as many requests at once as the limit allows (`limit`): it starts at
//!   `initial_in_flight` (32), grows while the server's latency holds and backs off from one that
//!   answers 503 or 429, drops connections, times out or slows down, never past
//!   `max_in_flight` (default 256: 1024 at once means 1024 new connections, slower when
//!   measured).
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
//!
//! One concept a file: `options` (parsing, defaults), `identity` (the version a file pins),
//! `client` (the client per process, requests and their retries, errors, counters), `limit`
//! (how many requests are in flight, adapted to the server), `whole`
//! (servers that ignore Range), `file` (one object behind the cache), `flight` (fetches in
//! flight, which other threads wait for rather than repeat), `requests` (missing units into
//! requests), `rent` (rent or buy for the index), `heal` (damage found by a read).

mod client;
mod file;
mod flight;
mod heal;
mod identity;
mod limit;
mod options;
mod rent;
mod requests;
mod whole;

pub use client::{Remote, RemoteStats};
pub use file::{RemoteFile, OPEN_PREFIX};
pub use heal::{begin_read, guard_clock, invalidate_read};
pub use identity::Identity;
pub use options::{default_cache_bytes, default_cache_dir, RemoteOptions};
