//! The ksym format on hand-made tables: lookups, determinism, and corrupt
//! input (every byte flipped, truncations, arbitrary bytes).

use kiln_symbolizer_workers::{
    ExtractOptions, Frame, Function, Inline, Ksym, KsymError, LineRow, NONE, Range, SourceFile,
    SymbolTable, extract, join_path, ksym,
};
use proptest::prelude::*;

fn function(name: &str) -> Function {
    Function {
        name: name.into(),
        mangled: Some(format!("_Z{name}")),
    }
}

/// `outer` at 0x1000..0x1100 with `mid` inlined at 0x1010..0x1080 (called
/// from a.c:10) and `inner` inlined into `mid` at 0x1020..0x1040 (called
/// from b.h:20); `plain` at 0x2000..0x2010 with no lines.
fn table() -> SymbolTable {
    let a = 0;
    let b = 1;
    SymbolTable {
        functions: vec![
            function("outer"),
            function("mid"),
            function("inner"),
            function("plain"),
        ],
        files: vec![
            SourceFile {
                dir: "/src".into(),
                name: "a.c".into(),
            },
            SourceFile {
                dir: "/inc".into(),
                name: "b.h".into(),
            },
        ],
        ranges: vec![
            Range {
                start: 0x1000,
                end: 0x1100,
                function: 0,
                lines: vec![
                    LineRow {
                        addr: 0x1000,
                        file: a,
                        line: 5,
                    },
                    LineRow {
                        addr: 0x1010,
                        file: b,
                        line: 20,
                    },
                    LineRow {
                        addr: 0x1020,
                        file: b,
                        line: 30,
                    },
                    LineRow {
                        addr: 0x1040,
                        file: b,
                        line: 21,
                    },
                    LineRow {
                        addr: 0x1080,
                        file: a,
                        line: 11,
                    },
                ],
                inlines: vec![
                    Inline {
                        start: 0x1020,
                        end: 0x1040,
                        depth: 2,
                        function: 2,
                        call_file: b,
                        call_line: 20,
                    },
                    Inline {
                        start: 0x1010,
                        end: 0x1080,
                        depth: 1,
                        function: 1,
                        call_file: a,
                        call_line: 10,
                    },
                ],
            },
            Range {
                start: 0x2000,
                end: 0x2010,
                function: 3,
                lines: vec![],
                inlines: vec![],
            },
        ],
    }
}

fn chain(k: &Ksym<'_>, addr: u64) -> Vec<(String, String, u32)> {
    let mut frames = Vec::new();
    k.lookup(addr, &mut frames);
    frames
        .iter()
        .map(|f: &Frame<'_>| {
            (
                f.function().as_deref().unwrap_or("?").to_owned(),
                f.path().unwrap_or_default(),
                f.line,
            )
        })
        .collect()
}

fn owned(v: &[(&str, &str, u32)]) -> Vec<(String, String, u32)> {
    v.iter()
        .map(|&(f, p, l)| (f.to_owned(), p.to_owned(), l))
        .collect()
}

#[test]
fn lookups_return_inline_chains_innermost_first() {
    let bytes = ksym::encode(&table());
    let k = Ksym::open(&bytes).unwrap();
    assert_eq!(chain(&k, 0x1000), owned(&[("outer", "/src/a.c", 5)]));
    assert_eq!(chain(&k, 0x100f), owned(&[("outer", "/src/a.c", 5)]));
    assert_eq!(
        chain(&k, 0x1010),
        owned(&[("mid", "/inc/b.h", 20), ("outer", "/src/a.c", 10)])
    );
    assert_eq!(
        chain(&k, 0x1025),
        owned(&[
            ("inner", "/inc/b.h", 30),
            ("mid", "/inc/b.h", 20),
            ("outer", "/src/a.c", 10)
        ])
    );
    assert_eq!(
        chain(&k, 0x1040),
        owned(&[("mid", "/inc/b.h", 21), ("outer", "/src/a.c", 10)])
    );
    assert_eq!(chain(&k, 0x10ff), owned(&[("outer", "/src/a.c", 11)]));
    assert_eq!(chain(&k, 0x2005), owned(&[("plain", "", 0)]));
    // Gaps and the outside have no frames.
    for addr in [0, 0xfff, 0x1100, 0x1fff, 0x2010, u64::MAX] {
        assert!(chain(&k, addr).is_empty(), "{addr:#x}");
    }
    let mut frames = Vec::new();
    k.lookup(0x1025, &mut frames);
    assert_eq!(frames[0].mangled().as_deref(), Some("_Zinner"));
}

/// Guards the line marks: in a range with many rows, every row is found
/// whether or not a mark precedes it.
#[test]
fn long_ranges_find_every_row() {
    let rows = 1000u32;
    let lines = (0..rows)
        .map(|i| LineRow {
            addr: 0x1000 + 4 * u64::from(i),
            file: i % 2,
            line: 1 + (i * 7) % 300,
        })
        .collect();
    let t = SymbolTable {
        functions: vec![function("long")],
        files: vec![
            SourceFile {
                dir: "/d".into(),
                name: "x.c".into(),
            },
            SourceFile {
                dir: "/d".into(),
                name: "y.h".into(),
            },
        ],
        ranges: vec![Range {
            start: 0x1000,
            end: 0x1000 + 4 * u64::from(rows),
            function: 0,
            lines,
            inlines: vec![],
        }],
    };
    let bytes = ksym::encode(&t);
    let k = Ksym::open(&bytes).unwrap();
    k.verify().unwrap();
    for i in 0..rows {
        let want = owned(&[(
            "long",
            ["/d/x.c", "/d/y.h"][(i % 2) as usize],
            1 + (i * 7) % 300,
        )]);
        for delta in 0..4 {
            assert_eq!(
                chain(&k, 0x1000 + 4 * u64::from(i) + delta),
                want,
                "row {i}"
            );
        }
    }
}

