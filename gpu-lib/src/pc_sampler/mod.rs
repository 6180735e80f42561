//! When, and on which thread, Kiln calls CUPTI's PC Sampling API: the
//! discipline that keeps it from stalling the program it samples.
//!
//! What an H200 showed (driver 580, CUDA 13.0): a Kiln thread calling
//! `cuptiPCSamplingStart` waited for a driver lock that the program's
//! launching threads held inside `cuLaunchKernel`, while they waited for
//! a CUPTI mutex the Start call held. The rules below follow CUPTI's own
//! injection sample (`pc_sampling_continuous`), which only ever calls the
//! API from CUPTI's callbacks on the program's threads:
//!
//! 1. **Enable and configure at context creation**, in the
//!    context-created callback, on the thread creating the context.
//! 2. **No start/stop control.** Sampling runs from `Enable` to `Disable`.
//!    `Start`/`Stop` are never called: the library does not even load
//!    them (see below for why).
//! 3. **`GetData` only on the program's own threads, inside CUPTI's
//!    callbacks**: at the exit of a launch on the context, when CUPTI says
//!    enough PCs wait ([`DrainPolicy::pending_pcs`]) or the last drain is
//!    older than [`DrainPolicy::interval`]; at every module load (CUPTI
//!    asks for it: PCs of an unloaded module would be misattributed); and
//!    at teardown. No Kiln thread ever calls the PC Sampling API while
//!    the program runs.
//! 4. **One drain per context at a time, and nobody waits for it**: a
//!    launching thread that finds the context being drained goes on (the
//!    PCs stay in CUPTI for the next drain; counted as skipped).
//! 5. **`Disable` at teardown** (context-destroy-starting, or exit for
//!    contexts still alive), after a last drain; then the configured
//!    buffer, where `Disable` puts what it still held, is read.
//! 6. **Every call watched, every error said once**: a call running past
//!    the [`Watchdog`]'s bound turns PC sampling off for the process (no
//!    further PC Sampling call, not even `Disable`), and each CUPTI error
//!    is logged once per call and code ([`ErrorLog`]) and counted.
//!
//! The fake CUPTI of `tests/pc_sampling_rules.rs` enforces these rules, so
//! a change that breaks one fails there, without a GPU.
//!
//! Why not duty-cycle with `Start`/`Stop` from the launch exits, on the
//! program's own threads? Both were tried on an H200 (2026-11-27): the
//! second `Stop`, made at a launch exit while the other thread launched,
//! never returned (the watchdog tripped; the program had to be killed),
//! the same lock-order inversion as from a thread of Kiln's. And it would
//! not have helped: a context enabled with start/stop control and never
//! started ([`Collection::EnabledIdle`]) cost the two-stream workload
//! 1.06x, nearly all of continuous collection's 1.09x, because what PC
//! sampling costs there is concurrency between kernels of different
//! streams (their kernels overlapped 879 ms instead of 1,515 ms over a
//! 3 s run, each kernel as fast as before); the same work on one stream
//! ran at 1.000x with 1.07 M samples.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use self::contexts::ContextTable;
use crate::pcsampling::{PcSample, PcSamplingBuffers, PendingHint};
mod contexts;

use crate::cupti::{ContextHandle, Cupti, CuptiError, ErrorLog, PcSamplingSetup};
use crate::log::{Level, log};
use crate::watchdog::{Watchdog, WatchedCall, monotonic_ns};
use crate::wire::StallReasonName;

/// When a launching thread reads a context's PCs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrainPolicy {
    /// Read at least this often while the program launches.
    pub interval: Duration,
    /// Read as soon as CUPTI holds this many PCs.
    pub pending_pcs: usize,
}

impl DrainPolicy {
    /// Whether a drain is due `now_ns`, the last one at `last_ns`, with
    /// `pending` PCs waiting.
    pub fn due(&self, now_ns: u64, last_ns: u64, pending: usize) -> bool {
        pending >= self.pending_pcs.max(1)
            || now_ns.saturating_sub(last_ns)
                >= u64::try_from(self.interval.as_nanos()).unwrap_or(u64::MAX)
    }
}

/// What PC sampling hands the aggregator.
#[derive(Debug)]
pub enum PcOutput {
    /// A context's stall reason table (at its creation).
    StallReasons(Vec<StallReasonName>),
    /// PCs read from CUPTI, and the samples the hardware dropped.
    Samples {
        /// The PCs.
        samples: Vec<PcSample>,
        /// CUPTI's dropped-sample count for the read.
        dropped: u64,
    },
}

