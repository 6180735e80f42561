//! The threads that read new processes' maps while they are alive, load
//! their unwind tables, and find the GPU libraries they map.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::{batcher, fileid, procfs, sampler, unwinder};

/// How long the new-process thread sleeps at most when nothing is
/// announced (it wakes at once for an announcement): how soon it sees that
/// the agent is stopping.
const IDLE_WAKE_EVERY: Duration = Duration::from_millis(200);

/// The threads that read new processes' maps while they are alive, and
/// load their unwind tables into the program. Apart, so that building a big
/// library's table (seconds, the first time) never delays reading the maps
/// of a process that lives for milliseconds.
#[derive(Debug)]
pub(crate) struct Watcher {
    stop: Arc<AtomicBool>,
    /// The unwinder thread's queue, to tell it to stop.
    to_unwinder: Option<std::sync::mpsc::Sender<Option<unwinder::Work>>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

/// Processes whose mappings the unwinder thread should load.
type Learned = Vec<(u32, unwinder::ProcessCode)>;

/// File name of the CUDA injection library (gpu-lib), whose launch marker
/// the GPU launch uprobe attaches to.
pub(crate) const GPU_LIBRARY: &str = "libkiln_cuda.so";

/// GPU libraries seen mapped, for the agent to attach its uprobe to: the
/// process, its mapping of the library, and when it was seen.
pub(crate) type GpuLibraries = Arc<Mutex<Vec<(u32, procfs::Mapping, Instant)>>>;

/// How long the launch probe waits for a process's unwind tables before
/// attaching anyway (a table that finds no room never arrives).
pub(crate) const GPU_PROBE_WAITS_FOR_TABLES: Duration = Duration::from_secs(60);

/// Queues the GPU libraries among `pid`'s `mappings` for the launch probe
/// (which attaches to each file once).
fn found_gpu_libraries(
    pid: u32,
    mappings: &[(procfs::Mapping, Arc<fileid::FileInfo>)],
    queue: &GpuLibraries,
) {
    let found = mappings.iter().filter(|(m, _)| m.name() == GPU_LIBRARY);
    for (m, _) in found {
        queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push((pid, m.clone(), Instant::now()));
    }
}

impl Watcher {
    pub(crate) fn start(
        mut feed: sampler::NewProcessFeed,
        state: Arc<Mutex<batcher::HostState>>,
        unwinder: Option<unwinder::Unwinder>,
        gpu_libraries: GpuLibraries,
    ) -> std::io::Result<Watcher> {
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        let gpu_found = gpu_libraries.clone();
        // The unwinder thread takes processes learned here and tables its
        // builder finished; `None` stops it.
        let to_unwinder = match unwinder {
            Some(mut unwinder) => {
                let (tx, rx) = std::sync::mpsc::channel::<Option<unwinder::Work>>();
                let built = tx.clone();
                unwinder.start_builder(move |table| {
                    built.send(Some(unwinder::Work::Built(table))).is_ok()
                })?;
                threads.push(
                    std::thread::Builder::new()
                        .name("kiln-unwind".into())
                        .spawn(move || {
                            use std::sync::mpsc::RecvTimeoutError;
                            loop {
                                match rx.recv_timeout(unwinder.idle_wait()) {
                                    Ok(Some(work)) => {
                                        if let unwinder::Work::Learned(learned) = &work {
                                            for (pid, code) in learned {
                                                found_gpu_libraries(*pid, &code.files, &gpu_found);
                                            }
                                        }
                                        unwinder.work(work);
                                    }
                                    // Quiet: a good time to let exited
                                    // processes go, and to look again at
                                    // JVMs that had not started.
                                    Err(RecvTimeoutError::Timeout) => unwinder.idle(),
                                    Ok(None) | Err(RecvTimeoutError::Disconnected) => break,
                                }
                            }
                        })?,
                );
                Some(tx)
            }
            None => None,
        };
        let stopping = stop.clone();
        let feed_unwinder = to_unwinder.clone();
        let containers = batcher::lock(&state).containers();
        threads.push(
            std::thread::Builder::new()
                .name("kiln-new-procs".into())
                .spawn(move || {
                    let mut pids = Vec::new();
                    while !stopping.load(Ordering::Relaxed) {
                        // Woken by the announcement itself, not polled on
                        // a timer: on a busy 2-core host, waking every
                        // 10 ms was half of this thread's CPU.
                        if !feed.wait(IDLE_WAKE_EVERY) {
                            continue;
                        }
                        pids.clear();
                        feed.read(&mut pids);
                        if pids.is_empty() {
                            continue;
                        }
                        // /proc is read before taking the lock, which the
                        // batcher holds while it builds a batch.
                        let read: Vec<_> = pids
                            .iter()
                            .filter_map(|a| Some((*a, procfs::read_process_now(a.pid)?)))
                            .collect();
                        // So are new containers' names, which the
                        // batcher then finds cached.
                        for (_, p) in &read {
                            if let Some(id) = &p.container {
                                containers.info(id, p.pod_uid.as_deref());
                            }
                        }
                        let learned: Learned = {
                            let mut state = batcher::lock(&state);
                            read.into_iter()
                                .map(|(a, p)| (a, state.learn(a.pid, p)))
                                // Tables only for processes that get
                                // sampled: the program announces their
                                // first sample after an execve too.
                                .filter(|(a, _)| a.why != sampler::Why::Exec)
                                .map(|(a, code)| (a.pid, code))
                                .collect()
                        };
                        match &feed_unwinder {
                            Some(tx) if !learned.is_empty() => {
                                let _ = tx.send(Some(unwinder::Work::Learned(learned)));
                            }
                            Some(_) => {}
                            None => {
                                for (pid, code) in &learned {
                                    found_gpu_libraries(*pid, &code.files, &gpu_libraries);
                                }
                            }
                        }
                    }
                })?,
        );
        Ok(Watcher {
            stop,
            to_unwinder,
            threads,
        })
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(tx) = &self.to_unwinder {
            let _ = tx.send(None);
        }
        // The watcher thread first, then the unwinder, whose builder may
        // finish the table it is building.
        for t in self.threads.drain(..).rev() {
            let _ = t.join();
        }
    }
}
