//! `gpu_kernels`: the range's GPU kernels by GPU time and, for one
//! kernel, the stall reasons of its hottest SASS instructions: the GPU
//! view's answers (`/api/v1/gpu/kernels`, `/api/v1/gpu/instructions`).

use kiln_model::{GpuInstructions, GpuKernels, GpuStallCount};
use kiln_storage::Scope;
use serde_json::json;

use super::super::super::AppState;
use super::super::super::error::ApiError;
use super::super::super::query::admit_and_query;
use super::{Answer, Args, describe, range_json, range_output, range_properties_and, share};
use crate::query::{GpuInstructionsQuery, GpuKernelsQuery};

pub(crate) const NAME: &str = "gpu_kernels";

pub(crate) fn tool() -> rmcp::model::Tool {
    super::tool(
        NAME,
        "GPU kernels",
        "The CUDA kernels of a range by GPU time: launches, total and mean time, share of GPU \
         time, PC samples. With `kernel` (a name as this tool lists it), also that kernel's \
         stall reasons and its hottest SASS instructions with the stall reasons of each (from \
         PC sampling).",
        range_properties_and(json!({
            "kernel": {
                "type": "string",
                "description": "A kernel's name as listed (the mangled name for C++ kernels): show its hottest instructions and their stall reasons.",
            },
            "limit": {
                "type": "integer", "minimum": 1, "maximum": 500, "default": 20,
                "description": "How many kernels to list.",
            },
            "instructions": {
                "type": "integer", "minimum": 1, "maximum": 200, "default": 10,
                "description": "How many of the kernel's hottest instructions to show.",
            },
        })),
        &[],
        json!({
            "range": range_output(),
            "kernels": {"type": "object"},
            "instructions": {"type": ["object", "null"]},
        }),
    )
}

pub(crate) async fn call(
    state: &AppState,
    scope: Scope,
    mut args: Args,
) -> Result<Answer, ApiError> {
    let range = args.range(scope)?;
    let kernel = args.string("kernel")?.filter(|k| !k.is_empty());
    let limit = args.whole("limit", 20, 1..=500)? as usize;
    let hottest = args.whole("instructions", 10, 1..=200)? as usize;
    args.finish(&["from", "to", "filters", "kernel", "limit", "instructions"])?;
    let kernels = admit_and_query(state, range.clone(), GpuKernelsQuery).await?;
    let mut text = format!("GPU kernels, {}: ", describe(&range));
    kernels_text(&kernels, limit, &mut text);
    let instructions = match kernel {
        None => None,
        Some(kernel) => {
            let found = admit_and_query(state, range.clone(), |range| GpuInstructionsQuery {
                range,
                kernel,
            })
            .await?;
            instructions_text(&found, hottest, &mut text);
            Some(found)
        }
    };
    Ok(Answer {
        text,
        structured: json!({
            "range": range_json(&range),
            "kernels": kernels,
            "instructions": instructions,
        }),
    })
}

fn kernels_text(kernels: &GpuKernels, limit: usize, text: &mut String) {
    if kernels.kernels.is_empty() {
        text.push_str("no GPU kernels in this range with these filters.\n");
        return;
    }
    text.push_str(&format!(
        "{} kernels, {:.3} s of GPU time, {} PC samples.\n",
        kernels.kernels.len(),
        kernels.total_ns as f64 / 1e9,
        kernels.total_pc_samples
    ));
    text.push_str("  share    total ms  launches     mean µs  PC samples  kernel\n");
    for k in kernels.kernels.iter().take(limit) {
        let name = match &k.demangled {
            Some(demangled) => format!("{demangled} [{}]", k.name),
            None => k.name.clone(),
        };
        text.push_str(&format!(
            "{:>6.2}%  {:>10.3}  {:>8}  {:>10.3}  {:>10}  {name}\n",
            k.gpu_time_share * 100.0,
            k.total_ns as f64 / 1e6,
            k.launches,
            k.mean_ns as f64 / 1e3,
            k.pc_samples,
        ));
    }
    if kernels.kernels.len() > limit {
        text.push_str(&format!(
            "({} more kernels not listed.)\n",
            kernels.kernels.len() - limit
        ));
    }
}

fn stalls_text(stalls: &[GpuStallCount], of: u64) -> String {
    stalls
        .iter()
        .map(|s| format!("{} {:.1}%", s.reason, share(s.samples, of) * 100.0))
        .collect::<Vec<_>>()
        .join(", ")
}

fn instructions_text(found: &GpuInstructions, hottest: usize, text: &mut String) {
    if found.total_samples == 0 {
        text.push_str(&format!(
            "\nKernel {}: no PC samples in this range (PC sampling off, or no such kernel: \
             give a name as listed above).\n",
            found.kernel
        ));
        return;
    }
    text.push_str(&format!(
        "\nKernel {}: {} PC samples; stall reasons: {}.\n",
        found.kernel,
        found.total_samples,
        stalls_text(&found.stalls, found.total_samples)
    ));
    let mut rows: Vec<_> = found.instructions.iter().collect();
    rows.sort_by(|a, b| b.samples.cmp(&a.samples).then(a.offset.cmp(&b.offset)));
    text.push_str(&format!(
        "Hottest instructions ({} of {}):\n",
        rows.len().min(hottest),
        rows.len()
    ));
    for row in rows.into_iter().take(hottest) {
        text.push_str(&format!(
            "  +0x{:04x}  {:<32}  {:>6.2}% of samples: {}\n",
            row.offset,
            row.text.as_deref().unwrap_or("?"),
            share(row.samples, found.total_samples) * 100.0,
            stalls_text(&row.stalls, row.samples),
        ));
    }
}
