//! The gateway's modules import each other without a loop: each top-level
//! module of `src/` (a file or a folder) may use only modules below it, so
//! any one of them can be read, tested and changed without the rest.
//!
//! Read from the source text: every `crate::name` path in a module's files,
//! outside its `#[cfg(test)]` parts, is an arrow to `name`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Graph = BTreeMap<String, BTreeSet<String>>;

#[test]
fn the_gateways_modules_import_each_other_without_a_loop() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = module_graph(&src);
    assert!(
        graph.len() > 10,
        "read only {} modules from {}",
        graph.len(),
        src.display()
    );
    assert!(
        graph["proxy"].contains("settle"),
        "the arrows were not read"
    );
    let loops = loops(&graph);
    assert!(
        loops.is_empty(),
        "modules that import each other in a loop: {loops:?}\narrows: {graph:#?}"
    );
}

#[test]
fn a_loop_is_found() {
    let graph: Graph = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a"]),
        ("d", vec!["a"]),
    ]
    .into_iter()
    .map(|(from, to)| (from.to_owned(), to.into_iter().map(str::to_owned).collect()))
    .collect();
    assert_eq!(loops(&graph), vec![vec!["a", "b", "c"]]);
    let arrows = arrows(
        "use crate::{a::B, c};\nfn f() { crate::d::e(); }\n#[cfg(test)]\nmod tests { use crate::z; }\n",
    );
    assert_eq!(arrows, ["a", "c", "d"].map(str::to_owned).into());
}

/// Top-level module name → the top-level modules its files name.
fn module_graph(src: &Path) -> Graph {
    let mut graph = Graph::new();
    for file in rust_files(src) {
        let relative = file.strip_prefix(src).unwrap_or(&file);
        let Some(first) = relative.components().next() else {
            continue;
        };
        let first = first.as_os_str().to_string_lossy();
        let module = first.trim_end_matches(".rs").to_owned();
        if matches!(module.as_str(), "lib" | "main") || is_test_file(relative) {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        let targets = graph.entry(module.clone()).or_default();
        targets.extend(arrows(&text).into_iter().filter(|to| *to != module));
    }
    graph
}

/// Files that only tests compile: `tests.rs` and anything under `tests/`.
fn is_test_file(relative: &Path) -> bool {
    relative
        .components()
        .any(|c| c.as_os_str() == "tests" || c.as_os_str() == "tests.rs")
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files
}

/// The top-level modules a file's non-test code names with `crate::`,
/// including each name of a grouped `use crate::{a, b::c}`.
fn arrows(text: &str) -> BTreeSet<String> {
    let code = match text.find("#[cfg(test)]") {
        Some(at) => &text[..at],
        None => text,
    };
    let mut found = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = closing_brace(group);
            for item in split_top_level(&group[..end]) {
                found.insert(first_name(item.trim()));
            }
        } else {
            found.insert(first_name(rest));
        }
    }
    found.retain(|name| !name.is_empty() && name != "self");
    found
}

fn first_name(path: &str) -> String {
    path.chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

/// Where the group that `text` opens (just after its `{`) closes.
fn closing_brace(text: &str) -> usize {
    let mut depth = 0;
    for (at, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => return at,
            '}' => depth -= 1,
            _ => {}
        }
    }
    text.len()
}

/// The items of a `use` group, split at its top-level commas.
fn split_top_level(group: &str) -> Vec<&str> {
    let mut items = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (at, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&group[start..at]);
                start = at + 1;
            }
            _ => {}
        }
    }
    items.push(&group[start..]);
    items
}

/// Every group of modules that reach each other (Tarjan's strongly
/// connected components of more than one module), each sorted.
fn loops(graph: &Graph) -> Vec<Vec<String>> {
    struct Walk<'g> {
        graph: &'g Graph,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        found: Vec<Vec<String>>,
    }
    impl<'g> Walk<'g> {
        fn visit(&mut self, node: &'g str) {
            let index = self.index.len();
            self.index.insert(node, index);
            self.low.insert(node, index);
            self.stack.push(node);
            self.on_stack.insert(node);
            for next in self.graph.get(node).into_iter().flatten() {
                let next = next.as_str();
                if !self.index.contains_key(next) {
                    self.visit(next);
                    let low = self.low[node].min(self.low[next]);
                    self.low.insert(node, low);
                } else if self.on_stack.contains(next) {
                    let low = self.low[node].min(self.index[next]);
                    self.low.insert(node, low);
                }
            }
            if self.low[node] == self.index[node] {
                let mut component = Vec::new();
                while let Some(top) = self.stack.pop() {
                    self.on_stack.remove(top);
                    component.push(top.to_owned());
                    if top == node {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for node in graph.keys() {
        if !walk.index.contains_key(node.as_str()) {
            walk.visit(node);
        }
    }
    walk.found
}
