//! Classes, methods and primitives: the program the VM runs.
//!
//! No inheritance and no metaclasses: a class is a name, a number of slots and a method
//! dictionary; its id is its index and also the class tag that inline caches compare. The
//! kernel classes have fixed ids (SmallInteger is 1, Array 2, ...) so that generated code can
//! name them as immediates.

use std::collections::HashMap;

use thiserror::Error;

use crate::bytecode::{
    self, ArithOp, Builder, BytecodeError, MethodInfo, SEL_AT, SEL_AT_PUT, SelId, Selectors, Shape,
};

/// A class id, which is also the class tag of its instances.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClassId(pub u32);

/// SmallInteger, the class of tagged integers.
pub const SMALL_INTEGER: ClassId = ClassId(1);
/// Array.
pub const ARRAY: ClassId = ClassId(2);
/// The class of nil.
pub const UNDEFINED_OBJECT: ClassId = ClassId(3);
/// The class of true.
pub const TRUE: ClassId = ClassId(4);
/// The class of false.
pub const FALSE: ClassId = ClassId(5);

/// A method id: its index in [`Program::methods`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MethodId(pub u32);

/// Primitives: methods whose body is native code, failing into an error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Primitive {
    /// SmallInteger arithmetic or comparison.
    Arith(ArithOp),
    /// `Array>>at:`.
    At,
    /// `Array>>at:put:`.
    AtPut,
}

/// A class.
#[derive(Debug, Clone)]
pub struct Class {
    /// Its name.
    pub name: String,
    /// Slots of its instances.
    pub inst_size: usize,
    /// Names of its slots, where it names them (heap queries test fields by name).
    pub fields: Vec<String>,
    /// Its method dictionary.
    pub methods: HashMap<SelId, MethodId>,
}

/// A method.
#[derive(Debug, Clone)]
pub struct Method {
    /// Its class.
    pub class: ClassId,
    /// Its selector.
    pub selector: SelId,
    /// `Class>>selector`.
    pub name: String,
    /// Arguments.
    pub nargs: u8,
    /// Temporaries besides the arguments.
    pub ntemps: u8,
    /// Bytecode (empty for primitives).
    pub code: Vec<u8>,
    /// Its primitive, if it has one.
    pub primitive: Option<Primitive>,
    /// What the verifier found.
    pub info: MethodInfo,
}

/// A method that cannot be added.
#[derive(Debug, Error)]
pub enum ProgramError {
    /// Its bytecode is invalid.
    #[error("{method}: {reason}")]
    Bytecode {
        /// The method.
        method: String,
        /// Why: in the message, so not a `source` (a chain printer would say it twice).
        reason: BytecodeError,
    },
}

/// All classes, methods and selectors.
#[derive(Debug, Clone)]
pub struct Program {
    /// Classes by id; index 0 is a placeholder (class tag 0 means "no class").
    pub classes: Vec<Class>,
    /// Methods by id.
    pub methods: Vec<Method>,
    /// Selectors.
    pub selectors: Selectors,
}

impl Default for Program {
    fn default() -> Self {
        Self::new()
    }
}

impl Program {
    /// The kernel: SmallInteger with its arithmetic primitives, Array with `at:` and
    /// `at:put:`, UndefinedObject, True, False.
    pub fn new() -> Program {
        let mut p = Program {
            classes: Vec::new(),
            methods: Vec::new(),
            selectors: Selectors::new(),
        };
        for (name, id) in [
            ("<none>", ClassId(0)),
            ("SmallInteger", SMALL_INTEGER),
            ("Array", ARRAY),
            ("UndefinedObject", UNDEFINED_OBJECT),
            ("True", TRUE),
            ("False", FALSE),
        ] {
            assert_eq!(p.add_class(name, 0), id);
        }
        for op in ArithOp::ALL {
            p.add_primitive(SMALL_INTEGER, op.selector(), 1, Primitive::Arith(op));
        }
        p.add_primitive(ARRAY, SEL_AT, 1, Primitive::At);
        p.add_primitive(ARRAY, SEL_AT_PUT, 2, Primitive::AtPut);
        p
    }

    /// Adds a class.
    pub fn add_class(&mut self, name: &str, inst_size: usize) -> ClassId {
        self.classes.push(Class {
            name: name.to_owned(),
            inst_size,
            fields: Vec::new(),
            methods: HashMap::new(),
        });
        ClassId(u32::try_from(self.classes.len() - 1).expect("few classes"))
    }

    /// Adds a class whose slots are named `fields`, in order.
    pub fn add_class_with_fields(&mut self, name: &str, fields: &[&str]) -> ClassId {
        let id = self.add_class(name, fields.len());
        self.classes[id.0 as usize].fields = fields.iter().map(|&f| f.to_owned()).collect();
        id
    }

