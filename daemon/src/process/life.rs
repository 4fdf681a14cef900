//! Whether a process still lives, told apart from whatever holds its pid afterwards.
//!
//! A process is known by its pid and its start time (`/proc/PID/stat` field 22). A pid is given
//! to another process once its owner is reaped, so a reading of `/proc/PID` is the target's only
//! when its start time is the target's. The start time counts clock ticks (`USER_HZ`, 100 a
//! second): a process forked into the pid of one that lived less than 10 ms has the same start
//! time, and only the kernel's exit events, ordered in time with the samples, tell the two
//! apart (see [`vmscope_common::EVENT_EXIT`] and the session manager).
//!
//! Alive means that some thread has not begun to exit: a zombie leader with threads running on
//! (`pthread_exit` in `main`) is alive; a process whose threads are all in `do_exit` is not,
//! even before its leader is a zombie. `PF_EXITING` is set before the exit tracepoint runs, so a
//! thread seen without it will run the tracepoint later: what the daemon relies on when it arms
//! the kernel's filter and then checks that the process is alive.

use vmscope_parse::stat::{self, ProcStat};

use crate::sys;

/// What holds a pid, as far as a process with a known start time is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Life {
    /// No process has the pid, or its files cannot be read.
    Gone,
    /// Another process has the pid: its start time is not the one expected.
    Reused {
        /// Its start time, in clock ticks after boot.
        start_time: u64,
    },
    /// The process exited: a zombie awaiting its parent, or every thread on its way out.
    Exited {
        /// Its CPU time (user and system, all threads), in clock ticks: its last.
        cpu_ticks: u64,
        /// Its start time, in clock ticks after boot.
        start_time: u64,
    },
    /// The process runs.
    Alive {
        /// Its CPU time so far, in clock ticks.
        cpu_ticks: u64,
        /// Its start time, in clock ticks after boot.
        start_time: u64,
        /// Whether its thread-group leader runs too; false after a `pthread_exit` in `main`,
        /// while other threads run on.
        leader: bool,
    },
}

impl Life {
    /// The start time of the process that holds the pid, if one does.
    pub fn start_time(&self) -> Option<u64> {
        match *self {
            Life::Gone => None,
            Life::Reused { start_time }
            | Life::Exited { start_time, .. }
            | Life::Alive { start_time, .. } => Some(start_time),
        }
    }

    /// Whether the process runs.
    pub fn is_alive(&self) -> bool {
        matches!(self, Life::Alive { .. })
    }
}

/// Judges a process from its `/proc/PID/stat` (`leader`, which describes the thread-group leader
/// and counts the whole group's CPU time) against the start time it should have (`None`: any
/// process). `threads` reads the stat of every thread, lazily: it is called only when the leader
/// is gone and others may remain, and read until one runs.
pub fn judge<I: IntoIterator<Item = ProcStat>>(
    leader: &ProcStat,
    expected_start: Option<u64>,
    threads: impl FnOnce() -> I,
) -> Life {
    let start_time = leader.start_time_ticks;
    if expected_start.is_some_and(|expected| expected != start_time) {
        return Life::Reused { start_time };
    }
    let cpu_ticks = leader.cpu_ticks();
    if !leader.is_zombie() && !leader.is_exiting() {
        return Life::Alive {
            cpu_ticks,
            start_time,
            leader: true,
        };
    }
    // The leader's own task stays, a zombie, until the whole group has exited: others may run.
    if leader.num_threads > 1
        && threads()
            .into_iter()
            .any(|t| !t.is_zombie() && !t.is_exiting())
    {
        return Life::Alive {
            cpu_ticks,
            start_time,
            leader: false,
        };
    }
    Life::Exited {
        cpu_ticks,
        start_time,
    }
}

/// Whether a process that started at `start_time` (clock ticks after boot, at `ticks_per_second`)
/// surely started before `at_ns` (CLOCK_MONOTONIC), when CLOCK_BOOTTIME is `boot_offset_ns`
/// ahead of CLOCK_MONOTONIC (the time suspended). A process forked into a pid after its owner
/// exited at `at_ns` started at or after that tick: one with an earlier start time is the owner,
/// still running (its leader exited before its threads, or an `execve` in another thread
/// replaced it). One with the same tick may be either.
pub fn started_before(
    start_time: u64,
    at_ns: u64,
    boot_offset_ns: u64,
    ticks_per_second: u64,
) -> bool {
    // A millisecond off for the offset, read from two clocks one after the other.
    let at_boot_ns = (at_ns + boot_offset_ns).saturating_sub(1_000_000);
    let tick = u128::from(at_boot_ns) * u128::from(ticks_per_second.max(1)) / 1_000_000_000;
    u128::from(start_time) < tick
}

