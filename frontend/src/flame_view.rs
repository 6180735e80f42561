//! The flamegraph component: a canvas in a box, with pan (drag), zoom
//! (wheel), click to focus and a hover tooltip.

use std::sync::Arc;
use std::time::Duration;

use leptos::html;
use leptos::prelude::*;
use wasm_bindgen::prelude::Closure;
use wasm_bindgen::{JsCast, JsValue};

use crate::canvas::{FlameCanvas, Hover, Paint};
use crate::graph::Graph;
use crate::state::Span;

/// The handle through which the page reaches a flame's canvas (exports).
pub type CanvasHandle = StoredValue<Option<FlameCanvas>, LocalStorage>;

/// Pointer travel (CSS pixels) under which a press and release is a click.
const CLICK_SLOP: f64 = 4.0;

/// Quiet time after the last wheel or drag event before the view goes to
/// the URL: history is not rewritten on every frame of a pan.
const SPAN_REPORT_DELAY: Duration = Duration::from_millis(250);

/// A press on the canvas, followed while the button is down.
#[derive(Debug, Clone, Copy)]
struct Press {
    last_x: f64,
    last_y: f64,
    travel: f64,
}

/// What the last applied view came from, so that a repaint (search,
/// colours) keeps the user's zoom while a new graph, focus or reset does
/// not.
#[derive(Debug, Clone, PartialEq)]
struct Applied {
    graph: usize,
    focus: Vec<String>,
    reset: u32,
}

/// A flamegraph on canvas. `stats_key` names the `window` property its
/// render statistics go to ("" for none).
#[component]
pub fn Flame(
    graph: Signal<Option<Arc<Graph>>>,
    paint: Signal<Arc<Paint>>,
    icicle: Signal<bool>,
    focus: Signal<Vec<String>>,
    on_focus: Callback<Vec<String>>,
    reset: Signal<u32>,
    handle: CanvasHandle,
    #[prop(default = "")] stats_key: &'static str,
    /// Zoom and pan to show when a graph, focus or reset is applied (read
    /// then, not followed: the canvas itself is what moves). Default: none.
    #[prop(optional)]
    span: Signal<Option<Span>>,
    /// Called with the view a while after the user zooms or pans
    /// ([`SPAN_REPORT_DELAY`]). Default: not called.
    #[prop(optional)]
    on_span: Option<Callback<Span>>,
) -> impl IntoView {
    let canvas_ref = NodeRef::<html::Canvas>::new();
    let hover = RwSignal::new(None::<Hover>);
    let press = StoredValue::new_local(None::<Press>);
    let applied = StoredValue::new_local(None::<Applied>);
    let pending_report = StoredValue::new_local(None::<TimeoutHandle>);
    // Reports the view once the user has stopped moving it.
    let moved = move || {
        let Some(on_span) = on_span else { return };
        if let Some(earlier) = pending_report.get_value() {
            earlier.clear();
        }
        let report = move || {
            let shown = handle
                .try_with_value(|f| f.as_ref().and_then(FlameCanvas::span))
                .flatten();
            if let Some(shown) = shown {
                on_span.run(shown);
            }
        };
        pending_report.set_value(set_timeout_with_handle(report, SPAN_REPORT_DELAY).ok());
    };

    Effect::new(move |_| {
        let Some(element) = canvas_ref.get() else {
            return;
        };
        let graph = graph.get();
        let paint = paint.get();
        let icicle = icicle.get();
        let wanted = Applied {
            graph: graph.as_ref().map_or(0, |g| Arc::as_ptr(g) as usize),
            focus: focus.get(),
            reset: reset.get(),
        };
        handle.update_value(|slot| {
            let fresh = !slot.as_ref().is_some_and(|f| f.is_on(&element));
            if fresh {
                let mut flame = FlameCanvas::new(element.clone(), stats_key);
                if !stats_key.is_empty() {
                    flame.publish_find(find_function(handle));
                }
                *slot = Some(flame);
            }
            let flame = slot.as_mut().expect("just filled");
            let same_view = !fresh && applied.with_value(|a| a.as_ref() == Some(&wanted));
            if !same_view {
                if fresh || wanted.graph != flame.graph().map_or(0, |g| Arc::as_ptr(g) as usize) {
                    flame.set_graph(graph);
                }
                flame.focus(&wanted.focus);
                if let Some(span) = span.get_untracked() {
                    flame.set_span(span);
                }
            }
            flame.set_paint(paint);
            flame.set_icicle(icicle);
            flame.draw();
        });
        applied.set_value(Some(wanted));
        hover.set(None);
    });

    // Redraw whenever the canvas's box changes size (window resize, the
    // sandwich opening below): the canvas is always exactly its box.
    let box_ref = NodeRef::<html::Div>::new();
    let observer = StoredValue::new_local(None::<ResizeWatch>);
    Effect::new(move |_| {
        let Some(element) = box_ref.get() else {
            return;
        };
        let redraw = Closure::<dyn Fn()>::new(move || {
            let _ = handle.try_update_value(|f| f.iter_mut().for_each(FlameCanvas::draw));
        });
        let Ok(watch) = web_sys::ResizeObserver::new(redraw.as_ref().unchecked_ref()) else {
            return;
        };
        watch.observe(&element);
        observer.set_value(Some(ResizeWatch {
            observer: watch,
            _callback: redraw,
        }));
    });
    on_cleanup(move || {
        observer.try_update_value(|watch| {
            if let Some(watch) = watch.take() {
                watch.observer.disconnect();
            }
        });
    });

    let position = move |e: &web_sys::MouseEvent| {
        let rect = canvas_ref
            .get_untracked()
            .map(|c| c.get_bounding_client_rect());
        rect.map_or((0.0, 0.0), |r| {
            (
                e.client_x() as f64 - r.left(),
                e.client_y() as f64 - r.top(),
            )
        })
    };
    let on_down = move |e: web_sys::MouseEvent| {
        let (x, y) = position(&e);
        press.set_value(Some(Press {
            last_x: x,
            last_y: y,
            travel: 0.0,
        }));
    };
    let on_move = move |e: web_sys::MouseEvent| {
        let (x, y) = position(&e);
        let held = press.get_value().filter(|_| e.buttons() & 1 == 1);
        match held {
            Some(p) => {
                let (dx, dy) = (x - p.last_x, y - p.last_y);
                let travel = p.travel + dx.abs() + dy.abs();
                press.set_value(Some(Press {
                    last_x: x,
                    last_y: y,
                    travel,
                }));
                if travel >= CLICK_SLOP {
                    handle.update_value(|f| {
                        if let Some(f) = f {
                            f.pan(dx, dy);
                            f.draw();
                        }
                    });
                    hover.set(None);
                    moved();
                }
            }
            None => {
                let over = handle.with_value(|f| f.as_ref().and_then(|f| f.hover(x, y)));
                hover.set(over);
            }
        }
    };
    let on_up = move |e: web_sys::MouseEvent| {
        let Some(p) = press.get_value() else { return };
        press.set_value(None);
        if p.travel < CLICK_SLOP {
            let (x, y) = position(&e);
            let path = handle.update_value_and(|f| f.as_mut().and_then(|f| f.path_at(x, y)));
            if let Some(path) = path {
                on_focus.run(path);
            }
        }
    };
    let on_wheel = move |e: web_sys::WheelEvent| {
        e.prevent_default();
        let (x, _) = position(&e);
        let dy = e.delta_y();
        let dx = e.delta_x();
        handle.update_value(|f| {
            if let Some(f) = f {
                if dx.abs() > dy.abs() {
                    f.pan(-dx, 0.0);
                } else {
                    f.zoom((-dy * 0.002).exp(), x);
                }
                f.draw();
            }
        });
        moved();
    };
    let on_leave = move |_| {
        press.set_value(None);
        hover.set(None);
    };

    view! {
        <div class="flame-box" node_ref=box_ref>
            <canvas
                node_ref=canvas_ref
                class="flame-canvas"
                on:mousedown=on_down
                on:mousemove=on_move
                on:mouseup=on_up
                on:wheel=on_wheel
                on:mouseleave=on_leave
            ></canvas>
            {move || {
                hover
                    .get()
                    .map(|h| {
                        let placement = h.placement();
                        view! {
                            <div class="tooltip" style=placement>
                                <div class="tooltip-name">{h.name}</div>
                                <div class="tooltip-detail">{h.detail}</div>
                                <div class="tooltip-figures">{h.figures}</div>
                            </div>
                        }
                    })
            }}
        </div>
    }
}

