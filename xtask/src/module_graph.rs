//! `cargo xtask module-graph`: which of the daemon's top-level modules import which, and the
//! circles between them.
//!
//! Every file under `daemon/src` is read for the paths it names into the crate: `crate::a::…`,
//! `use crate::{a::…, b::…}`, and `super::…` chains that climb to the crate's root. The first
//! segment after the root is the top-level module (`bpf`, `codemap`, `process`, …); an item of
//! `lib.rs` itself (`crate::DaemonConfig`) is the node `crate`. Comments, strings and `mod`
//! declarations are no imports; `lib.rs` naming a module (`sys::…`) is. Strongly connected
//! components of more than one module are the circles; the layers are the order the modules
//! can be built in once the circles are merged, each importing only from layers below it.
//!
//! Test code (`#[cfg(test)]` modules and items, and files declared by them) is told apart:
//! the layers are those of the code the daemon is built from, and the report shows apart the
//! circles that test code alone would close. Either kind fails the check: a test may use the
//! layers under its module, not those above.
//!
//! The same reading finds where the daemon names the API crate (`vmscope_proto`, or a path
//! through its usual alias `pb::`): outside the files of [`API_EDGES`], and outside test code,
//! that fails the check too. The daemon's core works on its own types; the API's are turned
//! into them and back at its edges (issue 24).

use std::{
    collections::{BTreeMap, BTreeSet},
    fmt::Write as _,
    path::{Path, PathBuf},
};

use anyhow::{Context, bail};

/// The node of the crate's root, `lib.rs`, for its own items.
pub const ROOT: &str = "crate";

/// The files of `daemon/src` (a path, or a folder ending in `/`) that may name the API crate
/// outside test code, and why. Everywhere else the daemon works on its own types.
pub const API_EDGES: &[(&str, &str)] = &[
    (
        "server/",
        "the gRPC face: turns the API's messages into the daemon's types and back",
    ),
    (
        "lib.rs",
        "the crate's root: wires the gRPC services and their descriptors",
    ),
    (
        "codemap/vm.rs",
        "decodes a VM's code map publication into changes of the code map",
    ),
    (
        "stats/vm.rs",
        "decodes the statistics events of that publication into the VM's statistics",
    ),
    (
        "heap/vm.rs",
        "speaks a VM's side of CodeMap.ServeHeap: its requests and answers, in the daemon's types for the rest",
    ),
];

/// One place a module names another.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Site {
    /// The file, relative to the crate's `src`.
    pub file: String,
    /// Its line, from 1.
    pub line: usize,
    /// The path as written (a group of a `use` shown by its item).
    pub path: String,
    /// Whether it is test code.
    pub test: bool,
}

/// The imports between a crate's top-level modules.
#[derive(Debug, Default)]
pub struct Graph {
    /// Every top-level module, and [`ROOT`].
    pub modules: BTreeSet<String>,
    /// From module, to module: the places the first names the second.
    pub edges: BTreeMap<(String, String), Vec<Site>>,
    /// The places the crate names the API crate (`vmscope_proto`, `pb::`).
    pub api: Vec<Site>,
}

impl Graph {
    /// The edges with at least one site in the code the daemon is built from, or with
    /// `tests`, in test code too.
    fn adjacency(&self, tests: bool) -> BTreeMap<&str, BTreeSet<&str>> {
        let mut adjacency: BTreeMap<&str, BTreeSet<&str>> = self
            .modules
            .iter()
            .map(|m| (m.as_str(), BTreeSet::new()))
            .collect();
        for ((from, to), sites) in &self.edges {
            if tests || sites.iter().any(|s| !s.test) {
                adjacency
                    .entry(from.as_str())
                    .or_default()
                    .insert(to.as_str());
            }
        }
        adjacency
    }

