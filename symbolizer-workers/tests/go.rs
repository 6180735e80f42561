//! Go binaries without a symbol table or DWARF: function names from
//! `.gopclntab` agree with `go tool nm` on the unstripped build, and
//! function, file and line with `go tool addr2line`. Needs the Go
//! toolchain (Debian's golang-go; scripts/setup.sh installs it); skips
//! without.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use object::{Object, ObjectSection};

use kiln_symbolizer_workers::{ExtractOptions, Ksym, extract, ksym};

const PROGRAM: &str = r#"
package main

import (
	"fmt"
	"os"
	"strings"
)

//go:noinline
func fold(words []string) string { return strings.ToUpper(strings.Join(words, "-")) }

type shape interface{ area() float64 }
type square struct{ side float64 }

//go:noinline
func (s square) area() float64 { return s.side * s.side }

func main() {
	var s shape = square{float64(len(os.Args))}
	fmt.Println(fold(os.Args), s.area())
}
"#;

fn go_available() -> bool {
    Command::new("go")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().expect("run a tool");
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `(address, name)` of the text symbols `go tool nm` lists.
fn nm_functions(go_elf: &Path) -> Vec<(u64, String)> {
    run(Command::new("go").args(["tool", "nm"]).arg(go_elf))
        .lines()
        .filter_map(|line| {
            let mut parts = line.split_whitespace();
            let addr = u64::from_str_radix(parts.next()?, 16).ok()?;
            let kind = parts.next()?;
            let name = parts.collect::<Vec<_>>().join(" ");
            (kind == "T" && addr != 0).then_some((addr, name))
        })
        .collect()
}

/// Builds the program in `dir`: the full binary, and a copy stripped of
/// its symbol table and DWARF (strip leaves the code where it was, so the
/// full binary's addresses hold for it).
fn build(dir: &Path) -> (PathBuf, PathBuf) {
    let src = dir.join("main.go");
    std::fs::write(&src, PROGRAM).unwrap();
    let full = dir.join("prog");
    run(Command::new("go")
        .args(["build", "-o"])
        .arg(&full)
        .arg(&src)
        .current_dir(dir)
        .env("GOCACHE", dir.join("cache"))
        .env("GOPATH", dir.join("gopath"))
        .env("GO111MODULE", "off")
        .env("GOFLAGS", ""));
    let stripped = dir.join("prog.stripped");
    run(Command::new("objcopy")
        .arg("--strip-all")
        .arg(&full)
        .arg(&stripped));
    (full, stripped)
}

/// The ksym of `elf` as Kiln stores it, without looking for debug files.
fn ksym_of(elf: &Path) -> Vec<u8> {
    let options = ExtractOptions {
        no_debug_file: true,
        ..ExtractOptions::default()
    };
    let extracted = extract(elf, &options).unwrap();
    assert_eq!(extracted.dwarf_bytes, 0, "strip removed the DWARF");
    ksym::encode(&extracted.table)
}

/// What `go tool addr2line` says of each address: (function, file, line),
/// `None` where it knows no function.
fn addr2line(elf: &Path, addrs: &[u64]) -> Vec<Option<(String, String, u32)>> {
    let mut child = Command::new("go")
        .args(["tool", "addr2line"])
        .arg(elf)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run go tool addr2line");
    let input: String = addrs.iter().map(|a| format!("{a:#x}\n")).collect();
    let mut stdin = child.stdin.take().unwrap();
    // Written from a thread: addr2line answers while it reads.
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(out.status.success(), "go tool addr2line failed");
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2 * addrs.len(), "two lines per address");
    lines
        .chunks(2)
        .map(|pair| {
            let (file, line) = pair[1].rsplit_once(':')?;
            // Code without line information is ":-1".
            let line = u32::try_from(line.parse::<i64>().unwrap()).unwrap_or(0);
            (pair[0] != "?").then(|| (pair[0].to_owned(), file.to_owned(), line))
        })
        .collect()
}

