//! Shortening names to fit a column, without ever making two different names look alike.
//!
//! C++ and Rust names are long mostly in their parameter lists and template arguments, and
//! eliding their middle (VMProfiler's way) keeps head and tail, which for
//! `v8::internal::JsonStringifier::Serialize_<false>(v8::internal::Handle<v8::internal::Object>, ...)`
//! and its overloads is the same namespace and the same last parameter: four different
//! functions read `v8::internal::JsonStringifier...andle<v8::internal::Object>)`. So a name too
//! long for its column is shortened structurally first, least first:
//!
//! 1. parameter lists collapse to `(...)`: `JsonStringifier::Serialize_<false>(...)`;
//! 2. then template (generic) arguments to `<...>`: `std::vector<...>::push_back(...)`;
//! 3. then, if it is still too long, its middle is elided ([`elide_middle`]).
//!
//! The parser knows what is not a list to collapse: `operator()`, `operator<`, `operator->`
//! and their kin, `(anonymous namespace)`, function pointer types' `(*)`, lambdas'
//! `{lambda(int)#1}` (whose `#1` stays), Rust's `<impl Foo for Bar>` and `<T as Trait>` (whose
//! own generic arguments do collapse), `{{closure}}`, `[clone .isra.0]`. A name it cannot read
//! (unbalanced brackets, a Smalltalk `SmallInteger>><`) is only elided.
//!
//! [`shorten_all`] then makes the names of one report unique: two different names that would
//! read the same are both shown less shortened, down to their full names, until they differ.

use std::borrow::Cow;
use std::collections::HashMap;

/// Shortens `name` to at most `width` characters by replacing its middle with "...", keeping
/// head and tail as VMProfiler does (`Sequenceab...m:to:put:`): the head says which class or
/// namespace, the tail which method. Counts chars, never splits one; `width` 0 disables.
pub fn elide_middle(name: &str, width: usize) -> Cow<'_, str> {
    let len = name.chars().count();
    if width == 0 || len <= width {
        return Cow::Borrowed(name);
    }
    // Too narrow for head + "..." to say anything: keep the head.
    if width < 4 {
        return Cow::Owned(name.chars().take(width).collect());
    }
    // Squeak's String>>contractTo:, which VMProfiler uses: the head gets the smaller half.
    let head = (width - 2) / 2;
    let tail = width - head - 3;
    let mut elided: String = name.chars().take(head).collect();
    elided.push_str("...");
    elided.extend(name.chars().skip(len - tail));
    Cow::Owned(elided)
}

/// Narrowest a name is shortened to next to its suffix, however long the suffix.
const MIN_NAME_WIDTH: usize = 8;

