//! The unwinder on real stacks of this test process (through libc, which has no frame
//! pointers) and on synthetic stacks (the CPython trampoline rule).

use std::{fs::File, path::Path, sync::Arc};

use vmscope_parse::kallsyms::parse_kallsyms;

use super::{own_stack, *};
use crate::{
    codemap::code::CodeStore,
    process::ProcessTable,
    symbolize::{Symbolizer, unwind_tables::tests::libc_path},
    sys::{self, FileId},
};

/// Perf's largest stack copy.
const FULL_COPY: usize = 65528;

fn symbolizer(modules: Arc<Modules>) -> Symbolizer {
    Symbolizer::new(
        modules,
        Arc::new(CodeStore::new()),
        Arc::new(parse_kallsyms(b"")),
        Arc::new(Err("no vDSO in this test".into())),
    )
}

/// `module: name` of each frame, the leaf by its address, callers by `address - 1`.
fn names(table: &mut ProcessTable, symbolizer: &Symbolizer, frames: &[u64]) -> Vec<String> {
    let pid = std::process::id();
    frames
        .iter()
        .enumerate()
        .map(|(i, &address)| {
            let location = if i == 0 {
                table.normalize(pid, address, sys::monotonic_ns())
            } else {
                table.normalize_caller(pid, address - 1, sys::monotonic_ns())
            };
            let resolved = symbolizer.resolve(&location);
            format!("{}: {}", resolved.module, resolved.name)
        })
        .collect()
}

fn unwind_captured(
    unwinder: &mut Unwinder,
    table: &mut ProcessTable,
    captured: &own_stack::Captured,
    bytes: usize,
    faulted: bool,
) -> (Vec<u64>, StackEnd) {
    let process = table.observe(std::process::id(), sys::monotonic_ns());
    let mut out = Vec::new();
    let end = unwinder.unwind(
        process,
        UserRegs {
            ip: captured.ip,
            sp: captured.sp,
            bp: captured.bp,
        },
        StackCopy {
            sp: captured.sp,
            bytes: &captured.stack[..bytes.min(captured.stack.len())],
            faulted,
            taken_ns: 0,
        },
        &mut ProcessMemory::new(),
        &mut out,
    );
    // As the manager does, with the walk's own end.
    unwinder.count_end(end);
    (out, end)
}

#[test]
fn own_stack_unwinds_through_qsort_to_every_rust_caller() {
    let captured = own_stack::chain_a(FULL_COPY);
    let modules = Arc::new(Modules::new());
    let mut table = ProcessTable::new(modules.clone());
    let mut unwinder = Unwinder::new(modules.clone());
    let (frames, end) = unwind_captured(
        &mut unwinder,
        &mut table,
        &captured,
        FULL_COPY,
        captured.faulted,
    );
    let names = names(&mut table, &symbolizer(modules), &frames);
    let listing = names.join("\n");
    assert_eq!(end, StackEnd::Complete, "{listing}");
    assert!(names[0].ends_with("own_stack::capture"), "{listing}");
    // The comparator, after the frames of its thread-local access when not inlined.
    let compare = names
        .iter()
        .position(|n| n.ends_with("own_stack::compare"))
        .expect(&listing);
    // Then libc's sort, which keeps no frame pointers: only its CFI gets us through it.
    let libc_frames: Vec<&String> = names[compare + 1..]
        .iter()
        .take_while(|n| n.starts_with("libc.so"))
        .collect();
    assert!(
        libc_frames
            .iter()
            .any(|n| n.contains("qsort") || n.contains("msort")),
        "{listing}"
    );
    // Then each function of the Rust chain, in order, and the test itself.
    let after = &names[compare + 1 + libc_frames.len()..];
    for (i, function) in own_stack::CHAIN.iter().enumerate() {
        assert!(
            after[i].ends_with(&format!("own_stack::{function}")),
            "frame {} is not {function}:\n{listing}",
            compare + 1 + libc_frames.len() + i
        );
    }
    assert!(
        after[own_stack::CHAIN.len()]
            .ends_with("own_stack_unwinds_through_qsort_to_every_rust_caller"),
        "{listing}"
    );
    let counters = unwinder.counters();
    assert_eq!(counters.ended(StackEnd::Complete), 1);
    assert_eq!(counters.frames, frames.len() as u64);
    assert_eq!(counters.vdso_failures, 0);
    assert_eq!(counters.table_failures, 0);
}

