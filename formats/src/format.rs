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

    /// Guesses the format of `input` from its first bytes: binary (gzip,
    /// protobuf, control characters) is pprof; text whose stack lines are
    /// indented under a header is perf script; other text is collapsed
    /// stacks. A wrong guess is harmless: the import then fails with the
    /// parser's message, and the format can be named explicitly.
    pub fn detect(input: &[u8]) -> Format {
        let head = &input[..input.len().min(4096)];
        let binary = head
            .iter()
            .any(|&b| b < 0x20 && !matches!(b, b'\t' | b'\n' | b'\r'));
        // A multi-byte character may be cut at the end of `head`.
        let text = match std::str::from_utf8(head) {
            Ok(text) => Some(text),
            Err(e) if e.error_len().is_none() => std::str::from_utf8(&head[..e.valid_up_to()]).ok(),
            Err(_) => None,
        };
        match text {
            Some(text) if !binary => {
                let indented_stack_line = text
                    .lines()
                    .skip_while(|l| l.trim().is_empty() || l.starts_with('#'))
                    .nth(1)
                    .is_some_and(|l| l.starts_with(char::is_whitespace) && !l.trim().is_empty());
                if indented_stack_line {
                    Format::PerfScript
                } else {
                    Format::Collapsed
                }
            }
            _ => Format::Pprof,
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

    #[test]
    fn detects_each_format_from_its_contents() {
        assert_eq!(Format::detect(b"main;work 3\nmain 1\n"), Format::Collapsed);
        let perf =
            b"app 12/13 [000] 1.000001: 250000 cpu-clock:\n\t  4005d6 work+0x6 (/tmp/app)\n\n";
        assert_eq!(Format::detect(perf), Format::PerfScript);
        assert_eq!(
            Format::detect(b"# perf header\n\napp 12 1.0: cycles:\n\t 1 f (m)\n"),
            Format::PerfScript
        );
        assert_eq!(Format::detect(&[0x1f, 0x8b, 8, 0]), Format::Pprof);
        assert_eq!(
            Format::detect(&[0x0a, 0x04, 0x08, 0x01, 0x10, 0x02]),
            Format::Pprof
        );
        assert_eq!(Format::detect(b""), Format::Collapsed);
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
