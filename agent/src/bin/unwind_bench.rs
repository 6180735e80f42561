//! `unwind_bench`: what building the agent's unwind tables costs, per file,
//! on the biggest libraries at hand. No root needed.
//!
//! For each file (by default: libc, libstdc++, Debian's LLVM, and the
//! rustc driver and LLVM libraries of every installed Rust toolchain) it
//! reports the file's size and `.eh_frame` bytes, the table's rows and the
//! kernel memory it takes once loaded (8 bytes a row), the median time to
//! build it (`--runs`), rows per second, and the time to read it back from
//! the on-disk table cache, which is what a restarted agent pays instead.
//!
//! ```text
//! target/release/unwind_bench [--runs 3] [FILE...]
//! ```

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use kiln_agent::UnwindTable;

#[derive(Parser)]
#[command(about = "Times building the agent's unwind tables of big libraries")]
struct Args {
    /// Builds per file; the median is reported.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Files to build tables of (default: the biggest libraries found).
    files: Vec<PathBuf>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let files = if args.files.is_empty() {
        default_files()
    } else {
        args.files
    };
    println!(
        "{:<48} {:>9} {:>10} {:>9} {:>9} {:>10} {:>10} {:>9}",
        "file", "MiB", "eh_frame", "rows", "table", "build", "rows/s", "cached"
    );
    for path in files {
        let size = std::fs::metadata(&path)
            .with_context(|| format!("{}", path.display()))?
            .len();
        let eh_frame = eh_frame_bytes(&path)?;
        let mut times = Vec::new();
        let mut table = UnwindTable::default();
        for _ in 0..args.runs.max(1) {
            let started = Instant::now();
            table = UnwindTable::from_path(&path, u64::MAX)
                .with_context(|| format!("table of {}", path.display()))?;
            times.push(started.elapsed());
        }
        times.sort();
        let build = times[times.len() / 2];
        let cached = cache_round_trip(&table)?;
        let name = path.file_name().map_or_else(
            || path.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        println!(
            "{:<48} {:>9.1} {:>9}K {:>9} {:>8}K {:>10} {:>10.0} {:>9}",
            name,
            size as f64 / (1 << 20) as f64,
            eh_frame / 1024,
            table.len(),
            table.kernel_bytes() / 1024,
            format!("{:.1?}", build),
            table.len() as f64 / build.as_secs_f64(),
            format!("{:.1?}", cached),
        );
    }
    Ok(())
}

/// Libraries from small to the largest this machine has.
fn default_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = [
        "/lib/x86_64-linux-gnu/libc.so.6",
        "/lib/x86_64-linux-gnu/libstdc++.so.6",
        "/lib/x86_64-linux-gnu/libLLVM-15.so.1",
    ]
    .iter()
    .map(PathBuf::from)
    .filter(|p| p.exists())
    .collect();
    let toolchains = std::env::var_os("RUSTUP_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".rustup")))
        .map(|r| r.join("toolchains"));
    if let Some(Ok(dirs)) = toolchains.map(std::fs::read_dir) {
        // One toolchain is enough: they ship the same libraries.
        if let Some(lib) = dirs
            .filter_map(Result::ok)
            .map(|d| d.path().join("lib"))
            .next()
        {
            let mut big: Vec<PathBuf> = std::fs::read_dir(&lib)
                .into_iter()
                .flatten()
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| {
                    let name = p.file_name().unwrap_or_default().to_string_lossy();
                    (name.starts_with("librustc_driver") || name.starts_with("libLLVM.so"))
                        && std::fs::metadata(p).is_ok_and(|m| m.len() > 1 << 20)
                })
                .collect();
            big.sort();
            files.extend(big);
        }
    }
    files
}

fn eh_frame_bytes(path: &std::path::Path) -> anyhow::Result<u64> {
    use object::{Object, ObjectSection};
    let file = std::fs::File::open(path)?;
    let cache = object::ReadCache::new(file);
    let elf = object::File::parse(&cache)?;
    Ok(elf.section_by_name(".eh_frame").map_or(0, |s| s.size()))
}

/// Time to read `table` back from the on-disk format the agent's cache
/// keeps (written once here, read once, timed).
fn cache_round_trip(table: &UnwindTable) -> anyhow::Result<Duration> {
    let path = std::env::temp_dir().join(format!("kiln-unwind-bench-{}", std::process::id()));
    kiln_agent::save_unwind_table(table, &path)?;
    let started = Instant::now();
    let back = kiln_agent::load_unwind_table(&path);
    let took = started.elapsed();
    let _ = std::fs::remove_file(&path);
    let back = back?;
    anyhow::ensure!(back == *table, "the cached table reads back different");
    Ok(took)
}
