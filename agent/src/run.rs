//! The loop every mode of the agent runs: a batch (or a few) every
//! interval until asked to stop, then a last one with what was collected
//! since. [`crate::Agent`] (eBPF) and [`crate::GpuAgent`] (`--no-ebpf`)
//! differ only in what a tick collects and what they do between ticks.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tracing::{error, info};

use crate::AgentError;
use crate::sink::Sink;

/// How often the loop wakes between ticks: to see a stop request
/// promptly, and for [`Periodic::meanwhile`].
pub(crate) const WAKE_EVERY: Duration = Duration::from_millis(200);

/// What the loop drives.
pub(crate) trait Periodic {
    /// Time between ticks.
    fn interval(&self) -> Duration;

    /// Work done every [`WAKE_EVERY`] while waiting for the next tick.
    fn meanwhile(&mut self) {}

    /// Sends what was collected since the last tick to `sink`, logging
    /// what it sent. A [`AgentError::Sink`] means a batch was lost and the
    /// loop goes on; any other error ends it.
    fn send_batches(&mut self, sink: &mut dyn Sink) -> Result<(), AgentError>;
}

/// Ticks every interval until `stop` is set, then sends what was collected
/// since the last tick. Sink failures are logged and do not stop it;
/// other failures do.
pub(crate) fn run(
    source: &mut dyn Periodic,
    sink: &mut dyn Sink,
    stop: &AtomicBool,
) -> Result<(), AgentError> {
    let interval = source.interval();
    let mut next = Instant::now() + interval;
    loop {
        while !stop.load(Ordering::Relaxed) && Instant::now() < next {
            std::thread::sleep((next - Instant::now()).min(WAKE_EVERY));
            source.meanwhile();
        }
        let stopping = stop.load(Ordering::Relaxed);
        match source.send_batches(sink) {
            Ok(()) => {}
            Err(AgentError::Sink(e)) => error!(error = %e, "batch not delivered: dropped"),
            Err(e) => return Err(e),
        }
        if stopping {
            info!("stopped");
            return Ok(());
        }
        next += interval;
        // After a long stall, do not fire a burst of catch-up ticks.
        if next < Instant::now() {
            next = Instant::now() + interval;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use kiln_model::Batch;

    use super::*;
    use crate::sink::{Delivery, MemorySink, SinkError};

    /// Counts its ticks; asks the loop to stop at the third.
    struct Three<'a> {
        ticks: usize,
        stop: &'a AtomicBool,
    }

    impl Periodic for Three<'_> {
        fn interval(&self) -> Duration {
            Duration::from_millis(1)
        }

        fn send_batches(&mut self, sink: &mut dyn Sink) -> Result<(), AgentError> {
            self.ticks += 1;
            if self.ticks == 3 {
                self.stop.store(true, Ordering::Relaxed);
            }
            sink.send(&Batch::default())?;
            Ok(())
        }
    }

    /// A sink that refuses everything.
    struct Refusing;

    impl Sink for Refusing {
        fn send(&mut self, _: &Batch) -> Result<Delivery, SinkError> {
            Err(SinkError::Unavailable {
                reason: "test".into(),
                batch: Vec::new(),
            })
        }
    }

    /// Guards the stop protocol: the tick that sees the stop request is
    /// the last, and it still sends; a refused batch does not end the loop.
    #[test]
    fn last_tick_after_stop_and_sink_errors_go_on() {
        let stop = AtomicBool::new(false);
        let mut source = Three {
            ticks: 0,
            stop: &stop,
        };
        let mut sink = MemorySink::default();
        run(&mut source, &mut sink, &stop).unwrap();
        // The third tick set the flag, so the fourth is the final one.
        assert_eq!(source.ticks, 4);
        assert_eq!(sink.batches.len(), 4);

        stop.store(false, Ordering::Relaxed);
        source.ticks = 0;
        run(&mut source, &mut Refusing, &stop).unwrap();
        assert_eq!(source.ticks, 4);
    }
}
