//! The kernel side of call stacks on its own, with real BPF (root): the sampler is loaded, a
//! fixture process is made a target, and the raw ring-buffer records are checked against the
//! fixture's symbols, without any of the daemon's aggregation.
//!
//! Fixtures (tests/fixtures/fp_*.c, dwarf_*.c) are built non-PIE so that symbol values are
//! run-time addresses. A test that cannot load BPF fails and says why.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command},
    time::{Duration, Instant},
};

use aya::maps::{MapData, RingBuf};
use object::{Object, ObjectSymbol};
use vmscope_common::{
    Creds, EVENT_SAMPLE, Event, FLAG_KERNEL_TRUNCATED, FLAG_STACK, FLAG_TARGET, FLAG_USER_COPY,
    FLAG_USER_COPY_FAULTED, FLAG_USER_STACK_FAILED, FLAG_USER_TRUNCATED, MAX_STACK_FRAMES,
    MAX_USER_COPY, RING_BUFFER_BYTES, TargetKey, UserCopyHeader, WANT_STACKS, Wants,
};
use vmscoped::{
    bpf::{Guard, Sampler, SamplerControl, Tracking, period_of},
    sys,
};

/// Lowest address of the x86_64 kernel half.
const KERNEL_START: u64 = 0xffff_8000_0000_0000;

/// Frame-pointer stacks, as `--call-graph fp` asks.
const FP: Wants = Wants {
    flags: WANT_STACKS,
    user_copy_bytes: 0,
    min_block_ns: 0,
};

/// A copy of `bytes` of user stack, as `--call-graph dwarf,BYTES` asks.
const fn dwarf(bytes: u32) -> Wants {
    Wants {
        flags: 0,
        user_copy_bytes: bytes,
        min_block_ns: 0,
    }
}

/// The pattern `tests/fixtures/dwarf_magic.c` writes on its stack.
const MAGIC: u64 = 0x5ca1_ab1e_dead_c0de;

/// One ring-buffer record, decoded.
#[derive(Debug)]
struct Record {
    len: usize,
    event: Event,
    kernel: Vec<u64>,
    user: Vec<u64>,
    /// The user registers and stack copy, with `--call-graph dwarf`.
    copy: Option<(UserCopyHeader, Vec<u8>)>,
}

/// A fixture process, killed when dropped.
struct Fixture {
    child: Child,
    exe: PathBuf,
    _dir: tempfile::TempDir,
}

impl Fixture {
    /// Builds `tests/fixtures/NAME.c` (non-PIE, frame pointers) and runs it.
    fn start(name: &str) -> Fixture {
        Fixture::start_built(
            name,
            &["-O1", "-g", "-fno-inline", "-fno-omit-frame-pointer"],
        )
    }

