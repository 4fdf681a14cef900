//! Where a thread's credentials and ids are in the running kernel, from its BTF
//! (`/sys/kernel/btf/vmlinux`).
//!
//! The sampler compares the credentials of every thread it samples for a user's session with
//! those the daemon checked (see [`vmscope_common::GUARD_CREDS`]); the switch program reads the
//! ids of the thread coming back to its CPU, which is not the current one. Rust BPF programs get no CO-RE
//! relocations, and offsets compiled in would be those of the build host's kernel; so the daemon
//! reads them here, from the kernel it runs on, and hands them to the program in its `CONFIG`
//! map. aya parses BTF too, but keeps its type lookups to itself.
//!
//! Only what this needs is parsed: the header, the type records (each kind's length, to walk
//! them) and the members of two structs. Anything malformed is an error, never a guess.

use vmscope_common::Creds;

/// Where the kernel's BTF is.
pub const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

/// Byte offsets of what the kernel programs read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaskOffsets {
    /// `real_cred` in `struct task_struct`: the objective credentials, which `/proc/PID/status`
    /// shows and ptrace checks.
    pub task_real_cred: u32,
    /// `uid` in `struct cred`, followed by `gid, suid, sgid, euid, egid, fsuid, fsgid`.
    pub cred_ids: u32,
    /// `cap_permitted` in `struct cred`.
    pub cred_cap_permitted: u32,
    /// `pid` in `struct task_struct`: the thread id.
    pub task_pid: u32,
    /// `tgid` in `struct task_struct`: the process id.
    pub task_tgid: u32,
}

