//! What fills a process's heap: a class histogram ([`HeapHistogram`]) at one moment, and the
//! classes that grew between two of them ([`growth`]), the first thing a leak hunter reads.

use std::{
    collections::HashMap,
    time::{Duration, SystemTime},
};

use serde::Serialize;

/// One class of a heap histogram.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ClassCount {
    /// As the VM names it: `java.lang.String`, `[B` (byte[]).
    pub name: String,
    /// Its module (`java.base@17.0.15`); empty for the unnamed one.
    pub module: String,
    /// Its instances.
    pub instances: u64,
    /// Their bytes (shallow: each object's own size).
    pub bytes: u64,
}

/// Instances and bytes per class of one process's heap at one moment, as its VM counted them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct HeapHistogram {
    /// Its id in the daemon.
    pub id: u64,
    /// The process.
    pub pid: u32,
    /// Its command when the histogram was taken.
    pub command: String,
    /// When it was asked for.
    pub taken_at: Option<SystemTime>,
    /// From the request to the end of the answer.
    pub elapsed: Option<Duration>,
    /// How long the VM's threads were stopped for it, where the VM counts it.
    pub pause: Option<Duration>,
    /// Only the objects alive after a full collection (false: every object in the heap).
    pub live: bool,
    /// Who answered: "hotspot", or the VM's name ("jitvm 0.1").
    pub runtime: String,
    /// Classes by bytes, most first.
    pub classes: Vec<ClassCount>,
    /// The instances of all classes.
    pub total_instances: u64,
    /// Their bytes.
    pub total_bytes: u64,
}

/// One structure of a heap query: the objects reached from its root through members.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct StructureCount {
    /// Its root (a global's name, `Class@0xADDRESS`), or "all".
    pub root: String,
    /// Objects in it.
    pub objects: u64,
    /// Their bytes (each object's own size).
    pub bytes: u64,
}

/// What a VM answered to a structure query (after the memory-profiler DSL's structures).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct HeapStructures {
    /// The process.
    pub pid: u32,
    /// Its command when asked.
    pub command: String,
    /// When it was asked.
    pub taken_at: Option<SystemTime>,
    /// From the request to the end of the answer.
    pub elapsed: Option<Duration>,
    /// How long the VM's threads were stopped for it.
    pub pause: Option<Duration>,
    /// Only objects alive after a full collection.
    pub live: bool,
    /// Who answered.
    pub runtime: String,
    /// In the order the VM gave.
    pub structures: Vec<StructureCount>,
}

/// How one class changed from one histogram to another.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ClassGrowth {
    /// The class.
    pub name: String,
    /// Its module.
    pub module: String,
    /// Its instances before and after.
    pub instances: (u64, u64),
    /// Its bytes before and after.
    pub bytes: (u64, u64),
}

impl ClassGrowth {
    /// Instances gained (negative: lost).
    pub fn instances_grown(&self) -> i128 {
        i128::from(self.instances.1) - i128::from(self.instances.0)
    }

    /// Bytes gained (negative: freed).
    pub fn bytes_grown(&self) -> i128 {
        i128::from(self.bytes.1) - i128::from(self.bytes.0)
    }
}

/// The classes whose instances or bytes grew from `before` to `after`, most bytes gained
/// first (then most instances, then by name): a class that appeared counts from zero. Classes
/// are the same when name and module are: classes of one name in two modules stay apart, and
/// rows of one name and module (one class loaded by two loaders) are added together.
pub fn growth(before: &HeapHistogram, after: &HeapHistogram) -> Vec<ClassGrowth> {
    let was = by_class(before);
    let mut grown: Vec<ClassGrowth> = by_class(after)
        .into_iter()
        .filter_map(|((name, module), (instances, bytes))| {
            let (i0, b0) = was.get(&(name, module)).copied().unwrap_or_default();
            (instances > i0 || bytes > b0).then(|| ClassGrowth {
                name: name.to_owned(),
                module: module.to_owned(),
                instances: (i0, instances),
                bytes: (b0, bytes),
            })
        })
        .collect();
    grown.sort_by(|a, b| {
        b.bytes_grown()
            .cmp(&a.bytes_grown())
            .then(b.instances_grown().cmp(&a.instances_grown()))
            .then_with(|| a.name.cmp(&b.name))
            .then_with(|| a.module.cmp(&b.module))
    });
    grown
}

/// Instances and bytes per (name, module) of `histogram`, its rows of one class added.
fn by_class(histogram: &HeapHistogram) -> HashMap<(&str, &str), (u64, u64)> {
    let mut classes = HashMap::with_capacity(histogram.classes.len());
    for c in &histogram.classes {
        let entry: &mut (u64, u64) = classes
            .entry((c.name.as_str(), c.module.as_str()))
            .or_default();
        entry.0 += c.instances;
        entry.1 += c.bytes;
    }
    classes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(name: &str, instances: u64, bytes: u64) -> ClassCount {
        ClassCount {
            name: name.into(),
            module: String::new(),
            instances,
            bytes,
        }
    }

    fn histogram(classes: Vec<ClassCount>) -> HeapHistogram {
        HeapHistogram {
            classes,
            ..HeapHistogram::default()
        }
    }

    #[test]
    fn growth_lists_what_grew_most_bytes_first() {
        let before = histogram(vec![
            class("[B", 100, 10_000),
            class("Leaky", 5, 120),
            class("Gone", 9, 90),
            class("Same", 3, 30),
        ]);
        let after = histogram(vec![
            class("[B", 90, 9_000),
            class("Leaky", 1_005, 24_120),
            class("New", 2, 64),
            class("Same", 3, 30),
        ]);
        let grown = growth(&before, &after);
        let names: Vec<&str> = grown.iter().map(|g| g.name.as_str()).collect();
        assert_eq!(
            names,
            ["Leaky", "New"],
            "shrunk, gone and unchanged left out"
        );
        assert_eq!(grown[0].instances_grown(), 1_000);
        assert_eq!(grown[0].bytes_grown(), 24_000);
        assert_eq!(grown[1].instances, (0, 2), "a new class grows from nothing");
    }

    #[test]
    fn classes_of_one_name_in_two_modules_stay_apart() {
        let module = |m: &str, instances| ClassCount {
            module: m.into(),
            ..class("Foo", instances, instances * 16)
        };
        let before = histogram(vec![module("a", 10), module("b", 10)]);
        let after = histogram(vec![module("a", 10), module("b", 11)]);
        let grown = growth(&before, &after);
        assert_eq!(grown.len(), 1);
        assert_eq!(
            (grown[0].module.as_str(), grown[0].instances),
            ("b", (10, 11))
        );
    }
}
