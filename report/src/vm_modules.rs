//! Which modules of other code count as the VM's: those a `--vm-module` pattern names, the
//! libraries of known language runtimes (unless `--no-runtime-modules`), and the hint the
//! report gives when a big module of other code looks like an unknown VM's.

use std::collections::BTreeMap;

use vmscope_model::ProfileRow;

use crate::{
    model::{ReportOptions, percent},
    module_pattern::{file_name, module_matches},
    runtimes::known_runtime,
};

/// Whether other code in `module` counts as the VM's: `Some(runtime)` if so, the runtime it is
/// (`None` when a `--vm-module` pattern named it).
pub(crate) fn vm_module(options: &ReportOptions, module: &str) -> Option<Option<&'static str>> {
    if options
        .vm_modules
        .iter()
        .any(|pattern| module_matches(pattern, module))
    {
        return Some(None);
    }
    options
        .runtime_modules
        .then(|| known_runtime(module))
        .flatten()
        .map(Some)
}

/// Modules of other code that are never a VM's own.
fn is_system_module(module: &str) -> bool {
    let name = file_name(module);
    name.starts_with('[')
        || [
            "libc.so",
            "libm.so",
            "ld-linux",
            "libpthread",
            "libstdc++",
            "libgcc_s",
        ]
        .iter()
        .any(|prefix| name.starts_with(prefix))
}

/// Share of all samples at which a module of other code is worth a hint (see
/// [`Report::vm_module_hint`](crate::Report::vm_module_hint)).
const VM_MODULE_HINT_PERCENT: f64 = 20.0;

/// The biggest module of other code, if it holds at least [`VM_MODULE_HINT_PERCENT`] of all
/// samples and is not a system library or the kernel: a VM in a shared library that no
/// runtime pattern knows (a VM's plugins, an embedded interpreter) shows up like this.
pub(crate) fn vm_module_hint(other: &[&ProfileRow], total: u64) -> Option<(String, f64)> {
    let mut by_module: BTreeMap<&str, u64> = BTreeMap::new();
    for row in other {
        *by_module.entry(&row.module).or_default() += row.samples;
    }
    by_module
        .into_iter()
        .filter(|(module, _)| !module.is_empty() && !is_system_module(module))
        .max_by_key(|&(_, samples)| samples)
        .map(|(module, samples)| (file_name(module).to_owned(), percent(samples, total)))
        .filter(|&(_, share)| share >= VM_MODULE_HINT_PERCENT)
}
