//! Where batches go: the [`Sink`] trait; [`SpoolingSink`], which hands
//! batches to a [`Transport`] and keeps them in the bounded disk [`Spool`]
//! while the backend is away, replaying them in order; and the HTTP
//! transport that posts to the backend's `POST /api/v1/ingest`
//! ([`HttpSink`]).

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use kiln_model::Batch;
use tracing::{debug, info, warn};

/// What became of a batch handed to a [`Sink`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// The backend has it (durably, for the HTTP sink).
    Delivered,
    /// Kept on disk for later delivery. Its dictionary entries must not be
    /// taken as known to the backend yet.
    Spooled,
    /// Kept in memory for later delivery: the backend is away and the
    /// spool could not take it (its disk is full). As for `Spooled`, its
    /// dictionary entries are not known to the backend yet.
    Held,
}

/// Why a sink could not take a batch. Every variant hands the encoded
/// batch back, so the caller decides what to do with it.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// The backend could not be reached and there is no spool.
    #[error("the backend is unavailable: {reason}")]
    Unavailable {
        /// Why.
        reason: String,
        /// The encoded batch.
        batch: Vec<u8>,
    },
    /// The backend refused the batch (HTTP 4xx, or a record too large
    /// for Kafka): retrying cannot help.
    #[error("the backend refused the batch: {reason}")]
    Rejected {
        /// Why, as the backend said it (`HTTP 400: …`).
        reason: String,
        /// The encoded batch.
        batch: Vec<u8>,
    },
}

/// Takes batches from the agent.
pub trait Sink {
    /// Delivers `batch`, or keeps it for later.
    fn send(&mut self, batch: &Batch) -> Result<Delivery, SinkError>;
}

/// A sink that keeps every batch in memory: for tests and benchmarks.
#[derive(Debug, Default)]
pub struct MemorySink {
    /// Batches received, in order.
    pub batches: Vec<Batch>,
    /// Total encoded bytes, as the HTTP sink would have sent them.
    pub encoded_bytes: u64,
}

impl Sink for MemorySink {
    fn send(&mut self, batch: &Batch) -> Result<Delivery, SinkError> {
        self.encoded_bytes += batch.encode().len() as u64;
        self.batches.push(batch.clone());
        Ok(Delivery::Delivered)
    }
}

/// The outcome of one attempt to hand an encoded batch to the backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// The backend has it.
    Delivered,
    /// Worth retrying later (connection failure, timeout, HTTP 5xx or 429,
    /// Kafka unreachable); says why.
    Retry(String),
    /// Never worth retrying; says why.
    Refused(String),
}

/// How a [`SpoolingSink`] reaches its backend.
pub trait Transport {
    /// Tries once to deliver an encoded batch.
    fn try_send(&mut self, batch: &[u8]) -> Attempt;

    /// Whether an attempt is worth making now. A transport that knows its
    /// backend is away, and finds out off the caller's thread when it is
    /// back, answers `Err(why)`: the sink then spools without an attempt,
    /// so that no send waits on a backend known to be down. The default
    /// (the HTTP transport's) is always worth a try.
    fn ready(&mut self) -> Result<(), String> {
        Ok(())
    }
}

/// Hands batches to a [`Transport`], spooling them while the backend is
/// away and replaying them, oldest first, once it is back. While the
/// transport says its backend is known to be away ([`Transport::ready`]),
/// batches go straight to the spool.
#[derive(Debug)]
pub struct SpoolingSink<T> {
    transport: T,
    spool: Option<Spool>,
    /// Batches the spool could not take (its disk full), newer than every
    /// spooled one, kept in memory until the spool or the backend takes
    /// them.
    held: Held,
}

/// Spooled batches replayed per send, so that a long outage's backlog does
/// not stall sampling for minutes; the rest follows on the next sends.
const REPLAY_PER_SEND: usize = 32;

/// The most bytes of batches held in memory while the spool's disk is
/// full: past it the oldest are dropped, with a warning, as the spool
/// drops its oldest past its cap.
const MAX_HELD_BYTES: usize = 64 << 20;

