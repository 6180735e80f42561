//! 128-bit identifiers. Frame, stack and label-set ids are content hashes
//! (xxh3-128 over a canonical encoding), so the same content always gets the
//! same id on every agent and every worker: writes are idempotent and
//! at-least-once delivery is safe.

use std::fmt;
use std::str::FromStr;

use xxhash_rust::xxh3::xxh3_128;

/// Error parsing an id from its 32-digit hex form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid id {input:?}: expected 32 hexadecimal digits")]
pub struct ParseIdError {
    /// The text that was not an id.
    pub input: String,
}

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(
            Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default,
            rkyv::Archive, rkyv::Serialize, rkyv::Deserialize,
        )]
        #[rkyv(derive(Debug, PartialEq, Eq, Hash))]
        pub struct $name(pub u128);

        impl $name {
            /// The id as 16 big-endian bytes (the order used in storage keys,
            /// so keys sort like the ids).
            pub fn to_be_bytes(self) -> [u8; 16] {
                self.0.to_be_bytes()
            }

            /// The id from 16 big-endian bytes.
            pub fn from_be_bytes(bytes: [u8; 16]) -> Self {
                Self(u128::from_be_bytes(bytes))
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{:032x}", self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($name), "({:032x})"), self.0)
            }
        }

        impl FromStr for $name {
            type Err = ParseIdError;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                if s.len() != 32 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Err(ParseIdError { input: s.to_owned() });
                }
                u128::from_str_radix(s, 16)
                    .map($name)
                    .map_err(|_| ParseIdError { input: s.to_owned() })
            }
        }

        impl From<&Archived<$name>> for $name {
            fn from(archived: &Archived<$name>) -> Self {
                $name(archived.0.to_native())
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
                text.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}

use rkyv::Archived;

id_type!(
    /// Id of an executable or shared library: the GNU build id when the ELF
    /// has one (first 16 bytes), else a hash of its first and last 4 KiB and
    /// its length. Symbols are keyed by it.
    FileId
);
id_type!(
    /// Content hash of one [`Frame`](crate::Frame).
    FrameId
);
id_type!(
    /// Content hash of a stack: the list of its frame ids, root first.
    StackId
);
id_type!(
    /// Content hash of a [`LabelSet`](crate::LabelSet).
    LabelSetId
);

/// Domain tags keep the hashes of different kinds of content apart, so a
/// frame can never share an id with a stack made of the same bytes.
#[derive(Debug, Clone, Copy)]
#[repr(u8)]
pub(crate) enum Domain {
    Frame = 1,
    Stack = 2,
    LabelSet = 3,
    File = 4,
}

/// A canonical, versioned byte encoding fed to xxh3-128. Every variable-length
/// field is length-prefixed, so no two different contents encode alike.
///
/// The encoding is gathered in a buffer and hashed in one call rather than
/// streamed: xxh3's streaming state is over 500 bytes to set up and copies
/// every piece into its own block buffer, while contents are mostly tens
/// of bytes (a frame, a stack of a few dozen ids). The hash of the whole
/// is the same either way (`ids_are_pinned`).
pub(crate) struct ContentHasher(Vec<u8>);

/// Room for most contents without growing: a frame with its names, or a
/// stack of 15 frames.
const CONTENT_CAPACITY: usize = 256;

impl ContentHasher {
    pub(crate) fn new(domain: Domain) -> Self {
        let mut buf = Vec::with_capacity(CONTENT_CAPACITY);
        buf.extend_from_slice(&[domain as u8, 1 /* encoding version */]);
        Self(buf)
    }

    pub(crate) fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }

    pub(crate) fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }

    pub(crate) fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }

    pub(crate) fn u128(&mut self, v: u128) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }

    pub(crate) fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.u64(v.len() as u64);
        self.0.extend_from_slice(v);
        self
    }

    pub(crate) fn opt_str(&mut self, v: Option<&str>) -> &mut Self {
        match v {
            None => self.u8(0),
            Some(s) => self.u8(1).bytes(s.as_bytes()),
        }
    }

    pub(crate) fn finish(&self) -> u128 {
        xxh3_128(&self.0)
    }
}

/// Bytes hashed from each end of a file that has no build id.
pub(crate) const HEAD_TAIL_BYTES: u64 = 4096;

