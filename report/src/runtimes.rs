//! Language runtimes that live in a shared library rather than in the executable.
//!
//! A report's "vanilla vm code" is the VM's own code. For many VMs that is not the main
//! executable: `java` is a launcher and HotSpot is `libjvm.so`; a shared CPython runs from
//! `libpython3.x.so`; Node can be built on `libnode.so`. Without this list the whole VM lands
//! in "other code" and the headline says 0.03% of the samples were in the VM. A module named
//! here counts as vanilla vm code by default (`--no-runtime-modules` turns that off), and the
//! report's header names the modules it counted.
//!
//! This is the one place the list lives. Patterns are matched like `--vm-module` patterns:
//! shell-style `*` and `?` against the module's file name.

use crate::module_pattern::module_matches;

/// Known runtime libraries: (file name pattern, the runtime it is).
pub const KNOWN_VM_RUNTIMES: &[(&str, &str)] = &[
    ("libjvm.so", "HotSpot"),
    ("libj9vm*.so", "OpenJ9"),
    ("libpython2*.so*", "CPython"),
    ("libpython3*.so*", "CPython"),
    ("libpypy*-c.so", "PyPy"),
    ("libnode.so*", "Node.js"),
    ("libv8*.so*", "V8"),
    ("libmozjs*.so*", "SpiderMonkey"),
    ("libjavascriptcoregtk*.so*", "JavaScriptCore"),
    ("libruby*.so*", "CRuby"),
    ("libluajit*.so*", "LuaJIT"),
    ("liblua5*.so*", "Lua"),
    ("libmono*.so*", "Mono"),
    ("libcoreclr.so", ".NET"),
    ("libclrjit.so", ".NET"),
    ("libperl.so*", "Perl"),
    ("libphp*.so", "PHP"),
    ("libR.so", "R"),
    ("libjulia*.so*", "Julia"),
    ("libguile*.so*", "Guile"),
    ("libwasmtime.so", "Wasmtime"),
    ("libwasmer.so", "Wasmer"),
];

/// The runtime a module is, if it is a known one.
pub fn known_runtime(module: &str) -> Option<&'static str> {
    KNOWN_VM_RUNTIMES
        .iter()
        .find(|(pattern, _)| module_matches(pattern, module))
        .map(|&(_, runtime)| runtime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_libraries_are_known_by_their_file_names() {
        for (module, runtime) in [
            ("libjvm.so", Some("HotSpot")),
            (
                "/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so",
                Some("HotSpot"),
            ),
            ("libpython3.12.so.1.0", Some("CPython")),
            ("libpython3.so", Some("CPython")),
            ("libpython2.7.so.1.0", Some("CPython")),
            ("libnode.so.108", Some("Node.js")),
            ("libv8_libbase.so", Some("V8")),
            ("libruby.so.3.1", Some("CRuby")),
            ("libruby-3.2.so.3.2", Some("CRuby")),
            ("libluajit-5.1.so.2", Some("LuaJIT")),
            ("liblua5.4.so.0", Some("Lua")),
            ("libmonosgen-2.0.so.1", Some("Mono")),
            ("libcoreclr.so", Some(".NET")),
            // A VM of its own (SQLite's VDBE), but embedded by many programs whose VM it is
            // not (CPython's sqlite3 module): a hint names it when it dominates.
            ("libsqlite3.so.0.8.6", None),
            // Not runtimes: the C library, the kernel, a main executable, plugins.
            ("libc.so.6", None),
            ("libm.so.6", None),
            ("[kernel.kallsyms]", None),
            ("python3.12", None),
            ("libpythonic.so", None),
            ("libjvmti.so", None),
        ] {
            assert_eq!(known_runtime(module), runtime, "{module}");
        }
    }
}
