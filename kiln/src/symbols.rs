//! `kiln symbols …`: symbol files from the command line.

use std::io::Write;

use anyhow::Context;
use kiln_symbolizer_workers::{DebugDirs, ExtractOptions, Frame, Ksym, extract, ksym};

use crate::cli::ResolveArgs;

/// `kiln symbols resolve`: extracts the ELF's symbols, encodes them as
/// ksym and resolves through that, so that what it prints is what Kiln
/// would store.
pub fn resolve(args: ResolveArgs) -> anyhow::Result<()> {
    let mut options = ExtractOptions::default();
    if !args.debug_dirs.is_empty() {
        options.debug_dirs = DebugDirs {
            roots: args.debug_dirs,
        };
    }
    let extracted = extract(&args.elf, &options)?;
    if extracted.skipped_units > 0 {
        eprintln!(
            "kiln: warning: {} DWARF compilation units of {} could not be read; their code has fewer symbols",
            extracted.skipped_units,
            extracted
                .debug_file
                .as_deref()
                .unwrap_or(&args.elf)
                .display()
        );
    }
    if extracted.dwarf_bytes == 0 {
        eprintln!(
            "kiln: note: {} has no DWARF and no debug file was found: function names only, no files or lines",
            args.elf.display()
        );
    }
    let bytes = ksym::encode(&extracted.table);
    let symbols =
        Ksym::open(&bytes).context("the ksym encoding of these symbols does not read back")?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut frames = Vec::new();
    for &addr in &args.addrs {
        symbols.lookup(addr, &mut frames);
        if args.no_demangle {
            for f in &mut frames {
                f.function = f.mangled.or(f.function);
            }
        }
        if args.json {
            let frames: Vec<_> = frames.iter().map(json_frame).collect();
            let line = serde_json::json!({ "addr": format!("{addr:#x}"), "frames": frames });
            writeln!(out, "{line}")?;
        } else {
            writeln!(out, "{addr:#x}")?;
            if frames.is_empty() {
                writeln!(out, "    ?? (no symbols)")?;
            }
            for (i, f) in frames.iter().enumerate() {
                let inlined = if i + 1 < frames.len() {
                    " (inlined)"
                } else {
                    ""
                };
                writeln!(
                    out,
                    "    {}{inlined}\n        at {}:{}",
                    f.function.unwrap_or("??"),
                    f.path().as_deref().unwrap_or("??"),
                    f.line
                )?;
            }
        }
    }
    out.flush()?;
    Ok(())
}

fn json_frame(f: &Frame<'_>) -> serde_json::Value {
    serde_json::json!({ "function": f.function, "file": f.path(), "line": f.line })
}
