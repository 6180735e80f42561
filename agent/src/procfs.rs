//! What the agent knows about processes, read from `/proc`: executable
//! mappings, names, container ids. Entries are dropped once a process has
//! not been sampled for a while, and re-read when a pid is reused.

use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::PathBuf;

/// Why a process could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ProcError {
    /// A `/proc` file could not be read (usually: the process exited).
    #[error("reading {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// A `/proc` file did not have the expected format.
    #[error("{path}: unexpected format: {line:?}")]
    Format {
        /// The file.
        path: PathBuf,
        /// The line that did not parse.
        line: String,
    },
}

/// One executable mapping of `/proc/<pid>/maps`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// Offset in the file of `start`.
    pub offset: u64,
    /// Device (`major:minor` packed as `major << 32 | minor`) and inode
    /// of the file: with the inode, what identifies it across processes.
    pub dev: u64,
    /// Inode, 0 for anonymous mappings.
    pub inode: u64,
    /// The path, or a pseudo-name (`[vdso]`), or empty when anonymous.
    pub path: String,
}

impl Mapping {
    /// Whether this maps a file (as opposed to `[vdso]` or JIT memory).
    pub fn is_file(&self) -> bool {
        self.inode != 0 && self.path.starts_with('/')
    }

    /// Whether this is memory a JIT compiler writes code into: anonymous
    /// (unnamed, or named by `prctl(PR_SET_VMA_ANON_NAME)`), or a memfd
    /// (.NET maps its code twice through one, writable and executable).
    /// Such code has no file, symbols or unwind table; perf maps name it.
    pub fn is_jit(&self) -> bool {
        self.path.is_empty() || self.path.starts_with("[anon:") || self.path.starts_with("/memfd:")
    }

    /// The file name without directories (`libc.so.6`), or the
    /// pseudo-name, or `[anon]`.
    pub fn name(&self) -> &str {
        if self.path.is_empty() {
            return "[anon]";
        }
        let path = self.path.strip_suffix(" (deleted)").unwrap_or(&self.path);
        path.rsplit('/').next().unwrap_or(path)
    }
}

/// Reads the executable mappings of `pid`, sorted by address.
pub fn read_maps(pid: u32) -> Result<Vec<Mapping>, ProcError> {
    let path = PathBuf::from(format!("/proc/{pid}/maps"));
    let text = fs::read_to_string(&path).map_err(|source| ProcError::Read {
        path: path.clone(),
        source,
    })?;
    parse_maps(&text).map_err(|line| ProcError::Format { path, line })
}

/// Parses the text of a maps file, keeping executable mappings; on error
/// returns the offending line.
pub fn parse_maps(text: &str) -> Result<Vec<Mapping>, String> {
    let mut out = Vec::new();
    for line in text.lines() {
        let bad = || line.to_string();
        // start-end perms offset dev inode [path]; the path may hold spaces.
        let mut fields = line.splitn(6, ' ');
        let range = fields.next().ok_or_else(bad)?;
        let perms = fields.next().ok_or_else(bad)?;
        let offset = fields.next().ok_or_else(bad)?;
        let dev = fields.next().ok_or_else(bad)?;
        let inode = fields.next().ok_or_else(bad)?;
        let path = fields.next().unwrap_or("").trim_start();
        if perms.as_bytes().get(2) != Some(&b'x') {
            continue;
        }
        let (start, end) = range.split_once('-').ok_or_else(bad)?;
        let (major, minor) = dev.split_once(':').ok_or_else(bad)?;
        let hex = |s: &str| u64::from_str_radix(s, 16).map_err(|_| bad());
        out.push(Mapping {
            start: hex(start)?,
            end: hex(end)?,
            offset: hex(offset)?,
            dev: (hex(major)? << 32) | hex(minor)?,
            inode: inode.parse().map_err(|_| bad())?,
            path: path.to_string(),
        });
    }
    out.sort_by_key(|m| m.start);
    Ok(out)
}

/// The container id in the text of a `/proc/<pid>/cgroup` file: the last
/// 64-hex-digit name in the cgroup path, which is how Docker, containerd,
/// CRI-O and Podman name their cgroups (`docker-<id>.scope`,
/// `cri-containerd-<id>.scope`, `/docker/<id>`, `libpod-<id>.scope`). The
/// last, because the innermost cgroup is the container's: Podman's
/// cgroupfs driver puts a pod's containers in
/// `/libpod_parent/<pod id>/libpod-<id>`, and nested Docker makes
/// `/docker/<outer>/docker/<inner>`.
pub fn container_id(cgroup: &str) -> Option<String> {
    for line in cgroup.lines() {
        // hierarchy-id:controllers:path
        let Some(path) = line.splitn(3, ':').nth(2) else {
            continue;
        };
        let last = path
            .split(['/', '-', '.', ':'])
            .rfind(|part| part.len() == 64 && part.bytes().all(|b| b.is_ascii_hexdigit()));
        if let Some(id) = last {
            return Some(id.to_ascii_lowercase());
        }
    }
    None
}

