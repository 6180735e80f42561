//! Idle CPU time, read from the kernel's own accounting (`/proc/stat`)
//! rather than sampled.
//!
//! The sampler's perf events tick on every CPU, and a tick that finds the
//! idle task counts as idle. But an idle CPU may not tick at all: on some
//! virtual machines the hypervisor keeps a halted vCPU's timers from
//! firing (seen here: a Firecracker guest's idle vCPU 1 gave 0 samples in
//! 3 s while `/proc/stat` counted 3.7 s of idle, and 282 of 300 once a
//! spinner was pinned there). Idle time then went missing, and busy plus
//! idle drew the machine as having fewer cores than it has. The kernel
//! counts idle time on every CPU whether it ticks or not, so the idle
//! samples of each drain are its idle time since the last one, in sample
//! periods.

use std::collections::HashMap;
use std::io;

/// Each sampled CPU's idle time (`idle` + `iowait` in `/proc/stat`), turned
/// into idle samples per drain.
#[derive(Debug)]
pub(crate) struct IdleTime {
    cpus: Vec<u32>,
    period_ns: u64,
    /// Nanoseconds per `/proc/stat` tick (`USER_HZ`).
    tick_ns: u64,
    /// Each CPU's idle ticks at the last reading, and that reading's boot
    /// second.
    last: Option<(HashMap<u32, u64>, u32)>,
    /// Idle time not yet a whole period, carried to the next drain.
    carry_ns: u64,
}

impl IdleTime {
    /// Idle time of `cpus`, in samples of `period_ns`.
    pub(crate) fn new(cpus: Vec<u32>, period_ns: u64) -> Self {
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        IdleTime {
            cpus,
            period_ns: period_ns.max(1),
            tick_ns: 1_000_000_000 / u64::try_from(hz).ok().filter(|&h| h > 0).unwrap_or(100),
            last: None,
            carry_ns: 0,
        }
    }

    /// The idle samples since the last call, each `(boot second, count)`,
    /// spread evenly over the seconds after the last call up to
    /// `now_second`. The first call only takes its reading.
    pub(crate) fn take(&mut self, now_second: u32) -> io::Result<Vec<(u32, u64)>> {
        let ticks = idle_ticks(&std::fs::read_to_string("/proc/stat")?, &self.cpus);
        Ok(self.take_ticks(ticks, now_second))
    }

    fn take_ticks(&mut self, ticks: HashMap<u32, u64>, now_second: u32) -> Vec<(u32, u64)> {
        let Some((last, last_second)) = self.last.replace((ticks.clone(), now_second)) else {
            return Vec::new();
        };
        // A CPU gone offline since the last reading counts nothing; a
        // counter that went back (it never should) counts nothing either.
        let idle_ticks: u64 = ticks
            .iter()
            .filter_map(|(cpu, now)| now.checked_sub(*last.get(cpu)?))
            .sum();
        let idle_ns = idle_ticks * self.tick_ns + self.carry_ns;
        let samples = idle_ns / self.period_ns;
        self.carry_ns = idle_ns % self.period_ns;
        spread(samples, last_second, now_second)
    }
}

/// `samples` over the seconds `after + 1 ..= until` (at `until` when the
/// range is empty), the remainder to the earliest seconds.
fn spread(samples: u64, after: u32, until: u32) -> Vec<(u32, u64)> {
    if samples == 0 {
        return Vec::new();
    }
    let first = after.saturating_add(1).min(until);
    let seconds = u64::from(until - first) + 1;
    let (each, rest) = (samples / seconds, samples % seconds);
    (first..=until)
        .enumerate()
        .map(|(i, second)| (second, each + u64::from((i as u64) < rest)))
        .filter(|&(_, n)| n > 0)
        .collect()
}

/// Each of `cpus`' idle ticks (`idle` + `iowait`) in a `/proc/stat` text;
/// CPUs it does not list are left out.
fn idle_ticks(stat: &str, cpus: &[u32]) -> HashMap<u32, u64> {
    stat.lines()
        .filter_map(|line| {
            let mut fields = line.split_ascii_whitespace();
            let cpu: u32 = fields.next()?.strip_prefix("cpu")?.parse().ok()?;
            if !cpus.contains(&cpu) {
                return None;
            }
            // user nice system idle iowait …
            let values: Vec<u64> = fields.take(5).filter_map(|v| v.parse().ok()).collect();
            Some((cpu, values.get(3)? + values.get(4)?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "cpu  100 0 50 1000 10 0 0 0 0 0\n\
        cpu0 50 0 25 400 5 0 0 0 0 0\n\
        cpu1 50 0 25 600 5 0 0 0 0 0\n\
        intr 12345\n";

    #[test]
    fn idle_and_iowait_of_the_sampled_cpus() {
        let ticks = idle_ticks(STAT, &[0, 1, 2]);
        assert_eq!(ticks, HashMap::from([(0, 405), (1, 605)]));
        assert_eq!(idle_ticks(STAT, &[1]), HashMap::from([(1, 605)]));
    }

    #[test]
    fn idle_time_becomes_samples_over_the_seconds_since_the_last_drain() {
        // 10 ms ticks, 10 ms periods (100 Hz).
        let mut idle = IdleTime {
            cpus: vec![0, 1],
            period_ns: 10_000_000,
            tick_ns: 10_000_000,
            last: None,
            carry_ns: 0,
        };
        assert!(
            idle.take_ticks(HashMap::from([(0, 400), (1, 600)]), 100)
                .is_empty()
        );
        // Two seconds: CPU 0 idle 150 ticks, CPU 1 idle 200 (both idle
        // throughout would be 400).
        let got = idle.take_ticks(HashMap::from([(0, 550), (1, 800)]), 102);
        assert_eq!(got, [(101, 175), (102, 175)]);
        // A CPU gone offline counts nothing; one added since counts from
        // its first reading.
        let got = idle.take_ticks(HashMap::from([(0, 551), (2, 7)]), 103);
        assert_eq!(got, [(103, 1)]);
    }

    #[test]
    fn part_periods_carry_over() {
        let mut idle = IdleTime {
            cpus: vec![0],
            period_ns: 4_000_000,
            tick_ns: 10_000_000,
            last: None,
            carry_ns: 0,
        };
        idle.take_ticks(HashMap::from([(0, 0)]), 1);
        // 10 ms is 2 periods of 4 ms, 2 ms carried…
        assert_eq!(idle.take_ticks(HashMap::from([(0, 1)]), 2), [(2, 2)]);
        // …and with the next 10 ms, 3.
        assert_eq!(idle.take_ticks(HashMap::from([(0, 2)]), 3), [(3, 3)]);
    }

    #[test]
    fn reading_this_machine() {
        let mut idle = IdleTime::new(vec![0], 10_000_000);
        assert!(idle.take(1).unwrap().is_empty());
        assert!(idle.take(2).is_ok());
    }
}
