//! Frame names for perf script stack lines, by the rules of Brendan Gregg's
//! `stackcollapse-perf.pl` as inferno implements them with its default
//! options, so that a flamegraph of an import reads like one drawn from the
//! same file with those tools:
//!
//! 1. the `+0x…` offset is cut off the symbol;
//! 2. symbols starting with `(` are dropped (perf's process-name frames),
//!    except, in Kiln, C++'s `(anonymous namespace)::f`, which the
//!    reference tools drop too, losing real frames;
//! 3. legacy-mangled Rust symbols perf left half done are finished
//!    (`_$LT$T$u20$as$u20$X$GT$::f::h0123456789abcdef` → `<T as X>::f`);
//! 4. a Java symbol `a->b->c` (perf-map-agent's inlining) is three frames,
//!    the inlined ones suffixed `_[i]`;
//! 5. `[unknown]` in a known module becomes `[<module file name>]`;
//! 6. `;` becomes `:` (it separates frames in collapsed stacks), and the
//!    argument list is cut off (`f(int) const` → `f`), except Go's
//!    `pkg.(*T).m` and C++'s `(anonymous namespace)`;
//! 7. for a command starting with `java`, `Lcom/x/Y;` names lose the `L`.
//!
//! Kiln departs from them only where they lose or garble a frame: a line
//! with only an address, or an address and a module, is `[unknown]` or
//! `[<module>]` (they drop the former and call the latter ` `), and a
//! module path with blanks, such as `/tmp/x.so (deleted)`, is read whole
//! (they take `deleted)` for the module and the path for part of the
//! symbol). ` (deleted)` is then left out of the module's name, so a
//! replaced library's frames still match its other samples.

use std::borrow::Cow;

use kiln_model::{Frame, FrameKind};

use super::stack_line::StackLine;
use crate::module;

/// What perf prints for a symbol or module it could not resolve.
const UNKNOWN: &str = "[unknown]";

/// How C++ demanglers print a name in an unnamed namespace.
const ANONYMOUS_NAMESPACE: &str = "(anonymous namespace)";

/// Suffix of a frame inlined into the one before it (rule 4).
const INLINED_SUFFIX: &str = "_[i]";

/// Appends the frames of one stack line to `out`, leaf first (the order
/// perf prints). `java` says whether the sample's command starts with
/// `java` (rule 7).
pub(super) fn push_frames(line: &StackLine<'_>, java: bool, out: &mut Vec<Frame>) {
    let module = line
        .module
        .map(|m| m.strip_suffix(" (deleted)").unwrap_or(m));
    let symbol = if line.symbol.is_empty() {
        UNKNOWN
    } else {
        strip_offset(line.symbol)
    };
    if symbol.starts_with('(') && !symbol.starts_with(ANONYMOUS_NAMESPACE) {
        return;
    }
    let symbol = finish_rust_demangling(symbol);
    let kind = kind_of(line.addr, module);
    let module_name = module.filter(|&m| m != UNKNOWN).map(module::basename);

    let first = out.len();
    for (i, piece) in symbol.split("->").enumerate() {
        let mut name = tidy(fallback_to_module(piece, module));
        if java {
            name = tidy_java(name);
        }
        if i > 0 && !name.contains(INLINED_SUFFIX) {
            name.push_str(INLINED_SUFFIX);
        }
        out.push(Frame::Named {
            kind,
            function: name,
            module: module_name.map(str::to_owned),
            file: None,
            line: 0,
        });
    }
    // `a->b` is caller first; the stack is being built leaf first.
    out[first..].reverse();
}

/// Rule 1: `func+0x1f` → `func`.
fn strip_offset(symbol: &str) -> &str {
    match symbol.rfind("+0x") {
        Some(at) if symbol[at + 3..].bytes().all(|b| b.is_ascii_hexdigit()) => &symbol[..at],
        _ => symbol,
    }
}

/// Kernel code by its module, or, where perf knows no module, by its
/// address: on x86-64 and arm64 kernel addresses fill the top of the
/// address space and user ones never reach it.
fn kind_of(addr: &str, module: Option<&str>) -> FrameKind {
    let kernel = match module {
        Some(m) if m != UNKNOWN => module::is_kernel(m),
        _ => addr.len() == 16 && addr.starts_with("ffff"),
    };
    if kernel {
        FrameKind::Kernel
    } else {
        FrameKind::Native
    }
}

