//! Keeps the eBPF program's unwind maps filled with the tables of the
//! processes it samples, within a budget of kernel memory.
//!
//! Each file's table is built once, in the background (`table_builder.rs`,
//! smallest file first, with gimli in `unwind.rs`), saved on disk by
//! FileId (`table_cache.rs`), and loaded as an array map of its own, sized
//! to it, into `unwind_tables` under the file's table id: a file mapped by
//! a thousand processes takes its room once, and a 100 MB library fits as
//! well as libc. Each process gets its own sorted array of executable file
//! mappings in `proc_mappings`, each naming its file's table, written as
//! soon as its maps are read: until a table arrives, frames in that file
//! are walked by frame pointers, and the array is written again when it
//! does.
//!
//! Tables are counted by the live processes that map them. When a new table
//! does not fit the budget, exited processes are reaped and tables evicted:
//! those no live process maps first, then the least recently used. A walk
//! that meets an evicted table falls back to frame pointers for that frame
//! and asks, backing off, for the process to be loaded again, which brings
//! the table back from the disk cache.

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsFd, AsRawFd};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use aya::maps::{HashMap as BpfHashMap, HashOfMaps, MapData};
use kiln_model::FileId;
use tracing::{debug, info, warn};

use crate::abi::{BpfMapping, JvmProc, MAX_MAPPINGS, PythonProc, UnwindRow};
use crate::fileid::ProcessMappings;
use crate::jvm::Jvm;
use crate::jvm::finder::JvmFinder;
use crate::mapped_file::{MappedFileError, open_mapped};
use crate::procfs::{self, Mapping};
use crate::python::{self, Interpreter};
use crate::table_builder::{BuildJob, Built, TableBuilder};
use crate::table_cache::TableCache;
use crate::unwind::{UnwindError, UnwindTable};

/// Exited processes are looked for this often (and whenever a table does
/// not fit): their `proc_mappings` entries go, and their tables become
/// evictable.
pub(crate) const REAP_EVERY: Duration = Duration::from_secs(5);

/// Most rows one table may have: the BPF binary search takes 24 halvings.
const MAX_TABLE_ROWS: usize = 1 << 24;

/// A process's code as its maps show it: its executable files, and the
/// memory JIT compilers write code into ([`Mapping::is_jit`]), which has
/// no table and is walked by frame pointers.
#[derive(Debug, Clone, Default)]
pub(crate) struct ProcessCode {
    pub(crate) files: ProcessMappings,
    pub(crate) jit: Vec<Mapping>,
}

/// What the unwinder thread is given to do.
#[derive(Debug)]
pub(crate) enum Work {
    /// Processes whose maps were just read.
    Learned(Vec<(u32, ProcessCode)>),
    /// A table the builder thread finished.
    Built(Built),
}

/// What the unwinder holds, for tests and the agent's own metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UnwindStats {
    /// Kernel memory the loaded tables take.
    pub bytes_used: u64,
    /// The most they may take.
    pub bytes_budget: u64,
    /// Files whose tables are loaded.
    pub files: usize,
    /// Processes whose mappings are in the program.
    pub processes: usize,
    /// Tables waiting to be built.
    pub building: usize,
    /// Tables built from `.eh_frame` since the start.
    pub built: u64,
    /// Tables read back from the disk cache since the start.
    pub from_cache: u64,
    /// Tables evicted to make room, since the start.
    pub evicted: u64,
    /// Exited processes whose entries were removed, since the start.
    pub reaped: u64,
    /// Tables that found no room (the running processes' tables filled
    /// the budget), since the start.
    pub refused: u64,
    /// Rows of the largest table built, and how long it took.
    pub largest_build: Option<(usize, Duration)>,
}

/// What the unwinder shares with the agent.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    /// Pids all of whose files' tables are loaded.
    pub(crate) loaded: HashSet<u32>,
    pub(crate) stats: UnwindStats,
    /// The Python processes, with their interpreter: for naming the
    /// Python frames of their stacks.
    pub(crate) python: HashMap<u32, Arc<Interpreter>>,
    /// The JVM processes, with their JVM: for their label and markers.
    pub(crate) jvm: HashMap<u32, Arc<Jvm>>,
}

