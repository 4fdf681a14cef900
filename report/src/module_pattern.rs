//! Shell-style patterns of module file names (`--vm-module 'libv8*'`, the known runtimes'
//! libraries).

/// Whether `module` (a module file name as rows carry it, or a path, whose file name is then
/// used) matches the shell-style `pattern`: `*` matches any run of characters, `?` any one
/// character, anything else itself. The whole name must match; case matters, as in file
/// names. No character classes or escapes: module names need only these two.
pub fn module_matches(pattern: &str, module: &str) -> bool {
    glob_match(pattern, file_name(module))
}

/// `*`/`?` matching by backtracking to the last `*` only, which is enough for these two
/// wildcards and linear in practice (quadratic at worst, on names of a few dozen characters).
fn glob_match(pattern: &str, name: &str) -> bool {
    let pattern: Vec<char> = pattern.chars().collect();
    let name: Vec<char> = name.chars().collect();
    let (mut p, mut n) = (0, 0);
    // After the last `*` seen: where the pattern resumes, and the first name char it has not
    // yet swallowed.
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        match pattern.get(p) {
            Some('*') => {
                star = Some((p + 1, n));
                p += 1;
            }
            Some(&c) if c == '?' || c == name[n] => {
                p += 1;
                n += 1;
            }
            _ => match star {
                // Let the last `*` swallow one more character and try again.
                Some((resume, swallowed)) => {
                    star = Some((resume, swallowed + 1));
                    p = resume;
                    n = swallowed + 1;
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == '*')
}

/// The file name of a module path.
pub(crate) fn file_name(module: &str) -> &str {
    module.rsplit('/').next().unwrap_or(module)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_patterns_match_file_names_like_a_shell() {
        for (pattern, module, expected) in [
            ("libv8*", "libv8.so", true),
            ("libv8*", "libv8_libbase.so.1", true),
            ("libv8*", "libnode.so", false),
            ("libv8*", "xlibv8.so", false),
            ("*.so", "libFilePlugin.so", true),
            ("*.so", "libc.so.6", false),
            ("*.so*", "libc.so.6", true),
            ("lib?.so", "libm.so", true),
            ("lib?.so", "lib.so", false),
            ("lib?.so", "libmm.so", false),
            ("lib?.so", "libλ.so", true),
            ("libc.so.6", "libc.so.6", true),
            ("libc.so.6", "libc.so.60", false),
            ("libc.so.6", "LIBC.so.6", false),
            ("*Plugin*", "libSocketPlugin.so", true),
            ("*a*b*c", "xxaxxbxbxxc", true),
            ("*a*b*c", "xxaxxbxbxxcx", false),
            ("*", "", true),
            ("?", "", false),
            ("", "", true),
            ("", "x", false),
            ("**", "anything", true),
            ("[kernel.kallsyms]", "[kernel.kallsyms]", true),
            ("libjvm.so", "/usr/lib/jvm/lib/server/libjvm.so", true),
            ("server", "/usr/lib/jvm/lib/server/libjvm.so", false),
        ] {
            assert_eq!(
                module_matches(pattern, module),
                expected,
                "{pattern:?} against {module:?}"
            );
        }
    }
}