#[test]
fn batches_answer_as_single_lookups() {
    let bytes = ksym::encode(&table());
    let k = Ksym::open(&bytes).unwrap();
    // Every address around both ranges, out of order, each twice, with
    // uncovered ones before, between and after.
    let mut addrs: Vec<u64> = (0xff0..0x1110).chain(0x1ff0..0x2020).collect();
    addrs.extend(addrs.clone().iter().rev());
    addrs.swap(3, 500);
    let mut frames = Vec::new();
    for round in [&addrs[..], &addrs[..7], &[]] {
        let mut answered = vec![0; round.len()];
        let mut prev = 0;
        k.lookup_many(round, |i, batch| {
            assert!(round[i] >= prev, "answered in address order");
            prev = round[i];
            answered[i] += 1;
            k.lookup(round[i], &mut frames);
            assert_eq!(batch, &frames[..], "{:#x}", round[i]);
        });
        assert!(answered.iter().all(|&n| n == 1), "each position once");
    }
}

/// A Rust legacy mangled name is kept as its hash when mangling its
/// demangled name gives it back, and read back whole; other names are kept
/// as they are.
/// `functions` encoded with a range each, 0x80 bytes at 0x1000 + 0x100 × its
/// index, without lines.
fn encode_functions(functions: Vec<Function>) -> Vec<u8> {
    let ranges = (0..functions.len() as u64)
        .map(|i| Range {
            start: 0x1000 + 0x100 * i,
            end: 0x1080 + 0x100 * i,
            function: i as u32,
            lines: vec![],
            inlines: vec![],
        })
        .collect();
    ksym::encode(&SymbolTable {
        functions,
        files: vec![],
        ranges,
    })
}

/// The bytes of ksym file `bytes` (version 6 on), then the text of its
/// mangled names section (blocks count u32, then 8 bytes per block, then
/// a zstd frame per block), decompressed: what it stores, to look for.
fn with_mangled_names_decompressed(bytes: &[u8]) -> Vec<u8> {
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
    // The mangled names section is the 8th: its (offset, count) pair.
    let (offset, len) = (u32_at(16 + 8 * 7), u32_at(20 + 8 * 7));
    let mut out = bytes.to_vec();
    if len > 0 {
        let frames = offset + 4 + 8 * u32_at(offset);
        out.extend(zstd::decode_all(&bytes[frames..offset + len]).unwrap());
    }
    out
}

#[test]
fn rust_legacy_names_are_kept_as_their_hash() {
    let rust = "_ZN70_$LT$alloc..vec..Vec$LT$T$C$A$GT$$u20$as$u20$core..ops..drop..Drop$GT$4drop17h8f3c2a1b0d9e7f65E";
    let thin_lto = "_ZN4core3fmt5Write10write_char17h59e2772cb10c86c5E.llvm.8692768016756014912";
    let functions = vec![
        Function {
            name: "<alloc::vec::Vec<T,A> as core::ops::drop::Drop>::drop".into(),
            mangled: Some(rust.into()),
        },
        // A hash-shaped name its demangled name does not give back.
        Function {
            name: "renamed".into(),
            mangled: Some("_ZN3foo3bar17h0123456789abcdefE".into()),
        },
        // A name ThinLTO made visible across code units.
        Function {
            name: "core::fmt::Write::write_char".into(),
            mangled: Some(thin_lto.into()),
        },
    ];
    let bytes = encode_functions(functions);
    let text = with_mangled_names_decompressed(&bytes);
    let contains = |s: &[u8]| text.windows(s.len()).any(|w| w == s);
    // The hash is kept as its 8 bytes, in the function's record.
    assert!(!contains(rust.as_bytes()) && !contains(b"8f3c2a1b0d9e7f65"));
    assert!(contains(&0x8f3c_2a1b_0d9e_7f65u64.to_le_bytes()));
    assert!(contains(b"_ZN3foo3bar17h0123456789abcdefE"));
    // The ThinLTO name as its hash and suffix only.
    assert!(!contains(b"_ZN4core3fmt5Write"));
    assert!(contains(b"59e2772cb10c86c5.llvm.8692768016756014912"));
    let k = Ksym::open(&bytes).unwrap();
    k.verify().unwrap();
    let mut frames = Vec::new();
    k.lookup(0x1010, &mut frames);
    assert_eq!(frames[0].mangled().as_deref(), Some(rust));
    k.lookup(0x1110, &mut frames);
    assert_eq!(
        frames[0].mangled().as_deref(),
        Some("_ZN3foo3bar17h0123456789abcdefE")
    );
    k.lookup(0x1210, &mut frames);
    assert_eq!(frames[0].mangled().as_deref(), Some(thin_lto));
}

/// A string that begins another (`foo::bar` in `foo::bar::{{closure}}`,
/// `a.c` in `a.cc`) is stored once, inside the longer one; each still
/// reads back as itself, the empty name too.
#[test]
fn strings_that_begin_others_are_read_from_them() {
    let names = ["foo::bar", "", "foo::bar::{{closure}}", "foo::b", "zed"];
    let functions = names
        .iter()
        .map(|&name| Function {
            name: name.into(),
            mangled: None,
        })
        .collect();
    let files = ["a.c", "a.cc", "b.h"]
        .iter()
        .map(|&name| SourceFile {
            dir: "/src".into(),
            name: name.into(),
        })
        .collect();
    let ranges = (0..names.len())
        .map(|i| Range {
            start: 0x1000 + 0x100 * i as u64,
            end: 0x1080 + 0x100 * i as u64,
            function: i as u32,
            lines: vec![LineRow {
                addr: 0x1000 + 0x100 * i as u64,
                file: (i % 3) as u32,
                line: 7,
            }],
            inlines: vec![],
        })
        .collect();
    let bytes = ksym::encode(&SymbolTable {
        functions,
        files,
        ranges,
    });
    let count = |s: &[u8]| bytes.windows(s.len()).filter(|w| *w == s).count();
    assert_eq!(count(b"foo::b"), 1);
    assert_eq!(count(b"a.c"), 1);
    let k = Ksym::open(&bytes).unwrap();
    k.verify().unwrap();
    let mut frames = Vec::new();
    for (i, name) in names.iter().enumerate() {
        k.lookup(0x1010 + 0x100 * i as u64, &mut frames);
        assert_eq!(frames[0].function().as_deref(), Some(*name), "function {i}");
        let file = ["a.c", "a.cc", "b.h"][i % 3];
        assert_eq!(frames[0].file(), Some(file), "file of function {i}");
    }
}

