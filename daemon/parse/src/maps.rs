//! Parser for `/proc/PID/maps`: the memory mappings of a process.
//!
//! The daemon reads the file (its I/O edge) and hands the bytes here; everything in this module is
//! a pure function over bytes so that it can be unit-tested and fuzzed without root. Each line is
//! one mapping (VMA), and the kernel prints them sorted by address:
//!
//! ```text
//! 7fb38d107000-7fb38d25d000 r-xp 00026000 fe:00 326279                     /usr/lib/x86_64-linux-gnu/libc.so.6
//! 7fb38d2b6000-7fb38d2c3000 rw-p 00000000 00:00 0
//! ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]
//! ```
//!
//! Fields: `start-end` (hex, end exclusive), permissions (`r`/`w`/`x` or `-`, then `s` shared or
//! `p` private), file offset (hex), device `major:minor` (hex), inode (decimal), then spaces and
//! the optional name, which is the rest of the line. The name may contain spaces, need not be
//! UTF-8 and may end in ` (deleted)`. The kernel escapes only a newline in a name, as `\012`; since
//! it does not escape backslashes the escape cannot be undone reliably, so names are kept verbatim.
//!
//! Some anonymous memory is backed by an unlinked kernel-internal file and so is printed with a
//! path; those get dedicated [`MapPath`] variants rather than [`MapPath::File`], because there is
//! no on-disk file (and no ELF) behind them: `/anon_hugepage (deleted)` (`MAP_HUGETLB`),
//! `/dev/zero (deleted)` (`MAP_SHARED|MAP_ANONYMOUS`), `/SYSV0000002a (deleted)` (System V shared
//! memory) and `/memfd:NAME (deleted)` (`memfd_create`).
//!
//! A read of the file is not atomic: if the process changes its mappings while the kernel prints, a
//! line can come out torn. Bad lines are therefore skipped and counted, never fatal.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// One line of `/proc/PID/maps`: a mapping of `[start, end)` in the process's address space.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapEntry {
    /// First address of the mapping.
    pub start: u64,
    /// One past the last address of the mapping (exclusive).
    pub end: u64,
    /// Access permissions and sharing.
    pub perms: Perms,
    /// Offset in the backing file of `start`, in bytes (0 for anonymous memory).
    pub offset: u64,
    /// Major number of the device holding the backing file (0 when there is none).
    pub dev_major: u32,
    /// Minor number of the device holding the backing file (0 when there is none).
    pub dev_minor: u32,
    /// Inode of the backing file (0 when there is none).
    pub inode: u64,
    /// What the mapping is: a file, anonymous memory or a kernel pseudo-mapping.
    pub path: MapPath,
}

/// The permission column of a mapping, e.g. `r-xp`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Perms {
    /// `r`: readable.
    pub read: bool,
    /// `w`: writable.
    pub write: bool,
    /// `x`: executable; only executable mappings can hold sampled instruction pointers.
    pub exec: bool,
    /// `s` (shared) rather than `p` (private, copy-on-write).
    pub shared: bool,
}

