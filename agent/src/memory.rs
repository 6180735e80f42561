//! Reading another process's memory: the interpreter state that eBPF
//! walked is read again here to name its frames (CPython's code objects,
//! the JVM's methods), and a JVM's own description of its structs.

use std::io;

/// Memory of one process, read by address.
pub trait Memory {
    /// Fills `buf` from `addr`; an error when any byte of it cannot be read.
    fn read(&self, addr: u64, buf: &mut [u8]) -> io::Result<()>;

    /// A little-endian u64 at `addr`.
    fn u64_at(&self, addr: u64) -> io::Result<u64> {
        let mut b = [0u8; 8];
        self.read(addr, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// A little-endian u32 at `addr`.
    fn u32_at(&self, addr: u64) -> io::Result<u32> {
        let mut b = [0u8; 4];
        self.read(addr, &mut b)?;
        Ok(u32::from_le_bytes(b))
    }
}

/// Whether a failed read says the process has exited (`process_vm_readv`'s
/// ESRCH: its memory is gone, zombie or reaped), rather than that the
/// address is not mapped.
pub fn process_exited(error: &io::Error) -> bool {
    error.raw_os_error() == Some(libc::ESRCH)
}

/// A live process's memory, read with `process_vm_readv` (one syscall per
/// read, no file descriptor held: the process may exit at any time).
#[derive(Debug, Clone, Copy)]
pub struct ProcessMemory {
    pid: u32,
}

impl ProcessMemory {
    /// The memory of process `pid`.
    pub fn new(pid: u32) -> Self {
        ProcessMemory { pid }
    }
}

impl Memory for ProcessMemory {
    fn read(&self, addr: u64, buf: &mut [u8]) -> io::Result<()> {
        if buf.is_empty() {
            return Ok(());
        }
        let local = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        let remote = libc::iovec {
            iov_base: addr as *mut libc::c_void,
            iov_len: buf.len(),
        };
        // SAFETY: `local` describes `buf`, which is valid for writes of
        // its length for the whole call; `remote` is only an address in
        // the other process, which the kernel checks.
        let n =
            unsafe { libc::process_vm_readv(self.pid as libc::pid_t, &local, 1, &remote, 1, 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if n as usize != buf.len() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("read {n} of {} bytes at {addr:#x}", buf.len()),
            ));
        }
        Ok(())
    }
}

/// Memory made of a few regions, for tests: an interpreter's structures
/// laid out as a given version lays them out, without that interpreter.
#[derive(Debug, Default, Clone)]
pub struct MemoryImage {
    regions: Vec<(u64, Vec<u8>)>,
    /// Every read fails as a read of an exited process's does.
    exited: bool,
}

impl MemoryImage {
    /// An empty image.
    pub fn new() -> Self {
        MemoryImage::default()
    }

    /// Puts `bytes` at `addr`.
    pub fn put(&mut self, addr: u64, bytes: &[u8]) -> &mut Self {
        self.regions.push((addr, bytes.to_vec()));
        self
    }

    /// Puts a little-endian u64 at `addr`.
    pub fn put_u64(&mut self, addr: u64, value: u64) -> &mut Self {
        self.put(addr, &value.to_le_bytes())
    }

    /// Puts a little-endian u32 at `addr`.
    pub fn put_u32(&mut self, addr: u64, value: u32) -> &mut Self {
        self.put(addr, &value.to_le_bytes())
    }

    /// Makes every read fail from now on, as the process had exited.
    pub fn exit(&mut self) -> &mut Self {
        self.exited = true;
        self
    }
}

impl Memory for MemoryImage {
    fn read(&self, addr: u64, buf: &mut [u8]) -> io::Result<()> {
        if self.exited {
            return Err(io::Error::from_raw_os_error(libc::ESRCH));
        }
        // The last region written that holds the whole range, when no
        // later one overlaps it: one copy.
        let end = addr.saturating_add(buf.len() as u64);
        for (start, bytes) in self.regions.iter().rev() {
            let region_end = start.saturating_add(bytes.len() as u64);
            if *start <= addr && end <= region_end {
                let off = (addr - start) as usize;
                buf.copy_from_slice(&bytes[off..off + buf.len()]);
                return Ok(());
            }
            if *start < end && addr < region_end {
                break; // a later write covers part of it: byte by byte
            }
        }
        // Byte by byte from the last region written that holds it, so that
        // later writes shadow earlier ones, as in memory.
        for (i, out) in buf.iter_mut().enumerate() {
            let at = addr.wrapping_add(i as u64);
            *out = self
                .regions
                .iter()
                .rev()
                .find_map(|(start, bytes)| {
                    let off = at.checked_sub(*start)?;
                    bytes.get(usize::try_from(off).ok()?).copied()
                })
                .ok_or_else(|| {
                    io::Error::new(
                        io::ErrorKind::NotFound,
                        format!("{at:#x} is not in the image"),
                    )
                })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_memory_through_the_kernel() {
        let value: u64 = 0x1122_3344_5566_7788;
        let mem = ProcessMemory::new(std::process::id());
        assert_eq!(mem.u64_at(&value as *const u64 as u64).unwrap(), value);
        assert!(mem.u64_at(8).is_err(), "page zero is never mapped");
    }

    #[test]
    fn image_regions_shadow_and_bound() {
        let mut img = MemoryImage::new();
        img.put_u64(0x1000, 1).put_u32(0x1000, 7);
        assert_eq!(img.u64_at(0x1000).unwrap(), 7);
        assert!(img.u64_at(0x1004).is_err(), "runs past the region");
    }
}
