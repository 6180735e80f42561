//! Demangling of Rust (legacy and v0) and C++ (Itanium) names.

use crate::table::Function;

/// Makes a [`Function`] from a linkage (possibly mangled) name: demangled
/// when it is a Rust or C++ symbol, with the mangled name kept beside it.
pub(crate) fn function(linkage: &str) -> Function {
    match demangle(linkage) {
        Some(name) if name != linkage => Function {
            name,
            mangled: Some(linkage.to_owned()),
        },
        _ => Function {
            name: linkage.to_owned(),
            mangled: None,
        },
    }
}

/// A plain (not mangled) name, e.g. DWARF's `DW_AT_name`.
pub(crate) fn plain(name: &str) -> Function {
    Function {
        name: name.to_owned(),
        mangled: None,
    }
}

/// Demangles `name`, or returns `None` when it is not a symbol we know.
pub fn demangle(name: &str) -> Option<String> {
    // Rust first: its legacy scheme is a subset of Itanium's syntax, and
    // C++ demanglers would keep the hash and the `$LT$`-style escapes.
    if let Ok(rust) = rustc_demangle::try_demangle(name) {
        let with_hash = rust.to_string();
        let without = format!("{rust:#}");
        // A legacy Rust name ends with a `h<16 hex>` hash; without one this
        // is more likely a C++ name that happens to parse.
        if name.starts_with("_R") || with_hash != without {
            return Some(without);
        }
    }
    if name.starts_with("_Z") {
        #[cfg(gnu_demangler)]
        if name.len() <= MAX_GNU_NAME
            && let Some(demangled) = gnu::demangle(name)
        {
            return Some(demangled);
        }
        let symbol = cpp_demangle::Symbol::new(name.as_bytes()).ok()?;
        return symbol.demangle().ok();
    }
    None
}

/// Longest name handed to the GNU demangler: names come from uploaded
/// files, and real ones stay far below this (the longest of LLVM's 39k
/// exported C++ names is under 3 KiB); longer ones go to `cpp_demangle`.
#[cfg(gnu_demangler)]
const MAX_GNU_NAME: usize = 16 * 1024;

/// C++ names as `c++filt` prints them: GCC's own demangler (libiberty's
/// `cp-demangle.c`, as libstdc++ exports it), linked statically by
/// build.rs. `cpp_demangle` gets one name in eight of LLVM's library
/// wrong (empty template argument packs printed as `, >`, function
/// parameter packs dropped: `tuple<unsigned int, true>()` for
/// `tuple<unsigned int, true>(unsigned int&&)`), and a profiler that shows
/// a wrong signature misleads. The GNU demangler bounds its own recursion
/// (2048 levels), so a hostile name fails rather than overflow the stack.
#[cfg(gnu_demangler)]
mod gnu {
    use std::ffi::{CStr, CString, c_char, c_int, c_void};

    unsafe extern "C" {
        /// `abi::__cxa_demangle` (Itanium C++ ABI 3.4): a `malloc`ed,
        /// NUL-terminated string, or null with `*status` negative.
        fn __cxa_demangle(
            mangled: *const c_char,
            buffer: *mut c_char,
            length: *mut usize,
            status: *mut c_int,
        ) -> *mut c_char;
        fn free(ptr: *mut c_void);
    }

    pub(super) fn demangle(name: &str) -> Option<String> {
        let mangled = CString::new(name).ok()?;
        let mut status: c_int = 0;
        // SAFETY: `mangled` is NUL-terminated and outlives the call; a
        // null buffer asks the demangler to allocate the result, which we
        // own and free below; `status` is a valid out-pointer.
        let out = unsafe {
            __cxa_demangle(
                mangled.as_ptr(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                &mut status,
            )
        };
        if out.is_null() {
            return None;
        }
        // SAFETY: a non-null result is a NUL-terminated string the
        // demangler allocated with malloc; it is read once, then freed.
        let demangled = unsafe { CStr::from_ptr(out) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: as above; not used after this.
        unsafe { free(out.cast()) };
        (status == 0).then_some(demangled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rust_names_lose_their_hash() {
        assert_eq!(
            demangle("_ZN4core3ptr13drop_in_place17h0123456789abcdefE").as_deref(),
            Some("core::ptr::drop_in_place")
        );
    }

    #[test]
    fn cpp_names_are_demangled_and_kept() {
        let f = function("_ZN3foo3barEi");
        assert_eq!(f.name, "foo::bar(int)");
        assert_eq!(f.mangled.as_deref(), Some("_ZN3foo3barEi"));
    }

    // Guards the C++ demangler against the signatures cpp_demangle gets
    // wrong (a function parameter pack, an empty template argument pack).
    #[test]
    fn cpp_signatures_are_whole() {
        assert_eq!(
            demangle("_ZNSt5tupleIJOjEEC2IJjELb1EEEDpOT_").as_deref(),
            Some("std::tuple<unsigned int&&>::tuple<unsigned int, true>(unsigned int&&)")
        );
        assert_eq!(
            demangle("_ZSt7forwardIOSt5tupleIJOjEEEOT_RNSt16remove_referenceIS4_E4typeE")
                .as_deref(),
            Some(
                "std::tuple<unsigned int&&>&& std::forward<std::tuple<unsigned int&&>&&>\
                 (std::remove_reference<std::tuple<unsigned int&&>&&>::type&)"
            )
        );
        // Not a name: no demangling, and no crash.
        assert_eq!(demangle("_Z"), None);
        assert_eq!(demangle(&format!("_Z{}", "N".repeat(100_000))), None);
    }

    #[test]
    fn plain_c_names_stay() {
        assert_eq!(function("main"), plain("main"));
    }
}
