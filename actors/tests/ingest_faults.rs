//! The ingest pipeline against hostile and failing inputs, on the real
//! embedded bus and store: forged bus records naming another tenant, a
//! store that refuses one record for good, a store that fails for a while.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use kiln_actors::envelope::{BusKey, EnvelopeHeader};
use kiln_actors::ingest::PipelineConfig;
use kiln_actors::telemetry::{Metrics, ServerRole};
use kiln_ingest_bus::{
    Bus, BusError, Consumer, EmbeddedBus, LagReader, PublishError, Published, Record,
};
use kiln_model::{Batch, BatchBuilder};
use kiln_model::{
    Envelope, Executable, FileId, Frame, FrameId, FrameKind, LabelSet, LabelSetEntry, LabelSetId,
    MetricPoint, StackEntry, StackId,
};
use kiln_storage::{
    EmbeddedProfileStore, LocalObjectStore, ObjectStore, ProfileStore, Scope, StoreError,
    StoredFrame, StoredMetricPoint, StoredSample,
};
use kiln_symbolizer_workers::{Symbolizer, SymbolizerConfig};

use common::{Pipeline, T0};

fn batch(function: &str, timestamp_ns: i64, count: u64) -> Vec<u8> {
    let mut b = BatchBuilder::new("a", T0, 1);
    b.add(
        timestamp_ns,
        &[Frame::named(FrameKind::Native, function)],
        &LabelSet::new(),
        count,
    );
    b.finish().encode()
}

/// Guards the trust boundary across the bus: a record naming another
/// tenant under a wrong MAC, one with no MAC (a version-1 envelope) and one
/// that is no envelope at all are refused, set aside outside every
/// tenant's area with the reason, and stored under no tenant; the valid
/// records around them are stored.
#[actix_rt::test]
async fn forged_records_are_dead_lettered_and_valid_ones_around_them_stored() {
    let s = Pipeline::start(2).await;
    s.publish("a", &batch("before", T0, 1)).await;

    let forged = Envelope::new("victim", "web", T0, &batch("forged", T0, 7))
        .unwrap()
        .encode(b"a key guessed by an attacker");
    s.publish_raw(b"victim\0a", forged).await;
    let mut unsigned = b"KLNE\x01\x06victim\x03web".to_vec();
    unsigned.extend_from_slice(&T0.to_le_bytes());
    unsigned.extend_from_slice(&batch("unsigned", T0, 9));
    s.publish_raw(b"victim\0a", unsigned).await;
    s.publish_raw(b"victim\0a", b"not an envelope".to_vec())
        .await;

    s.publish("a", &batch("after", T0 + 1, 2)).await;
    assert_eq!(s.collapsed(&[]).await, "after 2\nbefore 1\n");

    let victim = Scope::new("victim", "web").unwrap();
    let stored = s.store.scan_samples(&victim, 0, i64::MAX).await.unwrap();
    assert!(stored.is_empty(), "{stored:?}");
    assert!(s.objects.list("tenants/victim/").await.unwrap().is_empty());

    let kept = s.objects.list("dead-letters/").await.unwrap();
    let reasons: Vec<String> = {
        let mut out = Vec::new();
        for key in kept.iter().filter(|k| k.as_str().ends_with(".reason")) {
            let bytes = s.objects.get(key).await.unwrap().unwrap();
            out.push(String::from_utf8(bytes.to_vec()).unwrap());
        }
        out
    };
    assert_eq!(kept.len(), 6, "{kept:?}");
    let mac_refusals = reasons
        .iter()
        .filter(|r| r.contains("envelope MAC does not verify"))
        .count();
    assert_eq!(mac_refusals, 2, "{reasons:?}");
    assert!(reasons.iter().any(|r| r.contains("not a kiln envelope")));
    assert_eq!(s.progress.dead_letters(), 3);
}

/// A gateway's key differs from the worker's (a misconfigured
/// deployment): every record is refused, none stored, all kept.
#[actix_rt::test]
async fn records_signed_with_another_key_are_never_stored() {
    let s = Pipeline::start(2).await;
    let header = EnvelopeHeader {
        scope: s.scope.clone(),
        received_at_ns: T0,
    };
    let other = kiln_actors::envelope::BusKey::generate().unwrap();
    let record = header.wrap(&batch("main", T0, 1), &other);
    s.publish_raw(&header.bus_key("a"), record).await;
    s.publish("a", &batch("signed", T0, 1)).await;
    assert_eq!(s.collapsed(&[]).await, "signed 1\n");
    assert_eq!(s.progress.dead_letters(), 1);
}

/// What the fault injector refuses: samples at this time.
const POISON_NS: i64 = T0 + 13;

