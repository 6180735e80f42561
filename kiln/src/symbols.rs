//! `kiln symbols …`: symbol files from the command line.

use std::borrow::Cow;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::cli::{CrawlArgs, ResolveArgs, UploadArgs};
use crate::client::{Server, each_file, local_secret, progress_bar};
use anyhow::{Context, bail};
use indicatif::{ProgressBar, ProgressStyle};
use kiln_symbolizer_workers::{
    DebugDirs, DebugMember, ExtractOptions, Frame, Ksym, SymbolBody, SymbolClient,
    SymbolClientError, SymbolScope, debug_files_in_deb, extract, file_id, ksym,
};

/// `kiln symbols upload`: for each file, asks whether the server has its
/// symbols (`HEAD`) and sends the file when not (`PUT`); the server
/// extracts the symbols itself. Exits non-zero when any file failed.
pub(crate) fn upload(args: UploadArgs) -> anyhow::Result<()> {
    let client = Server::with_api_key(&args.server)?.symbol_client();
    each_file(&args.files, "upload", |path| {
        upload_one(&client, &args, path)
    })
}

fn upload_one(client: &SymbolClient, args: &UploadArgs, path: &Path) -> anyhow::Result<String> {
    let body = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    // The same id the agent gives the file, so the symbols meet its frames.
    let id = file_id(&body);
    if !args.force && client.has(SymbolScope::Tenant, id).map_err(explain)? {
        return Ok(format!(
            "{id} already has symbols (skipped; --force uploads)"
        ));
    }
    let bar = progress_bar(body.len(), format!("uploading {}", path.display()));
    let text = client
        .put_reader(
            SymbolScope::Tenant,
            id,
            SymbolBody::Elf,
            &mut bar.wrap_read(&body[..]),
        )
        .map_err(explain)?;
    bar.finish_and_clear();
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

/// A symbol store's refusal, with what to do about the credential.
fn explain(e: SymbolClientError) -> anyhow::Error {
    match e {
        SymbolClientError::Refused { .. } => anyhow::Error::new(e)
            .context("give a key with --api-key or KILN_API_KEY; global writes need --admin-token"),
        other => other.into(),
    }
}

/// Whether `e` says the credential was refused: every other file would be
/// refused the same way.
fn refused(e: &anyhow::Error) -> bool {
    matches!(
        e.downcast_ref::<SymbolClientError>(),
        Some(SymbolClientError::Refused { .. })
    )
}

/// What a crawl did, for its summary line.
#[derive(Debug, Default)]
struct CrawlTally {
    packages: usize,
    debug_files: usize,
    uploaded: usize,
    present: usize,
    failed: usize,
}

/// `kiln symbols crawl`: uploads the build-id debug files of Debian
/// packages to the server's global store. The server extracts the symbols
/// itself (as for any upload) and keys them by the debug file's build id:
/// the same [`FileId`](kiln_symbolizer_workers::file_id) the agent gives
/// the stripped library. Exits non-zero when any file or package failed.
pub(crate) fn crawl(args: CrawlArgs) -> anyhow::Result<()> {
    let token = match &args.admin_token {
        Some(token) => Some(token.clone()),
        None => local_secret(kiln_actors::ADMIN_TOKEN_FILE)?,
    };
    let client = Server::with_bearer(&args.server, token).symbol_client();
    let downloads = Downloads::create()?;
    let mut debs = Vec::new();
    for source in &args.sources {
        debs.extend(debs_of(source, downloads.path())?);
    }
    let mut tally = CrawlTally::default();
    for deb in &debs {
        let mut members = Vec::new();
        if let Err(e) = debug_files_in_deb(deb, |m| members.push(m)) {
            eprintln!("{e:#}");
            tally.failed += 1;
            continue;
        }
        tally.packages += 1;
        tally.debug_files += members.len();
        let bar = ProgressBar::new(members.len() as u64).with_style(
            ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} debug files")
                .expect("valid template")
                .progress_chars("=> "),
        );
        let name = deb.file_name().unwrap_or_default().to_string_lossy();
        bar.set_message(name.into_owned());
        for member in members {
            match crawl_one(&client, &args, &member) {
                Ok(true) => tally.uploaded += 1,
                Ok(false) => tally.present += 1,
                // Every other file would be refused the same way.
                Err(e) if refused(&e) => {
                    bar.finish_and_clear();
                    return Err(e);
                }
                Err(e) => {
                    bar.suspend(|| eprintln!("{}: {}: {e:#}", deb.display(), member.path));
                    tally.failed += 1;
                }
            }
            bar.inc(1);
        }
        bar.finish_and_clear();
    }
    println!(
        "crawled {} packages: {} debug files, {} uploaded, {} already present, {} failed",
        tally.packages, tally.debug_files, tally.uploaded, tally.present, tally.failed
    );
    if tally.failed > 0 {
        bail!("{} debug files or packages failed", tally.failed);
    }
    Ok(())
}

