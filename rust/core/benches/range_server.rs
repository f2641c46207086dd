//! An HTTP/1.1 file server that answers byte ranges, for benches/remote.py: a remote store's
//! benchmark must measure docstore, not a server that cannot keep up (a Python server answers
//! a few thousand requests per second on this project's 2-core VM; this one, tens of thousands).
//!
//!     cargo bench -p docstore-core --bench range_server -- ROOT PORT LATENCY_MS
//!
//! GET and HEAD of files under ROOT, `Range: bytes=a-b`, `bytes=a-` or `bytes=-n` (one range),
//! keep-alive; every request waits LATENCY_MS first (a far server), without holding a thread.
//! Prints `ready PORT` once listening.
//!
//! Enough of S3 for the peers of benches/remote.py (boto3, obstore, object_store) to read from
//! it with path-style addressing (`http://127.0.0.1:PORT/BUCKET/KEY`, a bucket being a directory
//! of ROOT): `Last-Modified` and `ETag` on every object response, and ListObjectsV2
//! (`GET /BUCKET?list-type=2&prefix=..&delimiter=..`, every key in one page). Signatures are not
//! checked; there are no writes (files are put under ROOT directly).
//!
//! Counters, kept by the server so that every client is counted the same way: requests, body
//! bytes sent, requests in flight (from the request's head read to its response written, the
//! latency included) and their peak. `GET /__stats` answers them as JSON and is not counted;
//! `GET /__stats?reset` answers them and sets them to zero (the peak to what is in flight).
//! With `RANGE_SERVER_LOG=FILE`, each body sent is appended to FILE as `PATH START LEN`, to
//! tell where a client's bytes went.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

#[derive(Default)]
struct Stats {
    /// `RANGE_SERVER_LOG`'s file, if set.
    log: Option<std::sync::Mutex<std::fs::File>>,
    requests: AtomicU64,
    bytes: AtomicU64,
    in_flight: AtomicU64,
    peak_in_flight: AtomicU64,
}

impl Stats {
    fn json(&self) -> String {
        format!(
            "{{\"requests\": {}, \"bytes\": {}, \"in_flight\": {}, \"peak_in_flight\": {}}}",
            self.requests.load(Ordering::SeqCst),
            self.bytes.load(Ordering::SeqCst),
            self.in_flight.load(Ordering::SeqCst),
            self.peak_in_flight.load(Ordering::SeqCst)
        )
    }

    fn reset(&self) {
        self.requests.store(0, Ordering::SeqCst);
        self.bytes.store(0, Ordering::SeqCst);
        let now = self.in_flight.load(Ordering::SeqCst);
        self.peak_in_flight.store(now, Ordering::SeqCst);
    }
}

/// Counts a request in flight from its creation to its drop.
struct InFlight<'a>(&'a Stats);

impl<'a> InFlight<'a> {
    fn new(stats: &'a Stats) -> Self {
        stats.requests.fetch_add(1, Ordering::SeqCst);
        let now = stats.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        stats.peak_in_flight.fetch_max(now, Ordering::SeqCst);
        Self(stats)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let root = PathBuf::from(args.first().map_or(".", String::as_str));
    let port: u16 = args.get(1).and_then(|p| p.parse().ok()).unwrap_or(0);
    let latency = Duration::from_secs_f64(
        args.get(2)
            .and_then(|l| l.parse::<f64>().ok())
            .unwrap_or(0.0)
            / 1000.0,
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async move {
        let listener = TcpListener::bind(("127.0.0.1", port)).await.expect("bind");
        println!("ready {}", listener.local_addr().expect("address").port());
        let root = Arc::new(root);
        let log = std::env::var_os("RANGE_SERVER_LOG").map(|path| {
            let file = std::fs::File::options()
                .create(true)
                .append(true)
                .open(path);
            std::sync::Mutex::new(file.expect("RANGE_SERVER_LOG: a file to append to"))
        });
        let stats = Arc::new(Stats {
            log,
            ..Stats::default()
        });
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let _ = stream.set_nodelay(true);
            let root = root.clone();
            let stats = stats.clone();
            tokio::spawn(async move {
                let _ = serve(stream, &root, latency, &stats).await;
            });
        }
    });
}