/// The real store, but `put_samples` refuses for good any call holding a
/// sample at [`POISON_NS`], and fails `transient` times with an I/O error
/// before it lets the first call through.
#[derive(Debug)]
struct Faulty {
    inner: Arc<EmbeddedProfileStore>,
    transient: AtomicUsize,
    refused: AtomicUsize,
    /// Failed writes and syncs, in order with the bus's polls and commits.
    log: Arc<Log>,
}

#[async_trait]
impl ProfileStore for Faulty {
    async fn put_frames(&self, tenant: &str, frames: &[StoredFrame]) -> Result<(), StoreError> {
        self.log.push(Event::Frames);
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
        let left = self.transient.load(Ordering::SeqCst);
        if left > 0 {
            self.transient.store(left - 1, Ordering::SeqCst);
            self.log.push(Event::WriteFailed);
            return Err(StoreError::Io {
                op: "write",
                path: "/injected".into(),
                source: std::io::Error::other("injected transient failure"),
            });
        }
        if samples.iter().any(|s| s.timestamp_ns == POISON_NS) {
            self.refused.fetch_add(1, Ordering::SeqCst);
            return Err(StoreError::InvalidArgument {
                what: "sample",
                reason: "injected permanent refusal".into(),
            });
        }
        self.log.push(Event::Samples);
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
    async fn scan_samples(
        &self,
        scope: &Scope,
        from_ns: i64,
        to_ns: i64,
    ) -> Result<Vec<StoredSample>, StoreError> {
        self.inner.scan_samples(scope, from_ns, to_ns).await
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
        self.inner.sync().await?;
        self.log.push(Event::Synced);
        Ok(())
    }
}

async fn faulty_pipeline(transient: usize) -> (Pipeline, Arc<Faulty>) {
    let mut faulty = None;
    let s = Pipeline::with_ingest_store(Scope::new("acme", "web").unwrap(), 2, |inner| {
        let f = Arc::new(Faulty {
            inner,
            transient: AtomicUsize::new(transient),
            refused: AtomicUsize::new(0),
            log: Arc::default(),
        });
        faulty = Some(f.clone());
        f
    })
    .await;
    (s, faulty.unwrap())
}

/// Guards "a store that fails permanently on one record does not stop
/// ingest": the record is set aside under its tenant's dead letters, with
/// the store's reason, and the records after it become queryable.
#[actix_rt::test]
async fn a_record_the_store_refuses_for_good_does_not_stop_ingest() {
    let (s, faulty) = faulty_pipeline(0).await;
    s.publish("a", &batch("before", T0, 1)).await;
    s.publish("a", &batch("poison", POISON_NS, 5)).await;
    s.publish("a", &batch("after", T0 + 1, 2)).await;
    assert_eq!(s.collapsed(&[]).await, "after 2\nbefore 1\n");
    assert_eq!(
        faulty.refused.load(Ordering::SeqCst),
        1,
        "refused once, not retried"
    );
    assert_eq!(s.progress.dead_letters(), 1);
    let kept = s.objects.list("tenants/acme/dead-letters/").await.unwrap();
    assert_eq!(kept.len(), 2, "{kept:?}");
    let reason = kept
        .iter()
        .find(|k| k.as_str().ends_with(".reason"))
        .unwrap();
    let reason = s.objects.get(reason).await.unwrap().unwrap();
    let reason = String::from_utf8_lossy(&reason);
    assert!(reason.contains("the store refused the batch"), "{reason}");
    assert_eq!(
        dead_lettered_batch(&s).await.samples[0].timestamp_ns,
        POISON_NS
    );
}

/// The batch of the record set aside under tenant `acme`'s dead letters.
async fn dead_lettered_batch(s: &Pipeline) -> Batch {
    let kept = s.objects.list("tenants/acme/dead-letters/").await.unwrap();
    let envelope = kept
        .iter()
        .find(|k| k.as_str().ends_with(".envelope"))
        .unwrap();
    let bytes = s.objects.get(envelope).await.unwrap().unwrap();
    let (_, kept_batch) = EnvelopeHeader::parse(&bytes, &s.bus_key).unwrap();
    Batch::decode(kept_batch).unwrap()
}

/// Guards the grouped writes: a poll's batches of one scope go to the
/// store in a few calls, not one each, and when the store refuses a call
/// for good, each of its batches is written alone, so that only the one at
/// fault is set aside.
/// The three records are published back to back, well within the
/// consumer's linger, so they are taken in one poll.
#[actix_rt::test]
async fn a_record_refused_among_others_of_its_poll_is_the_only_one_set_aside() {
    let (s, faulty) = faulty_pipeline(0).await;
    let header = EnvelopeHeader {
        scope: s.scope.clone(),
        received_at_ns: T0,
    };
    let mut last = None;
    for (function, at, count) in [
        ("before", T0, 1),
        ("poison", POISON_NS, 5),
        ("after", T0 + 1, 2),
    ] {
        let record = header.wrap(&batch(function, at, count), &s.bus_key);
        last = Some(s.bus.publish(&header.bus_key("a"), record).await.unwrap());
    }
    let last = last.unwrap();
    assert!(
        s.progress
            .wait_committed(last.partition, last.offset, Duration::from_secs(30))
            .await
    );
    assert_eq!(s.collapsed(&[]).await, "after 2\nbefore 1\n");
    assert_eq!(s.progress.dead_letters(), 1);
    // Once in its poll's call and once alone (or only alone, had the
    // records come in separate polls); never again after that.
    let refused = faulty.refused.load(Ordering::SeqCst);
    assert!((1..=2).contains(&refused), "refused {refused} times");
    assert_eq!(
        dead_lettered_batch(&s).await.samples[0].timestamp_ns,
        POISON_NS
    );
}

/// Transient store errors are retried (with backoff) until they pass:
/// nothing is set aside and nothing lost.
#[actix_rt::test]
async fn transient_store_errors_are_retried_not_dead_lettered() {
    let (s, _faulty) = faulty_pipeline(3).await;
    s.publish("a", &batch("main", T0, 4)).await;
    assert_eq!(s.collapsed(&[]).await, "main 4\n");
    assert_eq!(s.progress.dead_letters(), 0);
}

/// What the pipeline did, in order: the bus's side (polls, commits) and
/// the store's (failed writes, syncs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Event {
    Polled(usize),
    Frames,
    Samples,
    WriteFailed,
    Synced,
    Committed(u32, u64),
}

