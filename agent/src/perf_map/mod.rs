//! Names for JIT-compiled code from the perf maps runtimes write.
//!
//! Code a JIT compiler generates lives in anonymous executable memory
//! (or a memfd mapped twice, as .NET does), with no file, symbols or
//! unwind table. Many runtimes can say what they put there in
//! `/tmp/perf-PID.map`, one `START SIZE name` line per piece of code, the
//! convention `perf` reads: Node with `--perf-basic-prof`, .NET with
//! `DOTNET_PerfMapEnabled=1`, the JVM on `jcmd PID Compiler.perfmap`,
//! LuaJIT, Julia, Wasmtime. A user-stack address in such memory becomes
//! the [`FrameKind::Jit`](kiln_model::FrameKind::Jit) frame its map
//! names there (`names.rs`), or, with no entry, the marker
//! [`UNKNOWN_JIT_FRAME`]: never another function's name.
//!
//! Each process's map is read incrementally and safely (`reader.rs`: the
//! file is the profiled user's) once per drain in which the process had
//! JIT frames, so code compiled since is named and code that reused a
//! freed range gets its new name (`ranges.rs`: the newest entry wins).
//! The eBPF walk goes through JIT code by its frame pointers (V8 and .NET
//! keep them; HotSpot with `-XX:+PreserveFramePointer`); the unwinder
//! gives the program the JIT regions as mappings without a table (see
//! `unwinder.rs`).

mod coverage;
mod names;
mod parse;
mod ranges;
mod reader;

use std::collections::HashMap;

use kiln_model::Frame;
use tracing::{debug, info};

pub(crate) use coverage::JitOutcome;
pub use coverage::{JIT_OUTCOME_LABEL, JIT_SAMPLES, JitCoverage};
pub use names::UNKNOWN_JIT_FRAME;
use reader::{Limits, PerfMapError, PerfMapPath, PerfMapReader};

/// A process whose perf map was not used for this many drains is
/// forgotten (as the process table forgets processes).
const FORGET_AFTER_DRAINS: u64 = 12;

/// Most bytes of perf maps read in one drain, all processes together: a
/// process that replaces its map with a new one of 32 MiB every interval
/// (or many processes with large maps) costs the agent at most this much
/// parsing per interval; the rest is read at the next ones.
const MAX_READ_PER_DRAIN: u64 = 32 << 20;

/// Most address ranges held for all processes together (about 40 bytes
/// each plus names): past it, the maps of processes not read yet are not
/// read (their JIT frames stay `[unknown JIT]`) until others are forgotten.
/// Four processes at their own bound ([`reader::MAX_RANGES`]).
const MAX_TOTAL_RANGES: usize = 4 * reader::MAX_RANGES;

/// The perf maps of the processes whose JIT frames were sampled.
#[derive(Debug)]
pub(crate) struct PerfMaps {
    /// Whether maps are read at all (`--no-perf-maps` turns it off: JIT
    /// frames are then all [`UNKNOWN_JIT_FRAME`]).
    enabled: bool,
    processes: HashMap<u32, ProcessMap>,
    drain: u64,
    /// Bytes read in this drain ([`MAX_READ_PER_DRAIN`]).
    read_this_drain: u64,
    /// Whether [`MAX_TOTAL_RANGES`] was said to be reached.
    warned_full: bool,
}

impl Default for PerfMaps {
    fn default() -> Self {
        PerfMaps {
            enabled: true,
            processes: HashMap::new(),
            drain: 0,
            read_this_drain: 0,
            warned_full: false,
        }
    }
}

/// One process's map, and when it was last refreshed and used.
#[derive(Debug)]
struct ProcessMap {
    /// With the pid, what tells this process from a later one with its pid.
    start_time: u64,
    reader: PerfMapReader,
    refreshed: Option<u64>,
    last_used: u64,
    /// Why the last refresh failed, logged once per reason.
    last_error: Option<String>,
}