async fn serve(
    stream: TcpStream,
    root: &Path,
    latency: Duration,
    stats: &Stats,
) -> std::io::Result<()> {
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read);
    loop {
        let mut request = String::new();
        if lines.read_line(&mut request).await? == 0 {
            return Ok(());
        }
        let mut range: Option<(Bound, Option<u64>)> = None;
        loop {
            let mut line = String::new();
            if lines.read_line(&mut line).await? == 0 {
                return Ok(());
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                if name.eq_ignore_ascii_case("range") {
                    range = parse_range(value.trim());
                }
            }
        }
        let mut parts = request.split_whitespace();
        let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or("/"));
        let (path_part, query) = target.split_once('?').unwrap_or((target, ""));
        if path_part == "/__stats" {
            let body = stats.json();
            if query.split('&').any(|q| q == "reset") {
                stats.reset();
            }
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                body.len()
            );
            write.write_all((head + &body).as_bytes()).await?;
            continue;
        }
        let _counted = InFlight::new(stats);
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        let relative = percent_decode(path_part.trim_start_matches('/'));
        let inside = Path::new(&relative)
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)));
        let path = root.join(&relative);
        let params = query_params(query);
        if inside && path.is_dir() && params.iter().any(|(k, v)| k == "list-type" && v == "2") {
            let body = list_objects(&path, &params);
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/xml\r\nContent-Length: {}\r\n\r\n",
                body.len()
            );
            stats.bytes.fetch_add(body.len() as u64, Ordering::SeqCst);
            write.write_all((head + &body).as_bytes()).await?;
            continue;
        }
        let file = match inside.then(|| std::fs::File::open(&path)) {
            Some(Ok(file)) if file.metadata().is_ok_and(|m| m.is_file()) => file,
            _ => {
                let body = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\
                    <Error><Code>NoSuchKey</Code><Message>Not Found</Message></Error>";
                let head = format!(
                    "HTTP/1.1 404 Not Found\r\nContent-Type: application/xml\r\n\
                     Content-Length: {}\r\n\r\n",
                    if method == "HEAD" { 0 } else { body.len() }
                );
                let mut out = head.into_bytes();
                if method != "HEAD" {
                    out.extend_from_slice(body.as_bytes());
                }
                write.write_all(&out).await?;
                continue;
            }
        };
        let meta = file.metadata()?;
        let size = meta.len();
        let mtime = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_secs());
        let range = match range {
            Some((Bound::Suffix(n), _)) => Some((size.saturating_sub(n), None)),
            Some((Bound::Start(start), end)) => Some((start, end)),
            None => None,
        };
        let (status, start, end) = match range {
            Some((start, _)) if start >= size => {
                let head = format!(
                    "HTTP/1.1 416 Range Not Satisfiable\r\nContent-Range: bytes */{size}\r\n\
                     Content-Length: 0\r\n\r\n"
                );
                write.write_all(head.as_bytes()).await?;
                continue;
            }
            Some((start, end)) => (206, start, end.unwrap_or(size - 1).min(size - 1)),
            None => (200, 0, size.saturating_sub(1)),
        };
        let len = if size == 0 { 0 } else { end - start + 1 };
        let mut head = format!(
            "HTTP/1.1 {status} {}\r\nContent-Length: {len}\r\nAccept-Ranges: bytes\r\n\
             Last-Modified: {}\r\nETag: \"{size:x}-{mtime:x}\"\r\n",
            if status == 206 {
                "Partial Content"
            } else {
                "OK"
            },
            http_date(mtime)
        );
        if status == 206 {
            head.push_str(&format!("Content-Range: bytes {start}-{end}/{size}\r\n"));
        }
        head.push_str("\r\n");
        let mut body = head.into_bytes();
        if method != "HEAD" {
            let at = body.len();
            body.resize(at + len as usize, 0);
            docstore_core::runtime::platform::read_exact_at(&file, &mut body[at..], start)?;
            stats.bytes.fetch_add(len, Ordering::SeqCst);
            if let Some(log) = &stats.log {
                use std::io::Write;
                let mut log = log.lock().unwrap_or_else(|e| e.into_inner());
                let _ = writeln!(log, "{relative} {start} {len}");
            }
        }
        write.write_all(&body).await?;
    }
}

