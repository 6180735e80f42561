//! Go binaries without a symbol table: function names from `.gopclntab`
//! agree with `go tool nm` on the unstripped build. Needs the Go toolchain
//! (Debian's golang-go; scripts/setup.sh installs it); skips without.

use std::path::Path;
use std::process::Command;

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

#[test]
fn stripped_go_binary_names_functions_like_go_tool_nm() {
    if !go_available() {
        eprintln!("SKIP: no Go toolchain (Debian package golang-go)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("main.go");
    std::fs::write(&src, PROGRAM).unwrap();
    let full = dir.path().join("prog");
    run(Command::new("go")
        .args(["build", "-o"])
        .arg(&full)
        .arg(&src)
        .current_dir(dir.path())
        .env("GOCACHE", dir.path().join("cache"))
        .env("GOPATH", dir.path().join("gopath"))
        .env("GO111MODULE", "off")
        .env("GOFLAGS", ""));
    // strip leaves the code where it was: nm's addresses hold for it.
    let stripped = dir.path().join("prog.stripped");
    run(Command::new("objcopy")
        .arg("--strip-all")
        .arg(&full)
        .arg(&stripped));

    let options = ExtractOptions {
        no_debug_file: true,
        ..ExtractOptions::default()
    };
    let extracted = extract(&stripped, &options).unwrap();
    assert_eq!(extracted.dwarf_bytes, 0, "strip removed the DWARF");
    let bytes = ksym::encode(&extracted.table);
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
        let got = frames.first().and_then(|f| f.function);
        // The symbol table marks assembly functions with their ABI
        // (`runtime.abort.abi0`); the runtime's own table, which
        // `go tool addr2line` and tracebacks use, does not.
        if got == Some(name.trim_end_matches(".abi0")) {
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
