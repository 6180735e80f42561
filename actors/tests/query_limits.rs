//! A query node's limits and cancellation over HTTP (issue 18), against a
//! real query node (`roles::start_query`: the server, its authentication
//! and its shutdown settings as deployed) on a real embedded store:
//!
//! - a client that gives up on a long query stops its scans;
//! - a stopping server does not wait for a long query;
//! - a query of a tenant running its `max_concurrent_queries` waits
//!   briefly, then gets a 429 with `Retry-After`; served again once one
//!   finishes;
//! - an all-time range over data spanning more than the maximum gets a 400
//!   that says so, one over less is answered.
//!
//! The store is wrapped to count partition scans and make each take
//! [`SCAN_TIME`], standing in for big partitions, so that a query lasts
//! long enough to be abandoned on any machine. Every bound in time here is
//! several times what the work needs.

mod common;

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use actix_web::dev::ServerHandle;
use async_trait::async_trait;
use kiln_actors::http::QuotaDefaults;
use kiln_actors::roles::{self, HttpOptions};
use kiln_model::{
    Executable, FileId, Frame, FrameId, FrameKind, LabelSet, LabelSetEntry, LabelSetId,
    MetricPoint, NANOS_PER_HOUR, StackEntry, StackId, stack_id,
};
use kiln_storage::{
    EmbeddedProfileStore, LocalObjectStore, ProfileStore, Role, Roles, Scope, StoreError,
    StoredFrame, StoredMetricPoint, StoredSample,
};
use kiln_symbolizer_workers::SymbolizerConfig;

use common::{Credentials, T0};

/// How long each partition scan takes.
const SCAN_TIME: Duration = Duration::from_millis(100);
/// Hours of data: at 32 scans in flight, an uncancelled query over all of
/// them takes `HOURS / 32 * SCAN_TIME`, 12.5 s.
const HOURS: i64 = 4_000;
/// 2100-01-01 in unix seconds: the issue's `to`.
const YEAR_2100_S: i64 = 4_102_444_800;
/// [`T0`] in unix seconds.
const T0_S: i64 = T0 / 1_000_000_000;

/// An embedded store whose sample scans are counted and slowed.
#[derive(Debug)]
struct SlowStore {
    inner: EmbeddedProfileStore,
    scans: AtomicU64,
}

impl SlowStore {
    fn scans(&self) -> u64 {
        self.scans.load(Ordering::Relaxed)
    }
}

#[async_trait]
impl ProfileStore for SlowStore {
    async fn scan_samples(
        &self,
        scope: &Scope,
        from_ns: i64,
        to_ns: i64,
    ) -> Result<Vec<StoredSample>, StoreError> {
        self.scans.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(SCAN_TIME).await;
        self.inner.scan_samples(scope, from_ns, to_ns).await
    }

