//! The library's own threads: the watchdog, the ticker, and the aggregator
//! that joins, aggregates and delivers snapshots.

use std::sync::atomic::Ordering;
use std::sync::mpsc::Receiver;

use super::{Event, Runtime};
use crate::log::{Level, log};
use crate::pipeline::Pipeline;
use crate::socket::SnapshotSender;
use crate::timeline::TimelineWriter;
use crate::watchdog::Watchdog;
use crate::wire::Snapshot;

/// The watchdog's thread: looks for a CUPTI call running past its bound
/// and says so once; the sampler stops calling CUPTI from then on.
pub(super) fn watch(rt: &'static Runtime, watchdog: &'static Watchdog) {
    while !rt.stopping.load(Ordering::Acquire) {
        std::thread::sleep(Watchdog::POLL);
        if let Some(overdue) = watchdog.check() {
            log(
                Level::Error,
                format_args!(
                    "{} has not returned after {:?} (bound {:?}): PC sampling is off for this process",
                    overdue.call.name(),
                    overdue.running_for,
                    watchdog.bound()
                ),
            );
            return;
        }
    }
}

pub(super) fn tick(rt: &'static Runtime) {
    loop {
        std::thread::sleep(rt.config.snapshot_interval);
        if rt.stopping.load(Ordering::Acquire) {
            return;
        }
        if let Err(e) = rt.flush_all(false) {
            rt.errors
                .report(&e, "kernels wait in CUPTI's buffers until a later flush");
        }
        // This thread is Kiln's own: waiting for room is fine.
        if rt.events.send(Event::Tick).is_err() {
            return;
        }
    }
}

pub(super) fn aggregate(
    rt: &'static Runtime,
    events: Receiver<Event>,
    timeline: Option<TimelineWriter>,
) {
    let cupti = rt.cupti.clone();
    let mut pipeline = Pipeline::new(
        std::process::id(),
        rt.config.limits,
        Box::new(move |ptr| cupti.kernel_name(ptr)),
    );
    if let Some(timeline) = timeline {
        pipeline = pipeline.with_timeline(timeline);
    }
    let mut delivery = Delivery::new(rt);
    while let Ok(event) = events.recv() {
        match event {
            Event::Tick => {
                let snapshot = pipeline.snapshot(
                    rt.cupti.timestamp_ns(),
                    rt.counts.producer(&rt.errors, rt.pc.as_ref()),
                );
                delivery.deliver(&snapshot);
            }
            Event::Finish(ack) => {
                // Everything queued before the finish goes in the last
                // snapshot.
                while let Ok(event) = events.try_recv() {
                    take_in(rt, &mut pipeline, event);
                }
                let snapshot = pipeline.final_snapshot(
                    rt.cupti.timestamp_ns(),
                    rt.counts.producer(&rt.errors, rt.pc.as_ref()),
                );
                delivery.deliver(&snapshot);
                let _ = ack.send(());
                return;
            }
            event => take_in(rt, &mut pipeline, event),
        }
    }
}

pub(super) fn take_in(rt: &Runtime, pipeline: &mut Pipeline, event: Event) {
    match event {
        Event::Launch(launch) => pipeline.on_launch(launch),
        Event::Buffer(buffer) => {
            // SAFETY: the pool's allocation, `valid` bytes filled by CUPTI.
            let bytes = unsafe { std::slice::from_raw_parts(buffer.ptr, buffer.valid) };
            let left = rt
                .cupti
                .for_each_record(bytes, &mut |record| pipeline.on_record(record));
            pipeline.on_unwalked(left);
            // SAFETY: nothing reads the buffer after this.
            unsafe { rt.pool.give_back(buffer.ptr) };
        }
        Event::Cubin { crc, image } => pipeline.on_cubin(crc, image),
        Event::Memory(event) => pipeline.on_memory(event),
        Event::PcSamples { samples, dropped } => pipeline.on_pc_samples(&samples, dropped),
        Event::StallReasons(reasons) => pipeline.on_stall_reasons(reasons),
        Event::Tick | Event::Finish(_) => {}
    }
}

/// Sends snapshots, counting the ones the agent did not get, and says
/// once when the agent is absent and once when it is back.
pub(super) struct Delivery {
    rt: &'static Runtime,
    sender: SnapshotSender,
    absent: bool,
}

impl Delivery {
    pub(super) fn new(rt: &'static Runtime) -> Self {
        Self {
            rt,
            sender: SnapshotSender::new(&rt.config.socket_path),
            absent: false,
        }
    }

    pub(super) fn deliver(&mut self, snapshot: &Snapshot) {
        match self.sender.send(snapshot) {
            Ok(()) if self.absent => {
                self.absent = false;
                log(Level::Info, format_args!("agent reached again"));
            }
            Ok(()) => {}
            Err(e) => {
                self.rt
                    .counts
                    .snapshots_dropped
                    .fetch_add(1, Ordering::Relaxed);
                if !self.absent {
                    self.absent = true;
                    log(
                        Level::Warn,
                        format_args!(
                            "no kiln agent at {} ({e}); GPU snapshots are dropped until one listens",
                            self.rt.config.socket_path.display()
                        ),
                    );
                }
            }
        }
    }
}
