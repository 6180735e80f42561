//! Symbolization figures, printed as a report (`cargo bench -p
//! kiln-symbolizer-workers --bench symbolize`):
//!
//! - lookups per second on one core with warm caches, ksym against the
//!   `addr2line` crate (gimli) on the same addresses in the same run
//!   (interleaved passes, the best of each);
//! - batched lookups (`Ksym::lookup_many`, what a symbolizer worker does
//!   with one file's addresses) on the distinct addresses of each set, in
//!   their order of first appearance, against addr2line on the same
//!   addresses in that order and sorted (its locality helps it too):
//!   frames are deduplicated before they are symbolized, so a worker
//!   never sees an address twice; and the same batch answered as the
//!   symbolizer worker answers it, with owned strings per frame;
//! - time from ksym bytes to the first answer (`Ksym::open` + one lookup),
//!   and to a `KsymFile` (what the symbolizer's loader keeps: strings
//!   checked whole once), from which the lookups above are made; and the
//!   time an upgrade of the same table's version 1 file takes;
//! - ksym size (raw and zstd) against the DWARF it came from, and against
//!   version 1's (to show what the current layout bought).
//!
//! The ELF files measured are `KILN_BENCH_ELF` (colon-separated paths), by
//! default glibc (with its debug file when `libc6-dbg` is installed), the
//! C++ program of the tests' fixtures (`-O2 -g`, deep template inlining)
//! and this bench binary itself (Rust, `debug = 1`). `KILN_BENCH_LOOP` runs one
//! loop instead, for a profiler (see [`profile_loop`]).

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use addr2line::gimli::{Reader, ReaderOffset};
use kiln_symbolizer_workers::{
    ExtractOptions, Frame, Ksym, KsymFile, extract, ksym, resolve_chains,
};

/// Addresses per run: enough to leave every cache warm and the timing
/// stable, few enough for addr2line to finish in seconds.
const ADDRESSES: usize = 200_000;

fn main() {
    let paths: Vec<PathBuf> = match std::env::var("KILN_BENCH_ELF") {
        Ok(list) => list.split(':').map(PathBuf::from).collect(),
        Err(_) => {
            let mut v: Vec<PathBuf> = ["/lib/x86_64-linux-gnu/libc.so.6"]
                .iter()
                .map(PathBuf::from)
                .filter(|p| p.exists())
                .collect();
            v.extend(cpp_fixture());
            v.extend(std::env::current_exe().ok());
            v
        }
    };
    if let (Ok(mode), Some(path)) = (std::env::var("KILN_BENCH_LOOP"), paths.first()) {
        return profile_loop(path, &mode);
    }
    // `cargo bench` passes `--bench`; `cargo test` runs benches with no
    // such flag, and then a quick pass is enough.
    let quick = !std::env::args().any(|a| a == "--bench");
    for path in paths {
        report(&path, if quick { 2_000 } else { ADDRESSES });
    }
}

/// The C++ program of the tests' fixtures, written out of its committed
/// zstd file into the temporary directory.
fn cpp_fixture() -> Option<PathBuf> {
    let committed = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/v2/shapes.elf.zst");
    let elf = zstd::decode_all(&std::fs::read(committed).ok()?[..]).ok()?;
    let path = std::env::temp_dir().join("kiln-bench-shapes-cpp-O2-g");
    std::fs::write(&path, elf).ok()?;
    Some(path)
}

/// The two address sets of `n` addresses each: uniform (a random range,
/// then a random address in it) and profile-like (90% of the addresses in
/// 1% of the ranges, a hot set of at least 50: samples concentrate on hot
/// code). The same for the same file, so runs compare.
fn address_sets(k: &Ksym<'_>, n: usize) -> (Vec<u64>, Vec<u64>) {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let in_range = |rng: &mut Rng, r: usize| {
        let (start, end) = k.range(r).expect("a range of the file");
        start + rng.next() % (end - start)
    };
    let uniform = (0..n)
        .map(|_| {
            let r = (rng.next() % k.len() as u64) as usize;
            in_range(&mut rng, r)
        })
        .collect();
    let hot: Vec<usize> = (0..(k.len() / 100).max(50))
        .map(|_| (rng.next() % k.len() as u64) as usize)
        .collect();
    let skewed = (0..n)
        .map(|_| {
            let r = if rng.next() % 10 < 9 {
                hot[(rng.next() % hot.len() as u64) as usize]
            } else {
                (rng.next() % k.len() as u64) as usize
            };
            in_range(&mut rng, r)
        })
        .collect();
    (uniform, skewed)
}

