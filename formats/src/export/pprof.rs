//! Export to pprof: a gzip-compressed `profile.proto`.
//!
//! Sample types `samples/count` and `cpu/nanoseconds` (count × the graph's
//! nanoseconds per count); one function and one location per distinct
//! frame (with its file and line), one mapping per binary; a sample per
//! stack, leaf first as pprof wants.

use std::collections::HashMap;
use std::io::Write;

use flate2::Compression;
use flate2::write::GzEncoder;
use kiln_model::flamewire::FlameGraph;
use prost::Message;

use super::{ExportError, for_each_stack};
use crate::pprof::proto::{Function, Line, Location, Mapping, Profile, Sample, ValueType};

/// The graph as a gzip-compressed pprof profile.
pub fn to_pprof(graph: FlameGraph<'_>) -> Result<Vec<u8>, ExportError> {
    let meta = graph.meta();
    let mut strings = StringTable::default();
    strings.index("");
    let mut profile = Profile {
        sample_type: vec![
            ValueType {
                r#type: strings.index("samples"),
                unit: strings.index("count"),
            },
            ValueType {
                r#type: strings.index("cpu"),
                unit: strings.index("nanoseconds"),
            },
        ],
        period_type: Some(ValueType {
            r#type: strings.index("cpu"),
            unit: strings.index("nanoseconds"),
        }),
        period: meta.ns_per_count as i64,
        time_nanos: meta.from_ns,
        duration_nanos: meta.to_ns - meta.from_ns,
        ..Profile::default()
    };
    // Frame index → location id (frame index itself; frame 0 is the root,
    // which no stack holds, so ids start at 1 as pprof requires).
    let mut mappings: HashMap<u32, u64> = HashMap::new();
    for (i, frame) in graph.wire().frames.iter().enumerate().skip(1) {
        let id = i as u64;
        let module = frame.module.to_native();
        let mapping_id = match module {
            0 => 0,
            _ => {
                let next = mappings.len() as u64 + 1;
                *mappings.entry(module).or_insert_with(|| {
                    profile.mapping.push(Mapping {
                        id: next,
                        filename: strings.index(graph.string(module)),
                        has_functions: true,
                        ..Mapping::default()
                    });
                    next
                })
            }
        };
        let name = strings.index(graph.string(frame.name.to_native()));
        profile.function.push(Function {
            id,
            name,
            system_name: name,
            filename: strings.index(graph.string(frame.file.to_native())),
            start_line: 0,
        });
        profile.location.push(Location {
            id,
            mapping_id,
            address: 0,
            line: vec![Line {
                function_id: id,
                line: frame.line.to_native() as i64,
                column: 0,
            }],
            is_folded: false,
        });
    }
    let ns_per_count = meta.ns_per_count as i64;
    for_each_stack(graph, |path, count| {
        profile.sample.push(Sample {
            location_id: path.iter().rev().map(|&f| f as u64).collect(),
            value: vec![count as i64, count as i64 * ns_per_count],
            label: Vec::new(),
        });
    });
    profile.string_table = strings.table;
    let mut gz = GzEncoder::new(Vec::new(), Compression::default());
    gz.write_all(&profile.encode_to_vec())?;
    Ok(gz.finish()?)
}

/// pprof's string table: index 0 is "".
#[derive(Default)]
struct StringTable {
    table: Vec<String>,
    index: HashMap<String, i64>,
}

impl StringTable {
    fn index(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.table.len() as i64;
        self.table.push(s.to_owned());
        self.index.insert(s.to_owned(), i);
        i
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use kiln_model::{Frame, FrameKind};

    use super::*;
    use crate::export::tests::{STACKS, collapsed, graph, with_graph};
    use crate::{Format, ImportOptions, import};

    #[test]
    fn pprof_export_imports_back_to_the_same_stacks() {
        let wire = graph(STACKS);
        let bytes = with_graph(&wire, |g| to_pprof(g).unwrap());
        assert_eq!(Format::detect(&bytes), Format::Pprof);
        let imported = import(Format::Pprof, &bytes, &ImportOptions::new(0)).unwrap();
        let batch = imported.batch;
        assert_eq!(batch.period_ns, 10_000_000);
        let frames: BTreeMap<_, _> = batch.frames.iter().map(|f| (f.id, &f.frame)).collect();
        let stacks: BTreeMap<_, _> = batch.stacks.iter().map(|s| (s.id, &s.frames)).collect();
        let mut lines: BTreeMap<String, u64> = BTreeMap::new();
        for sample in &batch.samples {
            let names: Vec<String> = stacks[&sample.stack]
                .iter()
                .map(|id| match frames[id] {
                    Frame::Named { function, .. } => function.clone(),
                    other => panic!("unexpected frame {other:?}"),
                })
                .collect();
            *lines.entry(names.join(";")).or_default() += sample.count;
        }
        let back: Vec<String> = lines.iter().map(|(s, n)| format!("{s} {n}")).collect();
        assert_eq!(back, collapsed(&wire));
        // Kind, binary, file and line survive too.
        let parse = frames
            .values()
            .find(|f| matches!(f, Frame::Named { function, .. } if function == "parse"))
            .unwrap();
        assert_eq!(
            **parse,
            Frame::Named {
                kind: FrameKind::Native,
                function: "parse".into(),
                module: Some("app".into()),
                file: Some("src/parse.rs".into()),
                line: 42,
            }
        );
    }
}
