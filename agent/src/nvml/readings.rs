//! One sampling pass over the GPUs, and its flat points.

/// A flat metric point: its name, labels, and value. Names and label keys
/// are fixed strings (see [`GpuReadings::points`]).
pub type GpuPoint = (&'static str, Vec<(&'static str, String)>, f64);

/// What one pass read from every GPU.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuReadings {
    /// One per GPU NVML gave a handle for, by NVML index.
    pub devices: Vec<DeviceReading>,
    /// The compute processes on all of them (at most
    /// [`MAX_GPU_PROCESSES`](super::MAX_GPU_PROCESSES) per GPU).
    pub processes: Vec<GpuProcess>,
}

/// One GPU's metrics. A metric is `None` when the GPU does not report it
/// (NVML says "not supported": power on many consumer cards, PCIe in
/// vGPU guests, utilization in MIG mode) or reading it failed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeviceReading {
    /// NVML's index (the order of PCI bus ids, which need not be CUDA's).
    pub index: u32,
    /// The product name, e.g. "NVIDIA H100 80GB HBM3".
    pub name: String,
    /// `GPU-…`: stable across reboots and index changes.
    pub uuid: String,
    /// Percent of the last sample period in which a kernel ran.
    pub utilization_percent: Option<u32>,
    /// Percent of the last sample period in which device memory was read
    /// or written.
    pub memory_utilization_percent: Option<u32>,
    /// Streaming multiprocessor clock, MHz.
    pub sm_clock_mhz: Option<u32>,
    /// Memory clock, MHz.
    pub memory_clock_mhz: Option<u32>,
    /// Device memory allocated, bytes.
    pub memory_used_bytes: Option<u64>,
    /// Device memory, bytes.
    pub memory_total_bytes: Option<u64>,
    /// Board power draw, watts (NVML reports milliwatts).
    pub power_watts: Option<f64>,
    /// Die temperature, °C.
    pub temperature_celsius: Option<u32>,
    /// Host-to-device PCIe traffic over the last 20 ms, bytes per second
    /// (NVML reports KB/s).
    pub pcie_rx_bytes_per_second: Option<u64>,
    /// Device-to-host PCIe traffic over the last 20 ms, bytes per second.
    pub pcie_tx_bytes_per_second: Option<u64>,
}

/// A process with a compute context on a GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuProcess {
    /// Its pid, in the host's pid namespace (where the driver runs).
    pub pid: u32,
    /// The [`DeviceReading::index`] of the GPU.
    pub gpu: u32,
    /// Device memory it allocated, bytes; `None` when the driver cannot
    /// tell (no permission to see the process).
    pub used_bytes: Option<u64>,
}

