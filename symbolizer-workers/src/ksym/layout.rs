//! Constants of the ksym layout shared by the writer and the reader.

pub const MAGIC: &[u8; 4] = b"KSYM";
/// Bumped whenever the meaning of any byte changes.
pub const VERSION: u32 = 1;

/// Sections, in header order.
pub const STARTS: usize = 0;
pub const RANGES: usize = 1;
pub const CHAINS: usize = 2;
pub const NODES: usize = 3;
pub const FUNCS: usize = 4;
pub const FILES: usize = 5;
pub const STRS: usize = 6;
pub const BLOB: usize = 7;
pub const LINES: usize = 8;
pub const SECTIONS: usize = 9;

/// Record size of each section, in bytes.
pub const RECORD: [usize; SECTIONS] = [8, 24, 8, 16, 8, 8, 8, 1, 1];

pub const HEADER_LEN: usize = 16 + 8 * SECTIONS;
