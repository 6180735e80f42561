//! The `ProfileStore` conformance suite.

use kiln_model::{
    Executable, FileId, Frame, FrameId, FrameKind, LabelSet, LabelSetEntry, LabelSetId,
    NANOS_PER_HOUR, StackEntry, StackId, Symbol, stack_id,
};

use super::metrics::{
    invalid_metric_points_are_refused, many_metric_points_come_back_exactly, metric_hours_index,
    metric_names_by_hour, metric_points_round_trip, metric_rewrite_replaces_not_adds,
    metric_scan_bounds_are_exact, metrics_are_isolated, series_keep_their_label_sets,
};
use super::retention::{
    retention_deletes_whole_hours_before, stored_bytes_follow_writes_and_retention,
};
use super::rollups::{
    day_rollups_are_apart_from_hours, hour_versions_grow_with_every_write,
    rollups_go_stale_and_follow_retention, rollups_round_trip_and_replace,
};
use super::{Check, Failure, Names, ensure, ensure_eq, run_checks};
use crate::profile::{ProfileStore, StoredFrame, StoredSample};
use crate::scope::Scope;

/// Runs every `ProfileStore` check against `store`; panics naming each
/// check that failed.
///
/// Covers round trips of every table, missing ids, replace-not-add of
/// samples, exact scan bounds (across hours, negative and extreme
/// timestamps), frame symbols, tenant and project isolation, empty inputs and a 50 000-row
/// scan, the index of hours that hold samples (`sample_hours`); and the
/// same for metric points (`metrics.rs`): exact values per name and
/// series, replace-not-add, scan bounds, the names index per hour, the
/// hours of each metric, isolation, refusal of invalid points, a
/// 90 000-point scan; and retention (`retention.rs`): whole hours before a
/// cutoff deleted with their indexes, in one scope only, and stored bytes
/// per tenant that follow writes and deletes exactly; and rollups
/// (`rollups.rs`): hour versions that grow with every write, rollups that
/// round-trip, replace earlier ones, go stale after a late write and
/// leave with their hour.
pub async fn profile_store(store: &dyn ProfileStore) {
    run_checks!(
        "ProfileStore",
        store,
        [
            metric_points_round_trip,
            metric_rewrite_replaces_not_adds,
            series_keep_their_label_sets,
            metric_scan_bounds_are_exact,
            metric_names_by_hour,
            metric_hours_index,
            metrics_are_isolated,
            invalid_metric_points_are_refused,
            many_metric_points_come_back_exactly,
            frames_round_trip,
            frame_symbols_are_replaced_on_rewrite,
            stacks_round_trip,
            label_sets_round_trip,
            executables_round_trip_and_replace,
            missing_ids_give_none_in_order,
            empty_inputs,
            sample_values_round_trip,
            sample_rewrite_replaces_not_adds,
            deleting_sealed_samples_keeps_later_writes,
            samples_differing_in_any_key_part_are_distinct,
            scan_bounds_are_exact,
            scan_across_hour_boundaries,
            negative_and_extreme_timestamps,
            tenants_are_isolated,
            projects_are_isolated,
            sample_hours_index,
            sample_hours_of_extreme_timestamps,
            sample_hours_are_per_scope,
            many_samples_come_back_exactly,
            sync_after_writes,
            retention_deletes_whole_hours_before,
            stored_bytes_follow_writes_and_retention,
            hour_versions_grow_with_every_write,
            rollups_round_trip_and_replace,
            rollups_go_stale_and_follow_retention,
            day_rollups_are_apart_from_hours,
        ]
    );
}

const H: i64 = NANOS_PER_HOUR;
/// 2023-11-14T22:13:20Z, a timestamp in the middle of an hour.
const T: i64 = 1_700_000_000_000_000_000;

fn sample(timestamp_ns: i64, stack: u128, labels: u128, count: u64) -> StoredSample {
    StoredSample {
        timestamp_ns,
        stack: StackId(stack),
        labels: LabelSetId(labels),
        count,
        period_ns: 10_101_010,
    }
}

fn sorted(mut samples: Vec<StoredSample>) -> Vec<StoredSample> {
    samples.sort_by_key(|s| (s.timestamp_ns, s.stack, s.labels));
    samples
}

