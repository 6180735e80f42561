//! Label sets: the key/value pairs that say where a sample came from.

use crate::ids::{ContentHasher, Domain, LabelSetId};

/// Well-known label names. Any other name is allowed too.
pub mod names {
    /// The machine's host name.
    pub const HOST: &str = "host";
    /// Process id.
    pub const PID: &str = "pid";
    /// Process (executable) name.
    pub const PROCESS: &str = "process";
    /// Thread name.
    pub const THREAD: &str = "thread";
    /// Thread id.
    pub const TID: &str = "tid";
    /// Interpreter script name.
    pub const SCRIPT: &str = "script";
    /// Container id, from the cgroup path.
    pub const CONTAINER: &str = "container";
    /// Kubernetes pod.
    pub const POD: &str = "pod";
    /// Kubernetes namespace.
    pub const NAMESPACE: &str = "namespace";
    /// The service a process belongs to (OpenTelemetry's `service.name`,
    /// Pyroscope's application name). It names what ran: rollups keep it.
    pub const SERVICE: &str = "service";
    /// A container's name (Docker's name, a pod spec's container name),
    /// beside [`CONTAINER`]'s id. It names what ran: rollups keep it.
    pub const CONTAINER_NAME: &str = "container_name";
    /// What a sample's weight measures when it is not CPU time
    /// (`wall`, `alloc_space`, …); CPU samples never carry it.
    pub const SAMPLE_TYPE: &str = "sample_type";
    /// Which processor the samples ran on, `cpu` or `gpu`; or
    /// [`OFF_CPU`] for the agent's off-CPU samples (time threads spent
    /// blocked, in ns), which queries leave out unless this label is asked
    /// for.
    pub const DEVICE_KIND: &str = "device_kind";
    /// The [`DEVICE_KIND`] of off-CPU samples.
    pub const OFF_CPU: &str = "off_cpu";
    /// A GPU's index on its host (NVML's device index), for GPU metrics.
    pub const GPU: &str = "gpu";
    /// A GPU's product name (`NVIDIA H100 80GB HBM3`), for GPU metrics.
    pub const GPU_NAME: &str = "gpu_name";
    /// A GPU's NVML UUID (`GPU-…`), stable across reboots and index
    /// changes, for GPU metrics.
    pub const GPU_UUID: &str = "gpu_uuid";

    /// Labels that name one instance (a machine, a process, a thread, a
    /// container, a device) rather than what ran. A fleet has thousands of
    /// values of each, so long-range rollups sum over them
    /// ([`LabelSet::without_instance`](super::LabelSet::without_instance)):
    /// a week of a 1,000-host fleet is then one row per stack and hour
    /// instead of a thousand. A query that filters on one of them reads
    /// the samples instead.
    pub const PER_INSTANCE: &[&str] = &[HOST, PID, TID, THREAD, CONTAINER, POD, GPU_UUID];
}

/// A set of labels, kept sorted by name with one value per name, so that
/// equal sets are equal values and hash to the same [`LabelSetId`].
#[derive(
    Debug,
    Clone,
    Default,
    PartialEq,
    Eq,
    Hash,
    serde::Serialize,
    serde::Deserialize,
    rkyv::Archive,
    rkyv::Serialize,
    rkyv::Deserialize,
)]
#[serde(from = "Vec<(String, String)>", into = "Vec<(String, String)>")]
pub struct LabelSet {
    pairs: Vec<(String, String)>,
}

impl LabelSet {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `name` to `value`, replacing an earlier value.
    pub fn insert(&mut self, name: impl Into<String>, value: impl Into<String>) {
        let name = name.into();
        let value = value.into();
        match self.pairs.binary_search_by(|(n, _)| n.as_str().cmp(&name)) {
            Ok(i) => self.pairs[i].1 = value,
            Err(i) => self.pairs.insert(i, (name, value)),
        }
    }

    /// Builder form of [`insert`](Self::insert).
    pub fn with(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.insert(name, value);
        self
    }

