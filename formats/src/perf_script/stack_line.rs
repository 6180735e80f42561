//! One line of a perf script stack:
//!
//! ```text
//! \t    7f1234 func+0x12 (/usr/lib/x86_64-linux-gnu/libc.so.6)
//! \tffffffff82203249 _raw_spin_unlock_irqrestore+0x19 ([kernel.kallsyms])
//! \t    55d0c4a1 std::vector<int, std::allocator<int> >::push_back(int const&) (/opt/app)
//! \t    7f00aa10 [unknown] (/tmp/plugin.so (deleted))
//! \t    7f00aa10
//! ```
//!
//! The address, then the symbol (with its `+0x` offset), then the module in
//! parentheses. Symbols may hold blanks and parentheses of their own, and a
//! module may end in ` (deleted)`, so the module is found as the last
//! balanced parenthesized group, preceded by a blank, that ends the line.

/// The fields of a stack line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct StackLine<'a> {
    /// The address, in hexadecimal without `0x`.
    pub addr: &'a str,
    /// The symbol as printed, offset included; empty when perf printed only
    /// an address (or only an address and a module).
    pub symbol: &'a str,
    /// The module as printed, without its parentheses.
    pub module: Option<&'a str>,
}

/// Parses a stack line; `None` when it does not start with a hexadecimal
/// address.
pub(super) fn parse(text: &str) -> Option<StackLine<'_>> {
    let text = text.trim();
    let (addr, rest) = match text.split_once([' ', '\t']) {
        Some((addr, rest)) => (addr, rest.trim_start()),
        None => (text, ""),
    };
    if addr.is_empty() || !addr.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let (symbol, module) = split_module(rest);
    Some(StackLine {
        addr,
        symbol,
        module,
    })
}

/// Splits `symbol (module)` into its two parts.
fn split_module(rest: &str) -> (&str, Option<&str>) {
    let Some(inner_end) = rest.len().checked_sub(1).filter(|_| rest.ends_with(')')) else {
        return (rest, None);
    };
    let mut depth = 0usize;
    // Parentheses are ASCII, so every index found here is a char boundary.
    for (i, b) in rest.bytes().enumerate().rev() {
        match b {
            b')' => depth += 1,
            b'(' => {
                depth -= 1;
                if depth == 0 {
                    let symbol = &rest[..i];
                    // `f(int)`: the group belongs to the symbol, there is no
                    // module (`perf script -F ip,sym`).
                    if !symbol.is_empty() && !symbol.ends_with([' ', '\t']) {
                        return (rest, None);
                    }
                    return (symbol.trim_end(), Some(&rest[i + 1..inner_end]));
                }
            }
            _ => {}
        }
    }
    // Unbalanced: no module that can be told apart.
    (rest, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(text: &str) -> (&str, &str, Option<&str>) {
        let l = parse(text).unwrap();
        (l.addr, l.symbol, l.module)
    }

    #[test]
    fn the_forms_perf_prints() {
        assert_eq!(
            line("\t    7f1234 func+0x12 (/usr/lib/libc.so.6)"),
            ("7f1234", "func+0x12", Some("/usr/lib/libc.so.6"))
        );
        assert_eq!(
            line("\t  55d0 std::map<int, int>::at(int const&) const (/opt/my app/bin)"),
            (
                "55d0",
                "std::map<int, int>::at(int const&) const",
                Some("/opt/my app/bin")
            )
        );
        assert_eq!(
            line("\t 7f00 [unknown] (/tmp/plugin.so (deleted))"),
            ("7f00", "[unknown]", Some("/tmp/plugin.so (deleted)"))
        );
        assert_eq!(line("\t 7f00"), ("7f00", "", None));
        assert_eq!(
            line("\t 7f00  (/lib/libc.so)"),
            ("7f00", "", Some("/lib/libc.so"))
        );
        assert_eq!(line("7f00 f(int)"), ("7f00", "f(int)", None));
        assert_eq!(line("7f00 f (a))"), ("7f00", "f (a))", None));
    }

    #[test]
    fn lines_without_an_address_are_refused() {
        assert_eq!(parse("\t  main (/bin/app)"), None);
        assert_eq!(parse("   "), None);
        assert_eq!(parse("0x7f00 main (/bin/app)"), None);
    }
}
