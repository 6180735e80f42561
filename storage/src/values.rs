//! Value encoding of stored rows: a small hand-written format, shared by the
//! embedded store (fjall values) and the PostgreSQL store (`bytea` columns
//! of the frames, stacks and labelsets tables), so both keep the same bytes
//! and a row can move from one to the other unchanged.
//!
//! Hand-written rather than rkyv because stored bytes outlive the code that
//! wrote them: a field added to a model type changes its rkyv layout and
//! would make old rows unreadable, while this format changes only when its
//! version byte does. It is also smaller (varints, no alignment padding),
//! and decoding checks every length against the bytes at hand, so damaged
//! input gives a [`DecodeError`], never a panic or a huge allocation.
//!
//! ```text
//! every value   version:u8 (= 1), then
//! sample        count:varint  period_ns:varint
//! stack         n:varint  n × frame_id:16 BE
//! frame         0  kind:u8  file_id:16 BE  addr:varint                     (Frame::Address)
//!               1  kind:u8  function:str  module:opt  file:opt  line:varint (Frame::Named)
//!               2  kind:u8  file_id:16 BE  addr:varint  n:varint            (Frame::Address
//!                  n × (function:str  file:opt  line:varint)                 with its symbols,
//!                                                                            outermost first)
//! labelset      n:varint  n × (name:str  value:str)
//! executable    name:str  build_id:opt      (the file id is the key)
//! metric point  value:8 (the f64's bits, BE)  (name, time, labels are the key)
//!
//! varint = unsigned LEB128, at most 10 bytes
//! str    = len:varint  UTF-8 bytes
//! opt    = 0 | 1 str
//! ```

use kiln_model::{Executable, FileId, Frame, FrameId, FrameKind, LabelSet, Symbol};

use crate::error::DecodeError;
use crate::profile::{StoredFrame, StoredSample};

/// The version byte every value starts with.
const VERSION: u8 = 1;

const FRAME_ADDRESS: u8 = 0;
const FRAME_NAMED: u8 = 1;
/// An address frame with its symbols: a tag of its own, so rows written
/// before symbols were stored read as they always did.
const FRAME_SYMBOLIZED: u8 = 2;

/// A sample row's value: count and period. The rest of the row is its key.
pub(crate) fn encode_sample(sample: &StoredSample) -> Vec<u8> {
    let mut w = Writer::new(21);
    w.varint(sample.count).varint(sample.period_ns);
    w.0
}

/// Count and period of a sample row.
pub(crate) fn decode_sample(bytes: &[u8]) -> Result<(u64, u64), DecodeError> {
    let mut r = Reader::new(bytes)?;
    let count = r.varint("count")?;
    let period_ns = r.varint("period_ns")?;
    r.finish()?;
    Ok((count, period_ns))
}

/// A metric point's value: the f64's bits, so every value (the sign of
/// zero too) comes back exactly.
pub(crate) fn encode_metric_value(value: f64) -> Vec<u8> {
    let mut w = Writer::new(9);
    w.bytes(&value.to_bits().to_be_bytes());
    w.0
}

pub(crate) fn decode_metric_value(bytes: &[u8]) -> Result<f64, DecodeError> {
    let mut r = Reader::new(bytes)?;
    let value = f64::from_bits(u64::from_be_bytes(r.array("metric value")?));
    r.finish()?;
    Ok(value)
}

pub(crate) fn encode_stack(frames: &[FrameId]) -> Vec<u8> {
    let mut w = Writer::new(11 + 16 * frames.len());
    w.varint(frames.len() as u64);
    for id in frames {
        w.bytes(&id.to_be_bytes());
    }
    w.0
}

pub(crate) fn decode_stack(bytes: &[u8]) -> Result<Vec<FrameId>, DecodeError> {
    let mut r = Reader::new(bytes)?;
    let n = r.count("stack length", 16)?;
    let mut frames = Vec::with_capacity(n);
    for _ in 0..n {
        frames.push(FrameId::from_be_bytes(r.array("frame id")?));
    }
    r.finish()?;
    Ok(frames)
}

