//! The OTLP profiles messages as the JSON transcoder (`json.rs`) follows
//! them: each field's JSON and proto names, number and kind, with
//! opentelemetry-proto 1.10.0's numbers (JSON names fields, so it never
//! has 1.9.0's layout). Only the messages of an
//! `ExportProfilesServiceRequest`; a test checks the table against the
//! crate's prost types.

/// One message: its fields.
#[derive(Debug)]
pub(crate) struct Message {
    /// The proto message name, for tests and errors.
    pub name: &'static str,
    pub fields: &'static [Field],
}

/// One field of a message.
#[derive(Debug)]
pub(crate) struct Field {
    /// lowerCamelCase, as OTLP/JSON writes it.
    pub json: &'static str,
    /// The proto name (snake_case), which proto3 JSON parsers accept too.
    pub proto: &'static str,
    pub number: u32,
    pub kind: Kind,
    pub repeated: bool,
}

/// How a field is read from JSON and written to the wire.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Kind {
    Message(&'static Message),
    String,
    /// base64 in JSON (standard or URL-safe, padded or not).
    Bytes,
    /// Hex in JSON, as OTLP/JSON writes trace, span and profile ids. Kiln
    /// does not use them and Pyroscope's server writes them base64, so a
    /// value that is not hex is dropped rather than refused.
    HexBytes,
    /// Consumed, never written: `originalPayload` can be large and Kiln
    /// does not keep it.
    Skip,
    Int32,
    Int64,
    Uint32,
    Uint64,
    Fixed64,
    Bool,
    Double,
}

impl Message {
    /// The field named `key`, by its JSON or its proto name.
    pub(crate) fn field(&self, key: &str) -> Option<&'static Field> {
        self.fields.iter().find(|f| f.json == key || f.proto == key)
    }
}

const fn f(json: &'static str, proto: &'static str, number: u32, kind: Kind) -> Field {
    Field {
        json,
        proto,
        number,
        kind,
        repeated: false,
    }
}

const fn rep(json: &'static str, proto: &'static str, number: u32, kind: Kind) -> Field {
    Field {
        json,
        proto,
        number,
        kind,
        repeated: true,
    }
}

use Kind::{
    Bool, Bytes, Double, Fixed64, HexBytes, Int32, Int64, Message as M, Skip, String, Uint32,
    Uint64,
};

pub(crate) static REQUEST: Message = Message {
    name: "ExportProfilesServiceRequest",
    fields: &[
        rep(
            "resourceProfiles",
            "resource_profiles",
            1,
            M(&RESOURCE_PROFILES),
        ),
        f("dictionary", "dictionary", 2, M(&DICTIONARY)),
    ],
};

static RESOURCE_PROFILES: Message = Message {
    name: "ResourceProfiles",
    fields: &[
        f("resource", "resource", 1, M(&RESOURCE)),
        rep("scopeProfiles", "scope_profiles", 2, M(&SCOPE_PROFILES)),
        f("schemaUrl", "schema_url", 3, String),
    ],
};

static RESOURCE: Message = Message {
    name: "Resource",
    fields: &[
        rep("attributes", "attributes", 1, M(&KEY_VALUE)),
        f(
            "droppedAttributesCount",
            "dropped_attributes_count",
            2,
            Uint32,
        ),
        rep("entityRefs", "entity_refs", 3, M(&ENTITY_REF)),
    ],
};

static ENTITY_REF: Message = Message {
    name: "EntityRef",
    fields: &[
        f("schemaUrl", "schema_url", 1, String),
        f("type", "type", 2, String),
        rep("idKeys", "id_keys", 3, String),
        rep("descriptionKeys", "description_keys", 4, String),
    ],
};

static SCOPE_PROFILES: Message = Message {
    name: "ScopeProfiles",
    fields: &[
        f("scope", "scope", 1, M(&SCOPE)),
        rep("profiles", "profiles", 2, M(&PROFILE)),
        f("schemaUrl", "schema_url", 3, String),
    ],
};

static SCOPE: Message = Message {
    name: "InstrumentationScope",
    fields: &[
        f("name", "name", 1, String),
        f("version", "version", 2, String),
        rep("attributes", "attributes", 3, M(&KEY_VALUE)),
        f(
            "droppedAttributesCount",
            "dropped_attributes_count",
            4,
            Uint32,
        ),
    ],
};

pub(crate) static KEY_VALUE: Message = Message {
    name: "KeyValue",
    fields: &[
        f("key", "key", 1, String),
        f("value", "value", 2, M(&ANY_VALUE)),
        f("keyStrindex", "key_strindex", 3, Int32),
    ],
};

