//! Automatic symbol upload: each executable file the agent samples is
//! offered to a background thread, which opens it (through
//! [`crate::open_mapped`]: only the file the process maps, only a regular
//! one), asks the backend whether it has the file's symbols
//! (`HEAD /api/v1/symbols/{id}`) and when not extracts them here and sends
//! them as a zstd-compressed ksym (`PUT`, `Content-Type:`
//! [`ksym::MEDIA_TYPE`]). The file itself never leaves the host: other
//! users' programs are theirs, and a ksym is a fraction of their size.
//!
//! What is extracted: the ELF symbol tables (function names) by default,
//! and with `kiln-agent --upload-dwarf` the DWARF line tables and inline
//! chains too. Extraction reads only the sections it uses into an
//! otherwise untouched (unbacked) buffer the size of the file
//! (`upload/extract.rs`), so its memory is that of the symbol tables (and
//! DWARF), not of the file, and refuses files whose sections exceed a
//! budget.
//!
//! Sampling never waits for this: an offer only updates a bounded pending
//! set (a file that finds it full is offered again by a later batch).
//! Files wait there with a weight, the number of batches they were seen
//! in, and the thread takes the heaviest first: a service that keeps
//! burning CPU gets its names before the hundreds of short-lived binaries
//! a build machine starts (each seen in one batch), however many of those
//! came first. A file that could not be opened (its process exited, or
//! its path was swapped) may be offered again, by another process mapping
//! it.
//!
//! The thread keeps to a CPU budget, a share of the machine
//! ([`SymbolUpload::cpu_percent`]), pausing after each file, at nice 19
//! (`upload/pace.rs` says why).
//!
//! A file whose separate debug file is on this host
//! (`<debug dir>/.build-id/xx/rest.debug`, what `-dbg` and `-debuginfo`
//! packages install) is extracted with it: it carries the same build id,
//! so the same FileId, and the symbol table (and DWARF) that stripped
//! distribution binaries lack.

mod extract;
mod pace;

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use kiln_model::FileId;
use kiln_symbolizer_workers::{SymbolBody, SymbolClient, SymbolClientError, SymbolScope};
use tracing::{debug, info, warn};

pub use extract::{
    ExtractedSymbols, LocalLimits, PreparedSymbols, SparseImage, SymbolsError, extract_symbols,
    prepare_upload,
};
pub use pace::DEFAULT_SYMBOL_CPU_PERCENT;
use pace::Pacer;

use crate::fileid::FileInfo;
use crate::mapped_file::{MappedFileError, MappedSource};

/// Files waiting for the upload thread.
const QUEUE: usize = 256;
/// Bound on remembered file ids; past it the set starts over, and a file
/// may be asked about (`HEAD`, cheap) once more.
const MAX_REMEMBERED: usize = 64 * 1024;
/// zstd level of uploads: a fast level, the backend compresses again for
/// storage.
const ZSTD_LEVEL: i32 = 3;
/// Where distributions install separate debug files.
pub const DEFAULT_DEBUG_DIR: &str = "/usr/lib/debug";

/// One file to upload, with a process mapping it.
#[derive(Debug)]
struct Job {
    file_id: FileId,
    source: MappedSource,
}

/// A file waiting for the thread.
#[derive(Debug)]
struct Waiting {
    source: MappedSource,
    /// Batches the file was seen in while it waited.
    weight: u64,
    /// Order of arrival: among equal weights, the first offered goes first.
    arrival: u64,
}

/// What the agent and the upload thread share.
#[derive(Debug, Default)]
struct Pending {
    waiting: HashMap<FileId, Waiting>,
    /// Files the thread has taken (asked about or sent) this run.
    taken: HashSet<FileId>,
    arrivals: u64,
    /// The uploader was dropped: the thread ends once `waiting` is empty.
    closed: bool,
}

impl Pending {
    /// Adds one to `file_id`'s weight, or lets it wait when there is room.
    fn offer(&mut self, file_id: FileId, source: &MappedSource) {
        if self.taken.contains(&file_id) {
            return;
        }
        if let Some(waiting) = self.waiting.get_mut(&file_id) {
            waiting.weight += 1;
            return;
        }
        if self.waiting.len() >= QUEUE {
            return;
        }
        self.arrivals += 1;
        self.waiting.insert(
            file_id,
            Waiting {
                source: source.clone(),
                weight: 1,
                arrival: self.arrivals,
            },
        );
    }

