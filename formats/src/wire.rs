//! A walker over the protobuf wire format, allocation-free: the limit
//! checks of pprof and OTLP count what decoding would build before prost
//! builds any of it, and the OTLP layout upgrade finds the tags it
//! rewrites.

/// One field's value, as the wire format has it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Value<'a> {
    /// A varint.
    Varint,
    /// A fixed 32- or 64-bit value.
    Fixed,
    /// Length-delimited: a message, a string, or packed scalars.
    Bytes(&'a [u8]),
}

/// One field of a message.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Field<'a> {
    /// Its number.
    pub number: u64,
    /// Its value.
    pub value: Value<'a>,
    /// Where its key starts, from the start of the message's bytes.
    pub key_at: usize,
}

/// How many scalars a repeated varint field's occurrence holds: one, or
/// as many varints as its packed bytes end (a byte below 0x80 ends one).
pub(crate) fn scalars(value: Value<'_>) -> usize {
    match value {
        Value::Varint | Value::Fixed => 1,
        Value::Bytes(packed) => packed.iter().filter(|&&b| b < 0x80).count(),
    }
}

/// How many scalars a repeated fixed64 field's occurrence holds.
pub(crate) fn fixed64s(value: Value<'_>) -> usize {
    match value {
        Value::Varint | Value::Fixed => 1,
        Value::Bytes(packed) => packed.len() / 8,
    }
}

/// Calls `visit` with each field of the message `bytes`. Returns
/// `Ok(false)` where the bytes stop being a well-formed message (prost
/// will say why), `Ok(true)` at a clean end; an error of `visit` stops
/// the walk.
pub(crate) fn walk<'a, E>(
    bytes: &'a [u8],
    mut visit: impl FnMut(Field<'a>) -> Result<(), E>,
) -> Result<bool, E> {
    let mut rest = bytes;
    while !rest.is_empty() {
        let key_at = bytes.len() - rest.len();
        let Some(key) = varint(&mut rest) else {
            return Ok(false);
        };
        let value = match key & 7 {
            0 => match varint(&mut rest) {
                Some(_) => Value::Varint,
                None => return Ok(false),
            },
            1 => match rest.split_at_checked(8) {
                Some((_, after)) => {
                    rest = after;
                    Value::Fixed
                }
                None => return Ok(false),
            },
            2 => {
                let Some(len) = varint(&mut rest).and_then(|n| usize::try_from(n).ok()) else {
                    return Ok(false);
                };
                match rest.split_at_checked(len) {
                    Some((value, after)) => {
                        rest = after;
                        Value::Bytes(value)
                    }
                    None => return Ok(false),
                }
            }
            5 => match rest.split_at_checked(4) {
                Some((_, after)) => {
                    rest = after;
                    Value::Fixed
                }
                None => return Ok(false),
            },
            // Groups (3, 4) and unknown wire types: prost refuses them.
            _ => return Ok(false),
        };
        visit(Field {
            number: key >> 3,
            value,
            key_at,
        })?;
    }
    Ok(true)
}

/// Reads a varint off the front of `bytes`.
fn varint(bytes: &mut &[u8]) -> Option<u64> {
    let mut value = 0u64;
    for (i, &b) in bytes.iter().enumerate().take(10) {
        value |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            *bytes = &bytes[i + 1..];
            return Some(value);
        }
    }
    None
}

/// Where `inner`, a slice of `outer`, starts in it.
pub(crate) fn offset_in(outer: &[u8], inner: &[u8]) -> usize {
    inner.as_ptr() as usize - outer.as_ptr() as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_carry_their_values_and_key_offsets() {
        // field 1 varint 300, field 2 bytes "ab", field 3 fixed32.
        let bytes = [0x08, 0xac, 0x02, 0x12, 0x02, b'a', b'b', 0x1d, 0, 0, 0, 0];
        let mut seen = Vec::new();
        let clean = walk::<()>(&bytes, |f| {
            seen.push((f.number, f.key_at, matches!(f.value, Value::Varint)));
            if let Value::Bytes(b) = f.value {
                assert_eq!(b, b"ab");
                assert_eq!(offset_in(&bytes, b), 5);
            }
            Ok(())
        })
        .unwrap();
        assert!(clean);
        assert_eq!(seen, [(1, 0, true), (2, 3, false), (3, 7, false)]);
    }

    #[test]
    fn malformed_bytes_end_the_walk_quietly() {
        assert!(!walk::<()>(&[0x12, 0xff], |_| Ok(())).unwrap());
        assert!(!walk::<()>(&[0x0b], |_| Ok(())).unwrap());
        assert_eq!(scalars(Value::Bytes(&[0x80, 0x01, 0x05])), 2);
        assert_eq!(fixed64s(Value::Bytes(&[0; 17])), 2);
    }
}
