//! Finds the JVM of each process the unwinder loads, remembering what it
//! learnt of each `libjvm.so` (its tables and layout are the same in every
//! process that maps the file), and which JVMs have not started yet.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kiln_model::FileId;
use tracing::debug;

use crate::fileid::ProcessMappings;
use crate::mapped_file::{MappedFileError, open_mapped};
use crate::memory::ProcessMemory;
use crate::procfs::Mapping;

use super::vmstructs::VmTables;
use super::{HotSpotLayout, Jvm, JvmError, JvmLibrary, JvmProcess};

/// How often a JVM that has not started yet is read again.
pub(crate) const RETRY_EVERY: Duration = Duration::from_millis(500);
/// How long a JVM is waited for before it is taken as one that will not
/// start (its samples then carry no JVM label, as before).
const GIVE_UP_AFTER: Duration = Duration::from_secs(30);

/// A JVM library file, as found.
#[derive(Debug)]
struct Library {
    kind: JvmLibrary,
    /// HotSpot's layout, once read from a process mapping it; an error
    /// that says the build is not read (never a failed read of one
    /// process's memory, which says nothing of the file).
    layout: Option<Result<Arc<HotSpotLayout>, String>>,
}

/// How many files' "is it a native image" answers are kept before they
/// are all forgotten (and asked again as processes map them): a build host
/// makes new executables all day.
const NATIVE_IMAGE_ANSWERS_AT_MOST: usize = 1 << 16;

/// The JVM libraries seen, and the JVMs waited for.
#[derive(Debug, Default)]
pub(crate) struct JvmFinder {
    libraries: HashMap<FileId, Option<Library>>,
    /// Whether each other file mapped executable is a GraalVM native
    /// image, as found the first time.
    native_images: HashMap<FileId, bool>,
    /// Processes whose JVM had not started, with when it was first seen.
    waiting: HashMap<u32, (Instant, Instant)>,
}

impl JvmFinder {
    /// The JVM of process `pid`, whose executable mappings are `mappings`;
    /// `None` when it runs none, or none that has started (then it is
    /// waited for: see [`JvmFinder::due`]).
    pub(crate) fn find(&mut self, pid: u32, mappings: &ProcessMappings) -> Option<Arc<Jvm>> {
        let (m, file) = mappings
            .iter()
            .find(|(m, _)| super::may_be_jvm(m.name()))
            .or_else(|| {
                mappings
                    .iter()
                    .find(|(m, file)| self.is_native_image(pid, m, file.file_id))
            })?;
        let library = match self.libraries.get_mut(&file.file_id) {
            Some(known) => known.as_mut()?,
            None => match inspect(pid, m) {
                Ok(found) => {
                    let found = found.map(|kind| Library { kind, layout: None });
                    self.libraries
                        .entry(file.file_id)
                        .or_insert(found)
                        .as_mut()?
                }
                Err(e) => {
                    debug!(pid, path = %m.path, error = %e, "cannot open a possible JVM");
                    return None;
                }
            },
        };
        let bias = file.bias(m);
        let mem = ProcessMemory::new(pid);
        let symbols = match &library.kind {
            JvmLibrary::Unsupported(what) => {
                self.waiting.remove(&pid);
                return Some(Arc::new(Jvm::Unsupported {
                    reason: (*what).to_owned(),
                    main: main_of_pid(pid),
                }));
            }
            JvmLibrary::HotSpot(symbols) => symbols,
        };
        let layout = match &library.layout {
            Some(known) => known.clone(),
            None => match VmTables::read(&mem, symbols, bias)
                .and_then(|tables| HotSpotLayout::read(&tables, &mem, bias))
            {
                Ok(layout) => {
                    debug!(pid, release = layout.release, "HotSpot layout read");
                    let layout = Ok(Arc::new(layout));
                    library.layout = Some(layout.clone());
                    layout
                }
                // Read before the JVM set its tables up, or as it exited:
                // nothing to remember of the file.
                Err(e @ (JvmError::Read { .. } | JvmError::NotStarted)) => {
                    debug!(pid, error = %e, "cannot read a JVM's tables yet");
                    return self.not_started(pid);
                }
                Err(e) => {
                    let layout = Err(e.to_string());
                    library.layout = Some(layout.clone());
                    layout
                }
            },
        };
        let layout = match layout {
            Ok(layout) => layout,
            Err(reason) => {
                self.waiting.remove(&pid);
                return Some(Arc::new(Jvm::Unsupported {
                    reason,
                    main: main_of_pid(pid),
                }));
            }
        };
        match JvmProcess::read(&mem, &layout, bias) {
            Ok(process) => {
                self.waiting.remove(&pid);
                debug!(pid, version = %layout.version, main = ?process.main, "JVM process");
                Some(Arc::new(Jvm::HotSpot {
                    layout,
                    process: Arc::new(process),
                }))
            }
            Err(JvmError::NotStarted) => self.not_started(pid),
            Err(e) => {
                debug!(pid, error = %e, "cannot read a JVM");
                self.waiting.remove(&pid);
                None
            }
        }
    }

