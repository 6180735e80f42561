//! Container and Kubernetes names for the container ids the agent finds in
//! processes' cgroups: the `container_name`, `pod` and `namespace` labels,
//! and with `--pod-labels` some of the pod's own labels.
//!
//! Names come from the state container runtimes keep on the host, read
//! under the host root (`--host-root`), first hit wins:
//!
//! 1. containerd (Kubernetes' CRI, nerdctl): the task bundle's OCI
//!    `config.json` annotations;
//! 2. CRI-O: its `config.json` in containers/storage, whose
//!    `io.kubernetes.cri-o.Labels` annotation holds the pod's names (and
//!    the sandbox's, the pod's labels);
//! 3. kubelet, whatever the runtime: the `/var/log/containers` symlink
//!    named `<pod>_<namespace>_<container>-<id>.log`;
//! 4. Docker: `config.v2.json` (with cri-dockerd, its Kubernetes labels);
//! 5. Podman (root): containers/storage's `containers.json`;
//! 6. kubelet again, for the pod alone: `/var/log/pods/<ns>_<pod>_<uid>`
//!    matched by the pod uid in the process's cgroup path.
//!
//! (The design put 6 with 3; it comes last here so that Docker's and
//! Podman's container names are found first where they exist.)
//!
//! No runtime's API or socket is asked: files only, each read bounded
//! (see [`root`]). A lookup happens once per container id, when a process
//! of it is first read, and is cached: 10 minutes when it found names, 30
//! seconds when it did not (a container's files may appear after its
//! first sample, kubelet's log symlink notably), at most 4096 ids. The
//! eBPF sampling never waits on any of it; the drain that builds a batch
//! at worst reads a few small files for a container it has not seen
//! before (the new-process thread usually has, and warmed the cache).

mod root;
mod runtimes;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use kiln_model::{MAX_LABEL_NAME_LEN, MAX_LABEL_VALUE_LEN};

use root::HostRoot;

/// How long names found for a container are kept before being read again.
pub const HIT_TTL: Duration = Duration::from_secs(600);
/// How long a container whose names were not found waits before the next
/// look: its runtime may write them after the container's first sample.
pub const MISS_TTL: Duration = Duration::from_secs(30);
/// Most container ids remembered; past it, the soonest to expire go.
pub const MAX_CACHED: usize = 4096;
/// Most pod labels one container's samples carry (`--pod-labels`), the
/// first by key: with the agent's own labels (about ten), well inside the
/// model's 64 labels a set.
pub const MAX_POD_LABELS: usize = 16;
/// Most `--pod-labels` prefixes accepted.
pub const MAX_POD_LABEL_PREFIXES: usize = 32;
/// What the name of a pod label's label starts with: the pod label
/// `app.kubernetes.io/name` becomes `pod_label_app_kubernetes_io_name`.
pub const POD_LABEL_PREFIX: &str = "pod_label_";

/// What the agent knows of a container beyond its id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ContainerInfo {
    /// The container's name: the pod spec's container name under
    /// Kubernetes, else the runtime's (`docker run --name`).
    pub name: Option<String>,
    /// The Kubernetes pod.
    pub pod: Option<String>,
    /// The Kubernetes namespace.
    pub namespace: Option<String>,
    /// The pod's labels chosen by `--pod-labels`, as (label name, value):
    /// names already [`pod_label_name`]d, at most [`MAX_POD_LABELS`].
    pub pod_labels: Vec<(String, String)>,
}

impl ContainerInfo {
    /// Names as a runtime's files give them: blank ones are none, long
    /// ones cut to the model's limit.
    fn new(name: Option<&str>, pod: Option<&str>, namespace: Option<&str>) -> ContainerInfo {
        ContainerInfo {
            name: name.and_then(clean_value),
            pod: pod.and_then(clean_value),
            namespace: namespace.and_then(clean_value),
            pod_labels: Vec::new(),
        }
    }