impl PerfMaps {
    /// Whether to read perf maps (on unless set off).
    pub(crate) fn read_maps(&mut self, on: bool) {
        self.enabled = on;
        if !on {
            self.processes.clear();
        }
    }

    /// Starts a new drain: maps are refreshed at their first use in it;
    /// processes whose maps were not used for a while are forgotten.
    pub(crate) fn next_drain(&mut self) {
        self.drain += 1;
        self.read_this_drain = 0;
        let drain = self.drain;
        self.processes
            .retain(|_, p| drain - p.last_used < FORGET_AFTER_DRAINS);
    }

    /// The frame of the JIT code at `addr` in process `pid` (an address in
    /// one of its JIT regions; a call's address, past the leaf), and how
    /// it was named.
    pub(crate) fn frame(&mut self, pid: u32, addr: u64) -> (Frame, JitOutcome) {
        if !self.enabled {
            return (names::unknown_jit(), JitOutcome::NoMap);
        }
        let Some(process) = self.process(pid) else {
            return (names::unknown_jit(), JitOutcome::NoMap);
        };
        match process.reader.frame(addr) {
            Some(frame) => (frame.clone(), JitOutcome::Named),
            None if process.reader.has_read() => (names::unknown_jit(), JitOutcome::NotInMap),
            None => (names::unknown_jit(), JitOutcome::NoMap),
        }
    }

    /// `pid`'s map, refreshed once per drain; `None` when the process is
    /// gone before it was first seen.
    fn process(&mut self, pid: u32) -> Option<&mut ProcessMap> {
        let drain = self.drain;
        let start_time = match self.processes.get(&pid) {
            // Checked once per drain that the pid was not reused.
            Some(p) if p.refreshed == Some(drain) => None,
            _ => crate::procfs::start_time(pid).ok(),
        };
        let stale = match (self.processes.get(&pid), start_time) {
            (Some(p), Some(t)) => p.start_time != t,
            (None, _) => true,
            // Exited: what was read still names its samples, which are
            // older than its exit.
            (Some(_), None) => false,
        };
        if stale {
            let start_time = start_time?;
            let held: usize = self.processes.values().map(|p| p.reader.ranges()).sum();
            if held >= MAX_TOTAL_RANGES {
                if !std::mem::replace(&mut self.warned_full, true) {
                    info!(
                        pid,
                        ranges = held,
                        "perf maps past the agent's bound for all processes: new ones are not \
                         read until others are forgotten"
                    );
                }
                return None;
            }
            let at = perf_map_path(pid)?;
            self.processes.insert(
                pid,
                ProcessMap {
                    start_time,
                    reader: PerfMapReader::new(at, Limits::default()),
                    refreshed: None,
                    last_used: drain,
                    last_error: None,
                },
            );
        }
        let process = self.processes.get_mut(&pid)?;
        process.last_used = drain;
        if process.refreshed != Some(drain) {
            process.refreshed = Some(drain);
            let budget = MAX_READ_PER_DRAIN.saturating_sub(self.read_this_drain);
            self.read_this_drain += process.refresh(pid, budget);
        }
        Some(process)
    }
}

impl ProcessMap {
    /// Reads what the map gained, at most `budget` bytes, logging a
    /// failure once per reason; returns the bytes read.
    fn refresh(&mut self, pid: u32, budget: u64) -> u64 {
        if budget == 0 {
            return 0;
        }
        let was_full = self.reader.stats().full;
        match self.reader.refresh(budget) {
            Ok(0) => 0,
            Ok(bytes) => {
                self.last_error = None;
                let stats = self.reader.stats();
                debug!(
                    pid,
                    bytes,
                    entries = stats.entries,
                    skipped = stats.skipped,
                    "perf map read"
                );
                if stats.full && !was_full {
                    info!(
                        pid,
                        entries = stats.entries,
                        "perf map past the agent's bounds: later JIT code stays unnamed"
                    );
                }
                bytes
            }
            Err(e) => {
                let text = e.to_string();
                if self.last_error.as_ref() != Some(&text) {
                    match e {
                        // Most JIT processes write none: nothing to say.
                        PerfMapError::Missing { .. } | PerfMapError::Io { .. } => {
                            debug!(pid, error = %text, "perf map not read")
                        }
                        _ => info!(pid, error = %text, "perf map not read"),
                    }
                    self.last_error = Some(text);
                }
                0
            }
        }
    }
}

