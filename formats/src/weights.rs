//! Where a weight lands in time: Kiln stamps samples at the middle of
//! their second, as the agent does, so that one stack's events in one
//! second are one row (the unit ingest quotas meter), and spreads a
//! weight that has only a window over the window's seconds.

const SECOND: i64 = 1_000_000_000;

/// Longest window a weight is spread over, in seconds; a longer one puts
/// its weight at its middle second (a row per second of an hour-long
/// window would cost more than it tells).
const MAX_SPREAD_SECONDS: i64 = 60;

/// The stamp of an event at `t_ns`: the middle of its second.
pub(crate) fn stamp(t_ns: i64) -> i64 {
    (t_ns - t_ns.rem_euclid(SECOND)).saturating_add(SECOND / 2)
}

/// Spreads `weight` over the seconds of `[start_ns, start_ns +
/// duration_ns)` in proportion to how much of each second the window
/// covers (largest remainders get the leftover units, earlier seconds
/// first on ties), calling `out` with each second's stamp and nonzero
/// share. A window of 0 ns, or longer than [`MAX_SPREAD_SECONDS`], puts
/// all of it at one second.
pub(crate) fn spread(start_ns: i64, duration_ns: u64, weight: u64, out: impl FnMut(i64, u64)) {
    spread_stamped(start_ns, duration_ns, weight, Stamp::MidSecond, out);
}

/// [`spread`], each second's share stamped at the middle of the part of
/// that second the window covers (a window within one second, or longer
/// than [`MAX_SPREAD_SECONDS`], at its own middle). Two windows that
/// meet inside a second then stamp their shares of it at different
/// times: their rows stay apart where the store keys a row by its time,
/// stack and labels (a second's row written again replaces the count), as
/// consecutive uploads of one process's profiles need.
pub(crate) fn spread_covered(
    start_ns: i64,
    duration_ns: u64,
    weight: u64,
    out: impl FnMut(i64, u64),
) {
    spread_stamped(start_ns, duration_ns, weight, Stamp::Covered, out);
}

/// Where a second's share is stamped.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stamp {
    MidSecond,
    Covered,
}

fn spread_stamped(
    start_ns: i64,
    duration_ns: u64,
    weight: u64,
    how: Stamp,
    mut out: impl FnMut(i64, u64),
) {
    if weight == 0 {
        return;
    }
    let duration = i64::try_from(duration_ns).unwrap_or(i64::MAX);
    let end = start_ns.saturating_add(duration);
    let first = start_ns.div_euclid(SECOND);
    let last = (end.saturating_sub(1)).div_euclid(SECOND);
    let middle = start_ns.saturating_add(duration / 2);
    if duration == 0 || last <= first || last - first + 1 > MAX_SPREAD_SECONDS {
        return out(
            match how {
                Stamp::MidSecond => stamp(middle),
                Stamp::Covered => middle,
            },
            weight,
        );
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
        let at = match how {
            Stamp::MidSecond => at + second / 2,
            Stamp::Covered => lo + (hi - lo) / 2,
        };
        shares.push((share, remainder, i64::try_from(at).unwrap_or(i64::MAX)));
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
        // 2.5 s from 10.5: halves at the ends, whole seconds between.
        let v = parts(10 * SECOND + SECOND / 2, 3 * SECOND as u64, 6);
        assert_eq!(
            v,
            [
                (10 * SECOND + SECOND / 2, 1),
                (11 * SECOND + SECOND / 2, 2),
                (12 * SECOND + SECOND / 2, 2),
                (13 * SECOND + SECOND / 2, 1),
            ]
        );
        let v = parts(0, 3 * SECOND as u64, 4);
        assert_eq!(v.iter().map(|p| p.1).sum::<u64>(), 4);
        assert_eq!(v[0].1, 2, "the leftover goes to the earliest second");
        assert_eq!(parts(0, 0, 5), [(SECOND / 2, 5)]);
        assert_eq!(
            parts(0, 3600 * SECOND as u64, 5),
            [(1800 * SECOND + SECOND / 2, 5)]
        );
        let covered = |start, duration, weight| {
            let mut v = Vec::new();
            spread_covered(start, duration, weight, |t, w| v.push((t, w)));
            v
        };
        // Two windows meeting at 14.3 s stamp their shares of second 14
        // apart.
        let first = covered(12 * SECOND + 300_000_000, 2 * SECOND as u64, 20);
        let next = covered(14 * SECOND + 300_000_000, 2 * SECOND as u64, 20);
        assert_eq!(first.last(), Some(&(14 * SECOND + 150_000_000, 3)));
        assert_eq!(next.first(), Some(&(14 * SECOND + 650_000_000, 7)));
        assert_eq!(first.iter().map(|p| p.1).sum::<u64>(), 20);
        assert_eq!(covered(SECOND, 200, 5), [(SECOND + 100, 5)]);
        assert_eq!(parts(0, 2 * SECOND as u64, 1), [(SECOND / 2, 1)]);
        assert_eq!(
            parts(0, 10, u64::MAX).iter().map(|p| p.1).sum::<u64>(),
            u64::MAX
        );
    }
}