    /// Sets the pod labels from `pairs` (a pod's labels, or annotations)
    /// whose keys start with one of `prefixes`.
    fn with_pod_labels<'a>(
        mut self,
        prefixes: &[String],
        pairs: impl IntoIterator<Item = (&'a String, &'a String)>,
    ) -> ContainerInfo {
        self.pod_labels = select_pod_labels(prefixes, pairs);
        self
    }

    /// Whether nothing was found.
    fn is_empty(&self) -> bool {
        self.name.is_none() && self.pod.is_none() && self.namespace.is_none()
    }

    /// `Some(self)` when something was found.
    fn found(self) -> Option<ContainerInfo> {
        (!self.is_empty()).then_some(self)
    }
}

/// A label value from a runtime's file: trimmed, `None` when blank, cut
/// to [`MAX_LABEL_VALUE_LEN`] bytes at a character boundary.
fn clean_value(s: &str) -> Option<String> {
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    let mut end = s.len().min(MAX_LABEL_VALUE_LEN);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    Some(s[..end].to_string())
}

/// The label name a pod label's key becomes: [`POD_LABEL_PREFIX`] and the
/// key with every byte but ASCII letters, digits and `_` made `_`, as
/// Prometheus names labels (`app.kubernetes.io/name` →
/// `pod_label_app_kubernetes_io_name`). `None` when that would be longer
/// than the model's limit (cutting it could make two keys one name).
pub fn pod_label_name(key: &str) -> Option<String> {
    if key.is_empty() || POD_LABEL_PREFIX.len() + key.len() > MAX_LABEL_NAME_LEN {
        return None;
    }
    let mut name = String::with_capacity(POD_LABEL_PREFIX.len() + key.len());
    name.push_str(POD_LABEL_PREFIX);
    name.extend(key.chars().map(|c| {
        if c.is_ascii_alphanumeric() || c == '_' {
            c
        } else {
            '_'
        }
    }));
    // A multi-byte character became one `_`: the name is no longer than
    // the key's bytes allowed.
    Some(name)
}

/// The pairs whose keys start with one of `prefixes`, named for labels,
/// sorted by key, the first [`MAX_POD_LABELS`]; of two keys that name the
/// same label (`a.b`, `a_b`), the first.
fn select_pod_labels<'a>(
    prefixes: &[String],
    pairs: impl IntoIterator<Item = (&'a String, &'a String)>,
) -> Vec<(String, String)> {
    if prefixes.is_empty() {
        return Vec::new();
    }
    let chosen: BTreeMap<&str, &str> = pairs
        .into_iter()
        .filter(|(k, _)| prefixes.iter().any(|p| k.starts_with(p.as_str())))
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let mut out: Vec<(String, String)> = Vec::new();
    for (key, value) in chosen {
        if out.len() == MAX_POD_LABELS {
            tracing::debug!(key, "more pod labels match --pod-labels than are kept");
            break;
        }
        let (Some(name), Some(value)) = (pod_label_name(key), clean_value(value)) else {
            continue;
        };
        if out.iter().all(|(n, _)| *n != name) {
            out.push((name, value));
        }
    }
    out
}

/// The Kubernetes pod uid in a process's cgroup file, from the pod's
/// cgroup: `kubepods-burstable-pod<uid, _ for ->.slice` (systemd driver)
/// or `/kubepods/burstable/pod<uid>/` (cgroupfs driver). Static pods'
/// uids are 32 hex digits, others UUIDs.
pub fn pod_uid(cgroup: &str) -> Option<String> {
    for line in cgroup.lines() {
        let Some(path) = line.splitn(3, ':').nth(2) else {
            continue;
        };
        if !path.contains("kubepods") {
            continue;
        }
        for part in path.split('/') {
            let part = part.strip_suffix(".slice").unwrap_or(part);
            // `pod<uid>` (cgroupfs), or `…-pod<uid>` (systemd, whose uid
            // has `_` for `-`).
            let Some(uid) = part
                .strip_prefix("pod")
                .or_else(|| part.rsplit_once("-pod").map(|(_, uid)| uid))
            else {
                continue;
            };
            let uid = uid.replace('_', "-");
            if is_pod_uid(&uid) {
                return Some(uid.to_ascii_lowercase());
            }
        }
    }
    None
}

