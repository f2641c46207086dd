//! How many requests are in flight to a remote at once: a limit that starts small, grows while
//! the server's latency holds, and falls when the server shows it is swamped (errors, timeouts,
//! dropped connections, 429 and 503 answers, or a latency far above what it was unloaded). A
//! fixed 256 swamped simple servers (a Python range server: 21-60 s and "error sending request"
//! for 715 documents, against 1.0 s with 8 in flight), while S3 wants hundreds.
//!
//! The scheme is the gradient limiter of Netflix's `concurrency-limits` (`Gradient2Limit`) over
//! TCP's windows, per remote (one host or bucket) and per process (`client::Conn`: permits held
//! at a fork would never come back):
//!
//! - **Start** at `initial_in_flight` (32), never past `max_in_flight` (the user's bound, 256).
//! - **Grow** by two for each request answered while the latency holds, as TCP's slow start (a
//!   little faster): a limit that was full triples each round trip (32, 96, 256). Each round
//!   trip of the ramp costs the first cold batch time: at 25 ms, a `get_many(1024)` (its ~500
//!   index requests, then 1024 blobs) took 2-3 round trips more from 16 doubling than at a fixed
//!   256, ~2 from 16 tripling, none measurable from 32 tripling. A request sent
//!   while fewer than half the permits were taken says nothing about more (a lookup at a time
//!   never grows the limit).
//! - **Latency holds** while the recent latency (`short`: a moving average over ~8 requests)
//!   stays under `TOLERANCE` times the least latency seen lately (`base`: the minimum over the
//!   last 10-20 s, TCP Vegas' and BBR's base RTT), plus `SLACK`. Past it, each answer pulls the
//!   limit towards `limit * threshold / short` (at most halving it), as Gradient2 does: the
//!   limit settles where the server answers within the tolerance. Only requests of at most
//!   `SAMPLE_BYTES` are timed (a large answer's time is its bytes, not the server's queue).
//! - **Overdue requests.** A request outstanding past `OVERDUE` times the recent latency (and
//!   past the tolerance) is taken as lost, as TCP takes a segment unacknowledged past its RTO:
//!   while one is, the limit does not grow, and when an eighth of those in flight are (a server
//!   that dropped connections it had no room for: their SYNs are sent again after 1 s, 3 s ...),
//!   the limit backs off as for an error, without waiting for their answers.
//! - **Back off** to half on an error (a timeout, a connection refused or dropped, a body cut
//!   short) or an answer of 429 or 5xx (502, 503, 504): once per round trip, as TCP halves its
//!   window once per window of losses: signals of requests sent before the last cut are the
//!   same congestion and change nothing more, nor do their latencies (their answers waited out
//!   object_store's backoff). Signals come from docstore's own attempts (`Permit::done`) and from
//!   every HTTP request object_store makes, retries included (`Observed`).
//!
//! Every request of a remote goes through one `Limiter`: an open's first bytes, a manifest, a
//! batch's ranges from any thread and file, a whole object, a prefetch (they all call
//! `Remote::fetch`, `head`, `get_all` or `fetch_whole`).

use object_store::client::{
    HttpClient, HttpConnector, HttpError, HttpErrorKind, HttpRequest, HttpResponse, HttpService,
    ReqwestConnector,
};
use std::future::Future;
use std::ops::Bound;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The recent latency may be this many times the base before the limit falls ...
const TOLERANCE: f64 = 3.0;
/// ... plus this much: a server answering in 0.1 ms on loopback is not swamped at 1 ms.
const SLACK: Duration = Duration::from_millis(1);
/// A request outstanding this many times the recent latency (and past the tolerance) is overdue.
const OVERDUE: f64 = 4.0;
/// The weight of each answer in the recent latency (~ the last 8 answers).
const SHORT_WEIGHT: f64 = 1.0 / 8.0;
/// The base latency is the least seen over the last one or two of these.
const BASE_WINDOW: Duration = Duration::from_secs(10);
/// Answers of more bytes are not timed.
const SAMPLE_BYTES: u64 = 64 << 10;
/// Gradient2's smoothing and queue: an answer within the tolerance adds `SMOOTHING * QUEUE` (1)
/// to the limit, twice that in slow start and an eighth of it after; one past it pulls the
/// limit a quarter of the way towards `limit * gradient`.
const SMOOTHING: f64 = 0.25;
const QUEUE: f64 = 4.0;

