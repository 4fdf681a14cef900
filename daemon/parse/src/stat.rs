//! Parsers for `/proc/PID/stat`, `/proc/PID/status` and the `cpu` line of `/proc/stat`.
//!
//! The daemon reads the files (its I/O edge) and hands the bytes here; everything in this module
//! is a pure function over bytes so that it can be unit-tested and fuzzed without root.
//!
//! `/proc/PID/stat` is one line of space-separated fields, the second of which, the command name
//! in parentheses, may itself contain spaces and parentheses; it is therefore taken from the first
//! `(` to the *last* `)`:
//!
//! ```text
//! 8383 (cat) R 8380 8380 7556 0 -1 4194304 98 0 0 0 0 0 0 0 20 0 1 0 53809 3133440 382 ...
//! ```
//!
//! `/proc/PID/status` is `Key:\tvalue` lines (tab-separated, shown here with `→` for tabs), of
//! which the name and the real, effective, saved and filesystem ids are read:
//!
//! ```text
//! Name:→cat
//! Uid:→1000→1000→1000→1000
//! Gid:→1000→1000→1000→1000
//! ```
//!
//! `/proc/stat` starts with the system-wide CPU times, in clock ticks (`USER_HZ`):
//!
//! ```text
//! cpu  39575 0 3843 63056 356 0 50 782 0 0
//! ```

const STAT: &str = "/proc/PID/stat";
const STATUS: &str = "/proc/PID/status";
const PROC_STAT: &str = "/proc/stat";

/// `PF_EXITING` in [`ProcStat::flags`] (include/linux/sched.h): the task is in `do_exit`. Its
/// value has not changed since Linux 2.6.
pub const PF_EXITING: u32 = 0x4;

/// The fields of `/proc/PID/stat` the daemon uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcStat {
    /// Field 1: the process (or, under `/proc/PID/task/TID`, thread) id.
    pub pid: u32,
    /// Field 2: the command name, without the parentheses, lossy UTF-8 (truncated by the kernel to
    /// 15 bytes for user tasks).
    pub comm: String,
    /// Field 3: the state letter (`R` running, `S` sleeping, `D` disk sleep, `Z` zombie, ...).
    pub state: char,
    /// Field 4: the parent's pid.
    pub ppid: u32,
    /// Field 9: the task's flags (`PF_*`), of which [`PF_EXITING`] is read.
    pub flags: u32,
    /// Field 14: time spent in user mode, in clock ticks.
    pub utime_ticks: u64,
    /// Field 15: time spent in kernel mode, in clock ticks.
    pub stime_ticks: u64,
    /// Field 20: the threads of the process, the exited leader included while others run (the
    /// count of the thread group's tasks not yet released).
    pub num_threads: u32,
    /// Field 22 (`starttime`): when the process started, in clock ticks after boot. With the pid it
    /// identifies a process across pid reuse.
    pub start_time_ticks: u64,
}

impl ProcStat {
    /// CPU time consumed so far, user plus kernel, in clock ticks.
    pub fn cpu_ticks(&self) -> u64 {
        self.utime_ticks.saturating_add(self.stime_ticks)
    }

    /// True once the task has begun to exit ([`PF_EXITING`], set first thing in `do_exit`),
    /// even while it still runs its exit path.
    pub fn is_exiting(&self) -> bool {
        self.flags & PF_EXITING != 0
    }

    /// True when the process has exited and only awaits reaping (`Z`) or is dead (`X`, or `x` on
    /// 2.6.33–3.13 kernels): there is nothing left to sample.
    pub fn is_zombie(&self) -> bool {
        matches!(self.state, 'Z' | 'X' | 'x')
    }
}

