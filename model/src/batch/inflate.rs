//! A batch's zstd payload decompressed straight into the aligned buffer
//! rkyv reads, within a limit, by a decompression context each thread
//! keeps.
//!
//! A worker inflates every batch it takes: `zstd::stream::Decoder` made a
//! context per batch (about 100 KiB, set up each time) and copied its
//! output through a 64 KiB chunk into a buffer that grew by doubling.
//! Here the buffer starts at a guess of the payload's size and zstd
//! writes into it.

use std::cell::RefCell;
use std::io;

use rkyv::util::AlignedVec;
use zstd::zstd_safe::{self, DCtx, InBuffer, OutBuffer, ResetDirective, WriteBuf};

/// Why a payload was not inflated.
#[derive(Debug)]
pub(super) enum InflateError {
    /// It inflates to more than the limit.
    TooLarge,
    /// It is not a whole zstd stream.
    Zstd(io::Error),
}

thread_local! {
    static CONTEXT: RefCell<Option<DCtx<'static>>> = const { RefCell::new(None) };
}

/// How much larger than its compressed form a payload is guessed to be:
/// agent batches compress about 3:1. A wrong guess costs a reallocation,
/// or address space the payload never touches.
const GUESSED_RATIO: usize = 4;
/// The least a buffer grows by.
const MIN_GROWTH: usize = 64 << 10;

/// The zstd stream `compressed` (one frame or several) decompressed,
/// refused once it passes `limit` bytes.
pub(super) fn inflate(compressed: &[u8], limit: usize) -> Result<AlignedVec<16>, InflateError> {
    CONTEXT.with(|context| {
        let mut context = context.borrow_mut();
        let dctx = match &mut *context {
            Some(dctx) => dctx,
            None => context.insert(
                DCtx::try_create().ok_or_else(|| zstd_error("no memory for a zstd context"))?,
            ),
        };
        // A stream an error left mid-frame must not carry into this one.
        dctx.reset(ResetDirective::SessionOnly)
            .map_err(|code| zstd_error(zstd_safe::get_error_name(code)))?;
        inflate_with(dctx, compressed, limit)
    })
}

fn inflate_with(
    dctx: &mut DCtx<'_>,
    compressed: &[u8],
    limit: usize,
) -> Result<AlignedVec<16>, InflateError> {
    // One byte past the limit is room to tell a payload of exactly
    // `limit` bytes from a longer one.
    let bound = limit.saturating_add(1);
    let mut payload = AlignedVec::<16>::with_capacity(
        compressed
            .len()
            .saturating_mul(GUESSED_RATIO)
            .clamp(MIN_GROWTH.min(bound), bound),
    );
    let mut input = InBuffer::around(compressed);
    loop {
        if payload.len() == payload.capacity() {
            // Doubling, but never past the bound: a payload refused at a
            // 64 MiB limit grew a 128 MiB buffer, which the allocator
            // then kept.
            let grown = payload.capacity().max(MIN_GROWTH);
            payload.reserve_exact(grown.min(bound - payload.len()));
        }
        let room = payload.capacity().min(bound);
        let written_from = payload.len();
        let frame_left = {
            let mut spare = Spare {
                payload: &mut payload,
                room,
            };
            let mut output = OutBuffer::around_pos(&mut spare, written_from);
            dctx.decompress_stream(&mut output, &mut input)
                .map_err(|code| zstd_error(zstd_safe::get_error_name(code)))?
        };
        if payload.len() > limit {
            return Err(InflateError::TooLarge);
        }
        let input_done = input.pos() == compressed.len();
        if input_done && frame_left == 0 {
            return Ok(payload);
        }
        // All input read, room left to write, and the frame not done: the
        // stream was cut short.
        if input_done && payload.len() < room {
            return Err(InflateError::Zstd(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the zstd stream ends inside a frame",
            )));
        }
    }
}

fn zstd_error(what: &str) -> InflateError {
    InflateError::Zstd(io::Error::other(what.to_owned()))
}

/// The payload as zstd's output: written from its length up to `room`
/// bytes, which its capacity holds.
struct Spare<'a> {
    payload: &'a mut AlignedVec<16>,
    room: usize,
}

// SAFETY: `capacity` is at most the payload's allocation, `as_mut_ptr`
// points at its start, and zstd reports how far it wrote before
// `filled_until` sets the length to it.
unsafe impl WriteBuf for Spare<'_> {
    fn as_slice(&self) -> &[u8] {
        self.payload.as_slice()
    }

    fn capacity(&self) -> usize {
        self.room
    }

    fn as_mut_ptr(&mut self) -> *mut u8 {
        self.payload.as_mut_ptr()
    }

    unsafe fn filled_until(&mut self, n: usize) {
        // SAFETY: the caller (zstd) wrote the first `n` bytes, n <= room
        // <= capacity.
        unsafe { self.payload.set_len(n) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compressed(payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        zstd::stream::copy_encode(payload, &mut out, 3).unwrap();
        out
    }

    /// Bytes that compress well but not trivially, `n` of them.
    fn payload(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i % 251) as u8 ^ (i / 4096) as u8).collect()
    }

    #[test]
    fn a_payload_comes_back_whole_at_any_size_up_to_the_limit() {
        for n in [0, 1, 1000, MIN_GROWTH, 3 * MIN_GROWTH + 17, 5 << 20] {
            let bytes = payload(n);
            let out = inflate(&compressed(&bytes), n).unwrap();
            assert_eq!(out.as_slice(), &bytes[..], "{n} bytes");
        }
    }

    #[test]
    fn one_byte_past_the_limit_is_too_large() {
        let bytes = payload(200_000);
        assert!(matches!(
            inflate(&compressed(&bytes), 199_999),
            Err(InflateError::TooLarge)
        ));
    }

    /// Guards "a payload costs its limit, not the next power of two".
    #[test]
    fn the_buffer_grows_no_further_than_one_byte_past_the_limit() {
        // A highly compressible payload starts from the smallest guess and
        // grows by doubling: its last growth stops at the bound.
        let zeros = vec![0u8; 3 << 20];
        let out = inflate_with(&mut DCtx::create(), &compressed(&zeros), 3 << 20).unwrap();
        assert_eq!(out.len(), 3 << 20);
        assert!(out.capacity() <= (3 << 20) + 1, "{}", out.capacity());
    }

    #[test]
    fn frames_one_after_another_are_one_payload() {
        let (a, b) = (payload(70_000), payload(30_000));
        let mut both = compressed(&a);
        both.extend(compressed(&b));
        let out = inflate(&both, 1 << 20).unwrap();
        assert_eq!(out.as_slice(), &[a, b].concat()[..]);
    }

    #[test]
    fn a_cut_stream_or_garbage_is_refused_and_the_context_recovers() {
        let bytes = payload(300_000);
        let whole = compressed(&bytes);
        for cut in [0, 1, whole.len() / 2, whole.len() - 1] {
            assert!(
                matches!(inflate(&whole[..cut], 1 << 20), Err(InflateError::Zstd(_))),
                "cut at {cut}"
            );
        }
        assert!(matches!(
            inflate(b"not zstd at all", 1 << 20),
            Err(InflateError::Zstd(_))
        ));
        // The thread's context, left mid-frame above, inflates the next
        // stream whole.
        assert_eq!(inflate(&whole, 1 << 20).unwrap().as_slice(), &bytes[..]);
    }
}