/// Scans and compares, order aside.
async fn expect_scan(
    store: &dyn ProfileStore,
    scope: &Scope,
    (from, to): (i64, i64),
    expected: &[StoredSample],
) -> Check {
    let got = sorted(store.scan_samples(scope, from, to).await?);
    ensure_eq!(
        got,
        sorted(expected.to_vec()),
        "scan of {scope} over [{from}, {to})"
    );
    Ok(())
}

/// An inline chain of two levels, outermost first, with odd text.
fn symbols() -> Vec<Symbol> {
    vec![
        Symbol {
            function: "std::vector<int>::push_back(int const&) ∑".into(),
            file: Some("/usr/include/c++/12/bits/stl_vector.h".into()),
            line: u32::MAX,
        },
        Symbol {
            function: String::new(),
            file: None,
            line: 0,
        },
    ]
}

/// Frames of every shape; the first is written with its symbols.
fn frame_entries() -> Vec<StoredFrame> {
    let frames = [
        Frame::Address {
            kind: FrameKind::Native,
            file_id: FileId(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef),
            addr: 0x40_1a2b,
        },
        Frame::Address {
            kind: FrameKind::Kernel,
            file_id: FileId(u128::MAX),
            addr: u64::MAX,
        },
        Frame::named(FrameKind::Idle, ""),
        Frame::Named {
            kind: FrameKind::Python,
            function: "Handler.handle_request".into(),
            module: Some("app".into()),
            file: Some("/srv/app/handlers.py".into()),
            line: u32::MAX,
        },
        Frame::Named {
            kind: FrameKind::GpuKernel,
            function: "void gemm<float>(float const*, float*) ∑ 名前".into(),
            module: None,
            file: Some(String::new()),
            line: 7,
        },
    ];
    frames
        .into_iter()
        .enumerate()
        .map(|(i, frame)| StoredFrame {
            id: frame.id(),
            frame,
            symbols: if i == 0 { symbols() } else { Vec::new() },
        })
        .collect()
}

fn stack_entry(frames: Vec<FrameId>) -> StackEntry {
    StackEntry {
        id: stack_id(&frames),
        frames,
    }
}

fn label_set_entry(labels: LabelSet) -> LabelSetEntry {
    LabelSetEntry {
        id: labels.id(),
        labels,
    }
}

async fn frames_round_trip(store: &dyn ProfileStore, names: &Names) -> Check {
    let tenant = names.tenant("a");
    let entries = frame_entries();
    store.put_frames(&tenant, &entries).await?;
    // Content-addressed rows are written again on replay; that must be
    // harmless.
    store.put_frames(&tenant, &entries).await?;
    let ids: Vec<FrameId> = entries.iter().map(|e| e.id).collect();
    let got = store.get_frames(&tenant, &ids).await?;
    let expected: Vec<Option<StoredFrame>> = entries.into_iter().map(Some).collect();
    ensure_eq!(got, expected, "frames read back");
    Ok(())
}

/// A frame written unsymbolized and again with symbols (symbols arrived
/// in between), or the other way round: the last write holds.
async fn frame_symbols_are_replaced_on_rewrite(store: &dyn ProfileStore, names: &Names) -> Check {
    let tenant = names.tenant("a");
    let symbolized = frame_entries().swap_remove(0);
    let plain = StoredFrame {
        symbols: Vec::new(),
        ..symbolized.clone()
    };
    for (first, second) in [(&plain, &symbolized), (&symbolized, &plain)] {
        store
            .put_frames(&tenant, std::slice::from_ref(first))
            .await?;
        store
            .put_frames(&tenant, std::slice::from_ref(second))
            .await?;
        ensure_eq!(
            store.get_frames(&tenant, &[second.id]).await?,
            vec![Some(second.clone())],
            "frame after a rewrite with {} symbols",
            second.symbols.len()
        );
    }
    Ok(())
}

