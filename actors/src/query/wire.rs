//! The binary form of a partition scan and of its result, as query nodes
//! send them to each other (`POST /internal/v1/scan`).
//!
//! ```text
//! "KLNQ" | version u8 (2) | kind u8 (1 scan, 2 partial) | zstd(rkyv)
//! ```
//!
//! rkyv rather than JSON: a partial of a busy hour holds 10⁵ stack counts,
//! which rkyv writes as fixed-size records with no per-field text. A node
//! that reads another version refuses the body, and its caller then scans
//! the partition itself: nodes of two versions side by side during an
//! upgrade answer right, only slower.

use std::collections::HashMap;
use std::io::Read;
use std::sync::Arc;

use kiln_model::{LabelSet, LabelSetId, StackId};
use kiln_storage::{Resolution, Scope, StoreError};

use super::QueryRange;
use super::aggregator::{Latest, Partial, Scan, Source, Tally, Want};

const MAGIC: &[u8; 4] = b"KLNQ";
/// 2: partials carry idle CPU per time step; 3: and stacks per time step,
/// and gauges' last readings; 4: scans say whether to read the hour's
/// rollup.
const VERSION: u8 = 4;
const KIND_SCAN: u8 = 1;
const KIND_PARTIAL: u8 = 2;
const HEADER_LEN: usize = 6;
/// Fast: the bytes cross a data-centre network once.
const ZSTD_LEVEL: i32 = 1;
/// Largest decompressed body read (a partial of ~10⁷ stacks).
const MAX_DECODED_BYTES: usize = 512 * 1024 * 1024;

