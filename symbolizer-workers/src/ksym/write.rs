//! Encoding a [`SymbolTable`] as ksym bytes.

use std::collections::HashMap;

use super::chains;
use super::layout::*;
use super::names::{DEMANGLED, DERIVED, HASH_IN_RECORD};
use super::packed;
use super::pages;
use super::rust_legacy;
use crate::extract::demangle;
use crate::table::{Inline, LineRow, NONE, Range, SymbolTable};

/// Encodes `table` (ranges sorted and not overlapping, as extraction
/// makes them) as a ksym file. The same table always gives the same
/// bytes. Functions and files no range refers to are left out.
///
/// A range longer than 4 GiB is cut to 4 GiB.
pub fn encode(table: &SymbolTable) -> Vec<u8> {
    let mut w = Writer::default();
    // Function and file records are at most the table's.
    let layout = FileLayout {
        widths: Widths::for_table(table.functions.len(), table.files.len()),
        records: Records::for_end(table.ranges.iter().map(|r| r.end).max().unwrap_or(0)),
    };
    let mut out = Ranges {
        layout,
        records: Vec::with_capacity(table.ranges.len() * layout.records.len()),
        bodies: Vec::new(),
        bounds: Vec::with_capacity(table.ranges.len()),
    };
    for range in &table.ranges {
        w.range(table, range, &mut out);
    }
    let Ranges {
        records: ranges,
        mut bodies,
        bounds,
        ..
    } = out;
    // Lookups read a body's values 4 bytes at a time, and its low bytes a
    // block at a time: the last body needs bytes after it.
    bodies.extend([0; BODIES_PADDING]);
    let pages = pages::build_over(&bounds, PAGE_LAYOUT);
    let (funcs, files, blob, mangled) = w.strings.finish();

    section_table(layout.records).write(
        VERSION,
        layout.flags(),
        [
            &ranges,
            &bodies,
            // No shared inline nodes: each range has its own.
            &[],
            &funcs,
            &files,
            &blob,
            &pages,
            &mangled,
        ],
    )
}

/// The range records and bodies written so far, and the bounds of those
/// ranges (for the page index).
struct Ranges {
    layout: FileLayout,
    records: Vec<u8>,
    bodies: Vec<u8>,
    bounds: Vec<(u64, u64)>,
}

/// `range` cut at `mid` (inside it) into two ranges that answer every
/// address as it does: the second begins with the line row in effect at
/// `mid`, and each keeps the part of each inlined call within it.
fn split(range: &Range, mid: u64) -> [Range; 2] {
    let cut = range.lines.partition_point(|r| r.addr < mid);
    let (before, after) = range.lines.split_at(cut);
    let mut second = Vec::with_capacity(after.len() + 1);
    if let Some(&last) = before.last()
        && after.first().is_none_or(|r| r.addr != mid)
    {
        second.push(LineRow { addr: mid, ..last });
    }
    second.extend_from_slice(after);
    let within = |start: u64, end: u64| -> Vec<Inline> {
        range
            .inlines
            .iter()
            .filter_map(|i| {
                let (s, e) = (i.start.max(start), i.end.min(end));
                (s < e).then_some(Inline {
                    start: s,
                    end: e,
                    ..*i
                })
            })
            .collect()
    };
    [
        Range {
            start: range.start,
            end: mid,
            function: range.function,
            lines: before.to_vec(),
            inlines: within(range.start, mid),
        },
        Range {
            start: mid,
            end: range.end,
            function: range.function,
            lines: second,
            inlines: within(mid, range.end),
        },
    ]
}

/// One of a range's inline nodes as written: a call of `function` from
/// `call_file:call_line`, within its parent (1 + the index of an earlier
/// node of the range, 0 for the range's own function).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Node {
    function: u32,
    call_file: u32,
    call_line: u32,
    parent: u32,
}

/// One line row as written: from `offset` in the range on, `file:line`.
struct Row {
    offset: u32,
    line: u32,
    file: u32,
}