    /// Whether `mapping` of `pid`, file `file_id`, is a GraalVM native
    /// image, looked at once per file.
    fn is_native_image(&mut self, pid: u32, mapping: &Mapping, file_id: FileId) -> bool {
        if let Some(&known) = self.native_images.get(&file_id) {
            return known;
        }
        let found = match inspect(pid, mapping) {
            Ok(Some(kind @ JvmLibrary::Unsupported(_))) => {
                // Kept as the JVM library it is, so `find` need not open it again.
                let library = Library { kind, layout: None };
                self.libraries.insert(file_id, Some(library));
                true
            }
            _ => false,
        };
        if self.native_images.len() >= NATIVE_IMAGE_ANSWERS_AT_MOST {
            self.native_images.clear();
        }
        self.native_images.insert(file_id, found);
        found
    }

    /// Waits for `pid`'s JVM to start: it is read again in
    /// [`RETRY_EVERY`], for up to [`GIVE_UP_AFTER`].
    fn not_started(&mut self, pid: u32) -> Option<Arc<Jvm>> {
        let now = Instant::now();
        let (since, _) = *self.waiting.entry(pid).or_insert((now, now));
        if now.duration_since(since) >= GIVE_UP_AFTER {
            debug!(pid, "a JVM that did not start within {GIVE_UP_AFTER:?}");
            self.waiting.remove(&pid);
        } else {
            self.waiting.insert(pid, (since, now + RETRY_EVERY));
        }
        None
    }

    /// Processes whose JVM is to be looked at again now.
    pub(crate) fn due(&self) -> Vec<u32> {
        let now = Instant::now();
        self.waiting
            .iter()
            .filter(|(_, (_, next))| *next <= now)
            .map(|(&pid, _)| pid)
            .collect()
    }

    /// Whether a JVM is waited for (the unwinder thread then wakes every
    /// [`RETRY_EVERY`]).
    pub(crate) fn waiting(&self) -> bool {
        !self.waiting.is_empty()
    }

    /// Forgets a process that exited.
    pub(crate) fn forget(&mut self, pid: u32) {
        self.waiting.remove(&pid);
    }
}

/// The JVM library in the file `mapping` maps, if it is one; an error when
/// this process's mapping could not be opened.
fn inspect(pid: u32, mapping: &Mapping) -> Result<Option<JvmLibrary>, MappedFileError> {
    let file = open_mapped(pid, mapping)?;
    let cache = object::ReadCache::new(file);
    let Ok(elf) = object::File::parse(&cache) else {
        return Ok(None);
    };
    Ok(super::inspect(&elf, mapping.name()))
}

/// What `pid`'s command line says it runs, for a JVM not read.
fn main_of_pid(pid: u32) -> Option<String> {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let args: Vec<String> = cmdline
        .split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    super::main_from_cmdline(&args)
}

/// The JVM `pid` runs, read now as the agent reads it: `None` when it
/// runs none, or none that has started yet. For tests, and to check by
/// hand what the agent will find in a process.
pub fn probe(pid: u32) -> Option<Arc<Jvm>> {
    let mappings: ProcessMappings = crate::procfs::read_maps(pid)
        .ok()?
        .into_iter()
        .filter(Mapping::is_file)
        .filter_map(|m| {
            let file = crate::fileid::FileInfo::of_mapping(pid, &m).ok()?;
            Some((m, Arc::new(file)))
        })
        .collect();
    JvmFinder::default().find(pid, &mappings)
}