/// Why bytes are not a scan or a partial.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WireError {
    /// Wrong magic, version or kind.
    #[error("not a kiln {what} of wire version {VERSION}")]
    Header {
        /// What was expected.
        what: &'static str,
    },
    /// The zstd stream is broken.
    #[error("the body does not decompress: {0}")]
    Decompress(#[source] std::io::Error),
    /// The body decompresses to more than we read.
    #[error("the body decompresses to more than {MAX_DECODED_BYTES} bytes")]
    TooLarge,
    /// The archive does not validate.
    #[error("the body is not a valid archive: {0}")]
    Archive(String),
    /// The scan asks for a rollup resolution this node does not know.
    #[error("the scan asks for rollups of {0} hours, which no store keeps")]
    Resolution(u8),
    /// The scan names an invalid tenant or project.
    #[error("the scan's scope is invalid: {0}")]
    Scope(#[from] StoreError),
}

#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
struct WireScan {
    tenant: String,
    project: String,
    from_ns: i64,
    to_ns: i64,
    filters: Vec<(String, String)>,
    timeline: Option<(i64, i64)>,
    label_sets: bool,
    stack_buckets: bool,
    /// 0: the samples; else the hours of the rollup's window (1 or 24).
    rollup: u8,
}

#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
struct WirePartial {
    stacks: Vec<(StackId, u64)>,
    total: (u64, u128),
    buckets: Vec<(i64, u64, u128)>,
    idle_buckets: Vec<(i64, u64, u128)>,
    label_sets: Vec<(LabelSetId, LabelSet, u64)>,
    stack_buckets: Vec<(i64, StackId, u64)>,
    latest: Vec<WireLatest>,
}

/// A gauge's last reading for one label set ([`Latest`]).
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
struct WireLatest {
    labels: LabelSetId,
    at_ns: i64,
    stacks: Vec<(StackId, u64)>,
    samples: u64,
    cpu_ns: u128,
}

/// The bytes of a scan.
pub(crate) fn encode_scan(scan: &Scan) -> Vec<u8> {
    let wire = WireScan {
        tenant: scan.range.scope.tenant().to_owned(),
        project: scan.range.scope.project().to_owned(),
        from_ns: scan.range.from_ns,
        to_ns: scan.range.to_ns,
        filters: scan.range.filters.clone(),
        timeline: scan.want.timeline,
        label_sets: scan.want.label_sets,
        stack_buckets: scan.want.stack_buckets,
        rollup: match scan.source {
            Source::Samples => 0,
            Source::Rollup(resolution) => resolution.code(),
        },
    };
    let archive = rkyv::to_bytes::<rkyv::rancor::Error>(&wire)
        .expect("serializing a scan into memory cannot fail");
    frame(KIND_SCAN, &archive)
}

/// Reads a scan, checking its scope's names.
pub(crate) fn decode_scan(bytes: &[u8]) -> Result<Scan, WireError> {
    let archive = unframe(KIND_SCAN, "scan", bytes)?;
    let wire = rkyv::from_bytes::<WireScan, rkyv::rancor::Error>(&archive)
        .map_err(|e| WireError::Archive(e.to_string()))?;
    Ok(Scan {
        range: QueryRange {
            scope: Scope::new(wire.tenant, wire.project)?,
            from_ns: wire.from_ns,
            to_ns: wire.to_ns,
            filters: wire.filters,
        },
        want: Want {
            timeline: wire.timeline,
            label_sets: wire.label_sets,
            stack_buckets: wire.stack_buckets,
        },
        source: match wire.rollup {
            0 => Source::Samples,
            code => Source::Rollup(
                Resolution::ALL
                    .into_iter()
                    .find(|r| r.code() == code)
                    .ok_or(WireError::Resolution(code))?,
            ),
        },
    })
}

/// The bytes of a scan's result.
pub(crate) fn encode_partial(partial: &Partial) -> Vec<u8> {
    let wire = WirePartial {
        stacks: partial.stacks.iter().map(|(&s, &n)| (s, n)).collect(),
        total: (partial.total.samples, partial.total.cpu_ns),
        buckets: partial
            .buckets
            .iter()
            .map(|(&b, t)| (b, t.samples, t.cpu_ns))
            .collect(),
        idle_buckets: partial
            .idle_buckets
            .iter()
            .map(|(&b, t)| (b, t.samples, t.cpu_ns))
            .collect(),
        label_sets: partial
            .label_sets
            .iter()
            .map(|(&id, (labels, n))| (id, LabelSet::clone(labels), *n))
            .collect(),
        stack_buckets: partial
            .stack_buckets
            .iter()
            .map(|(&(b, s), &n)| (b, s, n))
            .collect(),
        latest: partial
            .latest
            .iter()
            .map(|(&labels, l)| WireLatest {
                labels,
                at_ns: l.at_ns,
                stacks: l.stacks.iter().map(|(&s, &n)| (s, n)).collect(),
                samples: l.total.samples,
                cpu_ns: l.total.cpu_ns,
            })
            .collect(),
    };
    let archive = rkyv::to_bytes::<rkyv::rancor::Error>(&wire)
        .expect("serializing a partial into memory cannot fail");
    frame(KIND_PARTIAL, &archive)
}

/// Reads a scan's result.
pub(crate) fn decode_partial(bytes: &[u8]) -> Result<Partial, WireError> {
    let archive = unframe(KIND_PARTIAL, "partial", bytes)?;
    let wire = rkyv::from_bytes::<WirePartial, rkyv::rancor::Error>(&archive)
        .map_err(|e| WireError::Archive(e.to_string()))?;
    let tally = |samples, cpu_ns| Tally { samples, cpu_ns };
    Ok(Partial {
        stacks: wire.stacks.into_iter().collect(),
        total: tally(wire.total.0, wire.total.1),
        buckets: wire
            .buckets
            .into_iter()
            .map(|(b, samples, cpu_ns)| (b, tally(samples, cpu_ns)))
            .collect(),
        idle_buckets: wire
            .idle_buckets
            .into_iter()
            .map(|(b, samples, cpu_ns)| (b, tally(samples, cpu_ns)))
            .collect(),
        label_sets: wire
            .label_sets
            .into_iter()
            .map(|(id, labels, n)| (id, (Arc::new(labels), n)))
            .collect::<HashMap<_, _>>(),
        stack_buckets: wire
            .stack_buckets
            .into_iter()
            .map(|(b, s, n)| ((b, s), n))
            .collect(),
        latest: wire
            .latest
            .into_iter()
            .map(|l| {
                let latest = Latest {
                    at_ns: l.at_ns,
                    stacks: l.stacks.into_iter().collect(),
                    total: tally(l.samples, l.cpu_ns),
                };
                (l.labels, latest)
            })
            .collect(),
    })
}

fn frame(kind: u8, archive: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + archive.len() / 2);
    out.extend_from_slice(MAGIC);
    out.push(VERSION);
    out.push(kind);
    zstd::stream::copy_encode(archive, &mut out, ZSTD_LEVEL)
        .expect("compressing into memory cannot fail");
    out
}

