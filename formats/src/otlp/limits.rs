//! How much of an OTLP request one conversion decodes, counted on the raw
//! protobuf before anything is built, and which `Sample` layout it uses.
//!
//! Decoding costs far more memory than the encoded bytes (an empty
//! `Sample` is 2 bytes on the wire and ~100 decoded, a packed index 1 byte
//! and 4), so [`check`] walks the wire format first, allocating nothing,
//! and refuses a request past any limit by name before prost decodes a
//! byte of it. Each limit is far above real requests: a busy 64-core host
//! sends a few thousand samples per 5 s report, and a collector's batch of
//! hundreds of hosts stays well below. With the 64 MiB body limit they
//! bound a decoded request to a few hundred MiB at worst.

use super::error::OtlpError;
use crate::wire::{Field, Value, fixed64s, scalars, walk};

/// Most `resource_profiles`.
pub(crate) const MAX_RESOURCES: usize = 1 << 14;
/// Most attributes of one resource, and of one scope.
pub(crate) const MAX_OWN_ATTRIBUTES: usize = 1024;
/// Deepest nesting of attribute values (arrays, key-value lists): deeper
/// values are no labels anyway.
pub(crate) const MAX_VALUE_DEPTH: usize = 8;
/// Most attribute values in the whole request, nested ones included.
pub(crate) const MAX_VALUES: usize = 1 << 22;
/// Most profiles, over all scopes.
pub(crate) const MAX_PROFILES: usize = 1 << 16;
/// Most samples, over all profiles.
pub(crate) const MAX_SAMPLES: usize = 1 << 20;
/// Most values, timestamps and attribute indices, over all samples.
pub(crate) const MAX_SAMPLE_SCALARS: usize = 1 << 23;
/// Most mappings.
pub(crate) const MAX_MAPPINGS: usize = 1 << 16;
/// Most locations, functions and stacks, each.
pub(crate) const MAX_TABLE: usize = 1 << 20;
/// Most lines in one location: no stack holds more frames.
pub(crate) const MAX_LOCATION_LINES: usize = kiln_model::MAX_STACK_DEPTH;
/// Most lines over all locations: each becomes a frame.
pub(crate) const MAX_LINES: usize = 1 << 22;
/// Most location indices over all stacks.
pub(crate) const MAX_STACK_LOCATIONS: usize = 1 << 23;
/// Most entries of the attribute table, and of the link table.
pub(crate) const MAX_ATTRIBUTE_TABLE: usize = 1 << 20;
/// Most attribute indices of locations, mappings and profiles together.
pub(crate) const MAX_OTHER_ATTRIBUTE_INDICES: usize = 1 << 22;
/// Most strings in the string table.
pub(crate) const MAX_STRINGS: usize = 1 << 21;
/// Most bytes of frame names and labels one request converts to (each
/// location's frames are made once, each profile's label sets once): a
/// 4 KiB name shared by a million lines would otherwise become 4 GiB.
pub(crate) const MAX_CONVERTED_BYTES: usize = 96 << 20;

/// The `Sample` field numbering a request uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Layout {
    /// opentelemetry-proto 1.10.0 and later: `attribute_indices` 2,
    /// `link_index` 3, `values` 4.
    #[default]
    V1_10,
    /// opentelemetry-proto 1.9.0: `values` 2, `attribute_indices` 3,
    /// `link_index` 4 (pdata ≤ v1.53.0, the eBPF profiler ≤ v0.0.202610).
    V1_9,
}

/// What decoding a request would build, as far as [`check`] counted.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Counts {
    pub resources: usize,
    pub values: usize,
    pub profiles: usize,
    pub samples: usize,
    pub sample_scalars: usize,
    pub mappings: usize,
    pub locations: usize,
    pub functions: usize,
    pub stacks: usize,
    pub lines: usize,
    pub stack_locations: usize,
    pub attributes: usize,
    pub links: usize,
    pub other_attribute_indices: usize,
    pub strings: usize,
    /// A sample with packed field 3 (1.9.0's `attribute_indices`).
    seen_packed_3: bool,
    /// A sample with packed field 4 (1.10.0's `values`).
    seen_packed_4: bool,
}