/// Whether `s` looks like a pod uid: 32 to 36 hex digits and dashes.
fn is_pod_uid(s: &str) -> bool {
    (32..=36).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
}

/// Whether `id` is a container id as [`crate::procfs::container_id`]
/// returns them, safe to put in a path.
fn is_container_id(id: &str) -> bool {
    id.len() == 64 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// How the agent names containers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerNames {
    /// Where the host's root is (`/`; in a DaemonSet, where the host's
    /// `/run`, `/var/log` and `/var/lib` are mounted).
    pub host_root: PathBuf,
    /// The pod labels to carry as `pod_label_<name>` labels: those whose
    /// keys start with one of these (`app.kubernetes.io/`); none when
    /// empty.
    pub pod_label_prefixes: Vec<String>,
}

impl Default for ContainerNames {
    fn default() -> Self {
        ContainerNames {
            host_root: PathBuf::from("/"),
            pod_label_prefixes: Vec::new(),
        }
    }
}

impl ContainerNames {
    /// Why this cannot be used, if it cannot.
    pub(crate) fn check(&self) -> Result<(), String> {
        if !self.host_root.is_absolute() {
            return Err(format!(
                "host root must be an absolute path, got {}",
                self.host_root.display()
            ));
        }
        if self.pod_label_prefixes.len() > MAX_POD_LABEL_PREFIXES {
            return Err(format!(
                "at most {MAX_POD_LABEL_PREFIXES} pod label prefixes, got {}",
                self.pod_label_prefixes.len()
            ));
        }
        for p in &self.pod_label_prefixes {
            if p.is_empty() || p.len() > MAX_LABEL_NAME_LEN {
                return Err(format!(
                    "a pod label prefix must be 1..={MAX_LABEL_NAME_LEN} bytes, got {p:?}"
                ));
            }
        }
        Ok(())
    }
}

/// The names of containers, looked up once per id and cached. Cheap to
/// clone (the clones share the cache); the default names none.
#[derive(Debug, Clone, Default)]
pub(crate) struct Containers {
    inner: Option<Arc<Inner>>,
}

#[derive(Debug)]
struct Inner {
    root: HostRoot,
    prefixes: Vec<String>,
    cache: Mutex<HashMap<String, Cached>>,
    /// Parsed `containers.json` files, re-read when they change.
    podman: Mutex<runtimes::PodmanIndexes>,
}

#[derive(Debug)]
struct Cached {
    info: Option<Arc<ContainerInfo>>,
    until: Instant,
}

impl Containers {
    /// Names containers as `config` says.
    pub(crate) fn new(config: &ContainerNames) -> Containers {
        Containers {
            inner: Some(Arc::new(Inner {
                root: HostRoot::new(&config.host_root),
                prefixes: config.pod_label_prefixes.clone(),
                cache: Mutex::default(),
                podman: Mutex::default(),
            })),
        }
    }

    /// What is known of container `id` (of a process whose cgroup named
    /// pod `pod_uid`, if any): from the cache, else read now. `None` when
    /// nothing was found, or names are off.
    pub(crate) fn info(&self, id: &str, pod_uid: Option<&str>) -> Option<Arc<ContainerInfo>> {
        let inner = self.inner.as_ref()?;
        let now = Instant::now();
        if let Some(c) = inner.cache().get(id)
            && c.until > now
        {
            return c.info.clone();
        }
        // Read without the cache's lock: another thread asking for
        // another container is not held up. Two threads may both read the
        // same new container; the second answer replaces the first.
        let info = inner.resolve(id, pod_uid).map(Arc::new);
        let ttl = if info.is_some() { HIT_TTL } else { MISS_TTL };
        let mut cache = inner.cache();
        if cache.len() >= MAX_CACHED && !cache.contains_key(id) {
            cache.retain(|_, c| c.until > now);
            if cache.len() >= MAX_CACHED
                && let Some(soonest) = cache
                    .iter()
                    .min_by_key(|(_, c)| c.until)
                    .map(|(k, _)| k.clone())
            {
                cache.remove(&soonest);
            }
        }
        cache.insert(
            id.to_string(),
            Cached {
                info: info.clone(),
                until: now + ttl,
            },
        );
        info
    }
}