/// Encoded batches held in memory, oldest first.
#[derive(Debug, Default)]
struct Held {
    batches: std::collections::VecDeque<Vec<u8>>,
    bytes: usize,
}

impl Held {
    fn push(&mut self, batch: Vec<u8>) {
        self.bytes += batch.len();
        self.batches.push_back(batch);
        // The newest batch is always kept, even alone over the cap.
        while self.bytes > MAX_HELD_BYTES && self.batches.len() > 1 {
            if let Some(oldest) = self.pop() {
                warn!(
                    bytes = oldest.len(),
                    cap = MAX_HELD_BYTES,
                    "batches held in memory over their cap (the spool's disk is full): \
                     dropping the oldest, whose samples are lost"
                );
            }
        }
    }

    fn pop(&mut self) -> Option<Vec<u8>> {
        let batch = self.batches.pop_front()?;
        self.bytes -= batch.len();
        Some(batch)
    }
}

impl<T: Transport> SpoolingSink<T> {
    /// A sink over `transport`, with an optional spool.
    pub fn with_transport(transport: T, spool: Option<Spool>) -> Self {
        SpoolingSink {
            transport,
            spool,
            held: Held::default(),
        }
    }

    /// Batches held in memory because the spool could not take them.
    pub fn held(&self) -> usize {
        self.held.batches.len()
    }

    /// Posts the batches held in memory, oldest first, until one fails.
    /// Returns whether none is left.
    fn replay_held(&mut self) -> bool {
        while let Some(batch) = self.held.batches.front() {
            match self.transport.try_send(batch) {
                Attempt::Delivered => {}
                Attempt::Retry(why) => {
                    debug!(reason = %why, "backend still away; held batches kept");
                    return false;
                }
                Attempt::Refused(reason) => {
                    warn!(%reason, "the backend refused a held batch; dropped");
                }
            }
            self.held.pop();
        }
        true
    }

    /// The spool, if there is one.
    pub fn spool(&self) -> Option<&Spool> {
        self.spool.as_ref()
    }

    /// The transport it sends through.
    pub fn transport(&self) -> &T {
        &self.transport
    }

    /// Posts spooled batches, oldest first, until one fails. Returns
    /// whether the spool is now empty.
    fn replay(&mut self) -> bool {
        let Some(spool) = &self.spool else {
            return true;
        };
        let files = match spool.files() {
            Ok(files) => files,
            // What cannot be listed cannot be replayed: newer batches go
            // on rather than wait behind it forever.
            Err(e) => {
                warn!(error = %e, dir = %spool.dir.display(), "listing the spool failed");
                return true;
            }
        };
        if files.is_empty() {
            return true;
        }
        let mut sent = 0;
        for (path, _) in files.iter().take(REPLAY_PER_SEND) {
            let bytes = match fs::read(path) {
                Ok(b) => b,
                Err(e) => {
                    warn!(error = %e, file = %path.display(), "unreadable spool file skipped");
                    spool.set_aside(path);
                    continue;
                }
            };
            match self.transport.try_send(&bytes) {
                Attempt::Delivered => {
                    sent += 1;
                    if let Err(e) = fs::remove_file(path) {
                        warn!(error = %e, file = %path.display(), "removing a replayed spool file failed");
                    }
                }
                Attempt::Retry(why) => {
                    debug!(reason = %why, "backend still away; spool kept");
                    return false;
                }
                Attempt::Refused(reason) => {
                    warn!(%reason, file = %path.display(), "the backend refused a spooled batch; set aside");
                    spool.set_aside(path);
                }
            }
        }
        if sent > 0 {
            info!(batches = sent, "replayed spooled batches");
        }
        files.len() <= REPLAY_PER_SEND
    }
}

