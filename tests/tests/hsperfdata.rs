//! HotSpot's performance data file as our parser reads it, against `jstat -snap` (the JDK's own
//! reader of the same file) on a live JVM started with no flags.

use std::{collections::HashMap, path::Path, process::Command};

use vmscope_parse::hsperfdata::{Value, Variability, parse_hsperfdata};
use vmscope_tests::Running;

#[test]
fn every_counter_reads_as_jstat_reads_it() {
    let hot = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/java/Hot.java");
    let java = Running::start(Command::new("java").arg(hot).arg("20"));
    let pid = java.child.id();
    // jstat first, then the file: counters only go up meanwhile.
    let out = Command::new("jstat")
        .args(["-J-Djstat.showUnsupported=true", "-snap"])
        .arg(pid.to_string())
        .output()
        .expect("run jstat (a JDK is installed by cargo xtask setup)");
    assert!(
        out.status.success(),
        "jstat: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let file = format!("/tmp/hsperfdata_root/{pid}");
    let bytes = std::fs::read(&file).unwrap_or_else(|e| panic!("{file}: {e}"));
    let parsed = parse_hsperfdata(&bytes).expect("the JVM's own file parses");
    assert!(parsed.accessible);

    let jstat: HashMap<String, String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect();
    assert!(jstat.len() > 100, "jstat printed {} counters", jstat.len());
    let ours: HashMap<&str, _> = parsed
        .entries
        .iter()
        .map(|e| (e.name.as_str(), e))
        .collect();
    let mut compared = 0;
    for (name, theirs) in &jstat {
        // jstat shows the prologue's fields (size, used, version...) as counters of its own.
        if name.starts_with("sun.perfdata.") {
            continue;
        }
        let entry = ours
            .get(name.as_str())
            .unwrap_or_else(|| panic!("jstat has {name}, we do not"));
        match (&entry.value, entry.variability) {
            (Value::Long(v), Variability::Monotonic) => {
                let theirs: i64 = theirs.parse().unwrap();
                assert!(
                    *v >= theirs,
                    "{name}: ours {v} < jstat's {theirs} read before"
                );
            }
            (Value::Long(_), Variability::Variable) => {}
            _ => assert_eq!(&entry.value.to_string(), theirs, "{name}"),
        }
        compared += 1;
    }
    assert_eq!(
        compared,
        parsed.entries.len(),
        "jstat shows every entry we read"
    );
    let collections = parsed
        .long("sun.gc.collector.0.invocations")
        .expect("young collections are counted");
    assert!(collections >= 0);
    assert_eq!(parsed.long("sun.os.hrt.frequency"), Some(1_000_000_000));
    eprintln!(
        "{} entries parsed from {} bytes, {} compared with jstat",
        parsed.entries.len(),
        bytes.len(),
        compared
    );
    drop(java);
}