    async fn put_frames(&self, tenant: &str, frames: &[StoredFrame]) -> Result<(), StoreError> {
        self.inner.put_frames(tenant, frames).await
    }
    async fn put_stacks(&self, tenant: &str, stacks: &[StackEntry]) -> Result<(), StoreError> {
        self.inner.put_stacks(tenant, stacks).await
    }
    async fn put_label_sets(&self, tenant: &str, sets: &[LabelSetEntry]) -> Result<(), StoreError> {
        self.inner.put_label_sets(tenant, sets).await
    }
    async fn put_executables(&self, tenant: &str, e: &[Executable]) -> Result<(), StoreError> {
        self.inner.put_executables(tenant, e).await
    }
    async fn delete_sealed_samples(
        &self,
        scope: &Scope,
        samples: &[StoredSample],
        written_before_ns: i64,
    ) -> Result<u64, StoreError> {
        self.inner
            .delete_sealed_samples(scope, samples, written_before_ns)
            .await
    }
    async fn put_samples(&self, scope: &Scope, samples: &[StoredSample]) -> Result<(), StoreError> {
        self.inner.put_samples(scope, samples).await
    }
    async fn get_frames(
        &self,
        tenant: &str,
        ids: &[FrameId],
    ) -> Result<Vec<Option<StoredFrame>>, StoreError> {
        self.inner.get_frames(tenant, ids).await
    }
    async fn get_stacks(
        &self,
        tenant: &str,
        ids: &[StackId],
    ) -> Result<Vec<Option<Vec<FrameId>>>, StoreError> {
        self.inner.get_stacks(tenant, ids).await
    }
    async fn get_label_sets(
        &self,
        tenant: &str,
        ids: &[LabelSetId],
    ) -> Result<Vec<Option<LabelSet>>, StoreError> {
        self.inner.get_label_sets(tenant, ids).await
    }
    async fn get_executables(
        &self,
        tenant: &str,
        ids: &[FileId],
    ) -> Result<Vec<Option<Executable>>, StoreError> {
        self.inner.get_executables(tenant, ids).await
    }
    async fn sample_hours(
        &self,
        scope: &Scope,
        from_ns: i64,
        to_ns: i64,
    ) -> Result<Vec<i64>, StoreError> {
        self.inner.sample_hours(scope, from_ns, to_ns).await
    }
    async fn metric_hours(
        &self,
        scope: &Scope,
        name: &str,
        from_ns: i64,
        to_ns: i64,
    ) -> Result<Vec<i64>, StoreError> {
        self.inner.metric_hours(scope, name, from_ns, to_ns).await
    }
    async fn put_metric_points(
        &self,
        scope: &Scope,
        points: &[MetricPoint],
    ) -> Result<(), StoreError> {
        self.inner.put_metric_points(scope, points).await
    }
    async fn scan_metric_points(
        &self,
        scope: &Scope,
        name: &str,
        from_ns: i64,
        to_ns: i64,
    ) -> Result<Vec<StoredMetricPoint>, StoreError> {
        self.inner
            .scan_metric_points(scope, name, from_ns, to_ns)
            .await
    }
    async fn metric_names(
        &self,
        scope: &Scope,
        from_ns: i64,
        to_ns: i64,
    ) -> Result<Vec<String>, StoreError> {
        self.inner.metric_names(scope, from_ns, to_ns).await
    }
    async fn delete_hours_before(
        &self,
        scope: &Scope,
        before_ns: i64,
    ) -> Result<kiln_storage::DeletedHours, StoreError> {
        self.inner.delete_hours_before(scope, before_ns).await
    }
    async fn stored_bytes(&self, tenant: &str) -> Result<u64, StoreError> {
        self.inner.stored_bytes(tenant).await
    }
    async fn hour_versions(
        &self,
        scope: &Scope,
        from_ns: i64,
        to_ns: i64,
    ) -> Result<Vec<kiln_storage::HourVersion>, StoreError> {
        self.inner.hour_versions(scope, from_ns, to_ns).await
    }
    async fn put_rollup(
        &self,
        scope: &Scope,
        resolution: kiln_storage::Resolution,
        window: i64,
        version: u64,
        rows: &[kiln_storage::RollupRow],
    ) -> Result<(), StoreError> {
        self.inner
            .put_rollup(scope, resolution, window, version, rows)
            .await
    }
    async fn rollup_versions(
        &self,
        scope: &Scope,
        resolution: kiln_storage::Resolution,
        from_ns: i64,
        to_ns: i64,
    ) -> Result<Vec<kiln_storage::HourVersion>, StoreError> {
        self.inner
            .rollup_versions(scope, resolution, from_ns, to_ns)
            .await
    }
    async fn scan_rollup(
        &self,
        scope: &Scope,
        resolution: kiln_storage::Resolution,
        window: i64,
    ) -> Result<Vec<kiln_storage::RollupRow>, StoreError> {
        self.inner.scan_rollup(scope, resolution, window).await
    }
    async fn sync(&self) -> Result<(), StoreError> {
        self.inner.sync().await
    }
}

/// Status, `Retry-After` and body.
type Answer = (u16, Option<String>, String);

/// A query node over a [`SlowStore`] holding one sample of `main;work` in
/// each of `hours` hours before [`T0`], and a read key for its scope.
struct Node {
    url: String,
    key: String,
    store: Arc<SlowStore>,
    handle: ServerHandle,
    _dir: tempfile::TempDir,
}

async fn start_node(hours: i64, quota: QuotaDefaults) -> Node {
    let dir = tempfile::tempdir().unwrap();
    let scope = Scope::new("acme", "web").unwrap();
    let inner = EmbeddedProfileStore::open(&dir.path().join("profiles")).unwrap();
    let frames: Vec<Frame> = ["main", "work"]
        .iter()
        .map(|f| Frame::named(FrameKind::Native, *f))
        .collect();
    let ids: Vec<FrameId> = frames.iter().map(Frame::id).collect();
    let stack = stack_id(&ids);
    let labels = LabelSet::new().with("host", "h1");
    let rows: Vec<StoredFrame> = frames
        .into_iter()
        .map(|frame| StoredFrame {
            id: frame.id(),
            frame,
            symbols: Vec::new(),
        })
        .collect();
    inner.put_frames("acme", &rows).await.unwrap();
    let entry = StackEntry {
        id: stack,
        frames: ids,
    };
    inner.put_stacks("acme", &[entry]).await.unwrap();
    let set = LabelSetEntry {
        id: labels.id(),
        labels: labels.clone(),
    };
    inner.put_label_sets("acme", &[set]).await.unwrap();
    let samples: Vec<StoredSample> = (1..=hours)
        .map(|h| StoredSample {
            timestamp_ns: T0 - h * NANOS_PER_HOUR,
            stack,
            labels: labels.id(),
            count: 1,
            period_ns: 10_000_000,
        })
        .collect();
    inner.put_samples(&scope, &samples).await.unwrap();
    let store = Arc::new(SlowStore {
        inner,
        scans: AtomicU64::new(0),
    });
    let access = Credentials::new(dir.path(), &scope, Roles::of(&[Role::Read])).await;
    let objects = Arc::new(LocalObjectStore::open(&dir.path().join("objects")).unwrap());
    let listen: SocketAddr = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let running = roles::start_query(
        store.clone(),
        objects,
        access.metadata.clone(),
        2,
        SymbolizerConfig::default(),
        None,
        HttpOptions {
            workers: 2,
            quota,
            // The tests count the queries' scans; the rollup job would
            // scan every hour too.
            rollup_every: None,
            ..HttpOptions::new(listen)
        },
    )
    .await
    .unwrap();
    let handle = running.server.handle();
    actix_rt::spawn(running.server);
    Node {
        url: format!("http://{}", running.local_addr),
        key: access.key,
        store,
        handle,
        _dir: dir,
    }
}

