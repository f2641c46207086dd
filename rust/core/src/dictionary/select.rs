//! Choosing the dictionary's segments: COVER's loop. Visit after visit (visit `v` is epoch
//! `v % epochs`), scan the epoch for the window whose distinct d-mers have the largest summed
//! frequency, trim the covered d-mers off its ends, and cover the rest (zero their frequencies),
//! so that no later segment pays for them again.
//!
//! Each choice depends on the ones before it, yet a choice covers only the ~27 d-mers of its
//! window, so most scans find the same window a few choices earlier. The pool's other threads
//! therefore scan the next visits ahead of the one being chosen, each on its own copy of the
//! frequencies (kept up to date from the log of covered buckets between scans), and the chooser
//! keeps a scan only where it can prove that a scan now would find the same window:
//!
//! ```text
//!   chooser, visit v:  v's scan made ahead? ── yes ── still exact? ── yes ──> cover, log, v+1
//!                          │ no                        │ no
//!                          v                           v
//!                      scan a later visit         scan v again
//!                      meanwhile, or v itself
//!   helpers:           claim a visit below v + LOOKAHEAD, catch up with the log, scan, publish
//! ```
//!
//! Why a scan made earlier can be kept. Frequencies only fall (to zero), so every window scores
//! in an earlier scan at least what it scores now. If the scan's best window still scores now
//! what the scan found, no window beats it now, and none before it ties (they scored less in
//! the scan, so no more now): it is the first best window, the one a scan now finds. Otherwise
//! the chooser scans the epoch again. The dictionary is the same on any number of threads (on
//! BBC articles, 95% of the scans made ahead are kept).

use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::Mutex;

use super::{Bucket, Dmers, Ring, DMER, RING, SEGMENT};

/// How many visits from the one being chosen may be scanned at once: more lets more threads
/// help, from older frequencies (their scans are kept less often).
const LOOKAHEAD: usize = 4;

/// An epoch's best window: d-mer positions `range` (empty when it scores 0), whose distinct
/// d-mers' frequencies sum to `score`.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Window {
    score: u64,
    range: (usize, usize),
}

/// Runs the loop over `dmers`, whose buckets occur in `frequency` samples: for visits 0, 1,
/// 2 ..., `choose(the d-mer positions it covers)` (None where nothing is left to cover in the
/// epoch) until it returns false. `epoch(visit)` is the range of d-mer positions a visit scans.
/// The current rayon pool's other threads scan ahead; the choices are the same on any number.
pub(super) fn choose_segments<D: Dmers + ?Sized>(
    dmers: &D,
    frequency: &[u32],
    epoch: &(dyn Fn(usize) -> (usize, usize) + Sync),
    mut choose: impl FnMut(Option<(usize, usize)>) -> bool,
) {
    let ahead = Ahead {
        next: AtomicUsize::new(0),
        chosen: AtomicUsize::new(0),
        done: AtomicBool::new(false),
        scans: Mutex::new([None; LOOKAHEAD]),
        covered: Mutex::new(Vec::new()),
    };
    // More helpers than visits that may be scanned at once would only wait.
    let helpers = (rayon::current_num_threads() - 1).min(LOOKAHEAD - 1);
    rayon::in_place_scope(|scope| {
        for _ in 0..helpers {
            scope.spawn(|_| ahead.help(dmers, frequency, epoch));
        }
        // Ends the helpers' loops however the chooser's ends (a panic in `choose` included,
        // which would otherwise leave the scope waiting for them).
        let _done = Done(&ahead.done);
        // The chooser's table is the frequencies as they are.
        let mut table = Table::new(dmers, frequency);
        for visit in 0.. {
            let window = ahead.window(visit, &mut table, epoch);
            let segment = (window.score > 0).then(|| table.cover(window.range));
            if helpers > 0 {
                if let Some((first, last)) = segment {
                    let mut covered = ahead.covered.lock().unwrap_or_else(|e| e.into_inner());
                    covered.extend((first..last).map(|at| dmers.at(at) as u32));
                }
            }
            if !choose(segment) {
                break;
            }
            ahead.chosen.store(visit + 1, Release);
        }
    });
}

/// Sets its flag when dropped.
struct Done<'a>(&'a AtomicBool);

impl Drop for Done<'_> {
    fn drop(&mut self) {
        self.0.store(true, Release);
    }
}

/// A scanner's frequencies (those of the first `synced` buckets of the covered log zeroed) and
/// its marks: a d-mer's occurrences in the sliding window, in the same cache line.
struct Table<'a, D: ?Sized> {
    dmers: &'a D,
    buckets: Vec<Bucket>,
    synced: usize,
}

