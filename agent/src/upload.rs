//! Automatic symbol upload: each executable file the agent samples is
//! offered once per run to a background thread, which asks the backend
//! whether it has the file's symbols (`HEAD /api/v1/symbols/{id}`) and
//! sends the file when not (`PUT`); the backend extracts the symbols.
//!
//! Sampling never waits for this: offers go through a bounded queue and
//! are dropped (to be offered again by a later batch) when it is full.

use std::collections::HashSet;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
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

/// One file to upload, with the paths it can be read from (in order).
#[derive(Debug)]
struct Job {
    file_id: FileId,
    paths: Vec<PathBuf>,
}

/// Hands files to the upload thread, at most once each per run.
#[derive(Debug)]
pub struct SymbolUploader {
    queue: SyncSender<Job>,
    offered: HashSet<FileId>,
}

impl SymbolUploader {
    /// Starts the upload thread, sending to the backend at `server`. The
    /// thread ends when the uploader is dropped and the queue is empty.
    pub fn start(server: &str) -> std::io::Result<SymbolUploader> {
        let (queue, jobs) = sync_channel(QUEUE);
        let base = format!("{}/api/v1/symbols", server.trim_end_matches('/'));
        std::thread::Builder::new()
            .name("kiln-symbols".into())
            .spawn(move || upload_all(&base, jobs))?;
        Ok(SymbolUploader {
            queue,
            offered: HashSet::new(),
        })
    }

    /// Offers the file `file_id`, readable at `paths`; never blocks.
    pub fn offer(&mut self, file_id: FileId, paths: &[PathBuf]) {
        if self.offered.contains(&file_id) {
            return;
        }
        let job = Job {
            file_id,
            paths: paths.to_vec(),
        };
        match self.queue.try_send(job) {
            Ok(()) => {
                if self.offered.len() >= MAX_REMEMBERED {
                    self.offered.clear();
                }
                self.offered.insert(file_id);
            }
            // Offered again with a later batch.
            Err(TrySendError::Full(_)) => {}
            Err(TrySendError::Disconnected(_)) => {
                debug!("symbol upload thread is gone");
            }
        }
    }
}

fn upload_all(base: &str, jobs: Receiver<Job>) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_connect(Some(Duration::from_secs(3)))
        .timeout_global(Some(Duration::from_secs(300)))
        .build()
        .into();
    for job in jobs {
        match upload(&agent, base, &job) {
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

fn upload(agent: &ureq::Agent, base: &str, job: &Job) -> Result<Outcome, UploadError> {
    let url = format!("{base}/{}", job.file_id);
    let response = agent.head(&url).call()?;
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
    let (path, data) = read_file(job)?;
    let mut response = agent.put(&url).send(&data[..])?;
    let status = response.status().as_u16();
    if status != 200 {
        let body = response.body_mut().read_to_string().unwrap_or_default();
        return Err(UploadError::Status { status, body });
    }
    Ok(Outcome::Uploaded(path))
}

/// The first of the job's paths that still holds the file it names (a
/// path may now hold a newer build of it).
fn read_file(job: &Job) -> Result<(PathBuf, Vec<u8>), UploadError> {
    for path in &job.paths {
        if !FileInfo::read(path, "").is_ok_and(|info| info.file_id == job.file_id) {
            continue;
        }
        if let Some(data) = read_capped(path)? {
            return Ok((path.clone(), data));
        }
    }
    Err(UploadError::NoFile)
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
    fn a_file_is_offered_once_and_a_full_queue_never_blocks() {
        // A server that never answers: the thread blocks on its first
        // job, the queue fills, and offers still return at once.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let server = format!("http://{}", listener.local_addr().unwrap());
        let mut uploader = SymbolUploader::start(&server).unwrap();
        let started = std::time::Instant::now();
        for i in 0..(QUEUE as u128 * 4) {
            uploader.offer(FileId(i), &[]);
            uploader.offer(FileId(i), &[]);
        }
        assert!(started.elapsed() < Duration::from_secs(2));
        // Those that did not fit were not remembered: they can be offered
        // again later.
        assert!(uploader.offered.len() <= QUEUE + 1);
        assert!(uploader.offered.contains(&FileId(0)));
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
        assert_eq!(read_file(&job).unwrap().0, path);
        let other = Job {
            file_id: FileId(id.0 ^ 1),
            paths: vec![path],
        };
        assert!(matches!(read_file(&other), Err(UploadError::NoFile)));
    }
}
