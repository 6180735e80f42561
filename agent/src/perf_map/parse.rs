//! The lines of a perf map, `START SIZE name`, read as the file grows:
//! hex start and size (`0x` optional: the JVM writes it), one space each,
//! then the name to the end of the line. The file is written by the
//! profiled process, so nothing in it is trusted: a line that does not
//! parse, or that is too long, is skipped and counted, never guessed at.

/// Longest line taken: a name longer than any a runtime writes (V8's
/// carry their script's path, up to PATH_MAX, 4096) plus the two
/// numbers. Longer lines are skipped, so one line without an end cannot
/// make the reader hold the whole file.
pub(crate) const MAX_LINE_BYTES: usize = 4096 + 64;

/// Longest name kept, in bytes; longer ones are cut (at a character) and
/// end in `…`. Enough for .NET's generic signatures (a few hundred bytes)
/// and V8's `function path:line:column`; a flamegraph shows no more.
pub(crate) const MAX_NAME_BYTES: usize = 1024;

/// Largest code range taken, in bytes. JIT-compiled functions are bytes
/// to a few MiB; a larger range is garbage, and taking it would hide the
/// names of every entry under it.
pub(crate) const MAX_CODE_BYTES: u64 = 64 << 20;

/// One line of a perf map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    /// First address of the code.
    pub start: u64,
    /// One past its last address.
    pub end: u64,
    /// What the runtime named it, cut to [`MAX_NAME_BYTES`], control
    /// characters replaced.
    pub name: String,
}

/// The entry a line (without its newline) holds; `None` when it is not
/// one: missing or non-hex numbers, a size of 0 or over
/// [`MAX_CODE_BYTES`], a range past the end of the address space, no name.
pub(crate) fn parse_line(line: &[u8]) -> Option<Entry> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let mut fields = line.splitn(3, |&b| b == b' ');
    let start = hex(fields.next()?)?;
    let size = hex(fields.next()?)?;
    let name = fields.next()?;
    if size == 0 || size > MAX_CODE_BYTES || name.is_empty() {
        return None;
    }
    let end = start.checked_add(size)?;
    Some(Entry {
        start,
        end,
        name: clean_name(name),
    })
}

/// A hex number of 1 to 16 digits, with or without `0x`.
fn hex(field: &[u8]) -> Option<u64> {
    let digits = field
        .strip_prefix(b"0x")
        .or_else(|| field.strip_prefix(b"0X"))
        .unwrap_or(field);
    if digits.is_empty() || digits.len() > 16 {
        return None;
    }
    let text = std::str::from_utf8(digits).ok()?;
    u64::from_str_radix(text, 16).ok()
}

/// The name as text: invalid UTF-8 and control characters replaced (a
/// name ends up in terminals and logs), cut to [`MAX_NAME_BYTES`].
fn clean_name(name: &[u8]) -> String {
    let text = String::from_utf8_lossy(name);
    let mut out = String::with_capacity(text.len().min(MAX_NAME_BYTES + 3));
    for c in text.trim().chars() {
        if out.len() + c.len_utf8() > MAX_NAME_BYTES {
            out.push('…');
            break;
        }
        out.push(if c.is_control() { '\u{fffd}' } else { c });
    }
    out
}

/// Splits bytes read piece by piece into lines, holding a line that is
/// not finished yet (the writer may be in the middle of it) until the
/// rest comes, and skipping lines longer than [`MAX_LINE_BYTES`].
#[derive(Debug, Default)]
pub(crate) struct Lines {
    /// The unfinished line so far.
    partial: Vec<u8>,
    /// The unfinished line is too long: the rest of it is dropped.
    overlong: bool,
}

impl Lines {
    /// Calls `line` with each line `chunk` finishes (without its
    /// newline); returns how many overlong lines it skipped.
    pub(crate) fn feed(&mut self, mut chunk: &[u8], mut line: impl FnMut(&[u8])) -> u64 {
        let mut skipped = 0;
        while let Some(end) = chunk.iter().position(|&b| b == b'\n') {
            let (head, rest) = (&chunk[..end], &chunk[end + 1..]);
            chunk = rest;
            if self.overlong || self.partial.len() + head.len() > MAX_LINE_BYTES {
                skipped += 1;
            } else if self.partial.is_empty() {
                line(head);
            } else {
                self.partial.extend_from_slice(head);
                line(&self.partial);
            }
            self.partial.clear();
            self.overlong = false;
        }
        if !self.overlong {
            if self.partial.len() + chunk.len() > MAX_LINE_BYTES {
                self.partial.clear();
                self.overlong = true;
            } else {
                self.partial.extend_from_slice(chunk);
            }
        }
        skipped
    }

