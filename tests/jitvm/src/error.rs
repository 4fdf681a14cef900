//! Errors of running a program, in the interpreter or in generated code.

use thiserror::Error;

/// A program went wrong. Generated code reports these through a trampoline and unwinds to
/// the enilopmart that entered it; the interpreter returns them.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum VmError {
    /// No method for a selector in the receiver's class.
    #[error("{class} does not understand #{selector}")]
    DoesNotUnderstand {
        /// The receiver's class.
        class: String,
        /// The selector.
        selector: String,
    },
    /// A primitive failed (bad argument, index out of bounds, SmallInteger overflow).
    #[error("primitive failed in {method}")]
    PrimitiveFailed {
        /// The method whose primitive failed.
        method: String,
    },
    /// A conditional jump found something that is not a Boolean.
    #[error("non-Boolean receiver of a conditional jump in {method}")]
    MustBeBoolean {
        /// The method.
        method: String,
    },
    /// Generated code used more stack than it may.
    #[error("stack overflow in {method} (generated code may use {bytes} bytes of stack)")]
    StackOverflow {
        /// The method whose prologue found the stack full.
        method: String,
        /// The budget.
        bytes: u64,
    },
    /// The object heap is full.
    #[error("object heap full")]
    HeapFull,
    /// Sends nested too deep.
    #[error("call stack deeper than {0}")]
    TooDeep(usize),
    /// The code zone cannot hold a method even when empty.
    #[error("code zone too small for {0}")]
    ZoneTooSmall(String),
    /// A bug of the VM, detected before it could do harm.
    #[error("internal error: {0}")]
    Internal(String),
}