/// Where a file's table is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TableState {
    /// The builder thread has it.
    Building,
    /// In `unwind_tables`, taking this much kernel memory.
    Loaded(u64),
    /// Built but not loaded (no room, or evicted since): in the disk cache
    /// when there is one, else built again when next needed.
    Unloaded,
}

/// A file that has (or may have) a table.
#[derive(Debug)]
struct FileTable {
    /// Key in `unwind_tables`, given once per file and never reused, so a
    /// stale mapping never walks another file's rows.
    id: u32,
    /// Rows, once built (0 before).
    rows: u32,
    state: TableState,
    /// Live processes (that the unwinder knows of) mapping the file.
    users: u32,
    /// Value of [`Unwinder::loads`] when a process last used it.
    last_used: u64,
}

/// A process whose mappings are in `proc_mappings`.
#[derive(Debug)]
struct LoadedProcess {
    /// With the pid, what tells the process from a later one that reuses
    /// its pid.
    start_time: u64,
    /// Its executable file mappings, as last read.
    mappings: ProcessMappings,
    /// Its JIT regions, as last read: in the program's list without a
    /// table, so that a walk through JIT code follows frame pointers there
    /// without taking it for code mapped since (and asking for the maps
    /// again, every time).
    jit: Vec<Mapping>,
    /// Its files with (possible) tables, one entry per mapping (so a file
    /// mapped twice is counted twice, and released twice).
    files: Vec<FileId>,
}

/// The eBPF maps the unwinder fills.
pub(crate) struct UnwindMaps {
    pub(crate) tables: HashOfMaps<MapData, u32>,
    pub(crate) evicted: BpfHashMap<MapData, u32, u32>,
    pub(crate) processes: HashOfMaps<MapData, u32>,
    pub(crate) python: BpfHashMap<MapData, u32, PythonProc>,
    pub(crate) jvm: BpfHashMap<MapData, u32, JvmProc>,
}

/// Owns the program's unwind maps; runs on the agent's unwinder thread.
pub(crate) struct Unwinder {
    maps: UnwindMaps,
    budget: u64,
    used: u64,
    next_id: u32,
    tables: HashMap<FileId, FileTable>,
    /// Files that have no usable table (no `.eh_frame`, unparsable, too
    /// big): not built again.
    no_table: HashSet<FileId>,
    processes: HashMap<u32, LoadedProcess>,
    /// Python interpreters found in files (`None`: looked, none there).
    interpreters: HashMap<FileId, Option<Arc<Interpreter>>>,
    /// Whether Python processes' frames are read.
    python: bool,
    /// JVM libraries seen, and JVMs not started yet.
    jvms: JvmFinder,
    /// Whether JVM processes are read.
    java: bool,
    cache: Option<TableCache>,
    /// `None` until [`Unwinder::start_builder`].
    builder: Option<TableBuilder>,
    /// Processes loaded so far: the clock of [`FileTable::last_used`].
    loads: u64,
    last_reap: Instant,
    stats: UnwindStats,
    warned_full: bool,
    shared: Arc<Mutex<Shared>>,
}

impl std::fmt::Debug for Unwinder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Unwinder")
            .field("used", &self.used)
            .field("budget", &self.budget)
            .field("files", &self.tables.len())
            .field("processes", &self.processes.len())
            .finish_non_exhaustive()
    }
}

impl Unwinder {
    /// An unwinder filling `maps` with at most `budget` bytes of tables,
    /// saving them in `cache` when given.
    pub(crate) fn new(maps: UnwindMaps, budget: u64, cache: Option<TableCache>) -> Self {
        let unwinder = Unwinder {
            maps,
            budget,
            used: 0,
            next_id: 1,
            tables: HashMap::new(),
            no_table: HashSet::new(),
            processes: HashMap::new(),
            interpreters: HashMap::new(),
            python: true,
            jvms: JvmFinder::default(),
            java: true,
            cache,
            builder: None,
            loads: 0,
            last_reap: Instant::now(),
            stats: UnwindStats {
                bytes_budget: budget,
                ..UnwindStats::default()
            },
            warned_full: false,
            shared: Arc::default(),
        };
        unwinder.publish();
        unwinder
    }

