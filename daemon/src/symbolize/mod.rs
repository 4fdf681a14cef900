//! Symbolisation: from a normalised [`Location`] to the name a report shows.
//!
//! One source of names each: [`vmscope_parse::elf`] for binaries, [`vmscope_parse::kallsyms`]
//! for the kernel, [`vdso`] for the vDSO, [`Modules`] for the registry of binaries.
//! [`Symbolizer::resolve`] answers every location with a [`Resolved`]: a name when one is
//! known, otherwise `module+0xOFFSET` or `[unknown]` together with the reason (an [`Issue`]),
//! which profiles count per module. No answer is an
//! error: a sample is never dropped for want of a name. [`Symbolizer::source_frames`] adds the
//! file:line and inlined functions of native code from DWARF ([`lines`]). The [`warmer`] does
//! those lookups ahead, while sessions sample, so that a profile finds them done. The registry
//! also loads each binary's unwind sections ([`unwind_tables`]) for the unwinder (`unwind/`).

pub mod lines;
mod module;
pub mod unwind_tables;
pub mod vdso;
pub mod warmer;

use std::sync::Arc;

pub use lines::{Asker, LineCounters, LineTables};
pub use module::{MAX_BINARY_BYTES, Module, ModuleCounters, Modules};
use vmscope_model::{IssueKind, Section};
pub use vmscope_parse::dwarf::SourceFrame;
pub use warmer::Warmer;

use vmscope_parse::{elf::ElfSymbols, kallsyms::KernelSymbols};

use crate::{
    codemap::code::{CodeSource, CodeStore},
    vocab::{Location, Unexplained, UnmappedReason},
};

/// Module name of kernel code, as perf writes it.
pub const KERNEL_MODULE: &str = "[kernel.kallsyms]";

/// The name of [`Location::StackLimit`]'s frame: the caller of the stacks a session cut
/// because it held its most distinct stacks.
pub const STACK_LIMIT_FRAME: &str = "[truncated: stack limit]";

/// Why a location has no name: each is counted per module in profiles, and said in words only
/// there, as a profile is built.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Issue {
    /// The binary could not be opened or parsed; the loader's reason.
    Binary(String),
    /// The file offset is outside every loadable segment of the binary.
    OutsideSegments,
    /// The binary has no symbols at all.
    Stripped,
    /// The binary has symbols, but none covers the address.
    NoSymbol,
    /// A module id the registry does not know (a daemon bug).
    UnregisteredModule,
    /// The binary was closed before the profile was built: nothing needed it any more, which
    /// happens when the session was evicted while its profile was being built.
    ModuleClosed,
    /// `kernel.kptr_restrict` hides kernel addresses from the daemon.
    KernelAddressesHidden,
    /// The kernel address is in no symbol of /proc/kallsyms.
    NotInKallsyms,
    /// Kernel functions are not shown to this client; the reason given to it.
    KernelHidden(String),
    /// Code id the store does not know (a daemon bug).
    UnknownCode,
    /// Anonymous executable memory that no code map explains, and why.
    Unexplained(Unexplained),
    /// No mapping explains the address.
    Unmapped(UnmappedReason),
}

impl Issue {
    /// What a person reads in a report.
    pub fn describe(&self) -> std::borrow::Cow<'_, str> {
        use std::borrow::Cow::Borrowed;
        match self {
            Issue::Binary(reason) | Issue::KernelHidden(reason) => Borrowed(reason),
            Issue::OutsideSegments => Borrowed("file offset outside every loadable segment"),
            Issue::Stripped => Borrowed("the binary has no symbols (stripped)"),
            Issue::NoSymbol => Borrowed("no symbol covers the address"),
            Issue::UnregisteredModule => Borrowed("unregistered module (daemon bug)"),
            Issue::ModuleClosed => Borrowed(
                "the binary was closed before this profile was built (its session was evicted \
                 meanwhile)",
            ),
            Issue::KernelAddressesHidden => {
                Borrowed("kernel addresses are hidden (kernel.kptr_restrict)")
            }
            Issue::NotInKallsyms => Borrowed("kernel address not in /proc/kallsyms"),
            Issue::UnknownCode => Borrowed("unknown code (daemon bug)"),
            Issue::Unexplained(why) => std::borrow::Cow::Owned(why.describe()),
            Issue::Unmapped(reason) => Borrowed(reason.describe()),
        }
    }

    /// What kind of issue it is, for clients that group issues.
    pub fn kind(&self) -> IssueKind {
        match self {
            Issue::Binary(_) => IssueKind::BinaryUnreadable,
            Issue::OutsideSegments => IssueKind::OutsideSegments,
            Issue::Stripped => IssueKind::Stripped,
            Issue::NoSymbol => IssueKind::NoSymbol,
            Issue::ModuleClosed => IssueKind::BinaryClosed,
            Issue::KernelAddressesHidden => IssueKind::KernelAddressesHidden,
            Issue::NotInKallsyms => IssueKind::NotInKallsyms,
            Issue::KernelHidden(_) => IssueKind::KernelNotShown,
            Issue::Unexplained(_) => IssueKind::JitUnexplained,
            Issue::Unmapped(UnmappedReason::ProcessGone) => IssueKind::ProcessGone,
            Issue::Unmapped(UnmappedReason::NoMapping) => IssueKind::Unmapped,
            Issue::Unmapped(UnmappedReason::Unreadable) => IssueKind::MappingsUnreadable,
            Issue::Unmapped(UnmappedReason::Pseudo) => IssueKind::PseudoMapping,
            Issue::UnregisteredModule | Issue::UnknownCode => IssueKind::DaemonBug,
        }
    }
}

