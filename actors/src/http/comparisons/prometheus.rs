//! Saved comparisons' results as Prometheus text, for a tenant's
//! Prometheus to scrape with its key and alert on
//! (`GET /api/v1/comparisons/metrics`). A registry is built per scrape
//! from results computed then: nothing is kept between scrapes.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

use crate::http::compare::CompareAnswer;
use crate::query::compare::Direction;
use crate::telemetry::PREFIX;

/// A comparison's series are labelled with its name.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ComparisonLabels {
    comparison: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ChangeLabels {
    comparison: String,
    direction: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SideLabels {
    comparison: String,
    side: &'static str,
}

type PointsGauge = Gauge<f64, AtomicU64>;

/// What one saved comparison gave at this scrape: its answer, or `None`
/// when it could not run (its saved range is now refused, say).
pub(crate) struct Outcome<'a> {
    /// The comparison's name.
    pub name: &'a str,
    /// Its answer, when it ran.
    pub answer: Option<&'a CompareAnswer>,
}

/// The Prometheus text of `outcomes`:
/// - `kiln_comparison_ok`: 1 when it ran, 0 when it failed (its other
///   series are then absent, so an alert on them does not fire on an
///   error, and one on `ok == 0` can);
/// - `kiln_comparison_flagged_functions`: functions that changed
///   significantly;
/// - `kiln_comparison_largest_change_points{direction="grew"|"shrank"}`:
///   the largest move, in points of share (self or total, as a positive
///   number), of a flagged function that went that way; 0 when none did;
/// - `kiln_comparison_samples{side="base"|"target"}`: each side's
///   samples, so that an empty side (nothing deployed yet) can be told
///   from no change.
pub(crate) fn encode(outcomes: &[Outcome<'_>]) -> Result<String, std::fmt::Error> {
    let ok = Family::<ComparisonLabels, Gauge>::default();
    let flagged = Family::<ComparisonLabels, Gauge>::default();
    let largest = Family::<ChangeLabels, PointsGauge>::default();
    let samples = Family::<SideLabels, Gauge>::default();
    for outcome in outcomes {
        let comparison = outcome.name.to_owned();
        let labels = ComparisonLabels {
            comparison: comparison.clone(),
        };
        let Some(answer) = outcome.answer else {
            ok.get_or_create(&labels).set(0);
            continue;
        };
        ok.get_or_create(&labels).set(1);
        flagged
            .get_or_create(&labels)
            .set(i64::try_from(answer.flagged).unwrap_or(i64::MAX));
        for (direction, label) in [(Direction::Grew, "grew"), (Direction::Shrank, "shrank")] {
            let points = answer
                .functions
                .iter()
                .filter(|f| f.significant && f.direction == Some(direction))
                .map(|f| f.largest_change_points().abs())
                .fold(0.0, f64::max);
            largest
                .get_or_create(&ChangeLabels {
                    comparison: comparison.clone(),
                    direction: label,
                })
                .set(points);
        }
        for (side, label) in [(&answer.base, "base"), (&answer.target, "target")] {
            samples
                .get_or_create(&SideLabels {
                    comparison: comparison.clone(),
                    side: label,
                })
                .set(i64::try_from(side.samples).unwrap_or(i64::MAX));
        }
    }
    let mut registry = Registry::with_prefix(PREFIX);
    registry.register(
        "comparison_ok",
        "Whether the saved comparison ran at this scrape (1) or failed (0)",
        ok,
    );
    registry.register(
        "comparison_flagged_functions",
        "Functions whose share changed significantly between base and target",
        flagged,
    );
    registry.register(
        "comparison_largest_change_points",
        "Largest move, in points of share, of a flagged function that grew or shrank",
        largest,
    );
    registry.register(
        "comparison_samples",
        "Samples of each side of the saved comparison",
        samples,
    );
    let mut text = String::new();
    prometheus_client::encoding::prometheus_text::encode(&mut text, &registry)?;
    Ok(text)
}
