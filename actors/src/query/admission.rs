//! Admission: what a query must pass before it runs. A tenant runs at most
//! so many queries at once on one node (its `max_concurrent_queries`); one
//! more waits up to [`QueryOptions::queue_wait`] for a slot, then gets a
//! 429 with `Retry-After`. The wait is what lets the UI work: one page
//! load asks for the flamegraph, top, timeline, labels and one series per
//! metric at once, more than 8 queries, each short. And a query reads at
//! most [`QueryOptions::max_range`] of data (400 beyond).
//!
//! The maximum applies to the data a range holds, not to the range as
//! written: a range longer than the maximum is first narrowed to the hours
//! that hold data (the store's index, [`ProfileStore::sample_hours`]), so
//! "all time" (`from=0`) over a few weeks of profiles is answered, over
//! exactly those weeks, and only data spanning more than the maximum is
//! refused. Ranges within the maximum are answered as written, so the
//! answer's `from`/`to` are the caller's unless narrowed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};

use actix::Message;
use kiln_model::NANOS_PER_HOUR;
use kiln_storage::ProfileStore;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::{QueryError, QueryRange};

/// The longest span of data one query reads, unless configured otherwise
/// ([`QueryOptions::max_range`]): 400 days, a year and a season, so that a
/// year-over-year comparison fits.
pub const DEFAULT_MAX_QUERY_RANGE: Duration = Duration::from_secs(400 * 86_400);

/// How long a query over its tenant's concurrency limit waits for a slot
/// before its 429, unless configured otherwise
/// ([`QueryOptions::queue_wait`]).
pub const DEFAULT_QUERY_QUEUE_WAIT: Duration = Duration::from_secs(2);

/// How long a client refused for concurrency should wait
/// (`Retry-After`): queries take seconds, not minutes.
pub const QUERY_RETRY_AFTER: Duration = Duration::from_secs(1);

/// Queries of one tenant that may wait for a slot, per slot: beyond, a
/// query is refused at once (a flood of requests holds no more than this
/// many connections waiting).
const WAITING_PER_SLOT: u32 = 4;

/// A query node's settings for every query ([`SetQueryOptions`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueryOptions {
    /// The longest span of data a query reads: a query whose range holds
    /// data over a longer span is refused with a 400 that says so
    /// (`kiln … --max-query-range`). Default [`DEFAULT_MAX_QUERY_RANGE`].
    pub max_range: Duration,
    /// How long a query over its tenant's `max_concurrent_queries` waits
    /// for one of them to finish before it is answered 429. Default
    /// [`DEFAULT_QUERY_QUEUE_WAIT`]; zero refuses at once.
    pub queue_wait: Duration,
}

impl Default for QueryOptions {
    fn default() -> Self {
        QueryOptions {
            max_range: DEFAULT_MAX_QUERY_RANGE,
            queue_wait: DEFAULT_QUERY_QUEUE_WAIT,
        }
    }
}

/// Replaces a coordinator's [`QueryOptions`]; queries admitted from then
/// on follow them. Send it right after starting the coordinator (before
/// serving) to configure a node.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct SetQueryOptions(pub QueryOptions);

/// What a query reads, and so which index narrows its range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reads {
    /// Samples (flamegraph, top, timeline, labels).
    Samples,
    /// The points of one metric.
    Metric(String),
    /// The metric names index, whose rows are few (names per hour): no
    /// range limit applies.
    MetricNames,
}

/// A maximum span stricter than the configured one, for queries that cost
/// more per hour than sample queries do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SpanLimit {
    /// The span.
    pub max: Duration,
    /// What a refusal tells the caller to do (after "a query reads at most
    /// N days").
    pub advice: String,
}

/// Asks the coordinator to admit a query: a permit for one of the tenant's
/// concurrent queries, and the range to run (narrowed to its data when
/// longer than allowed).
#[derive(Debug, Message)]
#[rtype(result = "Result<Admission, Refusal>")]
pub(crate) struct Admit {
    /// What the caller asked for.
    pub range: QueryRange,
    /// What it reads.
    pub reads: Reads,
    /// How many queries of the range's tenant may run at once on this node
    /// (the tenant's `max_concurrent_queries`).
    pub max_concurrent: u32,
    /// A stricter span limit for this kind of query, if any.
    pub stricter: Option<SpanLimit>,
}