/// The answer for one location.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    /// Report section.
    pub section: Section,
    /// Module the code belongs to.
    pub module: String,
    /// Symbol, or a placeholder (`module+0xOFFSET`, `[unknown]`).
    pub name: String,
    /// Whether `name` is a real symbol.
    pub symbolized: bool,
    /// Why there is no symbol, when there is none.
    pub issue: Option<Issue>,
    /// The module's GNU build id, in hex, when it has one.
    pub build_id: Option<String>,
}

/// Resolves locations to names. Cheap to share between threads.
#[derive(Debug, Clone)]
pub struct Symbolizer {
    modules: Arc<Modules>,
    codes: Arc<CodeStore>,
    kernel: Arc<KernelSymbols>,
    vdso: Arc<Result<ElfSymbols, String>>,
}

impl Symbolizer {
    /// A symbolizer over registered binaries, code map entries, the kernel's symbols and the
    /// vDSO image.
    pub fn new(
        modules: Arc<Modules>,
        codes: Arc<CodeStore>,
        kernel: Arc<KernelSymbols>,
        vdso: Arc<Result<ElfSymbols, String>>,
    ) -> Symbolizer {
        Symbolizer {
            modules,
            codes,
            kernel,
            vdso,
        }
    }

    /// The registry of binaries.
    pub fn modules(&self) -> &Arc<Modules> {
        &self.modules
    }

    /// The code map entries.
    pub fn codes(&self) -> &Arc<CodeStore> {
        &self.codes
    }

    /// The name and section of a location.
    pub fn resolve(&self, location: &Location) -> Resolved {
        match *location {
            Location::File {
                module,
                offset,
                main_executable,
            } => {
                let section = if main_executable {
                    Section::Vanilla
                } else {
                    Section::Other
                };
                match self.modules.get(module) {
                    Some(m) => {
                        let symbols = m.symbols(&self.modules);
                        resolve_in(&m.name, symbols.as_deref(), offset, section)
                    }
                    None if self.modules.is_closed(module) => {
                        unknown(section, "[unknown]", Issue::ModuleClosed)
                    }
                    None => unknown(section, "[unknown]", Issue::UnregisteredModule),
                }
            }
            Location::Jit { code, .. } => match self.codes.get(code) {
                Some(code) => Resolved {
                    section: Section::Generated,
                    module: match &code.source {
                        CodeSource::Vm(vm) if !vm.is_empty() => vm.clone(),
                        source => format!("[{}]", source.label()),
                    },
                    name: code.name.clone(),
                    symbolized: true,
                    issue: None,
                    build_id: None,
                },
                None => unknown(Section::Generated, "[jit]", Issue::UnknownCode),
            },
            Location::Anonymous {
                pid,
                start,
                end,
                why,
            } => Resolved {
                section: Section::Generated,
                module: "[anon]".into(),
                name: format!("[anonymous code {start:#x}-{end:#x} of pid {pid}]"),
                symbolized: false,
                issue: Some(Issue::Unexplained(why)),
                build_id: None,
            },
            Location::Vdso { offset } => resolve_in(
                "[vdso]",
                self.vdso.as_ref().as_ref(),
                offset,
                Section::Other,
            ),
            Location::Kernel { ip } => self.resolve_kernel(ip),
            Location::Unmapped(reason) => {
                unknown(Section::Other, "[unknown]", Issue::Unmapped(reason))
            }
            Location::StackLimit => Resolved {
                section: Section::Other,
                module: "[vmscope]".into(),
                name: STACK_LIMIT_FRAME.into(),
                symbolized: false,
                issue: None,
                build_id: None,
            },
            Location::OffCpuSinceStart => Resolved {
                section: Section::Other,
                module: "[vmscope]".into(),
                name: vmscope_model::off_cpu::SINCE_START_FRAME.into(),
                symbolized: false,
                issue: None,
                build_id: None,
            },
            Location::StillOffCpu => Resolved {
                section: Section::Other,
                module: "[vmscope]".into(),
                name: vmscope_model::off_cpu::STILL_BLOCKED_FRAME.into(),
                symbolized: false,
                issue: None,
                build_id: None,
            },
        }
    }

