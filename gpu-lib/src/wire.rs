//! The snapshot the library sends the agent, and its framing on the socket.
//!
//! A frame is `magic "KGPU" | version: u32 LE | length: u32 LE | payload`,
//! the payload an rkyv archive of [`Snapshot`]. A reader refuses other
//! magics, versions it does not know and lengths over [`MAX_FRAME_BYTES`],
//! each with an error naming what was wrong. Bump [`WIRE_VERSION`] whenever
//! a type below changes.
//!
//! These types live here rather than in `kiln-model` because only the
//! library and the agent speak them and they change with CUPTI support;
//! the agent links this crate as an rlib (it brings no CUDA dependency:
//! CUPTI is loaded at run time, only by the injected cdylib).

use std::io::{Read, Write};

/// First bytes of every frame.
pub const WIRE_MAGIC: [u8; 4] = *b"KGPU";
/// The payload's layout version.
pub const WIRE_VERSION: u32 = 2;
/// Largest payload a reader accepts.
pub const MAX_FRAME_BYTES: u32 = 64 << 20;
/// Bytes before the payload.
pub const HEADER_LEN: usize = 12;

/// What one process's GPU work added up to over one interval.
#[derive(
    Debug, Clone, Default, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize,
)]
pub struct Snapshot {
    /// The CUDA process.
    pub pid: u32,
    /// Counts up from 0 per process; a gap means snapshots were dropped.
    pub sequence: u64,
    /// Interval start, ns (CUPTI's clock, CLOCK_REALTIME-based).
    pub start_ns: u64,
    /// Interval end, ns.
    pub end_ns: u64,
    /// Kernel time per (thread, device, kernel).
    pub kernels: Vec<KernelAggregate>,
    /// PC samples per (kernel, cubin, PC, stall reason).
    pub pc_samples: Vec<PcSampleAggregate>,
    /// Stall reason names by the index CUPTI gave them (sent with the
    /// first snapshot after PC sampling started, then when they change).
    pub stall_reasons: Vec<StallReasonName>,
    /// Cubins loaded since the previous snapshot, so the agent can name
    /// SASS instructions with `nvdisasm`.
    pub cubins: Vec<Cubin>,
    /// What the library had to drop or could not join, since it started.
    pub counters: Counters,
    /// Device memory allocated during the interval, per allocating call.
    pub memory_allocated: Vec<MemoryAggregate>,
    /// Device memory live at the interval's end, per allocating call.
    pub memory_live: Vec<MemoryAggregate>,
    /// The process's device memory totals.
    pub memory: MemoryStats,
}

/// Device memory of one allocating call (a correlation id, whose CPU stack
/// the agent's uprobe captured) on one thread; correlation id 0 gathers
/// what the per-snapshot bound left without its call.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize,
)]
pub struct MemoryAggregate {
    /// The allocating thread.
    pub tid: u32,
    /// The allocating call's correlation id.
    pub correlation_id: u32,
    /// Bytes.
    pub bytes: u64,
    /// Allocations.
    pub count: u64,
}

/// A process's device memory, from the allocation calls Kiln watches.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize,
)]
pub struct MemoryStats {
    /// Bytes live now.
    pub live_bytes: u64,
    /// The most bytes live at once during the interval.
    pub peak_live_bytes: u64,
    /// Allocations since the library started.
    pub allocations: u64,
    /// Bytes allocated since the library started.
    pub allocated_bytes: u64,
    /// Frees since the library started.
    pub frees: u64,
    /// Frees of addresses not tracked (allocated before the library, or
    /// by a call it does not watch).
    pub unknown_frees: u64,
    /// Allocations not tracked because the live table was full.
    pub untracked_allocations: u64,
}

/// Kernel time of one kernel launched from one thread on one device.
#[derive(Debug, Clone, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct KernelAggregate {
    /// The launching thread; 0 when the launch was not seen.
    pub tid: u32,
    /// The device.
    pub device_id: u32,
    /// The kernel's (mangled) name.
    pub name: String,
    /// Executions.
    pub launches: u64,
    /// GPU time, ns.
    pub total_ns: u64,
    /// A uniform sample (at most [`EXEMPLARS`]) of the launches'
    /// correlation ids: the agent looks up the CPU stack it captured for
    /// each and splits the kernel's weight evenly between them, which
    /// places the time under each call site in proportion to its launches.
    pub exemplar_correlation_ids: Vec<u32>,
}

/// Exemplar correlation ids kept per kernel aggregate.
pub const EXEMPLARS: usize = 8;

