//! The pooler's long functions, read from its source: every function of `crates/pgcorral/src`
//! (methods and nested functions included, unit tests left out) that runs over [`LIMIT`] lines
//! must be one of the few listed in [`KEPT`], each with the reason it stays whole (issue 49: at
//! most five). A new long function fails here; split it, or say why it may not be split.

mod source;

use std::path::Path;

use source::rust_files;

use syn::visit::Visit;

/// Lines from a function's `fn` to its closing brace above which it must be listed.
const LIMIT: usize = 150;

/// The functions allowed over [`LIMIT`], as `file (from src/) :: name`, and why each stays whole.
const KEPT: &[(&str, &str, &str)] = &[
    (
        "relay/mod.rs",
        "relay",
        "the one-server relay loop: one `select` over both sides whose arms share the header-only \
         forwarding state; splitting it would add calls or moves on the hot path (measured)",
    ),
    (
        "relay/scan.rs",
        "scan_server",
        "one match over the server's message types, each arm a few lines of state tracking; \
         read as a table, and it is the hot path",
    ),
    (
        "relay/scan.rs",
        "scan_client",
        "one match over the client's message types, as scan_server for the other direction",
    ),
    (
        "metrics/collect.rs",
        "encode",
        "the Prometheus families in the order they are exposed, one short block each; a list, \
         not logic",
    ),
    (
        "config/pgbouncer_general.rs",
        "map",
        "pgbouncer.ini's [pgbouncer] keys mapped one per line onto the config; a table",
    ),
];

/// Collects functions over the limit, skipping `#[cfg(test)]` items.
struct Long {
    found: Vec<(String, usize)>,
}

fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        (a.path().is_ident("cfg") || a.path().is_ident("test"))
            && quote_of(a).replace(' ', "").contains("test")
    })
}

fn quote_of(a: &syn::Attribute) -> String {
    match &a.meta {
        syn::Meta::List(l) => l.tokens.to_string(),
        syn::Meta::Path(p) => p.get_ident().map(|i| i.to_string()).unwrap_or_default(),
        syn::Meta::NameValue(_) => String::new(),
    }
}

impl Long {
    fn note(&mut self, name: &syn::Ident, block: &syn::Block, start: proc_macro2::Span) {
        let lines = block.brace_token.span.close().end().line - start.start().line + 1;
        if lines > LIMIT {
            self.found.push((name.to_string(), lines));
        }
    }
}

impl<'a> Visit<'a> for Long {
    fn visit_item_mod(&mut self, m: &'a syn::ItemMod) {
        if !is_test(&m.attrs) {
            syn::visit::visit_item_mod(self, m);
        }
    }
    fn visit_item_fn(&mut self, f: &'a syn::ItemFn) {
        if is_test(&f.attrs) {
            return;
        }
        let start = syn::spanned::Spanned::span(&f.sig.fn_token);
        self.note(&f.sig.ident, &f.block, start);
        syn::visit::visit_item_fn(self, f);
    }
    fn visit_impl_item_fn(&mut self, f: &'a syn::ImplItemFn) {
        if is_test(&f.attrs) {
            return;
        }
        let start = syn::spanned::Spanned::span(&f.sig.fn_token);
        self.note(&f.sig.ident, &f.block, start);
        syn::visit::visit_impl_item_fn(self, f);
    }
    fn visit_trait_item_fn(&mut self, f: &'a syn::TraitItemFn) {
        if let Some(block) = &f.default {
            let start = syn::spanned::Spanned::span(&f.sig.fn_token);
            self.note(&f.sig.ident, block, start);
        }
        syn::visit::visit_trait_item_fn(self, f);
    }
}

/// Every function over the limit, as (file from src/, name, lines).
fn long_functions(src: &Path) -> Vec<(String, String, usize)> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    let mut out = Vec::new();
    for path in files {
        let name = path.file_name().unwrap().to_str().unwrap();
        if name == "tests.rs" || name.ends_with("_tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let file = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let mut long = Long { found: Vec::new() };
        long.visit_file(&file);
        let rel = path
            .strip_prefix(src)
            .unwrap()
            .to_str()
            .unwrap()
            .replace('\\', "/");
        for (f, lines) in long.found {
            out.push((rel.clone(), f, lines));
        }
    }
    out
}

#[test]
fn only_the_listed_functions_run_over_the_limit() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let found = long_functions(&src);
    let unlisted: Vec<String> = found
        .iter()
        .filter(|(file, f, _)| !KEPT.iter().any(|(kf, kn, _)| kf == file && kn == f))
        .map(|(file, f, n)| format!("{file} :: {f} ({n} lines)"))
        .collect();
    assert!(
        unlisted.is_empty(),
        "functions over {LIMIT} lines that are not listed in KEPT (split them):\n{}",
        unlisted.join("\n")
    );
    let stale: Vec<String> = KEPT
        .iter()
        .filter(|(kf, kn, _)| !found.iter().any(|(file, f, _)| file == kf && f == kn))
        .map(|(kf, kn, _)| format!("{kf} :: {kn}"))
        .collect();
    assert!(
        stale.is_empty(),
        "listed in KEPT but no longer over {LIMIT} lines (take them off the list):\n{}",
        stale.join("\n")
    );
    assert!(KEPT.len() <= 5, "at most five long functions may be kept");
}

#[test]
fn a_long_function_is_found_and_a_test_one_is_not() {
    let body = "    let x = 1;\n".repeat(LIMIT);
    let code = format!(
        "fn long() {{\n{body}}}\nimpl S {{ fn short() {{}} }}\n\
         #[cfg(test)]\nmod tests {{ fn also_long() {{\n{body}}} }}\n"
    );
    let file = syn::parse_file(&code).unwrap();
    let mut long = Long { found: Vec::new() };
    long.visit_file(&file);
    assert_eq!(long.found, [("long".to_string(), LIMIT + 2)]);
}
