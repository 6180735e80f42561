//! CUPTI errors: each (call, code) logged once with its name, all counted.
//!
//! A CUPTI call that fails on every launch must not print on every launch,
//! and one that fails once must not go unsaid (the first H200 run got
//! zero PC samples and no line saying why).

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use super::CuptiError;
use crate::log::{Level, log};

/// The errors seen so far.
#[derive(Debug, Default)]
pub struct ErrorLog {
    seen: Mutex<Vec<(&'static str, u32)>>,
    count: AtomicU64,
}

impl ErrorLog {
    /// Counts `error` and logs it, with what it means for the profile, the
    /// first time its call failed with its code.
    pub fn report(&self, error: &CuptiError, consequence: &str) {
        self.count.fetch_add(1, Ordering::Relaxed);
        let first = match self.seen.lock() {
            Ok(mut seen) if !seen.contains(&(error.call, error.code)) => {
                seen.push((error.call, error.code));
                true
            }
            _ => false,
        };
        if first {
            log(
                Level::Warn,
                format_args!("{error}; {consequence} (said once per call and code)"),
            );
        }
    }

    /// Errors reported so far.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// Distinct (call, code) pairs reported so far.
    pub fn distinct(&self) -> Vec<(&'static str, u32)> {
        self.seen.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(call: &'static str, code: u32) -> CuptiError {
        CuptiError {
            call,
            code,
            message: "CUPTI_ERROR_OUT_OF_MEMORY".into(),
        }
    }

    #[test]
    fn each_call_and_code_once_every_error_counted() {
        let log = ErrorLog::default();
        for _ in 0..3 {
            log.report(&error("cuptiPCSamplingGetData", 13), "samples lost");
        }
        log.report(&error("cuptiPCSamplingGetData", 1), "samples lost");
        log.report(&error("cuptiPCSamplingDisable", 13), "samples lost");
        assert_eq!(log.count(), 5);
        assert_eq!(
            log.distinct(),
            vec![
                ("cuptiPCSamplingGetData", 13),
                ("cuptiPCSamplingGetData", 1),
                ("cuptiPCSamplingDisable", 13)
            ]
        );
    }
}