enum Bound {
    Start(u64),
    Suffix(u64),
}

/// `bytes=a-b`, `bytes=a-` or `bytes=-n` (the last n bytes).
fn parse_range(value: &str) -> Option<(Bound, Option<u64>)> {
    let (first, last) = value.strip_prefix("bytes=")?.split_once('-')?;
    if first.trim().is_empty() {
        return Some((Bound::Suffix(last.trim().parse().ok()?), None));
    }
    let start = Bound::Start(first.trim().parse().ok()?);
    let end = match last.trim() {
        "" => None,
        last => Some(last.parse().ok()?),
    };
    Some((start, end))
}

/// `%XX` escapes of a path or a query value.
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => match s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
            {
                Some(b) => {
                    out.push(b);
                    i += 3;
                    continue;
                }
                None => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn query_params(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|q| !q.is_empty())
        .map(|q| {
            let (k, v) = q.split_once('=').unwrap_or((q, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// ListObjectsV2 of the bucket directory `dir`: every key under `prefix` in one page, keys past
/// the first `delimiter` after the prefix folded into common prefixes.
fn list_objects(dir: &Path, params: &[(String, String)]) -> String {
    let get = |name: &str| {
        params
            .iter()
            .find(|(k, _)| k == name)
            .map_or("", |(_, v)| v.as_str())
    };
    let (prefix, delimiter, start_after) = (get("prefix"), get("delimiter"), get("start-after"));
    let mut keys = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_dir() {
                stack.push(path);
            } else if let Ok(rel) = path.strip_prefix(dir) {
                let key = rel.to_string_lossy().into_owned();
                if key.starts_with(prefix) && key.as_str() > start_after {
                    let mtime = meta
                        .modified()
                        .ok()
                        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                        .map_or(0, |d| d.as_secs());
                    keys.push((key, meta.len(), mtime));
                }
            }
        }
    }
    keys.sort();
    let mut contents = String::new();
    let mut prefixes: Vec<String> = Vec::new();
    let mut count = 0;
    for (key, size, mtime) in &keys {
        if !delimiter.is_empty() {
            if let Some(at) = key[prefix.len()..].find(delimiter) {
                let common = &key[..prefix.len() + at + delimiter.len()];
                if prefixes.last().map(String::as_str) != Some(common) {
                    prefixes.push(common.to_string());
                }
                continue;
            }
        }
        count += 1;
        contents.push_str(&format!(
            "<Contents><Key>{}</Key><LastModified>{}</LastModified><ETag>&quot;{size:x}-{mtime:x}&quot;</ETag>\
             <Size>{size}</Size><StorageClass>STANDARD</StorageClass></Contents>",
            xml_escape(key),
            iso_date(*mtime)
        ));
    }
    for p in &prefixes {
        contents.push_str(&format!(
            "<CommonPrefixes><Prefix>{}</Prefix></CommonPrefixes>",
            xml_escape(p)
        ));
    }
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\
         <ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">\
         <Name>{}</Name><Prefix>{}</Prefix><KeyCount>{}</KeyCount><MaxKeys>1000000</MaxKeys>\
         <IsTruncated>false</IsTruncated>{contents}</ListBucketResult>",
        xml_escape(
            &dir.file_name()
                .map_or(String::new(), |n| n.to_string_lossy().into_owned())
        ),
        xml_escape(prefix),
        count + prefixes.len()
    )
}

/// Days since 1970-01-01 to (year, month, day) (H. Hinnant's civil_from_days).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

fn http_date(secs: u64) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let days = (secs / 86400) as i64;
    let (y, m, d) = civil(days);
    let t = secs % 86400;
    format!(
        "{}, {d:02} {} {y} {:02}:{:02}:{:02} GMT",
        DAYS[(days % 7) as usize],
        MONTHS[m as usize - 1],
        t / 3600,
        t / 60 % 60,
        t % 60
    )
}

fn iso_date(secs: u64) -> String {
    let (y, m, d) = civil((secs / 86400) as i64);
    let t = secs % 86400;
    format!(
        "{y}-{m:02}-{d:02}T{:02}:{:02}:{:02}.000Z",
        t / 3600,
        t / 60 % 60,
        t % 60
    )
}
