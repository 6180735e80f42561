//! Keeps the eBPF program's unwind maps filled with the tables of the
//! processes it samples, within a fixed budget of rows.
//!
//! `unwind_rows` is one array shared by all files (16 bytes a row; libc
//! takes 28k rows). Each file's table is built once, with gimli, and placed
//! in a free range of it ([`RowSpace`]); `proc_mappings` tells the program,
//! per process, which range covers which mapping. Files are counted by the
//! live processes that map them. When a new table does not fit, processes
//! that have exited are reaped (their `proc_mappings` entries deleted) and
//! the least recently used tables no live process maps are evicted, so a
//! host that keeps starting new binaries (a CI runner, a build farm) never
//! runs out of room for the processes running now.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use aya::maps::{Array, HashMap as BpfHashMap, MapData};
use kiln_model::FileId;
use tracing::{debug, info, warn};

use crate::abi::{BpfMapping, MAX_MAPPINGS, ProcMappings, UnwindRow};
use crate::fileid::{FileInfo, file_paths};
use crate::procfs::{self, Mapping};
use crate::row_space::RowSpace;
use crate::unwind::{UnwindError, UnwindTable};

/// Exited processes are looked for this often (and whenever a table does
/// not fit): their `proc_mappings` entries go, and their tables become
/// evictable.
pub(crate) const REAP_EVERY: Duration = Duration::from_secs(5);

/// Largest `.eh_frame` per row the table builder expects (rows take 5 to 7
/// bytes of it): a file with more than this many bytes per row it may take
/// cannot fit, so its table is not even built.
const EH_FRAME_BYTES_PER_ROW: u64 = 8;

/// The most rows one file's table may take in a map of `capacity` rows:
/// half. More, and one big binary (a Rust server, LLVM) would evict every
/// other process's tables each time it is sampled; it is walked by frame
/// pointers instead, until the map is made bigger (`--unwind-table-rows`).
/// With the default 256k rows that is 1 MiB of `.eh_frame`.
pub(crate) fn max_table_rows(capacity: u32) -> u32 {
    capacity / 2
}

/// What the unwinder holds, for tests and the agent's own metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UnwindStats {
    /// Rows of `unwind_rows` holding tables.
    pub rows_used: u32,
    /// Rows of `unwind_rows` in all.
    pub rows_capacity: u32,
    /// Files whose tables are in the program.
    pub files: usize,
    /// Processes whose mappings are in the program.
    pub processes: usize,
    /// Tables evicted to make room, since the start.
    pub evicted: u64,
    /// Exited processes whose entries were removed, since the start.
    pub reaped: u64,
    /// Tables that found no room (the running processes' tables filled
    /// the map), since the start.
    pub refused: u64,
}

/// What the unwinder shares with the agent.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    /// Pids all of whose files' tables are in the program.
    pub(crate) loaded: HashSet<u32>,
    pub(crate) stats: UnwindStats,
}

/// A file's table, placed in `unwind_rows`.
#[derive(Debug)]
struct PlacedTable {
    start: u32,
    len: u32,
    /// Live processes (that the unwinder knows of) mapping the file.
    users: u32,
    /// Value of [`Unwinder::loads`] when a process last used it.
    last_used: u64,
}

/// Where a file's table is, if anywhere.
enum Placement {
    /// In `unwind_rows[start..start + len]`.
    Placed { start: u32, len: u32 },
    /// The file has no usable table.
    NoTable,
    /// It has one, but the tables of running processes fill the map.
    NoRoom,
}

/// A process whose mappings are in `proc_mappings`.
#[derive(Debug)]
struct LoadedProcess {
    /// With the pid, what tells the process from a later one that reuses
    /// its pid.
    start_time: u64,
    /// Its files with tables, one entry per mapping (so a file mapped
    /// twice is counted twice, and released twice).
    files: Vec<FileId>,
}

/// Owns the program's unwind maps; runs on the agent's unwinder thread.
pub struct Unwinder {
    rows: Array<MapData, UnwindRow>,
    procs: BpfHashMap<MapData, u32, ProcMappings>,
    space: RowSpace,
    tables: HashMap<FileId, PlacedTable>,
    /// Files that have no usable table (no `.eh_frame`, unreadable, too
    /// big for the whole array): not built again.
    no_table: HashSet<FileId>,
    processes: HashMap<u32, LoadedProcess>,
    /// Processes loaded so far: the clock of [`PlacedTable::last_used`].
    loads: u64,
    last_reap: Instant,
    evicted: u64,
    reaped: u64,
    refused: u64,
    warned_full: bool,
    shared: Arc<Mutex<Shared>>,
}

impl std::fmt::Debug for Unwinder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Unwinder")
            .field("rows_free", &self.space.free_rows())
            .field("files", &self.tables.len())
            .field("processes", &self.processes.len())
            .finish_non_exhaustive()
    }
}

