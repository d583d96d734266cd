//! The pooler's module structure, read from its source: which top-level modules of
//! `crates/pgcorral/src` use which (through `crate::` paths, tests left out), and the sets of
//! modules that reach each other. docs/architecture.md carries this list between its
//! `module-graph` markers and must match it; no set of mutually dependent modules may grow past
//! [`MAX_KNOT`]. `UPDATE_MODULE_GRAPH=1 cargo test -p pgcorral --test module_graph` rewrites the
//! list in the docs after a change of structure (then say why in the prose beside it).

mod source;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use source::rust_files;

/// The largest set of modules allowed to depend on each other (issue 35: from 15 to 7 or fewer;
/// issue 49: a ladder, with only the pool and its cluster, or config and TLS, in a pair).
const MAX_KNOT: usize = 2;

const BEGIN: &str = "<!-- module-graph:begin -->\n";
const END: &str = "<!-- module-graph:end -->";

type Graph = BTreeMap<String, BTreeSet<String>>;

/// A file's code without its comments and without its unit tests (a trailing
/// `#[cfg(test)] mod ...` and files that are tests themselves).
fn code_of(path: &Path, text: &str) -> String {
    let name = path.file_name().unwrap().to_str().unwrap();
    if name == "tests.rs" || name.ends_with("_tests.rs") {
        return String::new();
    }
    let text = match text.find("#[cfg(test)]\nmod ") {
        Some(i) => &text[..i],
        None => text,
    };
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The top-level modules a piece of code names after `crate::`, directly (`crate::pool::X`)
/// or in a group (`use crate::{pool::X, route}`).
fn named_modules(code: &str) -> BTreeSet<String> {
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut found = BTreeSet::new();
    for (i, _) in code.match_indices("crate::") {
        let rest = &code[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0;
            let mut start = true;
            for (j, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => start = true,
                    c if c.is_whitespace() => {}
                    _ if start => {
                        let name = ident(&group[j..]);
                        if !name.is_empty() {
                            found.insert(name);
                        }
                        start = false;
                    }
                    _ => {}
                }
            }
        } else {
            let name = ident(rest);
            if !name.is_empty() {
                found.insert(name);
            }
        }
    }
    found
}

/// The top-level modules of `src` and those each one uses.
fn graph(src: &Path) -> Graph {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut g = Graph::new();
    for f in &files {
        let rel = f.strip_prefix(src).unwrap();
        let first = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_str()
            .unwrap();
        if matches!(first, "lib.rs" | "main.rs") {
            continue;
        }
        let module = first.trim_end_matches(".rs").to_string();
        let code = code_of(f, &std::fs::read_to_string(f).unwrap());
        let uses = g.entry(module.clone()).or_default();
        uses.extend(named_modules(&code).into_iter().filter(|m| *m != module));
    }
    let modules: BTreeSet<String> = g.keys().cloned().collect();
    for uses in g.values_mut() {
        uses.retain(|m| modules.contains(m));
    }
    g
}

/// The sets of two or more modules that reach each other (strongly connected components).
fn knots(g: &Graph) -> Vec<BTreeSet<String>> {
    let reach = |from: &str| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.to_string()];
        while let Some(m) = todo.pop() {
            for n in &g[&m] {
                if seen.insert(n.clone()) {
                    todo.push(n.clone());
                }
            }
        }
        seen
    };
    let reached: BTreeMap<&String, BTreeSet<String>> = g.keys().map(|m| (m, reach(m))).collect();
    let mut out: Vec<BTreeSet<String>> = Vec::new();
    for m in g.keys() {
        if out.iter().any(|k| k.contains(m)) {
            continue;
        }
        let knot: BTreeSet<String> = g
            .keys()
            .filter(|n| *n == m || (reached[m].contains(*n) && reached[*n].contains(m)))
            .cloned()
            .collect();
        if knot.len() > 1 {
            out.push(knot);
        }
    }
    out
}

/// The list as docs/architecture.md shows it.
fn listing(g: &Graph) -> String {
    let mut s = String::from("```text\n");
    for (m, uses) in g {
        let uses: Vec<&str> = uses.iter().map(String::as_str).collect();
        match uses.is_empty() {
            true => s.push_str(&format!("{m}\n")),
            false => s.push_str(&format!("{m} -> {}\n", uses.join(", "))),
        }
    }
    for k in knots(g) {
        let k: Vec<&str> = k.iter().map(String::as_str).collect();
        s.push_str(&format!("reach each other: {}\n", k.join(", ")));
    }
    s.push_str("```\n");
    s
}

#[test]
fn the_documented_module_graph_is_the_code_s() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let g = graph(&crate_dir.join("src"));
    let biggest = knots(&g).iter().map(BTreeSet::len).max().unwrap_or(0);
    assert!(
        biggest <= MAX_KNOT,
        "{biggest} modules depend on each other (at most {MAX_KNOT}):\n{}",
        listing(&g)
    );
    let doc_path = crate_dir.join("../../docs/architecture.md");
    let doc = std::fs::read_to_string(&doc_path).unwrap();
    let (Some(b), Some(e)) = (doc.find(BEGIN), doc.find(END)) else {
        panic!("docs/architecture.md has no {BEGIN:?} ... {END:?} markers");
    };
    let documented = &doc[b + BEGIN.len()..e];
    let actual = listing(&g);
    if documented != actual {
        if std::env::var_os("UPDATE_MODULE_GRAPH").is_some() {
            let updated = format!("{}{actual}{}", &doc[..b + BEGIN.len()], &doc[e..]);
            std::fs::write(&doc_path, updated).unwrap();
            return;
        }
        panic!(
            "docs/architecture.md's module graph is out of date; it is now:\n{actual}\n\
             (UPDATE_MODULE_GRAPH=1 cargo test -p pgcorral --test module_graph writes it)"
        );
    }
}

#[test]
fn modules_named_in_paths_and_groups_are_found() {
    let code = "use crate::pool::{Checkout, Pool};\nuse crate::{route::{self, Target}, rows};\n\
                fn f() { crate::clock::now(); }";
    let found: Vec<String> = named_modules(code).into_iter().collect();
    assert_eq!(found, ["clock", "pool", "route", "rows"]);
    let mut g = Graph::new();
    for (m, uses) in [
        ("a", &["b"][..]),
        ("b", &["c"]),
        ("c", &["a"]),
        ("d", &["a"]),
    ] {
        g.insert(m.into(), uses.iter().map(|u| u.to_string()).collect());
    }
    let k = knots(&g);
    assert_eq!(k.len(), 1);
    assert_eq!(k[0].iter().collect::<Vec<_>>(), ["a", "b", "c"]);
}