/// What an attempt's end says about the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Outcome {
    /// Answered, with this many bytes.
    Answered(u64),
    /// Failed in a way a swamped server fails: a timeout, a connection refused or dropped, a
    /// 5xx or 429 after object_store's retries, a body cut short.
    Congested,
    /// Says nothing of the server's load (a 404, a 412, another version; the attempt dropped).
    Neutral,
}

/// The limit of one remote in one process.
pub(super) struct Limiter {
    max: usize,
    /// One permit a request: `State::granted` of them exist, taken or not.
    permits: tokio::sync::Semaphore,
    state: Mutex<State>,
    /// Cuts of the limit (for `RemoteStats::backoffs`).
    backoffs: AtomicU64,
}

struct State {
    limit: f64,
    /// Permits that exist (`floor(limit)`, at least 1), and of them those to take back as they
    /// are returned (the limit fell while they were taken).
    granted: usize,
    debt: usize,
    in_flight: usize,
    /// The recent latency (seconds), and the base: the least of this window and the last.
    short: Option<f64>,
    base: [f64; 2],
    window_start: Instant,
    /// When the limit was last cut for congestion.
    cut: Option<Instant>,
    /// The requests in flight that are timed (`SAMPLE_BYTES`), by when they were sent.
    outstanding: std::collections::BTreeSet<(Instant, u64)>,
    sent: u64,
    /// Growing by two an answer (TCP's slow start), until the first cut or the first answer
    /// past the tolerance; then by an eighth (TCP's congestion avoidance, faster: +12.5% a
    /// round trip, so that a limit halved by a passing 503 is whole again in ~6 round trips).
    slow_start: bool,
}

/// When a request of docstore's was sent (its permit taken): in the extensions of each HTTP
/// request object_store makes for it, its retries included, for `Observed`, which counts only
/// such requests (not a credential provider's) and dates their signals by it: the retries of a
/// request sent before a cut are the congestion that made it.
#[derive(Clone, Copy, Debug)]
pub(super) struct Sent(Instant);

/// A request's permit: `done` returns it with what the attempt said; dropped, it returns it
/// saying nothing (a fetch cancelled by another's error).
pub(super) struct Permit<'l> {
    limiter: &'l Limiter,
    started: Instant,
    /// Requests in flight when this one was sent, itself included.
    in_flight: usize,
    /// Its place in `State::outstanding`, if it is timed.
    outstanding: Option<(Instant, u64)>,
    returned: bool,
}

