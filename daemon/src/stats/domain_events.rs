//! A window's tally of the domain events a VM publishes (`codemap.proto`'s `DomainEvent`): per
//! type, per object, per second of the window and per emitting stack. Bounded whatever the VM
//! sends: past [`MAX_TYPES`] types, events are counted in no type (and said so); past
//! [`MAX_OBJECTS`] objects or [`MAX_STACKS`] stacks in a window, under their type alone; past
//! [`MAX_SECONDS`] seconds, in the type's total alone.

use std::collections::HashMap;

use vmscope_model::{DomainEventType, EventStack, ObjectEvents};

use super::vm::DomainEvent;

/// Most event types one window tells apart.
pub const MAX_TYPES: usize = 1024;
/// Most (type, object) pairs one window tells apart.
pub const MAX_OBJECTS: usize = 65_536;
/// Most (type, stack) pairs one window tells apart.
pub const MAX_STACKS: usize = 4096;
/// Most seconds of a window counted one by one (an hour).
pub const MAX_SECONDS: usize = 3600;

/// One type's tally.
#[derive(Clone, Debug, Default)]
struct TypeTally {
    count: u64,
    per_second: Vec<u64>,
    objects: HashMap<u64, u64>,
    objects_untold: u64,
    stacks: HashMap<Vec<String>, u64>,
}

/// The domain events of one window.
#[derive(Clone, Debug, Default)]
pub struct EventWindow {
    types: HashMap<String, TypeTally>,
    objects: usize,
    stacks: usize,
    /// Events of types beyond [`MAX_TYPES`].
    pub untyped: u64,
}

impl EventWindow {
    /// Counts `event`, stamped `ts`, in a window that starts at `start_ns` (events before it
    /// are not the window's).
    pub fn count(&mut self, start_ns: u64, ts: u64, event: &DomainEvent) {
        if ts < start_ns {
            return;
        }
        let room = self.types.len() < MAX_TYPES;
        let tally = match self.types.get_mut(&event.kind) {
            Some(tally) => tally,
            None if room => self.types.entry(event.kind.clone()).or_default(),
            None => {
                self.untyped += 1;
                return;
            }
        };
        tally.count += 1;
        let second = ((ts - start_ns) / 1_000_000_000) as usize;
        if second < MAX_SECONDS {
            if tally.per_second.len() <= second {
                tally.per_second.resize(second + 1, 0);
            }
            tally.per_second[second] += 1;
        }
        let known = tally.objects.contains_key(&event.object);
        if event.object != 0 && (known || self.objects < MAX_OBJECTS) {
            *tally.objects.entry(event.object).or_insert(0) += 1;
            self.objects += usize::from(!known);
        } else {
            tally.objects_untold += 1;
        }
        if !event.frames.is_empty() {
            if let Some(n) = tally.stacks.get_mut(&event.frames) {
                *n += 1;
            } else if self.stacks < MAX_STACKS {
                tally.stacks.insert(event.frames.clone(), 1);
                self.stacks += 1;
            }
        }
    }

    /// Whether it counted anything.
    pub fn is_empty(&self) -> bool {
        self.types.is_empty() && self.untyped == 0
    }

    /// The tally by type, most first, with `seconds` seconds in the window (so that quiet
    /// seconds at its end are counted as 0).
    pub fn summary(&self, seconds: usize) -> Vec<DomainEventType> {
        let mut types: Vec<DomainEventType> = self
            .types
            .iter()
            .map(|(name, t)| {
                let mut per_second = t.per_second.clone();
                if per_second.len() < seconds.min(MAX_SECONDS) {
                    per_second.resize(seconds.min(MAX_SECONDS), 0);
                }
                let mut objects: Vec<ObjectEvents> = t
                    .objects
                    .iter()
                    .map(|(&object, &count)| ObjectEvents { object, count })
                    .collect();
                objects.sort_by(|a, b| b.count.cmp(&a.count).then(a.object.cmp(&b.object)));
                let mut stacks: Vec<EventStack> = t
                    .stacks
                    .iter()
                    .map(|(frames, &count)| EventStack {
                        frames: frames.clone(),
                        count,
                    })
                    .collect();
                stacks.sort_by(|a, b| b.count.cmp(&a.count).then(a.frames.cmp(&b.frames)));
                DomainEventType {
                    name: name.clone(),
                    count: t.count,
                    per_second,
                    objects,
                    objects_untold: t.objects_untold,
                    stacks,
                }
            })
            .collect();
        types.sort_by(|a, b| b.count.cmp(&a.count).then(a.name.cmp(&b.name)));
        types
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: &str, object: u64, frames: &[&str]) -> DomainEvent {
        DomainEvent {
            kind: kind.into(),
            object,
            tid: 1,
            frames: frames.iter().map(|f| f.to_string()).collect(),
        }
    }

    /// Each type is counted in all, per object, per second of the window and per stack; what
    /// came before the window is not its.
    #[test]
    fn events_are_counted_by_type_object_second_and_stack() {
        let mut w = EventWindow::default();
        let start = 10_000_000_000;
        w.count(start, start - 1, &event("refresh", 1, &[]));
        for i in 0..5u64 {
            w.count(
                start,
                start + i * 400_000_000,
                &event("refresh", 1 + i % 2, &["a", "b"]),
            );
        }
        w.count(start, start + 1, &event("parse", 0, &[]));
        let types = w.summary(3);
        assert_eq!(types.len(), 2);
        let refresh = &types[0];
        assert_eq!((refresh.name.as_str(), refresh.count), ("refresh", 5));
        // At 0, 0.4, 0.8, 1.2 and 1.6 s, in a 3 s window.
        assert_eq!(refresh.per_second, vec![3, 2, 0]);
        assert_eq!(
            refresh.objects,
            vec![
                ObjectEvents {
                    object: 1,
                    count: 3
                },
                ObjectEvents {
                    object: 2,
                    count: 2
                }
            ]
        );
        assert_eq!(refresh.stacks[0].count, 5);
        assert_eq!((types[1].count, types[1].objects_untold), (1, 1));
    }

    /// A VM naming endless types and objects costs a bounded window, and nothing is lost from
    /// the totals.
    #[test]
    fn types_and_objects_are_bounded() {
        let mut w = EventWindow::default();
        for i in 0..(MAX_TYPES as u64 + 10) {
            w.count(0, 1, &event(&format!("t{i}"), 0, &[]));
        }
        assert_eq!((w.types.len(), w.untyped), (MAX_TYPES, 10));
        let mut w = EventWindow::default();
        for i in 1..=(MAX_OBJECTS as u64 + 7) {
            w.count(0, 1, &event("t", i, &[]));
        }
        let t = &w.summary(1)[0];
        assert_eq!(
            (t.count, t.objects.len(), t.objects_untold),
            (MAX_OBJECTS as u64 + 7, MAX_OBJECTS, 7)
        );
    }
}
