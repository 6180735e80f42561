//! Which launches call [`crate::kiln_cuda_launch_marker`], the function
//! the agent's uprobe walks the launching CPU stack from.
//!
//! The probe costs the launching thread a trap and a stack walk: on an
//! H200 (2026-11-27) with `kiln up`'s agent attached, one thread's empty
//! launches went from 6.0–8.1 µs (the library alone) to 18.7–20.4 µs, and
//! at 50 k launches/s the probe's ring buffer overflowed. But the agent
//! needs few stacks: a snapshot puts each kernel aggregate (a thread's
//! launches of one kernel in one interval) under at most
//! [`crate::wire::EXEMPLARS`] exemplar launches' stacks. So only some
//! launches are marked, and exemplars are chosen among them:
//!
//! - **every launch while the thread launches slowly**: up to
//!   [`MarkPolicy::per_second`] a second (judged per
//!   [`MarkPolicy::window`]), so a program launching a few hundred
//!   kernels a second is walked exactly as before;
//! - **the first launch of each kernel on each thread in each snapshot
//!   interval**, so that every aggregate, however rare its kernel, has a
//!   marked exemplar;
//! - **beyond that, each launch with the same chance** (the budget over
//!   the previous window's launches), so the marked launches are an
//!   unbiased sample of the call paths a busy thread launches from;
//! - **every graph launch** (one launch, many kernels).

use std::collections::HashMap;
use std::time::Duration;

/// How many launches a thread marks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MarkPolicy {
    /// Marks a second per thread, besides the first launch of each kernel
    /// per interval.
    pub per_second: u32,
    /// The window over which a thread's launch rate is judged.
    pub window: Duration,
}

impl Default for MarkPolicy {
    fn default() -> Self {
        Self {
            // At 50 k launches/s, 1 launch in 250 pays the probe.
            per_second: 200,
            window: Duration::from_millis(100),
        }
    }
}

impl MarkPolicy {
    /// Marks allowed per window.
    fn budget(&self) -> u64 {
        (u128::from(self.per_second) * self.window.as_nanos() / 1_000_000_000).max(1) as u64
    }

    fn window_ns(&self) -> u64 {
        u64::try_from(self.window.as_nanos())
            .unwrap_or(u64::MAX)
            .max(1)
    }
}

/// Kernels remembered per thread for "first in this interval"; past it
/// the memory starts over (a few more launches get marked).
const KERNELS_REMEMBERED: usize = 1024;

/// One thread's marking state (kept in a thread-local by the callbacks).
#[derive(Debug)]
pub struct ThreadMarks {
    window_start_ns: u64,
    in_window: u64,
    /// Launches in the previous window: the rate the chance is set by.
    previous_window: u64,
    rng: u64,
    /// Kernel (its name's address, stable per function) → the interval
    /// it was last marked in.
    first_in_interval: HashMap<usize, u64>,
}

impl ThreadMarks {
    /// A thread's state; `seed` varies the random choices between threads.
    pub fn new(seed: u64) -> Self {
        Self {
            window_start_ns: 0,
            in_window: 0,
            previous_window: 0,
            // xorshift needs a non-zero state.
            rng: seed | 1,
            first_in_interval: HashMap::new(),
        }
    }

    /// Whether the launch at `now_ns` of `kernel` (0 when unknown) in
    /// snapshot interval `interval` is marked.
    pub fn mark(
        &mut self,
        policy: &MarkPolicy,
        now_ns: u64,
        kernel: usize,
        interval: u64,
        graph: bool,
    ) -> bool {
        if now_ns.saturating_sub(self.window_start_ns) >= policy.window_ns() {
            // A window with no launch at all counts as a slow one.
            let windows = now_ns.saturating_sub(self.window_start_ns) / policy.window_ns();
            self.previous_window = if windows == 1 { self.in_window } else { 0 };
            self.in_window = 0;
            self.window_start_ns = now_ns;
        }
        self.in_window += 1;
        if graph {
            return true;
        }
        if kernel != 0 && self.first_in_interval.get(&kernel) != Some(&interval) {
            if self.first_in_interval.len() >= KERNELS_REMEMBERED {
                self.first_in_interval.clear();
            }
            self.first_in_interval.insert(kernel, interval);
            return true;
        }
        let budget = policy.budget();
        if self.previous_window <= budget && self.in_window <= budget {
            return true;
        }
        // Each launch with chance budget / rate.
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        let rate = self.previous_window.max(self.in_window);
        self.rng % rate < budget
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn policy() -> MarkPolicy {
        MarkPolicy {
            per_second: 200,
            window: Duration::from_millis(100),
        }
    }

    #[test]
    fn a_slow_thread_marks_every_launch() {
        let mut t = ThreadMarks::new(7);
        // 100 launches a second of one kernel, for 3 s.
        let marked = (0..300)
            .filter(|i| t.mark(&policy(), i * 10 * MS, 0xabc, i / 100, false))
            .count();
        assert_eq!(marked, 300);
    }

    #[test]
    fn a_busy_thread_marks_about_the_budget_spread_over_its_call_paths() {
        let mut t = ThreadMarks::new(7);
        // 50 k launches a second for 2 s, alternating between two kernels
        // (two call paths), in one interval.
        let mut marked = [0u64; 2];
        for i in 0..100_000u64 {
            if t.mark(&policy(), i * 20_000, 0x100 + (i % 2) as usize, 0, false) {
                marked[(i % 2) as usize] += 1;
            }
        }
        let total = marked[0] + marked[1];
        // About 200 a second: 400, give or take the chance.
        assert!((300..=600).contains(&total), "{total} marked of 100000");
        // Unbiased: the two paths get about half each.
        let share = marked[0] as f64 / total as f64;
        assert!((0.4..=0.6).contains(&share), "{marked:?}");
    }

    #[test]
    fn the_first_launch_of_each_kernel_in_an_interval_is_marked() {
        let mut t = ThreadMarks::new(3);
        // Busy with one kernel...
        for i in 0..20_000u64 {
            t.mark(&policy(), i * 10_000, 0x1, 0, false);
        }
        // ...a rare kernel's first launch in interval 0 and in interval 1.
        let now = 20_000 * 10_000;
        assert!(t.mark(&policy(), now, 0x2, 0, false));
        assert!(
            (0..50).any(|i| !t.mark(&policy(), now + i * 10_000, 0x2, 0, false)),
            "the rare kernel's later launches are sampled"
        );
        assert!(t.mark(&policy(), now + MS, 0x2, 1, false));
    }

    #[test]
    fn graph_launches_are_always_marked() {
        let mut t = ThreadMarks::new(5);
        for i in 0..10_000u64 {
            t.mark(&policy(), i * 1_000, 0x1, 0, false);
        }
        assert!((0..100).all(|i| t.mark(&policy(), 10_000_000 + i, 0, 0, true)));
    }

    #[test]
    fn a_pause_makes_a_thread_slow_again() {
        let mut t = ThreadMarks::new(9);
        for i in 0..10_000u64 {
            t.mark(&policy(), i * 10_000, 0x1, 0, false);
        }
        // Quiet for a second, then launches at 100 a second.
        let after = 10_000 * 10_000 + 1_000 * MS;
        assert!((0..10).all(|i| t.mark(&policy(), after + i * 10 * MS, 0x1, 0, false)));
    }
}