/// A frames-table value: the frame, and the symbols of an address frame
/// (a named frame's are not kept: it names itself).
pub(crate) fn encode_frame(frame: &Frame, symbols: &[Symbol]) -> Vec<u8> {
    let mut w = Writer::new(32);
    match frame {
        Frame::Address {
            kind,
            file_id,
            addr,
        } => {
            let tag = match symbols {
                [] => FRAME_ADDRESS,
                _ => FRAME_SYMBOLIZED,
            };
            w.u8(tag)
                .u8(*kind as u8)
                .bytes(&file_id.to_be_bytes())
                .varint(*addr);
            if !symbols.is_empty() {
                w.varint(symbols.len() as u64);
                for s in symbols {
                    w.str(&s.function)
                        .opt_str(s.file.as_deref())
                        .varint(u64::from(s.line));
                }
            }
        }
        Frame::Named {
            kind,
            function,
            module,
            file,
            line,
        } => {
            w.u8(FRAME_NAMED)
                .u8(*kind as u8)
                .str(function)
                .opt_str(module.as_deref())
                .opt_str(file.as_deref())
                .varint(u64::from(*line));
        }
    }
    w.0
}

/// A frame and its symbols (empty when it was stored without).
pub(crate) fn decode_frame(bytes: &[u8]) -> Result<(Frame, Vec<Symbol>), DecodeError> {
    let mut r = Reader::new(bytes)?;
    let tag = r.u8("frame tag")?;
    let kind_number = r.u8("frame kind")?;
    let kind = FrameKind::from_u8(kind_number).ok_or(DecodeError::OutOfRange {
        field: "frame kind",
        value: kind_number.into(),
    })?;
    let mut symbols = Vec::new();
    let frame = match tag {
        FRAME_ADDRESS | FRAME_SYMBOLIZED => {
            let frame = Frame::Address {
                kind,
                file_id: FileId::from_be_bytes(r.array("file id")?),
                addr: r.varint("address")?,
            };
            if tag == FRAME_SYMBOLIZED {
                // A symbol takes at least 3 bytes (empty name, no file, line).
                let n = r.count("symbol count", 3)?;
                symbols.reserve(n);
                for _ in 0..n {
                    symbols.push(Symbol {
                        function: r.str("symbol function")?,
                        file: r.opt_str("symbol file")?,
                        line: r.line("symbol line")?,
                    });
                }
            }
            frame
        }
        FRAME_NAMED => Frame::Named {
            kind,
            function: r.str("function")?,
            module: r.opt_str("module")?,
            file: r.opt_str("file")?,
            line: r.line("line")?,
        },
        other => {
            return Err(DecodeError::OutOfRange {
                field: "frame tag",
                value: other.into(),
            });
        }
    };
    r.finish()?;
    Ok((frame, symbols))
}

/// A frames-table value of a row.
pub(crate) fn encode_stored_frame(row: &StoredFrame) -> Vec<u8> {
    encode_frame(&row.frame, &row.symbols)
}

/// The row of frame `id` from its value.
pub(crate) fn decode_stored_frame(id: FrameId, bytes: &[u8]) -> Result<StoredFrame, DecodeError> {
    let (frame, symbols) = decode_frame(bytes)?;
    Ok(StoredFrame { id, frame, symbols })
}

pub(crate) fn encode_label_set(labels: &LabelSet) -> Vec<u8> {
    let mut w = Writer::new(64);
    w.varint(labels.len() as u64);
    for (name, value) in labels.iter() {
        w.str(name).str(value);
    }
    w.0
}

pub(crate) fn decode_label_set(bytes: &[u8]) -> Result<LabelSet, DecodeError> {
    let mut r = Reader::new(bytes)?;
    // Each pair takes at least two bytes (two empty strings).
    let n = r.count("label count", 2)?;
    let mut labels = LabelSet::new();
    for _ in 0..n {
        let name = r.str("label name")?;
        let value = r.str("label value")?;
        labels.insert(name, value);
    }
    r.finish()?;
    Ok(labels)
}

pub(crate) fn encode_executable(executable: &Executable) -> Vec<u8> {
    let mut w = Writer::new(64);
    w.str(&executable.name)
        .opt_str(executable.build_id.as_deref());
    w.0
}

/// An executable; `file_id` comes from its key.
pub(crate) fn decode_executable(file_id: FileId, bytes: &[u8]) -> Result<Executable, DecodeError> {
    let mut r = Reader::new(bytes)?;
    let name = r.str("executable name")?;
    let build_id = r.opt_str("build id")?;
    r.finish()?;
    Ok(Executable {
        file_id,
        name,
        build_id,
    })
}

