//! `perf script` output, as printed by default for a `perf record -g` file:
//!
//! ```text
//! app 1234/1235 [001] 12345.678901:     250000 cpu-clock:pppH:
//! \t    7f12340a12 compute+0x12 (/opt/app/bin/app)
//! \t    7f12340b00 main+0x40 (/opt/app/bin/app)
//! \t    7f1234c083 __libc_start_call_main+0x73 (/usr/lib/x86_64-linux-gnu/libc.so.6)
//!
//! ```
//!
//! A sample is a header line (see [`header`]), then its stack, leaf first,
//! one frame a line (see [`stack_line`]), then a blank line. Without `-g`
//! perf prints a sample's one frame at the end of its header and no blank
//! line. Lines starting with `#` (perf's `--header`) are skipped.
//!
//! Each sample counts 1 and is labelled `process` (the command), `tid`,
//! and `pid` when perf printed `pid/tid` (`perf script -F +pid`; its
//! default prints only the thread id). Frames are named as
//! stackcollapse-perf.pl names them (see [`naming`]) and put root first.
//!
//! **Time.** A sample keeps its own time, converted from perf's seconds to
//! nanoseconds. perf's clock counts from boot on most systems, so by
//! default ([`PerfTimestamps::ShiftToNow`]) all samples are shifted alike so
//! that the last one lands at [`ImportOptions::now_ns`].
//!
//! **Period.** For `cpu-clock` and `task-clock`, whose periods are
//! nanoseconds, the batch's period is the mean of the samples' periods
//! (which keeps their total CPU time); for any other event, or when perf
//! printed no period, it is [`ImportOptions::default_period_ns`].
//!
//! **Depth.** A stack deeper than [`MAX_STACK_DEPTH`] keeps its leaf-most
//! frames under a `[truncated]` root; the lines past it are checked but
//! not kept.
//!
//! **Events.** Only one event is imported: [`ImportOptions::perf_event`],
//! or by default the first sample's. Samples of other events are counted
//! in [`Imported::skipped_samples`].

mod header;
mod naming;
mod stack_line;

use kiln_model::{Frame, FrameKind, LabelSet, MAX_STACK_DEPTH, TRUNCATED_FRAME, label_names};

use crate::builder::ImportBuilder;
use crate::error::{ImportError, snippet};
use crate::options::{ImportOptions, Imported, PerfTimestamps};
use crate::text::numbered_lines;
use header::Header;

/// Events whose period perf prints in nanoseconds.
const CLOCK_EVENTS: [&str; 2] = ["cpu-clock", "task-clock"];

/// Most distinct event names kept for the "no samples of event" message.
const MAX_EVENTS_NAMED: usize = 16;

/// Imports perf script text.
pub(crate) fn import(text: &str, options: &ImportOptions) -> Result<Imported, ImportError> {
    let mut importer = Importer::new(options);
    let mut current: Option<Sample<'_>> = None;
    for (line, content) in numbered_lines(text) {
        if content.starts_with('#') {
            continue;
        }
        if content.trim().is_empty() {
            if let Some(sample) = current.take() {
                importer.add(sample)?;
            }
            continue;
        }
        match current.as_mut() {
            Some(sample) => {
                let stack_line =
                    stack_line::parse(content).ok_or_else(|| ImportError::PerfBadFrame {
                        line,
                        text: snippet(content.trim()),
                    })?;
                // Past a batch's depth, lines are checked but their frames
                // not kept (perf prints leaf first: the leaf-most are kept).
                match sample.frames.len() < MAX_STACK_DEPTH {
                    true => naming::push_frames(&stack_line, sample.java, &mut sample.frames),
                    false => sample.cut = true,
                }
            }
            None => {
                let mut sample = Sample::new(header::parse(line, content)?);
                // A stack printed on the header line is the whole stack (and
                // no blank line follows). Anything else there that is not
                // `address symbol (module)` is a tracepoint's fields.
                match stack_line::parse(sample.header.rest).filter(|l| l.module.is_some()) {
                    Some(stack_line) => {
                        naming::push_frames(&stack_line, sample.java, &mut sample.frames);
                        importer.add(sample)?;
                    }
                    None => current = Some(sample),
                }
            }
        }
    }
    if let Some(sample) = current.take() {
        importer.add(sample)?;
    }
    importer.finish()
}

