//! Demangling of Rust (legacy and v0) and C++ (Itanium) names.

use crate::table::Function;

/// Makes a [`Function`] from a linkage (possibly mangled) name: demangled
/// when it is a Rust or C++ symbol, with the mangled name kept beside it.
pub fn function(linkage: &str) -> Function {
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
pub fn plain(name: &str) -> Function {
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
        let symbol = cpp_demangle::Symbol::new(name.as_bytes()).ok()?;
        return symbol.demangle().ok();
    }
    None
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

    #[test]
    fn plain_c_names_stay() {
        assert_eq!(function("main"), plain("main"));
    }
}
