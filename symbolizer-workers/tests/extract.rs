//! Extraction on real and damaged ELF files: a program built here with
//! `gcc -O2 -g`, then copies with bytes of its DWARF and ELF headers
//! changed, which must give an error or a table, never a panic or a hang.

use std::path::{Path, PathBuf};
use std::process::Command;

use kiln_symbolizer_workers::{ExtractOptions, Ksym, extract, extract_bytes, ksym};
use object::{Object, ObjectSection};

const PROGRAM: &str = r#"
#include <stdio.h>
static inline int sq(int x) { return x * x; }
static inline int sum_sq(const int *v, int n) { int s = 0; for (int i = 0; i < n; i++) s += sq(v[i]); return s; }
int work(int n) { int v[64]; for (int i = 0; i < 64; i++) v[i] = i * n; return sum_sq(v, 64); }
int main(int argc, char **argv) { (void)argv; printf("%d\n", work(argc)); return 0; }
"#;

/// Damaged copies tried; each takes about a millisecond.
const ROUNDS: usize = 3000;

fn build(dir: &Path) -> PathBuf {
    let src = dir.join("p.c");
    std::fs::write(&src, PROGRAM).unwrap();
    let elf = dir.join("p");
    let status = Command::new("gcc")
        .args(["-O2", "-g", "-o"])
        .arg(&elf)
        .arg(&src)
        .status()
        .expect("gcc runs");
    assert!(status.success());
    elf
}

fn options() -> ExtractOptions {
    // Never look in the machine's /usr/lib/debug: the input is the file.
    ExtractOptions {
        no_debug_file: true,
        ..ExtractOptions::default()
    }
}

/// Extraction, encoding, opening and lookups of `data`; panics only if
/// something in there panics.
fn survive(path: &Path, data: &[u8]) -> bool {
    let Ok(extracted) = extract_bytes(path, data, &options()) else {
        return false;
    };
    let bytes = ksym::encode(&extracted.table);
    let k = Ksym::open(&bytes).expect("a ksym we wrote opens");
    k.verify().expect("a ksym we wrote verifies");
    let mut frames = Vec::new();
    for i in 0..k.len().min(64) {
        let (start, end) = k.range(i).unwrap();
        // Damaged symbol sizes make ranges of gigabytes: sample them.
        let step = ((end - start) / 64).max(1) as usize;
        for a in (start..end).step_by(step) {
            k.lookup(a, &mut frames);
        }
    }
    true
}

#[test]
fn inline_chains_and_lines_come_out_of_a_real_program() {
    let dir = tempfile::tempdir().unwrap();
    let elf = build(dir.path());
    let extracted = extract(&elf, &options()).unwrap();
    assert!(extracted.dwarf_bytes > 0);
    let bytes = ksym::encode(&extracted.table);
    let k = Ksym::open(&bytes).unwrap();
    // Somewhere in `work`, `sq` is inlined into `sum_sq` inlined into
    // `work`, with lines in p.c.
    let mut frames = Vec::new();
    let mut seen = false;
    for i in 0..k.len() {
        let (start, end) = k.range(i).unwrap();
        for a in start..end {
            k.lookup(a, &mut frames);
            let names: Vec<_> = frames
                .iter()
                .map(|f| f.function().unwrap_or("?".into()))
                .collect();
            if names == ["sq", "sum_sq", "work"] {
                assert!(
                    frames.iter().all(|f| f.file() == Some("p.c") && f.line > 0),
                    "{frames:?}"
                );
                seen = true;
            }
        }
    }
    assert!(
        seen,
        "no address showed sq inlined in sum_sq inlined in work"
    );
}

