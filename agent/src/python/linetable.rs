//! Decoding CPython code objects' line tables: which source line the
//! instruction at a bytecode offset belongs to.
//!
//! Two formats are in use by the interpreters the agent unwinds:
//!
//! * CPython 3.10 (PEP 626, `Objects/lnotab_notes.txt`): `co_linetable` is a
//!   sequence of (byte delta, line delta) pairs. The byte delta is unsigned,
//!   the line delta signed, and a line delta of -128 means the range has no
//!   line (the running line is left as it was). A delta too large for one
//!   pair is spread over several: line deltas over pairs with a byte delta
//!   of 0, byte deltas over pairs of 254 bytes, the later ones with a line
//!   delta of 0.
//! * CPython 3.11 and later (`Objects/locations.md`): `co_linetable` is a
//!   sequence of entries, each a header byte with the top bit set (a 4-bit
//!   kind and the length in 2-byte code units, minus one) and then zero or
//!   more bytes with the top bit clear. Only the start line matters here:
//!   the short forms (kinds 0-9) keep it, the one-line forms (10-12) add
//!   0-2, the no-column (13) and long (14) forms add a signed varint, and
//!   kind 15 has no location.
//!
//! Both are decoded by walking the table from the start, as the interpreter
//! does; the tables are short (a few bytes per source line), and the agent
//! caches the result per (code object, offset).
//!
//! The bytes come from another process's memory, so they may be torn or
//! garbage: decoding never panics and always ends (every step consumes at
//! least one byte of the table); a table that is not well formed before the
//! entry holding the offset gives no line rather than a guess.

/// Which format a code object's line table is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineTableFormat {
    /// CPython 3.10's `co_linetable` (PEP 626): (byte delta, line delta) pairs.
    Pep626,
    /// CPython 3.11 and later: the location table (`co_linetable`, varint entries, see Objects/locations.md).
    Locations,
}

/// The source line of the instruction at `offset` bytes from the start of the code object's bytecode,
/// given the code object's `co_firstlineno` and its line table bytes. `None` when the table says the
/// instruction has no line, or the table ends before `offset`. Never panics, whatever the bytes.
///
/// A malformed table (a 3.11+ entry that does not start with a header byte,
/// or whose line delta is cut short or too large for CPython to have
/// written) also gives `None`, as does a line that would be negative or not
/// fit a `u32`.
pub fn line_for_offset(
    format: LineTableFormat,
    table: &[u8],
    first_line: u32,
    offset: u32,
) -> Option<u32> {
    let line = match format {
        LineTableFormat::Pep626 => pep626_line(table, first_line, offset),
        LineTableFormat::Locations => locations_line(table, first_line, offset),
    }?;
    u32::try_from(line).ok()
}

/// The 3.10 line delta that marks a range without a line.
const PEP626_NO_LINE: i8 = -128;

/// 3.10: the line of the range holding byte `offset`, as a signed number so
/// that a table walking below zero is rejected by the caller, not wrapped.
fn pep626_line(table: &[u8], first_line: u32, offset: u32) -> Option<i64> {
    let offset = u64::from(offset);
    let mut line = i64::from(first_line);
    // Ranges are contiguous from byte 0, so the first one ending past the
    // offset holds it. Zero-width pairs only carry line delta (an extended
    // delta) and can never hold an offset.
    let mut end = 0u64;
    // A trailing odd byte is half a pair: the interpreter never writes one,
    // and it covers no bytes, so it is ignored.
    for pair in table.chunks_exact(2) {
        let &[byte_delta, line_delta] = pair else {
            break;
        };
        let line_delta = i8::from_ne_bytes([line_delta]);
        let range_line = if line_delta == PEP626_NO_LINE {
            // The running line is kept: the next pair's delta is relative to
            // the last real line.
            None
        } else {
            // Cannot overflow: each pair moves the line by at most 127.
            line += i64::from(line_delta);
            Some(line)
        };
        end += u64::from(byte_delta);
        if offset < end {
            return range_line;
        }
    }
    None
}