impl Node {
    /// `GET /api/v1/<path>` with the node's key, giving up after
    /// `timeout`: the status, `Retry-After` and body, or why there is none
    /// (the client gave up, the server closed the connection).
    async fn get(&self, path: &str, timeout: Duration) -> Result<Answer, reqwest::Error> {
        let response = reqwest::Client::new()
            .get(format!("{}/api/v1/{path}", self.url))
            .bearer_auth(&self.key)
            .timeout(timeout)
            .send()
            .await?;
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap().to_owned());
        Ok((status, retry_after, response.text().await?))
    }

    /// Waits until the scan count has not moved for a second (at most
    /// `within`), and returns it; `why` says what to check when it moves on.
    async fn settled_scans(&self, within: Duration, why: &str) -> u64 {
        let started = Instant::now();
        let mut last = self.store.scans();
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let now = self.store.scans();
            if now == last {
                return now;
            }
            assert!(
                started.elapsed() < within,
                "scans still going after {within:?}: {last} then {now}; {why}"
            );
            last = now;
        }
    }
}

/// The all-time query.
fn all_time(view: &str) -> String {
    format!("{view}?from=0&to={YEAR_2100_S}")
}

/// Guards cancellation (issue 18: a query went on scanning for 20 minutes
/// after its client gave up): once the client is gone, the node starts no
/// more scans, and it keeps serving.
#[actix_rt::test]
async fn a_query_whose_client_gives_up_stops_scanning() {
    let node = start_node(HOURS, QuotaDefaults::default()).await;
    let gave_up = node
        .get(&all_time("flamegraph"), Duration::from_secs(1))
        .await;
    assert!(
        gave_up.as_ref().is_err_and(reqwest::Error::is_timeout),
        "{gave_up:?}"
    );
    // actix-web keeps serving a request whose client closed its side
    // (HTTP/1 half-close) unless the server says otherwise.
    let why = "does the server's serve() set .h1_allow_half_closed(false)? \
               Without it actix never drops the handler of a client that left";
    let scanned = node.settled_scans(Duration::from_secs(10), why).await;
    assert!(
        scanned < HOURS as u64 / 2,
        "{scanned} of {HOURS} partitions scanned after the client left; {why}"
    );
    // Still serving: a day of data, answered in full.
    let day = format!(
        "flamegraph?format=collapsed&from={}&to={}",
        T0_S - 86_400,
        T0_S
    );
    let (status, _, body) = node.get(&day, Duration::from_secs(60)).await.unwrap();
    assert_eq!((status, body.as_str()), (200, "main;work 24\n"));
    node.handle.stop(false).await;
}

/// Guards shutdown (issue 18: the server did not stop on SIGTERM while a
/// query ran): a graceful stop waits for the query only as long as the
/// server's shutdown timeout, and the query's scans stop with it.
#[actix_rt::test]
async fn a_running_query_does_not_hold_a_stopping_server() {
    let node = Arc::new(start_node(HOURS, QuotaDefaults::default()).await);
    let client = {
        let node = node.clone();
        actix_rt::spawn(async move { node.get(&all_time("top"), Duration::from_secs(120)).await })
    };
    while node.store.scans() == 0 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let started = Instant::now();
    // As SIGTERM does.
    node.handle.stop(true).await;
    let took = started.elapsed();
    assert!(took < Duration::from_secs(30), "the stop took {took:?}");
    let why = "a stopped server drops its handlers, which drops their queries";
    let scanned = node.settled_scans(Duration::from_secs(10), why).await;
    assert!(
        scanned < HOURS as u64 / 2,
        "{scanned} of {HOURS} partitions scanned after the server stopped"
    );
    // The client saw its connection closed, not an answer.
    let answer = client.await.unwrap();
    assert!(answer.is_err(), "{answer:?}");
}

