//! Java method names as HotSpot's perf map spells them: `long Callers.hot(long)`, the return
//! type, the class's external name, the method and its parameter types. A method named from
//! its interpreted frames then reads the same as its compiled code, which the perf map names.

/// The external name of `method` of `class` (internal form, `java/lang/String`) with the
/// descriptor `signature` (`(J)J`); a descriptor that does not parse is shown as it is.
pub fn external_name(class: &str, method: &str, signature: &str) -> String {
    let class = class.replace('/', ".");
    match parse_descriptor(signature) {
        Some((params, ret)) => format!("{ret} {class}.{method}({})", params.join(", ")),
        None => format!("{class}.{method}{signature}"),
    }
}

/// A method descriptor's parameter types and return type, in Java's spelling.
fn parse_descriptor(signature: &str) -> Option<(Vec<String>, String)> {
    let rest = signature.strip_prefix('(')?;
    let (params, ret) = rest.split_once(')')?;
    let mut types = Vec::new();
    let mut at = params;
    while !at.is_empty() {
        let (ty, next) = field_type(at)?;
        types.push(ty);
        at = next;
    }
    let ret = if ret == "V" {
        "void".to_string()
    } else {
        match field_type(ret)? {
            (ty, "") => ty,
            _ => return None,
        }
    };
    Some((types, ret))
}

/// The first field type of a descriptor and what follows it.
fn field_type(s: &str) -> Option<(String, &str)> {
    let mut dims = 0;
    let mut s = s;
    while let Some(rest) = s.strip_prefix('[') {
        dims += 1;
        s = rest;
        if dims > 255 {
            return None;
        }
    }
    let (base, rest) = match s.as_bytes().first()? {
        b'B' => ("byte".to_string(), &s[1..]),
        b'C' => ("char".to_string(), &s[1..]),
        b'D' => ("double".to_string(), &s[1..]),
        b'F' => ("float".to_string(), &s[1..]),
        b'I' => ("int".to_string(), &s[1..]),
        b'J' => ("long".to_string(), &s[1..]),
        b'S' => ("short".to_string(), &s[1..]),
        b'Z' => ("boolean".to_string(), &s[1..]),
        b'L' => {
            let (name, rest) = s[1..].split_once(';')?;
            (name.replace('/', "."), rest)
        }
        _ => return None,
    };
    Some((format!("{base}{}", "[]".repeat(dims)), rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_read_as_hotspots_perf_map_writes_them() {
        assert_eq!(
            external_name("Callers", "hot", "(J)J"),
            "long Callers.hot(long)"
        );
        assert_eq!(
            external_name("Callers", "main", "([Ljava/lang/String;)V"),
            "void Callers.main(java.lang.String[])"
        );
        assert_eq!(
            external_name(
                "java/util/HashMap",
                "putVal",
                "(ILjava/lang/Object;Ljava/lang/Object;ZZ)Ljava/lang/Object;"
            ),
            "java.lang.Object java.util.HashMap.putVal(int, java.lang.Object, java.lang.Object, boolean, boolean)"
        );
        assert_eq!(external_name("A", "m", "()[[I"), "int[][] A.m()");
        assert_eq!(
            external_name("A", "m", "(Q)V"),
            "A.m(Q)V",
            "not a descriptor"
        );
        assert_eq!(external_name("A", "m", "(Ljava/lang"), "A.m(Ljava/lang");
    }
}
