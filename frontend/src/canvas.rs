//! Drawing a flamegraph on a 2D canvas sized to its box (device-pixel-ratio
//! aware; the canvas never grows with the graph), with the statistics of
//! each frame published for tests and benchmarks.

use std::sync::Arc;

use js_sys::{Object, Reflect};
use wasm_bindgen::prelude::Closure;
use wasm_bindgen::{JsCast, JsValue};
use web_sys::{CanvasRenderingContext2d, HtmlCanvasElement};

use crate::diff::Diff;
use crate::figures;
use crate::graph::Graph;
use crate::layout::{LayoutStats, Placed, Viewport, hit, layout, node_left};
use crate::palette::{self, Rgb};
use crate::search::Search;
use crate::state::{ColorBy, Span};

/// How nodes are coloured.
#[derive(Debug, Clone, Default)]
pub struct Paint {
    /// By kind or by binary.
    pub color: ColorBy,
    /// The search: matching frames are highlighted, the others dimmed.
    pub search: Option<Search>,
    /// The diff against a baseline: red for growth, blue for shrink,
    /// muted where the comparison found only noise; it
    /// applies to its own merged graph only.
    pub diff: Option<Arc<Diff>>,
    /// Light theme.
    pub light: bool,
}

/// What the pointer is over.
#[derive(Debug, Clone, PartialEq)]
pub struct Hover {
    /// Canvas position of the pointer.
    pub x: f64,
    /// Canvas position of the pointer.
    pub y: f64,
    /// Canvas size, so that the tooltip can open towards the roomier side.
    pub width: f64,
    /// Canvas height.
    pub height: f64,
    /// Function name.
    pub name: String,
    /// Binary, kind, source: the second line of the tooltip.
    pub detail: String,
    /// Self and total, in cores and % of all samples.
    pub figures: String,
}

impl Hover {
    /// CSS placing the tooltip beside the pointer, on the side with room.
    pub fn placement(&self) -> String {
        const OFFSET: f64 = 14.0;
        let horizontal = if self.x < self.width * 0.6 {
            format!("left:{}px", self.x + OFFSET)
        } else {
            format!("right:{}px", self.width - self.x + OFFSET)
        };
        let vertical = if self.y < self.height * 0.6 {
            format!("top:{}px", self.y + OFFSET)
        } else {
            format!("bottom:{}px", self.height - self.y + OFFSET)
        };
        format!("{horizontal};{vertical}")
    }
}

/// A canvas showing one graph, with its view and what it last drew.
#[derive(Debug)]
pub struct FlameCanvas {
    canvas: HtmlCanvasElement,
    graph: Option<Arc<Graph>>,
    parents: Option<Vec<u32>>,
    /// Deepest depth of the graph: how far down the view may scroll.
    max_depth: u32,
    view: Viewport,
    placed: Vec<Placed>,
    paint: Arc<Paint>,
    /// Whether each frame of the graph matches the paint's search.
    matches: Option<Vec<bool>>,
    /// Colour of each frame under the current paint, by frame index.
    colors: Vec<Option<String>>,
    frames_drawn: u64,
    /// Where the statistics of each frame go (a `window` property), if
    /// anywhere.
    stats: Option<Object>,
    /// The `find` function published with the statistics; it calls back
    /// into this canvas, so it lives exactly as long.
    find: Option<Closure<dyn Fn(String) -> JsValue>>,
}

impl FlameCanvas {
    /// A canvas that publishes its statistics as `window[stats_key]` when
    /// `stats_key` is not empty.
    pub fn new(canvas: HtmlCanvasElement, stats_key: &str) -> Self {
        let stats = (!stats_key.is_empty()).then(|| {
            let stats = Object::new();
            if let Some(window) = web_sys::window() {
                let _ = Reflect::set(&window, &stats_key.into(), &stats);
            }
            stats
        });
        Self {
            canvas,
            graph: None,
            parents: None,
            max_depth: 0,
            view: Viewport::whole(1, 1.0, 1.0, false),
            placed: Vec::new(),
            paint: Arc::default(),
            matches: None,
            colors: Vec::new(),
            frames_drawn: 0,
            stats,
            find: None,
        }
    }

    /// Whether this draws on `canvas` (a remounted component has a new one).
    pub fn is_on(&self, canvas: &HtmlCanvasElement) -> bool {
        self.canvas == *canvas
    }

    /// Publishes `find` as `window[stats_key].find`, keeping it alive.
    pub fn publish_find(&mut self, find: Closure<dyn Fn(String) -> JsValue>) {
        if let Some(stats) = &self.stats {
            let _ = Reflect::set(stats, &"find".into(), find.as_ref());
        }
        self.find = Some(find);
    }

