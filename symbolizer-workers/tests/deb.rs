//! Debug files read out of Debian packages built here with `dpkg-deb`, in
//! each compression dpkg writes.

use std::path::Path;
use std::process::Command;

use kiln_symbolizer_workers::debug_files_in_deb;

fn dpkg_deb_available() -> bool {
    Command::new("dpkg-deb")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// A package holding `debug` as a build-id debug file, and files that are
/// not such (a debug file by path, a document), compressed with `-Z<how>`.
fn build(dir: &Path, how: &str, debug: &[u8]) -> std::path::PathBuf {
    let root = dir.join(format!("pkg-{how}"));
    let id_dir = root.join("usr/lib/debug/.build-id/ab");
    std::fs::create_dir_all(&id_dir).unwrap();
    std::fs::create_dir_all(root.join("DEBIAN")).unwrap();
    std::fs::create_dir_all(root.join("usr/lib/debug/usr/bin")).unwrap();
    std::fs::create_dir_all(root.join("usr/share/doc/t")).unwrap();
    std::fs::write(id_dir.join("cdef01.debug"), debug).unwrap();
    std::fs::write(root.join("usr/lib/debug/usr/bin/t.debug"), b"by path").unwrap();
    std::fs::write(root.join("usr/share/doc/t/copyright"), b"doc").unwrap();
    std::fs::write(
        root.join("DEBIAN/control"),
        "Package: t-dbg\nVersion: 1\nArchitecture: all\nMaintainer: t <t@example.invalid>\nDescription: t\n",
    )
    .unwrap();
    let deb = dir.join(format!("t-{how}.deb"));
    let out = Command::new("dpkg-deb")
        .args(["--build", "--root-owner-group", &format!("-Z{how}")])
        .arg(&root)
        .arg(&deb)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    deb
}

#[test]
fn build_id_debug_files_come_out_of_every_compression() {
    if !dpkg_deb_available() {
        eprintln!("SKIP: no dpkg-deb (not a Debian system)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let debug: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    for how in ["xz", "gzip", "zstd", "none"] {
        let deb = build(dir.path(), how, &debug);
        let mut found = Vec::new();
        let count = debug_files_in_deb(&deb, |m| found.push(m)).unwrap();
        assert_eq!(count, 1, "{how}");
        assert_eq!(found[0].path, "usr/lib/debug/.build-id/ab/cdef01.debug");
        assert!(found[0].data == debug, "{how}: the bytes differ");
    }
}

/// The `deb_read` fuzz target's seeds (`fuzz/seeds/deb_read`, built with
/// `dpkg-deb`, one per compression) must be packages this build reads, or
/// the fuzzer only explores the refusal paths.
#[test]
fn every_deb_read_fuzz_seed_reads() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds/deb_read");
    let mut seeds = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let bytes = std::fs::read(&path).unwrap();
        let mut found = Vec::new();
        let count = kiln_symbolizer_workers::debug_files_in_deb_reader(
            bytes.as_slice(),
            path.display().to_string(),
            |m| found.push(m.path),
        )
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(count, 1, "{}", path.display());
        assert_eq!(found, ["usr/lib/debug/.build-id/ab/cdef01.debug"]);
        seeds += 1;
    }
    assert!(seeds >= 4, "{seeds} seeds in {}", dir.display());
}
