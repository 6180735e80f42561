//! `GET /api/v1/compare`: which functions grew or shrank between two
//! sides (ranges and/or label filters) by more than sampling noise, the
//! statistics of [`crate::query::compare`]. The MCP `diff` tool answers
//! through [`run`] and [`text`] too.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use actix_web::{HttpResponse, web};
use kiln_storage::Scope;
use serde::Serialize;

use super::AppState;
use super::auth::extract::Reader;
use super::error::ApiError;
use super::params::{RESERVED, check_label_name, range_of};
use super::query::admit_and_query;
use crate::query::compare::{Comparison, Direction, FunctionChange, Thresholds, compare};
use crate::query::{QueryRange, TopQuery};

/// The route's parameters besides [`RESERVED`] and label filters.
const COMPARE_PARAMS: &[&str] = &[
    "base_from",
    "base_to",
    "target_from",
    "target_to",
    "fdr",
    "min_change",
];
/// The prefixes of a side's own label filters.
const SIDES: [&str; 2] = ["base", "target"];
/// Functions an answer lists when `limit` is not given.
const DEFAULT_LIMIT: usize = 100;

/// One side as asked: its times (`(name, text)`, the name being what an
/// error calls it) and its own label filters.
#[derive(Debug, Default, Clone)]
pub(crate) struct SideSpec<'a> {
    pub from: Option<(&'a str, &'a str)>,
    pub to: Option<(&'a str, &'a str)>,
    pub filters: Vec<(String, String)>,
}

/// The two ranges compared.
#[derive(Debug, Clone)]
pub(crate) struct Sides {
    pub base: QueryRange,
    pub target: QueryRange,
}

impl Sides {
    /// The sides of a comparison: each side's times, else the shared
    /// ones, else the last hour; the shared filters and the side's own.
    /// Refused (400) when a label is filtered both for both sides and for
    /// one (they would contradict or repeat), or when the sides are the
    /// same (nothing to compare).
    pub(crate) fn new<'a>(
        scope: Scope,
        shared: SideSpec<'a>,
        base: SideSpec<'a>,
        target: SideSpec<'a>,
    ) -> Result<Sides, ApiError> {
        // Each side's times and filters, as asked.
        let side = |own: SideSpec<'a>, name: &str| {
            let mut filters = shared.filters.clone();
            for (label, value) in own.filters {
                if shared.filters.iter().any(|(l, _)| *l == label) {
                    return Err(ApiError::bad_request(format!(
                        "{name}.{label}: label {label:?} is filtered for both sides already; \
                         filter it for each side ({name}.{label}=…) or for both ({label}=…), \
                         not both ways"
                    )));
                }
                filters.push((label, value));
            }
            filters.sort();
            Ok((own.from.or(shared.from), own.to.or(shared.to), filters))
        };
        let (base, target) = (side(base, "base")?, side(target, "target")?);
        let text = |time: Option<(&'a str, &'a str)>| time.map(|(_, text)| text);
        if (text(base.0), text(base.1), &base.2) == (text(target.0), text(target.1), &target.2) {
            return Err(ApiError::bad_request(
                "base and target are the same range with the same filters: nothing to compare \
                 (give each side its own times or label filters: base_from=…&target_from=… or \
                 base.LABEL=…&target.LABEL=… in the API, base and target in the MCP diff tool)",
            ));
        }
        let sides = Sides {
            base: range_of(scope.clone(), base.0, base.1, base.2)?,
            target: range_of(scope, target.0, target.1, target.2)?,
        };
        Ok(sides)
    }
}

/// A comparison's answer: what each side was and what changed.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct CompareAnswer {
    /// The base as compared.
    pub base: SideAnswer,
    /// The target as compared.
    pub target: SideAnswer,
    /// When a change is flagged.
    pub thresholds: Thresholds,
    /// The tests, in words.
    pub method: &'static str,
    /// Tests corrected together.
    pub tests: usize,
    /// Functions compared (in either side).
    pub compared: usize,
    /// Functions with a significant change.
    pub flagged: usize,
    /// The first `limit` functions: significant first, most moved first.
    pub functions: Vec<FunctionChange>,
}

/// One side of a [`CompareAnswer`].
#[derive(Debug, Clone, Serialize)]
pub(crate) struct SideAnswer {
    /// Start, ns since the epoch.
    pub from_ns: i64,
    /// End (exclusive).
    pub to_ns: i64,
    /// Its label filters.
    pub filters: BTreeMap<String, String>,
    /// Its samples.
    pub samples: u64,
}