impl Limiter {
    pub(super) fn new(initial: usize, max: usize) -> Limiter {
        let max = max.max(1);
        let initial = initial.clamp(1, max);
        Limiter {
            max,
            permits: tokio::sync::Semaphore::new(initial),
            state: Mutex::new(State {
                limit: initial as f64,
                granted: initial,
                debt: 0,
                in_flight: 0,
                short: None,
                base: [f64::INFINITY; 2],
                window_start: Instant::now(),
                cut: None,
                outstanding: Default::default(),
                sent: 0,
                slow_start: true,
            }),
            backoffs: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The limit now (whole requests).
    pub(super) fn limit(&self) -> usize {
        self.lock().granted
    }

    /// How many times the limit was cut for congestion.
    pub(super) fn backoffs(&self) -> u64 {
        self.backoffs.load(Ordering::Relaxed)
    }

    /// Waits for room under the limit, for a request of about `bytes`.
    pub(super) async fn acquire(&self, bytes: u64) -> Permit<'_> {
        // Permits are given back by hand (`give_back`): the limit may have fallen meanwhile.
        (self.permits.acquire().await)
            .expect("the semaphore is never closed")
            .forget();
        let started = Instant::now();
        let mut state = self.lock();
        state.in_flight += 1;
        let outstanding = (bytes <= SAMPLE_BYTES).then(|| {
            state.sent += 1;
            let key = (started, state.sent);
            state.outstanding.insert(key);
            key
        });
        Permit {
            limiter: self,
            started,
            in_flight: state.in_flight,
            outstanding,
            returned: false,
        }
    }

    /// The latency past which an answer is not within the tolerance: `None` before any answer.
    fn threshold(state: &State) -> Option<f64> {
        let base = state.base[0].min(state.base[1]);
        base.is_finite()
            .then(|| base * TOLERANCE + SLACK.as_secs_f64())
    }

    /// Whether requests sent since the last cut are overdue (`OVERDUE`): a cut when an eighth of
    /// those in flight are (`true`: the limit must not grow either way).
    fn overdue(&self, state: &mut State, now: Instant) -> bool {
        let (Some(threshold), Some(short)) = (Limiter::threshold(state), state.short) else {
            return false;
        };
        let after = Duration::from_secs_f64(threshold.max(short * OVERDUE));
        let Some(cutoff) = now.checked_sub(after) else {
            return false;
        };
        // Those sent before the last cut are the congestion that made it.
        let since = match state.cut {
            Some(cut) if cut >= cutoff => return false,
            Some(cut) => Bound::Excluded((cut, u64::MAX)),
            None => Bound::Unbounded,
        };
        let needed = (state.in_flight / 8).max(1);
        let overdue = (state.outstanding)
            .range((since, Bound::Excluded((cutoff, 0))))
            .take(needed)
            .count();
        if overdue >= needed {
            self.cut(state, cutoff, now);
        }
        overdue > 0
    }

    /// Congestion seen by a request sent at `sent` that holds no permit of its own (an HTTP
    /// request of object_store's, a retry included): `Observed`.
    pub(super) fn congested(&self, sent: Instant) {
        let mut state = self.lock();
        self.cut(&mut state, sent, Instant::now());
        self.resize(&mut state);
    }

    /// Halves the limit, unless it was cut since `sent` (the same congestion).
    fn cut(&self, state: &mut State, sent: Instant, now: Instant) {
        if state.cut.is_some_and(|cut| sent <= cut) {
            return;
        }
        state.cut = Some(now);
        state.slow_start = false;
        state.limit = (state.limit / 2.0).max(1.0);
        self.backoffs.fetch_add(1, Ordering::Relaxed);
    }

    /// An answer of `bytes` that took `took`, to a request sent at `sent` among `in_flight`.
    fn answered(
        &self,
        state: &mut State,
        sent: Instant,
        in_flight: usize,
        took: Duration,
        bytes: u64,
        now: Instant,
    ) {
        // A request sent before the last cut may have waited out the congestion (object_store's
        // backoff): its latency is not the server's now.
        if bytes > SAMPLE_BYTES || state.cut.is_some_and(|cut| sent <= cut) {
            return;
        }
        let took = took.as_secs_f64();
        if now.duration_since(state.window_start) >= BASE_WINDOW {
            state.base = [state.base[1], f64::INFINITY];
            state.window_start = now;
        }
        state.base[1] = state.base[1].min(took);
        let short = match state.short {
            Some(short) => short + (took - short) * SHORT_WEIGHT,
            None => took,
        };
        state.short = Some(short);
        // A request sent with most permits idle says nothing about more of them.
        if (in_flight as f64) * 2.0 < state.limit {
            return;
        }
        let threshold = Limiter::threshold(state).unwrap_or(took);
        let gradient = (threshold / short).clamp(0.5, 1.0);
        // Growth needs this answer within the tolerance too: the average lags (HyStart leaves
        // slow start on a round trip's latency, not an average's).
        if gradient >= 1.0 && (took > threshold || self.overdue(state, now)) {
            state.slow_start &= took <= threshold;
            return;
        }
        state.slow_start &= gradient >= 1.0;
        let queue = if state.slow_start {
            2.0 * QUEUE
        } else {
            QUEUE / 8.0
        };
        let target = state.limit * gradient + queue;
        state.limit =
            (state.limit * (1.0 - SMOOTHING) + target * SMOOTHING).clamp(1.0, self.max as f64);
    }

    /// Makes `floor(limit)` permits exist (at least one), taking back from those returned what
    /// cannot be taken from those free.
    fn resize(&self, state: &mut State) {
        let target = (state.limit as usize).clamp(1, self.max);
        if target > state.granted {
            let more = target - state.granted;
            let paid = more.min(state.debt);
            state.debt -= paid;
            self.permits.add_permits(more - paid);
        } else if target < state.granted {
            let fewer = state.granted - target;
            state.debt += fewer - self.permits.forget_permits(fewer);
        }
        state.granted = target;
    }

    fn give_back(&self, permit: &mut Permit<'_>, outcome: Outcome) {
        permit.returned = true;
        let now = Instant::now();
        let mut state = self.lock();
        state.in_flight -= 1;
        if let Some(key) = permit.outstanding {
            state.outstanding.remove(&key);
        }
        match outcome {
            Outcome::Answered(bytes) => {
                let took = now.duration_since(permit.started);
                self.answered(
                    &mut state,
                    permit.started,
                    permit.in_flight,
                    took,
                    bytes,
                    now,
                )
            }
            Outcome::Congested => self.cut(&mut state, permit.started, now),
            Outcome::Neutral => {}
        }
        self.resize(&mut state);
        match state.debt {
            0 => self.permits.add_permits(1),
            _ => state.debt -= 1,
        }
    }
}

impl Permit<'_> {
    /// When the request was sent, for its HTTP requests' extensions.
    pub(super) fn sent(&self) -> Sent {
        Sent(self.started)
    }