/// A process as far as the agent needs to know it.
#[derive(Debug, Clone)]
pub(crate) struct Process {
    /// Executable mappings, sorted by start.
    pub mappings: Vec<Mapping>,
    /// The executable's file name, else the process's name.
    pub name: String,
    /// Container id, when the process runs in one.
    pub container: Option<String>,
    /// The Kubernetes pod uid its cgroup path names, if any: names the pod
    /// when no runtime's files name the container.
    pub pod_uid: Option<String>,
    /// Start time in clock ticks since boot: with the pid, what tells a
    /// reused pid from the process the agent knew.
    start_time: u64,
    /// Drain in which the process was last sampled.
    last_seen: u64,
    /// Drain in which the maps were last read.
    maps_read: u64,
}

impl Process {
    /// The mapping that holds `addr`.
    pub(crate) fn mapping(&self, addr: u64) -> Option<&Mapping> {
        let i = self.mappings.partition_point(|m| m.start <= addr);
        let m = self.mappings.get(i.checked_sub(1)?)?;
        (addr < m.end).then_some(m)
    }
}

/// Processes sampled recently.
#[derive(Debug, Default)]
pub(crate) struct ProcessTable {
    processes: HashMap<u32, Process>,
    drain: u64,
}

/// Processes not sampled for this many drains are forgotten.
const FORGET_AFTER_DRAINS: u64 = 12;

impl ProcessTable {
    /// Starts a new drain: forgets processes not sampled for a while (they
    /// exited, or sleep; a sleeper is re-read when it is sampled again).
    pub(crate) fn next_drain(&mut self) {
        self.drain += 1;
        let drain = self.drain;
        self.processes
            .retain(|_, p| drain - p.last_seen < FORGET_AFTER_DRAINS);
    }

    /// Puts a process read with [`read_process_now`] in the table,
    /// replacing what was known of its pid.
    pub(crate) fn insert(&mut self, pid: u32, mut process: Process) -> &Process {
        process.last_seen = self.drain;
        process.maps_read = self.drain;
        self.processes.insert(pid, process);
        &self.processes[&pid]
    }

    /// Number of processes known.
    pub(crate) fn count(&self) -> usize {
        self.processes.len()
    }

    /// The process `pid`, read from `/proc` on first use in a drain when
    /// it is new or its pid was reused. `None` when it has exited and was
    /// not known.
    pub(crate) fn get(&mut self, pid: u32) -> Option<&Process> {
        let drain = self.drain;
        let fresh = match self.processes.get_mut(&pid) {
            Some(p) if p.last_seen == drain => return self.processes.get(&pid),
            Some(p) => {
                // First use in this drain: check the pid was not reused.
                match start_time(pid) {
                    Ok(t) if t == p.start_time => {
                        p.last_seen = drain;
                        return self.processes.get(&pid);
                    }
                    // Exited: keep what we knew, its samples are older
                    // than its exit.
                    Err(_) => {
                        p.last_seen = drain;
                        return self.processes.get(&pid);
                    }
                    Ok(_) => read_process(pid, drain)?,
                }
            }
            None => read_process(pid, drain)?,
        };
        self.processes.insert(pid, fresh);
        self.processes.get(&pid)
    }

    /// The mapping of `addr` in `pid`; re-reads the maps (once per drain)
    /// when no known mapping holds it, since the process may have mapped
    /// a library since.
    pub(crate) fn mapping(&mut self, pid: u32, addr: u64) -> Option<&Mapping> {
        let drain = self.drain;
        let process = self.processes.get_mut(&pid)?;
        if process.mapping(addr).is_none() && process.maps_read != drain {
            process.maps_read = drain;
            if let Ok(maps) = read_maps(pid) {
                process.mappings = maps;
            }
        }
        self.processes.get(&pid)?.mapping(addr)
    }
}

/// Reads what the agent needs of process `pid` from `/proc`; `None` when
/// it has exited.
pub(crate) fn read_process_now(pid: u32) -> Option<Process> {
    read_process(pid, 0)
}

