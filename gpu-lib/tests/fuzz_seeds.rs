//! The `gpu_snapshot` fuzz target's seeds must be frames this build reads:
//! a seed written before a change to the snapshot's layout only exercises
//! the refusal path. `KILN_WRITE_FIXTURES=1 cargo test -p kiln-gpu --test
//! fuzz_seeds` writes them again.

use std::path::PathBuf;

use kiln_cuda::Snapshot;
use kiln_cuda::wire::{
    Counters, Cubin, KernelAggregate, MemoryAggregate, MemoryStats, PcSampleAggregate,
    StallReasonName,
};

fn seeds_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds/gpu_snapshot")
}

/// A snapshot with every part filled: kernels, PC samples with their
/// stall table and cubin, device memory, counters.
fn full(sequence: u64) -> Snapshot {
    Snapshot {
        pid: 4242,
        sequence,
        start_ns: 1_000_000_000,
        end_ns: 1_500_000_000,
        kernels: vec![KernelAggregate {
            tid: 7,
            device_id: 0,
            name: "_Z8kiln_fmaPfi".into(),
            launches: 3,
            total_ns: 4_500,
            exemplar_correlation_ids: vec![1, 2],
        }],
        pc_samples: vec![PcSampleAggregate {
            function_name: "_Z8kiln_fmaPfi".into(),
            cubin_crc: 0xfeed,
            function_index: 1,
            pc_offset: 0x90,
            stall_reason: 4,
            samples: 17,
        }],
        stall_reasons: vec![StallReasonName {
            index: 4,
            name: "smsp__pcsamp_warps_issue_stalled_long_scoreboard".into(),
        }],
        cubins: vec![Cubin {
            crc: 0xfeed,
            image: b"\x7fELF...".to_vec(),
        }],
        counters: Counters {
            launches: 3,
            kernels: 3,
            pc_drains: 1,
            ..Counters::default()
        },
        memory_allocated: vec![MemoryAggregate {
            tid: 7,
            correlation_id: 5,
            bytes: 1 << 20,
            count: 1,
        }],
        memory_live: vec![MemoryAggregate {
            tid: 7,
            correlation_id: 5,
            bytes: 1 << 20,
            count: 1,
        }],
        memory: MemoryStats {
            live_bytes: 1 << 20,
            peak_live_bytes: 1 << 20,
            allocations: 1,
            allocated_bytes: 1 << 20,
            ..MemoryStats::default()
        },
    }
}

/// The seeds by name: one full frame, and two frames back to back.
fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let first = full(0).encode().unwrap();
    let mut two = first.clone();
    two.extend(
        Snapshot {
            sequence: 1,
            ..Snapshot::default()
        }
        .encode()
        .unwrap(),
    );
    vec![("pcs_stalls_cubin", first), ("two_frames", two)]
}

#[test]
fn every_seed_is_a_frame_this_build_reads() {
    let dir = seeds_dir();
    if std::env::var_os("KILN_WRITE_FIXTURES").is_some() {
        for (name, bytes) in seeds() {
            std::fs::write(dir.join(name), bytes).unwrap();
        }
    }
    let mut read = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let bytes = std::fs::read(&path).unwrap();
        let mut input = bytes.as_slice();
        let snapshot = Snapshot::read_from(&mut input).unwrap_or_else(|e| {
            panic!(
                "{}: {e}; KILN_WRITE_FIXTURES=1 writes the seeds again",
                path.display()
            )
        });
        assert_eq!(snapshot.pid, 4242, "{}", path.display());
        read += 1;
    }
    assert!(read >= 2, "{read} seeds in {}", dir.display());
}