impl Counts {
    /// The layout the samples' tags tell (see [`check`]).
    pub(crate) fn layout(&self) -> Layout {
        if self.seen_packed_3 && !self.seen_packed_4 {
            Layout::V1_9
        } else {
            Layout::V1_10
        }
    }
}

/// Counts what decoding `bytes` as an `ExportProfilesServiceRequest`
/// would build, refusing the request as soon as a count passes its limit,
/// and tells its layout. Malformed bytes end the count without an error:
/// prost's decode then names the problem.
///
/// Every encoder packs repeated scalars (proto3's default), so a packed
/// field 3 in a sample can only be 1.9.0's `attribute_indices` (1.10.0's
/// field 3 is the varint `link_index`), and a packed field 4 only
/// 1.10.0's `values`. Both in one request is refused; neither is 1.10.0
/// (a 1.9.0 request without sample attributes cannot be told apart).
pub(crate) fn check(bytes: &[u8]) -> Result<Counts, OtlpError> {
    let mut c = Counts::default();
    walk(bytes, |f| match (f.number, f.value) {
        (1, Value::Bytes(resource)) => {
            bump(&mut c.resources, MAX_RESOURCES, "resourceProfiles")?;
            resource_profiles(resource, &mut c)
        }
        (2, Value::Bytes(dictionary)) => self::dictionary(dictionary, &mut c),
        _ => Ok(()),
    })?;
    if c.seen_packed_3 && c.seen_packed_4 {
        return Err(OtlpError::MixedLayouts);
    }
    Ok(c)
}

fn resource_profiles(bytes: &[u8], c: &mut Counts) -> Result<(), OtlpError> {
    walk(bytes, |f| match (f.number, f.value) {
        // Resource: attributes 1.
        (1, Value::Bytes(resource)) => own_attributes(resource, 1, c),
        (2, Value::Bytes(scope_profiles)) => walk(scope_profiles, |f| match (f.number, f.value) {
            // InstrumentationScope: attributes 3.
            (1, Value::Bytes(scope)) => own_attributes(scope, 3, c),
            (2, Value::Bytes(profile)) => {
                bump(&mut c.profiles, MAX_PROFILES, "profiles")?;
                self::profile(profile, c)
            }
            _ => Ok(()),
        })
        .map(drop),
        _ => Ok(()),
    })
    .map(drop)
}

/// The `KeyValue` attributes, field `field`, of a resource or scope.
fn own_attributes(bytes: &[u8], field: u64, c: &mut Counts) -> Result<(), OtlpError> {
    let mut n = 0;
    walk(bytes, |f| match (f.number, f.value) {
        (number, Value::Bytes(key_value)) if number == field => {
            bump(
                &mut n,
                MAX_OWN_ATTRIBUTES,
                "attributes in one resource or scope",
            )?;
            key_value_value(key_value, 1, c)
        }
        _ => Ok(()),
    })
    .map(drop)
}

/// The value (field 2) of a `KeyValue` or `KeyValueAndUnit` at `depth`.
fn key_value_value(bytes: &[u8], depth: usize, c: &mut Counts) -> Result<(), OtlpError> {
    walk(bytes, |f| match (f.number, f.value) {
        (2, Value::Bytes(any)) => any_value(any, depth, c),
        _ => Ok(()),
    })
    .map(drop)
}

fn any_value(bytes: &[u8], depth: usize, c: &mut Counts) -> Result<(), OtlpError> {
    if depth > MAX_VALUE_DEPTH {
        return Err(OtlpError::TooDeep {
            limit: MAX_VALUE_DEPTH,
        });
    }
    bump(&mut c.values, MAX_VALUES, "attribute values")?;
    walk(bytes, |f| match (f.number, f.value) {
        // ArrayValue: values 1 (AnyValue).
        (5, Value::Bytes(array)) => walk(array, |f| match (f.number, f.value) {
            (1, Value::Bytes(any)) => any_value(any, depth + 1, c),
            _ => Ok(()),
        })
        .map(drop),
        // KeyValueList: values 1 (KeyValue).
        (6, Value::Bytes(list)) => walk(list, |f| match (f.number, f.value) {
            (1, Value::Bytes(kv)) => key_value_value(kv, depth + 1, c),
            _ => Ok(()),
        })
        .map(drop),
        _ => Ok(()),
    })
    .map(drop)
}

