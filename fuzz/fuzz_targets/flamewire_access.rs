//! `flamewire::access` and `Tree::of` on arbitrary bytes: an error, never a
//! panic; and every accessor of a graph they accept answers without
//! panicking (the UI indexes without further checks once a graph passed).
#![no_main]

use kiln_model::flamewire::{FlameGraph, Tree, access};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut aligned = rkyv::util::AlignedVec::<16>::new();
    aligned.extend_from_slice(data);
    let Ok(wire) = access(&aligned) else { return };
    let Ok(tree) = Tree::of(wire) else { return };
    let graph = FlameGraph::new(wire, &tree);
    for i in 0..graph.node_count() {
        let node = graph.node(i);
        assert!(i + node.skip as usize <= graph.node_count());
        let _ = graph.node_name(i);
        let _ = graph.children(i).count();
    }
    graph
        .write_collapsed(&mut std::io::sink())
        .expect("writing to a sink");
    graph
        .write_json(&mut std::io::sink())
        .expect("writing to a sink");
});