    /// The circles that span more than one top-level module: each its modules, sorted; in the
    /// code the daemon is built from, or with `tests`, counting test code too.
    pub fn circles(&self, tests: bool) -> Vec<Vec<String>> {
        let adjacency = self.adjacency(tests);
        let mut circles: Vec<Vec<String>> = strongly_connected(&adjacency)
            .into_iter()
            .filter(|c| c.len() > 1)
            .map(|c| {
                let mut names: Vec<String> = c.into_iter().map(str::to_string).collect();
                names.sort();
                names
            })
            .collect();
        circles.sort();
        circles
    }

    /// The layers of the code the daemon is built from, lowest first: a module imports only
    /// from layers below its own (and from its own circle, if any).
    pub fn layers(&self) -> Vec<Vec<String>> {
        let adjacency = self.adjacency(false);
        let components = strongly_connected(&adjacency);
        let component_of: BTreeMap<&str, usize> = components
            .iter()
            .enumerate()
            .flat_map(|(i, c)| c.iter().map(move |m| (*m, i)))
            .collect();
        // Tarjan's algorithm yields components dependencies first: one pass sets each
        // component's level above those it imports from.
        let mut level = vec![0usize; components.len()];
        for (i, component) in components.iter().enumerate() {
            for module in component {
                for to in &adjacency[module] {
                    let j = component_of[to];
                    if j != i {
                        level[i] = level[i].max(level[j] + 1);
                    }
                }
            }
        }
        let mut layers = vec![Vec::new(); level.iter().max().map_or(0, |l| l + 1)];
        for (i, component) in components.iter().enumerate() {
            let mut names: Vec<String> = component.iter().map(|m| m.to_string()).collect();
            names.sort();
            layers[level[i]].push(names.join(" + "));
        }
        for layer in &mut layers {
            layer.sort();
        }
        layers
    }

    /// The report `cargo xtask module-graph` prints; with `all_sites`, every place an edge
    /// of a circle is made, not only the first.
    pub fn report(&self, all_sites: bool) -> String {
        let mut out = String::new();
        let built = self.circles(false);
        let with_tests = self.circles(true);
        let _ = writeln!(
            out,
            "{} top-level modules (with `{ROOT}`, lib.rs's own items), {} edges between them.",
            self.modules.len(),
            self.edges.len()
        );
        if built.is_empty() {
            let _ = writeln!(out, "\nNo circle spans more than one top-level module.");
        } else {
            let _ = writeln!(
                out,
                "\nCircles spanning more than one top-level module: {}",
                built.len()
            );
            for circle in &built {
                self.write_circle(&mut out, circle, false, all_sites);
            }
        }
        let test_only: Vec<&Vec<String>> =
            with_tests.iter().filter(|c| !built.contains(c)).collect();
        if !test_only.is_empty() {
            let _ = writeln!(
                out,
                "\nCircles that test code closes (the code alone has none of them): {}",
                test_only.len()
            );
            for circle in test_only {
                self.write_circle(&mut out, circle, true, all_sites);
            }
        }
        let _ = writeln!(
            out,
            "\nLayers, lowest first (each imports only from the layers before it):"
        );
        for (i, layer) in self.layers().iter().enumerate() {
            let _ = writeln!(out, "  {i}: {}", layer.join(", "));
        }
        out
    }

    /// The places the API crate is named outside [`API_EDGES`] and outside test code.
    pub fn api_outside_edges(&self) -> Vec<&Site> {
        self.api
            .iter()
            .filter(|site| !site.test && !is_api_edge(&site.file))
            .collect()
    }

