//! Parser for `/proc/kallsyms`: the kernel's symbol table, used to symbolise kernel-mode samples.
//!
//! The daemon reads the file (its I/O edge) and hands the bytes here; everything in this module is
//! a pure function over bytes so that it can be unit-tested and fuzzed without root. Each line is
//! `ADDRESS TYPE NAME`, followed by a tab and the module in brackets for module symbols (BPF
//! programs and ftrace trampolines are listed the same way, as `[bpf]` and `[__builtin__ftrace]`;
//! `→` stands for the tab below):
//!
//! ```text
//! ffffffff81000000 T _stext
//! ffffffff821f5f60 T schedule
//! ffffffffc0a01000 t ext4_fill_super→[ext4]
//! ```
//!
//! Only text (code) symbols are kept: `T`/`t` (global/local) and `W`/`w` (weak, usually code).
//! Absolute symbols (`A`/`a`) are skipped: they are constants or per-CPU offsets, not code
//! addresses, and would shadow real functions. Data, BSS and the rest are skipped too. When
//! `kptr_restrict` hides addresses from the reader every address reads as 0; that is detected and
//! reported by [`KernelSymbols::addresses_hidden`].

use std::collections::HashMap;

/// How far past the nearest preceding symbol an address may lie and still be attributed to it:
/// 1 MiB. No kernel function is that large, so an address further away is in a gap (data, the
/// space between the kernel image and the modules, an unlisted module) and attributing it to the
/// symbol before would be a lie.
pub const MAX_DISTANCE: u64 = 1 << 20;

/// Marks a symbol of the kernel image proper, in [`Entry::module`].
const NO_MODULE: u32 = u32::MAX;

/// One kept symbol; names and modules are ranges of the arena.
#[derive(Debug, Clone, Copy)]
struct Entry {
    addr: u64,
    name_off: u32,
    name_len: u32,
    /// Index in `KernelSymbols::modules`, or [`NO_MODULE`].
    module: u32,
    /// Sort key among symbols at the same address, lower is preferred: the type (T, t, W, w) in
    /// the high byte, then the number of leading underscores, as the kernel's own `kallsyms`
    /// script orders aliases.
    prio: u16,
}

/// Kernel text symbols sorted by address, for symbolising kernel-mode samples. Owned: names and
/// module names live in one `String` arena and each module name is stored once.
#[derive(Clone, Default)]
pub struct KernelSymbols {
    /// Sorted by (address, preference); aliases at one address are all kept.
    syms: Vec<Entry>,
    names: String,
    /// (offset, length) of each distinct module name in `names`.
    modules: Vec<(u32, u32)>,
    bad_lines: usize,
    addresses_hidden: bool,
}

/// A symbol found by [`KernelSymbols::lookup`], borrowing from the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KernelSymbol<'a> {
    /// The symbol name, e.g. `schedule`.
    pub name: &'a str,
    /// The module, without brackets (`ext4` for `[ext4]`); `None` for the kernel image.
    pub module: Option<&'a str>,
    /// The symbol's address, so that `addr - start` is the offset into it.
    pub start: u64,
}

impl std::fmt::Debug for KernelSymbols {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The arena is megabytes; show the shape, not the contents.
        f.debug_struct("KernelSymbols")
            .field("symbols", &self.syms.len())
            .field("modules", &self.modules.len())
            .field("arena_bytes", &self.names.len())
            .field("bad_lines", &self.bad_lines)
            .field("addresses_hidden", &self.addresses_hidden)
            .finish()
    }
}