/// What a mapping maps, decoded from the name column.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum MapPath {
    /// A file. `deleted` when the kernel appended ` (deleted)`: the path then names a file that no
    /// longer exists, though the daemon can still open it through `/proc/PID/map_files`. The path
    /// is the raw bytes (not necessarily UTF-8, may contain spaces) without the suffix. A file
    /// really named `x (deleted)` is indistinguishable from a deleted `x`; the kernel gives no way
    /// to tell.
    File {
        /// Absolute path as printed by the kernel (relative to the process's root).
        path: PathBuf,
        /// The kernel appended ` (deleted)`: the file has been unlinked.
        deleted: bool,
    },
    /// No name at all: private anonymous memory. When executable, typically a JIT's code zone.
    Anonymous,
    /// Named anonymous memory, `[anon:NAME]` or `[anon_shmem:NAME]` (set with
    /// `prctl(PR_SET_VMA_ANON_NAME)`; ART names its JIT cache this way). The shmem form is the
    /// shared one, visible as [`Perms::shared`].
    AnonNamed(String),
    /// `/anon_hugepage (deleted)`: anonymous memory from `MAP_HUGETLB` (hugetlbfs-backed, so it
    /// has a nonzero inode). HotSpot's code cache lives here with `-XX:+UseLargePages`.
    HugetlbAnon,
    /// `/dev/zero (deleted)`: shared anonymous memory (`MAP_SHARED|MAP_ANONYMOUS`, or a shared
    /// mapping of `/dev/zero`), which the kernel backs with an internal shmem file.
    SharedAnonymous,
    /// `/SYSVkkkkkkkk (deleted)`: a System V shared memory segment, with its key.
    SysvShm {
        /// The IPC key (0 for `IPC_PRIVATE`).
        key: u32,
    },
    /// `/memfd:NAME (deleted)`: a `memfd_create` file. Usually JIT code double-mapped for W^X
    /// (.NET names it `doublemapper`), but can also be an executable run from memory (runc).
    Memfd {
        /// The name given to `memfd_create` (lossy UTF-8).
        name: String,
    },
    /// `[heap]`: the `brk` heap.
    Heap,
    /// `[stack]`, or `[stack:TID]` on kernels before 4.5 which named thread stacks.
    Stack {
        /// The thread whose stack this is, for `[stack:TID]`; `None` for the main `[stack]`.
        tid: Option<u32>,
    },
    /// `[vdso]`: the kernel's virtual shared object, an ELF image the daemon symbolises apart.
    Vdso,
    /// `[vsyscall]`: the legacy fixed-address syscall page at `ffffffffff600000`.
    Vsyscall,
    /// Any other name that is not an absolute path: other bracketed names, kept without the
    /// brackets (`vvar`, `vvar_vclock`, `uprobes`, ...), and names of internal inodes such as
    /// `anon_inode:[perf_event]`, kept whole. Lossy UTF-8.
    Pseudo(String),
}

impl MapEntry {
    /// True for executable memory that no on-disk file backs, i.e. where a JIT puts its code and
    /// which must be symbolised from the VM rather than from an ELF file: [`MapPath::Anonymous`],
    /// [`MapPath::AnonNamed`], [`MapPath::HugetlbAnon`], [`MapPath::SharedAnonymous`],
    /// [`MapPath::SysvShm`] and [`MapPath::Memfd`]. A memfd may still hold an ELF image (runc);
    /// callers that care can check for the ELF magic through `/proc/PID/map_files`.
    pub fn is_anonymous_exec(&self) -> bool {
        self.perms.exec
            && matches!(
                self.path,
                MapPath::Anonymous
                    | MapPath::AnonNamed(_)
                    | MapPath::HugetlbAnon
                    | MapPath::SharedAnonymous
                    | MapPath::SysvShm { .. }
                    | MapPath::Memfd { .. }
            )
    }

    /// True when `addr` lies in `[start, end)`.
    pub fn contains(&self, addr: u64) -> bool {
        self.start <= addr && addr < self.end
    }

    /// Size of the mapping in bytes (0 for a hand-built entry with `end <= start`).
    pub fn len(&self) -> u64 {
        self.end.saturating_sub(self.start)
    }

    /// True when the mapping is empty; never the case for a parsed entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The result of [`parse_maps`]: the good entries plus an account of the bad lines.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ParsedMaps {
    /// The entries in file order, which the kernel sorts by address.
    pub entries: Vec<MapEntry>,
    /// How many non-empty lines could not be parsed and were skipped.
    pub bad_lines: usize,
    /// The first parse error with its 1-based line number, for a diagnostic.
    pub first_error: Option<String>,
}

impl ParsedMaps {
    /// The entry containing `addr`, found by binary search, so it relies on the kernel's address
    /// order (a torn read of a changing process may break it, and then this may miss).
    pub fn find(&self, addr: u64) -> Option<&MapEntry> {
        let idx = self.entries.partition_point(|e| e.start <= addr);
        let entry = self.entries.get(idx.checked_sub(1)?)?;
        entry.contains(addr).then_some(entry)
    }
}

