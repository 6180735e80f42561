//! The unwind tables built from `.eh_frame` say what the compiler did: on
//! the test workload built with and without frame pointers. No root needed.

use std::path::{Path, PathBuf};

use kiln_agent::{CfaRule, RbpRule, UnwindTable};
use kiln_test_support::CBuild;
use object::{Object, ObjectSymbol};

fn compile(dir: &Path, frame_pointers: bool) -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/workloads/shares.c");
    let out = dir.join(if frame_pointers { "fp" } else { "nofp" });
    let flag = if frame_pointers {
        "-fno-omit-frame-pointer"
    } else {
        "-fomit-frame-pointer"
    };
    CBuild::clang().args(["-O2", flag]).file(&source, &out);
    out
}

/// (start, end) of each named function.
fn function(data: &[u8], name: &str) -> (u64, u64) {
    let file = object::File::parse(data).unwrap();
    let sym = file
        .symbols()
        .find(|s| s.name() == Ok(name))
        .unwrap_or_else(|| panic!("no symbol {name}"));
    (sym.address(), sym.address() + sym.size())
}

#[test]
fn tables_follow_the_stack_pointer_without_frame_pointers() {
    let dir = tempfile::tempdir().unwrap();
    let data = std::fs::read(compile(dir.path(), false)).unwrap();
    let table = UnwindTable::from_elf(&data).unwrap();
    for name in ["main", "path_a", "work_sixty", "write_many"] {
        let (start, end) = function(&data, name);
        let entry = table.find(start).unwrap();
        assert_eq!(entry.cfa, CfaRule::Rsp(8), "{name} at entry");
        assert_eq!(entry.rbp, RbpRule::Same, "{name} at entry");
        // Nothing in these functions moves the CFA to rbp.
        for row in table.rows().filter(|r| r.pc > start && r.pc < end) {
            assert!(matches!(row.cfa, CfaRule::Rsp(_)), "{name}: {row:?}");
        }
    }
    // path_a calls work_sixty with the stack realigned: 16 bytes to the CFA.
    let (start, end) = function(&data, "path_a");
    assert!(
        table
            .rows()
            .any(|r| r.pc > start && r.pc < end && r.cfa == CfaRule::Rsp(16)),
        "path_a never has CFA = rsp + 16"
    );
}

#[test]
fn tables_follow_rbp_with_frame_pointers() {
    let dir = tempfile::tempdir().unwrap();
    let data = std::fs::read(compile(dir.path(), true)).unwrap();
    let table = UnwindTable::from_elf(&data).unwrap();
    let (start, end) = function(&data, "path_a");
    let body = table
        .rows()
        .find(|r| r.pc > start && r.pc < end && matches!(r.cfa, CfaRule::Rbp(_)))
        .expect("a row with CFA on rbp inside path_a");
    assert_eq!(body.cfa, CfaRule::Rbp(16));
    assert_eq!(body.rbp, RbpRule::AtCfa(-16));
    // Past the last FDE, no rule.
    let last = table.rows().last().unwrap();
    assert_eq!(last.cfa, CfaRule::None);
}
