//! Fetches in flight, shared by the threads of a process: a round that lacks units which another
//! thread is already fetching waits for that fetch instead of asking for the same bytes again.
//!
//! Readers that start together all lack the same index pieces (a `PrefetchSampler`'s loading
//! threads, a batch's parts on the pool, the reader beside them), and a round's pieces merge
//! (`merge_gap`) into requests that cover most of a section: three such rounds at once fetched
//! each index section three times. A thread first requests the units nobody is fetching, then
//! waits for the others' flights, then fetches itself whatever they did not bring (a flight
//! that failed): it never holds a claim while it waits, so no two threads wait on each other.
//!
//! Per process (`PerProcess`): a child forked while a flight was under way would wait forever
//! for a thread it does not have.

use crate::runtime::process::PerProcess;
use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::{Arc, Condvar, Mutex};

/// The units (of the node cache) being fetched by this process's threads: disjoint runs, each
/// keyed by its first unit, with its end and its flight.
type Runs = BTreeMap<u64, (u64, Arc<Flight>)>;

/// This process's `Runs` in flight.
#[derive(Default)]
pub(super) struct Flights(PerProcess<Mutex<Runs>>);

/// One thread's fetch: done once its bytes are in the cache, or it failed.
#[derive(Default)]
pub(super) struct Flight {
    done: Mutex<bool>,
    ended: Condvar,
}

impl Flight {
    fn end(&self) {
        *self.done.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.ended.notify_all();
    }

    /// Waits until the fetch is done (however it ended).
    pub fn wait(&self) {
        let mut done = self.done.lock().unwrap_or_else(|e| e.into_inner());
        while !*done {
            done = self.ended.wait(done).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// What `Flights::claim` gave a thread: the runs it fetches itself (registered until dropped,
/// which wakes their waiters), and the runs that others' flights are fetching, with them.
pub(super) struct Claim<'f> {
    flights: &'f Flights,
    pub mine: Vec<Range<u64>>,
    pub theirs: Vec<Range<u64>>,
    waits: Vec<Arc<Flight>>,
    flight: Arc<Flight>,
}

impl Flights {
    fn map(&self) -> std::sync::MutexGuard<'_, Runs> {
        let map = self.0.get_or_init(Mutex::default);
        map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Splits `missing` (runs of units, in any order, overlapping or not) into the runs that
    /// nobody fetches, claimed for the caller, and those that another thread's flight holds.
    pub fn claim(&self, mut missing: Vec<Range<u64>>) -> Claim<'_> {
        missing.sort_unstable_by_key(|r| r.start);
        let flight = Arc::new(Flight::default());
        let (mut mine, mut theirs, mut waits) = (Vec::new(), Vec::new(), Vec::new());
        let mut map = self.map();
        let mut from = 0; // units before this are handled (the runs overlap)
        for run in missing {
            let mut at = run.start.max(from);
            if at >= run.end {
                continue;
            }
            // The flights that overlap the run, in order: the one that starts before it (if it
            // reaches into it), then those that start inside it.
            let before = map
                .range(..at)
                .next_back()
                .filter(|(_, (end, _))| *end > at);
            let inside = map.range(at..run.end);
            for (&start, (end, other)) in before.into_iter().chain(inside) {
                if start > at {
                    mine.push(at..start);
                }
                theirs.push(start.max(at)..(*end).min(run.end));
                if !waits.iter().any(|w| Arc::ptr_eq(w, other)) {
                    waits.push(other.clone());
                }
                at = *end;
            }
            if at < run.end {
                mine.push(at..run.end);
            }
            from = run.end.max(from);
        }
        for run in &mine {
            map.insert(run.start, (run.end, flight.clone()));
        }
        Claim {
            flights: self,
            mine,
            theirs,
            waits,
            flight,
        }
    }
}

impl Claim<'_> {
    /// Ends the caller's own flight (waking its waiters), then waits for the others'.
    pub fn land_and_wait(mut self) {
        self.land();
        for other in std::mem::take(&mut self.waits) {
            other.wait();
        }
    }

    fn land(&mut self) {
        if self.mine.is_empty() {
            return;
        }
        let mut map = self.flights.map();
        for run in &self.mine {
            map.remove(&run.start);
        }
        drop(map);
        self.flight.end();
        self.mine.clear();
    }
}

impl Drop for Claim<'_> {
    /// A claim dropped without landing (an error, a panic) still ends its flight.
    fn drop(&mut self) {
        self.land();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A list of one run (clippy reads `vec![a..b]` as a mistake for `(a..b).collect()`).
    fn one(run: Range<u64>) -> Vec<Range<u64>> {
        vec![run]
    }

    #[test]
    fn a_second_claim_takes_only_what_the_first_left() {
        let flights = Flights::default();
        let first = flights.claim([10..20, 30..40].to_vec());
        assert_eq!(first.mine, [10..20, 30..40]);
        assert!(first.theirs.is_empty());
        let second = flights.claim([35..50, 0..15, 12..14].to_vec());
        assert_eq!(second.mine, [0..10, 40..50]);
        assert_eq!(second.theirs, [10..15, 35..40]);
        assert_eq!(second.waits.len(), 1);
        drop(first);
        let third = flights.claim(one(0..60));
        assert_eq!(third.mine, [10..40, 50..60]);
        assert_eq!(third.theirs, [0..10, 40..50]);
    }

    #[test]
    fn a_waiter_wakes_when_the_flight_lands_or_is_dropped() {
        let flights = Flights::default();
        let first = flights.claim(one(0..8));
        let (claimed, told) = std::sync::mpsc::channel();
        std::thread::scope(|s| {
            let waiter = s.spawn(|| {
                let second = flights.claim(one(4..12));
                assert_eq!((&second.mine, &second.theirs), (&one(8..12), &one(4..8)));
                claimed.send(()).unwrap();
                second.land_and_wait();
            });
            told.recv().unwrap();
            drop(first); // as an error would
            waiter.join().unwrap();
        });
        // Nothing is left in flight.
        assert_eq!(flights.claim(one(0..12)).mine, one(0..12));
    }
}
