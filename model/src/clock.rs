//! The wall clock, read one way everywhere.

use std::time::{SystemTime, UNIX_EPOCH};

/// Nanoseconds since the Unix epoch, now: what every timestamp Kiln stores
/// counts (until 2262, when an `i64` of nanoseconds runs out). A clock set
/// before 1970 reads as 0.
pub fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}
