//! Flamewire build time and size for a flamegraph of about a million nodes,
//! against the same graph as JSON (the d3-flamegraph shape the API serves
//! for `format=json`), raw and compressed; what each part of the Flamewire
//! takes once compressed; the time a reader takes to derive its columns;
//! and the same graph in Flamewire version 1's node layout, as a baseline.
//!
//! `cargo run --release -p kiln-load-tests --bin flamewire_bench -- --nodes 1000000`

use std::time::Instant;

use clap::Parser;
use kiln_actors::http::FLAMEWIRE_ZSTD_LEVEL;
use kiln_load_tests::report::Report;
use kiln_load_tests::synth::CallGraph;
use kiln_model::FrameKind;
use kiln_model::flamewire::{
    Column, FlameFrame, FlameGraph, FlameMeta, Flamewire, FlamewireBuilder, Tree, access,
};
use rand::SeedableRng;
use rand::rngs::StdRng;

#[derive(Debug, Parser)]
#[command(about = "Flamewire build time and size against JSON")]
struct Args {
    /// Nodes in the flamegraph (stacks are added until it has this many).
    #[arg(long, default_value_t = 1_000_000)]
    nodes: usize,
    /// Functions in the synthetic call graph.
    #[arg(long, default_value_t = 50_000)]
    functions: usize,
    /// Random seed.
    #[arg(long, default_value_t = 7)]
    seed: u64,
}

fn main() {
    let args = Args::parse();
    let mut rng = StdRng::seed_from_u64(args.seed);
    let graph = CallGraph::new(args.functions, 200, 8, &mut rng);

    // Stack counts, as the query side has them after aggregation.
    let mut stacks: Vec<(Vec<u32>, u64)> = Vec::new();
    {
        let mut probe = FlamewireBuilder::new();
        let ids: Vec<u32> = (0..args.functions as u32)
            .map(|f| probe.intern(FlameFrame::new(FrameKind::Native, graph.name(f))))
            .collect();
        while probe.node_count() < args.nodes {
            let depth = rand::Rng::random_range(&mut rng, 8..=64);
            let walk = graph.walk(depth, &mut rng);
            let count = rand::Rng::random_range(&mut rng, 1..=1000);
            probe.add_stack(
                &walk.iter().map(|&f| ids[f as usize]).collect::<Vec<_>>(),
                count,
            );
            stacks.push((walk, count));
        }
    }

    let mut report = Report::default();
    println!("flamewire_bench: {} stacks", stacks.len());

    let started = Instant::now();
    let mut builder = FlamewireBuilder::new();
    let mut frame_ids = vec![u32::MAX; args.functions];
    let mut indices = Vec::new();
    for (walk, count) in &stacks {
        indices.clear();
        for &f in walk {
            let id = &mut frame_ids[f as usize];
            if *id == u32::MAX {
                *id = builder.intern(FlameFrame::new(FrameKind::Native, graph.name(f)));
            }
            indices.push(*id);
        }
        builder.add_stack(&indices, *count);
    }
    let nodes = builder.node_count();
    let wire = builder.finish(FlameMeta::default());
    let build = started.elapsed();
    let started = Instant::now();
    let bytes = wire.to_bytes();
    let serialize = started.elapsed();
    let started = Instant::now();
    let archived = access(&bytes).expect("valid flamewire");
    let validate = started.elapsed();
    let started = Instant::now();
    let tree = Tree::of(archived).expect("valid flamewire");
    let derive = started.elapsed();
    let graph_view = FlameGraph::new(archived, &tree);

    let started = Instant::now();
    let mut json = Vec::new();
    graph_view.write_json(&mut json).expect("write json");
    let json_time = started.elapsed();

    let started = Instant::now();
    let wire_sent = zstd(&bytes, FLAMEWIRE_ZSTD_LEVEL);
    let sent_time = started.elapsed();
    let started = Instant::now();
    let wire_zstd19 = zstd(&bytes, 19);
    let zstd19_time = started.elapsed();
    let wire_zstd3 = zstd(&bytes, 3);
    let json_zstd3 = zstd(&json, 3);
    let json_gzip = gzip(&json);
    let v1 = version_1_bytes(&wire, graph_view);

    report.add("stacks", stacks.len() as f64, "stacks");
    report.add("nodes", nodes as f64, "nodes");
    report.time("build (stack counts -> Flamewire)", build);
    report.time("serialize (rkyv)", serialize);
    report.time("validate (access)", validate);
    report.time("derive skip + frame (Tree::of)", derive);
    report.time("write JSON", json_time);
    report.time(format!("zstd -{FLAMEWIRE_ZSTD_LEVEL} (as sent)"), sent_time);
    report.time("zstd -19", zstd19_time);
    report.add("flamewire bytes", bytes.len() as f64, "B");
    report.add(
        "flamewire bytes per node",
        bytes.len() as f64 / nodes as f64,
        "B",
    );
    report.add("flamewire as sent (zstd)", wire_sent as f64, "B");
    report.add("flamewire+zstd-3", wire_zstd3 as f64, "B");
    report.add("flamewire+zstd-19", wire_zstd19 as f64, "B");
    report.add("flamewire+gzip", gzip(&bytes) as f64, "B");
    // What the level of the served bytes trades: size against the time
    // the server spends compressing.
    for level in [1, 3, 6, 9, 12] {
        let started = Instant::now();
        let size = zstd(&bytes, level);
        report.time(format!("zstd -{level} time"), started.elapsed());
        report.add(format!("zstd -{level} bytes"), size as f64, "B");
    }
    for (part, part_bytes) in parts(&wire) {
        report.add(
            format!("part {part}, +zstd-{FLAMEWIRE_ZSTD_LEVEL}"),
            zstd(&part_bytes, FLAMEWIRE_ZSTD_LEVEL) as f64,
            "B",
        );
    }
    report.add("version 1 layout bytes", v1.len() as f64, "B");
    report.add(
        format!("version 1 layout +zstd-{FLAMEWIRE_ZSTD_LEVEL}"),
        zstd(&v1, FLAMEWIRE_ZSTD_LEVEL) as f64,
        "B",
    );
    report.add("json bytes", json.len() as f64, "B");
    report.add("json+zstd-3 bytes", json_zstd3 as f64, "B");
    report.add("json+gzip bytes", json_gzip as f64, "B");
    let ratio = |a: usize, b: usize| a as f64 / b as f64;
    report.add(
        "ratio json / flamewire (raw)",
        ratio(json.len(), bytes.len()),
        "x",
    );
    report.add(
        "ratio json / flamewire as sent",
        ratio(json.len(), wire_sent),
        "x",
    );
    report.add(
        "ratio json+gzip / flamewire as sent",
        ratio(json_gzip, wire_sent),
        "x",
    );
    report.add(
        "ratio json+zstd-3 / flamewire+zstd-3",
        ratio(json_zstd3, wire_zstd3),
        "x",
    );
    report.add(
        "ratio version 1 / version 2 (raw)",
        ratio(v1.len(), bytes.len()),
        "x",
    );
    report.finish("flamewire");
}

