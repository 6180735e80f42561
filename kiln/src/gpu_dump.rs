//! `kiln gpu dump`: listens where `libkiln_cuda.so` sends its snapshots,
//! decodes every frame with the agent's own reader ([`SnapshotListener`])
//! and prints what they hold (see `kiln gpu dump --help`). For debugging
//! the library without the agent; the GPU check kit runs it through its
//! `snapdump` command line (`scripts/gpucheck/snapdump`).
//!
//! Each connection is read on a thread of its own; the main thread adds
//! the snapshots up ([`collect`]) and prints ([`report`]).

mod collect;
mod report;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::io::Write;
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use anyhow::Context;
use kiln_cuda::sass::CubinStore;
use kiln_cuda::{Snapshot, SnapshotListener, SnapshotStream};
use serde_json::json;

use crate::cli::GpuDumpArgs;
use collect::{Connection, End};

/// Cubin bytes kept for disassembly (as the agent keeps).
const MAX_CUBIN_BYTES: usize = 256 << 20;

/// What the socket threads tell the main thread.
enum Event {
    /// Connection `.0` was accepted.
    Accepted(usize),
    /// A snapshot decoded on connection `.0`.
    Snapshot(usize, Box<Snapshot>),
    /// Connection `.0` ended: cleanly (`None`) or on a frame that did not
    /// decode (the message names it).
    Closed(usize, Option<String>),
    /// `accept` failed; the listener keeps trying.
    AcceptFailed(std::io::Error),
}

/// Listens, prints, writes the summary. An error when no process
/// connected or a frame did not decode (after the report is printed).
pub(crate) fn run(args: GpuDumpArgs) -> anyhow::Result<()> {
    let listener = SnapshotListener::bind(&args.socket)
        .with_context(|| format!("listening on {}", args.socket.display()))?;
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "kiln gpu dump: listening on {} for {} connection(s), at most {}",
        args.socket.display(),
        args.connections,
        humantime::format_duration(args.timeout)
    )?;
    out.flush()?;

    let (tx, rx) = mpsc::channel();
    let wanted = args.connections as usize;
    std::thread::Builder::new()
        .name("kiln-gpu-accept".into())
        .spawn(move || accept(&listener, wanted, &tx))
        .context("starting the accept thread")?;

    let cubins = RefCell::new(CubinStore::new(MAX_CUBIN_BYTES));
    let mut conns: BTreeMap<usize, Connection> = BTreeMap::new();
    let deadline = Instant::now() + args.timeout;
    let mut closed = 0;
    let mut timed_out = false;
    while closed < wanted {
        let event = match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(event) => event,
            Err(RecvTimeoutError::Timeout) => {
                timed_out = true;
                writeln!(
                    out,
                    "kiln gpu dump: timed out after {} with {closed} of {wanted} connection(s) closed",
                    humantime::format_duration(args.timeout)
                )?;
                break;
            }
            // Every sender is gone: nothing more can arrive.
            Err(RecvTimeoutError::Disconnected) => break,
        };
        match event {
            Event::Accepted(index) => {
                conns.entry(index).or_default();
                writeln!(out, "accepted conn={index}")?;
            }
            Event::Snapshot(index, snapshot) => {
                writeln!(out, "{}", report::snapshot_line(index, &snapshot))?;
                conns.entry(index).or_default().take(&snapshot, &cubins);
            }
            Event::Closed(index, error) => {
                closed += 1;
                let conn = conns.entry(index).or_default();
                conn.end = match error {
                    None => {
                        writeln!(out, "closed conn={index}")?;
                        End::Closed
                    }
                    Some(e) => {
                        writeln!(out, "error conn={index}: {e}; connection closed")?;
                        End::Failed(e)
                    }
                };
            }
            Event::AcceptFailed(e) => writeln!(out, "kiln gpu dump: accept failed: {e}")?,
        }
        out.flush()?;
    }

    let mut summaries = Vec::new();
    for (&index, conn) in &conns {
        let pc = conn.pc_summary(|crc, function, offset| {
            cubins.borrow_mut().instruction(crc, function, offset)
        });
        report::print_connection(&mut out, index, conn, &pc)?;
        summaries.push(report::connection_json(index, conn, &pc));
    }
    let failed: Vec<String> = conns
        .iter()
        .filter_map(|(index, conn)| match &conn.end {
            End::Failed(e) => Some(format!("connection {index}: {e}")),
            End::Open | End::Closed => None,
        })
        .collect();
    let decoded_ok = !conns.is_empty() && failed.is_empty();
    let doc = json!({
        "timed_out": timed_out,
        "decoded_ok": decoded_ok,
        "connections": summaries,
    });
    out.flush()?;
    let _ = std::fs::remove_file(&args.socket);
    if let Some(path) = &args.json {
        let file = std::fs::File::create(path)
            .with_context(|| format!("creating the summary {}", path.display()))?;
        serde_json::to_writer_pretty(std::io::BufWriter::new(file), &doc)
            .with_context(|| format!("writing the summary {}", path.display()))?;
    }
    if conns.is_empty() {
        anyhow::bail!(
            "no CUDA process connected to {} within {} (do the processes have \
             CUDA_INJECTION64_PATH=…/libkiln_cuda.so and KILN_GPU_SOCKET set to it?)",
            args.socket.display(),
            humantime::format_duration(args.timeout)
        );
    }
    if !failed.is_empty() {
        anyhow::bail!(
            "{} of {} connection(s) sent a frame that did not decode: {}",
            failed.len(),
            conns.len(),
            failed.join("; ")
        );
    }
    writeln!(
        out,
        "kiln gpu dump: {} connection(s), every frame decoded",
        conns.len()
    )?;
    Ok(())
}

/// Accepts up to `wanted` connections, each read on a thread of its own.
/// Stops there, so that later processes are refused (the library counts
/// their snapshots as dropped) rather than left waiting.
fn accept(listener: &SnapshotListener, wanted: usize, tx: &Sender<Event>) {
    let mut index = 0;
    while index < wanted {
        let stream = match listener.accept() {
            Ok(stream) => stream,
            Err(e) => {
                if tx.send(Event::AcceptFailed(e)).is_err() {
                    return;
                }
                // EMFILE and the like: not in a tight loop.
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        if tx.send(Event::Accepted(index)).is_err() {
            return;
        }
        let reader_tx = tx.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("kiln-gpu-read-{index}"))
            .spawn(move || read(index, stream, &reader_tx));
        if let Err(e) = spawned {
            let _ = tx.send(Event::Closed(index, Some(format!("no reader thread: {e}"))));
        }
        index += 1;
    }
}

/// Reads connection `index` until it closes or a frame does not decode.
fn read(index: usize, stream: SnapshotStream, tx: &Sender<Event>) {
    for (frame, item) in stream.enumerate() {
        match item {
            Ok(snapshot) => {
                if tx.send(Event::Snapshot(index, Box::new(snapshot))).is_err() {
                    return;
                }
            }
            Err(e) => {
                let _ = tx.send(Event::Closed(
                    index,
                    Some(format!("frame {} (after {frame} decoded): {e}", frame + 1)),
                ));
                return;
            }
        }
    }
    let _ = tx.send(Event::Closed(index, None));
}
