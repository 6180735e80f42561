//! A tool's arguments, read one by one, each error naming the argument
//! (`limit: -3 is not a whole number from 1 to 500`), and the range and
//! filters every query tool takes, read as the query API reads them.

use kiln_storage::Scope;
use rmcp::model::JsonObject;
use serde_json::{Value, json};

use super::super::super::error::ApiError;
use super::super::super::params::range_of;
use crate::query::QueryRange;

/// `from`'s schema.
pub(crate) fn from_schema() -> Value {
    json!({
        "type": "string",
        "description": "Start of the range: RFC 3339 (2025-01-31T09:00:00Z), unix seconds, `now` or `now-<duration>` (now-1h, now-30m, now-7d). Default: an hour before `to`.",
    })
}

/// `to`'s schema.
pub(crate) fn to_schema() -> Value {
    json!({
        "type": "string",
        "description": "End of the range, in the same forms as `from`. Default: now.",
    })
}

/// `filters`'s schema.
pub(crate) fn filters_schema() -> Value {
    json!({
        "type": "object",
        "description": "Label filters, label name to value, all of which a sample must have: {\"service\": \"api\", \"host\": \"web-1\"}. The labels tool lists names and values.",
        "additionalProperties": {"type": ["string", "number", "boolean"]},
    })
}

/// A tool's arguments, taken out as they are read; what is left at the
/// end was not an argument of the tool ([`Args::finish`]).
#[derive(Debug)]
pub(crate) struct Args {
    map: JsonObject,
    /// How the arguments' names are written in errors: `""`, or
    /// `"base."` for those of the object `base`.
    prefix: String,
}

impl Args {
    /// The arguments of a call.
    pub(crate) fn new(map: JsonObject) -> Args {
        Args {
            map,
            prefix: String::new(),
        }
    }

    fn bad(&self, name: &str, problem: impl std::fmt::Display) -> ApiError {
        ApiError::bad_request(format!("{}{name}: {problem}", self.prefix))
    }

    /// The name `name` has in errors (`base.from`).
    pub(crate) fn path(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    /// String argument `name`, if given.
    pub(crate) fn string(&mut self, name: &str) -> Result<Option<String>, ApiError> {
        match self.map.remove(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(text)) => Ok(Some(text)),
            Some(other) => Err(self.bad(name, format!("{other} is not a string"))),
        }
    }

    /// Whole-number argument `name` within `range`, else `default`.
    pub(crate) fn whole(
        &mut self,
        name: &str,
        default: u64,
        range: std::ops::RangeInclusive<u64>,
    ) -> Result<u64, ApiError> {
        match self.map.remove(name) {
            None | Some(Value::Null) => Ok(default),
            Some(value) => value
                .as_u64()
                .or_else(|| {
                    value
                        .as_f64()
                        .filter(|f| f.fract() == 0.0)
                        .map(|f| f as u64)
                })
                .filter(|n| range.contains(n) && value.as_f64().is_some_and(|f| f >= 0.0))
                .ok_or_else(|| {
                    self.bad(
                        name,
                        format!(
                            "{value} is not a whole number from {} to {}",
                            range.start(),
                            range.end()
                        ),
                    )
                }),
        }
    }

    /// Number argument `name` within `range`, else `default`.
    pub(crate) fn number(
        &mut self,
        name: &str,
        default: f64,
        range: std::ops::RangeInclusive<f64>,
    ) -> Result<f64, ApiError> {
        match self.map.remove(name) {
            None | Some(Value::Null) => Ok(default),
            Some(value) => value.as_f64().filter(|n| range.contains(n)).ok_or_else(|| {
                self.bad(
                    name,
                    format!(
                        "{value} is not a number from {} to {}",
                        range.start(),
                        range.end()
                    ),
                )
            }),
        }
    }