/// Why one line of `/proc/PID/maps` could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MapLineError {
    /// The line ended before this field.
    #[error("missing field {0}")]
    MissingField(&'static str),
    /// This field is malformed (not hex or decimal as expected, overflows, wrong shape).
    #[error("bad field {field}: {value:?}")]
    BadField {
        /// Which field.
        field: &'static str,
        /// Its text, lossy and truncated.
        value: String,
    },
    /// `start` is not below `end`.
    #[error("empty or inverted range {start:#x}-{end:#x}")]
    BadRange {
        /// The parsed start.
        start: u64,
        /// The parsed end.
        end: u64,
    },
}

/// Parse a whole `/proc/PID/maps` file. Empty lines are ignored; bad lines are skipped and
/// counted, never fatal, since a line can be torn if the process changes its mappings while the
/// kernel prints.
pub fn parse_maps(text: &[u8]) -> ParsedMaps {
    let mut out = ParsedMaps::default();
    for (idx, line) in text.split(|&b| b == b'\n').enumerate() {
        if line.is_empty() {
            continue;
        }
        match parse_map_line(line) {
            Ok(entry) => out.entries.push(entry),
            Err(err) => {
                out.bad_lines += 1;
                if out.first_error.is_none() {
                    out.first_error = Some(format!("line {}: {err}", idx + 1));
                }
            }
        }
    }
    out
}

/// Parse one line of `/proc/PID/maps` (without its newline). Exposed for callers that stream the
/// file and for fuzzing.
pub fn parse_map_line(line: &[u8]) -> Result<MapEntry, MapLineError> {
    let mut rest = line;
    let range = next_field(&mut rest).ok_or(MapLineError::MissingField("address range"))?;
    let perms = next_field(&mut rest).ok_or(MapLineError::MissingField("perms"))?;
    let offset = next_field(&mut rest).ok_or(MapLineError::MissingField("offset"))?;
    let dev = next_field(&mut rest).ok_or(MapLineError::MissingField("device"))?;
    let inode = next_field(&mut rest).ok_or(MapLineError::MissingField("inode"))?;
    let name = trim_leading_spaces(rest);

    let (start, end) = split_once(range, b'-').ok_or_else(|| bad("address range", range))?;
    let start = parse_hex(start).ok_or_else(|| bad("start", start))?;
    let end = parse_hex(end).ok_or_else(|| bad("end", end))?;
    if start >= end {
        return Err(MapLineError::BadRange { start, end });
    }
    let perms = parse_perms(perms).ok_or_else(|| bad("perms", perms))?;
    let offset = parse_hex(offset).ok_or_else(|| bad("offset", offset))?;
    let (major, minor) = split_once(dev, b':').ok_or_else(|| bad("device", dev))?;
    let dev_major = parse_hex(major)
        .and_then(|v| u32::try_from(v).ok())
        .ok_or_else(|| bad("device major", major))?;
    let dev_minor = parse_hex(minor)
        .and_then(|v| u32::try_from(v).ok())
        .ok_or_else(|| bad("device minor", minor))?;
    let inode = parse_dec(inode).ok_or_else(|| bad("inode", inode))?;

    Ok(MapEntry {
        start,
        end,
        perms,
        offset,
        dev_major,
        dev_minor,
        inode,
        path: classify(name),
    })
}

