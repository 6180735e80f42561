//! Many lookups at once: what a symbolizer worker does with the addresses
//! of one file. Taken in address order, consecutive addresses mostly fall
//! in the range of the one before, whose record and body are then read
//! once for all of them, and an address met again is answered once.

use super::read::Located;
use super::{Frame, Ksym};

impl<'a> Ksym<'a> {
    /// Symbolizes `addrs` (file-relative, in any order, repeats allowed):
    /// calls `each` with an address's position in `addrs` and its frames,
    /// as [`lookup`](Self::lookup) gives them (none when no range covers
    /// it), once per position, in address order.
    pub fn lookup_many<'s>(&'s self, addrs: &[u64], mut each: impl FnMut(usize, &[Frame<'s>])) {
        let mut order: Vec<(u64, usize)> = addrs.iter().copied().zip(0..).collect();
        // By address alone: the positions of equal addresses need no order.
        order.sort_unstable_by_key(|&(addr, _)| addr);
        let mut range: Option<Located<'a>> = None;
        let mut frames = Vec::new();
        let mut last = None;
        for (addr, index) in order {
            if last != Some(addr) {
                frames.clear();
                if !range.is_some_and(|r| r.covers(addr)) {
                    range = self.locate(addr);
                }
                if let Some(range) = &range {
                    self.push_frames(range, addr, &mut frames);
                }
                last = Some(addr);
            }
            each(index, &frames);
        }
    }
}
