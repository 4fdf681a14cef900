//! Running the `jitvm` binary and reading what it wrote.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Output};

use jitvm::codelog::{self, History};
use jitvm::codemap_file;
use vmscope_proto::v1::CodeMapEvent;

/// The binary under test.
pub fn jitvm() -> Command {
    Command::new(env!("CARGO_BIN_EXE_jitvm"))
}

/// The `key=value` fields of the summary line.
#[derive(Debug)]
pub struct Summary(pub HashMap<String, String>);

impl Summary {
    /// A numeric field.
    pub fn num(&self, key: &str) -> i64 {
        self.0
            .get(key)
            .unwrap_or_else(|| panic!("no {key} in {:?}", self.0))
            .parse()
            .unwrap_or_else(|e| panic!("{key}: {e}"))
    }
}

/// Checks the run succeeded and parses its one summary line.
pub fn summary(out: &Output) -> Summary {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "jitvm failed: {}\nstdout: {stdout}\nstderr: {stderr}",
        out.status
    );
    let lines: Vec<&str> = stdout.lines().filter(|l| *l != "ready").collect();
    assert_eq!(lines.len(), 1, "one summary line: {stdout}");
    Summary(
        lines[0]
            .split_whitespace()
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
    )
}

/// Runs `jitvm workload args... --publish none --seconds secs`.
pub fn run(workload: &str, secs: f64, args: &[&str]) -> Summary {
    let out = jitvm()
        .arg(workload)
        .args(["--publish", "none", "--seconds", &secs.to_string()])
        .args(args)
        .output()
        .expect("run jitvm");
    summary(&out)
}

/// Reads a code map file or code log.
pub fn read_events(path: &Path) -> Vec<CodeMapEvent> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let (events, torn) = codemap_file::decode(&bytes).expect("a code map file");
    assert_eq!(torn, 0, "{}: torn last record after exit", path.display());
    events
}

/// Runs a workload with a code log; answers the summary, the checked history and the events.
pub fn run_logged(
    workload: &str,
    secs: f64,
    args: &[&str],
) -> (Summary, History, Vec<CodeMapEvent>) {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("code.log");
    let log_arg = log.to_str().unwrap();
    let mut all = vec!["--code-log", log_arg];
    all.extend_from_slice(args);
    let s = run(workload, secs, &all);
    let events = read_events(&log);
    let h = codelog::replay(&events)
        .unwrap_or_else(|e| panic!("{workload} {args:?}: bad code log: {e}"));
    (s, h, events)
}
