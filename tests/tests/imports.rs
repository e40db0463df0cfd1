//! The house rule that keeps each file's place plain: no import circle between files.
//!
//! Every crate's module tree is read from its `mod` declarations, and every path a
//! file names (`use` trees and paths in code, through `crate::`, `super::`, `self::`
//! or a child module's name) is an arrow to the file of the deepest module it
//! reaches. Two kinds of path are not arrows: a path to the file's own module, and a
//! path to one of its ancestors (a child module using what its parent declares: the
//! parent and the children it declares are one concept over several files, the
//! parent their table of contents). The `#[cfg(test)]` modules inside a file are
//! skipped. Arrows may not form a circle; a failure names the files and the paths
//! that tie them, so the fix (move the shared name to a module both use) is plain.
//!
//! The console's ES modules are held to the same rule: each `from './x.js'` is an
//! arrow to that file.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The crate roots of the workspace's hand-written code.
const CRATE_ROOTS: &[&str] = &[
    "host-example/src/main.rs",
    "host-example/src/cli/main.rs",
    "jobs-proto/src/lib.rs",
    "jobs-role/src/lib.rs",
    "registry-stub/src/lib.rs",
    "workflow/src/lib.rs",
    "tests/src/lib.rs",
    "tests/src/bin/bench/main.rs",
    "tests/src/bin/chaos/main.rs",
    "tests/src/bin/flame.rs",
];

/// The folders those crates' files live in: every `.rs` file under them must be
/// reached from a root, or this check would pass without reading it.
const SOURCE_FOLDERS: &[&str] = &[
    "host-example/src",
    "jobs-proto/src",
    "jobs-role/src",
    "registry-stub/src",
    "workflow/src",
    "tests/src",
];

/// One module with a file of its own.
struct Module {
    file: PathBuf,
    parent: Option<usize>,
    children: BTreeMap<String, usize>,
    /// The names its `use` statements bring in (any visibility: a re-export, or an
    /// import its children may name through `super::`), with the path each stands for.
    uses: BTreeMap<String, Vec<String>>,
    /// Every path the file names (`use` trees expanded).
    paths: Vec<Vec<String>>,
}

