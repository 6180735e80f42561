//! The segment file format: checksummed, length-prefixed records, and a
//! reader that notices damage instead of trusting it.
//!
//! A segment is a file named by the offset of its first record
//! (`00000000000000000042.log`) holding records back to back:
//!
//! ```text
//! len      u32 LE   bytes after the crc field: 12 + key_len + payload_len
//! crc      u32 LE   crc32 of every other byte of the record (len, offset,
//!                   key_len, key, payload)
//! offset   u64 LE   the record's offset in its partition
//! key_len  u32 LE
//! key      key_len bytes
//! payload  the rest
//! ```
//!
//! The crc covers the length too, so a flipped length bit is caught rather
//! than sending the reader off into the middle of another record. Each
//! record carries its offset so a reader can resynchronise after damage and
//! say exactly which offsets it lost.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::{fmt, io};

use crc32fast::Hasher;

use crate::error::{BusError, io};

/// Bytes before the key: len, crc, offset, key_len.
pub(crate) const HEADER_LEN: usize = 20;
/// The part of `len` that is not key or payload: offset and key_len.
const LEN_FIXED: u32 = 12;
/// Largest key plus payload the format can hold (`len` is a u32).
pub(crate) const MAX_RECORD_BYTES: usize = (u32::MAX - LEN_FIXED) as usize;
/// How much a reader fetches per read: big enough that small records cost
/// far less than a syscall each.
const READ_CHUNK: usize = 256 * 1024;

/// The file name of the segment whose first record has offset `base`.
pub(crate) fn file_name(base: u64) -> String {
    format!("{base:020}.log")
}

/// The base offset a segment file name stands for, if it is one.
pub(crate) fn parse_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".log")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The base offsets of the segments in a partition directory, ascending.
/// Other files are left alone, with a warning.
pub(crate) fn list(dir: &Path) -> Result<Vec<u64>, BusError> {
    let mut bases = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io("list", dir))? {
        let entry = entry.map_err(io("list", dir))?;
        let name = entry.file_name();
        match name.to_str().and_then(parse_file_name) {
            Some(base) => bases.push(base),
            None => tracing::warn!(
                file = %entry.path().display(),
                "ignoring a file that is not a segment in a partition directory"
            ),
        }
    }
    bases.sort_unstable();
    Ok(bases)
}

/// One record encoded for appending. The crc of key and payload is computed
/// when the frame is built, outside the partition lock; [`Frame::seal`]
/// fills in the offset under the lock and combines the checksums.
pub(crate) struct Frame {
    bytes: Vec<u8>,
    body_crc: Hasher,
}

impl Frame {
    /// Encodes a record; its offset is filled in by [`Frame::seal`].
    ///
    /// The caller has checked `key.len() + payload.len() <=
    /// MAX_RECORD_BYTES`; larger records are refused here too rather than
    /// written with a wrapped length.
    pub(crate) fn new(key: &[u8], payload: &[u8]) -> Result<Frame, BusError> {
        let size = key.len() + payload.len();
        let too_large = || BusError::RecordTooLarge {
            size,
            limit: MAX_RECORD_BYTES,
        };
        let len = u32::try_from(size)
            .ok()
            .and_then(|s| s.checked_add(LEN_FIXED))
            .ok_or_else(too_large)?;
        let key_len = u32::try_from(key.len()).map_err(|_| too_large())?;
        let mut bytes = Vec::with_capacity(HEADER_LEN + size);
        bytes.extend_from_slice(&len.to_le_bytes());
        bytes.extend_from_slice(&[0; 12]); // crc and offset, set by seal()
        bytes.extend_from_slice(&key_len.to_le_bytes());
        bytes.extend_from_slice(key);
        bytes.extend_from_slice(payload);
        let mut body_crc = Hasher::new();
        body_crc.update(&bytes[HEADER_LEN..]);
        Ok(Frame { bytes, body_crc })
    }

