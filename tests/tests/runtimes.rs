//! Language runtimes whose VM is a shared library, not the executable: HotSpot (`java` is a
//! launcher for libjvm.so) and a shared CPython (libpython3.12.so). Their code is the VM's
//! ("vanilla vm code"), and the report's header names the modules it counted.

use std::process::Command;

use vmscope_tests::{Daemon, json_report, pyenv_python, shared_tempdir};

fn section<'a>(report: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    report["sections"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["section"] == name)
        .unwrap_or_else(|| panic!("no {name} section: {report}"))
}

fn samples_in(section: &serde_json::Value, module: &str) -> u64 {
    section["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["module"] == module)
        .map(|r| r["samples"].as_u64().unwrap())
        .sum()
}

#[test]
fn cpython_in_libpython_is_the_vm() {
    let daemon = Daemon::start();
    let python = pyenv_python();
    let busy =
        "import time\nend = time.time() + 1.5\nx = 0\nwhile time.time() < end:\n    x += 1\n";
    let out = daemon
        .cli()
        .args(["record", "--format", "json", "--"])
        .arg(&python)
        .args(["-c", busy])
        .output()
        .expect("run vmscope");
    let report = json_report(&out);
    let vm_modules = report["vm_modules"].as_array().unwrap();
    assert_eq!(vm_modules[0]["module"], "libpython3.12.so.1.0", "{report}");
    assert_eq!(vm_modules[0]["runtime"], "CPython");
    let share = report["vm_percent_of_total"].as_f64().unwrap();
    // The rest is time.time(): the vDSO, libc and the kernel.
    assert!(
        share > 50.0,
        "only {share}% of the samples in the VM: {report}"
    );
    let vanilla = section(&report, "vanilla");
    assert!(
        samples_in(vanilla, "libpython3.12.so.1.0") > 500,
        "{vanilla}"
    );
    assert_eq!(
        samples_in(section(&report, "other"), "libpython3.12.so.1.0"),
        0
    );

    // The default can be switched off: libpython is other code again, and the text says how
    // to count it.
    let id = report["session_id"].as_u64().unwrap().to_string();
    let text = daemon
        .cli()
        .args(["report", &id, "--no-runtime-modules"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("--vm-module 'libpython3.12.so.1.0'"),
        "no hint in:\n{text}"
    );
}

#[test]
fn hotspot_in_libjvm_is_the_vm() {
    let daemon = Daemon::start();
    let dir = shared_tempdir();
    std::fs::write(
        dir.path().join("Hot.java"),
        // Garbage that escapes, so that HotSpot's collector (in libjvm.so) has work too.
        "public class Hot {\n  static byte[][] keep = new byte[1024][];\n  public static void \
         main(String[] a) {\n    long end = System.nanoTime() + 1_500_000_000L;\n    double s = \
         0;\n    while (System.nanoTime() < end) {\n      for (int i = 0; i < 100000; i++) {\n    \
             s += Math.sqrt(i);\n        keep[i & 1023] = new byte[512];\n      }\n    }\n    \
         System.out.println(s > 0);\n  }\n}\n",
    )
    .unwrap();
    let javac = Command::new("javac")
        .arg("Hot.java")
        .current_dir(dir.path())
        .status()
        .expect("javac (a JDK) must be installed: run `cargo xtask setup`");
    assert!(javac.success());
    let out = daemon
        .cli()
        .args(["record", "--format", "json", "--", "java", "-cp"])
        .arg(dir.path())
        .arg("Hot")
        .output()
        .expect("run vmscope");
    let report = json_report(&out);
    let libjvm = report["vm_modules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["module"] == "libjvm.so")
        .unwrap_or_else(|| panic!("libjvm.so not counted as the VM: {report}"));
    assert_eq!(libjvm["runtime"], "HotSpot");
    // Its collector, compiler threads and runtime run in libjvm.so; the JIT's code is generated
    // code.
    let vanilla = section(&report, "vanilla");
    assert!(samples_in(vanilla, "libjvm.so") >= 20, "{vanilla}");
    assert_eq!(samples_in(section(&report, "other"), "libjvm.so"), 0);
}

#[test]
fn sqlite_dominated_by_libsqlite3_gets_a_hint() {
    // SQLite runs statements on its bytecode VM (the VDBE) in libsqlite3.so, which is on no
    // runtime list (other programs embed it): the report says how to count it as the VM.
    let daemon = Daemon::start();
    let query = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < \
                 3000000) SELECT sum(x * x % 7) FROM c;";
    let out = daemon
        .cli()
        .args(["record", "--", "sqlite3", ":memory:", query])
        .output()
        .expect("run vmscope (sqlite3 must be installed: run `cargo xtask setup`)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "6000001");
    let text = String::from_utf8_lossy(&out.stderr);
    let hint = text
        .lines()
        .find(|l| l.starts_with("hint: "))
        .unwrap_or_else(|| panic!("no hint in:\n{text}"));
    let module = hint
        .split("--vm-module '")
        .nth(1)
        .and_then(|rest| rest.strip_suffix('\''))
        .unwrap_or_else(|| panic!("no --vm-module in {hint:?}"));
    assert!(module.starts_with("libsqlite3.so"), "{hint}");
    // Following it makes the VDBE the VM.
    let id = text
        .split("session ")
        .nth(1)
        .and_then(|rest| rest.split(':').next())
        .unwrap()
        .to_owned();
    let out = daemon
        .cli()
        .args(["report", &id, "--format", "json", "--vm-module", module])
        .output()
        .unwrap();
    let report = json_report(&out);
    let share = report["vm_percent_of_total"].as_f64().unwrap();
    assert!(
        share > 50.0,
        "only {share}% of the samples in the VM: {report}"
    );
}

/// CPython with its perf trampolines (`-X perf`) has JIT code that samples hardly land in: an
/// empty "generated vm code (no samples)" section said nothing and is left out.
#[test]
fn cpython_with_perf_trampolines_gets_no_empty_generated_section() {
    let daemon = Daemon::start();
    let out = daemon
        .cli()
        .args(["record", "-o", "-", "--"])
        .arg(pyenv_python())
        .args(["-X", "perf", "-c", "sum(range(20_000_000))"])
        .output()
        .expect("run vmscope");
    let text = String::from_utf8_lossy(&out.stdout);
    // CPython leaves its perf map behind: the header's "pid N (python3.12)" names it.
    if let Some(pid) = text
        .strip_prefix("pid ")
        .and_then(|rest| rest.split(' ').next())
    {
        let _ = std::fs::remove_file(format!("/tmp/perf-{pid}.map"));
    }
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    if let Some(generated) = text.split("% of generated vm code").nth(1) {
        let first = generated.lines().nth(1).unwrap_or_default();
        assert!(!first.contains("(no samples)"), "{text}");
    }
    assert!(!text.contains("0 samples in generated vm code"), "{text}");
}