fn read_process(pid: u32, drain: u64) -> Option<Process> {
    let start_time = start_time(pid).ok()?;
    let mappings = read_maps(pid).ok()?;
    let name = fs::read_link(format!("/proc/{pid}/exe"))
        .ok()
        .and_then(|p| {
            let s = p.to_string_lossy();
            let s = s.strip_suffix(" (deleted)").unwrap_or(&s);
            s.rsplit('/').next().map(str::to_string)
        })
        .filter(|s| !s.is_empty())
        .or_else(|| {
            fs::read_to_string(format!("/proc/{pid}/comm"))
                .ok()
                .map(|s| s.trim_end().to_string())
        })
        .unwrap_or_default();
    let cgroup = fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
    let container = container_id(&cgroup);
    let pod_uid = container
        .as_ref()
        .and_then(|_| crate::containers::pod_uid(&cgroup));
    Some(Process {
        mappings,
        name,
        container,
        pod_uid,
        start_time,
        last_seen: drain,
        maps_read: drain,
    })
}

/// Field 22 of `/proc/<pid>/stat`: the process's start time in clock
/// ticks since boot.
pub(crate) fn start_time(pid: u32) -> Result<u64, ProcError> {
    let path = PathBuf::from(format!("/proc/{pid}/stat"));
    let text = fs::read_to_string(&path).map_err(|source| ProcError::Read {
        path: path.clone(),
        source,
    })?;
    // The name (field 2) is in parentheses and may hold spaces and ')'.
    let after = text.rsplit_once(')').map(|(_, rest)| rest);
    after
        .and_then(|rest| rest.split_whitespace().nth(19))
        .and_then(|s| s.parse().ok())
        .ok_or(ProcError::Format {
            path,
            line: text.lines().next().unwrap_or("").to_string(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    // Guards the parser against paths with spaces, non-executable
    // mappings and pseudo-files.
    #[test]
    fn maps_keep_executable_mappings_with_their_paths() {
        let text = "\
55d0c0a00000-55d0c0a02000 r--p 00000000 fd:01 1234 /usr/bin/my prog
55d0c0a02000-55d0c0a08000 r-xp 00002000 fd:01 1234 /usr/bin/my prog
7f0000000000-7f0000001000 r-xp 00000000 00:00 0
7ffd1c9f0000-7ffd1c9f2000 r-xp 00000000 00:00 0                          [vdso]
7f0000010000-7f0000020000 r-xs 00000000 00:01 4242                       /memfd:doublemapper (deleted)
7f0000030000-7f0000040000 rwxp 00000000 00:00 0                          [anon:v8 code]
";
        let maps = parse_maps(text).unwrap();
        assert_eq!(maps.len(), 5);
        assert_eq!(maps[0].path, "/usr/bin/my prog");
        assert_eq!(maps[0].offset, 0x2000);
        assert_eq!(maps[0].dev, (0xfd << 32) | 1);
        assert!(maps[0].is_file());
        assert_eq!(maps[0].name(), "my prog");
        assert_eq!(maps[1].name(), "[anon]");
        assert!(!maps[4].is_file());
        assert_eq!(maps[4].name(), "[vdso]");
        // JIT memory: anonymous, named anonymous, and .NET's memfd.
        let jit: Vec<bool> = maps.iter().map(Mapping::is_jit).collect();
        assert_eq!(jit, [false, true, true, true, false]);
        assert!(parse_maps("zz-yy r-xp 0 0:0 0\n").is_err());
    }

    #[test]
    fn container_ids_of_common_runtimes() {
        let id = "a".repeat(64);
        for cgroup in [
            format!("0::/system.slice/docker-{id}.scope\n"),
            format!("12:cpu:/docker/{id}\n"),
            format!("0::/kubepods.slice/kubepods-pod1.slice/cri-containerd-{id}.scope\n"),
            format!("0::/machine.slice/libpod-{id}.scope/container\n"),
            // Podman's cgroupfs driver: a pod's cgroup, then the container's.
            format!("0::/libpod_parent/{}/libpod-{id}\n", "b".repeat(64)),
            format!("12:cpu:/docker/{}/docker/{id}\n", "c".repeat(64)),
            format!("1:name=systemd:/user.slice\n0::/docker/{id}\n"),
        ] {
            assert_eq!(
                container_id(&cgroup).as_deref(),
                Some(id.as_str()),
                "{cgroup}"
            );
        }
        assert_eq!(container_id("0::/user.slice/session-2.scope\n"), None);
    }

    #[test]
    fn own_process_is_readable() {
        let pid = std::process::id();
        let mut table = ProcessTable::default();
        table.next_drain();
        let me = table.get(pid).expect("own process");
        assert!(!me.mappings.is_empty());
        let addr = own_process_is_readable as *const () as usize as u64;
        let m = table.mapping(pid, addr).expect("a mapping holds our code");
        assert!(m.is_file());
    }
}
