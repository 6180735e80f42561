//! The rollup job: sums each written hour of each tenant's projects per
//! (stack, label set without per-instance labels, period) into the
//! store's hour rollups (`kiln_storage::RollupRow`), then each whole day
//! from its hours' rollups into a day rollup; queries of long ranges read
//! them instead of the samples (`crate::query`).
//!
//! **Why a job over stored hours, not sums kept by the ingest writers.**
//! Ingest is at-least-once: a replayed batch replaces its sample rows,
//! and a sum kept beside them would count it twice. A rollup made from
//! the stored hour is exact however often the hour was written, and it is
//! marked with the hour's version (the store's usage counter, which every
//! write adds to; a day's is the sum of its hours'), so a late write (an
//! agent's spool after an outage) makes it stale: queries read below it
//! (the day's hour rollups, the hour's samples) until the next pass rolls
//! it again.
//!
//! **Sealing.** With a [`SealedStore`] ([`Rollups::sealing`]), a pass
//! then seals each settled hour that has rows (or more than one segment)
//! into one segment in the object store, and deletes the rows: what keeps
//! a day of samples at a few bytes each instead of a row store's hundreds
//! (`kiln_storage::segment`). A late write makes rows in a sealed hour
//! again; the next pass folds them in.
//!
//! **Which role runs it: the query role** (and `kiln up`), as for
//! retention (`crate::retention`): it holds the metadata store that lists
//! tenants and projects, which workers do not. Passes are idempotent, so
//! several query nodes running it only repeat work; each pass costs index
//! reads per scope plus one scan per hour or day to roll.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use kiln_model::{LabelSetEntry, LabelSetId, NANOS_PER_HOUR};
use kiln_storage::{
    HourVersion, MetadataStore, ProfileStore, Resolution, RollupRow, Scope, SealedStore,
    StoreError, current_rollups, window_versions,
};
use serde::Serialize;
use tracing::{debug, info, warn};

/// How often a pass runs by default (`kiln up`/`kiln query
/// --rollup-every`).
pub const ROLLUP_INTERVAL: Duration = Duration::from_secs(300);

/// How long after an hour ends it is rolled: long enough for the batches
/// agents were sending at the hour's end to be stored (seconds, with the
/// bus between), short enough that a query of yesterday finds rollups.
/// Later writes are not lost: they make the rollup stale (see the module
/// docs).
pub const ROLLUP_SETTLE_NS: i64 = 5 * 60 * 1_000_000_000;

/// The rollup job of one process.
#[derive(Debug, Clone)]
pub struct Rollups {
    store: Arc<dyn ProfileStore>,
    metadata: Arc<dyn MetadataStore>,
    /// Seals settled hours when set (the same store as `store`).
    sealed: Option<Arc<SealedStore>>,
    /// One pass at a time: the timed one and one asked for over HTTP
    /// would only repeat each other's work.
    running: Arc<tokio::sync::Mutex<()>>,
}

/// What one pass did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RollupReport {
    /// Hours rolled (new, or stale after a late write).
    pub rolled_hours: u64,
    /// Sample rows those hours held.
    pub sample_rows: u64,
    /// Rollup rows written for them.
    pub rollup_rows: u64,
    /// Days rolled from their hours' rollups.
    pub rolled_days: u64,
    /// Rollup rows written for those days.
    pub day_rows: u64,
    /// Hours sealed into segments (`Rollups::sealing`).
    pub sealed_hours: u64,
    /// Sample rows those hours moved out of the row store.
    pub sealed_rows: u64,
    /// Bytes of the segments written for them.
    pub segment_bytes: u64,
    /// Tenants whose pass failed, with why (the others went on).
    pub failed: Vec<String>,
}

impl Rollups {
    /// A job over `store`, for the tenants and projects of `metadata`.
    pub fn new(store: Arc<dyn ProfileStore>, metadata: Arc<dyn MetadataStore>) -> Self {
        Rollups {
            store,
            metadata,
            sealed: None,
            running: Arc::default(),
        }
    }

    /// Also seals each settled hour into a segment after rolling it up.
    /// `sealed` must be the store the job was made with.
    pub fn sealing(mut self, sealed: Arc<SealedStore>) -> Self {
        self.sealed = Some(sealed);
        self
    }