/// Parse `/proc/kallsyms`. Tolerant: malformed lines are skipped and counted (see
/// [`KernelSymbols::bad_lines`]); empty lines are ignored.
pub fn parse_kallsyms(text: &[u8]) -> KernelSymbols {
    let mut out = KernelSymbols::default();
    let mut interned: HashMap<&[u8], u32> = HashMap::new();
    // Module symbols come in runs, so remember the last module and skip the hash most of the time.
    let mut last_module: Option<(&[u8], u32)> = None;
    let (mut zero, mut nonzero) = (0usize, 0usize);

    for line in text.split(|&b| b == b'\n') {
        if line.is_empty() {
            continue;
        }
        let Some(parsed) = parse_line(line) else {
            out.bad_lines += 1;
            continue;
        };
        if parsed.addr == 0 {
            zero += 1;
            continue;
        }
        nonzero += 1;
        let rank: u16 = match parsed.kind {
            b'T' => 0,
            b't' => 1,
            b'W' => 2,
            b'w' => 3,
            _ => continue,
        };
        let module = match parsed.module {
            None => NO_MODULE,
            Some(m) => match last_module {
                Some((last, idx)) if last == m => idx,
                _ => {
                    let idx = match interned.get(m) {
                        Some(&idx) => idx,
                        None => {
                            let Some(range) = push_name(&mut out.names, m) else {
                                out.bad_lines += 1;
                                continue;
                            };
                            let Ok(idx) = u32::try_from(out.modules.len()) else {
                                out.bad_lines += 1;
                                continue;
                            };
                            out.modules.push(range);
                            interned.insert(m, idx);
                            idx
                        }
                    };
                    last_module = Some((m, idx));
                    idx
                }
            },
        };
        let Some((name_off, name_len)) = push_name(&mut out.names, parsed.name) else {
            out.bad_lines += 1;
            continue;
        };
        let underscores = parsed.name.iter().take_while(|&&b| b == b'_').count();
        let underscores = u16::try_from(underscores.min(0xff)).unwrap_or(0xff);
        out.syms.push(Entry {
            addr: parsed.addr,
            name_off,
            name_len,
            module,
            prio: rank << 8 | underscores,
        });
    }
    // Stable: among equal (address, preference) the file order is kept, as the kernel does.
    out.syms.sort_by_key(|e| (e.addr, e.prio));
    out.syms.shrink_to_fit();
    out.names.shrink_to_fit();
    out.addresses_hidden = zero > 0 && nonzero == 0;
    out
}

impl KernelSymbols {
    /// The text symbol containing `addr`: the nearest one at or before it. `None` before the first
    /// symbol or more than [`MAX_DISTANCE`] past the nearest one. When several symbols share the
    /// address the preferred alias is returned: `T` over `t` over `W` over `w`, then fewer leading
    /// underscores, then file order. O(log n).
    pub fn lookup(&self, addr: u64) -> Option<KernelSymbol<'_>> {
        let after = self.syms.partition_point(|e| e.addr <= addr);
        let start = self.syms.get(after.checked_sub(1)?)?.addr;
        if addr.checked_sub(start)? > MAX_DISTANCE {
            return None;
        }
        let first = self.syms.partition_point(|e| e.addr < start);
        self.symbol(self.syms.get(first)?)
    }

    /// All kept symbols in lookup order (by address, preferred alias first), aliases included.
    pub fn iter(&self) -> impl Iterator<Item = KernelSymbol<'_>> + '_ {
        self.syms.iter().filter_map(|e| self.symbol(e))
    }

    /// Number of text symbols kept, aliases included.
    pub fn len(&self) -> usize {
        self.syms.len()
    }

    /// True when no text symbol was kept (empty input, or addresses hidden).
    pub fn is_empty(&self) -> bool {
        self.syms.is_empty()
    }

    /// Number of malformed lines skipped; nonzero means the input was not what the kernel prints.
    pub fn bad_lines(&self) -> usize {
        self.bad_lines
    }

    /// True when every address read as 0: `kptr_restrict` (or a missing `CAP_SYSLOG`) hides them
    /// from this reader; lookups are then useless and the daemon must say so.
    pub fn addresses_hidden(&self) -> bool {
        self.addresses_hidden
    }

    fn symbol(&self, e: &Entry) -> Option<KernelSymbol<'_>> {
        let module = match e.module {
            NO_MODULE => None,
            idx => {
                let &(off, len) = self.modules.get(usize::try_from(idx).ok()?)?;
                Some(self.arena(off, len)?)
            }
        };
        Some(KernelSymbol {
            name: self.arena(e.name_off, e.name_len)?,
            module,
            start: e.addr,
        })
    }

    fn arena(&self, off: u32, len: u32) -> Option<&str> {
        let off = usize::try_from(off).ok()?;
        let end = off.checked_add(usize::try_from(len).ok()?)?;
        self.names.get(off..end)
    }
}

/// One well-formed line, whatever its type.
struct Line<'a> {
    addr: u64,
    kind: u8,
    name: &'a [u8],
    module: Option<&'a [u8]>,
}

/// `ADDR TYPE NAME[\t[MODULE]]`, single spaces as the kernel prints them.
fn parse_line(line: &[u8]) -> Option<Line<'_>> {
    let mut parts = line.splitn(3, |&b| b == b' ');
    let addr = parts.next()?;
    let kind = parts.next()?;
    let rest = parts.next()?;
    if addr.is_empty() || !addr.iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
    let addr = u64::from_str_radix(std::str::from_utf8(addr).ok()?, 16).ok()?;
    let &[kind] = kind else { return None };
    if !kind.is_ascii_graphic() {
        return None;
    }
    let (name, module) = match rest.iter().position(|&b| b == b'\t') {
        None => (rest, None),
        Some(tab) => {
            let module = rest
                .get(tab + 1..)?
                .strip_prefix(b"[")?
                .strip_suffix(b"]")?;
            (rest.get(..tab)?, Some(module))
        }
    };
    if name.is_empty() || name.iter().any(|&b| b == b' ' || b == b'\t') || module == Some(b"") {
        return None;
    }
    Some(Line {
        addr,
        kind,
        name,
        module,
    })
}

