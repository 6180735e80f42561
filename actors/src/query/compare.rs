//! Which functions' shares changed between two profiles by more than
//! sampling noise: the statistics behind `GET /api/v1/compare` and the MCP
//! `diff` tool. Pure: it takes each side's functions (every one, as
//! [`super::TopQuery`] gives them without a limit) and returns the
//! changes; nothing here reads a store.
//!
//! A profile is a sample: each of a side's `n` samples lands in a function
//! (its self share) and in every function on its stack (their total
//! shares). Between two sides a function's share moves by chance alone,
//! by about `sqrt(p(1-p)(1/n1 + 1/n2))`, so a 0.3-point move is noise in a
//! profile of 10,000 samples and a real change in one of 10,000,000. Each
//! function's self and total share are tested for a difference:
//!
//! - the two-proportion z-test (pooled) when every expected count of the
//!   2×2 table is at least [`Z_TEST_MIN_EXPECTED`], where the normal
//!   approximation holds;
//! - otherwise the exact binomial test of the function's samples in the
//!   target conditioned on its samples in both sides (`x2 | x1 + x2 ~
//!   Binomial(x1 + x2, n2 / (n1 + n2))`, the test of two Poisson rates,
//!   which sampling profilers are), on the rarer of the function's
//!   samples and the rest so that a share near 100% is tested as the few
//!   samples outside it.
//!
//! Hundreds of functions are tested at once, so some would pass at any
//! fixed p-value by chance: the p-values of all tests (two per function,
//! those with no sample in either side left out, as they cannot differ)
//! are corrected by Benjamini–Hochberg into q-values, and a measure is
//! flagged when its q-value is below the false discovery rate asked
//! ([`Thresholds::fdr`], default 1%) *and* its share moved by at least
//! [`Thresholds::min_change_points`] (default 0.1 points): with millions of
//! samples a 0.01-point move is real yet of no interest.

use std::cmp::Ordering;
use std::collections::HashMap;

use kiln_model::{FrameKind, TopFunction};
use serde::Serialize;
use statrs::distribution::{Binomial, DiscreteCDF};

/// The smallest expected count of every cell of a function's 2×2 table
/// (in it or not, base or target) for the z-test; below it, the exact
/// binomial test.
pub const Z_TEST_MIN_EXPECTED: f64 = 5.0;

/// When a change is flagged.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Thresholds {
    /// The false discovery rate: a measure is significant when its
    /// Benjamini–Hochberg q-value is below it.
    pub fdr: f64,
    /// The smallest change of share, in percentage points, worth flagging.
    pub min_change_points: f64,
}

impl Thresholds {
    /// The defaults: q < 0.01, a change of at least 0.1 points.
    pub const DEFAULT: Thresholds = Thresholds {
        fdr: 0.01,
        min_change_points: 0.1,
    };
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds::DEFAULT
    }
}

/// One function's figures in one side.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct SideFigures {
    /// Samples in the function itself.
    pub self_samples: u64,
    /// Samples with the function on their stack.
    pub total_samples: u64,
    /// `self_samples` over the side's samples (0 to 1).
    pub self_share: f64,
    /// `total_samples` over the side's samples (0 to 1).
    pub total_share: f64,
    /// `self_samples` in cores over the side's range.
    pub self_cores: f64,
    /// `total_samples` in cores over the side's range.
    pub total_cores: f64,
}

/// How one measure (self or total share) of a function moved.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct MeasureChange {
    /// Target share less base share, in percentage points.
    pub change_points: f64,
    /// The test's two-sided p-value.
    pub p: f64,
    /// The Benjamini–Hochberg q-value over every test of the comparison.
    pub q: f64,
    /// Whether `q` is below the false discovery rate and the change at
    /// least the smallest one flagged.
    pub significant: bool,
}

/// Which way a significant change went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Its share grew.
    Grew,
    /// Its share shrank.
    Shrank,
}

/// One function compared.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FunctionChange {
    /// Function name.
    pub name: String,
    /// Binary or module.
    pub module: Option<String>,
    /// Kind of code.
    pub kind: FrameKind,
    /// Its figures in the base.
    pub base: SideFigures,
    /// Its figures in the target.
    pub target: SideFigures,
    /// How its self share moved.
    #[serde(rename = "self")]
    pub self_change: MeasureChange,
    /// How its total share moved.
    #[serde(rename = "total")]
    pub total_change: MeasureChange,
    /// Whether either measure changed significantly.
    pub significant: bool,
    /// Which way, when significant: that of the significant measure that
    /// moved most.
    pub direction: Option<Direction>,
}