    /// The graph shown, if any.
    pub fn graph(&self) -> Option<&Arc<Graph>> {
        self.graph.as_ref()
    }

    /// Shows `graph` whole.
    pub fn set_graph(&mut self, graph: Option<Arc<Graph>>) {
        self.max_depth = graph.as_deref().map_or(0, max_depth);
        self.graph = graph;
        self.parents = None;
        self.reset_zoom();
        self.repaint();
    }

    /// Sets the colouring.
    pub fn set_paint(&mut self, paint: Arc<Paint>) {
        self.paint = paint;
        self.repaint();
    }

    /// Drops colours and matches computed for the previous graph or paint.
    fn repaint(&mut self) {
        self.colors.clear();
        self.matches = self
            .graph
            .as_ref()
            .zip(self.paint.search.as_ref())
            .map(|(graph, search)| search.frame_mask(graph));
    }

    /// Sets the orientation.
    pub fn set_icicle(&mut self, icicle: bool) {
        self.view.icicle = icicle;
    }

    /// Shows the whole graph again.
    pub fn reset_zoom(&mut self) {
        let total = self.graph.as_ref().map_or(1, |g| g.root_total());
        self.view = Viewport::whole(total, self.view.width, self.view.height, self.view.icicle);
    }

    /// Zooms to the node at `path` (names below the root); whole graph when
    /// the path is empty or not in the graph.
    pub fn focus(&mut self, path: &[String]) {
        self.reset_zoom();
        let Some(graph) = self.graph.clone() else {
            return;
        };
        let names: Vec<&str> = path.iter().map(String::as_str).collect();
        let Some(node) = graph.find_path(&names).filter(|&n| n != 0) else {
            return;
        };
        let left = node_left(&graph, self.parents(), node);
        self.view.x0 = left;
        self.view.x1 = left + graph.total(node).max(1) as f64;
    }

    fn parents(&mut self) -> &[u32] {
        let graph = self.graph.as_ref().expect("parents of a graph");
        self.parents.get_or_insert_with(|| graph.parents())
    }

    /// The path (names below the root) of the node under canvas (x, y).
    pub fn path_at(&mut self, x: f64, y: f64) -> Option<Vec<String>> {
        let node = hit(&self.placed, &self.view, x, y)? as usize;
        let graph = self.graph.clone()?;
        let parents = self.parents();
        Some(
            graph
                .path_of(node, parents)
                .into_iter()
                .map(str::to_owned)
                .collect(),
        )
    }

    /// The first drawn node named `name`: its box in canvas pixels.
    pub fn find(&self, name: &str) -> Option<(f64, f64, f64, f64)> {
        let graph = self.graph.as_ref()?;
        self.placed
            .iter()
            .find(|p| graph.name(p.node as usize) == name)
            .map(|p| {
                let x = p.x.max(0.0);
                let w = (p.x + p.w).min(self.view.width) - x;
                (x, p.y, w, self.view.row_height)
            })
    }

    /// What the canvas shows, as fractions of the graph's width (for the
    /// URL); `None` without a graph.
    pub fn span(&self) -> Option<Span> {
        let total = self.graph.as_ref()?.root_total().max(1) as f64;
        Some(Span {
            x0: self.view.x0 / total,
            x1: self.view.x1 / total,
            first_row: self.view.first_row,
        })
    }

    /// Shows `span` (as [`span`](Self::span) gave it), kept within the
    /// graph.
    pub fn set_span(&mut self, span: Span) {
        let Some(graph) = &self.graph else { return };
        let total = graph.root_total();
        self.view.x0 = span.x0 * total.max(1) as f64;
        self.view.x1 = span.x1 * total.max(1) as f64;
        self.view.first_row = span.first_row;
        self.view.pan(0.0, 0.0, total, self.max_depth);
    }

    /// Pans by pointer movement in canvas pixels.
    pub fn pan(&mut self, dx: f64, dy: f64) {
        let Some(graph) = &self.graph else { return };
        let rows = if self.view.icicle { -dy } else { dy } / self.view.row_height;
        self.view.pan(-dx, rows, graph.root_total(), self.max_depth);
    }

    /// Zooms by `factor` around canvas x.
    pub fn zoom(&mut self, factor: f64, x: f64) {
        if let Some(graph) = &self.graph {
            self.view.zoom(factor, x, graph.root_total());
        }
    }