async fn stacks_round_trip(store: &dyn ProfileStore, names: &Names) -> Check {
    let tenant = names.tenant("a");
    let entries = vec![
        stack_entry(vec![]),
        stack_entry(vec![FrameId(1)]),
        stack_entry(vec![FrameId(0), FrameId(u128::MAX), FrameId(0)]),
        stack_entry((0..1000u128).map(|i| FrameId(i * 0x1_0000_0001)).collect()),
    ];
    store.put_stacks(&tenant, &entries).await?;
    let ids: Vec<StackId> = entries.iter().map(|e| e.id).collect();
    let got = store.get_stacks(&tenant, &ids).await?;
    let expected: Vec<_> = entries.into_iter().map(|e| Some(e.frames)).collect();
    ensure_eq!(got, expected, "stacks read back");
    Ok(())
}

async fn label_sets_round_trip(store: &dyn ProfileStore, names: &Names) -> Check {
    let tenant = names.tenant("a");
    let many: LabelSet = (0..100)
        .map(|i| (format!("k{i:03}"), "v".repeat(i)))
        .collect();
    let entries = vec![
        label_set_entry(LabelSet::new()),
        label_set_entry(LabelSet::new().with("host", "web-1").with("pid", "4242")),
        label_set_entry(LabelSet::new().with("", "").with("thread", "wörker ∞")),
        label_set_entry(many),
    ];
    store.put_label_sets(&tenant, &entries).await?;
    let ids: Vec<LabelSetId> = entries.iter().map(|e| e.id).collect();
    let got = store.get_label_sets(&tenant, &ids).await?;
    let expected: Vec<_> = entries.into_iter().map(|e| Some(e.labels)).collect();
    ensure_eq!(got, expected, "label sets read back");
    Ok(())
}

async fn executables_round_trip_and_replace(store: &dyn ProfileStore, names: &Names) -> Check {
    let tenant = names.tenant("a");
    let libc = Executable {
        file_id: FileId(0xabcd),
        name: "libc.so.6".into(),
        build_id: Some("0123456789abcdef0123456789abcdef01234567".into()),
    };
    let app = Executable {
        file_id: FileId(u128::MAX),
        name: "app".into(),
        build_id: None,
    };
    store
        .put_executables(&tenant, &[libc.clone(), app.clone()])
        .await?;
    let got = store
        .get_executables(&tenant, &[app.file_id, libc.file_id])
        .await?;
    ensure_eq!(
        got,
        vec![Some(app.clone()), Some(libc)],
        "executables read back"
    );

    // Executables are keyed by file id alone: a later write replaces.
    let renamed = Executable {
        name: "app-renamed".into(),
        build_id: Some("ff".into()),
        ..app
    };
    store
        .put_executables(&tenant, std::slice::from_ref(&renamed))
        .await?;
    let got = store.get_executables(&tenant, &[renamed.file_id]).await?;
    ensure_eq!(got, vec![Some(renamed)], "executable after a second write");
    Ok(())
}

async fn missing_ids_give_none_in_order(store: &dyn ProfileStore, names: &Names) -> Check {
    let tenant = names.tenant("a");
    let entries = frame_entries();
    let (a, b) = (&entries[0], &entries[3]);
    store.put_frames(&tenant, &[a.clone(), b.clone()]).await?;
    let missing = FrameId(0x5eed);
    let got = store
        .get_frames(&tenant, &[missing, a.id, missing, b.id, a.id])
        .await?;
    let expected = vec![
        None,
        Some(a.clone()),
        None,
        Some(b.clone()),
        Some(a.clone()),
    ];
    ensure_eq!(got, expected, "frames with missing and repeated ids");

    let stack = stack_entry(vec![a.id]);
    store
        .put_stacks(&tenant, std::slice::from_ref(&stack))
        .await?;
    let got = store
        .get_stacks(&tenant, &[StackId(1), stack.id, StackId(2)])
        .await?;
    ensure_eq!(
        got,
        vec![None, Some(stack.frames), None],
        "stacks with missing ids"
    );

    let set = label_set_entry(LabelSet::new().with("host", "h"));
    store
        .put_label_sets(&tenant, std::slice::from_ref(&set))
        .await?;
    let got = store
        .get_label_sets(&tenant, &[set.id, LabelSetId(1)])
        .await?;
    ensure_eq!(
        got,
        vec![Some(set.labels), None],
        "label sets with missing ids"
    );

    let got = store
        .get_executables(&tenant, &[FileId(1), FileId(2)])
        .await?;
    ensure_eq!(got, vec![None, None], "executables never written");
    Ok(())
}

