//! Locations → Kiln frames, by the frame type the producer gives each
//! location (`profile.frame.type`).
//!
//! Native code without lines becomes an address frame in its mapping's
//! file (`FileId` from the GNU build id, the rule the agent and symbol
//! uploads share), so Kiln's symbolizer names it from uploaded, crawled
//! or debuginfod symbols. Everything the producer named stays as named,
//! with the kind of code it is. A location's lines are innermost first
//! (inlined functions, then the function they were inlined into); its
//! frames are kept root first, as stacks are.

use std::sync::Arc;

use kiln_model::{Executable, FileId, Frame, FrameKind};
use opentelemetry_proto::tonic::profiles::v1development::{Location, Mapping};

use super::attributes::FRAME_TYPE;
use super::dictionary::Dictionary;
use super::error::ProfileProblem;
use super::warnings::Warnings;
use crate::module;
use crate::stack::line_frame;

/// The mapping attribute with the file's GNU build id (hex).
const BUILD_ID_GNU: &str = "process.executable.build_id.gnu";
/// The mapping attribute with the OpenTelemetry profiler's own file id:
/// 16 bytes of SHA-256 over the file's head, tail and length (hex).
const BUILD_ID_HTLHASH: &str = "process.executable.build_id.htlhash";

/// The kernel image's module name, as Kiln's agent names kernel frames.
const KERNEL_IMAGE: &str = "[kernel.kallsyms]";

/// A location's frames, root first, and the executable its address frame
/// points into (to be recorded in the batch).
#[derive(Debug, Clone)]
pub(super) struct LocationFrames {
    pub frames: Arc<[Frame]>,
    pub executable: Option<Executable>,
    /// Bytes of names its frames hold.
    pub bytes: usize,
}

/// What a mapping tells about the frames in it.
#[derive(Debug, Clone, Default)]
pub(super) struct MappingInfo {
    /// The file's name (its path's last part).
    basename: String,
    /// Its id, from a build id.
    file_id: Option<FileId>,
    /// What the batch records of it: only files with a GNU build id, which
    /// debuginfod can be asked for.
    executable: Option<Executable>,
}

/// What kind of code a location is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FrameType {
    Native,
    Kernel,
    Go,
    /// Interpreted or JIT-compiled code, named by the producer.
    Interpreted(FrameKind),
    /// An unwinding that failed.
    Abort,
}

/// The frame type of `name` (`profile.frame.type`'s values, from the
/// OpenTelemetry eBPF profiler's `libpf.FrameType`, and semantic
/// conventions' `rust`); `None` for one Kiln does not know.
fn frame_type(name: &str) -> Option<FrameType> {
    Some(match name {
        "native" | "rust" | "unknown" => FrameType::Native,
        "kernel" => FrameType::Kernel,
        "go" => FrameType::Go,
        "cpython" => FrameType::Interpreted(FrameKind::Python),
        "jvm" => FrameType::Interpreted(FrameKind::Jvm),
        "v8js" => FrameType::Interpreted(FrameKind::V8),
        "ruby" => FrameType::Interpreted(FrameKind::Ruby),
        "php" => FrameType::Interpreted(FrameKind::Php),
        "dotnet" => FrameType::Interpreted(FrameKind::Dotnet),
        "perl" => FrameType::Interpreted(FrameKind::Perl),
        "beam" => FrameType::Interpreted(FrameKind::Beam),
        "abort-marker" => FrameType::Abort,
        _ => return None,
    })
}