#[test]
fn a_short_copy_keeps_the_top_frames_and_says_why() {
    let captured = own_stack::chain_a(FULL_COPY);
    let modules = Arc::new(Modules::new());
    let mut table = ProcessTable::new(modules.clone());
    let mut unwinder = Unwinder::new(modules);
    let (full, _) = unwind_captured(&mut unwinder, &mut table, &captured, FULL_COPY, false);
    // Enough for the capture and comparator frames, not for the whole stack.
    for (bytes, faulted, expected) in [
        (1024, false, StackEnd::CopyTooSmall),
        (1024, true, StackEnd::CopyFaulted),
        (0, false, StackEnd::CopyTooSmall),
    ] {
        let (frames, end) = unwind_captured(&mut unwinder, &mut table, &captured, bytes, faulted);
        assert_eq!(end, expected, "{bytes} bytes");
        assert!(
            !frames.is_empty() && frames.len() < full.len(),
            "{frames:x?}"
        );
        assert_eq!(frames[..], full[..frames.len()], "{bytes} bytes");
    }
    assert_eq!(unwinder.counters().ended(StackEnd::CopyTooSmall), 2);
    assert_eq!(unwinder.counters().ended(StackEnd::CopyFaulted), 1);
}

#[test]
fn the_frame_limit_stops_a_deep_stack() {
    #[inline(never)]
    fn recurse(depth: usize) -> own_stack::Captured {
        if depth == 0 {
            return own_stack::chain_a(FULL_COPY);
        }
        let captured = recurse(depth - 1);
        std::hint::black_box(&captured);
        captured
    }
    let captured = recurse(MAX_STACK_FRAMES);
    let modules = Arc::new(Modules::new());
    let mut table = ProcessTable::new(modules.clone());
    let mut unwinder = Unwinder::new(modules);
    let (frames, end) = unwind_captured(
        &mut unwinder,
        &mut table,
        &captured,
        FULL_COPY,
        captured.faulted,
    );
    assert_eq!(end, StackEnd::FrameLimit);
    assert_eq!(frames.len(), MAX_STACK_FRAMES);
}

#[test]
fn unwinders_are_rebuilt_only_when_mappings_change_and_tables_are_shared() {
    let captured = own_stack::chain_a(FULL_COPY);
    let modules = Arc::new(Modules::new());
    let mut table = ProcessTable::new(modules.clone());
    let mut unwinder = Unwinder::new(modules.clone());
    let (first, _) = unwind_captured(&mut unwinder, &mut table, &captured, FULL_COPY, false);
    let (second, _) = unwind_captured(&mut unwinder, &mut table, &captured, FULL_COPY, false);
    assert_eq!(first, second);
    let counters = unwinder.counters();
    assert_eq!(counters.unwinders_built, 1);
    let loaded = counters.tables_loaded;
    assert!(
        loaded >= 2,
        "the test binary and libc at least: {counters:?}"
    );
    // Mappings read again (as after exec): a new unwinder, no table loaded again.
    table.exec(std::process::id(), sys::monotonic_ns(), "test");
    let (third, _) = unwind_captured(&mut unwinder, &mut table, &captured, FULL_COPY, false);
    assert_eq!(first, third);
    assert_eq!(unwinder.counters().unwinders_built, 2);
    assert_eq!(unwinder.counters().tables_loaded, loaded);
    unwinder.forget(std::process::id());
    unwind_captured(&mut unwinder, &mut table, &captured, FULL_COPY, false);
    assert_eq!(unwinder.counters().unwinders_built, 3);
}

