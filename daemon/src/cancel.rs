//! Cancellation of work done for a client: a flag that the work checks now and then, and a
//! guard that raises it when whoever waits for the work goes away.
//!
//! A gRPC handler's future is dropped when its client cancels or disconnects; work it handed
//! to a blocking thread would go on regardless. The handler holds a [`CancelOnDrop`], the work
//! a [`Cancel`] clone, so that a profile nobody waits for stops being built.

use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};

/// Whether the work should stop; cheap to clone and to check.
#[derive(Clone, Debug, Default)]
pub struct Cancel(Arc<AtomicBool>);

impl Cancel {
    /// A flag no one raises: work that always runs to its end.
    pub fn never() -> Cancel {
        Cancel::default()
    }

    /// Whether whoever waited for the work went away.
    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// Raises the flag.
    pub fn set(&self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Raises its [`Cancel`] when dropped, unless [`CancelOnDrop::disarm`]ed first.
#[derive(Debug)]
pub struct CancelOnDrop(Option<Cancel>);

impl CancelOnDrop {
    /// A guard over a new flag, and the flag for the work.
    pub fn new() -> (CancelOnDrop, Cancel) {
        let cancel = Cancel::default();
        (CancelOnDrop(Some(cancel.clone())), cancel)
    }

    /// The work's result was taken: dropping the guard now cancels nothing.
    pub fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(cancel) = self.0.take() {
            cancel.set();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dropped_guard_cancels_and_a_disarmed_one_does_not() {
        let (guard, cancel) = CancelOnDrop::new();
        assert!(!cancel.is_set());
        drop(guard);
        assert!(cancel.is_set());
        let (guard, cancel) = CancelOnDrop::new();
        guard.disarm();
        assert!(!cancel.is_set());
        assert!(!Cancel::never().is_set());
    }
}
