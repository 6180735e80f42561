//! Why an OTLP request, or one profile of it, was refused.
//!
//! Field paths are written as OTLP/JSON names them (camelCase), so a
//! message reads the same whatever encoding the sender used.

use super::limits::MAX_CONVERTED_BYTES;

/// Why a whole request was refused (nothing of it is kept). Each is the
/// sender's error: retrying the same request cannot succeed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OtlpError {
    /// The body has no bytes.
    #[error("the OTLP request is empty")]
    Empty,
    /// The bytes are not an `ExportProfilesServiceRequest`.
    #[error("not a valid OTLP ExportProfilesServiceRequest (protobuf): {0}")]
    Decode(#[source] prost::DecodeError),
    /// The body is not OTLP/JSON of an `ExportProfilesServiceRequest`.
    #[error("not valid OTLP/JSON: {}{message} at line {line} column {column}", json_path(.path))]
    Json {
        /// Where, as OTLP/JSON names it:
        /// `dictionary.locationTable[3].lines[0].functionIndex`; empty at
        /// the top level.
        path: String,
        /// What is wrong there.
        message: String,
        /// serde_json's line (from 1).
        line: usize,
        /// serde_json's column (from 1).
        column: usize,
    },
    /// The JSON request's protobuf encoding would pass its limit.
    #[error(
        "the OTLP/JSON request comes to more than {} MiB as protobuf; send smaller requests",
        limit >> 20
    )]
    JsonTooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
    /// The request holds more of something than one request may.
    #[error(
        "the OTLP request has more than {limit} {what}; send smaller requests \
         (the collector's batch processor: send_batch_max_size)"
    )]
    TooMany {
        /// What: `samples`, `profiles`, `lines in locations`, ….
        what: &'static str,
        /// The limit.
        limit: usize,
    },
    /// One location has more lines than a stack holds frames.
    #[error(
        "dictionary.locationTable[{location}] has more than {limit} lines, more than a stack holds"
    )]
    LocationLines {
        /// Its index in the location table.
        location: usize,
        /// The limit.
        limit: usize,
    },
    /// An attribute value nests arrays or key-value lists too deep.
    #[error("an attribute value of the OTLP request nests more than {limit} levels deep")]
    TooDeep {
        /// The limit.
        limit: usize,
    },
    /// Samples in both the v1.9.0 and the v1.10.0 layouts.
    #[error(
        "the OTLP request mixes samples of two layouts: packed field 3 \
         (opentelemetry-proto 1.9.0's attribute_indices) and packed field 4 \
         (1.10.0's values); send one"
    )]
    MixedLayouts,
    /// The request has no profile at all.
    #[error("the OTLP request holds no profile")]
    NoProfiles,
    /// Its frames and labels would be too large to keep once converted.
    #[error(
        "the OTLP request's frame names and labels come to more than {} MiB once \
         converted; send smaller requests",
        MAX_CONVERTED_BYTES >> 20
    )]
    TooLarge,
}

/// `path: ` where there is a path.
fn json_path(path: &str) -> String {
    if path.is_empty() {
        String::new()
    } else {
        format!("{path}: ")
    }
}

/// Why one profile was refused; the request's other profiles are kept.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProfileProblem {
    /// An index past the end of its table (or negative).
    #[error("{field} is {index}, but {table} has {len} entries")]
    BadIndex {
        /// The field holding it, e.g. `…samples[17].stackIndex`.
        field: String,
        /// The table it indexes, e.g. `dictionary.stackTable`.
        table: &'static str,
        /// The index.
        index: i64,
        /// Entries in the table.
        len: usize,
    },
    /// A sample with both values and timestamps, of different lengths.
    #[error(
        "samples[{sample}] has {values} values and {timestamps} timestamps; each value is \
         the event at the timestamp of the same index"
    )]
    ValueCount {
        /// The sample's index in its profile.
        sample: usize,
        /// Its values.
        values: usize,
        /// Its timestamps.
        timestamps: usize,
    },
    /// A negative value.
    #[error("samples[{sample}] has a negative value {value}")]
    NegativeValue {
        /// The sample's index in its profile.
        sample: usize,
        /// The value.
        value: i64,
    },
    /// The values add up to more than a `u64` holds.
    #[error("the profile's values add up to more than {}", u64::MAX)]
    CountOverflow,
    /// The profile alone is larger than one batch may be.
    #[error(
        "the profile has more distinct stacks, frames, label sets or samples than one \
         batch carries ({} each); split it",
        kiln_model::MAX_BATCH_ENTRIES
    )]
    TooManyEntries,
    /// A sample type with no type name to store its samples under.
    #[error(
        "profile type {type_:?}/{unit} has no name to store its samples under (the \
         sampleType's type string is empty)"
    )]
    UnnamedType {
        /// The sample type's type.
        type_: String,
        /// Its unit.
        unit: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_field_and_the_fix() {
        let e = ProfileProblem::BadIndex {
            field: "samples[17].stackIndex".into(),
            table: "dictionary.stackTable",
            index: 40,
            len: 3,
        };
        assert_eq!(
            e.to_string(),
            "samples[17].stackIndex is 40, but dictionary.stackTable has 3 entries"
        );
        let e = OtlpError::TooMany {
            what: "samples",
            limit: 1 << 20,
        };
        assert_eq!(
            e.to_string(),
            "the OTLP request has more than 1048576 samples; send smaller requests \
             (the collector's batch processor: send_batch_max_size)"
        );
    }
}
