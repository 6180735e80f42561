//! `kiln gpu dump` against the library's own sender over a real socket,
//! and the GPU check kit's `snapdump` shim in front of it. nvdisasm is the
//! one thing faked (a script printing its output format): there is no CUDA
//! toolkit here.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use kiln_cuda::wire::{
    Counters, Cubin, KernelAggregate, MemoryAggregate, MemoryStats, PcSampleAggregate,
    StallReasonName,
};
use kiln_cuda::{Snapshot, SnapshotSender};
use serde_json::Value;

const CUBIN_CRC: u64 = 0xc0b1;

/// Prints nvdisasm's format for the one cubin the tests send, fails on
/// anything else (so a cubin passed wrong names nothing).
const FAKE_NVDISASM: &str = r#"#!/bin/sh
grep -q KILNCUBIN "$1" || { echo "not the test cubin" >&2; exit 1; }
cat <<'EOF'
	.section	.text.kiln_fma,"ax",@progbits
	.text.kiln_fma:
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   FFMA R4, R4, R5, R6 ;    /* 0x0000000504047223 */
EOF
"#;

fn kernel(tid: u32, name: &str, launches: u64, total_ns: u64) -> KernelAggregate {
    KernelAggregate {
        tid,
        device_id: 0,
        name: name.into(),
        launches,
        total_ns,
        exemplar_correlation_ids: vec![tid],
    }
}

fn pc(pc_offset: u64, stall_reason: u32, samples: u64) -> PcSampleAggregate {
    PcSampleAggregate {
        function_name: "kiln_fma".into(),
        cubin_crc: CUBIN_CRC,
        function_index: 1,
        pc_offset,
        stall_reason,
        samples,
    }
}

/// Three snapshots of one process, as the library sends them: the stall
/// table and the cubin with the first, counters cumulative.
fn process_snapshots() -> Vec<Snapshot> {
    let stall = |index, name: &str| StallReasonName {
        index,
        name: format!("smsp__pcsamp_warps_issue_stalled_{name}"),
    };
    let first = Snapshot {
        pid: 4242,
        sequence: 0,
        start_ns: 1_000_000_000,
        end_ns: 1_500_000_000,
        kernels: vec![
            kernel(11, "kiln_fma", 5, 5000),
            kernel(12, "kiln_triad", 2, 8000),
        ],
        pc_samples: vec![pc(0x10, 3, 40), pc(0x20, 5, 2)],
        stall_reasons: vec![
            stall(3, "math_pipe_throttle"),
            stall(5, "long_scoreboard"),
            stall(7, "barrier"),
        ],
        cubins: vec![Cubin {
            crc: CUBIN_CRC,
            image: b"\x7fELF KILNCUBIN".to_vec(),
        }],
        counters: Counters {
            launches: 7,
            kernels: 7,
            pc_drains: 1,
            ..Counters::default()
        },
        // 1 MiB allocated under launch 3; peak 1.5 MiB in the interval.
        memory_allocated: vec![MemoryAggregate {
            tid: 7,
            correlation_id: 3,
            bytes: 1 << 20,
            count: 1,
        }],
        memory_live: vec![MemoryAggregate {
            tid: 7,
            correlation_id: 3,
            bytes: 1 << 20,
            count: 1,
        }],
        memory: MemoryStats {
            live_bytes: 1 << 20,
            peak_live_bytes: 3 << 19,
            allocations: 2,
            allocated_bytes: 3 << 19,
            frees: 1,
            ..MemoryStats::default()
        },
    };
    let counters = Counters {
        launches: 10,
        kernels: 10,
        pc_drains: 3,
        pc_drains_skipped: 1,
        cupti_errors: 2,
        pc_sampling_watchdog_trips: 1,
        ..Counters::default()
    };
    let second = Snapshot {
        sequence: 1,
        kernels: vec![kernel(13, "kiln_fma", 3, 3000)],
        pc_samples: vec![pc(0x10, 3, 10)],
        stall_reasons: Vec::new(),
        cubins: Vec::new(),
        counters,
        // Allocated is per interval; live and the totals carry on.
        memory_allocated: Vec::new(),
        ..first.clone()
    };
    let third = Snapshot {
        sequence: 2,
        kernels: Vec::new(),
        pc_samples: Vec::new(),
        ..second.clone()
    };
    vec![first, second, third]
}

