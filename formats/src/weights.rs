//! Where a weight lands in time. One stack's events in one second are one
//! row (the unit ingest quotas meter), stamped inside that second; a
//! weight that has only a window is spread over the window's seconds.
//!
//! The store keys a row by its time, stack and labels, and a row written
//! again replaces its count (so a replayed batch changes nothing). Two
//! requests that each hold part of a second (a profiler's consecutive
//! reports) must therefore stamp their parts apart: at the mean time of
//! the events ([`by_second_at_mean`]), or at the middle of the part of the
//! second a window covers ([`spread`]), never at the second's middle.

const SECOND: i64 = 1_000_000_000;

/// Longest window a weight is spread over, in seconds; a longer one puts
/// its weight at its middle second (a row per second of an hour-long
/// window would cost more than it tells).
const MAX_SPREAD_SECONDS: i64 = 60;

/// The middle of `t_ns`'s second: where a weight with no time of its own
/// (stamped when received) lands.
pub(crate) fn stamp(t_ns: i64) -> i64 {
    (t_ns - t_ns.rem_euclid(SECOND)).saturating_add(SECOND / 2)
}

/// Spreads `weight` over the seconds of `[start_ns, start_ns +
/// duration_ns)` in proportion to how much of each second the window
/// covers (largest remainders get the leftover units, earlier seconds
/// first on ties), calling `out` with each second's nonzero share, stamped
/// at the middle of the part of that second the window covers. A window
/// of 0 ns, within one second, or longer than [`MAX_SPREAD_SECONDS`] puts
/// all of it at its own middle.
///
/// Not at the middle of the second: the store keys a row by its time,
/// stack and labels, and a row written again replaces its count, so two
/// windows meeting inside a second (consecutive uploads of one process's
/// profiles) must stamp their shares of it apart.
pub(crate) fn spread(start_ns: i64, duration_ns: u64, weight: u64, mut out: impl FnMut(i64, u64)) {
    if weight == 0 {
        return;
    }
    let duration = i64::try_from(duration_ns).unwrap_or(i64::MAX);
    let end = start_ns.saturating_add(duration);
    let first = start_ns.div_euclid(SECOND);
    let last = (end.saturating_sub(1)).div_euclid(SECOND);
    if duration == 0 || last <= first || last - first + 1 > MAX_SPREAD_SECONDS {
        return out(start_ns.saturating_add(duration / 2), weight);
    }
    let seconds = (last - first + 1) as usize;
    let mut shares = Vec::with_capacity(seconds);
    let mut given = 0u64;
    // In i128: a window near the end of time must not overflow.
    let (start, end_wide, second) = (i128::from(start_ns), i128::from(end), i128::from(SECOND));
    for k in 0..seconds as i64 {
        let at = i128::from(first + k) * second;
        let lo = at.max(start);
        let hi = (at + second).min(end_wide);
        let covered = (hi - lo).max(0) as u128;
        let exact = u128::from(weight) * covered;
        let share = (exact / duration as u128) as u64;
        let remainder = exact % duration as u128;
        given += share;
        let middle = lo + (hi - lo) / 2;
        shares.push((share, remainder, i64::try_from(middle).unwrap_or(i64::MAX)));
    }
    // The leftover is less than one unit per second.
    let mut order: Vec<usize> = (0..seconds).collect();
    order.sort_by(|&a, &b| shares[b].1.cmp(&shares[a].1).then(a.cmp(&b)));
    for &i in order.iter().take((weight - given) as usize) {
        shares[i].0 += 1;
    }
    for (share, _, at) in shares {
        if share > 0 {
            out(at, share);
        }
    }
}

