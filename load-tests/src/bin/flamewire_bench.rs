//! Flamewire build time and size for a flamegraph of about a million nodes,
//! against the same graph as JSON (the d3-flamegraph shape the API serves
//! for `format=json`), raw and compressed.
//!
//! `cargo run --release -p kiln-load-tests --bin flamewire_bench -- --nodes 1000000`

use std::time::Instant;

use clap::Parser;
use kiln_load_tests::report::Report;
use kiln_load_tests::synth::CallGraph;
use kiln_model::FrameKind;
use kiln_model::flamewire::{FlameFrame, FlameMeta, FlamewireBuilder, access};
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
    let graph_view = access(&bytes).expect("valid flamewire");
    let validate = started.elapsed();

    let started = Instant::now();
    let mut json = Vec::new();
    graph_view.write_json(&mut json).expect("write json");
    let json_time = started.elapsed();

    let zstd = |data: &[u8]| zstd::bulk::compress(data, 3).expect("zstd").len();
    let gzip = |data: &[u8]| {
        use std::io::Write;
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(data).expect("gzip");
        e.finish().expect("gzip").len()
    };
    let wire_zstd = zstd(&bytes);
    // The same nodes interleaved as records (Flamewire's first layout), to
    // show what storing them by column saves once compressed.
    let interleaved: Vec<u8> = (0..wire.nodes.len())
        .flat_map(|i| {
            let n = wire.nodes.get(i);
            [
                &n.total.to_le_bytes()[..],
                &n.self_count.to_le_bytes(),
                &n.frame.to_le_bytes(),
                &n.depth.to_le_bytes(),
                &n.skip.to_le_bytes(),
                &[0; 4],
            ]
            .concat()
        })
        .collect();
    let columns = &wire.nodes;
    let columnar: Vec<u8> = [
        columns
            .total
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect::<Vec<u8>>(),
        columns
            .self_count
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
        columns.frame.iter().flat_map(|v| v.to_le_bytes()).collect(),
        columns.depth.iter().flat_map(|v| v.to_le_bytes()).collect(),
        columns.skip.iter().flat_map(|v| v.to_le_bytes()).collect(),
    ]
    .concat();
    let json_zstd = zstd(&json);
    let json_gzip = gzip(&json);

    report.add("stacks", stacks.len() as f64, "stacks");
    report.add("nodes", nodes as f64, "nodes");
    report.time("build (stack counts -> Flamewire)", build);
    report.time("serialize (rkyv)", serialize);
    report.time("validate + access (zero-copy)", validate);
    report.time("write JSON", json_time);
    report.add("flamewire bytes", bytes.len() as f64, "B");
    report.add(
        "flamewire bytes per node",
        bytes.len() as f64 / nodes as f64,
        "B",
    );
    report.add("flamewire+zstd bytes", wire_zstd as f64, "B");
    report.add("nodes only, by column, +zstd", zstd(&columnar) as f64, "B");
    report.add(
        "nodes only, interleaved, +zstd",
        zstd(&interleaved) as f64,
        "B",
    );
    report.add("json bytes", json.len() as f64, "B");
    report.add("json+zstd bytes", json_zstd as f64, "B");
    report.add("json+gzip bytes", json_gzip as f64, "B");
    report.add(
        "ratio json / flamewire (raw)",
        json.len() as f64 / bytes.len() as f64,
        "x",
    );
    report.add(
        "ratio json / flamewire+zstd",
        json.len() as f64 / wire_zstd as f64,
        "x",
    );
    report.add(
        "ratio json+gzip / flamewire+zstd",
        json_gzip as f64 / wire_zstd as f64,
        "x",
    );
    report.finish("flamewire");
}