/// A oneof: each field present is written, even a zero value (it says
/// which of the values this is).
pub(crate) static ANY_VALUE: Message = Message {
    name: "AnyValue",
    fields: &[
        f("stringValue", "string_value", 1, String),
        f("boolValue", "bool_value", 2, Bool),
        f("intValue", "int_value", 3, Int64),
        f("doubleValue", "double_value", 4, Double),
        f("arrayValue", "array_value", 5, M(&ARRAY_VALUE)),
        f("kvlistValue", "kvlist_value", 6, M(&KEY_VALUE_LIST)),
        f("bytesValue", "bytes_value", 7, Bytes),
        f("stringValueStrindex", "string_value_strindex", 8, Int32),
    ],
};

static ARRAY_VALUE: Message = Message {
    name: "ArrayValue",
    fields: &[rep("values", "values", 1, M(&ANY_VALUE))],
};

static KEY_VALUE_LIST: Message = Message {
    name: "KeyValueList",
    fields: &[rep("values", "values", 1, M(&KEY_VALUE))],
};

static PROFILE: Message = Message {
    name: "Profile",
    fields: &[
        f("sampleType", "sample_type", 1, M(&VALUE_TYPE)),
        rep("samples", "samples", 2, M(&SAMPLE)),
        f("timeUnixNano", "time_unix_nano", 3, Fixed64),
        f("durationNano", "duration_nano", 4, Uint64),
        f("periodType", "period_type", 5, M(&VALUE_TYPE)),
        f("period", "period", 6, Int64),
        f("profileId", "profile_id", 7, HexBytes),
        f(
            "droppedAttributesCount",
            "dropped_attributes_count",
            8,
            Uint32,
        ),
        f(
            "originalPayloadFormat",
            "original_payload_format",
            9,
            String,
        ),
        f("originalPayload", "original_payload", 10, Skip),
        rep("attributeIndices", "attribute_indices", 11, Int32),
    ],
};

static VALUE_TYPE: Message = Message {
    name: "ValueType",
    fields: &[
        f("typeStrindex", "type_strindex", 1, Int32),
        f("unitStrindex", "unit_strindex", 2, Int32),
    ],
};

static SAMPLE: Message = Message {
    name: "Sample",
    fields: &[
        f("stackIndex", "stack_index", 1, Int32),
        rep("attributeIndices", "attribute_indices", 2, Int32),
        f("linkIndex", "link_index", 3, Int32),
        rep("values", "values", 4, Int64),
        rep("timestampsUnixNano", "timestamps_unix_nano", 5, Fixed64),
    ],
};

static DICTIONARY: Message = Message {
    name: "ProfilesDictionary",
    fields: &[
        rep("mappingTable", "mapping_table", 1, M(&MAPPING)),
        rep("locationTable", "location_table", 2, M(&LOCATION)),
        rep("functionTable", "function_table", 3, M(&FUNCTION)),
        rep("linkTable", "link_table", 4, M(&LINK)),
        rep("stringTable", "string_table", 5, String),
        rep(
            "attributeTable",
            "attribute_table",
            6,
            M(&KEY_VALUE_AND_UNIT),
        ),
        rep("stackTable", "stack_table", 7, M(&STACK)),
    ],
};

static MAPPING: Message = Message {
    name: "Mapping",
    fields: &[
        f("memoryStart", "memory_start", 1, Uint64),
        f("memoryLimit", "memory_limit", 2, Uint64),
        f("fileOffset", "file_offset", 3, Uint64),
        f("filenameStrindex", "filename_strindex", 4, Int32),
        rep("attributeIndices", "attribute_indices", 5, Int32),
    ],
};

static LOCATION: Message = Message {
    name: "Location",
    fields: &[
        f("mappingIndex", "mapping_index", 1, Int32),
        f("address", "address", 2, Uint64),
        rep("lines", "lines", 3, M(&LINE)),
        rep("attributeIndices", "attribute_indices", 4, Int32),
    ],
};

static LINE: Message = Message {
    name: "Line",
    fields: &[
        f("functionIndex", "function_index", 1, Int32),
        f("line", "line", 2, Int64),
        f("column", "column", 3, Int64),
    ],
};

static FUNCTION: Message = Message {
    name: "Function",
    fields: &[
        f("nameStrindex", "name_strindex", 1, Int32),
        f("systemNameStrindex", "system_name_strindex", 2, Int32),
        f("filenameStrindex", "filename_strindex", 3, Int32),
        f("startLine", "start_line", 4, Int64),
    ],
};

static LINK: Message = Message {
    name: "Link",
    fields: &[
        f("traceId", "trace_id", 1, HexBytes),
        f("spanId", "span_id", 2, HexBytes),
    ],
};

static STACK: Message = Message {
    name: "Stack",
    fields: &[rep("locationIndices", "location_indices", 1, Int32)],
};

static KEY_VALUE_AND_UNIT: Message = Message {
    name: "KeyValueAndUnit",
    fields: &[
        f("keyStrindex", "key_strindex", 1, Int32),
        f("value", "value", 2, M(&ANY_VALUE)),
        f("unitStrindex", "unit_strindex", 3, Int32),
    ],
};