/// A sample being read.
struct Sample<'a> {
    header: Header<'a>,
    /// Whether the command is a JVM (Java symbols are tidied).
    java: bool,
    /// Leaf first, as perf prints them.
    frames: Vec<Frame>,
    /// Whether frames past [`MAX_STACK_DEPTH`] were left out.
    cut: bool,
}

impl<'a> Sample<'a> {
    fn new(header: Header<'a>) -> Self {
        Self {
            java: header.comm.starts_with("java"),
            header,
            frames: Vec::new(),
            cut: false,
        }
    }
}

/// The event name without its modifiers: `cycles:u` → `cycles`.
fn base_event(event: &str) -> &str {
    event.split(':').next().unwrap_or(event)
}

/// Adds samples to the batch and keeps what is decided only at the end:
/// the event, the time shift and the period.
struct Importer<'o> {
    options: &'o ImportOptions,
    out: ImportBuilder,
    /// The event imported: the one asked for, or the first sample's without
    /// modifiers.
    event: Option<String>,
    /// Distinct events seen, for the error when none is the one asked for.
    events_seen: Vec<String>,
    /// Samples of other events, or without frames.
    skipped: u64,
    /// The latest sample time, which [`PerfTimestamps::ShiftToNow`] moves
    /// to now.
    latest_ns: Option<i64>,
    /// Sum and number of the clock-event periods, for their mean.
    period_sum: u128,
    periods: u64,
}

impl<'o> Importer<'o> {
    fn new(options: &'o ImportOptions) -> Self {
        Self {
            options,
            out: ImportBuilder::new(options, options.default_period_ns),
            event: options.perf_event.clone(),
            events_seen: Vec::new(),
            skipped: 0,
            latest_ns: None,
            period_sum: 0,
            periods: 0,
        }
    }

    fn add(&mut self, mut sample: Sample<'_>) -> Result<(), ImportError> {
        let header = &sample.header;
        if let Some(event) = header.event {
            if self.events_seen.len() < MAX_EVENTS_NAMED
                && !self.events_seen.iter().any(|e| e == event)
            {
                self.events_seen.push(event.to_owned());
            }
            let wanted = self
                .event
                .get_or_insert_with(|| base_event(event).to_owned());
            if event != wanted.as_str() && base_event(event) != wanted.as_str() {
                self.skipped += 1;
                return Ok(());
            }
        }
        if sample.frames.is_empty() {
            self.skipped += 1;
            return Ok(());
        }
        if sample.cut || sample.frames.len() > MAX_STACK_DEPTH {
            // Keep the leaf-most frames under a `[truncated]` root.
            sample.frames.truncate(MAX_STACK_DEPTH - 1);
            sample
                .frames
                .push(Frame::named(FrameKind::Truncated, TRUNCATED_FRAME));
        }
        sample.frames.reverse();

        if let (Some(period), Some(event)) = (header.period, header.event)
            && CLOCK_EVENTS.contains(&base_event(event))
        {
            self.period_sum += u128::from(period);
            self.periods += 1;
        }
        self.latest_ns = self.latest_ns.max(Some(header.time_ns));

        let mut labels = LabelSet::new()
            .with(label_names::PROCESS, header.comm)
            .with(label_names::TID, header.tid);
        if let Some(pid) = header.pid {
            labels.insert(label_names::PID, pid);
        }
        self.out
            .add_labeled(header.time_ns, &sample.frames, labels, 1)
    }