/// Shows each label, a name and a suffix (a tag such as ` [libc.so.6]` or ` (inlined)`, kept
/// whole), in at most `width` characters: the name [`shorten`]ed to what the suffix leaves.
/// Where two different labels would then read the same, both are shown less shortened, step by
/// step down to their full names, until every shown label stands for one label only. Equal
/// labels are shown alike. `width` 0 keeps every label whole.
pub fn shorten_all(labels: &[(&str, &str)], width: usize) -> Vec<String> {
    let ladders: Vec<Vec<String>> = labels
        .iter()
        .map(|&(name, suffix)| {
            let name_width = if width == 0 {
                0
            } else {
                width
                    .saturating_sub(suffix.chars().count())
                    .max(MIN_NAME_WIDTH)
            };
            let mut ladder = ladder(name, name_width);
            for rung in &mut ladder {
                rung.push_str(suffix);
            }
            ladder
        })
        .collect();
    let mut step = vec![0; labels.len()];
    loop {
        // Each shown text, the first label it stands for, and whether it stands for another.
        let mut shown: HashMap<&str, (&(&str, &str), bool)> = HashMap::new();
        for (i, label) in labels.iter().enumerate() {
            let text = ladders[i][step[i]].as_str();
            let (first, ambiguous) = shown.entry(text).or_insert((label, false));
            *ambiguous |= *first != label;
        }
        let mut changed = false;
        for (i, ladder) in ladders.iter().enumerate() {
            // Labels whole differ, so this ends with every shown text unambiguous.
            if shown[ladder[step[i]].as_str()].1 && step[i] + 1 < ladder.len() {
                step[i] += 1;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    ladders
        .into_iter()
        .zip(step)
        .map(|(mut ladder, step)| ladder.swap_remove(step))
        .collect()
}

/// `name` in at most `width` characters: whole if it fits, else with its parameter lists
/// collapsed, else its template arguments too, else that elided in the middle. `width` 0
/// keeps it whole.
pub fn shorten(name: &str, width: usize) -> String {
    ladder(name, width).swap_remove(0)
}

/// The ways to show `name` in `width` characters, most shortened first: [`shorten`]'s
/// choice; then the forms that show more of the name than it (each shows all the one before
/// it does), elided to the width; then those forms whole, shortest first; last, the name
/// whole. The forms, from most to least shortened: parameter lists and template arguments
/// collapsed; parameter lists collapsed; template arguments collapsed (parameter lists shown);
/// template arguments collapsed inside parameter lists only; nothing collapsed.
fn ladder(name: &str, width: usize) -> Vec<String> {
    let fits = |s: &str| s.chars().count() <= width;
    if width == 0 || fits(name) {
        return vec![name.to_owned()];
    }
    let Some(nodes) = parse(name) else {
        return vec![elide_middle(name, width).into_owned(), name.to_owned()];
    };
    let form = |params, templates| render(&nodes, Collapse { params, templates });
    let both = form(true, Templates::Everywhere);
    let params = form(true, Templates::Nowhere);
    let templates = form(false, Templates::Everywhere);
    let inside_params = form(false, Templates::InParams);
    // What shows more than the choice: parameter lists collapsed show more than both
    // collapsed, and less than templates collapsed inside them, and so on.
    let (chosen, more) = if fits(&params) {
        (params, vec![inside_params])
    } else if fits(&both) {
        (both, vec![params, templates, inside_params])
    } else {
        (
            elide_middle(&both, width).into_owned(),
            vec![both, params, templates, inside_params],
        )
    };
    let mut wider: Vec<&String> = more.iter().filter(|form| !fits(form)).collect();
    wider.sort_by_key(|form| form.chars().count());
    let mut ladder = vec![chosen];
    let rungs = more
        .iter()
        .map(String::as_str)
        .chain([name])
        .map(|form| elide_middle(form, width).into_owned())
        .chain(wider.into_iter().cloned())
        .chain([name.to_owned()]);
    for rung in rungs {
        if !ladder.contains(&rung) {
            ladder.push(rung);
        }
    }
    ladder
}

/// What a structural shortening collapses.
#[derive(Clone, Copy)]
struct Collapse {
    /// Parameter lists, to `(...)`.
    params: bool,
    /// Template (generic) arguments, to `<...>`.
    templates: Templates,
}

/// Which template arguments a shortening collapses.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Templates {
    Nowhere,
    /// Those inside parameter lists, which say less than the function's own.
    InParams,
    Everywhere,
}

/// A bracketed part of a name.
#[derive(Clone, Copy, PartialEq, Eq)]
enum GroupKind {
    /// A function's parameter list: `(` right after a name or a closing bracket.
    Params,
    /// Template (generic) arguments: `<` right after a name or an operator.
    Template,
    /// Anything else, kept: `(anonymous namespace)`, `(*)`, `{lambda(int)#1}`,
    /// `<impl Foo for Bar>`, `[clone .isra.0]`.
    Other,
}

/// A name read as text and bracketed groups.
enum Node<'a> {
    Text(&'a str),
    Group {
        kind: GroupKind,
        open: char,
        close: char,
        children: Vec<Node<'a>>,
    },
}

/// Operators whose symbols contain brackets, longest first: after `operator`, they are part of
/// the name, not brackets.
const BRACKET_OPERATORS: [&str; 13] = [
    "<=>", "<<=", ">>=", "->*", "()", "[]", "<<", ">>", "<=", ">=", "->", "<", ">",
];

fn is_name_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_' || c == '$'
}

/// Deepest bracket nesting read as structure: real names nest a dozen deep at most, and a
/// hostile one (any binary may be profiled) must not overflow the stack when its tree is
/// written or dropped. A deeper name is only elided.
const MAX_NESTING: usize = 64;

/// A group being read: kind, opening and closing brackets, what it holds so far.
type OpenGroup<'a> = (GroupKind, char, char, Vec<Node<'a>>);