/// Source with comments, strings and character literals blanked, and the
/// `#[cfg(test)]` modules cut out.
fn code_of(source: &str) -> String {
    let chars: Vec<char> = source.chars().collect();
    let mut out = String::with_capacity(source.len());
    let mut i = 0;
    while i < chars.len() {
        let at = |k: usize| chars.get(k).copied().unwrap_or('\0');
        match chars[i] {
            '/' if at(i + 1) == '/' => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '/' if at(i + 1) == '*' => {
                let mut depth = 0;
                while i < chars.len() {
                    if chars[i] == '/' && at(i + 1) == '*' {
                        depth += 1;
                        i += 2;
                    } else if chars[i] == '*' && at(i + 1) == '/' {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        i += 1;
                    }
                }
            }
            'r' if (at(i + 1) == '"' || at(i + 1) == '#')
                && !out.ends_with(|c: char| c.is_alphanumeric() || c == '_') =>
            {
                let mut hashes = 0;
                let mut j = i + 1;
                while chars.get(j) == Some(&'#') {
                    hashes += 1;
                    j += 1;
                }
                if chars.get(j) != Some(&'"') {
                    out.push('r');
                    i += 1;
                    continue;
                }
                j += 1;
                let closing: Vec<char> = std::iter::once('"')
                    .chain(std::iter::repeat_n('#', hashes))
                    .collect();
                while j < chars.len() && !chars[j..].starts_with(&closing) {
                    j += 1;
                }
                out.push_str("\"\"");
                i = j + closing.len();
            }
            '"' => {
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    i += if chars[i] == '\\' { 2 } else { 1 };
                }
                out.push_str("\"\"");
                i += 1;
            }
            // A character literal ('x', '\n', '\u{7f}'); a lifetime ('a) has no closing quote.
            '\'' if at(i + 1) == '\\' => {
                i += 2;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                out.push_str("' '");
                i += 1;
            }
            '\'' if at(i + 2) == '\'' => {
                out.push_str("' '");
                i += 3;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    cut_test_modules(&out)
}

fn cut_test_modules(code: &str) -> String {
    let mut out = String::new();
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at + "#[cfg(test)]".len()..];
        let head_end = after.find(['{', ';']).unwrap_or(after.len());
        if after.trim_start().starts_with("mod") && after[head_end..].starts_with('{') {
            let mut depth = 0;
            let mut end = after.len();
            for (k, c) in after[head_end..].char_indices() {
                depth += match c {
                    '{' => 1,
                    '}' => -1,
                    _ => 0,
                };
                if depth == 0 {
                    end = head_end + k + 1;
                    break;
                }
            }
            rest = &after[end..];
        } else {
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The names of the file modules a file declares (`mod name;`).
fn declared_modules(code: &str) -> Vec<String> {
    let words: Vec<&str> = code
        .split(|c: char| !is_ident(c) && c != ';' && c != '{')
        .filter(|w| !w.is_empty())
        .collect();
    let mut found = Vec::new();
    for pair in words.windows(2) {
        if pair[0] == "mod"
            && let Some(name) = pair[1].strip_suffix(';')
        {
            found.push(name.to_owned());
        }
    }
    found
}

/// Every path the code names (`use` trees expanded; elsewhere, paths of two or more
/// segments), and the names its `use` statements bring in.
fn paths_in(code: &str) -> (Vec<Vec<String>>, BTreeMap<String, Vec<String>>) {
    let mut paths = Vec::new();
    let mut uses = BTreeMap::new();
    let tokens = tokenize(code);
    let mut i = 0;
    while i < tokens.len() {
        if tokens[i] == "use" {
            let end = tokens[i..]
                .iter()
                .position(|t| t == ";")
                .map_or(tokens.len(), |p| i + p);
            let mut named = Vec::new();
            expand(&tokens[i + 1..end], &[], &mut named);
            for (path, name) in named {
                if !name.is_empty() && name != "_" {
                    uses.insert(name, path.clone());
                }
                paths.push(path);
            }
            i = end;
            continue;
        }
        if is_ident(tokens[i].chars().next().unwrap_or(' ')) {
            let mut path = vec![tokens[i].clone()];
            let mut j = i + 1;
            while j + 1 < tokens.len()
                && tokens[j] == "::"
                && is_ident(tokens[j + 1].chars().next().unwrap_or(' '))
            {
                path.push(tokens[j + 1].clone());
                j += 2;
            }
            if path.len() > 1 {
                paths.push(path);
            }
            i = j;
            continue;
        }
        i += 1;
    }
    (paths, uses)
}

fn tokenize(code: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    let mut chars = code.chars().peekable();
    while let Some(c) = chars.next() {
        if is_ident(c) {
            let mut word = c.to_string();
            while let Some(&n) = chars.peek().filter(|n| is_ident(**n)) {
                word.push(n);
                chars.next();
            }
            tokens.push(word);
        } else if c == ':' && chars.peek() == Some(&':') {
            chars.next();
            tokens.push("::".into());
        } else if !c.is_whitespace() {
            tokens.push(c.to_string());
        }
    }
    tokens
}

/// Expands a `use` tree (`crate::a::{b, c::d as e, self}`) under `prefix` into its
/// paths, each with the name it brings in.
fn expand(tree: &[String], prefix: &[String], out: &mut Vec<(Vec<String>, String)>) {
    let mut path = prefix.to_vec();
    let mut alias = None;
    let mut i = 0;
    while i < tree.len() {
        match tree[i].as_str() {
            "::" => i += 1,
            "{" => {
                let mut depth = 0;
                let mut start = i + 1;
                for j in i..tree.len() {
                    match tree[j].as_str() {
                        "{" => depth += 1,
                        "}" => depth -= 1,
                        "," if depth == 1 => {
                            expand(&tree[start..j], &path, out);
                            start = j + 1;
                        }
                        _ => {}
                    }
                    if depth == 0 {
                        expand(&tree[start..j], &path, out);
                        break;
                    }
                }
                return;
            }
            "as" => {
                alias = tree.get(i + 1).cloned();
                break;
            }
            "*" | "pub" | "(" => break,
            word => {
                path.push(word.to_owned());
                i += 1;
            }
        }
    }
    if path.last().is_some_and(|last| last == "self") {
        path.pop();
    }
    if !tree.is_empty() && !path.is_empty() {
        let name = alias.or_else(|| path.last().cloned()).unwrap_or_default();
        out.push((path, name));
    }
}

/// Every module of the crate rooted at `root_file`, read from its `mod` declarations.
fn read_tree(root_file: &Path) -> Vec<Module> {
    let mut modules = Vec::new();
    let mut pending = vec![(Vec::new(), root_file.to_owned(), None)];
    while let Some((path, file, parent)) = pending.pop() {
        let code = code_of(
            &std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display())),
        );
        let (paths, uses) = paths_in(&code);
        let index = modules.len();
        if let Some(parent) = parent {
            let name: &String = path.last().expect("a child has a name");
            let parent: &mut Module = &mut modules[parent];
            parent.children.insert(name.clone(), index);
        }
        let stem = file
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default();
        let dir = match stem {
            "lib" | "main" | "mod" => file.parent().expect("a parent").to_owned(),
            other => file.parent().expect("a parent").join(other),
        };
        for name in declared_modules(&code) {
            let flat = dir.join(format!("{name}.rs"));
            let nested = dir.join(&name).join("mod.rs");
            let child_file = [flat, nested]
                .into_iter()
                .find(|f| f.exists())
                .unwrap_or_else(|| {
                    panic!(
                        "{} declares `mod {name}` and neither {name}.rs nor {name}/mod.rs is beside it: this check reads no other layout",
                        file.display()
                    )
                });
            let mut child_path = path.clone();
            child_path.push(name);
            pending.push((child_path, child_file, Some(index)));
        }
        modules.push(Module {
            file,
            parent,
            children: BTreeMap::new(),
            uses,
            paths,
        });
    }
    modules
}

/// The module a path written in module `from` leads to: through child modules, and
/// through the names a module's `use` statements bring in (a re-export leads to where
/// the item is). `None` for a path outside the crate.
fn resolve(modules: &[Module], from: usize, path: &[String], depth: usize) -> Option<usize> {
    if depth > 16 || path.is_empty() {
        return None;
    }
    let (mut at, rest) = match path[0].as_str() {
        "crate" => (0, &path[1..]),
        "self" => (from, &path[1..]),
        "super" => {
            let mut at = from;
            let mut k = 0;
            while path.get(k).is_some_and(|s| s == "super") {
                at = modules[at].parent?;
                k += 1;
            }
            (at, &path[k..])
        }
        first if modules[from].children.contains_key(first) => (from, path),
        first => {
            let used = modules[from].uses.get(first)?;
            if used.as_slice() == path {
                return None;
            }
            let at = resolve(modules, from, used, depth + 1)?;
            (at, &path[1..])
        }
    };
    for (k, name) in rest.iter().enumerate() {
        if let Some(&child) = modules[at].children.get(name) {
            at = child;
            continue;
        }
        if let Some(used) = modules[at].uses.get(name)
            && let Some(target) = resolve(modules, at, used, depth + 1)
            && target != at
        {
            return resolve_from(modules, target, &rest[k + 1..], depth + 1);
        }
        break;
    }
    Some(at)
}

/// [`resolve`] of the rest of a path from module `at`.
fn resolve_from(modules: &[Module], at: usize, rest: &[String], depth: usize) -> Option<usize> {
    if rest.is_empty() {
        return Some(at);
    }
    let mut path = vec!["self".to_owned()];
    path.extend_from_slice(rest);
    resolve(modules, at, &path, depth)
}

fn is_ancestor(modules: &[Module], ancestor: usize, mut of: usize) -> bool {
    loop {
        if of == ancestor {
            return true;
        }
        match modules[of].parent {
            Some(parent) => of = parent,
            None => return false,
        }
    }
}

/// The `.rs` files under `dir`.
fn rust_files(dir: &Path, found: &mut BTreeSet<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a source folder").flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.insert(path);
        }
    }
}

