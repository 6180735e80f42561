//! The retention job: deletes each tenant's samples and metric points
//! older than its `retention_days` (or the server's
//! `--default-retention-days`), once at start and then every hour.
//!
//! **Which role runs it: the query role** (and `kiln up`, which is every
//! role in one process). A query node already holds all the job needs:
//! the metadata store with each tenant's limits, the profile store, and
//! the `--default-retention-days` its queries are cut by, so what is
//! deleted is exactly what no query may read any more, with one flag for
//! both. Workers have no metadata store and gateways no default for
//! retention; giving either one would add a second place to configure it.
//! Deletes are idempotent, so several query nodes running the job is only
//! repeated work: after the first, each finds nothing left to delete (an
//! index read per scope).

use std::sync::Arc;
use std::time::Duration;

use kiln_model::NANOS_PER_HOUR;
use kiln_storage::{DeletedHours, MetadataStore, ProfileStore, Scope, StoreError};
use serde::Serialize;
use tracing::{info, warn};

/// How often the job runs: retention is kept per hour, so an hour is the
/// finest step that can find anything new.
pub const RETENTION_INTERVAL: Duration = Duration::from_secs(3600);

const NANOS_PER_DAY: i64 = 24 * NANOS_PER_HOUR;

/// The retention job of one process.
#[derive(Debug, Clone)]
pub struct Retention {
    store: Arc<dyn ProfileStore>,
    metadata: Arc<dyn MetadataStore>,
    default_days: Option<u32>,
    /// One pass at a time: the hourly one and one asked for over HTTP
    /// would only repeat each other's work.
    running: Arc<tokio::sync::Mutex<()>>,
}

/// What one pass deleted, per scope that had anything to delete.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RetentionReport {
    /// The scopes with deletions.
    pub deleted: Vec<ScopeDeleted>,
    /// Tenants whose pass failed, with why (the others went on).
    pub failed: Vec<String>,
}

/// What a pass deleted of one scope.
#[derive(Debug, Clone, Serialize)]
pub struct ScopeDeleted {
    /// `tenant/project`.
    pub scope: String,
    /// Its retention in days.
    pub retention_days: u32,
    /// Hours of samples deleted.
    pub sample_hours: u64,
    /// (metric, hour) partitions deleted.
    pub metric_hours: u64,
    /// Stored bytes they counted for.
    pub bytes: u64,
}

impl Retention {
    /// A job over `store`, reading each tenant's retention from `metadata`,
    /// `default_days` where a tenant has none (`None`: keep its data).
    pub fn new(
        store: Arc<dyn ProfileStore>,
        metadata: Arc<dyn MetadataStore>,
        default_days: Option<u32>,
    ) -> Self {
        Retention {
            store,
            metadata,
            default_days,
            running: Arc::default(),
        }
    }

    /// Runs a pass now and then every [`RETENTION_INTERVAL`], on the
    /// current actix (or Tokio) runtime, until it stops.
    pub fn spawn(&self) {
        let job = self.clone();
        actix_rt::spawn(async move {
            let mut ticks = tokio::time::interval(RETENTION_INTERVAL);
            // A pass that ran long (or a suspended laptop) is not caught
            // up with a burst of passes.
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                job.run_once(kiln_model::now_ns()).await;
            }
        });
    }

    /// One pass at `now_ns`: for every tenant with a retention, deletes the
    /// hours of each of its projects that ended `retention_days` or more
    /// before `now_ns`. Logs what it deleted; a tenant whose deletes fail
    /// is logged and skipped, the others go on.
    pub async fn run_once(&self, now_ns: i64) -> RetentionReport {
        let _one_at_a_time = self.running.lock().await;
        let mut report = RetentionReport::default();
        let tenants = match self.metadata.list_tenants().await {
            Ok(tenants) => tenants,
            Err(e) => {
                warn!(error = %e, "retention: cannot list tenants");
                report.failed.push(format!("listing tenants: {e}"));
                return report;
            }
        };
        for tenant in tenants {
            if let Err(e) = self.tenant(&tenant, now_ns, &mut report).await {
                warn!(tenant, error = %e, "retention: deleting old data failed");
                report.failed.push(format!("{tenant}: {e}"));
            }
        }
        report
    }

    async fn tenant(
        &self,
        tenant: &str,
        now_ns: i64,
        report: &mut RetentionReport,
    ) -> Result<(), StoreError> {
        let limits = match self.metadata.tenant_limits(tenant).await {
            Ok(limits) => limits,
            // Removed since it was listed.
            Err(StoreError::NotFound { .. }) => return Ok(()),
            Err(e) => return Err(e),
        };
        let Some(days) = limits.retention_days.or(self.default_days) else {
            return Ok(());
        };
        let cutoff = now_ns.saturating_sub(i64::from(days).saturating_mul(NANOS_PER_DAY));
        for project in self.metadata.list_projects(tenant).await? {
            let scope = Scope::new(tenant, project)?;
            let deleted: DeletedHours = self.store.delete_hours_before(&scope, cutoff).await?;
            if deleted.is_empty() {
                continue;
            }
            info!(
                tenant,
                project = scope.project(),
                retention_days = days,
                sample_hours = deleted.sample_hours,
                metric_hours = deleted.metric_hours,
                bytes = deleted.bytes,
                "retention: deleted data past the tenant's retention"
            );
            report.deleted.push(ScopeDeleted {
                scope: scope.to_string(),
                retention_days: days,
                sample_hours: deleted.sample_hours,
                metric_hours: deleted.metric_hours,
                bytes: deleted.bytes,
            });
        }
        Ok(())
    }
}
