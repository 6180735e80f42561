//! Export to speedscope's file format: one `sampled` profile whose samples
//! are the graph's stacks (frame indices, root first) weighted by time.

use kiln_model::flamewire::FlameGraph;
use serde::Serialize;

use super::{ExportError, for_each_stack};

/// The schema URL speedscope files name.
pub const SPEEDSCOPE_SCHEMA: &str = "https://www.speedscope.app/file-format-schema.json";

#[derive(Serialize)]
struct File<'a> {
    #[serde(rename = "$schema")]
    schema: &'static str,
    name: &'a str,
    exporter: &'static str,
    #[serde(rename = "activeProfileIndex")]
    active_profile_index: u32,
    shared: Shared<'a>,
    profiles: [SampledProfile<'a>; 1],
}

#[derive(Serialize)]
struct Shared<'a> {
    frames: Vec<SharedFrame<'a>>,
}

#[derive(Serialize)]
struct SharedFrame<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    file: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    line: Option<u32>,
}

#[derive(Serialize)]
struct SampledProfile<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    name: &'a str,
    unit: &'static str,
    #[serde(rename = "startValue")]
    start_value: u64,
    #[serde(rename = "endValue")]
    end_value: u64,
    samples: Vec<Vec<u32>>,
    weights: Vec<u64>,
}

/// The graph as a speedscope JSON file named `name`. Weights are CPU
/// nanoseconds when the graph knows a sample's length, else counts.
pub fn to_speedscope(graph: FlameGraph<'_>, name: &str) -> Result<Vec<u8>, ExportError> {
    // Frame 0 is the root, which no stack holds: speedscope frame `i` is
    // graph frame `i + 1`.
    let frames = graph
        .wire()
        .frames
        .iter()
        .skip(1)
        .map(|f| {
            let file = f.file.to_native();
            SharedFrame {
                name: graph.string(f.name.to_native()),
                file: (file != 0).then(|| graph.string(file)),
                line: (f.line != 0).then(|| f.line.to_native()),
            }
        })
        .collect();
    let ns_per_count = graph.meta().ns_per_count;
    let (unit, scale) = match ns_per_count {
        0 => ("none", 1),
        ns => ("nanoseconds", ns),
    };
    let mut samples = Vec::new();
    let mut weights = Vec::new();
    for_each_stack(graph, |path, count| {
        samples.push(path.iter().map(|&f| f - 1).collect());
        weights.push(count * scale);
    });
    let file = File {
        schema: SPEEDSCOPE_SCHEMA,
        name,
        exporter: "kiln",
        active_profile_index: 0,
        shared: Shared { frames },
        profiles: [SampledProfile {
            kind: "sampled",
            name,
            unit,
            start_value: 0,
            end_value: weights.iter().sum(),
            samples,
            weights,
        }],
    };
    Ok(serde_json::to_vec(&file)?)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::export::tests::{STACKS, collapsed, graph, with_graph};

    /// Reads a speedscope file back into collapsed stacks, as speedscope's
    /// own importer does for sampled profiles (weights divided back into
    /// counts).
    fn read_back(json: &[u8], ns_per_count: u64) -> Vec<String> {
        let file: serde_json::Value = serde_json::from_slice(json).unwrap();
        assert_eq!(file["$schema"], SPEEDSCOPE_SCHEMA);
        let frames = file["shared"]["frames"].as_array().unwrap();
        let profile = &file["profiles"][0];
        assert_eq!(profile["type"], "sampled");
        let mut lines: BTreeMap<String, u64> = BTreeMap::new();
        let samples = profile["samples"].as_array().unwrap();
        let weights = profile["weights"].as_array().unwrap();
        assert_eq!(samples.len(), weights.len());
        for (stack, weight) in samples.iter().zip(weights) {
            let names: Vec<&str> = stack
                .as_array()
                .unwrap()
                .iter()
                .map(|i| {
                    frames[i.as_u64().unwrap() as usize]["name"]
                        .as_str()
                        .unwrap()
                })
                .collect();
            *lines.entry(names.join(";")).or_default() += weight.as_u64().unwrap() / ns_per_count;
        }
        lines.iter().map(|(s, n)| format!("{s} {n}")).collect()
    }

    #[test]
    fn speedscope_export_reads_back_to_the_same_stacks() {
        let wire = graph(STACKS);
        let json = with_graph(&wire, |g| to_speedscope(g, "test").unwrap());
        assert_eq!(read_back(&json, 10_000_000), collapsed(&wire));
        let file: serde_json::Value = serde_json::from_slice(&json).unwrap();
        let parse = file["shared"]["frames"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == "parse")
            .unwrap();
        assert_eq!(parse["file"], "src/parse.rs");
        assert_eq!(parse["line"], 42);
        assert_eq!(file["profiles"][0]["unit"], "nanoseconds");
    }
}
