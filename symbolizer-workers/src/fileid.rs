//! The [`FileId`] of a whole file in memory, by the rule the agent uses
//! ([`FileId::of_file`]), so that symbols uploaded for a file match the
//! frames sampled in it.

use kiln_model::FileId;
use object::Object;

/// The id of the file whose bytes are `data`: its GNU build id when it is
/// an ELF file with one, else the hash of its head, tail and length.
pub fn file_id(data: &[u8]) -> FileId {
    // Only ELF build ids count, as in the agent: any other file is hashed.
    let build_id = object::File::parse(data)
        .ok()
        .filter(|f| f.format() == object::BinaryFormat::Elf)
        .and_then(|f| f.build_id().ok().flatten());
    let read = |offset: u64, buf: &mut [u8]| {
        let start = offset as usize;
        buf.copy_from_slice(&data[start..start + buf.len()]);
        Ok::<(), std::convert::Infallible>(())
    };
    match FileId::of_file(build_id, data.len() as u64, read) {
        Ok(id) => id,
        Err(never) => match never {},
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_without_build_id_hash_head_and_tail() {
        let data = vec![7u8; 10_000];
        assert_eq!(
            file_id(&data),
            FileId::from_head_tail(&[7; 4096], &[7; 4096], 10_000)
        );
        assert_eq!(
            file_id(&[1, 2]),
            FileId::from_head_tail(&[1, 2], &[1, 2], 2)
        );
    }

    #[test]
    fn own_executable_is_identified_by_its_build_id() {
        let data = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let file = object::File::parse(&data[..]).unwrap();
        if let Some(id) = file.build_id().unwrap() {
            assert_eq!(file_id(&data), FileId::from_build_id(id));
        }
    }
}
