//! Rewriting ksym files of an earlier version in the current one.
//!
//! Object stores hold files written by earlier versions of Kiln, and the
//! ELF files they came from may be long gone (a CI upload, a container
//! image since replaced), so refusing them would cost profiles their
//! names. Instead the loader upgrades them as it reads them: the earlier
//! reader reads the whole table back and the current writer encodes it.

use std::borrow::Cow;

use super::fields::u32_at;
use super::layout::MAGIC;
use super::{KsymError, encode, v1};

/// `data` in the current layout: borrowed as it is when it is already
/// (or is not a ksym file at all: [`Ksym::open`](super::Ksym::open) then
/// says why), rewritten when it is a version 1 file. A damaged version 1
/// file gives an error, as `open` would.
pub fn upgrade(data: &[u8]) -> Result<Cow<'_, [u8]>, KsymError> {
    let earlier = data.len() >= 8 && &data[..4] == MAGIC && u32_at(data, 4) == v1::VERSION;
    if !earlier {
        return Ok(Cow::Borrowed(data));
    }
    let table = v1::Ksym::open(data)?.to_table()?;
    Ok(Cow::Owned(encode(&table)))
}
