//! Frames from the names runtimes write in their perf maps. Most names
//! are kept as written; two runtimes put more in them than a function:
//!
//! - V8 (Node's `--perf-basic-prof`) writes `JS:*sixty /app/main.js:14:15`:
//!   a tag saying what the code is, a tier mark (`~` interpreted, `^`
//!   Sparkplug, `+` Maglev, `*` TurboFan), the function (empty when
//!   anonymous), and where it starts. A JavaScript function becomes its
//!   name with that script and line, so its tiers are one frame; builtins,
//!   stubs and handlers keep their tagged name.
//! - .NET ends names with the code's tier (`[OptimizedTier1]`,
//!   `[QuickJitted]`…), dropped for the same reason.

use kiln_model::{Frame, FrameKind};

/// The frame of JIT code a perf map does not name: said, never guessed.
pub const UNKNOWN_JIT_FRAME: &str = "[unknown JIT]";

/// V8's tags of JavaScript code (`CodeTag`, as its log names them; `JS`
/// since V8 10, `LazyCompile` and `Function` before).
const V8_FUNCTION_TAGS: [&str; 6] = [
    "JS:",
    "LazyCompile:",
    "Function:",
    "InterpretedFunction:",
    "Script:",
    "Eval:",
];

/// V8's tier marks, in front of a JavaScript function's name.
const V8_TIER_MARKS: [char; 4] = ['~', '^', '+', '*'];

/// .NET's code tiers, as it appends them in brackets.
const DOTNET_TIERS: [&str; 11] = [
    "PreJIT",
    "QuickJitted",
    "Optimized",
    "OptimizedTier1",
    "OptimizedTier1OSR",
    "Tier0",
    "Tier1",
    "Instrumented",
    "InstrumentedTier",
    "InstrumentedTier1",
    "Interpreted",
];

/// The frame of code a perf map calls `name`.
pub(crate) fn frame_of(name: &str) -> Frame {
    if let Some(frame) = v8_function(name) {
        return frame;
    }
    jit_frame(without_dotnet_tier(name).to_owned(), None, 0)
}

/// The marker frame of JIT code without a name.
pub(crate) fn unknown_jit() -> Frame {
    Frame::named(FrameKind::Jit, UNKNOWN_JIT_FRAME)
}

fn jit_frame(function: String, file: Option<String>, line: u32) -> Frame {
    Frame::Named {
        kind: FrameKind::Jit,
        function,
        module: None,
        file,
        line,
    }
}

/// A V8 JavaScript function's frame: its name (`(anonymous)` when it has
/// none), script and line.
fn v8_function(name: &str) -> Option<Frame> {
    let rest = V8_FUNCTION_TAGS
        .iter()
        .find_map(|tag| name.strip_prefix(tag))?;
    let rest = rest.strip_prefix(V8_TIER_MARKS).unwrap_or(rest);
    // `function script:line:column`; an accessor's name has a space of its
    // own (`get size`); a script's path may too, so the function is what
    // comes before the first space (the second for an accessor).
    let split = match rest
        .strip_prefix("get ")
        .or_else(|| rest.strip_prefix("set "))
    {
        Some(after) => after.find(' ').map(|at| at + 4),
        None => rest.find(' '),
    };
    let (function, location) = match split {
        Some(at) => (&rest[..at], Some(&rest[at + 1..])),
        None => (rest, None),
    };
    let function = match function {
        "" => "(anonymous)".to_owned(),
        f => f.to_owned(),
    };
    let (file, line) = location.map_or((None, 0), |l| {
        let (file, line) = script_line(l);
        (Some(file.to_owned()), line)
    });
    Some(jit_frame(function, file, line))
}

/// `script:line:column` or `script:line` as (script, line); a location
/// without numbers is all script, line 0.
fn script_line(location: &str) -> (&str, u32) {
    let number = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let Some((head, last)) = location.rsplit_once(':').filter(|(_, n)| number(n)) else {
        return (location, 0);
    };
    match head.rsplit_once(':').filter(|(_, n)| number(n)) {
        Some((script, line)) => (script, line.parse().unwrap_or(0)),
        None => (head, last.parse().unwrap_or(0)),
    }
}

/// `name` without a trailing .NET tier (`…::Run()[OptimizedTier1]`).
fn without_dotnet_tier(name: &str) -> &str {
    let Some(body) = name.strip_suffix(']') else {
        return name;
    };
    match body.rsplit_once('[') {
        Some((before, tier)) if DOTNET_TIERS.contains(&tier) && !before.is_empty() => before,
        _ => name,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(frame: &Frame) -> (&str, Option<&str>, u32) {
        match frame {
            Frame::Named {
                kind: FrameKind::Jit,
                function,
                file,
                line,
                ..
            } => (function, file.as_deref(), *line),
            other => panic!("{other:?}"),
        }
    }

    // Guards V8's names on Node 20 (JS:) and before (LazyCompile:): every
    // tier of a function is one frame with its script and line; anonymous
    // functions, accessors, paths with spaces; builtins kept whole.
    #[test]
    fn v8_functions_lose_tag_and_tier_and_keep_script_and_line() {
        for name in [
            "JS:*sixty /tmp/pm/shares.js:14:15",
            "JS:~sixty /tmp/pm/shares.js:14:15",
            "JS:^sixty /tmp/pm/shares.js:14:15",
            "JS:+sixty /tmp/pm/shares.js:14:15",
            "LazyCompile:*sixty /tmp/pm/shares.js:14",
        ] {
            assert_eq!(
                parts(&frame_of(name)),
                ("sixty", Some("/tmp/pm/shares.js"), 14),
                "{name}"
            );
        }
        assert_eq!(
            parts(&frame_of("JS:~ node:internal/main/run_main_module:1:1")),
            ("(anonymous)", Some("node:internal/main/run_main_module"), 1)
        );
        assert_eq!(
            parts(&frame_of("JS:^get size /srv/my app/lib.js:7:3")),
            ("get size", Some("/srv/my app/lib.js"), 7)
        );
        assert_eq!(
            parts(&frame_of("LazyCompile:~Module._compile")),
            ("Module._compile", None, 0)
        );
        assert_eq!(
            parts(&frame_of("JS:*f file-without-line")),
            ("f", Some("file-without-line"), 0)
        );
        assert_eq!(
            parts(&frame_of("Builtin:ArrayPrototypePush")),
            ("Builtin:ArrayPrototypePush", None, 0)
        );
        assert_eq!(
            parts(&frame_of("RegExp:[a-z]+")),
            ("RegExp:[a-z]+", None, 0)
        );
    }

    // Guards .NET's tiers: dropped when known, kept when not a tier.
    #[test]
    fn dotnet_tiers_are_dropped() {
        assert_eq!(
            parts(&frame_of("void [App] App.Program::Spin()[OptimizedTier1]")).0,
            "void [App] App.Program::Spin()"
        );
        assert_eq!(
            parts(&frame_of(
                "int32 [App] App.Program::Sum(int32[])[QuickJitted]"
            ))
            .0,
            "int32 [App] App.Program::Sum(int32[])"
        );
        assert_eq!(parts(&frame_of("Array[int]")).0, "Array[int]");
        assert_eq!(parts(&frame_of("[Tier1]")).0, "[Tier1]");
        assert_eq!(
            parts(&frame_of("java.lang.String::hashCode")).0,
            "java.lang.String::hashCode"
        );
    }
}
