//! Figures as people read them: cores, and metric values in their units.

/// Cores with precision that fits the size, below one core in millicores
/// as Kubernetes writes them: `12.3`, `2.40`, `350m`, `2.8m`, `0.028m`
/// (a profile of one process over a day is often far below a thousandth
/// of a core), and below a microcore in plain exponent form.
pub fn cores(cores: f64) -> String {
    let magnitude = cores.abs();
    let milli = cores * 1000.0;
    if magnitude == 0.0 {
        "0".to_owned()
    } else if magnitude >= 10.0 {
        format!("{cores:.1}")
    } else if magnitude >= 1.0 {
        format!("{cores:.2}")
    } else if magnitude >= 0.01 {
        format!("{milli:.0}m")
    } else if magnitude >= 0.001 {
        format!("{milli:.1}m")
    } else if magnitude >= 1e-6 {
        format!("{milli:.3}m")
    } else {
        format!("{cores:.1e}")
    }
}

/// A duration in nanoseconds with the unit that fits it: `850 ns`,
/// `200 µs`, `1.5 ms`, `3.6 s`, three significant digits at most.
pub fn duration_ns(ns: u64) -> String {
    let ns = ns as f64;
    let (value, unit) = if ns >= 1e9 {
        (ns / 1e9, "s")
    } else if ns >= 1e6 {
        (ns / 1e6, "ms")
    } else if ns >= 1e3 {
        (ns / 1e3, "µs")
    } else {
        (ns, "ns")
    };
    format!("{} {unit}", short(value))
}

/// A share (0 to 1) as a percentage: `97.3%`, `0.41%`, `100%`.
pub fn percent_of(share: f64) -> String {
    format!("{}%", short(share * 100.0))
}

/// The status line's stack coverage: short text ("stacks 97.3% whole"),
/// the breakdown for its tooltip, and whether enough broke (over 5%) that
/// a flamegraph's callers should not be trusted as they are.
pub fn stack_coverage(shares: &kiln_model::StackWalkShares) -> (String, String, bool) {
    let percent = |share: f64| {
        let p = share * 100.0;
        if p >= 99.95 || p == 0.0 {
            format!("{p:.0}%")
        } else {
            format!("{p:.1}%")
        }
    };
    let text = format!("stacks {} whole", percent(shares.rooted));
    let why: Vec<String> = shares
        .broken
        .iter()
        .map(|(outcome, share)| {
            let reason = match outcome.as_str() {
                "no_table" => "unwind table not loaded yet",
                "evicted" => "unwind table evicted for room",
                "no_mapping" => "code in no known mapping (JIT, or mapped since)",
                "bad_frame" => "a frame led nowhere",
                "depth" => "deeper than 127 frames",
                other => other,
            };
            format!("{} {reason}", percent(*share))
        })
        .collect();
    let title = if why.is_empty() {
        "every user stack in the range reached its root (_start or a thread's entry)".to_owned()
    } else {
        format!(
            "{} of user stacks stopped before their root: {}",
            percent(1.0 - shares.rooted),
            why.join("; ")
        )
    };
    (text, title, shares.rooted < 0.95)
}

/// What a metric's values are, from the end of its name
/// (`gpu.memory_used_bytes` → bytes), as Kiln's agent names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// `_percent`.
    Percent,
    /// `_bytes`.
    Bytes,
    /// `_bytes_per_second`.
    BytesPerSecond,
    /// `_mhz`.
    Megahertz,
    /// `_watts`.
    Watts,
    /// `_celsius`.
    Celsius,
    /// Anything else: a plain number.
    Number,
}

impl Unit {
    /// The unit of metric `name`.
    pub fn of_metric(name: &str) -> Unit {
        let ends = |suffix: &str| name.ends_with(suffix);
        if ends("_bytes_per_second") {
            Unit::BytesPerSecond
        } else if ends("_bytes") {
            Unit::Bytes
        } else if ends("_percent") {
            Unit::Percent
        } else if ends("_mhz") {
            Unit::Megahertz
        } else if ends("_watts") {
            Unit::Watts
        } else if ends("_celsius") {
            Unit::Celsius
        } else {
            Unit::Number
        }
    }

    /// `value` in this unit, short: `87%`, `1.5 GiB`, `12 MiB/s`, `1980
    /// MHz`, `250 W`, `64 °C`, `0.35`.
    pub fn format(self, value: f64) -> String {
        match self {
            Unit::Percent => format!("{}%", short(value)),
            Unit::Bytes => binary(value, ""),
            Unit::BytesPerSecond => binary(value, "/s"),
            Unit::Megahertz => format!("{} MHz", short(value)),
            Unit::Watts => format!("{} W", short(value)),
            Unit::Celsius => format!("{} °C", short(value)),
            Unit::Number => short(value),
        }
    }
}

