//! The pause between retries of the bus and the stores.

use std::time::Duration;

/// First pause before retrying after the bus or the store failed; it
/// doubles on each failure in a row, up to [`RETRY_MAX_PAUSE`].
const RETRY_PAUSE: Duration = Duration::from_millis(250);
/// Longest pause between retries.
const RETRY_MAX_PAUSE: Duration = Duration::from_secs(30);

/// A capped exponential backoff: [`RETRY_PAUSE`], doubling to
/// [`RETRY_MAX_PAUSE`].
#[derive(Debug)]
pub(crate) struct Backoff {
    next: Duration,
}

impl Backoff {
    pub(crate) fn new() -> Self {
        Backoff { next: RETRY_PAUSE }
    }

    /// The pause the next [`wait`](Self::wait) takes.
    pub(crate) fn next(&self) -> Duration {
        self.next
    }

    /// Sleeps for the current pause, and doubles the next one.
    pub(crate) async fn wait(&mut self) {
        tokio::time::sleep(self.next).await;
        self.next = (self.next * 2).min(RETRY_MAX_PAUSE);
    }
}
