//! Export of a flamegraph ([`kiln_model::flamewire`]) to the formats other
//! tools read: pprof (`go tool pprof`, Pyroscope, Parca) and speedscope's
//! JSON. Collapsed stacks are written by the flamegraph itself
//! (`write_collapsed`).
//!
//! Both exports carry one sample per distinct stack that has samples of its
//! own (a node's self count), root first, so importing an export gives back
//! the stacks and counts of the graph.

mod pprof;
mod speedscope;

pub use pprof::to_pprof;
pub use speedscope::{SPEEDSCOPE_SCHEMA, to_speedscope};

use kiln_model::flamewire::FlameGraph;

/// Why an export failed.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// Compressing or writing the output failed.
    #[error("writing the export failed: {0}")]
    Io(#[from] std::io::Error),
    /// Serializing JSON failed.
    #[error("serializing the export failed: {0}")]
    Json(#[from] serde_json::Error),
}

/// Calls `each(path, self_count)` for every node with samples of its own,
/// `path` being its frame indices from below the root down to it.
fn for_each_stack(graph: FlameGraph<'_>, mut each: impl FnMut(&[u32], u64)) {
    let self_counts = graph.self_counts();
    let mut path: Vec<u32> = Vec::new();
    for (i, &own) in self_counts.iter().enumerate().skip(1) {
        path.truncate(graph.depth(i) as usize - 1);
        path.push(graph.frame(i));
        if own > 0 {
            each(&path, own);
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use kiln_model::FrameKind;
    use kiln_model::flamewire::{
        FlameFrame, FlameGraph, FlameMeta, Flamewire, FlamewireBuilder, read,
    };

    /// A graph of `(stack, count)` with modules and files on some frames.
    pub(crate) fn graph(stacks: &[(&[&str], u64)]) -> Flamewire {
        let mut b = FlamewireBuilder::new();
        for (names, count) in stacks {
            let ids: Vec<u32> = names
                .iter()
                .map(|name| {
                    let frame = match *name {
                        "read" => FlameFrame {
                            module: Some("[kernel.kallsyms]"),
                            ..FlameFrame::new(FrameKind::Kernel, name)
                        },
                        "parse" => FlameFrame {
                            module: Some("app"),
                            file: Some("src/parse.rs"),
                            line: 42,
                            ..FlameFrame::new(FrameKind::Native, name)
                        },
                        _ => FlameFrame::new(FrameKind::Native, name),
                    };
                    b.intern(frame)
                })
                .collect();
            b.add_stack(&ids, *count);
        }
        b.finish(FlameMeta {
            from_ns: 1_700_000_000_000_000_000,
            to_ns: 1_700_000_060_000_000_000,
            ns_per_count: 10_000_000,
        })
    }

    /// `f` of `wire`, archived, validated and read as exports read it.
    pub(crate) fn with_graph<T>(wire: &Flamewire, f: impl FnOnce(FlameGraph<'_>) -> T) -> T {
        read(&wire.to_bytes(), f).unwrap()
    }

    /// The graph's collapsed stacks, sorted.
    pub(crate) fn collapsed(wire: &Flamewire) -> Vec<String> {
        let mut out = Vec::new();
        with_graph(wire, |g| g.write_collapsed(&mut out)).unwrap();
        let mut lines: Vec<String> = String::from_utf8(out)
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect();
        lines.sort();
        lines
    }

    pub(crate) const STACKS: &[(&[&str], u64)] = &[
        (&["main", "parse", "read"], 5),
        (&["main", "parse"], 2),
        (&["main", "render"], 7),
        (&["other"], 1),
        (&["main", "main", "main"], 3),
    ];
}
