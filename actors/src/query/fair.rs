//! Fair shares of a node's partition scans between tenants.
//!
//! Every scan this node runs (for its own queries and for its peers')
//! first takes a slot here. A node runs at most `capacity` scans at once;
//! when they are all taken, the next free slot goes to the waiting tenants
//! in turn, one scan each, not to whoever queued first. And no tenant
//! holds more than `capacity` less a reserve, so another tenant's scan
//! finds a slot free the moment it arrives.
//!
//! Without it, a tenant running eight heavy queries of 32 scans each put
//! 256 scans in the aggregators' mailboxes, interleaved on their threads;
//! another tenant's one-scan query waited behind all of them (0.6–6 s for
//! a query that takes 11 ms alone). Admission ([`super::admission`]) bounds
//! how many queries a tenant runs; this bounds how much of the node they
//! take while they run.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::oneshot;

/// Scans a node runs at once, per aggregator: enough to keep each
/// aggregator's thread busy while another scan of it waits on the store.
pub(crate) const SCANS_PER_AGGREGATOR: usize = 2;

/// The node's scan slots and who waits for them.
#[derive(Debug)]
pub(crate) struct FairScans {
    /// Scans running at once, at most.
    capacity: usize,
    /// Scans one tenant runs at once, at most: `capacity` less a quarter
    /// (at least one) kept for the others.
    per_tenant: usize,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    running: usize,
    /// Slots each tenant holds.
    held: HashMap<Arc<str>, usize>,
    /// Tenants with scans waiting, in the order of their next turn.
    turns: VecDeque<Arc<str>>,
    /// Each waiting tenant's scans, first come first.
    waiting: HashMap<Arc<str>, VecDeque<oneshot::Sender<()>>>,
}

/// A slot: the scan runs while it is held.
#[derive(Debug)]
pub(crate) struct ScanSlot {
    fair: Arc<FairScans>,
    tenant: Arc<str>,
}

impl Drop for ScanSlot {
    fn drop(&mut self) {
        self.fair.release(&self.tenant);
    }
}

/// A scan waiting for its slot. Dropped after the slot was handed to it
/// but before it saw so (its query went away), it gives the slot back.
struct Waiting {
    fair: Arc<FairScans>,
    tenant: Arc<str>,
    granted: Option<oneshot::Receiver<()>>,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if let Some(mut granted) = self.granted.take()
            && granted.try_recv().is_ok()
        {
            self.fair.release(&self.tenant);
        }
    }
}

