//! [`Column`]: a column of unsigned integers stored at the narrowest width
//! that holds its largest value.
//!
//! Most Flamewire columns hold small numbers (depths under 256, totals
//! under 2³²) but must still take the rare large one. Picking the width per
//! column and per graph keeps the common case at one to four bytes a value
//! on the wire while every value stays readable in place by index.

/// Unsigned integers, all at the width of the largest.
#[derive(Debug, Clone, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
#[rkyv(derive(Debug))]
pub enum Column {
    /// Every value is below 2⁸.
    U8(Vec<u8>),
    /// Every value is below 2¹⁶.
    U16(Vec<u16>),
    /// Every value is below 2³².
    U32(Vec<u32>),
    /// Any value.
    U64(Vec<u64>),
}

impl Default for Column {
    fn default() -> Self {
        Column::U8(Vec::new())
    }
}

impl Column {
    /// `values` at the narrowest width that holds them all.
    pub fn narrowest(values: &[u64]) -> Self {
        let max = values.iter().copied().max().unwrap_or(0);
        if max <= u64::from(u8::MAX) {
            Column::U8(values.iter().map(|&v| v as u8).collect())
        } else if max <= u64::from(u16::MAX) {
            Column::U16(values.iter().map(|&v| v as u16).collect())
        } else if max <= u64::from(u32::MAX) {
            Column::U32(values.iter().map(|&v| v as u32).collect())
        } else {
            Column::U64(values.to_vec())
        }
    }

    /// Number of values.
    pub fn len(&self) -> usize {
        match self {
            Column::U8(v) => v.len(),
            Column::U16(v) => v.len(),
            Column::U32(v) => v.len(),
            Column::U64(v) => v.len(),
        }
    }

    /// Whether the column is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Value `i`.
    ///
    /// # Panics
    ///
    /// When `i` is out of range.
    pub fn get(&self, i: usize) -> u64 {
        match self {
            Column::U8(v) => u64::from(v[i]),
            Column::U16(v) => u64::from(v[i]),
            Column::U32(v) => u64::from(v[i]),
            Column::U64(v) => v[i],
        }
    }

    /// Bytes a value takes.
    pub fn width(&self) -> usize {
        match self {
            Column::U8(_) => 1,
            Column::U16(_) => 2,
            Column::U32(_) => 4,
            Column::U64(_) => 8,
        }
    }
}

impl ArchivedColumn {
    /// Number of values.
    pub fn len(&self) -> usize {
        match self {
            ArchivedColumn::U8(v) => v.len(),
            ArchivedColumn::U16(v) => v.len(),
            ArchivedColumn::U32(v) => v.len(),
            ArchivedColumn::U64(v) => v.len(),
        }
    }

    /// Whether the column is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Value `i`, read in place.
    ///
    /// # Panics
    ///
    /// When `i` is out of range.
    #[inline]
    pub fn get(&self, i: usize) -> u64 {
        match self {
            ArchivedColumn::U8(v) => u64::from(v[i]),
            ArchivedColumn::U16(v) => u64::from(v[i].to_native()),
            ArchivedColumn::U32(v) => u64::from(v[i].to_native()),
            ArchivedColumn::U64(v) => v[i].to_native(),
        }
    }

    /// The largest value (0 when empty).
    pub fn max(&self) -> u64 {
        (0..self.len()).map(|i| self.get(i)).max().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_the_narrowest_width_that_holds_every_value() {
        assert_eq!(Column::narrowest(&[]).width(), 1);
        assert_eq!(Column::narrowest(&[0, 255]).width(), 1);
        assert_eq!(Column::narrowest(&[256]).width(), 2);
        assert_eq!(Column::narrowest(&[1, 70_000]).width(), 4);
        let wide = Column::narrowest(&[3, u64::MAX]);
        assert_eq!(wide.width(), 8);
        assert_eq!((wide.get(0), wide.get(1)), (3, u64::MAX));
    }

    #[test]
    fn archived_values_read_back() {
        for values in [vec![1u64, 2, 255], vec![9, 65_535], vec![7, 1 << 40]] {
            let column = Column::narrowest(&values);
            let bytes = rkyv::to_bytes::<rkyv::rancor::Error>(&column).unwrap();
            let archived = rkyv::access::<ArchivedColumn, rkyv::rancor::Error>(&bytes).unwrap();
            let back: Vec<u64> = (0..archived.len()).map(|i| archived.get(i)).collect();
            assert_eq!(back, values);
            assert_eq!(archived.max(), *values.iter().max().unwrap());
        }
    }
}
