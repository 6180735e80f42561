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
//!
//! Stored bytes are checked against `max_stored_bytes` through
//! [`StoredBytes`], a per-process cache of each tenant's usage.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kiln_storage::{ProfileStore, TenantLimits};

use super::error::ApiError;

/// The limits that apply where a tenant has none set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaDefaults {
    /// Sample rows per second per tenant (agents and imports together): a
    /// row is one stack with its labels at one second, whatever its count
    /// (`http::ingest` says why).
    pub ingest_samples_per_s: u64,
    /// Request bytes per second per tenant, as sent.
    pub ingest_bytes_per_s: u64,
    /// Queries per tenant running at once on one query node.
    pub max_concurrent_queries: u32,
    /// Days of data kept: queries read no further back, and the
    /// retention job deletes what is older. `None`: all data, kept.
    pub retention_days: Option<u32>,
    /// Bytes of samples and metric points a tenant may keep stored;
    /// `None`: no limit.
    pub max_stored_bytes: Option<u64>,
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
            max_stored_bytes: None,
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
            max_stored_bytes: self.max_stored_bytes,
        }
    }
}

/// How long a tenant's stored bytes are taken from the cache before the
/// store is asked again. Stored bytes grow by what the workers write, at
/// most a few seconds of the tenant's ingest rate in this time, so a
/// tenant may end that much over its quota; in exchange a request costs a
/// map lookup, not a sum over the store.
pub const STORED_BYTES_TTL: Duration = Duration::from_secs(5);

/// Seconds a client over its stored-bytes quota is told to wait: room
/// comes from the hourly retention job or an operator, not from waiting a
/// second, and agents spool meanwhile.
const STORED_BYTES_RETRY_S: u64 = 60;

/// Each tenant's stored bytes, as the profile store counts them
/// (`ProfileStore::stored_bytes`), cached for [`STORED_BYTES_TTL`].
#[derive(Debug)]
pub struct StoredBytes {
    store: Arc<dyn ProfileStore>,
    ttl: Duration,
    cached: Mutex<HashMap<String, (u64, Instant)>>,
}

impl StoredBytes {
    /// Usage read from `store`, cached for [`STORED_BYTES_TTL`].
    pub fn new(store: Arc<dyn ProfileStore>) -> Self {
        Self::with_ttl(store, STORED_BYTES_TTL)
    }

    /// Usage read from `store`, cached for `ttl`.
    pub fn with_ttl(store: Arc<dyn ProfileStore>, ttl: Duration) -> Self {
        StoredBytes {
            store,
            ttl,
            cached: Mutex::default(),
        }
    }

    /// The tenant's stored bytes, at most the cache's TTL old. Two
    /// requests that both miss may both ask the store; that is cheaper
    /// than making one wait on the other.
    pub async fn of(&self, tenant: &str) -> Result<u64, ApiError> {
        let now = Instant::now();
        {
            let cached = self.cached.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(&(bytes, at)) = cached.get(tenant)
                && now.saturating_duration_since(at) < self.ttl
            {
                return Ok(bytes);
            }
        }
        let bytes = self.store.stored_bytes(tenant).await?;
        let mut cached = self.cached.lock().unwrap_or_else(|e| e.into_inner());
        // Entries of tenants that stopped sending go, so the map stays as
        // large as the set of active tenants.
        if cached.len() > 1024 {
            let ttl = self.ttl;
            cached.retain(|_, (_, at)| now.saturating_duration_since(*at) < ttl);
        }
        cached.insert(tenant.to_owned(), (bytes, now));
        Ok(bytes)
    }

    /// Refuses a tenant whose stored bytes have reached `limit` (`None`:
    /// no limit; nothing is read).
    ///
    /// The answer is 429 with `Retry-After`, not 507: it is this tenant's
    /// quota that is full, not the server's disk (a 5xx would say the
    /// server failed, and 507 is WebDAV's), and 429 is what every other
    /// quota answers, which agents already spool and resend. Nothing
    /// already stored is touched.
    pub async fn admit(&self, tenant: &str, limit: Option<u64>) -> Result<(), ApiError> {
        let Some(limit) = limit else {
            return Ok(());
        };
        let used = self.of(tenant).await?;
        if used < limit {
            return Ok(());
        }
        Err(ApiError::TooManyRequests {
            message: format!(
                "tenant {tenant:?} is over its stored-bytes quota: {used} bytes stored, \
                 max_stored_bytes is {limit}; nothing new is stored until retention deletes \
                 old data or an operator raises it (kiln tenant set-limits \
                 --max-stored-bytes); what was stored is kept"
            ),
            retry_after_s: STORED_BYTES_RETRY_S,
        })
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