fn profile(bytes: &[u8], c: &mut Counts) -> Result<(), OtlpError> {
    walk(bytes, |f| match (f.number, f.value) {
        (2, Value::Bytes(sample)) => {
            bump(&mut c.samples, MAX_SAMPLES, "samples")?;
            self::sample(sample, c)
        }
        (11, value) => other_indices(value, c),
        _ => Ok(()),
    })
    .map(drop)
}

fn sample(bytes: &[u8], c: &mut Counts) -> Result<(), OtlpError> {
    walk(bytes, |Field { number, value, .. }| {
        let n = match (number, value) {
            (3, Value::Bytes(_)) => {
                c.seen_packed_3 = true;
                scalars(value)
            }
            (4, Value::Bytes(_)) => {
                c.seen_packed_4 = true;
                scalars(value)
            }
            (2 | 4, _) => scalars(value),
            (5, _) => fixed64s(value),
            _ => 0,
        };
        add(
            &mut c.sample_scalars,
            n,
            MAX_SAMPLE_SCALARS,
            "values, timestamps and attribute indices in samples",
        )
    })
    .map(drop)
}

fn dictionary(bytes: &[u8], c: &mut Counts) -> Result<(), OtlpError> {
    walk(bytes, |f| match (f.number, f.value) {
        (1, Value::Bytes(mapping)) => {
            bump(&mut c.mappings, MAX_MAPPINGS, "mappings")?;
            walk(mapping, |f| match f.number {
                5 => other_indices(f.value, c),
                _ => Ok(()),
            })
            .map(drop)
        }
        (2, Value::Bytes(location)) => {
            let index = c.locations;
            bump(&mut c.locations, MAX_TABLE, "locations")?;
            self::location(index, location, c)
        }
        (3, Value::Bytes(_)) => bump(&mut c.functions, MAX_TABLE, "functions"),
        (4, Value::Bytes(_)) => bump(&mut c.links, MAX_ATTRIBUTE_TABLE, "links"),
        (5, Value::Bytes(_)) => bump(&mut c.strings, MAX_STRINGS, "strings"),
        (6, Value::Bytes(attribute)) => {
            bump(
                &mut c.attributes,
                MAX_ATTRIBUTE_TABLE,
                "attributes in the attribute table",
            )?;
            key_value_value(attribute, 1, c)
        }
        (7, Value::Bytes(stack)) => {
            bump(&mut c.stacks, MAX_TABLE, "stacks")?;
            walk(stack, |f| match f.number {
                1 => add(
                    &mut c.stack_locations,
                    scalars(f.value),
                    MAX_STACK_LOCATIONS,
                    "location indices in stacks",
                ),
                _ => Ok(()),
            })
            .map(drop)
        }
        _ => Ok(()),
    })
    .map(drop)
}

fn location(index: usize, bytes: &[u8], c: &mut Counts) -> Result<(), OtlpError> {
    let mut lines = 0usize;
    walk(bytes, |f| match (f.number, f.value) {
        (3, Value::Bytes(_)) => {
            lines += 1;
            if lines > MAX_LOCATION_LINES {
                return Err(OtlpError::LocationLines {
                    location: index,
                    limit: MAX_LOCATION_LINES,
                });
            }
            bump(&mut c.lines, MAX_LINES, "lines in locations")
        }
        (4, value) => other_indices(value, c),
        _ => Ok(()),
    })
    .map(drop)
}

/// Attribute indices of a location, mapping or profile.
fn other_indices(value: Value<'_>, c: &mut Counts) -> Result<(), OtlpError> {
    add(
        &mut c.other_attribute_indices,
        scalars(value),
        MAX_OTHER_ATTRIBUTE_INDICES,
        "attribute indices of locations, mappings and profiles",
    )
}

/// Adds one to `count`, refusing a count past `limit`.
fn bump(count: &mut usize, limit: usize, what: &'static str) -> Result<(), OtlpError> {
    add(count, 1, limit, what)
}

/// Adds `n` to `count`, refusing a count past `limit`.
fn add(count: &mut usize, n: usize, limit: usize, what: &'static str) -> Result<(), OtlpError> {
    *count = count.saturating_add(n);
    if *count > limit {
        return Err(OtlpError::TooMany { what, limit });
    }
    Ok(())
}
