//! OTLP/JSON → the protobuf wire bytes of the same request, so a JSON
//! request takes the protobuf path after it (limits counted on the wire,
//! prost's decode, conversion): one path to bound and to fuzz.
//!
//! OTLP/JSON is proto3's JSON mapping with OTLP's exceptions: keys
//! lowerCamelCase (the proto names are accepted too), 64-bit integers as
//! decimal strings (numbers accepted too), ids hex rather than base64,
//! enums as numbers, zero values omitted, unknown keys ignored. The
//! transcoder streams through serde_json (no `serde_json::Value` of the
//! whole body) following [`schema`](super::schema), writing each field's
//! wire encoding as it reads it: a message's length is inserted in front
//! of it once it ends. Its output is bounded ([`MAX_OUTPUT`]): packed
//! zeros take 2 JSON bytes each and a fixed64 8 wire bytes, so the output
//! can be a few times the body.

use std::fmt;

use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use base64::{Engine, alphabet};
use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::error::OtlpError;
use super::schema::{Field, Kind, Message, REQUEST};

/// Most protobuf bytes one JSON request transcodes to: the route's body
/// limit, so a JSON request decodes to no more than a protobuf one can.
pub const MAX_OUTPUT: usize = 64 << 20;

/// Deepest nesting of messages: a request's own structure is 6 deep, and
/// attribute values past 8 levels are refused after transcoding anyway.
/// Bounds the copying of nested lengths (each level moves its bytes once).
const MAX_DEPTH: usize = 32;

/// The protobuf encoding of the `ExportProfilesServiceRequest` in OTLP/JSON
/// `json`, at most `max_out` bytes.
pub(crate) fn transcode(json: &[u8], max_out: usize) -> Result<Vec<u8>, OtlpError> {
    let mut out = Out {
        buf: Vec::new(),
        path: Vec::new(),
        max: max_out,
        depth: 0,
        too_large: false,
    };
    let mut de = serde_json::Deserializer::from_slice(json);
    let result = MessageSeed {
        out: &mut out,
        message: &REQUEST,
    }
    .deserialize(&mut de)
    .and_then(|()| de.end());
    match result {
        Ok(()) => Ok(out.buf),
        Err(_) if out.too_large => Err(OtlpError::JsonTooLarge { limit: max_out }),
        Err(e) => {
            // serde_json appends the position to its message; it is kept
            // apart, after the path.
            let message = e.to_string();
            let suffix = format!(" at line {} column {}", e.line(), e.column());
            let message = message.strip_suffix(&suffix).unwrap_or(&message).to_owned();
            Err(OtlpError::Json {
                path: out.path_text(),
                message,
                line: e.line(),
                column: e.column(),
            })
        }
    }
}

/// One step of the path to where the transcoder is.
enum Step {
    Field(&'static str),
    Index(usize),
}

/// The wire bytes written so far, and where in the JSON they come from.
struct Out {
    buf: Vec<u8>,
    /// Not popped on an error: it then names where the error is.
    path: Vec<Step>,
    max: usize,
    depth: usize,
    too_large: bool,
}

impl Out {
    fn path_text(&self) -> String {
        let mut text = String::new();
        for step in &self.path {
            match step {
                Step::Field(name) if text.is_empty() => text.push_str(name),
                Step::Field(name) => {
                    text.push('.');
                    text.push_str(name);
                }
                Step::Index(i) => text.push_str(&format!("[{i}]")),
            }
        }
        text
    }

    /// Room for `n` more bytes, or the too-large error.
    fn room<E: de::Error>(&mut self, n: usize) -> Result<(), E> {
        if self.buf.len().saturating_add(n) > self.max {
            self.too_large = true;
            return Err(E::custom("the request is too large once transcoded"));
        }
        Ok(())
    }