impl Unwinder {
    pub(crate) fn new(
        rows: Array<MapData, UnwindRow>,
        procs: BpfHashMap<MapData, u32, ProcMappings>,
    ) -> Self {
        let capacity = rows.len();
        let unwinder = Unwinder {
            rows,
            procs,
            space: RowSpace::new(capacity),
            tables: HashMap::new(),
            no_table: HashSet::new(),
            processes: HashMap::new(),
            loads: 0,
            last_reap: Instant::now(),
            evicted: 0,
            reaped: 0,
            refused: 0,
            warned_full: false,
            shared: Arc::default(),
        };
        unwinder.publish();
        unwinder
    }

    /// What the agent reads: loaded pids and statistics, as they change.
    pub(crate) fn shared(&self) -> Arc<Mutex<Shared>> {
        self.shared.clone()
    }

    /// Gives the program the unwind tables of `pid`'s files, so its next
    /// samples are walked with them. Does nothing when the process has
    /// already exited.
    pub fn load_process(&mut self, pid: u32, mappings: &[(Mapping, Arc<FileInfo>)]) {
        let Ok(start_time) = procfs::start_time(pid) else {
            return;
        };
        self.loads += 1;
        if self.last_reap.elapsed() >= REAP_EVERY {
            self.reap_exited();
        }
        // A reload (new mappings) or a reused pid: what it held before is
        // released once the new entry replaces the old, not before, so that
        // its old tables cannot be evicted while the program may still walk
        // them.
        let previous = self.processes.remove(&pid);

        let mut entry = ProcMappings {
            len: 0,
            reserved: 0,
            mappings: [BpfMapping::default(); MAX_MAPPINGS],
        };
        let mut files = Vec::new();
        let mut complete = true;
        for (m, file) in mappings {
            if files.len() == MAX_MAPPINGS {
                debug!(pid, "more executable mappings than the program takes");
                complete = false;
                break;
            }
            let (rows_start, rows_len) = match self.acquire_table(pid, m, file.file_id) {
                Placement::Placed { start, len } => (start, len),
                Placement::NoTable => continue,
                Placement::NoRoom => {
                    complete = false;
                    continue;
                }
            };
            entry.mappings[files.len()] = BpfMapping {
                start: m.start,
                end: m.end,
                bias: m.start.wrapping_sub(file.vaddr(m, m.start)),
                rows_start,
                rows_len,
            };
            files.push(file.file_id);
        }
        let process = LoadedProcess { start_time, files };
        entry.len = process.files.len() as u32;
        let written = if process.files.is_empty() {
            // No table for any of its files: frame pointers for all.
            self.procs.remove(&pid).map_err(|e| e.to_string())
        } else {
            self.procs.insert(pid, entry, 0).map_err(|e| e.to_string())
        };
        if let Some(previous) = previous {
            self.release_files(&previous.files);
        }
        match written {
            Ok(()) if !process.files.is_empty() => {
                self.processes.insert(pid, process);
                let mut shared = self.lock_shared();
                if complete {
                    shared.loaded.insert(pid);
                } else {
                    shared.loaded.remove(&pid);
                }
            }
            Ok(()) => {
                self.lock_shared().loaded.remove(&pid);
            }
            Err(e) => {
                debug!(pid, error = %e, "writing proc_mappings failed");
                self.release_files(&process.files);
                // Whatever entry is left must not outlive the tables.
                let _ = self.procs.remove(&pid);
                self.lock_shared().loaded.remove(&pid);
            }
        }
        self.publish();
    }

