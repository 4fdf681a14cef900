//! The HotSpot options of a running JVM that decide whether and how vmscope may attach to it,
//! from its command line and environment (`/proc/PID/cmdline`, `/proc/PID/environ`).
//!
//! HotSpot takes its options, in increasing precedence, from `JAVA_TOOL_OPTIONS`, then the
//! command line (where the `java` launcher has put `JDK_JAVA_OPTIONS` first), then
//! `_JAVA_OPTIONS`; for each flag the last occurrence wins. Options files (`@argfiles`,
//! `-XX:Flags=`, `-XX:VMOptionsFile=`) are not followed: a flag set only there is not seen.

/// The flags that matter to attaching and to stack walking.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JvmOptions {
    /// `-XX:+PreserveFramePointer`: compiled Java code keeps frame pointers, so a
    /// frame-pointer unwinder walks through it.
    pub preserve_frame_pointer: bool,
    /// `-XX:+DisableAttachMechanism`: the JVM never opens an attach socket.
    pub attach_disabled: bool,
    /// `-Xrs` or `-XX:+ReduceSignalUsage`: the JVM installs no SIGQUIT handler, so a SIGQUIT
    /// would kill it (and it starts its attach listener with the VM instead).
    pub reduced_signals: bool,
    /// `-XX:+DumpPerfMapAtExit`: the JVM writes its perf map when it exits.
    pub dump_perf_map_at_exit: bool,
    /// `-XX:+StartAttachListener`: the attach listener starts with the VM, not on SIGQUIT.
    pub start_attach_listener: bool,
}

impl JvmOptions {
    /// Applies one option (`-XX:+Flag`, `-XX:-Flag`, `-XX:Flag=true|false`, `-Xrs`); others
    /// are ignored.
    fn apply(&mut self, option: &[u8]) {
        if option == b"-Xrs" {
            self.reduced_signals = true;
            return;
        }
        let Some(flag) = option.strip_prefix(b"-XX:") else {
            return;
        };
        let (name, value) = match flag {
            [b'+', name @ ..] => (name, true),
            [b'-', name @ ..] => (name, false),
            _ => match flag.iter().position(|&b| b == b'=') {
                Some(eq) => match &flag[eq + 1..] {
                    b"true" => (&flag[..eq], true),
                    b"false" => (&flag[..eq], false),
                    _ => return,
                },
                None => return,
            },
        };
        let field = match name {
            b"PreserveFramePointer" => &mut self.preserve_frame_pointer,
            b"DisableAttachMechanism" => &mut self.attach_disabled,
            b"ReduceSignalUsage" => &mut self.reduced_signals,
            b"DumpPerfMapAtExit" => &mut self.dump_perf_map_at_exit,
            b"StartAttachListener" => &mut self.start_attach_listener,
            _ => return,
        };
        *field = value;
    }
}

/// Launcher options whose value is the next argument (`-cp DIR`): that argument is not the
/// main class.
const OPTIONS_WITH_VALUE: &[&[u8]] = &[
    b"-cp",
    b"-classpath",
    b"--class-path",
    b"-p",
    b"--module-path",
    b"--upgrade-module-path",
    b"--add-modules",
    b"--enable-native-access",
    b"--limit-modules",
    b"--add-reads",
    b"--add-exports",
    b"--add-opens",
    b"--patch-module",
    b"--source",
];

/// The options of a `java` command line (`argv[0]` excluded): arguments up to the main class,
/// the source file, `-jar FILE` or `-m MODULE`, whatever follows being the program's own.
fn command_line_options<'a>(args: impl Iterator<Item = &'a [u8]>) -> Vec<&'a [u8]> {
    let mut options = Vec::new();
    let mut args = args;
    while let Some(arg) = args.next() {
        if !arg.starts_with(b"-") {
            break; // the main class or source file
        }
        if matches!(arg, b"-jar" | b"-m" | b"--module") || arg.starts_with(b"--module=") {
            break; // the program starts here (its jar or module is the next argument)
        }
        if OPTIONS_WITH_VALUE.contains(&arg) {
            args.next();
            continue;
        }
        options.push(arg);
    }
    options
}

/// The value of `name` in a NUL-separated environment (the first occurrence, as `getenv`).
fn env_value<'a>(environ: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
    environ.split(|&b| b == 0).find_map(|entry| {
        entry
            .strip_prefix(name)
            .and_then(|rest| rest.strip_prefix(b"="))
    })
}