    /// What `cargo xtask module-graph` says of the API crate's places.
    pub fn api_report(&self) -> String {
        let mut out = String::new();
        let outside = self.api_outside_edges();
        if outside.is_empty() {
            let _ = writeln!(
                out,
                "\nThe API crate is named only at the edges (and in tests): {}.",
                API_EDGES
                    .iter()
                    .map(|(file, _)| *file)
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        } else {
            let _ = writeln!(
                out,
                "\nThe API crate named outside the edges ({}): use the daemon's own types, \
                 converted at an edge, or add the file to API_EDGES with a reason:",
                outside.len()
            );
            for site in outside {
                let _ = writeln!(out, "    {}:{}: {}", site.file, site.line, site.path);
            }
        }
        out
    }

    fn write_circle(&self, out: &mut String, circle: &[String], tests: bool, all_sites: bool) {
        let _ = writeln!(out, "  {}", circle.join(", "));
        for ((from, to), sites) in &self.edges {
            if !circle.contains(from) || !circle.contains(to) {
                continue;
            }
            let shown: Vec<&Site> = sites.iter().filter(|s| tests || !s.test).collect();
            let Some(first) = shown.first() else {
                continue;
            };
            let test = if first.test { " (test)" } else { "" };
            let _ = writeln!(
                out,
                "    {from} -> {to}: {} site{}, e.g. {}:{} {}{test}",
                shown.len(),
                if shown.len() == 1 { "" } else { "s" },
                first.file,
                first.line,
                first.path
            );
            if all_sites {
                for site in &shown[1..] {
                    let test = if site.test { " (test)" } else { "" };
                    let _ = writeln!(out, "      {}:{} {}{test}", site.file, site.line, site.path);
                }
            }
        }
    }
}

/// Tarjan's strongly connected components, each a component's modules; a component comes
/// after every component it has an edge to.
fn strongly_connected<'a>(adjacency: &BTreeMap<&'a str, BTreeSet<&'a str>>) -> Vec<Vec<&'a str>> {
    struct State<'a, 'g> {
        adjacency: &'g BTreeMap<&'a str, BTreeSet<&'a str>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        components: Vec<Vec<&'a str>>,
    }
    fn visit<'a>(state: &mut State<'a, '_>, v: &'a str) {
        let i = state.index.len();
        state.index.insert(v, i);
        state.low.insert(v, i);
        state.stack.push(v);
        state.on_stack.insert(v);
        for &w in state.adjacency.get(v).into_iter().flatten() {
            if !state.index.contains_key(w) {
                visit(state, w);
                let low = state.low[v].min(state.low[w]);
                state.low.insert(v, low);
            } else if state.on_stack.contains(w) {
                let low = state.low[v].min(state.index[w]);
                state.low.insert(v, low);
            }
        }
        if state.low[v] == state.index[v] {
            let mut component = Vec::new();
            while let Some(w) = state.stack.pop() {
                state.on_stack.remove(w);
                component.push(w);
                if w == v {
                    break;
                }
            }
            state.components.push(component);
        }
    }
    let mut state = State {
        adjacency,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        components: Vec::new(),
    };
    for &v in adjacency.keys() {
        if !state.index.contains_key(v) {
            visit(&mut state, v);
        }
    }
    state.components
}

/// The graph of the crate whose sources are in `src` (its root `lib.rs`).
pub fn read(src: &Path) -> anyhow::Result<Graph> {
    let mut files = Vec::new();
    collect_files(src, &mut files)?;
    files.sort();
    let mut sources = Vec::new();
    for file in files {
        let relative = file
            .strip_prefix(src)
            .expect("under src")
            .to_string_lossy()
            .into_owned();
        if relative == "main.rs" {
            // The binary is a crate of its own, over the library.
            continue;
        }
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("cannot read {}", file.display()))?;
        sources.push((relative, text));
    }
    Ok(graph_of(&sources))
}