impl FunctionChange {
    /// The smallest q-value of its measures.
    pub fn q(&self) -> f64 {
        self.self_change.q.min(self.total_change.q)
    }

    /// The largest move of its measures, in points (signed).
    pub fn largest_change_points(&self) -> f64 {
        let (s, t) = (
            self.self_change.change_points,
            self.total_change.change_points,
        );
        if s.abs() >= t.abs() { s } else { t }
    }
}

/// Every function of two sides compared.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// The base's samples (every stack counts once, at its leaf).
    pub base_samples: u64,
    /// The target's samples.
    pub target_samples: u64,
    /// Tests corrected together (the Benjamini–Hochberg `m`).
    pub tests: usize,
    /// Functions with a significant change.
    pub flagged: usize,
    /// Every function of either side: the significant first, most moved
    /// first, then the rest by q-value.
    pub functions: Vec<FunctionChange>,
}

type Key<'a> = (&'a str, Option<&'a str>, FrameKind);

/// Compares `base` and `target`, each every function of its side (as
/// `TopQuery` gives them with no limit: each side's samples are the sum
/// of its functions' self samples).
pub fn compare(base: &[TopFunction], target: &[TopFunction], thresholds: Thresholds) -> Comparison {
    let sum = |side: &[TopFunction]| {
        side.iter()
            .fold(0u64, |n, f| n.saturating_add(f.self_samples))
    };
    let (n1, n2) = (sum(base), sum(target));
    // Each function's row in base and target.
    let mut rows: Vec<(Option<&TopFunction>, Option<&TopFunction>)> = Vec::new();
    let mut row_of: HashMap<Key<'_>, usize> = HashMap::new();
    for (side, functions) in [(0, base), (1, target)] {
        for f in functions {
            let key = (f.name.as_str(), f.module.as_deref(), f.kind);
            let row = *row_of.entry(key).or_insert_with(|| {
                rows.push((None, None));
                rows.len() - 1
            });
            match side {
                0 => rows[row].0 = Some(f),
                _ => rows[row].1 = Some(f),
            }
        }
    }
    let figures = |f: Option<&TopFunction>, n: u64| {
        f.map_or(SideFigures::default(), |f| SideFigures {
            self_samples: f.self_samples,
            total_samples: f.total_samples,
            self_share: share(f.self_samples, n),
            total_share: share(f.total_samples, n),
            self_cores: f.self_cores,
            total_cores: f.total_cores,
        })
    };
    // Two tests per function: self, then total. `None`: nothing to test.
    let mut p_values: Vec<Option<f64>> = Vec::with_capacity(rows.len() * 2);
    let mut figured = Vec::with_capacity(rows.len());
    for &(b, t) in &rows {
        let (b, t) = (figures(b, n1), figures(t, n2));
        p_values.push(p_value(b.self_samples, n1, t.self_samples, n2));
        p_values.push(p_value(b.total_samples, n1, t.total_samples, n2));
        figured.push((b, t));
    }
    let q_values = benjamini_hochberg(&p_values);
    let tests = p_values.iter().flatten().count();
    let measure = |base_share: f64, target_share: f64, test: usize| {
        let change_points = (target_share - base_share) * 100.0;
        let (p, q) = (p_values[test].unwrap_or(1.0), q_values[test]);
        MeasureChange {
            change_points,
            p,
            q,
            significant: q < thresholds.fdr && change_points.abs() >= thresholds.min_change_points,
        }
    };
    let mut functions: Vec<FunctionChange> = rows
        .iter()
        .zip(figured)
        .enumerate()
        .map(|(i, (&(b, t), (base, target)))| {
            let named = b.or(t).expect("a row has a function in one side at least");
            let self_change = measure(base.self_share, target.self_share, 2 * i);
            let total_change = measure(base.total_share, target.total_share, 2 * i + 1);
            let moved = [self_change, total_change]
                .into_iter()
                .filter(|m| m.significant)
                .max_by(|a, b| a.change_points.abs().total_cmp(&b.change_points.abs()));
            FunctionChange {
                name: named.name.clone(),
                module: named.module.clone(),
                kind: named.kind,
                base,
                target,
                self_change,
                total_change,
                significant: moved.is_some(),
                direction: moved.map(|m| match m.change_points >= 0.0 {
                    true => Direction::Grew,
                    false => Direction::Shrank,
                }),
            }
        })
        .collect();
    functions.sort_by(order);
    Comparison {
        base_samples: n1,
        target_samples: n2,
        tests,
        flagged: functions.iter().filter(|f| f.significant).count(),
        functions,
    }
}