/// What mapping `index` says (index 0: none).
pub(super) fn mapping_info(
    dict: &Dictionary<'_>,
    index: i32,
    warnings: &mut Warnings,
) -> Result<MappingInfo, ProfileProblem> {
    let field = || format!("dictionary.mappingTable[{index}]");
    let mapping: &Mapping = dict.mapping(index, field)?;
    let path = dict.string(mapping.filename_strindex, || {
        format!("{}.filenameStrindex", field())
    })?;
    let basename = module::basename(path).to_owned();
    let mut gnu = None;
    let mut htlhash = None;
    for (i, &a) in mapping.attribute_indices.iter().enumerate() {
        let at = || format!("{}.attributeIndices[{i}]", field());
        let Some((key, value)) = dict.attribute(a, at)? else {
            continue;
        };
        let slot = match key {
            BUILD_ID_GNU => &mut gnu,
            BUILD_ID_HTLHASH => &mut htlhash,
            _ => continue,
        };
        match dict
            .string_value(value, at)?
            .and_then(|hex| from_hex(hex).map(|b| (hex, b)))
        {
            Some(id) => *slot = Some(id),
            None => warnings.once(format!("{}: {key} is not a hex build id", field())),
        }
    }
    let (file_id, executable) = match (gnu, htlhash) {
        (Some((hex, bytes)), _) => {
            let file_id = FileId::from_build_id(&bytes);
            let executable = Executable {
                file_id,
                name: basename.clone(),
                build_id: Some(hex.to_ascii_lowercase()),
            };
            (Some(file_id), Some(executable))
        }
        // Another id space than Kiln's own file ids (those of files
        // without a build id hash other bytes): frames keep their
        // addresses, and match what is uploaded under the same id.
        (None, Some((_, bytes))) if bytes.len() == 16 => {
            (Some(FileId::from_build_id(&bytes)), None)
        }
        _ => (None, None),
    };
    Ok(MappingInfo {
        basename,
        file_id,
        executable,
    })
}

