//! Per-tenant ingest quotas: samples per second and bytes per second, each
//! a token bucket per tenant on each gateway. A tenant's limits come from
//! the metadata store (`kiln tenant set-limits`), else from the server's
//! [`QuotaDefaults`].
//!
//! A bucket holds one second of its rate and may go into debt: a request
//! is admitted while the bucket is not in debt, whatever its size, and
//! its cost is taken after. So one batch larger than a second's worth
//! still passes (then the tenant waits), and the answer to a refused one
//! says exactly how long to wait (`Retry-After`).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use kiln_storage::TenantLimits;

use super::error::ApiError;

/// The limits that apply where a tenant has none set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaDefaults {
    /// Samples per second per tenant (agents and imports together).
    pub ingest_samples_per_s: u64,
    /// Request bytes per second per tenant, as sent.
    pub ingest_bytes_per_s: u64,
    /// Queries per tenant running at once on one query node.
    pub max_concurrent_queries: u32,
    /// Days back a query may read; `None`: all data.
    pub retention_days: Option<u32>,
}

impl Default for QuotaDefaults {
    /// Generous defaults: a tenant with 2,000 hosts of 64 cores sampled at
    /// 19 Hz sends about 2.4M samples/s; these bound a runaway sender, not
    /// a fleet. Operators lower them per tenant.
    fn default() -> Self {
        QuotaDefaults {
            ingest_samples_per_s: 5_000_000,
            ingest_bytes_per_s: 256 << 20,
            max_concurrent_queries: 8,
            retention_days: None,
        }
    }
}

impl QuotaDefaults {
    /// The defaults as [`TenantLimits`] (to fill a tenant's unset ones).
    pub fn limits(&self) -> TenantLimits {
        TenantLimits {
            ingest_samples_per_s: Some(self.ingest_samples_per_s),
            ingest_bytes_per_s: Some(self.ingest_bytes_per_s),
            max_concurrent_queries: Some(self.max_concurrent_queries),
            retention_days: self.retention_days,
        }
    }
}

/// What a bucket meters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Metered {
    /// Samples (the sum of a batch's counts).
    Samples,
    /// Request bytes, as sent.
    Bytes,
}

impl Metered {
    fn name(self) -> &'static str {
        match self {
            Metered::Samples => "samples",
            Metered::Bytes => "bytes",
        }
    }

    fn flag(self) -> &'static str {
        match self {
            Metered::Samples => "ingest_samples_per_s",
            Metered::Bytes => "ingest_bytes_per_s",
        }
    }
}

#[derive(Debug)]
struct Bucket {
    /// Tokens now; negative when in debt.
    tokens: f64,
    at: Instant,
}

/// The ingest buckets of every tenant seen by this gateway.
#[derive(Debug, Default)]
pub struct IngestQuota {
    buckets: Mutex<HashMap<(String, Metered), Bucket>>,
}

impl IngestQuota {
    /// Admits `amount` of `what` for `tenant` at `rate` per second, or
    /// answers 429 with how long to wait.
    pub fn admit(
        &self,
        tenant: &str,
        what: Metered,
        rate: u64,
        amount: u64,
    ) -> Result<(), ApiError> {
        self.admit_at(tenant, what, rate, amount, Instant::now())
    }

    fn admit_at(
        &self,
        tenant: &str,
        what: Metered,
        rate: u64,
        amount: u64,
        now: Instant,
    ) -> Result<(), ApiError> {
        let rate = rate.max(1) as f64;
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        let bucket = buckets.entry((tenant.to_owned(), what)).or_insert(Bucket {
            tokens: rate,
            at: now,
        });
        let elapsed = now.saturating_duration_since(bucket.at).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * rate).min(rate);
        bucket.at = now;
        if bucket.tokens < 0.0 {
            let wait_s = (-bucket.tokens / rate).ceil() as u64;
            return Err(ApiError::TooManyRequests {
                message: format!(
                    "tenant {tenant:?} is over its ingest quota of {rate} {} per second \
                     ({}; an operator changes it with kiln tenant set-limits); retry in {wait_s} s",
                    what.name(),
                    what.flag(),
                ),
                retry_after_s: wait_s.max(1),
            });
        }
        bucket.tokens -= amount as f64;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_tenant_over_its_rate_waits_and_others_do_not() {
        let quota = IngestQuota::default();
        let t0 = Instant::now();
        // One big request passes (then the bucket is in debt).
        quota.admit_at("a", Metered::Samples, 100, 250, t0).unwrap();
        let err = quota
            .admit_at("a", Metered::Samples, 100, 1, t0)
            .unwrap_err();
        match err {
            ApiError::TooManyRequests { retry_after_s, .. } => assert_eq!(retry_after_s, 2),
            other => panic!("{other:?}"),
        }
        // Another tenant and another meter are untouched.
        quota.admit_at("b", Metered::Samples, 100, 1, t0).unwrap();
        quota.admit_at("a", Metered::Bytes, 100, 1, t0).unwrap();
        // After the debt is paid back, "a" passes again.
        let later = t0 + Duration::from_millis(1600);
        quota
            .admit_at("a", Metered::Samples, 100, 1, later)
            .unwrap();
    }
}
