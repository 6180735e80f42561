//! Keeps the upload thread's CPU within a share of the machine.
//!
//! Extraction is the agent's costliest work (demangling and encoding the
//! symbols of a 150 MB library takes a core for a second or two), and a
//! busy host hands the agent hundreds of files at start: unpaced, the
//! thread works through them back to back, and the agent costs the host
//! several percent of its CPU for minutes. The sampler's own cost is a
//! fraction of a percent. So the thread sleeps after each file (the
//! busiest programs' first) long enough that its CPU time stays within its
//! budget (a share of all the machine's CPUs, as a user reads an agent's
//! cost), and it runs
//! at the lowest priority (nice 19), so that while it works a busy
//! workload is not delayed. Names come later on a small machine (the
//! backlog is spread over minutes), never at the workload's expense; the
//! backend names earlier samples too once a file's symbols arrive, since
//! frames are symbolized again at query time.

use std::time::{Duration, Instant};

/// The default budget: a twentieth of a percent of the machine's CPUs
/// (1 ms a second on 2 cores, 32 ms on 64).
pub const DEFAULT_SYMBOL_CPU_PERCENT: f64 = 0.05;

/// CPU the thread may spend beyond its budget before pausing: none. The
/// busiest program's file is taken first and never waits (the pause comes
/// after a file), so a burst only hurried the rest; and at nice 19 on a
/// busy host a burst is spent slowly: on `peer_bench`'s host a 10 s burst
/// was still being spent 90 s after start (the agent's CPU in that window
/// 0.86% of the machine against 0.68% without), and a 1 s burst too
/// (0.76%, the symbol thread 0.22 s of the window).
const BURST: Duration = Duration::ZERO;

/// The longest pause (a budget of nothing would never sleep out).
const MAX_PAUSE: Duration = Duration::from_secs(24 * 3600);

/// Keeps a thread's CPU within a share of one core plus [`BURST`]: a
/// token bucket of CPU seconds, filled at the share's rate up to the
/// burst, emptied by work, and when overdrawn repaid by sleeping.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pacer {
    /// The budget as a share of one core (1.0 or more: no pauses).
    share_of_core: f64,
    /// CPU seconds the thread may still spend without a pause.
    credit: f64,
    /// When `credit` was brought up to date.
    at: Instant,
}

impl Pacer {
    /// A budget of `machine_percent` % of `cpus` CPUs, full at `now`.
    pub(crate) fn new(machine_percent: f64, cpus: usize, now: Instant) -> Pacer {
        Pacer {
            share_of_core: machine_percent.max(0.0) / 100.0 * cpus.max(1) as f64,
            credit: BURST.as_secs_f64(),
            at: now,
        }
    }

    /// How long to sleep after `spent` of CPU, the work having ended at
    /// `now`: none while the bucket holds it, else as long as the budget
    /// takes to repay what was overdrawn.
    pub(crate) fn pause_after(&mut self, spent: Duration, now: Instant) -> Duration {
        if self.share_of_core >= 1.0 {
            return Duration::ZERO;
        }
        let share = self.share_of_core.max(1e-9);
        let accrued = share * now.saturating_duration_since(self.at).as_secs_f64();
        self.credit = (self.credit + accrued).min(BURST.as_secs_f64()) - spent.as_secs_f64();
        self.at = now;
        if self.credit >= 0.0 {
            return Duration::ZERO;
        }
        Duration::from_secs_f64(-self.credit / share).min(MAX_PAUSE)
    }
}

/// CPU time the calling thread has used.
pub(crate) fn thread_cpu_time() -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec, which `now` is.
    let ok = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) } == 0;
    if !ok {
        return Duration::ZERO;
    }
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

/// Lowers the calling thread to nice 19: on Linux a thread's nice value is
/// its own, so the sampler's threads keep theirs.
pub(crate) fn lowest_priority() {
    // SAFETY: gettid and setpriority take and return plain integers.
    let failed = unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, 19) != 0
    };
    if failed {
        tracing::debug!(error = %std::io::Error::last_os_error(), "symbol thread keeps its priority");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pause_keeps_the_thread_within_its_share_of_the_machine() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        // 0.05% of 2 CPUs is a thousandth of one core: 0.4 s of work,
        // then 400 s asleep.
        let mut pacer = Pacer::new(0.05, 2, t0);
        let ms = Duration::from_millis;
        let pause = pacer.pause_after(ms(400), at(5));
        assert!((pause.as_secs_f64() - 400.0).abs() < 0.01, "{pause:?}");
        // A file after a long quiet spell pays for itself all the same:
        // nothing is saved up.
        let pause = pacer.pause_after(Duration::from_secs(2), at(3600));
        assert!((pause.as_secs_f64() - 2000.0).abs() < 0.01, "{pause:?}");
        // Each second of work costs a thousand of sleep.
        let after = at(3600) + pause;
        let pause = pacer.pause_after(Duration::from_secs(1), after + Duration::from_secs(1));
        assert!((pause.as_secs_f64() - 1000.0).abs() < 0.01, "{pause:?}");
        // 50% of 4 CPUs is two cores: never a pause.
        let mut pacer = Pacer::new(50.0, 4, t0);
        assert_eq!(
            pacer.pause_after(Duration::from_secs(500), at(1)),
            Duration::ZERO
        );
        // No budget: the longest pause, not forever.
        let mut pacer = Pacer::new(0.0, 8, t0);
        assert_eq!(pacer.pause_after(Duration::from_secs(2), at(11)), MAX_PAUSE);
    }

    #[test]
    fn a_thread_reads_its_own_cpu_time() {
        let before = thread_cpu_time();
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        assert!(thread_cpu_time() > before);
    }
}