fn collect_files(dir: &Path, files: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    let entries =
        std::fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))?;
    for entry in entries {
        let path = entry?.path();
        if path.is_dir() {
            collect_files(&path, files)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    Ok(())
}

/// The graph of a crate given as its files (path relative to `src`, text), `lib.rs` its root.
pub fn graph_of(sources: &[(String, String)]) -> Graph {
    let mut graph = Graph::default();
    graph.modules.insert(ROOT.to_string());
    // Top-level modules: the files and folders directly under src.
    for (file, _) in sources {
        let top = file
            .split('/')
            .next()
            .expect("a path")
            .trim_end_matches(".rs");
        if top != "lib" {
            graph.modules.insert(top.to_string());
        }
    }
    let mut test_modules: BTreeSet<Vec<String>> = BTreeSet::new();
    let mut sites: Vec<(Vec<String>, String, Site)> = Vec::new();
    let mut api: Vec<(Vec<String>, Site)> = Vec::new();
    for (file, text) in sources {
        let module = module_path(file);
        let scanned = scan(file, &module, text, &graph.modules);
        test_modules.extend(scanned.test_modules);
        sites.extend(scanned.sites);
        api.extend(scanned.api);
    }
    let in_test_module = |module: &[String]| {
        test_modules
            .iter()
            .any(|t| module.len() >= t.len() && module[..t.len()] == t[..])
    };
    graph.api = api
        .into_iter()
        .map(|(module, mut site)| {
            site.test |= in_test_module(&module);
            site
        })
        .collect();
    for (module, to, mut site) in sites {
        // lib.rs and its inline modules are the root.
        let from = module
            .first()
            .filter(|m| graph.modules.contains(*m))
            .cloned()
            .unwrap_or_else(|| ROOT.to_string());
        if from == to {
            continue;
        }
        site.test |= in_test_module(&module);
        graph.edges.entry((from, to)).or_default().push(site);
    }
    for sites in graph.edges.values_mut() {
        sites.sort();
    }
    graph
}

/// A file's module path: `a/mod.rs` and `a.rs` are `a`, `a/b.rs` is `a::b`, `lib.rs` the root.
fn module_path(file: &str) -> Vec<String> {
    let mut parts: Vec<String> = file
        .trim_end_matches(".rs")
        .split('/')
        .map(str::to_string)
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

#[derive(Debug, PartialEq)]
enum Token {
    Ident(String),
    /// `::`
    PathSep,
    Punct(char),
}

/// The tokens of Rust source that matter here, each with its line; comments, strings and
/// character literals are skipped.
fn tokens(text: &str) -> Vec<(Token, usize)> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut line = 1;
    let mut i = 0;
    let newlines = |from: usize, to: usize| chars[from..to].iter().filter(|&&c| c == '\n').count();
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let start = i;
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            line += newlines(start, i);
        } else if c == '"' || (c == 'b' && next == Some('"')) {
            let start = i;
            i += if c == 'b' { 2 } else { 1 };
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i = (i + 1).min(chars.len());
            line += newlines(start, i);
        } else if (c == 'r' || (c == 'b' && next == Some('r')))
            && raw_string_hashes(&chars, i + if c == 'b' { 2 } else { 1 }).is_some()
        {
            let open = i + if c == 'b' { 2 } else { 1 };
            let hashes = raw_string_hashes(&chars, open).expect("checked");
            let start = i;
            i = open + hashes + 1;
            loop {
                if i >= chars.len() {
                    break;
                }
                if chars[i] == '"' && (1..=hashes).all(|k| chars.get(i + k) == Some(&'#')) {
                    i += 1 + hashes;
                    break;
                }
                i += 1;
            }
            line += newlines(start, i);
        } else if c == '\'' || (c == 'b' && next == Some('\'')) {
            // A character literal ('x', '\n', '\u{..}', b'x'), or a lifetime ('a).
            let open = i + if c == 'b' { 1 } else { 0 };
            if chars.get(open + 1) == Some(&'\\') {
                // Past the escaped character, to the closing quote.
                i = open + 3;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if chars.get(open + 2) == Some(&'\'') {
                i = open + 3;
            } else {
                // A lifetime: its name is read as an identifier next.
                i = open + 1;
            }
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push((Token::Ident(chars[start..i].iter().collect()), line));
        } else if c.is_ascii_digit() {
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
        } else if c == ':' && next == Some(':') {
            out.push((Token::PathSep, line));
            i += 2;
        } else {
            out.push((Token::Punct(c), line));
            i += 1;
        }
    }
    out
}

/// At `at`, the number of `#` of a raw string's opening (`r#"` gives 1), if one opens there.
fn raw_string_hashes(chars: &[char], at: usize) -> Option<usize> {
    let mut n = 0;
    while chars.get(at + n) == Some(&'#') {
        n += 1;
    }
    (chars.get(at + n) == Some(&'"')).then_some(n)
}

