//! Kiln's memory allocator: mimalloc, and for a worker, freed memory kept
//! for reuse rather than returned to the system.

use libmimalloc_sys::mi_option_t;

/// mimalloc rather than glibc's malloc: a worker decodes, filters and
/// drops hundreds of thousands of small strings and id vectors a second
/// (each batch's frames and stacks), and glibc's free lists and heap
/// trimming were a fifth of its time under `fleet_bench`
/// (`docs/benchmarks.md`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_purge_delay` in its `mi_option_t` (mimalloc 3's
/// `mimalloc.h`; the crate names only some options). The test below checks
/// that this option holds mimalloc's default purge delay.
const PURGE_DELAY: mi_option_t = 15;
const _: () = assert!(PURGE_DELAY < libmimalloc_sys::_mi_option_last);

/// Never: a worker's poll allocates tens of MiB (decoded batches, a
/// poll's rows, statement parameters) and frees them, polls apart.
/// Returned to the system each time, that memory came back as fresh pages
/// the kernel had to zero: 7–10% of a worker's CPU under `fleet_bench`
/// with mimalloc's default delay (1 s) and with 10 s alike, and none when
/// it never purged (`docs/benchmarks.md`). The worker's memory then stays
/// at its peak, which its polls reuse.
const NEVER: std::ffi::c_long = -1;

/// Keeps the memory this process frees for its own reuse, unless
/// `MIMALLOC_PURGE_DELAY` (read by mimalloc itself) says otherwise: for a
/// process whose work comes in like-sized rounds (`kiln worker`).
pub(crate) fn keep_freed_memory() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: mi_option_set takes any option number below
        // _mi_option_last and any value; PURGE_DELAY is one (see the test).
        unsafe { libmimalloc_sys::mi_option_set(PURGE_DELAY, NEVER) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_purge_delay_option_is_the_one_set() {
        // In this process `keep_freed_memory` has not run: the option holds mimalloc's
        // default purge delay (1000 ms), or what the environment says.
        let expected = std::env::var("MIMALLOC_PURGE_DELAY")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1000);
        // SAFETY: any option number below _mi_option_last may be read.
        let value = unsafe { libmimalloc_sys::mi_option_get(PURGE_DELAY) };
        assert_eq!(
            value, expected,
            "option {PURGE_DELAY} is not the purge delay"
        );
    }
}
