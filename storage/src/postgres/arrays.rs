//! The array parameters of write statements, encoded once, straight from
//! the rows, in PostgreSQL's binary array format.
//!
//! A write statement takes its rows as one array per column (see schema's
//! "Writes"). Given as `Vec<i64>` or `Vec<Uuid>`, each column is first
//! collected from the rows, then encoded by the driver element by element,
//! each element through a closure that reserves its length, writes it in
//! two or three calls that are not inlined, and patches the length: that
//! was 10% of a worker's CPU on `fleet_bench` (which writes some 30,000
//! sample rows a second per worker), for what is a fixed 12 or 20 bytes a
//! row. [`ArrayParam`] writes each element as fixed-size copies into a
//! buffer sized in advance, and hands the driver the finished parameter.
//!
//! The format (PostgreSQL's `array_send`): the number of dimensions (1),
//! a has-nulls flag (0), the element type's OID, the dimension's length
//! and lower bound (1); then each element as its length and its bytes,
//! all integers big-endian.

use std::error::Error;

use bytes::BytesMut;
use tokio_postgres::types::{IsNull, ToSql, Type, to_sql_checked};

/// What an array holds: `bigint`, `uuid` or `bytea`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Element {
    Int8,
    Uuid,
    Bytea,
}

impl Element {
    fn element_type(self) -> Type {
        match self {
            Element::Int8 => Type::INT8,
            Element::Uuid => Type::UUID,
            Element::Bytea => Type::BYTEA,
        }
    }

    fn array_type(self) -> Type {
        match self {
            Element::Int8 => Type::INT8_ARRAY,
            Element::Uuid => Type::UUID_ARRAY,
            Element::Bytea => Type::BYTEA_ARRAY,
        }
    }
}

/// One array parameter, already encoded. Built from at most `i32::MAX`
/// elements of at most `i32::MAX` bytes each (a statement takes
/// [`CHUNK_ROWS`](super::profile) rows of a batch's bounded sizes).
#[derive(Debug)]
pub(super) struct ArrayParam {
    element: Element,
    encoded: Vec<u8>,
}

/// The header's bytes: dimensions, flags, element OID, length, lower
/// bound.
const HEADER_LEN: usize = 20;

impl ArrayParam {
    /// A `bigint[]` of `values`.
    pub(super) fn int8(values: impl ExactSizeIterator<Item = i64>) -> ArrayParam {
        ArrayParam::fixed(Element::Int8, values.map(i64::to_be_bytes))
    }

    /// A `uuid[]` of `values` (a `u128` is a UUID's 16 bytes big-endian,
    /// as `Uuid::from_u128` reads it).
    pub(super) fn uuid(values: impl ExactSizeIterator<Item = u128>) -> ArrayParam {
        ArrayParam::fixed(Element::Uuid, values.map(u128::to_be_bytes))
    }

    /// An array of `element`s of `N` bytes each, `values` already in
    /// their wire form: each element its length and its bytes, two copies
    /// of a size known here.
    fn fixed<const N: usize>(
        element: Element,
        values: impl ExactSizeIterator<Item = [u8; N]>,
    ) -> ArrayParam {
        let mut array = ArrayParam::with_header(element, values.len(), 4 + N);
        let len = length(N).to_be_bytes();
        for value in values {
            array.encoded.extend_from_slice(&len);
            array.encoded.extend_from_slice(&value);
        }
        array
    }