/// A C++ name that demangling its mangled name gives back is not stored:
/// it reads back demangled, once per file through a `KsymFile` (borrowed
/// from it), or each time from bare bytes. A name that demangling does
/// not give back is stored as it is.
#[test]
fn names_that_demangling_gives_back_are_not_stored() {
    let functions = vec![
        Function {
            name: "std::vector<int, std::allocator<int> >::push_back(int const&)".into(),
            mangled: Some("_ZNSt6vectorIiSaIiEE9push_backERKi".into()),
        },
        Function {
            name: "renamed".into(),
            mangled: Some("_ZN2ns1gEi".into()),
        },
    ];
    let bytes = encode_functions(functions);
    let text = with_mangled_names_decompressed(&bytes);
    let contains = |s: &[u8]| text.windows(s.len()).any(|w| w == s);
    assert!(!contains(b"push_back(int const&)"));
    assert!(contains(b"_ZNSt6vectorIiSaIiEE9push_backERKi"));
    assert!(contains(b"renamed") && contains(b"_ZN2ns1gEi"));
    let expect = |k: &Ksym<'_>, owned: bool| {
        let mut frames = Vec::new();
        k.lookup(0x1010, &mut frames);
        let name = frames[0].function().unwrap();
        assert_eq!(
            name,
            "std::vector<int, std::allocator<int> >::push_back(int const&)"
        );
        assert_eq!(matches!(name, std::borrow::Cow::Owned(_)), owned);
        assert_eq!(
            frames[0].mangled().as_deref(),
            Some("_ZNSt6vectorIiSaIiEE9push_backERKi")
        );
        k.lookup(0x1110, &mut frames);
        assert_eq!(frames[0].function().as_deref(), Some("renamed"));
    };
    let bare = Ksym::open(&bytes).unwrap();
    bare.verify().unwrap();
    expect(&bare, true);
    let file = kiln_symbolizer_workers::KsymFile::new(bytes.clone()).unwrap();
    expect(&file.ksym(), false);
    expect(&file.ksym(), false);
    // The mangled names' text, once decompressed, is counted.
    let text = "_ZNSt6vectorIiSaIiEE9push_backERKi_ZN2ns1gEi".len();
    assert_eq!(file.memory(), bytes.len() + text);
}

/// Every mangled name of this test program (Rust, legacy mangling) reads
/// back as extraction found it, most of them made again from their hash.
#[test]
fn own_mangled_names_read_back_whole() {
    let exe = std::env::current_exe().unwrap();
    let table = extract(&exe, &ExtractOptions::default()).unwrap().table;
    let bytes = ksym::encode(&table);
    let k = Ksym::open(&bytes).unwrap();
    let mangled: std::collections::HashSet<&str> = table
        .functions
        .iter()
        .filter_map(|f| f.mangled.as_deref())
        .collect();
    let (mut read, mut made) = (0, 0);
    let mut frames = Vec::new();
    for i in 0..k.len() {
        k.lookup(k.range(i).unwrap().0, &mut frames);
        for frame in &frames {
            let Some(name) = frame.mangled() else {
                continue;
            };
            assert!(mangled.contains(name.as_ref()), "{name}");
            read += 1;
            made += usize::from(matches!(name, std::borrow::Cow::Owned(_)));
        }
    }
    assert!(made > read / 2, "{made} of {read} made from their hash");
}

#[test]
fn encoding_is_deterministic() {
    assert_eq!(ksym::encode(&table()), ksym::encode(&table()));
}

#[test]
fn empty_table_opens() {
    let bytes = ksym::encode(&SymbolTable::default());
    let k = Ksym::open(&bytes).unwrap();
    assert!(k.is_empty());
    assert!(chain(&k, 0x1000).is_empty());
}

#[test]
fn foreign_and_truncated_bytes_are_refused() {
    let bytes = ksym::encode(&table());
    assert_eq!(Ksym::open(b"").unwrap_err(), KsymError::TooShort { len: 0 });
    let mut other = bytes.clone();
    other[0] = b'X';
    assert_eq!(Ksym::open(&other).unwrap_err(), KsymError::BadMagic);
    let mut newer = bytes.clone();
    newer[4] = ksym::VERSION as u8 + 1;
    assert_eq!(
        Ksym::open(&newer).unwrap_err(),
        KsymError::UnsupportedVersion(ksym::VERSION + 1)
    );
    // Flags this version does not know; inline nodes shared by every
    // range, which version 2 had.
    let mut flagged = bytes.clone();
    flagged[12] = 4;
    assert_eq!(Ksym::open(&flagged).unwrap_err(), KsymError::BadHeader);
    let mut shared_nodes = bytes.clone();
    shared_nodes[16 + 8 * 2 + 4] = 1;
    assert_eq!(Ksym::open(&shared_nodes).unwrap_err(), KsymError::BadHeader);
    // A file of an earlier version is named as such, so that the caller
    // upgrades it.
    assert_eq!(
        Ksym::open(&ksym::v1::encode(&table())).unwrap_err(),
        KsymError::Outdated(1)
    );
    for version in 2..ksym::VERSION {
        let mut earlier = bytes.clone();
        earlier[4] = version as u8;
        assert_eq!(
            Ksym::open(&earlier).unwrap_err(),
            KsymError::Outdated(version)
        );
    }
    for len in 0..bytes.len() {
        assert!(
            Ksym::open(&bytes[..len]).is_err(),
            "a ksym cut to {len} bytes was accepted"
        );
    }
}

