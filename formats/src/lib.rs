//! Import of standard profile formats into a Kiln [`Batch`]: collapsed
//! ("folded") stacks, `perf script` output, and pprof profiles. The gateway
//! and `kiln import` use it to take profiles recorded by other tools.
//!
//! [`import`] reads a whole input and gives back one batch, or an
//! [`ImportError`] that names the line and the field (the message, the id)
//! that is wrong; nothing is imported from an input with an error. It never
//! panics, whatever the input, and reads at most
//! [`MAX_DECOMPRESSED_BYTES`] out of a gzip stream.
//!
//! How each format maps onto Kiln's frames, labels, timestamps and period is
//! described on [`Format`]'s variants and, at length, in the modules'
//! sources (`collapsed.rs`, `perf_script/`, `pprof/`).
//!
//! # Examples
//!
//! ```
//! use kiln_formats::{Format, ImportOptions, import};
//!
//! let text = "main;parse;read 3\nmain;render 2\nmain;parse;read 1\n";
//! let format: Format = "collapsed".parse()?;
//! let imported = import(format, text.as_bytes(), &ImportOptions::new(1_700_000_000_000_000_000))?;
//! assert_eq!(imported.samples, 6);
//! assert_eq!(imported.stacks, 2); // the two `main;parse;read` lines are summed
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! [`Batch`]: kiln_model::Batch

mod builder;
mod collapsed;
mod error;
pub mod export;
mod format;
mod limits;
mod module;
mod options;
pub mod otlp;
mod perf_script;
mod pprof;
pub mod pyroscope;
mod stack;
mod text;
mod time;
mod weights;
mod wire;

pub use error::ImportError;
pub use format::{Format, ParseFormatError};
pub use limits::MAX_DECOMPRESSED_BYTES;
pub use options::{DEFAULT_PERIOD_NS, ImportOptions, Imported, PerfTimestamps};
/// pprof's `profile.proto` messages (prost), to build or read profiles.
pub use pprof::proto as pprof_proto;
pub use time::parse_time;

/// Imports `input`, in `format`, as one batch.
///
/// - [`Format::Collapsed`]: one sample count per line, frames verbatim,
///   stamped `options.now_ns`, period `options.default_period_ns`.
/// - [`Format::PerfScript`]: one sample per perf sample, frames named as
///   stackcollapse-perf.pl names them, labelled with process and thread,
///   stamped with perf's times shifted to end at `options.now_ns` (see
///   [`PerfTimestamps`]).
/// - [`Format::Pprof`]: gzip-compressed or not; counts, labels, frames with
///   files and lines, inlined functions as frames of their own.
///
/// # Errors
///
/// [`ImportError::Empty`] for no bytes, [`ImportError::NoSamples`] for an
/// input without a sample, and a variant naming the line or message at
/// fault for anything malformed.
pub fn import(
    format: Format,
    input: &[u8],
    options: &ImportOptions,
) -> Result<Imported, ImportError> {
    if input.is_empty() {
        return Err(ImportError::Empty);
    }
    match format {
        Format::Collapsed => collapsed::import(text::as_text(input)?, options),
        Format::PerfScript => perf_script::import(text::as_text(input)?, options),
        Format::Pprof => pprof::import(input, options),
    }
}