/// Decode the name column (already stripped of its leading padding).
fn classify(name: &[u8]) -> MapPath {
    if name.is_empty() {
        return MapPath::Anonymous;
    }
    if let Some(inner) = name.strip_prefix(b"[").and_then(|n| n.strip_suffix(b"]")) {
        return classify_bracketed(inner);
    }
    let (base, deleted) = match name.strip_suffix(b" (deleted)") {
        Some(base) => (base, true),
        None => (name, false),
    };
    if deleted {
        if base == b"/anon_hugepage" {
            return MapPath::HugetlbAnon;
        }
        if base == b"/dev/zero" {
            return MapPath::SharedAnonymous;
        }
        if let Some(memfd) = base.strip_prefix(b"/memfd:") {
            return MapPath::Memfd { name: lossy(memfd) };
        }
        if let Some(key) = base.strip_prefix(b"/SYSV")
            && key.len() == 8
            && let Some(key) = parse_hex(key).and_then(|k| u32::try_from(k).ok())
        {
            return MapPath::SysvShm { key };
        }
    }
    if base.starts_with(b"/") {
        MapPath::File {
            path: PathBuf::from(OsStr::from_bytes(base)),
            deleted,
        }
    } else {
        MapPath::Pseudo(lossy(name))
    }
}

/// Decode a `[...]` name, given without its brackets.
fn classify_bracketed(inner: &[u8]) -> MapPath {
    match inner {
        b"heap" => return MapPath::Heap,
        b"stack" => return MapPath::Stack { tid: None },
        b"vdso" => return MapPath::Vdso,
        b"vsyscall" => return MapPath::Vsyscall,
        _ => {}
    }
    if let Some(tid) = inner.strip_prefix(b"stack:")
        && let Some(tid) = parse_dec(tid).and_then(|t| u32::try_from(t).ok())
    {
        return MapPath::Stack { tid: Some(tid) };
    }
    if let Some(anon) = inner
        .strip_prefix(b"anon:")
        .or_else(|| inner.strip_prefix(b"anon_shmem:"))
    {
        return MapPath::AnonNamed(lossy(anon));
    }
    MapPath::Pseudo(lossy(inner))
}

/// Take the next space-separated field from `rest`, skipping leading spaces.
fn next_field<'a>(rest: &mut &'a [u8]) -> Option<&'a [u8]> {
    let s = trim_leading_spaces(rest);
    if s.is_empty() {
        return None;
    }
    let end = s.iter().position(|&b| b == b' ').unwrap_or(s.len());
    let (field, tail) = s.split_at(end);
    *rest = tail;
    Some(field)
}

fn trim_leading_spaces(s: &[u8]) -> &[u8] {
    let n = s.iter().take_while(|&&b| b == b' ').count();
    s.get(n..).unwrap_or_default()
}

fn split_once(s: &[u8], sep: u8) -> Option<(&[u8], &[u8])> {
    let at = s.iter().position(|&b| b == sep)?;
    Some((s.get(..at)?, s.get(at + 1..)?))
}

/// Hex digits only (no sign, no `0x`), checked for overflow.
fn parse_hex(s: &[u8]) -> Option<u64> {
    if s.is_empty() || !s.iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
    u64::from_str_radix(std::str::from_utf8(s).ok()?, 16).ok()
}

/// Decimal digits only (no sign), checked for overflow.
fn parse_dec(s: &[u8]) -> Option<u64> {
    if s.is_empty() || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(s).ok()?.parse().ok()
}

fn parse_perms(s: &[u8]) -> Option<Perms> {
    let &[r, w, x, p] = s else { return None };
    let flag = |b: u8, set: u8| match b {
        b'-' => Some(false),
        b if b == set => Some(true),
        _ => None,
    };
    Some(Perms {
        read: flag(r, b'r')?,
        write: flag(w, b'w')?,
        exec: flag(x, b'x')?,
        shared: match p {
            b's' => true,
            b'p' => false,
            _ => return None,
        },
    })
}

fn lossy(s: &[u8]) -> String {
    String::from_utf8_lossy(s).into_owned()
}

