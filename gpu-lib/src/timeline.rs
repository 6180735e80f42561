//! The GPU timeline file: one JSON object per kernel execution and line,
//! written when `KILN_CUDA_TIMELINE=path` is set, read by
//! `kiln export perfetto` (see [`crate::perfetto`]).
//!
//! JSON lines rather than a binary format: the file is written once per
//! run, read once, and is useful to `jq` too. Its size is capped
//! ([`TimelineWriter::new`]); kernels past the cap are counted, not written.

use std::fs::File;
use std::io::{BufRead, BufWriter, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};

/// One kernel: its launch on the CPU and its execution on the GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimelineKernel {
    /// The CUDA process.
    pub pid: u32,
    /// The launching thread; 0 when the launch was not seen.
    pub tid: u32,
    /// The device.
    pub device: u32,
    /// The stream.
    pub stream: u32,
    /// The kernel, mangled.
    pub name: String,
    /// When the launch call was entered, ns; 0 when not seen.
    pub launch_ns: u64,
    /// GPU start, ns.
    pub start_ns: u64,
    /// GPU end, ns.
    pub end_ns: u64,
    /// CUPTI's correlation id.
    pub correlation_id: u32,
    /// Grid size.
    pub grid: [i32; 3],
    /// Block size.
    pub block: [i32; 3],
    /// The graph that launched it; 0 for none.
    #[serde(default)]
    pub graph_id: u32,
}

/// Appends kernels to a timeline file, up to a size cap.
pub struct TimelineWriter {
    out: BufWriter<File>,
    written: u64,
    max_bytes: u64,
    skipped: u64,
}

impl TimelineWriter {
    /// Creates (truncates) `path`; at most `max_bytes` are written.
    pub fn new(path: &Path, max_bytes: u64) -> std::io::Result<Self> {
        Ok(Self {
            out: BufWriter::new(File::create(path)?),
            written: 0,
            max_bytes,
            skipped: 0,
        })
    }

    /// Writes one kernel, or counts it when the cap is reached.
    pub fn write(&mut self, kernel: &TimelineKernel) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(kernel).map_err(std::io::Error::other)?;
        line.push(b'\n');
        if self.written + line.len() as u64 > self.max_bytes {
            self.skipped += 1;
            return Ok(());
        }
        self.written += line.len() as u64;
        self.out.write_all(&line)
    }

    /// Kernels not written because of the cap.
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// Writes out what is buffered.
    pub fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

/// A timeline line that is not a kernel.
#[derive(Debug, thiserror::Error)]
pub enum TimelineError {
    /// The file could not be read.
    #[error("reading the timeline: {0}")]
    Io(#[from] std::io::Error),
    /// A line is not a kernel object.
    #[error("timeline line {line}: {source}")]
    BadLine {
        /// 1-based line number.
        line: usize,
        /// What serde said.
        source: serde_json::Error,
    },
}

/// Reads every kernel of a timeline; empty lines are skipped.
pub fn read_timeline(input: impl BufRead) -> Result<Vec<TimelineKernel>, TimelineError> {
    let mut out = Vec::new();
    for (i, line) in input.lines().enumerate() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let kernel = serde_json::from_str(&line).map_err(|source| TimelineError::BadLine {
            line: i + 1,
            source,
        })?;
        out.push(kernel);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn kernel(name: &str, stream: u32, start_ns: u64) -> TimelineKernel {
        TimelineKernel {
            pid: 100,
            tid: 101,
            device: 0,
            stream,
            name: name.into(),
            launch_ns: start_ns - 500,
            start_ns,
            end_ns: start_ns + 2000,
            correlation_id: 7,
            grid: [64, 1, 1],
            block: [128, 1, 1],
            graph_id: 0,
        }
    }

    #[test]
    fn writes_and_reads_back_with_a_cap() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let mut w = TimelineWriter::new(&path, 400).unwrap();
        for i in 0..10 {
            w.write(&kernel("k", 1, 10_000 + i)).unwrap();
        }
        w.flush().unwrap();
        let back = read_timeline(std::io::BufReader::new(File::open(&path).unwrap())).unwrap();
        assert!(!back.is_empty() && back.len() < 10);
        assert_eq!(back.len() as u64 + w.skipped(), 10);
        assert_eq!(back[0], kernel("k", 1, 10_000));
    }

    #[test]
    fn bad_lines_are_named() {
        let text = format!(
            "{}\n\n{{\"pid\": 1}}\n",
            serde_json::to_string(&kernel("k", 1, 5000)).unwrap()
        );
        let err = read_timeline(text.as_bytes()).unwrap_err();
        assert!(err.to_string().starts_with("timeline line 3:"), "{err}");
    }
}
