//! Damaged logs: torn tails from crashes, and checksum failures from the
//! disk. Acknowledged records are never cut, and whatever is lost is
//! logged with the file it was in.

mod common;

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use common::{assert_drained, payload, payload_number, poll_exactly};
use kiln_ingest_bus::{Bus, EmbeddedBus, EmbeddedBusOptions, Record};

/// Everything logged by this test binary. Tests tell their lines apart by
/// their own temporary directory, which every warning names.
fn logs() -> String {
    static LOGS: OnceLock<&'static Mutex<Vec<u8>>> = OnceLock::new();
    let logs = LOGS.get_or_init(|| {
        let logs: &'static Mutex<Vec<u8>> = Box::leak(Box::default());
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(tracing::Level::WARN)
            .with_writer(move || Capture(logs))
            .finish();
        tracing::subscriber::set_global_default(subscriber).unwrap();
        logs
    });
    String::from_utf8_lossy(&logs.lock().unwrap()).into_owned()
}

struct Capture(&'static Mutex<Vec<u8>>);

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The warnings that mention `path`.
fn warnings_about(path: &Path) -> Vec<String> {
    let needle = path.display().to_string();
    logs()
        .lines()
        .filter(|l| l.contains(&needle))
        .map(str::to_owned)
        .collect()
}

fn segment(dir: &Path, base: u64) -> PathBuf {
    dir.join(format!("partitions/0/{base:020}.log"))
}

/// Frame length of record `i` as `publish_numbered` writes it: 20-byte
/// header, 1-byte key.
fn frame_len(i: u64) -> u64 {
    20 + 1 + payload(i).len() as u64
}

/// A one-partition bus holding records `0..n`.
async fn bus_with(dir: &Path, n: u64, options: EmbeddedBusOptions) -> EmbeddedBus {
    logs(); // install the capture before anything logs
    let bus = EmbeddedBus::open_with(dir, 1, options).unwrap();
    for i in 0..n {
        assert_eq!(bus.publish(b"k", payload(i)).await.unwrap().offset, i);
    }
    bus
}

async fn read_all(bus: &EmbeddedBus, n: usize) -> Vec<u64> {
    let mut c = bus.consumer("check").await.unwrap();
    let records: Vec<Record> = poll_exactly(&mut *c, n).await;
    assert_drained(&mut *c).await;
    records
        .iter()
        .map(|r| payload_number(&r.payload).expect("intact payload"))
        .collect()
}

/// Garbage after the last record (a crash mid-append) is cut, with a
/// warning, and appending resumes where the valid records end.
#[tokio::test]
async fn torn_tail_of_garbage_is_cut() {
    let dir = tempfile::tempdir().unwrap();
    drop(bus_with(dir.path(), 10, EmbeddedBusOptions::default()).await);
    let path = segment(dir.path(), 0);
    let valid_len = fs::metadata(&path).unwrap().len();
    OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap()
        .write_all(&[0x5a; 37])
        .unwrap();

    let bus = EmbeddedBus::open(dir.path(), 1).unwrap();
    assert_eq!(fs::metadata(&path).unwrap().len(), valid_len);
    let warnings = warnings_about(&path);
    assert!(
        warnings.iter().any(|w| w.contains(&format!(
            "truncating a torn tail of 37 bytes at byte {valid_len}"
        ))),
        "{warnings:?}"
    );
    assert_eq!(bus.publish(b"k", payload(10)).await.unwrap().offset, 10);
    assert_eq!(read_all(&bus, 11).await, (0..11).collect::<Vec<_>>());
}

/// A record cut in half (the write never finished) is dropped whole; the
/// records before it are kept.
#[tokio::test]
async fn half_written_record_is_cut() {
    let dir = tempfile::tempdir().unwrap();
    drop(bus_with(dir.path(), 10, EmbeddedBusOptions::default()).await);
    let path = segment(dir.path(), 0);
    let len = fs::metadata(&path).unwrap().len();
    let cut = len - frame_len(9) / 2;
    OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(cut)
        .unwrap();

    let bus = EmbeddedBus::open(dir.path(), 1).unwrap();
    assert_eq!(bus.end_offsets(), [9]);
    assert!(
        warnings_about(&path)
            .iter()
            .any(|w| w.contains("runs past the end of the file"))
    );
    assert_eq!(bus.publish(b"k", payload(9)).await.unwrap().offset, 9);
    assert_eq!(read_all(&bus, 10).await, (0..10).collect::<Vec<_>>());
}

/// Offset of record `i`'s frame in a segment starting at record `first`.
fn position_of(first: u64, i: u64) -> u64 {
    (first..i).map(frame_len).sum()
}

fn flip_byte(path: &Path, at: u64) {
    let mut bytes = fs::read(path).unwrap();
    bytes[at as usize] ^= 0x40;
    fs::write(path, bytes).unwrap();
}

/// A checksum failure inside a sealed segment (a bad sector) costs that
/// record only: the reader resynchronises on the next one and says what
/// it skipped.
#[tokio::test]
async fn crc_failure_in_a_sealed_segment_skips_one_record() {
    let dir = tempfile::tempdir().unwrap();
    let options = EmbeddedBusOptions::default().segment_bytes(4000);
    let bus = bus_with(dir.path(), 40, options.clone()).await;
    assert!(bus.start_offsets() == [0] && bus.end_offsets() == [40]);
    drop(bus);
    let path = segment(dir.path(), 0);
    flip_byte(&path, position_of(0, 3) + 30); // inside record 3's payload

    let bus = EmbeddedBus::open_with(dir.path(), 1, options).unwrap();
    let expected: Vec<u64> = (0..40).filter(|&i| i != 3).collect();
    assert_eq!(read_all(&bus, 39).await, expected);
    let warnings = warnings_about(&path);
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("crc mismatch") && w.contains("offsets 3..4 are lost")),
        "{warnings:?}"
    );
}

