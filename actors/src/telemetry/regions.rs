//! Requests forwarded to other regions.

use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::{Registry, Unit};

use super::{ForwardLabels, HistogramFamily, RegionLabels, query_histogram};

/// Requests forwarded to their key's home region (`http/region.rs`).
#[derive(Debug, Clone)]
pub struct RegionMetrics {
    forwarded: Family<ForwardLabels, Counter>,
    seconds: HistogramFamily<RegionLabels>,
}

impl Default for RegionMetrics {
    fn default() -> Self {
        RegionMetrics {
            forwarded: Family::default(),
            seconds: HistogramFamily::<RegionLabels>::new_with_constructor(query_histogram),
        }
    }
}

/// How a forwarded request ended: the `outcome` label of
/// `kiln_region_forwarded_requests_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forwarded {
    /// The home region answered (whatever its status).
    Answered,
    /// The home region could not be reached (503 here).
    Unreachable,
    /// Not forwarded: a region this one does not know, or a request
    /// forwarded already (421).
    Misdirected,
}

impl RegionMetrics {
    pub(super) fn register(&self, registry: &mut Registry) {
        registry.register(
            "region_forwarded_requests",
            "Requests with another region's key sent to that region, by region and outcome: \
             answered, unreachable (503 here), misdirected (421: an unknown region, or \
             forwarded already)",
            self.forwarded.clone(),
        );
        registry.register_with_unit(
            "region_forward",
            "Time from taking a request with another region's key to handing back that \
             region's answer, body included, by region",
            Unit::Seconds,
            self.seconds.clone(),
        );
    }

    /// Counts a request for `region` that ended as `outcome`, and how long
    /// an answered one took.
    pub fn forwarded(&self, region: &str, outcome: Forwarded, took: Duration) {
        let label = match outcome {
            Forwarded::Answered => "answered",
            Forwarded::Unreachable => "unreachable",
            Forwarded::Misdirected => "misdirected",
        };
        self.forwarded
            .get_or_create(&ForwardLabels {
                region: region.to_owned(),
                outcome: label,
            })
            .inc();
        if outcome == Forwarded::Answered {
            self.seconds
                .get_or_create(&RegionLabels {
                    region: region.to_owned(),
                })
                .observe(took.as_secs_f64());
        }
    }
}
