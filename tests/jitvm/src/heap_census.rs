//! Counting the heap at a safepoint, for the profiler's heap requests (`CodeMap.ServeHeap`):
//! instances and bytes per class, and structures after the memory-profiler DSL (the objects
//! reached from each root through members only).
//!
//! A full collection here is a mark from the roots (the VM's globals, nil, true and false):
//! what it does not reach is garbage, and is not counted, though the bump allocator does not
//! reuse its room. Without one, every object allocated counts, garbage too. References are
//! slots that hold the address of an object's header, found by walking the heap: a word that
//! merely looks like an address is no reference. Sets of objects are bitmaps over the heap's
//! words (one bit a word): the VM is stopped while it counts, and hashing a million addresses
//! took most of a second.

use vmscope_proto::v1 as pb;

use crate::heap::Heap;
use crate::program::Program;
use crate::value::Value;

/// The heap as a request sees it: its objects, the VM's classes and its roots.
#[derive(Debug)]
pub struct Census<'a> {
    heap: &'a Heap,
    prog: &'a Program,
    /// Every object's header: what a slot must hold to be a reference.
    objects: Bits,
    /// The objects counted: all, or those reached from the roots.
    counted: Vec<Value>,
    /// The same, as a set.
    counted_set: Bits,
    globals: &'a [(String, Value)],
}