/// Writes the body of a range (see the layout in [`super`]) and returns
/// the format that reads it: each column as narrow as its values allow.
/// `chain` refers to `nodes` as 1 + an index.
fn write_body(
    rows: &[Row],
    chain: &[(u32, u32)],
    nodes: &[Node],
    widths: Widths,
    out: &mut Vec<u8>,
) -> Format {
    let mut table: Vec<u32> = Vec::new();
    let mut index: HashMap<u32, u32> = HashMap::new();
    let mut file_index = |file: u32| {
        *index.entry(file).or_insert_with(|| {
            table.push(file);
            to_u32(table.len() - 1)
        })
    };
    let row_files: Vec<u32> = rows.iter().map(|r| file_index(r.file)).collect();
    let call_files: Vec<u32> = nodes.iter().map(|n| file_index(n.call_file)).collect();
    // A range with more files than a format can count (none exists) keeps
    // the first ones; rows of the others read as "no file".
    table.truncate(MAX_RANGE_FILES);
    let row_offsets: Vec<u32> = rows.iter().map(|r| r.offset).collect();
    let chain_offsets: Vec<u32> = chain.iter().map(|&(offset, _)| offset).collect();
    let row_buckets = bucket_starts(&row_offsets);
    let chain_buckets = bucket_starts(&chain_offsets);
    let base = rows.iter().map(|r| r.line).min().unwrap_or(0);
    let top = rows.iter().map(|r| r.line).max().unwrap_or(0);
    let most_buckets = row_buckets.len().max(chain_buckets.len()).max(nodes.len());
    let format = Format {
        row_bucket: bucket_width(&row_buckets),
        line: Format::width_for(u64::from(top - base), true),
        file: Format::width_for(table.len().saturating_sub(1) as u64, true),
        chain_bucket: bucket_width(&chain_buckets),
        files: table.len(),
        count: if most_buckets > 0xffff { 4 } else { 2 },
        node: Format::width_for(nodes.len() as u64, false),
        call_line: Format::width_for(
            u64::from(nodes.iter().map(|n| n.call_line).max().unwrap_or(0)),
            true,
        ),
        function: widths.function(),
        file_entry: widths.file_entry(),
    };
    let put = |out: &mut Vec<u8>, v: u32, width: usize| {
        out.extend_from_slice(&v.to_le_bytes()[..width]);
    };
    if !rows.is_empty() {
        out.extend(base.to_le_bytes());
        put(out, to_u32(row_buckets.len()), format.count);
    }
    if !chain.is_empty() {
        put(out, to_u32(chain_buckets.len()), format.count);
        put(out, to_u32(nodes.len()), format.count);
    }
    for &start in &row_buckets {
        put(out, start, format.row_bucket);
    }
    out.extend(row_offsets.iter().map(|&o| o as u8));
    for &start in &chain_buckets {
        put(out, start, format.chain_bucket);
    }
    out.extend(chain_offsets.iter().map(|&o| o as u8));
    for r in rows {
        put(out, r.line - base, format.line);
    }
    for &i in &row_files {
        put(out, i, format.file);
    }
    // None (all ones) as all ones of the width.
    for f in table {
        put(out, f, format.file_entry);
    }
    for &(_, node) in chain {
        put(out, node, format.node);
    }
    for n in nodes {
        put(out, n.function, format.function);
    }
    for &i in &call_files {
        put(out, i, format.file);
    }
    for n in nodes {
        put(out, n.call_line, format.call_line);
    }
    for n in nodes {
        put(out, n.parent, format.node);
    }
    format
}

/// Whether an offset can follow `count` others in a column without its
/// bucket starts outgrowing the column: real code has many offsets per
/// bucket, but damaged symbols can put two rows gigabytes apart, whose
/// buckets would cost far more than the file they came from. Such an
/// offset (and those after it) is dropped.
fn buckets_in_bounds(offset: u64, count: usize) -> bool {
    offset >> BUCKET_SHIFT <= MAX_BUCKETS_PER_OFFSET * count as u64 + SPARSE_BUCKETS
}

/// The bucket starts of ascending `offsets`: for each bucket after the
/// first, up to the last offset's, the index of its first offset (the
/// first at or after the bucket's start).
fn bucket_starts(offsets: &[u32]) -> Vec<u32> {
    let Some(&last) = offsets.last() else {
        return Vec::new();
    };
    let mut starts = Vec::with_capacity((last >> BUCKET_SHIFT) as usize);
    let mut i = 0;
    for bucket in 1..=last >> BUCKET_SHIFT {
        while offsets[i] < bucket << BUCKET_SHIFT {
            i += 1;
        }
        starts.push(to_u32(i));
    }
    starts
}

/// The width of bucket starts: 0 when there are none.
fn bucket_width(starts: &[u32]) -> usize {
    match starts.last() {
        Some(&max) => Format::width_for(u64::from(max), false),
        None => 0,
    }
}

/// Sizes beyond `u32` cannot be written; a table that large (over 4 GiB of
/// symbols) is not something extraction produces.
fn to_u32(v: usize) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