    /// Returns the permit with what the attempt said.
    pub(super) fn done(mut self, outcome: Outcome) {
        self.limiter.give_back(&mut self, outcome);
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        if !self.returned {
            self.limiter.give_back(self, Outcome::Neutral);
        }
    }
}

/// object_store's HTTP client (reqwest, as it makes it), telling `limiter` of every request of
/// docstore's (marked `Sent`) that shows congestion: an answer of 429, 502, 503 or 504, or a
/// request that timed out or whose connection failed or was dropped. object_store retries those
/// itself: they would reach docstore only as a late answer, or an error once its retries are
/// spent.
#[derive(Debug)]
pub(super) struct Observed {
    pub(super) limiter: Arc<Limiter>,
}

impl std::fmt::Debug for Limiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Limiter({} of {})", self.limit(), self.max)
    }
}

impl HttpConnector for Observed {
    fn connect(&self, options: &object_store::ClientOptions) -> object_store::Result<HttpClient> {
        let inner = ReqwestConnector::default().connect(options)?;
        Ok(HttpClient::new(Observing {
            inner,
            limiter: self.limiter.clone(),
        }))
    }
}

#[derive(Debug)]
struct Observing {
    inner: HttpClient,
    limiter: Arc<Limiter>,
}

/// Whether an HTTP answer or failure is a sign of a swamped server.
fn congestion(result: &Result<HttpResponse, HttpError>) -> bool {
    match result {
        Ok(response) => matches!(response.status().as_u16(), 429 | 502 | 503 | 504),
        Err(e) => matches!(
            e.kind(),
            HttpErrorKind::Connect
                | HttpErrorKind::Request
                | HttpErrorKind::Timeout
                | HttpErrorKind::Interrupted
        ),
    }
}

