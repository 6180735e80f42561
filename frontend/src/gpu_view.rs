//! The GPU view, shown when the range holds GPU kernels: a kernel table
//! (launches, total and mean time, share of GPU time, PC samples), and for
//! the kernel picked its sampled SASS instructions, each with a bar of its
//! samples coloured by stall reason; links download GPU time per kernel as
//! a Perfetto trace. Data from `/api/v1/gpu/*`.

use kiln_model::{GpuInstructions, GpuKernelRow, GpuKernels, GpuStallCount};
use leptos::prelude::*;

use crate::figures::{duration_ns, percent_of};
use crate::load::Load;
use crate::palette::{Rgb, hsl};

/// The GPU panel; nothing when the range has no kernels (or the answer
/// failed: the flamegraph says why).
#[component]
pub fn GpuView(
    /// `/api/v1/gpu/kernels`.
    kernels: Signal<Load<GpuKernels>>,
    /// `/api/v1/gpu/instructions` of the open kernel.
    instructions: Signal<Load<GpuInstructions>>,
    /// The open kernel's name ("" for none).
    open: Signal<String>,
    /// Called with a kernel's name to open it, "" to close.
    on_open: Callback<String>,
    /// The API query of the range and filters, for the trace links.
    query: Signal<String>,
) -> impl IntoView {
    // Keep the last table while a new range loads, so the page does not
    // jump.
    let shown = RwSignal::new(None::<GpuKernels>);
    Effect::new(move |_| match kernels.get() {
        Load::Ready(table) => shown.set(Some(table)),
        Load::Failed(_) => shown.set(None),
        Load::Loading => {}
    });
    move || {
        let table = shown.get().filter(|t| !t.kernels.is_empty())?;
        let summary = format!(
            "{} kernels · {} GPU time · {} PC samples",
            table.kernels.len(),
            duration_ns(table.total_ns),
            table.total_pc_samples
        );
        // The open kernel's name as the table shows it.
        let names: Vec<(String, String)> = table
            .kernels
            .iter()
            .map(|k| {
                (
                    k.name.clone(),
                    k.demangled.clone().unwrap_or_else(|| k.name.clone()),
                )
            })
            .collect();
        let open_label = Signal::derive(move || {
            let open = open.get();
            names
                .iter()
                .find(|(name, _)| *name == open)
                .map_or(open.clone(), |(_, shown)| shown.clone())
        });
        let trace_all = move || trace_url(&query.get(), None);
        let rows = table
            .kernels
            .into_iter()
            .map(|row| kernel_row(row, open, on_open))
            .collect_view();
        Some(view! {
            <section class="panel gpu-panel">
                <div class="gpu-head">
                    <h2>"GPU kernels"</h2>
                    <span class="muted gpu-summary">{summary}</span>
                    <a class="gpu-trace" href=trace_all download="kiln-gpu-trace.json"
                        title="GPU time per kernel over the range, as a Chrome JSON trace: open it at ui.perfetto.dev">
                        "Perfetto trace"
                    </a>
                </div>
                <table class="gpu-table">
                    <thead>
                        <tr>
                            <th>"kernel"</th>
                            <th class="num">"launches"</th>
                            <th class="num">"total"</th>
                            <th class="num">"mean"</th>
                            <th>"GPU time"</th>
                            <th class="num">"PC samples"</th>
                        </tr>
                    </thead>
                    <tbody>{rows}</tbody>
                </table>
                {move || (!open.get().is_empty()).then(|| view! {
                    <SassView data=instructions open=open label=open_label on_close=on_open query=query />
                })}
            </section>
        })
    }
}

fn kernel_row(row: GpuKernelRow, open: Signal<String>, on_open: Callback<String>) -> impl IntoView {
    let name = row.name.clone();
    let shown_name = row.demangled.clone().unwrap_or_else(|| row.name.clone());
    let is_open = {
        let name = name.clone();
        move || open.with(|o| *o == name)
    };
    let click = {
        let name = name.clone();
        move |_| {
            on_open.run(if open.with(|o| *o == name) {
                String::new()
            } else {
                name.clone()
            })
        }
    };
    let share = row.gpu_time_share;
    let title = name.clone();
    view! {
        <tr class="gpu-row" class:open=is_open data-kernel=name on:click=click>
            <td class="fn-name kernel-name" title=title>{shown_name}</td>
            <td class="num launches">{row.launches}</td>
            <td class="num">{duration_ns(row.total_ns)}</td>
            <td class="num">{(row.launches > 0).then(|| duration_ns(row.mean_ns))}</td>
            <td class="share-cell">
                <span class="share-bar" style:width=format!("{:.1}%", share * 100.0)></span>
                <span class="share-text">{percent_of(share)}</span>
            </td>
            <td class="num pc-samples">{row.pc_samples}</td>
        </tr>
    }
}

/// The open kernel's SASS instructions.
#[component]
fn SassView(
    data: Signal<Load<GpuInstructions>>,
    open: Signal<String>,
    /// The open kernel's name as the table shows it (demangled).
    label: Signal<String>,
    on_close: Callback<String>,
    query: Signal<String>,
) -> impl IntoView {
    let trace_one = move || trace_url(&query.get(), Some(&open.get()));
    let body = move || match data.get() {
        Load::Loading => {
            view! { <p class="muted">"Loading the kernel's instructions…"</p> }.into_any()
        }
        Load::Failed(message) => view! { <p class="error">{message}</p> }.into_any(),
        Load::Ready(view) if view.instructions.is_empty() => view! {
            <p class="muted sass-empty">
                "No PC samples for this kernel in the range: PC sampling is off \
                 (KILN_CUDA_PC_SAMPLING=1 turns it on) or it did not run while the kernel did."
            </p>
        }
        .into_any(),
        Load::Ready(view) => sass_table(view).into_any(),
    };
    view! {
        <div class="sass">
            <div class="gpu-head">
                <h3>"SASS: " <span class="sass-kernel" title=move || open.get()>{move || label.get()}</span></h3>
                <a class="gpu-trace-kernel" href=trace_one download="kiln-gpu-trace.json"
                    title="this kernel's GPU time over the range, for ui.perfetto.dev">
                    "Perfetto trace"
                </a>
                <button class="close-sass" on:click=move |_| on_close.run(String::new())>"close"</button>
            </div>
            {body}
        </div>
    }
}

