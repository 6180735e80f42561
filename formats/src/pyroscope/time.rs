//! `from` and `until` as Pyroscope reads them (its `attime.Parse`): all
//! digits are a Unix time whose unit the length tells (13 digits
//! milliseconds, 16 microseconds, 19 nanoseconds, else seconds; 8 digits
//! that are a date, `YYYYMMDD`, that day); anything else is read as Kiln's
//! query times are (`now`, `now-15m`, RFC 3339).

use super::error::PyroscopeError;
use crate::error::snippet;

/// The time `text` names; `param` (`from`, `until`) for the error.
pub(crate) fn parse(param: &'static str, text: &str, now_ns: i64) -> Result<i64, PyroscopeError> {
    let text = text.trim();
    let bad = |problem: String| PyroscopeError::Time { param, problem };
    if text.is_empty() {
        return Ok(now_ns);
    }
    if !text.bytes().all(|b| b.is_ascii_digit()) {
        return crate::parse_time(text, now_ns).map_err(bad);
    }
    if text.len() == 8
        && let Ok(day) = humantime::parse_rfc3339(&format!(
            "{}-{}-{}T00:00:00Z",
            &text[..4],
            &text[4..6],
            &text[6..]
        ))
        && let Ok(since) = day.duration_since(std::time::UNIX_EPOCH)
    {
        return Ok(since.as_nanos() as i64);
    }
    let scale: i64 = match text.len() {
        13 => 1_000_000,
        16 => 1_000,
        19 => 1,
        _ => 1_000_000_000,
    };
    text.parse::<i64>()
        .ok()
        .and_then(|n| n.checked_mul(scale))
        .ok_or_else(|| {
            bad(format!(
                "{:?} is out of range for a Unix time",
                snippet(text)
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000_000_000_000;

    #[test]
    fn lengths_tell_units() {
        let t = |text| parse("from", text, NOW).unwrap();
        assert_eq!(t("1700000000"), 1_700_000_000_000_000_000);
        assert_eq!(t("1700000000123"), 1_700_000_000_123_000_000);
        assert_eq!(t("1700000000123456"), 1_700_000_000_123_456_000);
        assert_eq!(t("1700000000123456789"), 1_700_000_000_123_456_789);
        assert_eq!(t("20231114"), 1_699_920_000_000_000_000);
        // Not a date: seconds.
        assert_eq!(t("20231399"), 20_231_399_000_000_000);
        assert_eq!(t(""), NOW);
        assert_eq!(t("now-1h"), NOW - 3_600_000_000_000);
    }

    #[test]
    fn garbage_is_named() {
        let e = parse("until", "yesterday", NOW).unwrap_err().to_string();
        assert!(e.starts_with("until: \"yesterday\" is not a time"), "{e}");
        let e = parse("from", "99999999999999999999", NOW)
            .unwrap_err()
            .to_string();
        assert!(e.contains("out of range"), "{e}");
    }
}