/// Samples of one stall reason at one SASS instruction.
#[derive(Debug, Clone, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct PcSampleAggregate {
    /// The function (kernel) the PC belongs to, mangled.
    pub function_name: String,
    /// CRC of the cubin (matches [`Cubin::crc`]).
    pub cubin_crc: u64,
    /// The function's symbol index in the cubin.
    pub function_index: u32,
    /// Offset of the instruction from the function's start, bytes.
    pub pc_offset: u64,
    /// Index into [`Snapshot::stall_reasons`].
    pub stall_reason: u32,
    /// Samples.
    pub samples: u64,
}

/// One entry of CUPTI's stall reason table.
#[derive(Debug, Clone, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct StallReasonName {
    /// CUPTI's index.
    pub index: u32,
    /// CUPTI's name, e.g. `smsp__pcsamp_warps_issue_stalled_long_scoreboard`.
    pub name: String,
}

/// A loaded module's cubin.
#[derive(Debug, Clone, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct Cubin {
    /// CUPTI's CRC of the image (what PC samples carry).
    pub crc: u64,
    /// The ELF image.
    pub image: Vec<u8>,
}

/// Drops and misses since the library started; each names where it
/// happens.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize,
)]
pub struct Counters {
    /// Launches recorded by the driver-API callback.
    pub launches: u64,
    /// Kernel records read from activity buffers.
    pub kernels: u64,
    /// Kernels reported without their launch (see `join.rs`).
    pub kernels_unjoined: u64,
    /// Launches evicted from the join table unmatched.
    pub launches_evicted: u64,
    /// Events a CUDA thread could not queue to the aggregator (queue full).
    pub events_dropped: u64,
    /// Activity buffers refused to CUPTI because the pool was exhausted.
    pub buffers_refused: u64,
    /// Activity records of kinds Kiln does not read.
    pub records_unknown: u64,
    /// Activity records too short for their kind.
    pub records_malformed: u64,
    /// Kernels not aggregated because the table was full.
    pub kernels_over_limit: u64,
    /// PC samples not aggregated because the table was full.
    pub pc_samples_over_limit: u64,
    /// PC samples the hardware dropped (CUPTI's count).
    pub pc_samples_dropped_by_hw: u64,
    /// Cubins not kept because the store was full or they were too big.
    pub cubins_dropped: u64,
    /// Snapshots not delivered (agent absent or too slow).
    pub snapshots_dropped: u64,
    /// `cuptiPCSamplingGetData` calls that returned PCs (on the program's
    /// own threads, at launch exits, module loads, context teardown, exit).
    pub pc_drains: u64,
    /// Drains not done because the context's buffers were all in use or
    /// another thread was draining it (the samples stay in CUPTI until the
    /// next one).
    pub pc_drains_skipped: u64,
    /// CUPTI calls made by Kiln that failed (each call and code is also
    /// logged once).
    pub cupti_errors: u64,
    /// 1 once the watchdog has turned PC sampling off for this process
    /// because a CUPTI call made by Kiln took longer than its bound.
    pub pc_sampling_watchdog_trips: u64,
}

/// Why a frame could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// The stream failed or ended.
    #[error("gpu snapshot stream: {0}")]
    Io(#[from] std::io::Error),
    /// The frame does not start with [`WIRE_MAGIC`].
    #[error("not a kiln gpu snapshot frame (magic {0:02x?}, expected \"KGPU\")")]
    BadMagic([u8; 4]),
    /// A version this build does not read.
    #[error("gpu snapshot version {found} is not supported (this build reads {WIRE_VERSION})")]
    UnsupportedVersion {
        /// The frame's version.
        found: u32,
    },
    /// The payload length is over [`MAX_FRAME_BYTES`].
    #[error("gpu snapshot frame of {0} bytes is over the {MAX_FRAME_BYTES}-byte limit")]
    TooLarge(u64),
    /// The payload is not a valid archive.
    #[error("gpu snapshot payload is not a valid archive: {0}")]
    Archive(String),
}

impl Snapshot {
    /// The whole frame: header and payload.
    pub fn encode(&self) -> Result<Vec<u8>, WireError> {
        let payload = rkyv::to_bytes::<rkyv::rancor::Error>(self)
            .map_err(|e| WireError::Archive(e.to_string()))?;
        let len = u32::try_from(payload.len())
            .ok()
            .filter(|len| *len <= MAX_FRAME_BYTES)
            .ok_or(WireError::TooLarge(payload.len() as u64))?;
        let mut frame = Vec::with_capacity(HEADER_LEN + payload.len());
        frame.extend_from_slice(&WIRE_MAGIC);
        frame.extend_from_slice(&WIRE_VERSION.to_le_bytes());
        frame.extend_from_slice(&len.to_le_bytes());
        frame.extend_from_slice(&payload);
        Ok(frame)
    }