    /// Sets the record's offset and its crc.
    pub(crate) fn seal(&mut self, offset: u64) {
        self.bytes[8..16].copy_from_slice(&offset.to_le_bytes());
        let mut crc = Hasher::new();
        crc.update(&self.bytes[0..4]);
        crc.update(&self.bytes[8..HEADER_LEN]);
        crc.combine(&self.body_crc);
        self.bytes[4..8].copy_from_slice(&crc.finalize().to_le_bytes());
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    pub(crate) fn len(&self) -> u64 {
        self.bytes.len() as u64
    }
}

/// A record as stored, before it is given its partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Stored {
    pub(crate) offset: u64,
    pub(crate) key: Vec<u8>,
    pub(crate) payload: Vec<u8>,
}

/// What is wrong with the bytes at some position of a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Damage {
    /// The record's header or body runs past the end of the file (a torn
    /// write, or a corrupt length).
    Truncated,
    /// The length fields cannot describe a record.
    BadLength,
    /// The checksum does not match the bytes.
    CrcMismatch,
    /// A record whose offset is below the one expected at this point: a
    /// stale or misplaced record.
    OffsetRegression {
        /// The offset the record claims.
        found: u64,
        /// The offset the reader expected at least.
        expected: u64,
    },
}

impl fmt::Display for Damage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Damage::Truncated => f.write_str("record runs past the end of the file"),
            Damage::BadLength => f.write_str("record length fields are impossible"),
            Damage::CrcMismatch => f.write_str("crc mismatch"),
            Damage::OffsetRegression { found, expected } => {
                write!(
                    f,
                    "record has offset {found} where {expected} or more was expected"
                )
            }
        }
    }
}

/// What [`SegmentReader::next`] found at its position.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Next {
    /// A valid record; the reader moved past it.
    Record(Stored),
    /// A valid record at or past `end`, which the caller may not see yet;
    /// the reader stays before it.
    NotYet,
    /// The clean end of the file.
    End,
    /// Damaged bytes at the reader's position; the reader stays there.
    Damaged(Damage),
}

/// Reads records sequentially from one segment file, through a buffer.
///
/// Bytes past the last fsync can change under the reader (a write in
/// progress), so the buffer is only trusted for records that check out: a
/// record that looks damaged in the buffer is read again from the file
/// before it is called damaged.
#[derive(Debug)]
pub(crate) struct SegmentReader {
    file: File,
    path: PathBuf,
    base: u64,
    /// File position of the next record.
    pos: u64,
    buf: Vec<u8>,
    /// File position of `buf[0]`.
    buf_start: u64,
}

impl SegmentReader {
    /// Opens the segment whose first record has offset `base`. `None` if the
    /// file does not exist (retention may just have deleted it).
    pub(crate) fn open(dir: &Path, base: u64) -> Result<Option<SegmentReader>, BusError> {
        let path = dir.join(file_name(base));
        match File::open(&path) {
            Ok(file) => Ok(Some(SegmentReader::new(file, path, base))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io("open", &path)(e)),
        }
    }