#[test]
fn no_two_files_import_each_other_even_round_a_circle() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root");
    let mut arrows: BTreeMap<PathBuf, BTreeMap<PathBuf, String>> = BTreeMap::new();
    let mut reached = BTreeSet::new();
    let mut on_disk = BTreeSet::new();
    for dir in SOURCE_FOLDERS {
        rust_files(&workspace.join(dir), &mut on_disk);
    }
    for root in CRATE_ROOTS {
        let modules = read_tree(&workspace.join(root));
        for (index, module) in modules.iter().enumerate() {
            reached.insert(module.file.clone());
            for path in &module.paths {
                let Some(target) = resolve(&modules, index, path, 0) else {
                    continue;
                };
                if is_ancestor(&modules, target, index) {
                    continue;
                }
                arrows
                    .entry(module.file.clone())
                    .or_default()
                    .entry(modules[target].file.clone())
                    .or_insert_with(|| path.join("::"));
            }
        }
    }
    let unread: Vec<String> = on_disk
        .difference(&reached)
        .map(|file| short(workspace, file))
        .collect();
    assert!(
        unread.is_empty(),
        "no crate's module tree reaches these files, so this check cannot read them: {unread:?}"
    );
    let circles = strongly_connected(&arrows);
    let shown: Vec<String> = circles
        .iter()
        .map(|circle| {
            let ties: Vec<String> = circle
                .iter()
                .flat_map(|from| {
                    arrows[from]
                        .iter()
                        .filter(|(to, _)| circle.contains(*to))
                        .map(move |(to, named)| {
                            format!(
                                "  {} -> {} ({named})",
                                short(workspace, from),
                                short(workspace, to)
                            )
                        })
                })
                .collect();
            format!("a circle of {} files:\n{}", circle.len(), ties.join("\n"))
        })
        .collect();
    assert!(
        circles.is_empty(),
        "{}\nmove the shared names into a module both use",
        shown.join("\n")
    );
}

