//! A request's place in the queue, shared by its [`crate::Generation`] and the scheduler:
//! whichever side moves it out of "queued" first releases the queue slot, so a caller that
//! gives up while waiting frees its slot at once, not at the engine's next step.

use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;

const QUEUED: u8 = 0;
const TAKEN: u8 = 1;
const CANCELLED: u8 = 2;

/// See the module docs.
#[derive(Debug)]
pub(crate) struct Ticket {
    state: AtomicU8,
    /// Requests admitted or queued (the handle's `Busy` bound).
    inflight: Arc<AtomicUsize>,
}

impl Ticket {
    /// A ticket for a request already counted in `inflight`.
    pub(crate) fn new(inflight: Arc<AtomicUsize>) -> Arc<Self> {
        Arc::new(Ticket {
            state: AtomicU8::new(QUEUED),
            inflight,
        })
    }

    /// The caller gave up: if the engine has not taken the request yet, its slot is free now.
    pub(crate) fn cancel(&self) {
        if self.moved(CANCELLED) {
            self.inflight.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// The engine takes the request (to run or to fail it) and from now on releases its slot;
    /// `false` when the caller cancelled it first (its slot is already free).
    pub(crate) fn take(&self) -> bool {
        self.moved(TAKEN)
    }

    /// Whether the caller cancelled the request while it was queued.
    pub(crate) fn is_cancelled(&self) -> bool {
        self.state.load(Ordering::SeqCst) == CANCELLED
    }

    fn moved(&self, to: u8) -> bool {
        self.state
            .compare_exchange(QUEUED, to, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exactly_one_side_releases_the_slot() {
        let inflight = Arc::new(AtomicUsize::new(2));
        let cancelled = Ticket::new(Arc::clone(&inflight));
        cancelled.cancel();
        cancelled.cancel();
        assert_eq!(inflight.load(Ordering::SeqCst), 1);
        assert!(cancelled.is_cancelled());
        assert!(
            !cancelled.take(),
            "the engine must not take a cancelled request"
        );

        let taken = Ticket::new(Arc::clone(&inflight));
        assert!(taken.take());
        taken.cancel();
        assert_eq!(inflight.load(Ordering::SeqCst), 1, "the engine releases it");
        assert!(!taken.is_cancelled());
    }
}