/// The fields of `/proc/PID/status` the daemon uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcStatus {
    /// The `Name:` value as printed: the kernel escapes `\n`, `\t` and `\\` in it. Lossy UTF-8.
    pub name: String,
    /// The `Tgid:` line: the process a thread belongs to (equal to the pid for a process's
    /// main thread). `None` if the line is missing or malformed.
    pub tgid: Option<u32>,
    /// The last value of the `NSpid:` line: the pid as the process's own (innermost) pid
    /// namespace sees it, which is what a containerised runtime names its perf map after.
    /// `None` if the line is missing (kernels before 4.1) or malformed.
    pub nspid: Option<u32>,
    /// The `Uid:` line.
    pub uids: Ids,
    /// The `Gid:` line.
    pub gids: Ids,
    /// The `CapPrm:` line: the capabilities the process may use, a bit each. `None` if the
    /// line is missing or malformed.
    pub cap_permitted: Option<u64>,
}

/// The four ids of a `Uid:` or `Gid:` line, in the kernel's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Ids {
    /// Real id.
    pub real: u32,
    /// Effective id, the one used for most permission checks.
    pub effective: u32,
    /// Saved set-id.
    pub saved: u32,
    /// Filesystem id, used for file access checks.
    pub filesystem: u32,
}

/// System-wide CPU time from the first line of `/proc/stat`, in clock ticks since boot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct CpuTimes {
    /// `user + nice + system + irq + softirq + steal` (guest time is already counted in user and
    /// guest_nice in nice, so they are not added again).
    pub busy_ticks: u64,
    /// `idle + iowait`.
    pub idle_ticks: u64,
    /// `steal` (also in `busy_ticks`): time a hypervisor ran something else while a virtual
    /// CPU wanted to run. Timer-driven sampling (cpu-clock) is less exact while it is high.
    pub steal_ticks: u64,
}

impl CpuTimes {
    /// `busy_ticks + idle_ticks`: the denominator for a utilisation between two readings.
    pub fn total_ticks(&self) -> u64 {
        self.busy_ticks.saturating_add(self.idle_ticks)
    }

    /// `busy_ticks - steal_ticks`: time the CPUs ran something (user, nice, system, irq,
    /// softirq). Stolen time is not work: nothing ran, and cpu-clock took no sample.
    pub fn work_ticks(&self) -> u64 {
        self.busy_ticks.saturating_sub(self.steal_ticks)
    }

    /// The share of CPU time stolen between `earlier` and this reading, in percent (0 when no
    /// time passed).
    pub fn steal_percent_since(&self, earlier: &CpuTimes) -> f64 {
        let total = self.total_ticks().saturating_sub(earlier.total_ticks());
        let steal = self.steal_ticks.saturating_sub(earlier.steal_ticks);
        if total == 0 {
            0.0
        } else {
            100.0 * steal as f64 / total as f64
        }
    }
}

/// Why a `/proc` file could not be parsed; the message names the file and the field or line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProcParseError {
    /// The field or line is absent (truncated content, or not the expected file).
    #[error("{file}: missing {field}")]
    Missing {
        /// Which file, e.g. `/proc/PID/stat`.
        file: &'static str,
        /// Which field or line, e.g. `field 22 (starttime)`.
        field: &'static str,
    },
    /// The field is present but malformed (not a number, overflowing, not a state letter).
    #[error("{file}: invalid {field}: {value:?}")]
    Invalid {
        /// Which file, e.g. `/proc/PID/stat`.
        file: &'static str,
        /// Which field, e.g. `field 4 (ppid)`.
        field: &'static str,
        /// The offending text, lossy and truncated.
        value: String,
    },
}

