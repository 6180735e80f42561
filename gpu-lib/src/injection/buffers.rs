//! CUPTI's activity buffers: a bounded pool of aligned, reused buffers, and
//! the two callbacks through which CUPTI asks for one and hands it back.

use std::panic::catch_unwind;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::{Event, RUNTIME};
use crate::cupti_abi as abi;

/// A completed activity buffer on its way to the aggregator.
pub(super) struct ActivityBuffer {
    pub(super) ptr: *mut u8,
    pub(super) valid: usize,
}

// SAFETY: the buffer is the pool's allocation, handed over by CUPTI; only
// the aggregator reads it, then gives it back to the pool.
unsafe impl Send for ActivityBuffer {}

/// Activity buffers: 8-byte aligned, reused, at most `max` out at once.
pub(super) struct BufferPool {
    words: usize,
    max: usize,
    out: AtomicUsize,
    free: Mutex<Vec<Box<[u64]>>>,
}

impl BufferPool {
    pub(super) fn new(bytes: usize, max: usize) -> Self {
        Self {
            words: bytes.div_ceil(8).max(1),
            max,
            out: AtomicUsize::new(0),
            free: Mutex::new(Vec::new()),
        }
    }

    pub(super) fn bytes(&self) -> usize {
        self.words * 8
    }

    pub(super) fn take(&self) -> Option<*mut u8> {
        if self.out.fetch_add(1, Ordering::AcqRel) >= self.max {
            self.out.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        let reused = self.free.lock().ok().and_then(|mut f| f.pop());
        let buffer = reused.unwrap_or_else(|| vec![0u64; self.words].into_boxed_slice());
        Some(Box::into_raw(buffer).cast::<u8>())
    }

    /// # Safety
    ///
    /// `ptr` must come from [`BufferPool::take`] and not be used after.
    pub(super) unsafe fn give_back(&self, ptr: *mut u8) {
        let slice = std::ptr::slice_from_raw_parts_mut(ptr.cast::<u64>(), self.words);
        // SAFETY: take() made this box.
        let buffer = unsafe { Box::from_raw(slice) };
        self.out.fetch_sub(1, Ordering::AcqRel);
        if let Ok(mut free) = self.free.lock()
            && free.len() < 4
        {
            free.push(buffer);
        }
    }
}

pub(super) unsafe extern "C" fn buffer_requested(
    buffer: *mut *mut u8,
    size: *mut usize,
    max_records: *mut usize,
) {
    let taken = catch_unwind(|| {
        let rt = RUNTIME.get()?;
        match rt.pool.take() {
            Some(ptr) => Some((ptr, rt.pool.bytes())),
            None => {
                rt.counts.buffers_refused.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    })
    .ok()
    .flatten();
    let (ptr, bytes) = taken.unwrap_or((std::ptr::null_mut(), 0));
    // SAFETY: CUPTI passes valid out-pointers.
    unsafe {
        *buffer = ptr;
        *size = bytes;
        *max_records = 0;
    }
}

pub(super) unsafe extern "C" fn buffer_completed(
    _context: abi::CuContext,
    _stream_id: u32,
    buffer: *mut u8,
    size: usize,
    valid_size: usize,
) {
    if buffer.is_null() {
        return;
    }
    let _ = catch_unwind(|| {
        if let Some(rt) = RUNTIME.get() {
            rt.send(Event::Buffer(ActivityBuffer {
                ptr: buffer,
                valid: valid_size.min(size),
            }));
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    pub(super) fn pool_is_bounded_and_reuses() {
        let pool = BufferPool::new(100, 2);
        assert_eq!(pool.bytes(), 104);
        let a = pool.take().unwrap();
        let b = pool.take().unwrap();
        assert!(pool.take().is_none());
        assert_eq!(a as usize % 8, 0);
        // SAFETY: both came from take().
        unsafe {
            pool.give_back(a);
            pool.give_back(b);
        }
        assert!(pool.take().is_some());
    }
}