/// A string as written: in a part, at an offset within that part, until
/// [`Strings::finish`] places the parts.
#[derive(Clone, Copy)]
struct Str {
    part: Part,
    offset: u32,
    len: u32,
}

/// Where a string is written.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Part {
    /// The start of the blob: what a lookup's caller reads (function and
    /// file names).
    Hot,
    /// The blob after the hot part: directories.
    Cold,
    /// The mangled names section, compressed (see [`packed`]): mangled
    /// names, and the hash text of Rust legacy names.
    Mangled,
}

/// A function's name as written.
#[derive(Clone, Copy)]
enum Name {
    Stored(Str),
    /// Not stored, as demangling the mangled name gives it: its slot in a
    /// reader's cache of demangled names, numbered from 0.
    Demangled(u32),
}

/// A function's mangled name as written.
#[derive(Clone, Copy)]
enum Mangled {
    None,
    Whole(Str),
    /// The hash of a Rust legacy name, which mangling the function's name
    /// with it gives back (see [`rust_legacy`]): kept in the record.
    Hash(u64),
    /// Such a hash that its value does not give back (not lower-case hex,
    /// as rustc writes them), or one with a `.llvm.` suffix after it: kept
    /// as text, the suffix after the hash.
    HashText(Str),
}

/// The blob, the mangled names section and the records that point into
/// them. Strings a lookup's caller reads (function and file names) go in
/// the hot part of the blob, directories in the cold part after it, so
/// that the cache lines a profile's names come from hold no others;
/// mangled names go in their own section, compressed. Each distinct
/// string is stored once, unless it begins another string of its part:
/// then it is read from there (see [`share_prefixes`]).
#[derive(Default)]
struct Strings {
    /// Per part, its strings so far.
    interned: [HashMap<String, Str>; 3],
    hot: Vec<u8>,
    cold: Vec<u8>,
    mangled: Vec<u8>,
    funcs: Vec<(Name, Mangled)>,
    /// Names not stored (see [`Name::Demangled`]) so far.
    demangled: u32,
    files: Vec<[Str; 2]>,
}

impl Strings {
    /// `s` in `part` (where readers look for it: the same text may be in
    /// two parts, as a C function's name that is its own mangled name).
    fn intern(&mut self, s: &str, part: Part) -> Str {
        if let Some(&at) = self.interned[part as usize].get(s) {
            return at;
        }
        let bytes = match part {
            Part::Hot => &mut self.hot,
            Part::Cold => &mut self.cold,
            Part::Mangled => &mut self.mangled,
        };
        let at = Str {
            part,
            offset: to_u32(bytes.len()),
            len: to_u32(s.len()),
        };
        bytes.extend_from_slice(s.as_bytes());
        self.interned[part as usize].insert(s.to_owned(), at);
        at
    }

    /// The funcs and files sections, the blob and the mangled names
    /// section.
    fn finish(self) -> (Vec<u8>, Vec<u8>, Vec<u8>, Vec<u8>) {
        let (hot, hot_moves) =
            share_prefixes(&self.hot, &self.interned[Part::Hot as usize], Part::Hot);
        let (cold, cold_moves) =
            share_prefixes(&self.cold, &self.interned[Part::Cold as usize], Part::Cold);
        let (mangled, mangled_moves) = share_prefixes(
            &self.mangled,
            &self.interned[Part::Mangled as usize],
            Part::Mangled,
        );
        let mut starts: Vec<u32> = mangled_moves.values().copied().collect();
        starts.sort_unstable();
        starts.dedup();
        let mangled = packed::pack(&mangled, starts.into_iter().map(|s| s as usize));
        let hot_len = to_u32(hot.len());
        // A string's (offset, len) pair, the cold part placed after the
        // hot one; the length's top bit left for `flag`.
        let pair = |s: Str, flag: u32| {
            let offset = match s.part {
                Part::Hot => hot_moves[&key(s)],
                Part::Cold => hot_len.saturating_add(cold_moves[&key(s)]),
                Part::Mangled => mangled_moves[&key(s)],
            };
            (u64::from(s.len | flag) << 32 | u64::from(offset)).to_le_bytes()
        };
        let mut funcs = Vec::with_capacity(16 * self.funcs.len());
        for &(name, mangled) in &self.funcs {
            let (flag, second) = match mangled {
                Mangled::None => (0, u64::from(NONE).to_le_bytes()),
                Mangled::Whole(s) => (0, pair(s, 0)),
                Mangled::Hash(hash) => (HASH_IN_RECORD, hash.to_le_bytes()),
                Mangled::HashText(s) => (0, pair(s, DERIVED)),
            };
            match name {
                Name::Stored(name) => funcs.extend(pair(name, flag)),
                Name::Demangled(slot) => {
                    funcs.extend((u64::from(DEMANGLED) << 32 | u64::from(slot)).to_le_bytes())
                }
            }
            funcs.extend(second);
        }
        let files: Vec<u8> = self
            .files
            .iter()
            .flatten()
            .flat_map(|&s| pair(s, 0))
            .collect();
        let mut blob = hot;
        blob.extend_from_slice(&cold);
        (funcs, files, blob, mangled)
    }
}

