//! `kiln export perfetto`: a GPU timeline, as `libkiln_cuda.so` writes it
//! when `KILN_CUDA_TIMELINE` is set, turned into a Chrome/Perfetto trace.

use std::fs::File;
use std::io::{BufReader, BufWriter, Write};

use anyhow::Context;

use crate::cli::PerfettoArgs;

/// Reads the timeline, writes the trace, says what it wrote.
pub(crate) fn perfetto(args: PerfettoArgs) -> anyhow::Result<()> {
    let input = File::open(&args.input)
        .with_context(|| format!("opening the timeline {}", args.input.display()))?;
    let kernels = kiln_cuda::timeline::read_timeline(BufReader::new(input))
        .with_context(|| format!("reading {}", args.input.display()))?;
    if args.output.as_os_str() == "-" {
        let mut out = BufWriter::new(std::io::stdout().lock());
        kiln_cuda::perfetto::write_trace(&kernels, &mut out)?;
        out.flush()?;
        return Ok(());
    }
    let file = File::create(&args.output)
        .with_context(|| format!("creating {}", args.output.display()))?;
    let mut out = BufWriter::new(file);
    kiln_cuda::perfetto::write_trace(&kernels, &mut out)
        .and_then(|()| out.flush())
        .with_context(|| format!("writing {}", args.output.display()))?;
    let devices: std::collections::BTreeSet<u32> = kernels.iter().map(|k| k.device).collect();
    eprintln!(
        "kiln: wrote {} kernels on {} device(s) to {}; open it at https://ui.perfetto.dev",
        kernels.len(),
        devices.len(),
        args.output.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A timeline written by the library's writer comes out as a trace
    /// with one kernel slice per line; a damaged line is named.
    #[test]
    fn exports_a_timeline() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("timeline.jsonl");
        let mut writer = kiln_cuda::timeline::TimelineWriter::new(&input, 1 << 20).unwrap();
        for (i, name) in ["gemm", "softmax"].into_iter().enumerate() {
            writer
                .write(&kiln_cuda::timeline::TimelineKernel {
                    pid: 10,
                    tid: 11,
                    device: 0,
                    stream: 7,
                    name: name.into(),
                    launch_ns: 1000 + i as u64 * 5000,
                    start_ns: 2000 + i as u64 * 5000,
                    end_ns: 4000 + i as u64 * 5000,
                    correlation_id: i as u32,
                    grid: [1, 1, 1],
                    block: [32, 1, 1],
                    graph_id: 0,
                })
                .unwrap();
        }
        writer.flush().unwrap();
        let output = dir.path().join("trace.json");
        perfetto(PerfettoArgs {
            input: input.clone(),
            output: output.clone(),
        })
        .unwrap();
        let trace: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&output).unwrap()).unwrap();
        let kernels: Vec<&str> = trace["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["cat"] == "kernel")
            .map(|e| e["name"].as_str().unwrap())
            .collect();
        assert_eq!(kernels, vec!["gemm", "softmax"]);

        std::fs::write(&input, "{not json\n").unwrap();
        let err = perfetto(PerfettoArgs { input, output }).unwrap_err();
        assert!(format!("{err:#}").contains("timeline line 1"), "{err:#}");
    }
}