/// Bytes of a hex string: an even number of digits, at most 64 bytes (as
/// [`kiln_model::MAX_BUILD_ID_LEN`] allows in hex).
fn from_hex(hex: &str) -> Option<Vec<u8>> {
    if hex.is_empty() || !hex.len().is_multiple_of(2) || hex.len() > kiln_model::MAX_BUILD_ID_LEN {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The frames of `location` (entry `index` of the location table), with
/// `mapping` its mapping's info.
pub(super) fn location_frames(
    dict: &Dictionary<'_>,
    index: i32,
    location: &Location,
    mapping: Option<&MappingInfo>,
    warnings: &mut Warnings,
) -> Result<LocationFrames, ProfileProblem> {
    let field = || format!("dictionary.locationTable[{index}]");
    let mut type_name = None;
    for (i, &a) in location.attribute_indices.iter().enumerate() {
        let at = || format!("{}.attributeIndices[{i}]", field());
        if let Some((FRAME_TYPE, value)) = dict.attribute(a, at)? {
            type_name = dict.string_value(value, at)?;
        }
    }
    let module = mapping
        .map(|m| m.basename.as_str())
        .filter(|m| !m.is_empty());
    let kind = match type_name {
        Some(name) => frame_type(name).unwrap_or_else(|| {
            warnings.once(format!(
                "frame type {name:?} is not known to Kiln: its frames are taken as native"
            ));
            FrameType::Native
        }),
        // Without a type, a kernel image or module is kernel code.
        None if module.is_some_and(module::is_kernel) => FrameType::Kernel,
        None => FrameType::Native,
    };
    let named = |kind: FrameKind, module: Option<&str>| -> Result<Vec<Frame>, ProfileProblem> {
        lines(dict, index, location, kind, module)
    };
    let mut executable = None;
    let frames = match kind {
        FrameType::Abort => vec![Frame::named(FrameKind::Truncated, "[unwinding aborted]")],
        FrameType::Kernel => {
            let module = kernel_module(module.unwrap_or(""));
            let frames = named(FrameKind::Kernel, Some(&module))?;
            if frames.is_empty() {
                vec![Frame::Named {
                    kind: FrameKind::Kernel,
                    function: "[unknown]".to_owned(),
                    module: Some(module),
                    file: None,
                    line: 0,
                }]
            } else {
                frames
            }
        }
        FrameType::Interpreted(kind) => {
            let frames = named(kind, None)?;
            if frames.is_empty() {
                let name = type_name.unwrap_or(kind.as_str());
                vec![Frame::named(kind, format!("[{name}: unknown]"))]
            } else {
                frames
            }
        }
        FrameType::Native | FrameType::Go => {
            let kind = if kind == FrameType::Go {
                FrameKind::Go
            } else {
                FrameKind::Native
            };
            let frames = named(kind, module)?;
            if !frames.is_empty() {
                frames
            } else if let Some(file_id) = mapping.and_then(|m| m.file_id) {
                executable = mapping.and_then(|m| m.executable.clone());
                vec![Frame::Address {
                    kind: FrameKind::Native,
                    file_id,
                    addr: location.address,
                }]
            } else if let Some(module) = module {
                vec![Frame::Named {
                    kind: FrameKind::Native,
                    function: format!("{:#x}", location.address),
                    module: Some(module.to_owned()),
                    file: None,
                    line: 0,
                }]
            } else {
                vec![Frame::named(FrameKind::Native, "[unknown]")]
            }
        }
    };
    let bytes = frames.iter().map(bytes_of).sum();
    Ok(LocationFrames {
        frames: frames.into(),
        executable,
        bytes,
    })
}

/// One frame per line of `location`, root first (the lines are innermost
/// first); none when it has no lines.
fn lines(
    dict: &Dictionary<'_>,
    index: i32,
    location: &Location,
    kind: FrameKind,
    module: Option<&str>,
) -> Result<Vec<Frame>, ProfileProblem> {
    let mut frames = Vec::with_capacity(location.lines.len());
    for (i, line) in location.lines.iter().enumerate().rev() {
        let at = || format!("dictionary.locationTable[{index}].lines[{i}]");
        let function = dict.function(line.function_index, || format!("{}.functionIndex", at()))?;
        let (mut name, mut file) = ("", "");
        if let Some(f) = function {
            let ff = || format!("dictionary.functionTable[{}]", line.function_index);
            name = dict.string(f.name_strindex, || format!("{}.nameStrindex", ff()))?;
            if name.is_empty() {
                name = dict.string(f.system_name_strindex, || {
                    format!("{}.systemNameStrindex", ff())
                })?;
            }
            file = dict.string(f.filename_strindex, || format!("{}.filenameStrindex", ff()))?;
        }
        frames.push(line_frame(
            kind,
            name,
            location.address,
            module.map(str::to_owned),
            file,
            line.line,
        ));
    }
    Ok(frames)
}

/// The module name of kernel code in mapping `name`, as Kiln's agent
/// names it: `[kernel.kallsyms]` for the kernel image, `[ext4]` for a
/// module, so that both sources' kernel frames merge.
fn kernel_module(name: &str) -> String {
    if name.is_empty() || name == "vmlinux" || name.starts_with("vmlinux-") {
        return KERNEL_IMAGE.to_owned();
    }
    if name.starts_with('[') {
        return name.to_owned();
    }
    let bare = name.split(".ko").next().unwrap_or(name);
    format!("[{bare}]")
}

/// Bytes of names a frame holds.
fn bytes_of(frame: &Frame) -> usize {
    match frame {
        Frame::Address { .. } => 0,
        Frame::Named {
            function,
            module,
            file,
            ..
        } => {
            function.len()
                + module.as_ref().map_or(0, String::len)
                + file.as_ref().map_or(0, String::len)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_modules_are_named_as_the_agent_names_them() {
        assert_eq!(kernel_module("vmlinux"), "[kernel.kallsyms]");
        assert_eq!(kernel_module(""), "[kernel.kallsyms]");
        assert_eq!(kernel_module("ext4"), "[ext4]");
        assert_eq!(kernel_module("ext4.ko.xz"), "[ext4]");
        assert_eq!(kernel_module("[nf_conntrack]"), "[nf_conntrack]");
    }

    #[test]
    fn build_ids_are_hex() {
        assert_eq!(from_hex("0aFf"), Some(vec![0x0a, 0xff]));
        assert_eq!(from_hex("abc"), None);
        assert_eq!(from_hex("zz"), None);
        assert_eq!(from_hex(""), None);
        assert_eq!(from_hex("é1"), None);
    }

    #[test]
    fn every_frame_type_is_known() {
        for name in [
            "native",
            "kernel",
            "go",
            "cpython",
            "php",
            "jvm",
            "ruby",
            "perl",
            "v8js",
            "dotnet",
            "beam",
            "unknown",
            "abort-marker",
            "rust",
        ] {
            assert!(frame_type(name).is_some(), "{name}");
        }
        assert_eq!(frame_type("cobol"), None);
    }
}