/// PC sampling settings of a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PcSamplingSettings {
    /// Sampling period exponent, 2^n cycles (`KILN_CUDA_PC_SAMPLING_PERIOD`,
    /// 5..=31, default 20); CUPTI's default when `None`.
    pub period: Option<u32>,
    /// PCs read per `cuptiPCSamplingGetData` call.
    pub max_pcs: usize,
    /// When launching threads drain.
    pub drain: DrainPolicy,
    /// How long one CUPTI call may take before PC sampling is turned off.
    pub call_bound: Duration,
    /// Sleep of CUPTI's PC-sampling worker threads; CUPTI's default
    /// (100 ms) when `None`.
    pub worker_sleep: Option<Duration>,
    /// The hardware buffer's size; CUPTI's default (512 MiB) when `None`.
    pub hardware_buffer_bytes: Option<usize>,
    /// Collecting, or only enabled (a measurement).
    pub collection: Collection,
}

/// What an enabled context does (`KILN_CUDA_PC_SAMPLING_MODE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Collection {
    /// Collects from `Enable` to `Disable` (the rules above).
    Continuous,
    /// `idle`: enabled and configured with CUPTI's start/stop control on,
    /// and never started, so nothing is collected: what being enabled
    /// costs the program, apart from collecting.
    EnabledIdle,
}

impl Default for PcSamplingSettings {
    fn default() -> Self {
        Self {
            // 2^20 cycles: on an H200 CUPTI's default period overflowed
            // the hardware buffer (CUPTI_ERROR_OUT_OF_MEMORY on reads) and
            // 2^20 did not, with 0.9 M samples over 3 s of work. The
            // workload's overhead (1.08x, median of rounds) did not move
            // with the period (2^17, 2^20) or how often the launching
            // threads read (100 ms to 2 s): it is CUPTI's, while enabled.
            period: Some(20),
            max_pcs: 10_000,
            drain: DrainPolicy {
                interval: Duration::from_millis(500),
                pending_pcs: 5_000,
            },
            call_bound: Duration::from_secs(5),
            worker_sleep: None,
            hardware_buffer_bytes: None,
            collection: Collection::Continuous,
        }
    }
}

/// A context being sampled.
struct PcContext {
    ctx: ContextHandle,
    /// What `GetData` fills; its lock is the drain lock, only ever tried
    /// on the program's threads during the run.
    drain: Mutex<PcSamplingBuffers>,
    /// Given to CUPTI at configuration; CUPTI writes into it at `Disable`.
    configured: Mutex<PcSamplingBuffers>,
    /// `remainingNumPcs` of the configured buffer, read without its lock.
    pending: PendingHint,
    /// The stall reason indices handed to CUPTI, kept while it may read
    /// them.
    _stall_indices: Vec<u32>,
    last_drain_ns: AtomicU64,
    /// Set when teardown began: launching threads leave it alone.
    retired: AtomicBool,
}

impl PcContext {
    fn live(&self) -> bool {
        !self.retired.load(Ordering::Acquire)
    }
}

/// Counts of what PC sampling did, for the snapshot's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PcCounts {
    /// `GetData` calls that returned.
    pub drains: u64,
    /// Drains not done: the context was being drained by another thread.
    pub drains_skipped: u64,
    /// 1 once the watchdog turned PC sampling off.
    pub watchdog_trips: u64,
}

/// PC sampling of a process: its contexts and the rules above.
pub struct PcSampler {
    cupti: Arc<dyn Cupti>,
    settings: PcSamplingSettings,
    contexts: ContextTable<PcContext>,
    watchdog: Watchdog,
    errors: Arc<ErrorLog>,
    drains: AtomicU64,
    drains_skipped: AtomicU64,
}

/// Bounds a full drain: a context cannot keep a thread reading forever.
const MAX_CALLS_PER_FULL_DRAIN: usize = 64;

impl PcSampler {
    /// PC sampling through `cupti`, reporting errors to `errors`.
    pub fn new(cupti: Arc<dyn Cupti>, settings: PcSamplingSettings, errors: Arc<ErrorLog>) -> Self {
        Self {
            cupti,
            settings,
            contexts: ContextTable::default(),
            watchdog: Watchdog::new(settings.call_bound),
            errors,
            drains: AtomicU64::new(0),
            drains_skipped: AtomicU64::new(0),
        }
    }

    /// The watchdog of every call made here (its thread calls
    /// [`Watchdog::check`]).
    pub fn watchdog(&self) -> &Watchdog {
        &self.watchdog
    }