impl<'a, D: Dmers + ?Sized> Table<'a, D> {
    fn new(dmers: &'a D, frequency: &[u32]) -> Self {
        let buckets = (frequency.iter())
            .map(|&frequency| Bucket { frequency, mark: 0 })
            .collect();
        Table {
            dmers,
            buckets,
            synced: 0,
        }
    }

    /// Zeroes the buckets covered since the last catch-up.
    fn catch_up(&mut self, covered: &Mutex<Vec<u32>>) {
        let covered = covered.lock().unwrap_or_else(|e| e.into_inner());
        for &d in &covered[self.synced..] {
            self.buckets[d as usize].frequency = 0;
        }
        self.synced = covered.len();
    }

    /// The first window of `SEGMENT` bytes in `begin..end` with the largest score (score 0 and
    /// an empty range if none scores more). Leaves the marks as it found them (all 0).
    fn scan(&mut self, (begin, end): (usize, usize)) -> Window {
        let (dmers, buckets) = (self.dmers, &mut self.buckets);
        let window = SEGMENT - DMER + 1;
        let (mut score, mut best) = (
            0u64,
            Window {
                score: 0,
                range: (0, 0),
            },
        );
        const { assert!(SEGMENT - DMER + 1 + super::AHEAD < RING) };
        let mut ring = Ring::new(dmers, (begin, end));
        let mut low = begin;
        for high in begin..end {
            let at = ring.step(high, buckets);
            let entering = &mut buckets[at];
            if entering.mark == 0 {
                score += u64::from(entering.frequency);
            }
            entering.mark += 1;
            if high + 1 - low > window {
                let leaving = &mut buckets[ring.behind(low)];
                leaving.mark -= 1;
                if leaving.mark == 0 {
                    score -= u64::from(leaving.frequency);
                }
                low += 1;
            }
            if score > best.score {
                best = Window {
                    score,
                    range: (low, high + 1),
                };
            }
        }
        for at in low..end.max(low) {
            buckets[ring.behind(at)].mark -= 1;
        }
        best
    }

    /// What the window `(first, last)` scores with these frequencies.
    fn score(&mut self, (first, last): (usize, usize)) -> u64 {
        let mut score = 0;
        for at in first..last {
            let bucket = &mut self.buckets[self.dmers.at(at)];
            if bucket.mark == 0 {
                score += u64::from(bucket.frequency);
            }
            bucket.mark += 1;
        }
        for at in first..last {
            self.buckets[self.dmers.at(at)].mark -= 1;
        }
        score
    }

    /// Covers the window `range` (of a score above 0), its covered d-mers at either end trimmed
    /// off: the d-mer positions it covers.
    fn cover(&mut self, (mut first, mut last): (usize, usize)) -> (usize, usize) {
        let frequency = |table: &Self, at: usize| table.buckets[table.dmers.at(at)].frequency;
        while frequency(self, first) == 0 {
            first += 1;
        }
        while frequency(self, last - 1) == 0 {
            last -= 1;
        }
        for at in first..last {
            self.buckets[self.dmers.at(at)].frequency = 0;
        }
        (first, last)
    }
}

/// The scans made ahead of the chooser.
struct Ahead {
    /// The first visit no thread has claimed.
    next: AtomicUsize,
    /// Visits before this one are chosen.
    chosen: AtomicUsize,
    /// Set when the loop is over.
    done: AtomicBool,
    /// Published scans `(visit, window)`, visit `v` in slot `v % LOOKAHEAD`.
    scans: Mutex<[Option<(usize, Window)>; LOOKAHEAD]>,
    /// The buckets covered so far, in the order they were.
    covered: Mutex<Vec<u32>>,
}

impl Ahead {
    /// Claims the first unclaimed visit, if it is below `chosen + LOOKAHEAD`.
    fn claim(&self, chosen: usize) -> Option<usize> {
        let mut visit = self.next.load(Relaxed);
        loop {
            if visit >= chosen + LOOKAHEAD {
                return None;
            }
            match (self.next).compare_exchange_weak(visit, visit + 1, AcqRel, Relaxed) {
                Ok(_) => return Some(visit),
                Err(now) => visit = now,
            }
        }
    }

    fn publish(&self, visit: usize, window: Window) {
        let mut scans = self.scans.lock().unwrap_or_else(|e| e.into_inner());
        let slot = &mut scans[visit % LOOKAHEAD];
        // A late scan (its visit chosen without it meanwhile) must not replace a newer one.
        if slot.is_none_or(|(was, _)| was < visit) {
            *slot = Some((visit, window));
        }
    }

    fn published(&self, visit: usize) -> Option<Window> {
        let scans = self.scans.lock().unwrap_or_else(|e| e.into_inner());
        match scans[visit % LOOKAHEAD] {
            Some((was, window)) if was == visit => Some(window),
            _ => None,
        }
    }

