//! The sealing suite: a [`SealedStore`] over any row store and object
//! store answers every read the same before and after its hours are
//! sealed, and late writes, overlapping segments, retention and damage
//! behave as `crate::sealed` says.

use kiln_model::{LabelSetId, NANOS_PER_HOUR, StackId};

use super::{Check, Names, ensure, ensure_eq, run_checks};
use crate::profile::{ProfileStore, StoredSample};
use crate::scope::Scope;
use crate::sealed::{SealedStore, segment_key};
use crate::segment;

/// Runs every sealing check against `store`, then panics listing the
/// failures, if any.
pub async fn sealed_store(store: &SealedStore) {
    run_checks!(
        "SealedStore",
        store,
        [
            sealing_keeps_every_sample,
            a_sealed_hour_is_sealed_once,
            late_writes_to_a_sealed_hour_are_read_and_sealed_again,
            overlapping_segments_count_once_and_merge,
            retention_deletes_segments_too,
            a_damaged_segment_is_an_error_naming_it,
            segments_are_per_scope,
        ]
    );
}

const H: i64 = NANOS_PER_HOUR;
/// The start of an hour in 2023.
const K: i64 = 1_700_000_000_000_000_000 / H * H;

fn sample(timestamp_ns: i64, stack: u128, labels: u128, count: u64) -> StoredSample {
    StoredSample {
        timestamp_ns,
        stack: StackId(stack),
        labels: LabelSetId(labels),
        count,
        period_ns: 52_631_578,
    }
}

fn sorted(mut samples: Vec<StoredSample>) -> Vec<StoredSample> {
    samples.sort_by_key(|s| (s.timestamp_ns, s.stack, s.labels));
    samples
}

/// Three hours of a few hundred samples: a batch's shape (many stacks and
/// label sets at a few timestamps).
fn three_hours() -> Vec<StoredSample> {
    (0..3)
        .flat_map(|h| {
            (0..300).map(move |i| {
                let ts = K + h * H + (i % 7) * 5_000_000_000;
                sample(ts, (i % 53) as u128, (i % 4) as u128, 1 + i as u64 % 9)
            })
        })
        .collect()
}

async fn expect_same_reads(
    store: &SealedStore,
    scope: &Scope,
    expected: &[StoredSample],
    when: &str,
) -> Check {
    for (from, to) in [
        (K, K + 3 * H),
        (K + H, K + 2 * H),
        (K + H - 1, K + H + 5_000_000_001),
    ] {
        let want: Vec<_> = expected
            .iter()
            .copied()
            .filter(|s| (from..to).contains(&s.timestamp_ns))
            .collect();
        let got = sorted(store.scan_samples(scope, from, to).await?);
        ensure_eq!(got, sorted(want), "{when}: scan of [{from}, {to})");
    }
    let hours = store.sample_hours(scope, K - H, K + 4 * H).await?;
    ensure_eq!(
        hours,
        vec![K / H, K / H + 1, K / H + 2],
        "{when}: sample hours"
    );
    Ok(())
}

async fn sealing_keeps_every_sample(store: &SealedStore, names: &Names) -> Check {
    let scope = names.scope("a", "p");
    let samples = three_hours();
    store.put_samples(&scope, &samples).await?;
    let versions = store.hour_versions(&scope, K, K + 3 * H).await?;
    expect_same_reads(store, &scope, &samples, "before sealing").await?;
    ensure_eq!(
        store.unsealed_hours(&scope, K + 2 * H).await?,
        vec![K / H, K / H + 1],
        "hours before the hour of K + 2h with rows"
    );
    for hour in [K / H, K / H + 1] {
        let sealed = store.seal_hour(&scope, hour).await?;
        ensure_eq!(sealed.rows, 300, "rows moved from hour {hour}");
        ensure!(sealed.samples > 0 && sealed.samples <= 300, "{sealed:?}");
        ensure!(sealed.bytes > 0, "an empty segment: {sealed:?}");
    }
    expect_same_reads(store, &scope, &samples, "after sealing two hours").await?;
    ensure_eq!(
        store.hour_versions(&scope, K, K + 3 * H).await?,
        versions,
        "sealing moved data, so no hour's version may change"
    );
    ensure_eq!(
        store.unsealed_hours(&scope, K + 2 * H).await?,
        Vec::<i64>::new(),
        "after sealing"
    );
    Ok(())
}

async fn a_sealed_hour_is_sealed_once(store: &SealedStore, names: &Names) -> Check {
    let scope = names.scope("a", "p");
    store.put_samples(&scope, &three_hours()).await?;
    ensure!(
        !store.seal_hour(&scope, K / H).await?.is_empty(),
        "first seal did nothing"
    );
    let again = store.seal_hour(&scope, K / H).await?;
    ensure!(again.is_empty(), "a sealed hour sealed again: {again:?}");
    let empty = store.seal_hour(&scope, K / H - 7).await?;
    ensure!(empty.is_empty(), "an hour without data sealed: {empty:?}");
    Ok(())
}