impl<'a> Census<'a> {
    /// The heap of `prog` with its `globals`; with `full_gc`, only what the roots reach counts.
    pub fn new(
        heap: &'a Heap,
        prog: &'a Program,
        globals: &'a [(String, Value)],
        full_gc: bool,
    ) -> Census<'a> {
        let all: Vec<Value> = heap.objects().collect();
        let words = heap.allocated_words();
        let mut objects = Bits::new(words);
        for &v in &all {
            objects.insert(heap.word_of(v).expect("an object of the heap"));
        }
        let mut census = Census {
            heap,
            prog,
            objects,
            counted: Vec::new(),
            counted_set: Bits::new(words),
            globals,
        };
        census.counted = if full_gc {
            let roots = [heap.nil(), heap.true_(), heap.false_()]
                .into_iter()
                .chain(globals.iter().map(|(_, v)| *v));
            census.reach(roots, |_| true)
        } else {
            all
        };
        for &v in &census.counted {
            let word = heap.word_of(v).expect("an object of the heap");
            census.counted_set.insert(word);
        }
        census
    }

    /// The word of `v` if it is an object's header.
    fn object_word(&self, v: Value) -> Option<usize> {
        self.heap
            .word_of(v)
            .filter(|&word| self.objects.contains(word))
    }

    /// The objects reached from `from` through objects that `member` accepts (the starts
    /// included, if they are members), each once.
    fn reach(
        &self,
        from: impl IntoIterator<Item = Value>,
        member: impl Fn(Value) -> bool,
    ) -> Vec<Value> {
        self.reach_marking(from, member, &mut Bits::new(self.heap.allocated_words()))
    }

    /// [`Census::reach`], marking what it reaches in `seen` (and never going past what is
    /// marked already).
    fn reach_marking(
        &self,
        from: impl IntoIterator<Item = Value>,
        member: impl Fn(Value) -> bool,
        seen: &mut Bits,
    ) -> Vec<Value> {
        let mut out = Vec::new();
        let mut todo: Vec<Value> = from.into_iter().collect();
        while let Some(v) = todo.pop() {
            let Some(word) = self.object_word(v) else {
                continue;
            };
            if seen.contains(word) || !member(v) {
                continue;
            }
            seen.insert(word);
            out.push(v);
            let slots = self.heap.size_of(v).unwrap_or(0);
            todo.extend((1..=slots).filter_map(|n| self.heap.load(v, n)));
        }
        out
    }

    fn class_name(&self, v: Value) -> &str {
        self.heap
            .class_of_object(v)
            .and_then(|c| self.prog.classes().get(c.0 as usize))
            .map_or("?", |c| c.name.as_str())
    }

    /// Instances and bytes per class of the objects counted.
    pub fn histogram(&self) -> Vec<pb::HeapClass> {
        // By class id: a count per object, with no hashing.
        let names = self.prog.classes();
        let mut by_class = vec![(0u64, 0u64); names.len() + 1];
        for &v in &self.counted {
            let id = self
                .heap
                .class_of_object(v)
                .map_or(names.len(), |c| (c.0 as usize).min(names.len()));
            by_class[id].0 += 1;
            by_class[id].1 += self.heap.bytes_of(v).unwrap_or(0);
        }
        let mut classes: Vec<pb::HeapClass> = by_class
            .into_iter()
            .enumerate()
            .filter(|(_, (instances, _))| *instances > 0)
            .map(|(id, (instances, bytes))| pb::HeapClass {
                name: names.get(id).map_or("?", |c| c.name.as_str()).to_owned(),
                instances,
                bytes,
            })
            .collect();
        classes.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.name.cmp(&b.name)));
        classes
    }

    /// Whether `v` is a member by `predicate`: one of its classes (any when none), and each
    /// field test holding (a field its class does not name fails).
    fn is_member(&self, v: Value, predicate: &pb::MemberPredicate) -> bool {
        let Some(class) = self
            .heap
            .class_of_object(v)
            .and_then(|c| self.prog.classes().get(c.0 as usize))
        else {
            return false;
        };
        if !predicate.classes.is_empty() && !predicate.classes.contains(&class.name) {
            return false;
        }
        predicate.fields.iter().all(|test| {
            class
                .fields
                .iter()
                .position(|f| *f == test.field)
                .and_then(|i| self.heap.load(v, i + 1))
                .and_then(Value::as_int)
                == Some(test.value)
        })
    }

    /// The structures `query` describes, among the objects counted. A root that is not a
    /// member starts no structure. Errors name what the VM does not know.
    pub fn structures(&self, query: &pb::StructureQuery) -> Result<Vec<pb::Structure>, String> {
        use pb::structure_query::Roots;
        let roots: Vec<(String, Value)> = match &query.roots {
            None | Some(Roots::Globals(_)) => self.globals.to_vec(),
            Some(Roots::Global(name)) => {
                let root = self
                    .globals
                    .iter()
                    .find(|(n, _)| n == name)
                    .ok_or_else(|| {
                        format!(
                            "no global {name:?}; the globals are {}",
                            self.globals
                                .iter()
                                .map(|(n, _)| n.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        )
                    })?;
                vec![root.clone()]
            }
            Some(Roots::InstancesOf(class)) => {
                if self.prog.class_named(class).is_none() {
                    return Err(format!("no class {class:?} in this VM"));
                }
                self.counted
                    .iter()
                    .filter(|&&v| self.class_name(v) == class)
                    .map(|&v| (format!("{class}@{:#x}", v.0), v))
                    .collect()
            }
        };
        let predicate = query.member.clone().unwrap_or_default();
        if let Some(unknown) = predicate
            .classes
            .iter()
            .find(|c| self.prog.class_named(c).is_none())
        {
            return Err(format!("no class {unknown:?} in this VM"));
        }
        let member = |v: Value| {
            self.heap
                .word_of(v)
                .is_some_and(|word| self.counted_set.contains(word))
                && self.is_member(v, &predicate)
        };
        let count = |objects: &[Value]| pb::Structure {
            root: String::new(),
            objects: objects.len() as u64,
            bytes: objects
                .iter()
                .map(|&v| self.heap.bytes_of(v).unwrap_or(0))
                .sum(),
        };
        if query.per_root {
            // One set for every root, cleared of each structure after it: a class's instances
            // may be many roots.
            let mut seen = Bits::new(self.heap.allocated_words());
            Ok(roots
                .into_iter()
                .filter_map(|(name, root)| {
                    let reached = self.reach_marking([root], member, &mut seen);
                    for &v in &reached {
                        seen.remove(self.heap.word_of(v).expect("reached objects are objects"));
                    }
                    (!reached.is_empty()).then(|| pb::Structure {
                        root: name,
                        ..count(&reached)
                    })
                })
                .collect())
        } else {
            let reached = self.reach(roots.into_iter().map(|(_, v)| v), member);
            Ok(vec![pb::Structure {
                root: "all".into(),
                ..count(&reached)
            }])
        }
    }
}

/// A set of heap words.
#[derive(Debug)]
struct Bits(Vec<u64>);

impl Bits {
    fn new(words: usize) -> Bits {
        Bits(vec![0; words.div_ceil(64)])
    }

    fn insert(&mut self, word: usize) {
        self.0[word / 64] |= 1 << (word % 64);
    }

    fn remove(&mut self, word: usize) {
        self.0[word / 64] &= !(1 << (word % 64));
    }