    /// A helper's loop: scan the visits it can claim, until the chooser is done.
    fn help<D: Dmers + ?Sized>(
        &self,
        dmers: &D,
        frequency: &[u32],
        epoch: &(dyn Fn(usize) -> (usize, usize) + Sync),
    ) {
        // A helper the pool starts late (the loop over) copies no table.
        if self.done.load(Acquire) {
            return;
        }
        let mut table = Table::new(dmers, frequency);
        let mut idle = 0u32;
        while !self.done.load(Acquire) {
            match self.claim(self.chosen.load(Acquire)) {
                Some(visit) => {
                    table.catch_up(&self.covered);
                    let window = table.scan(epoch(visit));
                    self.publish(visit, window);
                    idle = 0;
                }
                // The chooser is behind: wait for it, giving the core up after a while.
                None if idle < 100 => {
                    std::hint::spin_loop();
                    idle += 1;
                }
                None => std::thread::yield_now(),
            }
        }
    }

    /// The best window of `visit`, all visits before it chosen, as `table` (the frequencies as
    /// they are) finds it: a helper's scan where it still holds, else its own. While the
    /// helpers' scan is not there, it scans a later visit for them.
    fn window(
        &self,
        visit: usize,
        table: &mut Table<impl Dmers + ?Sized>,
        epoch: &(dyn Fn(usize) -> (usize, usize) + Sync),
    ) -> Window {
        loop {
            if let Some(window) = self.published(visit) {
                if window.score == 0 || table.score(window.range) == window.score {
                    return window;
                }
                return table.scan(epoch(visit));
            }
            match self.claim(visit) {
                Some(later) if later > visit => {
                    let window = table.scan(epoch(later));
                    self.publish(later, window);
                }
                // Its own to scan, or a helper's still at it: scanning it costs no more than
                // waiting.
                _ => return table.scan(epoch(visit)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scan_from_older_frequencies_scores_its_window_as_they_were() {
        // 40 d-mers over 8 buckets; bucket 3 is frequent.
        let dmers: Vec<u32> = (0..40u32)
            .map(|i| if i % 5 == 0 { 3 } else { i % 8 })
            .collect();
        let mut table = Table::new(dmers.as_slice(), &[1, 1, 1, 50, 1, 1, 1, 1]);
        let found = table.scan((0, 40));
        assert!(
            table.buckets.iter().all(|b| b.mark == 0),
            "marks left as found"
        );
        assert_eq!(table.score(found.range), found.score);
        // The frequent d-mer is covered meanwhile: the scan no longer holds.
        let covered = Mutex::new(vec![3]);
        table.catch_up(&covered);
        assert!(table.score(found.range) < found.score);
        let again = table.scan((0, 40));
        assert_eq!(again.score, table.score(again.range));
        assert!(again.score < found.score);
    }

    /// Epochs that repeat each other's d-mers, so that a choice often spoils the scans made
    /// ahead of it (and the chooser scans again).
    fn choices(threads: usize) -> Vec<Option<(usize, usize)>> {
        let mut seed = 11u64;
        let dmers: Vec<u32> = (0..40_000)
            .map(|_| {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
                ((seed >> 33) % 600) as u32
            })
            .collect();
        let frequency: Vec<u32> = (0..600u32).map(|b| 1 + b % 37).collect();
        let epoch = |visit: usize| ((visit % 50) * 800, (visit % 50 + 1) * 800);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .expect("a pool");
        let mut chosen = Vec::new();
        pool.install(|| {
            choose_segments(dmers.as_slice(), &frequency, &epoch, |segment| {
                chosen.push(segment);
                chosen.len() < 300
            })
        });
        chosen
    }

    #[test]
    fn chooses_on_several_threads_what_one_thread_chooses() {
        let one = choices(1);
        assert_eq!(one.len(), 300);
        assert!(one.iter().any(Option::is_some) && one.iter().any(Option::is_none));
        for threads in [2, 4] {
            assert!(choices(threads) == one, "{threads} threads");
        }
    }

    #[test]
    fn a_panic_in_choose_ends_the_helpers_and_reaches_the_caller() {
        let (sent, received) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(3)
                .build()
                .expect("a pool");
            let dmers: Vec<u32> = (0..10_000u32).map(|i| i % 97).collect();
            let frequency = vec![1u32; 97];
            let epoch = |visit: usize| ((visit % 10) * 1000, (visit % 10 + 1) * 1000);
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                pool.install(|| {
                    let mut visits = 0;
                    choose_segments(dmers.as_slice(), &frequency, &epoch, |_| {
                        visits += 1;
                        assert!(visits < 5, "a failing choice");
                        true
                    })
                })
            }));
            sent.send(outcome.is_err()).expect("the test waits");
        });
        // Bounded: helpers left spinning would keep the scope from ever returning.
        let panicked = received.recv_timeout(std::time::Duration::from_secs(60));
        assert_eq!(panicked, Ok(true));
    }
}
