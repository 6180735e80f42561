//! Where each container runtime keeps a container's names, and how they
//! are read: only the fields needed, parsed with `serde_json`, every file
//! bounded (see [`super::root`]). A file that is missing, too big, not
//! UTF-8 or not the JSON expected gives no names from its runtime, and
//! the next runtime is asked.

use std::collections::HashMap;

use serde::Deserialize;

use super::ContainerInfo;
use super::root::{FileStamp, HostRoot, MAX_DIR_ENTRIES};

/// Most bytes read of one state file: the OCI configs the runtimes write
/// are tens of KiB (mostly the seccomp profile).
pub(super) const MAX_STATE_FILE: usize = 1 << 20;
/// Most bytes read of Podman's `containers.json`, which lists every
/// container of the storage (a few hundred bytes each); it is parsed once
/// per change, not per lookup.
pub(super) const MAX_CONTAINERS_JSON: usize = 16 << 20;

/// containerd's task bundles, one directory per namespace (`k8s.io` for
/// Kubernetes, `moby` for Docker, `default` for nerdctl).
const CONTAINERD_TASKS: &str = "run/containerd/io.containerd.runtime.v2.task";
/// Most containerd namespaces looked in.
const MAX_CONTAINERD_NAMESPACES: usize = 64;
/// containers/storage's per-container directories: CRI-O's run root, then
/// its (and Podman's) graph root.
const STORAGE_CONTAINERS: [&str; 2] = [
    "run/containers/storage/overlay-containers",
    "var/lib/containers/storage/overlay-containers",
];
/// containers/storage's graph root, whose `<driver>-containers/` holds
/// `containers.json`.
const STORAGE_ROOT: &str = "var/lib/containers/storage";
/// The storage drivers whose `containers.json` Podman's lookup reads.
const STORAGE_DRIVERS: [&str; 4] = ["overlay", "vfs", "btrfs", "zfs"];
/// kubelet's symlinks to containers' logs.
const KUBELET_CONTAINER_LOGS: &str = "var/log/containers";
/// kubelet's per-pod log directories.
const KUBELET_POD_LOGS: &str = "var/log/pods";
/// Docker's per-container directories.
const DOCKER_CONTAINERS: &str = "var/lib/docker/containers";

/// containerd CRI's annotations (`pkg/cri/annotations`).
const CRI_CONTAINER_NAME: &str = "io.kubernetes.cri.container-name";
const CRI_SANDBOX_NAME: &str = "io.kubernetes.cri.sandbox-name";
const CRI_SANDBOX_NAMESPACE: &str = "io.kubernetes.cri.sandbox-namespace";
/// nerdctl's container name annotation.
const NERDCTL_NAME: &str = "nerdctl/name";
/// CRI-O's annotations: the CRI labels as a JSON object, the sandbox, the
/// container's kind.
const CRIO_LABELS: &str = "io.kubernetes.cri-o.Labels";
const CRIO_SANDBOX_ID: &str = "io.kubernetes.cri-o.SandboxID";
const CRIO_CONTAINER_TYPE: &str = "io.kubernetes.cri-o.ContainerType";
/// The labels kubelet puts on every container it makes (CRI-O's labels,
/// Docker's with cri-dockerd).
const K8S_CONTAINER_NAME: &str = "io.kubernetes.container.name";
const K8S_POD_NAME: &str = "io.kubernetes.pod.name";
const K8S_POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
/// cri-dockerd's: the pod's sandbox container, and the container's kind.
const DOCKER_SANDBOX_ID: &str = "io.kubernetes.sandbox.id";
const DOCKER_TYPE: &str = "io.kubernetes.docker.type";

/// The one part of an OCI runtime config read.
#[derive(Debug, Deserialize)]
struct OciConfig {
    #[serde(default)]
    annotations: HashMap<String, String>,
}

/// The part of Docker's `config.v2.json` read.
#[derive(Debug, Deserialize)]
struct DockerConfig {
    #[serde(rename = "Name", default)]
    name: Option<String>,
    #[serde(rename = "Config", default)]
    config: Option<DockerContainerConfig>,
}

#[derive(Debug, Deserialize)]
struct DockerContainerConfig {
    #[serde(rename = "Labels", default)]
    labels: Option<HashMap<String, String>>,
}

/// One container of containers/storage's `containers.json`.
#[derive(Debug, Deserialize)]
struct StorageContainer {
    id: String,
    #[serde(default)]
    names: Vec<String>,
}