    /// Starts the builder thread, which hands each table it builds to
    /// `done` (for the unwinder's thread to pass to [`Unwinder::work`]).
    pub(crate) fn start_builder(
        &mut self,
        done: impl Fn(Built) -> bool + Send + 'static,
    ) -> std::io::Result<()> {
        self.builder = Some(TableBuilder::start(done)?);
        Ok(())
    }

    /// Whether to tell the program about Python processes, so that their
    /// walks read Python frames (on unless set off).
    pub(crate) fn read_python(&mut self, on: bool) {
        self.python = on;
    }

    /// Whether to read JVM processes (their main class, what they are)
    /// (on unless set off).
    pub(crate) fn read_java(&mut self, on: bool) {
        self.java = on;
    }

    /// How long the unwinder thread may wait for work before calling
    /// [`Unwinder::idle`]: shorter while a JVM is waited for.
    pub(crate) fn idle_wait(&self) -> Duration {
        match self.jvms.waiting() {
            true => crate::jvm::finder::RETRY_EVERY,
            false => REAP_EVERY,
        }
    }

    /// What the unwinder does when no work came: reads again the JVMs that
    /// had not started, and lets exited processes go.
    pub(crate) fn idle(&mut self) {
        self.retry_jvms();
        if self.last_reap.elapsed() >= REAP_EVERY {
            self.reap_exited();
        }
    }

    /// Reads again the JVMs due to be (those that had not started).
    fn retry_jvms(&mut self) {
        let due = self.jvms.due();
        for &pid in &due {
            self.write_jvm(pid);
        }
        if !due.is_empty() {
            self.publish();
        }
    }

    /// What the agent reads: loaded pids and statistics, as they change.
    pub(crate) fn shared(&self) -> Arc<Mutex<Shared>> {
        self.shared.clone()
    }

    /// Does one piece of work from the unwinder thread's queue.
    pub(crate) fn work(&mut self, work: Work) {
        match work {
            Work::Learned(learned) => {
                for (pid, code) in learned {
                    self.load_process(pid, code);
                }
            }
            Work::Built(built) => self.built(built),
        }
        // On a host whose processes keep coming, the thread is never idle.
        self.retry_jvms();
    }

    /// Gives the program `pid`'s mappings and asks for the unwind tables
    /// of its files, so its next samples are walked with them. Does
    /// nothing when the process has already exited.
    pub(crate) fn load_process(&mut self, pid: u32, code: ProcessCode) {
        let ProcessCode {
            files: mut mappings,
            mut jit,
        } = code;
        let Ok(start_time) = procfs::start_time(pid) else {
            return;
        };
        self.loads += 1;
        if self.last_reap.elapsed() >= REAP_EVERY {
            self.reap_exited();
        }
        mappings.sort_by_key(|(m, _)| m.start);
        if mappings.len() > MAX_MAPPINGS {
            debug!(
                pid,
                mappings = mappings.len(),
                "more executable mappings than the program takes"
            );
            mappings.truncate(MAX_MAPPINGS);
        }
        // Files first: past the bound, JIT regions go (a walk through one
        // then takes it for unknown code, and still follows frame
        // pointers).
        jit.truncate(MAX_MAPPINGS - mappings.len());
        // A reload (new mappings, or a table missing) or a reused pid: what
        // it held before is released once the new entry replaces the old,
        // not before, so that its tables are not evicted first to make
        // room for themselves.
        let previous = self.processes.remove(&pid);
        let keep: HashSet<FileId> = mappings.iter().map(|(_, f)| f.file_id).collect();
        let mut files = Vec::new();
        for (m, file) in &mappings {
            if self.acquire_table(pid, m, file.file_id, &keep) {
                files.push(file.file_id);
            }
        }
        self.processes.insert(
            pid,
            LoadedProcess {
                start_time,
                mappings,
                jit,
                files,
            },
        );
        self.write_process(pid);
        self.write_python(pid);
        self.write_jvm(pid);
        if let Some(previous) = previous {
            self.release_files(&previous.files);
        }
        self.publish();
    }