/// Uploads one debug file to the global store; `false` when the store had
/// its symbols already.
fn crawl_one(
    client: &SymbolClient,
    args: &CrawlArgs,
    member: &DebugMember,
) -> anyhow::Result<bool> {
    let id = file_id(&member.data);
    if !args.force && client.has(SymbolScope::Global, id).map_err(explain)? {
        return Ok(false);
    }
    client
        .put(SymbolScope::Global, id, SymbolBody::Elf, &member.data)
        .map_err(explain)?;
    Ok(true)
}

/// The `.deb` files a crawl source names: the file itself, the `.deb`
/// files of a directory (sorted), or what `apt-get download` fetches into
/// `downloads` for a package name.
fn debs_of(source: &str, downloads: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let path = Path::new(source);
    if path.is_file() {
        return Ok(vec![path.to_owned()]);
    }
    if path.is_dir() {
        let mut debs: Vec<PathBuf> = std::fs::read_dir(path)
            .with_context(|| format!("listing {source}"))?
            .filter_map(|e| Some(e.ok()?.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "deb"))
            .collect();
        debs.sort();
        if debs.is_empty() {
            bail!("{source} holds no .deb files");
        }
        return Ok(debs);
    }
    if !is_package_spec(source) {
        bail!("{source} is neither a .deb file, a directory nor a package name");
    }
    // A directory per package, so that what it fetched is easy to find.
    let dir = downloads.join(source.replace('=', "_"));
    std::fs::create_dir_all(&dir)?;
    let out = Command::new("apt-get")
        .args(["download", "--", source])
        .current_dir(&dir)
        .output()
        .context("running apt-get download (is this a Debian system?)")?;
    if !out.status.success() {
        bail!(
            "apt-get download {source} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    debs_of(
        dir.to_str().context("temporary path is not UTF-8")?,
        downloads,
    )
}

/// Whether `text` is a Debian package name, optionally `=VERSION` (the
/// characters Debian policy allows), so that nothing else reaches apt-get.
fn is_package_spec(text: &str) -> bool {
    let (name, version) = text.split_once('=').unwrap_or((text, ""));
    let name_ok = name.len() >= 2
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "+-.".contains(c));
    let version_ok = version
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || ".+-~:".contains(c));
    name_ok && version_ok && !(text.contains('=') && version.is_empty())
}

/// A directory for downloaded packages, removed with everything in it
/// when dropped.
struct Downloads(PathBuf);

impl Downloads {
    fn create() -> anyhow::Result<Downloads> {
        let dir = std::env::temp_dir().join(format!("kiln-crawl-{}", std::process::id()));
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("creating {} for downloads", dir.display()))?;
        Ok(Downloads(dir))
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Downloads {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `kiln symbols resolve`: extracts the ELF's symbols, encodes them as
/// ksym and resolves through that, so that what it prints is what Kiln
/// would store.
pub(crate) fn resolve(args: ResolveArgs) -> anyhow::Result<()> {
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
        if args.json {
            let frames: Vec<_> = frames
                .iter()
                .map(|f| json_frame(name(f, args.no_demangle), f))
                .collect();
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
                    name(f, args.no_demangle).as_deref().unwrap_or("??"),
                    f.path().as_deref().unwrap_or("??"),
                    f.line
                )?;
            }
        }
    }
    out.flush()?;
    Ok(())
}

/// The name a frame is printed under: its mangled name with
/// `--no-demangle`, when it has one.
fn name<'a>(f: &Frame<'a>, no_demangle: bool) -> Option<Cow<'a, str>> {
    let mangled = no_demangle.then(|| f.mangled()).flatten();
    mangled.or(f.function())
}

/// One frame of `kiln symbols resolve --json`, named `function`.
fn json_frame(function: Option<Cow<'_, str>>, f: &Frame<'_>) -> serde_json::Value {
    serde_json::json!({ "function": function, "file": f.path(), "line": f.line })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn package_specs_are_checked_before_apt_sees_them() {
        for ok in [
            "libc6-dbg",
            "libssl3-dbgsym=3.0.15-1~deb12u1",
            "g++-12",
            "libstdc++6-12-dbg",
        ] {
            assert!(is_package_spec(ok), "{ok}");
        }
        for bad in ["-o", "a", "Libc", "libc6 ; rm", "x=", "x=1 2", "../x", ""] {
            assert!(!is_package_spec(bad), "{bad}");
        }
    }
}