/// Reads `name` into text and groups; `None` when its brackets do not balance, so that it can
/// only be elided.
fn parse<'a>(name: &'a str) -> Option<Vec<Node<'a>>> {
    // Open groups, innermost last: (kind, open, close, children); the top level at the bottom.
    let mut stack: Vec<OpenGroup<'a>> = vec![(GroupKind::Other, ' ', ' ', Vec::new())];
    let mut text_start = 0;
    // Where the last `operator` token ended: a `<` there (or one blank later) opens template
    // arguments (`operator< <Foo>`, `operator()<int>`).
    let mut operator_end = None;
    let mut chars = name.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        let flush = |stack: &mut Vec<OpenGroup<'a>>, end: usize| {
            if text_start < end
                && let Some(top) = stack.last_mut()
            {
                top.3.push(Node::Text(&name[text_start..end]));
            }
        };
        let before = name[..at].chars().next_back();
        let after_name = before.is_some_and(is_name_char);
        if c == 'o' && !after_name && name[at..].starts_with("operator") {
            let rest = &name[at + "operator".len()..];
            if !rest.starts_with(is_name_char) {
                let symbol = BRACKET_OPERATORS
                    .iter()
                    .find(|op| rest.starts_with(*op))
                    .map_or(0, |op| op.len());
                let end = at + "operator".len() + symbol;
                // Skip the token: it stays in the pending text.
                while chars.peek().is_some_and(|&(i, _)| i < end) {
                    chars.next();
                }
                operator_end = Some(end);
                continue;
            }
        }
        match c {
            '(' | '<' | '{' | '[' => {
                let kind = match c {
                    '(' if after_name || matches!(before, Some('>' | ')' | ']')) => {
                        GroupKind::Params
                    }
                    '<' if after_name
                        || operator_end.is_some_and(|end| {
                            end == at || (end + 1 == at && name[end..at] == *" ")
                        }) =>
                    {
                        GroupKind::Template
                    }
                    _ => GroupKind::Other,
                };
                let close = match c {
                    '(' => ')',
                    '<' => '>',
                    '{' => '}',
                    _ => ']',
                };
                if stack.len() > MAX_NESTING {
                    return None;
                }
                flush(&mut stack, at);
                stack.push((kind, c, close, Vec::new()));
                text_start = at + c.len_utf8();
            }
            ')' | '>' | '}' | ']' => {
                let closes = stack.len() > 1 && stack.last().is_some_and(|top| top.2 == c);
                if !closes {
                    // `>` alone is an arrow (`->`, Rust's `fn() -> T`) or a selector
                    // (`Integer>>benchFib`); other closing brackets alone are broken names.
                    if c == '>' {
                        continue;
                    }
                    return None;
                }
                if c == '>' && before == Some('-') {
                    continue;
                }
                flush(&mut stack, at);
                let (kind, open, close, children) = stack.pop()?;
                stack.last_mut()?.3.push(Node::Group {
                    kind,
                    open,
                    close,
                    children,
                });
                text_start = at + c.len_utf8();
            }
            _ => {}
        }
    }
    if stack.len() != 1 {
        return None;
    }
    let (.., mut top) = stack.pop()?;
    if text_start < name.len() {
        top.push(Node::Text(&name[text_start..]));
    }
    Some(top)
}

