//! The request's `ProfilesDictionary`, with lookups that check every
//! index and name the field that held a bad one.

use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::profiles::v1development::{
    Function, KeyValueAndUnit, Location, Mapping, ProfilesDictionary, Stack,
};

use super::error::ProfileProblem;

/// The tables of a request (empty ones when it has no dictionary). Entry
/// 0 of every table is the zero value, and index 0 means "none".
#[derive(Debug, Clone, Copy)]
pub(super) struct Dictionary<'r> {
    pub strings: &'r [String],
    pub mappings: &'r [Mapping],
    pub locations: &'r [Location],
    pub functions: &'r [Function],
    pub attributes: &'r [KeyValueAndUnit],
    pub stacks: &'r [Stack],
}

impl<'r> Dictionary<'r> {
    pub(super) fn new(dictionary: Option<&'r ProfilesDictionary>) -> Self {
        match dictionary {
            Some(d) => Self {
                strings: &d.string_table,
                mappings: &d.mapping_table,
                locations: &d.location_table,
                functions: &d.function_table,
                attributes: &d.attribute_table,
                stacks: &d.stack_table,
            },
            None => Self {
                strings: &[],
                mappings: &[],
                locations: &[],
                functions: &[],
                attributes: &[],
                stacks: &[],
            },
        }
    }

    /// String `index` ("" for 0, even without a string table).
    pub(super) fn string(
        &self,
        index: i32,
        field: impl FnOnce() -> String,
    ) -> Result<&'r str, ProfileProblem> {
        if index == 0 {
            return Ok(self.strings.first().map_or("", String::as_str));
        }
        entry(self.strings, "dictionary.stringTable", index, field).map(String::as_str)
    }

    pub(super) fn mapping(
        &self,
        index: i32,
        field: impl FnOnce() -> String,
    ) -> Result<&'r Mapping, ProfileProblem> {
        entry(self.mappings, "dictionary.mappingTable", index, field)
    }

    pub(super) fn location(
        &self,
        index: i32,
        field: impl FnOnce() -> String,
    ) -> Result<&'r Location, ProfileProblem> {
        entry(self.locations, "dictionary.locationTable", index, field)
    }

    pub(super) fn function(
        &self,
        index: i32,
        field: impl FnOnce() -> String,
    ) -> Result<Option<&'r Function>, ProfileProblem> {
        if index == 0 {
            return Ok(None);
        }
        entry(self.functions, "dictionary.functionTable", index, field).map(Some)
    }

    pub(super) fn stack(
        &self,
        index: i32,
        field: impl FnOnce() -> String,
    ) -> Result<&'r Stack, ProfileProblem> {
        entry(self.stacks, "dictionary.stackTable", index, field)
    }

    /// Attribute `index` as (key, value); `None` for index 0.
    pub(super) fn attribute(
        &self,
        index: i32,
        field: impl Fn() -> String,
    ) -> Result<Option<(&'r str, Option<&'r AnyValue>)>, ProfileProblem> {
        if index == 0 {
            return Ok(None);
        }
        let a = entry(self.attributes, "dictionary.attributeTable", index, &field)?;
        let key = self.string(a.key_strindex, || format!("{}.keyStrindex", field()))?;
        Ok(Some((key, a.value.as_ref())))
    }

    /// The key of a resource's or scope's attribute: `key`, else
    /// `key_strindex` (profiles' reference-based attributes).
    pub(super) fn key_of(
        &self,
        kv: &'r KeyValue,
        field: impl FnOnce() -> String,
    ) -> Result<&'r str, ProfileProblem> {
        if kv.key.is_empty() {
            self.string(kv.key_strindex, || format!("{}.keyStrindex", field()))
        } else {
            Ok(&kv.key)
        }
    }

    /// A value's string, whether inline or a `string_value_strindex`;
    /// `None` for values of other kinds.
    pub(super) fn string_value(
        &self,
        value: Option<&'r AnyValue>,
        field: impl FnOnce() -> String,
    ) -> Result<Option<&'r str>, ProfileProblem> {
        match value.and_then(|v| v.value.as_ref()) {
            Some(any_value::Value::StringValue(s)) => Ok(Some(s)),
            Some(any_value::Value::StringValueStrindex(i)) => self
                .string(*i, || format!("{}.stringValueStrindex", field()))
                .map(Some),
            _ => Ok(None),
        }
    }
}

/// Entry `index` of `table`, or the problem naming `field`.
fn entry<'r, T>(
    table: &'r [T],
    name: &'static str,
    index: i32,
    field: impl FnOnce() -> String,
) -> Result<&'r T, ProfileProblem> {
    usize::try_from(index)
        .ok()
        .and_then(|i| table.get(i))
        .ok_or_else(|| ProfileProblem::BadIndex {
            field: field(),
            table: name,
            index: index.into(),
            len: table.len(),
        })
}
