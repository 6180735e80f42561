//! Rewriting ksym files of an earlier version in the current one.
//!
//! Object stores hold files written by earlier versions of Kiln, and the
//! ELF files they came from may be long gone (a CI upload, a container
//! image since replaced), so refusing them would cost profiles their
//! names. Instead the loader upgrades them as it reads them (and stores
//! the result in their place): the reader of the earlier layouts
//! (`earlier`) reads the whole table back and the current writer encodes
//! it.

use std::borrow::Cow;

use super::fields::u32_at;
use super::layout::{MAGIC, VERSION};
use super::{KsymError, earlier, encode};

/// `data` in the current layout: borrowed as it is when it is already
/// (or is not a ksym file at all: [`Ksym::open`](super::Ksym::open) then
/// says why), rewritten when it is a file of an earlier version (1 to 5).
/// An earlier file that does not verify gives an error.
pub fn upgrade(data: &[u8]) -> Result<Cow<'_, [u8]>, KsymError> {
    let version = (data.len() >= 8 && &data[..4] == MAGIC).then(|| u32_at(data, 4));
    match version {
        Some(version @ 1..VERSION) => Ok(Cow::Owned(encode(&earlier::to_table(data, version)?))),
        _ => Ok(Cow::Borrowed(data)),
    }
}
