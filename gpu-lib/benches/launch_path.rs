//! The library's CPU cost per kernel launch on the program's own threads,
//! without a GPU: CUPTI is the tests' fake (`tests/support`), which calls
//! the library's real callbacks at the enter and exit of each launch as
//! CUPTI does. Each configuration runs in a child process of its own (the
//! runtime is process-wide):
//!
//! - `bare`: the fake calling a callback that does nothing (the floor: what
//!   the fake itself costs);
//! - `kiln`: the library's callbacks (timestamp, launch marker, a
//!   `try_send` to the aggregator, which folds the launches);
//! - `kiln+pcs`: the same with PC sampling on (the launch exit's drain
//!   check; the fake's `GetData` is cheap, so this is Kiln's share).
//!
//! From 1 and 8 threads, `LAUNCHES` launches in all. Prints ns per launch
//! per thread, its ratio to `bare` in the same run, launches per second,
//! and the child's peak RSS (the library's memory bound: the event queue
//! and the activity buffer pool, see `injection::Config`).
//!
//! `cargo bench -p kiln-gpu --bench launch_path`

#[path = "../tests/support/mod.rs"]
mod support;

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kiln_cuda::Cupti;
use kiln_cuda::cupti_abi as abi;
use kiln_cuda::injection::{self, Config};
use kiln_cuda::pc_sampler::PcSamplingSettings;
use support::{FakeCupti, GetDataFaults};

const LAUNCHES: u32 = 2_000_000;
const CTX: usize = 0x1000;

unsafe extern "C" fn no_op(_: *mut std::ffi::c_void, _: u32, _: u32, _: *const std::ffi::c_void) {}

fn child(mode: &str, threads: u32) {
    let cupti = Arc::new(FakeCupti::new(GetDataFaults::default()));
    let dir = std::env::temp_dir().join(format!("kiln-launch-bench-{}", std::process::id()));
    match mode {
        "bare" => cupti.subscribe(no_op).unwrap(),
        _ => {
            let config = Config {
                // No agent listens: snapshots are dropped, as on a host
                // without one; the aggregator still does all its work.
                socket_path: dir.join("none.sock"),
                snapshot_interval: Duration::from_millis(500),
                pc_sampling: (mode == "kiln+pcs").then(PcSamplingSettings::default),
                flush_at_exit: false,
                ..Config::default()
            };
            injection::start(cupti.clone(), config).unwrap();
            cupti.resource(
                abi::resource_cbid::CONTEXT_CREATED,
                CTX,
                std::ptr::null_mut(),
            );
        }
    }
    let per_thread = LAUNCHES / threads;
    let started = Instant::now();
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let cupti = cupti.clone();
            std::thread::spawn(move || {
                let first = t * per_thread;
                let t0 = Instant::now();
                for id in first..first + per_thread {
                    cupti.launch(CTX, id, abi::driver_cbid::LAUNCH_KERNEL);
                }
                t0.elapsed()
            })
        })
        .collect();
    let per_thread_ns: Vec<f64> = workers
        .into_iter()
        .map(|w| w.join().unwrap().as_nanos() as f64 / f64::from(per_thread))
        .collect();
    let wall = started.elapsed();
    if mode != "bare" {
        injection::shutdown();
    }
    let mean = per_thread_ns.iter().sum::<f64>() / per_thread_ns.len() as f64;
    let rss_kib = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .unwrap_or(0);
    println!(
        "RESULT {mode} {threads} {mean:.1} {:.0} {rss_kib}",
        f64::from(LAUNCHES) / wall.as_secs_f64()
    );
    let _ = std::fs::remove_dir_all(dir);
}

fn run(mode: &str, threads: u32) -> (f64, f64, u64) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--child", mode, &threads.to_string()])
        .output()
        .expect("running the bench's child");
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with("RESULT "))
        .unwrap_or_else(|| {
            panic!(
                "{mode}/{threads}: no result; stderr: {}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    let f: Vec<&str> = line.split_whitespace().collect();
    (
        f[3].parse().unwrap(),
        f[4].parse().unwrap(),
        f[5].parse().unwrap(),
    )
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|a| a == "--child") {
        child(&args[at + 1], args[at + 2].parse().unwrap());
        return;
    }
    println!(
        "launch path: {LAUNCHES} launches through the fake CUPTI, each configuration in its own process"
    );
    println!(
        "{:<10} {:>7} {:>12} {:>9} {:>14} {:>12}",
        "mode", "threads", "ns/launch", "vs bare", "launches/s", "peak RSS"
    );
    for threads in [1, 8] {
        // Twice, alternating, so a noisy neighbour shows as disagreement.
        for round in 0..2 {
            let (bare, _, _) = run("bare", threads);
            for mode in ["bare", "kiln", "kiln+pcs"] {
                let (ns, rate, rss) = if mode == "bare" {
                    (bare, 0.0, 0)
                } else {
                    run(mode, threads)
                };
                if mode == "bare" && round == 1 {
                    continue;
                }
                println!(
                    "{mode:<10} {threads:>7} {ns:>12.1} {:>8.2}x {:>14} {:>9} KiB",
                    ns / bare,
                    if rate > 0.0 {
                        format!("{rate:.0}")
                    } else {
                        "-".into()
                    },
                    rss
                );
            }
        }
    }
}
