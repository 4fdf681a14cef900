//! `--heap-demo`: a heap whose structures are known by construction, for the profiler's heap
//! requests. Globals `list1` and `list2` head singly linked lists of `Node(value, next)`,
//! `decoy` heads a doubly linked list of `DNode(value, prev, next)`, and `order` holds one
//! `Order(special)` with `special = 1` until the VM is told to let it go (`release` on its
//! standard input), after which only a full collection tells it is gone.

use crate::heap::Heap;
use crate::program::Program;
use crate::value::Value;

/// What the demo's heap holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Demo {
    /// Nodes of each singly linked list.
    pub lists: Vec<usize>,
    /// Nodes of the doubly linked decoy.
    pub decoy: usize,
}

impl Default for Demo {
    fn default() -> Self {
        Demo {
            lists: vec![1000, 2500],
            decoy: 700,
        }
    }
}

impl Demo {
    /// Adds the demo's classes to `prog` and its objects to `heap` (before the heap's mark,
    /// so that they live until released), and answers the globals.
    pub fn build(&self, prog: &mut Program, heap: &mut Heap) -> Option<Vec<(String, Value)>> {
        let node = prog.add_class_with_fields("Node", &["value", "next"]);
        let dnode = prog.add_class_with_fields("DNode", &["value", "prev", "next"]);
        let order = prog.add_class_with_fields("Order", &["special"]);
        let nil = heap.nil();
        let mut globals = Vec::new();
        for (i, &n) in self.lists.iter().enumerate() {
            let mut head = nil;
            for value in 0..n {
                let cell = heap.alloc(node, 2, nil)?;
                heap.store(cell, 1, Value::int(value as i64)?)?;
                heap.store(cell, 2, head)?;
                head = cell;
            }
            globals.push((format!("list{}", i + 1), head));
        }
        let (mut first, mut prev) = (nil, nil);
        for value in 0..self.decoy {
            let cell = heap.alloc(dnode, 3, nil)?;
            heap.store(cell, 1, Value::int(value as i64)?)?;
            heap.store(cell, 2, prev)?;
            if prev == nil {
                first = cell;
            } else {
                heap.store(prev, 3, cell)?;
            }
            prev = cell;
        }
        globals.push(("decoy".into(), first));
        globals.push(("order".into(), heap.alloc(order, 1, Value::small(1))?));
        Some(globals)
    }
}
