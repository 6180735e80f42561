//! Automatic symbol upload: each executable file the agent samples is
//! offered to a background thread, which asks the backend whether it has
//! the file's symbols (`HEAD /api/v1/symbols/{id}`) and sends the file
//! when not (`PUT`); the backend extracts the symbols.
//!
//! Sampling never waits for this: an offer only updates a bounded pending
//! set (a file that finds it full is offered again by a later batch).
//! Files wait there with a weight, the number of batches they were seen
//! in, and the thread takes the heaviest first: a service that keeps
//! burning CPU gets its names before the hundreds of short-lived binaries
//! a build machine starts (each seen in one batch), however many of those
//! came first.
//!
//! A file whose separate debug file is on this host
//! (`<debug dir>/.build-id/xx/rest.debug`, what `-dbg` and `-debuginfo`
//! packages install) is sent as that debug file: it carries the same
//! build id, so the same FileId, and the DWARF that stripped distribution
//! binaries lack, so frames get files, lines and inline chains rather than
//! function names only.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use kiln_model::FileId;
use tracing::{debug, info, warn};

use crate::fileid::FileInfo;

/// Files waiting for the upload thread.
const QUEUE: usize = 256;
/// Largest file sent (the backend's body limit).
const MAX_FILE_BYTES: u64 = 512 * 1024 * 1024;
/// Bound on remembered file ids; past it the set starts over, and a file
/// may be asked about (`HEAD`, cheap) once more.
const MAX_REMEMBERED: usize = 64 * 1024;
/// Where distributions install separate debug files.
pub const DEFAULT_DEBUG_DIR: &str = "/usr/lib/debug";

/// One file to upload, with the paths it can be read from (in order).
#[derive(Debug)]
struct Job {
    file_id: FileId,
    paths: Vec<PathBuf>,
}

/// A file waiting for the thread.
#[derive(Debug)]
struct Waiting {
    paths: Vec<PathBuf>,
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
    fn offer(&mut self, file_id: FileId, paths: &[PathBuf]) {
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
                paths: paths.to_vec(),
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
            paths: waiting.paths,
        })
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

/// Hands files to the upload thread, heaviest first, at most once each per
/// run.
#[derive(Debug)]
pub struct SymbolUploader {
    shared: Arc<Shared>,
}

impl SymbolUploader {
    /// Starts the upload thread, sending to the backend at `server` and
    /// looking for separate debug files under `debug_dirs` (in order). The
    /// thread ends when the uploader is dropped and nothing waits.
    pub fn start(
        server: &str,
        api_key: Option<&str>,
        debug_dirs: Vec<PathBuf>,
    ) -> std::io::Result<SymbolUploader> {
        let shared = Arc::new(Shared::default());
        let base = format!("{}/api/v1/symbols", server.trim_end_matches('/'));
        let authorization = api_key.map(|key| format!("Bearer {key}"));
        let jobs = shared.clone();
        std::thread::Builder::new()
            .name("kiln-symbols".into())
            .spawn(move || upload_all(&base, authorization.as_deref(), &debug_dirs, &jobs))?;
        Ok(SymbolUploader { shared })
    }

    /// Offers the file `file_id`, readable at `paths`, seen in one more
    /// batch; never blocks on the upload thread.
    pub fn offer(&mut self, file_id: FileId, paths: &[PathBuf]) {
        self.shared.lock().offer(file_id, paths);
        self.shared.wake.notify_one();
    }
}

impl Drop for SymbolUploader {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.wake.notify_one();
    }
}

fn upload_all(base: &str, authorization: Option<&str>, debug_dirs: &[PathBuf], jobs: &Shared) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_connect(Some(Duration::from_secs(3)))
        .timeout_global(Some(Duration::from_secs(300)))
        .build()
        .into();
    while let Some(job) = jobs.next_job() {
        match upload(&agent, base, authorization, debug_dirs, &job) {
            Ok(Outcome::Present) => debug!(file_id = %job.file_id, "backend has the symbols"),
            Ok(Outcome::Uploaded(path)) => {
                info!(file_id = %job.file_id, path = %path.display(), "symbols uploaded");
            }
            Err(e) => warn!(file_id = %job.file_id, error = %e, "symbol upload failed"),
        }
    }
}