    /// Runs a pass now and then `every` (by default [`ROLLUP_INTERVAL`]),
    /// on the current actix (or Tokio) runtime, until it stops.
    pub fn spawn(&self, every: Duration) {
        let job = self.clone();
        actix_rt::spawn(async move {
            let mut ticks = tokio::time::interval(every);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                job.run_once(kiln_model::now_ns()).await;
            }
        });
    }

    /// One pass at `now_ns`: rolls every hour of every project that ended
    /// [`ROLLUP_SETTLE_NS`] or more before `now_ns` and has no current
    /// rollup. A tenant whose pass fails is logged and skipped.
    pub async fn run_once(&self, now_ns: i64) -> RollupReport {
        let _one_at_a_time = self.running.lock().await;
        let mut report = RollupReport::default();
        let tenants = match self.metadata.list_tenants().await {
            Ok(tenants) => tenants,
            Err(e) => {
                warn!(error = %e, "rollups: cannot list tenants");
                report.failed.push(format!("listing tenants: {e}"));
                return report;
            }
        };
        // Hours whose end is at or before this: `[.., settled_hour_start)`.
        let settled = now_ns
            .saturating_sub(ROLLUP_SETTLE_NS)
            .div_euclid(NANOS_PER_HOUR)
            .saturating_mul(NANOS_PER_HOUR);
        for tenant in tenants {
            let projects = match self.metadata.list_projects(&tenant).await {
                Ok(projects) => projects,
                Err(e) => {
                    warn!(tenant, error = %e, "rollups: cannot list projects");
                    report.failed.push(format!("{tenant}: {e}"));
                    continue;
                }
            };
            for project in projects {
                let done = async {
                    let scope = Scope::new(&tenant, project)?;
                    self.roll_scope(&scope, settled, &mut report).await?;
                    self.seal_scope(&scope, settled, &mut report).await
                };
                if let Err(e) = done.await {
                    warn!(tenant, error = %e, "rollups: rolling up hours failed");
                    report.failed.push(format!("{tenant}: {e}"));
                }
            }
        }
        if report.rolled_hours > 0 || report.rolled_days > 0 {
            info!(
                hours = report.rolled_hours,
                sample_rows = report.sample_rows,
                rollup_rows = report.rollup_rows,
                days = report.rolled_days,
                day_rows = report.day_rows,
                "rollups: rolled up hours and days"
            );
        }
        if report.sealed_hours > 0 {
            info!(
                hours = report.sealed_hours,
                rows = report.sealed_rows,
                segment_bytes = report.segment_bytes,
                "rollups: sealed hours into segments"
            );
        }
        report
    }

    /// Rolls the hours of `scope` before `before_ns` (an hour's start)
    /// that have no rollup of their current version.
    async fn roll_scope(
        &self,
        scope: &Scope,
        before_ns: i64,
        report: &mut RollupReport,
    ) -> Result<(), StoreError> {
        // Versions first, then the samples (in `roll_hour`): a write that
        // lands in between is in the rollup but not in the version it is
        // marked with, so the rollup reads as stale and is made again;
        // never the other way round.
        let versions = self.store.hour_versions(scope, i64::MIN, before_ns).await?;
        let rolled: HashMap<i64, u64> = self
            .store
            .rollup_versions(scope, Resolution::Hour, i64::MIN, before_ns)
            .await?
            .into_iter()
            .map(|r| (r.hour, r.version))
            .collect();
        let due: Vec<HourVersion> = versions
            .into_iter()
            .filter(|v| rolled.get(&v.hour) != Some(&v.version))
            .collect();
        if !due.is_empty() {
            debug!(%scope, hours = due.len(), "rollups: rolling");
        }
        for hour in due {
            let (samples, rows) = self.roll_hour(scope, hour).await?;
            report.rolled_hours += 1;
            report.sample_rows += samples;
            report.rollup_rows += rows;
        }
        self.roll_days(scope, before_ns, report).await
    }

    /// Seals the hours of `scope` before `before_ns` (an hour's start)
    /// that have rows or more than one segment, when this job seals.
    async fn seal_scope(
        &self,
        scope: &Scope,
        before_ns: i64,
        report: &mut RollupReport,
    ) -> Result<(), StoreError> {
        let Some(sealed) = &self.sealed else {
            return Ok(());
        };
        for hour in sealed.unsealed_hours(scope, before_ns).await? {
            let done = sealed.seal_hour(scope, hour).await?;
            if !done.is_empty() {
                report.sealed_hours += 1;
                report.sealed_rows += done.rows;
                report.segment_bytes += done.bytes;
            }
        }
        Ok(())
    }

    /// Rolls the days of `scope` that ended by `before_ns` and have no
    /// rollup of their current version, from their hours' rollups: only a
    /// day whose every hour with data has a current hour rollup (else the
    /// next pass, once the hours are rolled).
    async fn roll_days(
        &self,
        scope: &Scope,
        before_ns: i64,
        report: &mut RollupReport,
    ) -> Result<(), StoreError> {
        let day_ns = Resolution::Day.nanos();
        let whole_days_end = before_ns.div_euclid(day_ns).saturating_mul(day_ns);
        // Versions first, then the hour rollups' (then their rows): an
        // hour rolled again in between makes the day newer than its
        // version says, so it reads as stale, never the other way round.
        let hours = self
            .store
            .hour_versions(scope, i64::MIN, whole_days_end)
            .await?;
        let hour_rollups = self
            .store
            .rollup_versions(scope, Resolution::Hour, i64::MIN, whole_days_end)
            .await?;
        let day_rollups: HashMap<i64, u64> = self
            .store
            .rollup_versions(scope, Resolution::Day, i64::MIN, whole_days_end)
            .await?
            .into_iter()
            .map(|r| (r.hour, r.version))
            .collect();
        let rolled_hours: std::collections::HashSet<i64> =
            current_rollups(&hours, &hour_rollups).into_iter().collect();
        for day in window_versions(Resolution::Day, &hours) {
            if day_rollups.get(&day.hour) == Some(&day.version) {
                continue;
            }
            let day_hours: Vec<i64> = hours
                .iter()
                .map(|h| h.hour)
                .filter(|&h| Resolution::Day.window_of(h) == day.hour)
                .collect();
            if !day_hours.iter().all(|h| rolled_hours.contains(h)) {
                debug!(%scope, day = day.hour, "rollups: a day waits for its hours");
                continue;
            }
            let mut rows = Vec::new();
            for hour in day_hours {
                rows.extend(
                    self.store
                        .scan_rollup(scope, Resolution::Hour, hour)
                        .await?,
                );
            }
            let rows = kiln_storage::merge_rollup_rows(&rows);
            self.store
                .put_rollup(scope, Resolution::Day, day.hour, day.version, &rows)
                .await?;
            report.rolled_days += 1;
            report.day_rows += rows.len() as u64;
        }
        Ok(())
    }

    /// Rolls one hour: its samples summed per (stack, reduced label set,
    /// period), the reduced label sets written to the dictionary, and the
    /// rollup marked with `hour.version`. Returns (sample rows, rollup
    /// rows).
    async fn roll_hour(&self, scope: &Scope, hour: HourVersion) -> Result<(u64, u64), StoreError> {
        let start = hour.hour.saturating_mul(NANOS_PER_HOUR);
        let end = start.saturating_add(NANOS_PER_HOUR);
        let samples = self.store.scan_samples(scope, start, end).await?;
        let tenant = scope.tenant();
        let mut ids: Vec<LabelSetId> = samples.iter().map(|s| s.labels).collect();
        ids.sort_unstable();
        ids.dedup();
        let sets = self.store.get_label_sets(tenant, &ids).await?;
        let mut reduced_ids = HashMap::with_capacity(ids.len());
        let mut reduced_sets = HashMap::new();
        for (id, set) in ids.into_iter().zip(sets) {
            // A label set never written is counted nowhere by queries of
            // the samples; so too here.
            let Some(set) = set else { continue };
            let reduced = set.without_instance();
            let reduced_id = reduced.id();
            reduced_ids.insert(id, reduced_id);
            reduced_sets.entry(reduced_id).or_insert(reduced);
        }
        let mut sums: HashMap<(kiln_model::StackId, LabelSetId, u64), u64> = HashMap::new();
        for s in &samples {
            let Some(&labels) = reduced_ids.get(&s.labels) else {
                continue;
            };
            let count = sums.entry((s.stack, labels, s.period_ns)).or_default();
            *count = count.saturating_add(s.count);
        }
        let rows: Vec<RollupRow> = sums
            .into_iter()
            .map(|((stack, labels, period_ns), count)| RollupRow {
                stack,
                labels,
                period_ns,
                count,
            })
            .collect();
        let entries: Vec<LabelSetEntry> = reduced_sets
            .into_iter()
            .map(|(id, labels)| LabelSetEntry { id, labels })
            .collect();
        // The label sets before the rollup that points at them.
        self.store.put_label_sets(tenant, &entries).await?;
        self.store
            .put_rollup(scope, Resolution::Hour, hour.hour, hour.version, &rows)
            .await?;
        Ok((samples.len() as u64, rows.len() as u64))
    }
}
