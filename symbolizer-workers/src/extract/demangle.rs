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

/// Demangles `name`, or returns `None` when it is not a symbol we know, or
/// when its demangled text would be longer than [`MAX_DEMANGLED`] (the
/// mangled name then stands for itself).
pub fn demangle(name: &str) -> Option<String> {
    // Rust first: its legacy scheme is a subset of Itanium's syntax, and
    // C++ demanglers would keep the hash and the `$LT$`-style escapes.
    if let Ok(rust) = rustc_demangle::try_demangle(name) {
        let with_hash = rust.to_string();
        let without = format!("{rust:#}");
        // A legacy Rust name ends with a `h<16 hex>` hash; without one this
        // is more likely a C++ name that happens to parse. (rustc-demangle
        // bounds its own output, at a size we bound further.)
        if name.starts_with("_R") || with_hash != without {
            return (without.len() <= MAX_DEMANGLED).then_some(without);
        }
    }
    if !name.starts_with("_Z") || name.len() > MAX_MANGLED {
        return None;
    }
    cpp(name)
}

/// Longest demangled name kept. A mangled name's substitutions can refer
/// to earlier ones that hold substitutions in turn, so its text can double
/// every few bytes of name (a 423-byte name demangles to 49 MB): names
/// come from files users upload, so the demanglers stop here. No name a
/// person reads in a flamegraph comes near it.
pub(crate) const MAX_DEMANGLED: usize = 64 * 1024;

/// Longest mangled C++ name demangled: real ones stay far below this (the
/// longest of LLVM's 39k exported C++ names is under 3 KiB), and the GNU
/// demangler works on the stack, in space that grows with the name.
const MAX_MANGLED: usize = 16 * 1024;

/// A C++ name as GNU's demangler prints it, where the crate links it (see
/// [`gnu`]). A name it refuses is no name: `cpp_demangle` is not asked
/// again, since what it accepts beyond GNU's is what hangs it (fuzzed
/// names keep it busy for minutes).
#[cfg(gnu_demangler)]
fn cpp(name: &str) -> Option<String> {
    gnu::demangle(name)
}

/// A C++ name as `cpp_demangle` prints it, in builds without GCC's
/// demangler: printed into a [`Bounded`] text, which stops it at
/// [`MAX_DEMANGLED`].
#[cfg(not(gnu_demangler))]
fn cpp(name: &str) -> Option<String> {
    use std::fmt::Write;
    let symbol = cpp_demangle::Symbol::new(name.as_bytes()).ok()?;
    let mut text = Bounded(String::new());
    write!(text, "{symbol}").ok()?;
    Some(text.0)
}

/// A text that refuses to grow past [`MAX_DEMANGLED`].
#[cfg(not(gnu_demangler))]
struct Bounded(String);

#[cfg(not(gnu_demangler))]
impl std::fmt::Write for Bounded {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        if self.0.len() + s.len() > MAX_DEMANGLED {
            return Err(std::fmt::Error);
        }
        self.0.push_str(s);
        Ok(())
    }
}

/// C++ names as `c++filt` prints them: GNU's demangler (libiberty's
/// `cp-demangle.c`, the one `c++filt` runs), linked statically by build.rs
/// with a shim of ours (`demangle_bounded.c`) that stops it once its text
/// passes [`MAX_DEMANGLED`]. `cpp_demangle` gets one name in eight of
/// LLVM's library wrong (empty template argument packs printed as `, >`,
/// function parameter packs dropped: `tuple<unsigned int, true>()` for
/// `tuple<unsigned int, true>(unsigned int&&)`), and a profiler that shows
/// a wrong signature misleads. The GNU demangler bounds its own recursion
/// (2048 levels), so a hostile name fails rather than overflow the stack.
#[cfg(gnu_demangler)]
mod gnu {
    use std::ffi::{CString, c_char, c_int};

    use super::MAX_DEMANGLED;

    unsafe extern "C" {
        /// `demangle_bounded.c`: 0 with the text's length in `*len`, -1
        /// when it is longer than `cap`, -2 when `mangled` is no C++ name.
        fn kiln_demangle_bounded(
            mangled: *const c_char,
            buf: *mut u8,
            cap: usize,
            len: *mut usize,
        ) -> c_int;
    }

    pub(super) fn demangle(name: &str) -> Option<String> {
        let mangled = CString::new(name).ok()?;
        let mut text: Vec<u8> = Vec::with_capacity(MAX_DEMANGLED);
        let mut len = 0usize;
        // SAFETY: `mangled` is NUL-terminated and outlives the call; the
        // shim writes at most `cap` bytes into `text`'s spare capacity,
        // which is that large, and sets `len` only on success.
        let status = unsafe {
            kiln_demangle_bounded(
                mangled.as_ptr(),
                text.as_mut_ptr(),
                text.capacity(),
                &mut len,
            )
        };
        if status != 0 {
            return None;
        }
        // SAFETY: on success the shim wrote `len <= capacity` bytes.
        unsafe { text.set_len(len) };
        Some(String::from_utf8_lossy(&text).into_owned())
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

    /// `f<A<int, int>, f<A, A>, …>`, each template argument made of the
    /// substitutions before it: a name of `levels` arguments whose text
    /// doubles every two.
    fn doubling_name(levels: usize) -> String {
        let seq_id = |n: usize| match n {
            0 => String::new(),
            n => {
                let digits = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ";
                let (mut n, mut id) = (n - 1, Vec::new());
                loop {
                    id.push(digits[n % 36]);
                    n /= 36;
                    if n == 0 {
                        break;
                    }
                }
                id.reverse();
                String::from_utf8(id).unwrap()
            }
        };
        let mut name = String::from("_Z1fI1AIiiE");
        for level in 0..levels {
            let sub = format!("S{}_", seq_id(level + 1));
            name.push_str(&format!("S_I{sub}{sub}E"));
        }
        name + "EvT_"
    }

    // Such a name of 600 bytes would demangle to terabytes. Its text is
    // refused past the bound, and the work stops there.
    #[test]
    fn names_whose_text_explodes_are_refused() {
        let short = demangle(&doubling_name(10)).expect("1.4 KB of text");
        assert!(short.starts_with("void f<A<int, int>, f<A, A>, f<A<int, int>, A<int, int> >"));
        for levels in [40, 120] {
            assert_eq!(demangle(&doubling_name(levels)), None, "{levels} levels");
        }
    }

    // Found by fuzzing the ksym reader: a real clang name (a lambda's
    // std::__invoke_r) with one length changed from 15 to 20. GCC 12's
    // libsupc++ demangler loops on it for good; libiberty refuses it.
    #[test]
    fn a_damaged_name_that_hung_gcc_is_refused() {
        let name = "_ZSt10__invoke_rIdRZ4mainE3$_0JdEENSt9enable_ifIXsr6__and_ISt6__not_\
                    ISt7is_voidIT_EESt14is_convertibleINSt20__invoke_resultIT0_JDpT1_EE4typeES5_\
                    EEE5valueES5_E4typeEOSA_DpOSB_";
        assert_eq!(demangle(name), None);
        // As it was: a name.
        let whole = name.replace("St20__invoke_result", "St15__invoke_result");
        assert!(demangle(&whole).is_some_and(|n| n.starts_with("std::enable_if<")));
    }

    #[test]
    fn plain_c_names_stay() {
        assert_eq!(function("main"), plain("main"));
    }
}
