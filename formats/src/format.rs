//! The formats this crate reads, by name.

use std::fmt;
use std::str::FromStr;

/// A profile format [`import`](crate::import) reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// Brendan Gregg's folded stacks: `main;work;leaf 12` per line.
    #[doc(alias = "folded")]
    Collapsed,
    /// The default text output of `perf script` on a `perf record -g` file.
    PerfScript,
    /// Google's `profile.proto`, gzip-compressed or not.
    Pprof,
}

impl Format {
    /// Every format, in the order their names are listed.
    pub const ALL: [Format; 3] = [Format::Collapsed, Format::PerfScript, Format::Pprof];

    /// The format's name, as parsed by [`FromStr`] and used on the command
    /// line.
    pub fn name(self) -> &'static str {
        match self {
            Format::Collapsed => "collapsed",
            Format::PerfScript => "perf-script",
            Format::Pprof => "pprof",
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A format name that is not one of [`Format::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown profile format {name:?}; expected one of: collapsed, perf-script, pprof")]
pub struct ParseFormatError {
    /// The name given.
    pub name: String,
}

impl FromStr for Format {
    type Err = ParseFormatError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Format::ALL
            .into_iter()
            .find(|f| f.name() == s)
            .ok_or_else(|| ParseFormatError { name: s.to_owned() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for f in Format::ALL {
            assert_eq!(f.to_string().parse::<Format>(), Ok(f));
        }
    }

    /// Guards the error message: it must list every accepted name, so a
    /// format added to `ALL` must be added to the message too.
    #[test]
    fn unknown_name_lists_the_accepted_ones() {
        let err = "folded".parse::<Format>().unwrap_err().to_string();
        assert!(err.contains("\"folded\""), "{err}");
        for f in Format::ALL {
            assert!(err.contains(f.name()), "{err} lacks {f}");
        }
    }
}
