//! Driving the HotSpot targets: asking a JVM for its perf map when its samples need one, and
//! taking its answer.

use super::*;
use crate::session::{CallGraph, request::SessionSpec};

impl Manager {
    /// Whether the session lets its HotSpot targets be asked for their perf map.
    pub(super) fn jvm_attach(&self, id: u64) -> bool {
        self.config.jvm_attach
            && self
                .sessions
                .get(&id)
                .is_some_and(|s| s.spec.jvm_attach && !s.spec.system_wide)
    }

    /// Notes which targets of a session are HotSpot JVMs (they map libjvm.so), as far as their
    /// mappings show now (a command recorded from its start loads it later).
    pub(super) fn observe_jvms(&mut self, id: u64) {
        let Some(session) = self.sessions.get(&id) else {
            return;
        };
        if session.spec.system_wide {
            return;
        }
        let pids: Vec<u32> = session.held_pids();
        for pid in pids {
            if self.jvms.is_jvm(pid) {
                continue;
            }
            if self.maps_libjvm(pid) {
                self.jvms.observe(pid);
            }
        }
    }

    /// Whether `pid`, as the process table last read it, maps HotSpot's `libjvm.so`.
    fn maps_libjvm(&self, pid: u32) -> bool {
        let Some(process) = self.processes.get(pid) else {
            return false;
        };
        let modules = &self.modules;
        !process.gone
            && process
                .file_mappings()
                .any(|(_, _, module)| modules.get(module).is_some_and(|m| m.is_libjvm()))
    }

    /// The targets of `spec` that map libjvm.so now.
    pub(super) fn jvm_targets(&self, spec: &SessionSpec) -> Vec<u32> {
        if spec.system_wide {
            return Vec::new();
        }
        spec.pids
            .iter()
            .copied()
            .filter(|&pid| self.maps_libjvm(pid))
            .collect()
    }

    /// Whether a session walking `spec`'s call graph copies the stacks of its JVMs.
    fn copies_jvm_stacks(&self, spec: &SessionSpec) -> bool {
        self.config.java_frames && spec.call_graph == CallGraph::FramePointers && !spec.system_wide
    }

    /// The targets of a frame-pointer session whose stacks the kernel must copy as well: the
    /// JVMs among them whose compiled code keeps no frame pointer, so that their Java frames
    /// are unwound by the JVM's own layout. A command recorded from its start maps libjvm.so
    /// only later: [`Manager::copy_new_jvm_stacks`] adds it then.
    /// `jvms` are the targets that map libjvm.so ([`Manager::jvm_targets`]).
    pub(super) fn java_copy_targets(&self, spec: &SessionSpec, jvms: &[u32]) -> Vec<u32> {
        if !self.copies_jvm_stacks(spec) {
            return Vec::new();
        }
        jvms.iter()
            .copied()
            .filter(|&pid| !keeps_frame_pointers(pid))
            .collect()
    }

    /// Copies the stacks of the targets of frame-pointer session `id` that mapped libjvm.so
    /// since its start (`vmscope record -- java ...` execs the JVM after the session starts),
    /// as [`Manager::java_copy_targets`] does for the JVMs found at the start: decided once
    /// for each, within the owner's share, the kernel's entry changed first and the code
    /// cache read whole next, so that the code compiled so far names the copies' frames.
    pub(super) fn copy_new_jvm_stacks(&mut self, id: u64) {
        let Some(session) = self.sessions.get(&id) else {
            return;
        };
        if session.state != State::Running || !self.copies_jvm_stacks(&session.spec) {
            return;
        }
        // Found by `observe_jvms`, which read their mappings and options this tick.
        let found: Vec<u32> = session
            .held_pids()
            .into_iter()
            .filter(|pid| !session.jvms_decided.contains(pid) && self.jvms.is_jvm(*pid))
            .collect();
        for pid in found {
            let session = self.sessions.get_mut(&id).expect("the session is running");
            session.jvms_decided.push(pid);
            if !self.jvms.cuts_stacks(pid) {
                continue;
            }
            let (owner, before) = (session.owner_uid, session.spec.clone());
            let after = SessionSpec {
                java_copies: [before.java_copies.as_slice(), &[pid]].concat(),
                ..before.clone()
            };
            if owner != 0
                && let Some(refusal) = self.share_refusal(owner, &after, Some(id))
            {
                tracing::info!(
                    id,
                    pid,
                    uid = owner,
                    "a JVM the session found keeps its frame-pointer walk, without Java \
                     frames: copying its stack would pass the user's share: {refusal}"
                );
                self.counters.jvm_copies_refused += 1;
                continue;
            }
            if let Err(e) = self
                .routes
                .change_target(self.sampler.as_mut(), &before, &after, pid)
            {
                tracing::warn!(
                    id,
                    pid,
                    "cannot copy a JVM's stacks for its Java frames: {e}"
                );
                self.counters.jvm_copies_refused += 1;
                continue;
            }
            tracing::info!(id, pid, "a target became a JVM: its stacks are copied");
            self.counters.jvm_copies_added += 1;
            self.sessions
                .get_mut(&id)
                .expect("the session is running")
                .spec = after;
            if let Some(process) = self.processes.get(pid) {
                self.unwinder.scan_jvm(process, &mut self.process_memory);
            }
        }
    }