// The 3.11+ entry kinds (`_PyCodeLocationInfoKind`) that the decoder tells
// apart; 0-9 are the short forms.
/// One-line form, start line + 0 (kinds 10-12 add `kind - 10`).
const KIND_ONE_LINE0: u8 = 10;
/// One-line form, start line + 2.
const KIND_ONE_LINE2: u8 = 12;
/// No column information: a signed varint line delta.
const KIND_NO_COLUMNS: u8 = 13;
/// Long form: a signed varint line delta, then end line and columns.
const KIND_LONG: u8 = 14;
/// No location at all: the running line is kept.
const KIND_NONE: u8 = 15;

/// 3.11+: the line of the entry holding byte `offset`.
fn locations_line(table: &[u8], first_line: u32, offset: u32) -> Option<i64> {
    // The table counts 2-byte code units; an odd offset (never an
    // instruction start) is inside the unit it halves to.
    let unit = u64::from(offset / 2);
    let mut line = i64::from(first_line);
    let mut end = 0u64;
    let mut pos = 0usize;
    while let Some(&header) = table.get(pos) {
        if header & 0x80 == 0 {
            // Every entry starts with a header byte; anything else means the
            // table is not one (or not from a version this decoder knows).
            return None;
        }
        pos += 1;
        let kind = (header >> 3) & 0x0f;
        let length = u64::from(header & 0x07) + 1;
        let entry_line = match kind {
            KIND_NONE => None,
            KIND_NO_COLUMNS | KIND_LONG => {
                // Both start with the start line's delta; the long form's
                // end line and columns follow and are skipped below.
                line = line.checked_add(read_svarint(table, &mut pos)?)?;
                Some(line)
            }
            KIND_ONE_LINE0..=KIND_ONE_LINE2 => {
                line += i64::from(kind - KIND_ONE_LINE0);
                Some(line)
            }
            // The short forms, 0-9: same line, only columns follow.
            _ => Some(line),
        };
        end += length;
        if unit < end {
            return entry_line;
        }
        // Skip the entry's remaining bytes (columns, end line): the next
        // entry starts at the next header byte, as the interpreter finds it.
        while table.get(pos).is_some_and(|&byte| byte & 0x80 == 0) {
            pos += 1;
        }
    }
    None
}

/// A varint of `Objects/locations.md`: 6-bit chunks, least significant
/// first, bit 6 set on every chunk but the last.
///
/// `None` when it runs into the next header byte or the end of the table,
/// or has more chunks than a 32-bit value (what CPython writes) needs.
fn read_varint(table: &[u8], pos: &mut usize) -> Option<u64> {
    /// Six chunks hold 36 bits, enough for any `unsigned int`; a seventh
    /// could only come from garbage, and capping keeps the shift in range.
    const MAX_CHUNKS: u32 = 6;
    let mut value = 0u64;
    for chunk in 0..MAX_CHUNKS {
        let byte = *table.get(*pos)?;
        if byte & 0x80 != 0 {
            return None;
        }
        *pos += 1;
        value |= u64::from(byte & 0x3f) << (6 * chunk);
        if byte & 0x40 == 0 {
            return Some(value);
        }
    }
    None
}