/// A folder with the fake nvdisasm in it.
fn fake_nvdisasm(dir: &Path) -> PathBuf {
    let path = dir.join("nvdisasm");
    std::fs::write(&path, FAKE_NVDISASM).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// Waits for the dump to listen; kills it and shows its output if it
/// does not.
fn wait_for_socket(child: Child, socket: &Path) -> Child {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !socket.exists() {
        if Instant::now() > deadline {
            let mut child = child;
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "kiln gpu dump never listened on {}:\n{}{}",
                socket.display(),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn connection_of(summary: &Value, pid: u64) -> &Value {
    summary["connections"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["pids"][0] == pid)
        .unwrap_or_else(|| panic!("no connection of pid {pid} in {summary:#}"))
}

/// Two processes: one sends three good snapshots; the other one good frame
/// and then garbage. The good one is reported in full (kernels, PC samples
/// named through nvdisasm, stall reasons, every counter, folded stacks);
/// the bad frame is named with its connection, and makes the exit status 1.
#[test]
fn dumps_two_connections_and_names_the_bad_frame() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("gpu.sock");
    let summary_path = dir.path().join("summary.json");
    let child = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["gpu", "dump", "--socket"])
        .arg(&socket)
        .arg("--json")
        .arg(&summary_path)
        .args(["--connections", "2", "--timeout", "20s"])
        .env("KILN_NVDISASM", fake_nvdisasm(dir.path()))
        .env("KILN_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run kiln");
    let child = wait_for_socket(child, &socket);

    let mut sender = SnapshotSender::new(&socket);
    for snapshot in process_snapshots() {
        sender.send(&snapshot).unwrap();
    }
    drop(sender);

    let mut bad = UnixStream::connect(&socket).unwrap();
    Snapshot {
        pid: 777,
        sequence: 5,
        kernels: vec![kernel(70, "kiln_smem", 1, 900)],
        ..Snapshot::default()
    }
    .write_to(&mut bad)
    .unwrap();
    bad.write_all(b"NOT A FRAME, JUST BYTES").unwrap();
    drop(bad);

    let out = child.wait_with_output().unwrap();
    let (stdout, stderr) = text(&out);
    let context = format!("stdout:\n{stdout}\nstderr:\n{stderr}");
    assert_eq!(out.status.code(), Some(1), "{context}");

    // The error names the frame, what is wrong with it, and the connection.
    assert!(
        stderr.contains("1 of 2 connection(s) sent a frame that did not decode"),
        "{context}"
    );
    assert!(
        stderr.contains("frame 2 (after 1 decoded): not a kiln gpu snapshot frame"),
        "{context}"
    );

    // As it goes, then the report.
    for expected in [
        "snapshot conn=0 pid=4242 seq=0 interval=0.500s kernels=2 pc_samples=2",
        "connection 0: pid {4242}, 3 snapshots, sequences 0-2, closed cleanly",
        "connection 1: pid {777}, 1 snapshots, sequences 5 (GAP: 0-4 missing), ended on error: frame 2",
        "  PC samples: 52 at 2 PCs in 1 functions; 3 stall reasons in CUPTI's table; \
         2/2 PCs in a cubin the library sent; 1/2 PCs named by nvdisasm; 0 offsets not 16-byte aligned",
        "kiln_fma +0x0010 [FFMA R4, R4, R5, R6] math_pipe_throttle (waiting for a math pipe (oversubscribed)) 50",
        "kiln_fma +0x0020 [?] long_scoreboard",
        "      50 math_pipe_throttle           (3 smsp__pcsamp_warps_issue_stalled_math_pipe_throttle) waiting for a math pipe",
        "without samples: 7 barrier",
        "pc_drains 3, pc_drains_skipped 1, cupti_errors 2, pc_sampling_watchdog_trips 1",
        "samples     gpu_kernel:kiln_fma;gpu_instruction:+0x10 FFMA R4, R4, R5, R6;gpu_stall:math_pipe_throttle",
    ] {
        assert!(stdout.contains(expected), "no {expected:?} in\n{context}");
    }

    let summary: Value = serde_json::from_slice(&std::fs::read(&summary_path).unwrap()).unwrap();
    assert_eq!(summary["decoded_ok"], false);
    assert_eq!(summary["timed_out"], false);
    assert_eq!(summary["connections"].as_array().unwrap().len(), 2);

    let good = connection_of(&summary, 4242);
    assert_eq!(good["closed"], true);
    assert_eq!(good["error"], Value::Null);
    assert_eq!(good["sequence_ok"], true);
    assert_eq!(good["sequences"], serde_json::json!([0, 1, 2]));
    let fma = &good["kernels"]["kiln_fma"];
    assert_eq!(fma["launches"], 8);
    assert_eq!(fma["total_ns"], 8000);
    assert_eq!(fma["tids"], serde_json::json!([11, 13]));
    assert_eq!(good["kernels"]["kiln_triad"]["launches"], 2);
    let pc = &good["pc"];
    assert_eq!(pc["total_samples"], 52);
    assert_eq!(pc["distinct_pcs"], 2);
    assert_eq!(pc["known_cubin_pcs"], 2);
    assert_eq!(pc["named_pcs"], 1);
    assert_eq!(pc["misaligned_offsets"], 0);
    assert_eq!(pc["by_function"]["kiln_fma"], 52);
    assert_eq!(pc["by_stall"]["math_pipe_throttle"], 50);
    assert_eq!(pc["by_stall"]["long_scoreboard"], 2);
    assert_eq!(pc["top"][0]["instruction"], "FFMA R4, R4, R5, R6");
    assert_eq!(pc["top"][0]["samples"], 50);
    assert_eq!(good["stall_reasons"].as_object().unwrap().len(), 3);
    assert_eq!(
        (good["cubins"].clone(), good["cubin_bytes"].clone()),
        (1.into(), 14.into())
    );
    // The highest interval peak, and the last snapshot's live bytes.
    assert_eq!(good["memory"]["peak_live_bytes"], 3 << 19);
    assert_eq!(good["folded"]["allocated_bytes"]["weight"], 1 << 20);
    let counters = &good["counters"];
    assert_eq!(counters["launches"], 10);
    assert_eq!(counters["kernels"], 10);
    assert_eq!(counters["pc_drains"], 3);
    assert_eq!(counters["pc_drains_skipped"], 1);
    assert_eq!(counters["cupti_errors"], 2);
    assert_eq!(counters["pc_sampling_watchdog_trips"], 1);
    assert_eq!(counters["snapshots_dropped"], 0);
    assert_eq!(good["folded"]["nanoseconds"]["weight"], 16_000);
    assert_eq!(good["folded"]["samples"]["weight"], 52);

    let bad = connection_of(&summary, 777);
    assert_eq!(bad["closed"], false);
    assert_eq!(bad["snapshots"], 1);
    assert_eq!(bad["sequence_ok"], false);
    assert_eq!(bad["sequence_gaps"], serde_json::json!([[0, 4]]));
    assert_eq!(bad["kernels"]["kiln_smem"]["launches"], 1);
    let error = bad["error"].as_str().unwrap();
    assert!(
        error.contains("not a kiln gpu snapshot frame") && error.contains("4e, 4f, 54, 20"),
        "{error}"
    );
    assert!(!socket.exists(), "the socket file is removed at the end");
}

/// Nobody connects: the dump replaces a stale socket file, stops at the
/// timeout, says why it failed, and still writes its summary.
#[test]
fn no_connection_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("gpu.sock");
    drop(UnixListener::bind(&socket).unwrap());
    assert!(socket.exists(), "a stale socket file to replace");
    let summary_path = dir.path().join("summary.json");
    let out = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["gpu", "dump", "--timeout", "300ms", "--socket"])
        .arg(&socket)
        .arg("--json")
        .arg(&summary_path)
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(stdout.contains("timed out after 300ms"), "{stdout}");
    assert!(stderr.contains("no CUDA process connected to"), "{stderr}");
    let summary: Value = serde_json::from_slice(&std::fs::read(&summary_path).unwrap()).unwrap();
    assert_eq!(summary["timed_out"], true);
    assert_eq!(summary["decoded_ok"], false);
}