/// Podman's `containers.json` of each storage driver, parsed, with the
/// stamp of the file it was parsed from.
#[derive(Debug, Default)]
pub(super) struct PodmanIndexes {
    by_driver: HashMap<&'static str, (FileStamp, HashMap<String, String>)>,
}

/// The names of container `id`, from the first runtime that has them.
pub(super) fn resolve(
    root: &HostRoot,
    id: &str,
    pod_uid: Option<&str>,
    prefixes: &[String],
    podman: &mut PodmanIndexes,
) -> Option<ContainerInfo> {
    containerd(root, id, prefixes)
        .or_else(|| crio(root, id, prefixes))
        .or_else(|| kubelet_container(root, id))
        .or_else(|| docker(root, id, prefixes))
        .or_else(|| podman_storage(root, id, podman))
        .or_else(|| kubelet_pod(root, pod_uid?))
}

/// Parses a state file's JSON; `None` (no names) when it does not parse,
/// which includes invalid UTF-8.
fn parse<T: for<'de> Deserialize<'de>>(bytes: &[u8]) -> Option<T> {
    serde_json::from_slice(bytes).ok()
}

fn read_oci(root: &HostRoot, path: &str) -> Option<OciConfig> {
    parse(&root.read(path, MAX_STATE_FILE)?)
}

/// containerd: the OCI config of the task bundle, in whichever namespace
/// holds it. Its CRI names the container and its pod in annotations;
/// nerdctl names the container. containerd keeps pod labels only in its
/// database, so `--pod-labels` picks among the annotations instead: the
/// pod annotations the runtime was told to pass on (`pod_annotations` in
/// its runtime's settings).
fn containerd(root: &HostRoot, id: &str, prefixes: &[String]) -> Option<ContainerInfo> {
    let namespaces = root.list(CONTAINERD_TASKS, MAX_CONTAINERD_NAMESPACES)?;
    for ns in namespaces {
        let Some(ns) = ns.to_str().filter(|n| is_path_component(n)) else {
            continue;
        };
        let Some(spec) = read_oci(root, &format!("{CONTAINERD_TASKS}/{ns}/{id}/config.json"))
        else {
            continue;
        };
        let a = &spec.annotations;
        let name = a.get(CRI_CONTAINER_NAME).or_else(|| a.get(NERDCTL_NAME));
        let info = ContainerInfo::new(
            name.map(String::as_str),
            a.get(CRI_SANDBOX_NAME).map(String::as_str),
            a.get(CRI_SANDBOX_NAMESPACE).map(String::as_str),
        );
        let passed_on = a
            .iter()
            .filter(|(k, _)| !k.starts_with("io.kubernetes.cri.") && !k.starts_with("nerdctl/"));
        // A container id lives in one namespace: found or not, done.
        return info.with_pod_labels(prefixes, passed_on).found();
    }
    None
}

/// CRI-O: its OCI config in containers/storage. The container's CRI
/// labels (a JSON object in an annotation) name it and its pod; the
/// sandbox's hold the pod's labels. Podman writes the same file without
/// that annotation, so a config without it is not CRI-O's.
fn crio(root: &HostRoot, id: &str, prefixes: &[String]) -> Option<ContainerInfo> {
    let (dir, spec) = STORAGE_CONTAINERS.iter().find_map(|dir| {
        Some((
            *dir,
            read_oci(root, &format!("{dir}/{id}/userdata/config.json"))?,
        ))
    })?;
    let a = &spec.annotations;
    let labels: HashMap<String, String> = parse(a.get(CRIO_LABELS)?.as_bytes())?;
    let get = |key: &str| labels.get(key).or_else(|| a.get(key)).map(String::as_str);
    let info = ContainerInfo::new(
        get(K8S_CONTAINER_NAME),
        get(K8S_POD_NAME),
        get(K8S_POD_NAMESPACE),
    );
    if prefixes.is_empty() {
        return info.found();
    }
    // The sandbox's labels are the pod's (with kubelet's own).
    if a.get(CRIO_CONTAINER_TYPE).map(String::as_str) == Some("sandbox") {
        return info.with_pod_labels(prefixes, &labels).found();
    }
    let sandbox_labels = a
        .get(CRIO_SANDBOX_ID)
        .filter(|s| super::is_container_id(s))
        .and_then(|s| read_oci(root, &format!("{dir}/{s}/userdata/config.json")))
        .and_then(|s| parse::<HashMap<String, String>>(s.annotations.get(CRIO_LABELS)?.as_bytes()))
        .unwrap_or_default();
    info.with_pod_labels(prefixes, &sandbox_labels).found()
}

