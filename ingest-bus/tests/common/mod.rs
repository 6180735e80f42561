//! Helpers shared by the integration tests.

#![allow(dead_code, reason = "each test binary uses its own subset")]

use std::time::Duration;

use kiln_ingest_bus::{Consumer, Record};

/// Polls until exactly `n` records arrived; fails if a poll waits 10 s for
/// nothing (the records should all be there already).
pub(crate) async fn poll_exactly(consumer: &mut dyn Consumer, n: usize) -> Vec<Record> {
    let mut out = Vec::new();
    while out.len() < n {
        let batch = consumer
            .poll(n - out.len(), usize::MAX, Duration::from_secs(10))
            .await
            .unwrap();
        assert!(
            !batch.is_empty(),
            "timed out after {} of {n} records",
            out.len()
        );
        out.extend(batch);
    }
    out
}

/// Asserts that nothing more arrives within a short wait.
pub(crate) async fn assert_drained(consumer: &mut dyn Consumer) {
    let extra = consumer
        .poll(10, usize::MAX, Duration::from_millis(50))
        .await
        .unwrap();
    assert!(extra.is_empty(), "unexpected records: {extra:?}");
}

/// The payload the tests publish as record number `i`: its length and bytes
/// both depend on `i`, so a record swapped, cut or mixed with another is
/// caught.
pub(crate) fn payload(i: u64) -> Vec<u8> {
    let len = (i % 97) as usize * 13 + 8;
    let mut p = i.to_le_bytes().to_vec();
    p.extend((0..len - 8).map(|j| (i as usize * 31 + j) as u8));
    p
}

/// The number `payload` was built from, if `p` is intact.
pub(crate) fn payload_number(p: &[u8]) -> Option<u64> {
    let i = u64::from_le_bytes(p.get(..8)?.try_into().ok()?);
    (payload(i) == p).then_some(i)
}
