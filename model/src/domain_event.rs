//! Events of a program's own domain (a node refreshed, a production parsed, an order placed),
//! as its VM published them, counted over a session's window by type, by object, per second,
//! and by the frames that emitted them (after MetaSpy's domain-specific profilers).

use serde::{Deserialize, Serialize};

/// One type of domain event over a window.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DomainEventType {
    /// What happened, as the VM named it.
    pub name: String,
    /// How many times in the window.
    pub count: u64,
    /// How many in each second of the window, from its start (the last one may be partial).
    pub per_second: Vec<u64>,
    /// Per object the VM named (by its stable id), most first.
    pub objects: Vec<ObjectEvents>,
    /// Events whose object is not told apart: the VM named none, or the window tells apart its
    /// most objects already.
    pub objects_untold: u64,
    /// Per stack that emitted them, as the VM named its frames (innermost first), most first;
    /// empty when the VM names none.
    pub stacks: Vec<EventStack>,
}

/// A type's events on one object.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectEvents {
    /// The object's id, as the VM keeps it across moves.
    pub object: u64,
    /// How many.
    pub count: u64,
}

/// A type's events emitted from one stack.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventStack {
    /// Its frames, innermost first.
    pub frames: Vec<String>,
    /// How many.
    pub count: u64,
}