/// Sums timed events (`(t_ns, weight)`) per second, calling `out` once per
/// second with the sum, stamped at the mean time of that second's events
/// (not the middle of the second). Where the store keys a row by time,
/// stack and labels, and a row written again replaces its count, a second
/// split between two requests (a profiler's consecutive reports, each
/// with its own part of the second) must not share a stamp: events of
/// disjoint time ranges have different means, while the same request sent
/// again stamps the same rows. Err when a second's weights overflow.
pub(crate) fn by_second_at_mean(
    events: impl IntoIterator<Item = (i64, u64)>,
    mut out: impl FnMut(i64, u64),
) -> Result<(), std::num::TryFromIntError> {
    let mut events: Vec<(i64, u64)> = events.into_iter().filter(|&(_, w)| w > 0).collect();
    events.sort_unstable_by_key(|&(t, _)| t);
    for second in events.chunk_by(|a, b| a.0.div_euclid(SECOND) == b.0.div_euclid(SECOND)) {
        let weight = second.iter().map(|&(_, w)| u128::from(w)).sum::<u128>();
        let mean = second.iter().map(|&(t, _)| i128::from(t)).sum::<i128>() / second.len() as i128;
        out(mean as i64, u64::try_from(weight)?);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(start: i64, duration: u64, weight: u64) -> Vec<(i64, u64)> {
        let mut v = Vec::new();
        spread(start, duration, weight, |t, w| v.push((t, w)));
        v
    }

    #[test]
    fn stamps_are_mid_second() {
        assert_eq!(stamp(3 * SECOND + 1), 3 * SECOND + SECOND / 2);
        assert_eq!(stamp(-1), -SECOND / 2);
    }

    #[test]
    fn weights_follow_the_seconds_covered() {
        // 3 s from 10.5: halves at the ends, whole seconds between, each
        // at the middle of what the window covers of it.
        let v = parts(10 * SECOND + SECOND / 2, 3 * SECOND as u64, 6);
        assert_eq!(
            v,
            [
                (10 * SECOND + 3 * SECOND / 4, 1),
                (11 * SECOND + SECOND / 2, 2),
                (12 * SECOND + SECOND / 2, 2),
                (13 * SECOND + SECOND / 4, 1),
            ]
        );
        let v = parts(0, 3 * SECOND as u64, 4);
        assert_eq!(v.iter().map(|p| p.1).sum::<u64>(), 4);
        assert_eq!(v[0].1, 2, "the leftover goes to the earliest second");
        assert_eq!(parts(0, 0, 5), [(0, 5)]);
        assert_eq!(parts(0, 3600 * SECOND as u64, 5), [(1800 * SECOND, 5)]);
        // Two windows meeting at 14.3 s stamp their shares of second 14
        // apart.
        let first = parts(12 * SECOND + 300_000_000, 2 * SECOND as u64, 20);
        let next = parts(14 * SECOND + 300_000_000, 2 * SECOND as u64, 20);
        assert_eq!(first.last(), Some(&(14 * SECOND + 150_000_000, 3)));
        assert_eq!(next.first(), Some(&(14 * SECOND + 650_000_000, 7)));
        assert_eq!(first.iter().map(|p| p.1).sum::<u64>(), 20);
        assert_eq!(parts(SECOND, 200, 5), [(SECOND + 100, 5)]);
        assert_eq!(parts(0, 2 * SECOND as u64, 1), [(SECOND / 2, 1)]);
        assert_eq!(
            parts(0, 10, u64::MAX).iter().map(|p| p.1).sum::<u64>(),
            u64::MAX
        );
    }

    #[test]
    fn events_are_summed_per_second_at_their_mean_time() {
        let mut got = Vec::new();
        let events = [
            (2_900_000_000, 1),
            (1_100_000_000, 2),
            (1_300_000_000, 1),
            (2_000_000_000, 0),
        ];
        by_second_at_mean(events, |t, w| got.push((t, w))).unwrap();
        assert_eq!(got, [(1_200_000_000, 3), (2_900_000_000, 1)]);
        // Two reports splitting one second stamp it apart.
        let (mut first, mut second) = (Vec::new(), Vec::new());
        by_second_at_mean([(5_100_000_000, 1), (5_400_000_000, 1)], |t, _| {
            first.push(t)
        })
        .unwrap();
        by_second_at_mean([(5_600_000_000, 1), (5_900_000_000, 1)], |t, _| {
            second.push(t)
        })
        .unwrap();
        assert_ne!(first, second);
        assert!(by_second_at_mean([(0, u64::MAX), (1, 1)], |_, _| {}).is_err());
    }
}