    /// Reads from an already open segment file.
    pub(crate) fn new(file: File, path: PathBuf, base: u64) -> SegmentReader {
        SegmentReader {
            file,
            path,
            base,
            pos: 0,
            buf: Vec::new(),
            buf_start: 0,
        }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The offset of the segment's first record (from its file name).
    pub(crate) fn base(&self) -> u64 {
        self.base
    }

    /// File position of the next record.
    pub(crate) fn position(&self) -> u64 {
        self.pos
    }

    /// Moves to a file position (one returned by [`SegmentReader::find_next`]).
    pub(crate) fn seek(&mut self, pos: u64) {
        self.pos = pos;
    }

    /// Reads the record at the reader's position. It must have an offset of
    /// at least `expected` (a larger one means records are missing before
    /// it, which the caller reports); a record at or past `end` is left
    /// unread.
    pub(crate) fn next(&mut self, expected: u64, end: u64) -> Result<Next, BusError> {
        let mut found = self.parse_at(self.pos)?;
        if let Err(_damage) = found {
            // Maybe the buffer caught a write in progress: look again at
            // what the file holds now.
            self.buf.clear();
            found = self.parse_at(self.pos)?;
        }
        match found {
            Err(damage) => Ok(Next::Damaged(damage)),
            Ok(None) => Ok(Next::End),
            Ok(Some((record, _))) if record.offset < expected => {
                Ok(Next::Damaged(Damage::OffsetRegression {
                    found: record.offset,
                    expected,
                }))
            }
            Ok(Some((record, _))) if record.offset >= end => Ok(Next::NotYet),
            Ok(Some((record, frame_len))) => {
                self.pos += frame_len;
                Ok(Next::Record(record))
            }
        }
    }

    /// Scans forward from `after + 1` for the next position holding a valid
    /// record with an offset in `min_offset..below`: where reading can
    /// resume after damage at `after`. Returns its position and offset.
    ///
    /// A random byte sequence passes for a record only if its length fits
    /// the file, its offset falls in the window and a 32-bit crc matches, so
    /// a false match is vanishingly unlikely.
    pub(crate) fn find_next(
        &mut self,
        after: u64,
        min_offset: u64,
        below: u64,
    ) -> Result<Option<(u64, u64)>, BusError> {
        let mut pos = after + 1;
        loop {
            let header = self.window(pos, HEADER_LEN)?;
            if header.len() < HEADER_LEN {
                return Ok(None);
            }
            let h = Header::parse(header);
            let plausible = h.len >= LEN_FIXED
                && h.key_len <= h.len - LEN_FIXED
                && (min_offset..below).contains(&h.offset);
            if plausible && let Ok(Some((record, _))) = self.parse_at(pos)? {
                return Ok(Some((pos, record.offset)));
            }
            pos += 1;
        }
    }

    /// Parses the record at `pos`: `Ok(None)` at the clean end of the file,
    /// `Err(damage)` if the bytes there are not a valid record. The outer
    /// `Result` is for I/O errors.
    #[allow(
        clippy::type_complexity,
        reason = "three outcomes, each plain; a type alias would hide them"
    )]
    fn parse_at(&mut self, pos: u64) -> Result<Result<Option<(Stored, u64)>, Damage>, BusError> {
        let header = self.window(pos, HEADER_LEN)?;
        if header.is_empty() {
            return Ok(Ok(None));
        }
        if header.len() < HEADER_LEN {
            return Ok(Err(Damage::Truncated));
        }
        let h = Header::parse(header);
        if h.len < LEN_FIXED || h.key_len > h.len - LEN_FIXED {
            return Ok(Err(Damage::BadLength));
        }
        let frame_len = 8 + u64::from(h.len);
        // Check a large length against the file size before allocating a
        // buffer for it: a corrupt length could ask for 4 GiB.
        if frame_len > READ_CHUNK as u64 {
            let file_len = self.file.metadata().map_err(io("stat", &self.path))?.len();
            if pos + frame_len > file_len {
                return Ok(Err(Damage::Truncated));
            }
        }
        // `frame_len` fits in usize: a u32 plus 8, on a 64-bit target (and a
        // 32-bit one could not have buffered it either way).
        let frame = self.window(pos, frame_len as usize)?;
        if (frame.len() as u64) < frame_len {
            return Ok(Err(Damage::Truncated));
        }
        let mut crc = Hasher::new();
        crc.update(&frame[0..4]);
        crc.update(&frame[8..]);
        if crc.finalize() != h.crc {
            return Ok(Err(Damage::CrcMismatch));
        }
        let key_end = HEADER_LEN + h.key_len as usize;
        let record = Stored {
            offset: h.offset,
            key: frame[HEADER_LEN..key_end].to_vec(),
            payload: frame[key_end..].to_vec(),
        };
        Ok(Ok(Some((record, frame_len))))
    }

    /// Up to `n` bytes of the file from `pos` (fewer at the end of the
    /// file), from the buffer when it holds them, else read afresh.
    fn window(&mut self, pos: u64, n: usize) -> Result<&[u8], BusError> {
        let buf_end = self.buf_start + self.buf.len() as u64;
        if pos < self.buf_start || pos + n as u64 > buf_end {
            self.fill(pos, n.max(READ_CHUNK))?;
        }
        // Both fit in usize: they are at most the buffer's length.
        let from = (pos - self.buf_start) as usize;
        let to = (from + n).min(self.buf.len());
        Ok(&self.buf[from..to])
    }

    /// Replaces the buffer with up to `want` bytes of the file from `pos`.
    fn fill(&mut self, pos: u64, want: usize) -> Result<(), BusError> {
        self.buf.clear();
        self.buf.resize(want, 0);
        self.buf_start = pos;
        let mut filled = 0;
        while filled < want {
            match self
                .file
                .read_at(&mut self.buf[filled..], pos + filled as u64)
            {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.buf.clear();
                    return Err(io("read", &self.path)(e));
                }
            }
        }
        self.buf.truncate(filled);
        Ok(())
    }
}

