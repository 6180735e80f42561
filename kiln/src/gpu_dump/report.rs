//! What `kiln gpu dump` prints: a line per event while it runs, then per
//! connection a text report and a JSON summary.
//!
//! The GPU check kit depends on both: `device.sh` cuts the text from the
//! first line starting `connection` to the one starting `  PC samples`,
//! and `verify.py` reads the JSON keys snapdump (the decoder this replaces)
//! wrote. Add keys; do not rename them.

use std::io::{self, Write};

use kiln_cuda::Snapshot;
use kiln_cuda::pcsampling::stall_description;
use kiln_cuda::wire::Counters;
use serde_json::{Value, json};

use super::collect::{Connection, End, PcSummary, counter_fields};

/// Folded stacks printed per connection.
const TOP_FOLDED: usize = 8;

/// One line per snapshot as it arrives.
pub(super) fn snapshot_line(index: usize, s: &Snapshot) -> String {
    format!(
        "snapshot conn={index} pid={} seq={} interval={:.3}s kernels={} pc_samples={} \
         stall_reasons={} cubins={} launches_so_far={}",
        s.pid,
        s.sequence,
        s.end_ns.saturating_sub(s.start_ns) as f64 / 1e9,
        s.kernels.len(),
        s.pc_samples.len(),
        s.stall_reasons.len(),
        s.cubins.len(),
        s.counters.launches
    )
}

