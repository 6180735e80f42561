//! Keeps the upload thread's CPU within a share of the machine.
//!
//! Extraction is the agent's costliest work (demangling and encoding the
//! symbols of a 150 MB library takes a core for a second or two), and a
//! busy host hands the agent hundreds of files at start: unpaced, the
//! thread works through them back to back, and the agent costs the host
//! several percent of its CPU for minutes. The sampler's own cost is a
//! fraction of a percent. So after each file the thread sleeps long enough
//! that its CPU time over work and sleep stays within its budget (a share
//! of all the machine's CPUs, as a user reads an agent's cost), and it runs
//! at the lowest priority (nice 19), so that while it works a busy
//! workload is not delayed. Names come later on a small machine (the
//! backlog is spread over minutes), never at the workload's expense; the
//! backend names earlier samples too once a file's symbols arrive, since
//! frames are symbolized again at query time.

use std::time::Duration;

/// The default budget: a twentieth of a percent of the machine's CPUs
/// (1 ms a second on 2 cores, 32 ms on 64).
pub const DEFAULT_SYMBOL_CPU_PERCENT: f64 = 0.05;

/// The pause that keeps CPU within a share of one core.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pacer {
    /// The budget as a share of one core (1.0 or more: no pauses).
    share_of_core: f64,
}

impl Pacer {
    /// A budget of `machine_percent` % of `cpus` CPUs.
    pub(crate) fn new(machine_percent: f64, cpus: usize) -> Pacer {
        Pacer {
            share_of_core: machine_percent.max(0.0) / 100.0 * cpus.max(1) as f64,
        }
    }

    /// How long to sleep after `spent` of CPU, so that `spent` is the
    /// budget's share of the work and the sleep together.
    pub(crate) fn pause_after(&self, spent: Duration) -> Duration {
        if self.share_of_core >= 1.0 {
            return Duration::ZERO;
        }
        // No budget at all would never sleep out: a day is the longest.
        let share = self.share_of_core.max(1e-6);
        spent
            .mul_f64(1.0 / share - 1.0)
            .min(Duration::from_secs(24 * 3600))
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
        // 0.05% of 2 CPUs is a thousandth of one core: a second of work,
        // then 999 s asleep.
        let pacer = Pacer::new(0.05, 2);
        assert_eq!(
            pacer.pause_after(Duration::from_secs(1)),
            Duration::from_secs(999)
        );
        // 50% of 4 CPUs is two cores: never a pause.
        assert_eq!(
            Pacer::new(50.0, 4).pause_after(Duration::from_secs(5)),
            Duration::ZERO
        );
        // 10% of 1 CPU: 100 ms of work, 900 ms asleep.
        let pause = Pacer::new(10.0, 1).pause_after(Duration::from_millis(100));
        assert!((pause.as_secs_f64() - 0.9).abs() < 1e-9, "{pause:?}");
        // No budget: the longest pause, not forever.
        assert_eq!(
            Pacer::new(0.0, 8).pause_after(Duration::from_secs(1)),
            Duration::from_secs(24 * 3600)
        );
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
