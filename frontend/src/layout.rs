//! Which nodes a frame draws, and where: one pass over the node array that
//! jumps over every subtree narrower than a pixel or off the viewport.

use crate::graph::Graph;

/// What part of the graph the canvas shows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Viewport {
    /// Canvas size in CSS pixels.
    pub width: f64,
    /// Canvas height in CSS pixels.
    pub height: f64,
    /// Height of one row (one stack depth).
    pub row_height: f64,
    /// First sample shown at the left edge (samples are laid out left to
    /// right, the root spanning `0..root_total`).
    pub x0: f64,
    /// Sample at the right edge.
    pub x1: f64,
    /// Depth shown in the first row (the bottom row of a flame graph, the
    /// top row of an icicle graph); fractions scroll smoothly.
    pub first_row: f64,
    /// Icicle orientation: the root at the top, callees below.
    pub icicle: bool,
}

impl Viewport {
    /// The whole graph of `root_total` samples on a `width`×`height` canvas.
    pub fn whole(root_total: u64, width: f64, height: f64, icicle: bool) -> Self {
        Self {
            width,
            height,
            row_height: ROW_HEIGHT,
            x0: 0.0,
            x1: root_total.max(1) as f64,
            first_row: 0.0,
            icicle,
        }
    }

    /// Pixels per sample.
    pub fn scale(&self) -> f64 {
        self.width / (self.x1 - self.x0).max(f64::MIN_POSITIVE)
    }

    /// The sample under canvas x.
    pub fn sample_at(&self, x: f64) -> f64 {
        self.x0 + x / self.scale()
    }

    /// Zooms by `factor` (above 1 zooms in) keeping the sample under canvas
    /// x in place; never wider than the graph, never narrower than a sample.
    pub fn zoom(&mut self, factor: f64, x: f64, root_total: u64) {
        let at = self.sample_at(x);
        let span = ((self.x1 - self.x0) / factor).clamp(1.0, root_total.max(1) as f64);
        self.x0 = at - (x / self.width) * span;
        self.x1 = self.x0 + span;
        self.clamp(root_total);
    }

    /// Pans by canvas pixels (positive `dx` moves the view right, positive
    /// `rows` moves it deeper).
    pub fn pan(&mut self, dx: f64, rows: f64, root_total: u64, max_depth: u32) {
        let shift = dx / self.scale();
        self.x0 += shift;
        self.x1 += shift;
        self.first_row = (self.first_row + rows).clamp(0.0, max_depth as f64);
        self.clamp(root_total);
    }

    fn clamp(&mut self, root_total: u64) {
        let total = root_total.max(1) as f64;
        let span = (self.x1 - self.x0).min(total);
        self.x0 = self.x0.clamp(0.0, total - span);
        self.x1 = self.x0 + span;
    }

    /// Canvas y of the top of depth `depth`'s row.
    pub fn row_y(&self, depth: u32) -> f64 {
        let row = depth as f64 - self.first_row;
        if self.icicle {
            row * self.row_height
        } else {
            self.height - (row + 1.0) * self.row_height
        }
    }

    /// Rows that fit on the canvas (the last one may be cut).
    fn visible_rows(&self) -> f64 {
        self.height / self.row_height
    }
}

/// Height of a row in CSS pixels.
pub const ROW_HEIGHT: f64 = 18.0;

/// Subtrees narrower than this many CSS pixels are not drawn (nor walked).
pub const MIN_WIDTH: f64 = 1.0;

/// A node to draw.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Placed {
    /// Node index.
    pub node: u32,
    /// Left edge, canvas pixels (may be negative: cut at the edge).
    pub x: f64,
    /// Top edge.
    pub y: f64,
    /// Width in pixels.
    pub w: f64,
}

/// What one layout pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LayoutStats {
    /// Nodes placed for drawing.
    pub drawn: usize,
    /// Nodes jumped over with their subtree (too narrow or off screen).
    pub skipped: usize,
    /// Nodes looked at: drawn, jumped roots, and rows scrolled off.
    pub visited: usize,
}

/// Places the nodes of `graph` that `view` shows into `out` (cleared first).
/// Children start at their parent's left edge, in node order, so a node's
/// left edge is its parent's plus the totals of its earlier siblings.
pub fn layout(graph: &Graph, view: &Viewport, out: &mut Vec<Placed>) -> LayoutStats {
    out.clear();
    let graph = graph.view();
    let n = graph.node_count();
    let scale = view.scale();
    let last_row = view.first_row + view.visible_rows();
    let first_depth = view.first_row.floor().max(0.0) as u32;
    let mut stats = LayoutStats::default();
    // Left edge (in samples) of the next node at each depth.
    let mut cursor: Vec<f64> = vec![0.0; 1];
    let mut i = 0;
    while i < n {
        stats.visited += 1;
        let depth = graph.depth(i) as usize;
        let total = graph.total(i) as f64;
        let skip = graph.skip(i);
        if cursor.len() <= depth + 1 {
            cursor.resize(depth + 2, 0.0);
        }
        let left = cursor[depth];
        cursor[depth] = left + total;
        cursor[depth + 1] = left;
        let right = left + total;
        let too_narrow = total * scale < MIN_WIDTH;
        let off_side = right <= view.x0 || left >= view.x1;
        let too_deep = depth as f64 >= last_row;
        if too_narrow || off_side || too_deep {
            stats.skipped += skip;
            i += skip;
            continue;
        }
        if depth as u32 >= first_depth {
            out.push(Placed {
                node: i as u32,
                x: (left - view.x0) * scale,
                y: view.row_y(depth as u32),
                w: total * scale,
            });
            stats.drawn += 1;
        }
        i += 1;
    }
    stats
}

