//! Snapshots over a Unix stream socket, library → agent.
//!
//! The library connects when it has something to send and keeps the
//! connection; when the agent is absent or too slow (a write blocks past
//! [`WRITE_TIMEOUT`]) the snapshot is dropped, the caller counts it, and
//! the next send connects again. The agent listens ([`SnapshotListener`])
//! and reads frames per connection, one connection per CUDA process.

use std::io::BufReader;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::wire::{Snapshot, WireError};

/// Where the agent listens unless `KILN_GPU_SOCKET` says otherwise.
pub const DEFAULT_SOCKET_PATH: &str = "/run/kiln/gpu.sock";

/// A write that blocks longer than this gives up: the CUDA process must
/// not wait on a stuck agent.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(1);

/// The library's side: sends snapshots, reconnecting as needed.
#[derive(Debug)]
pub struct SnapshotSender {
    path: PathBuf,
    stream: Option<UnixStream>,
}

impl SnapshotSender {
    /// A sender to the socket at `path`; nothing is connected yet.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            stream: None,
        }
    }

    /// Sends one snapshot; on error the connection is dropped (the next
    /// call reconnects) and the snapshot is lost.
    pub fn send(&mut self, snapshot: &Snapshot) -> Result<(), WireError> {
        let frame = snapshot.encode()?;
        if self.stream.is_none() {
            let stream = UnixStream::connect(&self.path)?;
            stream.set_write_timeout(Some(WRITE_TIMEOUT))?;
            self.stream = Some(stream);
        }
        let stream = self.stream.as_mut().expect("connected above");
        if let Err(e) = std::io::Write::write_all(stream, &frame) {
            self.stream = None;
            return Err(e.into());
        }
        Ok(())
    }

    /// Whether a connection is held.
    pub fn is_connected(&self) -> bool {
        self.stream.is_some()
    }
}

/// The agent's side: a listening socket.
#[derive(Debug)]
pub struct SnapshotListener {
    listener: UnixListener,
}

impl SnapshotListener {
    /// Listens at `path`, replacing a stale socket file left by an agent
    /// that died.
    pub fn bind(path: &Path) -> std::io::Result<Self> {
        if path.exists() && UnixStream::connect(path).is_err() {
            std::fs::remove_file(path)?;
        }
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        Ok(Self {
            listener: UnixListener::bind(path)?,
        })
    }

    /// Waits for the next CUDA process to connect.
    pub fn accept(&self) -> std::io::Result<SnapshotStream> {
        let (stream, _) = self.listener.accept()?;
        Ok(SnapshotStream {
            reader: BufReader::new(stream),
        })
    }
}

/// The snapshots of one connection.
#[derive(Debug)]
pub struct SnapshotStream {
    reader: BufReader<UnixStream>,
}

impl Iterator for SnapshotStream {
    type Item = Result<Snapshot, WireError>;

    /// The next snapshot; `None` when the library closed the connection.
    /// After an error other than end of stream, close the connection.
    fn next(&mut self) -> Option<Self::Item> {
        match Snapshot::read_from(&mut self.reader) {
            Err(WireError::Io(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => None,
            other => Some(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{Counters, KernelAggregate};

    fn snapshot(sequence: u64) -> Snapshot {
        Snapshot {
            pid: 9,
            sequence,
            kernels: vec![KernelAggregate {
                tid: 1,
                device_id: 0,
                name: format!("k{sequence}"),
                launches: 1,
                total_ns: 10,
                exemplar_correlation_ids: vec![1],
            }],
            counters: Counters::default(),
            ..Snapshot::default()
        }
    }

    /// A real socket: snapshots arrive in order; with the agent gone the
    /// send fails (and is counted by the caller); once it is back, the
    /// sender reconnects.
    #[test]
    fn round_trip_and_reconnect() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/gpu.sock");
        let mut sender = SnapshotSender::new(&path);
        assert!(sender.send(&snapshot(0)).is_err(), "no agent yet");

        let listener = SnapshotListener::bind(&path).unwrap();
        sender.send(&snapshot(1)).unwrap();
        sender.send(&snapshot(2)).unwrap();
        let mut stream = listener.accept().unwrap();
        assert_eq!(stream.next().unwrap().unwrap(), snapshot(1));
        assert_eq!(stream.next().unwrap().unwrap(), snapshot(2));

        // The agent goes away: the sender notices on a later write.
        drop(stream);
        drop(listener);
        let mut failed = false;
        for i in 0..50 {
            if sender.send(&snapshot(3 + i)).is_err() {
                failed = true;
                break;
            }
        }
        assert!(failed, "writes to a closed socket must fail");
        assert!(!sender.is_connected());

        // A new agent binds over the stale socket file; the sender
        // reconnects, and the stream ends when the sender goes.
        let listener = SnapshotListener::bind(&path).unwrap();
        sender.send(&snapshot(100)).unwrap();
        drop(sender);
        let mut stream = listener.accept().unwrap();
        assert_eq!(stream.next().unwrap().unwrap().sequence, 100);
        assert!(stream.next().is_none());
    }
}