    fn finish(self) -> Result<Imported, ImportError> {
        let options = self.options;
        let mut imported = match self.out.finish() {
            Err(ImportError::NoSamples)
                if options.perf_event.is_some() && !self.events_seen.is_empty() =>
            {
                return Err(ImportError::PerfNoSuchEvent {
                    event: options.perf_event.clone().unwrap_or_default(),
                    seen: self.events_seen,
                });
            }
            result => result?,
        };
        imported.skipped_samples = self.skipped;
        let mean_period = self.period_sum.checked_div(u128::from(self.periods));
        imported.batch.period_ns = match mean_period.map(u64::try_from) {
            Some(Ok(period)) if period > 0 => period,
            _ => options.default_period_ns,
        };
        if let (PerfTimestamps::ShiftToNow, Some(latest)) =
            (options.perf_timestamps, self.latest_ns)
        {
            let shift = i128::from(options.now_ns) - i128::from(latest);
            for sample in &mut imported.batch.samples {
                let shifted = i128::from(sample.timestamp_ns) + shift;
                sample.timestamp_ns =
                    i64::try_from(shifted).unwrap_or(if shifted < 0 { i64::MIN } else { i64::MAX });
            }
        }
        Ok(imported)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO_THREADS: &str = "\
# ========
# captured on    : Mon Jan  1 00:00:00 2024
# ========
#
app 1234/1235 [001] 100.000000001:     1000000 cpu-clock:pppH:
\t    7f1234 compute+0x12 (/opt/app/bin/app)
\t    7f1300 main+0x40 (/opt/app/bin/app)

app 1234/1236 [002] 100.5: 3000000 cpu-clock:pppH:
\t    7f1234 compute+0x14 (/opt/app/bin/app)
\t    7f1300 main+0x40 (/opt/app/bin/app)
";

    fn options() -> ImportOptions {
        ImportOptions::new(1_700_000_000_000_000_000)
    }

    #[test]
    fn samples_keep_their_spacing_and_end_now() {
        let imported = import(TWO_THREADS, &options()).unwrap();
        assert_eq!(imported.samples, 2);
        assert_eq!(imported.stacks, 1);
        let times: Vec<_> = imported
            .batch
            .samples
            .iter()
            .map(|s| s.timestamp_ns)
            .collect();
        assert_eq!(
            times,
            [
                1_700_000_000_000_000_000 - 499_999_999,
                1_700_000_000_000_000_000
            ]
        );
        assert_eq!(imported.batch.period_ns, 2_000_000);
        let frames: Vec<_> = imported.batch.frames.iter().map(|f| &f.frame).collect();
        assert_eq!(
            frames[0],
            &Frame::Named {
                kind: FrameKind::Native,
                function: "main".into(),
                module: Some("app".into()),
                file: None,
                line: 0,
            },
            "root first"
        );
        let labels = &imported.batch.label_sets[1].labels;
        assert_eq!(labels.get("process"), Some("app"));
        assert_eq!(labels.get("pid"), Some("1234"));
        assert_eq!(labels.get("tid"), Some("1236"));
    }

    #[test]
    fn times_as_recorded_when_asked() {
        let options = ImportOptions {
            perf_timestamps: PerfTimestamps::AsRecorded,
            ..options()
        };
        let imported = import(TWO_THREADS, &options).unwrap();
        assert_eq!(imported.batch.samples[0].timestamp_ns, 100_000_000_001);
    }

    #[test]
    fn options_labels_win() {
        let mut options = options();
        options.labels = LabelSet::new().with("process", "renamed").with("host", "h");
        let imported = import(TWO_THREADS, &options).unwrap();
        let labels = &imported.batch.label_sets[0].labels;
        assert_eq!(labels.get("process"), Some("renamed"));
        assert_eq!(labels.get("host"), Some("h"));
        assert_eq!(labels.get("tid"), Some("1235"));
    }

    #[test]
    fn first_event_only_unless_asked() {
        let text = "a 1 1.0: 5 cycles:u:\n\t1 f (/bin/a)\n\na 1 2.0: 7 instructions:u:\n\t1 g (/bin/a)\n\na 1 3.0: 5 cycles:k:\n\t1 h (/bin/a)\n";
        let imported = import(text, &options()).unwrap();
        assert_eq!((imported.samples, imported.skipped_samples), (2, 1));
        // Not a clock event: the period is the default.
        assert_eq!(imported.batch.period_ns, options().default_period_ns);

        let only = |event: &str| ImportOptions {
            perf_event: Some(event.into()),
            ..options()
        };
        let imported = import(text, &only("instructions")).unwrap();
        assert_eq!((imported.samples, imported.skipped_samples), (1, 2));
        let imported = import(text, &only("cycles:k")).unwrap();
        assert_eq!(imported.samples, 1);
        let err = import(text, &only("branches")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "no samples of event \"branches\" in input (events seen: cycles:u, instructions:u, cycles:k)"
        );
    }

    #[test]
    fn samples_without_g_have_their_frame_on_the_header_line() {
        let text = "app 9 1.0: 250000 cpu-clock:  400123 main+0x3 (/bin/app)\napp 9 1.1: 250000 cpu-clock:  400200 work+0x3 (/bin/app)\n";
        let imported = import(text, &options()).unwrap();
        assert_eq!((imported.samples, imported.stacks), (2, 2));
        assert_eq!(imported.batch.period_ns, 250_000);
    }

    #[test]
    fn tracepoint_fields_are_not_frames() {
        let text = "app 9 1.0: sched:sched_switch: prev_comm=app prev_pid=9 ==> next_comm=swapper/0\n\tffffffff81000000 __schedule+0x1 ([kernel.kallsyms])\n\n";
        let imported = import(text, &options()).unwrap();
        assert_eq!((imported.samples, imported.stacks), (1, 1));
        assert_eq!(imported.batch.frames.len(), 1);
    }

    #[test]
    fn bad_stack_lines_name_the_line() {
        let text = "app 9 1.0: cycles:\n\t1 main (/bin/app)\n\tnot a frame\n";
        let err = import(text, &options()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "line 3: stack frame line \"not a frame\" does not start with a hexadecimal address"
        );
    }

    #[test]
    fn samples_without_frames_are_skipped() {
        let text = "app 9 1.0: cycles:\n\napp 9 2.0: cycles:\n\t1 main (/bin/app)\n";
        let imported = import(text, &options()).unwrap();
        assert_eq!((imported.samples, imported.skipped_samples), (1, 1));
        let err = import("app 9 1.0: cycles:\n\n# only\n", &options()).unwrap_err();
        assert!(matches!(err, ImportError::NoSamples));
    }

    /// Guards the depth bound: a sample of 100,000 stack lines keeps its
    /// leaf-most frames under a `[truncated]` root, built from the first
    /// lines only.
    #[test]
    fn deep_stacks_keep_their_leaf_most_frames() {
        let mut text = String::from("app 1 [001] 1.0: 1 cpu-clock:\n\t 1 leaf+0x1 (/bin/app)\n");
        for _ in 0..100_000 {
            text.push_str("\t 2 caller+0x2 (/bin/app)\n");
        }
        let imported = import(&text, &options()).unwrap();
        let stack = &imported.batch.stacks[0].frames;
        assert_eq!(stack.len(), MAX_STACK_DEPTH);
        let frame = |id| {
            &imported
                .batch
                .frames
                .iter()
                .find(|f| f.id == id)
                .unwrap()
                .frame
        };
        assert_eq!(
            frame(stack[0]),
            &Frame::named(FrameKind::Truncated, TRUNCATED_FRAME)
        );
        let Frame::Named { function, .. } = frame(stack[MAX_STACK_DEPTH - 1]) else {
            panic!("named");
        };
        assert_eq!(function, "leaf");
        kiln_model::Batch::decode(&imported.batch.encode()).unwrap();
    }
}
