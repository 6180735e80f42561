//! Choosing a bus by URL: the one parser behind every `--bus` flag.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;

use crate::bus::Bus;
use crate::embedded::EmbeddedBus;
use crate::error::BusError;
#[cfg(feature = "kafka")]
use crate::kafka::KafkaBus;
use crate::kafka::KafkaOptions;

/// A bus, named by URL:
///
/// - `file:///DIR`: the embedded bus in a local directory (one process
///   only: it locks the directory);
/// - `kafka://HOST:PORT[,HOST:PORT…][/TOPIC][?partitions=N]`: a Kafka
///   topic (default `kiln-ingest`), created with N partitions (default 8)
///   when it does not exist.
///
/// # Examples
///
/// ```
/// use kiln_ingest_bus::BusUrl;
///
/// let url: BusUrl = "kafka://10.0.0.1:9092,10.0.0.2:9092/profiles?partitions=32".parse()?;
/// let BusUrl::Kafka(options) = url else { unreachable!() };
/// assert_eq!(options.brokers, "10.0.0.1:9092,10.0.0.2:9092");
/// assert_eq!((options.topic.as_str(), options.partitions), ("profiles", 32));
///
/// let err = "amqp://mq:5672".parse::<BusUrl>().unwrap_err();
/// assert!(err.to_string().contains("kafka://"));
/// # Ok::<_, kiln_ingest_bus::BusError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BusUrl {
    /// The embedded bus in this directory.
    Embedded(PathBuf),
    /// A Kafka topic.
    Kafka(KafkaOptions),
}

impl BusUrl {
    /// Opens the bus: the embedded one with `embedded_partitions`
    /// partitions when it is new, the Kafka one by connecting (and creating
    /// its topic when missing).
    pub async fn open(&self, embedded_partitions: u32) -> Result<Arc<dyn Bus>, BusError> {
        match self {
            BusUrl::Embedded(dir) => {
                let dir = dir.clone();
                let bus = tokio::task::spawn_blocking(move || {
                    EmbeddedBus::open(&dir, embedded_partitions)
                })
                .await
                .map_err(|_| BusError::Panicked)??;
                Ok(Arc::new(bus))
            }
            #[cfg(feature = "kafka")]
            BusUrl::Kafka(options) => Ok(Arc::new(KafkaBus::connect(options.clone()).await?)),
            #[cfg(not(feature = "kafka"))]
            BusUrl::Kafka(_) => Err(BusError::KafkaNotBuilt),
        }
    }
}

impl FromStr for BusUrl {
    type Err = BusError;

    fn from_str(url: &str) -> Result<BusUrl, BusError> {
        let bad = |reason: &str| BusError::BadUrl {
            url: url.to_owned(),
            reason: reason.to_owned(),
        };
        let Some((scheme, rest)) = url.split_once("://") else {
            return Err(bad("expected kafka://HOST:PORT[/TOPIC] or file:///DIR"));
        };
        match scheme {
            "file" => {
                if !rest.starts_with('/') || rest.len() < 2 {
                    return Err(bad("a file URL needs an absolute directory: file:///DIR"));
                }
                Ok(BusUrl::Embedded(PathBuf::from(rest)))
            }
            "kafka" => parse_kafka(rest).map(BusUrl::Kafka).map_err(|r| bad(&r)),
            other => Err(bad(&format!(
                "unknown scheme {other:?}: use kafka://HOST:PORT[/TOPIC] or file:///DIR"
            ))),
        }
    }
}

/// Parses what follows `kafka://`.
fn parse_kafka(rest: &str) -> Result<KafkaOptions, String> {
    let (rest, query) = match rest.split_once('?') {
        Some((rest, query)) => (rest, Some(query)),
        None => (rest, None),
    };
    let (brokers, topic) = match rest.split_once('/') {
        Some((brokers, topic)) => (brokers, Some(topic)),
        None => (rest, None),
    };
    for broker in brokers.split(',') {
        let Some((host, port)) = broker.rsplit_once(':') else {
            return Err(format!("broker {broker:?} is not HOST:PORT"));
        };
        if host.is_empty() || port.parse::<u16>().map_or(true, |p| p == 0) {
            return Err(format!("broker {broker:?} is not HOST:PORT"));
        }
    }
    let mut options = KafkaOptions::new(brokers);
    match topic {
        Some("") | None => {}
        Some(topic) if is_topic_name(topic) => options = options.topic(topic),
        Some(topic) => {
            return Err(format!(
                "topic {topic:?} is not 1 to 249 of the characters A-Z a-z 0-9 . _ -"
            ));
        }
    }
    for pair in query
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
    {
        match pair.split_once('=') {
            Some(("partitions", n)) => {
                let n = n
                    .parse::<u32>()
                    .ok()
                    .filter(|&n| n > 0 && n <= i32::MAX as u32)
                    .ok_or_else(|| format!("partitions={n} is not a positive number"))?;
                options = options.partitions(n);
            }
            _ => return Err(format!("unknown parameter {pair:?} (known: partitions=N)")),
        }
    }
    Ok(options)
}

/// Kafka's rule for topic names.
fn is_topic_name(name: &str) -> bool {
    (1..=249).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

impl fmt::Display for BusUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BusUrl::Embedded(dir) => write!(f, "file://{}", dir.display()),
            BusUrl::Kafka(o) => write!(f, "kafka://{}/{}", o.brokers, o.topic),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(url: &str) -> String {
        match url.parse::<BusUrl>() {
            Err(BusError::BadUrl { reason, .. }) => reason,
            other => panic!("{url}: expected a BadUrl error, got {other:?}"),
        }
    }

    #[test]
    fn kafka_urls_name_brokers_topic_and_partitions() {
        let BusUrl::Kafka(o) = "kafka://127.0.0.1:9092".parse().unwrap() else {
            panic!("not kafka")
        };
        assert_eq!(o, KafkaOptions::new("127.0.0.1:9092"));
        let BusUrl::Kafka(o) = "kafka://a:1,b:2/t.x-1?partitions=3".parse().unwrap() else {
            panic!("not kafka")
        };
        assert_eq!((o.brokers.as_str(), o.topic.as_str()), ("a:1,b:2", "t.x-1"));
        assert_eq!(o.partitions, 3);
    }

    #[test]
    fn file_urls_name_a_directory() {
        assert_eq!(
            "file:///var/lib/kiln/bus".parse::<BusUrl>().unwrap(),
            BusUrl::Embedded("/var/lib/kiln/bus".into())
        );
        assert!(reason("file://relative").contains("absolute"));
    }

    #[test]
    fn bad_urls_say_what_is_wrong() {
        assert!(reason("localhost:9092").contains("kafka://HOST:PORT"));
        assert!(reason("amqp://h:1").contains("unknown scheme \"amqp\""));
        assert!(reason("kafka://h").contains("\"h\" is not HOST:PORT"));
        assert!(reason("kafka://h:0").contains("is not HOST:PORT"));
        assert!(reason("kafka://h:1,:2").contains("\":2\" is not HOST:PORT"));
        assert!(reason("kafka://h:1/a b").contains("topic \"a b\""));
        assert!(reason("kafka://h:1?partitions=0").contains("partitions=0"));
        assert!(reason("kafka://h:1?acks=0").contains("unknown parameter"));
    }

    #[test]
    fn display_round_trips() {
        for url in ["kafka://a:1,b:2/t", "file:///d"] {
            assert_eq!(url.parse::<BusUrl>().unwrap().to_string(), url);
        }
    }
}
