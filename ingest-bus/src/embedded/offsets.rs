//! Committed offsets: one small text file per consumer group,
//! `groups/<group>.offsets`, replaced atomically on every commit.
//!
//! ```text
//! kiln-offsets 1
//! 0 1234
//! 1 987
//! ```
//!
//! One line per partition: the partition and the offset the group resumes
//! at. Text, so an operator can read (and, with the bus closed, edit) it.

use std::path::{Path, PathBuf};

use crate::embedded::fs;
use crate::error::{BusError, io};

const HEADER: &str = "kiln-offsets 1";
const SUFFIX: &str = ".offsets";

/// Checks that `name` is 1 to 64 characters of `[A-Za-z0-9._-]`. The name
/// becomes a file name, so this also keeps it from naming another
/// directory.
pub(crate) fn validate_group_name(name: &str) -> Result<(), BusError> {
    let ok = (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(BusError::InvalidGroupName {
            name: name.to_owned(),
        })
    }
}

/// The offsets file of `group` in the groups directory.
pub(crate) fn path(groups_dir: &Path, group: &str) -> PathBuf {
    groups_dir.join(format!("{group}{SUFFIX}"))
}

/// Writes a group's offsets durably.
pub(crate) fn store(path: &Path, offsets: &[u64]) -> Result<(), BusError> {
    fs::write_atomic(path, encode(offsets).as_bytes())
}

/// Every group's offsets found in the groups directory.
pub(crate) fn load_all(
    groups_dir: &Path,
    partitions: u32,
) -> Result<Vec<(String, Vec<u64>)>, BusError> {
    let mut groups = Vec::new();
    for entry in std::fs::read_dir(groups_dir).map_err(io("list", groups_dir))? {
        let entry = entry.map_err(io("list", groups_dir))?;
        let file = entry.path();
        let name = entry.file_name();
        let Some(group) = name.to_str().and_then(|n| n.strip_suffix(SUFFIX)) else {
            // Left over from a commit interrupted before its rename: the
            // previous file is still whole, so this one is just dropped.
            if name.to_str().is_some_and(|n| n.ends_with(".tmp")) {
                std::fs::remove_file(&file).map_err(io("remove", &file))?;
            } else {
                tracing::warn!(file = %file.display(), "ignoring an unexpected file in the groups directory");
            }
            continue;
        };
        if validate_group_name(group).is_err() {
            tracing::warn!(file = %file.display(), "ignoring an offsets file whose name is not a valid group");
            continue;
        }
        let text = std::fs::read_to_string(&file).map_err(io("read", &file))?;
        let offsets = decode(&text, partitions).map_err(|reason| BusError::BadOffsets {
            path: file.clone(),
            reason,
        })?;
        groups.push((group.to_owned(), offsets));
    }
    Ok(groups)
}

fn encode(offsets: &[u64]) -> String {
    let mut text = format!("{HEADER}\n");
    for (partition, offset) in offsets.iter().enumerate() {
        text.push_str(&format!("{partition} {offset}\n"));
    }
    text
}

/// Parses an offsets file; the error names the line at fault.
fn decode(text: &str, partitions: u32) -> Result<Vec<u64>, String> {
    let mut lines = text.lines();
    if lines.next() != Some(HEADER) {
        return Err(format!("line 1 should be `{HEADER}`"));
    }
    let mut offsets = Vec::with_capacity(partitions as usize);
    for (i, line) in lines.enumerate() {
        let line_no = i + 2;
        let (partition, offset) = line
            .split_once(' ')
            .and_then(|(p, o)| Some((p.parse::<u64>().ok()?, o.parse::<u64>().ok()?)))
            .ok_or_else(|| format!("line {line_no} should be `<partition> <offset>`"))?;
        if partition != offsets.len() as u64 {
            return Err(format!(
                "line {line_no} is for partition {partition}, expected partition {}",
                offsets.len()
            ));
        }
        offsets.push(offset);
    }
    if offsets.len() != partitions as usize {
        return Err(format!(
            "has offsets for {} partitions, the bus has {partitions}",
            offsets.len()
        ));
    }
    Ok(offsets)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_names() {
        for ok in ["workers", "a", "A.b_c-9", &"x".repeat(64), ".."] {
            validate_group_name(ok).unwrap();
        }
        for bad in ["", "a/b", "../x", "with space", "ünï", &"x".repeat(65)] {
            let err = validate_group_name(bad).unwrap_err();
            assert!(
                err.to_string().contains("invalid consumer group name"),
                "{bad}"
            );
        }
    }

    #[test]
    fn offsets_round_trip() {
        let offsets = vec![0, 5, u64::MAX];
        assert_eq!(decode(&encode(&offsets), 3), Ok(offsets));
    }

    #[test]
    fn malformed_offsets_name_the_line() {
        assert_eq!(
            decode("nope\n", 1).unwrap_err(),
            "line 1 should be `kiln-offsets 1`"
        );
        let e = decode("kiln-offsets 1\n0 5\n1 x\n", 2).unwrap_err();
        assert_eq!(e, "line 3 should be `<partition> <offset>`");
        let e = decode("kiln-offsets 1\n1 5\n", 1).unwrap_err();
        assert!(e.contains("line 2 is for partition 1"), "{e}");
        let e = decode("kiln-offsets 1\n0 5\n", 2).unwrap_err();
        assert!(e.contains("for 1 partitions, the bus has 2"), "{e}");
    }

    #[test]
    fn load_all_drops_interrupted_commits() {
        let dir = tempfile::tempdir().unwrap();
        store(&path(dir.path(), "g"), &[3, 4]).unwrap();
        std::fs::write(dir.path().join("h.offsets.tmp"), "half").unwrap();
        assert_eq!(
            load_all(dir.path(), 2).unwrap(),
            vec![("g".to_owned(), vec![3, 4])]
        );
        assert!(!dir.path().join("h.offsets.tmp").exists());
    }
}