#[derive(Debug, Default)]
struct Log(Mutex<Vec<Event>>);

impl Log {
    fn push(&self, event: Event) {
        self.0.lock().unwrap().push(event);
    }

    fn events(&self) -> Vec<Event> {
        self.0.lock().unwrap().clone()
    }
}

/// A bus whose consumers log their polls and commits.
#[derive(Debug)]
struct Recording {
    inner: Arc<EmbeddedBus>,
    log: Arc<Log>,
}

#[async_trait]
impl Bus for Recording {
    fn partition_count(&self) -> u32 {
        self.inner.partition_count()
    }
    async fn publish(&self, key: &[u8], payload: Vec<u8>) -> Result<Published, PublishError> {
        self.inner.publish(key, payload).await
    }
    async fn consumer(&self, group: &str) -> Result<Box<dyn Consumer>, BusError> {
        Ok(Box::new(RecordingConsumer {
            inner: self.inner.consumer(group).await?,
            log: self.log.clone(),
        }))
    }
    async fn committed_offsets(&self, group: &str) -> Result<Vec<u64>, BusError> {
        self.inner.committed_offsets(group).await
    }
}

#[derive(Debug)]
struct RecordingConsumer {
    inner: Box<dyn Consumer>,
    log: Arc<Log>,
}

#[async_trait]
impl Consumer for RecordingConsumer {
    async fn poll(
        &mut self,
        max: usize,
        max_bytes: usize,
        timeout: Duration,
    ) -> Result<Vec<Record>, BusError> {
        let records = self.inner.poll(max, max_bytes, timeout).await?;
        if !records.is_empty() {
            self.log.push(Event::Polled(records.len()));
        }
        Ok(records)
    }
    async fn commit(&mut self, partition: u32, next_offset: u64) -> Result<(), BusError> {
        self.inner.commit(partition, next_offset).await?;
        self.log.push(Event::Committed(partition, next_offset));
        Ok(())
    }
    async fn commit_all(&mut self, offsets: &[(u32, u64)]) -> Result<(), BusError> {
        self.inner.commit_all(offsets).await?;
        for &(partition, next_offset) in offsets {
            self.log.push(Event::Committed(partition, next_offset));
        }
        Ok(())
    }
    fn lag_reader(&self) -> Arc<dyn LagReader> {
        self.inner.lag_reader()
    }
}