    /// Writes one frame.
    pub fn write_to(&self, out: &mut impl Write) -> Result<(), WireError> {
        out.write_all(&self.encode()?)?;
        Ok(())
    }

    /// Reads one frame. An error other than [`WireError::Io`] leaves the
    /// stream at an unknown position: close it.
    pub fn read_from(input: &mut impl Read) -> Result<Snapshot, WireError> {
        let mut header = [0u8; HEADER_LEN];
        input.read_exact(&mut header)?;
        let magic: [u8; 4] = header[0..4].try_into().expect("4 bytes");
        if magic != WIRE_MAGIC {
            return Err(WireError::BadMagic(magic));
        }
        let version = u32::from_le_bytes(header[4..8].try_into().expect("4 bytes"));
        if version != WIRE_VERSION {
            return Err(WireError::UnsupportedVersion { found: version });
        }
        let len = u32::from_le_bytes(header[8..12].try_into().expect("4 bytes"));
        if len > MAX_FRAME_BYTES {
            return Err(WireError::TooLarge(u64::from(len)));
        }
        let mut payload = rkyv::util::AlignedVec::<16>::with_capacity(len as usize);
        payload.resize(len as usize, 0);
        input.read_exact(&mut payload)?;
        rkyv::from_bytes::<Snapshot, rkyv::rancor::Error>(&payload)
            .map_err(|e| WireError::Archive(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn sample() -> Snapshot {
        Snapshot {
            pid: 4242,
            sequence: 3,
            start_ns: 10,
            end_ns: 20,
            kernels: vec![KernelAggregate {
                tid: 7,
                device_id: 0,
                name: "_Z6vecAddPfS_S_i".into(),
                launches: 2,
                total_ns: 900,
                exemplar_correlation_ids: vec![1, 5],
            }],
            pc_samples: vec![PcSampleAggregate {
                function_name: "_Z6vecAddPfS_S_i".into(),
                cubin_crc: 0xfeed,
                function_index: 1,
                pc_offset: 0x90,
                stall_reason: 4,
                samples: 17,
            }],
            stall_reasons: vec![StallReasonName {
                index: 4,
                name: "long_scoreboard".into(),
            }],
            cubins: vec![Cubin {
                crc: 0xfeed,
                image: b"\x7fELF...".to_vec(),
            }],
            counters: Counters {
                launches: 2,
                ..Counters::default()
            },
            memory_allocated: vec![MemoryAggregate {
                tid: 7,
                correlation_id: 3,
                bytes: 1 << 20,
                count: 1,
            }],
            memory_live: Vec::new(),
            memory: MemoryStats {
                live_bytes: 1 << 20,
                ..MemoryStats::default()
            },
        }
    }

    #[test]
    fn round_trip() {
        let snapshot = sample();
        let frame = snapshot.encode().unwrap();
        let back = Snapshot::read_from(&mut frame.as_slice()).unwrap();
        assert_eq!(back, snapshot);
    }

    #[test]
    fn refuses_bad_frames() {
        let frame = sample().encode().unwrap();

        let mut bad = frame.clone();
        bad[0] = b'X';
        assert!(matches!(
            Snapshot::read_from(&mut bad.as_slice()),
            Err(WireError::BadMagic(_))
        ));

        let mut newer = frame.clone();
        newer[4..8].copy_from_slice(&(WIRE_VERSION + 1).to_le_bytes());
        let err = Snapshot::read_from(&mut newer.as_slice()).unwrap_err();
        assert!(
            err.to_string()
                .contains(&format!("version {}", WIRE_VERSION + 1)),
            "{err}"
        );

        let mut huge = frame.clone();
        huge[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            Snapshot::read_from(&mut huge.as_slice()),
            Err(WireError::TooLarge(_))
        ));

        let cut = &frame[..frame.len() - 1];
        assert!(matches!(
            Snapshot::read_from(&mut &cut[..]),
            Err(WireError::Io(_))
        ));

        let mut garbage = frame.clone();
        for b in &mut garbage[HEADER_LEN..] {
            *b = 0xff;
        }
        assert!(matches!(
            Snapshot::read_from(&mut garbage.as_slice()),
            Err(WireError::Archive(_))
        ));
    }
}
