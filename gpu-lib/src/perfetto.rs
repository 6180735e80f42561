//! GPU timelines as Chrome trace-event JSON, which ui.perfetto.dev (and
//! chrome://tracing) opens.
//!
//! Each kernel is a complete slice (`"ph": "X"`) on process = device,
//! thread = stream; its launch is a slice on the launching CPU thread
//! (process = the CUDA process), and a flow arrow joins the two. Times are
//! microseconds (the format's unit) relative to the first event, with ns
//! precision kept in the fractions.

use std::collections::BTreeSet;
use std::io::Write;

use serde_json::{Value, json};

use crate::timeline::TimelineKernel;

/// Writes the trace of `kernels` to `out`.
pub fn write_trace(kernels: &[TimelineKernel], out: &mut impl Write) -> std::io::Result<()> {
    let origin = kernels
        .iter()
        .flat_map(|k| [k.start_ns, k.launch_ns])
        .filter(|&ns| ns > 0)
        .min()
        .unwrap_or(0);
    let us = |ns: u64| ns.saturating_sub(origin) as f64 / 1000.0;

    out.write_all(b"{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n")?;
    let mut first = true;
    let mut emit = |event: Value, out: &mut dyn Write| -> std::io::Result<()> {
        if !first {
            out.write_all(b",\n")?;
        }
        first = false;
        serde_json::to_writer(&mut *out, &event).map_err(std::io::Error::other)
    };

    let devices: BTreeSet<u32> = kernels.iter().map(|k| k.device).collect();
    let streams: BTreeSet<(u32, u32)> = kernels.iter().map(|k| (k.device, k.stream)).collect();
    let hosts: BTreeSet<u32> = kernels
        .iter()
        .filter(|k| k.tid != 0)
        .map(|k| k.pid)
        .collect();
    for device in devices {
        emit(
            json!({"ph": "M", "name": "process_name", "pid": device, "args": {"name": format!("GPU {device}")}}),
            out,
        )?;
    }
    for (device, stream) in streams {
        emit(
            json!({"ph": "M", "name": "thread_name", "pid": device, "tid": stream, "args": {"name": format!("stream {stream}")}}),
            out,
        )?;
    }
    for pid in hosts {
        emit(
            json!({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": format!("CUDA process {pid}")}}),
            out,
        )?;
    }

    for k in kernels {
        let args = json!({
            "grid": k.grid,
            "block": k.block,
            "correlation_id": k.correlation_id,
            "launch_tid": k.tid,
            "graph_id": k.graph_id,
        });
        emit(
            json!({
                "name": k.name, "cat": "kernel", "ph": "X",
                "ts": us(k.start_ns), "dur": k.end_ns.saturating_sub(k.start_ns) as f64 / 1000.0,
                "pid": k.device, "tid": k.stream, "args": args,
            }),
            out,
        )?;
        if k.tid == 0 || k.launch_ns == 0 {
            continue;
        }
        emit(
            json!({
                "name": format!("launch {}", k.name), "cat": "launch", "ph": "X",
                "ts": us(k.launch_ns), "dur": 0.001,
                "pid": k.pid, "tid": k.tid, "args": {"correlation_id": k.correlation_id},
            }),
            out,
        )?;
        // Flow from the launch to the kernel (ids unique per process).
        let id = (u64::from(k.pid) << 32) | u64::from(k.correlation_id);
        emit(
            json!({"name": "launch", "cat": "launch", "ph": "s", "id": id,
                   "ts": us(k.launch_ns), "pid": k.pid, "tid": k.tid}),
            out,
        )?;
        emit(
            json!({"name": "launch", "cat": "launch", "ph": "f", "bp": "e", "id": id,
                   "ts": us(k.start_ns), "pid": k.device, "tid": k.stream}),
            out,
        )?;
    }
    out.write_all(b"\n]}\n")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kernel(name: &str, device: u32, stream: u32, start_ns: u64, tid: u32) -> TimelineKernel {
        TimelineKernel {
            pid: 500,
            tid,
            device,
            stream,
            name: name.into(),
            launch_ns: if tid == 0 { 0 } else { start_ns - 1500 },
            start_ns,
            end_ns: start_ns + 2500,
            correlation_id: 42,
            grid: [8, 1, 1],
            block: [256, 1, 1],
            graph_id: 0,
        }
    }

    /// The output is one JSON document with a slice per kernel on
    /// pid = device, tid = stream, launch slices and flows on the CPU
    /// thread, and names for the tracks.
    #[test]
    fn trace_has_slices_per_device_and_stream() {
        let kernels = vec![
            kernel("gemm", 0, 7, 10_000, 501),
            kernel("relu", 1, 9, 12_000, 0),
        ];
        let mut out = Vec::new();
        write_trace(&kernels, &mut out).unwrap();
        let doc: Value = serde_json::from_slice(&out).unwrap();
        let events = doc["traceEvents"].as_array().unwrap();
        let slices: Vec<&Value> = events
            .iter()
            .filter(|e| e["ph"] == "X" && e["cat"] == "kernel")
            .collect();
        assert_eq!(slices.len(), 2);
        assert_eq!(slices[0]["name"], "gemm");
        assert_eq!(
            (slices[0]["pid"].as_u64(), slices[0]["tid"].as_u64()),
            (Some(0), Some(7))
        );
        assert_eq!(slices[0]["ts"].as_f64(), Some(1.5));
        assert_eq!(slices[0]["dur"].as_f64(), Some(2.5));
        assert_eq!(slices[0]["args"]["grid"], json!([8, 1, 1]));
        assert_eq!(slices[0]["args"]["correlation_id"], 42);
        assert_eq!(slices[1]["pid"].as_u64(), Some(1));

        let launches: Vec<&Value> = events.iter().filter(|e| e["cat"] == "launch").collect();
        // One launch slice and two flow ends, for the kernel whose launch
        // was seen.
        assert_eq!(launches.len(), 3);
        assert_eq!(launches[0]["tid"].as_u64(), Some(501));
        assert_eq!(launches[0]["ts"].as_f64(), Some(0.0));
        let names: Vec<&str> = events
            .iter()
            .filter(|e| e["ph"] == "M")
            .map(|e| e["args"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            vec!["GPU 0", "GPU 1", "stream 7", "stream 9", "CUDA process 500"]
        );
    }

    #[test]
    fn empty_timeline_is_a_valid_trace() {
        let mut out = Vec::new();
        write_trace(&[], &mut out).unwrap();
        let doc: Value = serde_json::from_slice(&out).unwrap();
        assert!(doc["traceEvents"].as_array().unwrap().is_empty());
    }
}
