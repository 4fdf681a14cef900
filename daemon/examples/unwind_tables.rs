//! Loads the unwind tables of the binaries named on the command line (by default libc,
//! libstdc++, OpenJDK 17's libjvm and pyenv's libpython3.12) the way the daemon does, and
//! prints what each holds and the process's peak RSS before and after:
//!
//! ```text
//! cargo run --release -p vmscoped --example unwind_tables [BINARY...]
//! ```

use std::{fs::File, path::PathBuf, time::Instant};

use vmscoped::{symbolize::Modules, sys::FileId};

fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn main() {
    let home = std::env::var("HOME").unwrap_or_default();
    let mut paths: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    if paths.is_empty() {
        paths = [
            "/usr/lib/x86_64-linux-gnu/libc.so.6".to_owned(),
            "/usr/lib/x86_64-linux-gnu/libstdc++.so.6".to_owned(),
            "/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so".to_owned(),
            format!("{home}/.pyenv/versions/3.12.1/lib/libpython3.12.so.1.0"),
        ]
        .map(PathBuf::from)
        .to_vec();
    }
    let modules = Modules::new();
    let before = status_kib("VmHWM:");
    println!("peak RSS before: {before} KiB");
    let mut total = 0;
    for path in &paths {
        let meta = match std::fs::metadata(path) {
            Ok(meta) => meta,
            Err(e) => {
                println!("{}: {e}", path.display());
                continue;
            }
        };
        let id = modules.register(FileId::from_metadata(&meta), path, || File::open(path));
        let started = Instant::now();
        let module = modules.get(id).expect("just registered");
        match module.unwind_sections(&modules) {
            Ok(tables) => {
                total += tables.section_bytes();
                println!(
                    "{}: {} bytes of {} ({} MiB file), loaded in {:?}",
                    path.display(),
                    tables.section_bytes(),
                    tables.kind(),
                    meta.len() >> 20,
                    started.elapsed()
                );
            }
            Err(e) => println!("{}: {e}", path.display()),
        }
    }
    let after = status_kib("VmHWM:");
    println!(
        "unwind sections held: {} KiB; peak RSS after: {after} KiB (+{} KiB); RSS now: {} KiB",
        total >> 10,
        after.saturating_sub(before),
        status_kib("VmRSS:")
    );
}