    /// Builds `tests/fixtures/NAME.c` non-PIE with these flags and runs it.
    fn start_built(name: &str, flags: &[&str]) -> Fixture {
        let dir = tempfile::tempdir().expect("temp dir");
        let exe = dir.path().join(name);
        let src = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures")
            .join(format!("{name}.c"));
        let out = Command::new("gcc")
            .args(flags)
            .args(["-fno-pie", "-no-pie", "-o"])
            .arg(&exe)
            .arg(&src)
            .output()
            .expect("cannot run gcc (install it, or run `cargo xtask setup`)");
        assert!(
            out.status.success(),
            "gcc {}: {}",
            src.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let child = Command::new(&exe).spawn().expect("start the fixture");
        Fixture {
            child,
            exe,
            _dir: dir,
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The `[start, end)` range of a function symbol of the executable.
    fn function(&self, name: &str) -> std::ops::Range<u64> {
        let data = std::fs::read(&self.exe).expect("read the fixture");
        let file = object::File::parse(&*data).expect("parse the fixture");
        let symbol = file
            .symbols()
            .find(|s| s.name() == Ok(name))
            .unwrap_or_else(|| panic!("no symbol {name} in {}", self.exe.display()));
        assert!(symbol.size() > 0, "{name} has no size");
        symbol.address()..symbol.address() + symbol.size()
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Loads the sampler, samples `pid` at 1400 Hz (with what `wants` says) for `run`, and returns
/// its records.
fn sample(pid: u32, wants: Wants, run: Duration) -> Vec<Record> {
    sample_with(run, |sampler, period_ns| {
        // A target is sampled while it is tracked (vmscope_exit ends it): as the manager does.
        sampler.set_tracking(pid, Tracking::Leader, Guard::Open);
        sampler.set_target(target(period_ns, pid), wants)
    })
    .into_iter()
    .filter(|r| r.event.tgid == pid)
    .collect()
}

/// Loads the sampler, lets `setup` choose what is sampled at 1400 Hz, and returns every record
/// of the next `run`.
fn sample_with(
    run: Duration,
    setup: impl FnOnce(&mut Sampler, u64) -> Result<(), vmscoped::bpf::SamplerError>,
) -> Vec<Record> {
    sample_guarded(run, setup).0
}

/// [`sample_with`], and the processes the kernel then reported with changed credentials.
fn sample_guarded(
    run: Duration,
    setup: impl FnOnce(&mut Sampler, u64) -> Result<(), vmscoped::bpf::SamplerError>,
) -> (Vec<Record>, Vec<(u32, u64)>) {
    let (mut sampler, mut ring) = Sampler::load(RING_BUFFER_BYTES).unwrap_or_else(|e| {
        panic!("cannot load the BPF sampler (these tests need root and BPF): {e:#}")
    });
    let period_ns = period_of(1400);
    setup(&mut sampler, period_ns).expect("set the filters");
    sampler
        .start_period(period_ns)
        .expect("open the perf events");
    let mut records = Vec::new();
    let end = Instant::now() + run;
    while Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
        drain(&mut ring, &mut records);
    }
    sampler.stop_period(period_ns);
    drain(&mut ring, &mut records);
    (records, sampler.take_creds_changed())
}

fn target(period_ns: u64, tgid: u32) -> TargetKey {
    TargetKey {
        period_ns,
        tgid,
        _pad: 0,
    }
}

fn drain(ring: &mut RingBuf<MapData>, records: &mut Vec<Record>) {
    while let Some(item) = ring.next() {
        let event = Event::from_bytes(&item).expect("a record too short to be an event");
        if event.kind != EVENT_SAMPLE {
            continue;
        }
        let frames: Vec<u64> = event
            .frames_from_bytes(&item)
            .unwrap_or_else(|| panic!("a record shorter than its counts: {event:?}"))
            .collect();
        let (kernel, user) = frames.split_at(usize::from(event.kernel_frames));
        let copy = event
            .user_copy_from_bytes(&item)
            .unwrap_or_else(|_| panic!("a record shorter than its copy: {event:?}"))
            .map(|(header, stack)| (header, stack.to_vec()));
        records.push(Record {
            len: item.len(),
            event,
            kernel: kernel.to_vec(),
            user: user.to_vec(),
            copy,
        });
    }
}

/// The depth limit the daemon gives the program.
fn depth_limit() -> usize {
    (sys::perf_event_max_stack().expect("kernel.perf_event_max_stack") as usize)
        .min(MAX_STACK_FRAMES)
}

#[test]
fn user_stacks_follow_the_call_chain() {
    let fixture = Fixture::start("fp_chain");
    let (inner, outer, main) = (
        fixture.function("inner"),
        fixture.function("outer"),
        fixture.function("main"),
    );
    let records = sample(fixture.pid(), FP, Duration::from_secs(1));
    assert!(records.len() >= 50, "only {} samples", records.len());
    for r in &records {
        assert_ne!(r.event.flags & FLAG_STACK, 0, "{r:?}");
        assert_eq!(r.event.flags & FLAG_USER_STACK_FAILED, 0, "{r:?}");
        assert_eq!(r.len, Event::SIZE + 8 * (r.kernel.len() + r.user.len()));
        assert!(!r.user.is_empty(), "no user frames: {r:?}");
        if r.event.is_kernel() {
            assert_eq!(r.kernel.first(), Some(&r.event.ip), "{r:?}");
        } else {
            assert!(r.kernel.is_empty(), "kernel frames in a user tick: {r:?}");
            assert_eq!(r.user[0], r.event.ip, "the user leaf is the ip: {r:?}");
        }
    }
    // Ticks in `inner` (nearly all of them once it runs) carry its callers' return addresses,
    // which point one instruction past their calls, hence `- 1`.
    let in_inner: Vec<&Record> = records
        .iter()
        .filter(|r| !r.event.is_kernel() && inner.contains(&r.user[0]))
        .collect();
    assert!(
        in_inner.len() * 10 >= records.len() * 8,
        "{} of {} samples in inner",
        in_inner.len(),
        records.len()
    );
    for r in &in_inner {
        assert!(r.user.len() >= 3, "{:x?}", r.user);
        assert!(outer.contains(&(r.user[1] - 1)), "not outer: {:x?}", r.user);
        assert!(main.contains(&(r.user[2] - 1)), "not main: {:x?}", r.user);
        assert_eq!(r.event.flags & FLAG_USER_TRUNCATED, 0);
    }
}

#[test]
fn kernel_ticks_carry_the_kernel_stack_over_the_user_stack() {
    let fixture = Fixture::start("fp_syscalls");
    let (read_chunk, main) = (fixture.function("read_chunk"), fixture.function("main"));
    let records = sample(fixture.pid(), FP, Duration::from_secs(1));
    let kernel: Vec<&Record> = records.iter().filter(|r| r.event.is_kernel()).collect();
    assert!(
        kernel.len() >= 25,
        "{} kernel ticks of {}",
        kernel.len(),
        records.len()
    );
    for r in &kernel {
        assert_ne!(r.event.flags & FLAG_STACK, 0, "{r:?}");
        assert!(!r.kernel.is_empty(), "no kernel frames: {r:?}");
        assert_eq!(r.kernel[0], r.event.ip, "the kernel leaf is the ip: {r:?}");
        assert!(
            r.kernel.iter().all(|&a| a >= KERNEL_START),
            "{:x?}",
            r.kernel
        );
        assert_eq!(r.event.flags & FLAG_KERNEL_TRUNCATED, 0, "{r:?}");
        assert!(
            r.user.iter().all(|&a| a < KERNEL_START),
            "kernel address in the user stack: {:x?}",
            r.user
        );
    }
    // Under the kernel frames: the user ip just after the syscall instruction, in read_chunk,
    // then main. (A tick at the very entry of the syscall may precede the saved user state.)
    let from_read_chunk = kernel
        .iter()
        .filter(|r| {
            r.user.len() >= 2 && read_chunk.contains(&r.user[0]) && main.contains(&(r.user[1] - 1))
        })
        .count();
    assert!(
        from_read_chunk * 10 >= kernel.len() * 9,
        "{from_read_chunk} of {} kernel ticks under read_chunk <- main: {:x?}",
        kernel.len(),
        kernel.iter().take(5).map(|r| &r.user).collect::<Vec<_>>()
    );
}

#[test]
fn deep_recursion_fills_the_limit_and_is_marked_truncated() {
    let fixture = Fixture::start("fp_recursion");
    let (bottom, recurse) = (fixture.function("bottom"), fixture.function("recurse"));
    let limit = depth_limit();
    let records = sample(fixture.pid(), FP, Duration::from_secs(1));
    let at_bottom: Vec<&Record> = records
        .iter()
        .filter(|r| !r.event.is_kernel() && bottom.contains(&r.user[0]))
        .collect();
    assert!(
        at_bottom.len() >= 50,
        "{} of {} samples at the bottom",
        at_bottom.len(),
        records.len()
    );
    for r in &at_bottom {
        assert_eq!(r.user.len(), limit, "{r:?}");
        assert_ne!(r.event.flags & FLAG_USER_TRUNCATED, 0, "{r:?}");
        assert!(
            r.user[1..].iter().all(|&a| recurse.contains(&(a - 1))),
            "{:x?}",
            r.user
        );
    }
}

#[test]
fn targets_without_stacks_get_bare_events() {
    let fixture = Fixture::start("fp_chain");
    let records = sample(fixture.pid(), Wants::default(), Duration::from_millis(500));
    assert!(records.len() >= 25, "only {} samples", records.len());
    for r in &records {
        assert_eq!(r.len, Event::SIZE, "{r:?}");
        assert_eq!(r.event.flags & FLAG_STACK, 0, "{r:?}");
        assert_eq!((r.event.kernel_frames, r.event.user_frames), (0, 0));
    }
}

#[test]
fn a_stack_target_gets_stacks_while_system_wide_mode_does_not() {
    let fixture = Fixture::start("fp_chain");
    let pid = fixture.pid();
    // A busy process of our own beside it, sampled by the system-wide entry only.
    let other = Fixture::start("fp_recursion");
    let records = sample_with(Duration::from_secs(1), |sampler, period_ns| {
        sampler.set_system_wide(period_ns, Wants::default())?;
        sampler.set_tracking(pid, Tracking::Leader, Guard::Open);
        sampler.set_target(target(period_ns, pid), FP)
    });
    let (mine, others): (Vec<&Record>, Vec<&Record>) =
        records.iter().partition(|r| r.event.tgid == pid);
    assert!(
        mine.len() >= 50,
        "only {} samples of the target",
        mine.len()
    );
    assert!(
        others
            .iter()
            .filter(|r| r.event.tgid == other.pid())
            .count()
            >= 50,
        "the other process is sampled system-wide"
    );
    for r in &mine {
        assert_ne!(r.event.flags & FLAG_STACK, 0, "{r:?}");
        assert!(!r.user.is_empty(), "{r:?}");
    }
    for r in &others {
        assert_eq!(r.len, Event::SIZE, "{r:?}");
        assert_eq!(r.event.flags & FLAG_STACK, 0, "{r:?}");
    }
}

/// Builds and runs `tests/fixtures/dwarf_magic.c` as `--call-graph dwarf` is meant for: -O2,
/// no frame pointers.
fn magic_fixture() -> Fixture {
    Fixture::start_built("dwarf_magic", &["-O2", "-g", "-fomit-frame-pointer"])
}

/// Offsets (from sp) at which the copied stack holds `word`, 8-aligned.
fn offsets_of(stack: &[u8], word: u64) -> Vec<usize> {
    stack
        .chunks_exact(8)
        .enumerate()
        .filter(|(_, w)| u64::from_ne_bytes((*w).try_into().unwrap()) == word)
        .map(|(i, _)| 8 * i)
        .collect()
}

/// Checks what every record of a copy of `asked` bytes must hold, and returns the copies.
fn copies_of(records: &[Record], asked: u32) -> Vec<(&Record, &UserCopyHeader, &[u8])> {
    records
        .iter()
        .map(|r| {
            assert_ne!(r.event.flags & FLAG_USER_COPY, 0, "no copy: {r:?}");
            assert_ne!(r.event.flags & FLAG_STACK, 0, "{r:?}");
            let (header, stack) = r.copy.as_ref().expect("a copy");
            assert_eq!(header.len as usize, stack.len());
            assert!(
                header.len <= asked,
                "{} bytes copied of {asked}",
                header.len
            );
            let faulted = r.event.flags & FLAG_USER_COPY_FAULTED != 0;
            assert!(
                header.len == asked || faulted,
                "short copy ({} of {asked}) without a fault",
                header.len
            );
            assert!(
                header.ip < KERNEL_START && header.sp < KERNEL_START,
                "{header:x?}"
            );
            assert_eq!(header.sp % 8, 0, "sp {:#x} not 8-aligned", header.sp);
            assert_eq!(
                r.len,
                Event::SIZE
                    + 8 * (r.kernel.len() + r.user.len())
                    + UserCopyHeader::SIZE
                    + stack.len(),
                "only the bytes copied are sent"
            );
            (r, header, &stack[..])
        })
        .collect()
}

#[test]
fn user_stack_copies_hold_the_locals_of_the_interrupted_function() {
    let fixture = magic_fixture();
    let spin = fixture.function("spin_with_magic");
    let records = sample(fixture.pid(), dwarf(8192), Duration::from_secs(1));
    assert!(records.len() >= 50, "only {} samples", records.len());
    let copies = copies_of(&records, 8192);
    let mut offsets = std::collections::BTreeSet::new();
    let mut in_spin = 0;
    for (r, header, stack) in &copies {
        assert!(
            r.user.is_empty(),
            "no frame-pointer walk was asked for: {r:?}"
        );
        if r.event.is_kernel() {
            continue;
        }
        assert_eq!(
            header.ip, r.event.ip,
            "user tick: the copy's ip is the tick's"
        );
        if !spin.contains(&header.ip) {
            continue;
        }
        in_spin += 1;
        let found = offsets_of(stack, MAGIC);
        assert_eq!(found.len(), 1, "the pattern once in the copy: {found:?}");
        // The words after it are the rest of the pattern.
        let at = found[0];
        assert_eq!(offsets_of(&stack[at..], MAGIC + 15), [15 * 8], "{r:?}");
        offsets.insert(at);
    }
    assert!(
        in_spin * 10 >= copies.len() * 8,
        "{in_spin} of {} samples in spin_with_magic",
        copies.len()
    );
    assert_eq!(
        offsets.len(),
        1,
        "the pattern is at one sp-relative offset in every sample: {offsets:?}"
    );
    let mean = records.iter().map(|r| r.len).sum::<usize>() / records.len();
    eprintln!(
        "dwarf,8192 on a shallow -O2 fixture: {} samples, mean record {mean} bytes, \
         pattern at sp+{}",
        records.len(),
        offsets.first().unwrap()
    );
}

#[test]
fn kernel_ticks_carry_the_user_registers_the_task_returns_to() {
    let fixture = Fixture::start("fp_syscalls");
    let read_chunk = fixture.function("read_chunk");
    let records = sample(fixture.pid(), dwarf(8192), Duration::from_secs(1));
    let copies = copies_of(&records, 8192);
    let kernel: Vec<_> = copies
        .iter()
        .filter(|(r, ..)| r.event.is_kernel())
        .collect();
    assert!(
        kernel.len() >= 25,
        "{} kernel ticks of {}",
        kernel.len(),
        records.len()
    );
    for (r, ..) in &kernel {
        assert!(!r.kernel.is_empty(), "the kernel stack comes too: {r:?}");
        assert_eq!(r.kernel[0], r.event.ip);
    }
    // The syscall is issued inline in read_chunk: the task resumes right after it. (A tick at
    // the very entry of the syscall may precede the saved user state.)
    let in_read_chunk = kernel
        .iter()
        .filter(|(_, header, _)| read_chunk.contains(&header.ip))
        .count();
    assert!(
        in_read_chunk * 10 >= kernel.len() * 9,
        "{in_read_chunk} of {} kernel ticks resume in read_chunk: {:x?}",
        kernel.len(),
        kernel.iter().take(5).map(|(_, h, _)| h).collect::<Vec<_>>()
    );
}

#[test]
fn the_largest_copy_stops_where_the_stack_ends_and_keeps_its_top() {
    let fixture = magic_fixture();
    let spin = fixture.function("spin_with_magic");
    let records = sample(fixture.pid(), dwarf(MAX_USER_COPY), Duration::from_secs(1));
    assert!(records.len() >= 50, "only {} samples", records.len());
    let copies = copies_of(&records, MAX_USER_COPY);
    let mut in_spin = 0;
    for (r, header, stack) in &copies {
        // The main thread's stack holds main, the C start-up and the environment: far less
        // than 64 KiB above spin_with_magic, then the end of the mapping.
        assert_ne!(r.event.flags & FLAG_USER_COPY_FAULTED, 0, "{header:x?}");
        assert!(stack.len() < MAX_USER_COPY as usize);
        if !r.event.is_kernel() && spin.contains(&header.ip) {
            in_spin += 1;
            assert_eq!(offsets_of(stack, MAGIC).len(), 1, "the top bytes are kept");
        }
    }
    assert!(in_spin >= 40, "{in_spin} samples in spin_with_magic");
    let mean = records.iter().map(|r| r.len).sum::<usize>() / records.len();
    eprintln!("dwarf,65528 on a shallow -O2 fixture: mean record {mean} bytes");
}

#[test]
fn frame_pointer_stacks_and_copies_come_together_when_both_are_asked_for() {
    let fixture = Fixture::start("fp_chain");
    let inner = fixture.function("inner");
    let both = Wants {
        flags: WANT_STACKS,
        user_copy_bytes: 4096,
        min_block_ns: 0,
    };
    let records = sample(fixture.pid(), both, Duration::from_millis(500));
    assert!(records.len() >= 25, "only {} samples", records.len());
    let copies = copies_of(&records, 4096);
    for (r, header, _) in &copies {
        assert!(!r.user.is_empty(), "fp frames as well: {r:?}");
        if !r.event.is_kernel() {
            assert_eq!(r.user[0], header.ip, "both start at the user ip");
        }
    }
    assert!(
        copies.iter().any(|(_, h, _)| inner.contains(&h.ip)),
        "ticks in inner"
    );
}

/// A user's target is sampled for target sessions only while the sampled thread runs with the
/// credentials its guard holds, read by the kernel program at the offsets found in the running
/// kernel's BTF: those it runs with pass; any other uid, gid or capability set keeps every
/// sample from target sessions (what a system-wide session still takes comes without
/// `FLAG_TARGET`) and reports the process once; a held guard passes nothing.
#[test]
fn a_guard_admits_only_the_credentials_checked() {
    let fixture = Fixture::start("fp_chain");
    let pid = fixture.pid();
    let status = sys::read_status(pid).expect("the fixture's status");
    let (u, g) = (status.uids, status.gids);
    let checked = Creds::new(
        [u.real, u.effective, u.saved, u.filesystem],
        [g.real, g.effective, g.saved, g.filesystem],
        status.cap_permitted.expect("CapPrm"),
    );
    let run = Duration::from_millis(600);
    let guarded = |guard: Guard| {
        let (records, changed) = sample_guarded(run, |sampler, period_ns| {
            // System-wide too: the fixture is sampled whatever the guard says, and the flag
            // tells who may count it.
            sampler.set_system_wide(period_ns, Wants::default())?;
            sampler.set_tracking(pid, Tracking::Leader, guard);
            sampler.set_target(target(period_ns, pid), Wants::default())
        });
        let mine: Vec<Record> = records
            .into_iter()
            .filter(|r| r.event.tgid == pid)
            .collect();
        assert!(mine.len() >= 50, "{guard:?}: only {} samples", mine.len());
        let for_targets = mine
            .iter()
            .filter(|r| r.event.flags & FLAG_TARGET != 0)
            .count();
        let reported: Vec<u32> = changed.iter().map(|&(tgid, _)| tgid).collect();
        (for_targets, mine.len(), reported)
    };

    let (for_targets, all, reported) = guarded(Guard::Creds(checked));
    assert_eq!(for_targets, all, "the credentials checked pass");
    assert!(reported.is_empty(), "{reported:?}");

    let mut other_euid = checked;
    other_euid.ids[4] ^= 1;
    let mut other_fsgid = checked;
    other_fsgid.ids[7] ^= 1;
    let mut other_caps = checked;
    other_caps.cap_permitted ^= 1 << 21;
    for other in [other_euid, other_fsgid, other_caps] {
        let (for_targets, _, reported) = guarded(Guard::Creds(other));
        assert_eq!(for_targets, 0, "{other:?} let samples through");
        assert_eq!(reported, [pid], "{other:?}");
    }
    let (for_targets, _, reported) = guarded(Guard::Held);
    assert_eq!((for_targets, reported.len()), (0, 0));
    let (for_targets, all, _) = guarded(Guard::Open);
    assert_eq!(for_targets, all);
}