/// An admitted query: run [`range`](Self::range) while holding the permit.
#[derive(Debug)]
pub(crate) struct Admission {
    /// The range to query: the caller's, or its data's extent when the
    /// caller's was longer than allowed.
    pub range: QueryRange,
    /// One of the tenant's concurrent queries, given back when dropped.
    pub permit: QueryPermit,
}

/// Why a query was not admitted.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Refusal {
    /// The range holds data over a longer span than a query reads.
    #[error("{}", too_long(.asked, .data, .max, .advice))]
    RangeTooLong {
        /// The range asked for, `[from, to)` in ns.
        asked: (i64, i64),
        /// The span of its data (hour-aligned), `[from, to)` in ns.
        data: (i64, i64),
        /// The longest span a query reads.
        max: Duration,
        /// What to do about it.
        advice: String,
    },
    /// The tenant already runs as many queries as it may on this node.
    #[error(
        "tenant {tenant:?} is already running {limit} queries on this node, the most it may at \
         once (its max_concurrent_queries; an operator changes it with kiln tenant set-limits); \
         retry in {} s",
        QUERY_RETRY_AFTER.as_secs()
    )]
    TooManyQueries {
        /// The tenant.
        tenant: String,
        /// Its limit.
        limit: u32,
    },
    /// Reading the index failed.
    #[error(transparent)]
    Failed(#[from] QueryError),
}

fn too_long(asked: &(i64, i64), data: &(i64, i64), max: &Duration, advice: &str) -> String {
    let days = |ns: i128| ns as f64 / 86_400e9;
    let span = |(from, to): (i64, i64)| days(i128::from(to) - i128::from(from));
    format!(
        "the range from {} to {} holds data over {:.1} days (from {} to {}); a query reads at \
         most {:.1} days of data: {advice}",
        time_text(asked.0),
        time_text(asked.1),
        span(*data),
        time_text(data.0),
        time_text(data.1),
        days(max.as_nanos().min(i128::MAX as u128) as i128),
    )
}

/// A time for a message: RFC 3339 where it has one, else nanoseconds.
fn time_text(ns: i64) -> String {
    // humantime formats times from the epoch on (to year 9999; i64
    // nanoseconds end in 2262).
    match u64::try_from(ns) {
        Ok(ns) => {
            let time = UNIX_EPOCH + Duration::from_nanos(ns);
            humantime::format_rfc3339_seconds(time).to_string()
        }
        Err(_) => format!("{ns} ns since the epoch"),
    }
}

/// The queries each tenant runs, and waits to run, on this node.
#[derive(Debug, Default)]
pub(crate) struct TenantSlots {
    tenants: Mutex<HashMap<String, Tenant>>,
    /// Told whenever a permit is given back.
    freed: Notify,
}

#[derive(Debug, Default)]
struct Tenant {
    running: u32,
    waiting: u32,
}