    /// What was done so far.
    pub fn counts(&self) -> PcCounts {
        PcCounts {
            drains: self.drains.load(Ordering::Relaxed),
            drains_skipped: self.drains_skipped.load(Ordering::Relaxed),
            watchdog_trips: u64::from(self.watchdog.tripped()),
        }
    }

    /// Rule 1: the context-created callback, on the creating thread.
    pub fn on_context_created(&self, ctx: ContextHandle, out: &dyn Fn(PcOutput)) {
        if self.watchdog.tripped() {
            return;
        }
        let setup = || -> Result<PcContext, CuptiError> {
            let _watch = self.watchdog.watch(WatchedCall::PcSamplingEnable);
            let reasons = self.cupti.pc_sampling_enable(ctx)?;
            let stall_indices: Vec<u32> = reasons.iter().map(|r| r.index).collect();
            let per_pc = reasons.len().max(1);
            let mut configured = PcSamplingBuffers::new(self.settings.max_pcs, per_pc);
            let setup = PcSamplingSetup {
                period: self.settings.period,
                stall_reasons: &stall_indices,
                worker_sleep_ms: self
                    .settings
                    .worker_sleep
                    .map(|d| u32::try_from(d.as_millis()).unwrap_or(u32::MAX)),
                hardware_buffer_bytes: self.settings.hardware_buffer_bytes,
                start_stop_control: self.settings.collection == Collection::EnabledIdle,
            };
            if let Err(e) = self
                .cupti
                .pc_sampling_configure(ctx, &mut configured, &setup)
            {
                // Enabled but not configured: give the context back.
                self.disable(ctx);
                return Err(e);
            }
            out(PcOutput::StallReasons(reasons));
            Ok(PcContext {
                ctx,
                drain: Mutex::new(PcSamplingBuffers::new(self.settings.max_pcs, per_pc)),
                pending: configured.header(),
                configured: Mutex::new(configured),
                _stall_indices: stall_indices,
                last_drain_ns: AtomicU64::new(monotonic_ns()),
                retired: AtomicBool::new(false),
            })
        };
        let started = Instant::now();
        match setup() {
            Ok(context) => {
                if self.contexts.insert(ctx.0, context).is_err() {
                    log(
                        Level::Warn,
                        format_args!(
                            "PC sampling off for context {:#x}: this process already sampled {} contexts",
                            ctx.0,
                            contexts::MAX
                        ),
                    );
                    self.disable(ctx);
                    return;
                }
                log(
                    Level::Info,
                    format_args!(
                        "PC sampling on for context {:#x} (enabling and configuring took {:?}{})",
                        ctx.0,
                        started.elapsed(),
                        match self.settings.collection {
                            Collection::Continuous => "",
                            Collection::EnabledIdle => "; idle: enabled, never collecting",
                        }
                    ),
                );
            }
            Err(e) => self
                .errors
                .report(&e, "PC sampling stays off for this context"),
        }
    }

    /// Rule 3: the exit of a launch on `ctx`, on the launching thread.
    /// Reads at most one buffer, and only when due.
    pub fn on_launch_exit(&self, ctx: ContextHandle, out: &dyn Fn(PcOutput)) {
        if self.watchdog.tripped() {
            return;
        }
        let Some(context) = self.find(ctx) else {
            return;
        };
        let now = monotonic_ns();
        let last = context.last_drain_ns.load(Ordering::Relaxed);
        if !self
            .settings
            .drain
            .due(now, last, context.pending.pending())
        {
            return;
        }
        let Ok(mut buffers) = context.drain.try_lock() else {
            self.drains_skipped.fetch_add(1, Ordering::Relaxed);
            return;
        };
        context.last_drain_ns.store(now, Ordering::Relaxed);
        self.get_data(context, &mut buffers, out);
    }

    /// Rule 3: a module was loaded into `ctx`; CUPTI wants what it holds
    /// read now.
    pub fn on_module_loaded(&self, ctx: ContextHandle, out: &dyn Fn(PcOutput)) {
        if self.watchdog.tripped() {
            return;
        }
        let Some(context) = self.find(ctx) else {
            return;
        };
        let Ok(mut buffers) = context.drain.try_lock() else {
            self.drains_skipped.fetch_add(1, Ordering::Relaxed);
            return;
        };
        self.drain_fully(context, &mut buffers, out);
    }

    /// Rule 5: the context-destroy-starting callback.
    pub fn on_context_destroying(&self, ctx: ContextHandle, out: &dyn Fn(PcOutput)) {
        if let Some(context) = self.find(ctx) {
            self.tear_down(context, out);
        }
    }

