//! Kiln's C++ names against the demanglers people read them with:
//! `c++filt` (GNU binutils) and `llvm-cxxfilt`. Every mangled name of
//! real, template-heavy code must read as one of the two prints it (they
//! differ in style only: `std::istream` against its expansion,
//! `decltype (…)` spacing); `> >` and `>>` count as the same.
//!
//! The names: every C++ symbol of a program built here with lambdas,
//! rvalue references, parameter packs, `std::function` and -O2 clones
//! (`tests/fixtures/cpp-modern`), libstdc++'s exported symbols, and
//! Debian's LLVM library's when it is installed (39k names).

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use kiln_symbolizer_workers::demangle;

/// Share of names that must read as one of the tools prints them.
const REQUIRED: f64 = 99.9;

/// The C++ (`_Z`) names of `elf`'s symbol tables, `dynamic` for `.dynsym`.
fn cpp_names(elf: &Path, dynamic: bool) -> Vec<String> {
    let mut nm = Command::new("nm");
    if dynamic {
        nm.arg("-D");
    }
    let out = nm.arg("--defined-only").arg(elf).output().expect("run nm");
    assert!(out.status.success(), "nm {} failed", elf.display());
    let mut names: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .map(|n| n.split('@').next().unwrap_or(n).to_owned())
        .filter(|n| n.starts_with("_Z"))
        .collect();
    names.sort();
    names.dedup();
    names
}

/// `tool`'s reading of each name (one per line on stdin), or `None` when
/// the tool is not installed.
fn filtered(tool: &str, names: &[String]) -> Option<Vec<String>> {
    let mut child = Command::new(tool)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let input = names.join("\n") + "\n";
    let mut stdin = child.stdin.take().expect("stdin");
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output().expect("wait for the demangler");
    writer.join().unwrap().expect("write names");
    let lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(
        lines.len(),
        names.len(),
        "{tool} answered {} lines",
        lines.len()
    );
    Some(lines)
}

fn normalize(name: &str) -> String {
    let mut s = name.to_owned();
    while s.contains("> >") {
        s = s.replace("> >", ">>");
    }
    s
}

/// Checks `names`, printing the agreement and the first disagreements.
fn check(what: &str, names: &[String]) {
    assert!(!names.is_empty(), "{what}: no C++ names");
    let gnu = filtered("c++filt", names).expect("c++filt (binutils) is needed for this test");
    let llvm = filtered("llvm-cxxfilt", names);
    let mut disagree = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let ours = normalize(&demangle(name).unwrap_or_else(|| name.clone()));
        let matches_gnu = ours == normalize(&gnu[i]);
        let matches_llvm = llvm.as_ref().is_some_and(|l| ours == normalize(&l[i]));
        if !matches_gnu && !matches_llvm {
            disagree.push((name, ours, &gnu[i]));
        }
    }
    let agreement = 100.0 * (names.len() - disagree.len()) as f64 / names.len() as f64;
    println!(
        "{what}: {} of {} names read as c++filt{} prints them ({agreement:.3}%)",
        names.len() - disagree.len(),
        names.len(),
        if llvm.is_some() {
            " or llvm-cxxfilt"
        } else {
            ""
        },
    );
    for (name, ours, gnu) in disagree.iter().take(10) {
        println!("  {name}\n    kiln:    {ours}\n    c++filt: {gnu}");
    }
    assert!(
        agreement >= REQUIRED,
        "{what}: {agreement:.3}% of names agree, {REQUIRED}% required"
    );
}

#[test]
fn a_modern_cpp_program_reads_as_cxxfilt_prints_it() {
    let dir = tempfile::tempdir().unwrap();
    let elf = dir.path().join("modern");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/cpp-modern/modern.cpp");
    let status = Command::new("g++")
        .args(["-std=c++17", "-O2", "-g", "-o"])
        .arg(&elf)
        .arg(&source)
        .status()
        .expect("run g++ (apt-get install -y g++)");
    assert!(status.success(), "g++ failed to build the fixture");
    check("C++ fixture (g++ -O2)", &cpp_names(&elf, false));
}

#[test]
fn system_cpp_libraries_read_as_cxxfilt_prints_them() {
    let libraries = [
        "/lib/x86_64-linux-gnu/libstdc++.so.6",
        "/lib/x86_64-linux-gnu/libLLVM-15.so.1",
        "/lib/x86_64-linux-gnu/libLLVM-14.so.1",
    ];
    let found: Vec<&Path> = libraries
        .iter()
        .map(Path::new)
        .filter(|p| p.exists())
        .collect();
    assert!(
        !found.is_empty(),
        "no system C++ library found (libstdc++6)"
    );
    for library in found {
        check(&library.display().to_string(), &cpp_names(library, true));
    }
}