enum Outcome {
    Present,
    Uploaded(PathBuf),
}

/// Why one upload failed.
#[derive(Debug, thiserror::Error)]
enum UploadError {
    #[error("HTTP: {0}")]
    Http(#[from] ureq::Error),
    #[error("backend answered {status}: {body}")]
    Status { status: u16, body: String },
    #[error("no readable file with this id (the file changed or the process exited)")]
    NoFile,
    #[error("{path} is {len} bytes, more than the {MAX_FILE_BYTES} sent")]
    TooBig { path: PathBuf, len: u64 },
}

fn upload(
    agent: &ureq::Agent,
    base: &str,
    authorization: Option<&str>,
    debug_dirs: &[PathBuf],
    job: &Job,
) -> Result<Outcome, UploadError> {
    let url = format!("{base}/{}", job.file_id);
    let mut head = agent.head(&url);
    if let Some(authorization) = authorization {
        head = head.header("authorization", authorization);
    }
    let response = head.call()?;
    match response.status().as_u16() {
        200 => return Ok(Outcome::Present),
        404 => {}
        status => {
            return Err(UploadError::Status {
                status,
                body: String::new(),
            });
        }
    }
    let (path, data) = read_file(job, debug_dirs)?;
    let mut put = agent.put(&url);
    if let Some(authorization) = authorization {
        put = put.header("authorization", authorization);
    }
    let mut response = put.send(&data[..])?;
    let status = response.status().as_u16();
    if status != 200 {
        let body = response.body_mut().read_to_string().unwrap_or_default();
        return Err(UploadError::Status { status, body });
    }
    Ok(Outcome::Uploaded(path))
}

/// What to send for the job: its separate debug file when one of
/// `debug_dirs` has it, else the first of the job's paths that still holds
/// the file it names (a path may now hold a newer build of it).
fn read_file(job: &Job, debug_dirs: &[PathBuf]) -> Result<(PathBuf, Vec<u8>), UploadError> {
    for path in &job.paths {
        let Ok(info) = FileInfo::read(path, "") else {
            continue;
        };
        if info.file_id != job.file_id {
            continue;
        }
        let debug = info
            .build_id
            .as_deref()
            .and_then(|id| debug_file(id, job.file_id, debug_dirs));
        if let Some(debug) = debug
            && let Some(data) = read_capped(&debug)?
        {
            return Ok((debug, data));
        }
        if let Some(data) = read_capped(path)? {
            return Ok((path.clone(), data));
        }
    }
    Err(UploadError::NoFile)
}

/// The separate debug file of the file with `build_id` (hex) and
/// `file_id` under one of `debug_dirs`, when one is there and carries the
/// same id (a stale one from another build does not).
fn debug_file(build_id: &str, file_id: FileId, debug_dirs: &[PathBuf]) -> Option<PathBuf> {
    if build_id.len() < 3 || !build_id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let (head, rest) = build_id.split_at(2);
    debug_dirs
        .iter()
        .map(|dir| {
            dir.join(".build-id")
                .join(head)
                .join(format!("{rest}.debug"))
        })
        .find(|path| FileInfo::read(path, "").is_ok_and(|info| info.file_id == file_id))
}

fn read_capped(path: &Path) -> Result<Option<Vec<u8>>, UploadError> {
    let Ok(file) = File::open(path) else {
        return Ok(None);
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    if len > MAX_FILE_BYTES {
        return Err(UploadError::TooBig {
            path: path.to_owned(),
            len,
        });
    }
    let mut data = Vec::with_capacity(len as usize);
    match file.take(MAX_FILE_BYTES).read_to_end(&mut data) {
        Ok(_) => Ok(Some(data)),
        Err(_) => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_pending_set_drops_new_files_and_never_blocks() {
        let mut pending = Pending::default();
        for i in 0..(QUEUE as u128 * 4) {
            pending.offer(FileId(i), &[]);
        }
        assert_eq!(pending.waiting.len(), QUEUE);
        // Those that did not fit are not remembered: a later batch offers
        // them again.
        let job = pending.take().unwrap();
        pending.offer(FileId(QUEUE as u128 * 2), &[]);
        assert!(pending.waiting.contains_key(&FileId(QUEUE as u128 * 2)));
        // A taken file is not offered again.
        pending.offer(job.file_id, &[]);
        assert!(!pending.waiting.contains_key(&job.file_id));
    }

    #[test]
    fn files_seen_in_more_batches_go_first_then_the_earliest() {
        let mut pending = Pending::default();
        // Batch 1: a build's short-lived binaries, then the service.
        for i in 1..=5 {
            pending.offer(FileId(i), &[]);
        }
        pending.offer(FileId(100), &[]);
        // Batches 2 and 3: the service is still running; so is file 3.
        for _ in 0..2 {
            pending.offer(FileId(100), &[]);
        }
        pending.offer(FileId(3), &[]);
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
        uploader.offer(FileId(1), &[]);
        uploader.offer(FileId(2), &[]);
        drop(uploader);
        assert_eq!(worker.join().unwrap(), 2);
    }

    #[test]
    fn a_path_holding_another_file_is_not_sent() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x");
        std::fs::write(&path, b"some bytes").unwrap();
        let id = FileInfo::read(&path, "x").unwrap().file_id;
        let job = Job {
            file_id: id,
            paths: vec![dir.path().join("missing"), path.clone()],
        };
        assert_eq!(read_file(&job, &[]).unwrap().0, path);
        let other = Job {
            file_id: FileId(id.0 ^ 1),
            paths: vec![path],
        };
        assert!(matches!(read_file(&other, &[]), Err(UploadError::NoFile)));
    }

    /// A stripped binary with its debug file where a -dbg package puts it:
    /// the debug file (same build id, the DWARF) goes instead; one from
    /// another build, or none, and the binary itself goes.
    #[test]
    fn a_debug_file_by_build_id_is_sent_in_place_of_the_binary() {
        use kiln_test_support::{CBuild, programs::ALPHA_BETA, strip};

        let dir = tempfile::tempdir().unwrap();
        let full = CBuild::cc().args(["-O1", "-g", "-Wl,--build-id"]).program(
            dir.path(),
            "prog",
            ALPHA_BETA,
        );
        let stripped = dir.path().join("prog.stripped");
        strip(&full, &stripped);
        let info = FileInfo::read(&stripped, "prog").unwrap();
        let build_id = info.build_id.clone().expect("built with a build id");
        let debug_dir = dir.path().join("debug");
        let job = Job {
            file_id: info.file_id,
            paths: vec![stripped.clone()],
        };
        assert_eq!(
            read_file(&job, std::slice::from_ref(&debug_dir)).unwrap().0,
            stripped,
            "no debug file yet: the binary goes"
        );

        let by_id = debug_dir.join(".build-id").join(&build_id[..2]);
        std::fs::create_dir_all(&by_id).unwrap();
        let debug = by_id.join(format!("{}.debug", &build_id[2..]));
        std::fs::copy(&full, &debug).unwrap();
        let dirs = [dir.path().join("elsewhere"), debug_dir];
        let (sent, data) = read_file(&job, &dirs).unwrap();
        assert_eq!(sent, debug);
        assert_eq!(data, std::fs::read(&full).unwrap());

        // A file at that path from another build is not this file's.
        std::fs::write(&debug, b"another build").unwrap();
        assert_eq!(read_file(&job, &dirs).unwrap().0, stripped);
    }
}
