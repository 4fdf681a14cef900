//! The VM thread's labels (codemap.proto's `LabelSet` and `ThreadLabels`): what it is working
//! on, which the profiler reads with each of its samples. The driver labels each call with its
//! benchmark phase and its receiver's class, and accounts the thread CPU time of each call to
//! them itself, so that tests hold the profile's split by label to the VM's own. The VM also
//! publishes a domain event of its own: each move of a method's code by the compactor, named
//! by the method's id, which the move does not change.

use std::sync::atomic::{AtomicU64, Ordering};

use vmscope_proto::v1::code_map_event::Event;
use vmscope_proto::v1::{DomainEvent, Label, LabelSet, ThreadLabels};

use crate::runtime::Vm;
use crate::value::Value;

/// The word holding the id of the VM thread's current label set, leaked: the kernel may read
/// it until the daemon applies its withdrawal.
pub(crate) fn new_word() -> &'static AtomicU64 {
    Box::leak(Box::new(AtomicU64::new(0)))
}

impl Vm {
    /// Publishes a label set, `(key, value)` pairs, and answers its id for
    /// [`Vm::use_labels`].
    pub fn label_set(&mut self, labels: &[(&str, &str)]) -> u64 {
        self.next_label_set += 1;
        let id = self.next_label_set;
        let labels = labels
            .iter()
            .map(|&(key, value)| Label {
                key: key.to_owned(),
                value: value.to_owned(),
            })
            .collect();
        self.publisher()
            .publish(Event::LabelSet(LabelSet { id, labels }));
        id
    }

    /// The VM thread's labels from now on: a set [`Vm::label_set`] answered, or 0 for none.
    pub fn use_labels(&self, set: u64) {
        self.thread_labels.store(set, Ordering::Relaxed);
    }

    /// The name of `v`'s class, as its label says it.
    pub fn class_name_of(&self, v: Value) -> String {
        let class = crate::interp::class_of(&self.heap, v);
        self.prog
            .classes
            .get(class.0 as usize)
            .map_or_else(|| "?".to_owned(), |c| c.name.clone())
    }

    /// Publishes an event of the VM's domain: `kind` happened to `object` (a stable id, not an
    /// address), emitted by the compactor.
    pub(crate) fn publish_domain_event(&mut self, kind: &str, object: u64) {
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() } as u32;
        self.publisher().publish(Event::DomainEvent(DomainEvent {
            r#type: kind.to_owned(),
            object,
            tid,
            frames: vec!["Vm>>compact".to_owned(), "Vm>>safepoint".to_owned()],
        }));
    }

    /// Publishes where the VM thread (this one) keeps its label word, or 0 to withdraw it.
    pub(crate) fn publish_thread_labels(&mut self, on: bool) {
        let address = if on {
            std::ptr::from_ref(self.thread_labels) as u64
        } else {
            0
        };
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() } as u32;
        self.publisher()
            .publish(Event::ThreadLabels(ThreadLabels { tid, address }));
    }
}