#[test]
fn one_binary_under_two_inodes_is_loaded_once() {
    let libc = libc_path();
    let modules = Modules::new();
    let id = |inode| FileId {
        dev_major: 0,
        dev_minor: 0,
        inode,
    };
    // As if two containers each had their own copy of libc.
    let a = modules.register(id(1), &libc, || File::open(&libc));
    let b = modules.register(id(2), &libc, || File::open(&libc));
    assert_ne!(a, b);
    let ta = modules.get(a).unwrap().unwind_sections(&modules).unwrap();
    let tb = modules.get(b).unwrap().unwind_sections(&modules).unwrap();
    assert!(Arc::ptr_eq(&ta, &tb));
    let counters = modules.counters();
    assert_eq!(
        (counters.unwind_loaded, counters.unwind_build_id_hits),
        (1, 1)
    );
    // Asked again: the module's own answer, nothing counted.
    modules.get(a).unwrap().unwind_sections(&modules).unwrap();
    assert_eq!(modules.counters(), counters);
}

#[test]
fn unreadable_binaries_are_counted_with_a_reason() {
    let dir = tempfile::tempdir().unwrap();
    let garbage = dir.path().join("libgarbage.so");
    std::fs::write(&garbage, b"not ELF").unwrap();
    let modules = Modules::new();
    let missing = modules.register(
        FileId {
            dev_major: 0,
            dev_minor: 0,
            inode: 1,
        },
        Path::new("/gone.so"),
        || Err(std::io::Error::from(std::io::ErrorKind::NotFound)),
    );
    let bad = modules.register(
        FileId {
            dev_major: 0,
            dev_minor: 0,
            inode: 2,
        },
        &garbage,
        || File::open(&garbage),
    );
    let err = modules
        .get(missing)
        .unwrap()
        .unwind_sections(&modules)
        .unwrap_err();
    assert!(err.contains("cannot open"), "{err}");
    let err = modules
        .get(bad)
        .unwrap()
        .unwind_sections(&modules)
        .unwrap_err();
    assert!(err.contains("malformed"), "{err}");
    assert_eq!(modules.counters().unwind_failures, 2);
}

/// An anonymous executable page of this process, standing for a JIT's code zone.
struct CodePage(u64);

impl CodePage {
    const SIZE: usize = 4096;

