//! Printing benchmark results: one aligned line per figure, and a
//! machine-readable JSON line at the end.

use std::time::Duration;

/// Collects named figures.
#[derive(Debug, Default)]
pub struct Report {
    rows: Vec<(String, f64, &'static str)>,
}

impl Report {
    /// Records and prints one figure.
    pub fn add(&mut self, name: impl Into<String>, value: f64, unit: &'static str) {
        let name = name.into();
        println!("  {name:<44} {value:>16.3} {unit}");
        self.rows.push((name, value, unit));
    }

    /// Records a duration in milliseconds.
    pub fn time(&mut self, name: impl Into<String>, d: Duration) {
        self.add(name, d.as_secs_f64() * 1e3, "ms");
    }

    /// Prints the figures as one JSON object (for scripts comparing runs).
    pub fn finish(self, bench: &str) {
        let fields: Vec<String> = self
            .rows
            .iter()
            .map(|(name, value, unit)| format!("\"{name} ({unit})\":{value}"))
            .collect();
        println!("RESULT {{\"bench\":\"{bench}\",{}}}", fields.join(","));
    }
}

/// The `p`th percentile of `sorted` (ascending), nearest rank; zero when
/// empty.
pub fn percentile(sorted: &[Duration], p: usize) -> Duration {
    let i = (sorted.len() * p / 100).min(sorted.len().saturating_sub(1));
    sorted.get(i).copied().unwrap_or_default()
}
