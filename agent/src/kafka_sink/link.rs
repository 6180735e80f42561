//! The Kafka transport's link to the brokers: connected, or known to be
//! down while one reconnect probe at a time runs in the background, with
//! backoff. A send never waits on a broker known to be away: only the
//! publish that finds the broker gone waits (for the publish timeout), and
//! the first connect (for [`FIRST_CONNECT_WAIT`]); after that, batches go
//! to the spool until a probe has connected again.

use std::time::{Duration, Instant};

use kiln_ingest_bus::{Bus, BusError, KafkaBus, KafkaOptions};
use tokio::runtime::Runtime;
use tokio::task::{JoinError, JoinHandle};
use tracing::{debug, info, warn};

use crate::sink::Attempt;

/// How long the first send waits for the first connect. An agent started
/// while Kafka is down spools after this; one started with Kafka up
/// delivers its first batch.
const FIRST_CONNECT_WAIT: Duration = Duration::from_secs(3);
/// The wait before the first probe of an outage; it doubles after each
/// failed probe, up to [`MAX_PROBE_BACKOFF`].
const FIRST_PROBE_BACKOFF: Duration = Duration::from_secs(1);
/// The longest wait between probes, which bounds how long after the
/// broker's return the spool starts to drain.
const MAX_PROBE_BACKOFF: Duration = Duration::from_secs(30);

/// A connect running on the link's runtime.
type Connecting = JoinHandle<Result<KafkaBus, BusError>>;

/// Where the link stands.
enum State {
    /// Never tried.
    Fresh,
    /// Publishing to this bus.
    Up(KafkaBus),
    /// Known to be away.
    Down {
        /// The probe in flight: a fresh connect.
        probe: Option<Connecting>,
        /// When the next probe may start, if none is in flight.
        next_probe: Instant,
        /// Why the link is down, for the spooled batches' log lines.
        reason: String,
    },
}

/// The producer's connection and the runtime that drives it.
pub(super) struct Link {
    options: KafkaOptions,
    state: State,
    /// The wait before the next probe after a failed one.
    backoff: Duration,
    /// Publishes tried, successful or not.
    publishes: u64,
    /// Connects started, the first and every probe's.
    connects: u64,
    /// librdkafka's callbacks run on its own threads; this runtime's one
    /// worker drives the probes between sends, and the agent's synchronous
    /// loop blocks on its publishes. Always `Some` but in `drop`.
    runtime: Option<Runtime>,
}

