//! Symbol extraction on the agent's host, in bounded memory.
//!
//! The extractor (`kiln_symbolizer_workers`) reads an ELF from one byte
//! slice. Reading a whole 150 MB library into memory for its 20 MB of
//! symbol tables would make the agent's peak memory that of the largest
//! file any process maps. Instead the slice is an anonymous mapping the
//! size of the file, which costs nothing until written, and only what the
//! extractor reads is read into it: the ELF and section headers, the
//! symbol and string tables, notes, a Go binary's `.gopclntab`, and with
//! DWARF the `.debug_*` sections. Code and data stay unread zero pages.
//! Files whose wanted sections exceed a budget are refused (symbols), or
//! lose their DWARF (logged), rather than take the agent's memory.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use kiln_symbolizer_workers::{
    ExtractError, ExtractOptions, Ksym, KsymError, extract_with_debug_file, ksym,
};
use object::elf;
use object::read::elf::{FileHeader, SectionHeader};

/// Most bytes of symbol and string tables (and `.gopclntab`) read from a
/// file and its debug file together. The largest libraries seen have
/// tens of MB (librustc_driver: 23 MB), and extraction's peak memory is
/// about 5.5 times what it reads (150 MB for librustc_driver): this
/// bounds it near 350 MB.
pub(super) const MAX_SYMBOL_BYTES: u64 = 64 << 20;
/// Most bytes of DWARF read from a file (or its debug file) with
/// `--upload-dwarf`; past it the file's symbols go without lines. Peak
/// memory with DWARF is about 2.2 times what is read (350 MB for 160 MB
/// of DWARF).
pub(super) const MAX_DWARF_BYTES: u64 = 256 << 20;

