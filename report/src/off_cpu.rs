//! The report of time off the CPU (`--mode off-cpu` and `wall`): the same sections as the
//! samples' (generated vm code, vanilla vm code, other code, with bytecode ranges under hot
//! methods), in nanoseconds rather than samples, by the innermost user frame each thread
//! waited in; why the threads waited; what was left out; and each thread's time on and off the
//! CPU, with its time inside the VM's intervals (waiting for a GC).

use serde::Serialize;
use vmscope_model::{BlockState, Profile, ProfileMode, Session, Thread, rank::rank};

use crate::model::{ReportOptions, SectionReport, VmModule, percent, sections};

/// A profile's time off the CPU, ready to render.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OffCpuReport {
    /// Blocks recorded (with their stacks, or under way at the stop).
    pub blocks: u64,
    /// Their time off the CPU inside the session, in nanoseconds: what the sections' shares
    /// are of.
    pub total_ns: u64,
    /// The session's minimum block (`--min-block`), in nanoseconds.
    pub min_block_ns: u64,
    /// Generated, vanilla and other code, as the samples' sections, **every count in
    /// nanoseconds off the CPU**: rows by the innermost user frame their threads waited in.
    pub sections: Vec<SectionReport>,
    /// Modules other than the main executable counted as vanilla vm code, most time first.
    pub vm_modules: Vec<VmModule>,
    /// Time by why threads were off the CPU, most first.
    pub states: Vec<StateShare>,
    /// Blocks shorter than the minimum, counted and left out of every other number here.
    pub short_blocks: u64,
    /// Their time, in nanoseconds.
    pub short_ns: u64,
    /// Blocks the kernel could not deliver (its ring buffer full): lost.
    pub lost_blocks: u64,
    /// Threads the kernel could not follow off their CPU (it followed its most at once).
    pub unfollowed: u64,
    /// Of `total_ns`, the time of threads still off their CPU at the stop, without stacks.
    pub still_blocked_ns: u64,
    /// Threads still off their CPU at the stop.
    pub still_blocked_threads: u32,
    /// Every thread with samples or blocks, most time first: its time on and off the CPU.
    pub threads: Vec<ThreadTime>,
}

/// Time off the CPU in one state.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StateShare {
    /// `preempted`, `sleeping`, `uninterruptible`, `stopped`, `idle` or `other`.
    #[serde(serialize_with = "crate::json::block_state")]
    pub state: BlockState,
    /// Blocks in it.
    pub blocks: u64,
    /// Their time, in nanoseconds.
    pub ns: u64,
    /// Share of all the time off the CPU, 0 to 100.
    #[serde(serialize_with = "crate::json::rounded")]
    pub percent: f64,
}

/// One thread's time.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ThreadTime {
    /// Its process.
    pub pid: u32,
    /// Its task id.
    pub tid: u32,
    /// Its name (`comm`), empty when unknown.
    pub name: String,
    /// The CPU time its samples stand for, in nanoseconds (0 in an off-CPU profile).
    pub cpu_ns: u64,
    /// Its blocks recorded, and their time off the CPU.
    pub blocks: u64,
    /// Nanoseconds.
    pub off_cpu_ns: u64,
    /// Its time on and off the CPU: in a wall profile, its elapsed time in the session.
    pub total_ns: u64,
    /// `total_ns` as a share of the session's duration, 0 to 100 (a thread that lived the
    /// whole session has about 100 in a wall profile).
    #[serde(serialize_with = "crate::json::rounded")]
    pub percent_of_duration: f64,
    /// Of its time off the CPU, what fell inside each kind of its VM's intervals.
    pub during: Vec<IntervalShare>,
}

/// A thread's time off the CPU inside one kind of its VM's intervals.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IntervalShare {
    /// The kind, as JSON and pprof labels name kinds (`scavenge`, `full_gc`, `safepoint`, or
    /// the VM's own name).
    pub kind: String,
    /// Nanoseconds.
    pub ns: u64,
    /// Share of the thread's time off the CPU, 0 to 100.
    #[serde(serialize_with = "crate::json::rounded")]
    pub percent_of_off_cpu: f64,
}

impl OffCpuReport {
    /// The off-CPU report of `profile`; `None` for a profile of samples alone.
    pub fn from_profile(profile: &Profile, options: &ReportOptions) -> Option<OffCpuReport> {
        let off = profile.off_cpu.as_ref()?;
        let no_session = Session::default();
        let session = profile.session.as_ref().unwrap_or(&no_session);
        // Blocks always come with their stacks: their rows have inclusive time.
        let shown = sections(
            (&off.rows, &profile.labels),
            off.total_ns,
            session,
            true,
            options,
        );
        let mut states: Vec<StateShare> = off
            .states
            .iter()
            .map(|s| StateShare {
                state: s.state,
                blocks: s.blocks,
                ns: s.ns,
                percent: percent(s.ns, off.total_ns),
            })
            .collect();
        rank(&mut states, |s| s.ns, |a, b| a.state.cmp(&b.state));
        let duration_ns = (profile.duration_seconds.max(0.0) * 1e9) as u64;
        let threads = profile
            .threads
            .iter()
            .map(|t| thread_time(t, profile, duration_ns))
            .collect();
        Some(OffCpuReport {
            blocks: off.blocks,
            total_ns: off.total_ns,
            min_block_ns: session.min_block_ns,
            sections: shown.sections,
            vm_modules: shown.vm_modules,
            states,
            short_blocks: off.short_blocks,
            short_ns: off.short_ns,
            lost_blocks: off.lost_blocks,
            unfollowed: off.unfollowed,
            still_blocked_ns: off.still_blocked_ns,
            still_blocked_threads: off.still_blocked_threads,
            threads,
        })
    }