/// Reads what holds `pid` now (see [`judge`]).
pub fn probe(pid: u32, expected_start: Option<u64>) -> Life {
    let Some(leader) = sys::read_proc(pid, "stat")
        .ok()
        .and_then(|text| stat::parse_stat(&text).ok())
    else {
        return Life::Gone;
    };
    judge(&leader, expected_start, || threads(pid))
}

/// The stat of each thread of `pid` that can still be read, read as the iterator goes.
fn threads(pid: u32) -> impl Iterator<Item = ProcStat> {
    std::fs::read_dir(sys::proc_path(pid, "task"))
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let path = entry.path().join("stat");
            let text = sys::read_bounded(&path, sys::MAX_PROC_FILE_BYTES).ok()?;
            stat::parse_stat(&text).ok()
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(state: char, flags: u32, num_threads: u32, start: u64) -> ProcStat {
        ProcStat {
            pid: 7,
            comm: "t".into(),
            state,
            ppid: 1,
            flags,
            utime_ticks: 3,
            stime_ticks: 4,
            num_threads,
            start_time_ticks: start,
        }
    }

    const EXITING: u32 = stat::PF_EXITING;

    #[test]
    fn a_running_leader_is_alive_without_looking_at_threads() {
        let life = judge(&stat('S', 0, 4, 100), Some(100), || -> Vec<ProcStat> {
            panic!("threads are read only when the leader is gone")
        });
        assert_eq!(
            life,
            Life::Alive {
                cpu_ticks: 7,
                start_time: 100,
                leader: true
            }
        );
        assert!(life.is_alive());
    }

    #[test]
    fn another_start_time_is_another_process() {
        let life = judge(&stat('R', 0, 1, 101), Some(100), Vec::new);
        assert_eq!(life, Life::Reused { start_time: 101 });
        assert!(!life.is_alive());
        // With no expectation, whatever runs there is judged.
        assert!(judge(&stat('R', 0, 1, 101), None, Vec::new).is_alive());
    }

    #[test]
    fn a_zombie_or_an_exiting_leader_alone_has_exited() {
        for leader in [stat('Z', EXITING, 1, 100), stat('R', EXITING, 1, 100)] {
            assert_eq!(
                judge(&leader, Some(100), || -> Vec<ProcStat> {
                    panic!("a single thread")
                }),
                Life::Exited {
                    cpu_ticks: 7,
                    start_time: 100
                }
            );
        }
    }

    #[test]
    fn threads_keep_a_process_alive_after_its_leader() {
        let leader = stat('Z', EXITING, 2, 100);
        let running = || vec![leader.clone(), stat('S', 0, 2, 100)];
        assert_eq!(
            judge(&leader, Some(100), running),
            Life::Alive {
                cpu_ticks: 7,
                start_time: 100,
                leader: false
            }
        );
        // Threads already in do_exit have passed their exit tracepoint's check: not alive.
        let leaving = || vec![leader.clone(), stat('R', EXITING, 2, 100)];
        assert!(!judge(&leader, Some(100), leaving).is_alive());
        // Threads gone between the two reads.
        assert!(!judge(&leader, Some(100), Vec::new).is_alive());
    }

    #[test]
    fn a_process_started_ticks_before_an_exit_is_no_successor() {
        // 100 ticks a second; the exit at 5.0 s monotonic, 2 s suspended: 7.0 s boottime, tick
        // 700 (the margin of a millisecond makes it 699).
        let at = 5_000_000_000;
        let offset = 2_000_000_000;
        assert!(started_before(600, at, offset, 100));
        assert!(started_before(698, at, offset, 100));
        assert!(
            !started_before(699, at, offset, 100),
            "the same tick: either"
        );
        assert!(!started_before(700, at, offset, 100));
        assert!(!started_before(0, 0, 0, 100), "no time before boot");
    }

    #[test]
    fn this_process_is_alive() {
        let me = std::process::id();
        let life = probe(me, None);
        assert!(matches!(life, Life::Alive { leader: true, .. }), "{life:?}");
        let start = life.start_time();
        let again = probe(me, start);
        assert!(again.is_alive() && again.start_time() == start, "{again:?}");
        // It started before now.
        let offset = sys::boottime_ns().saturating_sub(sys::monotonic_ns());
        let hz = sys::clock_ticks_per_second();
        let later = sys::monotonic_ns() + 1_000_000_000;
        assert!(started_before(start.unwrap(), later, offset, hz));
        assert!(matches!(
            probe(me, start.map(|s| s + 1)),
            Life::Reused { .. }
        ));
    }
}
