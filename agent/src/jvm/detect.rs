//! Finds a JVM among a process's mapped files: HotSpot's `libjvm.so`
//! with its exported vmStructs tables, or a JVM whose frames the agent
//! does not read (Eclipse OpenJ9, a `libjvm.so` without the tables, a
//! GraalVM native image), which its stacks then say.

use object::read::ReadRef;
use object::{Object, ObjectSymbol};

use super::vmstructs::VmSymbols;

/// Which JVM a mapped file is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JvmLibrary {
    /// HotSpot, with its tables.
    HotSpot(VmSymbols),
    /// A JVM whose frames are not read, and what it is.
    Unsupported(&'static str),
}

/// Whether a mapped file's name says it may be a JVM library: these are
/// looked for first, and read again until their JVM has started.
pub fn may_be_jvm(file_name: &str) -> bool {
    file_name == "libjvm.so" || is_openj9(file_name)
}

/// The section a GraalVM native image keeps its image heap in (the
/// objects built ahead of time). Such an executable or library has any
/// name; this section is what says what it is.
const NATIVE_IMAGE_HEAP: &str = ".svm_heap";

/// OpenJ9's VM library: `libj9vm29.so` (the number is its ABI).
fn is_openj9(file_name: &str) -> bool {
    file_name.starts_with("libj9vm") && file_name.ends_with(".so")
}

/// The JVM in ELF file `elf`, named `file_name`, or `None` when it is
/// none.
pub fn inspect<'data, R: ReadRef<'data>>(
    elf: &object::File<'data, R>,
    file_name: &str,
) -> Option<JvmLibrary> {
    if is_openj9(file_name) {
        return Some(JvmLibrary::Unsupported("Eclipse OpenJ9"));
    }
    if elf.section_by_name(NATIVE_IMAGE_HEAP).is_some() {
        return Some(JvmLibrary::Unsupported("GraalVM native image"));
    }
    if file_name != "libjvm.so" {
        return None;
    }
    let mut symbols = VmSymbols::default();
    for sym in elf.dynamic_symbols() {
        let Ok(name) = sym.name() else { continue };
        if name.starts_with("gHotSpotVM") {
            symbols.by_name.insert(name.to_owned(), sym.address());
        }
    }
    Some(match symbols.complete() {
        true => JvmLibrary::HotSpot(symbols),
        false => JvmLibrary::Unsupported("a JVM without HotSpot's vmStructs tables"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_jvm_libraries_are_opened() {
        assert!(may_be_jvm("libjvm.so"));
        assert!(may_be_jvm("libj9vm29.so"));
        assert!(!may_be_jvm("libjava.so"));
        assert!(!may_be_jvm("libjvm.so.debug"));
        assert!(!may_be_jvm("java"));
    }
}