    /// Tells the program where `pid`'s Python interpreter is, when it runs
    /// one, so that its walks read Python frames; forgets it otherwise.
    fn write_python(&mut self, pid: u32) {
        let Some(process) = self.processes.get(&pid).filter(|_| self.python) else {
            return;
        };
        let mut found = None;
        for (m, file) in &process.mappings {
            if !python::may_be_python(m.name()) {
                continue;
            }
            let interp = match self.interpreters.get(&file.file_id) {
                Some(known) => known.clone(),
                None => match inspect_python(pid, m) {
                    Ok(found) => {
                        let found = found.map(Arc::new);
                        self.interpreters.insert(file.file_id, found.clone());
                        found
                    }
                    Err(e) => {
                        debug!(pid, path = %m.path, error = %e, "cannot open a possible Python interpreter");
                        None
                    }
                },
            };
            if let Some(interp) = interp {
                found = Some((interp, file.bias(m)));
                break;
            }
        }
        let shared = self.shared.clone();
        let mut shared = shared.lock().unwrap_or_else(PoisonError::into_inner);
        match found {
            Some((interp, bias)) => {
                let entry = python::bpf_entry(&interp, bias);
                if let Err(e) = self.maps.python.insert(pid, entry, 0) {
                    warn!(pid, error = %e, "python_procs is full: this process's Python frames are not read");
                    return;
                }
                if shared.python.insert(pid, interp.clone()).is_none() {
                    debug!(pid, version = ?interp.version, supported = entry.supported, "Python process");
                }
            }
            None => {
                if shared.python.remove(&pid).is_some() {
                    let _ = self.maps.python.remove(&pid);
                }
            }
        }
    }

    /// Finds the JVM `pid` runs, if any, for its label and markers.
    fn write_jvm(&mut self, pid: u32) {
        let Some(process) = self.processes.get(&pid).filter(|_| self.java) else {
            return;
        };
        let found = self.jvms.find(pid, &process.mappings);
        if let Some(jvm) = &found
            && let Jvm::HotSpot { layout, process } = &**jvm
        {
            let entry = crate::jvm::bpf_entry(layout, process);
            if let Err(e) = self.maps.jvm.insert(pid, entry, 0) {
                warn!(pid, error = %e, "jvm_procs is full: this JVM's Java frames are not read");
            }
        } else {
            let _ = self.maps.jvm.remove(&pid);
        }
        let mut shared = self.lock_shared();
        match found {
            Some(jvm) => {
                shared.jvm.insert(pid, jvm);
            }
            None => {
                shared.jvm.remove(&pid);
            }
        }
    }

    /// Writes `pid`'s mapping array into the program from what is known
    /// of its files' tables now, and whether they are all loaded.
    fn write_process(&mut self, pid: u32) {
        let Some(process) = self.processes.get(&pid) else {
            return;
        };
        let mut complete = true;
        let mut entries: Vec<BpfMapping> = process
            .mappings
            .iter()
            .map(|(m, file)| {
                let table = self.tables.get(&file.file_id);
                let loaded = table.is_some_and(|t| matches!(t.state, TableState::Loaded(_)));
                complete &= loaded || self.no_table.contains(&file.file_id);
                BpfMapping {
                    start: m.start,
                    end: m.end,
                    // runtime - bias = the file vaddr the rows use.
                    bias: file.bias(m),
                    table_id: table.map_or(0, |t| t.id),
                    // Before it is built, the search is bounded by the
                    // array's own end.
                    rows_len: table
                        .filter(|t| t.rows > 0)
                        .map_or(MAX_TABLE_ROWS as u32, |t| t.rows),
                }
            })
            .collect();
        // JIT regions: no table (id 0), so frame pointers.
        entries.extend(process.jit.iter().map(|m| BpfMapping {
            start: m.start,
            end: m.end,
            bias: 0,
            table_id: 0,
            rows_len: 0,
        }));
        entries.sort_by_key(|e| e.start);
        let written = if entries.is_empty() {
            self.maps.processes.remove(&pid).map_err(|e| e.to_string())
        } else {
            filled_array(&entries, "kiln_mappings").and_then(|list| {
                self.maps
                    .processes
                    .insert(pid, &list, 0)
                    .map_err(|e| e.to_string())
            })
        };
        let mut shared = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
        match written {
            Ok(()) if complete => {
                shared.loaded.insert(pid);
            }
            Ok(()) => {
                shared.loaded.remove(&pid);
            }
            Err(e) => {
                debug!(pid, error = %e, "writing proc_mappings failed");
                shared.loaded.remove(&pid);
            }
        }
    }