    /// The source frames of a location in a binary, innermost first: the functions inlined at
    /// its address, then the function holding them, each with its file and line (DWARF, see
    /// [`LineTables`]). Empty for other locations and where the binary has no line for it.
    pub fn source_frames(&self, location: &Location) -> Arc<[SourceFrame]> {
        match *location {
            Location::File { module, offset, .. } => self.modules.get(module).map_or_else(
                || Arc::new([]) as Arc<[SourceFrame]>,
                |m| m.source_frames(&self.modules, offset, Asker::Profile),
            ),
            _ => Arc::new([]),
        }
    }

    fn resolve_kernel(&self, ip: u64) -> Resolved {
        if self.kernel.addresses_hidden() {
            return unknown(Section::Other, KERNEL_MODULE, Issue::KernelAddressesHidden);
        }
        match self.kernel.lookup(ip) {
            Some(symbol) => Resolved {
                section: Section::Other,
                module: symbol
                    .module
                    .map(|m| format!("[{m}]"))
                    .unwrap_or_else(|| KERNEL_MODULE.to_owned()),
                name: symbol.name.to_owned(),
                symbolized: true,
                issue: None,
                build_id: None,
            },
            None => unknown(Section::Other, KERNEL_MODULE, Issue::NotInKallsyms),
        }
    }
}

fn unknown(section: Section, module: &str, issue: Issue) -> Resolved {
    Resolved {
        section,
        module: module.to_owned(),
        name: "[unknown]".to_owned(),
        symbolized: false,
        issue: Some(issue),
        build_id: None,
    }
}

