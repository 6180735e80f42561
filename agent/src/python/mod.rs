//! CPython frames in native stacks.
//!
//! A profiled Python program is, to a native unwinder, the interpreter:
//! `_PyEval_EvalFrameDefault` over and over. Where the eBPF walk meets that
//! function, it reads the Python frames that activation runs out of the
//! interpreter's memory instead (`walk.bpf.h`, `python_frame()`), with
//! what this module tells it per process ([`bpf_entry`]): where the
//! bytecode loop and the runtime state are ([`detect`]), and the layout of
//! the interpreter's structs in that version ([`layout`]; from 3.13, the
//! interpreter's own `_Py_DebugOffsets`). Each Python frame comes back as
//! a code object's address and an instruction offset; [`PythonNamer`]
//! reads the code object once per process (name, file, line table) and
//! turns it into a named `python` frame with its line ([`linetable`]).

mod code;
mod detect;
pub mod layout;
pub mod linetable;

use std::collections::HashMap;
use std::sync::Arc;

use kiln_model::{Frame, FrameKind};

pub use crate::memory::{Memory, MemoryImage, ProcessMemory};
pub use code::{CodeError, CodeInfo};
pub use detect::{Interpreter, inspect, may_be_python};

use crate::abi::{self, PythonProc};
use layout::{Layout, PyVersion};

/// Code objects remembered (over all processes) before the cache starts
/// over: a few hundred bytes each.
const MAX_CODES: usize = 64 * 1024;
/// Bytes of code objects remembered before the cache starts over: what a
/// process showing fake frames with huge line tables could make the agent
/// hold is bounded by this, not by what it shows.
const MAX_CODE_BYTES: usize = 64 << 20;

/// The oldest version whose frames are read.
const OLDEST: PyVersion = PyVersion {
    major: 3,
    minor: 10,
};

/// What the eBPF walker needs to read the frames of a process running
/// `interp`, whose file is loaded `bias` bytes above its virtual addresses.
pub fn bpf_entry(interp: &Interpreter, bias: u64) -> PythonProc {
    let mut entry = PythonProc {
        eval_start: interp.eval.start.wrapping_add(bias),
        eval_end: interp.eval.end.wrapping_add(bias),
        runtime: interp.runtime.wrapping_add(bias),
        ..PythonProc::default()
    };
    let Some(l) = readable_layout(interp) else {
        // Each activation becomes a marker naming the version.
        return entry;
    };
    let v311 = l.version
        >= PyVersion {
            major: 3,
            minor: 11,
        };
    entry.code_mask = l.code_tag_mask;
    entry.interpreters_head = l.runtime_interpreters_head;
    entry.threads_head = l.interp_threads_head;
    entry.tstate_next = l.tstate_next;
    entry.tstate_frame = l.tstate_frame;
    entry.cframe_current_frame = l.cframe_current_frame.unwrap_or(abi::PY_NONE);
    entry.frame_previous = l.frame_previous;
    entry.frame_code = l.frame_code;
    entry.frame_instr = l.frame_instr;
    (entry.entry, entry.frame_entry) = match (l.frame_is_entry, l.frame_owner) {
        (Some(flag), _) => (abi::PY_ENTRY_FLAG, flag),
        (None, Some(owner)) => (abi::PY_ENTRY_SHIM, owner),
        (None, None) => (abi::PY_ENTRY_ONE, abi::PY_NONE),
    };
    entry.owner_cstack = l.owner_cstack;
    entry.instr_is_pointer = u8::from(v311);
    // 3.11+ keep the thread's tid (native_thread_id); 3.10 only
    // pthread_self().
    match l.tstate_native_thread_id {
        Some(at) if v311 => {
            entry.tstate_thread_id = at;
            entry.thread_id_is_tid = 1;
        }
        _ => entry.tstate_thread_id = l.tstate_thread_id,
    }
    entry.supported = 1;
    entry
}

/// The layout of `interp` when its frames can be read.
fn readable_layout(interp: &Interpreter) -> Option<&Layout> {
    interp.layout.as_ref().filter(|_| interp.version >= OLDEST)
}

/// Turns the Python entries of recorded stacks into named frames,
/// remembering each code object it read.
#[derive(Debug, Default)]
pub struct PythonNamer {
    codes: HashMap<(u32, u64), Option<Arc<CodeInfo>>>,
    /// Bytes the remembered code objects hold.
    bytes: usize,
}