impl TenantSlots {
    /// A permit for one more query of `tenant`, when it runs fewer than
    /// `limit`; else one as soon as a slot frees within `wait`, unless too
    /// many of its queries wait already. Refused with
    /// [`Refusal::TooManyQueries`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future while it waits takes it out of the queue.
    pub(crate) async fn acquire(
        self: &Arc<Self>,
        tenant: &str,
        limit: u32,
        wait: Duration,
    ) -> Result<QueryPermit, Refusal> {
        let refused = || Refusal::TooManyQueries {
            tenant: tenant.to_owned(),
            limit,
        };
        let deadline = Instant::now() + wait;
        let mut queued: Option<Waiting<'_>> = None;
        loop {
            // Made before the check, so that a permit given back between
            // the check and the wait still wakes this one.
            let freed = self.freed.notified();
            {
                let mut tenants = self.lock();
                let entry = tenants.entry(tenant.to_owned()).or_default();
                if entry.running < limit {
                    entry.running += 1;
                    drop(tenants);
                    drop(queued);
                    return Ok(QueryPermit {
                        slots: self.clone(),
                        tenant: tenant.to_owned(),
                    });
                }
                if queued.is_none() {
                    if wait.is_zero() || entry.waiting >= limit.saturating_mul(WAITING_PER_SLOT) {
                        return Err(refused());
                    }
                    entry.waiting += 1;
                    queued = Some(Waiting {
                        slots: self,
                        tenant,
                    });
                }
            }
            if tokio::time::timeout_at(deadline, freed).await.is_err() {
                return Err(refused());
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Tenant>> {
        self.tenants.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes one from a tenant's `running` or `waiting`, forgetting the
    /// tenant when it has neither.
    fn release(&self, tenant: &str, count: impl FnOnce(&mut Tenant) -> &mut u32) {
        let mut tenants = self.lock();
        if let Some(entry) = tenants.get_mut(tenant) {
            let n = count(entry);
            *n = n.saturating_sub(1);
            if entry.running == 0 && entry.waiting == 0 {
                tenants.remove(tenant);
            }
        }
    }

    /// How many queries `tenant` runs now, and how many wait.
    #[cfg(test)]
    pub(crate) fn state(&self, tenant: &str) -> (u32, u32) {
        self.lock()
            .get(tenant)
            .map_or((0, 0), |t| (t.running, t.waiting))
    }
}

/// A query's place in its tenant's queue, left when dropped.
struct Waiting<'a> {
    slots: &'a TenantSlots,
    tenant: &'a str,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.slots.release(self.tenant, |t| &mut t.waiting);
    }
}

/// One running query of a tenant; dropping it (the query answered, or its
/// caller gone) frees the slot.
#[derive(Debug)]
pub(crate) struct QueryPermit {
    slots: Arc<TenantSlots>,
    tenant: String,
}

impl Drop for QueryPermit {
    fn drop(&mut self) {
        self.slots.release(&self.tenant, |t| &mut t.running);
        self.slots.freed.notify_waiters();
    }
}

/// Admits a query: a permit first (refusing costs nothing), then, when the
/// range is longer than allowed, narrows it to its data's extent or
/// refuses it.
pub(crate) async fn admit(
    store: &dyn ProfileStore,
    slots: &Arc<TenantSlots>,
    options: QueryOptions,
    admit: Admit,
) -> Result<Admission, Refusal> {
    let Admit {
        range,
        reads,
        max_concurrent,
        stricter,
    } = admit;
    let permit = slots
        .acquire(range.scope.tenant(), max_concurrent, options.queue_wait)
        .await?;
    let (max, advice) = match stricter {
        Some(limit) if limit.max < options.max_range => (limit.max, limit.advice),
        _ => (
            options.max_range,
            "narrow from and to, or start the query node with a larger --max-query-range"
                .to_owned(),
        ),
    };
    let max_ns = i128::try_from(max.as_nanos()).unwrap_or(i128::MAX);
    let span = |from: i64, to: i64| i128::from(to) - i128::from(from);
    if span(range.from_ns, range.to_ns) <= max_ns {
        return Ok(Admission { range, permit });
    }
    let (from, to) = (range.from_ns, range.to_ns);
    let scope = &range.scope;
    let hours = match &reads {
        Reads::MetricNames => return Ok(Admission { range, permit }),
        Reads::Samples => store.sample_hours(scope, from, to).await,
        Reads::Metric(name) => store.metric_hours(scope, name, from, to).await,
    }
    .map_err(QueryError::from)?;
    let (Some(&first), Some(&last)) = (hours.first(), hours.last()) else {
        // Nothing to read: answered as asked (and empty), at no cost.
        return Ok(Admission { range, permit });
    };
    let data = (
        from.max(first.saturating_mul(NANOS_PER_HOUR)),
        to.min(last.saturating_add(1).saturating_mul(NANOS_PER_HOUR)),
    );
    if span(data.0, data.1) > max_ns {
        return Err(Refusal::RangeTooLong {
            asked: (from, to),
            data,
            max,
            advice,
        });
    }
    tracing::debug!(
        tenant = scope.tenant(),
        asked_from_ns = from,
        asked_to_ns = to,
        from_ns = data.0,
        to_ns = data.1,
        "range longer than the maximum narrowed to its data"
    );
    Ok(Admission {
        range: QueryRange {
            from_ns: data.0,
            to_ns: data.1,
            ..range
        },
        permit,
    })
}

#[cfg(test)]
mod tests {
    use kiln_model::{LabelSetId, StackId};
    use kiln_storage::{EmbeddedProfileStore, Scope, StoredSample};

    use super::*;

    const H: i64 = NANOS_PER_HOUR;
    const DAY: i64 = 24 * H;
    /// 2027-01-15, an hour boundary.
    const T: i64 = 1_800_000_000_000_000_000 / H * H;
    /// 2100-01-01.
    const YEAR_2100: i64 = 4_102_444_800_000_000_000;

    fn range(from_ns: i64, to_ns: i64) -> QueryRange {
        QueryRange {
            scope: Scope::new("t", "p").unwrap(),
            from_ns,
            to_ns,
            filters: vec![],
        }
    }

    fn ask(range: QueryRange) -> Admit {
        Admit {
            range,
            reads: Reads::Samples,
            max_concurrent: 8,
            stricter: None,
        }
    }

    /// A store holding one sample in each of `hours` (from [`T`]).
    async fn store_with(hours: &[i64]) -> (tempfile::TempDir, EmbeddedProfileStore) {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedProfileStore::open(dir.path()).unwrap();
        let samples: Vec<_> = hours
            .iter()
            .map(|&h| StoredSample {
                timestamp_ns: T + h * H + 7,
                stack: StackId(1),
                labels: LabelSetId(1),
                count: 1,
                period_ns: 1,
            })
            .collect();
        store
            .put_samples(&Scope::new("t", "p").unwrap(), &samples)
            .await
            .unwrap();
        (dir, store)
    }

    /// Guards the all-time query: a range longer than the maximum is
    /// narrowed to the hours that hold data, when those fit; ranges within
    /// the maximum are left as asked.
    #[tokio::test]
    async fn long_ranges_are_narrowed_to_their_data() {
        let (_dir, store) = store_with(&[0, 5, 30]).await;
        let slots = Arc::default();
        let options = QueryOptions::default();
        let admitted = admit(&store, &slots, options, ask(range(0, YEAR_2100)))
            .await
            .unwrap();
        let r = &admitted.range;
        assert_eq!((r.from_ns, r.to_ns), (T, T + 31 * H));
        // A range inside the maximum is not touched (nor is the index read).
        let week = range(T - 7 * DAY, T + DAY);
        let admitted = admit(&store, &slots, options, ask(week.clone()))
            .await
            .unwrap();
        assert_eq!(admitted.range, week);
        // Nothing to read: answered as asked, and empty.
        let empty = range(0, T - DAY);
        let long = QueryOptions {
            max_range: Duration::from_secs(3600),
            ..options
        };
        let admitted = admit(&store, &slots, long, ask(empty.clone()))
            .await
            .unwrap();
        assert_eq!(admitted.range, empty);
    }

    /// Data spanning more than the maximum is refused, with a message
    /// naming the range, the data's span, the maximum and what to do.
    #[tokio::test]
    async fn data_spanning_more_than_the_maximum_is_refused() {
        let (_dir, store) = store_with(&[0, 1, 24 * 500]).await;
        let slots = Arc::default();
        let err = admit(
            &store,
            &slots,
            QueryOptions::default(),
            ask(range(0, YEAR_2100)),
        )
        .await
        .unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, Refusal::RangeTooLong { .. }), "{err:?}");
        for part in [
            "1970-01-01T00:00:00Z",
            "500.0 days",
            "at most 400.0 days",
            "--max-query-range",
        ] {
            assert!(text.contains(part), "{part:?} not in {text:?}");
        }
        // A stricter limit applies, with its own advice.
        let stricter = SpanLimit {
            max: Duration::from_secs(3600),
            advice: "metrics are read over at most a while".into(),
        };
        let strict = Admit {
            stricter: Some(stricter.clone()),
            ..ask(range(T - H, T + 3 * H))
        };
        let err = admit(&store, &slots, QueryOptions::default(), strict)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("at most a while"), "{err}");
        // A metric without points has nothing to read: admitted as asked.
        let metric = Admit {
            reads: Reads::Metric("m".into()),
            stricter: Some(stricter),
            ..ask(range(T - H, T + 3 * H))
        };
        let admitted = admit(&store, &slots, QueryOptions::default(), metric)
            .await
            .unwrap();
        assert_eq!(admitted.range, range(T - H, T + 3 * H));
    }

    /// A tenant gets `limit` permits at once, and another one back as soon
    /// as one is dropped; other tenants are not affected.
    #[tokio::test]
    async fn concurrent_queries_are_limited_per_tenant() {
        let (_dir, store) = store_with(&[0]).await;
        let slots: Arc<TenantSlots> = Arc::default();
        let options = QueryOptions {
            queue_wait: Duration::ZERO,
            ..QueryOptions::default()
        };
        let busy = |max_concurrent| Admit {
            max_concurrent,
            ..ask(range(T, T + H))
        };
        let first = admit(&store, &slots, options, busy(2)).await.unwrap();
        let second = admit(&store, &slots, options, busy(2)).await.unwrap();
        let err = admit(&store, &slots, options, busy(2)).await.unwrap_err();
        assert!(
            matches!(err, Refusal::TooManyQueries { limit: 2, .. }),
            "{err:?}"
        );
        assert!(err.to_string().contains("max_concurrent_queries"), "{err}");
        assert_eq!(slots.state("t"), (2, 0));
        let other = Admit {
            range: QueryRange {
                scope: Scope::new("u", "p").unwrap(),
                ..range(T, T + H)
            },
            ..busy(2)
        };
        let _other = admit(&store, &slots, options, other).await.unwrap();
        drop(first);
        let _third = admit(&store, &slots, options, busy(2)).await.unwrap();
        drop(second);
        assert_eq!(slots.state("t"), (1, 0));
        // A refused range gives its permit back.
        let refused = Admit {
            stricter: Some(SpanLimit {
                max: Duration::from_secs(1),
                advice: String::new(),
            }),
            ..busy(2)
        };
        assert!(admit(&store, &slots, options, refused).await.is_err());
        assert_eq!(slots.state("t"), (1, 0));
    }

    /// A query over the limit waits for a slot: it runs as soon as one
    /// frees within the wait, and is refused when none does; one dropped
    /// while waiting leaves the queue. (Real time: the bounds are loose.)
    #[tokio::test]
    async fn queries_over_the_limit_wait_briefly_for_a_slot() {
        let slots: Arc<TenantSlots> = Arc::default();
        let long = Duration::from_secs(30);
        let first = slots.acquire("t", 1, long).await.unwrap();
        let waiter = {
            let slots = slots.clone();
            tokio::spawn(async move { slots.acquire("t", 1, long).await.map(drop) })
        };
        while slots.state("t") != (1, 1) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let started = Instant::now();
        drop(first);
        waiter.await.unwrap().unwrap();
        assert!(started.elapsed() < long / 2, "{:?}", started.elapsed());
        assert_eq!(slots.state("t"), (0, 0));

        let held = slots.acquire("t", 1, long).await.unwrap();
        let short = Duration::from_millis(200);
        let started = Instant::now();
        let err = slots.acquire("t", 1, short).await.unwrap_err();
        assert!(matches!(err, Refusal::TooManyQueries { .. }), "{err:?}");
        assert!(started.elapsed() >= short, "{:?}", started.elapsed());
        assert_eq!(slots.state("t"), (1, 0));
        // Dropped while waiting: out of the queue.
        let gave_up = tokio::time::timeout(short, slots.acquire("t", 1, long)).await;
        assert!(gave_up.is_err());
        assert_eq!(slots.state("t"), (1, 0));
        // At most WAITING_PER_SLOT wait per slot; the next is refused at once.
        let waiting: Vec<_> = (0..WAITING_PER_SLOT)
            .map(|_| {
                let slots = slots.clone();
                tokio::spawn(async move { slots.acquire("t", 1, long).await.map(drop) })
            })
            .collect();
        while slots.state("t") != (1, WAITING_PER_SLOT) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let started = Instant::now();
        assert!(slots.acquire("t", 1, long).await.is_err());
        assert!(started.elapsed() < long / 2, "{:?}", started.elapsed());
        drop(held);
        for w in waiting {
            w.await.unwrap().unwrap();
        }
        assert_eq!(slots.state("t"), (0, 0));
    }
}