async fn empty_inputs(store: &dyn ProfileStore, names: &Names) -> Check {
    let tenant = names.tenant("a");
    let scope = names.scope("a", "p");
    store.put_frames(&tenant, &[]).await?;
    store.put_stacks(&tenant, &[]).await?;
    store.put_label_sets(&tenant, &[]).await?;
    store.put_executables(&tenant, &[]).await?;
    store.put_samples(&scope, &[]).await?;
    ensure!(
        store.get_frames(&tenant, &[]).await?.is_empty(),
        "get_frames of no ids is not empty"
    );
    ensure!(
        store.get_stacks(&tenant, &[]).await?.is_empty(),
        "get_stacks of no ids is not empty"
    );
    ensure!(
        store.get_label_sets(&tenant, &[]).await?.is_empty(),
        "get_label_sets of no ids is not empty"
    );
    ensure!(
        store.get_executables(&tenant, &[]).await?.is_empty(),
        "get_executables of no ids is not empty"
    );
    expect_scan(store, &scope, (i64::MIN, i64::MAX), &[]).await
}

async fn sample_values_round_trip(store: &dyn ProfileStore, names: &Names) -> Check {
    let scope = names.scope("a", "p");
    let samples = [
        StoredSample {
            count: 0,
            period_ns: 0,
            ..sample(T, 1, 1, 0)
        },
        StoredSample {
            count: u64::MAX,
            period_ns: u64::MAX,
            ..sample(T, 2, 1, 0)
        },
        StoredSample {
            count: 1,
            period_ns: 1_000_000,
            ..sample(T + 1, u128::MAX, u128::MAX, 0)
        },
    ];
    store.put_samples(&scope, &samples).await?;
    expect_scan(store, &scope, (T, T + 2), &samples).await
}

async fn sample_rewrite_replaces_not_adds(store: &dyn ProfileStore, names: &Names) -> Check {
    let scope = names.scope("a", "p");
    let first = sample(T, 1, 2, 5);
    let second = StoredSample {
        count: 7,
        period_ns: 1_000,
        ..first
    };
    store.put_samples(&scope, &[first]).await?;
    store.put_samples(&scope, &[second]).await?;
    expect_scan(store, &scope, (T, T + 1), &[second]).await?;

    // Replaying a whole batch leaves it as it was.
    let batch: Vec<_> = (0..10).map(|i| sample(T + 100 + i, 3, 4, 1)).collect();
    store.put_samples(&scope, &batch).await?;
    store.put_samples(&scope, &batch).await?;
    expect_scan(store, &scope, (T + 100, T + 200), &batch).await
}

async fn deleting_sealed_samples_keeps_later_writes(
    store: &dyn ProfileStore,
    names: &Names,
) -> Check {
    let scope = names.scope("a", "p");
    let other = names.scope("b", "p");
    let k = T.div_euclid(H) * H;
    let sealed: Vec<_> = (0..40)
        .map(|i| sample(k + (i % 2) * H + i, i as u128 % 7, 1, 2))
        .collect();
    store.put_samples(&scope, &sealed).await?;
    store.put_samples(&other, &sealed).await?;
    let read_at = kiln_model::now_ns();
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    // Written after the scan a seal made: a late batch in both hours, and
    // one sealed row written again.
    let late = [sample(k + 100, 1, 9, 3), sample(k + H + 100, 2, 9, 4)];
    let again = StoredSample {
        count: 7,
        ..sealed[0]
    };
    store.put_samples(&scope, &late).await?;
    store.put_samples(&scope, &[again]).await?;
    let versions = store.hour_versions(&scope, k, k + 2 * H).await?;
    let given = store
        .delete_sealed_samples(&scope, &sealed, read_at)
        .await?;
    ensure_eq!(given, 40, "samples given back");
    let left = sorted(store.scan_samples(&scope, k, k + 2 * H).await?);
    for s in &late {
        ensure!(
            left.contains(s),
            "a later write was deleted: {s:?}; left: {left:?}"
        );
    }
    let others: Vec<_> = left
        .iter()
        .filter(|s| !late.contains(s) && **s != again)
        .collect();
    ensure!(others.is_empty(), "sealed rows left: {others:?}");
    expect_scan(store, &other, (k, k + 2 * H), &sealed).await?;
    ensure_eq!(
        store.hour_versions(&scope, k, k + 2 * H).await?,
        versions,
        "deleting sealed rows moves data out; it changes no hour's version"
    );
    ensure_eq!(
        store.delete_sealed_samples(&scope, &[], read_at).await?,
        0,
        "nothing to delete"
    );
    Ok(())
}