impl<T: Transport> Sink for SpoolingSink<T> {
    fn send(&mut self, batch: &Batch) -> Result<Delivery, SinkError> {
        let bytes = batch.encode();
        // Older batches first: a spooled batch may carry dictionary entries
        // that later ones only refer to.
        let reason = if let Err(why) = self.transport.ready() {
            why
        } else if self.replay() && self.replay_held() {
            match self.transport.try_send(&bytes) {
                Attempt::Delivered => return Ok(Delivery::Delivered),
                Attempt::Retry(why) => why,
                Attempt::Refused(reason) => {
                    return Err(SinkError::Rejected {
                        reason,
                        batch: bytes,
                    });
                }
            }
        } else {
            "older spooled batches are still waiting".to_string()
        };
        match &mut self.spool {
            None => Err(SinkError::Unavailable {
                reason,
                batch: bytes,
            }),
            Some(spool) => {
                // Held batches are older than this one: they go to the
                // spool first, in order, once it takes batches again.
                while let Some(held) = self.held.batches.front() {
                    if spool.push(held).is_err() {
                        break;
                    }
                    self.held.pop();
                }
                if !self.held.batches.is_empty() {
                    self.held.push(bytes);
                    return Ok(Delivery::Held);
                }
                match spool.push(&bytes) {
                    Ok(path) => {
                        debug!(reason = %reason, file = %path.display(), "batch spooled");
                        Ok(Delivery::Spooled)
                    }
                    Err(e) => {
                        warn!(
                            error = %e,
                            dir = %spool.dir.display(),
                            held = self.held.batches.len() + 1,
                            "the spool cannot take a batch (a full disk?): held in memory \
                             until the spool or the backend takes it"
                        );
                        self.held.push(bytes);
                        Ok(Delivery::Held)
                    }
                }
            }
        }
    }
}

/// Posts batches to a Kiln backend (`kiln up` or a gateway), spooling them
/// while it is away.
pub type HttpSink = SpoolingSink<HttpTransport>;

impl HttpSink {
    /// A sink posting to `<server>/api/v1/ingest` with `api_key` (a key
    /// with the ingest role), with an optional spool.
    pub fn new(server: &str, api_key: Option<&str>, spool: Option<Spool>) -> Self {
        SpoolingSink::with_transport(HttpTransport::new(server, api_key), spool)
    }
}

/// `POST /api/v1/ingest` with the encoded batch as the body.
pub struct HttpTransport {
    agent: ureq::Agent,
    url: String,
    /// `Bearer KEY`, when the agent has a key.
    authorization: Option<String>,
}

/// Hides the key.
impl std::fmt::Debug for HttpTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpTransport")
            .field("url", &self.url)
            .field("api_key", &self.authorization.as_ref().map(|_| "…"))
            .finish()
    }
}

impl HttpTransport {
    /// A transport posting to `<server>/api/v1/ingest` with `api_key`.
    pub fn new(server: &str, api_key: Option<&str>) -> Self {
        let agent = ureq::Agent::config_builder()
            .timeout_connect(Some(Duration::from_secs(3)))
            .timeout_global(Some(Duration::from_secs(30)))
            .http_status_as_error(false)
            .build()
            .into();
        HttpTransport {
            agent,
            url: format!("{}/api/v1/ingest", server.trim_end_matches('/')),
            authorization: api_key.map(|key| format!("Bearer {key}")),
        }
    }
}

impl Transport for HttpTransport {
    fn try_send(&mut self, batch: &[u8]) -> Attempt {
        let mut request = self
            .agent
            .post(&self.url)
            .header("content-type", "application/octet-stream");
        if let Some(authorization) = &self.authorization {
            request = request.header("authorization", authorization);
        }
        let response = request.send(batch);
        match response {
            Err(e) => Attempt::Retry(e.to_string()),
            Ok(mut r) => {
                let status = r.status().as_u16();
                if (200..300).contains(&status) {
                    return Attempt::Delivered;
                }
                let message: String = r
                    .body_mut()
                    .read_to_string()
                    .unwrap_or_default()
                    .chars()
                    .take(500)
                    .collect();
                // A refused credential is kept (spooled) too: once the key
                // is fixed, the batches are delivered.
                if status >= 500 || matches!(status, 401 | 403 | 408 | 429) {
                    Attempt::Retry(format!("HTTP {status}: {message}"))
                } else {
                    Attempt::Refused(format!("HTTP {status}: {message}"))
                }
            }
        }
    }
}