/// `0-5, 7, 9-10`: the sequences in arrival order, runs collapsed.
fn ranges(sequences: &[u64]) -> String {
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for &s in sequences {
        match runs.last_mut() {
            Some((_, last)) if last.checked_add(1) == Some(s) => *last = s,
            _ => runs.push((s, s)),
        }
    }
    if runs.is_empty() {
        return "none".to_owned();
    }
    runs.iter()
        .map(|&(a, b)| {
            if a == b {
                a.to_string()
            } else {
                format!("{a}-{b}")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// `items` joined by `, `, on lines of `indent` and at most ~100 columns.
fn wrapped(out: &mut impl Write, indent: &str, items: &[String]) -> io::Result<()> {
    let mut line = String::new();
    for item in items {
        if !line.is_empty() && indent.len() + line.len() + item.len() + 2 > 100 {
            writeln!(out, "{indent}{line},")?;
            line.clear();
        }
        if !line.is_empty() {
            line.push_str(", ");
        }
        line.push_str(item);
    }
    if !line.is_empty() {
        writeln!(out, "{indent}{line}")?;
    }
    Ok(())
}

/// The text report of one connection.
pub(super) fn print_connection(
    out: &mut impl Write,
    index: usize,
    conn: &Connection,
    pc: &PcSummary,
) -> io::Result<()> {
    let check = conn.sequence_check();
    let mut sequence_note = String::new();
    if !check.gaps.is_empty() {
        let gaps: Vec<String> = check
            .gaps
            .iter()
            .map(|&(a, b)| {
                if a == b {
                    a.to_string()
                } else {
                    format!("{a}-{b}")
                }
            })
            .collect();
        sequence_note += &format!(" (GAP: {} missing)", gaps.join(", "));
    }
    if check.out_of_order > 0 {
        sequence_note += &format!(" ({} repeated or out of order)", check.out_of_order);
    }
    writeln!(
        out,
        "connection {index}: pid {:?}, {} snapshots, sequences {}{sequence_note}, {}",
        conn.pids,
        conn.sequences.len(),
        ranges(&conn.sequences),
        match &conn.end {
            End::Failed(e) => format!("ended on error: {e}"),
            End::Closed => "closed cleanly".to_owned(),
            End::Open => "still open at the timeout".to_owned(),
        }
    )?;

    writeln!(
        out,
        "  kernels: launches, GPU ms, mean us, devices, launching tids"
    )?;
    for (name, k) in &conn.kernels {
        writeln!(
            out,
            "    {name:<34} {:>7} {:>10.3} {:>9.2}  {:?} {:?}",
            k.launches,
            k.total_ns as f64 / 1e6,
            k.mean_ns() / 1e3,
            k.devices,
            k.tids
        )?;
    }

    let n = pc.distinct_pcs;
    writeln!(
        out,
        "  PC samples: {} at {n} PCs in {} functions; {} stall reasons in CUPTI's table; \
         {}/{n} PCs in a cubin the library sent; {}/{n} PCs named by nvdisasm; \
         {} offsets not 16-byte aligned",
        pc.total_samples,
        pc.by_function.len(),
        conn.stall_names.len(),
        pc.known_cubin_pcs,
        pc.named_pcs,
        pc.misaligned_offsets,
    )?;
    for (function, samples) in &pc.by_function {
        let top: Vec<String> = pc
            .stalls_by_function
            .get(function)
            .into_iter()
            .flatten()
            .take(4)
            .map(|(s, n)| format!("{s} {:.0}%", 100.0 * *n as f64 / (*samples).max(1) as f64))
            .collect();
        writeln!(
            out,
            "    {function:<34} {samples:>8} samples: {}",
            top.join(", ")
        )?;
    }

    print_stall_reasons(out, conn, pc)?;

    if !pc.top.is_empty() {
        writeln!(
            out,
            "  top PCs: function +offset [instruction] stall (meaning) samples"
        )?;
    }
    for t in &pc.top {
        writeln!(
            out,
            "    {} +{:#06x} [{}] {} ({}) {}",
            t.function,
            t.pc_offset,
            t.instruction.as_deref().unwrap_or("?"),
            t.stall,
            stall_description(&t.stall).unwrap_or("-"),
            t.samples
        )?;
    }

    writeln!(
        out,
        "  cubins: {} ({} bytes)",
        conn.cubins, conn.cubin_bytes
    )?;
    writeln!(out, "  counters (cumulative, as of the last snapshot):")?;
    let counters: Vec<String> = counter_fields(&conn.counters)
        .into_iter()
        .map(|(name, value)| format!("{name} {value}"))
        .collect();
    wrapped(out, "    ", &counters)?;
    let m = &conn.memory;
    writeln!(
        out,
        "  device memory: {} bytes live, peak {} in an interval; {} allocations ({} bytes), {} frees ({} of untracked addresses), {} allocations untracked",
        m.live_bytes,
        m.peak_live_bytes,
        m.allocations,
        m.allocated_bytes,
        m.frees,
        m.unknown_frees,
        m.untracked_allocations
    )?;

    writeln!(
        out,
        "  folded stacks as the agent builds them (top {TOP_FOLDED}; no CPU stacks without eBPF):"
    )?;
    for (unit, stack, weight) in conn.top_folded(TOP_FOLDED) {
        writeln!(out, "    {weight:>12} {unit:<11} {stack}")?;
    }
    Ok(())
}

/// Stall reasons with samples, most first, with CUPTI's index and name
/// and what they mean; then the rest of CUPTI's table on one line.
fn print_stall_reasons(out: &mut impl Write, conn: &Connection, pc: &PcSummary) -> io::Result<()> {
    if pc.by_stall.is_empty() && conn.stall_names.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "  stall reasons: samples, short name (CUPTI index and name) meaning"
    )?;
    let mut sampled: Vec<(&String, u64)> = pc.by_stall.iter().map(|(s, &n)| (s, n)).collect();
    sampled.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    for (short, samples) in sampled {
        let cupti = conn
            .stall_names
            .iter()
            .find(|(index, _)| conn.stall_name(**index) == *short)
            .map_or_else(
                || "not in CUPTI's table".to_owned(),
                |(index, name)| format!("{index} {name}"),
            );
        writeln!(
            out,
            "    {samples:>8} {short:<28} ({cupti}) {}",
            stall_description(short).unwrap_or("-")
        )?;
    }
    let unsampled: Vec<String> = conn
        .stall_names
        .keys()
        .map(|&index| (index, conn.stall_name(index)))
        .filter(|(_, short)| !pc.by_stall.contains_key(short))
        .map(|(index, short)| format!("{index} {short}"))
        .collect();
    if !unsampled.is_empty() {
        writeln!(out, "    without samples: {}", unsampled.join(", "))?;
    }
    Ok(())
}

/// Every counter by its field name.
pub(super) fn counters_json(counters: &Counters) -> Value {
    Value::Object(
        counter_fields(counters)
            .into_iter()
            .map(|(name, value)| (name.to_owned(), value.into()))
            .collect(),
    )
}

/// The JSON summary of one connection.
pub(super) fn connection_json(index: usize, conn: &Connection, pc: &PcSummary) -> Value {
    let check = conn.sequence_check();
    let kernels: serde_json::Map<String, Value> = conn
        .kernels
        .iter()
        .map(|(name, k)| {
            (
                name.clone(),
                json!({
                    "launches": k.launches,
                    "total_ns": k.total_ns,
                    "mean_ns": k.mean_ns(),
                    "tids": k.tids,
                    "devices": k.devices,
                }),
            )
        })
        .collect();
    let top: Vec<Value> = pc
        .top
        .iter()
        .map(|t| {
            json!({
                "function": t.function,
                "cubin_crc": t.cubin_crc,
                "pc_offset": t.pc_offset,
                "instruction": t.instruction,
                "stall": t.stall,
                "samples": t.samples,
            })
        })
        .collect();
    let folded: serde_json::Map<String, Value> = conn
        .folded_units()
        .into_iter()
        .map(|(unit, (stacks, weight))| {
            (unit.to_owned(), json!({"stacks": stacks, "weight": weight}))
        })
        .collect();
    let error = match &conn.end {
        End::Failed(e) => Some(e.as_str()),
        End::Open | End::Closed => None,
    };
    json!({
        "connection": index,
        "pids": conn.pids,
        "snapshots": conn.sequences.len(),
        "sequences": conn.sequences,
        "sequence_ok": check.ok(),
        "sequence_gaps": check.gaps,
        "sequences_out_of_order": check.out_of_order,
        "closed": conn.end == End::Closed,
        "error": error,
        "kernels": kernels,
        "stall_reasons": conn.stall_names,
        "pc": {
            "total_samples": pc.total_samples,
            "distinct_pcs": pc.distinct_pcs,
            "misaligned_offsets": pc.misaligned_offsets,
            "known_cubin_pcs": pc.known_cubin_pcs,
            "named_pcs": pc.named_pcs,
            "by_function": pc.by_function,
            "by_stall": pc.by_stall,
            "top": top,
        },
        "cubins": conn.cubins,
        "cubin_bytes": conn.cubin_bytes,
        "counters": counters_json(&conn.counters),
        "memory": {
            "live_bytes": conn.memory.live_bytes,
            "peak_live_bytes": conn.memory.peak_live_bytes,
            "allocations": conn.memory.allocations,
            "allocated_bytes": conn.memory.allocated_bytes,
            "frees": conn.memory.frees,
            "unknown_frees": conn.memory.unknown_frees,
            "untracked_allocations": conn.memory.untracked_allocations,
        },
        "folded": folded,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards the text the kit shows: runs of sequences collapse, in
    /// arrival order.
    #[test]
    fn sequence_ranges() {
        assert_eq!(ranges(&[]), "none");
        assert_eq!(ranges(&[0, 1, 2, 3]), "0-3");
        assert_eq!(ranges(&[0, 1, 3, 5, 6, 2]), "0-1, 3, 5-6, 2");
    }

    /// Guards the kit: every counter name verify.py reads is in the JSON,
    /// beside the counters added since snapdump.
    #[test]
    fn counters_in_json() {
        let json = counters_json(&Counters {
            kernels: 5,
            pc_drains_skipped: 3,
            ..Counters::default()
        });
        for name in [
            "launches",
            "kernels",
            "kernels_unjoined",
            "records_unknown",
            "events_dropped",
            "buffers_refused",
            "records_malformed",
            "kernels_over_limit",
            "snapshots_dropped",
            "launches_evicted",
            "pc_samples_dropped_by_hw",
            "pc_drains",
            "cupti_errors",
            "pc_sampling_watchdog_trips",
        ] {
            assert!(json[name].is_u64(), "{name} missing from {json}");
        }
        assert_eq!(json["kernels"], 5);
        assert_eq!(json["pc_drains_skipped"], 3);
    }
}