#[test]
fn no_two_console_modules_import_each_other_even_round_a_circle() {
    let console = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .join("jobs-role/console");
    let mut scripts = vec![console.join("console.js")];
    for entry in std::fs::read_dir(console.join("js")).expect("console/js") {
        scripts.push(entry.expect("an entry").path());
    }
    let mut arrows: BTreeMap<PathBuf, BTreeMap<PathBuf, String>> = BTreeMap::new();
    for script in &scripts {
        let text = std::fs::read_to_string(script).expect("read");
        assert!(
            !text.contains("import("),
            "{}: a dynamic import() is not read by this check",
            script.display()
        );
        for line in text.lines().map(str::trim) {
            // `import { a } from './x.js';`, `} from "./x.js";`, `import './x.js';`
            let spec = if line.starts_with("import ") || line.starts_with("} from ") {
                match line.rsplit_once(" from ") {
                    Some((_, spec)) => spec,
                    None => line.trim_start_matches("import "),
                }
            } else {
                continue;
            };
            let relative = spec.trim_end_matches(';').trim_matches(['\'', '"']);
            if !relative.starts_with('.') {
                continue;
            }
            let file = script
                .parent()
                .expect("a parent")
                .join(relative)
                .canonicalize()
                .unwrap_or_else(|e| panic!("{} imports {relative}: {e}", script.display()));
            arrows
                .entry(script.canonicalize().expect("exists"))
                .or_default()
                .insert(file, relative.to_owned());
        }
    }
    let count: usize = arrows.values().map(BTreeMap::len).sum();
    assert!(count > 20, "{count} imports read");
    let circles = strongly_connected(&arrows);
    assert!(
        circles.is_empty(),
        "console modules importing each other: {circles:?}"
    );
}

fn short(workspace: &Path, file: &Path) -> String {
    file.strip_prefix(workspace)
        .unwrap_or(file)
        .display()
        .to_string()
}

/// The groups of two or more files that reach each other (Tarjan's algorithm).
fn strongly_connected(
    arrows: &BTreeMap<PathBuf, BTreeMap<PathBuf, String>>,
) -> Vec<BTreeSet<PathBuf>> {
    struct State<'a> {
        arrows: &'a BTreeMap<PathBuf, BTreeMap<PathBuf, String>>,
        index: BTreeMap<&'a PathBuf, usize>,
        low: BTreeMap<&'a PathBuf, usize>,
        stack: Vec<&'a PathBuf>,
        on_stack: BTreeSet<&'a PathBuf>,
        found: Vec<BTreeSet<PathBuf>>,
    }
    fn visit<'a>(state: &mut State<'a>, file: &'a PathBuf) {
        let n = state.index.len();
        state.index.insert(file, n);
        state.low.insert(file, n);
        state.stack.push(file);
        state.on_stack.insert(file);
        if let Some(targets) = state.arrows.get(file) {
            for target in targets.keys() {
                if !state.index.contains_key(target) {
                    visit(state, target);
                    let low = state.low[target].min(state.low[file]);
                    state.low.insert(file, low);
                } else if state.on_stack.contains(target) {
                    let low = state.index[target].min(state.low[file]);
                    state.low.insert(file, low);
                }
            }
        }
        if state.low[file] == state.index[file] {
            let mut group = BTreeSet::new();
            while let Some(top) = state.stack.pop() {
                state.on_stack.remove(top);
                group.insert(top.clone());
                if top == file {
                    break;
                }
            }
            if group.len() > 1 {
                state.found.push(group);
            }
        }
    }
    let mut state = State {
        arrows,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for file in arrows.keys() {
        if !state.index.contains_key(file) {
            visit(&mut state, file);
        }
    }
    state.found
}

#[test]
fn a_use_tree_expands_to_each_path_it_names() {
    let mut paths = Vec::new();
    expand(
        &tokenize("crate::a::{b, c::{d, e as f}, self}"),
        &[],
        &mut paths,
    );
    let joined: Vec<String> = paths
        .iter()
        .map(|(p, name)| format!("{} as {name}", p.join("::")))
        .collect();
    assert_eq!(
        joined,
        [
            "crate::a::b as b",
            "crate::a::c::d as d",
            "crate::a::c::e as f",
            "crate::a as a"
        ]
    );
}

#[test]
fn comments_strings_and_test_modules_name_no_path() {
    let code = code_of(
        "// crate::a::b\nlet s = \"crate::c::d\"; let c = '\"'; let r = r#\"crate::e\"#;\n#[cfg(test)]\nmod tests { use crate::f::g; }\nuse crate::h::i;",
    );
    let joined: Vec<String> = paths_in(&code).0.iter().map(|p| p.join("::")).collect();
    assert_eq!(joined, ["crate::h::i"]);
}