/// `KILN_BENCH_LOOP=MODE`: instead of the report, one loop over the first
/// file's profile-like addresses (`uniform` in `MODE` for the uniform
/// ones), for a profiler to watch: `single` lookups, a `batch`
/// (`lookup_many` on the distinct addresses) or `owned` (that batch
/// answered as the symbolizer worker answers it), in batches of
/// `KILN_BENCH_BATCH` addresses (default all). `KILN_BENCH_PASSES` passes
/// (default 1); prints the time per address. For instance, the
/// instructions and mispredicted branches per lookup:
///
/// ```text
/// KILN_BENCH_LOOP=single valgrind --tool=callgrind --branch-sim=yes \
///   --collect-atstart=no '--toggle-collect=*Ksym*lookup*' \
///   '--toggle-collect=*Frame*' target/release/deps/symbolize-<hash> --bench
/// ```
fn profile_loop(path: &Path, mode: &str) {
    let extracted = extract(path, &ExtractOptions::default()).expect("the ELF extracts");
    let file = KsymFile::new(ksym::encode(&extracted.table)).expect("our own ksym opens");
    let k = file.ksym();
    let (uniform, skewed) = address_sets(&k, ADDRESSES);
    let addrs = if mode.contains("uniform") {
        uniform
    } else {
        skewed
    };
    let mut seen = std::collections::HashSet::new();
    let distinct: Vec<u64> = addrs.iter().copied().filter(|&a| seen.insert(a)).collect();
    let passes: usize = std::env::var("KILN_BENCH_PASSES").map_or(1, |p| p.parse().unwrap_or(1));
    let batch_size: usize = std::env::var("KILN_BENCH_BATCH")
        .map_or(usize::MAX, |b| b.parse().unwrap_or(usize::MAX))
        .max(1);
    let (mut time, mut count) = (Duration::ZERO, 0);
    for _ in 0..passes {
        if mode.starts_with("single") {
            time += ksym_pass(|a, f| k.lookup(a, f), &addrs);
            count += addrs.len();
        } else {
            for batch in distinct.chunks(batch_size) {
                time += match mode.starts_with("owned") {
                    true => owned_pass(&k, batch),
                    false => batch_pass(&k, batch),
                };
            }
            count += distinct.len();
        }
    }
    println!(
        "{mode}: {:.1} ns per address ({count} addresses)",
        time.as_nanos() as f64 / count.max(1) as f64
    );
}