    /// Counts `pid` as one more user of the table of the file `mapping`
    /// maps, asking for it (from the disk cache, or built in the
    /// background) when it is not loaded. False when the file has no
    /// usable table.
    fn acquire_table(
        &mut self,
        pid: u32,
        mapping: &Mapping,
        file: FileId,
        keep: &HashSet<FileId>,
    ) -> bool {
        if self.no_table.contains(&file) {
            return false;
        }
        let now = self.loads;
        let state = match self.tables.get_mut(&file) {
            Some(t) => {
                t.users += 1;
                t.last_used = now;
                t.state
            }
            None => {
                let id = self.next_id;
                self.next_id = self.next_id.checked_add(1).unwrap_or(1);
                self.tables.insert(
                    file,
                    FileTable {
                        id,
                        rows: 0,
                        state: TableState::Unloaded,
                        users: 1,
                        last_used: now,
                    },
                );
                TableState::Unloaded
            }
        };
        if state != TableState::Unloaded {
            return true;
        }
        if let Some(table) = self.cache.as_ref().and_then(|c| c.load(file)) {
            self.stats.from_cache += 1;
            self.load(file, &table, &mapping.path, keep);
            return true;
        }
        self.request_build(pid, mapping, file)
    }

    /// Opens the file (through the process, while it is alive, and only if
    /// it is still the regular file mapped: see `mapped_file.rs`) and
    /// queues its table. False when it cannot be opened: the process exited
    /// first (the next process mapping it tries again), or what its path
    /// leads to now is not what was mapped.
    fn request_build(&mut self, pid: u32, mapping: &Mapping, file: FileId) -> bool {
        let Some(builder) = &self.builder else {
            return false;
        };
        let source = match open_mapped(pid, mapping) {
            Ok(source) => source,
            Err(e) => {
                debug!(file = %mapping.path, error = %e, "unwind table not built: file unreadable");
                self.tables.remove(&file);
                return false;
            }
        };
        builder.request(BuildJob {
            file,
            path: mapping.path.clone(),
            source,
        });
        if let Some(t) = self.tables.get_mut(&file) {
            t.state = TableState::Building;
        }
        true
    }

    /// Takes a table the builder finished: caches and loads it, and
    /// rewrites the mappings of the processes that map the file.
    fn built(&mut self, built: Built) {
        let Built {
            file,
            path,
            result,
            took,
        } = built;
        let table = match result {
            Ok(table) if !table.is_empty() && table.len() <= MAX_TABLE_ROWS => Some(table),
            Ok(table) => {
                if !table.is_empty() {
                    info!(file = %path, rows = table.len(), "no unwind table: more rows than the walker searches");
                }
                None
            }
            Err(e @ (UnwindError::TooBig(_) | UnwindError::Span(_))) => {
                info!(file = %path, error = %e, "no unwind table: its stacks are walked by frame pointers");
                None
            }
            Err(e) => {
                debug!(file = %path, error = %e, "no unwind table");
                None
            }
        };
        let Some(table) = table else {
            self.tables.remove(&file);
            self.remember_no_table(file);
            self.rewrite_users_of(file);
            return;
        };
        self.stats.built += 1;
        if self
            .stats
            .largest_build
            .is_none_or(|(rows, _)| table.len() > rows)
        {
            self.stats.largest_build = Some((table.len(), took));
        }
        if took > Duration::from_millis(200) {
            info!(file = %path, rows = table.len(), ms = took.as_millis() as u64, "built a large unwind table");
        }
        if let Some(cache) = &mut self.cache {
            cache.store(file, &table);
        }
        let Some(t) = self.tables.get_mut(&file) else {
            return;
        };
        t.state = TableState::Unloaded;
        t.rows = table.len() as u32;
        if t.users > 0 {
            self.load(file, &table, &path, &HashSet::from([file]));
        }
        self.rewrite_users_of(file);
        self.publish();
    }