/// The strings of `which` part (`bytes`, whose strings are `interned`) without those that begin
/// another of its strings, each of which is read from the start of the
/// longest string it begins instead (`foo::bar` from
/// `foo::bar::{{closure}}`: 6% of a large Rust program's names). Returns
/// the part and where each string of `part`, by (offset, len), moved to
/// (an empty string may share its offset with the next string). A string
/// and its host are both valid UTF-8, so the host has a character
/// boundary where the string ends. The strings stay in the order they
/// were first used, but for mangled names, which are sorted: what
/// compresses them best (neighbours share their prefixes).
fn share_prefixes(
    bytes: &[u8],
    interned: &HashMap<String, Str>,
    which: Part,
) -> (Vec<u8>, HashMap<(u32, u32), u32>) {
    let mut strings: Vec<(&str, Str)> = interned.iter().map(|(s, &at)| (s.as_str(), at)).collect();
    // In sorted order a string that begins others is followed by one of
    // them, so the longest string each begins is found from the end.
    strings.sort_unstable_by(|a, b| a.0.cmp(b.0));
    let mut host: Vec<usize> = (0..strings.len()).collect();
    for i in (0..strings.len().saturating_sub(1)).rev() {
        if strings[i + 1].0.starts_with(strings[i].0) {
            host[i] = host[i + 1];
        }
    }
    // The strings that stay, in the order they were first used (sorted
    // already, for mangled names).
    let mut kept: Vec<usize> = (0..strings.len()).filter(|&i| host[i] == i).collect();
    if which != Part::Mangled {
        kept.sort_unstable_by_key(|&i| strings[i].1.offset);
    }
    let mut out = Vec::with_capacity(bytes.len());
    let mut moved = HashMap::with_capacity(strings.len());
    for &i in &kept {
        moved.insert(key(strings[i].1), to_u32(out.len()));
        out.extend_from_slice(strings[i].0.as_bytes());
    }
    for (i, &h) in host.iter().enumerate() {
        let to = moved[&key(strings[h].1)];
        moved.insert(key(strings[i].1), to);
    }
    (out, moved)
}

fn key(s: Str) -> (u32, u32) {
    (s.offset, s.len)
}

/// Interning state: each function, file and string is written once,
/// numbered in order of first use, which keeps the output deterministic.
#[derive(Default)]
struct Writer {
    func_ids: HashMap<u32, u32>,
    file_ids: HashMap<u32, u32>,
    strings: Strings,
}

impl Writer {
    /// Writes `range`'s record and body to `out`. In a compact layout, a
    /// range with more line rows or chain entries than its record counts
    /// (none seen in real programs) is written as its two halves, each
    /// again so, until they are small enough.
    fn range(&mut self, table: &SymbolTable, range: &Range, out: &mut Ranges) {
        let len = u32::try_from(range.end.saturating_sub(range.start)).unwrap_or(u32::MAX);
        let function = self.function(table, range.function);
        let rows = self.rows(table, range, len);
        let (chain, nodes) = self.chain(table, range);
        let counts = [rows.len(), chain.len()];
        // Rows and chain entries lie at distinct offsets, so a range with
        // too many is at least 2 bytes long, and its halves are shorter.
        if out.layout.records == Records::Compact
            && counts.iter().any(|&c| c > MAX_COMPACT_COUNT)
            && len >= 2
        {
            for half in split(range, range.start + u64::from(len / 2)) {
                self.range(table, &half, out);
            }
            return;
        }
        let body = to_u32(out.bodies.len());
        let format = write_body(&rows, &chain, &nodes, out.layout.widths, &mut out.bodies).pack();
        let fields: &[u32] = match out.layout.records {
            Records::Compact => {
                out.records.extend((range.start as u32).to_le_bytes());
                let [rows, chains] = counts.map(|c| c.min(MAX_COMPACT_COUNT) as u32);
                &[len, function, body, format, rows | chains << 16]
            }
            Records::Full => {
                out.records.extend(range.start.to_le_bytes());
                let [rows, chains] = counts.map(to_u32);
                &[len, function, body, rows, chains, format]
            }
        };
        out.records
            .extend(fields.iter().flat_map(|v| v.to_le_bytes()));
        out.bounds.push((range.start, range.start + u64::from(len)));
    }