/// Symbolises a file offset in a binary whose symbols are `symbols` (or failed to load).
fn resolve_in(
    module: &str,
    symbols: Result<&ElfSymbols, &String>,
    offset: u64,
    section: Section,
) -> Resolved {
    let build_id = symbols
        .ok()
        .and_then(|s| s.build_id())
        .map(|id| id.iter().map(|b| format!("{b:02x}")).collect());
    let placeholder = |issue: Issue| Resolved {
        section,
        module: module.to_owned(),
        name: format!("{module}+{offset:#x}"),
        symbolized: false,
        issue: Some(issue),
        build_id: build_id.clone(),
    };
    let symbols = match symbols {
        Ok(symbols) => symbols,
        Err(reason) => return placeholder(Issue::Binary(reason.clone())),
    };
    let Some(vaddr) = symbols.file_offset_to_vaddr(offset) else {
        return placeholder(Issue::OutsideSegments);
    };
    match symbols.lookup(vaddr) {
        Some(symbol) => Resolved {
            section,
            module: module.to_owned(),
            name: symbol.demangled().into_owned(),
            symbolized: true,
            issue: None,
            build_id,
        },
        None if symbols.is_empty() => placeholder(Issue::Stripped),
        None => placeholder(Issue::NoSymbol),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::{fs::File, io, path::Path};

    use vmscope_parse::kallsyms::parse_kallsyms;

    use super::*;
    use crate::{
        sys::FileId,
        vocab::{CodeMapKinds, ModuleId},
    };

    /// A symbolizer with no modules, two kernel symbols (`_stext`, `do_work` at +0x100) and
    /// no vDSO: for tests here and of the profiles built on it.
    pub(crate) fn symbolizer() -> Symbolizer {
        Symbolizer::new(
            Arc::new(Modules::new()),
            Arc::new(crate::codemap::code::CodeStore::new()),
            Arc::new(parse_kallsyms(
                b"ffffffff81000000 T _stext\nffffffff81000100 t do_work\n",
            )),
            Arc::new(Err("no vDSO here".into())),
        )
    }

    fn id(inode: u64) -> FileId {
        FileId {
            dev_major: 8,
            dev_minor: 1,
            inode,
        }
    }

    fn file_location(module: ModuleId) -> Location {
        Location::File {
            module,
            offset: 0x1234,
            main_executable: false,
        }
    }

    #[test]
    fn broken_binaries_give_placeholders_with_reasons() {
        let s = symbolizer();
        let dir = tempfile::tempdir().unwrap();
        let garbage = dir.path().join("libgarbage.so");
        std::fs::write(&garbage, b"this is not an ELF file at all").unwrap();
        let cases: Vec<(ModuleId, &str)> = vec![
            (
                s.modules()
                    .register(id(1), Path::new("/gone/libmissing.so"), || {
                        Err(io::Error::from(io::ErrorKind::NotFound))
                    }),
                "cannot open the binary",
            ),
            (
                // A directory opens, but cannot be read as a file.
                s.modules()
                    .register(id(2), Path::new("/tmp"), || File::open("/tmp")),
                "ELF",
            ),
            (
                s.modules()
                    .register(id(3), &garbage, || File::open(&garbage)),
                "ELF",
            ),
        ];
        for (module, reason) in cases {
            let resolved = s.resolve(&file_location(module));
            let name = s.modules().get(module).unwrap().name.clone();
            assert_eq!(resolved.name, format!("{name}+0x1234"));
            assert!(!resolved.symbolized);
            let issue = resolved.issue.expect("a reason");
            let issue = issue.describe();
            assert!(issue.contains(reason), "{name}: {issue}");
        }
        let counters = s.modules().counters();
        assert_eq!(counters.registered, 3);
        assert_eq!(counters.open_failures, 1);
        assert_eq!(counters.parse_failures, 2);
    }

    #[test]
    fn a_binary_is_opened_and_parsed_once() {
        let s = symbolizer();
        let exe = std::env::current_exe().unwrap();
        let mut opens = 0;
        let first = s.modules().register(id(7), &exe, || {
            opens += 1;
            File::open(&exe)
        });
        let second = s.modules().register(id(7), &exe, || {
            opens += 1;
            File::open(&exe)
        });
        assert_eq!(first, second);
        assert_eq!(opens, 1);
        // Offset 0 is the ELF header: no symbol, but the binary parses.
        let _ = s.resolve(&file_location(first));
        let _ = s.resolve(&file_location(first));
        assert_eq!(s.modules().counters().parsed, 1);
    }

    /// A profile built from a snapshot taken before its session was evicted may meet a binary
    /// closed since: its rows say so, and nothing crashes.
    #[test]
    fn a_closed_binary_gives_a_placeholder_saying_so() {
        let s = symbolizer();
        let exe = std::env::current_exe().unwrap();
        let module = s.modules().register(id(7), &exe, || File::open(&exe));
        s.modules().retain(|_| false);
        let resolved = s.resolve(&file_location(module));
        assert_eq!(resolved.issue, Some(Issue::ModuleClosed));
        assert!(!resolved.symbolized);
        assert!(resolved.issue.unwrap().describe().contains("closed"));
        assert!(s.source_frames(&file_location(module)).is_empty());
        // An id never registered is still a daemon bug.
        let unknown = s.resolve(&file_location(ModuleId(module.0 + 1)));
        assert_eq!(unknown.issue, Some(Issue::UnregisteredModule));
    }

    #[test]
    fn kernel_and_unmapped_samples_are_named_or_explained() {
        let s = symbolizer();
        let hit = s.resolve(&Location::Kernel {
            ip: 0xffff_ffff_8100_0123,
        });
        assert_eq!(
            (hit.name.as_str(), hit.module.as_str()),
            ("do_work", KERNEL_MODULE)
        );
        assert!(hit.symbolized);
        let miss = s.resolve(&Location::Kernel { ip: 0x1000 });
        assert_eq!(miss.name, "[unknown]");
        assert_eq!(miss.issue, Some(Issue::NotInKallsyms));
        let gone = s.resolve(&Location::Unmapped(UnmappedReason::ProcessGone));
        assert_eq!(gone.section, Section::Other);
        assert!(gone.issue.unwrap().describe().contains("exited"));
        let jit = s.resolve(&Location::Anonymous {
            pid: 1,
            start: 0x1000,
            end: 0x2000,
            why: Unexplained::NoEntry(CodeMapKinds::PERF_MAP),
        });
        assert_eq!(jit.section, Section::Generated);
        assert!(
            jit.issue
                .unwrap()
                .describe()
                .contains("(perf map) has no entry"),
            "the reason names the map"
        );
        let vdso = s.resolve(&Location::Vdso { offset: 0x10 });
        assert_eq!(vdso.issue, Some(Issue::Binary("no vDSO here".into())));
    }
}