    /// A `bytea[]` of `values`.
    pub(super) fn bytea<'a>(values: impl ExactSizeIterator<Item = &'a [u8]> + Clone) -> ArrayParam {
        let bytes: usize = values.clone().map(|v| 4 + v.len()).sum();
        let mut array = ArrayParam::with_header(Element::Bytea, values.len(), 0);
        array.encoded.reserve(bytes);
        for value in values {
            array
                .encoded
                .extend_from_slice(&length(value.len()).to_be_bytes());
            array.encoded.extend_from_slice(value);
        }
        array
    }

    /// An array of `len` elements, its header written and room made for
    /// `cell` bytes per element.
    fn with_header(element: Element, len: usize, cell: usize) -> ArrayParam {
        let mut encoded = Vec::with_capacity(HEADER_LEN + len * cell);
        encoded.extend_from_slice(&1i32.to_be_bytes());
        encoded.extend_from_slice(&0i32.to_be_bytes());
        encoded.extend_from_slice(&element.element_type().oid().to_be_bytes());
        encoded.extend_from_slice(&length(len).to_be_bytes());
        encoded.extend_from_slice(&1i32.to_be_bytes());
        ArrayParam { element, encoded }
    }
}

/// A length as the format's `int4`.
fn length(len: usize) -> i32 {
    i32::try_from(len).expect("a write statement's arrays and values are far below 2 GiB")
}

impl ToSql for ArrayParam {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn Error + Sync + Send>> {
        // `accepts` cannot see which array this is: check it here.
        if *ty != self.element.array_type() {
            return Err(format!(
                "a {} array parameter given for a {ty} column",
                self.element.element_type()
            )
            .into());
        }
        out.extend_from_slice(&self.encoded);
        Ok(IsNull::No)
    }

    fn accepts(ty: &Type) -> bool {
        [Element::Int8, Element::Uuid, Element::Bytea]
            .iter()
            .any(|e| e.array_type() == *ty)
    }

    to_sql_checked!();
}

#[cfg(test)]
mod tests {
    use uuid::Uuid;

    use super::*;

    /// What the driver's own encoding of `value` is.
    fn driver(value: &(dyn ToSql + Sync), ty: &Type) -> Vec<u8> {
        let mut out = BytesMut::new();
        value.to_sql_checked(ty, &mut out).unwrap();
        out.to_vec()
    }

    fn ours(param: &ArrayParam, ty: &Type) -> Vec<u8> {
        let mut out = BytesMut::new();
        param.to_sql_checked(ty, &mut out).unwrap();
        out.to_vec()
    }

    /// Guards the wire format: each kind encodes byte for byte as the
    /// driver encodes the same values from a `Vec`.
    #[test]
    fn arrays_encode_as_the_driver_does() {
        let ints = vec![0i64, -1, i64::MIN, i64::MAX, 1_700_000_000_000_000_000];
        assert_eq!(
            ours(&ArrayParam::int8(ints.iter().copied()), &Type::INT8_ARRAY),
            driver(&ints, &Type::INT8_ARRAY)
        );
        let ids = [
            0u128,
            1,
            u128::MAX,
            0x0123_4567_89ab_cdef_fedc_ba98_7654_3210,
        ];
        let uuids: Vec<Uuid> = ids.iter().map(|&id| Uuid::from_u128(id)).collect();
        assert_eq!(
            ours(&ArrayParam::uuid(ids.iter().copied()), &Type::UUID_ARRAY),
            driver(&uuids, &Type::UUID_ARRAY)
        );
        let values: Vec<Vec<u8>> = vec![b"frame".to_vec(), Vec::new(), vec![0xff; 300]];
        assert_eq!(
            ours(
                &ArrayParam::bytea(values.iter().map(Vec::as_slice)),
                &Type::BYTEA_ARRAY
            ),
            driver(&values, &Type::BYTEA_ARRAY)
        );
    }

    #[test]
    fn an_array_given_for_another_column_type_is_refused() {
        let param = ArrayParam::int8([1i64].into_iter());
        let mut out = BytesMut::new();
        let Err(err) = param.to_sql_checked(&Type::UUID_ARRAY, &mut out) else {
            panic!("an int8 array was taken for a uuid column");
        };
        assert!(
            err.to_string()
                .contains("int8 array parameter given for a _uuid column"),
            "{err}"
        );
        assert!(param.to_sql_checked(&Type::INT4_ARRAY, &mut out).is_err());
    }
}
