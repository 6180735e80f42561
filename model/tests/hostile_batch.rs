//! A hostile batch whose one function name is 250 MiB (zstd packs it into a
//! few KB) is refused by its length, without the name ever being copied out
//! of the decompressed payload: the decoder's peak memory stays at about the
//! payload's own size. A global allocator that counts live bytes measures
//! it, so this test lives in a binary of its own.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use kiln_model::{Batch, BatchBuilder, BatchError, Frame, FrameEntry, FrameKind, MAX_NAME_LEN};

/// The system allocator, counting live bytes and their peak.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded to `System` unchanged; only counters are
// updated beside it.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is `System`'s.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(live, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as above.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            // Counted as if the old block lived until the new one existed,
            // as it may.
            let live = LIVE.fetch_add(new_size, Ordering::Relaxed) + new_size;
            PEAK.fetch_max(live, Ordering::Relaxed);
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const MIB: usize = 1 << 20;

#[test]
fn a_250_mib_function_name_is_refused_without_being_copied() {
    let name_len = 250 * MIB;
    let bytes = {
        let mut batch = BatchBuilder::new("h", 0, 1).finish();
        let frame = Frame::named(FrameKind::Native, "x".repeat(name_len));
        batch.frames.push(FrameEntry {
            id: frame.id(),
            frame,
        });
        batch.encode()
    };
    assert!(bytes.len() < 64 * 1024, "{} bytes", bytes.len());

    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let err = Batch::decode(&bytes).unwrap_err();
    let peak = PEAK.load(Ordering::Relaxed) - before;
    assert!(
        matches!(err, BatchError::FieldTooLong { len, limit: MAX_NAME_LEN, .. } if len == name_len),
        "{err:?}"
    );
    assert!(err.to_string().contains("frame 0 function name"), "{err}");
    // The payload buffer (grown by doubling, so up to 256 MiB and a copy
    // while it grows: 384 MiB at most) is all; deserializing the name
    // would add another 250 MiB on top of the 256.
    assert!(peak < 450 * MIB, "decoding peaked at {} MiB", peak / MIB);
}
