//! The ingest pipeline and the query cluster together, without HTTP: real
//! embedded bus and stores in a temporary directory.

mod common;

use kiln_actors::query::TopQuery;
use kiln_model::{BatchBuilder, Frame, FrameKind, LabelSet};
use kiln_storage::ObjectStore;

use common::{Pipeline, T0};

fn frames(names: &[&str]) -> Vec<Frame> {
    names
        .iter()
        .map(|n| Frame::named(FrameKind::Native, *n))
        .collect()
}

#[actix_rt::test]
async fn batches_across_hours_and_hosts_add_up() {
    let s = Pipeline::start(3).await;
    let web = LabelSet::new().with("host", "a");
    let db = LabelSet::new().with("host", "b");
    let mut b = BatchBuilder::new("a", T0, 10_000_000);
    b.add(T0, &frames(&["main", "work"]), &web, 3);
    // Two hours later: another storage partition.
    b.add(T0 + 7_200_000_000_000, &frames(&["main", "work"]), &web, 2);
    s.publish("a", &b.finish().encode()).await;
    let mut b = BatchBuilder::new("b", T0, 10_000_000);
    b.add(T0 + 1, &frames(&["main", "idle"]), &db, 4);
    s.publish("b", &b.finish().encode()).await;

    assert_eq!(s.collapsed(&[]).await, "main;idle 4\nmain;work 5\n");
    assert_eq!(s.collapsed(&[("host", "a")]).await, "main;work 5\n");

    let top = s
        .query
        .send(TopQuery {
            range: s.range(&[]),
            limit: 10,
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(top[0].name, "work");
    assert_eq!(top[0].self_samples, 5);
    let main = top.iter().find(|t| t.name == "main").unwrap();
    assert_eq!((main.self_samples, main.total_samples), (0, 9));
}

/// An agent sends each dictionary entry once; later batches carry only ids.
#[actix_rt::test]
async fn samples_may_refer_to_stacks_sent_earlier() {
    let s = Pipeline::start(3).await;
    let labels = LabelSet::new().with("host", "a");
    let mut b = BatchBuilder::new("a", T0, 1);
    b.add(T0, &frames(&["main", "f"]), &labels, 1);
    let first = b.finish();
    let mut second = first.clone();
    second.frames.clear();
    second.stacks.clear();
    second.label_sets.clear();
    second.samples[0].timestamp_ns += 1;
    second.samples[0].count = 6;
    s.publish("a", &first.encode()).await;
    s.publish("a", &second.encode()).await;
    assert_eq!(s.collapsed(&[]).await, "main;f 7\n");
}

/// A record the decoder refuses is kept whole in the object store, under
/// its tenant's dead letters with the reason beside it, counted, and does
/// not stop the records after it.
#[actix_rt::test]
async fn undecodable_batches_go_to_the_dead_letter_area() {
    let s = Pipeline::start(3).await;
    s.publish("a", b"KLNB\x09\x00\x00\x00 from a future agent")
        .await;
    let mut b = BatchBuilder::new("a", T0, 1);
    b.add(T0, &frames(&["main"]), &LabelSet::new(), 2);
    s.publish("a", &b.finish().encode()).await;
    assert_eq!(s.collapsed(&[]).await, "main 2\n");
    let kept = s.objects.list("tenants/acme/dead-letters/").await.unwrap();
    assert_eq!(kept.len(), 2, "{kept:?}");
    let envelope = kept
        .iter()
        .find(|k| k.as_str().ends_with(".envelope"))
        .unwrap();
    let bytes = s.objects.get(envelope).await.unwrap().unwrap();
    assert!(bytes.ends_with(b"from a future agent"));
    let reason = kept
        .iter()
        .find(|k| k.as_str().ends_with(".reason"))
        .unwrap();
    let reason = s.objects.get(reason).await.unwrap().unwrap();
    let reason = String::from_utf8_lossy(&reason);
    assert!(
        reason.contains("batch format version 9 is not supported"),
        "{reason}"
    );
    assert_eq!(s.progress.dead_letters(), 1);
}

/// Replaying a batch (at-least-once delivery) does not count it twice.
#[actix_rt::test]
async fn replayed_batches_count_once() {
    let s = Pipeline::start(3).await;
    let mut b = BatchBuilder::new("a", T0, 1);
    b.add(T0, &frames(&["main", "g"]), &LabelSet::new(), 5);
    let bytes = b.finish().encode();
    s.publish("a", &bytes).await;
    s.publish("a", &bytes).await;
    assert_eq!(s.collapsed(&[]).await, "main;g 5\n");
}
