//! The dead-letter area: records the pipeline cannot store, set aside
//! whole in the object store so that nothing accepted is lost silently.

use kiln_ingest_bus::Record;
use kiln_storage::{ObjectKey, ObjectStore};
use tracing::{debug, error, warn};

use super::backoff::Backoff;

/// Where records the pipeline sets aside go, under their tenant's area
/// (`tenants/<t>/dead-letters/`) when a verified envelope names it, at the
/// top of the object store otherwise.
pub(crate) const DEAD_LETTERS: &str = "dead-letters";

/// Sets `record` aside in the object store, whole, with `reason` beside it
/// (`<name>.envelope` and `<name>.reason`, named by partition and offset):
/// under `tenants/<tenant>/dead-letters/` when `tenant` is known from a
/// verified envelope, under `dead-letters/` otherwise. It is logged once,
/// here; a newer build (or an operator) can replay it. Store failures are
/// retried until the record is kept: its offset is committed after this.
pub(crate) async fn dead_letter(
    objects: &dyn ObjectStore,
    record: &Record,
    tenant: Option<&str>,
    reason: &str,
) {
    let name = format!("p{}-o{}", record.partition, record.offset);
    let prefix = match tenant {
        Some(t) => format!("tenants/{t}/{DEAD_LETTERS}/"),
        None => format!("{DEAD_LETTERS}/"),
    };
    let key = format!("{prefix}{name}.envelope");
    warn!(
        partition = record.partition,
        offset = record.offset,
        tenant = tenant.unwrap_or("?"),
        key,
        reason,
        "bus record set aside in the dead-letter area"
    );
    let note = format!(
        "partition {}\noffset {}\nbytes {}\nreason {reason}\n",
        record.partition,
        record.offset,
        record.payload.len()
    );
    let objects_to_put = [
        (key, record.payload.clone()),
        (format!("{prefix}{name}.reason"), note.into_bytes()),
    ];
    for (key, bytes) in objects_to_put {
        let key = match ObjectKey::new(&key) {
            Ok(key) => key,
            Err(e) => {
                error!(error = %e, "cannot name a dead letter; record dropped");
                return;
            }
        };
        let mut backoff = Backoff::new();
        loop {
            match objects.put(&key, bytes.clone().into()).await {
                Ok(()) => {
                    debug!(%key, "dead letter stored");
                    break;
                }
                Err(e) => {
                    warn!(error = %e, "storing a dead letter failed; retrying");
                    backoff.wait().await;
                }
            }
        }
    }
}