/// What [`CompareAnswer::method`] says.
const METHOD: &str = "per function, its self and its total share tested for a change: a \
    two-proportion z-test (the exact binomial test conditioned on both sides' samples where an \
    expected count is under 5); q-values by Benjamini-Hochberg over all tests; flagged when q < \
    fdr and the share moved by at least min_change points";

/// Compares the two sides: every function of each (a [`TopQuery`] with no
/// limit, admitted like any query, one side after the other so that the
/// two never hold two of the tenant's query slots at once), the first
/// `limit` of them answered.
pub(crate) async fn run(
    state: &AppState,
    sides: &Sides,
    thresholds: Thresholds,
    limit: usize,
) -> Result<CompareAnswer, ApiError> {
    let every = |range| TopQuery {
        range,
        limit: usize::MAX,
    };
    let base = admit_and_query(state, sides.base.clone(), every).await?;
    let target = admit_and_query(state, sides.target.clone(), every).await?;
    let Comparison {
        base_samples,
        target_samples,
        tests,
        flagged,
        mut functions,
    } = compare(&base, &target, thresholds);
    let compared = functions.len();
    functions.truncate(limit);
    let side = |range: &QueryRange, samples| SideAnswer {
        from_ns: range.from_ns,
        to_ns: range.to_ns,
        filters: range.filters.iter().cloned().collect(),
        samples,
    };
    Ok(CompareAnswer {
        base: side(&sides.base, base_samples),
        target: side(&sides.target, target_samples),
        thresholds,
        method: METHOD,
        tests,
        compared,
        flagged,
        functions,
    })
}

/// `GET /api/v1/compare?[from=T&to=T][&base_from=T&base_to=T][&target_from=T&target_to=T][&LABEL=VALUE…][&base.LABEL=VALUE…][&target.LABEL=VALUE…][&fdr=Q][&min_change=POINTS][&limit=N][&format=json|text]`
///
/// Compares two sides, each a range and label filters: `base_from`,
/// `base_to`, `target_from`, `target_to` are each side's times (`from`
/// and `to` those of both, the last hour by default), `LABEL=VALUE`
/// filters both sides and `base.LABEL=VALUE` / `target.LABEL=VALUE` one
/// (a label whose own name starts with `base.` or `target.` is filtered
/// per side only). Yesterday against today:
/// `base_from=now-2d&base_to=now-1d&target_from=now-1d`; two versions
/// over the last day: `from=now-1d&base.version=1.4&target.version=1.5`.
///
/// Per function (every function of either side is tested; `limit`, 100
/// by default, bounds what is listed): self and total samples, share and
/// cores in each side, the change of each share in points, its p-value
/// and Benjamini–Hochberg q-value, and whether it is significant: q
/// below `fdr` (default 0.01) and a change of at least `min_change`
/// points (default 0.1). The significant come first, most moved first.
/// `format=text` writes it for a person (or a model) to read.
pub(crate) async fn compare_route(
    Reader(scope): Reader,
    state: web::Data<AppState>,
    params: web::Query<BTreeMap<String, String>>,
) -> Result<HttpResponse, ApiError> {
    let format = params.get("format").map_or("json", String::as_str);
    if !["json", "text"].contains(&format) {
        return Err(ApiError::bad_request(format!(
            "format: {format:?} is not json or text"
        )));
    }
    let CompareRequest {
        sides,
        thresholds,
        limit,
    } = CompareRequest::of_params(scope, &params)?;
    let answer = run(&state, &sides, thresholds, limit).await?;
    Ok(match format {
        "text" => HttpResponse::Ok()
            .content_type("text/plain; charset=utf-8")
            .body(text(&answer)),
        _ => HttpResponse::Ok().json(answer),
    })
}

/// A comparison as a query string asks for it (every parameter of
/// [`compare_route`] but `format`): saved comparisons keep these
/// parameters and read them again here at each run, so that relative
/// times (`now-1h`) are resolved when it runs.
#[derive(Debug, Clone)]
pub(crate) struct CompareRequest {
    /// What is compared.
    pub sides: Sides,
    /// When a change is flagged.
    pub thresholds: Thresholds,
    /// Functions listed at most.
    pub limit: usize,
}