/// A deterministic pseudo-random sequence (xorshift), so that runs compare.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn report(path: &Path, n: usize) {
    println!("== {}", path.display());
    let t = Instant::now();
    let extracted = match extract(path, &ExtractOptions::default()) {
        Ok(e) => e,
        Err(e) => {
            println!("   skipped: {e}");
            return;
        }
    };
    let extract_time = t.elapsed();
    let t = Instant::now();
    let bytes = ksym::encode(&extracted.table);
    let encode_time = t.elapsed();
    let compressed = zstd::encode_all(&bytes[..], 19).map_or(0, |c| c.len());
    let v1_bytes = ksym::v1::encode(&extracted.table);
    let v1_compressed = zstd::encode_all(&v1_bytes[..], 19).map_or(0, |c| c.len());
    println!(
        "   debug file: {}",
        extracted
            .debug_file
            .as_deref()
            .map_or("none".into(), |p| p.display().to_string())
    );
    println!("   extract {extract_time:.2?}, encode {encode_time:.2?}");
    let dwarf = extracted.dwarf_bytes.max(1);
    println!(
        "   DWARF {:.1} MiB; ksym {:.2} MiB (1/{:.1}), zstd -19 {:.2} MiB (1/{:.1})",
        mib(dwarf),
        mib(bytes.len()),
        dwarf as f64 / bytes.len() as f64,
        mib(compressed),
        dwarf as f64 / compressed.max(1) as f64,
    );
    println!(
        "   (version 1: ksym {:.2} MiB (1/{:.1}), zstd -19 {:.2} MiB (1/{:.1}))",
        mib(v1_bytes.len()),
        dwarf as f64 / v1_bytes.len() as f64,
        mib(v1_compressed),
        dwarf as f64 / v1_compressed.max(1) as f64,
    );

    // Time to first answer: open plus one lookup, its names read (a C++
    // name is demangled from its mangled name, whose block is
    // decompressed first).
    let k = Ksym::open(&bytes).expect("our own ksym opens");
    let sections: Vec<String> = k
        .section_sizes()
        .iter()
        .map(|(name, len)| format!("{name} {:.0}K", *len as f64 / 1024.0))
        .collect();
    println!("   {} ranges; sections: {}", k.len(), sections.join(", "));
    let t = &extracted.table;
    let names: usize = t.functions.iter().map(|f| f.name.len()).sum();
    let mangled: usize = t
        .functions
        .iter()
        .filter_map(|f| f.mangled.as_ref())
        .map(String::len)
        .sum();
    println!(
        "   function names (before interning): demangled {:.1} MiB, mangled {:.1} MiB",
        mib(names),
        mib(mangled)
    );
    let (uniform, skewed) = address_sets(&k, n);
    let mut best = Duration::MAX;
    for _ in 0..20 {
        let t = Instant::now();
        let k = Ksym::open(black_box(&bytes)).unwrap();
        let mut frames = Vec::new();
        k.lookup(uniform[0], &mut frames);
        black_box(read(&frames));
        best = best.min(t.elapsed());
    }
    let t = Instant::now();
    k.verify().expect("our own ksym verifies");
    let verify_time = t.elapsed();
    let t = Instant::now();
    let upgraded = ksym::upgrade(&v1_bytes).expect("our own version 1 upgrades");
    let upgrade_time = t.elapsed();
    assert_eq!(
        upgraded.as_ref(),
        &bytes[..],
        "an upgrade writes what encode does"
    );
    // What the symbolizer's loader keeps: the strings checked once, so
    // that lookups slice them unchecked. The lookups below read from it.
    let copy = bytes.clone();
    let t = Instant::now();
    let file = KsymFile::new(copy).expect("our own ksym opens");
    let file_time = t.elapsed();
    println!(
        "   ksym bytes to first answer: {best:.2?} (best of 20); KsymFile::new (strings checked) {file_time:.2?}; full verify() {verify_time:.2?}; upgrade from version 1 {upgrade_time:.2?}"
    );
    let k = file.ksym();

    // addr2line reads DWARF from the file it is given: give it the debug
    // file when there is one.
    let loader = addr2line::Loader::new(extracted.debug_file.as_deref().unwrap_or(path));
    if let Err(e) = &loader {
        println!("   addr2line could not load: {e}");
    }
    for (label, addrs) in [("uniform", &uniform), ("profile-like", &skewed)] {
        // First passes: warm the CPU caches for ksym, fill addr2line's
        // own caches (its cold time is reported).
        ksym_pass(|a, f| k.lookup(a, f), addrs);
        let cold = loader.as_ref().ok().map(|l| addr2line_pass(l, addrs));
        // Then passes of each in turn, keeping each one's best: on a
        // shared machine the load changes from second to second, and
        // interleaving gives every side the same chances of a quiet one.
        let (mut ksym_best, mut a2l_best) = (Duration::MAX, Duration::MAX);
        for _ in 0..ROUNDS {
            ksym_best = ksym_best.min(ksym_pass(|a, f| k.lookup(a, f), addrs));
            if let Ok(loader) = &loader {
                a2l_best = a2l_best.min(addr2line_pass(loader, addrs));
            }
        }
        let rate = |d: Duration| addrs.len() as f64 / d.as_secs_f64() / 1e6;
        let ratio = |slow: Duration| slow.as_secs_f64() / ksym_best.as_secs_f64();
        println!(
            "   {n} {label} lookups, one core, warm, best of {ROUNDS}: ksym {:.2} M/s",
            rate(ksym_best),
        );
        if let Some(cold) = cold {
            println!(
                "      addr2line {:.3} M/s ({:.1}x); addr2line's cold first pass {cold:.2?}",
                rate(a2l_best),
                ratio(a2l_best),
            );
        }
        if let Ok(loader) = &loader {
            batched(&k, loader, label, addrs);
        }
    }
}

