//! The code map files a process maps: jitdump files (perf's convention: the runtime maps its
//! file, and the mapping says where it is) and vmscope's own. The process table finds them in a
//! process's mappings (`process/`); the code map registry reads them (`codemap/`).

use std::path::{Path, PathBuf};

use crate::sys::FileId;

/// Where a code map file of a process is, as its mappings show it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MappedCodeMapFile {
    /// Path as mapped.
    pub path: PathBuf,
    /// A mapping of it, to open it through /proc/PID/map_files.
    pub start: u64,
    /// End of that mapping.
    pub end: u64,
    /// Its identity.
    pub id: FileId,
    /// jitdump (`jit-PID.dump`) or vmscope (`vmscope-PID.codemap`).
    pub kind: MappedFileKind,
}

/// The two kinds of code map files found through mappings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MappedFileKind {
    /// Linux perf's jitdump.
    Jitdump,
    /// vmscope's own format.
    CodeMap,
}

impl MappedFileKind {
    /// The kind of a mapped file, by its name.
    pub fn of(path: &Path) -> Option<MappedFileKind> {
        let name = path.file_name()?.to_str()?;
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if let Some(pid) = name
            .strip_prefix("jit-")
            .and_then(|n| n.strip_suffix(".dump"))
            && digits(pid)
        {
            return Some(MappedFileKind::Jitdump);
        }
        if let Some(pid) = name
            .strip_prefix("vmscope-")
            .and_then(|n| n.strip_suffix(".codemap"))
            && digits(pid)
        {
            return Some(MappedFileKind::CodeMap);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapped_code_map_files_are_known_by_name() {
        let kind = |p: &str| MappedFileKind::of(Path::new(p));
        assert_eq!(kind("/home/u/jit-4242.dump"), Some(MappedFileKind::Jitdump));
        assert_eq!(
            kind("/tmp/vmscope-7.codemap"),
            Some(MappedFileKind::CodeMap)
        );
        assert_eq!(kind("/tmp/jit-.dump"), None);
        assert_eq!(kind("/tmp/jit-42.dump.old"), None);
        assert_eq!(kind("/usr/lib/libjit-1.dump"), None);
        assert_eq!(kind("/tmp/vmscope-x.codemap"), None);
    }
}
