//! A CPU quota for benchmarked processes: a cgroup of its own with a limit
//! of cores, and the CPU time its processes used. cgroup v2 (`cpu.max`,
//! `cpu.stat`) where the cpu controller is on the unified hierarchy, else
//! v1 (`cpu.cfs_quota_us` in the `cpu` hierarchy, `cpuacct.usage` in
//! `cpuacct`). Needs root.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;

/// The period quotas are given over, in microseconds (the kernel's
/// default).
const PERIOD_US: u64 = 100_000;

/// A cgroup limited to some cores; removed when dropped (its processes
/// must have exited).
#[derive(Debug)]
pub struct CpuQuota {
    /// The group's directories: one on v2; `cpu` and `cpuacct` on v1.
    dirs: Vec<PathBuf>,
    v2: bool,
}

impl CpuQuota {
    /// A new group `name` whose processes may use `cores` cores (0.25: a
    /// quarter of one) between them.
    pub fn new(name: &str, cores: f64) -> anyhow::Result<CpuQuota> {
        let quota_us = ((cores * PERIOD_US as f64) as u64).max(1_000);
        let unified = Path::new("/sys/fs/cgroup");
        let v2 = std::fs::read_to_string(unified.join("cgroup.controllers"))
            .is_ok_and(|c| c.split_whitespace().any(|c| c == "cpu"));
        let group = if v2 {
            let dir = unified.join(name);
            std::fs::create_dir_all(&dir).with_context(|| format!("mkdir {}", dir.display()))?;
            write(&dir.join("cpu.max"), &format!("{quota_us} {PERIOD_US}"))?;
            CpuQuota {
                dirs: vec![dir],
                v2,
            }
        } else {
            let cpu = unified.join("cpu").join(name);
            let acct = unified.join("cpuacct").join(name);
            for dir in [&cpu, &acct] {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("mkdir {} (cgroup v1)", dir.display()))?;
            }
            write(&cpu.join("cpu.cfs_period_us"), &PERIOD_US.to_string())?;
            write(&cpu.join("cpu.cfs_quota_us"), &quota_us.to_string())?;
            CpuQuota {
                dirs: vec![cpu, acct],
                v2,
            }
        };
        Ok(group)
    }

    /// Moves process `pid` (all its threads) into the group.
    pub fn add(&self, pid: u32) -> anyhow::Result<()> {
        for dir in &self.dirs {
            write(&dir.join("cgroup.procs"), &pid.to_string())?;
        }
        Ok(())
    }

    /// CPU time the group's processes have used, exited ones included.
    pub fn used(&self) -> anyhow::Result<Duration> {
        if self.v2 {
            let stat = std::fs::read_to_string(self.dirs[0].join("cpu.stat"))?;
            let usec = stat
                .lines()
                .find_map(|l| l.strip_prefix("usage_usec "))
                .context("cpu.stat has no usage_usec")?
                .trim()
                .parse()?;
            Ok(Duration::from_micros(usec))
        } else {
            let ns = std::fs::read_to_string(self.dirs[1].join("cpuacct.usage"))?
                .trim()
                .parse()?;
            Ok(Duration::from_nanos(ns))
        }
    }
}

impl Drop for CpuQuota {
    fn drop(&mut self) {
        for dir in &self.dirs {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

fn write(path: &Path, value: &str) -> anyhow::Result<()> {
    std::fs::write(path, value).with_context(|| format!("write {value:?} to {}", path.display()))
}