/// kubelet, whatever the runtime: the symlink it makes to each
/// container's log, `<pod>_<namespace>_<container>-<id>.log`. Pod,
/// namespace and container names are DNS labels or subdomains, without
/// `_`, so the split is unambiguous; a name that splits otherwise is
/// not kubelet's and gives nothing.
fn kubelet_container(root: &HostRoot, id: &str) -> Option<ContainerInfo> {
    let suffix = format!("-{id}.log");
    let names = root.list(KUBELET_CONTAINER_LOGS, MAX_DIR_ENTRIES)?;
    let stem = names
        .iter()
        .filter_map(|n| n.to_str())
        .find_map(|n| n.strip_suffix(suffix.as_str()))?;
    let [pod, namespace, container] = split3(stem)?;
    ContainerInfo::new(Some(container), Some(pod), Some(namespace)).found()
}

/// kubelet, for the pod alone: its log directory
/// `<namespace>_<pod>_<uid>`, found by the uid in the process's cgroup.
fn kubelet_pod(root: &HostRoot, uid: &str) -> Option<ContainerInfo> {
    let names = root.list(KUBELET_POD_LOGS, MAX_DIR_ENTRIES)?;
    names.iter().filter_map(|n| n.to_str()).find_map(|n| {
        let [namespace, pod, pod_uid] = split3(n)?;
        (pod_uid == uid)
            .then(|| ContainerInfo::new(None, Some(pod), Some(namespace)).found())
            .flatten()
    })
}

/// `a_b_c` as its three non-empty parts; `None` otherwise.
fn split3(s: &str) -> Option<[&str; 3]> {
    let mut parts = s.split('_');
    let out = [parts.next()?, parts.next()?, parts.next()?];
    (parts.next().is_none() && out.iter().all(|p| !p.is_empty())).then_some(out)
}

/// Docker: `config.v2.json`'s name (`/web`), or with cri-dockerd the
/// Kubernetes labels kubelet put on the container, and the pod's labels
/// on its sandbox container.
fn docker(root: &HostRoot, id: &str, prefixes: &[String]) -> Option<ContainerInfo> {
    let read = |id: &str| -> Option<DockerConfig> {
        parse(&root.read(
            &format!("{DOCKER_CONTAINERS}/{id}/config.v2.json"),
            MAX_STATE_FILE,
        )?)
    };
    let config = read(id)?;
    let labels = config.config.and_then(|c| c.labels).unwrap_or_default();
    let docker_name = config.name.as_deref().map(|n| n.trim_start_matches('/'));
    let info = ContainerInfo::new(
        labels
            .get(K8S_CONTAINER_NAME)
            .map(String::as_str)
            .or(docker_name),
        labels.get(K8S_POD_NAME).map(String::as_str),
        labels.get(K8S_POD_NAMESPACE).map(String::as_str),
    );
    if prefixes.is_empty() || info.pod.is_none() {
        return info.found();
    }
    if labels.get(DOCKER_TYPE).map(String::as_str) == Some("podsandbox") {
        return info.with_pod_labels(prefixes, &labels).found();
    }
    let sandbox_labels = labels
        .get(DOCKER_SANDBOX_ID)
        .filter(|s| super::is_container_id(s))
        .and_then(|s| read(s))
        .and_then(|s| s.config?.labels)
        .unwrap_or_default();
    info.with_pod_labels(prefixes, &sandbox_labels).found()
}

/// Podman (root): containers/storage's `containers.json`, whose entry for
/// the id lists its names. Parsed once per change of the file.
fn podman_storage(root: &HostRoot, id: &str, indexes: &mut PodmanIndexes) -> Option<ContainerInfo> {
    for driver in STORAGE_DRIVERS {
        let path = format!("{STORAGE_ROOT}/{driver}-containers/containers.json");
        let Some(stamp) = root.stamp(&path) else {
            continue;
        };
        let fresh = matches!(indexes.by_driver.get(driver), Some((s, _)) if *s == stamp);
        if !fresh {
            // A file that does not parse is remembered as empty, so that
            // it is not parsed again until it changes.
            let (stamp, names) = match root.read_stamped(&path, MAX_CONTAINERS_JSON) {
                Some((bytes, stamp)) => (
                    stamp,
                    parse::<Vec<StorageContainer>>(&bytes)
                        .unwrap_or_default()
                        .into_iter()
                        .filter_map(|c| Some((c.id, c.names.into_iter().next()?)))
                        .collect(),
                ),
                None => (stamp, HashMap::new()),
            };
            indexes.by_driver.insert(driver, (stamp, names));
        }
        if let Some(name) = indexes.by_driver.get(driver).and_then(|(_, n)| n.get(id)) {
            return ContainerInfo::new(Some(name), None, None).found();
        }
    }
    None
}

