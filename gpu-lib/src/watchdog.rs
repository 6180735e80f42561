//! A bound on how long a CUPTI call made by Kiln may take.
//!
//! Kiln calls CUPTI's PC Sampling API on the program's own threads (see
//! [`crate::pc_sampler`]). If one of those calls ever blocks —
//! a deadlock inside the driver, as the old start/stop discipline caused
//! on an H200 — the program must not be taken down with it a second
//! time: each call is registered here while it runs, a watchdog thread
//! looks every [`Watchdog::POLL`] for one that has run longer than the
//! bound, and once one has, [`Watchdog::tripped`] turns PC sampling off
//! for the rest of the process (no further PC Sampling call is made, not
//! even the `Disable` at exit). The stuck call itself cannot be undone;
//! what the watchdog buys is that it is the only one.
//!
//! Registering a call is two atomic operations on a fixed table: nothing
//! here allocates or takes a lock on the program's threads.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The CUPTI calls the watchdog knows by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchedCall {
    /// `cuptiPCSamplingEnable` and the configuration that follows it.
    PcSamplingEnable,
    /// `cuptiPCSamplingGetData`.
    PcSamplingGetData,
    /// `cuptiPCSamplingDisable`.
    PcSamplingDisable,
    /// `cuptiActivityFlushAll`.
    ActivityFlushAll,
}

impl WatchedCall {
    const ALL: [WatchedCall; 4] = [
        WatchedCall::PcSamplingEnable,
        WatchedCall::PcSamplingGetData,
        WatchedCall::PcSamplingDisable,
        WatchedCall::ActivityFlushAll,
    ];

    /// The CUPTI function's name.
    pub fn name(self) -> &'static str {
        match self {
            WatchedCall::PcSamplingEnable => "cuptiPCSamplingEnable",
            WatchedCall::PcSamplingGetData => "cuptiPCSamplingGetData",
            WatchedCall::PcSamplingDisable => "cuptiPCSamplingDisable",
            WatchedCall::ActivityFlushAll => "cuptiActivityFlushAll",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// A call that ran past the bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Overdue {
    /// Which call.
    pub call: WatchedCall,
    /// How long it had run when it was seen.
    pub running_for: Duration,
}

/// One call in flight: when it started (ns since the watchdog's epoch,
/// plus one so that 0 means free) and which call it is.
#[derive(Default)]
struct Slot {
    started: AtomicU64,
    call: AtomicUsize,
}

/// Calls in flight, the bound, and whether it was ever exceeded.
pub struct Watchdog {
    slots: [Slot; Watchdog::SLOTS],
    bound: Duration,
    epoch: Instant,
    tripped: AtomicBool,
    /// Calls made while every slot was taken (not watched).
    unwatched: AtomicU64,
}

impl Watchdog {
    /// Calls watched at once; more run unwatched (and are counted). One
    /// per launching thread draining at the same moment is plenty.
    pub const SLOTS: usize = 16;
    /// How often the watchdog thread looks.
    pub const POLL: Duration = Duration::from_millis(50);

    /// A watchdog for calls that should return within `bound`.
    pub fn new(bound: Duration) -> Self {
        Self {
            slots: Default::default(),
            bound,
            epoch: Instant::now(),
            tripped: AtomicBool::new(false),
            unwatched: AtomicU64::new(0),
        }
    }

    /// The bound calls are held to.
    pub fn bound(&self) -> Duration {
        self.bound
    }

    /// Registers `call` as running until the guard drops.
    pub fn watch(&self, call: WatchedCall) -> CallGuard<'_> {
        let started = self.now() + 1;
        for (at, slot) in self.slots.iter().enumerate() {
            if slot
                .started
                .compare_exchange(0, started, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                slot.call.store(call.index(), Ordering::Release);
                return CallGuard {
                    watchdog: self,
                    slot: Some(at),
                };
            }
        }
        self.unwatched.fetch_add(1, Ordering::Relaxed);
        CallGuard {
            watchdog: self,
            slot: None,
        }
    }

    /// Looks for a call running past the bound; the first one seen trips
    /// the watchdog for good and is returned (once).
    pub fn check(&self) -> Option<Overdue> {
        let now = self.now();
        let overdue = self.slots.iter().find_map(|slot| {
            let started = slot.started.load(Ordering::Acquire);
            let running_for = Duration::from_nanos(now.saturating_sub(started.checked_sub(1)?));
            (running_for > self.bound).then(|| Overdue {
                call: WatchedCall::ALL
                    .get(slot.call.load(Ordering::Acquire))
                    .copied()
                    .unwrap_or(WatchedCall::PcSamplingGetData),
                running_for,
            })
        })?;
        (!self.tripped.swap(true, Ordering::AcqRel)).then_some(overdue)
    }

    /// True once a call has run past the bound: PC sampling is off.
    pub fn tripped(&self) -> bool {
        self.tripped.load(Ordering::Acquire)
    }

    /// Calls that ran unwatched because every slot was taken.
    pub fn unwatched(&self) -> u64 {
        self.unwatched.load(Ordering::Relaxed)
    }

    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

/// A watched call; the slot is freed when it drops.
pub struct CallGuard<'a> {
    watchdog: &'a Watchdog,
    slot: Option<usize>,
}

impl Drop for CallGuard<'_> {
    fn drop(&mut self) {
        if let Some(at) = self.slot {
            self.watchdog.slots[at].started.store(0, Ordering::Release);
        }
    }
}

/// A cheap "now" for the drain policy, in ns: `CLOCK_MONOTONIC_COARSE`,
/// read from the vDSO without the TSC (a few ns; ticks of 1–4 ms, plenty
/// for intervals of hundreds). Every launch exit reads it.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes one timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_within_the_bound_does_not_trip() {
        let dog = Watchdog::new(Duration::from_secs(60));
        {
            let _call = dog.watch(WatchedCall::PcSamplingGetData);
            assert_eq!(dog.check(), None);
        }
        assert_eq!(dog.check(), None);
        assert!(!dog.tripped());
    }

    #[test]
    fn a_call_past_the_bound_trips_once_and_names_itself() {
        let dog = Watchdog::new(Duration::from_millis(20));
        let call = dog.watch(WatchedCall::PcSamplingDisable);
        std::thread::sleep(Duration::from_millis(40));
        let overdue = dog.check().expect("overdue");
        assert_eq!(overdue.call, WatchedCall::PcSamplingDisable);
        assert!(overdue.running_for >= Duration::from_millis(20));
        assert!(dog.tripped());
        // Reported once; tripped stays.
        assert_eq!(dog.check(), None);
        drop(call);
        assert!(dog.tripped());
    }

    #[test]
    fn slots_are_reused_and_overflow_is_counted() {
        let dog = Watchdog::new(Duration::from_secs(60));
        let guards: Vec<_> = (0..Watchdog::SLOTS + 3)
            .map(|_| dog.watch(WatchedCall::PcSamplingGetData))
            .collect();
        assert_eq!(dog.unwatched(), 3);
        drop(guards);
        let _again = dog.watch(WatchedCall::ActivityFlushAll);
        assert_eq!(dog.unwatched(), 3, "freed slots are taken again");
    }

    #[test]
    fn calls_on_many_threads_at_once() {
        let dog = Watchdog::new(Duration::from_secs(60));
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    for _ in 0..1000 {
                        let _g = dog.watch(WatchedCall::PcSamplingGetData);
                    }
                });
            }
        });
        assert_eq!(dog.unwatched(), 0);
        assert!(
            dog.slots
                .iter()
                .all(|s| s.started.load(Ordering::Relaxed) == 0)
        );
    }
}
