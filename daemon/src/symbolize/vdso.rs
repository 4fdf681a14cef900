//! The vDSO: the kernel's small shared object mapped into every process (`clock_gettime`,
//! `gettimeofday`...).
//!
//! Every process maps the same image, so the daemon parses its own copy once: the ELF image
//! starts at `getauxval(AT_SYSINFO_EHDR)` and spans the `[vdso]` line of `/proc/self/maps`.
//! Samples in another process's vDSO are normalised to an offset in the image and resolved
//! against this copy.

use vmscope_parse::{elf::ElfSymbols, maps};

use crate::sys;

/// Parses the daemon's own vDSO image; the error is a reason for reports.
pub fn load() -> Result<ElfSymbols, String> {
    ElfSymbols::parse(image()?).map_err(|e| format!("cannot parse the vDSO: {e}"))
}

/// The daemon's own vDSO image, the same as every (64-bit) process's on this kernel.
pub fn image() -> Result<&'static [u8], String> {
    // SAFETY: getauxval has no preconditions; it returns 0 when the entry is absent.
    let base = unsafe { libc::getauxval(libc::AT_SYSINFO_EHDR) };
    if base == 0 {
        return Err("this kernel maps no vDSO".into());
    }
    let text = sys::read_bounded(
        std::path::Path::new("/proc/self/maps"),
        sys::MAX_PROC_FILE_BYTES,
    )
    .map_err(|e| format!("cannot read /proc/self/maps: {e}"))?;
    let mapping = maps::parse_maps(&text)
        .entries
        .into_iter()
        .find(|e| e.start == base)
        .ok_or("the vDSO is not in /proc/self/maps")?;
    let len = (mapping.end - mapping.start) as usize;
    // SAFETY: the kernel maps the vDSO readable at `base` for `len` bytes for the whole life of
    // the process, and never changes it.
    Ok(unsafe { std::slice::from_raw_parts(base as *const u8, len) })
}

#[cfg(test)]
mod tests {
    #[test]
    fn own_vdso_has_clock_gettime() {
        let vdso = super::load().unwrap();
        // Find clock_gettime by scanning: its address differs per kernel build.
        let found = (0..0x4000u64)
            .filter_map(|offset| vdso.file_offset_to_vaddr(offset))
            .filter_map(|vaddr| vdso.lookup(vaddr))
            .any(|s| s.name.contains("clock_gettime"));
        assert!(found, "no clock_gettime symbol in the vDSO");
    }
}