    fn varint<E: de::Error>(&mut self, mut v: u64) -> Result<(), E> {
        self.room(10)?;
        while v >= 0x80 {
            self.buf.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.buf.push(v as u8);
        Ok(())
    }

    fn tag<E: de::Error>(&mut self, number: u32, wire_type: u8) -> Result<(), E> {
        self.varint(u64::from(number) << 3 | u64::from(wire_type))
    }

    fn bytes<E: de::Error>(&mut self, bytes: &[u8]) -> Result<(), E> {
        self.room(bytes.len().saturating_add(10))?;
        self.varint(bytes.len() as u64)?;
        self.buf.extend_from_slice(bytes);
        Ok(())
    }

    /// Puts the length of what was written since `start` in front of it.
    fn length_at<E: de::Error>(&mut self, start: usize) -> Result<(), E> {
        let len = self.buf.len() - start;
        self.room(10)?;
        let mut prefix = Vec::with_capacity(10);
        let mut v = len as u64;
        while v >= 0x80 {
            prefix.push((v as u8) | 0x80);
            v >>= 7;
        }
        prefix.push(v as u8);
        self.buf.splice(start..start, prefix);
        Ok(())
    }
}

const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LEN: u8 = 2;

fn wire_type(kind: Kind) -> u8 {
    match kind {
        Kind::Int32 | Kind::Int64 | Kind::Uint32 | Kind::Uint64 | Kind::Bool => VARINT,
        Kind::Fixed64 | Kind::Double => FIXED64,
        Kind::Message(_) | Kind::String | Kind::Bytes | Kind::HexBytes | Kind::Skip => LEN,
    }
}

/// Repeated scalars are written packed, as proto3 encoders do.
fn packed(kind: Kind) -> bool {
    wire_type(kind) != LEN
}

/// A message's fields (a JSON object), without tag or length.
struct MessageSeed<'a> {
    out: &'a mut Out,
    message: &'static Message,
}

impl<'de> DeserializeSeed<'de> for MessageSeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        if self.out.depth >= MAX_DEPTH {
            return Err(de::Error::custom(format!(
                "messages nest more than {MAX_DEPTH} deep"
            )));
        }
        self.out.depth += 1;
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for MessageSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "an object ({})", self.message.name)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(field) = map.next_key_seed(KeySeed(self.message))? {
            let Some(field) = field else {
                map.next_value::<IgnoredAny>()?;
                continue;
            };
            self.out.path.push(Step::Field(field.json));
            map.next_value_seed(FieldSeed {
                out: &mut *self.out,
                field,
            })?;
            self.out.path.pop();
        }
        self.out.depth -= 1;
        Ok(())
    }
}

/// A key of a message's object: its field, or `None` for a key Kiln does
/// not know (ignored, as OTLP/JSON asks of receivers).
struct KeySeed(&'static Message);

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = Option<&'static Field>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl Visitor<'_> for KeySeed {
    type Value = Option<&'static Field>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a field name")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<Self::Value, E> {
        Ok(self.0.field(key))
    }
}

/// One field's value: `null` is absent, a repeated field is an array.
struct FieldSeed<'a> {
    out: &'a mut Out,
    field: &'static Field,
}

impl<'de> DeserializeSeed<'de> for FieldSeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        if matches!(self.field.kind, Kind::Skip) {
            return IgnoredAny::deserialize(d).map(drop);
        }
        d.deserialize_option(self)
    }
}

impl<'de> Visitor<'de> for FieldSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a value or null")
    }

    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        let Field {
            number,
            kind,
            repeated,
            ..
        } = *self.field;
        let out = self.out;
        if !repeated {
            let at = out.buf.len();
            out.tag(number, wire_type(kind))?;
            let written = ValueSeed { out, kind }.deserialize(d)?;
            if !written {
                out.buf.truncate(at);
            }
            return Ok(());
        }
        d.deserialize_seq(RepeatedSeed { out, number, kind })
    }
}

/// A repeated field's array: scalars packed under one tag, anything else
/// a tag per element.
struct RepeatedSeed<'a> {
    out: &'a mut Out,
    number: u32,
    kind: Kind,
}