/// Parse `/proc/PID/stat` (or `/proc/PID/task/TID/stat`).
pub fn parse_stat(text: &[u8]) -> Result<ProcStat, ProcParseError> {
    let missing = |field| ProcParseError::Missing { file: STAT, field };
    let open = text
        .iter()
        .position(|&b| b == b'(')
        .ok_or(missing("field 2 (comm) '('"))?;
    let close = text
        .iter()
        .rposition(|&b| b == b')')
        .filter(|&close| close > open)
        .ok_or(missing("field 2 (comm) ')'"))?;
    let pid_text = text.get(..open).unwrap_or_default().trim_ascii();
    let pid = parse_num(pid_text, STAT, "field 1 (pid)")?;
    let comm = String::from_utf8_lossy(text.get(open + 1..close).unwrap_or_default()).into_owned();

    // Fields 3.. follow the comm; `fields[i]` is field `i + 3`.
    let rest = text.get(close + 1..).unwrap_or_default();
    let fields: Vec<&[u8]> = rest
        .split(u8::is_ascii_whitespace)
        .filter(|f| !f.is_empty())
        .take(20)
        .collect();
    let field = |n: usize, name: &'static str| fields.get(n - 3).copied().ok_or(missing(name));

    let state_text = field(3, "field 3 (state)")?;
    let state = match state_text {
        &[b] if b.is_ascii_alphabetic() => char::from(b),
        _ => return Err(invalid(STAT, "field 3 (state)", state_text)),
    };
    const PPID: &str = "field 4 (ppid)";
    const FLAGS: &str = "field 9 (flags)";
    const UTIME: &str = "field 14 (utime)";
    const STIME: &str = "field 15 (stime)";
    const THREADS: &str = "field 20 (num_threads)";
    const START: &str = "field 22 (starttime)";
    Ok(ProcStat {
        pid,
        comm,
        state,
        ppid: parse_num(field(4, PPID)?, STAT, PPID)?,
        flags: parse_num(field(9, FLAGS)?, STAT, FLAGS)?,
        utime_ticks: parse_num(field(14, UTIME)?, STAT, UTIME)?,
        stime_ticks: parse_num(field(15, STIME)?, STAT, STIME)?,
        num_threads: parse_num(field(20, THREADS)?, STAT, THREADS)?,
        start_time_ticks: parse_num(field(22, START)?, STAT, START)?,
    })
}

/// Parse `/proc/PID/status` for the name and the `Uid:`/`Gid:` lines (the first of each counts).
pub fn parse_status(text: &[u8]) -> Result<ProcStatus, ProcParseError> {
    let (mut name, mut tgid, mut nspid, mut uids, mut gids) = (None, None, None, None, None);
    let mut cap_permitted = None;
    for line in text.split(|&b| b == b'\n') {
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let key = line.get(..colon).unwrap_or_default();
        let value = line.get(colon + 1..).unwrap_or_default();
        match key {
            b"Name" if name.is_none() => {
                // "Name:\t%s": only the tab is the separator; a name may start with spaces.
                let value = value.strip_prefix(b"\t").unwrap_or(value);
                name = Some(String::from_utf8_lossy(value).into_owned());
            }
            b"Tgid" if tgid.is_none() => {
                tgid = std::str::from_utf8(value)
                    .ok()
                    .and_then(|v| v.trim().parse().ok());
            }
            b"NSpid" if nspid.is_none() => {
                nspid = std::str::from_utf8(value)
                    .ok()
                    .and_then(|v| v.split_whitespace().last()?.parse().ok());
            }
            b"Uid" if uids.is_none() => uids = Some(parse_ids(value, "Uid line")?),
            b"Gid" if gids.is_none() => gids = Some(parse_ids(value, "Gid line")?),
            b"CapPrm" if cap_permitted.is_none() => {
                cap_permitted = std::str::from_utf8(value)
                    .ok()
                    .and_then(|v| u64::from_str_radix(v.trim(), 16).ok());
            }
            _ => {}
        }
        // NSpid and CapPrm come after Gid, in this order: read on until the last is seen.
        if name.is_some() && uids.is_some() && gids.is_some() && cap_permitted.is_some() {
            break;
        }
    }
    let missing = |field| ProcParseError::Missing {
        file: STATUS,
        field,
    };
    Ok(ProcStatus {
        name: name.ok_or(missing("Name line"))?,
        tgid,
        nspid,
        uids: uids.ok_or(missing("Uid line"))?,
        gids: gids.ok_or(missing("Gid line"))?,
        cap_permitted,
    })
}