    fn function(&mut self, table: &SymbolTable, f: u32) -> u32 {
        let Some(func) = table.functions.get(f as usize) else {
            return NONE;
        };
        if let Some(&id) = self.func_ids.get(&f) {
            return id;
        }
        let mangled = match func.mangled.as_deref() {
            None => Mangled::None,
            // Mangling the name again gives this one: its hash is enough.
            Some(m) => match rust_legacy::derivation(&func.name, m) {
                Some((hash, "")) if let Some(value) = rust_legacy::hash_value(hash) => {
                    Mangled::Hash(value)
                }
                Some((hash, suffix)) => Mangled::HashText(
                    self.strings
                        .intern(&format!("{hash}{suffix}"), Part::Mangled),
                ),
                // Longer than a compressed block may be: not kept (none
                // seen comes near).
                None if m.len() > packed::MAX_STRING => Mangled::None,
                None => Mangled::Whole(self.strings.intern(m, Part::Mangled)),
            },
        };
        // A name that demangling the mangled one gives back (C++, Rust v0)
        // is not stored: readers demangle it (see `names::DEMANGLED`).
        let name = match (func.mangled.as_deref(), mangled) {
            (Some(m), Mangled::Whole(_))
                if demangle::demangle(m).as_deref() == Some(func.name.as_str()) =>
            {
                let slot = self.strings.demangled;
                self.strings.demangled += 1;
                Name::Demangled(slot)
            }
            _ => Name::Stored(self.strings.intern(&func.name, Part::Hot)),
        };
        let id = to_u32(self.strings.funcs.len());
        self.strings.funcs.push((name, mangled));
        self.func_ids.insert(f, id);
        id
    }

    fn file(&mut self, table: &SymbolTable, f: u32) -> u32 {
        let Some(file) = table.files.get(f as usize) else {
            return NONE;
        };
        if let Some(&id) = self.file_ids.get(&f) {
            return id;
        }
        let dir = self.strings.intern(&file.dir, Part::Cold);
        let name = self.strings.intern(&file.name, Part::Hot);
        let id = to_u32(self.strings.files.len());
        self.strings.files.push([dir, name]);
        self.file_ids.insert(f, id);
        id
    }

    /// The line rows of `range` as written (`len`, rather than
    /// `range.end`, is the length as written, which only differs for a
    /// range cut to 4 GiB).
    fn rows(&mut self, table: &SymbolTable, range: &Range, len: u32) -> Vec<Row> {
        let end = range.start + u64::from(len);
        let mut rows: Vec<Row> = Vec::with_capacity(range.lines.len());
        for row in &range.lines {
            // Rows must go forward within the range; extraction makes them
            // so, and anything else is dropped rather than encoded wrongly.
            let offset = row.addr.wrapping_sub(range.start);
            if row.addr < range.start
                || row.addr >= end
                || rows.last().is_some_and(|r| u64::from(r.offset) >= offset)
                || !buckets_in_bounds(offset, rows.len())
            {
                continue;
            }
            rows.push(Row {
                offset: offset as u32,
                line: row.line,
                file: self.file(table, row.file),
            });
        }
        rows
    }

    /// The chain entries of `range` and its inline nodes: at every offset
    /// where the set of inlined calls around it changes, the innermost
    /// call's node (1 + its index, 0 for none). Each distinct node is
    /// written once, numbered in order of first use, so parents come
    /// before their children.
    fn chain(&mut self, table: &SymbolTable, range: &Range) -> (Vec<(u32, u32)>, Vec<Node>) {
        let mut out = Vec::new();
        let mut nodes: Vec<Node> = Vec::new();
        let mut ids: HashMap<Node, u32> = HashMap::new();
        let mut last = 0;
        chains::changes(range, |at, calls| {
            let mut id = 0;
            for c in calls {
                let node = Node {
                    function: self.function(table, c.function),
                    call_file: self.file(table, c.call_file),
                    call_line: c.call_line,
                    parent: id,
                };
                id = *ids.entry(node).or_insert_with(|| {
                    nodes.push(node);
                    to_u32(nodes.len())
                });
            }
            let offset = at - range.start;
            if id != last && buckets_in_bounds(offset, out.len()) {
                out.push((to_u32(offset as usize), id));
                last = id;
            }
        });
        (out, nodes)
    }
}