fn basename(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

#[test]
fn stripped_go_binary_resolves_lines_like_go_tool_addr2line() {
    if !go_available() {
        eprintln!("SKIP: no Go toolchain (Debian package golang-go)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (full, stripped) = build(dir.path());
    let bytes = ksym_of(&stripped);
    let symbols = Ksym::open(&bytes).unwrap();

    // Addresses spread evenly over .text, at odd offsets so that they
    // fall inside instructions as return addresses minus one do.
    let data = std::fs::read(&full).unwrap();
    let elf = object::File::parse(&*data).unwrap();
    let text = elf.section_by_name(".text").unwrap();
    let count = 4000;
    let step = (text.size() / count).max(1) | 1;
    let addrs: Vec<u64> = (0..count).map(|i| text.address() + 1 + i * step).collect();
    let expected = addr2line(&full, &addrs);

    let mut frames = Vec::new();
    let (mut agree, mut with_lines) = (0, 0);
    let mut disagreements = Vec::new();
    for (addr, want) in addrs.iter().zip(&expected) {
        symbols.lookup(*addr, &mut frames);
        // addr2line names the outermost function and the innermost code's
        // file and line (the ksym of a stripped Go binary has no inline
        // levels, so both are its one frame).
        let got = frames.last().and_then(|outer| {
            let inner = frames.first()?;
            Some((
                outer.function()?.into_owned(),
                inner.path().unwrap_or_default(),
                inner.line,
            ))
        });
        let same = match (&got, want) {
            (Some(g), Some(w)) => g.0 == w.0 && basename(&g.1) == basename(&w.1) && g.2 == w.2,
            (None, None) => true,
            _ => false,
        };
        if same {
            agree += 1;
            with_lines += usize::from(want.as_ref().is_some_and(|w| w.2 > 0));
        } else if disagreements.len() < 10 {
            disagreements.push(format!("{addr:#x}: addr2line {want:?}, kiln {got:?}"));
        }
    }
    eprintln!(
        "{agree} of {} addresses agree with go tool addr2line ({with_lines} with lines)",
        addrs.len()
    );
    assert!(
        agree * 100 >= addrs.len() * 99,
        "{agree} of {} agree; e.g. {disagreements:#?}",
        addrs.len()
    );
    // The comparison means something only if most addresses have lines.
    assert!(
        with_lines * 10 >= addrs.len() * 9,
        "{with_lines} with lines"
    );
    // The program's own code is among them, with its file.
    let main_go = expected
        .iter()
        .flatten()
        .filter(|w| w.0.starts_with("main.") && basename(&w.1) == "main.go")
        .count();
    assert!(main_go > 0, "no address in main.go sampled");
}

#[test]
fn stripped_go_binary_names_functions_like_go_tool_nm() {
    if !go_available() {
        eprintln!("SKIP: no Go toolchain (Debian package golang-go)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (full, stripped) = build(dir.path());

    let bytes = ksym_of(&stripped);
    let symbols = Ksym::open(&bytes).unwrap();

    let expected = nm_functions(&full);
    assert!(
        expected.len() > 500,
        "go tool nm lists {} functions",
        expected.len()
    );
    let mut frames = Vec::new();
    let mut agree = 0;
    let mut disagreements = Vec::new();
    for (addr, name) in &expected {
        symbols.lookup(*addr, &mut frames);
        let got = frames.first().and_then(|f| f.function());
        // The symbol table marks assembly functions with their ABI
        // (`runtime.abort.abi0`); the runtime's own table, which
        // `go tool addr2line` and tracebacks use, does not.
        if got.as_deref() == Some(name.trim_end_matches(".abi0")) {
            agree += 1;
        } else if disagreements.len() < 10 {
            disagreements.push(format!("{addr:#x}: nm {name}, kiln {got:?}"));
        }
    }
    assert!(
        agree * 1000 >= expected.len() * 995,
        "{agree} of {} agree; e.g. {disagreements:#?}",
        expected.len()
    );
    for name in ["main.fold", "main.square.area", "main.main"] {
        assert!(
            expected.iter().any(|(_, n)| n == name),
            "{name} not in the program"
        );
    }
}