struct Scanned {
    /// (the module the site is in, the top-level module it names, the site)
    sites: Vec<(Vec<String>, String, Site)>,
    /// Modules declared under `#[cfg(test)]`.
    test_modules: Vec<Vec<String>>,
    /// (the module, the place) where the API crate is named.
    api: Vec<(Vec<String>, Site)>,
}

/// Whether `file` (relative to `src`) is one of [`API_EDGES`].
fn is_api_edge(file: &str) -> bool {
    API_EDGES.iter().any(|(edge, _)| covers(edge, file))
}

/// Whether an entry of [`API_EDGES`] (a file, or a folder ending in `/`) covers `file`.
fn covers(edge: &str, file: &str) -> bool {
    if edge.ends_with('/') {
        file.starts_with(edge)
    } else {
        file == edge
    }
}

/// The paths into the crate that one file names.
fn scan(file: &str, module: &[String], text: &str, modules: &BTreeSet<String>) -> Scanned {
    let tokens = tokens(text);
    let ident = |i: usize| match tokens.get(i) {
        Some((Token::Ident(w), _)) => Some(w.as_str()),
        _ => None,
    };
    let is = |i: usize, t: &Token| tokens.get(i).map(|(token, _)| token) == Some(t);
    let mut scanned = Scanned {
        sites: Vec::new(),
        test_modules: Vec::new(),
        api: Vec::new(),
    };
    // Open braces: the inline module each opens, if any, and whether it is test code.
    let mut braces: Vec<(Option<String>, bool)> = Vec::new();
    // A `#[cfg(test)]` item not yet opened or ended: the brace depth it is at.
    let mut pending_test: Option<usize> = None;
    let mut i = 0;
    while i < tokens.len() {
        let in_test = pending_test.is_some() || braces.iter().any(|(_, test)| *test);
        let here: Vec<String> = module
            .iter()
            .cloned()
            .chain(braces.iter().filter_map(|(m, _)| m.clone()))
            .collect();
        match &tokens[i].0 {
            Token::Punct('#')
                if is(i + 1, &Token::Punct('['))
                    && ident(i + 2) == Some("cfg")
                    && is(i + 3, &Token::Punct('('))
                    && ident(i + 4) == Some("test")
                    && is(i + 5, &Token::Punct(')')) =>
            {
                pending_test = Some(braces.len());
                i += 7;
                continue;
            }
            Token::Punct('{') => {
                let inline_module = (i >= 2 && ident(i - 2) == Some("mod"))
                    .then(|| ident(i - 1).map(str::to_string))
                    .flatten();
                braces.push((inline_module, pending_test.take().is_some()));
            }
            Token::Punct('}') => {
                braces.pop();
            }
            Token::Punct(';') if pending_test == Some(braces.len()) => {
                pending_test = None;
                if i >= 2
                    && ident(i - 2) == Some("mod")
                    && let Some(name) = ident(i - 1)
                {
                    let mut declared = here.clone();
                    declared.push(name.to_string());
                    scanned.test_modules.push(declared);
                }
            }
            Token::Ident(word)
                if !is(i.wrapping_sub(1), &Token::PathSep)
                    && (word == "vmscope_proto"
                        || (word == "pb" && is(i + 1, &Token::PathSep))) =>
            {
                let end = path_end(&tokens, i);
                scanned.api.push((
                    here.clone(),
                    Site {
                        file: file.to_string(),
                        line: tokens[i].1,
                        path: render(&tokens[i..end.max(i + 1)]),
                        test: in_test,
                    },
                ));
            }
            Token::Ident(word) if !is(i.wrapping_sub(1), &Token::PathSep) => {
                let mut j = i;
                let mut base: Option<Vec<String>> = None;
                if word == "crate"
                    && is(i + 1, &Token::PathSep)
                    && !is(i.wrapping_sub(1), &Token::Punct('$'))
                {
                    base = Some(Vec::new());
                    j = i + 2;
                } else if word == "super" && is(i + 1, &Token::PathSep) {
                    let mut path = here.clone();
                    while ident(j) == Some("super") && is(j + 1, &Token::PathSep) {
                        path.pop();
                        j += 2;
                    }
                    base = Some(path);
                } else if here.is_empty()
                    && modules.contains(word.as_str())
                    && is(i + 1, &Token::PathSep)
                    && ident(i.wrapping_sub(1)) != Some("mod")
                {
                    // lib.rs naming one of its modules.
                    base = Some(Vec::new());
                }
                if let Some(base) = base {
                    let line = tokens[i].1;
                    let prefix = render(&tokens[i..j]);
                    let targets: Vec<(String, String)> = if !base.is_empty() {
                        vec![(base[0].clone(), prefix.clone())]
                    } else if is(j, &Token::Punct('{')) {
                        group_items(&tokens, j)
                            .into_iter()
                            .map(|(first, text)| (first, format!("{prefix}{text}")))
                            .collect()
                    } else {
                        let mut end = path_end(&tokens, j);
                        if is(end, &Token::Punct('{')) {
                            end = group_end(&tokens, end);
                        }
                        let first = ident(j).unwrap_or("").to_string();
                        vec![(first, format!("{prefix}{}", render(&tokens[j..end])))]
                    };
                    for (first, path) in targets {
                        let to = if base.is_empty() {
                            if modules.contains(&first) {
                                first
                            } else if first == "self" {
                                continue;
                            } else {
                                ROOT.to_string()
                            }
                        } else {
                            first
                        };
                        scanned.sites.push((
                            here.clone(),
                            to,
                            Site {
                                file: file.to_string(),
                                line,
                                path,
                                test: in_test,
                            },
                        ));
                    }
                    i = j.max(i + 1);
                    continue;
                }
            }
            _ => {}
        }
        i += 1;
    }
    scanned
}