    /// What the tooltip says about the node under canvas (x, y).
    pub fn hover(&self, x: f64, y: f64) -> Option<Hover> {
        let graph = self.graph.as_ref()?;
        let i = hit(&self.placed, &self.view, x, y)? as usize;
        let total = graph.total(i);
        let self_count = graph.self_count(i);
        let root = graph.root_total().max(1) as f64;
        let module = graph.module(i);
        let mut detail = format!(
            "{} · {}",
            graph.kind(i).as_str(),
            if module.is_empty() {
                "unknown binary"
            } else {
                module
            }
        );
        let frame = graph.view().node_frame(i);
        if frame.file != 0 {
            let file = graph.wire().string(frame.file.to_native());
            match frame.line.to_native() {
                0 => detail.push_str(&format!(" · {file}")),
                line => detail.push_str(&format!(" · {file}:{line}")),
            }
        }
        // The diff's merged graph weighs both ranges: its own counts mean
        // nothing to a reader, the two ranges' samples do.
        let figures = match self.diff_of(graph) {
            Some(diff) => format!(
                "now {} samples ({:.2}%) · baseline {} samples ({:.2}%) → {:+.2} points{}",
                diff.now(i),
                diff.now_share(i) * 100.0,
                diff.base(i),
                diff.base_share(i) * 100.0,
                diff.delta_points(i),
                match diff.significant(i) {
                    Some(true) => " · the function changed significantly",
                    Some(false) => " · within sampling noise",
                    None => "",
                }
            ),
            None => format!(
                "self {} cores ({:.2}%) · total {} cores ({:.2}%) · {} samples",
                figures::cores(graph.cores(self_count)),
                self_count as f64 * 100.0 / root,
                figures::cores(graph.cores(total)),
                total as f64 * 100.0 / root,
                total
            ),
        };
        Some(Hover {
            x,
            y,
            width: self.view.width,
            height: self.view.height,
            name: graph.name(i).to_owned(),
            detail,
            figures,
        })
    }

    /// The paint's diff when `graph` is its merged graph (the graph and
    /// the paint arrive apart: for a moment one may be newer).
    fn diff_of(&self, graph: &Arc<Graph>) -> Option<&Diff> {
        self.paint
            .diff
            .as_deref()
            .filter(|d| Arc::ptr_eq(&d.graph, graph))
    }

    /// Lays out and draws one frame, sizing the canvas to its box first.
    pub fn draw(&mut self) {
        let start = now_ms();
        let window = web_sys::window().expect("a window");
        let dpr = window.device_pixel_ratio().max(1.0);
        let (width, height) = match self.canvas.parent_element() {
            Some(parent) => (parent.client_width() as f64, parent.client_height() as f64),
            None => (300.0, 150.0),
        };
        let (px_w, px_h) = ((width * dpr).round() as u32, (height * dpr).round() as u32);
        if self.canvas.width() != px_w || self.canvas.height() != px_h {
            self.canvas.set_width(px_w);
            self.canvas.set_height(px_h);
            let style = self.canvas.style();
            let _ = style.set_property("width", &format!("{width}px"));
            let _ = style.set_property("height", &format!("{height}px"));
        }
        self.view.width = width.max(1.0);
        self.view.height = height.max(1.0);
        let Some(ctx) = context(&self.canvas) else {
            return;
        };
        let _ = ctx.set_transform(dpr, 0.0, 0.0, dpr, 0.0, 0.0);
        ctx.clear_rect(0.0, 0.0, width, height);
        let Some(graph) = self.graph.clone() else {
            self.placed.clear();
            return;
        };
        let stats = layout(&graph, &self.view, &mut self.placed);
        self.paint_nodes(&ctx, &graph);
        self.frames_drawn += 1;
        self.publish(&graph, stats, now_ms() - start, dpr);
    }

    fn paint_nodes(&mut self, ctx: &CanvasRenderingContext2d, graph: &Arc<Graph>) {
        if self.colors.len() != graph.wire().frames.len() {
            self.colors = vec![None; graph.wire().frames.len()];
        }
        let row = self.view.row_height;
        let width = self.view.width;
        ctx.set_font("12px ui-monospace, SFMono-Regular, Menlo, Consolas, monospace");
        ctx.set_text_baseline("middle");
        let text_color = "#1d1b19";
        for p in &self.placed {
            let i = p.node as usize;
            let x = p.x.max(0.0);
            let right = (p.x + p.w).min(width);
            let w = right - x;
            let gap = if w > 3.0 { 0.5 } else { 0.0 };
            match self.diff_of(graph) {
                Some(diff) => {
                    let color = palette::diff_node(diff.delta_points(i), diff.significant(i));
                    ctx.set_fill_style_str(&color.css());
                }
                None => {
                    let frame = graph.frame(i) as usize;
                    let color = self.colors[frame].get_or_insert_with(|| {
                        node_color(&self.paint, self.matches.as_deref(), graph, i, frame).css()
                    });
                    ctx.set_fill_style_str(color);
                }
            }
            ctx.fill_rect(x, p.y, w - gap, row - 1.0);
            if w > 24.0 {
                let chars = ((w - 6.0) / 7.2) as usize;
                let name = graph.name(i);
                let label: String = if name.chars().count() > chars {
                    let mut cut: String = name.chars().take(chars.saturating_sub(1)).collect();
                    cut.push('…');
                    cut
                } else {
                    name.to_owned()
                };
                ctx.set_fill_style_str(text_color);
                let _ = ctx.fill_text(&label, x + 3.0, p.y + row / 2.0);
            }
        }
    }

