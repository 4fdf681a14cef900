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

/// The clock of start times, to compare them with event times: start times count clock ticks
/// (`ticks_per_second`) of CLOCK_BOOTTIME, events CLOCK_MONOTONIC, which CLOCK_BOOTTIME is ahead
/// of by the time the host was suspended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StartClock {
    /// CLOCK_BOOTTIME minus CLOCK_MONOTONIC, in nanoseconds.
    pub boot_offset_ns: u64,
    /// Clock ticks per second (`USER_HZ`).
    pub ticks_per_second: u64,
}

impl StartClock {
    /// The clock as the host has it now.
    pub fn now() -> StartClock {
        StartClock {
            boot_offset_ns: sys::boottime_ns().saturating_sub(sys::monotonic_ns()),
            ticks_per_second: sys::clock_ticks_per_second(),
        }
    }

    /// Whether a process that started at `start_time` (clock ticks after boot) surely started
    /// before `at_ns` (CLOCK_MONOTONIC). A process forked into a pid after its owner exited at
    /// `at_ns` started at or after that tick: one with an earlier start time is the owner,
    /// running on. One with the same tick may be either.
    pub fn started_before(&self, start_time: u64, at_ns: u64) -> bool {
        // A millisecond off for the offset, read from two clocks one after the other.
        let at_boot_ns = (at_ns + self.boot_offset_ns).saturating_sub(1_000_000);
        let tick =
            u128::from(at_boot_ns) * u128::from(self.ticks_per_second.max(1)) / 1_000_000_000;
        u128::from(start_time) < tick
    }
}

/// What an exit event under a target's pid says of the target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AfterExit {
    /// The target runs on: its leader left before its threads (`pthread_exit` in `main`), or an
    /// `execve` in another thread replaced it under the same pid and start time.
    RunsOn {
        /// Whether its leader runs (after an `execve`) or not (threads only).
        leader: bool,
    },
    /// The target ended.
    Ended {
        /// Its last CPU time, when it could still be read (a zombie).
        cpu_ticks: Option<u64>,
        /// Whether another process holds the pid already.
        reused: bool,
    },
}

/// Judges a target that started at `target_start` after an exit event at `at_ns` under its
/// pid, from what holds the pid now (`now`, read with no expected start time).
///
/// A process that runs there with the target's start time is the target if its leader is gone
/// (threads run on: it cannot be another process, whose leader would run), or if it surely
/// started before the exit. A running leader with the target's start tick that may have started
/// after the exit is taken for another process, forked into the pid within the same clock tick:
/// the target's sampling ends rather than another process ever being sampled for it. What that
/// costs: a target replaced by an `execve` in a non-main thread within the clock tick it
/// started in is released.
pub fn after_exit(
    now: Life,
    target_start: Option<u64>,
    at_ns: u64,
    clock: StartClock,
) -> AfterExit {
    let same = target_start.is_some() && target_start == now.start_time();
    match now {
        Life::Alive {
            leader, start_time, ..
        } if same && (!leader || clock.started_before(start_time, at_ns)) => {
            AfterExit::RunsOn { leader }
        }
        Life::Exited { cpu_ticks, .. } if same => AfterExit::Ended {
            cpu_ticks: Some(cpu_ticks),
            reused: false,
        },
        Life::Gone => AfterExit::Ended {
            cpu_ticks: None,
            reused: false,
        },
        _ => AfterExit::Ended {
            cpu_ticks: None,
            reused: true,
        },
    }
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
pub fn threads(pid: u32) -> impl Iterator<Item = ProcStat> {
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
        let clock = StartClock {
            boot_offset_ns: 2_000_000_000,
            ticks_per_second: 100,
        };
        let at = 5_000_000_000;
        assert!(clock.started_before(600, at));
        assert!(clock.started_before(698, at));
        assert!(!clock.started_before(699, at), "the same tick: either");
        assert!(!clock.started_before(700, at));
        let at_boot = StartClock {
            boot_offset_ns: 0,
            ..clock
        };
        assert!(!at_boot.started_before(0, 0), "no time before boot");
    }

    #[test]
    fn what_an_exit_says_of_a_target() {
        let clock = StartClock {
            boot_offset_ns: 0,
            ticks_per_second: 100,
        };
        // The exit at 10 s: tick 1000.
        let at = 10_000_000_000;
        let alive = |start_time, leader| Life::Alive {
            cpu_ticks: 5,
            start_time,
            leader,
        };
        // Threads run on after the leader, whatever the start tick.
        for start in [100, 1000] {
            assert_eq!(
                after_exit(alive(start, false), Some(start), at, clock),
                AfterExit::RunsOn { leader: false }
            );
        }
        // A running leader started long before the exit: the target, after an execve from
        // another thread.
        assert_eq!(
            after_exit(alive(100, true), Some(100), at, clock),
            AfterExit::RunsOn { leader: true }
        );
        // A running leader with the exit's start tick: maybe a successor forked in that tick.
        let successor = AfterExit::Ended {
            cpu_ticks: None,
            reused: true,
        };
        assert_eq!(
            after_exit(alive(1000, true), Some(1000), at, clock),
            successor
        );
        // Another start time: another process, running or not.
        assert_eq!(
            after_exit(alive(1001, true), Some(100), at, clock),
            successor
        );
        assert_eq!(
            after_exit(alive(1001, false), Some(100), at, clock),
            successor
        );
        let other_zombie = Life::Exited {
            cpu_ticks: 9,
            start_time: 1001,
        };
        assert_eq!(after_exit(other_zombie, Some(100), at, clock), successor);
        // The target's zombie keeps its last CPU time.
        let zombie = Life::Exited {
            cpu_ticks: 9,
            start_time: 100,
        };
        assert_eq!(
            after_exit(zombie, Some(100), at, clock),
            AfterExit::Ended {
                cpu_ticks: Some(9),
                reused: false
            }
        );
        assert_eq!(
            after_exit(Life::Gone, Some(100), at, clock),
            AfterExit::Ended {
                cpu_ticks: None,
                reused: false
            }
        );
        // A target whose start time was never read is never taken to run on.
        assert_eq!(after_exit(alive(100, false), None, at, clock), successor);
    }

    #[test]
    fn this_process_is_alive() {
        let me = std::process::id();
        let life = probe(me, None);
        assert!(matches!(life, Life::Alive { leader: true, .. }), "{life:?}");
        let start = life.start_time();
        let again = probe(me, start);
        assert!(again.is_alive() && again.start_time() == start, "{again:?}");
        // It started before a second from now.
        let later = sys::monotonic_ns() + 1_000_000_000;
        assert!(StartClock::now().started_before(start.unwrap(), later));
        assert!(matches!(
            probe(me, start.map(|s| s + 1)),
            Life::Reused { .. }
        ));
    }
}