async fn samples_differing_in_any_key_part_are_distinct(
    store: &dyn ProfileStore,
    names: &Names,
) -> Check {
    let scope = names.scope("a", "p");
    let samples = [
        sample(T, 1, 1, 1),
        sample(T, 2, 1, 2),
        sample(T, 1, 2, 3),
        sample(T + 1, 1, 1, 4),
    ];
    store.put_samples(&scope, &samples).await?;
    expect_scan(store, &scope, (T, T + 2), &samples).await
}

async fn scan_bounds_are_exact(store: &dyn ProfileStore, names: &Names) -> Check {
    let scope = names.scope("a", "p");
    let s: Vec<_> = (-1..=2).map(|d| sample(T + d, 1, 1, 1)).collect();
    store.put_samples(&scope, &s).await?;
    // s[0] = T-1, s[1] = T, s[2] = T+1, s[3] = T+2.
    expect_scan(store, &scope, (T, T + 1), &s[1..2]).await?;
    expect_scan(store, &scope, (T - 1, T + 2), &s[0..3]).await?;
    expect_scan(store, &scope, (T - 1, T + 3), &s).await?;
    expect_scan(store, &scope, (T + 2, T + 3), &s[3..]).await?;
    expect_scan(store, &scope, (T, T), &[]).await?;
    expect_scan(store, &scope, (T + 2, T), &[]).await?;
    expect_scan(store, &scope, (T + 3, T + 100), &[]).await?;
    expect_scan(store, &scope, (i64::MIN, T - 1), &[]).await
}

async fn scan_across_hour_boundaries(store: &dyn ProfileStore, names: &Names) -> Check {
    let scope = names.scope("a", "p");
    let k = T.div_euclid(H) * H;
    let times = [k - 1, k, k + 1, k + H - 1, k + H, k + 2 * H + 5, k + 5 * H];
    let s: Vec<_> = times.iter().map(|&t| sample(t, 1, 1, 1)).collect();
    store.put_samples(&scope, &s).await?;
    expect_scan(store, &scope, (k, k + H), &s[1..4]).await?;
    expect_scan(store, &scope, (k - 1, k + 2 * H + 6), &s[0..6]).await?;
    expect_scan(store, &scope, (k + H - 1, k + H + 1), &s[3..5]).await?;
    expect_scan(store, &scope, (k + H + 1, k + 5 * H), &s[5..6]).await?;
    expect_scan(store, &scope, (k - 10 * H, k + 10 * H), &s).await?;
    expect_scan(store, &scope, (k + 3 * H, k + 4 * H), &[]).await
}

async fn negative_and_extreme_timestamps(store: &dyn ProfileStore, names: &Names) -> Check {
    let scope = names.scope("a", "p");
    let times = [
        i64::MIN,
        i64::MIN + 1,
        -H - 1,
        -H,
        -1,
        0,
        1,
        i64::MAX - 1,
        i64::MAX,
    ];
    let s: Vec<_> = times.iter().map(|&t| sample(t, 9, 9, 1)).collect();
    store.put_samples(&scope, &s).await?;
    // `to` is exclusive, so no scan returns a row at i64::MAX.
    expect_scan(store, &scope, (i64::MIN, i64::MAX), &s[..8]).await?;
    expect_scan(store, &scope, (i64::MIN, i64::MIN + 1), &s[0..1]).await?;
    expect_scan(store, &scope, (-H, 0), &s[3..5]).await?;
    expect_scan(store, &scope, (-1, 1), &s[4..6]).await?;
    expect_scan(store, &scope, (-H - 1, -H), &s[2..3]).await?;
    expect_scan(store, &scope, (i64::MAX - 1, i64::MAX), &s[7..8]).await?;
    expect_scan(store, &scope, (i64::MIN + 2, -H - 1), &[]).await
}