impl CompareRequest {
    /// The comparison `params` ask for, in `scope`; 400 naming a bad
    /// parameter.
    pub(crate) fn of_params(
        scope: Scope,
        params: &BTreeMap<String, String>,
    ) -> Result<CompareRequest, ApiError> {
        let limit = match params.get("limit") {
            None => DEFAULT_LIMIT,
            Some(text) => text
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=100_000).contains(n))
                .ok_or_else(|| {
                    ApiError::bad_request(format!(
                        "limit: {text:?} is not a number from 1 to 100000"
                    ))
                })?,
        };
        let thresholds = thresholds(
            params.get("fdr").map(|t| ("fdr", t.as_str())),
            params.get("min_change").map(|t| ("min_change", t.as_str())),
        )?;
        let sides = sides_of_params(scope, params)?;
        Ok(CompareRequest {
            sides,
            thresholds,
            limit,
        })
    }
}

/// The thresholds asked for, as `(name, text)`: `fdr` a number above 0
/// and at most 1, `min_change` points from 0 to 100.
pub(crate) fn thresholds(
    fdr: Option<(&str, &str)>,
    min_change: Option<(&str, &str)>,
) -> Result<Thresholds, ApiError> {
    let number = |given: Option<(&str, &str)>, default: f64, valid: fn(f64) -> bool, what| {
        let Some((name, text)) = given else {
            return Ok(default);
        };
        text.trim()
            .parse::<f64>()
            .ok()
            .filter(|v| valid(*v))
            .ok_or_else(|| ApiError::bad_request(format!("{name}: {text:?} is not {what}")))
    };
    Ok(Thresholds {
        fdr: number(
            fdr,
            Thresholds::DEFAULT.fdr,
            |q| q > 0.0 && q <= 1.0,
            "a false discovery rate above 0 and at most 1 (e.g. 0.01)",
        )?,
        min_change_points: number(
            min_change,
            Thresholds::DEFAULT.min_change_points,
            |p| (0.0..=100.0).contains(&p),
            "a change in percentage points from 0 to 100 (e.g. 0.5)",
        )?,
    })
}

/// The sides a query string asks for.
fn sides_of_params(scope: Scope, params: &BTreeMap<String, String>) -> Result<Sides, ApiError> {
    let time = |name: &'static str| params.get(name).map(|text| (name, text.as_str()));
    let mut specs = [
        SideSpec {
            from: time("from"),
            to: time("to"),
            ..SideSpec::default()
        },
        SideSpec {
            from: time("base_from"),
            to: time("base_to"),
            ..SideSpec::default()
        },
        SideSpec {
            from: time("target_from"),
            to: time("target_to"),
            ..SideSpec::default()
        },
    ];
    for (name, value) in params {
        if RESERVED.contains(&name.as_str()) || COMPARE_PARAMS.contains(&name.as_str()) {
            continue;
        }
        let side = SIDES
            .iter()
            .position(|side| name.strip_prefix(side).is_some_and(|r| r.starts_with('.')));
        let (spec, label) = match side {
            Some(i) => (&mut specs[i + 1], &name[SIDES[i].len() + 1..]),
            None => (&mut specs[0], name.as_str()),
        };
        check_label_name(label, &[]).map_err(|_| {
            ApiError::bad_request(format!(
                "{name:?} is not a label filter: LABEL=VALUE for both sides, base.LABEL=VALUE or \
                 target.LABEL=VALUE for one (label names: letters, digits, '_' and '.'); the \
                 other parameters are {}, {}",
                RESERVED.join(", "),
                COMPARE_PARAMS.join(", ")
            ))
        })?;
        spec.filters.push((label.to_owned(), value.clone()));
    }
    let [shared, base, target] = specs;
    Sides::new(scope, shared, base, target)
}