    /// Where the file's table is in `rows`, building and placing it on
    /// first use; counts `pid` as one more user of it.
    fn acquire_table(&mut self, pid: u32, mapping: &Mapping, file: FileId) -> Placement {
        if self.no_table.contains(&file) {
            return Placement::NoTable;
        }
        let now = self.loads;
        if let Some(t) = self.tables.get_mut(&file) {
            t.users += 1;
            t.last_used = now;
            return Placement::Placed {
                start: t.start,
                len: t.len,
            };
        }
        let [via, rooted] = file_paths(pid, mapping);
        let max_rows = max_table_rows(self.space.capacity());
        let max_bytes = u64::from(max_rows) * EH_FRAME_BYTES_PER_ROW;
        let table = match UnwindTable::from_path(&via, max_bytes)
            .or_else(|_| UnwindTable::from_path(&rooted, max_bytes))
        {
            Ok(table) if !table.rows().is_empty() => table,
            Ok(_) => {
                self.remember_no_table(file);
                return Placement::NoTable;
            }
            // The process exited before its files could be opened: the
            // next process mapping the file will try again. (Remembering
            // it would leave a library such as libc without a table for
            // good when the first process seen mapping it was short-lived.)
            Err(e @ UnwindError::Read { .. }) => {
                debug!(file = %mapping.path, error = %e, "unwind table not built: file unreadable");
                return Placement::NoTable;
            }
            // Once per file (it is remembered): a user who sees it can
            // make the map bigger.
            Err(UnwindError::TooBig(bytes)) => {
                info!(
                    file = %mapping.path,
                    eh_frame_bytes = bytes,
                    max_table_rows = max_rows,
                    "no unwind table: the file's would take more than half the table map \
                     (its stacks are walked by frame pointers; --unwind-table-rows makes room)"
                );
                self.remember_no_table(file);
                return Placement::NoTable;
            }
            Err(e) => {
                debug!(file = %mapping.path, error = %e, "no unwind table");
                self.remember_no_table(file);
                return Placement::NoTable;
            }
        };
        let len = u32::try_from(table.rows().len())
            .ok()
            .filter(|&len| len <= max_rows);
        let Some(len) = len else {
            self.remember_no_table(file);
            return Placement::NoTable;
        };
        // A file that finds no room now may find some later, when
        // processes exit: it is not remembered as tableless.
        let Some(start) = self.make_room(len, &mapping.path) else {
            self.refused += 1;
            return Placement::NoRoom;
        };
        if !self.write_rows(start, &table, &mapping.path) {
            self.space.release(start, len);
            return Placement::NoTable;
        }
        debug!(file = %mapping.path, rows = len, start, "unwind table loaded");
        self.tables.insert(
            file,
            PlacedTable {
                start,
                len,
                users: 1,
                last_used: now,
            },
        );
        Placement::Placed { start, len }
    }

    /// A free range of `len` rows: from free space, else after reaping
    /// exited processes, else by evicting the least recently used tables
    /// no live process maps. `None` when the processes alive now need all
    /// the room.
    fn make_room(&mut self, len: u32, path: &str) -> Option<u32> {
        if let Some(start) = self.space.allocate(len) {
            return Some(start);
        }
        self.reap_exited();
        loop {
            if let Some(start) = self.space.allocate(len) {
                return Some(start);
            }
            let Some(victim) = self
                .tables
                .iter()
                .filter(|(_, t)| t.users == 0)
                .min_by_key(|(_, t)| t.last_used)
                .map(|(file, _)| *file)
            else {
                if !self.warned_full {
                    warn!(
                        file = path,
                        rows = len,
                        capacity = self.space.capacity(),
                        "unwind tables of running processes fill the table map: further \
                         files are walked by frame pointers (raise --unwind-table-rows)"
                    );
                    self.warned_full = true;
                }
                return None;
            };
            if let Some(t) = self.tables.remove(&victim) {
                self.space.release(t.start, t.len);
                self.evicted += 1;
            }
        }
    }

    fn write_rows(&mut self, start: u32, table: &UnwindTable, path: &str) -> bool {
        for (i, row) in table.rows().iter().enumerate() {
            if let Err(e) = self.rows.set(start + i as u32, row.to_abi(), 0) {
                warn!(file = path, error = %e, "writing unwind_rows failed");
                return false;
            }
        }
        true
    }

    /// Forgets the processes that have exited: deletes their entries from
    /// `proc_mappings` (so a later process with the same pid is not walked
    /// with their mappings) and releases their files.
    pub(crate) fn reap_exited(&mut self) {
        self.last_reap = Instant::now();
        let gone: Vec<u32> = self
            .processes
            .iter()
            .filter(|&(&pid, p)| procfs::start_time(pid).ok() != Some(p.start_time))
            .map(|(&pid, _)| pid)
            .collect();
        if gone.is_empty() {
            return;
        }
        for &pid in &gone {
            self.release_process(pid);
            // Absent when the LRU map dropped it already.
            let _ = self.procs.remove(&pid);
        }
        self.reaped += gone.len() as u64;
        {
            let mut shared = self.lock_shared();
            for pid in &gone {
                shared.loaded.remove(pid);
            }
        }
        self.publish();
    }

    fn release_process(&mut self, pid: u32) {
        if let Some(process) = self.processes.remove(&pid) {
            self.release_files(&process.files);
        }
    }

    fn release_files(&mut self, files: &[FileId]) {
        for file in files {
            if let Some(t) = self.tables.get_mut(file) {
                t.users = t.users.saturating_sub(1);
            }
        }
    }

    fn remember_no_table(&mut self, file: FileId) {
        // On a host that keeps producing new binaries, forget rather than
        // grow without bound (forgotten files are rebuilt once more).
        if self.no_table.len() >= 64 * 1024 {
            self.no_table.clear();
        }
        self.no_table.insert(file);
    }

    fn lock_shared(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn publish(&self) {
        let stats = UnwindStats {
            rows_used: self.space.capacity() - self.space.free_rows(),
            rows_capacity: self.space.capacity(),
            files: self.tables.len(),
            processes: self.processes.len(),
            evicted: self.evicted,
            reaped: self.reaped,
            refused: self.refused,
        };
        self.lock_shared().stats = stats;
    }
}
