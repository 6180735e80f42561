//! Kernel symbols from `/proc/kallsyms`, to name kernel frames in the
//! agent: the backend has no copy of this host's kernel.

use std::fs;
use std::io;
use std::sync::Arc;

/// The module name of symbols of the kernel image, as perf writes it.
pub const KERNEL_MODULE: &str = "[kernel.kallsyms]";

/// Why the kernel symbols could not be read.
#[derive(Debug, thiserror::Error)]
pub enum KallsymsError {
    /// `/proc/kallsyms` could not be read.
    #[error("reading /proc/kallsyms")]
    Read(#[source] io::Error),
    /// Every address is zero: kernel.kptr_restrict hides them from us.
    #[error(
        "/proc/kallsyms shows no addresses (kernel.kptr_restrict); kernel frames will be \
         unnamed: run as root with CAP_SYSLOG, or set kernel.kptr_restrict=0"
    )]
    Hidden,
}

/// A kernel symbol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelSymbol {
    /// Start address.
    pub addr: u64,
    /// Function name.
    pub name: Arc<str>,
    /// `[kernel.kallsyms]` or `[module]`.
    pub module: Arc<str>,
}

/// Text symbols sorted by address.
#[derive(Debug, Default)]
pub struct Kallsyms {
    symbols: Vec<KernelSymbol>,
}

impl Kallsyms {
    /// Reads `/proc/kallsyms`.
    pub fn load() -> Result<Self, KallsymsError> {
        let text = fs::read_to_string("/proc/kallsyms").map_err(KallsymsError::Read)?;
        let table = Self::parse(&text);
        if table.symbols.is_empty() {
            return Err(KallsymsError::Hidden);
        }
        Ok(table)
    }

    /// Parses kallsyms text, keeping text (code) symbols with an address.
    pub fn parse(text: &str) -> Self {
        let kernel: Arc<str> = Arc::from(KERNEL_MODULE);
        let mut modules: Vec<Arc<str>> = Vec::new();
        let mut symbols = Vec::new();
        for line in text.lines() {
            let mut fields = line.split_ascii_whitespace();
            let (Some(addr), Some(kind), Some(name)) =
                (fields.next(), fields.next(), fields.next())
            else {
                continue;
            };
            if !matches!(kind, "t" | "T" | "w" | "W") {
                continue;
            }
            let Ok(addr) = u64::from_str_radix(addr, 16) else {
                continue;
            };
            if addr == 0 {
                continue;
            }
            let module = match fields.next() {
                Some(m) => match modules.iter().find(|x| ***x == *m) {
                    Some(m) => m.clone(),
                    None => {
                        let m: Arc<str> = Arc::from(m);
                        modules.push(m.clone());
                        m
                    }
                },
                None => kernel.clone(),
            };
            symbols.push(KernelSymbol {
                addr,
                name: Arc::from(name),
                module,
            });
        }
        symbols.sort_by_key(|s| s.addr);
        Self { symbols }
    }

    /// Number of symbols.
    pub fn len(&self) -> usize {
        self.symbols.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.symbols.is_empty()
    }

    /// The symbol whose code holds `addr`: the last one starting at or
    /// before it.
    pub fn lookup(&self, addr: u64) -> Option<&KernelSymbol> {
        let i = self.symbols.partition_point(|s| s.addr <= addr);
        self.symbols.get(i.checked_sub(1)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_finds_the_enclosing_symbol() {
        let table = Kallsyms::parse(
            "ffffffff81000000 T _stext\n\
             ffffffff81001000 t do_thing\n\
             ffffffff81002000 D some_data\n\
             ffffffffc0000000 t mod_fn\t[nf_tables]\n\
             0000000000000000 A absolute\n",
        );
        assert_eq!(table.len(), 3);
        let s = table.lookup(0xffffffff81001abc).unwrap();
        assert_eq!(&*s.name, "do_thing");
        assert_eq!(&*s.module, KERNEL_MODULE);
        assert_eq!(
            &*table.lookup(0xffffffffc0000010).unwrap().module,
            "[nf_tables]"
        );
        assert!(table.lookup(0x1000).is_none());
    }

    // Guards that the kernel on this machine exposes symbols to us (root).
    #[test]
    fn this_kernel_has_symbols() {
        if unsafe_is_root() {
            let table = Kallsyms::load().unwrap();
            assert!(table.len() > 1000);
        }
    }

    fn unsafe_is_root() -> bool {
        // SAFETY: geteuid has no preconditions.
        unsafe { libc::geteuid() == 0 }
    }
}