impl PythonNamer {
    /// A namer with nothing read yet.
    pub fn new() -> Self {
        PythonNamer::default()
    }

    /// The frame for the stack entry `entry` (one with [`abi::PY_FRAME`]
    /// set) of process `pid`, which runs `interp`; its memory read
    /// through `mem` the first time a code object is met.
    pub fn frame(&mut self, pid: u32, interp: &Interpreter, entry: u64, mem: &dyn Memory) -> Frame {
        let code = entry & abi::PY_CODE_MASK;
        let instr = ((entry >> abi::PY_INSTR_SHIFT) & abi::PY_INSTR_MAX) as u16;
        if code == 0 {
            return marker(interp, u64::from(instr));
        }
        let Some(layout) = readable_layout(interp) else {
            return marker(interp, abi::PY_MARK_UNSUPPORTED);
        };
        if self.codes.len() >= MAX_CODES || self.bytes >= MAX_CODE_BYTES {
            self.codes.clear();
            self.bytes = 0;
        }
        let bytes = &mut self.bytes;
        let info = self.codes.entry((pid, code)).or_insert_with(|| {
            match CodeInfo::read(mem, layout, code) {
                Ok(info) => {
                    *bytes += info.size();
                    Some(Arc::new(info))
                }
                Err(e) => {
                    tracing::debug!(pid, code, error = %e, "unreadable Python code object");
                    None
                }
            }
        });
        match info {
            Some(info) => Frame::Named {
                kind: FrameKind::Python,
                function: info.name.clone(),
                module: None,
                file: Some(info.file.clone()),
                line: info.line(instr),
            },
            None => marker(interp, abi::PY_MARK_UNREADABLE),
        }
    }