    /// Every class, by id.
    pub fn classes(&self) -> &[Class] {
        &self.classes
    }

    fn install(&mut self, m: Method) -> MethodId {
        let id = MethodId(u32::try_from(self.methods.len()).expect("few methods"));
        let class = &mut self.classes[m.class.0 as usize];
        class.methods.insert(m.selector, id);
        self.methods.push(m);
        id
    }

    fn add_primitive(&mut self, class: ClassId, selector: SelId, nargs: u8, prim: Primitive) {
        let name = format!(
            "{}>>{}",
            self.class(class).name,
            self.selectors.name(selector)
        );
        self.install(Method {
            class,
            selector,
            name,
            nargs,
            ntemps: 0,
            code: Vec::new(),
            primitive: Some(prim),
            info: MethodInfo::default(),
        });
    }

    /// Compiles a method with `build` and installs it in `class` under `selector` (whose
    /// shape gives the number of arguments).
    pub fn add_method(
        &mut self,
        class: ClassId,
        selector: &str,
        ntemps: u8,
        build: impl FnOnce(&mut Builder),
    ) -> Result<MethodId, ProgramError> {
        let sel = self.selectors.intern(selector);
        let nargs = self.selectors.arity(sel);
        let name = format!("{}>>{}", self.class(class).name, selector);
        let mut b = Builder::new(&mut self.selectors);
        build(&mut b);
        let err = |reason| ProgramError::Bytecode {
            method: name.clone(),
            reason,
        };
        let code = b.finish().map_err(err)?;
        let shape = Shape {
            nargs,
            ntemps,
            inst_size: self.class(class).inst_size,
        };
        let info = bytecode::analyze(&code, shape, &self.selectors).map_err(err)?;
        Ok(self.install(Method {
            class,
            selector: sel,
            name,
            nargs,
            ntemps,
            code,
            primitive: None,
            info,
        }))
    }

    /// A class by id.
    pub fn class(&self, id: ClassId) -> &Class {
        &self.classes[id.0 as usize]
    }

    /// A method by id.
    pub fn method(&self, id: MethodId) -> &Method {
        &self.methods[id.0 as usize]
    }

    /// The method `class` runs for `selector`, if any.
    pub fn lookup(&self, class: ClassId, selector: SelId) -> Option<MethodId> {
        self.classes
            .get(class.0 as usize)?
            .methods
            .get(&selector)
            .copied()
    }

    /// A class by name.
    pub fn class_named(&self, name: &str) -> Option<ClassId> {
        let i = self.classes.iter().position(|c| c.name == name)?;
        Some(ClassId(u32::try_from(i).ok()?))
    }

    /// A method by its name, `Class>>selector`.
    pub fn method_named(&self, name: &str) -> Option<MethodId> {
        let i = self.methods.iter().position(|m| m.name == name)?;
        Some(MethodId(u32::try_from(i).ok()?))
    }

    /// The listing of a method: a header line, then its bytecode.
    pub fn listing(&self, id: MethodId) -> String {
        let m = self.method(id);
        let mut out = format!(
            "{} (args {}, temps {}, {} bytes)\n",
            m.name,
            m.nargs,
            m.ntemps,
            m.code.len()
        );
        match m.primitive {
            Some(p) => out.push_str(&format!("      <primitive {p:?}>\n")),
            None => out.push_str(&bytecode::listing(&m.code, &self.selectors)),
        }
        out
    }

    /// Whether the optimising tier may inline this method: bytecode (no primitive), no sends
    /// of its own (special arithmetic is fine), and small.
    pub fn inlinable(&self, id: MethodId) -> bool {
        let m = self.method(id);
        m.primitive.is_none() && !m.info.has_sends && m.code.len() <= 256
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_lookup_and_listing() {
        let mut p = Program::new();
        let plus = p.lookup(SMALL_INTEGER, ArithOp::Add.selector()).unwrap();
        assert_eq!(p.method(plus).name, "SmallInteger>>+");
        assert!(p.lookup(ARRAY, ArithOp::Add.selector()).is_none());
        let c = p.add_class("Foo", 1);
        let m = p
            .add_method(c, "bar:", 0, |b| {
                b.push_inst_var(0).push_arg(0).add().return_top();
            })
            .unwrap();
        assert_eq!(p.method(m).nargs, 1);
        assert!(p.inlinable(m));
        assert!(p.listing(m).contains("pushInstVar 0"));
        assert_eq!(p.method_named("Foo>>bar:"), Some(m));
        let e = p.add_method(c, "baz", 0, |b| {
            b.push_inst_var(1).return_top();
        });
        assert!(e.is_err(), "slot 1 of a 1-slot class");
    }
}