    /// Writes again the mapping arrays of the processes that map `file`.
    fn rewrite_users_of(&mut self, file: FileId) {
        let users: Vec<u32> = self
            .processes
            .iter()
            .filter(|(_, p)| {
                p.files.contains(&file) || p.mappings.iter().any(|(_, f)| f.file_id == file)
            })
            .map(|(&pid, _)| pid)
            .collect();
        for pid in users {
            self.write_process(pid);
        }
    }

    /// Loads `table` into the program under its file's id, making room
    /// for it (never by evicting the tables in `keep`). Returns whether it
    /// is loaded.
    fn load(
        &mut self,
        file: FileId,
        table: &UnwindTable,
        path: &str,
        keep: &HashSet<FileId>,
    ) -> bool {
        let bytes = table.kernel_bytes();
        if bytes > self.budget {
            info!(
                file = path,
                bytes,
                budget = self.budget,
                "no unwind table: it is larger than the whole table budget \
                 (its stacks are walked by frame pointers; --unwind-table-mib makes room)"
            );
            self.tables.remove(&file);
            self.remember_no_table(file);
            return false;
        }
        if !self.make_room(bytes, path, keep) {
            self.stats.refused += 1;
            return false;
        }
        let Some(id) = self.tables.get(&file).map(|t| t.id) else {
            return false;
        };
        let inserted = filled_array(table.packed(), "kiln_unwind").and_then(|rows| {
            self.maps
                .tables
                .insert(id, &rows, 0)
                .map_err(|e| e.to_string())
        });
        if let Err(e) = inserted {
            warn!(file = path, error = %e, "loading an unwind table failed");
            return false;
        }
        let _ = self.maps.evicted.remove(&id);
        self.used += bytes;
        if let Some(t) = self.tables.get_mut(&file) {
            t.state = TableState::Loaded(bytes);
            t.rows = table.len() as u32;
        }
        debug!(file = path, rows = table.len(), id, "unwind table loaded");
        true
    }

    /// Room for `bytes` more within the budget: after reaping exited
    /// processes, by evicting tables no live process maps (least recently
    /// used first), then tables of live processes other than `keep`. False
    /// when the tables in `keep` fill the budget alone.
    fn make_room(&mut self, bytes: u64, path: &str, keep: &HashSet<FileId>) -> bool {
        if self.used + bytes <= self.budget {
            return true;
        }
        self.reap_exited();
        while self.used + bytes > self.budget {
            let victim = self
                .tables
                .iter()
                .filter(|(file, t)| {
                    matches!(t.state, TableState::Loaded(_)) && !keep.contains(file)
                })
                .min_by_key(|(_, t)| (t.users > 0, t.last_used))
                .map(|(file, _)| *file);
            let Some(victim) = victim else {
                if !self.warned_full {
                    warn!(
                        file = path,
                        bytes,
                        budget = self.budget,
                        "unwind tables of one process fill the table budget: its other files are \
                         walked by frame pointers (raise --unwind-table-mib)"
                    );
                    self.warned_full = true;
                }
                return false;
            };
            self.evict(victim);
        }
        true
    }