/// Guards the promise that corrupt input gives an error or a ksym whose
/// lookups are safe, never a panic or a hang.
#[test]
fn every_flipped_byte_is_survived() {
    let bytes = ksym::encode(&table());
    for i in 0..bytes.len() {
        for flip in [0x01u8, 0x80, 0xff] {
            let mut bad = bytes.clone();
            bad[i] ^= flip;
            if let Ok(k) = Ksym::open(&bad) {
                let _ = k.verify();
                let mut frames = Vec::new();
                for addr in [0x1000, 0x1025, 0x1040, 0x2005, 0x3000] {
                    k.lookup(addr, &mut frames);
                    assert!(frames.len() <= 8);
                }
            }
        }
    }
}

/// Where section `index` (in header order) starts.
fn section_offset(bytes: &[u8], index: usize) -> usize {
    let at = 16 + 8 * index;
    u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize
}

#[test]
fn nodes_refer_only_to_earlier_parents() {
    // A node whose parent is itself would make the chain walk endless.
    // The first range's body ends with its nodes' parents, a byte each:
    // `mid` (none) and `inner` (1 + mid's index); make inner its own.
    let mut bytes = ksym::encode(&table());
    let ranges = section_offset(&bytes, 0);
    // The second (compact, 24-byte) range record's body is at its byte 12.
    let second_body = u32::from_le_bytes(bytes[ranges + 36..ranges + 40].try_into().unwrap());
    let inner_parent = section_offset(&bytes, 1) + second_body as usize - 1;
    assert_eq!(bytes[inner_parent], 1, "inner's parent is mid");
    bytes[inner_parent] = 2;
    let k = Ksym::open(&bytes).unwrap();
    assert_eq!(k.verify(), Err(KsymError::BadLines { range: 0 }));
    // Lookups stop at such a node rather than walk it forever.
    let mut frames = Vec::new();
    for addr in 0x1000..0x3000 {
        k.lookup(addr, &mut frames);
        assert!(frames.len() <= 8);
    }
}

/// What two layouts must agree on for a frame: a mangled symbol by its
/// mangled name (its demangled spelling follows the demangler of the day:
/// version 2 files hold `cpp_demangle`'s, Kiln now prints GCC's), other
/// functions by name; then file and line.
type FrameKey = (Option<String>, Option<String>, Option<String>, u32);

fn frame_key(f: &Frame<'_>) -> FrameKey {
    let mangled = f.mangled().map(|m| m.into_owned());
    let function = match mangled {
        Some(_) => None,
        None => f.function().map(|n| n.into_owned()),
    };
    (mangled, function, f.path(), f.line)
}