    /// Object argument `name`, if given, as the arguments it holds.
    pub(crate) fn object(&mut self, name: &str) -> Result<Option<Args>, ApiError> {
        match self.map.remove(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Object(map)) => Ok(Some(Args {
                map,
                prefix: format!("{}{name}.", self.prefix),
            })),
            Some(other) => Err(self.bad(name, format!("{other} is not an object"))),
        }
    }

    /// `filters`: label name to value (strings; numbers and booleans as
    /// written), empty when not given.
    pub(crate) fn filters(&mut self) -> Result<Vec<(String, String)>, ApiError> {
        let map = match self.map.remove("filters") {
            None | Some(Value::Null) => return Ok(Vec::new()),
            Some(Value::Object(map)) => map,
            Some(other) => {
                return Err(self.bad(
                    "filters",
                    format!("{other} is not an object of label names to values"),
                ));
            }
        };
        map.into_iter()
            .map(|(label, value)| match value {
                Value::String(text) => Ok((label, text)),
                Value::Number(n) => Ok((label, n.to_string())),
                Value::Bool(b) => Ok((label, b.to_string())),
                other => Err(self.bad(
                    &format!("filters.{label}"),
                    format!("{other} is not a label value (a string)"),
                )),
            })
            .collect()
    }

    /// `from`, `to` and `filters`: the range asked for, as the query API
    /// reads it (times in its forms, label names checked).
    pub(crate) fn range(&mut self, scope: Scope) -> Result<QueryRange, ApiError> {
        let times = self.times()?;
        let filters = self.filters()?;
        range_of(scope, named(&times.0), named(&times.1), filters).map_err(|e| self.in_filters(e))
    }

    /// `from` and `to`, each with the name errors call it by.
    pub(crate) fn times(&mut self) -> Result<Times, ApiError> {
        let from = self.string("from")?.map(|t| (self.path("from"), t));
        let to = self.string("to")?.map(|t| (self.path("to"), t));
        Ok((from, to))
    }

    /// A label name refused by the range's checks, said as an argument.
    pub(crate) fn in_filters(&self, e: ApiError) -> ApiError {
        match e {
            ApiError::BadRequest(message) if message.contains("is not a label name") => {
                ApiError::BadRequest(format!("{}filters: {message}", self.prefix))
            }
            other => other,
        }
    }

    /// Refuses arguments left unread: the tool does not take them.
    pub(crate) fn finish(self, takes: &[&str]) -> Result<(), ApiError> {
        match self.map.keys().next() {
            None => Ok(()),
            Some(name) => Err(self.bad(
                name,
                format!(
                    "not an argument of this tool (it takes {})",
                    takes.join(", ")
                ),
            )),
        }
    }
}

/// `from` and `to` as given, each `(name in errors, text)`.
pub(crate) type Times = (Option<(String, String)>, Option<(String, String)>);

/// An owned `(name, text)` borrowed as the query API's parameters are.
pub(crate) fn named(time: &Option<(String, String)>) -> Option<(&str, &str)> {
    time.as_ref().map(|(n, v)| (n.as_str(), v.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(value: Value) -> Args {
        Args::new(value.as_object().unwrap().clone())
    }

    #[test]
    fn each_error_names_its_argument() {
        let e = args(json!({"limit": -3})).whole("limit", 20, 1..=500);
        assert_eq!(
            e.unwrap_err().to_string(),
            "limit: -3 is not a whole number from 1 to 500"
        );
        assert_eq!(
            args(json!({"limit": 30.0}))
                .whole("limit", 20, 1..=500)
                .unwrap(),
            30
        );
        let mut a = args(json!({"base": {"from": "yesterday"}}));
        let mut base = a.object("base").unwrap().unwrap();
        let scope = Scope::new("t", "p").unwrap();
        let e = base.range(scope.clone()).unwrap_err().to_string();
        assert!(e.starts_with("base.from: "), "{e}");
        let e = args(json!({"filters": {"bad name": "x"}}))
            .range(scope.clone())
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("filters: \"bad name\" is not a label name"),
            "{e}"
        );
        let e = args(json!({"filters": {"v": [1]}})).filters().unwrap_err();
        assert!(e.to_string().starts_with("filters.v: "), "{e}");
        let e = args(json!({"limt": 3})).finish(&["limit"]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "limt: not an argument of this tool (it takes limit)"
        );
        let mut a = args(json!({"filters": {"version": 1.5, "debug": true}}));
        assert_eq!(
            a.filters().unwrap(),
            [
                ("debug".to_owned(), "true".to_owned()),
                ("version".to_owned(), "1.5".to_owned())
            ]
        );
    }
}