async fn tenants_are_isolated(store: &dyn ProfileStore, names: &Names) -> Check {
    // "a" is a prefix of "ab"; "b" sorts after both.
    let tenants = [names.tenant("a"), names.tenant("ab"), names.tenant("b")];
    // The same ids with different content in each tenant: a store that
    // ignored the tenant would return another tenant's value.
    let frame_id = FrameId(0xf00);
    let stack_id_ = StackId(0x57ac);
    let labels_id = LabelSetId(0x1abe1);
    let file_id = FileId(0xf11e);
    for (i, tenant) in tenants.iter().enumerate() {
        let scope = Scope::new(tenant.as_str(), "p").map_err(Failure::from)?;
        store
            .put_frames(
                tenant,
                &[StoredFrame {
                    id: frame_id,
                    frame: Frame::named(FrameKind::Native, tenant.as_str()),
                    symbols: Vec::new(),
                }],
            )
            .await?;
        store
            .put_stacks(
                tenant,
                &[StackEntry {
                    id: stack_id_,
                    frames: vec![FrameId(i as u128)],
                }],
            )
            .await?;
        store
            .put_label_sets(
                tenant,
                &[LabelSetEntry {
                    id: labels_id,
                    labels: LabelSet::new().with("tenant", tenant.as_str()),
                }],
            )
            .await?;
        store
            .put_executables(
                tenant,
                &[Executable {
                    file_id,
                    name: tenant.clone(),
                    build_id: None,
                }],
            )
            .await?;
        store
            .put_samples(&scope, &[sample(T, 1, 1, i as u64 + 1)])
            .await?;
    }
    for (i, tenant) in tenants.iter().enumerate() {
        let scope = Scope::new(tenant.as_str(), "p").map_err(Failure::from)?;
        ensure_eq!(
            store.get_frames(tenant, &[frame_id]).await?,
            vec![Some(StoredFrame {
                id: frame_id,
                frame: Frame::named(FrameKind::Native, tenant.as_str()),
                symbols: Vec::new(),
            })],
            "frame of tenant {tenant}"
        );
        ensure_eq!(
            store.get_stacks(tenant, &[stack_id_]).await?,
            vec![Some(vec![FrameId(i as u128)])],
            "stack of tenant {tenant}"
        );
        ensure_eq!(
            store.get_label_sets(tenant, &[labels_id]).await?,
            vec![Some(LabelSet::new().with("tenant", tenant.as_str()))],
            "label set of tenant {tenant}"
        );
        ensure_eq!(
            store.get_executables(tenant, &[file_id]).await?,
            vec![Some(Executable {
                file_id,
                name: tenant.clone(),
                build_id: None,
            })],
            "executable of tenant {tenant}"
        );
        expect_scan(
            store,
            &scope,
            (i64::MIN, i64::MAX),
            &[sample(T, 1, 1, i as u64 + 1)],
        )
        .await?;
    }
    // A tenant that wrote nothing sees nothing.
    let other = names.tenant("c");
    ensure_eq!(
        store.get_frames(&other, &[frame_id]).await?,
        vec![None],
        "frame of a tenant that wrote none"
    );
    ensure_eq!(
        store.get_stacks(&other, &[stack_id_]).await?,
        vec![None],
        "stack of a tenant that wrote none"
    );
    ensure_eq!(
        store.get_label_sets(&other, &[labels_id]).await?,
        vec![None],
        "label set of a tenant that wrote none"
    );
    ensure_eq!(
        store.get_executables(&other, &[file_id]).await?,
        vec![None],
        "executable of a tenant that wrote none"
    );
    expect_scan(store, &names.scope("c", "p"), (i64::MIN, i64::MAX), &[]).await
}