    fn contains(&self, word: usize) -> bool {
        self.0
            .get(word / 64)
            .is_some_and(|w| w & (1 << (word % 64)) != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two singly linked lists, a doubly linked decoy, an order, and garbage beside them.
    fn heap_with_lists() -> (Heap, Program, Vec<(String, Value)>) {
        let mut prog = Program::new();
        let node = prog.add_class_with_fields("Node", &["value", "next"]);
        let dnode = prog.add_class_with_fields("DNode", &["value", "prev", "next"]);
        let order = prog.add_class_with_fields("Order", &["special"]);
        let mut heap = Heap::new(1 << 20).unwrap();
        let nil = heap.nil();
        let list = |heap: &mut Heap, n: usize| {
            let mut head = nil;
            for i in 0..n {
                let cell = heap.alloc(node, 2, nil).unwrap();
                heap.store(cell, 1, Value::small(i as i64)).unwrap();
                heap.store(cell, 2, head).unwrap();
                head = cell;
            }
            head
        };
        let a = list(&mut heap, 10);
        let b = list(&mut heap, 25);
        let mut prev = nil;
        let mut first = nil;
        for i in 0..7 {
            let cell = heap.alloc(dnode, 3, nil).unwrap();
            heap.store(cell, 1, Value::small(i)).unwrap();
            heap.store(cell, 2, prev).unwrap();
            if prev == nil {
                first = cell;
            } else {
                heap.store(prev, 3, cell).unwrap();
            }
            prev = cell;
        }
        let special = heap.alloc(order, 1, Value::small(1)).unwrap();
        let _garbage = heap.alloc(order, 1, Value::small(1)).unwrap();
        let _more = list(&mut heap, 4);
        let globals = vec![
            ("a".into(), a),
            ("b".into(), b),
            ("decoy".into(), first),
            ("order".into(), special),
        ];
        (heap, prog, globals)
    }

    fn find<'a>(classes: &'a [pb::HeapClass], name: &str) -> &'a pb::HeapClass {
        classes.iter().find(|c| c.name == name).unwrap()
    }

    #[test]
    fn a_full_collection_counts_what_the_roots_reach_and_without_one_everything() {
        let (heap, prog, globals) = heap_with_lists();
        let live = Census::new(&heap, &prog, &globals, true).histogram();
        assert_eq!(find(&live, "Node").instances, 35);
        assert_eq!(find(&live, "Node").bytes, 35 * 32);
        assert_eq!(find(&live, "DNode").instances, 7);
        assert_eq!(find(&live, "Order").instances, 1);
        let all = Census::new(&heap, &prog, &globals, false).histogram();
        assert_eq!(find(&all, "Node").instances, 39);
        assert_eq!(find(&all, "Order").instances, 2);
    }

    #[test]
    fn a_structure_per_root_holds_its_members_and_a_decoy_none() {
        let (heap, prog, globals) = heap_with_lists();
        let census = Census::new(&heap, &prog, &globals, true);
        let query = pb::StructureQuery {
            roots: Some(pb::structure_query::Roots::Globals(pb::AllGlobals {})),
            member: Some(pb::MemberPredicate {
                classes: vec!["Node".into()],
                fields: Vec::new(),
            }),
            per_root: true,
        };
        let structures = census.structures(&query).unwrap();
        let got: Vec<(&str, u64, u64)> = structures
            .iter()
            .map(|s| (s.root.as_str(), s.objects, s.bytes))
            .collect();
        assert_eq!(got, [("a", 10, 320), ("b", 25, 800)]);
        // One structure of all: each object once.
        let all = census
            .structures(&pb::StructureQuery {
                per_root: false,
                ..query.clone()
            })
            .unwrap();
        assert_eq!(all[0].objects, 35);
        // A field test: the order with special == 1, and none with 2.
        let orders = |value| {
            census
                .structures(&pb::StructureQuery {
                    roots: Some(pb::structure_query::Roots::InstancesOf("Order".into())),
                    member: Some(pb::MemberPredicate {
                        classes: vec!["Order".into()],
                        fields: vec![pb::FieldEquals {
                            field: "special".into(),
                            value,
                        }],
                    }),
                    per_root: false,
                })
                .unwrap()[0]
                .objects
        };
        assert_eq!((orders(1), orders(2)), (1, 0));
        let err = census
            .structures(&pb::StructureQuery {
                roots: Some(pb::structure_query::Roots::Global("nope".into())),
                ..query
            })
            .unwrap_err();
        assert!(
            err.contains("no global \"nope\"") && err.contains("decoy"),
            "{err}"
        );
    }
}
