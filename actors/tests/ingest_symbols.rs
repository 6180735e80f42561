//! Symbolization in the ingest pipeline, without HTTP: real embedded bus
//! and stores, a C program built here and its symbols stored as an upload
//! stores them. Frames are read back from the profile store itself.
//! Needs a C compiler (`cc`).

mod common;

use std::path::Path;

use kiln_actors::query::SymbolsStored;
use kiln_model::{Batch, BatchBuilder, FileId, Frame, FrameKind, LabelSet, Symbol};
use kiln_storage::{ObjectKey, ObjectStore, ProfileStore, StoredFrame};
use kiln_symbolizer_workers::{ExtractOptions, Ksym, build_stored, extract, file_id, ksym};
use kiln_test_support::CBuild;
use kiln_test_support::programs::ALPHA_BETA_INLINED;

use common::{Pipeline, T0};

/// The addresses of `function` (an address where `mix` is inlined into
/// `alpha` comes first, when asked for alpha) and each one's inline chain
/// as the program's own symbols give it, outermost first.
fn chains(elf: &Path, function: &str) -> Vec<(u64, Vec<Symbol>)> {
    let extracted = extract(elf, &ExtractOptions::default()).unwrap();
    let table = &extracted.table;
    let bytes = ksym::encode(table);
    let symbols = Ksym::open(&bytes).unwrap();
    let range = table
        .ranges
        .iter()
        .find(|r| {
            table
                .functions
                .get(r.function as usize)
                .is_some_and(|f| f.name == function)
        })
        .unwrap_or_else(|| panic!("{function} not in the program's symbols"));
    let mut frames = Vec::new();
    let mut out: Vec<(u64, Vec<Symbol>)> = (range.start..range.end)
        .map(|addr| {
            symbols.lookup(addr, &mut frames);
            let chain = frames
                .iter()
                .rev()
                .map(|f| Symbol {
                    function: f.function().unwrap_or_default().into_owned(),
                    file: f.path(),
                    line: f.line,
                })
                .collect();
            (addr, chain)
        })
        .collect();
    out.sort_by_key(|(_, chain)| std::cmp::Reverse(chain.len()));
    out
}

/// Stores the symbols of `elf` for the tenant and tells the query side:
/// what `PUT /api/v1/symbols/{id}` does.
async fn upload(s: &Pipeline, elf: &Path) -> FileId {
    let data = std::fs::read(elf).unwrap();
    let id = file_id(&data);
    let stored = build_stored(elf, &data).unwrap();
    let key = ObjectKey::tenant_symbols(s.scope.tenant(), id).unwrap();
    s.objects.put(&key, stored.compressed.into()).await.unwrap();
    s.query
        .send(SymbolsStored {
            tenant: Some(s.scope.tenant().to_owned()),
            file_id: id,
        })
        .await
        .unwrap();
    id
}

/// The frame as the profile store holds it.
async fn stored(s: &Pipeline, frame: &Frame) -> StoredFrame {
    let rows = s
        .store
        .get_frames(s.scope.tenant(), &[frame.id()])
        .await
        .unwrap();
    rows.into_iter().next().flatten().expect("frame stored")
}

fn batch(frames: &[Frame], ts: i64) -> Batch {
    let mut b = BatchBuilder::new("host", ts, 10_000_000);
    b.add(ts, frames, &LabelSet::new().with("host", "h"), 3);
    b.finish()
}

/// Guards issue 4's "frames symbolized before they are written": a frame
/// ingested after its file's symbols were uploaded is stored with its
/// inline chain — at once, although ingest had just found the file without
/// symbols — and one ingested before stays unsymbolized in the store but
/// shows its names at query time.
#[actix_rt::test]
async fn frames_ingested_after_an_upload_are_stored_symbolized() {
    let s = Pipeline::start(2).await;
    let elf = CBuild::cc()
        .args(["-O2", "-g"])
        .program(s.dir.path(), "prog", ALPHA_BETA_INLINED);
    let id = file_id(&std::fs::read(&elf).unwrap());
    let frame = |addr| Frame::Address {
        kind: FrameKind::Native,
        file_id: id,
        addr,
    };
    let (beta, beta_chain) = chains(&elf, "beta").swap_remove(0);
    let (alpha, alpha_chain) = chains(&elf, "alpha").swap_remove(0);
    let names: Vec<&str> = alpha_chain.iter().map(|s| s.function.as_str()).collect();
    assert_eq!(names, ["alpha", "mix"], "the address has mix inlined");

    // Before the upload: written as it came.
    s.publish("host", &batch(&[frame(beta)], T0).encode()).await;
    assert_eq!(stored(&s, &frame(beta)).await.symbols, []);

    assert_eq!(upload(&s, &elf).await, id);
    s.publish(
        "host",
        &batch(&[frame(beta), frame(alpha)], T0 + 1).encode(),
    )
    .await;
    let row = stored(&s, &frame(alpha)).await;
    assert_eq!(row.frame, frame(alpha));
    assert_eq!(row.symbols, alpha_chain);
    assert!(row.symbols.iter().all(|s| s.line > 0), "{:?}", row.symbols);
    assert!(
        row.symbols[0]
            .file
            .as_deref()
            .is_some_and(|f| f.ends_with("prog.c")),
        "{:?}",
        row.symbols
    );
    // The deduper kept beta's frame from being written again: the query
    // path names it, and writes its symbols back.
    assert_eq!(stored(&s, &frame(beta)).await.symbols, []);
    let beta_names: Vec<&str> = beta_chain.iter().map(|s| s.function.as_str()).collect();
    let beta_names = beta_names.join(";");
    let collapsed = s.collapsed(&[]).await;
    let mut lines: Vec<&str> = collapsed.lines().collect();
    lines.sort_unstable();
    assert_eq!(
        lines,
        [
            format!("{beta_names} 3"),
            format!("{beta_names};alpha;mix 3")
        ]
    );
    // The query wrote the symbols it found back (in the background): the
    // store now holds beta's chain too.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut beta_row = stored(&s, &frame(beta)).await;
    while beta_row.symbols.is_empty() && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        beta_row = stored(&s, &frame(beta)).await;
    }
    assert_eq!(beta_row.symbols, beta_chain);
}

/// A frame of a file nobody has symbols for is written unsymbolized, and
/// ingest goes on.
#[actix_rt::test]
async fn frames_without_symbols_are_written_as_they_came() {
    let s = Pipeline::start(2).await;
    let unknown = Frame::Address {
        kind: FrameKind::Native,
        file_id: FileId(0xdead),
        addr: 0x1234,
    };
    let named = Frame::named(FrameKind::Native, "main");
    s.publish(
        "host",
        &batch(&[named.clone(), unknown.clone()], T0).encode(),
    )
    .await;
    assert_eq!(stored(&s, &unknown).await.symbols, []);
    assert_eq!(stored(&s, &named).await.frame, named);
    let collapsed = s.collapsed(&[]).await;
    assert!(collapsed.starts_with("main;"), "{collapsed}");
}
