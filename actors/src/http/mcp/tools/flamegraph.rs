//! `flamegraph`: the range's call tree pruned to its hot paths, a size a
//! model reads whole: nodes with at least `min_share` of the samples, at
//! most `max_lines` lines, a chain of callers each with all of its
//! callee's samples on one line, and the share of samples left out said.

use kiln_model::flamewire::{FlameGraph, read};
use kiln_storage::Scope;
use serde_json::{Value, json};

use super::super::super::AppState;
use super::super::super::error::ApiError;
use super::super::super::query::admit_and_query;
use super::{Answer, Args, describe, range_json, range_output, range_properties_and, share};
use crate::query::{FlamegraphQuery, Granularity};

pub(crate) const NAME: &str = "flamegraph";

pub(crate) fn tool() -> rmcp::model::Tool {
    super::tool(
        NAME,
        "Hot paths",
        "The call tree of a range (a flamegraph as text), pruned to its hot paths: each line a \
         function (or a chain of functions where the caller spends all its time in the callee, \
         joined by ' > ') with its total share (itself and what it calls) and self share, \
         indented under its caller, hottest first. Paths under `min_share` percent are left \
         out, and the share of samples they hold is stated.",
        range_properties_and(json!({
            "min_share": {
                "type": "number", "minimum": 0, "maximum": 100, "default": 1,
                "description": "Leave out functions with less than this percentage of the samples.",
            },
            "max_lines": {
                "type": "integer", "minimum": 5, "maximum": 500, "default": 60,
                "description": "Lines at most.",
            },
        })),
        &[],
        json!({
            "range": range_output(),
            "samples": {"type": "integer"},
            "min_share": {"type": "number"},
            "left_out_share": {"type": "number"},
            "lines": {"type": "array", "items": {"type": "object"}},
        }),
    )
}

/// One line of the pruned tree.
#[derive(Debug, Clone, PartialEq)]
struct Line {
    depth: usize,
    /// A function, or a chain of callers down to the last.
    frames: Vec<String>,
    total: u64,
    /// The last frame's own samples.
    self_count: u64,
}

pub(crate) async fn call(
    state: &AppState,
    scope: Scope,
    mut args: Args,
) -> Result<Answer, ApiError> {
    let range = args.range(scope)?;
    let min_share = args.number("min_share", 1.0, 0.0..=100.0)?;
    let max_lines = args.whole("max_lines", 60, 5..=500)? as usize;
    args.finish(&["from", "to", "filters", "min_share", "max_lines"])?;
    let wire = admit_and_query(state, range.clone(), |range| {
        FlamegraphQuery(range, Granularity::Function)
    })
    .await?;
    let bytes = wire.to_bytes();
    let (samples, lines) = read(&bytes, |graph| {
        (graph.total(0), prune(&graph, min_share, max_lines))
    })
    .map_err(|e| ApiError::internal("built an unreadable flamegraph", e))?;
    let shown: u64 = lines.iter().map(|l| l.self_count).sum();
    let left_out = share(samples.saturating_sub(shown), samples);
    let mut text = format!("Hot paths, {}: {samples} samples.\n", describe(&range));
    if samples == 0 {
        text.push_str("No samples in this range with these filters.\n");
    } else {
        text.push_str(" total%   self%  function (indented under its caller)\n");
    }
    let mut rows = Vec::new();
    for line in &lines {
        text.push_str(&format!(
            "{:>6.2}%  {:>6.2}%  {}{}\n",
            share(line.total, samples) * 100.0,
            share(line.self_count, samples) * 100.0,
            "  ".repeat(line.depth),
            line.frames.join(" > "),
        ));
        rows.push(json!({
            "depth": line.depth,
            "frames": line.frames,
            "total_samples": line.total,
            "self_samples": line.self_count,
            "total_share": share(line.total, samples),
            "self_share": share(line.self_count, samples),
        }));
    }
    if samples > 0 {
        text.push_str(&format!(
            "Left out: {:.2}% of the samples, in paths under {min_share}% each{}.\n",
            left_out * 100.0,
            match lines.len() >= max_lines {
                true => format!(" or past {max_lines} lines"),
                false => String::new(),
            }
        ));
    }
    Ok(Answer {
        text,
        structured: json!({
            "range": range_json(&range),
            "samples": samples,
            "min_share": min_share,
            "left_out_share": left_out,
            "lines": Value::Array(rows),
        }),
    })
}

/// The root's callees (the root, `all`, is the range itself) down to the
/// nodes with at least `min_share` percent of the root's samples,
/// children hottest first, at most `max_lines` lines; a node whose only
/// child holds all its samples shares the child's line.
fn prune(graph: &FlameGraph<'_>, min_share: f64, max_lines: usize) -> Vec<Line> {
    let root_total = graph.total(0);
    let mut lines = Vec::new();
    if root_total == 0 {
        return lines;
    }
    let hot = |i: usize| {
        graph.total(i) as f64 * 100.0 >= min_share * root_total as f64 && graph.total(i) > 0
    };
    let hottest = |i: usize| {
        let mut children: Vec<usize> = graph.children(i).filter(|&c| hot(c)).collect();
        children.sort_by(|&a, &b| graph.total(b).cmp(&graph.total(a)).then(a.cmp(&b)));
        children
    };
    // Depth first, hottest first: (node, depth).
    let mut stack: Vec<(usize, usize)> = hottest(0).into_iter().rev().map(|c| (c, 0)).collect();
    while let Some((mut node, depth)) = stack.pop() {
        if lines.len() >= max_lines {
            break;
        }
        let mut frames = vec![graph.node_name(node).to_owned()];
        loop {
            let children: Vec<usize> = graph.children(node).collect();
            match children[..] {
                [only] if graph.total(only) == graph.total(node) => {
                    node = only;
                    frames.push(graph.node_name(node).to_owned());
                }
                _ => break,
            }
        }
        lines.push(Line {
            depth,
            frames,
            total: graph.total(node),
            self_count: graph.self_count(node),
        });
        for child in hottest(node).into_iter().rev() {
            stack.push((child, depth + 1));
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use kiln_model::FrameKind;
    use kiln_model::flamewire::{FlameFrame, FlameMeta, FlamewireBuilder};

    use super::*;

    #[test]
    fn hot_paths_are_pruned_and_chains_share_a_line() {
        let mut b = FlamewireBuilder::new();
        let mut frame = |name: &str| {
            b.intern(FlameFrame {
                kind: FrameKind::Native,
                name,
                module: None,
                file: None,
                line: 0,
            })
        };
        let (main, run, hot, warm, cold) = (
            frame("main"),
            frame("run"),
            frame("hot"),
            frame("warm"),
            frame("cold"),
        );
        b.add_stack(&[main, run, hot], 600);
        b.add_stack(&[main, run, warm], 395);
        b.add_stack(&[main, run, cold], 5);
        let bytes = b
            .finish(FlameMeta {
                from_ns: 0,
                to_ns: 1,
                ns_per_count: 1,
            })
            .to_bytes();
        let lines = read(&bytes, |g| prune(&g, 1.0, 60)).unwrap();
        let text: Vec<(usize, String, u64, u64)> = lines
            .iter()
            .map(|l| (l.depth, l.frames.join(" > "), l.total, l.self_count))
            .collect();
        assert_eq!(
            text,
            [
                (0, "main > run".to_owned(), 1000, 0),
                (1, "hot".to_owned(), 600, 600),
                (1, "warm".to_owned(), 395, 395),
            ]
        );
        let capped = read(&bytes, |g| prune(&g, 0.0, 2)).unwrap();
        assert_eq!(capped.len(), 2);
    }
}