/// A signed varint: the magnitude shifted left by one, the sign in bit 0.
fn read_svarint(table: &[u8], pos: &mut usize) -> Option<i64> {
    let raw = read_varint(table, pos)?;
    // Cannot fail: `read_varint` returns at most 36 bits.
    let magnitude = i64::try_from(raw >> 1).ok()?;
    Some(if raw & 1 == 1 { -magnitude } else { magnitude })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::Value;

    // Real tables and the lines the interpreter itself gives each code unit
    // (`co_lines()`), written by tests/data/python/gen_linetables.py.
    const VECTORS: [(&str, &str, LineTableFormat); 4] = [
        (
            "3.10",
            include_str!("../../tests/data/python/linetables-3.10.json"),
            LineTableFormat::Pep626,
        ),
        (
            "3.11",
            include_str!("../../tests/data/python/linetables-3.11.json"),
            LineTableFormat::Locations,
        ),
        (
            "3.12",
            include_str!("../../tests/data/python/linetables-3.12.json"),
            LineTableFormat::Locations,
        ),
        (
            "3.13",
            include_str!("../../tests/data/python/linetables-3.13.json"),
            LineTableFormat::Locations,
        ),
    ];

    /// One code object of a vector file.
    struct CodeObject {
        name: String,
        first_line: u32,
        table: Vec<u8>,
        code_len: u32,
        /// The line of each 2-byte code unit, `None` where it has none.
        lines: Vec<Option<u32>>,
    }

    fn hex_bytes(hex: &str) -> Vec<u8> {
        assert!(hex.len().is_multiple_of(2), "odd hex length");
        (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
            .collect()
    }

    fn as_u32(value: &Value) -> u32 {
        u32::try_from(value.as_u64().expect("number")).expect("fits u32")
    }

    /// The code objects of a vector file, checking that it is the version
    /// and format the test expects.
    fn load(version: &str, text: &str, format: LineTableFormat) -> Vec<CodeObject> {
        let file: Value = serde_json::from_str(text).expect("vector file is JSON");
        let file_version = file["version"].as_str().expect("version");
        assert!(
            file_version.starts_with(&format!("{version}.")),
            "file for {version} holds {file_version}"
        );
        let file_format = match format {
            LineTableFormat::Pep626 => "Pep626",
            LineTableFormat::Locations => "Locations",
        };
        assert_eq!(file["format"], file_format);
        file["code_objects"]
            .as_array()
            .expect("code_objects")
            .iter()
            .map(|object| CodeObject {
                name: object["name"].as_str().expect("name").to_owned(),
                first_line: as_u32(&object["first_line"]),
                table: hex_bytes(object["linetable"].as_str().expect("linetable")),
                code_len: as_u32(&object["code_len"]),
                lines: object["lines"]
                    .as_array()
                    .expect("lines")
                    .iter()
                    .map(|line| (!line.is_null()).then(|| as_u32(line)))
                    .collect(),
            })
            .collect()
    }

    /// Checks every code unit of every code object in a vector file and
    /// returns how many (code object, offset) pairs were checked.
    fn check_vectors(version: &str, text: &str, format: LineTableFormat) -> usize {
        let objects = load(version, text, format);
        assert!(objects.len() >= 20, "{version}: too few code objects");
        let mut checked = 0;
        for object in &objects {
            assert_eq!(object.lines.len() * 2, object.code_len as usize);
            for (unit, &expected) in object.lines.iter().enumerate() {
                let offset = u32::try_from(unit * 2).expect("offset");
                let got = line_for_offset(format, &object.table, object.first_line, offset);
                assert_eq!(got, expected, "{version} {} offset {offset}", object.name);
                // The second byte of a code unit is in the same range.
                let odd = line_for_offset(format, &object.table, object.first_line, offset + 1);
                assert_eq!(
                    odd,
                    expected,
                    "{version} {} offset {}",
                    object.name,
                    offset + 1
                );
                checked += 1;
            }
            // The table covers exactly the bytecode (the generator checks
            // this of co_lines()), so the end has no line.
            for past in [object.code_len, object.code_len + 1, u32::MAX] {
                let got = line_for_offset(format, &object.table, object.first_line, past);
                assert_eq!(got, None, "{version} {} offset {past}", object.name);
            }
        }
        checked
    }

    #[test]
    fn real_tables_match_co_lines() {
        for (version, text, format) in VECTORS {
            let checked = check_vectors(version, text, format);
            println!("{version}: {checked} (code object, offset) pairs checked");
            assert!(checked >= 2000, "{version}: only {checked} offsets");
        }
    }

    /// The vectors exercise every entry kind of the 3.11+ format, and the
    /// 3.10 format's no-line marker and extended deltas, so that
    /// regenerating them with a different sample cannot quietly drop one.
    #[test]
    fn real_tables_cover_every_entry_kind() {
        for (version, text, format) in VECTORS {
            let objects = load(version, text, format);
            match format {
                LineTableFormat::Locations => {
                    let mut seen = [false; 16];
                    for object in &objects {
                        for &byte in object.table.iter().filter(|&&b| b & 0x80 != 0) {
                            seen[usize::from((byte >> 3) & 0x0f)] = true;
                        }
                    }
                    for (kind, seen) in seen.iter().enumerate() {
                        assert!(seen, "{version}: no entry of kind {kind}");
                    }
                }
                LineTableFormat::Pep626 => {
                    let pairs: Vec<(u8, i8)> = objects
                        .iter()
                        .flat_map(|o| o.table.chunks_exact(2))
                        .map(|p| (p[0], i8::from_ne_bytes([p[1]])))
                        .collect();
                    assert!(pairs.iter().any(|&(_, l)| l == -128), "no line-less range");
                    assert!(
                        pairs.iter().any(|&(b, l)| b == 0 && l == 127),
                        "no long jump"
                    );
                    assert!(
                        pairs.iter().any(|&(b, l)| b == 0 && l == -127),
                        "no long jump back"
                    );
                    assert!(pairs.iter().any(|&(b, _)| b == 254), "no long range");
                }
            }
        }
    }

    const P: LineTableFormat = LineTableFormat::Pep626;
    const L: LineTableFormat = LineTableFormat::Locations;

    #[test]
    fn pep626_rules() {
        // Line 10: bytes 0..4 on line 11, 4..6 no line, 6..8 on line 9
        // (relative to 11, not to the line-less range), 8..(8+254+6) on
        // line 9+127+73 = 209 (an extended line delta, then an extended
        // byte delta whose later pair has line delta 0).
        let table = [4, 1, 2, 0x80, 2, 0xfe, 0, 127, 254, 73, 6, 0];
        let line = |offset| line_for_offset(P, &table, 10, offset);
        assert_eq!(line(0), Some(11));
        assert_eq!(line(3), Some(11));
        assert_eq!(line(4), None);
        assert_eq!(line(5), None);
        assert_eq!(line(6), Some(9));
        assert_eq!(line(8), Some(209));
        assert_eq!(line(8 + 253), Some(209));
        assert_eq!(line(8 + 254), Some(209));
        assert_eq!(line(8 + 259), Some(209));
        assert_eq!(line(8 + 260), None);
        // A line-less range spread over two pairs.
        let table = [254, 0x80, 10, 0x80, 2, 0];
        assert_eq!(line_for_offset(P, &table, 5, 260), None);
        assert_eq!(line_for_offset(P, &table, 5, 264), Some(5));
        // Empty table, half a pair, a line below zero.
        assert_eq!(line_for_offset(P, &[], 1, 0), None);
        assert_eq!(line_for_offset(P, &[2], 1, 0), None);
        assert_eq!(line_for_offset(P, &[2, 0xfe], 1, 0), None);
    }

    /// A 3.11+ header byte.
    fn header(kind: u8, units: u8) -> u8 {
        0x80 | (kind << 3) | (units - 1)
    }

    #[test]
    fn locations_every_kind() {
        let table = [
            // Units 0..1: short form, column byte; line stays 7.
            header(3, 1),
            0x25,
            // Units 1..3: one-line form, line + 1 = 8.
            header(11, 2),
            4,
            9,
            // Units 3..4: one-line form, same line.
            header(10, 1),
            1,
            2,
            // Units 4..5: one-line form, line + 2 = 10.
            header(12, 1),
            1,
            2,
            // Units 5..13: no location; the running line stays 10.
            header(15, 8),
            // Units 13..14: no columns, line delta -3 (svarint 7) = 7.
            header(13, 1),
            7,
            // Units 14..15: long form, delta +300 (svarint 600 = 0x18 + 0x09
            // << 6), end line delta 2, columns 4 and 200 (+1, two chunks).
            header(14, 1),
            0x58,
            0x09,
            2,
            5,
            0x49,
            0x03,
            // Units 15..16: long form, delta -300.
            header(14, 1),
            0x59,
            0x09,
            0,
            1,
            1,
        ];
        let line = |offset| line_for_offset(L, &table, 7, offset);
        assert_eq!(line(0), Some(7));
        assert_eq!(line(1), Some(7));
        assert_eq!(line(2), Some(8));
        assert_eq!(line(5), Some(8));
        assert_eq!(line(6), Some(8));
        assert_eq!(line(8), Some(10));
        assert_eq!(line(10), None);
        assert_eq!(line(25), None);
        assert_eq!(line(26), Some(7));
        assert_eq!(line(28), Some(307));
        assert_eq!(line(30), Some(7));
        assert_eq!(line(32), None);
    }

    #[test]
    fn locations_malformed() {
        // Not starting with a header.
        assert_eq!(line_for_offset(L, &[0x10, header(0, 1), 0], 1, 0), None);
        // A line delta cut short by the end, or by the next header.
        assert_eq!(line_for_offset(L, &[header(13, 1), 0x42], 1, 0), None);
        assert_eq!(
            line_for_offset(L, &[header(13, 1), 0x42, header(0, 1)], 1, 0),
            None
        );
        // Too many chunks for a 32-bit value.
        let long = [header(13, 1), 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x00];
        assert_eq!(line_for_offset(L, &long, 1, 0), None);
        // Below line zero, and beyond u32.
        assert_eq!(line_for_offset(L, &[header(13, 1), 5], 1, 0), None);
        let big = [header(13, 1), 0x7e, 0x7f, 0x7f, 0x7f, 0x7f, 0x3f];
        assert_eq!(line_for_offset(L, &big, 1, 0), None);
        // Earlier entries decode although a later one is broken.
        let table = [header(11, 1), 0, 0, header(13, 1)];
        assert_eq!(line_for_offset(L, &table, 1, 0), Some(2));
        assert_eq!(line_for_offset(L, &table, 1, 2), None);
        assert_eq!(line_for_offset(L, &[], 1, 0), None);
    }

    /// Decodes `table` at `offset` in both formats: the property is only
    /// that it returns.
    fn decode_both(table: &[u8], first_line: u32, offset: u32) {
        for format in [P, L] {
            let _ = line_for_offset(format, table, first_line, offset);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]

        #[test]
        fn hostile_tables_do_not_panic(
            table in proptest::collection::vec(any::<u8>(), 0..300),
            first_line in any::<u32>(),
            offset in any::<u32>(),
        ) {
            decode_both(&table, first_line, offset);
        }

        // Mostly header bytes and small offsets, so that decoding gets
        // deep into the table rather than stopping at the first byte.
        #[test]
        fn hostile_header_heavy_tables_do_not_panic(
            table in proptest::collection::vec(
                prop_oneof![3 => 0x80u8..=0xff, 1 => any::<u8>()],
                0..300,
            ),
            first_line in any::<u32>(),
            offset in 0u32..4096,
        ) {
            decode_both(&table, first_line, offset);
        }
    }

    /// ~100k deterministic pseudo-random tables and offsets (xorshift), a
    /// fixed sweep that runs the same on every machine on top of proptest.
    #[test]
    fn hostile_sweep_does_not_panic() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut table = Vec::new();
        for _ in 0..100_000 {
            let len = (next() % 64) as usize;
            table.clear();
            table.extend((0..len).map(|_| next() as u8));
            let first_line = next() as u32;
            // Half the offsets small enough to land inside the table.
            let offset = if next() & 1 == 0 {
                (next() % 1024) as u32
            } else {
                next() as u32
            };
            decode_both(&table, first_line, offset);
        }
    }
}