/// Checks that `old` and `new` (ksym bytes of two layouts of one table)
/// verify and answer every address of every range alike, and gives each
/// answer to `each`.
fn assert_same_answers(old: &[u8], new: &[u8], mut each: impl FnMut(&[Frame<'_>])) {
    let (old, new) = (Ksym::open(old).unwrap(), Ksym::open(new).unwrap());
    old.verify().unwrap();
    new.verify().unwrap();
    assert_eq!(old.len(), new.len());
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for i in 0..new.len() {
        let (start, end) = new.range(i).unwrap();
        for addr in start..end {
            old.lookup(addr, &mut a);
            new.lookup(addr, &mut b);
            let keys = |frames: &[Frame<'_>]| frames.iter().map(frame_key).collect::<Vec<_>>();
            assert_eq!(keys(&a), keys(&b), "{addr:#x}");
            each(&b);
        }
    }
}

/// The version of ksym bytes.
fn version(bytes: &[u8]) -> u32 {
    u32::from_le_bytes(bytes[4..8].try_into().unwrap())
}

/// A digest (FNV-1a) of every answer of `k`, frames whole, to every
/// address of its ranges, and the number of those addresses: what a
/// reader answered, to compare with what another answers for the same
/// addresses after it is gone.
fn answers_digest(k: &Ksym<'_>) -> (u64, usize) {
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes {
            hash ^= u64::from(b);
            hash = hash.wrapping_mul(0x100_0000_01b3);
        }
    };
    let mut frames = Vec::new();
    let mut addresses = 0;
    for i in 0..k.len() {
        let (start, end) = k.range(i).unwrap();
        for addr in start..end {
            addresses += 1;
            eat(&addr.to_le_bytes());
            k.lookup(addr, &mut frames);
            for f in &frames {
                for s in [
                    f.function().map(|s| s.into_owned()),
                    f.mangled().map(|s| s.into_owned()),
                    f.dir().map(str::to_owned),
                    f.file().map(str::to_owned),
                ] {
                    match s {
                        Some(s) => {
                            eat(&[1]);
                            eat(&(s.len() as u64).to_le_bytes());
                            eat(s.as_bytes());
                        }
                        None => eat(&[0]),
                    }
                }
                eat(&f.line.to_le_bytes());
            }
            eat(&[0xff]);
        }
    }
    (hash, addresses)
}

/// `old`, a file of an earlier version, which `Ksym::open` refuses as
/// such, upgraded: a current file that verifies and answers every address
/// as the in-place reader of versions 2 to 5 did, which `expected` says
/// (its [`answers_digest`] of `old`, taken with that reader before it gave
/// way to upgrades, at commit 74a2e87).
fn upgraded(old: &[u8], expected: (u64, usize)) -> Vec<u8> {
    let v = version(old);
    assert_eq!(Ksym::open(old).unwrap_err(), KsymError::Outdated(v));
    let std::borrow::Cow::Owned(new) = ksym::upgrade(old).unwrap() else {
        panic!("a version {v} file is rewritten");
    };
    assert_eq!(version(&new), ksym::VERSION);
    let k = Ksym::open(&new).unwrap();
    k.verify().unwrap();
    assert_eq!(answers_digest(&k), expected, "version {v}");
    new
}

/// A version 2 file (its inline nodes in one section shared by every
/// range) upgrades to a current file that answers as the current encoding
/// of the same ELF does: a C++ program with deep template inlining, and
/// the file Kiln 2's encoder wrote for it.
#[test]
fn version_2_files_upgrade_to_the_current_layout() {
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/v2");
    let unzstd =
        |name: &str| zstd::decode_all(&std::fs::read(fixtures.join(name)).unwrap()[..]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let elf = dir.path().join("shapes");
    std::fs::write(&elf, unzstd("shapes.elf.zst")).unwrap();
    let v2 = unzstd("shapes.ksym.zst");
    let current = ksym::encode(&extract(&elf, &ExtractOptions::default()).unwrap().table);
    assert_eq!(version(&v2), 2);
    let upgraded = upgraded(&v2, (0x62d7_3ab5_f2e6_0933, 12_727));
    let mut inlined = 0;
    assert_same_answers(&upgraded, &current, |frames| {
        inlined += usize::from(frames.len() > 2);
    });
    assert!(
        inlined > 100,
        "the fixture has deep inlining: {inlined} addresses"
    );
}

/// Guards the unchecked string slicing of lookups: a string record that
/// cuts a character in two, in a blob that is UTF-8 as a whole, must read
/// as unknown (and fail `verify`), never as a broken `&str`.
#[test]
fn strings_cut_inside_a_character_read_as_unknown() {
    let t = SymbolTable {
        functions: vec![Function {
            name: "é".into(),
            mangled: None,
        }],
        files: vec![],
        ranges: vec![Range {
            start: 0x1000,
            end: 0x1010,
            function: 0,
            lines: vec![],
            inlines: vec![],
        }],
    };
    let mut bytes = ksym::encode(&t);
    let k = Ksym::open(&bytes).unwrap();
    assert_eq!(chain(&k, 0x1000), owned(&[("é", "", 0)]));
    // The function's name is (offset, len) at the start of `funcs`, the
    // section whose header entry is the fourth.
    let funcs = section_offset(&bytes, 3);
    bytes[funcs + 4..funcs + 8].copy_from_slice(&1u32.to_le_bytes());
    let k = Ksym::open(&bytes).unwrap();
    assert_eq!(chain(&k, 0x1000), owned(&[("?", "", 0)]));
    assert_eq!(k.verify(), Err(KsymError::BadUtf8));
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..512), addr in any::<u64>()) {
        if let Ok(k) = Ksym::open(&data) {
            let mut frames = Vec::new();
            k.lookup(addr, &mut frames);
        }
    }

    #[test]
    fn arbitrary_bytes_after_a_valid_header_never_panic(
        tail in proptest::collection::vec(any::<u8>(), 0..512),
        addr in 0u64..0x3000,
    ) {
        let mut data = ksym::encode(&table());
        let keep = 16 + 8 * 7;
        data.truncate(keep);
        data.extend(tail);
        if let Ok(k) = Ksym::open(&data) {
            let mut frames = Vec::new();
            k.lookup(addr, &mut frames);
        }
    }
}

/// Guards the fixes of fuzz finds (`ksym_open`): a damaged page index that
/// started the range search past the address made `lookup` subtract with
/// overflow; a page index sound but wrong passed `verify`; a range
/// ending past `u64::MAX` overflowed where a batch reuses an answer. Each
/// input under fixtures/fuzz must open or fail cleanly and answer lookups
/// without panicking after an upgrade (a version 1 find, of the reader of
/// version 1 that lookups no longer use, now of its upgrade). The finds
/// of versions 2 and 3, which their upgrade refuses, are also there
/// rewritten in version 6 (`-v6`: header, version and flags; the
/// version 2 one without its inline chains), with their damage, for the
/// reader of version 6.
#[test]
fn fuzz_finds_stay_fixed() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fuzz");
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        if path.to_string_lossy().ends_with("-v6") {
            // Damaged past what `open` checks: `verify` refuses them.
            assert!(Ksym::open(&data).unwrap().verify().is_err(), "{path:?}");
        }
        let Ok(data) = ksym::upgrade(&data) else {
            continue;
        };
        if let Ok(ksym) = Ksym::open(&data) {
            let verified = ksym.verify().is_ok();
            let mut frames = Vec::new();
            let words = data.chunks_exact(8).take(32);
            let addrs: Vec<u64> = [0, 1, 0x1000, u64::MAX]
                .into_iter()
                .chain(words.map(|w| u64::from_le_bytes(w.try_into().unwrap())))
                .collect();
            // A batch answers as single lookups in a file that verifies
            // (two finds: a page index sound but wrong, which verify now
            // refuses; overlapping ranges, which it always did).
            ksym.lookup_many(&addrs, |i, batch| {
                ksym.lookup(addrs[i], &mut frames);
                assert!(!verified || batch == &frames[..], "{:#x}", addrs[i]);
            });
        }
    }
}

/// A version 1 file upgrades to what `encode` writes for its table, which
/// answers every address (and around it) as the table says, and as the
/// in-place reader of version 1 did (digests taken with it at commit
/// 5763cad): of the hand-made table, and of a table shaped like a Rust
/// program's (whose answers the files of versions 3 to 5 gave too).
#[test]
fn upgraded_version_1_files_answer_as_before() {
    for (table, expected) in [
        (table(), (0xa1dc_3eef_2172_2f95, 272)),
        (
            rust_like_table(600, 300, 80),
            (0xe4cb_5313_5573_5748, 64_997),
        ),
    ] {
        let v1 = ksym::v1::encode(&table);
        assert_eq!(Ksym::open(&v1).unwrap_err(), KsymError::Outdated(1));
        let upgraded = ksym::upgrade(&v1).unwrap();
        assert_eq!(upgraded.as_ref(), ksym::encode(&table).as_slice());
        let k = Ksym::open(&upgraded).unwrap();
        k.verify().unwrap();
        assert_eq!(answers_digest(&k), expected);
        let (first, _) = k.range(0).unwrap();
        let (_, last) = k.range(k.len() - 1).unwrap();
        assert_answers_as_the_table(&k, &table, (first - 16..last + 16).step_by(1));
    }
}

