//! Answers that stop being worked on when nobody waits for them.
//!
//! An actix handler that returns a [`ResponseFuture`](actix::ResponseFuture)
//! has it run to the end even after the asker dropped its request: an
//! HTTP client that gave up on a long query left the query scanning
//! (issue 18 saw one run on for 20 minutes). [`Abandonable`] runs the same
//! future, but races it against the asker's side of the reply channel and
//! drops it — with every partition scan it has in flight — as soon as
//! that side is gone. Dropped scan requests in turn close their own reply
//! channels, and actix skips a queued message whose reply channel is
//! closed, so aggregators never start the partitions still waiting in
//! their mailboxes.

use std::future::Future;
use std::pin::Pin;

use actix::dev::{MessageResponse, OneshotSender};
use actix::{Actor, Message};
use futures_util::future::{Either, select};

/// A handler's answer, computed on the actor's arbiter like a
/// `ResponseFuture`, and dropped as soon as the asker stops waiting.
///
/// # Cancel safety
///
/// The future may be dropped at any of its await points: it must leave
/// nothing half done that outlives it (queries only read).
pub struct Abandonable<T>(Pin<Box<dyn Future<Output = T>>>);

impl<T> Abandonable<T> {
    pub fn new(work: impl Future<Output = T> + 'static) -> Self {
        Abandonable(Box::pin(work))
    }
}

impl<A, M, T> MessageResponse<A, M> for Abandonable<T>
where
    A: Actor,
    M: Message<Result = T>,
    T: 'static,
{
    fn handle(self, _: &mut A::Context, tx: Option<OneshotSender<T>>) {
        // `do_send` leaves no one to read the answer: none is computed.
        let Some(mut tx) = tx else { return };
        let work = self.0;
        actix_rt::spawn(async move {
            let answer = {
                let gone = std::pin::pin!(tx.closed());
                match select(work, gone).await {
                    Either::Left((answer, _)) => Some(answer),
                    Either::Right(((), _)) => None,
                }
            };
            match answer {
                // The asker may leave between the answer and this send:
                // then the answer is dropped, as it would have been.
                Some(answer) => drop(tx.send(answer)),
                None => tracing::debug!(
                    message = std::any::type_name::<M>(),
                    "the asker went away: work on its answer stopped"
                ),
            }
        });
    }
}

impl<T> std::fmt::Debug for Abandonable<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Abandonable(..)")
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::Duration;

    use actix::{Context, Handler};

    use super::*;

    /// Counts to `n`, one step per 10 ms, into a shared counter.
    #[derive(Message)]
    #[rtype(result = "u32")]
    struct Count(u32);

    struct Counter(Arc<AtomicU32>);

    impl Actor for Counter {
        type Context = Context<Self>;
    }

    impl Handler<Count> for Counter {
        type Result = Abandonable<u32>;

        fn handle(&mut self, Count(n): Count, _: &mut Context<Self>) -> Self::Result {
            let steps = self.0.clone();
            Abandonable::new(async move {
                for _ in 0..n {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    steps.fetch_add(1, Ordering::Relaxed);
                }
                n
            })
        }
    }

    /// Guards the point of the type: work stops soon after the asker
    /// drops its request, and an asker that waits gets the answer.
    #[actix_rt::test]
    async fn work_stops_when_the_asker_leaves() {
        let steps = Arc::new(AtomicU32::new(0));
        let counter = Counter(steps.clone()).start();
        assert_eq!(counter.send(Count(3)).await.unwrap(), 3);
        assert_eq!(steps.load(Ordering::Relaxed), 3);

        let request = counter.send(Count(10_000));
        // Give up after a few steps.
        let gave_up = tokio::time::timeout(Duration::from_millis(100), request).await;
        assert!(gave_up.is_err());
        tokio::time::sleep(Duration::from_millis(100)).await;
        let after = steps.load(Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(steps.load(Ordering::Relaxed), after, "work went on");
        assert!(after < 3 + 100, "{after} steps");
    }
}