impl<'de> Visitor<'de> for RepeatedSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let RepeatedSeed { out, number, kind } = self;
        let packed = packed(kind);
        let at = out.buf.len();
        if packed {
            out.tag(number, LEN)?;
        }
        let start = out.buf.len();
        let mut i = 0;
        loop {
            out.path.push(Step::Index(i));
            let element_at = out.buf.len();
            if !packed {
                out.tag(number, wire_type(kind))?;
            }
            match seq.next_element_seed(ValueSeed {
                out: &mut *out,
                kind,
            })? {
                None => {
                    out.buf.truncate(element_at);
                    out.path.pop();
                    break;
                }
                Some(false) => out.buf.truncate(element_at),
                Some(true) => {}
            }
            out.path.pop();
            i += 1;
        }
        if packed {
            if out.buf.len() == start {
                // Nothing to pack: an empty array is an absent field.
                out.buf.truncate(at);
            } else {
                out.length_at(start)?;
            }
        }
        Ok(())
    }
}

/// One value of `kind`, without its tag: `true` when written, `false`
/// when dropped (an id that is not hex).
struct ValueSeed<'a> {
    out: &'a mut Out,
    kind: Kind,
}

impl<'de> DeserializeSeed<'de> for ValueSeed<'_> {
    type Value = bool;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        let out = self.out;
        match self.kind {
            Kind::Message(message) => {
                let start = out.buf.len();
                MessageSeed { out, message }.deserialize(d)?;
                out.length_at(start)?;
            }
            Kind::String => {
                let s = d.deserialize_str(StrVisitor("a string"))?;
                out.bytes(s.as_bytes())?;
            }
            Kind::Bytes => {
                let s = d.deserialize_str(StrVisitor("base64 bytes (a string)"))?;
                let bytes = base64(&s).ok_or_else(|| de::Error::custom("not base64"))?;
                out.bytes(&bytes)?;
            }
            Kind::HexBytes => {
                let s = d.deserialize_str(StrVisitor("a hex id (a string)"))?;
                let Some(bytes) = hex(&s) else {
                    return Ok(false);
                };
                out.bytes(&bytes)?;
            }
            Kind::Skip => {
                IgnoredAny::deserialize(d)?;
                return Ok(false);
            }
            Kind::Bool => {
                let b = bool::deserialize(d)?;
                out.varint(u64::from(b))?;
            }
            Kind::Double => {
                let x = match d.deserialize_any(NumberVisitor(kind_name(self.kind)))? {
                    Number::Float(x) => x,
                    Number::Int(n) => n as f64,
                };
                out.room(8)?;
                out.buf.extend_from_slice(&x.to_le_bytes());
            }
            kind => {
                let v = d.deserialize_any(NumberVisitor(kind_name(kind)))?;
                let bits = integer(v, kind)
                    .ok_or_else(|| de::Error::custom(format!("{v} is not {}", kind_name(kind))))?;
                if matches!(kind, Kind::Fixed64) {
                    out.room(8)?;
                    out.buf.extend_from_slice(&bits.to_le_bytes());
                } else {
                    out.varint(bits)?;
                }
            }
        }
        Ok(true)
    }
}

fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Int32 => "a 32-bit integer",
        Kind::Uint32 => "a 32-bit unsigned integer",
        Kind::Int64 => "a 64-bit integer (a number or a decimal string)",
        Kind::Uint64 | Kind::Fixed64 => "a 64-bit unsigned integer (a number or a decimal string)",
        _ => "a number (or \"NaN\", \"Infinity\", \"-Infinity\")",
    }
}

/// The wire bits of the integer `v` as `kind` (int32 and int64 sign
/// extended), or `None` when it is out of range or has a fraction.
fn integer(v: Number, kind: Kind) -> Option<u64> {
    let (min, max): (i128, i128) = match kind {
        Kind::Int32 => (i32::MIN.into(), i32::MAX.into()),
        Kind::Uint32 => (0, u32::MAX.into()),
        Kind::Int64 => (i64::MIN.into(), i64::MAX.into()),
        _ => (0, u64::MAX.into()),
    };
    let n: i128 = match v {
        Number::Int(n) => n,
        // 2^64 and more is out of every range; `as` saturates.
        Number::Float(x) if x.fract() == 0.0 && x.abs() < 1.9e19 => x as i128,
        Number::Float(_) => return None,
    };
    (min..=max).contains(&n).then_some(n as i64 as u64)
}

/// A JSON number or a number in a string, as proto3 JSON allows both.
#[derive(Debug, Clone, Copy)]
enum Number {
    Int(i128),
    Float(f64),
}