/// Rule 5.
fn fallback_to_module(function: &str, module: Option<&str>) -> String {
    match module {
        Some(m) if function == UNKNOWN && m != UNKNOWN => format!("[{}]", module::basename(m)),
        _ => function.to_owned(),
    }
}

/// Rule 6.
fn tidy(name: String) -> String {
    let mut name = if name.contains(';') {
        name.replace(';', ":")
    } else {
        name
    };
    // Depth in brackets; it goes negative on names like `operator>`, and
    // then no parenthesis counts as an argument list, as in the reference.
    let mut depth: i32 = 0;
    let mut after_dot = None;
    let mut cut = None;
    for (i, c) in name.char_indices() {
        match c {
            '<' | '{' | '[' => depth += 1,
            '>' | '}' | ']' | ')' => depth -= 1,
            '(' => {
                let go_method = after_dot == Some(i);
                let anonymous_namespace = name[i..].starts_with(ANONYMOUS_NAMESPACE);
                if depth == 0 && !go_method && !anonymous_namespace {
                    cut = Some(i);
                    break;
                }
                depth += 1;
            }
            '.' => after_dot = Some(i + 1),
            _ => {}
        }
    }
    if let Some(cut) = cut {
        name.truncate(cut);
    }
    name
}

/// Rule 7: `Lorg/x/Y:.f` → `org/x/Y:.f`.
fn tidy_java(mut name: String) -> String {
    if name.starts_with('L') && name.contains('/') {
        name.remove(0);
    }
    name
}

/// Length of the `h` and 16 hex digits that end a legacy Rust symbol.
const RUST_HASH_LEN: usize = 17;

/// The escapes of Rust's legacy mangling, after `$`.
const RUST_ESCAPES: [(&str, &str); 20] = [
    ("$SP$", "@"),
    ("$BP$", "*"),
    ("$RF$", "&"),
    ("$LT$", "<"),
    ("$GT$", ">"),
    ("$LP$", "("),
    ("$RP$", ")"),
    ("$C$", ","),
    ("$u7e$", "~"),
    ("$u20$", " "),
    ("$u27$", "'"),
    ("$u3d$", "="),
    ("$u5b$", "["),
    ("$u5d$", "]"),
    ("$u7b$", "{"),
    ("$u7d$", "}"),
    ("$u3b$", ";"),
    ("$u2b$", "+"),
    ("$u21$", "!"),
    ("$u22$", "\""),
];