fn zstd(data: &[u8], level: i32) -> usize {
    zstd::bulk::compress(data, level).expect("zstd").len()
}

fn gzip(data: &[u8]) -> usize {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).expect("gzip");
    e.finish().expect("gzip").len()
}

/// Little-endian bytes of a column, at its width.
fn column_bytes(column: &Column) -> Vec<u8> {
    match column {
        Column::U8(v) => v.clone(),
        Column::U16(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        Column::U32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        Column::U64(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
    }
}

/// Each part of the Flamewire as bytes, to show what it costs compressed.
fn parts(wire: &Flamewire) -> Vec<(String, Vec<u8>)> {
    let strings: Vec<u8> = wire
        .strings
        .iter()
        .flat_map(|s| s.bytes().chain([0]))
        .collect();
    let frames: Vec<u8> = wire
        .frames
        .iter()
        .flat_map(|f| {
            [f.kind as u32, f.name, f.module, f.file, f.line]
                .into_iter()
                .flat_map(u32::to_le_bytes)
        })
        .collect();
    let mut out = vec![
        ("strings".to_owned(), strings),
        ("frames".to_owned(), frames),
    ];
    for (name, column) in [
        ("nodes.total", &wire.nodes.total),
        ("nodes.depth", &wire.nodes.depth),
        ("nodes.callee", &wire.nodes.callee),
        ("callees.count", &wire.callees.count),
        ("callees.frame", &wire.callees.frame),
    ] {
        out.push((
            format!("{name} (u{})", column.width() * 8),
            column_bytes(column),
        ));
    }
    out
}

/// The graph in Flamewire version 1's layout: strings and frames as now,
/// and every node column stored whole (total and self as u64, frame, depth
/// and skip as u32), as that version sent them.
fn version_1_bytes(wire: &Flamewire, graph: FlameGraph<'_>) -> Vec<u8> {
    let mut out: Vec<u8> = parts(wire)
        .into_iter()
        .take(2)
        .flat_map(|(_, b)| b)
        .collect();
    let n = graph.node_count();
    let self_counts = graph.self_counts();
    out.extend((0..n).flat_map(|i| graph.total(i).to_le_bytes()));
    out.extend(self_counts.iter().flat_map(|c| c.to_le_bytes()));
    out.extend((0..n).flat_map(|i| graph.frame(i).to_le_bytes()));
    out.extend((0..n).flat_map(|i| graph.depth(i).to_le_bytes()));
    out.extend((0..n).flat_map(|i| (graph.skip(i) as u32).to_le_bytes()));
    out
}