    /// Bytes of the unfinished line held.
    #[cfg(test)]
    pub(crate) fn pending(&self) -> usize {
        self.partial.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Guards what each runtime writes: V8's, .NET's, the JVM's 0x-prefixed
    // numbers, names with spaces.
    #[test]
    fn lines_of_every_runtime_parse() {
        let e = parse_line(b"7f0b39fe6240 168 JS:*sixty /tmp/pm/shares.js:14:15").unwrap();
        assert_eq!((e.start, e.end), (0x7f0b39fe6240, 0x7f0b39fe6240 + 0x168));
        assert_eq!(e.name, "JS:*sixty /tmp/pm/shares.js:14:15");
        let e = parse_line(
            b"00007FA2A8E5C4D0 5b instance void [System.Private.CoreLib] System.Threading.Thread::StartCallback()[Optimized]\r",
        )
        .unwrap();
        assert_eq!(e.start, 0x7fa2a8e5c4d0);
        assert!(e.name.ends_with("StartCallback()[Optimized]"), "{}", e.name);
        let e = parse_line(b"0x00007f5c9d000000 0x0000000000000180 java.lang.String::hashCode")
            .unwrap();
        assert_eq!((e.start, e.end - e.start), (0x7f5c9d000000, 0x180));
    }

    // Guards hostile lines: each is refused, none panics.
    #[test]
    fn garbage_lines_are_refused() {
        for line in [
            &b""[..],
            b"\n",
            b"7f00",
            b"7f00 10",
            b"7f00 10 ",
            b"zz00 10 name",
            b"7f00 -10 name",
            b"7f00 0 name",
            b"7f00 ffffffffffffffff name",
            b"ffffffffffffffff 10 wraps",
            b"11111111111111111 10 seventeen digits",
            b"0x 10 no digits",
            b"7f00  10 two spaces",
            b"\xff\xfe 10 binary",
        ] {
            assert_eq!(
                parse_line(line),
                None,
                "{:?}",
                String::from_utf8_lossy(line)
            );
        }
        let big = format!("1000 {:x} huge", MAX_CODE_BYTES + 1);
        assert_eq!(parse_line(big.as_bytes()), None);
    }

    // Guards names: cut to the bound at a character, control characters
    // and invalid UTF-8 replaced.
    #[test]
    fn names_are_bounded_and_printable() {
        let long = format!("1000 10 {}", "é".repeat(MAX_NAME_BYTES));
        let name = parse_line(long.as_bytes()).unwrap().name;
        assert!(name.len() <= MAX_NAME_BYTES + '…'.len_utf8());
        assert!(name.ends_with('…'));
        let name = parse_line(b"1000 10 a\x1b[31mb\xffc").unwrap().name;
        assert_eq!(name, "a\u{fffd}[31mb\u{fffd}c");
    }

    // Guards the splitter: lines cut across reads are joined, an
    // unfinished line waits, and a line past the bound is skipped whole
    // without being held.
    #[test]
    fn lines_split_across_reads_and_overlong_lines() {
        let mut lines = Lines::default();
        let mut got = Vec::new();
        let mut take = |l: &[u8]| got.push(String::from_utf8_lossy(l).into_owned());
        assert_eq!(lines.feed(b"1 2 a\n3 4 b", &mut take), 0);
        assert_eq!(lines.pending(), 5);
        lines.feed(b"c\n5 6 d\n", &mut take);
        let long = vec![b'x'; MAX_LINE_BYTES + 1];
        lines.feed(&long[..100], &mut take);
        lines.feed(&long[100..], &mut take);
        assert!(lines.pending() < MAX_LINE_BYTES);
        assert_eq!(lines.feed(b"still the long line\n7 8 e\n", &mut take), 1);
        let exact = vec![b'y'; MAX_LINE_BYTES];
        lines.feed(&exact, &mut take);
        lines.feed(b"\n", &mut take);
        assert_eq!(got.len(), 5);
        assert_eq!(&got[..4], ["1 2 a", "3 4 bc", "5 6 d", "7 8 e"]);
        assert_eq!(got[4].len(), MAX_LINE_BYTES);
    }
}