    /// Writes the frame's statistics into `window[stats_key]`.
    fn publish(&self, graph: &Graph, stats: LayoutStats, frame_ms: f64, dpr: f64) {
        let Some(object) = &self.stats else { return };
        let set = |key: &str, value: JsValue| {
            let _ = Reflect::set(object, &key.into(), &value);
        };
        set("nodes_drawn", (stats.drawn as f64).into());
        set("nodes_skipped", (stats.skipped as f64).into());
        set("nodes_visited", (stats.visited as f64).into());
        set("node_count", (graph.node_count() as f64).into());
        set("root_total", (graph.root_total() as f64).into());
        set("flamewire_bytes", (graph.byte_len() as f64).into());
        set("load_ms", graph.load_ms().into());
        set("frame_ms", frame_ms.into());
        set("frames", (self.frames_drawn as f64).into());
        set("canvas_width", self.canvas.width().into());
        set("canvas_height", self.canvas.height().into());
        set("device_pixel_ratio", dpr.into());
        set("x0", self.view.x0.into());
        set("x1", self.view.x1.into());
        set("first_row", self.view.first_row.into());
    }

    /// The drawn nodes as an SVG document (what the canvas shows, as
    /// vectors).
    pub fn to_svg(&self) -> String {
        let Some(graph) = &self.graph else {
            return String::new();
        };
        let (w, h) = (self.view.width, self.view.height);
        let mut svg = format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"monospace\" font-size=\"12\">"
        );
        for p in &self.placed {
            let i = p.node as usize;
            let x = p.x.max(0.0);
            let pw = (p.x + p.w).min(w) - x;
            let color = match self.diff_of(graph) {
                Some(diff) => palette::diff_node(diff.delta_points(i), diff.significant(i)),
                None => node_color(
                    &self.paint,
                    self.matches.as_deref(),
                    graph,
                    i,
                    graph.frame(i) as usize,
                ),
            };
            let name = escape_xml(graph.name(i));
            svg.push_str(&format!(
                "<g><title>{name}</title><rect x=\"{x:.1}\" y=\"{:.1}\" width=\"{pw:.1}\" height=\"{:.1}\" fill=\"{}\"/>",
                p.y,
                self.view.row_height - 1.0,
                color.css()
            ));
            if pw > 24.0 {
                let chars = ((pw - 6.0) / 7.2) as usize;
                let label: String = graph.name(i).chars().take(chars).collect();
                svg.push_str(&format!(
                    "<text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
                    x + 3.0,
                    p.y + 13.0,
                    escape_xml(&label)
                ));
            }
            svg.push_str("</g>");
        }
        svg.push_str("</svg>");
        svg
    }

    /// The canvas as a PNG data URL.
    pub fn to_png_url(&self) -> Option<String> {
        self.canvas.to_data_url_with_type("image/png").ok()
    }
}

/// Deepest depth of the graph (for scrolling limits).
fn max_depth(graph: &Graph) -> u32 {
    graph.wire().nodes.depth.max() as u32
}

fn node_color(
    paint: &Paint,
    matches: Option<&[bool]>,
    graph: &Graph,
    i: usize,
    frame: usize,
) -> Rgb {
    let base = match paint.color {
        ColorBy::Kind => palette::by_kind(graph.kind(i), graph.name(i)),
        ColorBy::Binary => palette::by_binary(graph.module(i), graph.name(i)),
    };
    match matches {
        Some(matches) if matches[frame] => palette::MATCH,
        Some(_) => base.mix(
            if paint.light {
                Rgb(0xf4, 0xf2, 0xee)
            } else {
                Rgb(0x3a, 0x3d, 0x42)
            },
            0.7,
        ),
        None => base,
    }
}

fn context(canvas: &HtmlCanvasElement) -> Option<CanvasRenderingContext2d> {
    canvas
        .get_context("2d")
        .ok()
        .flatten()?
        .dyn_into::<CanvasRenderingContext2d>()
        .ok()
}

/// Milliseconds from the page's clock.
pub fn now_ms() -> f64 {
    web_sys::window()
        .and_then(|w| w.performance())
        .map_or(0.0, |p| p.now())
}

fn escape_xml(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}