/// The current version passes through `upgrade` untouched, and so does
/// what is no ksym file at all (`open` says what is wrong with it).
#[test]
fn upgrade_leaves_current_and_foreign_bytes_alone() {
    let bytes = ksym::encode(&table());
    assert!(matches!(
        ksym::upgrade(&bytes),
        Ok(std::borrow::Cow::Borrowed(b)) if b == bytes.as_slice()
    ));
    assert!(matches!(
        ksym::upgrade(b"junk"),
        Ok(std::borrow::Cow::Borrowed(b"junk"))
    ));
}

/// A damaged file of an earlier version fails its upgrade with an error,
/// or upgrades to a file that opens, verifies and answers; never a panic:
/// every byte flipped, of a version 1 file and of the `ksym_open` fuzz
/// seeds of versions 2 to 5.
#[test]
fn damaged_earlier_files_fail_their_upgrade_cleanly() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds/ksym_open");
    let seeds = [
        "c-O2-g-v2.ksym",
        "c-O2-g-v3.ksym",
        "c-O2-g-v4.ksym",
        "c-O2-g-v5.ksym",
        "rust-like-v4.ksym",
        "rust-like-v5.ksym",
    ]
    .map(|name| std::fs::read(dir.join(name)).unwrap());
    for bytes in std::iter::once(ksym::v1::encode(&table())).chain(seeds) {
        let mut upgraded_ok = 0;
        for i in 0..bytes.len() {
            for flip in [0x01u8, 0x80, 0xff] {
                let mut bad = bytes.clone();
                bad[i] ^= flip;
                let Ok(upgraded) = ksym::upgrade(&bad) else {
                    continue;
                };
                let Ok(k) = Ksym::open(&upgraded) else {
                    // Flipped into no ksym file, or into a newer version.
                    assert!(matches!(upgraded, std::borrow::Cow::Borrowed(_)));
                    continue;
                };
                if matches!(upgraded, std::borrow::Cow::Owned(_)) {
                    k.verify().unwrap();
                    upgraded_ok += 1;
                }
                let mut frames = Vec::new();
                for addr in [0x1000, 0x1025, 0x1040, 0x2005, 0x3000] {
                    k.lookup(addr, &mut frames);
                }
            }
        }
        assert!(upgraded_ok > 0, "version {}", version(&bytes));
    }
}

/// Guards two fuzz finds of the bucketed offsets: a body claiming billions
/// of bucket starts of no width (which cost no bytes) made `verify` walk
/// them all; and rows gigabytes apart in one range (damaged symbols)
/// would need millions of bucket starts. The first is refused at open,
/// the second encodes small, dropping the rows past a sane spread.
#[test]
fn bucket_counts_stay_bounded() {
    let mut t = table();
    t.ranges[1].end = 0x2000 + (1 << 31);
    t.ranges[1].lines = vec![
        LineRow {
            addr: 0x2000,
            file: 0,
            line: 1,
        },
        LineRow {
            addr: 0x2000 + (1 << 30),
            file: 0,
            line: 2,
        },
    ];
    let bytes = ksym::encode(&t);
    assert!(bytes.len() < 4096, "{} bytes", bytes.len());
    let k = Ksym::open(&bytes).unwrap();
    k.verify().unwrap();
    assert_eq!(
        chain(&k, 0x2000 + (1 << 30)),
        owned(&[("plain", "/src/a.c", 1)])
    );

    // The first range's body: base line u32, then its row bucket count
    // (u16), then the chain's; its format word is at byte 16 of its
    // (compact) record, the row bucket width in bits 0-1.
    let mut bad = ksym::encode(&table());
    let (ranges, bodies) = (section_offset(&bad, 0), section_offset(&bad, 1));
    bad[bodies + 4..bodies + 6].copy_from_slice(&u16::MAX.to_le_bytes());
    bad[ranges + 16] &= !3;
    assert_eq!(
        Ksym::open(&bad).unwrap().verify().unwrap_err(),
        KsymError::BadLines { range: 0 }
    );
}

/// A table shaped like a large Rust program's, made up deterministically:
/// `functions` functions, a third with legacy mangled names that mangling
/// their names gives back (lower-case hashes), a third whose hashes are
/// upper-case, a third C++ or unmangled; `files` files; ranges with line
/// rows every few bytes and inline calls nested three deep, their
/// functions drawn from the whole table.
fn rust_like_table(functions: usize, files: usize, ranges: usize) -> SymbolTable {
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move |below: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % below.max(1)
    };
    let functions = (0..functions)
        .map(|i| {
            let (module, name) = (format!("m{}", i % 97), format!("f{i}"));
            let path = format!("app::{module}::{name}");
            let hash = next(u64::MAX);
            let legacy = |hash: String| {
                format!(
                    "_ZN3app{}{module}{}{name}17h{hash}E",
                    module.len(),
                    name.len()
                )
            };
            let mangled = match i % 6 {
                0 | 1 => Some(legacy(format!("{hash:016x}"))),
                2 | 3 => Some(legacy(format!("{hash:016X}"))),
                4 => Some(format!("_Z{}{name}v", name.len())),
                _ => None,
            };
            Function {
                name: if i % 6 >= 4 { name } else { path },
                mangled,
            }
        })
        .collect::<Vec<_>>();
    let files: Vec<SourceFile> = (0..files)
        .map(|i| SourceFile {
            dir: format!("/src/crate{}", i % 13),
            name: format!("file{i}.rs"),
        })
        .collect();
    let (n_functions, n_files) = (functions.len() as u64, files.len() as u64);
    let mut start = 0x10_000u64;
    let ranges = (0..ranges)
        .map(|_| {
            let len = 0x40 + next(0x600);
            let end = start + len;
            let mut lines = Vec::new();
            let mut addr = start;
            while addr < end {
                // Now and then a line far from the others, as inlining makes.
                let far = next(4) == 0;
                lines.push(LineRow {
                    addr,
                    file: next(n_files) as u32,
                    line: 1 + next(if far { 70_000 } else { 300 }) as u32,
                });
                addr += 1 + next(12);
            }
            // Up to three calls nested in one another, in a few places.
            let mut inlines = Vec::new();
            let mut at = start + next(16);
            while at + 16 < end {
                let outer_end = (at + 8 + next(0x100)).min(end);
                let (mut s, mut e) = (at, outer_end);
                for depth in 1..=1 + next(3) as u32 {
                    inlines.push(Inline {
                        start: s,
                        end: e,
                        depth,
                        function: next(n_functions) as u32,
                        call_file: next(n_files) as u32,
                        call_line: next(if depth == 1 { 5000 } else { 200 }) as u32,
                    });
                    let span = e - s;
                    if span < 4 {
                        break;
                    }
                    s += next(span / 2);
                    e -= next((e - s) / 2);
                }
                at = outer_end + next(64);
            }
            let range = Range {
                start,
                end,
                function: next(n_functions) as u32,
                lines,
                inlines,
            };
            start = end + next(32);
            range
        })
        .collect();
    SymbolTable {
        functions,
        files,
        ranges,
    }
}