/// Why the offsets could not be found.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BtfError {
    /// Not BTF, or a header or type record that runs past the data.
    #[error("malformed BTF: {0}")]
    Malformed(&'static str),
    /// A type kind this parser does not know the length of (a newer kernel's).
    #[error("BTF type kind {0} is unknown")]
    UnknownKind(u32),
    /// The struct or member is not there, or not as the sampler reads it.
    #[error("the kernel's BTF has no {0}")]
    Missing(&'static str),
}

const MAGIC: u16 = 0xeb9f;
const KIND_STRUCT: u32 = 4;
/// `btf_type`: name_off, info, size/type.
const TYPE_LEN: usize = 12;
/// `btf_member`: name_off, type, offset.
const MEMBER_LEN: usize = 12;

/// The ids of `struct cred` in their order there, with their names.
const IDS: [&str; 8] = [
    "uid", "gid", "suid", "sgid", "euid", "egid", "fsuid", "fsgid",
];

/// Finds [`TaskOffsets`] in BTF data in the host's byte order.
pub fn task_offsets(btf: &[u8]) -> Result<TaskOffsets, BtfError> {
    let u16_at = |at: usize| {
        btf.get(at..at + 2)
            .map(|b| u16::from_ne_bytes([b[0], b[1]]))
    };
    let u32_at = |at: usize| {
        btf.get(at..at + 4)
            .map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
    };
    if u16_at(0) != Some(MAGIC) {
        return Err(BtfError::Malformed("no BTF magic (or another byte order)"));
    }
    let header = |at| u32_at(at).ok_or(BtfError::Malformed("header cut short"));
    let hdr_len = header(4)? as usize;
    let (type_off, type_len) = (header(8)? as usize, header(12)? as usize);
    let (str_off, str_len) = (header(16)? as usize, header(20)? as usize);
    let section = |off: usize, len: usize, what| {
        hdr_len
            .checked_add(off)
            .and_then(|start| btf.get(start..start.checked_add(len)?))
            .ok_or(BtfError::Malformed(what))
    };
    let types = section(type_off, type_len, "type section out of bounds")?;
    let strings = section(str_off, str_len, "string section out of bounds")?;
    let name = |off: u32| -> &[u8] {
        let rest = strings.get(off as usize..).unwrap_or_default();
        &rest[..rest.iter().position(|&b| b == 0).unwrap_or(rest.len())]
    };
    let word = |bytes: &[u8], at: usize| {
        bytes
            .get(at..at + 4)
            .map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
            .ok_or(BtfError::Malformed("type record cut short"))
    };

    let (mut task, mut cred) = (None, None);
    let mut at = 0;
    while at < types.len() && (task.is_none() || cred.is_none()) {
        let (name_off, info) = (word(types, at)?, word(types, at + 4)?);
        let (kind, vlen) = ((info >> 24) & 0x1f, (info & 0xffff) as usize);
        let kind_flag = info >> 31 == 1;
        let extra = match kind {
            // INT, VAR, DECL_TAG: one word.
            1 | 14 | 17 => 4,
            // PTR, FWD, TYPEDEF, VOLATILE, CONST, RESTRICT, FUNC, FLOAT, TYPE_TAG.
            2 | 7..=12 | 16 | 18 => 0,
            // ARRAY: btf_array.
            3 => 12,
            // STRUCT, UNION, DATASEC, ENUM64: 12 bytes a member.
            4 | 5 | 15 | 19 => 12 * vlen,
            // ENUM, FUNC_PROTO: 8 bytes a member.
            6 | 13 => 8 * vlen,
            other => return Err(BtfError::UnknownKind(other)),
        };
        let members_at = at + TYPE_LEN;
        let end = members_at + extra;
        let record = types
            .get(at..end)
            .ok_or(BtfError::Malformed("type record cut short"))?;
        if kind == KIND_STRUCT && vlen > 0 {
            let wanted = match name(name_off) {
                b"task_struct" if task.is_none() => Some(&mut task),
                b"cred" if cred.is_none() => Some(&mut cred),
                _ => None,
            };
            if let Some(slot) = wanted {
                let mut members = Vec::with_capacity(vlen);
                for m in record[TYPE_LEN..].chunks_exact(MEMBER_LEN) {
                    let offset = word(m, 8)?;
                    // With kind_flag, the top 8 bits are a bitfield's size.
                    let bits = if kind_flag {
                        offset & 0xff_ffff
                    } else {
                        offset
                    };
                    members.push((name(word(m, 0)?).to_vec(), bits));
                }
                *slot = Some(members);
            }
        }
        at = end;
    }
    let task = task.ok_or(BtfError::Missing("struct task_struct"))?;
    let cred = cred.ok_or(BtfError::Missing("struct cred"))?;
    // A member's byte offset; a member in the middle of a byte is not one the sampler reads.
    let offset = |members: &[(Vec<u8>, u32)], member: &str, what| {
        members
            .iter()
            .find(|(name, _)| name == member.as_bytes())
            .map(|&(_, bits)| bits)
            .filter(|bits| bits % 8 == 0)
            .map(|bits| bits / 8)
            .ok_or(BtfError::Missing(what))
    };
    let task_real_cred = offset(&task, "real_cred", "task_struct.real_cred")?;
    let cred_ids = offset(&cred, IDS[0], "cred.uid")?;
    for (i, id) in IDS.iter().enumerate() {
        if offset(&cred, id, "cred ids")? != cred_ids + 4 * i as u32 {
            return Err(BtfError::Missing(
                "cred ids in the order uid, gid, suid, ... fsgid",
            ));
        }
    }
    let cred_cap_permitted = offset(&cred, "cap_permitted", "cred.cap_permitted")?;
    let task_pid = offset(&task, "pid", "task_struct.pid")?;
    let task_tgid = offset(&task, "tgid", "task_struct.tgid")?;
    // The program reads these as one block and one word, and takes 0 for "unknown".
    const _: () = assert!(std::mem::size_of::<Creds>() == 8 * 4 + 8);
    if [
        task_real_cred,
        cred_ids,
        cred_cap_permitted,
        task_pid,
        task_tgid,
    ]
    .contains(&0)
    {
        return Err(BtfError::Missing(
            "credentials or ids away from a struct's start",
        ));
    }
    Ok(TaskOffsets {
        task_real_cred,
        cred_ids,
        cred_cap_permitted,
        task_pid,
        task_tgid,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// BTF with the given structs: (name, [(member, bit offset)]), each member of type 0.
    fn btf(structs: &[(&str, &[(&str, u32)])]) -> Vec<u8> {
        let mut strings = vec![0u8];
        let mut add = |s: &str| {
            let at = strings.len() as u32;
            strings.extend(s.as_bytes());
            strings.push(0);
            at
        };
        let mut types = Vec::new();
        let mut push = |w: u32| types.extend(w.to_ne_bytes());
        // Records of other kinds first, as in a real kernel's BTF: an INT and a FUNC_PROTO.
        let int = add("int");
        for w in [int, 1 << 24, 4, 32] {
            push(w);
        }
        for w in [0, (13 << 24) | 1, 1, 0, 1] {
            push(w);
        }
        for (name, members) in structs {
            let name = add(name);
            push(name);
            push((KIND_STRUCT << 24) | members.len() as u32);
            push(4096);
            for (member, bits) in *members {
                let member = add(member);
                push(member);
                push(1);
                push(*bits);
            }
        }
        let mut out = Vec::new();
        out.extend(MAGIC.to_ne_bytes());
        out.extend([1u8, 0]);
        for w in [
            24u32,
            0,
            types.len() as u32,
            types.len() as u32,
            strings.len() as u32,
        ] {
            out.extend(w.to_ne_bytes());
        }
        out.extend(types);
        out.extend(strings);
        out
    }

    const TASK: (&str, &[(&str, u32)]) = (
        "task_struct",
        &[("pid", 64), ("tgid", 96), ("real_cred", 8 * 1000)],
    );
    const CRED: (&str, &[(&str, u32)]) = (
        "cred",
        &[
            ("usage", 0),
            ("uid", 32),
            ("gid", 64),
            ("suid", 96),
            ("sgid", 128),
            ("euid", 160),
            ("egid", 192),
            ("fsuid", 224),
            ("fsgid", 256),
            ("securebits", 288),
            ("cap_inheritable", 320),
            ("cap_permitted", 384),
        ],
    );

    #[test]
    fn the_offsets_are_found_among_other_types() {
        let offsets = task_offsets(&btf(&[("file", &[("f_mode", 0)]), TASK, CRED])).unwrap();
        assert_eq!(
            offsets,
            TaskOffsets {
                task_real_cred: 1000,
                cred_ids: 4,
                cred_cap_permitted: 48,
                task_pid: 8,
                task_tgid: 12,
            }
        );
    }

    #[test]
    fn the_running_kernels_btf_has_them() {
        let data = std::fs::read(VMLINUX_BTF).expect("the kernel's BTF (the sampler needs it)");
        let offsets = task_offsets(&data).unwrap();
        // Every kernel since credentials moved to struct cred (2.6.29) starts it with a
        // reference count, then the ids.
        assert!(
            offsets.cred_ids >= 4 && offsets.cred_ids <= 16,
            "{offsets:?}"
        );
        assert!(
            offsets.cred_cap_permitted > offsets.cred_ids + 28,
            "{offsets:?}"
        );
        assert!(offsets.task_real_cred > 64, "{offsets:?}");
        // pid_t pid, pid_t tgid: side by side since 2.6.
        assert_eq!(offsets.task_tgid, offsets.task_pid + 4, "{offsets:?}");
    }

    #[test]
    fn a_missing_or_moved_member_is_an_error() {
        let no_task = btf(&[CRED]);
        assert_eq!(
            task_offsets(&no_task),
            Err(BtfError::Missing("struct task_struct"))
        );
        // euid and egid trade places.
        let mut ids: Vec<(&str, u32)> = CRED.1.to_vec();
        ids[5].1 = 192;
        ids[6].1 = 160;
        let swapped = btf(&[TASK, ("cred", &ids)]);
        assert!(matches!(task_offsets(&swapped), Err(BtfError::Missing(_))));
        let bitfield = btf(&[("task_struct", &[("real_cred", 8 * 1000 + 3)]), CRED]);
        assert_eq!(
            task_offsets(&bitfield),
            Err(BtfError::Missing("task_struct.real_cred"))
        );
    }

    #[test]
    fn broken_data_is_an_error_not_a_panic() {
        let good = btf(&[TASK, CRED]);
        assert!(task_offsets(&good).is_ok());
        for len in 0..good.len() {
            assert!(task_offsets(&good[..len]).is_err(), "cut at {len}");
        }
        let mut unknown = good.clone();
        // The first type's info word: kind 31.
        unknown[24 + 4..24 + 8].copy_from_slice(&(31u32 << 24).to_ne_bytes());
        assert_eq!(task_offsets(&unknown), Err(BtfError::UnknownKind(31)));
        for at in 0..good.len() {
            let mut bad = good.clone();
            bad[at] ^= 0xff;
            let _ = task_offsets(&bad);
        }
    }
}
