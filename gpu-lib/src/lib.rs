//! `libkiln_cuda.so`: Kiln's CUDA injection library.
//!
//! Loaded into any CUDA process with `CUDA_INJECTION64_PATH=…/libkiln_cuda.so`
//! (no code change), it records kernel launches and completions through
//! CUPTI (loaded at run time; without it the library does nothing),
//! optionally samples SASS instructions and stall reasons, pre-aggregates,
//! and sends a [`Snapshot`] every few seconds to the host agent over a Unix
//! socket. The agent turns snapshots into `gpu_kernel` → `gpu_instruction`
//! → `gpu_stall` frames under the launching thread's CPU stack with
//! [`fold_snapshot`]; the stack itself comes from the agent's uprobe on
//! [`kiln_cuda_launch_marker`], which the library calls at the launches
//! [`marking`] picks.
//!
//! Environment: `KILN_GPU_SOCKET` (default `/run/kiln/gpu.sock`),
//! `KILN_CUPTI_PATH`, `KILN_CUDA_SNAPSHOT_MS`, `KILN_CUDA_TIMELINE` (a file
//! for `kiln export perfetto`), `KILN_CUDA_MARKS_PER_SECOND` (per thread,
//! default 200), `KILN_CUDA_PC_SAMPLING=1` (with `…_PERIOD`, `…_DRAIN_MS`,
//! `…_CALL_BOUND_MS`, `…_WORKER_SLEEP_MS`, `…_HW_BUFFER_MB`, and
//! `…_MODE=idle` to measure what being enabled costs), `KILN_CUDA_LOG`.
//!
//! The same crate is an rlib for the agent and the CLI:
//!
//! ```
//! use kiln_cuda::{FoldOptions, Snapshot, StallReasonTable, fold_snapshot};
//!
//! let snapshot = Snapshot::default(); // as read from the socket
//! let mut stalls = StallReasonTable::default();
//! stalls.update(&snapshot);
//! let stacks = fold_snapshot(&snapshot, &stalls, &FoldOptions::default(), |_tid, _corr| None);
//! assert!(stacks.is_empty());
//! ```

pub mod activity;
pub mod aggregate;
pub mod cupti;
pub mod cupti_abi;
mod fold;
pub mod injection;
pub mod join;
mod log;
pub mod marking;
pub mod memory;
pub mod pc_sampler;
pub mod pcsampling;
pub mod perfetto;
pub mod pipeline;
pub mod sass;
pub mod socket;
pub mod timeline;
pub mod watchdog;
pub mod wire;

use std::panic::catch_unwind;
use std::sync::{Arc, Once};

pub use cupti::{Cupti, CuptiError, RealCupti};
pub use fold::{
    FoldOptions, FoldedStack, InstructionNamer, MEMORY_FRAME, StallReasonTable, WeightUnit,
    fold_snapshot,
};
pub use socket::{SnapshotListener, SnapshotSender, SnapshotStream};
pub use wire::{Snapshot, WireError};

/// The entry point CUDA calls when it loads the library through
/// `CUDA_INJECTION64_PATH`.
///
/// Runs once however often it is called, never lets a panic cross into
/// CUDA, and always returns 1 (success): the workload must never break
/// because profiling could not start. Without libcupti it logs once and
/// does nothing.
#[doc(alias = "CUDA_INJECTION64_PATH")]
#[unsafe(no_mangle)]
pub extern "C" fn InitializeInjection() -> i32 {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        if catch_unwind(start_from_env).is_err() {
            log::log(
                log::Level::Error,
                format_args!("start-up panicked; GPU profiling is off"),
            );
        }
    });
    1
}

fn start_from_env() {
    let cupti = match RealCupti::open() {
        Ok(cupti) => cupti,
        Err(e) => {
            log::log(log::Level::Warn, format_args!("{e}; GPU profiling is off"));
            return;
        }
    };
    log::log(
        log::Level::Info,
        format_args!("using {}", cupti.path().display()),
    );
    if let Err(e) = injection::start(Arc::new(cupti), injection::Config::from_env()) {
        log::log(log::Level::Error, format_args!("{e}; GPU profiling is off"));
    }
}

/// Called at the kernel launches [`marking`] picks, and at device memory
/// allocations, with the call's correlation id and thread id, so the
/// agent's uprobe on this symbol can record the calling thread's CPU
/// stack under that id. Does nothing itself; kept
/// out of line and exported so the symbol exists to attach to.
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn kiln_cuda_launch_marker(correlation_id: u32, tid: u32) {
    std::hint::black_box((correlation_id, tid));
}