fn parse_ids(value: &[u8], line: &'static str) -> Result<Ids, ProcParseError> {
    let mut ids = [0u32; 4];
    let mut fields = value
        .split(u8::is_ascii_whitespace)
        .filter(|f| !f.is_empty());
    for id in &mut ids {
        let field = fields.next().ok_or(ProcParseError::Missing {
            file: STATUS,
            field: line,
        })?;
        *id = parse_num(field, STATUS, line)?;
    }
    let [real, effective, saved, filesystem] = ids;
    Ok(Ids {
        real,
        effective,
        saved,
        filesystem,
    })
}

/// Parse the aggregate `cpu` line of `/proc/stat` (the first line; `cpu0`, `cpu1`... are per-CPU
/// and ignored). Old kernels print fewer than the 10 modern columns: at least 4 (user nice system
/// idle) are required and absent ones count as 0; columns beyond the 10 known are ignored.
pub fn parse_proc_stat_cpu(text: &[u8]) -> Result<CpuTimes, ProcParseError> {
    const COLUMNS: [&str; 10] = [
        "cpu column 1 (user)",
        "cpu column 2 (nice)",
        "cpu column 3 (system)",
        "cpu column 4 (idle)",
        "cpu column 5 (iowait)",
        "cpu column 6 (irq)",
        "cpu column 7 (softirq)",
        "cpu column 8 (steal)",
        "cpu column 9 (guest)",
        "cpu column 10 (guest_nice)",
    ];
    let mut fields = text
        .split(|&b| b == b'\n')
        .map(|line| {
            line.split(u8::is_ascii_whitespace)
                .filter(|f| !f.is_empty())
        })
        .find_map(|mut fields| (fields.next() == Some(b"cpu")).then_some(fields))
        .ok_or(ProcParseError::Missing {
            file: PROC_STAT,
            field: "\"cpu\" line",
        })?;
    let mut v = [0u64; 10];
    for (i, (slot, name)) in v.iter_mut().zip(COLUMNS).enumerate() {
        match fields.next() {
            Some(f) => *slot = parse_num(f, PROC_STAT, name)?,
            None if i >= 4 => break,
            None => {
                return Err(ProcParseError::Missing {
                    file: PROC_STAT,
                    field: name,
                });
            }
        }
    }
    let [
        user,
        nice,
        system,
        idle,
        iowait,
        irq,
        softirq,
        steal,
        _guest,
        _guest_nice,
    ] = v;
    let busy = [user, nice, system, irq, softirq, steal]
        .into_iter()
        .fold(0u64, u64::saturating_add);
    Ok(CpuTimes {
        busy_ticks: busy,
        idle_ticks: idle.saturating_add(iowait),
        steal_ticks: steal,
    })
}

/// A decimal number made of ASCII digits only (no sign), checked for overflow of `T`.
fn parse_num<T: std::str::FromStr>(
    s: &[u8],
    file: &'static str,
    field: &'static str,
) -> Result<T, ProcParseError> {
    if !s.is_empty()
        && s.iter().all(u8::is_ascii_digit)
        && let Some(n) = std::str::from_utf8(s).ok().and_then(|s| s.parse().ok())
    {
        return Ok(n);
    }
    Err(invalid(file, field, s))
}