// `HttpService` is an `async_trait`: its method, written as the macro would write it.
impl HttpService for Observing {
    fn call<'s, 'f>(
        &'s self,
        request: HttpRequest,
    ) -> Pin<Box<dyn Future<Output = Result<HttpResponse, HttpError>> + Send + 'f>>
    where
        's: 'f,
        Self: 'f,
    {
        Box::pin(async move {
            let sent = request.extensions().get::<Sent>().copied();
            let result = self.inner.execute(request).await;
            if let (Some(Sent(sent)), true) = (sent, congestion(&result)) {
                self.limiter.congested(sent);
            }
            result
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Answers `n` requests, each sent with the limit full, after `took`, at `now`.
    fn answer(l: &Limiter, n: usize, took: Duration, now: Instant) {
        let mut state = l.lock();
        for _ in 0..n {
            let in_flight = state.granted;
            l.answered(&mut state, now - took, in_flight, took, 100, now);
            l.resize(&mut state);
        }
    }

    #[test]
    fn the_limit_triples_each_round_while_latency_holds_up_to_the_bound() {
        let l = Limiter::new(16, 256);
        let mut now = Instant::now();
        let rtt = Duration::from_millis(25);
        let mut limits = vec![l.limit()];
        for _ in 0..5 {
            now += rtt;
            answer(&l, l.limit(), rtt, now);
            limits.push(l.limit());
        }
        assert_eq!(limits, [16, 48, 144, 256, 256, 256]);
    }

    #[test]
    fn a_latency_far_past_the_base_brings_the_limit_down_and_it_settles() {
        let l = Limiter::new(16, 256);
        let mut now = Instant::now();
        // Unloaded: 20 ms.
        now += Duration::from_millis(20);
        answer(&l, 16, Duration::from_millis(20), now);
        let grown = l.limit();
        assert!(grown > 16);
        // A server of 4 workers at 20 ms a request: the latency grows with the requests sent.
        for _ in 0..200 {
            let took = Duration::from_millis(20 * (l.limit() as u64).div_ceil(4));
            now += took;
            answer(&l, l.limit(), took, now);
        }
        // The threshold is 65 ms (3 x 20 + 5): ~12 in flight.
        assert!((8..=16).contains(&l.limit()), "{}", l.limit());
        assert_eq!(l.backoffs(), 0, "latency alone is no backoff");
    }

    #[test]
    fn congestion_halves_the_limit_once_a_round() {
        let l = Limiter::new(64, 256);
        let sent = Instant::now();
        l.congested(sent);
        assert_eq!(l.limit(), 32);
        // Other requests sent before the cut: the same congestion.
        l.congested(sent);
        l.congested(sent);
        assert_eq!((l.limit(), l.backoffs()), (32, 1));
        // A request sent after it: another.
        std::thread::sleep(Duration::from_millis(2));
        l.congested(Instant::now());
        assert_eq!((l.limit(), l.backoffs()), (16, 2));
        for _ in 0..10 {
            std::thread::sleep(Duration::from_millis(1));
            l.congested(Instant::now());
        }
        assert_eq!(l.limit(), 1, "never under one");
    }

    #[test]
    fn a_limit_that_fell_takes_back_the_permits_as_they_return() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let l = Limiter::new(4, 8);
            let mut held = Vec::new();
            for _ in 0..4 {
                held.push(l.acquire(100).await);
            }
            assert_eq!(l.permits.available_permits(), 0);
            // Two of the four come back congested: the limit is 2, and both are taken back.
            held.pop().unwrap().done(Outcome::Congested);
            assert_eq!(l.limit(), 2);
            held.pop().unwrap().done(Outcome::Congested);
            assert_eq!(
                l.permits.available_permits(),
                0,
                "two still out: the limit's two"
            );
            drop(held);
            assert_eq!(l.permits.available_permits(), 2);
            assert_eq!(l.lock().in_flight, 0);
        });
    }

    #[test]
    fn requests_sent_with_most_permits_idle_do_not_grow_the_limit() {
        let l = Limiter::new(16, 256);
        let now = Instant::now() + Duration::from_millis(25);
        let mut state = l.lock();
        for _ in 0..100 {
            l.answered(&mut state, now, 1, Duration::from_millis(25), 100, now);
        }
        l.resize(&mut state);
        assert_eq!(state.granted, 16);
    }
}
