//! The DWARF line benchmark's worker (`cargo xtask bench --lines` runs it): loads a binary's
//! line tables with [`vmscope_parse::dwarf`] and resolves addresses, as the daemon does.
//!
//! ```text
//! dwarf_lines pick BINARY N       print N addresses inside BINARY's functions, one per line
//! dwarf_lines resolve BINARY      resolve the addresses on stdin; print what
//!                                 `addr2line -a -f -i` prints, then the timings on stderr
//! ```

use std::{
    io::{BufRead as _, BufWriter, Write as _},
    sync::Arc,
    time::Instant,
};

use object::read::ReadCache;
use vmscope_parse::{
    dwarf::{SourceLines, paged::PositionedFile},
    elf::ElfSymbols,
};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1..).unwrap_or_default() {
        [mode, binary, n] if mode == "pick" => pick(binary, n.parse()?),
        [mode, binary] if mode == "resolve" => resolve(binary),
        _ => Err("usage: dwarf_lines pick BINARY N | resolve BINARY".into()),
    }
}

/// Addresses spread evenly over the binary's sized functions: a mid-function address each.
fn pick(binary: &str, n: usize) -> Result<(), Box<dyn std::error::Error>> {
    let bytes = std::fs::read(binary)?;
    let symbols = ElfSymbols::parse(&bytes[..])?;
    let functions: Vec<(u64, u64)> = symbols
        .symbols()
        .filter(|s| s.size >= 16)
        .map(|s| (s.start, s.size))
        .collect();
    if functions.is_empty() {
        return Err("no sized function symbols".into());
    }
    let out = std::io::stdout();
    let mut out = BufWriter::new(out.lock());
    for i in 0..n {
        let (start, size) = functions[i * functions.len() / n];
        // Vary the offset too, so that lines inside functions are exercised, not entries.
        let offset = (size * ((i as u64 * 7) % 10 + 1) / 11).min(size - 1);
        writeln!(out, "{:#x}", start + offset)?;
    }
    Ok(())
}

fn resolve(binary: &str) -> Result<(), Box<dyn std::error::Error>> {
    let addresses: Vec<u64> = std::io::stdin()
        .lock()
        .lines()
        .map(|line| -> Result<u64, Box<dyn std::error::Error>> {
            let line = line?;
            Ok(u64::from_str_radix(
                line.trim().trim_start_matches("0x"),
                16,
            )?)
        })
        .collect::<Result<_, _>>()?;
    let start = Instant::now();
    let file = std::fs::File::open(binary)?;
    let pages = Arc::new(PositionedFile(file.try_clone()?));
    let cache = ReadCache::new(file);
    let mut lines = SourceLines::parse(&cache, pages, u64::MAX, None)?;
    drop(cache);
    let loaded = start.elapsed();
    let out = std::io::stdout();
    let mut out = BufWriter::new(out.lock());
    let mut frames_found = 0usize;
    let lookups = Instant::now();
    for &address in &addresses {
        writeln!(out, "{address:#018x}")?;
        let frames = lines.lookup(address)?;
        if frames.is_empty() {
            writeln!(out, "??\n??:0")?;
        }
        frames_found += frames.len();
        for frame in frames {
            writeln!(
                out,
                "{}\n{}:{}",
                frame.function.as_deref().unwrap_or("??"),
                frame.file.as_deref().unwrap_or("??"),
                frame.line
            )?;
        }
    }
    out.flush()?;
    let resolved = lookups.elapsed();
    eprintln!(
        "load_ms={:.1} resolve_ms={:.1} held_bytes={} read_bytes={} frames={frames_found}",
        loaded.as_secs_f64() * 1e3,
        resolved.as_secs_f64() * 1e3,
        lines.owned_bytes(),
        lines.pages().1
    );
    Ok(())
}