fn invalid(file: &'static str, field: &'static str, value: &[u8]) -> ProcParseError {
    ProcParseError::Invalid {
        file,
        field,
        value: String::from_utf8_lossy(value.get(..40).unwrap_or(value)).into_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    /// Fields 4..=52 of a real line, after `PID (COMM) STATE `.
    const TAIL: &str = "8380 8380 7556 0 -1 4194304 98 0 0 0 11 22 0 0 20 0 1 0 53809 3133440 382 \
        18446744073709551615 94404459008000 94404459027881 140724808914032 0 0 0 0 0 0 0 0 0 17 0 \
        0 0 0 0 0 94404459043888 94404459045504 94405143646208 140724808915506 140724808915526 \
        140724808915526 140724808916971 0\n";

    #[test]
    fn real_self_stat() {
        let st = parse_stat(&std::fs::read("/proc/self/stat").unwrap()).unwrap();
        assert_eq!(st.pid, std::process::id());
        assert!(st.start_time_ticks > 0);
        assert!(!st.is_zombie());
        // /proc/self is the thread-group leader, which libtest may leave sleeping while a worker
        // thread runs this test; the reading thread itself is necessarily running.
        let me = parse_stat(&std::fs::read("/proc/thread-self/stat").unwrap()).unwrap();
        assert_eq!(me.state, 'R');
        assert_eq!(me.ppid, st.ppid);
        assert!(me.start_time_ticks >= st.start_time_ticks);
    }

    #[test]
    fn real_self_status() {
        let status = parse_status(&std::fs::read("/proc/self/status").unwrap()).unwrap();
        let uid = std::fs::metadata("/proc/self").unwrap().uid();
        // Root's tests hold capabilities, anyone else's none: the line is read either way.
        assert_eq!(status.cap_permitted.unwrap() != 0, uid == 0, "{status:?}");
        assert_eq!(status.uids.effective, uid);
        assert_eq!(status.uids.real, uid);
        let stat = parse_stat(&std::fs::read("/proc/self/stat").unwrap()).unwrap();
        assert_eq!(status.name, stat.comm);
        assert_eq!(status.tgid, Some(std::process::id()));
        // Not in a container: the innermost pid is the pid.
        assert_eq!(status.nspid, Some(std::process::id()));
        let nested = parse_status(
            b"Name:\tnode\nTgid:\t4242\nNSpid:\t4242\t1\nUid:\t1\t1\t1\t1\nGid:\t1\t1\t1\t1\n",
        )
        .unwrap();
        assert_eq!(nested.nspid, Some(1));
        // A thread's status names the process it belongs to.
        let thread = std::thread::spawn(|| std::fs::read("/proc/thread-self/status").unwrap())
            .join()
            .unwrap();
        assert_eq!(
            parse_status(&thread).unwrap().tgid,
            Some(std::process::id())
        );
    }

    #[test]
    fn comm_with_spaces_and_parens() {
        let line = format!("123 (a) b) c) R {TAIL}");
        let st = parse_stat(line.as_bytes()).unwrap();
        assert_eq!(
            st,
            ProcStat {
                pid: 123,
                comm: "a) b) c".into(),
                state: 'R',
                ppid: 8380,
                flags: 4194304,
                utime_ticks: 11,
                stime_ticks: 22,
                num_threads: 1,
                start_time_ticks: 53809,
            }
        );
        assert_eq!(st.cpu_ticks(), 33);
        assert!(!st.is_exiting());
        let odd = [b"7 (\xff( ))) S ".as_slice(), TAIL.as_bytes()].concat();
        let st = parse_stat(&odd).unwrap();
        assert_eq!((st.comm.as_str(), st.state), ("\u{fffd}( ))", 'S'));
        let empty = format!("7 () S {TAIL}");
        assert_eq!(parse_stat(empty.as_bytes()).unwrap().comm, "");
    }

    /// The leader of a process that left `main` by `pthread_exit` while a thread runs on: a
    /// zombie, exiting, still counting two threads (taken from a real one).
    #[test]
    fn a_leader_gone_before_its_threads() {
        let line = b"801 (pe) Z 792 788 19287 0 -1 4227084 99 0 0 0 0 0 0 0 20 0 2 0 4108313 0 0";
        let st = parse_stat(line).unwrap();
        assert!(st.is_zombie() && st.is_exiting());
        assert_eq!((st.num_threads, st.start_time_ticks), (2, 4108313));
        let thread = b"802 (pe) S 792 788 19287 0 -1 4194368 1 0 0 0 0 0 0 0 20 0 2 0 4108313 0 0";
        let st = parse_stat(thread).unwrap();
        assert!(!st.is_zombie() && !st.is_exiting());
    }

    #[test]
    fn zombie_states() {
        for (state, zombie) in [
            ('Z', true),
            ('X', true),
            ('x', true),
            ('S', false),
            ('D', false),
        ] {
            let line = format!("9 (z) {state} {TAIL}");
            assert_eq!(parse_stat(line.as_bytes()).unwrap().is_zombie(), zombie);
        }
    }

    #[test]
    fn bad_stat_lines() {
        let cases: &[(&[u8], &str)] = &[
            (b"", "/proc/PID/stat: missing field 2 (comm) '('"),
            (b"123 (cat", "/proc/PID/stat: missing field 2 (comm) ')'"),
            (b"123 )cat(", "/proc/PID/stat: missing field 2 (comm) ')'"),
            (b"123 (cat)", "/proc/PID/stat: missing field 3 (state)"),
            (b"123 (cat) R", "/proc/PID/stat: missing field 4 (ppid)"),
            (
                b"123 (cat) R 1 2 3 4 5 6 7 8 9 10",
                "/proc/PID/stat: missing field 14 (utime)",
            ),
            (
                b"123 (cat) R 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18",
                "/proc/PID/stat: missing field 22 (starttime)",
            ),
            (
                b"abc (cat) R 1",
                "/proc/PID/stat: invalid field 1 (pid): \"abc\"",
            ),
            (b" (cat) R 1", "/proc/PID/stat: invalid field 1 (pid): \"\""),
            (
                b"4294967296 (cat) R 1",
                "/proc/PID/stat: invalid field 1 (pid): \"4294967296\"",
            ),
            (
                b"1 (cat) RR 1",
                "/proc/PID/stat: invalid field 3 (state): \"RR\"",
            ),
            (
                b"1 (cat) 5 1",
                "/proc/PID/stat: invalid field 3 (state): \"5\"",
            ),
            (
                b"1 (cat) R -1",
                "/proc/PID/stat: invalid field 4 (ppid): \"-1\"",
            ),
            (
                b"1 (cat) R 1 2 3 4 5 6 7 8 9 10 x 12 13 14 15 16 17 18 19",
                "/proc/PID/stat: invalid field 14 (utime): \"x\"",
            ),
        ];
        for (text, msg) in cases {
            let err = parse_stat(text).unwrap_err();
            assert_eq!(err.to_string(), *msg, "{}", String::from_utf8_lossy(text));
        }
    }

    #[test]
    fn status_synthetic() {
        let text = b"Name:\t my\\tprog\nUmask:\t0022\nState:\tS (sleeping)\n\
            Uid:\t1000\t1001\t1002\t1003\nGid:\t10\t11\t12\t13\n\
            CapInh:\t0000000000000000\nCapPrm:\t000001ffffffffff\n";
        let st = parse_status(text).unwrap();
        assert_eq!(st.name, " my\\tprog");
        assert_eq!(st.cap_permitted, Some(0x1ff_ffff_ffff));
        let no_caps = parse_status(b"Name:\tx\nUid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\nCapPrm:\tzz\n");
        assert_eq!(no_caps.unwrap().cap_permitted, None);
        assert_eq!(
            (st.uids, st.gids.filesystem),
            (
                Ids {
                    real: 1000,
                    effective: 1001,
                    saved: 1002,
                    filesystem: 1003
                },
                13
            )
        );
        let cases: &[(&[u8], &str)] = &[
            (b"", "/proc/PID/status: missing Name line"),
            (
                b"Name:\tx\nGid:\t0\t0\t0\t0\n",
                "/proc/PID/status: missing Uid line",
            ),
            (
                b"Name:\tx\nUid:\t0\t0\t0\n",
                "/proc/PID/status: missing Uid line",
            ),
            (
                b"Name:\tx\nUid:\t0\t0\t0\t0\n",
                "/proc/PID/status: missing Gid line",
            ),
            (
                b"Name:\tx\nUid:\t0\tx\t0\t0\n",
                "/proc/PID/status: invalid Uid line: \"x\"",
            ),
            (
                b"Uid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0",
                "/proc/PID/status: missing Name line",
            ),
        ];
        for (text, msg) in cases {
            let err = parse_status(text).unwrap_err();
            assert_eq!(err.to_string(), *msg, "{}", String::from_utf8_lossy(text));
        }
    }

    #[test]
    fn real_proc_stat() {
        let cpu = parse_proc_stat_cpu(&std::fs::read("/proc/stat").unwrap()).unwrap();
        assert!(cpu.busy_ticks > 0 && cpu.idle_ticks > 0);
        assert_eq!(cpu.total_ticks(), cpu.busy_ticks + cpu.idle_ticks);
    }

    #[test]
    fn proc_stat_columns() {
        let ok: &[(&[u8], u64, u64, u64)] = &[
            (
                b"cpu  39575 7 3843 63056 356 1 50 782 900 9\ncpu0 1 2 3 4\n",
                39575 + 7 + 3843 + 1 + 50 + 782,
                63056 + 356,
                782,
            ),
            (b"cpu 1 2 3 4\n", 6, 4, 0),
            (b"cpu 1 2 3 4 5 6 7\n", 1 + 2 + 3 + 6 + 7, 4 + 5, 0),
            (
                b"cpu 1 2 3 4 5 6 7 8 9 10 11 12\n",
                1 + 2 + 3 + 6 + 7 + 8,
                4 + 5,
                8,
            ),
            (b"intr 5\ncpu 1 2 3 4", 6, 4, 0),
        ];
        for (text, busy, idle, steal) in ok {
            let cpu = parse_proc_stat_cpu(text).unwrap();
            assert_eq!(
                (cpu.busy_ticks, cpu.idle_ticks, cpu.steal_ticks),
                (*busy, *idle, *steal),
                "{}",
                String::from_utf8_lossy(text)
            );
        }
        let bad: &[(&[u8], &str)] = &[
            (b"", "/proc/stat: missing \"cpu\" line"),
            (b"cpu0 1 2 3 4\n", "/proc/stat: missing \"cpu\" line"),
            (b"cpu 1 2 3\n", "/proc/stat: missing cpu column 4 (idle)"),
            (
                b"cpu 1 2 x 4\n",
                "/proc/stat: invalid cpu column 3 (system): \"x\"",
            ),
            (
                b"cpu 1 2 3 4 -5\n",
                "/proc/stat: invalid cpu column 5 (iowait): \"-5\"",
            ),
        ];
        for (text, msg) in bad {
            let err = parse_proc_stat_cpu(text).unwrap_err();
            assert_eq!(err.to_string(), *msg, "{}", String::from_utf8_lossy(text));
        }
        let before = parse_proc_stat_cpu(b"cpu 100 0 50 800 50 0 0 10").unwrap();
        let after = parse_proc_stat_cpu(b"cpu 150 0 60 820 50 0 0 30").unwrap();
        assert_eq!(after.steal_percent_since(&before), 20.0);
        assert_eq!(after.steal_percent_since(&after), 0.0);
        assert_eq!(
            before.steal_percent_since(&after),
            0.0,
            "a reading going back"
        );
        let max =
            parse_proc_stat_cpu(b"cpu 18446744073709551615 1 0 18446744073709551615 1").unwrap();
        assert_eq!(
            (max.busy_ticks, max.idle_ticks, max.total_ticks()),
            (u64::MAX, u64::MAX, u64::MAX)
        );
    }

    /// Every prefix of a real line is rejected or parsed, never a panic.
    #[test]
    fn truncations_never_panic() {
        for path in ["/proc/self/stat", "/proc/self/status", "/proc/stat"] {
            let text = std::fs::read(path).unwrap();
            for n in 0..text.len().min(4096) {
                let _ = parse_stat(&text[..n]);
                let _ = parse_status(&text[..n]);
                let _ = parse_proc_stat_cpu(&text[..n]);
            }
        }
    }
}
