//! Where a report is written.
//!
//! Reports compose like the output of `perf stat`, `strace` and `time`: with `record -- CMD`
//! the command owns standard output (`vmscope record -- gzip -c f > f.gz` must leave a valid
//! gzip stream), so the report goes to standard error unless `-o FILE` names a file; reports
//! of running processes or of the whole system have standard output to themselves.

use std::{
    fs::{File, OpenOptions},
    io::{self, BufWriter, IsTerminal as _, Write},
    path::{Path, PathBuf},
};

use anyhow::Context as _;

use crate::report::Format;

/// Where a report goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Destination {
    /// Standard output.
    Stdout,
    /// Standard error: a recorded command's standard output is its own.
    Stderr,
    /// A file, created or truncated.
    File(PathBuf),
}

impl Destination {
    /// The destination for `-o PATH` (`-` is standard output), or without it for a report that
    /// must not share standard output with a recorded command (`command_owns_stdout`).
    pub fn choose(output: Option<&Path>, command_owns_stdout: bool) -> Destination {
        match output {
            Some(path) if path == Path::new("-") => Destination::Stdout,
            Some(path) => Destination::File(path.to_path_buf()),
            None if command_owns_stdout => Destination::Stderr,
            None => Destination::Stdout,
        }
    }

    /// Whether the destination is a terminal (a file never counts, even a tty's path).
    pub fn is_terminal(&self) -> bool {
        match self {
            Destination::Stdout => io::stdout().is_terminal(),
            Destination::Stderr => io::stderr().is_terminal(),
            Destination::File(_) => false,
        }
    }

    /// Refuses a binary `format` (pprof) for a terminal, before anything is recorded: it would
    /// garble the screen and be lost.
    pub fn check_format(&self, format: Format) -> anyhow::Result<()> {
        match binary_on_terminal(format, self.is_terminal()) {
            Some(message) => anyhow::bail!(message),
            None => Ok(()),
        }
    }

    /// Opens the destination. A file is opened (created if need be) now, before any
    /// recording, so that a path that cannot be written fails at once rather than after the
    /// work is done; it is emptied only when the report is written, so that a run that fails
    /// (no such command, no such session) leaves an earlier report there as it was.
    pub fn open(&self) -> anyhow::Result<Box<dyn Write>> {
        Ok(match self {
            Destination::Stdout => Box::new(io::stdout().lock()),
            Destination::Stderr => Box::new(io::stderr().lock()),
            Destination::File(path) => {
                let file = OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(path)
                    .with_context(|| format!("cannot write the report to {}", path.display()))?;
                Box::new(BufWriter::new(TruncatedOnFirstWrite {
                    file,
                    truncated: false,
                }))
            }
        })
    }
}

/// Why `format` must not go to a terminal, if it must not.
fn binary_on_terminal(format: Format, terminal: bool) -> Option<String> {
    (format.is_binary() && terminal).then(|| {
        "--format pprof writes a binary (gzipped) file, not for a terminal: give -o FILE \
         (e.g. -o profile.pb.gz), or redirect the output to a file or a pipe"
            .to_owned()
    })
}

/// A file emptied by its first write.
struct TruncatedOnFirstWrite {
    file: File,
    truncated: bool,
}

impl Write for TruncatedOnFirstWrite {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if !self.truncated {
            self.file.set_len(0)?;
            self.truncated = true;
        }
        self.file.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_keep_stdout_and_dash_means_stdout() {
        let file = Path::new("p.json");
        for (output, command, expected) in [
            (None, true, Destination::Stderr),
            (None, false, Destination::Stdout),
            (Some(file), true, Destination::File(file.to_path_buf())),
            (Some(file), false, Destination::File(file.to_path_buf())),
            (Some(Path::new("-")), true, Destination::Stdout),
            (
                Some(Path::new("./-")),
                true,
                Destination::File("./-".into()),
            ),
        ] {
            assert_eq!(Destination::choose(output, command), expected);
        }
    }

    #[test]
    fn a_report_file_is_emptied_only_by_a_new_report() {
        let dir = std::env::temp_dir().join(format!("vmscope-output-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("report.txt");
        std::fs::write(&path, "an earlier, longer report\n").unwrap();
        let destination = Destination::File(path.clone());
        // Opened, but the run failed before writing: the earlier report stays.
        drop(destination.open().unwrap());
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "an earlier, longer report\n"
        );
        let mut out = destination.open().unwrap();
        out.write_all(b"new\n").unwrap();
        out.flush().unwrap();
        drop(out);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new\n");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn pprof_is_refused_for_terminals_only() {
        let refusal = binary_on_terminal(Format::Pprof, true).expect("refused on a terminal");
        assert!(refusal.contains("-o FILE"), "{refusal}");
        assert_eq!(binary_on_terminal(Format::Pprof, false), None);
        for format in [
            Format::Text,
            Format::Json,
            Format::Folded,
            Format::Flamegraph,
        ] {
            assert_eq!(binary_on_terminal(format, true), None, "{format:?}");
        }
        assert!(
            Destination::File("p.pb.gz".into())
                .check_format(Format::Pprof)
                .is_ok()
        );
    }

    #[test]
    fn an_unwritable_file_fails_before_anything_is_recorded() {
        let err = Destination::File("/nonexistent-dir/report.txt".into())
            .open()
            .err()
            .expect("the directory does not exist");
        assert!(
            format!("{err:#}").contains("cannot write the report to /nonexistent-dir/report.txt"),
            "{err:#}"
        );
    }
}