    /// The heaviest waiting file (the earliest among equals), now taken.
    fn take(&mut self) -> Option<Job> {
        let (&file_id, _) = self
            .waiting
            .iter()
            .max_by_key(|(_, w)| (w.weight, std::cmp::Reverse(w.arrival)))?;
        let waiting = self.waiting.remove(&file_id)?;
        if self.taken.len() >= MAX_REMEMBERED {
            self.taken.clear();
        }
        self.taken.insert(file_id);
        Some(Job {
            file_id,
            source: waiting.source,
        })
    }

    /// Lets `file_id` be offered again: it could not be opened through the
    /// process it was offered with.
    fn release(&mut self, file_id: FileId) {
        self.taken.remove(&file_id);
    }
}

#[derive(Debug, Default)]
struct Shared {
    pending: Mutex<Pending>,
    wake: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sleeps for `pause`, or until the uploader is gone: offers that come
    /// meanwhile wait.
    fn rest(&self, pause: Duration) {
        let until = std::time::Instant::now() + pause;
        let mut pending = self.lock();
        while !pending.closed {
            let left = until.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return;
            }
            pending = self
                .wake
                .wait_timeout(pending, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Blocks until a file waits (and takes it) or the uploader is gone.
    fn next_job(&self) -> Option<Job> {
        let mut pending = self.lock();
        loop {
            if let Some(job) = pending.take() {
                return Some(job);
            }
            if pending.closed {
                return None;
            }
            pending = self
                .wake
                .wait(pending)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

/// How the agent uploads symbols: what it extracts, where it looks for
/// debug files, and how much CPU it may spend.
#[derive(Debug, Clone)]
pub struct SymbolUpload {
    /// Directories of separate debug files by build id, in order.
    pub debug_dirs: Vec<PathBuf>,
    /// DWARF line tables and inline chains too, else function names only.
    pub dwarf: bool,
    /// Most CPU the upload thread uses, in percent of all the machine's
    /// CPUs: the thread pauses after each file (the busiest programs'
    /// first).
    pub cpu_percent: f64,
    /// Which files are extracted here; larger ones go to the backend as
    /// sparse images.
    pub local: LocalLimits,
}

impl Default for SymbolUpload {
    fn default() -> Self {
        SymbolUpload {
            debug_dirs: vec![PathBuf::from(DEFAULT_DEBUG_DIR)],
            dwarf: false,
            cpu_percent: DEFAULT_SYMBOL_CPU_PERCENT,
            local: LocalLimits::default(),
        }
    }
}

/// Hands files to the upload thread, heaviest first, at most once each per
/// run.
#[derive(Debug)]
pub struct SymbolUploader {
    shared: Arc<Shared>,
}

impl SymbolUploader {
    /// Starts the upload thread, sending to the backend at `server` as
    /// `how` says. The thread ends when the uploader is dropped and
    /// nothing waits.
    pub fn start(
        server: &str,
        api_key: Option<&str>,
        how: SymbolUpload,
    ) -> std::io::Result<SymbolUploader> {
        let shared = Arc::new(Shared::default());
        // Extraction is local; a large ksym may take a while to send.
        let client = SymbolClient::new(server, api_key, Duration::from_secs(300));
        let jobs = shared.clone();
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        let pacer = Pacer::new(how.cpu_percent, cpus, std::time::Instant::now());
        std::thread::Builder::new()
            .name("kiln-symbols".into())
            .spawn(move || {
                pace::lowest_priority();
                upload_all(&client, &how, pacer, &jobs)
            })?;
        Ok(SymbolUploader { shared })
    }

    /// Offers the file `file_id`, mapped as `source` says, seen in one
    /// more batch; never blocks on the upload thread.
    pub fn offer(&mut self, file_id: FileId, source: &MappedSource) {
        self.shared.lock().offer(file_id, source);
        self.shared.wake.notify_one();
    }
}

impl Drop for SymbolUploader {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.wake.notify_one();
    }
}

fn upload_all(client: &SymbolClient, how: &SymbolUpload, mut pacer: Pacer, jobs: &Shared) {
    while let Some(job) = jobs.next_job() {
        let before = pace::thread_cpu_time();
        let outcome = upload(client, how, &job);
        let spent = pace::thread_cpu_time().saturating_sub(before);
        let pause = pacer.pause_after(spent, std::time::Instant::now());
        match outcome {
            Ok(Outcome::Present) => debug!(file_id = %job.file_id, "backend has the symbols"),
            Ok(Outcome::Uploaded(sent)) => info!(
                file_id = %job.file_id,
                file = %job.source.mapping.path,
                ranges = ?sent.ranges,
                extracted_by = if sent.ranges.is_some() { "agent" } else { "backend" },
                bytes = sent.bytes,
                dwarf = sent.dwarf,
                debug_file = sent.debug_file.as_ref().map(|p| p.display().to_string()),
                "symbols uploaded"
            ),
            // Routine (the process exited) or refused on purpose (its path
            // was swapped for a FIFO, a device or a symlink): sampling goes
            // on, and another process mapping the file may offer it again.
            Err(e @ (UploadError::Unopened(_) | UploadError::Changed)) => {
                debug!(file_id = %job.file_id, pid = job.source.pid, file = %job.source.mapping.path, error = %e, "symbols not uploaded");
                jobs.lock().release(job.file_id);
            }
            Err(e) => {
                warn!(file_id = %job.file_id, file = %job.source.mapping.path, error = %e, "symbol upload failed")
            }
        }
        if !pause.is_zero() {
            debug!(
                pause_s = pause.as_secs_f64(),
                "symbol thread pausing within its CPU budget"
            );
            jobs.rest(pause);
        }
    }
}

/// What one upload sent.
#[derive(Debug)]
struct Sent {
    /// Ranges extracted here (`None`: the backend extracts a sparse image).
    ranges: Option<usize>,
    /// Bytes sent (compressed).
    bytes: usize,
    dwarf: bool,
    debug_file: Option<PathBuf>,
}

#[derive(Debug)]
enum Outcome {
    Present,
    Uploaded(Sent),
}

/// Why one upload failed.
#[derive(Debug, thiserror::Error)]
enum UploadError {
    #[error(transparent)]
    Backend(#[from] SymbolClientError),
    #[error(transparent)]
    Unopened(#[from] MappedFileError),
    #[error("the file mapped now is not the one sampled (a newer build of it)")]
    Changed,
    #[error("reading the file: {0}")]
    Read(#[from] crate::fileid::FileIdError),
    #[error(transparent)]
    Symbols(#[from] SymbolsError),
    #[error("compressing the symbols: {0}")]
    Compress(std::io::Error),
}

fn upload(client: &SymbolClient, how: &SymbolUpload, job: &Job) -> Result<Outcome, UploadError> {
    // Opened first (cheap, local): a file that cannot be opened costs the
    // backend no request.
    let file = job.source.open()?;
    let info = FileInfo::from_file(
        file.try_clone()
            .map_err(|source| crate::fileid::FileIdError::Read {
                path: PathBuf::from(&job.source.mapping.path),
                source,
            })?,
        Path::new(&job.source.mapping.path),
        job.source.mapping.name(),
    )?;
    if info.file_id != job.file_id {
        return Err(UploadError::Changed);
    }
    if client.has(SymbolScope::Tenant, job.file_id)? {
        return Ok(Outcome::Present);
    }
    let (kind, body, sent) = build_body(&file, &info, job.source.mapping.name(), how)?;
    client.put(SymbolScope::Tenant, job.file_id, kind, &body)?;
    Ok(Outcome::Uploaded(sent))
}

/// The body of a `PUT` and its kind: the symbols of `file` (whose facts
/// are `info`), with its separate debug file's when one of the debug
/// directories has it, as zstd-compressed ksym, or for a large file as a
/// compressed sparse image for the backend to extract.
fn build_body(
    file: &File,
    info: &FileInfo,
    name: &str,
    how: &SymbolUpload,
) -> Result<(SymbolBody, Vec<u8>, Sent), UploadError> {
    let debug = info
        .build_id
        .as_deref()
        .and_then(|id| debug_file(id, info.file_id, &how.debug_dirs));
    let prepared = prepare_upload(
        file,
        Path::new(name),
        debug.as_ref().map(|(path, file)| (path.as_path(), file)),
        how.dwarf,
        info.build_id.is_some(),
        how.local,
    )?;
    let debug_path = |used: bool| {
        used.then(|| debug.as_ref().map(|(p, _)| p.clone()))
            .flatten()
    };
    Ok(match prepared {
        PreparedSymbols::Ksym(extracted) => {
            let body =
                zstd::encode_all(&extracted.ksym[..], ZSTD_LEVEL).map_err(UploadError::Compress)?;
            let sent = Sent {
                ranges: Some(extracted.ranges),
                bytes: body.len(),
                dwarf: extracted.dwarf,
                debug_file: debug_path(extracted.used_debug_file),
            };
            (SymbolBody::KsymZstd, body, sent)
        }
        PreparedSymbols::Image(image) => {
            let sent = Sent {
                ranges: None,
                bytes: image.zstd.len(),
                dwarf: image.dwarf,
                debug_file: debug_path(image.used_debug_file),
            };
            (SymbolBody::ElfZstd, image.zstd, sent)
        }
    })
}

/// The separate debug file of the file with `build_id` (hex) and
/// `file_id` under one of `debug_dirs`, opened, when one is there, is a
/// regular file and carries the same id (a stale one from another build
/// does not).
fn debug_file(build_id: &str, file_id: FileId, debug_dirs: &[PathBuf]) -> Option<(PathBuf, File)> {
    use std::os::unix::fs::OpenOptionsExt;

    if build_id.len() < 3 || !build_id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let (head, rest) = build_id.split_at(2);
    debug_dirs.iter().find_map(|dir| {
        let path = dir
            .join(".build-id")
            .join(head)
            .join(format!("{rest}.debug"));
        // Debug directories are the host's (root's), and their build-id
        // links are symlinks on some distributions: followed, but never
        // blocking on a FIFO nor taking a terminal, and regular files only.
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
            .open(&path)
            .ok()?;
        if !file.metadata().ok()?.is_file() {
            return None;
        }
        let info = FileInfo::from_file(file.try_clone().ok()?, &path, "").ok()?;
        (info.file_id == file_id).then_some((path, file))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(pid: u32) -> MappedSource {
        MappedSource {
            pid,
            mapping: crate::procfs::Mapping {
                start: 0x1000,
                end: 0x2000,
                offset: 0,
                dev: 1,
                inode: 2,
                path: "/x".into(),
            },
        }
    }

    #[test]
    fn a_full_pending_set_drops_new_files_and_never_blocks() {
        let mut pending = Pending::default();
        for i in 0..(QUEUE as u128 * 4) {
            pending.offer(FileId(i), &source(1));
        }
        assert_eq!(pending.waiting.len(), QUEUE);
        // Those that did not fit are not remembered: a later batch offers
        // them again.
        let job = pending.take().unwrap();
        pending.offer(FileId(QUEUE as u128 * 2), &source(1));
        assert!(pending.waiting.contains_key(&FileId(QUEUE as u128 * 2)));
        // A taken file is not offered again...
        pending.offer(job.file_id, &source(1));
        assert!(!pending.waiting.contains_key(&job.file_id));
        // ...unless it could not be opened: then another process may.
        let mut pending = Pending::default();
        pending.offer(FileId(1), &source(1));
        let job = pending.take().unwrap();
        pending.offer(FileId(1), &source(2));
        assert!(pending.waiting.is_empty());
        pending.release(job.file_id);
        pending.offer(FileId(1), &source(2));
        assert_eq!(pending.waiting[&FileId(1)].source.pid, 2);
    }

    #[test]
    fn files_seen_in_more_batches_go_first_then_the_earliest() {
        let mut pending = Pending::default();
        // Batch 1: a build's short-lived binaries, then the service.
        for i in 1..=5 {
            pending.offer(FileId(i), &source(1));
        }
        pending.offer(FileId(100), &source(1));
        // Batches 2 and 3: the service is still running; so is file 3.
        for _ in 0..2 {
            pending.offer(FileId(100), &source(1));
        }
        pending.offer(FileId(3), &source(1));
        let order: Vec<u128> = std::iter::from_fn(|| pending.take())
            .map(|job| job.file_id.0)
            .collect();
        assert_eq!(order, [100, 3, 1, 2, 4, 5]);
    }

    /// The thread waits for offers, serves them while the uploader lives,
    /// and ends once it is dropped and nothing waits.
    #[test]
    fn the_thread_ends_after_the_uploader_is_dropped() {
        let shared = Arc::new(Shared::default());
        let worker = {
            let shared = shared.clone();
            std::thread::spawn(move || std::iter::from_fn(|| shared.next_job()).count())
        };
        let mut uploader = SymbolUploader {
            shared: shared.clone(),
        };
        uploader.offer(FileId(1), &source(1));
        uploader.offer(FileId(2), &source(1));
        drop(uploader);
        assert_eq!(worker.join().unwrap(), 2);
    }

    /// The address of `name` in `elf`'s symbol table.
    fn address_of(elf: &Path, name: &str) -> u64 {
        use object::{Object, ObjectSymbol};
        let data = std::fs::read(elf).unwrap();
        let file = object::File::parse(&*data).unwrap();
        file.symbols()
            .find(|s| s.name() == Ok(name))
            .unwrap_or_else(|| panic!("{name} not in the symtab"))
            .address()
    }

    /// What a body names `addr` (innermost first), and its line.
    fn names_at(body: &[u8], addr: u64) -> (Vec<String>, u32) {
        let bytes = zstd::decode_all(body).unwrap();
        let symbols = kiln_symbolizer_workers::ksym::Ksym::open(&bytes).unwrap();
        let mut frames = Vec::new();
        symbols.lookup(addr, &mut frames);
        let line = frames.first().map_or(0, |f| f.line);
        let names = frames
            .iter()
            .filter_map(|f| f.function().map(|n| n.into_owned()))
            .collect();
        (names, line)
    }

    fn body_of(elf: &Path, how: &SymbolUpload) -> (Vec<u8>, Sent) {
        let file = File::open(elf).unwrap();
        let info = FileInfo::read(elf, "prog").unwrap();
        let (kind, body, sent) = build_body(&file, &info, "prog", how).unwrap();
        assert_eq!(kind, SymbolBody::KsymZstd, "small files are extracted here");
        (body, sent)
    }

    /// What goes to the backend is a compressed ksym of the names, a
    /// fraction of the file; lines only with DWARF asked for.
    #[test]
    fn the_body_is_a_ksym_not_the_file() {
        use kiln_test_support::{CBuild, programs::ALPHA_BETA};

        let dir = tempfile::tempdir().unwrap();
        let elf = CBuild::cc()
            .args(["-O1", "-g"])
            .program(dir.path(), "prog", ALPHA_BETA);
        let alpha = address_of(&elf, "alpha");
        let whole = std::fs::read(&elf).unwrap();

        let (body, sent) = body_of(&elf, &SymbolUpload::default());
        assert!(!sent.dwarf);
        assert!(
            body.len() * 4 < whole.len(),
            "{} of {}",
            body.len(),
            whole.len()
        );
        assert!(zstd::decode_all(&body[..]).unwrap().starts_with(b"KSYM"));
        assert_eq!(names_at(&body, alpha), (vec!["alpha".to_owned()], 0));

        let (body, sent) = body_of(
            &elf,
            &SymbolUpload {
                dwarf: true,
                ..SymbolUpload::default()
            },
        );
        assert!(sent.dwarf);
        let (names, line) = names_at(&body, alpha);
        assert_eq!(names, ["alpha"]);
        assert!(line > 0, "DWARF gives lines");
    }

    /// A stripped binary with its debug file where a -dbg package puts it:
    /// its symbols come from the debug file; one from another build, or
    /// none, and the binary's own (dynamic) symbols are all there is.
    #[test]
    fn a_debug_file_by_build_id_names_a_stripped_binary() {
        use kiln_test_support::{CBuild, programs::ALPHA_BETA, strip};

        let dir = tempfile::tempdir().unwrap();
        let full = CBuild::cc().args(["-O1", "-g", "-Wl,--build-id"]).program(
            dir.path(),
            "prog",
            ALPHA_BETA,
        );
        let alpha = address_of(&full, "alpha");
        let stripped = dir.path().join("prog.stripped");
        strip(&full, &stripped);
        let info = FileInfo::read(&stripped, "prog").unwrap();
        let build_id = info.build_id.clone().expect("built with a build id");
        let debug_dir = dir.path().join("debug");
        let extraction = SymbolUpload {
            debug_dirs: vec![dir.path().join("elsewhere"), debug_dir.clone()],
            ..SymbolUpload::default()
        };
        let (body, sent) = body_of(&stripped, &extraction);
        assert_eq!(sent.debug_file, None);
        assert!(names_at(&body, alpha).0.is_empty(), "no debug file yet");

        let by_id = debug_dir.join(".build-id").join(&build_id[..2]);
        std::fs::create_dir_all(&by_id).unwrap();
        let debug = by_id.join(format!("{}.debug", &build_id[2..]));
        std::fs::copy(&full, &debug).unwrap();
        let (body, sent) = body_of(&stripped, &extraction);
        assert_eq!(sent.debug_file.as_ref(), Some(&debug));
        assert_eq!(names_at(&body, alpha).0, ["alpha"]);

        // A file at that path from another build is not this file's.
        std::fs::write(&debug, b"another build").unwrap();
        let (body, sent) = body_of(&stripped, &extraction);
        assert_eq!(sent.debug_file, None);
        assert!(names_at(&body, alpha).0.is_empty());
    }
}
