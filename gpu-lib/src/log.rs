//! The injected library's own few log lines, on stderr.
//!
//! Not `tracing`: the library lives inside someone else's process, which
//! has no subscriber (and may have its own, which Kiln must not disturb).
//! `KILN_CUDA_LOG=off|error|warn|info|debug` picks the level (default
//! `warn`).

use std::sync::OnceLock;

/// Log levels, most severe first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Level {
    /// Nothing is printed.
    Off,
    /// Failures that turn a feature off.
    Error,
    /// Something missing (CUPTI, the agent), printed once.
    Warn,
    /// What was found and turned on.
    Info,
    /// Details.
    Debug,
}

impl Level {
    /// Parses a `KILN_CUDA_LOG` value; unknown values give `Warn`.
    pub(crate) fn parse(text: &str) -> Level {
        match text.trim().to_ascii_lowercase().as_str() {
            "off" | "none" | "0" => Level::Off,
            "error" => Level::Error,
            "info" => Level::Info,
            "debug" | "trace" => Level::Debug,
            _ => Level::Warn,
        }
    }
}

/// The level from the environment, read once.
pub(crate) fn level() -> Level {
    static LEVEL: OnceLock<Level> = OnceLock::new();
    *LEVEL.get_or_init(|| {
        std::env::var("KILN_CUDA_LOG")
            .map(|v| Level::parse(&v))
            .unwrap_or(Level::Warn)
    })
}

/// Prints `kiln-cuda: <message>` when `at` is enabled.
pub(crate) fn log(at: Level, message: std::fmt::Arguments<'_>) {
    if at != Level::Off && at <= level() {
        eprintln!("kiln-cuda: {message}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_parse() {
        assert_eq!(Level::parse("OFF"), Level::Off);
        assert_eq!(Level::parse("debug"), Level::Debug);
        assert_eq!(Level::parse("bogus"), Level::Warn);
        assert!(Level::Error < Level::Warn);
    }
}