/// Files of versions 3, 4 and 5 upgrade to exactly what the current
/// writer writes for their table, and answer as they did: version 3 (the
/// hashes of Rust legacy names as text in the blob, node functions and
/// file table entries in 4 bytes), version 4 (range records of 32 bytes)
/// and version 5 (mangled names in the blob, uncompressed). The fixtures
/// are what those versions' encoders wrote for
/// `rust_like_table(600, 300, 80)`; each is larger than the current
/// encoding.
#[test]
fn earlier_versions_upgrade_to_the_current_layout() {
    let current = ksym::encode(&rust_like_table(600, 300, 80));
    for v in [3, 4, 5] {
        let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join(format!("tests/fixtures/v{v}/rust-like.ksym.zst"));
        let old = zstd::decode_all(&std::fs::read(fixture).unwrap()[..]).unwrap();
        assert_eq!(version(&old), v);
        let upgraded = upgraded(&old, (0xe4cb_5313_5573_5748, 64_997));
        assert_eq!(upgraded, current, "version {v}");
        let (mut inlined, mut made) = (0, 0);
        assert_same_answers(&upgraded, &current, |frames| {
            inlined += usize::from(frames.len() > 2);
            made += frames
                .iter()
                .filter(|f| matches!(f.mangled(), Some(std::borrow::Cow::Owned(_))))
                .count();
        });
        assert!(inlined > 1000 && made > 1000, "{inlined} {made}");
        assert!(
            current.len() < old.len(),
            "{} bytes, {} in version {v}",
            current.len(),
            old.len()
        );
    }
}

/// The `ksym_open` fuzz target's seeds (`fuzz/seeds/ksym_open`) of earlier
/// versions upgrade to exactly the bytes its version 6 seeds hold, which
/// the current writer wrote for the same programs: a C program in every
/// version (1 to 6), a C++ one in versions 5 and 6.
#[test]
fn earlier_fuzz_seeds_upgrade_to_the_current_seeds() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds/ksym_open");
    let read = |name: &str| std::fs::read(dir.join(name)).unwrap();
    let earlier = (1..=5).map(|v| (format!("c-O2-g-v{v}.ksym"), "c-O2-g-v6.ksym"));
    let cpp = [("cpp-shapes-v5.ksym".to_owned(), "cpp-shapes-v6.ksym")];
    for (old, current) in earlier.chain(cpp) {
        let (old_bytes, current) = (read(&old), read(current));
        assert_eq!(version(&current), ksym::VERSION);
        assert!(version(&old_bytes) < ksym::VERSION, "{old}");
        let upgraded = ksym::upgrade(&old_bytes).unwrap();
        assert!(upgraded.as_ref() == current.as_slice(), "{old}");
    }
}

/// Every layout a file can have: node functions and file table entries
/// in 3 and 2 bytes (narrow: fewer than 2^24 − 1 functions and 2^16 − 1
/// files) or 4 and 4 (wide), and range records of 24 bytes (compact: code
/// below 4 GiB) or 32. In tables of 70,000 small ranges, each with a
/// function of its own, rows in files from all over (some in none) and
/// some with a call inlined from anywhere (some of no known function),
/// every address answers as the table says, singly and in a batch; the
/// table's version 1 file upgrades to the same bytes.
#[test]
fn every_layout_answers_as_its_table() {
    let (narrow, compact) = (1, 2);
    for (files, base, header_flags) in [
        (1_000, 0, narrow | compact),
        (70_000, 0, compact),
        (1_000, 1 << 32, narrow),
        (70_000, 1 << 32, 0),
    ] {
        let table = many_indexes_table(70_000, files, base);
        let current = ksym::encode(&table);
        let v1 = ksym::v1::encode(&table);
        assert_eq!(ksym::upgrade(&v1).unwrap().as_ref(), &current[..]);
        assert_eq!(
            u32::from_le_bytes(current[12..16].try_into().unwrap()),
            header_flags
        );
        let new = Ksym::open(&current).unwrap();
        new.verify().unwrap();
        let (start, _) = new.range(0).unwrap();
        let (_, end) = new.range(new.len() - 1).unwrap();
        assert_answers_as_the_table(&new, &table, (start..end).step_by(2));
        let addrs: Vec<u64> = (start..end).step_by(5).collect();
        let mut single = Vec::new();
        new.lookup_many(&addrs, |i, frames| {
            new.lookup(addrs[i], &mut single);
            assert_eq!(single, frames, "{:#x}", addrs[i]);
        });
    }
}