impl FairScans {
    /// Slots for `capacity` scans at once (at least one).
    pub(crate) fn new(capacity: usize) -> Arc<FairScans> {
        let capacity = capacity.max(1);
        let reserve = capacity.div_ceil(4);
        Arc::new(FairScans {
            capacity,
            per_tenant: capacity.saturating_sub(reserve).max(1),
            state: Mutex::default(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A slot for a scan of `tenant`: at once when one is free to it and
    /// none of its scans waits, else at its turn.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future gives up its place, or the slot it was given.
    pub(crate) async fn acquire(self: &Arc<Self>, tenant: &str) -> ScanSlot {
        let tenant: Arc<str> = Arc::from(tenant);
        let granted = {
            let mut state = self.lock();
            let held = state.held.get(&tenant).copied().unwrap_or(0);
            if state.running < self.capacity
                && held < self.per_tenant
                && !state.waiting.contains_key(&tenant)
            {
                state.running += 1;
                *state.held.entry(Arc::clone(&tenant)).or_default() += 1;
                return ScanSlot {
                    fair: Arc::clone(self),
                    tenant,
                };
            }
            let (send, granted) = oneshot::channel();
            let queue = state.waiting.entry(Arc::clone(&tenant)).or_default();
            queue.push_back(send);
            if queue.len() == 1 {
                state.turns.push_back(Arc::clone(&tenant));
            }
            granted
        };
        let mut waiting = Waiting {
            fair: Arc::clone(self),
            tenant: Arc::clone(&tenant),
            granted: Some(granted),
        };
        let granted = waiting.granted.as_mut().expect("set above");
        // The sender lives in the state until it is used; this node's
        // `FairScans` outlives every scan, so it is never dropped unused.
        let _ = granted.await;
        waiting.granted = None;
        ScanSlot {
            fair: Arc::clone(self),
            tenant,
        }
    }

    /// Gives back a slot of `tenant`, and hands the free slots out.
    fn release(&self, tenant: &Arc<str>) {
        let mut state = self.lock();
        state.running = state.running.saturating_sub(1);
        if let Some(held) = state.held.get_mut(tenant) {
            *held = held.saturating_sub(1);
            if *held == 0 {
                state.held.remove(tenant);
            }
        }
        self.hand_out(&mut state);
    }

    /// Gives free slots to waiting scans, a tenant at a time in turn,
    /// passing over tenants at their share.
    fn hand_out(&self, state: &mut State) {
        let mut passed = 0;
        while state.running < self.capacity && passed < state.turns.len() {
            let Some(tenant) = state.turns.pop_front() else {
                break;
            };
            let held = state.held.get(&tenant).copied().unwrap_or(0);
            if held >= self.per_tenant {
                state.turns.push_back(tenant);
                passed += 1;
                continue;
            }
            let queue = state.waiting.get_mut(&tenant).expect("a turn has a queue");
            let mut granted = false;
            while let Some(waiter) = queue.pop_front() {
                // A waiter whose query went away is skipped.
                if waiter.send(()).is_ok() {
                    granted = true;
                    break;
                }
            }
            let more = !queue.is_empty();
            if more {
                state.turns.push_back(Arc::clone(&tenant));
            } else {
                state.waiting.remove(&tenant);
            }
            if granted {
                state.running += 1;
                *state.held.entry(tenant).or_default() += 1;
                passed = 0;
            }
        }
    }

    /// Scans running now, and scans waiting (for tests and metrics).
    #[cfg(test)]
    fn counts(&self) -> (usize, usize) {
        let state = self.lock();
        (
            state.running,
            state.waiting.values().map(VecDeque::len).sum(),
        )
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures_util::FutureExt;

    use super::*;

    /// Guards "another tenant's scan finds a slot while one tenant has
    /// many waiting": the reserve.
    #[tokio::test]
    async fn a_tenant_never_takes_the_last_slots() {
        let fair = FairScans::new(4);
        let mut heavy = Vec::new();
        for _ in 0..3 {
            heavy.push(fair.acquire("heavy").await);
        }
        // A fourth heavy scan waits, though a slot is free…
        let mut fourth = Box::pin(fair.acquire("heavy"));
        assert!((&mut fourth).now_or_never().is_none());
        // …which a light tenant's scan takes at once.
        let light = fair
            .acquire("light")
            .now_or_never()
            .expect("a free slot for another tenant");
        assert_eq!(fair.counts(), (4, 1));
        drop(light);
        // The heavy tenant is still at its share: its scan waits on.
        assert!((&mut fourth).now_or_never().is_none());
        drop(heavy.pop());
        let _fourth = tokio::time::timeout(Duration::from_secs(1), fourth)
            .await
            .expect("granted once the heavy tenant is under its share");
        assert_eq!(fair.counts(), (3, 0));
    }

    /// Guards "free slots go to waiting tenants in turn, not first come".
    #[tokio::test]
    async fn slots_go_round_the_waiting_tenants() {
        let fair = FairScans::new(1);
        let first = fair.acquire("a").await;
        let (order, mut collected) = tokio::sync::mpsc::unbounded_channel();
        let mut tasks = Vec::new();
        // Tenant a queues three scans before b and c queue one each.
        for tenant in ["a", "a", "a", "b", "c"] {
            let shared = Arc::clone(&fair);
            let order = order.clone();
            tasks.push(tokio::spawn(async move {
                let slot = shared.acquire(tenant).await;
                order.send(tenant).unwrap();
                tokio::time::sleep(Duration::from_millis(5)).await;
                drop(slot);
            }));
            // Each queues before the next is spawned.
            tokio::task::yield_now().await;
            while fair.counts().1 < tasks.len() {
                tokio::task::yield_now().await;
            }
        }
        drop(first);
        for task in tasks {
            task.await.unwrap();
        }
        drop(order);
        let mut seen = Vec::new();
        while let Some(tenant) = collected.recv().await {
            seen.push(tenant);
        }
        assert_eq!(seen, ["a", "b", "c", "a", "a"]);
    }

    /// Guards "a query that goes away gives back its place and its slot".
    #[tokio::test]
    async fn dropped_waiters_give_their_slot_back() {
        let fair = FairScans::new(1);
        let slot = fair.acquire("a").await;
        let mut waiting = Box::pin(fair.acquire("b"));
        assert!((&mut waiting).now_or_never().is_none());
        // The slot is handed to b's waiter, which goes away unpolled.
        drop(slot);
        assert_eq!(fair.counts(), (1, 0));
        drop(waiting);
        assert_eq!(fair.counts(), (0, 0));
        // And a waiter dropped before its turn is skipped.
        let slot = fair.acquire("a").await;
        let mut gone = Box::pin(fair.acquire("b"));
        assert!((&mut gone).now_or_never().is_none());
        let mut next = Box::pin(fair.acquire("c"));
        assert!((&mut next).now_or_never().is_none());
        drop(gone);
        drop(slot);
        let _c = tokio::time::timeout(Duration::from_secs(1), next)
            .await
            .expect("c's turn");
        assert_eq!(fair.counts(), (1, 0));
    }
}
