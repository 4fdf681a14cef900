//! A session's exact call counts of native functions (`record --count 'libc.so.6:malloc'`):
//! one uprobe per function and target (`bpf/call_counts.rs`), attached at the start, read when
//! a profile is asked for, read a last time and detached at the stop.
//!
//! The module of a function is found as the target sees it: a binary of that file name among
//! the mappings the process table knows (the held child of `record -- CMD` maps the libraries
//! `vmscope` does, the same files), attached through the registry's own open file so that the
//! file counted is the one mapped; else as the dynamic linker would (`ld.so.cache`, aya's
//! lookup). An absolute path is taken only if the session's owner may read it, so that the
//! daemon parses no file for a user that the user could not.

use std::{os::unix::fs::MetadataExt as _, path::PathBuf};

use vmscope_common::MAX_COUNT_SLOTS;
use vmscope_model::CallCount;

use super::request::CountedFunction;
use crate::bpf::SamplerControl;

/// Most of the kernel's counter slots one user other than root holds at once: a quarter, so
/// that no user's counts can leave the others none.
pub const MAX_USER_SLOTS: usize = MAX_COUNT_SLOTS as usize / 4;

/// The kernel's counter slots not in use, shared by every session, and those each user holds.
#[derive(Debug)]
pub struct CountSlots {
    free: Vec<u32>,
    held: std::collections::HashMap<u32, usize>,
}

impl Default for CountSlots {
    fn default() -> Self {
        CountSlots {
            free: (0..MAX_COUNT_SLOTS).rev().collect(),
            held: Default::default(),
        }
    }
}

impl CountSlots {
    /// A slot for `uid`, or why there is none.
    fn take(&mut self, uid: u32) -> Result<u32, String> {
        let held = self.held.get(&uid).copied().unwrap_or(0);
        if uid != 0 && held >= MAX_USER_SLOTS {
            return Err(format!(
                "uid {uid} counts {held} functions in its sessions, the most one user may"
            ));
        }
        let slot = self.free.pop().ok_or_else(|| {
            format!(
                "the daemon counts at most {MAX_COUNT_SLOTS} functions at once, over every session"
            )
        })?;
        *self.held.entry(uid).or_default() += 1;
        Ok(slot)
    }

    /// Gives `uid`'s `slot` back.
    fn give(&mut self, uid: u32, slot: u32) {
        self.free.push(slot);
        if let Some(held) = self.held.get_mut(&uid) {
            *held = held.saturating_sub(1);
            if *held == 0 {
                self.held.remove(&uid);
            }
        }
    }
}

/// One function in one target.
#[derive(Debug, Clone)]
struct Counted {
    asked: String,
    pid: u32,
    path: String,
    slot: Option<u32>,
    calls: u64,
    note: String,
}

/// A session's counted functions.
#[derive(Debug, Default)]
pub struct CallCounts {
    entries: Vec<Counted>,
    /// The session's owner, whose slots they are.
    uid: u32,
}

impl CallCounts {
    /// Attaches a counter for each of `functions` in each of `pids`, for a session of `uid`;
    /// `mapped(pid, name)` finds the binary of file name `name` that `pid` maps. What cannot be
    /// counted is noted, never fatal: the session samples as asked.
    pub fn start(
        functions: &[CountedFunction],
        pids: &[u32],
        uid: u32,
        mapped: impl Fn(u32, &str) -> Option<ModuleFile>,
        sampler: &mut dyn SamplerControl,
        slots: &mut CountSlots,
    ) -> CallCounts {
        let mut entries = Vec::new();
        for &pid in pids {
            for function in functions {
                let mut counted = Counted {
                    asked: function.asked.clone(),
                    pid,
                    path: String::new(),
                    slot: None,
                    calls: 0,
                    note: String::new(),
                };
                let attached =
                    resolve(&function.module, uid, |name| mapped(pid, name)).and_then(|file| {
                        counted.path = file.shown.clone();
                        let slot = slots.take(uid)?;
                        let file = (file.open.as_path(), file.shown.as_str());
                        sampler
                            .attach_count(slot, file, &function.function, pid)
                            .map(|()| slot)
                            .map_err(|e| {
                                slots.give(uid, slot);
                                e.to_string()
                            })
                    });
                match attached {
                    Ok(slot) => counted.slot = Some(slot),
                    Err(why) => counted.note = why,
                }
                if !counted.note.is_empty() {
                    tracing::info!(pid, function = %counted.asked, why = %counted.note, "not counted");
                }
                entries.push(counted);
            }
        }
        CallCounts { entries, uid }
    }