    /// Bytes the remembered code objects hold.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

/// The frame that stands for Python frames that could not be read.
fn marker(interp: &Interpreter, mark: u64) -> Frame {
    let v = interp.version;
    let what = match mark {
        abi::PY_MARK_UNSUPPORTED => format!("unsupported {}.{}", v.major, v.minor),
        abi::PY_MARK_NO_THREAD => "no thread state".to_string(),
        _ => "unreadable".to_string(),
    };
    Frame::Named {
        kind: FrameKind::Python,
        function: format!("[python: {what}]"),
        module: None,
        file: None,
        line: 0,
    }
}

/// The script a Python process runs, from its stack (root first): the
/// file of the outermost `<module>` frame that is not `runpy`'s own (`-m`
/// runs the module under runpy), without its directories. Read from the
/// interpreter's memory rather than the command line, which may hold
/// secrets and whose relative paths say nothing on their own.
pub fn script_of(frames: &[Frame]) -> Option<String> {
    frames.iter().find_map(|f| match f {
        Frame::Named {
            kind: FrameKind::Python,
            function,
            file: Some(file),
            ..
        } if function == "<module>" && !file.contains("runpy") && !file.starts_with('<') => {
            Some(file.rsplit('/').next().unwrap_or(file).to_string())
        }
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use layout::known_layout;

    fn interpreter(minor: u8) -> Interpreter {
        let version = PyVersion { major: 3, minor };
        Interpreter {
            version,
            layout: known_layout(version),
            eval: 0x1000..0x2000,
            runtime: 0x9000,
        }
    }

    fn python(function: &str, file: &str) -> Frame {
        Frame::Named {
            kind: FrameKind::Python,
            function: function.into(),
            module: None,
            file: Some(file.into()),
            line: 1,
        }
    }

    #[test]
    fn the_program_is_told_how_each_version_ends_an_activation() {
        let bias = 0x7f00_0000_0000;
        let e = bpf_entry(&interpreter(10), bias);
        assert_eq!(
            (e.entry, e.instr_is_pointer, e.thread_id_is_tid),
            (abi::PY_ENTRY_ONE, 0, 0)
        );
        let e = bpf_entry(&interpreter(11), bias);
        assert_eq!(
            (e.entry, e.instr_is_pointer, e.thread_id_is_tid),
            (abi::PY_ENTRY_FLAG, 1, 1)
        );
        assert_ne!(
            e.cframe_current_frame,
            abi::PY_NONE,
            "3.11 reaches its frame through _PyCFrame"
        );
        for minor in [12, 13, 14] {
            let e = bpf_entry(&interpreter(minor), bias);
            assert_eq!(e.entry, abi::PY_ENTRY_SHIM, "3.{minor}");
            assert_eq!(e.supported, 1);
            assert_eq!(
                (e.eval_start, e.eval_end, e.runtime),
                (bias + 0x1000, bias + 0x2000, bias + 0x9000)
            );
        }
        assert_eq!(
            bpf_entry(&interpreter(14), bias).code_mask,
            !3,
            "3.14 tags its code references"
        );
        let old = Interpreter {
            layout: None,
            ..interpreter(9)
        };
        assert_eq!(
            bpf_entry(&old, bias).supported,
            0,
            "a version without a layout"
        );
    }

    #[test]
    fn markers_name_what_went_wrong() {
        let mut namer = PythonNamer::new();
        let mem = MemoryImage::new();
        let marker = |mark: u64| abi::PY_FRAME | mark << abi::PY_INSTR_SHIFT;
        let name = |f: Frame| match f {
            Frame::Named { function, .. } => function,
            other => panic!("{other:?}"),
        };
        let old = Interpreter {
            layout: None,
            ..interpreter(9)
        };
        assert_eq!(
            name(namer.frame(1, &old, marker(abi::PY_MARK_UNSUPPORTED), &mem)),
            "[python: unsupported 3.9]"
        );
        let i = interpreter(12);
        assert_eq!(
            name(namer.frame(1, &i, marker(abi::PY_MARK_NO_THREAD), &mem)),
            "[python: no thread state]"
        );
        assert_eq!(
            name(namer.frame(1, &i, marker(abi::PY_MARK_UNREADABLE), &mem)),
            "[python: unreadable]"
        );
        // A code object that cannot be read (the process is gone).
        assert_eq!(
            name(namer.frame(1, &i, abi::PY_FRAME | 0x5000, &mem)),
            "[python: unreadable]"
        );
    }

    #[test]
    fn the_script_is_the_outermost_module_outside_runpy() {
        let stack = [
            python("_run_module_as_main", "<frozen runpy>"),
            python("<module>", "/usr/lib/python3.11/runpy.py"),
            python("<module>", "/srv/kestrel/kestrel_service.py"),
            python("<module>", "/usr/lib/python3.11/json/__init__.py"),
        ];
        assert_eq!(script_of(&stack).as_deref(), Some("kestrel_service.py"));
        assert_eq!(
            script_of(&[python("worker", "/srv/w.py")]),
            None,
            "a thread's stack without <module>"
        );
    }

    // Guards the namer's memory against a hostile process: fake frames
    // whose code objects carry the largest line table read cost the cache
    // at most its budget.
    #[test]
    fn hostile_code_objects_cost_at_most_the_budget() {
        let interp = interpreter(12);
        let layout = interp.layout.clone().unwrap();
        let mut img = MemoryImage::new();
        let (name, file, table) = (0x20_0000u64, 0x21_0000u64, 0x30_0000u64);
        for at in [name, file] {
            img.put_u32(
                at + u64::from(layout.unicode_state),
                1 << layout.unicode_kind_shift
                    | 1 << layout.unicode_compact_bit
                    | 1 << layout.unicode_ascii_bit,
            );
            img.put_u64(at + u64::from(layout.unicode_length), 1);
            img.put(at + u64::from(layout.unicode_ascii_data), b"f");
        }
        let huge = 256 << 10;
        img.put_u64(table + u64::from(layout.bytes_size), huge as u64);
        img.put(table + u64::from(layout.bytes_data), &vec![0u8; huge]);
        let mut namer = PythonNamer::new();
        let mut most = 0;
        for i in 0..400u64 {
            let code = 0x100_0000 + i * 0x1000;
            img.put_u64(code + u64::from(layout.code_qualname.unwrap()), name);
            img.put_u64(code + u64::from(layout.code_filename), file);
            img.put_u64(code + u64::from(layout.code_linetable), table);
            img.put_u32(code + u64::from(layout.code_firstlineno), 1);
            namer.frame(1, &interp, abi::PY_FRAME | code, &img);
            most = most.max(namer.bytes());
        }
        assert!(
            most > MAX_CODE_BYTES / 2,
            "the tables were read ({most} bytes)"
        );
        assert!(
            most <= MAX_CODE_BYTES + (300 << 10),
            "the cache held {most} bytes"
        );
    }
}
