//! How to reach and cache a remote store: `RemoteOptions`, parsed from `storage_options`
//! (docstore's own keys taken out, the rest passed to object_store's builder), the cache's
//! directory and budget, and the retry configuration.

use crate::error::{Error, Result};
use crate::storage::cache::CacheConfig;
use object_store::RetryConfig;
use std::path::PathBuf;
use std::time::Duration;

/// The shortest lease (`cache_lease`): bytes used within it are never evicted, so that a read
/// finds what its `ensure` just made present.
const MIN_LEASE: u64 = 2;

/// How to reach and cache a remote store.
#[derive(Clone, Debug)]
pub struct RemoteOptions {
    /// Passed to object_store's builder (`with_config`), after the environment.
    pub storage_options: Vec<(String, String)>,
    pub cache: CacheConfig,
    /// Requests in flight at once, at most: the bound of the limit that adapts to the server
    /// (`limit`), which starts at `initial_in_flight` (at most this).
    pub max_in_flight: usize,
    pub initial_in_flight: usize,
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

pub(super) fn invalid(msg: impl Into<String>) -> Error {
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
            // An eighth of the bound: a simple server is swamped less, and the limit triples
            // each round trip while the latency holds (from 16, a cold get_many(1024) at 25 ms
            // took 10-15% longer than at a fixed 256; from 32, as long, within the noise).
            initial_in_flight: 32,
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
                "initial_in_flight" => {
                    out.initial_in_flight = number(&key, &value)?.clamp(1, 4096) as usize
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
        out.initial_in_flight = out.initial_in_flight.min(out.max_in_flight);
        Ok(out)
    }

    pub(super) fn retry_config(&self) -> RetryConfig {
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

#[cfg(test)]
mod tests {
    use super::*;

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
