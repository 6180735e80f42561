//! A body's bytes while it is read: on the heap while small, in an
//! anonymous mapping of its own once large.
//!
//! Why a mapping: the allocator (mimalloc) keeps what a thread frees for
//! that thread's reuse, and returns it to the system only when the thread
//! allocates again. Decompression runs on actix's blocking threads, which
//! go idle after the request; a decompression bomb refused at an import's
//! 256 MiB limit left that much resident per thread it ran on (a gateway
//! at 58 MiB held 840 MiB after four bombs). A mapping is returned to the
//! system when it is dropped, on whatever thread and under whatever
//! allocator, so a body costs memory only while it is in use. Its pages
//! are touched only as the body fills them: mapping the whole limit up
//! front costs address space, not memory, and the body is never copied to
//! grow.

use bytes::Bytes;
use memmap2::{MmapMut, MmapOptions};

/// Bodies up to this size stay on the heap: agents' batches are mostly
/// well under it, and a mapping costs a system call and fresh pages.
const SPILL_AT: usize = 1 << 20;

/// Bytes appended up to a fixed limit.
#[derive(Debug)]
pub(crate) struct BodyBuffer {
    limit: usize,
    storage: Storage,
}

#[derive(Debug)]
enum Storage {
    Heap(Vec<u8>),
    Mapped { map: MmapMut, len: usize },
}

impl BodyBuffer {
    /// An empty buffer that takes at most `limit` bytes; `expected` (a
    /// declared length, or 0) sizes it.
    pub(crate) fn new(limit: usize, expected: usize) -> std::io::Result<Self> {
        let expected = expected.min(limit);
        let storage = if expected > SPILL_AT {
            Storage::mapped(limit)?
        } else {
            Storage::Heap(Vec::with_capacity(expected))
        };
        Ok(BodyBuffer { limit, storage })
    }

    pub(crate) fn len(&self) -> usize {
        match &self.storage {
            Storage::Heap(bytes) => bytes.len(),
            Storage::Mapped { len, .. } => *len,
        }
    }

    /// Appends `bytes`, or says the buffer would pass its limit (and
    /// takes none of them).
    pub(crate) fn extend(&mut self, bytes: &[u8]) -> Result<(), ExtendError> {
        let end = self.len() + bytes.len();
        if end > self.limit {
            return Err(ExtendError::Full);
        }
        if let Storage::Heap(heap) = &self.storage
            && end > SPILL_AT.max(heap.capacity())
        {
            let mut spilled = Storage::mapped(self.limit).map_err(ExtendError::Map)?;
            spilled.append(heap);
            self.storage = spilled;
        }
        self.storage.append(bytes);
        Ok(())
    }

    /// The bytes, shared without a copy.
    pub(crate) fn freeze(self) -> Bytes {
        match self.storage {
            Storage::Heap(bytes) => Bytes::from(bytes),
            Storage::Mapped { map, len } => Bytes::from_owner(MappedBody { map, len }),
        }
    }
}

/// Why [`BodyBuffer::extend`] took nothing.
#[derive(Debug)]
pub(crate) enum ExtendError {
    /// The body would be longer than the buffer's limit.
    Full,
    /// The system refused the mapping a large body needs.
    Map(std::io::Error),
}

impl Storage {
    fn mapped(limit: usize) -> std::io::Result<Storage> {
        // No swap is reserved for the whole limit: only the pages a body
        // fills are ever used.
        let map = MmapOptions::new()
            .len(limit.max(1))
            .no_reserve_swap()
            .map_anon()?;
        Ok(Storage::Mapped { map, len: 0 })
    }

    /// Appends `bytes`, which fit in a mapping's room (a heap vector grows
    /// as `Vec` does).
    fn append(&mut self, bytes: &[u8]) {
        match self {
            Storage::Heap(heap) => heap.extend_from_slice(bytes),
            Storage::Mapped { map, len } => {
                map[*len..*len + bytes.len()].copy_from_slice(bytes);
                *len += bytes.len();
            }
        }
    }
}

/// A mapped body's filled part, as `Bytes` owns it.
struct MappedBody {
    map: MmapMut,
    len: usize,
}

impl AsRef<[u8]> for MappedBody {
    fn as_ref(&self) -> &[u8] {
        &self.map[..self.len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_bodies_stay_on_the_heap_and_large_ones_spill_whole() {
        let mut buffer = BodyBuffer::new(8 << 20, 0).unwrap();
        buffer.extend(b"main;work 1\n").unwrap();
        assert!(matches!(buffer.storage, Storage::Heap(_)));
        let chunk = vec![b'x'; 300 << 10];
        for _ in 0..5 {
            buffer.extend(&chunk).unwrap();
        }
        assert!(matches!(buffer.storage, Storage::Mapped { .. }));
        let body = buffer.freeze();
        assert_eq!(body.len(), 12 + 5 * (300 << 10));
        assert_eq!(&body[..12], b"main;work 1\n");
        assert!(body[12..].iter().all(|&b| b == b'x'));
    }

    #[test]
    fn a_body_past_its_limit_is_refused_and_keeps_what_it_had() {
        let mut buffer = BodyBuffer::new(4 << 20, 4 << 20).unwrap();
        assert!(matches!(buffer.storage, Storage::Mapped { .. }));
        buffer.extend(&vec![1u8; 3 << 20]).unwrap();
        assert!(matches!(
            buffer.extend(&vec![2u8; (1 << 20) + 1]),
            Err(ExtendError::Full)
        ));
        assert_eq!(buffer.len(), 3 << 20);
        buffer.extend(&vec![2u8; 1 << 20]).unwrap();
        let body = buffer.freeze();
        assert_eq!(body.len(), 4 << 20);
        assert_eq!(body[(3 << 20) - 1], 1);
        assert_eq!(body[3 << 20], 2);
    }

    #[test]
    fn an_empty_body_is_empty() {
        assert!(BodyBuffer::new(0, 0).unwrap().freeze().is_empty());
        assert!(BodyBuffer::new(16 << 20, 0).unwrap().freeze().is_empty());
    }
}