async fn late_writes_to_a_sealed_hour_are_read_and_sealed_again(
    store: &SealedStore,
    names: &Names,
) -> Check {
    let scope = names.scope("a", "p");
    let mut samples = three_hours();
    store.put_samples(&scope, &samples).await?;
    store.seal_hour(&scope, K / H).await?;
    // An agent's spool after an outage, and a replay of a sealed batch.
    let late = sample(K + 17, 999, 1, 5);
    let replay: Vec<_> = samples[..50].to_vec();
    store.put_samples(&scope, &[late]).await?;
    store.put_samples(&scope, &replay).await?;
    samples.push(late);
    expect_same_reads(store, &scope, &samples, "after late writes").await?;
    ensure_eq!(
        store.unsealed_hours(&scope, K + H).await?,
        vec![K / H],
        "the sealed hour written again"
    );
    let resealed = store.seal_hour(&scope, K / H).await?;
    ensure_eq!(resealed.merged, 1, "the old segment merged: {resealed:?}");
    expect_same_reads(store, &scope, &samples, "after sealing again").await
}

async fn overlapping_segments_count_once_and_merge(store: &SealedStore, names: &Names) -> Check {
    let scope = names.scope("a", "p");
    let samples = three_hours();
    store.put_samples(&scope, &samples).await?;
    store.seal_hour(&scope, K / H).await?;
    // Another node sealed the same hour having read part of it: a second
    // segment, overlapping the first.
    let part: Vec<_> = samples[..120].to_vec();
    let (bytes, _) = segment::encode(K / H, &part);
    let key = segment_key(&scope, K / H, &bytes)?;
    store.objects().put(&key, bytes.into()).await?;
    expect_same_reads(store, &scope, &samples, "with two overlapping segments").await?;
    ensure_eq!(
        store.unsealed_hours(&scope, K + H).await?,
        vec![K / H],
        "an hour of two segments"
    );
    // The merge holds what the first segment held: it is the first
    // segment again (same bytes, same name), and the part goes.
    let merged = store.seal_hour(&scope, K / H).await?;
    ensure_eq!((merged.rows, merged.merged), (0, 1), "{merged:?}");
    ensure!(
        !store.objects().exists(&key).await?,
        "a merged segment is still there"
    );
    ensure_eq!(store.segment_bytes(&scope).await?.1, 1, "segments left");
    expect_same_reads(store, &scope, &samples, "after merging").await
}

async fn retention_deletes_segments_too(store: &SealedStore, names: &Names) -> Check {
    let scope = names.scope("a", "p");
    let samples = three_hours();
    store.put_samples(&scope, &samples).await?;
    store.seal_hour(&scope, K / H).await?;
    store.seal_hour(&scope, K / H + 1).await?;
    let deleted = store.delete_hours_before(&scope, K + 2 * H).await?;
    ensure_eq!(
        deleted.sample_hours,
        2,
        "hours deleted, sealed ones included"
    );
    let left: Vec<_> = samples
        .into_iter()
        .filter(|s| s.timestamp_ns >= K + 2 * H)
        .collect();
    let got = sorted(store.scan_samples(&scope, K - H, K + 4 * H).await?);
    ensure_eq!(got, sorted(left), "samples left after retention");
    ensure_eq!(store.segment_bytes(&scope).await?.1, 0, "segments left");
    Ok(())
}

async fn a_damaged_segment_is_an_error_naming_it(store: &SealedStore, names: &Names) -> Check {
    let scope = names.scope("a", "p");
    store.put_samples(&scope, &three_hours()).await?;
    let bytes = b"KSEG not a zstd frame".to_vec();
    let key = segment_key(&scope, K / H, &bytes)?;
    store.objects().put(&key, bytes.into()).await?;
    match store.scan_samples(&scope, K, K + H).await {
        Ok(got) => Err(super::Failure(format!(
            "a damaged segment read as {} samples",
            got.len()
        ))),
        Err(e) => {
            ensure!(
                e.to_string().contains(key.as_str()),
                "the error does not name {key}: {e}"
            );
            Ok(())
        }
    }
}

async fn segments_are_per_scope(store: &SealedStore, names: &Names) -> Check {
    let a = names.scope("a", "p");
    let b = names.scope("b", "p");
    let other_project = names.scope("a", "q");
    let samples = three_hours();
    store.put_samples(&a, &samples).await?;
    store.seal_hour(&a, K / H).await?;
    for scope in [&b, &other_project] {
        ensure!(
            store
                .scan_samples(scope, K - H, K + 4 * H)
                .await?
                .is_empty(),
            "{scope} reads {a}'s sealed samples"
        );
        ensure!(
            store
                .sample_hours(scope, K - H, K + 4 * H)
                .await?
                .is_empty(),
            "{scope} lists {a}'s sealed hours"
        );
    }
    Ok(())
}