fn sass_table(view: GpuInstructions) -> impl IntoView {
    let most = view
        .instructions
        .iter()
        .map(|i| i.samples)
        .max()
        .unwrap_or(1)
        .max(1);
    let total = view.total_samples.max(1);
    let legend = view
        .stalls
        .iter()
        .map(|s| {
            view! {
                <span class="stall-key" data-reason=s.reason.clone()>
                    <span class="stall-swatch" style:background=stall_color(&s.reason).css()></span>
                    {s.reason.clone()}
                    " "
                    <span class="muted">{percent_of(s.samples as f64 / total as f64)}</span>
                </span>
            }
        })
        .collect_view();
    let rows = view
        .instructions
        .into_iter()
        .map(|i| {
            let title = stall_title(&i.stalls, i.samples);
            let segments = i
                .stalls
                .iter()
                .map(|s| {
                    let width = 100.0 * s.samples as f64 / most as f64;
                    view! {
                        <span class="stall-seg" data-reason=s.reason.clone()
                            style:width=format!("{width:.2}%")
                            style:background=stall_color(&s.reason).css()></span>
                    }
                })
                .collect_view();
            view! {
                <tr class="sass-row" data-offset=format!("{:#x}", i.offset)>
                    <td class="num sass-offset">{format!("+{:#06x}", i.offset)}</td>
                    <td class="sass-text">{i.text.unwrap_or_default()}</td>
                    <td class="num sass-samples">{i.samples}</td>
                    <td class="stall-bar" title=title>{segments}</td>
                </tr>
            }
        })
        .collect_view();
    view! {
        <div class="stall-legend">{legend}</div>
        <table class="sass-table">
            <thead>
                <tr>
                    <th class="num">"offset"</th>
                    <th>"instruction"</th>
                    <th class="num">"samples"</th>
                    <th>"stall reasons"</th>
                </tr>
            </thead>
            <tbody>{rows}</tbody>
        </table>
    }
}

/// `long_scoreboard 30 (86%), selected 5 (14%)`, for a bar's tooltip.
fn stall_title(stalls: &[GpuStallCount], samples: u64) -> String {
    stalls
        .iter()
        .map(|s| {
            let share = s.samples as f64 / samples.max(1) as f64;
            format!("{} {} ({})", s.reason, s.samples, percent_of(share))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// `/api/v1/gpu/trace` of the range, for one kernel or the busiest.
fn trace_url(query: &str, kernel: Option<&str>) -> String {
    let mut url = String::from("/api/v1/gpu/trace?");
    if let Some(kernel) = kernel {
        url.push_str(
            &form_urlencoded::Serializer::new(String::new())
                .append_pair("kernel", kernel)
                .finish(),
        );
        url.push('&');
    }
    url.push_str(query);
    url
}

/// A stall reason's colour: fixed for the reasons a reader meets most, so
/// that memory waits read warm and issue-side ones cool from kernel to
/// kernel; others get a hue from their name.
pub fn stall_color(reason: &str) -> Rgb {
    let hue = match reason {
        "long_scoreboard" => 2.0,
        "lg_throttle" => 22.0,
        "mio_throttle" => 38.0,
        "short_scoreboard" => 48.0,
        "wait" => 200.0,
        "math_pipe_throttle" => 222.0,
        "tex_throttle" => 270.0,
        "barrier" | "membar" => 300.0,
        "selected" => 130.0,
        "not_selected" => 160.0,
        "no_instructions" | "branch_resolving" => 330.0,
        _ => {
            let hash = reason
                .bytes()
                .fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
            f64::from(hash % 360)
        }
    };
    hsl(hue, 0.62, 0.55)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_links_carry_the_kernel_and_the_range() {
        assert_eq!(
            trace_url("from=now-1h", None),
            "/api/v1/gpu/trace?from=now-1h"
        );
        assert_eq!(
            trace_url("from=now-1h&process=train", Some("_Z4gemmPfi")),
            "/api/v1/gpu/trace?kernel=_Z4gemmPfi&from=now-1h&process=train"
        );
    }

    #[test]
    fn stall_colours_are_stable_and_apart() {
        assert_eq!(
            stall_color("long_scoreboard"),
            stall_color("long_scoreboard")
        );
        assert_ne!(
            stall_color("long_scoreboard"),
            stall_color("math_pipe_throttle")
        );
        assert_eq!(stall_color("dispatch_stall"), stall_color("dispatch_stall"));
    }

    #[test]
    fn bar_titles_list_each_reason_with_its_share() {
        let stalls = [
            GpuStallCount {
                reason: "long_scoreboard".into(),
                samples: 30,
            },
            GpuStallCount {
                reason: "selected".into(),
                samples: 10,
            },
        ];
        assert_eq!(
            stall_title(&stalls, 40),
            "long_scoreboard 30 (75%), selected 10 (25%)"
        );
    }
}