/// Append `s` (lossy UTF-8) to the arena; `None` if the arena would outgrow `u32` offsets.
fn push_name(arena: &mut String, s: &[u8]) -> Option<(u32, u32)> {
    // Kernel names are ASCII: `from_utf8` is the fast path, the lossy conversion the fallback.
    let s = match std::str::from_utf8(s) {
        Ok(s) => std::borrow::Cow::Borrowed(s),
        Err(_) => String::from_utf8_lossy(s),
    };
    let off = u32::try_from(arena.len()).ok()?;
    let len = u32::try_from(s.len()).ok()?;
    off.checked_add(len)?;
    arena.push_str(&s);
    Some((off, len))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sym<'a>(name: &'a str, module: Option<&'a str>, start: u64) -> Option<KernelSymbol<'a>> {
        Some(KernelSymbol {
            name,
            module,
            start,
        })
    }

    #[test]
    fn real_kallsyms() {
        let text = std::fs::read("/proc/kallsyms").unwrap();
        let syms = parse_kallsyms(&text);
        assert_eq!(syms.bad_lines(), 0);
        if syms.addresses_hidden() {
            // Not root, or kptr_restrict=2: nothing to look up, but this must be detected.
            eprintln!("kallsyms addresses hidden from this reader; lookups not tested");
            assert!(syms.is_empty());
            return;
        }
        assert!(syms.len() > 10_000, "{syms:?}");
        for name in ["_stext", "schedule"] {
            let found = syms.iter().find(|s| s.name == name && s.module.is_none());
            let found = found.unwrap_or_else(|| panic!("{name} not found"));
            let hit = syms.lookup(found.start + 1).unwrap();
            assert_eq!(hit.start, found.start);
            // `_stext` has aliases at its address (`_text`, ...); any of them may be preferred.
            if name == "schedule" {
                assert_eq!(hit.name, "schedule");
            }
        }
        assert!(
            syms.iter()
                .zip(syms.iter().skip(1))
                .all(|(a, b)| a.start <= b.start)
        );
    }

    #[test]
    fn synthetic() {
        let text = b"\
            0000000000000000 A fixed_percpu_data\n\
            ffffffff81000000 T _text\n\
            ffffffff81000000 T _stext\n\
            ffffffff81000000 t __early_thing\n\
            ffffffff81000100 a absolute_thing\n\
            ffffffff81000200 W weak_fn\n\
            ffffffff81000200 T strong_fn\n\
            ffffffff81000300 w weaker\n\
            ffffffff81000300 W weak\n\
            ffffffff81000400 D some_data\n\
            ffffffff81000500 t local_fn\n\
            this is garbage\n\
            ffffffff81000600 T\n\
            zzzzffff81000700 T bad_hex\n\
            ffffffff81000800 TT two_letter_type\n\
            1ffffffff81000900 T overflow\n\
            ffffffff81000a00 T name with space\n\
            ffffffff81000b00 t mod_no_brackets\text4\n\
            \n\
            ffffffffc0a01000 t ext4_fill_super\t[ext4]\n\
            ffffffffc0a02000 T ext4_other\t[ext4]\n\
            ffffffffc0b00000 t xfs_thing\t[xfs]\n\
            ffffffffc0a03000 t late_ext4\t[ext4]\n\
            ffffffffc0c00000 t bpf_prog_6deef7357e7b4530_sd_fw_ingress\t[bpf]";
        let syms = parse_kallsyms(text);
        assert_eq!(syms.bad_lines(), 7, "{syms:?}");
        assert!(!syms.addresses_hidden());
        assert_eq!(syms.len(), 13);
        assert_eq!(syms.modules.len(), 3, "ext4 interned once");

        let cases: &[(u64, Option<KernelSymbol<'_>>)] = &[
            (0, None),
            (0xffff_ffff_80ff_ffff, None),
            // T over t, then fewer underscores, then file order.
            (
                0xffff_ffff_8100_0000,
                sym("_text", None, 0xffff_ffff_8100_0000),
            ),
            // The absolute symbol at +0x100 is skipped.
            (
                0xffff_ffff_8100_0150,
                sym("_text", None, 0xffff_ffff_8100_0000),
            ),
            (
                0xffff_ffff_8100_0200,
                sym("strong_fn", None, 0xffff_ffff_8100_0200),
            ),
            (
                0xffff_ffff_8100_0301,
                sym("weak", None, 0xffff_ffff_8100_0300),
            ),
            // The data symbol at +0x400 is skipped.
            (
                0xffff_ffff_8100_0450,
                sym("weak", None, 0xffff_ffff_8100_0300),
            ),
            (
                0xffff_ffff_8100_0500,
                sym("local_fn", None, 0xffff_ffff_8100_0500),
            ),
            (
                0xffff_ffff_8110_0500,
                sym("local_fn", None, 0xffff_ffff_8100_0500),
            ),
            (0xffff_ffff_8110_0501, None),
            (
                0xffff_ffff_c0a0_1010,
                sym("ext4_fill_super", Some("ext4"), 0xffff_ffff_c0a0_1000),
            ),
            (
                0xffff_ffff_c0a0_2fff,
                sym("ext4_other", Some("ext4"), 0xffff_ffff_c0a0_2000),
            ),
            // Out of file order, sorted anyway.
            (
                0xffff_ffff_c0a0_3000,
                sym("late_ext4", Some("ext4"), 0xffff_ffff_c0a0_3000),
            ),
            (
                0xffff_ffff_c0b0_0004,
                sym("xfs_thing", Some("xfs"), 0xffff_ffff_c0b0_0000),
            ),
            (
                0xffff_ffff_c0c0_0040,
                sym(
                    "bpf_prog_6deef7357e7b4530_sd_fw_ingress",
                    Some("bpf"),
                    0xffff_ffff_c0c0_0000,
                ),
            ),
            (
                0xffff_ffff_c0c0_0000 + MAX_DISTANCE,
                sym(
                    "bpf_prog_6deef7357e7b4530_sd_fw_ingress",
                    Some("bpf"),
                    0xffff_ffff_c0c0_0000,
                ),
            ),
            (0xffff_ffff_c0c0_0001 + MAX_DISTANCE, None),
            (u64::MAX, None),
        ];
        for (addr, want) in cases {
            assert_eq!(syms.lookup(*addr), *want, "{addr:#x}");
        }
        let names: Vec<_> = syms.iter().map(|s| s.name).take(5).collect();
        assert_eq!(
            names,
            ["_text", "_stext", "__early_thing", "strong_fn", "weak_fn"]
        );
    }

    #[test]
    fn hidden_addresses() {
        let text = b"0000000000000000 T _stext\n0000000000000000 t foo\t[ext4]\n\
            0000000000000000 A bar\n";
        let syms = parse_kallsyms(text);
        assert!(syms.addresses_hidden() && syms.is_empty());
        assert_eq!((syms.bad_lines(), syms.lookup(0x1000)), (0, None));
        // Some zero addresses among real ones (absolute per-CPU symbols) are not "hidden".
        let syms =
            parse_kallsyms(b"0000000000000000 A fixed_percpu_data\nffffffff81000000 T _stext\n");
        assert!(!syms.addresses_hidden());
        assert_eq!(syms.len(), 1);
    }

    #[test]
    fn empty_and_garbage_only() {
        for text in [
            b"".as_slice(),
            b"\n\n",
            b"\xff\xfe\n(\n ",
            b"ffffffff81000000 T \xff\n",
        ] {
            let syms = parse_kallsyms(text);
            assert!(!syms.addresses_hidden());
            assert_eq!(
                syms.lookup(0xffff_ffff_8100_0000).map(|s| s.name),
                syms.iter().next().map(|s| s.name)
            );
        }
        assert_eq!(parse_kallsyms(b"\xff\xfe\n(\n ").bad_lines(), 3);
        // A non-UTF-8 name is kept, lossily.
        let syms = parse_kallsyms(b"ffffffff81000000 T a\xffb\n");
        assert_eq!(
            syms.lookup(0xffff_ffff_8100_0000).map(|s| s.name),
            Some("a\u{fffd}b")
        );
    }

    /// Mutated real content never panics (a poor man's fuzzer, deterministic).
    #[test]
    fn no_panic_on_mutations() {
        let full = std::fs::read("/proc/kallsyms").unwrap();
        let seed = full.get(..64 * 1024).unwrap_or(&full);
        crate::mutations::for_each_mutation(seed, 0, 200, 32, 0x9e37_79b9_7f4a_7c15, |t, rng| {
            let _ = parse_kallsyms(t).lookup(rng);
        });
    }
}
