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
//!
//! Extraction's peak memory is several times what it reads (names demangled
//! and encoded), so only files with small symbol tables (and DWARF) are
//! extracted here: [`prepare_upload`] sends a larger file's image instead,
//! its unread sections marked empty, zstd-compressed as it is read, for the
//! backend to extract. That is the same information as the ksym (symbol
//! tables, and with DWARF the line tables; never code or data), held as
//! what was read plus its compressed copy, and a fraction of the CPU.

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

/// Which files [`prepare_upload`] extracts here: those with at most this
/// many bytes of symbol tables and (when DWARF is wanted) of DWARF. A file
/// with more goes to the backend as a sparse image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalLimits {
    /// Bytes of symbol and string tables.
    pub symbol_bytes: u64,
    /// Bytes of DWARF.
    pub dwarf_bytes: u64,
}

impl Default for LocalLimits {
    /// Extraction's peak is about 5.5 times the symbol bytes (45 MB for
    /// 8 MiB) and 2.2 times the DWARF (35 MB for 16 MiB): with the
    /// sampler's own 80 MB, the agent stays under 150 MB.
    fn default() -> Self {
        LocalLimits {
            symbol_bytes: 8 << 20,
            dwarf_bytes: 16 << 20,
        }
    }
}
/// Largest file sent as an image: the backend's limit on an ELF upload,
/// decompressed (`actors/src/http/body.rs`, `SYMBOLS_BODY`).
const MAX_IMAGE_BYTES: u64 = 1 << 30;
/// Bytes at each end of a file without a build id that its file id hashes
/// (`kiln_model::FileId::of_file`).
const FILE_ID_ENDS: u64 = 4096;
/// zstd level of a sparse image: fast, and the unread sections, zeros,
/// cost next to nothing at any level.
const IMAGE_ZSTD_LEVEL: i32 = 3;

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

/// What to send the backend for a file.
#[derive(Debug)]
pub enum PreparedSymbols {
    /// Symbols extracted here.
    Ksym(ExtractedSymbols),
    /// The file's (or its debug file's) image, zstd-compressed, holding
    /// only its headers, symbol tables, notes and (when wanted) DWARF; the
    /// sections not read are marked `SHT_NOBITS`. An ELF upload: the
    /// backend extracts it.
    Image(SparseImage),
}

/// A sparse ELF image, compressed.
#[derive(Debug)]
pub struct SparseImage {
    /// The zstd stream.
    pub zstd: Vec<u8>,
    /// Whether DWARF is in it.
    pub dwarf: bool,
    /// Whether it is the debug file's image.
    pub used_debug_file: bool,
    /// Bytes read from the file.
    pub bytes_read: u64,
}

/// The symbols of the open ELF `file` ready to send: extracted here when
/// its symbol tables (and DWARF, with `dwarf`) are within `local`, else
/// as a sparse image for the backend to extract
/// ([`PreparedSymbols::Image`]). The backend checks an image's file id:
/// for a file without a build id (`has_build_id` false) that is a hash of
/// its first and last 4 KiB, so the image keeps those bytes too.
pub fn prepare_upload(
    file: &File,
    name: &Path,
    debug: Option<(&Path, &File)>,
    dwarf: bool,
    has_build_id: bool,
    local: LocalLimits,
) -> Result<PreparedSymbols, SymbolsError> {
    let main = Sparse::load(file)?;
    let debug_image = debug.and_then(|(path, debug)| match Sparse::load(debug) {
        Ok(image) => Some((image, debug)),
        Err(e) => {
            tracing::debug!(path = %path.display(), error = %e, "debug file not used");
            None
        }
    });
    // The image sent is the debug file's when there is one: it has the
    // symbol table (and DWARF) a stripped file lacks, under the same id.
    let (image, from, used_debug_file) = match debug_image {
        Some((image, debug)) => (image, debug, true),
        None => (main, file, false),
    };
    let with_dwarf = dwarf && image.dwarf_bytes > 0 && image.dwarf_bytes <= MAX_DWARF_BYTES;
    let small = image.symbol_bytes <= local.symbol_bytes
        && (!with_dwarf || image.dwarf_bytes <= local.dwarf_bytes);
    // An image is the file's size once the backend decompresses it: past
    // its limit on an ELF upload, extracting here (within
    // MAX_SYMBOL_BYTES) is the only way to names.
    let too_big_to_send = image.image.len() as u64 > MAX_IMAGE_BYTES;
    if small || too_big_to_send {
        drop(image);
        return extract_symbols(file, name, debug, dwarf).map(PreparedSymbols::Ksym);
    }
    let mut image = image;
    let mut bytes_read = image.read_symbols(from)?;
    if !has_build_id {
        bytes_read += image.read_ends(from)?;
    }
    if with_dwarf {
        bytes_read += image.read_dwarf(from)?;
    } else if has_build_id {
        image.mark_dwarf_empty()?;
    }
    // Without a build id the DWARF sections not sent stay zeros: marking
    // them would change the section headers, which the last 4 KiB (part
    // of the file id) usually hold. The extractor reads zeros as no DWARF.
    let zstd = zstd::encode_all(image.image.bytes(), IMAGE_ZSTD_LEVEL)?;
    drop(image);
    release_freed_memory();
    Ok(PreparedSymbols::Image(SparseImage {
        zstd,
        dwarf: with_dwarf,
        used_debug_file,
        bytes_read,
    }))
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
    /// Where the DWARF sections' `sh_type` words are in the image, and
    /// whether the file is big-endian: to mark them empty.
    dwarf_types: Vec<u64>,
    big_endian: bool,
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
            dwarf_types: Vec::new(),
            // e_ident[EI_DATA], byte 5.
            big_endian: ident[5] == elf::ELFDATA2MSB,
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
        for (index, section) in sections.iter().enumerate() {
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
                // sh_type is the second word of a section header, in both
                // classes.
                self.dwarf_types.push(shoff + index as u64 * shentsize + 4);
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

    /// Marks the DWARF sections `SHT_NOBITS`, as a stripped file's are:
    /// their bytes were not read, and zeros are no DWARF to a reader.
    fn mark_dwarf_empty(&mut self) -> io::Result<()> {
        let nobits = match self.big_endian {
            true => elf::SHT_NOBITS.to_be_bytes(),
            false => elf::SHT_NOBITS.to_le_bytes(),
        };
        let len = self.image.len() as u64;
        for &at in &self.dwarf_types {
            if at + 4 > len {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "a section header past the end of the file",
                ));
            }
            self.image.bytes_mut()[at as usize..at as usize + 4].copy_from_slice(&nobits);
        }
        Ok(())
    }

    /// Reads the file's first and last [`FILE_ID_ENDS`] bytes: what its
    /// file id hashes when it has no build id.
    fn read_ends(&mut self, file: &File) -> io::Result<u64> {
        let len = self.image.len() as u64;
        let n = FILE_ID_ENDS.min(len);
        fill(file, &mut self.image, 0, n)?;
        fill(file, &mut self.image, len - n, n)?;
        Ok(2 * n)
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
