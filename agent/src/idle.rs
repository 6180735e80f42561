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
//!
//! `/proc/stat` says how much idle time a drain held, not in which of its
//! seconds: the idle samples go to the seconds with room for them, those
//! whose busy samples leave CPUs free (a CPU is idle when it is not busy),
//! so that no second shows more samples than the CPUs can take.

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
    /// over the seconds after the last call up to `now_second`, each
    /// second given what `busy` (its busy samples) leaves of the CPUs'
    /// samples (see [`fill`]). The first call only takes its reading.
    pub(crate) fn take(
        &mut self,
        now_second: u32,
        busy: &HashMap<u32, u64>,
    ) -> io::Result<Vec<(u32, u64)>> {
        let ticks = idle_ticks(&std::fs::read_to_string("/proc/stat")?, &self.cpus);
        Ok(self.take_ticks(ticks, now_second, busy))
    }

    /// Samples the CPUs take in a second, all of them busy or idle.
    fn per_second(&self) -> u64 {
        self.cpus.len() as u64 * 1_000_000_000 / self.period_ns
    }

    fn take_ticks(
        &mut self,
        ticks: HashMap<u32, u64>,
        now_second: u32,
        busy: &HashMap<u32, u64>,
    ) -> Vec<(u32, u64)> {
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
        let first = last_second.saturating_add(1).min(now_second);
        let seconds: Vec<u32> = (first..=now_second).collect();
        fill(
            samples,
            &seconds,
            |s| busy.get(&s).copied().unwrap_or(0),
            self.per_second(),
        )
    }
}

/// `samples` over `seconds` (not empty), each second given a share of
/// them in proportion to its room — `capacity` less its `busy` samples —
/// and never more than that room; what the room cannot hold (the two
/// clocks disagree a little) is spread evenly, the remainder to the
/// earliest seconds.
fn fill(
    samples: u64,
    seconds: &[u32],
    busy: impl Fn(u32) -> u64,
    capacity: u64,
) -> Vec<(u32, u64)> {
    if samples == 0 || seconds.is_empty() {
        return Vec::new();
    }
    let room: Vec<u64> = seconds
        .iter()
        .map(|&s| capacity.saturating_sub(busy(s)))
        .collect();
    let total_room: u64 = room.iter().sum();
    let mut given: Vec<u64> = if samples >= total_room {
        room.clone()
    } else {
        // In proportion to room, rounded down; then one more each to the
        // seconds with room left, earliest first, until all are given.
        let mut given: Vec<u64> = room
            .iter()
            .map(|&r| (u128::from(samples) * u128::from(r) / u128::from(total_room)) as u64)
            .collect();
        let mut left = samples - given.iter().sum::<u64>();
        for (g, &r) in given.iter_mut().zip(&room) {
            if left == 0 {
                break;
            }
            if *g < r {
                *g += 1;
                left -= 1;
            }
        }
        given
    };
    let excess = samples - given.iter().sum::<u64>();
    let n = given.len() as u64;
    for (i, g) in given.iter_mut().enumerate() {
        *g += excess / n + u64::from((i as u64) < excess % n);
    }
    seconds
        .iter()
        .zip(given)
        .map(|(&s, g)| (s, g))
        .filter(|&(_, g)| g > 0)
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
            idle.take_ticks(HashMap::from([(0, 400), (1, 600)]), 100, &HashMap::new())
                .is_empty()
        );
        // Two seconds: CPU 0 idle 150 ticks, CPU 1 idle 200 (both idle
        // throughout would be 400).
        let got = idle.take_ticks(HashMap::from([(0, 550), (1, 800)]), 102, &HashMap::new());
        assert_eq!(got, [(101, 175), (102, 175)]);
        // A CPU gone offline counts nothing; one added since counts from
        // its first reading.
        let got = idle.take_ticks(HashMap::from([(0, 551), (2, 7)]), 103, &HashMap::new());
        assert_eq!(got, [(103, 1)]);
    }

    // Seen in CI under load: a second that was all busy got a third of
    // the drain's idle time too, and held 245 samples where 2 CPUs at
    // 99 Hz take 198. Idle goes where the CPUs were free.
    #[test]
    fn idle_goes_to_the_seconds_with_room_for_it() {
        let busy = |s: u32| match s {
            1 => 200,
            2 => 50,
            _ => 0,
        };
        // 2 CPUs at 100 Hz: 200 a second. Room: 0, 150, 200.
        assert_eq!(fill(300, &[1, 2, 3], busy, 200), [(2, 129), (3, 171)]);
        // All the room taken: every second full, none over.
        assert_eq!(fill(350, &[1, 2, 3], busy, 200), [(2, 150), (3, 200)]);
        // More idle than room (the clocks disagree): the rest evenly.
        assert_eq!(
            fill(353, &[1, 2, 3], busy, 200),
            [(1, 1), (2, 151), (3, 201)]
        );
        // One second: all of it there.
        assert_eq!(fill(7, &[5], |_| 0, 200), [(5, 7)]);
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
        idle.take_ticks(HashMap::from([(0, 0)]), 1, &HashMap::new());
        // 10 ms is 2 periods of 4 ms, 2 ms carried…
        assert_eq!(
            idle.take_ticks(HashMap::from([(0, 1)]), 2, &HashMap::new()),
            [(2, 2)]
        );
        // …and with the next 10 ms, 3.
        assert_eq!(
            idle.take_ticks(HashMap::from([(0, 2)]), 3, &HashMap::new()),
            [(3, 3)]
        );
    }

    #[test]
    fn reading_this_machine() {
        let mut idle = IdleTime::new(vec![0], 10_000_000);
        assert!(idle.take(1, &HashMap::new()).unwrap().is_empty());
        assert!(idle.take(2, &HashMap::new()).is_ok());
    }
}