/// Three significant digits or whole numbers, whichever is longer:
/// `1980`, `87.5`, `0.352`, `2.5e-5`.
fn short(value: f64) -> String {
    let magnitude = value.abs();
    let text = if magnitude == 0.0 {
        "0".to_owned()
    } else if magnitude >= 100.0 {
        format!("{value:.0}")
    } else if magnitude >= 10.0 {
        format!("{value:.1}")
    } else if magnitude >= 0.01 {
        format!("{value:.2}")
    } else {
        return format!("{value:.1e}");
    };
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        text
    }
}

/// Bytes with a binary prefix: `512 B`, `1.5 KiB`, `80 GiB`.
fn binary(value: f64, per: &str) -> String {
    const PREFIXES: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut scaled = value;
    let mut prefix = 0;
    while scaled.abs() >= 1024.0 && prefix + 1 < PREFIXES.len() {
        scaled /= 1024.0;
        prefix += 1;
    }
    format!("{} {}{per}", short(scaled), PREFIXES[prefix])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stack_coverage_reads_as_a_share_with_its_reasons() {
        let shares = kiln_model::StackWalkShares {
            rooted: 0.973,
            broken: vec![
                ("no_table".to_owned(), 0.015),
                ("no_mapping".to_owned(), 0.012),
            ],
        };
        let (text, title, warn) = stack_coverage(&shares);
        assert_eq!(text, "stacks 97.3% whole");
        assert!(title.starts_with("2.7% of user stacks stopped"), "{title}");
        assert!(
            title.contains("1.5% unwind table not loaded yet"),
            "{title}"
        );
        assert!(!warn);
        let all = kiln_model::StackWalkShares {
            rooted: 1.0,
            broken: vec![],
        };
        assert_eq!(stack_coverage(&all).0, "stacks 100% whole");
        let poor = kiln_model::StackWalkShares {
            rooted: 0.5,
            broken: vec![("bad_frame".to_owned(), 0.5)],
        };
        assert!(stack_coverage(&poor).2);
    }

    #[test]
    fn metric_units_come_from_the_name_and_read_short() {
        let unit = Unit::of_metric;
        assert_eq!(unit("gpu.utilization_percent").format(87.5), "87.5%");
        assert_eq!(unit("gpu.utilization_percent").format(100.0), "100%");
        assert_eq!(
            unit("gpu.memory_used_bytes").format(80.0 * 1024f64.powi(3)),
            "80 GiB"
        );
        assert_eq!(unit("gpu.memory_used_bytes").format(1536.0), "1.5 KiB");
        assert_eq!(unit("gpu.memory_used_bytes").format(512.0), "512 B");
        assert_eq!(
            unit("gpu.pcie_rx_bytes_per_second").format(12.0 * 1024.0 * 1024.0),
            "12 MiB/s"
        );
        assert_eq!(unit("gpu.sm_clock_mhz").format(1980.0), "1980 MHz");
        assert_eq!(unit("gpu.power_watts").format(250.25), "250 W");
        assert_eq!(unit("gpu.temperature_celsius").format(64.0), "64 °C");
        assert_eq!(unit("agent.coverage").format(0.352), "0.35");
        assert_eq!(unit("x").format(0.0), "0");
        assert_eq!(unit("x").format(2.5e-5), "2.5e-5");
    }

    #[test]
    fn durations_and_shares_read_short() {
        assert_eq!(duration_ns(850), "850 ns");
        assert_eq!(duration_ns(200_000), "200 µs");
        assert_eq!(duration_ns(1_500_000), "1.5 ms");
        assert_eq!(duration_ns(3_600_000_000), "3.6 s");
        assert_eq!(duration_ns(0), "0 ns");
        assert_eq!(percent_of(0.973), "97.3%");
        assert_eq!(percent_of(1.0), "100%");
        assert_eq!(percent_of(0.0041), "0.41%");
    }

    #[test]
    fn precision_follows_the_size() {
        assert_eq!(cores(12.345), "12.3");
        assert_eq!(cores(2.4), "2.40");
        assert_eq!(cores(0.345), "345m");
        assert_eq!(cores(0.00278), "2.8m");
        assert_eq!(cores(0.0000278), "0.028m");
        assert_eq!(cores(2.8e-9), "2.8e-9");
        assert_eq!(cores(0.0), "0");
    }
}