/// The placed node under canvas point (x, y), if any.
pub fn hit(placed: &[Placed], view: &Viewport, x: f64, y: f64) -> Option<u32> {
    placed
        .iter()
        .find(|p| x >= p.x && x < p.x + p.w && y >= p.y && y < p.y + view.row_height)
        .map(|p| p.node)
}

/// Left edge of node `target` in samples, found by walking down from the
/// root through its ancestors (`parents` from [`Graph::parents`]).
pub fn node_left(graph: &Graph, parents: &[u32], target: usize) -> f64 {
    let mut chain = Vec::new();
    let mut at = target;
    while at != 0 {
        chain.push(at);
        at = parents[at] as usize;
    }
    let view = graph.view();
    let mut left = 0.0;
    let mut parent = 0;
    for &node in chain.iter().rev() {
        for sibling in view.children(parent) {
            if sibling == node {
                break;
            }
            left += graph.total(sibling) as f64;
        }
        parent = node;
    }
    left
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::tests::graph_of;

    fn names(g: &Graph, placed: &[Placed]) -> Vec<String> {
        placed
            .iter()
            .map(|p| g.name(p.node as usize).to_owned())
            .collect()
    }

    #[test]
    fn children_sit_on_their_parent_in_order() {
        let g = graph_of("main;a 30\nmain;b 10\nmain 60");
        let view = Viewport::whole(g.root_total(), 100.0, 200.0, true);
        let mut placed = Vec::new();
        let stats = layout(&g, &view, &mut placed);
        assert_eq!(names(&g, &placed), ["all", "main", "a", "b"]);
        assert_eq!(stats.drawn, 4);
        let b = placed[3];
        assert_eq!((b.x, b.w, b.y), (30.0, 10.0, 2.0 * ROW_HEIGHT));
        // Flame orientation puts the root on the bottom row.
        let flame = Viewport {
            icicle: false,
            ..view
        };
        layout(&g, &flame, &mut placed);
        assert_eq!(placed[0].y, 200.0 - ROW_HEIGHT);
    }

    #[test]
    fn narrow_subtrees_are_jumped_whole() {
        // "tiny" is 1 sample of 1000 on a 100 px canvas: 0.1 px, with a
        // subtree of 3 nodes that must not be visited.
        let g = graph_of("big 999\ntiny;x;y 1");
        let view = Viewport::whole(g.root_total(), 100.0, 200.0, true);
        let mut placed = Vec::new();
        let stats = layout(&g, &view, &mut placed);
        assert_eq!(names(&g, &placed), ["all", "big"]);
        assert_eq!(stats.skipped, 3);
        assert_eq!(stats.visited, 3);
    }

    #[test]
    fn zooming_shows_the_narrow_subtree_and_drops_the_rest() {
        let g = graph_of("big 999\ntiny;x;y 1");
        let mut view = Viewport::whole(g.root_total(), 100.0, 200.0, true);
        let parents = g.parents();
        let tiny = g.find_path(&["tiny"]).unwrap();
        let left = node_left(&g, &parents, tiny);
        assert_eq!(left, 999.0);
        view.x0 = left;
        view.x1 = left + 1.0;
        let mut placed = Vec::new();
        layout(&g, &view, &mut placed);
        assert_eq!(names(&g, &placed), ["all", "tiny", "x", "y"]);
        assert_eq!(placed[1].x, 0.0);
        assert_eq!(placed[1].w, 100.0);
    }

    #[test]
    fn rows_below_the_canvas_are_not_walked() {
        let g = graph_of("a;b;c;d;e;f 1");
        // Room for two rows.
        let view = Viewport::whole(g.root_total(), 100.0, 2.0 * ROW_HEIGHT, true);
        let mut placed = Vec::new();
        let stats = layout(&g, &view, &mut placed);
        assert_eq!(names(&g, &placed), ["all", "a"]);
        assert_eq!(stats.skipped, 5);
        // Scrolled three rows deeper: the first rows are walked, not drawn.
        let deeper = Viewport {
            first_row: 3.0,
            ..view
        };
        layout(&g, &deeper, &mut placed);
        assert_eq!(names(&g, &placed), ["c", "d"]);
        assert_eq!(placed[0].y, 0.0);
    }

    #[test]
    fn zoom_keeps_the_pointed_sample_and_stays_inside_the_graph() {
        let mut view = Viewport::whole(1000, 100.0, 100.0, true);
        view.zoom(4.0, 50.0, 1000);
        assert_eq!((view.x0, view.x1), (375.0, 625.0));
        view.pan(-1000.0, 0.0, 1000, 5);
        assert_eq!(view.x0, 0.0);
        view.zoom(0.001, 10.0, 1000);
        assert_eq!((view.x0, view.x1), (0.0, 1000.0));
    }

    #[test]
    fn hit_finds_the_node_under_the_pointer() {
        let g = graph_of("main;a 30\nmain;b 10");
        let view = Viewport::whole(g.root_total(), 40.0, 100.0, true);
        let mut placed = Vec::new();
        layout(&g, &view, &mut placed);
        let b = hit(&placed, &view, 35.0, 2.5 * ROW_HEIGHT).unwrap();
        assert_eq!(g.name(b as usize), "b");
        assert_eq!(hit(&placed, &view, 35.0, 5.0 * ROW_HEIGHT), None);
    }
}