/// Guards the pipeline's order while its stages overlap: with a backlog
/// on the bus, the second poll is taken (and decoded) while the first is
/// still being written; the first poll's writes fail for a while and are
/// retried, and nothing is committed until they pass; every commit follows
/// a sync, and each partition's commits only move forward; batches are
/// written two at a time, but no write of a poll puts samples before all
/// its frames. An undecodable
/// record and one the store refuses for good, in later polls, are set
/// aside while the records around them are stored.
#[actix_rt::test]
async fn overlapping_polls_commit_in_order_after_their_sync() {
    const RECORDS: usize = 600;
    let dir = tempfile::tempdir().unwrap();
    let inner = Arc::new(EmbeddedBus::open(&dir.path().join("bus"), 2).unwrap());
    let scope = Scope::new("acme", "web").unwrap();
    let bus_key = BusKey::new(common::TEST_BUS_KEY).unwrap();
    let header = EnvelopeHeader {
        scope: scope.clone(),
        received_at_ns: T0,
    };
    // The whole backlog first: polls of 256, 256 and 88 records.
    let mut ends = [0u64; 2];
    for i in 0..RECORDS {
        let payload = match i {
            300 => b"not an envelope".to_vec(),
            450 => header.wrap(&batch("poison", POISON_NS, 1), &bus_key),
            _ => header.wrap(&batch("main", T0 + 1000 + i as i64, 1), &bus_key),
        };
        let key = header.bus_key(&format!("host-{}", i % 7));
        let p = inner.publish(&key, payload).await.unwrap();
        ends[p.partition as usize] = p.offset + 1;
    }

    let log = Arc::new(Log::default());
    let store = Arc::new(EmbeddedProfileStore::open(&dir.path().join("profiles")).unwrap());
    let faulty = Arc::new(Faulty {
        inner: store.clone(),
        transient: AtomicUsize::new(2),
        refused: AtomicUsize::new(0),
        log: log.clone(),
    });
    let objects = Arc::new(LocalObjectStore::open(&dir.path().join("objects")).unwrap());
    let symbolizer = Symbolizer::spawn(objects.clone(), SymbolizerConfig::default());
    let metrics = Metrics::new(ServerRole::Worker);
    let bus = Arc::new(Recording {
        inner,
        log: log.clone(),
    });
    let config = PipelineConfig {
        depth: 2,
        decoders: 2,
        writes: 2,
        // Polls as they come, so that they overlap.
        linger: std::time::Duration::ZERO,
    };
    let progress = kiln_actors::ingest::start_with(
        bus,
        faulty,
        objects.clone(),
        symbolizer,
        bus_key,
        metrics.worker().clone(),
        config,
    )
    .await
    .unwrap();
    for (partition, end) in ends.into_iter().enumerate() {
        let committed = progress
            .wait_committed(partition as u32, end - 1, Duration::from_secs(60))
            .await;
        assert!(committed, "partition {partition} not committed");
    }

    let events = log.events();
    // The second poll was taken before the first was stored: they overlapped.
    assert_eq!(
        events[..2],
        [Event::Polled(256), Event::Polled(256)],
        "{events:?}"
    );
    let first_sync = events.iter().position(|e| *e == Event::Synced).unwrap();
    let failed = events[..first_sync]
        .iter()
        .filter(|e| **e == Event::WriteFailed)
        .count();
    assert_eq!(failed, 2, "the first poll's write is retried: {events:?}");
    let mut last = [0u64; 2];
    for (i, event) in events.iter().enumerate() {
        let Event::Committed(partition, next) = *event else {
            continue;
        };
        assert!(i > first_sync, "a commit before the first sync: {events:?}");
        assert!(
            matches!(events[i - 1], Event::Synced | Event::Committed(..)),
            "a commit that does not follow a sync: {events:?}"
        );
        assert!(
            next > last[partition as usize],
            "a commit went back: {events:?}"
        );
        last[partition as usize] = next;
    }
    assert_eq!(last, ends);
    let mut samples_written = false;
    for event in &events {
        match event {
            Event::Synced | Event::WriteFailed => samples_written = false,
            Event::Samples => samples_written = true,
            Event::Frames => assert!(!samples_written, "frames after samples: {events:?}"),
            _ => {}
        }
    }

    // All but the two set aside are stored, once each.
    let rows = store.scan_samples(&scope, 0, i64::MAX).await.unwrap();
    let stored: u64 = rows.iter().map(|r| r.count).sum();
    assert_eq!(stored, RECORDS as u64 - 2);
    assert_eq!(progress.dead_letters(), 2);
    let kept = objects.list("dead-letters/").await.unwrap();
    assert_eq!(kept.len(), 2, "the undecodable record: {kept:?}");
    let kept = objects.list("tenants/acme/dead-letters/").await.unwrap();
    assert_eq!(kept.len(), 2, "the refused record: {kept:?}");
    // The stage timings are still kept, once per poll.
    let text = metrics.scrape(true).await.unwrap();
    for stage in ["decode", "dedup", "symbolize", "write", "commit"] {
        let line = format!("kiln_worker_stage_seconds_count{{stage=\"{stage}\"}} 3");
        assert!(text.contains(&line), "{line} in {text}");
    }
}
