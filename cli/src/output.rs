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
    /// work is done; a regular file is emptied only when the report is written, so that a run
    /// that fails (no such command, no such session) leaves an earlier report there as it was.
    /// Anything else that can be opened for writing (`/dev/null`, a FIFO, a terminal's device)
    /// is written as it is: it has no length to cut. Errors name the path.
    pub fn open(&self) -> anyhow::Result<Box<dyn Write>> {
        Ok(match self {
            Destination::Stdout => Box::new(io::stdout().lock()),
            Destination::Stderr => Box::new(io::stderr().lock()),
            Destination::File(path) => {
                let cannot = || format!("cannot write the report to {}", path.display());
                let file = OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(path)
                    .with_context(cannot)?;
                let regular = file.metadata().with_context(cannot)?.is_file();
                Box::new(BufWriter::new(ReportFile {
                    file,
                    path: path.clone(),
                    truncate: regular,
                }))
            }
        })
    }
}

/// Whether `error` is the report's reader going away (`vmscope report 3 | head`): a broken pipe
/// that is the reader's choice, not a failure. A broken pipe under the daemon's connection (a
/// transport error or a status made from one) is a failure: the daemon closed on vmscope.
pub fn closed_by_reader(error: &anyhow::Error) -> bool {
    let mut broken_pipe = false;
    for cause in error.chain() {
        if cause.is::<tonic::transport::Error>() || cause.is::<tonic::Status>() {
            return false;
        }
        broken_pipe |= cause
            .downcast_ref::<io::Error>()
            .is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe);
    }
    broken_pipe
}

/// Why `format` must not go to a terminal, if it must not.
fn binary_on_terminal(format: Format, terminal: bool) -> Option<String> {
    (format.is_binary() && terminal).then(|| {
        "--format pprof writes a binary (gzipped) file, not for a terminal: give -o FILE \
         (e.g. -o profile.pb.gz), or redirect the output to a file or a pipe"
            .to_owned()
    })
}

/// The file `-o` names: a regular file is emptied by the first write; errors name the path.
struct ReportFile {
    file: File,
    path: PathBuf,
    /// Whether the next write must first empty the file (a regular file not yet written).
    truncate: bool,
}

impl ReportFile {
    /// `error`, saying which file it concerns. Its kind stays (a closed FIFO is still a
    /// broken pipe), and the OS's words stay its source, printed once after the path.
    fn named(&self, error: io::Error) -> io::Error {
        io::Error::new(
            error.kind(),
            WriteError {
                path: self.path.clone(),
                source: error,
            },
        )
    }
}

/// A write to the report file failed.
#[derive(Debug, thiserror::Error)]
#[error("cannot write the report to {}", path.display())]
struct WriteError {
    path: PathBuf,
    source: io::Error,
}

impl Write for ReportFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.truncate {
            self.file.set_len(0).map_err(|e| self.named(e))?;
            self.truncate = false;
        }
        self.file.write(buf).map_err(|e| self.named(e))
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush().map_err(|e| self.named(e))
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
    fn devices_are_written_as_they_are() {
        // /dev/null has no length to cut: emptying it first failed with EINVAL.
        let mut out = Destination::File("/dev/null".into()).open().unwrap();
        out.write_all(b"a report\n").unwrap();
        out.flush().unwrap();
    }

    #[test]
    fn write_errors_name_the_file_and_say_the_cause_once() {
        let mut out = Destination::File("/dev/full".into()).open().unwrap();
        let err = out
            .write_all(&[b'x'; 64 << 10])
            .and_then(|()| out.flush())
            .expect_err("/dev/full takes nothing");
        assert_eq!(err.kind(), io::ErrorKind::StorageFull);
        let err = anyhow::Error::new(err);
        assert_eq!(
            format!("{err:#}"),
            "cannot write the report to /dev/full: No space left on device (os error 28)"
        );
    }

    #[test]
    fn only_the_reports_reader_closes_without_a_failure() {
        let pipe = || io::Error::from(io::ErrorKind::BrokenPipe);
        assert!(closed_by_reader(
            &anyhow::Error::new(pipe()).context("writing the report")
        ));
        // The daemon's connection broke on a write: that is no reader's choice.
        let mut status = tonic::Status::unavailable("transport error");
        status.set_source(std::sync::Arc::new(pipe()));
        assert!(!closed_by_reader(
            &anyhow::Error::new(status).context("cannot reach vmscoped")
        ));
        assert!(!closed_by_reader(&anyhow::anyhow!("no session 3")));
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