    /// Whether it counts anything.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Reads the counts so far.
    pub fn refresh(&mut self, sampler: &dyn SamplerControl) {
        for e in &mut self.entries {
            if let Some(slot) = e.slot {
                match sampler.read_count(slot) {
                    Ok(calls) => e.calls = calls,
                    Err(err) => e.note = err.to_string(),
                }
            }
        }
    }

    /// Reads the counts a last time and gives the slots back.
    pub fn stop(&mut self, sampler: &mut dyn SamplerControl, slots: &mut CountSlots) {
        self.refresh(sampler);
        for e in &mut self.entries {
            if let Some(slot) = e.slot.take() {
                sampler.detach_count(slot);
                slots.give(self.uid, slot);
            }
        }
    }

    /// The counts as the model shows them.
    pub fn to_model(&self) -> Vec<CallCount> {
        self.entries
            .iter()
            .map(|e| CallCount {
                function: e.asked.clone(),
                pid: e.pid,
                path: e.path.clone(),
                calls: e.calls,
                note: e.note.clone(),
            })
            .collect()
    }
}

/// Where to attach a module's uprobe: the path the kernel opens, and the path reports show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModuleFile {
    /// What the kernel and the symbol lookup open.
    pub open: PathBuf,
    /// What the report says.
    pub shown: String,
}

/// The file to attach `module`'s uprobe to, for a session of `uid`: an absolute path the user
/// may read, else the binary of that file name the target maps (`mapped`, from the mappings the
/// process table read through the access threads), else the bare name, for the dynamic
/// linker's cache.
fn resolve(
    module: &str,
    uid: u32,
    mapped: impl Fn(&str) -> Option<ModuleFile>,
) -> Result<ModuleFile, String> {
    if module.starts_with('/') {
        let meta = std::fs::metadata(module).map_err(|e| format!("{module}: {e}"))?;
        let readable = uid == 0 || meta.uid() == uid || meta.mode() & 0o004 != 0;
        if !meta.is_file() || !readable {
            return Err(format!(
                "{module} is not a file its owner's session may read"
            ));
        }
        return Ok(ModuleFile {
            open: PathBuf::from(module),
            shown: module.to_owned(),
        });
    }
    Ok(mapped(module).unwrap_or_else(|| ModuleFile {
        open: PathBuf::from(module),
        shown: module.to_owned(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_module_is_the_mapped_binary_else_the_linkers_else_a_readable_path() {
        let held = ModuleFile {
            open: PathBuf::from("/proc/self/fd/7"),
            shown: "/usr/lib/x86_64-linux-gnu/libc.so.6".to_owned(),
        };
        assert_eq!(
            resolve("libc.so.6", 1000, |name| (name == "libc.so.6")
                .then(|| held.clone())),
            Ok(held)
        );
        assert_eq!(
            resolve("libz.so.1", 1000, |_| None).unwrap().open,
            PathBuf::from("libz.so.1")
        );
        assert_eq!(
            resolve("/etc/shadow", 1000, |_| None),
            Err("/etc/shadow is not a file its owner's session may read".to_owned())
        );
        assert!(
            resolve("/etc/shadow", 0, |_| None).is_ok(),
            "root may read it"
        );
    }

    #[test]
    fn a_user_holds_a_quarter_of_the_slots_at_most_and_root_any() {
        let mut slots = CountSlots::default();
        let taken: Vec<u32> = (0..MAX_USER_SLOTS)
            .map(|_| slots.take(1000).unwrap())
            .collect();
        let refused = slots.take(1000).unwrap_err();
        assert!(refused.contains("the most one user may"), "{refused}");
        // Another user, and root, still have theirs.
        assert!(slots.take(1001).is_ok());
        for _ in 0..MAX_COUNT_SLOTS as usize - MAX_USER_SLOTS - 1 {
            slots.take(0).unwrap();
        }
        assert!(slots.take(0).unwrap_err().contains("at most 256"));
        for slot in taken {
            slots.give(1000, slot);
        }
        assert!(slots.take(1000).is_ok());
    }
}