/// A directory of encoded batches named by sequence number, capped in
/// bytes: past the cap the oldest are dropped, with a warning.
#[derive(Debug)]
pub struct Spool {
    dir: PathBuf,
    max_bytes: u64,
    next_seq: u64,
}

const SPOOL_EXT: &str = "klnb";

impl Spool {
    /// Opens (creating) the spool in `dir`, keeping what an earlier run
    /// left there for replay.
    pub fn open(dir: impl Into<PathBuf>, max_bytes: u64) -> io::Result<Self> {
        let dir = dir.into();
        fs::create_dir_all(&dir)?;
        // A crash mid-write leaves a .tmp file that was never renamed into
        // the spool: its batch was never taken as spooled, so drop it.
        for entry in fs::read_dir(&dir)? {
            let path = entry?.path();
            if path.extension().is_some_and(|e| e == "tmp") {
                let _ = fs::remove_file(&path);
            }
        }
        let mut spool = Spool {
            dir,
            max_bytes,
            next_seq: 0,
        };
        let files = spool.files()?;
        spool.next_seq = files
            .last()
            .and_then(|(p, _)| seq_of(p))
            .map_or(0, |s| s + 1);
        if !files.is_empty() {
            info!(batches = files.len(), dir = %spool.dir.display(), "spooled batches from an earlier run will be replayed");
        }
        Ok(spool)
    }

    /// The spooled batches, oldest first, with their sizes.
    pub fn files(&self) -> io::Result<Vec<(PathBuf, u64)>> {
        let mut files = Vec::new();
        for entry in fs::read_dir(&self.dir)? {
            let entry = entry?;
            let path = entry.path();
            if seq_of(&path).is_some() {
                files.push((path, entry.metadata()?.len()));
            }
        }
        files.sort_by_key(|(p, _)| seq_of(p));
        Ok(files)
    }

