//! A VM serving its own heap (`CodeMap.ServeHeap`): the demo VM's `--heap-demo` holds lists
//! of 1,000 and 2,500 `Node`s, a doubly linked decoy of 700 `DNode`s and one `Order` with
//! `special = 1` until told to let it go. Histograms, structure queries with a factory per
//! list head, and a leak assertion that follows the Order, all against what the VM holds by
//! construction; another user is refused.

use std::{
    os::unix::process::CommandExt as _,
    process::Command,
    time::{Duration, Instant},
};

use vmscope_tests::{Conversation, Daemon, NOBODY, binary, grpcio_facts};

/// `jitvm loop --heap-demo` running against `daemon`.
fn start_demo_vm(daemon: &Daemon) -> Conversation {
    let mut vm = Conversation::spawn(
        Command::new(binary("jitvm"))
            .args(["loop", "--seconds", "120", "--heap-demo", "--ready"])
            .env("VMSCOPE_SOCKET", &daemon.socket),
    );
    assert_eq!(vm.line(), "ready");
    vm
}

/// `vmscope heap ARGS --format json`, retried while the VM's stream is not registered yet (it
/// opens as the VM starts, and says it is ready a moment later).
fn heap_json(daemon: &Daemon, args: &[&str]) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = daemon.heap_output(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        if out.status.success() {
            return serde_json::from_slice(&out.stdout).expect("vmscope heap's JSON");
        }
        assert!(
            stderr.contains("does not serve its heap") && Instant::now() < deadline,
            "vmscope heap {args:?}: {stderr}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn class<'a>(histogram: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    histogram["histogram"]["classes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {histogram}"))
}

#[test]
fn the_demo_vm_answers_histograms_and_structure_queries_with_what_it_holds() {
    let daemon = Daemon::start();
    let mut vm = start_demo_vm(&daemon);
    let pid = vm.child.id().to_string();

    // Node(value, next) is 4 words: 32 bytes.
    let histogram = heap_json(&daemon, &["--pid", &pid]);
    assert_eq!(histogram["histogram"]["runtime"], "jitvm 0.1");
    assert_eq!(histogram["histogram"]["live"], true);
    assert_eq!(class(&histogram, "Node")["instances"], 3500);
    assert_eq!(class(&histogram, "Node")["bytes"], 3500 * 32);
    assert_eq!(class(&histogram, "DNode")["instances"], 700);
    assert_eq!(class(&histogram, "Order")["instances"], 1);
    let pause = histogram["histogram"]["pause"]["nanos"].as_u64().unwrap()
        + histogram["histogram"]["pause"]["secs"].as_u64().unwrap() * 1_000_000_000;
    assert!(pause > 0, "{histogram}");

    // A structure per list head; the decoy's head is no Node, and starts none.
    let lists = heap_json(
        &daemon,
        &["--pid", &pid, "--query", "Node from globals per root"],
    );
    let structures: Vec<(&str, u64, u64)> = lists["structures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["root"].as_str().unwrap(),
                s["objects"].as_u64().unwrap(),
                s["bytes"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        structures,
        [("list1", 1000, 32_000), ("list2", 2500, 80_000)],
        "{lists}"
    );
    assert_eq!(lists["query"], "Node from globals per root");
    // The same query from Python's grpcio, with the daemon's reflection alone.
    let facts = grpcio_facts("query", &daemon.socket, vm.child.id());
    assert_eq!(
        facts["structures"],
        serde_json::json!([["list1", 1000, 32000], ["list2", 2500, 80000]]),
        "{facts}"
    );
    assert_eq!(facts["runtime"], "jitvm 0.1");

    // A leak assertion: the Order is there while held, gone once let go and collected.
    let leak = "Order where special == 1 from instances of Order: count == 0";
    let (code, out) = daemon.check(&["--pid", &pid, "--heap", leak]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("1 objects in 1 structures"), "{out}");
    vm.say("release");
    assert_eq!(vm.line(), "released");
    let (code, out) = daemon.check(&["--pid", &pid, "--heap", leak]);
    assert_eq!(code, 0, "{out}");
    // Without a full GC the garbage is still counted.
    let all = heap_json(&daemon, &["--pid", &pid, "--all"]);
    assert_eq!(all["histogram"]["live"], false);
    assert_eq!(class(&all, "Order")["instances"], 1);

    // A query the VM cannot answer says why; another user's request is refused.
    let out = daemon
        .cli()
        .args(["heap", "--pid", &pid, "--query", "Nope from globals"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("no class \"Nope\""),
        "{stderr}"
    );
    let out = daemon
        .cli()
        .args(["heap", "--pid", &pid, "--query", "Node from globals"])
        .uid(NOBODY)
        .output()
        .expect("run vmscope heap as nobody");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("may only ask your own processes"),
        "{stderr}"
    );
}
