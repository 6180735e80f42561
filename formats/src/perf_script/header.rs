//! The first line of a perf script sample:
//!
//! ```text
//! app 1234/1235 [001] 12345.678901:     250000 cpu-clock:pppH:
//! V8 WorkerThread  4021 12345.678901: cycles:u:
//! true 64414 20110.539270:      34467 cycles:u:  ffffffff9aa3c8de [unknown] ([unknown])
//! ```
//!
//! The command name may hold blanks and digits, so the line is read from
//! its one unambiguous field, the `<seconds>.<fraction>:` time: before it an
//! optional `[cpu]`, and before that `pid/tid` or a lone thread id;
//! everything before that is the command.

use crate::error::{ImportError, snippet};

/// The fields of a sample header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Header<'a> {
    /// The command name (`comm`), which may hold blanks.
    pub comm: &'a str,
    /// The process id, when perf printed `pid/tid` (`perf script -F +pid`).
    pub pid: Option<&'a str>,
    /// The thread id: perf's default output prints only this one.
    pub tid: &'a str,
    /// The sample's time, in nanoseconds of perf's clock.
    pub time_ns: i64,
    /// The event count between samples, when printed.
    pub period: Option<u64>,
    /// The event as printed (`cpu-clock:pppH`, `sched:sched_switch`),
    /// without its final colon.
    pub event: Option<&'a str>,
    /// What follows the event: a one-frame stack when the sample was
    /// recorded without `-g`, or a tracepoint's fields.
    pub rest: &'a str,
}

/// Parses the header on line `line`.
pub(super) fn parse(line: usize, text: &str) -> Result<Header<'_>, ImportError> {
    let tokens: Vec<(usize, &str)> = tokens(text).collect();
    let bad_header = || ImportError::PerfBadHeader {
        line,
        header: snippet(text.trim()),
    };
    let (pid_at, time_at) = tokens
        .iter()
        .enumerate()
        .find_map(|(i, &(_, token))| {
            if !is_time(token) {
                return None;
            }
            let mut j = i.checked_sub(1)?;
            if is_cpu(tokens[j].1) {
                j = j.checked_sub(1)?;
            }
            is_pid(tokens[j].1).then_some((j, i))
        })
        .ok_or_else(bad_header)?;

    let comm = text[..tokens[pid_at].0].trim();
    if comm.is_empty() {
        return Err(ImportError::PerfNoCommand {
            line,
            header: snippet(text.trim()),
        });
    }
    let (pid, tid) = match tokens[pid_at].1.split_once('/') {
        Some((pid, tid)) => (Some(pid), tid),
        None => (None, tokens[pid_at].1),
    };
    let time = tokens[time_at].1;
    let time_ns = parse_time(time).ok_or_else(|| ImportError::PerfTimeOutOfRange {
        line,
        time: snippet(time.trim_end_matches(':')),
    })?;

    // After the time: `[period] event:`, both optional. A number is a period
    // only when an event follows it; alone it is the address of a one-frame
    // stack printed without an event.
    let mut next = time_at + 1;
    let token = |i: usize| tokens.get(i).map(|&(_, t)| t);
    let mut period = None;
    if let (Some(p), Some(e)) = (token(next), token(next + 1))
        && is_number(p)
        && e.ends_with(':')
    {
        period = Some(p.parse::<u64>().map_err(|_| bad_header())?);
        next += 1;
    }
    let mut event = None;
    if let Some(e) = token(next).filter(|e| e.ends_with(':')) {
        event = Some(&e[..e.len() - 1]);
        next += 1;
    }
    let rest = tokens.get(next).map_or("", |&(at, _)| text[at..].trim());
    Ok(Header {
        comm,
        pid,
        tid,
        time_ns,
        period,
        event,
        rest,
    })
}

/// The blank-separated words of `text` with their byte offsets.
fn tokens(text: &str) -> impl Iterator<Item = (usize, &str)> {
    let mut at = 0;
    text.split([' ', '\t']).filter_map(move |word| {
        let start = at;
        at += word.len() + 1;
        (!word.is_empty()).then_some((start, word))
    })
}