/// The answer for a person or a model: what was compared, then what grew
/// and what shrank significantly, most moved first, each with its self
/// and total share in both sides and its q-value; then how many others
/// moved within noise.
pub(crate) fn text(answer: &CompareAnswer) -> String {
    let mut out = String::new();
    let side = |s: &SideAnswer| {
        let filters = match s.filters.is_empty() {
            true => String::new(),
            false => format!(
                " {{{}}}",
                s.filters
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        format!(
            "{} to {}{filters}, {} samples",
            rfc3339(s.from_ns),
            rfc3339(s.to_ns),
            s.samples
        )
    };
    let _ = writeln!(out, "base:   {}", side(&answer.base));
    let _ = writeln!(out, "target: {}", side(&answer.target));
    if answer.base.samples == 0 || answer.target.samples == 0 {
        let empty = match answer.base.samples {
            0 => "base",
            _ => "target",
        };
        let _ = writeln!(out, "The {empty} holds no samples: nothing to compare.");
        return out;
    }
    let _ = writeln!(
        out,
        "{} functions compared; {} changed significantly (Benjamini-Hochberg q < {}, a move \
         of at least {} points in self or total share).",
        answer.compared, answer.flagged, answer.thresholds.fdr, answer.thresholds.min_change_points
    );
    for (direction, title) in [(Direction::Grew, "Grew"), (Direction::Shrank, "Shrank")] {
        let rows: Vec<&FunctionChange> = answer
            .functions
            .iter()
            .filter(|f| f.direction == Some(direction))
            .collect();
        if rows.is_empty() {
            continue;
        }
        let _ = writeln!(out, "\n{title}:");
        let _ = writeln!(
            out,
            "  {:>8}  {:>17}  {:>8}  {:>17}  {:>8}  function",
            "self", "self base→target", "total", "total base→target", "q"
        );
        for f in rows {
            let _ = writeln!(
                out,
                "  {:>+8.2}  {:>17}  {:>+8.2}  {:>17}  {:>8.1e}  {}",
                f.self_change.change_points,
                format!(
                    "{:.2}%→{:.2}%",
                    f.base.self_share * 100.0,
                    f.target.self_share * 100.0
                ),
                f.total_change.change_points,
                format!(
                    "{:.2}%→{:.2}%",
                    f.base.total_share * 100.0,
                    f.target.total_share * 100.0
                ),
                f.q(),
                function_name(&f.name, f.module.as_deref()),
            );
        }
    }
    if answer.flagged == 0 {
        let _ = writeln!(out, "\nNo function's share moved beyond sampling noise.");
    }
    let listed_flagged = answer.functions.iter().filter(|f| f.significant).count();
    if listed_flagged < answer.flagged {
        let _ = writeln!(
            out,
            "\n({} more significant changes not listed: raise the limit.)",
            answer.flagged - listed_flagged
        );
    }
    out
}

/// A function as the text answers name it: `name (module)`.
pub(crate) fn function_name(name: &str, module: Option<&str>) -> String {
    match module {
        Some(module) if !module.is_empty() => format!("{name} ({module})"),
        _ => name.to_owned(),
    }
}

/// `ns` since the epoch as RFC 3339, to the second (UTC).
pub(crate) fn rfc3339(ns: i64) -> String {
    let time = std::time::UNIX_EPOCH.checked_add(std::time::Duration::from_secs(
        ns.max(0) as u64 / 1_000_000_000,
    ));
    time.map_or_else(
        || ns.to_string(),
        |t| humantime::format_rfc3339_seconds(t).to_string(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn scope() -> Scope {
        Scope::new("t", "p").unwrap()
    }

    #[test]
    fn sides_take_their_own_times_and_filters_over_the_shared() {
        let sides = sides_of_params(
            scope(),
            &params(&[
                ("from", "1000"),
                ("to", "2000"),
                ("service", "api"),
                ("base.version", "1.4"),
                ("target.version", "1.5"),
                ("target_from", "1500"),
            ]),
        )
        .unwrap();
        let s = 1_000_000_000;
        assert_eq!((sides.base.from_ns, sides.base.to_ns), (1000 * s, 2000 * s));
        assert_eq!(
            (sides.target.from_ns, sides.target.to_ns),
            (1500 * s, 2000 * s)
        );
        let pairs = |v: &[(&str, &str)]| -> Vec<(String, String)> {
            v.iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect()
        };
        assert_eq!(
            sides.base.filters,
            pairs(&[("service", "api"), ("version", "1.4")])
        );
        assert_eq!(
            sides.target.filters,
            pairs(&[("service", "api"), ("version", "1.5")])
        );
    }

    #[test]
    fn bad_sides_are_refused_naming_the_parameter() {
        let refused = |pairs: &[(&str, &str)]| {
            sides_of_params(scope(), &params(pairs))
                .unwrap_err()
                .to_string()
        };
        let e = refused(&[("base_from", "yesterday"), ("target.v", "2")]);
        assert!(e.starts_with("base_from: "), "{e}");
        let e = refused(&[("base_from", "2000"), ("base_to", "1000")]);
        assert!(
            e.contains("base_from") && e.contains("must be before base_to"),
            "{e}"
        );
        let e = refused(&[("v", "1"), ("base.v", "2")]);
        assert!(e.starts_with("base.v: "), "{e}");
        let e = refused(&[("base.bad name", "1")]);
        assert!(e.contains("\"base.bad name\" is not a label filter"), "{e}");
        let e = refused(&[("from", "now-1h"), ("service", "api")]);
        assert!(e.contains("nothing to compare"), "{e}");
        assert!(thresholds(Some(("fdr", "0")), None).is_err());
        let e = thresholds(None, Some(("min_change", "lots"))).unwrap_err();
        assert!(e.to_string().starts_with("min_change: "), "{e}");
    }
}
