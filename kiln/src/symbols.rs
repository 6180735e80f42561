//! `kiln symbols …`: symbol files from the command line.

use std::io::Write;
use std::path::Path;

use anyhow::{Context, bail};
use indicatif::{ProgressBar, ProgressStyle};
use kiln_symbolizer_workers::{DebugDirs, ExtractOptions, Frame, Ksym, extract, file_id, ksym};
use ureq::Agent;

use crate::cli::{ResolveArgs, UploadArgs};
use crate::client::{agent, failure, url};

/// `kiln symbols upload`: for each file, asks whether the server has its
/// symbols (`HEAD`) and sends the file when not (`PUT`); the server
/// extracts the symbols itself. Exits non-zero when any file failed.
pub fn upload(args: UploadArgs) -> anyhow::Result<()> {
    let agent = agent();
    let mut failed = 0;
    for path in &args.files {
        match upload_one(&agent, &args, path) {
            Ok(summary) => println!("{}: {summary}", path.display()),
            Err(e) => {
                eprintln!("{}: {e:#}", path.display());
                failed += 1;
            }
        }
    }
    if failed > 0 {
        bail!("{failed} of {} files failed to upload", args.files.len());
    }
    Ok(())
}

fn upload_one(agent: &Agent, args: &UploadArgs, path: &Path) -> anyhow::Result<String> {
    let body = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    // The same id the agent gives the file, so the symbols meet its frames.
    let id = file_id(&body);
    let url = url(&args.server.server, &format!("/api/v1/symbols/{id}"), &[]);
    if !args.force {
        let response = agent
            .head(&url)
            .call()
            .with_context(|| format!("asking {}", args.server.server))?;
        match response.status().as_u16() {
            200 => {
                return Ok(format!(
                    "{id} already has symbols (skipped; --force uploads)"
                ));
            }
            404 => {}
            status => return Err(failure(status, "")),
        }
    }
    let bar = ProgressBar::new(body.len() as u64).with_style(
        ProgressStyle::with_template("{msg} [{bar:30}] {bytes}/{total_bytes}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    bar.set_message(format!("uploading {}", path.display()));
    let mut reader = bar.wrap_read(&body[..]);
    let mut response = agent
        .put(&url)
        .header("Content-Type", "application/octet-stream")
        .send(ureq::SendBody::from_reader(&mut reader))
        .with_context(|| format!("sending to {}", args.server.server))?;
    bar.finish_and_clear();
    let status = response.status().as_u16();
    let text = response.body_mut().read_to_string().unwrap_or_default();
    if status != 200 {
        return Err(failure(status, &text));
    }
    let stored: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    let ranges = stored["ranges"].as_u64().unwrap_or(0);
    let bytes = stored["bytes"].as_u64().unwrap_or(0);
    let detail = if stored["dwarf"].as_bool() == Some(false) {
        " (no DWARF: function names only)"
    } else {
        ""
    };
    Ok(format!(
        "{id} uploaded: {ranges} address ranges, {bytes} bytes stored{detail}"
    ))
}

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
