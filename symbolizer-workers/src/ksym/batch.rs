//! Many lookups at once: what a symbolizer worker does with the addresses
//! of one file. Taken in address order, consecutive addresses mostly fall
//! in the range of the one before, whose record and body are then read
//! once for all of them; consecutive addresses at the same line row and
//! chain entry (the same source line, often) share one answer, found
//! with one comparison: the answer holds up to the next row or chain
//! entry.

use super::body::Position;
use super::layout::FileLayout;
use super::read::{Located, with_layout};
use super::{Frame, Ksym};

impl<'a> Ksym<'a> {
    /// Symbolizes `addrs` (file-relative, in any order, repeats allowed):
    /// calls `each` with an address's position in `addrs` and its frames,
    /// as [`lookup`](Self::lookup) gives them (none when no range covers
    /// it), once per position, in address order.
    pub fn lookup_many<'s>(&'s self, addrs: &[u64], each: impl FnMut(usize, &[Frame<'s>])) {
        with_layout!(self, |layout| self.lookup_many_in(addrs, layout, each));
    }

    /// [`lookup_many`](Self::lookup_many) in a file of `layout`.
    #[inline(always)]
    fn lookup_many_in<'s>(
        &'s self,
        addrs: &[u64],
        layout: FileLayout,
        mut each: impl FnMut(usize, &[Frame<'s>]),
    ) {
        let mut range: Option<Located<'a>> = None;
        let mut frames = Vec::new();
        // Where in `range` the answer in `frames` was read, when it was.
        let mut answered: Option<Position> = None;
        // The answer in `frames` holds for the addresses after the last
        // one (taken in order) and before this one.
        let mut holds_until = 0;
        in_address_order(addrs, |addr, index| {
            if addr < holds_until {
                return each(index, &frames);
            }
            if !range.is_some_and(|r| r.covers(addr)) {
                range = self.locate(addr, layout);
                answered = None;
            }
            match &range {
                None => {
                    frames.clear();
                    holds_until = 0;
                }
                Some(range) => {
                    let (at, until) = range.position_until(addr);
                    if at.is_none() || at != answered {
                        frames.clear();
                        self.push_frames_at(range, at, &mut frames);
                        answered = at;
                    }
                    holds_until = until;
                }
            }
            each(index, &frames);
        });
    }
}

/// Calls `each` with every address of `addrs` and its position, in
/// address order (equal addresses in no particular order). Where the
/// addresses span less than 4 GiB (a file's always do), each is sorted as
/// its 32-bit offset from the lowest, with its position beside it: a radix
/// sort of 3 or 4 byte passes rather than the 5 or more of addresses and
/// positions packed in a `u64`, which took half of a batch's time on glibc.
fn in_address_order(addrs: &[u64], mut each: impl FnMut(u64, usize)) {
    let (Some(&low), Some(&high)) = (addrs.iter().min(), addrs.iter().max()) else {
        return;
    };
    if u32::try_from(high - low).is_err() || u32::try_from(addrs.len()).is_err() {
        let mut order: Vec<(u64, usize)> = addrs.iter().copied().zip(0..).collect();
        order.sort_unstable_by_key(|&(addr, _)| addr);
        return order.into_iter().for_each(|(addr, i)| each(addr, i));
    }
    let mut order: Vec<(u32, u32)> = addrs
        .iter()
        .zip(0u32..)
        .map(|(&addr, i)| ((addr - low) as u32, i))
        .collect();
    radsort::sort_by_key(&mut order, |&(offset, _)| offset);
    for (offset, i) in order {
        each(low + u64::from(offset), i as usize);
    }
}

#[cfg(test)]
mod tests {
    use super::in_address_order;

    fn address_order(addrs: &[u64]) -> Vec<(u64, usize)> {
        let mut order = Vec::new();
        in_address_order(addrs, |addr, i| order.push((addr, i)));
        order
    }

    #[test]
    fn addresses_come_in_order_with_their_positions() {
        // A span under 4 GiB (radix-sorted offsets) and not (pairs).
        for addrs in [
            vec![0x1010, 0x1000, 0x1008, 0x1000, 0xffff_ffff],
            vec![u64::MAX, 0, 5, 1 << 63, 5],
        ] {
            let order = address_order(&addrs);
            assert_eq!(order.len(), addrs.len());
            assert!(order.windows(2).all(|w| w[0].0 <= w[1].0));
            assert!(order.iter().all(|&(addr, i)| addrs[i] == addr));
            let mut positions: Vec<usize> = order.iter().map(|&(_, i)| i).collect();
            positions.sort_unstable();
            assert_eq!(positions, (0..addrs.len()).collect::<Vec<_>>());
        }
        assert!(address_order(&[]).is_empty());
    }
}