impl GpuReadings {
    /// The readings as flat points, metrics left out where `None`:
    /// `gpu.utilization_percent`, `gpu.memory_utilization_percent`,
    /// `gpu.sm_clock_mhz`, `gpu.memory_clock_mhz`, `gpu.memory_used_bytes`,
    /// `gpu.memory_total_bytes`, `gpu.power_watts`,
    /// `gpu.temperature_celsius`, `gpu.pcie_rx_bytes_per_second`,
    /// `gpu.pcie_tx_bytes_per_second` per GPU, labelled `gpu` (the index),
    /// `gpu_name` and `gpu_uuid`; then `gpu.process_memory_used_bytes` per
    /// process, with those labels and `pid`.
    pub fn points(&self) -> Vec<GpuPoint> {
        let mut points = Vec::new();
        for d in &self.devices {
            let metrics: [(&'static str, Option<f64>); 10] = [
                (
                    "gpu.utilization_percent",
                    d.utilization_percent.map(f64::from),
                ),
                (
                    "gpu.memory_utilization_percent",
                    d.memory_utilization_percent.map(f64::from),
                ),
                ("gpu.sm_clock_mhz", d.sm_clock_mhz.map(f64::from)),
                ("gpu.memory_clock_mhz", d.memory_clock_mhz.map(f64::from)),
                (
                    "gpu.memory_used_bytes",
                    d.memory_used_bytes.map(|v| v as f64),
                ),
                (
                    "gpu.memory_total_bytes",
                    d.memory_total_bytes.map(|v| v as f64),
                ),
                ("gpu.power_watts", d.power_watts),
                (
                    "gpu.temperature_celsius",
                    d.temperature_celsius.map(f64::from),
                ),
                (
                    "gpu.pcie_rx_bytes_per_second",
                    d.pcie_rx_bytes_per_second.map(|v| v as f64),
                ),
                (
                    "gpu.pcie_tx_bytes_per_second",
                    d.pcie_tx_bytes_per_second.map(|v| v as f64),
                ),
            ];
            for (name, value) in metrics {
                if let Some(value) = value {
                    points.push((name, device_labels(d), value));
                }
            }
        }
        for p in &self.processes {
            let Some(used) = p.used_bytes else {
                continue;
            };
            let mut labels = match self.devices.iter().find(|d| d.index == p.gpu) {
                Some(d) => device_labels(d),
                None => vec![("gpu", p.gpu.to_string())],
            };
            labels.push(("pid", p.pid.to_string()));
            points.push(("gpu.process_memory_used_bytes", labels, used as f64));
        }
        points
    }
}

fn device_labels(d: &DeviceReading) -> Vec<(&'static str, String)> {
    vec![
        ("gpu", d.index.to_string()),
        ("gpu_name", d.name.clone()),
        ("gpu_uuid", d.uuid.clone()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full(index: u32) -> DeviceReading {
        DeviceReading {
            index,
            name: format!("GPU {index}"),
            uuid: format!("GPU-{index}"),
            utilization_percent: Some(91),
            memory_utilization_percent: Some(40),
            sm_clock_mhz: Some(1980),
            memory_clock_mhz: Some(2619),
            memory_used_bytes: Some(3 << 30),
            memory_total_bytes: Some(80 << 30),
            power_watts: Some(312.5),
            temperature_celsius: Some(61),
            pcie_rx_bytes_per_second: Some(2048),
            pcie_tx_bytes_per_second: Some(1024),
        }
    }

    // Guards the metric names and labels the backend will store: renaming
    // one splits its history.
    #[test]
    fn every_metric_becomes_a_point() {
        let readings = GpuReadings {
            devices: vec![full(0)],
            processes: vec![GpuProcess {
                pid: 42,
                gpu: 0,
                used_bytes: Some(1 << 20),
            }],
        };
        let points = readings.points();
        let names: Vec<_> = points.iter().map(|p| p.0).collect();
        assert_eq!(
            names,
            [
                "gpu.utilization_percent",
                "gpu.memory_utilization_percent",
                "gpu.sm_clock_mhz",
                "gpu.memory_clock_mhz",
                "gpu.memory_used_bytes",
                "gpu.memory_total_bytes",
                "gpu.power_watts",
                "gpu.temperature_celsius",
                "gpu.pcie_rx_bytes_per_second",
                "gpu.pcie_tx_bytes_per_second",
                "gpu.process_memory_used_bytes",
            ]
        );
        let values: Vec<_> = points.iter().map(|p| p.2).collect();
        assert_eq!(
            values,
            [
                91.0,
                40.0,
                1980.0,
                2619.0,
                (3u64 << 30) as f64,
                (80u64 << 30) as f64,
                312.5,
                61.0,
                2048.0,
                1024.0,
                1048576.0
            ]
        );
        let labels = |k: &'static str, v: &str| (k, v.to_string());
        assert_eq!(
            points[0].1,
            [
                labels("gpu", "0"),
                labels("gpu_name", "GPU 0"),
                labels("gpu_uuid", "GPU-0")
            ]
        );
        assert_eq!(
            points[10].1,
            [
                labels("gpu", "0"),
                labels("gpu_name", "GPU 0"),
                labels("gpu_uuid", "GPU-0"),
                labels("pid", "42")
            ]
        );
    }

    // Guards that a metric a GPU lacks is absent, not reported as zero.
    #[test]
    fn missing_metrics_are_left_out() {
        let mut partial = full(1);
        partial.power_watts = None;
        partial.pcie_rx_bytes_per_second = None;
        partial.pcie_tx_bytes_per_second = None;
        let readings = GpuReadings {
            devices: vec![full(0), partial],
            processes: vec![
                GpuProcess {
                    pid: 7,
                    gpu: 1,
                    used_bytes: None,
                },
                GpuProcess {
                    pid: 8,
                    gpu: 1,
                    used_bytes: Some(5),
                },
            ],
        };
        let points = readings.points();
        let of_gpu1: Vec<_> = points
            .iter()
            .filter(|p| p.1[0] == ("gpu", "1".to_string()))
            .map(|p| p.0)
            .collect();
        assert_eq!(of_gpu1.len(), 7 + 1, "{of_gpu1:?}");
        assert!(!of_gpu1.contains(&"gpu.power_watts"));
        assert!(!of_gpu1.iter().any(|n| n.starts_with("gpu.pcie")));
        let processes: Vec<_> = points
            .iter()
            .filter(|p| p.0 == "gpu.process_memory_used_bytes")
            .collect();
        assert_eq!(processes.len(), 1);
        assert_eq!(processes[0].1[3], ("pid", "8".to_string()));
        assert_eq!(processes[0].1[1], ("gpu_name", "GPU 1".to_string()));
        assert_eq!(processes[0].2, 5.0);
    }

    #[test]
    fn no_gpus_no_points() {
        assert!(GpuReadings::default().points().is_empty());
    }
}