/// A `ResizeObserver` and the callback it calls, kept alive together.
struct ResizeWatch {
    observer: web_sys::ResizeObserver,
    _callback: Closure<dyn Fn()>,
}

/// Small extension: update a stored value and return something from it.
trait UpdateValueAnd<T> {
    fn update_value_and<U>(&self, f: impl FnOnce(&mut T) -> U) -> U;
}

impl<T: 'static> UpdateValueAnd<T> for StoredValue<T, LocalStorage> {
    fn update_value_and<U>(&self, f: impl FnOnce(&mut T) -> U) -> U {
        let mut out = None;
        self.update_value(|v| out = Some(f(v)));
        out.expect("update_value runs its closure")
    }
}

/// The function published as `window[stats_key].find(name)`: the box
/// `{x, y, w, h}` (canvas CSS pixels) of the first drawn node named `name`,
/// or null. Tests hover and click known frames through it.
fn find_function(handle: CanvasHandle) -> Closure<dyn Fn(String) -> JsValue> {
    Closure::new(move |name: String| {
        let found = handle
            .try_with_value(|f| f.as_ref().and_then(|f| f.find(&name)))
            .flatten();
        match found {
            Some((x, y, w, h)) => {
                let object = js_sys::Object::new();
                for (key, value) in [("x", x), ("y", y), ("w", w), ("h", h)] {
                    let _ = js_sys::Reflect::set(&object, &key.into(), &value.into());
                }
                object.into()
            }
            None => JsValue::NULL,
        }
    })
}