impl fmt::Display for Number {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Number::Int(n) => write!(f, "{n}"),
            Number::Float(x) => write!(f, "{x}"),
        }
    }
}

struct NumberVisitor(&'static str);

impl Visitor<'_> for NumberVisitor {
    type Value = Number;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.0)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Number, E> {
        Ok(Number::Int(v.into()))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Number, E> {
        Ok(Number::Int(v.into()))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Number, E> {
        Ok(Number::Float(v))
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Number, E> {
        let number = match s {
            "NaN" => Some(Number::Float(f64::NAN)),
            "Infinity" => Some(Number::Float(f64::INFINITY)),
            "-Infinity" => Some(Number::Float(f64::NEG_INFINITY)),
            _ => s
                .parse::<i128>()
                .map(Number::Int)
                .ok()
                .or_else(|| s.parse::<f64>().ok().map(Number::Float)),
        };
        number.ok_or_else(|| E::invalid_value(de::Unexpected::Str(s), &self))
    }
}

/// A string, borrowed from the body where it has no escapes.
struct StrVisitor(&'static str);

impl<'de> Visitor<'de> for StrVisitor {
    type Value = std::borrow::Cow<'de, str>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.0)
    }

    fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Self::Value, E> {
        Ok(s.into())
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Self::Value, E> {
        Ok(s.to_owned().into())
    }

    fn visit_string<E: de::Error>(self, s: String) -> Result<Self::Value, E> {
        Ok(s.into())
    }
}

/// Hex digits to bytes (either case); `None` when it is not hex.
fn hex(s: &str) -> Option<Vec<u8>> {
    ::hex::decode(s).ok()
}

/// proto3 JSON parsers take base64 in either alphabet, padded or not.
const BASE64_LENIENT: GeneralPurposeConfig = GeneralPurposeConfig::new()
    .with_decode_padding_mode(DecodePaddingMode::Indifferent)
    .with_decode_allow_trailing_bits(true);
const BASE64_STANDARD: GeneralPurpose = GeneralPurpose::new(&alphabet::STANDARD, BASE64_LENIENT);
const BASE64_URL_SAFE: GeneralPurpose = GeneralPurpose::new(&alphabet::URL_SAFE, BASE64_LENIENT);

/// base64, standard or URL-safe alphabet, padded or not; `None` when it
/// is not base64.
pub(crate) fn base64(s: &str) -> Option<Vec<u8>> {
    BASE64_STANDARD
        .decode(s)
        .or_else(|_| BASE64_URL_SAFE.decode(s))
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_bytes_decode() {
        assert_eq!(hex("00aBff"), Some(vec![0, 0xab, 0xff]));
        assert_eq!(hex("0g"), None);
        assert_eq!(hex("abc"), None);
        assert_eq!(base64("aGk="), Some(b"hi".to_vec()));
        assert_eq!(base64("aGk"), Some(b"hi".to_vec()));
        assert_eq!(base64("_-8"), Some(vec![0xff, 0xef]));
        assert_eq!(base64("a"), None);
        assert_eq!(base64("a*"), None);
    }

    #[test]
    fn integers_are_range_checked() {
        assert_eq!(integer(Number::Int(-1), Kind::Int32), Some(u64::MAX));
        assert_eq!(integer(Number::Int(1 << 31), Kind::Int32), None);
        assert_eq!(integer(Number::Int(-1), Kind::Uint64), None);
        assert_eq!(integer(Number::Float(1e3), Kind::Int64), Some(1000));
        assert_eq!(integer(Number::Float(1.5), Kind::Int64), None);
        assert_eq!(
            integer(Number::Int(u64::MAX.into()), Kind::Fixed64),
            Some(u64::MAX)
        );
    }

    #[test]
    fn output_past_the_limit_is_refused() {
        let json = br#"{"resourceProfiles":[{"schemaUrl":"0123456789"}]}"#;
        assert!(transcode(json, 1000).is_ok());
        assert!(matches!(
            transcode(json, 8),
            Err(OtlpError::JsonTooLarge { limit: 8 })
        ));
    }
}
