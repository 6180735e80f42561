//! The header of a ksym file, the same in every version but for its
//! sections: magic, version, header length, a flags word, then each
//! section's (offset, record count), so that every section is a whole
//! number of records.

use super::KsymError;
use super::fields::u32_at;

/// `KSYM`, the first bytes of every version.
pub(super) const MAGIC: &[u8; 4] = b"KSYM";

/// A version's sections, in header order: names (for errors and size
/// reports) and record sizes in bytes.
pub(super) struct Sections<const N: usize> {
    pub(super) names: [&'static str; N],
    pub(super) record: [usize; N],
}

impl<const N: usize> Sections<N> {
    /// Header bytes: magic, version, header length, flags, then an
    /// (offset, count) pair of `u32` per section.
    pub(super) const fn header_len(&self) -> usize {
        16 + 8 * N
    }

    /// The sections of `data` and its flags word, once its magic and
    /// header length match and `version` accepts the version it names;
    /// each section within `data`.
    pub(super) fn read<'a>(
        &self,
        data: &'a [u8],
        version: impl FnOnce(u32) -> Result<(), KsymError>,
    ) -> Result<([&'a [u8]; N], u32), KsymError> {
        if data.len() < self.header_len() {
            return Err(KsymError::TooShort { len: data.len() });
        }
        if &data[..4] != MAGIC {
            return Err(KsymError::BadMagic);
        }
        version(u32_at(data, 4))?;
        if u32_at(data, 8) as usize != self.header_len() {
            return Err(KsymError::BadHeader);
        }
        let mut sections: [&[u8]; N] = [&[]; N];
        for (i, section) in sections.iter_mut().enumerate() {
            let offset = u32_at(data, 16 + 8 * i) as usize;
            let count = u32_at(data, 20 + 8 * i) as usize;
            let out = KsymError::SectionOutOfBounds {
                section: self.names[i],
            };
            let len = count.checked_mul(self.record[i]).ok_or(out.clone())?;
            let end = offset.checked_add(len).ok_or(out.clone())?;
            *section = data.get(offset..end).ok_or(out)?;
        }
        Ok((sections, u32_at(data, 12)))
    }

    /// A file of `version` with `flags` holding `sections` (in header
    /// order, each a whole number of its records), each section 8-byte
    /// aligned.
    pub(super) fn write(&self, version: u32, flags: u32, sections: [&[u8]; N]) -> Vec<u8> {
        let to_u32 = |v: usize| u32::try_from(v).unwrap_or(u32::MAX);
        let mut out = vec![0u8; self.header_len()];
        out[..4].copy_from_slice(MAGIC);
        out[4..8].copy_from_slice(&version.to_le_bytes());
        out[8..12].copy_from_slice(&to_u32(self.header_len()).to_le_bytes());
        out[12..16].copy_from_slice(&flags.to_le_bytes());
        for (i, bytes) in sections.into_iter().enumerate() {
            while !out.len().is_multiple_of(8) {
                out.push(0);
            }
            let at = 16 + 8 * i;
            let (offset, count) = (to_u32(out.len()), to_u32(bytes.len() / self.record[i]));
            out[at..at + 4].copy_from_slice(&offset.to_le_bytes());
            out[at + 4..at + 8].copy_from_slice(&count.to_le_bytes());
            out.extend_from_slice(bytes);
        }
        out
    }
}
