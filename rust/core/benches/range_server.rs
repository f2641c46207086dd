//! An HTTP/1.1 file server that answers byte ranges, for benches/remote.py: a remote store's
//! benchmark must measure docstore, not a server that cannot keep up (a Python server answers
//! a few thousand requests per second on this project's 2-core VM; this one, tens of thousands).
//!
//!     cargo bench -p docstore-core --bench range_server -- ROOT PORT LATENCY_MS
//!
//! GET and HEAD of files under ROOT, `Range: bytes=a-b` (one range), keep-alive; every request
//! waits LATENCY_MS first (a far server), without holding a thread. Prints `ready` once listening.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
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
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let _ = stream.set_nodelay(true);
            let root = root.clone();
            tokio::spawn(async move {
                let _ = serve(stream, &root, latency).await;
            });
        }
    });
}

async fn serve(stream: TcpStream, root: &Path, latency: Duration) -> std::io::Result<()> {
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read);
    loop {
        let mut request = String::new();
        if lines.read_line(&mut request).await? == 0 {
            return Ok(());
        }
        let mut range: Option<(u64, Option<u64>)> = None;
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
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        let mut parts = request.split_whitespace();
        let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or("/"));
        let relative = target
            .split('?')
            .next()
            .unwrap_or("")
            .trim_start_matches('/');
        let path = root.join(relative);
        let inside = Path::new(relative)
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)));
        let file = match inside.then(|| std::fs::File::open(&path)) {
            Some(Ok(file)) if file.metadata().is_ok_and(|m| m.is_file()) => file,
            _ => {
                write
                    .write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                    .await?;
                continue;
            }
        };
        let size = file.metadata()?.len();
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
            "HTTP/1.1 {status} {}\r\nContent-Length: {len}\r\nAccept-Ranges: bytes\r\n",
            if status == 206 {
                "Partial Content"
            } else {
                "OK"
            }
        );
        if status == 206 {
            head.push_str(&format!("Content-Range: bytes {start}-{end}/{size}\r\n"));
        }
        head.push_str("\r\n");
        let mut body = head.into_bytes();
        if method != "HEAD" {
            let at = body.len();
            body.resize(at + len as usize, 0);
            std::os::unix::fs::FileExt::read_exact_at(&file, &mut body[at..], start)?;
        }
        write.write_all(&body).await?;
    }
}

/// `bytes=a-b` or `bytes=a-` (a suffix range `bytes=-n` is not needed by docstore).
fn parse_range(value: &str) -> Option<(u64, Option<u64>)> {
    let (first, last) = value.strip_prefix("bytes=")?.split_once('-')?;
    let start = first.trim().parse().ok()?;
    let end = match last.trim() {
        "" => None,
        last => Some(last.parse().ok()?),
    };
    Some((start, end))
}
