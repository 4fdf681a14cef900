//! What one user other than root may ask of the sampler at once: a share of the timer rate
//! and of the user stack bytes copied per second.
//!
//! Every distinct frequency a user's running sessions sample at is a cpu-clock timer on every
//! online CPU, and every tick that lands in a target with a DWARF call graph copies up to 64
//! KiB of user stack in the timer interrupt, which then goes through the ring buffer and the
//! daemon's unwinder. Without shares, one user's sessions at 50,000 Hz with `--call-graph
//! dwarf,65528` cost root's concurrent session its samples, its symbols and its stop time
//! (issue 23). Both are per busy CPU, as the frequency is: a user's sessions at one frequency
//! share its timers, so they count once, with the largest copy any of them asks for.
//!
//! Off-CPU sessions take no sample, and count for neither: their work in the kernel is done as
//! their targets' threads leave and take their CPUs, in those threads' own time, and what they
//! write to the ring buffer is held to the users' half of it as samples are.
//!
//! The share is checked when a session starts; root's sessions are not held to it. What a
//! user's sessions get within their share can still be more than the ring buffer holds at
//! once: the kernel then leaves out their samples, never root's (see
//! [`vmscope_common::Wants::fits`]).

use std::collections::BTreeMap;

use super::request::SessionSpec;
use crate::bpf::period_of;

/// Default [`SamplingShare::frequency_hz`]: the daemon's default ceiling for one session
/// ([`super::request::DEFAULT_MAX_FREQUENCY_HZ`]), for all of a user's sessions together.
pub const DEFAULT_FREQUENCY_HZ: u32 = 10_000;

/// Default [`SamplingShare::stack_copy_bytes_per_second`]: 64 MiB/s per busy CPU, 1000 Hz with
/// the largest copies (65528 bytes) or perf's `-F 4000 --call-graph dwarf` (8192 bytes) twice.
pub const DEFAULT_STACK_COPY_BYTES_PER_SECOND: u64 = 64 << 20;

/// What each user other than root may ask of the sampler with all its running sessions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SamplingShare {
    /// The sum of the distinct frequencies its sessions sample at, in Hz: timer interrupts per
    /// second on each busy CPU.
    pub frequency_hz: u32,
    /// Bytes of user stack its DWARF sessions may copy per second on each busy CPU: the sum,
    /// over the distinct frequencies, of the frequency times the largest copy at it.
    pub stack_copy_bytes_per_second: u64,
}

impl Default for SamplingShare {
    fn default() -> Self {
        SamplingShare {
            frequency_hz: DEFAULT_FREQUENCY_HZ,
            stack_copy_bytes_per_second: DEFAULT_STACK_COPY_BYTES_PER_SECOND,
        }
    }
}

/// What a set of sessions asks of each busy CPU.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Load {
    /// Timer interrupts per second: the sum of the distinct frequencies.
    pub frequency_hz: u64,
    /// User stack bytes copied per second at most.
    pub stack_copy_bytes_per_second: u64,
}

/// The load of `sessions`: those at one sampling period share its timers and copy the largest
/// of their copies.
pub fn load<'a>(sessions: impl IntoIterator<Item = &'a SessionSpec>) -> Load {
    // Per period: the highest frequency that rounds to it, and the largest copy.
    let mut periods: BTreeMap<u64, (u32, u32)> = BTreeMap::new();
    for spec in sessions.into_iter().filter(|s| s.mode.on_cpu()) {
        let entry = periods
            .entry(period_of(spec.frequency_hz))
            .or_insert((0, 0));
        entry.0 = entry.0.max(spec.frequency_hz);
        // A frame-pointer session copies its JVM targets' stacks too.
        let java = if spec.java_copies.is_empty() {
            0
        } else {
            vmscope_common::DEFAULT_USER_COPY
        };
        entry.1 = entry.1.max(spec.call_graph.dwarf_stack_bytes()).max(java);
    }
    periods
        .values()
        .fold(Load::default(), |load, &(hz, copy)| Load {
            frequency_hz: load.frequency_hz + u64::from(hz),
            stack_copy_bytes_per_second: load.stack_copy_bytes_per_second
                + u64::from(hz) * u64::from(copy),
        })
}