/// Significant first, most moved first; then by q-value, then most moved;
/// then by name, so that the order is the same every time.
fn order(a: &FunctionChange, b: &FunctionChange) -> Ordering {
    let moved = |f: &FunctionChange| f.largest_change_points().abs();
    b.significant
        .cmp(&a.significant)
        .then_with(|| match a.significant {
            true => moved(b).total_cmp(&moved(a)),
            false => a.q().total_cmp(&b.q()),
        })
        .then_with(|| moved(b).total_cmp(&moved(a)))
        .then_with(|| a.name.cmp(&b.name))
}

fn share(count: u64, n: u64) -> f64 {
    match n {
        0 => 0.0,
        n => count as f64 / n as f64,
    }
}

/// The two-sided p-value of "`x1` of `n1` and `x2` of `n2` are draws of
/// one proportion"; `None` when there is nothing to test (an empty side,
/// or no sample in either).
pub fn p_value(x1: u64, n1: u64, x2: u64, n2: u64) -> Option<f64> {
    // Counts past a side's samples (a saturated sum) are read as all of it.
    let (x1, x2) = (x1.min(n1), x2.min(n2));
    if n1 == 0 || n2 == 0 || x1.saturating_add(x2) == 0 {
        return None;
    }
    let (a, b, x, y) = (n1 as f64, n2 as f64, x1 as f64, x2 as f64);
    let pooled = (x + y) / (a + b);
    let expected = [
        a * pooled,
        a * (1.0 - pooled),
        b * pooled,
        b * (1.0 - pooled),
    ];
    if expected.iter().all(|&e| e >= Z_TEST_MIN_EXPECTED) {
        let se = (pooled * (1.0 - pooled) * (1.0 / a + 1.0 / b)).sqrt();
        let z = (y / b - x / a) / se;
        return Some(statrs::function::erf::erfc(z.abs() / std::f64::consts::SQRT_2).min(1.0));
    }
    // The rarer of "in it" and "not in it", whose counts are small here.
    let (x1, x2) = match pooled > 0.5 {
        true => (n1 - x1, n2 - x2),
        false => (x1, x2),
    };
    // Every sample of both sides in it: nothing can differ.
    if x1 + x2 == 0 {
        return None;
    }
    Some(conditional_binomial(x1, n1, x2, n2))
}

/// The exact two-sided test of `x2` given `x1 + x2` samples in both sides,
/// of which a side gets its share of all samples: twice the smaller tail,
/// at most 1.
fn conditional_binomial(x1: u64, n1: u64, x2: u64, n2: u64) -> f64 {
    let k = x1 + x2;
    let p = n2 as f64 / (n1 as f64 + n2 as f64);
    let Ok(binomial) = Binomial::new(p, k) else {
        return 1.0;
    };
    let lower = binomial.cdf(x2);
    let upper = match x2 {
        0 => 1.0,
        x => binomial.sf(x - 1),
    };
    (2.0 * lower.min(upper)).min(1.0)
}

/// Benjamini–Hochberg q-values of `p` (`None`, no test: q 1, and not
/// counted in `m`): `q(i) = min over j ranked at or after i of m p(j) /
/// rank(j)`, at most 1.
pub fn benjamini_hochberg(p: &[Option<f64>]) -> Vec<f64> {
    let mut ranked: Vec<(usize, f64)> = p
        .iter()
        .enumerate()
        .filter_map(|(i, p)| p.map(|p| (i, p)))
        .collect();
    ranked.sort_by(|a, b| a.1.total_cmp(&b.1));
    let m = ranked.len() as f64;
    let mut q = vec![1.0; p.len()];
    let mut running = 1.0f64;
    for (rank, &(i, p)) in ranked.iter().enumerate().rev() {
        running = running.min(p * m / (rank + 1) as f64);
        q[i] = running.min(1.0);
    }
    q
}

#[cfg(test)]
mod tests;