    /// The value of `name`, if set.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.pairs
            .binary_search_by(|(n, _)| n.as_str().cmp(name))
            .ok()
            .map(|i| self.pairs[i].1.as_str())
    }

    /// The pairs, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.pairs.iter().map(|(n, v)| (n.as_str(), v.as_str()))
    }

    /// Number of labels.
    pub fn len(&self) -> usize {
        self.pairs.len()
    }

    /// Whether the set has no labels.
    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    /// Whether every `(name, value)` of `filter` is in this set.
    pub fn matches<'a>(&self, filter: impl IntoIterator<Item = (&'a str, &'a str)>) -> bool {
        filter.into_iter().all(|(n, v)| self.get(n) == Some(v))
    }

    /// This set without its per-instance labels ([`names::PER_INSTANCE`]):
    /// the label set a rollup sums samples under.
    pub fn without_instance(&self) -> LabelSet {
        LabelSet {
            pairs: self
                .pairs
                .iter()
                .filter(|(n, _)| !names::PER_INSTANCE.contains(&n.as_str()))
                .cloned()
                .collect(),
        }
    }

    /// The content id of this set.
    pub fn id(&self) -> LabelSetId {
        let mut h = ContentHasher::new(Domain::LabelSet);
        h.u64(self.pairs.len() as u64);
        for (n, v) in &self.pairs {
            h.bytes(n.as_bytes()).bytes(v.as_bytes());
        }
        LabelSetId(h.finish())
    }
}

#[cfg(feature = "codec")]
impl ArchivedLabelSet {
    /// The archived pairs, for checks made before deserializing.
    pub(crate) fn archived_pairs(
        &self,
    ) -> &rkyv::vec::ArchivedVec<
        rkyv::tuple::ArchivedTuple2<rkyv::string::ArchivedString, rkyv::string::ArchivedString>,
    > {
        &self.pairs
    }
}

impl From<Vec<(String, String)>> for LabelSet {
    fn from(pairs: Vec<(String, String)>) -> Self {
        let mut set = LabelSet::new();
        for (n, v) in pairs {
            set.insert(n, v);
        }
        set
    }
}

impl From<LabelSet> for Vec<(String, String)> {
    fn from(set: LabelSet) -> Self {
        set.pairs
    }
}

impl<N: Into<String>, V: Into<String>> FromIterator<(N, V)> for LabelSet {
    fn from_iter<I: IntoIterator<Item = (N, V)>>(iter: I) -> Self {
        let mut set = LabelSet::new();
        for (n, v) in iter {
            set.insert(n, v);
        }
        set
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_of_insertion_does_not_change_the_id() {
        let a: LabelSet = [("host", "a"), ("pid", "1")].into_iter().collect();
        let b: LabelSet = [("pid", "1"), ("host", "a")].into_iter().collect();
        assert_eq!(a, b);
        assert_eq!(a.id(), b.id());
        assert!(a.matches([("host", "a")]));
        assert!(!a.matches([("host", "b")]));
    }

    #[test]
    fn without_instance_keeps_what_ran_and_drops_where() {
        let set: LabelSet = [
            ("host", "web-17"),
            ("pid", "4242"),
            ("tid", "4243"),
            ("thread", "worker-3"),
            ("container", "c0ffee"),
            ("pod", "web-7d9f"),
            ("gpu_uuid", "GPU-1"),
            ("process", "web"),
            ("namespace", "prod"),
            ("device_kind", "cpu"),
            ("service", "checkout"),
        ]
        .into_iter()
        .collect();
        let reduced = set.without_instance();
        let kept: Vec<_> = reduced.iter().map(|(n, _)| n).collect();
        assert_eq!(kept, ["device_kind", "namespace", "process", "service"]);
        // Two hosts of one service fold into one label set.
        let other = set.clone().with("host", "web-18").with("pid", "1");
        assert_eq!(set.without_instance().id(), other.without_instance().id());
    }

    #[test]
    fn later_value_replaces_earlier() {
        let set = LabelSet::new().with("host", "a").with("host", "b");
        assert_eq!(set.len(), 1);
        assert_eq!(set.get("host"), Some("b"));
    }
}