/// The end of a path starting at `at`: past its identifiers and `::`, before a group.
fn path_end(tokens: &[(Token, usize)], at: usize) -> usize {
    let mut end = at;
    while let Some((token, _)) = tokens.get(end) {
        match token {
            Token::Ident(_) | Token::PathSep => end += 1,
            _ => break,
        }
    }
    end
}

/// Past the `}` closing the group that opens at `open`.
fn group_end(tokens: &[(Token, usize)], open: usize) -> usize {
    let mut depth = 0;
    for (i, (token, _)) in tokens.iter().enumerate().skip(open) {
        match token {
            Token::Punct('{') => depth += 1,
            Token::Punct('}') => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
    }
    tokens.len()
}

/// The items of a `use` group opening at `open` (`{`): each its first segment and its text.
fn group_items(tokens: &[(Token, usize)], open: usize) -> Vec<(String, String)> {
    let mut items = Vec::new();
    let mut depth = 0;
    let mut start = open + 1;
    let mut i = open;
    while i < tokens.len() {
        match tokens[i].0 {
            Token::Punct('{') => depth += 1,
            Token::Punct('}') => {
                depth -= 1;
                if depth == 0 {
                    items.push(start..i);
                    break;
                }
            }
            Token::Punct(',') if depth == 1 => {
                items.push(start..i);
                start = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    items
        .into_iter()
        .filter(|r| !r.is_empty())
        .filter_map(|r| match &tokens[r.start].0 {
            Token::Ident(first) => Some((first.clone(), render(&tokens[r]))),
            _ => None,
        })
        .collect()
}

/// Tokens written back as text, briefly.
fn render(tokens: &[(Token, usize)]) -> String {
    let mut out = String::new();
    for (token, _) in tokens {
        match token {
            Token::Ident(w) => {
                if out.ends_with(|c: char| c.is_alphanumeric() || c == '_') {
                    out.push(' ');
                }
                out.push_str(w);
            }
            Token::PathSep => out.push_str("::"),
            Token::Punct(',') => out.push_str(", "),
            Token::Punct('}') if out.ends_with(", ") => {
                out.truncate(out.len() - 2);
                out.push('}');
            }
            Token::Punct(c) => out.push(*c),
        }
    }
    out
}

/// `cargo xtask module-graph`: prints the daemon's graph; fails if a circle spans more than
/// one top-level module.
pub fn run(all_sites: bool) -> anyhow::Result<()> {
    let src = crate::root().join("daemon/src");
    let graph = read(&src)?;
    print!("{}", graph.report(all_sites));
    print!("{}", graph.api_report());
    // Test code only adds edges: every circle of the code alone is inside one of these.
    let circles = graph.circles(true);
    if !circles.is_empty() {
        bail!(
            "{} import circle(s) span more than one top-level module of daemon/src",
            circles.len()
        );
    }
    let outside = graph.api_outside_edges();
    if !outside.is_empty() {
        bail!(
            "the API crate is named {} time(s) outside the edges of daemon/src",
            outside.len()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(files: &[(&str, &str)]) -> Graph {
        let sources: Vec<(String, String)> = files
            .iter()
            .map(|(f, t)| (f.to_string(), t.to_string()))
            .collect();
        graph_of(&sources)
    }

    fn edges(graph: &Graph) -> Vec<(&str, &str)> {
        graph
            .edges
            .keys()
            .map(|(a, b)| (a.as_str(), b.as_str()))
            .collect()
    }

    #[test]
    fn a_circle_through_three_folders_is_found() {
        let g = graph(&[
            ("lib.rs", "pub mod a; pub mod b; pub mod c; pub mod d;"),
            ("a/mod.rs", "use crate::b::Thing;\nmod inner;"),
            ("a/inner.rs", "fn f() -> super::super::d::X { todo!() }"),
            ("b/mod.rs", "use crate::{c::{self, Other}, d};"),
            ("c/deep.rs", "fn f() { crate::a::g(); }"),
            (
                "d.rs",
                "// use crate::a::Z;\nconst S: &str = \"crate::a::Z\";",
            ),
        ]);
        assert_eq!(
            edges(&g),
            [("a", "b"), ("a", "d"), ("b", "c"), ("b", "d"), ("c", "a")]
        );
        assert_eq!(g.circles(false), [["a", "b", "c"]]);
        let layers = g.layers();
        assert_eq!(layers, [vec!["crate", "d"], vec!["a + b + c"]]);
    }

    #[test]
    fn test_code_is_apart() {
        let g = graph(&[
            ("lib.rs", "mod a; mod b;"),
            ("a/mod.rs", "use crate::b::X;\n#[cfg(test)]\nmod tests;"),
            ("a/tests.rs", "use crate::b::Y;"),
            (
                "b/mod.rs",
                "pub struct X;\n#[cfg(test)]\nmod tests {\n    use crate::a::Z;\n}\n\
                 #[cfg(test)]\nuse crate::a::W;\nfn f() { crate::a::V; }",
            ),
        ]);
        let b_to_a = &g.edges[&("b".to_string(), "a".to_string())];
        assert_eq!(
            b_to_a.iter().map(|s| (s.line, s.test)).collect::<Vec<_>>(),
            [(4, true), (7, true), (8, false)]
        );
        let a_to_b = &g.edges[&("a".to_string(), "b".to_string())];
        assert_eq!(
            a_to_b
                .iter()
                .map(|s| (s.file.as_str(), s.test))
                .collect::<Vec<_>>(),
            [("a/mod.rs", false), ("a/tests.rs", true)]
        );
        assert_eq!(g.circles(false), [["a", "b"]]);
    }

    #[test]
    fn only_test_code_closing_a_circle_is_no_circle() {
        let g = graph(&[
            ("a.rs", "use crate::b::X;"),
            ("b.rs", "#[cfg(test)]\nmod tests { use crate::a::Y; }"),
        ]);
        assert!(g.circles(false).is_empty());
        assert_eq!(g.circles(true), [["a", "b"]]);
        assert!(g.report(false).contains("Circles that test code closes"));
    }

    #[test]
    fn root_items_and_strings_and_lifetimes() {
        let g = graph(&[
            (
                "lib.rs",
                "pub mod a; pub const LIMIT: u32 = 1;\nfn f() { a::g(); }",
            ),
            (
                "a.rs",
                "fn g<'a>(x: &'a str) -> char { let _ = r#\"crate::b\"#; let _ = '\"'; \
                 crate::LIMIT; 'x' }",
            ),
        ]);
        assert_eq!(edges(&g), [("a", "crate"), ("crate", "a")]);
        assert_eq!(g.circles(false), [["a", "crate"]]);
    }

    /// The daemon: no import circle spans two of its top-level modules, test code included
    /// (issue 24). A type two folders share belongs in the layer under both (`vocab/` for the
    /// shared vocabulary); `cargo xtask module-graph --sites` says which imports make a circle.
    #[test]
    fn the_daemon_has_no_circle_across_folders() {
        let graph = read(&crate::root().join("daemon/src")).expect("daemon/src");
        for module in [
            "codemap",
            "process",
            "symbolize",
            "unwind",
            "vocab",
            "session",
        ] {
            assert!(graph.modules.contains(module), "no {module} in daemon/src");
        }
        assert!(
            graph.edges.len() > 30,
            "too few imports read: {:?}",
            graph.edges.keys()
        );
        assert!(graph.circles(true).is_empty(), "{}", graph.report(true));
    }

    /// The API crate named in the core fails; at an edge, in test code (of the file or in a
    /// file a test module declares), in a comment or a string, it does not.
    #[test]
    fn the_api_crate_is_found_outside_the_edges() {
        let g = graph(&[
            ("lib.rs", "mod server; mod session;"),
            (
                "server/mod.rs",
                "use vmscope_proto::v1 as pb;\nfn f(r: pb::StartSessionRequest) {}",
            ),
            (
                "session/mod.rs",
                "#[cfg(test)]\nmod tests;\n// vmscope_proto in a comment\n\
                 fn f() { let _ = \"pb::Session\"; }\n\
                 fn g() -> vmscope_proto::v1::Session { todo!() }\n\
                 #[cfg(test)]\nmod inline { use vmscope_proto::v1 as pb; }",
            ),
            ("session/tests.rs", "use vmscope_proto::v1 as pb;"),
            (
                "session/manager.rs",
                "use super::*;\nfn h(s: pb::Session) {}\nfn k() { tonic_health::pb::X; }",
            ),
        ]);
        let outside: Vec<(&str, usize, &str)> = g
            .api_outside_edges()
            .into_iter()
            .map(|s| (s.file.as_str(), s.line, s.path.as_str()))
            .collect();
        assert_eq!(
            outside,
            [
                ("session/mod.rs", 5, "vmscope_proto::v1::Session"),
                ("session/manager.rs", 2, "pb::Session"),
            ]
        );
        assert_eq!(g.api.len(), 6, "{:?}", g.api);
        assert!(g.api_report().contains("session/manager.rs:2: pb::Session"));
    }

    /// The daemon names the API crate only at its edges ([`API_EDGES`]) and in tests (issue
    /// 24): its core works on its own types. `cargo xtask module-graph` lists the places.
    #[test]
    fn the_daemon_names_the_api_only_at_its_edges() {
        let graph = read(&crate::root().join("daemon/src")).expect("daemon/src");
        assert!(
            graph.api.iter().any(|site| site.file == "server/mod.rs"),
            "no use of the API read in server/mod.rs"
        );
        assert!(
            graph.api_outside_edges().is_empty(),
            "{}",
            graph.api_report()
        );
        // Every edge is still one: a file that no longer names the API comes off the list.
        for (edge, _) in API_EDGES {
            assert!(
                graph
                    .api
                    .iter()
                    .any(|site| !site.test && covers(edge, &site.file)),
                "{edge} names the API crate no more: take it off API_EDGES"
            );
        }
    }
}