impl FileId {
    /// The FileId of a file of `len` bytes: from its GNU build id when it
    /// has one, else from its first and last [`HEAD_TAIL_BYTES`], read
    /// through `read_at(offset, buf)`.
    ///
    /// This is the one rule the agent (which reads headers only), the CLI
    /// and the symbol upload endpoint share: an id computed two ways would
    /// make uploaded symbols never match sampled frames.
    pub fn of_file<E>(
        build_id: Option<&[u8]>,
        len: u64,
        mut read_at: impl FnMut(u64, &mut [u8]) -> Result<(), E>,
    ) -> Result<FileId, E> {
        if let Some(id) = build_id {
            return Ok(FileId::from_build_id(id));
        }
        let n = HEAD_TAIL_BYTES.min(len);
        let mut head = vec![0; n as usize];
        read_at(0, &mut head)?;
        let mut tail = vec![0; n as usize];
        read_at(len - n, &mut tail)?;
        Ok(FileId::from_head_tail(&head, &tail, len))
    }

    /// A FileId for an ELF without a build id, from its first and last 4 KiB
    /// and its length (the OpenTelemetry profiler's scheme).
    pub fn from_head_tail(head: &[u8], tail: &[u8], len: u64) -> Self {
        let mut h = ContentHasher::new(Domain::File);
        h.bytes(head).bytes(tail).u64(len);
        Self(h.finish())
    }

    /// A FileId from a GNU build id: its first 16 bytes, zero-padded when
    /// shorter (build ids are 20 bytes with SHA-1, 16 with MD5 or xxhash).
    pub fn from_build_id(build_id: &[u8]) -> Self {
        let mut bytes = [0u8; 16];
        let n = build_id.len().min(16);
        bytes[..n].copy_from_slice(&build_id[..n]);
        Self(u128::from_be_bytes(bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn display_parse_round_trip(v: u128) {
            let id = StackId(v);
            prop_assert_eq!(id.to_string().parse::<StackId>().unwrap(), id);
            prop_assert_eq!(StackId::from_be_bytes(id.to_be_bytes()), id);
        }
    }

    #[test]
    fn parse_rejects_wrong_length_and_non_hex() {
        assert!("abc".parse::<FrameId>().is_err());
        assert!("g".repeat(32).parse::<FrameId>().is_err());
        assert!(
            "+0000000000000000000000000000001"
                .parse::<FrameId>()
                .is_err()
        );
    }

    #[test]
    fn build_id_prefix_is_kept_in_order() {
        let id = FileId::from_build_id(&[0xab; 20]);
        assert_eq!(id.to_string(), "ab".repeat(16));
    }

    // Guards every stored id: ids are the store's keys and the agents',
    // gateways' and workers' common language, so how they are computed
    // may be made faster but never change. Each kind of content, with a
    // stack long enough to pass through more than one xxh3 block.
    #[test]
    fn ids_are_pinned() {
        use crate::{Frame, FrameKind, LabelSet, stack_id};
        let address = Frame::Address {
            kind: FrameKind::Native,
            file_id: FileId(0x0123_4567_89ab_cdef_0011_2233_4455_6677),
            addr: 0x40_1234,
        };
        let named = Frame::Named {
            kind: FrameKind::Python,
            function: "render".into(),
            module: Some("app.views".into()),
            file: Some("/srv/app/views.py".into()),
            line: 42,
        };
        let deep: Vec<FrameId> = (0..40u128)
            .map(|i| FrameId(i * 0x9e37_79b9_7f4a_7c15))
            .collect();
        let labels = LabelSet::new()
            .with("host", "web-1")
            .with("process", "python3")
            .with("service", "checkout");
        let file = FileId::of_file::<()>(None, 10_000, |offset, buf| {
            buf.iter_mut()
                .enumerate()
                .for_each(|(i, b)| *b = (offset as usize + i) as u8);
            Ok(())
        })
        .unwrap();
        let got = [
            address.id().0,
            named.id().0,
            stack_id(&deep).0,
            stack_id(&[]).0,
            labels.id().0,
            file.0,
        ];
        let pinned = [
            0xf238e4f453d2f61e0a8b290b93a9e1fe,
            0xad064f1ba2e76e77efd44b4203294103,
            0xebe7406c635f6286a6bda0717072b9e0,
            0xf9be382948df1a00d9c28cdc829dd328,
            0x0c872f24590a26ce606e3c125b373698,
            0xf723b08e8fa3ccf806e81c78daad4375,
        ];
        assert_eq!(got, pinned, "got {got:#x?}");
    }
}