/// `nodes` written back, with what `collapse` says collapsed.
fn render(nodes: &[Node], collapse: Collapse) -> String {
    let mut out = String::new();
    write_nodes(&mut out, nodes, collapse, false);
    out
}

fn write_nodes(out: &mut String, nodes: &[Node], collapse: Collapse, in_params: bool) {
    for node in nodes {
        match node {
            Node::Text(text) => out.push_str(text),
            Node::Group {
                kind,
                open,
                close,
                children,
            } => {
                let collapsed = match kind {
                    GroupKind::Params => collapse.params,
                    GroupKind::Template => match collapse.templates {
                        Templates::Nowhere => false,
                        Templates::InParams => in_params,
                        Templates::Everywhere => true,
                    },
                    GroupKind::Other => false,
                };
                out.push(*open);
                // `()` says all there is: collapsing it would lengthen it.
                if collapsed && !is_blank(children) {
                    out.push_str("...");
                } else {
                    let in_params = in_params || *kind == GroupKind::Params;
                    write_nodes(out, children, collapse, in_params);
                }
                out.push(*close);
            }
        }
    }
}

fn is_blank(nodes: &[Node]) -> bool {
    nodes
        .iter()
        .all(|n| matches!(n, Node::Text(text) if text.trim().is_empty()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PARAMS: Collapse = Collapse {
        params: true,
        templates: Templates::Nowhere,
    };
    const BOTH: Collapse = Collapse {
        params: true,
        templates: Templates::Everywhere,
    };

    /// Labels without suffixes.
    fn plain<'a>(names: &[&'a str]) -> Vec<(&'a str, &'a str)> {
        names.iter().map(|&name| (name, "")).collect()
    }

    const SERIALIZE: &str = "v8::internal::JsonStringifier::Serialize_<false>(v8::internal::Handle<v8::internal::Object>, bool, v8::internal::Handle<v8::internal::Object>)";

    #[test]
    fn structural_forms() {
        // (name, parameter lists collapsed, template arguments too)
        let table = [
            (
                SERIALIZE,
                "v8::internal::JsonStringifier::Serialize_<false>(...)",
                "v8::internal::JsonStringifier::Serialize_<...>(...)",
            ),
            (
                "node::Start(int, char**)",
                "node::Start(...)",
                "node::Start(...)",
            ),
            (
                "v8::internal::Heap::Scavenge()",
                "v8::internal::Heap::Scavenge()",
                "v8::internal::Heap::Scavenge()",
            ),
            // Qualifiers and clones after the parameters stay.
            (
                "v8::internal::compiler::BytecodeArrayRef::handler_table_size() const",
                "v8::internal::compiler::BytecodeArrayRef::handler_table_size() const",
                "v8::internal::compiler::BytecodeArrayRef::handler_table_size() const",
            ),
            (
                "v8::internal::InternalIndex v8::internal::StringTable::Data::FindEntry<v8::internal::Isolate, v8::internal::SequentialStringKey<unsigned char> >(v8::internal::Isolate*, v8::internal::SequentialStringKey<unsigned char>*, unsigned int) const [clone .isra.0]",
                "v8::internal::InternalIndex v8::internal::StringTable::Data::FindEntry<v8::internal::Isolate, v8::internal::SequentialStringKey<unsigned char> >(...) const [clone .isra.0]",
                "v8::internal::InternalIndex v8::internal::StringTable::Data::FindEntry<...>(...) const [clone .isra.0]",
            ),
            // Operators are names, not brackets.
            (
                "bool std::operator< <char>(std::basic_string<char> const&, char const*)",
                "bool std::operator< <char>(...)",
                "bool std::operator< <...>(...)",
            ),
            (
                "std::ostream& std::operator<< <std::char_traits<char> >(std::ostream&, char const*)",
                "std::ostream& std::operator<< <std::char_traits<char> >(...)",
                "std::ostream& std::operator<< <...>(...)",
            ),
            (
                "std::less<void>::operator()<int, int>(int const&, int const&) const",
                "std::less<void>::operator()<int, int>(...) const",
                "std::less<...>::operator()<...>(...) const",
            ),
            (
                "Foo::operator->() const",
                "Foo::operator->() const",
                "Foo::operator->() const",
            ),
            (
                "std::map<int, int>::operator[](int const&)",
                "std::map<int, int>::operator[](...)",
                "std::map<...>::operator[](...)",
            ),
            (
                "Bar::operator<=>(Bar const&) const",
                "Bar::operator<=>(...) const",
                "Bar::operator<=>(...) const",
            ),
            (
                "operator new[](unsigned long)",
                "operator new[](...)",
                "operator new[](...)",
            ),
            // Not parameter lists: anonymous namespaces, function pointer types.
            (
                "(anonymous namespace)::Walker::visit(Node*)",
                "(anonymous namespace)::Walker::visit(...)",
                "(anonymous namespace)::Walker::visit(...)",
            ),
            (
                "v8::internal::HeapProfiler::RemoveBuildEmbedderGraphCallback(void (*)(v8::Isolate*, v8::EmbedderGraph*, void*), void*)",
                "v8::internal::HeapProfiler::RemoveBuildEmbedderGraphCallback(...)",
                "v8::internal::HeapProfiler::RemoveBuildEmbedderGraphCallback(...)",
            ),
            // Lambdas keep their number.
            (
                "v8::internal::Scanner::ScanIdentifierOrKeywordInner()::{lambda(unsigned int)#1}::operator()(unsigned int) const",
                "v8::internal::Scanner::ScanIdentifierOrKeywordInner()::{lambda(...)#1}::operator()(...) const",
                "v8::internal::Scanner::ScanIdentifierOrKeywordInner()::{lambda(...)#1}::operator()(...) const",
            ),
            // Rust: qualified paths stay, their generic arguments collapse.
            (
                "<tokio_util::codec::framed_impl::FramedImpl<T,U,R> as futures_core::stream::Stream>::poll_next",
                "<tokio_util::codec::framed_impl::FramedImpl<T,U,R> as futures_core::stream::Stream>::poll_next",
                "<tokio_util::codec::framed_impl::FramedImpl<...> as futures_core::stream::Stream>::poll_next",
            ),
            (
                "<alloc::vec::Vec<T,A> as core::ops::drop::Drop>::drop",
                "<alloc::vec::Vec<T,A> as core::ops::drop::Drop>::drop",
                "<alloc::vec::Vec<...> as core::ops::drop::Drop>::drop",
            ),
            (
                "std::rt::lang_start::{{closure}}",
                "std::rt::lang_start::{{closure}}",
                "std::rt::lang_start::{{closure}}",
            ),
            (
                "core::ops::function::FnOnce::call_once{{vtable.shim}}",
                "core::ops::function::FnOnce::call_once{{vtable.shim}}",
                "core::ops::function::FnOnce::call_once{{vtable.shim}}",
            ),
            (
                "<fn(u32) -> u32 as Foo>::call",
                "<fn(...) -> u32 as Foo>::call",
                "<fn(...) -> u32 as Foo>::call",
            ),
            (
                "hashbrown::map::HashMap<K,V,S,A>::insert",
                "hashbrown::map::HashMap<K,V,S,A>::insert",
                "hashbrown::map::HashMap<...>::insert",
            ),
            // Others' names.
            (
                "JS:~<anonymous> node:internal/main/run_main_module:1:1",
                "JS:~<anonymous> node:internal/main/run_main_module:1:1",
                "JS:~<anonymous> node:internal/main/run_main_module:1:1",
            ),
            (
                "Integer>>benchFib",
                "Integer>>benchFib",
                "Integer>>benchFib",
            ),
            (
                "[] in Integer>>benchmark",
                "[] in Integer>>benchmark",
                "[] in Integer>>benchmark",
            ),
        ];
        for (name, params, templates) in table {
            let nodes = parse(name).unwrap_or_else(|| panic!("cannot parse {name}"));
            assert_eq!(render(&nodes, PARAMS), params, "{name}");
            assert_eq!(render(&nodes, BOTH), templates, "{name}");
        }
    }

    #[test]
    fn unreadable_names_are_only_elided() {
        for name in [
            "SmallInteger>><",
            "foo(int",
            "foo)bar(",
            "a<b(c>)",
            "weird]name[",
        ] {
            assert!(parse(name).is_none(), "{name}");
            assert_eq!(shorten(name, 8), elide_middle(name, 8), "{name}");
            assert_eq!(shorten(name, 0), name);
        }
        // Nested too deep to be real (a hostile binary's symbol): elided, no stack overflow.
        let deep = format!("f{}x{}", "<".repeat(100_000), ">".repeat(100_000));
        assert!(parse(&deep).is_none());
        assert_eq!(shorten(&deep, 20).chars().count(), 20);
    }

    #[test]
    fn the_least_shortening_that_fits_wins() {
        // (width, shortened)
        let table = [
            (0, SERIALIZE),
            (200, SERIALIZE),
            (60, "v8::internal::JsonStringifier::Serialize_<false>(...)"),
            (51, "v8::internal::JsonStringifier::Serialize_<...>(...)"),
            (40, "v8::internal::JsonS...rialize_<...>(...)"),
        ];
        for (width, expected) in table {
            let shown = shorten(SERIALIZE, width);
            assert_eq!(shown, expected, "width {width}");
            assert!(width == 0 || shown.chars().count() <= width, "{shown}");
        }
    }

    #[test]
    fn different_names_never_read_the_same() {
        let handle = "v8::internal::Handle<v8::internal::Object>";
        let names = [
            format!("v8::internal::JsonStringifier::Serialize_<false>({handle}, bool, {handle})"),
            format!("v8::internal::JsonStringifier::Serialize_<true>({handle}, bool, {handle})"),
            format!("v8::internal::JsonStringifier::Serialize_<false>({handle}, int, {handle})"),
            format!("v8::internal::JsonStringifier::SerializeJSArray({handle}, {handle})"),
            format!("v8::internal::JsonStringifier::SerializeJSArray({handle}, {handle})"),
            "short".to_owned(),
        ];
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let before: Vec<_> = names.iter().map(|n| elide_middle(n, 60)).collect();
        assert_eq!(before[0], before[1], "what the issue saw");
        let shown = shorten_all(&plain(&names), 60);
        // Overloads differ in their parameters: shown with them, their templates collapsed.
        let handle = "v8::internal::Handle<...>";
        assert_eq!(
            shown,
            [
                format!(
                    "v8::internal::JsonStringifier::Serialize_<false>({handle}, bool, {handle})"
                ),
                "v8::internal::JsonStringifier::Serialize_<true>(...)".to_owned(),
                format!(
                    "v8::internal::JsonStringifier::Serialize_<false>({handle}, int, {handle})"
                ),
                "v8::internal::JsonStringifier::SerializeJSArray(...)".to_owned(),
                "v8::internal::JsonStringifier::SerializeJSArray(...)".to_owned(),
                "short".to_owned(),
            ]
        );
        // Elided whole, these differ.
        let names = [
            "v8::internal::JsonStringifier::Serialize(v8::internal::Handle<v8::internal::Object>)",
            "v8::internal::JsonStringifier::Serialize(v8::internal::Handle<v8::internal::String>)",
        ];
        assert_eq!(
            shorten_all(&plain(&names), 60),
            [
                "v8::internal::JsonStringifier...andle<v8::internal::Object>)",
                "v8::internal::JsonStringifier...andle<v8::internal::String>)"
            ]
        );
        // Only the names whole tell these apart.
        let object = "v8::internal::Handle<v8::internal::Object>";
        let string = "v8::internal::Handle<v8::internal::String>";
        let names = [
            format!("v8::internal::JsonStringifier::Serialize({object}, {object}, bool)"),
            format!("v8::internal::JsonStringifier::Serialize({string}, {object}, bool)"),
        ];
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        assert_eq!(shorten_all(&plain(&names), 60), names);
    }

    #[test]
    fn a_crowd_of_lookalikes_is_told_apart_at_any_width() {
        let mut names = Vec::new();
        for class in [
            "JsonStringifier",
            "JsonParser<unsigned char>",
            "JsonParser<char16_t>",
        ] {
            for method in ["Serialize_<false>", "Serialize_<true>", "SerializeJSArray"] {
                for params in [
                    "",
                    "bool",
                    "int, bool",
                    "v8::internal::Handle<v8::internal::Object>",
                ] {
                    names.push(format!("v8::internal::{class}::{method}({params})"));
                }
            }
        }
        names.push("v8::internal::JsonParser<...>::Serialize_<...>(...)".to_owned());
        names.push(names[5].clone());
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        for width in [0, 1, 4, 10, 20, 30, 40, 50, 60, 80, 120] {
            let shown = shorten_all(&plain(&names), width);
            let mut seen: HashMap<&str, &str> = HashMap::new();
            for (text, name) in shown.iter().zip(&names) {
                let first = seen.entry(text).or_insert(name);
                assert_eq!(first, name, "width {width}: {text:?} stands for both");
            }
        }
    }

    #[test]
    fn a_name_that_reads_like_anothers_short_form_is_told_apart() {
        // C varargs: `f(...)` is a whole name, and `f(int)`'s short form.
        let names = [
            "some::long::namespace::f(...)",
            "some::long::namespace::f(int)",
        ];
        assert_eq!(shorten(names[1], 25), shorten(names[0], 25));
        assert_eq!(
            shorten_all(&plain(&names), 25),
            ["some::long::namespace::f(...)", "some::long:...ace::f(int)"]
        );
        assert_eq!(shorten_all(&plain(&names), 0), names);
    }

    #[test]
    fn elides_ascii_like_vmprofiler() {
        assert_eq!(
            elide_middle("SequenceableCollection>>from:to:put:", 22),
            "Sequenceab...m:to:put:"
        );
        assert_eq!(
            elide_middle("Array>>replaceFrom:to:with:startingAt:", 26),
            "Array>>repla...startingAt:"
        );
        assert_eq!(elide_middle("short", 5), "short");
        assert_eq!(elide_middle("abcdef", 5), "a...f");
        assert_eq!(elide_middle("abcdef", 4), "a...");
        assert_eq!(elide_middle("abcdef", 2), "ab");
        assert_eq!(elide_middle("abcdef", 0), "abcdef");
        let long = "x".repeat(500);
        assert_eq!(elide_middle(&long, 0), long);
        assert_eq!(elide_middle(&long, 60).chars().count(), 60);
    }

    #[test]
    fn elides_multibyte_names_on_char_boundaries() {
        let greek = "Παράδειγμα>>υπολογισμός:μακρύ:όνομα:";
        let elided = elide_middle(greek, 20);
        assert_eq!(elided, "Παράδειγμ...ύ:όνομα:");
        assert_eq!(elided.chars().count(), 20);
        let mixed = "日本語のクラス>>メソッド🦀:引数:";
        let elided = elide_middle(mixed, 11);
        assert_eq!(elided, "日本語の...:引数:");
        for width in 0..=mixed.chars().count() + 1 {
            let elided = elide_middle(mixed, width);
            let expected = if width == 0 {
                mixed.chars().count()
            } else {
                width.min(mixed.chars().count())
            };
            assert_eq!(elided.chars().count(), expected, "width {width}");
        }
    }
}