/// `names_only` reads no DWARF: the same functions by name, no lines and
/// no inline chains. A debug file given to `extract_with_debug_file`
/// names what a stripped file's own tables do not.
#[test]
fn names_only_leaves_out_lines_and_inlines_and_a_given_debug_file_names() {
    let dir = tempfile::tempdir().unwrap();
    let elf = build(dir.path());
    let data = std::fs::read(&elf).unwrap();
    let names_only = ExtractOptions {
        names_only: true,
        ..options()
    };
    let extracted = extract_bytes(&elf, &data, &names_only).unwrap();
    assert_eq!(extracted.dwarf_bytes, 0);
    let table = &extracted.table;
    // (A local symbol's STT_FILE still gives its range a file, line 0.)
    assert!(
        table
            .ranges
            .iter()
            .all(|r| r.lines.iter().all(|l| l.line == 0) && r.inlines.is_empty())
    );
    let bytes = ksym::encode(table);
    let k = Ksym::open(&bytes).unwrap();
    let work = (0..k.len()).map(|i| k.range(i).unwrap().0).find(|&a| {
        let mut frames = Vec::new();
        k.lookup(a, &mut frames);
        frames.len() == 1 && frames[0].function().as_deref() == Some("work")
    });
    assert!(work.is_some(), "work is named by the symbol table");

    // Stripped: only .dynsym, which does not name `work`.
    let stripped = dir.path().join("p.stripped");
    let status = Command::new("strip")
        .arg("-o")
        .arg(&stripped)
        .arg(&elf)
        .status()
        .expect("strip runs");
    assert!(status.success());
    let stripped_data = std::fs::read(&stripped).unwrap();
    let named = |debug: Option<(&Path, &[u8])>| {
        let extracted = kiln_symbolizer_workers::extract_with_debug_file(
            &stripped,
            &stripped_data,
            debug,
            &names_only,
        )
        .unwrap();
        let bytes = ksym::encode(&extracted.table);
        let k = Ksym::open(&bytes).unwrap();
        let mut frames = Vec::new();
        k.lookup(work.unwrap(), &mut frames);
        frames
            .first()
            .and_then(|f| f.function())
            .map(|n| n.into_owned())
    };
    assert_eq!(named(None), None);
    assert_eq!(named(Some((&elf, &data))).as_deref(), Some("work"));
}

/// A version 1 file of a real program (inline chains from DWARF) upgrades
/// to exactly what encoding the table in the current version gives (so
/// every address answers as the table says, as it did in version 1), and
/// the program has inlined code for it to keep.
#[test]
fn upgrading_a_real_version_1_file_keeps_every_answer() {
    let dir = tempfile::tempdir().unwrap();
    let elf = build(dir.path());
    let table = extract(&elf, &options()).unwrap().table;
    let v1_bytes = ksym::v1::encode(&table);
    let upgraded = ksym::upgrade(&v1_bytes).unwrap();
    assert_eq!(upgraded.as_ref(), ksym::encode(&table).as_slice());
    let k = Ksym::open(&upgraded).unwrap();
    k.verify().unwrap();
    let mut frames = Vec::new();
    let mut inlined = 0;
    for i in 0..k.len() {
        let (start, end) = k.range(i).unwrap();
        for a in start..end {
            k.lookup(a, &mut frames);
            inlined += usize::from(frames.len() > 1);
        }
    }
    assert!(inlined > 0, "the program has inlined code to compare");
}

/// Guards "same input, same bytes": nothing in extraction or encoding may
/// depend on hash map order or addresses in memory.
#[test]
fn the_same_file_gives_the_same_ksym_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let elf = build(dir.path());
    let once = ksym::encode(&extract(&elf, &options()).unwrap().table);
    let twice = ksym::encode(&extract(&elf, &options()).unwrap().table);
    assert_eq!(once, twice);
}

#[test]
fn damaged_files_give_errors_or_tables_never_panics() {
    let dir = tempfile::tempdir().unwrap();
    let elf = build(dir.path());
    let data = std::fs::read(&elf).unwrap();
    let file = object::File::parse(&*data).unwrap();
    // Byte ranges worth damaging: the debug sections, the symbol table and
    // the ELF and section headers.
    let mut targets: Vec<(usize, usize)> = file
        .sections()
        .filter(|s| {
            let name = s.name().unwrap_or("");
            name.starts_with(".debug") || name == ".symtab" || name == ".strtab"
        })
        .filter_map(|s| s.file_range().map(|(o, l)| (o as usize, l as usize)))
        .collect();
    targets.push((0, 64));
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut accepted = 0;
    for round in 0..ROUNDS {
        let mut bad = data.clone();
        let (off, len) = targets[round % targets.len()];
        // A few bytes at random places of one region, sometimes with the
        // extreme values that break lengths and offsets.
        for _ in 0..1 + next() % 4 {
            let at = off + (next() as usize) % len.max(1);
            bad[at] = match next() % 3 {
                0 => 0xff,
                1 => 0,
                _ => next() as u8,
            };
        }
        accepted += usize::from(survive(&elf, &bad));
    }
    for cut in [0, 16, 64, data.len() / 3, data.len() / 2, data.len() - 1] {
        survive(&elf, &data[..cut]);
    }
    println!("{accepted} of {ROUNDS} damaged copies still extracted");
}

/// Guards the fixes of the `elf_extract` fuzz target's finds: each input
/// under fixtures/fuzz-elf (e.g. a DW_AT_high_pc offset that overflows
/// when added to DW_AT_low_pc, which gimli's own `die_ranges` adds
/// unchecked) extracts or fails cleanly, and what it yields encodes,
/// opens and answers lookups.
#[test]
fn fuzz_finds_stay_fixed() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fuzz-elf");
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        survive(&path, &std::fs::read(&path).unwrap());
    }
}