/// Where `pid`'s perf map is: `/tmp/perf-N.map` in its root, N its pid in
/// its own pid namespace (a container's process writes its own pid), and
/// the users whose file is believed (its own). `None` when it has exited.
fn perf_map_path(pid: u32) -> Option<PerfMapPath> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let (own_pid, owners) = pid_and_users(&status);
    Some(PerfMapPath {
        root: format!("/proc/{pid}/root").into(),
        path: format!("/tmp/perf-{}.map", own_pid.unwrap_or(pid)),
        owners,
    })
}

/// From a `/proc/PID/status`: the pid in the innermost pid namespace
/// (`NSpid`'s last field), and the uids (`Uid`: real, effective, saved,
/// filesystem).
fn pid_and_users(status: &str) -> (Option<u32>, Vec<u32>) {
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|rest| {
                rest.split_whitespace()
                    .filter_map(|n| n.parse::<u32>().ok())
            })
    };
    let own_pid = field("NSpid:").and_then(|mut pids| pids.next_back());
    let uids = field("Uid:").map(Iterator::collect).unwrap_or_default();
    (own_pid, uids)
}

/// Tests that write this process's own perf map (`/tmp/perf-PID.map`,
/// one file for every test of the binary) take this first.
#[cfg(test)]
pub(crate) static OWN_PERF_MAP: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaced_pid_and_users_from_status() {
        let status = "Name:\tnode\nUid:\t1000\t1000\t1000\t1000\nGid:\t1000\t1000\t1000\t1000\nNSpid:\t4242\t7\n";
        assert_eq!(pid_and_users(status), (Some(7), vec![1000; 4]));
        assert_eq!(pid_and_users("Name:\tx\n"), (None, vec![]));
        let me = perf_map_path(std::process::id()).unwrap();
        assert_eq!(me.path, format!("/tmp/perf-{}.map", std::process::id()));
        // SAFETY: geteuid has no preconditions.
        assert!(me.owners.contains(&unsafe { libc::geteuid() }));
    }

    // Guards the whole path on this process: its own perf map, written
    // in /tmp as a runtime would, names an address; an address it does not
    // cover gets the marker, and with maps off everything does.
    #[test]
    fn own_perf_map_names_its_entries() {
        let _own = OWN_PERF_MAP.lock().unwrap_or_else(|e| e.into_inner());
        let pid = std::process::id();
        let path = format!("/tmp/perf-{pid}.map");
        std::fs::write(&path, "7f0000001000 100 JS:*handle /srv/app.js:12:3\n").unwrap();
        let mut maps = PerfMaps::default();
        maps.next_drain();
        let (frame, outcome) = maps.frame(pid, 0x7f00_0000_1010);
        std::fs::remove_file(&path).unwrap();
        assert_eq!(outcome, JitOutcome::Named);
        assert_eq!(
            frame,
            Frame::Named {
                kind: kiln_model::FrameKind::Jit,
                function: "handle".into(),
                module: None,
                file: Some("/srv/app.js".into()),
                line: 12,
            }
        );
        let (frame, outcome) = maps.frame(pid, 0x7f00_0000_2000);
        assert_eq!(outcome, JitOutcome::NotInMap);
        assert_eq!(frame, names::unknown_jit());
        maps.read_maps(false);
        assert_eq!(maps.frame(pid, 0x7f00_0000_1010).1, JitOutcome::NoMap);
    }
}