/// The fixed fields at the start of a record.
struct Header {
    len: u32,
    crc: u32,
    offset: u64,
    key_len: u32,
}

impl Header {
    /// Reads the header from the first [`HEADER_LEN`] bytes of `b`.
    fn parse(b: &[u8]) -> Header {
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let mut offset = [0; 8];
        offset.copy_from_slice(&b[8..16]);
        Header {
            len: u32_at(0),
            crc: u32_at(4),
            offset: u64::from_le_bytes(offset),
            key_len: u32_at(16),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::io::Write;

    fn frame(offset: u64, key: &[u8], payload: &[u8]) -> Vec<u8> {
        let mut f = Frame::new(key, payload).unwrap();
        f.seal(offset);
        f.bytes().to_vec()
    }

    /// A reader over a temporary segment holding `bytes`.
    fn reader(bytes: &[u8]) -> (tempfile::TempDir, SegmentReader) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(file_name(0));
        File::create(&path).unwrap().write_all(bytes).unwrap();
        let r = SegmentReader::new(File::open(&path).unwrap(), path, 0);
        (dir, r)
    }

    fn read_all(r: &mut SegmentReader) -> (Vec<Stored>, Next) {
        let mut out = Vec::new();
        loop {
            match r.next(0, u64::MAX).unwrap() {
                Next::Record(s) => out.push(s),
                other => return (out, other),
            }
        }
    }

    #[test]
    fn file_names_round_trip() {
        assert_eq!(file_name(42), "00000000000000000042.log");
        assert_eq!(parse_file_name(&file_name(u64::MAX)), Some(u64::MAX));
        for bad in [
            "42.log",
            "0000000000000000004x.log",
            "00000000000000000042.tmp",
            "",
        ] {
            assert_eq!(parse_file_name(bad), None, "{bad}");
        }
    }

    #[test]
    fn records_round_trip() {
        let mut bytes = frame(0, b"k", b"hello");
        bytes.extend(frame(1, b"", b""));
        bytes.extend(frame(2, b"key", &vec![9; 300_000])); // larger than a read chunk
        let (_dir, mut r) = reader(&bytes);
        let (records, end) = read_all(&mut r);
        assert_eq!(end, Next::End);
        assert_eq!(records.len(), 3);
        assert_eq!(
            (
                records[0].offset,
                &records[0].key[..],
                &records[0].payload[..]
            ),
            (0, &b"k"[..], &b"hello"[..])
        );
        assert_eq!(records[2].payload.len(), 300_000);
        assert_eq!(r.position(), bytes.len() as u64);
    }

    /// Guards the format against silent corruption: flipping any single
    /// bit of a record is detected, never read as a different record.
    #[test]
    fn every_bit_flip_is_detected() {
        let good = frame(7, b"key", b"payload");
        for i in 0..good.len() * 8 {
            let mut bad = good.clone();
            bad[i / 8] ^= 1 << (i % 8);
            let (_dir, mut r) = reader(&bad);
            match r.next(7, u64::MAX).unwrap() {
                Next::Damaged(_) => {}
                other => panic!("bit {i} flipped: {other:?}"),
            }
        }
    }

    /// A record cut short at any length reads as truncated, not as a
    /// record and not as a clean end.
    #[test]
    fn every_cut_is_detected() {
        let good = frame(0, b"key", b"payload");
        for cut in 1..good.len() {
            let (_dir, mut r) = reader(&good[..cut]);
            assert_eq!(
                r.next(0, u64::MAX).unwrap(),
                Next::Damaged(Damage::Truncated),
                "cut at {cut}"
            );
        }
    }

    /// A corrupt length claiming gigabytes is refused without allocating.
    #[test]
    fn huge_length_is_truncation_not_allocation() {
        let mut bad = frame(0, b"", b"x");
        bad[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
        let (_dir, mut r) = reader(&bad);
        assert_eq!(
            r.next(0, u64::MAX).unwrap(),
            Next::Damaged(Damage::Truncated)
        );
    }

    #[test]
    fn records_past_end_or_below_expected_are_not_returned() {
        let (_dir, mut r) = reader(&frame(5, b"", b"x"));
        assert_eq!(r.next(0, 5).unwrap(), Next::NotYet);
        assert_eq!(r.position(), 0);
        assert_eq!(
            r.next(6, u64::MAX).unwrap(),
            Next::Damaged(Damage::OffsetRegression {
                found: 5,
                expected: 6
            })
        );
        assert!(matches!(r.next(5, 6).unwrap(), Next::Record(_)));
    }

    /// After damage the reader finds the next valid record past it, even
    /// when the damage leaves plausible-looking bytes behind.
    #[test]
    fn find_next_skips_garbage() {
        let mut bytes = frame(0, b"", b"first");
        let damaged_at = bytes.len() as u64;
        let mut second = frame(1, b"", b"second");
        second[12] ^= 0xff; // corrupt its offset field
        bytes.extend(second);
        bytes.extend([0xab; 37]);
        let third_at = bytes.len() as u64;
        bytes.extend(frame(2, b"", b"third"));
        let (_dir, mut r) = reader(&bytes);
        assert!(matches!(r.next(0, u64::MAX).unwrap(), Next::Record(_)));
        assert!(matches!(
            r.next(1, u64::MAX).unwrap(),
            Next::Damaged(Damage::CrcMismatch)
        ));
        assert_eq!(
            r.find_next(damaged_at, 1, u64::MAX).unwrap(),
            Some((third_at, 2))
        );
        assert_eq!(
            r.find_next(damaged_at, 1, 2).unwrap(),
            None,
            "offset 2 is outside the window"
        );
        r.seek(third_at);
        let (records, end) = read_all(&mut r);
        assert_eq!(
            (records.len(), records[0].payload.as_slice(), end),
            (1, &b"third"[..], Next::End)
        );
    }

    proptest! {
        /// Arbitrary bytes never panic the reader, and whatever it accepts
        /// as records are exactly the records that were written.
        #[test]
        fn garbage_never_panics(prefix in proptest::collection::vec(any::<u8>(), 0..200),
                                garbage in proptest::collection::vec(any::<u8>(), 0..200)) {
            let mut bytes = frame(0, b"k", &prefix);
            bytes.extend(&garbage);
            let (_dir, mut r) = reader(&bytes);
            let (records, _) = read_all(&mut r);
            prop_assert!(!records.is_empty());
            prop_assert_eq!(&records[0].payload, &prefix);
            let mut pos = r.position();
            while let Some((at, _)) = r.find_next(pos, 0, u64::MAX).unwrap() {
                pos = at;
            }
        }
    }
}
