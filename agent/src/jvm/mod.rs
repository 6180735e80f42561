//! JVM (HotSpot) processes.
//!
//! A JVM's Java methods run as interpreted frames of its template
//! interpreter and as JIT-compiled code in its code cache: anonymous
//! memory with no unwind table, which a native unwinder can neither name
//! nor walk through. What the walk needs is in the JVM itself: HotSpot
//! describes its own structs in tables `libjvm.so` exports for its
//! serviceability agent ([`vmstructs`]), from which [`layout`] takes the
//! offsets of this build, and [`process`] the running JVM's code cache,
//! interpreter and main class.
//!
//! Today the agent finds every JVM on the host, labels its samples with
//! what it runs (`script`: the main class or jar, as Python's script), and
//! marks the stacks of a JVM whose frames it does not read (OpenJ9) with a
//! root frame saying so. The walk through Java frames builds on what is
//! read here (`docs/design/jvm-unwinder.md`).

pub mod detect;
pub(crate) mod finder;
pub mod layout;
pub mod process;
pub mod vmstructs;

use std::sync::Arc;

use kiln_model::{Frame, FrameKind};

pub use detect::{JvmLibrary, inspect, may_be_jvm};
pub use finder::probe;
pub use layout::{HotSpotLayout, JdkVersion};
pub use process::{JvmProcess, main_of};

/// Why a JVM's structures could not be read.
#[derive(Debug, thiserror::Error)]
pub enum JvmError {
    /// The tables lack something the unwinder needs.
    #[error("this HotSpot build does not describe {0}")]
    Missing(String),
    /// The tables or the VM's structures hold what no HotSpot would.
    #[error("unexpected JVM structures: {0}")]
    Malformed(String),
    /// A JVM the agent does not read.
    #[error("{0}")]
    Unsupported(String),
    /// The VM has not set up its code cache yet: read it again later.
    #[error("the JVM has not started yet")]
    NotStarted,
    /// Its memory could not be read.
    #[error("reading {what} at {at:#x}: {source}")]
    Read {
        what: String,
        at: u64,
        #[source]
        source: std::io::Error,
    },
}

impl JvmError {
    pub(crate) fn read(what: &str, at: u64, source: std::io::Error) -> JvmError {
        JvmError::Read {
            what: what.to_owned(),
            at,
            source,
        }
    }
}

/// A JVM found in a process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Jvm {
    /// HotSpot, read: its build's layout and the process's code cache.
    HotSpot {
        layout: Arc<HotSpotLayout>,
        process: Arc<JvmProcess>,
    },
    /// A JVM whose frames are not read, and why.
    Unsupported {
        /// What it is and why, for the marker frame.
        reason: String,
        /// What it runs, when known.
        main: Option<String>,
    },
}

impl Jvm {
    /// The main class or jar, for the `script` label.
    pub fn main(&self) -> Option<&str> {
        match self {
            Jvm::HotSpot { process, .. } => process.main.as_deref(),
            Jvm::Unsupported { main, .. } => main.as_deref(),
        }
    }

    /// The root frame of this JVM's stacks when its Java frames are not
    /// read: says why, instead of leaving unnamed JIT addresses unexplained.
    pub fn marker(&self) -> Option<Frame> {
        match self {
            Jvm::HotSpot { .. } => None,
            Jvm::Unsupported { reason, .. } => Some(Frame::named(
                FrameKind::Jvm,
                format!("[jvm: {reason}: Java frames not read]"),
            )),
        }
    }
}

/// What a process's command line says it runs as a JVM, for a JVM whose
/// memory is not read: the word after the JVM's options.
pub fn main_from_cmdline(args: &[String]) -> Option<String> {
    let mut words = args.iter().skip(1);
    while let Some(word) = words.next() {
        match word.as_str() {
            "-jar" => return words.next().and_then(|jar| main_of(jar)),
            "-cp" | "-classpath" | "--class-path" | "-p" | "--module-path" | "--add-opens"
            | "--add-exports" | "--add-modules" => {
                words.next();
            }
            w if w.starts_with('-') => {}
            w => return main_of(w),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_line_names_its_main() {
        let args = |s: &str| s.split(' ').map(str::to_owned).collect::<Vec<_>>();
        assert_eq!(
            main_from_cmdline(&args("java -Xmx1g -cp a.jar:b.jar com.example.Main x")).as_deref(),
            Some("com.example.Main")
        );
        assert_eq!(
            main_from_cmdline(&args("java -jar /srv/app.jar --port 80")).as_deref(),
            Some("app.jar")
        );
        assert_eq!(main_from_cmdline(&args("java -version")), None);
    }
}
