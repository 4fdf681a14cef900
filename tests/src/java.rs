//! HotSpot JVMs for the tests: the Java fixtures (tests/fixtures/java), started with the
//! source launcher and no flags but the test's own, and what a killed JVM leaves in /tmp.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use crate::Running;

/// The path of a Java fixture (`"Hot.java"`).
pub fn java_fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/java")
        .join(name)
}

/// The `java` the tests run: `$VMSCOPE_TEST_JAVA` (to measure another JDK by hand), or the
/// one on PATH (Debian's OpenJDK 17, which `cargo xtask setup` installs).
pub fn java() -> String {
    std::env::var("VMSCOPE_TEST_JAVA").unwrap_or_else(|_| "java".into())
}

/// `java [FLAGS] FIXTURE SECONDS`, started and warmed up (it printed "ready").
pub fn start_java(fixture: &str, flags: &[&str], seconds: &str) -> Running {
    Running::start(
        Command::new(java())
            .args(flags)
            .arg(java_fixture(fixture))
            .arg(seconds),
    )
}

/// Removes what a JVM leaves in /tmp when killed: its perf map and attach files.
pub fn clean_jvm(pid: u32) {
    for path in [
        format!("/tmp/perf-{pid}.map"),
        format!("/tmp/.java_pid{pid}"),
        format!("/tmp/.attach_pid{pid}"),
    ] {
        let _ = std::fs::remove_file(path);
    }
}