fn is_number(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// `12345.678901:`
fn is_time(token: &str) -> bool {
    token
        .strip_suffix(':')
        .and_then(|t| t.split_once('.'))
        .is_some_and(|(secs, frac)| is_number(secs) && is_number(frac))
}

/// `[001]`
fn is_cpu(token: &str) -> bool {
    token
        .strip_prefix('[')
        .and_then(|t| t.strip_suffix(']'))
        .is_some_and(is_number)
}

/// `1234`, `1234/1235`, and perf's `-1` for an unknown thread.
fn is_pid(token: &str) -> bool {
    let id = |s: &str| is_number(s.strip_prefix('-').unwrap_or(s));
    match token.split_once('/') {
        Some((pid, tid)) => id(pid) && id(tid),
        None => id(token),
    }
}

/// Nanoseconds from `<seconds>.<fraction>:`, exactly (no floating point):
/// digits past the ninth fractional one are below a nanosecond and dropped.
fn parse_time(token: &str) -> Option<i64> {
    let (secs, frac) = token.strip_suffix(':')?.split_once('.')?;
    let secs: i64 = secs.parse().ok()?;
    let mut nanos: i64 = 0;
    let mut digits = frac.chars();
    for _ in 0..9 {
        let digit = match digits.next() {
            Some(c) => c.to_digit(10)?,
            None => 0,
        };
        nanos = nanos * 10 + i64::from(digit);
    }
    secs.checked_mul(1_000_000_000)?.checked_add(nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(text: &str) -> Header<'_> {
        parse(1, text).unwrap()
    }

    #[test]
    fn full_header_with_pid_tid_cpu_period_and_event() {
        let h = header("app 1234/1235 [001] 12345.678901:     250000 cpu-clock:pppH:");
        assert_eq!(
            h,
            Header {
                comm: "app",
                pid: Some("1234"),
                tid: "1235",
                time_ns: 12_345_678_901_000,
                period: Some(250_000),
                event: Some("cpu-clock:pppH"),
                rest: "",
            }
        );
    }

    /// Guards the reason for anchoring on the time: command names with
    /// blanks and digits.
    #[test]
    fn command_names_may_hold_blanks_and_digits() {
        let h = header("Web Content 2 4021 77.5: cycles:u:");
        assert_eq!((h.comm, h.pid, h.tid), ("Web Content 2", None, "4021"));
        assert_eq!(h.time_ns, 77_500_000_000);
        assert_eq!((h.period, h.event), (None, Some("cycles:u")));
        let h = header("     kworker/0:1H    17 [000]   248.1: 1 cpu-clock:");
        assert_eq!((h.comm, h.tid), ("kworker/0:1H", "17"));
    }

    #[test]
    fn one_frame_stack_and_tracepoint_fields_are_the_rest() {
        let h = header(
            "true 64414 20110.539270:      34467 cycles:u:  ffffffff9aa3c8de [unknown] ([unknown])",
        );
        assert_eq!(h.period, Some(34467));
        assert_eq!(h.rest, "ffffffff9aa3c8de [unknown] ([unknown])");
        let h = header("app 7 1.0: sched:sched_switch: prev_comm=app prev_pid=7");
        assert_eq!(h.event, Some("sched:sched_switch"));
        assert_eq!(h.rest, "prev_comm=app prev_pid=7");
        // No event: a number after the time is an address, not a period.
        let h = header("app 7 1.0: 400123 main+0x3 (/bin/app)");
        assert_eq!((h.period, h.event), (None, None));
        assert_eq!(h.rest, "400123 main+0x3 (/bin/app)");
    }

    #[test]
    fn nanosecond_times_are_exact() {
        assert_eq!(header("a 1 0.000000001: x:").time_ns, 1);
        assert_eq!(header("a 1 1.1234567899: x:").time_ns, 1_123_456_789);
    }

    #[test]
    fn bad_headers_are_named() {
        let err = parse(9, "\t    7f1234 main (/bin/app)").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("line 9: sample header \"7f1234 main (/bin/app)\" has no"),
            "{err}"
        );
        let err = parse(2, "1234 5.0: cycles:").unwrap_err();
        assert!(matches!(err, ImportError::PerfNoCommand { line: 2, .. }));
        let err = parse(3, "app 1 99999999999999999999.0: cycles:").unwrap_err();
        assert_eq!(
            err.to_string(),
            "line 3: sample time \"99999999999999999999.0\" is out of range"
        );
    }
}