/// The archive inside a framed body, aligned as rkyv needs it.
fn unframe(
    kind: u8,
    what: &'static str,
    bytes: &[u8],
) -> Result<rkyv::util::AlignedVec<16>, WireError> {
    if bytes.len() < HEADER_LEN || &bytes[..4] != MAGIC || bytes[4] != VERSION || bytes[5] != kind {
        return Err(WireError::Header { what });
    }
    let mut archive = rkyv::util::AlignedVec::<16>::new();
    let mut decoder =
        zstd::stream::Decoder::new(&bytes[HEADER_LEN..]).map_err(WireError::Decompress)?;
    let mut chunk = [0u8; 64 * 1024];
    loop {
        let n = decoder.read(&mut chunk).map_err(WireError::Decompress)?;
        if n == 0 {
            return Ok(archive);
        }
        if archive.len() + n > MAX_DECODED_BYTES {
            return Err(WireError::TooLarge);
        }
        archive.extend_from_slice(&chunk[..n]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan() -> Scan {
        Scan {
            range: QueryRange {
                scope: Scope::new("acme", "web").unwrap(),
                from_ns: -7,
                to_ns: 1 << 40,
                filters: vec![("process".into(), "nginx".into())],
            },
            want: Want {
                timeline: Some((5, 10)),
                label_sets: true,
                stack_buckets: true,
            },
            source: Source::Rollup(Resolution::Day),
        }
    }

    #[test]
    fn scans_round_trip() {
        let back = decode_scan(&encode_scan(&scan())).unwrap();
        assert_eq!(back.range, scan().range);
        assert_eq!(back.want.timeline, Some((5, 10)));
        assert!(back.want.label_sets);
        assert!(back.want.stack_buckets);
        assert_eq!(back.source, Source::Rollup(Resolution::Day));
    }

    #[test]
    fn partials_round_trip() {
        let labels: LabelSet = [("process", "nginx")].into_iter().collect();
        let mut partial = Partial::default();
        partial.stacks.insert(StackId(3), 9);
        partial.stacks.insert(StackId(u128::MAX), 1);
        partial.total = Tally {
            samples: 10,
            cpu_ns: u128::from(u64::MAX) * 3,
        };
        partial.buckets.insert(
            -2,
            Tally {
                samples: 4,
                cpu_ns: 40,
            },
        );
        partial
            .label_sets
            .insert(labels.id(), (Arc::new(labels.clone()), 10));
        partial.stack_buckets.insert((-2, StackId(3)), 4);
        partial.latest.insert(
            labels.id(),
            Latest {
                at_ns: 77,
                stacks: HashMap::from([(StackId(5), 6)]),
                total: Tally {
                    samples: 6,
                    cpu_ns: 0,
                },
            },
        );
        let back = decode_partial(&encode_partial(&partial)).unwrap();
        assert_eq!(back.stacks, partial.stacks);
        assert_eq!(back.total, partial.total);
        assert_eq!(back.buckets, partial.buckets);
        assert_eq!(*back.label_sets[&labels.id()].0, labels);
        assert_eq!(back.label_sets[&labels.id()].1, 10);
        assert_eq!(back.stack_buckets, partial.stack_buckets);
        assert_eq!(back.latest, partial.latest);
    }

    // Guards that a body of the wrong kind, or cut short, is an error and
    // never a partial with wrong numbers.
    #[test]
    fn wrong_or_broken_bodies_are_refused() {
        let scan_bytes = encode_scan(&scan());
        assert!(matches!(
            decode_partial(&scan_bytes),
            Err(WireError::Header { what: "partial" })
        ));
        for n in 0..scan_bytes.len() {
            assert!(
                decode_scan(&scan_bytes[..n]).is_err(),
                "prefix of {n} bytes"
            );
        }
        let mut other_version = scan_bytes.clone();
        other_version[4] = VERSION + 1;
        assert!(decode_scan(&other_version).is_err());
    }

    #[test]
    fn invalid_scopes_are_refused() {
        let wire = WireScan {
            tenant: "../x".into(),
            project: "p".into(),
            from_ns: 0,
            to_ns: 1,
            filters: vec![],
            timeline: None,
            label_sets: false,
            stack_buckets: false,
            rollup: 0,
        };
        let bytes = frame(
            KIND_SCAN,
            &rkyv::to_bytes::<rkyv::rancor::Error>(&wire).unwrap(),
        );
        assert!(matches!(decode_scan(&bytes), Err(WireError::Scope(_))));
    }
}
