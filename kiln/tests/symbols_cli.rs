//! `kiln symbols resolve` end to end: the JSON shape, the text output,
//! separate debug files (by build id under --debug-dir, by
//! .gnu_debuglink with its CRC), compressed debug sections, DWARF 4, and
//! clear errors on bad input.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use object::{Object, ObjectSection};

fn kiln(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(args)
        .env("KILN_LOG", "warn")
        .output()
        .expect("run kiln")
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Builds the C++ fixture with `flags` into `dir`.
fn build_fixture(dir: &Path, name: &str, flags: &[&str]) -> PathBuf {
    let src =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../symbolizer-workers/tests/fixtures/cpp");
    let elf = dir.join(name);
    run(Command::new("g++")
        .args(flags)
        .arg("-o")
        .arg(&elf)
        .args(["shapes.cpp", "stats.cpp", "main.cpp"].map(|f| src.join(f))));
    elf
}

/// Every 16th address of `.text`, in hex.
fn text_addrs(elf: &Path) -> Vec<String> {
    let data = std::fs::read(elf).unwrap();
    let file = object::File::parse(&*data).unwrap();
    let text = file.section_by_name(".text").unwrap();
    (text.address()..text.address() + text.size())
        .step_by(16)
        .map(|a| format!("{a:#x}"))
        .collect()
}

/// `kiln symbols resolve --json` output, with debug files looked for under
/// `debug_dir` only (never the machine's own /usr/lib/debug).
fn resolve_json(elf: &Path, debug_dir: &Path, addrs: &[String]) -> String {
    let mut args = vec![
        "symbols",
        "resolve",
        "--json",
        "--debug-dir",
        debug_dir.to_str().unwrap(),
    ];
    args.push(elf.to_str().unwrap());
    args.extend(addrs.iter().map(String::as_str));
    let out = kiln(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Asserts two resolve outputs are equal, showing the first difference
/// rather than both outputs whole.
#[track_caller]
fn assert_same(got: &str, want: &str, what: &str) {
    if let Some((g, w)) = got.lines().zip(want.lines()).find(|(g, w)| g != w) {
        panic!("{what}: first difference\n got: {g}\nwant: {w}");
    }
    assert_eq!(
        got.lines().count(),
        want.lines().count(),
        "{what}: line counts"
    );
}

#[test]
fn json_has_one_object_per_address_with_the_documented_shape() {
    let dir = tempfile::tempdir().unwrap();
    let elf = build_fixture(dir.path(), "shapes", &["-O2", "-g"]);
    let addrs = text_addrs(&elf);
    let json = resolve_json(&elf, dir.path(), &addrs);
    let lines: Vec<&str> = json.lines().collect();
    assert_eq!(lines.len(), addrs.len());
    let mut inlined = 0;
    for (line, addr) in lines.iter().zip(&addrs) {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let obj = v.as_object().unwrap();
        assert_eq!(obj.len(), 2, "only addr and frames: {line}");
        assert_eq!(v["addr"].as_str().unwrap(), addr);
        let frames = v["frames"].as_array().unwrap();
        for f in frames {
            let f = f.as_object().unwrap();
            assert_eq!(f.len(), 3, "function, file, line: {line}");
            assert!(f["function"].is_string() || f["function"].is_null());
            assert!(f["file"].is_string() || f["file"].is_null());
            assert!(
                f["line"].is_u64(),
                "line is a number (0 when unknown): {line}"
            );
        }
        inlined += usize::from(frames.len() > 1);
    }
    assert!(
        inlined > 10,
        "the fixture inlines heavily, yet only {inlined} addresses had inline chains"
    );
    // An address outside any code has no frames.
    let none = resolve_json(&elf, dir.path(), &["0xffffffffff".to_owned()]);
    assert_eq!(none.trim(), r#"{"addr":"0xffffffffff","frames":[]}"#);
}

#[test]
fn text_output_names_function_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let elf = build_fixture(dir.path(), "shapes", &["-O2", "-g"]);
    let json = resolve_json(&elf, dir.path(), &text_addrs(&elf));
    // Take an address with an inline chain from the JSON and print it.
    let chained = json
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|v| v["frames"].as_array().unwrap().len() > 1)
        .unwrap();
    let addr = chained["addr"]
        .as_str()
        .unwrap()
        .trim_start_matches("0x")
        .to_owned();
    let out = kiln(&["symbols", "resolve", elf.to_str().unwrap(), &addr]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let inner = &chained["frames"][0];
    assert!(text.starts_with(&format!("0x{addr}\n")), "{text}");
    assert!(
        text.contains(&format!(
            "{} (inlined)",
            inner["function"].as_str().unwrap()
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "at {}:{}",
            inner["file"].as_str().unwrap(),
            inner["line"]
        )),
        "{text}"
    );
}

#[test]
fn separate_debug_files_are_found_by_build_id_and_by_debuglink() {
    let dir = tempfile::tempdir().unwrap();
    let full = build_fixture(dir.path(), "shapes", &["-O2", "-g"]);
    let addrs = text_addrs(&full);
    let empty = dir.path().join("no-debug");
    std::fs::create_dir(&empty).unwrap();
    let want = resolve_json(&full, &empty, &addrs);

    let debug = dir.path().join("shapes.debug");
    run(Command::new("objcopy")
        .arg("--only-keep-debug")
        .arg(&full)
        .arg(&debug));
    let stripped = dir.path().join("bin").join("shapes");
    std::fs::create_dir(stripped.parent().unwrap()).unwrap();
    run(Command::new("objcopy")
        .arg("--strip-debug")
        .arg(&full)
        .arg(&stripped));
    let without = resolve_json(&stripped, &empty, &addrs);
    assert_ne!(without, want, "stripping should lose the lines");
    // What a debug file brings is DWARF: compare the addresses DWARF
    // covers. (Code outside it, the C runtime's, is named by the symbol
    // table; `--strip-debug` also drops the STT_FILE symbols that gave its
    // file names.)
    let addrs: Vec<String> = addrs
        .iter()
        .zip(want.lines())
        .filter(|(_, line)| !line.contains(r#""line":0"#))
        .map(|(a, _)| a.clone())
        .collect();
    let want = resolve_json(&full, &empty, &addrs);
    let without = resolve_json(&stripped, &empty, &addrs);

    // By build id, under a debug root.
    let data = std::fs::read(&full).unwrap();
    let id = object::File::parse(&*data)
        .unwrap()
        .build_id()
        .unwrap()
        .expect("g++ writes a build id")
        .to_vec();
    let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
    let root = dir.path().join("debug-root");
    let by_id = root
        .join(".build-id")
        .join(&hex[..2])
        .join(format!("{}.debug", &hex[2..]));
    std::fs::create_dir_all(by_id.parent().unwrap()).unwrap();
    std::fs::copy(&debug, &by_id).unwrap();
    assert_same(
        &resolve_json(&stripped, &root, &addrs),
        &want,
        "by build id",
    );

    // By .gnu_debuglink, beside the binary and in .debug/, CRC checked.
    let linked = dir.path().join("bin").join("linked");
    run(Command::new("objcopy")
        .arg(format!("--add-gnu-debuglink={}", debug.display()))
        .arg(&stripped)
        .arg(&linked));
    let beside = dir.path().join("bin").join("shapes.debug");
    std::fs::copy(&debug, &beside).unwrap();
    assert_same(
        &resolve_json(&linked, &empty, &addrs),
        &want,
        "debug link beside",
    );
    std::fs::remove_file(&beside).unwrap();
    let dot_debug = dir.path().join("bin/.debug/shapes.debug");
    std::fs::create_dir_all(dot_debug.parent().unwrap()).unwrap();
    std::fs::copy(&debug, &dot_debug).unwrap();
    assert_same(
        &resolve_json(&linked, &empty, &addrs),
        &want,
        "debug link in .debug/",
    );
    // A file of that name whose CRC does not match is not used.
    let mut other = std::fs::read(&debug).unwrap();
    let last = other.len() - 1;
    other[last] ^= 0xff;
    std::fs::write(&dot_debug, other).unwrap();
    assert_same(
        &resolve_json(&linked, &empty, &addrs),
        &without,
        "debug link with a bad CRC",
    );
}

#[test]
fn compressed_sections_and_dwarf4_give_the_same_answers() {
    let dir = tempfile::tempdir().unwrap();
    let full = build_fixture(dir.path(), "shapes", &["-O2", "-g"]);
    let addrs = text_addrs(&full);
    let want = resolve_json(&full, dir.path(), &addrs);
    for kind in ["zlib", "zstd"] {
        let compressed = dir.path().join(format!("shapes-{kind}"));
        run(Command::new("objcopy")
            .arg(format!("--compress-debug-sections={kind}"))
            .arg(&full)
            .arg(&compressed));
        let data = std::fs::read(&compressed).unwrap();
        let file = object::File::parse(&*data).unwrap();
        let info = file.section_by_name(".debug_info").unwrap();
        let format = info.compressed_file_range().unwrap().format;
        assert_ne!(
            format,
            object::CompressionFormat::None,
            "objcopy did not compress with {kind}"
        );
        assert_eq!(
            resolve_json(&compressed, dir.path(), &addrs),
            want,
            "{kind}"
        );
    }
    // DWARF 4 (and its line table format) describes the same code the
    // same way; the code itself is identical, so are the answers.
    let v4 = build_fixture(dir.path(), "shapes4", &["-O2", "-gdwarf-4"]);
    assert_eq!(text_addrs(&v4), addrs);
    assert_same(&resolve_json(&v4, dir.path(), &addrs), &want, "DWARF 4");
}

#[test]
fn bad_input_gets_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing");
    let out = kiln(&["symbols", "resolve", missing.to_str().unwrap(), "0x10"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot read") && err.contains("missing"),
        "{err}"
    );

    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "not an ELF").unwrap();
    let out = kiln(&["symbols", "resolve", text.to_str().unwrap(), "0x10"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not a valid ELF file"), "{err}");

    let out = kiln(&["symbols", "resolve", text.to_str().unwrap(), "0xnothex"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not a hex address"));
}