/// A [`MapLineError::BadField`] with the value shortened so garbage input cannot bloat messages.
fn bad(field: &'static str, value: &[u8]) -> MapLineError {
    MapLineError::BadField {
        field,
        value: String::from_utf8_lossy(value.get(..40).unwrap_or(value)).into_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, deleted: bool) -> MapPath {
        MapPath::File {
            path: PathBuf::from(path),
            deleted,
        }
    }

    #[test]
    fn real_self_maps() {
        let text = std::fs::read("/proc/self/maps").unwrap();
        let maps = parse_maps(&text);
        assert_eq!(maps.bad_lines, 0, "{:?}", maps.first_error);
        assert!(maps.entries.len() > 5);
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        assert!(
            maps.entries
                .iter()
                .any(|e| e.perms.exec && e.path == file(exe.to_str().unwrap(), false)),
            "no exec mapping of {exe:?}"
        );
        let vdso = maps.entries.iter().find(|e| e.path == MapPath::Vdso);
        assert!(vdso.is_some_and(|v| v.perms.exec && !v.is_anonymous_exec()));
        assert!(maps.entries.windows(2).all(|w| w[0].end <= w[1].start));
        // A function of this very binary is found in an executable mapping of it.
        let here = real_self_maps as fn() as usize as u64;
        let hit = maps.find(here).unwrap();
        assert!(hit.perms.exec);
        assert!(matches!(&hit.path, MapPath::File { path, .. } if path == &exe));
    }

    /// (line, perms); the expected paths are in `expected_paths`, in the same order.
    const GOOD: &[(&[u8], &str)] = &[
        (
            b"7f0000000000-7f0000001000 r--p 00000000 fe:00 12 /usr/lib/libfoo.so (deleted)",
            "r--p",
        ),
        (
            b"7f0000000000-7f0000001000 r-xp 00001000 fe:00 12    /opt/my app/lib x.so",
            "r-xp",
        ),
        (
            b"7f0000000000-7f0000001000 r--p 00000000 fe:00 12 /tmp/\xff\xfe.so",
            "r--p",
        ),
        (
            b"7ffd0000000-7ffd0002000 r-xp 00000000 00:00 0                          [vdso]",
            "r-xp",
        ),
        (
            b"7ffd0000000-7ffd0004000 r--p 00000000 00:00 0 [vvar]",
            "r--p",
        ),
        (
            b"7ffd0000000-7ffd0002000 r--p 00000000 00:00 0 [vvar_vclock]",
            "r--p",
        ),
        (
            b"ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]",
            "--xp",
        ),
        (
            b"555dce333000-555dce354000 rw-p 00000000 00:00 0                          [heap]",
            "rw-p",
        ),
        (
            b"7ffe05936000-7ffe05957000 rw-p 00000000 00:00 0                          [stack]",
            "rw-p",
        ),
        (
            b"7ffe05936000-7ffe05957000 rw-p 00000000 00:00 0 [stack:4242]",
            "rw-p",
        ),
        (b"7ffa76a15000-7ffa76a17000 rwxp 00000000 00:00 0 ", "rwxp"),
        (b"7ffa76a15000-7ffa76a17000 r-xp 00000000 00:00 0", "r-xp"),
        (
            b"7000000000-7000100000 r-xp 00000000 00:00 0 [anon:dalvik-jit-code-cache]",
            "r-xp",
        ),
        (
            b"7000000000-7000100000 rw-s 00000000 00:01 9 [anon_shmem:my shm]",
            "rw-s",
        ),
        (
            b"7f4000000000-7f4000200000 rwxp 00000000 00:10 34567 /anon_hugepage (deleted)",
            "rwxp",
        ),
        (
            b"7ffa76a17000-7ffa76a18000 r-xs 00000000 00:01 1046 /memfd:doublemapper (deleted)",
            "r-xs",
        ),
        (
            b"7ffa76a0f000-7ffa76a11000 rw-s 00000000 00:01 1048 /dev/zero (deleted)",
            "rw-s",
        ),
        (
            b"7ffa76829000-7ffa7682a000 rw-s 00000000 00:01 0 /SYSV0000002a (deleted)",
            "rw-s",
        ),
        (
            b"7ffa76829000-7ffa7682a000 rw-s 00000000 00:0f 77 anon_inode:[perf_event]",
            "rw-s",
        ),
        (
            b"7ffa76829000-7ffa7682a000 r--p 00000000 fe:00 7 /tmp/new\\012line",
            "r--p",
        ),
        (
            b"7ffa76829000-7ffa7682a000 r--p 00000000 00:00 0 [uprobes]",
            "r--p",
        ),
    ];

    fn expected_paths() -> Vec<(MapPath, bool)> {
        vec![
            (file("/usr/lib/libfoo.so", true), false),
            (file("/opt/my app/lib x.so", false), false),
            (
                MapPath::File {
                    path: PathBuf::from(OsStr::from_bytes(b"/tmp/\xff\xfe.so")),
                    deleted: false,
                },
                false,
            ),
            (MapPath::Vdso, false),
            (MapPath::Pseudo("vvar".into()), false),
            (MapPath::Pseudo("vvar_vclock".into()), false),
            (MapPath::Vsyscall, false),
            (MapPath::Heap, false),
            (MapPath::Stack { tid: None }, false),
            (MapPath::Stack { tid: Some(4242) }, false),
            (MapPath::Anonymous, true),
            (MapPath::Anonymous, true),
            (MapPath::AnonNamed("dalvik-jit-code-cache".into()), true),
            (MapPath::AnonNamed("my shm".into()), false),
            (MapPath::HugetlbAnon, true),
            (
                MapPath::Memfd {
                    name: "doublemapper".into(),
                },
                true,
            ),
            (MapPath::SharedAnonymous, false),
            (MapPath::SysvShm { key: 0x2a }, false),
            (MapPath::Pseudo("anon_inode:[perf_event]".into()), false),
            (file("/tmp/new\\012line", false), false),
            (MapPath::Pseudo("uprobes".into()), false),
        ]
    }

    #[test]
    fn good_lines_table() {
        let want = expected_paths();
        assert_eq!(want.len(), GOOD.len());
        for ((line, perms), (path, anon_exec)) in GOOD.iter().zip(want) {
            let shown = String::from_utf8_lossy(line);
            let e = parse_map_line(line).unwrap_or_else(|err| panic!("{shown}: {err}"));
            assert_eq!(e.path, path, "{shown}");
            assert_eq!(e.is_anonymous_exec(), anon_exec, "{shown}");
            let p = perms.as_bytes();
            assert_eq!(
                (e.perms.read, e.perms.write, e.perms.exec, e.perms.shared),
                (p[0] == b'r', p[1] == b'w', p[2] == b'x', p[3] == b's'),
                "{shown}"
            );
        }
    }

    #[test]
    fn numeric_fields() {
        let e = parse_map_line(
            b"7f0000000000-7f0000003000 r-xp 0001a000 103:1f 9876543210 /usr/lib/x.so",
        )
        .unwrap();
        assert_eq!(
            (e.start, e.end, e.len()),
            (0x7f00_0000_0000, 0x7f00_0000_3000, 0x3000)
        );
        assert_eq!(
            (e.offset, e.dev_major, e.dev_minor, e.inode),
            (0x1a000, 0x103, 0x1f, 9_876_543_210)
        );
        assert!(e.contains(e.start) && e.contains(e.end - 1) && !e.contains(e.end));
        let v =
            parse_map_line(b"ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0 [vsyscall]")
                .unwrap();
        assert_eq!(v.start, 0xffff_ffff_ff60_0000);
        assert!(!v.perms.read && v.perms.exec);
    }

    #[test]
    fn whole_file_with_bad_lines_and_no_trailing_newline() {
        let text: &[u8] = b"garbage\n\
            1000-2000 r-xp 00000000 fe:00 12 /bin/a\n\
            \n\
            3000-2000 r-xp 00000000 fe:00 12 /bin/inverted\n\
            1ffffffffffffffff-2ffffffffffffffff r-xp 00000000 fe:00 12 /bin/overflow\n\
            4000-5000 rwzp 00000000 fe:00 12 /bin/badperms\n\
            6000-7000 r-xp 00000000 fe:00\n\
            8000-9000 r-xp 0000 fe:00 +12 /bin/signed\n\
            a000-b000 r-xp 00000000 fe:00 12 /bin/\xff last";
        let maps = parse_maps(text);
        assert_eq!(maps.bad_lines, 6);
        assert_eq!(
            maps.first_error.as_deref(),
            Some("line 1: missing field perms")
        );
        assert_eq!(maps.entries.len(), 2);
        assert_eq!(maps.entries[0].path, file("/bin/a", false));
        let last = &maps.entries[1];
        assert!(matches!(&last.path, MapPath::File { path, deleted: false }
            if path.as_os_str().as_bytes() == b"/bin/\xff last"));
        assert_eq!(maps.find(0x1800).map(|e| e.start), Some(0x1000));
        assert_eq!(maps.find(0x2000), None);
        assert_eq!(maps.find(0xa000).map(|e| e.start), Some(0xa000));
        assert_eq!(maps.find(0), None);
    }

    #[test]
    fn bad_lines_table() {
        let cases: &[(&[u8], &str)] = &[
            (
                b"3000-2000 r-xp 00000000 fe:00 12 /x",
                "empty or inverted range 0x3000-0x2000",
            ),
            (
                b"2000-2000 r-xp 00000000 fe:00 12 /x",
                "empty or inverted range 0x2000-0x2000",
            ),
            (
                b"10000000000000000-20000000000000000 r-xp 0 fe:00 1",
                "bad field start: \"10000000000000000\"",
            ),
            (b"1000-2000 r-xp 00000000 fe:00", "missing field inode"),
            (
                b"1000 r-xp 00000000 fe:00 1",
                "bad field address range: \"1000\"",
            ),
            (
                b"1000-2000 r-x 00000000 fe:00 1",
                "bad field perms: \"r-x\"",
            ),
            (b"1000-2000 r-xp 0x10 fe:00 1", "bad field offset: \"0x10\""),
            (b"1000-2000 r-xp 0 fe00 1", "bad field device: \"fe00\""),
            (
                b"1000-2000 r-xp 0 100000000:0 1",
                "bad field device major: \"100000000\"",
            ),
            (b"1000-2000 r-xp 0 fe:00 1a", "bad field inode: \"1a\""),
            (
                b"1000-2000 r-xp 0 fe:00 99999999999999999999",
                "bad field inode: \"99999999999999999999\"",
            ),
            (b"+1000-2000 r-xp 0 fe:00 1", "bad field start: \"+1000\""),
        ];
        for (line, msg) in cases {
            let err = parse_map_line(line).unwrap_err();
            assert_eq!(err.to_string(), *msg, "{}", String::from_utf8_lossy(line));
        }
    }

    #[test]
    fn empty_and_blank_input() {
        assert_eq!(parse_maps(b""), ParsedMaps::default());
        assert_eq!(parse_maps(b"\n\n"), ParsedMaps::default());
        let spaces = parse_maps(b"   \n");
        assert_eq!((spaces.entries.len(), spaces.bad_lines), (0, 1));
    }

    #[test]
    fn unusual_stack_names_are_pseudo() {
        let e = parse_map_line(b"1000-2000 rw-p 0 00:00 0 [stack:x]").unwrap();
        assert_eq!(e.path, MapPath::Pseudo("stack:x".into()));
        // A memfd that is not deleted would be a real file named so.
        let e = parse_map_line(b"1000-2000 r--p 0 fe:00 5 /memfd:x").unwrap();
        assert_eq!(e.path, file("/memfd:x", false));
        let e = parse_map_line(b"1000-2000 r--p 0 fe:00 5 /SYSVzz (deleted)").unwrap();
        assert_eq!(e.path, file("/SYSVzz", true));
    }

    /// Mutated real lines never panic (a poor man's fuzzer, deterministic).
    #[test]
    fn no_panic_on_mutations() {
        let seed = std::fs::read("/proc/self/maps").unwrap();
        crate::mutations::for_each_mutation(&seed, 0, 2000, 8, 0x2545_f491_4f6c_dd1d, |t, _| {
            let _ = parse_maps(t);
        });
    }
}