/// The batched figures for one address set: ksym's `lookup_many` on its
/// distinct addresses, against addr2line one by one on the same, in their
/// given order and sorted.
fn batched(k: &Ksym<'_>, loader: &addr2line::Loader, label: &str, addrs: &[u64]) {
    let mut seen = std::collections::HashSet::new();
    let distinct: Vec<u64> = addrs.iter().copied().filter(|&a| seen.insert(a)).collect();
    let mut sorted = distinct.clone();
    sorted.sort_unstable();
    batch_pass(k, &distinct);
    let (mut ksym_best, mut a2l_best, mut a2l_sorted_best, mut owned_best) =
        (Duration::MAX, Duration::MAX, Duration::MAX, Duration::MAX);
    for _ in 0..ROUNDS {
        ksym_best = ksym_best.min(batch_pass(k, &distinct));
        owned_best = owned_best.min(owned_pass(k, &distinct));
        a2l_best = a2l_best.min(addr2line_pass(loader, &distinct));
        a2l_sorted_best = a2l_sorted_best.min(addr2line_pass(loader, &sorted));
    }
    let rate = |d: Duration| distinct.len() as f64 / d.as_secs_f64() / 1e6;
    let ratio = |a2l: Duration| a2l.as_secs_f64() / ksym_best.as_secs_f64();
    println!(
        "      batched, {} distinct {label} addresses: ksym {:.2} M/s; addr2line {:.3} M/s in that order ({:.1}x), {:.3} M/s sorted ({:.1}x)",
        distinct.len(),
        rate(ksym_best),
        rate(a2l_best),
        ratio(a2l_best),
        rate(a2l_sorted_best),
        ratio(a2l_sorted_best),
    );
    println!(
        "      as a symbolizer worker answers them (owned strings per frame): {:.2} M/s ({:.1}x the time of the lookups)",
        rate(owned_best),
        ratio(owned_best),
    );
}

/// Timed passes per address set and library; the best of them is kept.
const ROUNDS: usize = 5;

/// The time `lookup` (of either ksym version) takes to symbolize `addrs`,
/// reading what a caller reads.
fn ksym_pass<'a>(lookup: impl Fn(u64, &mut Vec<Frame<'a>>) -> bool, addrs: &[u64]) -> Duration {
    let mut frames = Vec::new();
    let mut sink = 0usize;
    let t = Instant::now();
    for &a in addrs {
        lookup(a, &mut frames);
        sink += read(&frames);
    }
    let elapsed = t.elapsed();
    black_box(sink);
    elapsed
}

/// The time `lookup_many` takes to symbolize `addrs` as one batch, reading
/// what a caller reads.
fn batch_pass(k: &Ksym<'_>, addrs: &[u64]) -> Duration {
    let mut sink = 0usize;
    let t = Instant::now();
    k.lookup_many(addrs, |_, frames| sink += read(frames));
    let elapsed = t.elapsed();
    black_box(sink);
    elapsed
}

/// What a caller reads of an answer: each level's function name, file
/// name and line (summed, so that the reads are not optimized away).
fn read(frames: &[Frame<'_>]) -> usize {
    frames
        .iter()
        .map(|f| {
            f.function().map_or(0, |n| n.len()) + f.line as usize + f.file().map_or(0, str::len)
        })
        .sum()
}

/// The time the symbolizer worker (`service::Symbolizer`) takes to answer
/// `addrs`: `resolve_chains`, chains outermost first with owned names.
fn owned_pass(k: &Ksym<'_>, addrs: &[u64]) -> Duration {
    let t = Instant::now();
    drop(black_box(resolve_chains(k, addrs)));
    t.elapsed()
}

/// The time addr2line takes to symbolize `addrs`, reading the same.
fn addr2line_pass(loader: &addr2line::Loader, addrs: &[u64]) -> Duration {
    let mut sink = 0usize;
    let t = Instant::now();
    for &a in addrs {
        if let Ok(mut it) = loader.find_frames(a) {
            while let Ok(Some(f)) = it.next() {
                sink += f
                    .function
                    .as_ref()
                    .map_or(0, |f| f.name.len().into_u64() as usize);
                if let Some(l) = f.location {
                    sink += l.line.unwrap_or(0) as usize + l.file.map_or(0, str::len);
                }
            }
        }
    }
    let elapsed = t.elapsed();
    black_box(sink);
    elapsed
}

fn mib(bytes: usize) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}
