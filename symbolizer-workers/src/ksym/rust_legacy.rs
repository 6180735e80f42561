//! Rust's legacy symbol mangling, run forwards: a legacy mangled name is
//! its path's components, each escaped and length-prefixed, then a hash
//! (`_ZN4core3ptr13drop_in_place17h0123456789abcdefE`), and the path is
//! what the demangled name (without the hash) prints. So ksym keeps only
//! the hash of such a name, and [`mangle`] makes the name again from the
//! demangled one: in a large Rust binary mangled names are most of the
//! strings, and read only when asked for. The writer keeps the hash only
//! where mangling the demangled name gives back exactly the name it was
//! given, so a name this does not cover (a component with `::` of its
//! own, v0 mangling) is kept whole. A `.llvm.<digits>` suffix, which
//! ThinLTO adds to the names of functions it makes visible across code
//! units (a twentieth of the functions of Kiln's release build), is kept
//! as text after the hash: see [`derivation`] and [`mangle_derived`].

/// Characters of a legacy hash: `h` and 16 hex digits.
const HASH_LEN: usize = 16;

/// The hash of a legacy mangled name (its 16 hex digits), when it has the
/// shape of one: `_ZN…17h<16 hex digits>E`.
pub(super) fn hash_of(mangled: &str) -> Option<&str> {
    let body = mangled.strip_prefix("_ZN")?.strip_suffix('E')?;
    let hash = body.get(body.len().checked_sub(HASH_LEN)?..)?;
    let before = body.get(..body.len() - HASH_LEN)?;
    (before.ends_with("17h") && hash.bytes().all(|b| b.is_ascii_hexdigit())).then_some(hash)
}

/// The suffix ThinLTO puts after the names of the local functions it
/// makes visible across code units: `.llvm.` and a number.
const LLVM_SUFFIX: &str = ".llvm.";

/// How `mangled` is made from the demangled `name`, when it is a legacy
/// name that [`mangle_derived`] gives back: its hash and what follows
/// the hash's `E` (a `.llvm.` suffix, or nothing).
pub(super) fn derivation<'m>(name: &str, mangled: &'m str) -> Option<(&'m str, &'m str)> {
    let at = mangled.find(LLVM_SUFFIX).unwrap_or(mangled.len());
    let (base, suffix) = mangled.split_at(at);
    let hash = hash_of(base)?;
    (mangle(name, hash) == base).then_some((hash, suffix))
}

/// The legacy mangled name of `path` from `text`, which ksym keeps in
/// place of the name: a hash, then whatever followed it (see
/// [`derivation`]).
pub(super) fn mangle_derived(path: &str, text: &str) -> String {
    match text.split_at_checked(HASH_LEN) {
        Some((hash, suffix)) => mangle(path, hash) + suffix,
        None => mangle(path, text),
    }
}

/// The value of a hash as [`hash_of`] gives it, when writing the value
/// in lower-case hex gives the hash back (rustc writes them so).
pub(super) fn hash_value(hash: &str) -> Option<u64> {
    let lower = hash.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    u64::from_str_radix(hash, 16)
        .ok()
        .filter(|_| lower && hash.len() == HASH_LEN)
}

/// The legacy mangled name of the function `path` (a demangled name
/// without its hash, components joined by `::`) with `hash`.
pub(super) fn mangle(path: &str, hash: &str) -> String {
    let mut out = String::with_capacity(path.len() + 2 * HASH_LEN);
    out.push_str("_ZN");
    let mut component = String::new();
    for part in components(path) {
        component.clear();
        let underscore = escape(part, &mut component);
        out.push_str(&(component.len() + usize::from(underscore)).to_string());
        if underscore {
            out.push('_');
        }
        out.push_str(&component);
    }
    out.push_str("17h");
    out.push_str(hash);
    out.push('E');
    out
}

/// The components of `path`: split at each `::` outside angle brackets
/// (a component such as `<T as core::fmt::Debug>` keeps its own).
fn components(path: &str) -> impl Iterator<Item = &str> {
    let mut depth = 0i32;
    let mut start = 0;
    let bytes = path.as_bytes();
    let mut i = 0;
    std::iter::from_fn(move || {
        while i < bytes.len() {
            match bytes[i] {
                b'<' => depth += 1,
                b'>' => depth -= 1,
                b':' if depth == 0 && bytes.get(i + 1) == Some(&b':') => {
                    let part = &path[start..i];
                    i += 2;
                    start = i;
                    return Some(part);
                }
                _ => {}
            }
            i += 1;
        }
        (start <= path.len()).then(|| {
            let part = &path[start..];
            start = path.len() + 1;
            part
        })
    })
}