    fn evict(&mut self, file: FileId) {
        let Some(t) = self.tables.get_mut(&file) else {
            return;
        };
        let TableState::Loaded(bytes) = t.state else {
            return;
        };
        t.state = TableState::Unloaded;
        let id = t.id;
        // Marked first, so a walk that misses it knows why.
        let _ = self.maps.evicted.insert(id, 1, 0);
        if let Err(e) = self.maps.tables.remove(&id) {
            debug!(id, error = %e, "removing an unwind table failed");
        }
        self.used -= bytes;
        self.stats.evicted += 1;
        // The processes that map it walk its frames by frame pointers until
        // they are loaded again.
        let mut shared = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
        for (pid, p) in &self.processes {
            if p.files.contains(&file) {
                shared.loaded.remove(pid);
            }
        }
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
            if let Some(process) = self.processes.remove(&pid) {
                self.release_files(&process.files);
            }
            let _ = self.maps.processes.remove(&pid);
            let _ = self.maps.python.remove(&pid);
            let _ = self.maps.jvm.remove(&pid);
            self.jvms.forget(pid);
        }
        self.stats.reaped += gone.len() as u64;
        {
            let mut shared = self.lock_shared();
            for pid in &gone {
                shared.loaded.remove(pid);
                shared.python.remove(pid);
                shared.jvm.remove(pid);
            }
        }
        self.publish();
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
            bytes_used: self.used,
            bytes_budget: self.budget,
            files: self
                .tables
                .values()
                .filter(|t| matches!(t.state, TableState::Loaded(_)))
                .count(),
            processes: self.processes.len(),
            building: self.builder.as_ref().map_or(0, TableBuilder::waiting),
            ..self.stats.clone()
        };
        self.lock_shared().stats = stats;
    }
}

/// The interpreter in the file `mapping` maps, if any; an error when
/// this process's mapping could not be opened (it exited, say), which
/// says nothing of the file and so must not be remembered for it.
fn inspect_python(pid: u32, mapping: &Mapping) -> Result<Option<Interpreter>, MappedFileError> {
    let file = open_mapped(pid, mapping)?;
    let cache = object::ReadCache::new(file);
    let Ok(elf) = object::File::parse(&cache) else {
        return Ok(None);
    };
    Ok(python::inspect(&elf, mapping.name()))
}

/// A new array map holding exactly `values`, made to go into one of the
/// program's maps of maps (`BPF_F_INNER_MAP`: its size may differ from
/// the template's), filled by one copy through a shared mapping of it
/// (`BPF_F_MMAPABLE`) rather than a syscall per element. The kernel keeps
/// it alive once inserted; the returned handle may be dropped.
fn filled_array<T: Copy>(values: &[T], name: &str) -> Result<MapData, String> {
    use aya_obj::generated::{BPF_F_INNER_MAP, BPF_F_MMAPABLE, bpf_map_type};

    let len = u32::try_from(values.len())
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("an array of {} elements", values.len()))?;
    let obj = aya_obj::Map::new_from_params(
        bpf_map_type::BPF_MAP_TYPE_ARRAY as u32,
        size_of::<u32>() as u32,
        size_of::<T>() as u32,
        len,
        BPF_F_INNER_MAP | BPF_F_MMAPABLE,
    );
    let map = MapData::create(obj, name, None).map_err(|e| e.to_string())?;
    // The kernel rounds each element up to 8 bytes.
    let stride = size_of::<T>().next_multiple_of(8);
    let bytes = stride * values.len();
    // SAFETY: a fresh shared mapping of the map's fd, `bytes` long (the
    // array's size, which the kernel rounds up to whole pages), written
    // element by element within it and unmapped before returning.
    unsafe {
        let at = libc::mmap(
            std::ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            map.fd().as_fd().as_raw_fd(),
            0,
        );
        if at == libc::MAP_FAILED {
            return Err(format!(
                "mmap of the array: {}",
                std::io::Error::last_os_error()
            ));
        }
        let base = at.cast::<u8>();
        for (i, value) in values.iter().enumerate() {
            std::ptr::write_unaligned(base.add(i * stride).cast::<T>(), *value);
        }
        libc::munmap(at, bytes);
    }
    Ok(map)
}

// The element types filled_array writes, as their C structs are.
const _: () = assert!(size_of::<UnwindRow>() == 8 && size_of::<BpfMapping>() == 32);