impl Inner {
    fn cache(&self) -> std::sync::MutexGuard<'_, HashMap<String, Cached>> {
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn resolve(&self, id: &str, pod_uid: Option<&str>) -> Option<ContainerInfo> {
        if !is_container_id(id) {
            return None;
        }
        let pod_uid = pod_uid.filter(|u| is_pod_uid(u));
        let mut podman = self.podman.lock().unwrap_or_else(PoisonError::into_inner);
        let found = runtimes::resolve(&self.root, id, pod_uid, &self.prefixes, &mut podman);
        tracing::debug!(container = id, ?found, "container names");
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Guards the pod uid patterns of both kubelet cgroup drivers, and
    // that other cgroups give none.
    #[test]
    fn pod_uids_of_both_cgroup_drivers() {
        let uid = "2b3c4d5e-1111-2222-3333-444455556666";
        let systemd = "0::/kubepods.slice/kubepods-burstable.slice/\
             kubepods-burstable-pod2b3c4d5e_1111_2222_3333_444455556666.slice/\
             cri-containerd-aaaa.scope\n";
        assert_eq!(pod_uid(systemd).as_deref(), Some(uid));
        let besteffort = "0::/kubepods.slice/kubepods-besteffort.slice/\
             kubepods-besteffort-pod2b3c4d5e_1111_2222_3333_444455556666.slice/crio-aaaa.scope\n";
        assert_eq!(pod_uid(besteffort).as_deref(), Some(uid));
        let guaranteed =
            "0::/kubepods.slice/kubepods-pod2b3c4d5e_1111_2222_3333_444455556666.slice/x.scope\n";
        assert_eq!(pod_uid(guaranteed).as_deref(), Some(uid));
        let cgroupfs = format!("11:memory:/kubepods/burstable/pod{uid}/0123abcd\n");
        assert_eq!(pod_uid(&cgroupfs).as_deref(), Some(uid));
        // A static pod's uid is a hash of its manifest.
        let static_pod = "0::/kubepods/pod0123456789abcdef0123456789abcdef/aaaa\n";
        assert_eq!(
            pod_uid(static_pod).as_deref(),
            Some("0123456789abcdef0123456789abcdef")
        );
        for none in [
            "0::/system.slice/docker-aaaa.scope\n",
            "0::/kubepods.slice/kubepods-burstable.slice\n",
            "0::/kubepods/podnot-a-uid/x\n",
            "0::/user.slice/pod2b3c4d5e-1111-2222-3333-444455556666\n",
            "garbage",
            "",
        ] {
            assert_eq!(pod_uid(none), None, "{none}");
        }
    }

    // Guards the label name scheme: Prometheus-safe, bounded, and the
    // selection bounded and stable.
    #[test]
    fn pod_labels_are_named_selected_and_bounded() {
        assert_eq!(
            pod_label_name("app.kubernetes.io/name").as_deref(),
            Some("pod_label_app_kubernetes_io_name")
        );
        assert_eq!(pod_label_name("tier").as_deref(), Some("pod_label_tier"));
        assert_eq!(pod_label_name("é/x").as_deref(), Some("pod_label___x"));
        assert_eq!(pod_label_name(""), None);
        assert_eq!(pod_label_name(&"k".repeat(MAX_LABEL_NAME_LEN)), None);

        let prefixes = vec!["app.kubernetes.io/".to_string(), "team".to_string()];
        let mut pairs: Vec<(String, String)> = vec![
            ("app.kubernetes.io/name".into(), "shop".into()),
            ("app.kubernetes.io/version".into(), " 1.2 ".into()),
            ("app.kubernetes.io/empty".into(), "  ".into()),
            ("team".into(), "payments".into()),
            ("pod-template-hash".into(), "abc".into()),
            // Both name `pod_label_team_x`: the first by key is kept.
            ("team_x".into(), "b".into()),
            ("team.x".into(), "a".into()),
        ];
        let got = select_pod_labels(&prefixes, pairs.iter().map(|(k, v)| (k, v)));
        assert_eq!(
            got,
            [
                ("pod_label_app_kubernetes_io_name".into(), "shop".into()),
                ("pod_label_app_kubernetes_io_version".into(), "1.2".into()),
                ("pod_label_team".into(), "payments".into()),
                ("pod_label_team_x".into(), "a".into()),
            ]
        );
        assert!(select_pod_labels(&[], pairs.iter().map(|(k, v)| (k, v))).is_empty());
        pairs.extend((0..100).map(|i| (format!("team/{i:03}"), "x".repeat(5000))));
        let got = select_pod_labels(&prefixes, pairs.iter().map(|(k, v)| (k, v)));
        assert_eq!(got.len(), MAX_POD_LABELS);
        assert!(
            got.iter()
                .all(|(n, v)| n.len() <= MAX_LABEL_NAME_LEN && v.len() <= MAX_LABEL_VALUE_LEN)
        );
    }

    // Guards the limits on values: multi-byte text is cut at a character
    // boundary, blank is none.
    #[test]
    fn values_are_trimmed_and_cut() {
        assert_eq!(clean_value(" web "), Some("web".into()));
        assert_eq!(clean_value(" \t"), None);
        let long = "é".repeat(MAX_LABEL_VALUE_LEN);
        let cut = clean_value(&long).unwrap();
        assert!(cut.len() <= MAX_LABEL_VALUE_LEN && cut.len() >= MAX_LABEL_VALUE_LEN - 1);
    }

    // Guards the checks on the flags.
    #[test]
    fn bad_settings_are_named() {
        assert!(ContainerNames::default().check().is_ok());
        let e = ContainerNames {
            host_root: "host".into(),
            ..Default::default()
        }
        .check()
        .unwrap_err();
        assert!(e.contains("absolute"), "{e}");
        let e = ContainerNames {
            pod_label_prefixes: vec![String::new()],
            ..Default::default()
        }
        .check()
        .unwrap_err();
        assert!(e.contains("pod label prefix must be"), "{e}");
        let e = ContainerNames {
            pod_label_prefixes: vec!["a".into(); MAX_POD_LABEL_PREFIXES + 1],
            ..Default::default()
        }
        .check()
        .unwrap_err();
        assert!(e.contains("at most"), "{e}");
    }

    // Guards the cache: a miss is remembered (no second read within its
    // TTL), the number of ids is bounded, and a disabled resolver names
    // nothing.
    #[test]
    fn lookups_are_cached_and_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let containers = Containers::new(&ContainerNames {
            host_root: dir.path().to_owned(),
            ..Default::default()
        });
        let id = "a".repeat(64);
        assert_eq!(containers.info(&id, None), None);
        // Docker's file appears: the miss is still cached.
        let docker = dir.path().join(format!("var/lib/docker/containers/{id}"));
        std::fs::create_dir_all(&docker).unwrap();
        std::fs::write(docker.join("config.v2.json"), r#"{"Name":"/web"}"#).unwrap();
        assert_eq!(containers.info(&id, None), None);
        let other = "b".repeat(64);
        let docker = dir
            .path()
            .join(format!("var/lib/docker/containers/{other}"));
        std::fs::create_dir_all(&docker).unwrap();
        std::fs::write(docker.join("config.v2.json"), r#"{"Name":"/db"}"#).unwrap();
        assert_eq!(
            containers.info(&other, None).unwrap().name.as_deref(),
            Some("db")
        );
        for i in 0..MAX_CACHED + 10 {
            containers.info(&format!("{i:064x}"), None);
        }
        let inner = containers.inner.as_ref().unwrap();
        assert!(inner.cache().len() <= MAX_CACHED);
        assert_eq!(Containers::default().info(&other, None), None);
        // Not an id: nothing is read.
        assert_eq!(containers.info("../../etc", None), None);
    }
}