    /// Reads the whole code cache of the JVM targets whose stacks `spec`'s session unwinds
    /// from copies (dwarf, or a frame-pointer session's Java copies), before its first
    /// sample: code compiled before the session then names its samples from the first.
    pub(super) fn scan_jvm_targets(&mut self, spec: &SessionSpec) {
        if !self.config.java_frames || spec.system_wide {
            return;
        }
        let pids: Vec<u32> = match spec.call_graph {
            CallGraph::Dwarf { .. } => self.jvm_targets(spec),
            CallGraph::FramePointers => spec.java_copies.clone(),
            CallGraph::None => Vec::new(),
        };
        for pid in pids {
            if let Some(process) = self.processes.get(pid) {
                self.unwinder.scan_jvm(process, &mut self.process_memory);
            }
        }
    }

    /// Finds HotSpot targets of running sessions, and asks those whose samples in code no map
    /// explains pile up for a new perf map.
    pub(super) fn tick_jvms(&mut self, now_ns: u64) {
        let running: Vec<u64> = self.running().map(|s| s.id).collect();
        for id in running {
            self.observe_jvms(id);
            self.copy_new_jvm_stacks(id);
            if !self.jvm_attach(id) {
                continue;
            }
            for pid in self.sessions[&id].held_pids() {
                if self.jvms.is_jvm(pid)
                    && self.codemaps.unexplained_since_snapshot(pid)
                        >= crate::session::jvm::UNEXPLAINED_BEFORE_ASKING
                {
                    self.ask_jvm(pid, now_ns, false);
                }
            }
        }
    }

    /// Asks `pid` for its perf map if it is a JVM that may be asked: at once when `urgent`,
    /// else once the wait its last snapshots call for has passed (the code maps count what
    /// they named).
    pub(super) fn ask_jvm(&mut self, pid: u32, now_ns: u64, urgent: bool) {
        let named = self.codemaps.named_by_snapshots(pid);
        self.jvms.request(pid, now_ns, urgent, named);
    }

    /// A JVM answered a perf map request: the map is read now, as a new snapshot, and samples
    /// it explains are named from it.
    pub(super) fn jvm_answered(&mut self, mut reply: JvmReply) {
        let now = sys::monotonic_ns();
        if self.jvms.answered(&mut reply) {
            self.touch_code_maps(reply.pid);
            self.codemaps.perf_map_rewritten(reply.pid);
            self.advance_code_maps(reply.pid, now);
        }
        self.finalize_ready(now);
    }
}

/// Whether the JVM `pid` runs with `-XX:+PreserveFramePointer`: its compiled frames are then
/// walked by their frame pointers, with no copy. (A JVM `observe_jvms` found says so from the
/// options it read: [`crate::session::jvm::JvmSnapshots::cuts_stacks`].)
fn keeps_frame_pointers(pid: u32) -> bool {
    crate::jvm::options::read(pid)
        .unwrap_or_default()
        .preserve_frame_pointer
}