    /// Rule 5 at exit: every context still alive.
    pub fn finish(&self, out: &dyn Fn(PcOutput)) {
        for context in self.contexts.all().filter(|c| c.live()) {
            self.tear_down(context, out);
        }
    }

    /// The live context under `ctx`, with loads only (see [`contexts`]).
    fn find(&self, ctx: ContextHandle) -> Option<&PcContext> {
        self.contexts.find(ctx.0).find(|c| c.live())
    }

    /// `Disable`, watched; true when it succeeded.
    fn disable(&self, ctx: ContextHandle) -> bool {
        let started = Instant::now();
        let disabled = {
            let _watch = self.watchdog.watch(WatchedCall::PcSamplingDisable);
            self.cupti.pc_sampling_disable(ctx)
        };
        match disabled {
            Ok(()) => {
                log(
                    Level::Info,
                    format_args!(
                        "PC sampling off for context {:#x} (disabling took {:?})",
                        ctx.0,
                        started.elapsed()
                    ),
                );
                true
            }
            Err(e) => {
                self.errors
                    .report(&e, "PCs CUPTI still held for this context are lost");
                false
            }
        }
    }

    fn tear_down(&self, context: &PcContext, out: &dyn Fn(PcOutput)) {
        if context.retired.swap(true, Ordering::AcqRel) || self.watchdog.tripped() {
            return;
        }
        // A launch exit on another thread may be reading; teardown is
        // rare and that read is bounded by the watchdog.
        let Ok(mut buffers) = context.drain.lock() else {
            return;
        };
        self.drain_fully(context, &mut buffers, out);
        if self.watchdog.tripped() || !self.disable(context.ctx) {
            return;
        }
        if let Ok(mut configured) = context.configured.lock() {
            self.send(&configured, out);
            // The slot stays (see `contexts`); its buffers go.
            *configured = PcSamplingBuffers::new(0, 1);
        }
        *buffers = PcSamplingBuffers::new(0, 1);
    }

    fn drain_fully(
        &self,
        context: &PcContext,
        buffers: &mut PcSamplingBuffers,
        out: &dyn Fn(PcOutput),
    ) {
        for _ in 0..MAX_CALLS_PER_FULL_DRAIN {
            if self.watchdog.tripped() || !self.get_data(context, buffers, out) {
                return;
            }
            // More waits when CUPTI says so, or when it filled the buffer.
            let data = buffers.data();
            if data.remaining_num_pcs == 0 && data.total_num_pcs < data.collect_num_pcs {
                return;
            }
        }
    }

    /// One `GetData`; true when it succeeded.
    fn get_data(
        &self,
        context: &PcContext,
        buffers: &mut PcSamplingBuffers,
        out: &dyn Fn(PcOutput),
    ) -> bool {
        buffers.clear();
        let result = {
            let _watch = self.watchdog.watch(WatchedCall::PcSamplingGetData);
            self.cupti.pc_sampling_get_data(context.ctx, buffers)
        };
        if let Err(e) = result {
            let consequence = if buffers.data().hardware_buffer_full != 0 {
                "the hardware buffer is full: samples are lost until the next read \
                 (a longer KILN_CUDA_PC_SAMPLING_PERIOD or a shorter …_DRAIN_MS helps)"
            } else {
                "the PCs of this read are lost"
            };
            self.errors.report(&e, consequence);
            return false;
        }
        self.drains.fetch_add(1, Ordering::Relaxed);
        self.send(buffers, out);
        true
    }

    fn send(&self, buffers: &PcSamplingBuffers, out: &dyn Fn(PcOutput)) {
        let mut samples = Vec::new();
        buffers.read(&mut samples);
        let dropped = buffers.data().dropped_samples;
        if !samples.is_empty() || dropped > 0 {
            out(PcOutput::Samples { samples, dropped });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drains_when_enough_pcs_wait_or_the_last_is_old() {
        let policy = DrainPolicy {
            interval: Duration::from_millis(500),
            pending_pcs: 100,
        };
        let ms = 1_000_000;
        assert!(!policy.due(100 * ms, 0, 0));
        assert!(!policy.due(499 * ms, 0, 99));
        assert!(policy.due(499 * ms, 0, 100), "enough PCs wait");
        assert!(policy.due(500 * ms, 0, 0), "the last drain is old");
        assert!(
            !policy.due(0, 10 * ms, 0),
            "a clock read before the last drain"
        );
    }
}