    /// Whether a wall profile's threads add up: each thread's total is its elapsed time, so
    /// the report can say how far each is from the session's duration.
    pub fn is_wall(profile: &Profile) -> bool {
        profile.mode() == ProfileMode::Wall
    }
}

/// A thread's time, its intervals named as `profile` names its kinds.
fn thread_time(thread: &Thread, profile: &Profile, duration_ns: u64) -> ThreadTime {
    let total_ns = thread.total_ns();
    let during = thread
        .off_cpu_during
        .iter()
        .filter_map(|d| {
            let kind = profile.vm_interval_kinds.get(d.kind as usize)?;
            Some(IntervalShare {
                kind: kind.key().to_owned(),
                ns: d.ns,
                percent_of_off_cpu: percent(d.ns, thread.off_cpu_ns),
            })
        })
        .collect();
    ThreadTime {
        pid: thread.pid,
        tid: thread.tid,
        name: thread.name.clone(),
        cpu_ns: thread.cpu_ns,
        blocks: thread.off_cpu_blocks,
        off_cpu_ns: thread.off_cpu_ns,
        total_ns,
        percent_of_duration: percent(total_ns, duration_ns),
        during,
    }
}

#[cfg(test)]
mod tests {
    use vmscope_model::{
        IntervalKind, IntervalTime, OffCpu, ProfileRow, Section, StateTime, Thread,
    };

    use super::*;

    fn profile() -> Profile {
        Profile {
            session: Some(Session {
                mode: ProfileMode::Wall,
                min_block_ns: 1_000,
                ..Session::default()
            }),
            duration_seconds: 2.0,
            vm_interval_kinds: vec![IntervalKind::Scavenge],
            threads: vec![Thread {
                pid: 7,
                tid: 8,
                name: "mutator".into(),
                samples: 1400,
                cpu_ns: 1_400_000_000,
                off_cpu_blocks: 3,
                off_cpu_ns: 600_000_000,
                off_cpu_during: vec![IntervalTime {
                    kind: 0,
                    ns: 150_000_000,
                }],
            }],
            off_cpu: Some(OffCpu {
                blocks: 3,
                total_ns: 600_000_000,
                rows: vec![
                    ProfileRow {
                        section: Section::Vanilla,
                        name: "sleeper_path".into(),
                        module: "fixture".into(),
                        samples: 450_000_000,
                        inclusive_samples: 450_000_000,
                        symbolized: true,
                        ..ProfileRow::default()
                    },
                    ProfileRow {
                        section: Section::Other,
                        name: "__lll_lock_wait".into(),
                        module: "libc.so.6".into(),
                        samples: 150_000_000,
                        inclusive_samples: 150_000_000,
                        symbolized: true,
                        ..ProfileRow::default()
                    },
                ],
                states: vec![
                    StateTime {
                        state: BlockState::Preempted,
                        blocks: 1,
                        ns: 10_000_000,
                    },
                    StateTime {
                        state: BlockState::Sleeping,
                        blocks: 2,
                        ns: 590_000_000,
                    },
                ],
                short_blocks: 5,
                short_ns: 2_000,
                ..OffCpu::default()
            }),
            ..Profile::default()
        }
    }

    /// The sections share out the time off the CPU as the samples' share samples; a thread's
    /// total is its time on and off the CPU, against the session's duration, and its time in
    /// a GC a share of its time off the CPU.
    #[test]
    fn time_off_the_cpu_is_shared_out_as_samples_are() {
        let report = OffCpuReport::from_profile(&profile(), &ReportOptions::default()).unwrap();
        assert_eq!(report.total_ns, 600_000_000);
        let vanilla = &report.sections[0];
        assert_eq!(vanilla.section, Section::Vanilla);
        assert_eq!(vanilla.rows[0].name, "sleeper_path");
        assert_eq!(vanilla.rows[0].percent_of_total, 75.0);
        assert_eq!(report.sections[1].rows[0].percent_of_total, 25.0);
        assert_eq!(
            report.states[0].state,
            BlockState::Sleeping,
            "most time first"
        );
        assert!((report.states[0].percent - 98.333).abs() < 0.01);
        let thread = &report.threads[0];
        assert_eq!(thread.total_ns, 2_000_000_000);
        assert_eq!(thread.percent_of_duration, 100.0);
        assert_eq!(thread.during[0].kind, "scavenge");
        assert_eq!(thread.during[0].percent_of_off_cpu, 25.0);
        assert_eq!((report.short_blocks, report.min_block_ns), (5, 1_000));
        assert!(OffCpuReport::is_wall(&profile()));
    }

    #[test]
    fn a_profile_of_samples_has_no_off_cpu_report() {
        let samples = Profile {
            off_cpu: None,
            ..profile()
        };
        assert!(OffCpuReport::from_profile(&samples, &ReportOptions::default()).is_none());
    }
}
