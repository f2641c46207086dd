//! Servers that ignore Range (Python's `http.server`): a ranged GET answered with the whole
//! object. Each file of such a remote is read whole into the node cache, once, within the
//! cache's budget (`Remote::claim_whole`), with one warning per open (`take_warning`); its
//! ranges are cut out of one GET of the whole object (`Remote::fetch_whole`).

use super::client::{Remote, Round, EXTRA_ATTEMPTS};
use super::identity::{precondition_failed, Identity};
use super::limit::Outcome;
use super::options::invalid;
use crate::error::{Error, Result};
use crate::storage::Fingerprint;
use bytes::Bytes;
use futures::StreamExt;
use object_store::path::Path as ObjectPath;
use object_store::ObjectStore;
use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

/// Files of one remote read whole (`Remote::ignores_ranges`).
#[derive(Default)]
pub(super) struct Whole {
    /// Files and their bytes, all claimed against the cache's budget.
    files: u64,
    bytes: u64,
    /// Of those, the bytes fetched at open (the rest were in the cache already).
    fetched: u64,
    /// Whether the warning was given (once per open).
    warned: bool,
}

impl Remote {
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
        fingerprint: Option<&Fingerprint>,
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
            // One permit for the whole body: what it says of the server is whether it came.
            let attempted = conn.runtime.block_on(async {
                let permit = conn.limiter.acquire(u64::MAX).await;
                let mut options = pin.whole_options();
                options.extensions.insert(permit.sent());
                let attempted = self
                    .stream_whole(
                        &conn.store,
                        path,
                        url,
                        pin,
                        options,
                        fingerprint,
                        &ranges,
                        &mut done,
                        &sink,
                    )
                    .await;
                permit.done(match &attempted {
                    Ok(()) => Outcome::Answered(u64::MAX),
                    Err(Attempt::Retry(_)) => Outcome::Congested,
                    Err(Attempt::Stop(_)) => Outcome::Neutral,
                });
                attempted
            });
            let fail = match attempted {
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
        options: object_store::GetOptions,
        fingerprint: Option<&Fingerprint>,
        ranges: &[Range<u64>],
        done: &mut [bool],
        sink: &impl Fn(Range<u64>, Bytes) -> Result<()>,
    ) -> std::result::Result<(), Attempt> {
        // The bytes that hold the fingerprint: the object's are checked before any is handed over.
        let header = fingerprint.map_or(0, |f| f.at.end as usize);
        let changed = |why: String| {
            Attempt::Stop(Error::Changed(format!(
                "{url} was replaced since it was opened ({why}): open it again"
            )))
        };
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        let got = match store.get_opts(path, options).await {
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
                if let Some(same) = fingerprint.matches(&head) {
                    if !same {
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
}

/// How an attempt of `Remote::fetch_whole` failed: worth another try, or not.
pub(super) enum Attempt {
    Retry(Error),
    Stop(Error),
}

/// `bytes` for a message: "1.5 MiB", "80.0 KiB", "512 bytes".
fn mib(bytes: u64) -> String {
    let units = [(30, "GiB"), (20, "MiB"), (10, "KiB")];
    match units.iter().find(|(shift, _)| bytes >= 1u64 << shift) {
        Some((shift, unit)) => format!("{:.1} {unit}", bytes as f64 / (1u64 << shift) as f64),
        None => format!("{bytes} bytes"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::remote::RemoteOptions;
    use object_store::ObjectStoreExt;

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
        // What a store's header holds: its fingerprint, in its last 8 bytes.
        let at = crate::format::FINGERPRINT_AT..crate::format::HEADER_SIZE;
        let fingerprint = Fingerprint {
            at: at.start as u64..at.end as u64,
            value: u64::from_le_bytes(object[at].try_into().unwrap()),
        };
        let requests = remote.stats.requests.load(Ordering::Relaxed);
        (remote.fetch_whole(
            &path,
            url,
            &pin,
            Some(&fingerprint),
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
        let other = Fingerprint {
            value: fingerprint.value ^ 1,
            ..fingerprint
        };
        let changed = remote.fetch_whole(&path, url, &pin, Some(&other), ranges, |_, _| {
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
}