impl SamplingShare {
    /// Why `uid` may not start `new` beside its `running` sessions, if it may not: a message
    /// that says what the share is, what its sessions use of it and what to ask for instead.
    pub fn refusal<'a>(
        &self,
        uid: u32,
        running: impl IntoIterator<Item = &'a SessionSpec> + Clone,
        new: &'a SessionSpec,
    ) -> Option<String> {
        let before = load(running.clone());
        let after = load(running.into_iter().chain([new]));
        let hz_share = u64::from(self.frequency_hz);
        if after.frequency_hz > hz_share && after.frequency_hz > before.frequency_hz {
            let room = hz_share.saturating_sub(before.frequency_hz);
            return Some(format!(
                "{} Hz would take your sampling (uid {uid}) to {} Hz, past your share of \
                 {hz_share} Hz (each distinct frequency of your running sessions is a timer \
                 interrupt on every busy CPU; vmscoped --frequency-per-user); your running \
                 sessions use {} Hz: ask for at most {room} Hz, or the frequency of one of them, \
                 or stop one",
                new.frequency_hz, after.frequency_hz, before.frequency_hz
            ));
        }
        let copy_share = self.stack_copy_bytes_per_second;
        if after.stack_copy_bytes_per_second > copy_share
            && after.stack_copy_bytes_per_second > before.stack_copy_bytes_per_second
        {
            let room = copy_share.saturating_sub(before.stack_copy_bytes_per_second);
            let copy = u64::from(new.call_graph.dwarf_stack_bytes().max(1));
            return Some(format!(
                "{} Hz with --call-graph dwarf,{} would take the stacks your sessions (uid \
                 {uid}) copy to {} per second on each busy CPU, past your share of {} \
                 (frequency times copied bytes; vmscoped --stack-copy-per-user-mib); your \
                 running sessions copy {}: ask for at most {} Hz with these copies, or smaller \
                 copies",
                new.frequency_hz,
                copy,
                mib(after.stack_copy_bytes_per_second),
                mib(copy_share),
                mib(before.stack_copy_bytes_per_second),
                room / copy
            ));
        }
        None
    }
}

/// Bytes as MiB, for people.
fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / f64::from(1 << 20))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::request::CallGraph;

    fn spec(frequency_hz: u32, call_graph: CallGraph) -> SessionSpec {
        SessionSpec {
            pids: vec![1],
            system_wide: false,
            frequency_hz,
            duration: None,
            keep_samples: 0,
            call_graph,
            jvm_attach: true,
            root: false,
            mode: vmscope_model::ProfileMode::Cpu,
            min_block_ns: 0,
            params: Vec::new(),
            counts: Vec::new(),
            java_copies: Vec::new(),
        }
    }

    fn dwarf(frequency_hz: u32, stack_bytes: u32) -> SessionSpec {
        spec(frequency_hz, CallGraph::Dwarf { stack_bytes })
    }

    #[test]
    fn sessions_at_one_frequency_share_its_timers_and_its_largest_copy() {
        let sessions = [
            dwarf(1000, 8192),
            dwarf(1000, 65528),
            spec(1000, CallGraph::FramePointers),
            spec(1400, CallGraph::None),
            dwarf(500, 1024),
        ];
        assert_eq!(
            load(&sessions),
            Load {
                frequency_hz: 1000 + 1400 + 500,
                stack_copy_bytes_per_second: 1000 * 65528 + 500 * 1024,
            }
        );
        assert_eq!(load([]), Load::default());
        // An off-CPU session takes no sample; a wall one samples at its frequency.
        let off_cpu = SessionSpec {
            mode: vmscope_model::ProfileMode::OffCpu,
            ..dwarf(3000, 65528)
        };
        let wall = SessionSpec {
            mode: vmscope_model::ProfileMode::Wall,
            ..dwarf(700, 1024)
        };
        assert_eq!(
            load(&[off_cpu, wall]),
            Load {
                frequency_hz: 700,
                stack_copy_bytes_per_second: 700 * 1024,
            }
        );
    }

    #[test]
    fn a_user_is_held_to_its_share_of_frequency() {
        let share = SamplingShare::default();
        let running = [spec(6000, CallGraph::None)];
        assert_eq!(
            share.refusal(7, &running, &spec(4000, CallGraph::None)),
            None
        );
        let refusal = share
            .refusal(7, &running, &spec(4001, CallGraph::None))
            .expect("past the share");
        assert!(
            refusal.contains("10001 Hz")
                && refusal.contains("share of 10000 Hz")
                && refusal.contains("at most 4000 Hz")
                && refusal.contains("uid 7"),
            "{refusal}"
        );
        // One of its frequencies again costs nothing: the same timers.
        let full = [spec(6000, CallGraph::None), spec(4000, CallGraph::None)];
        assert_eq!(share.refusal(7, &full, &spec(6000, CallGraph::None)), None);
        assert!(share.refusal(7, &full, &spec(1, CallGraph::None)).is_some());
    }

    #[test]
    fn a_user_is_held_to_its_share_of_stack_copies() {
        let share = SamplingShare::default();
        // 1000 Hz of the largest copies fits; 1025 does not.
        assert_eq!(share.refusal(7, [], &dwarf(1000, 65528)), None);
        let refusal = share
            .refusal(7, [], &dwarf(10_000, 65528))
            .expect("past the share");
        assert!(
            refusal.contains("share of 64.0 MiB")
                && refusal.contains("--call-graph dwarf,65528")
                && refusal.contains("at most 1024 Hz"),
            "{refusal}"
        );
        // A larger copy at a frequency already in use counts for the difference only.
        let running = [dwarf(1000, 8192)];
        assert_eq!(share.refusal(7, &running, &dwarf(1000, 65528)), None);
        let running = [dwarf(1000, 65528)];
        assert!(share.refusal(7, &running, &dwarf(100, 65528)).is_some());
        assert_eq!(
            share.refusal(7, &running, &spec(100, CallGraph::FramePointers)),
            None,
            "no copies, no copy share"
        );
    }
}
