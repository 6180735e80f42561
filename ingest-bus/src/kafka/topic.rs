//! Looking up the bus topic, and creating it when it is missing.

use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::producer::{FutureProducer, Producer as _};

use super::options::KafkaOptions;
use crate::error::BusError;

/// How long one metadata request may take.
const METADATA_TIMEOUT: Duration = Duration::from_secs(10);
/// Metadata lookups after creating the topic, waiting for it to appear.
const APPEAR_ATTEMPTS: u32 = 20;

/// The topic's partition count, after creating the topic with
/// `options.partitions` partitions if it does not exist.
pub(super) async fn ensure(
    options: &KafkaOptions,
    producer: &FutureProducer,
) -> Result<u32, BusError> {
    if let Some(partitions) = partition_count(options, producer).await? {
        return Ok(partitions);
    }
    create(options).await?;
    for _ in 0..APPEAR_ATTEMPTS {
        if let Some(partitions) = partition_count(options, producer).await? {
            return Ok(partitions);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(BusError::Kafka {
        op: "see the topic just created",
        detail: format!(
            "topic {:?} was created but the brokers {} do not list it",
            options.topic, options.brokers
        ),
    })
}

/// The topic's partition count, `None` when the brokers do not know it.
async fn partition_count(
    options: &KafkaOptions,
    producer: &FutureProducer,
) -> Result<Option<u32>, BusError> {
    let producer = producer.clone();
    let topic = options.topic.clone();
    tokio::task::spawn_blocking(move || {
        let metadata = producer
            .client()
            .fetch_metadata(Some(&topic), METADATA_TIMEOUT)
            .map_err(BusError::kafka("fetch the topic's metadata"))?;
        let Some(found) = metadata.topics().iter().find(|t| t.name() == topic) else {
            return Ok(None);
        };
        match found.error() {
            None if !found.partitions().is_empty() => Ok(Some(found.partitions().len() as u32)),
            None => Ok(None),
            Some(code)
                if RDKafkaErrorCode::from(code) == RDKafkaErrorCode::UnknownTopicOrPartition =>
            {
                Ok(None)
            }
            Some(code) => Err(BusError::Kafka {
                op: "fetch the topic's metadata",
                detail: format!("topic {topic:?}: {}", RDKafkaErrorCode::from(code)),
            }),
        }
    })
    .await
    .map_err(|_| BusError::Panicked)?
}

async fn create(options: &KafkaOptions) -> Result<(), BusError> {
    let admin: AdminClient<DefaultClientContext> = options
        .admin_config()
        .create()
        .map_err(BusError::kafka("create an admin client"))?;
    // The brokers' default replication factor (-1): a single broker in
    // tests, three in a production cluster.
    let topic = NewTopic::new(
        &options.topic,
        options.partitions as i32,
        TopicReplication::Fixed(-1),
    );
    let results = admin
        .create_topics(
            [&topic],
            &AdminOptions::new().request_timeout(Some(METADATA_TIMEOUT)),
        )
        .await
        .map_err(BusError::kafka("create the topic"))?;
    for result in results {
        match result {
            Ok(_) => tracing::info!(
                topic = options.topic,
                partitions = options.partitions,
                "created the Kafka topic"
            ),
            // Another process created it first.
            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((name, code)) => {
                return Err(BusError::Kafka {
                    op: "create the topic",
                    detail: format!("topic {name:?}: {code}"),
                });
            }
        }
    }
    Ok(())
}