/// A range with more line rows and chain entries than a compact record
/// counts (65,535) is written as several ranges of the same function,
/// which answer every address as the one range of the table does; the
/// line in effect where a piece begins carries over.
#[test]
fn ranges_too_long_to_count_are_written_in_pieces() {
    let (start, len) = (0x10_000u64, 0x60_000u64);
    let range = Range {
        start,
        end: start + len,
        function: 0,
        // A row every 5 bytes, an inlined call every 4: 78,644 rows and
        // 196,608 chain entries. The halves begin between rows.
        lines: (start..start + len)
            .step_by(5)
            .map(|addr| LineRow {
                addr,
                file: (addr % 2) as u32,
                line: (addr % 1000) as u32 + 1,
            })
            .collect(),
        inlines: (start..start + len)
            .step_by(4)
            .map(|at| Inline {
                start: at,
                end: at + 2,
                depth: 1,
                function: 1 + (at % 3) as u32,
                call_file: 1,
                call_line: (at % 70) as u32,
            })
            .collect(),
    };
    let mut table = table();
    table.ranges = vec![range];
    let current = ksym::encode(&table);
    let new = Ksym::open(&current).unwrap();
    new.verify().unwrap();
    assert!(new.len() > 1, "{} ranges", new.len());
    assert_eq!(new.range(0).unwrap().0, start);
    assert_eq!(new.range(new.len() - 1).unwrap().1, start + len);
    assert_answers_as_the_table(&new, &table, start - 1..start + len + 1);
}

/// An answer as [`assert_answers_as_the_table`] compares it: per frame,
/// innermost first, the function's name and mangled name, the path and
/// the line.
type Answer = Vec<(Option<String>, Option<String>, Option<String>, u32)>;

/// Checks that `k` answers each of `addrs` as `table`, which it encodes,
/// says, read from the table itself with no ksym code: the range that
/// holds the address, the last line row at or before it (no file and line
/// 0 before the first), and the inlined calls around it, one per depth
/// (of two at one depth, the later-starting one), innermost first, each
/// called from the file and line of the frame outside it.
fn assert_answers_as_the_table(
    k: &Ksym<'_>,
    table: &SymbolTable,
    addrs: impl Iterator<Item = u64>,
) {
    // Per range, its calls by start and the longest one's length: the
    // calls around an address start at most that far before it.
    let calls: Vec<(Vec<&Inline>, u64)> = table
        .ranges
        .iter()
        .map(|r| {
            let mut calls: Vec<&Inline> = r.inlines.iter().collect();
            calls.sort_by_key(|c| c.start);
            let longest = calls.iter().map(|c| c.end - c.start).max().unwrap_or(0);
            (calls, longest)
        })
        .collect();
    let frame = |function: u32, file: u32, line: u32| {
        let f = table.functions.get(function as usize);
        let path = table
            .files
            .get(file as usize)
            .map(|f| join_path(&f.dir, &f.name));
        (
            f.map(|f| f.name.clone()),
            f.and_then(|f| f.mangled.clone()),
            path,
            line,
        )
    };
    let expected = |addr: u64| -> Answer {
        let r = table.ranges.partition_point(|r| r.start <= addr);
        let Some(range) = r.checked_sub(1).map(|r| &table.ranges[r]) else {
            return Vec::new();
        };
        if addr >= range.end {
            return Vec::new();
        }
        let row = range.lines.partition_point(|row| row.addr <= addr);
        let (mut file, mut line) = row.checked_sub(1).map_or((NONE, 0), |row| {
            (range.lines[row].file, range.lines[row].line)
        });
        let (by_start, longest) = &calls[r - 1];
        let from = by_start.partition_point(|c| c.start + longest <= addr);
        let to = by_start.partition_point(|c| c.start <= addr);
        let mut around: Vec<&Inline> = by_start[from..to]
            .iter()
            .copied()
            .filter(|c| addr < c.end)
            .collect();
        around.sort_by_key(|c| (std::cmp::Reverse(c.depth), std::cmp::Reverse(c.start)));
        around.dedup_by_key(|c| c.depth);
        let mut out = Vec::new();
        for call in around {
            out.push(frame(call.function, file, line));
            (file, line) = (call.call_file, call.call_line);
        }
        out.push(frame(range.function, file, line));
        out
    };
    let mut frames = Vec::new();
    for addr in addrs {
        k.lookup(addr, &mut frames);
        let answer: Answer = frames
            .iter()
            .map(|f| {
                (
                    f.function().map(|n| n.into_owned()),
                    f.mangled().map(|m| m.into_owned()),
                    f.path(),
                    f.line,
                )
            })
            .collect();
        assert_eq!(answer, expected(addr), "{addr:#x}");
    }
}

/// A range per function of `functions`, each 16 bytes from `base` on,
/// rows in files of `files` (or none), some with a call inlined (of a
/// function, or of none).
fn many_indexes_table(functions: u32, files: u32, base: u64) -> SymbolTable {
    let ranges = (0..functions)
        .map(|i| {
            let start = base + 0x1000 + 16 * u64::from(i);
            let row = |addr, file, line| LineRow { addr, file, line };
            let file = if i % 17 == 0 { NONE } else { (i * 13) % files };
            Range {
                start,
                end: start + 16,
                function: i,
                lines: vec![row(start, i % files, 1 + i % 100), row(start + 8, file, 7)],
                inlines: (i % 10 == 0)
                    .then_some(Inline {
                        start: start + 4,
                        end: start + 12,
                        depth: 1,
                        function: if i % 170 == 0 {
                            NONE
                        } else {
                            (i * 7) % functions
                        },
                        call_file: (i * 13) % files,
                        call_line: i,
                    })
                    .into_iter()
                    .collect(),
            }
        })
        .collect();
    SymbolTable {
        functions: (0..functions)
            .map(|i| Function {
                name: format!("f{i}"),
                mangled: None,
            })
            .collect(),
        files: (0..files)
            .map(|i| SourceFile {
                dir: "/src".into(),
                name: format!("{i}.c"),
            })
            .collect(),
        ranges,
    }
}
