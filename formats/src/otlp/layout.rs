//! opentelemetry-proto 1.9.0's `Sample` numbering, read by rewriting it
//! into 1.10.0's.
//!
//! 1.10.0 renumbered three fields of `Sample` (values 2 → 4,
//! attribute_indices 3 → 2, link_index 4 → 3) and nothing else Kiln
//! reads. Every tag involved is one byte, so a 1.9.0 request becomes a
//! 1.10.0 one by rewriting one byte per field, inside samples only: no
//! length changes anywhere, and the crate's types decode the result.

use crate::wire::{Value, offset_in, walk};

/// 1.9.0 tag byte → 1.10.0 tag byte (field number << 3 | wire type).
const UPGRADE: [(u8, u8); 5] = [
    (0x12, 0x22), // values, packed: 2 → 4
    (0x10, 0x20), // values, one unpacked: 2 → 4
    (0x1a, 0x12), // attribute_indices, packed: 3 → 2
    (0x18, 0x10), // attribute_indices, one unpacked: 3 → 2
    (0x20, 0x18), // link_index: 4 → 3
];

/// A copy of the request `bytes` with every sample's 1.9.0 tags rewritten
/// to 1.10.0's. Malformed bytes are left as they are (prost names them).
pub(crate) fn upgrade_v1_9(bytes: &[u8]) -> Vec<u8> {
    rewrite(bytes, &UPGRADE)
}

/// The inverse of [`upgrade_v1_9`]: a 1.10.0 request in 1.9.0's layout,
/// as older senders write it. For tests and fuzz seeds.
pub fn downgrade_to_v1_9(bytes: &[u8]) -> Vec<u8> {
    let inverse = UPGRADE.map(|(old, new)| (new, old));
    rewrite(bytes, &inverse)
}

fn rewrite(bytes: &[u8], table: &[(u8, u8)]) -> Vec<u8> {
    let mut out = bytes.to_vec();
    let _ = each_sample(bytes, &mut |sample| {
        let base = offset_in(bytes, sample);
        walk::<()>(sample, |f| {
            let at = base + f.key_at;
            if let Some(&(_, new)) = table.iter().find(|(old, _)| *old == bytes[at]) {
                out[at] = new;
            }
            Ok(())
        })
        .map(drop)
    });
    out
}

/// Calls `visit` with the bytes of every `Sample` of the request
/// (`resource_profiles[*].scope_profiles[*].profiles[*].samples[*]`).
fn each_sample<'a>(
    request: &'a [u8],
    visit: &mut impl FnMut(&'a [u8]) -> Result<(), ()>,
) -> Result<bool, ()> {
    let nested =
        |bytes: &'a [u8], number: u64, visit: &mut dyn FnMut(&'a [u8]) -> Result<(), ()>| {
            walk(bytes, |f| match (f.number, f.value) {
                (n, Value::Bytes(inner)) if n == number => visit(inner),
                _ => Ok(()),
            })
            .map(drop)
        };
    walk(request, |f| match (f.number, f.value) {
        (1, Value::Bytes(resource)) => nested(resource, 2, &mut |scope| {
            nested(scope, 2, &mut |profile| nested(profile, 2, &mut *visit))
        }),
        _ => Ok(()),
    })
}

#[cfg(test)]
mod tests {
    use opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceRequest;
    use opentelemetry_proto::tonic::profiles::v1development::{
        Profile, ResourceProfiles, Sample, ScopeProfiles,
    };
    use prost::Message;

    use super::*;

    fn request(sample: Sample) -> ExportProfilesServiceRequest {
        ExportProfilesServiceRequest {
            resource_profiles: vec![ResourceProfiles {
                scope_profiles: vec![ScopeProfiles {
                    profiles: vec![Profile {
                        samples: vec![sample],
                        ..Profile::default()
                    }],
                    ..ScopeProfiles::default()
                }],
                ..ResourceProfiles::default()
            }],
            dictionary: None,
        }
    }

    /// The design's example: `Sample { stack_index: 1, attribute_indices:
    /// [3], values: [7] }` is `08 01 12 01 03 22 01 07` in 1.10.0, and in
    /// 1.9.0 `08 01 1a 01 03 12 01 07`.
    #[test]
    fn samples_are_rewritten_tag_by_tag() {
        let sample = Sample {
            stack_index: 1,
            attribute_indices: vec![3],
            link_index: 2,
            values: vec![7],
            timestamps_unix_nano: vec![9],
        };
        let bytes = request(sample.clone()).encode_to_vec();
        let old = downgrade_to_v1_9(&bytes);
        assert_eq!(old.len(), bytes.len());
        let sample_bytes = sample.encode_to_vec();
        assert_eq!(
            &sample_bytes[..8],
            [0x08, 0x01, 0x12, 0x01, 0x03, 0x18, 0x02, 0x22]
        );
        let at = bytes
            .windows(8)
            .position(|w| w == &sample_bytes[..8])
            .unwrap();
        assert_eq!(
            &old[at..at + 8],
            [0x08, 0x01, 0x1a, 0x01, 0x03, 0x20, 0x02, 0x12]
        );
        assert_eq!(upgrade_v1_9(&old), bytes);
    }
}