/// Escapes one component as rustc's legacy mangling does, into `out`;
/// returns whether it must be prefixed with `_` (it does not start as an
/// identifier would).
fn escape(part: &str, out: &mut String) -> bool {
    for c in part.chars() {
        match c {
            '@' => out.push_str("$SP$"),
            '*' => out.push_str("$BP$"),
            '&' => out.push_str("$RF$"),
            '<' => out.push_str("$LT$"),
            '>' => out.push_str("$GT$"),
            '(' => out.push_str("$LP$"),
            ')' => out.push_str("$RP$"),
            ',' => out.push_str("$C$"),
            '-' | ':' => out.push('.'),
            'm' if out.ends_with(".llv") => out.push_str("$u6d$"),
            'a'..='z' | 'A'..='Z' | '0'..='9' | '_' | '.' | '$' => out.push(c),
            _ => {
                out.push_str("$u");
                out.push_str(&format!("{:x}", u32::from(c)));
                out.push('$');
            }
        }
    }
    out.bytes()
        .next()
        .is_some_and(|b| b != b'_' && !b.is_ascii_alphabetic())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Real names from Kiln's own release build, and the demangler's view
    /// of them: mangling the demangled name gives each back.
    #[test]
    fn demangled_names_mangle_back() {
        for mangled in [
            "_ZN4core3ptr13drop_in_place17h0123456789abcdefE",
            "_ZN70_$LT$alloc..vec..Vec$LT$T$C$A$GT$$u20$as$u20$core..ops..drop..Drop$GT$4drop17h8f3c2a1b0d9e7f65E",
            "_ZN9utf8_iter7handler29Utf8CharsWithHandler$LT$H$GT$13next_fallback17h3d42fadbf9421522E",
            "_ZN100_$LT$$LP$T0$C$T1$C$T2$C$T3$C$T4$RP$$u20$as$u20$scylla_cql_core..deserialize..row..DeserializeRow$GT$10type_check28_$u7b$$u7b$closure$u7d$$u7d$17he09a12231d452ef2E",
            "_ZN100_$LT$$RF$mut$u20$serde_json..ser..Serializer$LT$W$C$F$GT$$u20$as$u20$serde_core..ser..Serializer$GT$11collect_str17hfe0c49f837535501E",
        ] {
            let demangled = format!("{:#}", rustc_demangle::demangle(mangled));
            let hash = hash_of(mangled).expect("a legacy name");
            assert_eq!(mangle(&demangled, hash), mangled, "{demangled}");
        }
    }

    #[test]
    fn other_names_have_no_hash() {
        for name in [
            "_ZN3foo3barEi",
            "_RNvCs1234_4kiln4main",
            "main",
            "_ZN4core3ptr13drop_in_place17h0123456789abcdefE.llvm.123",
            "_ZN4core3ptr13drop_in_place17hxyz3456789abcdefE",
        ] {
            assert_eq!(hash_of(name), None, "{name}");
        }
        assert_eq!(
            hash_of("_ZN3foo17h0123456789abcdefE"),
            Some("0123456789abcdef")
        );
    }

    /// A ThinLTO suffix follows the hash; without a whole hash in front
    /// (a damaged file's text) the text is mangled as the hash.
    #[test]
    fn llvm_suffixes_are_kept_after_the_hash() {
        let mangled = "_ZN4core3ptr13drop_in_place17h0123456789abcdefE.llvm.123";
        let name = "core::ptr::drop_in_place";
        let (hash, suffix) = derivation(name, mangled).expect("derived");
        assert_eq!((hash, suffix), ("0123456789abcdef", ".llvm.123"));
        assert_eq!(mangle_derived(name, &format!("{hash}{suffix}")), mangled);
        assert_eq!(derivation("core::ptr::other", mangled), None);
        assert_eq!(
            mangle_derived("f", "abc"),
            "_ZN1f17habcE",
            "a short text is mangled as a hash"
        );
    }
}