/// Rule 3: perf demangles Rust's legacy symbols only partly on some
/// systems; this drops the hash, turns `..` into `::` and undoes the `$…$`
/// escapes. Symbols without the trailing hash are returned as they are.
fn finish_rust_demangling(symbol: &str) -> Cow<'_, str> {
    let Some(hash_at) = symbol.len().checked_sub(RUST_HASH_LEN) else {
        return Cow::Borrowed(symbol);
    };
    // `get` and not indexing: the cut may fall inside a multi-byte char,
    // and then it is not a hash.
    let is_hash = symbol
        .get(hash_at..)
        .and_then(|h| h.strip_prefix('h'))
        .is_some_and(|digits| digits.bytes().all(|b| b.is_ascii_hexdigit()));
    if !is_hash {
        return Cow::Borrowed(symbol);
    }
    let mut rest = &symbol[..hash_at];
    rest = rest.strip_suffix("::").unwrap_or(rest);
    if rest.starts_with("_$") {
        rest = &rest[1..];
    }

    let mut out = String::with_capacity(rest.len());
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix("..") {
            out.push_str("::");
            rest = after;
        } else if let Some(after) = rest.strip_prefix('.') {
            out.push('.');
            rest = after;
        } else if rest.starts_with('$') {
            match RUST_ESCAPES.iter().find(|(from, _)| rest.starts_with(from)) {
                Some((from, to)) => {
                    out.push_str(to);
                    rest = &rest[from.len()..];
                }
                None => {
                    // Not an escape after all: keep the rest as it is.
                    out.push_str(rest);
                    break;
                }
            }
        } else {
            let end = rest.find(['$', '.']).unwrap_or(rest.len());
            out.push_str(&rest[..end]);
            rest = &rest[end..];
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf_script::stack_line;

    fn names(text: &str, java: bool) -> Vec<String> {
        let mut out = Vec::new();
        push_frames(&stack_line::parse(text).unwrap(), java, &mut out);
        out.iter()
            .map(|f| match f {
                Frame::Named { function, .. } => function.clone(),
                Frame::Address { .. } => unreachable!("perf frames are named"),
            })
            .collect()
    }

    fn name(text: &str) -> String {
        let mut all = names(text, false);
        assert_eq!(all.len(), 1, "{all:?}");
        all.remove(0)
    }

    #[test]
    fn offsets_and_argument_lists_are_cut() {
        assert_eq!(name("1 malloc+0x2c (/lib/libc.so.6)"), "malloc");
        assert_eq!(name("1 foo+0xzz (/bin/a)"), "foo+0xzz");
        assert_eq!(
            name("1 std::vector<int, std::allocator<int> >::push_back(int const&)+0x1f (/bin/a)"),
            "std::vector<int, std::allocator<int> >::push_back"
        );
        assert_eq!(
            name("1 (anonymous namespace)::worker(void*) (/bin/a)"),
            "(anonymous namespace)::worker"
        );
        assert_eq!(
            name("1 net/http.(*Client).Do (/bin/a)"),
            "net/http.(*Client).Do"
        );
        assert_eq!(name("1 a;b (/bin/a)"), "a:b");
        assert_eq!(
            name(
                "1 std::_Function_handler<void (int), main::{lambda(int)#1}>::_M_invoke(std::_Any_data const&, int&&) (/bin/a)"
            ),
            "std::_Function_handler<void (int), main::{lambda(int)#1}>::_M_invoke"
        );
    }

    #[test]
    fn unknown_symbols_take_the_module_name() {
        assert_eq!(name("7f00 [unknown] (/usr/lib/libz.so.1)"), "[libz.so.1]");
        assert_eq!(name("7f00 [unknown] ([unknown])"), "[unknown]");
        assert_eq!(name("7f00 [unknown] (/tmp/p.so (deleted))"), "[p.so]");
        assert_eq!(name("7f00"), "[unknown]");
        assert_eq!(name("7f00  (/lib/libc.so.6)"), "[libc.so.6]");
    }

    #[test]
    fn process_name_frames_are_dropped() {
        assert!(names("1 (anonymous)+0x1 (/bin/a)", false).is_empty());
    }

    #[test]
    fn java_inlining_and_class_names() {
        assert_eq!(
            names(
                "7f00 Lcom/x/A;.run->Lcom/x/B;.step (/tmp/perf-12.map)",
                true
            ),
            ["com/x/B:.step_[i]", "com/x/A:.run"]
        );
        assert_eq!(
            names("7f00 Lcom/x/A;.run (/tmp/perf-12.map)", false),
            ["Lcom/x/A:.run"]
        );
    }

    #[test]
    fn half_demangled_rust_symbols_are_finished() {
        assert_eq!(
            name(
                "1 _$LT$std..fs..ReadDir$u20$as$u20$core..iter..Iterator$GT$::next::hc14f1750ca79129b (/bin/a)"
            ),
            "<std::fs::ReadDir as core::iter::Iterator>::next"
        );
        assert_eq!(
            name("1 std::sys::unix::fs::File::open::hb90e1c1c787080f0 (/bin/a)"),
            "std::sys::unix::fs::File::open"
        );
        // A multi-byte char where the hash would start: not a hash, no panic.
        assert_eq!(finish_rust_demangling("ééééééééééé"), "ééééééééééé");
    }

    #[test]
    fn kernel_frames_by_module_or_address() {
        let kind = |text| {
            let mut out = Vec::new();
            push_frames(&stack_line::parse(text).unwrap(), false, &mut out);
            out[0].kind()
        };
        assert_eq!(
            kind("ffffffff81000130 entry_SYSCALL_64+0x76 ([kernel.kallsyms])"),
            FrameKind::Kernel
        );
        assert_eq!(
            kind("ffffffff9aa3c8de [unknown] ([unknown])"),
            FrameKind::Kernel
        );
        assert_eq!(
            kind("7ffd1234 __vdso_clock_gettime+0x1 ([vdso])"),
            FrameKind::Native
        );
        assert_eq!(kind("7f00 [unknown] ([unknown])"), FrameKind::Native);
    }
}
