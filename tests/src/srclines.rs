//! The DWARF line fixture (`tests/fixtures/srclines.c`) in the four shapes a binary's debug
//! information comes in, and the lines its markers are on.

use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::OnceLock,
};

use anyhow::{Context, bail};

/// Where the fixture's DWARF is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DebugInfo {
    /// In the binary, DWARF 4.
    Dwarf4,
    /// In the binary, DWARF 5.
    Dwarf5,
    /// In a separate file beside the stripped binary, named by its `.gnu_debuglink`.
    Debuglink,
    /// In a separate file installed as `.build-id/xx/rest.debug` under
    /// [`SrclineFixtures::debug_dir`]; the binary is stripped and has no debuglink.
    BuildIdDir,
}

impl DebugInfo {
    /// Every shape.
    pub const ALL: [DebugInfo; 4] = [
        DebugInfo::Dwarf4,
        DebugInfo::Dwarf5,
        DebugInfo::Debuglink,
        DebugInfo::BuildIdDir,
    ];
}

/// The built fixtures.
#[derive(Debug)]
pub struct SrclineFixtures {
    _dir: tempfile::TempDir,
    /// The debug directory to give the daemon (`--debug-dir`) for [`DebugInfo::BuildIdDir`].
    pub debug_dir: PathBuf,
    dir: PathBuf,
}

impl SrclineFixtures {
    /// The binary of one shape.
    pub fn binary(&self, shape: DebugInfo) -> PathBuf {
        self.dir.join(format!("srclines-{shape:?}").to_lowercase())
    }
}

/// The source file of the fixture.
pub fn srclines_source() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/srclines.c")
}

/// The line of the fixture's source that holds `marker` (a comment), 1-based. Panics if no
/// line or several do.
pub fn marker_line(marker: &str) -> u32 {
    let source = std::fs::read_to_string(srclines_source()).expect("read srclines.c");
    let lines: Vec<u32> = source
        .lines()
        .enumerate()
        .filter(|(_, line)| line.contains(&format!("/* {marker} */")))
        .map(|(i, _)| i as u32 + 1)
        .collect();
    assert_eq!(lines.len(), 1, "one line marked {marker}: {lines:?}");
    lines[0]
}

/// Builds the fixtures once per test process (gcc and binutils are installed by `cargo xtask
/// setup`).
pub fn srcline_fixtures() -> &'static SrclineFixtures {
    static FIXTURES: OnceLock<SrclineFixtures> = OnceLock::new();
    FIXTURES.get_or_init(|| build().unwrap_or_else(|e| panic!("{e:#}")))
}

fn run(program: &str, args: &[&Path]) -> anyhow::Result<()> {
    let out = Command::new(program)
        .args(args)
        .output()
        .with_context(|| format!("cannot run {program} (binutils)"))?;
    if !out.status.success() {
        bail!(
            "{program} {args:?} failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

fn build() -> anyhow::Result<SrclineFixtures> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    let dir = crate::shared_tempdir();
    let debug_dir = dir.path().join("debug");
    let fixtures = SrclineFixtures {
        debug_dir: debug_dir.clone(),
        dir: dir.path().to_path_buf(),
        _dir: dir,
    };
    for shape in DebugInfo::ALL {
        let binary = fixtures.binary(shape);
        let out = binary.to_str().context("non-UTF-8 temporary path")?;
        // After gcc_fixture's -O1 and -fno-inline: -O2 wins, and always_inline is inlined
        // whatever -fno-inline says.
        let dwarf = if shape == DebugInfo::Dwarf4 {
            "-gdwarf-4"
        } else {
            "-gdwarf-5"
        };
        let define = format!("-DSHAPE=\"{shape:?}\"");
        crate::gcc_fixture(&src, &["-O2", dwarf, &define, "-o", out, "srclines.c"])?;
        let debug = binary.with_extension("debug");
        match shape {
            DebugInfo::Dwarf4 | DebugInfo::Dwarf5 => {}
            DebugInfo::Debuglink => {
                run(
                    "objcopy",
                    &[Path::new("--only-keep-debug"), &binary, &debug],
                )?;
                run("strip", &[&binary])?;
                let link = format!("--add-gnu-debuglink={}", debug.display());
                run("objcopy", &[Path::new(&link), &binary])?;
            }
            DebugInfo::BuildIdDir => {
                let bytes = std::fs::read(&binary)?;
                let symbols = vmscope_parse::elf::ElfSymbols::parse(&bytes[..])?;
                let id: String = symbols
                    .build_id()
                    .context("gcc_fixture links with a build id")?
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect();
                let installed = debug_dir
                    .join(".build-id")
                    .join(&id[..2])
                    .join(format!("{}.debug", &id[2..]));
                std::fs::create_dir_all(installed.parent().expect("a parent"))?;
                run(
                    "objcopy",
                    &[Path::new("--only-keep-debug"), &binary, &installed],
                )?;
                run("strip", &[&binary])?;
            }
        }
    }
    Ok(fixtures)
}
