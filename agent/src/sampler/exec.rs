//! Processes announced by the kernel as they are first sampled or exec:
//! the `new_processes` ring buffer.

use std::os::fd::AsRawFd;
use std::time::Duration;

use aya::maps::{MapData, RingBuf};
use tracing::debug;

use crate::abi::{self, NewProcess};

/// Processes the program sampled for the first time, from its
/// `new_processes` ring buffer. The program never wakes the reader, so it
/// is polled.
pub(crate) struct NewProcessFeed(pub(super) RingBuf<MapData>);

impl std::fmt::Debug for NewProcessFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NewProcessFeed")
    }
}

/// A process announced by the program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Announcement {
    /// Its pid.
    pub pid: u32,
    /// Why it was announced.
    pub why: Why,
}

/// Why the program announced a process: in each case what the agent knows
/// of its mappings is missing or stale, and its maps are read again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Why {
    /// Sampled for the first time (it may predate the agent).
    Sampled,
    /// It just called execve.
    Exec,
    /// A walk of its stack met an address in none of the mappings the
    /// program was given: it mapped code since (a `dlopen()`, or libraries
    /// ld.so had not mapped yet when its maps were read at its first
    /// sample).
    Remapped,
    /// A walk of its stack met a mapping whose unwind table is not loaded
    /// (evicted for room, or not built yet): loading the process again
    /// brings it back.
    TableMissing,
}

impl NewProcessFeed {
    /// Sleeps until a process is announced, or `timeout` has passed; says
    /// whether one was. The program's ring buffer wakes the reader once per
    /// batch (when it had read everything before), so a host that starts
    /// few processes costs few wakeups.
    pub(crate) fn wait(&self, timeout: Duration) -> bool {
        let mut ready = libc::pollfd {
            fd: self.0.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let millis = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: one valid pollfd, for the duration of the call.
        unsafe { libc::poll(&mut ready, 1, millis) > 0 }
    }

    /// Appends the processes announced since the last call to `out`.
    pub(crate) fn read(&mut self, out: &mut Vec<Announcement>) {
        while let Some(item) = self.0.next() {
            let Some(bytes) = item.get(..size_of::<NewProcess>()) else {
                continue;
            };
            // SAFETY: NewProcess is plain integers (any bit pattern is
            // valid) and `bytes` holds exactly one, maybe unaligned.
            let event: NewProcess = unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast()) };
            let why = match event.event {
                abi::PROCESS_SAMPLED => Why::Sampled,
                abi::PROCESS_EXEC => Why::Exec,
                abi::PROCESS_REMAPPED => Why::Remapped,
                abi::PROCESS_TABLE_MISSING => Why::TableMissing,
                other => {
                    debug!(event = other, "unknown new-process event");
                    continue;
                }
            };
            out.push(Announcement {
                pid: event.tgid,
                why,
            });
        }
    }
}