impl Link {
    /// A link to the brokers of `options`; nothing is connected yet.
    pub(super) fn new(options: KafkaOptions) -> std::io::Result<Link> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("kiln-kafka-sink")
            .enable_all()
            .build()?;
        Ok(Link {
            options,
            state: State::Fresh,
            backoff: FIRST_PROBE_BACKOFF,
            publishes: 0,
            connects: 0,
            runtime: Some(runtime),
        })
    }

    /// The options it connects with.
    pub(super) fn options(&self) -> &KafkaOptions {
        &self.options
    }

    /// Publishes tried so far.
    pub(super) fn publishes(&self) -> u64 {
        self.publishes
    }

    /// Connects started so far.
    pub(super) fn connects(&self) -> u64 {
        self.connects
    }

    /// Whether it is connected.
    pub(super) fn is_up(&self) -> bool {
        matches!(self.state, State::Up(_))
    }

    /// `Ok` when connected; otherwise why not. Checks on the probe, or
    /// starts one when its backoff is over, without waiting for it (but
    /// for the very first connect, which it waits on up to
    /// [`FIRST_CONNECT_WAIT`]).
    pub(super) fn ready(&mut self) -> Result<(), String> {
        let runtime = self.runtime.as_ref().expect("taken only in drop");
        match &mut self.state {
            State::Up(_) => {}
            State::Fresh => {
                let mut connect = Self::connect_on(runtime, &self.options, &mut self.connects);
                let waited = runtime.block_on(async {
                    tokio::time::timeout(FIRST_CONNECT_WAIT, &mut connect).await
                });
                match waited {
                    Ok(result) => self.settle(result),
                    Err(_elapsed) => {
                        self.state = State::Down {
                            probe: Some(connect),
                            next_probe: Instant::now(),
                            reason: format!(
                                "Kafka did not answer in {FIRST_CONNECT_WAIT:?}; still connecting"
                            ),
                        }
                    }
                }
                if let State::Down { reason, .. } = &self.state {
                    warn!(
                        brokers = self.options.brokers,
                        %reason,
                        "Kafka is away: spooling batches until a probe finds it back"
                    );
                }
            }
            State::Down {
                probe, next_probe, ..
            } => {
                if probe.as_ref().is_some_and(JoinHandle::is_finished) {
                    let finished = probe.take().expect("checked above");
                    let result = runtime.block_on(finished);
                    self.settle(result);
                } else if probe.is_none() && Instant::now() >= *next_probe {
                    *probe = Some(Self::connect_on(runtime, &self.options, &mut self.connects));
                }
            }
        }
        match &self.state {
            State::Up(_) => Ok(()),
            State::Down { reason, .. } => Err(reason.clone()),
            State::Fresh => unreachable!("left above"),
        }
    }

    /// Publishes `payload` under `key` and waits for the brokers'
    /// acknowledgement, or fails at once when the link is down. A publish
    /// that fails for want of a broker takes the link down.
    pub(super) fn publish(&mut self, key: &[u8], payload: Vec<u8>) -> Attempt {
        if let Err(reason) = self.ready() {
            return Attempt::Retry(reason);
        }
        let State::Up(bus) = &self.state else {
            unreachable!("ready() is Ok only when up")
        };
        let bus = bus.clone();
        self.publishes += 1;
        let error = match self.runtime().block_on(bus.publish(key, payload)) {
            Ok(_) => return Attempt::Delivered,
            Err(e) => e.source,
        };
        if let BusError::RecordTooLarge { .. } = error {
            return Attempt::Refused(error.to_string());
        }
        let reason = format!("publishing to Kafka: {error}");
        warn!(%reason, "Kafka is away: spooling batches until a probe finds it back");
        self.go_down(reason.clone());
        Attempt::Retry(reason)
    }

    /// Records a connect's outcome: up, or down until the next probe,
    /// which waits twice as long as this one did.
    fn settle(&mut self, result: Result<Result<KafkaBus, BusError>, JoinError>) {
        let error = match result {
            Ok(Ok(bus)) => {
                info!(
                    brokers = self.options.brokers,
                    topic = self.options.topic,
                    "kafka sink connected"
                );
                self.state = State::Up(bus);
                self.backoff = FIRST_PROBE_BACKOFF;
                return;
            }
            Ok(Err(e)) => e.to_string(),
            Err(e) => format!("the connect task failed: {e}"),
        };
        debug!(error, next_in = ?self.backoff, "Kafka still away");
        self.state = State::Down {
            probe: None,
            next_probe: Instant::now() + self.backoff,
            reason: format!("connecting to Kafka: {error}"),
        };
        self.backoff = (self.backoff * 2).min(MAX_PROBE_BACKOFF);
    }

    /// Drops the bus (off this thread: a producer's drop flushes) and
    /// waits [`FIRST_PROBE_BACKOFF`] before the first probe.
    fn go_down(&mut self, reason: String) {
        let was = std::mem::replace(
            &mut self.state,
            State::Down {
                probe: None,
                next_probe: Instant::now() + FIRST_PROBE_BACKOFF,
                reason,
            },
        );
        if let State::Up(bus) = was {
            self.runtime().spawn_blocking(move || drop(bus));
        }
        self.backoff = FIRST_PROBE_BACKOFF * 2;
    }

    /// Starts a connect on `runtime` (apart from `self`, so that it can be
    /// called while the state is borrowed).
    fn connect_on(runtime: &Runtime, options: &KafkaOptions, connects: &mut u64) -> Connecting {
        *connects += 1;
        runtime.spawn(KafkaBus::connect(options.clone()))
    }

    fn runtime(&self) -> &Runtime {
        self.runtime.as_ref().expect("taken only in drop")
    }
}

impl Drop for Link {
    /// Does not wait for a probe in flight: its metadata lookup may take
    /// seconds against a broker that is away, and the agent is stopping.
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}