/// Writes a value front to back (the segment encoding uses it too).
pub(crate) struct Writer(Vec<u8>);

impl Writer {
    pub(crate) fn new(capacity: usize) -> Self {
        let mut bytes = Vec::with_capacity(capacity);
        bytes.push(VERSION);
        Writer(bytes)
    }

    pub(crate) fn into_bytes(self) -> Vec<u8> {
        self.0
    }

    pub(crate) fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }

    pub(crate) fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.0.extend_from_slice(v);
        self
    }

    pub(crate) fn varint(&mut self, mut v: u64) -> &mut Self {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
        self
    }

    pub(crate) fn str(&mut self, s: &str) -> &mut Self {
        self.varint(s.len() as u64).bytes(s.as_bytes())
    }

    pub(crate) fn opt_str(&mut self, s: Option<&str>) -> &mut Self {
        match s {
            None => self.u8(0),
            Some(s) => self.u8(1).str(s),
        }
    }
}

/// Reads a value front to back; every read checks what is left first.
pub(crate) struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    /// Starts after the version byte, refusing unknown versions.
    pub(crate) fn new(bytes: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = Reader(bytes);
        match r.u8("version")? {
            VERSION => Ok(r),
            other => Err(DecodeError::UnknownVersion(other)),
        }
    }

    pub(crate) fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], DecodeError> {
        if n > self.0.len() {
            return Err(DecodeError::Truncated {
                field,
                needed: n - self.0.len(),
            });
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    pub(crate) fn u8(&mut self, field: &'static str) -> Result<u8, DecodeError> {
        Ok(self.take(1, field)?[0])
    }

    pub(crate) fn array<const N: usize>(
        &mut self,
        field: &'static str,
    ) -> Result<[u8; N], DecodeError> {
        let mut out = [0; N];
        out.copy_from_slice(self.take(N, field)?);
        Ok(out)
    }

    pub(crate) fn varint(&mut self, field: &'static str) -> Result<u64, DecodeError> {
        let mut value = 0u64;
        for i in 0..10 {
            let byte = self.u8(field)?;
            let bits = u64::from(byte & 0x7f);
            // The tenth byte holds only the top bit of a u64.
            if i == 9 && bits > 1 {
                return Err(DecodeError::BadVarint { field });
            }
            value |= bits << (7 * i);
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(DecodeError::BadVarint { field })
    }

    /// A count of items that take at least `min_item_len` bytes each,
    /// checked against the bytes left so that a damaged count cannot make
    /// the caller allocate more than the value's size.
    pub(crate) fn count(
        &mut self,
        field: &'static str,
        min_item_len: usize,
    ) -> Result<usize, DecodeError> {
        let value = self.varint(field)?;
        let n = usize::try_from(value).map_err(|_| DecodeError::OutOfRange { field, value })?;
        let needed = n
            .checked_mul(min_item_len)
            .ok_or(DecodeError::OutOfRange { field, value })?;
        if needed > self.0.len() {
            return Err(DecodeError::Truncated {
                field,
                needed: needed - self.0.len(),
            });
        }
        Ok(n)
    }

    /// A source line: a varint that fits a `u32`.
    pub(crate) fn line(&mut self, field: &'static str) -> Result<u32, DecodeError> {
        let line = self.varint(field)?;
        u32::try_from(line).map_err(|_| DecodeError::OutOfRange { field, value: line })
    }

    pub(crate) fn str(&mut self, field: &'static str) -> Result<String, DecodeError> {
        let len = self.varint(field)?;
        let len =
            usize::try_from(len).map_err(|_| DecodeError::OutOfRange { field, value: len })?;
        let bytes = self.take(len, field)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| DecodeError::NotUtf8 { field })
    }

    pub(crate) fn opt_str(&mut self, field: &'static str) -> Result<Option<String>, DecodeError> {
        match self.u8(field)? {
            0 => Ok(None),
            1 => self.str(field).map(Some),
            other => Err(DecodeError::OutOfRange {
                field,
                value: other.into(),
            }),
        }
    }

    pub(crate) fn finish(self) -> Result<(), DecodeError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::TrailingBytes {
                extra: self.0.len(),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn symbol_strategy() -> impl Strategy<Value = Symbol> {
        (".*", proptest::option::of(".*"), any::<u32>()).prop_map(|(function, file, line)| Symbol {
            function,
            file,
            line,
        })
    }

    /// A frame, with symbols for some address frames (named frames keep
    /// none).
    fn frame_strategy() -> impl Strategy<Value = (Frame, Vec<Symbol>)> {
        let kind = (0..FrameKind::ALL.len()).prop_map(|i| FrameKind::ALL[i]);
        prop_oneof![
            (
                kind.clone(),
                any::<u128>(),
                any::<u64>(),
                proptest::collection::vec(symbol_strategy(), 0..4)
            )
                .prop_map(|(kind, f, addr, symbols)| {
                    let frame = Frame::Address {
                        kind,
                        file_id: FileId(f),
                        addr,
                    };
                    (frame, symbols)
                }),
            (
                kind,
                ".*",
                proptest::option::of(".*"),
                proptest::option::of(".*"),
                any::<u32>()
            )
                .prop_map(|(kind, function, module, file, line)| {
                    let frame = Frame::Named {
                        kind,
                        function,
                        module,
                        file,
                        line,
                    };
                    (frame, Vec::new())
                }),
        ]
    }

    /// Every value kind, encoded, with the index of its decoder in
    /// [`decode_all`], for the corruption tests.
    fn encodings() -> Vec<(usize, Vec<u8>)> {
        vec![
            (
                0,
                encode_sample(&StoredSample {
                    timestamp_ns: 0,
                    stack: Default::default(),
                    labels: Default::default(),
                    count: u64::MAX,
                    period_ns: 300,
                }),
            ),
            (1, encode_stack(&[FrameId(1), FrameId(u128::MAX)])),
            (
                2,
                encode_frame(
                    &Frame::Address {
                        kind: FrameKind::Native,
                        file_id: FileId(7),
                        addr: 0x40_1000,
                    },
                    &[],
                ),
            ),
            (
                2,
                encode_frame(
                    &Frame::Address {
                        kind: FrameKind::Native,
                        file_id: FileId(7),
                        addr: 0x40_1000,
                    },
                    &[
                        Symbol {
                            function: "work".into(),
                            file: Some("/src/work.c".into()),
                            line: 12,
                        },
                        Symbol {
                            function: "mix".into(),
                            file: None,
                            line: 0,
                        },
                    ],
                ),
            ),
            (
                2,
                encode_frame(
                    &Frame::Named {
                        kind: FrameKind::Python,
                        function: "handle".into(),
                        module: Some("app".into()),
                        file: None,
                        line: 42,
                    },
                    &[],
                ),
            ),
            (
                3,
                encode_label_set(&LabelSet::new().with("host", "a").with("pid", "1")),
            ),
            (
                4,
                encode_executable(&Executable {
                    file_id: FileId(1),
                    name: "libc.so.6".into(),
                    build_id: Some("ab".into()),
                }),
            ),
            (5, encode_metric_value(-1.5e-300)),
        ]
    }

    /// Runs every decoder on `bytes`; none may panic.
    fn decode_all(bytes: &[u8]) -> [bool; 6] {
        [
            decode_sample(bytes).is_ok(),
            decode_stack(bytes).is_ok(),
            decode_frame(bytes).is_ok(),
            decode_label_set(bytes).is_ok(),
            decode_executable(FileId(1), bytes).is_ok(),
            decode_metric_value(bytes).is_ok(),
        ]
    }

    proptest! {
        #[test]
        fn frames_round_trip((frame, symbols) in frame_strategy()) {
            let encoded = encode_frame(&frame, &symbols);
            prop_assert_eq!(decode_frame(&encoded).unwrap(), (frame, symbols));
        }

        #[test]
        fn stacks_round_trip(ids in proptest::collection::vec(any::<u128>(), 0..300)) {
            let ids: Vec<FrameId> = ids.into_iter().map(FrameId).collect();
            prop_assert_eq!(decode_stack(&encode_stack(&ids)).unwrap(), ids);
        }

        #[test]
        fn label_sets_round_trip(pairs in proptest::collection::vec((".*", ".*"), 0..20)) {
            let labels: LabelSet = pairs.into_iter().collect();
            prop_assert_eq!(decode_label_set(&encode_label_set(&labels)).unwrap(), labels);
        }

        #[test]
        fn executables_round_trip(name in ".*", build_id in proptest::option::of("[0-9a-f]{0,40}")) {
            let exe = Executable { file_id: FileId(9), name, build_id };
            prop_assert_eq!(decode_executable(FileId(9), &encode_executable(&exe)).unwrap(), exe);
        }

        #[test]
        fn samples_round_trip(count: u64, period_ns: u64) {
            let sample = StoredSample {
                timestamp_ns: 0,
                stack: Default::default(),
                labels: Default::default(),
                count,
                period_ns,
            };
            prop_assert_eq!(decode_sample(&encode_sample(&sample)).unwrap(), (count, period_ns));
        }

        /// Every f64, the sign of zero and NaN payloads included, comes
        /// back bit for bit.
        #[test]
        fn metric_values_round_trip(bits: u64) {
            let value = f64::from_bits(bits);
            let back = decode_metric_value(&encode_metric_value(value)).unwrap();
            prop_assert_eq!(back.to_bits(), bits);
        }

        /// Guards "damaged data gives an error, never a panic".
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            decode_all(&bytes);
            let mut versioned = vec![VERSION];
            versioned.extend_from_slice(&bytes);
            decode_all(&versioned);
        }
    }

    /// Every proper prefix of a valid value is an error, and so is a value
    /// with a byte appended: a torn or padded value is never misread.
    #[test]
    fn truncated_and_padded_values_are_refused() {
        for (i, encoded) in encodings() {
            for end in 0..encoded.len() {
                assert!(!decode_all(&encoded[..end])[i], "{encoded:?} cut at {end}");
            }
            assert!(decode_all(&encoded)[i], "{encoded:?} whole");
            let padded = [encoded.as_slice(), &[0]].concat();
            assert!(!decode_all(&padded)[i], "{encoded:?} padded");
        }
    }

    /// Guards the compatibility of rows written before symbols were
    /// stored: an address frame without symbols keeps its old bytes.
    #[test]
    fn unsymbolized_address_frames_keep_their_old_encoding() {
        let frame = Frame::Address {
            kind: FrameKind::Native,
            file_id: FileId(0x0102),
            addr: 0x81,
        };
        let mut old = vec![VERSION, FRAME_ADDRESS, 0];
        old.extend_from_slice(&0x0102u128.to_be_bytes());
        old.extend_from_slice(&[0x81, 0x01]);
        assert_eq!(encode_frame(&frame, &[]), old);
        assert_eq!(decode_frame(&old).unwrap(), (frame, Vec::new()));
    }

    #[test]
    fn damage_is_named() {
        assert_eq!(decode_stack(&[2, 0]), Err(DecodeError::UnknownVersion(2)));
        assert_eq!(
            decode_frame(&[VERSION, FRAME_ADDRESS, 200]),
            Err(DecodeError::OutOfRange {
                field: "frame kind",
                value: 200
            })
        );
        assert_eq!(
            decode_frame(&[VERSION, 7, 0]),
            Err(DecodeError::OutOfRange {
                field: "frame tag",
                value: 7
            })
        );
        // A length of 2^63 must be refused before anything is allocated.
        let mut huge = vec![VERSION];
        huge.extend_from_slice(&[0xff; 9]);
        huge.push(0x00);
        assert!(decode_stack(&huge).is_err());
        assert!(decode_label_set(&huge).is_err());
        assert!(decode_executable(FileId(0), &huge).is_err());
        // Eleven continuation bytes are not a varint.
        let mut long = vec![VERSION];
        long.extend_from_slice(&[0x80; 11]);
        assert_eq!(
            decode_sample(&long),
            Err(DecodeError::BadVarint { field: "count" })
        );
        // Invalid UTF-8 in a name.
        assert_eq!(
            decode_executable(FileId(0), &[VERSION, 1, 0xff, 0]),
            Err(DecodeError::NotUtf8 {
                field: "executable name"
            })
        );
    }

    #[test]
    fn varints_take_the_expected_room() {
        let sample = |count, period_ns| StoredSample {
            timestamp_ns: 0,
            stack: Default::default(),
            labels: Default::default(),
            count,
            period_ns,
        };
        // One sample at 99 Hz (10_101_010 ns) fits in six bytes.
        assert_eq!(encode_sample(&sample(1, 10_101_010)).len(), 6);
        assert_eq!(encode_sample(&sample(u64::MAX, u64::MAX)).len(), 21);
    }
}