/// Guards the per-tenant query limit: beyond `max_concurrent_queries`
/// running at once, a query waits for a slot (2 s by default), then gets a
/// 429 that names the limit and says when to retry; served again once a
/// slot is free.
#[actix_rt::test]
async fn a_tenant_over_its_concurrent_queries_gets_429() {
    let quota = QuotaDefaults {
        max_concurrent_queries: 2,
        ..QuotaDefaults::default()
    };
    let node = Arc::new(start_node(HOURS, quota).await);
    let long: Vec<_> = (0..2)
        .map(|_| {
            let node = node.clone();
            actix_rt::spawn(
                async move { node.get(&all_time("labels"), Duration::from_secs(6)).await },
            )
        })
        .collect();
    // Both are admitted in milliseconds, and run for 12 s (their clients
    // give up after 6 s); the next waits 2 s for a slot, in vain.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let hour = format!("top?from={}&to={}", T0_S - 3600, T0_S);
    let (status, retry_after, body) = node.get(&hour, Duration::from_secs(60)).await.unwrap();
    assert_eq!(status, 429, "{body}");
    assert_eq!(retry_after.as_deref(), Some("1"));
    assert!(body.contains("max_concurrent_queries"), "{body}");
    for query in long {
        // Each gives up after 6 s, or is answered: either way it is gone.
        let _gone = query.await.unwrap();
    }
    // Once they are gone (or done), the tenant is served again.
    let started = Instant::now();
    loop {
        let (status, _, body) = node.get(&hour, Duration::from_secs(60)).await.unwrap();
        if status == 200 {
            assert!(body.contains("\"work\""), "{body}");
            break;
        }
        assert_eq!(status, 429, "{body}");
        assert!(started.elapsed() < Duration::from_secs(30), "still refused");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    node.handle.stop(false).await;
}

/// Guards the maximum range: data spanning more than 400 days is refused
/// with a 400 that names the range, the data's span, the maximum and the
/// flag; the all-time query over data inside the maximum is answered in
/// full, with the range narrowed to the data, and an all-time timeline
/// gets its default step over the data (24 h / 240, rounded up to
/// 10 minutes: 144 points), not over 130 years.
#[actix_rt::test]
async fn all_time_ranges_are_answered_or_refused_by_their_data() {
    let node = start_node(24, QuotaDefaults::default()).await;
    let (status, _, body) = node
        .get(
            &format!("{}&format=collapsed", all_time("flamegraph")),
            Duration::from_secs(60),
        )
        .await
        .unwrap();
    assert_eq!((status, body.as_str()), (200, "main;work 24\n"));
    let (status, _, body) = node
        .get(&all_time("timeline"), Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(status, 200, "{body}");
    let timeline: serde_json::Value = serde_json::from_str(&body).unwrap();
    let first_hour = T0 - 24 * NANOS_PER_HOUR;
    assert_eq!(timeline["from_ns"], first_hour);
    assert_eq!(timeline["to_ns"], T0);
    assert_eq!(timeline["step_ns"], 600 * 1_000_000_000i64);
    let points = timeline["points"].as_array().unwrap();
    assert_eq!(points.len(), 144);
    let samples: u64 = points.iter().map(|p| p["samples"].as_u64().unwrap()).sum();
    assert_eq!(samples, 24);

    // A sample 500 days before the others: all time now spans too much.
    let old = StoredSample {
        timestamp_ns: T0 - 500 * 24 * NANOS_PER_HOUR,
        stack: StackId(1),
        labels: LabelSetId(1),
        count: 1,
        period_ns: 1,
    };
    let scope = Scope::new("acme", "web").unwrap();
    node.store.put_samples(&scope, &[old]).await.unwrap();
    let (status, _, body) = node
        .get(&all_time("flamegraph"), Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(status, 400, "{body}");
    for part in [
        "1970-01-01T00:00:00Z",
        "2100-01-01T00:00:00Z",
        "500.0 days",
        "at most 400.0 days",
        "--max-query-range",
    ] {
        assert!(body.contains(part), "{part:?} not in {body}");
    }
    // An explicit range inside the maximum is still answered.
    let (status, _, body) = node
        .get(
            &format!(
                "flamegraph?format=collapsed&from={}&to={T0_S}",
                T0_S - 86_400
            ),
            Duration::from_secs(60),
        )
        .await
        .unwrap();
    assert_eq!((status, body.as_str()), (200, "main;work 24\n"));
    node.handle.stop(false).await;
}