    /// A page holding `code` at `offset` (and `int3` elsewhere), read and execute only.
    fn new(offset: usize, code: &[u8]) -> CodePage {
        // SAFETY: a fresh private anonymous mapping, written while writable, then made RX.
        unsafe {
            let base = libc::mmap(
                std::ptr::null_mut(),
                Self::SIZE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(base, libc::MAP_FAILED);
            let page = std::slice::from_raw_parts_mut(base.cast::<u8>(), Self::SIZE);
            page.fill(0xcc);
            page[offset..offset + code.len()].copy_from_slice(code);
            assert_eq!(
                libc::mprotect(base, Self::SIZE, libc::PROT_READ | libc::PROT_EXEC),
                0
            );
            CodePage(base as u64)
        }
    }
}

impl Drop for CodePage {
    fn drop(&mut self) {
        // SAFETY: unmaps the page mapped in `new`, which nothing references any more.
        unsafe { libc::munmap(self.0 as *mut libc::c_void, Self::SIZE) };
    }
}

/// Code bytes from a buffer standing for the process's memory at `base`.
struct FakeCode {
    base: u64,
    memory: Vec<u8>,
    asked: Vec<u64>,
}

impl ReadCode for FakeCode {
    fn read(&mut self, _pid: u32, addr: u64, buf: &mut [u8]) -> bool {
        self.asked.push(addr);
        let Some(start) = addr.checked_sub(self.base).map(|s| s as usize) else {
            return false;
        };
        match self.memory.get(start..start + buf.len()) {
            Some(bytes) => {
                buf.copy_from_slice(bytes);
                true
            }
            None => false,
        }
    }
}

/// The synthetic stack of a JIT frame (frame pointers) called by a CPython trampoline, itself
/// called from another JIT frame, and what the unwind must find.
struct TrampolineStack {
    regs: UserRegs,
    stack: Vec<u8>,
    leaf: u64,
    trampoline_return: u64,
    caller: u64,
    outermost: u64,
}

const TRAMPOLINE_AT: usize = 0x100;

fn trampoline_stack(page: u64) -> TrampolineStack {
    let sp = 0x7ffc_0000_0000u64;
    let leaf = page + 0x700;
    let trampoline_return = page + TRAMPOLINE_AT as u64 + cpython::RETURN_OFFSET;
    let caller = page + 0x800;
    let outermost = page + 0x900;
    let mut words = [0u64; 16];
    // The leaf's frame record: saved rbp (the caller's frame), return into the trampoline.
    words[2] = sp + 0x40;
    words[3] = trampoline_return;
    // The trampoline's frame: 8 bytes of padding, then its caller's return address.
    words[5] = caller;
    // The caller's frame record: rbp 0 (the outermost), return address.
    words[8] = 0;
    words[9] = outermost;
    TrampolineStack {
        regs: UserRegs {
            ip: leaf,
            sp,
            bp: sp + 0x10,
        },
        stack: words.iter().flat_map(|w| w.to_le_bytes()).collect(),
        leaf,
        trampoline_return,
        caller,
        outermost,
    }
}

fn unwind_synthetic(
    unwinder: &mut Unwinder,
    table: &mut ProcessTable,
    s: &TrampolineStack,
    code: &mut dyn ReadCode,
) -> (Vec<u64>, StackEnd) {
    // Read after the page was mapped, as the daemon re-reads on a miss.
    let process = table.exec(std::process::id(), sys::monotonic_ns(), "test");
    let mut out = Vec::new();
    let end = unwinder.unwind(
        process,
        s.regs,
        StackCopy {
            sp: s.regs.sp,
            bytes: &s.stack,
            faulted: false,
            taken_ns: 0,
        },
        code,
        &mut out,
    );
    (out, end)
}

#[test]
fn cpython_trampolines_are_unwound_by_their_bytes() {
    let page = CodePage::new(TRAMPOLINE_AT, &cpython::TRAMPOLINE);
    let s = trampoline_stack(page.0);
    let modules = Arc::new(Modules::new());
    let mut table = ProcessTable::new(modules.clone());
    let mut unwinder = Unwinder::new(modules);
    let expected = vec![s.leaf, s.trampoline_return, s.caller, s.outermost];

    // With the bytes from a fake reader...
    let mut memory = vec![0xcc; CodePage::SIZE];
    memory[TRAMPOLINE_AT..TRAMPOLINE_AT + 11].copy_from_slice(&cpython::TRAMPOLINE);
    let mut fake = FakeCode {
        base: page.0,
        memory,
        asked: Vec::new(),
    };
    let (frames, end) = unwind_synthetic(&mut unwinder, &mut table, &s, &mut fake);
    assert_eq!((frames, end), (expected.clone(), StackEnd::Complete));
    assert!(fake.asked.contains(&(page.0 + TRAMPOLINE_AT as u64)));
    assert_eq!(unwinder.counters().trampolines, 1);

    // ...and from the live page with process_vm_readv.
    let mut live = ProcessMemory::new();
    let (frames, end) = unwind_synthetic(&mut unwinder, &mut table, &s, &mut live);
    assert_eq!((frames, end), (expected, StackEnd::Complete));
    assert_eq!(unwinder.counters().trampolines, 2);
}

#[test]
fn a_trampoline_pattern_at_the_wrong_offset_is_not_taken() {
    // One byte further than a call's return address would put it.
    let page = CodePage::new(TRAMPOLINE_AT + 1, &cpython::TRAMPOLINE);
    let s = trampoline_stack(page.0);
    let modules = Arc::new(Modules::new());
    let mut table = ProcessTable::new(modules.clone());
    let mut unwinder = Unwinder::new(modules);
    let (frames, end) = unwind_synthetic(&mut unwinder, &mut table, &s, &mut ProcessMemory::new());
    // Frame pointers alone skip the trampoline's caller.
    assert_eq!(unwinder.counters().trampolines, 0);
    assert!(!frames.contains(&s.caller), "{frames:x?}");
    assert_eq!(frames[..2], [s.leaf, s.trampoline_return]);
    assert_eq!(end, StackEnd::Complete);
}

#[test]
fn trampoline_bytes_outside_anonymous_memory_are_not_read() {
    // Return addresses in the stack that are not in anonymous memory: the reader is never asked.
    let s = trampoline_stack(0x1000);
    let modules = Arc::new(Modules::new());
    let mut table = ProcessTable::new(modules.clone());
    let mut unwinder = Unwinder::new(modules);
    let mut fake = FakeCode {
        base: 0x1000,
        memory: vec![0; CodePage::SIZE],
        asked: Vec::new(),
    };
    let (frames, _) = unwind_synthetic(&mut unwinder, &mut table, &s, &mut fake);
    assert_eq!(frames[0], s.leaf);
    assert!(fake.asked.is_empty());
}

/// Builds a shared library without `.eh_frame` (only `.debug_frame`, from `-g`), splits its
/// debug information into a zlib-compressed debug file beside it and strips it, as
/// distributions do. Returns the stripped library and the unstripped one.
fn library_with_debug_file(
    dir: &Path,
    name: &str,
    seed: u32,
) -> (std::path::PathBuf, std::path::PathBuf) {
    use std::process::Command;
    let source: String = (0..40)
        .map(|i| {
            format!(
                "int work{i}(int (*cb)(int), int x) {{ int a[16]; for (int i = 0; i < 16; i++) \
                 a[i] = cb(x + i * {}); int s = 0; for (int i = 0; i < 16; i++) s += a[i] * i; \
                 return s; }}\n",
                i + seed
            )
        })
        .collect();
    let c = dir.join(format!("{name}.c"));
    std::fs::write(&c, source).unwrap();
    let full = dir.join(format!("{name}.full.so"));
    let stripped = dir.join(format!("{name}.so"));
    let debug = dir.join(format!("{name}.debug"));
    let run = |command: &mut Command| {
        let status = command
            .status()
            .unwrap_or_else(|e| panic!("{command:?}: {e}"));
        assert!(status.success(), "{command:?}: {status}");
    };
    run(Command::new("gcc")
        .args(["-shared", "-nostdlib", "-fno-asynchronous-unwind-tables"])
        .args(["-fomit-frame-pointer", "-g", "-O2", "-Wl,--build-id", "-o"])
        .arg(&full)
        .arg(&c));
    run(Command::new("objcopy")
        .args(["--only-keep-debug", "--compress-debug-sections=zlib"])
        .arg(&full)
        .arg(&debug));
    run(Command::new("objcopy")
        .arg(format!("--add-gnu-debuglink={}", debug.display()))
        .arg("--strip-debug")
        .arg(&full)
        .arg(&stripped));
    (stripped, full)
}

#[test]
fn a_stripped_binary_without_eh_frame_gets_its_debug_files_debug_frame() {
    let dir = tempfile::tempdir().unwrap();
    let (stripped, full) = library_with_debug_file(dir.path(), "libdf", 1);
    let own = UnwindTables::parse(&*std::fs::read(&stripped).unwrap()).unwrap();
    assert_eq!(
        own.kind(),
        "none",
        "the fixture must have no CFI of its own"
    );
    let expected = UnwindTables::parse(&*std::fs::read(&full).unwrap()).unwrap();
    assert_eq!(expected.kind(), ".debug_frame");

    let modules = Modules::new();
    let tables = unwind_sections_of(&modules, &stripped);
    assert_eq!(tables.kind(), ".debug_frame");
    // Decompressed from the debug file: the very bytes the unstripped library has.
    assert_eq!(tables.section_bytes(), expected.section_bytes());
    assert_eq!(
        format!("{:?}", tables.section_info().debug_frame),
        format!("{:?}", expected.section_info().debug_frame)
    );

    // A debug file of another build under the same name is not taken.
    let other = tempfile::tempdir().unwrap();
    let (stripped_b, _) = library_with_debug_file(other.path(), "libdf", 2);
    let third = tempfile::tempdir().unwrap();
    library_with_debug_file(third.path(), "libdf", 3);
    std::fs::copy(
        third.path().join("libdf.debug"),
        other.path().join("libdf.debug"),
    )
    .unwrap();
    let tables = unwind_sections_of(&modules, &stripped_b);
    assert_eq!(tables.kind(), "none");
}

/// Registers the binary at `path` and loads its unwind sections.
fn unwind_sections_of(modules: &Modules, path: &std::path::Path) -> Arc<UnwindTables> {
    let id = FileId::from_metadata(&std::fs::metadata(path).unwrap());
    let module = modules.register(id, path, || File::open(path));
    modules
        .get(module)
        .unwrap()
        .unwind_sections(modules)
        .unwrap()
}
