//! `kiln symbols resolve` against `llvm-symbolizer --inlines` (Debian's
//! `llvm` package) on real binaries: a C++ program built here with heavy
//! inlining, Kiln's own debug build (Rust), and glibc with its `libc6-dbg`
//! debug file when that is installed.
//!
//! Every inline level of every sampled address must agree on function,
//! file name and line. Functions are compared by linkage name (both tools
//! run with `--no-demangle`): which function an address belongs to is what
//! symbolization decides, while demangled spellings differ between
//! demanglers (`cpp_demangle` and LLVM's print clones, lambdas and
//! template arguments differently). The demangled agreement is printed
//! too, for information.
//!
//! Addresses llvm-symbolizer cannot name at all but Kiln can (code known
//! only from the debug file's symbol table, or line tables outside their
//! unit's ranges) are counted apart and printed; they are not
//! disagreements.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use object::{Object, ObjectSection};

/// (function, file name, line) per inline level, innermost first.
type Chain = Vec<(String, String, u64)>;

const LLVM_SYMBOLIZER: &str = "llvm-symbolizer";
/// How many addresses each binary is sampled at.
const SAMPLES: u64 = 4000;
/// The agreement the issue asks for.
const REQUIRED: f64 = 99.5;

fn basename(path: &str) -> String {
    path.rsplit('/').next().unwrap_or(path).to_owned()
}

/// Every `step`-th byte address of `.text`, about `SAMPLES` of them: byte
/// granularity reaches inside instructions too, which both tools take.
fn sample_text(elf: &Path) -> Vec<u64> {
    let data = std::fs::read(elf).expect("read the ELF");
    let file = object::File::parse(&*data).expect("parse the ELF");
    let text = file.section_by_name(".text").expect("a .text section");
    let step = (text.size() / SAMPLES).max(1);
    (text.address()..text.address() + text.size())
        .step_by(step as usize)
        .collect()
}

fn kiln_resolve(elf: &Path, addrs: &[u64], demangle: bool) -> HashMap<u64, Chain> {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kiln"));
    cmd.args(["symbols", "resolve", "--json"]);
    if !demangle {
        cmd.arg("--no-demangle");
    }
    cmd.arg(elf)
        .args(addrs.iter().map(|a| format!("{a:x}")))
        .env("KILN_LOG", "warn");
    let out = cmd.output().expect("run kiln symbols resolve");
    assert!(
        out.status.success(),
        "kiln symbols resolve failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut chains = HashMap::new();
    for line in String::from_utf8(out.stdout).expect("UTF-8 output").lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("one JSON object per line");
        let addr = u64::from_str_radix(
            v["addr"].as_str().expect("addr").trim_start_matches("0x"),
            16,
        )
        .unwrap();
        let chain = v["frames"]
            .as_array()
            .expect("frames")
            .iter()
            .map(|f| {
                (
                    f["function"].as_str().unwrap_or("").to_owned(),
                    basename(f["file"].as_str().unwrap_or("")),
                    f["line"].as_u64().expect("line is a number"),
                )
            })
            .collect();
        chains.insert(addr, chain);
    }
    chains
}

