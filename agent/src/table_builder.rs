//! Builds unwind tables on a thread of their own, smallest file first, so
//! that one big library (seconds of `.eh_frame` to evaluate) never holds up
//! the tables of the small programs behind it, nor the loading of any
//! process's mappings: the unwinder asks for a table and goes on; the
//! process's frames in that file are walked by frame pointers until the
//! table arrives.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use kiln_model::FileId;

use crate::unwind::{MAX_EH_FRAME_BYTES, UnwindError, UnwindTable};

/// A table to build, from a file the unwinder opened (through the process
/// that maps it, while it was alive).
#[derive(Debug)]
pub(crate) struct BuildJob {
    pub(crate) file: FileId,
    /// The mapping's path, for logs.
    pub(crate) path: String,
    pub(crate) source: std::fs::File,
}

/// A table built (or not).
#[derive(Debug)]
pub(crate) struct Built {
    pub(crate) file: FileId,
    pub(crate) path: String,
    pub(crate) result: Result<UnwindTable, UnwindError>,
    /// How long building took.
    pub(crate) took: Duration,
}

#[derive(Default)]
struct Queue {
    /// By file size, smallest first; the sequence number keeps equal sizes
    /// in the order asked.
    jobs: BinaryHeap<Reverse<(u64, u64, QueuedJob)>>,
    asked: u64,
    stop: bool,
}

/// A job in the heap (ordered by the size and sequence beside it only).
struct QueuedJob(BuildJob);

impl PartialEq for QueuedJob {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}
impl Eq for QueuedJob {}
impl PartialOrd for QueuedJob {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for QueuedJob {
    fn cmp(&self, _: &Self) -> std::cmp::Ordering {
        std::cmp::Ordering::Equal
    }
}

type Shared = Arc<(Mutex<Queue>, Condvar)>;

/// The builder thread and its queue. Dropping it stops the thread after
/// the table it is building.
pub(crate) struct TableBuilder {
    shared: Shared,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for TableBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TableBuilder")
    }
}

impl TableBuilder {
    /// Starts the thread; each table built goes to `done`, which returns
    /// false once nobody takes them any more (the thread then ends).
    pub(crate) fn start(
        done: impl Fn(Built) -> bool + Send + 'static,
    ) -> std::io::Result<TableBuilder> {
        let shared: Shared = Arc::default();
        let queue = shared.clone();
        let thread = std::thread::Builder::new()
            .name("kiln-unwind-build".into())
            .spawn(move || {
                while let Some(job) = next_job(&queue) {
                    let started = Instant::now();
                    let result = UnwindTable::from_file(job.source, MAX_EH_FRAME_BYTES);
                    let built = Built {
                        file: job.file,
                        path: job.path,
                        result,
                        took: started.elapsed(),
                    };
                    if !done(built) {
                        break;
                    }
                }
            })?;
        Ok(TableBuilder {
            shared,
            thread: Some(thread),
        })
    }

    /// Queues `job`.
    pub(crate) fn request(&self, job: BuildJob) {
        let size = job.source.metadata().map_or(u64::MAX, |m| m.len());
        let (queue, ready) = &*self.shared;
        let mut queue = queue.lock().unwrap_or_else(PoisonError::into_inner);
        queue.asked += 1;
        let seq = queue.asked;
        queue.jobs.push(Reverse((size, seq, QueuedJob(job))));
        ready.notify_one();
    }

    /// Jobs waiting.
    pub(crate) fn waiting(&self) -> usize {
        let (queue, _) = &*self.shared;
        queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .jobs
            .len()
    }
}

fn next_job(shared: &Shared) -> Option<BuildJob> {
    let (queue, ready) = &**shared;
    let mut queue = queue.lock().unwrap_or_else(PoisonError::into_inner);
    loop {
        if queue.stop {
            return None;
        }
        if let Some(Reverse((_, _, QueuedJob(job)))) = queue.jobs.pop() {
            return Some(job);
        }
        queue = ready.wait(queue).unwrap_or_else(PoisonError::into_inner);
    }
}

impl Drop for TableBuilder {
    fn drop(&mut self) {
        let (queue, ready) = &*self.shared;
        queue.lock().unwrap_or_else(PoisonError::into_inner).stop = true;
        ready.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    // Guards the order: of the jobs waiting, the smallest file is built
    // first, so a big library queued first does not hold up small ones.
    #[test]
    fn smaller_files_are_built_first() {
        let libc = std::path::Path::new("/lib/x86_64-linux-gnu/libc.so.6");
        let small = std::env::current_exe().unwrap();
        if !libc.exists() {
            return;
        }
        let (tx, rx) = mpsc::channel();
        let (gate_tx, gate_rx) = mpsc::channel::<()>();
        let gate = Mutex::new(gate_rx);
        // The first job blocks in `done` until every job is queued.
        let builder = TableBuilder::start(move |built| {
            let first = tx.send(built.file).is_ok();
            let _ = gate.lock().unwrap().recv();
            first
        })
        .unwrap();
        let job = |id: u128, path: &std::path::Path| BuildJob {
            file: FileId(id),
            path: path.display().to_string(),
            source: std::fs::File::open(path).unwrap(),
        };
        builder.request(job(1, libc));
        assert_eq!(rx.recv().unwrap(), FileId(1));
        let (big, little) =
            if std::fs::metadata(libc).unwrap().len() > std::fs::metadata(&small).unwrap().len() {
                (libc, small.as_path())
            } else {
                (small.as_path(), libc)
            };
        builder.request(job(2, big));
        builder.request(job(3, little));
        assert_eq!(builder.waiting(), 2);
        for _ in 0..3 {
            gate_tx.send(()).unwrap();
        }
        assert_eq!(rx.recv().unwrap(), FileId(3), "the smaller file first");
        assert_eq!(rx.recv().unwrap(), FileId(2));
    }
}