/// Why symbols could not be extracted.
#[derive(Debug, thiserror::Error)]
pub enum SymbolsError {
    /// The file could not be read.
    #[error("reading the file")]
    Read(#[from] io::Error),
    /// Not an ELF file the agent reads (empty, or damaged headers).
    #[error("not an ELF file: {0}")]
    NotElf(String),
    /// Its symbol tables are larger than the agent reads.
    #[error("its symbol tables take {bytes} bytes, more than the {MAX_SYMBOL_BYTES} read")]
    TooBig {
        /// Bytes of symbol tables.
        bytes: u64,
    },
    /// The extractor refused it.
    #[error(transparent)]
    Extract(#[from] ExtractError),
    /// The ksym written does not read back (a bug).
    #[error("the ksym written does not verify: {0}")]
    Ksym(#[from] KsymError),
}

/// The symbols of a file, as a ksym.
#[derive(Debug)]
pub struct ExtractedSymbols {
    /// The ksym bytes (uncompressed).
    pub ksym: Vec<u8>,
    /// Address ranges in it.
    pub ranges: usize,
    /// Whether DWARF went in.
    pub dwarf: bool,
    /// Whether the debug file given was used.
    pub used_debug_file: bool,
    /// Bytes read from the file and the debug file: what extraction held
    /// of them.
    pub bytes_read: u64,
}

/// Extracts the symbols of the open ELF `file` (`name` names it in
/// errors) and of its separate debug file, when given, as a ksym: the
/// symbol tables, and with `dwarf` the DWARF line tables and inline chains
/// (files whose DWARF exceeds [`MAX_DWARF_BYTES`] go without). Only the
/// sections used are read (see the module docs).
pub fn extract_symbols(
    file: &File,
    name: &Path,
    debug: Option<(&Path, &File)>,
    dwarf: bool,
) -> Result<ExtractedSymbols, SymbolsError> {
    let mut main = Sparse::load(file)?;
    let mut debug_image = match debug {
        Some((path, debug)) => match Sparse::load(debug) {
            Ok(image) => Some((path, image)),
            // A debug file that does not read is as good as none.
            Err(e) => {
                tracing::debug!(path = %path.display(), error = %e, "debug file not used");
                None
            }
        },
        None => None,
    };
    let symbol_bytes = main.symbol_bytes + debug_image.as_ref().map_or(0, |(_, d)| d.symbol_bytes);
    if symbol_bytes > MAX_SYMBOL_BYTES {
        return Err(SymbolsError::TooBig {
            bytes: symbol_bytes,
        });
    }
    let mut bytes_read = main.read_symbols(file)?;
    if let Some((_, image)) = &mut debug_image
        && let Some((_, debug)) = debug
    {
        bytes_read += image.read_symbols(debug)?;
    }
    let mut with_dwarf = false;
    if dwarf {
        // The extractor reads the debug file's DWARF when it has some,
        // else the file's: only that one is read.
        let source = match &mut debug_image {
            Some((_, image)) if image.dwarf_bytes > 0 => debug.map(|(_, f)| (image, f)),
            _ => Some((&mut main, file)),
        };
        if let Some((image, from)) = source {
            if image.dwarf_bytes > MAX_DWARF_BYTES {
                tracing::info!(
                    file = %name.display(),
                    dwarf_bytes = image.dwarf_bytes,
                    max = MAX_DWARF_BYTES,
                    "DWARF too large: uploading function names only"
                );
            } else if image.dwarf_bytes > 0 {
                bytes_read += image.read_dwarf(from)?;
                with_dwarf = true;
            }
        }
    }
    let options = ExtractOptions {
        no_debug_file: true,
        names_only: !with_dwarf,
        ..ExtractOptions::default()
    };
    let extracted = extract_with_debug_file(
        name,
        main.image.bytes(),
        debug_image
            .as_ref()
            .map(|(path, image)| (*path, image.image.bytes())),
        &options,
    )?;
    let used_debug_file = extracted.debug_file.is_some();
    drop(debug_image);
    drop(main);
    let bytes = ksym::encode(&extracted.table);
    drop(extracted);
    let symbols = Ksym::open(&bytes)?;
    symbols.verify()?;
    let ranges = symbols.len();
    release_freed_memory();
    Ok(ExtractedSymbols {
        ranges,
        ksym: bytes,
        dwarf: with_dwarf,
        used_debug_file,
        bytes_read,
    })
}

/// Hands the heap that extraction freed back to the kernel: its hundreds
/// of thousands of small strings (names) leave glibc's heap holding tens
/// of MB it would otherwise keep for good, and an agent's resident size
/// should be what it uses between uploads, not its largest upload's.
fn release_freed_memory() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only returns free memory; no pointer is touched.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// A file's image with only its headers read so far, and where the
/// sections extraction wants are.
struct Sparse {
    image: Zeroed,
    /// (offset, size) of symbol tables, string tables, notes, `.gopclntab`.
    symbols: Vec<(u64, u64)>,
    symbol_bytes: u64,
    /// (offset, size) of DWARF sections.
    dwarf: Vec<(u64, u64)>,
    dwarf_bytes: u64,
}

impl Sparse {
    /// Reads the headers of the ELF `file` into an image of its size and
    /// finds its sections.
    fn load(file: &File) -> Result<Sparse, SymbolsError> {
        let len = file.metadata()?.len();
        let mut image = Zeroed::new(len)?;
        fill(file, &mut image, 0, 16)?;
        let mut ident = [0u8; 16];
        let Some(read) = image.bytes().get(..16) else {
            return Err(SymbolsError::NotElf(format!("{len} bytes")));
        };
        ident.copy_from_slice(read);
        let mut sparse = Sparse {
            image,
            symbols: Vec::new(),
            symbol_bytes: 0,
            dwarf: Vec::new(),
            dwarf_bytes: 0,
        };
        // e_ident[EI_CLASS], byte 4: 32- or 64-bit.
        match (ident.get(..4), ident[4]) {
            (Some(b"\x7fELF"), elf::ELFCLASS64) => {
                sparse.find::<elf::FileHeader64<object::Endianness>>(file)?;
            }
            (Some(b"\x7fELF"), elf::ELFCLASS32) => {
                sparse.find::<elf::FileHeader32<object::Endianness>>(file)?;
            }
            _ => return Err(SymbolsError::NotElf("no ELF magic".into())),
        }
        Ok(sparse)
    }

    fn find<H: FileHeader<Endian = object::Endianness>>(
        &mut self,
        file: &File,
    ) -> Result<(), SymbolsError> {
        let bad = |e: object::Error| SymbolsError::NotElf(e.to_string());
        fill(file, &mut self.image, 0, std::mem::size_of::<H>() as u64)?;
        let (shoff, shentsize, phoff, phsize) = {
            let header = H::parse(self.image.bytes()).map_err(bad)?;
            let endian = header.endian().map_err(bad)?;
            let phsize = u64::from(header.e_phnum(endian)) * u64::from(header.e_phentsize(endian));
            (
                header.e_shoff(endian).into(),
                u64::from(header.e_shentsize(endian)),
                header.e_phoff(endian).into(),
                phsize,
            )
        };
        fill(file, &mut self.image, phoff, phsize)?;
        // The first section header holds the counts when they overflow.
        fill(file, &mut self.image, shoff, shentsize)?;
        let table_size = {
            let header = H::parse(self.image.bytes()).map_err(bad)?;
            let endian = header.endian().map_err(bad)?;
            let count = header.shnum(endian, self.image.bytes()).map_err(bad)?;
            count as u64 * shentsize
        };
        fill(file, &mut self.image, shoff, table_size)?;
        let names = {
            let header = H::parse(self.image.bytes()).map_err(bad)?;
            let endian = header.endian().map_err(bad)?;
            let headers = header
                .section_headers(endian, self.image.bytes())
                .map_err(bad)?;
            let index = header.shstrndx(endian, self.image.bytes()).map_err(bad)?;
            headers
                .get(index as usize)
                .and_then(|s| s.file_range(endian))
        };
        if let Some((offset, size)) = names {
            fill(file, &mut self.image, offset, size)?;
        }
        let header = H::parse(self.image.bytes()).map_err(bad)?;
        let endian = header.endian().map_err(bad)?;
        let sections = header.sections(endian, self.image.bytes()).map_err(bad)?;
        for section in sections.iter() {
            let Some((offset, size)) = section.file_range(endian) else {
                continue; // SHT_NOBITS: nothing in the file
            };
            let name = sections.section_name(endian, section).unwrap_or_default();
            let wanted_symbols = matches!(
                section.sh_type(endian),
                elf::SHT_SYMTAB
                    | elf::SHT_DYNSYM
                    | elf::SHT_STRTAB
                    | elf::SHT_SYMTAB_SHNDX
                    | elf::SHT_NOTE
            ) || name == b".gopclntab";
            if wanted_symbols {
                self.symbols.push((offset, size));
                self.symbol_bytes += size;
            } else if name.starts_with(b".debug_") || name.starts_with(b".zdebug_") {
                self.dwarf.push((offset, size));
                self.dwarf_bytes += size;
            }
        }
        Ok(())
    }

    fn read_symbols(&mut self, file: &File) -> io::Result<u64> {
        for &(offset, size) in &self.symbols {
            fill(file, &mut self.image, offset, size)?;
        }
        Ok(self.symbol_bytes)
    }

    fn read_dwarf(&mut self, file: &File) -> io::Result<u64> {
        for &(offset, size) in &self.dwarf {
            fill(file, &mut self.image, offset, size)?;
        }
        Ok(self.dwarf_bytes)
    }
}

/// Reads `size` bytes of `file` at `offset` into the same place of
/// `image`, clipped to the image (a file that shrank since leaves zeros).
fn fill(file: &File, image: &mut Zeroed, offset: u64, size: u64) -> io::Result<()> {
    let len = image.len() as u64;
    let start = offset.min(len);
    let end = offset.saturating_add(size).min(len);
    let buf = &mut image.bytes_mut()[start as usize..end as usize];
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], start + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Zeroed memory from an anonymous private mapping: its pages take memory
/// only once written, so an image the size of a 150 MB file costs what
/// was read into it. (An allocator's zeroed memory would do the same only
/// for allocations it happens to serve with a fresh mapping.)
struct Zeroed {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is owned by this value alone.
unsafe impl Send for Zeroed {}

impl Zeroed {
    fn new(len: u64) -> io::Result<Zeroed> {
        let len = usize::try_from(len)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "file too large"))?;
        if len == 0 {
            return Ok(Zeroed {
                ptr: std::ptr::NonNull::<u8>::dangling().as_ptr(),
                len: 0,
            });
        }
        // SAFETY: a fresh anonymous mapping, no address hint; the result is
        // checked.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Zeroed {
            ptr: ptr.cast(),
            len,
        })
    }

    fn len(&self) -> usize {
        self.len
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: `len` bytes mapped readable (or a dangling pointer for
        // 0 bytes), alive as long as self.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`, writable, and borrowed mutably through
        // self.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for Zeroed {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: the mapping made in `new`, unmapped once.
            unsafe {
                libc::munmap(self.ptr.cast(), self.len);
            }
        }
    }
}
