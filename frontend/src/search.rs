//! Search: which frames match, and what share of the samples they hold.

use regex::{Regex, RegexBuilder};

use crate::graph::Graph;

/// A compiled search: a case-insensitive regular expression, or the text
/// itself when it is not one (so `foo(` still finds `foo(int)`).
#[derive(Debug, Clone)]
pub struct Search {
    regex: Regex,
}

impl Search {
    /// The search for `text`; `None` when `text` is blank.
    pub fn new(text: &str) -> Option<Self> {
        let text = text.trim();
        if text.is_empty() {
            return None;
        }
        let build = |pattern: &str| {
            RegexBuilder::new(pattern)
                .case_insensitive(true)
                .size_limit(1 << 20)
                .build()
        };
        let regex = build(text).or_else(|_| build(&regex::escape(text))).ok()?;
        Some(Self { regex })
    }

    /// Whether each frame of `graph` matches, by frame index.
    pub fn frame_mask(&self, graph: &Graph) -> Vec<bool> {
        let wire = graph.wire();
        wire.frames
            .iter()
            .map(|f| self.regex.is_match(wire.string(f.name.to_native())))
            .collect()
    }
}

/// Samples under a matching frame, each counted once even when matches
/// nest, as a share of all samples (0 to 1).
pub fn matched_share(graph: &Graph, mask: &[bool]) -> f64 {
    let root = graph.root_total();
    if root == 0 {
        return 0.0;
    }
    let mut matched = 0u64;
    let mut i = 1;
    while i < graph.node_count() {
        if mask[graph.frame(i) as usize] {
            matched += graph.total(i);
            i += graph.skip(i);
        } else {
            i += 1;
        }
    }
    matched as f64 / root as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::tests::graph_of;

    #[test]
    fn nested_matches_count_once() {
        let g = graph_of("main;parse;parse_int 3\nmain;work 1\nmain;parse 4");
        let search = Search::new("PARSE").unwrap();
        let mask = search.frame_mask(&g);
        assert!((matched_share(&g, &mask) - 7.0 / 8.0).abs() < 1e-12);
        let none = Search::new("nothing").unwrap().frame_mask(&g);
        assert_eq!(matched_share(&g, &none), 0.0);
    }

    #[test]
    fn text_that_is_not_a_regex_is_searched_literally() {
        let g = graph_of("foo(int) 1\nbar 1");
        let mask = Search::new("foo(").unwrap().frame_mask(&g);
        assert!((matched_share(&g, &mask) - 0.5).abs() < 1e-12);
        assert!(Search::new("  ").is_none());
    }
}
