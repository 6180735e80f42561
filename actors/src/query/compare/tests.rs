//! The statistics on known values, and on synthetic profiles drawn with a
//! seeded RNG: 300 leaf functions under 10 callers under `main`, 100,000
//! samples a side (multinomial, as a sampling profiler draws them).
//!
//! Why 100,000: one function going from 5% to 7% of the samples moves by
//! 2 points against a noise of `sqrt(0.06 · 0.94 · 2 / 100,000)` = 0.106
//! points, a z of about 19; the corrected threshold for the first of
//! ~620 tests at q < 0.01 is a p of 1.6e-5, a z of 4.3, which a 2-point
//! move reaches from about 12,000 samples a side on. A profile of a
//! minute of one busy core at 100 Hz has 6,000; of an hour of a fleet,
//! millions.

use rand::SeedableRng;
use rand::rngs::StdRng;
use rand_distr::{Binomial, Distribution};

use super::*;

const LEAVES: usize = 300;
const CALLERS: usize = 10;
const SAMPLES: u64 = 100_000;
/// The leaf that grows, and its share before and after.
const GROWN: usize = 7;
const GROWN_FROM: f64 = 0.05;
const GROWN_TO: f64 = 0.07;

fn leaf(i: usize) -> String {
    format!("leaf_{i:03}")
}

fn caller(i: usize) -> String {
    format!("caller_{}", i % CALLERS)
}

/// Leaf probabilities: Zipf-like (1/(i+1)^0.8), with leaf [`GROWN`] at
/// `grown_share` and the others scaled to fill the rest.
fn leaf_shares(grown_share: f64) -> Vec<f64> {
    let weights: Vec<f64> = (0..LEAVES)
        .map(|i| match i {
            GROWN => 0.0,
            _ => 1.0 / ((i + 1) as f64).powf(0.8),
        })
        .collect();
    let rest: f64 = weights.iter().sum();
    weights
        .iter()
        .enumerate()
        .map(|(i, w)| match i {
            GROWN => grown_share,
            _ => w / rest * (1.0 - grown_share),
        })
        .collect()
}

/// The functions of a profile of `n` samples drawn from `shares` (a
/// multinomial, drawn as a chain of binomials), as `TopQuery` gives
/// them: each leaf with its self and total, each caller and `main` with
/// their totals; functions with no sample left out.
fn profile(shares: &[f64], n: u64, rng: &mut StdRng) -> Vec<TopFunction> {
    let mut left = n;
    let mut left_share = 1.0;
    let mut counts = Vec::with_capacity(shares.len());
    for &p in shares {
        let draw = match left {
            0 => 0,
            _ => Binomial::new(left, (p / left_share).clamp(0.0, 1.0))
                .unwrap()
                .sample(rng),
        };
        counts.push(draw);
        left -= draw;
        left_share -= p;
    }
    let function = |name: String, self_samples, total_samples| TopFunction {
        name,
        module: None,
        kind: FrameKind::Native,
        self_samples,
        total_samples,
        self_cores: 0.0,
        total_cores: 0.0,
    };
    let mut callers = [0u64; CALLERS];
    let mut out = Vec::new();
    for (i, &count) in counts.iter().enumerate() {
        callers[i % CALLERS] += count;
        if count > 0 {
            out.push(function(leaf(i), count, count));
        }
    }
    for (i, &count) in callers.iter().enumerate() {
        if count > 0 {
            out.push(function(caller(i), 0, count));
        }
    }
    out.push(function("main".into(), 0, counts.iter().sum()));
    out
}

/// Each function's true self and total share under `shares`.
fn true_shares(shares: &[f64]) -> HashMap<String, (f64, f64)> {
    let mut out = HashMap::new();
    let mut callers = [0.0; CALLERS];
    for (i, &p) in shares.iter().enumerate() {
        out.insert(leaf(i), (p, p));
        callers[i % CALLERS] += p;
    }
    for (i, &p) in callers.iter().enumerate() {
        out.insert(caller(i), (0.0, p));
    }
    out.insert("main".into(), (0.0, 1.0));
    out
}