async fn projects_are_isolated(store: &dyn ProfileStore, names: &Names) -> Check {
    // Tenants "<base>-a" with project "bp" and "<base>-ab" with project "p"
    // concatenate to the same text: a key layout without separators or
    // lengths would mix them up.
    let scopes = [
        names.scope("a", "p"),
        names.scope("a", "pb"),
        names.scope("a", "q"),
        names.scope("a", "bp"),
        names.scope("ab", "p"),
    ];
    for (i, scope) in scopes.iter().enumerate() {
        store
            .put_samples(scope, &[sample(T, 1, 1, i as u64 + 1)])
            .await?;
    }
    for (i, scope) in scopes.iter().enumerate() {
        expect_scan(
            store,
            scope,
            (i64::MIN, i64::MAX),
            &[sample(T, 1, 1, i as u64 + 1)],
        )
        .await?;
    }
    expect_scan(store, &names.scope("a", "r"), (i64::MIN, i64::MAX), &[]).await
}

/// Asks `sample_hours` and compares.
async fn expect_hours(
    store: &dyn ProfileStore,
    scope: &Scope,
    (from, to): (i64, i64),
    expected: &[i64],
) -> Check {
    let got = store.sample_hours(scope, from, to).await?;
    ensure_eq!(
        got,
        expected.to_vec(),
        "hours holding samples of {scope} over [{from}, {to})"
    );
    Ok(())
}

/// The index the query path asks before it scans: exactly the hours that
/// hold samples, sorted and once each, an edge hour whenever it holds
/// samples (even outside the range), and nothing when the range is empty.
async fn sample_hours_index(store: &dyn ProfileStore, names: &Names) -> Check {
    let scope = names.scope("a", "p");
    let k = T.div_euclid(H);
    let at = |hour: i64, offset: i64| hour * H + offset;
    // Hour k - 1 at its last nanosecond; k at its first and near its end
    // (written twice: one hour); k + 3 by two writes; k + 400 (two weeks on).
    let s = [
        sample(at(k - 1, H - 1), 1, 1, 1),
        sample(at(k, 0), 1, 1, 1),
        sample(at(k, H - 2), 2, 1, 1),
        sample(at(k + 3, 5), 1, 1, 1),
        sample(at(k + 400, 7), 1, 1, 1),
    ];
    store.put_samples(&scope, &s).await?;
    store
        .put_samples(&scope, &[sample(at(k + 3, 9), 3, 2, 4), s[1]])
        .await?;
    let all = [k - 1, k, k + 3, k + 400];
    expect_hours(store, &scope, (i64::MIN, i64::MAX), &all).await?;
    // From 1970 to 2100, as a user asking for "all time" does.
    expect_hours(store, &scope, (0, 4_102_444_800_000_000_000), &all).await?;
    expect_hours(store, &scope, (at(k, 0), at(k + 1, 0)), &[k]).await?;
    expect_hours(store, &scope, (at(k - 1, 0), at(k + 3, 1)), &all[..3]).await?;
    // Edge hours are listed by what they hold, not by where in them the
    // range starts or ends.
    expect_hours(store, &scope, (at(k, H - 1), at(k + 3, 1)), &[k, k + 3]).await?;
    expect_hours(store, &scope, (at(k - 1, 0), at(k - 1, 1)), &[k - 1]).await?;
    expect_hours(store, &scope, (at(k + 1, 0), at(k + 3, 0)), &[]).await?;
    expect_hours(store, &scope, (at(k + 4, 0), at(k + 400, 0)), &[]).await?;
    expect_hours(store, &scope, (at(k + 4, 0), at(k + 400, 1)), &[k + 400]).await?;
    expect_hours(store, &scope, (at(k + 401, 0), i64::MAX), &[]).await?;
    // Empty and reversed ranges hold nothing.
    expect_hours(store, &scope, (at(k, 0), at(k, 0)), &[]).await?;
    expect_hours(store, &scope, (at(k + 1, 0), at(k, 0)), &[]).await
}