/// The options of a JVM from its `/proc/PID/cmdline` and `/proc/PID/environ` (both
/// NUL-separated). Environment values split on whitespace.
pub fn parse(cmdline: &[u8], environ: &[u8]) -> JvmOptions {
    let mut options = JvmOptions::default();
    let env_words = |name: &[u8]| -> Vec<&[u8]> {
        env_value(environ, name)
            .map(|value| {
                value
                    .split(u8::is_ascii_whitespace)
                    .filter(|w| !w.is_empty())
                    .collect()
            })
            .unwrap_or_default()
    };
    for option in env_words(b"JAVA_TOOL_OPTIONS") {
        options.apply(option);
    }
    for option in command_line_options(env_words(b"JDK_JAVA_OPTIONS").into_iter()) {
        options.apply(option);
    }
    let args = cmdline
        .strip_suffix(b"\0")
        .unwrap_or(cmdline)
        .split(|&b| b == 0)
        .skip(1);
    for option in command_line_options(args) {
        options.apply(option);
    }
    for option in env_words(b"_JAVA_OPTIONS") {
        options.apply(option);
    }
    options
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nul(words: &[&str]) -> Vec<u8> {
        let mut out = Vec::new();
        for w in words {
            out.extend_from_slice(w.as_bytes());
            out.push(0);
        }
        out
    }

    #[test]
    fn no_flags_means_defaults() {
        let options = parse(&nul(&["java", "Hot.java", "10"]), &nul(&["PATH=/usr/bin"]));
        assert_eq!(options, JvmOptions::default());
        assert_eq!(parse(b"", b""), JvmOptions::default());
    }

    #[test]
    fn every_flag_is_recognised() {
        let options = parse(
            &nul(&[
                "java",
                "-XX:+PreserveFramePointer",
                "-XX:+DisableAttachMechanism",
                "-XX:+ReduceSignalUsage",
                "-XX:+DumpPerfMapAtExit",
                "-XX:+StartAttachListener",
                "Main",
            ]),
            b"",
        );
        assert_eq!(
            options,
            JvmOptions {
                preserve_frame_pointer: true,
                attach_disabled: true,
                reduced_signals: true,
                dump_perf_map_at_exit: true,
                start_attach_listener: true,
            }
        );
        assert!(parse(&nul(&["java", "-Xrs", "Main"]), b"").reduced_signals);
        assert!(
            parse(
                &nul(&["java", "-XX:PreserveFramePointer=true", "Main"]),
                b""
            )
            .preserve_frame_pointer
        );
    }

    #[test]
    fn the_last_plus_or_minus_wins() {
        let cmd = nul(&[
            "java",
            "-XX:+PreserveFramePointer",
            "-XX:-PreserveFramePointer",
            "-XX:-ReduceSignalUsage",
            "-Xrs",
            "Main",
        ]);
        let options = parse(&cmd, b"");
        assert!(!options.preserve_frame_pointer);
        assert!(options.reduced_signals);
        let cmd = nul(&["java", "-Xrs", "-XX:-ReduceSignalUsage", "Main"]);
        assert!(!parse(&cmd, b"").reduced_signals);
    }

    #[test]
    fn environment_precedence_is_hotspots() {
        // JAVA_TOOL_OPTIONS < JDK_JAVA_OPTIONS < command line < _JAVA_OPTIONS.
        let cmd = nul(&["java", "-XX:-PreserveFramePointer", "Main"]);
        let env = nul(&["JAVA_TOOL_OPTIONS=-XX:+PreserveFramePointer -XX:+DumpPerfMapAtExit"]);
        let options = parse(&cmd, &env);
        assert!(!options.preserve_frame_pointer, "the command line wins");
        assert!(options.dump_perf_map_at_exit, "what it does not set stays");

        let env = nul(&[
            "JAVA_TOOL_OPTIONS=-XX:+StartAttachListener",
            "JDK_JAVA_OPTIONS=-XX:-StartAttachListener",
        ]);
        assert!(!parse(&nul(&["java", "Main"]), &env).start_attach_listener);

        let env = nul(&["_JAVA_OPTIONS=-XX:+PreserveFramePointer"]);
        assert!(
            parse(&cmd, &env).preserve_frame_pointer,
            "_JAVA_OPTIONS wins"
        );
    }

    #[test]
    fn environment_values_split_on_any_whitespace() {
        let env = nul(&["_JAVA_OPTIONS=  -Xmx1g\t-XX:+DisableAttachMechanism\n -Xrs "]);
        let options = parse(&nul(&["java", "Main"]), &env);
        assert!(options.attach_disabled && options.reduced_signals);
    }

    #[test]
    fn only_the_exact_variable_counts() {
        let env = nul(&[
            "MY_JAVA_TOOL_OPTIONS=-Xrs",
            "JAVA_TOOL_OPTIONSX=-Xrs",
            "JAVA_TOOL_OPTIONS=-XX:+DumpPerfMapAtExit",
            "JAVA_TOOL_OPTIONS=-Xrs",
        ]);
        let options = parse(&nul(&["java", "Main"]), &env);
        assert!(options.dump_perf_map_at_exit);
        assert!(
            !options.reduced_signals,
            "getenv takes the first definition"
        );
    }

    #[test]
    fn the_programs_arguments_are_not_options() {
        for cmd in [
            &["java", "Main", "-Xrs"][..],
            &["java", "-jar", "app.jar", "-Xrs"],
            &["java", "-jar", "-Xrs"],
            &["java", "-m", "mod/Main", "-Xrs"],
            &["java", "--module=mod/Main", "-Xrs"],
            &["java", "tests/fixtures/java/Hot.java", "-Xrs"],
        ] {
            assert!(!parse(&nul(cmd), b"").reduced_signals, "{cmd:?}");
        }
    }

    #[test]
    fn option_values_are_not_the_main_class() {
        let cmd = nul(&[
            "java",
            "-cp",
            "lib/a.jar:lib/b.jar",
            "--add-opens",
            "java.base/java.lang=ALL-UNNAMED",
            "-Xrs",
            "Main",
        ]);
        assert!(parse(&cmd, b"").reduced_signals);
        let cmd = nul(&[
            "java",
            "-Dx=1",
            "-XX:+DisableAttachMechanism",
            "-jar",
            "a.jar",
        ]);
        assert!(parse(&cmd, b"").attach_disabled);
    }

    #[test]
    fn a_command_line_without_a_trailing_nul_is_read_whole() {
        assert!(parse(b"java\0-Xrs", b"").reduced_signals);
    }
}