/// Whether `s` can be put in a path as one component.
fn is_path_component(s: &str) -> bool {
    !s.is_empty() && s != "." && s != ".." && !s.contains('/')
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::{Path, PathBuf};

    /// The fixtures: state files as each runtime wrote them, trimmed to
    /// the fields read (`agent/tests/data/containers/`).
    fn fixture(name: &str) -> Vec<u8> {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/containers")
            .join(name);
        std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    /// A host root laid out like a node's.
    struct Host {
        dir: tempfile::TempDir,
    }

    impl Host {
        fn new() -> Host {
            Host {
                dir: tempfile::tempdir().unwrap(),
            }
        }

        fn put(&self, relative: &str, bytes: &[u8]) -> PathBuf {
            let path = self.dir.path().join(relative);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, bytes).unwrap();
            path
        }

        fn mkdir(&self, relative: &str) {
            std::fs::create_dir_all(self.dir.path().join(relative)).unwrap();
        }

        fn symlink(&self, target: &str, relative: &str) {
            let path = self.dir.path().join(relative);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::os::unix::fs::symlink(target, path).unwrap();
        }

        fn resolve(
            &self,
            id: &str,
            pod_uid: Option<&str>,
            prefixes: &[&str],
        ) -> Option<ContainerInfo> {
            let prefixes: Vec<String> = prefixes.iter().map(|p| p.to_string()).collect();
            resolve(
                &HostRoot::new(self.dir.path()),
                id,
                pod_uid,
                &prefixes,
                &mut PodmanIndexes::default(),
            )
        }
    }

    fn names(info: &Option<ContainerInfo>) -> (Option<&str>, Option<&str>, Option<&str>) {
        let Some(i) = info else {
            return (None, None, None);
        };
        (i.name.as_deref(), i.pod.as_deref(), i.namespace.as_deref())
    }

    fn labels(info: &Option<ContainerInfo>) -> Vec<(&str, &str)> {
        info.iter()
            .flat_map(|i| i.pod_labels.iter())
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect()
    }

    // The ids of the fixtures.
    const PODMAN_ID: &str = "bcd47ed514d1410e9b8b368fed01cc202e1824a64ae5b6ecdcfa2121e072272b";
    const CONTAINERD_ID: &str = "c1ed727676f3ac5c652b706e4576d1ff7680dfb3fd2dc60cfd9cc87cca6d7e01";
    const CRIO_ID: &str = "49ecc282021562c567a8159ef424a06cdd8637efdca5953de9794eafe29adcad";
    const CRIO_SANDBOX_ID: &str =
        "134b58ab2e0cfd7432a9db818b1b4ec52fdc747333f0ba2c9342860dc2ea7c50";
    const DOCKER_ID: &str = "3d5e0c3b8f1f6a1e4a8f1f0b6a0d9c2e7b4a5f6e7d8c9b0a1f2e3d4c5b6a7980";
    const DOCKER_K8S_ID: &str = "8f14e45fceea167a5a36dedd4bea2543a9b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5";
    const DOCKER_SANDBOX_ID: &str =
        "e4da3b7fbbce2345d7772b0674a318d5a9b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5";

    // Guards Podman's source on the files Podman 4.3 wrote here: its
    // containers.json names the container; the OCI config it writes
    // beside it (with CRI-O's annotation prefix but no labels) is not
    // taken for CRI-O's.
    #[test]
    fn podman_names_from_its_containers_json() {
        let host = Host::new();
        host.put(
            "var/lib/containers/storage/overlay-containers/containers.json",
            &fixture("podman/containers.json"),
        );
        host.put(
            &format!(
                "var/lib/containers/storage/overlay-containers/{PODMAN_ID}/userdata/config.json"
            ),
            &fixture("podman/config.json"),
        );
        let info = host.resolve(PODMAN_ID, None, &["io."]);
        assert_eq!(names(&info), (Some("kiln-try"), None, None));
        assert!(labels(&info).is_empty());
        assert_eq!(host.resolve(&"f".repeat(64), None, &[]), None);
        // vfs storage keeps the same file under its own driver's name.
        let vfs = Host::new();
        vfs.put(
            "var/lib/containers/storage/vfs-containers/containers.json",
            &fixture("podman/containers.json"),
        );
        assert_eq!(
            names(&vfs.resolve(PODMAN_ID, None, &[])).0,
            Some("kiln-try")
        );
    }

    // Guards the index of containers.json: parsed again when the file
    // changes, not otherwise.
    #[test]
    fn podman_index_follows_the_file() {
        let host = Host::new();
        let path = "var/lib/containers/storage/overlay-containers/containers.json";
        host.put(path, br#"[{"id":"aa","names":["one"]}]"#);
        let root = HostRoot::new(host.dir.path());
        let mut indexes = PodmanIndexes::default();
        let name = |indexes: &mut PodmanIndexes, id: &str| {
            podman_storage(&root, id, indexes).and_then(|i| i.name)
        };
        assert_eq!(name(&mut indexes, "aa").as_deref(), Some("one"));
        // A new file (as containers/storage writes it: a rename) is read.
        let tmp = host.put(
            "var/lib/containers/storage/overlay-containers/tmp",
            br#"[{"id":"bb","names":["two","alias"]}]"#,
        );
        std::fs::rename(tmp, host.dir.path().join(path)).unwrap();
        assert_eq!(name(&mut indexes, "bb").as_deref(), Some("two"));
        assert_eq!(name(&mut indexes, "aa"), None);
    }

    // Guards containerd's source on a Kubernetes container's bundle
    // config (kind, containerd 1.7): container, pod, namespace; pod
    // annotations passed on are the pod labels' source.
    #[test]
    fn containerd_names_from_cri_annotations() {
        let host = Host::new();
        host.mkdir(&format!("{CONTAINERD_TASKS}/moby"));
        host.put(
            &format!("{CONTAINERD_TASKS}/k8s.io/{CONTAINERD_ID}/config.json"),
            &fixture("containerd/config.json"),
        );
        let info = host.resolve(CONTAINERD_ID, None, &["example.com/"]);
        assert_eq!(
            names(&info),
            (
                Some("bpfman-agent"),
                Some("bpfman-daemon-hf5gv"),
                Some("bpfman")
            )
        );
        assert_eq!(labels(&info), [("pod_label_example_com_team", "ebpf")]);
        // nerdctl names its containers in the default namespace.
        let nerdctl = Host::new();
        nerdctl.put(
            &format!("{CONTAINERD_TASKS}/default/{CONTAINERD_ID}/config.json"),
            br#"{"ociVersion":"1.1.0","annotations":{"nerdctl/name":"web","nerdctl/namespace":"default"}}"#,
        );
        assert_eq!(
            names(&nerdctl.resolve(CONTAINERD_ID, None, &[])),
            (Some("web"), None, None)
        );
    }

    // Guards CRI-O's source: the container's labels name it, its pod and
    // namespace; the sandbox's labels are the pod's.
    #[test]
    fn crio_names_from_its_labels_and_the_sandboxs() {
        let host = Host::new();
        let dir = "run/containers/storage/overlay-containers";
        host.put(
            &format!("{dir}/{CRIO_ID}/userdata/config.json"),
            &fixture("crio/container-config.json"),
        );
        host.put(
            &format!("{dir}/{CRIO_SANDBOX_ID}/userdata/config.json"),
            &fixture("crio/sandbox-config.json"),
        );
        let info = host.resolve(CRIO_ID, None, &[]);
        assert_eq!(
            names(&info),
            (Some("segfaulter"), Some("segfaulter"), Some("default"))
        );
        assert!(labels(&info).is_empty(), "none without --pod-labels");
        let info = host.resolve(CRIO_ID, None, &["run", "app.kubernetes.io/"]);
        assert_eq!(
            labels(&info),
            [
                ("pod_label_app_kubernetes_io_name", "segfaulter"),
                ("pod_label_run", "segfaulter")
            ]
        );
        // The pause process of the sandbox: its pod, its own labels.
        let info = host.resolve(CRIO_SANDBOX_ID, None, &["run"]);
        assert_eq!(
            names(&info),
            (Some("POD"), Some("segfaulter"), Some("default"))
        );
        assert_eq!(labels(&info), [("pod_label_run", "segfaulter")]);
    }

    // Guards kubelet's log symlinks as a source for any runtime, and the
    // pod-uid fallback through its pod log directories.
    #[test]
    fn kubelet_names_from_its_log_names() {
        let host = Host::new();
        let id = "a".repeat(64);
        host.symlink(
            "/var/log/pods/shop_cart-7d9f_2b3c4d5e-1111-2222-3333-444455556666/cart/0.log",
            &format!("var/log/containers/cart-7d9f_shop_cart-{id}.log"),
        );
        host.symlink(
            "/nowhere",
            &format!(
                "var/log/containers/cart-7d9f_shop_istio-proxy-{}.log",
                "b".repeat(64)
            ),
        );
        let info = host.resolve(&id, None, &[]);
        assert_eq!(
            names(&info),
            (Some("cart"), Some("cart-7d9f"), Some("shop"))
        );
        let info = host.resolve(&"b".repeat(64), None, &[]);
        assert_eq!(names(&info).0, Some("istio-proxy"));

        host.mkdir("var/log/pods/shop_cart-7d9f_2b3c4d5e-1111-2222-3333-444455556666/cart");
        host.mkdir("var/log/pods/kube-system_coredns-1_99999999-1111-2222-3333-444455556666");
        let unknown = "c".repeat(64);
        let info = host.resolve(&unknown, Some("2b3c4d5e-1111-2222-3333-444455556666"), &[]);
        assert_eq!(names(&info), (None, Some("cart-7d9f"), Some("shop")));
        assert_eq!(host.resolve(&unknown, None, &[]), None);
        assert_eq!(
            host.resolve(&unknown, Some("00000000-1111-2222-3333-444455556666"), &[]),
            None
        );
    }

    // Guards Docker's source: its name, or with cri-dockerd the
    // Kubernetes labels, and the pod's labels from its sandbox.
    #[test]
    fn docker_names_from_config_v2() {
        let host = Host::new();
        host.put(
            &format!("{DOCKER_CONTAINERS}/{DOCKER_ID}/config.v2.json"),
            &fixture("docker/config.v2.json"),
        );
        host.put(
            &format!("{DOCKER_CONTAINERS}/{DOCKER_K8S_ID}/config.v2.json"),
            &fixture("docker/k8s-container.config.v2.json"),
        );
        host.put(
            &format!("{DOCKER_CONTAINERS}/{DOCKER_SANDBOX_ID}/config.v2.json"),
            &fixture("docker/k8s-sandbox.config.v2.json"),
        );
        assert_eq!(
            names(&host.resolve(DOCKER_ID, None, &["com."])),
            (Some("kiln-shares"), None, None)
        );
        let info = host.resolve(DOCKER_K8S_ID, None, &["app"]);
        assert_eq!(
            names(&info),
            (Some("nginx"), Some("web-6d4cf56db6-x2x7z"), Some("default"))
        );
        assert_eq!(labels(&info), [("pod_label_app", "web")]);
    }

    // Guards the order: a CRI-O container also listed in
    // containers.json (CRI-O uses the same storage) gets its Kubernetes
    // names, not its storage name.
    #[test]
    fn first_runtime_wins() {
        let host = Host::new();
        host.put(
            &format!(
                "var/lib/containers/storage/overlay-containers/{CRIO_ID}/userdata/config.json"
            ),
            &fixture("crio/container-config.json"),
        );
        host.put(
            "var/lib/containers/storage/overlay-containers/containers.json",
            format!(
                r#"[{{"id":"{CRIO_ID}","names":["k8s_segfaulter_segfaulter_default_aaaa_0"]}}]"#
            )
            .as_bytes(),
        );
        assert_eq!(
            names(&host.resolve(CRIO_ID, None, &[])).0,
            Some("segfaulter")
        );
    }

    // Guards against hostile or broken state: huge files, symlinks out
    // of the root, invalid UTF-8, malformed JSON, names that split wrong.
    // None of them names anything, panics, or reads past the caps.
    #[test]
    fn hostile_state_names_nothing() {
        let id = "d".repeat(64);
        let docker = format!("{DOCKER_CONTAINERS}/{id}/config.v2.json");

        // A 2 GiB sparse file: refused by its size, never read.
        let host = Host::new();
        let path = host.put(&docker, b"");
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(2 << 30)
            .unwrap();
        assert_eq!(host.resolve(&id, None, &[]), None);

        // A symlink to a file outside the root that would parse.
        let outside = tempfile::tempdir().unwrap();
        let secret = outside.path().join("secret.json");
        std::fs::write(&secret, br#"{"Name":"/leaked"}"#).unwrap();
        let host = Host::new();
        host.symlink(secret.to_str().unwrap(), &docker);
        assert_eq!(host.resolve(&id, None, &[]), None);
        // A symlinked directory pointing out of the root resolves inside
        // it.
        let host = Host::new();
        std::fs::create_dir_all(outside.path().join(&id)).unwrap();
        std::fs::write(
            outside.path().join(&id).join("config.v2.json"),
            br#"{"Name":"/leaked"}"#,
        )
        .unwrap();
        host.symlink(outside.path().to_str().unwrap(), DOCKER_CONTAINERS);
        assert_eq!(host.resolve(&id, None, &[]), None);
        // And /etc/shadow, as a runtime's config, is not there either.
        let host = Host::new();
        host.symlink(
            "/etc/shadow",
            &format!("{CONTAINERD_TASKS}/k8s.io/{id}/config.json"),
        );
        assert_eq!(host.resolve(&id, None, &[]), None);

        // Invalid UTF-8 inside a JSON string, and in a file name.
        let host = Host::new();
        host.put(&docker, b"{\"Name\":\"/ab\xff\xfe\"}");
        assert_eq!(host.resolve(&id, None, &[]), None);
        use std::os::unix::ffi::OsStrExt;
        let bad_name = std::ffi::OsStr::from_bytes(b"p\xff_ns_c-");
        let mut bad = std::ffi::OsString::from(bad_name);
        bad.push(format!("{id}.log"));
        host.mkdir(KUBELET_CONTAINER_LOGS);
        std::fs::write(host.dir.path().join(KUBELET_CONTAINER_LOGS).join(bad), b"").unwrap();
        assert_eq!(host.resolve(&id, None, &[]), None);

        // Malformed JSON in each runtime's file, and wrong types.
        let host = Host::new();
        host.put(
            &format!("{CONTAINERD_TASKS}/k8s.io/{id}/config.json"),
            b"{\"annotations\":{",
        );
        host.put(
            &format!("run/containers/storage/overlay-containers/{id}/userdata/config.json"),
            br#"{"annotations":{"io.kubernetes.cri-o.Labels":"{not json"}}"#,
        );
        host.put(&docker, br#"{"Name":42}"#);
        host.put(
            "var/lib/containers/storage/overlay-containers/containers.json",
            br#"{"id":"not a list"}"#,
        );
        host.put(
            "var/lib/containers/storage/vfs-containers/containers.json",
            format!(r#"[{{"id":"{id}","names":[]}}]"#).as_bytes(),
        );
        assert_eq!(host.resolve(&id, None, &["io."]), None);

        // Kubelet log names that do not split in three.
        let host = Host::new();
        for stem in ["my_pod_ns_c", "pod_ns", "_ns_c", "pod__c"] {
            host.put(&format!("{KUBELET_CONTAINER_LOGS}/{stem}-{id}.log"), b"");
            assert_eq!(host.resolve(&id, None, &[]), None, "{stem}");
            std::fs::remove_file(
                host.dir
                    .path()
                    .join(format!("{KUBELET_CONTAINER_LOGS}/{stem}-{id}.log")),
            )
            .unwrap();
        }
        host.mkdir("var/log/pods/ns_my_pod_2b3c4d5e-1111-2222-3333-444455556666");
        assert_eq!(
            host.resolve(&id, Some("2b3c4d5e-1111-2222-3333-444455556666"), &[]),
            None
        );

        // A containerd namespace named `..` is not followed.
        let host = Host::new();
        host.put(
            &format!("run/containerd/{id}/config.json"),
            br#"{"annotations":{"nerdctl/name":"escaped"}}"#,
        );
        host.mkdir(CONTAINERD_TASKS);
        assert_eq!(host.resolve(&id, None, &[]), None);

        // Blank names are none.
        let host = Host::new();
        host.put(&docker, br#"{"Name":"/  "}"#);
        assert_eq!(host.resolve(&id, None, &[]), None);
    }
}