    /// Adds a batch, then drops the oldest batches past the byte cap.
    pub fn push(&mut self, bytes: &[u8]) -> io::Result<PathBuf> {
        let path = self.dir.join(format!("{:020}.{SPOOL_EXT}", self.next_seq));
        let tmp = self.dir.join(format!("{:020}.tmp", self.next_seq));
        let written = fs::File::create(&tmp).and_then(|mut f| {
            f.write_all(bytes)?;
            f.sync_data()
        });
        if let Err(e) = written.and_then(|()| fs::rename(&tmp, &path)) {
            // A partial file on a full disk would keep the space the next
            // batch needs.
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
        self.next_seq += 1;
        self.enforce_cap()?;
        Ok(path)
    }

    fn enforce_cap(&self) -> io::Result<()> {
        let files = self.files()?;
        let mut total: u64 = files.iter().map(|(_, len)| len).sum();
        // The newest batch is always kept, even alone over the cap.
        for (path, len) in &files[..files.len().saturating_sub(1)] {
            if total <= self.max_bytes {
                break;
            }
            warn!(
                file = %path.display(),
                bytes = len,
                cap = self.max_bytes,
                "spool over its size cap: dropping its oldest batch, whose samples are lost"
            );
            fs::remove_file(path)?;
            total -= len;
        }
        Ok(())
    }

    /// Renames a batch the backend refused so it is kept for inspection
    /// but no longer replayed.
    fn set_aside(&self, path: &Path) {
        let aside = path.with_extension("rejected");
        if let Err(e) = fs::rename(path, &aside) {
            warn!(error = %e, file = %path.display(), "setting aside a spool file failed");
        }
    }
}

fn seq_of(path: &Path) -> Option<u64> {
    if path.extension()? != SPOOL_EXT {
        return None;
    }
    path.file_stem()?.to_str()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    // Guards ordering across reopen and the oldest-first drop at the cap.
    #[test]
    fn spool_keeps_order_and_drops_oldest_past_cap() {
        let dir = tempfile::tempdir().unwrap();
        let mut spool = Spool::open(dir.path(), 250).unwrap();
        for i in 0..3u8 {
            spool.push(&[i; 100]).unwrap();
        }
        let files = spool.files().unwrap();
        assert_eq!(files.len(), 2, "oldest dropped past 250 bytes");
        assert_eq!(fs::read(&files[0].0).unwrap(), vec![1; 100]);
        let mut reopened = Spool::open(dir.path(), 250).unwrap();
        reopened.push(&[9; 10]).unwrap();
        let files = reopened.files().unwrap();
        assert_eq!(fs::read(&files.last().unwrap().0).unwrap(), vec![9; 10]);
        assert_eq!(files.len(), 3);
    }

    /// A one-connection-at-a-time HTTP server on loopback that answers
    /// each POST with the next status of `statuses` (then 200) and records
    /// the bodies it accepted.
    fn backend(statuses: Vec<u16>) -> (String, std::sync::mpsc::Receiver<Vec<u8>>) {
        use std::io::{BufRead, BufReader, Read};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut statuses = statuses.into_iter();
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut len = 0;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        break;
                    }
                    let lower = line.to_ascii_lowercase();
                    if let Some(v) = lower.strip_prefix("content-length:") {
                        len = v.trim().parse().unwrap();
                    }
                    if line == "\r\n" {
                        break;
                    }
                }
                let mut body = vec![0; len];
                reader.read_exact(&mut body).unwrap();
                let status = statuses.next().unwrap_or(200);
                if status == 200 && tx.send(body).is_err() {
                    return;
                }
                let reply = format!(
                    "HTTP/1.1 {status} X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                );
                let _ = stream.write_all(reply.as_bytes());
            }
        });
        (url, rx)
    }

    fn batch(n: i64) -> Batch {
        Batch {
            source: "test".into(),
            sent_at_ns: n,
            ..Batch::default()
        }
    }

    // Guards delivery across an outage: batches sent while the backend
    // answers 503, or 507 (its disk is full), are spooled, then delivered
    // oldest first, before the batch that finds it back.
    #[test]
    fn spooled_batches_are_replayed_in_order() {
        let (url, delivered) = backend(vec![503, 507]);
        let dir = tempfile::tempdir().unwrap();
        let mut sink = HttpSink::new(&url, None, Some(Spool::open(dir.path(), 1 << 20).unwrap()));
        assert_eq!(sink.send(&batch(1)).unwrap(), Delivery::Spooled);
        // The spool is not empty: the replay of batch 1 gets the 507, so
        // batch 2 queues behind it.
        assert_eq!(sink.send(&batch(2)).unwrap(), Delivery::Spooled);
        assert_eq!(sink.send(&batch(3)).unwrap(), Delivery::Delivered);
        let got: Vec<i64> = delivered
            .try_iter()
            .map(|b| Batch::decode(&b).unwrap().sent_at_ns)
            .collect();
        assert_eq!(got, vec![1, 2, 3]);
        assert!(sink.spool.as_ref().unwrap().files().unwrap().is_empty());
    }

    // Guards that a refused batch (4xx) comes back to the caller.
    #[test]
    fn refused_batch_is_returned() {
        let (url, _delivered) = backend(vec![400]);
        let mut sink = HttpSink::new(&url, None, None);
        match sink.send(&batch(7)) {
            Err(SinkError::Rejected {
                reason,
                batch: bytes,
            }) => {
                assert!(reason.starts_with("HTTP 400"), "{reason}");
                assert_eq!(Batch::decode(&bytes).unwrap(), batch(7))
            }
            other => panic!("expected Rejected, got {other:?}"),
        }
    }

    // Guards that an unreachable backend spools and returns Spooled, and
    // that with no spool the batch comes back in the error.
    #[test]
    fn unreachable_backend_spools_or_returns_the_batch() {
        // Port 9 (discard) on loopback: nothing listens there.
        let dir = tempfile::tempdir().unwrap();
        let batch = Batch::default();
        let mut sink = HttpSink::new(
            "http://127.0.0.1:9",
            None,
            Some(Spool::open(dir.path(), 1 << 20).unwrap()),
        );
        assert_eq!(sink.send(&batch).unwrap(), Delivery::Spooled);
        assert_eq!(sink.send(&batch).unwrap(), Delivery::Spooled);
        assert_eq!(sink.spool.as_ref().unwrap().files().unwrap().len(), 2);

        let mut bare = HttpSink::new("http://127.0.0.1:9", None, None);
        match bare.send(&batch) {
            Err(SinkError::Unavailable { batch: bytes, .. }) => {
                assert_eq!(Batch::decode(&bytes).unwrap(), batch)
            }
            other => panic!("expected Unavailable, got {other:?}"),
        }
    }

    // Guards a spool that cannot take batches (its disk full): they are
    // held in memory, go to the spool in order once it takes batches
    // again, and reach the backend oldest first.
    #[test]
    fn batches_the_spool_cannot_take_are_held_then_delivered_in_order() {
        let (url, delivered) = backend(vec![503, 503, 503, 503]);
        let dir = tempfile::tempdir().unwrap();
        let spool_dir = dir.path().join("spool");
        let mut sink = HttpSink::new(&url, None, Some(Spool::open(&spool_dir, 1 << 20).unwrap()));
        assert_eq!(sink.send(&batch(1)).unwrap(), Delivery::Spooled);
        // The spool's directory gone: writes fail as on a full disk.
        fs::remove_dir_all(&spool_dir).unwrap();
        assert_eq!(sink.send(&batch(2)).unwrap(), Delivery::Held);
        assert_eq!(sink.send(&batch(3)).unwrap(), Delivery::Held);
        assert_eq!(sink.held(), 2);
        assert!(fs::read_dir(dir.path()).unwrap().count() == 0);
        // Room again: the held batches go to the spool first, in order.
        fs::create_dir(&spool_dir).unwrap();
        assert_eq!(sink.send(&batch(4)).unwrap(), Delivery::Spooled);
        assert_eq!(sink.held(), 0);
        assert_eq!(sink.spool().unwrap().files().unwrap().len(), 3);
        // The backend back: everything, oldest first (batch 1 was lost
        // with its directory).
        assert_eq!(sink.send(&batch(5)).unwrap(), Delivery::Delivered);
        let got: Vec<i64> = delivered
            .try_iter()
            .map(|b| Batch::decode(&b).unwrap().sent_at_ns)
            .collect();
        assert_eq!(got, vec![2, 3, 4, 5]);
    }

    // Guards held batches delivered straight from memory when the backend
    // comes back before the spool does.
    #[test]
    fn held_batches_are_delivered_before_the_next() {
        let (url, delivered) = backend(vec![503, 503]);
        let dir = tempfile::tempdir().unwrap();
        let spool_dir = dir.path().join("spool");
        let mut sink = HttpSink::new(&url, None, Some(Spool::open(&spool_dir, 1 << 20).unwrap()));
        fs::remove_dir_all(&spool_dir).unwrap();
        assert_eq!(sink.send(&batch(1)).unwrap(), Delivery::Held);
        assert_eq!(sink.send(&batch(2)).unwrap(), Delivery::Held);
        assert_eq!(sink.send(&batch(3)).unwrap(), Delivery::Delivered);
        let got: Vec<i64> = delivered
            .try_iter()
            .map(|b| Batch::decode(&b).unwrap().sent_at_ns)
            .collect();
        assert_eq!(got, vec![1, 2, 3]);
        assert_eq!(sink.held(), 0);
    }

    // Guards the cap on held bytes: the oldest go first, the newest stays.
    #[test]
    fn held_batches_are_capped_oldest_first() {
        let mut held = Held::default();
        for i in 0..3u8 {
            held.push(vec![i; MAX_HELD_BYTES / 2]);
        }
        assert_eq!(held.batches.len(), 2);
        assert_eq!(held.batches[0][0], 1);
        held.push(vec![9; MAX_HELD_BYTES + 1]);
        assert_eq!(held.batches.len(), 1);
        assert_eq!(held.bytes, MAX_HELD_BYTES + 1);
    }
}
