//! The sandwich view of one function: who calls it and what it calls,
//! merged over every place it appears, computed from the flamegraph.

use kiln_model::flamewire::FlamewireBuilder;

use crate::graph::Graph;
use crate::transform::{meta_of, owned_frame};

/// The two halves of a sandwich.
#[derive(Debug)]
pub struct Sandwich {
    /// Root → function → its callers, caller of caller, … (each occurrence
    /// weighted by its total).
    pub callers: Graph,
    /// Root → function → its callees, merged over every occurrence.
    pub callees: Graph,
    /// Samples in the function and below, recursion counted once.
    pub total: u64,
    /// Samples in the function itself.
    pub self_count: u64,
}

/// The sandwich of the function named `name`; `None` when no node has it.
pub fn sandwich(graph: &Graph, name: &str) -> Option<Sandwich> {
    let wire = graph.wire();
    let parents = graph.parents();
    let mut callers = FlamewireBuilder::new();
    let mut callees = FlamewireBuilder::new();
    let mut caller_ids: Vec<Option<u32>> = vec![None; wire.frames.len()];
    let mut callee_ids: Vec<Option<u32>> = vec![None; wire.frames.len()];
    let (mut total, mut self_count, mut found) = (0, 0, false);
    let mut stack: Vec<u32> = Vec::new();
    // Callee paths below the current outermost occurrence.
    let mut below: Vec<u32> = Vec::new();
    let mut occurrence_depth = 0usize;
    let mut occurrence_end = 0usize;
    for i in 1..graph.node_count() {
        let depth = graph.depth(i) as usize;
        let is_it = graph.name(i) == name;
        let own = graph.self_count(i);
        if is_it {
            self_count += own;
        }
        if i < occurrence_end {
            let frame = graph.frame(i);
            let id = *callee_ids[frame as usize]
                .get_or_insert_with(|| callees.intern(owned_frame(graph, frame)));
            below.truncate(depth - occurrence_depth);
            below.push(id);
            if own > 0 {
                callees.add_stack(&below, own);
            }
            continue;
        }
        if !is_it {
            continue;
        }
        // An outermost occurrence: its callers up to the root, and the
        // start of its callee subtree.
        found = true;
        total += graph.total(i);
        stack.clear();
        let mut at = i;
        while at != 0 {
            let frame = graph.frame(at);
            stack.push(
                *caller_ids[frame as usize]
                    .get_or_insert_with(|| callers.intern(owned_frame(graph, frame))),
            );
            at = parents[at] as usize;
        }
        callers.add_stack(&stack, graph.total(i));
        let frame = graph.frame(i);
        let id = *callee_ids[frame as usize]
            .get_or_insert_with(|| callees.intern(owned_frame(graph, frame)));
        below.clear();
        below.push(id);
        if own > 0 {
            callees.add_stack(&below, own);
        }
        occurrence_depth = depth;
        occurrence_end = i + graph.skip(i);
    }
    found.then(|| Sandwich {
        callers: Graph::from_wire(&callers.finish(meta_of(graph))),
        callees: Graph::from_wire(&callees.finish(meta_of(graph))),
        total,
        self_count,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::tests::graph_of;
    use crate::transform::tests::collapsed;

    #[test]
    fn callers_and_callees_merge_every_occurrence() {
        let g = graph_of(
            "main;a;parse;lex 3\nmain;b;parse 2\nmain;b;parse;alloc 1\nmain;parse;parse;lex 4\nmain;c 9",
        );
        let s = sandwich(&g, "parse").unwrap();
        assert_eq!(s.total, 10);
        assert_eq!(s.self_count, 2);
        assert_eq!(
            collapsed(&s.callers),
            ["parse;a;main 3", "parse;b;main 3", "parse;main 4"]
        );
        assert_eq!(
            collapsed(&s.callees),
            [
                "parse 2",
                "parse;alloc 1",
                "parse;lex 3",
                "parse;parse;lex 4"
            ]
        );
        assert!(sandwich(&g, "absent").is_none());
    }
}
