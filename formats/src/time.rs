//! Times as people and senders write them in query strings.

use std::time::UNIX_EPOCH;

/// Parses a time: RFC 3339 (`2026-11-21T08:00:00Z`), unix seconds
/// (`1763712000`, fractions allowed), `now`, or `now-<duration>`
/// (`now-15m`, `now-2h`).
pub fn parse_time(text: &str, now_ns: i64) -> Result<i64, String> {
    let text = text.trim();
    if text == "now" {
        return Ok(now_ns);
    }
    if let Some(ago) = text.strip_prefix("now-") {
        let ago = humantime::parse_duration(ago)
            .map_err(|e| format!("{text:?} is not now-<duration> (e.g. now-15m): {e}"))?;
        return Ok(now_ns.saturating_sub(ago.as_nanos().min(i64::MAX as u128) as i64));
    }
    if let Ok(secs) = text.parse::<i64>() {
        return secs
            .checked_mul(1_000_000_000)
            .ok_or_else(|| format!("{text:?} is out of range for unix seconds"));
    }
    if let Ok(secs) = text.parse::<f64>() {
        if secs.is_finite() && secs.abs() < 9.2e9 {
            return Ok((secs * 1e9) as i64);
        }
        return Err(format!("{text:?} is out of range for unix seconds"));
    }
    let time = humantime::parse_rfc3339_weak(text).map_err(|_| {
        format!("{text:?} is not a time: use RFC 3339, unix seconds, now or now-<duration>")
    })?;
    match time.duration_since(UNIX_EPOCH) {
        Ok(d) => Ok(d.as_nanos().min(i64::MAX as u128) as i64),
        Err(e) => Ok(-(e.duration().as_nanos().min(i64::MAX as u128) as i64)),
    }
}