/// The grown leaf is flagged in every one of 20 comparisons; what else
/// is flagged truly changed (the grown leaf's caller grew with it, every
/// other share shrank by 2.1% of itself to make room) but for a false
/// discovery now and then, as a false discovery rate of 1% allows.
#[test]
fn a_two_point_growth_among_300_functions_is_flagged() {
    let (before, after) = (leaf_shares(GROWN_FROM), leaf_shares(GROWN_TO));
    let (truth_before, truth_after) = (true_shares(&before), true_shares(&after));
    let (mut flagged, mut false_flags) = (0, Vec::new());
    for seed in 0..20 {
        let mut rng = StdRng::seed_from_u64(seed);
        let base = profile(&before, SAMPLES, &mut rng);
        let target = profile(&after, SAMPLES, &mut rng);
        let comparison = compare(&base, &target, Thresholds::DEFAULT);
        let grown = comparison.functions.iter().find(|f| f.name == leaf(GROWN));
        let grown = grown.expect("the grown leaf is in both sides");
        assert!(
            grown.self_change.significant && grown.self_change.q < 1e-20,
            "seed {seed}: {grown:?}"
        );
        assert_eq!(grown.direction, Some(Direction::Grew));
        assert!(
            (grown.self_change.change_points - 2.0).abs() < 0.5,
            "seed {seed}: {grown:?}"
        );
        for f in comparison.functions.iter().filter(|f| f.significant) {
            flagged += 1;
            let (b, a) = (truth_before[&f.name], truth_after[&f.name]);
            let moved = ((a.0 - b.0).abs()).max((a.1 - b.1).abs()) * 100.0;
            if moved < 0.1 {
                false_flags.push((seed, f.name.clone(), moved));
            }
        }
    }
    println!("growth: {flagged} flagged in 20 trials, false: {false_flags:?}");
    assert!(false_flags.len() <= 2, "{false_flags:?}");
}

/// The default threshold's false flags: 100 comparisons of two profiles
/// drawn from the same shares (about 620 tests each).
#[test]
fn noise_alone_is_flagged_at_most_5_times_in_100_trials() {
    let shares = leaf_shares(GROWN_FROM);
    let mut flagged = 0;
    let mut tests = 0;
    for seed in 0..100 {
        let mut rng = StdRng::seed_from_u64(1_000 + seed);
        let base = profile(&shares, SAMPLES, &mut rng);
        let target = profile(&shares, SAMPLES, &mut rng);
        let comparison = compare(&base, &target, Thresholds::DEFAULT);
        flagged += comparison.flagged;
        tests += comparison.tests;
    }
    println!("noise only: {flagged} functions flagged in 100 trials ({tests} tests)");
    assert!(flagged <= 5, "{flagged} false flags");
}

#[test]
fn p_values_of_known_tables() {
    // z-test: 5% against 7% of 10,000 each, z = 5.95.
    let p = p_value(500, 10_000, 700, 10_000).unwrap();
    assert!((2.0e-9..3.5e-9).contains(&p), "{p}");
    // Equal shares: p = 1.
    assert_eq!(p_value(500, 10_000, 1_000, 20_000), Some(1.0));
    // Exact: 0 then 3 of equal sides, P(X >= 3 | 3, 1/2) = 1/8, doubled.
    let close = |p: Option<f64>, expected: f64| {
        let p = p.unwrap();
        assert!((p - expected).abs() < 1e-12, "{p} against {expected}");
    };
    close(p_value(0, 1_000, 3, 1_000), 0.25);
    close(p_value(0, 1_000, 8, 1_000), 2.0 / 256.0);
    // Nothing to test: no sample, an empty side, every sample.
    assert_eq!(p_value(0, 1_000, 0, 1_000), None);
    assert_eq!(p_value(5, 0, 3, 1_000), None);
    assert_eq!(p_value(1_000, 1_000, 40, 40), None);
    // Near 100%: tested as the samples outside it (3 against 0).
    close(p_value(997, 1_000, 1_000, 1_000), 0.25);
}

#[test]
fn benjamini_hochberg_of_known_values() {
    let q = benjamini_hochberg(&[Some(0.01), Some(0.04), None, Some(0.03), Some(0.005)]);
    assert_eq!(q, [0.02, 0.04, 1.0, 0.04, 0.02]);
    assert!(benjamini_hochberg(&[]).is_empty());
}

/// A function only one side has is compared against zero; sides' samples
/// are the sums of their functions' self samples.
#[test]
fn functions_of_one_side_and_totals() {
    let f = |name: &str, self_samples, total_samples| TopFunction {
        name: name.into(),
        module: None,
        kind: FrameKind::Native,
        self_samples,
        total_samples,
        self_cores: 0.0,
        total_cores: 0.0,
    };
    let base = [f("main", 0, 1_000), f("old", 1_000, 1_000)];
    let target = [f("main", 0, 1_000), f("new", 600, 600), f("old", 400, 400)];
    let c = compare(&base, &target, Thresholds::DEFAULT);
    assert_eq!((c.base_samples, c.target_samples), (1_000, 1_000));
    let names: Vec<&str> = c.functions.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["new", "old", "main"]);
    assert_eq!(c.functions[0].direction, Some(Direction::Grew));
    assert_eq!(c.functions[0].base, SideFigures::default());
    assert_eq!(c.functions[1].direction, Some(Direction::Shrank));
    assert!((c.functions[1].self_change.change_points + 60.0).abs() < 1e-9);
    assert!(!c.functions[2].significant);
    // main's total is all of both sides: no test. Four tests: new and
    // old, self and total.
    assert_eq!(c.tests, 4);
}