#[test]
fn help_explains_itself() {
    let out = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["gpu", "dump", "--help"])
        .output()
        .unwrap();
    let (stdout, _) = text(&out);
    assert!(out.status.success());
    for expected in [
        "KILN_GPU_SOCKET",
        "--connections",
        "--timeout",
        "nvdisasm",
        "Exit status",
    ] {
        assert!(stdout.contains(expected), "no {expected:?} in\n{stdout}");
    }
}

/// The GPU check kit's scripts call `snapdump SOCKET [SUMMARY] [N] [S]`
/// and `snapdump --perfetto IN OUT`, and check that it exits 2 with no
/// arguments: the shim maps all three onto this `kiln`, found next to it.
#[test]
fn snapdump_shim_keeps_the_kits_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let kit = dir.path().join("gpucheck");
    std::fs::create_dir(&kit).unwrap();
    let shim = kit.join("snapdump");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/gpucheck/snapdump"),
        &shim,
    )
    .unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_kiln"), kit.join("kiln")).unwrap();

    let out = Command::new(&shim).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("usage: snapdump SOCKET"));

    let socket = dir.path().join("s.sock");
    let summary_path = dir.path().join("snap.json");
    let child = Command::new(&shim)
        .arg(&socket)
        .arg(&summary_path)
        .args(["1", "20"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let child = wait_for_socket(child, &socket);
    let mut sender = SnapshotSender::new(&socket);
    for snapshot in process_snapshots() {
        sender.send(&snapshot).unwrap();
    }
    drop(sender);
    let out = child.wait_with_output().unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    let summary: Value = serde_json::from_slice(&std::fs::read(&summary_path).unwrap()).unwrap();
    assert_eq!(summary["decoded_ok"], true);
    assert_eq!(
        summary["connections"][0]["kernels"]["kiln_fma"]["launches"],
        8
    );

    let timeline = dir.path().join("gpu.jsonl");
    let mut writer = kiln_cuda::timeline::TimelineWriter::new(&timeline, 1 << 20).unwrap();
    writer
        .write(&kiln_cuda::timeline::TimelineKernel {
            pid: 1,
            tid: 2,
            device: 0,
            stream: 7,
            name: "kiln_fma".into(),
            launch_ns: 1000,
            start_ns: 2000,
            end_ns: 4000,
            correlation_id: 1,
            grid: [1, 1, 1],
            block: [32, 1, 1],
            graph_id: 0,
        })
        .unwrap();
    writer.flush().unwrap();
    let trace = dir.path().join("trace.json");
    let out = Command::new(&shim)
        .arg("--perfetto")
        .arg(&timeline)
        .arg(&trace)
        .output()
        .unwrap();
    assert!(out.status.success(), "{:?}", text(&out));
    let trace: Value = serde_json::from_slice(&std::fs::read(&trace).unwrap()).unwrap();
    assert!(
        trace["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["cat"] == "kernel" && e["name"] == "kiln_fma")
    );

    let out = Command::new(&shim).arg("--perfetto").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}