/// The first and last hours of the clock are hours like any other.
async fn sample_hours_of_extreme_timestamps(store: &dyn ProfileStore, names: &Names) -> Check {
    let scope = names.scope("a", "p");
    let times = [i64::MIN, -H - 1, -1, 0, i64::MAX];
    let s: Vec<_> = times.iter().map(|&t| sample(t, 9, 9, 1)).collect();
    store.put_samples(&scope, &s).await?;
    let hour = |t: i64| t.div_euclid(H);
    let all: Vec<i64> = times.iter().map(|&t| hour(t)).collect();
    // `to` is exclusive, but i64::MAX - 1 is in the last hour, which holds
    // the sample at i64::MAX: listed.
    expect_hours(store, &scope, (i64::MIN, i64::MAX), &all).await?;
    expect_hours(store, &scope, (i64::MIN, i64::MIN + 1), &all[..1]).await?;
    expect_hours(store, &scope, (-H, H), &[-1, 0]).await?;
    expect_hours(store, &scope, (i64::MAX - 1, i64::MAX), &all[4..]).await
}

/// A scope's index holds only that scope's hours, whichever tenants and
/// projects share a prefix with it.
async fn sample_hours_are_per_scope(store: &dyn ProfileStore, names: &Names) -> Check {
    let scopes = [
        names.scope("a", "p"),
        names.scope("a", "pb"),
        names.scope("ab", "p"),
    ];
    let k = T.div_euclid(H);
    for (i, scope) in scopes.iter().enumerate() {
        store
            .put_samples(scope, &[sample((k + i as i64) * H, 1, 1, 1)])
            .await?;
    }
    for (i, scope) in scopes.iter().enumerate() {
        expect_hours(store, scope, (i64::MIN, i64::MAX), &[k + i as i64]).await?;
    }
    expect_hours(store, &names.scope("a", "q"), (i64::MIN, i64::MAX), &[]).await?;
    expect_hours(store, &names.scope("b", "p"), (i64::MIN, i64::MAX), &[]).await
}

async fn many_samples_come_back_exactly(store: &dyn ProfileStore, names: &Names) -> Check {
    const N: u64 = 50_000;
    let scope = names.scope("a", "p");
    let start = T.div_euclid(H) * H;
    // Spread over ten hours; a few stacks and label sets per instant, as a
    // real host sends.
    let samples: Vec<StoredSample> = (0..N)
        .map(|i| StoredSample {
            timestamp_ns: start + (i / 5) as i64 * (10 * H / (N as i64 / 5)),
            stack: StackId(u128::from(i % 5) << 100 | u128::from(i)),
            labels: LabelSetId(u128::from(i % 3)),
            count: i % 17 + 1,
            period_ns: 10_101_010,
        })
        .collect();
    for chunk in samples.chunks(10_000) {
        store.put_samples(&scope, chunk).await?;
    }
    let got = sorted(store.scan_samples(&scope, i64::MIN, i64::MAX).await?);
    let expected = sorted(samples.clone());
    ensure!(
        got.len() == expected.len(),
        "full scan returned {} rows, {} were written",
        got.len(),
        expected.len()
    );
    if let Some(i) = (0..got.len()).find(|&i| got[i] != expected[i]) {
        return Err(Failure(format!(
            "full scan differs at row {i}: got {:?}, expected {:?}",
            got[i], expected[i]
        )));
    }
    // A range in the middle, cutting through an hour.
    let (from, to) = (start + 3 * H + H / 2, start + 6 * H + 1);
    let got = sorted(store.scan_samples(&scope, from, to).await?);
    let expected: Vec<_> = expected
        .into_iter()
        .filter(|s| (from..to).contains(&s.timestamp_ns))
        .collect();
    ensure!(
        got == expected,
        "scan over [{from}, {to}) returned {} rows, expected {}",
        got.len(),
        expected.len()
    );
    Ok(())
}

async fn sync_after_writes(store: &dyn ProfileStore, names: &Names) -> Check {
    let scope = names.scope("a", "p");
    store.put_samples(&scope, &[sample(T, 1, 1, 1)]).await?;
    store.sync().await?;
    // Syncing with nothing new to write is fine too.
    store.sync().await?;
    expect_scan(store, &scope, (T, T + 1), &[sample(T, 1, 1, 1)]).await
}