fn llvm_resolve(elf: &Path, addrs: &[u64], demangle: bool) -> HashMap<u64, Chain> {
    let mut cmd = Command::new(LLVM_SYMBOLIZER);
    cmd.args(["--inlines", "--output-style=JSON"]);
    if !demangle {
        cmd.arg("--no-demangle");
    }
    let mut child = cmd
        .arg(format!("--obj={}", elf.display()))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("llvm-symbolizer runs (install Debian's llvm package)");
    let input: String = addrs.iter().map(|a| format!("{a:#x}\n")).collect();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output().expect("llvm-symbolizer output");
    writer
        .join()
        .unwrap()
        .expect("write addresses to llvm-symbolizer");
    let mut chains = HashMap::new();
    for line in String::from_utf8(out.stdout).expect("UTF-8 output").lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("llvm-symbolizer JSON");
        let addr = u64::from_str_radix(v["Address"].as_str().unwrap().trim_start_matches("0x"), 16)
            .unwrap();
        let chain: Chain = v["Symbol"]
            .as_array()
            .map(|s| {
                s.iter()
                    .map(|f| {
                        (
                            f["FunctionName"].as_str().unwrap_or("").to_owned(),
                            basename(f["FileName"].as_str().unwrap_or("")),
                            f["Line"].as_u64().unwrap_or(0),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        // A lone "??:0" frame is llvm-symbolizer's way of saying nothing.
        let nothing = chain
            .iter()
            .all(|(f, file, line)| f.is_empty() && file.is_empty() && *line == 0);
        chains.insert(addr, if nothing { Vec::new() } else { chain });
    }
    chains
}

/// Evens out what demanglers spell differently without naming another
/// function: clone suffixes (`foo [clone .cold]` and `foo (.cold)`), and
/// LLVM 14's raw rendering of legacy Rust names (`Own$LT$T$GT$::cast::h…`
/// where rustc-demangle writes `Own<T>::cast`).
fn normalize_demangled(name: &str) -> String {
    let name = name.split(" [clone ").next().unwrap_or(name);
    let mut name = name.split(" (.").next().unwrap_or(name).to_owned();
    if let Some(i) = name.rfind("::h")
        && name.len() - i == 19
        && name[i + 3..].bytes().all(|b| b.is_ascii_hexdigit())
    {
        name.truncate(i);
        for (from, to) in [
            ("$LT$", "<"),
            ("$GT$", ">"),
            ("$RF$", "&"),
            ("$BP$", "*"),
            ("$C$", ","),
            ("$LP$", "("),
            ("$RP$", ")"),
            ("$u3d$", "="),
            ("$SP$", "@"),
            ("$u20$", " "),
            ("$u21$", "!"),
            ("$u22$", "\""),
            ("$u27$", "'"),
            ("$u2b$", "+"),
            ("$u3b$", ";"),
            ("$u5b$", "["),
            ("$u5d$", "]"),
            ("$u7b$", "{"),
            ("$u7d$", "}"),
            ("$u7e$", "~"),
            ("..", "::"),
        ] {
            name = name.replace(from, to);
        }
        name = name.replace("::_<", "::<").replace("::_{", "::{");
        if let Some(rest) = name.strip_prefix("_<") {
            name = format!("<{rest}");
        }
    }
    name
}

struct Agreement {
    total: usize,
    agree: usize,
    kiln_only: usize,
    disagreements: Vec<String>,
}

impl Agreement {
    fn percent(&self) -> f64 {
        let judged = self.total - self.kiln_only;
        if judged == 0 {
            100.0
        } else {
            100.0 * self.agree as f64 / judged as f64
        }
    }
}

fn compare(
    addrs: &[u64],
    kiln: &HashMap<u64, Chain>,
    llvm: &HashMap<u64, Chain>,
    demangled: bool,
) -> Agreement {
    let mut a = Agreement {
        total: addrs.len(),
        agree: 0,
        kiln_only: 0,
        disagreements: Vec::new(),
    };
    for addr in addrs {
        let mut ours = kiln.get(addr).cloned().unwrap_or_default();
        let mut theirs = llvm.get(addr).cloned().unwrap_or_default();
        if demangled {
            for (f, _, _) in ours.iter_mut().chain(theirs.iter_mut()) {
                *f = normalize_demangled(f);
            }
        }
        if ours == theirs {
            a.agree += 1;
        } else if theirs.is_empty() {
            a.kiln_only += 1;
        } else {
            a.disagreements.push(format!(
                "{addr:#x}\n    kiln: {ours:?}\n    llvm: {theirs:?}"
            ));
        }
    }
    a
}

/// Compares both tools on `elf` and asserts the required agreement.
fn check(label: &str, elf: &Path) {
    let addrs = sample_text(elf);
    let ours = kiln_resolve(elf, &addrs, false);
    let theirs = llvm_resolve(elf, &addrs, false);
    let strict = compare(&addrs, &ours, &theirs, false);
    let ours_d = kiln_resolve(elf, &addrs, true);
    let theirs_d = llvm_resolve(elf, &addrs, true);
    let demangled = compare(&addrs, &ours_d, &theirs_d, true);
    println!(
        "{label}: {} addresses; linkage names, file, line at every inline level: {:.3}% agree \
         ({} disagree, {} resolved only by kiln); demangled names: {:.3}%",
        strict.total,
        strict.percent(),
        strict.disagreements.len(),
        strict.kiln_only,
        demangled.percent(),
    );
    for d in strict.disagreements.iter().take(20) {
        println!("  {d}");
    }
    for d in demangled.disagreements.iter().take(5) {
        println!("  demangled: {d}");
    }
    assert!(
        strict.percent() >= REQUIRED,
        "{label}: {:.3}% agreement with llvm-symbolizer, below {REQUIRED}%",
        strict.percent()
    );
}

fn require_tool(name: &str, package: &str) {
    let found = Command::new(name)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    assert!(
        found.is_ok_and(|s| s.success()),
        "{name} is needed for this test: apt-get install -y {package}"
    );
}

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../symbolizer-workers/tests/fixtures/cpp")
}

#[test]
fn cpp_program_with_heavy_inlining_agrees_with_llvm_symbolizer() {
    require_tool(LLVM_SYMBOLIZER, "llvm");
    require_tool("g++", "g++");
    let dir = tempfile::tempdir().unwrap();
    let elf = dir.path().join("shapes");
    let src = fixture_dir();
    let status = Command::new("g++")
        .args(["-O2", "-g", "-o"])
        .arg(&elf)
        .args(["shapes.cpp", "stats.cpp", "main.cpp"].map(|f| src.join(f)))
        .status()
        .expect("run g++");
    assert!(status.success(), "g++ failed to build the fixture");
    check("C++ fixture (g++ -O2 -g)", &elf);
}

#[test]
fn kilns_own_debug_build_agrees_with_llvm_symbolizer() {
    require_tool(LLVM_SYMBOLIZER, "llvm");
    check(
        "kiln (Rust, debug build)",
        Path::new(env!("CARGO_BIN_EXE_kiln")),
    );
}

#[test]
fn glibc_with_its_debug_file_agrees_with_llvm_symbolizer() {
    require_tool(LLVM_SYMBOLIZER, "llvm");
    let Some(libc) = [
        "/lib/x86_64-linux-gnu/libc.so.6",
        "/usr/lib/x86_64-linux-gnu/libc.so.6",
        "/lib64/libc.so.6",
    ]
    .iter()
    .map(Path::new)
    .find(|p| p.exists()) else {
        println!("skipped: no glibc found");
        return;
    };
    let data = std::fs::read(libc).unwrap();
    let file = object::File::parse(&*data).unwrap();
    let Some(id) = file.build_id().ok().flatten() else {
        println!("skipped: {} has no build id", libc.display());
        return;
    };
    let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
    let debug = Path::new("/usr/lib/debug/.build-id")
        .join(&hex[..2])
        .join(format!("{}.debug", &hex[2..]));
    if !debug.exists() {
        println!(
            "skipped: no debug file {} (apt-get install -y libc6-dbg)",
            debug.display()
        );
        return;
    }
    check("glibc with libc6-dbg", libc);
}