/// When the rest of a sealed segment is unreadable, the reader moves on to
/// the next segment and says which offsets it lost.
#[tokio::test]
async fn unreadable_rest_of_sealed_segment_is_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let options = EmbeddedBusOptions::default().segment_bytes(4000);
    drop(bus_with(dir.path(), 40, options.clone()).await);
    let path = segment(dir.path(), 0);
    let bytes = fs::read(&path).unwrap();
    let from = position_of(0, 2) as usize;
    let zeroed: Vec<u8> = bytes[..from]
        .iter()
        .copied()
        .chain(std::iter::repeat_n(0, bytes.len() - from))
        .collect();
    fs::write(&path, zeroed).unwrap();
    let next_base = fs::read_dir(dir.path().join("partitions/0"))
        .unwrap()
        .filter_map(|e| {
            e.unwrap()
                .file_name()
                .to_str()?
                .strip_suffix(".log")?
                .parse::<u64>()
                .ok()
        })
        .filter(|&b| b > 0)
        .min()
        .unwrap();

    let bus = EmbeddedBus::open_with(dir.path(), 1, options).unwrap();
    let expected: Vec<u64> = (0..40).filter(|&i| i < 2 || i >= next_base).collect();
    assert_eq!(read_all(&bus, expected.len()).await, expected);
    let warnings = warnings_about(&path);
    assert!(
        warnings
            .iter()
            .any(|w| w.contains(&format!("records with offsets 2..{next_base} are lost"))),
        "{warnings:?}"
    );
}

/// Damage in the middle of the last segment with valid records after it
/// is not a torn tail: opening keeps the later (acknowledged) records
/// rather than truncating them.
#[tokio::test]
async fn damage_inside_the_last_segment_keeps_later_records() {
    let dir = tempfile::tempdir().unwrap();
    drop(bus_with(dir.path(), 6, EmbeddedBusOptions::default()).await);
    let path = segment(dir.path(), 0);
    flip_byte(&path, position_of(0, 2) + 25);

    let bus = EmbeddedBus::open(dir.path(), 1).unwrap();
    assert_eq!(bus.end_offsets(), [6]);
    assert!(
        warnings_about(&path)
            .iter()
            .any(|w| w.contains("skipping damaged bytes")
                && w.contains("records with offsets 2..3 are lost"))
    );
    assert_eq!(bus.publish(b"k", payload(6)).await.unwrap().offset, 6);
    assert_eq!(read_all(&bus, 6).await, vec![0, 1, 3, 4, 5, 6]);
}
