//! The daemon's configuration file (`vmscoped --config`, `/etc/vmscope/vmscoped.toml` by
//! default when it exists): TOML whose keys are the long command-line flags, so that the file,
//! `vmscoped --help` and the docs name every setting the same way.
//!
//! ```toml
//! continuous = true             # a flag: true to set it, false to leave it off
//! continuous-frequency = 19     # a value
//! debug-dir = ["/usr/lib/debug", "/opt/debug"]   # a flag that repeats
//! ```
//!
//! The file becomes arguments ahead of the command line's ([`arguments`]), less the flags the
//! command line gives: a flag given on the command line wins over the file's. A key that is no
//! flag is refused by the flag parser with its name, as a misspelt flag would be.

use std::ffi::OsString;

use thiserror::Error;

/// Where the daemon looks for its configuration when `--config` is not given.
pub const DEFAULT_PATH: &str = "/etc/vmscope/vmscoped.toml";

/// Why a configuration file cannot be used.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ConfigError {
    /// Not TOML.
    #[error("not valid TOML: {0}")]
    Syntax(String),
    /// A value of a kind no flag takes (a table, a date, an array of arrays).
    #[error("{key}: a setting is true or false, a number, a string, or an array of those")]
    Value {
        /// The key.
        key: String,
    },
}

/// The command-line arguments a configuration file stands for, except the keys `given`
/// already (on the command line): `--key value` for each value, `--key` for `true`, nothing
/// for `false`, `--key v` once per element of an array.
pub fn arguments(text: &str, given: impl Fn(&str) -> bool) -> Result<Vec<OsString>, ConfigError> {
    let table: toml::Table =
        toml::from_str(text).map_err(|e| ConfigError::Syntax(e.message().to_owned()))?;
    let mut args = Vec::new();
    for (key, value) in table.iter().filter(|(key, _)| !given(key)) {
        let flag = OsString::from(format!("--{key}"));
        let values = match value {
            toml::Value::Array(items) => items.iter().collect(),
            other => vec![other],
        };
        for value in values {
            match value {
                toml::Value::Boolean(true) => args.push(flag.clone()),
                toml::Value::Boolean(false) => {}
                toml::Value::Integer(n) => args.extend([flag.clone(), n.to_string().into()]),
                toml::Value::Float(x) => args.extend([flag.clone(), x.to_string().into()]),
                toml::Value::String(s) => args.extend([flag.clone(), s.into()]),
                _ => return Err(ConfigError::Value { key: key.clone() }),
            }
        }
    }
    Ok(args)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(text: &str) -> Vec<String> {
        arguments(text, |_| false)
            .unwrap()
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect()
    }

    #[test]
    fn keys_are_the_long_flags() {
        assert_eq!(
            args(
                "continuous = true\nno-jvm-attach = false\ncontinuous-frequency = 19\n\
                 http = \"127.0.0.1:6060\"\ndebug-dir = [\"/a\", \"/b\"]\n"
            ),
            [
                "--continuous",
                "--continuous-frequency",
                "19",
                "--debug-dir",
                "/a",
                "--debug-dir",
                "/b",
                "--http",
                "127.0.0.1:6060",
            ]
        );
        assert!(args("# nothing set\n").is_empty());
        // The command line's own flags win.
        let given = arguments("continuous = true\nhttp = \"x\"\n", |key| key == "http").unwrap();
        assert_eq!(given, ["--continuous"]);
    }

    #[test]
    fn what_no_flag_takes_is_refused_with_its_key() {
        let arguments = |text| arguments(text, |_| false);
        assert!(matches!(
            arguments("continuous = "),
            Err(ConfigError::Syntax(_))
        ));
        assert_eq!(
            arguments("[http]\naddress = 1\n"),
            Err(ConfigError::Value { key: "http".into() })
        );
        assert_eq!(
            arguments("when = 1979-05-27\n"),
            Err(ConfigError::Value { key: "when".into() })
        );
    }
}
